/*
 * The run's summary: a table on standard output and, with --json, a
 * versioned JSON document ("schema": "cairn-loadgen/1") that bench/run reads.
 * Latencies are reported in milliseconds; throughput is finished ops
 * (failed ones included) over the measured phase's wall-clock time.
 */

#include "bench/loadgen/loadgen.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include <jansson.h>

#define SCHEMA "cairn-loadgen/1"

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

static double elapsed_s(const struct lg_run *run)
{
    double s = (double)(run->end_ns - run->start_ns) / 1e9;
    return s > 0 ? s : 1e-9;
}

/* An op type appears in reports when the profile has it or something recorded it. */
static bool reported(const struct lg_run *run, const double mix[LG_OP_COUNT_], unsigned op)
{
    return mix[op] > 0 || run->stats[op].count > 0;
}

static void totals(const struct lg_run *run, uint64_t *ops, uint64_t *failures)
{
    *ops = *failures = 0;
    for (unsigned op = 0; op < LG_OP_COUNT_; op++) {
        *ops += run->stats[op].count;
        *failures += run->stats[op].failures;
    }
}

static const char *content_name(enum lg_content c)
{
    return c == LG_CONTENT_TEXT ? "text" : "random";
}

void lg_report_text(const struct lg_run *run, const struct lg_seed_report *seed)
{
    const struct lg_config *cfg = run->cfg;
    double mix[LG_OP_COUNT_], secs = elapsed_s(run);
    uint64_t ops, failures;

    lg_workload_mix(cfg->profile, mix);
    totals(run, &ops, &failures);
    printf("profile %s, transport %s, %u clients, pipeline %u, ", lg_profile_name(cfg->profile),
           lg_transport_name(cfg->transport), cfg->clients, cfg->pipeline);
    if (cfg->ops_per_client)
        printf("%" PRIu64 " ops per client", cfg->ops_per_client);
    else
        printf("%.1f s", cfg->duration);
    printf(", %u seeded %zu-byte %s documents (%.2f s)\n", seed->documents, cfg->file_size,
           content_name(cfg->content), seed->seconds);
    printf("%.3f s, %" PRIu64 " ops, %.1f ops/s, %" PRIu64 " failed (%.2f%%)\n", secs, ops,
           (double)ops / secs, failures, ops ? 100.0 * (double)failures / (double)ops : 0.0);
    printf("%-8s %9s %8s %10s %9s %9s %9s %9s %9s\n", "op", "count", "failed", "ops/s", "mean ms",
           "p50 ms", "p95 ms", "p99 ms", "max ms");
    for (unsigned op = 0; op < LG_OP_COUNT_; op++) {
        const struct lg_op_stats *st = &run->stats[op];
        const struct lg_hist *h = &st->latency;

        if (!reported(run, mix, op))
            continue;
        printf("%-8s %9" PRIu64 " %8" PRIu64 " %10.1f %9.3f %9.3f %9.3f %9.3f %9.3f\n",
               lg_op_name((enum lg_op)op), st->count, st->failures, (double)st->count / secs,
               h->count ? ms((uint64_t)(h->sum / (double)h->count)) : 0.0,
               ms(lg_hist_quantile(h, 0.50)), ms(lg_hist_quantile(h, 0.95)),
               ms(lg_hist_quantile(h, 0.99)), ms(h->max));
    }
    for (unsigned op = 0; op < LG_OP_COUNT_; op++) {
        for (unsigned e = 1; e < LG_ERR_COUNT_; e++) {
            if (run->stats[op].errors[e])
                printf("errors: %s: %s x%" PRIu64 "\n", lg_op_name((enum lg_op)op),
                       lg_error_name(e), run->stats[op].errors[e]);
        }
    }
}

static json_t *latency_json(const struct lg_hist *h)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "mean",
                     h->count ? ms((uint64_t)(h->sum / (double)h->count)) : 0.0, "min", ms(h->min),
                     "p50", ms(lg_hist_quantile(h, 0.50)), "p95", ms(lg_hist_quantile(h, 0.95)),
                     "p99", ms(lg_hist_quantile(h, 0.99)), "max", ms(h->max));
}

static json_t *op_json(const struct lg_run *run, unsigned op, double secs, double share)
{
    const struct lg_op_stats *st = &run->stats[op];
    json_t *errors = json_object(), *lat;
    json_t *obj;

    for (unsigned e = 1; e < LG_ERR_COUNT_; e++) {
        if (st->errors[e])
            json_object_set_new(errors, lg_error_name(e), json_integer((json_int_t)st->errors[e]));
    }
    lat = latency_json(&st->latency);
    obj = json_pack("{s:I, s:I, s:f, s:f, s:o, s:o}", "count", (json_int_t)st->count, "failures",
                    (json_int_t)st->failures, "ops_per_s", (double)st->count / secs, "share", share,
                    "latency_ms", lat, "errors", errors);
    if (obj && op == LG_OP_SEARCH)
        json_object_set_new(obj, "hits", json_integer((json_int_t)st->search_hits));
    return obj;
}

int lg_report_json(const struct lg_run *run, const struct lg_seed_report *seed, const char *path)
{
    const struct lg_config *cfg = run->cfg;
    double mix[LG_OP_COUNT_], secs = elapsed_s(run);
    uint64_t ops, failures;
    json_t *root, *op_types = json_object();
    int r;

    lg_workload_mix(cfg->profile, mix);
    totals(run, &ops, &failures);
    for (unsigned op = 0; op < LG_OP_COUNT_; op++) {
        if (reported(run, mix, op))
            json_object_set_new(op_types, lg_op_name((enum lg_op)op),
                                op_json(run, op, secs, mix[op]));
    }
    root =
        json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:o, s:I, s:I, s:s, s:I,"
                  " s:{s:I, s:f, s:I}, s:f, s:I, s:I, s:f, s:f, s:o}",
                  "schema", SCHEMA, "socket", cfg->socket, "profile", lg_profile_name(cfg->profile),
                  "clients", (json_int_t)cfg->clients, "pipeline", (json_int_t)cfg->pipeline,
                  "ops_per_client", (json_int_t)cfg->ops_per_client, "duration_limit_s",
                  cfg->duration > 0 ? json_real(cfg->duration) : json_null(), "files",
                  (json_int_t)cfg->files, "file_size", (json_int_t)cfg->file_size, "content",
                  content_name(cfg->content), "session_ops", (json_int_t)cfg->session_ops, "seed",
                  "documents", (json_int_t)seed->documents, "seconds", seed->seconds, "failures",
                  (json_int_t)seed->failures, "elapsed_s", secs, "ops", (json_int_t)ops, "failures",
                  (json_int_t)failures, "fail_rate", ops ? (double)failures / (double)ops : 0.0,
                  "ops_per_s", (double)ops / secs, "op_types", op_types);
    if (!root)
        return -ENOMEM;
    json_object_set_new(root, "transport", json_string(lg_transport_name(cfg->transport)));
    /* Every request's latency, whatever its op; a session's connect is not a request. */
    struct lg_hist requests = {0};

    for (unsigned op = 0; op < LG_OP_COUNT_; op++) {
        if (op != LG_OP_CONNECT)
            lg_hist_merge(&requests, &run->stats[op].latency);
    }
    json_object_set_new(root, "latency_ms", latency_json(&requests));
    r = json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return r < 0 ? -EIO : 0;
}
