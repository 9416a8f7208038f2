/*
 * cairn-loadgen: parses and checks the command line, seeds the documents,
 * runs the measured phase and reports. Exit status: 0 when the run finished
 * (failed requests are results, reported, not errors of the tool), 1 when it
 * could not run (daemon unreachable, seeding failed), 2 for a bad command line.
 */

#include "bench/loadgen/loadgen.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cairn-loadgen [--socket PATH] --clients N --ops-per-client K --profile P\n"
            "                     [--files F] [--file-size BYTES] [--pipeline D] [--duration S]\n"
            "                     [--content text|random] [--session-ops M] [--seed X]\n"
            "                     [--transport ipc|mcp] [--cairn PATH] [--json FILE] [--quiet]\n"
            "\n"
            "Profiles: mixed (50%% get, 25%% search, 15%% add, 10%% delete), get, add, search,\n"
            "external_agent_churn (connections that connect, do --session-ops requests of\n"
            "the mixed mix, and hang up). --files documents of --file-size bytes are added\n"
            "before the clock starts. --duration stops sending after S seconds; without\n"
            "--ops-per-client it alone ends the run. --transport mcp sends the measured\n"
            "requests as tools/call to a `cairn mcp` per client (--cairn names the cairn\n"
            "binary, default: cairn in PATH); seeding always uses the daemon's socket.\n");
}

/* Parses an unsigned number with an optional K/M/G (binary) suffix. */
static int parse_size(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;
    uint64_t mult = 1;

    if (!s[0] || s[0] == '-')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K':
            mult = 1024;
            break;
        case 'm':
        case 'M':
            mult = 1024 * 1024;
            break;
        case 'g':
        case 'G':
            mult = 1024 * 1024 * 1024;
            break;
        default:
            return -1;
        }
        if (end[1] && !(end[1] == 'i' && end[2] == 'B' && !end[3]) && !(end[1] == 'B' && !end[2]))
            return -1;
    }
    if (v > max / mult)
        return -1;
    *out = v * mult;
    return 0;
}

static int parse_args(int argc, char **argv, struct lg_config *cfg)
{
    enum { OPT_CONTENT = 256, OPT_SESSION_OPS, OPT_SEED, OPT_QUIET, OPT_TRANSPORT, OPT_CAIRN };
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"clients", required_argument, NULL, 'c'},
        {"ops-per-client", required_argument, NULL, 'n'},
        {"profile", required_argument, NULL, 'p'},
        {"files", required_argument, NULL, 'f'},
        {"file-size", required_argument, NULL, 'z'},
        {"pipeline", required_argument, NULL, 'd'},
        {"duration", required_argument, NULL, 't'},
        {"json", required_argument, NULL, 'j'},
        {"content", required_argument, NULL, OPT_CONTENT},
        {"session-ops", required_argument, NULL, OPT_SESSION_OPS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"cairn", required_argument, NULL, OPT_CAIRN},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    bool have_profile = false, have_clients = false, have_ops = false;
    uint64_t v;
    char *end;
    int opt;

    int longindex = -1;

    while ((opt = getopt_long(argc, argv, "s:c:n:p:f:z:d:t:j:h", opts, &longindex)) != -1) {
        switch (opt) {
        case 's':
            if (strlen(optarg) >= sizeof(cfg->socket)) {
                fprintf(stderr, "cairn-loadgen: socket path too long\n");
                return -1;
            }
            snprintf(cfg->socket, sizeof(cfg->socket), "%s", optarg);
            break;
        case 'c':
            if (parse_size(optarg, LG_MAX_CLIENTS, &v) < 0 || v == 0)
                goto bad;
            cfg->clients = (unsigned)v;
            have_clients = true;
            break;
        case 'n':
            if (parse_size(optarg, UINT64_MAX / 2, &v) < 0)
                goto bad;
            cfg->ops_per_client = v;
            have_ops = true;
            break;
        case 'p':
            if (lg_profile_parse(optarg, &cfg->profile) < 0)
                goto bad;
            have_profile = true;
            break;
        case 'f':
            if (parse_size(optarg, LG_MAX_FILES, &v) < 0)
                goto bad;
            cfg->files = (unsigned)v;
            break;
        case 'z':
            if (parse_size(optarg, LG_MAX_FILE_SIZE, &v) < 0)
                goto bad;
            cfg->file_size = (size_t)v;
            break;
        case 'd':
            if (parse_size(optarg, LG_MAX_PIPELINE, &v) < 0 || v == 0)
                goto bad;
            cfg->pipeline = (unsigned)v;
            break;
        case 't':
            errno = 0;
            cfg->duration = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(cfg->duration > 0 && cfg->duration < 1e6))
                goto bad;
            break;
        case 'j':
            cfg->json_path = optarg;
            break;
        case OPT_CONTENT:
            if (strcmp(optarg, "text") == 0)
                cfg->content = LG_CONTENT_TEXT;
            else if (strcmp(optarg, "random") == 0)
                cfg->content = LG_CONTENT_RANDOM;
            else
                goto bad;
            break;
        case OPT_SESSION_OPS:
            if (parse_size(optarg, 1000000, &v) < 0 || v == 0)
                goto bad;
            cfg->session_ops = (unsigned)v;
            break;
        case OPT_SEED:
            if (parse_size(optarg, UINT64_MAX, &v) < 0)
                goto bad;
            cfg->seed = v;
            break;
        case OPT_QUIET:
            cfg->quiet = true;
            break;
        case OPT_TRANSPORT:
            if (strcmp(optarg, "ipc") == 0)
                cfg->transport = LG_TRANSPORT_IPC;
            else if (strcmp(optarg, "mcp") == 0)
                cfg->transport = LG_TRANSPORT_MCP;
            else
                goto bad;
            break;
        case OPT_CAIRN:
            if (!optarg[0])
                goto bad;
            cfg->cairn = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
        longindex = -1;
        continue;
    bad:
        for (const struct option *o = opts; o->name && longindex < 0; o++) {
            if (o->val == opt)
                longindex = (int)(o - opts);
        }
        fprintf(stderr, "cairn-loadgen: bad value for --%s: '%s'\n", opts[longindex].name, optarg);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "cairn-loadgen: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!have_profile || !have_clients || (!have_ops && cfg->duration <= 0)) {
        fprintf(stderr, "cairn-loadgen: --profile, --clients and --ops-per-client (or "
                        "--duration) are required\n");
        usage(stderr);
        return -1;
    }
    if (!have_ops)
        cfg->ops_per_client = 0;
    else if (cfg->ops_per_client == 0) {
        fprintf(stderr, "cairn-loadgen: --ops-per-client must be at least 1\n");
        return -1;
    }
    if (cfg->files == 0 && cfg->profile != LG_PROFILE_ADD) {
        fprintf(stderr,
                "cairn-loadgen: profile %s reads seeded documents: --files must be "
                "at least 1\n",
                lg_profile_name(cfg->profile));
        return -1;
    }
    if (cfg->transport == LG_TRANSPORT_MCP && cfg->content != LG_CONTENT_TEXT) {
        /* The add tool takes text (a JSON string); random bytes are not valid UTF-8. */
        fprintf(stderr, "cairn-loadgen: --transport mcp adds text: --content random is "
                        "not possible\n");
        return -1;
    }
    if (cfg->transport == LG_TRANSPORT_MCP && cfg->file_size > LG_MCP_MAX_FILE_SIZE) {
        fprintf(stderr, "cairn-loadgen: --transport mcp: --file-size is at most 1 MiB (what "
                        "one get of `cairn mcp` returns)\n");
        return -1;
    }
    if (!cfg->socket[0] && client_socket_path(cfg->socket, sizeof(cfg->socket)) < 0) {
        fprintf(stderr, "cairn-loadgen: the default socket path is too long\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct lg_config cfg = {
        .files = 100,
        .file_size = 8192,
        .pipeline = 1,
        .content = LG_CONTENT_TEXT,
        .session_ops = 4,
        .seed = 1,
        .cairn = "cairn",
    };
    struct lg_seed_report seed = {0};
    struct lg_run run = {.cfg = &cfg};
    uint64_t t0;
    int r, status = 0;

    if (parse_args(argc, argv, &cfg) < 0)
        return 2;
    if (cfg.transport == LG_TRANSPORT_MCP && (r = lg_mcp_check_binary(cfg.cairn)) < 0) {
        fprintf(stderr, "cairn-loadgen: cannot run %s: %s (--cairn PATH names the cairn binary)\n",
                cfg.cairn, strerror(-r));
        return 1;
    }
    /* A daemon that hangs up is a failed request to count, not a reason to die. */
    signal(SIGPIPE, SIG_IGN);
    r = uv_loop_init(&run.loop);
    if (r < 0) {
        fprintf(stderr, "cairn-loadgen: %s\n", uv_strerror(r));
        return 1;
    }
    r = lg_workload_new(&run.wl, &cfg);
    if (r < 0) {
        fprintf(stderr, "cairn-loadgen: %s\n", strerror(-r));
        uv_loop_close(&run.loop);
        return 1;
    }

    if (cfg.files > 0) {
        unsigned seeders = cfg.clients < 16 ? cfg.clients : 16;
        t0 = uv_hrtime();
        r = lg_run_phase(&run, LG_PHASE_SEED, seeders, 0, 8);
        seed.documents = lg_workload_seeded(run.wl);
        seed.seconds = (double)(uv_hrtime() - t0) / 1e9;
        seed.failures = run.stats[LG_OP_ADD].failures;
        if (r < 0 || seed.documents < cfg.files) {
            fprintf(stderr, "cairn-loadgen: seeding failed (%u of %u documents added): %s\n",
                    seed.documents, cfg.files,
                    r < 0 ? uv_strerror(r) : "the daemon refused some adds");
            for (unsigned e = 1; e < LG_ERR_COUNT_; e++) {
                if (run.stats[LG_OP_ADD].errors[e])
                    fprintf(stderr, "  %s: %" PRIu64 "\n", lg_error_name(e),
                            run.stats[LG_OP_ADD].errors[e]);
            }
            status = 1;
            goto out;
        }
    }

    r = lg_run_phase(&run, LG_PHASE_MEASURE, cfg.clients, cfg.ops_per_client, cfg.pipeline);
    if (r < 0) {
        fprintf(stderr, "cairn-loadgen: the run stopped: %s\n", uv_strerror(r));
        status = 1;
    } else if (run.stats[LG_OP_CONNECT].failures == run.stats[LG_OP_CONNECT].count &&
               run.stats[LG_OP_CONNECT].count > 0) {
        /* Not one connection: there was nothing to measure. */
        if (cfg.transport == LG_TRANSPORT_MCP)
            fprintf(stderr, "cairn-loadgen: no `%s --socket %s mcp` answered initialize\n",
                    cfg.cairn, cfg.socket);
        else
            fprintf(stderr, "cairn-loadgen: cannot connect to %s\n", cfg.socket);
        status = 1;
    }
    if (!cfg.quiet)
        lg_report_text(&run, &seed);
    if (cfg.json_path && lg_report_json(&run, &seed, cfg.json_path) < 0) {
        fprintf(stderr, "cairn-loadgen: cannot write %s\n", cfg.json_path);
        status = 1;
    }
out:
    lg_workload_free(run.wl);
    r = uv_loop_close(&run.loop);
    if (r < 0) {
        fprintf(stderr, "cairn-loadgen: handles left open: %s\n", uv_strerror(r));
        status = 1;
    }
    return status;
}
