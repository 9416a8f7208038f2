#pragma once

/*
 * What the database's files share: db.c (schema, connections, the reader
 * pool, the group-committing writer), db-docs.c (documents, names, tags,
 * metadata, and the search index's queue of work), db-names.c (names as
 * paths), db-store.c (packs and the rows that locate records in them) and
 * db-gc.c (gc's queries). Not for use outside daemon/meta.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>
#include <uv.h>

#include "daemon/meta/db.h"

/*
 * The prepared statements of every file, numbered together so that each
 * connection keeps all of them in one cache. A file defines the SQL of its
 * own statements in its table below and passes it to db_stmt; another file
 * may run them with that table.
 */
enum db_stmt_id {
    /* db-docs.c */
    DB_S_DOC_BY_HASH,
    DB_S_DOC_BY_PREFIX,
    DB_S_DOC_BY_NAME,
    DB_S_DOC_BY_ID,
    DB_S_NEWEST_NAME,
    DB_S_NAMES_OF_DOC,
    DB_S_NAMES_SHOWN,
    DB_S_TAGS_OF_DOC,
    DB_S_META_OF_DOC,
    DB_S_META_GET,
    DB_S_DOC_INSERT,
    DB_S_DOC_DELETE,
    DB_S_DOC_INDEX_BUMP,
    DB_S_NAME_INSERT,
    DB_S_TAG_INSERT,
    DB_S_META_UPSERT,
    DB_S_LIST_ALL,
    DB_S_LIST_TAG,
    DB_S_TOTALS,
    DB_S_CHUNK_TOTALS,
    DB_S_PACK_TOTALS,
    DB_S_REMOVAL_INSERT,
    DB_S_REMOVALS,
    DB_S_REMOVAL_DELETE,
    /* db-edit.c */
    DB_S_TAG_DELETE,
    DB_S_META_DELETE,
    /* db-store.c */
    DB_S_CHUNK_FIND,
    DB_S_CHUNK_LOOKUP,
    DB_S_CHUNK_PUT,
    DB_S_CHUNK_BAD_ANY,
    DB_S_CHUNK_BAD,
    DB_S_CHUNK_BAD_PRUNE,
    DB_S_SEGMENT_FIND,
    DB_S_SEGMENT_PUT,
    DB_S_JOURNAL_PUT,
    DB_S_JOURNAL_COPY_PUT,
    DB_S_JOURNAL_COPIES_DROP,
    DB_S_JOURNAL_PENDING,
    DB_S_JOURNAL_APPLIED,
    DB_S_JOURNAL_REFUSED,
    DB_S_JOURNAL_NEWEST,
    DB_S_JOURNAL_LATER,
    DB_S_JOURNAL_OF_DOC,
    DB_S_JOURNAL_VOIDED,
    DB_S_CHUNK_DAMAGED,
    DB_S_CHUNK_PUT_LATEST,
    DB_S_JOURNAL_ROW,
    DB_S_PACK_SET,
    DB_S_PACK_DROP,
    DB_S_PACKS,
    DB_S_PACK_SIZE,
    DB_S_PACK_HIGH_SET,
    DB_S_PACK_HIGH,
    /* db-gc.c */
    DB_S_STATE_GET,
    DB_S_STATE_SET,
    DB_S_MANIFESTS,
    DB_S_REMOVAL_MANIFESTS,
    DB_S_CHUNK_PAGE,
    DB_S_SEGMENT_PAGE,
    DB_S_CHUNK_CONDEMN,
    DB_S_SEGMENT_CONDEMN,
    DB_S_PACK_CHUNKS_LIVE,
    DB_S_PACK_SEGMENTS_LIVE,
    DB_S_PACK_JOURNAL_LIVE,
    DB_S_PACK_CHUNKS_ROWS,
    DB_S_PACK_SEGMENTS_ROWS,
    DB_S_PACK_JOURNAL_ROWS,
    DB_S_PACK_LIST,
    DB_S_ROWS_CHUNKS,
    DB_S_ROWS_SEGMENTS,
    DB_S_ROWS_JOURNAL,
    DB_S_CHUNK_MOVE,
    DB_S_SEGMENT_MOVE,
    DB_S_JOURNAL_MOVE,
    DB_S_CHUNK_DROP,
    DB_S_SEGMENT_DROP,
    DB_S_JOURNAL_DROP,
    DB_S_PACK_ROWS_LEFT,
    DB_S_CHUNKS_CONDEMNED,
    /* db-names.c */
    DB_S_NAME_DOCS,
    DB_S_NAME_UNLINK,
    DB_S_DOC_NAMED,
    DB_S_LIST_NAMES,
    DB_S_LIST_UNNAMED,
    DB_S_DU_NAMES,
    DB_S_DU_DOCS,
    DB_S_NAME_VERSION,
    DB_S_NAME_VERSIONS,
    DB_S_NAME_VERSION_COUNT,
    DB_S_COUNT_,
};

/* Each table holds SQL only at its own file's ids; the rest are NULL. */
extern const char *const db_docs_sql[DB_S_COUNT_];
extern const char *const db_store_sql[DB_S_COUNT_];
extern const char *const db_gc_sql[DB_S_COUNT_];
extern const char *const db_names_sql[DB_S_COUNT_];
extern const char *const db_edit_sql[DB_S_COUNT_];

/*
 * Statements other parts prepare by their text (db_conn_prepare): searches
 * build theirs from the filters given, and the few shapes in use stay
 * prepared.
 */
#define DB_CONN_PREPARED 12

struct db_conn {
    sqlite3 *sql;
    sqlite3_stmt *stmts[DB_S_COUNT_];
    sqlite3_stmt *prepared[DB_CONN_PREPARED];
    unsigned prepared_next; /* round-robin eviction */
    char attached[16];      /* the schema db_conn_attach attached, "" for none */
    bool read_only;         /* a read-only database's (db_open_read_only): so is what it attaches */
    struct db_conn *next_free;
};

struct db_txn {
    struct db *db;
    struct db_conn *c;
    unsigned depth; /* nested savepoints open */
};

struct db {
    uv_loop_t *loop;
    char *path;
    char *ro_uri; /* db_open_read_only: the URI every connection opens; NULL otherwise */
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
    /* Writer ids by local index (db-writers.c): only ever grows; writers[0] is 0. */
    pthread_mutex_t writers_lock;
    uint64_t *writers;
    size_t nwriters, writers_cap;
    /* The checkpoint thread (db-ckpt.c): the fields after the condition variables under ckpt_lock.
     */
    pthread_t ckpt_tid;
    pthread_mutex_t ckpt_lock;
    pthread_cond_t ckpt_cv, ckpt_done_cv; /* a checkpoint is wanted; one ended */
    int ckpt_at;              /* WAL frames from which the next checkpoint is asked for */
    unsigned long ckpt_count; /* checkpoints the thread ran */
    int ckpt_frames;          /* in the WAL after the writer's last commit */
    bool ckpt_wanted, ckpt_stop, ckpt_inited, ckpt_running;
};

/* ---- db.c ---- */

/* A connection like the writer's (for the checkpoint thread); 0 or negative errno. */
int db_conn_open_writable(const struct db *db, struct db_conn **out);
/* Closes a connection of db_conn_open_writable; NULL is ignored. */
void db_conn_close(struct db_conn *c);

/* ---- db-ckpt.c ---- */

/*
 * Starts the thread that checkpoints the WAL in the writer's stead (a
 * writable database, once the writer is open); 0 or negative errno.
 */
int db_ckpt_start(struct db *db);
/* Stops and joins it, before the writer closes; harmless when it never started. */
void db_ckpt_stop(struct db *db);
/*
 * Waits until no checkpoint is asked for (tests): the number the thread ran
 * so far, -ETIMEDOUT, or -ENOTCONN without the thread.
 */
int db_ckpt_idle(struct db *db, unsigned timeout_ms);

/*
 * The connection's prepared statement `id`, reset and unbound; NULL (logged)
 * on failure. `sql` is the table of the file that owns the statement
 * (db_docs_sql, ...): each file brings its own SQL, and the core here knows
 * none of it.
 */
sqlite3_stmt *db_stmt(struct db_conn *c, enum db_stmt_id id, const char *const sql[DB_S_COUNT_]);
/* A reader inside a read transaction: several queries see one snapshot. NULL on failure. */
struct db_conn *db_snapshot_begin(struct db *db);
void db_snapshot_end(struct db *db, struct db_conn *c);

/* Runs a statement for its effect (one step): 0, or -EIO after logging the error. */
int db_step_done(struct db_conn *c, sqlite3_stmt *s);
/* A failed SQLite result as a negative errno: -ENOSPC for a full disk, -ENOMEM, else -EIO. */
int db_errno(int rc);
/* Runs a statement that yields at most one integer; DB_E_NOT_FOUND if no row. */
int db_query_id(struct db_conn *c, sqlite3_stmt *s, int64_t *out);
/* Adds tags and sets metadata of document `id` (db-edit.c); *changed when any of them is new. */
int db_merge_tags_meta(struct db_conn *c, int64_t id, const char *const *tags, size_t ntags,
                       const char *const *keys, const char *const *values, size_t nmeta,
                       bool *changed);
/* A name row's columns `col` (mode) and `col + 1` (mtime). */
void db_fattr_column(sqlite3_stmt *s, int col, struct db_fattr *fa);
/* As db_query_id, for a statement selecting a name row's doc, mode and mtime. */
int db_query_name_row(struct db_conn *c, sqlite3_stmt *s, int64_t *id, struct db_fattr *fa);
/*
 * A ref NAME@{N} (db-names.c): the document of the Nth version of NAME
 * before its newest (0: the newest). DB_E_NOT_FOUND when the ref has no such
 * suffix or the name no such version.
 */
int db_resolve_version(struct db_conn *c, const char *ref, size_t len, int64_t *id,
                       struct db_fattr *fa);
/* The row id of the document with this hash (64 lowercase hex): 0, DB_E_NOT_FOUND or -EIO. */
int db_doc_id(struct db_conn *c, const char *hash_hex, int64_t *id);

/* ---- db-writers.c ---- */

/* Loads the writers the database knows (at db_new): 0 or negative errno. */
int db_writers_load(struct db *db);
void db_writers_free(struct db *db);

/* ---- db-docs.c ---- */

/* Loads a document row and what `want` asks for (DB_WANT_*). */
int db_load_doc(struct db_conn *c, int64_t id, unsigned want, struct db_doc *doc);
/*
 * Joins column `col` (and, when `col2` >= 0, a space and column `col2`) of
 * every row of a per-document statement, one row per line.
 */
int db_query_joined(struct db_conn *c, enum db_stmt_id id, int64_t doc, int col, int col2,
                    char **out);
