/*
 * The key op (PROTOCOL.md `key`): the key objects of an encrypted store,
 * listed, added, removed or replaced, on the refresh thread (recovery.h),
 * where scrypt runs off the loop. A new passphrase comes in the request
 * over the daemon's own socket (0600, its user only); the daemon wipes its
 * copy once the key object is made.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/net/op.h"
#include "daemon/recovery/recovery.h"
#include "proto/proto.h"
#include "proto/util.h"

/* A passphrase is at most this long (as cairnd's own sources, daemon/app/passphrase.c). */
#define KEY_PASS_MAX 1024

struct key_op {
    struct op op;
    struct recovery_key_job job;
};
OP_ASSERT_FIRST(struct key_op);

static void key_clear(struct op *op)
{
    recovery_key_job_clear(&container_of(op, struct key_op, op)->job);
}

static void reply_keys(struct key_op *k)
{
    struct reply r;

    reply_begin(&r, k->op.base.id, true, 1);
    proto_pack_cstr(&r.pk, "keys");
    msgpack_pack_array(&r.pk, (uint32_t)k->job.nkeys);
    for (size_t i = 0; i < k->job.nkeys; i++) {
        const struct recovery_key_info *info = &k->job.keys[i];
        msgpack_pack_map(&r.pk, 6);
        proto_pack_cstr(&r.pk, "id");
        proto_pack_cstr(&r.pk, info->id);
        proto_pack_cstr(&r.pk, "created");
        msgpack_pack_int64(&r.pk, info->created);
        proto_pack_cstr(&r.pk, "current");
        proto_pack_bool(&r.pk, info->current);
        proto_pack_cstr(&r.pk, "scrypt_n");
        msgpack_pack_uint64(&r.pk, info->n);
        proto_pack_cstr(&r.pk, "scrypt_r");
        msgpack_pack_uint32(&r.pk, info->r);
        proto_pack_cstr(&r.pk, "scrypt_p");
        msgpack_pack_uint32(&r.pk, info->p);
    }
    reply_send(k->op.base.conn, &r);
}

static void key_done(void *ctx, int status)
{
    struct key_op *k = ctx;
    struct reply r;

    if (!op_job_end(&k->op))
        return;
    if (status >= RECOVERY_KEY_E_PLAIN && status <= RECOVERY_KEY_E_REFUSED) {
        reply_error(k->op.base.conn, k->op.base.id,
                    status == RECOVERY_KEY_E_NO_KEY ? PROTO_E_NOT_FOUND : PROTO_E_BAD_REQUEST,
                    k->job.why);
    } else if (status != 0) {
        op_reply_status_error(&k->op, status);
    } else if (k->job.op == RECOVERY_KEY_LIST) {
        reply_keys(k);
    } else {
        bool made = k->job.op == RECOVERY_KEY_ADD || k->job.op == RECOVERY_KEY_PASSWD;
        reply_begin(&r, k->op.base.id, true, made ? 1 : 0);
        if (made) {
            proto_pack_cstr(&r.pk, "key");
            proto_pack_cstr(&r.pk, k->job.id);
        }
        reply_send(k->op.base.conn, &r);
    }
    op_finish(&k->op);
}

static bool parse_action(const char *a, enum recovery_key_op *op)
{
    static const struct {
        const char *name;
        enum recovery_key_op op;
    } actions[] = {{"list", RECOVERY_KEY_LIST},
                   {"add", RECOVERY_KEY_ADD},
                   {"remove", RECOVERY_KEY_REMOVE},
                   {"passwd", RECOVERY_KEY_PASSWD}};

    for (size_t i = 0; a && i < ARRAY_SIZE(actions); i++) {
        if (strcmp(a, actions[i].name) == 0) {
            *op = actions[i].op;
            return true;
        }
    }
    return false;
}

void op_do_key(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct key_op *k = (struct key_op *)op_new(c, id, OP_KEY, sizeof(*k), key_clear);
    char *action = NULL, *key = NULL;
    const char *bad = NULL;
    int r;

    if (!k)
        return;
    if (op_get_string(map, "action", 16, false, &action) != 0 || !parse_action(action, &k->job.op))
        bad = "action must be list, add, remove or passwd";
    else if (op_get_string(map, "passphrase", KEY_PASS_MAX, false, &k->job.pass) != 0)
        bad = "passphrase must be 1 to 1024 bytes, without NUL";
    else if (op_get_string(map, "key", RECOVERY_KEY_ID_LEN, false, &key) != 0)
        bad = "key must be a key's id";
    else if ((k->job.op == RECOVERY_KEY_ADD || k->job.op == RECOVERY_KEY_PASSWD) != !!k->job.pass)
        bad = "passphrase is wanted by add and passwd, and only by them";
    else if ((k->job.op == RECOVERY_KEY_REMOVE) != !!key)
        bad = "key is wanted by remove, and only by it";
    free(action);
    if (k->job.pass) {
        const char *in;
        size_t in_len;
        k->job.plen = strlen(k->job.pass);
        /* The request's own bytes (the connection's buffer) forget it too. */
        if (proto_get_str(map, "passphrase", &in, &in_len) == 0)
            OPENSSL_cleanse((void *)in, in_len);
    }
    if (key)
        snprintf(k->job.id, sizeof(k->job.id), "%s", key);
    free(key);
    if (bad) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, bad);
        op_finish(&k->op);
        return;
    }
    if (!c->srv->refresh) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "this daemon does not manage keys");
        op_finish(&k->op);
        return;
    }
    if ((r = refresh_keys(c->srv->refresh, &k->job, key_done, k)) < 0) {
        op_reply_status_error(&k->op, r);
        op_finish(&k->op);
        return;
    }
    k->op.job_running = true;
}
