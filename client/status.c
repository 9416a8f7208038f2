/*
 * cairn status: the daemon's state as key: value lines (or JSON), the
 * other writers of a shared bucket, or with --format prometheus the
 * daemon's metrics as it renders them (the protocol's `metrics` op).
 */

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "client/cli.h"

/* The daemon's metrics, as it renders them (the Prometheus text format). */
static int print_metrics(struct cli *cli, struct client *c)
{
    const msgpack_object *reply;
    const char *text;
    size_t len;
    int r = client_metrics(c, &reply);

    if (r != 0)
        return cli_fail(cli, NULL, r);
    if (proto_get_str(reply, "text", &text, &len) != 0)
        return cli_error(CLI_EXIT_FAILED, "internal", NULL, "the daemon sent no metrics");
    return fwrite(text, 1, len, stdout) == len ? CLI_EXIT_OK : CLI_EXIT_FAILED;
}

int cli_cmd_status(struct cli *cli, int argc, char **argv)
{
    static const char *const keys[] = {"version",
                                       "protocol",
                                       "pid",
                                       "uptime",
                                       "backend",
                                       "encryption",
                                       "read_only",
                                       "documents",
                                       "logical_bytes",
                                       "unique_bytes",
                                       "stored_bytes",
                                       "chunks",
                                       "dedup_ratio",
                                       "compression_ratio",
                                       "packs",
                                       "pack_bytes",
                                       "cache_bytes",
                                       "cache_size",
                                       "cache_hits",
                                       "cache_misses",
                                       "read_cache_bytes",
                                       "read_cache_size",
                                       "read_cache_hits",
                                       "read_cache_misses",
                                       "read_cache_fetched",
                                       "read_cache_damaged",
                                       "index_pending",
                                       "connections",
                                       "writer",
                                       NULL};
    enum { OPT_HELP = 256, OPT_FORMAT };
    static const struct option options[] = {
        {"format", required_argument, NULL, OPT_FORMAT},
        {"help", no_argument, NULL, OPT_HELP},
        {0},
    };
    const msgpack_object *reply, *writers;
    bool prometheus = false;
    struct client *c;
    int opt, r;

    while ((opt = cli_getopt(cli, argc, argv, ":h", options)) != -1) {
        switch (opt) {
        case OPT_FORMAT:
            if (strcmp(optarg, "prometheus") == 0)
                prometheus = true;
            else if (strcmp(optarg, "json") == 0)
                cli->json = true;
            else if (strcmp(optarg, "text") != 0)
                return cli_usage_error("%s: --format wants text, json or prometheus", argv[0]);
            break;
        case 'h':
        case OPT_HELP:
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        default:
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (argc - optind > 0)
        return cli_usage_error("%s: too many arguments", argv[0]);
    if (prometheus && cli->json)
        return cli_usage_error("%s: --format prometheus and --json do not go together", argv[0]);
    if (!(c = cli_client(cli)))
        return cli->no_client;
    if (prometheus)
        return print_metrics(cli, c);
    if ((r = client_status(c, &reply)) != 0)
        return cli_fail(cli, NULL, r);
    if (cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    cli_print_fields(stdout, reply, keys);
    /* The other writers of a shared bucket, one line each. */
    writers = proto_map_get(reply, "writers");
    for (uint32_t i = 0;
         writers && writers->type == MSGPACK_OBJECT_ARRAY && i < writers->via.array.size; i++) {
        const msgpack_object *w = &writers->via.array.ptr[i];
        const char *id = "";
        size_t id_len = 0;
        uint64_t packs = 0, newest = 0, ago = 0;
        /* -1 when never listed */
        bool listed = proto_get_uint(w, "seen_ms_ago", &ago) == 0;
        proto_get_str(w, "id", &id, &id_len);
        proto_get_uint(w, "packs_read", &packs);
        proto_get_uint(w, "newest_pack", &newest);
        printf("other writer: %.*s, %" PRIu64 " packs read, newest %" PRIu64 ", ", (int)id_len, id,
               packs, newest);
        if (!listed)
            printf("not listed yet\n");
        else
            printf("listed %.1f s ago\n", (double)ago / 1000.0);
    }
    return CLI_EXIT_OK;
}
