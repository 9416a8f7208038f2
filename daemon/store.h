#pragma once

/*
 * The content store: streams documents in and out of the object backend.
 *
 * An add cuts the incoming bytes into content-defined chunks, hashes and
 * compresses them on worker threads, puts each chunk the store does not
 * already hold and the add's journal entry (with the manifest) on the backend, and
 * finally commits the metadata; its completion fires only when all of that
 * is durable (add.c). A get resolves a ref, then reads, decodes and
 * hash-verifies one chunk at a time as the caller asks for more, so neither
 * direction ever holds a whole large document.
 *
 * All functions run on the loop thread; callbacks come on the loop thread.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/db.h"

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

/* Largest document: bounds the manifest an add keeps in memory (40 bytes a chunk). */
#define STORE_MAX_DOCUMENT (1ull << 40)

struct store_config {
    int compression_level;
    size_t chunk_min, chunk_avg, chunk_max; /* content-defined chunking */
    size_t max_text; /* bytes of a text document's content indexed for search */
};

int store_new(struct store **out, uv_loop_t *loop, struct backend *be, struct db *db,
              const struct store_config *cfg);
struct store *store_free(struct store *st);
/* Adds and gets still running (shutdown waits for zero). */
unsigned store_active(struct store *st);

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
     * during the call only. Ask for the next piece with store_get_next().
     */
    void (*data)(void *userdata, const struct db_doc *doc, const uint8_t *data, size_t len,
                 bool first, bool last);
    /* The get failed; nothing more comes. */
    void (*error)(void *userdata, int status);
};

int store_get_start(struct store *st, const char *ref, size_t ref_len,
                    const struct store_get_ops *ops, void *userdata, struct store_get **out);
/* Fetches the next piece; call after each data() until `last`. */
void store_get_next(struct store_get *get);
/* Frees the get; after `last` or error(), or to cancel one that is still running. */
void store_get_release(struct store_get *get);

/* ---- maintenance ---- */

struct store_gc_result {
    uint64_t chunks_removed, bytes_freed;
};

/*
 * Removes the chunks no document references, except those a running add
 * relies on. Only one gc runs at a time; a request while one runs waits for
 * it and gets its result. `done` comes on the loop thread.
 */
typedef void store_gc_cb(void *userdata, int status, const struct store_gc_result *res);
int store_gc(struct store *st, store_gc_cb *done, void *userdata);

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
int store_verify(struct store *st, const char *const *refs, size_t nrefs, store_verify_cb *done,
                 void *userdata);

/*
 * Deletes the document `ref` resolves to: its journal entry goes to the
 * backend first (so a rebuild never brings it back), then the metadata.
 * `done` gets the hash; it comes on the loop thread.
 */
typedef void store_delete_cb(void *userdata, int status, const char *hash);
int store_delete(struct store *st, const char *ref, size_t ref_len, store_delete_cb *done,
                 void *userdata);

/*
 * Recreates the metadata database from the backend's journal (objects.h),
 * replacing whatever it holds. Runs the loop itself until done;
 * for `cairnd --rebuild-index`, before the daemon serves. *summary describes
 * what was restored.
 */
int store_rebuild(struct store *st, char *summary, size_t summary_len);
