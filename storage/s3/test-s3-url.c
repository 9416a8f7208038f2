/*
 * Unit tests of the s3:// and r2:// URLs: the defaults of each, every
 * option, prefixes with escapes and several segments, the derived host,
 * Host header and base path of both addressing styles, first value wins,
 * the refusals (each with its message), and that s3_describe() shows the
 * settings but none of the secrets.
 */
#include "storage/s3/s3-url.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static struct s3_opts o;
static const char *msg;

static int parse(const char *url)
{
    msg = NULL;
    int r = s3_parse_url(url, &o, &msg);
    if (r != 0)
        assert_non_null(msg);
    else
        assert_null(msg);
    return r;
}

/* Refused, with a message that contains `words`. */
static void refused(const char *url, const char *words)
{
    if (parse(url) != -EINVAL)
        fail_msg("accepted: %s", url);
    if (!strstr(msg, words))
        fail_msg("%s: message \"%s\" does not say \"%s\"", url, msg, words);
    assert_non_null(strstr(msg, "s3 backend: "));
}

/* Unset, connect_timeout and stall_timeout follow a short timeout down. */
static void test_short_timeout(void **state)
{
    assert_int_equal(parse("s3://bkt?timeout=5"), 0);
    assert_int_equal(o.connect_timeout_s, 5);
    assert_int_equal(o.stall_timeout_s, 5);
    assert_int_equal(parse("s3://bkt?timeout=20&connect_timeout=2"), 0);
    assert_int_equal(o.connect_timeout_s, 2);
    assert_int_equal(o.stall_timeout_s, 20);
}

static void test_s3_defaults(void **state)
{
    (void)state;
    assert_int_equal(parse("s3://my-bucket"), 0);
    assert_int_equal(o.flavor, S3_FLAVOR_S3);
    assert_string_equal(o.bucket, "my-bucket");
    assert_string_equal(o.prefix, "");
    assert_string_equal(o.region, "us-east-1");
    assert_string_equal(o.endpoint, "https://s3.us-east-1.amazonaws.com");
    assert_true(o.https);
    assert_string_equal(o.host, "s3.us-east-1.amazonaws.com");
    assert_int_equal(o.port, 443);
    assert_string_equal(o.host_header, "s3.us-east-1.amazonaws.com");
    assert_false(o.path_style);
    assert_string_equal(o.request_host, "my-bucket.s3.us-east-1.amazonaws.com");
    assert_string_equal(o.base_path, "");
    assert_false(o.allow_http);
    assert_int_equal(o.timeout_s, 60);
    assert_int_equal(o.connect_timeout_s, 10);
    assert_int_equal(o.stall_timeout_s, 30);
    assert_int_equal(o.connections, 16);
    assert_string_equal(o.storage_class, "");
    assert_string_equal(o.profile, "");
    assert_string_equal(o.access_key_id, "");
    /* The region picks the default endpoint. */
    assert_int_equal(parse("s3://my-bucket/?region=eu-central-1"), 0);
    assert_string_equal(o.endpoint, "https://s3.eu-central-1.amazonaws.com");
    assert_string_equal(o.request_host, "my-bucket.s3.eu-central-1.amazonaws.com");
}

static void test_s3_every_option(void **state)
{
    (void)state;
    assert_int_equal(parse("s3://data.example-1/a/b?endpoint=http%3A%2F%2FMinio.Local%3A9000/"
                           "&region=eu-west-3&path_style=1&allow_http=1&timeout=120"
                           "&connect_timeout=5&stall_timeout=15&connections=256"
                           "&storage_class=STANDARD_IA&profile=backup&access_key_id=AKIDEXAMPLE"
                           "&secret_access_key=wJalrXUtnFEMI%2FK7MDENG%2BbPxRfiCYEXAMPLEKEY"
                           "&session_token=FwoGZXIvYXdzEBYaD%2B%3D%3D"),
                     0);
    assert_string_equal(o.bucket, "data.example-1");
    assert_string_equal(o.prefix, "a/b");
    assert_string_equal(o.endpoint, "http://minio.local:9000");
    assert_false(o.https);
    assert_string_equal(o.host, "minio.local");
    assert_int_equal(o.port, 9000);
    assert_string_equal(o.host_header, "minio.local:9000");
    assert_true(o.path_style);
    assert_string_equal(o.request_host, "minio.local:9000");
    assert_string_equal(o.base_path, "/data.example-1");
    assert_string_equal(o.region, "eu-west-3");
    assert_true(o.allow_http);
    assert_int_equal(o.timeout_s, 120);
    assert_int_equal(o.connect_timeout_s, 5);
    assert_int_equal(o.stall_timeout_s, 15);
    assert_int_equal(o.connections, 256);
    assert_string_equal(o.storage_class, "STANDARD_IA");
    assert_string_equal(o.profile, "backup");
    assert_string_equal(o.access_key_id, "AKIDEXAMPLE");
    assert_string_equal(o.secret_access_key, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
    assert_string_equal(o.session_token, "FwoGZXIvYXdzEBYaD+==");
    /* A port that is the scheme's own is left out of the Host header. */
    assert_int_equal(parse("s3://bkt?endpoint=https://s3.example:443&path_style=0"), 0);
    assert_string_equal(o.host_header, "s3.example");
    assert_string_equal(o.request_host, "bkt.s3.example");
    assert_string_equal(o.endpoint, "https://s3.example");
    /* An address as host: path style by default, since BUCKET.127.0.0.1 cannot exist. */
    assert_int_equal(parse("s3://bkt?endpoint=http://127.0.0.1:4569&allow_http=1"), 0);
    assert_true(o.path_style);
    assert_string_equal(o.request_host, "127.0.0.1:4569");
    assert_string_equal(o.base_path, "/bkt");
    assert_int_equal(parse("s3://bkt?endpoint=https://[::1]:8443"), 0);
    assert_string_equal(o.host, "::1");
    assert_string_equal(o.host_header, "[::1]:8443");
    assert_true(o.path_style);
    /* The first value wins: the URL's own before the [backend] keys appended after it. */
    assert_int_equal(parse("s3://bkt?connections=4&region=us-west-2&connections=8"), 0);
    assert_int_equal(o.connections, 4);
    assert_string_equal(o.region, "us-west-2");
}

static void test_prefix(void **state)
{
    (void)state;
    assert_int_equal(parse("s3://bkt/"), 0);
    assert_string_equal(o.prefix, "");
    assert_int_equal(parse("s3://bkt///one/two/three//"), 0);
    assert_string_equal(o.prefix, "one/two/three");
    assert_int_equal(parse("s3://bkt/my%20store/caf%C3%A9/a+b:c=d%3Fe%26f"), 0);
    assert_string_equal(o.prefix, "my store/caf\xc3\xa9/a+b:c=d?e&f");
    assert_int_equal(parse("s3://bkt/%2Fleading%2F?region=x"), 0);
    assert_string_equal(o.prefix, "leading");
    refused("s3://bkt/a//b", "empty segment");
    refused("s3://bkt/./cairn", "\".\" or \"..\" segment");
    refused("s3://bkt/a/../b", "\".\" or \"..\" segment");
    refused("s3://bkt/a/..", "\".\" or \"..\" segment");
    refused("s3://bkt/%2E%2E/b", "\".\" or \"..\" segment");
    refused("r2://bkt/./x?account=023e105f4ecef8ad9ca31a8372d0c353", "\".\" or \"..\" segment");
    /* Dots inside a segment are fine. */
    assert_int_equal(parse("s3://bkt/.cairn/a..b/.../c."), 0);
    assert_string_equal(o.prefix, ".cairn/a..b/.../c.");
    refused("s3://bkt/a%00b", "bad escape");
    refused("s3://bkt/a%zz", "bad escape");
    refused("s3://bkt/a%0Ab", "control characters");
    refused("s3://bkt/a%C3", "UTF-8");
    refused("s3://bkt/a%ED%A0%80", "UTF-8");
    refused("s3://bkt/a#frag", "fragment");
}

static void test_r2(void **state)
{
    (void)state;
    assert_int_equal(parse("r2://photos/cairn?account=023e105f4ecef8ad9ca31a8372d0c353"), 0);
    assert_int_equal(o.flavor, S3_FLAVOR_R2);
    assert_string_equal(o.account, "023e105f4ecef8ad9ca31a8372d0c353");
    assert_string_equal(o.endpoint,
                        "https://023e105f4ecef8ad9ca31a8372d0c353.r2.cloudflarestorage.com");
    assert_string_equal(o.region, "auto");
    assert_true(o.path_style);
    assert_string_equal(o.request_host,
                        "023e105f4ecef8ad9ca31a8372d0c353.r2.cloudflarestorage.com");
    assert_string_equal(o.base_path, "/photos");
    assert_string_equal(o.prefix, "cairn");
    assert_string_equal(o.api_base, "https://api.cloudflare.com/client/v4");
    assert_int_equal(o.temp_ttl_s, 3600);
    assert_string_equal(o.api_token, "");
    assert_int_equal(parse("r2://photos?account=abc&api_token=Y2xvdWRmbGFyZQ&temp_ttl=1"
                           "&api_base=http://127.0.0.1:8080/client/v4/&allow_http=1"
                           "&endpoint=http://127.0.0.1:9000&access_key_id=parentkey"
                           "&path_style=0&endpoint=https://ignored"),
                     -EINVAL); /* virtual host on an address */
    assert_int_equal(parse("r2://photos?account=abc&api_token=Y2xvdWRmbGFyZQ&temp_ttl=1"
                           "&api_base=http://127.0.0.1:8080/client/v4/&allow_http=1"
                           "&endpoint=http://127.0.0.1:9000&access_key_id=parentkey"),
                     0);
    assert_string_equal(o.api_token, "Y2xvdWRmbGFyZQ");
    assert_int_equal(o.temp_ttl_s, 1);
    assert_string_equal(o.api_base, "http://127.0.0.1:8080/client/v4");
    assert_string_equal(o.endpoint, "http://127.0.0.1:9000");
    assert_string_equal(o.access_key_id, "parentkey");
    refused("r2://photos", "needs account=");
    refused("r2://photos?account=ABC", "account must be");
    refused("r2://photos?account=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
            "account must be");
    refused("r2://photos?account=abc&api_base=http://api.local", "allow_http=1");
    refused("r2://photos?account=abc&temp_ttl=0", "temp_ttl");
    refused("r2://photos?account=abc&temp_ttl=604801", "temp_ttl");
    refused("s3://photos?account=abc", "r2:// only");
    refused("s3://photos?api_token=t", "r2:// only");
}

static void test_errors(void **state)
{
    char long_bucket[80];
    (void)state;

    refused("gs://bkt", "must start with s3:// or r2://");
    refused("s3://", "bucket name");
    refused("s3://ab", "bucket name");
    refused("s3://My-Bucket", "bucket name");
    refused("s3://-bucket", "bucket name");
    refused("s3://bucket-", "bucket name");
    refused("s3://a..b", "bucket name");
    refused("s3://a_b_c", "bucket name");
    refused("s3://192.168.1.1", "bucket name");
    snprintf(long_bucket, sizeof(long_bucket), "s3://%064d", 0);
    refused(long_bucket, "bucket name");
    refused("s3://bkt?endpoint=http://minio:9000", "needs allow_http=1");
    refused("s3://bkt?endpoint=ftp://minio", "http:// or https://");
    refused("s3://bkt?endpoint=https://minio/path", "takes no path");
    refused("s3://bkt?endpoint=https://user@minio", "characters");
    refused("s3://bkt?endpoint=https://minio:0", "bad port");
    refused("s3://bkt?endpoint=https://minio:65536", "bad port");
    refused("s3://bkt?endpoint=https://minio:", "bad port");
    refused("s3://bkt?endpoint=https://[::1", "IPv6");
    refused("s3://bkt?endpoint=https://", "needs a host");
    refused("s3://bkt?endpoint=https://10.0.0.1&path_style=0", "host name");
    refused("s3://bkt?bogus=1", "unknown URL parameter");
    refused("s3://bkt?region", "name=value");
    refused("s3://bkt?=x", "name=value");
    refused("s3://bkt?region=%zz", "name=value");
    refused("s3://bkt?region=EU", "region");
    refused("s3://bkt?path_style=yes", "path_style");
    refused("s3://bkt?allow_http=2", "allow_http");
    refused("s3://bkt?timeout=0", "timeout");
    refused("s3://bkt?timeout=-5", "timeout");
    refused("s3://bkt?timeout=86401", "timeout");
    refused("s3://bkt?timeout=1x", "timeout");
    refused("s3://bkt?timeout=5&connect_timeout=6", "connect_timeout must not be longer");
    refused("s3://bkt?timeout=20&connect_timeout=1&stall_timeout=21",
            "stall_timeout must not be longer");
    refused("s3://bkt?connections=0", "connections");
    refused("s3://bkt?connections=257", "connections");
    refused("s3://bkt?connections=99999999999999999999999", "connections");
    refused("s3://bkt?storage_class=glacier", "storage_class");
    refused("s3://bkt?profile=a%20b", "profile");
    refused("s3://bkt?access_key_id=a%20b", "access_key_id");
    refused("s3://bkt?secret_access_key=s", "needs access_key_id");
    refused("s3://bkt?access_key_id=a&session_token=t", "session_token needs");
}

static void test_describe(void **state)
{
    char out[1024];
    (void)state;

    assert_int_equal(parse("s3://bkt/my%20store/x?access_key_id=AKIDPUBLIC"
                           "&secret_access_key=SuperSecretValue1&session_token=SessionSecret2"
                           "&storage_class=STANDARD&profile=p1"),
                     0);
    s3_describe(&o, out, sizeof(out));
    assert_string_equal(out, "s3://bkt/my%20store/x?endpoint=https://s3.us-east-1.amazonaws.com"
                             "&region=us-east-1&path_style=0&timeout=60&connect_timeout=10"
                             "&stall_timeout=30&connections=16&storage_class=STANDARD&profile=p1");
    assert_null(strstr(out, "SuperSecret"));
    assert_null(strstr(out, "SessionSecret"));
    assert_null(strstr(out, "secret"));
    assert_null(strstr(out, "token"));
    assert_int_equal(parse("r2://bkt?account=abc&api_token=ApiTokenSecret3&access_key_id=k"), 0);
    s3_describe(&o, out, sizeof(out));
    assert_non_null(strstr(out, "r2://bkt/?endpoint=https://abc.r2.cloudflarestorage.com"));
    assert_non_null(strstr(out, "&account=abc&api_base=https://api.cloudflare.com/client/v4"));
    assert_null(strstr(out, "ApiTokenSecret"));
    /* Cut to fit, always terminated. */
    s3_describe(&o, out, 10);
    assert_string_equal(out, "r2://bkt/");
    /* A failed parse leaves no secret behind. */
    assert_int_equal(parse("s3://bkt?secret_access_key=LeftBehind&access_key_id=a&bogus=1"),
                     -EINVAL);
    assert_string_equal(o.secret_access_key, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_s3_defaults), cmocka_unit_test(test_s3_every_option),
        cmocka_unit_test(test_prefix),      cmocka_unit_test(test_r2),
        cmocka_unit_test(test_errors),      cmocka_unit_test(test_short_timeout),
        cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
