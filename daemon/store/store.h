#pragma once

/*
 * The content store: streams documents in and out of packs on the object
 * backend, and reads records back for the parts above it.
 *
 * An add cuts the incoming bytes into content-defined chunks, hashes them,
 * compresses the ones the store does not hold yet into blocks on worker
 * threads, and hands the blocks, its manifest and its journal entry to the
 * pack writer (packer.h); its completion fires only when all of that is
 * durable and committed (add.c). A get resolves a ref, then hands out one
 * checked chunk at a time as the caller asks for more, from the cache on the
 * loop thread when it can (get.c), so neither direction ever holds a whole
 * large document.
 *
 * The store is made of what its owner gives it (the backend, the database,
 * the read cache, the pack writer) and owns only its caches. The parts above
 * it - gc, recovery, search - use the narrow interface at the end of this
 * header, and learn of its events through hooks they register here.
 *
 * All functions run on the loop thread unless said otherwise; callbacks come
 * on the loop thread.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/meta/db.h"
#include "storage/backend.h"

struct backend;
struct manifest_entry;
struct packer;
struct readcache;
struct store;
struct store_add;
struct store_get;

/* Expected outcomes (positive) reported to callbacks; negative errno is a storage failure. */
enum {
    STORE_E_NOT_FOUND = 1,
    STORE_E_AMBIGUOUS,
    STORE_E_INTEGRITY,   /* stored data failed its check */
    STORE_E_SIZE,        /* the client sent a different size than announced */
    STORE_E_TOO_LARGE,   /* over the document size limit */
    STORE_E_UNAVAILABLE, /* the backend cannot be reached */
    STORE_E_NOT_A_NAME,  /* a rename of a ref that is not a name */
    STORE_E_SAME_NAME,   /* a rename of a name to itself */
};

/* Bounds of the configurable chunk sizes (the segment a cut job takes is 1 MiB). */
#define STORE_MIN_CHUNK 64u
#define STORE_MAX_CHUNK (1024u * 1024)

/* The store's code for a database outcome (DB_E_NOT_FOUND, DB_E_AMBIGUOUS); others pass through. */
int store_status_from_db(int status);

/* Largest document. */
#define STORE_MAX_DOCUMENT (1ull << 40)

struct reserve;

struct store_config {
    int compression_level;
    size_t chunk_min, chunk_avg, chunk_max; /* content-defined chunking */
    size_t max_text;   /* bytes of a text document's content indexed for search */
    size_t cache_size; /* bytes of decoded chunks kept in memory */
    /* Room kept for deletes on a full disk (reserve.h); NULL: none. */
    struct reserve *reserve;
};

/*
 * Makes the store over the backend and the database, with a remote
 * backend's read cache (NULL: none); all three stay the caller's. It reads at
 * once; adds and deletes wait for store_set_writer.
 */
int store_new(struct store **out, uv_loop_t *loop, struct backend *be, struct db *db,
              struct readcache *rc, const struct store_config *cfg);
/*
 * Gives the store the pack writer that adds and deletes go through (it stays
 * the caller's), once recovery has brought the database up to the packs.
 */
void store_set_writer(struct store *st, struct packer *pk);
/*
 * Only when nothing runs (store_active() 0). The store's libuv handle closes
 * asynchronously: its memory goes in the close callback, so the caller runs
 * the loop afterwards until it is empty. Returns NULL.
 */
struct store *store_free(struct store *st);
/* Adds, gets, deletes and verifies still running. */
unsigned store_active(struct store *st);

/* ---- add ---- */

struct store_add_params {
    /* Owned strings; the add takes them over (store_add_begin frees them on failure too). */
    char *name, *mime;
    struct db_fattr fattr; /* the file the name is added from (mode 0: none); only with a name */
    char **tags;
    size_t ntags;
    char **meta_keys, **meta_values;
    size_t nmeta;
    bool has_size;
    uint64_t size;
    /*
     * Heal: the content only gives fresh copies of the stored chunks verify
     * found damaged (bad_chunks); nothing else is stored, no document and
     * no journal entry. The result's `written` counts the bytes rewritten.
     */
    bool heal;
};

struct store_add_result {
    char hash[PROTO_HASH_HEX + 1];
    const char *name;
    uint64_t size, stored_size;
    uint64_t written; /* bytes of chunk records this add wrote (content stored before: 0) */
    const char *mime; /* the document's: set when it was first stored */
    bool created;
};

struct store_add_ops {
    /* Final outcome; not called after store_add_abort(). The add is freed after it returns. */
    void (*done)(void *userdata, int status, const struct store_add_result *res);
    /* The add was full (store_add_full) and can take data again. */
    void (*ready)(void *userdata);
};

int store_add_begin(struct store *st, struct store_add_params *params,
                    const struct store_add_ops *ops, void *userdata, struct store_add **out);
/*
 * Copies `len` bytes in; `last` says no more data follows, so the add
 * finishes and commits. Returns false when the add has ended during the call
 * (it failed, `done` was called and the add is freed); otherwise `done`
 * comes later. Data after a failure is dropped.
 */
bool store_add_write(struct store_add *add, const uint8_t *data, size_t len, bool last);
/* True while the add holds as much unprocessed data as it may; stop feeding it. */
bool store_add_full(const struct store_add *add);
/* The requester is gone: finish pending work quietly and free. */
void store_add_abort(struct store_add *add);

/* ---- get ---- */

struct store_get_ops {
    /*
     * The next piece of content (`first` on the first call, `last` on the
     * last; an empty document is one call with both). The data is valid
     * during the call only. Ask for the next piece with store_get_next(),
     * which may also be called from inside this callback.
     */
    void (*data)(void *userdata, const struct db_doc *doc, const uint8_t *data, size_t len,
                 bool first, bool last);
    /* The get failed; nothing more comes. */
    void (*error)(void *userdata, int status);
};

/*
 * Starts a get; the first piece comes after store_get_next(). It streams
 * bytes [from, to) of the document (to = UINT64_MAX for the end; a
 * range past the end gives what there is, maybe nothing). Chunks before the
 * range are passed over without being read.
 */
int store_get_start(struct store *st, const char *ref, size_t ref_len, uint64_t from, uint64_t to,
                    const struct store_get_ops *ops, void *userdata, struct store_get **out);
/* Asks for the next piece (possibly delivered before this returns). */
void store_get_next(struct store_get *get);
/* Frees the get; after `last` or error(), or to cancel one that is still running. */
void store_get_release(struct store_get *get);

/* ---- maintenance ---- */

/*
 * How far a long job is, for progress reports: `phase` names what it does
 * now, `done` of `total` (0: unknown) counts its unit. Verify writes it from
 * its worker (hence atomics); gc's (gc.h) is read on the loop thread.
 */
struct store_progress {
    _Atomic(const char *) phase; /* a static string */
    _Atomic uint64_t done, total;
};
/* One chunk that failed verification, and the documents that use it. */
struct store_bad_chunk {
    char hash[PROTO_HASH_HEX + 1];
    int status; /* STORE_E_INTEGRITY (wrong bytes), or the read failure */
    struct db_doc *docs;
    size_t ndocs;
};

struct store_verify_result {
    uint64_t chunks_checked, bytes_checked;
    struct store_bad_chunk *bad;
    size_t nbad;
};

/*
 * Re-reads and re-hashes stored chunks: those of the documents `refs` names
 * (each distinct chunk once, up to a bound: verify.c), or every chunk when
 * nrefs is 0. A bad chunk's users list the named documents first. `done` comes on the loop thread;
 * the result is valid during the call.
 */
typedef void store_verify_cb(void *userdata, int status, const struct store_verify_result *res);
/* `progress` (may be NULL) is updated while it runs: bytes of packs read (or of chunks, with refs).
 */
int store_verify(struct store *st, const char *const *refs, size_t nrefs,
                 struct store_progress *progress, store_verify_cb *done, void *userdata);

/*
 * Deletes what `ref` resolves to (PROTOCOL.md `delete`): a document by hash
 * with every name pointing to it; by name, the name, and each document it
 * pointed to that no other name points to. The journal entries go to a
 * pack first (so a rebuild never brings it back), then the metadata, in one
 * batch. With dry_run, nothing changes and the result is what would go.
 * `done` comes on the loop thread; the result (NULL on failure) is valid
 * during the call only.
 */
struct store_delete_result {
    const char *hash; /* the document the ref resolved to */
    const char *name; /* by name: the name, else NULL */
    const char *const
        *names; /* the names removed: by name the name, else the document's, oldest first */
    size_t nnames;
    const char *const *deleted; /* the documents deleted (hashes) */
    size_t ndeleted;
    bool dry_run;
};
typedef void store_delete_cb(void *userdata, int status, const struct store_delete_result *res);
int store_delete(struct store *st, const char *ref, size_t ref_len, bool dry_run,
                 store_delete_cb *done, void *userdata);

/* ---- tags and metadata (edit.c) ---- */

/* Owned strings in arrays one longer than their counts (NULL-ended). */
struct store_edit_params {
    char **tags, **untags; /* added, removed */
    size_t ntags, nuntags;
    char **meta_keys, **meta_values, **unmeta; /* set, removed */
    size_t nmeta, nunmeta;
};
void store_edit_params_clear(struct store_edit_params *p);

struct store_edit_result {
    const char *hash; /* the document the ref resolved to */
    bool changed;     /* false: it had those tags and metadata already */
};

typedef void store_edit_cb(void *userdata, int status, const struct store_edit_result *res);
/* Changes the tags and metadata of the document `ref` points to; takes `params` over. */
int store_edit(struct store *st, const char *ref, size_t ref_len, struct store_edit_params *params,
               store_edit_cb *done, void *userdata);

/* ---- copy and rename (name.c) ---- */

struct store_name_result {
    const char *hash; /* the document the ref resolved to */
    const char *name; /* the new name */
    const char *from; /* the ref when it was a name, else NULL */
    bool renamed;
};

typedef void store_name_cb(void *userdata, int status, const struct store_name_result *res);
/*
 * Gives the document `ref` points to the name `name` as a new version of it,
 * with the file mode and mtime of the version copied; with `rename`, `ref`
 * must be a name (STORE_E_NOT_A_NAME) other than `name` (STORE_E_SAME_NAME),
 * and every version of it goes. No document is deleted.
 */
int store_name(struct store *st, const char *ref, size_t ref_len, const char *name, bool rename,
               store_name_cb *done, void *userdata);

/* What status reports about the store beyond the database's totals. */
struct store_stats {
    uint64_t cache_bytes, cache_max, cache_hits, cache_misses;
    /* The read cache's (all 0 without one). */
    bool read_cache;
    uint64_t rc_bytes, rc_max, rc_hits, rc_misses, rc_fetched, rc_damaged;
    uint64_t open_pack;
    struct backend_stats backend; /* the backend front end's counters */
};
void store_get_stats(struct store *st, struct store_stats *out);

/* ---- for the parts above the store: gc, recovery and search ---- */

/*
 * What the store tells the search index, after each commit that changed
 * what it must hold. `changed`: a document was created, or its names, tags
 * or metadata changed; `text` (may be NULL) is its content to index, handed
 * over (malloc'd). `removed`: a document was deleted, and its commit left a
 * removal row for the index. Without hooks the text is dropped.
 */
struct store_index_hooks {
    void (*changed)(void *ctx, int64_t rowid, char *text, size_t len);
    void (*removed)(void *ctx);
    void *ctx;
};
void store_set_index_hooks(struct store *st, const struct store_index_hooks *hooks);

/*
 * A running operation that reads or references stored records: adds, gets,
 * scrubs, indexing and searches. Each gets a sequence number when it starts;
 * gc reclaims a record only when every operation that could have seen it
 * alive has ended (store_oldest_holder), and deletes a repacked pack only when
 * every operation that could still read it has ended. A get also lends gc
 * its manifest, so the chunks it is streaming stay alive even if its
 * document is deleted.
 */
struct store_op {
    uint64_t seq;
    uint64_t started_ms; /* uv_now() at store_op_begin */
    /*
     * The indexer's: it reads text, and a read that fails because its
     * document went meanwhile is retried. gc's condemnations do not wait for
     * it (store_oldest_holder); the deletion of packs does.
     */
    bool retried;
    struct store_op *prev, *next;
    /* Gets: the manifest being read (borrowed from the get). */
    unsigned depth;
    const uint8_t *root;
    size_t root_len;
};

void store_op_begin(struct store *st, struct store_op *op);
void store_op_end(struct store *st, struct store_op *op);
/* The running operations, oldest first (follow `next`); NULL when none runs. */
const struct store_op *store_first_op(const struct store *st);
/* Sequence number of the oldest running operation, or the next one when none runs. */
uint64_t store_oldest_op(const struct store *st);
/* The same without the operations that are `retried`: what gc's condemnations wait for. */
uint64_t store_oldest_holder(const struct store *st);
/*
 * How many operations that are not `retried` began before seq and still
 * run, and (when any) the uv_now() at which the oldest of them began.
 */
size_t store_holders_before(const struct store *st, uint64_t seq, uint64_t *oldest_started_ms);
/* The sequence number the next operation to begin will get. */
uint64_t store_next_op(const struct store *st);
/* `fn` runs whenever the oldest running operation ends (gc may be waiting for that). */
struct store_ops_hook {
    void (*fn)(void *ctx);
    void *ctx;
};
void store_set_ops_ended_hook(struct store *st, const struct store_ops_hook *hook);

/*
 * The database took events the store did not make (another writer's,
 * applied by recovery's refresh): resolved references are forgotten, and
 * the search index learns of the documents `rowids` (created, or their names,
 * tags or metadata changed) and, with `removed`, of deletions.
 */
void store_external_changes(struct store *st, const int64_t *rowids, size_t n, bool removed);

/* Journal entries get times after this one (ns since the epoch): the newest in the packs. */
void store_set_entry_floor(struct store *st, uint64_t time_ns);

/*
 * The bucket's gc marks were all seen at mono_ms (monotonic): dedup picks no
 * record of a pack marked before then. An add relies on what dedup knew when
 * it started, and a gc of another writer may delete a pack the grace period
 * after marking it; so an add's records must be in the bucket well before:
 * one still waiting to be written half the grace period after what it knew
 * fails instead (STORE_E_UNAVAILABLE). grace_ms 0: no such bound.
 */
void store_set_bucket_seen(struct store *st, uint64_t mono_ms);
void store_set_gc_grace(struct store *st, uint64_t grace_ms);
/* The monotonic ms after which a write an operation starts now may not go out (0: none). */
uint64_t store_write_deadline(const struct store *st);

/*
 * Reads `len` bytes at `off` of pack `seq` into buf, blocking (worker
 * threads): directly when the backend can (BACKEND_CAP_READ_SYNC), else
 * through the read cache when `cached` and there is one, else through the
 * loop. 0 with *got, BACKEND_E_*, or negative errno. Reads that must see the
 * backend itself (verify, recovery) or would only crowd the cache (repack)
 * pass false.
 */
int store_read_pack(struct store *st, uint64_t seq, uint64_t off, void *buf, size_t len,
                    size_t *got, bool cached);

/*
 * Walks a manifest from a worker thread, reading segments as needed: calls
 * fn for each chunk in order until it returns non-zero (returned) or the end
 * (0). STORE_E_INTEGRITY for a missing or damaged segment. Flags:
 * STORE_WALK_SEGMENTS also calls fn for each segment (bytes 0) before its
 * chunks; STORE_WALK_DISK reads segments from their packs, not the cache.
 */
enum {
    STORE_WALK_SEGMENTS = 1u << 0,
    STORE_WALK_DISK = 1u << 1,
};
typedef int store_chunk_fn(void *ctx, const struct manifest_entry *chunk);
int store_walk_manifest(struct store *st, unsigned depth, const uint8_t *root, size_t root_len,
                        unsigned flags, store_chunk_fn *fn, void *ctx);

/*
 * Reads a chunk and checks it against its id (worker threads): 0,
 * STORE_E_INTEGRITY when it is missing or damaged, or negative errno.
 */
int store_check_chunk(struct store *st, const uint8_t hash[PROTO_HASH_LEN], uint64_t size);

/*
 * The first `max` bytes of a text document, read back from the store
 * (worker threads; for snippets and the search index). 0 with a malloc'd
 * buffer, or a failure.
 */
int store_read_prefix(struct store *st, unsigned depth, const uint8_t *root, size_t root_len,
                      size_t max, char **out, size_t *len);
