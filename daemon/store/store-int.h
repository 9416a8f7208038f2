#pragma once

/*
 * What the store's files share (store.c: the store object and its
 * operations registry; read.c and bridge.c: reading records back; add.c and
 * add-work.c; get.c; delete.c; verify.c). Not for use outside daemon/store.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "compress/cdc.h"
#include "daemon/format/manifest.h"
#include "daemon/meta/db.h"
#include "daemon/store/store.h"

struct cache;
struct cache_buf;
struct packer;
struct readcache;
struct refcache;

/* A blocking read handed from a worker thread to the loop (backends without READ_SYNC). */
struct store_bridge_req;

/* Blocks being decoded at once that the store keeps track of (more are decoded untracked). */
#define STORE_DECODING_MAX 16

struct store {
    uv_loop_t *loop;
    struct backend *be;
    struct db *db;
    struct store_config cfg;
    struct cdc cdc;
    struct packer *packer;    /* borrowed; NULL until store_set_writer */
    struct readcache *rcache; /* borrowed; remote backends: pack slices kept on local disk */
    struct cache *cache;
    struct refcache *refs;
    unsigned active;
    /* Running operations, oldest first. */
    struct store_op *ops_head, *ops_tail;
    uint64_t next_op_seq;
    /* Who is told what (registered from above). */
    struct store_index_hooks index;
    struct store_ops_hook ops_ended;
    uint64_t last_entry_ns; /* recovery starts it at the newest entry in the packs */
    /*
     * Test-only fault injection: with CAIRN_TEST_FAIL_APPLY=NAME in cairnd's
     * environment, the database changes of an add of NAME and of `rm NAME`
     * fail (-EIO) after their records are in a pack (test_durability.py).
     */
    const char *test_fail_apply;
    /* The shared bucket's gc (store_set_bucket_seen): when its marks were last all seen. */
    uint64_t bucket_seen_ms, gc_grace_ms;
    /*
     * The blocks workers are decoding now, by pack and offset (read.c), so
     * that no two decode one block at once: a read-ahead passes over a
     * block being decoded, a read of one of its chunks waits for it.
     */
    pthread_mutex_t decoding_lock;
    pthread_cond_t decoding_done;
    struct store_decoding {
        uint64_t pack, off;
        bool used;
    } decoding[STORE_DECODING_MAX];
    /* Worker-to-loop reads. */
    uv_async_t bridge_async;
    pthread_mutex_t bridge_lock;
    struct store_bridge_req *bridge_queue;
    bool bridge_open;
};

/* Tell the search index, through its hooks (store_set_index_hooks). */
void store_index_changed(struct store *st, int64_t rowid, char *text, size_t len);
void store_index_removed(struct store *st);

/* Whether CAIRN_TEST_FAIL_APPLY names `name` (test_fail_apply; any thread). */
bool store_test_fails_apply(const struct store *st, const char *name);

/* A journal time (ns since the epoch) later than every one handed out before. */
uint64_t store_entry_time(struct store *st);
struct entry;
struct packer_rec;
/* Encodes a journal entry as a sealed PACK_REC_ENTRY record in *rec (worker threads). */
int store_entry_record(struct store *st, const struct entry *e, struct packer_rec *rec);
/* A journaled change's commit status as a store status (DB_E_NOT_FOUND: gone meanwhile). */
int store_commit_status(int status);
/* Frees what a record built for the packer owns (its bytes and index entries) and zeroes it. */
void store_rec_clear(struct packer_rec *rec);

struct packer_group;
/*
 * The failed group's records are durable in a pack (packer_group.written)
 * and it has journal entries: a void entry is written for each (void.c),
 * then cb(ctx) comes, on a later loop turn, whether that worked or not
 * (a failure is logged), and true is returned. Else false: nothing to do.
 */
bool store_void_entries(struct store *st, const struct packer_group *failed, void (*cb)(void *ctx),
                        void *ctx);

/* Maps a backend read status to the store's codes. */
int store_map_read_status(int status);

/* ---- reading records back (read.c); worker threads unless said otherwise ---- */

/* Reads through the loop (bridge.c), for backends that cannot read from a worker thread. */
int store_bridge_read(struct store *st, const char *key, uint64_t off, void *buf, size_t len,
                      size_t *got);

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
 * Read-ahead over the next chunks of a sequential read, in their order:
 * decodes the block of the first chunk that is neither cached nor in a
 * block another worker is decoding, and stops. Every chunk of that block is
 * checked (and marked so) on this worker, so the loop thread hands them out
 * without hashing them (a ranged read, by contrast, wants one chunk of a
 * block, not all of them hashed). Returns 0 (nothing left to do included);
 * failures are left for the reader to meet and report.
 */
int store_prefetch_next(struct store *st, const struct manifest_entry *chunks, size_t n);
/* A manifest segment's raw bytes, checked against its id: same outcomes. */
int store_load_segment(struct store *st, const uint8_t hash[PROTO_HASH_LEN], bool from_disk,
                       const struct cache_buf **out);
/* Loop thread: a cached chunk, checked, or NULL (not cached, or damaged and dropped). */
const struct cache_buf *store_cached_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN],
                                           uint64_t size);

/*
 * Reads a whole record at a location: 0 with it (malloc'd), RECORD_E_BAD when
 * not all there. `cached` as for store_read_pack.
 */
int store_read_record(struct store *st, const struct db_loc *loc, bool cached, uint8_t **out);

/* The bridge's loop side: set up in store_new, closed in store_free. */
int store_bridge_init(struct store *st);
/*
 * Starts closing the bridge's handle, which lives in the store: `closed`
 * runs once libuv is done with it, and only then may the store's memory go.
 * False when there is no handle to close (it was never set up).
 */
bool store_bridge_close(struct store *st, uv_close_cb closed);
