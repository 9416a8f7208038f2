#pragma once

/*
 * Connection memory. Every read buffer and every queued reply counts against
 * [daemon] connection_memory. A connection holding nothing may always take
 * CONN_RESERVE_READ for its first read, bound or not (max_connections of
 * them at most), so a new client can still send a request however many
 * others hold the rest: a reserve shared by all could be used up by the
 * holders themselves. A connection that finds no room for the bytes it is
 * sent stops being read and waits in line. While the bound is passed, one
 * whose replies are still queued takes no new request and streams no
 * further until its client reads (so each connection may have one reply
 * frame queued past the bound, no more). Growth follows what arrives
 * (doubling), so a frame header alone costs nothing. Whoever holds memory
 * and does not move is closed by client_timeout.
 *
 * When all that read buffers hold is held by connections waiting in line,
 * nothing would ever be given back: the first in line may then grow past
 * the bound to finish its frame. One connection at a time, so the bound is
 * passed by one frame (1 MiB) at most.
 */

#include <stdbool.h>
#include <stddef.h>

struct conn;
struct server;

#define CONN_READ_SIZE (64u * 1024)
#define CONN_RESERVE_READ (16u * 1024)

/*
 * The capacity c's read buffer may grow to, wanting ncap (frame_cap: where
 * its current frame ends, 0 when not known): ncap, or more for the one
 * finishing its frame past the bound, or the capacity it has when only that
 * fits, or 0: it has been put in line (reading must stop; budget_wake()
 * resumes it).
 */
size_t budget_room(struct conn *c, size_t ncap, size_t frame_cap);
/* A frame of c was taken whole out of its buffer. */
void budget_frame_done(struct conn *c);
/* Past the bound while the client still has replies to read: stream no further. */
bool budget_over(const struct conn *c);
/* Past the bound while c has a request in progress or replies unread: take no new request. */
bool budget_hold_requests(const struct conn *c);
/* c goes away: out of line, and no longer the one finishing its frame. */
void budget_forget(struct conn *c);
/* n bytes of a read buffer (read) or of a queued reply were taken, given back. */
void budget_take(struct server *srv, size_t n, bool read);
void budget_release(struct server *srv, size_t n, bool read);
