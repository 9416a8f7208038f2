#include "proto/util.h"

#include <errno.h>
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

int util_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];

    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}
