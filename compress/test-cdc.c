/*
 * Unit tests for content-defined chunking (compress/cdc.h): cuts are
 * deterministic and fixed by the format (golden cut points), independent of
 * how the input is split into pieces, within [min, max] except the last,
 * average about `avg` on random data, local to an edit, and cdc_init()
 * refuses parameters outside its contract.
 */
#include "compress/cdc.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define KiB 1024u
#define MiB (1024u * 1024u)

/* ---- data ---- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static uint8_t *random_bytes(size_t len, uint64_t seed)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    rng_state = seed;
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(rng_next() >> 24);
    return p;
}

/* Text-like, low-entropy data. */
static uint8_t *text_bytes(size_t len, uint64_t seed)
{
    static const char *const words[] = {"cairn ", "stores ", "chunks ", "by ",          "content; ",
                                        "the ",   "daemon ", "keeps ",  "manifests.\n", "zstd "};
    uint8_t *p = malloc(len ? len : 1);
    size_t n = 0;
    assert_non_null(p);
    rng_state = seed;
    while (n < len) {
        const char *w = words[rng_next() % (sizeof(words) / sizeof(words[0]))];
        for (; *w && n < len; w++)
            p[n++] = (uint8_t)*w;
    }
    return p;
}

/* ---- cutting ---- */

struct cuts {
    size_t *ends; /* chunk end offsets, ascending; the last is the input length */
    size_t n, cap;
};

static void cuts_push(struct cuts *c, size_t end)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->ends = realloc(c->ends, c->cap * sizeof(*c->ends));
        assert_non_null(c->ends);
    }
    c->ends[c->n++] = end;
}

static void cuts_free(struct cuts *c)
{
    free(c->ends);
    memset(c, 0, sizeof(*c));
}

/* The whole input at once, `final` throughout. */
static struct cuts cut_whole(const struct cdc *c, const uint8_t *data, size_t len)
{
    struct cuts out = {0};
    size_t off = 0;

    while (off < len) {
        size_t n = cdc_next(c, data + off, len - off, true);
        if (n == 0 || n > len - off)
            fail_msg("cdc_next(final) returned %zu with %zu bytes left at offset %zu", n, len - off,
                     off);
        off += n;
        cuts_push(&out, off);
    }
    return out;
}

/*
 * The input arrives in pieces of random sizes (from `seed`, at most
 * `max_piece` bytes): cdc_next() is always called on the unconsumed bytes,
 * and a 0 means append the next piece. `final` only once everything arrived.
 */
static struct cuts cut_streamed(const struct cdc *c, const uint8_t *data, size_t len, uint64_t seed,
                                size_t max_piece)
{
    struct cuts out = {0};
    size_t off = 0, avail = 0;
    uint64_t saved = rng_state;

    rng_state = seed;
    while (off < len) {
        bool final = avail == len;
        size_t n = avail > off ? cdc_next(c, data + off, avail - off, final) : 0;
        if (n > avail - off)
            fail_msg("cdc_next returned %zu for %zu bytes", n, avail - off);
        if (n == 0) {
            if (final)
                fail_msg("cdc_next(final) returned 0 with %zu bytes left", len - off);
            if (avail - off >= c->max)
                fail_msg("cdc_next asked for more data holding %zu >= max %zu bytes", avail - off,
                         c->max);
            /* mostly small pieces, sometimes large ones */
            uint64_t r = rng_next();
            size_t limit = (r & 3) == 0 ? max_piece : (r & 3) == 1 ? 97 : max_piece / 16 + 1;
            size_t piece = 1 + (size_t)((r >> 8) % limit);
            avail = avail + piece > len ? len : avail + piece;
            continue;
        }
        off += n;
        cuts_push(&out, off);
    }
    rng_state = saved;
    return out;
}

/* Like the daemon: fixed segments; the bytes after the last cut carry over. */
static struct cuts cut_segments(const struct cdc *c, const uint8_t *data, size_t len,
                                size_t segment)
{
    struct cuts out = {0};
    size_t start = 0, upto = 0;

    while (upto < len) {
        upto = upto + segment > len ? len : upto + segment;
        while (start < upto) {
            size_t n = cdc_next(c, data + start, upto - start, upto == len);
            if (n == 0)
                break;
            start += n;
            cuts_push(&out, start);
        }
    }
    if (start != len)
        fail_msg("segments of %zu: stopped at %zu of %zu", segment, start, len);
    return out;
}

static void assert_cuts_equal(const struct cuts *a, const struct cuts *b, const char *what)
{
    size_t n = a->n < b->n ? a->n : b->n;
    for (size_t i = 0; i < n; i++) {
        if (a->ends[i] != b->ends[i])
            fail_msg("%s: cut %zu differs: %zu vs %zu", what, i, a->ends[i], b->ends[i]);
    }
    if (a->n != b->n)
        fail_msg("%s: %zu cuts vs %zu", what, a->n, b->n);
}

static void assert_bounds(const struct cdc *c, const struct cuts *k, size_t len, const char *what)
{
    size_t prev = 0;
    assert_true(k->n > 0 || len == 0);
    for (size_t i = 0; i < k->n; i++) {
        size_t sz = k->ends[i] - prev;
        bool last = i + 1 == k->n;
        if (sz == 0 || sz > c->max || (!last && sz < c->min))
            fail_msg("%s: chunk %zu of %zu has %zu bytes (min %zu, max %zu)", what, i, k->n, sz,
                     c->min, c->max);
        prev = k->ends[i];
    }
    if (len && k->ends[k->n - 1] != len)
        fail_msg("%s: chunks cover %zu of %zu bytes", what, k->ends[k->n - 1], len);
}

static struct cdc make_cdc(size_t min, size_t avg, size_t max)
{
    struct cdc c;
    assert_int_equal(cdc_init(&c, min, avg, max), 0);
    return c;
}

/* ---- tests ---- */

/*
 * The cut points are part of the storage format (they decide what
 * deduplicates across versions). These values come from an independent
 * Python implementation of the documented algorithm (FastCDC, gear table
 * from splitmix64 seeded "cairncdc", normalized level 2, spread masks).
 */
static void test_golden_cut_points(void **state)
{
    static const size_t want_default[] = {30965,  110496, 180335, 248685, 324117,
                                          428157, 501807, 605044, 623769, 718670,
                                          778235, 830984, 917165, 988560, 1048576};
    static const size_t want_small_first[] = {285, 563, 833, 1218, 1610, 1876, 2290, 2554};
    (void)state;
    struct cdc c = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    uint8_t *d = random_bytes(MiB, 0x1234567);
    struct cuts k = cut_whole(&c, d, MiB);
    size_t nwant = sizeof(want_default) / sizeof(want_default[0]);
    struct cuts want = {(size_t *)want_default, nwant, nwant};
    assert_cuts_equal(&k, &want, "default parameters");
    cuts_free(&k);
    free(d);

    c = make_cdc(64, 256, 1024);
    d = random_bytes(16 * KiB, 0x89abcdef);
    k = cut_whole(&c, d, 16 * KiB);
    assert_int_equal(k.n, 57);
    for (size_t i = 0; i < sizeof(want_small_first) / sizeof(want_small_first[0]); i++)
        assert_int_equal(k.ends[i], want_small_first[i]);
    assert_int_equal(k.ends[k.n - 1], 16 * KiB);
    cuts_free(&k);
    free(d);
}

static void test_deterministic(void **state)
{
    (void)state;
    size_t len = 8 * MiB;
    uint8_t *d = random_bytes(len, 1);
    uint8_t *copy = malloc(len + 7);
    assert_non_null(copy);
    memcpy(copy + 7, d, len); /* other address, other alignment */

    struct cdc c1 = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    struct cuts a = cut_whole(&c1, d, len);
    struct cdc c2 = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    struct cuts b = cut_whole(&c2, copy + 7, len);
    struct cuts again = cut_whole(&c1, d, len);
    assert_true(a.n > 1);
    assert_cuts_equal(&a, &b, "second chunker, copied data");
    assert_cuts_equal(&a, &again, "same chunker twice");
    /* the same bytes at the start of a different input cut the same way */
    assert_true(a.n > 4);
    size_t prefix = a.ends[3];
    memset(copy, 0xAA, len + 7);
    memcpy(copy, d, prefix);
    struct cuts p = cut_whole(&c1, copy, len);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(p.ends[i], a.ends[i]);
    cuts_free(&a);
    cuts_free(&b);
    cuts_free(&again);
    cuts_free(&p);
    free(copy);
    free(d);
}

static void check_split_independence(const struct cdc *c, const uint8_t *d, size_t len,
                                     const char *what)
{
    char msg[128];
    struct cuts whole = cut_whole(c, d, len);
    assert_bounds(c, &whole, len, what);
    for (uint64_t seed = 1; seed <= 4; seed++) {
        size_t max_piece = seed == 1 ? 3 * c->max : seed == 2 ? c->min : seed == 3 ? 1 * MiB : 4096;
        struct cuts s = cut_streamed(c, d, len, seed * 7919, max_piece);
        snprintf(msg, sizeof(msg), "%s, pieces up to %zu (seed %llu)", what, max_piece,
                 (unsigned long long)seed);
        assert_cuts_equal(&whole, &s, msg);
        cuts_free(&s);
    }
    for (size_t seg = 1 * MiB; seg >= 64 * KiB; seg /= 4) {
        if (seg < c->max)
            break;
        struct cuts s = cut_segments(c, d, len, seg);
        snprintf(msg, sizeof(msg), "%s, segments of %zu", what, seg);
        assert_cuts_equal(&whole, &s, msg);
        cuts_free(&s);
    }
    cuts_free(&whole);
}

static void test_split_independent(void **state)
{
    (void)state;
    struct cdc def = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    struct cdc small = make_cdc(64, 256, 1024);
    struct cdc odd = make_cdc(1000, 4096, 5000); /* min and max not powers of two */

    uint8_t *d = random_bytes(3 * MiB + 12345, 2);
    check_split_independence(&def, d, 3 * MiB + 12345, "random, default");
    check_split_independence(&small, d, 256 * KiB + 3, "random, 64/256/1024");
    check_split_independence(&odd, d, 512 * KiB + 1, "random, 1000/4096/5000");
    free(d);

    d = text_bytes(2 * MiB, 3);
    check_split_independence(&def, d, 2 * MiB, "text, default");
    check_split_independence(&small, d, 128 * KiB, "text, 64/256/1024");
    free(d);

    d = calloc(1, MiB + 1);
    assert_non_null(d);
    check_split_independence(&def, d, MiB + 1, "zeros, default");
    check_split_independence(&small, d, 64 * KiB, "zeros, 64/256/1024");
    free(d);
}

static void test_chunk_size_bounds(void **state)
{
    (void)state;
    struct cdc c = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    size_t len = 16 * MiB + 5;
    uint8_t *d = random_bytes(len, 4);
    struct cuts k = cut_whole(&c, d, len);
    assert_bounds(&c, &k, len, "random");
    cuts_free(&k);
    free(d);

    /* no cut points at all: every chunk is max, the last the rest */
    len = 3 * CDC_DEFAULT_MAX + 100;
    d = calloc(1, len);
    assert_non_null(d);
    k = cut_whole(&c, d, len);
    assert_bounds(&c, &k, len, "zeros");
    assert_int_equal(k.n, 4);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(k.ends[i], (i + 1) * CDC_DEFAULT_MAX);
    cuts_free(&k);
    free(d);

    d = text_bytes(4 * MiB, 5);
    k = cut_whole(&c, d, 4 * MiB);
    assert_bounds(&c, &k, 4 * MiB, "text");
    cuts_free(&k);
    free(d);

    struct cdc s = make_cdc(64, 256, 1024);
    d = random_bytes(MiB, 6);
    k = cut_whole(&s, d, MiB);
    assert_bounds(&s, &k, MiB, "random, 64/256/1024");
    cuts_free(&k);
    free(d);
}

static void check_average(const struct cdc *c, size_t len, uint64_t seed)
{
    uint8_t *d = random_bytes(len, seed);
    struct cuts k = cut_whole(c, d, len);
    double mean = (double)len / (double)k.n;
    size_t at_max = 0, prev = 0;
    for (size_t i = 0; i < k.n; i++) {
        at_max += k.ends[i] - prev == c->max;
        prev = k.ends[i];
    }
    print_message("cdc %zu/%zu/%zu: %zu chunks, mean %.0f bytes, %zu at max\n", c->min, c->avg,
                  c->max, k.n, mean, at_max);
    if (mean < 0.5 * (double)c->avg || mean > 2.0 * (double)c->avg)
        fail_msg("mean chunk %.0f bytes, not within 0.5x-2x of avg %zu", mean, c->avg);
    /* the cuts come from content, not from the max limit */
    if (at_max * 10 > k.n)
        fail_msg("%zu of %zu chunks hit max", at_max, k.n);
    cuts_free(&k);
    free(d);
}

static void test_average_chunk_size(void **state)
{
    (void)state;
    struct cdc c = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    check_average(&c, 32 * MiB, 7);
    struct cdc s = make_cdc(64, 256, 1024);
    check_average(&s, 4 * MiB, 8);
    struct cdc l = make_cdc(256 * KiB, MiB, 4 * MiB);
    check_average(&l, 64 * MiB, 9);
}

/* A cheap content hash for matching chunks between two inputs. */
static uint64_t fnv1a(const uint8_t *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ len;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * Cuts `a` and `b` (b is a with an edit at `pos`: `removed` bytes replaced by
 * `inserted` bytes) and checks that the chunks of b not found in a are few,
 * all near the edit, and that chunks ending before the edit are identical.
 */
static void check_edit(const struct cdc *c, const uint8_t *a, size_t alen, size_t pos,
                       size_t removed, size_t inserted, uint64_t seed)
{
    size_t blen = alen - removed + inserted;
    uint8_t *b = malloc(blen);
    uint8_t *ins = random_bytes(inserted, seed);
    assert_non_null(b);
    memcpy(b, a, pos);
    memcpy(b + pos, ins, inserted);
    memcpy(b + pos + inserted, a + pos + removed, alen - pos - removed);
    free(ins);

    struct cuts ka = cut_whole(c, a, alen), kb = cut_whole(c, b, blen);
    uint64_t *ha = malloc(ka.n * sizeof(*ha));
    assert_non_null(ha);
    for (size_t i = 0, prev = 0; i < ka.n; prev = ka.ends[i], i++)
        ha[i] = fnv1a(a + prev, ka.ends[i] - prev);
    qsort(ha, ka.n, sizeof(*ha), u64_cmp);

    size_t shared = 0, unshared = 0, first_new = SIZE_MAX, last_new_end = 0;
    for (size_t i = 0, prev = 0; i < kb.n; prev = kb.ends[i], i++) {
        uint64_t h = fnv1a(b + prev, kb.ends[i] - prev);
        if (bsearch(&h, ha, ka.n, sizeof(*ha), u64_cmp)) {
            shared++;
        } else {
            unshared++;
            if (first_new == SIZE_MAX)
                first_new = prev;
            last_new_end = kb.ends[i];
        }
    }
    /* chunks that end before the edit are untouched, at the same offsets */
    for (size_t i = 0; i < ka.n && ka.ends[i] <= pos; i++)
        assert_int_equal(kb.ends[i], ka.ends[i]);
    print_message("edit at %zu (-%zu +%zu): %zu of %zu chunks shared; new bytes %zu..%zu\n", pos,
                  removed, inserted, shared, kb.n, first_new, last_new_end);
    if (shared * 10 <= kb.n * 9)
        fail_msg("only %zu of %zu chunks shared after an edit of %zu bytes", shared, kb.n,
                 removed + inserted);
    if (unshared > 0) {
        /* the changed chunks lie around the edit: from the chunk holding it to a few after */
        if (first_new + c->max < pos)
            fail_msg("a changed chunk starts at %zu, long before the edit at %zu", first_new, pos);
        if (last_new_end > pos + inserted + 4 * c->max)
            fail_msg("a changed chunk ends at %zu, long after the edit at %zu+%zu", last_new_end,
                     pos, inserted);
    }
    free(ha);
    cuts_free(&ka);
    cuts_free(&kb);
    free(b);
}

static void test_edit_locality(void **state)
{
    (void)state;
    struct cdc c = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    size_t len = 16 * MiB;
    uint8_t *a = random_bytes(len, 10);

    check_edit(&c, a, len, len / 2, 0, 1, 11);         /* one byte inserted */
    check_edit(&c, a, len, len / 2 + 333, 0, 100, 12); /* 100 bytes inserted */
    check_edit(&c, a, len, len / 3, 0, MiB, 13);       /* 1 MiB inserted */
    check_edit(&c, a, len, len / 4 + 17, 5000, 0, 14); /* 5000 bytes removed */
    check_edit(&c, a, len, 3 * len / 4, 1, 1, 15);     /* one byte changed */
    check_edit(&c, a, len, 100, 0, 50, 16);            /* near the start */
    free(a);

    a = text_bytes(8 * MiB, 17);
    check_edit(&c, a, 8 * MiB, 4 * MiB + 1, 0, 64, 18);
    free(a);
}

static void test_init_rejects_bad_params(void **state)
{
    (void)state;
    static const size_t bad[][3] = {
        {63, 256, 1024},                              /* min below 64 */
        {0, 256, 1024},                               /* min 0 */
        {256, 256, 1024},                             /* min == avg */
        {512, 256, 1024},                             /* min > avg */
        {64, 1024, 1024},                             /* avg == max */
        {64, 1024, 512},                              /* max < avg */
        {64, 1000, 4096},                             /* avg not a power of two */
        {64, 3 * 1024, 8192},                         /* avg not a power of two */
        {64, 65537, 262144},                          /* avg not a power of two */
        {64, 128, 1024},                              /* avg below 256 */
        {1024, 32u * 1024 * 1024, 64u * 1024 * 1024}, /* avg over 16 MiB */
        {64, 0, 1024},                                /* avg 0 */
        {64, 256, 0},                                 /* max 0 */
    };
    static const size_t good[][3] = {
        {64, 256, 257},
        {255, 256, 1024},
        {CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX},
        {1024, 16u * 1024 * 1024, 32u * 1024 * 1024}, /* avg at its upper bound */
        {1000, 4096, 5000},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct cdc c;
        int r = cdc_init(&c, bad[i][0], bad[i][1], bad[i][2]);
        if (r != -EINVAL)
            fail_msg("cdc_init(%zu, %zu, %zu) returned %d, expected -EINVAL", bad[i][0], bad[i][1],
                     bad[i][2], r);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct cdc c;
        int r = cdc_init(&c, good[i][0], good[i][1], good[i][2]);
        if (r != 0)
            fail_msg("cdc_init(%zu, %zu, %zu) returned %d, expected 0", good[i][0], good[i][1],
                     good[i][2], r);
        assert_int_equal(c.min, good[i][0]);
        assert_int_equal(c.avg, good[i][1]);
        assert_int_equal(c.max, good[i][2]);
    }
}

static void test_small_inputs(void **state)
{
    (void)state;
    struct cdc c = make_cdc(CDC_DEFAULT_MIN, CDC_DEFAULT_AVG, CDC_DEFAULT_MAX);
    uint8_t *d = random_bytes(CDC_DEFAULT_MAX + 1, 19);
    static const size_t sizes[] = {1, 2, 63, 64, 4096, CDC_DEFAULT_MIN - 1, CDC_DEFAULT_MIN};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        /* final: the whole input is one chunk */
        if (cdc_next(&c, d, n, true) != n)
            fail_msg("cdc_next(%zu bytes, final) returned %zu", n, cdc_next(&c, d, n, true));
        /* not final: too little to decide */
        assert_int_equal(cdc_next(&c, d, n, false), 0);
        /* zeros too */
        uint8_t *z = calloc(1, n);
        assert_non_null(z);
        assert_int_equal(cdc_next(&c, z, n, true), n);
        free(z);
    }
    /* just over min, final: one or two chunks, covering the input */
    for (size_t n = CDC_DEFAULT_MIN + 1; n <= CDC_DEFAULT_MIN + 3; n++) {
        size_t k = cdc_next(&c, d, n, true);
        assert_true(k > CDC_DEFAULT_MIN && k <= n);
    }
    /* max or more bytes, not final: never asks for more, never returns more than max */
    for (size_t n = CDC_DEFAULT_MAX; n <= CDC_DEFAULT_MAX + 1; n++) {
        size_t k = cdc_next(&c, d, n, false);
        assert_true(k > CDC_DEFAULT_MIN && k <= CDC_DEFAULT_MAX);
        assert_int_equal(cdc_next(&c, d, n, true), k);
    }
    /* a whole small document cuts into exactly one chunk */
    struct cuts k = cut_whole(&c, d, CDC_DEFAULT_MIN);
    assert_int_equal(k.n, 1);
    assert_int_equal(k.ends[0], CDC_DEFAULT_MIN);
    cuts_free(&k);

    struct cdc s = make_cdc(64, 256, 1024);
    for (size_t n = 1; n <= 64; n++) {
        assert_int_equal(cdc_next(&s, d, n, true), n);
        assert_int_equal(cdc_next(&s, d, n, false), 0);
    }
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_cut_points),       cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_split_independent),       cmocka_unit_test(test_chunk_size_bounds),
        cmocka_unit_test(test_average_chunk_size),      cmocka_unit_test(test_edit_locality),
        cmocka_unit_test(test_init_rejects_bad_params), cmocka_unit_test(test_small_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
