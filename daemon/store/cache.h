#pragma once

/*
 * The decoded-record cache: chunks (and manifest segments) as they were
 * decoded from their packs, keyed by their id, least recently used out
 * first, bounded in bytes. A get whose chunks are here is served on the loop
 * thread without a worker job. An entry is a claim until it is checked:
 * a block is decoded and cached whole, and only the chunk wanted is hashed
 * then. Whoever hands an entry out first hashes it against its id and marks
 * it checked (cache_set_checked); an entry's bytes are never written after
 * insertion, so later readers rely on the mark instead of hashing again. A
 * damaged entry never reaches a client.
 *
 * The loop thread and worker threads both use it; a mutex guards the table
 * and is held only for table and list updates, never for copying or I/O.
 * Entries are reference-counted, so an entry being sent stays valid when it
 * is evicted meanwhile.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

struct cache;

struct cache_buf {
    uint8_t hash[PROTO_HASH_LEN];
    size_t len;
    const uint8_t *data;
};

struct cache_stats {
    uint64_t hits, misses, insertions, evictions;
    uint64_t bytes, entries, max_bytes;
};

/* max_bytes 0 disables the cache: lookups miss and inserts keep nothing. */
int cache_new(struct cache **out, size_t max_bytes);
struct cache *cache_free(struct cache *c);

/* A reference to the bytes stored under `hash`, or NULL (counted as a miss). */
const struct cache_buf *cache_lookup(struct cache *c, const uint8_t hash[PROTO_HASH_LEN]);
/* Like cache_lookup, but a miss is not counted (for read-ahead checks). */
const struct cache_buf *cache_peek(struct cache *c, const uint8_t hash[PROTO_HASH_LEN]);
/*
 * Stores a copy of data[0..len) under `hash` (replacing nothing: an entry
 * already there wins) and returns a reference to the entry, or NULL when out
 * of memory. With `keep` false the reference is dropped at once (and NULL
 * returned). With the cache disabled or too small for the bytes, `keep`
 * still gets a reference to a copy that is the caller's alone.
 */
const struct cache_buf *cache_insert(struct cache *c, const uint8_t hash[PROTO_HASH_LEN],
                                     const uint8_t *data, size_t len, bool keep);
/* Whether `buf`'s bytes were found to hash to its id; marking it so. Any thread. */
bool cache_is_checked(const struct cache_buf *buf);
void cache_set_checked(const struct cache_buf *buf);
/* Drops an entry (it failed its check). */
void cache_forget(struct cache *c, const uint8_t hash[PROTO_HASH_LEN]);
/* Gives a reference back. */
void cache_release(struct cache *c, const struct cache_buf *buf);
void cache_get_stats(struct cache *c, struct cache_stats *out);
