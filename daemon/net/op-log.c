/*
 * log: the versions of a name, newest first (PROTOCOL.md `log`). Version N
 * is what the ref NAME@{N} reads.
 */

#include <stdlib.h>

#include "daemon/meta/db.h"
#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/net/op.h"
#include "daemon/store/store.h"

#define LOG_DEFAULT_LIMIT 100
#define LOG_MAX_LIMIT 1000

struct op_log {
    struct op op;
    uv_work_t work;
    int status; /* the worker's result */
    char *name;
    uint64_t limit, offset, total;
    struct db_version *versions;
    size_t n;
};
OP_ASSERT_FIRST(struct op_log);

static struct op_log *op_log_of(struct op *op)
{
    return container_of(op, struct op_log, op);
}

static void log_clear(struct op *op)
{
    struct op_log *l = op_log_of(op);

    free(l->name);
    free(l->versions);
}

static void log_work(uv_work_t *work)
{
    struct op_log *l = container_of(work, struct op_log, work);
    l->status = db_name_versions(l->op.srv->db, l->name, l->offset, l->limit, &l->versions, &l->n,
                                 &l->total);
}

static void log_done(uv_work_t *work, int status)
{
    struct op_log *l = container_of(work, struct op_log, work);
    struct reply r;

    if (!op_job_end(&l->op))
        return;
    if (status < 0 || l->status != 0) {
        op_reply_status_error(&l->op, status < 0 ? status : store_status_from_db(l->status));
        op_finish(&l->op);
        return;
    }
    reply_begin(&r, l->op.base.id, true, 3);
    proto_pack_cstr(&r.pk, "name");
    proto_pack_cstr(&r.pk, l->name);
    proto_pack_cstr(&r.pk, "total");
    msgpack_pack_uint64(&r.pk, l->total);
    proto_pack_cstr(&r.pk, "versions");
    msgpack_pack_array(&r.pk, (uint32_t)l->n);
    for (size_t i = 0; i < l->n; i++) {
        const struct db_version *v = &l->versions[i];
        msgpack_pack_map(&r.pk, 4 + op_fattr_fields(&v->fattr));
        proto_pack_cstr(&r.pk, "version");
        msgpack_pack_uint64(&r.pk, v->version);
        proto_pack_cstr(&r.pk, "hash");
        proto_pack_cstr(&r.pk, v->hash);
        proto_pack_cstr(&r.pk, "size");
        msgpack_pack_uint64(&r.pk, v->size);
        proto_pack_cstr(&r.pk, "named");
        msgpack_pack_int64(&r.pk, v->named);
        op_pack_fattr(&r.pk, &v->fattr);
    }
    reply_send(l->op.base.conn, &r);
    op_finish(&l->op);
}

void op_do_log(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_LOG, sizeof(struct op_log), log_clear);
    struct op_log *l;

    if (!op)
        return;
    l = op_log_of(op);
    l->limit = LOG_DEFAULT_LIMIT;
    if (op_get_string(map, "name", PROTO_MAX_NAME, false, &l->name) || !l->name ||
        proto_get_uint(map, "limit", &l->limit) < 0 || l->limit < 1 || l->limit > LOG_MAX_LIMIT ||
        proto_get_uint(map, "offset", &l->offset) < 0) {
        reply_error(c, id, PROTO_E_BAD_REQUEST,
                    "log wants name (a string of 1 to 4096 bytes), limit (1 to 1000) and offset "
                    "(an unsigned integer)");
        op_finish(op);
        return;
    }
    op_queue(op, &l->work, log_work, log_done);
}
