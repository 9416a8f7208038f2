/*
 * The local backend: objects are files under a root directory (layout in
 * local-int.h). Every operation that touches the disk runs on the libuv
 * threadpool, one job per attempt (local-job.c); this file has opening and
 * closing, and the reads. Reads share a cache of open descriptors
 * (local-fdcache.c), which is also what lets try_read serve a read on the
 * loop thread without ever opening a file there.
 */
#include "storage/local/local.h"
#include "storage/local/local-int.h"
#include "proto/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- reads ------------------------------------------------------------------------ */

/*
 * Reads up to `len` bytes at `offset`, stopping early only at the end of
 * the file. *got is what was read. 0 or -errno.
 */
static int pread_full(int fd, uint64_t offset, void *buf, size_t len, size_t *got)
{
    size_t done = 0;

    while (done < len && offset + done <= (uint64_t)INT64_MAX) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *got = done;
    return 0;
}

static void get_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_get *get = container_of(job->req, struct backend_get, req);
    struct local_fd *file;
    struct stat st;
    uint64_t size, want;
    uint8_t *buf;
    size_t got = 0;
    int r;

    r = local_fdcache_open(&job->lp->cache, job->lp->root_fd, get->req.key, &file);
    if (r != 0) {
        job->status = r;
        return;
    }
    if (fstat(file->fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        r = BACKEND_E_NOT_FOUND;
        goto out;
    }
    size = (uint64_t)st.st_size;
    want = get->offset >= size ? 0 : size - get->offset;
    if (get->length < want)
        want = get->length;
    /* Before allocating: the limit is what keeps a huge object from taking the memory. */
    if (want > get->max_len) {
        r = BACKEND_E_TOO_LARGE;
        goto out;
    }
    /* Never NULL on success, so an empty result is still a buffer the caller frees. */
    buf = malloc(want > 0 ? (size_t)want : 1);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    /* A file cut short under us gives what is there; the caller checks what it reads. */
    r = want > 0 ? pread_full(file->fd, get->offset, buf, (size_t)want, &got) : 0;
    if (r < 0) {
        free(buf);
        goto out;
    }
    get->out = buf;
    get->out_len = got;
out:
    local_fdcache_release(&job->lp->cache, file);
    job->status = r;
}

static int local_get(struct backend *be, struct backend_req *req)
{
    return local_queue(be, req, get_work);
}

static void head_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_head *head = container_of(job->req, struct backend_head, req);
    struct stat st;

    if (fstatat(job->lp->root_fd, head->req.key, &st, 0) < 0)
        job->status = errno == ENOENT || errno == ENOTDIR ? BACKEND_E_NOT_FOUND : -errno;
    else if (!S_ISREG(st.st_mode))
        job->status = BACKEND_E_NOT_FOUND;
    else
        head->size = (uint64_t)st.st_size;
}

static int local_head(struct backend *be, struct backend_req *req)
{
    return local_queue(be, req, head_work);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct backend_entry *)a)->key, ((const struct backend_entry *)b)->key);
}

/*
 * Collects the keys after the cursor into `cand` (room for 2 * (want + 1)),
 * keeping only the smallest want + 1: when the array fills, it is sorted and
 * cut, so a page costs O(n log want) however large the directory is. The
 * extra key tells whether another page follows. *n is how many it holds.
 */
static int collect_keys(DIR *d, const struct backend_list *list, size_t dir_len, size_t want,
                        struct backend_entry *cand, size_t *n)
{
    size_t cap = 2 * (want + 1), have = 0;
    struct dirent *de;

    for (;;) {
        errno = 0;
        de = readdir(d);
        if (!de)
            break;
        size_t name_len = strlen(de->d_name);
        if (de->d_name[0] == '.' || de->d_type == DT_DIR || dir_len + name_len >= BACKEND_MAX_KEY)
            continue;
        if (have == cap) {
            qsort(cand, have, sizeof(*cand), cmp_entry);
            have = want + 1;
        }
        struct backend_entry *e = &cand[have];
        memcpy(e->key, list->req.key, dir_len);
        memcpy(e->key + dir_len, de->d_name, name_len + 1);
        /* Names no key could have are not objects (and could not be read back). */
        if (!backend_key_valid(e->key) || strcmp(e->key, list->cursor) <= 0)
            continue;
        e->size = 0;
        have++;
    }
    if (errno != 0)
        return -errno;
    qsort(cand, have, sizeof(*cand), cmp_entry);
    *n = have;
    return 0;
}

/* Fills in sizes and times; entries that vanished meanwhile (a concurrent delete) are left out. */
static int stat_entries(int dir_fd, size_t dir_len, struct backend_entry *entries, size_t *n)
{
    size_t kept = 0;
    struct stat st;

    for (size_t i = 0; i < *n; i++) {
        if (fstatat(dir_fd, entries[i].key + dir_len, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;
            return -errno;
        }
        if (!S_ISREG(st.st_mode))
            continue;
        entries[i].size = (uint64_t)st.st_size;
        entries[i].mtime = (int64_t)st.st_mtim.tv_sec;
        if (kept != i)
            entries[kept] = entries[i];
        kept++;
    }
    *n = kept;
    return 0;
}

static int list_page(struct local *lp, struct backend_list *list)
{
    size_t want = list->max_keys ? list->max_keys : BACKEND_LIST_PAGE;
    size_t dir_len = strlen(list->req.key), n = 0;
    char dir[BACKEND_MAX_KEY];
    struct backend_entry *cand, *shrunk;
    DIR *d;
    int fd, r;

    /* The prefix is "<dir>/" (checked by the front end); the directory is without the slash. */
    memcpy(dir, list->req.key, dir_len - 1);
    dir[dir_len - 1] = '\0';
    fd = openat(lp->root_fd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    cand = malloc(2 * (want + 1) * sizeof(*cand));
    if (!cand) {
        closedir(d);
        return -ENOMEM;
    }
    r = collect_keys(d, list, dir_len, want, cand, &n);
    if (r == 0 && n > want) {
        n = want;
        memcpy(list->next_cursor, cand[want - 1].key, sizeof(list->next_cursor));
    }
    if (r == 0)
        r = stat_entries(dirfd(d), dir_len, cand, &n);
    closedir(d);
    if (r < 0 || n == 0) {
        free(cand);
        return r;
    }
    shrunk = realloc(cand, n * sizeof(*cand));
    list->entries = shrunk ? shrunk : cand;
    list->nentries = n;
    return 0;
}

static void list_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_list *list = container_of(job->req, struct backend_list, req);

    job->status = list_page(job->lp, list);
    if (job->status != 0) {
        list->next_cursor[0] = '\0';
        backend_list_reset(list);
    }
}

static int local_list(struct backend *be, struct backend_req *req)
{
    return local_queue(be, req, list_work);
}

static int local_read_sync(struct backend *be, const char *key, uint64_t offset, void *buf,
                           size_t len, size_t *got)
{
    struct local *lp = local_of(be);
    struct local_fd *file;
    int r;

    *got = 0;
    r = local_fdcache_open(&lp->cache, lp->root_fd, key, &file);
    if (r != 0)
        return r;
    r = pread_full(file->fd, offset, buf, len, got);
    local_fdcache_release(&lp->cache, file);
    return r;
}

/*
 * The loop thread's read: only through a descriptor that is already cached
 * (opening one could block on a directory lookup), and with RWF_NOWAIT, so
 * that data which is not in the page cache makes it give up instead of
 * waiting for the disk. A short read is followed up, because RWF_NOWAIT may
 * stop where the cached pages end; only 0 bytes means the end of the file.
 */
static int local_try_read(struct backend *be, const char *key, uint64_t offset, void *buf,
                          size_t len, size_t *got)
{
    struct local *lp = local_of(be);
    struct local_fd *file = local_fdcache_lookup(&lp->cache, key);
    size_t done = 0;
    int r = 0;

    *got = 0;
    if (!file)
        return -EAGAIN;
    while (done < len && offset + done <= (uint64_t)INT64_MAX) {
        struct iovec v = {.iov_base = (char *)buf + done, .iov_len = len - done};
        ssize_t n = preadv2(file->fd, &v, 1, (off_t)(offset + done), RWF_NOWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            /* EOPNOTSUPP: the file system cannot tell, so the read might block. */
            r = errno == EAGAIN || errno == EOPNOTSUPP ? -EAGAIN : -errno;
            break;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    local_fdcache_release(&lp->cache, file);
    if (r == 0)
        *got = done;
    return r;
}

/* ---- opening and closing -------------------------------------------------------- */

static int fsync_path(const char *path)
{
    int fd, r;

    if (backend_sync_disabled())
        return 0;
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

/* Removes files a crash left in .tmp; none of them was ever acknowledged. */
static int empty_tmp(struct local *lp)
{
    int fd = openat(lp->root_fd, LOCAL_TMP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d;

    if (fd < 0)
        return -errno;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -errno;
    }
    for (struct dirent *de; (de = readdir(d));) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            unlinkat(fd, de->d_name, 0);
    }
    closedir(d);
    return 0;
}

/* The root from "local:/abs/path" or "file:///abs/path"; -EINVAL with *msg otherwise. */
static int parse_root(struct local *lp, const char *url, const char **msg)
{
    const char *path = NULL;
    int n;

    if (strncmp(url, "local:", 6) == 0)
        path = url + 6;
    else if (strncmp(url, "file://", 7) == 0)
        path = url + 7;
    if (!path || path[0] != '/') {
        *msg = "the local backend needs an absolute path (local:/PATH or file:///PATH)";
        return -EINVAL;
    }
    n = snprintf(lp->root, sizeof(lp->root), "%s", path);
    if (n < 0 || (size_t)n >= sizeof(lp->root)) {
        *msg = "the local backend's path is too long";
        return -ENAMETOOLONG;
    }
    /* Without trailing slashes, the last component is the root's own name. */
    while (n > 1 && lp->root[n - 1] == '/')
        lp->root[--n] = '\0';
    return 0;
}

/*
 * Creates the root if needed and makes everything under it durable before
 * anything is served: a run that crashed (kill -9) may have left a
 * directory, a pack file's entry or appended records that were never synced
 * and sit only in the page cache. The restart would find them and build on
 * them (replay commits records it reads; dir_ensure() takes an existing
 * directory as durable), and a power cut after that would lose them. One
 * syncfs() of the root's file system covers all of it, and the root's own
 * entry in its parent gets an fsync (the parent may be another file system
 * when the root is a mount point).
 */
static int open_root(struct local *lp, const char **msg)
{
    char parent[PATH_MAX];
    int r;

    if (backend_read_only()) {
        lp->root_fd = open(lp->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        *msg = lp->root_fd < 0 ? "cannot open the local backend's directory" : NULL;
        return lp->root_fd < 0 ? -errno : 0;
    }
    r = util_mkdir_p(lp->root, 0700);
    if (r < 0) {
        *msg = "cannot create the local backend's directory";
        return r;
    }
    lp->root_fd = open(lp->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lp->root_fd < 0) {
        *msg = "cannot open the local backend's directory";
        return -errno;
    }
    /* Its own entry, whether this run made the root or a crashed one did. */
    snprintf(parent, sizeof(parent), "%s", lp->root);
    char *slash = strrchr(parent, '/');
    if (slash)
        slash[slash == parent ? 1 : 0] = '\0';
    r = fsync_path(slash ? parent : ".");
    if (r == 0 && mkdirat(lp->root_fd, LOCAL_TMP_DIR, 0700) < 0 && errno != EEXIST)
        r = -errno;
    if (r == 0)
        r = empty_tmp(lp);
    if (r == 0 && backend_sync_disabled())
        backend_log(BACKEND_LOG_WARN, "CAIRN_TEST_NO_SYNC=1: nothing is synced, for tests only");
    else if (r == 0 && syncfs(lp->root_fd) < 0)
        r = -errno;
    if (r < 0) {
        *msg = "cannot prepare the local backend's directory";
        close(lp->root_fd);
    }
    return r;
}

static int local_open(struct backend *be, const char *url, const char **msg)
{
    struct local *lp = local_of(be);
    int r;

    lp->root_fd = -1;
    r = parse_root(lp, url, msg);
    if (r == 0)
        r = open_root(lp, msg);
    if (r < 0)
        return r;
    r = uv_mutex_init(&lp->dir_lock);
    if (r == 0) {
        r = local_fdcache_init(&lp->cache);
        if (r < 0)
            uv_mutex_destroy(&lp->dir_lock);
    }
    if (r < 0) {
        close(lp->root_fd);
        return r;
    }
    atomic_init(&lp->tmp_seq, 0);
    return 0;
}

/* Nothing here is a libuv handle (jobs are requests), so the memory can go at once. */
static void local_close(struct backend *be)
{
    struct local *lp = local_of(be);

    local_fdcache_deinit(&lp->cache);
    uv_mutex_destroy(&lp->dir_lock);
    close(lp->root_fd);
    backend_release(be);
}

static int local_free_space(struct backend *be, uint64_t *bytes)
{
    struct statvfs sv;

    if (fstatvfs(local_of(be)->root_fd, &sv) != 0)
        return -errno;
    *bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
    return 0;
}

static void local_describe(struct backend *be, char *out, size_t out_len)
{
    snprintf(out, out_len, "local:%s", local_of(be)->root);
}

const struct backend_ops backend_local_ops = {
    .name = "local",
    .caps = BACKEND_CAP_APPEND | BACKEND_CAP_READ_SYNC | BACKEND_CAP_READ_NOWAIT |
            BACKEND_CAP_FREE_SPACE,
    .priv_size = sizeof(struct local),
    .open = local_open,
    .close = local_close,
    .put = local_put,
    .get = local_get,
    .head = local_head,
    .del = local_del,
    .list = local_list,
    .append = local_append,
    /* Disk I/O on a worker cannot be interrupted; a timed-out attempt just runs to its end. */
    .cancel = NULL,
    .read_sync = local_read_sync,
    .try_read = local_try_read,
    .free_space = local_free_space,
    .describe = local_describe,
};
