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

#include "daemon/search/indexer.h"
#include "daemon/base/log.h"
#include "daemon/pack/packer.h"
#include "daemon/base/reserve.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

/* Rows swept per transaction. */
#define GC_PAGE 2048
/* Bloom filter: bits per expected id, hash functions, and the cap on its size. */
#define GC_BLOOM_BITS_PER_ID 12
#define GC_BLOOM_K 7
#define GC_BLOOM_MIN_BYTES (64u * 1024)
#define GC_BLOOM_MAX_BYTES (64u * 1024 * 1024)

struct gc_waiter {
    store_gc_cb *done;
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

struct store_gc {
    struct store *st;
    struct gc_waiter *waiters;
    int status;
    struct store_gc_result res;
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

static void bloom_positions(const struct store_gc *gc, const uint8_t *hash, uint64_t pos[])
{
    uint64_t a, b;

    /* Ids are SHA-256: their bits are uniform already; the seed varies them per run. */
    memcpy(&a, hash, 8);
    memcpy(&b, hash + 8, 8);
    a ^= gc->seed;
    b = (b ^ (gc->seed >> 1)) | 1;
    for (int i = 0; i < GC_BLOOM_K; i++)
        pos[i] = (a + (uint64_t)i * b) % gc->bloom_bits;
}

static void bloom_add(struct store_gc *gc, const uint8_t *hash)
{
    uint64_t pos[GC_BLOOM_K];
    bloom_positions(gc, hash, pos);
    for (int i = 0; i < GC_BLOOM_K; i++)
        gc->bloom[pos[i] / 8] |= (uint8_t)(1u << (pos[i] % 8));
}

static bool bloom_has(void *ctx, const uint8_t hash[PROTO_HASH_LEN])
{
    struct store_gc *gc = ctx;
    uint64_t pos[GC_BLOOM_K];

    bloom_positions(gc, hash, pos);
    for (int i = 0; i < GC_BLOOM_K; i++) {
        if (!(gc->bloom[pos[i] / 8] & (1u << (pos[i] % 8))))
            return false;
    }
    return true;
}

/* ---- finishing ---- */

static void gc_finish(struct store_gc *gc)
{
    struct store *st = gc->st;
    struct gc_waiter *w = gc->waiters;

    st->gc = NULL;
    if (gc->status == 0)
        log_info("gc: %" PRIu64 " packs rewritten, %" PRIu64 " deleted, %" PRIu64
                 " bytes reclaimed, %" PRIu64 " bytes still dead, %" PRIu64
                 " packs could not be rewritten",
                 gc->res.packs_rewritten, gc->res.packs_deleted, gc->res.bytes_reclaimed,
                 gc->res.bytes_dead, gc->res.packs_failed);
    while (w) {
        struct gc_waiter *next = w->next;
        w->done(w->userdata, gc->status, &gc->res);
        free(w);
        w = next;
    }
    for (size_t i = 0; i < gc->nroots; i++)
        free(gc->roots[i].root);
    free(gc->roots);
    free(gc->bloom);
    free(gc);
}

static uint64_t safe_generation(struct store *st);

/* ---- mark (worker) ---- */

static int mark_chunk(void *ctx, const struct manifest_entry *e)
{
    bloom_add(ctx, e->hash);
    return 0;
}

static int mark_manifest(void *ctx, int64_t rowid, unsigned depth, const uint8_t *root,
                         size_t root_len)
{
    struct store_gc *gc = ctx;
    return store_walk_manifest(gc->st, depth, root, root_len, STORE_WALK_SEGMENTS, mark_chunk, gc);
}

static void mark_work(uv_work_t *work)
{
    struct store_gc *gc = container_of(work, struct store_gc, work);
    struct db_totals t;
    uint64_t bytes;
    int r;

    /* gc must work on a full disk: it is how room comes back. */
    if (gc->st->cfg.reserve)
        reserve_adjust(gc->st->cfg.reserve);
    if ((r = db_totals(gc->st->db, &t)) < 0) {
        gc->status = r;
        return;
    }
    if (!gc->bloom) {
        bytes = (t.chunks + 1) * GC_BLOOM_BITS_PER_ID / 8;
        if (bytes < GC_BLOOM_MIN_BYTES)
            bytes = GC_BLOOM_MIN_BYTES;
        if (bytes > GC_BLOOM_MAX_BYTES)
            bytes = GC_BLOOM_MAX_BYTES;
        gc->bloom_bits = bytes * 8;
        if (!(gc->bloom = calloc(1, bytes))) {
            gc->status = -ENOMEM;
            return;
        }
    }
    r = db_each_manifest(gc->st->db, mark_manifest, gc);
    for (size_t i = 0; r == 0 && i < gc->nroots; i++)
        r = mark_manifest(gc, -1, gc->roots[i].depth, gc->roots[i].root, gc->roots[i].root_len);
    /*
     * A document whose manifest cannot be read cannot be marked: gc stops
     * rather than condemn what it may still use.
     */
    if (r != 0)
        gc->status = r < 0 ? r : -EIO;
}

static void phase_next(struct store_gc *gc);
static void gc_repacked(void *ctx, int status);

static void mark_done(uv_work_t *work, int status)
{
    struct store_gc *gc = container_of(work, struct store_gc, work);

    if (status < 0)
        gc->status = status;
    phase_next(gc);
}

/* The manifests running gets read: their chunks stay even if the document goes. */
static int copy_roots(struct store_gc *gc)
{
    struct store *st = gc->st;
    size_t n = 0;

    for (struct store_op *op = st->ops_head; op; op = op->next)
        n += op->root != NULL;
    for (size_t i = 0; i < gc->nroots; i++)
        free(gc->roots[i].root);
    free(gc->roots);
    gc->roots = calloc(n ? n : 1, sizeof(*gc->roots));
    gc->nroots = 0;
    if (!gc->roots)
        return -ENOMEM;
    for (struct store_op *op = st->ops_head; op; op = op->next) {
        if (!op->root)
            continue;
        struct gc_root *r = &gc->roots[gc->nroots];
        if (!(r->root = malloc(op->root_len ? op->root_len : 1)))
            return -ENOMEM;
        memcpy(r->root, op->root, op->root_len);
        r->root_len = op->root_len;
        r->depth = op->depth;
        gc->nroots++;
    }
    return 0;
}

static void mark_start(struct store_gc *gc)
{
    int r = copy_roots(gc);

    /*
     * Which condemnations may go is fixed before the mark's snapshot: only
     * when every operation that could rely on a condemned row has ended by
     * now are its commits in what the mark reads.
     */
    gc->safe_gen = safe_generation(gc->st);
    if (r == 0) {
        if (gc->bloom)
            memset(gc->bloom, 0, gc->bloom_bits / 8);
        gc->seed = uv_hrtime() * 0x9e3779b97f4a7c15ull;
        r = uv_queue_work(gc->st->loop, &gc->work, mark_work, mark_done);
    }
    if (r < 0) {
        gc->status = r;
        gc_finish(gc);
    }
}

/* ---- sweep (writer) ---- */

static int sweep_apply(struct db_txn *txn, struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);
    /* A revive-only sweep condemns nothing: gen 0 asks for that. */
    return db_txn_condemn_page(txn, gc->table, gc->cursor, GC_PAGE, bloom_has, gc,
                               gc->revive_only ? 0 : gc->gen, &gc->condemned, &gc->revived,
                               &gc->sweep_done);
}

static void sweep_step(struct store_gc *gc);

static void sweep_done(struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);

    if (w->status != 0) {
        gc->status = w->status < 0 ? w->status : -EIO;
        gc_finish(gc);
        return;
    }
    if (gc->sweep_done && gc->table == DB_TABLE_CHUNKS) {
        gc->table = DB_TABLE_SEGMENTS;
        memset(gc->cursor, 0, sizeof(gc->cursor));
        gc->sweep_done = false;
    }
    if (gc->sweep_done) {
        phase_next(gc);
        return;
    }
    sweep_step(gc);
}

static void sweep_step(struct store_gc *gc)
{
    gc->dbw = (struct db_write){.apply = sweep_apply, .done = sweep_done};
    db_write(gc->st->db, &gc->dbw);
}

static void sweep_start(struct store_gc *gc, bool revive_only)
{
    gc->revive_only = revive_only;
    gc->table = DB_TABLE_CHUNKS;
    memset(gc->cursor, 0, sizeof(gc->cursor));
    gc->sweep_done = false;
    sweep_step(gc);
}

/* ---- which condemnations are safe now ---- */

/*
 * The newest run whose condemnations no running operation predates. Runs of
 * earlier lives of the daemon are all safe: their operations are gone.
 */
static uint64_t safe_generation(struct store *st)
{
    uint64_t oldest = store_oldest_op(st), safe = st->gc_safe_gen;
    size_t i = 0;

    for (; i < st->ngc_barriers; i++) {
        if (st->gc_barriers[i].barrier > oldest)
            break;
        safe = st->gc_barriers[i].gen;
    }
    /* The oldest operation only gets younger: barriers passed once stay passed. */
    st->gc_safe_gen = safe;
    if (i > 0) {
        memmove(st->gc_barriers, st->gc_barriers + i,
                (st->ngc_barriers - i) * sizeof(*st->gc_barriers));
        st->ngc_barriers -= i;
    }
    return safe;
}

static int record_barrier(struct store *st, uint64_t gen, uint64_t barrier)
{
    struct store_gc_barrier *grown =
        realloc(st->gc_barriers, (st->ngc_barriers + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    st->gc_barriers = grown;
    st->gc_barriers[st->ngc_barriers++] = (struct store_gc_barrier){gen, barrier};
    return 0;
}

/* ---- progress ---- */

bool store_gc_progress(struct store *st, struct store_progress *out)
{
    static const char *const names[] = {
        [GC_GENERATION] = "start", [GC_MARK] = "mark",     [GC_SWEEP] = "sweep",
        [GC_REMARK] = "mark",      [GC_RESWEEP] = "sweep", [GC_REPACK] = "repack",
    };
    const struct store_gc *gc = st->gc;

    if (!gc)
        return false;
    atomic_store_explicit(&out->phase, names[gc->phase], memory_order_relaxed);
    /* Repack: the packs rewritten or deleted so far (the result counts them as they go). */
    atomic_store_explicit(&out->done,
                          gc->phase == GC_REPACK ? gc->res.packs_rewritten + gc->res.packs_deleted
                                                 : 0,
                          memory_order_relaxed);
    atomic_store_explicit(&out->total, 0, memory_order_relaxed);
    return true;
}

/* ---- the phases ---- */

static int gen_apply(struct db_txn *txn, struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);
    return db_txn_gc_generation(txn, &gc->gen);
}

static void gen_done(struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);

    if (w->status != 0) {
        gc->status = w->status < 0 ? w->status : -EIO;
        gc_finish(gc);
        return;
    }
    phase_next(gc);
}

static void phase_next(struct store_gc *gc)
{
    struct store *st = gc->st;

    if (gc->status != 0) {
        gc_finish(gc);
        return;
    }
    switch (gc->phase) {
    case GC_GENERATION:
        gc->phase = GC_MARK;
        mark_start(gc);
        break;
    case GC_MARK:
        gc->phase = GC_SWEEP;
        sweep_start(gc, false);
        break;
    case GC_SWEEP:
        /* Every operation that may have relied on a row condemned now started before this. */
        gc->barrier = st->next_op_seq;
        if ((gc->status = record_barrier(st, gc->gen, gc->barrier)) < 0) {
            gc_finish(gc);
            return;
        }
        if (store_oldest_op(st) >= gc->barrier) {
            if (gc->ops_at_start || gc->barrier != gc->start_seq) {
                /* They have all ended: mark again so what they committed is revived. */
                gc->phase = GC_REMARK;
                mark_start(gc);
                return;
            }
            /* None ran while gc did: the mark saw everything, so this run's condemnations may go.
             */
            gc->safe_gen = gc->gen;
        }
        gc->phase = GC_RESWEEP;
        phase_next(gc);
        break;
    case GC_REMARK:
        gc->phase = GC_RESWEEP;
        sweep_start(gc, true);
        break;
    case GC_RESWEEP:
        gc->phase = GC_REPACK;
        store_repack(st, gc->safe_gen, &gc->res, gc_repacked, gc);
        break;
    case GC_REPACK:
        gc_finish(gc);
        break;
    }
}

static void gc_repacked(void *ctx, int status)
{
    struct store_gc *gc = ctx;

    if (status != 0 && gc->status == 0)
        gc->status = status;
    phase_next(gc);
}

void store_gc_ops_ended(struct store *st)
{
    store_reap(st);
}

static void gc_begin(void *ctx, int status)
{
    struct store_gc *gc = ctx;

    gc->start_seq = gc->st->next_op_seq;
    gc->ops_at_start = gc->st->ops_head != NULL;
    gc->dbw = (struct db_write){.apply = gen_apply, .done = gen_done};
    db_write(gc->st->db, &gc->dbw);
}

int store_gc(struct store *st, store_gc_cb *done, void *userdata)
{
    struct gc_waiter *w = calloc(1, sizeof(*w));
    struct store_gc *gc;

    if (!w)
        return -ENOMEM;
    w->done = done;
    w->userdata = userdata;
    if (st->gc) {
        w->next = st->gc->waiters;
        st->gc->waiters = w;
        return 0;
    }
    gc = calloc(1, sizeof(*gc));
    if (!gc) {
        free(w);
        return -ENOMEM;
    }
    gc->st = st;
    gc->waiters = w;
    gc->phase = GC_GENERATION;
    st->gc = gc;
    /*
     * A deleted document's chunks stay until the search index has taken its
     * entry out (that needs its text): waiting for the index lets a gc right
     * after a delete reclaim it.
     */
    if (indexer_wait(st->indexer, gc_begin, gc) < 0)
        gc_begin(gc, 0);
    return 0;
}
