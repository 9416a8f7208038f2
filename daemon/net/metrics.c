/*
 * The Prometheus text of the daemon's metrics (metrics.h). Only counts and
 * sizes: no names, no content, no backend address or key - the text may be
 * served on a loopback port that every user of the machine can reach.
 */
#include "daemon/net/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/crypto/seal.h"
#include "daemon/net/net-int.h"
#include "daemon/recovery/recovery.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"
#include "proto/util.h"

static const char *const kind_names[OP_KIND_COUNT_] = {
    [OP_ADD] = "add",       [OP_GET] = "get",         [OP_DELETE] = "delete",   [OP_LIST] = "list",
    [OP_STAT] = "stat",     [OP_STATUS] = "status",   [OP_SEARCH] = "search",   [OP_GC] = "gc",
    [OP_VERIFY] = "verify", [OP_DU] = "du",           [OP_REFRESH] = "refresh", [OP_LOG] = "log",
    [OP_KEY] = "key",       [OP_METRICS] = "metrics", [OP_NAME] = "name",       [OP_EDIT] = "edit",
};

/* Upper bounds of the latency buckets, in seconds, as printed. */
static const char *const bucket_le[METRICS_BUCKETS] = {
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",  "0.5",    "1",     "2.5",  "5",     "10",
};
static const uint64_t bucket_ns[METRICS_BUCKETS] = {
    500000,    1000000,   2500000,   5000000,    10000000,   25000000,    50000000,
    100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000u, 10000000000u,
};

void metrics_op_done(struct net_metrics *m, enum op_kind kind, uint64_t ns)
{
    size_t b = 0;

    if ((unsigned)kind >= OP_KIND_COUNT_)
        return;
    while (b < METRICS_BUCKETS && ns > bucket_ns[b])
        b++;
    m->done[kind]++;
    m->bucket[kind][b]++;
    m->sum_ns[kind] += ns;
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
    head(f, name, type, help);
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void requests(FILE *f, const struct net_metrics *m)
{
    head(f, "cairn_requests_total", "counter", "Requests that ended, by op.");
    for (size_t k = 0; k < OP_KIND_COUNT_; k++)
        fprintf(f, "cairn_requests_total{op=\"%s\"} %" PRIu64 "\n", kind_names[k], m->done[k]);
    head(f, "cairn_request_duration_seconds", "histogram",
         "Time from a request's first frame to its end, by op.");
    for (size_t k = 0; k < OP_KIND_COUNT_; k++) {
        uint64_t cum = 0;
        for (size_t b = 0; b <= METRICS_BUCKETS; b++) {
            cum += m->bucket[k][b];
            fprintf(f, "cairn_request_duration_seconds_bucket{op=\"%s\",le=\"%s\"} %" PRIu64 "\n",
                    kind_names[k], b < METRICS_BUCKETS ? bucket_le[b] : "+Inf", cum);
        }
        fprintf(f, "cairn_request_duration_seconds_sum{op=\"%s\"} %" PRIu64 ".%09" PRIu64 "\n",
                kind_names[k], m->sum_ns[k] / 1000000000u, m->sum_ns[k] % 1000000000u);
        fprintf(f, "cairn_request_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n", kind_names[k],
                m->done[k]);
    }
    head(f, "cairn_errors_total", "counter", "Error replies, by protocol error code.");
    for (int code = 0; code < PROTO_E_COUNT_; code++)
        fprintf(f, "cairn_errors_total{code=\"%s\"} %" PRIu64 "\n",
                proto_error_name((enum proto_error)code), m->errors[code]);
}

static void backend(FILE *f, const struct backend_stats *b)
{
    const char *const kinds[] = {"put", "get", "head", "delete", "list", "append"};
    const uint64_t counts[] = {b->puts, b->gets, b->heads, b->deletes, b->lists, b->appends};

    head(f, "cairn_backend_requests_total", "counter",
         "Operations on the object backend, by kind (retries not counted).");
    for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
        fprintf(f, "cairn_backend_requests_total{kind=\"%s\"} %" PRIu64 "\n", kinds[i], counts[i]);
    one(f, "cairn_backend_failures_total", "counter",
        "Backend operations that failed after their retries.", b->failures);
    one(f, "cairn_backend_retries_total", "counter",
        "Backend attempts repeated after a transient failure.", b->retries);
    one(f, "cairn_backend_timeouts_total", "counter", "Backend requests that timed out.",
        b->timeouts);
    one(f, "cairn_backend_written_bytes_total", "counter", "Bytes written to the backend.",
        b->bytes_written);
    one(f, "cairn_backend_read_bytes_total", "counter", "Bytes read from the backend.",
        b->bytes_read);
}

static void writers(FILE *f, struct server *srv)
{
    struct refresh_stats rs;
    struct refresh_writer *w = NULL;
    size_t n = 0;
    uint64_t now = uv_hrtime() / 1000000;

    if (!srv->refresh)
        return;
    refresh_get_stats(srv->refresh, &rs, &w, &n);
    one(f, "cairn_refresh_passes_total", "counter",
        "Refresh passes over the bucket's other writers.", rs.passes);
    one(f, "cairn_refresh_failures_total", "counter", "Refresh passes that failed.", rs.failures);
    head(f, "cairn_writer_packs_read", "gauge", "Packs of another writer this daemon has read.");
    for (size_t i = 0; i < n; i++)
        if (w[i].id != srv->writer)
            fprintf(f, "cairn_writer_packs_read{writer=\"%016" PRIx64 "\"} %" PRIu64 "\n", w[i].id,
                    w[i].packs);
    head(f, "cairn_writer_seen_seconds", "gauge",
         "Seconds since another writer's packs were last listed (-1: never).");
    for (size_t i = 0; i < n; i++)
        if (w[i].id != srv->writer) {
            double ago = w[i].seen_ms ? (double)(now - w[i].seen_ms) / 1000.0 : -1.0;
            fprintf(f, "cairn_writer_seen_seconds{writer=\"%016" PRIx64 "\"} %.3f\n", w[i].id, ago);
        }
    free(w);
}

int metrics_render(struct server *srv, const struct db_totals *t, char **text, size_t *len)
{
    const struct net_metrics *m = &srv->metrics;
    struct store_stats ss;
    struct search_stats xs;
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);

    if (!f)
        return -ENOMEM;
    store_get_stats(srv->st, &ss);
    search_get_stats(srv->search, &xs);
    head(f, "cairn_info", "gauge", "The daemon's version and store encryption.");
    fprintf(f, "cairn_info{version=\"%s\",encryption=\"%s\"} 1\n", CAIRN_VERSION,
            seal_on() ? "aes-256-gcm" : "off");
    one(f, "cairn_uptime_seconds", "gauge", "Seconds since the daemon started.",
        (uv_now(srv->loop) - srv->started_ms) / 1000);
    one(f, "cairn_documents", "gauge", "Documents stored.", t->documents);
    one(f, "cairn_logical_bytes", "gauge", "Sum of the documents' sizes.", t->logical_bytes);
    one(f, "cairn_unique_bytes", "gauge", "Raw bytes of the distinct chunks.", t->unique_bytes);
    one(f, "cairn_stored_bytes", "gauge", "Compressed bytes of the live chunks.", t->stored_bytes);
    one(f, "cairn_chunks", "gauge", "Distinct chunks stored.", t->chunks);
    one(f, "cairn_packs", "gauge", "Pack files.", t->packs);
    one(f, "cairn_pack_bytes", "gauge", "Bytes of the pack files.", t->pack_bytes);
    one(f, "cairn_cache_bytes", "gauge", "Bytes in the memory cache.", ss.cache_bytes);
    one(f, "cairn_cache_size_bytes", "gauge", "Bound of the memory cache.", ss.cache_max);
    one(f, "cairn_cache_hits_total", "counter", "Memory cache hits.", ss.cache_hits);
    one(f, "cairn_cache_misses_total", "counter", "Memory cache misses.", ss.cache_misses);
    if (ss.read_cache) {
        one(f, "cairn_read_cache_bytes", "gauge", "Bytes in the read cache on disk.", ss.rc_bytes);
        one(f, "cairn_read_cache_size_bytes", "gauge", "Bound of the read cache.", ss.rc_max);
        one(f, "cairn_read_cache_hits_total", "counter", "Read cache hits.", ss.rc_hits);
        one(f, "cairn_read_cache_misses_total", "counter", "Read cache misses.", ss.rc_misses);
        one(f, "cairn_read_cache_fetched_bytes_total", "counter",
            "Bytes the read cache fetched from the backend.", ss.rc_fetched);
        one(f, "cairn_read_cache_damaged_total", "counter",
            "Read cache slices found damaged and dropped.", ss.rc_damaged);
    }
    one(f, "cairn_index_pending", "gauge", "Documents the search index has yet to take in.",
        xs.pending);
    one(f, "cairn_connections", "gauge", "Client connections open.", srv->nconns);
    one(f, "cairn_connections_accepted_total", "counter", "Client connections accepted.",
        m->accepted);
    one(f, "cairn_received_bytes_total", "counter", "Bytes read from client connections.",
        m->bytes_in);
    one(f, "cairn_sent_bytes_total", "counter", "Bytes written to client connections.",
        m->bytes_out);
    requests(f, m);
    backend(f, &ss.backend);
    writers(f, srv);
    if (fclose(f) != 0) {
        free(buf);
        return -ENOMEM;
    }
    *text = buf;
    *len = size;
    return 0;
}
