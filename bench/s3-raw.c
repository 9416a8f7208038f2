/*
 * s3-raw: the peer of backend-bench --url s3://... - the same S3 requests
 * made as plainly as libcurl allows, so the backend's own cost shows as a
 * ratio to a bare HTTP client's.
 *
 *   s3-raw --endpoint http://HOST:PORT --bucket B [--prefix P] [--region R]
 *          --size BYTES --iterations N [--range BYTES] [--list=50]
 *
 * Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and
 * AWS_SESSION_TOKEN when set (temporary R2 credentials: sent, signed, as
 * x-amz-security-token). One curl easy handle does every request, path
 * style, signed by libcurl itself (CURLOPT_AWS_SIGV4 "aws:amz:REGION:s3"),
 * with x-amz-content-sha256 set to the SHA-256 of the body (computed for
 * every put, inside the timing: S3 wants it, and the backend pays for it
 * too). The handle keeps its connection alive from one request to the next,
 * as the backend's connection pool does; the connection is opened by a
 * first, untimed request, as the backend is opened before backend-bench's
 * clock starts.
 *
 * The operations are backend-bench's, in its order, under the same keys
 * below the prefix (bench/raw-common.h runs them): put of PREFIXobj/oN (PUT),
 * get (GET), range (GET with Range: the last BYTES bytes), head (HEAD),
 * list_50 (ListObjectsV2 of PREFIXla/, holding 50 objects of 1 KiB put
 * beforehand, untimed, unless they are there already; every page)
 * and delete (DELETE). A PUT does not wait for "100 Continue" (see main()).
 *
 * Output: backend-bench's JSON, with the samples under modes.libcurl. Exit 1
 * when a request fails or a read returns other bytes than were written.
 */

#include "raw-common.h"

#include <curl/curl.h>
#include <getopt.h>
#include <openssl/sha.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_URL 2048

struct s3_raw {
    struct raw_bench b; /* first: the callbacks' struct raw_bench * is this */
    char endpoint[512];
    char bucket[128];
    char sigv4[128];
    char userpwd[512];
    char token_header[4096]; /* "x-amz-security-token: ..." or empty */
};

static void hex(char *out, const uint8_t *in, size_t len)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = '\0';
}

/*
 * One request on the kept handle. `body`/`body_len` is a PUT's body (NULL:
 * no body); `range` a "Range:" header or NULL. Returns the HTTP status, or
 * -1 when the transfer failed (the message on stderr).
 */
static long request(struct s3_raw *r, const char *method, const char *url, const uint8_t *body,
                    size_t body_len, const char *range)
{
    uint8_t digest[SHA256_DIGEST_LENGTH];
    char sha_header[32 + 2 * SHA256_DIGEST_LENGTH + 1];
    struct curl_slist *headers = NULL;

    SHA256(body ? body : (const uint8_t *)"", body ? body_len : 0, digest);
    strcpy(sha_header, "x-amz-content-sha256: ");
    hex(sha_header + strlen(sha_header), digest, sizeof(digest));
    headers = curl_slist_append(headers, sha_header);
    if (r->token_header[0])
        headers = curl_slist_append(headers, r->token_header);
    if (range)
        headers = curl_slist_append(headers, range);
    return raw_perform(&r->b, method, url, body, body_len, headers);
}

static void object_url(const struct s3_raw *r, char *out, size_t len, const char *dir, unsigned i)
{
    snprintf(out, len, "%s/%s/%s%s/o%06u", r->endpoint, r->bucket, r->b.prefix, dir, i);
}

static long object(struct raw_bench *b, const char *method, const char *dir, unsigned i,
                   const uint8_t *body, size_t body_len, const char *range)
{
    struct s3_raw *r = (struct s3_raw *)b;
    char url[MAX_URL];

    object_url(r, url, sizeof(url), dir, i);
    return request(r, method, url, body, body_len, range);
}

/* Every page of ListObjectsV2 of PREFIXla/; the number of <Key>s in *count. */
static int list(struct raw_bench *b, unsigned *count)
{
    struct s3_raw *r = (struct s3_raw *)b;
    char url[MAX_URL], full[600], enc_prefix[1024], token[1024] = "";

    *count = 0;
    /* The prefix percent-encoded as SigV4's canonical query wants it ('/' too), so the
     * query as sent is already canonical: its parameters are in order, too. */
    snprintf(full, sizeof(full), "%sla/", b->prefix);
    raw_encode(full, false, enc_prefix, sizeof(enc_prefix));
    do {
        if (token[0])
            snprintf(url, sizeof(url), "%s/%s?continuation-token=%s&list-type=2&prefix=%s",
                     r->endpoint, r->bucket, token, enc_prefix);
        else
            snprintf(url, sizeof(url), "%s/%s?list-type=2&prefix=%s", r->endpoint, r->bucket,
                     enc_prefix);
        long status = request(r, "GET", url, NULL, 0, NULL);
        if (raw_expect(b, status, 200, "list", 0) < 0)
            return -1;
        b->body[b->len] = '\0';
        for (const char *p = (const char *)b->body; (p = strstr(p, "<Key>")); p += 5)
            (*count)++;
        token[0] = '\0';
        const char *t = strstr((const char *)b->body, "<NextContinuationToken>");
        if (t && strstr((const char *)b->body, "<IsTruncated>true</IsTruncated>")) {
            char raw_token[1024];
            size_t o = 0;
            for (t += strlen("<NextContinuationToken>");
                 *t && *t != '<' && o + 1 < sizeof(raw_token); t++)
                raw_token[o++] = *t;
            raw_token[o] = '\0';
            /* Tokens are opaque; encoded whole so any byte survives the query. */
            raw_encode(raw_token, false, token, sizeof(token));
        }
    } while (token[0]);
    return 0;
}

static const struct raw_service s3_service = {
    .name = "s3-raw",
    .list_noun = "keys",
    .range_name = "Range",
    .put_status = 200,
    .delete_status = 204,
    .object = object,
    .list = list,
};

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"endpoint", required_argument, NULL, 'e'},
        {"bucket", required_argument, NULL, 'b'},
        {"region", required_argument, NULL, 'r'},
        RAW_COMMON_OPTIONS,
        {0},
    };
    struct s3_raw r = {.b = {.svc = &s3_service, .iterations = 10}};
    const char *region = "us-east-1";
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    int opt, status;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'e':
            if (raw_copy(r.endpoint, sizeof(r.endpoint), optarg) < 0)
                goto usage;
            break;
        case 'b':
            if (raw_copy(r.bucket, sizeof(r.bucket), optarg) < 0)
                goto usage;
            break;
        case 'r':
            region = optarg;
            break;
        default:
            if (raw_option(&r.b, opt, optarg) != 0)
                goto usage;
            break;
        }
    }
    if (optind < argc || !r.endpoint[0] || !r.bucket[0] || r.b.range > r.b.size || !key || !secret)
        goto usage;
    if (raw_end_prefix(&r.b) < 0)
        goto usage;
    if (snprintf(r.sigv4, sizeof(r.sigv4), "aws:amz:%s:s3", region) >= (int)sizeof(r.sigv4) ||
        snprintf(r.userpwd, sizeof(r.userpwd), "%s:%s", key, secret) >= (int)sizeof(r.userpwd) ||
        (token && snprintf(r.token_header, sizeof(r.token_header), "x-amz-security-token: %s",
                           token) >= (int)sizeof(r.token_header))) {
        fprintf(stderr, "s3-raw: region or credentials too long\n");
        return 2;
    }
    if ((status = raw_start(&r.b)) != 0)
        return status;
    curl_easy_setopt(r.b.curl, CURLOPT_AWS_SIGV4, r.sigv4);
    curl_easy_setopt(r.b.curl, CURLOPT_USERPWD, r.userpwd);
    /*
     * libcurl sends "Expect: 100-continue" with every PUT; not waiting for the
     * "100 Continue" sends the body at once, as a client without Expect does.
     * (An "Expect:" header that removes it would be signed by libcurl's SigV4
     * as a header the request then lacks.)
     */
    curl_easy_setopt(r.b.curl, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
    return raw_run(&r.b);

usage:
    fprintf(stderr, "usage: s3-raw --endpoint URL --bucket B [--prefix P] [--region R] "
                    "--size BYTES [--iterations N] [--range BYTES] [--list=50]\n"
                    "       (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally "
                    "AWS_SESSION_TOKEN in the environment)\n");
    return 2;
}
