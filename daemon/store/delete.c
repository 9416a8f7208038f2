/*
 * Deleting (PROTOCOL.md `delete`). By hash, the document goes with every
 * name pointing to it. By name, the name goes: an unname entry for each
 * document it points to, each followed by a delete that applies only if no
 * other name points to that document any more (objects.h). One worker job
 * resolves the ref and encodes the entries; they go to the pack writer with
 * the database change in the same batch, so the change is durable and
 * applied together, and a rebuild replays it the same way. The search index
 * drops or refreshes its entries after that (daemon/search).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/format/objects.h"
#include "daemon/pack/packer.h"
#include "daemon/store/refcache.h"
#include "daemon/base/reserve.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"

/* One document the delete touches. */
struct delete_doc {
    char hash[PROTO_HASH_HEX + 1];
    bool deleted;       /* predicted by the resolve, then what the commit did */
    int64_t kept_rowid; /* by name: its row id when kept with a name fewer, else 0 */
};

struct store_delete {
    struct store *st;
    store_delete_cb *done;
    void *userdata;
    char *ref;
    size_t ref_len;
    bool dry_run;
    uv_work_t work;
    int status;
    int final_status; /* the commit's failure, told once its entries are cancelled (void.c) */
    uint64_t ticket, time_ns;
    struct db_doc doc; /* what the ref resolved to */
    struct delete_doc *docs;
    size_t ndocs;
    const char **deleted; /* room for the result's list: ndocs hashes */
    /* By name: an unname and a conditional delete per document; else one delete. */
    struct packer_rec *recs;
    size_t nrecs;
    struct packer_group g;
};

static void delete_end(struct store_delete *del, int status)
{
    struct store_delete_result res = {0};
    const char *name = del->doc.by_name ? del->doc.name : NULL;
    size_t ndeleted = 0;

    if (del->ticket)
        packer_cancel(del->st->packer, del->ticket);
    if (status == 0) {
        /* The documents deleted, in the order found. */
        for (size_t i = 0; i < del->ndocs; i++)
            if (del->docs[i].deleted)
                del->deleted[ndeleted++] = del->docs[i].hash;
        res = (struct store_delete_result){
            .hash = del->doc.hash,
            .name = name,
            .names =
                name ? (const char *const *)&del->doc.name : (const char *const *)del->doc.names,
            .nnames = name ? 1 : del->doc.nnames,
            .deleted = del->deleted,
            .ndeleted = ndeleted,
            .dry_run = del->dry_run,
        };
        del->done(del->userdata, status, &res);
    } else {
        del->done(del->userdata, status, NULL);
    }
    for (size_t i = 0; i < del->nrecs; i++)
        store_rec_clear(&del->recs[i]);
    free(del->recs);
    free(del->docs);
    free(del->deleted);
    db_doc_clear(&del->doc);
    free(del->ref);
    del->st->active--;
    free(del);
}

/* Encodes one journal entry as the next record. */
static int add_entry(struct store_delete *del, const struct entry *e)
{
    int r = store_entry_record(del->st, e, &del->recs[del->nrecs]);

    if (r == 0)
        del->nrecs++;
    return r;
}

/* What the delete touches: the document, or every document the name points to. */
static int resolve(struct store_delete *del)
{
    struct db_name_doc *named;
    size_t n;
    int r;

    r = db_resolve(del->st->db, del->ref, del->ref_len, DB_WANT_DETAILS, &del->doc);
    if (r != 0)
        return r;
    if (!del->doc.by_name) {
        if (!(del->docs = calloc(1, sizeof(*del->docs))) ||
            !(del->deleted = calloc(1, sizeof(*del->deleted))))
            return -ENOMEM;
        memcpy(del->docs[0].hash, del->doc.hash, sizeof(del->doc.hash));
        del->docs[0].deleted = true;
        del->ndocs = 1;
        return 0;
    }
    if ((r = db_name_docs(del->st->db, del->doc.name, &named, &n)) != 0)
        return r;
    if (!(del->docs = calloc(n, sizeof(*del->docs))) ||
        !(del->deleted = calloc(n, sizeof(*del->deleted)))) {
        free(named);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(del->docs[i].hash, named[i].hash, sizeof(named[i].hash));
        del->docs[i].deleted = named[i].orphan;
    }
    del->ndocs = n;
    free(named);
    return 0;
}

static void resolve_work(uv_work_t *work)
{
    struct store_delete *del = container_of(work, struct store_delete, work);
    int r;

    /* A delete must work on a full disk: it is how room comes back. */
    if (!del->dry_run && del->st->cfg.reserve)
        reserve_adjust(del->st->cfg.reserve);
    if ((del->status = resolve(del)) != 0 || del->dry_run)
        return;
    if (!(del->recs = calloc(2 * del->ndocs, sizeof(*del->recs)))) {
        del->status = -ENOMEM;
        return;
    }
    for (size_t i = 0; i < del->ndocs; i++) {
        struct entry e = {.op = ENTRY_DELETE, .time_ns = del->time_ns};
        proto_hex_decode(del->docs[i].hash, PROTO_HASH_HEX, e.doc, PROTO_HASH_LEN);
        if (del->doc.by_name) {
            struct entry un = {.op = ENTRY_UNNAME, .time_ns = del->time_ns, .name = del->doc.name};
            memcpy(un.doc, e.doc, PROTO_HASH_LEN);
            if ((r = add_entry(del, &un)) < 0) {
                del->status = r;
                return;
            }
            e.if_unnamed = true;
        }
        if ((r = add_entry(del, &e)) < 0) {
            del->status = r;
            return;
        }
    }
}

static int delete_apply(struct db_txn *txn, struct packer_group *g)
{
    struct store_delete *del = container_of(g, struct store_delete, g);
    int r;

    if (del->doc.by_name && store_test_fails_apply(del->st, del->doc.name))
        return -EIO;
    /* By hash: the ref may name another document by now. */
    if (!del->doc.by_name)
        return db_txn_delete(txn, del->docs[0].hash);
    for (size_t i = 0; i < del->ndocs; i++) {
        struct delete_doc *dd = &del->docs[i];
        struct packer_rec *cond = &del->recs[2 * i + 1];
        if ((r = db_txn_unname(txn, del->doc.name, dd->hash, &dd->kept_rowid)) < 0 ||
            (r = db_txn_delete_if_unnamed(txn, dd->hash, &dd->deleted)) < 0)
            return r;
        if (dd->deleted)
            dd->kept_rowid = 0;
        /* A delete that did not apply keeps no journal row, as replay does. */
        else if ((r = db_txn_journal_applied(txn, cond->id, true)) < 0)
            return r;
    }
    return 0;
}

static void delete_voided(void *ctx)
{
    struct store_delete *del = ctx;

    delete_end(del, store_commit_status(del->final_status));
}

static void delete_committed(struct packer_group *g, int status)
{
    struct store_delete *del = container_of(g, struct store_delete, g);
    struct store *st = del->st;
    bool removed = false;

    del->ticket = 0; /* used */
    /* Its entries may be in a pack already: cancelled before the failure is told. */
    if (status != 0 && status != DB_E_NOT_FOUND) {
        del->final_status = status;
        if (store_void_entries(st, g, delete_voided, del))
            return;
    }
    if (status == 0) {
        if (del->doc.by_name)
            refcache_forget_name(st->refs, del->doc.name);
        for (size_t i = 0; i < del->ndocs; i++) {
            const struct delete_doc *dd = &del->docs[i];
            /* A cached entry of a document kept may still carry the name. */
            refcache_forget_doc(st->refs, dd->hash);
            removed |= dd->deleted;
        }
        if (removed)
            store_index_removed(st);
        /* What the index holds of the documents kept changed: their names. */
        for (size_t i = 0; i < del->ndocs; i++)
            if (del->docs[i].kept_rowid)
                store_index_changed(st, del->docs[i].kept_rowid, NULL, 0);
    }
    delete_end(del, store_commit_status(status));
}

static void resolve_done(uv_work_t *work, int status)
{
    struct store_delete *del = container_of(work, struct store_delete, work);

    if (status < 0 || del->status != 0 || del->dry_run) {
        delete_end(del, status < 0 ? status : store_status_from_db(del->status));
        return;
    }
    del->g.recs = del->recs;
    del->g.nrecs = del->nrecs;
    del->g.ticket = del->ticket;
    del->g.apply = delete_apply;
    del->g.done = delete_committed;
    packer_submit(del->st->packer, &del->g);
}

int store_delete(struct store *st, const char *ref, size_t ref_len, bool dry_run,
                 store_delete_cb *done, void *userdata)
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
    del->dry_run = dry_run;
    /* Its place in the journal is taken now: events apply in the order they were asked for. */
    if (!dry_run) {
        del->ticket = packer_reserve(st->packer);
        del->time_ns = store_entry_time(st);
    }
    r = uv_queue_work(st->loop, &del->work, resolve_work, resolve_done);
    if (r < 0) {
        if (del->ticket)
            packer_cancel(st->packer, del->ticket);
        free(del->ref);
        free(del);
        return r;
    }
    st->active++;
    return 0;
}
