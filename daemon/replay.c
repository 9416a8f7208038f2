/*
 * Recovery from the packs: the database is brought up to what the packs
 * hold. A pack is the log of the database: commits are not synced (the pack
 * appends are), so after a crash the database may lack its last
 * transactions, and with `cairnd --rebuild-index` it starts empty and
 * everything comes back from here.
 *
 *   1. Packs the database does not know, or knows only up to a point, are
 *      read from that point: sealed ones through their index, open ones
 *      record by record, where a torn tail (a crash in the middle of an
 *      append) shows as a bad checksum and is cut off. Their records go into
 *      the database (chunk, segment and journal rows); journal entries are
 *      marked unapplied.
 *   2. Packs left open are made durable as they are and sealed, except the
 *      newest, which the pack writer goes on appending to.
 *   3. Unapplied journal entries are applied in time order: an add whose
 *      chunks are not all there (or, for a rebuild, not all intact) is
 *      refused and logged; its record becomes dead weight for gc.
 *   4. Deletions of repacked packs that a crash interrupted are finished.
 *
 * This runs before the daemon serves anyone, so it drives the loop itself
 * and waits for each request in turn.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compress.h"
#include "daemon/log.h"
#include "daemon/objects.h"
#include "daemon/packer.h"
#include "daemon/record.h"
#include "daemon/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

/* Bytes of an open pack read at once; more than the largest record. */
#define REPLAY_WINDOW (8u * 1024 * 1024)
/* Rows written per transaction, and journal entries applied per step. */
#define REPLAY_ROWS 1024
#define REPLAY_EVENTS 256

/* ---- waiting for the loop ---- */

static void req_done(struct backend_req *req)
{
    *(bool *)req->userdata = true;
}

static void run_until(struct store *st, const bool *done)
{
    while (!*done)
        uv_run(st->loop, UV_RUN_ONCE);
}

static int sync_get(struct store *st, const char *key, uint64_t off, uint64_t len, uint8_t **out,
                    size_t *out_len)
{
    struct backend_get get = {.offset = off, .length = len, .max_len = (size_t)len};
    bool done = false;
    int r;

    snprintf(get.req.key, sizeof(get.req.key), "%s", key);
    get.req.cb = req_done;
    get.req.userdata = &done;
    if ((r = backend_get(st->be, &get)) < 0)
        return r;
    run_until(st, &done);
    if (get.req.status != 0) {
        backend_get_reset(&get);
        return get.req.status;
    }
    *out = get.out;
    *out_len = get.out_len;
    return 0;
}

static int sync_append(struct store *st, const char *key, uint64_t off, const struct iovec *iov,
                       unsigned iovcnt)
{
    struct backend_append app = {.offset = off, .iov = iov, .iovcnt = iovcnt};
    bool done = false;
    int r;

    snprintf(app.req.key, sizeof(app.req.key), "%s", key);
    app.req.cb = req_done;
    app.req.userdata = &done;
    if ((r = backend_append(st->be, &app)) < 0)
        return r;
    run_until(st, &done);
    return app.req.status;
}

static int sync_del(struct store *st, const char *key)
{
    struct backend_del del = {0};
    bool done = false;
    int r;

    snprintf(del.req.key, sizeof(del.req.key), "%s", key);
    del.req.cb = req_done;
    del.req.userdata = &done;
    if ((r = backend_del(st->be, &del)) < 0)
        return r;
    run_until(st, &done);
    return del.req.status == BACKEND_E_NOT_FOUND ? 0 : del.req.status;
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

static int sync_write_apply(struct db_txn *txn, struct db_write *w)
{
    struct sync_write *sw = container_of(w, struct sync_write, w);
    return sw->apply(txn, sw->ctx);
}

static int sync_commit(struct store *st, int (*apply)(struct db_txn *, void *), void *ctx)
{
    struct sync_write sw = {
        .w = {.apply = sync_write_apply, .done = sync_write_done}, .apply = apply, .ctx = ctx};

    db_write(st->db, &sw.w);
    run_until(st, &sw.done);
    return sw.w.status;
}

struct sync_job {
    uv_work_t work;
    void (*fn)(void *ctx);
    void *ctx;
    bool done;
};

static void sync_job_work(uv_work_t *w)
{
    struct sync_job *j = container_of(w, struct sync_job, work);
    j->fn(j->ctx);
}

static void sync_job_done(uv_work_t *w, int status)
{
    container_of(w, struct sync_job, work)->done = true;
}

/* Runs fn on a worker (where store reads may block) while the loop keeps turning. */
static int sync_job(struct store *st, void (*fn)(void *), void *ctx)
{
    struct sync_job j = {.fn = fn, .ctx = ctx};
    int r = uv_queue_work(st->loop, &j.work, sync_job_work, sync_job_done);

    if (r < 0)
        return r;
    run_until(st, &j.done);
    return 0;
}

/* ---- rows found in packs ---- */

struct row {
    enum db_row_kind kind;
    uint8_t hash[PROTO_HASH_LEN];
    struct db_loc loc;
    uint8_t doc[PROTO_HASH_LEN]; /* entries */
    uint64_t time_ns;
    bool is_delete;
};

struct replay {
    struct store *st;
    struct row rows[REPLAY_ROWS];
    size_t nrows;
    /* The pack being read. */
    uint64_t seq;
    char key[BACKEND_MAX_KEY];
    struct pack_index_entry *index; /* all its records (to seal it, or to resume it) */
    size_t nindex, index_cap;
    /* Totals for the summary. */
    uint64_t packs_read, records, torn_bytes, sealed, added, deleted, refused;
    uint64_t max_time;
};

static int rows_apply(struct db_txn *txn, void *ctx)
{
    struct replay *rp = ctx;
    int r = 0;

    for (size_t i = 0; r == 0 && i < rp->nrows; i++) {
        struct row *w = &rp->rows[i];
        if (w->kind == DB_ROW_CHUNK)
            r = db_txn_chunk_put(txn, w->hash, &w->loc);
        else if (w->kind == DB_ROW_SEGMENT)
            r = db_txn_segment_put(txn, w->hash, &w->loc);
        else
            r = db_txn_journal_put(txn, w->hash, &w->loc, w->doc, w->time_ns, w->is_delete,
                                   false);
    }
    return r;
}

static int rows_flush(struct replay *rp)
{
    int r = 0;

    if (rp->nrows)
        r = sync_commit(rp->st, rows_apply, rp);
    rp->nrows = 0;
    return r;
}

static int row_add(struct replay *rp, const struct row *w)
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
                     const uint8_t id[PROTO_HASH_LEN], struct row *w)
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
    w->is_delete = e.is_delete;
    if (e.time_ns > rp->max_time)
        rp->max_time = e.time_ns;
    objects_entry_clear(&e);
    return 0;
}

/*
 * One intact record of an open pack at `off`: its index entries, and (when
 * the database does not have it yet) its rows.
 */
static int scanned_record(struct replay *rp, uint64_t off, const uint8_t *bytes,
                          const struct pack_record *rec, bool want_rows)
{
    uint32_t len = PACK_RECORD_HEADER + rec->length;
    struct pack_index_entry e = {.record_off = off, .record_len = len};
    struct row w = {.loc = {.pack = rp->seq, .off = off, .len = len}};
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
                w.loc.stored = (uint32_t)((uint64_t)len * chunks[i].size / (raw ? raw : 1));
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

/*
 * Reads an open pack record by record from its start, keeping a window of
 * it in memory. *valid_end is where the intact records end.
 */
static int scan_open(struct replay *rp, uint64_t size, uint64_t applied, uint64_t *valid_end)
{
    uint8_t *win = NULL;
    size_t wlen = 0;
    uint64_t woff = 0, off = PACK_HEADER_SIZE;
    int r = 0;

    *valid_end = PACK_HEADER_SIZE;
    while (off + PACK_RECORD_HEADER <= size) {
        enum pack_rec_type type;
        uint8_t id[PROTO_HASH_LEN];
        uint32_t plen;
        struct pack_record rec;
        /* Make sure the window holds the header, then the whole record. */
        for (int pass = 0; pass < 2; pass++) {
            uint64_t need = pass == 0 ? PACK_RECORD_HEADER : PACK_RECORD_HEADER + (uint64_t)plen;
            if (off >= woff && off + need <= woff + wlen)
                goto have;
            if (off + need > size)
                goto out; /* a torn tail */
            free(win);
            win = NULL;
            uint64_t want = size - off < REPLAY_WINDOW ? size - off : REPLAY_WINDOW;
            if (want < need)
                want = need;
            if ((r = sync_get(rp->st, rp->key, off, want, &win, &wlen)) != 0)
                goto out;
            woff = off;
        have:
            if (pass == 0 && pack_record_peek(win + (off - woff), wlen - (off - woff), &type, id,
                                              &plen) != 0)
                goto out; /* not a record: the tail is garbage */
        }
        if (pack_record_parse(win + (off - woff), wlen - (off - woff), &rec) != 0)
            goto out; /* torn or damaged: the tail starts here */
        r = scanned_record(rp, off, win + (off - woff), &rec, off >= applied);
        if (r == RECORD_E_BAD)
            r = 0; /* an intact record with a bad body: dead weight, not a tail */
        if (r != 0)
            goto out;
        off += PACK_RECORD_HEADER + rec.length;
        *valid_end = off;
    }
out:
    free(win);
    return r < 0 || r == BACKEND_E_UNAVAILABLE || r == BACKEND_E_NOT_FOUND ? r : 0;
}

/* A sealed pack: its index says what it holds; entries are read for their events. */
static int read_sealed(struct replay *rp, const struct pack_trailer *t,
                       const struct pack_index_entry *idx, uint64_t applied)
{
    int r = 0;

    for (uint32_t i = 0; r == 0 && i < t->count; i++) {
        const struct pack_index_entry *e = &idx[i];
        struct row w = {.loc = {.pack = rp->seq, .off = e->record_off, .len = e->record_len}};
        if (e->record_off < applied)
            continue;
        memcpy(w.hash, e->id, PROTO_HASH_LEN);
        if (e->type == PACK_IDX_CHUNK) {
            uint64_t raw = 0;
            for (uint32_t k = 0; k < t->count; k++) {
                if (idx[k].record_off == e->record_off && idx[k].type == PACK_IDX_CHUNK)
                    raw += idx[k].raw_size;
            }
            w.kind = DB_ROW_CHUNK;
            w.loc.sub = e->sub_off;
            w.loc.size = e->raw_size;
            w.loc.stored = (uint32_t)((uint64_t)e->record_len * e->raw_size / (raw ? raw : 1));
        } else if (e->type == PACK_IDX_MANIFEST) {
            w.kind = DB_ROW_SEGMENT;
            w.loc.size = e->raw_size;
            w.loc.stored = e->record_len;
        } else {
            uint8_t *bytes;
            size_t len;
            w.kind = DB_ROW_ENTRY;
            if ((r = sync_get(rp->st, rp->key, e->record_off, e->record_len, &bytes, &len)) != 0)
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
    r = sync_get(rp->st, rp->key, size - PACK_TRAILER_SIZE, PACK_TRAILER_SIZE, &tail, &len);
    if (r != 0)
        return r;
    r = len == PACK_TRAILER_SIZE && pack_trailer_parse(tail, size, t) == 0 && t->seq == rp->seq
            ? 0
            : 1;
    free(tail);
    if (r != 0)
        return r;
    r = sync_get(rp->st, rp->key, t->index_off, (uint64_t)t->count * PACK_INDEX_ENTRY, &ibytes,
                 &len);
    if (r != 0)
        return r;
    r = len == (uint64_t)t->count * PACK_INDEX_ENTRY && pack_index_parse(ibytes, len, t, idx) == 0
            ? 0
            : 1;
    free(ibytes);
    return r;
}

/* What to do with a pack whose records the database may lack. */
static int read_pack(struct replay *rp, uint64_t seq, uint64_t size, uint64_t applied,
                     bool newest, struct packer_resume *resume, enum db_pack_state *state,
                     uint64_t *new_size)
{
    struct store *st = rp->st;
    struct pack_trailer t;
    struct pack_index_entry *idx;
    uint8_t *hdr = NULL;
    size_t len;
    uint64_t hseq, valid_end;
    int r;

    rp->seq = seq;
    packer_pack_key(rp->key, sizeof(rp->key), seq);
    rp->nindex = 0;
    r = sync_get(st, rp->key, 0, PACK_HEADER_SIZE, &hdr, &len);
    if (r != 0)
        return r;
    r = pack_header_decode(hdr, len, &hseq);
    free(hdr);
    if (r != 0 || hseq != seq) {
        log_error("replay: %s does not start with its pack header; left alone", rp->key);
        return 1;
    }
    rp->packs_read++;
    r = try_sealed(rp, size, &t, &idx);
    if (r < 0 || r == BACKEND_E_UNAVAILABLE)
        return r;
    if (r == 0) {
        r = read_sealed(rp, &t, idx, applied);
        free(idx);
        *state = DB_PACK_SEALED;
        *new_size = size;
        return r < 0 ? r : rows_flush(rp);
    }
    if (!backend_has(st->be, BACKEND_CAP_APPEND)) {
        log_error("replay: %s has no valid index; left alone", rp->key);
        return 1;
    }
    if ((r = scan_open(rp, size, applied, &valid_end)) != 0 || (r = rows_flush(rp)) != 0)
        return r;
    if (valid_end < size) {
        log_warn("replay: %s: cut off a torn tail of %" PRIu64 " bytes", rp->key,
                 size - valid_end);
        rp->torn_bytes += size - valid_end;
    }
    /*
     * Cut the tail and sync what stays before the database names any of it:
     * after a kill, appended bytes may be in the page cache and not on disk.
     */
    if ((r = sync_append(st, rp->key, valid_end, NULL, 0)) != 0)
        return r;
    *new_size = valid_end;
    *state = DB_PACK_OPEN;
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
    size_t ilen = pack_index_size(rp->nindex);
    uint8_t *ibytes = malloc(ilen);
    if (!ibytes)
        return -ENOMEM;
    pack_index_encode(ibytes, rp->index, rp->nindex, valid_end, seq);
    struct iovec iov = {ibytes, ilen};
    r = sync_append(st, rp->key, valid_end, &iov, 1);
    free(ibytes);
    if (r == 0) {
        *state = DB_PACK_SEALED;
        *new_size = valid_end + ilen;
        rp->sealed++;
    }
    return r;
}

/* ---- the packs on the backend against the database ---- */

struct listed {
    uint64_t seq, size;
};

static int list_packs(struct store *st, struct listed **out, size_t *n)
{
    struct backend_list list = {0};
    struct listed *v = NULL;
    size_t count = 0, cap = 0;
    int r = 0;

    *out = NULL;
    *n = 0;
    do {
        bool done = false;
        snprintf(list.req.key, sizeof(list.req.key), "packs/");
        list.req.cb = req_done;
        list.req.userdata = &done;
        if ((r = backend_list(st->be, &list)) < 0)
            break;
        run_until(st, &done);
        if ((r = list.req.status) != 0)
            break;
        for (size_t i = 0; i < list.nentries; i++) {
            const char *name = list.entries[i].key + strlen("packs/");
            char *end;
            uint64_t seq = strtoull(name, &end, 16);
            if (strlen(name) != 16 || *end || seq == 0) {
                log_warn("replay: ignoring %s, which is not a pack", list.entries[i].key);
                continue;
            }
            if (count == cap) {
                cap = cap ? cap * 2 : 64;
                struct listed *grown = realloc(v, cap * sizeof(*grown));
                if (!grown) {
                    r = -ENOMEM;
                    break;
                }
                v = grown;
            }
            v[count++] = (struct listed){seq, list.entries[i].size};
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (r == 0 && list.cursor[0]);
    backend_list_reset(&list);
    if (r != 0) {
        free(v);
        return r < 0 ? r : -EIO;
    }
    *out = v;
    *n = count;
    return 0;
}

struct pack_update {
    uint64_t seq, size;
    enum db_pack_state state;
    bool drop;
};

static int pack_update_apply(struct db_txn *txn, void *ctx)
{
    struct pack_update *u = ctx;
    return u->drop ? db_txn_pack_drop(txn, u->seq) : db_txn_pack_set(txn, u->seq, u->size, u->state);
}

static int replay_packs(struct replay *rp, struct packer_resume *resume)
{
    struct store *st = rp->st;
    struct listed *listed;
    struct db_pack *known;
    size_t nlisted, nknown, k = 0;
    uint64_t newest_open = 0;
    int r;

    if ((r = list_packs(st, &listed, &nlisted)) != 0)
        return r;
    if ((r = db_packs(st->db, &known, &nknown)) < 0) {
        free(listed);
        return r;
    }
    /* Listings come in name order, which is sequence order (fixed-width hex). */
    for (size_t i = 0; i < nlisted; i++) {
        if (listed[i].seq >= resume->next_seq)
            resume->next_seq = listed[i].seq + 1;
        newest_open = listed[i].seq; /* only the newest pack may stay open */
    }
    for (size_t i = 0; r == 0 && i < nlisted; i++) {
        struct pack_update u = {.seq = listed[i].seq};
        uint64_t applied = 0;
        while (k < nknown && known[k].seq < listed[i].seq) {
            if (known[k].state != DB_PACK_DELETING)
                log_error("replay: pack %016" PRIx64 " is missing from the backend; what it held"
                          " is lost",
                          known[k].seq);
            k++;
        }
        if (k < nknown && known[k].seq == listed[i].seq) {
            struct db_pack *p = &known[k++];
            if (p->state == DB_PACK_DELETING) {
                /* A repack's deletion that a crash interrupted: finish it. */
                char key[BACKEND_MAX_KEY];
                packer_pack_key(key, sizeof(key), p->seq);
                if ((r = sync_del(st, key)) != 0)
                    break;
                u.drop = true;
                r = sync_commit(st, pack_update_apply, &u);
                continue;
            }
            if (p->state == DB_PACK_SEALED && p->size == listed[i].size)
                continue;
            applied = p->size;
        }
        r = read_pack(rp, listed[i].seq, listed[i].size, applied, listed[i].seq == newest_open,
                      resume, &u.state, &u.size);
        if (r == 1) {
            r = 0;
            continue;
        }
        if (r == 0)
            r = sync_commit(st, pack_update_apply, &u);
    }
    for (; r == 0 && k < nknown; k++) {
        if (known[k].state == DB_PACK_DELETING) {
            struct pack_update u = {.seq = known[k].seq, .drop = true};
            r = sync_commit(st, pack_update_apply, &u);
        } else {
            log_error("replay: pack %016" PRIx64 " is missing from the backend; what it held is"
                      " lost",
                      known[k].seq);
        }
    }
    free(listed);
    free(known);
    return r;
}

/* ---- applying journal entries in time order ---- */

struct event {
    struct db_pending_entry pend;
    struct entry e;
    int verdict; /* 0 apply, else refused (a STORE_E_* or RECORD_E_BAD) */
};

struct event_page {
    struct replay *rp;
    struct event *ev;
    size_t n;
    int status;
};

struct check_ctx {
    struct store *st;
};

static int check_chunk(void *ctx, const struct manifest_entry *chunk)
{
    struct check_ctx *c = ctx;
    struct db_loc loc;
    const struct cache_buf *b;
    int r;

    if (!c->st->cfg.rebuild) {
        r = db_chunk_find(c->st->db, chunk->hash, &loc);
        return r == DB_E_NOT_FOUND ? STORE_E_INTEGRITY : r;
    }
    /* A rebuild reads every chunk back and checks it. */
    r = store_load_chunk(c->st, chunk->hash, chunk->bytes, &b);
    if (r == 0)
        store_chunk_release(c->st, b);
    return r;
}

static void page_work(void *arg)
{
    struct event_page *pg = arg;
    struct store *st = pg->rp->st;

    for (size_t i = 0; pg->status == 0 && i < pg->n; i++) {
        struct event *ev = &pg->ev[i];
        uint8_t *bytes = malloc(ev->pend.loc.len ? ev->pend.loc.len : 1), *raw;
        size_t got = 0, raw_len;
        int r = bytes ? store_read_pack(st, ev->pend.loc.pack, ev->pend.loc.off, bytes,
                                        ev->pend.loc.len, &got)
                      : -ENOMEM;
        if (r == 0 && got != ev->pend.loc.len)
            r = RECORD_E_BAD;
        if (r == 0)
            r = record_seal_open(bytes, got, PACK_REC_ENTRY, ev->pend.id, OBJECTS_MAX_ENTRY, &raw,
                                 &raw_len);
        free(bytes);
        if (r == 0) {
            r = objects_entry_decode(raw, raw_len, &ev->e);
            free(raw);
            if (r == -EBADMSG)
                r = RECORD_E_BAD;
        }
        if (r == 0 && !ev->e.is_delete) {
            struct check_ctx c = {st};
            r = store_walk_manifest(st, ev->e.depth, ev->e.root, ev->e.root_len, 0,
                                    check_chunk, &c);
        }
        if (r < 0 && r != -ENOMEM && r != -EIO)
            r = STORE_E_INTEGRITY; /* unreadable: refused, not fatal */
        if (r == -ENOMEM || r == -EIO || r == STORE_E_UNAVAILABLE)
            pg->status = r < 0 ? r : -EIO;
        else
            ev->verdict = r;
    }
}

static int page_apply(struct db_txn *txn, void *ctx)
{
    struct event_page *pg = ctx;
    char hex[PROTO_HASH_HEX + 1];
    int r = 0;

    for (size_t i = 0; r == 0 && i < pg->n; i++) {
        struct event *ev = &pg->ev[i];
        struct entry *e = &ev->e;
        if (ev->verdict != 0) {
            r = db_txn_journal_applied(txn, ev->pend.id, true);
            continue;
        }
        proto_hex_encode(e->doc, PROTO_HASH_LEN, hex);
        if (e->is_delete) {
            r = db_txn_delete(txn, hex);
            if (r == DB_E_NOT_FOUND)
                r = 0;
        } else {
            struct db_add add = {
                .size = e->size,
                .nchunks = e->nchunks,
                .stored = e->stored,
                .mime = e->mime,
                .name = e->name,
                .tags = (const char *const *)e->tags,
                .ntags = e->ntags,
                .meta_keys = (const char *const *)e->meta_keys,
                .meta_values = (const char *const *)e->meta_values,
                .nmeta = e->nmeta,
                .depth = e->depth,
                .root = e->root,
                .root_len = e->root_len,
                .text = e->text,
                .created_at = (int64_t)(e->time_ns / 1000000000u),
            };
            memcpy(add.hash, e->doc, PROTO_HASH_LEN);
            r = db_txn_add(txn, &add);
        }
        if (r == 0)
            r = db_txn_journal_applied(txn, ev->pend.id, false);
    }
    return r;
}

static int replay_events(struct replay *rp)
{
    struct store *st = rp->st;
    char hex[PROTO_HASH_HEX + 1];
    int r = 0;

    for (;;) {
        struct db_pending_entry *pend;
        size_t n;
        if ((r = db_pending_entries(st->db, REPLAY_EVENTS, &pend, &n)) < 0)
            return r;
        if (n == 0) {
            free(pend);
            return 0;
        }
        struct event_page pg = {rp, calloc(n, sizeof(struct event)), n, 0};
        if (!pg.ev) {
            free(pend);
            return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++)
            pg.ev[i].pend = pend[i];
        free(pend);
        r = sync_job(st, page_work, &pg);
        if (r == 0)
            r = pg.status;
        if (r == 0)
            r = sync_commit(st, page_apply, &pg);
        for (size_t i = 0; i < n; i++) {
            struct event *ev = &pg.ev[i];
            if (r == 0 && ev->verdict != 0) {
                proto_hex_encode(ev->e.doc, PROTO_HASH_LEN, hex);
                log_warn("replay: document %s (%s) not restored: %s", ev->e.mime ? hex : "?",
                         ev->e.name ? ev->e.name : "no name",
                         ev->verdict == RECORD_E_BAD ? "its journal entry is damaged"
                                                     : "a chunk or segment is missing or damaged");
                rp->refused++;
            } else if (r == 0) {
                if (ev->e.is_delete)
                    rp->deleted++;
                else
                    rp->added++;
            }
            objects_entry_clear(&ev->e);
        }
        free(pg.ev);
        if (r != 0)
            return r;
    }
}

int store_replay(struct store *st, struct packer_resume *resume, char *summary,
                 size_t summary_len)
{
    struct replay *rp = calloc(1, sizeof(*rp));
    uint64_t newest;
    int r;

    summary[0] = '\0';
    if (!rp)
        return -ENOMEM;
    rp->st = st;
    resume->next_seq = 1;
    r = replay_packs(rp, resume);
    if (r == 0)
        r = replay_events(rp);
    if (r == 0 && (r = db_journal_newest(st->db, &newest)) == 0 && newest > rp->max_time)
        rp->max_time = newest;
    st->last_entry_ns = rp->max_time;
    if (r == 0 && (rp->records || rp->torn_bytes || rp->refused))
        snprintf(summary, summary_len,
                 "%" PRIu64 " records recovered from %" PRIu64 " packs (%" PRIu64
                 " torn bytes cut, %" PRIu64 " packs sealed); %" PRIu64 " adds and %" PRIu64
                 " deletes applied, %" PRIu64 " adds refused",
                 rp->records, rp->packs_read, rp->torn_bytes, rp->sealed, rp->added, rp->deleted,
                 rp->refused);
    if (r != 0)
        log_error("replay: %s", r < 0 ? strerror(-r) : "the backend is unavailable");
    free(rp->index);
    free(rp);
    return r < 0 ? r : (r ? -EIO : 0);
}
