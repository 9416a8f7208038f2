/*
 * backend-bench: times the object backend layer alone (storage/backend.h),
 * without the daemon, the protocol or compression around it, and the same
 * operations done with plain system calls in this process, so the backend's
 * own cost shows as a ratio to the file system's.
 *
 *   backend-bench --root DIR --size BYTES --iterations N [--list[=N,...]] [--range BYTES]
 *                 [--mode both|backend|raw]
 *   backend-bench --url URL --size BYTES --iterations N [--list[=N,...]] [--range BYTES]
 *
 * With --root, the local backend at DIR/backend, and raw system calls at
 * DIR/raw. With --url, any backend backend_new() knows (sftp://..., or a
 * local: URL), in backend mode only: raw system calls have no meaning for a
 * remote store, so its peer is measured outside (bench/run runs OpenSSH's
 * sftp client against the same server). The backend is opened - connected,
 * for a remote one - before the clock starts.
 *
 * One object size per process, so the peak RSS it reports belongs to that
 * size. Each operation runs alone (the next starts when the previous one has
 * finished), which is the latency a single caller sees. `raw` does what the
 * local backend promises for a put - write a temporary file, fsync it, rename
 * it into place, fsync the directory - with nothing around it. The default
 * mode, `both`, alternates the two operation by operation (which goes first
 * alternates too), so both see the same disk: fsync latency on shared or
 * virtual disks drifts by several times within seconds. With --list, 50 and
 * 1,000 small objects are put (not timed) and listed, page by page;
 * --list=50 lists only 50. With --range BYTES, each object is also read in
 * part: its last BYTES bytes (a ranged get at offset size - BYTES; raw: a
 * pread), the op "range".
 *
 * Reads go the way the daemon's do: backend_try_read() first when the
 * backend can serve reads without blocking (the loop thread's read), then
 * backend_read_sync() when the backend has blocking reads (a worker
 * thread's read: this process stands in for the worker), else backend_get()
 * of the whole object.
 *
 * Output: one JSON object on standard output with every sample in
 * milliseconds; bench/run computes the statistics. Exit 1 when an operation
 * fails or a read returns other bytes than were written.
 */

#include "bench-util.h"

#include "storage/backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SIZE ((size_t)1 << 30)
#define MAX_ITERATIONS 100000
#define LIST_OBJECT_SIZE 1024

enum mode { MODE_BACKEND, MODE_RAW, MODE_COUNT_ };

static const char *const mode_names[MODE_COUNT_] = {"backend", "raw"};

struct bench {
    bool modes[MODE_COUNT_];
    char root[PATH_MAX];
    const char *url; /* --url: the backend to drive (no raw mode) */
    size_t size;
    size_t range; /* --range: bytes read at the end of each object, 0 for none */
    unsigned iterations;
    uint8_t *data;
    /* Where try_read puts an object: one byte more than its size, to see that it ends. */
    uint8_t *read_buf;
    /* the backend, at ROOT/backend */
    uv_loop_t loop;
    struct backend *be;
    /* plain files at ROOT/raw */
    int root_fd;
};

static double now_ms(void)
{
    return (double)uv_hrtime() / 1e6;
}

/* --- backend mode: one request at a time on the loop --- */

static void on_done(struct backend_req *req)
{
    *(bool *)req->userdata = true;
}

/* Prepares the common part of a request whose callback sets *done. */
static void be_prepare(struct backend_req *req, const char *key, bool *done)
{
    snprintf(req->key, sizeof(req->key), "%s", key);
    req->cb = on_done;
    req->userdata = done;
    *done = false;
}

/* Runs the loop until a request started with result `r` has finished; its status. */
static int be_wait(struct bench *b, struct backend_req *req, const bool *done, int r)
{
    if (r < 0)
        return r;
    while (!*done)
        uv_run(&b->loop, UV_RUN_ONCE);
    return req->status;
}

/* Puts `n` objects of `len` bytes at once, as concurrent adds do. */
static int be_populate(struct bench *b, const char *dir, unsigned n, size_t len)
{
    struct backend_put *puts = calloc(n, sizeof(*puts));
    bool *done = calloc(n, sizeof(*done));
    struct iovec iov = {.iov_base = b->data, .iov_len = len};
    char key[BACKEND_MAX_KEY];
    unsigned pending = 0;
    int r = 0;

    if (!puts || !done) {
        free(puts);
        free(done);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < n && r == 0; i++) {
        snprintf(key, sizeof(key), "%s/o%06u", dir, i);
        be_prepare(&puts[i].req, key, &done[i]);
        puts[i].iov = &iov;
        puts[i].iovcnt = 1;
        r = backend_put(b->be, &puts[i]);
        if (r == 0)
            pending++;
    }
    for (unsigned i = 0; i < pending; i++) {
        int status = be_wait(b, &puts[i].req, &done[i], 0);
        if (status != 0 && r == 0)
            r = status < 0 ? status : -EIO;
    }
    free(puts);
    free(done);
    return r;
}

/* --- raw mode: the same work with plain system calls --- */

static int raw_fsync_dir(struct bench *b, const char *dir)
{
    int fd = openat(b->root_fd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r;

    if (fd < 0)
        return -errno;
    r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

static int raw_put(struct bench *b, const char *dir, const char *name, size_t len)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    const uint8_t *p = b->data;
    size_t left = len;
    int fd, r = 0;

    snprintf(tmp, sizeof(tmp), "tmp/%s", name);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = openat(b->root_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    while (left > 0 && r == 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0 && errno != EINTR)
            r = -errno;
        if (n > 0) {
            p += n;
            left -= (size_t)n;
        }
    }
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(b->root_fd, tmp, b->root_fd, path) < 0)
        r = -errno;
    return r == 0 ? raw_fsync_dir(b, dir) : r;
}

static int raw_get(struct bench *b, const char *path, uint8_t **out, size_t *out_len)
{
    struct stat st;
    size_t got = 0;
    uint8_t *buf;
    int fd = openat(b->root_fd, path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0 || !(buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1))) {
        close(fd);
        return -ENOMEM;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    *out = buf;
    *out_len = got;
    return 0;
}

/* The last `len` bytes of the object, with one pread, into a malloc'd buffer. */
static int raw_range(struct bench *b, const char *path, uint64_t offset, size_t len, uint8_t **out,
                     size_t *out_len)
{
    size_t got = 0;
    uint8_t *buf;
    int fd = openat(b->root_fd, path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    if (!(buf = malloc(len ? len : 1))) {
        close(fd);
        return -ENOMEM;
    }
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)(offset + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    *out = buf;
    *out_len = got;
    return 0;
}

static int raw_list(struct bench *b, const char *dir, unsigned *count)
{
    int fd = openat(b->root_fd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char **names = NULL;
    size_t n = 0, cap = 0;
    DIR *d;
    int r = 0;

    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    /* Keep the names, as a list request does, so both pay for the same allocations. */
    for (struct dirent *de; r == 0 && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **nn = realloc(names, ncap * sizeof(*nn));
            if (!nn) {
                r = -ENOMEM;
                break;
            }
            names = nn;
            cap = ncap;
        }
        if (!(names[n] = strdup(de->d_name)))
            r = -ENOMEM;
        else
            n++;
    }
    closedir(d);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    *count = (unsigned)n;
    return r;
}

/* --- the measured operations, in either mode --- */

static void key_of(char *out, size_t len, const char *dir, unsigned i)
{
    snprintf(out, len, "%s/o%06u", dir, i);
}

static int do_put(struct bench *b, enum mode m, unsigned i)
{
    char name[32];

    if (m == MODE_RAW) {
        snprintf(name, sizeof(name), "o%06u", i);
        return raw_put(b, "obj", name, b->size);
    }
    char key[BACKEND_MAX_KEY];
    struct iovec iov = {.iov_base = b->data, .iov_len = b->size};
    struct backend_put put = {.iov = &iov, .iovcnt = 1};
    bool done;

    key_of(key, sizeof(key), "obj", i);
    be_prepare(&put.req, key, &done);
    return be_wait(b, &put.req, &done, backend_put(b->be, &put));
}

/*
 * Reads the object back; outside the timing the caller compares it. The
 * result is b->read_buf when try_read served it, else malloc'd.
 */
static int do_get(struct bench *b, enum mode m, unsigned i, uint8_t **out, size_t *out_len)
{
    char key[BACKEND_MAX_KEY];
    struct backend_get get = {.offset = 0, .length = BACKEND_TO_END, .max_len = b->size};
    bool done;
    int r;

    key_of(key, sizeof(key), "obj", i);
    if (m == MODE_RAW)
        return raw_get(b, key, out, out_len);
    if (backend_has(b->be, BACKEND_CAP_READ_NOWAIT)) {
        r = backend_try_read(b->be, key, 0, b->read_buf, b->size + 1, out_len);
        if (r == 0)
            *out = b->read_buf;
        if (r != -EAGAIN)
            return r;
    }
    if (backend_has(b->be, BACKEND_CAP_READ_SYNC)) {
        r = backend_read_sync(b->be, key, 0, b->read_buf, b->size + 1, out_len);
        if (r == 0)
            *out = b->read_buf;
        return r;
    }
    be_prepare(&get.req, key, &done);
    r = be_wait(b, &get.req, &done, backend_get(b->be, &get));
    *out = get.out;
    *out_len = get.out_len;
    return r;
}

/*
 * The object's last b->range bytes, the way do_get reads (try_read, then
 * read_sync, then a ranged backend_get). Malloc'd or b->read_buf, as there.
 */
static int do_range(struct bench *b, enum mode m, unsigned i, uint8_t **out, size_t *out_len)
{
    char key[BACKEND_MAX_KEY];
    uint64_t offset = b->size - b->range;
    struct backend_get get = {.offset = offset, .length = b->range, .max_len = b->range};
    bool done;
    int r;

    key_of(key, sizeof(key), "obj", i);
    if (m == MODE_RAW)
        return raw_range(b, key, offset, b->range, out, out_len);
    if (backend_has(b->be, BACKEND_CAP_READ_NOWAIT)) {
        r = backend_try_read(b->be, key, offset, b->read_buf, b->range, out_len);
        if (r == 0)
            *out = b->read_buf;
        if (r != -EAGAIN)
            return r;
    }
    if (backend_has(b->be, BACKEND_CAP_READ_SYNC)) {
        r = backend_read_sync(b->be, key, offset, b->read_buf, b->range, out_len);
        if (r == 0)
            *out = b->read_buf;
        return r;
    }
    be_prepare(&get.req, key, &done);
    r = be_wait(b, &get.req, &done, backend_get(b->be, &get));
    *out = get.out;
    *out_len = get.out_len;
    return r;
}

static int do_head(struct bench *b, enum mode m, unsigned i)
{
    char key[BACKEND_MAX_KEY];
    struct stat st;

    key_of(key, sizeof(key), "obj", i);
    if (m == MODE_RAW)
        return fstatat(b->root_fd, key, &st, 0) < 0 ? -errno : 0;
    struct backend_head head = {0};
    bool done;
    be_prepare(&head.req, key, &done);
    int r = be_wait(b, &head.req, &done, backend_head(b->be, &head));
    return r == 0 && head.size != b->size ? -EIO : r;
}

static int do_delete(struct bench *b, enum mode m, unsigned i)
{
    char key[BACKEND_MAX_KEY];

    key_of(key, sizeof(key), "obj", i);
    if (m == MODE_RAW) {
        if (unlinkat(b->root_fd, key, 0) < 0)
            return -errno;
        return raw_fsync_dir(b, "obj");
    }
    struct backend_del del = {0};
    bool done;
    be_prepare(&del.req, key, &done);
    return be_wait(b, &del.req, &done, backend_del(b->be, &del));
}

/* Every page of the directory, at the backend's default page size. */
static int do_list(struct bench *b, enum mode m, const char *dir, unsigned *count)
{
    char prefix[BACKEND_MAX_KEY];
    struct backend_list list = {0};
    bool done;
    int r;

    if (m == MODE_RAW)
        return raw_list(b, dir, count);
    snprintf(prefix, sizeof(prefix), "%s/", dir);
    *count = 0;
    do {
        be_prepare(&list.req, prefix, &done);
        r = be_wait(b, &list.req, &done, backend_list(b->be, &list));
        *count += (unsigned)list.nentries;
        backend_list_reset(&list);
        memcpy(list.cursor, list.next_cursor, sizeof(list.cursor));
    } while (r == 0 && list.cursor[0]);
    return r;
}

/* Objects to list. Not timed, so raw files are not synced one by one. */
static int populate(struct bench *b, enum mode m, const char *dir, unsigned n)
{
    char name[32];

    if (m == MODE_BACKEND)
        return be_populate(b, dir, n, LIST_OBJECT_SIZE);
    if (mkdirat(b->root_fd, dir, 0755) < 0 && errno != EEXIST)
        return -errno;
    for (unsigned i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "%s/o%06u", dir, i);
        int fd = openat(b->root_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            return -errno;
        ssize_t w = write(fd, b->data, LIST_OBJECT_SIZE);
        close(fd);
        if (w != LIST_OBJECT_SIZE)
            return w < 0 ? -errno : -EIO;
    }
    return 0;
}

/* --- driver --- */

enum { OP_PUT, OP_GET, OP_RANGE, OP_HEAD, OP_LIST50, OP_LIST1000, OP_DELETE, OP_COUNT_ };

static const char *const op_names[OP_COUNT_] = {"put",     "get",       "range", "head",
                                                "list_50", "list_1000", "delete"};

/* Which of the optional ops run: --range, and the lists of --list. */
struct op_set {
    bool range, list50, list1000;
};

struct samples {
    double *ms[MODE_COUNT_][OP_COUNT_];
    unsigned n[MODE_COUNT_][OP_COUNT_];
};

static int fail(const char *what, int r)
{
    fprintf(stderr, "backend-bench: %s: %s\n", what, r < 0 ? strerror(-r) : "unexpected outcome");
    return 1;
}

/* The modes to run for iteration i, in the order to run them. */
static unsigned order(const struct bench *b, unsigned i, enum mode out[MODE_COUNT_])
{
    unsigned n = 0;

    for (unsigned k = 0; k < MODE_COUNT_; k++) {
        enum mode m = (enum mode)((k + i) % MODE_COUNT_);
        if (b->modes[m])
            out[n++] = m;
    }
    return n;
}

static int one_op(struct bench *b, enum mode m, unsigned op, unsigned i, struct samples *smp)
{
    static const unsigned list_sizes[] = {[OP_LIST50] = 50, [OP_LIST1000] = 1000};
    static const char *const list_dirs[] = {[OP_LIST50] = "la", [OP_LIST1000] = "lb"};
    uint8_t *out = NULL;
    size_t out_len = 0;
    unsigned count = 0;
    double t = now_ms();
    int r = 0;

    switch (op) {
    case OP_PUT:
        r = do_put(b, m, i);
        break;
    case OP_GET:
        r = do_get(b, m, i, &out, &out_len);
        break;
    case OP_RANGE:
        r = do_range(b, m, i, &out, &out_len);
        break;
    case OP_HEAD:
        r = do_head(b, m, i);
        break;
    case OP_DELETE:
        r = do_delete(b, m, i);
        break;
    default:
        r = do_list(b, m, list_dirs[op], &count);
        break;
    }
    smp->ms[m][op][smp->n[m][op]++] = now_ms() - t;
    if (r == 0 && op == OP_GET && (out_len != b->size || memcmp(out, b->data, b->size) != 0))
        r = -EIO;
    if (r == 0 && op == OP_RANGE &&
        (out_len != b->range || memcmp(out, b->data + b->size - b->range, b->range) != 0))
        r = -EIO;
    if (r == 0 && (op == OP_LIST50 || op == OP_LIST1000) && count != list_sizes[op])
        r = -EIO;
    if (out != b->read_buf)
        free(out);
    if (r != 0) {
        char what[64];
        snprintf(what, sizeof(what), "%s %s", mode_names[m], op_names[op]);
        return fail(what, r);
    }
    return 0;
}

static int run(struct bench *b, struct op_set set)
{
    struct samples smp = {0};
    enum mode modes[MODE_COUNT_];
    int status = 0;

    for (unsigned m = 0; m < MODE_COUNT_; m++) {
        for (unsigned op = 0; op < OP_COUNT_; op++) {
            smp.ms[m][op] = calloc(b->iterations, sizeof(double));
            if (!smp.ms[m][op])
                return fail("memory", -ENOMEM);
        }
    }
    for (unsigned op = 0; op < OP_COUNT_ && status == 0; op++) {
        if ((op == OP_LIST50 && !set.list50) || (op == OP_LIST1000 && !set.list1000) ||
            (op == OP_RANGE && !set.range))
            continue;
        if (op == OP_LIST50 || op == OP_LIST1000) {
            for (unsigned m = 0; m < MODE_COUNT_ && status == 0; m++) {
                int r = b->modes[m] ? populate(b, (enum mode)m, op == OP_LIST50 ? "la" : "lb",
                                               op == OP_LIST50 ? 50 : 1000)
                                    : 0;
                if (r != 0)
                    status = fail("populating a list", r);
            }
        }
        for (unsigned i = 0; i < b->iterations && status == 0; i++) {
            unsigned n = order(b, i, modes);
            for (unsigned k = 0; k < n && status == 0; k++)
                status = one_op(b, modes[k], op, i, &smp);
        }
    }
    if (status == 0) {
        printf("{\n  \"schema\": \"cairn-backend-bench/1\",\n");
        printf("  \"size\": %zu,\n  \"iterations\": %u,\n  \"peak_rss_kib\": %ld,\n", b->size,
               b->iterations, bench_peak_rss_kib());
        printf("  \"modes\": {");
        bool first_mode = true;
        for (unsigned m = 0; m < MODE_COUNT_; m++) {
            if (!b->modes[m])
                continue;
            printf("%s\n    \"%s\": {", first_mode ? "" : ",", mode_names[m]);
            first_mode = false;
            bool first_op = true;
            for (unsigned op = 0; op < OP_COUNT_; op++) {
                if (smp.n[m][op] == 0)
                    continue;
                printf("%s\n      \"%s\": [", first_op ? "" : ",", op_names[op]);
                first_op = false;
                for (unsigned i = 0; i < smp.n[m][op]; i++)
                    printf("%s%.6f", i ? ", " : "", smp.ms[m][op][i]);
                printf("]");
            }
            printf("\n    }");
        }
        printf("\n  }\n}\n");
    }
    for (unsigned m = 0; m < MODE_COUNT_; m++) {
        for (unsigned op = 0; op < OP_COUNT_; op++)
            free(smp.ms[m][op]);
    }
    return status;
}

static int open_raw(struct bench *b)
{
    char dir[PATH_MAX + 8];

    snprintf(dir, sizeof(dir), "%s/raw", b->root);
    if (mkdir(b->root, 0755) < 0 && errno != EEXIST)
        return -errno;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -errno;
    b->root_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (b->root_fd < 0)
        return -errno;
    if ((mkdirat(b->root_fd, "obj", 0755) < 0 && errno != EEXIST) ||
        (mkdirat(b->root_fd, "tmp", 0755) < 0 && errno != EEXIST))
        return -errno;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"root", required_argument, NULL, 'r'},       {"size", required_argument, NULL, 's'},
        {"iterations", required_argument, NULL, 'n'}, {"mode", required_argument, NULL, 'm'},
        {"list", optional_argument, NULL, 'l'},       {"url", required_argument, NULL, 'u'},
        {"range", required_argument, NULL, 'g'},      {0},
    };
    struct bench b = {.modes = {true, true}, .iterations = 10, .root_fd = -1};
    size_t data_len;
    struct op_set set = {0};
    bool mode_given = false;
    uint64_t v;
    int opt, r, status;
    const char *msg;
    char url[PATH_MAX + 16];

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'r':
            if (optarg[0] != '/' || strlen(optarg) >= sizeof(b.root) - 16)
                goto usage;
            snprintf(b.root, sizeof(b.root), "%s", optarg);
            break;
        case 's':
            if (bench_parse_uint(optarg, MAX_SIZE, &v) < 0)
                goto usage;
            b.size = (size_t)v;
            break;
        case 'n':
            if (bench_parse_uint(optarg, MAX_ITERATIONS, &v) < 0 || v == 0)
                goto usage;
            b.iterations = (unsigned)v;
            break;
        case 'm':
            b.modes[MODE_BACKEND] = strcmp(optarg, "backend") == 0 || strcmp(optarg, "both") == 0;
            b.modes[MODE_RAW] = strcmp(optarg, "raw") == 0 || strcmp(optarg, "both") == 0;
            if (!b.modes[MODE_BACKEND] && !b.modes[MODE_RAW])
                goto usage;
            mode_given = true;
            break;
        case 'l':
            if (!optarg) {
                set.list50 = set.list1000 = true;
                break;
            }
            for (char *tok = optarg, *save = NULL; (tok = strtok_r(tok, ",", &save)); tok = NULL) {
                if (strcmp(tok, "50") == 0)
                    set.list50 = true;
                else if (strcmp(tok, "1000") == 0)
                    set.list1000 = true;
                else
                    goto usage;
            }
            break;
        case 'u':
            if (strlen(optarg) >= BACKEND_MAX_URL)
                goto usage;
            b.url = optarg;
            break;
        case 'g':
            if (bench_parse_uint(optarg, MAX_SIZE, &v) < 0 || v == 0)
                goto usage;
            b.range = (size_t)v;
            set.range = true;
            break;
        default:
            goto usage;
        }
    }
    if (!b.root[0] == !b.url || optind < argc || b.range > b.size)
        goto usage;
    if (b.url) {
        /* Raw system calls only mean something next to a local directory. */
        if (mode_given && b.modes[MODE_RAW])
            goto usage;
        b.modes[MODE_RAW] = false;
    }

    data_len = b.size > LIST_OBJECT_SIZE ? b.size : LIST_OBJECT_SIZE;
    b.data = malloc(data_len);
    /* Untouched unless try_read fills it, so it costs no memory when reads miss. */
    b.read_buf = malloc(b.size + 1);
    if (!b.data || !b.read_buf)
        return fail("memory", -ENOMEM);
    /* Incompressible and different per run; the backend stores bytes as they are anyway. */
    bench_fill(b.data, data_len, uv_hrtime() | 1);
    if (!b.url && (r = open_raw(&b)) < 0) {
        free(b.data);
        free(b.read_buf);
        return fail(b.root, r);
    }
    r = uv_loop_init(&b.loop);
    if (r < 0)
        return fail("loop", r);
    if (b.url)
        snprintf(url, sizeof(url), "%s", b.url);
    else
        snprintf(url, sizeof(url), "local:%s/backend", b.root);
    r = backend_new(&b.be, &b.loop, url, &msg);
    if (r < 0) {
        /* The URL may name a key file; it holds no secret itself. */
        fprintf(stderr, "backend-bench: %s: %s\n", url, msg ? msg : strerror(-r));
        return 1;
    }
    status = run(&b, set);
    backend_free(b.be);
    uv_run(&b.loop, UV_RUN_DEFAULT);
    r = uv_loop_close(&b.loop);
    if (b.root_fd >= 0)
        close(b.root_fd);
    free(b.data);
    free(b.read_buf);
    if (r < 0)
        return fail("handles left open", r);
    return status;

usage:
    fprintf(stderr, "usage: backend-bench --root DIR --size BYTES [--iterations N] "
                    "[--mode both|backend|raw] [--list[=50,1000]] [--range BYTES]\n"
                    "       backend-bench --url URL --size BYTES [--iterations N] "
                    "[--list[=50,1000]] [--range BYTES]\n");
    return 2;
}
