/*
 * Words as the index sees them (words.h): UTF-8 letters and what folding
 * does to them, an identifier's other spellings, and the edit distance of
 * fuzzy search; and the growing string that search expressions and
 * snippets are built in.
 */
#include "daemon/search/words.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/search/query.h"

/* Decodes one UTF-8 sequence; invalid bytes decode as themselves (one byte, no letter). */
uint32_t words_next_char(const char *s, size_t len, size_t *i)
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
bool words_is_char(uint32_t cp)
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
bool words_searchable(const char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        if (words_is_char(words_next_char(s, len, &i)))
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
        size_t k = utf8_put(fold(words_next_char(s, len, &i)), enc);
        if (n + k >= cap)
            break;
        memcpy(out + n, enc, k);
        n += k;
    }
    out[n] = '\0';
    return n;
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
        x[xn] = words_next_char(a, alen, &i);
    }
    for (size_t i = 0; i < blen; yn++) {
        if (yn == 64)
            return max + 1;
        y[yn] = words_next_char(b, blen, &i);
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
        (void)words_next_char(s, len, &i);
    return n;
}

/* ---- identifiers ---- */

static bool is_upper(char c)
{
    return c >= 'A' && c <= 'Z';
}

static bool is_lower(char c)
{
    return c >= 'a' && c <= 'z';
}

void words_ident_forms(const char *s, char split[WORDS_IDENT_MAX], char joined[WORDS_IDENT_MAX])
{
    size_t len = strlen(s), ns = 0, nj = 0, words = 0;
    bool camel = false, in_word = false;

    split[0] = joined[0] = '\0';
    /* A space at most before each byte: split takes up to twice the term. */
    if (2 * len >= WORDS_IDENT_MAX || strpbrk(s, " \t\n\r\f\v"))
        return;
    for (size_t i = 0; i < len;) {
        size_t k = i;
        bool word = words_is_char(words_next_char(s, len, &k));
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

/* ---- a growing string ---- */

void sbuf_put(struct sbuf *b, const char *s, size_t n)
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

void sbuf_cstr(struct sbuf *b, const char *s)
{
    sbuf_put(b, s, strlen(s));
}

int sbuf_done(struct sbuf *b, char **out)
{
    if (b->failed) {
        free(b->s);
        return -ENOMEM;
    }
    *out = b->s;
    return 0;
}
