#pragma once

/*
 * Helpers of the client library and the CLI, on top of proto/util.h (cleanup
 * attributes, util_write_all): util_fd_above_stdio(), because an fd that
 * lands on 0-2 when the caller started with one of them closed gets mistaken
 * for stdio.
 */

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "proto/util.h"

/*
 * Returns fd, or a close-on-exec copy above 2 in its place (fd is closed).
 * A failed open's -1 passes through with its errno, so calls can nest.
 */
static inline int util_fd_above_stdio(int fd)
{
    int high;

    if (fd < 0 || fd > STDERR_FILENO)
        return fd;
    high = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(fd);
    return high;
}
