/*
 * The commands over a tree of names (names are paths): `du` sums what the
 * names under a prefix hold, `get -r` restores them as files under a
 * directory.
 */

#include "client/cli.h"
#include "client/progress.h"
#include "client/util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Names listed and restored at a time by get -r: memory stays bounded whatever the tree. */
#define TREE_PAGE 256

int cli_cmd_du(struct cli *cli, int argc, char **argv)
{
    static const char *const keys[] = {
        "names", "documents", "logical_bytes", "unique_bytes", "stored_bytes", "saved_bytes", NULL};
    static const struct option options[] = {
        {"human-readable", no_argument, NULL, 'h'},
        {"help", no_argument, NULL, 256},
        {0},
    };
    const msgpack_object *reply;
    bool human = false;
    struct client *c;
    int opt, r;

    while ((opt = cli_getopt(cli, argc, argv, ":h", options)) != -1) {
        if (opt == 'h') {
            human = true;
        } else if (opt == 256) {
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        } else {
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("%s: too many arguments", argv[0]);
    if (!(c = cli_client(cli)))
        return cli->no_client;
    r = client_du(c, optind < argc ? argv[optind] : NULL, true, &reply);
    if (r != 0)
        return cli_fail(cli, optind < argc ? argv[optind] : NULL, r);
    if (cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    for (size_t i = 0; keys[i]; i++) {
        uint64_t v = 0;
        char h[32];
        if (proto_get_uint(reply, keys[i], &v) != 0)
            continue;
        if (human && i >= 2) {
            cli_human_size(v, h, sizeof(h));
            printf("%s: %s\n", keys[i], h);
        } else {
            printf("%s: %" PRIu64 "\n", keys[i], v);
        }
    }
    return CLI_EXIT_OK;
}

/* A name to restore, copied out of the reply. */
struct tree_item {
    char *name;
    char hash[PROTO_HASH_HEX + 1];
    uint64_t size;
    struct cli_fattr fa;
};

/* One page of names to restore. */
struct tree_page {
    struct tree_item v[TREE_PAGE];
    size_t n;
    bool bad; /* an item without a name or hash */
};

static void take_item(void *userdata, const msgpack_object *item)
{
    struct tree_page *pg = userdata;
    struct tree_item *it = &pg->v[pg->n];
    const char *name, *hash;
    size_t name_len, hash_len;
    uint64_t mode = 0;

    if (pg->n == TREE_PAGE || proto_get_str(item, "name", &name, &name_len) != 0 ||
        proto_get_str(item, "hash", &hash, &hash_len) != 0 || hash_len != PROTO_HASH_HEX ||
        proto_get_uint(item, "size", &it->size) != 0 || !(it->name = strndup(name, name_len))) {
        pg->bad = true;
        return;
    }
    memcpy(it->hash, hash, PROTO_HASH_HEX);
    it->hash[PROTO_HASH_HEX] = '\0';
    /* A mode this client does not know is restored as a file, as one without a mode. */
    it->fa = (struct cli_fattr){0};
    if (proto_get_uint(item, "mode", &mode) == 0 && proto_file_mode_valid(mode) &&
        proto_get_int(item, "mtime", &it->fa.mtime) == 0)
        it->fa.mode = (uint32_t)mode;
    pg->n++;
}

static void page_clear(struct tree_page *pg)
{
    for (size_t i = 0; i < pg->n; i++)
        free(pg->v[i].name);
    pg->n = 0;
}

/*
 * The file a name becomes under `dir`: its components, without empty ones
 * and ".", joined by '/'. NULL for a name that would leave `dir` (a ".."
 * component) or names no file (nothing left, or a trailing '/').
 */
static char *tree_path(const char *dir, const char *name)
{
    size_t len = strlen(name), dlen = strlen(dir);
    char *out = malloc(dlen + len + 2), *p;
    const char *s = name;

    if (!out)
        return NULL;
    memcpy(out, dir, dlen);
    p = out + dlen;
    while (*s) {
        const char *end = strchr(s, '/');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') {
            free(out);
            return NULL;
        }
        if (n > 0 && !(n == 1 && s[0] == '.')) {
            *p++ = '/';
            memcpy(p, s, n);
            p += n;
        }
        s += n + (end != NULL);
    }
    *p = '\0';
    if (p == out + dlen || (len > 0 && name[len - 1] == '/')) {
        free(out);
        return NULL;
    }
    return out;
}

/* mkdir -p of the directories above `path` (the part before its last '/'). */
static int make_parents(char *path)
{
    char *slash = strrchr(path, '/');
    int r = 0;

    if (!slash || slash == path)
        return 0;
    *slash = '\0';
    if (mkdir(path, 0777) < 0 && errno != EEXIST) {
        if (errno == ENOENT && make_parents(path) == 0)
            r = mkdir(path, 0777) < 0 && errno != EEXIST ? -errno : 0;
        else
            r = -errno;
    }
    *slash = '/';
    return r;
}

/*
 * Opens the directory that is to hold `path` (DIR/REL, from tree_path())
 * one component of REL at a time, making the missing ones and never
 * following a symbolic link: a link planted inside DIR would lead the
 * restore anywhere outside it (~/.profile replaced). DIR itself is taken
 * as given. The fd with *base at REL's last component, or -errno (-ELOOP or
 * -ENOTDIR: a link or a file in the way).
 */
static int open_parent(char *path, size_t dir_len, const char **base)
{
    char *s = path + dir_len + 1, *slash;
    int fd, next;

    path[dir_len] = '\0';
    fd = open(dir_len ? path : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    path[dir_len] = '/';
    if (fd < 0)
        return -errno;
    while ((slash = strchr(s, '/'))) {
        *slash = '\0';
        next = openat(fd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && (mkdirat(fd, s, 0777) == 0 || errno == EEXIST))
            next = openat(fd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        *slash = '/';
        close(fd);
        if (next < 0)
            return -e;
        fd = next;
        s = slash + 1;
    }
    *base = s;
    return fd;
}

/* Sets the permissions and mtime of the directory `base` in `dir`, made when missing. */
static int restore_dir(int dir, const char *base, const struct cli_fattr *fa, const char *path)
{
    struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, cli_timespec_ns(fa->mtime)};
    int fd;

    if (mkdirat(dir, base, 0700) < 0 && errno != EEXIST)
        return cli_fail_errno(path);
    fd = openat(dir, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
        cli_error(0, CLI_CODE_IO, NULL, "%s: not restored: a symbolic link or a file is in the way",
                  path);
        return CLI_EXIT_FAILED;
    }
    if (fd < 0 || fchmod(fd, fa->mode & 0777) < 0 || futimens(fd, times) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        errno = e;
        return cli_fail_errno(path);
    }
    close(fd);
    return CLI_EXIT_OK;
}

/*
 * Makes the symbolic link `base` in `dir`, its target the document's
 * content: made under a temporary name and renamed over whatever file or
 * link is there, as a file is restored.
 */
static int restore_link(struct cli *cli, struct client *c, const struct tree_item *it, int dir,
                        const char *base, const char *path)
{
    struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, cli_timespec_ns(it->fa.mtime)};
    char target[PATH_MAX], tmp[64];
    ssize_t n = 0;
    int fd, r;

    if (it->size == 0 || it->size >= sizeof(target)) {
        cli_error(0, CLI_CODE_IO, NULL, "%s: not restored: a link target of %" PRIu64 " bytes",
                  path, it->size);
        return CLI_EXIT_FAILED;
    }
    /* The target through a memory file: the library writes documents to descriptors. */
    if ((fd = memfd_create("cairn-link", MFD_CLOEXEC)) < 0)
        return cli_fail_errno(path);
    r = client_get_range_fd(c, it->hash, 0, UINT64_MAX, fd, false);
    if (r == 0 && (n = pread(fd, target, sizeof(target), 0)) != (ssize_t)it->size)
        r = n < 0 ? -errno : -EBADMSG;
    close(fd);
    if (r != 0)
        return cli_fail(cli, path, r);
    target[n] = '\0';
    if (memchr(target, '\0', (size_t)n)) {
        cli_error(0, CLI_CODE_IO, NULL, "%s: not restored: the link target holds a NUL", path);
        return CLI_EXIT_FAILED;
    }
    for (unsigned i = 0;; i++) {
        snprintf(tmp, sizeof(tmp), ".cairn-link.%ld.%u", (long)getpid(), i);
        if (symlinkat(target, dir, tmp) == 0)
            break;
        if (errno != EEXIST || i == 100)
            return cli_fail_errno(path);
    }
    if (renameat(dir, tmp, dir, base) < 0) {
        int e = errno;
        unlinkat(dir, tmp, 0);
        errno = e;
        return cli_fail_errno(path);
    }
    /* A link's own mtime; its permissions mean nothing on Linux. */
    if (utimensat(dir, base, times, AT_SYMLINK_NOFOLLOW) < 0)
        return cli_fail_errno(path);
    return CLI_EXIT_OK;
}

/*
 * Restores one name at `path` (below DIR, dir_len bytes of it) through
 * open_parent(): a file, a symbolic link or a directory, as it was added.
 */
static int restore(struct cli *cli, struct client *c, const struct tree_item *it, char *path,
                   size_t dir_len, int cwd_fd)
{
    const char *base = NULL;
    int r, fd;

    fd = open_parent(path, dir_len, &base);
    if (fd == -ENOENT) {
        /* DIR itself is missing: made as mkdir -p would (DIR/x names the directory above x). */
        char saved = path[dir_len + 1];
        path[dir_len + 1] = '\0';
        r = make_parents(path);
        path[dir_len + 1] = saved;
        fd = r < 0 ? r : open_parent(path, dir_len, &base);
    }
    if (fd == -ELOOP || fd == -ENOTDIR) {
        cli_error(0, CLI_CODE_IO, NULL, "%s: not restored: a symbolic link or a file is in the way",
                  path);
        return CLI_EXIT_FAILED;
    }
    if (fd < 0 || fchdir(fd) < 0) {
        errno = fd < 0 ? -fd : errno;
        if (fd >= 0)
            close(fd);
        return cli_fail_errno(path);
    }
    if (S_ISDIR(it->fa.mode))
        r = restore_dir(fd, base, &it->fa, path);
    else if (S_ISLNK(it->fa.mode))
        r = restore_link(cli, c, it, fd, base, path);
    else
        r = cli_restore_file(cli, c, it->hash, base, path, &it->fa);
    close(fd);
    if (fchdir(cwd_fd) < 0) {
        cli_error(0, CLI_CODE_IO, NULL, "cannot return to the working directory: %s",
                  strerror(errno));
        return CLI_EXIT_FAILED;
    }
    return r;
}

int cli_get_tree(struct cli *cli, const char *prefix, const char *dir)
{
    struct client_list_req req = {
        .mode = CLIENT_LIST_NAMES, .prefix = prefix, .path = true, .limit = TREE_PAGE};
    _cleanup_free_ char *after = NULL;
    _cleanup_free_ struct tree_page *pgp = calloc(1, sizeof(*pgp));
    struct progress progress;
    int status = CLI_EXIT_OK;
    size_t total = 0;
    struct client *c;
    int r;

    if (!pgp)
        return cli_fail(cli, prefix, -ENOMEM);
    /* Each file is written from its directory's fd (restore()); this is where to come back. */
    _cleanup_close_ int cwd_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cwd_fd < 0)
        return cli_fail_errno("the working directory");
    struct tree_page *pg = pgp;
    if (!(c = cli_client(cli)))
        return cli->no_client;
    progress_init(&progress, cli, "got", false);
    for (;;) {
        req.after = after;
        r = client_list_req(c, &req, take_item, pg);
        if (r == 0 && pg->bad)
            r = -EBADMSG;
        if (r != 0) {
            page_clear(pg);
            progress_end(&progress);
            return cli_fail(cli, prefix, r);
        }
        /* Bytes count while a file is written; the library reports each get's own total. */
        client_set_progress(c, progress_bytes, &progress);
        for (size_t i = 0; i < pg->n; i++) {
            _cleanup_free_ char *path = tree_path(dir, pg->v[i].name);
            if (!path) {
                cli_error(0, CLI_CODE_IO, pg->v[i].name,
                          "%s: not restored: the name is not a path under %s", pg->v[i].name, dir);
                status = CLI_EXIT_FAILED;
                continue;
            }
            if (restore(cli, c, &pg->v[i], path, strlen(dir), cwd_fd) != CLI_EXIT_OK)
                status = CLI_EXIT_FAILED;
            progress_file(&progress);
        }
        client_set_progress(c, NULL, NULL);
        total += pg->n;
        if (pg->n < TREE_PAGE)
            break;
        free(after);
        after = pg->v[pg->n - 1].name; /* handed over */
        pg->v[pg->n - 1].name = NULL;
        page_clear(pg);
    }
    page_clear(pg);
    progress_end(&progress);
    if (total == 0) {
        return cli_error(CLI_EXIT_FAILED, "not_found", prefix, "%s: no name starts with it",
                         prefix);
    }
    return status;
}
