#pragma once

/*
 * Small helpers shared by the client library and the CLI. Cleanup
 * attributes: a local marked _cleanup_free_ or _cleanup_close_ is released
 * when it goes out of scope; clear it (NULL, -1) when ownership moves
 * elsewhere. And util_fd_above_stdio(), because an fd that lands on 0-2 when
 * the caller started with one of them closed gets mistaken for stdio.
 */

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_freep(void *p)
{
    free(*(void **)p);
}

static inline void cleanup_closep(const int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

#define _cleanup_free_ __attribute__((cleanup(cleanup_freep)))
#define _cleanup_close_ __attribute__((cleanup(cleanup_closep)))

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
