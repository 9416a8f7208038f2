#pragma once

/*
 * Helpers shared by the storage unit tests (local/test-local.c and
 * local/test-writes.c for the local backend, test-frontend.c for the front
 * end): a temporary directory and a loop per test, requests run to
 * completion with a check that their callback came exactly once and never
 * from inside the call that started them, and small file utilities.
 */

#include "storage/backend.h"
#include "proto/util.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

struct test_env {
    char dir[PATH_MAX - 64]; /* mkdtemp result, removed at the end */
    char root[PATH_MAX];     /* the local backend's root below dir */
    char url[PATH_MAX + 64];
    uv_loop_t loop;
    struct backend *be;
};

/* Creates the temporary directory and the loop; the root does not exist yet. */
void test_env_init(struct test_env *e);
/* backend_new(e->url), which must succeed. */
void test_env_open(struct test_env *e);
/* Frees the backend, closes every handle and the loop, removes the directory. */
void test_env_finish(struct test_env *e);

/* What a request's callback saw; the request's userdata points to one. */
struct test_done {
    int calls;
    int status;
    uint64_t at_ms; /* loop time of the callback */
};

/* True while a test is inside a backend_*() call: no callback may come then. */
extern bool test_in_call;

/* Clears the request and its bookkeeping and sets key, callback and userdata. */
void test_req_init(struct backend_req *req, struct test_done *done, const char *key);
/* Runs the loop until nothing is left and checks that the callback came once. */
void test_wait(struct test_env *e, struct test_done *done);

/* Start calls with test_in_call set around them. */
int test_start_put(struct backend *be, struct backend_put *put);
int test_start_get(struct backend *be, struct backend_get *get);
int test_start_head(struct backend *be, struct backend_head *head);
int test_start_del(struct backend *be, struct backend_del *del);
int test_start_list(struct backend *be, struct backend_list *list);
int test_start_append(struct backend *be, struct backend_append *app);

/* One request run to completion; each returns its status. */
int test_do_put(struct test_env *e, const char *key, const void *data, size_t len, unsigned flags);
/* The caller frees the result with backend_get_reset(). */
int test_do_get(struct test_env *e, struct backend_get *get, const char *key, uint64_t offset,
                uint64_t length, size_t max_len);
int test_do_head(struct test_env *e, const char *key, uint64_t *size);
int test_do_del(struct test_env *e, const char *key);
/* The caller frees the result with backend_list_reset(). */
int test_do_list(struct test_env *e, struct backend_list *list, const char *prefix,
                 const char *cursor, size_t max_keys);
int test_do_append(struct test_env *e, const char *key, uint64_t offset, const void *data,
                   size_t len);

/* A whole file (malloc'd); its length, or -1 when it does not exist. */
ssize_t test_read_file(const char *path, uint8_t **data);
void test_write_file(const char *path, const void *data, size_t len);
/* Entries other than "." and "..", or -1 when the directory does not exist. */
int test_count_entries(const char *path);
bool test_is_dir(const char *path);
/* Open descriptors of this process. */
int test_count_fds(void);
/* Whether the file system of `dir` serves preadv2(RWF_NOWAIT) reads. */
bool test_nowait_supported(const char *dir);

/* Deterministic test data. */
void test_fill(uint8_t *buf, size_t len, uint64_t seed);

/* The groups that main() of the local backend's tests (local/test-local.c)
 * and of the front end's (test-frontend.c) run besides their own; each
 * returns its number of failures. */
int test_readers_run(void);
int test_retry_run(void);
