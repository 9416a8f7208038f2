/*
 * The add op: validates an add's fields, feeds its content, from the add
 * frame and the data frames that follow, into the store's add pipeline, and
 * holds the connection's reading while the pipeline cannot take more.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/net/op.h"
#include "daemon/store/store.h"

struct op_add {
    struct op op;
    struct store_add *add; /* NULL once the store's add has ended */
    bool stream_open;      /* more data frames are expected */
    bool full;             /* counted in the connection's full_adds */
};
OP_ASSERT_FIRST(struct op_add);

static struct op_add *op_add_of(struct op *op)
{
    return container_of(op, struct op_add, op);
}

/* Lets the connection read again once this add no longer holds it back. */
static void release_full(struct op_add *a)
{
    if (a->full) {
        a->full = false;
        a->op.base.conn->full_adds--;
    }
}

static const char *parse_add_params(const msgpack_object *map, struct store_add_params *p)
{
    const msgpack_object *o;
    const char *why;
    uint64_t size;
    int r;

    memset(p, 0, sizeof(*p));
    if (op_get_string(map, "name", PROTO_MAX_NAME, true, &p->name))
        return "name must be a string of at most 4096 bytes without NUL";
    if (op_get_string(map, "mime", PROTO_MAX_MIME, false, &p->mime))
        return "mime must be a non-empty string of at most 255 bytes";
    if (!p->mime && !(p->mime = strdup("application/octet-stream")))
        return "out of memory";
    if ((o = proto_map_get(map, "tags"))) {
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PROTO_MAX_TAGS)
            return "tags must be an array of at most 64 strings";
        p->tags = calloc(o->via.array.size + 1, sizeof(char *));
        if (!p->tags)
            return "out of memory";
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (op_copy_str(&o->via.array.ptr[i], PROTO_MAX_TAG, &p->tags[p->ntags]))
                return "each tag must be a non-empty string of at most 256 bytes";
            p->ntags++;
        }
    }
    if ((why = op_take_meta(map, &p->meta_keys, &p->meta_values, &p->nmeta)))
        return why;
    r = proto_get_uint(map, "size", &size);
    if (r < 0)
        return "size must be an unsigned integer";
    if (r == 0) {
        p->has_size = true;
        p->size = size;
    }
    if (proto_map_get(map, "heal") && proto_get_bool(map, "heal", &p->heal) != 0)
        return "heal must be a boolean";
    if (p->heal && ((p->name && p->name[0]) || p->ntags || p->nmeta))
        return "an add with heal stores no document: it takes no name, tags or meta";
    if (proto_map_get(map, "mode") || proto_map_get(map, "mtime")) {
        uint64_t mode;
        if (proto_get_uint(map, "mode", &mode) != 0 || !proto_file_mode_valid(mode))
            return "mode must be the st_mode of a regular file, directory or symbolic link";
        if (proto_get_int(map, "mtime", &p->fattr.mtime) != 0)
            return "mtime must be an integer (nanoseconds since the epoch) and comes with mode";
        if (!p->name || !p->name[0])
            return "mode and mtime belong to a name: they need name";
        p->fattr.mode = (uint32_t)mode;
    }
    return NULL;
}

static void params_free(struct store_add_params *p)
{
    free(p->name);
    free(p->mime);
    op_free_strings(p->tags, p->ntags);
    /* Values may be one short of keys when validation stopped between them. */
    for (size_t i = 0; i <= p->nmeta && p->meta_keys; i++)
        free(p->meta_keys[i]);
    free(p->meta_keys);
    for (size_t i = 0; i <= p->nmeta && p->meta_values; i++)
        free(p->meta_values[i]);
    free(p->meta_values);
}

/* Reads `data` and `more`; -EINVAL when mistyped. */
static int get_data(const msgpack_object *map, const uint8_t **data, size_t *len, bool *more)
{
    int r = proto_get_bin(map, "data", data, len);
    if (r == PROTO_MISSING) {
        *data = NULL;
        *len = 0;
    } else if (r < 0) {
        return -EINVAL;
    }
    *more = false;
    return proto_get_bool(map, "more", more) < 0 ? -EINVAL : 0;
}

static void add_done(void *userdata, int status, const struct store_add_result *res)
{
    struct op_add *a = userdata;
    struct conn *c = a->op.base.conn;

    a->add = NULL;
    release_full(a);
    if (status != 0) {
        op_reply_status_error(&a->op, status);
    } else {
        struct reply r;
        reply_begin(&r, a->op.base.id, true, 7);
        proto_pack_cstr(&r.pk, "hash");
        proto_pack_cstr(&r.pk, res->hash);
        proto_pack_cstr(&r.pk, "name");
        proto_pack_cstr(&r.pk, res->name);
        proto_pack_cstr(&r.pk, "size");
        msgpack_pack_uint64(&r.pk, res->size);
        proto_pack_cstr(&r.pk, "stored_size");
        msgpack_pack_uint64(&r.pk, res->stored_size);
        proto_pack_cstr(&r.pk, "written");
        msgpack_pack_uint64(&r.pk, res->written);
        proto_pack_cstr(&r.pk, "mime");
        proto_pack_cstr(&r.pk, res->mime ? res->mime : "");
        proto_pack_cstr(&r.pk, "new");
        proto_pack_bool(&r.pk, res->created);
        reply_send(c, &r);
    }
    /* A failed add whose client is still streaming keeps its id until the last frame. */
    if (!a->stream_open)
        op_finish(&a->op);
    else
        conn_kick(c);
}

static void add_ready(void *userdata)
{
    struct op_add *a = userdata;

    release_full(a);
    conn_kick(a->op.base.conn);
}

static const struct store_add_ops add_ops = {
    .done = add_done,
    .ready = add_ready,
};

/* Feeds one piece of an add's content; the op may be finished when this returns. */
static void add_feed(struct op_add *a, const uint8_t *data, size_t len, bool more)
{
    a->stream_open = more;
    if (!a->add) {
        /* The add already failed and replied: swallow the rest of its stream. */
        if (!more)
            op_finish(&a->op);
        return;
    }
    if (!store_add_write(a->add, data, len, !more))
        return; /* ended: add_done has run */
    if (store_add_full(a->add) && !a->full) {
        a->full = true;
        a->op.base.conn->full_adds++;
    }
}

void op_do_add(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct store_add_params p;
    const char *problem = parse_add_params(map, &p);
    const uint8_t *data;
    size_t len;
    bool more;
    struct op *op;
    struct op_add *a;
    int r;

    if (!problem && get_data(map, &data, &len, &more) < 0)
        problem = "data must be binary and more a boolean";
    if (problem) {
        params_free(&p);
        reply_error(c, id, PROTO_E_BAD_REQUEST, problem);
        return;
    }
    op = op_new(c, id, OP_ADD, sizeof(struct op_add), NULL);
    if (!op) {
        params_free(&p);
        return;
    }
    a = op_add_of(op);
    r = store_add_begin(c->srv->st, &p, &add_ops, a, &a->add);
    if (r < 0) {
        op_reply_status_error(op, r);
        op_finish(op);
        return;
    }
    add_feed(a, data, len, more);
}

void op_do_data(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct request *req = conn_request_find(c, id);
    struct op *op = req ? op_of(req) : NULL;
    struct op_add *a;
    const uint8_t *data;
    size_t len;
    bool more;

    if (!op || op->kind != OP_ADD || !op_add_of(op)->stream_open) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "data for no open add stream");
        return;
    }
    a = op_add_of(op);
    if (get_data(map, &data, &len, &more) < 0) {
        /*
         * The stream is broken: the add fails now rather than store something
         * else. As for any add that failed before its last frame, the rest of
         * the stream is discarded silently up to the frame with more: false,
         * and the id stays in use until then. A mistyped frame whose more can
         * still be read as false (absent included) is that last frame: the
         * client meant to end the stream, and waiting for another frame it
         * will never send would hold its id.
         */
        bool last;

        more = false; /* absent is false */
        last = proto_get_bool(map, "more", &more) >= 0 && !more;
        if (a->add) {
            reply_error(c, id, PROTO_E_BAD_REQUEST, "data must be binary and more a boolean");
            store_add_abort(a->add);
            a->add = NULL;
            release_full(a);
        }
        if (last) {
            a->stream_open = false;
            op_finish(op);
        }
        return;
    }
    add_feed(a, data, len, more);
}

void op_add_abandon(struct op *op)
{
    struct op_add *a = op_add_of(op);

    if (a->add) {
        store_add_abort(a->add);
        a->add = NULL;
    }
    release_full(a);
}

bool op_add_stream_open(struct op *op)
{
    return op_add_of(op)->stream_open;
}
