#pragma once

/*
 * The daemon's metrics in the Prometheus text format (version 0.0.4):
 * what `status` reports, and counters of requests, their latencies, errors,
 * bytes and the backend's requests, retries and failures (README
 * "Metrics"). The counters live in the server and are the loop thread's;
 * metrics-http.c serves the same text on an optional loopback listener.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/meta/db.h"
#include "daemon/net/op.h"

struct server;

/* Request latency buckets, in seconds (upper bounds; +Inf is implied). */
#define METRICS_BUCKETS 14

struct net_metrics {
    uint64_t done[OP_KIND_COUNT_];
    uint64_t bucket[OP_KIND_COUNT_][METRICS_BUCKETS + 1]; /* not cumulative; the last: +Inf */
    uint64_t sum_ns[OP_KIND_COUNT_];
    uint64_t errors[PROTO_E_COUNT_];
    uint64_t bytes_in, bytes_out, accepted;
};

/* An operation of `kind` ended after `ns` nanoseconds. */
void metrics_op_done(struct net_metrics *m, enum op_kind kind, uint64_t ns);
/*
 * The whole text (malloc'd, *len bytes, NUL-terminated), with the database
 * totals `t` a worker read. On the loop thread. 0 or -ENOMEM.
 */
int metrics_render(struct server *srv, const struct db_totals *t, char **text, size_t *len);
/*
 * What an HTTP request head (a NUL-terminated string; the function writes
 * into it) asks of the metrics listener: 0 for GET or HEAD of /metrics
 * (*is_head for HEAD), else the HTTP status of the refusal (400, 404, 405).
 */
int metrics_request_check(char *head, bool *is_head);
