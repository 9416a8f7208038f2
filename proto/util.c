#include "proto/util.h"

#include <errno.h>
#include <string.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

int util_write_all(int fd, const void *p, size_t len)
{
    const uint8_t *b = p;

    while (len > 0) {
        ssize_t n = write(fd, b, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * A directory made here gets exactly `mode`, whatever the umask: a umask
 * may have been 0 (what the directory holds is not for others) or odd.
 */
static int make_dir(const char *path, mode_t mode)
{
    if (mkdir(path, mode) < 0)
        return errno == EEXIST ? 0 : -errno;
    return chmod(path, mode) < 0 ? -errno : 0;
}

int util_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    int r;

    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if ((r = make_dir(buf, 0700)) < 0)
            return r;
        *p = '/';
    }
    return make_dir(buf, mode);
}

int util_check_dir(const char *dir, bool shared_ok, char *why, size_t why_len)
{
    struct stat st;
    uid_t me = geteuid();

    if (stat(dir, &st) < 0) {
        snprintf(why, why_len, "%s: %s", dir, strerror(errno));
        return -errno;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, why_len, "%s is not a directory", dir);
        return -ENOTDIR;
    }
    if (st.st_uid != me && !(shared_ok && st.st_uid == 0)) {
        snprintf(why, why_len, "%s belongs to uid %u, not to this user (uid %u)", dir,
                 (unsigned)st.st_uid, (unsigned)me);
        return -EPERM;
    }
    /* In a sticky directory only its owner (trusted here) may rename or remove others' files. */
    if ((st.st_mode & 022) && !(shared_ok && (st.st_mode & S_ISVTX))) {
        snprintf(why, why_len, "%s is writable by %s (mode %04o)", dir,
                 (st.st_mode & 002) ? "others" : "its group", (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}
