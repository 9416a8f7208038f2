/*
 * The shared bucket's gc, as the writers see each other's (recovery.h,
 * README "Several machines, one bucket"), on the refresh thread.
 *
 * Every writer gc's its own packs only, in two steps. First it copies the
 * live records of the packs it empties into packs of its own, marks the old
 * ones in its database, and puts a mark (gc/<W>-<G>, daemon/format/gcmark.h)
 * naming both. Every other writer, at its next refresh, marks those packs
 * too: dedup no longer picks their records, its rows move to the copies, and
 * once every operation of its own that could still have picked one up has
 * ended, it puts its acknowledgement. When all writers have acknowledged
 * (or the grace period has passed, by the server's clock), the writer reads
 * the bucket once more, marks anew what every writer's documents reference,
 * copies what was referenced late, and only then deletes the marked packs,
 * after a done object that names the late copies. The others then forget
 * the marked packs. A writer that finds a gc finished without its
 * acknowledgement while it still had rows in the marked packs was away
 * longer than the grace period: its database may lack what that gc
 * removed, and it is rebuilt from the bucket (recovery_parts.stale).
 *
 * The gc lease (locks/gc-<W>) keeps gc runs from overlapping: a writer puts
 * its lock, lists locks/, and holds the lease when no other lock is younger
 * than the lease's time to live, by the server's times. A writer that sees
 * another's lock gives up.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/base/log.h"
#include "daemon/format/gcmark.h"
#include "daemon/meta/db.h"
#include "daemon/recovery/replay-int.h"
#include "daemon/store/store.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* What one listing found of one writer's gc objects, by run. */
struct run_objects {
    uint64_t gen;
    bool mark, done;
    int64_t mark_mtime;
    uint64_t *ackers;
    size_t nackers;
};

static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000;
}

/* ---- small steps ---- */

/* A whole object into a malloc'd buffer (at most GCMARK_MAX_BODY). */
static int get_body(struct replay *rp, const char *key, char **out, size_t *len)
{
    uint8_t *buf;
    int r = replay_get(rp, key, 0, BACKEND_TO_END, &buf, len);

    if (r != 0)
        return r;
    if (*len > GCMARK_MAX_BODY) {
        free(buf);
        return -EFBIG;
    }
    *out = (char *)buf;
    return 0;
}

/* The number in the database of a pack key a mark names. */
static int key_pack(struct replay *rp, const char *key, uint64_t *pack)
{
    uint64_t writer, seq;

    if (pack_key_parse(key, &writer, &seq) < 0)
        return -EINVAL;
    if (writer == 0) {
        *pack = DB_PACK_NUMBER(0, seq);
        return 0;
    }
    return replay_pack_number(rp, writer, seq, pack);
}

struct mark_txn {
    struct replay *rp;
    const struct gcmark *m;
    struct db_mark row;
    const uint64_t *packs; /* m's marked packs, as numbers */
    bool mark_packs;       /* mark them */
    bool forget_packs;     /* forget them */
    uint64_t rows;         /* rows forgotten */
};

static int mark_txn_apply(struct db_txn *txn, void *ctx)
{
    struct mark_txn *t = ctx;
    int r = 0;

    for (size_t i = 0; r == 0 && (t->mark_packs || t->forget_packs) && i < t->m->npacks; i++) {
        bool known;
        uint64_t rows;
        if (t->forget_packs) {
            r = db_txn_pack_forget(txn, t->packs[i], &rows);
            t->rows += rows;
        } else {
            r = db_txn_pack_mark(txn, t->packs[i], &known);
        }
    }
    return r == 0 ? db_txn_mark_set(txn, &t->row) : r;
}

/* The marked packs of a mark, as numbers (malloc'd). */
static int mark_packs(struct replay *rp, const struct gcmark *m, uint64_t **out)
{
    uint64_t *v = calloc(m->npacks ? m->npacks : 1, sizeof(*v));
    int r = 0;

    if (!v)
        return -ENOMEM;
    for (size_t i = 0; r == 0 && i < m->npacks; i++)
        r = key_pack(rp, m->packs[i], &v[i]);
    if (r != 0) {
        free(v);
        return r;
    }
    *out = v;
    return 0;
}

/* The rows still in marked packs follow the copies of a body. */
static int relocate(struct replay *rp, const struct gcmark *m)
{
    int r = 0;

    for (size_t i = 0; r == 0 && i < m->ncopies; i++) {
        uint64_t pack;
        if ((r = key_pack(rp, m->copies[i], &pack)) == 0)
            r = replay_relocate(rp, pack);
    }
    return r;
}

struct ops_view {
    struct store *st;
    uint64_t next, oldest;
};

static void read_ops(void *ctx)
{
    struct ops_view *v = ctx;
    v->next = store_next_op(v->st);
    v->oldest = store_oldest_holder(v->st);
}

/* ---- another writer's run ---- */

/* A mark met for the first time: its packs are marked here, and the rows follow its copies. */
static int learn(struct replay *rp, uint64_t writer, uint64_t gen, bool own, struct db_mark *row)
{
    char key[GCMARK_KEY_MAX];
    struct gcmark m;
    uint64_t *packs = NULL;
    char *body;
    size_t len;
    int r;

    gcmark_key(key, sizeof(key), GCMARK_MARK, writer, gen, 0);
    if ((r = get_body(rp, key, &body, &len)) != 0)
        return r == BACKEND_E_NOT_FOUND ? 0 : r;
    if (gcmark_parse(body, len, &m) != 0 || m.done || m.writer != writer || m.gen != gen) {
        log_error("refresh: %s is not a gc mark of its writer; left alone", key);
        free(body);
        return 1;
    }
    if ((r = mark_packs(rp, &m, &packs)) == 0) {
        struct ops_view ops = {.st = rp->rv.st};
        struct mark_txn t = {.rp = rp, .m = &m, .packs = packs, .mark_packs = true};
        t.row = (struct db_mark){.writer = writer,
                                 .gen = gen,
                                 .state = own ? DB_MARK_OWN_PUBLISHED : DB_MARK_SEEN,
                                 .body = body,
                                 .body_len = len};
        r = replay_commit(rp, mark_txn_apply, &t);
        /* Operations that start from now on cannot pick the marked records up. */
        if (r == 0 && !own) {
            replay_on_loop(rp, read_ops, &ops);
            t.row.barrier = ops.next;
            r = replay_commit(rp, mark_txn_apply,
                              &(struct mark_txn){.rp = rp, .m = &m, .row = t.row});
        }
        if (r == 0)
            r = relocate(rp, &m);
        if (r == 0) {
            *row = t.row;
            row->body = body;
            body = NULL;
            log_info("refresh: writer %016" PRIx64 "'s gc %" PRIu64 " marks %zu packs", writer, gen,
                     m.npacks);
        }
    }
    free(packs);
    free(body);
    gcmark_clear(&m);
    return r;
}

/* The run is over: the late copies read, the marked packs forgotten. *rows: how many went. */
static int finish(struct replay *rp, struct db_mark *row, bool own, uint64_t *rows)
{
    char key[GCMARK_KEY_MAX];
    struct gcmark m, done;
    uint64_t *packs = NULL;
    char *body = NULL;
    size_t len;
    int r;

    *rows = 0;
    if (gcmark_parse(row->body, row->body_len, &m) != 0)
        return -EIO;
    gcmark_key(key, sizeof(key), GCMARK_DONE, row->writer, row->gen, 0);
    if ((r = get_body(rp, key, &body, &len)) != 0) {
        gcmark_clear(&m);
        return r;
    }
    if (gcmark_parse(body, len, &done) != 0 || !done.done || done.writer != row->writer ||
        done.gen != row->gen) {
        log_error("refresh: %s is not the done object of its gc; left alone", key);
        free(body);
        gcmark_clear(&m);
        return 1;
    }
    r = relocate(rp, &done);
    if (r == 0)
        r = mark_packs(rp, &m, &packs);
    if (r == 0) {
        struct mark_txn t = {.rp = rp, .m = &m, .packs = packs, .forget_packs = true};
        t.row = *row;
        t.row.state = own ? DB_MARK_OWN_DONE : DB_MARK_GONE;
        t.row.done = body;
        t.row.done_len = len;
        r = replay_commit(rp, mark_txn_apply, &t);
        *rows = t.rows;
        if (r == 0)
            row->state = t.row.state;
    }
    free(packs);
    free(body);
    gcmark_clear(&m);
    gcmark_clear(&done);
    return r;
}

static int ack(struct replay *rp, struct db_mark *row)
{
    char key[GCMARK_KEY_MAX], text[80];
    int n, r;

    gcmark_key(key, sizeof(key), GCMARK_ACK, row->writer, row->gen, rp->rv.writer);
    n = snprintf(text, sizeof(text), "cairn gc ack 1\nwriter %016" PRIx64 "\n", rp->rv.writer);
    if ((r = replay_put(rp, key, text, (size_t)n, 0)) != 0)
        return r;
    struct gcmark none = {0};
    struct mark_txn t = {.rp = rp, .m = &none, .row = *row};
    t.row.state = DB_MARK_ACKED;
    if ((r = replay_commit(rp, mark_txn_apply, &t)) == 0)
        row->state = DB_MARK_ACKED;
    return r;
}

/* ---- one writer's objects ---- */

static bool acked_by(const struct run_objects *o, uint64_t writer)
{
    for (size_t i = 0; i < o->nackers; i++)
        if (o->ackers[i] == writer)
            return true;
    return false;
}

/* Whether this daemon's own published run may finish: every writer acknowledged, or grace passed.
 */
static bool own_ready(struct refresh_marks *mk, const struct run_objects *o,
                      const uint64_t *writers, size_t nwriters)
{
    size_t missing = 0;

    for (size_t i = 0; i < nwriters; i++)
        missing += writers[i] != mk->own && !acked_by(o, writers[i]);
    if (missing == 0)
        return true;
    /* The grace period, by the server's clock: the lease's time carried on by the local clock. */
    if (!mk->lease_held || !o->mark_mtime)
        return false;
    int64_t server_now = mk->lease_server_s + (int64_t)((now_ms() - mk->lease_mono_ms) / 1000);
    if (server_now - o->mark_mtime < (int64_t)(mk->grace_ms / 1000))
        return false;
    log_warn("gc: %zu writers did not acknowledge gc %" PRIu64 " within the grace period; it "
             "finishes without them",
             missing, o->gen);
    return true;
}

static struct db_mark *row_of(struct db_mark *rows, size_t n, uint64_t writer, uint64_t gen)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].writer == writer && rows[i].gen == gen)
            return &rows[i];
    return NULL;
}

static int one_run(struct replay *rp, struct refresh_marks *mk, uint64_t writer,
                   struct run_objects *o, struct db_mark *rows, size_t nrows,
                   const uint64_t *writers, size_t nwriters)
{
    struct db_mark *row = row_of(rows, nrows, writer, o->gen), fresh = {0};
    bool own = writer == mk->own;
    uint64_t gone;
    int r = 0;

    if (!row && !o->mark)
        return 0; /* acks or a done object without their mark: nothing to follow */
    if (!row) {
        if ((r = learn(rp, writer, o->gen, own, &fresh)) != 0 || !fresh.writer)
            return r == 1 ? 0 : r;
        row = &fresh;
    }
    if (own) {
        if (row->state == DB_MARK_OWN_PUBLISHED && o->done) {
            r = finish(rp, row, true, &gone);
        } else if (row->state == DB_MARK_OWN_PUBLISHED && own_ready(mk, o, writers, nwriters)) {
            uint64_t *grown = realloc(mk->ready, (mk->nready + 1) * sizeof(*grown));
            if (!grown)
                r = -ENOMEM;
            else
                (mk->ready = grown)[mk->nready++] = o->gen;
        }
    } else if (row->state == DB_MARK_SEEN || row->state == DB_MARK_ACKED) {
        bool acked = row->state == DB_MARK_ACKED;
        if (o->done) {
            if ((r = finish(rp, row, false, &gone)) == 0 && !acked && gone > 0 && !mk->fresh) {
                log_error("refresh: writer %016" PRIx64 "'s gc %" PRIu64
                          " finished without this daemon's acknowledgement, and it had %" PRIu64
                          " records in the packs it deleted: this database may lack what that gc "
                          "removed",
                          writer, o->gen, gone);
                mk->stale = true;
            }
        } else if (!acked) {
            struct ops_view ops = {.st = rp->rv.st};
            replay_on_loop(rp, read_ops, &ops);
            if (ops.oldest >= row->barrier)
                r = ack(rp, row);
        }
    }
    if (row == &fresh) {
        free(fresh.body);
        free(fresh.done);
    }
    return r == 1 ? 0 : r;
}

/* The first run of a writer not finished here: its listing starts there. */
static uint64_t first_open_run(const struct db_mark *rows, size_t n, uint64_t writer)
{
    uint64_t first = UINT64_MAX, last = 0;

    for (size_t i = 0; i < n; i++) {
        if (rows[i].writer != writer)
            continue;
        if (rows[i].gen >= last)
            last = rows[i].gen + 1;
        if (rows[i].state != DB_MARK_GONE && rows[i].state != DB_MARK_OWN_DONE &&
            rows[i].gen < first)
            first = rows[i].gen;
    }
    return first != UINT64_MAX ? first : last;
}

static void runs_free(struct run_objects *runs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(runs[i].ackers);
    free(runs);
}

/* One writer's gc objects from `from` on, by run. */
static int list_runs(struct replay *rp, uint64_t writer, uint64_t from, struct run_objects **out,
                     size_t *nout)
{
    struct backend_list list = {0};
    struct run_objects *runs = NULL;
    size_t n = 0;
    bool past = false;
    int r = 0;

    gcmark_cursor(list.cursor, sizeof(list.cursor), writer, from);
    do {
        snprintf(list.req.key, sizeof(list.req.key), GCMARK_DIR);
        if ((r = replay_list(rp, &list)) != 0)
            break;
        for (size_t i = 0; r == 0 && i < list.nentries; i++) {
            enum gcmark_kind kind;
            uint64_t w, gen, acker;
            if (gcmark_key_parse(list.entries[i].key, &kind, &w, &gen, &acker) < 0)
                continue;
            if (w != writer) {
                past = true;
                break;
            }
            if (n == 0 || runs[n - 1].gen != gen) {
                struct run_objects *grown = realloc(runs, (n + 1) * sizeof(*grown));
                if (!grown) {
                    r = -ENOMEM;
                    break;
                }
                runs = grown;
                runs[n++] = (struct run_objects){.gen = gen};
            }
            struct run_objects *o = &runs[n - 1];
            if (kind == GCMARK_MARK) {
                o->mark = true;
                o->mark_mtime = list.entries[i].mtime;
            } else if (kind == GCMARK_DONE) {
                o->done = true;
            } else {
                uint64_t *grown = realloc(o->ackers, (o->nackers + 1) * sizeof(*grown));
                if (!grown) {
                    r = -ENOMEM;
                    break;
                }
                (o->ackers = grown)[o->nackers++] = acker;
            }
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (r == 0 && !past && list.cursor[0]);
    backend_list_reset(&list);
    if (r != 0) {
        runs_free(runs, n);
        return r;
    }
    *out = runs;
    *nout = n;
    return 0;
}

int marks_pass(struct replay *rp, struct refresh_marks *mk, const uint64_t *writers,
               size_t nwriters)
{
    struct db_mark *rows;
    size_t nrows;
    int r;

    mk->nready = 0;
    mk->solo = true;
    for (size_t i = 0; i < nwriters; i++)
        mk->solo &= writers[i] == mk->own;
    if ((r = db_marks(rp->rv.db, &rows, &nrows)) < 0)
        return r;
    for (size_t w = 0; r == 0 && w < nwriters; w++) {
        struct run_objects *runs;
        size_t nruns;
        r = list_runs(rp, writers[w], first_open_run(rows, nrows, writers[w]), &runs, &nruns);
        for (size_t i = 0; r == 0 && i < nruns; i++)
            r = one_run(rp, mk, writers[w], &runs[i], rows, nrows, writers, nwriters);
        if (r == 0)
            runs_free(runs, nruns);
    }
    db_marks_free(rows, nrows);
    return r;
}

/* ---- this daemon's own runs ---- */

int marks_publish(struct replay *rp, struct refresh_marks *mk, uint64_t gen)
{
    struct db_mark *rows, *row;
    char key[GCMARK_KEY_MAX];
    size_t nrows;
    int r;

    if ((r = db_marks(rp->rv.db, &rows, &nrows)) < 0)
        return r;
    row = row_of(rows, nrows, mk->own, gen);
    if (!row || (row->state != DB_MARK_OWN_COPIED && row->state != DB_MARK_OWN_FINISHED)) {
        db_marks_free(rows, nrows);
        return 0;
    }
    bool done = row->state == DB_MARK_OWN_FINISHED;
    gcmark_key(key, sizeof(key), done ? GCMARK_DONE : GCMARK_MARK, mk->own, gen, 0);
    r = done ? replay_put(rp, key, row->done, row->done_len, 0)
             : replay_put(rp, key, row->body, row->body_len, 0);
    if (r == 0) {
        struct gcmark none = {0};
        struct mark_txn t = {.rp = rp, .m = &none, .row = *row};
        t.row.state = done ? DB_MARK_OWN_DONE : DB_MARK_OWN_PUBLISHED;
        r = replay_commit(rp, mark_txn_apply, &t);
    }
    if (r != 0)
        log_error("gc: cannot put %s: %s", key, r < 0 ? strerror(-r) : "backend unavailable");
    db_marks_free(rows, nrows);
    return r;
}

/* ---- the lease ---- */

static int lease_put(struct replay *rp, struct refresh_marks *mk)
{
    char key[GCMARK_KEY_MAX], text[128];
    int n;

    gcmark_lock_key(key, sizeof(key), mk->own);
    n = snprintf(text, sizeof(text),
                 "cairn gc lease 1\nwriter %016" PRIx64 "\nttl_ms %" PRIu64 "\n", mk->own,
                 mk->lease_ttl_ms);
    return replay_put(rp, key, text, (size_t)n, 0);
}

int marks_lease_take(struct replay *rp, struct refresh_marks *mk)
{
    struct backend_list list = {0};
    char own_key[GCMARK_KEY_MAX];
    int64_t own_mtime = 0, other_mtime = 0;
    uint64_t other = 0;
    uint64_t taken_ms = now_ms();
    int r;

    mk->lease_holder = 0;
    if ((r = lease_put(rp, mk)) != 0)
        return r;
    gcmark_lock_key(own_key, sizeof(own_key), mk->own);
    do {
        snprintf(list.req.key, sizeof(list.req.key), GCMARK_LOCKS_DIR);
        if ((r = replay_list(rp, &list)) != 0)
            break;
        for (size_t i = 0; i < list.nentries; i++) {
            uint64_t w;
            if (gcmark_lock_key_parse(list.entries[i].key, &w) < 0)
                continue;
            if (w == mk->own) {
                own_mtime = list.entries[i].mtime;
            } else if (list.entries[i].mtime > other_mtime) {
                other_mtime = list.entries[i].mtime;
                other = w;
            }
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (list.cursor[0]);
    backend_list_reset(&list);
    if (r != 0)
        return r;
    if (own_mtime == 0) {
        log_error("gc: the lease %s is not listed, or without a time", own_key);
        return BACKEND_E_UNAVAILABLE;
    }
    /* Another lock younger than the time to live (a second of slack for the clocks' steps). */
    if (other && other_mtime + (int64_t)(mk->lease_ttl_ms / 1000) + 1 >= own_mtime) {
        mk->lease_holder = other;
        replay_del(rp, own_key);
        return REFRESH_E_BUSY;
    }
    mk->lease_held = true;
    mk->lease_server_s = own_mtime;
    mk->lease_mono_ms = taken_ms;
    mk->lease_renewed_ms = taken_ms;
    /* The local clock against the server's: what entry times rest on (README). */
    mk->skew_s = (int64_t)time(NULL) - own_mtime;
    return 0;
}

int marks_lease_renew(struct replay *rp, struct refresh_marks *mk)
{
    uint64_t at = now_ms();
    int r = lease_put(rp, mk);

    if (r == 0)
        mk->lease_renewed_ms = at;
    else
        log_warn("gc: renewing the lease failed: %s", r < 0 ? strerror(-r) : "backend unavailable");
    return r;
}

int marks_lease_drop(struct replay *rp, struct refresh_marks *mk)
{
    char key[GCMARK_KEY_MAX];

    if (!mk->lease_held)
        return 0;
    mk->lease_held = false;
    gcmark_lock_key(key, sizeof(key), mk->own);
    return replay_del(rp, key);
}
