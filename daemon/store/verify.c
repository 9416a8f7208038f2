/*
 * Scrubbing: reads stored records back from their packs (never from the
 * cache), decodes them and checks every chunk and manifest segment against
 * its id, then names the documents that use each bad one. It repairs
 * nothing itself: it remembers each damaged chunk copy in the database, so
 * that an add of content holding the chunk (the original file added again)
 * writes a fresh copy, which the chunk's row then points to (healing; the
 * damaged record is dead weight for gc). The reply comes once that is
 * committed.
 *
 * The whole store is checked pack by pack, each record read once; a
 * document's chunks are checked through its manifest, each distinct chunk of
 * the request once (a set of the ones checked, bounded: past its bound a
 * chunk reached again is checked again), so that a request counts what a
 * whole-store verify would count for those documents. A row that moved or
 * went while the scrub ran (gc) is not damage: a failure is checked again
 * against the row as it is now before it is reported.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/format/objects.h"
#include "daemon/format/record.h"
#include "daemon/store/chunkset.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

/*
 * The distinct chunks one verify with refs remembers having checked: 32 bytes
 * each in a table at most 3/4 full, so about 33 MiB at most; with the default
 * 64 KiB chunks, 32 GiB of distinct content (PROTOCOL.md `verify`).
 */
#define VERIFY_MAX_DISTINCT (512u * 1024)

struct store_verify {
    struct store *st;
    store_verify_cb *done;
    void *userdata;
    char **refs;
    size_t nrefs;
    struct chunkset checked;            /* with refs: the chunks checked so far */
    char (*walked)[PROTO_HASH_HEX + 1]; /* with refs: the documents walked so far */
    size_t nwalked;
    struct store_progress *progress; /* NULL: not asked for */
    struct store_op op;
    uv_work_t work;
    int status;
    struct store_verify_result res;
    /* The block decoded last (documents' chunks come in runs from one block). */
    struct db_loc block_loc;
    struct pack_block_chunk *block_chunks;
    uint32_t block_count;
    uint8_t *block_raw;
    size_t block_raw_len;
    bool block_ok;
    /* The damaged chunk copies found, remembered for healing once the scrub is done. */
    struct bad_copy *copies;
    size_t ncopies;
    struct db_write dbw;
};

struct bad_copy {
    uint8_t hash[PROTO_HASH_LEN];
    struct db_loc loc;
};

static void block_forget(struct store_verify *v)
{
    free(v->block_chunks);
    free(v->block_raw);
    v->block_chunks = NULL;
    v->block_raw = NULL;
    v->block_ok = false;
    memset(&v->block_loc, 0, sizeof(v->block_loc));
}

static void verify_free(struct store_verify *v)
{
    for (size_t i = 0; i < v->res.nbad; i++)
        db_docs_free(v->res.bad[i].docs, v->res.bad[i].ndocs);
    free(v->res.bad);
    for (size_t i = 0; i < v->nrefs; i++)
        free(v->refs[i]);
    free(v->refs);
    free(v->walked);
    free(v->copies);
    chunkset_deinit(&v->checked);
    block_forget(v);
    store_op_end(v->st, &v->op);
    v->st->active--;
    free(v);
}

static int add_bad(struct store_verify *v, const uint8_t hash[PROTO_HASH_LEN], int status)
{
    struct store_bad_chunk *grown;

    for (size_t i = 0; i < v->res.nbad; i++) {
        char hex[PROTO_HASH_HEX + 1];
        proto_hex_encode(hash, PROTO_HASH_LEN, hex);
        if (strcmp(v->res.bad[i].hash, hex) == 0)
            return 0;
    }
    grown = realloc(v->res.bad, (v->res.nbad + 1) * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    v->res.bad = grown;
    memset(&grown[v->res.nbad], 0, sizeof(*grown));
    proto_hex_encode(hash, PROTO_HASH_LEN, grown[v->res.nbad].hash);
    grown[v->res.nbad].status = status;
    v->res.nbad++;
    return 0;
}

static bool same_loc(const struct db_loc *a, const struct db_loc *b)
{
    return a->pack == b->pack && a->off == b->off && a->len == b->len;
}

/* Reads and opens the block at loc, unless it is the one decoded last. */
static int load_block(struct store_verify *v, const struct db_loc *loc)
{
    uint8_t *bytes;
    int r;

    if (same_loc(&v->block_loc, loc) && (v->block_ok || v->block_loc.len))
        return v->block_ok ? 0 : RECORD_E_BAD;
    block_forget(v);
    v->block_loc = *loc;
    r = store_read_record(v->st, loc, false, &bytes);
    if (r == 0) {
        r = record_block_open(bytes, loc->len, &v->block_chunks, &v->block_count, &v->block_raw,
                              &v->block_raw_len);
        free(bytes);
    }
    v->block_ok = r == 0;
    return r;
}

/* Checks one chunk at its location; 0 good, STORE_E_INTEGRITY bad, or a failure. */
static int check_at(struct store_verify *v, const uint8_t hash[PROTO_HASH_LEN],
                    const struct db_loc *loc)
{
    int r = load_block(v, loc);

    if (r == RECORD_E_BAD || r == BACKEND_E_NOT_FOUND)
        return STORE_E_INTEGRITY;
    if (r != 0)
        return r;
    if ((uint64_t)loc->sub + loc->size > v->block_raw_len ||
        !record_hash_ok(v->block_raw + loc->sub, loc->size, hash))
        return STORE_E_INTEGRITY;
    return 0;
}

/* A chunk found bad: still bad where its row points now? (gc may have moved it.) */
static int report_chunk(struct store_verify *v, const uint8_t hash[PROTO_HASH_LEN],
                        const struct db_loc *was, int status)
{
    struct db_loc now;
    int r = db_chunk_find(v->st->db, hash, &now);

    if (r == DB_E_NOT_FOUND)
        return 0; /* gone meanwhile: not damage */
    if (r < 0)
        return r;
    if (!same_loc(&now, was) || now.sub != was->sub) {
        r = check_at(v, hash, &now);
        if (r <= 0)
            return r;
    }
    struct bad_copy *grown = realloc(v->copies, (v->ncopies + 1) * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    v->copies = grown;
    memcpy(grown[v->ncopies].hash, hash, PROTO_HASH_LEN);
    grown[v->ncopies++].loc = now;
    return add_bad(v, hash, status);
}

/* ---- the whole store, pack by pack ---- */

static int check_record(struct store_verify *v, const struct db_pack_row *rows, size_t n)
{
    const struct db_pack_row *head = &rows[0];
    uint8_t *bytes, *raw;
    size_t raw_len;
    int r;

    if (head->kind == DB_ROW_CHUNK) {
        for (size_t i = 0; i < n; i++) {
            /* Every chunk read is counted, good or bad. */
            v->res.chunks_checked++;
            v->res.bytes_checked += rows[i].loc.size;
            r = check_at(v, rows[i].hash, &rows[i].loc);
            if (r == STORE_E_INTEGRITY)
                r = report_chunk(v, rows[i].hash, &rows[i].loc, r);
            if (r < 0)
                return r;
        }
        return 0;
    }
    r = store_read_record(v->st, &head->loc, false, &bytes);
    if (r == 0) {
        bool segment = head->kind == DB_ROW_SEGMENT;
        r = record_seal_open(bytes, head->loc.len, segment ? PACK_REC_MANIFEST : PACK_REC_ENTRY,
                             head->hash, segment ? MANIFEST_MAX_SEGMENT : OBJECTS_MAX_ENTRY, &raw,
                             &raw_len);
        free(bytes);
        if (r == 0)
            free(raw);
    }
    if (r == 0 || r < 0)
        return r;
    if (head->kind == DB_ROW_SEGMENT) {
        struct db_loc now;
        if (db_segment_find(v->st->db, head->hash, &now) == 0 && same_loc(&now, &head->loc))
            return add_bad(v, head->hash, STORE_E_INTEGRITY);
        return 0;
    }
    char hex[PROTO_HASH_HEX + 1];
    proto_hex_encode(head->hash, PROTO_HASH_LEN, hex);
    /* A journal entry only matters to a rebuild: it is logged, not listed. */
    log_error("verify: journal entry %s in pack %016llx is damaged", hex,
              (unsigned long long)head->loc.pack);
    return 0;
}

static int verify_all(struct store_verify *v)
{
    struct db_pack *packs;
    size_t npacks;
    int r = db_packs(v->st->db, &packs, &npacks);

    /* In the chunks' own bytes, as the result counts them (not the packs' compressed bytes). */
    struct db_totals t;
    if (r == 0 && v->progress && db_totals(v->st->db, 0, &t) == 0)
        atomic_store_explicit(&v->progress->total, t.unique_bytes, memory_order_relaxed);
    for (size_t p = 0; r == 0 && p < npacks; p++) {
        struct db_pack_row *rows;
        size_t n;
        if (packs[p].state == DB_PACK_DELETING)
            continue;
        if ((r = db_pack_rows(v->st->db, packs[p].seq, 0, &rows, &n)) < 0)
            break;
        for (size_t first = 0; r == 0 && first < n;) {
            size_t end = first + 1;
            while (end < n && rows[end].loc.off == rows[first].loc.off &&
                   rows[end].kind == rows[first].kind)
                end++;
            uint64_t before = v->res.bytes_checked;
            r = check_record(v, rows + first, end - first);
            if (v->progress)
                atomic_fetch_add_explicit(&v->progress->done, v->res.bytes_checked - before,
                                          memory_order_relaxed);
            first = end;
        }
        free(rows);
    }
    if (r == 0 || npacks)
        free(packs);
    return r;
}

/* ---- given documents, through their manifests ---- */

static int check_chunk(void *ctx, const struct manifest_entry *e)
{
    struct store_verify *v = ctx;
    struct db_loc loc;
    bool added;
    int r;

    if (e->bytes == 0)
        return 0; /* a segment: read and checked by the walk itself */
    r = chunkset_add(&v->checked, e->hash, &added);
    if (r < 0)
        return r;
    if (r == 0 && !added)
        return 0; /* checked already, for this document or another of the request */
    v->res.chunks_checked++;
    v->res.bytes_checked += e->bytes;
    if (v->progress)
        atomic_fetch_add_explicit(&v->progress->done, e->bytes, memory_order_relaxed);
    r = db_chunk_find(v->st->db, e->hash, &loc);
    if (r == DB_E_NOT_FOUND)
        return add_bad(v, e->hash, STORE_E_INTEGRITY);
    if (r < 0)
        return r;
    r = check_at(v, e->hash, &loc);
    if (r == STORE_E_INTEGRITY)
        r = report_chunk(v, e->hash, &loc, r);
    return r < 0 ? r : 0;
}

static bool walked_already(struct store_verify *v, const char *hash)
{
    for (size_t i = 0; i < v->nwalked; i++) {
        if (strcmp(v->walked[i], hash) == 0)
            return true;
    }
    memcpy(v->walked[v->nwalked++], hash, PROTO_HASH_HEX + 1);
    return false;
}

static int verify_refs(struct store_verify *v)
{
    chunkset_init(&v->checked, VERIFY_MAX_DISTINCT);
    if (!(v->walked = calloc(v->nrefs, sizeof(*v->walked))))
        return -ENOMEM;
    for (size_t i = 0; i < v->nrefs; i++) {
        struct db_doc doc;
        int r = db_resolve(v->st->db, v->refs[i], strlen(v->refs[i]), DB_WANT_MANIFEST, &doc);
        if (r != 0)
            return store_status_from_db(r);
        /* Named twice (by hash and by name, say): its manifest is walked once. */
        if (walked_already(v, doc.hash)) {
            db_doc_clear(&doc);
            continue;
        }
        r = store_walk_manifest(v->st, doc.depth, doc.root, doc.root_len,
                                STORE_WALK_SEGMENTS | STORE_WALK_DISK, check_chunk, v);
        db_doc_clear(&doc);
        if (r == STORE_E_INTEGRITY)
            r = 0; /* a damaged segment was logged; its chunks cannot be reached */
        if (r != 0)
            return r;
    }
    return 0;
}

/* ---- who uses the bad ones ---- */

struct users_ctx {
    struct store_verify *v;
    int64_t rowid;
    bool *uses; /* per bad chunk, for the current document */
};

static int users_chunk(void *ctx, const struct manifest_entry *e)
{
    struct users_ctx *u = ctx;
    char hex[PROTO_HASH_HEX + 1];

    proto_hex_encode(e->hash, PROTO_HASH_LEN, hex);
    for (size_t i = 0; i < u->v->res.nbad; i++) {
        if (strcmp(u->v->res.bad[i].hash, hex) == 0)
            u->uses[i] = true;
    }
    return 0;
}

static int users_manifest(void *ctx, int64_t rowid, unsigned depth, const uint8_t *root,
                          size_t root_len)
{
    struct users_ctx *u = ctx;
    struct store_verify *v = u->v;
    int r;

    if (rowid < 0)
        return 0; /* a deleted document awaiting its index removal */
    memset(u->uses, 0, v->res.nbad * sizeof(bool));
    r = store_walk_manifest(v->st, depth, root, root_len, STORE_WALK_SEGMENTS, users_chunk, u);
    if (r == STORE_E_INTEGRITY)
        r = 0;
    for (size_t i = 0; r == 0 && i < v->res.nbad; i++) {
        struct store_bad_chunk *bad = &v->res.bad[i];
        if (!u->uses[i])
            continue;
        struct db_doc *grown = realloc(bad->docs, (bad->ndocs + 1) * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        bad->docs = grown;
        r = db_load(v->st->db, rowid, 0, &bad->docs[bad->ndocs]);
        if (r == DB_E_NOT_FOUND) {
            r = 0;
            continue;
        }
        if (r == 0)
            bad->ndocs++;
    }
    return r;
}

/*
 * The documents the request named go first among a bad chunk's users, so
 * that a reply that lists only the first few of them still names those.
 */
static void requested_first(struct store_verify *v, struct store_bad_chunk *bad)
{
    size_t front = 0;

    for (size_t d = 0; d < bad->ndocs; d++) {
        bool named = false;
        for (size_t w = 0; !named && w < v->nwalked; w++)
            named = strcmp(bad->docs[d].hash, v->walked[w]) == 0;
        if (!named)
            continue;
        struct db_doc doc = bad->docs[d];
        memmove(&bad->docs[front + 1], &bad->docs[front], (d - front) * sizeof(doc));
        bad->docs[front++] = doc;
    }
}

static int find_users(struct store_verify *v)
{
    struct users_ctx u = {v, 0, calloc(v->res.nbad ? v->res.nbad : 1, sizeof(bool))};
    size_t kept = 0;
    int r;

    if (!u.uses)
        return -ENOMEM;
    r = v->res.nbad ? db_each_manifest(v->st->db, users_manifest, &u) : 0;
    free(u.uses);
    /* A bad chunk no document uses any more is no damage to anyone: gc takes it. */
    for (size_t i = 0; r == 0 && i < v->res.nbad; i++) {
        if (v->res.bad[i].ndocs > 0) {
            requested_first(v, &v->res.bad[i]);
            v->res.bad[kept++] = v->res.bad[i];
        } else
            db_docs_free(v->res.bad[i].docs, 0);
    }
    if (r == 0)
        v->res.nbad = kept;
    return r;
}

static void verify_work(uv_work_t *work)
{
    struct store_verify *v = container_of(work, struct store_verify, work);
    int r = v->nrefs ? verify_refs(v) : verify_all(v);

    block_forget(v);
    if (r == 0)
        r = find_users(v);
    v->status = r;
}

static void verify_reply(struct store_verify *v)
{
    for (size_t i = 0; v->status == 0 && i < v->res.nbad; i++)
        log_error("verify: chunk %s is bad (%s)", v->res.bad[i].hash,
                  v->res.bad[i].status == STORE_E_INTEGRITY ? "integrity" : "unreadable");
    v->done(v->userdata, v->status, &v->res);
    verify_free(v);
}

static int remember_apply(struct db_txn *txn, struct db_write *w)
{
    struct store_verify *v = container_of(w, struct store_verify, dbw);
    int r = db_txn_chunk_bad_prune(txn);

    for (size_t i = 0; r == 0 && i < v->ncopies; i++)
        r = db_txn_chunk_bad(txn, v->copies[i].hash, &v->copies[i].loc);
    return r;
}

static void remember_done(struct db_write *w)
{
    struct store_verify *v = container_of(w, struct store_verify, dbw);

    /* The report stands either way; only healing waits for the next verify. */
    if (w->status != 0)
        log_warn("verify: cannot remember the damaged chunks for healing: %s",
                 w->status < 0 ? strerror(-w->status) : "database error");
    verify_reply(v);
}

static void verify_done(uv_work_t *work, int status)
{
    struct store_verify *v = container_of(work, struct store_verify, work);

    if (status < 0)
        v->status = status;
    /* A read-only daemon reports what it found and remembers nothing (healing waits). */
    if (v->status != 0 || (v->ncopies == 0 && v->nrefs) || db_read_only(v->st->db)) {
        verify_reply(v);
        return;
    }
    /* A whole-store verify that found nothing also forgets the copies healed meanwhile. */
    v->dbw = (struct db_write){.apply = remember_apply, .done = remember_done};
    db_write(v->st->db, &v->dbw);
}

int store_verify(struct store *st, const char *const *refs, size_t nrefs,
                 struct store_progress *progress, store_verify_cb *done, void *userdata)
{
    struct store_verify *v = calloc(1, sizeof(*v));
    int r;

    if (!v || (nrefs && !(v->refs = calloc(nrefs, sizeof(char *))))) {
        free(v);
        return -ENOMEM;
    }
    v->st = st;
    v->done = done;
    v->userdata = userdata;
    v->progress = progress;
    if (progress)
        atomic_store_explicit(&progress->phase, "verify", memory_order_relaxed);
    for (size_t i = 0; i < nrefs; i++) {
        if (!(v->refs[i] = strdup(refs[i]))) {
            for (size_t k = 0; k < i; k++)
                free(v->refs[k]);
            free(v->refs);
            free(v);
            return -ENOMEM;
        }
        v->nrefs++;
    }
    st->active++;
    store_op_begin(st, &v->op);
    r = uv_queue_work(st->loop, &v->work, verify_work, verify_done);
    if (r < 0) {
        v->done = NULL;
        verify_free(v);
        return r;
    }
    return 0;
}
