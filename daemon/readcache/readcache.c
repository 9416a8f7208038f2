/*
 * The read cache (readcache.h): reads from worker threads, forgetting
 * slices, and the cache object. The table of slices is readcache-table.c,
 * fetches and the writes after them readcache-fetch.c.
 *
 * A slice is in one of three states. FETCHING: a ranged GET is in flight and
 * readers wait for it. LOADED: its bytes are in memory, served from there
 * while a worker job writes them to a file. ON_DISK: only the file is left,
 * and the slice is in the LRU list. A fetch that fails leaves its entry
 * FAILED, out of the table, until its waiters have seen why. One mutex guards the table, the list
 * and every entry's fields; it is never held for I/O or copying.
 *
 * An entry leaves the table when it is evicted, dropped, or its fetch fails;
 * its memory goes once nobody uses it any more (no reader holds a reference
 * and no fetch or write job points to it).
 */
#include "daemon/readcache/readcache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/readcache/readcache-int.h"
#include "proto/util.h"
#include "storage/backend.h"

/* A slice's file gets its modification time set at most this often (seconds). */
#define TOUCH_EVERY 60

/* ---- reads, on workers ---- */

/* How far a pack's records go, from the recent ones or the database. */
static int pack_size(struct readcache *rc, uint64_t pack, uint64_t *size)
{
    int r;

    pthread_mutex_lock(&rc->lock);
    for (unsigned i = 0; i < SIZES; i++) {
        if (rc->sizes[i].pack == pack && rc->sizes[i].size > 0) {
            *size = rc->sizes[i].size;
            pthread_mutex_unlock(&rc->lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&rc->lock);
    if ((r = rc->pack_size(rc->ctx, pack, size)) != 0)
        return r;
    /* Packs never grow once the database names their records. */
    pthread_mutex_lock(&rc->lock);
    rc->sizes[rc->sizes_next].pack = pack;
    rc->sizes[rc->sizes_next].size = *size;
    rc->sizes_next = (rc->sizes_next + 1) % SIZES;
    pthread_mutex_unlock(&rc->lock);
    return 0;
}

static uint32_t slice_len(uint64_t size, uint32_t slice)
{
    uint64_t at = (uint64_t)slice * READCACHE_SLICE;

    if (at >= size)
        return 0;
    return size - at < READCACHE_SLICE ? (uint32_t)(size - at) : READCACHE_SLICE;
}

static uint32_t slice_count(uint64_t size)
{
    return (uint32_t)((size + READCACHE_SLICE - 1) / READCACHE_SLICE);
}

/*
 * The slice read before this one by a sequential reader: the previous slice
 * of the pack, or for the first slice the last one of the pack before.
 */
static bool has_predecessor(struct readcache *rc, uint64_t pack, uint32_t slice)
{
    if (slice > 0)
        return rc_lookup(rc, pack, slice - 1) != NULL;
    if (pack == 0)
        return false;
    for (unsigned i = 0; i < SIZES; i++)
        if (rc->sizes[i].pack == pack - 1 && rc->sizes[i].size > 0)
            return rc_lookup(rc, pack - 1, slice_count(rc->sizes[i].size) - 1) != NULL;
    return false;
}

/*
 * Starts fetches of the slices after this one that are not here yet, up to
 * READCACHE_AHEAD of them, within the memory bound; past the end of the pack
 * into the ones numbered after it (whose sizes the database gives). Returns
 * whether it queued any. Called without the lock (it may ask the database).
 */
static bool read_ahead(struct readcache *rc, uint64_t pack, uint32_t slice, uint64_t size)
{
    uint64_t sizes[READCACHE_AHEAD + 1], sz;
    uint32_t ahead = slice_count(size) - slice - 1;
    unsigned npacks = 1;
    bool queued = false;

    sizes[0] = size;
    while (ahead < READCACHE_AHEAD && npacks <= READCACHE_AHEAD &&
           pack_size(rc, pack + npacks, &sz) == 0 && sz > 0) {
        sizes[npacks++] = sz;
        ahead += slice_count(sz);
    }
    pthread_mutex_lock(&rc->lock);
    if (has_predecessor(rc, pack, slice)) {
        unsigned p = 0, n = 0;
        uint32_t s = slice;
        while (n < READCACHE_AHEAD && rc->inflight < READCACHE_MAX_INFLIGHT) {
            if (++s >= slice_count(sizes[p])) {
                if (++p == npacks)
                    break;
                s = 0;
            }
            n++;
            if (rc_lookup(rc, pack + p, s))
                continue;
            if (!rc_start_fetch(rc, pack + p, s, slice_len(sizes[p], s)))
                break;
            queued = true;
        }
    }
    pthread_mutex_unlock(&rc->lock);
    return queued;
}

/* Takes the slice's on-disk entry out of the table (its file is gone or bad); counts a damaged one.
 */
static void forget_file(struct readcache *rc, uint64_t pack, uint32_t slice, bool bad)
{
    struct rc_entry *e;

    pthread_mutex_lock(&rc->lock);
    if ((e = rc_lookup(rc, pack, slice)) && e->state == RC_ON_DISK) {
        rc_remove_entry(rc, e);
        rc_settle(e);
    }
    if (bad)
        rc->stats.damaged++;
    pthread_mutex_unlock(&rc->lock);
}

/* A slice file failed its check: it goes, and the read fetches the slice again. */
static void damaged(struct readcache *rc, uint64_t pack, uint32_t slice)
{
    char name[READCACHE_NAME_MAX];

    forget_file(rc, pack, slice, true);
    readcache_file_name(name, pack, slice);
    log_warn("read cache: slice file %s is damaged; fetched again", name);
    rc_unlink_slice(rc, pack, slice);
}

/* Reads [in, in + want) of one slice of `len` bytes into buf: 0 with *n, or a failure. */
static int read_slice(struct readcache *rc, uint64_t pack, uint32_t slice, uint32_t len,
                      uint32_t in, uint8_t *buf, size_t want, size_t *n)
{
    for (int attempt = 0;; attempt++) {
        bool waited = false, have_crc, touch;
        uint32_t crc[READCACHE_PAGES], flen;
        struct rc_entry *e;
        int r;

        pthread_mutex_lock(&rc->lock);
        e = rc_lookup(rc, pack, slice);
        if (!e) {
            if (!(e = rc_start_fetch(rc, pack, slice, len))) {
                pthread_mutex_unlock(&rc->lock);
                return -ENOMEM;
            }
            uv_async_send(&rc->async);
        }
        if (e->state != RC_ON_DISK) {
            e->refs++;
            while (e->state == RC_FETCHING) {
                waited = true;
                pthread_cond_wait(&rc->cond, &rc->lock);
            }
            /* Served from memory without waiting: read-ahead did its job. */
            if (waited)
                rc->stats.misses++;
            else
                rc->stats.hits++;
            r = e->state == RC_FAILED ? e->status : 0;
            pthread_mutex_unlock(&rc->lock);
            if (r == 0) {
                /* LOADED, or ON_DISK since: the bytes stay in memory while referenced. */
                *n = in < e->len ? (want < e->len - in ? want : e->len - in) : 0;
                if (*n > 0)
                    memcpy(buf, e->mem + in, *n);
            }
            pthread_mutex_lock(&rc->lock);
            e->refs--;
            rc_drop_mem(e);
            rc_settle(e);
            pthread_mutex_unlock(&rc->lock);
            return r;
        }
        /* On disk: the file is read outside the lock, checked page by page. */
        have_crc = e->have_crc;
        memcpy(crc, e->crc, sizeof(crc));
        flen = e->len;
        touch = time(NULL) - e->touched >= TOUCH_EVERY;
        if (touch)
            e->touched = time(NULL);
        rc_lru_unlink(rc, e);
        rc_lru_front(rc, e);
        pthread_mutex_unlock(&rc->lock);
        r = readcache_file_read(rc->dirfd, pack, slice, crc, &have_crc, &flen, in, buf, want, n,
                                touch);
        if (r == 0) {
            pthread_mutex_lock(&rc->lock);
            rc->stats.hits++;
            if ((e = rc_lookup(rc, pack, slice)) && e->state == RC_ON_DISK && !e->have_crc) {
                memcpy(e->crc, crc, sizeof(crc));
                e->have_crc = true;
                if (flen != e->len) {
                    rc->stats.bytes = rc->stats.bytes - e->len + flen;
                    e->len = flen;
                }
            }
            pthread_mutex_unlock(&rc->lock);
            return 0;
        }
        if (r < 0)
            return r;
        if (r == READCACHE_E_BAD)
            damaged(rc, pack, slice);
        else
            forget_file(rc, pack, slice, false); /* evicted meanwhile */
        if (attempt > 0)
            return -EIO; /* fetched anew and still bad: the disk under the cache fails */
    }
}

int readcache_read(struct readcache *rc, uint64_t pack, uint64_t off, void *buf, size_t len,
                   size_t *got)
{
    uint64_t size;
    size_t done = 0;
    int r = pack_size(rc, pack, &size);

    *got = 0;
    if (r != 0)
        return r == -ENOENT ? BACKEND_E_NOT_FOUND : r;
    while (done < len && off + done < size) {
        uint64_t pos = off + done;
        uint32_t slice = (uint32_t)(pos / READCACHE_SLICE), in = (uint32_t)(pos % READCACHE_SLICE);
        size_t want = len - done < READCACHE_SLICE - in ? len - done : READCACHE_SLICE - in, n;
        /* The slice wanted now goes out before the ones read ahead. */
        pthread_mutex_lock(&rc->lock);
        if (!rc_lookup(rc, pack, slice) && rc_start_fetch(rc, pack, slice, slice_len(size, slice)))
            uv_async_send(&rc->async);
        pthread_mutex_unlock(&rc->lock);
        if (read_ahead(rc, pack, slice, size))
            uv_async_send(&rc->async);
        if ((r = read_slice(rc, pack, slice, slice_len(size, slice), in, (uint8_t *)buf + done,
                            want, &n)) != 0)
            return r;
        done += n;
        if (n < want)
            break;
    }
    *got = done;
    return 0;
}

/* ---- forgetting ---- */

void readcache_drop(struct readcache *rc, uint64_t pack, uint64_t off, uint64_t len)
{
    uint64_t first = off / READCACHE_SLICE, last = len ? (off + len - 1) / READCACHE_SLICE : first;

    for (uint64_t s = first; s <= last && s <= UINT32_MAX; s++) {
        struct rc_entry *e;
        bool on_disk = false;
        pthread_mutex_lock(&rc->lock);
        if ((e = rc_lookup(rc, pack, (uint32_t)s))) {
            on_disk = e->state == RC_ON_DISK;
            rc_remove_entry(rc, e);
            rc_settle(e);
        }
        pthread_mutex_unlock(&rc->lock);
        if (on_disk)
            rc_unlink_slice(rc, pack, (uint32_t)s);
    }
}

/* The files of a deleted pack's slices, unlinked on a worker. */
struct rc_forget {
    uv_work_t work;
    struct readcache *rc;
    uint64_t pack;
    size_t n;
    uint32_t slices[];
};

static void forget_work(uv_work_t *work)
{
    struct rc_forget *fg = container_of(work, struct rc_forget, work);

    for (size_t i = 0; i < fg->n; i++)
        rc_unlink_slice(fg->rc, fg->pack, fg->slices[i]);
}

static void forget_done(uv_work_t *work, int status)
{
    struct rc_forget *fg = container_of(work, struct rc_forget, work);

    (void)status;
    fg->rc->jobs--;
    free(fg);
}

void readcache_forget_pack(struct readcache *rc, uint64_t pack)
{
    struct rc_forget *fg = NULL;
    size_t n = 0;

    pthread_mutex_lock(&rc->lock);
    for (unsigned i = 0; i < SIZES; i++)
        if (rc->sizes[i].pack == pack)
            rc->sizes[i].size = 0;
    /* One walk of the table counts the pack's slices, a second takes them out. */
    for (size_t b = 0; b < rc->nbuckets; b++)
        for (struct rc_entry *e = rc->buckets[b]; e; e = e->hnext)
            n += e->pack == pack && e->state == RC_ON_DISK;
    if (n > 0 && (fg = malloc(sizeof(*fg) + n * sizeof(fg->slices[0])))) {
        fg->rc = rc;
        fg->pack = pack;
        fg->n = 0;
    }
    for (size_t b = 0; b < rc->nbuckets; b++) {
        for (struct rc_entry *e = rc->buckets[b], *next; e; e = next) {
            next = e->hnext;
            if (e->pack != pack)
                continue;
            if (fg && e->state == RC_ON_DISK)
                fg->slices[fg->n++] = e->slice;
            rc_remove_entry(rc, e);
            rc_settle(e);
        }
    }
    pthread_mutex_unlock(&rc->lock);
    /* Without memory for the list, the files stay; the next start finds them, and a
     * reader that gets a stale copy drops it when the record fails its check. */
    if (fg && uv_queue_work(rc->loop, &fg->work, forget_work, forget_done) == 0)
        rc->jobs++;
    else
        free(fg);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void readcache_forget_unknown(struct readcache *rc)
{
    uint64_t *packs = NULL, size;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&rc->lock);
    for (size_t b = 0; b < rc->nbuckets; b++) {
        for (struct rc_entry *e = rc->buckets[b]; e; e = e->hnext) {
            if (n == cap) {
                uint64_t *more = realloc(packs, (cap = cap ? cap * 2 : 64) * sizeof(*packs));
                if (!more) {
                    /* Only tidier: a stale slice is also dropped when its record fails. */
                    pthread_mutex_unlock(&rc->lock);
                    free(packs);
                    return;
                }
                packs = more;
            }
            packs[n++] = e->pack;
        }
    }
    pthread_mutex_unlock(&rc->lock);
    if (n)
        qsort(packs, n, sizeof(*packs), cmp_u64);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && packs[i] == packs[i - 1])
            continue;
        if (rc->pack_size(rc->ctx, packs[i], &size) == -ENOENT)
            readcache_forget_pack(rc, packs[i]);
    }
    free(packs);
}

void readcache_get_stats(struct readcache *rc, struct readcache_stats *out)
{
    pthread_mutex_lock(&rc->lock);
    *out = rc->stats;
    pthread_mutex_unlock(&rc->lock);
    out->max_bytes = rc->max_bytes;
}

/* ---- the cache object ---- */

static int by_use(const void *a, const void *b)
{
    const struct readcache_found *x = a, *y = b;

    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec)
        return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return 0;
}

static void free_entries(struct readcache *rc)
{
    for (size_t b = 0; b < rc->nbuckets; b++) {
        while (rc->buckets[b]) {
            struct rc_entry *e = rc->buckets[b];
            rc->buckets[b] = e->hnext;
            free(e->mem);
            free(e);
        }
    }
}

/* Takes stock of what a previous run left: oldest use first into the list, then evicts. */
static int take_stock(struct readcache *rc)
{
    struct readcache_found *found;
    size_t n;
    int r = readcache_file_scan(rc->dirfd, &found, &n);

    if (r != 0)
        return r;
    if (n > 1)
        qsort(found, n, sizeof(*found), by_use);
    for (size_t i = 0; i < n; i++) {
        struct rc_entry *e = calloc(1, sizeof(*e));
        if (!e) {
            free(found);
            return -ENOMEM;
        }
        e->pack = found[i].pack;
        e->slice = found[i].slice;
        e->len = found[i].len;
        e->state = RC_ON_DISK;
        e->touched = found[i].used.tv_sec;
        rc_insert(rc, e);
        rc_lru_front(rc, e);
        rc->stats.bytes += READCACHE_HEADER + e->len;
        rc->stats.slices++;
    }
    free(found);
    while (rc->stats.bytes > rc->max_bytes && rc->lru_tail) {
        struct rc_entry *v = rc->lru_tail;
        uint64_t pack = v->pack;
        uint32_t slice = v->slice;
        rc_remove_entry(rc, v);
        rc_settle(v);
        rc->stats.evictions++;
        rc_unlink_slice(rc, pack, slice);
    }
    return 0;
}

int readcache_new(struct readcache **out, uv_loop_t *loop, struct backend *be, const char *dir,
                  uint64_t max_bytes, readcache_size_fn *pack_size_fn,
                  readcache_key_fn *pack_key_fn, void *ctx, const char **msg)
{
    struct readcache *rc = calloc(1, sizeof(*rc));
    uint64_t slices = max_bytes / (READCACHE_HEADER + READCACHE_SLICE / 2);
    int r;

    *out = NULL;
    *msg = NULL;
    if (!rc)
        return -ENOMEM;
    rc->loop = loop;
    rc->be = be;
    rc->pack_size = pack_size_fn;
    rc->pack_key = pack_key_fn;
    rc->ctx = ctx;
    rc->max_bytes = max_bytes;
    /* About two slices a bucket when full of half-full slices. */
    rc->nbuckets = 1024;
    while (rc->nbuckets < slices / 2 && rc->nbuckets < (1u << 22))
        rc->nbuckets *= 2;
    rc->dirfd = -1;
    if (!(rc->buckets = calloc(rc->nbuckets, sizeof(*rc->buckets)))) {
        free(rc);
        return -ENOMEM;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        r = -errno;
        *msg = "cannot create the read cache directory";
        goto fail;
    }
    if ((rc->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        r = -errno;
        *msg = "cannot open the read cache directory";
        goto fail;
    }
    if ((r = take_stock(rc)) != 0) {
        *msg = "cannot read the read cache directory";
        goto fail;
    }
    if ((r = uv_async_init(loop, &rc->async, rc_on_async)) < 0) {
        *msg = "cannot set up the read cache";
        goto fail;
    }
    /* Fetches and write jobs keep the loop running while they run, not the handle. */
    uv_unref((uv_handle_t *)&rc->async);
    pthread_mutex_init(&rc->lock, NULL);
    pthread_cond_init(&rc->cond, NULL);
    *out = rc;
    return 0;
fail:
    if (rc->dirfd >= 0)
        close(rc->dirfd);
    free_entries(rc);
    free(rc->buckets);
    free(rc);
    return r;
}

bool readcache_busy(struct readcache *rc)
{
    bool queued;

    if (!rc)
        return false;
    pthread_mutex_lock(&rc->lock);
    queued = rc->queue != NULL;
    pthread_mutex_unlock(&rc->lock);
    return queued || rc->jobs > 0;
}

static void on_closed(uv_handle_t *h)
{
    struct readcache *rc = container_of((uv_async_t *)h, struct readcache, async);

    free_entries(rc);
    free(rc->buckets);
    pthread_cond_destroy(&rc->cond);
    pthread_mutex_destroy(&rc->lock);
    free(rc);
}

struct readcache *readcache_free(struct readcache *rc)
{
    if (!rc)
        return NULL;
    close(rc->dirfd);
    uv_close((uv_handle_t *)&rc->async, on_closed);
    return NULL;
}
