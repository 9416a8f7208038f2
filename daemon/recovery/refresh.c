/*
 * Refresh (recovery.h): while the daemon serves, a thread of its own looks
 * in the bucket for what the other writers wrote since it last looked, and
 * brings the database up to it with replay's own steps, the loop doing its
 * requests and commits for it through the bridge (replay-loop.c).
 *
 * A pass lists the writers (writers/, one object each), then per writer the
 * packs after the newest it knows, less a window: a writer has several puts
 * in flight, and a later pack may land before an earlier one. Its new
 * sealed packs are read like any at start (never changed), and the journal
 * entries they bring are applied in the journal's order. What the entries
 * changed goes to the store and the search index on the loop thread.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/base/crash.h"
#include "daemon/base/log.h"
#include "daemon/meta/db.h"
#include "daemon/pack/packer.h"
#include "daemon/recovery/replay-int.h"
#include "daemon/store/store.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* A writer's packs listed again below the newest it knows, for puts that land late. */
#define REFRESH_WINDOW 32
/* Keys a listing page asks for: a writer's new packs, and where the next writer's start. */
#define REFRESH_PAGE 256

struct refresh_waiter {
    refresh_cb *cb;
    void *ctx;
    struct refresh_waiter *next;
};

/* Work for the thread besides passes: the gc's steps in the bucket (marks.c). */
enum task_kind { TASK_LEASE_TAKE, TASK_LEASE_DROP, TASK_PUBLISH, TASK_KEYS };

struct refresh_task {
    enum task_kind kind;
    uint64_t gen;
    struct recovery_key_job *job; /* TASK_KEYS */
    refresh_cb *cb;
    void *ctx;
    int status;
    struct refresh_task *next;
};

struct refresh {
    struct recovery_parts parts;
    uint64_t interval_ms;
    char key_used[RECOVERY_KEY_ID_LEN + 1]; /* the key this daemon opened the store with */
    unsigned own_widx;
    uv_timer_t timer;
    struct replay_bridge bridge; /* its async: the refresh thread's calls */
    uv_async_t done_async;       /* a pass or a task ended */
    int open_handles;
    /* The thread, and what it is asked and answers, under mu. */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool want, stop, running, finished;
    struct replay *result; /* the pass that finished, for the loop */
    int result_status;
    struct refresh_writer *writers; /* the refresh thread's while it runs */
    size_t nwriters;
    struct refresh_task *tasks, *tasks_done; /* asked, and done (newest first) */
    struct refresh_marks marks;              /* the thread's */
    struct packer *pk;                       /* goes shared once another writer is seen */
    /* What the loop may read of marks, under mu. */
    bool lease_held;
    uint64_t lease_renewed_ms, lease_holder;
    uint64_t *ready;
    size_t nready;
    bool solo, stale;
    /* Loop thread. */
    struct refresh_waiter *waiters; /* for the pass that runs now */
    struct refresh_waiter *queued;  /* asked during a pass: for the next one */
    struct refresh_stats stats;
};

static uint64_t mono_ms(void)
{
    return uv_hrtime() / 1000000;
}

/* What the loop is told: the backend's troubles are the store's "unavailable". */
static int loop_status(int r)
{
    bool key_refusal = r >= RECOVERY_KEY_E_PLAIN && r <= RECOVERY_KEY_E_REFUSED;

    return r > 0 && r != REFRESH_E_BUSY && !key_refusal ? STORE_E_UNAVAILABLE : r;
}

/* ---- the pass (the refresh thread) ---- */

static struct refresh_writer *writer_of(struct refresh *rf, uint64_t id)
{
    for (size_t i = 0; i < rf->nwriters; i++)
        if (rf->writers[i].id == id)
            return &rf->writers[i];
    return NULL;
}

/* A writer the pass met: known from now on (under mu, which stats read under). */
static int writer_add(struct refresh *rf, struct replay *rp, uint64_t id)
{
    uint64_t pack;
    int r;

    if (writer_of(rf, id))
        return 0;
    if ((r = replay_pack_number(rp, id, 1, &pack)) < 0)
        return r;
    pthread_mutex_lock(&rf->mu);
    struct refresh_writer *grown = realloc(rf->writers, (rf->nwriters + 1) * sizeof(*grown));
    if (grown) {
        rf->writers = grown;
        rf->writers[rf->nwriters++] = (struct refresh_writer){.id = id, .widx = DB_PACK_WIDX(pack)};
    }
    pthread_mutex_unlock(&rf->mu);
    return grown ? 0 : -ENOMEM;
}

/* The writers of the bucket, from their objects under writers/. */
static int list_writers(struct refresh *rf, struct replay *rp)
{
    struct backend_list list = {0};
    int r = 0;

    do {
        snprintf(list.req.key, sizeof(list.req.key), RECOVERY_WRITERS_DIR);
        if ((r = replay_list(rp, &list)) != 0)
            break;
        for (size_t i = 0; r == 0 && i < list.nentries; i++) {
            uint64_t id;
            if (recovery_writer_key_parse(list.entries[i].key, &id) == 0)
                r = writer_add(rf, rp, id);
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (r == 0 && list.cursor[0]);
    backend_list_reset(&list);
    return r;
}

/*
 * The packs of a listing page that will be read, read ahead all at once
 * (replay-prefetch.c): one round trip for the window instead of a few for
 * each pack in turn. Appending backends read locally: nothing to gain.
 * Returns the index of the first entry past the window.
 */
static size_t prefetch_page(struct replay *rp, const struct backend_list *list, size_t from,
                            const char *prefix, size_t plen, const struct refresh_writer *w)
{
    uint64_t seqs[REPLAY_PREFETCH_WINDOW], sizes[REPLAY_PREFETCH_WINDOW];
    size_t n = 0, i = from;

    if (backend_has(rp->rv.be, BACKEND_CAP_APPEND))
        return list->nentries;
    for (; i < list->nentries && n < REPLAY_PREFETCH_WINDOW; i++) {
        const struct backend_entry *e = &list->entries[i];
        uint64_t writer, seq, known;
        if (strncmp(e->key, prefix, plen) != 0)
            break;
        if (pack_key_parse(e->key, &writer, &seq) < 0 || writer != w->id)
            continue;
        if (db_pack_size(rp->rv.db, DB_PACK_NUMBER(w->widx, seq), &known) == 0 && known == e->size)
            continue;
        seqs[n] = DB_PACK_NUMBER(w->widx, seq);
        sizes[n++] = e->size;
    }
    if (n < 2 || replay_prefetch_start(rp, seqs, sizes, n) < 0)
        replay_prefetch_free(rp); /* read as it goes: only slower */
    return i;
}

/* One writer's packs after the newest it knows (less the window): the new ones read. */
static int list_packs_of(struct refresh *rf, struct replay *rp, struct refresh_writer *w)
{
    struct backend_list list = {.max_keys = REFRESH_PAGE};
    char prefix[PACK_KEY_MAX];
    size_t plen;
    bool past = false;
    int r = 0;

    pack_key(prefix, sizeof(prefix), w->id, 0);
    plen = strlen(prefix) - 16; /* "packs/<writer>-" */
    if (w->newest > REFRESH_WINDOW)
        pack_key(list.cursor, sizeof(list.cursor), w->id, w->newest - REFRESH_WINDOW);
    else
        snprintf(list.cursor, sizeof(list.cursor), "%.*s", (int)plen, prefix);
    do {
        snprintf(list.req.key, sizeof(list.req.key), PACK_KEY_PREFIX);
        if ((r = replay_list(rp, &list)) != 0)
            break;
        size_t ahead = 0;
        for (size_t i = 0; r == 0 && !past && i < list.nentries; i++) {
            const struct backend_entry *e = &list.entries[i];
            uint64_t writer, seq, pack, known;
            if (strncmp(e->key, prefix, plen) != 0) {
                past = true; /* the next writer's: the listing is in key order */
                break;
            }
            if (pack_key_parse(e->key, &writer, &seq) < 0 || writer != w->id)
                continue;
            pack = DB_PACK_NUMBER(w->widx, seq);
            if (db_pack_size(rp->rv.db, pack, &known) == 0 && known == e->size) {
                if (seq > w->newest)
                    w->newest = seq;
                continue;
            }
            /* The next window of packs to read, read ahead when this one is used up. */
            if (i >= ahead)
                ahead = prefetch_page(rp, &list, i, prefix, plen, w);
            /* Only sealed packs get a row (an open one is read once it is sealed). */
            r = replay_pack_listed(rp, pack, e->size, NULL, false, NULL);
            if (r == 0 && db_pack_size(rp->rv.db, pack, &known) == 0) {
                w->packs++;
                if (seq > w->newest)
                    w->newest = seq;
            }
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (r == 0 && !past && list.cursor[0]);
    backend_list_reset(&list);
    replay_prefetch_free(rp);
    return r;
}

/* Under mu: what the loop may read of the marks' state. */
static void marks_show(struct refresh *rf)
{
    struct refresh_marks *mk = &rf->marks;

    rf->lease_held = mk->lease_held;
    rf->lease_renewed_ms = mk->lease_renewed_ms;
    rf->lease_holder = mk->lease_holder;
    rf->solo = mk->solo;
    rf->stale |= mk->stale;
    free(rf->ready);
    rf->ready = NULL;
    rf->nready = 0;
    if (mk->nready && (rf->ready = malloc(mk->nready * sizeof(*rf->ready)))) {
        memcpy(rf->ready, mk->ready, mk->nready * sizeof(*rf->ready));
        rf->nready = mk->nready;
    }
}

static int pass(struct refresh *rf, struct replay *rp)
{
    uint64_t *ids = NULL;
    size_t nids = 0;
    int r = list_writers(rf, rp);

    for (size_t i = 0; r == 0 && i < rf->nwriters; i++) {
        struct refresh_writer w = rf->writers[i];
        if (w.widx == rf->own_widx || w.widx == 0)
            continue;
        r = list_packs_of(rf, rp, &w);
        if (r == 0)
            w.seen_ms = mono_ms();
        pthread_mutex_lock(&rf->mu);
        rf->writers[i] = w;
        pthread_mutex_unlock(&rf->mu);
    }
    /* The other writers' records are in the database, their entries not applied yet. */
    if (r == 0) {
        crash_point("refresh-read");
        r = replay_events(rp);
    }
    if (r == 0)
        crash_point("refresh-applied");
    /* Then the gc objects: a mark names packs only once they are all in the bucket. */
    if (r == 0 && !(ids = malloc((rf->nwriters + 1) * sizeof(*ids))))
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < rf->nwriters; i++)
        ids[nids++] = rf->writers[i].id;
    if (r == 0)
        r = marks_pass(rp, &rf->marks, ids, nids);
    free(ids);
    pthread_mutex_lock(&rf->mu);
    marks_show(rf);
    pthread_mutex_unlock(&rf->mu);
    return r;
}

static struct replay *replay_for(struct refresh *rf)
{
    struct replay *rp = calloc(1, sizeof(*rp));

    if (rp) {
        rp->rv = rf->parts;
        rp->bridge = &rf->bridge;
        rp->own_widx = rf->own_widx;
    }
    return rp;
}

static void replay_end(struct replay *rp)
{
    if (rp) {
        free(rp->index);
        free(rp->changed);
        free(rp);
    }
}

static int run_task(struct refresh *rf, struct refresh_task *t)
{
    struct replay *rp = replay_for(rf);
    int r = -ENOMEM;

    if (rp) {
        switch (t->kind) {
        case TASK_LEASE_TAKE:
            r = rf->marks.lease_held ? 0 : marks_lease_take(rp, &rf->marks);
            if (r == 0 && llabs(rf->marks.skew_s) > 60)
                log_warn("gc: this machine's clock is %lld s off the bucket server's",
                         (long long)rf->marks.skew_s);
            break;
        case TASK_LEASE_DROP:
            r = marks_lease_drop(rp, &rf->marks);
            break;
        case TASK_PUBLISH:
            r = marks_publish(rp, &rf->marks, t->gen);
            break;
        case TASK_KEYS:
            /* Only this thread reads or changes key_used once the refresh runs. */
            r = keyring_job(rp, t->job, rf->key_used);
            break;
        }
    }
    replay_end(rp);
    return r;
}

/* Under mu: the lease is held and due for renewal, at a third of its time to live. */
static bool renew_due(const struct refresh *rf, uint64_t *at)
{
    const struct refresh_marks *mk = &rf->marks;

    if (!mk->lease_held)
        return false;
    *at = mk->lease_renewed_ms + mk->lease_ttl_ms / 3;
    return mono_ms() >= *at;
}

/* Under mu: waits for work, until `at` (monotonic ms) when not 0. */
static void wait_until(struct refresh *rf, uint64_t at)
{
    struct timespec ts;
    uint64_t now = mono_ms();

    if (!at) {
        pthread_cond_wait(&rf->cv, &rf->mu);
        return;
    }
    if (at <= now)
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (at - now) * 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&rf->cv, &rf->mu, &ts);
}

static void *refresh_thread(void *arg)
{
    struct refresh *rf = arg;
    uint64_t at = 0;

    pthread_mutex_lock(&rf->mu);
    for (;;) {
        while (!rf->want && !rf->stop && !rf->tasks && !renew_due(rf, &at))
            wait_until(rf, rf->marks.lease_held ? at : 0);
        if (rf->stop)
            break;
        if (rf->tasks) {
            struct refresh_task *t = rf->tasks;
            rf->tasks = t->next;
            rf->running = true;
            pthread_mutex_unlock(&rf->mu);
            t->status = run_task(rf, t);
            pthread_mutex_lock(&rf->mu);
            marks_show(rf);
            rf->running = false;
            t->next = rf->tasks_done;
            rf->tasks_done = t;
            uv_async_send(&rf->done_async);
            continue;
        }
        if (renew_due(rf, &at)) {
            struct replay *rp = replay_for(rf);
            pthread_mutex_unlock(&rf->mu);
            if (rp)
                marks_lease_renew(rp, &rf->marks);
            replay_end(rp);
            pthread_mutex_lock(&rf->mu);
            /* A failed renewal is tried again a second later. */
            if (rf->marks.lease_renewed_ms + rf->marks.lease_ttl_ms / 3 <= mono_ms())
                rf->marks.lease_renewed_ms += 1000;
            marks_show(rf);
            continue;
        }
        rf->want = false;
        rf->running = true;
        pthread_mutex_unlock(&rf->mu);
        struct replay *rp = replay_for(rf);
        int r = rp ? pass(rf, rp) : -ENOMEM;
        pthread_mutex_lock(&rf->mu);
        rf->running = false;
        rf->finished = true;
        rf->result = rp;
        rf->result_status = r;
        uv_async_send(&rf->done_async);
        /* The loop takes the result before the next pass starts. */
        while (rf->finished && !rf->stop)
            pthread_cond_wait(&rf->cv, &rf->mu);
    }
    pthread_mutex_unlock(&rf->mu);
    return NULL;
}

/* ---- the loop side ---- */

static void start_pass(struct refresh *rf)
{
    pthread_mutex_lock(&rf->mu);
    rf->want = true;
    pthread_cond_signal(&rf->cv);
    pthread_mutex_unlock(&rf->mu);
}

static void on_timer(uv_timer_t *t)
{
    struct refresh *rf = t->data;

    if (!rf->waiters)
        start_pass(rf);
}

static void on_bridge(uv_async_t *h)
{
    replay_bridge_run(&container_of(h, struct refresh, bridge.async)->bridge);
}

/* Tasks done: their callbacks, oldest first. */
static void tasks_done(struct refresh *rf)
{
    struct refresh_task *t, *order = NULL;

    pthread_mutex_lock(&rf->mu);
    t = rf->tasks_done;
    rf->tasks_done = NULL;
    pthread_mutex_unlock(&rf->mu);
    while (t) {
        struct refresh_task *next = t->next;
        t->next = order;
        order = t;
        t = next;
    }
    while (order) {
        struct refresh_task *next = order->next;
        order->cb(order->ctx, loop_status(order->status));
        free(order);
        order = next;
    }
}

static void on_done(uv_async_t *h)
{
    struct refresh *rf = h->data;
    struct refresh_waiter *w;
    struct replay *rp;
    bool stale;
    int r;

    tasks_done(rf);
    pthread_mutex_lock(&rf->mu);
    if (!rf->finished) {
        pthread_mutex_unlock(&rf->mu);
        return;
    }
    rp = rf->result;
    r = rf->result_status;
    rf->result = NULL;
    rf->finished = false;
    stale = rf->stale;
    pthread_cond_signal(&rf->cv);
    pthread_mutex_unlock(&rf->mu);
    rf->stats.passes++;
    if (r == 0) {
        rf->stats.last_ok_ms = mono_ms();
        rf->stats.added += rp->added;
        rf->stats.deleted += rp->deleted;
        rf->stats.refused += rp->refused;
        if (rp->nchanged || rp->removed)
            store_external_changes(rf->parts.st, rp->changed, rp->nchanged, rp->removed);
        /* Entries written from now on come after what the other writers wrote. */
        store_set_entry_floor(rf->parts.st, rp->max_time);
        /* What the bucket's gc marked is known as of now (store.h). */
        store_set_bucket_seen(rf->parts.st, rf->stats.last_ok_ms);
        pthread_mutex_lock(&rf->mu);
        bool solo = rf->solo;
        pthread_mutex_unlock(&rf->mu);
        if (!solo && rf->pk)
            packer_set_shared(rf->pk);
    } else {
        rf->stats.failures++;
        log_warn("refresh: %s", r < 0 ? strerror(-r) : "the backend is unavailable");
    }
    replay_end(rp);
    w = rf->waiters;
    rf->waiters = rf->queued;
    rf->queued = NULL;
    if (rf->waiters)
        start_pass(rf);
    while (w) {
        struct refresh_waiter *next = w->next;
        w->cb(w->ctx, loop_status(r));
        free(w);
        w = next;
    }
    if (stale && rf->parts.stale)
        rf->parts.stale(rf->parts.stale_ctx);
}

int refresh_new(struct refresh **out, const struct recovery_parts *parts, unsigned own_widx,
                uint64_t interval_ms)
{
    struct refresh *rf = calloc(1, sizeof(*rf));
    int r;

    if (!rf)
        return -ENOMEM;
    rf->parts = *parts;
    if (parts->key_used)
        snprintf(rf->key_used, sizeof(rf->key_used), "%s", parts->key_used);
    rf->own_widx = own_widx;
    /*
     * Marks must be seen well within the grace period, whatever the
     * interval: at least four passes in it.
     */
    rf->interval_ms = parts->gc_grace_ms / 4;
    if (interval_ms && interval_ms < rf->interval_ms)
        rf->interval_ms = interval_ms;
    if (rf->interval_ms == 0)
        rf->interval_ms = 1;
    rf->marks.own = parts->writer;
    rf->marks.grace_ms = parts->gc_grace_ms;
    rf->marks.lease_ttl_ms = refresh_lease_ttl(parts->gc_grace_ms);
    pthread_mutex_init(&rf->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rf->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&rf->bridge.lock, NULL);
    pthread_cond_init(&rf->bridge.cond, NULL);
    uv_timer_init(parts->loop, &rf->timer);
    uv_async_init(parts->loop, &rf->bridge.async, on_bridge);
    uv_async_init(parts->loop, &rf->done_async, on_done);
    rf->timer.data = rf->bridge.async.data = rf->done_async.data = rf;
    rf->open_handles = 3;
    /* None of them keeps the loop alive: a stopping daemon does not wait for the next pass. */
    uv_unref((uv_handle_t *)&rf->timer);
    uv_unref((uv_handle_t *)&rf->bridge.async);
    uv_unref((uv_handle_t *)&rf->done_async);
    *out = rf;
    if ((r = -pthread_create(&rf->thread, NULL, refresh_thread, rf)) < 0)
        return r;
    rf->thread_started = true;
    uv_timer_start(&rf->timer, on_timer, rf->interval_ms, rf->interval_ms);
    return 0;
}

static void on_closed(uv_handle_t *h)
{
    struct refresh *rf = h->data;

    if (--rf->open_handles > 0)
        return;
    pthread_mutex_destroy(&rf->mu);
    pthread_cond_destroy(&rf->cv);
    pthread_mutex_destroy(&rf->bridge.lock);
    pthread_cond_destroy(&rf->bridge.cond);
    free(rf->writers);
    free(rf->ready);
    free(rf->marks.ready);
    free(rf);
}

struct refresh *refresh_free(struct refresh *rf)
{
    if (!rf)
        return NULL;
    if (rf->thread_started) {
        bool running;
        pthread_mutex_lock(&rf->mu);
        rf->stop = true;
        pthread_cond_broadcast(&rf->cv);
        running = rf->running;
        pthread_mutex_unlock(&rf->mu);
        /* A pass that runs needs the loop for its calls: it runs until the pass ends. */
        uv_ref((uv_handle_t *)&rf->bridge.async);
        while (running) {
            uv_run(rf->parts.loop, UV_RUN_NOWAIT);
            pthread_mutex_lock(&rf->mu);
            running = rf->running;
            pthread_mutex_unlock(&rf->mu);
            if (running)
                usleep(1000);
        }
        pthread_join(rf->thread, NULL);
    }
    for (struct refresh_waiter *lists[] = {rf->waiters, rf->queued}, **l = lists; l < lists + 2;
         l++) {
        for (struct refresh_waiter *w = *l, *next; w; w = next) {
            next = w->next;
            w->cb(w->ctx, -ECANCELED);
            free(w);
        }
    }
    replay_end(rf->result);
    rf->result = NULL;
    tasks_done(rf);
    for (struct refresh_task *t = rf->tasks, *next; t; t = next) {
        next = t->next;
        t->cb(t->ctx, -ECANCELED);
        free(t);
    }
    rf->tasks = NULL;
    uv_close((uv_handle_t *)&rf->timer, on_closed);
    uv_close((uv_handle_t *)&rf->bridge.async, on_closed);
    uv_close((uv_handle_t *)&rf->done_async, on_closed);
    return NULL;
}

bool refresh_busy(const struct refresh *rf)
{
    return rf->waiters || rf->running || rf->finished || rf->tasks;
}

int refresh_now(struct refresh *rf, refresh_cb *cb, void *ctx)
{
    struct refresh_waiter *w = calloc(1, sizeof(*w));
    bool idle;

    if (!w)
        return -ENOMEM;
    w->cb = cb;
    w->ctx = ctx;
    pthread_mutex_lock(&rf->mu);
    idle = !rf->running && !rf->finished && !rf->want;
    pthread_mutex_unlock(&rf->mu);
    if (idle && !rf->waiters) {
        w->next = rf->waiters;
        rf->waiters = w;
        start_pass(rf);
    } else {
        /* A pass that started before the ask may have missed what came just before it. */
        w->next = rf->queued;
        rf->queued = w;
    }
    return 0;
}

void refresh_get_stats(struct refresh *rf, struct refresh_stats *out,
                       struct refresh_writer **writers, size_t *nwriters)
{
    *out = rf->stats;
    *writers = NULL;
    *nwriters = 0;
    pthread_mutex_lock(&rf->mu);
    if (rf->nwriters && (*writers = malloc(rf->nwriters * sizeof(**writers)))) {
        memcpy(*writers, rf->writers, rf->nwriters * sizeof(**writers));
        *nwriters = rf->nwriters;
    }
    pthread_mutex_unlock(&rf->mu);
}

uint64_t refresh_last_ok(const struct refresh *rf)
{
    return rf->stats.last_ok_ms;
}

/* ---- the gc's steps in the bucket ---- */

uint64_t refresh_lease_ttl(uint64_t grace_ms)
{
    /* A minute, but never much more than the grace period (tests run with seconds). */
    uint64_t ttl = grace_ms < 60000 ? grace_ms : 60000;
    return ttl < 3000 ? 3000 : ttl;
}

static int task_add(struct refresh *rf, enum task_kind kind, uint64_t gen, refresh_cb *cb,
                    void *ctx)
{
    struct refresh_task *t = calloc(1, sizeof(*t)), **pp;

    if (!t)
        return -ENOMEM;
    *t = (struct refresh_task){.kind = kind, .gen = gen, .cb = cb, .ctx = ctx};
    pthread_mutex_lock(&rf->mu);
    for (pp = &rf->tasks; *pp; pp = &(*pp)->next)
        ;
    *pp = t;
    pthread_cond_signal(&rf->cv);
    pthread_mutex_unlock(&rf->mu);
    return 0;
}

int refresh_keys(struct refresh *rf, struct recovery_key_job *job, refresh_cb *cb, void *ctx)
{
    struct refresh_task *t = calloc(1, sizeof(*t)), **pp;

    if (!t)
        return -ENOMEM;
    *t = (struct refresh_task){.kind = TASK_KEYS, .job = job, .cb = cb, .ctx = ctx};
    pthread_mutex_lock(&rf->mu);
    for (pp = &rf->tasks; *pp; pp = &(*pp)->next)
        ;
    *pp = t;
    pthread_cond_signal(&rf->cv);
    pthread_mutex_unlock(&rf->mu);
    return 0;
}

int refresh_lease_take(struct refresh *rf, refresh_cb *cb, void *ctx)
{
    return task_add(rf, TASK_LEASE_TAKE, 0, cb, ctx);
}

int refresh_lease_drop(struct refresh *rf, refresh_cb *cb, void *ctx)
{
    return task_add(rf, TASK_LEASE_DROP, 0, cb, ctx);
}

int refresh_publish(struct refresh *rf, uint64_t gen, refresh_cb *cb, void *ctx)
{
    return task_add(rf, TASK_PUBLISH, gen, cb, ctx);
}

bool refresh_lease_ok(struct refresh *rf)
{
    bool ok;

    pthread_mutex_lock(&rf->mu);
    ok = rf->lease_held && mono_ms() < rf->lease_renewed_ms + rf->marks.lease_ttl_ms / 2;
    pthread_mutex_unlock(&rf->mu);
    return ok;
}

uint64_t refresh_lease_holder(struct refresh *rf)
{
    uint64_t w;

    pthread_mutex_lock(&rf->mu);
    w = rf->lease_holder;
    pthread_mutex_unlock(&rf->mu);
    return w;
}

int refresh_gc_view(struct refresh *rf, uint64_t **ready, size_t *n, bool *solo)
{
    int r = 0;

    pthread_mutex_lock(&rf->mu);
    *solo = rf->solo;
    *n = 0;
    *ready = malloc((rf->nready ? rf->nready : 1) * sizeof(**ready));
    if (!*ready) {
        r = -ENOMEM;
    } else if (rf->nready) {
        memcpy(*ready, rf->ready, rf->nready * sizeof(**ready));
        *n = rf->nready;
    }
    pthread_mutex_unlock(&rf->mu);
    return r;
}

void refresh_set_packer(struct refresh *rf, struct packer *pk)
{
    rf->pk = pk;
}
