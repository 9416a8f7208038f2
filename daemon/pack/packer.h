#pragma once

/*
 * The pack writer: every record the store writes (blocks of chunks,
 * manifest segments, journal entries) goes through here, on the loop thread.
 *
 * Producers submit groups of finished records. Whatever is queued while the
 * previous append runs goes out together in the next batch: one append and
 * one data sync of the open pack for all of them (on a backend without
 * appends, the batch is a whole new pack and one put), then one database
 * transaction that records where every record went and runs each group's
 * own changes (an add's commit, a delete). A group's callback comes after
 * that transaction, so what it reports is durable on the backend and visible
 * in the database. The database only ever names records that are durable.
 *
 * The open pack is the log the database is recovered from: commits are not
 * synced by SQLite (the pack append is), and at start the store replays
 * whatever the database lacks from the packs (replay.c).
 *
 * Journal entries are events whose order matters (the newest name wins).
 * Their producer reserves a ticket before encoding the entry, taking its
 * time at that moment; groups with tickets are appended and applied in
 * ticket order, so the journal's order, its times and the database agree.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/format/objects.h"
#include "proto/proto.h"
#include "storage/pack/pack.h"

/*
 * A group's outcome besides 0, negative errno and what its apply returned:
 * the backend could not be reached (after its retries). Above every code an
 * apply returns (DB_E_*).
 */
enum {
    PACKER_E_UNAVAILABLE = 64,
};

struct backend;
struct db;
struct db_txn;
struct packer;
struct packer_group;

/* Blocks up to this many raw bytes may be merged with others of their batch (mergeable). */
#define PACKER_MERGE_SMALL (16u * 1024)

/* A record ready to append: header and payload, as pack.h encodes them. */
struct packer_rec {
    uint8_t *bytes; /* owned by the producer until the group's callback */
    size_t len;
    enum pack_rec_type type;
    uint8_t id[PROTO_HASH_LEN];
    /*
     * Its index entries, made by the producer on a worker thread: one per
     * chunk of a block, else one. The packer fills in record_off and
     * record_len. Owned by the producer.
     */
    struct pack_index_entry *idx;
    size_t nidx;
    /*
     * A small block of one document that may be compressed together with
     * others of the same batch (merge.h). When it was, `merged` is the
     * shared record that holds its chunks, `merged_shift` where they start
     * in its raw bytes, and this record itself is not written.
     */
    bool mergeable;
    struct packer_rec *merged;
    uint32_t merged_shift;
    /* Journal entries: what the database's journal table records. */
    uint8_t doc[PROTO_HASH_LEN];
    uint64_t time_ns;
    enum entry_op op;
    /* Set when appended. */
    uint64_t pack, offset;
};

struct packer_group {
    struct packer_rec *recs;
    size_t nrecs;
    /* 0, or the ticket of the event this group carries (packer_reserve). */
    uint64_t ticket;
    /*
     * When set, the group records its records' locations itself (a repack
     * moves existing rows instead of adding new ones).
     */
    bool own_locations;
    /* The batch's commit must be synced (a repack deletes the old pack after it). */
    bool durable;
    /*
     * Monotonic ms after which the group may no longer be written (its
     * dedup may rest on records that a gc of another writer deletes); it
     * then fails with PACKER_E_UNAVAILABLE. 0: no bound.
     */
    uint64_t not_after_ms;
    /* Runs in the batch's transaction on the writer thread; NULL for none. */
    int (*apply)(struct db_txn *txn, struct packer_group *g);
    /*
     * On the loop thread once durable and committed (0), or failed: negative
     * errno, PACKER_E_UNAVAILABLE, or what apply returned.
     */
    void (*done)(struct packer_group *g, int status);
    /*
     * Set before done: the records are durable in a pack, whatever the
     * status (a failure then is the database's).
     */
    bool written;
    /* Private to the packer. */
    int status_;
    struct packer_group *next_;
};

struct packer_config {
    uint64_t pack_size; /* seal a pack once it reaches this size */
    int compression_level;
};

/* Where the packer starts: the open pack left by the last run, if any (replay.c). */
struct packer_resume {
    uint64_t next_seq; /* first sequence number never used */
    bool has_open;
    uint64_t open_seq, open_size;
    struct pack_index_entry *index; /* the open pack's records so far (taken over) */
    size_t nindex;
};

struct packer_stats {
    uint64_t batches, appends, records, bytes, packs_sealed;
};

int packer_new(struct packer **out, uv_loop_t *loop, struct backend *be, struct db *db,
               const struct packer_config *cfg, struct packer_resume *resume);
/* Only when idle (packer_busy() false). */
struct packer *packer_free(struct packer *pk);
bool packer_busy(const struct packer *pk);

/* Reserves the next event ticket. */
uint64_t packer_reserve(struct packer *pk);
/* Gives a reserved ticket up without submitting it. */
void packer_cancel(struct packer *pk, uint64_t ticket);
/* Queues a group; its callback always comes, on a later loop turn. */
void packer_submit(struct packer *pk, struct packer_group *g);

/*
 * Seals the open pack now, so gc can rewrite it (a later record goes to a
 * new pack). Returns 1 when there is nothing to seal (cb is not called), else
 * 0 and cb comes once the seal is written.
 */
int packer_rotate(struct packer *pk, void (*cb)(void *ctx), void *ctx);

/* Sequence number of the pack being written now (0 before the first). */
uint64_t packer_open_seq(const struct packer *pk);
/*
 * Other writers share the bucket: another writer reads a pack only once it
 * is sealed, so the open pack is sealed now and from then on every batch is
 * a sealed pack of its own (put create-only), on a backend with appends too.
 */
void packer_set_shared(struct packer *pk);
void packer_get_stats(const struct packer *pk, struct packer_stats *out);
