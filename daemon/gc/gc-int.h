#pragma once

/* What gc.c (the run's phases) and repack.c (rewriting and deleting packs) share. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/gc/gc.h"

struct gc_run;
struct gc_reap;

/* A gc run's number and the first operation that did not predate its condemnations. */
struct gc_barrier {
    uint64_t gen, barrier;
};

struct gc {
    uv_loop_t *loop;
    struct store *st;
    struct search *search;
    struct db *db;
    struct backend *be;
    struct packer *pk;
    struct readcache *rc;
    struct reserve *reserve;
    struct gc_config cfg;
    struct gc_run *run; /* the gc running now, or NULL */
    /* gc runs up to this one are safe: of earlier lives of the daemon, or their barriers passed. */
    uint64_t safe_gen;
    struct gc_barrier *barriers;
    size_t nbarriers;
    /* Repacked packs waiting for their readers to end before deletion. */
    struct gc_reap *reaping;
};

/*
 * Rewrites or deletes the packs that are mostly dead, counting rows
 * condemned by runs up to safe_gen as dead; adds to *res and calls cb once
 * every chosen pack is done.
 */
typedef void gc_repack_cb(void *ctx, int status);
void gc_repack(struct gc *gc, uint64_t safe_gen, struct gc_result *res, gc_repack_cb *cb,
               void *ctx);
/* Deletes repacked packs no running operation can read any more. */
void gc_reap(struct gc *gc);
