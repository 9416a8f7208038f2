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

#include <sqlite3.h>

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

/*
 * SQLite's sqlite3_exec(), as db.c reaches it: the program's own definition
 * comes first. With test_fail_exec(SQL), that statement fails as a full
 * disk would.
 */
static const char *fail_sql;

void test_fail_exec(const char *sql)
{
    fail_sql = sql;
}

__attribute__((visibility("default"))) int sqlite3_exec(sqlite3 *db, const char *sql,
                                                        int (*cb)(void *, int, char **, char **),
                                                        void *arg, char **errmsg);

int sqlite3_exec(sqlite3 *db, const char *sql, int (*cb)(void *, int, char **, char **), void *arg,
                 char **errmsg)
{
    static int (*real)(sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *,
                       char **);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "sqlite3_exec");
    if (fail_sql && strcmp(sql, fail_sql) == 0) {
        if (errmsg)
            *errmsg = sqlite3_mprintf("injected failure");
        return SQLITE_FULL;
    }
    return real(db, sql, cb, arg, errmsg);
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
