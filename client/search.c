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

/* A snippet on one line: newlines and tabs from the document become spaces, other controls '?'. */
static void print_oneline(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\n' || s[i] == '\r' || s[i] == '\t')
            putchar(' ');
        else
            cli_put_text(stdout, s + i, 1);
    }
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
    if (cli->null) {
        /* The hash: the name may point to another version than the one that matched. */
        cli_put_record(cli, stdout, hash, hash_len);
        return;
    }
    proto_get_str(hit, "name", &name, &name_len);
    proto_get_str(hit, "snippet", &snippet, &snippet_len);
    if (name_len == 0) {
        name = "-";
        name_len = 1;
    }
    printf("%.*s  %.3f  ", (int)hash_len, hash,
           score && score->type == MSGPACK_OBJECT_FLOAT64 ? score->via.f64 : 0.0);
    cli_put_text(stdout, name, name_len);
    fputs("  ", stdout);
    print_oneline(snippet, snippet_len);
    putchar('\n');
}

/* "--NAME" or "--NAME=VALUE": whether the value is the next argument (the command's or a global).
 */
static bool long_takes_next(const char *arg, const struct option *options)
{
    const char *name = arg + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct option *o = cli_global_option(name, len);

    for (const struct option *c = options; !o && c->name; c++)
        if (strlen(c->name) == len && strncmp(c->name, name, len) == 0)
            o = c;
    return o && o->has_arg == required_argument && !eq;
}

/*
 * The arguments with the options first, then "--", then the query words:
 * options may follow the words (`search epoll -l 1`). Before the first word
 * everything that begins with "-" is an option, as getopt reads it; after
 * it, only -l N (or -lN), -t TAG, -h, -0 and long options ("--" and a name:
 * getopt refuses those it does not know) are, and any other word, "-butter"
 * or "-tree" included, stays in the query. "--" ends the options. A new array
 * (NULL-terminated).
 */
static char **options_first(int argc, char **argv, const struct option *options, int *out_argc)
{
    char **v = calloc((size_t)argc + 2, sizeof(*v));
    char **words = calloc((size_t)argc + 1, sizeof(*words));
    int n = 0, nwords = 0;

    if (!v || !words) {
        free(v);
        free(words);
        return NULL;
    }
    v[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int takes = 0;
        if (strcmp(a, "--") == 0) {
            while (++i < argc)
                words[nwords++] = argv[i];
            break;
        }
        if (a[0] == '-' && a[1] == '-' && a[2])
            takes = long_takes_next(a, options) ? 2 : 1; /* --nope too: getopt's to refuse */
        else if (a[0] == '-' && (a[1] == 'l' || a[1] == 't') && !a[2])
            takes = 2;
        else if (a[0] == '-' && a[1] == 'l' && strspn(a + 2, "0123456789") == strlen(a + 2))
            takes = 1; /* -l5; -lisp is the query's NOT lisp */
        else if (a[0] == '-' && (a[1] == 'h' || a[1] == '0') && !a[2])
            takes = 1;
        else if (a[0] == '-' && a[1] && nwords == 0)
            takes = 1; /* getopt's to judge, as before any word */
        if (takes == 0) {
            words[nwords++] = argv[i];
            continue;
        }
        v[n++] = argv[i];
        if (takes == 2 && i + 1 < argc)
            v[n++] = argv[++i];
    }
    v[n++] = "--";
    memcpy(v + n, words, (size_t)nwords * sizeof(*words));
    n += nwords;
    free(words);
    *out_argc = n;
    return v;
}

int cli_cmd_search(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"limit", required_argument, NULL, 'l'},  {"offset", required_argument, NULL, 'O'},
        {"tag", required_argument, NULL, 't'},    {"name", required_argument, NULL, 'N'},
        {"mime", required_argument, NULL, 'M'},   {"after", required_argument, NULL, 'A'},
        {"before", required_argument, NULL, 'B'}, {"fuzzy", no_argument, NULL, 'f'},
        {"all", no_argument, NULL, 'a'},          {"null", no_argument, NULL, '0'},
        {"help", no_argument, NULL, 'h'},         {0},
    };
    const char *tags[SEARCH_MAX_TAGS];
    struct client_search_req req = {.limit = 10};
    _cleanup_free_ char *query = NULL;
    _cleanup_free_ char **args = options_first(argc, argv, options, &argc);
    struct client *c;
    int opt, r;

    if (!args)
        return cli_fail_errno("search");
    argv = args;
    /* "+": options end at the "--" options_first() put before the words. */
    while ((opt = cli_getopt(cli, argc, argv, "+:l:t:h0", options)) != -1) {
        switch (opt) {
        case '0':
            cli->null = true;
            break;
        case 'l':
            if (cli_parse_count(optarg, 1, 1000, &req.limit))
                return cli_usage_error("%s: -l wants a number from 1 to 1000", argv[0]);
            break;
        case 'O':
            if (cli_parse_count(optarg, 0, INT64_MAX, &req.offset))
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
    if (cli_null_conflict(cli, argv[0], NULL))
        return CLI_EXIT_USAGE;
    if (optind >= argc)
        return cli_usage_error("%s: missing QUERY", argv[0]);
    query = join_words(argc - optind, argv + optind);
    if (!query)
        return cli_fail_errno("search");
    /* The daemon would refuse it too; a query this long would not even fit a frame. */
    if (strlen(query) > PROTO_MAX_QUERY)
        return cli_error(CLI_EXIT_FAILED, "bad_request", NULL,
                         "invalid query: longer than %u bytes", PROTO_MAX_QUERY);
    req.query = query;
    req.tags = tags;
    c = cli_client(cli);
    if (!c)
        return cli->no_client;
    r = client_search(c, &req, print_hit, cli);
    return r == 0 ? CLI_EXIT_OK : cli_fail(cli, NULL, r);
}
