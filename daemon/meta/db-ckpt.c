/*
 * Checkpoints of the database's WAL, off the writer's path. SQLite's own
 * automatic checkpoint runs inside the commit that crosses its threshold:
 * that commit, and every add whose reply waits for it, then pays for
 * copying the WAL into the database file and for two syncs (some
 * milliseconds, against a few hundred microseconds for a commit). Here the
 * writer's commit hook only wakes a thread of the database's own, which
 * runs a passive checkpoint on a connection of its own while the writer goes
 * on committing.
 *
 * The WAL starts over only when the writer begins a transaction with every
 * frame copied and no reader in the WAL, which a steady load seldom leaves
 * it, whoever checkpoints: with SQLite's own checkpoint the WAL grew to 100
 * MB in 25 seconds of durable adds, beside the thread without more to 300
 * MB in 8. So once the WAL holds DB_WAL_RESTART frames the thread's
 * checkpoint is a restarting one: it holds the writer back while it copies
 * the little that is left and waits, up to DB_RESTART_WAIT_MS, for readers
 * to leave the WAL, so that the next transaction starts it over. When that
 * wait runs out, the next checkpoint tries again.
 *
 * A passive checkpoint never waits for readers or the writer: it copies
 * what no reader still needs, and the writer starts the WAL over at its next
 * commit once everything is copied. The connection's synchronous setting is
 * the writer's, so a checkpoint syncs the WAL before the database file is
 * changed and the file after, as the writer's own would.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"
#include "daemon/base/log.h"

/* WAL frames (pages) after which a checkpoint is asked for: SQLite's default. */
#define DB_WAL_CHECKPOINT 1000
/* WAL frames (16 MiB of 1 KiB pages) from which a checkpoint makes the WAL start over. */
#define DB_WAL_RESTART (16 * DB_WAL_CHECKPOINT)
/* How long such a checkpoint waits for the writer and for readers to leave the WAL. */
#define DB_RESTART_WAIT_MS 20

/* After every commit of the writer, on the writer's thread. */
static int wal_hook(void *arg, sqlite3 *c, const char *schema, int frames)
{
    struct db *db = arg;

    pthread_mutex_lock(&db->ckpt_lock);
    /* Below the threshold again: the WAL started over since the last checkpoint. */
    if (frames < db->ckpt_at - DB_WAL_CHECKPOINT)
        db->ckpt_at = DB_WAL_CHECKPOINT;
    if (frames >= db->ckpt_at && !db->ckpt_wanted) {
        db->ckpt_wanted = true;
        pthread_cond_signal(&db->ckpt_cv);
    }
    db->ckpt_frames = frames;
    pthread_mutex_unlock(&db->ckpt_lock);
    return SQLITE_OK;
}

static void *ckpt_thread(void *arg)
{
    struct db *db = arg;
    struct db_conn *c = NULL;
    bool failing = false; /* the last one failed: logged once, not at every commit */

    pthread_mutex_lock(&db->ckpt_lock);
    for (;;) {
        while (!db->ckpt_wanted && !db->ckpt_stop)
            pthread_cond_wait(&db->ckpt_cv, &db->ckpt_lock);
        if (db->ckpt_stop)
            break;
        int mode = db->ckpt_frames >= DB_WAL_RESTART ? SQLITE_CHECKPOINT_RESTART
                                                     : SQLITE_CHECKPOINT_PASSIVE;
        pthread_mutex_unlock(&db->ckpt_lock);
        int log = 0, copied = 0, rc = SQLITE_ERROR;
        if (!c && db_conn_open_writable(db, &c) == 0)
            sqlite3_busy_timeout(c->sql, DB_RESTART_WAIT_MS);
        if (c)
            rc = sqlite3_wal_checkpoint_v2(c->sql, NULL, mode, &log, &copied);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY && !failing)
            log_error("database: checkpoint: %s", c ? sqlite3_errmsg(c->sql) : "cannot connect");
        failing = rc != SQLITE_OK && rc != SQLITE_BUSY;
        pthread_mutex_lock(&db->ckpt_lock);
        db->ckpt_wanted = false;
        db->ckpt_count++;
        /*
         * The next once 1,000 more frames are in the WAL, not at every commit
         * (each checkpoint syncs twice, a restarting one holds the writer):
         * the hook starts over from DB_WAL_CHECKPOINT once the WAL has.
         */
        db->ckpt_at = (log > db->ckpt_frames ? log : db->ckpt_frames) + DB_WAL_CHECKPOINT;
        pthread_cond_broadcast(&db->ckpt_done_cv);
    }
    pthread_mutex_unlock(&db->ckpt_lock);
    db_conn_close(c);
    return NULL;
}

int db_ckpt_start(struct db *db)
{
    int r;

    pthread_mutex_init(&db->ckpt_lock, NULL);
    pthread_cond_init(&db->ckpt_cv, NULL);
    pthread_cond_init(&db->ckpt_done_cv, NULL);
    db->ckpt_at = DB_WAL_CHECKPOINT;
    db->ckpt_inited = true;
    if ((r = -pthread_create(&db->ckpt_tid, NULL, ckpt_thread, db)) < 0) {
        log_error("database: cannot start the checkpoint thread: %s", strerror(-r));
        return r;
    }
    db->ckpt_running = true;
    /* Replaces SQLite's automatic checkpoint, which is itself a WAL hook. */
    sqlite3_wal_hook(db->writer->sql, wal_hook, db);
    return 0;
}

void db_ckpt_stop(struct db *db)
{
    if (!db->ckpt_inited)
        return;
    if (db->ckpt_running) {
        sqlite3_wal_hook(db->writer->sql, NULL, NULL);
        pthread_mutex_lock(&db->ckpt_lock);
        db->ckpt_stop = true;
        pthread_cond_signal(&db->ckpt_cv);
        pthread_mutex_unlock(&db->ckpt_lock);
        pthread_join(db->ckpt_tid, NULL);
        db->ckpt_running = false;
    }
    pthread_cond_destroy(&db->ckpt_cv);
    pthread_cond_destroy(&db->ckpt_done_cv);
    pthread_mutex_destroy(&db->ckpt_lock);
    db->ckpt_inited = false;
}

int db_ckpt_idle(struct db *db, unsigned timeout_ms)
{
    struct timespec until;
    int r = 0;

    if (!db->ckpt_running)
        return -ENOTCONN;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&db->ckpt_lock);
    while (db->ckpt_wanted && r == 0)
        r = -pthread_cond_timedwait(&db->ckpt_done_cv, &db->ckpt_lock, &until);
    if (r == 0)
        r = db->ckpt_count > INT_MAX ? INT_MAX : (int)db->ckpt_count;
    pthread_mutex_unlock(&db->ckpt_lock);
    return r;
}
