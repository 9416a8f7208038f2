/*
 * Writers and the numbers of their packs (db.h): which local index stands
 * for which writer's id. The table is small (one row per daemon that ever
 * wrote to the bucket) and read on every pack read, so it is kept in memory
 * too; it only ever grows, and an index once given never changes.
 */
#include <errno.h>
#include <stdlib.h>

#include "daemon/base/log.h"
#include "daemon/meta/db-int.h"

static const char load_sql[] = "SELECT idx, id FROM writers ORDER BY idx";
static const char insert_sql[] = "INSERT OR IGNORE INTO writers(idx, id) VALUES(?1, ?2)";

/* Under writers_lock: room for index widx. */
static int reserve(struct db *db, size_t widx)
{
    if (widx < db->writers_cap)
        return 0;
    size_t cap = db->writers_cap ? db->writers_cap * 2 : 16;
    while (cap <= widx)
        cap *= 2;
    uint64_t *grown = realloc(db->writers, cap * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    db->writers = grown;
    db->writers_cap = cap;
    return 0;
}

int db_writers_load(struct db *db)
{
    sqlite3_stmt *s;
    int rc, r = 0;

    pthread_mutex_init(&db->writers_lock, NULL);
    if ((r = reserve(db, 0)) < 0)
        return r;
    db->writers[0] = 0;
    db->nwriters = 1;
    if (sqlite3_prepare_v2(db->writer->sql, load_sql, -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t idx = sqlite3_column_int64(s, 0);
        if (idx <= 0 || idx > DB_MAX_WRITERS || (size_t)idx != db->nwriters) {
            log_error("database: writer index %lld out of order", (long long)idx);
            r = -EIO;
        } else if ((r = reserve(db, (size_t)idx)) == 0) {
            db->writers[idx] = (uint64_t)sqlite3_column_int64(s, 1);
            db->nwriters++;
        }
    }
    sqlite3_finalize(s);
    return r == 0 && rc != SQLITE_DONE ? -EIO : r;
}

void db_writers_free(struct db *db)
{
    if (db->writers_cap)
        pthread_mutex_destroy(&db->writers_lock);
    free(db->writers);
    db->writers = NULL;
}

int db_writer_id(struct db *db, unsigned widx, uint64_t *id)
{
    int r = -ENOENT;

    pthread_mutex_lock(&db->writers_lock);
    if (widx < db->nwriters) {
        *id = db->writers[widx];
        r = 0;
    }
    pthread_mutex_unlock(&db->writers_lock);
    return r;
}

/* Under writers_lock: the index of writer `id`, or -ENOENT. */
static int find(const struct db *db, uint64_t id, unsigned *widx)
{
    for (size_t i = 0; i < db->nwriters; i++) {
        if (db->writers[i] == id) {
            *widx = (unsigned)i;
            return 0;
        }
    }
    return -ENOENT;
}

int db_writer_index(struct db *db, uint64_t id, unsigned *widx)
{
    pthread_mutex_lock(&db->writers_lock);
    int r = find(db, id, widx);
    pthread_mutex_unlock(&db->writers_lock);
    return r;
}

int db_pack_key(struct db *db, uint64_t pack, char *key, size_t len)
{
    uint64_t id;
    int r = db_writer_id(db, DB_PACK_WIDX(pack), &id);

    if (r == 0)
        pack_key(key, len, id, DB_PACK_SEQ(pack));
    return r;
}

int db_txn_writer(struct db_txn *txn, uint64_t id, unsigned *widx)
{
    struct db *db = txn->db;
    sqlite3_stmt *s;
    int r;

    if (id == 0) {
        *widx = 0;
        return 0;
    }
    /*
     * The index is the memory's to give: a transaction rolled back leaves it
     * taken there, and the next one that meets the writer writes its row
     * again with the same index (the row is written whenever it is missing).
     */
    pthread_mutex_lock(&db->writers_lock);
    r = find(db, id, widx);
    if (r == -ENOENT) {
        if (db->nwriters > DB_MAX_WRITERS)
            r = -ENOSPC;
        else if ((r = reserve(db, db->nwriters)) == 0) {
            *widx = (unsigned)db->nwriters;
            db->writers[db->nwriters++] = id;
        }
    }
    pthread_mutex_unlock(&db->writers_lock);
    if (r < 0)
        return r;
    if (!(s = db_conn_prepare(txn->c, insert_sql)))
        return -EIO;
    sqlite3_bind_int64(s, 1, *widx);
    sqlite3_bind_int64(s, 2, (int64_t)id);
    return db_step_done(txn->c, s);
}
