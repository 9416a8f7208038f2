/*
 * Unit tests of the decoded-record cache (daemon/store/cache.c): least recently
 * used entries go first when the bytes run out, references keep evicted
 * and forgotten entries readable, the first copy of an id wins, a disabled
 * cache and entries too large for it still hand out private copies, the
 * counters, and a smoke test of threads inserting and looking up at once.
 * Run under ASan, a use after free or a leak here is a failure too.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/store/cache.h"

static void make_id(uint8_t id[PROTO_HASH_LEN], uint32_t n)
{
    for (size_t i = 0; i < PROTO_HASH_LEN; i++)
        id[i] = (uint8_t)(n * 131 + i * 7);
    memcpy(id, &n, sizeof(n)); /* distinct ids, spread over the buckets */
}

static void fill(uint8_t *buf, size_t len, uint32_t n)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(n + i * 13);
}

/* What one entry of `len` bytes costs against the budget, found by inserting one. */
static size_t entry_cost(size_t len)
{
    struct cache *c;
    struct cache_stats st;
    uint8_t id[PROTO_HASH_LEN], buf[64] = {0};

    assert_true(len <= sizeof(buf));
    assert_int_equal(cache_new(&c, 1 << 20), 0);
    make_id(id, 0);
    assert_null(cache_insert(c, id, buf, len, false));
    cache_get_stats(c, &st);
    assert_int_equal(st.entries, 1);
    assert_true(st.bytes >= len);
    c = cache_free(c);
    assert_null(c);
    return (size_t)st.bytes;
}

static void expect_bytes(const struct cache_buf *b, const uint8_t id[PROTO_HASH_LEN], size_t len,
                         uint32_t n)
{
    uint8_t want[64];

    assert_non_null(b);
    assert_memory_equal(b->hash, id, PROTO_HASH_LEN);
    assert_int_equal(b->len, len);
    fill(want, len, n);
    assert_memory_equal(b->data, want, len);
}

static bool present(struct cache *c, uint32_t n)
{
    uint8_t id[PROTO_HASH_LEN];
    const struct cache_buf *b;

    make_id(id, n);
    b = cache_peek(c, id);
    cache_release(c, b);
    return b != NULL;
}

static void insert(struct cache *c, uint32_t n, size_t len)
{
    uint8_t id[PROTO_HASH_LEN], buf[64];

    make_id(id, n);
    fill(buf, len, n);
    assert_null(cache_insert(c, id, buf, len, false));
}

static void test_lru_by_bytes(void **state)
{
    size_t cost = entry_cost(40);
    struct cache *c;
    struct cache_stats st;

    /* Room for exactly three entries of 40 bytes. */
    assert_int_equal(cache_new(&c, 3 * cost), 0);
    insert(c, 1, 40);
    insert(c, 2, 40);
    insert(c, 3, 40);
    cache_get_stats(c, &st);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.bytes, 3 * cost);
    assert_int_equal(st.evictions, 0);

    /* 1 is used, so 2 is the least recently used when 4 comes. */
    assert_true(present(c, 1));
    insert(c, 4, 40);
    assert_true(present(c, 1));
    assert_false(present(c, 2));
    assert_true(present(c, 3));
    assert_true(present(c, 4));

    /* A smaller entry fits where a bigger one went; a bigger one pushes out two. */
    cache_get_stats(c, &st);
    assert_int_equal(st.evictions, 1);
    assert_true(st.bytes <= 3 * cost);
    insert(c, 5, 64); /* 24 bytes more than a 40-byte entry: 1 and 3 go (LRU: 1, 3, 4) */
    assert_false(present(c, 3));
    assert_false(present(c, 1));
    assert_true(present(c, 4));
    assert_true(present(c, 5));
    cache_get_stats(c, &st);
    assert_int_equal(st.evictions, 3);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.bytes, cost + (cost + 24));
    assert_int_equal(st.insertions, 5);
    assert_int_equal(st.max_bytes, 3 * cost);
    c = cache_free(c);
}

static void test_references_outlive_eviction(void **state)
{
    size_t cost = entry_cost(40);
    uint8_t id[2][PROTO_HASH_LEN], buf[64];
    const struct cache_buf *held, *again;
    struct cache *c;

    assert_int_equal(cache_new(&c, 2 * cost), 0);
    make_id(id[0], 10);
    make_id(id[1], 11);
    fill(buf, 40, 10);
    held = cache_insert(c, id[0], buf, 40, true);
    expect_bytes(held, id[0], 40, 10);
    /* A second reference by lookup. */
    again = cache_lookup(c, id[0]);
    assert_ptr_equal(again, held);

    /* Pushed out while referenced: still readable through both references. */
    insert(c, 11, 40);
    insert(c, 12, 40);
    assert_false(present(c, 10));
    expect_bytes(held, id[0], 40, 10);
    cache_release(c, held);
    expect_bytes(again, id[0], 40, 10);
    cache_release(c, again);

    /* Forgotten while referenced: the same. */
    held = cache_lookup(c, id[1]);
    expect_bytes(held, id[1], 40, 11);
    cache_forget(c, id[1]);
    assert_false(present(c, 11));
    expect_bytes(held, id[1], 40, 11);
    cache_release(c, held);
    cache_release(c, NULL); /* harmless */

    /* Forgetting what is not there is harmless too. */
    cache_forget(c, id[1]);
    assert_true(present(c, 12));
    c = cache_free(c);
}

static void test_first_copy_wins(void **state)
{
    uint8_t id[PROTO_HASH_LEN], a[40], b[40];
    const struct cache_buf *first, *second;
    struct cache_stats st;
    struct cache *c;

    assert_int_equal(cache_new(&c, 1 << 20), 0);
    make_id(id, 20);
    fill(a, 40, 20);
    fill(b, 40, 21);
    first = cache_insert(c, id, a, 40, true);
    second = cache_insert(c, id, b, 40, true);
    assert_ptr_equal(second, first);
    expect_bytes(second, id, 40, 20);
    assert_null(cache_insert(c, id, b, 30, false));
    cache_release(c, first);
    cache_release(c, second);
    second = cache_lookup(c, id);
    expect_bytes(second, id, 40, 20);
    cache_release(c, second);
    cache_get_stats(c, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.insertions, 1);
    c = cache_free(c);
}

/* The checked mark belongs to the entry: a new entry under the same id starts unchecked. */
static void test_checked_mark(void **state)
{
    uint8_t id[PROTO_HASH_LEN], a[40];
    const struct cache_buf *b, *again;
    struct cache *c;

    assert_int_equal(cache_new(&c, 1 << 20), 0);
    make_id(id, 30);
    fill(a, 40, 30);
    b = cache_insert(c, id, a, 40, true);
    assert_false(cache_is_checked(b));
    cache_set_checked(b);
    again = cache_lookup(c, id);
    assert_ptr_equal(again, b);
    assert_true(cache_is_checked(again));
    cache_release(c, again);
    cache_forget(c, id);
    again = cache_insert(c, id, a, 40, true);
    assert_false(cache_is_checked(again));
    assert_true(cache_is_checked(b)); /* the forgotten entry, still referenced, keeps its mark */
    cache_release(c, b);
    cache_release(c, again);
    /* A copy that does not fit is the caller's alone, and unchecked too. */
    struct cache *tiny;
    assert_int_equal(cache_new(&tiny, 16), 0);
    b = cache_insert(tiny, id, a, 40, true);
    assert_false(cache_is_checked(b));
    cache_release(tiny, b);
    tiny = cache_free(tiny);
    c = cache_free(c);
}

static void test_disabled_and_too_large(void **state)
{
    uint8_t id[PROTO_HASH_LEN], buf[64];
    const struct cache_buf *b;
    struct cache_stats st;
    struct cache *c;

    /* Disabled: nothing is kept, but a caller who keeps gets a copy of its own. */
    assert_int_equal(cache_new(&c, 0), 0);
    make_id(id, 30);
    fill(buf, 64, 30);
    assert_null(cache_insert(c, id, buf, 64, false));
    b = cache_insert(c, id, buf, 64, true);
    memset(buf, 0, sizeof(buf)); /* a copy, not the caller's buffer */
    expect_bytes(b, id, 64, 30);
    assert_null(cache_lookup(c, id));
    assert_null(cache_peek(c, id));
    cache_forget(c, id);
    expect_bytes(b, id, 64, 30);
    cache_release(c, b); /* freed here: ASan would see a leak otherwise */
    cache_get_stats(c, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.insertions, 0);
    c = cache_free(c);

    /* Enabled, but the entry is larger than the whole budget. */
    size_t cost = entry_cost(40);
    assert_int_equal(cache_new(&c, cost), 0);
    insert(c, 31, 40); /* exactly the budget: kept */
    assert_true(present(c, 31));
    make_id(id, 32);
    fill(buf, 41, 32);
    assert_null(cache_insert(c, id, buf, 41, false));
    b = cache_insert(c, id, buf, 41, true);
    expect_bytes(b, id, 41, 32);
    assert_false(present(c, 32));
    assert_true(present(c, 31)); /* nothing was evicted for it */
    cache_release(c, b);
    cache_get_stats(c, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.evictions, 0);
    c = cache_free(c);
}

static void test_stats(void **state)
{
    uint8_t id[PROTO_HASH_LEN];
    const struct cache_buf *b;
    struct cache_stats st;
    struct cache *c;

    assert_int_equal(cache_new(&c, 1 << 20), 0);
    insert(c, 40, 10);
    make_id(id, 40);
    b = cache_lookup(c, id);
    cache_release(c, b);
    b = cache_lookup(c, id);
    cache_release(c, b);
    make_id(id, 41);
    assert_null(cache_lookup(c, id));
    /* A peek is not counted either way. */
    assert_null(cache_peek(c, id));
    make_id(id, 40);
    b = cache_peek(c, id);
    assert_non_null(b);
    cache_release(c, b);
    cache_get_stats(c, &st);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.insertions, 1);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.max_bytes, 1 << 20);
    c = cache_free(c);
}

/* Many entries: the table grows and every entry is still found. */
static void test_many_entries(void **state)
{
    struct cache_stats st;
    struct cache *c;

    assert_int_equal(cache_new(&c, 64u << 20), 0);
    for (uint32_t n = 0; n < 5000; n++)
        insert(c, n, 16);
    for (uint32_t n = 0; n < 5000; n++) {
        uint8_t id[PROTO_HASH_LEN];
        const struct cache_buf *b;
        make_id(id, n);
        b = cache_lookup(c, id);
        expect_bytes(b, id, 16, n);
        cache_release(c, b);
    }
    cache_get_stats(c, &st);
    assert_int_equal(st.entries, 5000);
    assert_int_equal(st.hits, 5000);
    c = cache_free(c);
}

/* ---- threads ------------------------------------------------------------------------ */

#define THREADS 4
#define ROUNDS 20000
#define IDS 300

struct worker {
    pthread_t thread;
    struct cache *c;
    unsigned seed;
    uint64_t lookups, bad;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    for (unsigned i = 0; i < ROUNDS; i++) {
        uint32_t n = (uint32_t)(rand_r(&w->seed) % IDS);
        size_t len = 8 + n % 56;
        uint8_t id[PROTO_HASH_LEN], buf[64];
        const struct cache_buf *b;

        make_id(id, n);
        switch (rand_r(&w->seed) % 4) {
        case 0:
            fill(buf, len, n);
            b = cache_insert(w->c, id, buf, len, rand_r(&w->seed) % 2);
            break;
        case 1:
            cache_forget(w->c, id);
            b = NULL;
            break;
        default:
            w->lookups++;
            b = cache_lookup(w->c, id);
            break;
        }
        /* Whatever is handed out is the bytes of its id, however long it is held. */
        if (b) {
            fill(buf, len, n);
            if (b->len != len || memcmp(b->data, buf, len) != 0 ||
                memcmp(b->hash, id, PROTO_HASH_LEN) != 0)
                w->bad++;
            cache_release(w->c, b);
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    struct worker w[THREADS];
    struct cache_stats st;
    struct cache *c;
    uint64_t lookups = 0;

    /* Room for about a third of the ids, so evictions happen all the time. */
    assert_int_equal(cache_new(&c, IDS / 3 * (entry_cost(36))), 0);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.c = c, .seed = 1234u + (unsigned)i};
        assert_int_equal(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(w[i].thread, NULL), 0);
        assert_int_equal(w[i].bad, 0);
        lookups += w[i].lookups;
    }
    cache_get_stats(c, &st);
    assert_int_equal(st.hits + st.misses, lookups);
    assert_true(st.hits > 0 && st.misses > 0 && st.evictions > 0);
    assert_true(st.bytes <= st.max_bytes);
    assert_true(st.insertions >= st.entries + st.evictions);
    c = cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_by_bytes),    cmocka_unit_test(test_references_outlive_eviction),
        cmocka_unit_test(test_first_copy_wins), cmocka_unit_test(test_disabled_and_too_large),
        cmocka_unit_test(test_stats),           cmocka_unit_test(test_many_entries),
        cmocka_unit_test(test_threads),         cmocka_unit_test(test_checked_mark),
    };
    return cmocka_run_group_tests_name("record cache", tests, NULL, NULL);
}
