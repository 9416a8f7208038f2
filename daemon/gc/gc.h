#pragma once

/*
 * Garbage collection: reclaims what no document uses - unreferenced chunks
 * and manifest segments, the journal entries of deleted documents, and
 * records of adds that failed. Packs less than `repack_below` percent alive
 * are rewritten and the old ones deleted once the database no longer names
 * them and no running operation can still read them. Only one gc runs at a
 * time; a request while one runs waits for it and gets its result.
 *
 * It waits for the search index first (a deleted document's chunks stay
 * until its index entry, which needs its text, is out), and learns from the
 * store when the oldest running operation ends (store_set_ops_ended_hook).
 *
 * Loop thread; callbacks come on the loop thread.
 */

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

struct backend;
struct db;
struct gc;
struct packer;
struct refresh;
struct readcache;
struct reserve;
struct search;
struct store;
struct store_progress;

struct gc_config {
    unsigned repack_below; /* rewrite packs less than this percent alive */
    uint64_t pack_size;    /* packs far larger than this are left alone */
    int compression_level; /* of blocks rebuilt from their live chunks */
    /* This daemon's writer in the database (db.h): gc only ever changes its own packs. */
    unsigned own_widx;
    bool owns_writer0;
};

/* What gc lends and borrows: everything stays its owner's. */
struct gc_parts {
    /* The bucket's other writers: gc marks packs and waits for them (NULL: deletes at once). */
    struct refresh *rf;
    struct store *st;
    struct search *search;
    struct db *db;
    struct backend *be;
    struct packer *pk;
    struct readcache *rc;    /* NULL: none */
    struct reserve *reserve; /* room kept for a full disk; NULL: none */
};

/* Another writer's gc runs on the bucket (its lease); the result's failure names it. */
#define GC_E_BUSY 71

struct gc_result {
    uint64_t packs_rewritten, packs_deleted;
    uint64_t bytes_reclaimed; /* pack bytes given back to the backend */
    /* Packs rewritten or emptied and marked, deleted once every writer of the bucket has let
     * go of them (or the grace period has passed), and the bytes that will then come back. */
    uint64_t packs_pending, bytes_pending;
    /* Dead bytes left in packs above the rewrite threshold, the open pack included. */
    uint64_t bytes_dead;
    /*
     * Chunks no document used any more that left the store's counts in this
     * run (gc_dead_generation): those it found dead, once no running request
     * can still rely on them, whether their records went or stay, dead, in
     * a mostly alive pack.
     */
    uint64_t chunks_removed;
    /* Packs that could not be rewritten (their dead bytes stay; gc went on with the
     * others), and why the first one could not. */
    uint64_t packs_failed;
    char failure[160];
    /*
     * Requests in progress that began before gc condemned what it found
     * dead: what they may still read is left to a gc after they end (a
     * request stalled on its client ends at client_timeout). When not 0,
     * waiting_ms is how long the oldest of them has run.
     */
    uint64_t waiting_requests, waiting_ms;
};

/* Reads which gc runs are already safe from the database (blocking: at start). 0 or negative errno.
 */
int gc_new(struct gc **out, uv_loop_t *loop, const struct gc_parts *parts,
           const struct gc_config *cfg);
/* Only when no gc runs and gc_busy() is false. Returns NULL. */
struct gc *gc_free(struct gc *gc);
/* Packs repacked and waiting for their readers to end, or being deleted. */
bool gc_busy(const struct gc *gc);

/* status: 0, GC_E_BUSY, STORE_E_UNAVAILABLE (the bucket), or negative errno; res always. */
typedef void gc_cb(void *userdata, int status, const struct gc_result *res);
int gc_run(struct gc *gc, gc_cb *done, void *userdata);
/* The running gc's progress; false when none runs. */
bool gc_progress(struct gc *gc, struct store_progress *out);
/*
 * The newest gc run whose condemnations no running operation can rely on:
 * the chunk rows they hold are dead, whether their records are reclaimed
 * yet or not (db_totals leaves them out).
 */
uint64_t gc_dead_generation(struct gc *gc);
