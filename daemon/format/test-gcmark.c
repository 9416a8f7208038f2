/*
 * Unit tests of the shared bucket's gc objects: keys made and read back,
 * and the ones that are not ours refused; bodies encoded and parsed, and
 * the malformed ones refused (unknown lines, keys that are no pack's, a
 * done body that marks packs, truncation at every byte).
 */
#include "daemon/format/gcmark.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_keys(void **state)
{
    char key[GCMARK_KEY_MAX];
    enum gcmark_kind kind;
    uint64_t w, g, a;

    (void)state;
    gcmark_key(key, sizeof(key), GCMARK_MARK, 0xa1, 7, 0);
    assert_string_equal(key, "gc/00000000000000a1-0000000000000007");
    assert_int_equal(gcmark_key_parse(key, &kind, &w, &g, &a), 0);
    assert_int_equal(kind, GCMARK_MARK);
    assert_int_equal(w, 0xa1);
    assert_int_equal(g, 7);
    gcmark_key(key, sizeof(key), GCMARK_DONE, 0xa1, 7, 0);
    assert_string_equal(key, "gc/00000000000000a1-0000000000000007.done");
    assert_int_equal(gcmark_key_parse(key, &kind, &w, &g, &a), 0);
    assert_int_equal(kind, GCMARK_DONE);
    gcmark_key(key, sizeof(key), GCMARK_ACK, 0xa1, 7, 0xffffffffffffffffull);
    assert_string_equal(key, "gc/00000000000000a1-0000000000000007.ack-ffffffffffffffff");
    assert_int_equal(gcmark_key_parse(key, &kind, &w, &g, &a), 0);
    assert_int_equal(kind, GCMARK_ACK);
    assert_true(a == 0xffffffffffffffffull);
    assert_true(strlen(key) < GCMARK_KEY_MAX);
    /* The cursor of gen g sorts before every object of g and after those of g - 1. */
    gcmark_cursor(key, sizeof(key), 0xa1, 7);
    assert_true(strcmp(key, "gc/00000000000000a1-0000000000000006.done") > 0);
    assert_true(strcmp(key, "gc/00000000000000a1-0000000000000007") < 0);
    gcmark_cursor(key, sizeof(key), 0xa1, 0);
    assert_true(strcmp(key, "gc/00000000000000a1-0000000000000000") < 0);
    assert_true(strcmp(key, "gc/00000000000000a0-ffffffffffffffff.done") > 0);
    static const char *const bad[] = {
        "gc/00000000000000a1-000000000000007",
        "gc/00000000000000A1-0000000000000007",
        "gc/0000000000000000-0000000000000007",
        "gc/00000000000000a1_0000000000000007",
        "gc/00000000000000a1-0000000000000007.don",
        "gc/00000000000000a1-0000000000000007.ack-0000000000000000",
        "gc/00000000000000a1-0000000000000007.ack-12",
        "gc/00000000000000a1-0000000000000007x",
        "locks/gc-00000000000000a1",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gcmark_key_parse(bad[i], &kind, &w, &g, &a), -EINVAL);
    gcmark_lock_key(key, sizeof(key), 0xa1);
    assert_string_equal(key, "locks/gc-00000000000000a1");
    assert_int_equal(gcmark_lock_key_parse(key, &w), 0);
    assert_int_equal(w, 0xa1);
    assert_int_equal(gcmark_lock_key_parse("locks/gc-0000000000000000", &w), -EINVAL);
    assert_int_equal(gcmark_lock_key_parse("locks/gc-00000000000000a", &w), -EINVAL);
}

static void test_bodies(void **state)
{
    struct gcmark m = {.writer = 0xa1, .gen = 3}, p;
    char *buf;
    size_t len;

    (void)state;
    for (unsigned i = 1; i <= 20; i++) {
        char key[64];
        snprintf(key, sizeof(key), "packs/00000000000000a1-%016x", i);
        assert_int_equal(gcmark_add(&m, i > 17, key), 0);
    }
    assert_int_equal(gcmark_add(&m, false, "packs/0000000000000004"), 0);
    assert_int_equal(gcmark_encode(&m, &buf, &len), 0);
    assert_int_equal(gcmark_parse(buf, len, &p), 0);
    assert_false(p.done);
    assert_int_equal(p.writer, 0xa1);
    assert_int_equal(p.gen, 3);
    assert_int_equal(p.npacks, 18);
    assert_int_equal(p.ncopies, 3);
    assert_string_equal(p.packs[0], "packs/00000000000000a1-0000000000000001");
    assert_string_equal(p.packs[17], "packs/0000000000000004");
    assert_string_equal(p.copies[2], "packs/00000000000000a1-0000000000000014");
    gcmark_clear(&p);
    /* Cut anywhere but after a whole line, it is refused; cut after one, it has less. */
    for (size_t cut = 0; cut < len; cut++) {
        int r = gcmark_parse(buf, cut, &p);
        if (cut > 0 && buf[cut - 1] == '\n' && cut >= 56)
            assert_int_equal(r, 0);
        else
            assert_int_equal(r, -EBADMSG);
        gcmark_clear(&p);
    }
    free(buf);
    gcmark_clear(&m);

    static const char *const bad[] = {
        "cairn gc mark 2\nwriter 00000000000000a1\ngen 0000000000000003\n",
        "cairn gc mark 1\nwriter 0000000000000000\ngen 0000000000000003\n",
        "cairn gc mark 1\nwriter 00000000000000a1\ngen 3\n",
        "cairn gc mark 1\nwriter 00000000000000a1\n",
        "cairn gc mark 1\nwriter 00000000000000a1\ngen 0000000000000003\nkeep "
        "packs/0000000000000004\n",
        "cairn gc mark 1\nwriter 00000000000000a1\ngen 0000000000000003\npack chunks/ab\n",
        "cairn gc mark 1\nwriter 00000000000000a1\ngen 0000000000000003\npack "
        "packs/0000000000000000\n",
        "cairn gc mark 1\nwriter 00000000000000a1\ngen 0000000000000003\npack \n",
        "cairn gc done 1\nwriter 00000000000000a1\ngen 0000000000000003\npack "
        "packs/0000000000000004\n",
        "cairn gc mark 1\r\nwriter 00000000000000a1\ngen 0000000000000003\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gcmark_parse(bad[i], strlen(bad[i]), &p), -EBADMSG);
    static const char nul[] = "cairn gc mark 1\nwriter 00000000000000a1\ngen 00000000000000\0003\n";
    assert_int_equal(gcmark_parse(nul, sizeof(nul) - 1, &p), -EBADMSG);
    static const char done[] = "cairn gc done 1\nwriter 00000000000000a1\ngen "
                               "0000000000000003\ncopy packs/0000000000000004\n";
    assert_int_equal(gcmark_parse(done, strlen(done), &p), 0);
    assert_true(p.done);
    assert_int_equal(p.ncopies, 1);
    gcmark_clear(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_bodies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
