#pragma once

/*
 * The metadata database (SQLite in WAL mode): documents, the name history,
 * tags, key=value metadata and the chunk table with reference counts.
 *
 * Threading: every function here except db_new/db_free/db_write blocks and
 * runs on worker threads only. Reads take a connection from a pool; writes
 * are queued with db_write() on the loop thread and group-committed: one
 * writer job applies every queued change in one transaction (each change in
 * its own savepoint, so one failing change does not fail the others) and
 * calls each change's completion back on the loop thread.
 *
 * A row in `chunks` means the chunk object is durable on the backend: rows
 * are inserted only after the backend acknowledged the put.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "proto/proto.h"

struct db;
struct db_txn;

/* Expected outcomes (positive). */
enum {
    DB_E_NOT_FOUND = 1,
    DB_E_AMBIGUOUS,
    DB_E_INVALID_QUERY,
};

/* One manifest entry: a chunk's id, raw size and stored object size. */
struct db_chunk {
    uint8_t hash[PROTO_HASH_LEN];
    uint32_t size;
    uint32_t stored_size;
};

/* Bytes per entry in the manifest blob: hash, raw size, stored size (BE). */
#define DB_CHUNK_ENTRY 40

struct db_doc {
    int64_t rowid;
    char hash[PROTO_HASH_HEX + 1];
    char *name; /* the name it was found by, else its newest name; NULL if none */
    uint64_t size, stored_size;
    int64_t created;
    uint32_t nchunks;
    char mime[PROTO_MAX_MIME + 1];
    struct db_chunk *chunks; /* with DB_WANT_CHUNKS */
    char **tags;             /* with DB_WANT_TAGS */
    size_t ntags;
    char **names; /* with DB_WANT_DETAILS: every name, oldest first */
    size_t nnames;
    char **meta_keys, **meta_values; /* with DB_WANT_DETAILS */
    size_t nmeta;
};

enum {
    DB_WANT_CHUNKS = 1u << 0,
    DB_WANT_TAGS = 1u << 1,
    DB_WANT_DETAILS = 1u << 2, /* names and metadata (implies tags) */
};

void db_doc_clear(struct db_doc *doc);
void db_docs_free(struct db_doc *docs, size_t n);

struct db_totals {
    uint64_t documents, logical_bytes;           /* logical: the sum of document sizes */
    uint64_t chunks, unique_bytes, stored_bytes; /* unique: raw bytes of distinct chunks */
};

/* A document being added, as db_txn_add() records it. */
struct db_add {
    uint8_t hash[PROTO_HASH_LEN];
    uint64_t size;
    const char *mime;
    const char *name; /* NULL or "" for none */
    const char *const *tags;
    size_t ntags;
    const char *const *meta_keys, *const *meta_values;
    size_t nmeta;
    const struct db_chunk *chunks;
    size_t nchunks;
    /* The text to index (UTF-8), or NULL for a binary document. */
    const char *text;
    size_t text_len;
    int64_t created_at; /* Unix seconds; 0 for now (a rebuild passes the original time) */
    /* Outputs. */
    bool created;
    uint64_t stored_size;
};

/* A queued change: `apply` runs on the writer thread, `done` on the loop. */
struct db_write {
    int (*apply)(struct db_txn *txn, struct db_write *w);
    void (*done)(struct db_write *w);
    int status; /* apply's result, or the commit's failure */
    struct db_write *next_;
};

int db_new(struct db **out, uv_loop_t *loop, const char *path);
struct db *db_free(struct db *db);

/* Queues a change; `done` is always called (on the loop thread). */
void db_write(struct db *db, struct db_write *w);
/* True while changes are queued or being committed. */
bool db_busy(struct db *db);

/* Worker-side writes, for use inside `apply`. */
int db_txn_add(struct db_txn *txn, struct db_add *add);
/* Deletes the document a ref resolves to; its hash goes to `hash_hex`. */
int db_txn_delete(struct db_txn *txn, const char *ref, size_t ref_len,
                  char hash_hex[PROTO_HASH_HEX + 1]);

/* Worker-side reads. */
int db_resolve(struct db *db, const char *ref, size_t ref_len, unsigned want, struct db_doc *doc);
/* Whether the newest document named `name` is the document with row id `doc`. */
int db_name_current(struct db *db, const char *name, int64_t doc, bool *current);
/* 0 and the stored size when the chunk is durable on the backend, else DB_E_NOT_FOUND. */
int db_chunk_lookup(struct db *db, const uint8_t hash[PROTO_HASH_LEN], uint32_t *stored_size);
/* Documents ordered by hash, after `after` (may be NULL), with `tag` (may be NULL). */
int db_list(struct db *db, const char *tag, const char *after, size_t limit, struct db_doc **docs,
            size_t *ndocs);
int db_totals(struct db *db, struct db_totals *t);

/* A search request, as the search op carries it (PROTOCOL.md "search"). */
struct db_search_params {
    const char *query;
    size_t query_len;
    uint64_t limit, offset;
    const char *const *tags;
    size_t ntags;
    const char *name_glob; /* NULL: any */
    const char *mime;      /* NULL: any */
    bool has_after, has_before;
    int64_t after, before; /* Unix seconds: created >= after, created < before */
    bool fuzzy;
};

struct db_hit {
    int64_t rowid;
    char hash[PROTO_HASH_HEX + 1];
    char *name;
    double score;
    uint64_t size;
    char *snippet;
};

void db_hits_free(struct db_hit *hits, size_t n);

/*
 * Runs a ranked search. 0 with the hits, DB_E_INVALID_QUERY with a message
 * for the user in *msg, or negative errno.
 */
int db_search(struct db *db, const struct db_search_params *p, struct db_hit **hits, size_t *nhits,
              const char **msg);

/* ---- maintenance (gc.c, verify.c) ---- */

/* Every chunk with no document referencing it (worker side). */
int db_unreferenced_chunks(struct db *db, struct db_chunk **chunks, size_t *n);
/* Deletes a chunk row if it is still unreferenced; *deleted says whether it was. */
int db_txn_drop_chunk(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN], bool *deleted);
/* Records a chunk object found on the backend that no document uses (rebuild). */
int db_txn_orphan_chunk(struct db_txn *txn, const struct db_chunk *chunk);
/* Every chunk some document uses, for a scrub (worker side). */
int db_all_chunks(struct db *db, struct db_chunk **chunks, size_t *n);
/* How many documents use a chunk; DB_E_NOT_FOUND when it has no row. */
int db_chunk_refs(struct db *db, const uint8_t hash[PROTO_HASH_LEN], int64_t *refs);
/*
 * The documents whose manifests contain any of the `n` sorted chunk ids;
 * (*docs)[i].chunks lists, for each document, only those chunks.
 */
int db_docs_with_chunks(struct db *db, const uint8_t (*sorted)[PROTO_HASH_LEN], size_t n,
                        struct db_doc **docs, size_t *ndocs);
