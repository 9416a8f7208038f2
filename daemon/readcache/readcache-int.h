#pragma once

/*
 * What the read cache's files share: the cache's state and its table of
 * slices (readcache-table.c), fetches (readcache-fetch.c), and the slice
 * files (readcache-file.c). Not for use outside daemon/readcache.
 *
 * A slice file is named "<pack, 16 hex digits>-<slice, 8 hex digits>" and
 * holds a header of READCACHE_HEADER bytes, then the slice's bytes. The
 * header (little-endian): the magic "CAIRNRC1", the pack (8 bytes), the
 * slice (4), the length of the bytes (4), the CRC-32C of each
 * READCACHE_PAGE of them (4 each, READCACHE_PAGES of them, unused ones 0),
 * and the CRC-32C of all that (4). Half-written files end in ".tmp".
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <pthread.h>

#include <uv.h>

#include "daemon/readcache/readcache.h"
#include "storage/backend.h"

#define READCACHE_HEADER 4096u
#define READCACHE_PAGES (READCACHE_SLICE / READCACHE_PAGE)
/* "<16 hex>-<8 hex>.tmp" and its NUL. */
#define READCACHE_NAME_MAX 32

/* Expected outcomes of reading a slice file besides 0. */
enum {
    READCACHE_E_GONE = 1, /* no such file (evicted meanwhile) */
    READCACHE_E_BAD,      /* a check failed: the file is damaged */
};

void readcache_file_name(char out[READCACHE_NAME_MAX], uint64_t pack, uint32_t slice);

/*
 * Writes a slice file (to a ".tmp" name, then renamed: a reader sees the
 * whole file or none) and fills crc[] with its pages' checksums. Nothing is
 * synced: a file torn by a crash fails its checks and is fetched again.
 * 0 or negative errno.
 */
int readcache_file_write(int dirfd, uint64_t pack, uint32_t slice, const uint8_t *data,
                         uint32_t len, uint32_t crc[READCACHE_PAGES]);

/*
 * Reads [in, in + want) of a slice's bytes (less when the slice is shorter)
 * into buf, checking every page it touches. `crc` holds the pages' checksums
 * when `*have_crc`; otherwise the header is read and checked first, and crc,
 * *len and *have_crc are filled from it. When `touch`, the file's
 * modification time is set to now (its last use, for the next start).
 * 0 with *n, READCACHE_E_GONE, READCACHE_E_BAD, or negative errno.
 */
int readcache_file_read(int dirfd, uint64_t pack, uint32_t slice, uint32_t crc[READCACHE_PAGES],
                        bool *have_crc, uint32_t *len, uint32_t in, void *buf, size_t want,
                        size_t *n, bool touch);

/* A slice file found by readcache_file_scan. */
struct readcache_found {
    uint64_t pack;
    uint32_t slice, len;
    struct timespec used;
};

/*
 * The slice files in the directory, in no order (malloc'd array); removes
 * half-written ones and files too short for a header. 0 or negative errno.
 */
int readcache_file_scan(int dirfd, struct readcache_found **out, size_t *n);

/* ---- the cache and its table (readcache-table.c); the caller holds rc->lock ---- */

/* Recently asked pack sizes, so a sequential reader does not ask the database at every slice. */
#define SIZES 64

enum rc_state { RC_FETCHING, RC_LOADED, RC_ON_DISK, RC_FAILED };

struct rc_fetch;

struct rc_entry {
    uint64_t pack;
    uint32_t slice;
    uint32_t len; /* the slice's bytes (expected while FETCHING) */
    enum rc_state state;
    bool in_table;
    int status;    /* a failed fetch's outcome, for its waiters */
    unsigned refs; /* readers holding the entry */
    uint8_t *mem;  /* LOADED: the bytes */
    struct rc_fetch *fetch;
    bool have_crc;
    uint32_t crc[READCACHE_PAGES];
    time_t touched; /* when its file's time was last set */
    struct rc_entry *hnext;
    struct rc_entry *lprev, *lnext;
};

/* One fetch of a slice and then its write to disk. */
struct rc_fetch {
    struct backend_get get;
    uv_work_t work;
    struct readcache *rc;
    struct rc_entry *e;
    int write_status;
    struct rc_fetch *next;
};

struct readcache {
    uv_loop_t *loop;
    struct backend *be;
    readcache_size_fn *pack_size;
    readcache_key_fn *pack_key;
    void *ctx;
    int dirfd;
    uint64_t max_bytes;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct rc_entry **buckets;
    size_t nbuckets;
    /* ON_DISK entries, most recently used first. */
    struct rc_entry *lru_head, *lru_tail;
    /* Fetches for the loop to start, in the order asked. */
    struct rc_fetch *queue, *queue_tail;
    unsigned inflight; /* fetches alive (fetching, or loaded and not yet written) */
    unsigned jobs;     /* loop thread: backend requests and write jobs running */
    struct {
        uint64_t pack, size;
    } sizes[SIZES];
    unsigned sizes_next;
    struct readcache_stats stats;
    time_t warned;
    uv_async_t async;
};

struct rc_entry *rc_lookup(struct readcache *rc, uint64_t pack, uint32_t slice);
void rc_insert(struct readcache *rc, struct rc_entry *e);
/* Takes an entry out of the table (and the LRU list, and the byte count, when on disk). */
void rc_remove_entry(struct readcache *rc, struct rc_entry *e);
/* Frees an entry nobody uses any more. */
void rc_settle(struct rc_entry *e);
void rc_lru_unlink(struct readcache *rc, struct rc_entry *e);
void rc_lru_front(struct readcache *rc, struct rc_entry *e);
/* The bytes of a slice are on disk and nobody copies from memory: the memory goes. */
void rc_drop_mem(struct rc_entry *e);
void rc_unlink_slice(struct readcache *rc, uint64_t pack, uint32_t slice);

/* ---- fetches (readcache-fetch.c) ---- */

/*
 * A new entry for a slice of `len` bytes, FETCHING, with its fetch queued
 * for the loop (the caller sends the wake-up). Under the lock; NULL when out
 * of memory.
 */
struct rc_entry *rc_start_fetch(struct readcache *rc, uint64_t pack, uint32_t slice, uint32_t len);
/* The loop side: starts the fetches queued (rc->async). */
void rc_on_async(uv_async_t *h);
