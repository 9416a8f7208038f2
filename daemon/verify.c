/*
 * Scrubbing: re-reads stored chunks, decodes them and checks each against
 * its SHA-256, several at a time, then names the documents that use every
 * bad chunk. Read-only: it repairs nothing, it reports.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "daemon/log.h"
#include "daemon/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

#define VERIFY_PARALLEL 8

struct verify_check {
    struct backend_req req;
    uv_work_t work;
    struct store_verify *v;
    size_t index;
    int status;
};

struct store_verify {
    struct store *st;
    store_verify_cb *done;
    void *userdata;
    char **refs;
    size_t nrefs;
    uv_work_t work;
    int status;
    struct db_chunk *chunks; /* sorted, unique */
    size_t nchunks, next;
    unsigned running;
    int *chunk_status; /* per chunk: 0 good, else why it is bad */
    struct store_verify_result res;
};

static void verify_free(struct store_verify *v)
{
    for (size_t i = 0; i < v->res.nbad; i++)
        db_docs_free(v->res.bad[i].docs, v->res.bad[i].ndocs);
    free(v->res.bad);
    for (size_t i = 0; i < v->nrefs; i++)
        free(v->refs[i]);
    free(v->refs);
    free(v->chunks);
    free(v->chunk_status);
    v->st->active--;
    free(v);
}

static void verify_finish(struct store_verify *v)
{
    v->done(v->userdata, v->status, &v->res);
    verify_free(v);
}

static int chunk_cmp(const void *a, const void *b)
{
    return memcmp(((const struct db_chunk *)a)->hash, ((const struct db_chunk *)b)->hash,
                  PROTO_HASH_LEN);
}

/* ---- which chunks ---- */

static void collect_work(uv_work_t *work)
{
    struct store_verify *v = container_of(work, struct store_verify, work);
    size_t cap = 0;

    if (v->nrefs == 0) {
        v->status = db_all_chunks(v->st->db, &v->chunks, &v->nchunks);
        return;
    }
    for (size_t i = 0; i < v->nrefs; i++) {
        struct db_doc doc;
        int r = db_resolve(v->st->db, v->refs[i], strlen(v->refs[i]), DB_WANT_CHUNKS, &doc);
        if (r != 0) {
            v->status = store_status_from_db(r);
            return;
        }
        if (v->nchunks + doc.nchunks > cap) {
            cap = (v->nchunks + doc.nchunks) * 2;
            struct db_chunk *grown = realloc(v->chunks, cap * sizeof(*grown));
            if (!grown) {
                db_doc_clear(&doc);
                v->status = -ENOMEM;
                return;
            }
            v->chunks = grown;
        }
        memcpy(v->chunks + v->nchunks, doc.chunks, doc.nchunks * sizeof(*doc.chunks));
        v->nchunks += doc.nchunks;
        db_doc_clear(&doc);
    }
    /* A chunk shared by several documents is checked once. */
    qsort(v->chunks, v->nchunks, sizeof(*v->chunks), chunk_cmp);
    size_t n = 0;
    for (size_t i = 0; i < v->nchunks; i++) {
        if (n == 0 || chunk_cmp(&v->chunks[n - 1], &v->chunks[i]) != 0)
            v->chunks[n++] = v->chunks[i];
    }
    v->nchunks = n;
}

/* ---- who uses the bad ones ---- */

static void users_work(uv_work_t *work)
{
    struct store_verify *v = container_of(work, struct store_verify, work);
    uint8_t(*hashes)[PROTO_HASH_LEN] = malloc(v->res.nbad * PROTO_HASH_LEN);
    struct db_doc *docs = NULL;
    size_t ndocs = 0, kept = 0;

    if (!hashes) {
        v->status = -ENOMEM;
        return;
    }
    /*
     * A chunk whose last document was deleted while the scrub ran may be gone
     * already (gc): that is no damage. Only chunks still in use are reported.
     */
    for (size_t i = 0; i < v->res.nbad; i++) {
        uint8_t hash[PROTO_HASH_LEN];
        int64_t refs = 0;
        proto_hex_decode(v->res.bad[i].hash, PROTO_HASH_HEX, hash, PROTO_HASH_LEN);
        int r = db_chunk_refs(v->st->db, hash, &refs);
        if (r < 0) {
            v->status = r;
            free(hashes);
            return;
        }
        if (r == 0 && refs > 0)
            v->res.bad[kept++] = v->res.bad[i];
    }
    v->res.nbad = kept;
    for (size_t i = 0; i < v->res.nbad; i++)
        proto_hex_decode(v->res.bad[i].hash, PROTO_HASH_HEX, hashes[i], PROTO_HASH_LEN);
    v->status = db_docs_with_chunks(v->st->db, (const uint8_t(*)[PROTO_HASH_LEN])hashes,
                                    v->res.nbad, &docs, &ndocs);
    /* Hand each bad chunk copies of the documents that contain it. */
    for (size_t b = 0; v->status == 0 && b < v->res.nbad; b++) {
        struct store_bad_chunk *bad = &v->res.bad[b];
        for (size_t d = 0; v->status == 0 && d < ndocs; d++) {
            bool uses = false;
            for (uint32_t k = 0; k < docs[d].nchunks && !uses; k++)
                uses = memcmp(docs[d].chunks[k].hash, hashes[b], PROTO_HASH_LEN) == 0;
            if (!uses)
                continue;
            struct db_doc *grown = realloc(bad->docs, (bad->ndocs + 1) * sizeof(*grown));
            if (!grown) {
                v->status = -ENOMEM;
                break;
            }
            bad->docs = grown;
            struct db_doc *copy = &bad->docs[bad->ndocs++];
            memset(copy, 0, sizeof(*copy));
            memcpy(copy->hash, docs[d].hash, sizeof(copy->hash));
            copy->size = docs[d].size;
            if (docs[d].name && !(copy->name = strdup(docs[d].name)))
                v->status = -ENOMEM;
        }
    }
    db_docs_free(docs, ndocs);
    free(hashes);
}

static void users_done(uv_work_t *work, int status)
{
    struct store_verify *v = container_of(work, struct store_verify, work);
    if (status < 0)
        v->status = status;
    for (size_t i = 0; v->status == 0 && i < v->res.nbad; i++)
        log_error("verify: chunk %s is bad (%s)", v->res.bad[i].hash,
                  v->res.bad[i].status == STORE_E_INTEGRITY ? "integrity" : "unreadable");
    verify_finish(v);
}

/* ---- checking ---- */

static void check_more(struct store_verify *v);

static void checks_complete(struct store_verify *v)
{
    size_t nbad = 0;

    for (size_t i = 0; i < v->nchunks; i++)
        nbad += v->chunk_status[i] != 0;
    if (nbad == 0) {
        verify_finish(v);
        return;
    }
    v->res.bad = calloc(nbad, sizeof(*v->res.bad));
    if (!v->res.bad) {
        v->status = -ENOMEM;
        verify_finish(v);
        return;
    }
    for (size_t i = 0; i < v->nchunks; i++) {
        if (v->chunk_status[i] == 0)
            continue;
        struct store_bad_chunk *bad = &v->res.bad[v->res.nbad++];
        proto_hex_encode(v->chunks[i].hash, PROTO_HASH_LEN, bad->hash);
        bad->status = v->chunk_status[i];
    }
    if (uv_queue_work(v->st->loop, &v->work, users_work, users_done) < 0)
        verify_finish(v);
}

static void check_decode_work(uv_work_t *work)
{
    struct verify_check *chk = container_of(work, struct verify_check, work);
    uint8_t *raw;

    chk->status =
        store_decode_chunk(chk->req.out, chk->req.out_len, &chk->v->chunks[chk->index], &raw);
    free(raw);
}

static void check_end(struct verify_check *chk)
{
    struct store_verify *v = chk->v;
    const struct db_chunk *c = &v->chunks[chk->index];

    v->chunk_status[chk->index] = chk->status;
    v->res.chunks_checked++;
    v->res.bytes_checked += c->size;
    backend_req_reset(&chk->req);
    free(chk);
    v->running--;
    check_more(v);
}

static void check_decode_done(uv_work_t *work, int status)
{
    struct verify_check *chk = container_of(work, struct verify_check, work);
    if (status < 0)
        chk->status = status;
    check_end(chk);
}

static void check_read_done(struct backend_req *req)
{
    struct verify_check *chk = container_of(req, struct verify_check, req);

    if (req->status != 0) {
        chk->status = store_map_read_status(req->status);
        check_end(chk);
        return;
    }
    if (uv_queue_work(chk->v->st->loop, &chk->work, check_decode_work, check_decode_done) < 0) {
        chk->status = -ENOMEM;
        check_end(chk);
    }
}

static void check_more(struct store_verify *v)
{
    while (v->running < VERIFY_PARALLEL && v->next < v->nchunks) {
        struct verify_check *chk = calloc(1, sizeof(*chk));
        if (!chk) {
            v->status = -ENOMEM;
            break;
        }
        chk->v = v;
        chk->index = v->next++;
        store_object_key(chk->req.key, sizeof(chk->req.key), "chunks", v->chunks[chk->index].hash);
        chk->req.max_len = compress_bound(STORE_MAX_CHUNK);
        chk->req.cb = check_read_done;
        if (backend_get(v->st->be, &chk->req) < 0) {
            v->chunk_status[chk->index] = -EIO;
            free(chk);
            continue;
        }
        v->running++;
    }
    if (v->running == 0 && (v->next == v->nchunks || v->status < 0)) {
        if (v->status < 0)
            verify_finish(v);
        else
            checks_complete(v);
    }
}

static void collect_done(uv_work_t *work, int status)
{
    struct store_verify *v = container_of(work, struct store_verify, work);

    if (status < 0)
        v->status = status;
    if (v->status == 0 && v->nchunks > 0 && !(v->chunk_status = calloc(v->nchunks, sizeof(int))))
        v->status = -ENOMEM;
    if (v->status != 0) {
        verify_finish(v);
        return;
    }
    check_more(v);
}

int store_verify(struct store *st, const char *const *refs, size_t nrefs, store_verify_cb *done,
                 void *userdata)
{
    struct store_verify *v = calloc(1, sizeof(*v));
    int r;

    if (!v)
        return -ENOMEM;
    v->st = st;
    v->done = done;
    v->userdata = userdata;
    if (nrefs > 0 && !(v->refs = calloc(nrefs, sizeof(char *)))) {
        free(v);
        return -ENOMEM;
    }
    st->active++;
    for (size_t i = 0; i < nrefs; i++, v->nrefs++) {
        if (!(v->refs[i] = strdup(refs[i]))) {
            verify_free(v);
            return -ENOMEM;
        }
    }
    r = uv_queue_work(st->loop, &v->work, collect_work, collect_done);
    if (r < 0) {
        verify_free(v);
        return r;
    }
    return 0;
}
