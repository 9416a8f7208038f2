/* The search indexer's batch job, on its own thread (see indexer.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/search/indexer-int.h"
#include "daemon/base/log.h"
#include "daemon/format/text.h"
#include "proto/util.h"

static const char *const ix_sql[IX_COUNT_] = {
    [IX_INSERT] = "INSERT INTO search(rowid, name, body, tags, meta) VALUES(?1, ?2, ?3, ?4, ?5)",
    [IX_DELETE] = "INSERT INTO search(search, rowid, name, body, tags, meta)"
                  " VALUES('delete', ?1, ?2, ?3, ?4, ?5)",
    [IX_GET] = "SELECT gen, hash, name, tags, meta, body_len FROM indexed WHERE doc = ?1",
    [IX_PUT] = "INSERT OR REPLACE INTO indexed(doc, gen, hash, name, tags, meta, body_len)"
               " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [IX_DROP] = "DELETE FROM indexed WHERE doc = ?1",
    [IX_PENDING] = "SELECT d.id FROM meta_db.documents d LEFT JOIN indexed i ON i.doc = d.id"
                   " WHERE i.doc IS NULL OR i.gen != d.index_gen LIMIT ?1",
    /* Entries of documents that are gone without a removal: the index got ahead (a crash). */
    [IX_STALE] = "SELECT count(*) FROM indexed i LEFT JOIN meta_db.documents d ON d.id = i.doc"
                 " WHERE (d.id IS NULL OR d.hash != i.hash) AND i.doc NOT IN"
                 " (SELECT doc FROM meta_db.search_removals)",
};

int ix_exec(sqlite3 *c, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(c, sql, NULL, NULL, &msg) != SQLITE_OK) {
        log_error("search index: %s", msg ? msg : sqlite3_errmsg(c));
        sqlite3_free(msg);
        return -EIO;
    }
    return 0;
}

static sqlite3_stmt *ix_stmt(struct indexer *ix, enum ix_stmt id)
{
    if (!ix->stmts[id] && sqlite3_prepare_v3(ix->sql, ix_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                             &ix->stmts[id], NULL) != SQLITE_OK) {
        log_error("search index: %s", sqlite3_errmsg(ix->sql));
        return NULL;
    }
    sqlite3_reset(ix->stmts[id]);
    sqlite3_clear_bindings(ix->stmts[id]);
    return ix->stmts[id];
}

static int ix_step(struct indexer *ix, sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return 0;
    log_error("search index: %s", sqlite3_errmsg(ix->sql));
    return -EIO;
}

/* ---- the batch job (worker thread) ---- */

struct ix_fields {
    char *name, *tags, *meta;
    char *body;
    size_t body_len;
};

/* A document's text as the index takes it: its valid UTF-8 prefix of at most `max` bytes. */
static int read_text(struct indexer *ix, const struct db_index_doc *d, size_t max, char **out,
                     size_t *len)
{
    struct text_acc acc;
    char *raw;
    size_t raw_len;
    int r = store_read_prefix(ix->st, d->depth, d->root, d->root_len, max, &raw, &raw_len);

    if (r != 0)
        return r;
    text_acc_init(&acc, max);
    text_acc_feed(&acc, (const uint8_t *)raw, raw_len, true);
    free(raw);
    const char *text = text_acc_text(&acc, len);
    if (!text) {
        /* Not what it was when indexed: the store must be damaged. */
        *out = NULL;
        *len = 0;
        return STORE_E_INTEGRITY;
    }
    *out = acc.buf ? acc.buf : strdup("");
    return *out ? 0 : -ENOMEM;
}

static void bind_fields(sqlite3_stmt *s, int64_t rowid, const struct ix_fields *f)
{
    sqlite3_bind_int64(s, 1, rowid);
    sqlite3_bind_text(s, 2, f->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, f->body ? f->body : "", (int)f->body_len, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, f->tags, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, f->meta, -1, SQLITE_STATIC);
}

static char *col_dup(sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    return strdup(t ? (const char *)t : "");
}

/*
 * Takes a document's entry out, with exactly what it was made of; the body
 * is read back from the store through `d` (same content: same hash).
 * `same_body` is the current body when it is known to be those bytes.
 */
static int remove_entry(struct indexer *ix, int64_t rowid, const struct db_index_doc *d,
                        const struct ix_fields *same_body, bool *had)
{
    sqlite3_stmt *s = ix_stmt(ix, IX_GET);
    struct ix_fields old = {0};
    int r = 0;

    *had = false;
    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, rowid);
    if (sqlite3_step(s) == SQLITE_ROW) {
        *had = true;
        old.name = col_dup(s, 2);
        old.tags = col_dup(s, 3);
        old.meta = col_dup(s, 4);
        old.body_len = (size_t)sqlite3_column_int64(s, 5);
        if (!old.name || !old.tags || !old.meta)
            r = -ENOMEM;
    }
    sqlite3_reset(s);
    if (r == 0 && *had && old.body_len > 0) {
        if (same_body && same_body->body_len == old.body_len) {
            old.body = same_body->body;
        } else {
            size_t len;
            r = read_text(ix, d, old.body_len, &old.body, &len);
            if (r == STORE_E_INTEGRITY || (r == 0 && len != old.body_len)) {
                log_error("search index: the text document %" PRId64 " was indexed with cannot"
                          " be read back; the index is rebuilt",
                          rowid);
                r = IX_E_REBUILD;
            }
        }
    }
    if (r == 0 && *had && (s = ix_stmt(ix, IX_DELETE))) {
        bind_fields(s, rowid, &old);
        r = ix_step(ix, s);
    } else if (r == 0 && *had) {
        r = -EIO;
    }
    if (old.body != (same_body ? same_body->body : NULL))
        free(old.body);
    free(old.name);
    free(old.tags);
    free(old.meta);
    return r;
}

/* Brings one document's entry up to date; text, if given, is its content to index. */
static int index_doc(struct indexer *ix, int64_t rowid, char *text, size_t text_len,
                     uint64_t *indexed)
{
    struct db_index_doc d;
    struct ix_fields f = {0};
    sqlite3_stmt *s;
    bool had;
    int r = db_index_doc_load(ix->db, rowid, &d);

    if (r == DB_E_NOT_FOUND)
        return 0; /* deleted meanwhile: its removal takes care of the index */
    if (r < 0)
        return r;
    if ((s = ix_stmt(ix, IX_GET))) {
        sqlite3_bind_int64(s, 1, rowid);
        bool current = sqlite3_step(s) == SQLITE_ROW &&
                       (uint64_t)sqlite3_column_int64(s, 0) == d.gen &&
                       strcmp((const char *)sqlite3_column_text(s, 1), d.hash) == 0;
        sqlite3_reset(s);
        if (current) {
            db_index_doc_clear(&d);
            return 0;
        }
    }
    f.name = d.names;
    f.tags = d.tags;
    f.meta = d.meta;
    if (d.text && text) {
        f.body = text;
        f.body_len = text_len;
    } else if (d.text) {
        r = read_text(ix, &d, ix->max_text, &f.body, &f.body_len);
        if (r == STORE_E_INTEGRITY) {
            /* Damaged, or not text under this max_text: indexed by its names alone. */
            log_warn(
                "search index: the text of document %s cannot be read back; indexed without it",
                d.hash);
            f.body = NULL;
            f.body_len = 0;
            r = 0;
        }
    }
    if (r == 0)
        r = remove_entry(ix, rowid, &d, &f, &had);
    if (r == 0 && (s = ix_stmt(ix, IX_INSERT))) {
        bind_fields(s, rowid, &f);
        r = ix_step(ix, s);
    }
    if (r == 0 && (s = ix_stmt(ix, IX_PUT))) {
        sqlite3_bind_int64(s, 1, rowid);
        sqlite3_bind_int64(s, 2, (int64_t)d.gen);
        sqlite3_bind_text(s, 3, d.hash, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, f.name, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 5, f.tags, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 6, f.meta, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 7, (int64_t)f.body_len);
        r = ix_step(ix, s);
    }
    if (f.body != text)
        free(f.body);
    db_index_doc_clear(&d);
    if (r == 0)
        (*indexed)++;
    return r;
}

static int do_removals(struct ix_batch *b)
{
    struct indexer *ix = b->ix;
    struct db_removal *rem;
    size_t n;
    int r = db_removals(ix->db, IX_BATCH_DOCS, &rem, &n);

    if (r < 0)
        return r;
    b->more_removals = n == IX_BATCH_DOCS;
    if (n > 0 && !(b->removed = calloc(n, sizeof(*b->removed)))) {
        db_removals_free(rem, n);
        return -ENOMEM;
    }
    for (size_t i = 0; r == 0 && i < n; i++) {
        struct db_index_doc d = {
            .text = true, .depth = rem[i].depth, .root = rem[i].root, .root_len = rem[i].root_len};
        sqlite3_stmt *s;
        bool had;
        r = remove_entry(ix, rem[i].rowid, &d, NULL, &had);
        if (r == 0 && had && (s = ix_stmt(ix, IX_DROP))) {
            sqlite3_bind_int64(s, 1, rem[i].rowid);
            r = ix_step(ix, s);
        }
        if (r == 0)
            b->removed[b->nremoved++] = rem[i].rowid;
    }
    db_removals_free(rem, n);
    return r;
}

/*
 * What a catch-up takes: the documents whose entry is missing or behind
 * their metadata, a page at a time, and on the first batch whether the
 * index holds entries of documents that are gone. Both read cairn.db
 * (attached as meta_db), so they run before the batch's transaction, each
 * statement a snapshot of its own: a transaction of this connection holds a
 * snapshot of every attached database from its BEGIN (an IMMEDIATE one
 * takes the read-only meta_db's at once) to its end, and while it lasts,
 * cairn.db's checkpoints can copy nothing written after it and its WAL
 * cannot start over. A batch takes hundreds of milliseconds; every
 * restarting checkpoint meanwhile held the database's writer, and each add
 * waiting for its commit, for the whole of its wait.
 */
struct ix_scan {
    int64_t ids[IX_BATCH_DOCS];
    size_t n;
    bool stale;
};

static int catch_up_scan(struct ix_batch *b, struct ix_scan *sc)
{
    struct indexer *ix = b->ix;
    sqlite3_stmt *s;
    int rc;

    if (b->first && (s = ix_stmt(ix, IX_STALE))) {
        int64_t stale = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
        sqlite3_reset(s);
        if (stale > 0) {
            log_warn("search index: %lld entries of documents that are gone; rebuilding it",
                     (long long)stale);
            sc->stale = true;
            return 0;
        }
    }
    if (!(s = ix_stmt(ix, IX_PENDING)))
        return -EIO;
    sqlite3_bind_int64(s, 1, IX_BATCH_DOCS);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && sc->n < IX_BATCH_DOCS)
        sc->ids[sc->n++] = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -EIO;
}

/* Brings the scanned documents' entries up to date, in the batch's transaction. */
static int do_catch_up(struct ix_batch *b, const struct ix_scan *sc)
{
    int r = 0;

    /* After a fresh start (stale) every document is pending: the next batches scan. */
    b->more_catch_up = sc->stale || sc->n == IX_BATCH_DOCS;
    for (size_t i = 0; r == 0 && i < sc->n; i++)
        r = index_doc(b->ix, sc->ids[i], NULL, 0, &b->nindexed);
    return r;
}

/* CAIRN_TEST_INDEX_HOLD_MS: the tests look at cairn.db while a batch is open. */
static void test_hold(struct indexer *ix, uint64_t docs)
{
    log_warn("search index: holding a batch of %" PRIu64 " documents open for %u ms "
             "(CAIRN_TEST_INDEX_HOLD_MS)",
             docs, ix->test_hold_ms);
    struct timespec ts = {ix->test_hold_ms / 1000, (long)(ix->test_hold_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void ix_batch_work(struct ix_batch *b)
{
    struct indexer *ix = b->ix;
    struct ix_scan sc = {.n = 0};
    int r = b->catch_up ? catch_up_scan(b, &sc) : 0;

    /*
     * Deferred: the first write takes search.db's lock (the indexer is its
     * only writer), and no statement in it reads meta_db (see catch_up_scan).
     */
    bool began = r == 0 && (r = ix_exec(ix->sql, "BEGIN")) == 0;
    /*
     * An entry could not be taken out exactly (rebuild), or entries of
     * documents that are gone cannot be (stale): everything is indexed again.
     */
    if (r == 0 && (b->rebuild || sc.stale))
        r = ix_exec(ix->sql, "INSERT INTO search(search) VALUES('delete-all');"
                             "DELETE FROM indexed;");
    if (r == 0 && b->removals)
        r = do_removals(b);
    for (struct ix_item *it = b->items; r == 0 && it; it = it->next)
        r = index_doc(ix, it->rowid, it->text, it->len, &b->nindexed);
    if (r == 0 && b->catch_up)
        r = do_catch_up(b, &sc);
    if (r == 0 && ix->test_hold_ms && b->nindexed > 0)
        test_hold(ix, b->nindexed);
    /*
     * The index must never get ahead of the durable metadata: what it is
     * about to record was committed to cairn.db without a sync (the packs
     * are that database's log), so its write-ahead log is synced first.
     */
    if (r == 0)
        r = db_sync_log(ix->db);
    if (r == 0)
        r = ix_exec(ix->sql, "COMMIT");
    if (r != 0) {
        if (began)
            ix_exec(ix->sql, "ROLLBACK");
        b->nremoved = 0;
        b->nindexed = 0;
    }
    b->status = r;
}
