/*
 * Encoding and decoding of packs (see pack.h for the layout). Every
 * parser here takes a buffer and its length from a file or the network, so
 * each one checks a length against the bytes it actually has before reading
 * past it, and does its arithmetic in 64 bits after range checks that keep
 * hostile values from wrapping around.
 */
#include "storage/pack/pack.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t pack_magic[8] = {'c', 'R', 'n', 'P', 'A', 'C', 'K', '1'};
static const uint8_t index_magic[8] = {'c', 'R', 'n', 'P', 'I', 'D', 'X', '1'};

/* Offsets of the fields of a record header. */
#define REC_TYPE 0
#define REC_FLAGS 1
#define REC_RESERVED 2
#define REC_LENGTH 4
#define REC_CRC 8
#define REC_ID 12
/* The checksum covers the header up to (not including) the crc field. */
#define REC_CRC_PREFIX 8

/* Offsets of the fields of an index entry. */
#define IDX_TYPE 0
#define IDX_PAD 1
#define IDX_RESERVED 2
#define IDX_RECORD_LEN 4
#define IDX_RECORD_OFF 8
#define IDX_SUB_OFF 16
#define IDX_RAW_SIZE 20
#define IDX_ID 24

/* Offsets of the fields of the trailer. */
#define TRL_INDEX_OFF 0
#define TRL_COUNT 8
#define TRL_INDEX_CRC 12
#define TRL_SEQ 16
#define TRL_MAGIC 24

static uint16_t be16_read(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t be32_read(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64_read(const uint8_t *p)
{
    return ((uint64_t)be32_read(p) << 32) | be32_read(p + 4);
}

static void be16_write(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void be32_write(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void be64_write(uint8_t *p, uint64_t v)
{
    be32_write(p, (uint32_t)(v >> 32));
    be32_write(p + 4, (uint32_t)v);
}

/* ---- a pack's key ---- */

void pack_key(char *key, size_t len, uint64_t writer, uint64_t seq)
{
    if (writer == 0)
        snprintf(key, len, PACK_KEY_PREFIX "%016" PRIx64, seq);
    else
        snprintf(key, len, PACK_KEY_PREFIX "%016" PRIx64 "-%016" PRIx64, writer, seq);
}

/* Sixteen lower-case hex digits at s: 0 with their value, else -EINVAL. */
static int hex16(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    for (int i = 0; i < 16; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9')
            v = v << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v << 4 | (uint64_t)(c - 'a' + 10);
        else
            return -EINVAL;
    }
    *out = v;
    return 0;
}

int pack_key_parse(const char *key, uint64_t *writer, uint64_t *seq)
{
    size_t plen = strlen(PACK_KEY_PREFIX), len = strlen(key);

    if (len <= plen || memcmp(key, PACK_KEY_PREFIX, plen) != 0)
        return -EINVAL;
    key += plen;
    len -= plen;
    if (len == 16) {
        *writer = 0;
        if (hex16(key, seq) < 0)
            return -EINVAL;
    } else if (len == 33 && key[16] == '-') {
        if (hex16(key, writer) < 0 || hex16(key + 17, seq) < 0 || *writer == 0)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    return *seq == 0 || *seq > PACK_SEQ_MAX ? -EINVAL : 0;
}

/* ---- pack header ---- */

void pack_header_encode(uint8_t out[PACK_HEADER_SIZE], uint64_t seq)
{
    memcpy(out, pack_magic, sizeof(pack_magic));
    be64_write(out + 8, seq);
}

int pack_header_decode(const uint8_t *buf, size_t len, uint64_t *seq)
{
    if (len < PACK_HEADER_SIZE)
        return PACK_E_TRUNCATED;
    if (memcmp(buf, pack_magic, sizeof(pack_magic)) != 0)
        return PACK_E_CORRUPT;
    *seq = be64_read(buf + 8);
    return 0;
}

/* ---- records ---- */

static bool rec_type_valid(unsigned type)
{
    return type >= PACK_REC_BLOCK && type <= PACK_REC_ENTRY;
}

/*
 * The checksum of a record: its header's first 8 bytes, its id, then its
 * payload in pieces. Keeping the order in one place is what makes the
 * writer's and the reader's checksums agree.
 */
static uint32_t record_crc(const uint8_t prefix[REC_CRC_PREFIX], const uint8_t *id,
                           const struct pack_part *parts, size_t nparts)
{
    uint32_t crc = pack_crc32c(0, prefix, REC_CRC_PREFIX);

    crc = pack_crc32c(crc, id, PROTO_HASH_LEN);
    for (size_t i = 0; i < nparts; i++)
        crc = pack_crc32c(crc, parts[i].data, parts[i].len);
    return crc;
}

void pack_record_header_encode(uint8_t out[PACK_RECORD_HEADER], enum pack_rec_type type,
                               const uint8_t id[PROTO_HASH_LEN], const struct pack_part *parts,
                               size_t nparts)
{
    pack_record_header_encode_flags(out, type, 0, id, parts, nparts);
}

void pack_record_header_encode_flags(uint8_t out[PACK_RECORD_HEADER], enum pack_rec_type type,
                                     uint8_t flags, const uint8_t id[PROTO_HASH_LEN],
                                     const struct pack_part *parts, size_t nparts)
{
    size_t length = 0;

    /* The caller keeps the payload within PACK_MAX_PAYLOAD, so the sum fits the u32 field. */
    for (size_t i = 0; i < nparts; i++)
        length += parts[i].len;
    out[REC_TYPE] = (uint8_t)type;
    out[REC_FLAGS] = flags;
    be16_write(out + REC_RESERVED, 0);
    be32_write(out + REC_LENGTH, (uint32_t)length);
    memcpy(out + REC_ID, id, PROTO_HASH_LEN);
    be32_write(out + REC_CRC, record_crc(out, id, parts, nparts));
}

int pack_record_peek(const uint8_t *buf, size_t len, enum pack_rec_type *type,
                     uint8_t id[PROTO_HASH_LEN], uint32_t *length)
{
    uint32_t payload_len;

    if (len < PACK_RECORD_HEADER)
        return PACK_E_TRUNCATED;
    payload_len = be32_read(buf + REC_LENGTH);
    /* Rejecting an oversized length here keeps a caller from reading megabytes of garbage. */
    if (!rec_type_valid(buf[REC_TYPE]) || (buf[REC_FLAGS] & ~PACK_FLAG_SEALED) != 0 ||
        be16_read(buf + REC_RESERVED) != 0 || payload_len > PACK_MAX_PAYLOAD)
        return PACK_E_CORRUPT;
    *type = (enum pack_rec_type)buf[REC_TYPE];
    memcpy(id, buf + REC_ID, PROTO_HASH_LEN);
    *length = payload_len;
    return 0;
}

int pack_record_parse(const uint8_t *buf, size_t len, struct pack_record *rec)
{
    enum pack_rec_type type;
    uint8_t id[PROTO_HASH_LEN];
    uint32_t length;
    struct pack_part payload;
    int r;

    r = pack_record_peek(buf, len, &type, id, &length);
    if (r != 0)
        return r;
    /* length <= PACK_MAX_PAYLOAD, so the sum cannot wrap. */
    if (len - PACK_RECORD_HEADER < length)
        return PACK_E_TRUNCATED;
    payload.data = buf + PACK_RECORD_HEADER;
    payload.len = length;
    if (record_crc(buf, buf + REC_ID, &payload, 1) != be32_read(buf + REC_CRC))
        return PACK_E_CORRUPT;
    rec->type = type;
    rec->flags = buf[REC_FLAGS];
    memcpy(rec->id, id, PROTO_HASH_LEN);
    rec->payload = buf + PACK_RECORD_HEADER;
    rec->length = length;
    return 0;
}

/* ---- block payloads ---- */

void pack_block_table_encode(uint8_t *out, const struct pack_block_chunk *chunks, uint32_t count)
{
    be32_write(out, count);
    out += 4;
    for (uint32_t i = 0; i < count; i++) {
        memcpy(out, chunks[i].id, PROTO_HASH_LEN);
        be32_write(out + PROTO_HASH_LEN, chunks[i].size);
        out += PACK_BLOCK_ENTRY;
    }
}

int pack_block_parse(const uint8_t *payload, size_t len, struct pack_block_chunk **chunks,
                     uint32_t *count, size_t *body_off)
{
    struct pack_block_chunk *table;
    uint64_t raw_off = 0;
    uint32_t n;
    size_t table_size;

    if (len < 4)
        return PACK_E_CORRUPT;
    n = be32_read(payload);
    if (n == 0 || n > PACK_MAX_BLOCK_CHUNKS)
        return PACK_E_CORRUPT;
    /* n is bounded, so the table size is small and exact. */
    table_size = pack_block_table_size(n);
    if (table_size > len)
        return PACK_E_CORRUPT;
    table = calloc(n, sizeof(*table));
    if (!table)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *entry = payload + 4 + (size_t)i * PACK_BLOCK_ENTRY;
        uint32_t size = be32_read(entry + PROTO_HASH_LEN);

        /*
         * Offsets within the block are u32 in the index, so a table whose
         * sizes add up past that cannot describe a block this format stores.
         */
        if (size == 0 || raw_off + size > UINT32_MAX) {
            free(table);
            return PACK_E_CORRUPT;
        }
        memcpy(table[i].id, entry, PROTO_HASH_LEN);
        table[i].size = size;
        table[i].sub_off = (uint32_t)raw_off;
        raw_off += size;
    }
    *chunks = table;
    *count = n;
    *body_off = table_size;
    return 0;
}

/* ---- index and trailer ---- */

static bool idx_type_valid(unsigned type)
{
    return type >= PACK_IDX_CHUNK && type <= PACK_IDX_ENTRY;
}

static void index_entry_encode(uint8_t *out, const struct pack_index_entry *e)
{
    out[IDX_TYPE] = (uint8_t)e->type;
    out[IDX_PAD] = 0;
    be16_write(out + IDX_RESERVED, 0);
    be32_write(out + IDX_RECORD_LEN, e->record_len);
    be64_write(out + IDX_RECORD_OFF, e->record_off);
    be32_write(out + IDX_SUB_OFF, e->sub_off);
    be32_write(out + IDX_RAW_SIZE, e->raw_size);
    memcpy(out + IDX_ID, e->id, PROTO_HASH_LEN);
}

/*
 * Decodes one entry and checks that it points at a plausible record in the
 * record area [PACK_HEADER_SIZE, index_off): whole records only, no record
 * longer than a payload can be, and a chunk range that fits the u32 raw
 * offsets. Manifest and journal records are not split, so their sub_off is 0.
 */
static int index_entry_decode(const uint8_t *p, uint64_t index_off, struct pack_index_entry *e)
{
    if (!idx_type_valid(p[IDX_TYPE]) || p[IDX_PAD] != 0 || be16_read(p + IDX_RESERVED) != 0)
        return PACK_E_CORRUPT;
    e->type = (enum pack_idx_type)p[IDX_TYPE];
    e->record_len = be32_read(p + IDX_RECORD_LEN);
    e->record_off = be64_read(p + IDX_RECORD_OFF);
    e->sub_off = be32_read(p + IDX_SUB_OFF);
    e->raw_size = be32_read(p + IDX_RAW_SIZE);
    memcpy(e->id, p + IDX_ID, PROTO_HASH_LEN);

    if (e->record_len < PACK_RECORD_HEADER || e->record_len - PACK_RECORD_HEADER > PACK_MAX_PAYLOAD)
        return PACK_E_CORRUPT;
    if (e->record_off < PACK_HEADER_SIZE || e->record_off > index_off ||
        index_off - e->record_off < e->record_len)
        return PACK_E_CORRUPT;
    if ((uint64_t)e->sub_off + e->raw_size > UINT32_MAX)
        return PACK_E_CORRUPT;
    if (e->type == PACK_IDX_CHUNK ? e->raw_size == 0 : e->sub_off != 0)
        return PACK_E_CORRUPT;
    return 0;
}

void pack_index_encode(uint8_t *out, const struct pack_index_entry *entries, size_t count,
                       uint64_t index_off, uint64_t seq)
{
    for (size_t i = 0; i < count; i++)
        index_entry_encode(out + i * PACK_INDEX_ENTRY, &entries[i]);
    pack_trailer_encode(out + count * PACK_INDEX_ENTRY, index_off, (uint32_t)count,
                        pack_crc32c(0, out, count * PACK_INDEX_ENTRY), seq);
}

void pack_trailer_encode(uint8_t out[PACK_TRAILER_SIZE], uint64_t index_off, uint32_t count,
                         uint32_t index_crc, uint64_t seq)
{
    be64_write(out + TRL_INDEX_OFF, index_off);
    be32_write(out + TRL_COUNT, count);
    be32_write(out + TRL_INDEX_CRC, index_crc);
    be64_write(out + TRL_SEQ, seq);
    memcpy(out + TRL_MAGIC, index_magic, sizeof(index_magic));
}

int pack_trailer_parse(const uint8_t tail[PACK_TRAILER_SIZE], uint64_t pack_size,
                       struct pack_trailer *t)
{
    uint64_t index_off = be64_read(tail + TRL_INDEX_OFF);
    uint32_t count = be32_read(tail + TRL_COUNT);

    if (memcmp(tail + TRL_MAGIC, index_magic, sizeof(index_magic)) != 0)
        return PACK_E_CORRUPT;
    /*
     * With pack_size capped at PACK_MAX_SIZE and index_off checked against it
     * first, count * 56 (under 2^38) and the sums below stay far from 2^64.
     */
    if (pack_size > PACK_MAX_SIZE || pack_size < PACK_HEADER_SIZE + PACK_TRAILER_SIZE)
        return PACK_E_CORRUPT;
    if (index_off < PACK_HEADER_SIZE || index_off > pack_size - PACK_TRAILER_SIZE)
        return PACK_E_CORRUPT;
    if (index_off + (uint64_t)count * PACK_INDEX_ENTRY + PACK_TRAILER_SIZE != pack_size)
        return PACK_E_CORRUPT;
    t->index_off = index_off;
    t->count = count;
    t->index_crc = be32_read(tail + TRL_INDEX_CRC);
    t->seq = be64_read(tail + TRL_SEQ);
    return 0;
}

/* Checks the size and checksum of the index bytes a trailer describes. */
static int index_check_bytes(const uint8_t *buf, size_t len, const struct pack_trailer *t)
{
    uint64_t want = (uint64_t)t->count * PACK_INDEX_ENTRY;

    if (len < want)
        return PACK_E_TRUNCATED;
    if (len > want || pack_crc32c(0, buf, len) != t->index_crc)
        return PACK_E_CORRUPT;
    return 0;
}

int pack_index_parse(const uint8_t *buf, size_t len, const struct pack_trailer *t,
                     struct pack_index_entry **entries)
{
    struct pack_index_entry *out;
    int r;

    r = index_check_bytes(buf, len, t);
    if (r != 0)
        return r;
    /*
     * One element even for an empty index, so success always hands back a
     * pointer to free; calloc checks the multiplication on 32-bit hosts.
     */
    out = calloc(t->count ? t->count : 1, sizeof(*out));
    if (!out)
        return -ENOMEM;
    for (uint32_t i = 0; i < t->count; i++) {
        r = index_entry_decode(buf + (size_t)i * PACK_INDEX_ENTRY, t->index_off, &out[i]);
        if (r != 0) {
            free(out);
            return r;
        }
    }
    *entries = out;
    return 0;
}

/* ---- scanning ---- */

/*
 * True when buf[off..len) is exactly a valid index and trailer for this
 * pack, with the trailer's sequence number matching the header's (the
 * trailer carries no checksum of its own, so this is what catches a damaged
 * seq). Entries are checked one at a time, so scanning never allocates.
 */
static bool sealed_at(const uint8_t *buf, size_t len, uint64_t off, uint64_t seq)
{
    struct pack_trailer t;
    struct pack_index_entry e;

    if (len - off < PACK_TRAILER_SIZE)
        return false;
    if (pack_trailer_parse(buf + len - PACK_TRAILER_SIZE, len, &t) != 0 || t.index_off != off ||
        t.seq != seq)
        return false;
    if (index_check_bytes(buf + off, len - off - PACK_TRAILER_SIZE, &t) != 0)
        return false;
    for (uint32_t i = 0; i < t.count; i++) {
        if (index_entry_decode(buf + off + (size_t)i * PACK_INDEX_ENTRY, t.index_off, &e) != 0)
            return false;
    }
    return true;
}

int pack_scan(const uint8_t *buf, size_t len, pack_scan_fn *fn, void *ctx, uint64_t *valid_end,
              bool *sealed)
{
    struct pack_record rec;
    uint64_t seq;
    size_t off = PACK_HEADER_SIZE;
    int r;

    *valid_end = 0;
    *sealed = false;
    r = pack_header_decode(buf, len, &seq);
    if (r != 0)
        return r;
    /*
     * The index is looked for before each record rather than after a failed
     * parse, because index bytes can happen to parse as a record.
     */
    while (off < len) {
        if (sealed_at(buf, len, off, seq)) {
            *sealed = true;
            break;
        }
        if (pack_record_parse(buf + off, len - off, &rec) != 0)
            break;
        if (fn) {
            r = fn(ctx, off, &rec);
            if (r != 0) {
                /* The refused record is not counted as accepted. */
                *valid_end = off;
                return r;
            }
        }
        off += PACK_RECORD_HEADER + (size_t)rec.length;
    }
    *valid_end = off;
    return 0;
}
