/*
 * Unit tests of the sftp URL: every part and parameter, percent-decoding,
 * IPv6 literals, home-relative paths, defaults, first value wins, and the
 * refusals (no user, no path, bad port, unknown or malformed parameters,
 * escapes that would smuggle a NUL), plus the remote path of a key.
 */
#include "storage/sftp/sftp-int.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static struct sftp_opts o;

static int parse(const char *url)
{
    const char *msg = NULL;
    int r = sftp_parse_url(url, &o, &msg);
    if (r != 0)
        assert_non_null(msg);
    return r;
}

static void test_full(void **state)
{
    (void)state;
    assert_int_equal(parse("sftp://backup@files.example:2222/srv/cairn/?key=/k/id%20x"
                           "&known_hosts=/k/kh&accept_new_host=1&connections=8&timeout=5000"
                           "&keepalive=0"),
                     0);
    assert_string_equal(o.user, "backup");
    assert_string_equal(o.host, "files.example");
    assert_int_equal(o.port, 2222);
    assert_string_equal(o.root, "/srv/cairn");
    assert_string_equal(o.key, "/k/id x");
    assert_string_equal(o.known_hosts, "/k/kh");
    assert_true(o.accept_new_host);
    assert_int_equal(o.connections, 8);
    assert_int_equal(o.timeout_ms, 5000);
    assert_int_equal(o.keepalive_s, 0);
}

static void test_defaults(void **state)
{
    (void)state;
    setenv("HOME", "/home/u", 1);
    assert_int_equal(parse("sftp://u@h/data"), 0);
    assert_int_equal(o.port, 22);
    assert_string_equal(o.root, "/data");
    assert_string_equal(o.key, "");
    assert_string_equal(o.known_hosts, "/home/u/.ssh/known_hosts");
    assert_false(o.accept_new_host);
    assert_int_equal(o.connections, SFTP_DEFAULT_CONNECTIONS);
    assert_int_equal(o.timeout_ms, SFTP_DEFAULT_TIMEOUT_MS);
    assert_int_equal(o.keepalive_s, SFTP_DEFAULT_KEEPALIVE_S);
}

static void test_forms(void **state)
{
    char path[256];
    (void)state;
    assert_int_equal(parse("sftp://u%40corp@[::1]:2200/x"), 0);
    assert_string_equal(o.user, "u@corp");
    assert_string_equal(o.host, "::1");
    assert_int_equal(o.port, 2200);
    assert_int_equal(parse("sftp://u@[fe80::1]/x"), 0);
    assert_string_equal(o.host, "fe80::1");
    assert_int_equal(o.port, 22);
    /* Home-relative. */
    assert_int_equal(parse("sftp://u@h/~/store"), 0);
    assert_string_equal(o.root, "store");
    assert_int_equal(sftp_path(&o, "packs/0001", path, sizeof(path)), 0);
    assert_string_equal(path, "store/packs/0001");
    assert_int_equal(parse("sftp://u@h/~"), 0);
    assert_string_equal(o.root, ".");
    /* The root itself. */
    assert_int_equal(parse("sftp://u@h/"), 0);
    assert_string_equal(o.root, "/");
    assert_int_equal(sftp_path(&o, "packs/0001", path, sizeof(path)), 0);
    assert_string_equal(path, "/packs/0001");
    /* A parameter given twice keeps its first value (the URL beats appended config keys). */
    assert_int_equal(parse("sftp://u@h/p?connections=2&connections=9&&timeout=100"), 0);
    assert_int_equal(o.connections, 2);
    assert_int_equal(o.timeout_ms, 100);
}

static void test_refusals(void **state)
{
    (void)state;
    const char *bad[] = {
        "sftp:/u@h/p",
        "s3://b/p",
        "sftp://h/p",                 /* no user */
        "sftp://@h/p",                /* empty user */
        "sftp://u@/p",                /* no host */
        "sftp://u@h",                 /* no path */
        "sftp://u@h?key=x",           /* no path */
        "sftp://u@h:0/p",             /* port 0 */
        "sftp://u@h:65536/p",         /* port too large */
        "sftp://u@h:22x/p",           /* junk port */
        "sftp://u@h:/p",              /* empty port */
        "sftp://u@[::1/p",            /* unclosed bracket */
        "sftp://u@[::1]x/p",          /* junk after bracket */
        "sftp://u@h/p%00x",           /* NUL smuggled in */
        "sftp://u@h/p%4",             /* short escape */
        "sftp://u@h/p%zz",            /* bad escape */
        "sftp://u@h/p?frobnicate=1",  /* unknown parameter */
        "sftp://u@h/p?key",           /* no value */
        "sftp://u@h/p?key=",          /* empty value */
        "sftp://u@h/p?connections=0", /* out of range */
        "sftp://u@h/p?connections=65",
        "sftp://u@h/p?connections=-1",
        "sftp://u@h/p?timeout=99",
        "sftp://u@h/p?timeout=1e3",
        "sftp://u@h/p?accept_new_host=yes",
        "sftp://u@h/p?keepalive=86401",
        "sftp://u@h/p?known_hosts=%00",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i]) != -EINVAL)
            fail_msg("accepted %s", bad[i]);
    }
}

static void test_long(void **state)
{
    char url[4096], path[64];
    (void)state;
    memset(path, 0, sizeof(path));
    /* A path longer than the limit is refused, not cut. */
    strcpy(url, "sftp://u@h/");
    memset(url + strlen(url), 'a', SFTP_MAX_PATH + 10);
    url[11 + SFTP_MAX_PATH + 10] = '\0';
    assert_int_equal(parse(url), -EINVAL);
    /* A key whose remote path does not fit is an error too. */
    assert_int_equal(parse("sftp://u@h/a/long/root"), 0);
    assert_int_equal(sftp_path(&o, "packs/0123456789abcdef0123456789", path, 16), -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),  cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_forms), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
