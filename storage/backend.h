#pragma once

/*
 * Object backends, interface version 2. A backend stores opaque objects
 * under short keys ("packs/000000000000002a") and does every operation
 * asynchronously on the daemon's libuv loop: the caller fills a request
 * struct it owns (one kind per operation, each embedding struct
 * backend_req), starts it, and gets its callback on the loop thread exactly
 * once, when the backend no longer uses the request. A put or an append is
 * finished only when its bytes are durable.
 *
 * Each backend is one `const struct backend_ops` in its own file. Callers go
 * through the backend_*() functions below, which do the common work in one
 * place: key checks, counters, per-request timeouts, and retries with
 * exponential backoff and jitter for transient failures
 * (BACKEND_E_UNAVAILABLE) of operations that are safe to repeat. A backend
 * reports a transient failure once; the front end decides whether to try
 * again.
 *
 * What only some backends can do is a capability, never a special case in
 * the caller: in-place appends (a local file), blocking reads cheap enough
 * for worker threads, and reads served from memory without blocking the loop.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <uv.h>

struct backend;
struct backend_req;

/* Expected outcomes (positive); negative errno is a permanent failure. */
enum {
    BACKEND_E_NOT_FOUND = 1,
    BACKEND_E_TOO_LARGE,   /* get: the object or range is larger than max_len */
    BACKEND_E_UNAVAILABLE, /* transient: unreachable, timed out, throttled (after retries) */
    BACKEND_E_EXISTS,      /* put with BACKEND_PUT_CREATE, append at 0: the key exists */
};

/* Capability mask bits. */
enum {
    /* append(): objects can be extended in place and made durable piecewise. */
    BACKEND_CAP_APPEND = 1u << 0,
    /* read_sync(): blocking ranged reads, cheap enough to run on worker threads. */
    BACKEND_CAP_READ_SYNC = 1u << 1,
    /* try_read(): a ranged read served without blocking (page cache), on the loop thread. */
    BACKEND_CAP_READ_NOWAIT = 1u << 2,
    /* free_space(): the room left where objects are written (a local file system). */
    BACKEND_CAP_FREE_SPACE = 1u << 3,
};

#define BACKEND_MAX_KEY 160
#define BACKEND_MAX_URL 1024
/* get: read to the end of the object. */
#define BACKEND_TO_END UINT64_MAX
/* list: page size when the caller leaves max_keys at 0, and the largest accepted. */
#define BACKEND_LIST_PAGE 1000
#define BACKEND_LIST_MAX 10000
/* Retries of transient failures, unless the backend's policy says otherwise. */
#define BACKEND_DEFAULT_ATTEMPTS 5
#define BACKEND_DEFAULT_BACKOFF_MS 50
#define BACKEND_DEFAULT_BACKOFF_MAX_MS 5000

typedef void (*backend_cb)(struct backend_req *req);

enum backend_op {
    BACKEND_OP_PUT,
    BACKEND_OP_GET,
    BACKEND_OP_HEAD,
    BACKEND_OP_DELETE,
    BACKEND_OP_LIST,
    BACKEND_OP_APPEND,
};

/* The common part of every request. */
struct backend_req {
    char key[BACKEND_MAX_KEY]; /* for list: the prefix "<dir>/" */
    /* 0 for the backend's default; the whole operation, retries included. */
    uint32_t timeout_ms;
    backend_cb cb;
    void *userdata;
    /* Set by the front end: 0, BACKEND_E_*, or negative errno. */
    int status;
    /* Set by a backend with a transient failure when the server said how long
     * to wait (Retry-After); the front end waits at least that long. */
    uint32_t retry_after_ms;
    /* Owned by the front end and the backend; callers leave these alone. */
    struct backend *be;
    enum backend_op op;
    unsigned attempts;
    uint64_t deadline_ms, retry_at_ms;
    bool cancelled, timed_out, in_backend;
    struct backend_req *next_;      /* the backend's own queues */
    struct backend_req *wait_next_; /* the front end's retry/timeout list */
};

/* Put flags. */
enum {
    /* Create only: BACKEND_E_EXISTS when the key exists (If-None-Match: *). */
    BACKEND_PUT_CREATE = 1u << 0,
};

/*
 * A whole object, atomically: a reader sees the old object, none, or all of it.
 * The bytes are the iovecs in order, as many as the caller has (a repack gives
 * one per record); a backend splits them into system calls or requests as it
 * must, so IOV_MAX is no limit here.
 */
struct backend_put {
    struct backend_req req;
    const struct iovec *iov; /* borrowed until the callback */
    size_t iovcnt;
    unsigned flags;
};

/* A ranged read: `length` bytes from `offset` (BACKEND_TO_END for the rest). */
struct backend_get {
    struct backend_req req;
    uint64_t offset, length;
    size_t max_len; /* refuse (BACKEND_E_TOO_LARGE) more than this */
    /* Result: malloc'd, owned by the caller after the callback. Shorter than
     * `length` when the object ends first; empty when offset is at or past its end. */
    uint8_t *out;
    size_t out_len;
};

struct backend_head {
    struct backend_req req;
    uint64_t size; /* result */
};

struct backend_del {
    struct backend_req req;
};

struct backend_entry {
    char key[BACKEND_MAX_KEY];
    uint64_t size;
    /* When the object was last written, by the server's clock, in seconds since 1970; 0 when the
     * server does not say. */
    int64_t mtime;
};

/*
 * One page of the keys under a prefix, in byte order, starting after
 * `cursor` ("" for the first page). `next_cursor` is "" on the last page,
 * else the value to pass as `cursor` for the next one.
 */
struct backend_list {
    struct backend_req req;
    char cursor[BACKEND_MAX_KEY];
    size_t max_keys; /* 0: BACKEND_LIST_PAGE; at most BACKEND_LIST_MAX */
    /* Results: malloc'd, freed with backend_list_reset(). */
    struct backend_entry *entries;
    size_t nentries;
    char next_cursor[BACKEND_MAX_KEY];
};

/*
 * BACKEND_CAP_APPEND only. Writes the bytes at `offset` and ends the object
 * right after them (anything that was beyond is cut off), then makes the
 * whole object [0, offset + len) durable, directory entry included. With
 * offset 0 the object is created (BACKEND_E_EXISTS if it exists); otherwise
 * it must exist and be at least `offset` bytes long (-EINVAL if shorter).
 * Repeating an append is harmless, so it is retried like a read.
 */
struct backend_append {
    struct backend_req req;
    uint64_t offset;
    const struct iovec *iov; /* borrowed until the callback; any number, as for a put */
    size_t iovcnt;
};

struct backend_ops {
    const char *name; /* URL scheme */
    unsigned caps;
    size_t priv_size;
    /* Synchronous setup before the loop runs. *msg may explain a failure. */
    int (*open)(struct backend *be, const char *url, const char **msg);
    /*
     * Called once no request is in flight. Libuv handles close asynchronously,
     * so the backend calls backend_release() when its last handle is closed
     * (the caller keeps running the loop until then).
     */
    void (*close)(struct backend *be);
    /*
     * Each starts one attempt and returns 0 when backend_complete() will be
     * called for it, or negative errno when not. The request's kind follows
     * from req->op; the backend finds its struct with container_of.
     */
    int (*put)(struct backend *be, struct backend_req *req);
    int (*get)(struct backend *be, struct backend_req *req);
    int (*head)(struct backend *be, struct backend_req *req);
    int (*del)(struct backend *be, struct backend_req *req);
    int (*list)(struct backend *be, struct backend_req *req);
    int (*append)(struct backend *be, struct backend_req *req); /* BACKEND_CAP_APPEND */
    /*
     * Asks the backend to stop a running attempt soon (timeout or caller's
     * cancel); it still completes it, with -ECANCELED if it did stop it. May
     * be NULL when attempts cannot be interrupted (local disk I/O).
     */
    void (*cancel)(struct backend *be, struct backend_req *req);
    /* BACKEND_CAP_READ_SYNC: a blocking read for worker threads (see backend_read_sync). */
    int (*read_sync)(struct backend *be, const char *key, uint64_t offset, void *buf, size_t len,
                     size_t *got);
    /* BACKEND_CAP_READ_NOWAIT: see backend_try_read. */
    int (*try_read)(struct backend *be, const char *key, uint64_t offset, void *buf, size_t len,
                    size_t *got);
    /* BACKEND_CAP_FREE_SPACE: see backend_free_space. */
    int (*free_space)(struct backend *be, uint64_t *bytes);
    /* URL for display, without secrets. */
    void (*describe)(struct backend *be, char *out, size_t out_len);
};

struct backend_stats {
    uint64_t puts, gets, heads, deletes, lists, appends;
    uint64_t failures; /* operations that ended in a failure (after retries) */
    uint64_t retries;  /* attempts repeated after a transient failure */
    uint64_t timeouts;
    uint64_t bytes_written, bytes_read;
};

/* How the front end repeats transient failures. */
struct backend_retry {
    unsigned attempts;       /* tries in all, at least 1 */
    uint32_t backoff_ms;     /* delay before the second try; doubles, with jitter */
    uint32_t backoff_max_ms; /* cap on one delay */
    /* Delays uniform in [0, d] ("full jitter") rather than [d/2, d]: for many
     * clients of one remote server, so that their retries spread out. */
    bool full_jitter;
    uint32_t timeout_ms; /* default per-request timeout, 0 for none */
};

struct backend {
    const struct backend_ops *ops;
    uv_loop_t *loop;
    struct backend_stats stats;
    struct backend_retry retry;
    unsigned inflight; /* requests started and not yet called back */
    /* Requests the backend can usefully run at once (1 unless its open says more). */
    unsigned parallel;
    /* The front end's timer for retries and timeouts, and what waits on it. */
    uv_timer_t timer;
    struct backend_req *waiting;
    uint64_t rng;
    void *priv; /* ops->priv_size bytes */
};

/*
 * What backends have to say beyond a request's status (a reconnect, the
 * server's own error text). The daemon routes it into its log; without a
 * sink it goes to stderr. Any thread may log; the sink must cope.
 */
enum backend_log_level { BACKEND_LOG_ERROR, BACKEND_LOG_WARN, BACKEND_LOG_INFO };
typedef void (*backend_log_fn)(enum backend_log_level level, const char *msg);
void backend_set_log(backend_log_fn fn);
void backend_log(enum backend_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Picks the backend for `url` ("local:/path" or "file:///path"), allocates
 * and opens it. 0 or negative errno; *msg explains a failure. It is the
 * registry's (storage/registry), the one part that knows every backend:
 * what links only the front end cannot call it.
 */
int backend_new(struct backend **out, uv_loop_t *loop, const char *url, const char **msg);
/*
 * The same with the backend given instead of looked up by the URL's scheme:
 * backend_new() calls it, and tests use it to plug in backends of their own.
 */
int backend_new_ops(struct backend **out, uv_loop_t *loop, const struct backend_ops *ops,
                    const char *url, const char **msg);
/* Starts closing the backend (no request may be in flight); its memory goes
 * once the loop has run its close callbacks. Returns NULL. */
struct backend *backend_free(struct backend *be);
/* For backends: frees the backend object at the end of its close. */
void backend_release(struct backend *be);
/* For backends: an attempt finished (on the loop thread). */
void backend_complete(struct backend_req *req);

static inline bool backend_has(const struct backend *be, unsigned cap)
{
    return (be->ops->caps & cap) == cap;
}

/*
 * Test-only: true when cairnd runs with CAIRN_TEST_NO_SYNC=1 in its
 * environment. Then nothing is made durable - the local backend skips its
 * fsync, fdatasync and syncfs calls, SQLite runs at synchronous=OFF - so
 * that tests/integration/test_powercut.py can show that a power cut notices
 * missing syncs. Read once; any thread.
 */
bool backend_sync_disabled(void);

/*
 * Backends opened after backend_set_read_only(true) (cairnd --read-only)
 * make, sync and clean up nothing when they open: a local root must exist
 * already, and leftover temporaries stay where they are. What is written
 * later is the caller's to refuse.
 */
void backend_set_read_only(bool on);
bool backend_read_only(void);

/* Checks the key alphabet and shape: "<dir>/<name>", [a-z0-9._-], no leading dot. */
bool backend_key_valid(const char *key);

/*
 * Start a request. 0 when the callback will come, negative errno when not
 * (-EINVAL for a bad key or argument, -EOPNOTSUPP for a missing capability).
 * A put's or an append's iovecs are refused only when one has a NULL base
 * with a length, or when their total exceeds SSIZE_MAX; never for their
 * number.
 */
int backend_put(struct backend *be, struct backend_put *put);
int backend_get(struct backend *be, struct backend_get *get);
int backend_head(struct backend *be, struct backend_head *head);
int backend_del(struct backend *be, struct backend_del *del);
int backend_list(struct backend *be, struct backend_list *list);
int backend_append(struct backend *be, struct backend_append *app);
/* The caller no longer wants the result; the callback still comes, maybe with -ECANCELED. */
void backend_cancel(struct backend_req *req);

/* Frees what a finished request returned. */
void backend_get_reset(struct backend_get *get);
void backend_list_reset(struct backend_list *list);
/*
 * For a backend filling a list: appends key (key_len bytes, then a NUL) of
 * that size and mtime, growing the entries (*cap of them allocated) by
 * doubling from 64. -EPROTO when that would pass max entries (more than
 * were asked for), -ENOMEM.
 */
int backend_list_add(struct backend_list *list, size_t *cap, size_t max, const char *key,
                     size_t key_len, uint64_t size, int64_t mtime);

/*
 * BACKEND_CAP_READ_SYNC, from worker threads only: reads up to `len` bytes at
 * `offset` into buf. 0 with *got (less than len only at the end of the
 * object), BACKEND_E_NOT_FOUND, or negative errno.
 */
int backend_read_sync(struct backend *be, const char *key, uint64_t offset, void *buf, size_t len,
                      size_t *got);

/*
 * BACKEND_CAP_READ_NOWAIT, on the loop thread: the same read, but only if it
 * can be served at once from memory; -EAGAIN when it would block (then use
 * backend_get). Never blocks.
 */
int backend_try_read(struct backend *be, const char *key, uint64_t offset, void *buf, size_t len,
                     size_t *got);

/*
 * BACKEND_CAP_FREE_SPACE, from worker threads (a system call): the bytes an
 * unprivileged writer may still write where the objects are. -EOPNOTSUPP
 * for a backend whose room is not this machine's to know (a bucket).
 */
int backend_free_space(struct backend *be, uint64_t *bytes);
