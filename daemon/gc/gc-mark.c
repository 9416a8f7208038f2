/*
 * gc's mark and sweep (gc.c has the whole run): what the documents, the
 * pending index removals and the running gets reach goes into a Bloom
 * filter; the sweep condemns the rows it does not hold and revives the
 * condemned ones it holds again. Which condemnations are safe to act on
 * follows from the barriers the sweeps leave.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/reserve.h"
#include "daemon/format/manifest.h"
#include "daemon/gc/gc-run.h"
#include "daemon/meta/db.h"
#include "daemon/store/store.h"
#include "proto/util.h"

/* Rows swept per transaction. */
#define GC_PAGE 2048
/* Bloom filter: bits per expected id, hash functions, and the cap on its size. */
#define GC_BLOOM_BITS_PER_ID 12
#define GC_BLOOM_K 7
#define GC_BLOOM_MIN_BYTES (64u * 1024)
#define GC_BLOOM_MAX_BYTES (64u * 1024 * 1024)

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

bool gc_bloom_has(void *ctx, const uint8_t hash[PROTO_HASH_LEN])
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
    if ((r = db_totals(run->gc->db, 0, &t)) < 0) {
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

static void mark_done(uv_work_t *work, int status)
{
    struct gc_run *run = container_of(work, struct gc_run, work);

    if (status < 0)
        run->status = status;
    gc_phase_next(run);
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

void gc_mark_start(struct gc_run *run)
{
    int r = copy_roots(run);

    /*
     * Which condemnations may go is fixed before the mark's snapshot: only
     * when every operation that could rely on a condemned row has ended by
     * now are its commits in what the mark reads.
     */
    run->safe_gen = gc_safe_generation(run->gc);
    if (r == 0) {
        if (run->bloom)
            memset(run->bloom, 0, run->bloom_bits / 8);
        run->seed = uv_hrtime() * 0x9e3779b97f4a7c15ull;
        r = uv_queue_work(run->gc->loop, &run->work, mark_work, mark_done);
    }
    if (r < 0) {
        run->status = r;
        gc_run_finish(run);
    }
}

/* ---- sweep (writer) ---- */

static int sweep_apply(struct db_txn *txn, struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);
    /* A revive-only sweep condemns nothing: gen 0 asks for that. */
    return db_txn_condemn_page(txn, run->table, run->cursor, GC_PAGE, gc_bloom_has, run,
                               run->revive_only ? 0 : run->gen, &run->condemned, &run->revived,
                               &run->sweep_done);
}

static void sweep_step(struct gc_run *run);

static void sweep_done(struct db_write *w)
{
    struct gc_run *run = container_of(w, struct gc_run, dbw);

    if (w->status != 0) {
        run->status = w->status < 0 ? w->status : -EIO;
        gc_run_finish(run);
        return;
    }
    if (run->sweep_done && run->table == DB_TABLE_CHUNKS) {
        run->table = DB_TABLE_SEGMENTS;
        memset(run->cursor, 0, sizeof(run->cursor));
        run->sweep_done = false;
    }
    if (run->sweep_done) {
        gc_phase_next(run);
        return;
    }
    sweep_step(run);
}

static void sweep_step(struct gc_run *run)
{
    run->dbw = (struct db_write){.apply = sweep_apply, .done = sweep_done};
    db_write(run->gc->db, &run->dbw);
}

void gc_sweep_start(struct gc_run *run, bool revive_only)
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
uint64_t gc_safe_generation(struct gc *gc)
{
    uint64_t oldest = store_oldest_holder(gc->st), safe = gc->safe_gen;
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

int gc_record_barrier(struct gc *gc, uint64_t gen, uint64_t barrier)
{
    struct gc_barrier *grown = realloc(gc->barriers, (gc->nbarriers + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    gc->barriers = grown;
    gc->barriers[gc->nbarriers++] = (struct gc_barrier){gen, barrier};
    return 0;
}
