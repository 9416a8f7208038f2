/*
 * The search part (search.h): the index and its hooks, and searching:
 * waits for the index to hold every change acknowledged before the search
 * arrived, runs the ranked query on a worker thread, and makes each hit's
 * snippet from its text read back from the store, one hit at a time (the
 * index keeps no copy of the text).
 */
#include "daemon/search/search.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/meta/db.h"
#include "daemon/search/fts.h"
#include "daemon/search/indexer.h"
#include "daemon/search/query.h"
#include "daemon/store/store.h"
#include "proto/util.h"

struct search {
    uv_loop_t *loop;
    struct store *st;
    struct db *db;
    char *index_path;
    struct fts fts;
    struct indexer *ix;
    unsigned active; /* searches running */
};

/* Words of context in a snippet. */
#define QUERY_SNIPPET_WORDS 16

struct search_job {
    struct search *s;
    struct search_params p;
    search_cb *done;
    void *userdata;
    struct store_op op;
    uv_work_t work;
    int status;
    const char *msg;
    struct search_hit *hits;
    size_t nhits;
};

/* Whether the query has name:word terms. */
static bool has_name_terms(const struct search_query *q)
{
    for (size_t g = 0; g < q->ngroups; g++)
        for (size_t t = 0; t < q->groups[g].nterms; t++)
            if (q->groups[g].terms[t].kind == SEARCH_NAME)
                return true;
    return false;
}

static bool marked(const char *name, const struct search_query *q)
{
    char *sn = search_snippet(name, strlen(name), q, QUERY_SNIPPET_WORDS);
    bool yes = sn && strstr(sn, "**");

    free(sn);
    return yes;
}

/* Whether `name` is one the hit was found by: it matches the glob, and the words if asked to. */
static bool name_matches(const char *name, const struct search_params *p,
                         const struct search_query *q, bool words)
{
    /* SQLite's GLOB has no escapes: FNM_NOESCAPE, and * crosses '/'. */
    if (p->name_glob && fnmatch(p->name_glob, name, FNM_NOESCAPE) != 0)
        return false;
    return !words || marked(name, q);
}

/*
 * The hit's name: the newest one, unless another name is what the query
 * found (a --name glob, name:word, or words that are only in an older name):
 * then the newest of those.
 */
static int pick_name(struct search_hit *h, const struct search_params *p,
                     const struct search_query *q, bool words, char **names, size_t n)
{
    if (name_matches(h->name, p, q, words))
        return 0;
    for (size_t i = n; i-- > 0;) {
        if (strcmp(names[i], h->name) != 0 && name_matches(names[i], p, q, words)) {
            char *dup = strdup(names[i]);
            if (!dup)
                return -ENOMEM;
            free(h->name);
            h->name = dup;
            return 0;
        }
    }
    return 0;
}

/* The names one per line, for a snippet drawn from them. */
static char *join_names(char **names, size_t n)
{
    size_t len = 1;
    char *out, *at;

    for (size_t i = 0; i < n; i++)
        len += strlen(names[i]) + 1;
    if (!(out = at = malloc(len)))
        return NULL;
    for (size_t i = 0; i < n; i++)
        at += sprintf(at, "%s%s", i ? "\n" : "", names[i]);
    *at = '\0';
    return out;
}

/*
 * A hit's snippet: from its text, or from its names when the text has no
 * match; and the name it shows (pick_name).
 */
static int snippet(struct search *s, const struct search_params *p, const struct search_query *q,
                   bool match, struct search_hit *h)
{
    char *text = NULL, **names = NULL;
    size_t len = 0, nnames = 0;
    int r = 0;

    if (h->text) {
        size_t max = h->size < SEARCH_SNIPPET_READ ? (size_t)h->size : SEARCH_SNIPPET_READ;
        r = store_read_prefix(s->st, h->depth, h->root, h->root_len, max, &text, &len);
        if (r != 0) {
            /* Unreadable text leaves the snippet to the names; the hit itself stands. */
            text = NULL;
            len = 0;
            r = 0;
        }
    }
    h->snippet = search_snippet(text ? text : "", len, q, QUERY_SNIPPET_WORDS);
    free(text);
    if (!h->snippet)
        return -ENOMEM;
    /* No mark in the content: the names may be what matched. */
    bool from_names = match && !strstr(h->snippet, "**");
    bool by_name = from_names || (match && has_name_terms(q));
    if ((by_name || p->name_glob) && !name_matches(h->name, p, q, by_name) &&
        db_doc_names(s->db, h->rowid, &names, &nnames) == 0) {
        r = pick_name(h, p, q, by_name, names, nnames);
    } else if (from_names && db_doc_names(s->db, h->rowid, &names, &nnames) != 0) {
        return 0;
    }
    if (r == 0 && from_names) {
        char *joined = join_names(names, nnames);
        char *alt = joined ? search_snippet(joined, strlen(joined), q, QUERY_SNIPPET_WORDS) : NULL;
        if (alt && strstr(alt, "**")) {
            free(h->snippet);
            h->snippet = alt;
        } else {
            free(alt);
        }
        free(joined);
    }
    db_names_free(names, nnames);
    return r;
}

static void query_work(uv_work_t *work)
{
    struct search_job *sq = container_of(work, struct search_job, work);
    struct search *s = sq->s;
    struct search_query q;
    int r = search_parse(sq->p.query, sq->p.query_len, &q, &sq->msg);

    if (r != 0) {
        sq->status = r == SEARCH_E_INVALID ? DB_E_INVALID_QUERY : r;
        return;
    }
    r = fts_search(&s->fts, s->db, &sq->p, &q, &sq->hits, &sq->nhits);
    for (size_t i = 0; r == 0 && i < sq->nhits; i++)
        r = snippet(s, &sq->p, &q, search_has_match(&q), &sq->hits[i]);
    search_query_clear(&q);
    sq->status = r;
}

static void query_done(uv_work_t *work, int status)
{
    struct search_job *sq = container_of(work, struct search_job, work);
    struct search *s = sq->s;

    store_op_end(s->st, &sq->op);
    s->active--;
    if (status < 0)
        sq->status = status;
    if (sq->status != 0) {
        search_hits_free(sq->hits, sq->nhits);
        sq->hits = NULL;
        sq->nhits = 0;
    }
    sq->done(sq->userdata, sq->status, sq->msg, sq->hits, sq->nhits);
    free(sq);
}

/* The index holds what the search must see: run it. */
static void query_ready(void *ctx, int status)
{
    struct search_job *sq = ctx;
    int r;

    if (status < 0) {
        /* The index could not catch up: an answer now could miss what came before. */
        sq->s->active--;
        sq->done(sq->userdata, status, NULL, NULL, 0);
        free(sq);
        return;
    }
    /* It reads text from the store: gc keeps it while it runs. */
    store_op_begin(sq->s->st, &sq->op);
    r = uv_queue_work(sq->s->loop, &sq->work, query_work, query_done);
    if (r < 0)
        query_done(&sq->work, r);
}

int search_run(struct search *s, const struct search_params *p, search_cb *done, void *userdata)
{
    struct search_job *sq = calloc(1, sizeof(*sq));
    int r;

    if (!sq)
        return -ENOMEM;
    sq->s = s;
    sq->p = *p;
    sq->done = done;
    sq->userdata = userdata;
    if (!s->ix) {
        /* Read-only: the index stays as it is, nothing to wait for. */
        s->active++;
        query_ready(sq, 0);
        return 0;
    }
    r = indexer_wait(s->ix, query_ready, sq);
    if (r < 0) {
        free(sq);
        return r;
    }
    s->active++;
    return 0;
}

/* ---- the part ---- */

static void doc_changed(void *ctx, int64_t rowid, char *text, size_t len)
{
    struct search *s = ctx;
    indexer_queue(s->ix, rowid, text, len);
}

static void doc_removed(void *ctx)
{
    struct search *s = ctx;
    indexer_removed(s->ix);
}

int search_new(struct search **out, uv_loop_t *loop, struct store *st, struct db *db,
               const char *index_path, size_t max_text)
{
    struct search *s = calloc(1, sizeof(*s));
    int r;

    if (!s)
        return -ENOMEM;
    if (!(s->index_path = strdup(index_path))) {
        free(s);
        return -ENOMEM;
    }
    s->loop = loop;
    s->st = st;
    s->db = db;
    fts_init(&s->fts, s->index_path);
    if (db_read_only(db)) {
        /* Searched as the last start that could write left it; never made here. */
        if (access(index_path, F_OK) < 0) {
            r = -errno;
            search_free(s);
            return r;
        }
        *out = s;
        return 0;
    }
    r = indexer_new(&s->ix, loop, st, db, index_path, max_text, &s->fts);
    if (r < 0) {
        search_free(s);
        return r;
    }
    store_set_index_hooks(st, &(struct store_index_hooks){doc_changed, doc_removed, s});
    *out = s;
    return 0;
}

struct search *search_free(struct search *s)
{
    if (!s)
        return NULL;
    if (s->ix)
        store_set_index_hooks(s->st, NULL);
    s->ix = indexer_free(s->ix);
    fts_destroy(&s->fts);
    free(s->index_path);
    free(s);
    return NULL;
}

bool search_busy(const struct search *s)
{
    return s->active > 0 || (s->ix && indexer_busy(s->ix));
}

int search_wait(struct search *s, search_wait_fn *fn, void *ctx)
{
    if (!s->ix)
        return -EROFS;
    return indexer_wait(s->ix, fn, ctx);
}

void search_get_stats(const struct search *s, struct search_stats *out)
{
    struct indexer_stats is = {0};

    if (s->ix)
        indexer_get_stats(s->ix, &is);
    *out = (struct search_stats){is.indexed, is.removed, is.pending, is.batches};
}
