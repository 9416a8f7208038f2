/*
 * Unit tests of the store's pack records (daemon/format/record.c): blocks of one
 * and many chunks, compressible and not, round-tripped and checked against
 * the layout in storage/pack/pack.h; the limits on a block; segment and journal
 * records with their id check; and damaged records: every truncation and
 * every single-byte change of a small record fails to open (or, for a
 * block, fails its chunks' hashes), and records forged with a correct
 * checksum but a wrong table, body or id are refused too. The journal
 * entries' encoding (daemon/format/objects.c) is tested in test-objects.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/sha.h>

#include "compress/compress.h"
#include "daemon/format/record.h"

static void random_bytes(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)(x >> 24);
    }
}

static void text_bytes(uint8_t *buf, size_t len, uint64_t seed)
{
    static const char words[] = "the quick brown fox jumps over the lazy dog and keeps running ";
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)words[(i + seed) % (sizeof(words) - 1)];
}

/* n chunks of the given sizes cut from one buffer; ids are their SHA-256. */
struct pieces {
    struct record_piece p[64];
    uint8_t *data;
    size_t n, total;
};

static void pieces_make(struct pieces *ps, const size_t *sizes, size_t n, bool compressible,
                        uint64_t seed)
{
    size_t off = 0;

    ps->n = n;
    ps->total = 0;
    for (size_t i = 0; i < n; i++)
        ps->total += sizes[i];
    ps->data = malloc(ps->total);
    assert_non_null(ps->data);
    if (compressible)
        text_bytes(ps->data, ps->total, seed);
    else
        random_bytes(ps->data, ps->total, seed);
    for (size_t i = 0; i < n; i++) {
        ps->p[i].data = ps->data + off;
        ps->p[i].len = sizes[i];
        SHA256(ps->p[i].data, sizes[i], ps->p[i].hash);
        off += sizes[i];
    }
}

/* The envelope of a record's body: its algorithm and raw size. */
static struct compress_header envelope_of(const uint8_t *rec, size_t len, size_t body_off)
{
    struct pack_record r;
    struct compress_header h;

    assert_int_equal(pack_record_parse(rec, len, &r), 0);
    assert_true(body_off < r.length);
    assert_int_equal(compress_header_parse(r.payload + body_off, r.length - body_off, &h), 0);
    return h;
}

/* Builds a block, checks its layout and index entries, opens it and checks what comes back. */
static void block_roundtrip(const struct pieces *ps, bool expect_compressed)
{
    struct pack_block_chunk table[64], *chunks;
    struct pack_index_entry *idx;
    struct pack_record r;
    uint8_t *rec, *raw, id[PROTO_HASH_LEN], want_id[PROTO_HASH_LEN];
    uint8_t tbytes[4 + 64 * PACK_BLOCK_ENTRY];
    size_t rec_len, raw_len, off = 0;
    uint32_t count;

    assert_int_equal(record_block_build(ps->p, ps->n, 3, &rec, &rec_len, id, &idx), 0);
    /* The id is the SHA-256 of the table: count, then id and size of each chunk. */
    for (size_t i = 0; i < ps->n; i++) {
        memcpy(table[i].id, ps->p[i].hash, PROTO_HASH_LEN);
        table[i].size = (uint32_t)ps->p[i].len;
        table[i].sub_off = (uint32_t)off;
        off += ps->p[i].len;
    }
    pack_block_table_encode(tbytes, table, (uint32_t)ps->n);
    SHA256(tbytes, pack_block_table_size((uint32_t)ps->n), want_id);
    assert_memory_equal(id, want_id, PROTO_HASH_LEN);
    assert_int_equal(pack_record_parse(rec, rec_len, &r), 0);
    assert_int_equal(r.type, PACK_REC_BLOCK);
    assert_memory_equal(r.id, id, PROTO_HASH_LEN);
    assert_int_equal(r.length + PACK_RECORD_HEADER, rec_len);
    assert_memory_equal(r.payload, tbytes, pack_block_table_size((uint32_t)ps->n));
    struct compress_header h = envelope_of(rec, rec_len, pack_block_table_size((uint32_t)ps->n));
    assert_int_equal(h.raw_size, ps->total);
    assert_int_equal(h.algo, expect_compressed ? COMPRESS_ZSTD : COMPRESS_RAW);
    if (expect_compressed)
        assert_true(rec_len < ps->total / 2);
    /* One index entry per chunk; the packer fills in where the record goes. */
    for (size_t i = 0; i < ps->n; i++) {
        assert_int_equal(idx[i].type, PACK_IDX_CHUNK);
        assert_memory_equal(idx[i].id, ps->p[i].hash, PROTO_HASH_LEN);
        assert_int_equal(idx[i].sub_off, table[i].sub_off);
        assert_int_equal(idx[i].raw_size, ps->p[i].len);
    }

    assert_int_equal(record_block_open(rec, rec_len, &chunks, &count, &raw, &raw_len), 0);
    assert_int_equal(count, ps->n);
    assert_int_equal(raw_len, ps->total);
    for (size_t i = 0; i < ps->n; i++) {
        assert_memory_equal(chunks[i].id, ps->p[i].hash, PROTO_HASH_LEN);
        assert_int_equal(chunks[i].size, ps->p[i].len);
        assert_int_equal(chunks[i].sub_off, table[i].sub_off);
        assert_memory_equal(raw + chunks[i].sub_off, ps->p[i].data, ps->p[i].len);
        assert_true(record_hash_ok(raw + chunks[i].sub_off, chunks[i].size, chunks[i].id));
    }
    free(chunks);
    free(raw);
    free(idx);
    free(rec);
}

static void test_block_roundtrip(void **state)
{
    static const size_t one[] = {100000};
    static const size_t small[] = {1};
    static const size_t many[] = {4096, 65536, 17, 1000, 250000, 64, 8192, 77777, 3, 12345};
    struct pieces ps;

    pieces_make(&ps, one, 1, true, 1);
    block_roundtrip(&ps, true);
    free(ps.data);
    pieces_make(&ps, one, 1, false, 2);
    block_roundtrip(&ps, false);
    free(ps.data);
    pieces_make(&ps, small, 1, false, 3);
    block_roundtrip(&ps, false);
    free(ps.data);
    pieces_make(&ps, many, 10, true, 4);
    block_roundtrip(&ps, true);
    free(ps.data);
    pieces_make(&ps, many, 10, false, 5);
    block_roundtrip(&ps, false);
    free(ps.data);
}

static void test_block_limits(void **state)
{
    struct pack_index_entry *idx = NULL;
    uint8_t *rec = NULL, id[PROTO_HASH_LEN];
    size_t rec_len, n = PACK_MAX_BLOCK_CHUNKS + 1;
    struct record_piece *p = calloc(n, sizeof(*p));
    uint8_t *data = calloc(1, RECORD_BLOCK_MAX + 1);

    assert_non_null(p);
    assert_non_null(data);
    assert_int_equal(record_block_build(p, 0, 3, &rec, &rec_len, id, &idx), -EINVAL);
    /* An empty chunk. */
    p[0] = (struct record_piece){.data = data, .len = 0};
    assert_int_equal(record_block_build(p, 1, 3, &rec, &rec_len, id, &idx), -EINVAL);
    /* Exactly RECORD_BLOCK_MAX raw bytes, in two chunks; one byte more is refused. */
    p[0].len = RECORD_BLOCK_MAX / 2;
    p[1] = (struct record_piece){.data = data + p[0].len, .len = RECORD_BLOCK_MAX / 2};
    assert_int_equal(record_block_build(p, 2, 3, &rec, &rec_len, id, &idx), 0);
    free(rec);
    free(idx);
    p[1].len++;
    assert_int_equal(record_block_build(p, 2, 3, &rec, &rec_len, id, &idx), -EINVAL);
    p[0].len = RECORD_BLOCK_MAX + 1;
    assert_int_equal(record_block_build(p, 1, 3, &rec, &rec_len, id, &idx), -EINVAL);
    /* PACK_MAX_BLOCK_CHUNKS one-byte chunks, and one more. */
    for (size_t i = 0; i < n; i++)
        p[i] = (struct record_piece){.data = data + i, .len = 1};
    assert_int_equal(record_block_build(p, PACK_MAX_BLOCK_CHUNKS, 3, &rec, &rec_len, id, &idx), 0);
    struct pack_block_chunk *chunks;
    uint8_t *raw;
    size_t raw_len;
    uint32_t count;
    assert_int_equal(record_block_open(rec, rec_len, &chunks, &count, &raw, &raw_len), 0);
    assert_int_equal(count, PACK_MAX_BLOCK_CHUNKS);
    assert_int_equal(chunks[count - 1].sub_off, PACK_MAX_BLOCK_CHUNKS - 1);
    free(chunks);
    free(raw);
    free(rec);
    free(idx);
    assert_int_equal(record_block_build(p, n, 3, &rec, &rec_len, id, &idx), -EINVAL);
    free(p);
    free(data);
}

static void test_seal_roundtrip(void **state)
{
    static const enum pack_rec_type types[] = {PACK_REC_MANIFEST, PACK_REC_ENTRY};
    static const size_t sizes[] = {0, 1, 300, 41008, 200000};
    uint8_t *raw = malloc(200000), *rec, *out, id[PROTO_HASH_LEN], want[PROTO_HASH_LEN];
    struct pack_index_entry *idx;
    struct pack_record r;
    size_t rec_len, out_len;

    assert_non_null(raw);
    for (size_t t = 0; t < 2; t++) {
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t len = sizes[k];
            if (k % 2)
                text_bytes(raw, len, k);
            else
                random_bytes(raw, len, k);
            assert_int_equal(record_seal_build(types[t], raw, len, 3, &rec, &rec_len, id, &idx), 0);
            SHA256(raw, len, want);
            assert_memory_equal(id, want, PROTO_HASH_LEN);
            assert_int_equal(idx->type,
                             types[t] == PACK_REC_MANIFEST ? PACK_IDX_MANIFEST : PACK_IDX_ENTRY);
            assert_memory_equal(idx->id, id, PROTO_HASH_LEN);
            assert_int_equal(idx->raw_size, len);
            assert_int_equal(idx->sub_off, 0);
            assert_int_equal(pack_record_parse(rec, rec_len, &r), 0);
            assert_int_equal(r.type, types[t]);
            assert_int_equal(envelope_of(rec, rec_len, 0).raw_size, len);

            assert_int_equal(record_seal_open(rec, rec_len, types[t], id, len, &out, &out_len), 0);
            assert_int_equal(out_len, len);
            assert_memory_equal(out, raw, len);
            free(out);
            /* The other type, another id, or a limit below its size: refused. */
            assert_int_equal(record_seal_open(rec, rec_len, types[1 - t], id, len, &out, &out_len),
                             RECORD_E_BAD);
            want[5] ^= 1;
            assert_int_equal(record_seal_open(rec, rec_len, types[t], want, len, &out, &out_len),
                             RECORD_E_BAD);
            if (len > 0)
                assert_int_equal(
                    record_seal_open(rec, rec_len, types[t], id, len - 1, &out, &out_len),
                    RECORD_E_BAD);
            /* A block opener does not take it either. */
            struct pack_block_chunk *chunks;
            uint32_t count;
            assert_int_equal(record_block_open(rec, rec_len, &chunks, &count, &out, &out_len),
                             RECORD_E_BAD);
            free(rec);
            free(idx);
        }
    }
    free(raw);
}

/* ---- damaged and forged records ---------------------------------------------------------- */

/* Opens a damaged block: true when refused, or when what it hands out fails the chunk hashes. */
static bool block_rejected(const uint8_t *bytes, size_t len)
{
    struct pack_block_chunk *chunks;
    uint8_t *raw;
    size_t raw_len;
    uint32_t count;
    bool bad = false;

    if (record_block_open(bytes, len, &chunks, &count, &raw, &raw_len) != 0)
        return true;
    for (uint32_t i = 0; i < count; i++) {
        if ((uint64_t)chunks[i].sub_off + chunks[i].size > raw_len ||
            !record_hash_ok(raw + chunks[i].sub_off, chunks[i].size, chunks[i].id))
            bad = true;
    }
    free(chunks);
    free(raw);
    return bad;
}

static bool seal_rejected(const uint8_t *bytes, size_t len, const uint8_t id[PROTO_HASH_LEN])
{
    uint8_t *raw;
    size_t raw_len;

    if (record_seal_open(bytes, len, PACK_REC_ENTRY, id, 4096, &raw, &raw_len) != 0)
        return true;
    free(raw);
    return false;
}

static void test_damage(void **state)
{
    static const size_t sizes[] = {100, 37, 200};
    static const uint8_t masks[] = {0x01, 0x80, 0xff, 0x10};
    struct pieces ps;
    struct pack_index_entry *idx;
    uint8_t *block, *seal, raw[300], id[PROTO_HASH_LEN], seal_id[PROTO_HASH_LEN];
    size_t block_len, seal_len;

    pieces_make(&ps, sizes, 3, true, 9);
    assert_int_equal(record_block_build(ps.p, 3, 3, &block, &block_len, id, &idx), 0);
    free(idx);
    text_bytes(raw, sizeof(raw), 3);
    assert_int_equal(
        record_seal_build(PACK_REC_ENTRY, raw, sizeof(raw), 3, &seal, &seal_len, seal_id, &idx), 0);
    free(idx);
    assert_false(block_rejected(block, block_len));
    assert_false(seal_rejected(seal, seal_len, seal_id));

    /* Every truncation. */
    for (size_t cut = 0; cut < block_len; cut++)
        if (!block_rejected(block, cut))
            fail_msg("a block cut to %zu of %zu bytes opened", cut, block_len);
    for (size_t cut = 0; cut < seal_len; cut++)
        if (!seal_rejected(seal, cut, seal_id))
            fail_msg("an entry cut to %zu of %zu bytes opened", cut, seal_len);
    /* Every single-byte change. */
    for (size_t i = 0; i < block_len; i++) {
        for (size_t m = 0; m < sizeof(masks); m++) {
            block[i] ^= masks[m];
            if (!block_rejected(block, block_len))
                fail_msg("a block with byte %zu ^ 0x%02x opened", i, masks[m]);
            block[i] ^= masks[m];
        }
    }
    for (size_t i = 0; i < seal_len; i++) {
        for (size_t m = 0; m < sizeof(masks); m++) {
            seal[i] ^= masks[m];
            if (!seal_rejected(seal, seal_len, seal_id))
                fail_msg("an entry with byte %zu ^ 0x%02x opened", i, masks[m]);
            seal[i] ^= masks[m];
        }
    }
    assert_false(block_rejected(block, block_len));
    assert_false(seal_rejected(seal, seal_len, seal_id));
    free(block);
    free(seal);
    free(ps.data);
}

/* A forged block must be refused by the opener itself, not left to the chunk hashes. */
static void expect_block_refused(const uint8_t *bytes, size_t len)
{
    struct pack_block_chunk *chunks = NULL;
    uint8_t *raw;
    size_t raw_len;
    uint32_t count;

    assert_int_equal(record_block_open(bytes, len, &chunks, &count, &raw, &raw_len), RECORD_E_BAD);
    assert_null(chunks);
}

/*
 * Forges a record with a correct checksum around payload parts; the
 * checksum alone then says nothing, and the opener must look inside.
 */
static uint8_t *forge(enum pack_rec_type type, const uint8_t id[PROTO_HASH_LEN],
                      const struct pack_part *parts, size_t nparts, size_t *len)
{
    size_t total = PACK_RECORD_HEADER;
    uint8_t *out;

    for (size_t i = 0; i < nparts; i++)
        total += parts[i].len;
    out = malloc(total);
    assert_non_null(out);
    pack_record_header_encode(out, type, id, parts, nparts);
    total = PACK_RECORD_HEADER;
    for (size_t i = 0; i < nparts; i++) {
        memcpy(out + total, parts[i].data, parts[i].len);
        total += parts[i].len;
    }
    *len = total;
    return out;
}

/* The envelope of raw bytes, stored raw (no compression) so it can be edited. */
static uint8_t *envelope(const uint8_t *raw, size_t len, size_t *out_len)
{
    uint8_t *out = malloc(COMPRESS_HEADER_SIZE + len + 1);

    assert_non_null(out);
    memcpy(out, "cRnO", 4);
    out[4] = COMPRESS_VERSION;
    out[5] = COMPRESS_RAW;
    out[6] = out[7] = 0;
    for (int i = 0; i < 8; i++)
        out[8 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
    memcpy(out + COMPRESS_HEADER_SIZE, raw, len);
    *out_len = COMPRESS_HEADER_SIZE + len;
    return out;
}

static void test_forged(void **state)
{
    uint8_t raw[100], other[100], id[PROTO_HASH_LEN], table[4 + PACK_BLOCK_ENTRY];
    struct pack_block_chunk chunk;
    size_t env_len, len;
    uint8_t *env, *rec;

    text_bytes(raw, sizeof(raw), 1);
    memcpy(other, raw, sizeof(raw));
    other[50] ^= 1;
    SHA256(raw, sizeof(raw), id);

    /* An entry whose header names the id of other bytes than it holds. */
    env = envelope(other, sizeof(other), &env_len);
    rec = forge(PACK_REC_ENTRY, id, &(struct pack_part){env, env_len}, 1, &len);
    assert_true(seal_rejected(rec, len, id));
    free(rec);
    free(env);
    /* The right bytes under the right id, but a raw envelope longer than it says. */
    env = envelope(raw, sizeof(raw), &env_len);
    env[env_len] = 0;
    rec = forge(PACK_REC_ENTRY, id, &(struct pack_part){env, env_len + 1}, 1, &len);
    assert_true(seal_rejected(rec, len, id));
    free(rec);
    rec = forge(PACK_REC_ENTRY, id, &(struct pack_part){env, env_len}, 1, &len);
    assert_false(seal_rejected(rec, len, id));
    free(rec);

    /* Blocks: a table whose sizes do not add up to the body's raw size. */
    memcpy(chunk.id, id, PROTO_HASH_LEN);
    chunk.size = sizeof(raw) + 1;
    pack_block_table_encode(table, &chunk, 1);
    struct pack_part parts[2] = {{table, sizeof(table)}, {env, env_len}};
    rec = forge(PACK_REC_BLOCK, id, parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    chunk.size = sizeof(raw) - 1;
    pack_block_table_encode(table, &chunk, 1);
    rec = forge(PACK_REC_BLOCK, id, parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    /* A count of 0, and a chunk of size 0. */
    chunk.size = 0;
    pack_block_table_encode(table, &chunk, 1);
    rec = forge(PACK_REC_BLOCK, id, parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    memset(table, 0, 4);
    rec = forge(PACK_REC_BLOCK, id, parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    /* A body that is not an envelope. */
    chunk.size = sizeof(raw);
    pack_block_table_encode(table, &chunk, 1);
    env[0] = 'x';
    rec = forge(PACK_REC_BLOCK, id, parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    /* Sanity: the same with a good envelope opens, and its chunk checks. */
    env[0] = 'c';
    rec = forge(PACK_REC_BLOCK, id, parts, 2, &len);
    assert_false(block_rejected(rec, len));
    free(rec);
    /* The same payload in a record of another type is no block. */
    rec = forge(PACK_REC_MANIFEST, id, parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    rec = forge(PACK_REC_ENTRY, id, parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    /* A block over RECORD_BLOCK_MAX raw bytes, forged: refused before decoding it. */
    uint8_t *big = calloc(1, RECORD_BLOCK_MAX + 1);
    size_t big_env_len;
    uint8_t *big_env = envelope(big, RECORD_BLOCK_MAX + 1, &big_env_len);
    chunk.size = RECORD_BLOCK_MAX + 1;
    SHA256(big, RECORD_BLOCK_MAX + 1, chunk.id);
    pack_block_table_encode(table, &chunk, 1);
    struct pack_part big_parts[2] = {{table, sizeof(table)}, {big_env, big_env_len}};
    rec = forge(PACK_REC_BLOCK, id, big_parts, 2, &len);
    expect_block_refused(rec, len);
    free(rec);
    free(big_env);
    free(big);
    free(env);
}

/* A chunk's share of its block: proportional, never 0 (a live chunk must count as live bytes). */
static void test_share(void **state)
{
    (void)state;
    assert_int_equal(record_share(1000, 500, 1000), 500);
    assert_int_equal(record_share(100, 1, 65536), 1); /* would round down to 0 */
    assert_int_equal(record_share(100, 0, 65536), 1);
    assert_int_equal(record_share(300, 10, 0), 300);
    uint64_t sum = 0;
    for (unsigned i = 1; i <= 4; i++)
        sum += record_share(4000, i * 100, 1000);
    assert_int_equal(sum, 4000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_roundtrip), cmocka_unit_test(test_block_limits),
        cmocka_unit_test(test_seal_roundtrip),  cmocka_unit_test(test_damage),
        cmocka_unit_test(test_forged),          cmocka_unit_test(test_share),
    };
    return cmocka_run_group_tests_name("records", tests, NULL, NULL);
}
