/*
 * Garbage collection: mark, condemn, then reclaim by rewriting packs.
 *
 *   0. Wait for the search index: a deleted document's chunks stay until its
 *      index entry is out (that takes its text). If the index fails, gc
 *      goes on and keeps what its pending removals need.
 *   1. Mark: every chunk and manifest segment that a document (or a pending
 *      index removal, or a running get) reaches goes into a Bloom filter,
 *      whose size the store's size sets and a cap bounds. A false positive
 *      only keeps a dead chunk one run longer; each run uses a new seed.
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
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/gc/gc.h"

#include "daemon/base/log.h"
#include "daemon/base/reserve.h"
#include "daemon/format/manifest.h"
#include "daemon/gc/gc-int.h"
#include "daemon/meta/db.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"
#include "proto/util.h"

/* Rows swept per transaction. */
#define GC_PAGE 2048
/* Bloom filter: bits per expected id, hash functions, and the cap on its size. */
#define GC_BLOOM_BITS_PER_ID 12
#define GC_BLOOM_K 7
#define GC_BLOOM_MIN_BYTES (64u * 1024)
#define GC_BLOOM_MAX_BYTES (64u * 1024 * 1024)

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
    GC_GENERATION,
    GC_MARK,
    GC_SWEEP,
    GC_REMARK,
    GC_RESWEEP,
    GC_REPACK,
};

struct gc_run {
    struct gc *gc;
    struct gc_waiter *waiters;
    int status;
    struct gc_result res;
    enum gc_phase phase;
    uint64_t gen, start_seq, barrier, safe_gen;
    bool ops_at_start;
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
};

/* ---- the Bloom filter ---- */

static void bloom_positions(const struct gc_run *run, const uint8_t *hash, uint64_t pos[])
{
    uint64_t a, b;

    /* Ids are SHA-256: their bits are uniform already; the seed varies them per run. */
    memcpy(&a, hash, 8);
    memcpy(&b, hash + 8, 8);
    a ^= run->seed;
    b = (b ^ (run->seed >> 1)) | 1;
    for (int i = 0; i < GC_BLOOM_K; i++)
        pos[i] = (a + (uint64_t)i * b) % run->bloom_bits;
}

static void bloom_add(struct gc_run *run, const uint8_t *hash)
{
    uint64_t pos[GC_BLOOM_K];
    bloom_positions(run, hash, pos);
    for (int i = 0; i < GC_BLOOM_K; i++)
        run->bloom[pos[i] / 8] |= (uint8_t)(1u << (pos[i] % 8));
}

static bool bloom_has(void *ctx, const uint8_t hash[PROTO_HASH_LEN])
{
    struct gc_run *run = ctx;
    uint64_t pos[GC_BLOOM_K];

    bloom_positions(run, hash, pos);
    for (int i = 0; i < GC_BLOOM_K; i++) {
        if (!(run->bloom[pos[i] / 8] & (1u << (pos[i] % 8))))
            return false;
    }
    return true;
}

/* ---- finishing ---- */

static void gc_finish(struct gc_run *run)
{
    struct gc *gc = run->gc;
    struct gc_waiter *w = run->waiters;

    gc->run = NULL;
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
    free(run);
}

static uint64_t safe_generation(struct gc *gc);

/* ---- mark (worker) ---- */

static int mark_chunk(void *ctx, const struct manifest_entry *e)
{
    bloom_add(ctx, e->hash);
    return 0;
}

static int mark_manifest(void *ctx, int64_t rowid, unsigned depth, const uint8_t *root,
                         size_t root_len)
{
    struct gc_run *run = ctx;
    return store_walk_manifest(run->gc->st, depth, root, root_len, STORE_WALK_SEGMENTS, mark_chunk,
                               run);
}

static void mark_work(uv_work_t *work)
{
    struct gc_run *run = container_of(work, struct gc_run, work);
    struct db_totals t;
    uint64_t bytes;
    int r;

    /* gc must work on a full disk: it is how room comes back. */
    if (run->gc->reserve)
        reserve_adjust(run->gc->reserve);
    if ((r = db_totals(run->gc->db, &t)) < 0) {
        run->status = r;
        return;
    }
    if (!run->bloom) {
        bytes = (t.chunks + 1) * GC_BLOOM_BITS_PER_ID / 8;
        if (bytes < GC_BLOOM_MIN_BYTES)
            bytes = GC_BLOOM_MIN_BYTES;
        if (bytes > GC_BLOOM_MAX_BYTES)
            bytes = GC_BLOOM_MAX_BYTES;
        run->bloom_bits = bytes * 8;
        if (!(run->bloom = calloc(1, bytes))) {
            run->status = -ENOMEM;
            return;
        }
    }
    r = db_each_manifest(run->gc->db, mark_manifest, run);
    for (size_t i = 0; r == 0 && i < run->nroots; i++)
        r = mark_manifest(run, -1, run->roots[i].depth, run->roots[i].root, run->roots[i].root_len);
    /*
     * A document whose manifest cannot be read cannot be marked: gc stops
     * rather than condemn what it may still use.
     */
    if (r != 0)
        run->status = r < 0 ? r : -EIO;
}

static void phase_next(struct gc_run *run);
static void gc_repacked(void *ctx, int status);

static void mark_done(uv_work_t *work, int status)
{
    struct gc_run *run = container_of(work, struct gc_run, work);

    if (status < 0)
        run->status = status;
    phase_next(run);
}

/* The manifests running gets read: their chunks stay even if the document goes. */
static int copy_roots(struct gc_run *run)
{
    struct gc *gc = run->gc;
    size_t n = 0;

    for (const struct store_op *op = store_first_op(gc->st); op; op = op->next)
        n += op->root != NULL;
    for (size_t i = 0; i < run->nroots; i++)
        free(run->roots[i].root);
    free(run->roots);
    run->roots = calloc(n ? n : 1, sizeof(*run->roots));
    run->nroots = 0;
    if (!run->roots)
        return -ENOMEM;
    for (const struct store_op *op = store_first_op(gc->st); op; op = op->next) {
        if (!op->root)
            continue;
        struct gc_root *r = &run->roots[run->nroots];
        if (!(r->root = malloc(op->root_len ? op->root_len : 1)))
            return -ENOMEM;
        memcpy(r->root, op->root, op->root_len);
        r->root_len = op->root_len;
        r->depth = op->depth;
        run->nroots++;
    }
    return 0;
}

static void mark_start(struct gc_run *run)
{
    int r = copy_roots(run);

    /*
     * Which condemnations may go is fixed before the mark's snapshot: only
     * when every operation that could rely on a condemned row has ended by
     * now are its commits in what the mark reads.
     */
    run->safe_gen = safe_generation(run->gc);
    if (r == 0) {
        if (run->bloom)
            memset(run->bloom, 0, run->bloom_bits / 8);
        run->seed = uv_hrtime() * 0x9e3779b97f4a7c15ull;
        r = uv_queue_work(run->gc->loop, &run->work, mark_work, mark_done);
    }
    if (r < 0) {
        run->status = r;
        gc_finish(run);
    }
}

/* ---- sweep (writer) ---- */

static int sweep_apply(struct db_txn *txn, struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);
    /* A revive-only sweep condemns nothing: gen 0 asks for that. */
    return db_txn_condemn_page(txn, run->table, run->cursor, GC_PAGE, bloom_has, run,
                               run->revive_only ? 0 : run->gen, &run->condemned, &run->revived,
                               &run->sweep_done);
}

static void sweep_step(struct gc_run *run);

static void sweep_done(struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);

    if (w->status != 0) {
        run->status = w->status < 0 ? w->status : -EIO;
        gc_finish(run);
        return;
    }
    if (run->sweep_done && run->table == DB_TABLE_CHUNKS) {
        run->table = DB_TABLE_SEGMENTS;
        memset(run->cursor, 0, sizeof(run->cursor));
        run->sweep_done = false;
    }
    if (run->sweep_done) {
        phase_next(run);
        return;
    }
    sweep_step(run);
}

static void sweep_step(struct gc_run *run)
{
    run->dbw = (struct db_write){.apply = sweep_apply, .done = sweep_done};
    db_write(run->gc->db, &run->dbw);
}

static void sweep_start(struct gc_run *run, bool revive_only)
{
    run->revive_only = revive_only;
    run->table = DB_TABLE_CHUNKS;
    memset(run->cursor, 0, sizeof(run->cursor));
    run->sweep_done = false;
    sweep_step(run);
}

/* ---- which condemnations are safe now ---- */

/*
 * The newest run whose condemnations no running operation predates. Runs of
 * earlier lives of the daemon are all safe: their operations are gone.
 */
static uint64_t safe_generation(struct gc *gc)
{
    uint64_t oldest = store_oldest_op(gc->st), safe = gc->safe_gen;
    size_t i = 0;

    for (; i < gc->nbarriers; i++) {
        if (gc->barriers[i].barrier > oldest)
            break;
        safe = gc->barriers[i].gen;
    }
    /* The oldest operation only gets younger: barriers passed once stay passed. */
    gc->safe_gen = safe;
    if (i > 0) {
        memmove(gc->barriers, gc->barriers + i, (gc->nbarriers - i) * sizeof(*gc->barriers));
        gc->nbarriers -= i;
    }
    return safe;
}

static int record_barrier(struct gc *gc, uint64_t gen, uint64_t barrier)
{
    struct gc_barrier *grown = realloc(gc->barriers, (gc->nbarriers + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    gc->barriers = grown;
    gc->barriers[gc->nbarriers++] = (struct gc_barrier){gen, barrier};
    return 0;
}

/* ---- progress ---- */

bool gc_progress(struct gc *gc, struct store_progress *out)
{
    static const char *const names[] = {
        [GC_GENERATION] = "start", [GC_MARK] = "mark",     [GC_SWEEP] = "sweep",
        [GC_REMARK] = "mark",      [GC_RESWEEP] = "sweep", [GC_REPACK] = "repack",
    };
    const struct gc_run *run = gc->run;

    if (!run)
        return false;
    atomic_store_explicit(&out->phase, names[run->phase], memory_order_relaxed);
    /* Repack: the packs rewritten or deleted so far (the result counts them as they go). */
    atomic_store_explicit(
        &out->done, run->phase == GC_REPACK ? run->res.packs_rewritten + run->res.packs_deleted : 0,
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
        gc_finish(run);
        return;
    }
    phase_next(run);
}

static void phase_next(struct gc_run *run)
{
    struct gc *gc = run->gc;

    if (run->status != 0) {
        gc_finish(run);
        return;
    }
    switch (run->phase) {
    case GC_GENERATION:
        run->phase = GC_MARK;
        mark_start(run);
        break;
    case GC_MARK:
        run->phase = GC_SWEEP;
        sweep_start(run, false);
        break;
    case GC_SWEEP:
        /* Every operation that may have relied on a row condemned now started before this. */
        run->barrier = store_next_op(gc->st);
        if ((run->status = record_barrier(gc, run->gen, run->barrier)) < 0) {
            gc_finish(run);
            return;
        }
        if (store_oldest_op(gc->st) >= run->barrier) {
            if (run->ops_at_start || run->barrier != run->start_seq) {
                /* They have all ended: mark again so what they committed is revived. */
                run->phase = GC_REMARK;
                mark_start(run);
                return;
            }
            /* None ran while gc did: the mark saw everything, so this run's condemnations may go.
             */
            run->safe_gen = run->gen;
        }
        run->phase = GC_RESWEEP;
        phase_next(run);
        break;
    case GC_REMARK:
        run->phase = GC_RESWEEP;
        sweep_start(run, true);
        break;
    case GC_RESWEEP:
        run->phase = GC_REPACK;
        gc_repack(gc, run->safe_gen, &run->res, gc_repacked, run);
        break;
    case GC_REPACK:
        gc_finish(run);
        break;
    }
}

static void gc_repacked(void *ctx, int status)
{
    struct gc_run *run = ctx;

    if (status != 0 && run->status == 0)
        run->status = status;
    phase_next(run);
}

static void ops_ended(void *ctx)
{
    gc_reap(ctx);
}

static void gc_begin(void *ctx, int status)
{
    struct gc_run *run = ctx;

    run->start_seq = store_next_op(run->gc->st);
    run->ops_at_start = store_first_op(run->gc->st) != NULL;
    run->dbw = (struct db_write){.apply = gen_apply, .done = gen_done};
    db_write(run->gc->db, &run->dbw);
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
    run->phase = GC_GENERATION;
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
    gc->cfg = *cfg;
    /* Runs of earlier lives of the daemon are all safe: their operations are gone. */
    if ((r = db_gc_generation(gc->db, &gc->safe_gen)) < 0) {
        free(gc);
        return r;
    }
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
    free(gc);
    return NULL;
}

bool gc_busy(const struct gc *gc)
{
    return gc->reaping != NULL;
}
