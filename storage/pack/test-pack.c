/*
 * Unit tests for the pack format (storage/pack/pack.h): pack keys; the byte
 * layout of headers, records, block tables, index entries and trailers;
 * rejection of truncated, bit-flipped and hostile input; torn-tail recovery
 * and seal detection by pack_scan(). CRC-32C is tested in test-crc32c.c,
 * and the fuzz loop over every parser is in test-pack-fuzz.c.
 * Buffers handed to parsers are allocated at their exact size, so a read
 * past the end is caught by the sanitizers.
 */
#include "storage/pack/pack.h"
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

/* ---- helpers ---- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* A uniform value in [0, n); n > 0. */
static size_t rng_below(size_t n)
{
    return (size_t)(rng_next() % n);
}

static void rng_fill(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)rng_next();
}

/* A copy of p[0..len) in a block of exactly len bytes (one byte for len 0). */
static uint8_t *dup_exact(const uint8_t *p, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);

    assert_non_null(copy);
    if (len)
        memcpy(copy, p, len);
    return copy;
}

static uint32_t get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get64(const uint8_t *p)
{
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* ---- test packs ---- */

#define MAX_RECS 16
#define MAX_ENTRIES (MAX_RECS * 8)

/* A pack built in memory, with what each record and index entry should read back as. */
struct tpack {
    uint8_t *buf;
    size_t len;
    uint64_t seq;
    size_t nrec;
    uint64_t rec_off[MAX_RECS];
    enum pack_rec_type rec_type[MAX_RECS];
    uint32_t rec_length[MAX_RECS];
    uint8_t rec_id[MAX_RECS][PROTO_HASH_LEN];
    size_t nent;
    struct pack_index_entry ent[MAX_ENTRIES];
    uint64_t index_off; /* 0 while unsealed */
};

static void tpack_append(struct tpack *tp, const void *p, size_t len)
{
    tp->buf = realloc(tp->buf, tp->len + len);
    assert_non_null(tp->buf);
    memcpy(tp->buf + tp->len, p, len);
    tp->len += len;
}

static void tpack_init(struct tpack *tp, uint64_t seq)
{
    uint8_t header[PACK_HEADER_SIZE];

    memset(tp, 0, sizeof(*tp));
    tp->seq = seq;
    pack_header_encode(header, seq);
    tpack_append(tp, header, sizeof(header));
}

/*
 * Appends a record of `type` with `body_len` random body bytes; a block gets
 * a table of 1..5 chunks in front of its body and one index entry per chunk.
 */
static void tpack_add(struct tpack *tp, enum pack_rec_type type, size_t body_len)
{
    struct pack_block_chunk chunks[5];
    uint8_t table[4 + 5 * PACK_BLOCK_ENTRY];
    uint8_t header[PACK_RECORD_HEADER];
    uint8_t *body = malloc(body_len + 1);
    struct pack_part parts[2] = {{table, 0}, {body, body_len}};
    uint32_t nchunks = 0, raw_off = 0;
    size_t r = tp->nrec;

    assert_true(r < MAX_RECS && tp->nent + 5 <= MAX_ENTRIES);
    assert_non_null(body);
    rng_fill(body, body_len);
    if (type == PACK_REC_BLOCK) {
        nchunks = 1 + (uint32_t)rng_below(5);
        for (uint32_t i = 0; i < nchunks; i++) {
            rng_fill(chunks[i].id, PROTO_HASH_LEN);
            chunks[i].size = 1 + (uint32_t)rng_below(3000);
        }
        pack_block_table_encode(table, chunks, nchunks);
        parts[0].len = pack_block_table_size(nchunks);
    }
    rng_fill(tp->rec_id[r], PROTO_HASH_LEN);
    pack_record_header_encode(header, type, tp->rec_id[r], parts, 2);
    tp->rec_off[r] = tp->len;
    tp->rec_type[r] = type;
    tp->rec_length[r] = (uint32_t)(parts[0].len + body_len);
    tpack_append(tp, header, sizeof(header));
    tpack_append(tp, table, parts[0].len);
    tpack_append(tp, body, body_len);
    free(body);
    for (uint32_t i = 0; i < (type == PACK_REC_BLOCK ? nchunks : 1); i++) {
        struct pack_index_entry *e = &tp->ent[tp->nent++];

        e->type = type == PACK_REC_BLOCK ? PACK_IDX_CHUNK : (enum pack_idx_type)type;
        e->record_off = tp->rec_off[r];
        e->record_len = PACK_RECORD_HEADER + tp->rec_length[r];
        e->sub_off = type == PACK_REC_BLOCK ? raw_off : 0;
        e->raw_size = type == PACK_REC_BLOCK ? chunks[i].size : 1 + (uint32_t)rng_below(5000);
        memcpy(e->id, type == PACK_REC_BLOCK ? chunks[i].id : tp->rec_id[r], PROTO_HASH_LEN);
        if (type == PACK_REC_BLOCK)
            raw_off += chunks[i].size;
    }
    tp->nrec++;
}

static void tpack_seal(struct tpack *tp)
{
    size_t size = pack_index_size(tp->nent);
    uint8_t *index = malloc(size);

    assert_non_null(index);
    tp->index_off = tp->len;
    pack_index_encode(index, tp->ent, tp->nent, tp->index_off, tp->seq);
    tpack_append(tp, index, size);
    free(index);
}

/* A pack of n records of every type and assorted sizes, empty payloads included. */
static void tpack_make(struct tpack *tp, size_t n, bool sealed)
{
    tpack_init(tp, 0x0102030405060708ull + n);
    for (size_t i = 0; i < n; i++)
        tpack_add(tp, (enum pack_rec_type)(1 + i % 3), i % 4 == 1 ? 0 : rng_below(400));
    if (sealed)
        tpack_seal(tp);
}

static void tpack_free(struct tpack *tp)
{
    free(tp->buf);
    tp->buf = NULL;
}

/* What pack_scan() reported through its callback. */
struct seen {
    size_t n;
    size_t stop_at; /* return 7 from the callback for this record */
    uint64_t off[MAX_RECS];
    struct pack_record rec[MAX_RECS];
};

static int seen_record(void *ctx, uint64_t offset, const struct pack_record *rec)
{
    struct seen *s = ctx;

    assert_true(s->n < MAX_RECS);
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

    pack_key(key, sizeof(key), 0x2a);
    assert_string_equal(key, "packs/000000000000002a");
    pack_key(key, sizeof(key), 0);
    assert_string_equal(key, "packs/0000000000000000");
    pack_key(key, sizeof(key), UINT64_MAX);
    assert_string_equal(key, "packs/ffffffffffffffff");
    assert_memory_equal(key, PACK_KEY_PREFIX, strlen(PACK_KEY_PREFIX));
    /* A buffer too short gets a cut key, terminated, and nothing past its end. */
    small[8] = 'x';
    pack_key(small, 8, 0x2a);
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
        uint8_t *cut = dup_exact(hdr, len);
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

    rng_state = 3;
    rng_fill(id, sizeof(id));
    rng_fill(payload, sizeof(payload));
    for (int t = PACK_REC_BLOCK; t <= PACK_REC_ENTRY; t++) {
        uint8_t *whole = make_record((enum pack_rec_type)t, id, payload, sizeof(payload));

        /* The layout: type, two zero fields, big-endian length, crc, id, payload. */
        assert_int_equal(whole[0], t);
        assert_int_equal(whole[1] | whole[2] | whole[3], 0);
        assert_int_equal(get32(whole + 4), sizeof(payload));
        assert_memory_equal(whole + 12, id, PROTO_HASH_LEN);
        memcpy(joined, whole, 8);
        memcpy(joined + 8, id, PROTO_HASH_LEN);
        memcpy(joined + 8 + PROTO_HASH_LEN, payload, sizeof(payload));
        assert_int_equal(get32(whole + 8), pack_crc32c_sw(0, joined, sizeof(joined)));

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

    rng_state = 4;
    rng_fill(id, sizeof(id));
    rng_fill(payload, sizeof(payload));
    whole = make_record(PACK_REC_BLOCK, id, payload, sizeof(payload));
    for (size_t len = 0; len < PACK_RECORD_HEADER + sizeof(payload); len++) {
        uint8_t *cut = dup_exact(whole, len);
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

    rng_state = 5;
    assert_non_null(roomy);
    rng_fill(id, sizeof(id));
    rng_fill(payload, sizeof(payload));
    whole = make_record(PACK_REC_MANIFEST, id, payload, PAYLOAD);
    /*
     * Once with the record alone and once with spare bytes after it, so a
     * flip that raises the length is read against real bytes and must fail
     * the checksum instead of merely running out of buffer.
     */
    memcpy(roomy, whole, len);
    rng_fill(roomy + len, SPARE);
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
    } bad[] = {{0, 0}, {0, 4}, {0, 0xff}, {1, 1}, {1, 0x80}, {2, 1}, {3, 1}};
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
    put32(hdr + 4, PACK_MAX_PAYLOAD + 1);
    assert_int_equal(pack_record_peek(hdr, sizeof(hdr), &type, id, &length), PACK_E_CORRUPT);
    assert_int_equal(pack_record_parse(hdr, sizeof(hdr), &rec), PACK_E_CORRUPT);
    put32(hdr + 4, UINT32_MAX);
    assert_int_equal(pack_record_parse(hdr, sizeof(hdr), &rec), PACK_E_CORRUPT);
    put32(hdr + 4, PACK_MAX_PAYLOAD);
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

    rng_state = 6;
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

    rng_state = 7;
    tpack_make(&tp, N, false);
    last = tp.rec_off[N - 1];
    for (size_t len = last; len < tp.len; len++) {
        uint8_t *cut = dup_exact(tp.buf, len);
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

    rng_state = 8;
    tpack_make(&tp, N, true);
    assert_int_equal(pack_scan(tp.buf, tp.len, seen_record, &s, &end, &sealed), 0);
    assert_seen(&s, &tp, tp.buf, N);
    assert_int_equal(end, tp.index_off);
    assert_true(sealed);

    /* An index cut short (a crash while sealing) leaves an unsealed pack ending at the records. */
    for (size_t len = tp.index_off; len < tp.len; len++) {
        uint8_t *cut = dup_exact(tp.buf, len);

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

/* ---- index and trailer ---- */

static void test_index_round_trip(void **state)
{
    struct tpack tp;
    struct pack_trailer t;
    struct pack_index_entry *entries = NULL;
    const uint8_t *trailer, *first;

    rng_state = 9;
    tpack_make(&tp, 9, true);
    trailer = tp.buf + tp.len - PACK_TRAILER_SIZE;
    first = tp.buf + tp.index_off;
    /* The layout of the first entry and of the trailer. */
    assert_int_equal(first[0], tp.ent[0].type);
    assert_int_equal(first[1] | first[2] | first[3], 0);
    assert_int_equal(get32(first + 4), tp.ent[0].record_len);
    assert_int_equal(get64(first + 8), tp.ent[0].record_off);
    assert_int_equal(get32(first + 16), tp.ent[0].sub_off);
    assert_int_equal(get32(first + 20), tp.ent[0].raw_size);
    assert_memory_equal(first + 24, tp.ent[0].id, PROTO_HASH_LEN);
    assert_int_equal(get64(trailer), tp.index_off);
    assert_int_equal(get32(trailer + 8), tp.nent);
    assert_int_equal(get32(trailer + 12), pack_crc32c(0, first, tp.nent * PACK_INDEX_ENTRY));
    assert_int_equal(get64(trailer + 16), tp.seq);
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
    put32(index + PACK_INDEX_ENTRY + 12, pack_crc32c(0, index, PACK_INDEX_ENTRY));
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

    put32(b, v);
    return parse_patched(&chunk_entry, pos, b, 4);
}

static int patched_u64(size_t pos, uint64_t v)
{
    uint8_t b[8];

    put64(b, v);
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

    rng_state = 10;
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
    put64(tail, PACK_HEADER_SIZE - 1);
    put32(tail + 8, 1);
    assert_int_equal(
        pack_trailer_parse(tail, PACK_HEADER_SIZE - 1 + PACK_INDEX_ENTRY + PACK_TRAILER_SIZE, &t),
        PACK_E_CORRUPT);
    /* Offsets and counts chosen so that unchecked sums would wrap around to the pack size. */
    put64(tail, UINT64_MAX - 43); /* plus 2 entries and the trailer is 2^64 + 100 */
    put32(tail + 8, 2);
    assert_int_equal(pack_trailer_parse(tail, 100, &t), PACK_E_CORRUPT);
    put64(tail, PACK_HEADER_SIZE);
    put32(tail + 8, UINT32_MAX);
    assert_int_equal(pack_trailer_parse(tail, 100, &t), PACK_E_CORRUPT);
    assert_int_equal(pack_trailer_parse(tail,
                                        PACK_HEADER_SIZE + (uint64_t)UINT32_MAX * PACK_INDEX_ENTRY +
                                            PACK_TRAILER_SIZE,
                                        &t),
                     0);
    put64(tail, PACK_MAX_SIZE);
    put32(tail + 8, 0);
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

    rng_state = 11;
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        uint32_t n = counts[c], raw = 0;
        size_t len = pack_block_table_size(n) + 10;
        uint8_t *payload = malloc(len);

        assert_non_null(payload);
        for (uint32_t i = 0; i < n; i++) {
            rng_fill(chunks[i].id, PROTO_HASH_LEN);
            chunks[i].size = 1 + (uint32_t)rng_below(i % 3 ? 100 : 100000);
        }
        pack_block_table_encode(payload, chunks, n);
        assert_int_equal(get32(payload), n);
        assert_int_equal(get32(payload + 4 + PROTO_HASH_LEN), chunks[0].size);
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
        uint8_t *cut = dup_exact(table, len);
        assert_int_equal(pack_block_parse(cut, len, &out, &count, &body_off), PACK_E_CORRUPT);
        free(cut);
    }
    /* An empty body is the envelope parser's to refuse; the table itself is fine. */
    assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off), 0);
    assert_int_equal(body_off, sizeof(table));
    free(out);
    for (uint32_t i = 0; i < 3; i++) {
        put32(table + 4 + i * PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 0);
        assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off),
                         PACK_E_CORRUPT);
        put32(table + 4 + i * PACK_BLOCK_ENTRY + PROTO_HASH_LEN, chunks[i].size);
    }
    const uint32_t bad_counts[] = {0, 4, PACK_MAX_BLOCK_CHUNKS + 1, UINT32_MAX};
    for (size_t i = 0; i < sizeof(bad_counts) / sizeof(bad_counts[0]); i++) {
        put32(table, bad_counts[i]);
        assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off),
                         PACK_E_CORRUPT);
    }
    /* One chunk over the limit is refused even when the payload holds the whole table. */
    uint8_t *big = calloc(1, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS + 1));
    assert_non_null(big);
    for (uint32_t i = 0; i <= PACK_MAX_BLOCK_CHUNKS; i++)
        put32(big + 4 + (size_t)i * PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 1);
    put32(big, PACK_MAX_BLOCK_CHUNKS + 1);
    assert_int_equal(pack_block_parse(big, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS + 1), &out,
                                      &count, &body_off),
                     PACK_E_CORRUPT);
    put32(big, PACK_MAX_BLOCK_CHUNKS);
    assert_int_equal(pack_block_parse(big, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS + 1), &out,
                                      &count, &body_off),
                     0);
    assert_int_equal(body_off, pack_block_table_size(PACK_MAX_BLOCK_CHUNKS));
    free(out);
    free(big);
    /* Sizes may add up to the largest u32 offset, and no further. */
    put32(table, 3);
    put32(table + 4 + PROTO_HASH_LEN, 0x80000000u);
    put32(table + 4 + PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 0x7fffffffu - 30);
    assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off), 0);
    assert_int_equal(out[2].sub_off, UINT32_MAX - 30);
    free(out);
    put32(table + 4 + PACK_BLOCK_ENTRY + PROTO_HASH_LEN, 0x80000000u - 30);
    assert_int_equal(pack_block_parse(table, sizeof(table), &out, &count, &body_off),
                     PACK_E_CORRUPT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_key),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_record_round_trip),
        cmocka_unit_test(test_record_truncated),
        cmocka_unit_test(test_record_bit_flips),
        cmocka_unit_test(test_record_bad_header),
        cmocka_unit_test(test_scan_intact),
        cmocka_unit_test(test_scan_torn_tail),
        cmocka_unit_test(test_scan_sealed),
        cmocka_unit_test(test_index_round_trip),
        cmocka_unit_test(test_index_hostile_entries),
        cmocka_unit_test(test_index_damaged),
        cmocka_unit_test(test_block_round_trip),
        cmocka_unit_test(test_block_hostile),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
