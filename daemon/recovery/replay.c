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
 * and waits for each request in turn (the replay_* helpers of
 * replay-loop.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/pack/packer.h"
#include "daemon/recovery/replay-int.h"
#include "daemon/meta/db.h"
#include "daemon/store/store.h"
#include "daemon/base/tty-progress.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* ---- the packs on the backend against the database ---- */

struct listed {
    uint64_t pack, size; /* pack: its number in the database */
};

static int by_pack(const void *a, const void *b)
{
    const struct listed *x = a, *y = b;
    return x->pack < y->pack ? -1 : x->pack > y->pack;
}

static int writer_apply(struct db_txn *txn, void *ctx)
{
    unsigned widx;
    return db_txn_writer(txn, *(const uint64_t *)ctx, &widx);
}

int replay_pack_number(struct replay *rp, uint64_t writer, uint64_t seq, uint64_t *pack)
{
    const struct recovery_parts *rv = &rp->rv;
    unsigned widx;
    int r;

    if (db_writer_index(rv->db, writer, &widx) < 0) {
        if ((r = replay_commit(rp, writer_apply, &writer)) != 0)
            return r < 0 ? r : -EIO;
        if (db_writer_index(rv->db, writer, &widx) < 0)
            return -EIO;
    }
    *pack = DB_PACK_NUMBER(widx, seq);
    return 0;
}

/* Every pack on the backend, by its number in the database. */
static int list_packs(struct replay *rp, struct listed **out, size_t *n)
{
    struct backend_list list = {0};
    struct listed *v = NULL;
    size_t count = 0, cap = 0;
    int r = 0;

    *out = NULL;
    *n = 0;
    do {
        snprintf(list.req.key, sizeof(list.req.key), PACK_KEY_PREFIX);
        if ((r = replay_list(rp, &list)) != 0)
            break;
        for (size_t i = 0; r == 0 && i < list.nentries; i++) {
            uint64_t writer, seq, pack;
            if (pack_key_parse(list.entries[i].key, &writer, &seq) < 0) {
                log_warn("replay: ignoring %s, which is not a pack", list.entries[i].key);
                continue;
            }
            if ((r = replay_pack_number(rp, writer, seq, &pack)) < 0)
                break;
            if (count == cap) {
                cap = cap ? cap * 2 : 64;
                struct listed *grown = realloc(v, cap * sizeof(*grown));
                if (!grown) {
                    r = -ENOMEM;
                    break;
                }
                v = grown;
            }
            v[count++] = (struct listed){pack, list.entries[i].size};
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (r == 0 && list.cursor[0]);
    backend_list_reset(&list);
    if (r != 0) {
        free(v);
        return r < 0 ? r : -EIO;
    }
    /* Key order is not number order (writer 0's keys sort among the others'): the rows' is. */
    if (count)
        qsort(v, count, sizeof(*v), by_pack);
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
static int drop_row(struct replay *rp, uint64_t seq)
{
    struct pack_update u = {.seq = seq, .drop = true};
    return replay_commit(rp, pack_update_apply, &u);
}

/*
 * A pack the database has and the backend does not. A repack deletes the
 * old pack only after the synced commit that moved everything out of it and
 * marked it "deleting", and drops that row after the delete; a crash in
 * between (CAIRN_CRASH_AT=repack-deleted) leaves the row alone, and it goes
 * now, whatever the pack's number. Any other missing pack is data lost: its
 * row stays, so status and verify go on showing it.
 */
static int pack_missing(struct replay *rp, const struct db_pack *p)
{
    const struct recovery_parts *rv = &rp->rv;
    char key[BACKEND_MAX_KEY];

    if (p->state == DB_PACK_DELETING)
        return drop_row(rp, p->seq);
    /* Marked by its writer's gc, and deleted since: its done object says what follows. */
    if (p->state == DB_PACK_MARKED)
        return 0;
    if (db_pack_key(rv->db, p->seq, key, sizeof(key)) < 0)
        snprintf(key, sizeof(key), "%016" PRIx64, p->seq);
    log_error("replay: pack %s is missing from the backend; what it held is lost", key);
    return 0;
}

/* Whether a pack is this daemon's to change: its own writer's, or writer 0's when it owns those. */
static bool own_pack(const struct replay *rp, uint64_t pack)
{
    unsigned widx = DB_PACK_WIDX(pack);
    return widx == rp->own_widx || (widx == 0 && rp->rv.owns_writer0);
}

int replay_pack_listed(struct replay *rp, uint64_t pack, uint64_t size, const struct db_pack *p,
                       bool newest, struct packer_resume *resume)
{
    const struct listed one = {pack, size}, *l = &one;
    const struct recovery_parts *rv = &rp->rv;
    struct pack_update u = {.seq = l->pack};
    bool own = own_pack(rp, l->pack);
    int r;

    if (p && p->state == DB_PACK_DELETING) {
        /* A repack's deletion that a crash interrupted: finish it (nobody reads it yet). */
        char key[BACKEND_MAX_KEY];
        if (db_pack_key(rv->db, p->seq, key, sizeof(key)) < 0)
            return -EIO;
        if ((r = replay_del(rp, key)) != 0)
            return r;
        return drop_row(rp, p->seq);
    }
    /* Sealed, or marked by a gc (a sealed pack whose rows move): known as it is. */
    if (p && (p->state == DB_PACK_SEALED || p->state == DB_PACK_MARKED) && p->size == l->size)
        return 0;
    /* Writer 0's pack left open, and not ours: nobody appends to it any more. */
    if (!own && p && p->state == DB_PACK_OPEN && p->size == l->size)
        return 0;
    r = replay_read_pack(rp, l->pack, l->size, p ? p->size : 0, own, newest, resume, &u.state,
                         &u.size);
    if (r == 1)
        return 0; /* left alone, and said why */
    return r != 0 ? r : replay_commit(rp, pack_update_apply, &u);
}

/* Whether pack_listed() reads a listed pack: unknown, or known otherwise than as it is. */
static bool will_read(const struct listed *l, const struct db_pack *known, size_t nknown, size_t *k)
{
    while (*k < nknown && known[*k].seq < l->pack)
        (*k)++;
    if (*k == nknown || known[*k].seq != l->pack)
        return true;
    const struct db_pack *p = &known[*k];
    return p->state != DB_PACK_DELETING &&
           !((p->state == DB_PACK_SEALED || p->state == DB_PACK_MARKED) && p->size == l->size);
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
        seqs[n] = listed[i].pack;
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
    uint64_t newest_open = 0, high = 0;
    int r;

    if ((r = list_packs(rp, &listed, &nlisted)) != 0)
        return r;
    if ((r = db_packs(rv->db, &known, &nknown)) < 0) {
        free(listed);
        return r;
    }
    /*
     * Both come in number order. This daemon's next pack comes after every
     * pack of its writer listed or known: a number the database still has
     * is never used again, even for a pack that is gone (its rows may still
     * point there). Only its own newest pack may stay open.
     */
    for (size_t j = 0; j < nlisted; j++) {
        if (DB_PACK_WIDX(listed[j].pack) != rp->own_widx)
            continue;
        if (listed[j].pack >= resume->next_seq)
            resume->next_seq = listed[j].pack + 1;
        newest_open = listed[j].pack;
    }
    for (size_t j = 0; j < nknown; j++) {
        if (DB_PACK_WIDX(known[j].seq) == rp->own_widx && known[j].seq >= resume->next_seq)
            resume->next_seq = known[j].seq + 1;
    }
    /* Nor a number whose pack went (a gc deleted it): its read-cache slices may remain. */
    if ((r = db_pack_high(rv->db, rp->own_widx, &high)) < 0) {
        free(listed);
        free(known);
        return r;
    }
    if (high >= resume->next_seq)
        resume->next_seq = high + 1;
    tty_progress_init(&progress, rp->rebuild);
    for (size_t j = 0; j < nlisted; j++)
        total_bytes += listed[j].size;
    while (r == 0 && (i < nlisted || k < nknown)) {
        if (k < nknown && (i == nlisted || known[k].seq < listed[i].pack)) {
            r = pack_missing(rp, &known[k++]);
            continue;
        }
        if (i == window_end)
            window_end = prefetch_window(rp, listed, nlisted, i, known, nknown);
        const struct db_pack *p = k < nknown && known[k].seq == listed[i].pack ? &known[k++] : NULL;
        r = replay_pack_listed(rp, listed[i].pack, listed[i].size, p,
                               newest_open && listed[i].pack == newest_open, resume);
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

int recovery_writer_key_parse(const char *key, uint64_t *id)
{
    size_t plen = strlen(RECOVERY_WRITERS_DIR);
    char *end;

    if (strncmp(key, RECOVERY_WRITERS_DIR, plen) != 0 || strlen(key + plen) != 16)
        return -EINVAL;
    for (const char *c = key + plen; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return -EINVAL;
    *id = strtoull(key + plen, &end, 16);
    return *id ? 0 : -EINVAL;
}

/*
 * The gc objects of every writer the database knows (marks.c), at start:
 * no operation runs yet, so new marks are acknowledged at once. -ESTALE when
 * a gc finished without this daemon and removed what its database has.
 */
static int replay_marks(struct replay *rp, bool fresh)
{
    struct refresh_marks mk = {
        .own = rp->rv.writer, .grace_ms = rp->rv.gc_grace_ms, .fresh = fresh};
    uint64_t *ids = NULL, id;
    size_t n = 0;
    int r = 0;

    for (unsigned widx = 1; db_writer_id(rp->rv.db, widx, &id) == 0; widx++) {
        uint64_t *grown = realloc(ids, (n + 1) * sizeof(*grown));
        if (!grown) {
            free(ids);
            return -ENOMEM;
        }
        (ids = grown)[n++] = id;
    }
    /* Twice: what the first pass saw learned, the second acknowledges. */
    for (int i = 0; r == 0 && i < 2; i++)
        r = marks_pass(rp, &mk, ids, n);
    free(ids);
    free(mk.ready);
    return r == 0 && mk.stale ? -ESTALE : r;
}

/*
 * What the bucket's server does, looked at once per start with an object of
 * this writer's own (locks/probe-<id>): whether it refuses a second
 * create-only put (If-None-Match: *), which nothing relies on but the log
 * says; and its clock against this machine's, from the object's time.
 */
/* Whether the database knows a writer besides this one (and writer 0). */
static bool shared_bucket(struct replay *rp)
{
    uint64_t id;

    for (unsigned widx = 1; db_writer_id(rp->rv.db, widx, &id) == 0; widx++)
        if (id != rp->rv.writer)
            return true;
    return false;
}

static int probe_bucket(struct replay *rp, int64_t *skew, bool *conditional, bool *timed)
{
    static const char body[] = "cairn probe\n";
    struct backend_list list = {0};
    char key[BACKEND_MAX_KEY];
    int64_t before = (int64_t)time(NULL), mtime = 0;
    int r;

    snprintf(key, sizeof(key), "locks/probe-%016" PRIx64, rp->rv.writer);
    r = replay_put(rp, key, body, sizeof(body) - 1, BACKEND_PUT_CREATE);
    if (r == BACKEND_E_EXISTS && (r = replay_del(rp, key)) == 0)
        r = replay_put(rp, key, body, sizeof(body) - 1, BACKEND_PUT_CREATE);
    if (r != 0)
        return r;
    r = replay_put(rp, key, body, sizeof(body) - 1, BACKEND_PUT_CREATE);
    *conditional = r == BACKEND_E_EXISTS;
    if (r != 0 && r != BACKEND_E_EXISTS)
        return r;
    do {
        snprintf(list.req.key, sizeof(list.req.key), "locks/");
        if ((r = replay_list(rp, &list)) != 0)
            break;
        for (size_t i = 0; i < list.nentries; i++)
            if (strcmp(list.entries[i].key, key) == 0)
                mtime = list.entries[i].mtime;
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (list.cursor[0]);
    backend_list_reset(&list);
    if (r == 0)
        r = replay_del(rp, key);
    /* The server's time of the put against the middle of the local times around it. */
    *timed = mtime != 0;
    *skew = mtime ? (before + (int64_t)time(NULL)) / 2 - mtime : 0;
    return r;
}

unsigned recovery_own_writer(const struct packer_resume *resume)
{
    return DB_PACK_WIDX(resume->next_seq);
}

/* This daemon's object under writers/, put once: the others know of it before its first pack. */
static int register_writer(struct replay *rp)
{
    char key[BACKEND_MAX_KEY], text[256], host[128] = "";
    int n, r;

    gethostname(host, sizeof(host) - 1);
    for (char *c = host; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    snprintf(key, sizeof(key), RECOVERY_WRITERS_DIR "%016" PRIx64, rp->rv.writer);
    n = snprintf(text, sizeof(text), "cairn writer %016" PRIx64 "\nhost %s\n", rp->rv.writer, host);
    r = replay_put(rp, key, text, (size_t)n, BACKEND_PUT_CREATE);
    if (r == BACKEND_E_EXISTS)
        return 0;
    if (r != 0)
        log_error("replay: cannot put %s: %s", key,
                  r < 0 ? strerror(-r) : "the backend is unavailable");
    return r;
}

/* The keys, before anything is written: a wrong passphrase changes nothing. 0 or negative errno. */
static int open_keys(struct replay *rp)
{
    int r = keyring_open(rp);

    /* keyring.c has said why it refused; anything else is said here. */
    if (r != 0 && r != -EKEYREJECTED && r != -ENOKEY && r != -EPERM)
        log_error("keys: %s", r < 0 ? strerror(-r) : "the backend is unavailable");
    return r < 0 ? r : r ? -EIO : 0;
}

int recovery_open_keys(const struct recovery_parts *parts)
{
    struct replay *rp = calloc(1, sizeof(*rp));
    int r;

    if (!rp)
        return -ENOMEM;
    rp->rv = *parts;
    rp->rv.encryption = RECOVERY_ENC_UNSET;
    r = open_keys(rp);
    free(rp);
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
    if ((r = open_keys(rp)) != 0) {
        free(rp);
        return r;
    }
    /* This daemon's writer first: its packs are numbered under its index. */
    r = replay_pack_number(rp, parts->writer, 1, &resume->next_seq);
    rp->own_widx = DB_PACK_WIDX(resume->next_seq);
    if (r == 0)
        r = register_writer(rp);
    /* A database that knows no pack yet is made from the bucket now. */
    struct db_pack *known = NULL;
    size_t nknown = 0;
    if (r == 0 && (r = db_packs(parts->db, &known, &nknown)) == 0)
        free(known);
    if (r == 0)
        r = replay_packs(rp, resume);
    int64_t skew = 0;
    bool conditional = false, timed = false;
    if (r == 0 && (r = probe_bucket(rp, &skew, &conditional, &timed)) == 0) {
        log_info("bucket: create-only puts are %s; this machine's clock is %lld s %s its server's",
                 conditional ? "refused when the object exists"
                             : "not refused (If-None-Match is ignored)",
                 (long long)llabs(skew), skew >= 0 ? "ahead of" : "behind");
        /*
         * Entry times order the bucket's history (README): once it has other
         * writers, a clock far off is refused.
         */
        if (timed && parts->max_clock_skew_s && shared_bucket(rp) &&
            llabs(skew) > (int64_t)parts->max_clock_skew_s) {
            log_error("this machine's clock is %lld s off the bucket server's; at most %llu s "
                      "([store] max_clock_skew) is allowed, or the journal's order would follow a "
                      "wrong clock",
                      (long long)llabs(skew), (unsigned long long)parts->max_clock_skew_s);
            r = -ERANGE;
        }
    }
    if (r == 0)
        r = replay_events(rp);
    if (r == 0)
        r = replay_marks(rp, rebuild || parts->fresh_db || nknown == 0);
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
    if (r != 0 && r != -ESTALE && r != -ERANGE)
        log_error("replay: %s", r < 0 ? strerror(-r) : "the backend is unavailable");
    free(rp->index);
    free(rp->changed);
    free(rp);
    return r < 0 ? r : (r ? -EIO : 0);
}
