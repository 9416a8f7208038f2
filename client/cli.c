/* The command line: global options, dispatch, connecting, reporting errors. */

#include "client/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Only bounds the wait for a daemon whose listen backlog is full. */
#define CONNECT_TIMEOUT_MS 5000

static int cmd_help(struct cli *cli, int argc, char **argv)
{
    cli_print_usage(stdout);
    return CLI_EXIT_OK;
}

static const struct command {
    const char *name;
    int (*run)(struct cli *cli, int argc, char **argv);
} commands[] = {
    {"add", cli_cmd_add},   {"get", cli_cmd_get},       {"rm", cli_cmd_rm},
    {"delete", cli_cmd_rm}, {"ls", cli_cmd_ls},         {"list", cli_cmd_ls},
    {"stat", cli_cmd_stat}, {"status", cli_cmd_status}, {"search", cli_cmd_search},
    {"gc", cli_cmd_gc},     {"verify", cli_cmd_verify}, {"help", cmd_help},
};

void cli_print_usage(FILE *out)
{
    fputs(
        "Usage: cairn [--socket PATH] [--config FILE] [--json] [--no-autostart] COMMAND [ARGS]\n"
        "(the options may also come after the command)\n"
        "\n"
        "Commands:\n"
        "  add [-r] [-n NAME] [-t TAG]... [-m KEY=VALUE]... [--mime TYPE] PATH...\n"
        "                  store files; - reads standard input, -r adds directories\n"
        "  get [-o FILE] REF\n"
        "                  write a document to standard output or FILE\n"
        "  rm REF...       delete documents (alias: delete)\n"
        "  ls [-t TAG]     list documents (alias: list)\n"
        "  stat REF        show a document's details\n"
        "  status          show the daemon's state\n"
        "  gc              remove chunks no document uses any more\n"
        "  verify [REF]... re-read and re-hash stored chunks (all without REF)\n"
        "  search [-l N] [--offset N] [-t TAG]... [--name GLOB] [--mime TYPE]\n"
        "         [--after DATE] [--before DATE] [--fuzzy] QUERY...\n"
        "                  ranked full-text search: words, \"phrases\", OR, NOT or -word,\n"
        "                  prefix*, name:word, tag:value\n"
        "  help            show this help\n"
        "\n"
        "A REF is a hash, a unique hash prefix of at least 8 digits, or a name.\n"
        "\n"
        "Options:\n"
        "  --socket PATH   cairnd's socket (default: $CAIRN_SOCKET, else the config file's\n"
        "                  [daemon] socket, else $XDG_RUNTIME_DIR/cairn/cairnd.sock,\n"
        "                  else /tmp/cairn-$UID/cairnd.sock)\n"
        "  --config FILE   cairnd's config file, for [daemon] socket and [store] data_dir,\n"
        "                  passed on to a cairnd the command starts (default:\n"
        "                  $XDG_CONFIG_HOME/cairn/cairn.conf, else ~/.config/cairn/cairn.conf)\n"
        "  --json          print one JSON object per line\n"
        "  --no-autostart  fail instead of starting cairnd when it is not running\n"
        "  --help          show this help\n"
        "  -V, --version   show the version\n"
        "\n"
        "Exit status: 0 success, 1 an operation failed, 2 usage error,\n"
        "3 cairnd unreachable.\n",
        out);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("cairn: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'cairn --help' for more information.\n", stderr);
    return CLI_EXIT_USAGE;
}

int cli_option_error(const char *cmd, int opt, char **argv)
{
    /* getopt leaves the offending word just before optind. */
    const char *word = argv[optind - 1];
    const char *sep = cmd ? ": " : "";

    cmd = cmd ? cmd : "";
    if (opt == ':')
        return cli_usage_error("%s%soption '%s' needs an argument", cmd, sep, word);
    if (optopt)
        return cli_usage_error("%s%sunknown option '-%c'", cmd, sep, optopt);
    return cli_usage_error("%s%sunknown option '%s'", cmd, sep, word);
}

struct client *cli_client(struct cli *cli)
{
    int r;

    if (cli->client && client_connected(cli->client))
        return cli->client;
    cli->client = client_free(cli->client);
    if (!cli->config.loaded && cli_config_load(&cli->config, cli->config_path) < 0)
        return NULL;
    /* --socket, else $CAIRN_SOCKET, else the config file's, else the default. */
    if (!cli->socket && !(getenv("CAIRN_SOCKET") && getenv("CAIRN_SOCKET")[0]) &&
        cli->config.socket[0])
        cli->socket = cli->config.socket;
    if (!cli->socket) {
        r = client_socket_path(cli->socket_buf, sizeof(cli->socket_buf));
        if (r < 0) {
            fprintf(stderr, "cairn: socket path: %s\n", strerror(-r));
            return NULL;
        }
        cli->socket = cli->socket_buf;
    }
    r = client_connect(&cli->client, cli->socket, CONNECT_TIMEOUT_MS);
    if ((r == -ENOENT || r == -ECONNREFUSED) && cli->autostart)
        return cli_autostart(cli, &cli->client) == 0 ? cli->client : NULL;
    if (r < 0) {
        fprintf(stderr, "cairn: cannot connect to cairnd at %s: %s\n", cli->socket, strerror(-r));
        return NULL;
    }
    return cli->client;
}

/* The daemon's message says what went wrong; the bare code is the fallback. */
static void describe_daemon_error(const struct client_error *e, char *buf, size_t size)
{
    char code[sizeof(e->code_name)];

    if (e->message[0] && strcmp(e->message, e->code_name) != 0) {
        snprintf(buf, size, "%s", e->message);
        return;
    }
    /* "not_found" reads better as "not found". */
    for (size_t i = 0; i < sizeof(code); i++)
        code[i] = e->code_name[i] == '_' ? ' ' : e->code_name[i];
    snprintf(buf, size, "%s", code);
}

int cli_fail(struct cli *cli, const char *what, int rc)
{
    char why[sizeof(((struct client_error *)NULL)->message) + 64];

    if (rc == CLIENT_E_DAEMON)
        describe_daemon_error(client_error(cli->client), why, sizeof(why));
    else if (rc == CLIENT_E_IO)
        snprintf(why, sizeof(why), "%s", strerror(client_error(cli->client)->errnum));
    else if (rc == -ECONNRESET)
        snprintf(why, sizeof(why), "cairnd closed the connection");
    else if (rc == -EBADMSG)
        snprintf(why, sizeof(why), "malformed reply from cairnd");
    else if (rc == -EMSGSIZE)
        snprintf(why, sizeof(why), "request too large for one frame");
    else
        snprintf(why, sizeof(why), "%s", strerror(-rc));
    if (what)
        fprintf(stderr, "cairn: %s: %s\n", what, why);
    else
        fprintf(stderr, "cairn: %s\n", why);
    return CLI_EXIT_FAILED;
}

int cli_fail_errno(const char *what)
{
    fprintf(stderr, "cairn: %s: %s\n", what, strerror(errno));
    return CLI_EXIT_FAILED;
}

/* Codes of the global options among a command's own. */
enum {
    GLOBAL_SOCKET = 0x1000,
    GLOBAL_JSON,
    GLOBAL_NO_AUTOSTART,
    GLOBAL_CONFIG,
};

static bool take_global(struct cli *cli, int opt)
{
    switch (opt) {
    case GLOBAL_SOCKET:
        cli->socket = optarg;
        return true;
    case GLOBAL_JSON:
        cli->json = true;
        return true;
    case GLOBAL_NO_AUTOSTART:
        cli->autostart = false;
        return true;
    case GLOBAL_CONFIG:
        cli->config_path = optarg;
        return true;
    default:
        return false;
    }
}

int cli_getopt(struct cli *cli, int argc, char **argv, const char *shortopts,
               const struct option *longopts)
{
    struct option merged[CLI_MAX_OPTIONS + 5];
    size_t n = 0;
    int opt;

    while (n < CLI_MAX_OPTIONS && longopts[n].name) {
        merged[n] = longopts[n];
        n++;
    }
    merged[n++] = (struct option){"socket", required_argument, NULL, GLOBAL_SOCKET};
    merged[n++] = (struct option){"json", no_argument, NULL, GLOBAL_JSON};
    merged[n++] = (struct option){"no-autostart", no_argument, NULL, GLOBAL_NO_AUTOSTART};
    merged[n++] = (struct option){"config", required_argument, NULL, GLOBAL_CONFIG};
    merged[n] = (struct option){0};
    do
        opt = getopt_long(argc, argv, shortopts, merged, NULL);
    while (take_global(cli, opt));
    return opt;
}

int cli_take_trailing_globals(struct cli *cli, int argc, char **argv, int from)
{
    int out = from;

    for (int i = from; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            cli->json = true;
        } else if (strcmp(argv[i], "--no-autostart") == 0) {
            cli->autostart = false;
        } else if (strncmp(argv[i], "--socket=", 9) == 0) {
            cli->socket = argv[i] + 9;
        } else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
            cli->socket = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            cli->config_path = argv[i] + 9;
        } else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            cli->config_path = argv[++i];
        } else {
            argv[out++] = argv[i];
        }
    }
    return out;
}

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    }
    return NULL;
}

/* Output already written cannot be taken back, but a lost write is still a failure. */
static int close_stdout(int status)
{
    if (fclose(stdout) != 0 && status == CLI_EXIT_OK) {
        fprintf(stderr, "cairn: standard output: %s\n", strerror(errno));
        return CLI_EXIT_FAILED;
    }
    return status;
}

int cli_main(int argc, char **argv)
{
    static const struct option options[] = {
        {"socket", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'j'},
        {"no-autostart", no_argument, NULL, 'A'}, {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {"config", required_argument, NULL, 'c'},
        {0},
    };
    struct cli cli = {.autostart = true};
    const struct command *cmd;
    int opt, status;

    opterr = 0;
    /* '+': options after the command belong to the command. */
    while ((opt = getopt_long(argc, argv, "+:hV", options, NULL)) != -1) {
        switch (opt) {
        case 's':
            cli.socket = optarg;
            break;
        case 'j':
            cli.json = true;
            break;
        case 'A':
            cli.autostart = false;
            break;
        case 'c':
            cli.config_path = optarg;
            break;
        case 'h':
            cli_print_usage(stdout);
            return close_stdout(CLI_EXIT_OK);
        case 'V':
            puts("cairn " CAIRN_VERSION);
            return close_stdout(CLI_EXIT_OK);
        default:
            return cli_option_error(NULL, opt, argv);
        }
    }
    if (optind >= argc)
        return cli_usage_error("missing command");
    cmd = find_command(argv[optind]);
    if (!cmd)
        return cli_usage_error("unknown command '%s'", argv[optind]);
    argc -= optind;
    argv += optind;
    optind = 0; /* makes glibc's getopt start over for the command's options */
    status = cmd->run(&cli, argc, argv);
    cli.client = client_free(cli.client);
    return close_stdout(status);
}
