#include "daemon/search/query.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Decodes one UTF-8 sequence; invalid bytes decode as themselves (one byte, no letter). */
static uint32_t utf8_next(const char *s, size_t len, size_t *i)
{
    unsigned char c = (unsigned char)s[*i];
    size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);

    if (*i + n > len) {
        (*i)++;
        return 0xfffd;
    }
    for (size_t k = 1; k < n; k++) {
        unsigned char cc = (unsigned char)s[*i + k];
        if ((cc & 0xc0) != 0x80) {
            (*i)++;
            return 0xfffd;
        }
        cp = (cp << 6) | (cc & 0x3f);
    }
    *i += n;
    return cp;
}

/*
 * Whether the tokenizer (unicode61) keeps a code point as part of a word: an
 * approximation by blocks, enough to ignore words that are only punctuation,
 * symbols or emoji, which would otherwise match nothing and empty a query.
 */
static bool is_word_char(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    if (cp == 0xfffd || (cp >= 0x80 && cp <= 0xbf && cp != 0xaa && cp != 0xb5 && cp != 0xba) ||
        cp == 0xd7 || cp == 0xf7)
        return false;
    if ((cp >= 0x2000 && cp <= 0x2bff) || (cp >= 0x3000 && cp <= 0x303f) ||
        (cp >= 0xe000 && cp <= 0xf8ff) || (cp >= 0xfe30 && cp <= 0xfe4f) ||
        (cp >= 0xff00 && cp <= 0xff0f) || (cp >= 0x1f000 && cp <= 0x1faff))
        return false;
    return true;
}

/* A word counts only if the tokenizer will keep something of it. */
static bool searchable(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        if (is_word_char(utf8_next(s, len, &i)))
            return true;
    }
    return false;
}

/*
 * Folds a code point the way the index does (unicode61 with
 * "remove_diacritics 2": lower case, and letters with a canonical
 * decomposition reduced to their base letter), for Latin-1 and Latin
 * Extended-A, Greek and Cyrillic capitals; others pass through. A '.' in the
 * tables marks a letter without a decomposition (æ, ð, ø, þ, ł, ...), which
 * only loses its capital.
 */
static uint32_t fold(uint32_t cp)
{
    static const char latin1[] = "aaaaaa.ceeeeiiii"
                                 ".nooooo..uuuuy.."
                                 "aaaaaa.ceeeeiiii"
                                 ".nooooo..uuuuy.y";
    static const char ext_a[] = "aaaaaaccccccccdd"
                                "..eeeeeeeeeegggg"
                                "gggghh..iiiiiiii"
                                "i...jjkk.llllll."
                                "...nnnnnn...oooo"
                                "oo..rrrrrrssssss"
                                "sstttt..uuuuuuuu"
                                "uuuuwwyyyzzzzzz.";

    if (cp >= 'A' && cp <= 'Z')
        return cp + 32;
    if (cp >= 0xc0 && cp <= 0xff) {
        char base = latin1[cp - 0xc0];
        if (base != '.')
            return (uint32_t)base;
        return cp >= 0xc0 && cp <= 0xde && cp != 0xd7 ? cp + 32 : cp;
    }
    if (cp >= 0x100 && cp <= 0x17f) {
        char base = ext_a[cp - 0x100];
        if (base != '.')
            return (uint32_t)base;
        switch (cp) { /* capitals of the letters without a decomposition */
        case 0x110:
        case 0x126:
        case 0x132:
        case 0x14a:
        case 0x152:
        case 0x166:
            return cp + 1;
        case 0x13f:
        case 0x141:
            return cp + 1;
        default:
            return cp;
        }
    }
    if ((cp >= 0x391 && cp <= 0x3a9) || (cp >= 0x410 && cp <= 0x42f))
        return cp + 32; /* Greek and Cyrillic capitals */
    return cp;
}

static size_t utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t search_fold(const char *s, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    char enc[4];

    for (size_t i = 0; i < len;) {
        size_t k = utf8_put(fold(utf8_next(s, len, &i)), enc);
        if (n + k >= cap)
            break;
        memcpy(out + n, enc, k);
        n += k;
    }
    out[n] = '\0';
    return n;
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
    if (!searchable(s, len)) {
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

/*
 * Identifiers. The index's tokenizer splits words at punctuation only:
 * `epoll_wait`, `epoll.wait` and `epoll wait` are the words `epoll` and
 * `wait` in a row, but `EpollWait` is the one word `epollwait`. So a term
 * also matches its other spellings: split at its capitals too, as a phrase
 * (`EpollWait`, `epollWait` find `epoll_wait`), and with its parts run
 * together (`epoll_wait` finds `EpollWait`).
 */
#define IDENT_MAX 256

static bool is_upper(char c)
{
    return c >= 'A' && c <= 'Z';
}

static bool is_lower(char c)
{
    return c >= 'a' && c <= 'z';
}

/*
 * The term's words split at capitals as well (a capital after a lower-case
 * letter or a digit, or before a lower-case letter after a capital:
 * `HTTPClient` is `HTTP Client`), space-separated, into split; its words run together
 * into joined. Either is empty when it is no other spelling of the term, and
 * both for a quoted phrase (its words are words, not an identifier's parts).
 */
static void ident_forms(const char *s, char split[IDENT_MAX], char joined[IDENT_MAX])
{
    size_t len = strlen(s), ns = 0, nj = 0, words = 0;
    bool camel = false, in_word = false;

    split[0] = joined[0] = '\0';
    /* A space at most before each byte: split takes up to twice the term. */
    if (2 * len >= IDENT_MAX || strpbrk(s, " \t\n\r\f\v"))
        return;
    for (size_t i = 0; i < len;) {
        size_t k = i;
        bool word = is_word_char(utf8_next(s, len, &k));
        if (!word) {
            in_word = false;
            i = k;
            continue;
        }
        if (!in_word) {
            words++;
            if (ns > 0)
                split[ns++] = ' ';
        } else if (k == i + 1 && is_upper(s[i]) &&
                   (is_lower(s[i - 1]) || (s[i - 1] >= '0' && s[i - 1] <= '9') ||
                    (is_upper(s[i - 1]) && i + 1 < len && is_lower(s[i + 1])))) {
            camel = true;
            split[ns++] = ' ';
        }
        in_word = true;
        memcpy(split + ns, s + i, k - i);
        memcpy(joined + nj, s + i, k - i);
        ns += k - i;
        nj += k - i;
        i = k;
    }
    split[ns] = joined[nj] = '\0';
    if (!camel)
        split[0] = '\0';
    if (words < 2)
        joined[0] = '\0';
}

static void sb_term(struct sbuf *b, const struct search_term *t, enum search_alts alts)
{
    bool widen = alts == SEARCH_ALTS_ALL || (alts == SEARCH_ALTS_UNKNOWN && t->unknown);
    size_t nalts = widen ? t->nalts : 0;
    char split[IDENT_MAX], joined[IDENT_MAX];

    if (t->kind == SEARCH_PREFIX)
        split[0] = joined[0] = '\0';
    else
        ident_forms(t->text, split, joined);
    if (t->kind == SEARCH_NAME)
        sb_cstr(b, "{name} : ");
    if (nalts > 0 || split[0] || joined[0])
        sb_cstr(b, "(");
    sb_quoted(b, t->text);
    if (t->kind == SEARCH_PREFIX)
        sb_cstr(b, " *");
    for (const char *form = split; form; form = form == split ? joined : NULL) {
        if (form[0]) {
            sb_cstr(b, " OR ");
            sb_quoted(b, form);
        }
    }
    for (size_t i = 0; i < nalts; i++) {
        sb_cstr(b, " OR ");
        sb_quoted(b, t->alts[i]);
    }
    if (nalts > 0 || split[0] || joined[0])
        sb_cstr(b, ")");
}

static void sb_group(struct sbuf *b, const struct search_group *g, enum search_alts alts)
{
    sb_cstr(b, "(");
    for (size_t i = 0; i < g->nterms; i++) {
        if (i > 0)
            sb_cstr(b, " OR ");
        sb_term(b, &g->terms[i], alts);
    }
    sb_cstr(b, ")");
}

static int sb_done(struct sbuf *b, char **out)
{
    if (b->failed) {
        free(b->s);
        return -ENOMEM;
    }
    *out = b->s;
    return 0;
}

/* The groups joined by AND (every one required), or by OR (any: weak groups left out). */
static int fts_expr(const struct search_query *q, enum search_alts alts, bool any, char **out)
{
    struct sbuf b = {0};
    bool first = true;

    sb_cstr(&b, "(");
    for (size_t g = 0; g < q->ngroups; g++) {
        if (any && q->groups[g].weak)
            continue;
        if (!first)
            sb_cstr(&b, any ? " OR " : " AND ");
        first = false;
        sb_group(&b, &q->groups[g], alts);
    }
    sb_cstr(&b, ")");
    if (q->nnegatives > 0) {
        sb_cstr(&b, " NOT (");
        for (size_t i = 0; i < q->nnegatives; i++) {
            if (i > 0)
                sb_cstr(&b, " OR ");
            sb_term(&b, &q->negatives[i], alts);
        }
        sb_cstr(&b, ")");
    }
    return sb_done(&b, out);
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
    return sb_done(&b, out);
}

unsigned search_distance(const char *a, size_t alen, const char *b, size_t blen, unsigned max)
{
    /*
     * Over code points, the optimal string alignment distance: insertions,
     * deletions, substitutions and transpositions of two adjacent letters
     * each count 1 ("teh" is one edit from "the"). Words longer than 64
     * letters are never similar.
     */
    uint32_t x[64], y[64];
    size_t xn = 0, yn = 0;
    unsigned rows[3][65], *before = rows[0], *prev = rows[1], *cur = rows[2];
    unsigned prev_best = 0;

    for (size_t i = 0; i < alen; xn++) {
        if (xn == 64)
            return max + 1;
        x[xn] = utf8_next(a, alen, &i);
    }
    for (size_t i = 0; i < blen; yn++) {
        if (yn == 64)
            return max + 1;
        y[yn] = utf8_next(b, blen, &i);
    }
    if ((xn > yn ? xn - yn : yn - xn) > max)
        return max + 1;
    for (size_t j = 0; j <= yn; j++)
        prev[j] = (unsigned)j;
    for (size_t i = 1; i <= xn; i++) {
        unsigned best = cur[0] = (unsigned)i;
        for (size_t j = 1; j <= yn; j++) {
            unsigned v = prev[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1);
            if (prev[j] + 1 < v)
                v = prev[j] + 1;
            if (cur[j - 1] + 1 < v)
                v = cur[j - 1] + 1;
            if (i > 1 && j > 1 && x[i - 1] == y[j - 2] && x[i - 2] == y[j - 1] &&
                before[j - 2] + 1 < v)
                v = before[j - 2] + 1;
            cur[j] = v;
            if (v < best)
                best = v;
        }
        /* A cell comes from the two rows above it: once both are past max, all later are. */
        if (best > max && prev_best > max)
            return max + 1;
        prev_best = best;
        unsigned *t = before;
        before = prev;
        prev = cur;
        cur = t;
    }
    return prev[yn] > max ? max + 1 : prev[yn];
}

size_t search_letters(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; n++)
        (void)utf8_next(s, len, &i);
    return n;
}

/* ---- snippets ---- */

struct pattern {
    char text[256]; /* folded */
    size_t len;
    bool prefix;
};

struct patterns {
    struct pattern *v;
    size_t n;
};

static void patterns_add(struct patterns *ps, const char *s, size_t len, bool prefix)
{
    struct pattern *grown = realloc(ps->v, (ps->n + 1) * sizeof(*grown));
    if (!grown)
        return; /* a snippet with fewer marks is still a snippet */
    ps->v = grown;
    struct pattern *p = &ps->v[ps->n++];
    p->len = search_fold(s, len, p->text, sizeof(p->text));
    p->prefix = prefix;
}

/* Every word of a term, and of its fuzzy alternatives, as something to mark. */
static void patterns_add_term(struct patterns *ps, const struct search_term *t)
{
    const char *s = t->text;
    size_t len = strlen(s);

    for (size_t i = 0; i < len;) {
        size_t start = i, end = i;
        while (i < len) {
            size_t k = i;
            if (!is_word_char(utf8_next(s, len, &k)))
                break;
            i = end = k;
        }
        if (end > start)
            patterns_add(ps, s + start, end - start, t->kind == SEARCH_PREFIX);
        if (i == start)
            (void)utf8_next(s, len, &i);
    }
    for (size_t a = 0; a < t->nalts; a++)
        patterns_add(ps, t->alts[a], strlen(t->alts[a]), false);
    if (t->kind != SEARCH_PREFIX) {
        char split[IDENT_MAX], joined[IDENT_MAX];
        ident_forms(s, split, joined);
        for (char *w = split; *w;) {
            size_t n = strcspn(w, " ");
            patterns_add(ps, w, n, false);
            w += n + (w[n] == ' ');
        }
        if (joined[0])
            patterns_add(ps, joined, strlen(joined), false);
    }
}

static bool token_matches(const struct patterns *ps, const char *tok, size_t len)
{
    char folded[256];
    size_t n = search_fold(tok, len, folded, sizeof(folded));

    for (size_t i = 0; i < ps->n; i++) {
        const struct pattern *p = &ps->v[i];
        if (p->prefix ? n >= p->len && memcmp(folded, p->text, p->len) == 0
                      : n == p->len && memcmp(folded, p->text, n) == 0)
            return true;
    }
    return false;
}

struct span {
    size_t start, end;
    bool match;
};

/* The next word of text[*pos..len): false when there is none. */
static bool next_token(const char *text, size_t len, size_t *pos, struct span *tok)
{
    size_t i = *pos;

    while (i < len) {
        size_t k = i;
        if (is_word_char(utf8_next(text, len, &k)))
            break;
        i = k;
    }
    if (i >= len)
        return false;
    tok->start = i;
    while (i < len) {
        size_t k = i;
        if (!is_word_char(utf8_next(text, len, &k)))
            break;
        i = k;
    }
    tok->end = i;
    *pos = i;
    return true;
}

#define SNIPPET_BEFORE 3
#define SNIPPET_MAX_BYTES 1024
/* How far before a match the snippet's words are looked for. */
#define SNIPPET_LOOKBACK 256

static bool ascii_word_byte(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

/* Bytes of text folded at a time by find_ascii_match. */
#define FOLD_WINDOW 16384

/* Whether pattern `p` is all ASCII (and not empty): those are found by byte search. */
static bool pattern_ascii(const struct pattern *p)
{
    for (size_t i = 0; i < p->len; i++) {
        if ((unsigned char)p->text[i] >= 0x80)
            return false;
    }
    return p->len > 0;
}

/*
 * The offset of the earliest whole-word occurrence of an ASCII pattern:
 * the text is folded to lower case a window at a time and searched with
 * memmem, so a match deep in a large text is found without tokenizing
 * everything before it, and a match early in it without folding the rest.
 * Patterns with other letters are left to the tokenizing scan.
 */
static bool find_ascii_match(const char *text, size_t len, const struct patterns *ps, size_t *at)
{
    char buf[FOLD_WINDOW + sizeof(ps->v[0].text)];
    size_t longest = 0;

    for (size_t k = 0; k < ps->n; k++) {
        if (pattern_ascii(&ps->v[k]) && ps->v[k].len > longest)
            longest = ps->v[k].len;
    }
    if (longest == 0)
        return false;
    for (size_t base = 0; base < len; base += FOLD_WINDOW) {
        /* The window, and enough after it for a match that starts inside it. */
        size_t n = len - base < FOLD_WINDOW + longest - 1 ? len - base : FOLD_WINDOW + longest - 1;
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)text[base + i];
            buf[i] = (char)(c >= 'A' && c <= 'Z' ? c | 0x20 : c);
        }
        for (size_t k = 0; k < ps->n; k++) {
            const struct pattern *p = &ps->v[k];
            if (!pattern_ascii(p))
                continue;
            for (size_t from = 0; from < FOLD_WINDOW && from < best && from + p->len <= n;) {
                const char *hit = memmem(buf + from, n - from, p->text, p->len);
                if (!hit)
                    break;
                size_t i = (size_t)(hit - buf), abs = base + i;
                if (i >= FOLD_WINDOW || i >= best)
                    break;
                from = i + 1;
                if (abs > 0 && ascii_word_byte((unsigned char)text[abs - 1]))
                    continue;
                if (!p->prefix && abs + p->len < len &&
                    ascii_word_byte((unsigned char)text[abs + p->len]))
                    continue;
                best = i;
            }
        }
        if (best != SIZE_MAX) {
            *at = base + best;
            return true;
        }
    }
    return false;
}

char *search_snippet(const char *text, size_t len, const struct search_query *q, unsigned words)
{
    struct patterns ps = {NULL, 0};
    struct span window[64], tok;
    size_t nwin = 0, pos = 0, first = 0, at = 0;
    bool found = false, more = false;
    struct sbuf b = {0};

    if (words > 64 - SNIPPET_BEFORE)
        words = 64 - SNIPPET_BEFORE;
    for (size_t g = 0; g < q->ngroups; g++) {
        for (size_t i = 0; i < q->groups[g].nterms; i++)
            patterns_add_term(&ps, &q->groups[g].terms[i]);
    }
    /* Jump close to a match found by byte search; else tokenize the start of the text. */
    if (find_ascii_match(text, len, &ps, &at) && at > SNIPPET_LOOKBACK) {
        pos = at - SNIPPET_LOOKBACK;
        while (pos < at && ascii_word_byte((unsigned char)text[pos]))
            pos++; /* never start inside a word */
        first = 1;
    }
    if (len - pos > SEARCH_SNIPPET_SCAN)
        len = pos + SEARCH_SNIPPET_SCAN;
    /* Slide a window of words until the first match, then fill the words after it. */
    while (ps.n > 0 && next_token(text, len, &pos, &tok)) {
        tok.match = token_matches(&ps, text + tok.start, tok.end - tok.start);
        if (!found) {
            if (nwin == SNIPPET_BEFORE + 1) {
                memmove(window, window + 1, SNIPPET_BEFORE * sizeof(window[0]));
                nwin--;
                first++;
            }
            window[nwin++] = tok;
            found = tok.match;
            continue;
        }
        if (nwin >= words) { /* the words before the match count too */
            more = true;
            break;
        }
        window[nwin++] = tok;
    }
    if (!found) {
        /* No match in what was scanned: the beginning of the text. */
        len = len < SEARCH_SNIPPET_SCAN ? len : SEARCH_SNIPPET_SCAN;
        nwin = 0;
        pos = 0;
        first = 0;
        while (nwin < words && next_token(text, len, &pos, &tok)) {
            tok.match = false;
            window[nwin++] = tok;
        }
        more = next_token(text, len, &pos, &tok);
    }
    if (first > 0)
        sb_cstr(&b, "...");
    for (size_t i = 0; i < nwin && b.len < SNIPPET_MAX_BYTES; i++) {
        const struct span *t = &window[i];
        if (i > 0) {
            /* What stands between two words, cut short when it is long. */
            size_t gap = t->start - window[i - 1].end;
            sb_put(&b, text + window[i - 1].end, gap > 16 ? 16 : gap);
        }
        if (t->match)
            sb_cstr(&b, "**");
        sb_put(&b, text + t->start, t->end - t->start > 256 ? 256 : t->end - t->start);
        if (t->match)
            sb_cstr(&b, "**");
    }
    if (more)
        sb_cstr(&b, "...");
    sb_put(&b, "", 0);
    free(ps.v);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s ? b.s : strdup("");
}
