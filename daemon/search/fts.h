#pragma once

/*
 * The ranked queries of searches (fts.c), against the index database
 * attached to reader connections of the metadata database, and what they
 * keep between searches: fuzzy search's copy of the index vocabulary and the
 * number of indexed documents, each read again once the index has changed
 * (the indexer says so with fts_changed). Internal to daemon/search.
 */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/search/search.h"

struct db;
struct search_query;
struct vocab;

struct fts {
    const char *index_path; /* borrowed from the owner */
    _Atomic uint64_t gen;   /* bumped by every index commit that changed it */
    pthread_mutex_t vocab_lock;
    struct vocab *vocab; /* NULL until the first fuzzy search */
    uint64_t vocab_gen;  /* `gen` the copy was made at */
    pthread_mutex_t rows_lock;
    uint64_t rows, rows_gen;
    bool rows_known;
};

void fts_init(struct fts *f, const char *index_path);
void fts_destroy(struct fts *f);
/* The index changed (any thread). */
void fts_changed(struct fts *f);

/*
 * Runs a ranked search for the parsed query `q` (worker threads): 0 with
 * the hits (their snippets not made yet), or negative errno. A fuzzy search
 * adds alternatives to q's words.
 */
int fts_search(struct fts *f, struct db *db, const struct search_params *p, struct search_query *q,
               struct search_hit **hits, size_t *nhits);
