#include "daemon/net/dispatch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meta/db.h"
#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/net/op.h"
#include "daemon/base/log.h"
#include "daemon/store/store.h"
#include "proto/util.h"

static const char *const op_names[] = {
    "hello",  "add", "data",    "get", "delete", "list",     "stat",    "status", "search", "gc",
    "verify", "du",  "refresh", "key", "log",    "shutdown", "metrics", "name",   "edit"};

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
    op_pack_strings(&r.pk, op_names, 0, ARRAY_SIZE(op_names));
    reply_send(c, &r);
}

/* ---- entry points ---- */

/* `writes`: the op changes the store, refused by a read-only daemon (cairnd --read-only). */
static const struct {
    const char *name;
    void (*fn)(struct conn *c, uint64_t id, const msgpack_object *map);
    bool writes;
} ops[] = {
    {"hello", do_hello, false},        {"add", op_do_add, true},
    {"data", op_do_data, false},       {"get", op_do_get, false},
    {"delete", op_do_delete, true},    {"list", op_do_list, false},
    {"stat", op_do_stat, false},       {"status", op_do_status, false},
    {"search", op_do_search, false},   {"gc", op_do_gc, true},
    {"verify", op_do_verify, false},   {"du", op_do_du, false},
    {"refresh", op_do_refresh, true},  {"key", op_do_key, true},
    {"log", op_do_log, false},         {"shutdown", op_do_shutdown, false},
    {"metrics", op_do_metrics, false}, {"name", op_do_name, true},
    {"edit", op_do_edit, true},
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
            if (ops[i].writes && db_read_only(c->srv->db)) {
                char why[96];
                snprintf(why, sizeof(why), "%s: this daemon is read-only (cairnd --read-only)",
                         ops[i].name);
                reply_error(c, id, PROTO_E_READ_ONLY, why);
                goto out;
            }
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
        op_add_abandon(op);
    else if (op->kind == OP_GET)
        op_get_abandon(op);
    op_finish(op);
}

void dispatch_drained(struct request *req)
{
    struct op *op = op_of(req);

    if (op->kind == OP_GET)
        op_get_drained(op);
    else if (op->kind == OP_LIST)
        op_list_drained(op);
}

bool dispatch_stream_open(struct conn *c)
{
    for (struct request *req = c->reqs; req; req = req->next) {
        if (op_of(req)->kind == OP_ADD && op_add_stream_open(op_of(req)))
            return true;
    }
    return false;
}

const struct conn_handler dispatch_handler = {
    .frame = dispatch_frame,
    .abandon = dispatch_abandon,
    .stream_open = dispatch_stream_open,
    .drained = dispatch_drained,
};
