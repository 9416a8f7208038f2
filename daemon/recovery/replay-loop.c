/*
 * Recovery waits for the loop (replay-int.h): it runs before the daemon serves
 * anyone, so each backend request, database commit and worker job it makes
 * is started here and the loop run until it is done.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meta/db.h"
#include "daemon/recovery/replay-int.h"
#include "proto/util.h"
#include "storage/backend.h"

static void req_done(struct backend_req *req)
{
    *(bool *)req->userdata = true;
}

static void run_until(const struct recovery_parts *rv, const bool *done)
{
    while (!*done)
        uv_run(rv->loop, UV_RUN_ONCE);
}

int replay_get(struct replay *rp, const char *key, uint64_t off, uint64_t len, uint8_t **out,
               size_t *out_len)
{
    const struct recovery_parts *rv = &rp->rv;
    struct backend_get get = {.offset = off, .length = len, .max_len = (size_t)len};
    bool done = false;
    int r;

    if (replay_prefetch_take(rp, key, off, len, out, out_len))
        return 0;
    snprintf(get.req.key, sizeof(get.req.key), "%s", key);
    get.req.cb = req_done;
    get.req.userdata = &done;
    if ((r = backend_get(rv->be, &get)) < 0)
        return r;
    run_until(rv, &done);
    if (get.req.status != 0) {
        backend_get_reset(&get);
        return get.req.status;
    }
    *out = get.out;
    *out_len = get.out_len;
    return 0;
}

int replay_append(const struct recovery_parts *rv, const char *key, uint64_t off,
                  const struct iovec *iov, unsigned iovcnt)
{
    struct backend_append app = {.offset = off, .iov = iov, .iovcnt = iovcnt};
    bool done = false;
    int r;

    snprintf(app.req.key, sizeof(app.req.key), "%s", key);
    app.req.cb = req_done;
    app.req.userdata = &done;
    if ((r = backend_append(rv->be, &app)) < 0)
        return r;
    run_until(rv, &done);
    return app.req.status;
}

int replay_del(const struct recovery_parts *rv, const char *key)
{
    struct backend_del del = {0};
    bool done = false;
    int r;

    snprintf(del.req.key, sizeof(del.req.key), "%s", key);
    del.req.cb = req_done;
    del.req.userdata = &done;
    if ((r = backend_del(rv->be, &del)) < 0)
        return r;
    run_until(rv, &done);
    return del.req.status == BACKEND_E_NOT_FOUND ? 0 : del.req.status;
}

struct sync_write {
    struct db_write w;
    bool done;
    int (*apply)(struct db_txn *txn, void *ctx);
    void *ctx;
};

static void sync_write_done(struct db_write *w)
{
    container_of(w, struct sync_write, w)->done = true;
}

static int sync_write_apply(struct db_txn *txn, struct db_write *w)
{
    struct sync_write *sw = container_of(w, struct sync_write, w);
    return sw->apply(txn, sw->ctx);
}

int replay_commit(const struct recovery_parts *rv, int (*apply)(struct db_txn *, void *), void *ctx)
{
    struct sync_write sw = {
        .w = {.apply = sync_write_apply, .done = sync_write_done}, .apply = apply, .ctx = ctx};

    db_write(rv->db, &sw.w);
    run_until(rv, &sw.done);
    return sw.w.status;
}

struct sync_job {
    uv_work_t work;
    void (*fn)(void *ctx);
    void *ctx;
    bool done;
};

static void sync_job_work(uv_work_t *w)
{
    struct sync_job *j = container_of(w, struct sync_job, work);
    j->fn(j->ctx);
}

static void sync_job_done(uv_work_t *w, int status)
{
    container_of(w, struct sync_job, work)->done = true;
}

/* Runs fn on a worker (where store reads may block) while the loop keeps turning. */
int replay_job(const struct recovery_parts *rv, void (*fn)(void *ctx), void *ctx)
{
    return replay_jobs(rv, fn, &ctx, 1);
}

int replay_jobs(const struct recovery_parts *rv, void (*fn)(void *ctx), void *const *ctxs, size_t n)
{
    struct sync_job jobs[REPLAY_JOBS_MAX];
    int r = 0;
    size_t started = 0;

    if (n > REPLAY_JOBS_MAX)
        return -EINVAL;
    for (; started < n; started++) {
        jobs[started] = (struct sync_job){.fn = fn, .ctx = ctxs[started]};
        if ((r = uv_queue_work(rv->loop, &jobs[started].work, sync_job_work, sync_job_done)) < 0)
            break;
    }
    /* The jobs that started run to their end, whatever became of the others. */
    for (size_t i = 0; i < started; i++)
        run_until(rv, &jobs[i].done);
    return r;
}

int replay_list(const struct recovery_parts *rv, struct backend_list *list)
{
    bool done = false;
    int r;

    list->req.cb = req_done;
    list->req.userdata = &done;
    if ((r = backend_list(rv->be, list)) < 0)
        return r;
    run_until(rv, &done);
    return list->req.status;
}
