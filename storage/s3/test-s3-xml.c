/*
 * Unit tests of the S3 XML reader: a ListObjectsV2 page shaped like AWS's
 * documented example, entities and character references in keys, a
 * truncated page with its continuation token, an empty bucket, error
 * documents, the refusals (bad entities, mismatched or unterminated tags,
 * numbers out of range, NUL bytes, too deep, too long keys), and a sweep
 * over every prefix of a valid page and many random byte flips, which must
 * all end in a clean result or -EBADMSG (the suite also runs under ASan).
 */
#include "storage/s3/s3-xml.h"
#include "storage/http/xml.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MAX_SEEN 8

struct seen {
    unsigned n;
    char key[MAX_SEEN][S3_XML_MAX_KEY + 1];
    uint64_t size[MAX_SEEN];
    int64_t mtime[MAX_SEEN];
};

static int collect(void *opaque, const char *key, size_t key_len, uint64_t size, int64_t mtime)
{
    struct seen *s = opaque;

    assert_int_equal(strlen(key), key_len);
    if (s->n == MAX_SEEN)
        return -ENOSPC;
    memcpy(s->key[s->n], key, key_len + 1);
    s->mtime[s->n] = mtime;
    s->size[s->n++] = size;
    return 0;
}

static struct seen seen;
static struct s3_list_page page;

static int list(const char *doc)
{
    memset(&seen, 0, sizeof(seen));
    return s3_xml_parse_list(doc, strlen(doc), S3_XML_MAX_KEY, collect, &seen, &page);
}

/* The shape of AWS's ListObjectsV2 example response. */
static const char page_doc[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
    "  <Name>example-bucket</Name>\n"
    "  <Prefix>cairn/</Prefix>\n"
    "  <KeyCount>2</KeyCount>\n"
    "  <MaxKeys>1000</MaxKeys>\n"
    "  <IsTruncated>false</IsTruncated>\n"
    "  <Contents>\n"
    "    <Key>cairn/packs/000000000000002a</Key>\n"
    "    <LastModified>2024-01-25T17:19:02.000Z</LastModified>\n"
    "    <ETag>&quot;599bab3ed2c697f1d26842727561fd94&quot;</ETag>\n"
    "    <Size>16777216</Size>\n"
    "    <StorageClass>STANDARD</StorageClass>\n"
    "  </Contents>\n"
    "  <Contents>\n"
    "    <Key>cairn/packs/000000000000002b</Key>\n"
    "    <LastModified>2024-01-25T17:19:03.000Z</LastModified>\n"
    "    <ETag>&quot;7d1c2b0e8a2b0f49b7e2e1c5f43c2f54-3&quot;</ETag>\n"
    "    <Size>18446744073709551615</Size>\n"
    "    <Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>"
    "<DisplayName>someone</DisplayName></Owner>\n"
    "    <StorageClass>STANDARD_IA</StorageClass>\n"
    "  </Contents>\n"
    "</ListBucketResult>\n";

static void test_page(void **state)
{
    (void)state;
    assert_int_equal(list(page_doc), 0);
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.key[0], "cairn/packs/000000000000002a");
    assert_int_equal(seen.size[0], 16777216);
    assert_string_equal(seen.key[1], "cairn/packs/000000000000002b");
    assert_true(seen.size[1] == UINT64_MAX);
    assert_int_equal(seen.mtime[0], 1706203142);
    assert_int_equal(seen.mtime[1], 1706203143);
    assert_false(page.truncated);
    assert_true(page.has_key_count);
    assert_int_equal(page.key_count, 2);
    assert_int_equal(page.entries, 2);
    assert_string_equal(page.next_token, "");
    /* Without a callback, the page is only checked and counted. */
    assert_int_equal(s3_xml_parse_list(page_doc, strlen(page_doc), 64, NULL, NULL, &page), 0);
    assert_int_equal(page.entries, 2);
}

static void test_entities(void **state)
{
    (void)state;
    assert_int_equal(
        list("<ListBucketResult><Contents><Key>a&amp;b &lt;c&gt; &quot;d&quot; &apos;e&apos;"
             "</Key><Size>1</Size></Contents>"
             "<Contents><Key>&#65;&#x42;&#x00043;-&#xe9;-&#x20AC;-&#128512;-&#x1;</Key>"
             "<Size> 7 </Size></Contents>"
             "<Contents><Key>caf\xc3\xa9 &#x2F;x<!-- split -->y</Key><Size>0</Size></Contents>"
             "</ListBucketResult>"),
        0);
    assert_int_equal(seen.n, 3);
    assert_string_equal(seen.key[0], "a&b <c> \"d\" 'e'");
    assert_string_equal(seen.key[1], "ABC-\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x98\x80-\x01");
    assert_int_equal(seen.size[1], 7);
    assert_string_equal(seen.key[2], "caf\xc3\xa9 /xy");
    assert_false(page.has_key_count);
}

static void test_times(void **state)
{
    int64_t t;

    (void)state;
    assert_int_equal(s3_xml_parse_time("1970-01-01T00:00:00Z", &t), 0);
    assert_int_equal(t, 0);
    assert_int_equal(s3_xml_parse_time("2000-02-29T00:00:00.5Z", &t), 0);
    assert_int_equal(t, 951782400);
    assert_int_equal(s3_xml_parse_time("2100-12-31T23:59:59.123456Z", &t), 0);
    assert_int_equal(t, 4133980799);
    static const char *const bad[] = {
        "",
        "2024-01-25",
        "2024-01-25T17:19:02",
        "2024-01-25T17:19:02+01:00",
        "2024-13-25T17:19:02Z",
        "2024-02-30T17:19:02Z",
        "2024-01-25T24:00:00Z",
        "2024-01-25T17:19:02.Z",
        "2024-01-25T17:19:02ZZ",
        "1969-12-31T23:59:59Z",
        "2O24-01-25T17:19:02Z",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(s3_xml_parse_time(bad[i], &t), -EBADMSG);
    /* No <LastModified>: 0; a bad one or two of them fail the page. */
    assert_int_equal(list("<ListBucketResult><Contents><Key>k</Key><Size>1</Size></Contents>"
                          "</ListBucketResult>"),
                     0);
    assert_int_equal(seen.mtime[0], 0);
    assert_int_equal(list("<ListBucketResult><Contents><Key>k</Key><Size>1</Size>"
                          "<LastModified>yesterday</LastModified></Contents></ListBucketResult>"),
                     -EBADMSG);
    assert_int_equal(list("<ListBucketResult><Contents><Key>k</Key><Size>1</Size>"
                          "<LastModified>2024-01-25T17:19:02Z</LastModified>"
                          "<LastModified>2024-01-25T17:19:02Z</LastModified></Contents>"
                          "</ListBucketResult>"),
                     -EBADMSG);
}

static void test_truncated(void **state)
{
    (void)state;
    assert_int_equal(list("<?xml version='1.0'?>\r\n<ListBucketResult xmlns='x'>"
                          "<Name>b</Name><KeyCount>1</KeyCount><MaxKeys>1</MaxKeys>"
                          "<IsTruncated>true</IsTruncated>"
                          "<Contents><Key>k1</Key><Size>3</Size></Contents>"
                          "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
                          "</NextContinuationToken></ListBucketResult>"),
                     0);
    assert_true(page.truncated);
    assert_string_equal(page.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
    assert_int_equal(seen.n, 1);
    /* Truncated without a token: it could not be continued. */
    assert_int_equal(list("<ListBucketResult><IsTruncated>true</IsTruncated>"
                          "</ListBucketResult>"),
                     -EBADMSG);
}

static void test_empty(void **state)
{
    (void)state;
    assert_int_equal(list("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                          "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                          "<Name>b</Name><Prefix>p/</Prefix><KeyCount>0</KeyCount>"
                          "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
                          "</ListBucketResult>"),
                     0);
    assert_int_equal(seen.n, 0);
    assert_int_equal(page.key_count, 0);
    assert_int_equal(list("\xef\xbb\xbf<ListBucketResult/>"), 0);
    assert_int_equal(seen.n, 0);
}

static void test_key_limits(void **state)
{
    char doc[S3_XML_MAX_KEY + 200], key[S3_XML_MAX_KEY + 2];
    (void)state;

    memset(key, 'k', S3_XML_MAX_KEY);
    key[S3_XML_MAX_KEY] = '\0';
    snprintf(doc, sizeof(doc),
             "<ListBucketResult><Contents><Key>%s</Key><Size>1</Size></Contents>"
             "</ListBucketResult>",
             key);
    assert_int_equal(list(doc), 0);
    assert_int_equal(strlen(seen.key[0]), S3_XML_MAX_KEY);
    /* One byte over the caller's maximum is an error, not a cut key. */
    assert_int_equal(s3_xml_parse_list(doc, strlen(doc), S3_XML_MAX_KEY - 1, collect, &seen, &page),
                     -ENAMETOOLONG);
    /* An entity that decodes past the limit too. */
    const char *amp = "<ListBucketResult><Contents><Key>abc&amp;</Key><Size>1</Size></Contents>"
                      "</ListBucketResult>";
    assert_int_equal(s3_xml_parse_list(amp, strlen(amp), 3, collect, &seen, &page), -ENAMETOOLONG);
    assert_int_equal(s3_xml_parse_list(amp, strlen(amp), 4, collect, &seen, &page), 0);
    assert_int_equal(s3_xml_parse_list(amp, strlen(amp), 0, collect, &seen, &page), -EINVAL);
    assert_int_equal(s3_xml_parse_list(amp, strlen(amp), S3_XML_MAX_KEY + 1, collect, &seen, &page),
                     -EINVAL);
}

/* The callback sees nothing of a page that is broken further down, and can stop the parse. */
static void test_callback(void **state)
{
    (void)state;
    assert_int_equal(list("<ListBucketResult><Contents><Key>a</Key><Size>1</Size></Contents>"
                          "<Contents><Key>b</Key><Size>x</Size></Contents></ListBucketResult>"),
                     -EBADMSG);
    assert_int_equal(seen.n, 0);
    assert_int_equal(page.entries, 0);
    char many[2048] = "<ListBucketResult>";
    for (int i = 0; i < MAX_SEEN + 2; i++)
        strcat(many, "<Contents><Key>k</Key><Size>1</Size></Contents>");
    strcat(many, "</ListBucketResult>");
    assert_int_equal(list(many), -ENOSPC);
    assert_int_equal(seen.n, MAX_SEEN);
}

static void test_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "   ",
        "<?xml version='1.0'?>",
        "<ListBucketResult>",
        "<ListBucketResult></ListBucketResul>",
        "<ListBucketResult></ListBucketResult><ListBucketResult/>",
        "<ListBucketResult></ListBucketResult>junk",
        "junk<ListBucketResult></ListBucketResult>",
        "<Error></Error>",
        "<ListBucketResult><a></b></ListBucketResult>",
        "<ListBucketResult><a x=1/></ListBucketResult>",
        "<ListBucketResult><a x='1/></ListBucketResult>",
        "<ListBucketResult><a x='<'/></ListBucketResult>",
        "<ListBucketResult><ax='1'/></ListBucketResult>",
        "<ListBucketResult><a x='1'y='2'/></ListBucketResult>",
        "<ListBucketResult><!DOCTYPE x></ListBucketResult>",
        "<ListBucketResult><![CDATA[x]]></ListBucketResult>",
        "<ListBucketResult><!-- x </ListBucketResult>",
        "<ListBucketResult><? x </ListBucketResult>",
        "<ListBucketResult>a & b</ListBucketResult>",
        "<ListBucketResult>&nbsp;</ListBucketResult>",
        "<ListBucketResult>&#0;</ListBucketResult>",
        "<ListBucketResult>&#xD800;</ListBucketResult>",
        "<ListBucketResult>&#x110000;</ListBucketResult>",
        "<ListBucketResult>&#x;</ListBucketResult>",
        "<ListBucketResult>&#12a;</ListBucketResult>",
        "<ListBucketResult>&#x000000041;</ListBucketResult>",
        "<ListBucketResult>&amp</ListBucketResult>",
        "<ListBucketResult><1a/></ListBucketResult>",
        "<ListBucketResult>< a/></ListBucketResult>",
        "<ListBucketResult></ ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Key>b</Key><Size>1</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key>a<b/></Key><Size>1</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Size>18446744073709551616</Size></Contents>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Size>1 2</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Size></Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated><IsTruncated>false</IsTruncated>"
        "</ListBucketResult>",
        "<ListBucketResult><KeyCount>99999999999999999999999</KeyCount></ListBucketResult>",
    };
    char deep[1024] = "<ListBucketResult>";
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (list(bad[i]) != -EBADMSG)
            fail_msg("accepted: %s", bad[i]);
        assert_int_equal(seen.n, 0);
    }
    /* Deeper than XML_MAX_DEPTH. */
    for (int i = 0; i < XML_MAX_DEPTH; i++)
        strcat(deep, "<a>");
    assert_int_equal(list(deep), -EBADMSG);
    /* A token longer than its buffer. */
    char token[S3_XML_MAX_TOKEN + 100];
    int n = snprintf(token, sizeof(token), "<ListBucketResult><NextContinuationToken>");
    memset(token + n, 't', S3_XML_MAX_TOKEN);
    strcpy(token + n + S3_XML_MAX_TOKEN, "</NextContinuationToken></ListBucketResult>");
    assert_int_equal(list(token), -EBADMSG);
    /* A NUL byte inside an otherwise good page. */
    char nul[] = "<ListBucketResult><Name>a\0b</Name></ListBucketResult>";
    assert_int_equal(s3_xml_parse_list(nul, sizeof(nul) - 1, 64, collect, &seen, &page), -EBADMSG);
    /* Only len bytes count: the same page cut before its last '>' is unterminated. */
    assert_int_equal(s3_xml_parse_list(page_doc, strlen(page_doc) - 2, 64, collect, &seen, &page),
                     -EBADMSG);
}

static void test_error(void **state)
{
    struct xml_error err;
    static const char slow[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                               "<Error><Code>SlowDown</Code><Message>Please reduce your request "
                               "rate.</Message><RequestId>4442587FB7D0A2F9</RequestId>"
                               "<HostId>eftixk72aD6Ap51TnqcoF8eFidJG9Z/2mkiDFu8yU9AS1ed4OpIszj7Ui"
                               "NEHGran</HostId></Error>";
    static const char nsb[] = "<Error><Code>NoSuchBucket</Code><Message>The specified bucket "
                              "does not exist &amp; never did &#x2014; sorry</Message>"
                              "<BucketName>nope</BucketName></Error>";
    (void)state;

    assert_int_equal(xml_parse_error(slow, strlen(slow), &err), 0);
    assert_string_equal(err.code, "SlowDown");
    assert_string_equal(err.message, "Please reduce your request rate.");
    assert_int_equal(xml_parse_error(nsb, strlen(nsb), &err), 0);
    assert_string_equal(err.code, "NoSuchBucket");
    assert_string_equal(err.message,
                        "The specified bucket does not exist & never did \xe2\x80\x94 sorry");
    assert_int_equal(xml_parse_error("<Error/>", 8, &err), 0);
    assert_string_equal(err.code, "");

    /* A long message is cut, and not inside a UTF-8 character. */
    char doc[2048];
    int n = snprintf(doc, sizeof(doc), "<Error><Code>X</Code><Message>");
    for (int i = 0; i < 200; i++)
        n += snprintf(doc + n, sizeof(doc) - (size_t)n, "\xe2\x82\xac");
    snprintf(doc + n, sizeof(doc) - (size_t)n, "</Message></Error>");
    assert_int_equal(xml_parse_error(doc, strlen(doc), &err), 0);
    assert_int_equal(strlen(err.message), 255 / 3 * 3);

    static const char *const bad[] = {
        "<Error><Code>X</Code>",
        "<ListBucketResult/>",
        "<Error><Code>A</Code><Code>B</Code></Error>",
        "<Error><Code>A<b/></Code></Error>",
        "<Error><Message>&bogus;</Message></Error>",
        "<Error><Code>A</Code></Error><Error/>",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (xml_parse_error(bad[i], strlen(bad[i]), &err) != -EBADMSG)
            fail_msg("accepted: %s", bad[i]);
        assert_string_equal(err.code, "");
    }
}

/*
 * Every prefix of a valid page is parsed from its own heap copy of exactly
 * that length (so ASan sees any read past it), then random byte flips: each
 * must end in 0 or an error, with the callback's keys always within bounds.
 */
static void test_prefixes_and_flips(void **state)
{
    size_t len = strlen(page_doc);
    struct xml_error err;
    uint64_t rng = 0x9e3779b97f4a7c15u;
    (void)state;

    for (size_t cut = 0; cut <= len; cut++) {
        char *copy = malloc(cut ? cut : 1);
        assert_non_null(copy);
        memcpy(copy, page_doc, cut);
        memset(&seen, 0, sizeof(seen));
        int r = s3_xml_parse_list(copy, cut, S3_XML_MAX_KEY, collect, &seen, &page);
        assert_int_equal(r, cut >= len - 1 ? 0 : -EBADMSG);
        r = xml_parse_error(copy, cut, &err);
        assert_int_equal(r, -EBADMSG);
        free(copy);
    }
    for (int round = 0; round < 20000; round++) {
        char *copy = malloc(len);
        assert_non_null(copy);
        memcpy(copy, page_doc, len);
        int flips = 1 + round % 4;
        for (int f = 0; f < flips; f++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t at = (size_t)(rng % len);
            /* Half the flips are bytes that matter to the syntax. */
            copy[at] = (rng >> 32) & 1 ? "<>/&;#=\"'\0x"[(rng >> 40) % 11] : (char)(rng >> 48);
        }
        memset(&seen, 0, sizeof(seen));
        int r = s3_xml_parse_list(copy, len, S3_XML_MAX_KEY, collect, &seen, &page);
        assert_true(r == 0 || r == -EBADMSG || r == -ENAMETOOLONG);
        if (r == 0)
            assert_true(seen.n <= 2);
        r = xml_parse_error(copy, len, &err);
        assert_true(r == -EBADMSG);
        free(copy);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_page),     cmocka_unit_test(test_entities),
        cmocka_unit_test(test_times),    cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_empty),    cmocka_unit_test(test_key_limits),
        cmocka_unit_test(test_callback), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_error),    cmocka_unit_test(test_prefixes_and_flips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
