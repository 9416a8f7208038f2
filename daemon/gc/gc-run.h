#pragma once

/* A gc run, as gc.c (its phases) and gc-mark.c (the mark and the sweep) share it. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/gc/gc-int.h"
#include "daemon/meta/db.h"

struct gc_waiter {
    gc_cb *done;
    void *userdata;
    struct gc_waiter *next;
};

struct gc_root {
    unsigned depth;
    uint8_t *root;
    size_t root_len;
};

enum gc_phase {
    GC_PENDING, /* marks and done objects of earlier runs not in the bucket yet (a crash) */
    GC_LEASE,
    GC_PASS,       /* every writer's packs, and the acknowledgements of this daemon's marks */
    GC_PASS_AGAIN, /* the packs put before those acknowledgements */
    GC_GENERATION,
    GC_MARK,
    GC_SWEEP,
    GC_REMARK,
    GC_RESWEEP,
    GC_COUNT,  /* the chunks its condemnations took out of the store's counts */
    GC_FINISH, /* the earlier runs every writer let go of */
    GC_REPACK,
    GC_PUBLISH, /* this run's mark */
    GC_LOOK,    /* alone in the bucket? */
    GC_FINISH_OWN,
    GC_END,
};

/* Finishing one of this daemon's marks: empty its packs, seal the copies, put the done object. */
enum finish_step { FINISH_REPACK, FINISH_SEAL, FINISH_PUBLISH, FINISH_REAP };

struct gc_run {
    struct gc *gc;
    struct gc_waiter *waiters;
    int status;
    struct gc_result res;
    enum gc_phase phase;
    uint64_t gen, start_seq, barrier, safe_gen;
    bool ops_at_start;
    /* The bucket's gc (rf only). */
    bool leased, unleasing, solo;
    /* The reply waits for the packs being deleted: status then shows them gone. */
    bool reap_wait;
    uint64_t *ready; /* this daemon's runs to finish, and the one being finished */
    size_t nready, next_ready;
    enum finish_step fstep;
    uint64_t finishing;
    /*
     * Marks of this run: first the packs with nothing alive (deleting them
     * gives room back on a full disk), then the ones with live records, under
     * a number of their own.
     */
    bool live_stage;
    uint64_t mark_gen;
    uint64_t pending_before, bytes_pending_before; /* the result's counts before this stage */
    bool stage_marked;                             /* this stage marked packs: its number is used */
    /* The mark. */
    uint8_t *bloom;
    uint64_t bloom_bits, seed;
    struct gc_root *roots; /* of running gets, copied at the mark */
    size_t nroots;
    uv_work_t work;
    /* The sweep. */
    struct db_write dbw;
    enum db_record_table table;
    uint8_t cursor[PROTO_HASH_LEN];
    bool revive_only, sweep_done;
    uint64_t condemned, revived;
    /* The count: chunk rows condemned by runs after count_after, up to safe_gen. */
    uint64_t count_after;
};

/* The next phase of the run (gc.c); the run's end, its waiters called (gc.c). */
void gc_phase_next(struct gc_run *run);
void gc_run_finish(struct gc_run *run);

/*
 * gc-mark.c. The mark: every chunk and segment a document or a running get
 * reaches into the run's Bloom filter, then gc_phase_next. The sweep: the
 * rows condemned (or, revive_only, only revived) by the filter, then
 * gc_phase_next. Either ends the run on failure.
 */
void gc_mark_start(struct gc_run *run);
void gc_sweep_start(struct gc_run *run, bool revive_only);
/* Whether the run's mark reached hash (ctx: the run). */
bool gc_bloom_has(void *ctx, const uint8_t hash[PROTO_HASH_LEN]);
/* The newest run whose condemnations no running operation predates. */
uint64_t gc_safe_generation(struct gc *gc);
int gc_record_barrier(struct gc *gc, uint64_t gen, uint64_t barrier);
