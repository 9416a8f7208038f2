/*
 * The add pipeline. Incoming bytes collect in segments (STORE_SEGMENT bytes).
 * A cut job per segment, one at a time per add so the document hash sees the
 * bytes in order, hashes the new bytes into the document hash, keeps text
 * for the index and finds the content-defined chunk boundaries; the bytes
 * after the last boundary carry over into the next segment. Each chunk then
 * gets an encode job of its own, so the chunks of one document are hashed
 * and compressed on several threads at once; a chunk the metadata already
 * knows is not stored again. New chunk objects are put on the backend as
 * their jobs finish; after the last one, the add's journal entry, which is
 * also the document's manifest (objects.h). When every put is durable the
 * metadata is committed, and only then is the add reported done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "compress/compress.h"
#include "daemon/log.h"
#include "daemon/objects.h"
#include "daemon/store-int.h"
#include "daemon/text.h"
#include "proto/util.h"
#include "storage/backend.h"

/* Bytes a cut job takes at once (at least the largest chunk). */
#define STORE_SEGMENT (1024u * 1024)
/* Per add: encode jobs and chunk puts in flight; bounds its memory. */
#define STORE_MAX_ENCODES 16
#define STORE_MAX_PUTS 8
#define STORE_MAX_READY 8

struct rawbuf {
    uint8_t *data;
    size_t len;
};

/* Bytes that chunks are cut from; freed when the last chunk's encode job is done. */
struct segment {
    uint8_t *data;
    size_t len;
    unsigned refs;
};

struct cut_job {
    uv_work_t work;
    struct store_add *add;
    struct rawbuf carry, in; /* consumed by the job */
    bool final;
    int status;
    struct segment *seg;
    size_t *ends; /* chunk end offsets in seg */
    size_t nends;
    struct rawbuf rest; /* bytes after the last cut: the next job's carry */
    bool doc_exists;
    bool unchanged; /* the store already holds this, under this name: nothing to write */
    uint64_t stored_size;
};

struct encode_job {
    uv_work_t work;
    struct store_add *add;
    struct segment *seg;
    size_t off, len, index;
    uint64_t gen;
    int status;
    uint8_t hash[PROTO_HASH_LEN];
    bool known;
    uint32_t stored_size;
    uint8_t *obj;
    size_t obj_len;
};

struct object_put {
    struct backend_req req;
    struct store_waiter waiter;
    struct store_add *add;
    uint8_t *obj;
};

struct store_add {
    struct store *st;
    struct store_add_params p;
    const struct store_add_ops *ops;
    void *userdata;

    EVP_MD_CTX *doc_ctx;  /* used by the running cut job only */
    struct text_acc text; /* likewise */
    struct rawbuf fill;
    size_t fill_cap; /* grows to STORE_SEGMENT: small documents never hold a whole segment */
    struct rawbuf ready[STORE_MAX_READY]; /* full segments waiting for a cut job, FIFO */
    unsigned nready;
    struct rawbuf carry;
    bool told_full;

    bool cut_running;
    unsigned encodes_running, puts_running;
    uint64_t received;

    struct db_chunk *chunks; /* in document order; filled in as encode jobs finish */
    bool *pinned;            /* chunks[i] is pinned against gc */
    size_t nchunks, chunks_cap;

    bool finishing, final_cut_done, entry_started, committing, aborted;
    bool unchanged; /* see cut_job */
    int error;
    uint8_t doc_hash[PROTO_HASH_LEN];
    bool doc_exists;

    uint64_t entry_ns; /* the journal time of this add; its commit uses the same */
    uv_work_t report_work;
    struct db_write dbw;
    struct db_add dba;
};

static void add_pump(struct store_add *add);
static void add_report_unchanged(struct store_add *add);

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

static void add_free(struct store_add *add)
{
    for (size_t i = 0; i < add->nchunks; i++) {
        if (add->pinned[i])
            pinset_remove(&add->st->pins, add->chunks[i].hash);
    }
    free(add->pinned);
    free(add->fill.data);
    free(add->carry.data);
    for (unsigned i = 0; i < add->nready; i++)
        free(add->ready[i].data);
    EVP_MD_CTX_free(add->doc_ctx);
    text_acc_clear(&add->text);
    free(add->chunks);
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
    if (add->cut_running || add->encodes_running || add->puts_running || add->committing)
        return false;
    if (!add->aborted && !add->error)
        return false;
    if (!add->aborted)
        add->ops->done(add->userdata, add->error, NULL);
    add_free(add);
    return true;
}

bool store_add_full(const struct store_add *add)
{
    /* One full segment waiting is enough backlog while the pipeline is busy. */
    return !add->error && add->nready > 0;
}

/* After a step finished: start the next, end the add, or let the requester feed it. */
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
    text_acc_init(&add->text, st->cfg.max_text);
    st->active++;
    *out = add;
    return 0;
}

bool store_add_write(struct store_add *add, const uint8_t *data, size_t len, bool last)
{
    if (add->finishing)
        return true;
    if (add->received + len > STORE_MAX_DOCUMENT)
        add_fail(add, STORE_E_TOO_LARGE);
    else if (add->p.has_size && add->received + len > add->p.size)
        add_fail(add, STORE_E_SIZE);
    if (!add->error)
        add->received += len;
    while (!add->error && len > 0) {
        if (add->fill.len == add->fill_cap) {
            /* Start at what is announced or arriving, then double, up to a segment. */
            size_t want = add->fill_cap ? add->fill_cap * 2 : len;
            if (add->p.has_size && add->fill_cap == 0 && add->p.size > want)
                want = add->p.size;
            if (want < 4096)
                want = 4096;
            if (want > STORE_SEGMENT)
                want = STORE_SEGMENT;
            uint8_t *grown = realloc(add->fill.data, want);
            if (!grown) {
                add_fail(add, -ENOMEM);
                break;
            }
            add->fill.data = grown;
            add->fill_cap = want;
        }
        size_t n = add->fill_cap - add->fill.len < len ? add->fill_cap - add->fill.len : len;
        memcpy(add->fill.data + add->fill.len, data, n);
        add->fill.len += n;
        data += n;
        len -= n;
        if (add->fill.len == STORE_SEGMENT) {
            if (add->nready == STORE_MAX_READY) {
                /* The caller ignored store_add_full(); refuse rather than grow. */
                add_fail(add, -ENOBUFS);
                break;
            }
            add->ready[add->nready++] = add->fill;
            add->fill = (struct rawbuf){0};
            add->fill_cap = 0;
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

void store_add_abort(struct store_add *add)
{
    add->aborted = true;
    (void)add_maybe_end(add);
}

/* ---- cutting ---- */

static void cut_work(uv_work_t *work)
{
    struct cut_job *job = container_of(work, struct cut_job, work);
    struct store_add *add = job->add;
    const struct cdc *cdc = &add->st->cdc;
    size_t total = job->carry.len + job->in.len, off = 0;
    unsigned int mdlen;
    uint8_t *data;

    /* The carried bytes were hashed with the previous segment; only new bytes go in. */
    if (!EVP_DigestUpdate(add->doc_ctx, job->in.data, job->in.len)) {
        job->status = -EIO;
        return;
    }
    text_acc_feed(&add->text, job->in.data, job->in.len, job->final);
    if (job->carry.len == 0) {
        data = job->in.data;
        job->in.data = NULL; /* consumed */
    } else {
        data = realloc(job->carry.data, total ? total : 1);
        if (!data) {
            job->status = -ENOMEM;
            return;
        }
        job->carry.data = NULL; /* consumed */
        if (job->in.len > 0)    /* the last segment may be empty */
            memcpy(data + job->carry.len, job->in.data, job->in.len);
        free(job->in.data);
        job->in.data = NULL;
    }
    job->seg = calloc(1, sizeof(*job->seg));
    job->ends = malloc((total / cdc->min + 2) * sizeof(size_t));
    if (!job->seg || !job->ends) {
        free(data);
        job->status = -ENOMEM;
        return;
    }
    job->seg->data = data;
    job->seg->len = total;
    while (off < total) {
        size_t n = cdc_next(cdc, data + off, total - off, job->final);
        if (n == 0)
            break;
        off += n;
        job->ends[job->nends++] = off;
    }
    if (off < total) {
        job->rest.len = total - off;
        job->rest.data = malloc(job->rest.len);
        if (!job->rest.data) {
            job->status = -ENOMEM;
            return;
        }
        memcpy(job->rest.data, data + off, job->rest.len);
    }
    if (job->final) {
        char hex[PROTO_HASH_HEX + 1];
        struct db_doc doc;
        if (!EVP_DigestFinal_ex(add->doc_ctx, add->doc_hash, &mdlen)) {
            job->status = -EIO;
            return;
        }
        proto_hex_encode(add->doc_hash, PROTO_HASH_LEN, hex);
        int r = db_resolve(add->st->db, hex, PROTO_HASH_HEX, 0, &doc);
        if (r < 0 || r == DB_E_AMBIGUOUS) {
            job->status = r < 0 ? r : -EIO;
            return;
        }
        job->doc_exists = (r == 0);
        /* Adding what is already there, as it is named, changes nothing: skip every write. */
        if (job->doc_exists && add->p.ntags == 0 && add->p.nmeta == 0) {
            bool current = !add->p.name || !add->p.name[0];
            if (!current && db_name_current(add->st->db, add->p.name, doc.rowid, &current) < 0)
                current = false;
            job->unchanged = current;
            job->stored_size = doc.stored_size;
        }
        db_doc_clear(&doc);
    }
}

static void encode_start(struct store_add *add, struct segment *seg, size_t off, size_t len,
                         size_t index);

static void segment_unref(struct segment *seg)
{
    if (seg && --seg->refs == 0) {
        free(seg->data);
        free(seg);
    }
}

static void cut_done(uv_work_t *work, int status)
{
    struct cut_job *job = container_of(work, struct cut_job, work);
    struct store_add *add = job->add;
    struct segment *seg = job->seg;

    add->cut_running = false;
    if (status < 0 || job->status < 0)
        add_fail(add, status < 0 ? status : job->status);
    if (!add->error && job->nends > 0 && add->nchunks + job->nends > add->chunks_cap) {
        size_t cap = add->chunks_cap ? add->chunks_cap : 16;
        while (cap < add->nchunks + job->nends)
            cap *= 2;
        struct db_chunk *grown = realloc(add->chunks, cap * sizeof(*grown));
        bool *pinned = grown ? realloc(add->pinned, cap * sizeof(*pinned)) : NULL;
        if (grown)
            add->chunks = grown;
        if (pinned) {
            memset(pinned + add->chunks_cap, 0, (cap - add->chunks_cap) * sizeof(*pinned));
            add->pinned = pinned;
            add->chunks_cap = cap;
        } else {
            add_fail(add, -ENOMEM);
        }
    }
    if (seg) {
        /* The loop holds a reference while it starts the encode jobs. */
        seg->refs = 1;
        for (size_t i = 0; !add->error && i < job->nends; i++) {
            size_t start = i ? job->ends[i - 1] : 0;
            encode_start(add, seg, start, job->ends[i] - start, add->nchunks++);
        }
        segment_unref(seg);
    }
    if (!add->error) {
        add->carry = job->rest;
        job->rest.data = NULL; /* consumed */
        if (job->final) {
            add->final_cut_done = true;
            add->doc_exists = job->doc_exists;
            add->unchanged = job->unchanged;
            add->dba.stored_size = job->stored_size;
        }
    }
    free(job->carry.data);
    free(job->in.data);
    free(job->rest.data);
    free(job->ends);
    free(job);
    add_progress(add);
}

static void cut_start(struct store_add *add, struct rawbuf in, bool final)
{
    struct cut_job *job = calloc(1, sizeof(*job));
    int r;

    if (!job) {
        free(in.data);
        add_fail(add, -ENOMEM);
        return;
    }
    job->add = add;
    job->carry = add->carry;
    add->carry = (struct rawbuf){0};
    job->in = in;
    job->final = final;
    add->cut_running = true;
    r = uv_queue_work(add->st->loop, &job->work, cut_work, cut_done);
    if (r < 0) {
        add->cut_running = false;
        free(job->carry.data);
        free(in.data);
        free(job);
        add_fail(add, r);
    }
}

/* ---- encoding and storing chunks ---- */

static void encode_work(uv_work_t *work)
{
    struct encode_job *job = container_of(work, struct encode_job, work);
    struct store *st = job->add->st;
    const uint8_t *data = job->seg->data + job->off;
    int r;

    SHA256(data, job->len, job->hash);
    r = db_chunk_lookup(st->db, job->hash, &job->stored_size);
    if (r < 0) {
        job->status = r;
        return;
    }
    job->known = (r == 0);
    if (job->known)
        return;
    size_t cap = compress_bound(job->len);
    job->obj = malloc(cap);
    if (!job->obj) {
        job->status = -ENOMEM;
        return;
    }
    job->status =
        compress_encode(data, job->len, st->cfg.compression_level, job->obj, cap, &job->obj_len);
    job->stored_size = (uint32_t)job->obj_len;
}

static void put_object(struct store_add *add, const char *dir, const uint8_t hash[PROTO_HASH_LEN],
                       uint8_t *obj, size_t len);

static void encode_done(uv_work_t *work, int status)
{
    struct encode_job *job = container_of(work, struct encode_job, work);
    struct store_add *add = job->add;
    struct store *st = add->st;

    st->encodes_running[job->gen & 1]--;
    add->encodes_running--;
    segment_unref(job->seg);
    if (status < 0 || job->status < 0)
        add_fail(add, status < 0 ? status : job->status);
    if (!add->error) {
        struct db_chunk *c = &add->chunks[job->index];
        memcpy(c->hash, job->hash, PROTO_HASH_LEN);
        c->size = (uint32_t)job->len;
        c->stored_size = job->stored_size;
        /*
         * Pinned from the moment its hash is known on the loop: gc (which
         * waits for encode jobs older than its deletions) then sees the pin
         * before it deletes, whether the chunk was found stored or is new.
         */
        if (store_pin(st, c->hash) < 0)
            add_fail(add, -ENOMEM);
        else
            add->pinned[job->index] = true;
        if (!add->error && !job->known) {
            put_object(add, "chunks", job->hash, job->obj, job->obj_len);
            job->obj = NULL; /* consumed */
        }
    }
    /* Only now, with the chunk pinned, may a gc waiting for this job go on deleting. */
    store_gc_poke(st);
    free(job->obj);
    free(job);
    add_progress(add);
}

static void encode_start(struct store_add *add, struct segment *seg, size_t off, size_t len,
                         size_t index)
{
    struct encode_job *job = calloc(1, sizeof(*job));
    struct store *st = add->st;
    int r;

    if (!job) {
        add_fail(add, -ENOMEM);
        return;
    }
    job->add = add;
    job->seg = seg;
    job->off = off;
    job->len = len;
    job->index = index;
    job->gen = st->encode_gen;
    r = uv_queue_work(st->loop, &job->work, encode_work, encode_done);
    if (r < 0) {
        free(job);
        add_fail(add, r);
        return;
    }
    seg->refs++;
    add->encodes_running++;
    st->encodes_running[job->gen & 1]++;
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
    add->puts_running--;
    add_progress(add);
}

static void put_issue(struct object_put *op)
{
    struct store_add *add = op->add;
    int r = backend_put(add->st->be, &op->req);

    if (r < 0) {
        free(op->obj);
        free(op);
        add->puts_running--;
        add_fail(add, r);
    }
}

static void put_resume(struct store_waiter *w)
{
    struct object_put *op = container_of(w, struct object_put, waiter);
    struct store_add *add = op->add;

    put_issue(op);
    add_progress(add);
}

/* Starts a put of an owned object buffer; on failure frees it and fails the add. */
static void put_object(struct store_add *add, const char *dir, const uint8_t hash[PROTO_HASH_LEN],
                       uint8_t *obj, size_t len)
{
    struct object_put *op = calloc(1, sizeof(*op));

    if (!op) {
        free(obj);
        add_fail(add, -ENOMEM);
        return;
    }
    store_object_key(op->req.key, sizeof(op->req.key), dir, hash);
    op->req.data = obj;
    op->req.len = len;
    op->req.cb = object_put_done;
    op->add = add;
    op->obj = obj;
    add->puts_running++;
    /* A chunk gc is deleting right now is written only after the deletion. */
    memcpy(op->waiter.hash, hash, PROTO_HASH_LEN);
    op->waiter.resume = put_resume;
    if (strcmp(dir, "chunks") == 0 && store_wait_deletion(add->st, &op->waiter))
        return;
    put_issue(op);
}

/*
 * The journal entry of this add: the document's manifest (its chunks) with the
 * name, tags and metadata the add brought; what a rebuild replays.
 */
static void put_entry(struct store_add *add)
{
    add->entry_ns = store_entry_time(add->st);
    struct entry e = {
        .time_ns = add->entry_ns,
        .size = add->received,
        .chunks = add->chunks,
        .nchunks = add->nchunks,
        .mime = add->p.mime,
        .name = add->p.name,
        .tags = add->p.tags,
        .ntags = add->p.ntags,
        .meta_keys = add->p.meta_keys,
        .meta_values = add->p.meta_values,
        .nmeta = add->p.nmeta,
    };
    uint8_t key[PROTO_HASH_LEN], *obj;
    size_t len;
    int r;

    memcpy(e.doc, add->doc_hash, PROTO_HASH_LEN);
    r = objects_entry_encode(&e, add->st->cfg.compression_level, &obj, &len, key);
    if (r < 0)
        add_fail(add, r);
    else
        put_object(add, "entries", key, obj, len);
}

/* ---- committing ---- */

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

/*
 * Ends an add that changed nothing: reported like a committed one, from a
 * loop turn of its own (the caller may be inside store_add_write).
 */
static void unchanged_done(uv_work_t *work, int status)
{
    struct store_add *add = container_of(work, struct store_add, report_work);
    struct store_add_result res = {0};

    add->committing = false;
    if (status < 0 || add->aborted) {
        add_fail(add, status < 0 ? status : -ECANCELED);
        (void)add_maybe_end(add);
        return;
    }
    proto_hex_encode(add->doc_hash, PROTO_HASH_LEN, res.hash);
    res.name = add->p.name ? add->p.name : "";
    res.size = add->received;
    res.stored_size = add->dba.stored_size;
    res.created = false;
    add->ops->done(add->userdata, 0, &res);
    add_free(add);
}

static void nothing_work(uv_work_t *work)
{
}

static void add_report_unchanged(struct store_add *add)
{
    if (add->committing)
        return;
    add->committing = true; /* keeps the add alive until the report */
    if (uv_queue_work(add->st->loop, &add->report_work, nothing_work, unchanged_done) < 0) {
        add->committing = false;
        add_fail(add, -ENOMEM);
    }
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
    d->text = text_acc_text(&add->text, &d->text_len);
    /* The time the journal recorded, so a rebuild restores exactly this. */
    d->created_at = (int64_t)(add->entry_ns / 1000000000u);
    add->dbw.apply = commit_apply;
    add->dbw.done = commit_done;
    add->committing = true;
    db_write(add->st->db, &add->dbw);
}

static void add_pump(struct store_add *add)
{
    if (add->error || add->aborted)
        return;
    if (!add->cut_running && add->encodes_running < STORE_MAX_ENCODES &&
        add->puts_running < STORE_MAX_PUTS) {
        if (add->nready > 0) {
            struct rawbuf next = add->ready[0];
            memmove(add->ready, add->ready + 1, (add->nready - 1) * sizeof(add->ready[0]));
            add->nready--;
            cut_start(add, next, false);
            return;
        }
        if (add->finishing && !add->final_cut_done) {
            if (add->p.has_size && add->received != add->p.size) {
                add_fail(add, STORE_E_SIZE);
                return;
            }
            struct rawbuf last = add->fill;
            add->fill = (struct rawbuf){0};
            add->fill_cap = 0;
            cut_start(add, last, true);
            return;
        }
    }
    if (!add->final_cut_done || add->encodes_running > 0)
        return;
    if (add->unchanged) {
        if (add->puts_running == 0)
            add_report_unchanged(add);
        return;
    }
    if (!add->entry_started) {
        add->entry_started = true;
        put_entry(add);
    }
    if (!add->error && add->puts_running == 0 && !add->committing)
        add_commit(add);
}
