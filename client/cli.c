/* The command line: global options, dispatch, connecting, reporting errors. */

#include "client/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "client/util.h"

/* Only bounds the wait for a daemon whose listen backlog is full. */
#define CONNECT_TIMEOUT_MS 5000

static int cmd_help(struct cli *cli, int argc, char **argv);

static const struct command {
    const char *name;
    int (*run)(struct cli *cli, int argc, char **argv);
    const char *help; /* "usage line\n\ndescription"; NULL for an alias (the entry before) */
} commands[] = {
    {"add", cli_cmd_add,
     "cairn add [-r [-L]] [--exclude GLOB]... [-n NAME] [-t TAG]... [-m KEY=VALUE]...\n"
     "          [--mime TYPE] [--heal] [-0] PATH...\n\n"
     "Stores files (- reads standard input) and prints \"<hash>  <name>\" for each.\n"
     "  -r, --recursive     add the files under directories, named by their paths, with\n"
     "                      their modes and mtimes; links are stored as links, and a\n"
     "                      directory holding nothing stored as itself (FIFOs and\n"
     "                      devices are skipped, and named on stderr)\n"
     "  -L, --dereference   with -r, follow symbolic links to regular files\n"
     "  -n, --name NAME     the document's name (one document only; default: the path)\n"
     "  -t, --tag TAG       add a tag (repeatable)\n"
     "  -m, --meta KEY=VALUE  add metadata (repeatable)\n"
     "      --mime TYPE     the mime type (default: guessed from the first 8 KiB)\n"
     "      --heal          store no document: only rewrite the chunks of these files\n"
     "                      that verify found damaged; prints \"<bytes rewritten>  <path>\"\n"
     "  -0, --null          print each hash alone, ended by a NUL (for xargs -0)\n"
     "      --exclude GLOB  leave out what -r finds whose name matches GLOB (or whose\n"
     "                      path does, when GLOB has a /); repeatable\n"
     "A file is read up to the size it had when opened (one that keeps growing still\n"
     "ends); one that changes while it is read is stored as read, with a warning.\n"},
    {"get", cli_cmd_get,
     "cairn get [-o FILE] [--range START-END] REF\n"
     "cairn get -r PREFIX DIR\n\n"
     "Writes a document to standard output, or to FILE (through a temporary file that\n"
     "is renamed into place once the whole document arrived intact).\n"
     "  -o, --output FILE   write to FILE (- for standard output)\n"
     "      --range START-END  only bytes START to END (both included; START- for\n"
     "                      the rest); a range past the end gives what there is\n"
     "  -r, --recursive     restore every name in the path PREFIX as a file under\n"
     "                      DIR, at its path (DIR/usr/share/doc/... for\n"
     "                      /usr/share/doc/...); existing files are replaced, and\n"
     "                      modes, mtimes, links and directories come back as added\n"},
    {"rm", cli_cmd_rm,
     "cairn rm [-n] REF...\n\n"
     "Removes names and deletes documents (alias: delete). Names behave like paths:\n"
     "rm NAME removes that name (every version of it), and a document it pointed to\n"
     "is deleted only when no other name points to it. rm HASH (or a unique prefix of\n"
     "at least 8 digits) deletes the document with every name pointing to it.\n"
     "Prints 'removed NAME' for a name, 'deleted HASH' for each document deleted,\n"
     "and under it the names it had.\n"
     "  -n, --dry-run       print what would go, change nothing\n"},
    {"delete", cli_cmd_rm, NULL},
    {"ls", cli_cmd_ls,
     "cairn ls [-l] [-h] [--docs] [-t TAG] [-0] [PREFIX]\n\n"
     "Lists names, sorted bytewise, each with its newest version: short hash, size,\n"
     "the time the name got that version (UTC) and the name (alias: list). Names\n"
     "are paths: PREFIX lists the name PREFIX and the names under it (PREFIX/...).\n"
     "Without PREFIX, documents no name points to follow, with the name -.\n"
     "  -l, --long          mode, full hash, size, stored size, mime type, time (the\n"
     "                      file's mtime when the name has one), name\n"
     "  -h, --human-readable  sizes in KiB, MiB, GiB\n"
     "  -d, --docs          one line per document instead, in hash order:\n"
     "                      hash, size and newest name\n"
     "  -t, --tag TAG       only documents with this tag\n"
     "  -0, --null          each name alone (the hash of a document without one, and\n"
     "                      with --docs), as stored, ended by a NUL (for xargs -0)\n"},
    {"list", cli_cmd_ls, NULL},
    {"du", cli_cmd_du,
     "cairn du [-h] [PREFIX]\n\n"
     "What the names in the path PREFIX (every name without it) hold: names,\n"
     "documents they point to, logical bytes (each name's size), unique bytes (each\n"
     "document's size once), stored bytes (the documents' share of the packs, after\n"
     "chunk dedup and compression) and saved bytes (logical minus stored).\n"
     "  -h, --human-readable  sizes in KiB, MiB, GiB\n"},
    {"stat", cli_cmd_stat,
     "cairn stat REF\n\n"
     "Shows a document's details: hash, names, size, stored size, mime type, tags,\n"
     "metadata and creation time.\n"},
    {"tag", cli_cmd_tag,
     "cairn tag [-d] REF TAG...\n\n"
     "Adds tags to the document REF points to (with -d, removes them), and shows its\n"
     "tags and metadata. Tags belong to the document: every name pointing to it has\n"
     "them.\n"
     "  -d, --delete        remove the tags instead\n"},
    {"meta", cli_cmd_meta,
     "cairn meta REF KEY=VALUE...\n"
     "cairn meta -d REF KEY...\n\n"
     "Sets metadata of the document REF points to (with -d, removes the keys), and\n"
     "shows its tags and metadata. Metadata belongs to the document, as tags do.\n"
     "  -d, --delete        remove the keys instead\n"},
    {"cp", cli_cmd_cp,
     "cairn cp REF NAME\n\n"
     "Gives the document REF points to the name NAME too (a new version of NAME when\n"
     "it pointed elsewhere), with the file mode and mtime of REF's version; stores\n"
     "nothing else. Prints \"<hash>  NAME\".\n"},
    {"mv", cli_cmd_mv,
     "cairn mv NAME NEWNAME\n\n"
     "Renames: NEWNAME gets NAME's newest version (with its file mode and mtime) and\n"
     "NAME goes, every version of it. No document is deleted: an older version of\n"
     "NAME stays stored, by its hash. Prints \"<hash>  NEWNAME\".\n"},
    {"log", cli_cmd_log,
     "cairn log [-n N] [-0] NAME\n\n"
     "Lists the versions of a name, newest first: hash, size, the time the name got\n"
     "that version (UTC), and NAME@{N}, the ref that reads it (NAME@{0} is NAME).\n"
     "  -n, --max-count N   at most the N newest versions\n"
     "  -0, --null          print each NAME@{N} alone, as stored, ended by a NUL\n"},
    {"status", cli_cmd_status,
     "cairn status [--format text|json|prometheus]\n\n"
     "Shows the daemon's state: version, backend, documents, bytes, cache, connections,\n"
     "its writer id, and each other writer of a shared bucket with how far it has read it.\n"
     "  --format FORMAT     text (the default), json (as --json), or prometheus: the\n"
     "                      daemon's metrics in the Prometheus text format\n"},
    {"refresh", cli_cmd_refresh,
     "cairn refresh\n\n"
     "Reads now what the other daemons of a shared bucket have written since this one\n"
     "last looked (it also does so every [store] refresh_interval); returns once it has.\n"},
    {"key", cli_cmd_key,
     "cairn key list\n"
     "cairn key add | passwd [--new-password-file FILE]\n"
     "cairn key remove ID\n\n"
     "The keys of an encrypted store (each a passphrase that opens it): list them\n"
     "(the one cairnd opened the store with is marked *), add one for a new\n"
     "passphrase, remove one (never the last, nor the one cairnd uses), or passwd:\n"
     "add one for a new passphrase and remove the one cairnd uses. The new\n"
     "passphrase comes from FILE, else $CAIRN_NEW_PASSWORD_FILE, else is asked\n"
     "twice on the terminal; never on the command line.\n"
     "      --new-password-file FILE  read the new passphrase from FILE (chmod 600)\n"},
    {"search", cli_cmd_search,
     "cairn search [-l N] [--offset N] [-t TAG]... [--name GLOB] [--mime TYPE]\n"
     "             [--after DATE] [--before DATE] [--fuzzy] [--all] [-0] QUERY...\n\n"
     "Ranked full-text search: words, \"phrases\", OR, NOT or -word, prefix*,\n"
     "name:word, tag:value. Options end at the first word of the query.\n"
     "  -l, --limit N       at most N hits (1 to 1000, default 10)\n"
     "      --offset N      skip the first N hits\n"
     "  -t, --tag TAG       only documents with this tag (repeatable)\n"
     "      --name GLOB     only documents whose name matches\n"
     "      --mime TYPE     only documents of this mime type\n"
     "      --after DATE, --before DATE\n"
     "                      created after or before (YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] in UTC,\n"
     "                      or @UNIXSECONDS)\n"
     "      --fuzzy         tolerate typos: indexed words one or two edits away, and words\n"
     "                      that contain the query word\n"
     "      --all           only documents with every word (by default any word makes a\n"
     "                      hit; those with more of the words, and rarer ones, rank higher)\n"
     "  -0, --null          print each hit's hash alone, ended by a NUL (for xargs -0)\n"},
    {"gc", cli_cmd_gc,
     "cairn gc\n\n"
     "Removes chunks no document uses any more and rewrites mostly-dead packs; prints\n"
     "packs rewritten, bytes reclaimed and bytes still dead.\n"},
    {"verify", cli_cmd_verify,
     "cairn verify [REF]...\n\n"
     "Re-reads and re-hashes the stored chunks of the given documents, or of all.\n"},
    {"mcp", cli_cmd_mcp,
     "cairn mcp [--allow-path DIR]...\n\n"
     "Runs a Model Context Protocol server on standard input and output (JSON-RPC 2.0,\n"
     "one message a line) for agents: tools add, get, search, list, stat and delete,\n"
     "and documents as resources cairn://doc/HASH and cairn://name/NAME. It keeps one\n"
     "connection to cairnd (started if needed) and ends when its input ends.\n\n"
     "  --allow-path DIR  let add {path} read regular files below DIR (repeatable);\n"
     "                    without it add takes content only\n"},
    {"mount", cli_cmd_mount,
     "cairn mount [-f] MOUNTPOINT\n\n"
     "Shows the documents as a read-only FUSE file system under MOUNTPOINT: names as\n"
     "paths (directories are implied by the names under them; a name that is also\n"
     "a directory of other names shows as the file), and every document as\n"
     "by-hash/HASH. Files read through ranged gets, so reading a few bytes of a\n"
     "large document reads only the chunks that hold them. Names added while\n"
     "mounted appear within a second. Goes to the background once the mount is up;\n"
     "stops, unmounting, on 'fusermount3 -u MOUNTPOINT', SIGINT or SIGTERM.\n"
     "  -f, --foreground    stay in the foreground\n"},
    {"stop", cli_cmd_stop,
     "cairn stop\n\n"
     "Stops the daemon serving the socket (one cairn started, say) as SIGTERM does:\n"
     "requests in progress finish, then it exits. Returns once it has. Exit status 3\n"
     "when no cairnd is running there (cairn stop never starts one).\n"},
    {"help", cmd_help,
     "cairn help [COMMAND]\n\n"
     "Shows the help of COMMAND, or the overview.\n"},
};

static const struct command *find_command(const char *name);

void cli_print_command_help(FILE *out, const char *name)
{
    const struct command *cmd = find_command(name);

    while (cmd && !cmd->help && cmd > commands)
        cmd--; /* an alias: the entry before it has the text */
    if (!cmd || !cmd->help) {
        cli_print_usage(out);
        return;
    }
    fputs("Usage: ", out);
    fputs(cmd->help, out);
    fputs(
        "\nGlobal options (--socket, --config, --json, -q, -v, --no-autostart) may come anywhere;\n"
        "see 'cairn --help'.\n",
        out);
}

static int cmd_help(struct cli *cli, int argc, char **argv)
{
    if (argc > 2)
        return cli_usage_error("help: too many arguments");
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        argv[1] = "help";
    if (argc == 2 && !find_command(argv[1]))
        return cli_usage_error("help: unknown command '%s'", argv[1]);
    if (argc == 2)
        cli_print_command_help(stdout, argv[1]);
    else
        cli_print_usage(stdout);
    return CLI_EXIT_OK;
}

void cli_print_usage(FILE *out)
{
    fputs("Usage: cairn [--socket PATH] [--config FILE] [--json] [-q|-v] [--no-autostart] COMMAND "
          "[ARGS]\n"
          "(the options may also come after the command)\n"
          "\n"
          "Commands:\n"
          "  add [-r [-L]] [--exclude GLOB]... [-n NAME] [-t TAG]... [-m KEY=VALUE]... [--mime "
          "TYPE]\n"
          "      [--heal] [-0] PATH...\n"
          "                  store files; - reads standard input, -r adds directories\n"
          "  get [-o FILE] [--range START-END] REF | get -r PREFIX DIR\n"
          "                  write a document to standard output or FILE, or a tree to DIR\n"
          "  rm [-n] REF...  remove names, delete documents no name points to any more\n"
          "                  (alias: delete)\n"
          "  ls [-l] [-h] [--docs] [-t TAG] [-0] [PREFIX]\n"
          "                  list names (or documents) (alias: list)\n"
          "  du [-h] [PREFIX]  logical, unique and stored bytes under a path prefix\n"
          "  stat REF        show a document's details\n"
          "  tag [-d] REF TAG...\n"
          "                  add (or remove) a document's tags\n"
          "  meta REF KEY=VALUE... | meta -d REF KEY...\n"
          "                  set (or remove) a document's metadata\n"
          "  cp REF NAME     give a document one more name\n"
          "  mv NAME NEWNAME rename (NAME goes; no document is deleted)\n"
          "  log [-n N] [-0] NAME\n"
          "                  list a name's versions, newest first, with the refs NAME@{N}\n"
          "  status [--format text|json|prometheus]\n"
          "                  show the daemon's state, or its metrics for Prometheus\n"
          "  refresh         read now what the other daemons of a shared bucket wrote\n"
          "  stop            stop the daemon serving the socket, and wait until it has\n"
          "  gc              remove chunks no document uses any more\n"
          "  key list | add | remove ID | passwd\n"
          "                  the passphrases of an encrypted store\n"
          "  verify [REF]... re-read and re-hash stored chunks (all without REF)\n"
          "  search [-l N] [--offset N] [-t TAG]... [--name GLOB] [--mime TYPE]\n"
          "         [--after DATE] [--before DATE] [--fuzzy] [--all] [-0] QUERY...\n"
          "                  ranked full-text search: words, \"phrases\", OR, NOT or -word,\n"
          "                  prefix*, name:word, tag:value\n"
          "  mcp [--allow-path DIR]...\n"
          "                  serve the Model Context Protocol on stdin/stdout (for agents)\n"
          "  mount [-f] MOUNTPOINT\n"
          "                  show the documents as a read-only file system (FUSE)\n"
          "  help [COMMAND]  show this help, or a command's ('cairn COMMAND --help' too)\n"
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
          "  --json          print one JSON object per line; errors too, with their codes,\n"
          "                  on stdout\n"
          "  -q, --quiet     no progress or summary on stderr\n"
          "  -v, --verbose   progress and summary on stderr even when it is not a terminal\n"
          "  --no-autostart  fail instead of starting cairnd when it is not running\n"
          "  --help          show this help\n"
          "  -V, --version   show the version\n"
          "\n"
          "Exit status: 0 success, 1 an operation failed, 2 usage error,\n"
          "3 cairnd unreachable.\n",
          out);
}

/* Under --json, errors are JSON objects on stdout (set before any is reported). */
static bool json_errors;

void cli_set_json(struct cli *cli)
{
    cli->json = true;
    json_errors = true;
}

static void report(const char *code, const char *ref, bool usage, const char *fmt, va_list ap)
{
    char message[8192];
    json_t *json;

    vsnprintf(message, sizeof(message), fmt, ap);
    if (!json_errors) {
        fprintf(stderr, "cairn: %s\n", message);
        if (usage)
            fputs("Try 'cairn --help' for more information.\n", stderr);
        return;
    }
    /* A name in the message or the ref need not be UTF-8. */
    json = json_pack("{s:b,s:{s:s,s:o}}", "ok", 0, "error", "code", code, "message",
                     cli_json_text(message, strlen(message)));
    if (json && ref)
        json_object_set_new(json_object_get(json, "error"), "ref", cli_json_text(ref, strlen(ref)));
    if (cli_print_json(stdout, json) == 0)
        fflush(stdout);
}

int cli_error(int status, const char *code, const char *ref, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    report(code, ref, false, fmt, ap);
    va_end(ap);
    return status;
}

int cli_parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    report(CLI_CODE_USAGE, NULL, true, fmt, ap);
    va_end(ap);
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

int cli_resolve_socket(struct cli *cli)
{
    int r;

    if (!cli->config.loaded && cli_config_load(&cli->config, cli->config_path) < 0) {
        cli->no_client = CLI_EXIT_USAGE;
        return -1;
    }
    /* --socket, else $CAIRN_SOCKET, else the config file's, else the default. */
    if (!cli->socket && !(getenv("CAIRN_SOCKET") && getenv("CAIRN_SOCKET")[0]) &&
        cli->config.socket[0])
        cli->socket = cli->config.socket;
    if (!cli->socket) {
        r = client_socket_path(cli->socket_buf, sizeof(cli->socket_buf));
        if (r < 0) {
            cli_error(0, CLI_CODE_UNREACHABLE, NULL, "socket path: %s", strerror(-r));
            return -1;
        }
        cli->socket = cli->socket_buf;
    }
    return 0;
}

struct client *cli_client(struct cli *cli)
{
    int r;

    if (cli->client && client_connected(cli->client))
        return cli->client;
    cli->client = client_free(cli->client);
    cli->no_client = CLI_EXIT_UNREACHABLE;
    if (cli_resolve_socket(cli) < 0)
        return NULL;
    r = client_connect(&cli->client, cli->socket, CONNECT_TIMEOUT_MS);
    if ((r == -ENOENT || r == -ECONNREFUSED) && cli->autostart)
        return cli_autostart(cli, &cli->client) == 0 ? cli->client : NULL;
    if (r < 0) {
        cli_connect_error(cli->socket, r);
        return NULL;
    }
    return cli->client;
}

void cli_connect_error(const char *socket, int r)
{
    struct stat st;

    if (r == -EPERM && client_refusal()[0])
        cli_error(0, CLI_CODE_REFUSED, NULL, "%s", client_refusal());
    else if (r == -EACCES && stat(socket, &st) == 0 && st.st_uid != geteuid())
        cli_error(0, CLI_CODE_REFUSED, NULL,
                  "cannot connect to cairnd at %s: the socket belongs to another user (uid %u), "
                  "and this is uid %u: %s",
                  socket, (unsigned)st.st_uid, (unsigned)geteuid(), strerror(-r));
    else
        cli_error(0, CLI_CODE_UNREACHABLE, NULL, "cannot connect to cairnd at %s: %s", socket,
                  strerror(-r));
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

/*
 * A connection the daemon closed at once, from a daemon of another uid (root:
 * the client's own check lets it through): its peer-uid check refused us.
 */
static bool refused_by_peer_check(const struct client *c)
{
    pid_t pid;
    uid_t uid;

    return c && client_peer(c, &pid, &uid) && uid != geteuid();
}

int cli_fail(struct cli *cli, const char *what, int rc)
{
    char why[sizeof(((struct client_error *)NULL)->message) + 128];
    const char *code = CLI_CODE_FAILED;
    pid_t pid = 0;
    uid_t uid = 0;

    if (rc == CLIENT_E_DAEMON) {
        describe_daemon_error(client_error(cli->client), why, sizeof(why));
        code = client_error(cli->client)->code_name;
    } else if (rc == CLIENT_E_IO) {
        snprintf(why, sizeof(why), "%s", strerror(client_error(cli->client)->errnum));
        code = CLI_CODE_IO;
    } else if (rc == -ECONNRESET && refused_by_peer_check(cli->client)) {
        client_peer(cli->client, &pid, &uid);
        snprintf(why, sizeof(why),
                 "cairnd closed the connection: the socket %s belongs to a daemon of another "
                 "user (uid %u), which serves only its own (this is uid %u)",
                 cli->socket ? cli->socket : "", (unsigned)uid, (unsigned)geteuid());
        code = CLI_CODE_REFUSED;
    } else if (rc == -ECONNRESET) {
        snprintf(why, sizeof(why), "cairnd closed the connection");
        code = CLI_CODE_CLOSED;
    } else if (rc == -EBADMSG) {
        snprintf(why, sizeof(why), "malformed reply from cairnd");
        code = CLI_CODE_BAD_REPLY;
    } else if (rc == -EMSGSIZE) {
        snprintf(why, sizeof(why), "request too large for one frame");
        code = "too_large";
    } else {
        snprintf(why, sizeof(why), "%s", strerror(-rc));
    }
    if (!code[0])
        code = CLI_CODE_FAILED;
    if (what)
        cli_error(0, code, rc == CLIENT_E_DAEMON ? what : NULL, "%s: %s", what, why);
    else
        cli_error(0, code, NULL, "%s", why);
    return strcmp(code, CLI_CODE_REFUSED) == 0 ? CLI_EXIT_UNREACHABLE : CLI_EXIT_FAILED;
}

int cli_fail_errno(const char *what)
{
    return cli_error(CLI_EXIT_FAILED, CLI_CODE_IO, NULL, "%s: %s", what, strerror(errno));
}

/* Codes of the global options among a command's own. */
enum {
    GLOBAL_SOCKET = 0x1000,
    GLOBAL_JSON,
    GLOBAL_NO_AUTOSTART,
    GLOBAL_CONFIG,
    GLOBAL_QUIET,
    GLOBAL_VERBOSE,
};

static bool take_global(struct cli *cli, int opt)
{
    switch (opt) {
    case GLOBAL_SOCKET:
        cli->socket = optarg;
        return true;
    case GLOBAL_JSON:
        cli_set_json(cli);
        return true;
    case GLOBAL_NO_AUTOSTART:
        cli->autostart = false;
        return true;
    case GLOBAL_CONFIG:
        cli->config_path = optarg;
        return true;
    case GLOBAL_QUIET:
        cli->verbosity = -1;
        return true;
    case GLOBAL_VERBOSE:
        cli->verbosity = 1;
        return true;
    default:
        return false;
    }
}

/* The long options every command takes (take_global applies them). */
static const struct option global_options[] = {
    {"socket", required_argument, NULL, GLOBAL_SOCKET},
    {"json", no_argument, NULL, GLOBAL_JSON},
    {"no-autostart", no_argument, NULL, GLOBAL_NO_AUTOSTART},
    {"config", required_argument, NULL, GLOBAL_CONFIG},
    {"quiet", no_argument, NULL, GLOBAL_QUIET},
    {"verbose", no_argument, NULL, GLOBAL_VERBOSE},
};

const struct option *cli_global_option(const char *name, size_t len)
{
    for (size_t g = 0; g < ARRAY_SIZE(global_options); g++)
        if (strlen(global_options[g].name) == len &&
            strncmp(global_options[g].name, name, len) == 0)
            return &global_options[g];
    return NULL;
}

int cli_getopt(struct cli *cli, int argc, char **argv, const char *shortopts,
               const struct option *longopts)
{
    struct option merged[CLI_MAX_OPTIONS + ARRAY_SIZE(global_options) + 1];
    size_t n = 0;
    int opt;

    while (n < CLI_MAX_OPTIONS && longopts[n].name) {
        merged[n] = longopts[n];
        n++;
    }
    for (size_t g = 0; g < ARRAY_SIZE(global_options); g++)
        merged[n++] = global_options[g];
    merged[n] = (struct option){0};
    char shorts[64];
    snprintf(shorts, sizeof(shorts), "%sqv", shortopts);
    for (;;) {
        opt = getopt_long(argc, argv, shorts, merged, NULL);
        if (opt == 'q')
            opt = GLOBAL_QUIET;
        else if (opt == 'v')
            opt = GLOBAL_VERBOSE;
        if (!take_global(cli, opt))
            return opt;
    }
}

int cli_take_trailing_globals(struct cli *cli, int argc, char **argv, int from)
{
    int out = from;

    for (int i = from; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            cli_set_json(cli);
        } else if (strcmp(argv[i], "--no-autostart") == 0) {
            cli->autostart = false;
        } else if (strncmp(argv[i], "--socket=", 9) == 0) {
            cli->socket = argv[i] + 9;
        } else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
            cli->socket = argv[++i];
        } else if (strcmp(argv[i], "--quiet") == 0) {
            cli->verbosity = -1;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            /* Not -q or -v: after the first word, "-v" is the query's NOT v. */
            cli->verbosity = 1;
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
        {"socket", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"no-autostart", no_argument, NULL, 'A'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"config", required_argument, NULL, 'c'},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {0},
    };
    struct cli cli = {.autostart = true};
    const struct command *cmd;
    int opt, status;

    opterr = 0;
    /* Errors of the command line itself are JSON too when --json comes after them. */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--json") == 0)
            json_errors = true;
    /* '+': options after the command belong to the command. */
    while ((opt = getopt_long(argc, argv, "+:hVqv", options, NULL)) != -1) {
        switch (opt) {
        case 's':
            cli.socket = optarg;
            break;
        case 'j':
            cli_set_json(&cli);
            break;
        case 'A':
            cli.autostart = false;
            break;
        case 'c':
            cli.config_path = optarg;
            break;
        case 'q':
            cli.verbosity = -1;
            break;
        case 'v':
            cli.verbosity = 1;
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
