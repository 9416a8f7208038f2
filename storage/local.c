/*
 * The local backend: objects are files under a root directory, sharded by the
 * first two characters of their name ("chunks/ab/abcd..."). A put writes a
 * temporary file, fsyncs it, renames it into place and fsyncs the directory.
 *
 * Puts are group-committed: while one batch is being written and synced on a
 * worker thread, new puts queue up and go out together in the next batch, so
 * the directory fsyncs (and, on ext4, the journal commits that file fsyncs
 * trigger) are shared by every concurrent writer.
 */
#include "storage/backend.h"
#include "proto/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Keys never start with a dot, so this name cannot collide with an object directory. */
#define LOCAL_TMP_DIR ".tmp"
#define LOCAL_BATCH_MAX 256

struct local {
    char root[PATH_MAX];
    int root_fd;
    /* Loop-thread state: the queue of puts waiting for the next batch. */
    struct backend_req *queue_head, *queue_tail;
    bool batch_running;
    uv_work_t batch_work;
    struct backend_req *batch; /* owned by the worker while batch_running */
    /* Starts batches on the next loop turn, so puts issued in the same turn share one. */
    uv_idle_t kick;
    bool kick_active;
    struct backend *be;
    atomic_uint_fast64_t tmp_seq;
};

struct local_job {
    uv_work_t work;
    struct backend_req *req;
    struct local *lp;
};

static struct local *local_of(struct backend *be)
{
    return be->priv;
}

/* "dir/name" -> "dir/na/name"; the key was validated by backend_start(). */
static void object_path(const char *key, char *out, size_t out_len)
{
    const char *slash = strchr(key, '/');
    int dir_len = (int)(slash - key);
    snprintf(out, out_len, "%.*s/%.2s/%s", dir_len, key, slash + 1, slash + 1);
}

static void shard_dir(const char *path, char *out, size_t out_len)
{
    const char *last = strrchr(path, '/');
    snprintf(out, out_len, "%.*s", (int)(last - path), path);
}

static int fsync_dir_at(int root_fd, const char *rel)
{
    int fd = openat(root_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

/*
 * Creates "dir" and "dir/xx" below the root as needed. The new entries are
 * made durable by the batch's final sync; *created tells the batch there is
 * one to make durable.
 */
static int ensure_dirs(int root_fd, const char *shard, bool *created)
{
    char parent[BACKEND_MAX_KEY];

    if (mkdirat(root_fd, shard, 0755) == 0) {
        *created = true;
        return 0;
    }
    if (errno == EEXIST)
        return 0;
    if (errno != ENOENT)
        return -errno;
    shard_dir(shard, parent, sizeof(parent));
    if (mkdirat(root_fd, parent, 0755) < 0 && errno != EEXIST)
        return -errno;
    if (mkdirat(root_fd, shard, 0755) < 0 && errno != EEXIST)
        return -errno;
    *created = true;
    return 0;
}

/* Per-object state of a batch, kept on the heap: batches may hold LOCAL_BATCH_MAX objects. */
struct batch_item {
    struct backend_req *req;
    int fd;
    bool via_tmp; /* written to `tmp`, renamed into place after the sync */
    char tmp[48];
    char path[BACKEND_MAX_KEY + 8];
    char shard[BACKEND_MAX_KEY + 8];
};

/*
 * Writes one object, leaving the file open for the sync phase. A new object
 * is created in place: nothing reads it before the metadata that names it is
 * committed, which happens only after the batch's sync. An object that
 * already exists (a concurrent writer of the same content, or a leftover of
 * a crash) is replaced atomically through a temporary file instead, so a
 * reader of the existing one never sees it half-written.
 */
static int write_object(struct local *lp, struct batch_item *it)
{
    const char *name = it->path;
    int r;

    it->fd = openat(lp->root_fd, it->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (it->fd < 0 && errno == EEXIST) {
        uint64_t seq = atomic_fetch_add(&lp->tmp_seq, 1);
        snprintf(it->tmp, sizeof(it->tmp), LOCAL_TMP_DIR "/%ld.%llu", (long)getpid(),
                 (unsigned long long)seq);
        it->via_tmp = true;
        name = it->tmp;
        it->fd = openat(lp->root_fd, it->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (it->fd < 0)
        return -errno;
    r = util_write_all(it->fd, it->req->data, it->req->len);
    if (r < 0) {
        close(it->fd);
        it->fd = -1;
        unlinkat(lp->root_fd, name, 0);
    }
    return r;
}

/* Makes everything written so far durable: the one file's fsync, or one syncfs for many. */
static int sync_batch(struct local *lp, struct batch_item *items, size_t n, size_t nfiles,
                      bool dirs_changed)
{
    if (nfiles > 1 || dirs_changed)
        return syncfs(lp->root_fd) < 0 ? -errno : 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].fd >= 0 && items[i].req->status == 0 && fsync(items[i].fd) < 0)
            return -errno;
    }
    return 0;
}

static void fail_all(struct batch_item *items, size_t n, int r)
{
    for (size_t i = 0; r < 0 && i < n; i++) {
        if (items[i].req->status == 0)
            items[i].req->status = r;
    }
}

/*
 * Writes a batch so that its objects share the cost of durability: every
 * file is written, then one sync covers them all (syncfs() for several: one
 * journal commit and cache flush however many files). Objects replaced
 * through temporary files are renamed after that sync, and their renames
 * made durable by a second one. A lone new object costs an fsync of the file
 * and of its directory.
 */
static void batch_work(uv_work_t *work)
{
    struct local *lp = container_of(work, struct local, batch_work);
    struct batch_item *items;
    size_t n = 0, nfiles = 0, nrenamed = 0;
    bool dirs_created = false;
    int r;

    for (struct backend_req *req = lp->batch; req; req = req->next_)
        n++;
    items = calloc(n, sizeof(*items));
    if (!items) {
        for (struct backend_req *req = lp->batch; req; req = req->next_)
            req->status = -ENOMEM;
        return;
    }
    n = 0;
    for (struct backend_req *req = lp->batch; req; req = req->next_, n++) {
        struct batch_item *it = &items[n];
        it->req = req;
        it->fd = -1;
        object_path(req->key, it->path, sizeof(it->path));
        shard_dir(it->path, it->shard, sizeof(it->shard));
        req->status = ensure_dirs(lp->root_fd, it->shard, &dirs_created);
        if (req->status == 0)
            req->status = write_object(lp, it);
        nfiles += req->status == 0;
    }

    r = sync_batch(lp, items, n, nfiles, dirs_created);
    fail_all(items, n, r);
    for (size_t i = 0; i < n; i++) {
        struct batch_item *it = &items[i];
        if (it->fd < 0)
            continue;
        if (close(it->fd) < 0 && it->req->status == 0)
            it->req->status = -errno;
        it->fd = -1;
        if (it->via_tmp) {
            if (it->req->status == 0 && renameat(lp->root_fd, it->tmp, lp->root_fd, it->path) < 0)
                it->req->status = -errno;
            if (it->req->status != 0)
                unlinkat(lp->root_fd, it->tmp, 0);
            else
                nrenamed++;
        } else if (it->req->status != 0) {
            unlinkat(lp->root_fd, it->path, 0);
        }
    }

    /* Directory entries: covered by syncfs above, except for renames and a lone new file. */
    if (nrenamed > 1) {
        r = syncfs(lp->root_fd) < 0 ? -errno : 0;
        fail_all(items, n, r);
    } else if (nrenamed == 1 || (nfiles == 1 && !dirs_created)) {
        for (size_t i = 0; i < n; i++) {
            if (items[i].req->status == 0 && (items[i].via_tmp || nfiles == 1)) {
                r = fsync_dir_at(lp->root_fd, items[i].shard);
                if (r < 0)
                    items[i].req->status = r;
            }
        }
    }
    free(items);
}

static void batch_start(struct local *lp);

static void batch_done(uv_work_t *work, int status)
{
    struct local *lp = container_of(work, struct local, batch_work);
    struct backend_req *req = lp->batch, *next;

    lp->batch = NULL;
    lp->batch_running = false;
    for (; req; req = next) {
        next = req->next_;
        req->next_ = NULL;
        if (status < 0)
            req->status = status;
        backend_complete(req);
    }
    batch_start(lp);
}

static void batch_start(struct local *lp)
{
    struct backend_req **tail = &lp->batch;
    size_t n = 0;

    if (lp->batch_running || !lp->queue_head)
        return;
    while (lp->queue_head && n < LOCAL_BATCH_MAX) {
        struct backend_req *req = lp->queue_head;
        lp->queue_head = req->next_;
        req->next_ = NULL;
        *tail = req;
        tail = &req->next_;
        n++;
    }
    if (!lp->queue_head)
        lp->queue_tail = NULL;
    lp->batch_running = true;
    struct backend *be = lp->batch->be;
    int r = uv_queue_work(be->loop, &lp->batch_work, batch_work, batch_done);
    if (r < 0) {
        /* Cannot happen with a valid loop; fail the batch rather than lose it. */
        for (struct backend_req *req = lp->batch; req; req = req->next_)
            req->status = r;
        batch_done(&lp->batch_work, r);
    }
}

static void on_kick(uv_idle_t *h)
{
    struct local *lp = container_of(h, struct local, kick);
    uv_idle_stop(h);
    lp->kick_active = false;
    batch_start(lp);
}

static int local_put(struct backend *be, struct backend_req *req)
{
    struct local *lp = local_of(be);

    if (lp->queue_tail)
        lp->queue_tail->next_ = req;
    else
        lp->queue_head = req;
    lp->queue_tail = req;
    if (!lp->batch_running && !lp->kick_active) {
        lp->kick_active = true;
        uv_idle_start(&lp->kick, on_kick);
    }
    return 0;
}

/*
 * Reads an object whole (out != NULL) or only its size. 0, BACKEND_E_NOT_FOUND,
 * BACKEND_E_TOO_LARGE, or negative errno.
 */
static int read_object(struct local *lp, const char *key, size_t max_len, uint8_t **out,
                       size_t *len, uint64_t *size)
{
    char path[BACKEND_MAX_KEY + 8];
    struct stat st;
    uint8_t *buf = NULL;
    size_t got = 0;
    int fd, r = 0;

    object_path(key, path, sizeof(path));
    fd = openat(lp->root_fd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? BACKEND_E_NOT_FOUND : -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (size)
        *size = (uint64_t)st.st_size;
    if (!out)
        goto out;
    if ((uint64_t)st.st_size > max_len) {
        r = BACKEND_E_TOO_LARGE;
        goto out;
    }
    buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            goto out;
        }
        if (n == 0)
            break; /* truncated underneath us: return what is there, the caller verifies */
        got += (size_t)n;
    }
    *out = buf;
    *len = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return r;
}

static int local_read_sync(struct backend *be, const char *key, size_t max_len, uint8_t **out,
                           size_t *len)
{
    return read_object(local_of(be), key, max_len, out, len, NULL);
}

static int delete_object(struct local *lp, struct backend_req *req)
{
    char path[BACKEND_MAX_KEY + 8], shard[BACKEND_MAX_KEY + 8];

    object_path(req->key, path, sizeof(path));
    if (unlinkat(lp->root_fd, path, 0) < 0)
        return errno == ENOENT ? BACKEND_E_NOT_FOUND : -errno;
    shard_dir(path, shard, sizeof(shard));
    return fsync_dir_at(lp->root_fd, shard);
}

static int add_key(struct backend_req *req, size_t *cap, const char *dir, const char *name)
{
    if (req->nkeys == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        char **keys = realloc(req->keys, ncap * sizeof(*keys));
        if (!keys)
            return -ENOMEM;
        req->keys = keys;
        *cap = ncap;
    }
    if (asprintf(&req->keys[req->nkeys], "%s/%s", dir, name) < 0)
        return -ENOMEM;
    req->nkeys++;
    return 0;
}

/* Lists every key of one top-level directory ("chunks", "manifests"). */
static int list_objects(struct local *lp, struct backend_req *req)
{
    char dir[BACKEND_MAX_KEY];
    size_t cap = 0;
    int r = 0;

    snprintf(dir, sizeof(dir), "%.*s", (int)strcspn(req->key, "/"), req->key);
    int dfd = openat(lp->root_fd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : -errno;
    DIR *top = fdopendir(dfd);
    if (!top) {
        close(dfd);
        return -errno;
    }
    for (struct dirent *de; r == 0 && (de = readdir(top));) {
        if (de->d_name[0] == '.')
            continue;
        int sfd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sfd < 0)
            continue;
        DIR *shard = fdopendir(sfd);
        if (!shard) {
            close(sfd);
            continue;
        }
        for (struct dirent *oe; r == 0 && (oe = readdir(shard));) {
            if (oe->d_name[0] != '.')
                r = add_key(req, &cap, dir, oe->d_name);
        }
        closedir(shard);
    }
    closedir(top);
    return r;
}

static void job_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_req *req = job->req;

    switch (req->op) {
    case BACKEND_OP_GET:
        req->status = read_object(job->lp, req->key, req->max_len, &req->out, &req->out_len, NULL);
        break;
    case BACKEND_OP_HEAD:
        req->status = read_object(job->lp, req->key, 0, NULL, NULL, &req->size);
        break;
    case BACKEND_OP_DELETE:
        req->status = delete_object(job->lp, req);
        break;
    case BACKEND_OP_LIST:
        req->status = list_objects(job->lp, req);
        break;
    case BACKEND_OP_PUT:
        req->status = -EINVAL;
        break;
    }
}

static void job_done(uv_work_t *work, int status)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_req *req = job->req;

    free(job);
    if (status < 0)
        req->status = status;
    backend_complete(req);
}

static int local_job(struct backend *be, struct backend_req *req)
{
    struct local_job *job = malloc(sizeof(*job));
    int r;

    if (!job)
        return -ENOMEM;
    job->req = req;
    job->lp = local_of(be);
    r = uv_queue_work(be->loop, &job->work, job_work, job_done);
    if (r < 0)
        free(job);
    return r;
}

/* Removes temporary files a crash left behind; none of them was ever acknowledged. */
static void clean_tmp(struct local *lp)
{
    int dfd = openat(lp->root_fd, LOCAL_TMP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] != '.')
            unlinkat(dfd, de->d_name, 0);
    }
    closedir(d);
}

static int local_open(struct backend *be, const char *url, const char *data_dir)
{
    struct local *lp = local_of(be);
    const char *path;
    int n, r;

    if (strcmp(url, "local") == 0 && data_dir)
        n = snprintf(lp->root, sizeof(lp->root), "%s/objects", data_dir);
    else if (strncmp(url, "local:", 6) == 0 || strncmp(url, "file://", 7) == 0) {
        path = url[0] == 'l' ? url + 6 : url + 7;
        if (path[0] != '/')
            return -EINVAL;
        n = snprintf(lp->root, sizeof(lp->root), "%s", path);
    } else
        return -EINVAL;
    if (n < 0 || (size_t)n >= sizeof(lp->root))
        return -ENAMETOOLONG;
    r = util_mkdir_p(lp->root, 0755);
    if (r < 0)
        return r;
    lp->root_fd = open(lp->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lp->root_fd < 0)
        return -errno;
    if (mkdirat(lp->root_fd, LOCAL_TMP_DIR, 0755) < 0 && errno != EEXIST) {
        r = -errno;
        close(lp->root_fd);
        return r;
    }
    clean_tmp(lp);
    atomic_init(&lp->tmp_seq, 0);
    lp->be = be;
    uv_idle_init(be->loop, &lp->kick);
    return 0;
}

static void on_kick_closed(uv_handle_t *h)
{
    struct local *lp = container_of((uv_idle_t *)h, struct local, kick);
    backend_release(lp->be);
}

static void local_close(struct backend *be)
{
    struct local *lp = local_of(be);
    if (lp->root_fd >= 0)
        close(lp->root_fd);
    lp->root_fd = -1;
    uv_close((uv_handle_t *)&lp->kick, on_kick_closed);
}

static void local_describe(struct backend *be, char *out, size_t out_len)
{
    snprintf(out, out_len, "local:%s", local_of(be)->root);
}

const struct backend_ops backend_local_ops = {
    .name = "local",
    .caps = BACKEND_CAP_LIST | BACKEND_CAP_ATOMIC_PUT | BACKEND_CAP_GROUP_SYNC,
    .priv_size = sizeof(struct local),
    .open = local_open,
    .close = local_close,
    .put = local_put,
    .get = local_job,
    .head = local_job,
    .del = local_job,
    .list = local_job,
    .describe = local_describe,
    .read_sync = local_read_sync,
};
