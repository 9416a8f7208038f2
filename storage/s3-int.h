#pragma once

/*
 * The S3 backend's parts: its URL and options (s3-url.c), credentials
 * (s3-creds.c), the SigV4 signer (s3-sign.c), the XML of responses
 * (s3-xml.c), HTTP on the loop (s3-http.c), the operations (s3.c) and R2's
 * temporary credentials (s3-r2.c).
 */

#include "storage/backend.h"
#include "storage/s3-creds.h"
#include "storage/s3-http.h"
#include "storage/s3-sign.h"
#include "storage/s3-url.h"

#include <stdbool.h>
#include <stdint.h>

/* Largest error document kept from a failed response. */
#define S3_ERROR_BODY_MAX (64u * 1024)
/* A ListObjectsV2 page of 1000 keys is about 300 KiB. */
#define S3_LIST_BODY_MAX (4u * 1024 * 1024)
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
    struct s3_http *http;
    struct s3_http_opts http_opts;
    struct s3_op *ops; /* attempts in flight, for cancel */
    char msg[512];     /* open's explanation of a failure */
    /* R2 temporary credentials: renewed by a timer, and at once after ExpiredToken. */
    uv_timer_t renew_timer;
    struct s3_http_req renew_req;
    struct s3_r2_call renew_call;
    void (*stopped)(struct s3_be *sb);
    bool renewing, renew_timer_open;
    uint64_t creds_expire_ms; /* uv_now() time; 0: the credentials do not expire */
};

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
/* Stops renewing; `stopped` runs once the timer is closed (maybe at once). */
void s3_r2_stop(struct s3_be *sb, void (*stopped)(struct s3_be *sb));
