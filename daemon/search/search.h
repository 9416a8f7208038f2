#pragma once

/*
 * Search: the full-text index of the stored documents and the searches that
 * query it. The index is a database of its own (search.db beside cairn.db),
 * derived entirely from the metadata database and the store and kept in
 * step by the indexer (indexer.h), which the store's hooks feed after every
 * commit. A search waits until the index holds every add and delete
 * acknowledged before it arrived, runs its ranked query on a worker thread
 * (fts.h), and makes each hit's snippet from the text read back from the
 * store (the index keeps no copy of it).
 *
 * Loop thread; callbacks come on the loop thread.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "proto/proto.h"

struct db;
struct search;
struct store;

/* The longest query, and the most hits one search returns. */
#define SEARCH_MAX_QUERY PROTO_MAX_QUERY
#define SEARCH_MAX_LIMIT 1000

/* A search request, as the search op carries it (PROTOCOL.md "search"). */
struct search_params {
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
    bool all_words; /* no hits with only some of the words after those with all */
};

struct search_hit {
    int64_t rowid;
    char hash[PROTO_HASH_HEX + 1];
    char *name;
    double score;
    uint64_t size;
    bool text;
    unsigned depth;
    uint8_t *root;
    size_t root_len;
    char *snippet;
};

void search_hits_free(struct search_hit *hits, size_t n);

struct search_stats {
    uint64_t indexed, removed, pending, batches;
};

/*
 * Opens (making it when missing) the index at `index_path` over the store
 * and its database, and registers itself for the store's index hooks. 0 or
 * negative errno. Over a read-only database (db_open_read_only) it indexes
 * nothing and searches the index as it is, which must exist (-ENOENT).
 */
int search_new(struct search **out, uv_loop_t *loop, struct store *st, struct db *db,
               const char *index_path, size_t max_text);
/*
 * Only when search_busy() is false. Its handles close asynchronously: the
 * caller runs the loop afterwards. Returns NULL.
 */
struct search *search_free(struct search *s);
/* Indexing or searches still running. */
bool search_busy(const struct search *s);

/*
 * Calls fn once everything the store reported before now is indexed (from a
 * later loop turn at the earliest), with status 0; or, when indexing fails
 * (it is retried in the background), with a negative errno. 0, or -ENOMEM.
 */
typedef void search_wait_fn(void *ctx, int status);
int search_wait(struct search *s, search_wait_fn *fn, void *ctx);

void search_get_stats(const struct search *s, struct search_stats *out);

/*
 * Runs a search once every add and delete acknowledged before it is in the
 * index. `done` gets the hits (the callee's: search_hits_free), or
 * DB_E_INVALID_QUERY with a message for the user, or a failure.
 */
typedef void search_cb(void *userdata, int status, const char *msg, struct search_hit *hits,
                       size_t nhits);
int search_run(struct search *s, const struct search_params *p, search_cb *done, void *userdata);
