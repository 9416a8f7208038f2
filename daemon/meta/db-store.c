/*
 * Where records live: the packs, and the rows that locate chunks (inside
 * their blocks), manifest segments and journal entries in them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"
#include "daemon/base/log.h"

const char *const db_store_sql[DB_S_COUNT_] = {
    [DB_S_CHUNK_FIND] = "SELECT pack, off, len, sub, size, stored FROM chunks WHERE hash = ?1",
    /* Stored for dedup: live, and not where verify found it damaged. */
    [DB_S_CHUNK_LOOKUP] = "SELECT stored FROM chunks c WHERE hash = ?1 AND condemned = 0"
                          " AND NOT EXISTS (SELECT 1 FROM bad_chunks b WHERE b.hash = c.hash"
                          " AND b.pack = c.pack AND b.off = c.off)",
    /*
     * A new copy replaces the location only of a condemned row or of one
     * pointing at a copy verify found damaged: a live row keeps pointing
     * where it did, and the new copy is dead weight for gc.
     */
    [DB_S_CHUNK_PUT] = "INSERT INTO chunks(hash, pack, off, len, sub, size, stored, condemned)"
                       " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, 0)"
                       " ON CONFLICT(hash) DO UPDATE SET pack = excluded.pack,"
                       " off = excluded.off, len = excluded.len, sub = excluded.sub,"
                       " size = excluded.size, stored = excluded.stored, condemned = 0"
                       " WHERE chunks.condemned != 0 OR EXISTS (SELECT 1 FROM bad_chunks b"
                       " WHERE b.hash = chunks.hash AND b.pack = chunks.pack"
                       " AND b.off = chunks.off)",
    /* A rebuild: the copy found last wins (see db_txn_chunk_put_latest). */
    [DB_S_CHUNK_PUT_LATEST] =
        "INSERT INTO chunks(hash, pack, off, len, sub, size, stored, condemned)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, 0)"
        " ON CONFLICT(hash) DO UPDATE SET pack = excluded.pack,"
        " off = excluded.off, len = excluded.len, sub = excluded.sub,"
        " size = excluded.size, stored = excluded.stored, condemned = 0",
    [DB_S_CHUNK_BAD_ANY] = "SELECT 1 FROM bad_chunks b JOIN chunks c ON c.hash = b.hash"
                           " AND c.pack = b.pack AND c.off = b.off LIMIT 1",
    [DB_S_CHUNK_DAMAGED] = "SELECT 1 FROM chunks c JOIN bad_chunks b ON b.hash = c.hash"
                           " AND b.pack = c.pack AND b.off = c.off WHERE c.hash = ?1",
    [DB_S_CHUNK_BAD] = "INSERT OR IGNORE INTO bad_chunks(hash, pack, off) VALUES(?1, ?2, ?3)",
    /* Copies no row points at any more: healed, or gone with gc. */
    [DB_S_CHUNK_BAD_PRUNE] = "DELETE FROM bad_chunks WHERE NOT EXISTS (SELECT 1 FROM chunks c"
                             " WHERE c.hash = bad_chunks.hash AND c.pack = bad_chunks.pack"
                             " AND c.off = bad_chunks.off)",
    [DB_S_SEGMENT_FIND] = "SELECT pack, off, len, 0, size, len FROM segments WHERE hash = ?1",
    [DB_S_SEGMENT_PUT] = "INSERT INTO segments(hash, pack, off, len, size, condemned)"
                         " VALUES(?1, ?2, ?3, ?4, ?5, 0)"
                         " ON CONFLICT(hash) DO UPDATE SET pack = excluded.pack,"
                         " off = excluded.off, len = excluded.len, size = excluded.size,"
                         " condemned = 0 WHERE segments.condemned != 0",
    /* An entry known keeps its row, unless that points into a marked pack: it follows the copy. */
    [DB_S_JOURNAL_PUT] = "INSERT INTO journal(hash, pack, off, len, doc, time, op, applied)"
                         " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                         " ON CONFLICT(hash) DO UPDATE SET pack = excluded.pack,"
                         " off = excluded.off, len = excluded.len"
                         " WHERE journal.pack IN (SELECT seq FROM packs WHERE state = 3)",
    /* An add entry's copy that the put above left out (db.c: journal_copies). */
    [DB_S_JOURNAL_COPY_PUT] = "INSERT OR IGNORE INTO journal_copies(pack, off, doc, time)"
                              " SELECT ?2, ?3, ?4, ?5 WHERE NOT EXISTS (SELECT 1 FROM journal"
                              " WHERE hash = ?1 AND pack = ?2 AND off = ?3)",
    [DB_S_JOURNAL_COPIES_DROP] = "DELETE FROM journal_copies WHERE pack = ?1",
    /*
     * The journal's order: by time, then (one `rm NAME` writes its unnames
     * and deletes at one time) unnames before deletes before adds, then by id.
     */
    [DB_S_JOURNAL_PENDING] = "SELECT hash, pack, off, len FROM journal WHERE applied = 0"
                             " ORDER BY time, op DESC, hash LIMIT ?1",
    [DB_S_JOURNAL_APPLIED] = "UPDATE journal SET applied = 1 WHERE hash = ?1",
    [DB_S_JOURNAL_REFUSED] = "DELETE FROM journal WHERE hash = ?1",
    [DB_S_JOURNAL_NEWEST] = "SELECT COALESCE(MAX(time), 0) FROM journal",
    [DB_S_JOURNAL_LATER] = "SELECT 1 FROM journal WHERE doc = ?1 AND applied = 1 AND (time > ?2"
                           " OR (time = ?2 AND (op < ?3 OR (op = ?3 AND hash > ?4)))) LIMIT 1",
    [DB_S_JOURNAL_OF_DOC] = "SELECT hash, pack, off, len FROM journal WHERE doc = ?1"
                            " AND applied = 1 ORDER BY time, op DESC, hash",
    /* A void entry's doc is the id of the entry it cancels (objects.h). */
    [DB_S_JOURNAL_VOIDED] = "SELECT 1 FROM journal WHERE doc = ?1 AND op = 3 LIMIT 1",
    [DB_S_JOURNAL_ROW] = "SELECT applied, pack, off, len FROM journal WHERE hash = ?1",
    [DB_S_PACK_SET] = "INSERT INTO packs(seq, size, state) VALUES(?1, ?2, ?3)"
                      " ON CONFLICT(seq) DO UPDATE SET size = excluded.size,"
                      " state = excluded.state",
    [DB_S_PACK_DROP] = "DELETE FROM packs WHERE seq = ?1",
    [DB_S_PACKS] = "SELECT seq, size, state FROM packs ORDER BY seq",
    [DB_S_PACK_SIZE] = "SELECT size FROM packs WHERE seq = ?1",
    /* The highest pack number of each writer index whose row went: never used again. */
    [DB_S_PACK_HIGH_SET] = "INSERT INTO state(key, value) VALUES('pack_high_' || (?1 >> 48), ?1)"
                           " ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)",
    [DB_S_PACK_HIGH] = "SELECT value FROM state WHERE key = 'pack_high_' || ?1",
};

/* Runs a lookup by hash on a reader connection and reads a location from its row. */
static int find(struct db *db, enum db_stmt_id id, const uint8_t hash[PROTO_HASH_LEN],
                struct db_loc *loc)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int rc, r = DB_E_NOT_FOUND;

    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, id, db_store_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        loc->pack = (uint64_t)sqlite3_column_int64(s, 0);
        loc->off = (uint64_t)sqlite3_column_int64(s, 1);
        loc->len = (uint32_t)sqlite3_column_int64(s, 2);
        loc->sub = (uint32_t)sqlite3_column_int64(s, 3);
        loc->size = (uint32_t)sqlite3_column_int64(s, 4);
        loc->stored = (uint32_t)sqlite3_column_int64(s, 5);
        r = 0;
    } else if (rc != SQLITE_DONE) {
        log_error("database: %s", sqlite3_errmsg(c->sql));
        r = -EIO;
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    return r;
}

int db_chunk_find(struct db *db, const uint8_t hash[PROTO_HASH_LEN], struct db_loc *loc)
{
    return find(db, DB_S_CHUNK_FIND, hash, loc);
}

int db_segment_find(struct db *db, const uint8_t hash[PROTO_HASH_LEN], struct db_loc *loc)
{
    return find(db, DB_S_SEGMENT_FIND, hash, loc);
}

/*
 * The first column of the first row of statement `id` on a reader, with
 * `hash` (NULL: nothing) bound as ?1: 0, DB_E_NOT_FOUND or negative errno.
 */
static int query_value(struct db *db, enum db_stmt_id id, const uint8_t *hash, int64_t *v)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int r;

    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, id, db_store_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    if (hash)
        sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    r = db_query_id(c, s, v);
    db_reader_release(db, c);
    return r;
}

int db_chunk_lookup(struct db *db, const uint8_t hash[PROTO_HASH_LEN], uint32_t *stored)
{
    int64_t v;
    int r = query_value(db, DB_S_CHUNK_LOOKUP, hash, &v);

    if (r == 0)
        *stored = (uint32_t)v;
    return r;
}

int db_chunk_damaged(struct db *db, const uint8_t hash[PROTO_HASH_LEN], bool *damaged)
{
    int64_t v;
    int r = query_value(db, DB_S_CHUNK_DAMAGED, hash, &v);

    *damaged = r == 0;
    return r == DB_E_NOT_FOUND ? 0 : r;
}

static int chunk_put(struct db_txn *txn, enum db_stmt_id id, const uint8_t hash[PROTO_HASH_LEN],
                     const struct db_loc *loc)
{
    sqlite3_stmt *s = db_stmt(txn->c, id, db_store_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)loc->pack);
    sqlite3_bind_int64(s, 3, (int64_t)loc->off);
    sqlite3_bind_int64(s, 4, loc->len);
    sqlite3_bind_int64(s, 5, loc->sub);
    sqlite3_bind_int64(s, 6, loc->size);
    sqlite3_bind_int64(s, 7, loc->stored);
    return db_step_done(txn->c, s);
}

int db_txn_chunk_put(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                     const struct db_loc *loc)
{
    return chunk_put(txn, DB_S_CHUNK_PUT, hash, loc);
}

int db_txn_chunk_put_latest(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                            const struct db_loc *loc)
{
    return chunk_put(txn, DB_S_CHUNK_PUT_LATEST, hash, loc);
}

int db_chunks_bad_any(struct db *db, bool *any)
{
    int64_t v;
    int r = query_value(db, DB_S_CHUNK_BAD_ANY, NULL, &v);

    *any = r == 0;
    return r < 0 ? r : 0;
}

int db_txn_chunk_bad(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                     const struct db_loc *loc)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_CHUNK_BAD, db_store_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)loc->pack);
    sqlite3_bind_int64(s, 3, (int64_t)loc->off);
    return db_step_done(txn->c, s);
}

int db_txn_chunk_bad_prune(struct db_txn *txn)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_CHUNK_BAD_PRUNE, db_store_sql);

    return s ? db_step_done(txn->c, s) : -EIO;
}

int db_txn_segment_put(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                       const struct db_loc *loc)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_SEGMENT_PUT, db_store_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)loc->pack);
    sqlite3_bind_int64(s, 3, (int64_t)loc->off);
    sqlite3_bind_int64(s, 4, loc->len);
    sqlite3_bind_int64(s, 5, loc->size);
    return db_step_done(txn->c, s);
}

int db_txn_journal_put(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN],
                       const struct db_loc *loc, const uint8_t doc[PROTO_HASH_LEN],
                       uint64_t time_ns, int op, bool applied)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_JOURNAL_PUT, db_store_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, id, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)loc->pack);
    sqlite3_bind_int64(s, 3, (int64_t)loc->off);
    sqlite3_bind_int64(s, 4, loc->len);
    sqlite3_bind_blob(s, 5, doc, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, (int64_t)time_ns);
    sqlite3_bind_int(s, 7, op);
    sqlite3_bind_int(s, 8, applied);
    int r = db_step_done(txn->c, s);
    /*
     * Replay found an add entry the database knows at another place, and the
     * row stays there: this copy is dead weight a rebuild would still apply.
     */
    if (r == 0 && !applied && op == 0 && sqlite3_changes(txn->c->sql) == 0) {
        if (!(s = db_stmt(txn->c, DB_S_JOURNAL_COPY_PUT, db_store_sql)))
            return -EIO;
        sqlite3_bind_blob(s, 1, id, PROTO_HASH_LEN, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (int64_t)loc->pack);
        sqlite3_bind_int64(s, 3, (int64_t)loc->off);
        sqlite3_bind_blob(s, 4, doc, PROTO_HASH_LEN, SQLITE_STATIC);
        sqlite3_bind_int64(s, 5, (int64_t)time_ns);
        r = db_step_done(txn->c, s);
    }
    return r;
}

int db_pending_entries(struct db *db, size_t max, struct db_pending_entry **out, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_pending_entry *v;
    sqlite3_stmt *s;
    size_t count = 0;
    int rc;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(v = calloc(max ? max : 1, sizeof(*v)))) {
        db_reader_release(db, c);
        return -ENOMEM;
    }
    if (!(s = db_stmt(c, DB_S_JOURNAL_PENDING, db_store_sql))) {
        db_reader_release(db, c);
        free(v);
        return -EIO;
    }
    sqlite3_bind_int64(s, 1, (int64_t)max);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && count < max) {
        if (sqlite3_column_bytes(s, 0) != PROTO_HASH_LEN)
            continue;
        memcpy(v[count].id, sqlite3_column_blob(s, 0), PROTO_HASH_LEN);
        v[count].loc.pack = (uint64_t)sqlite3_column_int64(s, 1);
        v[count].loc.off = (uint64_t)sqlite3_column_int64(s, 2);
        v[count].loc.len = (uint32_t)sqlite3_column_int64(s, 3);
        count++;
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        free(v);
        return -EIO;
    }
    *out = v;
    *n = count;
    return 0;
}

int db_txn_journal_applied(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN], bool drop)
{
    sqlite3_stmt *s =
        db_stmt(txn->c, drop ? DB_S_JOURNAL_REFUSED : DB_S_JOURNAL_APPLIED, db_store_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, id, PROTO_HASH_LEN, SQLITE_STATIC);
    return db_step_done(txn->c, s);
}

int db_journal_later(struct db *db, const uint8_t doc[PROTO_HASH_LEN], uint64_t time_ns, int op,
                     const uint8_t id[PROTO_HASH_LEN], bool *later)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int rc;

    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_JOURNAL_LATER, db_store_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, doc, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)time_ns);
    sqlite3_bind_int(s, 3, op);
    sqlite3_bind_blob(s, 4, id, PROTO_HASH_LEN, SQLITE_STATIC);
    rc = sqlite3_step(s);
    *later = rc == SQLITE_ROW;
    sqlite3_reset(s);
    db_reader_release(db, c);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -EIO;
}

int db_journal_of_doc(struct db *db, const uint8_t doc[PROTO_HASH_LEN],
                      struct db_pending_entry **out, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_pending_entry *v = NULL;
    size_t count = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_JOURNAL_OF_DOC, db_store_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, doc, PROTO_HASH_LEN, SQLITE_STATIC);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_bytes(s, 0) != PROTO_HASH_LEN)
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 8;
            struct db_pending_entry *grown = realloc(v, cap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            v = grown;
        }
        memset(&v[count], 0, sizeof(v[count]));
        memcpy(v[count].id, sqlite3_column_blob(s, 0), PROTO_HASH_LEN);
        v[count].loc.pack = (uint64_t)sqlite3_column_int64(s, 1);
        v[count].loc.off = (uint64_t)sqlite3_column_int64(s, 2);
        v[count].loc.len = (uint32_t)sqlite3_column_int64(s, 3);
        count++;
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r < 0) {
        free(v);
        return r;
    }
    *out = v;
    *n = count;
    return 0;
}

int db_txn_journal_voided(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN], bool *voided)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_JOURNAL_VOIDED, db_store_sql);
    int64_t one;
    int r;

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, id, PROTO_HASH_LEN, SQLITE_STATIC);
    r = db_query_id(txn->c, s, &one);
    *voided = r == 0;
    return r == DB_E_NOT_FOUND ? 0 : r;
}

int db_journal_row(struct db *db, const uint8_t id[PROTO_HASH_LEN], struct db_pending_entry *row,
                   bool *applied)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int rc;

    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_JOURNAL_ROW, db_store_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, id, PROTO_HASH_LEN, SQLITE_STATIC);
    if ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        memset(row, 0, sizeof(*row));
        memcpy(row->id, id, PROTO_HASH_LEN);
        *applied = sqlite3_column_int(s, 0) != 0;
        row->loc.pack = (uint64_t)sqlite3_column_int64(s, 1);
        row->loc.off = (uint64_t)sqlite3_column_int64(s, 2);
        row->loc.len = (uint32_t)sqlite3_column_int64(s, 3);
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? DB_E_NOT_FOUND : -EIO;
}

int db_journal_newest(struct db *db, uint64_t *time_ns)
{
    int64_t v = 0;
    int r = query_value(db, DB_S_JOURNAL_NEWEST, NULL, &v);

    if (r < 0)
        return r;
    *time_ns = (uint64_t)v;
    return 0;
}

int db_txn_pack_set(struct db_txn *txn, uint64_t seq, uint64_t size, enum db_pack_state state)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_PACK_SET, db_store_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)seq);
    sqlite3_bind_int64(s, 2, (int64_t)size);
    sqlite3_bind_int(s, 3, (int)state);
    return db_step_done(txn->c, s);
}

int db_txn_pack_high(struct db_txn *txn, uint64_t seq)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_PACK_HIGH_SET, db_store_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)seq);
    return db_step_done(txn->c, s);
}

int db_txn_pack_drop(struct db_txn *txn, uint64_t seq)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_PACK_DROP, db_store_sql);
    int r;

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)seq);
    if ((r = db_step_done(txn->c, s)) < 0)
        return r;
    if (!(s = db_stmt(txn->c, DB_S_JOURNAL_COPIES_DROP, db_store_sql)))
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)seq);
    if ((r = db_step_done(txn->c, s)) < 0)
        return r;
    return db_txn_pack_high(txn, seq);
}

/* One number from a statement of one integer parameter, on a reader: 0, DB_E_NOT_FOUND or -EIO. */
static int query_uint(struct db *db, enum db_stmt_id id, int64_t arg, uint64_t *out)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int64_t v;
    int r;

    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, id, db_store_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_int64(s, 1, arg);
    r = db_query_id(c, s, &v);
    if (r == 0)
        *out = v > 0 ? (uint64_t)v : 0;
    db_reader_release(db, c);
    return r;
}

int db_pack_high(struct db *db, unsigned widx, uint64_t *seq)
{
    int r = query_uint(db, DB_S_PACK_HIGH, (int64_t)widx, seq);

    if (r == DB_E_NOT_FOUND)
        *seq = 0;
    return r == DB_E_NOT_FOUND ? 0 : r;
}

int db_pack_size(struct db *db, uint64_t seq, uint64_t *size)
{
    return query_uint(db, DB_S_PACK_SIZE, (int64_t)seq, size);
}

int db_packs(struct db *db, struct db_pack **packs, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_pack *v = NULL;
    size_t count = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *packs = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_PACKS, db_store_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            struct db_pack *grown = realloc(v, cap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            v = grown;
        }
        v[count].seq = (uint64_t)sqlite3_column_int64(s, 0);
        v[count].size = (uint64_t)sqlite3_column_int64(s, 1);
        v[count].state = (enum db_pack_state)sqlite3_column_int(s, 2);
        count++;
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r < 0) {
        free(v);
        return r;
    }
    *packs = v;
    *n = count;
    return 0;
}
