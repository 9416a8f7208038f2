/*
 * The read cache's fetches (readcache-int.h): queued from any thread, each
 * a ranged GET started on the loop; the bytes fetched are served from
 * memory while a worker writes them to a slice file and evicts what the
 * bound no longer holds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/readcache/readcache-int.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* Files unlinked after one write's evictions, at most (the rest at the next write). */
#define EVICT_BATCH 64

/* A slice evicted, whose file goes once the lock is let go. */
struct rc_gone {
    uint64_t pack;
    uint32_t slice;
};

static void write_work(uv_work_t *work);
static void write_done(uv_work_t *work, int status);

/* Ends a fetch that brought nothing: its waiters see `status`. Under the lock. */
static void fetch_failed(struct readcache *rc, struct rc_fetch *f, int status)
{
    struct rc_entry *e = f->e;

    e->status = status ? status : -EIO;
    e->state = RC_FAILED;
    rc_remove_entry(rc, e);
    e->fetch = NULL;
    rc->inflight--;
    pthread_cond_broadcast(&rc->cond);
    rc_settle(e);
}

static void on_fetched(struct backend_req *req)
{
    struct rc_fetch *f = container_of(req, struct rc_fetch, get.req);
    struct readcache *rc = f->rc;
    struct rc_entry *e = f->e;
    bool write = false;

    rc->jobs--;
    pthread_mutex_lock(&rc->lock);
    if (req->status != 0) {
        fetch_failed(rc, f, req->status);
    } else {
        e->mem = f->get.out;
        e->len = (uint32_t)f->get.out_len;
        f->get.out = NULL;
        e->state = RC_LOADED;
        rc->stats.fetched += e->len;
        pthread_cond_broadcast(&rc->cond);
        /* Dropped while it was fetched: its waiters have it, the disk does not want it. */
        write = e->in_table;
        if (!write) {
            e->fetch = NULL;
            rc->inflight--;
            rc_settle(e);
        }
    }
    pthread_mutex_unlock(&rc->lock);
    if (write) {
        int r = uv_queue_work(rc->loop, &f->work, write_work, write_done);
        if (r == 0) {
            rc->jobs++;
            return;
        }
        pthread_mutex_lock(&rc->lock);
        rc_remove_entry(rc, e);
        e->fetch = NULL;
        rc->inflight--;
        rc_settle(e);
        pthread_mutex_unlock(&rc->lock);
    }
    backend_get_reset(&f->get);
    free(f);
}

void rc_on_async(uv_async_t *h)
{
    struct readcache *rc = container_of(h, struct readcache, async);
    struct rc_fetch *q;

    pthread_mutex_lock(&rc->lock);
    q = rc->queue;
    rc->queue = rc->queue_tail = NULL;
    pthread_mutex_unlock(&rc->lock);
    while (q) {
        struct rc_fetch *f = q;
        q = q->next;
        int r = rc->pack_key(rc->ctx, f->e->pack, f->get.req.key, sizeof(f->get.req.key));
        f->get.req.cb = on_fetched;
        f->get.offset = (uint64_t)f->e->slice * READCACHE_SLICE;
        f->get.length = f->e->len;
        f->get.max_len = READCACHE_SLICE;
        if (r == 0)
            r = backend_get(rc->be, &f->get);
        if (r < 0) {
            pthread_mutex_lock(&rc->lock);
            fetch_failed(rc, f, r);
            pthread_mutex_unlock(&rc->lock);
            free(f);
            continue;
        }
        rc->jobs++;
    }
}

/*
 * A new entry for a slice of `len` bytes, FETCHING, with its fetch queued for
 * the loop (the caller sends the wake-up). Under the lock. NULL when out of memory.
 */
struct rc_entry *rc_start_fetch(struct readcache *rc, uint64_t pack, uint32_t slice, uint32_t len)
{
    struct rc_entry *e = calloc(1, sizeof(*e));
    struct rc_fetch *f = calloc(1, sizeof(*f));

    if (!e || !f) {
        free(e);
        free(f);
        return NULL;
    }
    e->pack = pack;
    e->slice = slice;
    e->len = len;
    e->state = RC_FETCHING;
    e->fetch = f;
    f->rc = rc;
    f->e = e;
    if (rc->queue_tail)
        rc->queue_tail->next = f;
    else
        rc->queue = f;
    rc->queue_tail = f;
    rc->inflight++;
    rc_insert(rc, e);
    return e;
}

/* ---- writes and evictions, on workers ---- */

/* Counts `e`'s bytes and evicts the oldest slices until they fit; returns how many went. */
static size_t make_room(struct readcache *rc, struct rc_entry *e, struct rc_gone *gone)
{
    size_t ngone = 0;

    rc->stats.bytes += READCACHE_HEADER + e->len;
    while (rc->stats.bytes > rc->max_bytes && rc->lru_tail && rc->lru_tail != e &&
           ngone < EVICT_BATCH) {
        struct rc_entry *v = rc->lru_tail;
        gone[ngone].pack = v->pack;
        gone[ngone++].slice = v->slice;
        rc_remove_entry(rc, v);
        rc->stats.evictions++;
        rc_settle(v);
    }
    return ngone;
}

static void write_work(uv_work_t *work)
{
    struct rc_fetch *f = container_of(work, struct rc_fetch, work);
    struct readcache *rc = f->rc;
    struct rc_entry *e = f->e;
    struct rc_gone gone[EVICT_BATCH];
    uint32_t crc[READCACHE_PAGES];
    size_t ngone = 0;
    bool reserved, dropped = false;
    /* The entry may be gone once the lock is let go at the end. */
    uint64_t pack = e->pack;
    uint32_t slice = e->slice;

    /*
     * Room first, so that the directory never holds more than the bound,
     * not even while this slice is written: its bytes are counted (and the
     * oldest slices go) before its file is made.
     */
    pthread_mutex_lock(&rc->lock);
    reserved = e->in_table;
    if (reserved)
        ngone = make_room(rc, e, gone);
    pthread_mutex_unlock(&rc->lock);
    /*
     * A reader that found one of these entries before it went may still open
     * its file: it then finds none, or a newer copy, and both are safe.
     */
    for (size_t i = 0; i < ngone; i++)
        rc_unlink_slice(rc, gone[i].pack, gone[i].slice);
    /* The bytes stay put while the entry has a fetch: no lock needed to read them. */
    f->write_status =
        reserved ? readcache_file_write(rc->dirfd, e->pack, e->slice, e->mem, e->len, crc) : 0;
    pthread_mutex_lock(&rc->lock);
    if (reserved && f->write_status == 0 && e->in_table) {
        memcpy(e->crc, crc, sizeof(crc));
        e->have_crc = true;
        e->touched = time(NULL);
        e->state = RC_ON_DISK; /* its bytes, counted above, are now the entry's */
        rc->stats.slices++;
        rc_lru_front(rc, e);
    } else {
        if (reserved) {
            rc->stats.bytes -= READCACHE_HEADER + e->len;
            dropped = f->write_status == 0; /* dropped while it was written */
        }
        rc_remove_entry(rc, e);
    }
    e->fetch = NULL;
    rc->inflight--;
    rc_drop_mem(e);
    rc_settle(e);
    pthread_mutex_unlock(&rc->lock);
    if (dropped)
        rc_unlink_slice(rc, pack, slice);
}

static void write_done(uv_work_t *work, int status)
{
    struct rc_fetch *f = container_of(work, struct rc_fetch, work);
    struct readcache *rc = f->rc;

    (void)status;
    rc->jobs--;
    if (f->write_status != 0) {
        time_t now = time(NULL);
        if (now - rc->warned >= 60) {
            rc->warned = now;
            log_warn("read cache: cannot keep a slice: %s (reads go on without it)",
                     strerror(-f->write_status));
        }
    }
    free(f);
}
