/*
 * Unit tests for the index and trailer of a sealed pack and for the chunk
 * table of block records (storage/pack/pack.h): their byte layout, and
 * rejection of damaged and hostile entries, trailers and tables. One group
 * of the test-pack program (test-pack.c runs it).
 */
#include "storage/pack/test-pack-util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- index and trailer ---- */

static void test_index_round_trip(void **state)
{
    struct tpack tp;
    struct pack_trailer t;
    struct pack_index_entry *entries = NULL;
    const uint8_t *trailer, *first;

    test_rng_state = 9;
    tpack_make(&tp, 9, true);
    trailer = tp.buf + tp.len - PACK_TRAILER_SIZE;
    first = tp.buf + tp.index_off;
    /* The layout of the first entry and of the trailer. */
    assert_int_equal(first[0], tp.ent[0].type);
    assert_int_equal(first[1] | first[2] | first[3], 0);
    assert_int_equal(test_get32(first + 4), tp.ent[0].record_len);
    assert_int_equal(test_get64(first + 8), tp.ent[0].record_off);
    assert_int_equal(test_get32(first + 16), tp.ent[0].sub_off);
    assert_int_equal(test_get32(first + 20), tp.ent[0].raw_size);
    assert_memory_equal(first + 24, tp.ent[0].id, PROTO_HASH_LEN);
    assert_int_equal(test_get64(trailer), tp.index_off);
    assert_int_equal(test_get32(trailer + 8), tp.nent);
    assert_int_equal(test_get32(trailer + 12), pack_crc32c(0, first, tp.nent * PACK_INDEX_ENTRY));
    assert_int_equal(test_get64(trailer + 16), tp.seq);
    assert_memory_equal(trailer + 24, "cRnPIDX1", 8);

    assert_int_equal(pack_trailer_parse(trailer, tp.len, &t), 0);
    assert_int_equal(t.index_off, tp.index_off);
    assert_int_equal(t.count, tp.nent);
    assert_int_equal(t.seq, tp.seq);
    assert_int_equal(pack_index_parse(first, tp.nent * PACK_INDEX_ENTRY, &t, &entries), 0);
    for (size_t i = 0; i < tp.nent; i++) {
        assert_int_equal(entries[i].type, tp.ent[i].type);
        assert_int_equal(entries[i].record_len, tp.ent[i].record_len);
        assert_int_equal(entries[i].record_off, tp.ent[i].record_off);
        assert_int_equal(entries[i].sub_off, tp.ent[i].sub_off);
        assert_int_equal(entries[i].raw_size, tp.ent[i].raw_size);
        assert_memory_equal(entries[i].id, tp.ent[i].id, PROTO_HASH_LEN);
    }
    free(entries);
    /* The index must be given whole, and nothing more. */
    assert_int_equal(pack_index_parse(first, tp.nent * PACK_INDEX_ENTRY - 1, &t, &entries),
                     PACK_E_TRUNCATED);
    assert_int_equal(pack_index_parse(first, tp.nent * PACK_INDEX_ENTRY + 1, &t, &entries),
                     PACK_E_CORRUPT);
    tpack_free(&tp);
}

/*
 * Parses a one-entry index holding `e` with `len` bytes at `pos` replaced by
 * `value`, its checksum fixed up, so that only the entry checks can refuse it.
 * The index starts at offset 1000.
 */
static int parse_patched(const struct pack_index_entry *e, size_t pos, const void *value,
                         size_t len)
{
    enum { INDEX_OFF = 1000 };
    struct pack_index_entry *out = NULL;
    uint8_t index[PACK_INDEX_ENTRY + PACK_TRAILER_SIZE];
    struct pack_trailer t;
    int r;

    pack_index_encode(index, e, 1, INDEX_OFF, 1);
    if (len)
        memcpy(index + pos, value, len);
    test_put32(index + PACK_INDEX_ENTRY + 12, pack_crc32c(0, index, PACK_INDEX_ENTRY));
    assert_int_equal(pack_trailer_parse(index + PACK_INDEX_ENTRY, INDEX_OFF + sizeof(index), &t),
                     0);
    r = pack_index_parse(index, PACK_INDEX_ENTRY, &t, &out);
    if (r == 0)
        assert_int_equal(out[0].type, index[0]);
    free(out);
    return r;
}

static const struct pack_index_entry chunk_entry = {PACK_IDX_CHUNK, 100, 500, 10, 20, {7}};
static const struct pack_index_entry manifest_entry = {PACK_IDX_MANIFEST, 100, 500, 0, 20, {7}};

static int patched_u32(size_t pos, uint32_t v)
{
    uint8_t b[4];

    test_put32(b, v);
    return parse_patched(&chunk_entry, pos, b, 4);
}

static int patched_u64(size_t pos, uint64_t v)
{
    uint8_t b[8];

    test_put64(b, v);
    return parse_patched(&chunk_entry, pos, b, 8);
}

static void test_index_hostile_entries(void **state)
{
    const uint8_t bytes[][2] = {{0, 0}, {0, 4}, {0, 0xff}, {1, 1}, {2, 1}, {3, 0x80}};

    assert_int_equal(parse_patched(&chunk_entry, 0, NULL, 0), 0);
    assert_int_equal(parse_patched(&manifest_entry, 0, NULL, 0), 0);
    for (size_t i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++)
        assert_int_equal(parse_patched(&chunk_entry, bytes[i][0], &bytes[i][1], 1), PACK_E_CORRUPT);
    /* record_len (4), record_off (8), sub_off (16), raw_size (20); index_off is 1000. */
    assert_int_equal(patched_u32(4, PACK_RECORD_HEADER - 1), PACK_E_CORRUPT);
    assert_int_equal(patched_u32(4, PACK_RECORD_HEADER + PACK_MAX_PAYLOAD + 1), PACK_E_CORRUPT);
    assert_int_equal(patched_u32(4, UINT32_MAX), PACK_E_CORRUPT);
    assert_int_equal(patched_u64(8, PACK_HEADER_SIZE - 1), PACK_E_CORRUPT);
    assert_int_equal(patched_u64(8, PACK_HEADER_SIZE), 0);
    assert_int_equal(patched_u64(8, 900), 0); /* ends exactly at index_off */
    assert_int_equal(patched_u64(8, 901), PACK_E_CORRUPT);
    assert_int_equal(patched_u64(8, 1000), PACK_E_CORRUPT);
    assert_int_equal(patched_u64(8, UINT64_MAX - 50), PACK_E_CORRUPT);
    assert_int_equal(patched_u32(16, UINT32_MAX), PACK_E_CORRUPT);
    assert_int_equal(patched_u32(16, UINT32_MAX - 20), 0);
    assert_int_equal(patched_u32(16, UINT32_MAX - 19), PACK_E_CORRUPT);
    assert_int_equal(patched_u32(20, 0), PACK_E_CORRUPT); /* an empty chunk */
    /* Manifest and journal entries stand for whole records, so their sub_off is 0. */
    assert_int_equal(parse_patched(&chunk_entry, 0, "\x02", 1), PACK_E_CORRUPT);
    assert_int_equal(parse_patched(&manifest_entry, 16, "\x00\x00\x00\x01", 4), PACK_E_CORRUPT);
    assert_int_equal(parse_patched(&manifest_entry, 0, "\x03", 1), 0);
}

static void test_index_damaged(void **state)
{
    struct tpack tp;
    struct pack_trailer t;
    struct pack_index_entry *entries;
    uint8_t tail[PACK_TRAILER_SIZE];
    size_t index_len;

    test_rng_state = 10;
    tpack_make(&tp, 6, true);
    index_len = tp.nent * PACK_INDEX_ENTRY;
    /* Any flipped bit in the index fails its checksum. */
    for (size_t bit = 0; bit < index_len * 8; bit++) {
        uint8_t *p = tp.buf + tp.index_off + bit / 8;

        *p ^= (uint8_t)(1u << (bit % 8));
        assert_int_equal(pack_trailer_parse(tp.buf + tp.len - PACK_TRAILER_SIZE, tp.len, &t), 0);
        assert_int_equal(pack_index_parse(tp.buf + tp.index_off, index_len, &t, &entries),
                         PACK_E_CORRUPT);
        *p ^= (uint8_t)(1u << (bit % 8));
    }
    /*
     * A flipped bit in the trailer is refused by the trailer or the index
     * check, except in seq, which nothing in the trailer covers: that is
     * left to pack_scan(), which compares it with the header.
     */
    for (size_t bit = 0; bit < PACK_TRAILER_SIZE * 8; bit++) {
        int r;

        memcpy(tail, tp.buf + tp.len - PACK_TRAILER_SIZE, sizeof(tail));
        tail[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        r = pack_trailer_parse(tail, tp.len, &t);
        if (r == 0)
            r = pack_index_parse(tp.buf + tp.index_off, index_len, &t, &entries);
        if (bit / 8 >= 16 && bit / 8 < 24) {
            assert_int_equal(r, 0);
            /* Byte 16 is the top byte of seq, and bit k of a byte is worth 2^k. */
            assert_int_equal(t.seq, tp.seq ^ (1ull << ((23 - bit / 8) * 8 + bit % 8)));
            free(entries);
        } else {
            assert_true(r == PACK_E_CORRUPT || r == PACK_E_TRUNCATED);
        }
    }
    memcpy(tail, tp.buf + tp.len - PACK_TRAILER_SIZE, sizeof(tail));
    /* The size the trailer implies must be the pack's, within the format's limits. */
    assert_int_equal(pack_trailer_parse(tail, tp.len + 1, &t), PACK_E_CORRUPT);
    assert_int_equal(pack_trailer_parse(tail, tp.len - 1, &t), PACK_E_CORRUPT);
    assert_int_equal(pack_trailer_parse(tail, 0, &t), PACK_E_CORRUPT);
    assert_int_equal(pack_trailer_parse(tail, UINT64_MAX, &t), PACK_E_CORRUPT);
    /* An index that would overlap the pack header. */
    test_put64(tail, PACK_HEADER_SIZE - 1);
    test_put32(tail + 8, 1);
    assert_int_equal(
        pack_trailer_parse(tail, PACK_HEADER_SIZE - 1 + PACK_INDEX_ENTRY + PACK_TRAILER_SIZE, &t),
        PACK_E_CORRUPT);
    /* Offsets and counts chosen so that unchecked sums would wrap around to the pack size. */
    test_put64(tail, UINT64_MAX - 43); /* plus 2 entries and the trailer is 2^64 + 100 */
    test_put32(tail + 8, 2);
    assert_int_equal(pack_trailer_parse(tail, 100, &t), PACK_E_CORRUPT);
    test_put64(tail, PACK_HEADER_SIZE);
    test_put32(tail + 8, UINT32_MAX);
    assert_int_equal(pack_trailer_parse(tail, 100, &t), PACK_E_CORRUPT);
    assert_int_equal(pack_trailer_parse(tail,
                                        PACK_HEADER_SIZE + (uint64_t)UINT32_MAX * PACK_INDEX_ENTRY +
                                            PACK_TRAILER_SIZE,
                                        &t),
                     0);
    test_put64(tail, PACK_MAX_SIZE);
    test_put32(tail + 8, 0);
    assert_int_equal(pack_trailer_parse(tail, PACK_MAX_SIZE + PACK_TRAILER_SIZE, &t),
                     PACK_E_CORRUPT);
    tpack_free(&tp);
}

/* ---- block payloads ---- */

static void test_block_round_trip(void **state)
{
    static struct pack_block_chunk chunks[PACK_MAX_BLOCK_CHUNKS];
    const uint32_t counts[] = {1, 2, 7, PACK_MAX_BLOCK_CHUNKS};
    struct pack_block_chunk *out = NULL;
    uint32_t count;
    size_t body_off;

    test_rng_state = 11;
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        uint32_t n = counts[c], raw = 0;
        size_t len = pack_block_table_size(n) + 10;
        uint8_t *payload = malloc(len);

        assert_non_null(payload);
        for (uint32_t i = 0; i < n; i++) {
            test_rng_fill(chunks[i].id, PROTO_HASH_LEN);
            chunks[i].size = 1 + (uint32_t)test_rng_below(i % 3 ? 100 : 100000);
        }
        pack_block_table_encode(payload, chunks, n);
        assert_int_equal(test_get32(payload), n);
        assert_int_equal(test_get32(payload + 4 + PROTO_HASH_LEN), chunks[0].size);
        assert_int_equal(pack_block_parse(payload, len, &out, &count, &body_off), 0);
        assert_int_equal(count, n);
        assert_int_equal(body_off, pack_block_table_size(n));
        for (uint32_t i = 0; i < n; i++) {
            assert_memory_equal(out[i].id, chunks[i].id, PROTO_HASH_LEN);
            assert_int_equal(out[i].size, chunks[i].size);
            assert_int_equal(out[i].sub_off, raw);
            raw += chunks[i].size;
        }
        free(out);
        free(payload);
    }
}

static void test_block_hostile(void **state)
{
    struct pack_block_chunk chunks[3] = {{{1}, 10, 0}, {{2}, 20, 0}, {{3}, 30, 0}}, *out;
    uint8_t table[4 + 3 * PACK_BLOCK_ENTRY];
    uint32_t count;
    size_t body_off;

    pack_block_table_encode(table, chunks, 3);
    for (size_t len = 0; len < sizeof(table); len++) {
        uint8_t *cut = test_dup_exact(table, len);
        assert_int_equal(pack_block_parse(cut, len, &out, &count, &body_off), PACK_E_CORRUPT);
        free(cut);
    }
    /* An empty body is the envelope parser's to refuse; the table itself is fine. */
    assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off), 0);
    assert_int_equal(body_off, sizeof(table));
    free(out);
    for (uint32_t i = 0; i < 3; i++) {
        test_put32(table + 4 + i * PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 0);
        assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off),
                         PACK_E_CORRUPT);
        test_put32(table + 4 + i * PACK_BLOCK_ENTRY + PROTO_HASH_LEN, chunks[i].size);
    }
    const uint32_t bad_counts[] = {0, 4, PACK_MAX_BLOCK_CHUNKS + 1, UINT32_MAX};
    for (size_t i = 0; i < sizeof(bad_counts) / sizeof(bad_counts[0]); i++) {
        test_put32(table, bad_counts[i]);
        assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off),
                         PACK_E_CORRUPT);
    }
    /* One chunk over the limit is refused even when the payload holds the whole table. */
    uint8_t *big = calloc(1, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS + 1));
    assert_non_null(big);
    for (uint32_t i = 0; i <= PACK_MAX_BLOCK_CHUNKS; i++)
        test_put32(big + 4 + (size_t)i * PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 1);
    test_put32(big, PACK_MAX_BLOCK_CHUNKS + 1);
    assert_int_equal(pack_block_parse(big, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS + 1), &out,
                                      &count, &body_off),
                     PACK_E_CORRUPT);
    test_put32(big, PACK_MAX_BLOCK_CHUNKS);
    assert_int_equal(pack_block_parse(big, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS + 1), &out,
                                      &count, &body_off),
                     0);
    assert_int_equal(body_off, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS));
    free(out);
    free(big);
    /* Sizes may add up to the largest u32 offset, and no further. */
    test_put32(table, 3);
    test_put32(table + 4 + PROTO_HASH_LEN, 0x80000000u);
    test_put32(table + 4 + PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 0x7fffffffu - 30);
    assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off), 0);
    assert_int_equal(out[2].sub_off, UINT32_MAX - 30);
    free(out);
    test_put32(table + 4 + PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 0x80000000u - 30);
    assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off),
                     PACK_E_CORRUPT);
}

int test_pack_index_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_index_round_trip), cmocka_unit_test(test_index_hostile_entries),
        cmocka_unit_test(test_index_damaged),    cmocka_unit_test(test_block_round_trip),
        cmocka_unit_test(test_block_hostile),
    };

    return cmocka_run_group_tests_name("pack indexes and block tables", tests, NULL, NULL);
}
