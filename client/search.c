/* The search command: options to a search request, hits as text or JSON lines. */

#include "client/cli.h"
#include "client/util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEARCH_MAX_TAGS PROTO_MAX_TAGS

/*
 * Parses DATE as Unix seconds: "@SECONDS", "YYYY-MM-DD" (midnight UTC) or
 * "YYYY-MM-DDTHH:MM[:SS][Z]" (UTC). 0 or -EINVAL.
 */
static int parse_date(const char *s, int64_t *out)
{
    static const char *const formats[] = {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S",
                                          "%Y-%m-%dT%H:%MZ",    "%Y-%m-%dT%H:%M",
                                          "%Y-%m-%d",           NULL};
    struct tm tm;
    char *end;

    if (s[0] == '@') {
        errno = 0;
        long long v = strtoll(s + 1, &end, 10);
        if (errno || end == s + 1 || *end)
            return -EINVAL;
        *out = v;
        return 0;
    }
    for (const char *const *f = formats; *f; f++) {
        memset(&tm, 0, sizeof(tm));
        end = strptime(s, *f, &tm);
        if (end && *end == '\0') {
            *out = (int64_t)timegm(&tm);
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Joins the operands with single spaces: `cairn search a b` searches "a b". */
static char *join_words(int argc, char **argv)
{
    size_t len = 0;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *q = malloc(len ? len : 1), *p = q;
    if (!q)
        return NULL;
    *q = '\0';
    for (int i = 0; i < argc; i++) {
        size_t n = strlen(argv[i]);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = i + 1 < argc ? ' ' : '\0';
    }
    return q;
}

/* A snippet on one line: newlines and tabs from the document become spaces. */
static void print_oneline(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        putchar(s[i] == '\n' || s[i] == '\r' || s[i] == '\t' ? ' ' : s[i]);
}

static void print_hit(void *userdata, const msgpack_object *hit)
{
    const struct cli *cli = userdata;
    const char *hash = "", *name = "", *snippet = "";
    size_t hash_len = 0, name_len = 0, snippet_len = 0;
    const msgpack_object *score = proto_map_get(hit, "score");

    if (cli->json) {
        cli_print_json(stdout, cli_json_reply(hit));
        return;
    }
    proto_get_str(hit, "hash", &hash, &hash_len);
    proto_get_str(hit, "name", &name, &name_len);
    proto_get_str(hit, "snippet", &snippet, &snippet_len);
    if (name_len == 0) {
        name = "-";
        name_len = 1;
    }
    printf("%.*s  %.3f  %.*s  ", (int)hash_len, hash,
           score && score->type == MSGPACK_OBJECT_FLOAT64 ? score->via.f64 : 0.0, (int)name_len,
           name);
    print_oneline(snippet, snippet_len);
    putchar('\n');
}

int cli_cmd_search(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"limit", required_argument, NULL, 'l'},
        {"offset", required_argument, NULL, 'O'},
        {"tag", required_argument, NULL, 't'},
        {"name", required_argument, NULL, 'N'},
        {"mime", required_argument, NULL, 'M'},
        {"after", required_argument, NULL, 'A'},
        {"before", required_argument, NULL, 'B'},
        {"fuzzy", no_argument, NULL, 'f'},
        {"all", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *tags[SEARCH_MAX_TAGS];
    struct client_search_req req = {.limit = 10};
    _cleanup_free_ char *query = NULL;
    struct client *c;
    int opt, r;

    /* "+": options end at the first word, so `search eggs -butter` keeps -butter in the query. */
    while ((opt = cli_getopt(cli, argc, argv, "+:l:t:h", options)) != -1) {
        switch (opt) {
        case 'l':
            if (parse_count(optarg, 1, 1000, &req.limit))
                return cli_usage_error("%s: -l wants a number from 1 to 1000", argv[0]);
            break;
        case 'O':
            if (parse_count(optarg, 0, INT64_MAX, &req.offset))
                return cli_usage_error("%s: --offset wants a number", argv[0]);
            break;
        case 't':
            if (!optarg[0])
                return cli_usage_error("%s: -t wants a non-empty tag", argv[0]);
            if (req.n_tags == SEARCH_MAX_TAGS)
                return cli_usage_error("%s: at most %d tags", argv[0], SEARCH_MAX_TAGS);
            tags[req.n_tags++] = optarg;
            break;
        case 'N':
            req.name = optarg;
            break;
        case 'M':
            req.mime = optarg;
            break;
        case 'A':
        case 'B':
            if (parse_date(optarg, opt == 'A' ? &req.after : &req.before))
                return cli_usage_error("%s: bad date '%s' (YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS or "
                                       "@SECONDS)",
                                       argv[0], optarg);
            if (opt == 'A')
                req.has_after = true;
            else
                req.has_before = true;
            break;
        case 'f':
            req.fuzzy = true;
            break;
        case 'a':
            req.all = true;
            break;
        case 'h':
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        default:
            return cli_option_error(argv[0], opt, argv);
        }
    }
    /* Global options may follow the query words too, unless "--" ended the options. */
    if (strcmp(argv[optind - 1], "--") != 0)
        argc = cli_take_trailing_globals(cli, argc, argv, optind);
    if (optind >= argc)
        return cli_usage_error("%s: missing QUERY", argv[0]);
    query = join_words(argc - optind, argv + optind);
    if (!query)
        return cli_fail_errno("search");
    /* The daemon would refuse it too; a query this long would not even fit a frame. */
    if (strlen(query) > PROTO_MAX_QUERY) {
        fprintf(stderr, "cairn: invalid query: longer than %u bytes\n", PROTO_MAX_QUERY);
        return CLI_EXIT_FAILED;
    }
    req.query = query;
    req.tags = tags;
    c = cli_client(cli);
    if (!c)
        return CLI_EXIT_UNREACHABLE;
    r = client_search(c, &req, print_hit, cli);
    return r == 0 ? CLI_EXIT_OK : cli_fail(cli, NULL, r);
}
