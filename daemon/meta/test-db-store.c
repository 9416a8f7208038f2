/*
 * Unit tests of where records live (db-store.c): chunk and segment rows
 * (a live row keeps its location, a condemned one moves and is revived;
 * dedup ignores condemned rows, reads do not), journal rows with their
 * applied flag and the order replay applies them in, and pack rows.
 */
#include "daemon/meta/test-db.h"

#include <stdlib.h>
#include <string.h>

static void assert_loc(const struct db_loc *got, const struct db_loc *want)
{
    assert_int_equal(got->pack, want->pack);
    assert_int_equal(got->off, want->off);
    assert_int_equal(got->len, want->len);
    assert_int_equal(got->sub, want->sub);
    assert_int_equal(got->size, want->size);
    assert_int_equal(got->stored, want->stored);
}

/* The condemned column of a record row, straight from the file. */
static int64_t condemned_of(struct test_db *e, const char *table, const uint8_t h[PROTO_HASH_LEN])
{
    char hex[PROTO_HASH_HEX + 1], sql[256];

    test_hex(h, hex);
    snprintf(sql, sizeof(sql), "SELECT condemned FROM %s WHERE hash = x'%s'", table, hex);
    return test_db_query(e, sql);
}

static void test_chunk_rows(void **state)
{
    struct test_db *e = *state;
    uint8_t h[PROTO_HASH_LEN], other[PROTO_HASH_LEN];
    struct db_loc a = {.pack = 1, .off = 16, .len = 5000, .sub = 1024, .size = 4096, .stored = 900};
    struct db_loc b = {.pack = 2, .off = 4000, .len = 3000, .sub = 0, .size = 4096, .stored = 700};
    struct db_loc got;
    uint32_t stored = 0;
    uint64_t condemned = 0, revived = 0;
    struct test_live none = {0};

    test_hash(h, 0x10, 1);
    test_hash(other, 0x11, 2);
    assert_int_equal(db_chunk_find(e->db, h, &got), DB_E_NOT_FOUND);
    assert_int_equal(db_chunk_lookup(e->db, h, &stored), DB_E_NOT_FOUND);

    assert_int_equal(test_chunk_put(e, h, &a), 0);
    assert_int_equal(db_chunk_find(e->db, h, &got), 0);
    assert_loc(&got, &a);
    assert_int_equal(db_chunk_lookup(e->db, h, &stored), 0);
    assert_int_equal(stored, 900);
    assert_int_equal(db_chunk_find(e->db, other, &got), DB_E_NOT_FOUND);

    /* A second copy of a live chunk: the row keeps pointing at the first. */
    assert_int_equal(test_chunk_put(e, h, &b), 0);
    assert_int_equal(db_chunk_find(e->db, h, &got), 0);
    assert_loc(&got, &a);
    assert_int_equal(db_chunk_lookup(e->db, h, &stored), 0);
    assert_int_equal(stored, 900);

    /* Condemned by gc run 7: dedup no longer finds it, reads still do. */
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &none, 7, 10, &condemned, &revived, NULL), 0);
    assert_int_equal(condemned, 1);
    assert_int_equal(condemned_of(e, "chunks", h), 7);
    assert_int_equal(db_chunk_lookup(e->db, h, &stored), DB_E_NOT_FOUND);
    assert_int_equal(db_chunk_find(e->db, h, &got), 0);
    assert_loc(&got, &a);

    /* A new copy of a condemned chunk: the row moves there and is live again. */
    assert_int_equal(test_chunk_put(e, h, &b), 0);
    assert_int_equal(condemned_of(e, "chunks", h), 0);
    assert_int_equal(db_chunk_find(e->db, h, &got), 0);
    assert_loc(&got, &b);
    assert_int_equal(db_chunk_lookup(e->db, h, &stored), 0);
    assert_int_equal(stored, 700);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM chunks"), 1);
}

static void test_segment_rows(void **state)
{
    struct test_db *e = *state;
    uint8_t h[PROTO_HASH_LEN];
    struct db_loc a = {.pack = 3, .off = 16, .len = 700, .size = 41008};
    struct db_loc b = {.pack = 4, .off = 900, .len = 650, .size = 41008};
    struct db_loc got, want;
    uint64_t condemned = 0, revived = 0;
    struct test_live none = {0};

    test_hash(h, 0x20, 3);
    assert_int_equal(db_segment_find(e->db, h, &got), DB_E_NOT_FOUND);
    assert_int_equal(test_segment_put(e, h, &a), 0);
    /* A segment is its whole record: sub 0, and its stored share is the record's length. */
    want = a;
    want.stored = a.len;
    assert_int_equal(db_segment_find(e->db, h, &got), 0);
    assert_loc(&got, &want);
    /* Segments and chunks are apart. */
    assert_int_equal(db_chunk_find(e->db, h, &got), DB_E_NOT_FOUND);

    assert_int_equal(test_segment_put(e, h, &b), 0);
    assert_int_equal(db_segment_find(e->db, h, &got), 0);
    assert_loc(&got, &want);

    assert_int_equal(test_sweep(e, DB_TABLE_SEGMENTS, &none, 2, 10, &condemned, &revived, NULL), 0);
    assert_int_equal(condemned, 1);
    assert_int_equal(condemned_of(e, "segments", h), 2);
    assert_int_equal(db_segment_find(e->db, h, &got), 0);
    assert_loc(&got, &want);

    assert_int_equal(test_segment_put(e, h, &b), 0);
    assert_int_equal(condemned_of(e, "segments", h), 0);
    want = b;
    want.stored = b.len;
    assert_int_equal(db_segment_find(e->db, h, &got), 0);
    assert_loc(&got, &want);
}

static void assert_pending(struct test_db *e, size_t max, const uint8_t (*ids)[PROTO_HASH_LEN],
                           const struct db_loc *locs, size_t n)
{
    struct db_pending_entry *p;
    size_t got;

    assert_int_equal(db_pending_entries(e->db, max, &p, &got), 0);
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++) {
        assert_memory_equal(p[i].id, ids[i], PROTO_HASH_LEN);
        assert_int_equal(p[i].loc.pack, locs[i].pack);
        assert_int_equal(p[i].loc.off, locs[i].off);
        assert_int_equal(p[i].loc.len, locs[i].len);
    }
    free(p);
}

static void test_journal_rows(void **state)
{
    struct test_db *e = *state;
    uint8_t id[5][PROTO_HASH_LEN], doc[PROTO_HASH_LEN], want[4][PROTO_HASH_LEN];
    struct db_loc loc[5], want_loc[4];
    static const uint64_t times[] = {3000000000000000300ull, 100, 200, 50, 150};
    static const bool applied[] = {false, false, true, false, false};
    uint64_t newest = 12345;

    assert_int_equal(db_journal_newest(e->db, &newest), 0);
    assert_int_equal(newest, 0);
    assert_pending(e, 10, NULL, NULL, 0);
    test_hash(doc, 0xd0, 9);
    for (uint8_t i = 0; i < 5; i++) {
        test_hash(id[i], (uint8_t)(0x30 + i), i);
        loc[i] = (struct db_loc){.pack = 5, .off = 16 + 100u * i, .len = 60 + i};
        assert_int_equal(test_journal_put(e, id[i], &loc[i], doc, times[i], i == 3, applied[i]), 0);
    }
    /* Times up to 2^63 survive. */
    assert_int_equal(db_journal_newest(e->db, &newest), 0);
    assert_int_equal(newest, times[0]);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM journal WHERE op = 1"), 1);

    /* Unapplied ones, oldest first: 3 (50), 1 (100), 4 (150), 0. */
    static const size_t order[] = {3, 1, 4, 0};
    for (size_t i = 0; i < 4; i++) {
        memcpy(want[i], id[order[i]], PROTO_HASH_LEN);
        want_loc[i] = loc[order[i]];
    }
    assert_pending(e, 10, want, want_loc, 4);
    assert_pending(e, 2, want, want_loc, 2);
    assert_pending(e, 0, want, want_loc, 0);

    /* An entry already known keeps its row: location and flag. */
    struct db_loc moved = {.pack = 6, .off = 16, .len = 61};
    assert_int_equal(test_journal_put(e, id[1], &moved, doc, 100, false, true), 0);
    assert_pending(e, 10, want, want_loc, 4);

    /* Applied: no longer pending, the row stays. Refused: the row goes. */
    assert_int_equal(test_journal_applied(e, id[1], false), 0);
    assert_int_equal(test_journal_applied(e, id[3], true), 0);
    assert_pending(e, 10, want + 2, want_loc + 2, 2);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM journal"), 4);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM journal WHERE op = 1"), 0);
    /* Unknown ids change nothing. */
    uint8_t unknown[PROTO_HASH_LEN];
    test_hash(unknown, 0x3f, 99);
    assert_int_equal(test_journal_applied(e, unknown, false), 0);
    assert_int_equal(test_journal_applied(e, unknown, true), 0);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM journal"), 4);

    /* The newest time counts applied entries too. */
    assert_int_equal(test_journal_applied(e, id[0], true), 0);
    assert_int_equal(db_journal_newest(e->db, &newest), 0);
    assert_int_equal(newest, 200);
}

static void assert_packs(struct test_db *e, const struct db_pack *want, size_t n)
{
    struct db_pack *p;
    size_t got;

    assert_int_equal(db_packs(e->db, &p, &got), 0);
    assert_int_equal(got, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(p[i].seq, want[i].seq);
        assert_int_equal(p[i].size, want[i].size);
        assert_int_equal(p[i].state, want[i].state);
    }
    free(p);
}

static void test_packs(void **state)
{
    struct test_db *e = *state;

    assert_packs(e, NULL, 0);
    assert_int_equal(test_pack_set(e, 3, 100, DB_PACK_OPEN), 0);
    assert_int_equal(test_pack_set(e, 1, 500, DB_PACK_SEALED), 0);
    assert_int_equal(test_pack_set(e, 2, 300, DB_PACK_DELETING), 0);
    struct db_pack want[] = {
        {1, 500, DB_PACK_SEALED}, {2, 300, DB_PACK_DELETING}, {3, 100, DB_PACK_OPEN}};
    assert_packs(e, want, 3);

    /* Updated in place; dropped; dropping an unknown pack is harmless. */
    assert_int_equal(test_pack_set(e, 3, 4096, DB_PACK_SEALED), 0);
    assert_int_equal(test_pack_drop(e, 2), 0);
    assert_int_equal(test_pack_drop(e, 42), 0);
    struct db_pack after[] = {{1, 500, DB_PACK_SEALED}, {3, 4096, DB_PACK_SEALED}};
    assert_packs(e, after, 2);
    /* Sequence numbers up to 2^63 - 1. */
    assert_int_equal(test_pack_set(e, INT64_MAX, 16, DB_PACK_OPEN), 0);
    struct db_pack big[] = {
        {1, 500, DB_PACK_SEALED}, {3, 4096, DB_PACK_SEALED}, {INT64_MAX, 16, DB_PACK_OPEN}};
    assert_packs(e, big, 3);
}

int test_db_store_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chunk_rows, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_segment_rows, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_journal_rows, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_packs, test_db_setup, test_db_teardown),
    };
    return cmocka_run_group_tests_name("database: records and packs", tests, NULL, NULL);
}
