#include "daemon/base/reserve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "storage/backend.h"

/* Free bytes for unprivileged use on the reserve's file system; UINT64_MAX when unknown. */
static uint64_t free_bytes(const struct reserve *r)
{
    struct statvfs sv;
    char dir[PATH_MAX];
    char *slash;

    snprintf(dir, sizeof(dir), "%s", r->path);
    slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    if (statvfs(slash ? dir : ".", &sv) != 0)
        return UINT64_MAX;
    return (uint64_t)sv.f_bavail * sv.f_frsize;
}

static void take(struct reserve *r)
{
    int fd = open(r->path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    int e;

    if (fd < 0) {
        log_warn("cannot make %s: %s", r->path, strerror(errno));
        return;
    }
    /* Blocks really allocated (posix_fallocate), not a sparse file. */
    e = posix_fallocate(fd, 0, RESERVE_BYTES);
    if (e == 0 && !backend_sync_disabled() && fsync(fd) != 0)
        e = errno;
    close(fd);
    if (e != 0) {
        unlink(r->path);
        log_warn("cannot reserve room for deletes in %s: %s", r->path, strerror(e));
        return;
    }
    r->held = true;
}

void reserve_init(struct reserve *r, const char *data_dir)
{
    struct stat st;

    snprintf(r->path, sizeof(r->path), "%s/cairnd.reserve", data_dir);
    pthread_mutex_init(&r->lock, NULL);
    r->held = stat(r->path, &st) == 0 && (uint64_t)st.st_blocks * 512 >= RESERVE_BYTES;
    if (!r->held && free_bytes(r) >= 4ull * RESERVE_BYTES)
        take(r);
}

void reserve_adjust(struct reserve *r)
{
    uint64_t room;

    pthread_mutex_lock(&r->lock);
    room = free_bytes(r);
    if (r->held && room < RESERVE_BYTES) {
        if (unlink(r->path) == 0 || errno == ENOENT) {
            r->held = false;
            log_warn("the disk of the data directory is nearly full: the %u bytes kept for "
                     "deletes and gc are given to them",
                     RESERVE_BYTES);
        }
    } else if (!r->held && room != UINT64_MAX && room >= 4ull * RESERVE_BYTES) {
        take(r);
    }
    pthread_mutex_unlock(&r->lock);
}

void reserve_retake(struct reserve *r)
{
    uint64_t room;

    pthread_mutex_lock(&r->lock);
    if (!r->held && (room = free_bytes(r)) != UINT64_MAX && room >= 4ull * RESERVE_BYTES)
        take(r);
    pthread_mutex_unlock(&r->lock);
}

bool reserve_given(struct reserve *r)
{
    return !atomic_load(&r->held);
}

void reserve_destroy(struct reserve *r)
{
    pthread_mutex_destroy(&r->lock);
}
