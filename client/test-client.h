#pragma once

/*
 * Helpers shared by the unit tests of the client library and the CLI, one
 * program in four files: test-client-helpers.c (the helpers that need no
 * daemon: -m, UTF-8 and mime, paths, output), test-client.c (connecting,
 * replies, get and list streams, frame limits) and test-client-add.c (add's
 * upload streams) over the scripted peer of test-client-peer.c: a thread on a
 * socketpair that reads raw frames and answers with hand-built ones, so the
 * client's own handling of partial reads, stray ids, streams, early errors
 * and hang-ups is what is being tested.
 */

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "client/cli.h"

/* A frame the peer received, as it recorded it. */
struct peer_frame {
    char op[16];
    uint64_t id;
    bool more, has_size;
    uint64_t size;
    size_t data_len;
    char mime[32];
};

/* A scripted peer on a socketpair: `script` runs on its thread and answers the client. */
struct peer {
    int fd;
    int client_fd;
    void (*script)(struct peer *p);
    pthread_t thread;
    const uint8_t *content; /* what a get streams */
    size_t content_len;
    /* What the peer saw, checked by the test once the thread is joined. */
    struct peer_frame frames[16];
    int n_frames;
    uint8_t *received; /* reassembled add content */
    size_t received_len;
    msgpack_sbuffer out;
    msgpack_packer pk;
};

/* Reads one frame and records it; false at end of stream. */
bool peer_recv(struct peer *p, struct peer_frame *f);
/* Starts a reply frame in p->out: a map with id, ok and `nfields` more entries. */
size_t peer_reply_begin(struct peer *p, uint64_t id, bool ok, uint32_t nfields);
/* Adds a whole error reply to p->out. */
void peer_reply_error(struct peer *p, uint64_t id, enum proto_error code);
/* Sends what p->out holds in `piece`-byte writes, so frames arrive split. */
void peer_flush(struct peer *p, size_t piece);
/* Runs `script` on a thread at one end of a socketpair; returns a client at the other. */
struct client *peer_start(struct peer *p, void (*script)(struct peer *p));
/* Waits for the script to end. Leaves p->received for the test to check and free. */
void peer_join(struct peer *p);

/* Content with a pattern, so a misplaced piece shows. */
uint8_t *test_pattern(size_t len);

/* The groups of the other files; each returns its number of failures. */
int test_client_helpers_run(void);
int test_client_add_run(void);
