#pragma once

/*
 * Helpers shared by the pack writer's unit tests (test-packer.c: batching,
 * locations and tickets; test-packer-seal.c: sealing, rotation and failed
 * appends): a real local backend and a real database in a temporary
 * directory on a real libuv loop, records built the way the store builds
 * them, and groups whose callbacks record what they saw.
 */

#include "daemon/pack/packer.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>
#include <uv.h>

struct test_env {
    char dir[PATH_MAX / 2];
    char root[PATH_MAX / 2 + 16];
    char url[PATH_MAX];
    char dbpath[PATH_MAX];
    uv_loop_t loop;
    struct backend *be;
    struct db *db;
    struct packer *pk;
    int seq; /* group completions so far */
};

/* A temporary directory with the backend's root and the database, and a packer on them. */
void test_env_init(struct test_env *e, uint64_t pack_size);
/* The same on a backend of the test's own (opened with the local URL). */
struct backend_ops;
void test_env_init_ops(struct test_env *e, uint64_t pack_size, const struct backend_ops *ops);
/* Frees everything (the packer must be idle), closes the loop, removes the directory. */
void test_env_finish(struct test_env *e);
/* Runs the loop until nothing is left to do. */
void test_run(struct test_env *e);
void test_pack_path(const struct test_env *e, uint64_t seq, char *out, size_t len);
/* A pack file's bytes (malloc'd); its size in *len, or -1 (and NULL) when it does not exist. */
uint8_t *test_read_pack(const struct test_env *e, uint64_t seq, ssize_t *len);

/* A group of up to four records, and what its callback saw. */
struct test_group {
    struct packer_group g;
    struct packer_rec recs[4];
    struct test_env *env;
    int done_calls, status, order;
    /* Whether every record's row was in the database when the callback came. */
    bool located_at_done;
    /* Its change in the batch's transaction (writer thread): the result, and whether it ran. */
    int apply_result;
    bool applied;
    void (*on_done)(struct test_group *g);
    void *ctx;
};

/* Records: a block of n random chunks of `size` bytes, a manifest segment, a journal entry. */
void test_rec_block(struct packer_rec *rec, uint64_t seed, size_t n, size_t size);
void test_rec_segment(struct packer_rec *rec, uint8_t seed);
void test_rec_entry(struct packer_rec *rec, uint8_t doc, uint64_t time_ns, bool is_delete);
void test_group_init(struct test_group *t, struct test_env *e, size_t nrecs, uint64_t ticket);
void test_group_free(struct test_group *t);
/* Each record of the group at its place in the pack file: the same bytes. */
void test_expect_in_file(const uint8_t *file, ssize_t len, const struct test_group *t,
                         uint64_t seq);

/* Runs `fn` on the loop once the packer has started the batch of this turn. */
struct test_after_kick {
    uv_idle_t idle;
    void (*fn)(struct test_after_kick *a);
    struct test_env *env;
    bool appending; /* an append was running when fn ran */
    void *ctx;
};
/* Call before packer_submit: libuv runs the idle handle started last (the packer's) first. */
void test_after_kick_start(struct test_after_kick *a, struct test_env *e,
                           void (*fn)(struct test_after_kick *));

/* The group of test-packer-seal.c; returns its number of failures. */
int test_packer_seal_run(void);
/* The group of test-packer-puts.c (a backend without appends). */
int test_packer_puts_run(void);
