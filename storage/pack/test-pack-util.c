/*
 * The helpers of the pack format's unit tests (test-pack-util.h).
 */
#include "storage/pack/test-pack-util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- random data, copies, fields ---- */

uint64_t test_rng_state;

uint64_t test_rng_next(void)
{
    test_rng_state ^= test_rng_state >> 12;
    test_rng_state ^= test_rng_state << 25;
    test_rng_state ^= test_rng_state >> 27;
    return test_rng_state * 0x2545F4914F6CDD1Dull;
}

size_t test_rng_below(size_t n)
{
    return (size_t)(test_rng_next() % n);
}

void test_rng_fill(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)test_rng_next();
}

uint8_t *test_dup_exact(const uint8_t *p, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);

    assert_non_null(copy);
    if (len)
        memcpy(copy, p, len);
    return copy;
}

uint32_t test_get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

uint64_t test_get64(const uint8_t *p)
{
    return ((uint64_t)test_get32(p) << 32) | test_get32(p + 4);
}

void test_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

void test_put64(uint8_t *p, uint64_t v)
{
    test_put32(p, (uint32_t)(v >> 32));
    test_put32(p + 4, (uint32_t)v);
}

/* ---- test packs ---- */

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

    assert_true(r < TPACK_MAX_RECS && tp->nent + 5 <= TPACK_MAX_ENTRIES);
    assert_non_null(body);
    test_rng_fill(body, body_len);
    if (type == PACK_REC_BLOCK) {
        nchunks = 1 + (uint32_t)test_rng_below(5);
        for (uint32_t i = 0; i < nchunks; i++) {
            test_rng_fill(chunks[i].id, PROTO_HASH_LEN);
            chunks[i].size = 1 + (uint32_t)test_rng_below(3000);
        }
        pack_block_table_encode(table, chunks, nchunks);
        parts[0].len = pack_block_table_size(nchunks);
    }
    test_rng_fill(tp->rec_id[r], PROTO_HASH_LEN);
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
        e->raw_size = type == PACK_REC_BLOCK ? chunks[i].size : 1 + (uint32_t)test_rng_below(5000);
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

void tpack_make(struct tpack *tp, size_t n, bool sealed)
{
    tpack_init(tp, 0x0102030405060708ull + n);
    for (size_t i = 0; i < n; i++)
        tpack_add(tp, (enum pack_rec_type)(1 + i % 3), i % 4 == 1 ? 0 : test_rng_below(400));
    if (sealed)
        tpack_seal(tp);
}

void tpack_free(struct tpack *tp)
{
    free(tp->buf);
    tp->buf = NULL;
}
