/*
 * The bridge: blocking reads for worker threads through the loop, for
 * backends that cannot read from a worker themselves (remote ones). The
 * worker queues its read, wakes the loop, and waits; the loop starts the
 * backend's get and, when it completes, copies the bytes out and wakes the
 * worker.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "daemon/store/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

struct store_bridge_req {
    struct backend_get get;
    void *buf;
    size_t len, got;
    int status;
    bool done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct store_bridge_req *next;
};

static void bridge_done(struct backend_req *req)
{
    struct store_bridge_req *br = container_of(req, struct store_bridge_req, get.req);

    br->status = req->status;
    if (req->status == 0) {
        br->got = br->get.out_len < br->len ? br->get.out_len : br->len;
        memcpy(br->buf, br->get.out, br->got);
    }
    backend_get_reset(&br->get);
    pthread_mutex_lock(&br->lock);
    br->done = true;
    pthread_cond_signal(&br->cond);
    pthread_mutex_unlock(&br->lock);
}

static void on_bridge(uv_async_t *h)
{
    struct store *st = container_of(h, struct store, bridge_async);
    struct store_bridge_req *q;

    pthread_mutex_lock(&st->bridge_lock);
    q = st->bridge_queue;
    st->bridge_queue = NULL;
    pthread_mutex_unlock(&st->bridge_lock);
    while (q) {
        struct store_bridge_req *br = q;
        q = q->next;
        int r = backend_get(st->be, &br->get);
        if (r < 0) {
            br->get.req.status = r;
            bridge_done(&br->get.req);
        }
    }
}

int store_bridge_init(struct store *st)
{
    int r = uv_async_init(st->loop, &st->bridge_async, on_bridge);
    if (r == 0) {
        pthread_mutex_init(&st->bridge_lock, NULL);
        st->bridge_open = true;
        /* Only the jobs that use it keep the loop running, not the handle itself. */
        uv_unref((uv_handle_t *)&st->bridge_async);
    }
    return r;
}

bool store_bridge_close(struct store *st, uv_close_cb closed)
{
    if (!st->bridge_open)
        return false;
    st->bridge_open = false;
    pthread_mutex_destroy(&st->bridge_lock);
    uv_close((uv_handle_t *)&st->bridge_async, closed);
    return true;
}

int store_bridge_read(struct store *st, const char *key, uint64_t off, void *buf, size_t len,
                      size_t *got)
{
    struct store_bridge_req br = {.buf = buf, .len = len};

    snprintf(br.get.req.key, sizeof(br.get.req.key), "%s", key);
    br.get.req.cb = bridge_done;
    br.get.offset = off;
    br.get.length = len;
    br.get.max_len = len;
    pthread_mutex_init(&br.lock, NULL);
    pthread_cond_init(&br.cond, NULL);
    pthread_mutex_lock(&st->bridge_lock);
    br.next = st->bridge_queue;
    st->bridge_queue = &br;
    pthread_mutex_unlock(&st->bridge_lock);
    uv_async_send(&st->bridge_async);
    pthread_mutex_lock(&br.lock);
    while (!br.done)
        pthread_cond_wait(&br.cond, &br.lock);
    pthread_mutex_unlock(&br.lock);
    pthread_cond_destroy(&br.cond);
    pthread_mutex_destroy(&br.lock);
    *got = br.got;
    return br.status;
}
