/*
 * The backend front end: argument checks, counters, and the retries and
 * timeouts that every backend shares. A backend runs one attempt at a time
 * for a request and reports how it ended through backend_complete();
 * everything here decides what happens next. It knows no backend:
 * backend_new() finds one by its URL in storage/registry, above them all.
 *
 * Timing uses one uv_timer_t per backend. Requests that wait for something
 * (a deadline while an attempt runs, or the time of their next try) are on
 * be->waiting, sorted by the time they next need attention, and the timer is
 * armed for the head. Insertion is linear, which is fine for the few hundred
 * requests a backend has in flight; requests without a deadline that are not
 * waiting to retry are not on the list at all.
 */
#include "storage/backend.h"
#include "proto/util.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(backend_log_fn) log_sink;

bool backend_sync_disabled(void)
{
    static atomic_int disabled = -1; /* not read yet */
    int v = atomic_load(&disabled);

    if (v < 0) {
        const char *e = getenv("CAIRN_TEST_NO_SYNC");
        v = e && strcmp(e, "1") == 0;
        atomic_store(&disabled, v);
    }
    return v;
}

void backend_set_log(backend_log_fn fn)
{
    atomic_store(&log_sink, fn);
}

static atomic_bool read_only;

void backend_set_read_only(bool on)
{
    atomic_store(&read_only, on);
}

bool backend_read_only(void)
{
    return atomic_load(&read_only);
}

void backend_log(enum backend_log_level level, const char *fmt, ...)
{
    backend_log_fn fn = atomic_load(&log_sink);
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (fn)
        fn(level, msg);
    else
        fprintf(stderr, "cairn backend: %s\n", msg);
}

/* The private area starts at the first suitably aligned offset after the struct. */
static size_t priv_offset(void)
{
    size_t align = alignof(max_align_t);
    return (sizeof(struct backend) + align - 1) / align * align;
}

int backend_new_ops(struct backend **out, uv_loop_t *loop, const struct backend_ops *ops,
                    const char *url, const char **msg)
{
    struct backend *be;
    int r;

    *msg = NULL;
    if (strnlen(url, BACKEND_MAX_URL) >= BACKEND_MAX_URL) {
        *msg = "backend URL too long";
        return -EINVAL;
    }
    if (ops->priv_size > SIZE_MAX - priv_offset())
        return -ENOMEM;
    be = calloc(1, priv_offset() + ops->priv_size);
    if (!be)
        return -ENOMEM;
    be->ops = ops;
    be->loop = loop;
    be->priv = (char *)be + priv_offset();
    be->parallel = 1;
    be->retry = (struct backend_retry){
        .attempts = BACKEND_DEFAULT_ATTEMPTS,
        .backoff_ms = BACKEND_DEFAULT_BACKOFF_MS,
        .backoff_max_ms = BACKEND_DEFAULT_BACKOFF_MAX_MS,
        .timeout_ms = 0,
    };
    /* Jitter only has to differ between processes; xorshift must not start at 0. */
    be->rng = uv_hrtime() ^ (uint64_t)(uintptr_t)be;
    if (be->rng == 0)
        be->rng = 0x9e3779b97f4a7c15ull;
    r = ops->open(be, url, msg);
    if (r < 0) {
        if (!*msg)
            *msg = "cannot open the backend";
        free(be);
        return r;
    }
    /* After open, so that a failed open leaves no handle behind to close. */
    uv_timer_init(loop, &be->timer);
    *msg = NULL;
    *out = be;
    return 0;
}

/*
 * The backend is closed only after the timer's close callback has run:
 * libuv runs close callbacks newest first, so a backend that released the
 * memory from a close callback of its own would free the timer before
 * libuv is done with it.
 */
static void on_timer_closed(uv_handle_t *handle)
{
    struct backend *be = container_of((uv_timer_t *)handle, struct backend, timer);
    be->ops->close(be);
}

struct backend *backend_free(struct backend *be)
{
    if (!be)
        return NULL;
    /* Requests hold pointers into the backend: freeing it under them is a bug of the caller. */
    assert(be->inflight == 0 && be->waiting == NULL);
    uv_close((uv_handle_t *)&be->timer, on_timer_closed);
    return NULL;
}

void backend_release(struct backend *be)
{
    free(be);
}

/* ---- keys and arguments ---------------------------------------------------- */

static bool key_char_valid(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

bool backend_key_valid(const char *key)
{
    size_t len = strnlen(key, BACKEND_MAX_KEY);
    const char *slash;

    if (len == 0 || len >= BACKEND_MAX_KEY || key[0] == '.')
        return false;
    slash = memchr(key, '/', len);
    if (!slash || slash == key || memchr(slash + 1, '/', len - (size_t)(slash + 1 - key)))
        return false;
    if (strlen(slash + 1) < 2 || slash[1] == '.')
        return false;
    for (const char *p = key; *p; p++) {
        if (!key_char_valid(*p) && *p != '/')
            return false;
    }
    return true;
}

/* A list prefix is "<dir>/": the shape of a key without its name. */
static bool list_prefix_valid(const char *prefix)
{
    size_t len = strnlen(prefix, BACKEND_MAX_KEY);

    if (len < 2 || len >= BACKEND_MAX_KEY || prefix[0] == '.' || prefix[len - 1] != '/')
        return false;
    for (size_t i = 0; i + 1 < len; i++) {
        if (!key_char_valid(prefix[i]))
            return false;
    }
    return true;
}

/*
 * The total length of an iovec array, or -EINVAL when it is malformed or
 * overflows. Their number is not limited: the caller already holds them all,
 * and backends write them in as many system calls as IOV_MAX requires.
 */
static int iov_total(const struct iovec *iov, size_t iovcnt, uint64_t *total)
{
    uint64_t sum = 0;

    if (iovcnt > 0 && !iov)
        return -EINVAL;
    for (size_t i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > 0 && !iov[i].iov_base)
            return -EINVAL;
        if (iov[i].iov_len > (uint64_t)SSIZE_MAX - sum)
            return -EINVAL;
        sum += iov[i].iov_len;
    }
    *total = sum;
    return 0;
}

typedef int (*attempt_fn)(struct backend *be, struct backend_req *req);

static attempt_fn op_function(const struct backend *be, enum backend_op op)
{
    switch (op) {
    case BACKEND_OP_PUT:
        return be->ops->put;
    case BACKEND_OP_GET:
        return be->ops->get;
    case BACKEND_OP_HEAD:
        return be->ops->head;
    case BACKEND_OP_DELETE:
        return be->ops->del;
    case BACKEND_OP_LIST:
        return be->ops->list;
    case BACKEND_OP_APPEND:
        return backend_has(be, BACKEND_CAP_APPEND) ? be->ops->append : NULL;
    }
    return NULL;
}

/* ---- the waiting list and its timer ----------------------------------------- */

/*
 * When a waiting request next needs attention: its retry time while it waits
 * to retry (always before its deadline, see schedule_retry), else its deadline.
 */
static uint64_t wake_time(const struct backend_req *req)
{
    return req->in_backend ? req->deadline_ms : req->retry_at_ms;
}

static void on_timer(uv_timer_t *timer);

static void arm_timer(struct backend *be)
{
    uint64_t now = uv_now(be->loop), wake;

    if (uv_is_closing((uv_handle_t *)&be->timer))
        return;
    if (!be->waiting) {
        uv_timer_stop(&be->timer);
        return;
    }
    wake = wake_time(be->waiting);
    uv_timer_start(&be->timer, on_timer, wake > now ? wake - now : 0, 0);
}

/* Inserts after every request that wakes no later, so equal times keep their order. */
static void waiting_insert(struct backend *be, struct backend_req *req)
{
    struct backend_req **pp = &be->waiting;
    uint64_t wake = wake_time(req);

    while (*pp && wake_time(*pp) <= wake)
        pp = &(*pp)->wait_next_;
    req->wait_next_ = *pp;
    *pp = req;
    if (be->waiting == req)
        arm_timer(be);
}

static void waiting_remove(struct backend *be, struct backend_req *req)
{
    for (struct backend_req **pp = &be->waiting; *pp; pp = &(*pp)->wait_next_) {
        if (*pp == req) {
            bool was_head = pp == &be->waiting;
            *pp = req->wait_next_;
            req->wait_next_ = NULL;
            if (was_head)
                arm_timer(be);
            return;
        }
    }
}

/* ---- starting, retrying and finishing ---------------------------------------- */

/* Results of an attempt that did not succeed belong to nobody: drop them before the next. */
static void reset_results(struct backend_req *req)
{
    if (req->op == BACKEND_OP_GET) {
        backend_get_reset(container_of(req, struct backend_get, req));
    } else if (req->op == BACKEND_OP_LIST) {
        struct backend_list *list = container_of(req, struct backend_list, req);
        backend_list_reset(list);
        list->next_cursor[0] = '\0';
    }
}

static void count(struct backend *be, struct backend_req *req)
{
    struct backend_stats *st = &be->stats;
    bool ok = req->status == 0;
    uint64_t total = 0;

    /* A request the caller cancelled did not fail; everything else negative did. */
    if ((req->status < 0 && !(req->cancelled && req->status == -ECANCELED)) ||
        req->status == BACKEND_E_UNAVAILABLE)
        st->failures++;
    switch (req->op) {
    case BACKEND_OP_PUT: {
        struct backend_put *put = container_of(req, struct backend_put, req);
        st->puts++;
        if (ok && iov_total(put->iov, put->iovcnt, &total) == 0)
            st->bytes_written += total;
        break;
    }
    case BACKEND_OP_APPEND: {
        struct backend_append *app = container_of(req, struct backend_append, req);
        st->appends++;
        if (ok && iov_total(app->iov, app->iovcnt, &total) == 0)
            st->bytes_written += total;
        break;
    }
    case BACKEND_OP_GET:
        st->gets++;
        if (ok)
            st->bytes_read += container_of(req, struct backend_get, req)->out_len;
        break;
    case BACKEND_OP_HEAD:
        st->heads++;
        break;
    case BACKEND_OP_DELETE:
        st->deletes++;
        break;
    case BACKEND_OP_LIST:
        st->lists++;
        break;
    }
}

/* Ends a request. The callback comes last: it may start requests or free the backend. */
static void finish(struct backend_req *req, int status)
{
    struct backend *be = req->be;

    waiting_remove(be, req);
    if (status != 0)
        reset_results(req);
    req->status = status;
    count(be, req);
    be->inflight--;
    req->cb(req);
}

static void finish_timed_out(struct backend_req *req)
{
    req->be->stats.timeouts++;
    finish(req, BACKEND_E_UNAVAILABLE);
}

/* Starts the next attempt; 0, or the negative errno with which the backend refused it. */
static int attempt(struct backend_req *req)
{
    struct backend *be = req->be;
    int r;

    req->attempts++;
    req->status = 0;
    req->retry_after_ms = 0;
    req->in_backend = true;
    r = op_function(be, req->op)(be, req);
    if (r < 0) {
        req->in_backend = false;
        return r;
    }
    if (req->deadline_ms)
        waiting_insert(be, req);
    return 0;
}

/*
 * Draws the delay before try `n` (n >= 2): uniform in [d/2, d] (in [0, d]
 * with full jitter), d = backoff * 2^(n-2), capped.
 */
static uint64_t retry_delay(struct backend *be, unsigned n)
{
    unsigned doublings = n - 2;
    uint64_t d, lo, x = be->rng;

    d = doublings < 32 ? (uint64_t)be->retry.backoff_ms << doublings : UINT64_MAX;
    if (d > be->retry.backoff_max_ms)
        d = be->retry.backoff_max_ms;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    be->rng = x;
    lo = be->retry.full_jitter ? 0 : d / 2;
    return lo + x % (d - lo + 1);
}

/*
 * Waits before the next try. A retry that could only start after the
 * deadline ends the request now: waiting just to fail helps nobody.
 */
static void schedule_retry(struct backend_req *req)
{
    struct backend *be = req->be;
    uint64_t now = uv_now(be->loop);
    uint64_t delay = retry_delay(be, req->attempts + 1);
    uint64_t at;

    /* The server's own estimate wins when it asks for longer. */
    if (req->retry_after_ms > delay)
        delay = req->retry_after_ms;
    at = now + delay;

    if (req->deadline_ms && at >= req->deadline_ms) {
        finish_timed_out(req);
        return;
    }
    req->retry_at_ms = at;
    waiting_insert(be, req);
}

static bool transient(int status)
{
    return status == BACKEND_E_UNAVAILABLE || status == -ETIMEDOUT;
}

/*
 * Outcomes of a repeated attempt that mean an earlier attempt of the same
 * request landed before it reported a transient failure: the object that
 * is missing is the one we deleted, and the object that exists is the one
 * we created. This assumes that nobody else deletes or creates the same key
 * concurrently, which holds for cairn's keys (named by content or by a
 * sequence number the daemon alone hands out).
 */
static bool earlier_attempt_landed(const struct backend_req *req, int status)
{
    if (req->attempts < 2)
        return false;
    switch (req->op) {
    case BACKEND_OP_DELETE:
        return status == BACKEND_E_NOT_FOUND;
    case BACKEND_OP_PUT:
        return status == BACKEND_E_EXISTS &&
               (container_of(req, const struct backend_put, req)->flags & BACKEND_PUT_CREATE);
    case BACKEND_OP_APPEND:
        /* An append at 0 creates the object, so it is a create-only put of its first bytes. */
        return status == BACKEND_E_EXISTS &&
               container_of(req, const struct backend_append, req)->offset == 0;
    default:
        return false;
    }
}

void backend_complete(struct backend_req *req)
{
    struct backend *be = req->be;
    int status = req->status;

    req->in_backend = false;
    /* A deadline that is still pending no longer applies to this attempt. */
    waiting_remove(be, req);
    if (status != 0 && earlier_attempt_landed(req, status))
        status = 0;
    if (status == 0) {
        finish(req, 0);
    } else if (req->cancelled) {
        finish(req, transient(status) ? -ECANCELED : status);
    } else if (req->timed_out) {
        finish_timed_out(req);
    } else if (transient(status)) {
        unsigned tries = be->retry.attempts ? be->retry.attempts : 1;
        reset_results(req);
        if (req->attempts < tries)
            schedule_retry(req);
        else
            finish(req, BACKEND_E_UNAVAILABLE);
    } else {
        finish(req, status);
    }
}

static void wake(struct backend_req *req, uint64_t now)
{
    struct backend *be = req->be;
    int r;

    if (req->in_backend) {
        /* The deadline passed while an attempt runs: ask it to stop, unless someone did. */
        bool asked = req->cancelled;
        req->timed_out = true;
        if (!asked && be->ops->cancel)
            be->ops->cancel(be, req);
        return;
    }
    if (req->cancelled) {
        finish(req, -ECANCELED);
    } else if (req->deadline_ms && now >= req->deadline_ms) {
        /* Only when the loop was stalled past both the retry time and the deadline. */
        finish_timed_out(req);
    } else {
        be->stats.retries++;
        r = attempt(req);
        if (r < 0)
            finish(req, r);
    }
}

static void on_timer(uv_timer_t *timer)
{
    struct backend *be = container_of(timer, struct backend, timer);
    uint64_t now = uv_now(be->loop);

    /* Each wake() may call back into the caller, which may change the list: re-read its head. */
    while (be->waiting && wake_time(be->waiting) <= now) {
        struct backend_req *req = be->waiting;
        be->waiting = req->wait_next_;
        req->wait_next_ = NULL;
        wake(req, now);
    }
    arm_timer(be);
}

void backend_cancel(struct backend_req *req)
{
    struct backend *be = req->be;

    if (req->cancelled)
        return;
    req->cancelled = true;
    if (!req->in_backend) {
        /* Waiting to retry: end at the timer's next run, never inside the caller's call. */
        waiting_remove(be, req);
        req->retry_at_ms = uv_now(be->loop);
        waiting_insert(be, req);
    } else if (be->ops->cancel && !req->timed_out) {
        be->ops->cancel(be, req);
    }
}

/* Checks and initialises what every request shares, then starts its first attempt. */
static int start(struct backend *be, struct backend_req *req, enum backend_op op)
{
    uint32_t timeout = req->timeout_ms ? req->timeout_ms : be->retry.timeout_ms;
    int r;

    req->be = be;
    req->op = op;
    req->status = 0;
    req->attempts = 0;
    req->deadline_ms = timeout ? uv_now(be->loop) + timeout : 0;
    req->retry_at_ms = 0;
    req->cancelled = req->timed_out = req->in_backend = false;
    req->next_ = NULL;
    req->wait_next_ = NULL;
    /* Counted before the attempt, so that a backend's bookkeeping never sees it negative. */
    be->inflight++;
    r = attempt(req);
    if (r < 0)
        be->inflight--;
    return r;
}

/* The checks every operation makes before its own. */
static int check_common(struct backend *be, struct backend_req *req, enum backend_op op)
{
    if (!op_function(be, op))
        return -EOPNOTSUPP;
    if (!req->cb)
        return -EINVAL;
    if (op == BACKEND_OP_LIST ? !list_prefix_valid(req->key) : !backend_key_valid(req->key))
        return -EINVAL;
    return 0;
}

int backend_put(struct backend *be, struct backend_put *put)
{
    uint64_t total;
    int r = check_common(be, &put->req, BACKEND_OP_PUT);

    if (r == 0)
        r = iov_total(put->iov, put->iovcnt, &total);
    if (r == 0 && (put->flags & ~(unsigned)BACKEND_PUT_CREATE))
        r = -EINVAL;
    return r < 0 ? r : start(be, &put->req, BACKEND_OP_PUT);
}

int backend_get(struct backend *be, struct backend_get *get)
{
    int r = check_common(be, &get->req, BACKEND_OP_GET);

    /* A range has to end somewhere a byte offset can name. */
    if (r == 0 && get->length != BACKEND_TO_END && get->length > UINT64_MAX - get->offset)
        r = -EINVAL;
    if (r < 0)
        return r;
    get->out = NULL;
    get->out_len = 0;
    return start(be, &get->req, BACKEND_OP_GET);
}

int backend_head(struct backend *be, struct backend_head *head)
{
    int r = check_common(be, &head->req, BACKEND_OP_HEAD);

    if (r < 0)
        return r;
    head->size = 0;
    return start(be, &head->req, BACKEND_OP_HEAD);
}

int backend_del(struct backend *be, struct backend_del *del)
{
    int r = check_common(be, &del->req, BACKEND_OP_DELETE);
    return r < 0 ? r : start(be, &del->req, BACKEND_OP_DELETE);
}

int backend_list(struct backend *be, struct backend_list *list)
{
    int r = check_common(be, &list->req, BACKEND_OP_LIST);

    if (r == 0 && (list->max_keys > BACKEND_LIST_MAX ||
                   strnlen(list->cursor, sizeof(list->cursor)) >= sizeof(list->cursor)))
        r = -EINVAL;
    if (r < 0)
        return r;
    list->entries = NULL;
    list->nentries = 0;
    list->next_cursor[0] = '\0';
    return start(be, &list->req, BACKEND_OP_LIST);
}

int backend_append(struct backend *be, struct backend_append *app)
{
    uint64_t total;
    int r = check_common(be, &app->req, BACKEND_OP_APPEND);

    if (r == 0)
        r = iov_total(app->iov, app->iovcnt, &total);
    if (r == 0 && total > UINT64_MAX - app->offset)
        r = -EINVAL;
    return r < 0 ? r : start(be, &app->req, BACKEND_OP_APPEND);
}

void backend_get_reset(struct backend_get *get)
{
    free(get->out);
    get->out = NULL;
    get->out_len = 0;
}

/* Leaves next_cursor alone: a caller may still need it to ask for the next page. */
void backend_list_reset(struct backend_list *list)
{
    free(list->entries);
    list->entries = NULL;
    list->nentries = 0;
}

int backend_list_add(struct backend_list *list, size_t *cap, size_t max, const char *key,
                     size_t key_len, uint64_t size, int64_t mtime)
{
    if (list->nentries == *cap) {
        size_t grow = *cap ? *cap * 2 : 64;
        if (grow > max)
            return -EPROTO;
        struct backend_entry *grown = realloc(list->entries, grow * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        list->entries = grown;
        *cap = grow;
    }
    struct backend_entry *e = &list->entries[list->nentries++];
    memcpy(e->key, key, key_len);
    e->key[key_len] = '\0';
    e->size = size;
    e->mtime = mtime;
    return 0;
}

/* ---- synchronous reads ------------------------------------------------------ */

static int check_read(struct backend *be, unsigned cap, const char *key, void *buf, size_t len,
                      size_t *got)
{
    *got = 0;
    if (!backend_has(be, cap))
        return -EOPNOTSUPP;
    if (!backend_key_valid(key) || (len > 0 && !buf))
        return -EINVAL;
    return 0;
}

int backend_read_sync(struct backend *be, const char *key, uint64_t offset, void *buf, size_t len,
                      size_t *got)
{
    int r = check_read(be, BACKEND_CAP_READ_SYNC, key, buf, len, got);

    if (r == 0 && !be->ops->read_sync)
        r = -EOPNOTSUPP;
    return r < 0 ? r : be->ops->read_sync(be, key, offset, buf, len, got);
}

int backend_free_space(struct backend *be, uint64_t *bytes)
{
    if (!(be->ops->caps & BACKEND_CAP_FREE_SPACE) || !be->ops->free_space)
        return -EOPNOTSUPP;
    return be->ops->free_space(be, bytes);
}

int backend_try_read(struct backend *be, const char *key, uint64_t offset, void *buf, size_t len,
                     size_t *got)
{
    int r = check_read(be, BACKEND_CAP_READ_NOWAIT, key, buf, len, got);

    if (r == 0 && !be->ops->try_read)
        r = -EOPNOTSUPP;
    return r < 0 ? r : be->ops->try_read(be, key, offset, buf, len, got);
}
