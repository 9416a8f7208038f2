#pragma once

/*
 * The search index: a database of its own (search.db beside cairn.db),
 * derived entirely from the metadata database and the store, kept in step
 * by one job at a time on the worker pool, so indexing runs beside adds
 * instead of inside their commits.
 *
 * An FTS5 table without content holds the index; the text itself is only in
 * the store. What each document was indexed with (its names, tags and
 * metadata, and how many bytes of its text) is kept in `indexed`, so its
 * entry can be removed exactly later: FTS5 needs the original tokens, and
 * the text is read back from the store for that.
 *
 * An add is acknowledged before it is indexed. What is promised instead:
 * a search sees every add and delete acknowledged before the search
 * arrived (it waits for the indexer to reach them). The index never gets
 * ahead of the durable metadata: before a batch is indexed, the metadata
 * commits it covers are synced. After a crash, documents whose index entry
 * is missing or stale are found at start and indexed again.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct db;
struct fts;
struct store;
struct indexer;

struct indexer_stats {
    uint64_t indexed, removed, pending, batches;
};

/* `fts` is told whenever a batch changed the index (fts_changed). */
int indexer_new(struct indexer **out, uv_loop_t *loop, struct store *st, struct db *db,
                const char *path, size_t max_text, struct fts *fts);
/* Only when idle (indexer_busy() false). */
struct indexer *indexer_free(struct indexer *ix);
bool indexer_busy(const struct indexer *ix);
const char *indexer_path(const struct indexer *ix);

/*
 * A document was created, or its names, tags or metadata changed (after its
 * commit). `text`, if any, is its content to index, handed over (malloc'd).
 */
void indexer_queue(struct indexer *ix, int64_t rowid, char *text, size_t len);
/* A document was deleted (after its commit, which left a removal row). */
void indexer_removed(struct indexer *ix);

/*
 * Calls fn once everything queued before now is indexed (at once, from a
 * later loop turn, when nothing is pending), with status 0; or, when a batch
 * fails (the index is retried in the background, less and less often), with
 * a negative errno. Returns 0, or -ENOMEM.
 */
typedef void indexer_wait_fn(void *ctx, int status);
int indexer_wait(struct indexer *ix, indexer_wait_fn *fn, void *ctx);

void indexer_get_stats(const struct indexer *ix, struct indexer_stats *out);
