/*
 * Deterministic fuzzing of the pack parsers (storage/pack/pack.h). Valid packs,
 * sealed and unsealed, single records, bare indexes and block payloads are
 * mutated with bit flips, byte overwrites, truncations, insertions,
 * deletions and huge values written over length and offset fields; some
 * mutations then repair a checksum so the damage gets past it and reaches
 * the layout checks. Every result is fed to every parser in a block of its
 * exact size (so the sanitizers see any overread), and whatever a parser
 * accepts is checked against the bytes it came from. The seed is fixed, so
 * a failure reproduces; counters at the end prove the loop reached success
 * paths and not only early rejections.
 */
#include "storage/pack/test-pack-util.h"

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

#define ITERATIONS 100000

/* ---- inputs ---- */

#define MAX_MARKS 128

/* A growable byte string with the offsets of its records and of its length and offset fields. */
struct input {
    uint8_t *buf;
    size_t len;
    size_t nrecs, nfields;
    size_t recs[MAX_MARKS];
    size_t fields[MAX_MARKS];
};

static void input_append(struct input *in, const void *p, size_t len)
{
    in->buf = realloc(in->buf, in->len + len + 1);
    assert_non_null(in->buf);
    memcpy(in->buf + in->len, p, len);
    in->len += len;
}

static void mark_field(struct input *in, size_t off)
{
    if (in->nfields < MAX_MARKS)
        in->fields[in->nfields++] = off;
}

/* Appends a block payload (table of 1..4 chunks, then body bytes) to `in`. */
static void append_block_payload(struct input *in, uint32_t *raw_size)
{
    struct pack_block_chunk chunks[4];
    uint8_t table[4 + 4 * PACK_BLOCK_ENTRY], body[64];
    uint32_t n = 1 + (uint32_t)test_rng_below(4);

    *raw_size = 0;
    for (uint32_t i = 0; i < n; i++) {
        test_rng_fill(chunks[i].id, PROTO_HASH_LEN);
        chunks[i].size = 1 + (uint32_t)test_rng_below(200);
        *raw_size += chunks[i].size;
        mark_field(in, in->len + 4 + i * PACK_BLOCK_ENTRY + PROTO_HASH_LEN);
    }
    mark_field(in, in->len);
    pack_block_table_encode(table, chunks, n);
    input_append(in, table, pack_block_table_size(n));
    test_rng_fill(body, sizeof(body));
    input_append(in, body, test_rng_below(sizeof(body)));
}

/* Appends one record to `in` and describes it in *e (an index entry for the whole record). */
static void append_record(struct input *in, struct pack_index_entry *e)
{
    enum pack_rec_type type = (enum pack_rec_type)(1 + test_rng_below(3));
    uint8_t header[PACK_RECORD_HEADER];
    struct input payload = {0};
    struct pack_part part;
    uint32_t raw_size = 1 + (uint32_t)test_rng_below(1000);

    if (type == PACK_REC_BLOCK) {
        append_block_payload(&payload, &raw_size);
    } else {
        uint8_t body[120];
        test_rng_fill(body, sizeof(body));
        input_append(&payload, body, test_rng_below(sizeof(body)));
    }
    part = (struct pack_part){payload.buf, payload.len};
    test_rng_fill(e->id, PROTO_HASH_LEN);
    pack_record_header_encode(header, type, e->id, &part, 1);
    e->type = (enum pack_idx_type)type;
    e->record_off = in->len;
    e->record_len = (uint32_t)(PACK_RECORD_HEADER + payload.len);
    e->sub_off = 0;
    e->raw_size = raw_size;
    if (in->nrecs < MAX_MARKS)
        in->recs[in->nrecs++] = in->len;
    mark_field(in, in->len + 4);
    for (size_t i = 0; i < payload.nfields; i++)
        mark_field(in, in->len + PACK_RECORD_HEADER + payload.fields[i]);
    input_append(in, header, sizeof(header));
    input_append(in, payload.buf, payload.len);
    free(payload.buf);
}

/* Appends entries as an index and trailer for a pack whose index starts at in->len. */
static void append_index(struct input *in, const struct pack_index_entry *entries, size_t n,
                         uint64_t seq)
{
    size_t size = pack_index_size(n);
    uint8_t *index = malloc(size);
    size_t start = in->len;

    assert_non_null(index);
    pack_index_encode(index, entries, n, in->len, seq);
    for (size_t i = 0; i < n; i++) {
        mark_field(in, start + i * PACK_INDEX_ENTRY + 4);
        mark_field(in, start + i * PACK_INDEX_ENTRY + 8);
        mark_field(in, start + i * PACK_INDEX_ENTRY + 16);
    }
    mark_field(in, start + n * PACK_INDEX_ENTRY);
    mark_field(in, start + n * PACK_INDEX_ENTRY + 8);
    input_append(in, index, size);
    free(index);
}

enum { BASE_SEALED, BASE_UNSEALED, BASE_RECORD, BASE_INDEX, BASE_BLOCK, NBASES };

static void build_base(struct input *in, int kind)
{
    struct pack_index_entry entries[12];
    size_t n = 1 + test_rng_below(12);
    uint8_t header[PACK_HEADER_SIZE];
    uint64_t seq = test_rng_next();
    uint32_t raw_size;

    memset(in, 0, sizeof(*in));
    switch (kind) {
    case BASE_SEALED:
    case BASE_UNSEALED:
        pack_header_encode(header, seq);
        input_append(in, header, sizeof(header));
        for (size_t i = 0; i < n; i++)
            append_record(in, &entries[i]);
        if (kind == BASE_SEALED)
            append_index(in, entries, n, seq);
        break;
    case BASE_RECORD:
        append_record(in, &entries[0]);
        break;
    case BASE_INDEX:
        /* Entries pointing into an imagined record area that ends where the index starts. */
        for (size_t i = 0; i < n; i++) {
            entries[i] = (struct pack_index_entry){PACK_IDX_CHUNK, 100, 16 + 100 * i, 0, 10, {0}};
            test_rng_fill(entries[i].id, PROTO_HASH_LEN);
        }
        append_index(in, entries, n, seq);
        in->len -= PACK_TRAILER_SIZE;
        break;
    default:
        append_block_payload(in, &raw_size);
        break;
    }
}

/* ---- mutations ---- */

static size_t pick_field(const struct input *in)
{
    if (in->nfields && test_rng_below(4) != 0)
        return in->fields[test_rng_below(in->nfields)];
    return test_rng_below(in->len + 1);
}

static void write_huge(struct input *in)
{
    static const uint64_t values[] = {UINT32_MAX,
                                      0x80000000u,
                                      PACK_MAX_PAYLOAD,
                                      PACK_MAX_PAYLOAD + 1,
                                      0,
                                      1,
                                      PACK_MAX_BLOCK_CHUNKS + 1,
                                      UINT64_MAX,
                                      PACK_MAX_SIZE,
                                      UINT64_MAX - PACK_TRAILER_SIZE};
    uint64_t v =
        test_rng_below(3) == 0 ? test_rng_next() : values[test_rng_below(sizeof(values) / 8)];
    size_t width = test_rng_below(2) ? 8 : 4;
    size_t pos = pick_field(in);
    uint8_t b[8];

    if (pos + width > in->len)
        return;
    if (width == 8) {
        test_put64(b, v);
    } else {
        test_put32(b, (uint32_t)(v > UINT32_MAX ? v >> 32 : v));
    }
    memcpy(in->buf + pos, b, width);
}

/* Recomputes the checksum of the record at a record offset so damage behind it goes unnoticed. */
static void fix_record_crc(struct input *in)
{
    size_t off = in->nrecs ? in->recs[test_rng_below(in->nrecs)] : 0;
    uint32_t crc, length;

    if (off > in->len || in->len - off < PACK_RECORD_HEADER)
        return;
    length = test_get32(in->buf + off + 4);
    if (length > in->len - off - PACK_RECORD_HEADER)
        return;
    crc = pack_crc32c(0, in->buf + off, 8);
    crc = pack_crc32c(crc, in->buf + off + 12, PROTO_HASH_LEN + length);
    test_put32(in->buf + off + 8, crc);
}

/* Recomputes the index checksum in the trailer, wherever the trailer says the index starts. */
static void fix_index_crc(struct input *in)
{
    uint8_t *tail;
    uint64_t index_off;

    if (in->len < PACK_TRAILER_SIZE)
        return;
    tail = in->buf + in->len - PACK_TRAILER_SIZE;
    index_off = test_get64(tail);
    if (index_off > in->len - PACK_TRAILER_SIZE)
        return;
    test_put32(tail + 12,
               pack_crc32c(0, in->buf + index_off, in->len - PACK_TRAILER_SIZE - index_off));
}

static void mutate(struct input *in)
{
    size_t pos, n;
    uint8_t extra[16];

    switch (test_rng_below(9)) {
    case 0:
    case 1:
        if (in->len) {
            pos = test_rng_below(in->len);
            in->buf[pos] ^= (uint8_t)(1u << test_rng_below(8));
        }
        break;
    case 2:
        if (in->len)
            in->buf[test_rng_below(in->len)] = (uint8_t)test_rng_next();
        break;
    case 3:
        in->len = test_rng_below(in->len + 1);
        break;
    case 4:
        n = 1 + test_rng_below(sizeof(extra));
        pos = test_rng_below(in->len + 1);
        test_rng_fill(extra, n);
        in->buf = realloc(in->buf, in->len + n + 1);
        assert_non_null(in->buf);
        memmove(in->buf + pos + n, in->buf + pos, in->len - pos);
        memcpy(in->buf + pos, extra, n);
        in->len += n;
        break;
    case 5:
        pos = test_rng_below(in->len + 1);
        n = test_rng_below(in->len - pos + 1);
        memmove(in->buf + pos, in->buf + pos + n, in->len - pos - n);
        in->len -= n;
        break;
    case 6:
        write_huge(in);
        break;
    case 7:
        fix_record_crc(in);
        break;
    default:
        fix_index_crc(in);
        break;
    }
}

/* ---- checks ---- */

/* How often each parser accepted its input, to prove the loop gets past the checksums. */
static struct {
    size_t header, record, scan_records, sealed, trailer, index, fabricated, block;
} accepted;

static void check_header(const uint8_t *b, size_t n)
{
    uint64_t seq;
    int r = pack_header_decode(b, n, &seq);

    assert_true(r == 0 || r == PACK_E_TRUNCATED || r == PACK_E_CORRUPT);
    if (r == 0) {
        assert_true(n >= PACK_HEADER_SIZE);
        assert_int_equal(seq, test_get64(b + 8));
        accepted.header++;
    }
}

static void check_record(const uint8_t *b, size_t n)
{
    struct pack_record rec;
    enum pack_rec_type type;
    uint8_t id[PROTO_HASH_LEN];
    uint32_t length, crc;
    int r = pack_record_parse(b, n, &rec);
    int peek = pack_record_peek(b, n, &type, id, &length);

    assert_true(r == 0 || r == PACK_E_TRUNCATED || r == PACK_E_CORRUPT);
    if (peek != 0) {
        assert_int_equal(r, peek);
        return;
    }
    assert_true(n >= PACK_RECORD_HEADER && type >= 1 && type <= 3 && length <= PACK_MAX_PAYLOAD);
    assert_true((b[1] & ~PACK_FLAG_SEALED) == 0 && b[2] == 0 && b[3] == 0);
    assert_memory_equal(id, b + 12, PROTO_HASH_LEN);
    assert_int_equal(r == PACK_E_TRUNCATED, n - PACK_RECORD_HEADER < length);
    if (r != 0)
        return;
    assert_int_equal(rec.type, type);
    assert_int_equal(rec.length, length);
    assert_memory_equal(rec.id, id, PROTO_HASH_LEN);
    assert_ptr_equal(rec.payload, b + PACK_RECORD_HEADER);
    crc = pack_crc32c(0, b, 8);
    crc = pack_crc32c(crc, b + 12, PROTO_HASH_LEN + length);
    assert_int_equal(crc, test_get32(b + 8));
    accepted.record++;
}

/* Checks an accepted entry against the record area [16, index_off) it must point into. */
static void check_entry(const struct pack_index_entry *e, uint64_t index_off)
{
    assert_true(e->type >= PACK_IDX_CHUNK && e->type <= PACK_IDX_ENTRY);
    assert_true(e->record_len >= PACK_RECORD_HEADER);
    assert_true(e->record_len - PACK_RECORD_HEADER <= PACK_MAX_PAYLOAD);
    assert_true(e->record_off >= PACK_HEADER_SIZE && e->record_off <= index_off);
    assert_true(e->record_len <= index_off - e->record_off);
    assert_true((uint64_t)e->sub_off + e->raw_size <= UINT32_MAX);
}

/* Parses b[0..n) as an index described by t; accepted entries must re-encode to the same bytes. */
static int check_index(const uint8_t *b, size_t n, const struct pack_trailer *t)
{
    struct pack_index_entry *entries = NULL;
    uint8_t *again;
    int r = pack_index_parse(b, n, t, &entries);

    assert_true(r == 0 || r == PACK_E_TRUNCATED || r == PACK_E_CORRUPT);
    if (r != 0)
        return r;
    assert_int_equal(n, (size_t)t->count * PACK_INDEX_ENTRY);
    assert_int_equal(pack_crc32c(0, b, n), t->index_crc);
    again = malloc(pack_index_size(t->count));
    assert_non_null(again);
    for (uint32_t i = 0; i < t->count; i++)
        check_entry(&entries[i], t->index_off);
    pack_index_encode(again, entries, t->count, t->index_off, t->seq);
    assert_memory_equal(again, b, n);
    free(again);
    free(entries);
    return 0;
}

/* Whatever trailer parse accepts describes exactly a pack of that size. */
static int check_trailer(const uint8_t *tail, uint64_t pack_size, struct pack_trailer *t)
{
    int r = pack_trailer_parse(tail, pack_size, t);

    assert_true(r == 0 || r == PACK_E_CORRUPT);
    if (r == 0) {
        assert_memory_equal(tail + 24, "cRnPIDX1", 8);
        assert_true(pack_size <= PACK_MAX_SIZE && t->index_off >= PACK_HEADER_SIZE);
        assert_int_equal(t->index_off + (uint64_t)t->count * PACK_INDEX_ENTRY + PACK_TRAILER_SIZE,
                         pack_size);
        assert_int_equal(t->index_off, test_get64(tail));
        assert_int_equal(t->count, test_get32(tail + 8));
    }
    return r;
}

static void check_sealed_tail(const uint8_t *b, size_t n)
{
    struct pack_trailer t;

    if (n < PACK_TRAILER_SIZE)
        return;
    /* Hostile sizes must not wrap the trailer's arithmetic. */
    check_trailer(b + n - PACK_TRAILER_SIZE, test_rng_next() >> test_rng_below(64), &t);
    if (check_trailer(b + n - PACK_TRAILER_SIZE, n, &t) != 0)
        return;
    accepted.trailer++;
    if (check_index(b + t.index_off, n - t.index_off - PACK_TRAILER_SIZE, &t) == 0)
        accepted.index++;
}

/* The bytes as a bare index under a made-up trailer whose checksum matches, so the entries are
 * judged. */
static void check_fabricated_index(const uint8_t *b, size_t n)
{
    struct pack_trailer t;
    size_t count = n / PACK_INDEX_ENTRY;

    t.count = (uint32_t)count;
    t.index_off = test_rng_below(3) ? 16 + 100 * count : test_rng_next();
    t.index_crc = pack_crc32c(0, b, count * PACK_INDEX_ENTRY);
    t.seq = test_rng_next();
    if (check_index(b, count * PACK_INDEX_ENTRY, &t) == 0 && count > 0)
        accepted.fabricated++;
}

struct scan_state {
    const uint8_t *buf;
    size_t len;
    uint64_t next; /* where the next record must start */
};

static int scan_record(void *ctx, uint64_t offset, const struct pack_record *rec)
{
    struct scan_state *s = ctx;
    struct pack_record again;

    assert_int_equal(offset, s->next);
    assert_true(offset < s->len && rec->length <= s->len - offset - PACK_RECORD_HEADER);
    assert_ptr_equal(rec->payload, s->buf + offset + PACK_RECORD_HEADER);
    assert_int_equal(pack_record_parse(s->buf + offset, s->len - offset, &again), 0);
    assert_int_equal(again.length, rec->length);
    s->next = offset + PACK_RECORD_HEADER + rec->length;
    accepted.scan_records++;
    return 0;
}

static void check_scan(const uint8_t *b, size_t n)
{
    struct scan_state s = {b, n, PACK_HEADER_SIZE};
    struct pack_record rec;
    struct pack_trailer t;
    uint64_t end, seq;
    bool sealed;
    int r = pack_scan(b, n, scan_record, &s, &end, &sealed);

    if (r != 0) {
        assert_int_equal(r, pack_header_decode(b, n, &seq));
        return;
    }
    assert_int_equal(end, s.next);
    assert_true(end <= n);
    if (sealed) {
        /* A sealed pack's trailer and index check out and start where the records end. */
        assert_int_equal(pack_header_decode(b, n, &seq), 0);
        assert_int_equal(check_trailer(b + n - PACK_TRAILER_SIZE, n, &t), 0);
        assert_int_equal(t.index_off, end);
        assert_int_equal(t.seq, seq);
        assert_int_equal(check_index(b + end, n - end - PACK_TRAILER_SIZE, &t), 0);
        accepted.sealed++;
    } else if (end < n) {
        /* An unsealed scan stops early only at a record that does not parse. */
        assert_int_not_equal(pack_record_parse(b + end, n - end, &rec), 0);
    }
}

static void check_block(const uint8_t *b, size_t n)
{
    struct pack_block_chunk *chunks = NULL;
    uint32_t count;
    size_t body_off;
    uint64_t raw = 0;
    int r = pack_block_parse(b, n, &chunks, &count, &body_off);

    assert_true(r == 0 || r == PACK_E_CORRUPT);
    if (r != 0)
        return;
    assert_true(count >= 1 && count <= PACK_MAX_BLOCK_CHUNKS);
    assert_int_equal(count, test_get32(b));
    assert_int_equal(body_off, pack_block_table_size(count));
    assert_true(body_off <= n);
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *entry = b + 4 + (size_t)i * PACK_BLOCK_ENTRY;

        assert_memory_equal(chunks[i].id, entry, PROTO_HASH_LEN);
        assert_int_equal(chunks[i].size, test_get32(entry + PROTO_HASH_LEN));
        assert_true(chunks[i].size > 0);
        assert_int_equal(chunks[i].sub_off, raw);
        raw += chunks[i].size;
    }
    assert_true(raw <= UINT32_MAX);
    free(chunks);
    accepted.block++;
}

static void check_all(const uint8_t *b, size_t n)
{
    check_header(b, n);
    check_record(b, n);
    check_scan(b, n);
    check_sealed_tail(b, n);
    check_fabricated_index(b, n);
    check_block(b, n);
    /* A block record's payload is a block table, so look there too. */
    if (n >= PACK_RECORD_HEADER)
        check_block(b + PACK_RECORD_HEADER, n - PACK_RECORD_HEADER);
}

static void test_fuzz(void **state)
{
    test_rng_state = 0x70616b667a7a3031ull;
    for (int i = 0; i < ITERATIONS; i++) {
        struct input in;
        int rounds = 1 + (int)test_rng_below(4);
        uint8_t *exact;

        build_base(&in, i % NBASES);
        for (int k = 0; k < rounds; k++)
            mutate(&in);
        exact = malloc(in.len ? in.len : 1);
        assert_non_null(exact);
        memcpy(exact, in.buf, in.len);
        check_all(exact, in.len);
        free(exact);
        free(in.buf);
    }
    /* Thresholds far below what the seed reaches, but zero would mean the loop tests nothing. */
    assert_true(accepted.header > ITERATIONS / 10);
    assert_true(accepted.record > ITERATIONS / 100);
    assert_true(accepted.scan_records > ITERATIONS / 10);
    assert_true(accepted.sealed > ITERATIONS / 100);
    assert_true(accepted.trailer > ITERATIONS / 100);
    assert_true(accepted.index > ITERATIONS / 100);
    assert_true(accepted.fabricated > ITERATIONS / 100);
    assert_true(accepted.block > ITERATIONS / 100);
    print_message("accepted: header %zu record %zu scanned %zu sealed %zu trailer %zu index %zu "
                  "fabricated %zu block %zu\n",
                  accepted.header, accepted.record, accepted.scan_records, accepted.sealed,
                  accepted.trailer, accepted.index, accepted.fabricated, accepted.block);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
