#pragma once

/*
 * Operations in progress, and what their handlers share: op.c (the common
 * lifecycle, field checks and reply helpers), and a handler file per group
 * of ops: op-add.c (add and its data frames), op-read.c (get, list and
 * stat), op-log.c (a name's versions), op-search.c (search), op-admin.c
 * (delete, status, du, gc and verify). dispatch.c picks the handler for each frame.
 *
 * Every operation in progress is one allocation: a struct of its own kind
 * whose first member is the common struct op, found from the request or the
 * worker job with container_of.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>
#include <uv.h>

#include "daemon/net/conn.h"
#include "proto/proto.h"
#include "proto/util.h"

struct server;
struct db_fattr;

enum op_kind {
    OP_ADD,
    OP_GET,
    OP_DELETE,
    OP_LIST,
    OP_STAT,
    OP_STATUS,
    OP_SEARCH,
    OP_GC,
    OP_VERIFY,
    OP_DU,
    OP_REFRESH,
    OP_LOG,
    OP_KEY,
    OP_METRICS,
    OP_NAME,
    OP_EDIT,
    OP_KIND_COUNT_
};

/* The part every operation shares; it must be the first member of each kind's struct. */
struct op {
    struct request base;
    enum op_kind kind;
    struct server *srv;
    uint64_t started_ns; /* uv_hrtime() when it came */
    bool abandoned;      /* the connection is gone; a running job frees the op */
    bool job_running;
    /* Frees what the kind's own fields own (not the op itself); NULL when they own nothing. */
    void (*clear)(struct op *op);
};

/* The op is freed through its struct op, so each kind's struct must begin with it. */
#define OP_ASSERT_FIRST(type)                                                                      \
    _Static_assert(offsetof(type, op) == 0, #type " must begin with its struct op")

static inline struct op *op_of(struct request *req)
{
    return container_of(req, struct op, base);
}

/*
 * Allocates a zeroed op of `size` bytes, the size of the kind's struct, and
 * registers it with the connection; replies and returns NULL when out of
 * memory.
 */
struct op *op_new(struct conn *c, uint64_t id, enum op_kind kind, size_t size,
                  void (*clear)(struct op *op));
/* Removes the op from its connection and frees it, unless a worker job still uses it. */
void op_finish(struct op *op);
/* Runs `work_cb` on a worker thread and `done` on the loop; `work` belongs to the op. */
void op_queue(struct op *op, uv_work_t *work, uv_work_cb work_cb, uv_after_work_cb done);
/* Common tail of every worker job: returns false when the op was abandoned (and is now freed). */
bool op_job_end(struct op *op);

/* The protocol error code and message for a store or database status. */
enum proto_error op_error_code(int status, const char **msg);
/* Replies with the error code and message for a store or database status. */
void op_reply_status_error(struct op *op, int status);

/* Copies a str field into a new C string; NULL when absent. -EINVAL when invalid. */
int op_get_string(const msgpack_object *map, const char *key, size_t max, bool allow_empty,
                  char **out);
/* Copies a non-empty str object of at most `max` bytes without NUL; -EINVAL when invalid. */
int op_copy_str(const msgpack_object *o, size_t max, char **out);
void op_free_strings(char **v, size_t n);
/*
 * The `meta` field of an add or an edit (at most PROTO_MAX_META entries) as
 * NULL-ended copies, *n of each made; an error message, or NULL (also when
 * absent). What was made is the caller's to free, on an error too.
 */
const char *op_take_meta(const msgpack_object *map, char ***keys, char ***values, size_t *n);
/*
 * Packs v[first..n) as a msgpack array of str. The offset is taken here, not
 * by the caller, because an empty list may be NULL, and NULL + 0 is already
 * undefined behaviour in C.
 */
void op_pack_strings(msgpack_packer *pk, const char *const *v, size_t first, size_t n);
/* A name version's file as `mode` and `mtime`: two map entries, or none without a mode. */
unsigned op_fattr_fields(const struct db_fattr *fa);
void op_pack_fattr(msgpack_packer *pk, const struct db_fattr *fa);
/* How many of the first strings of v to leave out so that the rest fit in `budget` reply bytes. */
size_t op_strings_cut(const char *const *v, size_t n, size_t budget);
/* Reads the required `ref` field into *ref and *len; replies and finishes the op on error. */
bool op_take_ref(struct op *op, const msgpack_object *map, char **ref, size_t *len);

/* One handler per request op; `map` is only valid during the call. */
void op_do_add(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_data(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_get(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_delete(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_name(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_edit(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_list(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_stat(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_status(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_metrics(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_du(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_search(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_gc(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_refresh(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_verify(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_log(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_shutdown(struct conn *c, uint64_t id, const msgpack_object *map);
void op_do_key(struct conn *c, uint64_t id, const msgpack_object *map);

/* op-add.c: the connection is going away; aborts the store's add and its flow-control hold. */
void op_add_abandon(struct op *op);
/* op-add.c: true while the add expects more data frames. */
bool op_add_stream_open(struct op *op);
/* op-read.c: the connection is going away; releases the store's read. */
void op_get_abandon(struct op *op);
/* op-read.c: the client read enough of a stream for the next piece or page. */
void op_get_drained(struct op *op);
void op_list_drained(struct op *op);
