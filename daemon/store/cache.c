#include "daemon/store/cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "proto/util.h"

struct cache_entry {
    struct cache_buf buf;
    struct cache_entry *hnext;       /* hash chain */
    struct cache_entry *prev, *next; /* LRU list, most recent first */
    unsigned refs;
    bool linked;         /* in the table and the list; else freed at the last release */
    atomic_bool checked; /* the bytes were hashed and match the id (cache_set_checked) */
    uint8_t data[];
};

struct cache {
    pthread_mutex_t lock;
    struct cache_entry **buckets;
    size_t nbuckets; /* a power of two */
    struct cache_entry *head, *tail;
    size_t bytes, max_bytes, count;
    struct cache_stats stats;
};

/* What an entry costs against the budget: its bytes and its bookkeeping. */
static size_t entry_cost(size_t len)
{
    /* The allocator's header and the entry's share of the hash table count too. */
    return len + sizeof(struct cache_entry) + 2 * sizeof(void *) + 16;
}

static size_t bucket_of(const struct cache *c, const uint8_t *hash)
{
    uint64_t h;
    memcpy(&h, hash, sizeof(h)); /* ids are SHA-256: already uniform */
    return (size_t)h & (c->nbuckets - 1);
}

int cache_new(struct cache **out, size_t max_bytes)
{
    struct cache *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    c->nbuckets = 1024;
    c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
    if (!c->buckets) {
        free(c);
        return -ENOMEM;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->max_bytes = max_bytes;
    c->stats.max_bytes = max_bytes;
    *out = c;
    return 0;
}

struct cache *cache_free(struct cache *c)
{
    if (!c)
        return NULL;
    for (struct cache_entry *e = c->head, *next; e; e = next) {
        next = e->next;
        free(e); /* every reference is given back before the cache goes */
    }
    free(c->buckets);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return NULL;
}

static struct cache_entry *find(struct cache *c, const uint8_t *hash)
{
    for (struct cache_entry *e = c->buckets[bucket_of(c, hash)]; e; e = e->hnext) {
        if (memcmp(e->buf.hash, hash, PROTO_HASH_LEN) == 0)
            return e;
    }
    return NULL;
}

static void list_unlink(struct cache *c, struct cache_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_push_front(struct cache *c, struct cache_entry *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

/* Takes an entry out of the table and the list; it is freed now or at its last release. */
static void detach(struct cache *c, struct cache_entry *e)
{
    struct cache_entry **pp = &c->buckets[bucket_of(c, e->buf.hash)];

    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    list_unlink(c, e);
    e->linked = false;
    c->bytes -= entry_cost(e->buf.len);
    c->count--;
    if (e->refs == 0)
        free(e);
}

static void grow(struct cache *c)
{
    size_t n = c->nbuckets * 2;
    struct cache_entry **b = calloc(n, sizeof(*b));

    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < c->nbuckets; i++) {
        for (struct cache_entry *e = c->buckets[i], *next; e; e = next) {
            next = e->hnext;
            uint64_t h;
            memcpy(&h, e->buf.hash, sizeof(h));
            size_t k = (size_t)h & (n - 1);
            e->hnext = b[k];
            b[k] = e;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->nbuckets = n;
}

static const struct cache_buf *lookup(struct cache *c, const uint8_t *hash, bool count)
{
    struct cache_entry *e;

    pthread_mutex_lock(&c->lock);
    e = c->max_bytes ? find(c, hash) : NULL;
    if (e) {
        e->refs++;
        list_unlink(c, e);
        list_push_front(c, e);
    }
    if (count) {
        if (e)
            c->stats.hits++;
        else
            c->stats.misses++;
    }
    pthread_mutex_unlock(&c->lock);
    return e ? &e->buf : NULL;
}

static struct cache_entry *entry_of(const struct cache_buf *buf)
{
    return (struct cache_entry *)((char *)(uintptr_t)buf - offsetof(struct cache_entry, buf));
}

bool cache_is_checked(const struct cache_buf *buf)
{
    return atomic_load_explicit(&entry_of(buf)->checked, memory_order_acquire);
}

void cache_set_checked(const struct cache_buf *buf)
{
    atomic_store_explicit(&entry_of(buf)->checked, true, memory_order_release);
}

const struct cache_buf *cache_lookup(struct cache *c, const uint8_t hash[PROTO_HASH_LEN])
{
    return lookup(c, hash, true);
}

const struct cache_buf *cache_peek(struct cache *c, const uint8_t hash[PROTO_HASH_LEN])
{
    return lookup(c, hash, false);
}

const struct cache_buf *cache_insert(struct cache *c, const uint8_t hash[PROTO_HASH_LEN],
                                     const uint8_t *data, size_t len, bool keep)
{
    struct cache_entry *e, *old;
    bool fits = c->max_bytes > 0 && entry_cost(len) <= c->max_bytes;

    if (!fits && !keep)
        return NULL;
    /* Copy outside the lock: the bytes may be a whole chunk. */
    e = malloc(sizeof(*e) + (len ? len : 1));
    if (!e)
        return NULL;
    memcpy(e->buf.hash, hash, PROTO_HASH_LEN);
    memcpy(e->data, data, len);
    e->buf.data = e->data;
    e->buf.len = len;
    e->refs = keep ? 1 : 0;
    e->linked = fits;
    atomic_init(&e->checked, false);
    if (!fits)
        return &e->buf; /* not kept: the caller's alone, freed at its release */
    pthread_mutex_lock(&c->lock);
    old = find(c, hash);
    if (old) {
        if (keep) {
            old->refs++;
            list_unlink(c, old);
            list_push_front(c, old);
        }
        pthread_mutex_unlock(&c->lock);
        free(e);
        return keep ? &old->buf : NULL;
    }
    if (c->count >= c->nbuckets)
        grow(c);
    size_t k = bucket_of(c, hash);
    e->hnext = c->buckets[k];
    c->buckets[k] = e;
    list_push_front(c, e);
    c->bytes += entry_cost(len);
    c->count++;
    c->stats.insertions++;
    while (c->bytes > c->max_bytes && c->tail && c->tail != e) {
        detach(c, c->tail);
        c->stats.evictions++;
    }
    pthread_mutex_unlock(&c->lock);
    return keep ? &e->buf : NULL;
}

void cache_forget(struct cache *c, const uint8_t hash[PROTO_HASH_LEN])
{
    struct cache_entry *e;

    if (c->max_bytes == 0)
        return;
    pthread_mutex_lock(&c->lock);
    if ((e = find(c, hash)))
        detach(c, e);
    pthread_mutex_unlock(&c->lock);
}

void cache_release(struct cache *c, const struct cache_buf *buf)
{
    struct cache_entry *e;

    if (!buf)
        return;
    e = container_of(buf, struct cache_entry, buf);
    pthread_mutex_lock(&c->lock);
    if (--e->refs == 0 && !e->linked)
        free(e);
    pthread_mutex_unlock(&c->lock);
}

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    out->bytes = c->bytes;
    out->entries = c->count;
    pthread_mutex_unlock(&c->lock);
}
