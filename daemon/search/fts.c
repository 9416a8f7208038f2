/*
 * Searches: ranked FTS5 queries with their filters against the index
 * database (indexer.h), attached read-only to each reader connection of the
 * metadata database that searches, and fuzzy search's expansion of words
 * from the index vocabulary. The index holds no copy of the text; the caller
 * makes snippets from the text read back from the store.
 */
#include "daemon/search/fts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/base/log.h"
#include "daemon/format/manifest.h"
#include "daemon/meta/db.h"
#include "daemon/search/fuzzy.h"
#include "daemon/search/query.h"
#include "daemon/search/vocab.h"

static const char vocab_sql[] = "SELECT term, doc FROM idx.search_vocab";
static const char index_rows_sql[] = "SELECT count(*) FROM idx.search_docsize";
static const char match_upto_sql[] =
    "SELECT count(*) FROM (SELECT 1 FROM idx.search WHERE search MATCH ?1 LIMIT ?2)";

/* How hits are ranked: BM25 with these weights of the index's columns (names, tags, meta, text). */
#define RANK_BM25 "bm25(10.0, 1.0, 4.0, 2.0)"
/* The latest name of document d. */
#define HIT_NAME "(SELECT n.name FROM names n WHERE n.doc = d.id ORDER BY n.seq DESC LIMIT 1)"
/* The first step of a two-step search (run_ranked): the best matches, by rank alone. */
static const char ranked_sql[] = "SELECT rowid, rank FROM idx.search WHERE search MATCH ?1"
                                 " AND rank MATCH '" RANK_BM25 "' ORDER BY rank, rowid LIMIT ?2";
/* Its second: the documents of those matches (ids as a JSON array), in search_sql's columns. */
static const char ranked_docs_sql[] =
    "SELECT d.hash, " HIT_NAME ", 0.0, d.size, d.id, d.text, d.depth, d.manifest"
    " FROM documents d WHERE d.id IN (SELECT value FROM json_each(?1))";
/*
 * The most matches a two-step search reads (16 bytes each): past it, when
 * the page is that deep or that many matches tie, the one-query plan runs.
 */
#define RANKED_MAX 16384

void fts_init(struct fts *f, const char *index_path)
{
    memset(f, 0, sizeof(*f));
    f->index_path = index_path;
    pthread_mutex_init(&f->vocab_lock, NULL);
    pthread_mutex_init(&f->rows_lock, NULL);
}

void fts_destroy(struct fts *f)
{
    f->vocab = vocab_free(f->vocab);
    pthread_mutex_destroy(&f->vocab_lock);
    pthread_mutex_destroy(&f->rows_lock);
}

void fts_changed(struct fts *f)
{
    atomic_fetch_add(&f->gen, 1);
}

void search_hits_free(struct search_hit *hits, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(hits[i].name);
        free(hits[i].root);
        free(hits[i].snippet);
    }
    free(hits);
}

/* Refreshes the in-memory vocabulary when the index changed since it was read. */
static int vocab_refresh(struct fts *f, struct db_conn *c)
{
    uint64_t gen = atomic_load(&f->gen);
    sqlite3_stmt *s;
    int rc, r = 0;

    if (f->vocab && f->vocab_gen == gen)
        return 0;
    f->vocab = vocab_free(f->vocab);
    if (!(s = db_conn_prepare(c, vocab_sql)))
        return -EIO;
    if (!(f->vocab = vocab_new())) {
        sqlite3_reset(s);
        return -ENOMEM;
    }
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW)
        r = vocab_add(f->vocab, (const char *)sqlite3_column_text(s, 0),
                      (size_t)sqlite3_column_bytes(s, 0), sqlite3_column_int64(s, 1));
    sqlite3_reset(s);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0)
        r = vocab_seal(f->vocab);
    if (r < 0) {
        f->vocab = vocab_free(f->vocab);
        return r;
    }
    f->vocab_gen = gen;
    return 0;
}

static int fuzzy_expand_query(struct fts *f, struct db_conn *c, struct search_query *q)
{
    int r;

    pthread_mutex_lock(&f->vocab_lock);
    r = vocab_refresh(f, c);
    for (size_t g = 0; r == 0 && g < q->ngroups; g++) {
        for (size_t i = 0; r == 0 && i < q->groups[g].nterms; i++) {
            struct search_term *t = &q->groups[g].terms[i];
            if (t->kind == SEARCH_WORD || t->kind == SEARCH_NAME)
                r = fuzzy_widen(f->vocab, t);
        }
    }
    pthread_mutex_unlock(&f->vocab_lock);
    return r;
}

/* The first column of the one row `s` gives, as a count; the statement is reset. */
static int step_count(struct db_conn *c, sqlite3_stmt *s, uint64_t *out)
{
    int rc = sqlite3_step(s);
    int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;

    sqlite3_reset(s);
    if (rc != SQLITE_ROW) {
        log_error("database: search: %s", sqlite3_errmsg(db_conn_sqlite(c)));
        return -EIO;
    }
    *out = v > 0 ? (uint64_t)v : 0;
    return 0;
}

/* The number of documents in the index, counted again when the index changed. */
static int index_rows(struct fts *f, struct db_conn *c, uint64_t *out)
{
    uint64_t gen = atomic_load(&f->gen);
    sqlite3_stmt *s;
    int r = 0;

    pthread_mutex_lock(&f->rows_lock);
    if (!f->rows_known || f->rows_gen != gen) {
        if (!(s = db_conn_prepare(c, index_rows_sql)))
            r = -EIO;
        else if ((r = step_count(c, s, &f->rows)) == 0) {
            f->rows_gen = gen;
            f->rows_known = true;
        }
    }
    *out = f->rows;
    pthread_mutex_unlock(&f->rows_lock);
    return r;
}

/*
 * Marks the groups of a ranked (any word) query that are in at least half
 * the indexed documents. FTS5's BM25 gives such a word no weight (its IDF,
 * log((N - n + 0.5) / (n + 0.5)), is not above 0), so the only documents it
 * adds to the hits are those with none of the other words, at a score of
 * about 0, and ranking them costs the most: a query with "the" in it would
 * rank nearly every document. Left out unless every group is weak. Each
 * count stops at half the index.
 */
static int mark_weak_groups(struct fts *f, struct db_conn *c, struct search_query *q)
{
    uint64_t rows, n;
    size_t weak = 0;
    char *expr;
    int r;

    if (q->ngroups < 2)
        return 0;
    if ((r = index_rows(f, c, &rows)) < 0)
        return r;
    for (size_t g = 0; g < q->ngroups; g++) {
        sqlite3_stmt *s = db_conn_prepare(c, match_upto_sql);
        if (!s)
            return -EIO;
        if ((r = search_fts_group(q, g, &expr)) < 0)
            return r;
        sqlite3_bind_text(s, 1, expr, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (int64_t)((rows + 1) / 2));
        r = step_count(c, s, &n);
        sqlite3_clear_bindings(s);
        free(expr);
        if (r < 0)
            return r;
        q->groups[g].weak = rows > 0 && 2 * n >= rows;
        weak += q->groups[g].weak;
    }
    if (weak == q->ngroups) {
        for (size_t g = 0; g < q->ngroups; g++)
            q->groups[g].weak = false;
    }
    return 0;
}

/* The parameter of the documents a tier leaves to the ones before it. */
#define EXCEPT_PARAM 300

/*
 * Builds the SQL of a search: the ranked FTS5 query, or a filter-only
 * listing. With `except`, only documents the expression EXCEPT_PARAM does
 * not match. Equal scores are ordered by hash, so the same corpus always
 * gives the same order.
 */
static char *search_sql(const struct search_params *p, const struct search_query *q, bool match,
                        bool except)
{
    char *sql = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&sql, &len);

    if (!f)
        return NULL;
    /* Snippets are made afterwards (db_search): FTS5's snippet() is quadratic in a document's
     * matches. */
    if (match)
        fputs("SELECT d.hash, " HIT_NAME ", -rank, d.size, d.id, d.text, d.depth, d.manifest"
              " FROM idx.search JOIN documents d ON d.id = search.rowid"
              " WHERE search MATCH ?1 AND rank MATCH '" RANK_BM25 "'",
              f);
    else
        fputs("SELECT d.hash, " HIT_NAME ", 0.0, d.size, d.id, d.text, d.depth, d.manifest"
              " FROM documents d WHERE ?1 IS NULL",
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
    if (except)
        fprintf(f, " AND d.id NOT IN (SELECT rowid FROM idx.search WHERE search MATCH ?%d)",
                EXCEPT_PARAM);
    fputs(match ? " ORDER BY rank, d.hash LIMIT ?6 OFFSET ?7"
                : " ORDER BY d.created DESC, d.hash LIMIT ?6 OFFSET ?7",
          f);
    if (fclose(f) != 0) {
        free(sql);
        return NULL;
    }
    return sql;
}

/*
 * One step of a search's ranking: the documents `expr` matches, without
 * those `except` matches (NULL: none).
 */
struct search_tier {
    const char *expr, *except;
};

/* One ranked query of a search, its rows appended to the hits. */
struct search_run {
    struct db_conn *c;
    const struct search_params *p;
    const struct search_query *q;
    struct search_hit *hits;
    size_t n, cap;
};

static void hit_clear(struct search_hit *h)
{
    free(h->name);
    free(h->root);
    free(h->snippet);
}

/* Drops the hits from index `from` on. */
static void hits_truncate(struct search_run *sr, size_t from)
{
    for (size_t i = from; i < sr->n; i++)
        hit_clear(&sr->hits[i]);
    sr->n = from;
}

/*
 * Appends the hit of the current row of `s`, in the columns of search_sql's
 * queries: hash, name, score, size, id, text, depth, manifest root.
 */
static int hit_append(struct search_run *sr, sqlite3_stmt *s)
{
    if (sr->n == sr->cap) {
        size_t cap = sr->cap ? sr->cap * 2 : 16;
        struct search_hit *grown = realloc(sr->hits, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        sr->hits = grown;
        sr->cap = cap;
    }
    struct search_hit *h = &sr->hits[sr->n++];
    size_t len = (size_t)sqlite3_column_bytes(s, 7);
    const void *root = sqlite3_column_blob(s, 7);

    memset(h, 0, sizeof(*h));
    snprintf(h->hash, sizeof(h->hash), "%s", (const char *)sqlite3_column_text(s, 0));
    h->score = sqlite3_column_double(s, 2);
    h->size = (uint64_t)sqlite3_column_int64(s, 3);
    h->rowid = sqlite3_column_int64(s, 4);
    h->text = sqlite3_column_int(s, 5) != 0;
    h->depth = (unsigned)sqlite3_column_int(s, 6);
    /* What the caller needs to make the snippet: the manifest root. */
    if (!manifest_root_valid(root, len, h->depth))
        return -EIO;
    if (!(h->name = db_column_strdup(s, 1)) || !(h->root = malloc(len ? len : 1)))
        return -ENOMEM;
    if (len)
        memcpy(h->root, root, len);
    h->root_len = len;
    return 0;
}

static int step_error(struct search_run *sr)
{
    /* Every word reaches FTS5 quoted, so this is not the user's syntax. */
    log_error("database: search: %s", sqlite3_errmsg(db_conn_sqlite(sr->c)));
    return -EIO;
}

/* Appends a hit for every row of the bound statement `s`, then resets it. */
static int hits_read(struct search_run *sr, sqlite3_stmt *s)
{
    int rc, r = 0;

    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW)
        r = hit_append(sr, s);
    if (r == 0 && rc != SQLITE_DONE)
        r = step_error(sr);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return r;
}

/* Search order: best score first, equal scores by hash (as ORDER BY rank, d.hash). */
static int hit_order(const void *a, const void *b)
{
    const struct search_hit *x = a, *y = b;

    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return strcmp(x->hash, y->hash);
}

/* A match of the index before its document is read. */
struct ranked {
    int64_t rowid;
    double rank;
};

/* The `fetch` best matches of `expr` by (rank, rowid): how many, at most RANKED_MAX. */
static int ranked_fetch(struct search_run *sr, const char *expr, size_t fetch, struct ranked *out,
                        size_t *n)
{
    sqlite3_stmt *s = db_conn_prepare(sr->c, ranked_sql);
    int rc = SQLITE_DONE, r = 0;

    if (!s)
        return -EIO;
    *n = 0;
    sqlite3_bind_text(s, 1, expr, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)fetch);
    while (*n < fetch && (rc = sqlite3_step(s)) == SQLITE_ROW)
        out[(*n)++] = (struct ranked){sqlite3_column_int64(s, 0), sqlite3_column_double(s, 1)};
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        r = step_error(sr);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return r;
}

static int ranked_by_rowid(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    return (x->rowid > y->rowid) - (x->rowid < y->rowid);
}

/* The order ranked_sql reads matches in: (rank, rowid). */
static int ranked_order(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return ranked_by_rowid(a, b);
}

/*
 * Appends the hits of the documents of the matches `m` (n of them, sorted by
 * rowid here), each with its match's score; a match whose document is gone
 * (its index entry not dropped yet) has none.
 */
static int ranked_hits(struct search_run *sr, struct ranked *m, size_t n)
{
    size_t before = sr->n, len = 0;
    char *ids = NULL;
    FILE *f = open_memstream(&ids, &len);
    sqlite3_stmt *s;
    int r = 0;

    if (!f)
        return -ENOMEM;
    qsort(m, n, sizeof(*m), ranked_by_rowid);
    fputc('[', f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, i ? ",%lld" : "%lld", (long long)m[i].rowid);
    fputc(']', f);
    if (fclose(f) != 0) {
        free(ids);
        return -ENOMEM;
    }
    if (!(s = db_conn_prepare(sr->c, ranked_docs_sql))) {
        free(ids);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, ids, (int)len, SQLITE_STATIC);
    r = hits_read(sr, s);
    free(ids);
    for (size_t i = before; r == 0 && i < sr->n; i++) {
        struct ranked key = {.rowid = sr->hits[i].rowid}, *at;
        if (!(at = bsearch(&key, m, n, sizeof(*m), ranked_by_rowid)))
            r = -EIO; /* a document the query did not ask for: a bug */
        else
            sr->hits[i].score = -at->rank;
    }
    return r;
}

/*
 * A ranked tier without filters, in two steps: the best matches by rank
 * alone, from the index (narrow rows, no join), then the documents of only
 * the matches the page needs, in one query. The rows and their order are
 * search_sql's: the matches read are those down to the page's last, and
 * every one that ties with it. 1 when the page is too deep for it (the
 * caller then runs the one query), else 0 or negative errno.
 */
static int run_ranked(struct search_run *sr, const char *expr, uint64_t limit, uint64_t offset)
{
    size_t before = sr->n, want, need, fetch, n = 0;
    struct ranked *m = NULL, *grown;
    bool fetched = false;
    int r = 0;

    if (offset >= RANKED_MAX || limit >= RANKED_MAX - offset)
        return 1;
    if ((want = (size_t)(offset + limit)) == 0)
        return 0;
    need = want;
    fetch = want + 8;
    for (;;) {
        if (!fetched) {
            if (!(grown = realloc(m, fetch * sizeof(*m)))) {
                r = -ENOMEM;
                break;
            }
            m = grown;
            if ((r = ranked_fetch(sr, expr, fetch, m, &n)) < 0)
                break;
            fetched = true;
        }
        /* The first `need` matches, and those that tie with the last of them. */
        size_t e = need < n ? need : n;
        while (e > 0 && e < n && m[e].rank == m[e - 1].rank)
            e++;
        if (n == fetch && e == n) {
            /* The matches read may go on past the page: read more. */
            if (fetch == RANKED_MAX) {
                r = 1;
                break;
            }
            fetch = fetch * 2 < RANKED_MAX ? fetch * 2 : RANKED_MAX;
            fetched = false;
            continue;
        }
        if ((r = ranked_hits(sr, m, e)) < 0)
            break;
        size_t found = sr->n - before;
        if (found >= want || e == n)
            break;
        /* Some documents are gone (deleted, their index entries not dropped yet): more matches. */
        hits_truncate(sr, before);
        qsort(m, e, sizeof(*m), ranked_order);
        need = e + (want - found);
    }
    free(m);
    if (r != 0) {
        hits_truncate(sr, before);
        return r;
    }
    size_t found = sr->n - before, skip = offset < found ? (size_t)offset : found;
    if (found == 0)
        return 0;
    qsort(sr->hits + before, found, sizeof(*sr->hits), hit_order);
    /* The page: `limit` hits after the first `offset`. */
    for (size_t i = before; i < before + skip; i++)
        hit_clear(&sr->hits[i]);
    memmove(sr->hits + before, sr->hits + before + skip, (found - skip) * sizeof(*sr->hits));
    sr->n -= skip;
    if (sr->n - before > limit)
        hits_truncate(sr, before + (size_t)limit);
    return 0;
}

/* Whether the search narrows its hits by what the documents table holds. */
static bool has_filters(const struct search_params *p, const struct search_query *q)
{
    return p->mime || p->has_after || p->has_before || p->name_glob || p->ntags + q->ntags > 0;
}

/*
 * Runs one tier of the search with `limit` and `offset` (a filter-only
 * listing when there is nothing to match). Appends the rows.
 */
static int run_query(struct search_run *sr, bool match, const struct search_tier *t, uint64_t limit,
                     uint64_t offset)
{
    const struct search_params *p = sr->p;
    const struct search_query *q = sr->q;
    sqlite3_stmt *s;
    int r = 0;

    if (match && !t->except && !has_filters(p, q) &&
        (r = run_ranked(sr, t->expr, limit, offset)) <= 0)
        return r;
    r = 0;
    char *sql = search_sql(p, q, match, t->except != NULL);
    if (!sql)
        return -ENOMEM;
    s = db_conn_prepare(sr->c, sql);
    free(sql);
    if (!s)
        return -EIO;
    sqlite3_bind_text(s, 1, t->expr, -1, SQLITE_STATIC);
    if (t->except)
        sqlite3_bind_text(s, EXCEPT_PARAM, t->except, -1, SQLITE_STATIC);
    if (p->mime)
        sqlite3_bind_text(s, 2, p->mime, -1, SQLITE_STATIC);
    if (p->has_after)
        sqlite3_bind_int64(s, 3, p->after);
    if (p->has_before)
        sqlite3_bind_int64(s, 4, p->before);
    if (p->name_glob)
        sqlite3_bind_text(s, 5, p->name_glob, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
    sqlite3_bind_int64(s, 7, offset > INT64_MAX ? INT64_MAX : (int64_t)offset);
    for (size_t i = 0; i < p->ntags; i++)
        sqlite3_bind_text(s, (int)(8 + i), p->tags[i], -1, SQLITE_STATIC);
    for (size_t i = 0; i < q->ntags; i++)
        sqlite3_bind_text(s, (int)(8 + p->ntags + i), q->tags[i], -1, SQLITE_STATIC);
    r = hits_read(sr, s);
    return r;
}

/* How many documents a tier has, when that is at most `upto` (to skip past it): read and counted.
 */
static int count_tier(struct search_run *sr, const struct search_tier *t, uint64_t upto,
                      uint64_t *count)
{
    size_t before = sr->n;
    int r = run_query(sr, true, t, upto, 0);

    *count = sr->n - before;
    hits_truncate(sr, before);
    return r;
}

/*
 * The order of the hits, as tiers each filling what the ones before left of
 * the page. The documents are ranked by BM25 over the query's words: those
 * with more of the words, and with rarer ones, first; with `all`, only the
 * documents with every word. With fuzzy alternatives, the query as typed
 * comes first, in its own order, then the documents only the alternatives
 * find. A word no document has is a typo: its alternatives stand in for it
 * from the first tier on.
 */
static size_t search_tiers(const char *typed, const char *widened, struct search_tier tiers[2])
{
    tiers[0] = (struct search_tier){typed, NULL};
    if (!widened)
        return 1;
    tiers[1] = (struct search_tier){widened, typed};
    return 2;
}

int fts_search(struct fts *f, struct db *db, const struct search_params *p, struct search_query *q,
               struct search_hit **hits, size_t *nhits)
{
    struct search_run sr = {.p = p, .q = q};
    char *typed = NULL, *widened = NULL;
    struct search_tier tiers[2];
    size_t ntiers = 1;
    uint64_t skip = p->offset;
    int r = 0;

    *hits = NULL;
    *nhits = 0;
    if (!(sr.c = db_reader_acquire(db))) {
        r = -EIO;
        goto out;
    }
    if ((r = db_conn_attach(sr.c, "idx", f->index_path)) < 0)
        goto out;
    bool match = search_has_match(q);
    if (match && p->fuzzy && (r = fuzzy_expand_query(f, sr.c, q)) < 0)
        goto out;
    /* The words joined by OR and ranked, or (all) every one of them required. */
    bool any = !p->all_words && !q->all_words;
    int (*expr)(const struct search_query *, enum search_alts, char **) =
        any ? search_fts_expr_any : search_fts_expr;
    if (match && any && (r = mark_weak_groups(f, sr.c, q)) < 0)
        goto out;
    if ((match && (r = expr(q, SEARCH_ALTS_UNKNOWN, &typed)) < 0) ||
        (match && search_has_alts(q) && (r = expr(q, SEARCH_ALTS_ALL, &widened)) < 0))
        goto out;
    if (match)
        ntiers = search_tiers(typed, widened, tiers);
    else
        tiers[0] = (struct search_tier){NULL, NULL};
    for (size_t t = 0; t < ntiers && sr.n < p->limit; t++) {
        size_t before = sr.n;
        if ((r = run_query(&sr, match, &tiers[t], p->limit - sr.n, skip)) < 0)
            goto out;
        if (sr.n > before || skip == 0) {
            skip = 0;
            continue;
        }
        /* The page starts past this tier: skip as many as it has. */
        uint64_t count;
        if ((r = count_tier(&sr, &tiers[t], skip, &count)) < 0)
            goto out;
        skip -= count < skip ? count : skip;
    }
    *hits = sr.hits;
    *nhits = sr.n;
    sr.hits = NULL;
    sr.n = 0;
out:
    if (sr.c)
        db_reader_release(db, sr.c);
    search_hits_free(sr.hits, sr.n);
    free(typed);
    free(widened);
    return r;
}
