/* The commands besides add: get, rm, ls, stat, refresh, gc, verify and du. */

#include "client/cli.h"
#include "client/progress.h"
#include "client/util.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct option help_only[] = {
    {"help", no_argument, NULL, 'h'},
    {0},
};

/*
 * Parses the options of a command that has none besides --help, and checks
 * that between min and max operands follow. Returns -1 to go on, else the
 * exit status.
 */
static int parse_operands(struct cli *cli, int argc, char **argv, int min, int max,
                          const char *operands)
{
    int opt = cli_getopt(cli, argc, argv, ":h", help_only);

    if (opt == 'h') {
        cli_print_command_help(stdout, argv[0]);
        return CLI_EXIT_OK;
    }
    if (opt != -1)
        return cli_option_error(argv[0], opt, argv);
    if (argc - optind < min)
        return cli_usage_error("%s: missing %s", argv[0], operands);
    if (argc - optind > max)
        return cli_usage_error("%s: too many arguments", argv[0]);
    return -1;
}

/* Prints a single-reply result as JSON or as the `keys` in text. */
static int print_reply(struct cli *cli, const msgpack_object *reply, const char *const *keys)
{
    if (cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    cli_print_fields(stdout, reply, keys);
    return CLI_EXIT_OK;
}

/* The temporary file of a get -o in progress, removed if a signal ends cairn. */
static const char *volatile get_tmp;
static const int get_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void on_get_signal(int sig)
{
    const char *tmp = get_tmp;

    if (tmp)
        unlink(tmp); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Installs (tmp) or removes (NULL) the cleanup; `saved` keeps the old handlers. */
static void guard_tmp(const char *tmp, struct sigaction *saved)
{
    struct sigaction sa = {.sa_handler = on_get_signal};

    if (tmp) {
        get_tmp = tmp;
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < ARRAY_SIZE(get_signals); i++)
            sigaction(get_signals[i], &sa, &saved[i]);
    } else {
        for (size_t i = 0; i < ARRAY_SIZE(get_signals); i++)
            sigaction(get_signals[i], &saved[i], NULL);
        get_tmp = NULL;
    }
}

/*
 * A FIFO, socket or device of another user (root aside: /dev/null, devices)
 * hands the document to whoever reads it: an attacker's FIFO in a directory
 * everyone may write, say. Refused; `cairn get REF > PATH` still writes
 * there for one who means it. 0 or the exit status of the refusal.
 */
static int refuse_foreign(const struct stat *sb, const char *shown)
{
    if (sb->st_uid == geteuid() || sb->st_uid == 0)
        return 0;
    cli_error(0, CLI_CODE_REFUSED, NULL,
              "%s: refusing to write into a %s of uid %u: whoever reads it gets the "
              "document (cairn get REF > %s writes there anyway)",
              shown,
              S_ISFIFO(sb->st_mode)   ? "FIFO"
              : S_ISSOCK(sb->st_mode) ? "socket"
                                      : "device",
              (unsigned)sb->st_uid, shown);
    return CLI_EXIT_FAILED;
}

/*
 * Writes into `path` as it is, for one that is not a regular file (a device
 * such as /dev/null or a terminal, a FIFO): renaming a file over it would
 * replace the device node with that file.
 */
static int get_to_special(struct cli *cli, struct client *c, const char *ref, uint64_t offset,
                          uint64_t length, const char *path, const char *shown, bool nofollow,
                          const struct stat *before)
{
    struct stat sb;
    int fd, r;

    if ((r = refuse_foreign(before, shown)) != 0)
        return r;
    fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0)
        return cli_fail_errno(shown);
    /* What was opened may not be what was looked at. */
    if (fstat(fd, &sb) < 0 || (r = refuse_foreign(&sb, shown)) != 0) {
        close(fd);
        return r ? r : cli_fail_errno(shown);
    }
    r = client_get_range_fd(c, ref, offset, length, fd, false);
    if (close(fd) < 0 && r == 0)
        return cli_fail_errno(shown);
    return r == 0 ? CLI_EXIT_OK : cli_fail(cli, r == CLIENT_E_IO ? shown : ref, r);
}

/*
 * Writes the document to a temporary file beside `path` and renames it into
 * place only when the whole stream arrived intact, so a failed get never
 * leaves a partial or corrupt `path`. `shown` names it in messages; with
 * `nofollow` a symbolic link at `path` is replaced, never followed.
 */
static int get_to_file(struct cli *cli, struct client *c, const char *ref, uint64_t offset,
                       uint64_t length, const char *path, const char *shown, bool nofollow,
                       const struct cli_fattr *fa)
{
    _cleanup_free_ char *tmp = NULL;
    struct sigaction saved[ARRAY_SIZE(get_signals)];
    sigset_t block, old_mask;
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path + 1) : 0;
    struct stat sb;
    mode_t mask, mode;
    bool existed = false;
    int fd, r;

    if ((nofollow ? lstat(path, &sb) : stat(path, &sb)) == 0) {
        if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode) && !S_ISLNK(sb.st_mode))
            return get_to_special(cli, c, ref, offset, length, path, shown, nofollow, &sb);
        existed = S_ISREG(sb.st_mode);
    }
    if (asprintf(&tmp, "%.*s.%s.XXXXXX", dir_len, path, path + dir_len) < 0) {
        tmp = NULL;
        return cli_fail(cli, shown, -ENOMEM);
    }
    /* Blocked while the file is made, so a signal never finds it unnamed in get_tmp. */
    sigemptyset(&block);
    for (size_t i = 0; i < ARRAY_SIZE(get_signals); i++)
        sigaddset(&block, get_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &old_mask);
    fd = mkostemp(tmp, O_CLOEXEC);
    if (fd >= 0)
        guard_tmp(tmp, saved);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (fd < 0)
        return cli_fail_errno(shown);
    /* A new file: runs of zeros become holes, as cp and rsync -S make them. */
    r = client_get_range_fd(c, ref, offset, length, fd, true);
    if (r != 0) {
        close(fd);
        unlink(tmp);
        guard_tmp(NULL, saved);
        return cli_fail(cli, r == CLIENT_E_IO ? shown : ref, r);
    }
    /*
     * mkostemp creates 0600. A file replaced keeps its permissions, as cp
     * keeps them (a private file stays private); a new one gets those a
     * plain create would.
     */
    mask = umask(0);
    umask(mask);
    mode = existed ? sb.st_mode & 0777 : 0666 & ~mask;
    if (fa && fa->mode)
        mode = fa->mode & 0777; /* restored as recorded; never setuid, setgid or sticky */
    r = fchmod(fd, mode);
    if (r == 0 && fa && fa->mode) {
        struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, cli_timespec_ns(fa->mtime)};
        r = futimens(fd, times);
    }
    if (close(fd) < 0 || r < 0 || rename(tmp, path) < 0) {
        int e = errno;
        unlink(tmp);
        guard_tmp(NULL, saved);
        errno = e;
        return cli_fail_errno(shown);
    }
    guard_tmp(NULL, saved);
    return CLI_EXIT_OK;
}

int cli_get_to_file(struct cli *cli, struct client *c, const char *ref, uint64_t offset,
                    uint64_t length, const char *path)
{
    return get_to_file(cli, c, ref, offset, length, path, path, false, NULL);
}

int cli_restore_file(struct cli *cli, struct client *c, const char *ref, const char *name,
                     const char *shown, const struct cli_fattr *fa)
{
    return get_to_file(cli, c, ref, 0, UINT64_MAX, name, shown, true, fa);
}

/* "START-END" (END included) or "START-" (to the end) into offset and length. */
static int parse_range(const char *s, uint64_t *offset, uint64_t *length)
{
    uint64_t start, end;
    char *p;

    if (*s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    start = strtoull(s, &p, 10);
    if (errno || *p != '-')
        return -EINVAL;
    *offset = start;
    if (*++p == '\0') {
        *length = UINT64_MAX;
        return 0;
    }
    if (*p < '0' || *p > '9')
        return -EINVAL;
    end = strtoull(p, &p, 10);
    if (errno || *p || end < start)
        return -EINVAL;
    *length = end - start == UINT64_MAX ? UINT64_MAX : end - start + 1;
    return 0;
}

int cli_cmd_get(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"output", required_argument, NULL, 'o'},
        {"recursive", no_argument, NULL, 'r'},
        {"range", required_argument, NULL, 'R'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *out = NULL, *ref, *range = NULL;
    uint64_t offset = 0, length = UINT64_MAX;
    struct progress progress;
    bool recursive = false;
    struct client *c;
    int opt, r;

    while ((opt = cli_getopt(cli, argc, argv, ":o:rh", options)) != -1) {
        switch (opt) {
        case 'o':
            out = optarg;
            break;
        case 'r':
            recursive = true;
            break;
        case 'R':
            range = optarg;
            break;
        case 'h':
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("get", opt, argv);
        }
    }
    if (range && parse_range(range, &offset, &length) < 0)
        return cli_usage_error("get: --range wants START-END or START- (bytes, END "
                               "included, END >= START), not '%s'",
                               range);
    if (recursive) {
        if (out || range)
            return cli_usage_error("get: -r writes whole documents under DIR: no -o or --range");
        if (argc - optind != 2)
            return cli_usage_error("get: -r wants PREFIX and DIR");
        return cli_get_tree(cli, argv[optind], argv[optind + 1]);
    }
    if (argc - optind != 1)
        return cli_usage_error("get: %s", optind >= argc ? "missing REF" : "too many arguments");
    ref = argv[optind];
    c = cli_client(cli);
    if (!c)
        return cli->no_client;
    progress_init(&progress, cli, "got", true);
    client_set_progress(c, progress_bytes, &progress);
    if (out && strcmp(out, "-") != 0) {
        r = cli_get_to_file(cli, c, ref, offset, length, out);
        progress_end(&progress);
        return r;
    }
    /* Straight from the receive buffer to fd 1: stdio is never involved. */
    r = client_get_range_fd(c, ref, offset, length, STDOUT_FILENO, false);
    progress_end(&progress);
    return r == 0 ? CLI_EXIT_OK : cli_fail(cli, r == CLIENT_E_IO ? "standard output" : ref, r);
}

/* Prints `verb` and each string of the array `key` of the reply, one a line. */
static void print_each(const msgpack_object *reply, const char *key, const char *verb)
{
    const msgpack_object *v = proto_map_get(reply, key);

    if (!v || v->type != MSGPACK_OBJECT_ARRAY)
        return;
    for (uint32_t i = 0; i < v->via.array.size; i++) {
        const msgpack_object *s = &v->via.array.ptr[i];
        if (s->type == MSGPACK_OBJECT_STR) {
            printf("%s ", verb);
            cli_put_text(stdout, s->via.str.ptr, s->via.str.size);
            putchar('\n');
        }
    }
}

/*
 * By name: "removed NAME", then "deleted HASH" for each document that went
 * with it. By hash: "deleted HASH", then the names it had, indented (a name
 * with older versions still points to the previous one).
 */
static void print_removal(const msgpack_object *reply, bool dry_run)
{
    const char *name = "";
    size_t name_len = 0;
    uint64_t cut = 0;

    proto_get_str(reply, "name", &name, &name_len);
    if (name_len) {
        printf("%s ", dry_run ? "would remove" : "removed");
        cli_put_text(stdout, name, name_len);
        putchar('\n');
    }
    print_each(reply, "deleted", dry_run ? "would delete" : "deleted");
    if (proto_get_uint(reply, "deleted_cut", &cut) == 0 && cut)
        printf("%s %" PRIu64 " more documents\n", dry_run ? "would delete" : "deleted", cut);
    if (name_len)
        return;
    print_each(reply, "names", "  name");
    if (proto_get_uint(reply, "names_cut", &cut) == 0 && cut)
        printf("  and %" PRIu64 " older names\n", cut);
}

int cli_cmd_rm(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"dry-run", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    bool dry_run = false;
    struct client *c;
    int opt, status;

    while ((opt = cli_getopt(cli, argc, argv, ":nh", options)) != -1) {
        switch (opt) {
        case 'n':
            dry_run = true;
            break;
        case 'h':
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        default:
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (optind >= argc)
        return cli_usage_error("%s: missing REF", argv[0]);
    status = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        const msgpack_object *reply;
        json_t *json;
        int r;

        c = cli_client(cli);
        if (!c)
            return cli->no_client;
        r = client_delete(c, argv[i], dry_run, &reply);
        if (r != 0) {
            status = cli_fail(cli, argv[i], r);
            continue;
        }
        if (cli->json) {
            json = json_pack("{s:s}", "ref", argv[i]);
            if (json && json_object_update_new(json, cli_json_reply(reply)) < 0) {
                json_decref(json);
                json = NULL;
            }
            if (cli_print_json(stdout, json) < 0)
                status = CLI_EXIT_FAILED;
            continue;
        }
        print_removal(reply, dry_run);
    }
    return status;
}

struct ls_opts {
    const struct cli *cli;
    bool docs, long_form, human;
};

/* A size as a number of bytes, or with -h in KiB, MiB... */
static void ls_size(const struct ls_opts *o, uint64_t n, char *buf, size_t len)
{
    if (o->human)
        cli_human_size(n, buf, len);
    else
        snprintf(buf, len, "%" PRIu64, n);
}

/*
 * ls: `<hash 12>  <size>  <date>  <name>` per name; --docs: `<hash>  <size>
 * <name>` per document; -l: `<mode>  <hash>  <size>  <stored>  <mime>
 * <time>  <name>`, the time the file's mtime when the name has one. A
 * document without a name shows `-`.
 */
static void print_doc(void *userdata, const msgpack_object *doc)
{
    const struct ls_opts *o = userdata;
    const char *hash = "", *name = "", *mime = "";
    size_t hash_len = 0, name_len = 0, mime_len = 0;
    uint64_t size = 0, stored = 0, when = 0, mode = 0;
    int64_t mtime = 0;
    char sz[32], st[32], t[CLI_TIME_MAX], m[CLI_MODE_MAX];

    if (o->cli->json) {
        cli_print_json(stdout, cli_json_reply(doc));
        return;
    }
    proto_get_str(doc, "hash", &hash, &hash_len);
    proto_get_uint(doc, "size", &size);
    proto_get_uint(doc, "stored_size", &stored);
    proto_get_str(doc, "name", &name, &name_len);
    proto_get_str(doc, "mime", &mime, &mime_len);
    if (proto_get_uint(doc, "named", &when) != 0)
        proto_get_uint(doc, "created", &when);
    if (o->cli->null) {
        /* The ref: the name, or the hash of a document without one (and with --docs). */
        if (o->docs || name_len == 0)
            cli_put_record(o->cli, stdout, hash, hash_len);
        else
            cli_put_record(o->cli, stdout, name, name_len);
        return;
    }
    if (name_len == 0) {
        name = "-";
        name_len = 1;
    }
    ls_size(o, size, sz, sizeof(sz));
    if (o->long_form) {
        ls_size(o, stored, st, sizeof(st));
        if (proto_get_uint(doc, "mode", &mode) == 0 && mode <= UINT32_MAX &&
            proto_get_int(doc, "mtime", &mtime) == 0 && mtime >= 0)
            when = (uint64_t)mtime / 1000000000u;
        else
            mode = 0;
        cli_format_mode((uint32_t)mode, m);
        cli_format_time(when, t);
        printf("%s  %.*s  %10s  %10s  %-24.*s  %s  ", m, (int)hash_len, hash, sz, st, (int)mime_len,
               mime, t);
    } else if (o->docs) {
        printf("%.*s  %s  ", (int)hash_len, hash, sz);
    } else {
        cli_format_time(when, t);
        if (strlen(t) == 20) { /* 2026-12-01T15:59:22Z -> 2026-12-01 15:59 */
            t[10] = ' ';
            t[16] = '\0';
        }
        printf("%.12s  %10s  %s  ", hash, sz, t);
    }
    cli_put_record(o->cli, stdout, name, name_len);
}

int cli_cmd_ls(struct cli *cli, int argc, char **argv)
{
    enum { OPT_HELP = 256 };
    static const struct option options[] = {
        {"tag", required_argument, NULL, 't'},
        {"docs", no_argument, NULL, 'd'},
        {"long", no_argument, NULL, 'l'},
        {"human-readable", no_argument, NULL, 'h'},
        {"null", no_argument, NULL, '0'},
        {"help", no_argument, NULL, OPT_HELP},
        {0},
    };
    struct ls_opts o = {.cli = cli};
    struct client_list_req req = {.mode = CLIENT_LIST_NAMES};
    struct client *c;
    int opt, r;

    while ((opt = cli_getopt(cli, argc, argv, ":t:dlh0", options)) != -1) {
        switch (opt) {
        case '0':
            cli->null = true;
            break;
        case 't':
            req.tag = optarg;
            break;
        case 'd':
            o.docs = true;
            break;
        case 'l':
            o.long_form = true;
            break;
        case 'h':
            o.human = true;
            break;
        case OPT_HELP:
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        default:
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (cli_null_conflict(cli, argv[0], o.long_form ? "-l" : o.human ? "-h" : NULL))
        return CLI_EXIT_USAGE;
    if (argc - optind > 1)
        return cli_usage_error("%s: too many arguments", argv[0]);
    if (optind < argc && o.docs)
        return cli_usage_error("%s: --docs takes no PREFIX", argv[0]);
    req.prefix = optind < argc ? argv[optind] : NULL;
    req.path = true;
    c = cli_client(cli);
    if (!c)
        return cli->no_client;
    if (o.docs)
        req.mode = CLIENT_LIST_DOCS;
    r = client_list_req(c, &req, print_doc, &o);
    /* Without a prefix, every document shows: those without a name after the names. */
    if (r == 0 && !o.docs && !req.prefix) {
        req.mode = CLIENT_LIST_UNNAMED;
        r = client_list_req(c, &req, print_doc, &o);
    }
    return r == 0 ? CLI_EXIT_OK : cli_fail(cli, NULL, r);
}

int cli_cmd_stat(struct cli *cli, int argc, char **argv)
{
    static const char *const keys[] = {"hash",      "name", "mode",        "mtime",  "names",
                                       "names_cut", "size", "stored_size", "chunks", "mime",
                                       "created",   "tags", "meta",        NULL};
    int status = parse_operands(cli, argc, argv, 1, 1, "REF");
    const msgpack_object *reply;
    struct client *c;
    int r;

    if (status >= 0)
        return status;
    c = cli_client(cli);
    if (!c)
        return cli->no_client;
    r = client_stat(c, argv[optind], &reply);
    return r == 0 ? print_reply(cli, reply, keys) : cli_fail(cli, argv[optind], r);
}

/* cp SRC DST and mv SRC DST: `<hash>  DST`, as add prints a name it stored. */
static int name_command(struct cli *cli, int argc, char **argv, bool rename)
{
    int status = parse_operands(cli, argc, argv, 2, 2, rename ? "NAME NEWNAME" : "REF NAME");
    const msgpack_object *reply;
    const char *hash = "";
    size_t hash_len = 0;
    struct client *c;
    int r;

    if (status >= 0)
        return status;
    if (!(c = cli_client(cli)))
        return cli->no_client;
    r = client_name(c, argv[optind], argv[optind + 1], rename, &reply);
    if (r != 0)
        return cli_fail(cli, argv[optind], r);
    if (cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    proto_get_str(reply, "hash", &hash, &hash_len);
    printf("%.*s  ", (int)hash_len, hash);
    cli_put_record(cli, stdout, argv[optind + 1], strlen(argv[optind + 1]));
    return CLI_EXIT_OK;
}

int cli_cmd_cp(struct cli *cli, int argc, char **argv)
{
    return name_command(cli, argc, argv, false);
}

int cli_cmd_mv(struct cli *cli, int argc, char **argv)
{
    return name_command(cli, argc, argv, true);
}

/*
 * A command without operands: one request, its reply printed as `keys`.
 * `verb` names a long job whose progress is shown (NULL: none).
 */
static int reply_command(struct cli *cli, int argc, char **argv,
                         int (*call)(struct client *, const msgpack_object **),
                         const char *const *keys, const char *verb)
{
    int status = parse_operands(cli, argc, argv, 0, 0, "");
    const msgpack_object *reply;
    struct progress progress;
    struct client *c;
    int r;

    if (status >= 0)
        return status;
    c = cli_client(cli);
    if (!c)
        return cli->no_client;
    progress_init(&progress, cli, verb ? verb : "", false);
    if (verb && progress.on)
        client_set_job_progress(c, progress_job, &progress);
    r = call(c, &reply);
    progress_end(&progress);
    return r == 0 ? print_reply(cli, reply, keys) : cli_fail(cli, NULL, r);
}

int cli_cmd_refresh(struct cli *cli, int argc, char **argv)
{
    static const char *const keys[] = {NULL};
    return reply_command(cli, argc, argv, client_refresh, keys, NULL);
}

int cli_cmd_gc(struct cli *cli, int argc, char **argv)
{
    static const char *const keys[] = {"packs_rewritten",  "packs_deleted",  "bytes_reclaimed",
                                       "bytes_dead",       "chunks_removed", "packs_pending",
                                       "bytes_pending",    "packs_failed",   "failure",
                                       "waiting_requests", "waiting_ms",     NULL};
    return reply_command(cli, argc, argv, client_gc, keys, "gc");
}

/* Prints each bad chunk with the documents that use it; exit 1 when any is bad. */
static int print_verify(struct cli *cli, const msgpack_object *reply)
{
    const msgpack_object *bad = proto_map_get(reply, "bad");
    uint64_t checked = 0, bytes = 0, nbad = 0;

    proto_get_uint(reply, "chunks_checked", &checked);
    proto_get_uint(reply, "bytes_checked", &bytes);
    proto_get_uint(reply, "bad_count", &nbad);
    if (cli->json) {
        if (cli_print_json(stdout, cli_json_reply(reply)) < 0)
            return CLI_EXIT_FAILED;
    } else {
        for (uint32_t i = 0; bad && bad->type == MSGPACK_OBJECT_ARRAY && i < bad->via.array.size;
             i++) {
            const msgpack_object *b = &bad->via.array.ptr[i], *docs;
            const char *chunk = "", *err = "";
            size_t chunk_len = 0, err_len = 0;
            proto_get_str(b, "chunk", &chunk, &chunk_len);
            proto_get_str(b, "error", &err, &err_len);
            printf("bad chunk %.*s (%.*s)\n", (int)chunk_len, chunk, (int)err_len, err);
            docs = proto_map_get(b, "documents");
            for (uint32_t d = 0;
                 docs && docs->type == MSGPACK_OBJECT_ARRAY && d < docs->via.array.size; d++) {
                const char *hash = "", *name = "";
                size_t hash_len = 0, name_len = 0;
                proto_get_str(&docs->via.array.ptr[d], "hash", &hash, &hash_len);
                proto_get_str(&docs->via.array.ptr[d], "name", &name, &name_len);
                printf("  used by %.*s  %.*s\n", (int)hash_len, hash, name_len ? (int)name_len : 1,
                       name_len ? name : "-");
            }
        }
        printf("checked %" PRIu64 " chunks (%" PRIu64 " bytes): %" PRIu64 " bad\n", checked, bytes,
               nbad);
    }
    if (nbad > 0) {
        return cli_error(CLI_EXIT_FAILED, "integrity", NULL, "verify: %" PRIu64 " bad chunk%s",
                         nbad, nbad == 1 ? "" : "s");
    }
    return CLI_EXIT_OK;
}

/*
 * Takes out of refs those that name no one document, saying why for each
 * ("cairn: REF: not found", ambiguous...): CLI_EXIT_OK, CLI_EXIT_FAILED when
 * one was taken out, or the status of a broken connection (refs then left
 * as they are).
 */
static int drop_missing(struct cli *cli, struct client *c, const char **refs, size_t *nrefs)
{
    const msgpack_object *reply;
    int status = CLI_EXIT_OK;
    size_t kept = 0;

    for (size_t i = 0; i < *nrefs; i++) {
        int r = client_stat(c, refs[i], &reply);
        if (r == 0) {
            refs[kept++] = refs[i];
            continue;
        }
        if (r != CLIENT_E_DAEMON)
            return cli_fail(cli, refs[i], r);
        status = cli_fail(cli, refs[i], r);
    }
    *nrefs = kept;
    return status;
}

int cli_cmd_verify(struct cli *cli, int argc, char **argv)
{
    int status = parse_operands(cli, argc, argv, 0, PROTO_MAX_TAGS, "REF");
    const msgpack_object *reply;
    struct progress progress;
    const char **refs;
    size_t nrefs;
    struct client *c;
    int r;

    if (status >= 0)
        return status;
    c = cli_client(cli);
    if (!c)
        return cli->no_client;
    refs = (const char **)argv + optind;
    nrefs = (size_t)(argc - optind);
    /* Refs that name nothing are reported one by one, and the others verified. */
    if (nrefs > 0) {
        /* Not one left: a verify of no refs would check the whole store. */
        if ((status = drop_missing(cli, c, refs, &nrefs)) != CLI_EXIT_OK &&
            (nrefs == 0 || !client_connected(c)))
            return status;
    } else {
        status = CLI_EXIT_OK;
    }
    progress_init(&progress, cli, "verified", false);
    if (progress.on)
        client_set_job_progress(c, progress_job, &progress);
    r = client_verify(c, refs, nrefs, &reply);
    progress_end(&progress);
    r = r == 0 ? print_verify(cli, reply) : cli_fail(cli, NULL, r);
    return r != CLI_EXIT_OK ? r : status;
}
