/*
 * Checkpoints of the database's WAL, off the writer's path. SQLite's own
 * automatic checkpoint runs inside the commit that crosses its threshold:
 * that commit, and every add whose reply waits for it, then pays for
 * copying the WAL into the database file and for two syncs (some
 * milliseconds, against a few hundred microseconds for a commit). Here the
 * writer's commit hook only wakes a thread of the database's own, which
 * runs a passive checkpoint on a connection of its own while the writer goes
 * on committing. Should that thread fall far behind, the writer checkpoints
 * itself (DB_WAL_BACKSTOP), as SQLite would, so that the WAL stays bounded.
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
/* WAL frames after which the writer checkpoints in its own commit. */
#define DB_WAL_BACKSTOP (16 * DB_WAL_CHECKPOINT)

/* After every commit of the writer, on the writer's thread. */
static int wal_hook(void *arg, sqlite3 *c, const char *schema, int frames)
{
    struct db *db = arg;

    if (frames >= DB_WAL_BACKSTOP) {
        sqlite3_wal_checkpoint_v2(c, schema, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        return SQLITE_OK;
    }
    pthread_mutex_lock(&db->ckpt_lock);
    /* Below the threshold again: the WAL started over since the last checkpoint. */
    if (frames < db->ckpt_at - DB_WAL_CHECKPOINT)
        db->ckpt_at = DB_WAL_CHECKPOINT;
    if (frames >= db->ckpt_at && !db->ckpt_wanted) {
        db->ckpt_wanted = true;
        pthread_cond_signal(&db->ckpt_cv);
    }
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
        pthread_mutex_unlock(&db->ckpt_lock);
        int log = 0, copied = 0, rc = SQLITE_ERROR;
        if (c || db_conn_open_writable(db, &c) == 0)
            rc = sqlite3_wal_checkpoint_v2(c->sql, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY && !failing)
            log_error("database: checkpoint: %s", c ? sqlite3_errmsg(c->sql) : "cannot connect");
        failing = rc != SQLITE_OK && rc != SQLITE_BUSY;
        pthread_mutex_lock(&db->ckpt_lock);
        db->ckpt_wanted = false;
        db->ckpt_count++;
        /*
         * The writer starts the WAL over only when it begins a transaction
         * with everything copied, which a checkpoint beside a busy writer
         * seldom leaves it: the WAL then grows on, and the next checkpoint
         * is asked for once as much again has been written, not at every
         * commit (each one syncs twice). The backstop's checkpoint, inside a
         * commit, lets the WAL start over.
         */
        db->ckpt_at = (rc == SQLITE_OK && log > 0 ? log : 0) + DB_WAL_CHECKPOINT;
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
