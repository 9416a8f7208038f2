#include "raw-common.h"

#include "bench-util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A page of a listing of 50 keys is a few KiB; a limit keeps a runaway reply out. */
#define MAX_LIST_REPLY ((size_t)4 << 20)

enum { OP_PUT, OP_GET, OP_RANGE, OP_HEAD, OP_LIST50, OP_DELETE, OP_COUNT_ };

static const char *const op_names[OP_COUNT_] = {"put", "get", "range", "head", "list_50", "delete"};

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct raw_bench *b = userdata;
    size_t n = size * nmemb;

    if (n > b->cap - b->len) {
        b->overflow = true;
        return 0; /* ends the transfer with CURLE_WRITE_ERROR */
    }
    memcpy(b->body + b->len, ptr, n);
    b->len += n;
    return n;
}

static size_t on_read(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct raw_bench *b = userdata;
    size_t n = size * nmemb < b->up_left ? size * nmemb : b->up_left;

    memcpy(ptr, b->up, n);
    b->up += n;
    b->up_left -= n;
    return n;
}

int raw_copy(char *dst, size_t len, const char *src)
{
    return (size_t)snprintf(dst, len, "%s", src) < len ? 0 : -1;
}

void raw_encode(const char *s, bool keep_slash, char *out, size_t len)
{
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < len; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p) || (keep_slash && *p == '/'))
            out[o++] = (char)*p;
        else
            o += (size_t)snprintf(out + o, len - o, "%%%02X", *p);
    }
    out[o] = '\0';
}

int raw_option(struct raw_bench *b, int opt, const char *arg)
{
    uint64_t v;

    switch (opt) {
    case 'p':
        return raw_copy(b->prefix, sizeof(b->prefix), arg);
    case 's':
        if (bench_parse_uint(arg, RAW_MAX_SIZE, &v) < 0)
            return -1;
        b->size = (size_t)v;
        return 0;
    case 'n':
        if (bench_parse_uint(arg, RAW_MAX_ITERATIONS, &v) < 0 || v == 0)
            return -1;
        b->iterations = (unsigned)v;
        return 0;
    case 'g':
        if (bench_parse_uint(arg, RAW_MAX_SIZE, &v) < 0 || v == 0)
            return -1;
        b->range = (size_t)v;
        return 0;
    case 'l':
        if (strcmp(arg, "50") != 0)
            return -1;
        b->list50 = true;
        return 0;
    default:
        return 1;
    }
}

int raw_end_prefix(struct raw_bench *b)
{
    size_t n = strlen(b->prefix);

    if (n && b->prefix[n - 1] != '/' && raw_copy(b->prefix + n, sizeof(b->prefix) - n, "/") < 0)
        return -1;
    return 0;
}

int raw_start(struct raw_bench *b)
{
    size_t data_len = b->size > RAW_LIST_OBJECT_SIZE ? b->size : RAW_LIST_OBJECT_SIZE;

    b->data = malloc(data_len);
    /* A GET answer is the object or a list page; +1 for the list's terminating NUL. */
    b->cap = (b->size > MAX_LIST_REPLY ? b->size : MAX_LIST_REPLY);
    b->body = malloc(b->cap + 1);
    if (!b->data || !b->body) {
        fprintf(stderr, "%s: out of memory\n", b->svc->name);
        return 1;
    }
    /* Incompressible and different per run, as backend-bench's. */
    bench_fill(b->data, data_len, (uint64_t)now_ms() * 1000003u | 1);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(b->curl = curl_easy_init())) {
        fprintf(stderr, "%s: curl init failed\n", b->svc->name);
        return 1;
    }
    curl_easy_setopt(b->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(b->curl, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(b->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(b->curl, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(b->curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(b->curl, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(b->curl, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(b->curl, CURLOPT_READDATA, b);
    return 0;
}

long raw_perform(struct raw_bench *b, const char *method, const char *url, const uint8_t *body,
                 size_t body_len, struct curl_slist *headers)
{
    CURLcode rc;
    long status = -1;

    if (!headers) {
        fprintf(stderr, "%s: out of memory\n", b->svc->name);
        return -1;
    }
    /* Options of the previous request that this one must not inherit. */
    curl_easy_setopt(b->curl, CURLOPT_UPLOAD, 0L);
    curl_easy_setopt(b->curl, CURLOPT_NOBODY, 0L);
    curl_easy_setopt(b->curl, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(b->curl, CURLOPT_CUSTOMREQUEST, NULL);
    if (strcmp(method, "PUT") == 0) {
        b->up = body;
        b->up_left = body_len;
        curl_easy_setopt(b->curl, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(b->curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body_len);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(b->curl, CURLOPT_NOBODY, 1L);
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(b->curl, CURLOPT_CUSTOMREQUEST, method);
    }
    curl_easy_setopt(b->curl, CURLOPT_URL, url);
    curl_easy_setopt(b->curl, CURLOPT_HTTPHEADER, headers);
    b->len = 0;
    b->overflow = false;
    rc = curl_easy_perform(b->curl);
    if (rc == CURLE_OK)
        curl_easy_getinfo(b->curl, CURLINFO_RESPONSE_CODE, &status);
    else
        fprintf(stderr, "%s: %s %s: %s%s\n", b->svc->name, method, url, curl_easy_strerror(rc),
                b->overflow ? " (reply larger than expected)" : "");
    curl_slist_free_all(headers);
    return status;
}

int raw_expect(const struct raw_bench *b, long status, long want, const char *what, unsigned i)
{
    if (status == want)
        return 0;
    fprintf(stderr, "%s: %s %u: HTTP %ld, expected %ld\n", b->svc->name, what, i, status, want);
    return -1;
}

static int one_op(struct raw_bench *b, unsigned op, unsigned i, double *ms)
{
    const struct raw_service *svc = b->svc;
    char range_header[96];
    unsigned count = 0;
    int rc = 0;
    double t = now_ms();

    switch (op) {
    case OP_PUT:
        rc = raw_expect(b, svc->object(b, "PUT", "obj", i, b->data, b->size, NULL), svc->put_status,
                        "put", i);
        break;
    case OP_GET:
        rc = raw_expect(b, svc->object(b, "GET", "obj", i, NULL, 0, NULL), 200, "get", i);
        break;
    case OP_RANGE:
        snprintf(range_header, sizeof(range_header), "%s: bytes=%zu-%zu", svc->range_name,
                 b->size - b->range, b->size - 1);
        rc = raw_expect(b, svc->object(b, "GET", "obj", i, NULL, 0, range_header), 206, "range", i);
        break;
    case OP_HEAD:
        rc = raw_expect(b, svc->object(b, "HEAD", "obj", i, NULL, 0, NULL), 200, "head", i);
        break;
    case OP_LIST50:
        rc = svc->list(b, &count);
        break;
    default:
        rc = raw_expect(b, svc->object(b, "DELETE", "obj", i, NULL, 0, NULL), svc->delete_status,
                        "delete", i);
        break;
    }
    *ms = now_ms() - t;
    if (rc < 0)
        return -1;
    /* Outside the timing: what came back is what was written. */
    if (op == OP_GET && (b->len != b->size || memcmp(b->body, b->data, b->size) != 0)) {
        fprintf(stderr, "%s: get %u returned other bytes\n", svc->name, i);
        return -1;
    }
    if (op == OP_RANGE &&
        (b->len != b->range || memcmp(b->body, b->data + b->size - b->range, b->range) != 0)) {
        fprintf(stderr, "%s: range %u returned other bytes\n", svc->name, i);
        return -1;
    }
    if (op == OP_LIST50 && count != RAW_LIST_COUNT) {
        fprintf(stderr, "%s: list returned %u %s, not %d\n", svc->name, count, svc->list_noun,
                RAW_LIST_COUNT);
        return -1;
    }
    return 0;
}

/*
 * The 50 objects to list, unless an earlier run with this prefix left them
 * (bench/run keeps one prefix per profile, so later rounds skip 50 PUTs).
 */
static int populate_list(struct raw_bench *b)
{
    unsigned count = 0;

    if (b->svc->list(b, &count) == 0 && count == RAW_LIST_COUNT)
        return 0;
    for (unsigned i = 0; i < RAW_LIST_COUNT; i++) {
        if (raw_expect(b, b->svc->object(b, "PUT", "la", i, b->data, RAW_LIST_OBJECT_SIZE, NULL),
                       b->svc->put_status, "list put", i) < 0)
            return -1;
    }
    return 0;
}

static void print_json(const struct raw_bench *b, double *const ms[OP_COUNT_],
                       const unsigned n[OP_COUNT_])
{
    bool first = true;

    printf("{\n  \"schema\": \"cairn-backend-bench/1\",\n");
    printf("  \"size\": %zu,\n  \"iterations\": %u,\n  \"peak_rss_kib\": %ld,\n", b->size,
           b->iterations, bench_peak_rss_kib());
    printf("  \"modes\": {\n    \"libcurl\": {");
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

static int run(struct raw_bench *b)
{
    double *ms[OP_COUNT_] = {0};
    unsigned n[OP_COUNT_] = {0};
    int status = 0;

    for (unsigned op = 0; op < OP_COUNT_; op++) {
        if (!(ms[op] = calloc(b->iterations, sizeof(double)))) {
            fprintf(stderr, "%s: out of memory\n", b->svc->name);
            status = 1;
            goto out;
        }
    }
    /* Opens the kept connection, untimed: a head of an object that is not there. */
    if (raw_expect(b, b->svc->object(b, "HEAD", "obj", RAW_MAX_ITERATIONS, NULL, 0, NULL), 404,
                   "first head", 0) < 0) {
        status = 1;
        goto out;
    }
    for (unsigned op = 0; op < OP_COUNT_ && status == 0; op++) {
        if ((op == OP_RANGE && !b->range) || (op == OP_LIST50 && !b->list50))
            continue;
        if (op == OP_LIST50 && populate_list(b) < 0) {
            status = 1;
            break;
        }
        for (unsigned i = 0; i < b->iterations && status == 0; i++) {
            if (one_op(b, op, i, &ms[op][n[op]++]) < 0)
                status = 1;
        }
    }
    if (status == 0)
        print_json(b, ms, n);
out:
    for (unsigned op = 0; op < OP_COUNT_; op++)
        free(ms[op]);
    return status;
}

int raw_run(struct raw_bench *b)
{
    int status = run(b);

    curl_easy_cleanup(b->curl);
    curl_global_cleanup();
    free(b->data);
    free(b->body);
    return status;
}
