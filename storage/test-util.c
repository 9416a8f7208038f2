/*
 * Helpers shared by the storage unit tests; see test-storage.h.
 */
#include "storage/test-storage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

bool test_in_call;

void test_env_init(struct test_env *e)
{
    const char *tmp = getenv("TMPDIR");

    memset(e, 0, sizeof(*e));
    if (!tmp || !*tmp)
        tmp = "/tmp";
    assert_true(snprintf(e->dir, sizeof(e->dir), "%s/cairn-test-storage-XXXXXX", tmp) <
                (int)sizeof(e->dir));
    assert_non_null(mkdtemp(e->dir));
    /* Two levels that do not exist yet: the backend creates the whole path. */
    snprintf(e->root, sizeof(e->root), "%s/data/root", e->dir);
    snprintf(e->url, sizeof(e->url), "local:%s", e->root);
    assert_int_equal(uv_loop_init(&e->loop), 0);
}

void test_env_open(struct test_env *e)
{
    const char *msg = "sentinel";

    assert_int_equal(backend_new(&e->be, &e->loop, e->url, &msg), 0);
    assert_null(msg);
    assert_non_null(e->be);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

void test_env_finish(struct test_env *e)
{
    if (e->be) {
        assert_int_equal(e->be->inflight, 0);
        e->be = backend_free(e->be);
    }
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    assert_int_equal(nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

static void done_cb(struct backend_req *req)
{
    struct test_done *done = req->userdata;

    /* Checked by test_wait() and the tests, which can fail there without unwinding a loop. */
    if (test_in_call)
        done->calls += 1000;
    done->calls++;
    done->status = req->status;
    done->at_ms = uv_now(req->be->loop);
}

void test_req_init(struct backend_req *req, struct test_done *done, const char *key)
{
    memset(done, 0, sizeof(*done));
    done->status = INT32_MIN;
    assert_true(strlen(key) < sizeof(req->key));
    strcpy(req->key, key);
    req->cb = done_cb;
    req->userdata = done;
}

void test_wait(struct test_env *e, struct test_done *done)
{
    assert_int_equal(done->calls, 0);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(done->calls, 1);
}

#define DEFINE_START(kind, type)                                                                   \
    int test_start_##kind(struct backend *be, struct type *r)                                      \
    {                                                                                              \
        int status;                                                                                \
        test_in_call = true;                                                                       \
        status = backend_##kind(be, r);                                                            \
        test_in_call = false;                                                                      \
        return status;                                                                             \
    }

DEFINE_START(put, backend_put)
DEFINE_START(get, backend_get)
DEFINE_START(head, backend_head)
DEFINE_START(del, backend_del)
DEFINE_START(list, backend_list)
DEFINE_START(append, backend_append)

int test_do_put(struct test_env *e, const char *key, const void *data, size_t len, unsigned flags)
{
    struct backend_put put = {0};
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    struct test_done done;

    test_req_init(&put.req, &done, key);
    put.iov = &iov;
    put.iovcnt = 1;
    put.flags = flags;
    assert_int_equal(test_start_put(e->be, &put), 0);
    test_wait(e, &done);
    return done.status;
}

int test_do_get(struct test_env *e, struct backend_get *get, const char *key, uint64_t offset,
                uint64_t length, size_t max_len)
{
    struct test_done done;

    memset(get, 0, sizeof(*get));
    test_req_init(&get->req, &done, key);
    get->offset = offset;
    get->length = length;
    get->max_len = max_len;
    assert_int_equal(test_start_get(e->be, get), 0);
    test_wait(e, &done);
    if (done.status != 0) {
        assert_null(get->out);
        assert_int_equal(get->out_len, 0);
    } else {
        assert_non_null(get->out);
    }
    return done.status;
}

int test_do_head(struct test_env *e, const char *key, uint64_t *size)
{
    struct backend_head head = {0};
    struct test_done done;

    test_req_init(&head.req, &done, key);
    head.size = UINT64_MAX;
    assert_int_equal(test_start_head(e->be, &head), 0);
    test_wait(e, &done);
    if (size)
        *size = head.size;
    return done.status;
}

int test_do_del(struct test_env *e, const char *key)
{
    struct backend_del del = {0};
    struct test_done done;

    test_req_init(&del.req, &done, key);
    assert_int_equal(test_start_del(e->be, &del), 0);
    test_wait(e, &done);
    return done.status;
}

int test_do_list(struct test_env *e, struct backend_list *list, const char *prefix,
                 const char *cursor, size_t max_keys)
{
    struct test_done done;

    memset(list, 0, sizeof(*list));
    test_req_init(&list->req, &done, prefix);
    assert_true(strlen(cursor) < sizeof(list->cursor));
    strcpy(list->cursor, cursor);
    list->max_keys = max_keys;
    /* Garbage that a list must overwrite. */
    strcpy(list->next_cursor, "stale");
    assert_int_equal(test_start_list(e->be, list), 0);
    test_wait(e, &done);
    return done.status;
}

int test_do_append(struct test_env *e, const char *key, uint64_t offset, const void *data,
                   size_t len)
{
    struct backend_append app = {0};
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    struct test_done done;

    test_req_init(&app.req, &done, key);
    app.offset = offset;
    app.iov = &iov;
    app.iovcnt = 1;
    assert_int_equal(test_start_append(e->be, &app), 0);
    test_wait(e, &done);
    return done.status;
}

ssize_t test_read_file(const char *path, uint8_t **data)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    *data = NULL;
    if (fd < 0)
        return -1;
    assert_int_equal(fstat(fd, &st), 0);
    *data = malloc((size_t)st.st_size + 1);
    assert_non_null(*data);
    assert_int_equal(read(fd, *data, (size_t)st.st_size + 1), st.st_size);
    close(fd);
    return st.st_size;
}

void test_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

    assert_true(fd >= 0);
    assert_int_equal(util_write_all(fd, data, len), 0);
    close(fd);
}

int test_count_entries(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;

    if (!d)
        return -1;
    for (struct dirent *de; (de = readdir(d));) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    }
    closedir(d);
    return n;
}

bool test_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int test_count_fds(void)
{
    /* Less the descriptor that reads the directory. */
    return test_count_entries("/proc/self/fd") - 1;
}

bool test_nowait_supported(const char *dir)
{
    char path[PATH_MAX + 16], byte;
    struct iovec v = {.iov_base = &byte, .iov_len = 1};
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "%s/nowait-probe", dir);
    test_write_file(path, "x", 1);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    /* Twice: the first read may have to bring the page in. */
    n = pread(fd, &byte, 1, 0);
    assert_int_equal(n, 1);
    n = preadv2(fd, &v, 1, 0, RWF_NOWAIT);
    close(fd);
    unlink(path);
    return n == 1;
}

void test_fill(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)(x >> 24);
    }
}
