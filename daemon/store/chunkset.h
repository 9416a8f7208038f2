#pragma once

/*
 * A set of chunk ids (SHA-256), bounded in entries: what one verify with refs
 * has checked already, so that a chunk several of its documents share, or
 * one document holds in several places, is read and counted once. Open
 * addressing with linear probing, grown by doubling up to the bound. Owned by
 * one thread at a time.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* chunkset_add: the set holds its bound already and the id is not in it. */
enum { CHUNKSET_E_FULL = 1 };

struct chunkset {
    uint8_t (*ids)[PROTO_HASH_LEN];
    bool *used;
    size_t slots; /* a power of two, or 0 before the first add */
    size_t count;
    size_t max_count;
};

/* An empty set that holds at most max_count ids; allocates nothing yet. */
void chunkset_init(struct chunkset *s, size_t max_count);
void chunkset_deinit(struct chunkset *s);

/*
 * Adds `id`: true in *added when it was not in the set. CHUNKSET_E_FULL
 * (nothing added) when it is new and the set is full, -ENOMEM when growing
 * failed; 0 otherwise.
 */
int chunkset_add(struct chunkset *s, const uint8_t id[PROTO_HASH_LEN], bool *added);
