#pragma once

/*
 * The content store: streams documents in and out of packs on the object
 * backend.
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
 * All functions run on the loop thread; callbacks come on the loop thread.
 */

#include <stdatomic.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/meta/db.h"

struct backend;
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
};

/* Bounds of the configurable chunk sizes (the segment a cut job takes is 1 MiB). */
#define STORE_MIN_CHUNK 64u
#define STORE_MAX_CHUNK (1024u * 1024)

/* The store's code for a database outcome (DB_E_NOT_FOUND, DB_E_AMBIGUOUS); others pass through. */
int store_status_from_db(int status);

/* Largest document. */
#define STORE_MAX_DOCUMENT (1ull << 40)

struct reserve;
struct readcache;

struct store_config {
    int compression_level;
    size_t chunk_min, chunk_avg, chunk_max; /* content-defined chunking */
    size_t max_text;       /* bytes of a text document's content indexed for search */
    uint64_t pack_size;    /* packs are sealed at this size */
    unsigned repack_below; /* gc rewrites packs less than this percent alive */
    size_t cache_size;     /* bytes of decoded chunks kept in memory */
    /*
     * The database is new and empty and everything comes back from the packs
     * (`cairnd --rebuild-index`): every chunk is read back and checked.
     */
    bool rebuild;
    /* Room kept for deletes and gc on a full disk (reserve.h); NULL: none. */
    struct reserve *reserve;
    /* A remote backend's read cache (readcache.h), which the store takes over; NULL: none. */
    struct readcache *read_cache;
};

/*
 * Opens the store: recovers what the database lacks from the packs (a crash
 * may have lost the last commits), finishes deletions a crash interrupted,
 * and starts the pack writer and the search indexer. Runs the loop itself
 * until that is done, before the daemon serves anyone.
 */
int store_new(struct store **out, uv_loop_t *loop, struct backend *be, struct db *db,
              const char *index_path, const struct store_config *cfg);
/*
 * Only when nothing runs (store_active() 0 and store_busy() false). The
 * store's libuv handles (its own, the pack writer's, the indexer's) close
 * asynchronously: their memory, the store's included, goes in their close
 * callbacks, so the caller runs the loop afterwards until it is empty.
 * Returns NULL.
 */
struct store *store_free(struct store *st);
/* Adds, gets and maintenance still running (shutdown waits for zero). */
unsigned store_active(struct store *st);
/* Background work (pack writes, indexing) still running. */
bool store_busy(struct store *st);

/* ---- add ---- */

struct store_add_params {
    /* Owned strings; the add takes them over (store_add_begin frees them on failure too). */
    char *name, *mime;
    char **tags;
    size_t ntags;
    char **meta_keys, **meta_values;
    size_t nmeta;
    bool has_size;
    uint64_t size;
};

struct store_add_result {
    char hash[PROTO_HASH_HEX + 1];
    const char *name;
    uint64_t size, stored_size;
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

/* Starts a get; the first piece comes after store_get_next(). */
/*
 * Streams bytes [from, to) of the document (to = UINT64_MAX for the end; a
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

struct store_gc_result {
    uint64_t packs_rewritten, packs_deleted;
    uint64_t bytes_reclaimed; /* pack bytes given back to the backend */
    uint64_t bytes_dead;      /* dead bytes left in packs above the rewrite threshold */
    uint64_t chunks_removed;  /* chunks no document used any more, gone now */
    /* Packs that could not be rewritten (their dead bytes stay; gc went on with the
     * others), and why the first one could not. */
    uint64_t packs_failed;
    char failure[128];
};

/*
 * Reclaims what no document uses: unreferenced chunks and manifest
 * segments, the journal entries of deleted documents, and records of adds
 * that failed. Packs less than `repack_below` percent alive are rewritten
 * and the old ones deleted once the database no longer names them. Only one
 * gc runs at a time; a request while one runs waits for it and gets its
 * result. `done` comes on the loop thread.
 */
typedef void store_gc_cb(void *userdata, int status, const struct store_gc_result *res);
int store_gc(struct store *st, store_gc_cb *done, void *userdata);

/*
 * How far a long job is, for progress reports: `phase` names what it does
 * now, `done` of `total` (0: unknown) counts its unit. Verify writes it from
 * its worker (hence atomics); gc's is read on the loop thread.
 */
struct store_progress {
    _Atomic(const char *) phase; /* a static string */
    _Atomic uint64_t done, total;
};
/* The running gc's progress; false when none runs. Loop thread. */
bool store_gc_progress(struct store *st, struct store_progress *out);

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
 * Re-reads and re-hashes stored chunks: those of the documents `refs` names,
 * or every chunk when nrefs is 0. `done` comes on the loop thread; the result
 * is valid during the call.
 */
typedef void store_verify_cb(void *userdata, int status, const struct store_verify_result *res);
/* `progress` (may be NULL) is updated while it runs: bytes of packs read (or of chunks, with refs). */
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
    const char *hash;  /* the document the ref resolved to */
    const char *name;  /* by name: the name, else NULL */
    const char *const *names; /* the names removed: by name the name, else the document's, oldest first */
    size_t nnames;
    const char *const *deleted; /* the documents deleted (hashes) */
    size_t ndeleted;
    bool dry_run;
};
typedef void store_delete_cb(void *userdata, int status, const struct store_delete_result *res);
int store_delete(struct store *st, const char *ref, size_t ref_len, bool dry_run,
                 store_delete_cb *done, void *userdata);

/* What status reports about the store beyond the database's totals. */
struct store_stats {
    uint64_t cache_bytes, cache_max, cache_hits, cache_misses;
    /* The read cache's (all 0 without one). */
    bool read_cache;
    uint64_t rc_bytes, rc_max, rc_hits, rc_misses, rc_fetched, rc_damaged;
    uint64_t index_pending;
    uint64_t open_pack;
};
void store_get_stats(struct store *st, struct store_stats *out);

/*
 * Runs the loop until the background work is done and the search index has
 * caught up (for --rebuild-index and --upgrade, before the exit).
 */
int store_drain(struct store *st);

/* What store_new recovered from the packs, in a sentence (empty when nothing). */
const char *store_replay_summary(const struct store *st);

/* ---- search ---- */

/*
 * Runs a search once every add and delete acknowledged before it is in the
 * index, and makes each hit's snippet from its text read back from the
 * store. `done` gets the hits (owned by the callee: db_hits_free), or
 * DB_E_INVALID_QUERY with a message for the user, or a failure.
 */
typedef void store_search_cb(void *userdata, int status, const char *msg, struct db_hit *hits,
                             size_t nhits);
int store_search(struct store *st, const struct db_search_params *p, store_search_cb *done,
                 void *userdata);
