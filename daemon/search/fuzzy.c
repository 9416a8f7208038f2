/* Fuzzy search's widening of query words (fuzzy.h). */
#include "daemon/search/fuzzy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/search/vocab.h"

/* Parts of an identifier widened at most, and alternatives kept for each part. */
#define FUZZY_MAX_PARTS 4
#define FUZZY_PART_ALTS 8

struct fuzzy_candidate {
    const struct vocab_term *term;
    unsigned distance;
    unsigned shared; /* bytes of the word it has too, wherever they are */
    unsigned prefix; /* bytes it shares with the word at the start */
};

/*
 * Better candidates first: closer; then, at the same distance, the one that
 * keeps more of the word's letters (wiat is wait, all four, before it is
 * wia or wint), then more of its start (a typo is rarer in the first
 * letters: epol is epoll before it is eapol); then the more common.
 */
static int candidate_cmp(const void *a, const void *b)
{
    const struct fuzzy_candidate *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    if (x->shared != y->shared)
        return x->shared > y->shared ? -1 : 1;
    if (x->prefix != y->prefix)
        return x->prefix > y->prefix ? -1 : 1;
    return x->term->docs > y->term->docs ? -1 : x->term->docs < y->term->docs;
}

/*
 * One transposition of two adjacent bytes: "teh" and "the". The edit a short
 * word (3 letters) may have: any other single edit of one is another word.
 */
static bool is_transposition(const char *a, size_t alen, const char *b, size_t blen)
{
    size_t i = 0;

    if (alen != blen)
        return false;
    while (i < alen && a[i] == b[i])
        i++;
    return i + 1 < alen && a[i] == b[i + 1] && a[i + 1] == b[i] &&
           memcmp(a + i + 2, b + i + 2, alen - i - 2) == 0;
}

/* One word's widening in progress: the best alternatives so far. */
struct fuzzy_word {
    const char *word;
    size_t len, letters, keep;
    unsigned maxd;
    bool indexed; /* the word itself is in the vocabulary */
    struct fuzzy_candidate best[FUZZY_MAX_ALTS];
    size_t nbest;
};

/* Checks one term the vocabulary's index let through (vocab_candidates()). */
static void consider(void *ctx, const struct vocab_term *v)
{
    struct fuzzy_word *fw = ctx;
    const char *word = fw->word;
    size_t len = fw->len;
    unsigned d, maxd = fw->maxd;

    if (v->len == len && memcmp(v->text, word, len) == 0) {
        fw->indexed = true;
        return;
    }
    /* A near spelling first: epoll is one edit from epol before it contains it. */
    if (maxd > 0 && (d = search_distance(word, len, v->text, v->len, maxd)) <= maxd)
        ;
    else if (fw->letters >= 3 && v->len > len && memmem(v->text, v->len, word, len))
        d = maxd + 1; /* a containing word ranks after near spellings */
    else if (fw->letters == 3 && is_transposition(word, len, v->text, v->len))
        d = 1;
    else
        return;
    unsigned prefix = 0, shared = 0, have[256] = {0};
    while (prefix < len && prefix < v->len && v->text[prefix] == word[prefix])
        prefix++;
    for (size_t i = 0; i < v->len; i++)
        have[(unsigned char)v->text[i]]++;
    for (size_t i = 0; i < len; i++)
        if (have[(unsigned char)word[i]] > 0) {
            have[(unsigned char)word[i]]--;
            shared++;
        }
    struct fuzzy_candidate cand = {v, d, shared, prefix};
    if (fw->nbest < fw->keep)
        fw->best[fw->nbest++] = cand;
    else if (candidate_cmp(&cand, &fw->best[fw->keep - 1]) < 0)
        fw->best[fw->keep - 1] = cand;
    else
        return;
    qsort(fw->best, fw->nbest, sizeof(fw->best[0]), candidate_cmp);
}

/* Widens word[0..len) (folded), keeping the `keep` best. */
static void widen_word(struct vocab *v, const char *word, size_t len, size_t keep,
                       struct fuzzy_word *fw)
{
    memset(fw, 0, sizeof(*fw));
    fw->word = word;
    fw->len = len;
    fw->keep = keep;
    fw->letters = search_letters(word, len);
    fw->maxd = fw->letters >= 8 ? 2 : fw->letters >= 4 ? 1 : 0;
    if (fw->letters > 64)
        return;
    vocab_candidates(v, word, len, fw->maxd, fw->letters >= 3, consider, fw);
    /* The trigram index never offers a word under three letters, not even the word itself. */
    if (!fw->indexed && vocab_find(v, word, len))
        fw->indexed = true;
    /* A three-letter word may be one transposition away: there are two, looked up. */
    if (fw->letters == 3 && len == 3) {
        char swapped[3];
        for (size_t i = 0; i + 1 < len; i++) {
            memcpy(swapped, word, len);
            swapped[i] = word[i + 1];
            swapped[i + 1] = word[i];
            const struct vocab_term *t = vocab_find(v, swapped, len);
            if (t)
                consider(fw, t);
        }
    }
}

/* A byte the index's tokenizer (unicode61) keeps in a token: letters, digits, and beyond ASCII. */
static bool is_token_byte(unsigned char c)
{
    return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

struct part {
    const char *text;
    size_t len;
};

/* The word's tokens as the index splits it: epoll_wait() has epoll and wait. */
static size_t split_parts(const char *word, size_t len, struct part *parts, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < len;) {
        while (i < len && !is_token_byte((unsigned char)word[i]))
            i++;
        size_t start = i;
        while (i < len && is_token_byte((unsigned char)word[i]))
            i++;
        if (i > start) {
            if (n == max)
                return max + 1;
            parts[n++] = (struct part){word + start, i - start};
        }
    }
    return n;
}

static int set_alts(struct search_term *t, char **alts, size_t n)
{
    if (n == 0)
        return 0;
    if (!(t->alts = calloc(n, sizeof(char *))))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!alts[i])
            return -ENOMEM;
        t->alts[t->nalts++] = alts[i];
    }
    return 0;
}

/* An alternative phrase: one choice for each part, and how far it is in all. */
struct phrase {
    unsigned char pick[FUZZY_MAX_PARTS]; /* 0: the part itself, k: its (k-1)th alternative */
    unsigned distance;
    unsigned rank; /* the sum of the picks: lower is better at the same distance */
};

static int phrase_cmp(const void *a, const void *b)
{
    const struct phrase *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/*
 * A word of several parts: the phrases of the parts' alternatives (and of a
 * part itself, when it is indexed), closest first, the word as typed left
 * out (the query has it already).
 */
static int widen_parts(struct vocab *v, struct search_term *t, const struct part *parts,
                       size_t nparts)
{
    struct fuzzy_word fw[FUZZY_MAX_PARTS];
    struct phrase best[FUZZY_MAX_ALTS], cur = {0};
    size_t nopts[FUZZY_MAX_PARTS], nbest = 0, combos = 1;
    char *alts[FUZZY_MAX_ALTS];

    for (size_t i = 0; i < nparts; i++) {
        widen_word(v, parts[i].text, parts[i].len, FUZZY_PART_ALTS, &fw[i]);
        nopts[i] = 1 + fw[i].nbest;
        combos *= nopts[i];
    }
    /* Every combination, as a number in mixed radix (at most 9^4 of them). */
    for (size_t c = 0; c < combos; c++) {
        size_t rest = c;
        bool ok = c > 0;
        cur.distance = cur.rank = 0;
        for (size_t i = 0; i < nparts; i++) {
            cur.pick[i] = (unsigned char)(rest % nopts[i]);
            cur.rank += cur.pick[i];
            rest /= nopts[i];
            if (cur.pick[i] == 0)
                ok &= fw[i].indexed; /* a part as typed that no document has matches nothing */
            else
                cur.distance += fw[i].best[cur.pick[i] - 1].distance;
        }
        if (!ok)
            continue;
        if (nbest < FUZZY_MAX_ALTS)
            best[nbest++] = cur;
        else if (phrase_cmp(&cur, &best[FUZZY_MAX_ALTS - 1]) < 0)
            best[FUZZY_MAX_ALTS - 1] = cur;
        else
            continue;
        qsort(best, nbest, sizeof(best[0]), phrase_cmp);
    }
    for (size_t k = 0; k < nbest; k++) {
        size_t len = 0;
        for (size_t i = 0; i < nparts; i++)
            len += 1 + (best[k].pick[i] ? fw[i].best[best[k].pick[i] - 1].term->len : parts[i].len);
        char *s = malloc(len), *p = s;
        for (size_t i = 0; s && i < nparts; i++) {
            const char *text = parts[i].text;
            size_t n = parts[i].len;
            if (best[k].pick[i]) {
                text = fw[i].best[best[k].pick[i] - 1].term->text;
                n = fw[i].best[best[k].pick[i] - 1].term->len;
            }
            if (i > 0)
                *p++ = ' ';
            memcpy(p, text, n);
            p += n;
        }
        if (s)
            *p = '\0';
        alts[k] = s;
    }
    for (size_t i = 0; i < nparts; i++)
        t->unknown |= !fw[i].indexed;
    if (t->unknown && nbest > 3)
        nbest = 3;
    int r = set_alts(t, alts, nbest);
    for (size_t k = t->nalts; k < nbest; k++)
        free(alts[k]);
    return r;
}

int fuzzy_widen(struct vocab *v, struct search_term *t)
{
    struct part parts[FUZZY_MAX_PARTS];
    struct fuzzy_word fw;
    char word[256], *alts[FUZZY_MAX_ALTS];
    size_t len = search_fold(t->text, strlen(t->text), word, sizeof(word));
    size_t nparts = split_parts(word, len, parts, FUZZY_MAX_PARTS);
    int r;

    if (nparts == 0 || nparts > FUZZY_MAX_PARTS)
        return 0;
    if (nparts > 1)
        return widen_parts(v, t, parts, nparts);
    widen_word(v, parts[0].text, parts[0].len, FUZZY_MAX_ALTS, &fw);
    for (size_t i = 0; i < fw.nbest; i++)
        alts[i] = strndup(fw.best[i].term->text, fw.best[i].term->len);
    t->unknown = !fw.indexed;
    if (t->unknown && fw.nbest > 3)
        fw.nbest = 3;
    r = set_alts(t, alts, fw.nbest);
    for (size_t k = t->nalts; k < fw.nbest; k++)
        free(alts[k]);
    return r;
}
