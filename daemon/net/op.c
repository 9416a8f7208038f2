/*
 * What every operation shares (op.h): its lifecycle - made, registered with
 * its connection, run on a worker, finished - and the field checks and
 * reply helpers of the op handlers.
 */
#include "daemon/net/op.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/store/store.h"
#include "proto/util.h"

struct op *op_new(struct conn *c, uint64_t id, enum op_kind kind, size_t size,
                  void (*clear)(struct op *op))
{
    /* Every kind's struct begins with its struct op, so this is the whole allocation. */
    struct op *op = calloc(1, size);
    if (!op) {
        reply_error(c, id, PROTO_E_BUSY, "out of memory");
        return NULL;
    }
    op->kind = kind;
    op->started_ns = uv_hrtime();
    op->srv = c->srv;
    op->clear = clear;
    op->base.id = id;
    conn_request_add(c, &op->base);
    return op;
}

static void op_free(struct op *op)
{
    if (op->clear)
        op->clear(op);
    free(op);
}

void op_finish(struct op *op)
{
    if (!op->abandoned) {
        metrics_op_done(&op->srv->metrics, op->kind, uv_hrtime() - op->started_ns);
        conn_request_remove(op->base.conn, &op->base);
    }
    op->abandoned = true;
    if (!op->job_running)
        op_free(op);
}

void op_queue(struct op *op, uv_work_t *work, uv_work_cb work_cb, uv_after_work_cb done)
{
    int r = uv_queue_work(op->srv->loop, work, work_cb, done);
    if (r < 0) {
        reply_error(op->base.conn, op->base.id, PROTO_E_INTERNAL, uv_strerror(r));
        op_finish(op);
        return;
    }
    op->job_running = true;
}

bool op_job_end(struct op *op)
{
    op->job_running = false;
    if (op->abandoned) {
        op_free(op);
        return false;
    }
    return true;
}

/* ---- error codes ---- */

enum proto_error op_error_code(int status, const char **msg)
{
    switch (status) {
    case STORE_E_NOT_FOUND:
        *msg = "not found";
        return PROTO_E_NOT_FOUND;
    case STORE_E_AMBIGUOUS:
        *msg = "hash prefix matches more than one document";
        return PROTO_E_AMBIGUOUS;
    case STORE_E_INTEGRITY:
        *msg = "stored data failed its integrity check";
        return PROTO_E_INTEGRITY;
    case STORE_E_SIZE:
        *msg = "content size differs from the announced size";
        return PROTO_E_BAD_REQUEST;
    case STORE_E_TOO_LARGE:
        *msg = "document larger than the 1 TiB limit";
        return PROTO_E_TOO_LARGE;
    case STORE_E_UNAVAILABLE:
        *msg = "the storage backend is unavailable";
        return PROTO_E_BACKEND_UNAVAILABLE;
    case STORE_E_NOT_A_NAME:
        *msg = "rename takes a name (a hash or NAME@{N} has no name to move)";
        return PROTO_E_BAD_REQUEST;
    case STORE_E_SAME_NAME:
        *msg = "a name cannot be renamed to itself";
        return PROTO_E_BAD_REQUEST;
    case -ENOMEM:
    case -ENOBUFS:
        *msg = "out of memory";
        return PROTO_E_BUSY;
    default:
        break;
    }
    *msg = status < 0 ? strerror(-status) : "storage error";
    return PROTO_E_STORAGE;
}

void op_reply_status_error(struct op *op, int status)
{
    const char *msg;
    enum proto_error code = op_error_code(status, &msg);

    reply_error(op->base.conn, op->base.id, code, msg);
}

/* ---- field validation ---- */

int op_get_string(const msgpack_object *map, const char *key, size_t max, bool allow_empty,
                  char **out)
{
    const char *p;
    size_t len;
    int r = proto_get_str(map, key, &p, &len);

    *out = NULL;
    if (r == PROTO_MISSING)
        return 0;
    if (r < 0 || len > max || (!allow_empty && len == 0) || memchr(p, '\0', len))
        return -EINVAL;
    *out = strndup(p, len);
    return *out ? 0 : -ENOMEM;
}

int op_copy_str(const msgpack_object *o, size_t max, char **out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 || o->via.str.size > max ||
        memchr(o->via.str.ptr, '\0', o->via.str.size))
        return -EINVAL;
    *out = strndup(o->via.str.ptr, o->via.str.size);
    return *out ? 0 : -ENOMEM;
}

const char *op_take_meta(const msgpack_object *map, char ***keys, char ***values, size_t *n)
{
    const msgpack_object *o = proto_map_get(map, "meta");

    if (!o)
        return NULL;
    if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > PROTO_MAX_META)
        return "meta must be a map of at most 64 entries";
    *keys = calloc(o->via.map.size + 1, sizeof(char *));
    *values = calloc(o->via.map.size + 1, sizeof(char *));
    if (!*keys || !*values)
        return "out of memory";
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *v = &o->via.map.ptr[i].val;
        if (op_copy_str(&o->via.map.ptr[i].key, PROTO_MAX_META_KEY, &(*keys)[i]))
            return "meta keys must be non-empty strings of at most 256 bytes";
        (*n)++;
        if (v->type != MSGPACK_OBJECT_STR || v->via.str.size > PROTO_MAX_META_VALUE ||
            memchr(v->via.str.ptr, '\0', v->via.str.size))
            return "meta values must be strings of at most 4096 bytes";
        if (!((*values)[i] = strndup(v->via.str.ptr, v->via.str.size)))
            return "out of memory";
    }
    return NULL;
}

void op_free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

unsigned op_fattr_fields(const struct db_fattr *fa)
{
    return fa->mode ? 2 : 0;
}

void op_pack_fattr(msgpack_packer *pk, const struct db_fattr *fa)
{
    if (!fa->mode)
        return;
    proto_pack_cstr(pk, "mode");
    msgpack_pack_uint32(pk, fa->mode);
    proto_pack_cstr(pk, "mtime");
    msgpack_pack_int64(pk, fa->mtime);
}

void op_pack_strings(msgpack_packer *pk, const char *const *v, size_t first, size_t n)
{
    msgpack_pack_array(pk, n - first);
    for (size_t i = first; i < n; i++)
        proto_pack_cstr(pk, v[i]);
}

size_t op_strings_cut(const char *const *v, size_t n, size_t budget)
{
    size_t first = n, used = 0;

    while (first > 0 && used + reply_str_cost(strlen(v[first - 1])) <= budget)
        used += reply_str_cost(strlen(v[--first]));
    return first;
}

bool op_take_ref(struct op *op, const msgpack_object *map, char **ref, size_t *len)
{
    const char *p;
    int r = proto_get_str(map, "ref", &p, len);

    /*
     * A NUL byte is refused like in names: no name or hash holds one, and the
     * copy below would end at it while *len, which the store goes by, would not.
     */
    if (r != 0 || *len == 0 || *len > PROTO_MAX_REF || memchr(p, '\0', *len)) {
        reply_error(op->base.conn, op->base.id, PROTO_E_BAD_REQUEST,
                    "ref must be a non-empty string of at most 4096 bytes without NUL");
        op_finish(op);
        return false;
    }
    *ref = strndup(p, *len);
    if (!*ref) {
        reply_error(op->base.conn, op->base.id, PROTO_E_BUSY, "out of memory");
        op_finish(op);
        return false;
    }
    return true;
}
