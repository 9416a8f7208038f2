/*
 * Editing a document's tags and metadata (PROTOCOL.md `edit`). Tags and
 * metadata belong to the document, not to a name: one edit entry
 * (objects.h) says what is added and removed, and goes to the pack writer
 * with the database change in the same batch, as a delete's entries do, so
 * a rebuild, a replay and the other writers of a shared bucket make the
 * same change in the same place in the journal.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/format/objects.h"
#include "daemon/pack/packer.h"
#include "daemon/store/refcache.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"

struct store_edit {
    struct store *st;
    store_edit_cb *done;
    void *userdata;
    char *ref;
    size_t ref_len;
    struct store_edit_params p;
    uv_work_t work;
    int status;
    int final_status; /* the commit's failure, told once its entry is cancelled (void.c) */
    uint64_t ticket, time_ns;
    char hash[PROTO_HASH_HEX + 1];
    struct db_edit ed;
    struct packer_rec rec;
    struct packer_group g;
};

void store_edit_params_clear(struct store_edit_params *p)
{
    char **lists[] = {p->tags, p->untags, p->meta_keys, p->meta_values, p->unmeta};
    size_t counts[] = {p->ntags, p->nuntags, p->nmeta, p->nmeta, p->nunmeta};

    for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
        for (size_t i = 0; lists[l] && i <= counts[l]; i++)
            free(lists[l][i]);
        free(lists[l]);
    }
    memset(p, 0, sizeof(*p));
}

static void edit_end(struct store_edit *se, int status)
{
    struct store_edit_result res = {.hash = se->hash, .changed = se->ed.changed};

    if (se->ticket)
        packer_cancel(se->st->packer, se->ticket);
    se->done(se->userdata, status, status == 0 ? &res : NULL);
    if (se->rec.bytes)
        store_rec_clear(&se->rec);
    store_edit_params_clear(&se->p);
    free(se->ref);
    se->st->active--;
    free(se);
}

static void prepare_work(uv_work_t *work)
{
    struct store_edit *se = container_of(work, struct store_edit, work);
    struct store_edit_params *p = &se->p;
    struct db_doc doc;
    int r;

    if ((r = db_resolve(se->st->db, se->ref, se->ref_len, 0, &doc)) != 0) {
        se->status = r;
        return;
    }
    memcpy(se->hash, doc.hash, sizeof(se->hash));
    db_doc_clear(&doc);
    struct entry e = {
        .op = ENTRY_EDIT,
        .time_ns = se->time_ns,
        .tags = p->tags,
        .ntags = p->ntags,
        .untags = p->untags,
        .nuntags = p->nuntags,
        .meta_keys = p->meta_keys,
        .meta_values = p->meta_values,
        .nmeta = p->nmeta,
        .unmeta = p->unmeta,
        .nunmeta = p->nunmeta,
    };
    proto_hex_decode(se->hash, PROTO_HASH_HEX, e.doc, PROTO_HASH_LEN);
    se->status = store_entry_record(se->st, &e, &se->rec);
    se->ed = (struct db_edit){
        .tags = (const char *const *)p->tags,
        .ntags = p->ntags,
        .untags = (const char *const *)p->untags,
        .nuntags = p->nuntags,
        .meta_keys = (const char *const *)p->meta_keys,
        .meta_values = (const char *const *)p->meta_values,
        .nmeta = p->nmeta,
        .unmeta = (const char *const *)p->unmeta,
        .nunmeta = p->nunmeta,
    };
}

static int edit_apply(struct db_txn *txn, struct packer_group *g)
{
    struct store_edit *se = container_of(g, struct store_edit, g);

    if (store_test_fails_apply(se->st, se->ref))
        return -EIO;
    /* DB_E_NOT_FOUND: deleted meanwhile; the entry then changes nothing anywhere. */
    return db_txn_edit(txn, se->hash, &se->ed);
}

static void edit_voided(void *ctx)
{
    struct store_edit *se = ctx;

    edit_end(se, store_commit_status(se->final_status));
}

static void edit_committed(struct packer_group *g, int status)
{
    struct store_edit *se = container_of(g, struct store_edit, g);
    struct store *st = se->st;

    se->ticket = 0; /* used */
    if (status != 0 && status != DB_E_NOT_FOUND) {
        /* Its entry may be in a pack already: cancelled before the failure is told. */
        se->final_status = status;
        if (!store_void_entries(st, g, edit_voided, se))
            edit_voided(se);
        return;
    }
    if (status == 0) {
        refcache_forget_doc(st->refs, se->hash);
        if (se->ed.changed)
            store_index_changed(st, se->ed.rowid, NULL, 0);
    }
    edit_end(se, store_status_from_db(status));
}

static void prepare_done(uv_work_t *work, int status)
{
    struct store_edit *se = container_of(work, struct store_edit, work);

    if (status < 0 || se->status != 0) {
        edit_end(se, status < 0 ? status : store_status_from_db(se->status));
        return;
    }
    se->g.recs = &se->rec;
    se->g.nrecs = 1;
    se->g.ticket = se->ticket;
    se->g.apply = edit_apply;
    se->g.done = edit_committed;
    packer_submit(se->st->packer, &se->g);
}

int store_edit(struct store *st, const char *ref, size_t ref_len, struct store_edit_params *params,
               store_edit_cb *done, void *userdata)
{
    struct store_edit *se = calloc(1, sizeof(*se));
    int r;

    if (!se || !(se->ref = strndup(ref, ref_len))) {
        free(se);
        store_edit_params_clear(params);
        return -ENOMEM;
    }
    se->st = st;
    se->done = done;
    se->userdata = userdata;
    se->ref_len = ref_len;
    se->p = *params; /* taken over */
    memset(params, 0, sizeof(*params));
    /* Its place in the journal is taken now: events apply in the order they were asked for. */
    se->ticket = packer_reserve(st->packer);
    se->time_ns = store_entry_time(st);
    r = uv_queue_work(st->loop, &se->work, prepare_work, prepare_done);
    if (r < 0) {
        packer_cancel(st->packer, se->ticket);
        store_edit_params_clear(&se->p);
        free(se->ref);
        free(se);
        return r;
    }
    st->active++;
    return 0;
}
