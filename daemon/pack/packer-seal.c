/*
 * Sealing: the open pack's index and trailer are appended, then the database
 * records the pack as sealed. Only backends with appends have an open pack;
 * without, every batch is written as a sealed pack of its own (packer.c).
 */
#include "daemon/pack/packer-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/crash.h"
#include "daemon/format/record.h"
#include "daemon/meta/db.h"
#include "daemon/base/log.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

void packer_key(struct packer *pk, uint64_t pack, char *key, size_t len)
{
    /* The pack writer writes its own writer's packs, which the database always knows. */
    if (db_pack_key(pk->db, pack, key, len) < 0) {
        log_error("pack %016" PRIx64 ": no such writer", pack);
        key[0] = '\0'; /* no key: the backend refuses it */
    }
}

/* A failed backend call, for the log. */
const char *packer_status_str(int status)
{
    switch (status) {
    case BACKEND_E_NOT_FOUND:
        return "the pack is missing";
    case BACKEND_E_TOO_LARGE:
        return "too large for the backend";
    case BACKEND_E_UNAVAILABLE:
        return "backend unavailable";
    case BACKEND_E_EXISTS:
        return "the pack exists already";
    default:
        return status < 0 ? strerror(-status) : "backend error";
    }
}

/* The seal of a pack: its index and trailer appended, then the database told. */
struct packer_seal {
    struct packer *pk;
    void (*cb)(void *ctx); /* packer_rotate's caller, told when the seal is in */
    void *ctx;
    uint64_t seq, size;
    uint8_t *bytes;
    struct iovec iov;
    struct backend_append app;
    struct db_write dbw;
};

static int seal_apply(struct db_txn *txn, struct db_write *w)
{
    struct packer_seal *s = container_of(w, struct packer_seal, dbw);
    return db_txn_pack_set(txn, s->seq, s->size, DB_PACK_SEALED);
}

static void seal_end(struct packer_seal *s)
{
    s->pk->seals--;
    if (s->cb)
        s->cb(s->ctx);
    free(s);
}

static void seal_committed(struct db_write *w)
{
    /* A failed update only means replay checks the trailer; the pack is sealed all the same. */
    seal_end(container_of(w, struct packer_seal, dbw));
}

static void on_sealed(struct backend_req *req)
{
    struct packer_seal *s = container_of(req, struct packer_seal, app.req);
    struct packer *pk = s->pk;

    /* The index is written; the database still has the pack as open. */
    crash_point("pack-sealed");
    free(s->bytes);
    s->bytes = NULL;
    if (req->status != 0) {
        log_error("pack %s: writing its index failed: %s; it stays readable unsealed", req->key,
                  packer_status_str(req->status));
        seal_end(s);
        return;
    }
    pk->stats.packs_sealed++;
    s->dbw.apply = seal_apply;
    s->dbw.done = seal_committed;
    db_write(pk->db, &s->dbw);
}

void packer_seal_start(struct packer *pk, void (*cb)(void *), void *ctx)
{
    struct packer_seal *s = calloc(1, sizeof(*s));
    size_t len = record_index_size(pk->nindex);
    uint64_t seq = pk->seq, size = pk->size;
    int r = -ENOMEM;

    if (pk->index_lost) {
        /* Replay reads an unsealed pack record by record; a partial index would hide some. */
        free(s);
        s = NULL;
    } else if (s && (s->bytes = malloc(len)) &&
               (r = record_index_encode(s->bytes, pk->index, pk->nindex, size, DB_PACK_SEQ(seq))) ==
                   0) {
        s->pk = pk;
        s->cb = cb;
        s->ctx = ctx;
        s->seq = seq;
        s->size = size + len;
        s->iov.iov_base = s->bytes;
        s->iov.iov_len = len;
        packer_key(pk, seq, s->app.req.key, sizeof(s->app.req.key));
        s->app.req.cb = on_sealed;
        s->app.offset = size;
        s->app.iov = &s->iov;
        s->app.iovcnt = 1;
        r = backend_append(pk->be, &s->app);
    }
    if (r < 0) {
        log_error("pack %016" PRIx64 ": cannot write its index: %s; it stays readable unsealed",
                  seq, strerror(-r));
        if (s)
            free(s->bytes);
        free(s);
        if (cb)
            cb(ctx);
    } else {
        pk->seals++;
    }
    free(pk->index);
    pk->index = NULL;
    pk->nindex = pk->index_cap = 0;
    pk->index_lost = false;
    pk->seq = pk->next_seq++;
    pk->size = 0;
}

int packer_rotate(struct packer *pk, void (*cb)(void *ctx), void *ctx)
{
    if (!backend_has(pk->be, BACKEND_CAP_APPEND) || pk->rotate_cb)
        return 1;
    if (pk->inflight) {
        pk->rotate_cb = cb; /* after the append: the batch may be the pack's first */
        pk->rotate_ctx = ctx;
        return 0;
    }
    if (pk->size == 0)
        return 1;
    packer_seal_start(pk, cb, ctx);
    return 0;
}

static void shared_sealed(void *ctx)
{
    (void)ctx;
}

void packer_set_shared(struct packer *pk)
{
    if (pk->whole_packs)
        return;
    pk->whole_packs = true;
    /* What the open pack holds reaches the others once it is sealed: now. */
    if (backend_has(pk->be, BACKEND_CAP_APPEND))
        packer_rotate(pk, shared_sealed, NULL);
}
