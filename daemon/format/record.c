#include "daemon/format/record.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "compress/compress.h"

bool record_hash_ok(const uint8_t *data, size_t len, const uint8_t id[PROTO_HASH_LEN])
{
    uint8_t h[PROTO_HASH_LEN];
    SHA256(data, len, h);
    return memcmp(h, id, PROTO_HASH_LEN) == 0;
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
    if (prefix_len + body > PACK_MAX_PAYLOAD) {
        free(out);
        return -EINVAL;
    }
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

int record_block_open(const uint8_t *bytes, size_t len, struct pack_block_chunk **chunks,
                      uint32_t *count, uint8_t **raw, size_t *raw_len)
{
    return record_block_open_into(bytes, len, chunks, count, NULL, raw, raw_len);
}

int record_block_open_into(const uint8_t *bytes, size_t len, struct pack_block_chunk **chunks,
                           uint32_t *count, uint8_t *buf, uint8_t **raw, size_t *raw_len)
{
    struct pack_record rec;
    size_t body, total = 0;
    int r;

    *chunks = NULL;
    if (pack_record_parse(bytes, len, &rec) != 0 || rec.type != PACK_REC_BLOCK)
        return RECORD_E_BAD;
    r = pack_block_parse(rec.payload, rec.length, chunks, count, &body);
    if (r != 0) {
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
    int r;

    if (pack_record_parse(bytes, len, &rec) != 0 || rec.type != type ||
        memcmp(rec.id, id, PROTO_HASH_LEN) != 0)
        return RECORD_E_BAD;
    r = unseal(rec.payload, rec.length, max_raw, NULL, 0, raw, raw_len);
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
