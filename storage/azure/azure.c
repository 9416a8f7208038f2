/*
 * The azure backend's operations: ranged reads (Get Blob with x-ms-range,
 * on the read path storage/http shares with s3), Get Blob Properties for a
 * head, Delete Blob, and the backend's life. Puts are azure-put.c's,
 * listing azure-list.c's, the checks at start azure-open.c's.
 */
#include "storage/azure/azure.h"
#include "storage/azure/azure-int.h"
#include "storage/http/http-get.h"
#include "proto/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why the last open failed (opens run on the main thread, before the loop). */
static char open_msg[512];

static void op_done(struct az_op *op)
{
    struct http_req *h = &op->http;
    int status;

    if (h->result == -ECANCELED || op->cancelled) {
        az_op_complete(op, -ECANCELED);
        return;
    }
    if (h->result != 0) {
        az_op_complete(op, az_map_failure(op));
        return;
    }
    switch (op->req->op) {
    case BACKEND_OP_GET:
        if (h->status != 200 && h->status != 206 && h->status != 416)
            status = az_map_failure(op);
        else
            status = http_get_finish(h, container_of(op->req, struct backend_get, req), "azure");
        break;
    case BACKEND_OP_HEAD:
        if (h->status == 200 && h->content_length != UINT64_MAX) {
            container_of(op->req, struct backend_head, req)->size = h->content_length;
            status = 0;
        } else {
            status = h->status == 200 ? -EPROTO : az_map_failure(op);
        }
        break;
    case BACKEND_OP_DELETE:
        /* 202 Accepted; a blob that is not there is deleted as well. */
        if (h->status == 202 || h->status == 200)
            status = 0;
        else if ((status = az_map_failure(op)) == BACKEND_E_NOT_FOUND)
            status = 0;
        break;
    default:
        status = -EOPNOTSUPP;
    }
    az_op_complete(op, status);
}

static int send_blob_op(struct az_be *ab, struct backend_req *req, const char *method,
                        const char *const *extra, size_t nextra, size_t body_max)
{
    struct az_op *op;
    int r;

    if (!(op = az_op_new(ab, req, op_done)))
        return -ENOMEM;
    if ((r = az_blob_path(ab, req->key, op->path, sizeof(op->path))) < 0 ||
        (r = az_op_send(op, method, op->path, "", extra, nextra, body_max)) < 0)
        return az_op_abandon(op, r);
    return 0;
}

static int az_get(struct backend *be, struct backend_req *req)
{
    struct backend_get *get = container_of(req, struct backend_get, req);
    char range[96];
    const char *extra[1] = {range};

    return send_blob_op(az_of(be), req, "GET", extra,
                        http_get_range(get, "x-ms-range", range, sizeof(range)) ? 1 : 0,
                        http_get_body_max(get, AZ_ERROR_BODY_MAX));
}

static int az_head(struct backend *be, struct backend_req *req)
{
    return send_blob_op(az_of(be), req, "HEAD", NULL, 0, AZ_ERROR_BODY_MAX);
}

static int az_del(struct backend *be, struct backend_req *req)
{
    return send_blob_op(az_of(be), req, "DELETE", NULL, 0, AZ_ERROR_BODY_MAX);
}

static void az_cancel(struct backend *be, struct backend_req *req)
{
    for (struct az_op *op = az_of(be)->ops; op; op = op->next) {
        if (op->req != req)
            continue;
        op->cancelled = true;
        http_cancel(&op->http);
        return;
    }
}

static void az_describe_be(struct backend *be, char *out, size_t out_len)
{
    az_describe(&az_of(be)->o, out, out_len);
}

static void be_clear(struct az_be *ab)
{
    if (ab->marks) {
        explicit_bzero(ab->marks, AZ_MARKS * sizeof(*ab->marks));
        free(ab->marks);
        ab->marks = NULL;
    }
    az_creds_clear(&ab->creds);
    az_opts_clear(&ab->o);
}

static int az_open(struct backend *be, const char *url, const char **msg)
{
    struct az_be *ab = az_of(be);
    int r;

    memset(ab, 0, sizeof(*ab));
    ab->be = be;
    if ((r = az_open_checks(ab, url, msg)) != 0) {
        be_clear(ab);
        if (*msg == ab->msg) {
            /* The backend's memory goes with the failure; the message must outlive it. */
            snprintf(open_msg, sizeof(open_msg), "%s", ab->msg);
            *msg = open_msg;
        }
        return r;
    }
    if ((r = http_new(&ab->http, be->loop, &ab->http_opts)) < 0) {
        be_clear(ab);
        snprintf(open_msg, sizeof(open_msg), "azure: cannot set up HTTP: %s", strerror(-r));
        *msg = open_msg;
        return r;
    }
    /* Many clients on one account: full jitter spreads their retries; `timeout` bounds all. */
    be->parallel = ab->o.connections;
    be->retry.attempts = 30;
    be->retry.backoff_ms = 100;
    be->retry.backoff_max_ms = 5000;
    be->retry.full_jitter = true;
    be->retry.timeout_ms = ab->o.timeout_s * 1000u;
    return 0;
}

static void on_http_closed(void *arg)
{
    struct az_be *ab = arg;
    struct backend *be = ab->be;

    be_clear(ab);
    backend_release(be);
}

static void az_close(struct backend *be)
{
    struct az_be *ab = az_of(be);

    http_free(ab->http, on_http_closed, ab);
}

const struct backend_ops backend_azure_ops = {
    .name = "azure",
    .caps = 0,
    .priv_size = sizeof(struct az_be),
    .open = az_open,
    .close = az_close,
    .put = az_put,
    .get = az_get,
    .head = az_head,
    .del = az_del,
    .list = az_list,
    .cancel = az_cancel,
    .describe = az_describe_be,
};
