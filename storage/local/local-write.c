/*
 * The local backend's writes: puts, appends and deletes. Each is durable
 * before it completes: the file's bytes by fsync() or fdatasync(), its
 * directory entry by an fsync() of its directory, and a directory made for
 * it by an fsync() of the root.
 *
 * Every put pays for its own file and directory syncs. Sharing the
 * directory sync between concurrent puts would need a worker to wait for
 * another's sync, and blocked workers are taken from the reads that share
 * the threadpool; batching belongs to the caller (packs), which appends many
 * records to one object and syncs once.
 */
#include "storage/local/local-int.h"
#include "proto/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* The directory part of a valid key ("dir/name" -> "dir"). */
static void dir_of(const char *key, char out[BACKEND_MAX_KEY])
{
    size_t n = strcspn(key, "/");

    memcpy(out, key, n);
    out[n] = '\0';
}

static int dir_fsync(struct local *lp, const char *key)
{
    char dir[BACKEND_MAX_KEY];
    int fd, r;

    if (backend_sync_disabled())
        return 0;
    dir_of(key, dir);
    fd = openat(lp->root_fd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

/*
 * Creates the key's directory if it is missing, durably. Under dir_lock, so
 * that a writer that finds the directory there knows it is durable: it was
 * either there at open (which synced the root) or made by a writer who
 * synced the root before letting go of the lock.
 */
static int dir_ensure(struct local *lp, const char *key)
{
    char dir[BACKEND_MAX_KEY];
    int r = 0;

    dir_of(key, dir);
    uv_mutex_lock(&lp->dir_lock);
    if (mkdirat(lp->root_fd, dir, 0700) == 0) {
        if (!backend_sync_disabled() && fsync(lp->root_fd) < 0) {
            r = -errno;
            /* Nobody else may find a directory whose entry is not durable. */
            unlinkat(lp->root_fd, dir, AT_REMOVEDIR);
        }
    } else if (errno != EEXIST) {
        r = -errno;
    }
    uv_mutex_unlock(&lp->dir_lock);
    return r;
}

/*
 * Writes all of the iovecs at `offset`, resuming after short writes. 0 or
 * -errno. A caller may pass any number of iovecs (a repack gives one per
 * record, many thousands); each pwritev() takes up to IOV_MAX of them
 * straight from the caller's array. Only the rest of an iovec that a short
 * write cut in two goes out on its own, so nothing is ever copied.
 */
static int write_iov_at(int fd, const struct iovec *iov, size_t iovcnt, uint64_t offset)
{
    size_t i = 0, skip = 0; /* iov[i] is written up to `skip` bytes, iov[..i) wholly */

    for (;;) {
        struct iovec rest;
        const struct iovec *vec;
        int n;
        ssize_t w;

        while (i < iovcnt && iov[i].iov_len == skip) {
            i++;
            skip = 0;
        }
        if (i == iovcnt)
            return 0;
        if (skip > 0) {
            rest.iov_base = (char *)iov[i].iov_base + skip;
            rest.iov_len = iov[i].iov_len - skip;
            vec = &rest;
            n = 1;
        } else {
            vec = &iov[i];
            n = iovcnt - i < IOV_MAX ? (int)(iovcnt - i) : IOV_MAX;
        }
        w = pwritev(fd, vec, n, (off_t)offset);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        offset += (uint64_t)w;
        for (size_t left = (size_t)w; left > 0;) {
            size_t avail = iov[i].iov_len - skip;
            if (left < avail) {
                skip += left;
                left = 0;
            } else {
                left -= avail;
                i++;
                skip = 0;
            }
        }
    }
}

static uint64_t iov_bytes(const struct iovec *iov, size_t iovcnt)
{
    uint64_t total = 0;

    for (size_t i = 0; i < iovcnt; i++)
        total += iov[i].iov_len;
    return total;
}

/*
 * Moves a finished temporary file to its key unless the key exists. Where
 * the file system lacks RENAME_NOREPLACE, link() refuses an existing name
 * just as atomically; the temporary name is then removed, and a crash that
 * keeps it only leaves a second name that the next open clears.
 */
static int rename_noreplace(int root_fd, const char *tmp, const char *key)
{
    if (renameat2(root_fd, tmp, root_fd, key, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno == EEXIST)
        return BACKEND_E_EXISTS;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
        return -errno;
    if (linkat(root_fd, tmp, root_fd, key, 0) < 0)
        return errno == EEXIST ? BACKEND_E_EXISTS : -errno;
    unlinkat(root_fd, tmp, 0);
    return 0;
}

static void put_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_put *put = container_of(job->req, struct backend_put, req);
    struct local *lp = job->lp;
    const char *key = put->req.key;
    bool create = put->flags & BACKEND_PUT_CREATE;
    char tmp[64];
    int fd, r;

    snprintf(tmp, sizeof(tmp), LOCAL_TMP_DIR "/%ld.%" PRIu64, (long)getpid(),
             (uint64_t)atomic_fetch_add(&lp->tmp_seq, 1));
    r = dir_ensure(lp, key);
    if (r < 0)
        goto out;
    fd = openat(lp->root_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    r = write_iov_at(fd, put->iov, put->iovcnt, 0);
    if (r == 0 && !backend_sync_disabled() && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && create)
        r = rename_noreplace(lp->root_fd, tmp, key);
    else if (r == 0 && renameat(lp->root_fd, tmp, lp->root_fd, key) < 0)
        r = -errno;
    if (r != 0) {
        unlinkat(lp->root_fd, tmp, 0);
        goto out;
    }
    /* A replaced object's cached descriptor would keep serving the old file. */
    if (!create)
        local_fdcache_drop(&lp->cache, key);
    r = dir_fsync(lp, key);
out:
    job->status = r;
}

int local_put(struct backend *be, struct backend_req *req)
{
    return local_queue(be, req, put_work);
}

/* Opens the object an append extends; *size is its length now. */
static int open_existing(struct local *lp, const char *key, uint64_t offset, int *fd,
                         uint64_t *size)
{
    struct stat st;
    int r = 0;

    *fd = openat(lp->root_fd, key, O_WRONLY | O_CLOEXEC);
    if (*fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? BACKEND_E_NOT_FOUND : -errno;
    if (fstat(*fd, &st) < 0)
        r = -errno;
    else if ((uint64_t)st.st_size < offset)
        r = -EINVAL; /* the caller's idea of the object is wrong; writing would leave a hole */
    if (r < 0) {
        close(*fd);
        *fd = -1;
        return r;
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

/*
 * Appends write in place: the caller has made everything before `offset`
 * durable already, and never runs two appends to one key at once. What lies
 * beyond the new end is a torn tail of an append that failed (or a longer
 * earlier attempt), and is cut off before the sync. An append that fails
 * cuts the object back to `offset` at once: on a full disk, what it did
 * write is the room everyone else needs.
 */
static void append_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_append *app = container_of(job->req, struct backend_append, req);
    struct local *lp = job->lp;
    const char *key = app->req.key;
    uint64_t total = iov_bytes(app->iov, app->iovcnt), end, size = 0;
    bool create = app->offset == 0;
    int fd = -1, r;

    if (app->offset > (uint64_t)INT64_MAX - total) {
        job->status = -EFBIG;
        return;
    }
    end = app->offset + total;
    if (create) {
        r = dir_ensure(lp, key);
        if (r == 0) {
            fd = openat(lp->root_fd, key, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            if (fd < 0)
                r = errno == EEXIST ? BACKEND_E_EXISTS : -errno;
        }
    } else {
        r = open_existing(lp, key, app->offset, &fd, &size);
    }
    if (r != 0) {
        job->status = r;
        return;
    }
    r = write_iov_at(fd, app->iov, app->iovcnt, app->offset);
    if (r == 0 && size > end && ftruncate(fd, (off_t)end) < 0)
        r = -errno;
    if (r == 0 && !backend_sync_disabled() && fdatasync(fd) < 0)
        r = -errno;
    if (r != 0 && !create && ftruncate(fd, (off_t)app->offset) < 0) {
        /* Then the next append at `offset` cuts the tail, as above. */
    }
    if (close(fd) < 0 && r == 0)
        r = -errno;
    /* The directory entry once, when the object is created; later appends only add bytes. */
    if (r == 0 && create)
        r = dir_fsync(lp, key);
    if (r != 0 && create) {
        /* So that the caller can start the object again instead of finding it there. */
        unlinkat(lp->root_fd, key, 0);
        local_fdcache_drop(&lp->cache, key);
    }
    job->status = r;
}

int local_append(struct backend *be, struct backend_req *req)
{
    return local_queue(be, req, append_work);
}

static void del_work(uv_work_t *work)
{
    struct local_job *job = container_of(work, struct local_job, work);
    const char *key = job->req->key;

    if (unlinkat(job->lp->root_fd, key, 0) < 0) {
        job->status = errno == ENOENT || errno == ENOTDIR ? BACKEND_E_NOT_FOUND : -errno;
        return;
    }
    /* After the unlink: an open that races with it is then either refused or not cached. */
    local_fdcache_drop(&job->lp->cache, key);
    job->status = dir_fsync(job->lp, key);
}

int local_del(struct backend *be, struct backend_req *req)
{
    return local_queue(be, req, del_work);
}
