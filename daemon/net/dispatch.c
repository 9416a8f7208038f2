#include "daemon/net/dispatch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/net/dispatch-int.h"
#include "daemon/base/log.h"
#include "daemon/store/store.h"
#include "proto/util.h"

static const char *const op_names[] = {"hello", "add",    "data",   "get", "delete", "list",
                                       "stat",  "status", "search", "gc",  "verify", "du"};

/* ---- the common op lifecycle ---- */

struct op *dispatch_op_new(struct conn *c, uint64_t id, enum op_kind kind, size_t size,
                           void (*clear)(struct op *op))
{
    /* Every kind's struct begins with its struct op, so this is the whole allocation. */
    struct op *op = calloc(1, size);
    if (!op) {
        reply_error(c, id, PROTO_E_BUSY, "out of memory");
        return NULL;
    }
    op->kind = kind;
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

void dispatch_op_finish(struct op *op)
{
    if (!op->abandoned)
        conn_request_remove(op->base.conn, &op->base);
    op->abandoned = true;
    if (!op->job_running)
        op_free(op);
}

void dispatch_op_queue(struct op *op, uv_work_t *work, uv_work_cb work_cb, uv_after_work_cb done)
{
    int r = uv_queue_work(op->srv->loop, work, work_cb, done);
    if (r < 0) {
        reply_error(op->base.conn, op->base.id, PROTO_E_INTERNAL, uv_strerror(r));
        dispatch_op_finish(op);
        return;
    }
    op->job_running = true;
}

bool dispatch_op_job_end(struct op *op)
{
    op->job_running = false;
    if (op->abandoned) {
        op_free(op);
        return false;
    }
    return true;
}

/* ---- error codes ---- */

enum proto_error dispatch_error_code(int status, const char **msg)
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

void dispatch_reply_status_error(struct op *op, int status)
{
    const char *msg;
    enum proto_error code = dispatch_error_code(status, &msg);

    reply_error(op->base.conn, op->base.id, code, msg);
}

/* ---- field validation ---- */

int dispatch_get_string(const msgpack_object *map, const char *key, size_t max, bool allow_empty,
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

int dispatch_copy_str(const msgpack_object *o, size_t max, char **out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 || o->via.str.size > max ||
        memchr(o->via.str.ptr, '\0', o->via.str.size))
        return -EINVAL;
    *out = strndup(o->via.str.ptr, o->via.str.size);
    return *out ? 0 : -ENOMEM;
}

void dispatch_free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void dispatch_pack_strings(msgpack_packer *pk, const char *const *v, size_t first, size_t n)
{
    msgpack_pack_array(pk, n - first);
    for (size_t i = first; i < n; i++)
        proto_pack_cstr(pk, v[i]);
}

size_t dispatch_strings_cut(const char *const *v, size_t n, size_t budget)
{
    size_t first = n, used = 0;

    while (first > 0 && used + reply_str_cost(strlen(v[first - 1])) <= budget)
        used += reply_str_cost(strlen(v[--first]));
    return first;
}

bool dispatch_take_ref(struct op *op, const msgpack_object *map, char **ref, size_t *len)
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
        dispatch_op_finish(op);
        return false;
    }
    *ref = strndup(p, *len);
    if (!*ref) {
        reply_error(op->base.conn, op->base.id, PROTO_E_BUSY, "out of memory");
        dispatch_op_finish(op);
        return false;
    }
    return true;
}

/* ---- hello ---- */

static void do_hello(struct conn *c, uint64_t id, const msgpack_object *map)
{
    const msgpack_object *v = proto_map_get(map, "versions");
    const msgpack_object *client = proto_map_get(map, "client");
    uint64_t chosen = 0;
    struct reply r;

    /* Only logged, but a field the spec says is a string must be one. */
    if (client && (client->type != MSGPACK_OBJECT_STR || client->via.str.size > PROTO_MAX_NAME)) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "client must be a string of at most 4096 bytes");
        return;
    }
    if (!v) {
        chosen = PROTO_VERSION;
    } else if (v->type != MSGPACK_OBJECT_ARRAY) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "versions must be an array of integers");
        return;
    } else {
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            const msgpack_object *e = &v->via.array.ptr[i];
            if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
                reply_error(c, id, PROTO_E_BAD_REQUEST, "versions must be an array of integers");
                return;
            }
            if (e->via.u64 >= PROTO_MIN_VERSION && e->via.u64 <= PROTO_VERSION &&
                e->via.u64 > chosen)
                chosen = e->via.u64;
        }
    }
    if (chosen == 0) {
        reply_error(c, id, PROTO_E_UNSUPPORTED_VERSION, "this daemon speaks protocol version 1");
        return;
    }
    reply_begin(&r, id, true, 5);
    proto_pack_cstr(&r.pk, "version");
    msgpack_pack_uint64(&r.pk, chosen);
    proto_pack_cstr(&r.pk, "server");
    proto_pack_cstr(&r.pk, "cairnd/" CAIRN_VERSION);
    proto_pack_cstr(&r.pk, "max_frame");
    msgpack_pack_uint32(&r.pk, PROTO_MAX_FRAME);
    proto_pack_cstr(&r.pk, "max_data");
    msgpack_pack_uint32(&r.pk, PROTO_MAX_DATA);
    proto_pack_cstr(&r.pk, "ops");
    dispatch_pack_strings(&r.pk, op_names, 0, ARRAY_SIZE(op_names));
    reply_send(c, &r);
}

/* ---- entry points ---- */

static const struct {
    const char *name;
    void (*fn)(struct conn *c, uint64_t id, const msgpack_object *map);
} ops[] = {
    {"hello", do_hello},        {"add", dispatch_do_add},       {"data", dispatch_do_data},
    {"get", dispatch_do_get},   {"delete", dispatch_do_delete}, {"list", dispatch_do_list},
    {"stat", dispatch_do_stat}, {"status", dispatch_do_status}, {"search", dispatch_do_search},
    {"gc", dispatch_do_gc},     {"verify", dispatch_do_verify}, {"du", dispatch_do_du},
};

void dispatch_frame(struct conn *c, const uint8_t *payload, size_t len)
{
    struct proto_msg msg;
    const msgpack_object *op;
    uint64_t id = 0;
    int r;

    if (proto_msg_parse(&msg, payload, len) < 0) {
        /* Distinguish a valid non-map value (the stream is intact) from garbage. */
        if (proto_validate(payload, len, PROTO_MAX_DEPTH) == 0) {
            reply_error(c, 0, PROTO_E_BAD_REQUEST,
                        "a request must be a msgpack map with string keys");
            return;
        }
        log_info("closing a connection that sent malformed msgpack");
        reply_error(c, 0, PROTO_E_BAD_FRAME, "frame is not one valid msgpack value");
        conn_close_after_flush(c);
        return;
    }
    r = proto_get_uint(msg.map, "id", &id);
    if (r != 0 || id == 0) {
        reply_error(c, 0, PROTO_E_BAD_REQUEST, "id must be a non-zero unsigned integer");
        goto out;
    }
    op = proto_map_get(msg.map, "op");
    if (!op || op->type != MSGPACK_OBJECT_STR) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "op must be a string");
        goto out;
    }
    if (!proto_str_eq(op, "data")) {
        if (conn_request_find(c, id)) {
            /* With id 0: a reply with this id would read as the running request's. */
            char why[96];
            snprintf(why, sizeof(why), "id %" PRIu64 " is already in use by a request in progress",
                     id);
            reply_error(c, 0, PROTO_E_BAD_REQUEST, why);
            goto out;
        }
        if (c->srv->stopping) {
            reply_error(c, id, PROTO_E_SHUTTING_DOWN, "the daemon is shutting down");
            goto out;
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
        if (proto_str_eq(op, ops[i].name)) {
            ops[i].fn(c, id, msg.map);
            goto out;
        }
    }
    {
        char text[128];
        snprintf(text, sizeof(text), "unknown op '%.*s'",
                 (int)(op->via.str.size > 64 ? 64 : op->via.str.size), op->via.str.ptr);
        reply_error(c, id, PROTO_E_UNKNOWN_OP, text);
    }
out:
    proto_msg_deinit(&msg);
}

void dispatch_abandon(struct request *req)
{
    struct op *op = op_of(req);

    /* Only adds and gets hold store state that must be given back before the op goes. */
    if (op->kind == OP_ADD)
        dispatch_add_abandon(op);
    else if (op->kind == OP_GET)
        dispatch_get_abandon(op);
    dispatch_op_finish(op);
}

void dispatch_drained(struct request *req)
{
    struct op *op = op_of(req);

    if (op->kind == OP_GET)
        dispatch_get_drained(op);
    else if (op->kind == OP_LIST)
        dispatch_list_drained(op);
}

bool dispatch_stream_open(struct conn *c)
{
    for (struct request *req = c->reqs; req; req = req->next) {
        if (op_of(req)->kind == OP_ADD && dispatch_add_stream_open(op_of(req)))
            return true;
    }
    return false;
}
