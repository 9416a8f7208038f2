#pragma once

/*
 * The client's state, shared by the files of the client module (the
 * connection in client.c, the operations in ops.c) and by nothing else: users
 * of the library see an opaque struct client.
 */

#include <sys/types.h>

#include "client/client.h"

struct client {
    int fd; /* -1 once a connection error closed it */
    uint64_t next_id;

    /* Frames being built; frame_start is where the open frame's prefix is. */
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    size_t frame_start;
    bool frame_open;
    bool oom;      /* the send buffer could not grow: the frames are incomplete */
    bool oversize; /* a buffered frame is over PROTO_MAX_FRAME */

    /* Received bytes: rbuf[rpos..rpos+rlen) are unconsumed, and the first
     * `consumed` of them are the frame `msg` was parsed from. */
    uint8_t *rbuf;
    size_t rpos, rlen, consumed;
    struct proto_msg msg;

    /* Content read from an input fd, PROTO_MAX_DATA plus one lookahead byte. */
    uint8_t *iobuf;

    struct client_error error;

    /* The daemon as SO_PEERCRED named it when the connection was made. */
    bool peer_known;
    pid_t peer_pid;
    uid_t peer_uid;

    /* Content bytes sent (add) or received (get), as they go; see client_set_progress. */
    client_progress_fn *progress;
    void *progress_data;
    /* gc's and verify's progress frames; see client_set_job_progress. */
    client_job_progress_fn *job_progress;
    void *job_progress_data;
};

/* Records a local read or write failure; returns CLIENT_E_IO. */
int client_io_error(struct client *c, int errnum);
/* Closes the socket, abandoning whatever request is in progress on it. */
void client_disconnect(struct client *c);
