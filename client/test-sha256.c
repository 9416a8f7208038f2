/*
 * Unit tests of the client's SHA-256 (sha256.c): the examples of FIPS 180-4,
 * and OpenSSL's digest of random inputs of every length around the block
 * and padding edges, fed whole and in pieces of every size, with the CPU's
 * SHA instructions (where it has them) and with the portable code.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/sha.h>

#include "client/sha256.h"

static void hex(const uint8_t d[SHA256_LEN], char out[2 * SHA256_LEN + 1])
{
    for (int i = 0; i < SHA256_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void digest_of(const void *p, size_t n, char out[2 * SHA256_LEN + 1])
{
    struct sha256 s;
    uint8_t d[SHA256_LEN];

    sha256_init(&s);
    sha256_update(&s, p, n);
    sha256_final(&s, d);
    hex(d, out);
}

static void vectors(void)
{
    char out[2 * SHA256_LEN + 1];
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    struct sha256 s;
    uint8_t d[SHA256_LEN], a[1000];

    digest_of("", 0, out);
    assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    digest_of("abc", 3, out);
    assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    digest_of(two, strlen(two), out);
    assert_string_equal(out, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* A million "a", a thousand at a time. */
    memset(a, 'a', sizeof(a));
    sha256_init(&s);
    for (int i = 0; i < 1000; i++)
        sha256_update(&s, a, sizeof(a));
    sha256_final(&s, d);
    hex(d, out);
    assert_string_equal(out, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void against_openssl(void)
{
    static uint8_t buf[4096 + 130];
    uint8_t want[SHA256_LEN], got[SHA256_LEN];
    unsigned seed = 12345;

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
    for (size_t n = 0; n <= sizeof(buf); n += n < 200 ? 1 : 61) {
        SHA256(buf, n, want);
        for (size_t piece = 1; piece <= 130; piece += piece < 8 ? 1 : 29) {
            struct sha256 s;
            sha256_init(&s);
            for (size_t off = 0; off < n; off += piece)
                sha256_update(&s, buf + off, n - off < piece ? n - off : piece);
            sha256_final(&s, got);
            assert_memory_equal(got, want, SHA256_LEN);
        }
    }
}

static void test_portable(void **state)
{
    (void)state;
    sha256_use_cpu(false);
    assert_false(sha256_cpu());
    vectors();
    against_openssl();
}

static void test_cpu(void **state)
{
    (void)state;
    sha256_use_cpu(true);
    if (!sha256_cpu())
        print_message("no SHA instructions on this CPU: the portable code is checked twice\n");
    vectors();
    against_openssl();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_portable),
        cmocka_unit_test(test_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
