/*
 * Searching (store_search): waits for the index to hold every change
 * acknowledged before the search arrived, runs the ranked query on a worker
 * thread, and makes each hit's snippet from its text read back from the
 * store, one hit at a time (the index keeps no copy of the text).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/search/indexer.h"
#include "daemon/search/search.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"

/* Words of context in a snippet. */
#define QUERY_SNIPPET_WORDS 16

struct store_query {
    struct store *st;
    struct db_search_params p;
    store_search_cb *done;
    void *userdata;
    struct store_op op;
    uv_work_t work;
    int status;
    const char *msg;
    struct db_hit *hits;
    size_t nhits;
};

/* A hit's snippet: from its text, or from its names when the text has no match. */
static int snippet(struct store *st, const struct search_query *q, bool match, struct db_hit *h)
{
    char *text = NULL;
    size_t len = 0;
    int r = 0;

    if (h->text) {
        size_t max = h->size < SEARCH_SNIPPET_READ ? (size_t)h->size : SEARCH_SNIPPET_READ;
        r = store_read_prefix(st, h->depth, h->root, h->root_len, max, &text, &len);
        if (r != 0) {
            /* Unreadable text leaves the snippet to the names; the hit itself stands. */
            text = NULL;
            len = 0;
            r = 0;
        }
    }
    h->snippet = search_snippet(text ? text : "", len, q, QUERY_SNIPPET_WORDS);
    free(text);
    /* No mark in the content: the names may be what matched. */
    char *names = NULL;
    if (h->snippet && match && !strstr(h->snippet, "**") &&
        db_doc_names(st->db, h->rowid, &names) == 0) {
        char *alt = search_snippet(names, strlen(names), q, QUERY_SNIPPET_WORDS);
        if (alt && strstr(alt, "**")) {
            free(h->snippet);
            h->snippet = alt;
        } else {
            free(alt);
        }
        free(names);
    }
    return h->snippet ? r : -ENOMEM;
}

static void query_work(uv_work_t *work)
{
    struct store_query *sq = container_of(work, struct store_query, work);
    struct store *st = sq->st;
    struct search_query q;
    int r = search_parse(sq->p.query, sq->p.query_len, &q, &sq->msg);

    if (r != 0) {
        sq->status = r == SEARCH_E_INVALID ? DB_E_INVALID_QUERY : r;
        return;
    }
    r = db_search(st->db, indexer_path(st->indexer), &sq->p, &q, &sq->hits, &sq->nhits);
    for (size_t i = 0; r == 0 && i < sq->nhits; i++)
        r = snippet(st, &q, search_has_match(&q), &sq->hits[i]);
    search_query_clear(&q);
    sq->status = r;
}

static void query_done(uv_work_t *work, int status)
{
    struct store_query *sq = container_of(work, struct store_query, work);
    struct store *st = sq->st;

    store_op_end(st, &sq->op);
    st->active--;
    if (status < 0)
        sq->status = status;
    if (sq->status != 0) {
        db_hits_free(sq->hits, sq->nhits);
        sq->hits = NULL;
        sq->nhits = 0;
    }
    sq->done(sq->userdata, sq->status, sq->msg, sq->hits, sq->nhits);
    free(sq);
}

/* The index holds what the search must see: run it. */
static void query_ready(void *ctx, int status)
{
    struct store_query *sq = ctx;
    int r;

    if (status < 0) {
        /* The index could not catch up: an answer now could miss what came before. */
        sq->st->active--;
        sq->done(sq->userdata, status, NULL, NULL, 0);
        free(sq);
        return;
    }
    /* It reads text from the store: gc keeps it while it runs. */
    store_op_begin(sq->st, &sq->op);
    r = uv_queue_work(sq->st->loop, &sq->work, query_work, query_done);
    if (r < 0)
        query_done(&sq->work, r);
}

int store_search(struct store *st, const struct db_search_params *p, store_search_cb *done,
                 void *userdata)
{
    struct store_query *sq = calloc(1, sizeof(*sq));
    int r;

    if (!sq)
        return -ENOMEM;
    sq->st = st;
    sq->p = *p;
    sq->done = done;
    sq->userdata = userdata;
    r = indexer_wait(st->indexer, query_ready, sq);
    if (r < 0) {
        free(sq);
        return r;
    }
    st->active++;
    return 0;
}
