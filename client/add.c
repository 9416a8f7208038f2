/* `cairn add`: files, standard input and directory trees. */

#include "client/cli.h"
#include "client/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>

struct add {
    struct cli *cli;
    struct client_add_req req;
    const char *name; /* -n */
    bool recursive;
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

/* Adds the content of fd (closed here) as `name`; `what` names it in messages. */
static int add_fd(struct add *add, int fd, const char *what, const char *name)
{
    _cleanup_close_ int in = fd;
    const msgpack_object *reply;
    struct client *c = cli_client(add->cli);
    const char *hash = "", *echoed = name;
    size_t hash_len = 0, echoed_len = strlen(name);
    int r;

    if (!c)
        return CLI_EXIT_UNREACHABLE;
    add->req.name = name;
    r = client_add(c, &add->req, in, &reply);
    if (r != 0)
        return cli_fail(add->cli, what, r);
    if (add->cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    proto_get_str(reply, "hash", &hash, &hash_len);
    proto_get_str(reply, "name", &echoed, &echoed_len);
    if (echoed_len == 0)
        printf("%.*s  -\n", (int)hash_len, hash);
    else
        printf("%.*s  %.*s\n", (int)hash_len, hash, (int)echoed_len, echoed);
    return CLI_EXIT_OK;
}

static int skip_dots(const struct dirent *entry)
{
    return strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0;
}

/* Later failures do not hide earlier ones; an unreachable daemon ends the walk. */
static int merge(int status, int r)
{
    if (r == CLI_EXIT_UNREACHABLE || status == CLI_EXIT_UNREACHABLE)
        return CLI_EXIT_UNREACHABLE;
    return r != CLI_EXIT_OK ? r : status;
}

static int add_tree(struct add *add, int dir_fd, const char *path);

/* One entry of a directory walk; `path` is how the user sees it. */
static int add_entry(struct add *add, int dir, const char *entry, const char *path)
{
    struct stat st;
    int fd;

    if (fstatat(dir, entry, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return cli_fail_errno(path);
    if (S_ISDIR(st.st_mode)) {
        fd = openat(dir, entry, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? cli_fail_errno(path) : add_tree(add, fd, path);
    }
    /* Links count only when they lead to a regular file, so a link to a
     * directory cannot make the walk loop; dangling ones are skipped too. */
    if (S_ISLNK(st.st_mode) && fstatat(dir, entry, &st, 0) < 0)
        return CLI_EXIT_OK;
    if (!S_ISREG(st.st_mode))
        return CLI_EXIT_OK;
    fd = openat(dir, entry, O_RDONLY | O_NOCTTY | O_CLOEXEC);
    return fd < 0 ? cli_fail_errno(path) : add_fd(add, fd, path, path);
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
        return cli_fail_errno(path);
    for (int i = 0; i < n; i++) {
        _cleanup_free_ char *child = NULL;

        /* After an unreachable daemon the loop only frees the entries. */
        if (status != CLI_EXIT_UNREACHABLE) {
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
        return add_fd(add, fd, "standard input", add->name ? add->name : "");
    }
    fd = open(path, O_RDONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return cli_fail_errno(path);
    if (fstat(fd, &st) < 0) {
        close(fd);
        return cli_fail_errno(path);
    }
    if (!S_ISDIR(st.st_mode))
        return add_fd(add, fd, path, add->name ? add->name : path);
    if (add->recursive && !add->name)
        return add_tree(add, fd, path);
    close(fd);
    if (add->name)
        return cli_usage_error("add: -n names one document, not the files of directory %s", path);
    fprintf(stderr, "cairn: %s: is a directory (use -r)\n", path);
    return CLI_EXIT_FAILED;
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

int cli_cmd_add(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"recursive", no_argument, NULL, 'r'},
        {"name", required_argument, NULL, 'n'},
        {"tag", required_argument, NULL, 't'},
        {"meta", required_argument, NULL, 'm'},
        {"mime", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    /* No option can occur more often than there are arguments. */
    _cleanup_free_ const char **tags = calloc((size_t)argc, sizeof(*tags));
    _cleanup_free_ struct client_meta *meta = calloc((size_t)argc, sizeof(*meta));
    struct add add = {.cli = cli, .req = {.tags = tags, .meta = meta}};
    int opt, status = CLI_EXIT_OK;

    if (!tags || !meta)
        return cli_fail(cli, NULL, -ENOMEM);
    while ((opt = getopt_long(argc, argv, ":rn:t:m:h", options, NULL)) != -1) {
        switch (opt) {
        case 'r':
            add.recursive = true;
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
        case 'h':
            cli_print_usage(stdout);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("add", opt, argv);
        }
    }
    if (optind >= argc)
        return cli_usage_error("add: missing PATH");
    if (add.name && argc - optind > 1)
        return cli_usage_error("add: -n names one document, not %d", argc - optind);
    for (int i = optind; i < argc && status != CLI_EXIT_UNREACHABLE; i++)
        status = merge(status, add_path(&add, argv[i]));
    return status;
}
