#pragma once

/*
 * Building the store's pack records and opening them again (pack.h has
 * the byte layout). Blocks hold chunks compressed together; manifest
 * segments and journal entries hold their raw bytes in the object envelope.
 * These run on worker threads: hashing and compression never happen on the
 * loop.
 *
 * Opening a record checks its checksum, its type and, for segments and
 * entries, that the raw bytes hash to the expected id. Chunks are checked by
 * whoever hands them out (store_check_chunk), after slicing them out of
 * their block.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "storage/pack/pack.h"

/* A block never holds more raw bytes than this. */
#define RECORD_BLOCK_MAX (1024u * 1024)

/* A chunk going into a block: its bytes and its id. */
struct record_piece {
    const uint8_t *data;
    size_t len;
    uint8_t hash[PROTO_HASH_LEN];
};

/*
 * Builds a block record of n chunks (n >= 1, at most RECORD_BLOCK_MAX raw
 * bytes in all): 0 with the record bytes, its id, and its index entries
 * (one per chunk), all malloc'd. -EINVAL or -ENOMEM.
 */
int record_block_build(const struct record_piece *p, size_t n, int level, uint8_t **rec,
                       size_t *rec_len, uint8_t id[PROTO_HASH_LEN], struct pack_index_entry **idx);

/*
 * Builds a segment or entry record around raw bytes: 0 with the record bytes
 * and its one index entry (malloc'd); its id is the SHA-256 of raw.
 */
int record_seal_build(enum pack_rec_type type, const uint8_t *raw, size_t raw_len, int level,
                      uint8_t **rec, size_t *rec_len, uint8_t id[PROTO_HASH_LEN],
                      struct pack_index_entry **idx);

/* Expected outcome: the bytes read are not the record they should be. */
#define RECORD_E_BAD 1

/*
 * Opens a block record read back: 0 with its chunk table and its raw bytes
 * (both malloc'd); RECORD_E_BAD for a bad checksum, type, table or body.
 */
int record_block_open(const uint8_t *bytes, size_t len, struct pack_block_chunk **chunks,
                      uint32_t *count, uint8_t **raw, size_t *raw_len);
/* The same, decoding into `buf` (RECORD_BLOCK_MAX bytes): *raw is buf then, not to be freed. */
int record_block_open_into(const uint8_t *bytes, size_t len, struct pack_block_chunk **chunks,
                           uint32_t *count, uint8_t *buf, uint8_t **raw, size_t *raw_len);

/*
 * Opens a segment or entry record read back: 0 with its raw bytes
 * (malloc'd), RECORD_E_BAD when it is not a record of that type whose raw
 * bytes (at most max_raw) hash to `id`.
 */
int record_seal_open(const uint8_t *bytes, size_t len, enum pack_rec_type type,
                     const uint8_t id[PROTO_HASH_LEN], size_t max_raw, uint8_t **raw,
                     size_t *raw_len);

/*
 * A chunk's share of its block record's stored bytes: the record's length
 * in proportion to the chunk's raw size among the block's `raw` bytes, and
 * at least 1, so that a live chunk always counts as live bytes.
 */
uint32_t record_share(uint64_t record_len, uint64_t size, uint64_t raw);
/* True when data[0..len) hashes to `id` (SHA-256). */
bool record_hash_ok(const uint8_t *data, size_t len, const uint8_t id[PROTO_HASH_LEN]);
