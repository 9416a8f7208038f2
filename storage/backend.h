#pragma once

/*
 * Object backends. A backend stores opaque objects under short keys
 * ("chunks/<hex>", "manifests/<hex>") and does every operation
 * asynchronously on the daemon's libuv loop: the caller fills a struct
 * backend_req it owns, starts it, and gets its callback on the loop thread
 * once the operation is finished. A put is finished only when the object is
 * durable. Each backend is one `const struct backend_ops` in its own file;
 * callers go through the inline wrappers below, which keep the counters in
 * one place.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct backend;
struct backend_req;

/* Expected outcomes (positive); negative errno is a failure of the backend. */
enum {
    BACKEND_E_NOT_FOUND = 1,
    BACKEND_E_TOO_LARGE, /* object larger than req->max_len */
    BACKEND_E_UNAVAILABLE,
};

/* Capability mask bits. */
enum {
    BACKEND_CAP_LIST = 1u << 0,
    BACKEND_CAP_ATOMIC_PUT = 1u << 1, /* a put is all-or-nothing */
    BACKEND_CAP_GROUP_SYNC = 1u << 2, /* concurrent puts share sync work */
};

#define BACKEND_MAX_KEY 160
#define BACKEND_MAX_URL 1024

typedef void (*backend_cb)(struct backend_req *req);

enum backend_op {
    BACKEND_OP_PUT,
    BACKEND_OP_GET,
    BACKEND_OP_HEAD,
    BACKEND_OP_DELETE,
    BACKEND_OP_LIST,
};

struct backend_req {
    struct backend *be;
    enum backend_op op;
    char key[BACKEND_MAX_KEY]; /* for list: the prefix */
    /* put: the object, borrowed until the callback */
    const void *data;
    size_t len;
    /* get: refuse objects larger than this */
    size_t max_len;
    /* get: the object (malloc'd; the caller owns it after the callback) */
    uint8_t *out;
    size_t out_len;
    /* head: the object's size */
    uint64_t size;
    /* list: malloc'd keys, freed with backend_req_reset() */
    char **keys;
    size_t nkeys;
    /* 0, BACKEND_E_*, or negative errno */
    int status;
    backend_cb cb;
    void *userdata;
    /* Link for a backend's internal queues; callers leave it alone. */
    struct backend_req *next_;
};

struct backend_ops {
    const char *name; /* URL scheme */
    unsigned caps;
    size_t priv_size;
    /* Synchronous setup before the loop runs; `data_dir` is the daemon's. */
    int (*open)(struct backend *be, const char *url, const char *data_dir);
    /*
     * Called once no request is in flight. Libuv handles close asynchronously,
     * so the backend calls backend_release() when its last handle is closed
     * (the caller keeps running the loop until then).
     */
    void (*close)(struct backend *be);
    /* Each returns 0 when the callback will come, or negative errno when not. */
    int (*put)(struct backend *be, struct backend_req *req);
    int (*get)(struct backend *be, struct backend_req *req);
    int (*head)(struct backend *be, struct backend_req *req);
    int (*del)(struct backend *be, struct backend_req *req);
    int (*list)(struct backend *be, struct backend_req *req);
    /* URL for display, without secrets. */
    void (*describe)(struct backend *be, char *out, size_t out_len);
    /*
     * Optional: a blocking read, for worker threads, where a read is as cheap
     * as a local file read. Callers use it to fold a read into the job that
     * decodes the object, instead of a round trip through the loop. Returns
     * 0 with a malloc'd object, BACKEND_E_*, or negative errno.
     */
    int (*read_sync)(struct backend *be, const char *key, size_t max_len, uint8_t **out,
                     size_t *len);
};

struct backend_stats {
    uint64_t puts, gets, heads, deletes, lists, failures;
    uint64_t bytes_written, bytes_read;
};

struct backend {
    const struct backend_ops *ops;
    uv_loop_t *loop;
    struct backend_stats stats;
    unsigned inflight;
    void *priv; /* ops->priv_size bytes */
};

extern const struct backend_ops backend_local_ops;

/*
 * Picks the backend for `url` ("local", "local:/path" or "file:///path"),
 * allocates and opens it. 0 or negative errno; *msg explains a failure.
 */
int backend_new(struct backend **out, uv_loop_t *loop, const char *url, const char *data_dir,
                const char **msg);
/* Starts closing the backend; its memory goes once the loop has run its close callbacks. */
struct backend *backend_free(struct backend *be);
/* For backends: frees the backend object at the end of its close. */
void backend_release(struct backend *be);

/* Frees what a finished request returned (get data, list keys). */
void backend_req_reset(struct backend_req *req);

/* Checks the key alphabet and shape: "<dir>/<name>", [a-z0-9._-]. */
bool backend_key_valid(const char *key);

/* Called by backends on the loop thread when a request finishes. */
void backend_complete(struct backend_req *req);

int backend_start(struct backend *be, struct backend_req *req, enum backend_op op);

/* True when backend_read_sync() may be used (from worker threads). */
static inline bool backend_can_read_sync(const struct backend *be)
{
    return be->ops->read_sync != NULL;
}

/* See backend_ops.read_sync; the key must be valid (backend_key_valid). */
static inline int backend_read_sync(struct backend *be, const char *key, size_t max_len,
                                    uint8_t **out, size_t *len)
{
    return be->ops->read_sync(be, key, max_len, out, len);
}

static inline int backend_put(struct backend *be, struct backend_req *req)
{
    return backend_start(be, req, BACKEND_OP_PUT);
}

static inline int backend_get(struct backend *be, struct backend_req *req)
{
    return backend_start(be, req, BACKEND_OP_GET);
}

static inline int backend_head(struct backend *be, struct backend_req *req)
{
    return backend_start(be, req, BACKEND_OP_HEAD);
}

static inline int backend_delete(struct backend *be, struct backend_req *req)
{
    return backend_start(be, req, BACKEND_OP_DELETE);
}

static inline int backend_list(struct backend *be, struct backend_req *req)
{
    return backend_start(be, req, BACKEND_OP_LIST);
}
