/*
 * Unit tests of the SigV4 signer: the four examples of the S3 API reference
 * ("Signature Calculations for the Authorization Header: Transferring Payload
 * in a Single Chunk"), the first one's canonical request byte for byte, the
 * encoding of paths and query parameters, header normalisation, a host with
 * a port, a session token, the signing-key cache and its invalidation, and
 * the refusals (malformed input, every kind of overflow).
 *
 * The expected signatures not taken from the AWS documentation were computed
 * by an independent implementation of the documented algorithm (Python's
 * hmac and hashlib), which reproduces the documentation's examples.
 */
#include "storage/s3/s3-sign.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define AKID "AKIAIOSFODNN7EXAMPLE"
#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define HOST "examplebucket.s3.amazonaws.com"
/* 2013-05-24T00:00:00Z */
#define T2013 ((time_t)1369353600)
#define SCOPE AKID "/20130524/us-east-1/s3/aws4_request"

static struct s3_signed out;

static struct s3_signer *new_signer(const char *token)
{
    struct s3_signer *s;
    assert_int_equal(s3_signer_new(&s, "us-east-1", "s3"), 0);
    assert_int_equal(s3_signer_set_credentials(s, AKID, SECRET, token), 0);
    return s;
}

/* A GET of path on HOST at T2013 with an empty body and nothing else. */
static struct s3_request plain_get(const char *path)
{
    return (struct s3_request){.method = "GET",
                               .path = path,
                               .host = HOST,
                               .payload_sha256 = S3_EMPTY_SHA256,
                               .now = T2013};
}

static const struct s3_header range_header[] = {{"Range", "bytes=0-9"}};

static struct s3_request example_get_object(void)
{
    struct s3_request req = plain_get("/test.txt");
    req.headers = range_header;
    req.n_headers = 1;
    return req;
}

static void test_get_object_canonical_request(void **state)
{
    static const char expected[] =
        "GET\n"
        "/test.txt\n"
        "\n"
        "host:examplebucket.s3.amazonaws.com\n"
        "range:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n"
        "\n"
        "host;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = example_get_object();
    char canonical[S3_SIGN_CANONICAL_SIZE];
    char hash[S3_SHA256_HEX_SIZE];
    struct iovec iov;
    (void)state;

    assert_int_equal(s3_canonical_request(s, &req, canonical, sizeof(canonical)),
                     (ssize_t)strlen(expected));
    assert_memory_equal(canonical, expected, sizeof(expected));
    /* The hash the documentation's StringToSign carries. */
    iov = (struct iovec){.iov_base = canonical, .iov_len = strlen(canonical)};
    assert_int_equal(s3_sha256_hex(&iov, 1, hash), 0);
    assert_string_equal(hash, "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
    s3_signer_free(s);
}

static void test_get_object(void **state)
{
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = example_get_object();
    (void)state;

    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.amz_date, "20130524T000000Z");
    assert_string_equal(out.path, "/test.txt");
    assert_string_equal(out.query, "");
    assert_string_equal(out.security_token, "");
    assert_string_equal(out.signature,
                        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    assert_string_equal(out.authorization,
                        "AWS4-HMAC-SHA256 Credential=" SCOPE
                        ", SignedHeaders=host;range;x-amz-content-sha256;x-amz-date"
                        ", Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036"
                        "bdb41");
    s3_signer_free(s);
}

static void test_put_object(void **state)
{
    static const struct s3_header headers[] = {
        {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
        {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
    };
    static const char expected_canonical[] =
        "PUT\n"
        "/test%24file.text\n"
        "\n"
        "date:Fri, 24 May 2013 00:00:00 GMT\n"
        "host:examplebucket.s3.amazonaws.com\n"
        "x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
        "x-amz-date:20130524T000000Z\n"
        "x-amz-storage-class:REDUCED_REDUNDANCY\n"
        "\n"
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
    /* The payload in two pieces: the hash runs over the iovecs in order. */
    char part1[] = "Welcome to ", part2[] = "Amazon S3.";
    struct iovec body[] = {{part1, strlen(part1)}, {part2, strlen(part2)}};
    char payload_hash[S3_SHA256_HEX_SIZE];
    char canonical[S3_SIGN_CANONICAL_SIZE];
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = {.method = "PUT",
                             .path = "/test$file.text",
                             .host = HOST,
                             .headers = headers,
                             .n_headers = 2,
                             .payload_sha256 = payload_hash,
                             .now = T2013};
    (void)state;

    assert_int_equal(s3_sha256_hex(body, 2, payload_hash), 0);
    assert_string_equal(payload_hash,
                        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
    assert_true(s3_canonical_request(s, &req, canonical, sizeof(canonical)) > 0);
    assert_string_equal(canonical, expected_canonical);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.path, "/test%24file.text");
    assert_string_equal(out.authorization,
                        "AWS4-HMAC-SHA256 Credential=" SCOPE
                        ", SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;"
                        "x-amz-storage-class"
                        ", Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece1"
                        "08bd");
    s3_signer_free(s);
}

static void test_get_bucket_lifecycle(void **state)
{
    static const struct s3_param params[] = {{"lifecycle", NULL}};
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = plain_get("/");
    (void)state;

    req.params = params;
    req.n_params = 1;
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.path, "/");
    assert_string_equal(out.query, "lifecycle=");
    assert_string_equal(out.authorization,
                        "AWS4-HMAC-SHA256 Credential=" SCOPE
                        ", SignedHeaders=host;x-amz-content-sha256;x-amz-date"
                        ", Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a013678"
                        "3543");
    s3_signer_free(s);
}

static void test_list_objects(void **state)
{
    /* Out of order on purpose: the signer sorts. */
    static const struct s3_param params[] = {{"prefix", "J"}, {"max-keys", "2"}};
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = plain_get("/");
    (void)state;

    req.params = params;
    req.n_params = 2;
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.query, "max-keys=2&prefix=J");
    assert_string_equal(out.signature,
                        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
    s3_signer_free(s);
}

static void test_uri_encode(void **state)
{
    char buf[128];
    (void)state;

    assert_int_equal(s3_uri_encode("a b+c:d=e/\xc3\xa9", true, buf, sizeof(buf)), 24);
    assert_string_equal(buf, "a%20b%2Bc%3Ad%3De/%C3%A9");
    assert_int_equal(s3_uri_encode("a b+c:d=e/\xc3\xa9", false, buf, sizeof(buf)), 26);
    assert_string_equal(buf, "a%20b%2Bc%3Ad%3De%2F%C3%A9");
    /* The unreserved set stays as it is; everything else, '*' and '!' too, is encoded. */
    assert_true(s3_uri_encode("AZaz09-_.~*!'()$&,;@?#[]", true, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "AZaz09-_.~%2A%21%27%28%29%24%26%2C%3B%40%3F%23%5B%5D");
    /* Once: a '%' in a key is a character of the key, not an escape. */
    assert_true(s3_uri_encode("/a%2Fb", true, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "/a%252Fb");
    /* No normalisation of the path. */
    assert_true(s3_uri_encode("/b//p/./../k", true, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "/b//p/./../k");
    /* Control and high bytes, uppercase hex. */
    assert_true(s3_uri_encode("\x01\x7f\xff", true, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "%01%7F%FF");
    assert_int_equal(s3_uri_encode("", true, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
}

static void test_uri_encode_overflow(void **state)
{
    char buf[16];
    (void)state;

    /* Exactly enough room, then one byte short: refused, not cut. */
    assert_int_equal(s3_uri_encode("abcdefg", true, buf, 8), 7);
    assert_string_equal(buf, "abcdefg");
    assert_int_equal(s3_uri_encode("abcdefgh", true, buf, 8), -ENAMETOOLONG);
    assert_int_equal(s3_uri_encode("ab\xc3\xa9", true, buf, 9), 8);
    assert_string_equal(buf, "ab%C3%A9");
    assert_int_equal(s3_uri_encode("ab\xc3\xa9", true, buf, 8), -ENAMETOOLONG);
    /* An escape never goes out in part. */
    assert_int_equal(s3_uri_encode("\xc3", true, buf, 3), -ENAMETOOLONG);
    assert_int_equal(s3_uri_encode("", true, buf, 0), -ENAMETOOLONG);
    assert_int_equal(s3_uri_encode("", true, buf, 1), 0);
}

static void test_query_encoding(void **state)
{
    static const struct s3_param params[] = {
        {"prefix", "a b/c+d"}, {"x", "2"},  {"x", "10"},   {"empty", ""},
        {"A", "upper"},        {"a~", "1"}, {"a b", "sp"},
    };
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = plain_get("/bucket");
    (void)state;

    req.params = params;
    req.n_params = sizeof(params) / sizeof(params[0]);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    /* Sorted by encoded name ("a%20b" < "a~"), then value ("10" < "2"). */
    assert_string_equal(out.query, "A=upper&a%20b=sp&a~=1&empty=&prefix=a%20b%2Fc%2Bd&x=10&x=2");
    s3_signer_free(s);
}

static void test_header_normalisation(void **state)
{
    static const struct s3_header headers[] = {
        {"X-Amz-Meta-Note", "  one   two \t three  "},
        {"Content-Type", "text/plain"},
    };
    char canonical[S3_SIGN_CANONICAL_SIZE];
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = plain_get("/k");
    (void)state;

    req.headers = headers;
    req.n_headers = 2;
    assert_true(s3_canonical_request(s, &req, canonical, sizeof(canonical)) > 0);
    assert_non_null(strstr(canonical, "\n\ncontent-type:text/plain\nhost:" HOST "\n"));
    assert_non_null(strstr(canonical, "\nx-amz-meta-note:one two three\n"));
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_non_null(strstr(out.authorization, ", SignedHeaders=content-type;host;"
                                              "x-amz-content-sha256;x-amz-date;x-amz-meta-note, "));
    s3_signer_free(s);
}

static void test_host_with_port(void **state)
{
    char canonical[S3_SIGN_CANONICAL_SIZE];
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = plain_get("/cairn/packs/0000");
    (void)state;

    req.host = "127.0.0.1:9000";
    assert_true(s3_canonical_request(s, &req, canonical, sizeof(canonical)) > 0);
    assert_non_null(strstr(canonical, "\n\nhost:127.0.0.1:9000\nx-amz-content-sha256:"));
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.signature,
                        "9e80412ea918d7a671992ad25b352dda73b4f0b619a9311befdf87e21a742d4d");
    s3_signer_free(s);
}

static void test_session_token(void **state)
{
    static const char token[] = "FQoGZXIvYXdzEXAMPLETOKEN//+=";
    char canonical[S3_SIGN_CANONICAL_SIZE];
    struct s3_signer *s = new_signer(token);
    struct s3_request req = plain_get("/test.txt");
    (void)state;

    assert_true(s3_canonical_request(s, &req, canonical, sizeof(canonical)) > 0);
    assert_non_null(strstr(canonical, "\nx-amz-security-token:FQoGZXIvYXdzEXAMPLETOKEN//+=\n\n"));
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.security_token, token);
    assert_non_null(strstr(out.authorization, ", SignedHeaders=host;x-amz-content-sha256;"
                                              "x-amz-date;x-amz-security-token, "));
    assert_string_equal(out.signature,
                        "80920717fe87ebbf1c2367daf303ed0959fe97d941252d55b92443f5f5ecf6e5");

    /* Long-term keys again: the token leaves the signed headers. */
    assert_int_equal(s3_signer_set_credentials(s, AKID, SECRET, ""), 0);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.security_token, "");
    assert_null(strstr(out.authorization, "x-amz-security-token"));
    s3_signer_free(s);
}

static void test_key_cache(void **state)
{
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = plain_get("/test.txt");
    (void)state;

    assert_int_equal(s3_signer_key_derivations(s), 0);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    req.now = T2013 + 86399; /* the same day */
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_int_equal(s3_signer_key_derivations(s), 1);

    /* The next day needs the next day's key. */
    req.now = T2013 + 86400 + 3723;
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.amz_date, "20130525T010203Z");
    assert_string_equal(out.signature,
                        "16a6aa34341d146d5e92e54c026b1c3a4ed538a4431214522f8656903197bfdc");
    assert_int_equal(s3_signer_key_derivations(s), 2);
    s3_signer_free(s);
}

static void test_key_cache_invalidation(void **state)
{
    struct s3_signer *s = new_signer(NULL);
    struct s3_request req = plain_get("/test.txt");
    (void)state;

    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.signature,
                        "df548e2ce037944d03f3e68682813b093763996d597cf890ca3d9037fd231eb4");
    assert_int_equal(s3_signer_key_derivations(s), 1);

    /* New credentials the same day: a cached key would give the old signature. */
    assert_int_equal(s3_signer_set_credentials(s, AKID, "NEWSECRETnewsecret", NULL), 0);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.signature,
                        "46df0a92dc8a1ee3aff8b1197a2e49cf2dd288c61414dc530d5e681a0e0cf40d");
    assert_int_equal(s3_signer_key_derivations(s), 2);

    /* Refreshed credentials are new ones even when they look the same. */
    assert_int_equal(s3_signer_set_credentials(s, AKID, SECRET, NULL), 0);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.signature,
                        "df548e2ce037944d03f3e68682813b093763996d597cf890ca3d9037fd231eb4");
    assert_int_equal(s3_signer_key_derivations(s), 3);

    /* Another region, another key; setting the same region again keeps it. */
    assert_int_equal(s3_signer_set_region(s, "eu-west-1"), 0);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.signature,
                        "825fdd4064cbd5437e642b9567d9f2362b8c853001b840d63112e9e74405681a");
    assert_non_null(strstr(out.authorization, "/20130524/eu-west-1/s3/aws4_request, "));
    assert_int_equal(s3_signer_set_region(s, "eu-west-1"), 0);
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_int_equal(s3_signer_key_derivations(s), 4);
    s3_signer_free(s);
}

static void test_refusals(void **state)
{
    static const struct s3_header reserved[] = {{"X-Amz-Date", "20130524T000000Z"}};
    static const struct s3_header crlf[] = {{"x-amz-meta-a", "b\r\nx-evil: 1"}};
    static const struct s3_header bad_name[] = {{"x amz", "1"}};
    static const struct s3_header twice[] = {{"Range", "bytes=0-1"}, {"range", "bytes=2-3"}};
    struct s3_signer *s, *bare;
    struct s3_request req;
    (void)state;

    s = new_signer(NULL);
    req = plain_get("/k");
    req.headers = reserved;
    req.n_headers = 1;
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);
    req.headers = crlf;
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);
    req.headers = bad_name;
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);
    req.headers = twice;
    req.n_headers = 2;
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);

    req = plain_get("k"); /* not from '/' */
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);
    req = plain_get("/k");
    req.payload_sha256 = "UNSIGNED";
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);
    req = plain_get("/k");
    req.method = "get";
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);
    req = plain_get("/k");
    req.host = "evil host";
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);

    /* Credentials that would break the header, and a signer without any. */
    assert_int_equal(s3_signer_set_credentials(s, "AK/ID", SECRET, NULL), -EINVAL);
    assert_int_equal(s3_signer_set_credentials(s, AKID, "", NULL), -EINVAL);
    assert_int_equal(s3_signer_set_credentials(s, AKID, SECRET, "tok\nen"), -EINVAL);
    assert_int_equal(s3_signer_new(&bare, "US-EAST-1", "s3"), -EINVAL);
    assert_null(bare);
    assert_int_equal(s3_signer_new(&bare, "us-east-1", "s3"), 0);
    req = plain_get("/k");
    assert_int_equal(s3_sign(bare, &req, &out), -EINVAL);
    bare = s3_signer_free(bare);
    assert_null(bare);

    /* A refused replacement keeps the old credentials. */
    req = example_get_object();
    assert_int_equal(s3_sign(s, &req, &out), 0);
    assert_string_equal(out.signature,
                        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
    s3_signer_free(s);
}

static void test_overflow(void **state)
{
    struct s3_signer *s = new_signer(NULL);
    struct s3_header headers[S3_SIGN_HEADERS_MAX + 1];
    struct s3_param params[2];
    char names[S3_SIGN_HEADERS_MAX + 1][16];
    char *big = malloc(S3_SIGN_TOKEN_MAX + 2);
    char small[64];
    struct s3_request req;
    (void)state;

    assert_non_null(big);
    /* '/' and 1400 'é' is 2801 bytes of path and 8401 encoded: over the path's 4096. */
    big[0] = '/';
    for (size_t i = 0; i < 1400; i++)
        memcpy(big + 1 + 2 * i, "\xc3\xa9", 2);
    big[2801] = '\0';
    req = plain_get("/");
    req.path = big;
    assert_int_equal(s3_sign(s, &req, &out), -ENAMETOOLONG);

    /* A query over its size. */
    req = plain_get("/");
    params[0] = (struct s3_param){"prefix", big};
    req.params = params;
    req.n_params = 1;
    assert_int_equal(s3_sign(s, &req, &out), -ENAMETOOLONG);

    /* A header value over its maximum, and a name. */
    memset(big, 'v', S3_SIGN_HEADER_VALUE_MAX + 1);
    big[S3_SIGN_HEADER_VALUE_MAX + 1] = '\0';
    req = plain_get("/");
    headers[0] = (struct s3_header){"x-amz-meta-big", big};
    req.headers = headers;
    req.n_headers = 1;
    assert_int_equal(s3_sign(s, &req, &out), -ENAMETOOLONG);
    big[S3_SIGN_HEADER_VALUE_MAX] = '\0';
    assert_int_equal(s3_sign(s, &req, &out), 0);
    memset(big, 'n', S3_SIGN_HEADER_NAME_MAX + 1);
    big[S3_SIGN_HEADER_NAME_MAX + 1] = '\0';
    headers[0] = (struct s3_header){big, "v"};
    assert_int_equal(s3_sign(s, &req, &out), -ENAMETOOLONG);

    /* More headers than the limit. */
    for (size_t i = 0; i <= S3_SIGN_HEADERS_MAX; i++) {
        snprintf(names[i], sizeof(names[i]), "x-amz-meta-%zu", i);
        headers[i] = (struct s3_header){names[i], "v"};
    }
    req.n_headers = S3_SIGN_HEADERS_MAX + 1;
    assert_int_equal(s3_sign(s, &req, &out), -EINVAL);
    req.n_headers = S3_SIGN_HEADERS_MAX;
    assert_int_equal(s3_sign(s, &req, &out), 0);

    /* The canonical request into a buffer too small for it. */
    req = example_get_object();
    assert_int_equal(s3_canonical_request(s, &req, small, sizeof(small)), -ENAMETOOLONG);

    /* Credentials over their maxima. */
    memset(big, 't', S3_SIGN_TOKEN_MAX + 1);
    big[S3_SIGN_TOKEN_MAX + 1] = '\0';
    assert_int_equal(s3_signer_set_credentials(s, AKID, SECRET, big), -ENAMETOOLONG);
    big[S3_SIGN_TOKEN_MAX] = '\0';
    assert_int_equal(s3_signer_set_credentials(s, AKID, SECRET, big), 0);
    big[S3_SIGN_SECRET_MAX + 1] = '\0';
    assert_int_equal(s3_signer_set_credentials(s, AKID, big, NULL), -ENAMETOOLONG);
    memset(big, 'r', S3_SIGN_REGION_MAX + 1);
    big[S3_SIGN_REGION_MAX + 1] = '\0';
    assert_int_equal(s3_signer_set_region(s, big), -ENAMETOOLONG);
    big[S3_SIGN_REGION_MAX] = '\0';
    assert_int_equal(s3_signer_set_region(s, big), 0);
    free(big);
    s3_signer_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_object_canonical_request),
        cmocka_unit_test(test_get_object),
        cmocka_unit_test(test_put_object),
        cmocka_unit_test(test_get_bucket_lifecycle),
        cmocka_unit_test(test_list_objects),
        cmocka_unit_test(test_uri_encode),
        cmocka_unit_test(test_uri_encode_overflow),
        cmocka_unit_test(test_query_encoding),
        cmocka_unit_test(test_header_normalisation),
        cmocka_unit_test(test_host_with_port),
        cmocka_unit_test(test_session_token),
        cmocka_unit_test(test_key_cache),
        cmocka_unit_test(test_key_cache_invalidation),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
