/*
 * One HTTP request of an azure attempt (struct az_op): built, signed (or
 * given the SAS) and sent on the loop, and what a failed answer means for
 * the backend front end.
 */
#include "storage/azure/azure-int.h"
#include "storage/http/http-fail.h"
#include "storage/http/xml.h"
#include "proto/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

static void on_http_done(struct http_req *http)
{
    struct az_op *op = http->userdata;

    op->done(op);
}

int az_encode(const char *s, bool keep_slash, char *out, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' || *p == '~' ||
                     (keep_slash && *p == '/');
        if (n + (plain ? 1 : 3) >= len)
            return -ENAMETOOLONG;
        if (plain) {
            out[n++] = (char)*p;
        } else {
            out[n++] = '%';
            out[n++] = hex[*p >> 4];
            out[n++] = hex[*p & 15];
        }
    }
    if (len == 0)
        return -ENAMETOOLONG;
    out[n] = '\0';
    return 0;
}

int az_blob_path(const struct az_be *ab, const char *key, char *out, size_t len)
{
    char name[AZ_MAX_PREFIX + BACKEND_MAX_KEY + 2];
    int n = ab->o.prefix[0] ? snprintf(name, sizeof(name), "%s/%s", ab->o.prefix, key)
                            : snprintf(name, sizeof(name), "%s", key);
    size_t used;

    if (n < 0 || (size_t)n >= sizeof(name))
        return -ENAMETOOLONG;
    n = snprintf(out, len, "%s/%s/", ab->o.base_path, ab->o.container);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    used = (size_t)n;
    return az_encode(name, true, out + used, len - used);
}

void az_op_clear(struct az_op *op)
{
    http_req_reset(&op->http);
    OPENSSL_cleanse(op->h_auth, sizeof(op->h_auth));
    /* The URL carries the SAS, when there is one. */
    OPENSSL_cleanse(op->http.url, sizeof(op->http.url));
    free(op->blk_iov);
    op->blk_iov = NULL;
    free(op->blocklist);
    op->blocklist = NULL;
}

static void op_unlink(struct az_op *op)
{
    struct az_op **p = &op->ab->ops;

    while (*p && *p != op)
        p = &(*p)->next;
    if (*p)
        *p = op->next;
}

void az_op_complete(struct az_op *op, int status)
{
    struct backend_req *req = op->req;

    op_unlink(op);
    req->status = status;
    req->retry_after_ms = op->http.retry_after_ms;
    az_op_clear(op);
    free(op);
    backend_complete(req);
}

int az_op_abandon(struct az_op *op, int r)
{
    op_unlink(op);
    az_op_clear(op);
    free(op);
    return r;
}

struct az_op *az_op_new(struct az_be *ab, struct backend_req *req, void (*done)(struct az_op *op))
{
    struct az_op *op = calloc(1, sizeof(*op));

    if (!op)
        return NULL;
    op->ab = ab;
    op->req = req;
    op->done = done;
    op->next = ab->ops;
    ab->ops = op;
    return op;
}

int az_op_prepare(struct az_op *op, const char *method, const char *path, const char *query,
                  const char *const *extra, size_t nextra, size_t body_max)
{
    struct az_be *ab = op->ab;
    const char *hdrs[8];
    char date[AZ_DATE_SIZE], container[AZ_MAX_URL + AZ_MAX_CONTAINER + 4];
    const char *sas = ab->creds.auth == AZ_AUTH_SAS ? ab->creds.sas : "";
    size_t nh = 0;
    uint64_t body_len = 0;
    int r;

    if (nextra > 4)
        return -EINVAL;
    if (!path) {
        snprintf(container, sizeof(container), "%s/%s", ab->o.base_path, ab->o.container);
        path = container;
    }
    if (path != op->path) {
        if (strlen(path) >= sizeof(op->path))
            return -ENAMETOOLONG;
        memmove(op->path, path, strlen(path) + 1);
    }
    if (!query)
        query = "";
    if (query != op->query) {
        if (strlen(query) >= sizeof(op->query))
            return -ENAMETOOLONG;
        memmove(op->query, query, strlen(query) + 1);
    }
    for (size_t i = 0; i < op->http.body_iovcnt; i++)
        body_len += op->http.body[i].iov_len;
    az_format_date(time(NULL), date);
    snprintf(op->h_date, sizeof(op->h_date), "x-ms-date: %s", date);
    snprintf(op->h_version, sizeof(op->h_version), "x-ms-version: %s", AZ_VERSION);
    hdrs[nh++] = op->h_date;
    hdrs[nh++] = op->h_version;
    for (size_t i = 0; i < nextra; i++)
        hdrs[nh++] = extra[i];
    if (ab->creds.auth == AZ_AUTH_KEY) {
        char auth[AZ_AUTH_SIZE];
        struct az_sign_req sr = {
            .method = method,
            .path = op->path,
            .query = op->query,
            .content_length = body_len,
            .headers = hdrs,
            .nheaders = nh,
        };
        if ((r = az_sign(ab->o.account, ab->creds.key, ab->creds.key_len, &sr, auth,
                         sizeof(auth))) < 0)
            return r;
        snprintf(op->h_auth, sizeof(op->h_auth), "Authorization: %s", auth);
        OPENSSL_cleanse(auth, sizeof(auth));
        hdrs[nh++] = op->h_auth;
    }
    /* The endpoint already ends in base_path; the path starts with it. */
    size_t ep_len = strlen(ab->o.endpoint) - strlen(ab->o.base_path);
    r = snprintf(op->http.url, sizeof(op->http.url), "%.*s%s%s%s%s%s", (int)ep_len, ab->o.endpoint,
                 op->path, op->query[0] || sas[0] ? "?" : "", op->query,
                 op->query[0] && sas[0] ? "&" : "", sas);
    if (r < 0 || (size_t)r >= sizeof(op->http.url))
        return -ENAMETOOLONG;
    op->http.nheaders = 0;
    for (size_t i = 0; i < nh; i++)
        op->http.headers[op->http.nheaders++] = hdrs[i];
    op->http.method = method;
    op->http.body_max = body_max;
    op->http.cb = on_http_done;
    op->http.userdata = op;
    return 0;
}

int az_op_send(struct az_op *op, const char *method, const char *path, const char *query,
               const char *const *extra, size_t nextra, size_t body_max)
{
    int r = az_op_prepare(op, method, path, query, extra, nextra, body_max);
    return r < 0 ? r : http_start(op->ab->http, &op->http);
}

static bool code_is(const char *code, const char *a)
{
    return strcmp(code, a) == 0;
}

void az_error_of(const struct http_req *h, struct xml_error *err)
{
    char *nl;

    memset(err, 0, sizeof(*err));
    if (h->result == 0 && h->resp_len)
        xml_parse_error((const char *)h->resp, h->resp_len, err);
    if (!err->code[0])
        snprintf(err->code, sizeof(err->code), "%s", h->error_code);
    /* Azure's message goes on with "\nRequestId:...\nTime:...": the first line says it. */
    if ((nl = strpbrk(err->message, "\r\n")))
        *nl = '\0';
}

int az_map_failure(struct az_op *op)
{
    struct http_req *h = &op->http;
    struct xml_error err = {0};
    long st = h->status;
    const char *what = http_op_name(op->req->op);

    if (h->result != 0)
        return http_transport_failure(h, "azure", what, op->req->key);
    az_error_of(h, &err);
    if (st == 404 && !code_is(err.code, "ContainerNotFound"))
        return BACKEND_E_NOT_FOUND;
    if (st == 412 || (st == 409 && code_is(err.code, "BlobAlreadyExists")))
        return BACKEND_E_EXISTS;
    if (http_status_retryable(st) || code_is(err.code, "ServerBusy") ||
        code_is(err.code, "OperationTimedOut") || code_is(err.code, "InternalError")) {
        backend_log(BACKEND_LOG_INFO, "azure: %s %s: HTTP %ld %s%s%s", what, op->req->key, st,
                    err.code, err.message[0] ? ": " : "", err.message);
        return BACKEND_E_UNAVAILABLE;
    }
    if (st == 403 && code_is(err.code, "AuthenticationFailed") &&
        (strstr(err.message, "time") || strstr(err.message, "date")))
        backend_log(BACKEND_LOG_ERROR,
                    "azure: %s %s: HTTP 403 AuthenticationFailed: %s (the server refuses the "
                    "request's time: is this machine's clock right?)",
                    what, op->req->key, err.message);
    else
        backend_log(BACKEND_LOG_ERROR, "azure: %s %s: HTTP %ld %s%s%s", what, op->req->key, st,
                    err.code[0] ? err.code : "(no error code)", err.message[0] ? ": " : "",
                    err.message);
    return http_refusal_errno(st, code_is(err.code, "ContainerNotFound"));
}
