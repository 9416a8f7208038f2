#pragma once

/*
 * Request dispatch: turns one decoded frame into an operation (hello, add,
 * data, get, delete, list, stat, status), validates every field against the
 * limits in PROTOCOL.md, runs the operation through the store or the
 * database, and builds the replies. Nothing here blocks: database work and
 * content processing run on worker threads and complete on the loop.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conn;
struct conn_handler;
struct request;

/* The functions below, as a connection calls them. */
extern const struct conn_handler dispatch_handler;

/* Handles one frame payload; the payload is only valid during the call. */
void dispatch_frame(struct conn *c, const uint8_t *payload, size_t len);
/* The connection is going away: detach the request and cancel what can be. */
void dispatch_abandon(struct request *req);
/* True when an add on the connection still expects data frames. */
bool dispatch_stream_open(struct conn *c);
/* A stream that waited for the client to read can continue. */
void dispatch_drained(struct request *req);
