#include "storage/backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct backend_ops *const backends[] = {
    &backend_local_ops,
};

static const struct backend_ops *backend_for_url(const char *url)
{
    size_t scheme_len = strcspn(url, ":");

    /* "file://" is the conventional spelling of a local directory. */
    if (scheme_len == 4 && strncmp(url, "file", 4) == 0)
        return &backend_local_ops;
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        if (strlen(backends[i]->name) == scheme_len &&
            strncmp(url, backends[i]->name, scheme_len) == 0)
            return backends[i];
    }
    return NULL;
}

int backend_new(struct backend **out, uv_loop_t *loop, const char *url, const char *data_dir,
                const char **msg)
{
    const struct backend_ops *ops = backend_for_url(url);
    struct backend *be;
    int r;

    *msg = NULL;
    if (!ops) {
        *msg = "unknown backend (supported: local, file://PATH)";
        return -EINVAL;
    }
    be = calloc(1, sizeof(*be) + ops->priv_size);
    if (!be)
        return -ENOMEM;
    be->ops = ops;
    be->loop = loop;
    be->priv = be + 1;
    r = ops->open(be, url, data_dir);
    if (r < 0) {
        *msg = "cannot open the backend";
        free(be);
        return r;
    }
    *out = be;
    return 0;
}

struct backend *backend_free(struct backend *be)
{
    if (be)
        be->ops->close(be);
    return NULL;
}

void backend_release(struct backend *be)
{
    free(be);
}

void backend_req_reset(struct backend_req *req)
{
    free(req->out);
    req->out = NULL;
    req->out_len = 0;
    for (size_t i = 0; i < req->nkeys; i++)
        free(req->keys[i]);
    free(req->keys);
    req->keys = NULL;
    req->nkeys = 0;
}

bool backend_key_valid(const char *key)
{
    size_t len = strnlen(key, BACKEND_MAX_KEY);
    const char *slash;

    if (len == 0 || len >= BACKEND_MAX_KEY || key[0] == '.')
        return false;
    slash = memchr(key, '/', len);
    if (!slash || slash == key || memchr(slash + 1, '/', len - (size_t)(slash + 1 - key)))
        return false;
    if (strlen(slash + 1) < 2 || slash[1] == '.')
        return false;
    for (const char *p = key; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-' || c == '/'))
            return false;
    }
    return true;
}

/* A list prefix is "<dir>/": the shape of a key without its name. */
static bool list_prefix_valid(const char *prefix)
{
    size_t len = strnlen(prefix, BACKEND_MAX_KEY);

    if (len < 2 || len >= BACKEND_MAX_KEY || prefix[0] == '.' || prefix[len - 1] != '/')
        return false;
    for (size_t i = 0; i + 1 < len; i++) {
        char c = prefix[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

int backend_start(struct backend *be, struct backend_req *req, enum backend_op op)
{
    int (*fn)(struct backend *, struct backend_req *) = NULL;
    int r;

    if (op == BACKEND_OP_LIST ? !list_prefix_valid(req->key) : !backend_key_valid(req->key))
        return -EINVAL;
    req->be = be;
    req->op = op;
    req->status = 0;
    req->out = NULL;
    req->out_len = 0;
    req->keys = NULL;
    req->nkeys = 0;
    req->next_ = NULL;
    switch (op) {
    case BACKEND_OP_PUT:
        fn = be->ops->put;
        break;
    case BACKEND_OP_GET:
        fn = be->ops->get;
        break;
    case BACKEND_OP_HEAD:
        fn = be->ops->head;
        break;
    case BACKEND_OP_DELETE:
        fn = be->ops->del;
        break;
    case BACKEND_OP_LIST:
        fn = be->ops->list;
        break;
    }
    if (!fn)
        return -EOPNOTSUPP;
    r = fn(be, req);
    if (r == 0)
        be->inflight++;
    return r;
}

void backend_complete(struct backend_req *req)
{
    struct backend *be = req->be;
    struct backend_stats *st = &be->stats;

    be->inflight--;
    if (req->status < 0 || req->status == BACKEND_E_UNAVAILABLE)
        st->failures++;
    switch (req->op) {
    case BACKEND_OP_PUT:
        st->puts++;
        if (req->status == 0)
            st->bytes_written += req->len;
        break;
    case BACKEND_OP_GET:
        st->gets++;
        if (req->status == 0)
            st->bytes_read += req->out_len;
        break;
    case BACKEND_OP_HEAD:
        st->heads++;
        break;
    case BACKEND_OP_DELETE:
        st->deletes++;
        break;
    case BACKEND_OP_LIST:
        st->lists++;
        break;
    }
    req->cb(req);
}
