#pragma once

/*
 * Client connections: reading and splitting frames, queueing replies, and
 * flow control. A connection stops reading while it has CONN_MAX_INFLIGHT
 * requests in progress, more than CONN_MAX_QUEUED reply bytes waiting for
 * the client, or an add that cannot take more data yet; it resumes when these
 * drain. Connection state belongs to the loop thread alone.
 *
 * Lifetime: a connection is freed when its handle is closed and no request
 * still refers to it (requests hold a reference while worker jobs run).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>
#include <uv.h>

#include "proto/proto.h"

#define CONN_MAX_INFLIGHT 64
#define CONN_MAX_QUEUED (4u * 1024 * 1024)
/* A get stream reads ahead only while less than this is queued for the client. */
#define CONN_STREAM_WINDOW (1024u * 1024)

struct server;
struct conn;
struct request;

struct conn {
    struct server *srv;
    uv_pipe_t pipe;
    struct conn *prev, *next; /* the daemon's list */
    struct conn *pending_next;
    uint8_t *rbuf;
    size_t rpos, rlen, rcap;
    size_t wqueued;
    unsigned inflight;
    unsigned full_adds;
    unsigned refs;
    struct request *reqs;          /* requests in progress */
    struct request *drain_waiters; /* streams waiting for wqueued to drop */
    bool reading, closing, close_after_flush, pending;
    bool eof; /* the client shut down its side: answer what it sent, then close */
    /* Waiting for room in connection memory (conn-budget.c) to grow to budget_ncap. */
    bool budget_wait;
    struct conn *budget_prev, *budget_next;
    size_t budget_ncap;
    uint64_t last_active; /* uv_now() of the last bytes read or reply queued */
};

/* A request in progress; op.h defines the op-specific part. */
struct request {
    struct conn *conn;
    uint64_t id;
    struct request *prev, *next;
    struct request *drain_next;
    bool waiting_drain;
};

/* What a connection hands its frames to (dispatch.h): set by the server, called from here. */
struct conn_handler {
    /* One frame payload, valid during the call only. */
    void (*frame)(struct conn *c, const uint8_t *payload, size_t len);
    /* The connection is going away: detach the request and cancel what can be. */
    void (*abandon)(struct request *req);
    /* True when an add on the connection still expects data frames. */
    bool (*stream_open)(struct conn *c);
    /* A stream that waited for the client to read can continue. */
    void (*drained)(struct request *req);
};

/* server_sweep(): closes the connections stalled on their client past client_timeout. */
void conn_sweep(struct server *srv);
/* Accepts a client on the daemon's listener. */
void conn_accept(struct server *srv, uv_stream_t *listener);
/* A connection went away: while the server stops, the last one runs its `gone`. */
void conn_check_gone(struct server *srv);

/*
 * True while a get or list stream may queue more for the client: less than
 * CONN_STREAM_WINDOW is queued, and connection memory is not past its bound
 * while the client has replies still to read.
 */
bool conn_can_stream(const struct conn *c);
/* Queues a finished frame buffer (taken over, freed after the write). */
void conn_send(struct conn *c, msgpack_sbuffer *frames);
/* Closes the connection (idempotent); in-progress requests are abandoned on a later turn of the
 * loop (so a completion that calls this may still use its own request). */
void conn_close(struct conn *c);
/* Sends what is queued, then closes. */
void conn_close_after_flush(struct conn *c);
/* Re-evaluates flow control after something drained; never processes frames synchronously. */
void conn_kick(struct conn *c);

/* Request bookkeeping for the ops (op.c). */
void conn_request_add(struct conn *c, struct request *req);
void conn_request_remove(struct conn *c, struct request *req);
struct request *conn_request_find(struct conn *c, uint64_t id);
/* Calls the stream back through dispatch_drained() once the queue is below the window. */
void conn_wait_drain(struct conn *c, struct request *req);

void conn_ref(struct conn *c);
void conn_unref(struct conn *c);

/* Runs the frame processing of connections that were kicked (from the daemon's idle handle). */
void conn_run_pending(struct server *srv);

/* ---- reply helpers: a reply frame is a map of `nfields` op fields plus id and ok ---- */

/*
 * A reply frame stays under this many bytes whatever the names, tags and
 * lists in it (a client's frame limit is 1 MiB): a list page ends early, a
 * long list in a reply is cut (PROTOCOL.md says where).
 */
#define REPLY_BUDGET (512u * 1024)

/* The most bytes a msgpack str of `len` bytes takes, its header included. */
static inline size_t reply_str_cost(size_t len)
{
    return len + 5;
}

struct reply {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    size_t start;
};
void reply_begin(struct reply *r, uint64_t id, bool ok, uint32_t nfields);
/* Ends the frame; more frames may follow in the same buffer with reply_next(). */
void reply_end(struct reply *r);
void reply_next(struct reply *r, uint64_t id, bool ok, uint32_t nfields);
void reply_send(struct conn *c, struct reply *r);
void reply_error(struct conn *c, uint64_t id, enum proto_error code, const char *message);
