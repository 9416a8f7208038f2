#include "daemon/db.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdatomic.h>
#include <stdio.h>

#include <sqlite3.h>

#include "daemon/log.h"
#include "daemon/search.h"
#include "proto/util.h"

#define DB_SCHEMA_VERSION 1

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS documents("
    " id INTEGER PRIMARY KEY,"
    " hash TEXT NOT NULL UNIQUE,"
    " size INTEGER NOT NULL,"
    " stored_size INTEGER NOT NULL,"
    " chunks INTEGER NOT NULL,"
    " mime TEXT NOT NULL,"
    " created INTEGER NOT NULL,"
    " manifest BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS names("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL,"
    " doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
    " added INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS names_by_name ON names(name, seq);"
    "CREATE INDEX IF NOT EXISTS names_by_doc ON names(doc, seq);"
    "CREATE TABLE IF NOT EXISTS tags("
    " doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
    " tag TEXT NOT NULL,"
    " PRIMARY KEY(doc, tag)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS tags_by_tag ON tags(tag, doc);"
    "CREATE TABLE IF NOT EXISTS meta("
    " doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
    " key TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " PRIMARY KEY(doc, key)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS chunks("
    " hash BLOB PRIMARY KEY,"
    " size INTEGER NOT NULL,"
    " stored_size INTEGER NOT NULL,"
    " refs INTEGER NOT NULL) WITHOUT ROWID;"
    /*
     * The full-text index: one row per document, rowid = documents.id. Names
     * carry the most weight in ranking (see db_search). The vocabulary view
     * serves fuzzy search.
     */
    "CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5("
    " name, body, tags, meta, tokenize = 'unicode61 remove_diacritics 2');"
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_vocab USING fts5vocab(search, 'row');";

enum stmt_id {
    S_DOC_BY_HASH,
    S_DOC_BY_PREFIX,
    S_DOC_BY_NAME,
    S_DOC_BY_ID,
    S_NEWEST_NAME,
    S_NAMES_OF_DOC,
    S_TAGS_OF_DOC,
    S_META_OF_DOC,
    S_CHUNK_LOOKUP,
    S_CHUNK_REFS,
    S_CHUNK_INSERT,
    S_CHUNK_REF,
    S_CHUNK_UNREF,
    S_DOC_INSERT,
    S_DOC_DELETE,
    S_NAME_INSERT,
    S_TAG_INSERT,
    S_META_UPSERT,
    S_LIST_ALL,
    S_LIST_TAG,
    S_TOTALS,
    S_CHUNK_TOTALS,
    S_FTS_INSERT,
    S_FTS_UPDATE,
    S_FTS_GET,
    S_FTS_DELETE,
    S_VOCAB,
    S_CHUNKS_UNREFERENCED,
    S_CHUNK_DROP,
    S_CHUNKS_ALL,
    S_DOC_MANIFESTS,
    S_FTS_TEXT,
    S_COUNT_,
};

static const char *const stmt_sql[S_COUNT_] = {
    [S_DOC_BY_HASH] = "SELECT id FROM documents WHERE hash = ?1",
    [S_DOC_BY_PREFIX] = "SELECT id FROM documents WHERE hash >= ?1 AND hash < ?1 || 'g' LIMIT 2",
    [S_DOC_BY_NAME] = "SELECT doc FROM names WHERE name = ?1 ORDER BY seq DESC LIMIT 1",
    [S_DOC_BY_ID] = "SELECT hash, size, stored_size, chunks, mime, created, manifest"
                    " FROM documents WHERE id = ?1",
    [S_NEWEST_NAME] = "SELECT name FROM names WHERE doc = ?1 ORDER BY seq DESC LIMIT 1",
    [S_NAMES_OF_DOC] = "SELECT name FROM names WHERE doc = ?1 GROUP BY name ORDER BY MIN(seq)",
    [S_TAGS_OF_DOC] = "SELECT tag FROM tags WHERE doc = ?1 ORDER BY tag",
    [S_META_OF_DOC] = "SELECT key, value FROM meta WHERE doc = ?1 ORDER BY key",
    [S_CHUNK_LOOKUP] = "SELECT stored_size FROM chunks WHERE hash = ?1",
    [S_CHUNK_REFS] = "SELECT refs FROM chunks WHERE hash = ?1",
    [S_CHUNK_INSERT] = "INSERT INTO chunks(hash, size, stored_size, refs) VALUES(?1, ?2, ?3, 0)"
                       " ON CONFLICT(hash) DO NOTHING",
    [S_CHUNK_REF] = "UPDATE chunks SET refs = refs + 1 WHERE hash = ?1",
    [S_CHUNK_UNREF] = "UPDATE chunks SET refs = refs - 1 WHERE hash = ?1 AND refs > 0",
    [S_DOC_INSERT] = "INSERT INTO documents(hash, size, stored_size, chunks, mime, created,"
                     " manifest) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [S_DOC_DELETE] = "DELETE FROM documents WHERE id = ?1",
    [S_NAME_INSERT] = "INSERT INTO names(name, doc, added) VALUES(?1, ?2, ?3)",
    [S_TAG_INSERT] = "INSERT OR IGNORE INTO tags(doc, tag) VALUES(?1, ?2)",
    [S_META_UPSERT] = "INSERT INTO meta(doc, key, value) VALUES(?1, ?2, ?3)"
                      " ON CONFLICT(doc, key) DO UPDATE SET value = excluded.value",
    [S_LIST_ALL] = "SELECT id FROM documents WHERE hash > ?1 ORDER BY hash LIMIT ?2",
    [S_LIST_TAG] = "SELECT d.id FROM documents d JOIN tags t ON t.doc = d.id"
                   " WHERE t.tag = ?2 AND d.hash > ?1 ORDER BY d.hash LIMIT ?3",
    [S_TOTALS] = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM documents",
    [S_CHUNK_TOTALS] = "SELECT COUNT(*), COALESCE(SUM(stored_size), 0), COALESCE(SUM(size), 0)"
                       " FROM chunks",
    [S_FTS_INSERT] = "INSERT INTO search(rowid, name, body, tags, meta) VALUES(?1, ?2, ?3, ?4, ?5)",
    [S_FTS_UPDATE] = "UPDATE search SET name = ?2, tags = ?3, meta = ?4 WHERE rowid = ?1",
    [S_FTS_GET] = "SELECT name, tags, meta FROM search WHERE rowid = ?1",
    [S_FTS_DELETE] = "DELETE FROM search WHERE rowid = ?1",
    [S_VOCAB] = "SELECT term, doc FROM search_vocab",
    [S_CHUNKS_UNREFERENCED] = "SELECT hash, size, stored_size FROM chunks WHERE refs = 0",
    [S_CHUNK_DROP] = "DELETE FROM chunks WHERE hash = ?1 AND refs = 0",
    [S_CHUNKS_ALL] = "SELECT hash, size, stored_size FROM chunks WHERE refs > 0 ORDER BY hash",
    [S_DOC_MANIFESTS] = "SELECT id, chunks, manifest FROM documents",
    [S_FTS_TEXT] = "SELECT substr(CAST(body AS BLOB), 1, ?2), name FROM search WHERE rowid = ?1",
};

/* Searches build their SQL from the filters given; the few shapes in use stay prepared. */
#define DB_SEARCH_SHAPES 8

struct db_conn {
    sqlite3 *sql;
    sqlite3_stmt *stmts[S_COUNT_];
    sqlite3_stmt *search_stmts[DB_SEARCH_SHAPES];
    unsigned search_next; /* round-robin eviction */
    struct db_conn *next_free;
};

struct db_txn {
    struct db_conn *conn;
    bool index_changed;
};

struct db {
    uv_loop_t *loop;
    char *path;
    /* Reader pool, shared by worker threads. */
    pthread_mutex_t pool_lock;
    struct db_conn *pool_free;
    struct db_conn **pool_all;
    size_t pool_n, pool_cap;
    /* The writer: loop-thread queue, and the batch the worker owns while it runs. */
    struct db_conn *writer;
    struct db_write *queue_head, *queue_tail;
    struct db_write *batch;
    bool batch_running;
    uv_work_t batch_work;
    /* Fuzzy search's copy of the index vocabulary, rebuilt when the index changed. */
    pthread_mutex_t vocab_lock;
    struct db_term *vocab;
    size_t nvocab;
    uint64_t vocab_gen;         /* index_gen the copy was made at */
    _Atomic uint64_t index_gen; /* bumped by every commit that changed the index */
};

struct db_term {
    char *text;
    size_t len;
    int64_t docs;
};

static sqlite3_stmt *stmt(struct db_conn *c, enum stmt_id id)
{
    sqlite3_stmt *s = c->stmts[id];
    if (s) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return s;
    }
    if (sqlite3_prepare_v3(c->sql, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) !=
        SQLITE_OK) {
        log_error("database: cannot prepare statement: %s", sqlite3_errmsg(c->sql));
        return NULL;
    }
    c->stmts[id] = s;
    return s;
}

static void conn_close(struct db_conn *c)
{
    if (!c)
        return;
    for (int i = 0; i < S_COUNT_; i++)
        sqlite3_finalize(c->stmts[i]);
    for (int i = 0; i < DB_SEARCH_SHAPES; i++)
        sqlite3_finalize(c->search_stmts[i]);
    sqlite3_close(c->sql);
    free(c);
}

static int exec(struct db_conn *c, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(c->sql, sql, NULL, NULL, &msg) != SQLITE_OK) {
        log_error("database: %s: %s", sql, msg ? msg : "error");
        sqlite3_free(msg);
        return -EIO;
    }
    return 0;
}

static int conn_open(const char *path, bool writer, struct db_conn **out)
{
    struct db_conn *c = calloc(1, sizeof(*c));
    int flags = SQLITE_OPEN_NOMUTEX |
                (writer ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY);

    if (!c)
        return -ENOMEM;
    if (sqlite3_open_v2(path, &c->sql, flags, NULL) != SQLITE_OK) {
        log_error("database %s: %s", path, c->sql ? sqlite3_errmsg(c->sql) : "cannot open");
        conn_close(c);
        return -EIO;
    }
    sqlite3_busy_timeout(c->sql, 10000);
    sqlite3_extended_result_codes(c->sql, 1);
    if (writer) {
        /* FULL makes every commit durable in WAL mode, which an acknowledged add promises. */
        if (exec(c, "PRAGMA journal_mode=WAL") || exec(c, "PRAGMA synchronous=FULL") ||
            exec(c, "PRAGMA foreign_keys=ON")) {
            conn_close(c);
            return -EIO;
        }
    }
    *out = c;
    return 0;
}

static struct db_conn *reader_acquire(struct db *db)
{
    struct db_conn *c = NULL;

    pthread_mutex_lock(&db->pool_lock);
    if (db->pool_free) {
        c = db->pool_free;
        db->pool_free = c->next_free;
    }
    pthread_mutex_unlock(&db->pool_lock);
    if (c)
        return c;
    if (conn_open(db->path, false, &c) < 0)
        return NULL;
    pthread_mutex_lock(&db->pool_lock);
    if (db->pool_n == db->pool_cap) {
        size_t ncap = db->pool_cap ? db->pool_cap * 2 : 8;
        struct db_conn **all = realloc(db->pool_all, ncap * sizeof(*all));
        if (!all) {
            pthread_mutex_unlock(&db->pool_lock);
            conn_close(c);
            return NULL;
        }
        db->pool_all = all;
        db->pool_cap = ncap;
    }
    db->pool_all[db->pool_n++] = c;
    pthread_mutex_unlock(&db->pool_lock);
    return c;
}

static void reader_release(struct db *db, struct db_conn *c)
{
    /* Leave no statement holding a read transaction open between uses. */
    for (int i = 0; i < S_COUNT_; i++) {
        if (c->stmts[i])
            sqlite3_reset(c->stmts[i]);
    }
    pthread_mutex_lock(&db->pool_lock);
    c->next_free = db->pool_free;
    db->pool_free = c;
    pthread_mutex_unlock(&db->pool_lock);
}

int db_new(struct db **out, uv_loop_t *loop, const char *path)
{
    struct db *db = calloc(1, sizeof(*db));
    int r;

    if (!db)
        return -ENOMEM;
    db->loop = loop;
    db->path = strdup(path);
    pthread_mutex_init(&db->pool_lock, NULL);
    pthread_mutex_init(&db->vocab_lock, NULL);
    if (!db->path) {
        db_free(db);
        return -ENOMEM;
    }
    r = conn_open(path, true, &db->writer);
    if (r < 0) {
        db_free(db);
        return r;
    }
    if (exec(db->writer, schema_sql) || exec(db->writer, "PRAGMA user_version=1")) {
        db_free(db);
        return -EIO;
    }
    *out = db;
    return 0;
}

struct db *db_free(struct db *db)
{
    if (!db)
        return NULL;
    for (size_t i = 0; i < db->pool_n; i++)
        conn_close(db->pool_all[i]);
    free(db->pool_all);
    if (db->writer) {
        /* Fold the WAL back so the database file alone is complete. */
        sqlite3_wal_checkpoint_v2(db->writer->sql, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        conn_close(db->writer);
    }
    pthread_mutex_destroy(&db->pool_lock);
    for (size_t i = 0; i < db->nvocab; i++)
        free(db->vocab[i].text);
    free(db->vocab);
    pthread_mutex_destroy(&db->vocab_lock);
    free(db->path);
    free(db);
    return NULL;
}

/* ---- group-committed writes ---- */

static void batch_work(uv_work_t *work)
{
    struct db *db = container_of(work, struct db, batch_work);
    struct db_txn txn = {db->writer, false};
    int r;

    r = exec(db->writer, "BEGIN IMMEDIATE");
    for (struct db_write *w = db->batch; w; w = w->next_) {
        if (r < 0) {
            w->status = r;
            continue;
        }
        if (exec(db->writer, "SAVEPOINT item") < 0) {
            w->status = -EIO;
            continue;
        }
        w->status = w->apply(&txn, w);
        if (w->status != 0)
            exec(db->writer, "ROLLBACK TO item");
        exec(db->writer, "RELEASE item");
    }
    if (r == 0 && exec(db->writer, "COMMIT") < 0) {
        exec(db->writer, "ROLLBACK");
        for (struct db_write *w = db->batch; w; w = w->next_) {
            if (w->status == 0)
                w->status = -EIO;
        }
    } else if (r == 0 && txn.index_changed) {
        atomic_fetch_add(&db->index_gen, 1);
    }
}

static void batch_start(struct db *db);

static void batch_done(uv_work_t *work, int status)
{
    struct db *db = container_of(work, struct db, batch_work);
    struct db_write *w = db->batch, *next;

    db->batch = NULL;
    db->batch_running = false;
    for (; w; w = next) {
        next = w->next_;
        if (status < 0)
            w->status = status;
        w->done(w);
    }
    batch_start(db);
}

static void batch_start(struct db *db)
{
    if (db->batch_running || !db->queue_head)
        return;
    db->batch = db->queue_head;
    db->queue_head = db->queue_tail = NULL;
    db->batch_running = true;
    int r = uv_queue_work(db->loop, &db->batch_work, batch_work, batch_done);
    if (r < 0)
        batch_done(&db->batch_work, r);
}

void db_write(struct db *db, struct db_write *w)
{
    w->next_ = NULL;
    w->status = 0;
    if (db->queue_tail)
        db->queue_tail->next_ = w;
    else
        db->queue_head = w;
    db->queue_tail = w;
    batch_start(db);
}

bool db_busy(struct db *db)
{
    return db->batch_running || db->queue_head;
}

/* ---- helpers shared by reads and writes ---- */

static int step_done(struct db_conn *c, sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return 0;
    log_error("database: %s", sqlite3_errmsg(c->sql));
    return -EIO;
}

/* Runs a statement that yields at most one integer; DB_E_NOT_FOUND if no row. */
static int query_id(struct db_conn *c, sqlite3_stmt *s, int64_t *out)
{
    int rc = sqlite3_step(s);
    int r = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (rc == SQLITE_DONE)
        r = DB_E_NOT_FOUND;
    else {
        log_error("database: %s", sqlite3_errmsg(c->sql));
        r = -EIO;
    }
    sqlite3_reset(s);
    return r;
}

static char *column_strdup(sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    return strdup(t ? (const char *)t : "");
}

/* Collects one text column of every row into a NULL-free array. */
static int query_strings(struct db_conn *c, sqlite3_stmt *s, int col, char ***out, size_t *n)
{
    size_t cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            char **grown = realloc(*out, cap * sizeof(char *));
            if (!grown)
                goto oom;
            *out = grown;
        }
        if (!((*out)[*n] = column_strdup(s, col)))
            goto oom;
        (*n)++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        log_error("database: %s", sqlite3_errmsg(c->sql));
        return -EIO;
    }
    return 0;
oom:
    sqlite3_reset(s);
    return -ENOMEM;
}

static void strings_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void db_doc_clear(struct db_doc *doc)
{
    free(doc->name);
    free(doc->chunks);
    strings_free(doc->tags, doc->ntags);
    strings_free(doc->names, doc->nnames);
    strings_free(doc->meta_keys, doc->nmeta);
    strings_free(doc->meta_values, doc->nmeta);
    memset(doc, 0, sizeof(*doc));
}

void db_docs_free(struct db_doc *docs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        db_doc_clear(&docs[i]);
    free(docs);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    proto_be32_write(p, v);
}

static void db_chunks_encode(const struct db_chunk *chunks, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++, out += DB_CHUNK_ENTRY) {
        memcpy(out, chunks[i].hash, PROTO_HASH_LEN);
        put_be32(out + 32, chunks[i].size);
        put_be32(out + 36, chunks[i].stored_size);
    }
}

static int chunks_decode(const uint8_t *blob, size_t len, uint32_t n, struct db_chunk **out)
{
    if (len != (size_t)n * DB_CHUNK_ENTRY)
        return -EBADMSG;
    struct db_chunk *chunks = calloc(n ? n : 1, sizeof(*chunks));
    if (!chunks)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++, blob += DB_CHUNK_ENTRY) {
        memcpy(chunks[i].hash, blob, PROTO_HASH_LEN);
        chunks[i].size = proto_be32_read(blob + 32);
        chunks[i].stored_size = proto_be32_read(blob + 36);
    }
    *out = chunks;
    return 0;
}

/* Loads a document row and what `want` asks for. */
static int load_doc(struct db_conn *c, int64_t id, unsigned want, struct db_doc *doc)
{
    sqlite3_stmt *s = stmt(c, S_DOC_BY_ID);
    int rc, r = 0;

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, id);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        return rc == SQLITE_DONE ? DB_E_NOT_FOUND : -EIO;
    }
    doc->rowid = id;
    snprintf(doc->hash, sizeof(doc->hash), "%s", (const char *)sqlite3_column_text(s, 0));
    doc->size = (uint64_t)sqlite3_column_int64(s, 1);
    doc->stored_size = (uint64_t)sqlite3_column_int64(s, 2);
    doc->nchunks = (uint32_t)sqlite3_column_int64(s, 3);
    snprintf(doc->mime, sizeof(doc->mime), "%s", (const char *)sqlite3_column_text(s, 4));
    doc->created = sqlite3_column_int64(s, 5);
    if (want & DB_WANT_CHUNKS)
        r = chunks_decode(sqlite3_column_blob(s, 6), (size_t)sqlite3_column_bytes(s, 6),
                          doc->nchunks, &doc->chunks);
    sqlite3_reset(s);
    if (r < 0)
        return r;

    if (!doc->name) {
        s = stmt(c, S_NEWEST_NAME);
        if (!s)
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if (sqlite3_step(s) == SQLITE_ROW && !(doc->name = column_strdup(s, 0)))
            r = -ENOMEM;
        sqlite3_reset(s);
        if (r < 0)
            return r;
    }
    if (want & (DB_WANT_TAGS | DB_WANT_DETAILS)) {
        if (!(s = stmt(c, S_TAGS_OF_DOC)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->tags, &doc->ntags)) < 0)
            return r;
    }
    if (want & DB_WANT_DETAILS) {
        size_t nvalues;
        if (!(s = stmt(c, S_NAMES_OF_DOC)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->names, &doc->nnames)) < 0)
            return r;
        if (!(s = stmt(c, S_META_OF_DOC)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->meta_keys, &doc->nmeta)) < 0)
            return r;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 1, &doc->meta_values, &nvalues)) < 0)
            return r;
        if (nvalues != doc->nmeta)
            return -EIO;
    }
    return 0;
}

/*
 * Finds the document id for a ref (PROTOCOL.md "References"). When it was
 * found by name, *by_name is set so the caller reports that name.
 */
static int resolve_id(struct db_conn *c, const char *ref, size_t len, int64_t *id, bool *by_name)
{
    char key[PROTO_MAX_REF + 1];
    sqlite3_stmt *s;
    int r;

    *by_name = false;
    if (len == 0 || len > PROTO_MAX_REF || memchr(ref, '\0', len))
        return DB_E_NOT_FOUND;
    memcpy(key, ref, len);
    key[len] = '\0';
    if (len >= 8 && len <= PROTO_HASH_HEX && proto_is_hex(ref, len)) {
        char lower[PROTO_HASH_HEX + 1];
        for (size_t i = 0; i <= len; i++)
            lower[i] = (char)(key[i] >= 'A' && key[i] <= 'F' ? key[i] + 32 : key[i]);
        if (len == PROTO_HASH_HEX) {
            if (!(s = stmt(c, S_DOC_BY_HASH)))
                return -EIO;
            sqlite3_bind_text(s, 1, lower, (int)len, SQLITE_TRANSIENT);
            r = query_id(c, s, id);
            if (r != DB_E_NOT_FOUND)
                return r;
        } else {
            int64_t first = 0;
            int rows = 0, rc;
            if (!(s = stmt(c, S_DOC_BY_PREFIX)))
                return -EIO;
            sqlite3_bind_text(s, 1, lower, (int)len, SQLITE_TRANSIENT);
            while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                if (rows++ == 0)
                    first = sqlite3_column_int64(s, 0);
            }
            sqlite3_reset(s);
            if (rc != SQLITE_DONE)
                return -EIO;
            if (rows > 1)
                return DB_E_AMBIGUOUS;
            if (rows == 1) {
                *id = first;
                return 0;
            }
        }
    }
    if (!(s = stmt(c, S_DOC_BY_NAME)))
        return -EIO;
    sqlite3_bind_text(s, 1, key, (int)len, SQLITE_TRANSIENT);
    r = query_id(c, s, id);
    if (r == 0)
        *by_name = true;
    return r;
}

int db_resolve(struct db *db, const char *ref, size_t ref_len, unsigned want, struct db_doc *doc)
{
    struct db_conn *c = reader_acquire(db);
    int64_t id;
    bool by_name;
    int r;

    memset(doc, 0, sizeof(*doc));
    if (!c)
        return -EIO;
    r = resolve_id(c, ref, ref_len, &id, &by_name);
    if (r == 0 && by_name && !(doc->name = strndup(ref, ref_len)))
        r = -ENOMEM;
    if (r == 0)
        r = load_doc(c, id, want, doc);
    reader_release(db, c);
    if (r != 0)
        db_doc_clear(doc);
    return r;
}

int db_name_current(struct db *db, const char *name, int64_t doc, bool *current)
{
    struct db_conn *c = reader_acquire(db);
    sqlite3_stmt *s;
    int64_t id = -1;
    int r;

    *current = false;
    if (!c)
        return -EIO;
    if (!(s = stmt(c, S_DOC_BY_NAME))) {
        reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    r = query_id(c, s, &id);
    reader_release(db, c);
    if (r < 0)
        return r;
    *current = r == 0 && id == doc;
    return 0;
}

int db_chunk_lookup(struct db *db, const uint8_t hash[PROTO_HASH_LEN], uint32_t *stored_size)
{
    struct db_conn *c = reader_acquire(db);
    sqlite3_stmt *s;
    int64_t v;
    int r;

    if (!c)
        return -EIO;
    if (!(s = stmt(c, S_CHUNK_LOOKUP))) {
        reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    r = query_id(c, s, &v);
    if (r == 0)
        *stored_size = (uint32_t)v;
    reader_release(db, c);
    return r;
}

int db_list(struct db *db, const char *tag, const char *after, size_t limit, struct db_doc **docs,
            size_t *ndocs)
{
    struct db_conn *c = reader_acquire(db);
    struct db_doc *out = NULL;
    int64_t *ids = NULL;
    size_t n = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *docs = NULL;
    *ndocs = 0;
    if (!c)
        return -EIO;
    s = stmt(c, tag ? S_LIST_TAG : S_LIST_ALL);
    if (!s) {
        reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, after ? after : "", -1, SQLITE_TRANSIENT);
    if (tag) {
        sqlite3_bind_text(s, 2, tag, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 3, (int64_t)limit);
    } else {
        sqlite3_bind_int64(s, 2, (int64_t)limit);
    }
    /* Collect ids first: load_doc reuses statements, so the cursor must be finished. */
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            int64_t *grown = realloc(ids, cap * sizeof(*ids));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            ids = grown;
        }
        ids[n++] = sqlite3_column_int64(s, 0);
    }
    sqlite3_reset(s);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0 && n > 0 && !(out = calloc(n, sizeof(*out))))
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++)
        r = load_doc(c, ids[i], DB_WANT_TAGS, &out[i]);
    reader_release(db, c);
    free(ids);
    if (r < 0) {
        db_docs_free(out, n);
        return r;
    }
    *docs = out;
    *ndocs = n;
    return 0;
}

int db_totals(struct db *db, struct db_totals *t)
{
    struct db_conn *c = reader_acquire(db);
    sqlite3_stmt *s;
    int r = -EIO;

    memset(t, 0, sizeof(*t));
    if (!c)
        return -EIO;
    if ((s = stmt(c, S_TOTALS)) && sqlite3_step(s) == SQLITE_ROW) {
        t->documents = (uint64_t)sqlite3_column_int64(s, 0);
        t->logical_bytes = (uint64_t)sqlite3_column_int64(s, 1);
        sqlite3_reset(s);
        if ((s = stmt(c, S_CHUNK_TOTALS)) && sqlite3_step(s) == SQLITE_ROW) {
            t->chunks = (uint64_t)sqlite3_column_int64(s, 0);
            t->stored_bytes = (uint64_t)sqlite3_column_int64(s, 1);
            t->unique_bytes = (uint64_t)sqlite3_column_int64(s, 2);
            r = 0;
        }
    }
    if (s)
        sqlite3_reset(s);
    reader_release(db, c);
    return r;
}

/* ---- the search index ---- */

/*
 * Joins column `col` (and, when `col2` >= 0, a space and column `col2`) of
 * every row of a per-document statement, one row per line.
 */
static int query_joined(struct db_conn *c, enum stmt_id id, int64_t doc, int col, int col2,
                        char **out)
{
    sqlite3_stmt *s = stmt(c, id);
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    int rc;

    if (!s)
        return -EIO;
    f = open_memstream(&buf, &len);
    if (!f)
        return -ENOMEM;
    sqlite3_bind_int64(s, 1, doc);
    for (bool first = true; (rc = sqlite3_step(s)) == SQLITE_ROW; first = false) {
        const unsigned char *a = sqlite3_column_text(s, col);
        const unsigned char *b = col2 >= 0 ? sqlite3_column_text(s, col2) : NULL;
        fprintf(f, "%s%s%s%s", first ? "" : "\n", a ? (const char *)a : "", b ? " " : "",
                b ? (const char *)b : "");
    }
    sqlite3_reset(s);
    if (fclose(f) != 0) {
        free(buf);
        return -ENOMEM;
    }
    if (rc != SQLITE_DONE) {
        free(buf);
        return -EIO;
    }
    *out = buf;
    return 0;
}

struct fts_fields {
    char *name, *tags, *meta;
};

static void fts_fields_clear(struct fts_fields *f)
{
    free(f->name);
    free(f->tags);
    free(f->meta);
    memset(f, 0, sizeof(*f));
}

/* The indexed name, tags and metadata of a document, from the tables. */
static int fts_fields_load(struct db_conn *c, int64_t doc, struct fts_fields *f)
{
    int r;

    memset(f, 0, sizeof(*f));
    if ((r = query_joined(c, S_NAMES_OF_DOC, doc, 0, -1, &f->name)) < 0 ||
        (r = query_joined(c, S_TAGS_OF_DOC, doc, 0, -1, &f->tags)) < 0 ||
        (r = query_joined(c, S_META_OF_DOC, doc, 0, 1, &f->meta)) < 0)
        fts_fields_clear(f);
    return r;
}

static bool text_eq(sqlite3_stmt *s, int col, const char *v)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    return strcmp(t ? (const char *)t : "", v) == 0;
}

/*
 * Brings a document's index row up to date: a new document gets its body
 * indexed; an existing one is re-indexed only when its names, tags or
 * metadata changed (FTS5 re-tokenizes the whole row on update).
 */
static int fts_sync(struct db_txn *txn, int64_t doc, bool created, const char *body,
                    size_t body_len)
{
    struct db_conn *c = txn->conn;
    struct fts_fields f;
    sqlite3_stmt *s;
    int r = fts_fields_load(c, doc, &f);

    if (r < 0)
        return r;
    if (created) {
        if (!(s = stmt(c, S_FTS_INSERT))) {
            r = -EIO;
            goto out;
        }
        sqlite3_bind_int64(s, 1, doc);
        sqlite3_bind_text(s, 2, f.name, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, body ? body : "", body ? (int)body_len : 0, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, f.tags, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 5, f.meta, -1, SQLITE_STATIC);
        r = step_done(c, s);
    } else {
        if (!(s = stmt(c, S_FTS_GET))) {
            r = -EIO;
            goto out;
        }
        sqlite3_bind_int64(s, 1, doc);
        bool same = sqlite3_step(s) != SQLITE_ROW ||
                    (text_eq(s, 0, f.name) && text_eq(s, 1, f.tags) && text_eq(s, 2, f.meta));
        sqlite3_reset(s);
        if (same)
            goto out;
        if (!(s = stmt(c, S_FTS_UPDATE))) {
            r = -EIO;
            goto out;
        }
        sqlite3_bind_int64(s, 1, doc);
        sqlite3_bind_text(s, 2, f.name, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, f.tags, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, f.meta, -1, SQLITE_STATIC);
        r = step_done(c, s);
    }
    if (r == 0)
        txn->index_changed = true;
out:
    fts_fields_clear(&f);
    return r;
}

/* ---- writes ---- */

int db_txn_add(struct db_txn *txn, struct db_add *add)
{
    struct db_conn *c = txn->conn;
    char hex[PROTO_HASH_HEX + 1];
    int64_t id, now = add->created_at ? add->created_at : (int64_t)time(NULL);
    sqlite3_stmt *s;
    int r;

    proto_hex_encode(add->hash, PROTO_HASH_LEN, hex);
    /* Chunk rows first: they record objects the backend has made durable. */
    for (size_t i = 0; i < add->nchunks; i++) {
        if (!(s = stmt(c, S_CHUNK_INSERT)))
            return -EIO;
        sqlite3_bind_blob(s, 1, add->chunks[i].hash, PROTO_HASH_LEN, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, add->chunks[i].size);
        sqlite3_bind_int64(s, 3, add->chunks[i].stored_size);
        if ((r = step_done(c, s)) < 0)
            return r;
    }

    if (!(s = stmt(c, S_DOC_BY_HASH)))
        return -EIO;
    sqlite3_bind_text(s, 1, hex, PROTO_HASH_HEX, SQLITE_STATIC);
    r = query_id(c, s, &id);
    if (r < 0)
        return r;
    add->created = (r == DB_E_NOT_FOUND);
    add->stored_size = 0;
    for (size_t i = 0; i < add->nchunks; i++)
        add->stored_size += add->chunks[i].stored_size;
    if (add->created) {
        size_t blob_len = add->nchunks * DB_CHUNK_ENTRY;
        _cleanup_free_ uint8_t *blob = malloc(blob_len ? blob_len : 1);
        if (!blob)
            return -ENOMEM;
        db_chunks_encode(add->chunks, add->nchunks, blob);
        if (!(s = stmt(c, S_DOC_INSERT)))
            return -EIO;
        sqlite3_bind_text(s, 1, hex, PROTO_HASH_HEX, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (int64_t)add->size);
        sqlite3_bind_int64(s, 3, (int64_t)add->stored_size);
        sqlite3_bind_int64(s, 4, (int64_t)add->nchunks);
        sqlite3_bind_text(s, 5, add->mime, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 6, now);
        sqlite3_bind_blob(s, 7, blob, (int)blob_len, SQLITE_STATIC);
        if ((r = step_done(c, s)) < 0)
            return r;
        id = sqlite3_last_insert_rowid(c->sql);
        for (size_t i = 0; i < add->nchunks; i++) {
            if (!(s = stmt(c, S_CHUNK_REF)))
                return -EIO;
            sqlite3_bind_blob(s, 1, add->chunks[i].hash, PROTO_HASH_LEN, SQLITE_STATIC);
            if ((r = step_done(c, s)) < 0)
                return r;
        }
    }

    if (add->name && add->name[0]) {
        int64_t current = -1;
        if (!(s = stmt(c, S_DOC_BY_NAME)))
            return -EIO;
        sqlite3_bind_text(s, 1, add->name, -1, SQLITE_STATIC);
        if ((r = query_id(c, s, &current)) < 0)
            return r;
        /* A new version only when the name does not already point here. */
        if (current != id) {
            if (!(s = stmt(c, S_NAME_INSERT)))
                return -EIO;
            sqlite3_bind_text(s, 1, add->name, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 2, id);
            sqlite3_bind_int64(s, 3, now);
            if ((r = step_done(c, s)) < 0)
                return r;
        }
    }
    for (size_t i = 0; i < add->ntags; i++) {
        if (!(s = stmt(c, S_TAG_INSERT)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, add->tags[i], -1, SQLITE_STATIC);
        if ((r = step_done(c, s)) < 0)
            return r;
    }
    for (size_t i = 0; i < add->nmeta; i++) {
        if (!(s = stmt(c, S_META_UPSERT)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, add->meta_keys[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, add->meta_values[i], -1, SQLITE_STATIC);
        if ((r = step_done(c, s)) < 0)
            return r;
    }
    if (add->created || (add->name && add->name[0]) || add->ntags || add->nmeta) {
        r = fts_sync(txn, id, add->created, add->text, add->text_len);
        if (r < 0)
            return r;
    }
    if (!add->created) {
        /* Report the existing document's stored size. */
        struct db_doc doc = {0};
        if (load_doc(c, id, 0, &doc) == 0)
            add->stored_size = doc.stored_size;
        db_doc_clear(&doc);
    }
    return 0;
}

int db_txn_delete(struct db_txn *txn, const char *ref, size_t ref_len,
                  char hash_hex[PROTO_HASH_HEX + 1])
{
    struct db_conn *c = txn->conn;
    struct db_doc doc = {0};
    sqlite3_stmt *s;
    int64_t id;
    bool by_name;
    int r;

    r = resolve_id(c, ref, ref_len, &id, &by_name);
    if (r == 0)
        r = load_doc(c, id, DB_WANT_CHUNKS, &doc);
    if (r != 0)
        goto out;
    memcpy(hash_hex, doc.hash, sizeof(doc.hash));
    for (uint32_t i = 0; i < doc.nchunks; i++) {
        if (!(s = stmt(c, S_CHUNK_UNREF))) {
            r = -EIO;
            goto out;
        }
        sqlite3_bind_blob(s, 1, doc.chunks[i].hash, PROTO_HASH_LEN, SQLITE_STATIC);
        if ((r = step_done(c, s)) < 0)
            goto out;
    }
    if (!(s = stmt(c, S_FTS_DELETE))) {
        r = -EIO;
        goto out;
    }
    sqlite3_bind_int64(s, 1, id);
    if ((r = step_done(c, s)) < 0)
        goto out;
    txn->index_changed = true;
    if (!(s = stmt(c, S_DOC_DELETE))) {
        r = -EIO;
        goto out;
    }
    sqlite3_bind_int64(s, 1, id);
    r = step_done(c, s);
out:
    db_doc_clear(&doc);
    return r;
}

/* ---- search ---- */

void db_hits_free(struct db_hit *hits, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(hits[i].name);
        free(hits[i].snippet);
    }
    free(hits);
}

static void vocab_clear(struct db *db)
{
    for (size_t i = 0; i < db->nvocab; i++)
        free(db->vocab[i].text);
    free(db->vocab);
    db->vocab = NULL;
    db->nvocab = 0;
}

/* Refreshes the in-memory vocabulary when the index changed since it was read. */
static int vocab_refresh(struct db *db, struct db_conn *c)
{
    uint64_t gen = atomic_load(&db->index_gen);
    sqlite3_stmt *s;
    size_t cap = 0;
    int rc;

    if (db->vocab && db->vocab_gen == gen)
        return 0;
    vocab_clear(db);
    if (!(s = stmt(c, S_VOCAB)))
        return -EIO;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (db->nvocab == cap) {
            cap = cap ? cap * 2 : 4096;
            struct db_term *grown = realloc(db->vocab, cap * sizeof(*grown));
            if (!grown) {
                sqlite3_reset(s);
                vocab_clear(db);
                return -ENOMEM;
            }
            db->vocab = grown;
        }
        struct db_term *t = &db->vocab[db->nvocab];
        t->len = (size_t)sqlite3_column_bytes(s, 0);
        t->text = strndup((const char *)sqlite3_column_text(s, 0), t->len);
        t->docs = sqlite3_column_int64(s, 1);
        if (!t->text) {
            sqlite3_reset(s);
            vocab_clear(db);
            return -ENOMEM;
        }
        db->nvocab++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        vocab_clear(db);
        return -EIO;
    }
    db->vocab_gen = gen;
    return 0;
}

#define FUZZY_MAX_ALTS 16

struct fuzzy_candidate {
    const struct db_term *term;
    unsigned distance;
};

/* Better candidates first: closer, then more common. */
static int candidate_cmp(const void *a, const void *b)
{
    const struct fuzzy_candidate *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    return x->term->docs > y->term->docs ? -1 : x->term->docs < y->term->docs;
}

/*
 * Widens one word with indexed words that are a small edit away (one edit for
 * words of 4 to 7 letters, two from 8) or that contain it (from 3 letters),
 * so a typo or a fragment still finds its documents.
 */
static int fuzzy_expand(struct db *db, struct search_term *t)
{
    struct fuzzy_candidate best[FUZZY_MAX_ALTS];
    size_t nbest = 0;
    char word[256];
    size_t len = search_fold(t->text, strlen(t->text), word, sizeof(word));
    size_t letters = search_letters(word, len);
    unsigned maxd = letters >= 8 ? 2 : letters >= 4 ? 1 : 0;

    if (!db->vocab || letters > 64)
        return 0;
    for (size_t i = 0; i < db->nvocab; i++) {
        const struct db_term *v = &db->vocab[i];
        unsigned d;
        if (v->len == len && memcmp(v->text, word, len) == 0)
            continue;
        if (letters >= 3 && v->len > len && memmem(v->text, v->len, word, len))
            d = maxd + 1; /* a containing word ranks after near spellings */
        else if (maxd > 0 && (d = search_distance(word, len, v->text, v->len, maxd)) <= maxd)
            ;
        else
            continue;
        struct fuzzy_candidate cand = {v, d};
        if (nbest < FUZZY_MAX_ALTS) {
            best[nbest++] = cand;
        } else if (candidate_cmp(&cand, &best[FUZZY_MAX_ALTS - 1]) < 0) {
            best[FUZZY_MAX_ALTS - 1] = cand;
        } else {
            continue;
        }
        qsort(best, nbest, sizeof(best[0]), candidate_cmp);
    }
    if (nbest == 0)
        return 0;
    t->alts = calloc(nbest, sizeof(char *));
    if (!t->alts)
        return -ENOMEM;
    for (size_t i = 0; i < nbest; i++) {
        if (!(t->alts[i] = strndup(best[i].term->text, best[i].term->len)))
            return -ENOMEM;
        t->nalts++;
    }
    return 0;
}

static int fuzzy_expand_query(struct db *db, struct db_conn *c, struct search_query *q)
{
    int r;

    pthread_mutex_lock(&db->vocab_lock);
    r = vocab_refresh(db, c);
    for (size_t g = 0; r == 0 && g < q->ngroups; g++) {
        for (size_t i = 0; r == 0 && i < q->groups[g].nterms; i++) {
            struct search_term *t = &q->groups[g].terms[i];
            if (t->kind == SEARCH_WORD || t->kind == SEARCH_NAME)
                r = fuzzy_expand(db, t);
        }
    }
    pthread_mutex_unlock(&db->vocab_lock);
    return r;
}

/* Builds the SQL of a search: the ranked FTS5 query, or a filter-only listing. */
static char *search_sql(const struct db_search_params *p, const struct search_query *q, bool match)
{
    char *sql = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&sql, &len);

    if (!f)
        return NULL;
    /* Snippets are made afterwards (db_search): FTS5's snippet() is quadratic in a document's
     * matches. */
    if (match)
        fputs("SELECT d.hash, (SELECT n.name FROM names n WHERE n.doc = d.id ORDER BY n.seq DESC"
              " LIMIT 1), -rank, d.size, d.id"
              " FROM search JOIN documents d ON d.id = search.rowid"
              " WHERE search MATCH ?1 AND rank MATCH 'bm25(10.0, 1.0, 4.0, 2.0)'",
              f);
    else
        fputs("SELECT d.hash, (SELECT n.name FROM names n WHERE n.doc = d.id ORDER BY n.seq DESC"
              " LIMIT 1), 0.0, d.size, d.id FROM documents d WHERE ?1 IS NULL",
              f);
    if (p->mime)
        fputs(" AND d.mime = ?2", f);
    if (p->has_after)
        fputs(" AND d.created >= ?3", f);
    if (p->has_before)
        fputs(" AND d.created < ?4", f);
    if (p->name_glob)
        fputs(" AND EXISTS (SELECT 1 FROM names n WHERE n.doc = d.id AND n.name GLOB ?5)", f);
    for (size_t i = 0; i < p->ntags + q->ntags; i++)
        fprintf(f, " AND EXISTS (SELECT 1 FROM tags t WHERE t.doc = d.id AND t.tag = ?%zu)", 8 + i);
    fputs(match ? " ORDER BY rank LIMIT ?6 OFFSET ?7"
                : " ORDER BY d.created DESC, d.hash LIMIT ?6 OFFSET ?7",
          f);
    if (fclose(f) != 0) {
        free(sql);
        return NULL;
    }
    return sql;
}

/* The prepared statement for a search's SQL, kept per connection by its text. */
static sqlite3_stmt *search_stmt(struct db_conn *c, const char *sql)
{
    sqlite3_stmt *st;

    for (int i = 0; i < DB_SEARCH_SHAPES; i++) {
        if (c->search_stmts[i] && strcmp(sqlite3_sql(c->search_stmts[i]), sql) == 0)
            return c->search_stmts[i];
    }
    if (sqlite3_prepare_v3(c->sql, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
        log_error("database: search: %s", sqlite3_errmsg(c->sql));
        return NULL;
    }
    unsigned slot = c->search_next++ % DB_SEARCH_SHAPES;
    sqlite3_finalize(c->search_stmts[slot]);
    c->search_stmts[slot] = st;
    return st;
}

/*
 * A hit's snippet: from its content, or from its names when the content has
 * no match (binary documents have none).
 */
static int make_snippet(struct db_conn *c, const struct search_query *q, bool match,
                        struct db_hit *h)
{
    sqlite3_stmt *s = stmt(c, S_FTS_TEXT);
    int r = 0;

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, h->rowid);
    sqlite3_bind_int64(s, 2, SEARCH_SNIPPET_READ);
    if (sqlite3_step(s) == SQLITE_ROW) {
        const char *body = sqlite3_column_blob(s, 0);
        size_t body_len = (size_t)sqlite3_column_bytes(s, 0);
        const char *names = (const char *)sqlite3_column_text(s, 1);
        h->snippet = search_snippet(body ? body : "", body ? body_len : 0, q, 16);
        /* No mark in the content: the names may be what matched. */
        if (h->snippet && match && !strstr(h->snippet, "**") && names) {
            char *alt = search_snippet(names, strlen(names), q, 16);
            if (alt && strstr(alt, "**")) {
                free(h->snippet);
                h->snippet = alt;
            } else {
                free(alt);
            }
        }
    } else {
        h->snippet = strdup("");
    }
    sqlite3_reset(s);
    if (!h->snippet)
        r = -ENOMEM;
    return r;
}

int db_search(struct db *db, const struct db_search_params *p, struct db_hit **hits, size_t *nhits,
              const char **msg)
{
    struct search_query q;
    struct db_conn *c = NULL;
    sqlite3_stmt *s = NULL;
    struct db_hit *out = NULL;
    char *expr = NULL, *sql = NULL;
    size_t n = 0, cap = 0;
    int rc, r;

    *hits = NULL;
    *nhits = 0;
    *msg = NULL;
    r = search_parse(p->query, p->query_len, &q, msg);
    if (r != 0)
        return r == SEARCH_E_INVALID ? DB_E_INVALID_QUERY : r;
    if (!(c = reader_acquire(db))) {
        r = -EIO;
        goto out;
    }
    bool match = search_has_match(&q);
    if (match && p->fuzzy && (r = fuzzy_expand_query(db, c, &q)) < 0)
        goto out;
    if (match && (r = search_fts_expr(&q, &expr)) < 0)
        goto out;
    if (!(sql = search_sql(p, &q, match))) {
        r = -ENOMEM;
        goto out;
    }
    if (!(s = search_stmt(c, sql))) {
        r = -EIO;
        goto out;
    }
    sqlite3_bind_text(s, 1, expr, -1, SQLITE_STATIC);
    if (p->mime)
        sqlite3_bind_text(s, 2, p->mime, -1, SQLITE_STATIC);
    if (p->has_after)
        sqlite3_bind_int64(s, 3, p->after);
    if (p->has_before)
        sqlite3_bind_int64(s, 4, p->before);
    if (p->name_glob)
        sqlite3_bind_text(s, 5, p->name_glob, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, (int64_t)p->limit);
    sqlite3_bind_int64(s, 7, (int64_t)(p->offset > INT64_MAX ? INT64_MAX : p->offset));
    for (size_t i = 0; i < p->ntags; i++)
        sqlite3_bind_text(s, (int)(8 + i), p->tags[i], -1, SQLITE_STATIC);
    for (size_t i = 0; i < q.ntags; i++)
        sqlite3_bind_text(s, (int)(8 + p->ntags + i), q.tags[i], -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct db_hit *grown = realloc(out, cap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                goto out;
            }
            out = grown;
        }
        struct db_hit *h = &out[n++];
        memset(h, 0, sizeof(*h));
        snprintf(h->hash, sizeof(h->hash), "%s", (const char *)sqlite3_column_text(s, 0));
        h->name = column_strdup(s, 1);
        h->score = sqlite3_column_double(s, 2);
        h->size = (uint64_t)sqlite3_column_int64(s, 3);
        h->rowid = sqlite3_column_int64(s, 4);
        if (!h->name) {
            r = -ENOMEM;
            goto out;
        }
    }
    if (rc != SQLITE_DONE) {
        /* Every word reaches FTS5 quoted, so this is not the user's syntax. */
        log_error("database: search: %s", sqlite3_errmsg(c->sql));
        r = -EIO;
        goto out;
    }
    for (size_t i = 0; i < n && r == 0; i++)
        r = make_snippet(c, &q, match, &out[i]);
    if (r < 0)
        goto out;
    *hits = out;
    *nhits = n;
    out = NULL;
    n = 0;
out:
    if (s) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    if (c)
        reader_release(db, c);
    db_hits_free(out, n);
    free(sql);
    free(expr);
    search_query_clear(&q);
    return r;
}

/* ---- maintenance ---- */

static int query_chunks(struct db *db, enum stmt_id id, struct db_chunk **out, size_t *n)
{
    struct db_conn *c = reader_acquire(db);
    struct db_chunk *chunks = NULL;
    size_t cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = stmt(c, id))) {
        reader_release(db, c);
        return -EIO;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_bytes(s, 0) != PROTO_HASH_LEN)
            continue; /* not a chunk id; never written by cairnd */
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            struct db_chunk *grown = realloc(chunks, cap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            chunks = grown;
        }
        memcpy(chunks[*n].hash, sqlite3_column_blob(s, 0), PROTO_HASH_LEN);
        chunks[*n].size = (uint32_t)sqlite3_column_int64(s, 1);
        chunks[*n].stored_size = (uint32_t)sqlite3_column_int64(s, 2);
        (*n)++;
    }
    sqlite3_reset(s);
    reader_release(db, c);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r < 0) {
        free(chunks);
        *n = 0;
        return r;
    }
    *out = chunks;
    return 0;
}

int db_unreferenced_chunks(struct db *db, struct db_chunk **chunks, size_t *n)
{
    return query_chunks(db, S_CHUNKS_UNREFERENCED, chunks, n);
}

int db_chunk_refs(struct db *db, const uint8_t hash[PROTO_HASH_LEN], int64_t *refs)
{
    struct db_conn *c = reader_acquire(db);
    sqlite3_stmt *s;
    int r;

    if (!c)
        return -EIO;
    if (!(s = stmt(c, S_CHUNK_REFS))) {
        reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    r = query_id(c, s, refs);
    reader_release(db, c);
    return r;
}

int db_all_chunks(struct db *db, struct db_chunk **chunks, size_t *n)
{
    return query_chunks(db, S_CHUNKS_ALL, chunks, n);
}

int db_txn_orphan_chunk(struct db_txn *txn, const struct db_chunk *chunk)
{
    sqlite3_stmt *s = stmt(txn->conn, S_CHUNK_INSERT);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, chunk->hash, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, chunk->size);
    sqlite3_bind_int64(s, 3, chunk->stored_size);
    return step_done(txn->conn, s);
}

int db_txn_drop_chunk(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN], bool *deleted)
{
    sqlite3_stmt *s = stmt(txn->conn, S_CHUNK_DROP);
    int r;

    *deleted = false;
    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    r = step_done(txn->conn, s);
    if (r == 0)
        *deleted = sqlite3_changes(txn->conn->sql) > 0;
    return r;
}

static int hash_cmp(const void *a, const void *b)
{
    return memcmp(a, b, PROTO_HASH_LEN);
}

int db_docs_with_chunks(struct db *db, const uint8_t (*sorted)[PROTO_HASH_LEN], size_t n,
                        struct db_doc **docs, size_t *ndocs)
{
    struct db_conn *c = reader_acquire(db);
    struct db_doc *out = NULL;
    size_t cap = 0, count = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *docs = NULL;
    *ndocs = 0;
    if (!c)
        return -EIO;
    if (!(s = stmt(c, S_DOC_MANIFESTS))) {
        reader_release(db, c);
        return -EIO;
    }
    /* A scan of every manifest: fine for a scrub, which reads every chunk anyway. */
    rc = SQLITE_DONE;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const uint8_t *blob = sqlite3_column_blob(s, 2);
        size_t len = (size_t)sqlite3_column_bytes(s, 2);
        struct db_chunk *hits = NULL;
        uint32_t nhits = 0;
        for (size_t off = 0; off + DB_CHUNK_ENTRY <= len; off += DB_CHUNK_ENTRY) {
            if (!bsearch(blob + off, sorted, n, PROTO_HASH_LEN, hash_cmp))
                continue;
            struct db_chunk *grown = realloc(hits, (nhits + 1) * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            hits = grown;
            memcpy(hits[nhits].hash, blob + off, PROTO_HASH_LEN);
            hits[nhits].size = proto_be32_read(blob + off + 32);
            hits[nhits].stored_size = proto_be32_read(blob + off + 36);
            nhits++;
        }
        if (r == 0 && nhits > 0) {
            if (count == cap) {
                cap = cap ? cap * 2 : 8;
                struct db_doc *grown = realloc(out, cap * sizeof(*grown));
                if (!grown) {
                    free(hits);
                    r = -ENOMEM;
                    break;
                }
                out = grown;
            }
            memset(&out[count], 0, sizeof(out[count]));
            out[count].rowid = sqlite3_column_int64(s, 0);
            out[count].chunks = hits;
            out[count].nchunks = nhits;
            count++;
        } else {
            free(hits);
        }
    }
    sqlite3_reset(s);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    /* Fill in hash and name of each document found. */
    for (size_t i = 0; r == 0 && i < count; i++) {
        struct db_chunk *hits = out[i].chunks;
        uint32_t nhits = out[i].nchunks;
        out[i].chunks = NULL;
        r = load_doc(c, out[i].rowid, 0, &out[i]);
        out[i].chunks = hits;
        out[i].nchunks = nhits;
    }
    reader_release(db, c);
    if (r < 0) {
        db_docs_free(out, count);
        return r;
    }
    *docs = out;
    *ndocs = count;
    return 0;
}
