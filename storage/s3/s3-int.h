#pragma once

/*
 * The S3 backend's parts: its URL and options (s3-url.c), credentials
 * (s3-creds.c), the SigV4 signer (s3-sign.c), the XML of responses
 * (s3-xml.c), one attempt of a request (s3-op.c), the operations (s3.c),
 * batched deletes (s3-delete.c) and R2's temporary credentials (s3-r2.c).
 * HTTP itself is storage/http, which the backend shares.
 */

#include "storage/backend.h"
#include "storage/http/http.h"
#include "storage/s3/s3-creds.h"
#include "storage/s3/s3-sign.h"
#include "storage/s3/s3-url.h"

#include <stdbool.h>
#include <stdint.h>

struct s3_op;

/* Largest error document kept from a failed response. */
#define S3_ERROR_BODY_MAX (64u * 1024)
/* A ListObjectsV2 page of 1000 keys is about 300 KiB. */
#define S3_LIST_BODY_MAX (4u * 1024 * 1024)
/* Keys in one DeleteObjects request, S3's limit. */
#define S3_DELETE_BATCH 1000
/* Payloads hashed on the loop thread; larger ones go to the thread pool. */
#define S3_HASH_INLINE_MAX (64u * 1024)

/* One call of Cloudflare's temp-access-credentials API; its buffers live until it ends. */
struct s3_r2_call {
    char url[1024];
    char auth[700];
    char body[1024];
    struct iovec iov;
    const char *headers[2];
};

struct s3_be {
    struct backend *be;
    struct s3_opts o;
    struct s3_signer *signer;
    struct s3_creds creds;
    struct http *http;
    struct http_opts http_opts;
    struct s3_op *ops; /* attempts in flight, for cancel */
    /* Deletes waiting to be sent together (s3-delete.c). */
    struct backend_req *delq, *delq_tail;
    size_t ndelq;
    unsigned deletes_inflight; /* DELETE and DeleteObjects requests */
    uv_timer_t delete_timer;
    bool delete_timer_open;
    char msg[512]; /* open's explanation of a failure */
    /* R2 temporary credentials: renewed by a timer, and at once after ExpiredToken. */
    uv_timer_t renew_timer;
    struct http_req renew_req;
    struct s3_r2_call renew_call;
    void (*stopped)(struct s3_be *sb);
    bool renewing, renew_timer_open;
    uint64_t creds_expire_ms; /* uv_now() time; 0: the credentials do not expire */
};

/* One attempt of one request (s3-op.c). */
struct s3_op {
    struct http_req http;
    struct s3_be *sb;
    struct backend_req *req;
    void (*done)(struct s3_op *op); /* the answer is in http */
    struct s3_op *next;             /* sb->ops */
    uv_work_t work;
    bool hashing, cancelled;
    bool batch; /* a DeleteObjects of several requests (s3-delete.c) */
    char hash[65];
    struct s3_signed *sig; /* malloc'd: the signer's output is large */
    char h_host[sizeof(((struct s3_opts *)0)->request_host) + 8], h_date[48], h_sha[96];
    char h_auth[S3_SIGN_AUTH_SIZE + 16];
    char h_range[96], h_extra[2][96];
    char extra_names[4][32];
    char *h_token; /* "x-amz-security-token: ..." when there is a session token */
};

/* The object's name in the bucket: PREFIX/KEY, or KEY without a prefix. */
int s3_object_name(const struct s3_opts *o, const char *key, char *out, size_t len);
/* A new attempt of req, in sb's list; `done` gets the answer. NULL without memory. */
struct s3_op *s3_op_new(struct s3_be *sb, struct backend_req *req, void (*done)(struct s3_op *op));
/*
 * Builds and signs the request: `name` is the object's name ("" for the
 * bucket), `query` its raw parameters, `extra` up to 4 more "Name: value"
 * headers to sign; at most body_max bytes of the answer are kept.
 */
int s3_op_prepare(struct s3_op *op, const char *method, const char *name,
                  const struct s3_param *query, size_t nquery, const char *const *extra,
                  size_t nextra, size_t body_max);
/* s3_op_prepare, then starts it on the loop. */
int s3_op_send(struct s3_op *op, const char *method, const char *name, const struct s3_param *query,
               size_t nquery, const char *const *extra, size_t nextra, size_t body_max);
/* Takes the op off sb's list of attempts in flight. */
void s3_op_unlink(struct s3_op *op);
/* A HEAD or DELETE of req's object, answered to `done`: 0, or negative errno if it cannot start. */
int s3_send_bare(struct s3_be *sb, struct backend_req *req, const char *method,
                 void (*done)(struct s3_op *op));
/* Ends the attempt with `status`: the front end hears of it, the op is freed. */
void s3_op_complete(struct s3_op *op, int status);
/* A start that failed: the op is freed, r returned (no callback comes). */
int s3_op_abandon(struct s3_op *op, int r);
/* Frees what the op holds besides itself (for an op that is not malloc'd). */
void s3_op_clear(struct s3_op *op);
void s3_op_free(struct s3_op *op);
/* A failed answer as a backend status; the server's code and message go to the log. */
int s3_map_failure(struct s3_op *op);

static inline struct s3_be *s3_of(struct backend *be)
{
    return be->priv;
}

/*
 * R2 temporary credentials from Cloudflare's API (s3-r2.c). The blocking
 * fetch runs at open; renewals run on the loop.
 */
int s3_r2_fetch_blocking(struct s3_be *sb, char *msg, size_t msg_len);
void s3_r2_start_renewal(struct s3_be *sb);
void s3_r2_renew_now(struct s3_be *sb);
/* Batched deletes (s3-delete.c): queue one; send what is queued; the timer's life. */
int s3_delete_queue(struct s3_be *sb, struct backend_req *req);
void s3_delete_flush(struct s3_be *sb);
void s3_delete_init(struct s3_be *sb);
void s3_delete_stop(struct s3_be *sb, void (*stopped)(struct s3_be *sb));

/* Stops renewing; `stopped` runs once the timer is closed (maybe at once). */
void s3_r2_stop(struct s3_be *sb, void (*stopped)(struct s3_be *sb));
