#pragma once

/* What gc.c (the run's phases) and repack.c (rewriting and deleting packs) share. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/gc/gc.h"
#include "proto/proto.h"

struct gc_run;
struct gc_reap;

/* A gc run's number and the first operation that did not predate its condemnations. */
struct gc_barrier {
    uint64_t gen, barrier;
};

struct gc {
    uv_loop_t *loop;
    struct store *st;
    struct search *search;
    struct db *db;
    struct backend *be;
    struct packer *pk;
    struct readcache *rc;
    struct reserve *reserve;
    struct refresh *rf; /* NULL: this daemon does not share its bucket (NOW) */
    struct gc_config cfg;
    struct gc_run *run; /* the gc running now, or NULL */
    /* gc runs up to this one are safe: of earlier lives of the daemon, or their barriers passed. */
    uint64_t safe_gen;
    /* The chunks of gc runs up to this one are in an earlier run's chunks_removed. */
    uint64_t counted_gen;
    struct gc_barrier *barriers;
    size_t nbarriers;
    /* Repacked packs waiting for their readers to end before deletion. */
    struct gc_reap *reaping;
    /* The packs the last FINISH emptied, to go once its done object is in the bucket. */
    uint64_t *finished;
    size_t nfinished;
};

/*
 * How packs are reclaimed:
 *   NOW     this daemon's mostly dead packs are rewritten and deleted at once
 *           (no refresh: nobody else can read the bucket);
 *   MARK    they are rewritten and marked, for run `gen`'s mark (marks.c):
 *           their dead rows stay, condemned, until the run finishes;
 *   FINISH  the packs of this daemon's mark `gen` are emptied: what `live`
 *           says is alive now (the mark of this run, after every writer's
 *           packs were read) is copied, the rest dropped, and then, in one
 *           synced commit, they are set for deletion and the mark's row says
 *           FINISHED with the done object's body.
 */
enum gc_repack_mode { GC_REPACK_NOW, GC_REPACK_MARK, GC_REPACK_FINISH };

struct gc_repack_args {
    enum gc_repack_mode mode;
    uint64_t safe_gen; /* rows condemned by runs up to it count as dead */
    uint64_t gen;      /* MARK: this run's mark; FINISH: the mark's run */
    /* MARK: the packs with nothing alive (they need no room to go), or the others. */
    bool dead;
    bool (*live)(void *ctx, const uint8_t hash[PROTO_HASH_LEN]); /* FINISH */
    void *live_ctx;
};

/* Adds to *res and calls cb once every chosen pack is done. */
typedef void gc_repack_cb(void *ctx, int status);
void gc_repack(struct gc *gc, const struct gc_repack_args *a, struct gc_result *res,
               gc_repack_cb *cb, void *ctx);
/* reap.c. Deletes repacked packs no running operation can read any more. */
void gc_reap(struct gc *gc);
/* Pack seq goes once the operations running now have ended. */
int gc_reap_later(struct gc *gc, uint64_t seq);
/* The packs the last FINISH emptied go once no running operation can read them. */
void gc_reap_finished(struct gc *gc);
/* Whether a pack is being deleted now (its readers have ended). */
bool gc_reaps_running(const struct gc *gc);
/* gc.c: a deletion ended; the run waiting for it may reply. */
void gc_reaped(struct gc *gc);
