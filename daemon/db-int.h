#pragma once

/*
 * What the database's files share: db.c (schema, connections, the reader
 * pool, the group-committing writer), db-docs.c (documents, names, tags,
 * metadata and chunk rows), db-search.c (the full-text index and searches)
 * and db-maint.c (the chunk queries of gc, verify and rebuild). Not for use
 * outside these files.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>
#include <uv.h>

#include "daemon/db.h"

/*
 * The prepared statements of every file, numbered together so that each
 * connection keeps all of them in one cache. A file defines the SQL of its
 * own statements in its table below; the other files may still run them.
 */
enum db_stmt_id {
    /* db-docs.c */
    DB_S_DOC_BY_HASH,
    DB_S_DOC_BY_PREFIX,
    DB_S_DOC_BY_NAME,
    DB_S_DOC_BY_ID,
    DB_S_NEWEST_NAME,
    DB_S_NAMES_OF_DOC, /* also db-search.c, to index a document's names */
    DB_S_TAGS_OF_DOC,  /* also db-search.c */
    DB_S_META_OF_DOC,  /* also db-search.c */
    DB_S_CHUNK_LOOKUP,
    DB_S_CHUNK_INSERT, /* also db-maint.c, to record orphan chunks */
    DB_S_CHUNK_REF,
    DB_S_CHUNK_UNREF,
    DB_S_DOC_INSERT,
    DB_S_DOC_DELETE,
    DB_S_NAME_INSERT,
    DB_S_TAG_INSERT,
    DB_S_META_UPSERT,
    DB_S_LIST_ALL,
    DB_S_LIST_TAG,
    DB_S_TOTALS,
    DB_S_CHUNK_TOTALS,
    /* db-search.c */
    DB_S_FTS_INSERT,
    DB_S_FTS_UPDATE,
    DB_S_FTS_GET,
    DB_S_FTS_DELETE,
    DB_S_VOCAB,
    DB_S_FTS_TEXT,
    /* db-maint.c */
    DB_S_CHUNK_REFS,
    DB_S_CHUNKS_UNREFERENCED,
    DB_S_CHUNK_DROP,
    DB_S_CHUNKS_ALL,
    DB_S_DOC_MANIFESTS,
    DB_S_COUNT_,
};

/* Each table holds SQL only at its own file's ids; the rest are NULL. */
extern const char *const db_docs_sql[DB_S_COUNT_];
extern const char *const db_search_sql[DB_S_COUNT_];
extern const char *const db_maint_sql[DB_S_COUNT_];

/* Searches build their SQL from the filters given; the few shapes in use stay prepared. */
#define DB_SEARCH_SHAPES 8

struct db_conn {
    sqlite3 *sql;
    sqlite3_stmt *stmts[DB_S_COUNT_];
    sqlite3_stmt *search_stmts[DB_SEARCH_SHAPES];
    unsigned search_next; /* round-robin eviction */
    struct db_conn *next_free;
};

struct db_txn {
    struct db_conn *conn;
    bool index_changed;
};

/* One word of the index vocabulary (db-search.c). */
struct db_term;

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

/* ---- db.c ---- */

/* The connection's prepared statement `id`, reset and unbound; NULL (logged) on failure. */
sqlite3_stmt *db_stmt(struct db_conn *c, enum db_stmt_id id);
/* A reader connection from the pool; NULL when none can be opened. */
struct db_conn *db_reader_acquire(struct db *db);
void db_reader_release(struct db *db, struct db_conn *c);

/* Runs a statement for its effect (one step): 0, or -EIO after logging the error. */
int db_step_done(struct db_conn *c, sqlite3_stmt *s);
/* Runs a statement that yields at most one integer; DB_E_NOT_FOUND if no row. */
int db_query_id(struct db_conn *c, sqlite3_stmt *s, int64_t *out);
/* A copy of a text column, "" for NULL; NULL only when out of memory. */
char *db_column_strdup(sqlite3_stmt *s, int col);

/* ---- db-docs.c ---- */

/* Loads a document row and what `want` asks for (DB_WANT_*). */
int db_load_doc(struct db_conn *c, int64_t id, unsigned want, struct db_doc *doc);

/* ---- db-search.c ---- */

/*
 * Brings a document's index row up to date after its tables changed
 * (`created`: the document is new and `body` is its text).
 */
int db_fts_sync(struct db_txn *txn, int64_t doc, bool created, const char *body, size_t body_len);
/* Removes a document from the index. */
int db_fts_delete(struct db_txn *txn, int64_t doc);
/* Drops fuzzy search's copy of the vocabulary. */
void db_vocab_clear(struct db *db);
