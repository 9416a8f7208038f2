#pragma once

/*
 * Small helpers shared by every module (each links proto): container_of,
 * the cleanup attributes used for explicit ownership, and the two file
 * operations several modules need.
 */

#include <stddef.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef container_of
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#endif

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void util_freep(void *p)
{
    free(*(void **)p);
}

static inline void util_closep(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

/* `_cleanup_free_ char *s = ...;` frees on scope exit; set to NULL to hand off. */
#define _cleanup_free_ __attribute__((cleanup(util_freep)))
/* `_cleanup_close_ int fd = ...;` closes on scope exit; set to -1 to hand off. */
#define _cleanup_close_ __attribute__((cleanup(util_closep)))

/* Writes all of p[0..len), resuming after partial writes and EINTR. 0 or -errno. */
int util_write_all(int fd, const void *p, size_t len);

/* Creates `path` and its missing parents (0755); the last component gets `mode`. 0 or -errno. */
int util_mkdir_p(const char *path, mode_t mode);
