/*
 * Reclaiming space by rewriting packs (gc's last phase, gc.c).
 *
 * A pack less than repack_below percent alive is read whole; its live
 * records are copied into the open pack through the pack writer (a block
 * with dead chunks is rebuilt from its live ones), and in the same synced
 * transaction the database moves their rows over, drops the dead rows, and
 * marks the old pack for deletion. The old pack's object is deleted only
 * after that commit, and only once no running operation can still read it
 * (gc_reap). A pack with nothing alive is just marked and deleted.
 *
 * Every step is safe to cut by a crash: before the commit the old pack is
 * intact and the copies are dead weight in the open pack; after it, replay
 * finds the pack marked for deletion and finishes the job.
 *
 * With other writers (gc-int.h, GC_REPACK_MARK and FINISH), the commit
 * marks the pack instead and keeps its dead rows; the mark's row in the
 * database names the marked packs and the packs that took the copies, in
 * the same commit. Finishing the mark later empties the packs the same way,
 * with what is alive then, and sets them all for deletion in one commit.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "daemon/base/crash.h"
#include "daemon/base/log.h"
#include "daemon/format/gcmark.h"
#include "daemon/pack/packer.h"
#include "daemon/readcache/readcache.h"
#include "daemon/format/record.h"
#include "daemon/gc/gc-int.h"
#include "daemon/gc/repack-int.h"
#include "daemon/meta/db.h"
#include "daemon/store/store.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* A pack larger than this many times the configured size is left alone (not ours to read whole). */
#define REPACK_MAX_FACTOR 4
#define MIB ((uint64_t)1 << 20)

/* ---- one pack (loop and writer side) ---- */

/* A key the run's mark (or done object) names, once. */
static int mark_key(struct repack_run *run, bool copy, uint64_t pack)
{
    char key[BACKEND_MAX_KEY];
    size_t n = copy ? run->mark.ncopies : run->mark.npacks;
    char(*v)[GCMARK_KEY_MAX] = copy ? run->mark.copies : run->mark.packs;

    if (db_pack_key(run->gc->db, pack, key, sizeof(key)) < 0)
        return -EIO;
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], key) == 0)
            return 0;
    return gcmark_add(&run->mark, copy, key);
}

/* The mark's row as the run has it now: MARK's body, or FINISH's done object. */
static int mark_row_apply(struct db_txn *txn, struct repack_run *run, enum db_mark_state state)
{
    struct db_mark row = run->row;
    char *body;
    size_t len;
    int r = gcmark_encode(&run->mark, &body, &len);

    if (r < 0)
        return r;
    row.state = state;
    row.copied = run->row.copied + run->pack_copied;
    if (run->a.mode == GC_REPACK_MARK) {
        row.body = body;
        row.body_len = len;
    } else {
        row.done = body;
        row.done_len = len;
    }
    r = db_txn_mark_set(txn, &row);
    free(body);
    return r;
}

static int pack_apply_rows(struct db_txn *txn, struct repack_pack *p)
{
    bool *moved = calloc(p->nrows ? p->nrows : 1, sizeof(bool));
    enum gc_repack_mode mode = p->run->a.mode;
    uint64_t left;
    int r = 0;

    if (!moved)
        return -ENOMEM;
    for (size_t i = 0; r == 0 && i < p->nmoves; i++) {
        const struct repack_move *m = &p->moves[i];
        const struct packer_rec *rec = &p->recs[m->rec];
        struct db_loc to = {.pack = rec->pack,
                            .off = rec->offset,
                            .len = (uint32_t)rec->len,
                            .sub = m->sub,
                            .stored = m->stored};
        r = db_txn_row_move(txn, &p->rows[m->row], &to);
        moved[m->row] = true;
        /* The packs that take copies are named by the mark, or by the done object. */
        if (r == 0 && mode != GC_REPACK_NOW)
            r = mark_key(p->run, true, rec->pack);
    }
    for (size_t i = 0; r == 0 && i < p->nrows; i++) {
        if (moved[i])
            continue;
        if (p->rows[i].live) {
            /* Alive but not copied (the pack was taken for dead): it must stay. */
            r = -EAGAIN;
            break;
        }
        /* A marked pack keeps its dead rows until its mark finishes: its records still read. */
        if (mode == GC_REPACK_MARK)
            continue;
        r = db_txn_row_drop(txn, &p->rows[i]);
    }
    free(moved);
    if (r == 0 && mode == GC_REPACK_MARK) {
        bool known;
        if ((r = db_txn_pack_mark(txn, p->seq, &known)) == 0 &&
            (r = mark_key(p->run, false, p->seq)) == 0)
            r = mark_row_apply(txn, p->run, DB_MARK_OWN_COPIED);
        return r;
    }
    /* Nothing may point into the old pack any more, or it must stay. */
    if (r == 0 && (r = db_txn_pack_rows_left(txn, p->seq, &left)) == 0 && left > 0) {
        log_warn("gc: pack %016" PRIx64 " still has %" PRIu64 " rows; it stays", p->seq, left);
        r = -EAGAIN;
    }
    if (r == 0 && mode == GC_REPACK_FINISH)
        return mark_row_apply(txn, p->run, DB_MARK_OWN_PUBLISHED);
    if (r == 0)
        r = db_txn_pack_set(txn, p->seq, p->size, DB_PACK_DELETING);
    return r;
}

static int group_apply(struct db_txn *txn, struct packer_group *g)
{
    /* The copies are durable in the open pack; the database does not know them yet. */
    crash_point("repack-copied");
    return pack_apply_rows(txn, container_of(g, struct repack_pack, g));
}

static int write_apply(struct db_txn *txn, struct db_write *w)
{
    return pack_apply_rows(txn, container_of(w, struct repack_pack, dbw));
}

static void run_next(struct repack_run *run);

static void pack_end(struct repack_pack *p, int status)
{
    struct repack_run *run = p->run;
    struct gc_result *res = run->res;

    if (status == 0) {
        /* The database has moved over, synced; the old pack is still there. */
        crash_point("repack-committed");
        uint64_t back = p->size > p->copied ? p->size - p->copied : 0;
        run->row.copied += p->copied;
        if (run->a.mode == GC_REPACK_FINISH) {
            /* Emptied: it goes with the mark's other packs (gc_reap_finished). */
        } else if (p->delete_only) {
            res->packs_deleted++;
        } else {
            res->packs_rewritten++;
        }
        if (run->a.mode == GC_REPACK_MARK) {
            res->packs_pending++;
            res->bytes_pending += back;
        } else if (run->a.mode == GC_REPACK_NOW) {
            res->bytes_reclaimed += back;
            if (gc_reap_later(run->gc, p->seq) < 0)
                log_warn("gc: pack %016" PRIx64 " goes at the next start", p->seq);
        }
    } else {
        /* Nothing of this pack's commit stayed: nor in the mark. */
        run->mark.npacks = p->saved_npacks;
        run->mark.ncopies = p->saved_ncopies;
        run->failed = true;
    }
    if (status != 0 && status != -EAGAIN) {
        char room[112];
        const char *why = status < 0 ? strerror(-status)
                          : status == PACKER_E_UNAVAILABLE || status == STORE_E_UNAVAILABLE
                              ? "backend unavailable"
                              : "a record in it is damaged";
        if (status == -ENOSPC && p->need > 0) {
            /* Found before writing anything (repack-copy.c): the disk is left as it was. */
            snprintf(room, sizeof(room),
                     "No space left on device (its live records need %" PRIu64 " MiB, %" PRIu64
                     " MiB free)",
                     (p->need + MIB - 1) / MIB, p->avail / MIB);
            why = room;
        }
        log_error("gc: rewriting pack %016" PRIx64 " failed: %s; gc goes on with the others",
                  p->seq, why);
        if (res->packs_failed++ == 0)
            snprintf(res->failure, sizeof(res->failure), "pack %016" PRIx64 ": %s", p->seq, why);
        res->bytes_dead += p->dead;
    }
    for (size_t i = 0; i < p->nrecs; i++) {
        free(p->recs[i].bytes);
        free(p->recs[i].idx);
    }
    free(p->recs);
    free(p->moves);
    free(p->rows);
    free(p);
    run_next(run);
}

static void group_done(struct packer_group *g, int status)
{
    pack_end(container_of(g, struct repack_pack, g), status);
}

static void write_done(struct db_write *w)
{
    pack_end(container_of(w, struct repack_pack, dbw), w->status);
}

static void pack_done(uv_work_t *work, int status)
{
    struct repack_pack *p = container_of(work, struct repack_pack, work);
    struct repack_run *run = p->run;

    if (status < 0)
        p->status = status;
    if (p->status != 0) {
        pack_end(p, p->status);
        return;
    }
    p->saved_npacks = run->mark.npacks;
    p->saved_ncopies = run->mark.ncopies;
    run->pack_copied = p->copied;
    if (p->nrecs == 0) {
        /* Nothing to copy: drop the rows and mark the pack, synced, in one write. */
        p->dbw = (struct db_write){.apply = write_apply, .done = write_done, .durable = true};
        db_write(run->gc->db, &p->dbw);
        return;
    }
    p->g.recs = p->recs;
    p->g.nrecs = p->nrecs;
    p->g.own_locations = true;
    p->g.durable = true;
    p->g.apply = group_apply;
    p->g.done = group_done;
    packer_submit(run->gc->pk, &p->g);
}

/* ---- choosing the packs ---- */

/*
 * Dead bytes: what is neither alive nor the pack's own framing (its header,
 * and once sealed its index, an entry per row, and trailer). Records no row
 * points at, like those of an add that failed, are dead. A chunk's share of
 * its block is rounded down (record_share): up to a byte per row is neither.
 */
static uint64_t dead_bytes(const struct db_pack_use *u)
{
    uint64_t framing = PACK_HEADER_SIZE + u->rows;

    if (u->state != DB_PACK_OPEN)
        framing += PACK_TRAILER_SIZE + u->rows * PACK_INDEX_ENTRY;
    return u->size > u->live + framing ? u->size - u->live - framing : 0;
}

/*
 * Less than repack_below percent of its records alive. The framing counts
 * for neither side: a pack with nothing dead is never rewritten, whatever
 * the threshold.
 */
static bool worth_rewriting(const struct gc *gc, const struct db_pack_use *u)
{
    uint64_t dead = dead_bytes(u);
    return dead > 0 && u->live * 100 < (u->live + dead) * gc->cfg.repack_below;
}

static const struct db_pack_use *use_of(const struct repack_run *run, uint64_t seq)
{
    for (size_t i = 0; i < run->nuse; i++)
        if (run->use[i].seq == seq)
            return &run->use[i];
    return NULL;
}

static void run_end(struct repack_run *run)
{
    run->cb(run->ctx, run->status);
    free(run->use);
    free(run->marked);
    free(run->row.body);
    free(run->row.done);
    gcmark_clear(&run->mark);
    free(run);
}

/* FINISH: the emptied packs are set for deletion with the done object's body, in one commit. */
static int finished_apply(struct db_txn *txn, struct db_write *w)
{
    struct repack_run *run = container_of(w, struct repack_run, dbw);
    int r = 0;

    for (size_t i = 0; r == 0 && i < run->nmarked; i++) {
        const struct db_pack_use *u = use_of(run, run->marked[i]);
        if (u && u->state == DB_PACK_MARKED)
            r = db_txn_pack_set(txn, u->seq, u->size, DB_PACK_DELETING);
    }
    return r == 0 ? mark_row_apply(txn, run, DB_MARK_OWN_FINISHED) : r;
}

static void finished_done(struct db_write *w)
{
    struct repack_run *run = container_of(w, struct repack_run, dbw);
    struct gc *gc = run->gc;

    run->status = w->status;
    if (w->status == 0) {
        /* They go once the done object is in the bucket (gc_reap_finished). */
        free(gc->finished);
        gc->finished = run->marked;
        gc->nfinished = run->nmarked;
        run->marked = NULL;
        uint64_t sizes = 0;
        for (size_t k = 0; k < gc->nfinished; k++) {
            const struct db_pack_use *u = use_of(run, gc->finished[k]);
            sizes += u ? u->size : 0;
        }
        /* What the packs gave back, less what their live records take in the copies. */
        run->res->bytes_reclaimed += sizes > run->row.copied ? sizes - run->row.copied : 0;
    }
    run_end(run);
}

static void run_finish(struct repack_run *run)
{
    if (run->a.mode == GC_REPACK_FINISH && run->status == 0 && !run->failed) {
        run->dbw =
            (struct db_write){.apply = finished_apply, .done = finished_done, .durable = true};
        db_write(run->gc->db, &run->dbw);
        return;
    }
    run_end(run);
}

/* Whether gc may change a pack: this daemon's own writer's (or writer 0's, when it owns those). */
static bool own_pack(const struct gc *gc, uint64_t seq)
{
    unsigned widx = DB_PACK_WIDX(seq);
    return widx == gc->cfg.own_widx || (widx == 0 && gc->cfg.owns_writer0);
}

static int start_pack(struct repack_run *run, const struct db_pack_use *u, bool dead)
{
    struct repack_pack *p = calloc(1, sizeof(*p));

    if (!p)
        return -ENOMEM;
    p->run = run;
    p->seq = u->seq;
    p->size = u->size;
    p->dead = dead_bytes(u);
    p->delete_only = dead;
    if (uv_queue_work(run->gc->loop, &p->work, gc_repack_pack_work, pack_done) < 0) {
        free(p);
        return -ENOMEM;
    }
    return 0;
}

static void run_next(struct repack_run *run)
{
    struct gc *gc = run->gc;
    uint64_t open_seq = packer_open_seq(gc->pk);

    /* FINISH: the mark's packs, whatever they hold; what lives now is worked out per pack. */
    while (run->a.mode == GC_REPACK_FINISH && run->next_marked < run->nmarked) {
        const struct db_pack_use *u = use_of(run, run->marked[run->next_marked++]);
        if (!u || u->state != DB_PACK_MARKED || !own_pack(gc, u->seq))
            continue;
        if ((run->status = start_pack(run, u, false)) == 0)
            return;
        break;
    }
    while (run->a.mode != GC_REPACK_FINISH && run->next < run->nuse) {
        struct db_pack_use *u = &run->use[run->next++];
        bool open = u->seq == open_seq && u->state == DB_PACK_OPEN;
        bool sealed = u->seq != open_seq && u->state == DB_PACK_SEALED;
        /* Leaving already, or another writer's: not for rewriting. */
        if (!(open || sealed) || u->size == 0 || !own_pack(gc, u->seq))
            continue;
        bool dead = u->live_rows == 0;
        if (run->a.mode == GC_REPACK_MARK && dead != run->a.dead)
            continue;
        /*
         * Written to now: it is rewritten once sealed (usage_done seals it
         * when it is worth it), and until then its dead bytes stay.
         */
        if (open) {
            run->res->bytes_dead += dead_bytes(u);
            continue;
        }
        if (!dead && !worth_rewriting(gc, u)) {
            run->res->bytes_dead += dead_bytes(u);
            continue;
        }
        if (!dead && u->size > REPACK_MAX_FACTOR * gc->cfg.pack_size + (64u << 20)) {
            log_warn("gc: pack %016" PRIx64 " is too large to rewrite (%" PRIu64 " bytes)", u->seq,
                     u->size);
            run->res->bytes_dead += dead_bytes(u);
            continue;
        }
        if ((run->status = start_pack(run, u, dead)) == 0)
            return; /* one pack at a time: memory holds one pack and its copy */
        break;
    }
    run_finish(run);
}

/* FINISH: the mark's row, and its packs as numbers (worker). */
static int load_mark(struct repack_run *run)
{
    struct db *db = run->gc->db;
    struct db_mark *rows;
    struct gcmark m;
    uint64_t own;
    size_t n;
    int r;

    if ((r = db_writer_id(db, run->gc->cfg.own_widx, &own)) < 0 ||
        (r = db_marks(db, &rows, &n)) < 0)
        return r;
    r = -ENOENT;
    for (size_t i = 0; i < n; i++) {
        if (rows[i].writer != own || rows[i].gen != run->a.gen)
            continue;
        run->row = rows[i];
        rows[i].body = rows[i].done = NULL;
        r = 0;
    }
    db_marks_free(rows, n);
    if (r < 0 || (r = gcmark_parse(run->row.body, run->row.body_len, &m)) < 0)
        return r < 0 ? r : -EIO;
    run->mark = (struct gcmark){.done = true, .writer = own, .gen = run->a.gen};
    if (!(run->marked = calloc(m.npacks ? m.npacks : 1, sizeof(*run->marked))))
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < m.npacks; i++) {
        uint64_t w, seq;
        unsigned widx = 0;
        if (pack_key_parse(m.packs[i], &w, &seq) < 0 || (w && db_writer_index(db, w, &widx) < 0))
            continue;
        run->marked[run->nmarked++] = DB_PACK_NUMBER(widx, seq);
    }
    gcmark_clear(&m);
    return r;
}

static void usage_work(uv_work_t *work)
{
    struct repack_run *run = container_of(work, struct repack_run, work);

    if (run->a.mode == GC_REPACK_FINISH && !run->marked && (run->status = load_mark(run)) < 0)
        return;
    run->status = db_pack_usage(run->gc->db, run->safe_gen, &run->use, &run->nuse);
}

static void usage_done(uv_work_t *work, int status);

static void rotated(void *ctx)
{
    struct repack_run *run = ctx;

    free(run->use);
    run->use = NULL;
    run->nuse = 0;
    if (uv_queue_work(run->gc->loop, &run->work, usage_work, usage_done) < 0) {
        run->status = -ENOMEM;
        run_finish(run);
    }
}

/*
 * Packs with nothing alive first (deleting one needs no room), then those
 * with the fewest live bytes to copy, then by sequence: on a nearly full
 * disk the space they give back is what a rewrite of the others needs for
 * the live records it copies.
 */
static int use_cmp(const void *a, const void *b)
{
    const struct db_pack_use *x = a, *y = b;

    if ((x->live_rows == 0) != (y->live_rows == 0))
        return x->live_rows == 0 ? -1 : 1;
    if (x->live != y->live)
        return x->live < y->live ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void usage_done(uv_work_t *work, int status)
{
    struct repack_run *run = container_of(work, struct repack_run, work);
    struct gc *gc = run->gc;
    uint64_t open_seq = packer_open_seq(gc->pk);

    if (status < 0)
        run->status = status;
    if (run->status != 0) {
        run_finish(run);
        return;
    }
    if (run->nuse > 1)
        qsort(run->use, run->nuse, sizeof(*run->use), use_cmp);
    /* The pack being written holds dead records too: sealed now, it can be rewritten. */
    for (size_t i = 0; !run->rotated && run->a.mode != GC_REPACK_FINISH && i < run->nuse; i++) {
        struct db_pack_use *u = &run->use[i];
        if (u->seq == open_seq && u->state == DB_PACK_OPEN && u->size > 0 &&
            worth_rewriting(gc, u)) {
            run->rotated = true;
            if (packer_rotate(gc->pk, rotated, run) == 0)
                return;
        }
    }
    run_next(run);
}

void gc_repack(struct gc *gc, const struct gc_repack_args *a, struct gc_result *res,
               gc_repack_cb *cb, void *ctx)
{
    struct repack_run *run = calloc(1, sizeof(*run));
    uint64_t own;

    if (!run) {
        cb(ctx, -ENOMEM);
        return;
    }
    run->gc = gc;
    run->a = *a;
    run->safe_gen = a->safe_gen;
    if (a->mode == GC_REPACK_MARK && db_writer_id(gc->db, gc->cfg.own_widx, &own) == 0) {
        run->mark = (struct gcmark){.writer = own, .gen = a->gen};
        run->row = (struct db_mark){.writer = own, .gen = a->gen, .state = DB_MARK_OWN_COPIED};
    }
    run->res = res;
    run->cb = cb;
    run->ctx = ctx;
    if (uv_queue_work(gc->loop, &run->work, usage_work, usage_done) < 0) {
        free(run);
        cb(ctx, -ENOMEM);
    }
}
