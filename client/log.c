/* cairn log: a name's versions, newest first (the log op). */

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/cli.h"
#include "client/client.h"
#include "proto/proto.h"

/* Versions asked for per request (the protocol's most). */
#define LOG_PAGE 1000

/* One version: `<hash>  <size>  <time>  NAME@{N}`, with -0 its ref alone, or its JSON object. */
static void print_version(struct cli *cli, const char *name, const msgpack_object *v)
{
    const char *hash = "";
    size_t hash_len = 0;
    uint64_t size = 0, named = 0, version = 0;
    char t[CLI_TIME_MAX], ref[PROTO_MAX_REF + 32];
    int len;

    if (cli->json) {
        cli_print_json(stdout, cli_json_reply(v));
        return;
    }
    proto_get_str(v, "hash", &hash, &hash_len);
    proto_get_uint(v, "size", &size);
    proto_get_uint(v, "named", &named);
    proto_get_uint(v, "version", &version);
    len = snprintf(ref, sizeof(ref), "%s@{%" PRIu64 "}", name, version);
    len = len < 0 ? 0 : len >= (int)sizeof(ref) ? (int)sizeof(ref) - 1 : len;
    if (!cli->null) {
        cli_format_time(named, t);
        printf("%.*s  %10" PRIu64 "  %s  ", (int)hash_len, hash, size, t);
    }
    cli_put_record(cli, stdout, ref, (size_t)len);
}

int cli_cmd_log(struct cli *cli, int argc, char **argv)
{
    enum { OPT_HELP = 256 };
    static const struct option options[] = {
        {"max-count", required_argument, NULL, 'n'},
        {"null", no_argument, NULL, '0'},
        {"help", no_argument, NULL, OPT_HELP},
        {0},
    };
    uint64_t max = UINT64_MAX, shown = 0, total = 1;
    struct client *c;
    int opt, r = 0;

    while ((opt = cli_getopt(cli, argc, argv, ":n:0", options)) != -1) {
        switch (opt) {
        case '0':
            cli->null = true;
            break;
        case 'n':
            if (cli_parse_count(optarg, 1, UINT64_MAX, &max) != 0)
                return cli_usage_error("%s: -n wants a number of at least 1", argv[0]);
            break;
        case OPT_HELP:
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        default:
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (cli_null_conflict(cli, argv[0], NULL))
        return CLI_EXIT_USAGE;
    if (argc - optind != 1)
        return cli_usage_error("%s: wants one NAME", argv[0]);
    c = cli_client(cli);
    if (!c)
        return cli->no_client;
    while (r == 0 && shown < max && shown < total) {
        const msgpack_object *reply, *versions;
        uint64_t want = max - shown < LOG_PAGE ? max - shown : LOG_PAGE;
        r = client_log(c, argv[optind], shown, want, &reply);
        if (r != 0)
            break;
        proto_get_uint(reply, "total", &total);
        versions = proto_map_get(reply, "versions");
        if (!versions || versions->type != MSGPACK_OBJECT_ARRAY || versions->via.array.size == 0)
            break;
        for (uint32_t i = 0; i < versions->via.array.size; i++)
            print_version(cli, argv[optind], &versions->via.array.ptr[i]);
        shown += versions->via.array.size;
    }
    return r == 0 ? CLI_EXIT_OK : cli_fail(cli, argv[optind], r);
}
