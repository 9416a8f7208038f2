/*
 * Unit tests of the set of checked chunk ids (daemon/store/chunkset.c): each
 * id is added once, growth keeps every id, ids that share their first bytes
 * (one probe chain) stay apart, and a full set refuses new ids but still
 * knows the ones it holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/store/chunkset.h"

static void make_id(uint8_t id[PROTO_HASH_LEN], uint32_t n, uint32_t tail)
{
    memset(id, 0, PROTO_HASH_LEN);
    memcpy(id, &n, sizeof(n));
    memcpy(id + PROTO_HASH_LEN - sizeof(tail), &tail, sizeof(tail));
}

static void test_each_id_once(void **state)
{
    struct chunkset s;
    uint8_t id[PROTO_HASH_LEN];
    bool added;

    (void)state;
    chunkset_init(&s, 100000);
    for (uint32_t n = 0; n < 5000; n++) {
        make_id(id, n * 2654435761u, n);
        assert_int_equal(chunkset_add(&s, id, &added), 0);
        assert_true(added);
    }
    assert_int_equal(s.count, 5000);
    /* Every id survived the growth on the way. */
    for (uint32_t n = 0; n < 5000; n++) {
        make_id(id, n * 2654435761u, n);
        assert_int_equal(chunkset_add(&s, id, &added), 0);
        assert_false(added);
    }
    assert_int_equal(s.count, 5000);
    chunkset_deinit(&s);
}

static void test_same_first_bytes(void **state)
{
    struct chunkset s;
    uint8_t id[PROTO_HASH_LEN];
    bool added;

    (void)state;
    chunkset_init(&s, 1000);
    for (uint32_t tail = 0; tail < 600; tail++) {
        make_id(id, 7, tail);
        assert_int_equal(chunkset_add(&s, id, &added), 0);
        assert_true(added);
    }
    for (uint32_t tail = 0; tail < 600; tail++) {
        make_id(id, 7, tail);
        assert_int_equal(chunkset_add(&s, id, &added), 0);
        assert_false(added);
    }
    chunkset_deinit(&s);
}

static void test_full(void **state)
{
    struct chunkset s;
    uint8_t id[PROTO_HASH_LEN];
    bool added;

    (void)state;
    chunkset_init(&s, 3);
    for (uint32_t n = 0; n < 3; n++) {
        make_id(id, n, 0);
        assert_int_equal(chunkset_add(&s, id, &added), 0);
        assert_true(added);
    }
    make_id(id, 3, 0);
    assert_int_equal(chunkset_add(&s, id, &added), CHUNKSET_E_FULL);
    assert_false(added);
    make_id(id, 1, 0);
    assert_int_equal(chunkset_add(&s, id, &added), 0);
    assert_false(added);
    assert_int_equal(s.count, 3);
    chunkset_deinit(&s);

    /* A set of bound 0 holds nothing and allocates nothing. */
    chunkset_init(&s, 0);
    assert_int_equal(chunkset_add(&s, id, &added), CHUNKSET_E_FULL);
    assert_null(s.ids);
    chunkset_deinit(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_id_once),
        cmocka_unit_test(test_same_first_bytes),
        cmocka_unit_test(test_full),
    };

    return cmocka_run_group_tests_name("store: chunk set", tests, NULL, NULL);
}
