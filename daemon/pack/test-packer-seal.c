/*
 * Unit tests of the pack writer's seals and failures (daemon/pack/packer.c):
 * packs sealed at pack_size and by packer_rotate() (also while an append
 * runs) end with an index and trailer that storage/pack/pack.h reads back and
 * that list exactly their records; an append that fails (the packs
 * directory is a file, the open pack's file is gone) fails its groups, and
 * groups queued meanwhile still go out, to a new pack or to the open one.
 */
#include "daemon/pack/test-packer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/meta/db.h"
#include "storage/backend.h"

/* ---- sealing ----------------------------------------------------------------------------- */

/*
 * Pack `seq` is sealed: the database says so with its whole size, and its
 * trailer and index (storage/pack/pack.h) list exactly the records of `groups`.
 */
static void expect_sealed(struct test_env *e, uint64_t seq, struct test_group *const *groups,
                          size_t n)
{
    struct pack_trailer t;
    struct pack_index_entry *idx;
    struct db_pack *packs;
    size_t npacks, nidx = 0, k = 0;
    ssize_t len;
    uint8_t *file = test_read_pack(e, seq, &len);
    uint64_t end = PACK_HEADER_SIZE, valid_end;
    bool sealed, found = false;

    assert_non_null(file);
    for (size_t g = 0; g < n; g++) {
        test_expect_in_file(file, len, groups[g], seq);
        for (size_t i = 0; i < groups[g]->g.nrecs; i++) {
            const struct packer_rec *r = &groups[g]->recs[i];
            nidx += r->nidx;
            if (r->offset + r->len > end)
                end = r->offset + r->len;
        }
    }
    assert_int_equal(pack_trailer_parse(file + len - PACK_TRAILER_SIZE, (uint64_t)len, &t), 0);
    assert_int_equal(t.seq, seq);
    assert_int_equal(t.index_off, end);
    assert_int_equal(t.count, nidx);
    assert_int_equal((uint64_t)len, end + pack_index_size(nidx));
    assert_int_equal(pack_index_parse(file + end, (size_t)len - PACK_TRAILER_SIZE - end, &t, &idx),
                     0);
    for (size_t g = 0; g < n; g++) {
        for (size_t i = 0; i < groups[g]->g.nrecs; i++) {
            const struct packer_rec *r = &groups[g]->recs[i];
            for (size_t j = 0; j < r->nidx; j++, k++) {
                assert_int_equal(idx[k].type, r->idx[j].type);
                assert_memory_equal(idx[k].id, r->idx[j].id, PROTO_HASH_LEN);
                assert_int_equal(idx[k].record_off, r->offset);
                assert_int_equal(idx[k].record_len, r->len);
                assert_int_equal(idx[k].sub_off, r->idx[j].sub_off);
                assert_int_equal(idx[k].raw_size, r->idx[j].raw_size);
            }
        }
    }
    free(idx);
    assert_int_equal(pack_scan(file, (size_t)len, NULL, NULL, &valid_end, &sealed), 0);
    assert_true(sealed);
    assert_int_equal(valid_end, end);
    free(file);

    assert_int_equal(db_packs(e->db, &packs, &npacks), 0);
    for (size_t i = 0; i < npacks; i++) {
        if (packs[i].seq == seq) {
            found = true;
            assert_int_equal(packs[i].state, DB_PACK_SEALED);
            assert_int_equal(packs[i].size, len);
        }
    }
    free(packs);
    assert_true(found);
}

static void test_seal_at_pack_size(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0}, c = {0};
    struct packer_stats st;

    test_env_init(&e, 8192);
    /* Two groups in one batch that together pass pack_size: the batch stays whole. */
    test_rec_block(&a.recs[0], 20, 1, 5000);
    test_rec_entry(&a.recs[1], 5, 10, false);
    test_group_init(&a, &e, 2, 0);
    test_rec_block(&b.recs[0], 21, 2, 2000);
    test_rec_segment(&b.recs[1], 7);
    test_group_init(&b, &e, 2, 0);
    packer_submit(e.pk, &a.g);
    packer_submit(e.pk, &b.g);
    test_run(&e);
    assert_int_equal(a.status, 0);
    assert_int_equal(b.status, 0);
    assert_int_equal(b.recs[1].pack, 1);
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.packs_sealed, 1);
    assert_int_equal(packer_open_seq(e.pk), 2);
    expect_sealed(&e, 1, (struct test_group *const[]){&a, &b}, 2);

    /* The next record starts pack 2. */
    test_rec_block(&c.recs[0], 22, 1, 100);
    test_group_init(&c, &e, 1, 0);
    packer_submit(e.pk, &c.g);
    test_run(&e);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.recs[0].pack, 2);
    assert_int_equal(c.recs[0].offset, PACK_HEADER_SIZE);
    assert_true(c.located_at_done);
    struct db_pack *packs;
    size_t n;
    assert_int_equal(db_packs(e.db, &packs, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(packs[1].seq, 2);
    assert_int_equal(packs[1].state, DB_PACK_OPEN);
    free(packs);
    test_group_free(&a);
    test_group_free(&b);
    test_group_free(&c);
    test_env_finish(&e);
}

static void count_cb(void *ctx)
{
    (*(int *)ctx)++;
}

struct rotate_ctx {
    int calls, second_calls, r1, r2;
};

static void rotate_during_append(struct test_after_kick *a)
{
    struct rotate_ctx *rc = a->ctx;

    rc->r1 = packer_rotate(a->env->pk, count_cb, &rc->calls);
    /* One rotation at a time. */
    rc->r2 = packer_rotate(a->env->pk, count_cb, &rc->second_calls);
}

static void test_rotate(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0}, c = {0};
    struct rotate_ctx rc = {0};
    struct test_after_kick ak;
    int calls = 0;

    test_env_init(&e, 16u << 20);
    /* Nothing written yet: nothing to seal, and no callback. */
    assert_int_equal(packer_rotate(e.pk, count_cb, &calls), 1);
    test_run(&e);
    assert_int_equal(calls, 0);

    test_rec_block(&a.recs[0], 30, 2, 1000);
    test_group_init(&a, &e, 1, 0);
    packer_submit(e.pk, &a.g);
    test_run(&e);
    assert_int_equal(packer_rotate(e.pk, count_cb, &calls), 0);
    assert_int_equal(packer_open_seq(e.pk), 2);
    assert_int_equal(calls, 0); /* when the seal is written */
    test_run(&e);
    assert_int_equal(calls, 1);
    expect_sealed(&e, 1, (struct test_group *const[]){&a}, 1);
    assert_int_equal(packer_rotate(e.pk, count_cb, &calls), 1);

    /* Asked while an append runs: the seal follows that append, which goes into the pack. */
    test_rec_block(&b.recs[0], 31, 1, 3000);
    test_rec_entry(&b.recs[1], 9, 99, false);
    test_group_init(&b, &e, 2, 0);
    test_after_kick_start(&ak, &e, rotate_during_append);
    ak.ctx = &rc;
    packer_submit(e.pk, &b.g);
    test_run(&e);
    assert_true(ak.appending);
    assert_int_equal(rc.r1, 0);
    assert_int_equal(rc.r2, 1);
    assert_int_equal(rc.calls, 1);
    assert_int_equal(rc.second_calls, 0);
    assert_int_equal(b.status, 0);
    assert_int_equal(b.recs[0].pack, 2);
    expect_sealed(&e, 2, (struct test_group *const[]){&b}, 1);
    assert_int_equal(packer_open_seq(e.pk), 3);

    test_rec_block(&c.recs[0], 32, 1, 10);
    test_group_init(&c, &e, 1, 0);
    packer_submit(e.pk, &c.g);
    test_run(&e);
    assert_int_equal(c.recs[0].pack, 3);
    struct packer_stats st;
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.packs_sealed, 2);
    test_group_free(&a);
    test_group_free(&b);
    test_group_free(&c);
    test_env_finish(&e);
}

/* ---- failed appends ------------------------------------------------------------------ */

struct failure {
    char packs_dir[PATH_MAX * 2], moved[PATH_MAX * 2], pack1[PATH_MAX * 2];
    struct test_group *later;
};

static void submit_later(struct test_after_kick *a)
{
    struct failure *f = a->ctx;
    packer_submit(a->env->pk, &f->later->g);
}

/* The packs directory is a file: no pack can be created. Put the directory back. */
static void restore_dir(struct test_group *t)
{
    struct failure *f = t->ctx;
    assert_int_equal(unlink(f->packs_dir), 0);
}

static void test_failed_append_new_pack(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0};
    struct failure f = {.later = &b};
    struct test_after_kick ak;
    struct db_loc loc;
    ssize_t len;
    FILE *file;

    test_env_init(&e, 16u << 20);
    snprintf(f.packs_dir, sizeof(f.packs_dir), "%s/packs", e.root);
    file = fopen(f.packs_dir, "w");
    assert_non_null(file);
    fclose(file);

    test_rec_block(&a.recs[0], 40, 2, 500);
    test_group_init(&a, &e, 1, 0);
    a.on_done = restore_dir;
    a.ctx = &f;
    test_rec_block(&b.recs[0], 41, 2, 500);
    test_rec_entry(&b.recs[1], 4, 44, false);
    test_group_init(&b, &e, 2, 0);
    /* b is queued while a's append runs, and goes out after it failed. */
    test_after_kick_start(&ak, &e, submit_later);
    ak.ctx = &f;
    packer_submit(e.pk, &a.g);
    test_run(&e);
    assert_true(ak.appending);
    assert_int_equal(a.done_calls, 1);
    assert_true(a.status < 0);
    assert_false(a.applied);
    assert_int_equal(b.done_calls, 1);
    assert_int_equal(b.status, 0);
    assert_true(b.located_at_done);
    /* Nothing of a anywhere; b went to a new pack. */
    assert_int_equal(db_chunk_find(e.db, a.recs[0].idx[0].id, &loc), DB_E_NOT_FOUND);
    assert_int_equal(b.recs[0].offset, PACK_HEADER_SIZE);
    /* The pack that could not be created is given up for a new one (it might exist). */
    uint64_t bseq = b.recs[0].pack;
    assert_int_equal(bseq, 2);
    assert_int_equal(packer_open_seq(e.pk), bseq);
    free(test_read_pack(&e, bseq, &len));
    assert_int_equal(len, b.recs[1].offset + b.recs[1].len);
    free(test_read_pack(&e, 1, &len));
    assert_int_equal(len, -1);
    struct db_pack *packs;
    size_t n;
    assert_int_equal(db_packs(e.db, &packs, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(packs[0].seq, bseq);
    free(packs);
    test_group_free(&a);
    test_group_free(&b);
    test_env_finish(&e);
}

/* The open pack's file is gone for a moment: the append to it fails. Put it back. */
static void restore_pack(struct test_group *t)
{
    struct failure *f = t->ctx;
    assert_int_equal(rename(f->moved, f->pack1), 0);
}

static void test_failed_append_open_pack(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0}, c = {0};
    struct failure f = {.later = &c};
    struct test_after_kick ak;
    struct db_loc loc;
    uint8_t *file;
    ssize_t len;

    test_env_init(&e, 16u << 20);
    test_rec_block(&a.recs[0], 50, 1, 800);
    test_group_init(&a, &e, 1, 0);
    packer_submit(e.pk, &a.g);
    test_run(&e);
    assert_int_equal(a.status, 0);
    uint64_t end = a.recs[0].offset + a.recs[0].len;

    test_pack_path(&e, 1, f.pack1, sizeof(f.pack1));
    snprintf(f.moved, sizeof(f.moved), "%s/moved", e.dir);
    assert_int_equal(rename(f.pack1, f.moved), 0);
    test_rec_block(&b.recs[0], 51, 1, 800);
    test_rec_entry(&b.recs[1], 5, 55, false);
    test_group_init(&b, &e, 2, 0);
    b.on_done = restore_pack;
    b.ctx = &f;
    test_rec_block(&c.recs[0], 52, 2, 300);
    test_group_init(&c, &e, 1, 0);
    test_after_kick_start(&ak, &e, submit_later);
    ak.ctx = &f;
    packer_submit(e.pk, &b.g);
    test_run(&e);
    assert_true(ak.appending);
    assert_true(b.status < 0);
    assert_false(b.applied);
    assert_int_equal(c.status, 0);
    assert_true(c.located_at_done);
    /*
     * The open pack was missing: what it held is lost to the writer, which
     * goes on in a new pack (pack 1, back in place, stays as it was).
     */
    assert_int_equal(c.recs[0].pack, 2);
    assert_int_equal(c.recs[0].offset, PACK_HEADER_SIZE);
    assert_int_equal(db_chunk_find(e.db, b.recs[0].idx[0].id, &loc), DB_E_NOT_FOUND);
    file = test_read_pack(&e, 1, &len);
    assert_int_equal(len, end);
    test_expect_in_file(file, len, &a, 1);
    free(file);
    file = test_read_pack(&e, 2, &len);
    assert_int_equal(len, PACK_HEADER_SIZE + c.recs[0].len);
    test_expect_in_file(file, len, &c, 2);
    free(file);
    struct db_pack *packs;
    size_t n;
    assert_int_equal(db_packs(e.db, &packs, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(packs[0].size, end);
    assert_int_equal(packs[1].size, PACK_HEADER_SIZE + c.recs[0].len);
    free(packs);
    test_group_free(&a);
    test_group_free(&b);
    test_group_free(&c);
    test_env_finish(&e);
}

int test_packer_seal_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seal_at_pack_size),
        cmocka_unit_test(test_rotate),
        cmocka_unit_test(test_failed_append_new_pack),
        cmocka_unit_test(test_failed_append_open_pack),
    };
    return cmocka_run_group_tests_name("pack writer: seals and failures", tests, NULL, NULL);
}
