/*
 * Unit tests of the records of an encrypted store (record.h, "In an
 * encrypted store"): sealed records round-trip and show neither their raw
 * bytes nor their ids; the same record sealed twice differs; every change to
 * the payload or the id, with its checksum made right again, and every cut
 * fails to open; a sealed record is refused without the key and a plain one
 * with it; a sealed index round-trips and refuses changes, including to its
 * trailer's sequence number.
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

#include "daemon/crypto/keys.h"
#include "daemon/crypto/seal.h"
#include "daemon/format/record.h"

static const char text[] = "journal entry: name SECRETNAME tag SECRETTAG meta SECRETMETA, "
                           "repeated repeated repeated repeated repeated repeated";

static int set_key(void **state)
{
    struct seal_master m;

    (void)state;
    if (keys_new_master(&m) != 0)
        return -1;
    seal_set_master(&m);
    return 0;
}

static int forget_key(void **state)
{
    (void)state;
    seal_forget();
    return 0;
}

/* Makes the record's checksum right again after a change (so only the seal can catch it). */
static void fix_crc(uint8_t *rec, size_t len)
{
    uint8_t id[PROTO_HASH_LEN];
    struct pack_part part = {rec + PACK_RECORD_HEADER, len - PACK_RECORD_HEADER};

    memcpy(id, rec + 12, sizeof(id));
    pack_record_header_encode_flags(rec, (enum pack_rec_type)rec[0], rec[1], id, &part, 1);
}

static void build_entry(uint8_t **rec, size_t *len, uint8_t id[PROTO_HASH_LEN])
{
    struct pack_index_entry *idx;

    assert_int_equal(record_seal_build(PACK_REC_ENTRY, (const uint8_t *)text, sizeof(text), 3, rec,
                                       len, id, &idx),
                     0);
    free(idx);
}

static void test_sealed_roundtrip(void **state)
{
    uint8_t *a, *b, *raw, id[PROTO_HASH_LEN], id2[PROTO_HASH_LEN], sha[PROTO_HASH_LEN];
    size_t alen, blen, raw_len;

    (void)state;
    build_entry(&a, &alen, id);
    build_entry(&b, &blen, id2);
    SHA256((const uint8_t *)text, sizeof(text), sha);
    assert_memory_equal(id, sha, PROTO_HASH_LEN);
    assert_int_equal(a[1], PACK_FLAG_SEALED);
    /* The id in the header is keyed, the raw bytes and the real id are nowhere. */
    assert_memory_not_equal(a + 12, sha, PROTO_HASH_LEN);
    assert_null(memmem(a, alen, sha, PROTO_HASH_LEN));
    assert_null(memmem(a, alen, "SECRET", 6));
    assert_null(memmem(a, alen, "repeated", 8));
    /* One record written twice: one keyed id, two nonces, two ciphertexts. */
    assert_int_equal(alen, blen);
    assert_memory_equal(a + 12, b + 12, PROTO_HASH_LEN);
    assert_memory_not_equal(a + PACK_RECORD_HEADER, b + PACK_RECORD_HEADER, 12);
    assert_memory_not_equal(a + PACK_RECORD_HEADER + 12, b + PACK_RECORD_HEADER + 12,
                            alen - PACK_RECORD_HEADER - 12);
    assert_int_equal(record_seal_open(a, alen, PACK_REC_ENTRY, id, 4096, &raw, &raw_len), 0);
    assert_int_equal(raw_len, sizeof(text));
    assert_memory_equal(raw, text, sizeof(text));
    free(raw);
    /* Opened as another type, or for another id: refused. */
    assert_int_equal(record_seal_open(a, alen, PACK_REC_MANIFEST, id, 4096, &raw, &raw_len),
                     RECORD_E_BAD);
    id2[0] ^= 1;
    assert_int_equal(record_seal_open(a, alen, PACK_REC_ENTRY, id2, 4096, &raw, &raw_len),
                     RECORD_E_BAD);
    /* The plain view: the real id and the envelope. */
    struct pack_record rec;
    uint8_t *buf;
    assert_int_equal(record_plain(a, alen, &rec, &buf), 0);
    assert_memory_equal(rec.id, id, PROTO_HASH_LEN);
    assert_int_equal(rec.length, alen - PACK_RECORD_HEADER - RECORD_SEAL_EXTRA);
    free(buf);
    free(a);
    free(b);
}

static void test_sealed_changes_refused(void **state)
{
    uint8_t *a, *raw, id[PROTO_HASH_LEN];
    size_t alen, raw_len;

    (void)state;
    build_entry(&a, &alen, id);
    /* Every byte of the keyed id and of the payload, checksum fixed: the seal refuses it. */
    for (size_t i = 12; i < alen; i++) {
        a[i] ^= 0x20;
        fix_crc(a, alen);
        assert_int_equal(record_seal_open(a, alen, PACK_REC_ENTRY, id, 4096, &raw, &raw_len),
                         RECORD_E_BAD);
        a[i] ^= 0x20;
        fix_crc(a, alen);
    }
    /* The length and type are bound too: a shorter record with a right checksum fails. */
    for (size_t cut = 1; cut < alen - PACK_RECORD_HEADER; cut += 7) {
        uint8_t *s = malloc(alen);
        memcpy(s, a, alen - cut);
        uint32_t l = (uint32_t)(alen - cut - PACK_RECORD_HEADER);
        s[4] = (uint8_t)(l >> 24), s[5] = (uint8_t)(l >> 16), s[6] = (uint8_t)(l >> 8),
        s[7] = (uint8_t)l;
        fix_crc(s, alen - cut);
        assert_int_equal(record_seal_open(s, alen - cut, PACK_REC_ENTRY, id, 4096, &raw, &raw_len),
                         RECORD_E_BAD);
        free(s);
    }
    a[0] = PACK_REC_MANIFEST;
    fix_crc(a, alen);
    assert_int_equal(record_seal_open(a, alen, PACK_REC_MANIFEST, id, 4096, &raw, &raw_len),
                     RECORD_E_BAD);
    a[0] = PACK_REC_ENTRY;
    fix_crc(a, alen);
    assert_int_equal(record_seal_open(a, alen, PACK_REC_ENTRY, id, 4096, &raw, &raw_len), 0);
    free(raw);
    /* Without the key a sealed record is refused; with it, a plain one. */
    struct seal_master m;
    seal_get_master(&m);
    seal_forget();
    assert_int_equal(record_seal_open(a, alen, PACK_REC_ENTRY, id, 4096, &raw, &raw_len),
                     RECORD_E_BAD);
    uint8_t *plain;
    size_t plen;
    build_entry(&plain, &plen, id);
    assert_int_equal(plain[1], 0);
    seal_set_master(&m);
    assert_int_equal(record_seal_open(plain, plen, PACK_REC_ENTRY, id, 4096, &raw, &raw_len),
                     RECORD_E_BAD);
    /* Another store's key: refused. */
    struct seal_master other;
    assert_int_equal(keys_new_master(&other), 0);
    seal_set_master(&other);
    assert_int_equal(record_seal_open(a, alen, PACK_REC_ENTRY, id, 4096, &raw, &raw_len),
                     RECORD_E_BAD);
    seal_set_master(&m);
    free(plain);
    free(a);
}

static void test_sealed_block(void **state)
{
    uint8_t data[3000], *rec, *raw, id[PROTO_HASH_LEN];
    struct record_piece p[2];
    struct pack_index_entry *idx;
    struct pack_block_chunk *chunks;
    uint32_t count;
    size_t len, raw_len;

    (void)state;
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)("SECRETCONTENT "[i % 14]);
    p[0] = (struct record_piece){data, 1000, {0}};
    p[1] = (struct record_piece){data + 1000, 2000, {0}};
    SHA256(p[0].data, p[0].len, p[0].hash);
    SHA256(p[1].data, p[1].len, p[1].hash);
    assert_int_equal(record_block_build(p, 2, 3, &rec, &len, id, &idx), 0);
    assert_null(memmem(rec, len, "SECRET", 6));
    assert_null(memmem(rec, len, p[0].hash, PROTO_HASH_LEN));
    assert_null(memmem(rec, len, p[1].hash, PROTO_HASH_LEN));
    assert_null(memmem(rec, len, id, PROTO_HASH_LEN));
    /* The index entries keep the real chunk ids: the index is sealed as a whole. */
    assert_memory_equal(idx[1].id, p[1].hash, PROTO_HASH_LEN);
    assert_int_equal(record_block_open(rec, len, &chunks, &count, &raw, &raw_len), 0);
    assert_int_equal(count, 2);
    assert_memory_equal(chunks[1].id, p[1].hash, PROTO_HASH_LEN);
    assert_memory_equal(raw, data, sizeof(data));
    free(chunks);
    free(raw);
    rec[len - 1] ^= 1;
    fix_crc(rec, len);
    assert_int_equal(record_block_open(rec, len, &chunks, &count, &raw, &raw_len), RECORD_E_BAD);
    free(rec);
    free(idx);
}

static void test_sealed_index(void **state)
{
    struct pack_index_entry e[3] = {0}, *got;
    struct pack_trailer t;
    size_t size = record_index_size(3);
    uint8_t *buf = malloc(size);

    (void)state;
    for (int i = 0; i < 3; i++) {
        e[i].type = PACK_IDX_CHUNK;
        e[i].record_off = 16 + 100 * (uint64_t)i;
        e[i].record_len = 100;
        e[i].raw_size = 50;
        memset(e[i].id, 0xa0 + i, PROTO_HASH_LEN);
    }
    assert_int_equal(size, pack_index_size(4));
    assert_int_equal(record_index_encode(buf, e, 3, 316, 7), 0);
    for (int i = 0; i < 3; i++)
        assert_null(memmem(buf, size, e[i].id, PROTO_HASH_LEN));
    assert_int_equal(pack_trailer_parse(buf + size - PACK_TRAILER_SIZE, 316 + size, &t), 0);
    assert_int_equal(t.count, 4);
    struct pack_trailer t2 = t;
    assert_int_equal(record_index_open(buf, size - PACK_TRAILER_SIZE, &t2, &got), 0);
    assert_int_equal(t2.count, 3);
    assert_memory_equal(got[2].id, e[2].id, PROTO_HASH_LEN);
    assert_int_equal(got[1].record_off, 116);
    free(got);
    /* Another seq (the trailer of another pack), or a changed byte: refused. */
    t2 = t;
    t2.seq = 8;
    assert_int_equal(record_index_open(buf, size - PACK_TRAILER_SIZE, &t2, &got), RECORD_E_BAD);
    buf[30] ^= 1;
    t2 = t;
    t2.index_crc = pack_crc32c(0, buf, size - PACK_TRAILER_SIZE);
    assert_int_equal(record_index_open(buf, size - PACK_TRAILER_SIZE, &t2, &got), RECORD_E_BAD);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sealed_roundtrip),
        cmocka_unit_test(test_sealed_changes_refused),
        cmocka_unit_test(test_sealed_block),
        cmocka_unit_test(test_sealed_index),
    };
    return cmocka_run_group_tests(tests, set_key, forget_key);
}
