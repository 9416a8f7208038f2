/*
 * Deleting a document: one worker job resolves the ref and encodes the
 * delete's journal entry (the tombstone that keeps a rebuild from bringing
 * the document back); the entry then goes to the pack writer with the
 * database change in the same batch, so the delete is durable and applied
 * together. The search index drops the entry after that (indexer.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/indexer.h"
#include "daemon/log.h"
#include "daemon/objects.h"
#include "daemon/packer.h"
#include "daemon/record.h"
#include "daemon/refcache.h"
#include "daemon/reserve.h"
#include "daemon/store-int.h"
#include "proto/util.h"

struct store_delete {
    struct store *st;
    store_delete_cb *done;
    void *userdata;
    char *ref;
    size_t ref_len;
    uv_work_t work;
    int status;
    uint64_t ticket, time_ns;
    char hash[PROTO_HASH_HEX + 1];
    struct packer_rec rec;
    struct packer_group g;
};

static void delete_end(struct store_delete *del, int status)
{
    if (del->ticket)
        packer_cancel(del->st->packer, del->ticket);
    del->done(del->userdata, status, del->hash);
    free(del->rec.bytes);
    free(del->rec.idx);
    free(del->ref);
    del->st->active--;
    free(del);
}

static void resolve_work(uv_work_t *work)
{
    struct store_delete *del = container_of(work, struct store_delete, work);
    struct entry e = {.is_delete = true, .time_ns = del->time_ns};
    struct db_doc doc;
    uint8_t *raw;
    size_t len;

    /* A delete must work on a full disk: it is how room comes back. */
    if (del->st->cfg.reserve)
        reserve_adjust(del->st->cfg.reserve);
    del->status = db_resolve(del->st->db, del->ref, del->ref_len, 0, &doc);
    if (del->status != 0)
        return;
    memcpy(del->hash, doc.hash, sizeof(del->hash));
    db_doc_clear(&doc);
    proto_hex_decode(del->hash, PROTO_HASH_HEX, e.doc, PROTO_HASH_LEN);
    if ((del->status = objects_entry_encode(&e, &raw, &len)) < 0)
        return;
    del->status = record_seal_build(PACK_REC_ENTRY, raw, len, del->st->cfg.compression_level,
                                    &del->rec.bytes, &del->rec.len, del->rec.id, &del->rec.idx);
    free(raw);
    del->rec.type = PACK_REC_ENTRY;
    del->rec.nidx = 1;
    memcpy(del->rec.doc, e.doc, PROTO_HASH_LEN);
    del->rec.time_ns = del->time_ns;
    del->rec.is_delete = true;
}

static int delete_apply(struct db_txn *txn, struct packer_group *g)
{
    struct store_delete *del = container_of(g, struct store_delete, g);
    /* By hash: the ref may name another document by now. */
    return db_txn_delete(txn, del->hash);
}

static void delete_committed(struct packer_group *g, int status)
{
    struct store_delete *del = container_of(g, struct store_delete, g);
    struct store *st = del->st;

    del->ticket = 0; /* used */
    if (status == 0) {
        refcache_forget_doc(st->refs, del->hash);
        indexer_removed(st->indexer);
    }
    /* DB_E_NOT_FOUND: deleted meanwhile by someone else. */
    delete_end(del, store_status_from_db(status));
}

static void resolve_done(uv_work_t *work, int status)
{
    struct store_delete *del = container_of(work, struct store_delete, work);

    if (status < 0 || del->status != 0) {
        delete_end(del, status < 0 ? status : store_status_from_db(del->status));
        return;
    }
    del->g.recs = &del->rec;
    del->g.nrecs = 1;
    del->g.ticket = del->ticket;
    del->g.apply = delete_apply;
    del->g.done = delete_committed;
    packer_submit(del->st->packer, &del->g);
}

int store_delete(struct store *st, const char *ref, size_t ref_len, store_delete_cb *done,
                 void *userdata)
{
    struct store_delete *del = calloc(1, sizeof(*del));
    int r;

    if (!del || !(del->ref = strndup(ref, ref_len))) {
        free(del);
        return -ENOMEM;
    }
    del->st = st;
    del->done = done;
    del->userdata = userdata;
    del->ref_len = ref_len;
    /* Its place in the journal is taken now: events apply in the order they were asked for. */
    del->ticket = packer_reserve(st->packer);
    del->time_ns = store_entry_time(st);
    r = uv_queue_work(st->loop, &del->work, resolve_work, resolve_done);
    if (r < 0) {
        packer_cancel(st->packer, del->ticket);
        free(del->ref);
        free(del);
        return r;
    }
    st->active++;
    return 0;
}
