/*
 * One attempt of an S3 request (struct s3_op): built, signed and sent on the
 * loop, and what a failed answer means for the backend front end. The
 * operations themselves are in s3.c and s3-delete.c.
 */
#include "storage/s3/s3-int.h"
#include "storage/http/http-fail.h"
#include "storage/s3/s3-xml.h"
#include "storage/http/xml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

static void on_http_done(struct http_req *http)
{
    struct s3_op *op = http->userdata;

    op->done(op);
}

/* ---- building and signing a request ----------------------------------------- */

/* The object's name in the bucket: PREFIX/KEY, or KEY without a prefix. */
int s3_object_name(const struct s3_opts *o, const char *key, char *out, size_t len)
{
    int n =
        o->prefix[0] ? snprintf(out, len, "%s/%s", o->prefix, key) : snprintf(out, len, "%s", key);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static void drop_token_header(struct s3_op *op)
{
    if (op->h_token) {
        OPENSSL_cleanse(op->h_token, strlen(op->h_token));
        free(op->h_token);
        op->h_token = NULL;
    }
}

/* What an attempt holds besides itself; the probe's op lives on the stack. */
void s3_op_clear(struct s3_op *op)
{
    http_req_reset(&op->http);
    if (op->sig) {
        OPENSSL_cleanse(op->sig, sizeof(*op->sig));
        free(op->sig);
        op->sig = NULL;
    }
    drop_token_header(op);
    OPENSSL_cleanse(op->h_auth, sizeof(op->h_auth));
}

void s3_op_free(struct s3_op *op)
{
    s3_op_clear(op);
    free(op);
}

void s3_op_unlink(struct s3_op *op)
{
    struct s3_op **p = &op->sb->ops;

    while (*p && *p != op)
        p = &(*p)->next;
    if (*p)
        *p = op->next;
}

/* Ends the attempt: the backend front end hears of it. */
void s3_op_complete(struct s3_op *op, int status)
{
    struct backend_req *req = op->req;

    s3_op_unlink(op);
    req->status = status;
    req->retry_after_ms = op->http.retry_after_ms;
    s3_op_free(op);
    backend_complete(req);
}

/*
 * Builds and signs the request: `name` is the object's name ("" for the
 * bucket itself), `query` its raw parameters, `extra` more headers to sign.
 */
int s3_op_prepare(struct s3_op *op, const char *method, const char *name,
                  const struct s3_param *query, size_t nquery, const char *const *extra,
                  size_t nextra, size_t body_max)
{
    struct s3_be *sb = op->sb;
    struct s3_header hdrs[4];
    char path[S3_MAX_PREFIX + BACKEND_MAX_KEY + 80];
    size_t nh = 0;
    int r;

    if (nextra > 4 || nextra + 5 > HTTP_MAX_HEADERS)
        return -EINVAL;
    if (op->hash[0] == '\0')
        memcpy(op->hash, S3_EMPTY_SHA256, sizeof(S3_EMPTY_SHA256));
    /* "Name: value" lines, signed as they are sent. */
    for (size_t i = 0; i < nextra; i++) {
        const char *colon = strchr(extra[i], ':');
        size_t len = (size_t)(colon - extra[i]);
        if (!colon || len >= sizeof(op->extra_names[i]))
            return -EINVAL;
        memcpy(op->extra_names[i], extra[i], len);
        op->extra_names[i][len] = '\0';
        hdrs[nh].name = op->extra_names[i];
        hdrs[nh].value = colon + 1 + strspn(colon + 1, " ");
        nh++;
    }
    r = snprintf(path, sizeof(path), "%s/%s", sb->o.base_path, name);
    if (r < 0 || (size_t)r >= sizeof(path))
        return -ENAMETOOLONG;
    if (!op->sig && !(op->sig = malloc(sizeof(*op->sig))))
        return -ENOMEM;
    r = s3_sign(sb->signer,
                &(struct s3_request){
                    .method = method,
                    .path = path,
                    .params = query,
                    .n_params = nquery,
                    .host = sb->o.request_host,
                    .headers = hdrs,
                    .n_headers = nh,
                    .payload_sha256 = op->hash,
                    .now = time(NULL),
                },
                op->sig);
    if (r < 0)
        return r;
    r = snprintf(op->http.url, sizeof(op->http.url), "%s://%s%s%s%s",
                 sb->o.https ? "https" : "http", sb->o.request_host, op->sig->path,
                 op->sig->query[0] ? "?" : "", op->sig->query);
    if (r < 0 || (size_t)r >= sizeof(op->http.url))
        return -ENAMETOOLONG;
    snprintf(op->h_host, sizeof(op->h_host), "Host: %s", sb->o.request_host);
    snprintf(op->h_date, sizeof(op->h_date), "x-amz-date: %s", op->sig->amz_date);
    snprintf(op->h_sha, sizeof(op->h_sha), "x-amz-content-sha256: %s", op->hash);
    r = snprintf(op->h_auth, sizeof(op->h_auth), "Authorization: %s", op->sig->authorization);
    if (r < 0 || (size_t)r >= sizeof(op->h_auth))
        return -ENAMETOOLONG;
    op->http.nheaders = 0;
    op->http.headers[op->http.nheaders++] = op->h_host;
    op->http.headers[op->http.nheaders++] = op->h_date;
    op->http.headers[op->http.nheaders++] = op->h_sha;
    op->http.headers[op->http.nheaders++] = op->h_auth;
    /*
     * Made anew for every attempt, at the size of this attempt's token:
     * credentials renewed between attempts may carry a longer one.
     */
    drop_token_header(op);
    if (op->sig->security_token[0]) {
        size_t len = strlen(op->sig->security_token) + sizeof("x-amz-security-token: ");
        if (!(op->h_token = malloc(len)))
            return -ENOMEM;
        snprintf(op->h_token, len, "x-amz-security-token: %s", op->sig->security_token);
        op->http.headers[op->http.nheaders++] = op->h_token;
    }
    for (size_t i = 0; i < nextra; i++)
        op->http.headers[op->http.nheaders++] = extra[i];
    op->http.method = method;
    op->http.body_max = body_max;
    op->http.cb = on_http_done;
    op->http.userdata = op;
    return 0;
}

int s3_op_send(struct s3_op *op, const char *method, const char *name, const struct s3_param *query,
               size_t nquery, const char *const *extra, size_t nextra, size_t body_max)
{
    int r = s3_op_prepare(op, method, name, query, nquery, extra, nextra, body_max);
    return r < 0 ? r : http_start(op->sb->http, &op->http);
}

/* A request without a body or a query: HEAD or DELETE of the object. */
int s3_send_bare(struct s3_be *sb, struct backend_req *req, const char *method,
                 void (*done)(struct s3_op *op))
{
    struct s3_op *op;
    char name[BACKEND_MAX_KEY + S3_MAX_PREFIX + 2];
    int r;

    if ((r = s3_object_name(&sb->o, req->key, name, sizeof(name))) < 0)
        return r;
    if (!(op = s3_op_new(sb, req, done)))
        return -ENOMEM;
    if ((r = s3_op_send(op, method, name, NULL, 0, NULL, 0, S3_ERROR_BODY_MAX)) < 0)
        return s3_op_abandon(op, r);
    return 0;
}

/* ---- what a response means ----------------------------------------------------- */

static bool code_is(const char *code, const char *a)
{
    return strcmp(code, a) == 0;
}

/* A failed response: a backend status, with the server's code and message in the log. */
int s3_map_failure(struct s3_op *op)
{
    struct http_req *h = &op->http;
    struct s3_be *sb = op->sb;
    struct xml_error err = {0};
    long st = h->status;

    if (h->result != 0)
        return http_transport_failure(h, "s3", http_op_name(op->req->op), op->req->key);
    if (h->resp_len)
        xml_parse_error((const char *)h->resp, h->resp_len, &err);
    if (st == 404 && !code_is(err.code, "NoSuchBucket"))
        return BACKEND_E_NOT_FOUND;
    if (st == 412)
        return BACKEND_E_EXISTS;
    if (http_status_retryable(st) || code_is(err.code, "SlowDown") ||
        code_is(err.code, "RequestTimeout") || code_is(err.code, "RequestTimeTooSkewed") ||
        code_is(err.code, "InternalError") || code_is(err.code, "ExpiredToken")) {
        if (code_is(err.code, "ExpiredToken"))
            s3_r2_renew_now(sb);
        backend_log(BACKEND_LOG_INFO, "s3: %s %s: HTTP %ld %s%s%s", http_op_name(op->req->op),
                    op->req->key, st, err.code, err.message[0] ? ": " : "", err.message);
        return BACKEND_E_UNAVAILABLE;
    }
    backend_log(BACKEND_LOG_ERROR, "s3: %s %s: HTTP %ld %s%s%s", http_op_name(op->req->op),
                op->req->key, st, err.code[0] ? err.code : "(no error code)",
                err.message[0] ? ": " : "", err.message);
    return http_refusal_errno(st, code_is(err.code, "NoSuchBucket"));
}

struct s3_op *s3_op_new(struct s3_be *sb, struct backend_req *req, void (*done)(struct s3_op *op))
{
    struct s3_op *op = calloc(1, sizeof(*op));

    if (!op)
        return NULL;
    op->sb = sb;
    op->req = req;
    op->done = done;
    op->next = sb->ops;
    sb->ops = op;
    return op;
}

/* A failed start: the front end hears of it through the return value, not a callback. */
int s3_op_abandon(struct s3_op *op, int r)
{
    s3_op_unlink(op);
    s3_op_free(op);
    return r;
}
