/*
 * Unit tests of the pack writer (daemon/pack/packer.c) against a real local
 * backend in a temporary directory, a real database and a real libuv loop:
 * groups queued together go out in one append and one transaction, and
 * their records are in the database (chunk, segment and journal rows) by
 * the time their callbacks come; a group whose own change fails is rolled
 * back alone; event groups go in ticket order, and a cancelled ticket lets
 * later ones through. Sealing, rotation and failed appends are in
 * test-packer-seal.c; main() runs both groups. Every test ends with the
 * packer, the backend and the database freed, uv_loop_close() == 0 and the
 * directory removed.
 */
#include "daemon/pack/test-packer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meta/db.h"
#include "daemon/format/manifest.h"
#include "storage/backend.h"

/* ---- batching and locations ------------------------------------------------------------ */

static void test_batch(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0}, c = {0}, d = {0};
    struct packer_stats st;
    struct db_pack *packs;
    size_t npacks;
    ssize_t len;
    uint8_t *file;

    test_env_init(&e, 16u << 20);
    test_rec_block(&a.recs[0], 1, 3, 5000);
    test_rec_segment(&a.recs[1], 1);
    test_group_init(&a, &e, 2, 0);
    test_rec_block(&b.recs[0], 2, 1, 70000);
    test_rec_entry(&b.recs[1], 0xb0, 1000, false);
    test_group_init(&b, &e, 2, 0);
    test_rec_entry(&c.recs[0], 0xb0, 2000, true);
    test_group_init(&c, &e, 1, 0);

    /* Queued in one turn: one batch, one append, one pack. */
    packer_submit(e.pk, &a.g);
    packer_submit(e.pk, &b.g);
    packer_submit(e.pk, &c.g);
    assert_true(packer_busy(e.pk));
    assert_int_equal(a.done_calls, 0); /* never from inside submit */
    test_run(&e);
    struct test_group *all[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(all[i]->done_calls, 1);
        assert_int_equal(all[i]->status, 0);
        assert_int_equal(all[i]->order, i);
        assert_true(all[i]->applied);
        assert_true(all[i]->located_at_done);
    }
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.appends, 1);
    assert_int_equal(st.records, 5);
    assert_int_equal(st.packs_sealed, 0);

    /* Laid out one after another behind the pack header, in submission order. */
    uint64_t off = PACK_HEADER_SIZE;
    for (int i = 0; i < 3; i++) {
        for (size_t k = 0; k < all[i]->g.nrecs; k++) {
            assert_int_equal(all[i]->recs[k].offset, off);
            off += all[i]->recs[k].len;
        }
    }
    assert_int_equal(st.bytes, off);
    file = test_read_pack(&e, 1, &len);
    assert_non_null(file);
    assert_int_equal(len, off);
    uint64_t seq = 0;
    assert_int_equal(pack_header_decode(file, (size_t)len, &seq), 0);
    assert_int_equal(seq, 1);
    for (int i = 0; i < 3; i++)
        test_expect_in_file(file, len, all[i], 1);
    uint64_t valid_end = 0;
    bool sealed = true;
    assert_int_equal(pack_scan(file, (size_t)len, NULL, NULL, &valid_end, &sealed), 0);
    assert_int_equal(valid_end, len);
    assert_false(sealed);
    free(file);

    /* The pack's row says how far it is applied. */
    assert_int_equal(db_packs(e.db, &packs, &npacks), 0);
    assert_int_equal(npacks, 1);
    assert_int_equal(packs[0].seq, 1);
    assert_int_equal(packs[0].size, off);
    assert_int_equal(packs[0].state, DB_PACK_OPEN);
    free(packs);

    /* Chunk rows: where in the block, and a share of the block's bytes by size. */
    struct db_loc loc;
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(db_chunk_find(e.db, a.recs[0].idx[i].id, &loc), 0);
        assert_int_equal(loc.sub, 5000 * i);
        assert_int_equal(loc.size, 5000);
        assert_int_equal(loc.stored, a.recs[0].len / 3);
    }
    assert_int_equal(db_segment_find(e.db, a.recs[1].id, &loc), 0);
    assert_int_equal(loc.size, MANIFEST_SEGMENT_HEADER + 3 * MANIFEST_ENTRY);
    /* Journal rows: applied with their batch, so nothing is pending for replay. */
    struct db_pending_entry *pending;
    size_t npending;
    uint64_t newest;
    assert_int_equal(db_pending_entries(e.db, 10, &pending, &npending), 0);
    assert_int_equal(npending, 0);
    free(pending);
    assert_int_equal(db_journal_newest(e.db, &newest), 0);
    assert_int_equal(newest, 2000);

    /* A later group is appended to the same pack, at its end. */
    test_rec_block(&d.recs[0], 4, 2, 100);
    test_group_init(&d, &e, 1, 0);
    packer_submit(e.pk, &d.g);
    test_run(&e);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.recs[0].pack, 1);
    assert_int_equal(d.recs[0].offset, off);
    assert_true(d.located_at_done);
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.appends, 2);
    file = test_read_pack(&e, 1, &len);
    assert_int_equal(len, off + d.recs[0].len);
    test_expect_in_file(file, len, &a, 1);
    test_expect_in_file(file, len, &d, 1);
    free(file);

    for (int i = 0; i < 3; i++)
        test_group_free(all[i]);
    test_group_free(&d);
    test_env_finish(&e);
}

/* A group whose own change fails is rolled back alone; the others' records are located. */
static void test_group_apply_fails(void **state)
{
    struct test_env e;
    struct test_group a = {0}, b = {0};
    struct db_loc loc;

    test_env_init(&e, 16u << 20);
    test_rec_block(&a.recs[0], 10, 2, 300);
    test_group_init(&a, &e, 1, 0);
    a.apply_result = -EINVAL;
    test_rec_block(&b.recs[0], 11, 2, 300);
    test_group_init(&b, &e, 1, 0);
    packer_submit(e.pk, &a.g);
    packer_submit(e.pk, &b.g);
    test_run(&e);
    assert_int_equal(a.status, -EINVAL);
    assert_int_equal(b.status, 0);
    assert_true(a.applied && b.applied);
    /* Both went into the pack; only b's rows are in the database. */
    assert_int_equal(b.recs[0].offset, a.recs[0].offset + a.recs[0].len);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(db_chunk_find(e.db, a.recs[0].idx[i].id, &loc), DB_E_NOT_FOUND);
        assert_int_equal(db_chunk_find(e.db, b.recs[0].idx[i].id, &loc), 0);
    }
    assert_true(b.located_at_done);
    test_group_free(&a);
    test_group_free(&b);
    test_env_finish(&e);
}

/* ---- tickets --------------------------------------------------------------------------- */

static void test_ticket_order(void **state)
{
    struct test_env e;
    struct test_group g1 = {0}, g2 = {0}, plain = {0}, g4 = {0}, g5 = {0}, g7 = {0};
    struct packer_stats st;

    test_env_init(&e, 16u << 20);
    uint64_t t1 = packer_reserve(e.pk), t2 = packer_reserve(e.pk);
    assert_true(t1 != 0 && t2 > t1);
    test_rec_entry(&g1.recs[0], 1, 100, false);
    test_group_init(&g1, &e, 1, t1);
    test_rec_entry(&g2.recs[0], 1, 200, true);
    test_group_init(&g2, &e, 1, t2);

    /* The later ticket first: it waits for the earlier one. */
    packer_submit(e.pk, &g2.g);
    test_run(&e);
    assert_int_equal(g2.done_calls, 0);
    assert_true(packer_busy(e.pk));
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.appends, 0);
    /* A group without a ticket does not wait. */
    test_rec_block(&plain.recs[0], 3, 1, 64);
    test_group_init(&plain, &e, 1, 0);
    packer_submit(e.pk, &plain.g);
    test_run(&e);
    assert_int_equal(plain.done_calls, 1);
    assert_int_equal(plain.status, 0);
    assert_int_equal(g2.done_calls, 0);

    packer_submit(e.pk, &g1.g);
    test_run(&e);
    assert_int_equal(g1.status, 0);
    assert_int_equal(g2.status, 0);
    assert_true(g1.order < g2.order);
    assert_true(g1.recs[0].offset < g2.recs[0].offset);
    assert_true(g2.located_at_done);

    /* A ticket given up lets the next one through. */
    uint64_t t3 = packer_reserve(e.pk), t4 = packer_reserve(e.pk);
    test_rec_entry(&g4.recs[0], 2, 400, false);
    test_group_init(&g4, &e, 1, t4);
    packer_submit(e.pk, &g4.g);
    test_run(&e);
    assert_int_equal(g4.done_calls, 0);
    packer_cancel(e.pk, t3);
    test_run(&e);
    assert_int_equal(g4.done_calls, 1);
    assert_int_equal(g4.status, 0);

    /* Given up before the earlier one came: both pass in turn, and later ones too. */
    uint64_t t5 = packer_reserve(e.pk), t6 = packer_reserve(e.pk);
    packer_cancel(e.pk, t6);
    test_rec_entry(&g5.recs[0], 3, 500, false);
    test_group_init(&g5, &e, 1, t5);
    packer_submit(e.pk, &g5.g);
    test_run(&e);
    assert_int_equal(g5.status, 0);
    assert_int_equal(g5.done_calls, 1);
    uint64_t t7 = packer_reserve(e.pk);
    assert_true(t7 > t6);
    test_rec_entry(&g7.recs[0], 3, 700, true);
    test_group_init(&g7, &e, 1, t7);
    packer_submit(e.pk, &g7.g);
    test_run(&e);
    assert_int_equal(g7.done_calls, 1);
    assert_int_equal(g7.status, 0);
    assert_false(packer_busy(e.pk));

    struct test_group *all[] = {&g1, &g2, &plain, &g4, &g5, &g7};
    for (size_t i = 0; i < 6; i++)
        test_group_free(all[i]);
    test_env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_group_apply_fails),
        cmocka_unit_test(test_ticket_order),
    };
    return cmocka_run_group_tests_name("pack writer", tests, NULL, NULL) + test_packer_seal_run() +
           test_packer_puts_run();
}
