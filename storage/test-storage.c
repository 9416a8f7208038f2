/*
 * Unit tests for the backend front end (URL dispatch, key validation, request
 * bookkeeping) and the local-directory backend on a real libuv loop in a
 * temporary directory. Every test ends with the backend freed, all handles
 * closed, uv_loop_close() == 0 and the temporary directory removed.
 */
#include "storage/backend.h"
#include "proto/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- environment: temp dir, loop, backend ------------------------------- */

struct env {
    char dir[PATH_MAX - 64]; /* mkdtemp result, removed at the end */
    char root[PATH_MAX];     /* the backend's root below dir */
    char url[PATH_MAX + 64];
    uv_loop_t loop;
    struct backend *be;
};

static void env_init(struct env *e)
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

static void env_open(struct env *e)
{
    const char *msg = "sentinel";

    assert_int_equal(backend_new(&e->be, &e->loop, e->url, NULL, &msg), 0);
    assert_null(msg);
    assert_non_null(e->be);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void env_finish(struct env *e)
{
    if (e->be) {
        assert_int_equal(e->be->inflight, 0);
        e->be = backend_free(e->be);
    }
    assert_int_equal(uv_run(&e->loop, UV_RUN_NOWAIT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    assert_int_equal(nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* ---- requests ------------------------------------------------------------ */

/* Shared by the requests of one test: counts callbacks and their order. */
struct tally {
    int completed;
    unsigned iteration; /* loop iterations so far, from a prepare handle */
};

struct op {
    struct backend_req req;
    struct tally *tally;
    int calls;
    int order;          /* completion position */
    unsigned iteration; /* loop iteration of the callback */
};

static void op_cb(struct backend_req *req)
{
    struct op *op = container_of(req, struct op, req);

    assert_ptr_equal(req->userdata, op->tally);
    op->calls++;
    op->order = op->tally->completed++;
    op->iteration = op->tally->iteration;
}

static void op_prepare(struct op *op, struct tally *tally, const char *key)
{
    memset(op, 0, sizeof(*op));
    op->tally = tally;
    op->order = -1;
    op->req.cb = op_cb;
    op->req.userdata = tally;
    assert_true(strlen(key) < sizeof(op->req.key));
    strcpy(op->req.key, key);
}

static int op_start(struct env *e, struct op *op, enum backend_op kind)
{
    return backend_start(e->be, &op->req, kind);
}

/* Runs one request to completion and returns its status. */
static int run_op(struct env *e, struct op *op, enum backend_op kind)
{
    assert_int_equal(op_start(e, op, kind), 0);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(op->calls, 1);
    return op->req.status;
}

static int do_put(struct env *e, const char *key, const void *data, size_t len)
{
    struct tally t = {0};
    struct op op;

    op_prepare(&op, &t, key);
    op.req.data = data;
    op.req.len = len;
    return run_op(e, &op, BACKEND_OP_PUT);
}

/* A get whose result (out/out_len) the caller frees with backend_req_reset(). */
static int do_get(struct env *e, struct op *op, struct tally *t, const char *key, size_t max_len)
{
    op_prepare(op, t, key);
    op->req.max_len = max_len;
    return run_op(e, op, BACKEND_OP_GET);
}

static int do_simple(struct env *e, const char *key, enum backend_op kind, uint64_t *size)
{
    struct tally t = {0};
    struct op op;

    op_prepare(&op, &t, key);
    op.req.size = UINT64_MAX;
    int r = run_op(e, &op, kind);
    if (size)
        *size = op.req.size;
    assert_null(op.req.out);
    assert_null(op.req.keys);
    return r;
}

/* Counts loop iterations; unreferenced so it never keeps the loop alive. */
static void on_prepare(uv_prepare_t *h)
{
    struct tally *t = h->data;
    t->iteration++;
}

static void start_iteration_counter(struct env *e, uv_prepare_t *h, struct tally *t)
{
    assert_int_equal(uv_prepare_init(&e->loop, h), 0);
    h->data = t;
    assert_int_equal(uv_prepare_start(h, on_prepare), 0);
    uv_unref((uv_handle_t *)h);
}

static void stop_iteration_counter(struct env *e, uv_prepare_t *h)
{
    uv_close((uv_handle_t *)h, NULL);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
}

/* ---- filesystem helpers ------------------------------------------------- */

static void object_file(const struct env *e, const char *key, char *out, size_t out_len)
{
    const char *slash = strchr(key, '/');
    snprintf(out, out_len, "%s/%.*s/%.2s/%s", e->root, (int)(slash - key), key, slash + 1,
             slash + 1);
}

/* Reads a whole file; returns its length or -1 when it does not exist. */
static ssize_t read_file(const char *path, uint8_t **data)
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

static void write_file(const char *path, const char *content)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    close(fd);
}

/* Number of directory entries other than "." and "..", or -1. */
static int count_entries(const char *path)
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

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Deterministic test data. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* "chunks/" + 64 hex digits; keys with i % 5 == 0 share the shard "ab". */
static void make_key(char *key, size_t len, unsigned i)
{
    static const char digits[] = "0123456789abcdef";
    int n = snprintf(key, len, "chunks/");
    for (int d = 0; d < 64; d++)
        key[n + d] = digits[rng_next() % 16];
    key[n + 64] = '\0';
    if (i % 5 == 0) {
        key[n] = 'a';
        key[n + 1] = 'b';
    }
}

/* ---- opening ------------------------------------------------------------ */

static void test_open_local_path(void **state)
{
    struct env e;
    char path[PATH_MAX + 32], desc[PATH_MAX + 32];

    env_init(&e);
    env_open(&e);
    assert_ptr_equal(e.be->ops, &backend_local_ops);
    assert_string_equal(e.be->ops->name, "local");
    assert_ptr_equal(e.be->loop, &e.loop);
    assert_true(e.be->ops->caps & BACKEND_CAP_LIST);
    assert_true(e.be->ops->caps & BACKEND_CAP_ATOMIC_PUT);
    assert_true(e.be->ops->caps & BACKEND_CAP_GROUP_SYNC);
    assert_int_equal(e.be->inflight, 0);
    assert_true(is_dir(e.root));
    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_true(is_dir(path));
    e.be->ops->describe(e.be, desc, sizeof(desc));
    assert_string_equal(desc, e.url);
    env_finish(&e);
}

static void test_open_file_url(void **state)
{
    struct env e;
    char path[PATH_MAX + 32];

    env_init(&e);
    snprintf(e.url, sizeof(e.url), "file://%s", e.root);
    env_open(&e);
    assert_ptr_equal(e.be->ops, &backend_local_ops);
    assert_int_equal(do_put(&e, "chunks/abcd", "hello", 5), 0);
    snprintf(path, sizeof(path), "%s/chunks/ab/abcd", e.root);
    uint8_t *data;
    assert_int_equal(read_file(path, &data), 5);
    assert_memory_equal(data, "hello", 5);
    free(data);
    env_finish(&e);
}

static void test_open_data_dir(void **state)
{
    struct env e;
    const char *msg = "sentinel";
    char path[PATH_MAX + 64];
    uint8_t *data;

    env_init(&e);
    assert_int_equal(backend_new(&e.be, &e.loop, "local", e.dir, &msg), 0);
    assert_null(msg);
    snprintf(path, sizeof(path), "%s/objects/.tmp", e.dir);
    assert_true(is_dir(path));
    assert_int_equal(do_put(&e, "chunks/abcdef", "0123456789", 10), 0);
    snprintf(path, sizeof(path), "%s/objects/chunks/ab/abcdef", e.dir);
    assert_int_equal(read_file(path, &data), 10);
    assert_memory_equal(data, "0123456789", 10);
    free(data);
    env_finish(&e);
}

static void test_open_errors(void **state)
{
    static const char *const unknown[] = {"s4://bucket/x", "",        "http://example.com/",
                                          "localx:/tmp/x", ":/tmp/x", "LOCAL:/tmp/x"};
    static const char *const bad_local[] = {"local:rel", "local:", "local:./x", "file://rel",
                                            "file:/abs", "file:",  "file:/",    "file://"};
    struct env e;
    struct backend *be = (struct backend *)&e; /* must stay untouched */
    const char *msg;
    char cwd[PATH_MAX], path[PATH_MAX + 32];

    env_init(&e);
    /* Relative paths would resolve here: make sure nothing gets created. */
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(e.dir), 0);

    for (size_t i = 0; i < ARRAY_SIZE(unknown); i++) {
        msg = NULL;
        assert_int_equal(backend_new(&be, &e.loop, unknown[i], e.dir, &msg), -EINVAL);
        assert_non_null(msg);
        assert_true(strlen(msg) > 0);
        assert_ptr_equal(be, (struct backend *)&e);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad_local); i++) {
        msg = NULL;
        int r = backend_new(&be, &e.loop, bad_local[i], e.dir, &msg);
        if (r != -EINVAL)
            fail_msg("%s: got %d, want -EINVAL", bad_local[i], r);
        assert_non_null(msg);
        assert_ptr_equal(be, (struct backend *)&e);
    }

    /* "local" needs the daemon's data directory. */
    msg = NULL;
    assert_int_equal(backend_new(&be, &e.loop, "local", NULL, &msg), -EINVAL);
    assert_non_null(msg);

    /* A root that is a regular file. */
    snprintf(path, sizeof(path), "%s/plain", e.dir);
    write_file(path, "x");
    snprintf(e.url, sizeof(e.url), "local:%s", path);
    msg = NULL;
    assert_true(backend_new(&be, &e.loop, e.url, NULL, &msg) < 0);
    assert_non_null(msg);
    assert_ptr_equal(be, (struct backend *)&e);

    /* Nothing but the file we made appeared in the working directory. */
    assert_int_equal(count_entries(e.dir), 1);
    assert_int_equal(chdir(cwd), 0);
    env_finish(&e);
}

static void test_stale_tmp_removed(void **state)
{
    struct env e;
    char path[PATH_MAX + 32];

    env_init(&e);
    snprintf(path, sizeof(path), "%s/data", e.dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(mkdir(e.root, 0755), 0);
    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/.tmp/1234.0", e.root);
    write_file(path, "half-written object");
    snprintf(path, sizeof(path), "%s/.tmp/1234.1", e.root);
    write_file(path, "");
    snprintf(path, sizeof(path), "%s/.tmp/99999.18446744073709551615", e.root);
    write_file(path, "another");
    /* An acknowledged object must survive the cleanup. */
    snprintf(path, sizeof(path), "%s/chunks", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/chunks/ab", e.root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/chunks/ab/abba", e.root);
    write_file(path, "kept");

    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_int_equal(count_entries(path), 3);
    env_open(&e);
    assert_int_equal(count_entries(path), 0);

    uint64_t size = 0;
    assert_int_equal(do_simple(&e, "chunks/abba", BACKEND_OP_HEAD, &size), 0);
    assert_int_equal(size, 4);
    env_finish(&e);
}

/* ---- keys --------------------------------------------------------------- */

static void test_key_valid(void **state)
{
    char longest[BACKEND_MAX_KEY], too_long[BACKEND_MAX_KEY + 1];
    static const char *const good[] = {
        "chunks/ab",
        "chunks/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "manifests/00",
        "a/bc",
        "x-y_z.w/ab.c-d_e",
        "chunks/a.",
        "chunks/a..",
    };
    static const char *const bad[] = {
        "",
        "noslash",
        "a/b/c",
        "../x",
        "A/BC",
        "chunks/.",
        "chunks/..",
        "chunks/.ab",
        "chunks/a",
        "/abc",
        "/",
        "chunks/",
        "chunks/AB",
        "Chunks/ab",
        "chunks/a b",
        "chunks/ab\n",
        "chunks/ab/",
        "chunks//ab",
        "chunks/a\\b",
        "chunks/\xc3\xa9t",
        "chunks/ab:c",
        "chunks/ab*",
        /* The directory part must not leave the root either. */
        "../xy",
        "./ab",
        "../../etc/passwd",
        "..",
        ".hidden/ab",
    };

    for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
        if (!backend_key_valid(good[i]))
            fail_msg("\"%s\" rejected", good[i]);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        if (backend_key_valid(bad[i]))
            fail_msg("\"%s\" accepted", bad[i]);
    }

    /* The length limit: BACKEND_MAX_KEY - 1 characters fit the request. */
    memset(longest, 'a', sizeof(longest));
    memcpy(longest, "chunks/", 7);
    longest[sizeof(longest) - 1] = '\0';
    assert_true(backend_key_valid(longest));
    memset(too_long, 'a', sizeof(too_long));
    memcpy(too_long, "chunks/", 7);
    too_long[sizeof(too_long) - 1] = '\0';
    assert_false(backend_key_valid(too_long));
}

static void test_invalid_key_no_callback(void **state)
{
    static const char *const bad[] = {"",         "noslash", "a/b/c", "../x",    "A/BC",
                                      "chunks/.", "../xy",   "./ab",  "chunks/a"};
    static const enum backend_op kinds[] = {BACKEND_OP_PUT, BACKEND_OP_GET, BACKEND_OP_HEAD,
                                            BACKEND_OP_DELETE};
    static struct op ops[ARRAY_SIZE(bad)][ARRAY_SIZE(kinds)];
    struct env e;
    struct tally t = {0};
    char path[PATH_MAX + 32];
    int started = 0;

    env_init(&e);
    env_open(&e);
    for (size_t k = 0; k < ARRAY_SIZE(bad); k++) {
        for (size_t o = 0; o < ARRAY_SIZE(kinds); o++) {
            struct op *op = &ops[k][o];
            op_prepare(op, &t, bad[k]);
            op->req.data = "data";
            op->req.len = 4;
            op->req.max_len = 100;
            int r = op_start(&e, op, kinds[o]);
            if (r == 0) {
                print_error("op %d on \"%s\" was started\n", (int)kinds[o], bad[k]);
                started++;
            } else {
                assert_int_equal(r, -EINVAL);
            }
        }
    }
    /*
     * Run the loop before judging, so that a request started by mistake has
     * finished and a failure here does not leave work behind for later tests.
     */
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(started, 0);
    assert_int_equal(t.completed, 0);
    for (size_t k = 0; k < ARRAY_SIZE(bad); k++) {
        for (size_t o = 0; o < ARRAY_SIZE(kinds); o++)
            assert_int_equal(ops[k][o].calls, 0);
    }
    assert_int_equal(e.be->inflight, 0);
    assert_int_equal(e.be->stats.puts + e.be->stats.gets + e.be->stats.heads + e.be->stats.deletes +
                         e.be->stats.failures,
                     0);
    /* Only the tmp directory exists under the root, and nothing beside it. */
    assert_int_equal(count_entries(e.root), 1);
    snprintf(path, sizeof(path), "%s/data", e.dir);
    assert_int_equal(count_entries(path), 1);
    assert_int_equal(count_entries(e.dir), 1);
    env_finish(&e);
}

/* ---- puts and gets ------------------------------------------------------ */

#define NPUTS 50

static void test_concurrent_puts_then_get(void **state)
{
    struct env e;
    struct tally t = {0};
    uv_prepare_t counter;
    static struct op put_ops[NPUTS], gets[NPUTS], heads[NPUTS];
    static char keys[NPUTS][BACKEND_MAX_KEY];
    static uint8_t *data[NPUTS];
    static size_t lens[NPUTS];
    uint64_t total = 0;
    char path[PATH_MAX + 32];

    env_init(&e);
    env_open(&e);
    start_iteration_counter(&e, &counter, &t);

    rng_state = 42;
    for (unsigned i = 0; i < NPUTS; i++) {
        make_key(keys[i], sizeof(keys[i]), i);
        lens[i] = i == 0 ? 0 : (size_t)(rng_next() % 20000);
        data[i] = malloc(lens[i] + 1);
        assert_non_null(data[i]);
        for (size_t b = 0; b < lens[i]; b++)
            data[i][b] = (uint8_t)rng_next();
        total += lens[i];
    }

    /* All puts are queued before the loop runs: they must share batches. */
    for (unsigned i = 0; i < NPUTS; i++) {
        op_prepare(&put_ops[i], &t, keys[i]);
        put_ops[i].req.data = data[i];
        put_ops[i].req.len = lens[i];
        assert_int_equal(op_start(&e, &put_ops[i], BACKEND_OP_PUT), 0);
    }
    assert_int_equal(e.be->inflight, NPUTS);
    assert_int_equal(t.completed, 0); /* never synchronously */
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(t.completed, NPUTS);
    for (unsigned i = 0; i < NPUTS; i++) {
        assert_int_equal(put_ops[i].calls, 1);
        assert_int_equal(put_ops[i].req.status, 0);
        /* Completed in submission order... */
        assert_int_equal(put_ops[i].order, (int)i);
        /* ...and everything queued behind the first put went out as one batch. */
        if (i > 1)
            assert_int_equal(put_ops[i].iteration, put_ops[1].iteration);
    }
    assert_int_equal(e.be->inflight, 0);
    assert_int_equal(e.be->stats.puts, NPUTS);
    assert_int_equal(e.be->stats.bytes_written, total);
    assert_int_equal(e.be->stats.failures, 0);

    /* On disk: root/chunks/<first two>/<name>, byte-exact; no temp files left. */
    for (unsigned i = 0; i < NPUTS; i++) {
        uint8_t *file;
        object_file(&e, keys[i], path, sizeof(path));
        assert_int_equal(read_file(path, &file), (ssize_t)lens[i]);
        if (lens[i])
            assert_memory_equal(file, data[i], lens[i]);
        free(file);
    }
    snprintf(path, sizeof(path), "%s/.tmp", e.root);
    assert_int_equal(count_entries(path), 0);

    /* Gets and heads, all concurrent. */
    t.completed = 0;
    for (unsigned i = 0; i < NPUTS; i++) {
        op_prepare(&gets[i], &t, keys[i]);
        gets[i].req.max_len = lens[i];
        assert_int_equal(op_start(&e, &gets[i], BACKEND_OP_GET), 0);
        op_prepare(&heads[i], &t, keys[i]);
        assert_int_equal(op_start(&e, &heads[i], BACKEND_OP_HEAD), 0);
    }
    assert_int_equal(e.be->inflight, 2 * NPUTS);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(t.completed, 2 * NPUTS);
    for (unsigned i = 0; i < NPUTS; i++) {
        assert_int_equal(gets[i].calls, 1);
        assert_int_equal(gets[i].req.status, 0);
        assert_non_null(gets[i].req.out);
        assert_int_equal(gets[i].req.out_len, lens[i]);
        if (lens[i])
            assert_memory_equal(gets[i].req.out, data[i], lens[i]);
        backend_req_reset(&gets[i].req);
        assert_null(gets[i].req.out);
        assert_int_equal(gets[i].req.out_len, 0);
        assert_int_equal(heads[i].calls, 1);
        assert_int_equal(heads[i].req.status, 0);
        assert_int_equal(heads[i].req.size, lens[i]);
        assert_null(heads[i].req.out);
    }
    assert_int_equal(e.be->stats.gets, NPUTS);
    assert_int_equal(e.be->stats.heads, NPUTS);
    assert_int_equal(e.be->stats.bytes_read, total);

    for (unsigned i = 0; i < NPUTS; i++)
        free(data[i]);
    stop_iteration_counter(&e, &counter);
    env_finish(&e);
}

/* More puts than one batch takes: all of them still complete, in order. */
static void test_many_puts(void **state)
{
    enum { N = 300 };
    struct env e;
    struct tally t = {0};
    static struct op put_ops[N];
    char key[BACKEND_MAX_KEY], path[PATH_MAX + 32];

    env_init(&e);
    env_open(&e);
    for (unsigned i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "chunks/%02x%05u", i % 7, i);
        op_prepare(&put_ops[i], &t, key);
        /* The data is the key itself, which lives as long as the request. */
        put_ops[i].req.data = put_ops[i].req.key;
        put_ops[i].req.len = strlen(key);
        assert_int_equal(op_start(&e, &put_ops[i], BACKEND_OP_PUT), 0);
    }
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(t.completed, N);
    for (unsigned i = 0; i < N; i++) {
        assert_int_equal(put_ops[i].calls, 1);
        assert_int_equal(put_ops[i].req.status, 0);
        assert_int_equal(put_ops[i].order, (int)i);
    }
    for (unsigned i = 0; i < N; i += 37) {
        uint8_t *file;
        object_file(&e, put_ops[i].req.key, path, sizeof(path));
        assert_int_equal(read_file(path, &file), (ssize_t)strlen(put_ops[i].req.key));
        assert_memory_equal(file, put_ops[i].req.key, strlen(put_ops[i].req.key));
        free(file);
    }
    snprintf(path, sizeof(path), "%s/chunks", e.root);
    assert_int_equal(count_entries(path), 7);
    env_finish(&e);
}

/* A callback that starts the next put: the batch machinery is re-entered. */
struct chain {
    struct backend_req req;
    struct env *env;
    int done;
    int failed;
    char payload[32];
};

static void chain_cb(struct backend_req *req)
{
    struct chain *c = container_of(req, struct chain, req);

    if (req->status != 0)
        c->failed++;
    c->done++;
    if (c->done < 10) {
        snprintf(c->req.key, sizeof(c->req.key), "chunks/ch%02d", c->done);
        snprintf(c->payload, sizeof(c->payload), "link %d", c->done);
        c->req.data = c->payload;
        c->req.len = strlen(c->payload);
        if (backend_put(c->env->be, &c->req) != 0)
            c->failed++;
    }
}

static void test_put_from_callback(void **state)
{
    struct env e;
    struct chain c;
    struct tally t = {0};
    struct op get;

    env_init(&e);
    env_open(&e);
    memset(&c, 0, sizeof(c));
    c.env = &e;
    c.req.cb = chain_cb;
    strcpy(c.req.key, "chunks/ch00");
    strcpy(c.payload, "link 0");
    c.req.data = c.payload;
    c.req.len = strlen(c.payload);
    assert_int_equal(backend_put(e.be, &c.req), 0);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(c.done, 10);
    assert_int_equal(c.failed, 0);
    assert_int_equal(e.be->stats.puts, 10);

    assert_int_equal(do_get(&e, &get, &t, "chunks/ch07", 100), 0);
    assert_int_equal(get.req.out_len, 6);
    assert_memory_equal(get.req.out, "link 7", 6);
    backend_req_reset(&get.req);
    env_finish(&e);
}

static void test_overwrite(void **state)
{
    struct env e;
    struct tally t = {0};
    struct op a, b, get;

    env_init(&e);
    env_open(&e);
    assert_int_equal(do_put(&e, "manifests/m1", "first version", 13), 0);
    assert_int_equal(do_put(&e, "manifests/m1", "second", 6), 0);
    assert_int_equal(do_get(&e, &get, &t, "manifests/m1", 100), 0);
    assert_int_equal(get.req.out_len, 6);
    assert_memory_equal(get.req.out, "second", 6);
    backend_req_reset(&get.req);

    /* Two puts of one key in flight at once: the later one wins. */
    op_prepare(&a, &t, "manifests/m2");
    a.req.data = "from a";
    a.req.len = 6;
    op_prepare(&b, &t, "manifests/m2");
    b.req.data = "from b, longer";
    b.req.len = 14;
    assert_int_equal(op_start(&e, &a, BACKEND_OP_PUT), 0);
    assert_int_equal(op_start(&e, &b, BACKEND_OP_PUT), 0);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(a.req.status, 0);
    assert_int_equal(b.req.status, 0);
    assert_true(a.order < b.order);
    assert_int_equal(do_get(&e, &get, &t, "manifests/m2", 100), 0);
    assert_int_equal(get.req.out_len, 14);
    assert_memory_equal(get.req.out, "from b, longer", 14);
    backend_req_reset(&get.req);
    env_finish(&e);
}

static void test_get_missing(void **state)
{
    struct env e;
    struct tally t = {0};
    struct op get;
    uint64_t size = 7;

    env_init(&e);
    env_open(&e);
    assert_int_equal(do_get(&e, &get, &t, "chunks/abcdef", SIZE_MAX), BACKEND_E_NOT_FOUND);
    assert_null(get.req.out);
    assert_int_equal(get.req.out_len, 0);
    assert_int_equal(do_simple(&e, "chunks/abcdef", BACKEND_OP_HEAD, &size), BACKEND_E_NOT_FOUND);
    assert_int_equal(do_simple(&e, "chunks/abcdef", BACKEND_OP_DELETE, NULL), BACKEND_E_NOT_FOUND);

    /* The shard exists but not the object. */
    assert_int_equal(do_put(&e, "chunks/ab0000", "x", 1), 0);
    assert_int_equal(do_get(&e, &get, &t, "chunks/ab0001", SIZE_MAX), BACKEND_E_NOT_FOUND);
    assert_int_equal(do_get(&e, &get, &t, "manifests/ab0000", SIZE_MAX), BACKEND_E_NOT_FOUND);
    /* An expected outcome, not a backend failure. */
    assert_int_equal(e.be->stats.failures, 0);
    env_finish(&e);
}

static void test_get_too_large(void **state)
{
    struct env e;
    struct tally t = {0};
    struct op get;
    uint8_t blob[1000];

    env_init(&e);
    env_open(&e);
    memset(blob, 0x5a, sizeof(blob));
    assert_int_equal(do_put(&e, "chunks/big1", blob, sizeof(blob)), 0);
    assert_int_equal(do_put(&e, "chunks/empty", "", 0), 0);

    assert_int_equal(do_get(&e, &get, &t, "chunks/big1", sizeof(blob) - 1), BACKEND_E_TOO_LARGE);
    assert_null(get.req.out);
    assert_int_equal(get.req.out_len, 0);
    assert_int_equal(do_get(&e, &get, &t, "chunks/big1", 0), BACKEND_E_TOO_LARGE);
    assert_null(get.req.out);
    assert_int_equal(do_get(&e, &get, &t, "chunks/big1", sizeof(blob)), 0);
    assert_int_equal(get.req.out_len, sizeof(blob));
    assert_memory_equal(get.req.out, blob, sizeof(blob));
    backend_req_reset(&get.req);

    /* The empty object fits max_len 0 and still comes back as a buffer. */
    assert_int_equal(do_get(&e, &get, &t, "chunks/empty", 0), 0);
    assert_int_equal(get.req.out_len, 0);
    assert_non_null(get.req.out);
    backend_req_reset(&get.req);

    assert_int_equal(e.be->stats.failures, 0);
    env_finish(&e);
}

static void test_delete(void **state)
{
    struct env e;
    struct tally t = {0};
    struct op get, list;
    char path[PATH_MAX + 32];
    uint8_t *file;

    env_init(&e);
    env_open(&e);
    assert_int_equal(do_put(&e, "chunks/dead01", "doomed", 6), 0);
    assert_int_equal(do_put(&e, "chunks/dead02", "stays", 5), 0);
    object_file(&e, "chunks/dead01", path, sizeof(path));
    assert_int_equal(read_file(path, &file), 6);
    free(file);

    assert_int_equal(do_simple(&e, "chunks/dead01", BACKEND_OP_DELETE, NULL), 0);
    assert_int_equal(read_file(path, &file), -1);
    assert_int_equal(do_get(&e, &get, &t, "chunks/dead01", 100), BACKEND_E_NOT_FOUND);
    assert_int_equal(do_simple(&e, "chunks/dead01", BACKEND_OP_HEAD, NULL), BACKEND_E_NOT_FOUND);
    assert_int_equal(do_simple(&e, "chunks/dead01", BACKEND_OP_DELETE, NULL), BACKEND_E_NOT_FOUND);

    /* The neighbour in the same shard is untouched. */
    assert_int_equal(do_get(&e, &get, &t, "chunks/dead02", 100), 0);
    assert_int_equal(get.req.out_len, 5);
    assert_memory_equal(get.req.out, "stays", 5);
    backend_req_reset(&get.req);

    op_prepare(&list, &t, "chunks/");
    assert_int_equal(run_op(&e, &list, BACKEND_OP_LIST), 0);
    assert_int_equal(list.req.nkeys, 1);
    assert_string_equal(list.req.keys[0], "chunks/dead02");
    backend_req_reset(&list.req);

    /* A deleted key can be written again. */
    assert_int_equal(do_put(&e, "chunks/dead01", "back", 4), 0);
    assert_int_equal(do_get(&e, &get, &t, "chunks/dead01", 100), 0);
    assert_memory_equal(get.req.out, "back", 4);
    backend_req_reset(&get.req);
    assert_int_equal(e.be->stats.deletes, 2);
    env_finish(&e);
}

static void test_list(void **state)
{
    enum { NCHUNKS = 30 };
    struct env e;
    struct tally t = {0};
    struct op list;
    static char keys[NCHUNKS][BACKEND_MAX_KEY];
    char *sorted[NCHUNKS];

    env_init(&e);
    env_open(&e);

    /* Before anything is stored the directory does not even exist. */
    op_prepare(&list, &t, "chunks/");
    assert_int_equal(run_op(&e, &list, BACKEND_OP_LIST), 0);
    assert_int_equal(list.req.nkeys, 0);
    backend_req_reset(&list.req);

    rng_state = 7;
    for (unsigned i = 0; i < NCHUNKS; i++) {
        make_key(keys[i], sizeof(keys[i]), i);
        assert_int_equal(do_put(&e, keys[i], keys[i], strlen(keys[i])), 0);
        sorted[i] = keys[i];
    }
    assert_int_equal(do_put(&e, "manifests/m000001", "m1", 2), 0);
    assert_int_equal(do_put(&e, "manifests/m000002", "m2", 2), 0);
    assert_int_equal(do_put(&e, "other/zz", "z", 1), 0);
    qsort(sorted, NCHUNKS, sizeof(sorted[0]), cmp_str);

    op_prepare(&list, &t, "chunks/");
    assert_int_equal(run_op(&e, &list, BACKEND_OP_LIST), 0);
    assert_int_equal(list.req.nkeys, NCHUNKS);
    qsort(list.req.keys, list.req.nkeys, sizeof(list.req.keys[0]), cmp_str);
    for (unsigned i = 0; i < NCHUNKS; i++)
        assert_string_equal(list.req.keys[i], sorted[i]);
    backend_req_reset(&list.req);
    assert_null(list.req.keys);
    assert_int_equal(list.req.nkeys, 0);

    op_prepare(&list, &t, "manifests/");
    assert_int_equal(run_op(&e, &list, BACKEND_OP_LIST), 0);
    assert_int_equal(list.req.nkeys, 2);
    qsort(list.req.keys, list.req.nkeys, sizeof(list.req.keys[0]), cmp_str);
    assert_string_equal(list.req.keys[0], "manifests/m000001");
    assert_string_equal(list.req.keys[1], "manifests/m000002");
    backend_req_reset(&list.req);

    op_prepare(&list, &t, "nothing/");
    assert_int_equal(run_op(&e, &list, BACKEND_OP_LIST), 0);
    assert_int_equal(list.req.nkeys, 0);
    assert_null(list.req.keys);
    backend_req_reset(&list.req);

    /* Every listed key is a valid key that reads back. */
    op_prepare(&list, &t, "chunks/");
    assert_int_equal(run_op(&e, &list, BACKEND_OP_LIST), 0);
    for (size_t i = 0; i < list.req.nkeys; i++)
        assert_true(backend_key_valid(list.req.keys[i]));
    backend_req_reset(&list.req);

    assert_int_equal(e.be->stats.lists, 5);
    env_finish(&e);
}

/* Objects are durable files: a new backend on the same root finds them. */
static void test_reopen(void **state)
{
    struct env e;
    struct tally t = {0};
    struct op get;

    env_init(&e);
    env_open(&e);
    assert_int_equal(do_put(&e, "chunks/persist", "still here", 10), 0);
    e.be = backend_free(e.be);
    assert_null(e.be);
    env_open(&e);
    assert_int_equal(do_get(&e, &get, &t, "chunks/persist", 10), 0);
    assert_int_equal(get.req.out_len, 10);
    assert_memory_equal(get.req.out, "still here", 10);
    backend_req_reset(&get.req);
    env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_local_path),
        cmocka_unit_test(test_open_file_url),
        cmocka_unit_test(test_open_data_dir),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_stale_tmp_removed),
        cmocka_unit_test(test_key_valid),
        cmocka_unit_test(test_invalid_key_no_callback),
        cmocka_unit_test(test_concurrent_puts_then_get),
        cmocka_unit_test(test_many_puts),
        cmocka_unit_test(test_put_from_callback),
        cmocka_unit_test(test_overwrite),
        cmocka_unit_test(test_get_missing),
        cmocka_unit_test(test_get_too_large),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_list),
        cmocka_unit_test(test_reopen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
