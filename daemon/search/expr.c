/*
 * The FTS5 match expressions of a parsed query (query.h): every word a
 * quoted FTS5 string, so no input reaches FTS5's own syntax.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/search/query.h"
#include "daemon/search/words.h"

/* An FTS5 string: double quotes inside are doubled, nothing else is special. */
static void sb_quoted(struct sbuf *b, const char *s)
{
    sbuf_put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            sbuf_put(b, "\"\"", 2);
        else
            sbuf_put(b, p, 1);
    }
    sbuf_put(b, "\"", 1);
}

static void sb_term(struct sbuf *b, const struct search_term *t, enum search_alts alts)
{
    bool widen = alts == SEARCH_ALTS_ALL || (alts == SEARCH_ALTS_UNKNOWN && t->unknown);
    size_t nalts = widen ? t->nalts : 0;
    char split[WORDS_IDENT_MAX], joined[WORDS_IDENT_MAX];

    if (t->kind == SEARCH_PREFIX)
        split[0] = joined[0] = '\0';
    else
        words_ident_forms(t->text, split, joined);
    if (t->kind == SEARCH_NAME)
        sbuf_cstr(b, "{name} : ");
    if (nalts > 0 || split[0] || joined[0])
        sbuf_cstr(b, "(");
    sb_quoted(b, t->text);
    if (t->kind == SEARCH_PREFIX)
        sbuf_cstr(b, " *");
    for (const char *form = split; form; form = form == split ? joined : NULL) {
        if (form[0]) {
            sbuf_cstr(b, " OR ");
            sb_quoted(b, form);
        }
    }
    for (size_t i = 0; i < nalts; i++) {
        sbuf_cstr(b, " OR ");
        sb_quoted(b, t->alts[i]);
    }
    if (nalts > 0 || split[0] || joined[0])
        sbuf_cstr(b, ")");
}

static void sb_group(struct sbuf *b, const struct search_group *g, enum search_alts alts)
{
    sbuf_cstr(b, "(");
    for (size_t i = 0; i < g->nterms; i++) {
        if (i > 0)
            sbuf_cstr(b, " OR ");
        sb_term(b, &g->terms[i], alts);
    }
    sbuf_cstr(b, ")");
}

/* The groups joined by AND (every one required), or by OR (any: weak groups left out). */
static int fts_expr(const struct search_query *q, enum search_alts alts, bool any, char **out)
{
    struct sbuf b = {0};
    bool first = true;

    sbuf_cstr(&b, "(");
    for (size_t g = 0; g < q->ngroups; g++) {
        if (any && q->groups[g].weak)
            continue;
        if (!first)
            sbuf_cstr(&b, any ? " OR " : " AND ");
        first = false;
        sb_group(&b, &q->groups[g], alts);
    }
    sbuf_cstr(&b, ")");
    if (q->nnegatives > 0) {
        sbuf_cstr(&b, " NOT (");
        for (size_t i = 0; i < q->nnegatives; i++) {
            if (i > 0)
                sbuf_cstr(&b, " OR ");
            sb_term(&b, &q->negatives[i], alts);
        }
        sbuf_cstr(&b, ")");
    }
    return sbuf_done(&b, out);
}

int search_fts_expr(const struct search_query *q, enum search_alts alts, char **out)
{
    return fts_expr(q, alts, false, out);
}

int search_fts_expr_any(const struct search_query *q, enum search_alts alts, char **out)
{
    return fts_expr(q, alts, true, out);
}

int search_fts_group(const struct search_query *q, size_t g, char **out)
{
    struct sbuf b = {0};

    sb_group(&b, &q->groups[g], SEARCH_ALTS_NONE);
    return sbuf_done(&b, out);
}
