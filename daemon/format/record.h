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
 *
 * In an encrypted store (seal_on(), daemon/crypto/seal.h) every record is
 * sealed, transparently to the callers of the functions below:
 *
 *   header  := type | flags PACK_FLAG_SEALED | 0 | length | crc
 *              | keyed id [32]    (HMAC-SHA-256 of type || id, seal_keyed_id)
 *   payload := nonce [12] | AES-256-GCM(id [32] | plain payload) | tag [16]
 *              associated data: the header's first 8 bytes and the keyed id
 *
 * so the bucket sees neither the SHA-256 ids nor the block tables (the
 * chunk ids); a record altered, cut, or given another type, length or id
 * fails its tag, and one whose sealed id does not give its keyed id is
 * refused: all RECORD_E_BAD, which callers report as `integrity`. Pack and
 * offset are not bound, so repack copies a sealed record as it is; a record
 * moved or copied to where another was expected is refused by the id (the
 * database's, or the chunk's SHA-256) it is opened against. A plain record
 * in an encrypted store, or a sealed one in a plain store, is refused too.
 * A pack's index is sealed the same way (record_index_encode).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "storage/pack/pack.h"

/* What sealing adds to a record's payload: the real id, nonce and tag. */
#define RECORD_SEAL_EXTRA (PROTO_HASH_LEN + 28)

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
 * The plain view of the record at the start of bytes[0..len): 0 with *rec
 * (type, real id, and the payload as pack.h describes it) and *buf to free
 * (NULL in a plain store, where rec->payload points into bytes); or
 * RECORD_E_BAD (see above), or -ENOMEM.
 */
int record_plain(const uint8_t *bytes, size_t len, struct pack_record *rec, uint8_t **buf);

/*
 * The index and trailer of a pack, sealed in an encrypted store:
 *
 *   index   := nonce [12] | AES-256-GCM(the plain index entries) | tag [16]
 *              | zeros up to the next multiple of PACK_INDEX_ENTRY
 *   trailer := as pack.h, count being the plain entries' count + 1 and
 *              index_crc the CRC-32C of the sealed bytes
 *              associated data: "cairn index 1" | index_off u64 | seq u64
 *              | count u32
 *
 * record_index_size is the bytes of both for `count` entries;
 * record_index_encode writes them (0, -ENOMEM, -EIO); record_index_open
 * opens the index bytes (exactly t->count entries' worth) that trailer t
 * describes: 0 with the entries and t->count set to their number, or
 * RECORD_E_BAD.
 */
size_t record_index_size(size_t count);
int record_index_encode(uint8_t *out, const struct pack_index_entry *entries, size_t count,
                        uint64_t index_off, uint64_t seq);
int record_index_open(const uint8_t *buf, size_t len, struct pack_trailer *t,
                      struct pack_index_entry **entries);

/*
 * A chunk's share of its block record's stored bytes: the record's length
 * in proportion to the chunk's raw size among the block's `raw` bytes, and
 * at least 1, so that a live chunk always counts as live bytes.
 */
uint32_t record_share(uint64_t record_len, uint64_t size, uint64_t raw);
/* True when data[0..len) hashes to `id` (SHA-256). */
bool record_hash_ok(const uint8_t *data, size_t len, const uint8_t id[PROTO_HASH_LEN]);
