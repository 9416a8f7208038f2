/*
 * Unit tests for the pack format (storage/pack/pack.h): pack keys; the byte
 * layout of headers and records; rejection of truncated, bit-flipped and
 * hostile records; torn-tail recovery and seal detection by pack_scan().
 * main() also runs the tests of indexes, trailers and block tables
 * (test-pack-index.c). CRC-32C is tested in test-crc32c.c, and the fuzz
 * loop over every parser is in test-pack-fuzz.c.
 * Buffers handed to parsers are allocated at their exact size, so a read
 * past the end is caught by the sanitizers.
 */
#include "storage/pack/test-pack-util.h"
#include "storage/pack/pack-int.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- what a scan reported ---- */

/* What pack_scan() reported through its callback. */
struct seen {
    size_t n;
    size_t stop_at; /* return 7 from the callback for this record */
    uint64_t off[TPACK_MAX_RECS];
    struct pack_record rec[TPACK_MAX_RECS];
};

static int seen_record(void *ctx, uint64_t offset, const struct pack_record *rec)
{
    struct seen *s = ctx;

    assert_true(s->n < TPACK_MAX_RECS);
    s->off[s->n] = offset;
    s->rec[s->n] = *rec;
    return ++s->n == s->stop_at ? 7 : 0;
}

/* Asserts that `s` holds exactly the first k records of tp, read from buf (a copy of tp's). */
static void assert_seen(const struct seen *s, const struct tpack *tp, const uint8_t *buf, size_t k)
{
    assert_int_equal(s->n, k);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(s->off[i], tp->rec_off[i]);
        assert_int_equal(s->rec[i].type, tp->rec_type[i]);
        assert_int_equal(s->rec[i].length, tp->rec_length[i]);
        assert_memory_equal(s->rec[i].id, tp->rec_id[i], PROTO_HASH_LEN);
        assert_ptr_equal(s->rec[i].payload, buf + tp->rec_off[i] + PACK_RECORD_HEADER);
    }
}

/* ---- keys ---- */

static void test_pack_key(void **state)
{
    char key[64], small[8 + 1];
    uint64_t writer, seq;

    /* Writer 0, of stores from before writers had ids. */
    pack_key(key, sizeof(key), 0, 0x2a);
    assert_string_equal(key, "packs/000000000000002a");
    assert_int_equal(pack_key_parse(key, &writer, &seq), 0);
    assert_int_equal(writer, 0);
    assert_int_equal(seq, 0x2a);
    pack_key(key, sizeof(key), 0, PACK_SEQ_MAX);
    assert_string_equal(key, "packs/0000ffffffffffff");
    assert_memory_equal(key, PACK_KEY_PREFIX, strlen(PACK_KEY_PREFIX));
    /* A writer's own. */
    pack_key(key, sizeof(key), 0x0123456789abcdefull, 7);
    assert_string_equal(key, "packs/0123456789abcdef-0000000000000007");
    assert_true(strlen(key) < PACK_KEY_MAX);
    assert_int_equal(pack_key_parse(key, &writer, &seq), 0);
    assert_int_equal(writer, 0x0123456789abcdefull);
    assert_int_equal(seq, 7);
    pack_key(key, sizeof(key), UINT64_MAX, PACK_SEQ_MAX);
    assert_int_equal(pack_key_parse(key, &writer, &seq), 0);
    assert_int_equal(writer, UINT64_MAX);
    assert_int_equal(seq, PACK_SEQ_MAX);
    /* Whatever else is no pack. */
    static const char *const bad[] = {
        "packs/",
        "packs/0000000000000000",
        "packs/0001000000000000",
        "packs/000000000000002A",
        "packs/000000000000002",
        "packs/000000000000002a0",
        "packs/0000000000000000-0000000000000001",
        "packs/0123456789abcdef-0000000000000000",
        "packs/0123456789abcdef_0000000000000001",
        "packs/0123456789abcdef-000000000000001",
        "other/000000000000002a",
        "packs/x.tmp",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (pack_key_parse(bad[i], &writer, &seq) != -EINVAL)
            fail_msg("%s was taken for a pack's key", bad[i]);
    /* A buffer too short gets a cut key, terminated, and nothing past its end. */
    small[8] = 'x';
    pack_key(small, 8, 0, 0x2a);
    assert_string_equal(small, "packs/0");
    assert_int_equal(small[8], 'x');
}

/* ---- header ---- */

static void test_header(void **state)
{
    static const uint8_t want[PACK_HEADER_SIZE] = {'c',  'R',  'n',  'P',  'A',  'C',  'K',  '1',
                                                   0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    uint8_t hdr[PACK_HEADER_SIZE];
    uint64_t seq = 0;

    pack_header_encode(hdr, 0x0102030405060708ull);
    assert_memory_equal(hdr, want, sizeof(want));
    assert_int_equal(pack_header_decode(hdr, sizeof(hdr), &seq), 0);
    assert_int_equal(seq, 0x0102030405060708ull);
    for (size_t len = 0; len < PACK_HEADER_SIZE; len++) {
        uint8_t *cut = test_dup_exact(hdr, len);
        assert_int_equal(pack_header_decode(cut, len, &seq), PACK_E_TRUNCATED);
        free(cut);
    }
    for (size_t bit = 0; bit < 64; bit++) {
        hdr[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_int_equal(pack_header_decode(hdr, sizeof(hdr), &seq), PACK_E_CORRUPT);
        hdr[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

/* ---- records ---- */

/* A whole record (header and payload) of `type` with payload p[0..len), in an exact-size block. */
static uint8_t *make_record(enum pack_rec_type type, const uint8_t *id, const uint8_t *p,
                            size_t len)
{
    struct pack_part part = {p, len};
    uint8_t *rec = malloc(PACK_RECORD_HEADER + len);

    assert_non_null(rec);
    pack_record_header_encode(rec, type, id, &part, 1);
    memcpy(rec + PACK_RECORD_HEADER, p, len);
    return rec;
}

static void test_record_round_trip(void **state)
{
    uint8_t id[PROTO_HASH_LEN], payload[1500], joined[8 + PROTO_HASH_LEN + sizeof(payload)];
    uint8_t split_hdr[PACK_RECORD_HEADER];
    const size_t cuts[] = {0, 0, 1, 100, 100, 777, sizeof(payload)};
    struct pack_part parts[6];
    struct pack_record rec;
    enum pack_rec_type type;
    uint8_t peek_id[PROTO_HASH_LEN];
    uint32_t length;

    test_rng_state = 3;
    test_rng_fill(id, sizeof(id));
    test_rng_fill(payload, sizeof(payload));
    for (int t = PACK_REC_BLOCK; t <= PACK_REC_ENTRY; t++) {
        uint8_t *whole = make_record((enum pack_rec_type)t, id, payload, sizeof(payload));

        /* The layout: type, two zero fields, big-endian length, crc, id, payload. */
        assert_int_equal(whole[0], t);
        assert_int_equal(whole[1] | whole[2] | whole[3], 0);
        assert_int_equal(test_get32(whole + 4), sizeof(payload));
        assert_memory_equal(whole + 12, id, PROTO_HASH_LEN);
        memcpy(joined, whole, 8);
        memcpy(joined + 8, id, PROTO_HASH_LEN);
        memcpy(joined + 8 + PROTO_HASH_LEN, payload, sizeof(payload));
        assert_int_equal(test_get32(whole + 8), pack_crc32c_sw(0, joined, sizeof(joined)));

        /* A payload given in pieces, empty ones included, checksums the same. */
        for (size_t i = 0; i + 1 < sizeof(cuts) / sizeof(cuts[0]); i++)
            parts[i] = (struct pack_part){payload + cuts[i], cuts[i + 1] - cuts[i]};
        pack_record_header_encode(split_hdr, (enum pack_rec_type)t, id, parts, 6);
        assert_memory_equal(split_hdr, whole, PACK_RECORD_HEADER);

        assert_int_equal(pack_record_parse(whole, PACK_RECORD_HEADER + sizeof(payload), &rec), 0);
        assert_int_equal(rec.type, t);
        assert_memory_equal(rec.id, id, PROTO_HASH_LEN);
        assert_int_equal(rec.length, sizeof(payload));
        assert_ptr_equal(rec.payload, whole + PACK_RECORD_HEADER);
        assert_int_equal(pack_record_peek(whole, PACK_RECORD_HEADER, &type, peek_id, &length), 0);
        assert_int_equal(type, t);
        assert_memory_equal(peek_id, id, PROTO_HASH_LEN);
        assert_int_equal(length, sizeof(payload));
        free(whole);
    }
    /* An empty payload is a valid record, even with nothing after it. */
    pack_record_header_encode(split_hdr, PACK_REC_ENTRY, id, NULL, 0);
    assert_int_equal(pack_record_parse(split_hdr, sizeof(split_hdr), &rec), 0);
    assert_int_equal(rec.length, 0);
    assert_int_equal(rec.type, PACK_REC_ENTRY);
}

static void test_record_truncated(void **state)
{
    uint8_t id[PROTO_HASH_LEN], payload[300];
    uint8_t *whole;
    struct pack_record rec;
    enum pack_rec_type type;
    uint32_t length;

    test_rng_state = 4;
    test_rng_fill(id, sizeof(id));
    test_rng_fill(payload, sizeof(payload));
    whole = make_record(PACK_REC_BLOCK, id, payload, sizeof(payload));
    for (size_t len = 0; len < PACK_RECORD_HEADER + sizeof(payload); len++) {
        uint8_t *cut = test_dup_exact(whole, len);
        assert_int_equal(pack_record_parse(cut, len, &rec), PACK_E_TRUNCATED);
        assert_int_equal(pack_record_peek(cut, len, &type, id, &length),
                         len < PACK_RECORD_HEADER ? PACK_E_TRUNCATED : 0);
        free(cut);
    }
    free(whole);
}

static void test_record_bit_flips(void **state)
{
    enum { PAYLOAD = 200, SPARE = 4096 };
    uint8_t id[PROTO_HASH_LEN], payload[PAYLOAD];
    uint8_t *whole, *roomy = malloc(PACK_RECORD_HEADER + PAYLOAD + SPARE);
    struct pack_record rec;
    size_t len = PACK_RECORD_HEADER + PAYLOAD;

    test_rng_state = 5;
    assert_non_null(roomy);
    test_rng_fill(id, sizeof(id));
    test_rng_fill(payload, sizeof(payload));
    whole = make_record(PACK_REC_MANIFEST, id, payload, PAYLOAD);
    /*
     * Once with the record alone and once with spare bytes after it, so a
     * flip that raises the length is read against real bytes and must fail
     * the checksum instead of merely running out of buffer.
     */
    memcpy(roomy, whole, len);
    test_rng_fill(roomy + len, SPARE);
    for (size_t bit = 0; bit < len * 8; bit++) {
        int r;

        whole[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        r = pack_record_parse(whole, len, &rec);
        assert_true(r == PACK_E_CORRUPT || r == PACK_E_TRUNCATED);
        whole[bit / 8] ^= (uint8_t)(1u << (bit % 8));

        roomy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        r = pack_record_parse(roomy, len + SPARE, &rec);
        assert_true(r == PACK_E_CORRUPT || r == PACK_E_TRUNCATED);
        roomy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    assert_int_equal(pack_record_parse(whole, len, &rec), 0);
    free(whole);
    free(roomy);
}

static void test_record_bad_header(void **state)
{
    uint8_t id[PROTO_HASH_LEN] = {0}, hdr[PACK_RECORD_HEADER];
    const struct {
        size_t pos;
        uint8_t value;
    } bad[] = {{0, 0}, {0, 4}, {0, 0xff}, {1, 2}, {1, 0x80}, {2, 1}, {3, 1}};
    struct pack_record rec;
    enum pack_rec_type type;
    uint32_t length;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pack_record_header_encode(hdr, PACK_REC_ENTRY, id, NULL, 0);
        hdr[bad[i].pos] = bad[i].value;
        assert_int_equal(pack_record_peek(hdr, sizeof(hdr), &type, id, &length), PACK_E_CORRUPT);
        assert_int_equal(pack_record_parse(hdr, sizeof(hdr), &rec), PACK_E_CORRUPT);
    }
    /* A length no record may have is corrupt even when the buffer stops at the header. */
    pack_record_header_encode(hdr, PACK_REC_BLOCK, id, NULL, 0);
    test_put32(hdr + 4, PACK_MAX_PAYLOAD + 1);
    assert_int_equal(pack_record_peek(hdr, sizeof(hdr), &type, id, &length), PACK_E_CORRUPT);
    assert_int_equal(pack_record_parse(hdr, sizeof(hdr), &rec), PACK_E_CORRUPT);
    test_put32(hdr + 4, UINT32_MAX);
    assert_int_equal(pack_record_parse(hdr, sizeof(hdr), &rec), PACK_E_CORRUPT);
    test_put32(hdr + 4, PACK_MAX_PAYLOAD);
    assert_int_equal(pack_record_peek(hdr, sizeof(hdr), &type, id, &length), 0);
    assert_int_equal(length, PACK_MAX_PAYLOAD);
    assert_int_equal(pack_record_parse(hdr, sizeof(hdr), &rec), PACK_E_TRUNCATED);
}

/* ---- scanning ---- */

static void test_scan_intact(void **state)
{
    struct tpack tp;
    struct seen s = {0};
    uint64_t end = 1;
    bool sealed = true;

    test_rng_state = 6;
    tpack_make(&tp, 12, false);
    assert_int_equal(pack_scan(tp.buf, tp.len, seen_record, &s, &end, &sealed), 0);
    assert_seen(&s, &tp, tp.buf, 12);
    assert_int_equal(end, tp.len);
    assert_false(sealed);

    /* A callback's non-zero return stops the scan and comes back unchanged. */
    memset(&s, 0, sizeof(s));
    s.stop_at = 3;
    assert_int_equal(pack_scan(tp.buf, tp.len, seen_record, &s, &end, &sealed), 7);
    assert_seen(&s, &tp, tp.buf, 3);
    assert_int_equal(end, tp.rec_off[2]); /* the refused record is not counted */

    /* A header alone is an empty pack; a bad header is reported before any record. */
    memset(&s, 0, sizeof(s));
    assert_int_equal(pack_scan(tp.buf, PACK_HEADER_SIZE, seen_record, &s, &end, &sealed), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(end, PACK_HEADER_SIZE);
    assert_int_equal(pack_scan(tp.buf, PACK_HEADER_SIZE - 1, seen_record, &s, &end, &sealed),
                     PACK_E_TRUNCATED);
    tp.buf[0] ^= 1;
    assert_int_equal(pack_scan(tp.buf, tp.len, seen_record, &s, &end, &sealed), PACK_E_CORRUPT);
    assert_int_equal(s.n, 0);
    tpack_free(&tp);
}

static void test_scan_torn_tail(void **state)
{
    enum { N = 8 };
    struct tpack tp;
    uint64_t last, end;
    bool sealed;

    test_rng_state = 7;
    tpack_make(&tp, N, false);
    last = tp.rec_off[N - 1];
    for (size_t len = last; len < tp.len; len++) {
        uint8_t *cut = test_dup_exact(tp.buf, len);
        struct seen s = {0};

        assert_int_equal(pack_scan(cut, len, seen_record, &s, &end, &sealed), 0);
        assert_seen(&s, &tp, cut, N - 1);
        assert_int_equal(end, last);
        assert_false(sealed);
        free(cut);
    }
    /* Damage in the middle stops the scan there; what follows is not trusted. */
    for (size_t k = 0; k < N; k++) {
        struct seen s = {0};
        size_t pos = tp.rec_off[k] + PACK_RECORD_HEADER / 2;

        tp.buf[pos] ^= 0x10;
        assert_int_equal(pack_scan(tp.buf, tp.len, seen_record, &s, &end, &sealed), 0);
        assert_seen(&s, &tp, tp.buf, k);
        assert_int_equal(end, tp.rec_off[k]);
        tp.buf[pos] ^= 0x10;
    }
    tpack_free(&tp);
}

static void test_scan_sealed(void **state)
{
    enum { N = 10 };
    struct tpack tp, empty;
    struct seen s = {0};
    uint64_t end;
    bool sealed;

    test_rng_state = 8;
    tpack_make(&tp, N, true);
    assert_int_equal(pack_scan(tp.buf, tp.len, seen_record, &s, &end, &sealed), 0);
    assert_seen(&s, &tp, tp.buf, N);
    assert_int_equal(end, tp.index_off);
    assert_true(sealed);

    /* An index cut short (a crash while sealing) leaves an unsealed pack ending at the records. */
    for (size_t len = tp.index_off; len < tp.len; len++) {
        uint8_t *cut = test_dup_exact(tp.buf, len);

        memset(&s, 0, sizeof(s));
        assert_int_equal(pack_scan(cut, len, seen_record, &s, &end, &sealed), 0);
        assert_seen(&s, &tp, cut, N);
        assert_int_equal(end, tp.index_off);
        assert_false(sealed);
        free(cut);
    }
    /* Damage anywhere in the index or trailer, or a trailer for another pack, unseals it. */
    for (size_t pos = tp.index_off; pos < tp.len; pos += 7) {
        tp.buf[pos] ^= 0x04;
        memset(&s, 0, sizeof(s));
        assert_int_equal(pack_scan(tp.buf, tp.len, seen_record, &s, &end, &sealed), 0);
        assert_int_equal(s.n, N);
        assert_int_equal(end, tp.index_off);
        assert_false(sealed);
        tp.buf[pos] ^= 0x04;
    }

    tpack_make(&empty, 0, true);
    assert_int_equal(empty.len, PACK_HEADER_SIZE + PACK_TRAILER_SIZE);
    memset(&s, 0, sizeof(s));
    assert_int_equal(pack_scan(empty.buf, empty.len, seen_record, &s, &end, &sealed), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(end, PACK_HEADER_SIZE);
    assert_true(sealed);
    tpack_free(&empty);
    tpack_free(&tp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_key),          cmocka_unit_test(test_header),
        cmocka_unit_test(test_record_round_trip), cmocka_unit_test(test_record_truncated),
        cmocka_unit_test(test_record_bit_flips),  cmocka_unit_test(test_record_bad_header),
        cmocka_unit_test(test_scan_intact),       cmocka_unit_test(test_scan_torn_tail),
        cmocka_unit_test(test_scan_sealed),
    };

    return cmocka_run_group_tests_name("pack keys, headers, records and scans", tests, NULL, NULL) +
           test_pack_index_run();
}
