/*
 * Unit tests for the local backend's synchronous reads (read_sync on
 * worker threads, try_read on the loop thread) and the descriptor cache
 * they share with gets: what is cached, what is dropped, the bound and the
 * LRU order, and concurrent readers.
 */
#include "storage/test-storage.h"
#include "storage/local/local-fdcache.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- synchronous reads and the descriptor cache --------------------------------- */

/* Makes `key` cached by reading it once through a get. */
static void warm(struct test_env *e, const char *key)
{
    struct backend_get get;

    assert_int_equal(test_do_get(e, &get, key, 0, 1, 1), 0);
    backend_get_reset(&get);
}

static void test_local_try_read(void **state)
{
    struct test_env e;
    uint8_t data[3000], buf[4000];
    size_t got = 99;
    bool nowait;

    test_env_init(&e);
    test_env_open(&e);
    nowait = test_nowait_supported(e.dir);
    test_fill(data, sizeof(data), 3);
    assert_int_equal(test_do_put(&e, "chunks/tr01", data, sizeof(data), 0), 0);

    /* Not cached yet (a put does not cache): never opened on the loop thread. */
    assert_int_equal(backend_try_read(e.be, "chunks/tr01", 0, buf, 10, &got), -EAGAIN);
    assert_int_equal(got, 0);
    assert_int_equal(backend_try_read(e.be, "chunks/none", 0, buf, 10, &got), -EAGAIN);

    warm(&e, "chunks/tr01");
    /* Just written and just read: in the page cache, if the file system can say so. */
    int r = backend_try_read(e.be, "chunks/tr01", 100, buf, 200, &got);
    if (!nowait) {
        assert_int_equal(r, -EAGAIN);
    } else {
        assert_int_equal(r, 0);
        assert_int_equal(got, 200);
        assert_memory_equal(buf, data + 100, 200);
        /* Short only at the end; nothing past it. */
        assert_int_equal(backend_try_read(e.be, "chunks/tr01", 0, buf, sizeof(buf), &got), 0);
        assert_int_equal(got, sizeof(data));
        assert_memory_equal(buf, data, sizeof(data));
        assert_int_equal(backend_try_read(e.be, "chunks/tr01", 2990, buf, 100, &got), 0);
        assert_int_equal(got, 10);
        assert_int_equal(backend_try_read(e.be, "chunks/tr01", 5000, buf, 100, &got), 0);
        assert_int_equal(got, 0);
        assert_int_equal(backend_try_read(e.be, "chunks/tr01", 10, buf, 0, &got), 0);
        assert_int_equal(got, 0);
    }
    assert_int_equal(backend_try_read(e.be, "Bad/key", 0, buf, 10, &got), -EINVAL);
    /* Neither kind of read is an asynchronous request. */
    assert_int_equal(e.be->inflight, 0);
    test_env_finish(&e);
}

/* Appends reach readers that hold the file open already (the same inode). */
static void test_local_append_seen_by_cached_readers(void **state)
{
    struct test_env e;
    uint8_t buf[64];
    size_t got;

    test_env_init(&e);
    test_env_open(&e);
    assert_int_equal(test_do_append(&e, "packs/0007", 0, "first", 5), 0);
    warm(&e, "packs/0007");
    assert_int_equal(backend_read_sync(e.be, "packs/0007", 0, buf, sizeof(buf), &got), 0);
    assert_int_equal(got, 5);
    assert_int_equal(test_do_append(&e, "packs/0007", 5, "+second", 7), 0);
    assert_int_equal(backend_read_sync(e.be, "packs/0007", 0, buf, sizeof(buf), &got), 0);
    assert_int_equal(got, 12);
    assert_memory_equal(buf, "first+second", 12);
    if (test_nowait_supported(e.dir)) {
        assert_int_equal(backend_try_read(e.be, "packs/0007", 5, buf, sizeof(buf), &got), 0);
        assert_int_equal(got, 7);
        assert_memory_equal(buf, "+second", 7);
    }
    /* A cut tail is gone for them too. */
    assert_int_equal(test_do_append(&e, "packs/0007", 5, "+2", 2), 0);
    assert_int_equal(backend_read_sync(e.be, "packs/0007", 0, buf, sizeof(buf), &got), 0);
    assert_int_equal(got, 7);
    assert_memory_equal(buf, "first+2", 7);
    test_env_finish(&e);
}

static void test_local_fd_dropped(void **state)
{
    struct test_env e;
    struct backend_get get;
    uint8_t buf[64];
    size_t got;
    int fds;

    test_env_init(&e);
    test_env_open(&e);
    assert_int_equal(test_do_put(&e, "chunks/gone", "old bytes", 9, 0), 0);
    fds = test_count_fds();
    warm(&e, "chunks/gone");
    assert_int_equal(test_count_fds(), fds + 1);

    /* A delete closes the cached descriptor: no reader can find the old file. */
    assert_int_equal(test_do_del(&e, "chunks/gone"), 0);
    assert_int_equal(test_count_fds(), fds);
    assert_int_equal(backend_try_read(e.be, "chunks/gone", 0, buf, sizeof(buf), &got), -EAGAIN);
    assert_int_equal(backend_read_sync(e.be, "chunks/gone", 0, buf, sizeof(buf), &got),
                     BACKEND_E_NOT_FOUND);
    assert_int_equal(test_do_get(&e, &get, "chunks/gone", 0, BACKEND_TO_END, 100),
                     BACKEND_E_NOT_FOUND);

    /* So does a put over an object: reads see the new object, never the old one. */
    assert_int_equal(test_do_put(&e, "chunks/swap", "version one", 11, 0), 0);
    warm(&e, "chunks/swap");
    assert_int_equal(test_do_put(&e, "chunks/swap", "version two", 11, 0), 0);
    int r = backend_try_read(e.be, "chunks/swap", 0, buf, sizeof(buf), &got);
    assert_int_equal(r, -EAGAIN);
    assert_int_equal(backend_read_sync(e.be, "chunks/swap", 0, buf, sizeof(buf), &got), 0);
    assert_int_equal(got, 11);
    assert_memory_equal(buf, "version two", 11);
    test_env_finish(&e);
}

/* The cache keeps at most LOCAL_FDCACHE_SIZE descriptors and evicts the least recently used. */
static void test_local_fd_cache_bounded(void **state)
{
    enum { N = LOCAL_FDCACHE_SIZE + 6 };
    struct test_env e;
    char path[PATH_MAX + 64], key[BACKEND_MAX_KEY];
    uint8_t buf[16];
    size_t got;
    int fds;

    test_env_init(&e);
    test_env_open(&e);
    snprintf(path, sizeof(path), "%s/chunks", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    for (int i = 0; i < N; i++) {
        snprintf(path, sizeof(path), "%s/chunks/k%03d", e.root, i);
        test_write_file(path, "cached", 6);
    }
    fds = test_count_fds();
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "chunks/k%03d", i);
        warm(&e, key);
    }
    assert_int_equal(test_count_fds(), fds + LOCAL_FDCACHE_SIZE);
    /* The first ones read are the ones evicted. */
    for (int i = 0; i < N - LOCAL_FDCACHE_SIZE; i++) {
        snprintf(key, sizeof(key), "chunks/k%03d", i);
        assert_int_equal(backend_try_read(e.be, key, 0, buf, sizeof(buf), &got), -EAGAIN);
    }
    if (test_nowait_supported(e.dir)) {
        for (int i = N - LOCAL_FDCACHE_SIZE; i < N; i++) {
            snprintf(key, sizeof(key), "chunks/k%03d", i);
            assert_int_equal(backend_try_read(e.be, key, 0, buf, sizeof(buf), &got), 0);
            assert_int_equal(got, 6);
        }
    }
    /* A read through the cache refreshes an entry, so the next eviction takes another. */
    snprintf(key, sizeof(key), "chunks/k%03d", N - LOCAL_FDCACHE_SIZE);
    assert_int_equal(backend_read_sync(e.be, key, 0, buf, sizeof(buf), &got), 0);
    warm(&e, "chunks/k000");
    assert_int_equal(test_count_fds(), fds + LOCAL_FDCACHE_SIZE);
    assert_int_equal(backend_try_read(e.be, "chunks/k007", 0, buf, sizeof(buf), &got), -EAGAIN);
    if (test_nowait_supported(e.dir)) {
        assert_int_equal(backend_try_read(e.be, key, 0, buf, sizeof(buf), &got), 0);
        assert_int_equal(backend_try_read(e.be, "chunks/k000", 0, buf, sizeof(buf), &got), 0);
    }
    test_env_finish(&e);
}

/* Worker threads read through the shared cache while the loop thread reads too. */
enum { RS_OBJECTS = 100, RS_THREADS = 4, RS_SIZE = 700 };

struct rs_thread {
    struct backend *be;
    unsigned seed;
    int errors;
    atomic_int *running;
};

static uint8_t rs_data[RS_OBJECTS][RS_SIZE];

static void rs_thread_main(void *arg)
{
    struct rs_thread *t = arg;
    char key[BACKEND_MAX_KEY];
    uint8_t buf[RS_SIZE + 10];
    uint64_t x = t->seed * 2654435761u + 1;

    for (int round = 0; round < 3 * RS_OBJECTS; round++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int i = (int)(x % RS_OBJECTS);
        size_t offset = (size_t)((x >> 20) % RS_SIZE), got = 0;
        snprintf(key, sizeof(key), "chunks/rs%03d", i);
        int r = backend_read_sync(t->be, key, offset, buf, sizeof(buf), &got);
        if (r != 0 || got != RS_SIZE - offset || memcmp(buf, rs_data[i] + offset, got) != 0)
            t->errors++;
    }
    if (backend_read_sync(t->be, "chunks/missing", 0, buf, 1, &(size_t){0}) != BACKEND_E_NOT_FOUND)
        t->errors++;
    atomic_fetch_sub(t->running, 1);
}

static void test_local_read_sync_threads(void **state)
{
    struct test_env e;
    struct rs_thread threads[RS_THREADS];
    uv_thread_t tids[RS_THREADS];
    atomic_int running = RS_THREADS;
    char path[PATH_MAX + 64], key[BACKEND_MAX_KEY];
    uint8_t buf[RS_SIZE];
    int loop_reads = 0, loop_errors = 0;

    test_env_init(&e);
    test_env_open(&e);
    snprintf(path, sizeof(path), "%s/chunks", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    for (int i = 0; i < RS_OBJECTS; i++) {
        test_fill(rs_data[i], RS_SIZE, (uint64_t)i + 100);
        snprintf(path, sizeof(path), "%s/chunks/rs%03d", e.root, i);
        test_write_file(path, rs_data[i], RS_SIZE);
    }
    for (int i = 0; i < RS_THREADS; i++) {
        threads[i] = (struct rs_thread){.be = e.be, .seed = (unsigned)i + 1, .running = &running};
        assert_int_equal(uv_thread_create(&tids[i], rs_thread_main, &threads[i]), 0);
    }
    /* The loop thread's reads take and release references while the workers evict. */
    while (atomic_load(&running) > 0) {
        for (int i = 0; i < RS_OBJECTS; i++) {
            size_t got = 0;
            snprintf(key, sizeof(key), "chunks/rs%03d", i);
            int r = backend_try_read(e.be, key, 0, buf, sizeof(buf), &got);
            if (r == 0) {
                loop_reads++;
                if (got != RS_SIZE || memcmp(buf, rs_data[i], RS_SIZE) != 0)
                    loop_errors++;
            } else if (r != -EAGAIN) {
                loop_errors++;
            }
        }
    }
    for (int i = 0; i < RS_THREADS; i++) {
        assert_int_equal(uv_thread_join(&tids[i]), 0);
        assert_int_equal(threads[i].errors, 0);
    }
    assert_int_equal(loop_errors, 0);
    print_message("loop-thread reads served from the cache: %d\n", loop_reads);
    test_env_finish(&e);
}

int test_readers_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_try_read),
        cmocka_unit_test(test_local_append_seen_by_cached_readers),
        cmocka_unit_test(test_local_fd_dropped),
        cmocka_unit_test(test_local_fd_cache_bounded),
        cmocka_unit_test(test_local_read_sync_threads),
    };
    return cmocka_run_group_tests_name("local backend readers", tests, NULL, NULL);
}
