/*
 * The S3 backend (and R2, which speaks S3): each attempt of a backend request
 * is one signed HTTP request on the loop (storage/http). Sealed packs are
 * whole-object PUTs with their real payload hash, reads are ranged GETs, and
 * listing is ListObjectsV2 from a key (start-after), so a cursor is just the
 * last key seen.
 */
#include "storage/s3/s3.h"
#include "storage/s3/s3-int.h"
#include "storage/s3/s3-xml.h"
#include "storage/http/http-get.h"
#include "storage/http/xml.h"
#include "proto/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

/* Why the last open failed (opens run on the main thread, before the loop). */
static char open_msg[512];

static int finish_get(struct s3_op *op)
{
    struct backend_get *get = container_of(op->req, struct backend_get, req);
    struct http_req *h = &op->http;

    if (h->status != 200 && h->status != 206 && h->status != 416)
        return s3_map_failure(op);
    return http_get_finish(h, get, "s3");
}

struct list_ctx {
    struct backend_list *list;
    size_t cap;                 /* entries allocated */
    size_t skip;                /* length of "PREFIX/" */
    const char *want;           /* the list's own prefix ("packs/") */
    char last[BACKEND_MAX_KEY]; /* the page's last key, without PREFIX/: the next cursor */
    bool last_ok;
};

static int on_list_entry(void *opaque, const char *name, size_t len, uint64_t size, int64_t mtime)
{
    struct list_ctx *c = opaque;
    struct backend_list *list = c->list;
    const char *key = name + c->skip;

    c->last_ok = false;
    /* Only our own keys: under the prefix, and in cairn's key alphabet. */
    if (len <= c->skip || len - c->skip >= BACKEND_MAX_KEY)
        return 0;
    memcpy(c->last, key, len - c->skip + 1);
    c->last_ok = true;
    if (strncmp(key, c->want, strlen(c->want)) != 0 || !backend_key_valid(key))
        return 0;
    /* more than we asked for: -EPROTO */
    return backend_list_add(list, &c->cap, BACKEND_LIST_MAX, key, len - c->skip, size, mtime);
}

static int finish_list(struct s3_op *op)
{
    struct backend_list *list = container_of(op->req, struct backend_list, req);
    struct http_req *h = &op->http;
    struct s3_be *sb = op->sb;
    struct s3_list_page page;
    struct list_ctx c = {
        .list = list,
        .skip = sb->o.prefix[0] ? strlen(sb->o.prefix) + 1 : 0,
        .want = op->req->key,
    };
    int r;

    if (h->status != 200)
        return s3_map_failure(op);
    list->entries = NULL;
    list->nentries = 0;
    r = s3_xml_parse_list((const char *)h->resp, h->resp_len, S3_XML_MAX_KEY, on_list_entry, &c,
                          &page);
    if (r == -ENOMEM)
        return r;
    if (r < 0 || (page.truncated && (!page.entries || !c.last_ok))) {
        backend_log(BACKEND_LOG_INFO, "s3: LIST %s: malformed ListObjectsV2 response (%s)",
                    op->req->key, strerror(r < 0 ? -r : EPROTO));
        return BACKEND_E_UNAVAILABLE;
    }
    list->next_cursor[0] = '\0';
    if (page.truncated)
        memcpy(list->next_cursor, c.last, strlen(c.last) + 1);
    return 0;
}

static void op_done(struct s3_op *op)
{
    struct http_req *h = &op->http;
    int status;

    if (h->result == -ECANCELED || op->cancelled) {
        s3_op_complete(op, -ECANCELED);
        return;
    }
    if (h->result != 0) {
        s3_op_complete(op, s3_map_failure(op));
        return;
    }
    switch (op->req->op) {
    case BACKEND_OP_PUT:
        status = h->status == 200 ? 0 : s3_map_failure(op);
        break;
    case BACKEND_OP_GET:
        status = finish_get(op);
        break;
    case BACKEND_OP_HEAD:
        if (h->status == 200 && h->content_length != UINT64_MAX) {
            container_of(op->req, struct backend_head, req)->size = h->content_length;
            status = 0;
        } else {
            status = h->status == 200 ? -EPROTO : s3_map_failure(op);
        }
        break;
    case BACKEND_OP_LIST:
        status = finish_list(op);
        break;
    default:
        status = -EOPNOTSUPP;
    }
    s3_op_complete(op, status);
}

/* ---- operations ------------------------------------------------------------------- */

static int send_put(struct s3_op *op)
{
    struct backend_put *put = container_of(op->req, struct backend_put, req);
    struct s3_be *sb = op->sb;
    const char *extra[2];
    size_t nextra = 0;
    char name[BACKEND_MAX_KEY + S3_MAX_PREFIX + 2];
    int r;

    if ((r = s3_object_name(&sb->o, op->req->key, name, sizeof(name))) < 0)
        return r;
    if (put->flags & BACKEND_PUT_CREATE)
        extra[nextra++] = "If-None-Match: *";
    if (sb->o.storage_class[0]) {
        snprintf(op->h_extra[0], sizeof(op->h_extra[0]), "x-amz-storage-class: %s",
                 sb->o.storage_class);
        extra[nextra++] = op->h_extra[0];
    }
    op->http.body = put->iov;
    op->http.body_iovcnt = put->iovcnt;
    return s3_op_send(op, "PUT", name, NULL, 0, extra, nextra, S3_ERROR_BODY_MAX);
}

static void hash_work(uv_work_t *w)
{
    struct s3_op *op = container_of(w, struct s3_op, work);
    struct backend_put *put = container_of(op->req, struct backend_put, req);

    s3_sha256_hex(put->iov, put->iovcnt, op->hash);
}

static void hash_done(uv_work_t *w, int status)
{
    struct s3_op *op = container_of(w, struct s3_op, work);
    int r;

    op->hashing = false;
    if (status < 0 || op->cancelled) {
        s3_op_complete(op, -ECANCELED);
        return;
    }
    if ((r = send_put(op)) < 0)
        s3_op_complete(op, r);
}

static int s3_put(struct backend *be, struct backend_req *req)
{
    struct backend_put *put = container_of(req, struct backend_put, req);
    struct s3_be *sb = s3_of(be);
    struct s3_op *op = s3_op_new(sb, req, op_done);
    uint64_t total = 0;
    int r;

    if (!op)
        return -ENOMEM;
    for (size_t i = 0; i < put->iovcnt; i++)
        total += put->iov[i].iov_len;
    if (total > S3_HASH_INLINE_MAX) {
        /* Hashing megabytes would stall every connection: the thread pool does it. */
        op->hashing = true;
        if ((r = uv_queue_work(be->loop, &op->work, hash_work, hash_done)) < 0)
            return s3_op_abandon(op, r);
        return 0;
    }
    s3_sha256_hex(put->iov, put->iovcnt, op->hash);
    if ((r = send_put(op)) < 0)
        return s3_op_abandon(op, r);
    return 0;
}

static int s3_get(struct backend *be, struct backend_req *req)
{
    struct backend_get *get = container_of(req, struct backend_get, req);
    struct s3_be *sb = s3_of(be);
    struct s3_op *op;
    char name[BACKEND_MAX_KEY + S3_MAX_PREFIX + 2];
    const char *extra[1];
    size_t nextra = 0, want;
    int r;

    if ((r = s3_object_name(&sb->o, req->key, name, sizeof(name))) < 0)
        return r;
    if (!(op = s3_op_new(sb, req, op_done)))
        return -ENOMEM;
    if (http_get_range(get, "Range", op->h_range, sizeof(op->h_range)))
        extra[nextra++] = op->h_range;
    want = http_get_body_max(get, S3_ERROR_BODY_MAX);
    if ((r = s3_op_send(op, "GET", name, NULL, 0, extra, nextra, want)) < 0)
        return s3_op_abandon(op, r);
    return 0;
}

static int s3_head(struct backend *be, struct backend_req *req)
{
    return s3_send_bare(s3_of(be), req, "HEAD", op_done);
}

static int s3_del(struct backend *be, struct backend_req *req)
{
    /* At once, or batched with the others that wait for deletes in flight. */
    return s3_delete_queue(s3_of(be), req);
}

static int s3_list(struct backend *be, struct backend_req *req)
{
    struct backend_list *list = container_of(req, struct backend_list, req);
    struct s3_be *sb = s3_of(be);
    struct s3_op *op;
    char prefix[BACKEND_MAX_KEY + S3_MAX_PREFIX + 2], after[BACKEND_MAX_KEY + S3_MAX_PREFIX + 2];
    char max_keys[24];
    struct s3_param q[4];
    size_t nq = 0;
    int r;

    if ((r = s3_object_name(&sb->o, req->key, prefix, sizeof(prefix))) < 0)
        return r;
    snprintf(max_keys, sizeof(max_keys), "%zu",
             list->max_keys ? list->max_keys : BACKEND_LIST_PAGE);
    q[nq++] = (struct s3_param){"list-type", "2"};
    q[nq++] = (struct s3_param){"max-keys", max_keys};
    q[nq++] = (struct s3_param){"prefix", prefix};
    if (list->cursor[0]) {
        if ((r = s3_object_name(&sb->o, list->cursor, after, sizeof(after))) < 0)
            return r;
        q[nq++] = (struct s3_param){"start-after", after};
    }
    if (!(op = s3_op_new(sb, req, op_done)))
        return -ENOMEM;
    if ((r = s3_op_send(op, "GET", "", q, nq, NULL, 0, S3_LIST_BODY_MAX)) < 0)
        return s3_op_abandon(op, r);
    return 0;
}

static void s3_cancel(struct backend *be, struct backend_req *req)
{
    struct s3_be *sb = s3_of(be);

    /* A delete waiting for its batch, or in one, runs to its end: it is quick. */
    for (struct s3_op *op = sb->ops; op; op = op->next) {
        if (op->req != req || op->batch)
            continue;
        op->cancelled = true;
        if (op->hashing)
            uv_cancel((uv_req_t *)&op->work); /* hash_done sees op->cancelled either way */
        else
            http_cancel(&op->http);
        return;
    }
}

static void be_describe(struct backend *be, char *out, size_t out_len)
{
    s3_describe(&s3_of(be)->o, out, out_len);
}

/* ---- opening: credentials and a first request ------------------------------------ */

/* The reason open gives for a failure (cut to fit: it is a message, not data). */
__attribute__((format(printf, 2, 3))) static void set_msg(struct s3_be *sb, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sb->msg, sizeof(sb->msg), fmt, ap);
    va_end(ap);
}

/*
 * One ListObjectsV2 of at most one key: the endpoint answers, the bucket
 * exists and the credentials are good. A server that is down or throttling
 * is asked again until `timeout`; a refusal ends the start at once.
 */
static int probe(struct s3_be *sb)
{
    uint64_t give_up = uv_hrtime() / 1000000 + sb->o.timeout_s * 1000u;
    unsigned delay_ms = 200;

    for (;;) {
        struct s3_op op = {.sb = sb};
        struct backend_req fake = {.op = BACKEND_OP_LIST};
        struct xml_error err = {0};
        char prefix[S3_MAX_PREFIX + 2];
        struct s3_param q[3] = {{"list-type", "2"}, {"max-keys", "1"}, {"prefix", prefix}};
        int r;

        snprintf(prefix, sizeof(prefix), "%s%s", sb->o.prefix, sb->o.prefix[0] ? "/" : "");
        op.req = &fake;
        /* s3_op_send() starts an asynchronous request; the probe needs the same one, blocking. */
        r = s3_op_prepare(&op, "GET", "", q, 3, NULL, 0, S3_ERROR_BODY_MAX);
        if (r < 0) {
            set_msg(sb, "s3: cannot build the first request: %s", strerror(-r));
            return r;
        }
        http_perform(&sb->http_opts, &op.http);
        if (op.http.result == 0 && op.http.resp_len)
            xml_parse_error((const char *)op.http.resp, op.http.resp_len, &err);
        s3_op_clear(&op);
        if (op.http.result == 0 && op.http.status == 200)
            return 0;
        if (op.http.result == HTTP_E_TLS) {
            set_msg(sb, "s3: TLS to %s failed: %s", sb->o.endpoint, op.http.error);
            return -EPROTO;
        }
        bool transient = op.http.result == HTTP_E_NETWORK || op.http.status >= 500 ||
                         op.http.status == 429 || op.http.status == 408;
        if (!transient) {
            if (op.http.status == 403 || op.http.status == 401)
                set_msg(sb, "s3: %s refused our credentials (%s): %s%s%s", sb->o.endpoint,
                        sb->creds.origin, err.code[0] ? err.code : "HTTP 403",
                        err.message[0] ? ": " : "", err.message);
            else if (op.http.status == 404)
                set_msg(sb, "s3: bucket %s does not exist at %s (%s)", sb->o.bucket, sb->o.endpoint,
                        err.code[0] ? err.code : "HTTP 404");
            else
                set_msg(sb, "s3: %s answered HTTP %ld %s%s%s", sb->o.endpoint, op.http.status,
                        err.code, err.message[0] ? ": " : "", err.message);
            return op.http.status == 403 || op.http.status == 401 ? -EACCES : -EIO;
        }
        if (uv_hrtime() / 1000000 + delay_ms >= give_up) {
            if (op.http.result)
                set_msg(sb, "s3: cannot reach %s: %s", sb->o.endpoint, op.http.error);
            else
                set_msg(sb, "s3: %s still answers HTTP %ld %s", sb->o.endpoint, op.http.status,
                        err.code);
            return -EHOSTUNREACH;
        }
        backend_log(BACKEND_LOG_WARN, "s3: %s not ready (%s), trying again", sb->o.endpoint,
                    op.http.result ? op.http.error
                    : err.code[0]  ? err.code
                                   : "server error");
        usleep(delay_ms * 1000);
        if (delay_ms < 5000)
            delay_ms *= 2;
    }
}

static int s3_open(struct backend *be, const char *url, const char **msg)
{
    struct s3_be *sb = s3_of(be);
    int r;

    memset(sb, 0, sizeof(*sb));
    sb->be = be;
    if ((r = s3_parse_url(url, &sb->o, msg)) != 0)
        return r;
    if (http_global_init() < 0) {
        *msg = "s3: libcurl failed to initialise";
        return -EIO;
    }
    sb->http_opts = (struct http_opts){
        .connections = sb->o.connections,
        .connect_timeout_ms = sb->o.connect_timeout_s * 1000u,
        .stall_timeout_ms = sb->o.stall_timeout_s * 1000u,
    };
    if ((r = s3_creds_resolve(&sb->creds, &sb->o, sb->msg, sizeof(sb->msg))) < 0)
        goto fail;
    if ((r = s3_signer_new(&sb->signer, sb->o.region, "s3")) < 0) {
        set_msg(sb, "s3: bad region %s", sb->o.region);
        goto fail;
    }
    if (sb->creds.temporary) {
        if ((r = s3_r2_fetch_blocking(sb, sb->msg, sizeof(sb->msg))) < 0)
            goto fail;
    } else if ((r = s3_signer_set_credentials(sb->signer, sb->creds.access_key_id,
                                              sb->creds.secret_access_key,
                                              sb->creds.session_token)) < 0) {
        set_msg(sb, "s3: the credentials from %s are malformed", sb->creds.origin);
        goto fail;
    }
    backend_log(BACKEND_LOG_INFO, "s3: credentials from %s", sb->creds.origin);
    if ((r = probe(sb)) < 0)
        goto fail;
    if ((r = http_new(&sb->http, be->loop, &sb->http_opts)) < 0) {
        set_msg(sb, "s3: cannot set up HTTP: %s", strerror(-r));
        goto fail;
    }
    s3_delete_init(sb);
    s3_r2_start_renewal(sb);
    /*
     * Many clients hitting one server: full jitter spreads their retries.
     * The request deadline (`timeout`) bounds the whole, so the number of
     * attempts is generous.
     */
    be->parallel = sb->o.connections;
    be->retry.attempts = 30;
    be->retry.backoff_ms = 100;
    be->retry.backoff_max_ms = 5000;
    be->retry.full_jitter = true;
    be->retry.timeout_ms = sb->o.timeout_s * 1000u;
    return 0;
fail:
    sb->signer = s3_signer_free(sb->signer);
    s3_creds_clear(&sb->creds);
    s3_opts_clear(&sb->o);
    /* The backend's memory goes with the failure; the message must outlive it. */
    snprintf(open_msg, sizeof(open_msg), "%s", sb->msg);
    *msg = open_msg;
    return r;
}

static void on_http_closed(void *arg)
{
    struct s3_be *sb = arg;
    struct backend *be = sb->be;

    sb->signer = s3_signer_free(sb->signer);
    s3_creds_clear(&sb->creds);
    s3_opts_clear(&sb->o);
    backend_release(be);
}

static void on_deletes_stopped(struct s3_be *sb)
{
    http_free(sb->http, on_http_closed, sb);
}

static void on_renewal_stopped(struct s3_be *sb)
{
    s3_delete_stop(sb, on_deletes_stopped);
}

static void s3_close(struct backend *be)
{
    s3_r2_stop(s3_of(be), on_renewal_stopped);
}

#define S3_OPS(scheme)                                                                             \
    {                                                                                              \
        .name = scheme, .caps = 0, .priv_size = sizeof(struct s3_be), .open = s3_open,             \
        .close = s3_close, .put = s3_put, .get = s3_get, .head = s3_head, .del = s3_del,           \
        .list = s3_list, .cancel = s3_cancel, .describe = be_describe,                             \
    }

const struct backend_ops backend_s3_ops = S3_OPS("s3");
const struct backend_ops backend_r2_ops = S3_OPS("r2");
