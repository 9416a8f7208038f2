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
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/meta/db.h"
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

struct refresh {
    struct recovery_parts parts;
    uint64_t interval_ms;
    unsigned own_widx;
    uv_timer_t timer;
    struct replay_bridge bridge; /* its async: the refresh thread's calls */
    uv_async_t done_async;       /* a pass ended */
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
    /* Loop thread. */
    struct refresh_waiter *waiters; /* for the pass that runs now */
    struct refresh_waiter *queued;  /* asked during a pass: for the next one */
    struct refresh_stats stats;
};

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
    return r;
}

static int pass(struct refresh *rf, struct replay *rp)
{
    int r = list_writers(rf, rp);

    for (size_t i = 0; r == 0 && i < rf->nwriters; i++) {
        struct refresh_writer w = rf->writers[i];
        if (w.widx == rf->own_widx || w.widx == 0)
            continue;
        r = list_packs_of(rf, rp, &w);
        if (r == 0)
            w.seen_ms = uv_hrtime() / 1000000;
        pthread_mutex_lock(&rf->mu);
        rf->writers[i] = w;
        pthread_mutex_unlock(&rf->mu);
    }
    return r == 0 ? replay_events(rp) : r;
}

static void *refresh_thread(void *arg)
{
    struct refresh *rf = arg;

    pthread_mutex_lock(&rf->mu);
    for (;;) {
        while (!rf->want && !rf->stop)
            pthread_cond_wait(&rf->cv, &rf->mu);
        if (rf->stop)
            break;
        rf->want = false;
        rf->running = true;
        pthread_mutex_unlock(&rf->mu);
        struct replay *rp = calloc(1, sizeof(*rp));
        int r = -ENOMEM;
        if (rp) {
            rp->rv = rf->parts;
            rp->bridge = &rf->bridge;
            rp->own_widx = rf->own_widx;
            r = pass(rf, rp);
        }
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

static void on_done(uv_async_t *h)
{
    struct refresh *rf = h->data;
    struct refresh_waiter *w;
    struct replay *rp;
    int r;

    pthread_mutex_lock(&rf->mu);
    if (!rf->finished) {
        pthread_mutex_unlock(&rf->mu);
        return;
    }
    rp = rf->result;
    r = rf->result_status;
    rf->result = NULL;
    rf->finished = false;
    pthread_cond_signal(&rf->cv);
    pthread_mutex_unlock(&rf->mu);
    rf->stats.passes++;
    if (r == 0) {
        rf->stats.last_ok_ms = uv_hrtime() / 1000000;
        rf->stats.added += rp->added;
        rf->stats.deleted += rp->deleted;
        rf->stats.refused += rp->refused;
        if (rp->nchanged || rp->removed)
            store_external_changes(rf->parts.st, rp->changed, rp->nchanged, rp->removed);
        /* Entries written from now on come after what the other writers wrote. */
        store_set_entry_floor(rf->parts.st, rp->max_time);
    } else {
        rf->stats.failures++;
        log_warn("refresh: %s", r < 0 ? strerror(-r) : "the backend is unavailable");
    }
    if (rp) {
        free(rp->index);
        free(rp->changed);
        free(rp);
    }
    w = rf->waiters;
    rf->waiters = rf->queued;
    rf->queued = NULL;
    if (rf->waiters)
        start_pass(rf);
    while (w) {
        struct refresh_waiter *next = w->next;
        w->cb(w->ctx, r < 0 ? r : r ? -EIO : 0);
        free(w);
        w = next;
    }
}

int refresh_new(struct refresh **out, const struct recovery_parts *parts, unsigned own_widx,
                uint64_t interval_ms)
{
    struct refresh *rf = calloc(1, sizeof(*rf));
    int r;

    if (!rf)
        return -ENOMEM;
    rf->parts = *parts;
    rf->own_widx = own_widx;
    rf->interval_ms = interval_ms;
    pthread_mutex_init(&rf->mu, NULL);
    pthread_cond_init(&rf->cv, NULL);
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
    if (interval_ms)
        uv_timer_start(&rf->timer, on_timer, interval_ms, interval_ms);
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
    if (rf->result) {
        free(rf->result->index);
        free(rf->result->changed);
        free(rf->result);
    }
    uv_close((uv_handle_t *)&rf->timer, on_closed);
    uv_close((uv_handle_t *)&rf->bridge.async, on_closed);
    uv_close((uv_handle_t *)&rf->done_async, on_closed);
    return NULL;
}

bool refresh_busy(const struct refresh *rf)
{
    return rf->waiters || rf->running || rf->finished;
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
