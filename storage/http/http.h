#pragma once

/*
 * HTTP requests for the backends that speak HTTP (s3 and r2 today), run by
 * libcurl's multi socket interface on the daemon's libuv loop: one
 * uv_poll_t per socket curl opens, one uv_timer_t for curl's own timer,
 * connections kept alive between requests in the multi handle's cache.
 * Nothing here blocks the loop; every function runs on the loop thread.
 * It knows transfers, not services: what a request means (its signature,
 * its error document) is the backend's.
 *
 * The caller owns each struct http_req. It fills in the method, URL,
 * headers and body, starts it, and gets `done` exactly once on the loop
 * thread, never from inside http_start() or http_cancel(). A response body
 * is kept up to `body_max` bytes; a longer one ends the request with
 * HTTP_E_TOO_LARGE rather than growing without bound.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <curl/curl.h>
#include <uv.h>

struct http;
struct http_req;

/* Outcomes of a request besides an HTTP status (positive; 0 is a response). */
enum {
    HTTP_E_NETWORK = 1, /* connection refused or reset, timeout, stall, short body */
    HTTP_E_TOO_LARGE,   /* the response body passed body_max */
    HTTP_E_TLS,         /* TLS or certificate failure: not worth a retry */
};

#define HTTP_MAX_HEADERS 16

typedef void (*http_cb)(struct http_req *req);

struct http_opts {
    unsigned connections;        /* requests in flight, and connections kept */
    uint32_t connect_timeout_ms; /* TCP and TLS set-up of one connection */
    uint32_t stall_timeout_ms;   /* no byte either way for this long ends an attempt */
};

struct http_req {
    /* Filled in by the caller. */
    const char *method; /* "GET", "PUT", "HEAD", "DELETE", "POST" */
    char url[2048];
    const char *headers[HTTP_MAX_HEADERS]; /* "Name: value", borrowed until done */
    size_t nheaders;
    const struct iovec *body; /* request body, borrowed until done */
    size_t body_iovcnt;
    size_t body_max; /* response bytes kept at most */
    http_cb cb;
    void *userdata;

    /* Results. */
    int result;    /* 0: `status` holds the response, else HTTP_E_* or negative errno */
    long status;   /* HTTP status */
    uint8_t *resp; /* malloc'd response body, owned by the caller after done */
    size_t resp_len;
    uint64_t total_size;     /* from Content-Range ".../N"; UINT64_MAX when absent */
    uint64_t content_length; /* UINT64_MAX when absent */
    uint32_t retry_after_ms; /* from Retry-After (seconds), 0 when absent */
    /* Azure's x-ms-error-code header, cut to fit; "" when absent. A HEAD's only error detail. */
    char error_code[64];
    char error[CURL_ERROR_SIZE]; /* curl's text for a network failure */

    /* Private. */
    struct http *http;
    CURL *easy;
    struct curl_slist *slist;
    size_t resp_cap;
    uint64_t progress_at; /* uv_now() of the last byte either way */
    curl_off_t seen_down, seen_up;
    size_t iov_idx, iov_off;
    uint64_t body_len, body_sent;
    bool cancelled, too_large, rewound;
    struct http_req *next_;
};

/*
 * libcurl's process-wide set-up, done once however often it is called; a
 * backend calls it at open, before its first request. 0, or -EIO when
 * libcurl cannot initialise.
 */
int http_global_init(void);

/* 0 or negative errno. */
int http_new(struct http **out, uv_loop_t *loop, const struct http_opts *opts);
/*
 * Stops every request (each gets done with -ECANCELED first), then closes
 * the handles; `closed` runs once the last is closed. NULL-safe.
 */
void http_free(struct http *http, void (*closed)(void *arg), void *arg);

/* 0 when done will come, else negative errno (and done never comes). */
int http_start(struct http *http, struct http_req *req);
/*
 * The same request, blocking, outside any loop: for start-up checks before
 * the loop runs. Returns (and sets) req->result; no callback.
 */
int http_perform(const struct http_opts *opts, struct http_req *req);
/* Ends a running request soon; its done still comes, with -ECANCELED. */
void http_cancel(struct http_req *req);
/* Frees the response body. */
void http_req_reset(struct http_req *req);
