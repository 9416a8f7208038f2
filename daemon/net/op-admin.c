/*
 * The ops that manage the store rather than read it: delete, status, gc,
 * verify and shutdown. Delete, gc and verify run inside the store, which reports back
 * through a callback; job_running keeps their op alive until it does.
 */

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/crypto/seal.h"
#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/meta/db.h"
#include "daemon/net/op.h"
#include "daemon/gc/gc.h"
#include "daemon/recovery/recovery.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"

/* At most this many bad chunks are listed in a verify reply; `bad_count` has them all. */
#define VERIFY_MAX_LISTED 1000
/* Documents named per bad chunk at most. */
#define VERIFY_MAX_DOCS 64
/* Bytes of a delete reply for each of its lists: the names removed, the documents deleted. */
#define DELETE_LIST_BUDGET (192u * 1024)

struct op_status {
    struct op op;
    uv_work_t work;
    int status;        /* the worker's result */
    uint64_t dead_gen; /* chunks gc found dead up to this run are not counted */
    struct db_totals totals;
};
OP_ASSERT_FIRST(struct op_status);

/*
 * Delete keeps no state of its own: the store copies what it needs, owns the
 * job and hands its result to the callback, so it is a bare struct op. Gc and
 * verify add their progress (struct op_job).
 */

/* ---- delete ---- */

static void delete_done(void *userdata, int status, const struct store_delete_result *res)
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
    /* The newest names and the first documents that fit (PROTOCOL.md `delete`). */
    size_t names_cut = op_strings_cut(res->names, res->nnames, DELETE_LIST_BUDGET);
    size_t nlisted = res->ndeleted;
    if (nlisted > DELETE_LIST_BUDGET / reply_str_cost(PROTO_HASH_HEX))
        nlisted = DELETE_LIST_BUDGET / reply_str_cost(PROTO_HASH_HEX);
    reply_begin(&r, op->base.id, true, 5 + (names_cut > 0) + (nlisted < res->ndeleted));
    proto_pack_cstr(&r.pk, "hash");
    proto_pack_cstr(&r.pk, res->hash);
    proto_pack_cstr(&r.pk, "name");
    proto_pack_cstr(&r.pk, res->name ? res->name : "");
    proto_pack_cstr(&r.pk, "names");
    op_pack_strings(&r.pk, res->names, names_cut, res->nnames);
    if (names_cut > 0) {
        proto_pack_cstr(&r.pk, "names_cut");
        msgpack_pack_uint64(&r.pk, names_cut);
    }
    proto_pack_cstr(&r.pk, "deleted");
    op_pack_strings(&r.pk, res->deleted, 0, nlisted);
    if (nlisted < res->ndeleted) {
        proto_pack_cstr(&r.pk, "deleted_cut");
        msgpack_pack_uint64(&r.pk, res->ndeleted - nlisted);
    }
    proto_pack_cstr(&r.pk, "dry_run");
    proto_pack_bool(&r.pk, res->dry_run);
    reply_send(op->base.conn, &r);
    op_finish(op);
}

void op_do_delete(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_DELETE, sizeof(struct op), NULL);
    _cleanup_free_ char *ref = NULL; /* store_delete keeps its own copy */
    bool dry_run = false;
    size_t ref_len;
    int r;

    if (!op || !op_take_ref(op, map, &ref, &ref_len))
        return;
    if (proto_map_get(map, "dry_run") && proto_get_bool(map, "dry_run", &dry_run) != 0) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "dry_run must be a boolean");
        op_finish(op);
        return;
    }
    r = store_delete(c->srv->st, ref, ref_len, dry_run, delete_done, op);
    if (r < 0) {
        op_reply_status_error(op, r);
        op_finish(op);
        return;
    }
    op->job_running = true;
}

/* ---- name: copy and rename ---- */

static void name_done(void *userdata, int status, const struct store_name_result *res)
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
    reply_begin(&r, op->base.id, true, 4);
    proto_pack_cstr(&r.pk, "hash");
    proto_pack_cstr(&r.pk, res->hash);
    proto_pack_cstr(&r.pk, "name");
    proto_pack_cstr(&r.pk, res->name);
    proto_pack_cstr(&r.pk, "from");
    proto_pack_cstr(&r.pk, res->from ? res->from : "");
    proto_pack_cstr(&r.pk, "renamed");
    proto_pack_bool(&r.pk, res->renamed);
    reply_send(op->base.conn, &r);
    op_finish(op);
}

void op_do_name(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_NAME, sizeof(struct op), NULL);
    _cleanup_free_ char *ref = NULL, *name = NULL; /* store_name keeps its own copies */
    bool rename = false;
    size_t ref_len;
    int r;

    if (!op || !op_take_ref(op, map, &ref, &ref_len))
        return;
    if (op_get_string(map, "name", PROTO_MAX_NAME, false, &name) || !name ||
        (proto_map_get(map, "rename") && proto_get_bool(map, "rename", &rename) != 0)) {
        reply_error(c, id, PROTO_E_BAD_REQUEST,
                    "name must be a non-empty string of at most 4096 bytes without NUL, rename "
                    "a boolean");
        op_finish(op);
        return;
    }
    r = store_name(c->srv->st, ref, ref_len, name, rename, name_done, op);
    if (r < 0) {
        op_reply_status_error(op, r);
        op_finish(op);
        return;
    }
    op->job_running = true;
}

/* ---- du ---- */

struct op_du {
    struct op op;
    uv_work_t work;
    int status; /* the worker's result */
    char *prefix;
    bool path;
    struct db_du du;
};
OP_ASSERT_FIRST(struct op_du);

static void du_clear(struct op *op)
{
    free(container_of(op, struct op_du, op)->prefix);
}

static void du_work(uv_work_t *work)
{
    struct op_du *du = container_of(work, struct op_du, work);
    du->status = db_du(du->op.srv->db, du->prefix, du->path, &du->du);
}

static void du_done(uv_work_t *work, int status)
{
    struct op_du *du = container_of(work, struct op_du, work);
    const struct db_du *t = &du->du;
    struct reply r;

    if (!op_job_end(&du->op))
        return;
    if (status < 0 || du->status != 0) {
        op_reply_status_error(&du->op, status < 0 ? status : du->status);
        op_finish(&du->op);
        return;
    }
    reply_begin(&r, du->op.base.id, true, 6);
    proto_pack_cstr(&r.pk, "names");
    msgpack_pack_uint64(&r.pk, t->names);
    proto_pack_cstr(&r.pk, "documents");
    msgpack_pack_uint64(&r.pk, t->documents);
    proto_pack_cstr(&r.pk, "logical_bytes");
    msgpack_pack_uint64(&r.pk, t->logical_bytes);
    proto_pack_cstr(&r.pk, "unique_bytes");
    msgpack_pack_uint64(&r.pk, t->unique_bytes);
    proto_pack_cstr(&r.pk, "stored_bytes");
    msgpack_pack_uint64(&r.pk, t->stored_bytes);
    proto_pack_cstr(&r.pk, "saved_bytes");
    msgpack_pack_uint64(
        &r.pk, t->logical_bytes > t->stored_bytes ? t->logical_bytes - t->stored_bytes : 0);
    reply_send(du->op.base.conn, &r);
    op_finish(&du->op);
}

void op_do_du(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_DU, sizeof(struct op_du), du_clear);
    struct op_du *du;

    if (!op)
        return;
    du = container_of(op, struct op_du, op);
    if (op_get_string(map, "prefix", PROTO_MAX_REF, true, &du->prefix) ||
        (proto_map_get(map, "path") && proto_get_bool(map, "path", &du->path) != 0)) {
        reply_error(c, id, PROTO_E_BAD_REQUEST,
                    "prefix must be a string of at most 4096 bytes, path a boolean");
        op_finish(op);
        return;
    }
    op_queue(op, &du->work, du_work, du_done);
}

/* ---- status ---- */

static void status_work(uv_work_t *work)
{
    struct op_status *st = container_of(work, struct op_status, work);
    st->status = db_totals(st->op.srv->db, st->dead_gen, &st->totals);
}

/*
 * The writers of the bucket (PROTOCOL.md `status`): this daemon's own id,
 * and each other writer known with how far this daemon has read it.
 */
static void pack_writers(msgpack_packer *pk, uint64_t own, const struct refresh_writer *w, size_t n)
{
    uint64_t now = uv_hrtime() / 1000000;
    char hex[17];
    size_t others = 0;

    for (size_t i = 0; i < n; i++)
        others += w[i].id != own;
    snprintf(hex, sizeof(hex), "%016" PRIx64, own);
    proto_pack_cstr(pk, "writer");
    proto_pack_cstr(pk, hex);
    proto_pack_cstr(pk, "writers");
    msgpack_pack_array(pk, (uint32_t)others);
    for (size_t i = 0; i < n; i++) {
        if (w[i].id == own)
            continue;
        snprintf(hex, sizeof(hex), "%016" PRIx64, w[i].id);
        msgpack_pack_map(pk, 4);
        proto_pack_cstr(pk, "id");
        proto_pack_cstr(pk, hex);
        proto_pack_cstr(pk, "packs_read");
        msgpack_pack_uint64(pk, w[i].packs);
        proto_pack_cstr(pk, "newest_pack");
        msgpack_pack_uint64(pk, w[i].newest);
        /* How long ago its packs were last listed: -1 when never. */
        proto_pack_cstr(pk, "seen_ms_ago");
        msgpack_pack_int64(pk, w[i].seen_ms ? (int64_t)(now - w[i].seen_ms) : -1);
    }
}

/* The metrics op: the Prometheus text, one string. */
static void metrics_reply(struct op_status *st)
{
    char *text;
    size_t len;
    struct reply r;
    int rc = metrics_render(st->op.srv, &st->totals, &text, &len);

    if (rc < 0) {
        op_reply_status_error(&st->op, rc);
    } else {
        reply_begin(&r, st->op.base.id, true, 1);
        proto_pack_cstr(&r.pk, "text");
        msgpack_pack_str(&r.pk, len);
        msgpack_pack_str_body(&r.pk, text, len);
        free(text);
        reply_send(st->op.base.conn, &r);
    }
    op_finish(&st->op);
}

static void status_done(uv_work_t *work, int status)
{
    struct op_status *st = container_of(work, struct op_status, work);
    const struct db_totals *t = &st->totals;
    struct server *srv = st->op.srv;
    struct reply r;

    if (!op_job_end(&st->op))
        return;
    if (status < 0 || st->status != 0) {
        op_reply_status_error(&st->op, status < 0 ? status : st->status);
        op_finish(&st->op);
        return;
    }
    if (st->op.kind == OP_METRICS) {
        metrics_reply(st);
        return;
    }
    struct store_stats ss;
    struct search_stats xs;
    store_get_stats(srv->st, &ss);
    search_get_stats(srv->search, &xs);
    struct refresh_stats rs;
    struct refresh_writer *writers = NULL;
    size_t nwriters = 0;
    if (srv->refresh)
        refresh_get_stats(srv->refresh, &rs, &writers, &nwriters);
    reply_begin(&r, st->op.base.id, true, 25 + (ss.read_cache ? 6 : 0));
    proto_pack_cstr(&r.pk, "version");
    proto_pack_cstr(&r.pk, CAIRN_VERSION);
    proto_pack_cstr(&r.pk, "protocol");
    msgpack_pack_uint32(&r.pk, PROTO_VERSION);
    proto_pack_cstr(&r.pk, "pid");
    msgpack_pack_uint64(&r.pk, (uint64_t)getpid());
    proto_pack_cstr(&r.pk, "uptime");
    msgpack_pack_uint64(&r.pk, (uv_now(srv->loop) - srv->started_ms) / 1000);
    proto_pack_cstr(&r.pk, "backend");
    proto_pack_cstr(&r.pk, srv->backend_desc);
    proto_pack_cstr(&r.pk, "encryption");
    proto_pack_cstr(&r.pk, seal_on() ? "aes-256-gcm" : "off");
    proto_pack_cstr(&r.pk, "read_only");
    proto_pack_bool(&r.pk, db_read_only(srv->db));
    proto_pack_cstr(&r.pk, "documents");
    msgpack_pack_uint64(&r.pk, t->documents);
    proto_pack_cstr(&r.pk, "logical_bytes");
    msgpack_pack_uint64(&r.pk, t->logical_bytes);
    proto_pack_cstr(&r.pk, "stored_bytes");
    msgpack_pack_uint64(&r.pk, t->stored_bytes);
    proto_pack_cstr(&r.pk, "chunks");
    msgpack_pack_uint64(&r.pk, t->chunks);
    proto_pack_cstr(&r.pk, "unique_bytes");
    msgpack_pack_uint64(&r.pk, t->unique_bytes);
    /* How many times over the content is stored once (dedup) and how much zstd saves. */
    proto_pack_cstr(&r.pk, "dedup_ratio");
    msgpack_pack_double(&r.pk, t->unique_bytes ? (double)t->logical_bytes / t->unique_bytes : 1.0);
    proto_pack_cstr(&r.pk, "compression_ratio");
    msgpack_pack_double(&r.pk, t->stored_bytes ? (double)t->unique_bytes / t->stored_bytes : 1.0);
    proto_pack_cstr(&r.pk, "packs");
    msgpack_pack_uint64(&r.pk, t->packs);
    proto_pack_cstr(&r.pk, "pack_bytes");
    msgpack_pack_uint64(&r.pk, t->pack_bytes);
    proto_pack_cstr(&r.pk, "open_pack");
    msgpack_pack_uint64(&r.pk, ss.open_pack);
    proto_pack_cstr(&r.pk, "cache_bytes");
    msgpack_pack_uint64(&r.pk, ss.cache_bytes);
    proto_pack_cstr(&r.pk, "cache_size");
    msgpack_pack_uint64(&r.pk, ss.cache_max);
    proto_pack_cstr(&r.pk, "cache_hits");
    msgpack_pack_uint64(&r.pk, ss.cache_hits);
    proto_pack_cstr(&r.pk, "cache_misses");
    msgpack_pack_uint64(&r.pk, ss.cache_misses);
    if (ss.read_cache) {
        const char *const names[] = {"read_cache_bytes",   "read_cache_size",
                                     "read_cache_hits",    "read_cache_misses",
                                     "read_cache_fetched", "read_cache_damaged"};
        const uint64_t values[] = {ss.rc_bytes,  ss.rc_max,     ss.rc_hits,
                                   ss.rc_misses, ss.rc_fetched, ss.rc_damaged};
        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
            proto_pack_cstr(&r.pk, names[i]);
            msgpack_pack_uint64(&r.pk, values[i]);
        }
    }
    proto_pack_cstr(&r.pk, "index_pending");
    msgpack_pack_uint64(&r.pk, xs.pending);
    proto_pack_cstr(&r.pk, "connections");
    msgpack_pack_uint32(&r.pk, srv->nconns);
    pack_writers(&r.pk, srv->writer, writers, nwriters);
    free(writers);
    reply_send(st->op.base.conn, &r);
    op_finish(&st->op);
}

static void status_start(struct conn *c, uint64_t id, enum op_kind kind)
{
    struct op *op = op_new(c, id, kind, sizeof(struct op_status), NULL);
    struct op_status *st;

    if (!op)
        return;
    st = container_of(op, struct op_status, op);
    st->dead_gen = c->srv->gc ? gc_dead_generation(c->srv->gc) : 0;
    op_queue(op, &st->work, status_work, status_done);
}

void op_do_status(struct conn *c, uint64_t id, const msgpack_object *map)
{
    (void)map;
    status_start(c, id, OP_STATUS);
}

void op_do_metrics(struct conn *c, uint64_t id, const msgpack_object *map)
{
    (void)map;
    status_start(c, id, OP_METRICS);
}

/* ---- progress of gc and verify ---- */

/*
 * With `progress: true`, a gc or verify sends a frame with `more: true` and
 * `progress` once a second while it runs (PROTOCOL.md). The op then owns a
 * timer, closed before the op may go: its job counts as running until then.
 */
struct op_job {
    struct op op;
    uv_timer_t timer;
    bool ticking;
    struct store_progress progress; /* verify writes it; gc's is copied from the store */
};
OP_ASSERT_FIRST(struct op_job);

#define PROGRESS_INTERVAL_MS 1000

/*
 * The interval between progress frames. Test-only: CAIRN_TEST_PROGRESS_MS
 * in cairnd's environment shortens it, so a test sees frames from a job of
 * a few milliseconds (tests/integration/test_protocol.py). Loop thread only.
 */
static uint64_t progress_interval(void)
{
    static uint64_t ms;

    if (!ms) {
        const char *v = getenv("CAIRN_TEST_PROGRESS_MS");
        ms = v && strtoull(v, NULL, 10) ? strtoull(v, NULL, 10) : PROGRESS_INTERVAL_MS;
    }
    return ms;
}

static void job_tick(uv_timer_t *t)
{
    struct op_job *j = container_of(t, struct op_job, timer);
    struct conn *c = j->op.base.conn;
    const char *phase;
    struct reply r;

    /* A slow reader misses ticks rather than queueing them. */
    if (j->op.abandoned || !conn_can_stream(c))
        return;
    if (j->op.kind == OP_GC && !gc_progress(j->op.srv->gc, &j->progress))
        return;
    phase = atomic_load_explicit(&j->progress.phase, memory_order_relaxed);
    reply_begin(&r, j->op.base.id, true, 2);
    proto_pack_cstr(&r.pk, "more");
    msgpack_pack_true(&r.pk);
    proto_pack_cstr(&r.pk, "progress");
    msgpack_pack_map(&r.pk, 3);
    proto_pack_cstr(&r.pk, "phase");
    proto_pack_cstr(&r.pk, phase ? phase : "");
    proto_pack_cstr(&r.pk, "done");
    msgpack_pack_uint64(&r.pk, atomic_load_explicit(&j->progress.done, memory_order_relaxed));
    proto_pack_cstr(&r.pk, "total");
    msgpack_pack_uint64(&r.pk, atomic_load_explicit(&j->progress.total, memory_order_relaxed));
    reply_send(c, &r);
}

/* Reads `progress`; starts the ticks when it is true. False after replying bad_request. */
static bool job_begin(struct op_job *j, const msgpack_object *map)
{
    bool want = false;

    if (proto_map_get(map, "progress") && proto_get_bool(map, "progress", &want) != 0) {
        reply_error(j->op.base.conn, j->op.base.id, PROTO_E_BAD_REQUEST,
                    "progress must be a boolean");
        op_finish(&j->op);
        return false;
    }
    if (want) {
        uv_timer_init(j->op.srv->loop, &j->timer);
        uv_timer_start(&j->timer, job_tick, progress_interval(), progress_interval());
        j->ticking = true;
    }
    return true;
}

static void job_closed(uv_handle_t *h)
{
    struct op_job *j = container_of((uv_timer_t *)h, struct op_job, timer);

    if (op_job_end(&j->op))
        op_finish(&j->op);
}

/* The job is over and its reply sent (unless abandoned): the op goes, after its timer. */
static void job_end(struct op_job *j)
{
    if (j->ticking) {
        j->ticking = false;
        uv_close((uv_handle_t *)&j->timer, job_closed);
        return;
    }
    if (op_job_end(&j->op))
        op_finish(&j->op);
}

/* A job that could not start: its reply, and the timer (if any) closed. */
static void job_failed(struct op_job *j, int status)
{
    op_reply_status_error(&j->op, status);
    j->op.job_running = true; /* job_end ends it */
    job_end(j);
}

/* ---- gc ---- */

static void gc_done(void *userdata, int status, const struct gc_result *res)
{
    struct op_job *j = userdata;
    struct op *op = &j->op;
    struct reply r;

    if (op->abandoned) {
        job_end(j);
        return;
    }
    if (status == GC_E_BUSY) {
        reply_error(op->base.conn, op->base.id, PROTO_E_BUSY, res->failure);
    } else if (status != 0) {
        op_reply_status_error(op, status);
    } else {
        reply_begin(&r, op->base.id, true,
                    7 + (res->packs_failed ? 2 : 0) + (res->waiting_requests ? 2 : 0));
        proto_pack_cstr(&r.pk, "packs_rewritten");
        msgpack_pack_uint64(&r.pk, res->packs_rewritten);
        proto_pack_cstr(&r.pk, "packs_deleted");
        msgpack_pack_uint64(&r.pk, res->packs_deleted);
        proto_pack_cstr(&r.pk, "bytes_reclaimed");
        msgpack_pack_uint64(&r.pk, res->bytes_reclaimed);
        proto_pack_cstr(&r.pk, "bytes_dead");
        msgpack_pack_uint64(&r.pk, res->bytes_dead);
        proto_pack_cstr(&r.pk, "chunks_removed");
        msgpack_pack_uint64(&r.pk, res->chunks_removed);
        proto_pack_cstr(&r.pk, "packs_pending");
        msgpack_pack_uint64(&r.pk, res->packs_pending);
        proto_pack_cstr(&r.pk, "bytes_pending");
        msgpack_pack_uint64(&r.pk, res->bytes_pending);
        if (res->packs_failed) {
            proto_pack_cstr(&r.pk, "packs_failed");
            msgpack_pack_uint64(&r.pk, res->packs_failed);
            proto_pack_cstr(&r.pk, "failure");
            proto_pack_cstr(&r.pk, res->failure);
        }
        if (res->waiting_requests) {
            proto_pack_cstr(&r.pk, "waiting_requests");
            msgpack_pack_uint64(&r.pk, res->waiting_requests);
            proto_pack_cstr(&r.pk, "waiting_ms");
            msgpack_pack_uint64(&r.pk, res->waiting_ms);
        }
        reply_send(op->base.conn, &r);
    }
    job_end(j);
}

void op_do_gc(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_GC, sizeof(struct op_job), NULL);
    struct op_job *j;
    int r;

    if (!op)
        return;
    j = container_of(op, struct op_job, op);
    if (!job_begin(j, map))
        return;
    r = gc_run(c->srv->gc, gc_done, j);
    if (r < 0) {
        job_failed(j, r);
        return;
    }
    op->job_running = true;
}

/* ---- verify ---- */

/* Bad chunks listed: at most VERIFY_MAX_LISTED, and what fits in REPLY_BUDGET. */
static size_t verify_fit(const struct store_verify_result *res)
{
    size_t used = 0, fit;

    for (fit = 0; fit < res->nbad && fit < VERIFY_MAX_LISTED; fit++) {
        const struct store_bad_chunk *bad = &res->bad[fit];
        size_t cost = 4 * reply_str_cost(32) + reply_str_cost(PROTO_HASH_HEX);
        for (size_t d = 0; d < bad->ndocs && d < VERIFY_MAX_DOCS; d++)
            cost += 3 * reply_str_cost(8) + reply_str_cost(PROTO_HASH_HEX) +
                    reply_str_cost(bad->docs[d].name ? strlen(bad->docs[d].name) : 0);
        if (used + cost > REPLY_BUDGET)
            break;
        used += cost;
    }
    return fit;
}

static void verify_done(void *userdata, int status, const struct store_verify_result *res)
{
    struct op_job *j = userdata;
    struct op *op = &j->op;
    size_t listed = verify_fit(res);
    struct reply r;

    if (op->abandoned || status != 0) {
        if (!op->abandoned)
            op_reply_status_error(op, status);
        job_end(j);
        return;
    }
    reply_begin(&r, op->base.id, true, 4);
    proto_pack_cstr(&r.pk, "chunks_checked");
    msgpack_pack_uint64(&r.pk, res->chunks_checked);
    proto_pack_cstr(&r.pk, "bytes_checked");
    msgpack_pack_uint64(&r.pk, res->bytes_checked);
    proto_pack_cstr(&r.pk, "bad_count");
    msgpack_pack_uint64(&r.pk, res->nbad);
    proto_pack_cstr(&r.pk, "bad");
    msgpack_pack_array(&r.pk, listed);
    for (size_t i = 0; i < listed; i++) {
        const struct store_bad_chunk *bad = &res->bad[i];
        const char *msg;
        size_t ndocs = bad->ndocs < VERIFY_MAX_DOCS ? bad->ndocs : VERIFY_MAX_DOCS;
        msgpack_pack_map(&r.pk, 3);
        proto_pack_cstr(&r.pk, "chunk");
        proto_pack_cstr(&r.pk, bad->hash);
        proto_pack_cstr(&r.pk, "error");
        proto_pack_cstr(&r.pk, proto_error_name(op_error_code(bad->status, &msg)));
        proto_pack_cstr(&r.pk, "documents");
        msgpack_pack_array(&r.pk, ndocs);
        for (size_t d = 0; d < ndocs; d++) {
            msgpack_pack_map(&r.pk, 2);
            proto_pack_cstr(&r.pk, "hash");
            proto_pack_cstr(&r.pk, bad->docs[d].hash);
            proto_pack_cstr(&r.pk, "name");
            proto_pack_cstr(&r.pk, bad->docs[d].name ? bad->docs[d].name : "");
        }
    }
    reply_send(op->base.conn, &r);
    job_end(j);
}

void op_do_verify(struct conn *c, uint64_t id, const msgpack_object *map)
{
    const msgpack_object *refs = proto_map_get(map, "refs");
    const char *list[PROTO_MAX_TAGS];
    char *copies[PROTO_MAX_TAGS];
    struct op_job *j;
    size_t n = 0;
    struct op *op;
    int r;

    if (refs && (refs->type != MSGPACK_OBJECT_ARRAY || refs->via.array.size > PROTO_MAX_TAGS)) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "refs must be an array of at most 64 strings");
        return;
    }
    for (uint32_t i = 0; refs && i < refs->via.array.size; i++) {
        const msgpack_object *o = &refs->via.array.ptr[i];
        if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
            o->via.str.size > PROTO_MAX_REF || memchr(o->via.str.ptr, '\0', o->via.str.size)) {
            reply_error(c, id, PROTO_E_BAD_REQUEST, "each ref must be a non-empty string");
            goto out;
        }
        if (!(copies[n] = strndup(o->via.str.ptr, o->via.str.size))) {
            reply_error(c, id, PROTO_E_BUSY, "out of memory");
            goto out;
        }
        list[n] = copies[n];
        n++;
    }
    op = op_new(c, id, OP_VERIFY, sizeof(struct op_job), NULL);
    if (!op)
        goto out;
    j = container_of(op, struct op_job, op);
    if (!job_begin(j, map))
        goto out;
    r = store_verify(c->srv->st, list, n, &j->progress, verify_done, j);
    if (r < 0)
        job_failed(j, r);
    else
        op->job_running = true;
out:
    for (size_t i = 0; i < n; i++)
        free(copies[i]);
}

/*
 * shutdown: the reply is queued first, then the daemon stops as on SIGTERM,
 * which closes this connection once the reply is flushed. Every client
 * passed the peer-uid check on accept (conn.c), so only the daemon's own uid
 * gets here.
 */
void op_do_shutdown(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct reply r;

    (void)map;
    if (!c->srv->shutdown) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "this daemon cannot be stopped over its socket");
        return;
    }
    reply_begin(&r, id, true, 1);
    proto_pack_cstr(&r.pk, "pid");
    msgpack_pack_int64(&r.pk, (int64_t)getpid());
    reply_send(c, &r);
    c->srv->shutdown(c->srv->shutdown_ctx);
}
