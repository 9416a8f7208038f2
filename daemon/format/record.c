#include "daemon/format/record.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "compress/compress.h"
#include "daemon/crypto/seal.h"

bool record_hash_ok(const uint8_t *data, size_t len, const uint8_t id[PROTO_HASH_LEN])
{
    uint8_t h[PROTO_HASH_LEN];
    SHA256(data, len, h);
    return memcmp(h, id, PROTO_HASH_LEN) == 0;
}

/* The associated data of a sealed record: its header's first 8 bytes and its keyed id. */
static void record_aad(uint8_t aad[8 + SEAL_ID_LEN], enum pack_rec_type type, uint32_t length,
                       const uint8_t keyed[SEAL_ID_LEN])
{
    aad[0] = (uint8_t)type;
    aad[1] = PACK_FLAG_SEALED;
    aad[2] = aad[3] = 0;
    aad[4] = (uint8_t)(length >> 24);
    aad[5] = (uint8_t)(length >> 16);
    aad[6] = (uint8_t)(length >> 8);
    aad[7] = (uint8_t)length;
    memcpy(aad + 8, keyed, SEAL_ID_LEN);
}

/*
 * Turns plain (a record buffer whose payload of plain_len bytes follows the
 * header room, taken over and freed) into a sealed record.
 */
static int seal_record(enum pack_rec_type type, uint8_t *plain, size_t plain_len,
                       const uint8_t id[PROTO_HASH_LEN], uint8_t **rec, size_t *rec_len)
{
    size_t inner = PROTO_HASH_LEN + plain_len, length = inner + SEAL_OVERHEAD;
    uint8_t keyed[SEAL_ID_LEN], aad[8 + SEAL_ID_LEN];
    uint8_t *out = malloc(PACK_RECORD_HEADER + length);
    int r;

    /* The real id goes in front of the payload, inside the seal. */
    memmove(plain + PACK_RECORD_HEADER - PROTO_HASH_LEN, id, PROTO_HASH_LEN);
    if (!out) {
        free(plain);
        return -ENOMEM;
    }
    seal_keyed_id((uint8_t)type, id, keyed);
    record_aad(aad, type, (uint32_t)length, keyed);
    r = seal_encrypt(aad, sizeof(aad), plain + PACK_RECORD_HEADER - PROTO_HASH_LEN, inner,
                     out + PACK_RECORD_HEADER);
    free(plain);
    if (r != 0) {
        free(out);
        return r;
    }
    struct pack_part part = {out + PACK_RECORD_HEADER, length};
    pack_record_header_encode_flags(out, type, PACK_FLAG_SEALED, keyed, &part, 1);
    *rec = out;
    *rec_len = PACK_RECORD_HEADER + length;
    return 0;
}

/* Allocates a record of header + prefix + envelope(raw) and fills all but the header. */
static int build(enum pack_rec_type type, const uint8_t *prefix, size_t prefix_len,
                 const uint8_t *raw, size_t raw_len, int level, const uint8_t id[PROTO_HASH_LEN],
                 uint8_t **rec, size_t *rec_len)
{
    size_t cap = PACK_RECORD_HEADER + prefix_len + compress_bound(raw_len), body;
    uint8_t *out = malloc(cap);
    int r;

    if (!out)
        return -ENOMEM;
    if (prefix_len)
        memcpy(out + PACK_RECORD_HEADER, prefix, prefix_len);
    r = compress_encode(raw, raw_len, level, out + PACK_RECORD_HEADER + prefix_len,
                        cap - PACK_RECORD_HEADER - prefix_len, &body);
    if (r != 0) {
        free(out);
        return r < 0 ? r : -EINVAL;
    }
    if (prefix_len + body > PACK_MAX_PAYLOAD - RECORD_SEAL_EXTRA) {
        free(out);
        return -EINVAL;
    }
    if (seal_on())
        return seal_record(type, out, prefix_len + body, id, rec, rec_len);
    struct pack_part part = {out + PACK_RECORD_HEADER, prefix_len + body};
    pack_record_header_encode(out, type, id, &part, 1);
    *rec = out;
    *rec_len = PACK_RECORD_HEADER + prefix_len + body;
    return 0;
}

int record_block_build(const struct record_piece *p, size_t n, int level, uint8_t **rec,
                       size_t *rec_len, uint8_t id[PROTO_HASH_LEN], struct pack_index_entry **idx)
{
    struct pack_block_chunk *chunks = NULL;
    struct pack_index_entry *entries = NULL;
    uint8_t *table = NULL, *raw = NULL;
    size_t total = 0, table_len;
    int r = -ENOMEM;

    if (n == 0 || n > PACK_MAX_BLOCK_CHUNKS)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (p[i].len == 0 || p[i].len > RECORD_BLOCK_MAX - total)
            return -EINVAL;
        total += p[i].len;
    }
    table_len = pack_block_table_size((uint32_t)n);
    chunks = calloc(n, sizeof(*chunks));
    entries = calloc(n, sizeof(*entries));
    table = malloc(table_len);
    raw = malloc(total);
    if (!chunks || !entries || !table || !raw)
        goto out;
    total = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(chunks[i].id, p[i].hash, PROTO_HASH_LEN);
        chunks[i].size = (uint32_t)p[i].len;
        chunks[i].sub_off = (uint32_t)total;
        entries[i].type = PACK_IDX_CHUNK;
        memcpy(entries[i].id, p[i].hash, PROTO_HASH_LEN);
        entries[i].sub_off = (uint32_t)total;
        entries[i].raw_size = (uint32_t)p[i].len;
        /* One frame over the block: neighbouring chunks compress against each other. */
        memcpy(raw + total, p[i].data, p[i].len);
        total += p[i].len;
    }
    pack_block_table_encode(table, chunks, (uint32_t)n);
    SHA256(table, table_len, id);
    r = build(PACK_REC_BLOCK, table, table_len, raw, total, level, id, rec, rec_len);
    if (r == 0) {
        *idx = entries;
        entries = NULL;
    }
out:
    free(chunks);
    free(entries);
    free(table);
    free(raw);
    return r;
}

int record_seal_build(enum pack_rec_type type, const uint8_t *raw, size_t raw_len, int level,
                      uint8_t **rec, size_t *rec_len, uint8_t id[PROTO_HASH_LEN],
                      struct pack_index_entry **idx)
{
    struct pack_index_entry *e = calloc(1, sizeof(*e));
    int r;

    if (!e)
        return -ENOMEM;
    if (raw_len > UINT32_MAX) {
        free(e);
        return -EINVAL;
    }
    SHA256(raw, raw_len, id);
    r = build(type, NULL, 0, raw, raw_len, level, id, rec, rec_len);
    if (r < 0) {
        free(e);
        return r;
    }
    e->type = type == PACK_REC_MANIFEST ? PACK_IDX_MANIFEST : PACK_IDX_ENTRY;
    memcpy(e->id, id, PROTO_HASH_LEN);
    e->raw_size = (uint32_t)raw_len;
    *idx = e;
    return 0;
}

/*
 * Decodes a sealed payload (an envelope) of at most max_raw bytes into `buf`
 * (when given, of `cap` bytes), else into a new buffer.
 */
static int unseal(const uint8_t *obj, size_t len, size_t max_raw, uint8_t *buf, size_t cap,
                  uint8_t **raw, size_t *raw_len)
{
    struct compress_header hdr;
    uint8_t *out = buf;

    if (compress_header_parse(obj, len, &hdr) != 0 || hdr.raw_size > max_raw ||
        (buf && hdr.raw_size > cap))
        return RECORD_E_BAD;
    if (!out && !(out = malloc(hdr.raw_size ? hdr.raw_size : 1)))
        return -ENOMEM;
    if (compress_decode(obj, len, max_raw, out, hdr.raw_size, raw_len) != 0 ||
        *raw_len != hdr.raw_size) {
        if (out != buf)
            free(out);
        return RECORD_E_BAD;
    }
    *raw = out;
    return 0;
}

int record_plain(const uint8_t *bytes, size_t len, struct pack_record *rec, uint8_t **buf)
{
    uint8_t aad[8 + SEAL_ID_LEN], keyed[SEAL_ID_LEN], *plain;
    int r;

    *buf = NULL;
    if (pack_record_parse(bytes, len, rec) != 0)
        return RECORD_E_BAD;
    /* A plain record in an encrypted store, or a sealed one in a plain store: not ours. */
    if (((rec->flags & PACK_FLAG_SEALED) != 0) != seal_on())
        return RECORD_E_BAD;
    if (!seal_on())
        return 0;
    if (rec->length < SEAL_OVERHEAD + PROTO_HASH_LEN)
        return RECORD_E_BAD;
    if (!(plain = malloc(rec->length - SEAL_OVERHEAD)))
        return -ENOMEM;
    record_aad(aad, rec->type, rec->length, rec->id);
    r = seal_decrypt(aad, sizeof(aad), rec->payload, rec->length, plain);
    if (r == 0) {
        /* The keyed id must be the one of the real id sealed inside. */
        seal_keyed_id((uint8_t)rec->type, plain, keyed);
        r = memcmp(keyed, rec->id, SEAL_ID_LEN) == 0 ? 0 : 1;
    }
    if (r != 0) {
        free(plain);
        return r < 0 ? r : RECORD_E_BAD;
    }
    memcpy(rec->id, plain, PROTO_HASH_LEN);
    rec->payload = plain + PROTO_HASH_LEN;
    rec->length -= SEAL_OVERHEAD + PROTO_HASH_LEN;
    *buf = plain;
    return 0;
}

/*
 * A record that is exactly the `len` bytes read for it: a location whose
 * length is not its record's (a stale read-cache slice, another pack under
 * a number used before) is refused, not read short or long. Its plain view
 * (record_plain): *buf to free.
 */
static int parse_whole(const uint8_t *bytes, size_t len, struct pack_record *rec, uint8_t **buf)
{
    struct pack_record outer;
    int r;

    if (pack_record_parse(bytes, len, &outer) != 0 ||
        PACK_RECORD_HEADER + (size_t)outer.length != len)
        return RECORD_E_BAD;
    r = record_plain(bytes, len, rec, buf);
    return r;
}

int record_block_open(const uint8_t *bytes, size_t len, struct pack_block_chunk **chunks,
                      uint32_t *count, uint8_t **raw, size_t *raw_len)
{
    return record_block_open_into(bytes, len, chunks, count, NULL, raw, raw_len);
}

/*
 * A sealed block opened in pieces (seal_stream): its id and table into
 * small buffers, and a raw body straight into the caller's buffer, so that
 * the read of a block costs one decryption and no copy of its bytes more
 * than a plain one. Nothing decrypted is handed out unless the tag holds.
 */
static int block_open_sealed(const struct pack_record *o, struct pack_block_chunk **chunks,
                             uint32_t *count, uint8_t *buf, uint8_t **raw, size_t *raw_len)
{
    uint8_t aad[8 + SEAL_ID_LEN], head[PROTO_HASH_LEN + 4], env[COMPRESS_HEADER_SIZE];
    uint8_t keyed[SEAL_ID_LEN], *table = NULL, *obj = NULL, *out = NULL;
    const uint8_t *ct = o->payload + SEAL_NONCE_LEN, *tag;
    size_t ct_len, table_len, env_len, body_off, total = 0;
    struct compress_header hdr;
    struct seal_stream ss;
    uint32_t n;
    int r, bad = 1;

    if (o->length < SEAL_OVERHEAD + sizeof(head) + COMPRESS_HEADER_SIZE)
        return RECORD_E_BAD;
    ct_len = o->length - SEAL_OVERHEAD;
    tag = ct + ct_len;
    record_aad(aad, o->type, o->length, o->id);
    if ((r = seal_stream_begin(&ss, aad, sizeof(aad), o->payload)) != 0)
        return r;
    seal_stream_next(&ss, ct, sizeof(head), head);
    n = (uint32_t)head[32] << 24 | (uint32_t)head[33] << 16 | (uint32_t)head[34] << 8 | head[35];
    table_len = pack_block_table_size(n);
    if (n == 0 || n > PACK_MAX_BLOCK_CHUNKS ||
        ct_len < PROTO_HASH_LEN + table_len + COMPRESS_HEADER_SIZE || !(table = malloc(table_len)))
        goto out;
    memcpy(table, head + PROTO_HASH_LEN, 4);
    seal_stream_next(&ss, ct + sizeof(head), table_len - 4, table + 4);
    seal_stream_next(&ss, ct + PROTO_HASH_LEN + table_len, sizeof(env), env);
    env_len = ct_len - PROTO_HASH_LEN - table_len;
    if (pack_block_parse(table, table_len, chunks, count, &body_off) != 0 || body_off != table_len)
        goto out;
    for (uint32_t i = 0; i < *count; i++)
        total += (*chunks)[i].size;
    if (total > RECORD_BLOCK_MAX || compress_header_parse(env, env_len, &hdr) != 0 ||
        hdr.raw_size != total)
        goto out;
    const uint8_t *body = ct + PROTO_HASH_LEN + table_len + COMPRESS_HEADER_SIZE;
    size_t body_len = env_len - COMPRESS_HEADER_SIZE;
    if (hdr.algo == COMPRESS_RAW && body_len == total) {
        /* A raw body: decrypted where the caller wants the block's bytes. */
        if (!(out = buf) && !(out = malloc(total ? total : 1)))
            goto out;
        seal_stream_next(&ss, body, body_len, out);
    } else {
        if (!(obj = malloc(env_len)))
            goto out;
        memcpy(obj, env, sizeof(env));
        seal_stream_next(&ss, body, body_len, obj + sizeof(env));
    }
    bad = 0;
out:
    /* The tag, whatever happened: it frees the stream too. */
    if (seal_stream_end(&ss, tag) != 0)
        bad = 1;
    if (!bad) {
        seal_keyed_id((uint8_t)o->type, head, keyed);
        bad = memcmp(keyed, o->id, SEAL_ID_LEN) != 0;
    }
    if (!bad && obj)
        bad = unseal(obj, env_len, total, buf, RECORD_BLOCK_MAX, &out, raw_len) != 0 ||
              *raw_len != total;
    else if (!bad)
        *raw_len = total;
    free(obj);
    free(table);
    if (bad) {
        if (out && out != buf)
            free(out);
        free(*chunks);
        *chunks = NULL;
        return RECORD_E_BAD;
    }
    *raw = out;
    return 0;
}

int record_block_open_into(const uint8_t *bytes, size_t len, struct pack_block_chunk **chunks,
                           uint32_t *count, uint8_t *buf, uint8_t **raw, size_t *raw_len)
{
    struct pack_record rec;
    size_t body, total = 0;
    uint8_t *plain;
    int r;

    *chunks = NULL;
    if (seal_on()) {
        if (pack_record_parse(bytes, len, &rec) != 0 ||
            PACK_RECORD_HEADER + (size_t)rec.length != len || rec.type != PACK_REC_BLOCK ||
            !(rec.flags & PACK_FLAG_SEALED))
            return RECORD_E_BAD;
        return block_open_sealed(&rec, chunks, count, buf, raw, raw_len);
    }
    if ((r = parse_whole(bytes, len, &rec, &plain)) != 0)
        return r;
    if (rec.type != PACK_REC_BLOCK) {
        free(plain);
        return RECORD_E_BAD;
    }
    r = pack_block_parse(rec.payload, rec.length, chunks, count, &body);
    if (r != 0) {
        free(plain);
        *chunks = NULL;
        return r < 0 ? r : RECORD_E_BAD;
    }
    for (uint32_t i = 0; i < *count; i++)
        total += (*chunks)[i].size;
    r = total > RECORD_BLOCK_MAX ? RECORD_E_BAD
                                 : unseal(rec.payload + body, rec.length - body, total, buf,
                                          RECORD_BLOCK_MAX, raw, raw_len);
    if (r == 0 && *raw_len != total) {
        if (*raw != buf)
            free(*raw);
        r = RECORD_E_BAD;
    }
    /* Not wiped: the same bytes go on to the caller, the chunk cache and the client. */
    free(plain);
    if (r != 0) {
        free(*chunks);
        *chunks = NULL;
    }
    return r;
}

int record_seal_open(const uint8_t *bytes, size_t len, enum pack_rec_type type,
                     const uint8_t id[PROTO_HASH_LEN], size_t max_raw, uint8_t **raw,
                     size_t *raw_len)
{
    struct pack_record rec;
    uint8_t *plain;
    int r;

    if ((r = parse_whole(bytes, len, &rec, &plain)) != 0)
        return r;
    if (rec.type != type || memcmp(rec.id, id, PROTO_HASH_LEN) != 0) {
        free(plain);
        return RECORD_E_BAD;
    }
    r = unseal(rec.payload, rec.length, max_raw, NULL, 0, raw, raw_len);
    free(plain);
    if (r == 0 && !record_hash_ok(*raw, *raw_len, id)) {
        free(*raw);
        *raw = NULL;
        r = RECORD_E_BAD;
    }
    return r;
}

uint32_t record_share(uint64_t record_len, uint64_t size, uint64_t raw)
{
    uint64_t share = raw ? record_len * size / raw : record_len;
    return share ? (uint32_t)share : 1;
}

/* ---- the index of a pack ---- */

static const char index_aad_tag[] = "cairn index 1";

static void index_aad(uint8_t aad[sizeof(index_aad_tag) - 1 + 20], uint64_t index_off,
                      uint32_t count, uint64_t seq)
{
    size_t t = sizeof(index_aad_tag) - 1;

    memcpy(aad, index_aad_tag, t);
    for (int i = 0; i < 8; i++) {
        aad[t + i] = (uint8_t)(index_off >> (56 - 8 * i));
        aad[t + 8 + i] = (uint8_t)(seq >> (56 - 8 * i));
    }
    for (int i = 0; i < 4; i++)
        aad[t + 16 + i] = (uint8_t)(count >> (24 - 8 * i));
}

size_t record_index_size(size_t count)
{
    return pack_index_size(seal_on() ? count + 1 : count);
}

int record_index_encode(uint8_t *out, const struct pack_index_entry *entries, size_t count,
                        uint64_t index_off, uint64_t seq)
{
    uint8_t aad[sizeof(index_aad_tag) - 1 + 20], *plain;
    size_t stored = (count + 1) * PACK_INDEX_ENTRY;
    int r;

    if (!seal_on()) {
        pack_index_encode(out, entries, count, index_off, seq);
        return 0;
    }
    if (count + 1 > UINT32_MAX)
        return -EINVAL;
    /* The plain index and its trailer, of which only the entries are kept, sealed. */
    if (!(plain = malloc(pack_index_size(count))))
        return -ENOMEM;
    pack_index_encode(plain, entries, count, index_off, seq);
    index_aad(aad, index_off, (uint32_t)(count + 1), seq);
    memset(out, 0, stored);
    r = seal_encrypt(aad, sizeof(aad), plain, count * PACK_INDEX_ENTRY, out);
    free(plain);
    if (r != 0)
        return r;
    pack_trailer_encode(out + stored, index_off, (uint32_t)(count + 1), pack_crc32c(0, out, stored),
                        seq);
    return 0;
}

int record_index_open(const uint8_t *buf, size_t len, struct pack_trailer *t,
                      struct pack_index_entry **entries)
{
    uint8_t aad[sizeof(index_aad_tag) - 1 + 20], *plain;
    struct pack_trailer inner;
    size_t sealed;
    int r;

    *entries = NULL;
    if (!seal_on())
        return pack_index_parse(buf, len, t, entries) == 0 ? 0 : RECORD_E_BAD;
    if (t->count < 1 || len != (size_t)t->count * PACK_INDEX_ENTRY ||
        pack_crc32c(0, buf, len) != t->index_crc)
        return RECORD_E_BAD;
    sealed = (size_t)(t->count - 1) * PACK_INDEX_ENTRY + SEAL_OVERHEAD;
    for (size_t i = sealed; i < len; i++)
        if (buf[i] != 0)
            return RECORD_E_BAD;
    if (!(plain = malloc(sealed - SEAL_OVERHEAD + 1)))
        return -ENOMEM;
    index_aad(aad, t->index_off, t->count, t->seq);
    r = seal_decrypt(aad, sizeof(aad), buf, sealed, plain);
    if (r == 0) {
        inner = *t;
        inner.count = t->count - 1;
        inner.index_crc = pack_crc32c(0, plain, sealed - SEAL_OVERHEAD);
        r = pack_index_parse(plain, sealed - SEAL_OVERHEAD, &inner, entries) == 0 ? 0 : 1;
        if (r == 0)
            t->count = inner.count;
    }
    free(plain);
    return r == 0 ? 0 : r < 0 ? r : RECORD_E_BAD;
}
