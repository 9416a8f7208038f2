/*
 * Counting syncs for the database unit tests (test-db.h): which commits
 * reach the disk. A file of its own, apart from the tests' environment,
 * because it stands in for libc's fsync() and fdatasync().
 */
#include "daemon/meta/test-db.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/*
 * SQLite (a shared library) reaches fsync() and fdatasync() through the
 * dynamic linker, which finds these first: the program exports them
 * (default visibility), so a durable commit can be seen to sync and a
 * normal one not to.
 */
static _Atomic uint64_t syncs;
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_path[PATH_MAX];

/* Remembers which file a sync was for. */
static void note_sync(int fd)
{
    char link[64], path[PATH_MAX];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    path[n < 0 ? 0 : n] = '\0';
    pthread_mutex_lock(&last_lock);
    memcpy(last_path, path, sizeof(path));
    pthread_mutex_unlock(&last_lock);
    atomic_fetch_add(&syncs, 1);
}

__attribute__((visibility("default"))) int fsync(int fd);
__attribute__((visibility("default"))) int fdatasync(int fd);

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "fsync");
    note_sync(fd);
    return real(fd);
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "fdatasync");
    note_sync(fd);
    return real(fd);
}

uint64_t test_syncs(void)
{
    return atomic_load(&syncs);
}

void test_last_sync(char *path, size_t len)
{
    pthread_mutex_lock(&last_lock);
    snprintf(path, len, "%s", last_path);
    pthread_mutex_unlock(&last_lock);
}
