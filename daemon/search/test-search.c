/*
 * Unit tests of the search query language, folding, distance and snippets
 * (daemon/search/query.c, words.c, expr.c and snippet.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/search/query.h"

/* Parses `q` and returns its FTS5 expression (or NULL for a filter-only query). */
static char *compile(const char *q)
{
    struct search_query sq;
    const char *msg;
    char *expr = NULL;

    assert_int_equal(search_parse(q, strlen(q), &sq, &msg), 0);
    if (search_has_match(&sq))
        assert_int_equal(search_fts_expr(&sq, SEARCH_ALTS_ALL, &expr), 0);
    search_query_clear(&sq);
    return expr;
}

static void expect_expr(const char *q, const char *want)
{
    char *expr = compile(q);
    if (!expr || strcmp(expr, want) != 0)
        fail_msg("query %s: got %s, want %s", q, expr ? expr : "(none)", want);
    free(expr);
}

static void expect_invalid(const char *q, size_t len, const char *msg_part)
{
    struct search_query sq;
    const char *msg = NULL;

    if (search_parse(q, len, &sq, &msg) != SEARCH_E_INVALID)
        fail_msg("query '%.*s' was accepted", (int)(len > 60 ? 60 : len), q);
    assert_non_null(msg);
    if (!strstr(msg, msg_part))
        fail_msg("query '%.*s': message '%s' lacks '%s'", (int)(len > 60 ? 60 : len), q, msg,
                 msg_part);
}

static void test_words_and_operators(void **state)
{
    expect_expr("fox", "((\"fox\"))");
    expect_expr("brown fox", "((\"brown\") AND (\"fox\"))");
    expect_expr("brown AND fox", "((\"brown\") AND (\"fox\"))");
    expect_expr("a OR b c", "((\"a\" OR \"b\") AND (\"c\"))");
    expect_expr("\"lazy dog\"", "((\"lazy dog\"))");
    /* identifiers: also split at capitals, and run together */
    expect_expr("EpollWait", "(((\"EpollWait\" OR \"Epoll Wait\")))");
    expect_expr("epoll_wait()", "(((\"epoll_wait()\" OR \"epollwait\")))");
    expect_expr("HTTPClient.send",
                "(((\"HTTPClient.send\" OR \"HTTP Client send\" OR \"HTTPClientsend\")))");
    expect_expr("ipv6Addr", "(((\"ipv6Addr\" OR \"ipv6 Addr\")))");
    expect_expr("keyB*", "((\"keyB\" *))");
    expect_expr("keyb*", "((\"keyb\" *))");
    expect_expr("cat -warm", "((\"cat\")) NOT (\"warm\")");
    expect_expr("cat NOT warm", "((\"cat\")) NOT (\"warm\")");
    expect_expr("cat -\"warm day\"", "((\"cat\")) NOT (\"warm day\")");
    expect_expr("name:network", "(({name} : \"network\"))");
    /* Quotes inside a word cannot escape the FTS5 string. */
    expect_expr("a\"\"b", "((\"a\") AND (\"b\"))");
    expect_expr("say\"hi\"", "((\"say\") AND (\"hi\"))");
    /* Words of punctuation alone are dropped. */
    expect_expr("eggs ...", "((\"eggs\"))");
    expect_expr("eggs \xe2\x80\x94", "((\"eggs\"))"); /* an em dash */
}

static void test_filter_only(void **state)
{
    struct search_query sq;
    const char *msg;

    assert_int_equal(search_parse("tag:pets", 8, &sq, &msg), 0);
    assert_false(search_has_match(&sq));
    assert_int_equal(sq.ntags, 1);
    assert_string_equal(sq.tags[0], "pets");
    search_query_clear(&sq);
}

static void test_invalid(void **state)
{
    static const char nul[] = "a\0b";
    char *big = malloc(SEARCH_MAX_QUERY + 2);
    char many[64 * 4 + 16] = "";

    expect_invalid("\"unbalanced", 11, "unbalanced quote");
    expect_invalid("OR", 2, "OR needs a word");
    expect_invalid("fox OR", 6, "OR needs a word");
    expect_invalid("OR fox", 6, "OR needs a word");
    expect_invalid("NOT", 3, "NOT needs a word");
    expect_invalid("-fox", 4, "besides negated");
    expect_invalid("fox -storm OR neptune", 21, "OR needs a word");
    expect_invalid("fox tag:food OR omelette", 24, "OR needs a word");
    expect_invalid("", 0, "no words");
    expect_invalid("...", 3, "no words");
    expect_invalid(nul, 3, "NUL");
    memset(big, 'a', SEARCH_MAX_QUERY + 1);
    expect_invalid(big, SEARCH_MAX_QUERY + 1, "longer than");
    free(big);
    for (int i = 0; i < 65; i++)
        strcat(many, "ab ");
    expect_invalid(many, strlen(many), "more than 64 terms");
}

static void test_fold_and_distance(void **state)
{
    char out[64];

    assert_int_equal(search_fold("Cr\xc3\xaape", 6, out, sizeof(out)), 5);
    assert_string_equal(out, "crepe");
    search_fold("R\xc3\x89SUM\xc3\x89S", 10, out, sizeof(out));
    assert_string_equal(out, "resumes");
    search_fold("\xc3\x86sir", 5, out, sizeof(out)); /* Æ has no base letter: only lower case */
    assert_string_equal(out, "\xc3\xa6sir");
    assert_int_equal(search_distance("kubernets", 9, "kubernetes", 10, 2), 1);
    assert_int_equal(search_distance("stra\xc3\x9f"
                                     "e",
                                     7, "strase", 6, 2),
                     1);                                         /* letters */
    assert_int_equal(search_distance("abc", 3, "xyz", 3, 1), 2); /* capped at max + 1 */
    /* A transposition of adjacent letters is one edit (optimal string alignment). */
    assert_int_equal(search_distance("teh", 3, "the", 3, 2), 1);
    assert_int_equal(search_distance("wiat", 4, "wait", 4, 1), 1);
    assert_int_equal(search_distance("epoll_wiat", 10, "epoll_wait", 10, 2), 1);
    assert_int_equal(search_distance("ab", 2, "ba", 2, 0), 1); /* over max: max + 1 */
    assert_int_equal(search_distance("abcd", 4, "badc", 4, 2), 2);
    assert_int_equal(search_distance("ca", 2, "abc", 3, 3), 3); /* not 2: each letter edited once */
    assert_int_equal(search_distance("caf\xc3\xa9", 5,
                                     "ca\xc3\xa9"
                                     "f",
                                     5, 1),
                     1); /* letters */
    assert_int_equal(search_letters("caf\xc3\xa9", 5), 4);
}

static char *snippet_for(const char *text, const char *query)
{
    struct search_query sq;
    const char *msg;
    char *s;

    assert_int_equal(search_parse(query, strlen(query), &sq, &msg), 0);
    s = search_snippet(text, strlen(text), &sq, 8);
    search_query_clear(&sq);
    assert_non_null(s);
    return s;
}

static void test_snippets(void **state)
{
    /* At most `words` words in all (8 here), "..." for what is cut. */
    char *s = snippet_for("The quick brown fox jumps over the lazy dog", "FOX");
    assert_string_equal(s, "The quick brown **fox** jumps over the lazy...");
    free(s);
    s = snippet_for("The quick brown fox jumps over the lazy", "FOX");
    assert_string_equal(s, "The quick brown **fox** jumps over the lazy");
    free(s);
    /* Three words of context before the match, then the rest of the words from it. */
    s = snippet_for("one two three four five six seven eight nine ten eleven twelve thirteen",
                    "six");
    assert_string_equal(s, "...three four five **six** seven eight nine ten...");
    free(s);
    s = snippet_for("a b c d e f g h i j k l m n o p", "e");
    assert_string_equal(s, "...b c d **e** f g h i...");
    free(s);
    s = snippet_for("Configure the network interface", "net*");
    assert_non_null(strstr(s, "**network**"));
    free(s);
    s = snippet_for("un caf\xc3\xa9 noir", "cafe");
    assert_non_null(strstr(s, "**caf\xc3\xa9**"));
    free(s);
    /* No match: the start of the text, unmarked. */
    s = snippet_for("alpha beta gamma", "zeta");
    assert_string_equal(s, "alpha beta gamma");
    free(s);

    /* A match deep in a large text is found, and the snippet starts near it. */
    size_t n = 3u * 1024 * 1024;
    char *big = malloc(n + 32);
    for (size_t i = 0; i < n; i += 6)
        memcpy(big + i, "lorem ", 6);
    strcpy(big + n, "needle lorem");
    s = snippet_for(big, "needle");
    assert_non_null(strstr(s, "**needle**"));
    assert_true(strncmp(s, "...", 3) == 0);
    free(s);

    /*
     * Byte search folds the text a window at a time: a match in any case is
     * found across a window's edge, and a match inside a longer word (or one
     * with a letter fused to it) is not a match.
     */
    for (size_t at = 16370; at <= 16390; at++) {
        memset(big, ' ', at);
        memcpy(big + 100, "xneedle needlex ", 16);
        strcpy(big + at, "NeEdLe tail");
        s = snippet_for(big, "needle");
        assert_non_null(strstr(s, "**NeEdLe**"));
        assert_null(strstr(s, "**xneedle"));
        free(s);
    }
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_words_and_operators),
        cmocka_unit_test(test_filter_only),
        cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_fold_and_distance),
        cmocka_unit_test(test_snippets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
