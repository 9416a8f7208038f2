/*
 * Recovery, step 1 for one pack: what the database lacks of it goes into the
 * database (chunk, segment and journal rows; journal entries unapplied). A
 * sealed pack is read through its index; an open one record by record, where
 * a torn tail (a crash in the middle of an append) shows as a record that
 * does not parse and is cut off. Step 2 happens here too: an older pack left
 * open is sealed, the newest is handed to the pack writer.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "daemon/base/log.h"
#include "daemon/format/objects.h"
#include "daemon/pack/packer.h"
#include "daemon/format/record.h"
#include "daemon/recovery/replay-int.h"
#include "daemon/store/store.h"
#include "storage/pack/pack.h"

/* Bytes of an open pack read at once; more than the largest record. */
#define REPLAY_WINDOW (8u * 1024 * 1024)

static int rows_apply(struct db_txn *txn, void *ctx)
{
    struct replay *rp = ctx;
    int r = 0;

    for (size_t i = 0; r == 0 && i < rp->nrows; i++) {
        struct replay_row *w = &rp->rows[i];
        if (w->kind == DB_ROW_CHUNK)
            r = rp->rebuild ? db_txn_chunk_put_latest(txn, w->hash, &w->loc)
                            : db_txn_chunk_put(txn, w->hash, &w->loc);
        else if (w->kind == DB_ROW_SEGMENT)
            r = db_txn_segment_put(txn, w->hash, &w->loc);
        else if (rp->relocating)
            r = db_txn_journal_relocate(txn, w->hash, &w->loc);
        else
            r = db_txn_journal_put(txn, w->hash, &w->loc, w->doc, w->time_ns, (int)w->op, false);
    }
    return r;
}

static int rows_flush(struct replay *rp)
{
    int r = 0;

    if (rp->nrows)
        r = replay_commit(rp, rows_apply, rp);
    rp->nrows = 0;
    return r;
}

static int row_add(struct replay *rp, const struct replay_row *w)
{
    int r = 0;

    if (rp->nrows == REPLAY_ROWS)
        r = rows_flush(rp);
    rp->rows[rp->nrows++] = *w;
    rp->records++;
    return r;
}

static int index_add(struct replay *rp, const struct pack_index_entry *e)
{
    if (rp->nindex == rp->index_cap) {
        size_t cap = rp->index_cap ? rp->index_cap * 2 : 256;
        struct pack_index_entry *grown = realloc(rp->index, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        rp->index = grown;
        rp->index_cap = cap;
    }
    rp->index[rp->nindex++] = *e;
    return 0;
}

/* A journal entry's row: its document and time, from the entry itself. */
static int entry_row(struct replay *rp, const uint8_t *bytes, size_t len,
                     const uint8_t id[PROTO_HASH_LEN], struct replay_row *w)
{
    struct entry e;
    uint8_t *raw;
    size_t raw_len;
    int r = record_seal_open(bytes, len, PACK_REC_ENTRY, id, OBJECTS_MAX_ENTRY, &raw, &raw_len);

    if (r != 0)
        return r;
    r = objects_entry_decode(raw, raw_len, &e);
    free(raw);
    if (r < 0)
        return r == -ENOMEM ? r : RECORD_E_BAD;
    memcpy(w->doc, e.doc, PROTO_HASH_LEN);
    w->time_ns = e.time_ns;
    w->op = e.op;
    if (e.time_ns > rp->max_time)
        rp->max_time = e.time_ns;
    objects_entry_clear(&e);
    return 0;
}

/*
 * One intact record of an open pack at `off`: its index entries, and (when
 * the database does not have it yet) its rows.
 */
static int scanned_plain(struct replay *rp, uint64_t off, const uint8_t *bytes, uint32_t len,
                         const struct pack_record *rec, bool want_rows)
{
    struct pack_index_entry e = {.record_off = off, .record_len = len};
    struct replay_row w = {.loc = {.pack = rp->seq, .off = off, .len = len}};
    int r;

    if (rec->type == PACK_REC_BLOCK) {
        struct pack_block_chunk *chunks;
        uint32_t count;
        size_t body;
        uint64_t raw = 0;
        if (pack_block_parse(rec->payload, rec->length, &chunks, &count, &body) != 0)
            return RECORD_E_BAD;
        for (uint32_t i = 0; i < count; i++)
            raw += chunks[i].size;
        r = 0;
        for (uint32_t i = 0; r == 0 && i < count; i++) {
            e.type = PACK_IDX_CHUNK;
            memcpy(e.id, chunks[i].id, PROTO_HASH_LEN);
            e.sub_off = chunks[i].sub_off;
            e.raw_size = chunks[i].size;
            r = index_add(rp, &e);
            if (r == 0 && want_rows) {
                w.kind = DB_ROW_CHUNK;
                memcpy(w.hash, chunks[i].id, PROTO_HASH_LEN);
                w.loc.sub = chunks[i].sub_off;
                w.loc.size = chunks[i].size;
                w.loc.stored = record_share(len, chunks[i].size, raw);
                r = row_add(rp, &w);
            }
        }
        free(chunks);
        return r;
    }
    struct compress_header hdr;
    if (compress_header_parse(rec->payload, rec->length, &hdr) != 0 || hdr.raw_size > UINT32_MAX)
        return RECORD_E_BAD;
    e.type = rec->type == PACK_REC_MANIFEST ? PACK_IDX_MANIFEST : PACK_IDX_ENTRY;
    memcpy(e.id, rec->id, PROTO_HASH_LEN);
    e.raw_size = (uint32_t)hdr.raw_size;
    if ((r = index_add(rp, &e)) < 0 || !want_rows)
        return r;
    memcpy(w.hash, rec->id, PROTO_HASH_LEN);
    if (rec->type == PACK_REC_MANIFEST) {
        w.kind = DB_ROW_SEGMENT;
        w.loc.size = e.raw_size;
        w.loc.stored = len;
    } else {
        w.kind = DB_ROW_ENTRY;
        if ((r = entry_row(rp, bytes, len, rec->id, &w)) != 0)
            return r;
    }
    return row_add(rp, &w);
}

/* The same, rec being the record as stored: its plain view (record_plain) is what is read. */
static int scanned_record(struct replay *rp, uint64_t off, const uint8_t *bytes,
                          const struct pack_record *rec, bool want_rows)
{
    uint32_t len = PACK_RECORD_HEADER + rec->length;
    struct pack_record plain;
    uint8_t *buf;
    int r = record_plain(bytes, len, &plain, &buf);

    if (r != 0)
        return r;
    r = scanned_plain(rp, off, bytes, len, &plain, want_rows);
    free(buf);
    return r;
}

/* ---- an open pack, record by record ---- */

/* The part of an open pack held in memory while it is read. */
struct window {
    struct replay *rp;
    uint64_t size; /* of the pack */
    uint8_t *buf;
    size_t len;
    uint64_t off; /* where buf starts in the pack */
};

/*
 * Makes the window hold the pack's bytes [off, off + need), reading ahead:
 * 0 (with *beyond when the pack ends before them), or the read's failure.
 */
static int window_fill(struct window *w, uint64_t off, uint64_t need, bool *beyond)
{
    uint64_t want;
    int r;

    *beyond = false;
    if (off >= w->off && off + need <= w->off + w->len)
        return 0;
    if (off + need > w->size) {
        *beyond = true;
        return 0;
    }
    free(w->buf);
    w->buf = NULL;
    w->len = 0;
    want = w->size - off < REPLAY_WINDOW ? w->size - off : REPLAY_WINDOW;
    if (want < need)
        want = need;
    if ((r = replay_get(w->rp, w->rp->key, off, want, &w->buf, &w->len)) != 0)
        return r;
    w->off = off;
    *beyond = w->len < need; /* the object is shorter than it was listed */
    return 0;
}

enum rec_state {
    REC_INTACT,
    REC_BEYOND_END, /* the pack ends before the record does (or its length is bad) */
    REC_BAD,        /* not a record, or its checksum fails */
};

/* The record at `off`: 0 and what it is (*rec and *bytes when intact), or the read's failure. */
static int window_record(struct window *w, uint64_t off, struct pack_record *rec,
                         const uint8_t **bytes, enum rec_state *state)
{
    enum pack_rec_type type;
    uint8_t id[PROTO_HASH_LEN];
    uint32_t plen;
    bool beyond;
    int r;

    *state = REC_BEYOND_END;
    if ((r = window_fill(w, off, PACK_RECORD_HEADER, &beyond)) != 0 || beyond)
        return r;
    *state = REC_BAD;
    if (pack_record_peek(w->buf + (off - w->off), w->len - (off - w->off), &type, id, &plen) != 0)
        return 0;
    *state = REC_BEYOND_END;
    if ((r = window_fill(w, off, PACK_RECORD_HEADER + (uint64_t)plen, &beyond)) != 0 || beyond)
        return r;
    *bytes = w->buf + (off - w->off);
    *state = pack_record_parse(*bytes, w->len - (off - w->off), rec) == 0 ? REC_INTACT : REC_BAD;
    return 0;
}

/* The rows the database has in the pack being read, loaded at the first damaged record. */
struct known_rows {
    bool loaded;
    struct db_pack_row *rows; /* by offset */
    size_t n;
};

static int row_index_entry(struct replay *rp, const struct db_pack_row *row)
{
    struct pack_index_entry e = {.record_off = row->loc.off, .record_len = row->loc.len};

    memcpy(e.id, row->hash, PROTO_HASH_LEN);
    if (row->kind == DB_ROW_CHUNK) {
        e.type = PACK_IDX_CHUNK;
        e.sub_off = row->loc.sub;
        e.raw_size = row->loc.size;
    } else if (row->kind == DB_ROW_SEGMENT) {
        e.type = PACK_IDX_MANIFEST;
        e.raw_size = row->loc.size;
    } else {
        e.type = PACK_IDX_ENTRY; /* its raw size is in the damaged record: unknown */
    }
    return index_add(rp, &e);
}

/*
 * A record that does not parse at `off`, before `known`: damage (bit rot, a
 * bad sector), not a torn write, because the database only learns of
 * records once their append is synced. *next is where the scan goes on:
 * the record's end as the database's rows for it give it, else the next
 * record the database has a row for, else `known`.
 */
static int damaged_extent(struct replay *rp, struct known_rows *kr, uint64_t off, uint64_t known,
                          uint64_t *next)
{
    uint64_t end = 0;
    int r;

    if (!kr->loaded) {
        if ((r = db_pack_rows(rp->rv.db, rp->seq, 0, &kr->rows, &kr->n)) < 0)
            return r;
        kr->loaded = true;
    }
    for (size_t i = 0; i < kr->n && end == 0; i++) {
        const struct db_pack_row *row = &kr->rows[i];
        if (row->loc.off == off)
            end = off + row->loc.len;
        else if (row->loc.off > off)
            end = row->loc.off;
    }
    *next = end <= off || end > known ? known : end;
    return 0;
}

/*
 * The damaged record at `off` stays where it is, so get and verify report
 * what it held as integrity errors; the pack's index gets the entries the
 * database's rows give for it.
 */
static int keep_damaged(struct replay *rp, const struct known_rows *kr, uint64_t off, uint64_t next)
{
    int r;

    for (size_t i = 0; i < kr->n && kr->rows[i].loc.off <= off; i++) {
        if (kr->rows[i].loc.off == off && (r = row_index_entry(rp, &kr->rows[i])) < 0)
            return r;
    }
    log_error("replay: %s: the record at offset %" PRIu64 " is damaged (%" PRIu64
              " bytes); it was acknowledged, so it is left in place for verify to report",
              rp->key, off, next - off);
    rp->damaged++;
    return 0;
}

/*
 * Reads an open pack record by record from its start, keeping a window of
 * it in memory, for the index of its records and for the rows of those
 * from `known` on. *valid_end is where its intact records end: where a
 * torn tail is cut off.
 *
 * `known` is how much of the pack the database has: the end of the last
 * batch whose transaction committed (the packer records it with the batch's
 * rows), which it commits only after the append is synced. So before
 * `known` nothing can be torn: a record there that does not parse (a bad
 * checksum, or a bad length that runs it past the end) is damage, left in
 * place, and only beyond `known` does the first record that does not parse
 * start a torn tail. With no database to say what was acknowledged (a pack
 * the database never heard of, or a rebuild, which starts from an empty
 * database), `known` is 0 and the first bad record ends the pack as a torn
 * write would: whatever follows it is cut off with it, since nothing tells
 * acknowledged records from a crash's leftovers.
 */
static int scan_open(struct replay *rp, uint64_t size, uint64_t known, uint64_t *valid_end)
{
    struct window w = {.rp = rp, .size = size};
    struct known_rows kr = {.loaded = false};
    uint64_t off = PACK_HEADER_SIZE;
    int r = 0;

    *valid_end = PACK_HEADER_SIZE;
    while (off + PACK_RECORD_HEADER <= size) {
        struct pack_record rec;
        const uint8_t *bytes = NULL;
        enum rec_state state;
        uint64_t next;
        if ((r = window_record(&w, off, &rec, &bytes, &state)) != 0)
            break;
        if (state == REC_INTACT) {
            r = scanned_record(rp, off, bytes, &rec, off >= known);
            if (r == RECORD_E_BAD)
                r = 0; /* an intact record with a bad body: dead weight, not a tail */
            if (r != 0)
                break;
            off += PACK_RECORD_HEADER + rec.length;
            *valid_end = off;
            continue;
        }
        if (off >= known)
            break; /* a torn tail */
        if ((r = damaged_extent(rp, &kr, off, known, &next)) != 0)
            break;
        if (next > size)
            break; /* the pack is shorter than the database knows: its end is lost */
        if ((r = keep_damaged(rp, &kr, off, next)) != 0)
            break;
        off = next;
        *valid_end = off;
    }
    free(w.buf);
    free(kr.rows);
    return r < 0 || r == BACKEND_E_UNAVAILABLE || r == BACKEND_E_NOT_FOUND ? r : 0;
}

/* ---- a sealed pack ---- */

/* A sealed pack: its index says what it holds; entries are read for their events. */
static int read_sealed(struct replay *rp, const struct pack_trailer *t,
                       const struct pack_index_entry *idx, uint64_t known)
{
    uint32_t run_end = 0; /* the chunk entries of one block follow each other */
    uint64_t raw = 0;
    int r = 0;

    for (uint32_t i = 0; r == 0 && i < t->count; i++) {
        const struct pack_index_entry *e = &idx[i];
        struct replay_row w = {
            .loc = {.pack = rp->seq, .off = e->record_off, .len = e->record_len}};
        if (e->record_off < known)
            continue;
        memcpy(w.hash, e->id, PROTO_HASH_LEN);
        if (e->type == PACK_IDX_CHUNK) {
            if (i >= run_end) {
                raw = 0;
                for (run_end = i; run_end < t->count && idx[run_end].type == PACK_IDX_CHUNK &&
                                  idx[run_end].record_off == e->record_off;
                     run_end++)
                    raw += idx[run_end].raw_size;
            }
            w.kind = DB_ROW_CHUNK;
            w.loc.sub = e->sub_off;
            w.loc.size = e->raw_size;
            w.loc.stored = record_share(e->record_len, e->raw_size, raw);
        } else if (e->type == PACK_IDX_MANIFEST) {
            w.kind = DB_ROW_SEGMENT;
            w.loc.size = e->raw_size;
            w.loc.stored = e->record_len;
        } else if (rp->relocating) {
            w.kind = DB_ROW_ENTRY; /* known already: only where it is now matters */
        } else {
            uint8_t *bytes;
            size_t len;
            w.kind = DB_ROW_ENTRY;
            if ((r = replay_get(rp, rp->key, e->record_off, e->record_len, &bytes, &len)) != 0)
                break;
            r = len == e->record_len ? entry_row(rp, bytes, len, e->id, &w) : RECORD_E_BAD;
            free(bytes);
            if (r == RECORD_E_BAD) {
                log_error("replay: journal entry at %s offset %" PRIu64 " is damaged", rp->key,
                          e->record_off);
                r = 0;
                continue;
            }
            if (r != 0)
                break;
        }
        r = row_add(rp, &w);
    }
    return r;
}

/* Reads the trailer and index of a pack, if it has valid ones. */
static int try_sealed(struct replay *rp, uint64_t size, struct pack_trailer *t,
                      struct pack_index_entry **idx)
{
    uint8_t *tail = NULL, *ibytes = NULL;
    size_t len;
    int r;

    *idx = NULL;
    if (size < PACK_HEADER_SIZE + PACK_TRAILER_SIZE)
        return 1;
    r = replay_get(rp, rp->key, size - PACK_TRAILER_SIZE, PACK_TRAILER_SIZE, &tail, &len);
    if (r != 0)
        return r;
    r = len == PACK_TRAILER_SIZE && pack_trailer_parse(tail, size, t) == 0 &&
                t->seq == DB_PACK_SEQ(rp->seq)
            ? 0
            : 1;
    free(tail);
    if (r != 0)
        return r;
    r = replay_get(rp, rp->key, t->index_off, (uint64_t)t->count * PACK_INDEX_ENTRY, &ibytes, &len);
    if (r != 0)
        return r;
    r = len == (uint64_t)t->count * PACK_INDEX_ENTRY ? record_index_open(ibytes, len, t, idx) : 1;
    if (r == RECORD_E_BAD)
        r = 1;
    free(ibytes);
    return r;
}

/* Appends the index of what an open pack holds, which seals it. */
static int seal(struct replay *rp, uint64_t valid_end, enum db_pack_state *state,
                uint64_t *new_size)
{
    size_t ilen = record_index_size(rp->nindex);
    uint8_t *ibytes = malloc(ilen);
    int r;

    if (!ibytes)
        return -ENOMEM;
    if ((r = record_index_encode(ibytes, rp->index, rp->nindex, valid_end, DB_PACK_SEQ(rp->seq))) !=
        0) {
        free(ibytes);
        return r;
    }
    struct iovec iov = {ibytes, ilen};
    r = replay_append(rp, rp->key, valid_end, &iov, 1);
    free(ibytes);
    if (r == 0) {
        *state = DB_PACK_SEALED;
        *new_size = valid_end + ilen;
        rp->sealed++;
    }
    return r;
}

int replay_read_pack(struct replay *rp, uint64_t seq, uint64_t size, uint64_t known, bool own,
                     bool newest, struct packer_resume *resume, enum db_pack_state *state,
                     uint64_t *new_size)
{
    const struct recovery_parts *rv = &rp->rv;
    struct pack_trailer t;
    struct pack_index_entry *idx;
    uint8_t *hdr = NULL;
    size_t len;
    uint64_t hseq, valid_end;
    int r;

    rp->seq = seq;
    if (db_pack_key(rv->db, seq, rp->key, sizeof(rp->key)) < 0)
        return 1; /* cannot be: the listing made the writer known */
    rp->nindex = 0;
    if (own && size < PACK_HEADER_SIZE) {
        /*
         * One of ours cut before its header was written (a kill right after
         * its file was made): it holds nothing, so it goes.
         */
        log_warn("replay: %s holds no pack header (%llu bytes): removed", rp->key,
                 (unsigned long long)size);
        r = replay_del(rp, rp->key);
        return r != 0 ? r : 1;
    }
    r = replay_get(rp, rp->key, 0, PACK_HEADER_SIZE, &hdr, &len);
    if (r != 0)
        return r;
    r = pack_header_decode(hdr, len, &hseq);
    free(hdr);
    if (r != 0 || hseq != DB_PACK_SEQ(seq)) {
        log_error("replay: %s does not start with its pack header; left alone", rp->key);
        return 1;
    }
    rp->packs_read++;
    r = try_sealed(rp, size, &t, &idx);
    if (r < 0 || r == BACKEND_E_UNAVAILABLE)
        return r;
    if (r == 0) {
        r = read_sealed(rp, &t, idx, known);
        free(idx);
        *state = DB_PACK_SEALED;
        *new_size = size;
        return r < 0 ? r : rows_flush(rp);
    }
    if (!own && DB_PACK_WIDX(seq) != 0) {
        /* Another writer's pack is read once it is sealed: it may be appending to it now. */
        log_debug("replay: %s is not sealed yet; read later", rp->key);
        return 1;
    }
    if (!backend_has(rv->be, BACKEND_CAP_APPEND)) {
        log_error("replay: %s has no valid index; left alone", rp->key);
        return 1;
    }
    if (!own) {
        /*
         * Writer 0's pack, left open by a store from before writers had
         * ids, and not ours: read as it is, never changed. Its writer goes
         * on under an id of its own, so it stays as it is.
         */
        if ((r = scan_open(rp, size, known, &valid_end)) != 0 || (r = rows_flush(rp)) != 0)
            return r;
        *new_size = valid_end;
        *state = DB_PACK_OPEN;
        return 0;
    }
    /*
     * Sync what the file holds before the scan commits rows for it: after a
     * kill, appended bytes may be in the page cache and not on disk, and the
     * database must never name what a power loss could still take away.
     */
    if ((r = replay_append(rp, rp->key, size, NULL, 0)) != 0)
        return r;
    if ((r = scan_open(rp, size, known, &valid_end)) != 0 || (r = rows_flush(rp)) != 0)
        return r;
    if (valid_end < size) {
        log_warn("replay: %s: cut off a torn tail of %" PRIu64 " bytes", rp->key, size - valid_end);
        rp->torn_bytes += size - valid_end;
    }
    /* Cut the tail (a torn write past what the database knows). */
    if (valid_end < size && (r = replay_append(rp, rp->key, valid_end, NULL, 0)) != 0)
        return r;
    *new_size = valid_end;
    *state = DB_PACK_OPEN;
    if (valid_end < known) {
        /*
         * The pack is shorter than the database knows it: rows point past
         * its end, and new records must not go where they point. It is
         * sealed as it is; reading those rows fails its checks.
         */
        log_error("replay: %s ends at %" PRIu64
                  " bytes, but the database has records up to %" PRIu64 "; what lay beyond is lost",
                  rp->key, valid_end, known);
        return seal(rp, valid_end, state, new_size);
    }
    if (newest) {
        resume->has_open = true;
        resume->open_seq = seq;
        resume->open_size = valid_end;
        resume->index = rp->index;
        resume->nindex = rp->nindex;
        rp->index = NULL;
        rp->nindex = rp->index_cap = 0;
        return 0;
    }
    /* An older pack left open: seal it with the index of what it holds. */
    return seal(rp, valid_end, state, new_size);
}

int replay_relocate(struct replay *rp, uint64_t seq)
{
    struct pack_trailer t;
    struct pack_index_entry *idx;
    uint64_t size;
    int r;

    /* Not read yet: its first read puts its records where they belong. */
    if (db_pack_size(rp->rv.db, seq, &size) != 0)
        return 0;
    rp->seq = seq;
    if (db_pack_key(rp->rv.db, seq, rp->key, sizeof(rp->key)) < 0)
        return 0;
    if ((r = try_sealed(rp, size, &t, &idx)) != 0) {
        if (r == 1)
            log_warn("replay: %s holds copies of a gc, but has no index; not read again", rp->key);
        return r == 1 || r == BACKEND_E_NOT_FOUND ? 0 : r;
    }
    rp->relocating = true;
    r = read_sealed(rp, &t, idx, 0);
    if (r == 0)
        r = rows_flush(rp);
    rp->relocating = false;
    free(idx);
    return r;
}
