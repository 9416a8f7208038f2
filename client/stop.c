/*
 * cairn stop: the protocol's `shutdown` (cairnd stops as on SIGTERM), then a
 * wait until the daemon has: its connection closed and its process gone.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/cli.h"

/* cairnd gives requests in progress 30 s (DAEMON_STOP_GRACE_MS), then closes their connections. */
#define STOP_WAIT_MS 60000
/* Only bounds the wait for a daemon whose listen backlog is full. */
#define STOP_CONNECT_MS 5000

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A zombie has stopped too: only its parent's wait is left. */
static bool running(pid_t pid)
{
    char path[64], buf[256];
    const char *state;
    FILE *f;
    size_t n;

    if (kill(pid, 0) < 0 && errno == ESRCH)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (!f)
        return errno != ENOENT;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* "pid (comm) S ...": the comm may hold anything, so the state follows the last ')'. */
    state = strrchr(buf, ')');
    return !(state && (state[1] == ' ') && (state[2] == 'Z' || state[2] == 'X'));
}

/* Until `pid` is gone or the deadline passes; 0 or -ETIMEDOUT. */
static int wait_gone(pid_t pid, uint64_t deadline)
{
    while (running(pid)) {
        if (now_ms() >= deadline)
            return -ETIMEDOUT;
        usleep(20 * 1000);
    }
    return 0;
}

int cli_cmd_stop(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const msgpack_object *reply;
    struct client *c = NULL;
    uint64_t deadline;
    pid_t pid = 0;
    uid_t uid;
    int opt, r;

    while ((opt = cli_getopt(cli, argc, argv, ":h", options)) != -1) {
        if (opt != 'h')
            return cli_option_error(argv[0], opt, argv);
        cli_print_command_help(stdout, argv[0]);
        return CLI_EXIT_OK;
    }
    if (optind < argc)
        return cli_usage_error("stop: too many arguments");
    /* Never the autostart: stopping a daemon it just started helps nobody. */
    if (cli_resolve_socket(cli) < 0)
        return cli->no_client;
    r = client_connect(&c, cli->socket, STOP_CONNECT_MS);
    if (r == -ENOENT || r == -ECONNREFUSED)
        return cli_error(CLI_EXIT_UNREACHABLE, CLI_CODE_NOT_RUNNING, NULL,
                         "stop: no cairnd is running on %s", cli->socket);
    if (r < 0) {
        cli_connect_error(cli->socket, r);
        return CLI_EXIT_UNREACHABLE;
    }
    cli->client = c;
    if (!client_peer(c, &pid, &uid) || pid == 1)
        pid = 0; /* systemd's socket: only the connection closing tells */
    deadline = now_ms() + STOP_WAIT_MS;
    r = client_shutdown(c, &reply);
    if (r != 0)
        return cli_fail(cli, "stop", r);
    r = client_wait_closed(c, STOP_WAIT_MS);
    if (r == 0 && pid > 0)
        r = wait_gone(pid, deadline);
    if (r == -ETIMEDOUT)
        return cli_error(CLI_EXIT_FAILED, CLI_CODE_FAILED, NULL,
                         "stop: cairnd on %s is still stopping after %d s (its log says why)",
                         cli->socket, STOP_WAIT_MS / 1000);
    if (r < 0)
        return cli_error(CLI_EXIT_FAILED, CLI_CODE_FAILED, NULL, "stop: %s", strerror(-r));
    if (cli->json)
        return cli_print_json(stdout, json_pack("{s:b,s:I}", "stopped", 1, "pid", (json_int_t)pid))
                   ? CLI_EXIT_FAILED
                   : CLI_EXIT_OK;
    return CLI_EXIT_OK;
}
