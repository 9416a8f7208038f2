#include "daemon/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "compress/compress.h"
#include "daemon/log.h"
#include "proto/util.h"
#include "storage/backend.h"

/* Chunk puts one add may have in flight; bounds its compressed buffers. */
#define STORE_MAX_PUTS 4

struct store {
    uv_loop_t *loop;
    struct backend *be;
    struct db *db;
    struct store_config cfg;
    unsigned active;
};

/* A buffer of raw content waiting for its chunk job. */
struct rawbuf {
    uint8_t *data;
    size_t len;
};

struct chunk_job {
    uv_work_t work;
    struct store_add *add;
    struct rawbuf in;
    bool final;
    /* outputs */
    int status;
    uint8_t hash[PROTO_HASH_LEN];
    bool known;
    uint32_t stored_size;
    uint8_t *obj;
    size_t obj_len;
    bool doc_exists;
};

struct object_put {
    struct backend_req req;
    struct store_add *add;
    uint8_t *obj;
};

struct store_add {
    struct store *st;
    struct store_add_params p;
    const struct store_add_ops *ops;
    void *userdata;

    EVP_MD_CTX *doc_ctx; /* used by the add's single running job only */
    struct rawbuf fill;
    struct rawbuf ready[8]; /* full buffers waiting for a job, FIFO */
    unsigned nready;
    bool told_full;

    bool job_running;
    unsigned puts_inflight;
    uint64_t received;

    struct db_chunk *chunks;
    size_t nchunks, chunks_cap;

    /* Content kept for the search index while it still looks like text (job-owned). */
    char *text;
    size_t text_len, text_cap, text_valid;
    bool text_ok;

    bool finishing, final_done, committing, aborted;
    int error;
    uint8_t doc_hash[PROTO_HASH_LEN];
    bool doc_exists;

    struct db_write dbw;
    struct db_add dba;
};

static void params_clear(struct store_add_params *p)
{
    free(p->name);
    free(p->mime);
    for (size_t i = 0; i < p->ntags; i++)
        free(p->tags[i]);
    free(p->tags);
    for (size_t i = 0; i < p->nmeta; i++) {
        free(p->meta_keys[i]);
        free(p->meta_values[i]);
    }
    free(p->meta_keys);
    free(p->meta_values);
    memset(p, 0, sizeof(*p));
}

int store_new(struct store **out, uv_loop_t *loop, struct backend *be, struct db *db,
              const struct store_config *cfg)
{
    struct store *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->loop = loop;
    st->be = be;
    st->db = db;
    st->cfg = *cfg;
    *out = st;
    return 0;
}

struct store *store_free(struct store *st)
{
    free(st);
    return NULL;
}

unsigned store_active(struct store *st)
{
    return st->active;
}

static int map_backend_status(int status)
{
    if (status == BACKEND_E_UNAVAILABLE)
        return STORE_E_UNAVAILABLE;
    if (status == BACKEND_E_NOT_FOUND || status == BACKEND_E_TOO_LARGE)
        return STORE_E_INTEGRITY; /* an object the metadata promises is missing or mangled */
    return status;
}

/* ---- add ---- */

static void add_pump(struct store_add *add);

static void add_free(struct store_add *add)
{
    free(add->fill.data);
    for (unsigned i = 0; i < add->nready; i++)
        free(add->ready[i].data);
    EVP_MD_CTX_free(add->doc_ctx);
    free(add->chunks);
    free(add->text);
    params_clear(&add->p);
    add->st->active--;
    free(add);
}

static void add_fail(struct store_add *add, int status)
{
    if (!add->error)
        add->error = status;
}

/*
 * Ends a failed or abandoned add once none of its work is running: reports
 * the failure (unless the requester is gone) and frees it. Returns true when
 * the add is gone. A successful add ends in commit_done().
 */
static bool add_maybe_end(struct store_add *add)
{
    if (add->job_running || add->puts_inflight || add->committing)
        return false;
    if (!add->aborted && !add->error)
        return false;
    if (!add->aborted)
        add->ops->done(add->userdata, add->error, NULL);
    add_free(add);
    return true;
}

int store_add_begin(struct store *st, struct store_add_params *params,
                    const struct store_add_ops *ops, void *userdata, struct store_add **out)
{
    struct store_add *add = calloc(1, sizeof(*add));

    if (!add || !(add->doc_ctx = EVP_MD_CTX_new()) ||
        !EVP_DigestInit_ex(add->doc_ctx, EVP_sha256(), NULL)) {
        if (add)
            EVP_MD_CTX_free(add->doc_ctx);
        free(add);
        params_clear(params);
        return -ENOMEM;
    }
    add->st = st;
    add->p = *params;
    memset(params, 0, sizeof(*params));
    add->ops = ops;
    add->userdata = userdata;
    add->text_ok = st->cfg.max_text > 0;
    st->active++;
    *out = add;
    return 0;
}

static bool add_hold_full(const struct store_add *add)
{
    return add->nready >= ARRAY_SIZE(add->ready);
}

bool store_add_full(const struct store_add *add)
{
    /* One full buffer waiting is enough backlog: the job in flight keeps the CPU busy. */
    return !add->error && add->nready > 0 && (add->job_running || add->puts_inflight);
}

bool store_add_write(struct store_add *add, const uint8_t *data, size_t len, bool last)
{
    size_t chunk = add->st->cfg.chunk_size;

    if (add->finishing)
        return true;
    if (add->received + len > STORE_MAX_DOCUMENT)
        add_fail(add, STORE_E_TOO_LARGE);
    else if (add->p.has_size && add->received + len > add->p.size)
        add_fail(add, STORE_E_SIZE);
    if (!add->error)
        add->received += len;
    while (!add->error && len > 0) {
        if (!add->fill.data && !(add->fill.data = malloc(chunk))) {
            add_fail(add, -ENOMEM);
            break;
        }
        size_t n = chunk - add->fill.len < len ? chunk - add->fill.len : len;
        memcpy(add->fill.data + add->fill.len, data, n);
        add->fill.len += n;
        data += n;
        len -= n;
        if (add->fill.len == chunk) {
            if (add_hold_full(add)) {
                /* The caller ignored store_add_full(); refuse rather than grow. */
                add_fail(add, -ENOBUFS);
                break;
            }
            add->ready[add->nready++] = add->fill;
            add->fill = (struct rawbuf){0};
        }
    }
    if (last)
        add->finishing = true;
    add_pump(add);
    if (add_maybe_end(add))
        return false;
    if (store_add_full(add))
        add->told_full = true;
    return true;
}

/*
 * Length of the longest prefix of s[0..len) that is well-formed UTF-8 without
 * NUL bytes, stopping before a sequence that may continue past `len`.
 * *bad is set when an invalid byte (not merely a cut sequence) was found.
 */
static size_t utf8_prefix(const uint8_t *s, size_t len, bool *bad)
{
    size_t i = 0;

    *bad = false;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t cp;
        if (c == 0) {
            *bad = true;
            return i;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            n = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            n = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 4, cp = c & 0x07;
        else {
            *bad = true;
            return i;
        }
        if (i + n > len) {
            for (size_t k = i + 1; k < len; k++) {
                if ((s[k] & 0xc0) != 0x80) {
                    *bad = true;
                    return i;
                }
            }
            return i; /* cut: the next piece may complete it */
        }
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                *bad = true;
                return i;
            }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are not text. */
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff)) {
            *bad = true;
            return i;
        }
        i += n;
    }
    return i;
}

/*
 * Keeps the document's content for the search index while it is UTF-8 text,
 * up to max_text bytes; past the limit the prefix stays indexed. Runs in the
 * add's chunk job, which only one thread runs at a time.
 */
static void text_feed(struct store_add *add, const uint8_t *data, size_t len, bool final)
{
    size_t room = add->st->cfg.max_text - add->text_len;
    bool bad;

    if (!add->text_ok || room == 0)
        goto check_end;
    if (len > room)
        len = room;
    if (add->text_len + len > add->text_cap) {
        size_t cap = add->text_cap ? add->text_cap : 64 * 1024;
        while (cap < add->text_len + len)
            cap *= 2;
        if (cap > add->st->cfg.max_text)
            cap = add->st->cfg.max_text;
        char *grown = realloc(add->text, cap);
        if (!grown) {
            add->text_ok = false;
            return;
        }
        add->text = grown;
        add->text_cap = cap;
    }
    memcpy(add->text + add->text_len, data, len);
    add->text_len += len;
    add->text_valid += utf8_prefix((uint8_t *)add->text + add->text_valid,
                                   add->text_len - add->text_valid, &bad);
    if (bad)
        add->text_ok = false;
check_end:
    /* A sequence cut at the end is fine only where the size limit cut it. */
    if (add->text_ok && final && add->text_valid != add->text_len) {
        if (add->text_len < add->st->cfg.max_text)
            add->text_ok = false;
        else
            add->text_len = add->text_valid;
    }
    if (!add->text_ok) {
        free(add->text);
        add->text = NULL;
        add->text_len = add->text_cap = add->text_valid = 0;
    }
}

static void chunk_work(uv_work_t *work)
{
    struct chunk_job *job = container_of(work, struct chunk_job, work);
    struct store_add *add = job->add;
    struct store *st = add->st;
    unsigned int mdlen;

    if (!EVP_DigestUpdate(add->doc_ctx, job->in.data, job->in.len)) {
        job->status = -EIO;
        return;
    }
    text_feed(add, job->in.data, job->in.len, job->final);
    if (job->in.len > 0) {
        SHA256(job->in.data, job->in.len, job->hash);
        int r = db_chunk_lookup(st->db, job->hash, &job->stored_size);
        if (r < 0) {
            job->status = r;
            return;
        }
        job->known = (r == 0);
        if (!job->known) {
            size_t cap = compress_bound(job->in.len);
            job->obj = malloc(cap);
            if (!job->obj) {
                job->status = -ENOMEM;
                return;
            }
            job->status = compress_encode(job->in.data, job->in.len, st->cfg.compression_level,
                                          job->obj, cap, &job->obj_len);
            if (job->status < 0)
                return;
            job->stored_size = (uint32_t)job->obj_len;
        }
    }
    if (job->final) {
        char hex[PROTO_HASH_HEX + 1];
        struct db_doc doc;
        if (!EVP_DigestFinal_ex(add->doc_ctx, add->doc_hash, &mdlen)) {
            job->status = -EIO;
            return;
        }
        proto_hex_encode(add->doc_hash, PROTO_HASH_LEN, hex);
        int r = db_resolve(st->db, hex, PROTO_HASH_HEX, 0, &doc);
        if (r < 0 || r == DB_E_AMBIGUOUS) {
            job->status = r < 0 ? r : -EIO;
            return;
        }
        job->doc_exists = (r == 0);
        db_doc_clear(&doc);
    }
}

/* After a step of the add finished: start the next, end it, or let the requester feed it. */
static void add_progress(struct store_add *add)
{
    add_pump(add);
    if (add_maybe_end(add))
        return;
    if (add->told_full && !store_add_full(add) && !add->aborted && !add->error) {
        add->told_full = false;
        add->ops->ready(add->userdata); /* last: the callee may feed or end the add */
    }
}

static void object_put_done(struct backend_req *req)
{
    struct object_put *op = container_of(req, struct object_put, req);
    struct store_add *add = op->add;

    if (req->status != 0) {
        log_warn("backend put %s failed: %s", req->key,
                 req->status < 0 ? strerror(-req->status) : "backend unavailable");
        add_fail(add, req->status < 0 ? req->status : STORE_E_UNAVAILABLE);
    }
    free(op->obj);
    free(op);
    add->puts_inflight--;
    add_progress(add);
}

/* Starts a put of an owned object buffer; on failure frees it and fails the add. */
static void put_object(struct store_add *add, const char *dir, const uint8_t hash[PROTO_HASH_LEN],
                       uint8_t *obj, size_t len)
{
    struct object_put *op = calloc(1, sizeof(*op));
    char hex[PROTO_HASH_HEX + 1];
    int r;

    if (!op) {
        free(obj);
        add_fail(add, -ENOMEM);
        return;
    }
    proto_hex_encode(hash, PROTO_HASH_LEN, hex);
    snprintf(op->req.key, sizeof(op->req.key), "%s/%s", dir, hex);
    op->req.data = obj;
    op->req.len = len;
    op->req.cb = object_put_done;
    op->add = add;
    op->obj = obj;
    r = backend_put(add->st->be, &op->req);
    if (r < 0) {
        free(obj);
        free(op);
        add_fail(add, r);
        return;
    }
    add->puts_inflight++;
}

/*
 * The manifest object makes the backend self-describing: a msgpack map
 * {v, size, mime, chunks: [[id, size], ...]} in the usual object envelope.
 */
static void put_manifest(struct store_add *add)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    uint8_t *obj;
    size_t obj_len;

    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    proto_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 1);
    proto_pack_cstr(&pk, "size");
    msgpack_pack_uint64(&pk, add->received);
    proto_pack_cstr(&pk, "mime");
    proto_pack_cstr(&pk, add->p.mime);
    proto_pack_cstr(&pk, "chunks");
    msgpack_pack_array(&pk, add->nchunks);
    for (size_t i = 0; i < add->nchunks; i++) {
        msgpack_pack_array(&pk, 2);
        proto_pack_bin(&pk, add->chunks[i].hash, PROTO_HASH_LEN);
        msgpack_pack_uint32(&pk, add->chunks[i].size);
    }
    obj = malloc(compress_bound(sbuf.size));
    if (!obj) {
        msgpack_sbuffer_destroy(&sbuf);
        add_fail(add, -ENOMEM);
        return;
    }
    int r = compress_encode(sbuf.data, sbuf.size, add->st->cfg.compression_level, obj,
                            compress_bound(sbuf.size), &obj_len);
    msgpack_sbuffer_destroy(&sbuf);
    if (r < 0) {
        free(obj);
        add_fail(add, r);
        return;
    }
    put_object(add, "manifests", add->doc_hash, obj, obj_len);
}

static int record_chunk(struct store_add *add, const struct chunk_job *job)
{
    if (add->nchunks == add->chunks_cap) {
        size_t ncap = add->chunks_cap ? add->chunks_cap * 2 : 4;
        struct db_chunk *grown = realloc(add->chunks, ncap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        add->chunks = grown;
        add->chunks_cap = ncap;
    }
    struct db_chunk *c = &add->chunks[add->nchunks++];
    memcpy(c->hash, job->hash, PROTO_HASH_LEN);
    c->size = (uint32_t)job->in.len;
    c->stored_size = job->stored_size;
    return 0;
}

static void chunk_done(uv_work_t *work, int status)
{
    struct chunk_job *job = container_of(work, struct chunk_job, work);
    struct store_add *add = job->add;
    add->job_running = false;
    if (status < 0 || job->status < 0)
        add_fail(add, status < 0 ? status : job->status);
    if (!add->error && job->in.len > 0) {
        int r = record_chunk(add, job);
        if (r < 0)
            add_fail(add, r);
        else if (!job->known) {
            put_object(add, "chunks", job->hash, job->obj, job->obj_len);
            job->obj = NULL; /* consumed */
        }
    }
    if (!add->error && job->final) {
        add->final_done = true;
        add->doc_exists = job->doc_exists;
        if (!add->doc_exists)
            put_manifest(add);
    }
    free(job->obj);
    free(job->in.data);
    free(job);

    add_progress(add);
}

static void start_job(struct store_add *add, struct rawbuf in, bool final)
{
    struct chunk_job *job = calloc(1, sizeof(*job));
    int r;

    if (!job) {
        free(in.data);
        add_fail(add, -ENOMEM);
        return;
    }
    job->add = add;
    job->in = in;
    job->final = final;
    add->job_running = true;
    r = uv_queue_work(add->st->loop, &job->work, chunk_work, chunk_done);
    if (r < 0) {
        add->job_running = false;
        free(in.data);
        free(job);
        add_fail(add, r);
    }
}

static void commit_done(struct db_write *w)
{
    struct store_add *add = container_of(w, struct store_add, dbw);
    struct store_add_result res = {0};

    add->committing = false;
    if (w->status != 0) {
        add_fail(add, w->status < 0 ? w->status : -EIO);
        (void)add_maybe_end(add);
        return;
    }
    if (!add->aborted) {
        proto_hex_encode(add->doc_hash, PROTO_HASH_LEN, res.hash);
        res.name = add->p.name ? add->p.name : "";
        res.size = add->received;
        res.stored_size = add->dba.stored_size;
        res.created = add->dba.created;
        add->ops->done(add->userdata, 0, &res);
    }
    add_free(add);
}

static int commit_apply(struct db_txn *txn, struct db_write *w)
{
    struct store_add *add = container_of(w, struct store_add, dbw);
    return db_txn_add(txn, &add->dba);
}

static void add_commit(struct store_add *add)
{
    struct db_add *d = &add->dba;

    memcpy(d->hash, add->doc_hash, PROTO_HASH_LEN);
    d->size = add->received;
    d->mime = add->p.mime;
    d->name = add->p.name;
    d->tags = (const char *const *)add->p.tags;
    d->ntags = add->p.ntags;
    d->meta_keys = (const char *const *)add->p.meta_keys;
    d->meta_values = (const char *const *)add->p.meta_values;
    d->nmeta = add->p.nmeta;
    d->chunks = add->chunks;
    d->nchunks = add->nchunks;
    d->text = add->text_ok ? add->text : NULL;
    d->text_len = add->text_len;
    add->dbw.apply = commit_apply;
    add->dbw.done = commit_done;
    add->committing = true;
    db_write(add->st->db, &add->dbw);
}

static void add_pump(struct store_add *add)
{
    if (add->error || add->aborted || add->job_running)
        return;
    if (add->nready > 0) {
        if (add->puts_inflight >= STORE_MAX_PUTS)
            return;
        struct rawbuf next = add->ready[0];
        memmove(add->ready, add->ready + 1, (add->nready - 1) * sizeof(add->ready[0]));
        add->nready--;
        start_job(add, next, false);
        return;
    }
    if (add->finishing && !add->final_done) {
        if (add->p.has_size && add->received != add->p.size) {
            add_fail(add, STORE_E_SIZE);
            return;
        }
        struct rawbuf last = add->fill;
        add->fill = (struct rawbuf){0};
        start_job(add, last, true);
        return;
    }
    if (add->final_done && !add->puts_inflight && !add->committing)
        add_commit(add);
}

void store_add_abort(struct store_add *add)
{
    add->aborted = true;
    (void)add_maybe_end(add);
}

/* ---- get ---- */

struct store_get {
    struct store *st;
    const struct store_get_ops *ops;
    void *userdata;
    char *ref;
    size_t ref_len;
    struct db_doc doc;
    uint32_t next_chunk;
    bool busy, released, sent_first;
    int status;
    uv_work_t work;
    struct backend_req req;
    uint8_t *raw;
    size_t raw_len;
};

static void get_free(struct store_get *get)
{
    db_doc_clear(&get->doc);
    free(get->ref);
    free(get->raw);
    free(get->req.out);
    get->st->active--;
    free(get);
}

/* Called when a step finished; returns true if the get was released meanwhile (and freed). */
static bool get_step_end(struct store_get *get)
{
    get->busy = false;
    if (get->released) {
        get_free(get);
        return true;
    }
    return false;
}

static void resolve_work(uv_work_t *work)
{
    struct store_get *get = container_of(work, struct store_get, work);
    get->status = db_resolve(get->st->db, get->ref, get->ref_len, DB_WANT_CHUNKS, &get->doc);
}

static void deliver(struct store_get *get, const uint8_t *data, size_t len, bool last)
{
    bool first = !get->sent_first;
    get->sent_first = true;
    get->ops->data(get->userdata, &get->doc, data, len, first, last);
}

static int map_db_status(int status)
{
    if (status == DB_E_NOT_FOUND)
        return STORE_E_NOT_FOUND;
    if (status == DB_E_AMBIGUOUS)
        return STORE_E_AMBIGUOUS;
    return status;
}

static void resolve_done(uv_work_t *work, int status)
{
    struct store_get *get = container_of(work, struct store_get, work);

    if (get_step_end(get))
        return;
    if (status < 0 || get->status != 0) {
        get->ops->error(get->userdata, status < 0 ? status : map_db_status(get->status));
        return;
    }
    if (get->doc.nchunks == 0)
        deliver(get, NULL, 0, true);
    else
        store_get_next(get);
}

static void decode_work(uv_work_t *work)
{
    struct store_get *get = container_of(work, struct store_get, work);
    const struct db_chunk *c = &get->doc.chunks[get->next_chunk];
    uint8_t hash[PROTO_HASH_LEN];
    int r;

    get->raw = malloc(c->size ? c->size : 1);
    if (!get->raw) {
        get->status = -ENOMEM;
        return;
    }
    r = compress_decode(get->req.out, get->req.out_len, STORE_MAX_CHUNK, get->raw, c->size,
                        &get->raw_len);
    free(get->req.out);
    get->req.out = NULL;
    if (r < 0 && r != -ENOBUFS) {
        get->status = r;
        return;
    }
    /* Never hand out bytes that do not hash to the id the manifest names. */
    if (r != 0 || get->raw_len != c->size ||
        (SHA256(get->raw, get->raw_len, hash), memcmp(hash, c->hash, PROTO_HASH_LEN) != 0)) {
        get->status = STORE_E_INTEGRITY;
        return;
    }
    get->status = 0;
}

static void decode_done(uv_work_t *work, int status)
{
    struct store_get *get = container_of(work, struct store_get, work);

    if (get_step_end(get))
        return;
    if (status < 0 || get->status != 0) {
        char hex[PROTO_HASH_HEX + 1];
        proto_hex_encode(get->doc.chunks[get->next_chunk].hash, PROTO_HASH_LEN, hex);
        if (get->status == STORE_E_INTEGRITY)
            log_error("integrity: chunk %s of document %s fails its check", hex, get->doc.hash);
        get->ops->error(get->userdata, status < 0 ? status : get->status);
        return;
    }
    get->next_chunk++;
    uint8_t *raw = get->raw;
    get->raw = NULL;
    deliver(get, raw, get->raw_len, get->next_chunk == get->doc.nchunks);
    free(raw);
}

static void chunk_read_done(struct backend_req *req)
{
    struct store_get *get = container_of(req, struct store_get, req);
    int r;

    if (req->status != 0) {
        if (get_step_end(get))
            return;
        if (req->status == BACKEND_E_NOT_FOUND)
            log_error("integrity: chunk %s of document %s is missing", req->key, get->doc.hash);
        get->ops->error(get->userdata, map_backend_status(req->status));
        return;
    }
    if (get->released) {
        get_step_end(get);
        return;
    }
    r = uv_queue_work(get->st->loop, &get->work, decode_work, decode_done);
    if (r < 0) {
        get->busy = false;
        get->ops->error(get->userdata, r);
    }
}

void store_get_next(struct store_get *get)
{
    char hex[PROTO_HASH_HEX + 1];
    int r;

    if (get->busy || get->next_chunk >= get->doc.nchunks)
        return;
    proto_hex_encode(get->doc.chunks[get->next_chunk].hash, PROTO_HASH_LEN, hex);
    memset(&get->req, 0, sizeof(get->req));
    snprintf(get->req.key, sizeof(get->req.key), "chunks/%s", hex);
    get->req.max_len = compress_bound(STORE_MAX_CHUNK);
    get->req.cb = chunk_read_done;
    get->busy = true;
    r = backend_get(get->st->be, &get->req);
    if (r < 0) {
        get->busy = false;
        get->ops->error(get->userdata, r);
    }
}

int store_get_start(struct store *st, const char *ref, size_t ref_len,
                    const struct store_get_ops *ops, void *userdata, struct store_get **out)
{
    struct store_get *get = calloc(1, sizeof(*get));
    int r;

    if (!get || !(get->ref = malloc(ref_len + 1))) {
        free(get);
        return -ENOMEM;
    }
    memcpy(get->ref, ref, ref_len);
    get->ref[ref_len] = '\0';
    get->ref_len = ref_len;
    get->st = st;
    get->ops = ops;
    get->userdata = userdata;
    get->busy = true;
    r = uv_queue_work(st->loop, &get->work, resolve_work, resolve_done);
    if (r < 0) {
        free(get->ref);
        free(get);
        return r;
    }
    st->active++;
    *out = get;
    return 0;
}

void store_get_release(struct store_get *get)
{
    if (get->busy) {
        get->released = true; /* freed when the running step ends */
        return;
    }
    get_free(get);
}
