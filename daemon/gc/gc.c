/*
 * Garbage collection: mark, condemn, then reclaim by rewriting packs.
 *
 *   0. Wait for the search index: a deleted document's chunks stay until its
 *      index entry is out (that takes its text). If the index fails, gc
 *      goes on and keeps what its pending removals need.
 *   1. Mark (gc-mark.c, with the sweep): every chunk and manifest segment
 *      that a document (or a pending index removal, or a running get)
 *      reaches goes into a Bloom filter, whose size the store's size sets
 *      and a cap bounds. A false positive only keeps a dead chunk one run
 *      longer; each run uses a new seed.
 *   2. Condemn: a sweep over the chunk and segment rows, a page per
 *      transaction, condemns what the mark did not reach (with this run's
 *      number) and revives condemned rows that are reached again. Dedup never
 *      picks a condemned chunk, so an add that starts after the sweep
 *      writes such content anew instead of relying on it.
 *   3. A condemned row may go once every operation that could have picked
 *      its chunk up before the condemnation has ended (store_op): those
 *      operations all started before the sweep committed. When they have all
 *      ended by then, a second mark revives whatever they committed, and this
 *      run's condemnations are safe at once; otherwise the next gc takes them.
 *   4. Reclaim (repack.c): packs less than repack_below percent alive are
 *      rewritten, their live records copied into the open pack, the database
 *      moved over in one synced commit, and the old pack deleted once no
 *      running operation can still read it. Packs with nothing alive are
 *      just deleted.
 *
 * A daemon that refreshes (recovery.h) shares its bucket, or may come to:
 * another writer may have picked up any of its records. Then (marks.c has
 * the whole protocol) the run takes the bucket's gc lease and reads every
 * writer's packs first, so that the mark covers what all of them
 * reference; finishes its earlier runs that every writer has let go of
 * (their packs emptied of what lives now, then deleted, after their done
 * object); then rewrites its mostly dead packs into marked ones, whose mark
 * it puts in the bucket. When the bucket turns out to have no other writer,
 * that mark finishes at once, and the run ends as one that deletes at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/gc/gc.h"

#include "daemon/base/crash.h"
#include "daemon/base/log.h"
#include "daemon/base/reserve.h"
#include "daemon/format/manifest.h"
#include "daemon/gc/gc-run.h"
#include "daemon/meta/db.h"
#include "daemon/pack/packer.h"
#include "daemon/recovery/recovery.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"
#include "proto/util.h"

/* ---- finishing ---- */

static void unleased(void *ctx, int status)
{
    if (status != 0)
        log_warn("gc: the lease could not be given back; it lapses");
    gc_run_finish(ctx);
}

void gc_run_finish(struct gc_run *run)
{
    struct gc *gc = run->gc;
    struct gc_waiter *w = run->waiters;

    /*
     * The packs it set for deletion that no running operation reads are
     * being deleted now: the reply waits for that, so that a status after it
     * no longer counts them. Those a running request reads go when it ends.
     */
    if (gc_reaps_running(gc)) {
        run->reap_wait = true;
        return;
    }
    run->reap_wait = false;
    /* The lease goes back first (it would lapse on its own, later). */
    if (run->leased && !run->unleasing) {
        run->unleasing = true;
        if (refresh_lease_drop(gc->rf, unleased, run) == 0)
            return;
    }
    gc->run = NULL;
    if (run->status == 0 && run->barrier) {
        uint64_t since = 0;
        run->res.waiting_requests = store_holders_before(gc->st, run->barrier, &since);
        if (run->res.waiting_requests) {
            run->res.waiting_ms = uv_now(gc->loop) - since;
            log_info("gc: %" PRIu64 " request%s in progress (the oldest for %" PRIu64
                     " s) began before it condemned what it found dead: a gc after they end "
                     "reclaims it",
                     run->res.waiting_requests, run->res.waiting_requests == 1 ? "" : "s",
                     run->res.waiting_ms / 1000);
        }
    }
    if (run->status == 0)
        log_info("gc: %" PRIu64 " packs rewritten, %" PRIu64 " deleted, %" PRIu64
                 " bytes reclaimed, %" PRIu64 " bytes still dead, %" PRIu64
                 " packs could not be rewritten",
                 run->res.packs_rewritten, run->res.packs_deleted, run->res.bytes_reclaimed,
                 run->res.bytes_dead, run->res.packs_failed);
    while (w) {
        struct gc_waiter *next = w->next;
        w->done(w->userdata, run->status, &run->res);
        free(w);
        w = next;
    }
    for (size_t i = 0; i < run->nroots; i++)
        free(run->roots[i].root);
    free(run->roots);
    free(run->bloom);
    free(run->ready);
    free(run);
}

/* ---- progress ---- */

bool gc_progress(struct gc *gc, struct store_progress *out)
{
    static const char *const names[] = {
        [GC_PENDING] = "start",      [GC_LEASE] = "start",      [GC_PASS] = "refresh",
        [GC_PASS_AGAIN] = "refresh", [GC_GENERATION] = "start", [GC_MARK] = "mark",
        [GC_SWEEP] = "sweep",        [GC_REMARK] = "mark",      [GC_RESWEEP] = "sweep",
        [GC_COUNT] = "sweep",        [GC_FINISH] = "repack",    [GC_REPACK] = "repack",
        [GC_PUBLISH] = "repack",     [GC_LOOK] = "refresh",     [GC_FINISH_OWN] = "repack",
        [GC_END] = "repack",
    };
    const struct gc_run *run = gc->run;

    if (!run)
        return false;
    atomic_store_explicit(&out->phase, names[run->phase], memory_order_relaxed);
    /* Repack: the packs rewritten or deleted so far (the result counts them as they go). */
    atomic_store_explicit(
        &out->done, run->phase >= GC_FINISH ? run->res.packs_rewritten + run->res.packs_deleted : 0,
        memory_order_relaxed);
    atomic_store_explicit(&out->total, 0, memory_order_relaxed);
    return true;
}

/* ---- the phases ---- */

static int gen_apply(struct db_txn *txn, struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);
    return db_txn_gc_generation(txn, &run->gen);
}

static void gen_done(struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);

    if (w->status != 0) {
        run->status = w->status < 0 ? w->status : -EIO;
        gc_run_finish(run);
        return;
    }
    gc_phase_next(run);
}

/*
 * The chunk rows whose condemnations are safe now and no earlier run
 * counted: what leaves the store's counts (db_totals), and chunks_removed,
 * whether their records are reclaimed now, later, or stay in a mostly alive
 * pack (worker).
 */
static void count_work(uv_work_t *work)
{
    struct gc_run *run = container_of(work, struct gc_run, work);
    uint64_t n;
    int r = db_chunks_condemned(run->gc->db, run->count_after, run->safe_gen, &n);

    if (r < 0) {
        /* Only a number is lost: the next run counts these. */
        log_warn("gc: the chunks it found dead could not be counted");
        run->count_after = UINT64_MAX;
        return;
    }
    run->res.chunks_removed += n;
}

static void count_done(uv_work_t *work, int status)
{
    struct gc_run *run = container_of(work, struct gc_run, work);

    if (status < 0)
        run->status = status;
    else if (run->safe_gen > run->gc->counted_gen && run->count_after == run->gc->counted_gen)
        run->gc->counted_gen = run->safe_gen;
    gc_phase_next(run);
}

static void count_start(struct gc_run *run)
{
    run->count_after = run->gc->counted_gen;
    if (run->safe_gen <= run->count_after) {
        gc_phase_next(run);
        return;
    }
    if (uv_queue_work(run->gc->loop, &run->work, count_work, count_done) < 0) {
        run->status = -ENOMEM;
        gc_run_finish(run);
    }
}

/* ---- the bucket's steps (rf only) ---- */

static void step_done(void *ctx, int status)
{
    struct gc_run *run = ctx;

    if (status != 0 && run->status == 0) {
        run->status = status;
        if (status == REFRESH_E_BUSY) {
            run->status = GC_E_BUSY;
            snprintf(run->res.failure, sizeof(run->res.failure),
                     "the gc of writer %016" PRIx64 " runs on this bucket",
                     refresh_lease_holder(run->gc->rf));
        }
    }
    if (run->phase == GC_LEASE && status == 0) {
        run->leased = true;
        crash_point("gc-leased");
    }
    /* This run's mark is in the bucket; nothing is deleted yet. */
    if (run->phase == GC_PUBLISH && run->fstep == FINISH_PUBLISH && status == 0)
        crash_point("gc-marked");
    gc_phase_next(run);
}

/* The copies are in the open pack of an appending backend: sealed, others can read them. */
static void sealed(void *ctx)
{
    step_done(ctx, 0);
}

/*
 * Alone in the bucket, the open pack stays open: a writer that comes later
 * is seen by the next refresh, which seals it then (packer_set_shared).
 */
static void seal_then(struct gc_run *run, bool solo)
{
    if (solo || packer_rotate(run->gc->pk, sealed, run) != 0)
        step_done(run, 0);
}

/* The marks of earlier runs that a crash left out of the bucket (worker). */
static void pending_work(uv_work_t *work)
{
    struct gc_run *run = container_of(work, struct gc_run, work);
    struct db_mark *rows;
    uint64_t own;
    size_t n;

    if ((run->status = db_writer_id(run->gc->db, run->gc->cfg.own_widx, &own)) < 0 ||
        (run->status = db_marks(run->gc->db, &rows, &n)) < 0)
        return;
    free(run->ready);
    run->nready = run->next_ready = 0;
    if (!(run->ready = calloc(n ? n : 1, sizeof(*run->ready))))
        run->status = -ENOMEM;
    for (size_t i = 0; run->ready && i < n; i++)
        if (rows[i].writer == own &&
            (rows[i].state == DB_MARK_OWN_COPIED || rows[i].state == DB_MARK_OWN_FINISHED))
            run->ready[run->nready++] = rows[i].gen;
    db_marks_free(rows, n);
}

static void pending_done(uv_work_t *work, int status)
{
    struct gc_run *run = container_of(work, struct gc_run, work);

    if (status < 0)
        run->status = status;
    run->fstep = FINISH_SEAL;
    gc_phase_next(run);
}

/* Publishes the pending marks one by one, each after sealing what it names. */
static void pending_next(struct gc_run *run)
{
    if (run->next_ready == run->nready) {
        run->phase = GC_LEASE;
        refresh_lease_take(run->gc->rf, step_done, run) < 0 ? step_done(run, -ENOMEM) : (void)0;
        return;
    }
    if (run->fstep == FINISH_SEAL) {
        run->fstep = FINISH_PUBLISH;
        seal_then(run, false);
        return;
    }
    run->fstep = FINISH_SEAL;
    if (refresh_publish(run->gc->rf, run->ready[run->next_ready++], step_done, run) < 0)
        step_done(run, -ENOMEM);
}

static void finish_repacked(void *ctx, int status)
{
    step_done(ctx, status);
}

/*
 * Finishes this daemon's mark `finishing`, a step per call: its packs
 * emptied of what this run's mark reaches, the copies sealed, the done
 * object put, then the packs deleted once no running operation reads them.
 * Only while the lease surely holds.
 */
static bool finish_step(struct gc_run *run)
{
    struct gc *gc = run->gc;

    switch (run->fstep) {
    case FINISH_REPACK:
        if (!refresh_lease_ok(gc->rf)) {
            run->status = STORE_E_UNAVAILABLE;
            snprintf(run->res.failure, sizeof(run->res.failure),
                     "the gc lease could not be renewed");
            return false;
        }
        run->fstep = FINISH_SEAL;
        gc_repack(gc,
                  &(struct gc_repack_args){.mode = GC_REPACK_FINISH,
                                           .safe_gen = run->safe_gen,
                                           .gen = run->finishing,
                                           .live = gc_bloom_has,
                                           .live_ctx = run},
                  &run->res, finish_repacked, run);
        return true;
    case FINISH_SEAL:
        run->fstep = FINISH_PUBLISH;
        seal_then(run, run->solo);
        return true;
    case FINISH_PUBLISH:
        run->fstep = FINISH_REAP;
        if (refresh_publish(gc->rf, run->finishing, step_done, run) < 0)
            step_done(run, -ENOMEM);
        return true;
    case FINISH_REAP:
        /* The done object is in the bucket: the packs may go. */
        gc_reap_finished(gc);
        return false;
    }
    return false;
}

/* The next of the runs to finish; false when none is left. */
static bool finish_next(struct gc_run *run)
{
    if (run->fstep != FINISH_REAP && run->finishing && finish_step(run))
        return true;
    if (run->fstep == FINISH_REAP && run->finishing) {
        finish_step(run);
        run->finishing = 0;
    }
    if (run->status != 0 || run->next_ready == run->nready)
        return false;
    run->finishing = run->ready[run->next_ready++];
    run->fstep = FINISH_REPACK;
    return finish_step(run);
}

static int take_view(struct gc_run *run)
{
    free(run->ready);
    run->ready = NULL;
    run->nready = run->next_ready = 0;
    run->finishing = 0;
    return refresh_gc_view(run->gc->rf, &run->ready, &run->nready, &run->solo);
}

static void gc_repacked(void *ctx, int status);

/* Marks (or, not sharing, deletes) the packs of this stage. */
static void repack_stage(struct gc_run *run)
{
    struct gc *gc = run->gc;

    run->phase = GC_REPACK;
    run->pending_before = run->res.packs_pending;
    run->bytes_pending_before = run->res.bytes_pending;
    gc_repack(gc,
              &(struct gc_repack_args){.mode = gc->rf ? GC_REPACK_MARK : GC_REPACK_NOW,
                                       .safe_gen = run->safe_gen,
                                       .gen = run->mark_gen,
                                       .dead = !run->live_stage},
              &run->res, gc_repacked, run);
}

static int stage_gen_apply(struct db_txn *txn, struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);
    return db_txn_gc_generation(txn, &run->mark_gen);
}

static void stage_gen_done(struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);

    if (w->status != 0) {
        run->status = w->status < 0 ? w->status : -EIO;
        gc_run_finish(run);
        return;
    }
    repack_stage(run);
}

/* After the dead packs, the live ones, under a number of their own; then the end. */
static void stage_end(struct gc_run *run)
{
    if (run->live_stage || run->status != 0) {
        run->phase = GC_END;
        gc_phase_next(run);
        return;
    }
    run->live_stage = true;
    if (!run->stage_marked) {
        /* Nothing was marked: the number is free for the next stage. */
        repack_stage(run);
        return;
    }
    run->dbw = (struct db_write){.apply = stage_gen_apply, .done = stage_gen_done};
    db_write(run->gc->db, &run->dbw);
}

void gc_phase_next(struct gc_run *run)
{
    struct gc *gc = run->gc;

    if (run->status != 0) {
        gc_run_finish(run);
        return;
    }
    switch (run->phase) {
    case GC_PENDING:
        if (!gc->rf) {
            run->phase = GC_GENERATION;
            run->dbw = (struct db_write){.apply = gen_apply, .done = gen_done};
            db_write(gc->db, &run->dbw);
            return;
        }
        pending_next(run);
        break;
    case GC_LEASE:
        run->phase = GC_PASS;
        if (refresh_now(gc->rf, step_done, run) < 0)
            step_done(run, -ENOMEM);
        break;
    case GC_PASS:
        if ((run->status = take_view(run)) < 0) {
            gc_run_finish(run);
            return;
        }
        run->phase = GC_PASS_AGAIN;
        /* Alone, nobody else wrote packs since: one pass saw all. */
        if (run->solo || refresh_now(gc->rf, step_done, run) < 0)
            gc_phase_next(run);
        break;
    case GC_PASS_AGAIN:
        run->phase = GC_GENERATION;
        run->dbw = (struct db_write){.apply = gen_apply, .done = gen_done};
        db_write(gc->db, &run->dbw);
        break;
    case GC_GENERATION:
        run->phase = GC_MARK;
        gc_mark_start(run);
        break;
    case GC_MARK:
        run->phase = GC_SWEEP;
        gc_sweep_start(run, false);
        break;
    case GC_SWEEP:
        /* Every operation that may have relied on a row condemned now started before this. */
        run->barrier = store_next_op(gc->st);
        if ((run->status = gc_record_barrier(gc, run->gen, run->barrier)) < 0) {
            gc_run_finish(run);
            return;
        }
        if (store_oldest_holder(gc->st) >= run->barrier) {
            if (run->ops_at_start || run->barrier != run->start_seq) {
                /* They have all ended: mark again so what they committed is revived. */
                run->phase = GC_REMARK;
                gc_mark_start(run);
                return;
            }
            /* None ran while gc did: the mark saw everything, so this run's condemnations may go.
             */
            run->safe_gen = run->gen;
        }
        run->phase = GC_RESWEEP;
        gc_phase_next(run);
        break;
    case GC_REMARK:
        run->phase = GC_RESWEEP;
        gc_sweep_start(run, true);
        break;
    case GC_RESWEEP:
        run->phase = GC_COUNT;
        count_start(run);
        break;
    case GC_COUNT:
        run->phase = GC_FINISH;
        if (gc->rf && finish_next(run))
            return;
        gc_phase_next(run);
        break;
    case GC_FINISH:
        if (finish_next(run))
            return;
        run->mark_gen = run->gen;
        repack_stage(run);
        break;
    case GC_REPACK:
        run->stage_marked = gc->rf && run->res.packs_pending > run->pending_before;
        if (!run->stage_marked) {
            stage_end(run);
            return;
        }
        run->phase = GC_PUBLISH;
        run->fstep = FINISH_SEAL;
        seal_then(run, run->solo);
        break;
    case GC_PUBLISH:
        if (run->fstep == FINISH_SEAL) {
            run->fstep = FINISH_PUBLISH;
            if (refresh_publish(gc->rf, run->mark_gen, step_done, run) < 0)
                step_done(run, -ENOMEM);
            return;
        }
        /* Whether any writer has to let go of this run's packs: a pass tells. */
        run->phase = GC_LOOK;
        if (refresh_now(gc->rf, step_done, run) < 0)
            step_done(run, -ENOMEM);
        break;
    case GC_LOOK: {
        bool now = false;
        if ((run->status = take_view(run)) < 0) {
            gc_run_finish(run);
            return;
        }
        for (size_t i = 0; i < run->nready; i++)
            now |= run->ready[i] == run->mark_gen;
        run->phase = GC_FINISH_OWN;
        if (now) {
            /* Alone in the bucket: the run deletes what it marked, as one that does so at once. */
            run->ready[0] = run->mark_gen;
            run->nready = 1;
            if (finish_next(run))
                return;
        }
        gc_phase_next(run);
        break;
    }
    case GC_FINISH_OWN:
        if (finish_next(run))
            return;
        if (run->status == 0 && run->nready == 1 && run->ready[0] == run->mark_gen) {
            run->res.packs_pending = run->pending_before;
            run->res.bytes_pending = run->bytes_pending_before;
        }
        stage_end(run);
        break;
    case GC_END:
        gc_run_finish(run);
        break;
    }
}

static void gc_repacked(void *ctx, int status)
{
    struct gc_run *run = ctx;

    if (status != 0 && run->status == 0)
        run->status = status;
    gc_phase_next(run);
}

void gc_reaped(struct gc *gc)
{
    if (gc->run && gc->run->reap_wait && !gc_reaps_running(gc))
        gc_run_finish(gc->run);
}

static void ops_ended(void *ctx)
{
    gc_reap(ctx);
}

static void gc_begin(void *ctx, int status)
{
    struct gc_run *run = ctx;

    run->start_seq = store_next_op(run->gc->st);
    run->ops_at_start = store_oldest_holder(run->gc->st) != store_next_op(run->gc->st);
    run->phase = GC_PENDING;
    if (!run->gc->rf) {
        gc_phase_next(run);
        return;
    }
    if (uv_queue_work(run->gc->loop, &run->work, pending_work, pending_done) < 0) {
        run->status = -ENOMEM;
        gc_run_finish(run);
    }
}

int gc_run(struct gc *gc, gc_cb *done, void *userdata)
{
    struct gc_waiter *w = calloc(1, sizeof(*w));
    struct gc_run *run;

    if (!w)
        return -ENOMEM;
    w->done = done;
    w->userdata = userdata;
    if (gc->run) {
        w->next = gc->run->waiters;
        gc->run->waiters = w;
        return 0;
    }
    run = calloc(1, sizeof(*run));
    if (!run) {
        free(w);
        return -ENOMEM;
    }
    run->gc = gc;
    run->waiters = w;
    run->phase = GC_PENDING;
    gc->run = run;
    /*
     * A deleted document's chunks stay until the search index has taken its
     * entry out (that needs its text): waiting for the index lets a gc right
     * after a delete reclaim it.
     */
    if (search_wait(gc->search, gc_begin, run) < 0)
        gc_begin(run, 0);
    return 0;
}

int gc_new(struct gc **out, uv_loop_t *loop, const struct gc_parts *parts,
           const struct gc_config *cfg)
{
    struct gc *gc = calloc(1, sizeof(*gc));
    int r;

    if (!gc)
        return -ENOMEM;
    gc->loop = loop;
    gc->st = parts->st;
    gc->search = parts->search;
    gc->db = parts->db;
    gc->be = parts->be;
    gc->pk = parts->pk;
    gc->rc = parts->rc;
    gc->reserve = parts->reserve;
    gc->rf = parts->rf;
    gc->cfg = *cfg;
    /* Runs of earlier lives of the daemon are all safe: their operations are gone. */
    if ((r = db_gc_generation(gc->db, &gc->safe_gen)) < 0) {
        free(gc);
        return r;
    }
    gc->counted_gen = gc->safe_gen;
    store_set_ops_ended_hook(gc->st, &(struct store_ops_hook){ops_ended, gc});
    *out = gc;
    return 0;
}

struct gc *gc_free(struct gc *gc)
{
    if (!gc)
        return NULL;
    store_set_ops_ended_hook(gc->st, NULL);
    free(gc->barriers);
    free(gc->finished);
    free(gc);
    return NULL;
}

uint64_t gc_dead_generation(struct gc *gc)
{
    return gc_safe_generation(gc);
}

bool gc_busy(const struct gc *gc)
{
    return gc->reaping != NULL;
}
