/*
 * Copying and renaming names (PROTOCOL.md `name`). A copy gives the
 * document a ref points to one more name: an add entry of that document (its
 * manifest root, no content) with the new name and the file mode and mtime
 * of the version copied, so a rebuild, a replay and the other writers of a
 * shared bucket make the same version. A rename is that copy and an unname
 * entry for each document the old name points to: the old name goes, every
 * version of it, and no document is deleted (an older version the old name
 * held stays stored, by its hash). As a delete, one worker job resolves the
 * ref and encodes the entries, and they go to the pack writer with the
 * database change in the same batch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/format/objects.h"
#include "daemon/pack/packer.h"
#include "daemon/store/refcache.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"

struct store_name {
    struct store *st;
    store_name_cb *done;
    void *userdata;
    char *ref, *name;
    size_t ref_len;
    bool rename;
    uv_work_t work;
    int status;
    int final_status; /* the commit's failure, told once its entries are cancelled (void.c) */
    uint64_t ticket, time_ns;
    struct db_doc doc;        /* what the ref resolved to */
    struct db_name_doc *olds; /* rename: every document the old name points to */
    size_t nolds;
    struct db_add dba;
    struct packer_rec *recs;
    size_t nrecs;
    struct packer_group g;
};

static void name_end(struct store_name *sn, int status)
{
    struct store_name_result res = {0};

    if (sn->ticket)
        packer_cancel(sn->st->packer, sn->ticket);
    if (status == 0) {
        res = (struct store_name_result){
            .hash = sn->doc.hash,
            .name = sn->name,
            .from = sn->doc.by_name ? sn->doc.name : NULL,
            .renamed = sn->rename,
        };
    }
    sn->done(sn->userdata, status, status == 0 ? &res : NULL);
    for (size_t i = 0; i < sn->nrecs; i++)
        store_rec_clear(&sn->recs[i]);
    free(sn->recs);
    free(sn->olds);
    db_doc_clear(&sn->doc);
    free(sn->ref);
    free(sn->name);
    sn->st->active--;
    free(sn);
}

static int push_entry(struct store_name *sn, const struct entry *e)
{
    int r = store_entry_record(sn->st, e, &sn->recs[sn->nrecs]);

    if (r == 0)
        sn->nrecs++;
    return r;
}

/* The document, the entries, and the database change they make. */
static int prepare(struct store_name *sn)
{
    struct db_doc *d = &sn->doc;
    int r;

    r = db_resolve(sn->st->db, sn->ref, sn->ref_len, DB_WANT_MANIFEST, d);
    if (r != 0)
        return r;
    if (sn->rename && !d->by_name)
        return STORE_E_NOT_A_NAME;
    if (sn->rename && strcmp(d->name, sn->name) == 0)
        return STORE_E_SAME_NAME;
    if (sn->rename && (r = db_name_docs(sn->st->db, d->name, &sn->olds, &sn->nolds)) != 0)
        return r;
    if (!(sn->recs = calloc(1 + sn->nolds, sizeof(*sn->recs))))
        return -ENOMEM;
    struct entry add = {
        .op = ENTRY_ADD,
        .time_ns = sn->time_ns,
        .size = d->size,
        .nchunks = d->nchunks,
        .stored = d->stored_size,
        .text = d->text,
        .mime = d->mime,
        .name = sn->name,
        .fmode = d->fattr.mode,
        .fmtime = d->fattr.mtime,
        .depth = d->depth,
        .root = d->root,
        .root_len = d->root_len,
    };
    proto_hex_decode(d->hash, PROTO_HASH_HEX, add.doc, PROTO_HASH_LEN);
    if ((r = push_entry(sn, &add)) < 0)
        return r;
    for (size_t i = 0; i < sn->nolds; i++) {
        struct entry un = {.op = ENTRY_UNNAME, .time_ns = sn->time_ns, .name = d->name};
        proto_hex_decode(sn->olds[i].hash, PROTO_HASH_HEX, un.doc, PROTO_HASH_LEN);
        if ((r = push_entry(sn, &un)) < 0)
            return r;
    }
    sn->dba = (struct db_add){
        .size = d->size,
        .nchunks = d->nchunks,
        .stored = d->stored_size,
        .mime = d->mime,
        .name = sn->name,
        .fattr = d->fattr,
        .depth = d->depth,
        .root = d->root,
        .root_len = d->root_len,
        .text = d->text,
        .created_at = (int64_t)(sn->time_ns / 1000000000u),
        .event_ns = sn->time_ns,
    };
    memcpy(sn->dba.hash, add.doc, PROTO_HASH_LEN);
    memcpy(sn->dba.event_id, sn->recs[0].id, PROTO_HASH_LEN);
    return 0;
}

static void prepare_work(uv_work_t *work)
{
    struct store_name *sn = container_of(work, struct store_name, work);

    sn->status = prepare(sn);
}

static int name_apply(struct db_txn *txn, struct packer_group *g)
{
    struct store_name *sn = container_of(g, struct store_name, g);
    int64_t rowid;
    int r;

    if (store_test_fails_apply(sn->st, sn->name))
        return -EIO;
    if ((r = db_txn_add(txn, &sn->dba)) < 0)
        return r;
    /* The document was deleted meanwhile: the name has nothing to point to. */
    if (sn->dba.created)
        return DB_E_NOT_FOUND;
    for (size_t i = 0; i < sn->nolds; i++)
        if ((r = db_txn_unname(txn, sn->doc.name, sn->olds[i].hash, &rowid)) < 0)
            return r;
    return 0;
}

static void name_voided(void *ctx)
{
    struct store_name *sn = ctx;

    name_end(sn, store_commit_status(sn->final_status));
}

static void name_committed(struct packer_group *g, int status)
{
    struct store_name *sn = container_of(g, struct store_name, g);
    struct store *st = sn->st;

    sn->ticket = 0; /* used */
    if (status != 0) {
        /* Its entries may be in a pack already: cancelled before the failure is told. */
        sn->final_status = status;
        if (!store_void_entries(st, g, name_voided, sn))
            name_voided(sn);
        return;
    }
    refcache_forget_name(st->refs, sn->name);
    refcache_forget_doc(st->refs, sn->doc.hash);
    if (sn->rename) {
        refcache_forget_name(st->refs, sn->doc.name);
        for (size_t i = 0; i < sn->nolds; i++)
            refcache_forget_doc(st->refs, sn->olds[i].hash);
    }
    /* Names are indexed for search: the documents' entries are stale. */
    if (sn->dba.index_changed)
        store_index_changed(st, sn->dba.rowid, NULL, 0);
    name_end(sn, 0);
}

static void prepare_done(uv_work_t *work, int status)
{
    struct store_name *sn = container_of(work, struct store_name, work);

    if (status < 0 || sn->status != 0) {
        name_end(sn, status < 0 ? status : store_status_from_db(sn->status));
        return;
    }
    sn->g.recs = sn->recs;
    sn->g.nrecs = sn->nrecs;
    sn->g.ticket = sn->ticket;
    sn->g.apply = name_apply;
    sn->g.done = name_committed;
    packer_submit(sn->st->packer, &sn->g);
}

int store_name(struct store *st, const char *ref, size_t ref_len, const char *name, bool rename,
               store_name_cb *done, void *userdata)
{
    struct store_name *sn = calloc(1, sizeof(*sn));
    int r;

    if (!sn || !(sn->ref = strndup(ref, ref_len)) || !(sn->name = strdup(name))) {
        if (sn)
            free(sn->ref);
        free(sn);
        return -ENOMEM;
    }
    sn->st = st;
    sn->done = done;
    sn->userdata = userdata;
    sn->ref_len = ref_len;
    sn->rename = rename;
    /* Its place in the journal is taken now: events apply in the order they were asked for. */
    sn->ticket = packer_reserve(st->packer);
    sn->time_ns = store_entry_time(st);
    r = uv_queue_work(st->loop, &sn->work, prepare_work, prepare_done);
    if (r < 0) {
        packer_cancel(st->packer, sn->ticket);
        free(sn->ref);
        free(sn->name);
        free(sn);
        return r;
    }
    st->active++;
    return 0;
}
