/*
 * `cairn tag` and `cairn meta`: a document's tags and metadata changed
 * without adding it again (the edit op). They belong to the document: every
 * name pointing to it shows them.
 */

#include "client/cli.h"
#include "client/util.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* After an edit: the document's tags and metadata as they are now (a stat). */
static int show(struct cli *cli, struct client *c, const char *ref, const msgpack_object *edited)
{
    static const char *const keys[] = {"hash", "tags", "meta", NULL};
    const msgpack_object *reply;
    const char *hash;
    size_t hash_len;
    bool changed = true;
    int r;

    proto_get_bool(edited, "changed", &changed);
    if (!changed && cli->verbosity >= 0 && !cli->json)
        fprintf(stderr, "cairn: %s: nothing changed\n", ref);
    /* By hash: a name may point elsewhere by now. */
    if (proto_get_str(edited, "hash", &hash, &hash_len) != 0 || hash_len != PROTO_HASH_HEX)
        return cli_fail(cli, ref, -EBADMSG);
    char h[PROTO_HASH_HEX + 1];
    memcpy(h, hash, PROTO_HASH_HEX);
    h[PROTO_HASH_HEX] = '\0';
    if ((r = client_stat(c, h, &reply)) != 0)
        return cli_fail(cli, ref, r);
    if (cli->json)
        return cli_print_json(stdout, cli_json_reply(reply)) < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    cli_print_fields(stdout, reply, keys);
    return CLI_EXIT_OK;
}

/* Options -d (remove) and --help; the index of REF, or a status (>= 0) to return. */
static int parse(struct cli *cli, int argc, char **argv, bool *remove, const char *what)
{
    static const struct option options[] = {
        {"delete", no_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int opt;

    while ((opt = cli_getopt(cli, argc, argv, ":dh", options)) != -1) {
        if (opt == 'd') {
            *remove = true;
        } else if (opt == 'h') {
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        } else {
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (argc - optind < 2)
        return cli_usage_error("%s: missing %s", argv[0], optind < argc ? what : "REF");
    return -1;
}

static int edit(struct cli *cli, const char *ref, const struct client_edit_req *req)
{
    const msgpack_object *reply;
    struct client *c;
    int r;

    if (!(c = cli_client(cli)))
        return cli->no_client;
    if ((r = client_edit(c, ref, req, &reply)) != 0)
        return cli_fail(cli, ref, r);
    return show(cli, c, ref, reply);
}

int cli_cmd_tag(struct cli *cli, int argc, char **argv)
{
    struct client_edit_req req = {0};
    bool remove = false;
    int status = parse(cli, argc, argv, &remove, "TAG");

    if (status >= 0)
        return status;
    for (int i = optind + 1; i < argc; i++)
        if (!argv[i][0])
            return cli_usage_error("%s: an empty tag", argv[0]);
    if (remove) {
        req.untags = (const char *const *)&argv[optind + 1];
        req.nuntags = (size_t)(argc - optind - 1);
    } else {
        req.tags = (const char *const *)&argv[optind + 1];
        req.ntags = (size_t)(argc - optind - 1);
    }
    return edit(cli, argv[optind], &req);
}

int cli_cmd_meta(struct cli *cli, int argc, char **argv)
{
    struct client_edit_req req = {0};
    bool remove = false;
    int status = parse(cli, argc, argv, &remove, "KEY=VALUE (or with -d KEY)");
    size_t n;

    if (status >= 0)
        return status;
    n = (size_t)(argc - optind - 1);
    if (remove) {
        for (int i = optind + 1; i < argc; i++)
            if (!argv[i][0])
                return cli_usage_error("%s: an empty key", argv[0]);
        req.unmeta = (const char *const *)&argv[optind + 1];
        req.nunmeta = n;
        return edit(cli, argv[optind], &req);
    }
    _cleanup_free_ struct client_meta *meta = calloc(n, sizeof(*meta));
    if (!meta)
        return cli_fail(cli, argv[optind], -ENOMEM);
    for (size_t i = 0; i < n; i++) {
        if (cli_parse_meta(argv[optind + 1 + (int)i], &meta[i]) < 0)
            return cli_usage_error("%s: %s is not KEY=VALUE (meta -d REF KEY removes a key)",
                                   argv[0], argv[optind + 1 + (int)i]);
    }
    req.meta = meta;
    req.nmeta = n;
    return edit(cli, argv[optind], &req);
}
