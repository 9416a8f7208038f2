/*
 * Cloudflare R2's temporary credentials: with an API token and the parent
 * access key id, Cloudflare's API hands out a key, secret and session token
 * scoped to the bucket (and prefix) for `temp_ttl` seconds. They are fetched
 * once at open, blocking (before the loop runs), then renewed on the loop
 * when a third of their life is left, or at once when a request meets
 * ExpiredToken.
 */
#include "storage/s3/s3-int.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>

/* The API's answer is a few hundred bytes. */
#define R2_RESPONSE_MAX (64u * 1024)
/* A failed renewal is tried again this soon. */
#define R2_RETRY_MS 2000

static int build_call(struct s3_be *sb, struct s3_r2_call *c)
{
    json_t *j;
    char *text;
    int n;

    n = snprintf(c->url, sizeof(c->url), "%s/accounts/%s/r2/temp-access-credentials",
                 sb->o.api_base, sb->o.account);
    if (n < 0 || (size_t)n >= sizeof(c->url))
        return -ENAMETOOLONG;
    n = snprintf(c->auth, sizeof(c->auth), "Authorization: Bearer %s", sb->creds.api_token);
    if (n < 0 || (size_t)n >= sizeof(c->auth))
        return -ENAMETOOLONG;
    j = json_pack("{s:s, s:s, s:s, s:I}", "bucket", sb->o.bucket, "parentAccessKeyId",
                  sb->creds.access_key_id, "permission", "object-read-write", "ttlSeconds",
                  (json_int_t)sb->o.temp_ttl_s);
    if (!j)
        return -ENOMEM;
    if (sb->o.prefix[0]) {
        char scope[S3_MAX_PREFIX + 2];
        snprintf(scope, sizeof(scope), "%s/", sb->o.prefix);
        json_object_set_new(j, "prefixes", json_pack("[s]", scope));
    }
    text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text)
        return -ENOMEM;
    n = snprintf(c->body, sizeof(c->body), "%s", text);
    free(text);
    if (n < 0 || (size_t)n >= sizeof(c->body))
        return -ENAMETOOLONG;
    c->iov = (struct iovec){c->body, (size_t)n};
    c->headers[0] = c->auth;
    c->headers[1] = "Content-Type: application/json";
    return 0;
}

static void call_to_req(struct s3_r2_call *c, struct http_req *h)
{
    memset(h, 0, sizeof(*h));
    h->method = "POST";
    snprintf(h->url, sizeof(h->url), "%s", c->url);
    h->headers[0] = c->headers[0];
    h->headers[1] = c->headers[1];
    h->nheaders = 2;
    h->body = &c->iov;
    h->body_iovcnt = 1;
    h->body_max = R2_RESPONSE_MAX;
}

/* Takes the new credentials out of the API's answer. 0, or -EPROTO/-EACCES with msg. */
static int take_answer(struct s3_be *sb, const struct http_req *h, char *msg, size_t msg_len)
{
    json_error_t jerr;
    json_t *root, *result, *errors;
    const char *key = NULL, *secret = NULL, *token = NULL;
    int r = 0;

    if (h->result != 0) {
        snprintf(msg, msg_len, "r2: temporary credentials: %s: %s", sb->o.api_base, h->error);
        return BACKEND_E_UNAVAILABLE;
    }
    root = json_loadb((const char *)h->resp, h->resp_len, 0, &jerr);
    if (h->status != 200) {
        const char *what = NULL;
        errors = root ? json_object_get(root, "errors") : NULL;
        if (json_is_array(errors) && json_array_size(errors))
            what = json_string_value(json_object_get(json_array_get(errors, 0), "message"));
        snprintf(msg, msg_len, "r2: temporary credentials refused (HTTP %ld)%s%s", h->status,
                 what ? ": " : "", what ? what : "");
        json_decref(root);
        return h->status >= 500 || h->status == 429 ? BACKEND_E_UNAVAILABLE : -EACCES;
    }
    result = root ? json_object_get(root, "result") : NULL;
    if (result) {
        key = json_string_value(json_object_get(result, "accessKeyId"));
        secret = json_string_value(json_object_get(result, "secretAccessKey"));
        token = json_string_value(json_object_get(result, "sessionToken"));
    }
    if (!json_is_true(json_object_get(root, "success")) || !key || !secret || !token) {
        snprintf(msg, msg_len, "r2: temporary credentials: unexpected answer from %s",
                 sb->o.api_base);
        r = -EPROTO;
    } else if (s3_signer_set_credentials(sb->signer, key, secret, token) < 0) {
        snprintf(msg, msg_len, "r2: temporary credentials too long");
        r = -EPROTO;
    } else {
        sb->creds_expire_ms = uv_now(sb->be->loop) + sb->o.temp_ttl_s * 1000ull;
    }
    json_decref(root);
    return r;
}

int s3_r2_fetch_blocking(struct s3_be *sb, char *msg, size_t msg_len)
{
    struct s3_r2_call c;
    struct http_req h;
    int r;

    if ((r = build_call(sb, &c)) < 0) {
        snprintf(msg, msg_len, "r2: temporary credentials: request too long");
        return r;
    }
    call_to_req(&c, &h);
    http_perform(&sb->http_opts, &h);
    r = take_answer(sb, &h, msg, msg_len);
    http_req_reset(&h);
    OPENSSL_cleanse(c.auth, sizeof(c.auth));
    if (r == BACKEND_E_UNAVAILABLE)
        r = -EHOSTUNREACH;
    if (r == 0)
        backend_log(BACKEND_LOG_INFO, "r2: temporary credentials for %s, valid %u s", sb->o.bucket,
                    sb->o.temp_ttl_s);
    return r;
}

/* ---- renewal on the loop -------------------------------------------------------- */

static void on_renew_timer(uv_timer_t *t);

static void arm(struct s3_be *sb, uint64_t in_ms)
{
    if (sb->renew_timer_open)
        uv_timer_start(&sb->renew_timer, on_renew_timer, in_ms, 0);
}

static void on_renewed(struct http_req *h)
{
    struct s3_be *sb = h->userdata;
    char msg[256];
    int r;

    sb->renewing = false;
    r = take_answer(sb, h, msg, sizeof(msg));
    http_req_reset(h);
    OPENSSL_cleanse(sb->renew_call.auth, sizeof(sb->renew_call.auth));
    if (h->result == -ECANCELED)
        return;
    if (r == 0) {
        backend_log(BACKEND_LOG_INFO, "r2: temporary credentials renewed");
        arm(sb, sb->o.temp_ttl_s * 1000ull * 2 / 3);
    } else {
        backend_log(BACKEND_LOG_WARN, "%s; trying again", msg);
        arm(sb, R2_RETRY_MS);
    }
}

static void start_renewal(struct s3_be *sb)
{
    int r;

    if (sb->renewing || !sb->http)
        return;
    if ((r = build_call(sb, &sb->renew_call)) < 0) {
        backend_log(BACKEND_LOG_ERROR, "r2: cannot build the renewal request");
        return;
    }
    call_to_req(&sb->renew_call, &sb->renew_req);
    sb->renew_req.cb = on_renewed;
    sb->renew_req.userdata = sb;
    if (http_start(sb->http, &sb->renew_req) == 0)
        sb->renewing = true;
    else
        arm(sb, R2_RETRY_MS);
}

static void on_renew_timer(uv_timer_t *t)
{
    start_renewal(t->data);
}

void s3_r2_start_renewal(struct s3_be *sb)
{
    if (!sb->creds.temporary)
        return;
    uv_timer_init(sb->be->loop, &sb->renew_timer);
    sb->renew_timer.data = sb;
    /* Renewal alone must not keep the daemon's loop alive. */
    uv_unref((uv_handle_t *)&sb->renew_timer);
    sb->renew_timer_open = true;
    uv_timer_start(&sb->renew_timer, on_renew_timer, sb->o.temp_ttl_s * 1000ull * 2 / 3, 0);
}

void s3_r2_renew_now(struct s3_be *sb)
{
    if (sb->renew_timer_open && !sb->renewing)
        uv_timer_start(&sb->renew_timer, on_renew_timer, 0, 0);
}

static void on_renew_timer_closed(uv_handle_t *h)
{
    struct s3_be *sb = h->data;
    sb->stopped(sb);
}

void s3_r2_stop(struct s3_be *sb, void (*stopped)(struct s3_be *sb))
{
    if (!sb->renew_timer_open) {
        stopped(sb);
        return;
    }
    sb->renew_timer_open = false;
    sb->stopped = stopped;
    uv_close((uv_handle_t *)&sb->renew_timer, on_renew_timer_closed);
}
