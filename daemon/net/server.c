/*
 * The server object (net.h): what it serves from, its connections, and
 * stopping.
 */
#include "daemon/net/net.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon/net/conn.h"
#include "daemon/net/dispatch.h"
#include "daemon/net/net-int.h"
#include "proto/util.h"

int server_new(struct server **out, const struct server_parts *parts)
{
    struct server *srv = calloc(1, sizeof(*srv));

    if (!srv)
        return -ENOMEM;
    srv->loop = parts->loop;
    srv->st = parts->st;
    srv->search = parts->search;
    srv->gc = parts->gc;
    srv->refresh = parts->refresh;
    srv->db = parts->db;
    srv->writer = parts->writer;
    snprintf(srv->backend_desc, sizeof(srv->backend_desc), "%s", parts->backend_desc);
    srv->max_connections = parts->max_connections;
    srv->client_timeout_ms = parts->client_timeout_ms;
    srv->shutdown = parts->shutdown;
    srv->shutdown_ctx = parts->shutdown_ctx;
    srv->buffer_limit = parts->connection_memory ? parts->connection_memory : SIZE_MAX;
    srv->handler = &dispatch_handler;
    srv->started_ms = uv_now(srv->loop);
    uv_idle_init(srv->loop, &srv->pending_idle);
    *out = srv;
    return 0;
}

static void on_idle_closed(uv_handle_t *h)
{
    free(container_of((uv_idle_t *)h, struct server, pending_idle));
}

struct server *server_free(struct server *srv)
{
    if (srv)
        uv_close((uv_handle_t *)&srv->pending_idle, on_idle_closed);
    return NULL;
}

void server_accept(struct server *srv, uv_stream_t *listener)
{
    if (!srv->stopping)
        conn_accept(srv, listener);
}

void server_stop(struct server *srv, void (*gone)(void *ctx), void *ctx)
{
    srv->stopping = true;
    srv->gone = gone;
    srv->gone_ctx = ctx;
    server_metrics_close(srv);
    for (struct conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (c->inflight == 0)
            conn_close_after_flush(c);
    }
    conn_check_gone(srv);
}

void server_sweep(struct server *srv)
{
    conn_sweep(srv);
}

void server_set_shutdown(struct server *srv, void (*shutdown)(void *ctx), void *ctx)
{
    srv->shutdown = shutdown;
    srv->shutdown_ctx = ctx;
}

void server_close_all(struct server *srv)
{
    server_metrics_close(srv);
    for (struct conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        conn_close(c);
    }
    conn_check_gone(srv);
}

unsigned server_connections(const struct server *srv)
{
    return srv->nconns;
}
