/* Unit tests of the hex helpers. */
#include "proto/test-proto-util.h"

static void test_hex(void **state)
{
    static const uint8_t bin[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff};
    char hex[2 * sizeof(bin) + 1];
    uint8_t back[sizeof(bin)];

    memset(hex, 'X', sizeof(hex));
    proto_hex_encode(bin, sizeof(bin), hex);
    assert_string_equal(hex, "00017f80abcdefff");

    memset(back, 0x55, sizeof(back));
    assert_int_equal(proto_hex_decode(hex, strlen(hex), back, sizeof(back)), 0);
    assert_memory_equal(back, bin, sizeof(bin));
    memset(back, 0x55, sizeof(back));
    assert_int_equal(proto_hex_decode("00017F80ABCDEFFF", 16, back, sizeof(back)), 0);
    assert_memory_equal(back, bin, sizeof(bin));
    assert_int_equal(proto_hex_decode("00017f80AbCdEfFf", 16, back, sizeof(back)), 0);
    assert_memory_equal(back, bin, sizeof(bin));

    /* Wrong length in either direction, and bad digits anywhere. */
    assert_int_equal(proto_hex_decode(hex, 15, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("00017f80abcdefff00", 18, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("00017f80abcdeffg", 16, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("g0017f80abcdefff", 16, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("0001 f80abcdefff", 16, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("", 0, back, 0), 0);

    /* The empty encoding. */
    hex[0] = 'X';
    proto_hex_encode(bin, 0, hex);
    assert_string_equal(hex, "");

    /* A SHA-256 id round trip over every byte value. */
    uint8_t id[PROTO_HASH_LEN], id2[PROTO_HASH_LEN];
    char idhex[PROTO_HASH_HEX + 1];
    for (unsigned start = 0; start < 256; start += PROTO_HASH_LEN) {
        for (unsigned i = 0; i < PROTO_HASH_LEN; i++)
            id[i] = (uint8_t)(start + i);
        proto_hex_encode(id, sizeof(id), idhex);
        assert_int_equal(strlen(idhex), PROTO_HASH_HEX);
        assert_true(proto_is_hex(idhex, PROTO_HASH_HEX));
        for (unsigned i = 0; i < PROTO_HASH_HEX; i++)
            assert_true((idhex[i] >= '0' && idhex[i] <= '9') ||
                        (idhex[i] >= 'a' && idhex[i] <= 'f'));
        assert_int_equal(proto_hex_decode(idhex, PROTO_HASH_HEX, id2, sizeof(id2)), 0);
        assert_memory_equal(id, id2, sizeof(id));
    }
}

static void test_is_hex(void **state)
{
    assert_true(proto_is_hex("0123456789abcdefABCDEF", 22));
    assert_true(proto_is_hex("", 0));
    assert_true(proto_is_hex("abz", 2)); /* only `len` characters are looked at */
    assert_false(proto_is_hex("abz", 3));
    for (unsigned c = 1; c < 256; c++) {
        char s[2] = {(char)c, 0};
        bool want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (proto_is_hex(s, 1) != want)
            fail_msg("proto_is_hex wrong for 0x%02x", c);
    }
    assert_false(proto_is_hex("\0", 1));
}

int test_proto_hex_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hex),
        cmocka_unit_test(test_is_hex),
    };

    return cmocka_run_group_tests_name("proto: hex", tests, NULL, NULL);
}
