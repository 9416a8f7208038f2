#pragma once

/*
 * What the store's files (store.c: the store and reads; add.c: the add
 * pipeline; gc.c: garbage collection; verify.c: scrubbing) share. Not for use
 * outside the store.
 */

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "compress/cdc.h"
#include "daemon/store.h"

/* A multiset of chunk ids that running adds rely on; gc leaves them alone. */
struct pinset {
    struct pin *slots;
    size_t cap, used;
};

struct store {
    uv_loop_t *loop;
    struct backend *be;
    struct db *db;
    struct store_config cfg;
    struct cdc cdc;
    unsigned active;
    struct pinset pins;
    /*
     * Encode jobs per generation: gc waits for the jobs of the previous
     * generation, whose "chunk is already stored" answers predate its
     * deletions, before it deletes objects.
     */
    uint64_t encode_gen;
    unsigned encodes_running[2];
    struct store_gc *gc;
    /* Chunks whose objects gc is deleting: puts of them wait (see add.c). */
    struct pinset deleting;
    struct store_waiter *deleting_waiters;
    uint64_t last_entry_ns;
};

/*
 * Pins a chunk a running add relies on. While a gc runs, it also remembers
 * the chunk: an add may pin, commit and unpin before gc reaches the chunk,
 * and its object must survive that gc all the same.
 */
int store_pin(struct store *st, const uint8_t hash[PROTO_HASH_LEN]);
/* gc.c: whether the running gc must leave this chunk's object alone. */
bool store_gc_touched(const struct store *st, const uint8_t hash[PROTO_HASH_LEN]);
int store_gc_touch(struct store *st, const uint8_t hash[PROTO_HASH_LEN]);

/* A journal time (ns since the epoch) later than every one handed out before. */
uint64_t store_entry_time(struct store *st);

/* gc (gc.c): an encode job ended; gc may be waiting for the older ones to drain. */
void store_gc_poke(struct store *st);

/* Object keys: "chunks/<hex>" and "entries/<hex>". */
void store_object_key(char *key, size_t len, const char *dir, const uint8_t hash[PROTO_HASH_LEN]);

/*
 * Decodes a chunk object and checks it against the chunk's id and size: 0
 * with its c->size raw bytes in *raw (malloc'd), STORE_E_INTEGRITY when it
 * does not decode to exactly those bytes, or -ENOMEM. The one place where
 * what the store hands out is checked.
 */
int store_decode_chunk(const uint8_t *obj, size_t len, const struct db_chunk *c, uint8_t **raw);

/* Maps a backend read status to the store's codes. */
int store_map_read_status(int status);

int pinset_add(struct pinset *s, const uint8_t hash[PROTO_HASH_LEN]);
void pinset_remove(struct pinset *s, const uint8_t hash[PROTO_HASH_LEN]);
bool pinset_has(const struct pinset *s, const uint8_t hash[PROTO_HASH_LEN]);
void pinset_free(struct pinset *s);

/* A put that waits for gc to finish deleting the same object. */
struct store_waiter {
    uint8_t hash[PROTO_HASH_LEN];
    void (*resume)(struct store_waiter *w);
    struct store_waiter *next;
};
/* Queues `w` when its chunk is being deleted (returns true), else returns false. */
bool store_wait_deletion(struct store *st, struct store_waiter *w);
/* gc: the object of `hash` is gone; resumes the puts waiting for it. */
void store_deletion_done(struct store *st, const uint8_t hash[PROTO_HASH_LEN]);
