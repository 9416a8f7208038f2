#pragma once

/* The server's state, shared by the files of daemon/net (server.c, conn.c, dispatch.c, op*.c). */

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/net/net.h"

struct conn;
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
    const struct conn_handler *handler; /* dispatch's */
    uint64_t started_ms;
    struct conn *conns;
    struct conn *pending; /* connections with frames to process */
    unsigned nconns;
    uv_idle_t pending_idle;
    bool stopping;
    void (*gone)(void *ctx);
    void *gone_ctx;
};
