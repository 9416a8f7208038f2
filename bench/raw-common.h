/*
 * The raw libcurl peers of backend-bench (s3-raw, az-raw): what they share.
 * Each tool signs and builds its own requests; this file times them in
 * backend-bench's order, checks what came back and prints backend-bench's
 * JSON, on one curl easy handle that keeps its connection alive from one
 * request to the next, as the backend's connection pool does.
 *
 * The operations, under the same keys below the prefix as backend-bench's:
 * put of PREFIXobj/oN, get, range (the last BYTES bytes), head, list_50
 * (every page of a listing of PREFIXla/, holding 50 objects of 1 KiB put
 * beforehand, untimed, unless they are there already) and delete. The
 * connection is opened by a first, untimed head of an object that is not
 * there, as the backend is opened before backend-bench's clock starts.
 */
#ifndef CAIRN_BENCH_RAW_COMMON_H
#define CAIRN_BENCH_RAW_COMMON_H

#include <curl/curl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RAW_MAX_SIZE ((size_t)1 << 30)
#define RAW_MAX_ITERATIONS 100000
#define RAW_LIST_OBJECT_SIZE 1024
#define RAW_LIST_COUNT 50

/* The command-line options every peer takes; raw_option() handles them. */
// clang-format off
#define RAW_COMMON_OPTIONS                          \
    {"prefix", required_argument, NULL, 'p'},       \
    {"size", required_argument, NULL, 's'},         \
    {"iterations", required_argument, NULL, 'n'},   \
    {"range", required_argument, NULL, 'g'},        \
    {"list", required_argument, NULL, 'l'}
// clang-format on

struct raw_bench;

struct raw_service {
    const char *name;       /* "s3-raw": the start of every message */
    const char *list_noun;  /* what a listing counts: "keys" */
    const char *range_name; /* the range header's name: "Range" */
    long put_status, delete_status;
    /*
     * One request on the object PREFIX DIR/oN (a PUT's body, a range header
     * or NULL): the HTTP status, or -1 when it failed (said on stderr).
     */
    long (*object)(struct raw_bench *b, const char *method, const char *dir, unsigned i,
                   const uint8_t *body, size_t body_len, const char *range);
    /* Every page of the listing of PREFIXla/; the number of objects in *count. */
    int (*list)(struct raw_bench *b, unsigned *count);
};

struct raw_bench {
    const struct raw_service *svc;
    CURL *curl;
    char prefix[512];
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

/* dst = src; -1 when it does not fit. */
int raw_copy(char *dst, size_t len, const char *src);

/* Percent-encodes all but unreserved characters (and '/' when keep_slash). */
void raw_encode(const char *s, bool keep_slash, char *out, size_t len);

/* An option of RAW_COMMON_OPTIONS: 0, -1 when its argument is wrong, 1 when not one of them. */
int raw_option(struct raw_bench *b, int opt, const char *arg);

/* Ends a prefix that is not empty with '/': keys are PREFIX + "obj/oN". -1: too long. */
int raw_end_prefix(struct raw_bench *b);

/* The data and the reply buffer, the curl handle and its common options: 0, or 1 (said). */
int raw_start(struct raw_bench *b);

/*
 * Sends `method` to `url` with `headers` (NULL: out of memory), which it
 * frees; a PUT sends body/body_len. The HTTP status, or -1 when the transfer
 * failed (said on stderr).
 */
long raw_perform(struct raw_bench *b, const char *method, const char *url, const uint8_t *body,
                 size_t body_len, struct curl_slist *headers);

/* 0 when status is want, else -1 and a message naming what and i. */
int raw_expect(const struct raw_bench *b, long status, long want, const char *what, unsigned i);

/* Times every operation and prints the JSON, then frees all raw_start made: the exit status. */
int raw_run(struct raw_bench *b);

#endif
