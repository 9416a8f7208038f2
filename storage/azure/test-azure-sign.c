/*
 * Unit tests of the SharedKey signer: the canonicalized resources of the
 * worked examples in Microsoft's "Authorize with Shared Key" (a container
 * list with a repeated parameter, a blob, and the emulator's path-style URL
 * that names the account twice), the string-to-sign byte for byte (the
 * standard headers' order, Content-Length empty when 0, x-ms-* headers
 * lowercased, sorted and folded, query parameters decoded), signatures, the
 * date, and the refusals.
 *
 * The expected signatures were computed by an independent implementation
 * of the documented rules (tests/integration/azurefixture.py's
 * shared_key_string, with Python's hmac), which Azurite accepts.
 */
#include "storage/azure/azure-creds.h"
#include "storage/azure/azure-sign.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define DATE "x-ms-date: Sun, 06 Nov 1994 08:49:37 GMT"
#define VERSION "x-ms-version: 2021-12-02"
#define TWELVE "\n\n\n\n\n\n\n\n\n\n\n\n"

static char sts[AZ_STS_MAX];

/* The canonicalized resource: what follows the last canonical header line. */
static const char *resource(const char *s)
{
    const char *r = strstr(s, "\nx-ms-version:2021-12-02\n");
    assert_non_null(r);
    return r + strlen("\nx-ms-version:2021-12-02\n");
}

static void test_resource_examples(void **state)
{
    const char *h[] = {DATE, VERSION};
    struct az_sign_req r = {.method = "GET", .headers = h, .nheaders = 2};

    (void)state;
    /* GET https://myaccount.blob.core.windows.net/mycontainer?restype=container&comp=list
     *     &include=snapshots&include=metadata&include=uncommittedblobs */
    r.path = "/mycontainer";
    r.query = "restype=container&comp=list&include=snapshots&include=metadata&include="
              "uncommittedblobs";
    assert_true(az_string_to_sign("myaccount", &r, sts, sizeof(sts)) > 0);
    assert_string_equal(resource(sts), "/myaccount/mycontainer\ncomp:list\n"
                                       "include:metadata,snapshots,uncommittedblobs\n"
                                       "restype:container");
    /* GET https://myaccount-secondary.blob.core.windows.net/mycontainer/myblob */
    r.path = "/mycontainer/myblob";
    r.query = NULL;
    assert_true(az_string_to_sign("myaccount", &r, sts, sizeof(sts)) > 0);
    assert_string_equal(resource(sts), "/myaccount/mycontainer/myblob");
    /* The emulator's path-style URL: http://127.0.0.1:10000/devstoreaccount1/mycontainer/myblob */
    r.path = "/devstoreaccount1/mycontainer/myblob";
    assert_true(az_string_to_sign("devstoreaccount1", &r, sts, sizeof(sts)) > 0);
    assert_string_equal(resource(sts), "/devstoreaccount1/devstoreaccount1/mycontainer/myblob");
    /* Names lowercased, values decoded, the path as sent (encoded). */
    r.path = "/c/a%20b";
    r.query = "COMP=list&prefix=p%2Fq%20r&marker=2%2196%21MDAw%2B%2F%3D";
    assert_true(az_string_to_sign("acct", &r, sts, sizeof(sts)) > 0);
    assert_string_equal(resource(sts),
                        "/acct/c/a%20b\ncomp:list\nmarker:2!96!MDAw+/=\nprefix:p/q r");
}

static void test_string_to_sign(void **state)
{
    const char *put[] = {VERSION, "x-ms-blob-type:   BlockBlob", "If-None-Match: *", DATE,
                         "Content-Type: application/xml"};
    struct az_sign_req r = {.method = "PUT",
                            .path = "/devstoreaccount1/box/p/packs/0000000000000001",
                            .content_length = 11,
                            .headers = put,
                            .nheaders = 5};
    int n;

    (void)state;
    n = az_string_to_sign("devstoreaccount1", &r, sts, sizeof(sts));
    assert_int_equal(n, (int)strlen(sts));
    assert_string_equal(sts, "PUT\n\n\n11\n\napplication/xml\n\n\n\n*\n\n\n"
                             "x-ms-blob-type:BlockBlob\n"
                             "x-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\n"
                             "x-ms-version:2021-12-02\n"
                             "/devstoreaccount1/devstoreaccount1/box/p/packs/0000000000000001");
    /* Content-Length 0 is an empty line, as for a request without a body. */
    r.content_length = 0;
    r.nheaders = 4;
    assert_true(az_string_to_sign("devstoreaccount1", &r, sts, sizeof(sts)) > 0);
    assert_memory_equal(sts, "PUT\n\n\n\n\n\n\n\n\n*\n\n\n", 15);
    /* The twelve lines are there for a bare GET. */
    const char *get[] = {DATE, VERSION, "x-ms-range: bytes=0-9"};
    struct az_sign_req g = {.method = "GET", .path = "/c/b", .headers = get, .nheaders = 3};
    assert_true(az_string_to_sign("a", &g, sts, sizeof(sts)) > 0);
    assert_string_equal(sts, "GET" TWELVE "x-ms-date:Sun, 06 Nov 1994 08:49:37 GMT\n"
                             "x-ms-range:bytes=0-9\nx-ms-version:2021-12-02\n/a/c/b");
}

static void sign_expect(const struct az_sign_req *r, const char *want)
{
    uint8_t key[AZ_MAX_KEY];
    int n = az_base64_decode(DEV_KEY, key, sizeof(key));
    char auth[AZ_AUTH_SIZE];

    assert_int_equal(n, 64);
    assert_int_equal(az_sign("devstoreaccount1", key, (size_t)n, r, auth, sizeof(auth)), 0);
    assert_string_equal(auth, want);
}

static void test_signatures(void **state)
{
    const char *put[] = {DATE, VERSION, "x-ms-blob-type: BlockBlob", "If-None-Match: *"};
    struct az_sign_req p = {.method = "PUT",
                            .path = "/devstoreaccount1/box/p/packs/0000000000000001",
                            .content_length = 11,
                            .headers = put,
                            .nheaders = 4};
    const char *get[] = {DATE, VERSION};
    struct az_sign_req l = {.method = "GET",
                            .path = "/devstoreaccount1/box",
                            .query = "restype=container&comp=list&prefix=p%2Fpacks%2F&marker=2%"
                                     "2196%21MDAw%2B%2F%3D",
                            .headers = get,
                            .nheaders = 2};

    (void)state;
    sign_expect(&p, "SharedKey devstoreaccount1:qK5Pz2EZoiwiTLNU17y2XXgmt1029mCl0QSvA3EhwLY=");
    sign_expect(&l, "SharedKey devstoreaccount1:GrPvr7mjdjCW64Z8ZUZjx+3JSTrt2N/bZvaQ/gTBJiw=");
    /* One byte of the key changed: another signature. */
    uint8_t key[AZ_MAX_KEY];
    char auth[AZ_AUTH_SIZE];
    az_base64_decode(DEV_KEY, key, sizeof(key));
    key[0] ^= 1;
    assert_int_equal(az_sign("devstoreaccount1", key, 64, &p, auth, sizeof(auth)), 0);
    assert_string_not_equal(
        auth, "SharedKey devstoreaccount1:qK5Pz2EZoiwiTLNU17y2XXgmt1029mCl0QSvA3EhwLY=");
}

static void test_date(void **state)
{
    char d[AZ_DATE_SIZE];

    (void)state;
    az_format_date(784111777, d);
    assert_string_equal(d, "Sun, 06 Nov 1994 08:49:37 GMT");
    az_format_date(0, d);
    assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
}

static void test_refusals(void **state)
{
    const char *h[] = {DATE, VERSION};
    struct az_sign_req r = {.method = "GET", .path = "/c/b", .headers = h, .nheaders = 2};
    char small[40], q[1024] = "";

    (void)state;
    assert_int_equal(az_string_to_sign("a", &r, small, sizeof(small)), -ENAMETOOLONG);
    r.path = "c/b";
    assert_int_equal(az_string_to_sign("a", &r, sts, sizeof(sts)), -EINVAL);
    r.path = "/c/b";
    for (int i = 0; i < AZ_MAX_PARAMS + 1; i++)
        snprintf(q + strlen(q), sizeof(q) - strlen(q), "%sp%d=v", i ? "&" : "", i);
    r.query = q;
    assert_int_equal(az_string_to_sign("a", &r, sts, sizeof(sts)), -EINVAL);
    r.query = "a=%zz";
    assert_int_equal(az_string_to_sign("a", &r, sts, sizeof(sts)), -EINVAL);
    r.query = "a=%00";
    assert_int_equal(az_string_to_sign("a", &r, sts, sizeof(sts)), -EINVAL);
    /* A header value with a line break cannot be signed. */
    const char *bad[] = {DATE, "x-ms-meta-a: b\r\nx-ms-evil: 1"};
    struct az_sign_req b = {.method = "GET", .path = "/c/b", .headers = bad, .nheaders = 2};
    assert_int_equal(az_string_to_sign("a", &b, sts, sizeof(sts)), -ENAMETOOLONG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resource_examples), cmocka_unit_test(test_string_to_sign),
        cmocka_unit_test(test_signatures),        cmocka_unit_test(test_date),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
