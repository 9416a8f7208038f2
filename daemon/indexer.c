#include "daemon/indexer.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sqlite3.h>

#include "daemon/db.h"
#include "daemon/log.h"
#include "daemon/store-int.h"
#include "daemon/text.h"
#include "proto/util.h"

/* Documents a batch takes from the queue or finds pending in the database. */
#define IX_BATCH_DOCS 512
/* Text a batch takes from the queue. */
#define IX_BATCH_TEXT (32u * 1024 * 1024)
/* Text held for queued documents; past this, text is read back from the store. */
#define IX_QUEUE_TEXT (64u * 1024 * 1024)
/* Queued documents; past this the queue is dropped and the database is scanned instead. */
#define IX_QUEUE_MAX 100000
/*
 * A batch outcome: an entry's text cannot be read back any more (damage in
 * the store), so it cannot be taken out exactly; the index is made anew.
 */
#define IX_E_REBUILD 100
/*
 * A few documents wait this long for more to join their batch: every commit
 * of the index costs a flush and, in time, merges, so a bulk load indexes
 * in a few large batches. Anyone waiting for the index (a search, gc)
 * starts the batch at once.
 */
#define IX_GATHER_MS 250
/*
 * Indexing is background work: its thread runs at this nice value, so adds
 * and reads take the CPU first and the index catches up when it is free.
 */
#define IX_NICE 10

static const char schema_sql[] =
    "CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5("
    " name, body, tags, meta, content = '', tokenize = 'unicode61 remove_diacritics 2');"
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_vocab USING fts5vocab(search, 'row');"
    /* What each entry was made of: FTS5 needs exactly that to take it out again. */
    "CREATE TABLE IF NOT EXISTS indexed("
    " doc INTEGER PRIMARY KEY,"
    " gen INTEGER NOT NULL,"
    " hash TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " tags TEXT NOT NULL,"
    " meta TEXT NOT NULL,"
    " body_len INTEGER NOT NULL);"
    "PRAGMA user_version = 1;";

enum ix_stmt {
    IX_INSERT,
    IX_DELETE,
    IX_GET,
    IX_PUT,
    IX_DROP,
    IX_PENDING,
    IX_STALE,
    IX_COUNT_,
};

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

struct ix_item {
    int64_t rowid;
    char *text;
    size_t len;
    struct ix_item *next;
};

struct ix_waiter {
    uint64_t seq;
    indexer_wait_fn *fn;
    void *ctx;
    struct ix_waiter *next;
};

struct ix_batch {
    struct indexer *ix;
    struct store_op op;
    struct db_write cleanup;
    struct ix_item *items;
    bool catch_up, removals, first, rebuild;
    uint64_t catch_up_gen, removals_gen;
    uint64_t target; /* queued_seq when the batch took the whole queue, else 0 */
    /* Results. */
    int status;
    bool more_catch_up, more_removals;
    int64_t *removed;
    size_t nremoved;
    uint64_t nindexed;
};

struct indexer {
    uv_loop_t *loop;
    struct store *st;
    struct db *db;
    char *path;
    size_t max_text;
    sqlite3 *conn; /* used by one batch job at a time */
    sqlite3_stmt *stmts[IX_COUNT_];
    /* Loop thread. */
    struct ix_item *head, *tail;
    size_t nitems, text_bytes;
    bool catch_up, removals, first_catch_up, rebuild;
    /* Bumped whenever catch_up or removals is set: a batch clears only what it saw set. */
    uint64_t catch_up_gen, removals_gen;
    uint64_t queued_seq, done_seq;
    struct ix_waiter *waiters;
    struct ix_batch *batch;
    uv_idle_t wake;
    uv_timer_t gather;
    uv_async_t finished_async;
    int open_handles;
    struct indexer_stats stats;
    /* The indexing thread: runs one batch at a time, handed over under `mu`. */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ix_batch *todo, *finished;
    bool stop;
};

static int ix_exec(sqlite3 *c, const char *sql)
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
    if (!ix->stmts[id] && sqlite3_prepare_v3(ix->conn, ix_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                             &ix->stmts[id], NULL) != SQLITE_OK) {
        log_error("search index: %s", sqlite3_errmsg(ix->conn));
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
    log_error("search index: %s", sqlite3_errmsg(ix->conn));
    return -EIO;
}

static void on_wake(uv_idle_t *h);
static void batch_work(struct ix_batch *b);
static void batch_done(struct ix_batch *b);

static void *ix_thread(void *arg)
{
    struct indexer *ix = arg;

    /* Lowering one's own priority needs no privilege; failing to is harmless. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), IX_NICE);
    pthread_mutex_lock(&ix->mu);
    for (;;) {
        while (!ix->todo && !ix->stop)
            pthread_cond_wait(&ix->cv, &ix->mu);
        if (ix->stop)
            break;
        struct ix_batch *b = ix->todo;
        ix->todo = NULL;
        pthread_mutex_unlock(&ix->mu);
        batch_work(b);
        pthread_mutex_lock(&ix->mu);
        ix->finished = b;
        uv_async_send(&ix->finished_async);
    }
    pthread_mutex_unlock(&ix->mu);
    return NULL;
}

static void on_finished(uv_async_t *h)
{
    struct indexer *ix = h->data;
    struct ix_batch *b;

    pthread_mutex_lock(&ix->mu);
    b = ix->finished;
    ix->finished = NULL;
    pthread_mutex_unlock(&ix->mu);
    if (b) {
        uv_unref((uv_handle_t *)&ix->finished_async);
        batch_done(b);
    }
}

int indexer_new(struct indexer **out, uv_loop_t *loop, struct store *st, struct db *db,
                const char *path, size_t max_text)
{
    struct indexer *ix = calloc(1, sizeof(*ix));
    char *attach;
    int r = -EIO;

    if (!ix || !(ix->path = strdup(path))) {
        free(ix);
        return -ENOMEM;
    }
    ix->loop = loop;
    ix->st = st;
    ix->db = db;
    ix->max_text = max_text;
    ix->catch_up = ix->removals = ix->first_catch_up = true;
    if (sqlite3_open_v2(path, &ix->conn,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        log_error("search index %s: %s", path, ix->conn ? sqlite3_errmsg(ix->conn) : "cannot open");
        goto fail;
    }
    sqlite3_busy_timeout(ix->conn, 10000);
    /* Derived data: NORMAL keeps it consistent after a crash; what it lost is redone. */
    if (ix_exec(ix->conn, "PRAGMA journal_mode=WAL") < 0 ||
        ix_exec(ix->conn, "PRAGMA synchronous=NORMAL") < 0 || ix_exec(ix->conn, schema_sql) < 0)
        goto fail;
    attach = sqlite3_mprintf("ATTACH 'file:%q?mode=ro' AS meta_db", db_path(db));
    if (!attach) {
        r = -ENOMEM;
        goto fail;
    }
    r = ix_exec(ix->conn, attach);
    sqlite3_free(attach);
    if (r < 0)
        goto fail;
    pthread_mutex_init(&ix->mu, NULL);
    pthread_cond_init(&ix->cv, NULL);
    if ((r = -pthread_create(&ix->thread, NULL, ix_thread, ix)) < 0) {
        log_error("search index: cannot start its thread: %s", strerror(-r));
        goto fail;
    }
    uv_idle_init(loop, &ix->wake);
    uv_timer_init(loop, &ix->gather);
    uv_async_init(loop, &ix->finished_async, on_finished);
    /* Like queued work, it keeps the loop running only while a batch runs. */
    uv_unref((uv_handle_t *)&ix->finished_async);
    ix->wake.data = ix->gather.data = ix->finished_async.data = ix;
    ix->open_handles = 3;
    /*
     * The first catch-up is work like any queued document: a search waits
     * for it. It starts on the loop's first turn, once the store is whole.
     */
    ix->queued_seq = 1;
    uv_idle_start(&ix->wake, on_wake);
    *out = ix;
    return 0;
fail:
    sqlite3_close(ix->conn);
    free(ix->path);
    free(ix);
    return r;
}

static void on_handle_closed(uv_handle_t *h)
{
    struct indexer *ix = h->data;
    if (--ix->open_handles > 0)
        return;
    pthread_mutex_destroy(&ix->mu);
    pthread_cond_destroy(&ix->cv);
    free(ix->path);
    free(ix);
}

struct indexer *indexer_free(struct indexer *ix)
{
    if (!ix)
        return NULL;
    /* No batch is running: the store has drained its operations. */
    pthread_mutex_lock(&ix->mu);
    ix->stop = true;
    pthread_cond_signal(&ix->cv);
    pthread_mutex_unlock(&ix->mu);
    pthread_join(ix->thread, NULL);
    for (struct ix_item *it = ix->head, *next; it; it = next) {
        next = it->next;
        free(it->text);
        free(it);
    }
    for (struct ix_waiter *w = ix->waiters, *next; w; w = next) {
        next = w->next;
        free(w);
    }
    for (int i = 0; i < IX_COUNT_; i++)
        sqlite3_finalize(ix->stmts[i]);
    sqlite3_wal_checkpoint_v2(ix->conn, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    sqlite3_close(ix->conn);
    uv_close((uv_handle_t *)&ix->wake, on_handle_closed);
    uv_close((uv_handle_t *)&ix->gather, on_handle_closed);
    uv_close((uv_handle_t *)&ix->finished_async, on_handle_closed);
    return NULL;
}

bool indexer_busy(const struct indexer *ix)
{
    return ix->batch != NULL;
}

const char *indexer_path(const struct indexer *ix)
{
    return ix->path;
}

void indexer_get_stats(const struct indexer *ix, struct indexer_stats *out)
{
    *out = ix->stats;
    out->pending = ix->nitems;
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

/* The documents whose entry is missing or behind their metadata, a page at a time. */
static int do_catch_up(struct ix_batch *b)
{
    struct indexer *ix = b->ix;
    int64_t ids[IX_BATCH_DOCS];
    size_t n = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    if (b->first && (s = ix_stmt(ix, IX_STALE))) {
        int64_t stale = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
        sqlite3_reset(s);
        if (stale > 0)
            log_warn("search index: %lld entries of documents that are gone; rebuilding it",
                     (long long)stale);
        if (stale > 0) {
            /* Entries that cannot be taken out exactly any more: start the index afresh. */
            if ((r = ix_exec(ix->conn, "INSERT INTO search(search) VALUES('delete-all');"
                                       "DELETE FROM indexed;")) < 0)
                return r;
        }
    }
    if (!(s = ix_stmt(ix, IX_PENDING)))
        return -EIO;
    sqlite3_bind_int64(s, 1, IX_BATCH_DOCS);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && n < IX_BATCH_DOCS)
        ids[n++] = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return -EIO;
    b->more_catch_up = n == IX_BATCH_DOCS;
    for (size_t i = 0; r == 0 && i < n; i++)
        r = index_doc(ix, ids[i], NULL, 0, &b->nindexed);
    return r;
}

static void batch_work(struct ix_batch *b)
{
    struct indexer *ix = b->ix;
    int r = ix_exec(ix->conn, "BEGIN IMMEDIATE");

    /* An entry could not be taken out exactly: everything is indexed again. */
    if (r == 0 && b->rebuild)
        r = ix_exec(ix->conn, "INSERT INTO search(search) VALUES('delete-all');"
                              "DELETE FROM indexed;");
    if (r == 0 && b->removals)
        r = do_removals(b);
    for (struct ix_item *it = b->items; r == 0 && it; it = it->next)
        r = index_doc(ix, it->rowid, it->text, it->len, &b->nindexed);
    if (r == 0 && b->catch_up)
        r = do_catch_up(b);
    /*
     * The index must never get ahead of the durable metadata: what it is
     * about to record was committed to cairn.db without a sync (the packs
     * are that database's log), so its write-ahead log is synced first.
     */
    if (r == 0)
        r = db_sync_log(ix->db);
    if (r == 0)
        r = ix_exec(ix->conn, "COMMIT");
    if (r != 0) {
        ix_exec(ix->conn, "ROLLBACK");
        b->nremoved = 0;
        b->nindexed = 0;
    }
    b->status = r;
}

/* ---- the loop side ---- */

static void kick(struct indexer *ix);
static void kick_soon(struct indexer *ix);

static void set_catch_up(struct indexer *ix)
{
    ix->catch_up = true;
    ix->catch_up_gen++;
}

static void set_removals(struct indexer *ix)
{
    ix->removals = true;
    ix->removals_gen++;
}

static void wake_waiters(struct indexer *ix)
{
    struct ix_waiter **pp = &ix->waiters, *ready = NULL;

    while (*pp) {
        struct ix_waiter *w = *pp;
        if (w->seq <= ix->done_seq) {
            *pp = w->next;
            w->next = ready;
            ready = w;
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        struct ix_waiter *w = ready;
        ready = w->next;
        w->fn(w->ctx);
        free(w);
    }
}

static void on_wake(uv_idle_t *h)
{
    struct indexer *ix = h->data;
    uv_idle_stop(h);
    wake_waiters(ix);
    kick(ix);
}

static int cleanup_apply(struct db_txn *txn, struct db_write *w)
{
    struct ix_batch *b = container_of(w, struct ix_batch, cleanup);
    for (size_t i = 0; i < b->nremoved; i++) {
        int r = db_txn_removal_done(txn, b->removed[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

static void batch_end(struct ix_batch *b)
{
    struct indexer *ix = b->ix;

    for (struct ix_item *it = b->items, *next; it; it = next) {
        next = it->next;
        free(it->text);
        free(it);
    }
    free(b->removed);
    free(b);
    ix->batch = NULL;
    wake_waiters(ix);
    kick_soon(ix);
}

static void cleanup_done(struct db_write *w)
{
    batch_end(container_of(w, struct ix_batch, cleanup));
}

static void batch_done(struct ix_batch *b)
{
    struct indexer *ix = b->ix;

    store_op_end(ix->st, &b->op);
    if (b->status != 0) {
        if (b->status == IX_E_REBUILD)
            ix->rebuild = ix->first_catch_up = true;
        else
            log_error("search index: a batch failed (%s); it is retried",
                      b->status < 0 ? strerror(-b->status) : "damaged text in the store");
        /* Its work is found again by scanning the database. */
        set_catch_up(ix);
        set_removals(ix);
        b->nremoved = 0;
    } else {
        if (b->rebuild)
            ix->rebuild = false;
        ix->stats.batches++;
        ix->stats.indexed += b->nindexed;
        ix->stats.removed += b->nremoved;
        if (b->nindexed || b->nremoved)
            db_index_changed(ix->db);
        if (b->catch_up && !b->more_catch_up && b->catch_up_gen == ix->catch_up_gen)
            ix->catch_up = false;
        if (b->removals && !b->more_removals && b->removals_gen == ix->removals_gen)
            ix->removals = false;
        if (b->first)
            ix->first_catch_up = false;
        /* Everything queued before the batch began is in, unless work was left over. */
        if (b->target && !ix->catch_up && !ix->removals && b->target > ix->done_seq)
            ix->done_seq = b->target;
    }
    if (b->nremoved > 0) {
        b->cleanup.apply = cleanup_apply;
        b->cleanup.done = cleanup_done;
        db_write(ix->db, &b->cleanup);
        return;
    }
    batch_end(b);
}

static void batch_run(struct ix_batch *b)
{
    struct indexer *ix = b->ix;

    store_op_begin(ix->st, &b->op);
    uv_ref((uv_handle_t *)&ix->finished_async);
    pthread_mutex_lock(&ix->mu);
    ix->todo = b;
    pthread_cond_signal(&ix->cv);
    pthread_mutex_unlock(&ix->mu);
}

static void on_gather(uv_timer_t *t)
{
    kick(t->data);
}

/* Starts a batch now if it is full or awaited, else once IX_GATHER_MS have passed. */
static void kick_soon(struct indexer *ix)
{
    if (ix->waiters || ix->catch_up || ix->removals || ix->nitems >= IX_BATCH_DOCS ||
        ix->text_bytes >= IX_BATCH_TEXT) {
        kick(ix);
        return;
    }
    if (!ix->batch && !uv_is_active((uv_handle_t *)&ix->gather))
        uv_timer_start(&ix->gather, on_gather, IX_GATHER_MS, 0);
}

static void kick(struct indexer *ix)
{
    struct ix_batch *b;
    struct ix_item **tail;
    size_t n = 0, text = 0;

    if (ix->batch || (!ix->head && !ix->catch_up && !ix->removals))
        return;
    uv_timer_stop(&ix->gather);
    if (!(b = calloc(1, sizeof(*b)))) {
        log_error("search index: out of memory; indexing waits");
        return;
    }
    b->ix = ix;
    b->catch_up = ix->catch_up;
    b->removals = ix->removals;
    b->catch_up_gen = ix->catch_up_gen;
    b->removals_gen = ix->removals_gen;
    b->first = ix->first_catch_up && ix->catch_up;
    b->rebuild = b->first && ix->rebuild;
    tail = &b->items;
    while (ix->head && n < IX_BATCH_DOCS && text < IX_BATCH_TEXT) {
        struct ix_item *it = ix->head;
        ix->head = it->next;
        it->next = NULL;
        *tail = it;
        tail = &it->next;
        n++;
        text += it->len;
        ix->nitems--;
        ix->text_bytes -= it->len;
    }
    if (!ix->head)
        ix->tail = NULL;
    b->target = ix->head ? 0 : ix->queued_seq;
    ix->batch = b;
    batch_run(b);
}

void indexer_queue(struct indexer *ix, int64_t rowid, char *text, size_t len)
{
    struct ix_item *it;

    ix->queued_seq++;
    if (ix->nitems >= IX_QUEUE_MAX) {
        /* Too much waiting: forget the queue, the database says what is pending. */
        for (it = ix->head; it;) {
            struct ix_item *next = it->next;
            free(it->text);
            free(it);
            it = next;
        }
        ix->head = ix->tail = NULL;
        ix->nitems = ix->text_bytes = 0;
        set_catch_up(ix);
    }
    if (ix->catch_up) {
        /*
         * The database scan finds it, but only a scan that starts after its
         * commit: a batch already scanning must not end catch-up mode.
         */
        free(text);
        set_catch_up(ix);
        kick(ix);
        return;
    }
    if (!(it = calloc(1, sizeof(*it)))) {
        free(text);
        set_catch_up(ix);
        kick(ix);
        return;
    }
    it->rowid = rowid;
    if (text && ix->text_bytes + len <= IX_QUEUE_TEXT) {
        it->text = text;
        it->len = len;
        ix->text_bytes += len;
    } else {
        free(text); /* read back from the store when its turn comes */
    }
    if (ix->tail)
        ix->tail->next = it;
    else
        ix->head = it;
    ix->tail = it;
    ix->nitems++;
    kick_soon(ix);
}

void indexer_removed(struct indexer *ix)
{
    ix->queued_seq++;
    set_removals(ix);
    kick(ix);
}

int indexer_wait(struct indexer *ix, indexer_wait_fn *fn, void *ctx)
{
    struct ix_waiter *w = calloc(1, sizeof(*w));

    if (!w)
        return -ENOMEM;
    w->seq = ix->queued_seq;
    w->fn = fn;
    w->ctx = ctx;
    w->next = ix->waiters;
    ix->waiters = w;
    if (w->seq <= ix->done_seq)
        uv_idle_start(&ix->wake, on_wake);
    else
        kick(ix); /* what it waits for may be gathering */
    return 0;
}
