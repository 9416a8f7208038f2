/*
 * The SFTP backend: sftp://USER@HOST[:PORT]/PATH (options in sftp-url.c).
 *
 * A small pool of worker threads, each with its own SSH session (libssh2 in
 * blocking mode, every blocking step limited by the timeout), takes requests
 * from one queue; a uv_async_t hands finished ones back to the loop, which
 * is the only thread that calls backend_complete(). A slow or dead server
 * therefore never blocks the loop, and other requests keep their workers.
 *
 * A transport failure drops that worker's session and reports
 * BACKEND_E_UNAVAILABLE; the front end retries with backoff (every
 * operation here is safe to repeat, a put being a temporary file and a
 * rename) and the next attempt reconnects. Refusals (host key,
 * authentication, permission, no space) are final.
 *
 * Idle sessions send keepalives, so that a server or NAT dropping them is
 * noticed before a request needs them.
 */
#include "storage/sftp/sftp.h"
#include "storage/sftp/sftp-int.h"
#include "proto/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct sftp_job {
    struct backend_req *req;
    struct sftp_job *next;
    atomic_bool cancel;
    int status;
};

struct sftp_be;

struct sftp_worker {
    struct sftp_be *sb;
    pthread_t tid;
    bool started;
    struct sftp_conn conn;
    uint8_t *buf;
    uint64_t rng;
    struct sftp_job *job; /* running now; under sb->lock */
};

struct sftp_be {
    struct backend *be;
    struct sftp_opts o;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct sftp_job *queue_head, *queue_tail; /* waiting for a worker */
    struct sftp_job *done;                    /* finished, for the loop (any order) */
    bool stopping;
    uv_async_t async;
    struct sftp_worker *workers;
    /* Jobs submitted and not yet completed (loop thread only): the wakeup keeps the
     * loop alive only while there are some, like a libuv request would. */
    unsigned pending;
    atomic_bool no_fsync;
    atomic_uint_fast64_t epoch; /* see sftp_ctx */
    atomic_uint connected;      /* sessions open, for log messages */
};

static struct sftp_be *sftp_of(struct backend *be)
{
    return be->priv;
}

/* ---- the loop side ---------------------------------------------------------------- */

static void on_async(uv_async_t *async)
{
    struct sftp_be *sb = container_of(async, struct sftp_be, async);
    struct sftp_job *done;

    pthread_mutex_lock(&sb->lock);
    done = sb->done;
    sb->done = NULL;
    pthread_mutex_unlock(&sb->lock);
    while (done) {
        struct sftp_job *next = done->next;
        struct backend_req *req = done->req;
        req->status = done->status;
        free(done);
        if (--sb->pending == 0)
            uv_unref((uv_handle_t *)&sb->async);
        backend_complete(req);
        done = next;
    }
}

static int submit(struct backend *be, struct backend_req *req)
{
    struct sftp_be *sb = sftp_of(be);
    struct sftp_job *job = calloc(1, sizeof(*job));

    if (!job)
        return -ENOMEM;
    job->req = req;
    atomic_init(&job->cancel, false);
    if (sb->pending++ == 0)
        uv_ref((uv_handle_t *)&sb->async);
    pthread_mutex_lock(&sb->lock);
    if (sb->queue_tail)
        sb->queue_tail->next = job;
    else
        sb->queue_head = job;
    sb->queue_tail = job;
    pthread_cond_signal(&sb->cond);
    pthread_mutex_unlock(&sb->lock);
    return 0;
}

static void sftp_cancel(struct backend *be, struct backend_req *req)
{
    struct sftp_be *sb = sftp_of(be);

    pthread_mutex_lock(&sb->lock);
    for (struct sftp_job *j = sb->queue_head; j; j = j->next) {
        if (j->req == req)
            atomic_store(&j->cancel, true);
    }
    for (unsigned i = 0; i < sb->o.connections; i++) {
        if (sb->workers[i].job && sb->workers[i].job->req == req)
            atomic_store(&sb->workers[i].job->cancel, true);
    }
    pthread_mutex_unlock(&sb->lock);
}

/* ---- the workers ---------------------------------------------------------------- */

static int ensure_session(struct sftp_worker *w)
{
    struct sftp_be *sb = w->sb;
    char msg[512] = "";
    int r;

    if (w->conn.ssh && !w->conn.broken)
        return 0;
    if (w->conn.ssh) {
        sftp_disconnect(&w->conn);
        atomic_fetch_sub(&sb->connected, 1);
    }
    r = sftp_connect(&w->conn, &sb->o, msg, sizeof(msg));
    if (r != 0) {
        backend_log(r == BACKEND_E_UNAVAILABLE ? BACKEND_LOG_WARN : BACKEND_LOG_ERROR, "%s", msg);
        return r;
    }
    if (atomic_fetch_add(&sb->connected, 1) == 0)
        backend_log(BACKEND_LOG_INFO, "sftp: connected to %s", sb->o.host);
    return 0;
}

static void run_job(struct sftp_worker *w, struct sftp_job *job)
{
    struct sftp_ctx x = {
        .conn = &w->conn,
        .opts = &w->sb->o,
        .buf = w->buf,
        .cancel = &job->cancel,
        .no_fsync = &w->sb->no_fsync,
        .epoch = &w->sb->epoch,
        .rng = &w->rng,
    };
    int r;

    if (atomic_load(&job->cancel)) {
        job->status = -ECANCELED;
        return;
    }
    r = ensure_session(w);
    if (r == 0)
        r = sftp_op_run(&x, job->req);
    job->status = r;
    if (w->conn.broken) {
        sftp_disconnect(&w->conn);
        atomic_fetch_sub(&w->sb->connected, 1);
    }
}

static void keepalive(struct sftp_worker *w)
{
    int next = 0;

    if (libssh2_keepalive_send(w->conn.ssh, &next) != 0) {
        w->conn.broken = true;
        sftp_disconnect(&w->conn);
        atomic_fetch_sub(&w->sb->connected, 1);
    }
}

static void *worker_main(void *arg)
{
    struct sftp_worker *w = arg;
    struct sftp_be *sb = w->sb;

    pthread_mutex_lock(&sb->lock);
    for (;;) {
        while (!sb->queue_head && !sb->stopping) {
            if (!w->conn.ssh || !sb->o.keepalive_s) {
                pthread_cond_wait(&sb->cond, &sb->lock);
                continue;
            }
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += sb->o.keepalive_s;
            if (pthread_cond_timedwait(&sb->cond, &sb->lock, &until) == ETIMEDOUT &&
                !sb->queue_head && !sb->stopping) {
                pthread_mutex_unlock(&sb->lock);
                keepalive(w);
                pthread_mutex_lock(&sb->lock);
            }
        }
        if (sb->stopping)
            break;
        struct sftp_job *job = sb->queue_head;
        sb->queue_head = job->next;
        if (!sb->queue_head)
            sb->queue_tail = NULL;
        job->next = NULL;
        w->job = job;
        pthread_mutex_unlock(&sb->lock);

        run_job(w, job);

        pthread_mutex_lock(&sb->lock);
        w->job = NULL;
        job->next = sb->done;
        sb->done = job;
        uv_async_send(&sb->async);
    }
    pthread_mutex_unlock(&sb->lock);
    if (w->conn.ssh)
        sftp_disconnect(&w->conn);
    return NULL;
}

/* ---- open and close ------------------------------------------------------------- */

static pthread_once_t libssh2_once = PTHREAD_ONCE_INIT;
static int libssh2_init_status;

static void init_libssh2(void)
{
    libssh2_init_status = libssh2_init(0);
}

static void stop_workers(struct sftp_be *sb)
{
    pthread_mutex_lock(&sb->lock);
    sb->stopping = true;
    pthread_cond_broadcast(&sb->cond);
    pthread_mutex_unlock(&sb->lock);
    for (unsigned i = 0; sb->workers && i < sb->o.connections; i++) {
        struct sftp_worker *w = &sb->workers[i];
        if (w->started)
            pthread_join(w->tid, NULL);
        else if (w->conn.ssh)
            sftp_disconnect(&w->conn);
        free(w->buf);
    }
    free(sb->workers);
    sb->workers = NULL;
}

static void on_closed(uv_handle_t *handle)
{
    struct sftp_be *sb = container_of((uv_async_t *)handle, struct sftp_be, async);
    backend_release(sb->be);
}

static void sftp_close(struct backend *be)
{
    struct sftp_be *sb = sftp_of(be);

    stop_workers(sb);
    pthread_cond_destroy(&sb->cond);
    pthread_mutex_destroy(&sb->lock);
    uv_close((uv_handle_t *)&sb->async, on_closed);
}

/*
 * Connects once, synchronously, so that a wrong host key, key or path
 * stops cairnd at start with the reason; that session becomes the first
 * worker's. Failures here are not retried: the operator has to act.
 */
static int first_session(struct sftp_be *sb, const char **msg)
{
    static _Thread_local char why[768];
    struct sftp_worker *w = &sb->workers[0];
    struct sftp_ctx x = {
        .conn = &w->conn,
        .opts = &sb->o,
        .buf = w->buf,
        .no_fsync = &sb->no_fsync,
        .epoch = &sb->epoch,
        .rng = &w->rng,
    };
    static const atomic_bool never = false;
    int r;

    x.cancel = &never;
    why[0] = '\0';
    r = sftp_connect(&w->conn, &sb->o, why, sizeof(why));
    if (r == 0) {
        if (why[0])
            backend_log(BACKEND_LOG_WARN, "%s", why);
        why[0] = '\0';
        r = sftp_prepare_root(&x, why, sizeof(why));
        if (r == 0 && why[0])
            backend_log(BACKEND_LOG_INFO, "%s", why);
    }
    if (r != 0) {
        *msg = why[0] ? why : "sftp: cannot open the backend";
        return r > 0 ? -EHOSTUNREACH : r;
    }
    atomic_store(&sb->connected, 1);
    return 0;
}

static int sftp_open(struct backend *be, const char *url, const char **msg)
{
    struct sftp_be *sb = sftp_of(be);
    int r;

    memset(sb, 0, sizeof(*sb));
    sb->be = be;
    if ((r = sftp_parse_url(url, &sb->o, msg)) != 0)
        return r;
    pthread_once(&libssh2_once, init_libssh2);
    if (libssh2_init_status != 0) {
        *msg = "sftp: libssh2 failed to initialise";
        return -EIO;
    }
    pthread_mutex_init(&sb->lock, NULL);
    pthread_cond_init(&sb->cond, NULL);
    atomic_init(&sb->no_fsync, false);
    atomic_init(&sb->epoch, 0);
    atomic_init(&sb->connected, 0);
    sb->workers = calloc(sb->o.connections, sizeof(*sb->workers));
    if (!sb->workers) {
        r = -ENOMEM;
        goto fail;
    }
    for (unsigned i = 0; i < sb->o.connections; i++) {
        struct sftp_worker *w = &sb->workers[i];
        w->sb = sb;
        w->conn.fd = -1;
        w->rng = uv_hrtime() ^ ((uint64_t)(uintptr_t)w << 16) ^ (0x9e3779b97f4a7c15ull * (i + 1));
        if (!(w->buf = malloc(SFTP_WRITE_BUF))) {
            r = -ENOMEM;
            goto fail;
        }
    }
    if ((r = first_session(sb, msg)) != 0)
        goto fail;
    /* No job can exist before open returns, so the workers start before the wakeup is set up. */
    for (unsigned i = 0; i < sb->o.connections; i++) {
        struct sftp_worker *w = &sb->workers[i];
        if ((r = -pthread_create(&w->tid, NULL, worker_main, w)) != 0) {
            *msg = "sftp: cannot start a worker thread";
            goto fail;
        }
        w->started = true;
    }
    if ((r = uv_async_init(be->loop, &sb->async, on_async)) != 0) {
        *msg = "sftp: cannot set up the loop wakeup";
        goto fail;
    }
    uv_unref((uv_handle_t *)&sb->async);
    /*
     * A dropped connection or a restarting server should not fail a batch
     * at once: 11 to 21 s of retries (backoff doubling from 100 ms to 5 s,
     * with jitter), each attempt limited by the SSH timeout.
     */
    be->parallel = sb->o.connections;
    be->retry.attempts = 10;
    be->retry.backoff_ms = 100;
    be->retry.backoff_max_ms = 5000;
    return 0;
fail:
    stop_workers(sb);
    pthread_cond_destroy(&sb->cond);
    pthread_mutex_destroy(&sb->lock);
    return r;
}

static void sftp_describe(struct backend *be, char *out, size_t out_len)
{
    const struct sftp_opts *o = &sftp_of(be)->o;
    bool v6 = strchr(o->host, ':') != NULL;

    snprintf(out, out_len, "sftp://%s@%s%s%s:%u%s%s", o->user, v6 ? "[" : "", o->host,
             v6 ? "]" : "", o->port, o->root[0] == '/' ? "" : "/~/", o->root);
}

const struct backend_ops backend_sftp_ops = {
    .name = "sftp",
    .caps = 0,
    .priv_size = sizeof(struct sftp_be),
    .open = sftp_open,
    .close = sftp_close,
    .put = submit,
    .get = submit,
    .head = submit,
    .del = submit,
    .list = submit,
    .cancel = sftp_cancel,
    .describe = sftp_describe,
};
