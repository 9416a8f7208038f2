/*
 * Unit tests of the front end's retries, backoff, timeouts and
 * cancellation, against the fault backend (test-fault.c). Timing tests use
 * short real delays on the loop's clock, which is the clock the front end
 * uses.
 */
#include "storage/test-fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- retries -------------------------------------------------------------------- */

static void test_fe_retry_then_success(void **state)
{
    struct test_env e;
    unsigned attempts;

    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, -ETIMEDOUT, 0);
    fault_env_open(&e, &fault_ops);
    assert_int_equal(fault_run(&e, BACKEND_OP_GET, 0, &attempts), 0);
    assert_int_equal(attempts, 3);
    assert_int_equal(fault_probe.starts, 3);
    assert_int_equal(e.be->stats.gets, 1);
    assert_int_equal(e.be->stats.retries, 2);
    assert_int_equal(e.be->stats.failures, 0);
    assert_int_equal(e.be->stats.timeouts, 0);
    assert_int_equal(e.be->stats.bytes_read, 5);

    /* With no backoff at all the retry still waits for the loop, never recursing. */
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, BACKEND_E_UNAVAILABLE, 0);
    e.be->retry.backoff_ms = 0;
    e.be->retry.backoff_max_ms = 0;
    assert_int_equal(fault_run(&e, BACKEND_OP_GET, 0, &attempts), 0);
    assert_int_equal(attempts, 3);
    test_env_finish(&e);
}

/* Every kind of operation is safe to repeat, so every kind is retried. */
static void test_fe_retries_exhausted(void **state)
{
    static const int transients[] = {BACKEND_E_UNAVAILABLE, -ETIMEDOUT};
    struct test_env e;
    unsigned attempts, runs = 0;

    fault_probe_reset(NULL, 0, 0);
    fault_env_open(&e, &fault_ops);
    e.be->retry.attempts = 4;
    for (size_t t = 0; t < ARRAY_SIZE(transients); t++) {
        for (size_t i = 0; i < ARRAY_SIZE(fault_all_ops); i++, runs++) {
            fault_probe_reset(NULL, 0, transients[t]);
            int r = fault_run(&e, fault_all_ops[i], 0, &attempts);
            if (r != BACKEND_E_UNAVAILABLE || attempts != 4 || fault_probe.starts != 4)
                fail_msg("op %d, transient %d: status %d after %u attempts (%u started)",
                         (int)fault_all_ops[i], transients[t], r, attempts, fault_probe.starts);
        }
    }
    assert_int_equal(e.be->stats.failures, runs);
    assert_int_equal(e.be->stats.retries, 3 * runs);
    assert_int_equal(e.be->stats.timeouts, 0);
    assert_int_equal(e.be->stats.puts, 2);
    assert_int_equal(e.be->stats.appends, 2);
    assert_int_equal(e.be->stats.lists, 2);
    assert_int_equal(e.be->stats.bytes_written, 0);

    /* One try in all means none repeated; 0 is taken as 1. */
    e.be->retry.attempts = 1;
    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    assert_int_equal(fault_run(&e, BACKEND_OP_HEAD, 0, &attempts), BACKEND_E_UNAVAILABLE);
    assert_int_equal(attempts, 1);
    e.be->retry.attempts = 0;
    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    assert_int_equal(fault_run(&e, BACKEND_OP_HEAD, 0, &attempts), BACKEND_E_UNAVAILABLE);
    assert_int_equal(attempts, 1);
    test_env_finish(&e);
}

/* Permanent errors and expected outcomes end the request at once. */
static void test_fe_no_retry(void **state)
{
    struct test_env e;
    unsigned attempts;

    fault_probe_reset(NULL, 0, 0);
    fault_env_open(&e, &fault_ops);
    for (size_t i = 0; i < ARRAY_SIZE(fault_all_ops); i++) {
        FAULT_SCRIPT(0, -EIO);
        assert_int_equal(fault_run(&e, fault_all_ops[i], 0, &attempts), -EIO);
        assert_int_equal(attempts, 1);
        assert_int_equal(fault_probe.starts, 1);
    }
    assert_int_equal(e.be->stats.failures, ARRAY_SIZE(fault_all_ops));

    /* Expected outcomes of a first attempt are the answer, and no failure. */
    FAULT_SCRIPT(0, BACKEND_E_NOT_FOUND);
    assert_int_equal(fault_run(&e, BACKEND_OP_GET, 0, &attempts), BACKEND_E_NOT_FOUND);
    assert_int_equal(attempts, 1);
    FAULT_SCRIPT(0, BACKEND_E_TOO_LARGE);
    assert_int_equal(fault_run(&e, BACKEND_OP_GET, 0, &attempts), BACKEND_E_TOO_LARGE);
    assert_int_equal(attempts, 1);
    FAULT_SCRIPT(0, BACKEND_E_NOT_FOUND);
    assert_int_equal(fault_run(&e, BACKEND_OP_DELETE, 0, &attempts), BACKEND_E_NOT_FOUND);
    FAULT_SCRIPT(0, BACKEND_E_EXISTS);
    assert_int_equal(fault_run(&e, BACKEND_OP_PUT, 0, &attempts), BACKEND_E_EXISTS);
    assert_int_equal(attempts, 1);
    FAULT_SCRIPT(0, BACKEND_E_EXISTS);
    assert_int_equal(fault_run(&e, BACKEND_OP_APPEND, 0, &attempts), BACKEND_E_EXISTS);
    assert_int_equal(e.be->stats.failures, ARRAY_SIZE(fault_all_ops));

    /* After a retry, only the outcomes that mean "the earlier attempt landed" change. */
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, BACKEND_E_NOT_FOUND);
    assert_int_equal(fault_run(&e, BACKEND_OP_GET, 0, &attempts), BACKEND_E_NOT_FOUND);
    assert_int_equal(attempts, 2);
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, BACKEND_E_NOT_FOUND);
    assert_int_equal(fault_run(&e, BACKEND_OP_HEAD, 0, &attempts), BACKEND_E_NOT_FOUND);
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, BACKEND_E_EXISTS);
    assert_int_equal(fault_run(&e, BACKEND_OP_APPEND, 5, &attempts), BACKEND_E_EXISTS);
    assert_int_equal(attempts, 2);
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, -EIO);
    assert_int_equal(fault_run(&e, BACKEND_OP_DELETE, 0, &attempts), -EIO);
    assert_int_equal(attempts, 2);
    test_env_finish(&e);
}

/* A put without BACKEND_PUT_CREATE that finds the key after a retry is not a create. */
static void test_fe_plain_put_exists_on_retry(void **state)
{
    struct test_env e;
    struct backend_put put = {0};
    struct test_done done;

    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, BACKEND_E_EXISTS);
    fault_env_open(&e, &fault_ops);
    test_req_init(&put.req, &done, "obj/key1");
    put.iov = &fault_payload;
    put.iovcnt = 1;
    assert_int_equal(test_start_put(e.be, &put), 0);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_EXISTS);
    assert_int_equal(put.req.attempts, 2);
    test_env_finish(&e);
}

static void test_fe_earlier_attempt_landed(void **state)
{
    struct test_env e;
    unsigned attempts;

    fault_probe_reset(NULL, 0, 0);
    fault_env_open(&e, &fault_ops);
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, BACKEND_E_NOT_FOUND);
    assert_int_equal(fault_run(&e, BACKEND_OP_DELETE, 0, &attempts), 0);
    assert_int_equal(attempts, 2);
    FAULT_SCRIPT(0, -ETIMEDOUT, BACKEND_E_EXISTS);
    assert_int_equal(fault_run(&e, BACKEND_OP_PUT, 0, &attempts), 0);
    assert_int_equal(attempts, 2);
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, BACKEND_E_UNAVAILABLE, BACKEND_E_EXISTS);
    assert_int_equal(fault_run(&e, BACKEND_OP_APPEND, 0, &attempts), 0);
    assert_int_equal(attempts, 3);
    assert_int_equal(e.be->stats.failures, 0);
    assert_int_equal(e.be->stats.bytes_written, 2 * fault_payload.iov_len);
    test_env_finish(&e);
}

/*
 * A put and an append of far more iovecs than IOV_MAX (a repack's, one per
 * record) are retried like any other: every attempt gets the caller's whole
 * array, and the bytes are counted once.
 */
enum { MANY_IOV = 5000 };

static struct iovec many_iov[MANY_IOV];
static unsigned many_seen;

static void check_many_iov(struct backend_req *req)
{
    const struct iovec *iov;
    size_t iovcnt;

    if (req->op == BACKEND_OP_PUT) {
        iov = container_of(req, struct backend_put, req)->iov;
        iovcnt = container_of(req, struct backend_put, req)->iovcnt;
    } else {
        iov = container_of(req, struct backend_append, req)->iov;
        iovcnt = container_of(req, struct backend_append, req)->iovcnt;
    }
    if (iov == many_iov && iovcnt == MANY_IOV)
        many_seen++;
}

static void test_fe_many_iovecs_retried(void **state)
{
    struct test_env e;
    union fault_req u;
    struct test_done done;
    uint64_t total = 0;

    for (size_t i = 0; i < MANY_IOV; i++) {
        many_iov[i] = (struct iovec){.iov_base = "0123456789", .iov_len = i % 11};
        total += i % 11;
    }
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, -ETIMEDOUT, 0, BACKEND_E_UNAVAILABLE, 0);
    fault_probe.on_start = check_many_iov;
    many_seen = 0;
    fault_env_open(&e, &fault_ops);
    fault_fill(&u, BACKEND_OP_PUT, &done, 0);
    u.put.iov = many_iov;
    u.put.iovcnt = MANY_IOV;
    assert_int_equal(test_start_put(e.be, &u.put), 0);
    test_wait(&e, &done);
    assert_int_equal(done.status, 0);
    assert_int_equal(u.put.req.attempts, 3);
    fault_fill(&u, BACKEND_OP_APPEND, &done, 16);
    u.app.iov = many_iov;
    u.app.iovcnt = MANY_IOV;
    assert_int_equal(test_start_append(e.be, &u.app), 0);
    test_wait(&e, &done);
    assert_int_equal(done.status, 0);
    assert_int_equal(u.app.req.attempts, 2);
    assert_int_equal(many_seen, 5);
    assert_int_equal(e.be->stats.retries, 3);
    assert_int_equal(e.be->stats.failures, 0);
    assert_int_equal(e.be->stats.bytes_written, 2 * total);
    test_env_finish(&e);
}

static void test_fe_start_refused(void **state)
{
    struct test_env e;
    union fault_req u;
    struct test_done done;
    unsigned attempts;

    /* Refused at once: start fails and the callback never comes. */
    FAULT_SCRIPT(0, FAULT_REFUSE);
    fault_env_open(&e, &fault_ops);
    assert_int_equal(fault_start_any(&e, &u, BACKEND_OP_GET, &done, 0), -EIO);
    assert_int_equal(e.be->inflight, 0);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(done.calls, 0);
    assert_int_equal(e.be->stats.gets, 0);

    /* Refused on a retry: the request ends with the refusal. */
    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, FAULT_REFUSE);
    assert_int_equal(fault_run(&e, BACKEND_OP_GET, 0, &attempts), -EIO);
    assert_int_equal(attempts, 2);
    assert_int_equal(e.be->stats.gets, 1);
    assert_int_equal(e.be->stats.failures, 1);
    test_env_finish(&e);
}

/* ---- backoff -------------------------------------------------------------------- */

enum { MAX_TRACE = 8 };

/* A get that records, per attempt, when it started and ended on the loop's clock. */
struct traced {
    struct backend_get get;
    struct test_done done;
    unsigned n;
    uint64_t start_ms[MAX_TRACE], retry_at_ms[MAX_TRACE], end_ms[MAX_TRACE];
    uint64_t start_ns[MAX_TRACE];
};

static void trace_start(struct backend_req *req)
{
    struct traced *t = container_of(req, struct traced, get.req);

    assert_true(t->n < MAX_TRACE);
    t->start_ms[t->n] = uv_now(req->be->loop);
    t->start_ns[t->n] = uv_hrtime();
    t->retry_at_ms[t->n] = req->retry_at_ms;
}

static void trace_complete(struct backend_req *req)
{
    struct traced *t = container_of(req, struct traced, get.req);

    t->end_ms[t->n] = uv_now(req->be->loop);
    t->n++;
}

static void start_traced(struct test_env *e, struct traced *t)
{
    memset(t, 0, sizeof(*t));
    test_req_init(&t->get.req, &t->done, "obj/key1");
    t->get.length = BACKEND_TO_END;
    t->get.max_len = 100;
    assert_int_equal(test_start_get(e->be, &t->get), 0);
}

/* The delay drawn before try n + 1 (n >= 1, 0-based index n). */
static uint64_t drawn_delay(const struct traced *t, unsigned n)
{
    assert_true(t->retry_at_ms[n] >= t->end_ms[n - 1]);
    return t->retry_at_ms[n] - t->end_ms[n - 1];
}

static void test_fe_backoff_bounds(void **state)
{
    /* d = min(8 * 2^(n-2), 20) for tries 2..5. */
    static const uint64_t cap[] = {0, 8, 16, 20, 20};
    struct test_env e;
    struct traced t;

    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    fault_probe.on_start = trace_start;
    fault_probe.on_complete = trace_complete;
    fault_env_open(&e, &fault_ops);
    e.be->retry = (struct backend_retry){.attempts = 5, .backoff_ms = 8, .backoff_max_ms = 20};
    start_traced(&e, &t);
    test_wait(&e, &t.done);
    assert_int_equal(t.done.status, BACKEND_E_UNAVAILABLE);
    assert_int_equal(t.n, 5);
    for (unsigned n = 1; n < 5; n++) {
        uint64_t delay = drawn_delay(&t, n);
        if (delay < cap[n] / 2 || delay > cap[n])
            fail_msg("try %u: delay %llu outside [%llu, %llu]", n + 1, (unsigned long long)delay,
                     (unsigned long long)cap[n] / 2, (unsigned long long)cap[n]);
        /*
         * The try really waited: the loop's clock is the real clock in whole
         * milliseconds, and the timer fires only once it reaches the retry time.
         */
        assert_true(t.start_ms[n] >= t.retry_at_ms[n]);
        assert_true(t.start_ns[n] >= t.retry_at_ms[n] * 1000000);
    }
    test_env_finish(&e);
}

/* Concurrent retries draw different delays, so that they do not stampede together. */
static void test_fe_backoff_jitter(void **state)
{
    enum { N = 8 };
    struct test_env e;
    static struct traced t[N];
    uint64_t first = 0;
    bool differ = false;

    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    fault_probe.on_start = trace_start;
    fault_probe.on_complete = trace_complete;
    fault_env_open(&e, &fault_ops);
    e.be->retry = (struct backend_retry){.attempts = 2, .backoff_ms = 40, .backoff_max_ms = 40};
    for (int i = 0; i < N; i++)
        start_traced(&e, &t[i]);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(t[i].done.calls, 1);
        assert_int_equal(t[i].n, 2);
        uint64_t delay = drawn_delay(&t[i], 1);
        assert_true(delay >= 20 && delay <= 40);
        if (i == 0)
            first = delay;
        else if (delay != first)
            differ = true;
    }
    assert_true(differ);
    test_env_finish(&e);
}

/* Full jitter draws from [0, d]: over many draws, some fall below d/2. */
static void test_fe_backoff_full_jitter(void **state)
{
    enum { N = 16 };
    struct test_env e;
    static struct traced t[N];
    bool below_half = false;

    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    fault_probe.on_start = trace_start;
    fault_probe.on_complete = trace_complete;
    fault_env_open(&e, &fault_ops);
    e.be->retry = (struct backend_retry){
        .attempts = 2, .backoff_ms = 40, .backoff_max_ms = 40, .full_jitter = true};
    for (int i = 0; i < N; i++)
        start_traced(&e, &t[i]);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    for (int i = 0; i < N; i++) {
        uint64_t delay = drawn_delay(&t[i], 1);
        assert_true(delay <= 40);
        if (delay < 20)
            below_half = true;
    }
    /* The chance that 16 uniform draws in [0, 40] all land in [20, 40] is 2^-16. */
    assert_true(below_half);
    test_env_finish(&e);
}

static void ask_for_200ms(struct backend_req *req)
{
    trace_complete(req);
    req->retry_after_ms = 200;
}

/* A server's Retry-After longer than the backoff is waited out. */
static void test_fe_retry_after(void **state)
{
    struct test_env e;
    struct traced t;

    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, 0);
    fault_probe.on_start = trace_start;
    fault_probe.on_complete = ask_for_200ms;
    fault_env_open(&e, &fault_ops);
    e.be->retry = (struct backend_retry){.attempts = 3, .backoff_ms = 5, .backoff_max_ms = 5};
    start_traced(&e, &t);
    test_wait(&e, &t.done);
    assert_int_equal(t.done.status, 0);
    assert_int_equal(t.n, 2);
    assert_true(drawn_delay(&t, 1) >= 200);
    backend_get_reset(&t.get);
    test_env_finish(&e);
}

/* ---- timeouts ------------------------------------------------------------------- */

static void test_fe_timeout_cancels_attempt(void **state)
{
    struct test_env e;
    struct backend_get get;
    struct test_done done;
    uint64_t started;

    FAULT_SCRIPT(0, FAULT_HANG);
    fault_env_open(&e, &fault_ops);
    fault_start_get(&e, &get, &done, 30, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_true(done.at_ms >= started + 30);
    assert_int_equal(fault_probe.cancels, 1);
    assert_int_equal(get.req.attempts, 1);
    assert_null(get.out);
    assert_int_equal(e.be->stats.timeouts, 1);
    assert_int_equal(e.be->stats.failures, 1);

    /* The backend's default applies when the request has none... */
    FAULT_SCRIPT(0, FAULT_HANG);
    e.be->retry.timeout_ms = 25;
    fault_start_get(&e, &get, &done, 0, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_true(done.at_ms >= started + 25);
    assert_int_equal(fault_probe.cancels, 1);
    /* ...and the request's own overrides it. */
    FAULT_SCRIPT(0, FAULT_HANG);
    e.be->retry.timeout_ms = 60000;
    fault_start_get(&e, &get, &done, 20, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_true(done.at_ms >= started + 20 && done.at_ms < started + 30000);
    assert_int_equal(e.be->stats.timeouts, 3);
    test_env_finish(&e);
}

/* An attempt that could not be stopped in time and succeeded anyway is a success. */
static void test_fe_timeout_success_anyway(void **state)
{
    struct test_env e;
    struct backend_get get;
    struct test_done done;
    uint64_t started;

    FAULT_SCRIPT(0, FAULT_SLOW);
    fault_probe.slow_ms = 60;
    fault_probe.slow_status = 0;
    fault_env_open(&e, &fault_nocancel_ops);
    fault_start_get(&e, &get, &done, 15, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, 0);
    assert_true(done.at_ms >= started + 60);
    assert_int_equal(get.out_len, 5);
    backend_get_reset(&get);
    assert_int_equal(e.be->stats.timeouts, 0);

    /* Failing late instead: a timeout, and no retry after it, transient or not. */
    FAULT_SCRIPT(0, FAULT_SLOW);
    fault_probe.slow_ms = 40;
    fault_probe.slow_status = -EIO;
    fault_start_get(&e, &get, &done, 15, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_true(done.at_ms >= started + 40);
    FAULT_SCRIPT(0, FAULT_SLOW, 0);
    fault_probe.slow_ms = 40;
    fault_probe.slow_status = BACKEND_E_UNAVAILABLE;
    fault_start_get(&e, &get, &done, 15, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_int_equal(get.req.attempts, 1);
    assert_int_equal(e.be->stats.timeouts, 2);
    test_env_finish(&e);

    /* A backend that can cancel is asked to, once, even if the attempt then succeeds. */
    FAULT_SCRIPT(0, FAULT_SLOW);
    fault_probe.slow_ms = 40;
    fault_probe.slow_status = 0;
    fault_env_open(&e, &fault_ops);
    fault_start_get(&e, &get, &done, 10, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, 0);
    assert_int_equal(fault_probe.cancels, 1);
    backend_get_reset(&get);
    test_env_finish(&e);
}

/* A retry that could only start after the deadline is not waited for. */
static void test_fe_deadline_cuts_backoff(void **state)
{
    struct test_env e;
    struct backend_get get;
    struct test_done done;
    uint64_t started;

    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    fault_env_open(&e, &fault_ops);
    e.be->retry = (struct backend_retry){.attempts = 5, .backoff_ms = 1000, .backoff_max_ms = 5000};
    fault_start_get(&e, &get, &done, 200, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_int_equal(get.req.attempts, 1);
    /* Sooner than the shortest delay it could have drawn (1000 / 2). */
    assert_true(done.at_ms < started + 500);
    assert_int_equal(e.be->stats.timeouts, 1);
    assert_int_equal(e.be->stats.retries, 0);

    /* Retries that fit before the deadline all happen; running out of them is no timeout. */
    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    e.be->retry = (struct backend_retry){.attempts = 4, .backoff_ms = 1, .backoff_max_ms = 2};
    fault_start_get(&e, &get, &done, 5000, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_int_equal(get.req.attempts, 4);
    assert_int_equal(e.be->stats.timeouts, 1);
    test_env_finish(&e);
}

static void stall_loop(struct backend_req *req)
{
    usleep(60 * 1000);
}

/* The deadline passes while the request waits to retry (here: the loop was stalled). */
static void test_fe_deadline_while_waiting(void **state)
{
    struct test_env e;
    struct backend_get get;
    struct test_done done;
    uint64_t started;

    fault_probe_reset(NULL, 0, BACKEND_E_UNAVAILABLE);
    fault_probe.on_complete = stall_loop;
    fault_env_open(&e, &fault_ops);
    e.be->retry = (struct backend_retry){.attempts = 5, .backoff_ms = 10, .backoff_max_ms = 20};
    fault_start_get(&e, &get, &done, 40, &started);
    test_wait(&e, &done);
    assert_int_equal(done.status, BACKEND_E_UNAVAILABLE);
    assert_int_equal(get.req.attempts, 1);
    assert_int_equal(fault_probe.starts, 1);
    assert_true(get.req.retry_at_ms > 0 && get.req.retry_at_ms < get.req.deadline_ms);
    assert_int_equal(e.be->stats.timeouts, 1);
    test_env_finish(&e);
}

/* ---- cancellation --------------------------------------------------------------- */

struct canceller {
    uv_timer_t timer;
    struct backend_req *req;
    int calls_before; /* the request's callbacks before backend_cancel returned */
};

static void on_cancel_timer(uv_timer_t *timer)
{
    struct canceller *c = container_of(timer, struct canceller, timer);
    struct test_done *done = c->req->userdata;

    test_in_call = true;
    backend_cancel(c->req);
    backend_cancel(c->req); /* twice is harmless */
    test_in_call = false;
    c->calls_before = done->calls;
}

static void cancel_after(struct test_env *e, struct canceller *c, struct backend_req *req,
                         uint64_t ms)
{
    c->req = req;
    c->calls_before = -1;
    assert_int_equal(uv_timer_init(&e->loop, &c->timer), 0);
    assert_int_equal(uv_timer_start(&c->timer, on_cancel_timer, ms, 0), 0);
}

/* Closes the canceller's timer and lets the loop finish that, so the struct can be reused. */
static void cancel_done(struct test_env *e, struct canceller *c)
{
    uv_close((uv_handle_t *)&c->timer, NULL);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
}

static void test_fe_cancel_waiting(void **state)
{
    struct test_env e;
    struct backend_get get;
    struct test_done done;
    struct canceller c;
    uint64_t started;

    FAULT_SCRIPT(0, BACKEND_E_UNAVAILABLE, 0);
    fault_env_open(&e, &fault_ops);
    e.be->retry = (struct backend_retry){.attempts = 5, .backoff_ms = 2000, .backoff_max_ms = 2000};
    fault_start_get(&e, &get, &done, 0, &started);
    cancel_after(&e, &c, &get.req, 20);
    test_wait(&e, &done);
    assert_int_equal(c.calls_before, 0);
    assert_int_equal(done.status, -ECANCELED);
    assert_true(done.at_ms < started + 1000);
    assert_int_equal(get.req.attempts, 1);
    assert_int_equal(fault_probe.starts, 1);
    assert_null(get.out);
    /* The caller's cancel is no failure of the backend. */
    assert_int_equal(e.be->stats.failures, 0);
    assert_int_equal(e.be->stats.retries, 0);
    cancel_done(&e, &c);
    test_env_finish(&e);
}

static void test_fe_cancel_running(void **state)
{
    struct test_env e;
    struct backend_get get;
    struct test_done done;
    struct canceller c;
    uint64_t started;

    /* The backend stops the attempt. */
    FAULT_SCRIPT(0, FAULT_HANG);
    fault_env_open(&e, &fault_ops);
    fault_start_get(&e, &get, &done, 0, &started);
    cancel_after(&e, &c, &get.req, 10);
    test_wait(&e, &done);
    assert_int_equal(c.calls_before, 0);
    assert_int_equal(done.status, -ECANCELED);
    assert_int_equal(fault_probe.cancels, 1);
    cancel_done(&e, &c);

    /* The attempt finishes anyway: its result stands. */
    FAULT_SCRIPT(0, FAULT_SLOW);
    fault_probe.slow_ms = 30;
    fault_start_get(&e, &get, &done, 0, &started);
    cancel_after(&e, &c, &get.req, 5);
    test_wait(&e, &done);
    assert_int_equal(done.status, 0);
    assert_int_equal(fault_probe.cancels, 1);
    backend_get_reset(&get);
    cancel_done(&e, &c);

    /* A transient failure of a cancelled request is not retried. */
    FAULT_SCRIPT(0, FAULT_SLOW, 0);
    fault_probe.slow_ms = 30;
    fault_probe.slow_status = BACKEND_E_UNAVAILABLE;
    fault_start_get(&e, &get, &done, 0, &started);
    cancel_after(&e, &c, &get.req, 5);
    test_wait(&e, &done);
    assert_int_equal(done.status, -ECANCELED);
    assert_int_equal(get.req.attempts, 1);
    assert_int_equal(e.be->stats.failures, 0);
    cancel_done(&e, &c);
    test_env_finish(&e);
}

int test_retry_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fe_retry_then_success),
        cmocka_unit_test(test_fe_retries_exhausted),
        cmocka_unit_test(test_fe_no_retry),
        cmocka_unit_test(test_fe_plain_put_exists_on_retry),
        cmocka_unit_test(test_fe_earlier_attempt_landed),
        cmocka_unit_test(test_fe_start_refused),
        cmocka_unit_test(test_fe_many_iovecs_retried),
        cmocka_unit_test(test_fe_backoff_bounds),
        cmocka_unit_test(test_fe_backoff_jitter),
        cmocka_unit_test(test_fe_backoff_full_jitter),
        cmocka_unit_test(test_fe_retry_after),
        cmocka_unit_test(test_fe_timeout_cancels_attempt),
        cmocka_unit_test(test_fe_timeout_success_anyway),
        cmocka_unit_test(test_fe_deadline_cuts_backoff),
        cmocka_unit_test(test_fe_deadline_while_waiting),
        cmocka_unit_test(test_fe_cancel_waiting),
        cmocka_unit_test(test_fe_cancel_running),
    };
    return cmocka_run_group_tests_name("backend retries and timeouts", tests, NULL, NULL);
}
