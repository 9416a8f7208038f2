/*
 * The add pipeline. Incoming bytes collect in segments (STORE_SEGMENT
 * bytes). A cut job per segment, one at a time per add so the document hash
 * sees the bytes in order, hashes the new bytes into the document hash, keeps
 * text for the index and finds the content-defined chunk boundaries; the
 * bytes after the last boundary carry over into the next segment. Each cut
 * segment then gets a segment job of its own (several run at once): it
 * hashes every chunk, looks each up, and compresses the chunks the store does
 * not hold yet into one block record. The loop takes finished segments in
 * document order: their chunks go into the manifest (manifest.h, with full
 * lists stored as segment records along the way), their blocks to the pack
 * writer.
 *
 * At the end the journal entry (with the manifest root) goes to the pack
 * writer together with the last block, as one group whose transaction also
 * commits the document; only then is the add reported done. A small
 * document (one segment) does all its work in a single job.
 *
 * Memory is bounded per add whatever the document's size: a few segments,
 * their blocks until they are durable, and one list per manifest level.
 *
 * This file is the loop side; the worker jobs are in add-work.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "daemon/store/add-int.h"
#include "daemon/base/log.h"
#include "daemon/format/objects.h"
#include "daemon/format/record.h"
#include "daemon/store/refcache.h"
#include "proto/util.h"

static void add_pump(struct store_add *add);

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

static void seg_free(struct seg_job *sj)
{
    free(sj->seg.data);
    free(sj->ends);
    free(sj->chunks);
    add_list_clear(&sj->blocks);
    free(sj);
}

static void add_free(struct store_add *add)
{
    struct store *st = add->st;

    for (struct seg_job *sj = add->segs, *next; sj; sj = next) {
        next = sj->next;
        seg_free(sj);
    }
    for (struct spill *sp = add->spills, *next; sp; sp = next) {
        next = sp->next;
        free(sp->list);
        store_rec_clear(&sp->rec);
        free(sp);
    }
    if (add->ticket)
        packer_cancel(st->packer, add->ticket);
    free(add->fill.data);
    free(add->carry.data);
    for (unsigned i = 0; i < add->nready; i++)
        free(add->ready[i].data);
    EVP_MD_CTX_free(add->doc_ctx);
    text_acc_clear(&add->text);
    manifest_builder_clear(&add->mb);
    add_list_clear(&add->last);
    add_list_clear(&add->final_recs);
    store_rec_clear(&add->entry);
    free(add->root);
    params_clear(&add->p);
    store_op_end(st, &add->op);
    st->active--;
    free(add);
}

static void add_fail(struct store_add *add, int status)
{
    if (!add->error)
        add->error = status;
}

/* Whether any job or group of this add is still out. */
static bool add_running(const struct store_add *add)
{
    bool spill_running = add->spills && add->spills->started && !add->spills->done;
    bool seg_running = false;

    for (const struct seg_job *sj = add->segs; sj; sj = sj->next)
        seg_running |= !sj->done;
    return add->cut_running || seg_running || spill_running || add->groups || add->committing;
}

/*
 * Ends a failed or abandoned add once none of its work is running: reports
 * the failure (unless the requester is gone) and frees it. Returns true when
 * the add is gone. A successful add ends in final_done().
 */
static bool add_maybe_end(struct store_add *add)
{
    if (add_running(add))
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
    manifest_builder_init(&add->mb);
    st->active++;
    /* gc keeps what this add may come to reference until it ends. */
    store_op_begin(st, &add->op);
    add->deadline_ms = store_write_deadline(st);
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

/* ---- loop side: ordering the results ---- */

static void group_done(struct packer_group *g, int status);

/* Sends records to the pack writer as one group (the list is taken over). */
static void send_group(struct store_add *add, struct rec_list *recs)
{
    struct add_group *ag = calloc(1, sizeof(*ag));

    if (!ag) {
        add_list_clear(recs);
        add_fail(add, -ENOMEM);
        return;
    }
    ag->add = add;
    ag->recs = *recs;
    *recs = (struct rec_list){0};
    ag->g.recs = ag->recs.v;
    ag->g.nrecs = ag->recs.n;
    ag->g.done = group_done;
    ag->g.not_after_ms = add->deadline_ms;
    add->groups++;
    packer_submit(add->st->packer, &ag->g);
}

static void group_done(struct packer_group *g, int status)
{
    struct add_group *ag = container_of(g, struct add_group, g);
    struct store_add *add = ag->add;

    if (status != 0) {
        log_warn("add: writing records failed: %s",
                 status < 0 ? strerror(-status) : "backend unavailable");
        add_fail(add, status < 0 ? status : STORE_E_UNAVAILABLE);
    }
    add_list_clear(&ag->recs);
    free(ag);
    add->groups--;
    add_progress(add);
}

static void spill_work(uv_work_t *work)
{
    struct spill *sp = container_of(work, struct spill, work);
    uint8_t *raw = malloc(MANIFEST_SEGMENT_HEADER + sp->n * MANIFEST_ENTRY);

    if (!raw) {
        sp->status = -ENOMEM;
        return;
    }
    size_t len = manifest_segment_encode(sp->level, sp->list, sp->n, raw);
    sp->status = record_seal_build(PACK_REC_MANIFEST, raw, len, sp->add->st->cfg.compression_level,
                                   &sp->rec.bytes, &sp->rec.len, sp->rec.id, &sp->rec.idx);
    sp->rec.type = PACK_REC_MANIFEST;
    sp->rec.nidx = 1;
    free(raw);
}

static void spill_start(struct store_add *add);
static void spill_done(uv_work_t *work, int status);

/* Queues the storing of a level's full (or, at the end, last) list. */
static void spill_level(struct store_add *add, unsigned level)
{
    struct spill *sp = calloc(1, sizeof(*sp));

    if (!sp) {
        add_fail(add, -ENOMEM);
        return;
    }
    sp->add = add;
    sp->level = level;
    sp->list = manifest_builder_take(&add->mb, level, &sp->n);
    for (size_t i = 0; i < sp->n; i++)
        sp->bytes += sp->list[i].bytes;
    if (add->spills_tail)
        add->spills_tail->next = sp;
    else
        add->spills = sp;
    add->spills_tail = sp;
    spill_start(add);
}

static void spill_start(struct store_add *add)
{
    struct spill *sp = add->spills;

    if (!sp || sp->started || add->error || add->aborted)
        return;
    sp->started = true;
    if (uv_queue_work(add->st->loop, &sp->work, spill_work, spill_done) < 0) {
        add_fail(add, -ENOMEM);
        sp->done = true;
    }
}

/* Pushes an entry, storing the level's list first when it is full. */
static void push_entry(struct store_add *add, unsigned level, const struct manifest_entry *e)
{
    if (manifest_builder_full(&add->mb, level))
        spill_level(add, level);
    if (manifest_builder_push(&add->mb, level, e) < 0)
        add_fail(add, -E2BIG);
}

static void spill_done(uv_work_t *work, int status)
{
    struct spill *sp = container_of(work, struct spill, work);
    struct store_add *add = sp->add;

    sp->done = true;
    if (status < 0 || sp->status < 0)
        add_fail(add, status < 0 ? status : sp->status);
    add->spills = sp->next;
    if (!add->spills)
        add->spills_tail = NULL;
    if (!add->error && !add->aborted) {
        struct manifest_entry up = {.bytes = sp->bytes};
        struct rec_list one = {0};
        memcpy(up.hash, sp->rec.id, PROTO_HASH_LEN);
        if (add_list_push(&one, &sp->rec) < 0)
            add_fail(add, -ENOMEM);
        else
            send_group(add, &one);
        push_entry(add, sp->level + 1, &up);
    }
    free(sp->list);
    store_rec_clear(&sp->rec);
    free(sp);
    spill_start(add);
    add_progress(add);
}

/* Takes finished segments in document order: chunks into the manifest, blocks out. */
static void seg_collect(struct store_add *add)
{
    while (add->segs && add->segs->done && !add->error) {
        struct seg_job *sj = add->segs;
        add->segs = sj->next;
        if (!add->segs)
            add->segs_tail = NULL;
        add->nsegs--;
        for (size_t i = 0; i < sj->nends && !add->error; i++)
            push_entry(add, 0, &sj->chunks[i]);
        add->stored += sj->stored;
        add->written += sj->written;
        if (sj->blocks.n) {
            /* The document's last blocks travel with its entry: one sync for a small add. */
            if (add->final_cut_done && !add->segs && add->last.n == 0) {
                add->last = sj->blocks;
                sj->blocks = (struct rec_list){0};
            } else {
                send_group(add, &sj->blocks);
            }
        }
        seg_free(sj);
    }
}

static void seg_done(uv_work_t *work, int status)
{
    struct seg_job *sj = container_of(work, struct seg_job, work);
    struct store_add *add = sj->add;

    sj->done = true;
    if (status < 0 || sj->status < 0)
        add_fail(add, status < 0 ? status : sj->status);
    seg_collect(add);
    add_progress(add);
}

static void seg_start(struct store_add *add, struct seg_job *sj)
{
    sj->add = add;
    if (add->segs_tail)
        add->segs_tail->next = sj;
    else
        add->segs = sj;
    add->segs_tail = sj;
    add->nsegs++;
    if (!sj->done && uv_queue_work(add->st->loop, &sj->work, add_seg_work, seg_done) < 0) {
        sj->done = true;
        add_fail(add, -ENOMEM);
    }
}

static void cut_done(uv_work_t *work, int status)
{
    struct cut_job *job = container_of(work, struct cut_job, work);
    struct store_add *add = job->add;

    add->cut_running = false;
    if (status < 0 || job->status < 0)
        add_fail(add, status < 0 ? status : job->status);
    if (!add->error) {
        add->carry = job->rest;
        job->rest.data = NULL; /* consumed */
        if (job->final) {
            add->final_cut_done = true;
            add->unchanged = job->unchanged;
            add->dba.stored_size = job->stored_size;
            if (job->unchanged)
                snprintf(add->dba.stored_mime, sizeof(add->dba.stored_mime), "%s", job->mime);
        }
        if (job->unchanged) {
            seg_free(job->sj);
        } else {
            seg_start(add, job->sj);
            if (job->whole) {
                add->entry = job->entry;
                memset(&job->entry, 0, sizeof(job->entry));
                add->root = job->root;
                add->root_len = job->root_len;
                job->root = NULL; /* moved */
                add->depth = 0;
                add->entry_started = true;
            }
        }
        job->sj = NULL;
        seg_collect(add);
    } else if (job->sj) {
        seg_free(job->sj);
    }
    store_rec_clear(&job->entry);
    free(job->root);
    free(job->carry.data);
    free(job->in.data);
    free(job->rest.data);
    free(job);
    add_progress(add);
}

static void cut_start(struct store_add *add, struct rawbuf in, bool final)
{
    struct cut_job *job = calloc(1, sizeof(*job));
    int r;

    if (!job || !(job->sj = calloc(1, sizeof(*job->sj)))) {
        free(job);
        free(in.data);
        add_fail(add, -ENOMEM);
        return;
    }
    job->add = add;
    job->carry = add->carry;
    add->carry = (struct rawbuf){0};
    job->in = in;
    job->final = final;
    /* Nothing cut before and this is the end: the whole document in one job. */
    job->whole = final && add->cuts == 0;
    if (job->whole) {
        add->ticket = packer_reserve(add->st->packer);
        add->entry_ns = store_entry_time(add->st);
    }
    add->cuts++;
    add->cut_running = true;
    r = uv_queue_work(add->st->loop, &job->work, add_cut_work, cut_done);
    if (r < 0) {
        add->cut_running = false;
        free(job->carry.data);
        free(in.data);
        free(job->sj);
        free(job);
        add_fail(add, r);
    }
}

/* ---- the end: the entry and the commit ---- */

static void entry_work(uv_work_t *work)
{
    struct store_add *add = container_of(work, struct store_add, entry_work);
    size_t text_len;

    add->entry_status = add_entry_build(add, add->received, add->mb.chunks, add->stored,
                                        text_acc_text(&add->text, &text_len) != NULL, add->depth,
                                        add->root, add->root_len, &add->entry);
}

static void entry_done(uv_work_t *work, int status)
{
    struct store_add *add = container_of(work, struct store_add, entry_work);

    add->committing = false;
    if (status < 0 || add->entry_status < 0)
        add_fail(add, status < 0 ? status : add->entry_status);
    add_progress(add);
}

/* The manifest is complete: its root, then the entry (on a worker). */
static void entry_start(struct store_add *add)
{
    unsigned depth, level;

    if (!manifest_builder_done(&add->mb, &depth, &level)) {
        spill_level(add, level);
        return;
    }
    size_t n = add->mb.n[depth];
    add->root_len = n * MANIFEST_ENTRY;
    add->root = malloc(add->root_len ? add->root_len : 1);
    if (!add->root) {
        add_fail(add, -ENOMEM);
        return;
    }
    manifest_entries_encode(add->mb.levels[depth], n, add->root);
    add->depth = depth;
    add->entry_started = true;
    /* A ticket may be left from a small document that turned out to need segments. */
    if (!add->ticket) {
        add->ticket = packer_reserve(add->st->packer);
        add->entry_ns = store_entry_time(add->st);
    }
    add->committing = true; /* keeps the add alive while the job runs */
    if (uv_queue_work(add->st->loop, &add->entry_work, entry_work, entry_done) < 0) {
        add->committing = false;
        add_fail(add, -ENOMEM);
    }
}

static int final_apply(struct db_txn *txn, struct packer_group *g)
{
    struct store_add *add = container_of(g, struct store_add, final);
    if (store_test_fails_apply(add->st, add->p.name))
        return -EIO;
    return db_txn_add(txn, &add->dba);
}

static void report(struct store_add *add, bool created)
{
    struct store_add_result res = {0};

    proto_hex_encode(add->doc_hash, PROTO_HASH_LEN, res.hash);
    res.name = add->p.name ? add->p.name : "";
    res.size = add->received;
    res.stored_size = add->dba.stored_size;
    res.written = add->written;
    res.mime = add->dba.stored_mime[0] ? add->dba.stored_mime : add->p.mime;
    res.created = created;
    add->ops->done(add->userdata, 0, &res);
}

static void final_voided(void *ctx)
{
    struct store_add *add = ctx;
    int status = add->final_status;

    add->committing = false;
    add_fail(add, status < 0 ? status : STORE_E_UNAVAILABLE);
    (void)add_maybe_end(add);
}

static void final_done(struct packer_group *g, int status)
{
    struct store_add *add = container_of(g, struct store_add, final);
    struct store *st = add->st;

    add->ticket = 0; /* used */
    if (status != 0) {
        add->final_status = status;
        /* Its entry may be in a pack already: cancelled before the failure is told. */
        bool voiding = store_void_entries(st, g, final_voided, add);
        add_list_clear(&add->final_recs);
        if (!voiding)
            final_voided(add);
        return;
    }
    add->committing = false;
    add_list_clear(&add->final_recs);
    if (add->p.name && add->p.name[0])
        refcache_forget_name(st->refs, add->p.name);
    if (add->dba.index_changed) {
        size_t len = 0;
        char *text = NULL;
        /* The text goes to the indexer as it is: no copy. */
        if (add->dba.created && text_acc_text(&add->text, &len)) {
            text = add->text.buf;
            add->text.buf = NULL;
            if (!text && (text = strdup("")))
                len = 0;
        }
        store_index_changed(st, add->dba.rowid, text, len);
    }
    if (!add->aborted)
        report(add, add->dba.created);
    add_free(add);
}

static void add_report_unchanged(struct store_add *add);

/* Everything before is durable: the entry goes with the last block, committing the document. */
static void final_send(struct store_add *add)
{
    struct db_add *d = &add->dba;
    size_t text_len;

    memcpy(d->hash, add->doc_hash, PROTO_HASH_LEN);
    d->size = add->received;
    d->nchunks = add->mb.chunks;
    d->stored = add->stored;
    d->mime = add->p.mime;
    d->name = add->p.name;
    d->fattr = add->p.fattr;
    d->tags = (const char *const *)add->p.tags;
    d->ntags = add->p.ntags;
    d->meta_keys = (const char *const *)add->p.meta_keys;
    d->meta_values = (const char *const *)add->p.meta_values;
    d->nmeta = add->p.nmeta;
    d->depth = add->depth;
    d->root = add->root;
    d->root_len = add->root_len;
    d->text = text_acc_text(&add->text, &text_len) != NULL;
    /* The time the journal recorded, so a rebuild restores exactly this. */
    d->created_at = (int64_t)(add->entry_ns / 1000000000u);
    d->event_ns = add->entry_ns;
    memcpy(d->event_id, add->entry.id, PROTO_HASH_LEN);
    add->final_recs = add->last;
    add->last = (struct rec_list){0};
    /* Healing commits no document: its last blocks go alone, if it has any. */
    if (!add->p.heal && add_list_push(&add->final_recs, &add->entry) < 0) {
        add_fail(add, -ENOMEM);
        return;
    }
    if (add->final_recs.n == 0) {
        add_report_unchanged(add);
        return;
    }
    add->final.recs = add->final_recs.v;
    add->final.nrecs = add->final_recs.n;
    add->final.ticket = add->ticket;
    add->final.apply = add->p.heal ? NULL : final_apply;
    add->final.done = final_done;
    add->final.not_after_ms = add->deadline_ms;
    add->committing = true;
    packer_submit(add->st->packer, &add->final);
}

/*
 * Ends an add that changed nothing: reported like a committed one, from a
 * loop turn of its own (the caller may be inside store_add_write).
 */
static void unchanged_done(uv_work_t *work, int status)
{
    struct store_add *add = container_of(work, struct store_add, entry_work);

    add->committing = false;
    if (status < 0 || add->aborted) {
        add_fail(add, status < 0 ? status : -ECANCELED);
        (void)add_maybe_end(add);
        return;
    }
    report(add, false);
    add_free(add);
}

static void nothing_work(uv_work_t *work)
{
}

static void add_report_unchanged(struct store_add *add)
{
    if (add->committing)
        return;
    if (add->ticket) {
        packer_cancel(add->st->packer, add->ticket);
        add->ticket = 0;
    }
    add->committing = true; /* keeps the add alive until the report */
    if (uv_queue_work(add->st->loop, &add->entry_work, nothing_work, unchanged_done) < 0) {
        add->committing = false;
        add_fail(add, -ENOMEM);
    }
}

static void add_pump(struct store_add *add)
{
    if (add->error || add->aborted)
        return;
    if (!add->cut_running && add->nsegs < STORE_MAX_SEGJOBS && add->groups < STORE_MAX_GROUPS) {
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
    if (!add->final_cut_done || add->cut_running)
        return;
    if (add->unchanged) {
        if (!add->segs && !add->spills && add->groups == 0)
            add_report_unchanged(add);
        return;
    }
    if (add->segs || add->spills || add->committing)
        return;
    if (!add->entry_started) {
        entry_start(add);
        return;
    }
    /* Earlier groups first: the entry must never be durable before what it names. */
    if (add->entry.bytes && add->groups == 0)
        final_send(add);
}
