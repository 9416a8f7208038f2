#include "daemon/search/query.h"
#include "daemon/search/words.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static void term_clear(struct search_term *t)
{
    free(t->text);
    for (size_t i = 0; i < t->nalts; i++)
        free(t->alts[i]);
    free(t->alts);
    memset(t, 0, sizeof(*t));
}

void search_query_clear(struct search_query *q)
{
    for (size_t g = 0; g < q->ngroups; g++) {
        for (size_t i = 0; i < q->groups[g].nterms; i++)
            term_clear(&q->groups[g].terms[i]);
        free(q->groups[g].terms);
    }
    free(q->groups);
    for (size_t i = 0; i < q->nnegatives; i++)
        term_clear(&q->negatives[i]);
    free(q->negatives);
    for (size_t i = 0; i < q->ntags; i++)
        free(q->tags[i]);
    free(q->tags);
    memset(q, 0, sizeof(*q));
}

bool search_has_match(const struct search_query *q)
{
    return q->ngroups > 0;
}

bool search_has_alts(const struct search_query *q)
{
    for (size_t g = 0; g < q->ngroups; g++) {
        for (size_t i = 0; i < q->groups[g].nterms; i++) {
            if (q->groups[g].terms[i].nalts > 0)
                return true;
        }
    }
    return false;
}

static int push(void **arr, size_t *n, size_t size, const void *item)
{
    void *grown = realloc(*arr, (*n + 1) * size);
    if (!grown)
        return -ENOMEM;
    memcpy((char *)grown + *n * size, item, size);
    *arr = grown;
    (*n)++;
    return 0;
}

/* Parser state: a term may continue the last group (after OR) or negate (after NOT). */
struct parser {
    struct search_query *q;
    bool pending_or, pending_not;
    bool after_positive; /* the last token was a positive term: OR may follow */
    size_t nterms;
};

static int add_term(struct parser *p, enum search_term_kind kind, bool negative, const char *s,
                    size_t len, const char **msg)
{
    struct search_term t = {.kind = kind};
    int r;

    if (p->pending_not) {
        negative = true;
        p->pending_not = false;
    }
    if (!words_searchable(s, len)) {
        /* Punctuation alone matches nothing; it must not empty an OR either. */
        if (p->pending_or) {
            *msg = "invalid query: OR needs a word on each side";
            return SEARCH_E_INVALID;
        }
        p->after_positive = false;
        return 0;
    }
    p->after_positive = !negative;
    if (++p->nterms > SEARCH_MAX_TERMS) {
        *msg = "invalid query: more than 64 terms";
        return SEARCH_E_INVALID;
    }
    t.text = strndup(s, len);
    if (!t.text)
        return -ENOMEM;
    if (negative) {
        if (p->pending_or) {
            free(t.text);
            *msg = "invalid query: OR cannot join a negated term";
            return SEARCH_E_INVALID;
        }
        r = push((void **)&p->q->negatives, &p->q->nnegatives, sizeof(t), &t);
    } else if (p->pending_or) {
        struct search_group *g = &p->q->groups[p->q->ngroups - 1];
        r = push((void **)&g->terms, &g->nterms, sizeof(t), &t);
        p->pending_or = false;
    } else {
        struct search_group g = {0};
        r = push((void **)&g.terms, &g.nterms, sizeof(t), &t);
        if (r == 0) {
            r = push((void **)&p->q->groups, &p->q->ngroups, sizeof(g), &g);
            if (r < 0)
                free(g.terms);
        }
    }
    if (r < 0)
        free(t.text);
    return r;
}

static int add_word(struct parser *p, const char *s, size_t len, const char **msg)
{
    bool negative = false;

    if (len == 2 && memcmp(s, "OR", 2) == 0) {
        if (!p->after_positive || p->pending_or || p->pending_not) {
            *msg = "invalid query: OR needs a word on each side";
            return SEARCH_E_INVALID;
        }
        p->pending_or = true;
        p->after_positive = false;
        return 0;
    }
    if (len == 3 && memcmp(s, "NOT", 3) == 0) {
        if (p->pending_not || p->pending_or) {
            *msg = "invalid query: NOT needs a word after it";
            return SEARCH_E_INVALID;
        }
        p->pending_not = true;
        return 0;
    }
    if (len == 3 && memcmp(s, "AND", 3) == 0) {
        p->q->all_words = true; /* as the all option: every word required */
        return 0;
    }
    if (s[0] == '-' && len > 1) {
        negative = true;
        s++;
        len--;
    }
    if (len > 4 && memcmp(s, "tag:", 4) == 0) {
        if (negative || p->pending_or || p->pending_not) {
            *msg = "invalid query: tag: filters cannot be negated or joined with OR";
            return SEARCH_E_INVALID;
        }
        p->after_positive = false;
        char *tag = strndup(s + 4, len - 4);
        if (!tag)
            return -ENOMEM;
        if (push((void **)&p->q->tags, &p->q->ntags, sizeof(tag), &tag) < 0) {
            free(tag);
            return -ENOMEM;
        }
        return 0;
    }
    if (len > 5 && memcmp(s, "name:", 5) == 0)
        return add_term(p, SEARCH_NAME, negative, s + 5, len - 5, msg);
    if (len > 1 && s[len - 1] == '*')
        return add_term(p, SEARCH_PREFIX, negative, s, len - 1, msg);
    return add_term(p, SEARCH_WORD, negative, s, len, msg);
}

int search_parse(const char *text, size_t len, struct search_query *q, const char **msg)
{
    struct parser p = {q, false, false, false, 0};
    size_t i = 0;
    int r = 0;

    memset(q, 0, sizeof(*q));
    *msg = NULL;
    if (len > SEARCH_MAX_QUERY) {
        *msg = "invalid query: longer than 65536 bytes";
        return SEARCH_E_INVALID;
    }
    if (memchr(text, '\0', len)) {
        *msg = "invalid query: contains a NUL byte";
        return SEARCH_E_INVALID;
    }
    while (r == 0 && i < len) {
        if (is_space(text[i])) {
            i++;
            continue;
        }
        bool negative = false;
        if (text[i] == '-' && i + 1 < len && text[i + 1] == '"') {
            negative = true;
            i++;
        }
        if (text[i] == '"') {
            const char *end = memchr(text + i + 1, '"', len - i - 1);
            if (!end) {
                *msg = "invalid query: unbalanced quote";
                r = SEARCH_E_INVALID;
                break;
            }
            r = add_term(&p, SEARCH_PHRASE, negative, text + i + 1, (size_t)(end - text) - i - 1,
                         msg);
            i = (size_t)(end - text) + 1;
            continue;
        }
        size_t start = i;
        while (i < len && !is_space(text[i]) && text[i] != '"')
            i++;
        r = add_word(&p, text + start, i - start, msg);
    }
    if (r == 0 && p.pending_or) {
        *msg = "invalid query: OR needs a word on each side";
        r = SEARCH_E_INVALID;
    }
    if (r == 0 && p.pending_not) {
        *msg = "invalid query: NOT needs a word after it";
        r = SEARCH_E_INVALID;
    }
    if (r == 0 && q->ngroups == 0 && q->ntags == 0) {
        *msg = q->nnegatives ? "invalid query: needs a word to search for besides negated ones"
                             : "invalid query: no words to search for";
        r = SEARCH_E_INVALID;
    }
    if (r == 0 && q->ngroups == 0 && q->nnegatives > 0) {
        *msg = "invalid query: needs a word to search for besides negated ones";
        r = SEARCH_E_INVALID;
    }
    if (r != 0)
        search_query_clear(q);
    return r;
}
