/*
 * Snippets (query.h): the words around a query's first match in a
 * document's text, matched words marked.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon/search/query.h"
#include "daemon/search/words.h"

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
            if (!words_is_char(words_next_char(s, len, &k)))
                break;
            i = end = k;
        }
        if (end > start)
            patterns_add(ps, s + start, end - start, t->kind == SEARCH_PREFIX);
        if (i == start)
            (void)words_next_char(s, len, &i);
    }
    for (size_t a = 0; a < t->nalts; a++)
        patterns_add(ps, t->alts[a], strlen(t->alts[a]), false);
    if (t->kind != SEARCH_PREFIX) {
        char split[WORDS_IDENT_MAX], joined[WORDS_IDENT_MAX];
        words_ident_forms(s, split, joined);
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
        if (words_is_char(words_next_char(text, len, &k)))
            break;
        i = k;
    }
    if (i >= len)
        return false;
    tok->start = i;
    while (i < len) {
        size_t k = i;
        if (!words_is_char(words_next_char(text, len, &k)))
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
        sbuf_cstr(&b, "...");
    for (size_t i = 0; i < nwin && b.len < SNIPPET_MAX_BYTES; i++) {
        const struct span *t = &window[i];
        if (i > 0) {
            /* What stands between two words, cut short when it is long. */
            size_t gap = t->start - window[i - 1].end;
            sbuf_put(&b, text + window[i - 1].end, gap > 16 ? 16 : gap);
        }
        if (t->match)
            sbuf_cstr(&b, "**");
        sbuf_put(&b, text + t->start, t->end - t->start > 256 ? 256 : t->end - t->start);
        if (t->match)
            sbuf_cstr(&b, "**");
    }
    if (more)
        sbuf_cstr(&b, "...");
    sbuf_put(&b, "", 0);
    free(ps.v);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s ? b.s : strdup("");
}
