/*
 * Unit tests of azure:// URLs: account, container and prefix; every option
 * and its bounds; the first value of a parameter wins; the endpoint (the
 * default, Azurite's path style, http:// only with allow_http); what
 * describe shows (never a secret); and the refusals.
 */
#include "storage/azure/azure-url.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

static struct az_opts o;

static void ok(const char *url)
{
    const char *msg = NULL;
    if (az_parse_url(url, &o, &msg) != 0)
        fail_msg("%s: %s", url, msg);
}

static void bad(const char *url, const char *why)
{
    const char *msg = NULL;
    if (az_parse_url(url, &o, &msg) != -EINVAL)
        fail_msg("%s was accepted", url);
    if (!strstr(msg, why))
        fail_msg("%s: %s (wanted %s)", url, msg, why);
}

static void test_parts(void **state)
{
    (void)state;
    ok("azure://acct/box");
    assert_string_equal(o.account, "acct");
    assert_string_equal(o.container, "box");
    assert_string_equal(o.prefix, "");
    assert_int_equal(o.timeout_s, 60);
    assert_int_equal(o.connect_timeout_s, 10);
    assert_int_equal(o.stall_timeout_s, 30);
    assert_int_equal(o.connections, 16);
    ok("azure://devstoreaccount1/my-box//a/b%20c/");
    assert_string_equal(o.prefix, "a/b c");
    ok("azure://acct/box/p?timeout=5&connections=3&stall_timeout=4&connect_timeout=2");
    assert_int_equal(o.timeout_s, 5);
    assert_int_equal(o.connections, 3);
    assert_int_equal(o.stall_timeout_s, 4);
    assert_int_equal(o.connect_timeout_s, 2);
    /* A short timeout takes the others down with it. */
    ok("azure://acct/box?timeout=3");
    assert_int_equal(o.connect_timeout_s, 3);
    assert_int_equal(o.stall_timeout_s, 3);
    /* The URL's value wins over the [backend] key appended after it. */
    ok("azure://acct/box?connections=2&connections=9");
    assert_int_equal(o.connections, 2);
    ok("azure://acct/box?sas=%3Fsv%3D1%26sig%3Dx");
    assert_string_equal(o.sas, "sv=1&sig=x");
    ok("azure://acct/box?account_key=a2V5");
    assert_string_equal(o.account_key, "a2V5");
}

static void test_refusals(void **state)
{
    (void)state;
    bad("s3://acct/box", "azure://");
    bad("azure://ac/box", "account");
    bad("azure://Acct/box", "account");
    bad("azure://acct", "container");
    bad("azure://acct/bo", "container");
    bad("azure://acct/-box", "container");
    bad("azure://acct/a--b", "container");
    bad("azure://acct/Box", "container");
    bad("azure://acct/box/a/../b", "segment");
    bad("azure://acct/box/a%01", "control");
    bad("azure://acct/box#x", "fragment");
    bad("azure://acct/box?region=x", "unknown URL parameter");
    bad("azure://acct/box?timeout=0", "timeout");
    bad("azure://acct/box?connections=257", "connections");
    bad("azure://acct/box?allow_http=yes", "allow_http");
    bad("azure://acct/box?timeout=5&stall_timeout=9", "stall_timeout");
    bad("azure://acct/box?account_key=a%20b", "account_key");
    bad("azure://acct/box?account_key=a&sas=b", "not both");
    bad("azure://acct/box?x", "name=value");
}

static void test_endpoint(void **state)
{
    const char *msg;

    (void)state;
    ok("azure://acct/box");
    assert_int_equal(az_set_endpoint(&o, NULL, false, &msg), 0);
    assert_string_equal(o.endpoint, "https://acct.blob.core.windows.net");
    assert_string_equal(o.base_path, "");
    assert_true(o.https);
    assert_int_equal(az_set_endpoint(&o, "http://127.0.0.1:10000/devstoreaccount1", false, &msg),
                     -EINVAL);
    assert_non_null(strstr(msg, "allow_http=1"));
    assert_int_equal(az_set_endpoint(&o, "http://127.0.0.1:10000/devstoreaccount1/", true, &msg),
                     0);
    assert_string_equal(o.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
    assert_string_equal(o.base_path, "/devstoreaccount1");
    assert_int_equal(az_set_endpoint(&o, "https://Acct.Blob.Core.Chinacloudapi.CN", false, &msg),
                     0);
    assert_string_equal(o.endpoint, "https://acct.blob.core.chinacloudapi.cn");
    assert_int_equal(az_set_endpoint(&o, "ftp://h", false, &msg), -EINVAL);
    assert_int_equal(az_set_endpoint(&o, "https://h/a?b", false, &msg), -EINVAL);
    assert_int_equal(az_set_endpoint(&o, "https:///p", false, &msg), -EINVAL);
    assert_int_equal(az_set_endpoint(&o, "https://h/a%20b", false, &msg), -EINVAL);
    assert_int_equal(az_set_endpoint(&o, "https://h//a", false, &msg), -EINVAL);
    assert_int_equal(az_set_endpoint(&o, "https://h o", false, &msg), -EINVAL);
}

static void test_describe(void **state)
{
    const char *msg;
    char out[1024];

    (void)state;
    ok("azure://acct/box/a%20b?account_key=SECRETKEY&allow_http=1&endpoint=http%3A%2F%2Fh%3A1");
    assert_int_equal(az_set_endpoint(&o, o.endpoint_raw, false, &msg), 0);
    az_describe(&o, out, sizeof(out));
    assert_string_equal(out, "azure://acct/box/a%20b?endpoint=http://h:1&allow_http=1&timeout=60&"
                             "connect_timeout=10&stall_timeout=30&connections=16");
    assert_null(strstr(out, "SECRET"));
    ok("azure://acct/box?sas=sv%3DSECRET");
    az_describe(&o, out, sizeof(out));
    assert_null(strstr(out, "SECRET"));
    az_opts_clear(&o);
    assert_string_equal(o.sas, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_endpoint),
        cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
