#pragma once

/*
 * The `cairn` command line: option parsing and the commands (add.c,
 * commands.c), output as text or JSON lines (format.c), and starting cairnd
 * when nobody listens on the socket (autostart.c). Each command returns its
 * exit status; with several operands it goes on after a failure and reports
 * it at the end. The connection is made on first use, so usage errors and
 * unreadable files are reported without touching the daemon.
 */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <jansson.h>

#include "client/client.h"

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILED = 1,      /* an operation failed */
    CLI_EXIT_USAGE = 2,       /* bad command line */
    CLI_EXIT_UNREACHABLE = 3, /* no daemon, and it could not be started */
};

/*
 * The codes of errors under --json: the protocol's (PROTOCOL.md), and these of
 * the client's own (README "Exit status and error codes").
 */
#define CLI_CODE_USAGE "usage"              /* bad command line (exit 2) */
#define CLI_CODE_CONFIG "config"            /* the --config file is unreadable (exit 2) */
#define CLI_CODE_UNREACHABLE "unreachable"  /* no daemon, and none could be started (exit 3) */
#define CLI_CODE_REFUSED "refused"          /* the socket or its daemon is another user's */
#define CLI_CODE_NOT_RUNNING "not_running"  /* stop: no daemon runs on the socket (exit 3) */
#define CLI_CODE_CLOSED "connection_closed" /* cairnd closed the connection mid-request */
#define CLI_CODE_BAD_REPLY "bad_reply"      /* a reply that breaks the protocol */
#define CLI_CODE_IO "io"                    /* a local file or stream failed */
#define CLI_CODE_FAILED "failed"            /* any other failure of the command */

/* What the CLI reads from cairnd's config file (config.c). */
struct cli_config {
    char path[4096];
    char socket[108];    /* [daemon] socket, "" if not set */
    char data_dir[4096]; /* [store] data_dir, "" if not set */
    bool loaded;
};

struct cli {
    const char *socket; /* --socket, else resolved on first connect */
    char socket_buf[128];
    const char *config_path; /* --config, passed on to a daemon the CLI starts */
    bool json;
    bool null; /* -0: records end in NUL, text written as it is */
    bool autostart;
    int verbosity; /* -1 with -q, 1 with -v */
    struct cli_config config;
    struct client *client; /* NULL until a command needs the daemon */
    /*
     * What a command exits with when cli_client() gave it no client:
     * CLI_EXIT_UNREACHABLE, or CLI_EXIT_USAGE when the --config file named
     * could not be read (retrying would not help).
     */
    int no_client;
};

/*
 * Reads [daemon] socket and [store] data_dir from `path`, or from the
 * daemon's default config file when NULL (missing is fine then). 0, or -1
 * after printing why.
 */
int cli_config_load(struct cli_config *cc, const char *path);

int cli_main(int argc, char **argv);
/* A command's own help (its usage, what it does, its options); the overview for others. */
void cli_print_command_help(FILE *out, const char *name);

/* Most long options a command may have (cli_getopt adds the global ones). */
#define CLI_MAX_OPTIONS 28
struct option;
/*
 * getopt_long() for a command's options that also takes the global ones
 * (--socket, --json, --no-autostart) wherever they appear: they are applied
 * to cli and skipped. Returns what getopt_long returns otherwise.
 */
int cli_getopt(struct cli *cli, int argc, char **argv, const char *shortopts,
               const struct option *longopts);
/* The global long option of that name (len bytes of it), or NULL. */
const struct option *cli_global_option(const char *name, size_t len);
/*
 * For commands whose options end at their first operand (search): applies
 * and removes the global options among argv[from..argc); returns the new argc.
 */
int cli_take_trailing_globals(struct cli *cli, int argc, char **argv, int from);

/*
 * Sets cli->socket as the connection would (the config file read first); -1
 * after printing why, with cli->no_client the exit status.
 */
int cli_resolve_socket(struct cli *cli);
/* The connection, made (and cairnd started) on first use; NULL after printing why. */
struct client *cli_client(struct cli *cli);
/* Prints why a client_*() call about `what` (may be NULL) failed; returns CLI_EXIT_FAILED. */
int cli_fail(struct cli *cli, const char *what, int rc);
/* Prints "cairn: <what>: <strerror(errno)>"; returns CLI_EXIT_FAILED. */
int cli_fail_errno(const char *what);
/*
 * Reports an error: "cairn: <message>" on stderr, or under --json
 * {"ok":false,"error":{"code":CODE,"message":...,"ref":REF}} as a line on
 * stdout (`ref` may be NULL). Returns `status`.
 */
int cli_error(int status, const char *code, const char *ref, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* --json: output and errors as JSON. */
void cli_set_json(struct cli *cli);
/* Reports a failed client_connect() to `socket` (returned r). */
void cli_connect_error(const char *socket, int r);
/* Prints "cairn: <message>" and a pointer to --help; returns CLI_EXIT_USAGE. */
/* A decimal count from min to max into *out: 0, or -EINVAL. */
int cli_parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reports the option getopt_long() rejected with `opt` ('?' or ':'); `cmd` may be NULL. */
int cli_option_error(const char *cmd, int opt, char **argv);
void cli_print_usage(FILE *out);

int cli_cmd_add(struct cli *cli, int argc, char **argv);
int cli_cmd_get(struct cli *cli, int argc, char **argv);
int cli_cmd_rm(struct cli *cli, int argc, char **argv);
int cli_cmd_ls(struct cli *cli, int argc, char **argv);
int cli_cmd_stat(struct cli *cli, int argc, char **argv);
int cli_cmd_cp(struct cli *cli, int argc, char **argv);
int cli_cmd_tag(struct cli *cli, int argc, char **argv);
int cli_cmd_meta(struct cli *cli, int argc, char **argv);
int cli_cmd_mv(struct cli *cli, int argc, char **argv);
int cli_cmd_log(struct cli *cli, int argc, char **argv);
int cli_cmd_status(struct cli *cli, int argc, char **argv);
int cli_cmd_search(struct cli *cli, int argc, char **argv);
int cli_cmd_gc(struct cli *cli, int argc, char **argv);
int cli_cmd_refresh(struct cli *cli, int argc, char **argv);
int cli_cmd_key(struct cli *cli, int argc, char **argv);
int cli_cmd_verify(struct cli *cli, int argc, char **argv);
int cli_cmd_mcp(struct cli *cli, int argc, char **argv);
int cli_cmd_du(struct cli *cli, int argc, char **argv);
int cli_cmd_stop(struct cli *cli, int argc, char **argv);
/* mount.c, or mount-nofuse.c in a build without libfuse3 */
int cli_cmd_mount(struct cli *cli, int argc, char **argv);

/*
 * Writes the document `ref` to `path` through a temporary file beside it,
 * renamed into place once complete (commands.c). Returns the exit status.
 */
int cli_get_to_file(struct cli *cli, struct client *c, const char *ref, uint64_t offset,
                    uint64_t length, const char *path);
/* The file a name version was added from (PROTOCOL.md list, `mode` and `mtime`). */
struct cli_fattr {
    uint32_t mode; /* st_mode with its type bits; 0: none recorded */
    int64_t mtime; /* ns since the epoch */
};

/*
 * get -r's cli_get_to_file() of a whole document: `name` in the working
 * directory, never through a symbolic link (one there is replaced), with
 * the permissions (0777 bits) and mtime of `fa` when it has a mode;
 * `shown` is the path messages give.
 */
int cli_restore_file(struct cli *cli, struct client *c, const char *ref, const char *name,
                     const char *shown, const struct cli_fattr *fa);
/* Nanoseconds since the epoch as a timespec (tv_nsec in 0..999999999). */
struct timespec cli_timespec_ns(int64_t ns);
/* get -r: every name under `prefix` as a file under `dir` (tree.c). */
int cli_get_tree(struct cli *cli, const char *prefix, const char *dir);

/* Splits "KEY=VALUE" in place at the first '='; -EINVAL without '=' or KEY. */
int cli_parse_meta(char *arg, struct client_meta *out);

/*
 * A msgpack value as JSON: strings that are not UTF-8 get U+FFFD for each bad
 * byte, binary and extension values become null. NULL only when out of memory.
 */
json_t *cli_json_value(const msgpack_object *obj);
/* Text as a JSON string, U+FFFD for each byte that is not UTF-8; NULL only when out of memory. */
json_t *cli_json_text(const char *s, size_t len);
/* The fields of a reply map as a JSON object, without the framing (id, ok, more). */
json_t *cli_json_reply(const msgpack_object *map);
/* Writes `json` as one line to `out` and releases it. */
int cli_print_json(FILE *out, json_t *json);
/* Prints "key: value" for each of `keys` (NULL-terminated) present in `map`. */
void cli_print_fields(FILE *out, const msgpack_object *map, const char *const *keys);
/* Text from the store: on a terminal (stdout), control characters as '?'. */
void cli_put_text(FILE *out, const char *s, size_t len);
/*
 * Ends a record of the output with `s` (a name or a hash): with -0 written
 * exactly and followed by a NUL, else as cli_put_text() does and a newline.
 */
void cli_put_record(const struct cli *cli, FILE *out, const char *s, size_t len);
/* A usage error when -0 was given with --json or with `other` (an option; NULL: none). */
int cli_null_conflict(const struct cli *cli, const char *cmd, const char *other);
/* Unix time as ISO-8601 UTC, "2024-01-31T12:00:00Z". */
#define CLI_TIME_MAX 32
void cli_format_time(uint64_t seconds, char buf[CLI_TIME_MAX]);
/* A mode as ls -l shows it ("-rwxr-xr-x", "drwx------", "lrwxrwxrwx"); "?---------" for 0. */
#define CLI_MODE_MAX 11
void cli_format_mode(uint32_t mode, char buf[CLI_MODE_MAX]);

/*
 * Where cairnd keeps its data: $CAIRN_DATA_DIR, else `configured` (the
 * config file's [store] data_dir; NULL or "" for none), else
 * $XDG_DATA_HOME/cairn, else ~/.local/share/cairn. -ENAMETOOLONG, or
 * -ENOENT without a home.
 */
int cli_data_dir(char *buf, size_t size, const char *configured);
/*
 * Starts cairnd on cli->socket (with cli->config_path as its --config, if
 * given) and connects to it; -1 after printing why, with the daemon's own
 * last words when it exited during startup.
 */
int cli_autostart(struct cli *cli, struct client **out);
