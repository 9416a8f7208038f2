#pragma once

/*
 * What the store's files share (store.c: the store and its operations
 * registry; read.c: reading records back; get.c; add.c; delete.c; gc.c and
 * repack.c; verify.c; replay.c: recovery and rebuild; upgrade.c). Not for
 * use outside the store.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "compress/cdc.h"
#include "daemon/meta/db.h"
#include "daemon/format/manifest.h"
#include "daemon/store/store.h"

struct cache;
struct cache_buf;
struct packer;
struct refcache;
struct indexer;
struct store_gc;

/*
 * A running operation that reads or references stored records: adds, gets
 * and scrubs. Each gets a sequence number when it starts; gc reclaims a
 * record only when every operation that could have seen it alive has ended
 * (store_oldest_op), and deletes a repacked pack only when every operation
 * that could still read it has ended. A get also lends gc its manifest, so
 * the chunks it is streaming stay alive even if its document is deleted.
 */
struct store_op {
    uint64_t seq;
    struct store_op *prev, *next;
    /* Gets: the manifest being read (borrowed from the get). */
    unsigned depth;
    const uint8_t *root;
    size_t root_len;
};

/* A blocking read handed from a worker thread to the loop (backends without READ_SYNC). */
struct store_bridge_req;

/* A gc run's number and the first operation that did not predate its condemnations. */
struct store_gc_barrier {
    uint64_t gen, barrier;
};

struct store {
    uv_loop_t *loop;
    struct backend *be;
    struct db *db;
    struct store_config cfg;
    struct cdc cdc;
    struct packer *packer;
    struct cache *cache;
    struct readcache *rcache; /* remote backends: pack slices kept on local disk */
    struct refcache *refs;
    struct indexer *indexer;
    unsigned active;
    /* Running operations, oldest first. */
    struct store_op *ops_head, *ops_tail;
    uint64_t next_op_seq;
    struct store_gc *gc;
    /* gc runs up to this one are safe: of earlier lives of the daemon, or their barriers passed. */
    uint64_t gc_safe_gen;
    struct store_gc_barrier *gc_barriers;
    size_t ngc_barriers;
    /* Repacked packs waiting for their readers to end before deletion. */
    struct store_reap *reaping;
    uint64_t last_entry_ns; /* replay starts it at the newest entry in the packs */
    char replay_summary[512];
    /* Worker-to-loop reads. */
    uv_async_t bridge_async;
    pthread_mutex_t bridge_lock;
    struct store_bridge_req *bridge_queue;
    bool bridge_open;
};

void store_op_begin(struct store *st, struct store_op *op);
void store_op_end(struct store *st, struct store_op *op);
/* Sequence number of the oldest running operation, or the next one when none runs. */
uint64_t store_oldest_op(const struct store *st);
/* gc.c: the oldest running operation ended; gc may be waiting for that. */
void store_gc_ops_ended(struct store *st);

/*
 * repack.c: rewrites or deletes the packs that are mostly dead, counting rows
 * condemned by runs up to safe_gen as dead; adds to *res and calls cb once
 * every chosen pack is done.
 */
typedef void store_repack_cb(void *ctx, int status);
void store_repack(struct store *st, uint64_t safe_gen, struct store_gc_result *res,
                  store_repack_cb *cb, void *ctx);
/* Deletes repacked packs no running operation can read any more. */
void store_reap(struct store *st);

/* A journal time (ns since the epoch) later than every one handed out before. */
uint64_t store_entry_time(struct store *st);
struct entry;
struct packer_rec;
/* Encodes a journal entry as a sealed PACK_REC_ENTRY record in *rec (worker threads). */
int store_entry_record(struct store *st, const struct entry *e, struct packer_rec *rec);

/* Maps a backend read status to the store's codes. */
int store_map_read_status(int status);

/* ---- reading records back (read.c); worker threads unless said otherwise ---- */

/*
 * Reads `len` bytes at `off` of pack `seq` into buf, blocking: directly when
 * the backend can (BACKEND_CAP_READ_SYNC), else through the read cache when
 * `cached` and there is one, else through the loop. 0 with *got,
 * BACKEND_E_*, or negative errno. Reads that must see the backend itself
 * (verify, recovery) or would only crowd the cache (repack) pass false.
 */
int store_read_pack(struct store *st, uint64_t seq, uint64_t off, void *buf, size_t len,
                    size_t *got, bool cached);

/*
 * A chunk's bytes, checked against its id: from the cache, else read from its
 * pack (the whole block is decoded and its chunks cached). 0 with a cache
 * reference (release with store_chunk_release), STORE_E_INTEGRITY when it
 * is missing or damaged, or negative errno.
 */
int store_load_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN], uint64_t size,
                     const struct cache_buf **out);
void store_chunk_release(struct store *st, const struct cache_buf *buf);
/*
 * Read-ahead: store_load_chunk without the reference, and when the block is
 * read, every chunk of it checked (and marked so) on this worker, so the
 * loop thread hands them out without hashing them. Only for sequential
 * reads: a ranged read wants one chunk of a block, not all of them hashed.
 */
int store_prefetch_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN], uint64_t size);
/* A manifest segment's raw bytes, checked against its id: same outcomes. */
int store_load_segment(struct store *st, const uint8_t hash[PROTO_HASH_LEN], bool from_disk,
                       const struct cache_buf **out);
/* Loop thread: a cached chunk, checked, or NULL (not cached, or damaged and dropped). */
const struct cache_buf *store_cached_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN],
                                           uint64_t size);

/*
 * Walks a manifest from a worker thread, reading segments as needed: calls
 * fn for each chunk in order until it returns non-zero (returned) or the end
 * (0). STORE_E_INTEGRITY for a missing or damaged segment. Flags:
 * STORE_WALK_SEGMENTS also calls fn for each segment (bytes 0) before its
 * chunks; STORE_WALK_DISK reads segments from their packs, not the cache.
 */
enum {
    STORE_WALK_SEGMENTS = 1u << 0,
    STORE_WALK_DISK = 1u << 1,
};
typedef int store_chunk_fn(void *ctx, const struct manifest_entry *chunk);
int store_walk_manifest(struct store *st, unsigned depth, const uint8_t *root, size_t root_len,
                        unsigned flags, store_chunk_fn *fn, void *ctx);
/*
 * Reads a whole record at a location: 0 with it (malloc'd), RECORD_E_BAD when
 * not all there. `cached` as for store_read_pack.
 */
int store_read_record(struct store *st, const struct db_loc *loc, bool cached, uint8_t **out);

/*
 * The first `max` bytes of a text document, read back from the store (for
 * snippets and the search index). 0 with a malloc'd buffer, or a failure.
 */
int store_read_prefix(struct store *st, unsigned depth, const uint8_t *root, size_t root_len,
                      size_t max, char **out, size_t *len);

/*
 * Recovery (replay.c), run by store_new before anything else: brings the
 * database up to what the packs hold, cuts torn tails, seals packs a crash
 * left open (but the newest, which the pack writer continues), finishes
 * interrupted pack deletions, and applies the journal entries it found in
 * time order. Runs the loop itself.
 */
struct packer_resume;
int store_replay(struct store *st, struct packer_resume *resume, char *summary, size_t summary_len);

/* The bridge's loop side: set up in store_new, closed in store_free. */
int store_bridge_init(struct store *st);
/*
 * Starts closing the bridge's handle, which lives in the store: `closed`
 * runs once libuv is done with it, and only then may the store's memory go.
 * False when there is no handle to close (it was never set up).
 */
bool store_bridge_close(struct store *st, uv_close_cb closed);
