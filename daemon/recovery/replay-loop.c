/*
 * Recovery waits for the loop (replay-int.h). Each backend request, database
 * commit and worker job it makes is a call started on the loop thread, then
 * waited for. At start, before the daemon serves anyone, recovery runs on
 * the loop thread and runs the loop until the call is done; a refresh runs
 * on a thread of its own while the loop serves, and hands each call to the
 * loop through the bridge, then sleeps until the loop says it is done.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meta/db.h"
#include "daemon/recovery/replay-int.h"
#include "proto/util.h"
#include "storage/backend.h"

/* ---- calls: started on the loop, waited for ---- */

struct replay_call {
    struct replay_bridge *bridge; /* NULL: recovery drives the loop itself */
    void (*start)(struct replay_call *c);
    bool done;
    struct replay_call *next;
};

/* On the loop thread: the call is over. */
static void call_done(struct replay_call *c)
{
    struct replay_bridge *b = c->bridge;

    if (!b) {
        c->done = true;
        return;
    }
    pthread_mutex_lock(&b->lock);
    c->done = true;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

static void call_and_wait(struct replay *rp, struct replay_call *c)
{
    struct replay_bridge *b = rp->bridge;

    c->bridge = b;
    c->done = false;
    if (!b) {
        c->start(c);
        while (!c->done)
            uv_run(rp->rv.loop, UV_RUN_ONCE);
        return;
    }
    pthread_mutex_lock(&b->lock);
    c->next = b->queue;
    b->queue = c;
    pthread_mutex_unlock(&b->lock);
    uv_async_send(&b->async);
    pthread_mutex_lock(&b->lock);
    while (!c->done)
        pthread_cond_wait(&b->cond, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

void replay_bridge_run(struct replay_bridge *b)
{
    struct replay_call *q;

    pthread_mutex_lock(&b->lock);
    q = b->queue;
    b->queue = NULL;
    pthread_mutex_unlock(&b->lock);
    while (q) {
        struct replay_call *c = q;
        q = q->next;
        c->start(c);
    }
}

/* ---- backend requests ---- */

struct req_call {
    struct replay_call call;
    struct backend *be;
    union {
        struct backend_put put;
        struct backend_get get;
        struct backend_append app;
        struct backend_del del;
        struct backend_list *list;
    } u;
    enum backend_op op;
    int status;
};

static void req_done(struct backend_req *req)
{
    struct req_call *rc = req->userdata;
    rc->status = req->status;
    call_done(&rc->call);
}

static void req_start(struct replay_call *c)
{
    struct req_call *rc = container_of(c, struct req_call, call);
    struct backend_req *req;
    int r;

    switch (rc->op) {
    case BACKEND_OP_PUT:
        req = &rc->u.put.req;
        req->cb = req_done;
        req->userdata = rc;
        r = backend_put(rc->be, &rc->u.put);
        break;
    case BACKEND_OP_GET:
        req = &rc->u.get.req;
        req->cb = req_done;
        req->userdata = rc;
        r = backend_get(rc->be, &rc->u.get);
        break;
    case BACKEND_OP_APPEND:
        req = &rc->u.app.req;
        req->cb = req_done;
        req->userdata = rc;
        r = backend_append(rc->be, &rc->u.app);
        break;
    case BACKEND_OP_DELETE:
        req = &rc->u.del.req;
        req->cb = req_done;
        req->userdata = rc;
        r = backend_del(rc->be, &rc->u.del);
        break;
    default:
        req = &rc->u.list->req;
        req->cb = req_done;
        req->userdata = rc;
        r = backend_list(rc->be, rc->u.list);
        break;
    }
    if (r < 0) {
        rc->status = r;
        call_done(c);
    }
}

int replay_get(struct replay *rp, const char *key, uint64_t off, uint64_t len, uint8_t **out,
               size_t *out_len)
{
    struct req_call rc = {.call.start = req_start, .be = rp->rv.be, .op = BACKEND_OP_GET};

    if (replay_prefetch_take(rp, key, off, len, out, out_len))
        return 0;
    rc.u.get = (struct backend_get){.offset = off, .length = len, .max_len = (size_t)len};
    snprintf(rc.u.get.req.key, sizeof(rc.u.get.req.key), "%s", key);
    call_and_wait(rp, &rc.call);
    if (rc.status != 0) {
        backend_get_reset(&rc.u.get);
        return rc.status;
    }
    *out = rc.u.get.out;
    *out_len = rc.u.get.out_len;
    return 0;
}

int replay_put(struct replay *rp, const char *key, const void *data, size_t len, unsigned flags)
{
    struct req_call rc = {.call.start = req_start, .be = rp->rv.be, .op = BACKEND_OP_PUT};
    struct iovec iov = {(void *)data, len};

    rc.u.put = (struct backend_put){.iov = &iov, .iovcnt = 1, .flags = flags};
    snprintf(rc.u.put.req.key, sizeof(rc.u.put.req.key), "%s", key);
    call_and_wait(rp, &rc.call);
    return rc.status;
}

int replay_append(struct replay *rp, const char *key, uint64_t off, const struct iovec *iov,
                  unsigned iovcnt)
{
    struct req_call rc = {.call.start = req_start, .be = rp->rv.be, .op = BACKEND_OP_APPEND};

    rc.u.app = (struct backend_append){.offset = off, .iov = iov, .iovcnt = iovcnt};
    snprintf(rc.u.app.req.key, sizeof(rc.u.app.req.key), "%s", key);
    call_and_wait(rp, &rc.call);
    return rc.status;
}

int replay_del(struct replay *rp, const char *key)
{
    struct req_call rc = {.call.start = req_start, .be = rp->rv.be, .op = BACKEND_OP_DELETE};

    snprintf(rc.u.del.req.key, sizeof(rc.u.del.req.key), "%s", key);
    call_and_wait(rp, &rc.call);
    return rc.status == BACKEND_E_NOT_FOUND ? 0 : rc.status;
}

int replay_list(struct replay *rp, struct backend_list *list)
{
    struct req_call rc = {.call.start = req_start, .be = rp->rv.be, .op = BACKEND_OP_LIST};

    rc.u.list = list;
    call_and_wait(rp, &rc.call);
    return rc.status;
}

/* ---- database commits ---- */

struct commit_call {
    struct replay_call call;
    struct db *db;
    struct db_write w;
    int (*apply)(struct db_txn *txn, void *ctx);
    void *ctx;
};

static int commit_apply(struct db_txn *txn, struct db_write *w)
{
    struct commit_call *cc = container_of(w, struct commit_call, w);
    return cc->apply(txn, cc->ctx);
}

static void commit_done(struct db_write *w)
{
    call_done(&container_of(w, struct commit_call, w)->call);
}

static void commit_start(struct replay_call *c)
{
    struct commit_call *cc = container_of(c, struct commit_call, call);
    db_write(cc->db, &cc->w);
}

int replay_commit(struct replay *rp, int (*apply)(struct db_txn *, void *), void *ctx)
{
    struct commit_call cc = {
        .call.start = commit_start,
        .db = rp->rv.db,
        .w = {.apply = commit_apply, .done = commit_done},
        .apply = apply,
        .ctx = ctx,
    };

    call_and_wait(rp, &cc.call);
    return cc.w.status;
}

/* ---- jobs on workers ---- */

struct jobs_call {
    struct replay_call call;
    uv_loop_t *loop;
    void (*fn)(void *ctx);
    void *const *ctxs;
    size_t n, running;
    int status;
    struct sync_job {
        uv_work_t work;
        struct jobs_call *jc;
        void *ctx;
    } jobs[REPLAY_JOBS_MAX];
};

static void sync_job_work(uv_work_t *w)
{
    struct sync_job *j = container_of(w, struct sync_job, work);
    j->jc->fn(j->ctx);
}

static void sync_job_done(uv_work_t *w, int status)
{
    struct jobs_call *jc = container_of(w, struct sync_job, work)->jc;

    if (--jc->running == 0)
        call_done(&jc->call);
}

static void jobs_start(struct replay_call *c)
{
    struct jobs_call *jc = container_of(c, struct jobs_call, call);

    for (size_t i = 0; i < jc->n; i++) {
        jc->jobs[i] = (struct sync_job){.jc = jc, .ctx = jc->ctxs[i]};
        int r = uv_queue_work(jc->loop, &jc->jobs[i].work, sync_job_work, sync_job_done);
        if (r < 0) {
            /* The jobs that started run to their end, whatever became of the others. */
            jc->status = r;
            break;
        }
        jc->running++;
    }
    if (jc->running == 0)
        call_done(c);
}

int replay_job(struct replay *rp, void (*fn)(void *ctx), void *ctx)
{
    return replay_jobs(rp, fn, &ctx, 1);
}

int replay_jobs(struct replay *rp, void (*fn)(void *ctx), void *const *ctxs, size_t n)
{
    struct jobs_call jc = {
        .call.start = jobs_start, .loop = rp->rv.loop, .fn = fn, .ctxs = ctxs, .n = n};

    if (n > REPLAY_JOBS_MAX)
        return -EINVAL;
    call_and_wait(rp, &jc.call);
    return jc.status;
}

/* ---- a call on the loop thread ---- */

struct loop_call {
    struct replay_call call;
    void (*fn)(void *ctx);
    void *ctx;
};

static void loop_start(struct replay_call *c)
{
    struct loop_call *lc = container_of(c, struct loop_call, call);

    lc->fn(lc->ctx);
    call_done(c);
}

void replay_on_loop(struct replay *rp, void (*fn)(void *ctx), void *ctx)
{
    struct loop_call lc = {.call.start = loop_start, .fn = fn, .ctx = ctx};
    call_and_wait(rp, &lc.call);
}

struct started_call {
    struct replay_call call;
    void (*fn)(void *ctx, struct replay_call *c);
    void *ctx;
};

static void started_start(struct replay_call *c)
{
    struct started_call *sc = container_of(c, struct started_call, call);
    sc->fn(sc->ctx, c);
}

void replay_start_on_loop(struct replay *rp, void (*fn)(void *ctx, struct replay_call *c),
                          void *ctx)
{
    struct started_call sc = {.call.start = started_start, .fn = fn, .ctx = ctx};
    call_and_wait(rp, &sc.call);
}

void replay_call_end(struct replay_call *c)
{
    call_done(c);
}
