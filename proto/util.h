#pragma once

/*
 * Small helpers shared by every module (each links proto): container_of,
 * the cleanup attributes used for explicit ownership, and the two file
 * operations several modules need.
 */

#include <stdbool.h>
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

/*
 * Creates `path` and its missing parents (0700); the last component gets
 * `mode`. Directories made here get their mode whatever the umask; existing
 * ones are left as they are. 0 or -errno.
 */
int util_mkdir_p(const char *path, mode_t mode);

/*
 * Whether `dir` may hold what only this user should reach or replace: 0
 * when it is a directory owned by the effective uid that neither its group
 * nor others can write. With `shared_ok`, a directory root owns passes too,
 * and so does one group or others can write when it is sticky (/tmp): there
 * only its owner may rename or remove the files of others. Otherwise
 * -ENOENT (and the rest of stat's errors), -ENOTDIR or -EPERM, with a
 * sentence naming the directory and the reason in `why`.
 */
int util_check_dir(const char *dir, bool shared_ok, char *why, size_t why_len);
