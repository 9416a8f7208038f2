/*
 * The local backend's writes of many iovecs, as a repack hands them over
 * (one per record, thousands per request): puts and appends of far more
 * than IOV_MAX iovecs read back byte-exact; every pwritev() takes at most
 * IOV_MAX of them, and IOV_MAX when there are that many; writes cut short
 * or interrupted are resumed exactly where they stopped; and an append
 * retried after an attempt that left a torn tail ends with exactly its
 * bytes.
 *
 * The program is linked with --wrap for pwritev (see meson.build), so the
 * test sees every call the backend makes and can cut them short; a real
 * file system hardly ever does that on its own.
 */
#include "storage/local/local.h"
#include "storage/local/local-int.h"
#include "storage/test-storage.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* More than four times IOV_MAX, of 0 to 40 bytes each. */
#define MANY 5000

/* ---- the pwritev wrapper ---------------------------------------------------------- */

/* Shared with the threadpool's workers, hence the lock. */
static struct {
    pthread_mutex_t lock;
    bool cut;    /* cut every write short, and interrupt some */
    size_t room; /* what the "disk" still takes (SIZE_MAX: no end); then ENOSPC */
    uint64_t rng;
    unsigned calls, shorts, interrupts;
    int max_iovcnt;
} pw = {.lock = PTHREAD_MUTEX_INITIALIZER};

typedef ssize_t pwritev_fn(int fd, const struct iovec *iov, int iovcnt, off_t offset);

static void pw_reset(bool cut)
{
    pthread_mutex_lock(&pw.lock);
    pw.cut = cut;
    pw.room = SIZE_MAX;
    pw.rng = 0x2545f4914f6cdd1dull;
    pw.calls = pw.shorts = pw.interrupts = 0;
    pw.max_iovcnt = 0;
    pthread_mutex_unlock(&pw.lock);
}

static uint64_t pw_next(void)
{
    pw.rng ^= pw.rng << 13;
    pw.rng ^= pw.rng >> 7;
    pw.rng ^= pw.rng << 17;
    return pw.rng;
}

/* The first `limit` bytes of iov (at most IOV_MAX iovecs) in one call. */
static ssize_t write_prefix(pwritev_fn *real, int fd, const struct iovec *iov, size_t limit,
                            off_t offset)
{
    struct iovec part[IOV_MAX];
    int n = 0;

    for (size_t done = 0; done < limit; n++) {
        part[n] = iov[n];
        if (part[n].iov_len > limit - done)
            part[n].iov_len = limit - done;
        done += part[n].iov_len;
    }
    return real(fd, part, n, offset);
}

static ssize_t pw_write(pwritev_fn *real, int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
    size_t total = 0, limit;
    uint64_t roll;

    pthread_mutex_lock(&pw.lock);
    pw.calls++;
    if (iovcnt > pw.max_iovcnt)
        pw.max_iovcnt = iovcnt;
    for (int i = 0; i < iovcnt && iovcnt <= IOV_MAX; i++)
        total += iov[i].iov_len;
    if (pw.room != SIZE_MAX && iovcnt <= IOV_MAX) {
        /* A disk filling up: what fits is written, then nothing. */
        if (pw.room == 0) {
            pthread_mutex_unlock(&pw.lock);
            errno = ENOSPC;
            return -1;
        }
        limit = total < pw.room ? total : pw.room;
        pw.room -= limit;
        pthread_mutex_unlock(&pw.lock);
        return write_prefix(real, fd, iov, limit, offset);
    }
    /* More than IOV_MAX goes to the kernel as it is, to be refused there. */
    if (!pw.cut || iovcnt > IOV_MAX || total < 2) {
        pthread_mutex_unlock(&pw.lock);
        return real(fd, iov, iovcnt, offset);
    }
    roll = pw_next();
    if (roll % 8 == 0) {
        pw.interrupts++;
        pthread_mutex_unlock(&pw.lock);
        errno = EINTR;
        return -1;
    }
    /* At least one byte, never all: the caller must come back for the rest. */
    limit = 1 + (size_t)(roll >> 8) % (total - 1);
    pw.shorts++;
    pthread_mutex_unlock(&pw.lock);
    return write_prefix(real, fd, iov, limit, offset);
}

/*
 * Which of the two names the backend calls depends on _FILE_OFFSET_BITS;
 * both are wrapped, and pw.calls shows that the wrapper saw the writes.
 */
ssize_t __real_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset);
ssize_t __wrap_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset);
ssize_t __real_pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t offset);
ssize_t __wrap_pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t offset);

ssize_t __wrap_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
    return pw_write(__real_pwritev, fd, iov, iovcnt, offset);
}

ssize_t __wrap_pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t offset)
{
    return pw_write(__real_pwritev64, fd, iov, iovcnt, offset);
}

/* ---- many iovecs ------------------------------------------------------------------- */

/*
 * MANY iovecs of 0 to 40 bytes, scattered over a source buffer out of
 * order, so that only writing each one at its place gives `expect`.
 */
struct scatter {
    uint8_t source[64 * 1024];
    struct iovec iov[MANY];
    uint8_t *expect;
    size_t len;
};

static struct scatter *scatter_new(uint64_t seed)
{
    struct scatter *s = calloc(1, sizeof(*s));

    assert_non_null(s);
    test_fill(s->source, sizeof(s->source), seed);
    s->expect = malloc(MANY * 40);
    assert_non_null(s->expect);
    for (size_t i = 0; i < MANY; i++) {
        size_t len = (i * 7 + seed) % 41;
        size_t at = (i * 7919 + seed * 31) % (sizeof(s->source) - 40);
        s->iov[i] = (struct iovec){.iov_base = s->source + at, .iov_len = len};
        memcpy(s->expect + s->len, s->source + at, len);
        s->len += len;
    }
    return s;
}

static void scatter_free(struct scatter *s)
{
    free(s->expect);
    free(s);
}

static int put_many(struct test_env *e, const char *key, const struct scatter *s)
{
    struct backend_put put = {0};
    struct test_done done;

    test_req_init(&put.req, &done, key);
    put.iov = s->iov;
    put.iovcnt = MANY;
    assert_int_equal(test_start_put(e->be, &put), 0);
    test_wait(e, &done);
    return done.status;
}

static int append_many(struct test_env *e, const char *key, uint64_t offset,
                       const struct scatter *s, unsigned *attempts)
{
    struct backend_append app = {0};
    struct test_done done;

    test_req_init(&app.req, &done, key);
    app.offset = offset;
    app.iov = s->iov;
    app.iovcnt = MANY;
    assert_int_equal(test_start_append(e->be, &app), 0);
    test_wait(e, &done);
    if (attempts)
        *attempts = app.req.attempts;
    return done.status;
}

/* The object holds exactly `len` bytes: `head`, then `s`'s bytes. */
static void expect_object(struct test_env *e, const char *key, const void *head, size_t head_len,
                          const struct scatter *s)
{
    struct backend_get get;

    assert_int_equal(test_do_get(e, &get, key, 0, BACKEND_TO_END, SIZE_MAX), 0);
    assert_int_equal(get.out_len, head_len + s->len);
    if (head_len)
        assert_memory_equal(get.out, head, head_len);
    assert_memory_equal(get.out + head_len, s->expect, s->len);
    backend_get_reset(&get);
}

static void test_writes_put_many(void **state)
{
    struct scatter *s = scatter_new(1);
    struct test_env e;

    test_env_init(&e);
    test_env_open(&e);
    pw_reset(false);
    assert_int_equal(put_many(&e, "packs/many", s), 0);
    /* IOV_MAX to a call, so the fewest calls; none took more than the kernel allows. */
    assert_int_equal(pw.max_iovcnt, IOV_MAX);
    assert_in_range(pw.calls, 1, (MANY + IOV_MAX - 1) / IOV_MAX);
    assert_int_equal(e.be->stats.bytes_written, s->len);
    expect_object(&e, "packs/many", NULL, 0, s);

    /* A put that replaces the object takes as many. */
    scatter_free(s);
    s = scatter_new(2);
    assert_int_equal(put_many(&e, "packs/many", s), 0);
    expect_object(&e, "packs/many", NULL, 0, s);
    test_env_finish(&e);
    scatter_free(s);
}

static void test_writes_append_many(void **state)
{
    struct scatter *first = scatter_new(3), *second = scatter_new(4), *shorter = scatter_new(5);
    struct test_env e;

    test_env_init(&e);
    test_env_open(&e);
    pw_reset(false);
    /* Creating the object, then extending it, each with MANY iovecs. */
    assert_int_equal(append_many(&e, "packs/0001", 0, first, NULL), 0);
    assert_int_equal(pw.max_iovcnt, IOV_MAX);
    expect_object(&e, "packs/0001", NULL, 0, first);
    assert_int_equal(append_many(&e, "packs/0001", first->len, second, NULL), 0);
    expect_object(&e, "packs/0001", first->expect, first->len, second);
    /* Over the second part again with fewer bytes: the rest is cut off. */
    shorter->len = 0;
    for (size_t i = 0; i < MANY; i++) {
        shorter->iov[i].iov_len /= 2;
        memcpy(shorter->expect + shorter->len, shorter->iov[i].iov_base, shorter->iov[i].iov_len);
        shorter->len += shorter->iov[i].iov_len;
    }
    assert_int_equal(append_many(&e, "packs/0001", first->len, shorter, NULL), 0);
    expect_object(&e, "packs/0001", first->expect, first->len, shorter);
    assert_int_equal(e.be->stats.appends, 3);
    assert_int_equal(e.be->stats.failures, 0);
    test_env_finish(&e);
    scatter_free(first);
    scatter_free(second);
    scatter_free(shorter);
}

/*
 * An append that runs out of room: it fails, and the object is cut back to
 * where the append began, so that what it did write goes back to the disk.
 */
static void test_writes_append_out_of_room(void **state)
{
    struct scatter *first = scatter_new(8), *second = scatter_new(9);
    struct test_env e;

    test_env_init(&e);
    test_env_open(&e);
    pw_reset(false);
    assert_int_equal(append_many(&e, "packs/0002", 0, first, NULL), 0);
    pthread_mutex_lock(&pw.lock);
    pw.room = second->len / 2;
    pthread_mutex_unlock(&pw.lock);
    assert_int_equal(append_many(&e, "packs/0002", first->len, second, NULL), -ENOSPC);
    pw_reset(false);
    expect_object(&e, "packs/0002", NULL, 0, first);
    test_env_finish(&e);
    scatter_free(first);
    scatter_free(second);
}

/* Every write cut short at a random byte, some interrupted: the bytes still come out exact. */
static void test_writes_short(void **state)
{
    struct scatter *a = scatter_new(6), *b = scatter_new(7);
    struct test_env e;

    test_env_init(&e);
    test_env_open(&e);
    pw_reset(true);
    assert_int_equal(put_many(&e, "packs/cut", a), 0);
    assert_int_equal(append_many(&e, "packs/0002", 0, a, NULL), 0);
    assert_int_equal(append_many(&e, "packs/0002", a->len, b, NULL), 0);
    assert_true(pw.shorts > 10);
    assert_true(pw.interrupts > 0);
    assert_in_range(pw.max_iovcnt, 1, IOV_MAX);
    pw_reset(false);
    expect_object(&e, "packs/cut", NULL, 0, a);
    expect_object(&e, "packs/0002", a->expect, a->len, b);
    test_env_finish(&e);
    scatter_free(a);
    scatter_free(b);
}

/* ---- a retried append ------------------------------------------------------------- */

/*
 * The local backend, but the first attempts of an append scribble over
 * the object beyond its end and then report a transient failure, as a
 * remote write cut off mid-way would: the retry has to leave exactly its
 * own bytes behind.
 */
#define TORN_LEN (256 * 1024) /* more than a scatter's bytes */

static struct backend_ops flaky_ops;
static unsigned flaky_failures;

static void torn_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_append *app = container_of(job->req, struct backend_append, req);
    uint8_t junk[4096];
    int fd;

    memset(junk, 0xee, sizeof(junk));
    fd = openat(job->lp->root_fd, app->req.key, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        job->status = -errno;
        return;
    }
    for (off_t at = (off_t)app->offset; at < (off_t)app->offset + TORN_LEN; at += sizeof(junk)) {
        if (pwrite(fd, junk, sizeof(junk), at) != (ssize_t)sizeof(junk)) {
            job->status = -EIO;
            break;
        }
    }
    close(fd);
    if (job->status == 0)
        job->status = BACKEND_E_UNAVAILABLE;
}

static int flaky_append(struct backend *be, struct backend_req *req)
{
    if (flaky_failures == 0)
        return local_append(be, req);
    flaky_failures--;
    return local_queue(be, req, torn_work);
}

static void test_writes_retried_append(void **state)
{
    static const char head[] = "header of 16 b.";
    struct scatter *s = scatter_new(8);
    struct test_env e;
    const char *msg;
    unsigned attempts = 0;

    flaky_ops = backend_local_ops;
    flaky_ops.append = flaky_append;
    test_env_init(&e);
    assert_int_equal(backend_new_ops(&e.be, &e.loop, &flaky_ops, e.url, &msg), 0);
    e.be->retry.backoff_ms = 1;
    e.be->retry.backoff_max_ms = 2;
    assert_int_equal(test_do_append(&e, "packs/0003", 0, head, sizeof(head)), 0);
    flaky_failures = 2;
    pw_reset(false);
    assert_int_equal(append_many(&e, "packs/0003", sizeof(head), s, &attempts), 0);
    assert_int_equal(attempts, 3);
    assert_int_equal(flaky_failures, 0);
    assert_int_equal(e.be->stats.retries, 2);
    assert_int_equal(e.be->stats.bytes_written, sizeof(head) + s->len);
    assert_int_equal(pw.max_iovcnt, IOV_MAX);
    /* The scribbles went further than the retry's bytes: cut off, not left as a tail. */
    assert_true(s->len < TORN_LEN);
    expect_object(&e, "packs/0003", head, sizeof(head), s);
    test_env_finish(&e);
    scatter_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writes_put_many),
        cmocka_unit_test(test_writes_append_many),
        cmocka_unit_test(test_writes_short),
        cmocka_unit_test(test_writes_append_out_of_room),
        cmocka_unit_test(test_writes_retried_append),
    };

    return cmocka_run_group_tests_name("local backend: many iovecs", tests, NULL, NULL);
}
