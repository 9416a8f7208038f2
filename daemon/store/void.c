/*
 * Cancelling what a client was told failed. A group's records are in a pack
 * before its database changes apply (packer.h); when those fail, the
 * group's journal entries are still in the pack, and a replay from it, a
 * rebuild or another writer of a shared bucket would apply them: an add the
 * client saw fail would appear. So each of them gets a void entry
 * (objects.h), written after it, before the failure is reported.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/format/objects.h"
#include "daemon/pack/packer.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"

struct store_void {
    struct store *st;
    uv_work_t work;
    struct packer_group g;
    struct packer_rec *recs;
    uint8_t (*ids)[PROTO_HASH_LEN]; /* the entries cancelled */
    size_t n;
    uint64_t ticket, time_ns;
    int status;
    void (*cb)(void *ctx);
    void *ctx;
};

static void void_end(struct store_void *sv)
{
    struct store *st = sv->st;

    if (sv->status != 0)
        log_error("store: %zu journal entr%s of a failed operation could not be cancelled (%s): "
                  "a rebuild from the packs, or another writer of the bucket, may apply %s",
                  sv->n, sv->n == 1 ? "y" : "ies", strerror(sv->status < 0 ? -sv->status : EIO),
                  sv->n == 1 ? "it" : "them");
    for (size_t i = 0; sv->recs && i < sv->n; i++)
        store_rec_clear(&sv->recs[i]);
    free(sv->recs);
    free(sv->ids);
    st->active--;
    sv->cb(sv->ctx);
    free(sv);
}

static void void_written(struct packer_group *g, int status)
{
    struct store_void *sv = container_of(g, struct store_void, g);

    /* In the pack, the void does its work even if the database failed again. */
    sv->status = g->written ? 0 : status;
    void_end(sv);
}

static void encode_work(uv_work_t *work)
{
    struct store_void *sv = container_of(work, struct store_void, work);

    if (!(sv->recs = calloc(sv->n, sizeof(*sv->recs)))) {
        sv->status = -ENOMEM;
        return;
    }
    for (size_t i = 0; sv->status == 0 && i < sv->n; i++) {
        struct entry e = {.op = ENTRY_VOID, .time_ns = sv->time_ns};
        memcpy(e.doc, sv->ids[i], PROTO_HASH_LEN);
        sv->status = store_entry_record(sv->st, &e, &sv->recs[i]);
    }
}

static void encode_done(uv_work_t *work, int status)
{
    struct store_void *sv = container_of(work, struct store_void, work);

    if (status < 0 && sv->status == 0)
        sv->status = status;
    if (sv->status != 0) {
        packer_cancel(sv->st->packer, sv->ticket);
        void_end(sv);
        return;
    }
    sv->g = (struct packer_group){
        .recs = sv->recs, .nrecs = sv->n, .ticket = sv->ticket, .done = void_written};
    packer_submit(sv->st->packer, &sv->g);
}

bool store_void_entries(struct store *st, const struct packer_group *failed, void (*cb)(void *ctx),
                        void *ctx)
{
    struct store_void *sv;
    size_t n = 0;

    if (!failed->written)
        return false;
    for (size_t i = 0; i < failed->nrecs; i++)
        n += failed->recs[i].type == PACK_REC_ENTRY;
    if (n == 0)
        return false;
    if (!(sv = calloc(1, sizeof(*sv))) || !(sv->ids = calloc(n, sizeof(*sv->ids)))) {
        free(sv);
        log_error("store: out of memory cancelling the journal entries of a failed operation");
        return false;
    }
    for (size_t i = 0; i < failed->nrecs; i++)
        if (failed->recs[i].type == PACK_REC_ENTRY)
            memcpy(sv->ids[sv->n++], failed->recs[i].id, PROTO_HASH_LEN);
    sv->st = st;
    sv->cb = cb;
    sv->ctx = ctx;
    /* After the entries it cancels, in the journal's order and the packs'. */
    sv->ticket = packer_reserve(st->packer);
    sv->time_ns = store_entry_time(st);
    if (uv_queue_work(st->loop, &sv->work, encode_work, encode_done) < 0) {
        packer_cancel(st->packer, sv->ticket);
        free(sv->ids);
        free(sv);
        log_error("store: cannot cancel the journal entries of a failed operation");
        return false;
    }
    st->active++;
    return true;
}
