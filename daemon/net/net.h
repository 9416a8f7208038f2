#pragma once

/*
 * The server: client connections on the daemon's socket and the protocol
 * spoken over them (proto/PROTOCOL.md). Each connection reads frames and
 * hands each to dispatch, which validates it and runs the operation through
 * the store, search, gc or the database, and sends the replies. Connection
 * state belongs to the loop thread alone.
 *
 * The owner accepts clients on its listener with server_accept, and on a
 * stop signal calls server_stop: new requests are answered `shutting_down`,
 * requests in progress finish, idle connections close, and `gone` runs once
 * no connection is left.
 */

#include <stdbool.h>
#include <stdint.h>

#include <sys/socket.h>
#include <uv.h>

struct db;
struct gc;
struct refresh;
struct search;
struct server;
struct store;

/* What the server serves from; all stay the owner's. */
struct server_parts {
    uv_loop_t *loop;
    struct store *st;
    struct search *search;
    struct gc *gc;
    struct refresh *refresh; /* NULL: none */
    struct db *db;
    uint64_t writer;          /* for status: this daemon's writer id */
    const char *backend_desc; /* for status: the backend, without secrets */
    unsigned max_connections;
    uint64_t client_timeout_ms; /* 0: never */
    uint64_t connection_memory; /* bound of all read buffers and queued replies */
    /*
     * The `shutdown` op: what the owner does on SIGTERM (NULL: the op is
     * refused). Called after the op's reply is queued.
     */
    void (*shutdown)(void *ctx);
    void *shutdown_ctx;
};

int server_new(struct server **out, const struct server_parts *parts);
/*
 * Serves the metrics (README "Metrics") over HTTP on `addr`, HOST:PORT of a
 * loopback address (127.0.0.0/8, [::1] or localhost). 0, or negative errno
 * with the reason in err.
 */
int server_metrics_listen(struct server *srv, const char *addr, char *err, size_t err_len);
/* Closes the metrics listener and its scrapes (those reading the database once that is done). */
void server_metrics_close(struct server *srv);
/* Whether `s` is such an address: 0, -EINVAL (not HOST:PORT) or -EPERM (not loopback). */
int metrics_addr_parse(const char *s, struct sockaddr_storage *out);
/*
 * Only once no connection is left. Its handle closes asynchronously: the
 * memory goes in the close callback, so the caller runs the loop afterwards.
 * Returns NULL.
 */
struct server *server_free(struct server *srv);

/* Accepts a client waiting on `listener` (refused at once while stopping). */
void server_accept(struct server *srv, uv_stream_t *listener);
/*
 * Stops serving: refuses new requests, closes the idle connections and each
 * busy one once its requests are done. `gone` runs when no connection is
 * left, at once when none is.
 */
void server_stop(struct server *srv, void (*gone)(void *ctx), void *ctx);
/* Replaces the parts' shutdown hook; NULL refuses the `shutdown` op. */
void server_set_shutdown(struct server *srv, void (*shutdown)(void *ctx), void *ctx);
/* Closes every connection now, requests in progress or not. */
void server_close_all(struct server *srv);
unsigned server_connections(const struct server *srv);
/*
 * Closes the connections that have waited on their client for longer than
 * client_timeout: a reply it does not read, a frame or an add it stopped
 * sending. Their requests end, so gc is not held up. Called every second.
 */
void server_sweep(struct server *srv);
