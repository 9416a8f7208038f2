/* Fuzzy search's vocabulary and its trigram index (vocab.h). */
#include "daemon/search/vocab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Buckets of the trigram index; trigrams that share one only add candidates. */
#define VOCAB_BUCKETS (1u << 18)
/* Marks padding a word at its start and end. */
#define PAD_START 0x01u
#define PAD_END 0x02u
/* Words longer than this (bytes) get every term: their counts would not fit. */
#define VOCAB_MAX_WORD 250

struct vocab {
    struct vocab_term *terms;
    size_t n, cap;
    uint64_t *offs; /* while loading: where each term's text is in arena */
    char *arena;
    size_t arena_len, arena_cap;
    /* The index: term ids of bucket b are ids[start[b] .. start[b + 1]). */
    uint32_t *start, *ids;
    /* Scratch for vocab_candidates: counts per term, and the terms counted. */
    uint16_t *near, *inner;
    uint32_t *touched;
};

struct vocab *vocab_new(void)
{
    return calloc(1, sizeof(struct vocab));
}

struct vocab *vocab_free(struct vocab *v)
{
    if (!v)
        return NULL;
    free(v->terms);
    free(v->offs);
    free(v->arena);
    free(v->start);
    free(v->ids);
    free(v->near);
    free(v->inner);
    free(v->touched);
    free(v);
    return NULL;
}

int vocab_add(struct vocab *v, const char *text, size_t len, int64_t docs)
{
    if (len > UINT32_MAX || v->n >= UINT32_MAX - 1)
        return -EOVERFLOW;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4096;
        struct vocab_term *terms = realloc(v->terms, cap * sizeof(*terms));
        if (terms)
            v->terms = terms;
        uint64_t *offs = realloc(v->offs, cap * sizeof(*offs));
        if (offs)
            v->offs = offs;
        if (!terms || !offs)
            return -ENOMEM;
        v->cap = cap;
    }
    if (v->arena_len + len > v->arena_cap) {
        size_t cap = v->arena_cap ? v->arena_cap * 2 : 64 * 1024;
        while (cap < v->arena_len + len)
            cap *= 2;
        char *arena = realloc(v->arena, cap);
        if (!arena)
            return -ENOMEM;
        v->arena = arena;
        v->arena_cap = cap;
    }
    memcpy(v->arena + v->arena_len, text, len);
    v->offs[v->n] = v->arena_len;
    v->terms[v->n] = (struct vocab_term){NULL, (uint32_t)len, docs};
    v->arena_len += len;
    v->n++;
    return 0;
}

static uint32_t bucket_of(uint32_t key)
{
    return (key * 0x9e3779b1u) >> (32 - 18);
}

/* The byte at padded position i of text[0..len) (two marks each side). */
static uint8_t padded_at(const char *text, size_t len, size_t i)
{
    if (i < 2)
        return PAD_START;
    if (i - 2 < len)
        return (uint8_t)text[i - 2];
    return PAD_END;
}

/*
 * The distinct trigram keys of text, padded (len + 2 of them) or only the
 * inner ones (len - 2); at most `max` are written. Returns how many.
 */
static size_t trigrams(const char *text, size_t len, bool padded, uint32_t *keys, size_t max)
{
    size_t n = 0, from = padded ? 0 : 2, to = padded ? len + 2 : (len >= 3 ? len : 2);

    for (size_t i = from; i < to && n < max; i++) {
        uint32_t k = (uint32_t)padded_at(text, len, i) << 16 |
                     (uint32_t)padded_at(text, len, i + 1) << 8 | padded_at(text, len, i + 2);
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = keys[j] == k;
        if (!seen)
            keys[n++] = k;
    }
    return n;
}

/* Like trigrams(), but into buckets, each bucket once. */
static size_t term_buckets(const char *text, size_t len, uint32_t *out, size_t max)
{
    uint32_t keys[VOCAB_MAX_WORD + 2];
    size_t nk =
        trigrams(text, len, true, keys, max < VOCAB_MAX_WORD + 2 ? max : VOCAB_MAX_WORD + 2);
    size_t n = 0;

    for (size_t i = 0; i < nk; i++) {
        uint32_t b = bucket_of(keys[i]);
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++)
            seen = out[j] == b;
        if (!seen)
            out[n++] = b;
    }
    return n;
}

int vocab_seal(struct vocab *v)
{
    uint32_t buckets[VOCAB_MAX_WORD + 2];
    size_t total = 0;

    for (size_t i = 0; i < v->n; i++)
        v->terms[i].text = v->arena + v->offs[i];
    free(v->offs);
    v->offs = NULL;
    v->start = calloc(VOCAB_BUCKETS + 1, sizeof(*v->start));
    v->near = calloc(v->n ? v->n : 1, sizeof(*v->near));
    v->inner = calloc(v->n ? v->n : 1, sizeof(*v->inner));
    v->touched = malloc((v->n ? v->n : 1) * sizeof(*v->touched));
    if (!v->start || !v->near || !v->inner || !v->touched)
        return -ENOMEM;
    /* Two passes: how many ids each bucket holds, then the ids in place. */
    for (size_t i = 0; i < v->n; i++) {
        size_t nb = term_buckets(v->terms[i].text, v->terms[i].len, buckets, VOCAB_MAX_WORD + 2);
        for (size_t k = 0; k < nb; k++)
            v->start[buckets[k] + 1]++;
        total += nb;
    }
    if (total > UINT32_MAX)
        return -EOVERFLOW;
    for (size_t b = 0; b < VOCAB_BUCKETS; b++)
        v->start[b + 1] += v->start[b];
    if (!(v->ids = malloc((total ? total : 1) * sizeof(*v->ids))))
        return -ENOMEM;
    uint32_t *fill = malloc(VOCAB_BUCKETS * sizeof(*fill));
    if (!fill)
        return -ENOMEM;
    memcpy(fill, v->start, VOCAB_BUCKETS * sizeof(*fill));
    for (size_t i = 0; i < v->n; i++) {
        size_t nb = term_buckets(v->terms[i].text, v->terms[i].len, buckets, VOCAB_MAX_WORD + 2);
        for (size_t k = 0; k < nb; k++)
            v->ids[fill[buckets[k]]++] = (uint32_t)i;
    }
    free(fill);
    return 0;
}

size_t vocab_count(const struct vocab *v)
{
    return v->n;
}

const struct vocab_term *vocab_term(const struct vocab *v, size_t i)
{
    return &v->terms[i];
}

const struct vocab_term *vocab_find(const struct vocab *v, const char *text, size_t len)
{
    uint32_t keys[VOCAB_MAX_WORD + 2];
    size_t nkeys;
    uint32_t from = 0, to = 0;

    if (len > VOCAB_MAX_WORD || !v->ids)
        return NULL;
    /* The term has every one of its trigrams: its rarest bucket holds it. */
    nkeys = trigrams(text, len, true, keys, VOCAB_MAX_WORD + 2);
    for (size_t k = 0; k < nkeys; k++) {
        uint32_t b = bucket_of(keys[k]);
        if (k == 0 || v->start[b + 1] - v->start[b] < to - from) {
            from = v->start[b];
            to = v->start[b + 1];
        }
    }
    for (uint32_t p = from; p < to; p++) {
        const struct vocab_term *t = &v->terms[v->ids[p]];
        if (t->len == len && memcmp(t->text, text, len) == 0)
            return t;
    }
    return NULL;
}

static bool is_ascii(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)s[i] >= 0x80)
            return false;
    return true;
}

void vocab_candidates(struct vocab *v, const char *word, size_t len, unsigned maxd, bool contained,
                      vocab_candidate_fn *fn, void *ctx)
{
    uint32_t keys[VOCAB_MAX_WORD + 2], inner[VOCAB_MAX_WORD];
    size_t nkeys, ninner = 0, ntouched = 0;
    long need_near;

    if (len > VOCAB_MAX_WORD || !is_ascii(word, len) || !v->ids) {
        for (size_t i = 0; i < v->n; i++)
            fn(ctx, &v->terms[i]);
        return;
    }
    nkeys = trigrams(word, len, true, keys, VOCAB_MAX_WORD + 2);
    need_near = maxd ? (long)nkeys - 4 * (long)maxd : -1;
    if (contained && len >= 3)
        ninner = trigrams(word, len, false, inner, VOCAB_MAX_WORD);
    /* Too short for the count to exclude a term: every term may be near. */
    if (maxd && need_near <= 0) {
        for (size_t i = 0; i < v->n; i++)
            fn(ctx, &v->terms[i]);
        return;
    }
    for (size_t k = 0; k < nkeys; k++) {
        uint32_t b = bucket_of(keys[k]);
        bool is_inner = false;
        for (size_t j = 0; j < ninner && !is_inner; j++)
            is_inner = inner[j] == keys[k];
        for (uint32_t p = v->start[b]; p < v->start[b + 1]; p++) {
            uint32_t id = v->ids[p];
            if (!v->near[id] && !v->inner[id])
                v->touched[ntouched++] = id;
            v->near[id]++;
            v->inner[id] += is_inner;
        }
    }
    for (size_t t = 0; t < ntouched; t++) {
        uint32_t id = v->touched[t];
        if ((need_near > 0 && v->near[id] >= need_near) || (ninner && v->inner[id] >= ninner))
            fn(ctx, &v->terms[id]);
        v->near[id] = v->inner[id] = 0;
    }
}
