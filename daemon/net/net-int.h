#pragma once

/* The server's state, shared by the files of daemon/net (server.c, conn.c, dispatch.c, op*.c). */

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/net/metrics.h"
#include "daemon/net/net.h"

struct conn;
struct metrics_listener;
struct scrape;
struct conn_handler;

struct server {
    uv_loop_t *loop;
    struct store *st;
    struct search *search;
    struct gc *gc;
    struct refresh *refresh;
    struct db *db;
    uint64_t writer;
    char backend_desc[256];
    unsigned max_connections;
    uint64_t client_timeout_ms;
    /*
     * Connection memory (conn.c): the bytes of every read buffer and every
     * queued reply, its bound, the connections waiting for room in it (first
     * come first served), the read buffers those hold, and the one finishing
     * its frame past the bound.
     */
    size_t buffered, rbuffered, buffer_limit, waiting_held; /* rbuffered: read buffers */
    struct conn *budget_head, *budget_tail, *budget_forced;
    const struct conn_handler *handler; /* dispatch's */
    uint64_t started_ms;
    struct net_metrics metrics; /* metrics.h */
    /* metrics-http.c: the loopback listener ([daemon] metrics_listen) and its scrapes. */
    struct metrics_listener *mlistener;
    struct scrape *scrapes;
    unsigned nscrapes;
    struct conn *conns;
    struct conn *pending; /* connections with frames to process */
    unsigned nconns;
    uv_idle_t pending_idle;
    bool stopping;
    void (*shutdown)(void *ctx);
    void *shutdown_ctx;
    void (*gone)(void *ctx);
    void *gone_ctx;
};
