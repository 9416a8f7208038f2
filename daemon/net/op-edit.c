/* The edit op: a document's tags and metadata changed (PROTOCOL.md `edit`). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/net-int.h"
#include "daemon/net/op.h"
#include "daemon/store/store.h"
#include "proto/util.h"

/* An array field of at most PROTO_MAX_TAGS strings of 1 to `max` bytes, as a NULL-ended copy. */
static const char *take_strings(const msgpack_object *map, const char *key, size_t max, char ***out,
                                size_t *n)
{
    const msgpack_object *o = proto_map_get(map, key);

    if (!o)
        return NULL;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PROTO_MAX_TAGS)
        return "must be an array of at most 64 strings";
    if (!(*out = calloc(o->via.array.size + 1, sizeof(char *))))
        return "out of memory";
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        if (op_copy_str(&o->via.array.ptr[i], max, &(*out)[i]))
            return max == PROTO_MAX_TAG ? "must hold non-empty strings of at most 256 bytes"
                                        : "must hold non-empty keys of at most 256 bytes";
        (*n)++;
    }
    return NULL;
}

/* The fields of an edit; an error message, or NULL. */
static const char *parse(const msgpack_object *map, struct store_edit_params *p, char *buf,
                         size_t len)
{
    static const char *const lists[] = {"tags", "untags", "unmeta"};
    char ***outs[] = {&p->tags, &p->untags, &p->unmeta};
    size_t *counts[] = {&p->ntags, &p->nuntags, &p->nunmeta};
    const char *why;

    for (size_t l = 0; l < 3; l++) {
        why = take_strings(map, lists[l], l == 2 ? PROTO_MAX_META_KEY : PROTO_MAX_TAG, outs[l],
                           counts[l]);
        if (why) {
            snprintf(buf, len, "%s %s", lists[l], why);
            return buf;
        }
    }
    if ((why = op_take_meta(map, &p->meta_keys, &p->meta_values, &p->nmeta)))
        return why;
    if (p->ntags + p->nuntags + p->nmeta + p->nunmeta == 0)
        return "an edit needs tags, untags, meta or unmeta";
    return NULL;
}

static void edit_done(void *userdata, int status, const struct store_edit_result *res)
{
    struct op *op = userdata;
    struct reply r;

    if (!op_job_end(op))
        return;
    if (status != 0) {
        op_reply_status_error(op, status);
        op_finish(op);
        return;
    }
    reply_begin(&r, op->base.id, true, 2);
    proto_pack_cstr(&r.pk, "hash");
    proto_pack_cstr(&r.pk, res->hash);
    proto_pack_cstr(&r.pk, "changed");
    proto_pack_bool(&r.pk, res->changed);
    reply_send(op->base.conn, &r);
    op_finish(op);
}

void op_do_edit(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_EDIT, sizeof(struct op), NULL);
    _cleanup_free_ char *ref = NULL; /* store_edit keeps its own copy */
    struct store_edit_params p = {0};
    const char *why;
    char buf[128];
    size_t ref_len;
    int r;

    if (!op || !op_take_ref(op, map, &ref, &ref_len))
        return;
    if ((why = parse(map, &p, buf, sizeof(buf)))) {
        store_edit_params_clear(&p);
        reply_error(c, id, PROTO_E_BAD_REQUEST, why);
        op_finish(op);
        return;
    }
    r = store_edit(c->srv->st, ref, ref_len, &p, edit_done, op);
    if (r < 0) {
        op_reply_status_error(op, r);
        op_finish(op);
        return;
    }
    op->job_running = true;
}
