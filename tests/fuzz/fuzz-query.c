/*
 * The search query language: search_parse, the FTS5 expression built from
 * it, and the snippet and fuzzy-matching helpers run on it. The input is a
 * query, optionally followed by a NUL byte and a document text for the
 * snippet.
 */
#include <string.h>

#include "daemon/search/query.h"
#include "proto/proto.h"
#include "tests/fuzz/fuzz.h"

static void terms(const struct search_term *t, size_t n, const struct search_term *prev)
{
    char folded[256];

    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(t[i].text);
        (void)search_fold(t[i].text, len, folded, sizeof(folded));
        (void)search_letters(t[i].text, len);
        if (prev)
            (void)search_distance(t[i].text, len, prev->text, strlen(prev->text), 2);
        prev = &t[i];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t qlen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t text_len = nul ? size - qlen - 1 : 0;
    struct search_query q;
    const char *msg = NULL;
    char *expr = NULL, *snippet;

    if (qlen > PROTO_MAX_QUERY)
        return 0; /* cairnd refuses longer queries before parsing */
    memset(&q, 0, sizeof(q));
    if (search_parse((const char *)data, qlen, &q, &msg) != 0)
        return 0;
    for (size_t g = 0; g < q.ngroups; g++)
        terms(q.groups[g].terms, q.groups[g].nterms, NULL);
    terms(q.negatives, q.nnegatives, NULL);
    if (search_has_match(&q) && search_fts_expr(&q, true, &expr) == 0)
        free(expr);
    if ((snippet = search_snippet(text, text_len, &q, 16)))
        free(snippet);
    search_query_clear(&q);
    return 0;
}
