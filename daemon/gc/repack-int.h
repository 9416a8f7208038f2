#pragma once

/* What repack.c (choosing packs, their commits) and repack-copy.c (reading one, worker side) share.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/format/gcmark.h"
#include "daemon/gc/gc-int.h"
#include "daemon/meta/db.h"
#include "daemon/pack/packer.h"

/* Where a live row's record went among the new records. */
struct repack_move {
    size_t row, rec;
    uint32_t sub, stored;
};

struct repack_pack {
    struct repack_run *run;
    uint64_t seq, size;
    bool delete_only;
    uv_work_t work;
    int status;
    struct db_pack_row *rows;
    size_t nrows;
    struct packer_rec *recs;
    size_t nrecs;
    struct repack_move *moves;
    size_t nmoves;
    uint64_t copied;
    uint64_t dead;        /* its dead bytes when gc looked at it */
    uint64_t need, avail; /* -ENOSPC: the room its copies need, and what the disk had */
    size_t saved_npacks, saved_ncopies; /* the run's mark before this pack's commit */
    struct packer_group g;
    struct db_write dbw;
};

struct repack_run {
    struct gc *gc;
    struct gc_repack_args a;
    uint64_t safe_gen;
    struct gc_result *res;
    /* MARK: the run's mark so far; FINISH: the late copies (the done object) and the marked packs.
     */
    struct gcmark mark;
    struct db_mark row;
    uint64_t *marked;
    size_t nmarked, next_marked;
    bool failed;          /* a pack could not be done */
    uint64_t pack_copied; /* what the pack being committed copies (its txn's) */
    struct db_write dbw;  /* FINISH's last commit */
    gc_repack_cb *cb;
    void *ctx;
    uv_work_t work;
    int status;
    bool rotated; /* the open pack was sealed to be looked at too */
    struct db_pack_use *use;
    size_t nuse, next;
};

/*
 * Worker: reads pack p->seq whole and builds the records that carry its
 * live rows (a block with dead chunks rebuilt from its live ones) into
 * p->recs, with where each live row went (p->moves); p->status says how it
 * went. FINISH decides here which rows live (gc_repack_args.live).
 */
void gc_repack_pack_work(uv_work_t *work);
