#pragma once

/*
 * The pack format. Small objects (compressed blocks of chunks, manifest
 * segments, journal entries) are stored as records appended to pack
 * objects, the way restic, kopia and git store them. A pack is
 * self-describing: every record carries its type, id, length and checksum,
 * so an unsealed pack can be read back record by record and a torn tail
 * (a crash in the middle of an append) is found by its checksum and cut off.
 * A sealed pack ends with an index of its records and a trailer, so one
 * ranged read of its end lists what it holds. Sealed packs never change.
 *
 * This module only encodes and decodes bytes, and names packs in a backend
 * (pack_key); it does no I/O. Every length read from a buffer is checked
 * against the buffer before use, so hostile input yields PACK_E_* and never
 * a crash.
 *
 * Layout (all integers big-endian):
 *
 *   pack    := header record* [index trailer]
 *   header  := magic "cRnPACK1" (8) | seq u64                          16 bytes
 *   record  := type u8 | flags u8 | reserved u16 (0) | length u32
 *              | crc u32 | id [32] | payload [length]
 *              (PACK_RECORD_HEADER = 44 bytes; crc is CRC-32C of the
 *              header's first 8 bytes, then the id, then the payload)
 *   index   := entry*                          PACK_INDEX_ENTRY = 56 bytes each
 *   entry   := type u8 | 0 u8 | 0 u16 | record_len u32 | record_off u64
 *              | sub_off u32 | raw_size u32 | id [32]
 *   trailer := index_off u64 | count u32 | index_crc u32 | seq u64
 *              | magic "cRnPIDX1"                                       32 bytes
 *              (index_crc is CRC-32C of the index bytes; index_off is
 *              where the index starts and must equal the end of the last
 *              record; the trailer ends the pack)
 *
 * Record types and their payloads:
 *
 *   PACK_REC_BLOCK     one or more chunks compressed together:
 *                      count u32 | count x (id [32] | size u32) | body
 *                      where body is one object in the envelope of
 *                      compress.h whose raw bytes are the chunks' bytes
 *                      concatenated in table order (so the raw size is the
 *                      sum of the sizes). The record id is the SHA-256 of
 *                      the table (count and entries), computed by the caller.
 *   PACK_REC_MANIFEST  a manifest segment (daemon/format/manifest.h), in the envelope.
 *   PACK_REC_ENTRY     a journal entry (daemon/format/objects.h), in the envelope.
 *
 * Flags: 0, or PACK_FLAG_SEALED for a record of an encrypted store, whose
 * id is a keyed id and whose payload is sealed (daemon/format/record.h
 * has that layout); this module only carries the bit.
 *
 * Index entry types: PACK_IDX_CHUNK (one per chunk of a block: record_off
 * and record_len locate the block record, sub_off and raw_size the chunk
 * within the block's raw bytes), PACK_IDX_MANIFEST and PACK_IDX_ENTRY (one
 * per record; sub_off 0, raw_size from the envelope header).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h" /* PROTO_HASH_LEN */
#include "storage/pack/crc32c.h"

/* Expected outcomes (positive). */
enum {
    PACK_E_TRUNCATED = 1, /* the buffer ends before the structure does */
    PACK_E_CORRUPT,       /* bad magic, checksum, type, length or layout */
};

enum pack_rec_type {
    PACK_REC_BLOCK = 1,
    PACK_REC_MANIFEST = 2,
    PACK_REC_ENTRY = 3,
};

enum pack_idx_type {
    PACK_IDX_CHUNK = 1,
    PACK_IDX_MANIFEST = 2,
    PACK_IDX_ENTRY = 3,
};

/* The record's id is keyed and its payload sealed (an encrypted store). */
#define PACK_FLAG_SEALED 0x01

#define PACK_HEADER_SIZE 16
#define PACK_RECORD_HEADER 44
#define PACK_INDEX_ENTRY 56
#define PACK_TRAILER_SIZE 32
/* Largest record payload accepted (a block of 1 MiB raw, compressed or not, plus its table). */
#define PACK_MAX_PAYLOAD (4u * 1024 * 1024)
/* Most chunks in one block (chunks are at least 64 bytes; blocks at most 1 MiB raw). */
#define PACK_MAX_BLOCK_CHUNKS 16384
#define PACK_BLOCK_ENTRY (PROTO_HASH_LEN + 4)
/* Largest pack the index format describes (offsets fit comfortably). */
#define PACK_MAX_SIZE (1ull << 40)

/* ---- a pack's key in the backend ---- */

/*
 * Several daemons may write to one bucket; each is a writer with an id of
 * its own (random, never 0), and numbers its packs 1, 2, 3... (its seqs, at
 * most PACK_SEQ_MAX). A pack's key is its writer's id and its seq, so no two
 * writers can ever make the same key: "packs/<writer>-<seq>", each sixteen
 * lower-case hex digits. Writer 0 is the one writer of a store made before
 * writers had ids: its packs are "packs/<seq>".
 */
#define PACK_KEY_PREFIX "packs/"
#define PACK_SEQ_MAX ((1ull << 48) - 1)
/* "packs/" and two sixteen-digit numbers with a dash, and the NUL. */
#define PACK_KEY_MAX 40

/* The key of writer's pack seq (cut to len - 1 bytes when len is too short). */
void pack_key(char *key, size_t len, uint64_t writer, uint64_t seq);
/*
 * The writer and seq of a pack's key: 0, or -EINVAL when it is no pack's
 * key (another shape, a seq of 0 or past PACK_SEQ_MAX, or a writer of 0
 * written out).
 */
int pack_key_parse(const char *key, uint64_t *writer, uint64_t *seq);

/* ---- pack header ---- */

void pack_header_encode(uint8_t out[PACK_HEADER_SIZE], uint64_t seq);
/* 0 with the pack's sequence number, PACK_E_TRUNCATED or PACK_E_CORRUPT. */
int pack_header_decode(const uint8_t *buf, size_t len, uint64_t *seq);

/* ---- records ---- */

struct pack_record {
    enum pack_rec_type type;
    uint8_t flags; /* 0 or PACK_FLAG_SEALED */
    uint8_t id[PROTO_HASH_LEN];
    const uint8_t *payload; /* points into the parsed buffer */
    uint32_t length;        /* payload bytes */
};

/*
 * Fills the 44-byte header of a record whose payload is the concatenation of
 * `parts` (so a caller can checksum a table and a body without joining them).
 */
struct pack_part {
    const void *data;
    size_t len;
};
void pack_record_header_encode(uint8_t out[PACK_RECORD_HEADER], enum pack_rec_type type,
                               const uint8_t id[PROTO_HASH_LEN], const struct pack_part *parts,
                               size_t nparts);

/* The same with the header's flags byte (0 or PACK_FLAG_SEALED). */
void pack_record_header_encode_flags(uint8_t out[PACK_RECORD_HEADER], enum pack_rec_type type,
                                     uint8_t flags, const uint8_t id[PROTO_HASH_LEN],
                                     const struct pack_part *parts, size_t nparts);

/*
 * Parses the record at the start of buf[0..len): 0 with *rec filled and the
 * checksum verified; PACK_E_TRUNCATED when buf holds less than the whole
 * record (a torn tail, or the caller must read more); PACK_E_CORRUPT for a
 * bad header or checksum.
 */
int pack_record_parse(const uint8_t *buf, size_t len, struct pack_record *rec);

/* Only the header (first 44 bytes): type, id and payload length, no checksum check. */
int pack_record_peek(const uint8_t *buf, size_t len, enum pack_rec_type *type,
                     uint8_t id[PROTO_HASH_LEN], uint32_t *length);

/*
 * Walks the records of an unsealed pack (or the record area of a sealed
 * one) in buf[0..len), which starts with the pack header. Calls `fn` for
 * each intact record with its offset in the pack; stops at the first record
 * that is torn or corrupt, at a trailer, or when `fn` returns non-zero (and
 * returns that value). On a normal stop returns 0 with *valid_end, the end
 * of the last intact record (where a torn tail is cut off), and *sealed
 * when a valid index and trailer follow the records exactly to the end of
 * the buffer. PACK_E_* when the header itself is bad.
 */
typedef int pack_scan_fn(void *ctx, uint64_t offset, const struct pack_record *rec);
int pack_scan(const uint8_t *buf, size_t len, pack_scan_fn *fn, void *ctx, uint64_t *valid_end,
              bool *sealed);

/* ---- block payloads ---- */

struct pack_block_chunk {
    uint8_t id[PROTO_HASH_LEN];
    uint32_t size;
    uint32_t sub_off; /* offset of the chunk within the block's raw bytes */
};

/* Bytes of the chunk table of a block of `count` chunks. */
static inline size_t pack_block_table_size(uint32_t count)
{
    return 4 + (size_t)count * PACK_BLOCK_ENTRY;
}

/* Writes the table (count and entries) of a block into out (pack_block_table_size bytes). */
void pack_block_table_encode(uint8_t *out, const struct pack_block_chunk *chunks, uint32_t count);

/*
 * Parses a block record's payload: 0 with the count, the chunk table
 * (malloc'd, with sub_off filled in) and where the body (the envelope)
 * starts; PACK_E_CORRUPT when the table does not fit the payload, count is 0
 * or over PACK_MAX_BLOCK_CHUNKS, or a size is 0; -ENOMEM.
 */
int pack_block_parse(const uint8_t *payload, size_t len, struct pack_block_chunk **chunks,
                     uint32_t *count, size_t *body_off);

/* ---- index and trailer ---- */

struct pack_index_entry {
    enum pack_idx_type type;
    uint32_t record_len; /* header included */
    uint64_t record_off;
    uint32_t sub_off;
    uint32_t raw_size;
    uint8_t id[PROTO_HASH_LEN];
};

/* Bytes of the index and trailer of `count` entries. */
static inline size_t pack_index_size(size_t count)
{
    return count * PACK_INDEX_ENTRY + PACK_TRAILER_SIZE;
}

/* Writes the index and trailer into out (pack_index_size(count) bytes); index_off is where they go.
 */
void pack_index_encode(uint8_t *out, const struct pack_index_entry *entries, size_t count,
                       uint64_t index_off, uint64_t seq);

/* Writes a trailer alone (an index whose bytes the caller made). */
void pack_trailer_encode(uint8_t out[PACK_TRAILER_SIZE], uint64_t index_off, uint32_t count,
                         uint32_t index_crc, uint64_t seq);

struct pack_trailer {
    uint64_t index_off;
    uint32_t count;
    uint32_t index_crc;
    uint64_t seq;
};

/*
 * Parses the trailer in the last 32 bytes of a pack of `pack_size` bytes:
 * 0, or PACK_E_CORRUPT when the magic is wrong or the index it describes
 * cannot fit between the header and the trailer.
 */
int pack_trailer_parse(const uint8_t tail[PACK_TRAILER_SIZE], uint64_t pack_size,
                       struct pack_trailer *t);

/*
 * Parses and checks an index (t->count entries, buf holding exactly the
 * index bytes, trailer excluded): 0 with a malloc'd array; PACK_E_CORRUPT
 * for a checksum mismatch, an unknown type, or an entry that does not lie
 * between the header and index_off; -ENOMEM.
 */
int pack_index_parse(const uint8_t *buf, size_t len, const struct pack_trailer *t,
                     struct pack_index_entry **entries);
