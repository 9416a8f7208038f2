/*
 * The pack writer on a backend without appends: each batch is a sealed pack
 * of its own, put whole, and up to two are written at once. The backend
 * here keeps objects in memory and finishes puts when the test says, so the
 * tests can make a later batch's put finish first, or an earlier one fail:
 * batches still end, and commit, in the order they started.
 */
#include "daemon/pack/test-packer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meta/db.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* ---- a put-only backend whose puts finish when the test says ------------------------- */

#define MEM_MAX 8

struct mem_be {
    struct backend_put *held[MEM_MAX]; /* puts started and not finished, in start order */
    size_t nheld;
    struct {
        char key[BACKEND_MAX_KEY];
        size_t len;
    } objects[MEM_MAX];
    size_t nobjects;
    unsigned max_held; /* most puts running at once */
};

static struct mem_be *mem_of(struct backend *be)
{
    return be->priv;
}

static void finish(struct mem_be *m, size_t i, int status)
{
    struct backend_put *put = m->held[i];
    size_t len = 0;

    memmove(&m->held[i], &m->held[i + 1], (m->nheld - i - 1) * sizeof(m->held[0]));
    m->nheld--;
    for (size_t k = 0; k < put->iovcnt; k++)
        len += put->iov[k].iov_len;
    if (status == 0) {
        assert_true(m->nobjects < MEM_MAX);
        snprintf(m->objects[m->nobjects].key, BACKEND_MAX_KEY, "%s", put->req.key);
        m->objects[m->nobjects++].len = len;
    }
    put->req.status = status;
    backend_complete(&put->req);
}

static int mem_open(struct backend *be, const char *url, const char **msg)
{
    struct mem_be *m = mem_of(be);
    memset(m, 0, sizeof(*m));
    be->parallel = 4;
    return 0;
}

static void mem_close(struct backend *be)
{
    backend_release(be);
}

static int mem_put(struct backend *be, struct backend_req *req)
{
    struct mem_be *m = mem_of(be);
    assert_true(m->nheld < MEM_MAX);
    m->held[m->nheld++] = container_of(req, struct backend_put, req);
    if (m->nheld > m->max_held)
        m->max_held = (unsigned)m->nheld;
    return 0;
}

static int mem_unsupported(struct backend *be, struct backend_req *req)
{
    return -EOPNOTSUPP;
}

static void mem_describe(struct backend *be, char *out, size_t len)
{
    snprintf(out, len, "mem:");
}

static const struct backend_ops mem_ops = {
    .name = "mem",
    .caps = 0,
    .priv_size = sizeof(struct mem_be),
    .open = mem_open,
    .close = mem_close,
    .put = mem_put,
    .get = mem_unsupported,
    .head = mem_unsupported,
    .del = mem_unsupported,
    .list = mem_unsupported,
    .describe = mem_describe,
};

/* ---- driving it ------------------------------------------------------------------------ */

/* Runs the loop until `n` puts are running (they never finish on their own). */
static void run_until_held(struct test_env *e, size_t n)
{
    struct mem_be *m = mem_of(e->be);
    for (int turns = 0; m->nheld < n; turns++) {
        assert_true(turns < 100000);
        uv_run(&e->loop, UV_RUN_NOWAIT);
    }
}

static void submit_second(struct test_after_kick *a)
{
    packer_submit(a->env->pk, &((struct test_group *)a->ctx)->g);
}

/* Two batches in flight; the second one's put finishes first. */
static void test_out_of_order_puts(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0};
    struct test_after_kick ak;
    struct db_pack *packs;
    size_t npacks;

    test_env_init_ops(&e, 16u << 20, &mem_ops);
    struct mem_be *m = mem_of(e.be);
    test_rec_block(&a.recs[0], 1, 2, 3000);
    test_rec_entry(&a.recs[1], 0xa0, 1000, false);
    test_group_init(&a, &e, 2, 0);
    test_rec_block(&b.recs[0], 2, 1, 5000);
    test_rec_entry(&b.recs[1], 0xb0, 2000, false);
    test_group_init(&b, &e, 2, 0);

    /* a's batch starts alone; b comes in the next turn and gets a batch (and a pack) of its own. */
    test_after_kick_start(&ak, &e, submit_second);
    ak.ctx = &b;
    packer_submit(e.pk, &a.g);
    run_until_held(&e, 2);
    assert_int_equal(m->max_held, 2);
    /* Pack 1 is the open pack a backend with appends would use; whole packs come after it. */
    assert_string_equal(m->held[0]->req.key, "packs/0000000000000002");
    assert_string_equal(m->held[1]->req.key, "packs/0000000000000003");

    /* b's pack is written first: b still waits for a. */
    finish(m, 1, 0);
    for (int i = 0; i < 1000; i++)
        uv_run(&e.loop, UV_RUN_NOWAIT);
    assert_int_equal(b.done_calls, 0);
    assert_int_equal(a.done_calls, 0);
    finish(m, 0, 0);
    test_run(&e);
    assert_int_equal(a.done_calls, 1);
    assert_int_equal(b.done_calls, 1);
    assert_int_equal(a.status, 0);
    assert_int_equal(b.status, 0);
    assert_int_equal(a.order, 0);
    assert_int_equal(b.order, 1);
    assert_true(a.located_at_done);
    assert_true(b.located_at_done);
    assert_int_equal(a.recs[0].pack, 2);
    assert_int_equal(b.recs[0].pack, 3);
    /* Both are sealed packs of their own, as big as what was put. */
    assert_int_equal(db_packs(e.db, &packs, &npacks), 0);
    assert_int_equal(npacks, 2);
    for (size_t i = 0; i < npacks; i++) {
        assert_int_equal(packs[i].state, DB_PACK_SEALED);
        assert_int_equal(packs[i].size, m->objects[1 - i].len);
    }
    free(packs);
    test_group_free(&a);
    test_group_free(&b);
    test_env_finish(&e);
}

/* The older put fails after the newer one succeeded: the older groups fail, the newer commit. */
static void test_older_put_fails(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0}, c = {0};
    struct test_after_kick ak;
    struct db_loc loc;

    test_env_init_ops(&e, 16u << 20, &mem_ops);
    struct mem_be *m = mem_of(e.be);
    test_rec_block(&a.recs[0], 11, 1, 3000);
    test_group_init(&a, &e, 1, 0);
    test_rec_block(&b.recs[0], 12, 1, 3000);
    test_group_init(&b, &e, 1, 0);
    test_after_kick_start(&ak, &e, submit_second);
    ak.ctx = &b;
    packer_submit(e.pk, &a.g);
    run_until_held(&e, 2);
    /* A third group goes out at once: up to the backend's parallel (4 here) puts at a time. */
    test_rec_block(&c.recs[0], 13, 1, 3000);
    test_group_init(&c, &e, 1, 0);
    packer_submit(e.pk, &c.g);
    run_until_held(&e, 3);

    finish(m, 1, 0);
    finish(m, 0, -EIO);
    run_until_held(&e, 1);
    assert_string_equal(m->held[0]->req.key, "packs/0000000000000004");
    finish(m, 0, 0);
    test_run(&e);
    assert_true(a.status < 0);
    assert_false(a.applied);
    assert_int_equal(b.status, 0);
    assert_int_equal(c.status, 0);
    assert_int_equal(a.order, 0);
    assert_int_equal(b.order, 1);
    assert_int_equal(c.order, 2);
    assert_int_equal(db_chunk_find(e.db, a.recs[0].idx[0].id, &loc), DB_E_NOT_FOUND);
    assert_int_equal(db_chunk_find(e.db, b.recs[0].idx[0].id, &loc), 0);
    assert_int_equal(loc.pack, 3);
    assert_int_equal(db_chunk_find(e.db, c.recs[0].idx[0].id, &loc), 0);
    assert_int_equal(loc.pack, 4);
    test_group_free(&a);
    test_group_free(&b);
    test_group_free(&c);
    test_env_finish(&e);
}

/* No more puts at once than the backend runs in parallel (4 here); the rest wait their turn. */
static void test_puts_bounded(void **state)
{
    enum { N = 6 };
    struct test_env e;
    static struct test_group g[N];

    memset(g, 0, sizeof(g));
    test_env_init_ops(&e, 16u << 20, &mem_ops);
    struct mem_be *m = mem_of(e.be);
    for (int i = 0; i < N; i++) {
        test_rec_block(&g[i].recs[0], 20 + i, 1, 3000);
        test_group_init(&g[i], &e, 1, 0);
    }
    /* Each group arrives once the previous one's put runs: a batch each. */
    for (int i = 0; i < 4; i++) {
        packer_submit(e.pk, &g[i].g);
        run_until_held(&e, (size_t)i + 1);
    }
    packer_submit(e.pk, &g[4].g);
    packer_submit(e.pk, &g[5].g);
    for (int i = 0; i < 1000; i++)
        uv_run(&e.loop, UV_RUN_NOWAIT);
    assert_int_equal(m->nheld, 4);
    while (m->nheld) {
        finish(m, 0, 0);
        for (int i = 0; i < 100; i++)
            uv_run(&e.loop, UV_RUN_NOWAIT);
        assert_true(m->nheld <= 4);
    }
    test_run(&e);
    for (int i = 0; i < N; i++) {
        assert_int_equal(g[i].status, 0);
        assert_int_equal(g[i].order, i);
        test_group_free(&g[i]);
    }
    test_env_finish(&e);
}

int test_packer_puts_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_order_puts),
        cmocka_unit_test(test_older_put_fails),
        cmocka_unit_test(test_puts_bounded),
    };
    return cmocka_run_group_tests_name("pack writer, whole-pack puts", tests, NULL, NULL);
}
