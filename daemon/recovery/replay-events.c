/*
 * Recovery, step 3: the journal entries replay found in the packs and the
 * database lacked are applied in the journal's order (time, then unnames,
 * deletes and adds, then id), a page at a time. A worker reads each entry
 * back and checks that what an add names is there (for a rebuild: reads
 * every chunk back and checks it); the loop then applies the page in one
 * transaction. An add that fails its check is refused and logged, and its
 * record becomes dead weight for gc.
 *
 * Entries of several writers, and of a pack whose write was reported failed
 * but landed, do not arrive in the journal's order. An entry that comes
 * after the database applied a later one of the same document is late: the
 * document is then worked out again from all its entries in order (they are
 * read back from their packs), so every daemon, every start and every
 * rebuild end with the same documents, whatever order the entries came in.
 * A name's versions are ordered by their entries' times and ids, so names
 * need nothing more.
 *
 * A void entry cancels another (objects.h): an entry with a void is never
 * applied, its row goes; one applied before its void arrived (another
 * writer's, read by a refresh between the two) is undone by working its
 * document out again from its other entries.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/format/manifest.h"
#include "daemon/format/objects.h"
#include "daemon/format/record.h"
#include "daemon/recovery/replay-int.h"
#include "daemon/store/store.h"
#include "proto/util.h"

/* Journal entries applied per step. */
#define REPLAY_EVENTS 256
/*
 * Workers checking one page at once, at most: with a remote backend each
 * check waits for round trips, so several in flight make a rebuild from a
 * bucket take seconds instead of minutes. Bounded by what the backend can
 * run at once (1 for a local disk, where it changes nothing).
 */
#define REPLAY_CHECKERS 8

/* An applied entry of a document whose late entry makes it be worked out again. */
struct past_entry {
    uint8_t id[PROTO_HASH_LEN];
    struct entry e;
};

struct event {
    struct db_pending_entry pend;
    struct entry e;
    int verdict;  /* 0 apply, else refused (a STORE_E_* or RECORD_E_BAD) */
    bool skipped; /* a delete that applies only when unnamed, and did not */
    bool voided;  /* a void entry cancels it: not applied */
    /*
     * Late: the document's applied entries, in order (NULL when it is not
     * late). For a void entry whose cancelled entry was applied (undo): the
     * other applied entries of that entry's document, undo_doc.
     */
    struct past_entry *past;
    size_t npast;
    bool undo;
    uint8_t undo_doc[PROTO_HASH_LEN];
};

struct event_page {
    struct replay *rp;
    struct event *ev;
    size_t n;
    int status;
};

/* The events [from, to) of a page, checked by one worker. */
struct event_slice {
    struct event_page *pg;
    size_t from, to;
    int status;
};

static int check_chunk(void *ctx, const struct manifest_entry *chunk)
{
    const struct replay *rp = ctx;
    struct db_loc loc;
    int r;

    if (!rp->rebuild) {
        r = db_chunk_find(rp->rv.db, chunk->hash, &loc);
        return r == DB_E_NOT_FOUND ? STORE_E_INTEGRITY : r;
    }
    /* A rebuild reads every chunk back and checks it. */
    return store_check_chunk(rp->rv.st, chunk->hash, chunk->bytes);
}

/* Reads a journal entry back from its pack: 0, RECORD_E_BAD, BACKEND_E_* or negative errno. */
static int read_entry(const struct recovery_parts *rv, const struct db_pending_entry *pend,
                      struct entry *e)
{
    uint8_t *bytes = malloc(pend->loc.len ? pend->loc.len : 1), *raw;
    size_t got = 0, raw_len;
    int r = bytes ? store_read_pack(rv->st, pend->loc.pack, pend->loc.off, bytes, pend->loc.len,
                                    &got, false)
                  : -ENOMEM;

    if (r == 0 && got != pend->loc.len)
        r = RECORD_E_BAD;
    if (r == 0)
        r = record_seal_open(bytes, got, PACK_REC_ENTRY, pend->id, OBJECTS_MAX_ENTRY, &raw,
                             &raw_len);
    free(bytes);
    if (r == 0) {
        r = objects_entry_decode(raw, raw_len, e);
        free(raw);
        if (r == -EBADMSG)
            r = RECORD_E_BAD;
    }
    return r;
}

static void past_free(struct event *ev)
{
    for (size_t i = 0; i < ev->npast; i++)
        objects_entry_clear(&ev->past[i].e);
    free(ev->past);
    ev->past = NULL;
    ev->npast = 0;
}

/*
 * Reads back the applied entries of document `doc` into ev->past, in order,
 * all but entry `skip` (NULL: none). 0, or a failure: an entry of the
 * document that cannot be read makes the event wait (it stays pending)
 * rather than work the document out without it.
 */
static int load_entries(const struct recovery_parts *rv, struct event *ev,
                        const uint8_t doc[PROTO_HASH_LEN], const uint8_t *skip)
{
    struct db_pending_entry *rows;
    size_t n;
    int r;

    if ((r = db_journal_of_doc(rv->db, doc, &rows, &n)) < 0)
        return r;
    if (n && !(ev->past = calloc(n, sizeof(*ev->past))))
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (skip && memcmp(rows[i].id, skip, PROTO_HASH_LEN) == 0)
            continue;
        memcpy(ev->past[ev->npast].id, rows[i].id, PROTO_HASH_LEN);
        if ((r = read_entry(rv, &rows[i], &ev->past[ev->npast].e)) == 0)
            ev->npast++;
    }
    free(rows);
    if (r != 0) {
        past_free(ev);
        return r > 0 ? -EIO : r;
    }
    return 0;
}

/*
 * When the document has an applied entry later than this one, reads all its
 * applied entries back (the event's own is not among them).
 */
static int load_past(const struct recovery_parts *rv, struct event *ev)
{
    bool later;
    int r = db_journal_later(rv->db, ev->e.doc, ev->e.time_ns, (int)ev->e.op, ev->pend.id, &later);

    if (r < 0 || !later)
        return r;
    if ((r = load_entries(rv, ev, ev->e.doc, NULL)) < 0)
        return r;
    /* A document with no applied entry left is not late: nothing to redo. */
    if (ev->npast == 0)
        past_free(ev);
    return 0;
}

/*
 * A void entry: when the entry it cancels was applied, the other applied
 * entries of that entry's document, to work it out again without it.
 */
static int load_undo(const struct recovery_parts *rv, struct event *ev)
{
    struct db_pending_entry row;
    struct entry cancelled;
    bool applied;
    int r = db_journal_row(rv->db, ev->e.doc, &row, &applied);

    if (r == DB_E_NOT_FOUND || (r == 0 && !applied))
        return 0; /* not applied: it never will be */
    if (r < 0)
        return r;
    if ((r = read_entry(rv, &row, &cancelled)) != 0)
        return r > 0 ? -EIO : r;
    memcpy(ev->undo_doc, cancelled.doc, PROTO_HASH_LEN);
    objects_entry_clear(&cancelled);
    ev->undo = true;
    return load_entries(rv, ev, ev->undo_doc, ev->e.doc);
}

static void slice_work(void *arg)
{
    struct event_slice *sl = arg;
    struct event_page *pg = sl->pg;
    const struct recovery_parts *rv = &pg->rp->rv;

    for (size_t i = sl->from; sl->status == 0 && i < sl->to; i++) {
        struct event *ev = &pg->ev[i];
        int r = read_entry(rv, &ev->pend, &ev->e);
        bool cancels = r == 0 && ev->e.op == ENTRY_VOID;
        if (r == 0 && ev->e.op == ENTRY_ADD) {
            r = store_walk_manifest(rv->st, ev->e.depth, ev->e.root, ev->e.root_len, 0, check_chunk,
                                    pg->rp);
        }
        if (r < 0 && r != -ENOMEM && r != -EIO)
            r = STORE_E_INTEGRITY; /* unreadable: refused, not fatal */
        if (r == -ENOMEM || r == -EIO || r == STORE_E_UNAVAILABLE)
            sl->status = r < 0 ? r : -EIO;
        else if ((ev->verdict = r) == 0 &&
                 (r = cancels ? load_undo(rv, ev) : load_past(rv, ev)) < 0)
            sl->status = r;
    }
}

/* Checks every event of the page, in up to REPLAY_CHECKERS slices at once. */
static int page_check(struct event_page *pg)
{
    struct event_slice slices[REPLAY_CHECKERS];
    void *ctxs[REPLAY_CHECKERS];
    size_t k = pg->rp->rv.be->parallel, per;
    int r;

    if (k > REPLAY_CHECKERS)
        k = REPLAY_CHECKERS;
    if (k > pg->n)
        k = pg->n;
    if (k == 0)
        k = 1;
    per = (pg->n + k - 1) / k;
    for (size_t i = 0; i < k; i++) {
        size_t from = i * per, to = from + per < pg->n ? from + per : pg->n;
        slices[i] = (struct event_slice){pg, from < pg->n ? from : pg->n, to, 0};
        ctxs[i] = &slices[i];
    }
    if ((r = replay_jobs(pg->rp, slice_work, ctxs, k)) != 0)
        return r;
    for (size_t i = 0; i < k; i++)
        if (slices[i].status != 0)
            return slices[i].status;
    return 0;
}

/* A document whose index entry must be made again (the writer thread, while replay waits). */
static void changed(struct replay *rp, int64_t rowid)
{
    if (rowid <= 0)
        return;
    if (rp->nchanged == rp->changed_cap) {
        size_t cap = rp->changed_cap ? rp->changed_cap * 2 : 64;
        int64_t *grown = realloc(rp->changed, cap * sizeof(*grown));
        if (!grown)
            return; /* the index finds it when it next looks over the database */
        rp->changed = grown;
        rp->changed_cap = cap;
    }
    rp->changed[rp->nchanged++] = rowid;
}

/* Applies one entry; *skipped when it is a delete that applies only when unnamed, and did not. */
static int apply_entry(struct replay *rp, struct db_txn *txn, const struct entry *e,
                       const uint8_t id[PROTO_HASH_LEN], bool *skipped)
{
    char hex[PROTO_HASH_HEX + 1];
    int r;

    *skipped = false;
    if (e->op == ENTRY_VOID)
        return 0; /* page_apply's, never a document's */
    proto_hex_encode(e->doc, PROTO_HASH_LEN, hex);
    if (e->op == ENTRY_UNNAME) {
        int64_t rowid = 0;
        r = db_txn_unname(txn, e->name, hex, &rowid);
        changed(rp, rowid);
        return r;
    }
    if (e->op == ENTRY_DELETE && e->if_unnamed) {
        bool deleted;
        r = db_txn_delete_if_unnamed(txn, hex, &deleted);
        *skipped = r == 0 && !deleted;
        rp->removed |= r == 0 && deleted;
        return r;
    }
    if (e->op == ENTRY_DELETE) {
        r = db_txn_delete(txn, hex);
        rp->removed |= r == 0;
        return r == DB_E_NOT_FOUND ? 0 : r;
    }
    if (e->op == ENTRY_EDIT) {
        struct db_edit ed = {
            .tags = (const char *const *)e->tags,
            .ntags = e->ntags,
            .untags = (const char *const *)e->untags,
            .nuntags = e->nuntags,
            .meta_keys = (const char *const *)e->meta_keys,
            .meta_values = (const char *const *)e->meta_values,
            .nmeta = e->nmeta,
            .unmeta = (const char *const *)e->unmeta,
            .nunmeta = e->nunmeta,
        };
        r = db_txn_edit(txn, hex, &ed);
        if (r == 0 && ed.changed)
            changed(rp, ed.rowid);
        return r == DB_E_NOT_FOUND ? 0 : r;
    }
    struct db_add add = {
        .size = e->size,
        .nchunks = e->nchunks,
        .stored = e->stored,
        .mime = e->mime,
        .name = e->name,
        .fattr = {.mode = e->fmode, .mtime = e->fmtime},
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
        .event_ns = e->time_ns,
    };
    memcpy(add.hash, e->doc, PROTO_HASH_LEN);
    memcpy(add.event_id, id, PROTO_HASH_LEN);
    if ((r = db_txn_add(txn, &add)) == 0 && add.index_changed)
        changed(rp, add.rowid);
    return r;
}

/* Whether entry a comes before entry b in the journal's order. */
static bool before(const struct entry *a, const uint8_t aid[PROTO_HASH_LEN], const struct entry *b,
                   const uint8_t bid[PROTO_HASH_LEN])
{
    if (a->time_ns != b->time_ns)
        return a->time_ns < b->time_ns;
    if (a->op != b->op)
        return a->op > b->op;
    return memcmp(aid, bid, PROTO_HASH_LEN) < 0;
}

/*
 * The document is worked out anew, from nothing, by the applied entries in
 * `past` and, in its place in the journal's order, `mine` (a late entry;
 * NULL when undoing a cancelled one).
 */
static int rework(struct replay *rp, struct db_txn *txn, const uint8_t doc[PROTO_HASH_LEN],
                  const struct past_entry *past, size_t npast, struct event *mine)
{
    char hex[PROTO_HASH_HEX + 1];
    bool mine_done = mine == NULL, skipped;
    int r;

    proto_hex_encode(doc, PROTO_HASH_LEN, hex);
    r = db_txn_delete(txn, hex);
    if (r != 0 && r != DB_E_NOT_FOUND)
        return r;
    rp->removed |= r == 0;
    r = 0;
    for (size_t i = 0; r == 0 && i <= npast; i++) {
        if (!mine_done && (i == npast || before(&mine->e, mine->pend.id, &past[i].e, past[i].id))) {
            mine_done = true;
            r = apply_entry(rp, txn, &mine->e, mine->pend.id, &skipped);
            mine->skipped = skipped;
        }
        if (r == 0 && i < npast)
            r = apply_entry(rp, txn, &past[i].e, past[i].id, &skipped);
    }
    return r;
}

/* A void entry: the entry it cancels goes, undone if it was applied. */
static int apply_void(struct replay *rp, struct db_txn *txn, struct event *ev)
{
    int r = 0;

    if (ev->undo)
        r = rework(rp, txn, ev->undo_doc, ev->past, ev->npast, NULL);
    if (r == 0)
        r = db_txn_journal_applied(txn, ev->e.doc, true);
    return r;
}

static int page_apply(struct db_txn *txn, void *ctx)
{
    struct event_page *pg = ctx;
    int r = 0;

    for (size_t i = 0; r == 0 && i < pg->n; i++) {
        struct event *ev = &pg->ev[i];
        if (ev->verdict == 0 && ev->e.op != ENTRY_VOID &&
            (r = db_txn_journal_voided(txn, ev->pend.id, &ev->voided)) < 0)
            break;
        if (ev->verdict != 0 || ev->voided) {
            r = db_txn_journal_applied(txn, ev->pend.id, true);
            continue;
        }
        if (ev->e.op == ENTRY_VOID)
            r = apply_void(pg->rp, txn, ev);
        else if (ev->past)
            r = rework(pg->rp, txn, ev->e.doc, ev->past, ev->npast, ev);
        else
            r = apply_entry(pg->rp, txn, &ev->e, ev->pend.id, &ev->skipped);
        /* As when it was written: a delete that did not apply keeps no row. */
        if (r == 0)
            r = db_txn_journal_applied(txn, ev->pend.id, ev->skipped);
    }
    return r;
}

int replay_events(struct replay *rp)
{
    const struct recovery_parts *rv = &rp->rv;
    char hex[PROTO_HASH_HEX + 1];
    int r = 0;

    for (;;) {
        struct db_pending_entry *pend;
        size_t n;
        if ((r = db_pending_entries(rv->db, REPLAY_EVENTS, &pend, &n)) < 0)
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
        r = page_check(&pg);
        if (r == 0)
            r = replay_commit(rp, page_apply, &pg);
        for (size_t i = 0; i < n; i++) {
            struct event *ev = &pg.ev[i];
            if (r == 0 && ev->verdict != 0) {
                proto_hex_encode(ev->e.doc, PROTO_HASH_LEN, hex);
                log_warn("replay: document %s (%s) not restored: %s", ev->e.mime ? hex : "?",
                         ev->e.name ? ev->e.name : "no name",
                         ev->verdict == RECORD_E_BAD ? "its journal entry is damaged"
                                                     : "a chunk or segment is missing or damaged");
                rp->refused++;
            } else if (r == 0 && !ev->voided) {
                /* Unname and void entries are neither: the summary counts adds and deletes. */
                rp->deleted += ev->e.op == ENTRY_DELETE && !ev->skipped;
                rp->added += ev->e.op == ENTRY_ADD;
            }
            objects_entry_clear(&ev->e);
            past_free(ev);
        }
        free(pg.ev);
        if (r != 0)
            return r;
    }
}
