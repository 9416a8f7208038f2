/*
 * The refresh op (PROTOCOL.md `refresh`): the reply comes once a refresh
 * that started after the request has ended, so what any other writer had
 * written when the request came is then served here too.
 */
#include <errno.h>
#include <string.h>

#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/net/op.h"
#include "daemon/recovery/recovery.h"
#include "proto/proto.h"
#include "proto/util.h"

static void refreshed(void *ctx, int status)
{
    struct op *op = ctx;
    struct reply r;

    if (!op_job_end(op))
        return;
    if (status != 0) {
        op_reply_status_error(op, status);
    } else {
        reply_begin(&r, op->base.id, true, 0);
        reply_send(op->base.conn, &r);
    }
    op_finish(op);
}

void op_do_refresh(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_REFRESH, sizeof(struct op), NULL);
    int r;

    if (!op)
        return;
    if (!c->srv->refresh) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "this daemon does not refresh");
        op_finish(op);
        return;
    }
    if ((r = refresh_now(c->srv->refresh, refreshed, op)) < 0) {
        op_reply_status_error(op, r);
        op_finish(op);
        return;
    }
    op->job_running = true;
}
