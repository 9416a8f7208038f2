#pragma once

/* The search indexer's state (indexer.c: the loop side; indexer-work.c: the batch job). */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>
#include <uv.h>

#include "daemon/meta/db.h"
#include "daemon/search/indexer.h"
#include "daemon/store/store.h"

/* Documents a batch takes from the queue or finds pending in the database. */
#define IX_BATCH_DOCS 512
/* Text a batch takes from the queue. */
#define IX_BATCH_TEXT (32u * 1024 * 1024)
/*
 * What FTS5 holds of a transaction's terms before it writes them out as a
 * segment (its 'hashsize', 1 MiB unless set): at 8 MiB a batch of 512
 * documents of 8 KiB becomes one segment instead of four or five, which
 * later merges would copy again. Measured on 2 CPUs, 20,200 such adds at
 * 16 clients: the indexer's CPU 244 -> 189 us a document, the index 3.5%
 * larger, searches as fast. Memory: the indexer's thread holds about this
 * much of pending terms at most (FTS5 writes the segment once it is passed).
 */
#define IX_HASH_BYTES (8u * 1024 * 1024)
/* Text held for queued documents; past this, text is read back from the store. */
#define IX_QUEUE_TEXT (64u * 1024 * 1024)
/* Queued documents; past this the queue is dropped and the database is scanned instead. */
#define IX_QUEUE_MAX 100000
/*
 * A batch outcome: an entry's text cannot be read back any more (damage in
 * the store), so it cannot be taken out exactly; the index is made anew.
 */
#define IX_E_REBUILD 100
/*
 * A few documents wait this long for more to join their batch: every commit
 * of the index costs a flush and, in time, merges, so a bulk load indexes
 * in a few large batches. Anyone waiting for the index (a search, gc)
 * starts the batch at once.
 */
#define IX_GATHER_MS 250
/*
 * Indexing is background work: its thread runs under SCHED_IDLE (and at
 * this nice value, where that policy is refused), so adds and reads take the
 * CPU first and the index catches up when it is free. Measured with 8
 * clients adding durably on 2 CPUs: 8% more adds/s than at nice 10 alone.
 */
#define IX_NICE 10
/* After a failed batch the next waits this long, doubling up to the maximum. */
#define IX_RETRY_MS 1000
#define IX_RETRY_MAX_MS 30000

enum ix_stmt {
    IX_INSERT,
    IX_DELETE,
    IX_GET,
    IX_PUT,
    IX_DROP,
    IX_PENDING,
    IX_STALE,
    IX_COUNT_,
};

struct ix_item {
    int64_t rowid;
    char *text;
    size_t len;
    struct ix_item *next;
};

struct ix_waiter {
    uint64_t seq;
    indexer_wait_fn *fn;
    void *ctx;
    struct ix_waiter *next;
};

struct ix_batch {
    struct indexer *ix;
    struct store_op op;
    struct db_write cleanup;
    struct ix_item *items;
    bool catch_up, removals, first, rebuild;
    uint64_t catch_up_gen, removals_gen;
    uint64_t target; /* queued_seq when the batch took the whole queue, else 0 */
    /* Results. */
    int status;
    bool more_catch_up, more_removals;
    int64_t *removed;
    size_t nremoved;
    uint64_t nindexed;
};

struct indexer {
    uv_loop_t *loop;
    struct store *st;
    struct db *db;
    struct fts *fts; /* told when a batch changed the index */
    char *path;
    size_t max_text;
    sqlite3 *sql; /* used by one batch job at a time */
    sqlite3_stmt *stmts[IX_COUNT_];
    /* Loop thread. */
    struct ix_item *head, *tail;
    size_t nitems, text_bytes;
    bool catch_up, removals, first_catch_up, rebuild;
    /* Bumped whenever catch_up or removals is set: a batch clears only what it saw set. */
    uint64_t catch_up_gen, removals_gen;
    uint64_t queued_seq, done_seq;
    struct ix_waiter *waiters;
    struct ix_batch *batch;
    uv_idle_t wake;
    uv_timer_t gather;
    uint64_t retry_ms; /* set after a failed batch: the next one waits this long */
    uv_async_t finished_async;
    int open_handles;
    struct indexer_stats stats;
    /* The indexing thread: runs one batch at a time, handed over under `mu`. */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ix_batch *todo, *finished;
    bool stop;
    /* CAIRN_TEST_INDEX_HOLD_MS: tests hold a batch's transaction open this long. */
    unsigned test_hold_ms;
};

int ix_exec(sqlite3 *c, const char *sql);
/* Runs a batch on the indexer's connection (its thread). */
void ix_batch_work(struct ix_batch *b);
