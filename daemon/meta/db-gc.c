/*
 * gc's queries (gc.c, repack.c): the manifests to mark from, the sweep that
 * condemns unreferenced chunk and segment rows (and revives condemned ones
 * that are referenced again), how much of each pack is still alive, and the
 * moves and drops of a repack.
 *
 * A condemned row carries the number of the gc run that condemned it. Dedup
 * never reuses a condemned chunk, so once every operation that might have
 * picked the chunk up before its condemnation has ended, a row condemned by
 * run g <= safe_gen that is still unreferenced can go (gc.c).
 *
 * Journal entries need no marking: an add entry is dead once a later delete
 * of its document exists, and a delete entry once no earlier add entry of its
 * document is left, in a row or as a copy the database knows of
 * (journal_copies: a rebuild would apply that add without the delete). An
 * unname entry is dead once its document is deleted at or after its time (`rm
 * NAME` writes the delete at the same time), or when no earlier add entry
 * (which could have brought the name) is left; so is an edit entry (tags and
 * metadata). While a repacked pack waits to be deleted (DB_PACK_DELETING), no
 * delete or unname entry is dead: the pack may still hold an add entry whose
 * row is gone, and a rebuild from the packs would bring that add back without
 * them. A marked pack (DB_PACK_MARKED) keeps its rows until it is emptied, so
 * its add entries keep their deletes alive by the rules above. A void entry
 * is never dead: the entry it cancels may still be in a pack that a rebuild
 * reads (its own row is gone, so no rule could tell).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"
#include "daemon/base/log.h"
#include "daemon/format/manifest.h"

#define JOURNAL_DEAD                                                                               \
    "(j.op != 3 AND ((j.op = 0 AND EXISTS (SELECT 1 FROM journal x WHERE x.doc = j.doc"            \
    " AND x.op = 1 AND x.time > j.time)) OR (j.op != 0 AND NOT EXISTS (SELECT 1 FROM packs p"      \
    " WHERE p.state = 2) AND ((NOT EXISTS (SELECT 1 FROM journal x WHERE x.doc = j.doc"            \
    " AND x.op = 0 AND x.time < j.time) AND NOT EXISTS (SELECT 1 FROM journal_copies y"            \
    " WHERE y.doc = j.doc AND y.time < j.time)) OR (j.op IN (2, 4) AND EXISTS (SELECT 1 FROM"      \
    " journal x"                                                                                   \
    " WHERE x.doc = j.doc AND x.op = 1 AND x.time >= j.time))))))"

const char *const db_gc_sql[DB_S_COUNT_] = {
    [DB_S_STATE_GET] = "SELECT value FROM state WHERE key = ?1",
    [DB_S_STATE_SET] = "INSERT INTO state(key, value) VALUES(?1, ?2)"
                       " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    [DB_S_MANIFESTS] = "SELECT depth, manifest, id FROM documents",
    [DB_S_REMOVAL_MANIFESTS] = "SELECT depth, manifest, -1 FROM search_removals",
    [DB_S_CHUNK_PAGE] = "SELECT hash, condemned FROM chunks WHERE hash > ?1 ORDER BY hash LIMIT ?2",
    [DB_S_SEGMENT_PAGE] =
        "SELECT hash, condemned FROM segments WHERE hash > ?1 ORDER BY hash LIMIT ?2",
    [DB_S_CHUNK_CONDEMN] = "UPDATE chunks SET condemned = ?2 WHERE hash = ?1",
    [DB_S_SEGMENT_CONDEMN] = "UPDATE segments SET condemned = ?2 WHERE hash = ?1",
    [DB_S_PACK_CHUNKS_LIVE] = "SELECT pack, SUM(stored), COUNT(*) FROM chunks"
                              " WHERE condemned = 0 OR condemned > ?1 GROUP BY pack",
    [DB_S_PACK_SEGMENTS_LIVE] = "SELECT pack, SUM(len), COUNT(*) FROM segments"
                                " WHERE condemned = 0 OR condemned > ?1 GROUP BY pack",
    [DB_S_PACK_JOURNAL_LIVE] =
        "SELECT pack, SUM(len), COUNT(*) FROM journal j WHERE NOT " JOURNAL_DEAD " GROUP BY pack",
    [DB_S_PACK_CHUNKS_ROWS] = "SELECT pack, COUNT(*) FROM chunks GROUP BY pack",
    [DB_S_PACK_SEGMENTS_ROWS] = "SELECT pack, COUNT(*) FROM segments GROUP BY pack",
    [DB_S_PACK_JOURNAL_ROWS] = "SELECT pack, COUNT(*) FROM journal GROUP BY pack",
    [DB_S_ROWS_CHUNKS] = "SELECT hash, off, len, sub, size, stored, condemned FROM chunks"
                         " WHERE pack = ?1",
    [DB_S_ROWS_SEGMENTS] = "SELECT hash, off, len, 0, size, len, condemned FROM segments"
                           " WHERE pack = ?1",
    [DB_S_ROWS_JOURNAL] = "SELECT hash, off, len, 0, 0, len, " JOURNAL_DEAD " FROM journal j"
                          " WHERE pack = ?1",
    [DB_S_CHUNK_MOVE] = "UPDATE chunks SET pack = ?4, off = ?5, len = ?6, sub = ?7, stored = ?8"
                        " WHERE hash = ?1 AND pack = ?2 AND off = ?3",
    [DB_S_SEGMENT_MOVE] = "UPDATE segments SET pack = ?4, off = ?5, len = ?6"
                          " WHERE hash = ?1 AND pack = ?2 AND off = ?3",
    [DB_S_JOURNAL_MOVE] = "UPDATE journal SET pack = ?4, off = ?5, len = ?6"
                          " WHERE hash = ?1 AND pack = ?2 AND off = ?3",
    [DB_S_CHUNK_DROP] = "DELETE FROM chunks WHERE hash = ?1 AND pack = ?2 AND off = ?3"
                        " AND condemned = ?4",
    [DB_S_SEGMENT_DROP] = "DELETE FROM segments WHERE hash = ?1 AND pack = ?2 AND off = ?3"
                          " AND condemned = ?4",
    [DB_S_JOURNAL_DROP] = "DELETE FROM journal WHERE hash = ?1 AND pack = ?2 AND off = ?3",
    [DB_S_PACK_ROWS_LEFT] = "SELECT (SELECT count(*) FROM chunks WHERE pack = ?1)"
                            " + (SELECT count(*) FROM segments WHERE pack = ?1)"
                            " + (SELECT count(*) FROM journal WHERE pack = ?1)",
    [DB_S_CHUNKS_CONDEMNED] =
        "SELECT COUNT(*) FROM chunks WHERE condemned > ?1 AND condemned <= ?2",
};

/* ---- the gc run counter ---- */

static int state_get(struct db_conn *c, const char *key, int64_t *v)
{
    sqlite3_stmt *s = db_stmt(c, DB_S_STATE_GET, db_gc_sql);
    int r;

    if (!s)
        return -EIO;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    r = db_query_id(c, s, v);
    if (r == DB_E_NOT_FOUND) {
        *v = 0;
        r = 0;
    }
    return r;
}

int db_txn_gc_generation(struct db_txn *txn, uint64_t *gen)
{
    sqlite3_stmt *s;
    int64_t v, marked = 0;
    int r = state_get(txn->c, "gc_gen", &v);

    if (r < 0)
        return r;
    /*
     * A database made anew from the bucket starts counting again, but the
     * bucket's gc marks carry the runs' numbers: a run is numbered past them.
     */
    if (!(s = db_conn_prepare(txn->c, "SELECT COALESCE(MAX(gen), 0) FROM marks")) ||
        db_query_id(txn->c, s, &marked) < 0)
        return -EIO;
    if (marked > v)
        v = marked;
    if (!(s = db_stmt(txn->c, DB_S_STATE_SET, db_gc_sql)))
        return -EIO;
    sqlite3_bind_text(s, 1, "gc_gen", -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, v + 1);
    if ((r = db_step_done(txn->c, s)) < 0)
        return r;
    *gen = (uint64_t)v + 1;
    return 0;
}

int db_gc_generation(struct db *db, uint64_t *gen)
{
    struct db_conn *c = db_reader_acquire(db);
    int64_t v;
    int r;

    if (!c)
        return -EIO;
    r = state_get(c, "gc_gen", &v);
    db_reader_release(db, c);
    if (r == 0)
        *gen = (uint64_t)v;
    return r;
}

/* ---- marking ---- */

static int each_row(struct db_conn *c, enum db_stmt_id id, db_manifest_fn *fn, void *ctx)
{
    sqlite3_stmt *s = db_stmt(c, id, db_gc_sql);
    int rc, r = 0;

    if (!s)
        return -EIO;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        unsigned depth = (unsigned)sqlite3_column_int(s, 0);
        const uint8_t *root = sqlite3_column_blob(s, 1);
        size_t len = (size_t)sqlite3_column_bytes(s, 1);
        if (!manifest_root_valid(root, len, depth)) {
            log_error("database: a malformed manifest root: gc stops rather than guess");
            r = -EIO;
            break;
        }
        r = fn(ctx, sqlite3_column_int64(s, 2), depth, root, len);
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    sqlite3_reset(s);
    return r;
}

int db_each_manifest(struct db *db, db_manifest_fn *fn, void *ctx)
{
    struct db_conn *c = db_snapshot_begin(db);
    int r;

    if (!c)
        return -EIO;
    /* One snapshot for both tables: a delete moves a manifest from one to the other. */
    r = each_row(c, DB_S_MANIFESTS, fn, ctx);
    if (r == 0)
        r = each_row(c, DB_S_REMOVAL_MANIFESTS, fn, ctx);
    db_snapshot_end(db, c);
    return r;
}

/* ---- sweeping ---- */

struct sweep_row {
    uint8_t hash[PROTO_HASH_LEN];
    uint64_t condemned;
};

int db_txn_condemn_page(struct db_txn *txn, enum db_record_table table,
                        uint8_t cursor[PROTO_HASH_LEN], size_t page, db_live_fn *live, void *ctx,
                        uint64_t gen, uint64_t *condemned, uint64_t *revived, bool *done)
{
    struct db_conn *c = txn->c;
    bool chunks = table == DB_TABLE_CHUNKS;
    struct sweep_row *rows = calloc(page ? page : 1, sizeof(*rows));
    size_t n = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    if (!rows)
        return -ENOMEM;
    if (!(s = db_stmt(c, chunks ? DB_S_CHUNK_PAGE : DB_S_SEGMENT_PAGE, db_gc_sql))) {
        free(rows);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, cursor, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)page);
    /* Read the page first: the rows change below. */
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && n < page) {
        if (sqlite3_column_bytes(s, 0) != PROTO_HASH_LEN)
            continue;
        memcpy(rows[n].hash, sqlite3_column_blob(s, 0), PROTO_HASH_LEN);
        rows[n].condemned = (uint64_t)sqlite3_column_int64(s, 1);
        n++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        free(rows);
        return -EIO;
    }
    for (size_t i = 0; r == 0 && i < n; i++) {
        bool is_live = live(ctx, rows[i].hash);
        uint64_t to;
        if (!is_live && rows[i].condemned == 0 && gen != 0)
            to = gen;
        else if (is_live && rows[i].condemned != 0 &&
                 rows[i].condemned != (uint64_t)DB_CONDEMNED_MARKED)
            to = 0; /* a marked pack's rows stay condemned: its writer decides what lives */
        else
            continue;
        if (!(s = db_stmt(c, chunks ? DB_S_CHUNK_CONDEMN : DB_S_SEGMENT_CONDEMN, db_gc_sql))) {
            r = -EIO;
            break;
        }
        sqlite3_bind_blob(s, 1, rows[i].hash, PROTO_HASH_LEN, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (int64_t)to);
        r = db_step_done(c, s);
        if (to)
            (*condemned)++;
        else
            (*revived)++;
    }
    if (r == 0 && n > 0)
        memcpy(cursor, rows[n - 1].hash, PROTO_HASH_LEN);
    *done = n < page;
    free(rows);
    return r;
}

/* ---- what is alive where ---- */

/*
 * Adds the per-pack sums of a "pack, SUM(...)" query to the matching packs
 * of use[]: live bytes and rows, or with `rows` all rows.
 */
static int add_sums(struct db_conn *c, enum db_stmt_id id, uint64_t safe_gen, bool rows,
                    struct db_pack_use *use, size_t n)
{
    sqlite3_stmt *s = db_stmt(c, id, db_gc_sql);
    int rc;

    if (!s)
        return -EIO;
    if (id == DB_S_PACK_CHUNKS_LIVE || id == DB_S_PACK_SEGMENTS_LIVE)
        sqlite3_bind_int64(s, 1, (int64_t)safe_gen);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        uint64_t seq = (uint64_t)sqlite3_column_int64(s, 0);
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (use[mid].seq < seq)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < n && use[lo].seq == seq && rows) {
            use[lo].rows += (uint64_t)sqlite3_column_int64(s, 1);
        } else if (lo < n && use[lo].seq == seq) {
            use[lo].live += (uint64_t)sqlite3_column_int64(s, 1);
            use[lo].live_rows += (uint64_t)sqlite3_column_int64(s, 2);
        }
    }
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

int db_pack_usage(struct db *db, uint64_t safe_gen, struct db_pack_use **out, size_t *n)
{
    struct db_conn *c = db_snapshot_begin(db);
    struct db_pack_use *use = NULL;
    size_t count = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_PACKS, db_store_sql))) {
        r = -EIO;
        goto out;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            struct db_pack_use *grown = realloc(use, cap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            use = grown;
        }
        use[count] = (struct db_pack_use){
            .seq = (uint64_t)sqlite3_column_int64(s, 0),
            .size = (uint64_t)sqlite3_column_int64(s, 1),
            .state = (enum db_pack_state)sqlite3_column_int(s, 2),
        };
        count++;
    }
    sqlite3_reset(s);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0)
        r = add_sums(c, DB_S_PACK_CHUNKS_LIVE, safe_gen, false, use, count);
    if (r == 0)
        r = add_sums(c, DB_S_PACK_SEGMENTS_LIVE, safe_gen, false, use, count);
    if (r == 0)
        r = add_sums(c, DB_S_PACK_JOURNAL_LIVE, safe_gen, false, use, count);
    if (r == 0)
        r = add_sums(c, DB_S_PACK_CHUNKS_ROWS, safe_gen, true, use, count);
    if (r == 0)
        r = add_sums(c, DB_S_PACK_SEGMENTS_ROWS, safe_gen, true, use, count);
    if (r == 0)
        r = add_sums(c, DB_S_PACK_JOURNAL_ROWS, safe_gen, true, use, count);
out:
    db_snapshot_end(db, c);
    if (r < 0) {
        free(use);
        return r;
    }
    *out = use;
    *n = count;
    return 0;
}

static int add_rows(struct db_conn *c, enum db_stmt_id id, enum db_row_kind kind, uint64_t seq,
                    uint64_t safe_gen, struct db_pack_row **rows, size_t *n, size_t *cap)
{
    sqlite3_stmt *s = db_stmt(c, id, db_gc_sql);
    int rc;

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)seq);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_bytes(s, 0) != PROTO_HASH_LEN)
            continue;
        if (*n == *cap) {
            size_t ncap = *cap ? *cap * 2 : 256;
            struct db_pack_row *grown = realloc(*rows, ncap * sizeof(*grown));
            if (!grown) {
                sqlite3_reset(s);
                return -ENOMEM;
            }
            *rows = grown;
            *cap = ncap;
        }
        struct db_pack_row *row = &(*rows)[(*n)++];
        memset(row, 0, sizeof(*row));
        row->kind = kind;
        memcpy(row->hash, sqlite3_column_blob(s, 0), PROTO_HASH_LEN);
        row->loc.pack = seq;
        row->loc.off = (uint64_t)sqlite3_column_int64(s, 1);
        row->loc.len = (uint32_t)sqlite3_column_int64(s, 2);
        row->loc.sub = (uint32_t)sqlite3_column_int64(s, 3);
        row->loc.size = (uint32_t)sqlite3_column_int64(s, 4);
        row->loc.stored = (uint32_t)sqlite3_column_int64(s, 5);
        if (kind == DB_ROW_ENTRY) {
            row->live = sqlite3_column_int(s, 6) == 0;
        } else {
            row->condemned = (uint64_t)sqlite3_column_int64(s, 6);
            row->live = row->condemned == 0 || row->condemned > safe_gen;
        }
    }
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

static int row_cmp(const void *a, const void *b)
{
    const struct db_pack_row *x = a, *y = b;
    if (x->loc.off != y->loc.off)
        return x->loc.off < y->loc.off ? -1 : 1;
    return x->loc.sub < y->loc.sub ? -1 : x->loc.sub > y->loc.sub;
}

int db_pack_rows(struct db *db, uint64_t seq, uint64_t safe_gen, struct db_pack_row **rows,
                 size_t *n)
{
    struct db_conn *c = db_snapshot_begin(db);
    size_t cap = 0;
    int r;

    *rows = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    r = add_rows(c, DB_S_ROWS_CHUNKS, DB_ROW_CHUNK, seq, safe_gen, rows, n, &cap);
    if (r == 0)
        r = add_rows(c, DB_S_ROWS_SEGMENTS, DB_ROW_SEGMENT, seq, safe_gen, rows, n, &cap);
    if (r == 0)
        r = add_rows(c, DB_S_ROWS_JOURNAL, DB_ROW_ENTRY, seq, safe_gen, rows, n, &cap);
    db_snapshot_end(db, c);
    if (r < 0) {
        free(*rows);
        *rows = NULL;
        *n = 0;
        return r;
    }
    if (*n > 1)
        qsort(*rows, *n, sizeof(**rows), row_cmp);
    return 0;
}

int db_txn_row_move(struct db_txn *txn, const struct db_pack_row *row, const struct db_loc *to)
{
    static const enum db_stmt_id ids[] = {DB_S_CHUNK_MOVE, DB_S_SEGMENT_MOVE, DB_S_JOURNAL_MOVE};
    sqlite3_stmt *s = db_stmt(txn->c, ids[row->kind], db_gc_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, row->hash, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)row->loc.pack);
    sqlite3_bind_int64(s, 3, (int64_t)row->loc.off);
    sqlite3_bind_int64(s, 4, (int64_t)to->pack);
    sqlite3_bind_int64(s, 5, (int64_t)to->off);
    sqlite3_bind_int64(s, 6, to->len);
    if (row->kind == DB_ROW_CHUNK) {
        sqlite3_bind_int64(s, 7, to->sub);
        sqlite3_bind_int64(s, 8, to->stored);
    }
    return db_step_done(txn->c, s);
}

int db_txn_row_drop(struct db_txn *txn, const struct db_pack_row *row)
{
    static const enum db_stmt_id ids[] = {DB_S_CHUNK_DROP, DB_S_SEGMENT_DROP, DB_S_JOURNAL_DROP};
    sqlite3_stmt *s = db_stmt(txn->c, ids[row->kind], db_gc_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, row->hash, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)row->loc.pack);
    sqlite3_bind_int64(s, 3, (int64_t)row->loc.off);
    if (row->kind != DB_ROW_ENTRY)
        sqlite3_bind_int64(s, 4, (int64_t)row->condemned);
    return db_step_done(txn->c, s);
}

int db_txn_pack_rows_left(struct db_txn *txn, uint64_t seq, uint64_t *n)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_PACK_ROWS_LEFT, db_gc_sql);
    int64_t v = 0;
    int r;

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)seq);
    r = db_query_id(txn->c, s, &v);
    *n = (uint64_t)v;
    return r < 0 ? r : 0;
}

int db_chunks_condemned(struct db *db, uint64_t after, uint64_t upto, uint64_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int64_t v = 0;
    int r = -EIO;

    *n = 0;
    if (!c)
        return -EIO;
    if ((s = db_stmt(c, DB_S_CHUNKS_CONDEMNED, db_gc_sql))) {
        sqlite3_bind_int64(s, 1, (int64_t)after);
        sqlite3_bind_int64(s, 2, (int64_t)upto);
        r = db_query_id(c, s, &v);
    }
    db_reader_release(db, c);
    *n = (uint64_t)v;
    return r < 0 ? r : 0;
}
