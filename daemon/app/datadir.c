/*
 * The data directory: the entry that makes it durable, the lock that keeps
 * a second cairnd out, and the database set aside for a rebuild (and put
 * back when the rebuild fails).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/app/app-int.h"
#include "daemon/app/daemon.h"
#include "daemon/base/log.h"
#include "proto/util.h"
#include "storage/backend.h"

/*
 * Makes the data directory's own entry in its parent durable. The local
 * backend syncs the entries in the data directory (the objects directory's
 * among them) but not the data directory itself: after a power cut that
 * followed its creation, everything acknowledged in it was gone with it.
 * Every start, not only the one that creates it: an earlier run may have
 * created it and crashed before any sync. Directories above it are taken
 * as they are.
 */
/* Makes a directory's entries durable: 0 or negative errno. */
static int sync_dir(const char *dir)
{
    int fd, r = 0;

    if (backend_sync_disabled())
        return 0;
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

int daemon_sync_data_dir(const char *data_dir)
{
    char parent[PATH_MAX];
    char *slash;

    snprintf(parent, sizeof(parent), "%s", data_dir);
    for (size_t n = strlen(parent); n > 1 && parent[n - 1] == '/'; n--)
        parent[n - 1] = '\0';
    slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof(parent), ".");
    else
        slash[slash == parent ? 1 : 0] = '\0';
    return sync_dir(parent);
}

/*
 * Another user who may write the data directory, or who owns it, may put a
 * link where the daemon opens its files (the lock is truncated and
 * rewritten, the database written), or read what it keeps: refused.
 */
int daemon_check_data_dir(const char *data_dir, char *err, size_t err_len)
{
    /*
     * The files opened by name in it: SQLite has no way to refuse a link
     * only in the last component of a path, so each is checked here, once
     * the directory is known to be this user's alone (nobody else can make
     * a link in it afterwards). The others are opened with O_NOFOLLOW.
     */
    static const char *const names[] = {
        "cairn.db",      "cairn.db-wal", "cairn.db-shm", "search.db",      "search.db-wal",
        "search.db-shm", "cairnd.lock",  "cairnd.log",   "cairnd.reserve", "writer",
    };
    char why[PATH_MAX + 128], path[PATH_MAX + 32];
    struct stat st;

    if (util_check_dir(data_dir, false, why, sizeof(why)) < 0) {
        snprintf(err, err_len, "refusing the data directory: %s", why);
        return DAEMON_E_SETUP;
    }
    for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
        snprintf(path, sizeof(path), "%s/%s", data_dir, names[i]);
        if (lstat(path, &st) < 0)
            continue;
        if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid()) {
            snprintf(err, err_len, "refusing %s: %s", path,
                     S_ISLNK(st.st_mode)    ? "a symbolic link"
                     : !S_ISREG(st.st_mode) ? "not a regular file"
                     : st.st_nlink != 1     ? "a file with other names (hard links)"
                                            : "it belongs to another user");
            return DAEMON_E_SETUP;
        }
    }
    return 0;
}

/* --read-only: a data directory that holds a store, or -errno / DAEMON_E_SETUP with err. */
int daemon_open_data_dir_read_only(const char *data_dir, char *err, size_t err_len)
{
    char db_path[PATH_MAX + 16];

    if (access(data_dir, F_OK) < 0)
        return -errno;
    snprintf(db_path, sizeof(db_path), "%s/cairn.db", data_dir);
    if (access(db_path, F_OK) < 0) {
        snprintf(err, err_len, "data dir %s: %s", data_dir,
                 errno == ENOENT ? "it holds no store (no cairn.db) to serve read-only"
                                 : strerror(errno));
        return DAEMON_E_SETUP;
    }
    return 0;
}

int daemon_lock_data_dir(struct daemon *d, const char *data_dir, bool shared, char *err,
                         size_t err_len)
{
    char path[PATH_MAX + 16], pid[32];
    struct stat st;
    int fd, n;

    snprintf(path, sizeof(path), "%s/cairnd.lock", data_dir);
    /*
     * Never through a symbolic link, and never a file with another name
     * somewhere (a hard link): the lock is truncated below, and that must
     * not reach any other file. A read-only daemon makes none.
     */
    fd = open(path,
              (shared ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
                  O_NOCTTY,
              0600);
    if (fd < 0 && shared && errno == ENOENT)
        return 0; /* no cairnd ever wrote here */
    if (fd < 0) {
        snprintf(err, err_len, "%s: %s", path,
                 errno == ELOOP ? "a symbolic link, refused" : strerror(errno));
        return DAEMON_E_SETUP;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid()) {
        snprintf(err, err_len, "%s: not a regular file of this user with one name, refused", path);
        close(fd);
        return DAEMON_E_SETUP;
    }
    if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) < 0) {
        int e = errno;
        n = (int)pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        /* Shared holders only: read-only daemons, which write no pid. */
        bool readers = !shared && e == EWOULDBLOCK && flock(fd, LOCK_SH | LOCK_NB) == 0;
        close(fd);
        if (readers)
            snprintf(err, err_len, "a cairnd --read-only is running on data dir %s", data_dir);
        else if (e == EWOULDBLOCK)
            snprintf(err, err_len, "%s%s%s%s is already running on data dir %s",
                     shared ? "a cairnd that writes" : "another cairnd", pid[0] ? " (pid " : "",
                     pid, pid[0] ? ")" : "", data_dir);
        else
            snprintf(err, err_len, "%s: %s", path, strerror(e));
        return e == EWOULDBLOCK ? DAEMON_E_LOCKED : DAEMON_E_SETUP;
    }
    n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (!shared && (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        close(fd);
        return DAEMON_E_SETUP;
    }
    d->lock_fd = fd;
    return 0;
}

/*
 * A rebuild starts from an empty database. The old one is kept beside it
 * (cairn.db.before-rebuild.<time>), never deleted: it may hold what the
 * backend lacks. The search index is derived: it is simply made anew.
 */
static const char *const db_suffixes[] = {"", "-wal", "-shm"};

int daemon_set_aside_db(const char *db_path, const char *index_path, const char *why, long now,
                        char *err, size_t err_len)
{
    const char *const *suffixes = db_suffixes;
    char from[PATH_MAX + 32], to[PATH_MAX + 64];

    for (size_t i = 0; i < ARRAY_SIZE(db_suffixes); i++) {
        snprintf(from, sizeof(from), "%s%s", db_path, suffixes[i]);
        snprintf(to, sizeof(to), "%s.%s.%ld%s", db_path, why, now, suffixes[i]);
        if (rename(from, to) < 0 && errno != ENOENT) {
            snprintf(err, err_len, "cannot move %s aside: %s", from, strerror(errno));
            return DAEMON_E_SETUP;
        }
        snprintf(from, sizeof(from), "%s%s", index_path, suffixes[i]);
        if (unlink(from) < 0 && errno != ENOENT) {
            snprintf(err, err_len, "cannot remove %s: %s", from, strerror(errno));
            return DAEMON_E_SETUP;
        }
    }
    return 0;
}

/*
 * A rebuild that failed - most often because the backend could not be read -
 * must not leave its partial database where the next start would open it:
 * that database holds less than the one set aside, and would be taken as
 * the truth. What the rebuild wrote goes to cairn.db.failed-rebuild.<time>
 * and the old database comes back. The search index, derived, is removed and
 * made anew at the next start. Called with the database closed.
 */
void daemon_undo_rebuild(const struct daemon *d)
{
    char from[sizeof(d->db_path) + 64], to[sizeof(d->db_path) + 64];
    bool restored = false;

    for (size_t i = 0; i < ARRAY_SIZE(db_suffixes); i++) {
        snprintf(from, sizeof(from), "%s%s", d->db_path, db_suffixes[i]);
        snprintf(to, sizeof(to), "%s.failed-rebuild.%ld%s", d->db_path, d->aside_stamp,
                 db_suffixes[i]);
        if (rename(from, to) < 0 && errno != ENOENT)
            log_error("rebuild failed, and %s cannot be moved aside: %s", from, strerror(errno));
        snprintf(from, sizeof(from), "%s.before-rebuild.%ld%s", d->db_path, d->aside_stamp,
                 db_suffixes[i]);
        snprintf(to, sizeof(to), "%s%s", d->db_path, db_suffixes[i]);
        if (rename(from, to) == 0)
            restored = restored || i == 0;
        else if (errno != ENOENT)
            log_error("rebuild failed, and %s cannot be put back: %s", from, strerror(errno));
        snprintf(from, sizeof(from), "%s%s", d->index_path, db_suffixes[i]);
        if (unlink(from) < 0 && errno != ENOENT)
            log_error("rebuild failed, and %s cannot be removed: %s", from, strerror(errno));
    }
    if (restored)
        log_error("rebuild failed: the database from before it is back in place as %s, "
                  "what the rebuild wrote is in %s.failed-rebuild.%ld",
                  d->db_path, d->db_path, d->aside_stamp);
    else
        log_error("rebuild failed: what it wrote is in %s.failed-rebuild.%ld, "
                  "no database is in place",
                  d->db_path, d->aside_stamp);
}

/* ---- the writer's identity ---- */

/*
 * DATA_DIR/writer: this daemon's writer id (pack.h) in sixteen hex digits,
 * and "owns writer 0" on a second line when the data directory held a store
 * from before writers had ids (its packs are writer 0's). Made once, at the
 * first start, and synced with its directory: the packs carry the id.
 */
#define WRITER_FILE "writer"
#define WRITER_OWNS0 "owns writer 0"

static int read_writer(int fd, uint64_t *id, bool *owns0)
{
    char buf[64], *end;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

    if (n < 17 || buf[16] != '\n')
        return -EINVAL;
    buf[n] = '\0';
    buf[16] = '\0';
    *id = strtoull(buf, &end, 16);
    if (*end || *id == 0)
        return -EINVAL;
    *owns0 = strcmp(buf + 17, WRITER_OWNS0 "\n") == 0;
    return *owns0 || buf[17] == '\0' ? 0 : -EINVAL;
}

int daemon_writer(const char *data_dir, bool had_store, bool read_only, uint64_t *id, bool *owns0,
                  char *err, size_t err_len)
{
    char path[PATH_MAX + 16], tmp[PATH_MAX + 32], line[64];
    int fd, n, r;

    snprintf(path, sizeof(path), "%s/" WRITER_FILE, data_dir);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0) {
        r = read_writer(fd, id, owns0);
        close(fd);
        if (r < 0)
            snprintf(err, err_len, "%s: not a writer id (sixteen hex digits on a line)", path);
        return r < 0 ? DAEMON_E_SETUP : 0;
    }
    if (errno != ENOENT) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        return DAEMON_E_SETUP;
    }
    if (read_only) {
        *id = 0; /* a store from before writer ids: nothing is written under any */
        *owns0 = had_store;
        return 0;
    }
    do {
        if (getrandom(id, sizeof(*id), 0) != sizeof(*id)) {
            snprintf(err, err_len, "cannot draw a writer id: %s", strerror(errno));
            return DAEMON_E_SETUP;
        }
    } while (*id == 0);
    *owns0 = had_store;
    n = snprintf(line, sizeof(line), "%016" PRIx64 "\n%s", *id, had_store ? WRITER_OWNS0 "\n" : "");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || write(fd, line, (size_t)n) != n || (!backend_sync_disabled() && fsync(fd) < 0) ||
        close(fd) < 0 || rename(tmp, path) < 0 || sync_dir(data_dir) < 0) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return DAEMON_E_SETUP;
    }
    return 0;
}

int daemon_mark_stale(const char *db_path)
{
    char path[PATH_MAX + 16];
    int fd;

    snprintf(path, sizeof(path), "%s.stale", db_path);
    fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

bool daemon_is_stale(const char *db_path)
{
    char path[PATH_MAX + 16];
    struct stat st;

    snprintf(path, sizeof(path), "%s.stale", db_path);
    return lstat(path, &st) == 0;
}

void daemon_clear_stale(const char *db_path)
{
    char path[PATH_MAX + 16];

    snprintf(path, sizeof(path), "%s.stale", db_path);
    if (unlink(path) < 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", path, strerror(errno));
}
