/*
 * Recovery from the packs: the database is brought up to what the packs
 * hold. A pack is the log of the database: commits are not synced (the pack
 * appends are), so after a crash the database may lack its last
 * transactions, and with `cairnd --rebuild-index` it starts empty and
 * everything comes back from here.
 *
 *   1. Packs the database does not know, or knows only up to a point, are
 *      read from that point (replay-pack.c): sealed ones through their
 *      index, open ones record by record, where a torn tail (a crash in the
 *      middle of an append) shows as a bad checksum and is cut off. Only
 *      what lies beyond the database's knowledge of a pack can be a torn
 *      tail: damage before that is left for verify to report. Their records
 *      go into the database (chunk, segment and journal rows); journal
 *      entries are marked unapplied.
 *   2. Packs left open are made durable as they are and sealed, except the
 *      newest, which the pack writer goes on appending to.
 *   3. Unapplied journal entries are applied in time order
 *      (replay-events.c): an add whose chunks are not all there (or, for a
 *      rebuild, not all intact) is refused and logged; its record becomes
 *      dead weight for gc.
 *   4. Deletions of repacked packs that a crash interrupted are finished,
 *      and the rows of packs already deleted are dropped.
 *
 * This runs before the daemon serves anyone, so it drives the loop itself
 * and waits for each request in turn (the replay_* helpers below).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/pack/packer.h"
#include "daemon/recovery/replay.h"
#include "daemon/meta/db.h"
#include "daemon/store/store.h"
#include "daemon/base/tty-progress.h"
#include "proto/util.h"
#include "storage/backend.h"

/* ---- waiting for the loop ---- */

static void req_done(struct backend_req *req)
{
    *(bool *)req->userdata = true;
}

static void run_until(const struct recovery_parts *rv, const bool *done)
{
    while (!*done)
        uv_run(rv->loop, UV_RUN_ONCE);
}

int replay_get(struct replay *rp, const char *key, uint64_t off, uint64_t len, uint8_t **out,
               size_t *out_len)
{
    const struct recovery_parts *rv = &rp->rv;
    struct backend_get get = {.offset = off, .length = len, .max_len = (size_t)len};
    bool done = false;
    int r;

    if (replay_prefetch_take(rp, key, off, len, out, out_len))
        return 0;
    snprintf(get.req.key, sizeof(get.req.key), "%s", key);
    get.req.cb = req_done;
    get.req.userdata = &done;
    if ((r = backend_get(rv->be, &get)) < 0)
        return r;
    run_until(rv, &done);
    if (get.req.status != 0) {
        backend_get_reset(&get);
        return get.req.status;
    }
    *out = get.out;
    *out_len = get.out_len;
    return 0;
}

int replay_append(const struct recovery_parts *rv, const char *key, uint64_t off, const struct iovec *iov,
                  unsigned iovcnt)
{
    struct backend_append app = {.offset = off, .iov = iov, .iovcnt = iovcnt};
    bool done = false;
    int r;

    snprintf(app.req.key, sizeof(app.req.key), "%s", key);
    app.req.cb = req_done;
    app.req.userdata = &done;
    if ((r = backend_append(rv->be, &app)) < 0)
        return r;
    run_until(rv, &done);
    return app.req.status;
}

int replay_del(const struct recovery_parts *rv, const char *key)
{
    struct backend_del del = {0};
    bool done = false;
    int r;

    snprintf(del.req.key, sizeof(del.req.key), "%s", key);
    del.req.cb = req_done;
    del.req.userdata = &done;
    if ((r = backend_del(rv->be, &del)) < 0)
        return r;
    run_until(rv, &done);
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

int replay_commit(const struct recovery_parts *rv, int (*apply)(struct db_txn *, void *), void *ctx)
{
    struct sync_write sw = {
        .w = {.apply = sync_write_apply, .done = sync_write_done}, .apply = apply, .ctx = ctx};

    db_write(rv->db, &sw.w);
    run_until(rv, &sw.done);
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
int replay_job(const struct recovery_parts *rv, void (*fn)(void *ctx), void *ctx)
{
    return replay_jobs(rv, fn, &ctx, 1);
}

int replay_jobs(const struct recovery_parts *rv, void (*fn)(void *ctx), void *const *ctxs, size_t n)
{
    struct sync_job jobs[REPLAY_JOBS_MAX];
    int r = 0;
    size_t started = 0;

    if (n > REPLAY_JOBS_MAX)
        return -EINVAL;
    for (; started < n; started++) {
        jobs[started] = (struct sync_job){.fn = fn, .ctx = ctxs[started]};
        if ((r = uv_queue_work(rv->loop, &jobs[started].work, sync_job_work, sync_job_done)) < 0)
            break;
    }
    /* The jobs that started run to their end, whatever became of the others. */
    for (size_t i = 0; i < started; i++)
        run_until(rv, &jobs[i].done);
    return r;
}

/* ---- the packs on the backend against the database ---- */

struct listed {
    uint64_t seq, size;
};

static int list_packs(const struct recovery_parts *rv, struct listed **out, size_t *n)
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
        if ((r = backend_list(rv->be, &list)) < 0)
            break;
        run_until(rv, &done);
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
    return u->drop ? db_txn_pack_drop(txn, u->seq)
                   : db_txn_pack_set(txn, u->seq, u->size, u->state);
}

/* The pack's row goes: the pack itself is gone. */
static int drop_row(const struct recovery_parts *rv, uint64_t seq)
{
    struct pack_update u = {.seq = seq, .drop = true};
    return replay_commit(rv, pack_update_apply, &u);
}

/*
 * A pack the database has and the backend does not. A repack deletes the
 * old pack only after the synced commit that moved everything out of it and
 * marked it "deleting", and drops that row after the delete; a crash in
 * between (CAIRN_CRASH_AT=repack-deleted) leaves the row alone, and it goes
 * now, whatever the pack's number. Any other missing pack is data lost: its
 * row stays, so status and verify go on showing it.
 */
static int pack_missing(const struct recovery_parts *rv, const struct db_pack *p)
{
    if (p->state == DB_PACK_DELETING)
        return drop_row(rv, p->seq);
    log_error("replay: pack %016" PRIx64 " is missing from the backend; what it held is lost",
              p->seq);
    return 0;
}

/* A pack on the backend, with its row in the database (p) or without one (NULL). */
static int pack_listed(struct replay *rp, const struct listed *l, const struct db_pack *p,
                       bool newest, struct packer_resume *resume)
{
    const struct recovery_parts *rv = &rp->rv;
    struct pack_update u = {.seq = l->seq};
    int r;

    if (p && p->state == DB_PACK_DELETING) {
        /* A repack's deletion that a crash interrupted: finish it (nobody reads it yet). */
        char key[BACKEND_MAX_KEY];
        packer_pack_key(key, sizeof(key), p->seq);
        if ((r = replay_del(rv, key)) != 0)
            return r;
        return drop_row(rv, p->seq);
    }
    if (p && p->state == DB_PACK_SEALED && p->size == l->size)
        return 0;
    r = replay_read_pack(rp, l->seq, l->size, p ? p->size : 0, newest, resume, &u.state, &u.size);
    if (r == 1)
        return 0; /* left alone, and said why */
    return r != 0 ? r : replay_commit(rv, pack_update_apply, &u);
}

/* Whether pack_listed() reads a listed pack: unknown, or known otherwise than as it is. */
static bool will_read(const struct listed *l, const struct db_pack *known, size_t nknown, size_t *k)
{
    while (*k < nknown && known[*k].seq < l->seq)
        (*k)++;
    if (*k == nknown || known[*k].seq != l->seq)
        return true;
    const struct db_pack *p = &known[*k];
    return p->state != DB_PACK_DELETING && !(p->state == DB_PACK_SEALED && p->size == l->size);
}

/*
 * Reads ahead the next window of packs that will be read, from listed[from]
 * on; returns the index of the first listed pack after the window. Only for
 * backends without appends (remote ones), where a read is a round trip.
 */
static size_t prefetch_window(struct replay *rp, const struct listed *listed, size_t nlisted,
                              size_t from, const struct db_pack *known, size_t nknown)
{
    uint64_t seqs[REPLAY_PREFETCH_WINDOW], sizes[REPLAY_PREFETCH_WINDOW];
    size_t n = 0, k = 0, i = from;

    if (backend_has(rp->rv.be, BACKEND_CAP_APPEND))
        return nlisted;
    for (; i < nlisted && n < REPLAY_PREFETCH_WINDOW; i++) {
        if (!will_read(&listed[i], known, nknown, &k))
            continue;
        seqs[n] = listed[i].seq;
        sizes[n++] = listed[i].size;
    }
    if (replay_prefetch_start(rp, seqs, sizes, n) < 0)
        replay_prefetch_free(rp); /* only slower */
    return i;
}

static int replay_packs(struct replay *rp, struct packer_resume *resume)
{
    struct tty_progress progress;
    uint64_t read_bytes = 0, total_bytes = 0;
    const struct recovery_parts *rv = &rp->rv;
    struct listed *listed;
    struct db_pack *known;
    size_t nlisted, nknown, i = 0, k = 0, window_end = 0;
    uint64_t newest_open = 0;
    int r;

    if ((r = list_packs(rv, &listed, &nlisted)) != 0)
        return r;
    if ((r = db_packs(rv->db, &known, &nknown)) < 0) {
        free(listed);
        return r;
    }
    /*
     * Listings come in name order, which is sequence order (fixed-width hex),
     * and so do the rows. A number the database still has is never used
     * again, even for a pack that is gone: its rows may still point there.
     */
    for (size_t j = 0; j < nlisted; j++) {
        if (listed[j].seq >= resume->next_seq)
            resume->next_seq = listed[j].seq + 1;
        newest_open = listed[j].seq; /* only the newest pack may stay open */
    }
    for (size_t j = 0; j < nknown; j++) {
        if (known[j].seq >= resume->next_seq)
            resume->next_seq = known[j].seq + 1;
    }
    tty_progress_init(&progress, rp->rebuild);
    for (size_t j = 0; j < nlisted; j++)
        total_bytes += listed[j].size;
    while (r == 0 && (i < nlisted || k < nknown)) {
        if (k < nknown && (i == nlisted || known[k].seq < listed[i].seq)) {
            r = pack_missing(rv, &known[k++]);
            continue;
        }
        if (i == window_end)
            window_end = prefetch_window(rp, listed, nlisted, i, known, nknown);
        const struct db_pack *p = k < nknown && known[k].seq == listed[i].seq ? &known[k++] : NULL;
        r = pack_listed(rp, &listed[i], p, listed[i].seq == newest_open, resume);
        read_bytes += listed[i].size;
        i++;
        tty_progress_draw(&progress, "rebuild: read", read_bytes >> 20, total_bytes >> 20,
                          " MiB of the packs");
    }
    tty_progress_end(&progress);
    replay_prefetch_free(rp);
    free(listed);
    free(known);
    return r;
}

int recovery_replay(const struct recovery_parts *parts, bool rebuild, struct packer_resume *resume,
                    char *summary, size_t summary_len)
{
    struct replay *rp = calloc(1, sizeof(*rp));
    uint64_t newest;
    int r;

    summary[0] = '\0';
    if (!rp)
        return -ENOMEM;
    rp->rv = *parts;
    rp->rebuild = rebuild;
    resume->next_seq = 1;
    r = replay_packs(rp, resume);
    if (r == 0)
        r = replay_events(rp);
    if (r == 0 && (r = db_journal_newest(parts->db, &newest)) == 0 && newest > rp->max_time)
        rp->max_time = newest;
    store_set_entry_floor(parts->st, rp->max_time);
    if (r == 0 && (rp->records || rp->torn_bytes || rp->damaged || rp->refused))
        snprintf(summary, summary_len,
                 "%" PRIu64 " records recovered from %" PRIu64 " packs (%" PRIu64
                 " torn bytes cut, %" PRIu64 " damaged records left in place, %" PRIu64
                 " packs sealed); %" PRIu64 " adds and %" PRIu64 " deletes applied, %" PRIu64
                 " adds refused",
                 rp->records, rp->packs_read, rp->torn_bytes, rp->damaged, rp->sealed, rp->added,
                 rp->deleted, rp->refused);
    if (r != 0)
        log_error("replay: %s", r < 0 ? strerror(-r) : "the backend is unavailable");
    free(rp->index);
    free(rp);
    return r < 0 ? r : (r ? -EIO : 0);
}
