/* The add pipeline's worker jobs: cutting, segments, blocks, the entry (see add.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "daemon/store/add-int.h"
#include "daemon/base/log.h"
#include "daemon/format/objects.h"
#include "daemon/format/record.h"
#include "proto/util.h"

/* ---- record lists ---- */

void add_list_clear(struct rec_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        store_rec_clear(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

int add_list_push(struct rec_list *l, struct packer_rec *rec)
{
    struct packer_rec *grown = realloc(l->v, (l->n + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    l->v = grown;
    l->v[l->n++] = *rec;
    memset(rec, 0, sizeof(*rec));
    return 0;
}

/* ---- worker side: cutting, segments, blocks, the entry ---- */

/* Compresses pieces into one block record, appended to the segment's blocks. */
static int seg_block(struct store *st, struct seg_job *sj, const struct record_piece *pieces,
                     size_t n)
{
    struct packer_rec rec = {.type = PACK_REC_BLOCK, .nidx = n};
    int r = record_block_build(pieces, n, st->cfg.compression_level, &rec.bytes, &rec.len, rec.id,
                               &rec.idx);

    if (r < 0)
        return r;
    sj->stored += rec.len;
    sj->written += rec.len;
    if ((r = add_list_push(&sj->blocks, &rec)) < 0)
        store_rec_clear(&rec);
    return r;
}

/*
 * Hashes a segment's chunks, looks each up, and compresses the new ones into
 * blocks of at most RECORD_BLOCK_MAX bytes. A chunk that repeats within the
 * segment is stored once.
 */
static int seg_process(struct store *st, struct seg_job *sj, bool heal)
{
    struct record_piece *pieces = NULL;
    uint32_t *known = NULL;
    size_t npieces = 0, first = 0, raw = 0;
    int r = 0;

    sj->chunks = calloc(sj->nends ? sj->nends : 1, sizeof(*sj->chunks));
    pieces = calloc(sj->nends ? sj->nends : 1, sizeof(*pieces));
    known = calloc(sj->nends ? sj->nends : 1, sizeof(*known));
    if (!sj->chunks || !pieces || !known) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; r == 0 && i < sj->nends; i++) {
        size_t start = i ? sj->ends[i - 1] : 0, len = sj->ends[i] - start;
        struct manifest_entry *c = &sj->chunks[i];
        bool repeat = false;
        SHA256(sj->seg.data + start, len, c->hash);
        c->bytes = len;
        for (size_t k = 0; k < npieces && !repeat; k++)
            repeat = memcmp(pieces[k].hash, c->hash, PROTO_HASH_LEN) == 0;
        if (repeat)
            continue;
        r = db_chunk_lookup(st->db, c->hash, &known[i]);
        if (r == DB_E_NOT_FOUND && heal) {
            /* Healing stores nothing new: only fresh copies of damaged chunks. */
            bool damaged = false;
            if ((r = db_chunk_damaged(st->db, c->hash, &damaged)) < 0)
                break;
            if (!damaged) {
                known[i] = 0;
                continue;
            }
            r = DB_E_NOT_FOUND;
        }
        if (r == DB_E_NOT_FOUND) {
            /* A full block goes first; the next one starts with this chunk. */
            if (npieces > first &&
                (raw + len > RECORD_BLOCK_MAX || npieces - first == PACK_MAX_BLOCK_CHUNKS)) {
                r = seg_block(st, sj, pieces + first, npieces - first);
                first = npieces;
                raw = 0;
            }
            pieces[npieces] = (struct record_piece){sj->seg.data + start, len, {0}};
            memcpy(pieces[npieces].hash, c->hash, PROTO_HASH_LEN);
            npieces++;
            raw += len;
            known[i] = 0;
            r = r < 0 ? r : 0;
        } else if (r == 0) {
            sj->stored += known[i];
        }
    }
    if (r == 0 && npieces > first)
        r = seg_block(st, sj, pieces + first, npieces - first);
out:
    free(pieces);
    free(known);
    return r;
}

void add_seg_work(uv_work_t *work)
{
    struct seg_job *sj = container_of(work, struct seg_job, work);
    sj->status = seg_process(sj->add->st, sj, sj->add->p.heal);
}

/* The journal entry of this add: the manifest root with what the add brought. */
int add_entry_build(struct store_add *add, uint64_t size, uint64_t nchunks, uint64_t stored,
                    bool text, unsigned depth, const uint8_t *root, size_t root_len,
                    struct packer_rec *rec)
{
    struct entry e = {
        .time_ns = add->entry_ns,
        .size = size,
        .nchunks = nchunks,
        .stored = stored,
        .text = text,
        .mime = add->p.mime,
        .name = add->p.name,
        .fmode = add->p.fattr.mode,
        .fmtime = add->p.fattr.mtime,
        .depth = depth,
        .root = (uint8_t *)root,
        .root_len = root_len,
        .tags = add->p.tags,
        .ntags = add->p.ntags,
        .meta_keys = add->p.meta_keys,
        .meta_values = add->p.meta_values,
        .nmeta = add->p.nmeta,
    };

    memcpy(e.doc, add->doc_hash, PROTO_HASH_LEN);
    return store_entry_record(add->st, &e, rec);
}

/* After the last cut: is the document already stored, as it is named? */
static int check_existing(struct store_add *add, struct cut_job *job)
{
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    bool heal = false;
    int r;

    /* Healing with nothing known damaged writes nothing. */
    if (add->p.heal) {
        if ((r = db_chunks_bad_any(add->st->db, &heal)) < 0)
            return r;
        job->unchanged = !heal;
        return 0;
    }
    proto_hex_encode(add->doc_hash, PROTO_HASH_LEN, hex);
    r = db_resolve(add->st->db, hex, PROTO_HASH_HEX, 0, &doc);
    if (r < 0 || r == DB_E_AMBIGUOUS)
        return r < 0 ? r : -EIO;
    /*
     * Adding what is already there, as it is named, changes nothing: skip
     * every write - unless verify found stored chunks damaged, which this
     * content may heal (the chunks then go through their lookups as new).
     */
    if (r == 0 && add->p.ntags == 0 && add->p.nmeta == 0 &&
        db_chunks_bad_any(add->st->db, &heal) == 0 && !heal) {
        bool current = !add->p.name || !add->p.name[0];
        if (!current &&
            db_name_current(add->st->db, add->p.name, doc.rowid, &add->p.fattr, &current) < 0)
            current = false;
        job->unchanged = current;
        job->stored_size = doc.stored_size;
        snprintf(job->mime, sizeof(job->mime), "%s", doc.mime);
    }
    db_doc_clear(&doc);
    return 0;
}

void add_cut_work(uv_work_t *work)
{
    struct cut_job *job = container_of(work, struct cut_job, work);
    struct store_add *add = job->add;
    const struct cdc *cdc = &add->st->cdc;
    size_t total = job->carry.len + job->in.len, off = 0;
    struct seg_job *sj = job->sj;
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
    sj->seg.data = data;
    sj->seg.len = total;
    sj->ends = malloc((total / cdc->min + 2) * sizeof(size_t));
    if (!sj->ends) {
        job->status = -ENOMEM;
        return;
    }
    while (off < total) {
        size_t n = cdc_next(cdc, data + off, total - off, job->final);
        if (n == 0)
            break;
        off += n;
        sj->ends[sj->nends++] = off;
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
    if (!job->final)
        return;
    if (!EVP_DigestFinal_ex(add->doc_ctx, add->doc_hash, &mdlen)) {
        job->status = -EIO;
        return;
    }
    if ((job->status = check_existing(add, job)) != 0 || job->unchanged || !job->whole)
        return;
    /* A whole small document: its segment and its entry in this same job. */
    if ((job->status = seg_process(add->st, sj, add->p.heal)) != 0)
        return;
    sj->done = true;
    /* Small enough to be compressed again with others in a bulk load (packer.h). */
    for (size_t i = 0; i < sj->blocks.n; i++) {
        struct packer_rec *rec = &sj->blocks.v[i];
        uint64_t raw = 0;
        for (size_t e = 0; e < rec->nidx; e++)
            raw += rec->idx[e].raw_size;
        rec->mergeable = raw <= PACKER_MERGE_SMALL;
    }
    /* A manifest too long for a root goes the long way, through segments. */
    if (sj->nends > MANIFEST_FANOUT) {
        job->whole = false;
        return;
    }
    size_t text_len;
    job->root_len = sj->nends * MANIFEST_ENTRY;
    if (!(job->root = malloc(job->root_len ? job->root_len : 1))) {
        job->status = -ENOMEM;
        return;
    }
    manifest_entries_encode(sj->chunks, sj->nends, job->root);
    job->status = add_entry_build(add, total, sj->nends, sj->stored,
                                  text_acc_text(&add->text, &text_len) != NULL, 0, job->root,
                                  job->root_len, &job->entry);
}
