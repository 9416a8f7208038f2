#pragma once

/*
 * The read cache: a local copy of what was read from a remote backend (S3,
 * R2, SFTP), so that reading a document again costs no request. It keeps
 * packs in slices of READCACHE_SLICE bytes, one file each in its directory,
 * bounded in bytes, least recently used out first, and kept across restarts.
 *
 * A slice file carries a checksum of every READCACHE_PAGE of its bytes and
 * every read checks the pages it returns: a damaged or torn file (nothing
 * here is ever synced) is dropped and fetched again, never returned. The
 * records read from it are checked again by their readers, as records from
 * the backend are. The cache is never the store: removing its directory
 * loses nothing.
 *
 * Sequential reads fetch ahead: a read of a slice whose predecessor was read
 * before starts fetches of the next READCACHE_AHEAD slices (across into the
 * next pack when a pack ends, since a large document's data goes to packs
 * numbered one after the other), so a cold read of a large document keeps
 * several ranged GETs in flight and is limited by bandwidth, not by round
 * trips.
 *
 * Reads block and come from worker threads; fetches start and complete on
 * the loop thread; slices are written to disk by worker jobs.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct backend;
struct readcache;

#define READCACHE_SLICE (1024u * 1024)
#define READCACHE_PAGE (64u * 1024)
/* Slices fetched ahead of a sequential reader. */
#define READCACHE_AHEAD 16
/* Slices fetched and not yet on disk, at most (read-ahead stops there): the memory bound. */
#define READCACHE_MAX_INFLIGHT 32
/* The smallest bound accepted: a few slices. */
#define READCACHE_MIN_BYTES (8ull * READCACHE_SLICE)
/* The default bound: this share of the free space, at most READCACHE_DEFAULT_MAX. */
#define READCACHE_DEFAULT_PERCENT 10
#define READCACHE_DEFAULT_MAX (10ull << 30)

/* How far a pack's records go: 0, -ENOENT for an unknown pack, or negative errno. Any thread. */
typedef int readcache_size_fn(void *ctx, uint64_t pack, uint64_t *size);
/* The backend key of a pack: 0, or -ENOENT for an unknown pack. Any thread. */
typedef int readcache_key_fn(void *ctx, uint64_t pack, char *key, size_t len);

struct readcache_stats {
    uint64_t bytes, max_bytes, slices;
    uint64_t hits;    /* slices read from the cache */
    uint64_t misses;  /* slices a read had to wait for from the backend */
    uint64_t fetched; /* bytes read from the backend, read-ahead included */
    uint64_t damaged; /* slice files that failed their check (fetched again) */
    uint64_t evictions;
};

/*
 * Opens (creating it, mode 0700) the cache directory and takes stock of the
 * slices a previous run left, oldest use first; removes half-written ones and
 * evicts down to max_bytes. Synchronous, before the loop serves. 0 or
 * negative errno, with *msg saying what failed.
 */
int readcache_new(struct readcache **out, uv_loop_t *loop, struct backend *be, const char *dir,
                  uint64_t max_bytes, readcache_size_fn *pack_size, readcache_key_fn *pack_key,
                  void *ctx, const char **msg);
/*
 * Only when readcache_busy() is false. Its handle closes asynchronously: the
 * memory goes in the close callback, so the caller runs the loop afterwards.
 * Returns NULL.
 */
struct readcache *readcache_free(struct readcache *rc);
/* Loop thread: fetches or slice writes still running. */
bool readcache_busy(struct readcache *rc);

/*
 * Worker threads: reads up to `len` bytes at `off` of a pack, blocking, from
 * the cache or else from the backend (and keeps them). 0 with *got (short
 * only at the end of the pack), BACKEND_E_NOT_FOUND when the database knows
 * no such pack, a backend's BACKEND_E_* of the fetch, or negative errno.
 */
int readcache_read(struct readcache *rc, uint64_t pack, uint64_t off, void *buf, size_t len,
                   size_t *got);
/*
 * Any thread: forgets the slices that hold [off, off + len) of a pack, so the
 * next read fetches them again (a record read through the cache failed its
 * check: the copy may be damaged past the page checks, or stale).
 */
void readcache_drop(struct readcache *rc, uint64_t pack, uint64_t off, uint64_t len);
/* Loop thread: forgets every slice of a pack (it was deleted; its number may come back). */
void readcache_forget_pack(struct readcache *rc, uint64_t pack);
/*
 * Loop thread, at start after the replay: forgets the slices of every pack
 * the database does not know (deleted while a crash kept its slices).
 */
void readcache_forget_unknown(struct readcache *rc);
void readcache_get_stats(struct readcache *rc, struct readcache_stats *out);

/*
 * Empties the cache directory `dir` of slices (blocking; when no cache is
 * open on it): when the database is made anew, its pack numbers may stand
 * for other packs. 0 or negative errno; a missing directory is empty.
 */
int readcache_clear(const char *dir);

/*
 * The bound when the configuration leaves it out: READCACHE_DEFAULT_PERCENT
 * of the free space of the file system holding `dir` (or its nearest
 * existing parent), at most READCACHE_DEFAULT_MAX, at least
 * READCACHE_MIN_BYTES.
 */
uint64_t readcache_default_size(const char *dir);
