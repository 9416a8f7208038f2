#pragma once

/*
 * The local backend's cache of read-only file descriptors, shared by every
 * read: gets on the threadpool, read_sync on the caller's worker threads and
 * try_read on the loop thread. Opening a file costs a path lookup and a
 * system call per read otherwise, and try_read may not open files at all
 * (it must never block the loop), so it can only serve what is cached here.
 *
 * The cache holds at most LOCAL_FDCACHE_SIZE descriptors and evicts the one
 * used least recently. Entries are reference-counted: an evicted or dropped
 * descriptor is closed only when its last reader releases it. The lock is
 * held for table lookups only, never across a system call other than the
 * rare close() of a descriptor whose last user it was.
 */

#include "storage/backend.h"

#include <stdint.h>

#define LOCAL_FDCACHE_SIZE 64

struct local_fd {
    int fd;
    unsigned refs; /* under the cache's lock */
};

struct local_fdcache_slot {
    struct local_fd *file; /* NULL: free */
    uint64_t hash;
    uint64_t last_use;
    char key[BACKEND_MAX_KEY];
};

struct local_fdcache {
    uv_mutex_t lock;
    uint64_t clock; /* advances on every use, for the LRU order */
    /*
     * Advances on every drop. An open that began before a drop may have
     * found the file the drop was about, so it is not cached.
     */
    uint64_t drops;
    struct local_fdcache_slot slots[LOCAL_FDCACHE_SIZE];
};

int local_fdcache_init(struct local_fdcache *c);
/* Closes every cached descriptor; nobody may hold one any more. */
void local_fdcache_deinit(struct local_fdcache *c);

/* The cached descriptor of `key` with a reference for the caller, or NULL. Never opens. */
struct local_fd *local_fdcache_lookup(struct local_fdcache *c, const char *key);
/*
 * The descriptor of `key` (a path relative to root_fd), opened and cached on
 * a miss, with a reference for the caller. 0, BACKEND_E_NOT_FOUND or -errno.
 */
int local_fdcache_open(struct local_fdcache *c, int root_fd, const char *key,
                       struct local_fd **out);
/* Gives back a reference from lookup or open. */
void local_fdcache_release(struct local_fdcache *c, struct local_fd *file);
/*
 * Forgets `key` after its file was unlinked or replaced, so that no later
 * read is served from the old file.
 */
void local_fdcache_drop(struct local_fdcache *c, const char *key);
