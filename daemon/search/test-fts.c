/*
 * Unit tests of searches (fts.c) against a search index database
 * made here the way the indexer makes it: the schema of daemon/search/indexer.c
 * and one row per document in its FTS5 table (names, text, tags and
 * metadata, one per line), keyed by the document's row id. Ranked searches,
 * every filter, paging, filter-only listings, documents deleted but still
 * indexed, and fuzzy search's vocabulary with its refresh.
 */
#include "daemon/meta/test-db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/search/fts.h"
#include "daemon/search/query.h"

/* The index's schema, as daemon/search/indexer.c creates it. */
static const char index_schema[] =
    "CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5("
    " name, body, tags, meta, content = '', tokenize = 'unicode61 remove_diacritics 2');"
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_vocab USING fts5vocab(search, 'row');"
    "CREATE TABLE IF NOT EXISTS indexed("
    " doc INTEGER PRIMARY KEY, gen INTEGER NOT NULL, hash TEXT NOT NULL, name TEXT NOT NULL,"
    " tags TEXT NOT NULL, meta TEXT NOT NULL, body_len INTEGER NOT NULL);"
    "PRAGMA user_version = 1;";

struct search_env {
    struct test_db *e;
    char index[PATH_MAX + 16];
    struct fts fts;
    int64_t id[6];
    uint8_t hash[6][PROTO_HASH_LEN];
};

static void index_doc(struct search_env *s, int64_t rowid, const char *names, const char *body,
                      const char *tags, const char *meta)
{
    sqlite3 *conn;
    sqlite3_stmt *st;

    assert_int_equal(sqlite3_open(s->index, &conn), SQLITE_OK);
    assert_int_equal(sqlite3_exec(conn, index_schema, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(conn,
                                        "INSERT INTO search(rowid, name, body, tags, meta)"
                                        " VALUES(?1, ?2, ?3, ?4, ?5)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, rowid);
    sqlite3_bind_text(st, 2, names, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, body, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, tags, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, meta, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(conn);
}

/*
 * Four documents, all indexed; the fourth then deleted (its entry is still
 * in the index, as between a delete and the indexer's removal).
 */
static void corpus(struct search_env *s, struct test_db *e)
{
    static const struct {
        const char *name, *mime, *tag, *body;
        int64_t created;
    } docs[] = {
        {"fox.txt", "text/plain", "red", "the quick brown fox jumps over the fence", 1000},
        {"dog.md", "text/markdown", "blue", "a lazy dog sleeps while the fox watches the fox",
         2000},
        {"keyboard-notes", "text/plain", "red", "mechanical switches and keycaps", 3000},
        {"gone.txt", "text/plain", "red", "a fox that was deleted", 4000},
    };
    char hex[PROTO_HASH_HEX + 1];

    s->e = e;
    snprintf(s->index, sizeof(s->index), "%s/search.db", e->dir);
    fts_init(&s->fts, s->index);
    for (size_t i = 0; i < 4; i++) {
        struct test_doc d = {.size = 100 + i,
                             .mime = docs[i].mime,
                             .name = docs[i].name,
                             .tags = {docs[i].tag},
                             .nroot = 1,
                             .text = true,
                             .created_at = docs[i].created};
        test_hash(d.hash, (uint8_t)(0x10 * (i + 1)), (uint8_t)i);
        memcpy(s->hash[i], d.hash, PROTO_HASH_LEN);
        s->id[i] = test_doc_add_ok(e, &d).rowid;
        index_doc(s, s->id[i], docs[i].name, docs[i].body, docs[i].tag, "");
    }
    /* dog.md gets a second name, its newest. */
    struct test_doc again = {.size = 101, .name = "dog-copy.md"};
    memcpy(again.hash, s->hash[1], PROTO_HASH_LEN);
    test_doc_add_ok(e, &again);
    test_hex(s->hash[3], hex);
    assert_int_equal(test_doc_delete(e, hex), 0);
}

/* Runs a search and returns the hits' document indices (0..3) in order, -1 for others. */
static size_t run_search(struct search_env *s, const char *query, struct search_params *p,
                         int *order, struct search_hit **keep)
{
    struct search_query q;
    struct search_hit *hits;
    const char *msg;
    size_t n;

    assert_int_equal(search_parse(query, strlen(query), &q, &msg), 0);
    p->query = query;
    p->query_len = strlen(query);
    if (!p->limit)
        p->limit = 100;
    assert_int_equal(fts_search(&s->fts, s->e->db, p, &q, &hits, &n), 0);
    search_query_clear(&q);
    for (size_t i = 0; i < n; i++) {
        order[i] = -1;
        for (int k = 0; k < 6; k++) {
            if (hits[i].rowid == s->id[k])
                order[i] = k;
        }
    }
    if (keep)
        *keep = hits;
    else
        search_hits_free(hits, n);
    return n;
}

static void expect_hits(struct search_env *s, const char *query, struct search_params p,
                        const int *want, size_t nwant)
{
    int got[8];
    size_t n = run_search(s, query, &p, got, NULL);

    if (n != nwant)
        fail_msg("'%s': %zu hits, expected %zu", query, n, nwant);
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i])
            fail_msg("'%s': hit %zu is document %d, expected %d", query, i, got[i], want[i]);
    }
}

static int int_cmp(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The same when the order is not the point: want is sorted. */
static void expect_set(struct search_env *s, const char *query, struct search_params p,
                       const int *want, size_t nwant)
{
    int got[8];
    size_t n = run_search(s, query, &p, got, NULL);

    qsort(got, n, sizeof(int), int_cmp);
    if (n != nwant)
        fail_msg("'%s': %zu hits, expected %zu", query, n, nwant);
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i])
            fail_msg("'%s': hit %zu is document %d, expected %d", query, i, got[i], want[i]);
    }
}

static void test_search_ranked(void **state)
{
    struct search_env s;
    struct search_params p = {0};
    struct search_hit *hits;
    int got[8];
    char hex[PROTO_HASH_HEX + 1];

    corpus(&s, *state);
    /* A match in the name weighs most: fox.txt ranks first; the deleted one is not a hit. */
    size_t n = run_search(&s, "fox", &p, got, &hits);
    assert_int_equal(n, 2);
    assert_int_equal(got[0], 0);
    assert_int_equal(got[1], 1);
    assert_true(hits[1].score > 0);
    assert_true(hits[0].score > hits[1].score);
    test_hex(s.hash[1], hex);
    assert_string_equal(hits[1].hash, hex);
    assert_string_equal(hits[1].name, "dog-copy.md");
    char **names = NULL;
    size_t nnames = 0;
    assert_int_equal(db_doc_names(s.e->db, hits[1].rowid, &names, &nnames), 0);
    assert_int_equal(nnames, 2);
    assert_string_equal(names[0], "dog.md");
    assert_string_equal(names[1], "dog-copy.md");
    db_names_free(names, nnames);
    assert_int_equal(hits[1].size, 101);
    assert_true(hits[1].text);
    assert_int_equal(hits[1].depth, 0);
    assert_int_equal(hits[1].root_len, MANIFEST_ENTRY);
    assert_null(hits[1].snippet);
    search_hits_free(hits, n);

    /* Paging: the second hit alone. */
    p.limit = 1;
    p.offset = 1;
    expect_hits(&s, "fox", p, (const int[]){1}, 1);
    p.offset = 2;
    expect_hits(&s, "fox", p, NULL, 0);

    /* With all_words every word must match; OR; NOT; phrases; prefixes; the name column. */
    expect_hits(&s, "fox fence", (struct search_params){.all_words = true}, (const int[]){0}, 1);
    expect_hits(&s, "fox AND fence", (struct search_params){0}, (const int[]){0}, 1);
    /* Without, any word makes a hit... */
    expect_set(&s, "dog fence", (struct search_params){0}, (const int[]){0, 1}, 2);
    /*
     * ...but a word in at least half the indexed documents (fox: 3 of 4) has
     * no weight in BM25 and makes no hit on its own, unless every word is such.
     */
    expect_hits(&s, "fox fence", (struct search_params){0}, (const int[]){0}, 1);
    expect_set(&s, "fox the", (struct search_params){0}, (const int[]){0, 1}, 2);
    expect_set(&s, "fence OR keycaps", (struct search_params){0}, (const int[]){0, 2}, 2);
    expect_hits(&s, "fox -lazy", (struct search_params){0}, (const int[]){0}, 1);
    expect_hits(&s, "\"lazy dog\"", (struct search_params){0}, (const int[]){1}, 1);
    expect_hits(&s, "\"dog lazy\"", (struct search_params){0}, NULL, 0);
    expect_hits(&s, "keyc*", (struct search_params){0}, (const int[]){2}, 1);
    expect_hits(&s, "name:keyboard", (struct search_params){0}, (const int[]){2}, 1);
    expect_hits(&s, "name:fox", (struct search_params){0}, (const int[]){0}, 1);
    expect_hits(&s, "nothing", (struct search_params){0}, NULL, 0);
    fts_destroy(&s.fts);
}

static void test_search_filters(void **state)
{
    struct search_env s;
    const char *red[] = {"red"}, *blue[] = {"blue"}, *both[] = {"red", "blue"};

    corpus(&s, *state);
    expect_hits(&s, "fox", (struct search_params){.mime = "text/plain"}, (const int[]){0}, 1);
    expect_hits(&s, "fox", (struct search_params){.mime = "text/html"}, NULL, 0);
    expect_hits(&s, "fox", (struct search_params){.tags = blue, .ntags = 1}, (const int[]){1}, 1);
    expect_hits(&s, "fox", (struct search_params){.tags = both, .ntags = 2}, NULL, 0);
    expect_hits(&s, "fox tag:red", (struct search_params){0}, (const int[]){0}, 1);
    expect_hits(&s, "fox tag:red", (struct search_params){.tags = blue, .ntags = 1}, NULL, 0);
    /* Any of a document's names matches the glob. */
    expect_hits(&s, "fox", (struct search_params){.name_glob = "dog-copy*"}, (const int[]){1}, 1);
    expect_hits(&s, "fox", (struct search_params){.name_glob = "*.txt"}, (const int[]){0}, 1);
    /* created >= after, created < before. */
    expect_hits(&s, "fox", (struct search_params){.has_after = true, .after = 2000},
                (const int[]){1}, 1);
    expect_hits(&s, "fox", (struct search_params){.has_before = true, .before = 2000},
                (const int[]){0}, 1);
    expect_hits(&s, "fox",
                (struct search_params){
                    .has_after = true, .after = 1001, .has_before = true, .before = 2000},
                NULL, 0);

    /* Without words: a listing by the filters, newest first; deleted documents are not in it. */
    expect_hits(&s, "tag:red", (struct search_params){0}, (const int[]){2, 0}, 2);
    expect_hits(&s, "tag:red", (struct search_params){.tags = blue, .ntags = 1}, NULL, 0);
    expect_hits(&s, "tag:red", (struct search_params){.tags = red, .ntags = 1}, (const int[]){2, 0},
                2);
    expect_hits(&s, "tag:red", (struct search_params){.limit = 1, .offset = 1}, (const int[]){0},
                1);
    expect_hits(&s, "tag:red", (struct search_params){.has_before = true, .before = 3000},
                (const int[]){0}, 1);
    expect_hits(&s, "tag:blue", (struct search_params){.mime = "text/markdown"}, (const int[]){1},
                1);
    fts_destroy(&s.fts);
}

static void test_search_fuzzy(void **state)
{
    struct search_env s;
    struct test_db *e = *state;

    corpus(&s, e);
    /* A typo two edits away in an 8-letter word, and a fragment of a longer word. */
    expect_hits(&s, "mechanicle", (struct search_params){0}, NULL, 0);
    expect_hits(&s, "mechanicle", (struct search_params){.fuzzy = true}, (const int[]){2}, 1);
    expect_hits(&s, "keyca", (struct search_params){.fuzzy = true}, (const int[]){2}, 1);
    expect_hits(&s, "zebro", (struct search_params){.fuzzy = true}, NULL, 0);

    /* A new word reaches fuzzy search once the index says it changed. */
    struct test_doc d = {.size = 9, .name = "zoo", .nroot = 1, .text = true};
    test_hash(d.hash, 0x70, 70);
    s.id[4] = test_doc_add_ok(e, &d).rowid;
    index_doc(&s, s.id[4], "zoo", "a zebra", "", "");
    expect_hits(&s, "zebra", (struct search_params){0}, (const int[]){4}, 1);
    fts_changed(&s.fts);
    expect_hits(&s, "zebro", (struct search_params){.fuzzy = true}, (const int[]){4}, 1);
    fts_destroy(&s.fts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_search_ranked, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_search_filters, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_search_fuzzy, test_db_setup, test_db_teardown),
    };
    return cmocka_run_group_tests_name("searches: ranked FTS5 queries", tests, NULL, NULL);
}
