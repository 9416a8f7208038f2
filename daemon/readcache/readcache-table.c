/*
 * The read cache's table of slices (readcache-int.h): a hash table of
 * entries and the LRU list of those on disk. The caller holds the cache's
 * lock.
 */
#include <stdlib.h>
#include <unistd.h>

#include "daemon/readcache/readcache-int.h"

static size_t bucket_of(const struct readcache *rc, uint64_t pack, uint32_t slice)
{
    uint64_t h = (pack * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)slice * 0xC2B2AE3D27D4EB4Full);
    return (size_t)(h ^ (h >> 29)) & (rc->nbuckets - 1);
}

struct rc_entry *rc_lookup(struct readcache *rc, uint64_t pack, uint32_t slice)
{
    for (struct rc_entry *e = rc->buckets[bucket_of(rc, pack, slice)]; e; e = e->hnext)
        if (e->pack == pack && e->slice == slice)
            return e;
    return NULL;
}

void rc_lru_unlink(struct readcache *rc, struct rc_entry *e)
{
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        rc->lru_head = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    else
        rc->lru_tail = e->lprev;
    e->lprev = e->lnext = NULL;
}

void rc_lru_front(struct readcache *rc, struct rc_entry *e)
{
    e->lprev = NULL;
    e->lnext = rc->lru_head;
    if (rc->lru_head)
        rc->lru_head->lprev = e;
    else
        rc->lru_tail = e;
    rc->lru_head = e;
}

void rc_insert(struct readcache *rc, struct rc_entry *e)
{
    size_t b = bucket_of(rc, e->pack, e->slice);

    e->hnext = rc->buckets[b];
    rc->buckets[b] = e;
    e->in_table = true;
}

/* Frees an entry nobody uses any more. */
void rc_settle(struct rc_entry *e)
{
    if (e->in_table || e->refs > 0 || e->fetch)
        return;
    free(e->mem);
    free(e);
}

/* Takes an entry out of the table (and the LRU list, and the byte count, when on disk). */
void rc_remove_entry(struct readcache *rc, struct rc_entry *e)
{
    struct rc_entry **p = &rc->buckets[bucket_of(rc, e->pack, e->slice)];

    if (!e->in_table)
        return;
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    e->hnext = NULL;
    e->in_table = false;
    if (e->state == RC_ON_DISK) {
        rc_lru_unlink(rc, e);
        rc->stats.bytes -= READCACHE_HEADER + e->len;
        rc->stats.slices--;
    }
}

/* The bytes of a slice are on disk and nobody copies from memory: the memory goes. */
void rc_drop_mem(struct rc_entry *e)
{
    if (e->state == RC_ON_DISK && e->refs == 0 && e->mem) {
        free(e->mem);
        e->mem = NULL;
    }
}

void rc_unlink_slice(struct readcache *rc, uint64_t pack, uint32_t slice)
{
    char name[READCACHE_NAME_MAX];

    readcache_file_name(name, pack, slice);
    unlinkat(rc->dirfd, name, 0);
}
