/*
 * Unit tests for the local-directory backend, through the front end, on a
 * real libuv loop in a temporary directory; main() also runs the tests of
 * its readers (test-readers.c). Every test ends with the backend freed, all
 * handles closed, uv_loop_close() == 0 and the temporary directory removed.
 */
#include "storage/test-storage.h"
#include "storage/local/local.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- opening ------------------------------------------------------------------- */

static void test_local_open(void **state)
{
    struct test_env e;
    char path[PATH_MAX + 32], desc[PATH_MAX + 32];

    test_env_init(&e);
    test_env_open(&e);
    assert_ptr_equal(e.be->ops, &backend_local_ops);
    assert_string_equal(e.be->ops->name, "local");
    assert_ptr_equal(e.be->loop, &e.loop);
    assert_int_equal(e.be->ops->caps, BACKEND_CAP_APPEND | BACKEND_CAP_READ_SYNC |
                                          BACKEND_CAP_READ_NOWAIT | BACKEND_CAP_FREE_SPACE);
    assert_true(backend_has(e.be, BACKEND_CAP_APPEND | BACKEND_CAP_READ_NOWAIT));
    /* The room of the root's file system, as statvfs tells it. */
    uint64_t room;
    struct statvfs sv;
    assert_int_equal(backend_free_space(e.be, &room), 0);
    assert_int_equal(statvfs(e.root, &sv), 0);
    assert_in_range(room, 1, (uint64_t)sv.f_blocks * sv.f_frsize);
    assert_int_equal(e.be->retry.attempts, BACKEND_DEFAULT_ATTEMPTS);
    assert_int_equal(e.be->retry.backoff_ms, BACKEND_DEFAULT_BACKOFF_MS);
    assert_int_equal(e.be->retry.backoff_max_ms, BACKEND_DEFAULT_BACKOFF_MAX_MS);
    assert_int_equal(e.be->retry.timeout_ms, 0);
    assert_int_equal(e.be->inflight, 0);
    assert_true(test_is_dir(e.root));
    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_true(test_is_dir(path));
    e.be->ops->describe(e.be, desc, sizeof(desc));
    assert_string_equal(desc, e.url);
    test_env_finish(&e);
}

static void test_local_file_url(void **state)
{
    struct test_env e;
    char path[PATH_MAX + 32], desc[PATH_MAX + 32];
    uint8_t *data;

    test_env_init(&e);
    /* A trailing slash names the same directory. */
    snprintf(e.url, sizeof(e.url), "file://%s/", e.root);
    test_env_open(&e);
    assert_ptr_equal(e.be->ops, &backend_local_ops);
    e.be->ops->describe(e.be, desc, sizeof(desc));
    snprintf(path, sizeof(path), "local:%s", e.root);
    assert_string_equal(desc, path);
    assert_int_equal(test_do_put(&e, "chunks/abcd", "hello", 5, 0), 0);
    /* Flat layout: ROOT/dir/name, no shard directories. */
    snprintf(path, sizeof(path), "%s/chunks/abcd", e.root);
    assert_int_equal(test_read_file(path, &data), 5);
    assert_memory_equal(data, "hello", 5);
    free(data);
    snprintf(path, sizeof(path), "%s/chunks", e.root);
    assert_int_equal(test_count_entries(path), 1);
    test_env_finish(&e);
}

static void test_local_open_errors(void **state)
{
    static const char *const unknown[] = {"s4://bucket/x", "",        "http://example.com/",
                                          "localx:/tmp/x", ":/tmp/x", "LOCAL:/tmp/x"};
    /* "local" alone is resolved by the daemon to a path before it gets here. */
    static const char *const bad_local[] = {"local",      "local:rel", "local:",  "local:./x",
                                            "file://rel", "file:/abs", "file:",   "file:/",
                                            "file://",    "local:~/x", "file:rel"};
    struct test_env e;
    struct backend *be = (struct backend *)&e; /* must stay untouched */
    const char *msg;
    char cwd[PATH_MAX], path[PATH_MAX + 32];
    static char long_url[BACKEND_MAX_URL + 16];

    test_env_init(&e);
    /* Relative paths would resolve here: make sure nothing gets created. */
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(e.dir), 0);

    for (size_t i = 0; i < ARRAY_SIZE(unknown); i++) {
        msg = NULL;
        assert_int_equal(backend_new(&be, &e.loop, unknown[i], &msg), -EINVAL);
        assert_non_null(msg);
        assert_true(strlen(msg) > 0);
        assert_ptr_equal(be, (struct backend *)&e);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad_local); i++) {
        msg = NULL;
        int r = backend_new(&be, &e.loop, bad_local[i], &msg);
        if (r != -EINVAL)
            fail_msg("%s: got %d, want -EINVAL", bad_local[i], r);
        assert_non_null(msg);
        assert_ptr_equal(be, (struct backend *)&e);
    }

    /* A URL longer than BACKEND_MAX_URL. */
    memset(long_url, 'a', sizeof(long_url) - 1);
    memcpy(long_url, "local:/", 7);
    msg = NULL;
    assert_int_equal(backend_new(&be, &e.loop, long_url, &msg), -EINVAL);
    assert_non_null(msg);

    /* A root that is a regular file. */
    snprintf(path, sizeof(path), "%s/plain", e.dir);
    test_write_file(path, "x", 1);
    snprintf(e.url, sizeof(e.url), "local:%s", path);
    msg = NULL;
    assert_true(backend_new(&be, &e.loop, e.url, &msg) < 0);
    assert_non_null(msg);
    assert_ptr_equal(be, (struct backend *)&e);

    /* Nothing but the file we made appeared in the working directory. */
    assert_int_equal(test_count_entries(e.dir), 1);
    assert_int_equal(chdir(cwd), 0);
    test_env_finish(&e);
}

static void test_local_tmp_emptied(void **state)
{
    struct test_env e;
    char path[PATH_MAX + 32];
    uint64_t size = 0;

    test_env_init(&e);
    snprintf(path, sizeof(path), "%s/data", e.dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(mkdir(e.root, 0755), 0);
    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/.tmp/1234.0", e.root);
    test_write_file(path, "half-written object", 19);
    snprintf(path, sizeof(path), "%s/.tmp/1234.1", e.root);
    test_write_file(path, "", 0);
    snprintf(path, sizeof(path), "%s/.tmp/.hidden", e.root);
    test_write_file(path, "another", 7);
    /* An acknowledged object must survive the cleanup. */
    snprintf(path, sizeof(path), "%s/chunks", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/chunks/abba", e.root);
    test_write_file(path, "kept", 4);

    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_int_equal(test_count_entries(path), 3);
    test_env_open(&e);
    assert_int_equal(test_count_entries(path), 0);
    assert_int_equal(test_do_head(&e, "chunks/abba", &size), 0);
    assert_int_equal(size, 4);
    test_env_finish(&e);
}

/* ---- puts and gets ------------------------------------------------------------- */

static void test_local_put_get_ranges(void **state)
{
    enum { LEN = 10000 };
    struct test_env e;
    struct backend_put put = {0};
    struct backend_get get;
    struct test_done done;
    static uint8_t data[LEN];
    struct iovec iov[4];
    char path[PATH_MAX + 32];
    uint8_t *file;

    test_env_init(&e);
    test_env_open(&e);
    test_fill(data, LEN, 1);
    /* Several pieces, one of them empty: the object is their concatenation. */
    iov[0] = (struct iovec){.iov_base = data, .iov_len = 1000};
    iov[1] = (struct iovec){.iov_base = NULL, .iov_len = 0};
    iov[2] = (struct iovec){.iov_base = data + 1000, .iov_len = 4000};
    iov[3] = (struct iovec){.iov_base = data + 5000, .iov_len = LEN - 5000};
    test_req_init(&put.req, &done, "packs/p1");
    put.iov = iov;
    put.iovcnt = 4;
    assert_int_equal(test_start_put(e.be, &put), 0);
    assert_int_equal(e.be->inflight, 1);
    test_wait(&e, &done);
    assert_int_equal(done.status, 0);
    assert_int_equal(e.be->inflight, 0);
    assert_int_equal(e.be->stats.puts, 1);
    assert_int_equal(e.be->stats.bytes_written, LEN);
    snprintf(path, sizeof(path), "%s/packs/p1", e.root);
    assert_int_equal(test_read_file(path, &file), LEN);
    assert_memory_equal(file, data, LEN);
    free(file);
    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_int_equal(test_count_entries(path), 0);

    /* The whole object. */
    assert_int_equal(test_do_get(&e, &get, "packs/p1", 0, BACKEND_TO_END, LEN), 0);
    assert_int_equal(get.out_len, LEN);
    assert_memory_equal(get.out, data, LEN);
    backend_get_reset(&get);
    assert_null(get.out);
    assert_int_equal(get.out_len, 0);

    /* Ranges: inside, to the end, running past the end, at and past the end, empty. */
    assert_int_equal(test_do_get(&e, &get, "packs/p1", 1234, 100, 100), 0);
    assert_int_equal(get.out_len, 100);
    assert_memory_equal(get.out, data + 1234, 100);
    backend_get_reset(&get);
    assert_int_equal(test_do_get(&e, &get, "packs/p1", 9000, BACKEND_TO_END, SIZE_MAX), 0);
    assert_int_equal(get.out_len, 1000);
    assert_memory_equal(get.out, data + 9000, 1000);
    backend_get_reset(&get);
    assert_int_equal(test_do_get(&e, &get, "packs/p1", 9990, 500, 500), 0);
    assert_int_equal(get.out_len, 10);
    assert_memory_equal(get.out, data + 9990, 10);
    backend_get_reset(&get);
    assert_int_equal(test_do_get(&e, &get, "packs/p1", LEN, 10, 10), 0);
    assert_int_equal(get.out_len, 0);
    backend_get_reset(&get);
    assert_int_equal(test_do_get(&e, &get, "packs/p1", UINT64_MAX - 1, 1, 1), 0);
    assert_int_equal(get.out_len, 0);
    backend_get_reset(&get);
    assert_int_equal(test_do_get(&e, &get, "packs/p1", 5, 0, 0), 0);
    assert_int_equal(get.out_len, 0);
    backend_get_reset(&get);

    /* Missing objects, in a directory that exists and in one that does not. */
    assert_int_equal(test_do_get(&e, &get, "packs/p2", 0, BACKEND_TO_END, SIZE_MAX),
                     BACKEND_E_NOT_FOUND);
    assert_int_equal(test_do_get(&e, &get, "nodir/p1", 0, BACKEND_TO_END, SIZE_MAX),
                     BACKEND_E_NOT_FOUND);
    assert_int_equal(e.be->stats.gets, 9);
    assert_int_equal(e.be->stats.bytes_read, LEN + 100 + 1000 + 10);
    /* Expected outcomes are not failures. */
    assert_int_equal(e.be->stats.failures, 0);
    test_env_finish(&e);
}

static void test_local_get_too_large(void **state)
{
    struct test_env e;
    struct backend_get get;
    uint8_t blob[1000];

    test_env_init(&e);
    test_env_open(&e);
    test_fill(blob, sizeof(blob), 2);
    assert_int_equal(test_do_put(&e, "chunks/big1", blob, sizeof(blob), 0), 0);
    assert_int_equal(test_do_put(&e, "chunks/empty", "", 0, 0), 0);

    assert_int_equal(test_do_get(&e, &get, "chunks/big1", 0, BACKEND_TO_END, sizeof(blob) - 1),
                     BACKEND_E_TOO_LARGE);
    assert_int_equal(test_do_get(&e, &get, "chunks/big1", 0, BACKEND_TO_END, 0),
                     BACKEND_E_TOO_LARGE);
    assert_int_equal(test_do_get(&e, &get, "chunks/big1", 100, 501, 500), BACKEND_E_TOO_LARGE);
    /* The limit applies to the range returned, not to the object. */
    assert_int_equal(test_do_get(&e, &get, "chunks/big1", 100, 500, 500), 0);
    assert_int_equal(get.out_len, 500);
    assert_memory_equal(get.out, blob + 100, 500);
    backend_get_reset(&get);
    assert_int_equal(test_do_get(&e, &get, "chunks/big1", 900, BACKEND_TO_END, 100), 0);
    assert_int_equal(get.out_len, 100);
    backend_get_reset(&get);
    /* A range that the end of the object cuts to within the limit. */
    assert_int_equal(test_do_get(&e, &get, "chunks/big1", 950, 1000, 50), 0);
    assert_int_equal(get.out_len, 50);
    backend_get_reset(&get);
    assert_int_equal(test_do_get(&e, &get, "chunks/big1", 0, BACKEND_TO_END, sizeof(blob)), 0);
    assert_int_equal(get.out_len, sizeof(blob));
    assert_memory_equal(get.out, blob, sizeof(blob));
    backend_get_reset(&get);
    /* The empty object fits max_len 0 and still comes back as a buffer. */
    assert_int_equal(test_do_get(&e, &get, "chunks/empty", 0, BACKEND_TO_END, 0), 0);
    assert_int_equal(get.out_len, 0);
    backend_get_reset(&get);
    assert_int_equal(e.be->stats.failures, 0);
    test_env_finish(&e);
}

static void test_local_put_replace_and_create(void **state)
{
    enum { N = 8 };
    struct test_env e;
    struct backend_get get;
    static struct backend_put puts[N];
    static struct test_done done[N];
    static char payload[N][16];
    static struct iovec iov[N];
    char path[PATH_MAX + 32];
    int won = -1, exists = 0;

    test_env_init(&e);
    test_env_open(&e);
    assert_int_equal(test_do_put(&e, "manifests/m1", "first version", 13, 0), 0);
    assert_int_equal(test_do_put(&e, "manifests/m1", "second", 6, 0), 0);
    assert_int_equal(test_do_get(&e, &get, "manifests/m1", 0, BACKEND_TO_END, 100), 0);
    assert_int_equal(get.out_len, 6);
    assert_memory_equal(get.out, "second", 6);
    backend_get_reset(&get);

    /* Create-only: refused over an existing object, which stays as it was. */
    assert_int_equal(test_do_put(&e, "manifests/m1", "third", 5, BACKEND_PUT_CREATE),
                     BACKEND_E_EXISTS);
    assert_int_equal(test_do_get(&e, &get, "manifests/m1", 0, BACKEND_TO_END, 100), 0);
    assert_int_equal(get.out_len, 6);
    assert_memory_equal(get.out, "second", 6);
    backend_get_reset(&get);
    assert_int_equal(test_do_put(&e, "manifests/m2", "new", 3, BACKEND_PUT_CREATE), 0);
    assert_int_equal(e.be->stats.failures, 0);

    /* Racing creates of one key: exactly one wins, and its bytes are the object. */
    for (int i = 0; i < N; i++) {
        snprintf(payload[i], sizeof(payload[i]), "writer %d", i);
        iov[i] = (struct iovec){.iov_base = payload[i], .iov_len = strlen(payload[i])};
        memset(&puts[i], 0, sizeof(puts[i]));
        test_req_init(&puts[i].req, &done[i], "manifests/race");
        puts[i].iov = &iov[i];
        puts[i].iovcnt = 1;
        puts[i].flags = BACKEND_PUT_CREATE;
        assert_int_equal(test_start_put(e.be, &puts[i]), 0);
    }
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(done[i].calls, 1);
        if (done[i].status == 0) {
            assert_int_equal(won, -1);
            won = i;
        } else {
            assert_int_equal(done[i].status, BACKEND_E_EXISTS);
            exists++;
        }
    }
    assert_true(won >= 0);
    assert_int_equal(exists, N - 1);
    assert_int_equal(test_do_get(&e, &get, "manifests/race", 0, BACKEND_TO_END, 100), 0);
    assert_int_equal(get.out_len, strlen(payload[won]));
    assert_memory_equal(get.out, payload[won], get.out_len);
    backend_get_reset(&get);
    /* The losers' temporary files are gone. */
    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_int_equal(test_count_entries(path), 0);
    test_env_finish(&e);
}

static void test_local_head_delete(void **state)
{
    struct test_env e;
    struct backend_get get;
    char path[PATH_MAX + 32];
    uint64_t size = 0;

    test_env_init(&e);
    test_env_open(&e);
    assert_int_equal(test_do_put(&e, "chunks/dead01", "doomed", 6, 0), 0);
    assert_int_equal(test_do_put(&e, "chunks/dead02", "stays", 5, 0), 0);
    assert_int_equal(test_do_put(&e, "chunks/empty", "", 0, 0), 0);
    assert_int_equal(test_do_head(&e, "chunks/dead01", &size), 0);
    assert_int_equal(size, 6);
    assert_int_equal(test_do_head(&e, "chunks/empty", &size), 0);
    assert_int_equal(size, 0);
    assert_int_equal(test_do_head(&e, "chunks/nothere", NULL), BACKEND_E_NOT_FOUND);
    assert_int_equal(test_do_head(&e, "nodir/nothere", NULL), BACKEND_E_NOT_FOUND);

    assert_int_equal(test_do_del(&e, "chunks/dead01"), 0);
    snprintf(path, sizeof(path), "%s/chunks/dead01", e.root);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(test_do_get(&e, &get, "chunks/dead01", 0, BACKEND_TO_END, 100),
                     BACKEND_E_NOT_FOUND);
    assert_int_equal(test_do_head(&e, "chunks/dead01", NULL), BACKEND_E_NOT_FOUND);
    assert_int_equal(test_do_del(&e, "chunks/dead01"), BACKEND_E_NOT_FOUND);
    assert_int_equal(test_do_del(&e, "nodir/dead01"), BACKEND_E_NOT_FOUND);

    /* The neighbour is untouched, and a deleted key can be written again. */
    assert_int_equal(test_do_get(&e, &get, "chunks/dead02", 0, BACKEND_TO_END, 100), 0);
    assert_memory_equal(get.out, "stays", 5);
    backend_get_reset(&get);
    assert_int_equal(test_do_put(&e, "chunks/dead01", "back", 4, BACKEND_PUT_CREATE), 0);
    assert_int_equal(test_do_head(&e, "chunks/dead01", &size), 0);
    assert_int_equal(size, 4);
    assert_int_equal(e.be->stats.deletes, 3);
    assert_int_equal(e.be->stats.heads, 6);
    assert_int_equal(e.be->stats.failures, 0);
    test_env_finish(&e);
}

/* ---- lists -------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_local_list_paging(void **state)
{
    /* Chosen so that byte order differs from a locale's and from length order. */
    static const char *const names[] = {"zz", "a-1", "a.1", "a0",  "a_1", "b", "ab", "a00",
                                        "9z", "a-",  "m1",  "m10", "m2",  "x", "y.z"};
    enum { N = ARRAY_SIZE(names) };
    struct test_env e;
    struct backend_list list;
    char key[BACKEND_MAX_KEY], path[PATH_MAX + 64], cursor[BACKEND_MAX_KEY] = "";
    const char *sorted[N];
    size_t seen = 0, pages = 0;

    test_env_init(&e);
    test_env_open(&e);

    /* Before anything is stored the directory does not even exist. */
    assert_int_equal(test_do_list(&e, &list, "packs/", "", 0), 0);
    assert_int_equal(list.nentries, 0);
    assert_null(list.entries);
    assert_string_equal(list.next_cursor, "");

    for (size_t i = 0; i < N; i++) {
        char data[32];
        /* Too short for a key: never stored (one is written below, behind our back). */
        if (strlen(names[i]) < 2) {
            sorted[i] = NULL;
            continue;
        }
        snprintf(key, sizeof(key), "packs/%s", names[i]);
        memset(data, 'd', sizeof(data));
        assert_int_equal(test_do_put(&e, key, data, i + 1, 0), 0);
        sorted[i] = names[i];
    }
    /* Files that are not objects: hidden, not a valid key, a directory, too short. */
    snprintf(path, sizeof(path), "%s/packs/.hidden", e.root);
    test_write_file(path, "h", 1);
    snprintf(path, sizeof(path), "%s/packs/UPPER", e.root);
    test_write_file(path, "u", 1);
    snprintf(path, sizeof(path), "%s/packs/b", e.root);
    test_write_file(path, "b", 1);
    snprintf(path, sizeof(path), "%s/packs/subdir", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    /* Keys of another directory. */
    assert_int_equal(test_do_put(&e, "other/a0", "o", 1, 0), 0);

    size_t nkeys = 0;
    for (size_t i = 0; i < N; i++) {
        if (sorted[i])
            sorted[nkeys++] = sorted[i];
    }
    qsort(sorted, nkeys, sizeof(sorted[0]), cmp_str);
    assert_string_equal(sorted[0], "9z");
    assert_string_equal(sorted[1], "a-");
    assert_string_equal(sorted[2], "a-1");
    assert_string_equal(sorted[3], "a.1");

    /* Pages of 4: sorted, each after the cursor, sizes as written, "" after the last. */
    for (;;) {
        assert_int_equal(test_do_list(&e, &list, "packs/", cursor, 4), 0);
        pages++;
        assert_true(list.nentries <= 4);
        for (size_t i = 0; i < list.nentries; i++, seen++) {
            assert_true(seen < nkeys);
            snprintf(key, sizeof(key), "packs/%s", sorted[seen]);
            assert_string_equal(list.entries[i].key, key);
            /* When it was written, by the file system's clock (written just now). */
            assert_true(llabs(list.entries[i].mtime - (int64_t)time(NULL)) < 600);
            for (size_t k = 0; k < N; k++) {
                if (strcmp(names[k], sorted[seen]) == 0)
                    assert_int_equal(list.entries[i].size, k + 1);
            }
        }
        if (!list.next_cursor[0]) {
            backend_list_reset(&list);
            break;
        }
        assert_int_equal(list.nentries, 4);
        assert_string_equal(list.next_cursor, list.entries[3].key);
        strcpy(cursor, list.next_cursor);
        backend_list_reset(&list);
        /* Reset keeps the cursor for the next page. */
        assert_string_equal(list.next_cursor, cursor);
    }
    assert_int_equal(seen, nkeys);
    assert_int_equal(pages, (nkeys + 3) / 4);

    /* A cursor that is not a key: everything after it in byte order. */
    assert_int_equal(test_do_list(&e, &list, "packs/", "packs/m", 100), 0);
    assert_int_equal(list.nentries, 5);
    assert_string_equal(list.entries[0].key, "packs/m1");
    assert_string_equal(list.entries[4].key, "packs/zz");
    assert_string_equal(list.next_cursor, "");
    backend_list_reset(&list);
    /* A cursor at the last key: an empty last page. */
    assert_int_equal(test_do_list(&e, &list, "packs/", "packs/zz", 100), 0);
    assert_int_equal(list.nentries, 0);
    assert_string_equal(list.next_cursor, "");
    backend_list_reset(&list);
    /* Exactly as many keys as fit: no further page. */
    assert_int_equal(test_do_list(&e, &list, "packs/", "", nkeys), 0);
    assert_int_equal(list.nentries, nkeys);
    assert_string_equal(list.next_cursor, "");
    backend_list_reset(&list);

    assert_int_equal(test_do_list(&e, &list, "other/", "", 0), 0);
    assert_int_equal(list.nentries, 1);
    assert_string_equal(list.entries[0].key, "other/a0");
    backend_list_reset(&list);
    assert_int_equal(e.be->stats.failures, 0);
    test_env_finish(&e);
}

/* More keys than a default page: written directly, since only the listing is tested. */
static void test_local_list_default_page(void **state)
{
    enum { N = BACKEND_LIST_PAGE + 5 };
    struct test_env e;
    struct backend_list list;
    char path[PATH_MAX + 64], key[BACKEND_MAX_KEY];

    test_env_init(&e);
    test_env_open(&e);
    snprintf(path, sizeof(path), "%s/chunks", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    /* Written in descending order, so that directory order is not already sorted. */
    for (int i = N - 1; i >= 0; i--) {
        snprintf(path, sizeof(path), "%s/chunks/c%05d", e.root, i);
        test_write_file(path, "0123456789", (size_t)(i % 11));
    }
    assert_int_equal(test_do_list(&e, &list, "chunks/", "", 0), 0);
    assert_int_equal(list.nentries, BACKEND_LIST_PAGE);
    for (int i = 0; i < BACKEND_LIST_PAGE; i++) {
        snprintf(key, sizeof(key), "chunks/c%05d", i);
        assert_string_equal(list.entries[i].key, key);
        assert_int_equal(list.entries[i].size, (uint64_t)(i % 11));
    }
    assert_string_equal(list.next_cursor, "chunks/c00999");
    strcpy(key, list.next_cursor);
    backend_list_reset(&list);
    assert_int_equal(test_do_list(&e, &list, "chunks/", key, 0), 0);
    assert_int_equal(list.nentries, 5);
    assert_string_equal(list.entries[0].key, "chunks/c01000");
    assert_string_equal(list.entries[4].key, "chunks/c01004");
    assert_string_equal(list.next_cursor, "");
    backend_list_reset(&list);
    test_env_finish(&e);
}

/* ---- appends -------------------------------------------------------------------- */

static void expect_object(struct test_env *e, const char *key, const void *data, size_t len)
{
    struct backend_get get;
    char path[PATH_MAX + 64];
    struct stat st;

    assert_int_equal(test_do_get(e, &get, key, 0, BACKEND_TO_END, SIZE_MAX), 0);
    assert_int_equal(get.out_len, len);
    if (len)
        assert_memory_equal(get.out, data, len);
    backend_get_reset(&get);
    snprintf(path, sizeof(path), "%s/%s", e->root, key);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, len);
}

static void test_local_append(void **state)
{
    struct test_env e;
    struct backend_append app = {0};
    struct test_done done;
    struct iovec iov[2];
    char path[PATH_MAX + 32];

    test_env_init(&e);
    test_env_open(&e);

    /* Offset 0 creates the object (and its directory), from several pieces. */
    iov[0] = (struct iovec){.iov_base = "head", .iov_len = 4};
    iov[1] = (struct iovec){.iov_base = "er-", .iov_len = 3};
    test_req_init(&app.req, &done, "packs/0001");
    app.iov = iov;
    app.iovcnt = 2;
    assert_int_equal(test_start_append(e.be, &app), 0);
    test_wait(&e, &done);
    assert_int_equal(done.status, 0);
    snprintf(path, sizeof(path), "%s/packs", e.root);
    assert_true(test_is_dir(path));
    expect_object(&e, "packs/0001", "header-", 7);

    /* Creating it again is refused and changes nothing. */
    assert_int_equal(test_do_append(&e, "packs/0001", 0, "XX", 2), BACKEND_E_EXISTS);
    expect_object(&e, "packs/0001", "header-", 7);
    /* Past the end would leave a hole: refused. */
    assert_int_equal(test_do_append(&e, "packs/0001", 8, "XX", 2), -EINVAL);
    expect_object(&e, "packs/0001", "header-", 7);
    /* At the end it extends. */
    assert_int_equal(test_do_append(&e, "packs/0001", 7, "record1", 7), 0);
    expect_object(&e, "packs/0001", "header-record1", 14);
    /* Before the end it overwrites and cuts off the (torn) tail. */
    assert_int_equal(test_do_append(&e, "packs/0001", 7, "rec", 3), 0);
    expect_object(&e, "packs/0001", "header-rec", 10);
    assert_int_equal(test_do_append(&e, "packs/0001", 10, "ord2", 4), 0);
    expect_object(&e, "packs/0001", "header-record2", 14);
    /* An empty append at an offset cuts the object there. */
    assert_int_equal(test_do_append(&e, "packs/0001", 6, NULL, 0), 0);
    expect_object(&e, "packs/0001", "header", 6);
    /* Extending needs an object. */
    assert_int_equal(test_do_append(&e, "packs/0002", 3, "abc", 3), BACKEND_E_NOT_FOUND);
    snprintf(path, sizeof(path), "%s/packs/0002", e.root);
    assert_int_equal(access(path, F_OK), -1);
    /* An empty object made by an append at 0. */
    assert_int_equal(test_do_append(&e, "packs/0003", 0, NULL, 0), 0);
    expect_object(&e, "packs/0003", "", 0);

    assert_int_equal(e.be->stats.appends, 9);
    assert_int_equal(e.be->stats.bytes_written, 7 + 7 + 3 + 4);
    /* -EINVAL is the caller's mistake but still a failed operation. */
    assert_int_equal(e.be->stats.failures, 1);
    test_env_finish(&e);
}

/* ---- reopening ------------------------------------------------------------------ */

static void test_local_reopen(void **state)
{
    struct test_env e;
    struct backend_get get;

    test_env_init(&e);
    test_env_open(&e);
    assert_int_equal(test_do_put(&e, "chunks/persist", "still here", 10, 0), 0);
    assert_int_equal(test_do_append(&e, "packs/0001", 0, "appended", 8), 0);
    e.be = backend_free(e.be);
    assert_null(e.be);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    test_env_open(&e);
    assert_int_equal(test_do_get(&e, &get, "chunks/persist", 0, BACKEND_TO_END, 10), 0);
    assert_int_equal(get.out_len, 10);
    assert_memory_equal(get.out, "still here", 10);
    backend_get_reset(&get);
    expect_object(&e, "packs/0001", "appended", 8);
    test_env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_open),
        cmocka_unit_test(test_local_file_url),
        cmocka_unit_test(test_local_open_errors),
        cmocka_unit_test(test_local_tmp_emptied),
        cmocka_unit_test(test_local_put_get_ranges),
        cmocka_unit_test(test_local_get_too_large),
        cmocka_unit_test(test_local_put_replace_and_create),
        cmocka_unit_test(test_local_head_delete),
        cmocka_unit_test(test_local_list_paging),
        cmocka_unit_test(test_local_list_default_page),
        cmocka_unit_test(test_local_append),
        cmocka_unit_test(test_local_reopen),
    };
    int failed = cmocka_run_group_tests_name("local backend", tests, NULL, NULL);

    return failed + test_readers_run();
}
