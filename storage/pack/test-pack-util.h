#pragma once

/*
 * Helpers shared by the unit tests of the pack format: test-pack.c with
 * test-pack-index.c (one program), test-pack-fuzz.c and test-crc32c.c. A
 * random generator that each test seeds, so that every run sees the same
 * data; the format's big-endian fields; exact-size copies, so that a read
 * past the end is caught by the sanitizers; and packs built in memory with
 * what each record and index entry should read back as.
 */

#include "storage/pack/pack.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The generator's state: a test sets it before it draws. */
extern uint64_t test_rng_state;
uint64_t test_rng_next(void);
/* A uniform value in [0, n); n > 0. */
size_t test_rng_below(size_t n);
void test_rng_fill(uint8_t *p, size_t len);

/* A copy of p[0..len) in a block of exactly len bytes (one byte for len 0). */
uint8_t *test_dup_exact(const uint8_t *p, size_t len);

uint32_t test_get32(const uint8_t *p);
uint64_t test_get64(const uint8_t *p);
void test_put32(uint8_t *p, uint32_t v);
void test_put64(uint8_t *p, uint64_t v);

#define TPACK_MAX_RECS 16
#define TPACK_MAX_ENTRIES (TPACK_MAX_RECS * 8)

/* A pack built in memory, with what each record and index entry should read back as. */
struct tpack {
    uint8_t *buf;
    size_t len;
    uint64_t seq;
    size_t nrec;
    uint64_t rec_off[TPACK_MAX_RECS];
    enum pack_rec_type rec_type[TPACK_MAX_RECS];
    uint32_t rec_length[TPACK_MAX_RECS];
    uint8_t rec_id[TPACK_MAX_RECS][PROTO_HASH_LEN];
    size_t nent;
    struct pack_index_entry ent[TPACK_MAX_ENTRIES];
    uint64_t index_off; /* 0 while unsealed */
};

/* A pack of n records of every type and assorted sizes, empty payloads included. */
void tpack_make(struct tpack *tp, size_t n, bool sealed);
void tpack_free(struct tpack *tp);

/* The group of test-pack-index.c; returns its number of failures. */
int test_pack_index_run(void);
