/* The AEAD, keyed ids, key objects and config objects of daemon/crypto. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>

#include "daemon/crypto/keys.h"
#include "daemon/crypto/seal.h"

static const struct key_params fast = {.n = 1u << 10, .r = 8, .p = 1};

static void test_seal_roundtrip(void **state)
{
    struct seal_master m;
    uint8_t pt[100], a[100 + SEAL_OVERHEAD], b[100 + SEAL_OVERHEAD], out[100];

    (void)state;
    memset(pt, 'x', sizeof(pt));
    assert_int_equal(keys_new_master(&m), 0);
    seal_set_master(&m);
    assert_true(seal_on());
    assert_int_equal(seal_encrypt((const uint8_t *)"ad", 2, pt, sizeof(pt), a), 0);
    assert_int_equal(seal_encrypt((const uint8_t *)"ad", 2, pt, sizeof(pt), b), 0);
    /* Two seals of the same bytes: two nonces, two ciphertexts. */
    assert_memory_not_equal(a, b, SEAL_NONCE_LEN);
    assert_memory_not_equal(a + SEAL_NONCE_LEN, b + SEAL_NONCE_LEN, sizeof(pt));
    assert_null(memmem(a, sizeof(a), pt, 16));
    assert_int_equal(seal_decrypt((const uint8_t *)"ad", 2, a, sizeof(a), out), 0);
    assert_memory_equal(out, pt, sizeof(pt));
    /* Other associated data, a flipped byte anywhere, a cut: refused. */
    assert_int_equal(seal_decrypt((const uint8_t *)"aD", 2, a, sizeof(a), out), 1);
    for (size_t i = 0; i < sizeof(a); i += 7) {
        a[i] ^= 1;
        assert_int_equal(seal_decrypt((const uint8_t *)"ad", 2, a, sizeof(a), out), 1);
        a[i] ^= 1;
    }
    assert_int_equal(seal_decrypt((const uint8_t *)"ad", 2, a, sizeof(a) - 1, out), 1);
    assert_int_equal(seal_decrypt((const uint8_t *)"ad", 2, a, SEAL_OVERHEAD - 1, out), 1);
    seal_forget();
    assert_false(seal_on());
    assert_int_equal(seal_decrypt((const uint8_t *)"ad", 2, a, sizeof(a), out), 1);
}

static void test_keyed_id(void **state)
{
    struct seal_master m1, m2;
    uint8_t id[SEAL_ID_LEN] = {1, 2, 3}, k1[SEAL_ID_LEN], k2[SEAL_ID_LEN], k3[SEAL_ID_LEN];

    (void)state;
    assert_int_equal(keys_new_master(&m1), 0);
    assert_int_equal(keys_new_master(&m2), 0);
    seal_set_master(&m1);
    seal_keyed_id(1, id, k1);
    seal_keyed_id(2, id, k3);
    seal_set_master(&m2);
    seal_keyed_id(1, id, k2);
    seal_forget();
    assert_memory_not_equal(k1, id, SEAL_ID_LEN);
    assert_memory_not_equal(k1, k2, SEAL_ID_LEN);
    assert_memory_not_equal(k1, k3, SEAL_ID_LEN);
}

static void test_key_object(void **state)
{
    struct seal_master m, got;
    struct key_object ko;
    char *text, *text2;
    size_t len, len2;

    (void)state;
    assert_int_equal(keys_new_master(&m), 0);
    assert_int_equal(key_object_make(&m, "secret", 6, &fast, &text, &len), 0);
    assert_int_equal(key_object_make(&m, "secret", 6, &fast, &text2, &len2), 0);
    /* Fresh salt and nonce every time. */
    assert_string_not_equal(text, text2);
    assert_int_equal(key_object_parse(text, len, &ko), 0);
    assert_int_equal(ko.kp.n, fast.n);
    assert_int_equal(key_object_open(&ko, "secret", 6, &got), 0);
    assert_memory_equal(&got, &m, sizeof(m));
    assert_int_equal(key_object_open(&ko, "secreT", 6, &got), KEYS_E_WRONG);
    ko.data[20] ^= 1;
    assert_int_equal(key_object_open(&ko, "secret", 6, &got), KEYS_E_WRONG);
    assert_int_equal(key_object_parse(text, len - 1, &ko), KEYS_E_BAD);
    assert_int_equal(key_object_parse("{}", 2, &ko), KEYS_E_BAD);
    free(text);
    free(text2);
    /* Bounds of the scrypt cost a hostile bucket could ask for. */
    static const char huge[] =
        "{\"cairn_key\":1,\"kdf\":\"scrypt\",\"N\":1073741824,\"r\":8,\"p\":1,\"salt\":"
        "\"0000000000000000000000000000000000000000000000000000000000000000\",\"aead\":"
        "\"aes-256-gcm\",\"data\":\"00\",\"created\":0}";
    assert_int_equal(key_object_parse(huge, sizeof(huge) - 1, &ko), KEYS_E_BAD);
}

static void test_config(void **state)
{
    char *text;
    size_t len;
    bool enc = false;

    (void)state;
    assert_int_equal(store_config_encode(true, &text, &len), 0);
    assert_int_equal(store_config_parse(text, len, &enc), 0);
    assert_true(enc);
    free(text);
    assert_int_equal(store_config_encode(false, &text, &len), 0);
    assert_int_equal(store_config_parse(text, len, &enc), 0);
    assert_false(enc);
    free(text);
    assert_int_equal(store_config_parse("{\"cairn_store\":1,\"encryption\":\"rot13\"}", 38, &enc),
                     KEYS_E_BAD);
    char id[KEYS_ID_LEN + 1];
    assert_int_equal(keys_key_parse("keys/0123456789abcdef0123456789abcdef", id), 0);
    assert_int_equal(keys_key_parse("keys/0123456789abcdef0123456789abcdeF", id), -EINVAL);
    assert_int_equal(keys_key_parse("keys/0123", id), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seal_roundtrip),
        cmocka_unit_test(test_keyed_id),
        cmocka_unit_test(test_key_object),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
