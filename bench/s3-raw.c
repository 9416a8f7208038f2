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
 * below the prefix: put of PREFIXobj/oN (PUT), get (GET), range (GET with
 * Range: the last BYTES bytes), head (HEAD), list_50 (ListObjectsV2 of
 * PREFIXla/, holding 50 objects of 1 KiB put beforehand, untimed, unless they
 * are there already; every page)
 * and delete (DELETE). A PUT does not wait for "100 Continue" (see main()).
 *
 * Output: backend-bench's JSON, with the samples under modes.libcurl. Exit 1
 * when a request fails or a read returns other bytes than were written.
 */

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <openssl/sha.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZE ((size_t)1 << 30)
#define MAX_ITERATIONS 100000
#define LIST_OBJECT_SIZE 1024
#define LIST_COUNT 50
#define MAX_URL 2048
/* A page of ListObjectsV2 for 50 keys is a few KiB; a limit keeps a runaway reply out. */
#define MAX_LIST_REPLY ((size_t)4 << 20)

enum { OP_PUT, OP_GET, OP_RANGE, OP_HEAD, OP_LIST50, OP_DELETE, OP_COUNT_ };

static const char *const op_names[OP_COUNT_] = {"put", "get", "range", "head", "list_50", "delete"};

struct raw {
    CURL *curl;
    char endpoint[512];
    char bucket[128];
    char prefix[512];
    char sigv4[128];
    char userpwd[512];
    char token_header[4096]; /* "x-amz-security-token: ..." or empty */
    size_t size, range;
    unsigned iterations;
    bool list50;
    uint8_t *data;
    /* What a GET answered: a buffer of `cap` bytes, `len` of them used. */
    uint8_t *body;
    size_t len, cap;
    bool overflow;
    /* The body of a PUT, read out by curl. */
    const uint8_t *up;
    size_t up_left;
};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct raw *r = userdata;
    size_t n = size * nmemb;

    if (n > r->cap - r->len) {
        r->overflow = true;
        return 0; /* ends the transfer with CURLE_WRITE_ERROR */
    }
    memcpy(r->body + r->len, ptr, n);
    r->len += n;
    return n;
}

static size_t on_read(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct raw *r = userdata;
    size_t n = size * nmemb < r->up_left ? size * nmemb : r->up_left;

    memcpy(ptr, r->up, n);
    r->up += n;
    r->up_left -= n;
    return n;
}

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
static long request(struct raw *r, const char *method, const char *url, const uint8_t *body,
                    size_t body_len, const char *range)
{
    uint8_t digest[SHA256_DIGEST_LENGTH];
    char sha_header[32 + 2 * SHA256_DIGEST_LENGTH + 1];
    struct curl_slist *headers = NULL;
    CURLcode rc;
    long status = -1;

    SHA256(body ? body : (const uint8_t *)"", body ? body_len : 0, digest);
    strcpy(sha_header, "x-amz-content-sha256: ");
    hex(sha_header + strlen(sha_header), digest, sizeof(digest));
    headers = curl_slist_append(headers, sha_header);
    if (r->token_header[0])
        headers = curl_slist_append(headers, r->token_header);
    if (range)
        headers = curl_slist_append(headers, range);
    if (!headers) {
        fprintf(stderr, "s3-raw: out of memory\n");
        return -1;
    }

    /* Options of the previous request that this one must not inherit. */
    curl_easy_setopt(r->curl, CURLOPT_UPLOAD, 0L);
    curl_easy_setopt(r->curl, CURLOPT_NOBODY, 0L);
    curl_easy_setopt(r->curl, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(r->curl, CURLOPT_CUSTOMREQUEST, NULL);
    if (strcmp(method, "PUT") == 0) {
        r->up = body;
        r->up_left = body_len;
        curl_easy_setopt(r->curl, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(r->curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body_len);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(r->curl, CURLOPT_NOBODY, 1L);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(r->curl, CURLOPT_CUSTOMREQUEST, method);
    }
    curl_easy_setopt(r->curl, CURLOPT_URL, url);
    curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, headers);
    r->len = 0;
    r->overflow = false;
    rc = curl_easy_perform(r->curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
    else
        fprintf(stderr, "s3-raw: %s %s: %s%s\n", method, url, curl_easy_strerror(rc),
                r->overflow ? " (reply larger than expected)" : "");
    curl_slist_free_all(headers);
    return status;
}

static void object_url(const struct raw *r, char *out, size_t len, const char *dir, unsigned i)
{
    snprintf(out, len, "%s/%s/%s%s/o%06u", r->endpoint, r->bucket, r->prefix, dir, i);
}

static int expect(long status, long want, const char *what, unsigned i)
{
    if (status == want)
        return 0;
    fprintf(stderr, "s3-raw: %s %u: HTTP %ld, expected %ld\n", what, i, status, want);
    return -1;
}

/* Every page of ListObjectsV2 of PREFIXla/; the number of <Key>s in *count. */
static int list(struct raw *r, unsigned *count)
{
    char url[MAX_URL], enc_prefix[1024], token[1024] = "";

    *count = 0;
    /* The prefix percent-encoded as SigV4's canonical query wants it ('/' too), so the
     * query as sent is already canonical: its parameters are in order, too. */
    {
        char full[600];
        size_t o = 0;
        snprintf(full, sizeof(full), "%sla/", r->prefix);
        for (const unsigned char *p = (const unsigned char *)full; *p && o + 4 < sizeof(enc_prefix);
             p++) {
            if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                strchr("-._~", *p))
                enc_prefix[o++] = (char)*p;
            else
                o += (size_t)sprintf(enc_prefix + o, "%%%02X", *p);
        }
        enc_prefix[o] = '\0';
    }
    do {
        if (token[0])
            snprintf(url, sizeof(url), "%s/%s?continuation-token=%s&list-type=2&prefix=%s",
                     r->endpoint, r->bucket, token, enc_prefix);
        else
            snprintf(url, sizeof(url), "%s/%s?list-type=2&prefix=%s", r->endpoint, r->bucket,
                     enc_prefix);
        long status = request(r, "GET", url, NULL, 0, NULL);
        if (expect(status, 200, "list", 0) < 0)
            return -1;
        r->body[r->len] = '\0';
        for (const char *p = (const char *)r->body; (p = strstr(p, "<Key>")); p += 5)
            (*count)++;
        token[0] = '\0';
        const char *t = strstr((const char *)r->body, "<NextContinuationToken>");
        if (t && strstr((const char *)r->body, "<IsTruncated>true</IsTruncated>")) {
            t += strlen("<NextContinuationToken>");
            size_t o = 0;
            /* Tokens are opaque; encoded whole so any byte survives the query. */
            for (; *t && *t != '<' && o + 4 < sizeof(token); t++) {
                unsigned char c = (unsigned char)*t;
                if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    strchr("-._~", c))
                    token[o++] = (char)c;
                else
                    o += (size_t)sprintf(token + o, "%%%02X", c);
            }
            token[o] = '\0';
        }
    } while (token[0]);
    return 0;
}

static int one_op(struct raw *r, unsigned op, unsigned i, double *ms)
{
    char url[MAX_URL], range_header[96];
    unsigned count = 0;
    long status;
    int rc = 0;
    double t = now_ms();

    switch (op) {
    case OP_PUT:
        object_url(r, url, sizeof(url), "obj", i);
        rc = expect(request(r, "PUT", url, r->data, r->size, NULL), 200, "put", i);
        break;
    case OP_GET:
        object_url(r, url, sizeof(url), "obj", i);
        rc = expect(request(r, "GET", url, NULL, 0, NULL), 200, "get", i);
        break;
    case OP_RANGE:
        object_url(r, url, sizeof(url), "obj", i);
        snprintf(range_header, sizeof(range_header), "Range: bytes=%zu-%zu", r->size - r->range,
                 r->size - 1);
        rc = expect(request(r, "GET", url, NULL, 0, range_header), 206, "range", i);
        break;
    case OP_HEAD:
        object_url(r, url, sizeof(url), "obj", i);
        rc = expect(request(r, "HEAD", url, NULL, 0, NULL), 200, "head", i);
        break;
    case OP_LIST50:
        rc = list(r, &count);
        break;
    default:
        object_url(r, url, sizeof(url), "obj", i);
        status = request(r, "DELETE", url, NULL, 0, NULL);
        rc = expect(status, 204, "delete", i);
        break;
    }
    *ms = now_ms() - t;
    if (rc < 0)
        return -1;
    /* Outside the timing: what came back is what was written. */
    if (op == OP_GET && (r->len != r->size || memcmp(r->body, r->data, r->size) != 0)) {
        fprintf(stderr, "s3-raw: get %u returned other bytes\n", i);
        return -1;
    }
    if (op == OP_RANGE &&
        (r->len != r->range || memcmp(r->body, r->data + r->size - r->range, r->range) != 0)) {
        fprintf(stderr, "s3-raw: range %u returned other bytes\n", i);
        return -1;
    }
    if (op == OP_LIST50 && count != LIST_COUNT) {
        fprintf(stderr, "s3-raw: list returned %u keys, not %d\n", count, LIST_COUNT);
        return -1;
    }
    return 0;
}

/*
 * The 50 objects to list, unless an earlier run with this prefix left them
 * (bench/run keeps one prefix per profile, so later rounds skip 50 PUTs).
 */
static int populate_list(struct raw *r)
{
    char url[MAX_URL];
    unsigned count = 0;

    if (list(r, &count) == 0 && count == LIST_COUNT)
        return 0;
    for (unsigned i = 0; i < LIST_COUNT; i++) {
        object_url(r, url, sizeof(url), "la", i);
        if (expect(request(r, "PUT", url, r->data, LIST_OBJECT_SIZE, NULL), 200, "list put", i) < 0)
            return -1;
    }
    return 0;
}

static long peak_rss_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    }
    fclose(f);
    return kib;
}

static int run(struct raw *r)
{
    double *ms[OP_COUNT_] = {0};
    unsigned n[OP_COUNT_] = {0};
    char url[MAX_URL];
    int status = 0;

    for (unsigned op = 0; op < OP_COUNT_; op++) {
        if (!(ms[op] = calloc(r->iterations, sizeof(double)))) {
            fprintf(stderr, "s3-raw: out of memory\n");
            status = 1;
            goto out;
        }
    }
    /* Opens the kept connection, untimed: a HEAD of a key that is not there. */
    object_url(r, url, sizeof(url), "obj", MAX_ITERATIONS);
    if (expect(request(r, "HEAD", url, NULL, 0, NULL), 404, "first head", 0) < 0) {
        status = 1;
        goto out;
    }
    for (unsigned op = 0; op < OP_COUNT_ && status == 0; op++) {
        if ((op == OP_RANGE && !r->range) || (op == OP_LIST50 && !r->list50))
            continue;
        if (op == OP_LIST50 && populate_list(r) < 0) {
            status = 1;
            break;
        }
        for (unsigned i = 0; i < r->iterations && status == 0; i++) {
            if (one_op(r, op, i, &ms[op][n[op]++]) < 0)
                status = 1;
        }
    }
    if (status == 0) {
        printf("{\n  \"schema\": \"cairn-backend-bench/1\",\n");
        printf("  \"size\": %zu,\n  \"iterations\": %u,\n  \"peak_rss_kib\": %ld,\n", r->size,
               r->iterations, peak_rss_kib());
        printf("  \"modes\": {\n    \"libcurl\": {");
        bool first = true;
        for (unsigned op = 0; op < OP_COUNT_; op++) {
            if (n[op] == 0)
                continue;
            printf("%s\n      \"%s\": [", first ? "" : ",", op_names[op]);
            first = false;
            for (unsigned i = 0; i < n[op]; i++)
                printf("%s%.6f", i ? ", " : "", ms[op][i]);
            printf("]");
        }
        printf("\n    }\n  }\n}\n");
    }
out:
    for (unsigned op = 0; op < OP_COUNT_; op++)
        free(ms[op]);
    return status;
}

static int parse_size(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max)
        return -1;
    *out = v;
    return 0;
}

static int copy(char *dst, size_t len, const char *src)
{
    return (size_t)snprintf(dst, len, "%s", src) < len ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"endpoint", required_argument, NULL, 'e'},
        {"bucket", required_argument, NULL, 'b'},
        {"prefix", required_argument, NULL, 'p'},
        {"region", required_argument, NULL, 'r'},
        {"size", required_argument, NULL, 's'},
        {"iterations", required_argument, NULL, 'n'},
        {"range", required_argument, NULL, 'g'},
        {"list", required_argument, NULL, 'l'},
        {0},
    };
    struct raw r = {.iterations = 10};
    const char *region = "us-east-1";
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *token = getenv("AWS_SESSION_TOKEN");
    uint64_t v;
    int opt, status;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'e':
            if (copy(r.endpoint, sizeof(r.endpoint), optarg) < 0)
                goto usage;
            break;
        case 'b':
            if (copy(r.bucket, sizeof(r.bucket), optarg) < 0)
                goto usage;
            break;
        case 'p':
            if (copy(r.prefix, sizeof(r.prefix), optarg) < 0)
                goto usage;
            break;
        case 'r':
            region = optarg;
            break;
        case 's':
            if (parse_size(optarg, MAX_SIZE, &v) < 0)
                goto usage;
            r.size = (size_t)v;
            break;
        case 'n':
            if (parse_size(optarg, MAX_ITERATIONS, &v) < 0 || v == 0)
                goto usage;
            r.iterations = (unsigned)v;
            break;
        case 'g':
            if (parse_size(optarg, MAX_SIZE, &v) < 0 || v == 0)
                goto usage;
            r.range = (size_t)v;
            break;
        case 'l':
            if (strcmp(optarg, "50") != 0)
                goto usage;
            r.list50 = true;
            break;
        default:
            goto usage;
        }
    }
    if (optind < argc || !r.endpoint[0] || !r.bucket[0] || r.range > r.size || !key || !secret)
        goto usage;
    /* Keys are PREFIX + "obj/oN": a prefix that is not empty ends with '/', as in the URL. */
    if (r.prefix[0] && r.prefix[strlen(r.prefix) - 1] != '/' &&
        copy(r.prefix + strlen(r.prefix), sizeof(r.prefix) - strlen(r.prefix), "/") < 0)
        goto usage;
    if (snprintf(r.sigv4, sizeof(r.sigv4), "aws:amz:%s:s3", region) >= (int)sizeof(r.sigv4) ||
        snprintf(r.userpwd, sizeof(r.userpwd), "%s:%s", key, secret) >= (int)sizeof(r.userpwd) ||
        (token && snprintf(r.token_header, sizeof(r.token_header), "x-amz-security-token: %s",
                           token) >= (int)sizeof(r.token_header))) {
        fprintf(stderr, "s3-raw: region or credentials too long\n");
        return 2;
    }

    size_t data_len = r.size > LIST_OBJECT_SIZE ? r.size : LIST_OBJECT_SIZE;
    r.data = malloc(data_len);
    /* A GET answer is the object or a list page; +1 for the list's terminating NUL. */
    r.cap = (r.size > MAX_LIST_REPLY ? r.size : MAX_LIST_REPLY);
    r.body = malloc(r.cap + 1);
    if (!r.data || !r.body) {
        fprintf(stderr, "s3-raw: out of memory\n");
        return 1;
    }
    /* Incompressible and different per run, as backend-bench's. */
    uint64_t x = (uint64_t)now_ms() * 1000003u | 1;
    for (size_t i = 0; i < data_len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.data[i] = (uint8_t)x;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(r.curl = curl_easy_init())) {
        fprintf(stderr, "s3-raw: curl init failed\n");
        return 1;
    }
    curl_easy_setopt(r.curl, CURLOPT_AWS_SIGV4, r.sigv4);
    curl_easy_setopt(r.curl, CURLOPT_USERPWD, r.userpwd);
    curl_easy_setopt(r.curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r.curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(r.curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(r.curl, CURLOPT_TIMEOUT, 120L);
    /*
     * libcurl sends "Expect: 100-continue" with every PUT; not waiting for the
     * "100 Continue" sends the body at once, as a client without Expect does.
     * (An "Expect:" header that removes it would be signed by libcurl's SigV4
     * as a header the request then lacks.)
     */
    curl_easy_setopt(r.curl, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
    curl_easy_setopt(r.curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(r.curl, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(r.curl, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(r.curl, CURLOPT_READDATA, &r);
    status = run(&r);
    curl_easy_cleanup(r.curl);
    curl_global_cleanup();
    free(r.data);
    free(r.body);
    return status;

usage:
    fprintf(stderr, "usage: s3-raw --endpoint URL --bucket B [--prefix P] [--region R] "
                    "--size BYTES [--iterations N] [--range BYTES] [--list=50]\n"
                    "       (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally "
                    "AWS_SESSION_TOKEN in the environment)\n");
    return 2;
}
