/*
 * Unit tests of the List Blobs reader: a page as Azure and Azurite write it
 * (a byte order mark, attributes, properties the reader skips), paging,
 * RFC 1123 times, and hostile or truncated pages, which must fail without
 * the callback having seen any entry.
 */
#include "storage/azure/azure-xml.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define BLOB(name, size)                                                                           \
    "<Blob><Name>" name "</Name><Properties><Creation-Time>Wed, 02 Dec 2026 19:30:00 "             \
    "GMT</Creation-Time><Last-Modified>Wed, 02 Dec 2026 19:30:01 GMT</Last-Modified>"              \
    "<Etag>0x8D</Etag><Content-Length>" size "</Content-Length><BlobType>BlockBlob</BlobType>"     \
    "</Properties><OrMetadata /></Blob>"

static const char page1[] =
    "\xef\xbb\xbf<?xml version=\"1.0\" encoding=\"utf-8\"?><EnumerationResults "
    "ServiceEndpoint=\"http://127.0.0.1:10000/devstoreaccount1\" ContainerName=\"box\">"
    "<Prefix>p/packs/</Prefix><MaxResults>2</MaxResults><Blobs>" BLOB("p/packs/a", "10")
        BLOB("p/packs/b&amp;c", "0") "</Blobs><NextMarker>2!96!MDAw&#43;/=</NextMarker>"
                                     "</EnumerationResults>";

struct seen {
    int n;
    char names[4][64];
    uint64_t sizes[4];
    int64_t mtimes[4];
};

static int on_blob(void *opaque, const char *name, size_t len, uint64_t size, int64_t mtime)
{
    struct seen *s = opaque;
    assert_int_equal(strlen(name), len);
    if (s->n < 4) {
        snprintf(s->names[s->n], sizeof(s->names[0]), "%s", name);
        s->sizes[s->n] = size;
        s->mtimes[s->n] = mtime;
    }
    s->n++;
    return 0;
}

static void test_page(void **state)
{
    struct seen s = {0};
    struct az_list_page page;

    (void)state;
    assert_int_equal(az_xml_parse_list(page1, strlen(page1), AZ_XML_MAX_NAME, on_blob, &s, &page),
                     0);
    assert_int_equal(s.n, 2);
    assert_int_equal(page.entries, 2);
    assert_string_equal(s.names[0], "p/packs/a");
    assert_string_equal(s.names[1], "p/packs/b&c");
    assert_int_equal(s.sizes[0], 10);
    assert_int_equal(s.sizes[1], 0);
    assert_int_equal(s.mtimes[0], 1796239801);
    assert_string_equal(page.next_marker, "2!96!MDAw+/=");
    /* The last page: an empty or absent marker. */
    static const char last[] = "<EnumerationResults><Blobs/><NextMarker /></EnumerationResults>";
    s.n = 0;
    assert_int_equal(az_xml_parse_list(last, strlen(last), AZ_XML_MAX_NAME, on_blob, &s, &page), 0);
    assert_int_equal(s.n, 0);
    assert_string_equal(page.next_marker, "");
    /* A name longer than asked for fails the page. */
    assert_int_equal(az_xml_parse_list(page1, strlen(page1), 5, on_blob, &s, &page), -ENAMETOOLONG);
    assert_int_equal(az_xml_parse_list(page1, strlen(page1), 0, on_blob, &s, &page), -EINVAL);
}

static void test_time(void **state)
{
    int64_t t;

    (void)state;
    assert_int_equal(az_xml_parse_time("Thu, 01 Jan 1970 00:00:00 GMT", &t), 0);
    assert_int_equal(t, 0);
    assert_int_equal(az_xml_parse_time("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
    assert_int_equal(t, 784111777);
    assert_int_equal(az_xml_parse_time("Sun, 06 Nov 1994 08:49:37 UTC", &t), -EBADMSG);
    assert_int_equal(az_xml_parse_time("Sun, 06 Foo 1994 08:49:37 GMT", &t), -EBADMSG);
    assert_int_equal(az_xml_parse_time("Sun, 32 Nov 1994 08:49:37 GMT", &t), -EBADMSG);
    assert_int_equal(az_xml_parse_time("Sun, 06 Nov 1994 24:49:37 GMT", &t), -EBADMSG);
    assert_int_equal(az_xml_parse_time("Sun, 06 Nov 1994 08:49:37 GMT ", &t), -EBADMSG);
    assert_int_equal(az_xml_parse_time("", &t), -EBADMSG);
}

static void test_hostile(void **state)
{
    static const char *const bad[] = {
        "",
        "<Other/>",
        "<EnumerationResults><Blobs><Blob><Name>a</Name></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Properties><Content-Length>1</Content-Length>"
        "</Properties></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Name>a</Name><Name>b</Name><Properties>"
        "<Content-Length>1</Content-Length></Properties></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Name>a</Name><Properties><Content-Length>-1"
        "</Content-Length></Properties></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Name>a</Name><Properties><Content-Length>"
        "99999999999999999999</Content-Length></Properties></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><Blobs><Blob><Name><b/>a</Name></Blob></Blobs></EnumerationResults>",
        "<EnumerationResults><NextMarker>a</NextMarker><NextMarker>b</NextMarker>"
        "</EnumerationResults>",
        "<EnumerationResults><Blobs/><Blobs/></EnumerationResults>",
        "<!DOCTYPE x><EnumerationResults/>",
        "<EnumerationResults><![CDATA[x]]></EnumerationResults>",
    };
    struct seen s = {0};
    struct az_list_page page;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = az_xml_parse_list(bad[i], strlen(bad[i]), AZ_XML_MAX_NAME, on_blob, &s, &page);
        if (r != -EBADMSG)
            fail_msg("case %zu: %d", i, r);
    }
    /* Every cut of a good page fails, and the callback never sees a blob of it. */
    for (size_t cut = 0; cut < strlen(page1); cut++) {
        s.n = 0;
        assert_int_not_equal(az_xml_parse_list(page1, cut, AZ_XML_MAX_NAME, on_blob, &s, &page), 0);
        assert_int_equal(s.n, 0);
    }
    /* A NUL inside. */
    char copy[sizeof(page1)];
    memcpy(copy, page1, sizeof(page1));
    copy[200] = '\0';
    assert_int_equal(
        az_xml_parse_list(copy, sizeof(page1) - 1, AZ_XML_MAX_NAME, on_blob, &s, &page), -EBADMSG);
    /* A marker longer than its buffer. */
    size_t n = AZ_XML_MAX_MARKER + 64;
    char *big = malloc(n + 64);
    assert_non_null(big);
    int w = snprintf(big, n + 64, "<EnumerationResults><NextMarker>");
    memset(big + w, 'm', AZ_XML_MAX_MARKER);
    strcpy(big + w + AZ_XML_MAX_MARKER, "</NextMarker></EnumerationResults>");
    assert_int_equal(az_xml_parse_list(big, strlen(big), AZ_XML_MAX_NAME, on_blob, &s, &page),
                     -EBADMSG);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page),
        cmocka_unit_test(test_time),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
