/*
 * The vocabulary's trigram index (vocab.c) must never hide a term fuzzy
 * search would take: for random words and vocabularies made of their near
 * misspellings, every term within the edit distance, and every term that
 * contains the word, is among the candidates.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/search/query.h"
#include "daemon/search/vocab.h"

struct seen {
    const struct vocab *v;
    bool *hit;
};

static void mark(void *ctx, const struct vocab_term *t)
{
    struct seen *s = ctx;
    s->hit[t - vocab_term(s->v, 0)] = true;
}

/* A random edit of w (substitution, insertion, deletion or transposition) into out. */
static size_t edit(const char *w, size_t len, char *out, unsigned *rng)
{
    static const char letters[] = "abcdeilmnopstw_";
    size_t i = len ? (size_t)rand_r(rng) % len : 0;
    char c = letters[rand_r(rng) % (sizeof(letters) - 1)];

    memcpy(out, w, len);
    switch (rand_r(rng) % 4) {
    case 0:
        if (len)
            out[i] = c;
        return len;
    case 1:
        memmove(out + i + 1, out + i, len - i);
        out[i] = c;
        return len + 1;
    case 2:
        if (len > 1)
            memmove(out + i, out + i + 1, len - i - 1);
        return len > 1 ? len - 1 : len;
    default:
        if (i + 1 < len) {
            out[i] = w[i + 1];
            out[i + 1] = w[i];
        }
        return len;
    }
}

static void test_no_near_term_is_missed(void **state)
{
    unsigned rng = 12345;

    for (int round = 0; round < 300; round++) {
        char word[32], terms[64][40];
        size_t wlen = 3 + (size_t)rand_r(&rng) % 10, tlen[64], nterms = 64;
        struct vocab *v = vocab_new();
        for (size_t i = 0; i < wlen; i++)
            word[i] = "abcdeilmnopstw"[rand_r(&rng) % 14];
        for (size_t t = 0; t < nterms; t++) {
            char tmp[40];
            size_t n = edit(word, wlen, tmp, &rng);
            /* one or two edits, a containing word, or something unrelated */
            if (t % 4 == 1)
                n = edit(tmp, n, terms[t], &rng);
            else
                memcpy(terms[t], tmp, n);
            if (t % 8 == 2) {
                memcpy(terms[t], "xx", 2);
                memcpy(terms[t] + 2, word, wlen);
                n = wlen + 2 + (t % 16 == 2);
                terms[t][n - 1] = t % 16 == 2 ? 'q' : terms[t][n - 1];
            }
            if (t % 8 == 5)
                for (size_t k = 0; k < n; k++)
                    terms[t][k] = "qrstuvwxyz"[rand_r(&rng) % 10];
            tlen[t] = n;
            assert_int_equal(vocab_add(v, terms[t], n, 1), 0);
        }
        assert_int_equal(vocab_seal(v), 0);
        for (unsigned maxd = 0; maxd <= 2; maxd++) {
            bool hit[64] = {0};
            struct seen s = {v, hit};
            vocab_candidates(v, word, wlen, maxd, true, mark, &s);
            for (size_t t = 0; t < nterms; t++) {
                bool near = maxd && search_distance(word, wlen, terms[t], tlen[t], maxd) <= maxd;
                bool contains = tlen[t] > wlen && memmem(terms[t], tlen[t], word, wlen);
                if (near || contains)
                    assert_true(hit[t]);
            }
        }
        vocab_free(v);
    }
}

static void test_few_candidates_in_a_big_vocabulary(void **state)
{
    struct vocab *v = vocab_new();
    char term[16];
    size_t n = 0;

    for (unsigned i = 0; i < 20000; i++) {
        int len = snprintf(term, sizeof(term), "w%uz%u", i * 7919u % 100000u, i);
        assert_int_equal(vocab_add(v, term, (size_t)len, 1), 0);
    }
    assert_int_equal(vocab_add(v, "epollwait", 9, 3), 0);
    assert_int_equal(vocab_seal(v), 0);
    bool hit[20001] = {0};
    struct seen s = {v, hit};
    vocab_candidates(v, "epolwiat", 8, 2, true, mark, &s);
    for (size_t i = 0; i < vocab_count(v); i++)
        n += hit[i];
    assert_true(hit[20000]);
    assert_true(n < 100); /* the index did its work: not every term */
    vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_near_term_is_missed),
        cmocka_unit_test(test_few_candidates_in_a_big_vocabulary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
