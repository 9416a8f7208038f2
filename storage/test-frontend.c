/*
 * Unit tests of the backend front end other than retries and timeouts:
 * opening and closing, exactly-once callbacks (also when one frees the
 * backend), key and argument checks, and capabilities, mostly against the
 * fault backend (test-fault.c); main() also runs the tests of retries and
 * timeouts (test-retry.c). Every test ends with the backend freed, all
 * handles closed, uv_loop_close() == 0 and the temporary directory removed.
 */
#include "storage/test-fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- opening and closing -------------------------------------------------------- */

static void test_fe_new_ops(void **state)
{
    struct test_env e;
    struct backend *be = (struct backend *)&e;
    const char *msg;
    char desc[64];

    fault_probe_reset(NULL, 0, 0);
    test_env_init(&e);
    msg = "sentinel";
    assert_int_equal(backend_new_ops(&e.be, &e.loop, &fault_ops, "fault:some/where", &msg), 0);
    assert_null(msg);
    assert_int_equal(fault_probe.opens, 1);
    assert_string_equal(fault_probe.url, "fault:some/where");
    assert_ptr_equal(e.be->ops, &fault_ops);
    assert_non_null(e.be->priv);
    assert_int_equal(e.be->retry.attempts, BACKEND_DEFAULT_ATTEMPTS);
    assert_int_equal(e.be->retry.backoff_ms, BACKEND_DEFAULT_BACKOFF_MS);
    assert_int_equal(e.be->retry.backoff_max_ms, BACKEND_DEFAULT_BACKOFF_MAX_MS);
    assert_int_equal(e.be->retry.timeout_ms, 0);
    assert_int_not_equal(e.be->rng, 0);
    e.be->ops->describe(e.be, desc, sizeof(desc));
    assert_string_equal(desc, "fault:fault:some/where");

    /* The scheme lookup does not know test backends. */
    msg = NULL;
    assert_int_equal(backend_new(&be, &e.loop, "fault:test", &msg), -EINVAL);
    assert_non_null(msg);
    assert_ptr_equal(be, (struct backend *)&e);

    /* The backend is closed after the front end's timer, never inside backend_free. */
    e.be = backend_free(e.be);
    assert_null(e.be);
    assert_int_equal(fault_probe.closes, 0);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(fault_probe.closes, 1);
    assert_true(fault_probe.timer_closing_at_close);

    /* A failed open: its error and message, or a generic message; nothing to free. */
    fault_probe.open_status = -EACCES;
    msg = NULL;
    assert_int_equal(backend_new_ops(&be, &e.loop, &fault_ops, "fault:x", &msg), -EACCES);
    assert_string_equal(msg, "fault: refused");
    assert_ptr_equal(be, (struct backend *)&e);
    fault_probe.open_status = -EPERM;
    msg = NULL;
    assert_int_equal(backend_new_ops(&be, &e.loop, &fault_ops, "fault:x", &msg), -EPERM);
    assert_non_null(msg);
    assert_ptr_equal(be, (struct backend *)&e);
    test_env_finish(&e);
}

/* ---- callbacks ------------------------------------------------------------------- */

struct freer {
    struct backend_get get;
    struct test_env *env;
    int calls;
    int status;
};

static void free_in_callback(struct backend_req *req)
{
    struct freer *f = container_of(req, struct freer, get.req);

    f->calls++;
    f->status = req->status;
    assert_int_equal(f->env->be->inflight, 0);
    f->env->be = backend_free(f->env->be);
}

/*
 * The last callback may free the backend: from the front end's timer (a
 * retry that the backend refuses to start) and from the backend's completion.
 */
static void test_fe_free_from_callback(void **state)
{
    static const int via_timer[] = {BACKEND_E_UNAVAILABLE, FAULT_REFUSE};
    static const int via_backend[] = {0};
    static const struct {
        const int *script;
        size_t len;
        int status;
    } cases[] = {{via_timer, ARRAY_SIZE(via_timer), -EIO}, {via_backend, 1, 0}};
    struct test_env e;
    struct freer f;

    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        fault_probe_reset(cases[i].script, cases[i].len, 0);
        fault_env_open(&e, &fault_ops);
        memset(&f, 0, sizeof(f));
        f.env = &e;
        strcpy(f.get.req.key, "obj/key1");
        f.get.req.cb = free_in_callback;
        f.get.req.timeout_ms = 100;
        f.get.length = BACKEND_TO_END;
        f.get.max_len = 10;
        assert_int_equal(backend_get(e.be, &f.get), 0);
        assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
        assert_int_equal(f.calls, 1);
        assert_int_equal(f.status, cases[i].status);
        assert_null(e.be);
        assert_int_equal(fault_probe.closes, 1);
        backend_get_reset(&f.get);
        test_env_finish(&e);
    }
}

/* Many requests at once: every callback exactly once, none inside a start call. */
static void test_fe_many_in_flight(void **state)
{
    enum { N = 60 };
    struct test_env e;
    static union fault_req u[N];
    static struct test_done done[N];
    static int script[N];

    /* The first attempt of every third request fails; half of them have deadlines. */
    for (int i = 0; i < N; i++)
        script[i] = i % 3 == 0 ? BACKEND_E_UNAVAILABLE : 0;
    fault_probe_reset(script, N, 0);
    fault_env_open(&e, &fault_ops);
    for (int i = 0; i < N; i++) {
        e.be->retry.timeout_ms = i % 2 ? 10000 : 0;
        assert_int_equal(
            fault_start_any(&e, &u[i], fault_all_ops[i % ARRAY_SIZE(fault_all_ops)], &done[i], 0),
            0);
    }
    assert_non_null(e.be->waiting);
    assert_int_equal(e.be->inflight, N);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(done[i].calls, 1);
        assert_int_equal(done[i].status, 0);
        assert_int_equal(u[i].get.req.attempts, i % 3 == 0 ? 2 : 1);
    }
    assert_int_equal(e.be->stats.retries, N / 3);
    assert_int_equal(e.be->inflight, 0);
    assert_null(e.be->waiting);
    assert_int_equal(e.be->stats.puts + e.be->stats.gets + e.be->stats.heads + e.be->stats.deletes +
                         e.be->stats.lists + e.be->stats.appends,
                     N);
    for (int i = 0; i < N; i++) {
        if (fault_all_ops[i % ARRAY_SIZE(fault_all_ops)] == BACKEND_OP_GET)
            backend_get_reset(&u[i].get);
        if (fault_all_ops[i % ARRAY_SIZE(fault_all_ops)] == BACKEND_OP_LIST)
            backend_list_reset(&u[i].list);
    }
    test_env_finish(&e);
}

/* ---- keys and arguments ------------------------------------------------------------ */

static void test_fe_key_valid(void **state)
{
    char longest[BACKEND_MAX_KEY], too_long[BACKEND_MAX_KEY + 1];
    static const char *const good[] = {
        "chunks/ab",
        "chunks/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "packs/000000000000002a",
        "a/bc",
        "x-y_z.w/ab.c-d_e",
        "chunks/a.",
        "chunks/a..",
    };
    static const char *const bad[] = {
        "",
        "noslash",
        "a/b/c",
        "../x",
        "A/BC",
        "chunks/.",
        "chunks/..",
        "chunks/.ab",
        "chunks/a",
        "/abc",
        "/",
        "chunks/",
        "chunks/AB",
        "Chunks/ab",
        "chunks/a b",
        "chunks/ab\n",
        "chunks/ab/",
        "chunks//ab",
        "chunks/a\\b",
        "chunks/\xc3\xa9t",
        "chunks/ab:c",
        "chunks/ab*",
        "../xy",
        "./ab",
        "../../etc/passwd",
        "..",
        ".hidden/ab",
    };

    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        if (!backend_key_valid(good[i]))
            fail_msg("\"%s\" rejected", good[i]);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (backend_key_valid(bad[i]))
            fail_msg("\"%s\" accepted", bad[i]);
    }
    memset(longest, 'a', sizeof(longest));
    memcpy(longest, "chunks/", 7);
    longest[sizeof(longest) - 1] = '\0';
    assert_true(backend_key_valid(longest));
    memset(too_long, 'a', sizeof(too_long));
    memcpy(too_long, "chunks/", 7);
    too_long[sizeof(too_long) - 1] = '\0';
    assert_false(backend_key_valid(too_long));
}

static void expect_refused(struct test_env *e, union fault_req *u, enum backend_op op, int want,
                           const char *what)
{
    int r = fault_start_filled(e, u, op);

    if (r != want)
        fail_msg("%s: got %d, want %d", what, r, want);
}

static void test_fe_arguments(void **state)
{
    static const char *const bad_keys[] = {"", "noslash", "a/b/c", "../x", "A/BC", "chunks/."};
    static const char *const bad_prefixes[] = {"",    "obj",  "obj/x", "/",   "a/b/",
                                               ".x/", "OBJ/", "obj//", "../", "o bj/"};
    static struct iovec many[IOV_MAX + 1];
    struct test_env e;
    union fault_req u;
    struct test_done done;
    uint8_t buf[8];
    size_t got = 7;

    fault_probe_reset(NULL, 0, 0);
    fault_env_open(&e, &fault_ops);
    for (size_t k = 0; k < ARRAY_SIZE(bad_keys); k++) {
        for (size_t i = 0; i < ARRAY_SIZE(fault_all_ops); i++) {
            if (fault_all_ops[i] == BACKEND_OP_LIST)
                continue;
            fault_fill(&u, fault_all_ops[i], &done, 0);
            strcpy(u.get.req.key, bad_keys[k]);
            expect_refused(&e, &u, fault_all_ops[i], -EINVAL, bad_keys[k]);
        }
    }
    for (size_t k = 0; k < ARRAY_SIZE(bad_prefixes); k++) {
        memset(&u, 0, sizeof(u));
        test_req_init(&u.list.req, &done, bad_prefixes[k]);
        expect_refused(&e, &u, BACKEND_OP_LIST, -EINVAL, bad_prefixes[k]);
    }
    /* Lists: page size and cursor. */
    memset(&u, 0, sizeof(u));
    test_req_init(&u.list.req, &done, "obj/");
    u.list.max_keys = BACKEND_LIST_MAX + 1;
    expect_refused(&e, &u, BACKEND_OP_LIST, -EINVAL, "max_keys");
    u.list.max_keys = 0;
    memset(u.list.cursor, 'a', sizeof(u.list.cursor));
    expect_refused(&e, &u, BACKEND_OP_LIST, -EINVAL, "unterminated cursor");

    /* Puts and appends: the iovec array and flags (their number is no limit). */
    memset(&u, 0, sizeof(u));
    test_req_init(&u.put.req, &done, "obj/key1");
    u.put.iov = NULL;
    u.put.iovcnt = 1;
    expect_refused(&e, &u, BACKEND_OP_PUT, -EINVAL, "NULL iov");
    u.put.iov = many;
    many[0] = (struct iovec){.iov_base = NULL, .iov_len = 3};
    expect_refused(&e, &u, BACKEND_OP_PUT, -EINVAL, "NULL iov_base");
    many[0] = (struct iovec){.iov_base = "x", .iov_len = SIZE_MAX};
    expect_refused(&e, &u, BACKEND_OP_PUT, -EINVAL, "iov_len");
    many[0] = (struct iovec){0};
    u.put.flags = 1u << 5;
    expect_refused(&e, &u, BACKEND_OP_PUT, -EINVAL, "flags");
    memset(&u, 0, sizeof(u));
    test_req_init(&u.app.req, &done, "obj/key1");
    u.app.iov = &fault_payload;
    u.app.iovcnt = 1;
    u.app.offset = UINT64_MAX - 3;
    expect_refused(&e, &u, BACKEND_OP_APPEND, -EINVAL, "append past 2^64");
    u.app.offset = 0;
    u.app.iovcnt = 2;
    u.app.iov = many;
    many[1] = (struct iovec){.iov_base = NULL, .iov_len = 1};
    expect_refused(&e, &u, BACKEND_OP_APPEND, -EINVAL, "append NULL iov_base");
    many[1] = (struct iovec){0};

    /* Gets: a range that ends past 2^64; a request without a callback. */
    memset(&u, 0, sizeof(u));
    test_req_init(&u.get.req, &done, "obj/key1");
    u.get.offset = 10;
    u.get.length = UINT64_MAX - 5;
    expect_refused(&e, &u, BACKEND_OP_GET, -EINVAL, "range");
    u.get.length = 1;
    u.get.req.cb = NULL;
    expect_refused(&e, &u, BACKEND_OP_GET, -EINVAL, "no callback");

    /* Capabilities this backend lacks. */
    assert_int_equal(backend_read_sync(e.be, "obj/key1", 0, buf, sizeof(buf), &got), -EOPNOTSUPP);
    assert_int_equal(got, 0);
    assert_int_equal(backend_try_read(e.be, "obj/key1", 0, buf, sizeof(buf), &got), -EOPNOTSUPP);

    /* None of it reached the backend or the counters, and no callback came. */
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(done.calls, 0);
    assert_int_equal(fault_probe.starts, 0);
    assert_int_equal(e.be->inflight, 0);
    assert_int_equal(e.be->stats.failures, 0);

    /* The limits themselves are accepted; IOV_MAX is none for a request. */
    for (size_t i = 0; i < ARRAY_SIZE(many); i++)
        many[i] = (struct iovec){.iov_base = "z", .iov_len = 1};
    memset(&u, 0, sizeof(u));
    test_req_init(&u.put.req, &done, "obj/key1");
    u.put.iov = many;
    u.put.iovcnt = ARRAY_SIZE(many);
    assert_int_equal(test_start_put(e.be, &u.put), 0);
    test_wait(&e, &done);
    assert_int_equal(e.be->stats.bytes_written, ARRAY_SIZE(many));
    memset(&u, 0, sizeof(u));
    test_req_init(&u.list.req, &done, "obj/");
    u.list.max_keys = BACKEND_LIST_MAX;
    assert_int_equal(test_start_list(e.be, &u.list), 0);
    test_wait(&e, &done);
    backend_list_reset(&u.list);
    test_env_finish(&e);
}

static void test_fe_capabilities(void **state)
{
    struct test_env e;
    union fault_req u;
    struct test_done done;
    char key[] = "obj/key1";
    uint8_t buf[4];
    size_t got;

    fault_probe_reset(NULL, 0, 0);
    fault_env_open(&e, &fault_bare_ops);
    /* An append function without the capability, and no list function at all. */
    assert_int_equal(fault_start_any(&e, &u, BACKEND_OP_APPEND, &done, 0), -EOPNOTSUPP);
    assert_int_equal(fault_start_any(&e, &u, BACKEND_OP_LIST, &done, 0), -EOPNOTSUPP);
    assert_int_equal(fault_probe.starts, 0);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(done.calls, 0);
    test_env_finish(&e);

    /* On a backend that has them, synchronous reads still check the key. */
    test_env_init(&e);
    test_env_open(&e);
    assert_int_equal(backend_read_sync(e.be, "Obj/key1", 0, buf, sizeof(buf), &got), -EINVAL);
    assert_int_equal(backend_try_read(e.be, "obj", 0, buf, sizeof(buf), &got), -EINVAL);
    assert_int_equal(backend_read_sync(e.be, key, 0, NULL, 4, &got), -EINVAL);
    assert_int_equal(backend_read_sync(e.be, key, 0, buf, sizeof(buf), &got), BACKEND_E_NOT_FOUND);
    test_env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fe_new_ops),        cmocka_unit_test(test_fe_free_from_callback),
        cmocka_unit_test(test_fe_many_in_flight), cmocka_unit_test(test_fe_key_valid),
        cmocka_unit_test(test_fe_arguments),      cmocka_unit_test(test_fe_capabilities),
    };
    int failed = cmocka_run_group_tests_name("backend front end", tests, NULL, NULL);

    return failed + test_retry_run();
}
