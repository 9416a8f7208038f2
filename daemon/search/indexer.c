#include "daemon/search/indexer.h"

#include <errno.h>
#include <sched.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sqlite3.h>

#include "daemon/search/indexer-int.h"
#include "daemon/base/log.h"
#include "daemon/search/fts.h"
#include "daemon/store/store.h"
#include "daemon/format/text.h"
#include "storage/backend.h"
#include "proto/util.h"
static const char schema_sql[] =
    "CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5("
    " name, body, tags, meta, content = '', tokenize = 'unicode61 remove_diacritics 2');"
    "CREATE VIRTUAL TABLE IF NOT EXISTS search_vocab USING fts5vocab(search, 'row');"
    /* What each entry was made of: FTS5 needs exactly that to take it out again. */
    "CREATE TABLE IF NOT EXISTS indexed("
    " doc INTEGER PRIMARY KEY,"
    " gen INTEGER NOT NULL,"
    " hash TEXT NOT NULL,"
    " name TEXT NOT NULL,"
    " tags TEXT NOT NULL,"
    " meta TEXT NOT NULL,"
    " body_len INTEGER NOT NULL);"
    "PRAGMA user_version = 1;";

static void on_wake(uv_idle_t *h);
static void batch_done(struct ix_batch *b);

static void *ix_thread(void *arg)
{
    struct indexer *ix = arg;

    /*
     * Lowering one's own priority needs no privilege; failing to is harmless.
     * SCHED_IDLE: any other runnable thread of the machine preempts it at
     * once (a nice value only weighs it less); the nice value stays for a
     * kernel without that policy.
     */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), IX_NICE);
    (void)sched_setscheduler(0, SCHED_IDLE, &(struct sched_param){0});
    pthread_mutex_lock(&ix->mu);
    for (;;) {
        while (!ix->todo && !ix->stop)
            pthread_cond_wait(&ix->cv, &ix->mu);
        if (ix->stop)
            break;
        struct ix_batch *b = ix->todo;
        ix->todo = NULL;
        pthread_mutex_unlock(&ix->mu);
        ix_batch_work(b);
        pthread_mutex_lock(&ix->mu);
        ix->finished = b;
        uv_async_send(&ix->finished_async);
    }
    pthread_mutex_unlock(&ix->mu);
    return NULL;
}

static void on_finished(uv_async_t *h)
{
    struct indexer *ix = h->data;
    struct ix_batch *b;

    pthread_mutex_lock(&ix->mu);
    b = ix->finished;
    ix->finished = NULL;
    pthread_mutex_unlock(&ix->mu);
    if (b) {
        uv_unref((uv_handle_t *)&ix->finished_async);
        batch_done(b);
    }
}

int indexer_new(struct indexer **out, uv_loop_t *loop, struct store *st, struct db *db,
                const char *path, size_t max_text, struct fts *fts)
{
    struct indexer *ix = calloc(1, sizeof(*ix));
    char *attach;
    int r = -EIO;

    if (!ix || !(ix->path = strdup(path))) {
        free(ix);
        return -ENOMEM;
    }
    ix->loop = loop;
    ix->st = st;
    ix->db = db;
    ix->fts = fts;
    ix->max_text = max_text;
    ix->catch_up = ix->removals = ix->first_catch_up = true;
    const char *hold = getenv("CAIRN_TEST_INDEX_HOLD_MS");
    ix->test_hold_ms = hold ? (unsigned)strtoul(hold, NULL, 10) : 0;
    if (sqlite3_open_v2(path, &ix->sql,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        log_error("search index %s: %s", path, ix->sql ? sqlite3_errmsg(ix->sql) : "cannot open");
        goto fail;
    }
    sqlite3_busy_timeout(ix->sql, 10000);
    /* Derived data: NORMAL keeps it consistent after a crash; what it lost is redone. */
    if (ix_exec(ix->sql, "PRAGMA journal_mode=WAL") < 0 ||
        ix_exec(ix->sql, backend_sync_disabled() ? "PRAGMA synchronous=OFF"
                                                 : "PRAGMA synchronous=NORMAL") < 0 ||
        ix_exec(ix->sql, schema_sql) < 0)
        goto fail;
    char hashsize[80];
    snprintf(hashsize, sizeof(hashsize), "INSERT INTO search(search, rank) VALUES('hashsize', %u)",
             IX_HASH_BYTES);
    if (ix_exec(ix->sql, hashsize) < 0)
        goto fail;
    attach = sqlite3_mprintf("ATTACH 'file:%q?mode=ro' AS meta_db", db_path(db));
    if (!attach) {
        r = -ENOMEM;
        goto fail;
    }
    r = ix_exec(ix->sql, attach);
    sqlite3_free(attach);
    if (r < 0)
        goto fail;
    pthread_mutex_init(&ix->mu, NULL);
    pthread_cond_init(&ix->cv, NULL);
    if ((r = -pthread_create(&ix->thread, NULL, ix_thread, ix)) < 0) {
        log_error("search index: cannot start its thread: %s", strerror(-r));
        goto fail;
    }
    uv_idle_init(loop, &ix->wake);
    uv_timer_init(loop, &ix->gather);
    uv_async_init(loop, &ix->finished_async, on_finished);
    /* Like queued work, it keeps the loop running only while a batch runs. */
    uv_unref((uv_handle_t *)&ix->finished_async);
    ix->wake.data = ix->gather.data = ix->finished_async.data = ix;
    ix->open_handles = 3;
    /*
     * The first catch-up is work like any queued document: a search waits
     * for it. It starts on the loop's first turn, once the store is whole.
     */
    ix->queued_seq = 1;
    uv_idle_start(&ix->wake, on_wake);
    *out = ix;
    return 0;
fail:
    sqlite3_close(ix->sql);
    free(ix->path);
    free(ix);
    return r;
}

static void on_handle_closed(uv_handle_t *h)
{
    struct indexer *ix = h->data;
    if (--ix->open_handles > 0)
        return;
    pthread_mutex_destroy(&ix->mu);
    pthread_cond_destroy(&ix->cv);
    free(ix->path);
    free(ix);
}

struct indexer *indexer_free(struct indexer *ix)
{
    if (!ix)
        return NULL;
    /* No batch is running: the store has drained its operations. */
    pthread_mutex_lock(&ix->mu);
    ix->stop = true;
    pthread_cond_signal(&ix->cv);
    pthread_mutex_unlock(&ix->mu);
    pthread_join(ix->thread, NULL);
    for (struct ix_item *it = ix->head, *next; it; it = next) {
        next = it->next;
        free(it->text);
        free(it);
    }
    for (struct ix_waiter *w = ix->waiters, *next; w; w = next) {
        next = w->next;
        free(w);
    }
    for (int i = 0; i < IX_COUNT_; i++)
        sqlite3_finalize(ix->stmts[i]);
    sqlite3_wal_checkpoint_v2(ix->sql, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
    sqlite3_close(ix->sql);
    uv_close((uv_handle_t *)&ix->wake, on_handle_closed);
    uv_close((uv_handle_t *)&ix->gather, on_handle_closed);
    uv_close((uv_handle_t *)&ix->finished_async, on_handle_closed);
    return NULL;
}

bool indexer_busy(const struct indexer *ix)
{
    return ix->batch != NULL;
}

const char *indexer_path(const struct indexer *ix)
{
    return ix->path;
}

void indexer_get_stats(const struct indexer *ix, struct indexer_stats *out)
{
    *out = ix->stats;
    out->pending = ix->nitems;
}

/* ---- the loop side ---- */

static void kick(struct indexer *ix);
static void kick_soon(struct indexer *ix);

static void set_catch_up(struct indexer *ix)
{
    ix->catch_up = true;
    ix->catch_up_gen++;
}

static void set_removals(struct indexer *ix)
{
    ix->removals = true;
    ix->removals_gen++;
}

/* Calls the waiters whose wait is over; with a failure, all of them. */
static void wake_waiters(struct indexer *ix, int status)
{
    struct ix_waiter **pp = &ix->waiters, *ready = NULL;

    while (*pp) {
        struct ix_waiter *w = *pp;
        if (status != 0 || w->seq <= ix->done_seq) {
            *pp = w->next;
            w->next = ready;
            ready = w;
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        struct ix_waiter *w = ready;
        ready = w->next;
        w->fn(w->ctx, status);
        free(w);
    }
}

static void on_wake(uv_idle_t *h)
{
    struct indexer *ix = h->data;
    uv_idle_stop(h);
    wake_waiters(ix, 0);
    kick(ix);
}

static int cleanup_apply(struct db_txn *txn, struct db_write *w)
{
    struct ix_batch *b = container_of(w, struct ix_batch, cleanup);
    for (size_t i = 0; i < b->nremoved; i++) {
        int r = db_txn_removal_done(txn, b->removed[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

static void batch_end(struct ix_batch *b)
{
    struct indexer *ix = b->ix;

    for (struct ix_item *it = b->items, *next; it; it = next) {
        next = it->next;
        free(it->text);
        free(it);
    }
    free(b->removed);
    free(b);
    ix->batch = NULL;
    wake_waiters(ix, 0);
    kick_soon(ix);
}

static void cleanup_done(struct db_write *w)
{
    batch_end(container_of(w, struct ix_batch, cleanup));
}

static void batch_done(struct ix_batch *b)
{
    struct indexer *ix = b->ix;

    store_op_end(ix->st, &b->op);
    if (b->status != 0) {
        if (b->status == IX_E_REBUILD)
            ix->rebuild = ix->first_catch_up = true;
        else
            log_error("search index: a batch failed (%s); it is retried",
                      b->status < 0 ? strerror(-b->status) : "damaged text in the store");
        /* Its work is found again by scanning the database. */
        set_catch_up(ix);
        set_removals(ix);
        b->nremoved = 0;
        if (b->status != IX_E_REBUILD) {
            /* Those waiting learn of it instead of waiting for a retry that may fail again. */
            ix->retry_ms = ix->retry_ms ? ix->retry_ms * 2 : IX_RETRY_MS;
            if (ix->retry_ms > IX_RETRY_MAX_MS)
                ix->retry_ms = IX_RETRY_MAX_MS;
            wake_waiters(ix, -EIO);
        }
    } else {
        ix->retry_ms = 0;
        if (b->rebuild)
            ix->rebuild = false;
        ix->stats.batches++;
        ix->stats.indexed += b->nindexed;
        ix->stats.removed += b->nremoved;
        if (b->nindexed || b->nremoved)
            fts_changed(ix->fts);
        if (b->catch_up && !b->more_catch_up && b->catch_up_gen == ix->catch_up_gen)
            ix->catch_up = false;
        if (b->removals && !b->more_removals && b->removals_gen == ix->removals_gen)
            ix->removals = false;
        if (b->first)
            ix->first_catch_up = false;
        /* Everything queued before the batch began is in, unless work was left over. */
        if (b->target && !ix->catch_up && !ix->removals && b->target > ix->done_seq)
            ix->done_seq = b->target;
    }
    if (b->nremoved > 0) {
        b->cleanup.apply = cleanup_apply;
        b->cleanup.done = cleanup_done;
        db_write(ix->db, &b->cleanup);
        return;
    }
    batch_end(b);
}

static void batch_run(struct ix_batch *b)
{
    struct indexer *ix = b->ix;

    b->op.retried = true;
    store_op_begin(ix->st, &b->op);
    uv_ref((uv_handle_t *)&ix->finished_async);
    pthread_mutex_lock(&ix->mu);
    ix->todo = b;
    pthread_cond_signal(&ix->cv);
    pthread_mutex_unlock(&ix->mu);
}

static void on_gather(uv_timer_t *t)
{
    kick(t->data);
}

/* Starts a batch now if it is full or awaited, else once IX_GATHER_MS have passed. */
static void kick_soon(struct indexer *ix)
{
    if (ix->retry_ms) {
        /* The last batch failed: the next one waits (a search starts it at once). */
        if (!ix->batch && !uv_is_active((uv_handle_t *)&ix->gather))
            uv_timer_start(&ix->gather, on_gather, ix->retry_ms, 0);
        return;
    }
    if (ix->waiters || ix->catch_up || ix->removals || ix->nitems >= IX_BATCH_DOCS ||
        ix->text_bytes >= IX_BATCH_TEXT) {
        kick(ix);
        return;
    }
    /*
     * Only documents waiting are gathered. A batch that ends with nothing
     * left must not arm the timer: its empty turn kept the loop alive, and
     * so delayed a stopping daemon, for IX_GATHER_MS after every batch.
     */
    if (ix->head && !ix->batch && !uv_is_active((uv_handle_t *)&ix->gather))
        uv_timer_start(&ix->gather, on_gather, IX_GATHER_MS, 0);
}

static void kick(struct indexer *ix)
{
    struct ix_batch *b;
    struct ix_item **tail;
    size_t n = 0, text = 0;

    if (ix->batch || (!ix->head && !ix->catch_up && !ix->removals))
        return;
    uv_timer_stop(&ix->gather);
    if (!(b = calloc(1, sizeof(*b)))) {
        log_error("search index: out of memory; indexing waits");
        return;
    }
    b->ix = ix;
    b->catch_up = ix->catch_up;
    b->removals = ix->removals;
    b->catch_up_gen = ix->catch_up_gen;
    b->removals_gen = ix->removals_gen;
    b->first = ix->first_catch_up && ix->catch_up;
    b->rebuild = b->first && ix->rebuild;
    tail = &b->items;
    while (ix->head && n < IX_BATCH_DOCS && text < IX_BATCH_TEXT) {
        struct ix_item *it = ix->head;
        ix->head = it->next;
        it->next = NULL;
        *tail = it;
        tail = &it->next;
        n++;
        text += it->len;
        ix->nitems--;
        ix->text_bytes -= it->len;
    }
    if (!ix->head)
        ix->tail = NULL;
    b->target = ix->head ? 0 : ix->queued_seq;
    ix->batch = b;
    batch_run(b);
}

void indexer_queue(struct indexer *ix, int64_t rowid, char *text, size_t len)
{
    struct ix_item *it;

    ix->queued_seq++;
    if (ix->nitems >= IX_QUEUE_MAX) {
        /* Too much waiting: forget the queue, the database says what is pending. */
        for (it = ix->head; it;) {
            struct ix_item *next = it->next;
            free(it->text);
            free(it);
            it = next;
        }
        ix->head = ix->tail = NULL;
        ix->nitems = ix->text_bytes = 0;
        set_catch_up(ix);
    }
    if (ix->catch_up) {
        /*
         * The database scan finds it, but only a scan that starts after its
         * commit: a batch already scanning must not end catch-up mode.
         */
        free(text);
        set_catch_up(ix);
        kick(ix);
        return;
    }
    if (!(it = calloc(1, sizeof(*it)))) {
        free(text);
        set_catch_up(ix);
        kick(ix);
        return;
    }
    it->rowid = rowid;
    if (text && ix->text_bytes + len <= IX_QUEUE_TEXT) {
        it->text = text;
        it->len = len;
        ix->text_bytes += len;
    } else {
        free(text); /* read back from the store when its turn comes */
    }
    if (ix->tail)
        ix->tail->next = it;
    else
        ix->head = it;
    ix->tail = it;
    ix->nitems++;
    kick_soon(ix);
}

void indexer_removed(struct indexer *ix)
{
    ix->queued_seq++;
    set_removals(ix);
    kick(ix);
}

int indexer_wait(struct indexer *ix, indexer_wait_fn *fn, void *ctx)
{
    struct ix_waiter *w = calloc(1, sizeof(*w));

    if (!w)
        return -ENOMEM;
    w->seq = ix->queued_seq;
    w->fn = fn;
    w->ctx = ctx;
    w->next = ix->waiters;
    ix->waiters = w;
    if (w->seq <= ix->done_seq)
        uv_idle_start(&ix->wake, on_wake);
    else
        kick(ix); /* what it waits for may be gathering */
    return 0;
}
