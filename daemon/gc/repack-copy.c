/*
 * Repack, the worker side (repack.c has the rest): one pack read whole, its
 * live records copied into new ones. A block that holds dead chunks is
 * decoded and rebuilt from its live chunks; a record with nothing dead is
 * copied as it is.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "daemon/format/record.h"
#include "daemon/gc/repack-int.h"
#include "daemon/meta/db.h"
#include "daemon/store/store.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

static int push_rec(struct repack_pack *p, struct packer_rec *rec)
{
    struct packer_rec *grown = realloc(p->recs, (p->nrecs + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    p->recs = grown;
    p->recs[p->nrecs++] = *rec;
    p->copied += rec->len;
    return 0;
}

static int push_move(struct repack_pack *p, size_t row, uint32_t sub, uint32_t stored)
{
    struct repack_move *grown = realloc(p->moves, (p->nmoves + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    p->moves = grown;
    p->moves[p->nmoves++] = (struct repack_move){row, p->nrecs, sub, stored};
    return 0;
}

/* A copy of a record as it is, with its index entries. */
static int copy_record(const uint8_t *bytes, const struct pack_record *rec, uint32_t len,
                       struct packer_rec *out)
{
    memset(out, 0, sizeof(*out));
    out->type = rec->type;
    memcpy(out->id, rec->id, PROTO_HASH_LEN);
    if (!(out->bytes = malloc(len)))
        return -ENOMEM;
    memcpy(out->bytes, bytes, len);
    out->len = len;
    if (rec->type == PACK_REC_BLOCK) {
        struct pack_block_chunk *chunks;
        uint32_t count;
        size_t body;
        if (pack_block_parse(rec->payload, rec->length, &chunks, &count, &body) != 0)
            return RECORD_E_BAD;
        out->idx = calloc(count, sizeof(*out->idx));
        if (!out->idx) {
            free(chunks);
            return -ENOMEM;
        }
        for (uint32_t i = 0; i < count; i++) {
            out->idx[i].type = PACK_IDX_CHUNK;
            memcpy(out->idx[i].id, chunks[i].id, PROTO_HASH_LEN);
            out->idx[i].sub_off = chunks[i].sub_off;
            out->idx[i].raw_size = chunks[i].size;
        }
        out->nidx = count;
        free(chunks);
        return 0;
    }
    struct compress_header hdr;
    if (compress_header_parse(rec->payload, rec->length, &hdr) != 0 || hdr.raw_size > UINT32_MAX)
        return RECORD_E_BAD;
    if (!(out->idx = calloc(1, sizeof(*out->idx))))
        return -ENOMEM;
    out->idx[0].type = rec->type == PACK_REC_MANIFEST ? PACK_IDX_MANIFEST : PACK_IDX_ENTRY;
    memcpy(out->idx[0].id, rec->id, PROTO_HASH_LEN);
    out->idx[0].raw_size = (uint32_t)hdr.raw_size;
    out->nidx = 1;
    return 0;
}

/* A block with dead chunks: its live ones, compressed anew. */
static int rebuild_block(struct repack_pack *p, const uint8_t *bytes, uint32_t len, size_t first,
                         size_t end, int level)
{
    struct pack_block_chunk *chunks = NULL;
    struct record_piece *pieces = NULL;
    struct packer_rec rec = {.type = PACK_REC_BLOCK};
    uint8_t *raw = NULL;
    size_t raw_len, n = 0;
    uint32_t count;
    int r = record_block_open(bytes, len, &chunks, &count, &raw, &raw_len);

    if (r != 0)
        return r;
    if (!(pieces = calloc(end - first, sizeof(*pieces)))) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = first; i < end; i++) {
        const struct db_pack_row *row = &p->rows[i];
        if (!row->live || row->kind != DB_ROW_CHUNK)
            continue;
        if ((uint64_t)row->loc.sub + row->loc.size > raw_len) {
            r = RECORD_E_BAD;
            goto out;
        }
        pieces[n].data = raw + row->loc.sub;
        pieces[n].len = row->loc.size;
        memcpy(pieces[n].hash, row->hash, PROTO_HASH_LEN);
        /* Never copy what does not hash to its id: damage is not carried along. */
        if (!record_hash_ok(pieces[n].data, pieces[n].len, pieces[n].hash)) {
            r = RECORD_E_BAD;
            goto out;
        }
        n++;
    }
    r = record_block_build(pieces, n, level, &rec.bytes, &rec.len, rec.id, &rec.idx);
    if (r != 0)
        goto out;
    rec.nidx = n;
    uint64_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += pieces[k].len;
    size_t k = 0;
    for (size_t i = first; r == 0 && i < end; i++) {
        const struct db_pack_row *row = &p->rows[i];
        if (!row->live || row->kind != DB_ROW_CHUNK)
            continue;
        r = push_move(p, i, rec.idx[k].sub_off, record_share(rec.len, rec.idx[k].raw_size, total));
        k++;
    }
    if (r == 0)
        r = push_rec(p, &rec);
    if (r != 0) {
        free(rec.bytes);
        free(rec.idx);
    }
out:
    free(chunks);
    free(pieces);
    free(raw);
    return r;
}

/* The rows [first, end) all point at the record at rows[first].loc.off. */
static int one_record(struct repack_pack *p, const uint8_t *buf, size_t first, size_t end,
                      int level)
{
    const struct db_pack_row *head = &p->rows[first];
    struct pack_record rec;
    uint8_t *plain = NULL;
    size_t live = 0;
    int r;

    for (size_t i = first; i < end; i++)
        live += p->rows[i].live;
    if (live == 0)
        return 0; /* dropped with its rows */
    if (head->loc.off + head->loc.len > p->size ||
        pack_record_parse(buf + head->loc.off, head->loc.len, &rec) != 0 ||
        PACK_RECORD_HEADER + rec.length != head->loc.len)
        return RECORD_E_BAD;
    /* Sealed records are read through their plain view, and copied as stored (record.h). */
    if ((r = record_plain(buf + head->loc.off, head->loc.len, &rec, &plain)) != 0)
        return r;
    if (rec.type == PACK_REC_BLOCK) {
        struct pack_block_chunk *chunks;
        uint32_t count;
        size_t body;
        if (pack_block_parse(rec.payload, rec.length, &chunks, &count, &body) != 0) {
            free(plain);
            return RECORD_E_BAD;
        }
        free(chunks);
        /* Every chunk of the block still wanted: the record is copied as it is. */
        if (live != count) {
            free(plain);
            return rebuild_block(p, buf + head->loc.off, head->loc.len, first, end, level);
        }
    }
    struct packer_rec copy;
    r = copy_record(buf + head->loc.off, &rec, head->loc.len, &copy);
    free(plain);
    if (r != 0) {
        free(copy.bytes);
        free(copy.idx);
        return r;
    }
    for (size_t i = first; r == 0 && i < end; i++) {
        if (p->rows[i].live)
            r = push_move(p, i, p->rows[i].loc.sub, p->rows[i].loc.stored);
    }
    if (r == 0)
        r = push_rec(p, &copy);
    if (r != 0) {
        free(copy.bytes);
        free(copy.idx);
    }
    return r;
}

/* Room for the database's commit of the moved rows, beside the copies themselves. */
#define REPACK_ROOM_SLACK (1u << 20)
#define REPACK_ROOM_PER_ROW 512

/*
 * Whether the disk the copies go to has room for them (a local backend; a
 * bucket's room is not ours to know): a rewrite that ran out of room would
 * fill the disk to the last byte before it failed.
 */
static int room_for_copies(struct repack_pack *p, struct backend *be)
{
    uint64_t need = REPACK_ROOM_SLACK + (uint64_t)p->nrows * REPACK_ROOM_PER_ROW, avail;

    for (size_t i = 0; i < p->nrecs; i++)
        need += p->recs[i].len;
    if (backend_free_space(be, &avail) != 0 || avail >= need)
        return 0;
    p->need = need;
    p->avail = avail;
    return -ENOSPC;
}

void gc_repack_pack_work(uv_work_t *work)
{
    struct repack_pack *p = container_of(work, struct repack_pack, work);
    struct gc *gc = p->run->gc;
    uint8_t *buf = NULL;
    size_t got;
    int r;

    r = db_pack_rows(gc->db, p->seq, p->run->safe_gen, &p->rows, &p->nrows);
    if (r == 0 && p->run->a.mode == GC_REPACK_FINISH) {
        /* A marked pack's chunks and segments live if this run's mark reached them. */
        bool any = false;
        for (size_t i = 0; i < p->nrows; i++) {
            struct db_pack_row *row = &p->rows[i];
            if (row->kind != DB_ROW_ENTRY)
                row->live = p->run->a.live(p->run->a.live_ctx, row->hash);
            any |= row->live;
        }
        p->delete_only = !any;
    }
    if (r != 0 || p->delete_only) {
        p->status = r;
        return;
    }
    if (!(buf = malloc(p->size))) {
        p->status = -ENOMEM;
        return;
    }
    r = store_read_pack(gc->st, p->seq, 0, buf, p->size, &got, false);
    if (r == 0 && got != p->size)
        r = RECORD_E_BAD;
    for (size_t first = 0; r == 0 && first < p->nrows;) {
        size_t end = first + 1;
        while (end < p->nrows && p->rows[end].loc.off == p->rows[first].loc.off)
            end++;
        r = one_record(p, buf, first, end, gc->cfg.compression_level);
        first = end;
    }
    free(buf);
    if (r == 0 && p->nrecs > 0)
        r = room_for_copies(p, gc->be);
    p->status = r;
}
