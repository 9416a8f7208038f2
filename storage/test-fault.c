/*
 * The fault backend of the front-end tests; see test-fault.h.
 */
#include "storage/test-fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fault_probe fault_probe;

struct fault {
    struct backend *be;
    struct backend_req *ready, *ready_tail; /* to complete on the next loop iteration */
    struct backend_req *hung;
    struct backend_req *slow;
    uv_idle_t idle;
    uv_timer_t slow_timer;
    int open_handles;
};

void fault_probe_reset(const int *script, size_t len, int rest)
{
    memset(&fault_probe, 0, sizeof(fault_probe));
    fault_probe.script = script;
    fault_probe.script_len = len;
    fault_probe.rest = rest;
}

/* What a successful attempt returns, so that the front end has results to pass or drop. */
static void fault_succeed(struct backend_req *req)
{
    if (req->op == BACKEND_OP_GET) {
        struct backend_get *get = container_of(req, struct backend_get, req);
        get->out = malloc(5);
        assert_non_null(get->out);
        memcpy(get->out, "hello", 5);
        get->out_len = 5;
    } else if (req->op == BACKEND_OP_HEAD) {
        container_of(req, struct backend_head, req)->size = 42;
    } else if (req->op == BACKEND_OP_LIST) {
        struct backend_list *list = container_of(req, struct backend_list, req);
        list->entries = calloc(1, sizeof(*list->entries));
        assert_non_null(list->entries);
        strcpy(list->entries[0].key, "x/yy");
        list->nentries = 1;
    }
}

static void fault_complete(struct backend_req *req, int status)
{
    if (status == 0)
        fault_succeed(req);
    req->status = status;
    if (fault_probe.on_complete)
        fault_probe.on_complete(req);
    backend_complete(req);
}

static void on_idle(uv_idle_t *idle)
{
    struct fault *f = container_of(idle, struct fault, idle);
    struct backend_req *req = f->ready, *next;

    /* Detached first: completions may start attempts that queue up for the next round. */
    f->ready = f->ready_tail = NULL;
    uv_idle_stop(idle);
    for (; req; req = next) {
        next = req->next_;
        req->next_ = NULL;
        fault_complete(req, req->status);
    }
}

static void queue_ready(struct fault *f, struct backend_req *req, int status)
{
    req->status = status;
    req->next_ = NULL;
    if (f->ready_tail)
        f->ready_tail->next_ = req;
    else
        f->ready = req;
    f->ready_tail = req;
    uv_idle_start(&f->idle, on_idle);
}

static void on_slow(uv_timer_t *timer)
{
    struct fault *f = container_of(timer, struct fault, slow_timer);
    struct backend_req *req = f->slow;

    f->slow = NULL;
    fault_complete(req, fault_probe.slow_status);
}

static int fault_start(struct backend *be, struct backend_req *req)
{
    struct fault *f = be->priv;
    int outcome = fault_probe.starts < fault_probe.script_len
                      ? fault_probe.script[fault_probe.starts]
                      : fault_probe.rest;

    fault_probe.starts++;
    if (fault_probe.on_start)
        fault_probe.on_start(req);
    switch (outcome) {
    case FAULT_REFUSE:
        return -EIO;
    case FAULT_HANG:
        req->next_ = f->hung;
        f->hung = req;
        return 0;
    case FAULT_SLOW:
        assert_null(f->slow);
        f->slow = req;
        uv_timer_start(&f->slow_timer, on_slow, fault_probe.slow_ms, 0);
        return 0;
    default:
        queue_ready(f, req, outcome);
        return 0;
    }
}

static void fault_cancel(struct backend *be, struct backend_req *req)
{
    struct fault *f = be->priv;

    fault_probe.cancels++;
    for (struct backend_req **pp = &f->hung; *pp; pp = &(*pp)->next_) {
        if (*pp == req) {
            *pp = req->next_;
            queue_ready(f, req, -ECANCELED);
            return;
        }
    }
}

static int fault_open(struct backend *be, const char *url, const char **msg)
{
    struct fault *f = be->priv;

    fault_probe.opens++;
    snprintf(fault_probe.url, sizeof(fault_probe.url), "%s", url);
    if (fault_probe.open_status < 0) {
        if (fault_probe.open_status != -EPERM)
            *msg = "fault: refused";
        return fault_probe.open_status;
    }
    f->be = be;
    uv_idle_init(be->loop, &f->idle);
    uv_timer_init(be->loop, &f->slow_timer);
    f->open_handles = 2;
    return 0;
}

static void on_fault_closed(uv_handle_t *handle)
{
    struct fault *f = handle->data;

    if (--f->open_handles == 0) {
        fault_probe.closes++;
        backend_release(f->be);
    }
}

static void fault_close(struct backend *be)
{
    struct fault *f = be->priv;

    fault_probe.timer_closing_at_close = uv_is_closing((uv_handle_t *)&be->timer);
    assert_null(f->ready);
    assert_null(f->hung);
    assert_null(f->slow);
    f->idle.data = f;
    f->slow_timer.data = f;
    uv_close((uv_handle_t *)&f->idle, on_fault_closed);
    uv_close((uv_handle_t *)&f->slow_timer, on_fault_closed);
}

static void fault_describe(struct backend *be, char *out, size_t out_len)
{
    snprintf(out, out_len, "fault:%s", fault_probe.url);
}

const struct backend_ops fault_ops = {
    .name = "fault",
    .caps = BACKEND_CAP_APPEND,
    .priv_size = sizeof(struct fault),
    .open = fault_open,
    .close = fault_close,
    .put = fault_start,
    .get = fault_start,
    .head = fault_start,
    .del = fault_start,
    .list = fault_start,
    .append = fault_start,
    .cancel = fault_cancel,
    .describe = fault_describe,
};

const struct backend_ops fault_nocancel_ops = {
    .name = "fault",
    .caps = BACKEND_CAP_APPEND,
    .priv_size = sizeof(struct fault),
    .open = fault_open,
    .close = fault_close,
    .put = fault_start,
    .get = fault_start,
    .head = fault_start,
    .del = fault_start,
    .list = fault_start,
    .append = fault_start,
    .describe = fault_describe,
};

const struct backend_ops fault_bare_ops = {
    .name = "fault",
    .caps = 0,
    .priv_size = sizeof(struct fault),
    .open = fault_open,
    .close = fault_close,
    .put = fault_start,
    .get = fault_start,
    .head = fault_start,
    .del = fault_start,
    .append = fault_start, /* present, but the capability is not */
    .cancel = fault_cancel,
    .describe = fault_describe,
};

void fault_env_open(struct test_env *e, const struct backend_ops *ops)
{
    const char *msg = "sentinel";

    test_env_init(e);
    assert_int_equal(backend_new_ops(&e->be, &e->loop, ops, "fault:test", &msg), 0);
    assert_null(msg);
    e->be->retry.backoff_ms = 1;
    e->be->retry.backoff_max_ms = 2;
    e->be->rng = 12345;
}

const enum backend_op fault_all_ops[6] = {BACKEND_OP_PUT,    BACKEND_OP_GET,  BACKEND_OP_HEAD,
                                          BACKEND_OP_DELETE, BACKEND_OP_LIST, BACKEND_OP_APPEND};

struct iovec fault_payload = {.iov_base = "payload", .iov_len = 7};

void fault_fill(union fault_req *u, enum backend_op op, struct test_done *done, uint64_t offset)
{
    memset(u, 0, sizeof(*u));
    /* Every kind begins with its struct backend_req, so any member reaches it. */
    test_req_init(&u->get.req, done, op == BACKEND_OP_LIST ? "obj/" : "obj/key1");
    switch (op) {
    case BACKEND_OP_PUT:
        u->put.iov = &fault_payload;
        u->put.iovcnt = 1;
        u->put.flags = BACKEND_PUT_CREATE;
        break;
    case BACKEND_OP_GET:
        u->get.length = BACKEND_TO_END;
        u->get.max_len = 100;
        break;
    case BACKEND_OP_APPEND:
        u->app.offset = offset;
        u->app.iov = &fault_payload;
        u->app.iovcnt = 1;
        break;
    default:
        break;
    }
}

int fault_start_filled(struct test_env *e, union fault_req *u, enum backend_op op)
{
    switch (op) {
    case BACKEND_OP_PUT:
        return test_start_put(e->be, &u->put);
    case BACKEND_OP_GET:
        return test_start_get(e->be, &u->get);
    case BACKEND_OP_HEAD:
        return test_start_head(e->be, &u->head);
    case BACKEND_OP_DELETE:
        return test_start_del(e->be, &u->del);
    case BACKEND_OP_LIST:
        return test_start_list(e->be, &u->list);
    case BACKEND_OP_APPEND:
        return test_start_append(e->be, &u->app);
    }
    return 0;
}

int fault_start_any(struct test_env *e, union fault_req *u, enum backend_op op,
                    struct test_done *done, uint64_t offset)
{
    fault_fill(u, op, done, offset);
    return fault_start_filled(e, u, op);
}

int fault_run(struct test_env *e, enum backend_op op, uint64_t offset, unsigned *attempts)
{
    union fault_req u;
    struct test_done done;

    assert_int_equal(fault_start_any(e, &u, op, &done, offset), 0);
    test_wait(e, &done);
    *attempts = u.get.req.attempts;
    if (op == BACKEND_OP_GET && done.status == 0) {
        assert_int_equal(u.get.out_len, 5);
        assert_memory_equal(u.get.out, "hello", 5);
    } else if (op == BACKEND_OP_GET) {
        assert_null(u.get.out);
    }
    if (op == BACKEND_OP_LIST && done.status == 0)
        assert_int_equal(u.list.nentries, 1);
    else if (op == BACKEND_OP_LIST)
        assert_null(u.list.entries);
    backend_get_reset(&u.get);
    if (op == BACKEND_OP_LIST)
        backend_list_reset(&u.list);
    return done.status;
}

void fault_start_get(struct test_env *e, struct backend_get *get, struct test_done *done,
                     uint32_t timeout_ms, uint64_t *started)
{
    memset(get, 0, sizeof(*get));
    test_req_init(&get->req, done, "obj/key1");
    get->req.timeout_ms = timeout_ms;
    get->length = BACKEND_TO_END;
    get->max_len = 100;
    uv_update_time(&e->loop);
    *started = uv_now(&e->loop);
    assert_int_equal(test_start_get(e->be, get), 0);
}
