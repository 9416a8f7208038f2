#include "daemon/pack/packer-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meta/db.h"
#include "daemon/base/crash.h"
#include "daemon/base/log.h"
#include "daemon/pack/merge.h"
#include "daemon/format/record.h"
#include "daemon/format/record.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* A batch takes at most this many bytes of records (one group always fits). */
#define PACKER_BATCH_MAX (16u * 1024 * 1024)
/*
 * Batches written at once to a backend without appends (each is a pack of
 * its own), at most, and the bytes they may hold together. A remote store is
 * mostly waiting for the network: many small batches in flight let clients
 * with adds outstanding share round trips, while a large add's 16 MiB
 * batches stay two at a time, which bounds memory.
 */
#define PACKER_PUTS_MAX 8
#define PACKER_INFLIGHT_BYTES (32u * 1024 * 1024)
/*
 * Small blocks in one batch worth compressing together (merge.h). Below
 * this a batch is what a few clients send at once, and the extra job would
 * only add to their wait; a bulk load easily has this many.
 */
#define PACKER_MERGE_MIN 16

struct packer_batch {
    struct packer *pk;
    struct packer_group *groups;
    uint64_t seq;
    uint64_t start, end; /* byte range of the pack this batch wrote */
    bool whole_pack;     /* a backend without appends: the batch is a sealed pack */
    struct iovec *iov;
    unsigned iovcnt;
    uint8_t header[PACK_HEADER_SIZE];
    uint8_t *index_bytes; /* whole_pack: the index and trailer */
    struct pack_index_entry *index;
    size_t nindex;
    struct packer_rec *shared; /* merged blocks (merge.h), written instead of their members */
    size_t nshared;
    size_t nmergeable;
    uv_work_t merge_work;
    int merge_status;
    union {
        struct backend_append app;
        struct backend_put put;
    } io;
    /* The packer's batches in flight, oldest first; each ends in this order. */
    struct packer_batch *next_inflight;
    size_t bytes; /* of its records, counted in pk->inflight_bytes */
    bool io_done, io_started;
    int io_status;
    unsigned renumbered; /* numbers skipped because they existed */
    struct db_write dbw;
    int status;
};

int packer_new(struct packer **out, uv_loop_t *loop, struct backend *be, struct db *db,
               const struct packer_config *cfg, struct packer_resume *resume)
{
    struct packer *pk = calloc(1, sizeof(*pk));

    if (!pk)
        return -ENOMEM;
    pk->loop = loop;
    pk->be = be;
    pk->db = db;
    pk->cfg = *cfg;
    pk->next_ticket = pk->release_ticket = 1;
    pk->next_seq = resume->next_seq ? resume->next_seq : 1;
    if (resume->has_open && backend_has(be, BACKEND_CAP_APPEND)) {
        pk->seq = resume->open_seq;
        pk->size = resume->open_size;
        pk->index = resume->index;
        pk->nindex = pk->index_cap = resume->nindex;
        resume->index = NULL; /* taken over */
    } else {
        pk->seq = pk->next_seq++;
    }
    pk->max_inflight = 1;
    if (!backend_has(be, BACKEND_CAP_APPEND))
        pk->max_inflight = be->parallel < 2                 ? 1
                           : be->parallel < PACKER_PUTS_MAX ? be->parallel
                                                            : PACKER_PUTS_MAX;
    uv_idle_init(loop, &pk->kick);
    pk->kick.data = pk;
    *out = pk;
    return 0;
}

static void on_kick_closed(uv_handle_t *h)
{
    free(h->data);
}

struct packer *packer_free(struct packer *pk)
{
    if (!pk)
        return NULL;
    free(pk->index);
    free(pk->cancelled);
    uv_close((uv_handle_t *)&pk->kick, on_kick_closed);
    return NULL;
}

bool packer_busy(const struct packer *pk)
{
    return pk->inflight || pk->txns || pk->seals || pk->ready_head || pk->held;
}

uint64_t packer_open_seq(const struct packer *pk)
{
    return pk->seq;
}

void packer_get_stats(const struct packer *pk, struct packer_stats *out)
{
    *out = pk->stats;
}

static void batch_start(struct packer *pk);

static void on_kick(uv_idle_t *h)
{
    struct packer *pk = h->data;

    uv_idle_stop(h);
    pk->kick_active = false;
    batch_start(pk);
}

/* Starts a batch on the next loop turn, so groups queued in this turn share it. */
static void kick(struct packer *pk)
{
    if (!pk->kick_active && pk->inflight < pk->max_inflight) {
        pk->kick_active = true;
        uv_idle_start(&pk->kick, on_kick);
    }
}

static void ready_push(struct packer *pk, struct packer_group *g)
{
    g->next_ = NULL;
    if (pk->ready_tail)
        pk->ready_tail->next_ = g;
    else
        pk->ready_head = g;
    pk->ready_tail = g;
}

static bool take_cancelled(struct packer *pk, uint64_t ticket)
{
    for (size_t i = 0; i < pk->ncancelled; i++) {
        if (pk->cancelled[i] == ticket) {
            pk->cancelled[i] = pk->cancelled[--pk->ncancelled];
            return true;
        }
    }
    return false;
}

/* Moves every event group whose turn has come to the ready queue. */
static void release_tickets(struct packer *pk)
{
    for (;;) {
        if (pk->held && pk->held->ticket == pk->release_ticket) {
            struct packer_group *g = pk->held;
            pk->held = g->next_;
            ready_push(pk, g);
            pk->release_ticket++;
        } else if (take_cancelled(pk, pk->release_ticket)) {
            pk->release_ticket++;
        } else {
            break;
        }
    }
}

uint64_t packer_reserve(struct packer *pk)
{
    return pk->next_ticket++;
}

void packer_cancel(struct packer *pk, uint64_t ticket)
{
    if (pk->ncancelled == pk->cancelled_cap) {
        size_t cap = pk->cancelled_cap ? pk->cancelled_cap * 2 : 8;
        uint64_t *grown = realloc(pk->cancelled, cap * sizeof(*grown));
        if (!grown) {
            /* Without room to remember it, a later event would wait for ever: fail loudly. */
            log_error("packer: out of memory cancelling ticket %" PRIu64, ticket);
            abort();
        }
        pk->cancelled = grown;
        pk->cancelled_cap = cap;
    }
    pk->cancelled[pk->ncancelled++] = ticket;
    release_tickets(pk);
    if (pk->ready_head)
        kick(pk);
}

void packer_submit(struct packer *pk, struct packer_group *g)
{
    g->status_ = 0;
    g->next_ = NULL;
    if (g->ticket == 0) {
        ready_push(pk, g);
    } else {
        struct packer_group **pp = &pk->held;
        while (*pp && (*pp)->ticket < g->ticket)
            pp = &(*pp)->next_;
        g->next_ = *pp;
        *pp = g;
        release_tickets(pk);
    }
    if (pk->ready_head)
        kick(pk);
}

/* ---- index entries of what a batch wrote ---- */

static int index_push(struct pack_index_entry **v, size_t *n, size_t *cap,
                      const struct pack_index_entry *e)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        struct pack_index_entry *grown = realloc(*v, ncap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        *v = grown;
        *cap = ncap;
    }
    (*v)[(*n)++] = *e;
    return 0;
}

/* ---- batches ---- */

static void batch_free(struct packer_batch *b)
{
    for (size_t i = 0; i < b->nshared; i++) {
        free(b->shared[i].bytes);
        free(b->shared[i].idx);
    }
    free(b->shared);
    free(b->iov);
    free(b->index_bytes);
    free(b->index);
    free(b);
}

/* Ends every group of a batch with `status` (a failed append or commit). */
static void batch_fail(struct packer_batch *b, int status)
{
    struct packer_group *g = b->groups, *next;

    for (; g; g = next) {
        next = g->next_;
        g->written = false;
        g->done(g, status);
    }
    batch_free(b);
}

static int batch_apply(struct db_txn *txn, struct db_write *w);
static void batch_committed(struct db_write *w);

/* A rotation waited for the append that just ended: seal now. True when it did. */
static bool rotate_pending(struct packer *pk)
{
    void (*cb)(void *) = pk->rotate_cb;

    if (!cb)
        return false;
    pk->rotate_cb = NULL;
    if (pk->size > 0)
        packer_seal_start(pk, cb, pk->rotate_ctx);
    else
        cb(pk->rotate_ctx);
    return true;
}

/* The append (or put) of a batch ended. */
static void batch_written(struct packer_batch *b, int status)
{
    struct packer *pk = b->pk;

    /* The batch is durable in the pack; the database does not name it yet. */
    if (status == 0)
        crash_point("batch-written");
    if (status != 0) {
        char key[BACKEND_MAX_KEY];
        packer_key(pk, b->seq, key, sizeof(key));
        log_error("pack %s: writing %" PRIu64 " bytes failed: %s", key, b->end - b->start,
                  packer_status_str(status));
        if (!b->whole_pack && (pk->size == 0 || status == BACKEND_E_NOT_FOUND)) {
            /*
             * The pack could not even be created, or it is gone (what it held
             * is lost; verify reports it): the next batch starts a new one.
             */
            pk->seq = pk->next_seq++;
            pk->size = 0;
            pk->nindex = 0;
        }
        batch_fail(b, status == BACKEND_E_UNAVAILABLE ? PACKER_E_UNAVAILABLE
                      : status < 0                    ? status
                                                      : -EIO);
        rotate_pending(pk);
        batch_start(pk);
        return;
    }
    pk->stats.batches++;
    pk->stats.bytes += b->end - b->start;
    if (b->whole_pack) {
        pk->stats.packs_sealed++;
    } else {
        pk->size = b->end;
        for (size_t i = 0; i < b->nindex; i++) {
            if (index_push(&pk->index, &pk->nindex, &pk->index_cap, &b->index[i]) < 0) {
                /* An index without these would be wrong: the pack is left unsealed. */
                log_error("packer: out of memory for the index of pack %" PRIu64, pk->seq);
                pk->index_lost = true;
                break;
            }
        }
    }
    pk->txns++;
    for (struct packer_group *g = b->groups; g; g = g->next_)
        b->dbw.durable |= g->durable;
    b->dbw.apply = batch_apply;
    b->dbw.done = batch_committed;
    db_write(pk->db, &b->dbw);
    if (!rotate_pending(pk) && !b->whole_pack && (pk->size >= pk->cfg.pack_size || pk->index_lost))
        packer_seal_start(pk, NULL, NULL);
    batch_start(pk);
}

static void batch_io_done(struct packer_batch *b, int status, bool started);

static void on_append(struct backend_req *req)
{
    struct packer_batch *b = container_of(req, struct packer_batch, io.app.req);
    batch_io_done(b, req->status, true);
}

/* A whole-pack batch under another number: its records, header and trailer. */
static int renumber(struct packer_batch *b, uint64_t seq)
{
    b->seq = seq;
    for (struct packer_group *g = b->groups; g; g = g->next_) {
        for (size_t i = 0; i < g->nrecs; i++)
            if (!g->recs[i].merged)
                g->recs[i].pack = seq;
    }
    for (size_t i = 0; i < b->nshared; i++)
        b->shared[i].pack = seq;
    pack_header_encode(b->header, DB_PACK_SEQ(seq));
    return record_index_encode(b->index_bytes, b->index, b->nindex,
                               b->end - record_index_size(b->nindex), DB_PACK_SEQ(seq));
}

/* Numbers a whole-pack batch skips when they exist already, at most. */
#define PACKER_EXISTS_RETRIES 4

static void on_put(struct backend_req *req)
{
    struct packer_batch *b = container_of(req, struct packer_batch, io.put.req);
    struct packer *pk = b->pk;

    /*
     * The number is taken: by a write of an earlier life of this daemon that
     * landed after all (its put was cut by a kill, or reported failed). That
     * pack is this writer's own orphan, and replay orders its entries where
     * they belong; this batch goes under the next number.
     */
    if (req->status == BACKEND_E_EXISTS && b->renumbered < PACKER_EXISTS_RETRIES) {
        char key[BACKEND_MAX_KEY];
        packer_key(pk, b->seq, key, sizeof(key));
        log_warn("pack %s exists already (an earlier write of this writer); the batch goes under "
                 "the next number",
                 key);
        b->renumbered++;
        int r = renumber(b, pk->next_seq++);
        packer_key(pk, b->seq, b->io.put.req.key, sizeof(b->io.put.req.key));
        if (r == 0 && backend_put(pk->be, &b->io.put) == 0)
            return;
    }
    batch_io_done(b, req->status, true);
}

/* Places one record at `offset`: its index entries, and the iovec that writes it. */
static int place(struct packer_batch *b, struct packer_rec *rec, uint64_t offset, unsigned k,
                 size_t *cap)
{
    int r;

    rec->pack = b->seq;
    rec->offset = offset;
    for (size_t e = 0; e < rec->nidx; e++) {
        rec->idx[e].record_off = offset;
        rec->idx[e].record_len = (uint32_t)rec->len;
        if ((r = index_push(&b->index, &b->nindex, cap, &rec->idx[e])) < 0)
            return r;
    }
    b->iov[k].iov_base = rec->bytes;
    b->iov[k].iov_len = rec->len;
    return 0;
}

/*
 * Lays the batch's records out after `offset`, shared blocks first; fills
 * their locations and the index entries.
 */
static int batch_layout(struct packer_batch *b, uint64_t offset, unsigned first_iov)
{
    size_t cap = 0;
    unsigned k = first_iov;
    int r;

    for (size_t i = 0; i < b->nshared; i++) {
        if ((r = place(b, &b->shared[i], offset, k++, &cap)) < 0)
            return r;
        offset += b->shared[i].len;
    }
    for (struct packer_group *g = b->groups; g; g = g->next_) {
        for (size_t i = 0; i < g->nrecs; i++) {
            struct packer_rec *rec = &g->recs[i];
            if (rec->merged) {
                /* Its chunks are in a shared block: nothing of its own to write. */
                rec->pack = rec->merged->pack;
                rec->offset = rec->merged->offset;
                continue;
            }
            if ((r = place(b, rec, offset, k++, &cap)) < 0)
                return r;
            offset += rec->len;
        }
    }
    b->end = offset;
    return 0;
}

/* A batch that could not even start writing: its groups fail, the next batch may start. */
static void batch_aborted(struct packer_batch *b, int status)
{
    struct packer *pk = b->pk;

    batch_fail(b, status);
    rotate_pending(pk);
    if (pk->ready_head)
        kick(pk);
}

/*
 * A batch's write ended (started: it ran; else it could not start). Batches
 * end in the order they started, so that their transactions commit in the
 * order the groups came: a batch that finishes early waits for the older ones.
 */
static void batch_io_done(struct packer_batch *b, int status, bool started)
{
    struct packer *pk = b->pk;

    b->io_done = true;
    b->io_started = started;
    b->io_status = status;
    while (pk->inflight_head && pk->inflight_head->io_done) {
        struct packer_batch *h = pk->inflight_head;
        pk->inflight_head = h->next_inflight;
        if (!pk->inflight_head)
            pk->inflight_tail = NULL;
        pk->inflight--;
        pk->inflight_bytes -= h->bytes;
        if (h->io_started)
            batch_written(h, h->io_status);
        else
            batch_aborted(h, h->io_status);
    }
}

/* Lays the batch out and starts its append (or put). */
static void batch_write(struct packer_batch *b)
{
    struct packer *pk = b->pk;
    size_t nrecs = b->nshared;
    char key[BACKEND_MAX_KEY];
    int r;

    for (struct packer_group *g = b->groups; g; g = g->next_) {
        for (size_t i = 0; i < g->nrecs; i++)
            nrecs += !g->recs[i].merged;
    }
    b->iov = calloc(nrecs + 2, sizeof(*b->iov));
    if (!b->iov) {
        batch_io_done(b, -ENOMEM, false);
        return;
    }
    if (!b->whole_pack)
        b->seq = pk->seq;
    packer_key(pk, b->seq, key, sizeof(key));
    pack_header_encode(b->header, DB_PACK_SEQ(b->seq));
    b->start = b->whole_pack ? 0 : pk->size;
    if (b->start == 0) {
        b->iov[0].iov_base = b->header;
        b->iov[0].iov_len = PACK_HEADER_SIZE;
        r = batch_layout(b, PACK_HEADER_SIZE, 1);
        b->iovcnt = (unsigned)nrecs + 1;
    } else {
        r = batch_layout(b, b->start, 0);
        b->iovcnt = (unsigned)nrecs;
    }
    if (r == 0 && b->whole_pack) {
        size_t len = record_index_size(b->nindex);
        if (!(b->index_bytes = malloc(len))) {
            r = -ENOMEM;
        } else if ((r = record_index_encode(b->index_bytes, b->index, b->nindex, b->end,
                                            DB_PACK_SEQ(b->seq))) == 0) {
            b->iov[b->iovcnt].iov_base = b->index_bytes;
            b->iov[b->iovcnt].iov_len = len;
            b->iovcnt++;
            b->end += len;
        }
    }
    if (r < 0) {
        log_error("packer: cannot lay out a batch: %s", strerror(-r));
        batch_io_done(b, r, false);
        return;
    }
    if (b->whole_pack) {
        memcpy(b->io.put.req.key, key, sizeof(key));
        b->io.put.req.cb = on_put;
        b->io.put.iov = b->iov;
        b->io.put.iovcnt = b->iovcnt;
        b->io.put.flags = BACKEND_PUT_CREATE;
        r = backend_put(pk->be, &b->io.put);
    } else {
        memcpy(b->io.app.req.key, key, sizeof(key));
        b->io.app.req.cb = on_append;
        b->io.app.offset = b->start;
        b->io.app.iov = b->iov;
        b->io.app.iovcnt = b->iovcnt;
        r = backend_append(pk->be, &b->io.app);
    }
    if (r < 0) {
        log_error("pack %s: cannot start writing: %s", key, strerror(-r));
        batch_io_done(b, r, false);
        return;
    }
    pk->stats.appends++;
    pk->stats.records += nrecs;
}

/* The batch's small blocks, compressed together (worker). */
static void merge_work(uv_work_t *work)
{
    struct packer_batch *b = container_of(work, struct packer_batch, merge_work);
    struct packer_rec **recs;
    size_t n = 0;

    if (!(recs = malloc(b->nmergeable * sizeof(*recs)))) {
        b->merge_status = -ENOMEM;
        return;
    }
    for (struct packer_group *g = b->groups; g; g = g->next_) {
        for (size_t i = 0; i < g->nrecs; i++) {
            if (g->recs[i].mergeable)
                recs[n++] = &g->recs[i];
        }
    }
    b->merge_status = merge_blocks(recs, n, b->pk->cfg.compression_level, &b->shared, &b->nshared);
    free(recs);
}

static void merge_done(uv_work_t *work, int status)
{
    struct packer_batch *b = container_of(work, struct packer_batch, merge_work);

    /* Not merged, the blocks are written as they are: merging only saves space. */
    if (status == 0 && b->merge_status < 0)
        log_warn("packer: cannot merge small blocks: %s", strerror(-b->merge_status));
    batch_write(b);
}

/* Groups past their not_after_ms fail (their order among events does not matter: none is written).
 */
static void fail_late(struct packer_group *late)
{
    if (late)
        log_warn("packer: an add waited to be written longer than the bucket's gc allows "
                 "(the bucket could not be read for half the grace period); it fails");
    while (late) {
        struct packer_group *next = late->next_;
        late->written = false;
        late->done(late, PACKER_E_UNAVAILABLE);
        late = next;
    }
}

/* Takes the ready groups into a batch; merges their small blocks first when there are enough. */
static void batch_start(struct packer *pk)
{
    struct packer_batch *b;
    struct packer_group **tail, *late = NULL;
    uint64_t now = uv_hrtime() / 1000000;
    size_t bytes = 0;

    if (pk->inflight >= pk->max_inflight || !pk->ready_head ||
        (pk->inflight && pk->inflight_bytes >= PACKER_INFLIGHT_BYTES))
        return;
    if (!(b = calloc(1, sizeof(*b)))) {
        /* Try again on the next loop turn; nothing is lost while groups wait. */
        log_error("packer: out of memory starting a batch");
        kick(pk);
        return;
    }
    b->pk = pk;
    tail = &b->groups;
    while (pk->ready_head) {
        struct packer_group *g = pk->ready_head;
        size_t gbytes = 0, gmergeable = 0;
        if (g->not_after_ms && now > g->not_after_ms) {
            pk->ready_head = g->next_;
            g->next_ = late;
            late = g;
            continue;
        }
        for (size_t i = 0; i < g->nrecs; i++) {
            gbytes += g->recs[i].len;
            gmergeable += g->recs[i].mergeable;
        }
        if (b->groups && bytes + gbytes > PACKER_BATCH_MAX)
            break;
        pk->ready_head = g->next_;
        g->next_ = NULL;
        *tail = g;
        tail = &g->next_;
        bytes += gbytes;
        b->nmergeable += gmergeable;
    }
    if (!pk->ready_head)
        pk->ready_tail = NULL;
    if (!b->groups) {
        free(b);
        fail_late(late);
        return;
    }
    /* A pack of its own is numbered now, so that packs are numbered in batch order. */
    b->whole_pack = pk->whole_packs || !backend_has(pk->be, BACKEND_CAP_APPEND);
    if (b->whole_pack)
        b->seq = pk->next_seq++;
    if (pk->inflight_tail)
        pk->inflight_tail->next_inflight = b;
    else
        pk->inflight_head = b;
    pk->inflight_tail = b;
    pk->inflight++;
    b->bytes = bytes;
    pk->inflight_bytes += bytes;
    if (b->nmergeable >= PACKER_MERGE_MIN &&
        uv_queue_work(pk->loop, &b->merge_work, merge_work, merge_done) == 0) {
        fail_late(late);
        return;
    }
    batch_write(b);
    fail_late(late);
}

/* ---- the batch's transaction (writer thread) ---- */

/* Records where a new record went: chunk rows for a block, a segment row, a journal row. */
static int record_locations(struct db_txn *txn, const struct packer_rec *rec)
{
    /* A merged block's chunks are where its shared block put them. */
    const struct packer_rec *at = rec->merged ? rec->merged : rec;
    struct db_loc loc = {.pack = at->pack, .off = at->offset, .len = (uint32_t)at->len};
    uint32_t shift = rec->merged ? rec->merged_shift : 0;
    uint64_t raw = 0;
    int r = 0;

    if (rec->type == PACK_REC_MANIFEST) {
        loc.size = rec->nidx ? rec->idx[0].raw_size : 0;
        loc.stored = loc.len;
        return db_txn_segment_put(txn, rec->id, &loc);
    }
    if (rec->type == PACK_REC_ENTRY)
        return db_txn_journal_put(txn, rec->id, &loc, rec->doc, rec->time_ns, (int)rec->op, true);
    for (size_t i = 0; i < at->nidx; i++)
        raw += at->idx[i].raw_size;
    for (size_t i = 0; r == 0 && i < rec->nidx; i++) {
        loc.sub = shift + rec->idx[i].sub_off;
        loc.size = rec->idx[i].raw_size;
        /* A chunk's share of the block's stored bytes. */
        loc.stored = record_share(at->len, loc.size, raw);
        r = db_txn_chunk_put(txn, rec->idx[i].id, &loc);
    }
    return r;
}

static int batch_apply(struct db_txn *txn, struct db_write *w)
{
    struct packer_batch *b = container_of(w, struct packer_batch, dbw);
    int r;

    for (struct packer_group *g = b->groups; g; g = g->next_) {
        if ((r = db_txn_savepoint(txn)) < 0)
            return r;
        for (size_t i = 0; r == 0 && !g->own_locations && i < g->nrecs; i++)
            r = record_locations(txn, &g->recs[i]);
        if (r == 0 && g->apply)
            r = g->apply(txn, g);
        g->status_ = r;
        /* One group's failure leaves the others' changes in. */
        if ((r = db_txn_savepoint_end(txn, g->status_ != 0)) < 0)
            return r;
    }
    /* The pack is applied up to its end: replay starts after this batch. */
    return db_txn_pack_set(txn, b->seq, b->end, b->whole_pack ? DB_PACK_SEALED : DB_PACK_OPEN);
}

static void batch_committed(struct db_write *w)
{
    struct packer_batch *b = container_of(w, struct packer_batch, dbw);
    struct packer_group *g = b->groups, *next;

    b->pk->txns--;
    for (; g; g = next) {
        next = g->next_;
        g->written = true;
        g->done(g, w->status != 0 ? (w->status < 0 ? w->status : -EIO) : g->status_);
    }
    batch_free(b);
}
