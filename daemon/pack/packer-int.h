#pragma once

/* The pack writer's state, shared by packer.c (batches) and packer-seal.c (sealing, rotation). */

#include "daemon/pack/packer.h"

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

struct packer_batch;

struct packer {
    uv_loop_t *loop;
    struct backend *be;
    struct db *db;
    struct packer_config cfg;
    /* Groups ready to go, in order. */
    struct packer_group *ready_head, *ready_tail;
    /* Event groups waiting for an earlier ticket, sorted by ticket. */
    struct packer_group *held;
    uint64_t next_ticket, release_ticket;
    uint64_t *cancelled; /* tickets given up before their turn */
    size_t ncancelled, cancelled_cap;
    /* The open pack. */
    uint64_t seq, size; /* size 0: not created yet */
    struct pack_index_entry *index;
    size_t nindex, index_cap;
    bool index_lost; /* some records are missing from `index`: do not seal with it */
    uint64_t next_seq;
    /*
     * Batches being merged or written, oldest first. With appends there is
     * one at a time (each continues the open pack); without, each batch is
     * a pack of its own and up to max_inflight are written at once, but
     * they still end (are committed, or fail) in the order they started.
     */
    struct packer_batch *inflight_head, *inflight_tail;
    unsigned inflight, max_inflight;
    size_t inflight_bytes; /* records of the batches in flight */
    unsigned txns, seals;
    uv_idle_t kick;
    bool kick_active;
    /* Every batch a pack of its own, whatever the backend (packer_set_shared). */
    bool whole_packs;
    /* packer_rotate waiting for the running append. */
    void (*rotate_cb)(void *ctx);
    void *rotate_ctx;
    struct packer_stats stats;
};

/* The key of one of the writer's packs (packer-seal.c). */
void packer_key(struct packer *pk, uint64_t pack, char *key, size_t len);
/* A failed backend call, for the log (packer-seal.c). */
const char *packer_status_str(int status);
/*
 * Ends the open pack with its index (cb, if any, once the seal is in); new
 * records go to a new pack meanwhile (packer-seal.c).
 */
void packer_seal_start(struct packer *pk, void (*cb)(void *), void *ctx);
