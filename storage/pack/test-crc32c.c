/*
 * Unit tests for the CRC-32C behind every pack checksum: known answers (the
 * check value and the iSCSI patterns of RFC 3720) for the table path, the
 * hardware path and the dispatching pack_crc32c(); that continuing a
 * checksum across a split gives the checksum of the whole; and that the
 * hardware and table paths agree on random data at every alignment and on
 * lengths that exercise their head, body and tail loops.
 */
#include "storage/pack/test-pack-util.h"
#include "storage/pack/pack-int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const struct {
    const char *data;
    size_t len;
    uint32_t crc;
} crc_vectors[] = {
    {"", 0, 0x00000000},
    {"a", 1, 0xC1D04330},
    {"123456789", 9, 0xE3069283},
    {"The quick brown fox jumps over the lazy dog", 43, 0x22620404},
};

typedef uint32_t crc_fn(uint32_t crc, const void *data, size_t len);

static void check_crc_known_answers(crc_fn *fn)
{
    uint8_t block[32], whole[100];

    for (size_t i = 0; i < sizeof(crc_vectors) / sizeof(crc_vectors[0]); i++)
        assert_int_equal(fn(0, crc_vectors[i].data, crc_vectors[i].len), crc_vectors[i].crc);
    /* The iSCSI test patterns of RFC 3720, B.4. */
    memset(block, 0, sizeof(block));
    assert_int_equal(fn(0, block, sizeof(block)), 0x8A9136AA);
    memset(block, 0xff, sizeof(block));
    assert_int_equal(fn(0, block, sizeof(block)), 0x62A8AB43);
    for (int i = 0; i < 32; i++)
        block[i] = (uint8_t)i;
    assert_int_equal(fn(0, block, sizeof(block)), 0x46DD794E);
    for (int i = 0; i < 32; i++)
        block[i] = (uint8_t)(31 - i);
    assert_int_equal(fn(0, block, sizeof(block)), 0x113FDB5C);
    /* Continuing from a split point gives the checksum of the whole. */
    test_rng_fill(whole, sizeof(whole));
    for (size_t cut = 0; cut <= sizeof(whole); cut++)
        assert_int_equal(fn(fn(0, whole, cut), whole + cut, sizeof(whole) - cut),
                         fn(0, whole, sizeof(whole)));
}

static void test_crc32c_known_answers(void **state)
{
    test_rng_state = 1;
    check_crc_known_answers(pack_crc32c_sw);
    check_crc_known_answers(pack_crc32c);
    if (pack_crc32c_hw_available())
        check_crc_known_answers(pack_crc32c_hw);
}

static void test_crc32c_hw_matches_table(void **state)
{
    enum { AREA = 100000 };
    uint8_t *area;

    /* Reported as skipped, not passed, on a CPU without the instruction. */
    if (!pack_crc32c_hw_available())
        skip();
    area = malloc(AREA);
    assert_non_null(area);
    test_rng_state = 2;
    test_rng_fill(area, AREA);
    /* Every short length at every alignment, where the head and tail loops do all the work. */
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len < 80; len++) {
            uint32_t seed = (uint32_t)test_rng_next();
            assert_int_equal(pack_crc32c_hw(seed, area + off, len),
                             pack_crc32c_sw(seed, area + off, len));
        }
    }
    /* Lengths around the three-lane steps (3 x 256 and 3 x 8192 bytes) and their multiples. */
    for (size_t step = 768; step <= 3 * 8192; step *= 32) {
        for (size_t n = 1; n <= 3; n++) {
            for (size_t len = n * step - 9; len <= n * step + 9; len++) {
                size_t off = test_rng_below(16);
                uint32_t seed = (uint32_t)test_rng_next();
                assert_int_equal(pack_crc32c_hw(seed, area + off, len),
                                 pack_crc32c_sw(seed, area + off, len));
            }
        }
    }
    for (int i = 0; i < 20000; i++) {
        size_t off = test_rng_below(16);
        size_t len = test_rng_below(i % 8 == 0 ? AREA - 16 : i % 8 == 1 ? 3000 : 300);
        uint32_t seed = i % 2 ? (uint32_t)test_rng_next() : 0;
        uint32_t want = pack_crc32c_sw(seed, area + off, len);

        assert_int_equal(pack_crc32c_hw(seed, area + off, len), want);
        assert_int_equal(pack_crc32c(seed, area + off, len), want);
    }
    free(area);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_answers),
        cmocka_unit_test(test_crc32c_hw_matches_table),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
