/*
 * cairn key list | add | remove ID | passwd: the key objects of an
 * encrypted store, through the daemon's key op (PROTOCOL.md `key`). A new
 * passphrase is read from --new-password-file, $CAIRN_NEW_PASSWORD_FILE or
 * the terminal (twice, echo off), never from the command line, and wiped
 * once sent.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "client/cli.h"
#include "client/client.h"
#include "proto/proto.h"

#define PASS_MAX 1024

/* Overwrites what held a passphrase, in a way the compiler keeps. */
static void wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;

    while (n--)
        *v++ = 0;
}

/* One line of at most PASS_MAX bytes from fd into buf (PASS_MAX + 2): its length, or -1. */
static ssize_t read_line(int fd, char *buf, bool one_line)
{
    size_t got = 0;

    while (got < PASS_MAX + 1) {
        ssize_t n = read(fd, buf + got, one_line ? 1 : PASS_MAX + 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
        if (one_line && buf[got - 1] == '\n')
            break;
    }
    if (got && buf[got - 1] == '\n')
        got--;
    if (got && buf[got - 1] == '\r')
        got--;
    buf[got] = '\0';
    if (got == 0 || got > PASS_MAX || memchr(buf, '\n', got) || strlen(buf) != got)
        return -1;
    return (ssize_t)got;
}

static ssize_t from_file(const char *path, char *buf)
{
    struct stat sb;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    if (fd < 0) {
        cli_error(0, CLI_CODE_IO, NULL, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (sb.st_mode & 077)) {
        cli_error(0, CLI_CODE_IO, NULL,
                  "%s: not a regular file that only its owner may read (chmod 600)", path);
        close(fd);
        return -1;
    }
    n = read_line(fd, buf, false);
    close(fd);
    if (n < 0)
        cli_error(0, CLI_CODE_IO, NULL, "%s: the passphrase must be one line of 1 to %d bytes",
                  path, PASS_MAX);
    return n;
}

static ssize_t ask(int fd, const char *prompt, char *buf)
{
    struct termios old, quiet;
    ssize_t n;

    if (write(fd, prompt, strlen(prompt)) < 0 || tcgetattr(fd, &old) < 0)
        return -1;
    quiet = old;
    quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
    tcsetattr(fd, TCSAFLUSH, &quiet);
    n = read_line(fd, buf, true);
    tcsetattr(fd, TCSAFLUSH, &old);
    if (write(fd, "\n", 1) < 0) {
        /* only the echo of the newline was lost */
    }
    return n;
}

static ssize_t from_terminal(char *buf)
{
    char again[PASS_MAX + 2];
    ssize_t n, m;
    int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);

    if (fd < 0) {
        cli_error(0, CLI_CODE_IO, NULL,
                  "key: no terminal to ask the new passphrase on: give "
                  "--new-password-file or $CAIRN_NEW_PASSWORD_FILE");
        return -1;
    }
    n = ask(fd, "new passphrase: ", buf);
    m = n < 0 ? -1 : ask(fd, "the same again: ", again);
    close(fd);
    if (n >= 0 && (m != n || memcmp(buf, again, (size_t)n) != 0)) {
        cli_error(0, CLI_CODE_IO, NULL, "key: the two passphrases differ");
        n = -1;
    } else if (n < 0) {
        cli_error(0, CLI_CODE_IO, NULL, "key: the passphrase must be one line of 1 to %d bytes",
                  PASS_MAX);
    }
    wipe(again, sizeof(again));
    return n;
}

static int print_keys(struct cli *cli, const msgpack_object *reply)
{
    const msgpack_object *keys = proto_map_get(reply, "keys");

    if (cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    for (uint32_t i = 0; keys && keys->type == MSGPACK_OBJECT_ARRAY && i < keys->via.array.size;
         i++) {
        const msgpack_object *k = &keys->via.array.ptr[i], *created;
        const char *id = "";
        size_t id_len = 0;
        uint64_t n = 0, r = 0, p = 0;
        bool current = false;
        char when[32] = "?";
        proto_get_str(k, "id", &id, &id_len);
        proto_get_bool(k, "current", &current);
        proto_get_uint(k, "scrypt_n", &n);
        proto_get_uint(k, "scrypt_r", &r);
        proto_get_uint(k, "scrypt_p", &p);
        created = proto_map_get(k, "created");
        if (created && (created->type == MSGPACK_OBJECT_POSITIVE_INTEGER)) {
            time_t t = (time_t)created->via.u64;
            struct tm tm;
            if (gmtime_r(&t, &tm))
                strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
        }
        printf("%c %.*s  %s  scrypt N=%" PRIu64 " r=%" PRIu64 " p=%" PRIu64 "\n",
               current ? '*' : ' ', (int)id_len, id, when, n, r, p);
    }
    return CLI_EXIT_OK;
}

int cli_cmd_key(struct cli *cli, int argc, char **argv)
{
    static const struct option opts[] = {{"new-password-file", required_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *file = NULL, *action, *id = NULL;
    char pass[PASS_MAX + 2];
    ssize_t plen = -1;
    const msgpack_object *reply;
    struct client *c;
    int opt, r;

    while ((opt = cli_getopt(cli, argc, argv, ":h", opts)) != -1) {
        if (opt == 'f') {
            file = optarg;
        } else if (opt == 'h') {
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        } else {
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (optind >= argc)
        return cli_usage_error("key: missing list, add, remove ID or passwd");
    action = argv[optind++];
    bool wants_pass = strcmp(action, "add") == 0 || strcmp(action, "passwd") == 0;
    if (strcmp(action, "remove") == 0) {
        if (optind >= argc)
            return cli_usage_error("key remove: missing the key's ID (cairn key list)");
        id = argv[optind++];
    } else if (!wants_pass && strcmp(action, "list") != 0) {
        return cli_usage_error("key: unknown action '%s' (list, add, remove or passwd)", action);
    }
    if (optind < argc)
        return cli_usage_error("key %s: too many arguments", action);
    if (file && !wants_pass)
        return cli_usage_error("key %s: --new-password-file is for add and passwd", action);
    if (wants_pass) {
        const char *env = getenv("CAIRN_NEW_PASSWORD_FILE");
        if (!file && env && *env)
            file = env;
        plen = file ? from_file(file, pass) : from_terminal(pass);
        if (plen < 0) {
            wipe(pass, sizeof(pass));
            return CLI_EXIT_FAILED;
        }
    }
    if (!(c = cli_client(cli))) {
        wipe(pass, sizeof(pass));
        return cli->no_client;
    }
    r = client_key(c, action, id, wants_pass ? pass : NULL, wants_pass ? (size_t)plen : 0, &reply);
    wipe(pass, sizeof(pass));
    if (r != 0)
        return cli_fail(cli, "key", r);
    if (strcmp(action, "list") == 0)
        return print_keys(cli, reply);
    if (cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    const char *made = NULL;
    size_t made_len = 0;
    if (proto_get_str(reply, "key", &made, &made_len) == 0)
        printf("%s key %.*s\n", strcmp(action, "add") == 0 ? "added" : "replaced by", (int)made_len,
               made);
    else
        printf("removed key %s\n", id);
    return CLI_EXIT_OK;
}
