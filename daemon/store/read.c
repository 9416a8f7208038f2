/*
 * Reading records back: the bytes of a chunk or a manifest segment, by id,
 * wherever its pack is. Worker threads locate the record in the database,
 * read it with one positioned read (one ranged GET on a remote backend),
 * open and check it, and leave what they decoded in the cache, where the
 * loop thread finds hot chunks without any job at all.
 *
 * Backends that cannot read from a worker thread (remote ones) are reached
 * through the bridge (bridge.c): the worker hands the read to the loop and
 * waits.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/store/cache.h"
#include "daemon/base/log.h"
#include "daemon/readcache/readcache.h"
#include "daemon/format/record.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* Chunks up to this size are checked on the loop thread when served from the cache. */
#define STORE_LOOP_CHECK_MAX (64u * 1024)

int store_read_pack(struct store *st, uint64_t seq, uint64_t off, void *buf, size_t len,
                    size_t *got, bool cached)
{
    char key[BACKEND_MAX_KEY];
    int r = db_pack_key(st->db, seq, key, sizeof(key));

    if (r < 0)
        return BACKEND_E_NOT_FOUND; /* a pack of a writer the database does not know */
    if (backend_has(st->be, BACKEND_CAP_READ_SYNC))
        return backend_read_sync(st->be, key, off, buf, len, got);
    if (cached && st->rcache)
        return readcache_read(st->rcache, seq, off, buf, len, got);
    return store_bridge_read(st, key, off, buf, len, got);
}

/* ---- records ---- */

/* Reads a whole record into buf (loc->len bytes): 0, RECORD_E_BAD, STORE_E_UNAVAILABLE or -errno.
 */
static int read_record_into(struct store *st, const struct db_loc *loc, bool cached, uint8_t *buf)
{
    size_t got = 0;
    int r = store_read_pack(st, loc->pack, loc->off, buf, loc->len, &got, cached);

    if (r == 0 && got != loc->len)
        r = RECORD_E_BAD;
    else if (r == BACKEND_E_NOT_FOUND || r == BACKEND_E_TOO_LARGE)
        r = RECORD_E_BAD;
    else if (r == BACKEND_E_UNAVAILABLE)
        r = STORE_E_UNAVAILABLE;
    return r;
}

int store_read_record(struct store *st, const struct db_loc *loc, bool cached, uint8_t **out)
{
    uint8_t *buf = malloc(loc->len ? loc->len : 1);
    int r;

    if (!buf)
        return -ENOMEM;
    if ((r = read_record_into(st, loc, cached, buf)) != 0) {
        free(buf);
        return r;
    }
    *out = buf;
    return 0;
}

/*
 * The buffers of a block read: a block and its decoded bytes are about 1 MiB
 * each, which malloc maps afresh every time (see daemon_new), and the page
 * faults of a fresh mapping cost more than reading and decoding into it. So
 * a few sets are kept for the next reads, from any thread: as many as a
 * large get and its read-ahead use at once. Reads beyond that many at once
 * get a set of their own, given back when done.
 */
#define BLOCK_KEEP_MAX (RECORD_BLOCK_MAX + 64 * 1024)
#define BLOCK_POOL_KEEP 3

struct block_buffers {
    struct block_buffers *next;
    uint8_t bytes[BLOCK_KEEP_MAX];
    uint8_t raw[RECORD_BLOCK_MAX];
};

static pthread_mutex_t block_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct block_buffers *block_pool;
static unsigned block_pool_n;

/* A set of buffers, or NULL when out of memory. */
static struct block_buffers *block_buffers_take(void)
{
    struct block_buffers *b;

    pthread_mutex_lock(&block_pool_lock);
    if ((b = block_pool)) {
        block_pool = b->next;
        block_pool_n--;
    }
    pthread_mutex_unlock(&block_pool_lock);
    return b ? b : malloc(sizeof(*b));
}

static void block_buffers_give(struct block_buffers *b)
{
    pthread_mutex_lock(&block_pool_lock);
    if (block_pool_n < BLOCK_POOL_KEEP) {
        b->next = block_pool;
        block_pool = b;
        block_pool_n++;
        b = NULL;
    }
    pthread_mutex_unlock(&block_pool_lock);
    free(b);
}

/*
 * A record read through the read cache failed its check: the cached copy may
 * be damaged in a way the page checks missed, or stale (a pack number used
 * again after a deletion). It goes, and the read is tried once more.
 */
static void drop_cached_copy(struct store *st, const struct db_loc *loc)
{
    log_warn("read cache: the cached copy of pack %016llx offset %llu fails its check; "
             "fetching it again",
             (unsigned long long)loc->pack, (unsigned long long)loc->off);
    readcache_drop(st->rcache, loc->pack, loc->off, loc->len);
}

static bool loc_equal(const struct db_loc *a, const struct db_loc *b)
{
    return a->pack == b->pack && a->off == b->off && a->len == b->len && a->sub == b->sub;
}

void store_chunk_release(struct store *st, const struct cache_buf *buf)
{
    cache_release(st->cache, buf);
}

/*
 * Whether cached bytes are the record `hash`: hashed the first time they are
 * handed out, then marked, so a chunk read again from memory is not hashed
 * again (cache.h).
 */
static bool cached_ok(const struct cache_buf *b, const uint8_t *hash)
{
    if (memcmp(b->hash, hash, PROTO_HASH_LEN) != 0)
        return false;
    if (cache_is_checked(b))
        return true;
    if (!record_hash_ok(b->data, b->len, hash))
        return false;
    cache_set_checked(b);
    return true;
}

static bool chunk_ok(const struct cache_buf *b, const uint8_t *hash, uint64_t size)
{
    return b->len == size && cached_ok(b, hash);
}

static bool chunk_at(const struct pack_block_chunk *c, const struct db_loc *loc,
                     const uint8_t *hash)
{
    return c->sub_off == loc->sub && memcmp(c->id, hash, PROTO_HASH_LEN) == 0;
}

static bool block_holds(const struct pack_block_chunk *chunks, uint32_t count,
                        const struct db_loc *loc, const uint8_t *hash)
{
    for (uint32_t i = 0; i < count; i++)
        if (chunk_at(&chunks[i], loc, hash))
            return true;
    return false;
}

/*
 * Decodes the block at `loc` and caches every chunk in it; keeps a
 * reference to the one wanted. A block holds neighbouring chunks of one
 * document, so the others are usually read next. With `check_all`, the
 * others are checked (and marked so) here too.
 */
static int decode_block(struct store *st, const struct db_loc *loc, const uint8_t *hash,
                        bool check_all, struct block_buffers *bb, const struct cache_buf **out)
{
    struct pack_block_chunk *chunks = NULL;
    uint8_t *own = NULL, *bytes, *raw = NULL;
    size_t raw_len;
    uint32_t count;
    int r;

    /* A block larger than any the store writes: read it anyway, for the checks to judge. */
    bytes = loc->len <= BLOCK_KEEP_MAX ? bb->bytes : (own = malloc(loc->len));
    if (!bytes)
        return -ENOMEM;
    for (bool again = st->rcache != NULL;; again = false) {
        if ((r = read_record_into(st, loc, true, bytes)) != 0)
            break;
        r = record_block_open_into(bytes, loc->len, &chunks, &count, bb->raw, &raw, &raw_len);
        /* An intact block without the chunk wanted there is as wrong as a damaged one. */
        if (r == 0 && !block_holds(chunks, count, loc, hash)) {
            free(chunks);
            chunks = NULL;
            r = RECORD_E_BAD;
        }
        if (r != RECORD_E_BAD || !again)
            break;
        drop_cached_copy(st, loc);
    }
    free(own);
    if (r != 0)
        return r;
    *out = NULL;
    for (uint32_t i = 0; i < count; i++) {
        bool wanted = !*out && chunk_at(&chunks[i], loc, hash);
        const struct cache_buf *b = cache_insert(st->cache, chunks[i].id, raw + chunks[i].sub_off,
                                                 chunks[i].size, wanted || check_all);
        if (wanted) {
            *out = b;
        } else if (b) {
            /* A chunk that fails its check is dropped; whoever wants it reads it again. */
            if (!cached_ok(b, chunks[i].id))
                cache_forget(st->cache, chunks[i].id);
            cache_release(st->cache, b);
        }
    }
    free(chunks);
    return *out ? 0 : RECORD_E_BAD;
}

/* ---- blocks being decoded ---- */

/* decoding_claim() without a slot: the table was full (the block is decoded untracked). */
#define DECODING_UNTRACKED (-1)
/* decoding_claim(): another worker is decoding the block (or was, when waited for). */
#define DECODING_BUSY (-2)
/* load_block(): passed over, another worker is decoding it. */
#define LOAD_SKIPPED 1

static bool decoding_is(const struct store_decoding *d, const struct db_loc *loc)
{
    return d->used && d->pack == loc->pack && d->off == loc->off;
}

static bool decoding_busy(const struct store *st, const struct db_loc *loc)
{
    for (unsigned i = 0; i < STORE_DECODING_MAX; i++)
        if (decoding_is(&st->decoding[i], loc))
            return true;
    return false;
}

/*
 * Claims the block at `loc` for this worker: its slot, or DECODING_UNTRACKED.
 * DECODING_BUSY when another worker is decoding it; with `wait`, that comes
 * once the other worker is done with it.
 */
static int decoding_claim(struct store *st, const struct db_loc *loc, bool wait)
{
    int slot = DECODING_UNTRACKED;

    pthread_mutex_lock(&st->decoding_lock);
    if (decoding_busy(st, loc)) {
        while (wait && decoding_busy(st, loc))
            pthread_cond_wait(&st->decoding_done, &st->decoding_lock);
        pthread_mutex_unlock(&st->decoding_lock);
        return DECODING_BUSY;
    }
    for (unsigned i = 0; i < STORE_DECODING_MAX; i++) {
        struct store_decoding *d = &st->decoding[i];
        if (!d->used) {
            *d = (struct store_decoding){loc->pack, loc->off, true};
            slot = (int)i;
            break;
        }
    }
    pthread_mutex_unlock(&st->decoding_lock);
    return slot;
}

static void decoding_release(struct store *st, int slot)
{
    if (slot < 0)
        return;
    pthread_mutex_lock(&st->decoding_lock);
    st->decoding[slot].used = false;
    pthread_cond_broadcast(&st->decoding_done);
    pthread_mutex_unlock(&st->decoding_lock);
}

/*
 * decode_block, unless another worker is decoding that block: then
 * LOAD_SKIPPED with `skip_busy`, else the chunk as that worker left it in
 * the cache once it is done (or, not there, decoded here after all).
 */
static int load_block(struct store *st, const struct db_loc *loc, const uint8_t *hash,
                      bool check_all, bool skip_busy, const struct cache_buf **out)
{
    for (;;) {
        int slot = decoding_claim(st, loc, !skip_busy), r;
        struct block_buffers *bb;

        if (slot == DECODING_BUSY) {
            if (skip_busy)
                return LOAD_SKIPPED;
            if ((*out = cache_lookup(st->cache, hash)))
                return 0;
            continue;
        }
        /* Decoded by another worker since the caller looked in the cache. */
        if ((*out = cache_peek(st->cache, hash))) {
            decoding_release(st, slot);
            return 0;
        }
        if (!(bb = block_buffers_take())) {
            decoding_release(st, slot);
            return -ENOMEM;
        }
        r = decode_block(st, loc, hash, check_all, bb, out);
        block_buffers_give(bb);
        decoding_release(st, slot);
        return r;
    }
}

static int load_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN], uint64_t size,
                      const struct cache_buf **out)
{
    char hex[PROTO_HASH_HEX + 1];
    struct db_loc loc, again;
    const struct cache_buf *b = cache_lookup(st->cache, hash);
    int r;

    if (b) {
        if (chunk_ok(b, hash, size)) {
            *out = b;
            return 0;
        }
        cache_release(st->cache, b);
        cache_forget(st->cache, hash);
    }
    r = db_chunk_find(st->db, hash, &loc);
    for (int attempt = 0; r == 0 && attempt < 2; attempt++) {
        r = load_block(st, &loc, hash, false, false, &b);
        if (r != RECORD_E_BAD)
            break;
        /* A repack may have moved it between the lookup and the read: look once more. */
        if (attempt == 0 && db_chunk_find(st->db, hash, &again) == 0 && !loc_equal(&loc, &again)) {
            loc = again;
            r = 0;
            continue;
        }
    }
    proto_hex_encode(hash, PROTO_HASH_LEN, hex);
    if (r == DB_E_NOT_FOUND) {
        log_error("integrity: chunk %s is missing", hex);
        return STORE_E_INTEGRITY;
    }
    if (r == RECORD_E_BAD) {
        log_error("integrity: the record of chunk %s (pack %016llx offset %llu) is damaged", hex,
                  (unsigned long long)loc.pack, (unsigned long long)loc.off);
        return STORE_E_INTEGRITY;
    }
    if (r != 0)
        return r;
    if (!chunk_ok(b, hash, size)) {
        log_error("integrity: chunk %s fails its check", hex);
        cache_release(st->cache, b);
        cache_forget(st->cache, hash);
        return STORE_E_INTEGRITY;
    }
    *out = b;
    return 0;
}

int store_load_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN], uint64_t size,
                     const struct cache_buf **out)
{
    return load_chunk(st, hash, size, out);
}

int store_check_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN], uint64_t size)
{
    const struct cache_buf *b;
    int r = load_chunk(st, hash, size, &b);

    if (r == 0)
        cache_release(st->cache, b);
    return r;
}

int store_prefetch_next(struct store *st, const struct manifest_entry *chunks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct cache_buf *b = cache_peek(st->cache, chunks[i].hash);
        struct db_loc loc;
        int r;

        if (b) {
            cache_release(st->cache, b);
            continue;
        }
        if (db_chunk_find(st->db, chunks[i].hash, &loc) != 0)
            return 0;
        r = load_block(st, &loc, chunks[i].hash, true, true, &b);
        if (r == LOAD_SKIPPED)
            continue;
        if (r == 0) {
            /* A chunk that fails its check is dropped; the reader reads it again. */
            if (!chunk_ok(b, chunks[i].hash, chunks[i].bytes))
                cache_forget(st->cache, chunks[i].hash);
            cache_release(st->cache, b);
        }
        return 0;
    }
    return 0;
}

int store_load_segment(struct store *st, const uint8_t hash[PROTO_HASH_LEN], bool from_disk,
                       const struct cache_buf **out)
{
    char hex[PROTO_HASH_HEX + 1];
    const struct cache_buf *b = from_disk ? NULL : cache_lookup(st->cache, hash);
    struct db_loc loc;
    uint8_t *bytes, *raw;
    size_t raw_len;
    int r;

    if (b) {
        if (cached_ok(b, hash)) {
            *out = b;
            return 0;
        }
        cache_release(st->cache, b);
        cache_forget(st->cache, hash);
    }
    proto_hex_encode(hash, PROTO_HASH_LEN, hex);
    r = db_segment_find(st->db, hash, &loc);
    for (bool again = st->rcache != NULL && !from_disk; r == 0; again = false) {
        if ((r = store_read_record(st, &loc, !from_disk, &bytes)) != 0)
            break;
        r = record_seal_open(bytes, loc.len, PACK_REC_MANIFEST, hash, MANIFEST_MAX_SEGMENT, &raw,
                             &raw_len);
        free(bytes);
        if (r != RECORD_E_BAD || !again)
            break;
        drop_cached_copy(st, &loc);
        r = 0;
    }
    if (r == DB_E_NOT_FOUND || r == RECORD_E_BAD) {
        log_error("integrity: manifest segment %s is %s", hex,
                  r == DB_E_NOT_FOUND ? "missing" : "damaged");
        return STORE_E_INTEGRITY;
    }
    if (r != 0)
        return r;
    b = cache_insert(st->cache, hash, raw, raw_len, true);
    free(raw);
    if (!b)
        return -ENOMEM;
    *out = b;
    return 0;
}

const struct cache_buf *store_cached_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN],
                                           uint64_t size)
{
    const struct cache_buf *b = cache_lookup(st->cache, hash);

    if (!b)
        return NULL;
    /*
     * A cache entry is a claim until checked: checked before anything is
     * sent. One checked already (by the read-ahead that decoded it) costs
     * nothing here whatever its size; a large one not checked yet is left
     * to a worker, to keep its hashing off the loop thread.
     */
    if (!cache_is_checked(b) && size > STORE_LOOP_CHECK_MAX) {
        cache_release(st->cache, b);
        return NULL;
    }
    if (chunk_ok(b, hash, size))
        return b;
    cache_release(st->cache, b);
    cache_forget(st->cache, hash);
    return NULL;
}

/* ---- walking manifests from workers ---- */

int store_walk_manifest(struct store *st, unsigned depth, const uint8_t *root, size_t root_len,
                        unsigned flags, store_chunk_fn *fn, void *ctx)
{
    struct manifest_cursor cur;
    struct manifest_entry e;
    uint8_t want[PROTO_HASH_LEN];
    int r = manifest_cursor_init(&cur, depth, root, root_len);

    if (r != 0)
        return r == MANIFEST_E_CORRUPT ? STORE_E_INTEGRITY : r;
    for (;;) {
        r = manifest_cursor_next(&cur, &e, want);
        if (r == MANIFEST_E_END) {
            r = 0;
            break;
        }
        if (r == MANIFEST_E_NEED) {
            const struct cache_buf *seg;
            if (flags & STORE_WALK_SEGMENTS) {
                struct manifest_entry s = {.bytes = 0};
                memcpy(s.hash, want, PROTO_HASH_LEN);
                if ((r = fn(ctx, &s)) != 0)
                    break;
            }
            if ((r = store_load_segment(st, want, flags & STORE_WALK_DISK, &seg)) != 0)
                break;
            r = manifest_cursor_feed(&cur, seg->data, seg->len);
            cache_release(st->cache, seg);
            if (r != 0) {
                r = r == MANIFEST_E_CORRUPT ? STORE_E_INTEGRITY : r;
                break;
            }
            continue;
        }
        if ((r = fn(ctx, &e)) != 0)
            break;
    }
    manifest_cursor_clear(&cur);
    return r;
}

struct prefix_ctx {
    struct store *st;
    char *buf;
    size_t len, max, cap;
};

static int prefix_chunk(void *ctx, const struct manifest_entry *chunk)
{
    struct prefix_ctx *p = ctx;
    const struct cache_buf *b;
    int r;

    if (p->len >= p->max)
        return 1; /* enough */
    if ((r = store_load_chunk(p->st, chunk->hash, chunk->bytes, &b)) != 0)
        return r;
    size_t n = b->len < p->max - p->len ? b->len : p->max - p->len;
    /*
     * The buffer grows with what is read, never to `max` at once: the
     * indexer asks for up to 16 MiB of every document, and most are small
     * (a 16 MiB allocation per document cost a rebuild minutes of page
     * faults with MALLOC_PERTURB_).
     */
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 4096;
        if (cap < p->len + n + 1)
            cap = p->len + n + 1;
        if (cap > p->max + 1)
            cap = p->max + 1;
        char *grown = realloc(p->buf, cap);
        if (!grown) {
            cache_release(p->st->cache, b);
            return -ENOMEM;
        }
        p->buf = grown;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, b->data, n);
    p->len += n;
    cache_release(p->st->cache, b);
    return 0;
}

int store_read_prefix(struct store *st, unsigned depth, const uint8_t *root, size_t root_len,
                      size_t max, char **out, size_t *len)
{
    struct prefix_ctx p = {st, NULL, 0, max, 0};
    int r;

    if (max == SIZE_MAX)
        return -EINVAL;
    r = store_walk_manifest(st, depth, root, root_len, 0, prefix_chunk, &p);
    if (r < 0 || (r > 0 && r != 1)) {
        free(p.buf);
        return r;
    }
    if (!p.buf && !(p.buf = malloc(1)))
        return -ENOMEM;
    p.buf[p.len] = '\0';
    *out = p.buf;
    *len = p.len;
    return 0;
}
