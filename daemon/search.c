#include "daemon/search.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A word counts only if the tokenizer will keep something of it. */
static bool searchable(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            c >= 0x80)
            return true;
    }
    return false;
}

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
    size_t nterms;
};

static int add_term(struct parser *p, enum search_term_kind kind, bool negative, const char *s,
                    size_t len, const char **msg)
{
    struct search_term t = {kind, NULL, NULL, 0};
    int r;

    if (p->pending_not) {
        negative = true;
        p->pending_not = false;
    }
    if (!searchable(s, len)) {
        /* Punctuation alone matches nothing; it must not empty an OR either. */
        if (p->pending_or) {
            *msg = "invalid query: OR needs a word on each side";
            return SEARCH_E_INVALID;
        }
        return 0;
    }
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
        struct search_group g = {NULL, 0};
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
        if (p->q->ngroups == 0 || p->pending_or || p->pending_not) {
            *msg = "invalid query: OR needs a word on each side";
            return SEARCH_E_INVALID;
        }
        p->pending_or = true;
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
    if (len == 3 && memcmp(s, "AND", 3) == 0)
        return 0; /* words are joined by AND anyway */
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
    struct parser p = {q, false, false, 0};
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

/* A growing string; `failed` sticks once an allocation fails. */
struct sbuf {
    char *s;
    size_t len, cap;
    bool failed;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_cstr(struct sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

/* An FTS5 string: double quotes inside are doubled, nothing else is special. */
static void sb_quoted(struct sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            sb_put(b, "\"\"", 2);
        else
            sb_put(b, p, 1);
    }
    sb_put(b, "\"", 1);
}

static void sb_term(struct sbuf *b, const struct search_term *t)
{
    if (t->kind == SEARCH_NAME)
        sb_cstr(b, "{name} : ");
    if (t->nalts > 0)
        sb_cstr(b, "(");
    sb_quoted(b, t->text);
    if (t->kind == SEARCH_PREFIX)
        sb_cstr(b, " *");
    for (size_t i = 0; i < t->nalts; i++) {
        sb_cstr(b, " OR ");
        sb_quoted(b, t->alts[i]);
    }
    if (t->nalts > 0)
        sb_cstr(b, ")");
}

int search_fts_expr(const struct search_query *q, char **out)
{
    struct sbuf b = {0};

    sb_cstr(&b, "(");
    for (size_t g = 0; g < q->ngroups; g++) {
        if (g > 0)
            sb_cstr(&b, " AND ");
        sb_cstr(&b, "(");
        for (size_t i = 0; i < q->groups[g].nterms; i++) {
            if (i > 0)
                sb_cstr(&b, " OR ");
            sb_term(&b, &q->groups[g].terms[i]);
        }
        sb_cstr(&b, ")");
    }
    sb_cstr(&b, ")");
    if (q->nnegatives > 0) {
        sb_cstr(&b, " NOT (");
        for (size_t i = 0; i < q->nnegatives; i++) {
            if (i > 0)
                sb_cstr(&b, " OR ");
            sb_term(&b, &q->negatives[i]);
        }
        sb_cstr(&b, ")");
    }
    if (b.failed) {
        free(b.s);
        return -ENOMEM;
    }
    *out = b.s;
    return 0;
}

unsigned search_distance(const char *a, size_t alen, const char *b, size_t blen, unsigned max)
{
    /* Two rows of the Levenshtein table; words longer than 64 bytes are never similar. */
    unsigned row0[65], row1[65], *prev = row0, *cur = row1;

    if (alen > 64 || blen > 64)
        return max + 1;
    if ((alen > blen ? alen - blen : blen - alen) > max)
        return max + 1;
    for (size_t j = 0; j <= blen; j++)
        prev[j] = (unsigned)j;
    for (size_t i = 1; i <= alen; i++) {
        unsigned best = cur[0] = (unsigned)i;
        for (size_t j = 1; j <= blen; j++) {
            unsigned cost = a[i - 1] == b[j - 1] ? 0 : 1;
            unsigned v = prev[j - 1] + cost;
            if (prev[j] + 1 < v)
                v = prev[j] + 1;
            if (cur[j - 1] + 1 < v)
                v = cur[j - 1] + 1;
            cur[j] = v;
            if (v < best)
                best = v;
        }
        if (best > max)
            return max + 1;
        unsigned *t = prev;
        prev = cur;
        cur = t;
    }
    return prev[blen] > max ? max + 1 : prev[blen];
}
