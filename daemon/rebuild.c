/*
 * Rebuilding the metadata database from the backend (`cairnd --rebuild-index`).
 *
 * The journal entries say what happened and what each document is made of
 * (an add entry carries its manifest). A document whose last journal event is a
 * gone, and so is everything that happened to it before that delete; the
 * adds after it are replayed in journal order, each restoring the names, tags
 * and metadata it brought, with its original time. Text documents have their
 * content read back for the search index. Chunk objects no document uses are
 * recorded as unreferenced, so gc can remove them.
 *
 * This runs before the daemon serves anyone, so it drives the loop itself
 * and waits for each backend request in turn: simple, and the backend's own
 * batching is irrelevant to a one-off scan.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "daemon/log.h"
#include "daemon/objects.h"
#include "daemon/store-int.h"
#include "daemon/text.h"
#include "proto/util.h"
#include "storage/backend.h"

/* Documents applied per database transaction. */
#define REBUILD_BATCH 256

static void sync_cb(struct backend_req *req)
{
    *(bool *)req->userdata = true;
}

/* Runs one backend request to its end. */
static int sync_request(struct store *st, struct backend_req *req, enum backend_op op)
{
    bool done = false;
    int r;

    req->cb = sync_cb;
    req->userdata = &done;
    r = backend_start(st->be, req, op);
    if (r < 0)
        return r;
    while (!done)
        uv_run(st->loop, UV_RUN_ONCE);
    return req->status;
}

struct sync_write {
    struct db_write w;
    bool done;
    int (*apply)(struct db_txn *txn, void *ctx);
    void *ctx;
};

static void sync_write_done(struct db_write *w)
{
    container_of(w, struct sync_write, w)->done = true;
}

static int sync_apply(struct db_txn *txn, struct db_write *w)
{
    struct sync_write *sw = container_of(w, struct sync_write, w);
    return sw->apply(txn, sw->ctx);
}

static int sync_commit(struct store *st, int (*apply)(struct db_txn *, void *), void *ctx)
{
    struct sync_write sw = {
        .w = {.apply = sync_apply, .done = sync_write_done}, .apply = apply, .ctx = ctx};

    db_write(st->db, &sw.w);
    while (!sw.done)
        uv_run(st->loop, UV_RUN_ONCE);
    return sw.w.status;
}

/* Reads an object whole; BACKEND_E_* or negative errno on failure. */
static int read_object(struct store *st, const char *key, size_t max, uint8_t **out, size_t *len)
{
    struct backend_req req = {0};
    int r;

    snprintf(req.key, sizeof(req.key), "%s", key);
    req.max_len = max;
    r = sync_request(st, &req, BACKEND_OP_GET);
    if (r != 0) {
        backend_req_reset(&req);
        return r;
    }
    *out = req.out;
    *len = req.out_len;
    return 0;
}

static int list_keys(struct store *st, const char *prefix, char ***keys, size_t *n)
{
    struct backend_req req = {0};
    int r;

    snprintf(req.key, sizeof(req.key), "%s", prefix);
    r = sync_request(st, &req, BACKEND_OP_LIST);
    if (r != 0) {
        backend_req_reset(&req);
        return r < 0 ? r : -EIO;
    }
    *keys = req.keys;
    *n = req.nkeys;
    return 0;
}

static void free_keys(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

static int entry_cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->time_ns != y->time_ns)
        return x->time_ns < y->time_ns ? -1 : 1;
    return memcmp(x->doc, y->doc, PROTO_HASH_LEN);
}

/* What the replay needs per live add entry. */
struct doc_state {
    struct entry *e; /* its chunks get their stored sizes filled in */
    struct text_acc text;
    bool loaded;
};

struct replay_batch {
    struct doc_state *docs;
    size_t n;
    size_t applied;
};

static int apply_batch(struct db_txn *txn, void *ctx)
{
    struct replay_batch *b = ctx;

    for (size_t i = 0; i < b->n; i++) {
        struct doc_state *d = &b->docs[i];
        if (!d->loaded)
            continue;
        size_t text_len = 0;
        struct db_add add = {
            .size = d->e->size,
            .mime = d->e->mime,
            .name = d->e->name,
            .tags = (const char *const *)d->e->tags,
            .ntags = d->e->ntags,
            .meta_keys = (const char *const *)d->e->meta_keys,
            .meta_values = (const char *const *)d->e->meta_values,
            .nmeta = d->e->nmeta,
            .chunks = d->e->chunks,
            .nchunks = d->e->nchunks,
            .created_at = (int64_t)(d->e->time_ns / 1000000000u),
        };
        memcpy(add.hash, d->e->doc, PROTO_HASH_LEN);
        add.text = text_acc_text(&d->text, &text_len);
        add.text_len = text_len;
        int r = db_txn_add(txn, &add);
        if (r < 0)
            return r;
        b->applied++;
    }
    return 0;
}

/*
 * Reads a chunk object back and checks it against its id. 0 with the raw
 * bytes (malloc'd) and the object's stored size; BACKEND_E_NOT_FOUND when it
 * is missing; STORE_E_INTEGRITY when it is damaged; negative errno when the
 * backend cannot be read at all.
 */
static int read_chunk(struct store *st, const struct db_chunk *c, uint8_t **raw, size_t *raw_len,
                      uint32_t *stored_size)
{
    char key[BACKEND_MAX_KEY];
    uint8_t *obj;
    size_t len;
    int r;

    *raw = NULL;
    store_object_key(key, sizeof(key), "chunks", c->hash);
    r = read_object(st, key, compress_bound(STORE_MAX_CHUNK), &obj, &len);
    if (r == BACKEND_E_NOT_FOUND)
        return r;
    if (r == BACKEND_E_TOO_LARGE)
        return STORE_E_INTEGRITY;
    if (r != 0)
        return r < 0 ? r : -EIO;
    r = store_decode_chunk(obj, len, c, raw);
    free(obj);
    *raw_len = c->size;
    if (r == 0)
        *stored_size = (uint32_t)len;
    return r;
}

/*
 * Loads what an add entry's document needs: the stored size of each chunk,
 * and, for text, its content up to the index limit. Every chunk is read and
 * checked: a document with a missing or damaged chunk is not restored (its
 * add may never have completed: the entry can reach the disk before the
 * chunks when the daemon dies mid-add), and the log says which.
 */
static int load_doc(struct store *st, struct doc_state *d)
{
    char hex[PROTO_HASH_HEX + 1], chunk_hex[PROTO_HASH_HEX + 1];

    proto_hex_encode(d->e->doc, PROTO_HASH_LEN, hex);
    text_acc_init(&d->text, st->cfg.max_text);
    for (size_t i = 0; i < d->e->nchunks; i++) {
        struct db_chunk *c = &d->e->chunks[i];
        uint8_t *raw;
        size_t raw_len;
        int r = read_chunk(st, c, &raw, &raw_len, &c->stored_size);
        if (r < 0)
            return r; /* the backend itself failed: the rebuild cannot go on */
        if (r != 0) {
            proto_hex_encode(c->hash, PROTO_HASH_LEN, chunk_hex);
            log_warn("rebuild: document %s (%s) not restored: chunk %s is %s", hex,
                     d->e->name ? d->e->name : "no name", chunk_hex,
                     r == BACKEND_E_NOT_FOUND ? "missing" : "damaged");
            text_acc_clear(&d->text);
            return 0;
        }
        if (d->text.ok && d->text.len < d->text.max)
            text_acc_feed(&d->text, raw, raw_len, i + 1 == d->e->nchunks);
        free(raw);
    }
    if (d->e->nchunks == 0 || (d->text.ok && d->text.len >= d->text.max))
        text_acc_feed(&d->text, NULL, 0, true);
    d->loaded = true;
    return 0;
}

static int apply_orphans(struct db_txn *txn, void *ctx)
{
    struct replay_batch *b = ctx;
    for (size_t i = 0; i < b->n; i++) {
        int r = db_txn_orphan_chunk(txn, &b->docs[i].e->chunks[0]);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Records chunk objects that no restored document uses, so that gc sees them. */
static int record_orphans(struct store *st, size_t *norphans)
{
    char **keys;
    size_t nkeys, n = 0;
    struct db_chunk *known;
    size_t nknown;
    int r = list_keys(st, "chunks/", &keys, &nkeys);

    *norphans = 0;
    if (r < 0)
        return r;
    r = db_all_chunks(st->db, &known, &nknown);
    if (r < 0) {
        free_keys(keys, nkeys);
        return r;
    }
    struct db_chunk *orphans = calloc(nkeys ? nkeys : 1, sizeof(*orphans));
    if (!orphans) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nkeys; i++) {
        struct db_chunk c = {0};
        const char *hex = strchr(keys[i], '/') + 1;
        uint8_t *obj;
        size_t len;
        struct compress_header hdr;
        if (proto_hex_decode(hex, strlen(hex), c.hash, PROTO_HASH_LEN) < 0)
            continue;
        bool found = false;
        for (size_t lo = 0, hi = nknown; lo < hi && !found;) {
            size_t mid = (lo + hi) / 2;
            int cmp = memcmp(known[mid].hash, c.hash, PROTO_HASH_LEN);
            if (cmp == 0)
                found = true;
            else if (cmp < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (found || read_object(st, keys[i], compress_bound(STORE_MAX_CHUNK), &obj, &len) != 0)
            continue;
        /*
         * Only an intact object is recorded: a file torn by a crash must stay
         * unknown, so the next add of that chunk writes it again.
         */
        if (compress_header_parse(obj, len, &hdr) == 0 && hdr.raw_size <= STORE_MAX_CHUNK) {
            uint8_t *raw;
            c.size = (uint32_t)hdr.raw_size;
            c.stored_size = (uint32_t)len;
            if (store_decode_chunk(obj, len, &c, &raw) == 0) {
                orphans[n++] = c;
                free(raw);
            }
        }
        free(obj);
    }
    /* One pseudo-document per orphan keeps apply_orphans' loop simple. */
    struct doc_state *wrap = calloc(n ? n : 1, sizeof(*wrap));
    struct entry *fake = calloc(n ? n : 1, sizeof(*fake));
    if (!wrap || !fake) {
        free(wrap);
        free(fake);
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        fake[i].chunks = &orphans[i];
        fake[i].nchunks = 1;
        wrap[i].e = &fake[i];
    }
    struct replay_batch b = {wrap, n, 0};
    r = n ? sync_commit(st, apply_orphans, &b) : 0;
    free(wrap);
    free(fake);
    if (r == 0)
        *norphans = n;
out:
    free(orphans);
    free(known);
    free_keys(keys, nkeys);
    return r;
}

int store_rebuild(struct store *st, char *summary, size_t summary_len)
{
    char **keys = NULL;
    size_t nkeys = 0, nentries = 0, nlive = 0, ndocs = 0, norphans = 0, nbad = 0;
    struct entry *entries = NULL;
    struct doc_state *live = NULL;
    int r;

    r = list_keys(st, "entries/", &keys, &nkeys);
    if (r < 0)
        return r;
    entries = calloc(nkeys ? nkeys : 1, sizeof(*entries));
    if (!entries) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nkeys; i++) {
        uint8_t *obj;
        size_t len;
        if (read_object(st, keys[i], OBJECTS_MAX_META_OBJECT, &obj, &len) != 0) {
            nbad++;
            continue;
        }
        if (objects_entry_decode(obj, len, &entries[nentries]) == 0)
            nentries++;
        else
            nbad++;
        free(obj);
    }
    if (nbad)
        log_warn("rebuild: %zu journal entries could not be read", nbad);
    qsort(entries, nentries, sizeof(*entries), entry_cmp);

    /* A delete ends a document's history: only the adds after its last delete count. */
    live = calloc(nentries ? nentries : 1, sizeof(*live));
    if (!live) {
        r = -ENOMEM;
        goto out;
    }
    {
        struct pinset deleted = {0};
        for (size_t i = nentries; i-- > 0;) {
            if (entries[i].is_delete) {
                if (pinset_add(&deleted, entries[i].doc) < 0) {
                    pinset_free(&deleted);
                    r = -ENOMEM;
                    goto out;
                }
            } else if (!pinset_has(&deleted, entries[i].doc)) {
                live[nlive++].e = &entries[i];
            }
        }
        pinset_free(&deleted);
        /* Collected newest first; replay oldest first. */
        for (size_t i = 0; i < nlive / 2; i++) {
            struct doc_state t = live[i];
            live[i] = live[nlive - 1 - i];
            live[nlive - 1 - i] = t;
        }
    }

    struct pinset loaded = {0};
    for (size_t start = 0; start < nlive; start += REBUILD_BATCH) {
        size_t n = nlive - start < REBUILD_BATCH ? nlive - start : REBUILD_BATCH;
        for (size_t i = start; i < start + n; i++) {
            /* Later adds of a document only bring names and tags: it is loaded once. */
            if (pinset_has(&loaded, live[i].e->doc)) {
                live[i].loaded = true; /* db_txn_add merges into the existing document */
                continue;
            }
            if ((r = load_doc(st, &live[i])) < 0)
                break;
            if (live[i].loaded && (r = pinset_add(&loaded, live[i].e->doc)) < 0)
                break;
            ndocs += live[i].loaded;
        }
        if (r < 0)
            break;
        struct replay_batch b = {live + start, n, 0};
        r = sync_commit(st, apply_batch, &b);
        if (r != 0)
            break;
        for (size_t i = start; i < start + n; i++)
            text_acc_clear(&live[i].text);
    }
    pinset_free(&loaded);
    if (r == 0)
        r = record_orphans(st, &norphans);
    if (r == 0)
        snprintf(summary, summary_len,
                 "%zu documents restored from %zu journal entries (%zu adds replayed, %zu "
                 "unreadable); %zu unreferenced chunks recorded for gc",
                 ndocs, nentries, nlive, nbad, norphans);
out:
    for (size_t i = 0; live && i < nlive; i++)
        text_acc_clear(&live[i].text);
    free(live);
    for (size_t i = 0; i < nentries; i++)
        objects_entry_clear(&entries[i]);
    free(entries);
    free_keys(keys, nkeys);
    return r;
}
