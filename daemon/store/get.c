/*
 * Reading a document: resolve the ref, walk its manifest, hand out one
 * checked chunk at a time as the caller asks for more.
 *
 * The common case stays on the loop thread: a ref resolved before is in the
 * ref cache, a chunk read before is in the decoded-chunk cache, and such a
 * get finishes without any worker job (the chunk is still checked against
 * its id before it goes out). Otherwise one worker job resolves the ref and
 * reads the first chunk, and each later chunk or manifest segment missing
 * from the cache costs one job.
 *
 * A large read keeps up to GET_AHEAD_JOBS more workers decoding the blocks
 * ahead of it into the cache meanwhile (a block per job, each a different
 * one: read.c keeps track of the blocks being decoded), so that reading,
 * decoding and checking run on every core instead of one block after the
 * other. A read that catches up with a block being decoded waits for it.
 *
 * A get is a running operation (store_op) from its start: gc keeps what it
 * may still read, even if its document is deleted meanwhile.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/store/cache.h"
#include "daemon/base/log.h"
#include "daemon/format/record.h"
#include "daemon/store/refcache.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"

/* Read-ahead: jobs at once, and how far ahead (at most a quarter of the cache). */
#define GET_AHEAD_JOBS 2
#define GET_AHEAD_MAX (4u * 1024 * 1024)
/* Manifest entries looked at per read-ahead step, at most (bounds the loop thread's work). */
#define GET_AHEAD_PEEK 256
/* Chunks not cached yet handed to one read-ahead job, at most. */
#define GET_AHEAD_CHUNKS 64

enum get_job {
    GET_RESOLVE,
    GET_SEGMENT,
    GET_CHUNK,
};

struct store_get {
    struct store *st;
    const struct store_get_ops *ops;
    void *userdata;
    struct store_op op;
    char *ref;
    size_t ref_len;
    struct db_doc doc;
    struct manifest_cursor cur;
    struct manifest_entry chunk; /* the next chunk to hand out */
    bool have_chunk;
    uint8_t want[PROTO_HASH_LEN]; /* the segment the cursor needs */
    uint64_t epoch;               /* the ref cache's, when the resolve started */
    bool busy, released, pumping, again, sent_first, done;
    /* The bytes asked for: [from, to) of the content (to is UINT64_MAX for the end). */
    uint64_t from, to;
    /* A worker job and its result. */
    uv_work_t work;
    enum get_job job;
    int status;
    const struct cache_buf *buf;
    /*
     * Read-ahead jobs running, and how far past the reader every chunk was
     * found in the cache when last looked at (not looked at again).
     */
    unsigned ahead_jobs;
    uint64_t ahead_off;
};

/* One block decoded ahead of the reader, into the cache: the first of these chunks not cached. */
struct get_ahead {
    uv_work_t work;
    struct store_get *get;
    size_t n;
    struct manifest_entry chunks[GET_AHEAD_CHUNKS];
};

static void get_free(struct store_get *get)
{
    struct store *st = get->st;

    if (get->buf)
        store_chunk_release(st, get->buf);
    store_op_end(st, &get->op);
    manifest_cursor_clear(&get->cur);
    db_doc_clear(&get->doc);
    free(get->ref);
    st->active--;
    free(get);
}

static void fail(struct store_get *get, int status)
{
    get->done = true;
    get->ops->error(get->userdata, status);
}

/* The manifest is known: walk it from the start; gc now knows what this get reads. */
static int begin_walk(struct store_get *get)
{
    int r = manifest_cursor_init(&get->cur, get->doc.depth, get->doc.root, get->doc.root_len);

    get->op.depth = get->doc.depth;
    get->op.root = get->doc.root;
    get->op.root_len = get->doc.root_len;
    if (r == MANIFEST_E_CORRUPT) {
        log_error("integrity: document %s has a malformed manifest", get->doc.hash);
        return STORE_E_INTEGRITY;
    }
    return r;
}

/*
 * Hands out the part of a chunk that lies in the range; `start` is where the
 * chunk begins in the content. The last piece is the one that reaches the end
 * of the range or of the document.
 */
static void deliver(struct store_get *get, uint64_t start, const uint8_t *data, size_t len)
{
    bool first = !get->sent_first;
    uint64_t end = start + len, stop = get->to < get->doc.size ? get->to : get->doc.size;
    bool last = end >= stop;

    if (data && len > 0) {
        uint64_t lo = get->from > start ? get->from - start : 0;
        uint64_t hi = end > stop ? stop - start : len;
        data += lo;
        len = hi > lo ? (size_t)(hi - lo) : 0;
    }
    get->sent_first = true;
    if (last)
        get->done = true;
    get->ops->data(get->userdata, &get->doc, data, len, first, last);
}

static void job_work(uv_work_t *work)
{
    struct store_get *get = container_of(work, struct store_get, work);
    struct store *st = get->st;

    switch (get->job) {
    case GET_RESOLVE:
        get->status = db_resolve(st->db, get->ref, get->ref_len, DB_WANT_MANIFEST, &get->doc);
        /* The common small document: its first chunk comes back with the lookup. */
        if (get->status == 0 && get->doc.depth == 0 && get->doc.root_len > 0) {
            struct manifest_entry first;
            manifest_entry_at(get->doc.root, 0, &first);
            if (store_load_chunk(st, first.hash, first.bytes, &get->buf) != 0)
                get->buf = NULL; /* the walk reads it again and reports */
        }
        break;
    case GET_SEGMENT:
        get->status = store_load_segment(st, get->want, false, &get->buf);
        break;
    case GET_CHUNK:
        get->status = store_load_chunk(st, get->chunk.hash, get->chunk.bytes, &get->buf);
        break;
    }
}

static void job_done(uv_work_t *work, int status);

static void ahead_work(uv_work_t *work)
{
    struct get_ahead *a = container_of(work, struct get_ahead, work);

    /* Failures are the get's to report when it gets there itself. */
    (void)store_prefetch_next(a->get->st, a->chunks, a->n);
}

static void read_ahead(struct store_get *get);

static void ahead_done(uv_work_t *work, int status)
{
    struct get_ahead *a = container_of(work, struct get_ahead, work);
    struct store_get *get = a->get;

    (void)status;
    free(a);
    get->ahead_jobs--;
    if (get->released) {
        if (!get->busy && !get->pumping && get->ahead_jobs == 0)
            get_free(get);
        return;
    }
    read_ahead(get);
}

/*
 * Keeps up to GET_AHEAD_JOBS jobs decoding the blocks of the chunks past the
 * reader's position that are not cached yet, up to GET_AHEAD_MAX bytes
 * ahead. Each job is handed those chunks in order and decodes the block of
 * the first one no other worker is decoding (store_prefetch_next), so jobs
 * started together decode neighbouring blocks, not one block twice.
 */
static void read_ahead(struct store_get *get)
{
    struct store *st = get->st;
    uint64_t span = st->cfg.cache_size / 4 < GET_AHEAD_MAX ? st->cfg.cache_size / 4 : GET_AHEAD_MAX;
    uint64_t limit = get->cur.offset + span;

    if (get->ahead_off < get->cur.offset)
        get->ahead_off = get->cur.offset;
    while (!get->done && !get->released && get->ahead_jobs < GET_AHEAD_JOBS) {
        struct get_ahead *a = NULL;
        struct manifest_entry e;
        uint64_t off = get->cur.offset;

        for (size_t k = 0; k < GET_AHEAD_PEEK && manifest_cursor_peek(&get->cur, k, &e); k++) {
            uint64_t start = off;
            const struct cache_buf *b;
            off += e.bytes;
            if (start >= limit || start >= get->to)
                break;
            if (start < get->ahead_off || off <= get->from)
                continue;
            if ((b = cache_peek(st->cache, e.hash))) {
                store_chunk_release(st, b);
                if (!a)
                    get->ahead_off = off;
                continue;
            }
            if (!a && !(a = calloc(1, sizeof(*a))))
                return;
            a->chunks[a->n++] = e;
            if (a->n == GET_AHEAD_CHUNKS)
                break;
        }
        if (!a)
            return;
        a->get = get;
        if (uv_queue_work(st->loop, &a->work, ahead_work, ahead_done) < 0) {
            free(a);
            return;
        }
        get->ahead_jobs++;
    }
}

static void start_job(struct store_get *get, enum get_job job)
{
    int r;

    get->job = job;
    get->status = 0;
    get->busy = true;
    r = uv_queue_work(get->st->loop, &get->work, job_work, job_done);
    if (r < 0) {
        get->busy = false;
        fail(get, r);
    }
}

/* One step: hand out the next chunk if it is at hand, else start the job that gets it. */
static void step(struct store_get *get)
{
    const struct cache_buf *b;
    int r;

    if (!get->have_chunk) {
        r = manifest_cursor_next(&get->cur, &get->chunk, get->want);
        if (r == MANIFEST_E_NEED) {
            start_job(get, GET_SEGMENT);
            return;
        }
        if (r == MANIFEST_E_END) {
            if (get->cur.offset != get->doc.size || get->sent_first) {
                log_error("integrity: the manifest of %s does not add up to its size",
                          get->doc.hash);
                fail(get, STORE_E_INTEGRITY);
            } else {
                /* The empty document, or a range that starts at or past its end. */
                deliver(get, get->doc.size, NULL, 0);
            }
            return;
        }
        if (r != 0) {
            fail(get, r);
            return;
        }
        /* Chunks wholly before the range are passed over without being read. */
        if (get->cur.offset <= get->from && get->chunk.bytes > 0) {
            if (get->buf) { /* the lookup's read of the first chunk */
                store_chunk_release(get->st, get->buf);
                get->buf = NULL;
            }
            get->again = true;
            return;
        }
        get->have_chunk = true;
    }
    b = get->buf;
    get->buf = NULL;
    if (!b)
        b = store_cached_chunk(get->st, get->chunk.hash, get->chunk.bytes);
    read_ahead(get);
    if (!b) {
        start_job(get, GET_CHUNK);
        return;
    }
    get->have_chunk = false;
    deliver(get, get->cur.offset - get->chunk.bytes, b->data, b->len);
    store_chunk_release(get->st, b);
}

void store_get_next(struct store_get *get)
{
    if (get->busy || get->done || get->released)
        return;
    if (get->pumping) {
        get->again = true; /* asked from inside data(): the loop below goes on */
        return;
    }
    get->pumping = true;
    do {
        get->again = false;
        step(get);
    } while (get->again && !get->busy && !get->done && !get->released);
    get->pumping = false;
    if (get->released && !get->busy && get->ahead_jobs == 0)
        get_free(get);
}

static void job_done(uv_work_t *work, int status)
{
    struct store_get *get = container_of(work, struct store_get, work);
    int r = status < 0 ? status : get->status;

    get->busy = false;
    if (get->released) {
        if (get->ahead_jobs == 0)
            get_free(get);
        return;
    }
    if (r != 0) {
        if (get->buf) {
            store_chunk_release(get->st, get->buf);
            get->buf = NULL;
        }
        fail(get, get->job == GET_RESOLVE ? store_status_from_db(r) : r);
        return;
    }
    switch (get->job) {
    case GET_RESOLVE:
        refcache_insert(get->st->refs, get->ref, get->ref_len, &get->doc, get->epoch);
        if ((r = begin_walk(get)) != 0) {
            fail(get, r);
            return;
        }
        break;
    case GET_SEGMENT:
        r = manifest_cursor_feed(&get->cur, get->buf->data, get->buf->len);
        store_chunk_release(get->st, get->buf);
        get->buf = NULL;
        if (r != 0) {
            log_error("integrity: a manifest segment of %s does not fit its tree", get->doc.hash);
            fail(get, r == MANIFEST_E_CORRUPT ? STORE_E_INTEGRITY : r);
            return;
        }
        break;
    case GET_CHUNK:
        break; /* get->buf is the chunk: step() hands it out */
    }
    store_get_next(get);
}

int store_get_start(struct store *st, const char *ref, size_t ref_len, uint64_t from, uint64_t to,
                    const struct store_get_ops *ops, void *userdata, struct store_get **out)
{
    struct store_get *get = calloc(1, sizeof(*get));
    int r;

    if (!get || !(get->ref = malloc(ref_len + 1))) {
        free(get);
        return -ENOMEM;
    }
    get->from = from;
    get->to = to < from ? from : to;
    memcpy(get->ref, ref, ref_len);
    get->ref[ref_len] = '\0';
    get->ref_len = ref_len;
    get->st = st;
    get->ops = ops;
    get->userdata = userdata;
    st->active++;
    /* From here on gc keeps what this get may read. */
    store_op_begin(st, &get->op);
    if (refcache_lookup(st->refs, ref, ref_len, &get->doc)) {
        if ((r = begin_walk(get)) != 0) {
            get_free(get);
            return r;
        }
    } else {
        get->epoch = refcache_epoch(st->refs);
        get->job = GET_RESOLVE;
        get->busy = true;
        r = uv_queue_work(st->loop, &get->work, job_work, job_done);
        if (r < 0) {
            get->busy = false;
            get_free(get);
            return r;
        }
    }
    *out = get;
    return 0;
}

void store_get_release(struct store_get *get)
{
    if (get->busy || get->pumping || get->ahead_jobs > 0) {
        get->released = true; /* freed when the running step ends */
        return;
    }
    get_free(get);
}
