/* `cairn add`: files, standard input and directory trees. */

#include "client/cli.h"
#include "client/progress.h"
#include "client/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <limits.h>
#include <time.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

/*
 * Documents that fit one frame are sent without waiting for the previous
 * ones: up to ADD_WINDOW adds are in flight at once, so the daemon commits
 * them together instead of one sync each. Results are printed in the order
 * the paths were given, as their replies arrive.
 */
#define ADD_WINDOW 32

struct pending {
    uint64_t id;
    char *what; /* the path, for messages */
    char *name; /* the name sent */
    bool done;
    int status;
    char *out; /* what to print for it (out_len bytes: -0 puts NULs in it) */
    size_t out_len;
};

struct add {
    struct cli *cli;
    struct client_add_req req;
    const char *name; /* -n */
    bool recursive;
    bool dereference;      /* -L: -r follows links to regular files */
    const char **excludes; /* --exclude GLOB */
    size_t n_excludes;
    struct progress progress;
    /* For the summary: documents added, their bytes, and the bytes new to the store. */
    uint64_t docs, bytes, new_stored;
    uint64_t sent; /* adds sent: a directory of a walk that sent none is stored as itself */
    struct pending win[ADD_WINDOW];
    size_t head, count;
};

int cli_parse_meta(char *arg, struct client_meta *out)
{
    char *eq = strchr(arg, '=');

    if (!eq || eq == arg)
        return -EINVAL;
    *eq = '\0';
    out->key = arg;
    out->value = eq + 1;
    return 0;
}

/* Prints an add's reply: a JSON line, or "<hash>  <name>". */
static int print_added(struct add *add, FILE *out, const msgpack_object *reply, const char *name)
{
    const char *hash = "", *echoed = name;
    size_t hash_len = 0, echoed_len = strlen(name);

    uint64_t size = 0, written = 0;
    const char *mime = NULL;
    size_t mime_len = 0;

    proto_get_uint(reply, "size", &size);
    proto_get_uint(reply, "written", &written);
    /* A mime type belongs to the content, set when it is first stored: say when --mime is not it.
     */
    if (add->req.mime && proto_get_str(reply, "mime", &mime, &mime_len) == 0 &&
        (strlen(add->req.mime) != mime_len || memcmp(add->req.mime, mime, mime_len) != 0)) {
        progress_erase(&add->progress);
        fprintf(stderr,
                "cairn: warning: %s: this content is stored already as %.*s; --mime %s not "
                "applied\n",
                name[0] ? name : "-", (int)mime_len, mime, add->req.mime);
    }
    add->docs++;
    add->bytes += size;
    add->new_stored += written;
    progress_file(&add->progress);
    if (add->cli->json)
        return cli_print_json(out, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    proto_get_str(reply, "hash", &hash, &hash_len);
    if (add->req.heal) {
        /* No document: what the file rewrote, beside the file. */
        char human[32];
        cli_human_size(written, human, sizeof(human));
        fprintf(out, "%s  ", written ? human : "0");
        cli_put_record(add->cli, out, name[0] ? name : "-", name[0] ? strlen(name) : 1);
        return CLI_EXIT_OK;
    }
    proto_get_str(reply, "name", &echoed, &echoed_len);
    if (add->cli->null) {
        cli_put_record(add->cli, out, hash, hash_len);
        return CLI_EXIT_OK;
    }
    fprintf(out, "%.*s  ", (int)hash_len, hash);
    cli_put_record(add->cli, out, echoed_len ? echoed : "-", echoed_len ? echoed_len : 1);
    return CLI_EXIT_OK;
}

static int merge(int status, int r);

/* Prints the finished adds at the front of the window, in order; their worst status. */
static int flush_done(struct add *add)
{
    int status = CLI_EXIT_OK;

    while (add->count > 0 && add->win[add->head].done) {
        struct pending *p = &add->win[add->head];
        if (p->out) {
            progress_erase(&add->progress);
            fwrite(p->out, 1, p->out_len, stdout);
        }
        status = merge(status, p->status);
        free(p->what);
        free(p->name);
        free(p->out);
        memset(p, 0, sizeof(*p));
        add->head = (add->head + 1) % ADD_WINDOW;
        add->count--;
    }
    return status;
}

/* Waits for one reply and files it with its add. */
static int collect_one(struct add *add)
{
    struct client *c = cli_client(add->cli);
    const msgpack_object *reply;
    uint64_t id = 0;
    int r = client_await_next(c, &id, &reply);
    /* A broken connection, or an error about no request in particular, fails them all. */
    bool all = r < 0 || id == 0;

    for (size_t k = 0; k < add->count; k++) {
        struct pending *p = &add->win[(add->head + k) % ADD_WINDOW];
        if (p->done || (!all && id != p->id))
            continue;
        p->done = true;
        if (r == 0) {
            FILE *f = open_memstream(&p->out, &p->out_len);
            p->status = f ? print_added(add, f, reply, p->name) : CLI_EXIT_FAILED;
            if (f)
                fclose(f);
        } else {
            p->status = cli_fail(add->cli, p->what, r);
        }
        if (!all)
            break;
    }
    return all ? CLI_EXIT_FAILED : CLI_EXIT_OK;
}

/* Waits until at most `limit` adds are in flight; the worst status of those finished. */
static int drain(struct add *add, size_t limit)
{
    int status = flush_done(add);

    while (add->count > limit) {
        collect_one(add);
        status = merge(status, flush_done(add));
    }
    return status;
}

/*
 * A file of the walk that cannot be read: under --json, where its error is a
 * line among the results on stdout, the adds before it are printed first, so
 * the lines keep the order of the paths. `why` NULL: strerror(errno).
 * Returns the worst status.
 */
static int fail_local(struct add *add, const char *path, const char *why)
{
    char buf[256];
    int status;

    snprintf(buf, sizeof(buf), "%s", why ? why : strerror(errno));
    status = add->cli->json ? drain(add, 0) : CLI_EXIT_OK;
    return merge(status, cli_error(CLI_EXIT_FAILED, CLI_CODE_IO, NULL, "%s: %s", path, buf));
}

/* Sends `data` (taken over), a document that fits one frame, and goes on; see ADD_WINDOW. */
static int add_small(struct add *add, uint8_t *data, size_t got, const char *what, const char *name)
{
    _cleanup_free_ uint8_t *owned = data;
    struct client *c = cli_client(add->cli);
    struct pending *p;
    int status = CLI_EXIT_OK, r;

    if (!c)
        return add->cli->no_client;
    client_set_progress(c, progress_bytes, &add->progress);
    /* The same name twice: the first must be committed first, so its version is older. */
    for (size_t k = 0; k < add->count; k++) {
        if (strcmp(add->win[(add->head + k) % ADD_WINDOW].name, name) == 0) {
            status = drain(add, 0);
            break;
        }
    }
    if (add->count == ADD_WINDOW)
        status = merge(status, drain(add, ADD_WINDOW - 1));
    p = &add->win[(add->head + add->count) % ADD_WINDOW];
    if (!(p->what = strdup(what)) || !(p->name = strdup(name))) {
        free(p->what);
        p->what = NULL;
        return merge(status, cli_fail(add->cli, what, -ENOMEM));
    }
    add->req.name = add->req.heal ? NULL : name; /* healing names nothing */
    r = client_add_send(c, &add->req, data, got, &p->id);
    add->sent += r == 0;
    if (r != 0) {
        free(p->what);
        free(p->name);
        memset(p, 0, sizeof(*p));
        return merge(status, cli_fail(add->cli, what, r));
    }
    add->count++;
    return status;
}

/*
 * Reads a file to its end, whatever its size said (files in /proc say 0),
 * as long as it fits one frame: 0 with the bytes in *out, 1 when there is
 * more than a frame (the offset is back at the start), or -errno.
 */
static int read_small(int fd, size_t hint, uint8_t **out, size_t *len)
{
    size_t cap = hint + 1 > 65536 ? hint + 1 : 65536, got = 0;
    uint8_t *buf = NULL;

    for (;;) {
        if (got == cap || !buf) {
            if (buf)
                cap = cap * 2 > (size_t)PROTO_MAX_DATA + 1 ? (size_t)PROTO_MAX_DATA + 1 : cap * 2;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                return -ENOMEM;
            }
            buf = grown;
        }
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            free(buf);
            return -e;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got > PROTO_MAX_DATA) {
            free(buf);
            return lseek(fd, 0, SEEK_SET) == 0 ? 1 : -errno;
        }
    }
    *out = buf;
    *len = got;
    return 0;
}

/* Whether a file changed between two fstat calls around its reading. */
static bool changed(const struct stat *a, const struct stat *b)
{
    return a->st_size != b->st_size || a->st_mtim.tv_sec != b->st_mtim.tv_sec ||
           a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

static void warn_changed(int fd, const struct stat *before, const char *what)
{
    struct stat after;

    if (fstat(fd, &after) == 0 && changed(before, &after))
        fprintf(stderr, "cairn: warning: %s changed while it was read; stored as read\n", what);
}

/*
 * The file the next add's name comes from (PROTOCOL.md add, `mode` and
 * `mtime`), or none (NULL: standard input). The mtime is clamped to what
 * nanoseconds in 64 bits hold (years 1678 to 2262).
 */
static void set_file(struct add *add, const struct stat *st)
{
    const int64_t limit = INT64_MAX / 1000000000 - 1;
    int64_t sec;

    add->req.mode = 0;
    add->req.mtime = 0;
    if (!st || !(S_ISREG(st->st_mode) || S_ISDIR(st->st_mode) || S_ISLNK(st->st_mode)))
        return;
    sec = st->st_mtim.tv_sec > limit    ? limit
          : st->st_mtim.tv_sec < -limit ? -limit
                                        : st->st_mtim.tv_sec;
    add->req.mode = (uint32_t)(st->st_mode & (S_IFMT | 07777));
    add->req.mtime = sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* Adds the content of fd (closed here) as `name`; `what` names it in messages. */
static int add_fd(struct add *add, int fd, const char *what, const char *name)
{
    _cleanup_close_ int in = fd;
    const msgpack_object *reply;
    struct client *c;
    struct stat st;
    bool regular = fstat(in, &st) == 0 && S_ISREG(st.st_mode);
    int status, r;

    if (regular && (uint64_t)st.st_size <= PROTO_MAX_DATA) {
        uint8_t *data = NULL;
        size_t len = 0;
        r = read_small(in, (size_t)st.st_size, &data, &len);
        if (r < 0) {
            errno = -r;
            return cli_fail_errno(what);
        }
        if (r == 0) {
            warn_changed(in, &st, what);
            return add_small(add, data, len, what, name);
        }
        /* It grew past a frame: streamed from the start like a large file. */
    }
    /* Streamed: after the adds in flight, so the output stays in order. */
    status = drain(add, 0);
    c = cli_client(add->cli);
    if (!c)
        return add->cli->no_client;
    client_set_progress(c, progress_bytes, &add->progress);
    add->req.name = add->req.heal ? NULL : name; /* healing names nothing */
    /* A regular file is read up to the size it had when opened, so one that keeps growing
     * (a log being written) still ends; one that claims 0 (in /proc) is read to its end. */
    add->req.read_limit = regular ? (uint64_t)st.st_size : 0;
    r = client_add(c, &add->req, in, &reply);
    add->sent++;
    if (r != 0)
        return merge(status, cli_fail(add->cli, what, r));
    if (regular)
        warn_changed(in, &st, what);
    progress_erase(&add->progress);
    return merge(status, print_added(add, stdout, reply, name));
}

static int skip_dots(const struct dirent *entry)
{
    return strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
}

/* No daemon to talk to (unreachable, or a --config that cannot be read): the walk ends. */
static bool ends_walk(int status)
{
    return status == CLI_EXIT_UNREACHABLE || status == CLI_EXIT_USAGE;
}

/* Later failures do not hide earlier ones; a status that ends the walk stays. */
static int merge(int status, int r)
{
    if (ends_walk(status))
        return status;
    if (ends_walk(r))
        return r;
    return r != CLI_EXIT_OK ? r : status;
}

static int add_tree(struct add *add, int dir_fd, const char *path);

/* A symbolic link of a walk, stored as itself: its target is the content, its mode says link. */
static int add_link(struct add *add, int dir, const char *entry, const char *path,
                    const struct stat *st)
{
    uint8_t *target = malloc(PATH_MAX);
    ssize_t n;

    if (!target)
        return cli_fail(add->cli, path, -ENOMEM);
    n = readlinkat(dir, entry, (char *)target, PATH_MAX);
    if (n < 0 || n == PATH_MAX) {
        free(target);
        return fail_local(add, path, n < 0 ? NULL : "the link's target is too long");
    }
    set_file(add, st);
    return add_small(add, target, (size_t)n, path, path);
}

/*
 * A directory of a walk that stored nothing (empty, or all of it left out):
 * the directory itself, as an empty document whose mode says directory, so
 * get -r makes it again. Its path without trailing '/'.
 */
static int add_dir(struct add *add, const char *path, const struct stat *st)
{
    size_t len = strlen(path);
    _cleanup_free_ char *name = NULL;
    uint8_t *empty;

    while (len > 1 && path[len - 1] == '/')
        len--;
    if (!(name = strndup(path, len)) || !(empty = malloc(1)))
        return cli_fail(add->cli, path, -ENOMEM);
    set_file(add, st);
    return add_small(add, empty, 0, path, name);
}

/* The walk of a directory (dir_fd closed here), and the directory itself when it stored nothing. */
static int add_walk(struct add *add, int dir_fd, const char *path)
{
    uint64_t sent = add->sent;
    struct stat st;
    int status;

    if (fstat(dir_fd, &st) < 0) {
        close(dir_fd);
        return fail_local(add, path, NULL);
    }
    status = add_tree(add, dir_fd, path);
    if (add->sent == sent && !ends_walk(status) && !add->req.heal)
        status = merge(status, add_dir(add, path, &st));
    return status;
}

/*
 * Whether --exclude leaves out this entry of a walk: a pattern with a '/'
 * is matched against the whole path, one without against the entry's name
 * (so "*.o" and ".git" work at any depth). An excluded directory is not
 * entered.
 */
static bool excluded(const struct add *add, const char *entry, const char *path)
{
    for (size_t i = 0; i < add->n_excludes; i++) {
        const char *pat = add->excludes[i];
        if (fnmatch(pat, strchr(pat, '/') ? path : entry, FNM_PERIOD) == 0)
            return true;
    }
    return false;
}

/* What -r leaves out is said, one line each (not with -q): nothing is skipped silently. */
static int skipped(struct add *add, const char *path, const char *why)
{
    if (add->cli->verbosity >= 0) {
        progress_erase(&add->progress);
        fprintf(stderr, "cairn: skipped %s: %s\n", path, why);
    }
    return CLI_EXIT_OK;
}

/* One entry of a directory walk; `path` is how the user sees it. */
static int add_entry(struct add *add, int dir, const char *entry, const char *path)
{
    struct stat st;
    int fd, flags = O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC;

    if (excluded(add, entry, path))
        return CLI_EXIT_OK;
    if (fstatat(dir, entry, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fail_local(add, path, NULL);
    if (S_ISDIR(st.st_mode)) {
        fd = openat(dir, entry, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? fail_local(add, path, NULL) : add_walk(add, fd, path);
    }
    /*
     * A link is not followed (it may lead anywhere: /etc/passwd, ~/.ssh)
     * unless -L asks; then only to a regular file, so a link to a directory
     * cannot make the walk loop.
     */
    if (S_ISLNK(st.st_mode)) {
        if (!add->dereference)
            return add_link(add, dir, entry, path, &st);
        if (fstatat(dir, entry, &st, 0) < 0)
            return skipped(add, path, "a symbolic link to nothing");
        if (S_ISDIR(st.st_mode))
            return skipped(add, path, "a symbolic link to a directory (not followed)");
    } else {
        flags |= O_NOFOLLOW;
    }
    if (!S_ISREG(st.st_mode))
        return skipped(add, path, "not a regular file (a FIFO, socket or device)");
    fd = openat(dir, entry, flags);
    if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        close(fd);
        fd = -1;
    }
    set_file(add, &st);
    return fd < 0 ? fail_local(add, path, NULL) : add_fd(add, fd, path, path);
}

/* The regular files below the directory dir_fd (closed here), in byte order of their names. */
static int add_tree(struct add *add, int dir_fd, const char *path)
{
    _cleanup_close_ int dir = dir_fd;
    const char *sep = path[strlen(path) - 1] == '/' ? "" : "/";
    struct dirent **entries;
    int status = CLI_EXIT_OK;
    int n;

    /* alphasort compares with strcoll, which is byte order: cairn never calls setlocale. */
    n = scandirat(dir, ".", &entries, skip_dots, alphasort);
    if (n < 0)
        return fail_local(add, path, NULL);
    for (int i = 0; i < n; i++) {
        _cleanup_free_ char *child = NULL;

        /* After an unreachable daemon the loop only frees the entries. */
        if (!ends_walk(status)) {
            if (asprintf(&child, "%s%s%s", path, sep, entries[i]->d_name) < 0) {
                child = NULL; /* undefined after a failure */
                status = merge(status, cli_fail(add->cli, path, -ENOMEM));
            } else {
                status = merge(status, add_entry(add, dir, entries[i]->d_name, child));
            }
        }
        free(entries[i]);
    }
    free(entries);
    return status;
}

static int add_path(struct add *add, const char *path)
{
    struct stat st;
    int fd;

    if (strcmp(path, "-") == 0) {
        fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
            return cli_fail_errno("standard input");
        set_file(add, NULL);
        return add_fd(add, fd, "standard input", add->name ? add->name : "");
    }
    fd = open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return fail_local(add, path, NULL);
    if (fstat(fd, &st) < 0) {
        close(fd);
        return fail_local(add, path, NULL);
    }
    if (!S_ISDIR(st.st_mode)) {
        /* A named file keeps its mode and mtime; a FIFO or a device has none worth keeping. */
        set_file(add, &st);
        return add_fd(add, fd, path, add->name ? add->name : path);
    }
    if (add->recursive && !add->name)
        return add_walk(add, fd, path);
    close(fd);
    if (add->name)
        return cli_usage_error("add: -n names one document, not the files of directory %s", path);
    return fail_local(add, path, "is a directory (use -r)");
}

/* A map with a repeated key means different things to different readers. */
static bool meta_key_seen(const struct client_meta *meta, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(meta[i].key, key) == 0)
            return true;
    }
    return false;
}

/* After a progress display: what was added, how much was new, and how long it took. */
static void summary(const struct add *add)
{
    char bytes[32], stored[32];
    struct timespec ts;
    double secs;

    if (!add->progress.on || add->docs == 0)
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    secs = ((double)ts.tv_sec * 1e9 + (double)ts.tv_nsec - (double)add->progress.start_ns) / 1e9;
    cli_human_size(add->bytes, bytes, sizeof(bytes));
    cli_human_size(add->new_stored, stored, sizeof(stored));
    if (add->req.heal)
        fprintf(stderr,
                "read %llu file%s, %s; %s rewritten of what verify found damaged in %.1f s\n",
                (unsigned long long)add->docs, add->docs == 1 ? "" : "s", bytes,
                add->new_stored ? stored : "nothing", secs);
    else if (add->new_stored == 0)
        fprintf(stderr, "added %llu document%s, %s; nothing new in the store in %.1f s\n",
                (unsigned long long)add->docs, add->docs == 1 ? "" : "s", bytes, secs);
    else
        fprintf(stderr,
                "added %llu document%s, %s; %s new in the store (%.1fx smaller) in %.1f s\n",
                (unsigned long long)add->docs, add->docs == 1 ? "" : "s", bytes, stored,
                (double)add->bytes / (double)add->new_stored, secs);
}

int cli_cmd_add(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"recursive", no_argument, NULL, 'r'},
        {"name", required_argument, NULL, 'n'},
        {"tag", required_argument, NULL, 't'},
        {"meta", required_argument, NULL, 'm'},
        {"mime", required_argument, NULL, 'M'},
        {"exclude", required_argument, NULL, 'x'},
        {"dereference", no_argument, NULL, 'L'},
        {"null", no_argument, NULL, '0'},
        {"heal", no_argument, NULL, 'H'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    /* No option can occur more often than there are arguments. */
    _cleanup_free_ const char **tags = calloc((size_t)argc, sizeof(*tags));
    _cleanup_free_ const char **excludes = calloc((size_t)argc, sizeof(*excludes));
    _cleanup_free_ struct client_meta *meta = calloc((size_t)argc, sizeof(*meta));
    struct add add = {.cli = cli, .req = {.tags = tags, .meta = meta}, .excludes = excludes};
    int opt, status = CLI_EXIT_OK;

    if (!tags || !meta || !excludes)
        return cli_fail(cli, NULL, -ENOMEM);
    while ((opt = cli_getopt(cli, argc, argv, ":rLn:t:m:h0", options)) != -1) {
        switch (opt) {
        case '0':
            cli->null = true;
            break;
        case 'r':
            add.recursive = true;
            break;
        case 'L':
            add.dereference = true;
            break;
        case 'n':
            add.name = optarg;
            break;
        case 't':
            if (!optarg[0])
                return cli_usage_error("add: empty tag");
            tags[add.req.n_tags++] = optarg;
            break;
        case 'm':
            if (cli_parse_meta(optarg, &meta[add.req.n_meta]) < 0)
                return cli_usage_error("add: -m wants KEY=VALUE, not '%s'", optarg);
            if (meta_key_seen(meta, add.req.n_meta, meta[add.req.n_meta].key))
                return cli_usage_error("add: meta key '%s' given twice", optarg);
            add.req.n_meta++;
            break;
        case 'M':
            add.req.mime = optarg;
            break;
        case 'H':
            add.req.heal = true;
            break;
        case 'x':
            if (!optarg[0])
                return cli_usage_error("add: empty --exclude pattern");
            excludes[add.n_excludes++] = optarg;
            break;
        case 'h':
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("add", opt, argv);
        }
    }
    if (cli_null_conflict(cli, "add", NULL))
        return CLI_EXIT_USAGE;
    if (optind >= argc)
        return cli_usage_error("add: missing PATH");
    if (add.name && argc - optind > 1)
        return cli_usage_error("add: -n names one document, not %d", argc - optind);
    if (add.req.heal && (add.name || add.req.n_tags || add.req.n_meta || add.req.mime))
        return cli_usage_error("add: --heal stores no document: it takes no -n, -t, -m or --mime");
    progress_init(&add.progress, cli, "added", false);
    for (int i = optind; i < argc && !ends_walk(status); i++)
        status = merge(status, add_path(&add, argv[i]));
    status = merge(status, drain(&add, 0));
    progress_end(&add.progress);
    summary(&add);
    return status;
}
