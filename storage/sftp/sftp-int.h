#pragma once

/*
 * The SFTP backend's parts: the URL and its options (sftp-url.c), one SSH
 * session with its host key check and authentication (sftp-conn.c), the
 * operations on a session (sftp-ops.c), and the threads that run them for
 * the loop (sftp.c).
 *
 * libssh2 runs in blocking mode, one session per worker thread, with a
 * timeout on every blocking call: the loop thread never touches a session.
 */

#include "storage/backend.h"

#include <libssh2.h>
#include <libssh2_sftp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SFTP_DEFAULT_PORT 22
#define SFTP_DEFAULT_CONNECTIONS 4
#define SFTP_MAX_CONNECTIONS 64
#define SFTP_DEFAULT_TIMEOUT_MS 30000
#define SFTP_DEFAULT_KEEPALIVE_S 15
/* Prefix of the temporary name a put writes before its rename. */
#define SFTP_TMP_PREFIX ".tmp-"
/* Writes are staged in a buffer of this size, so that libssh2 pipelines them. */
#define SFTP_WRITE_BUF (2u * 1024 * 1024)
#define SFTP_MAX_PATH 1024

struct sftp_opts {
    char user[128];
    char host[256]; /* without the brackets of an IPv6 literal */
    unsigned port;
    char root[SFTP_MAX_PATH]; /* remote directory: absolute, or relative to the home ("/~/x") */
    char key[SFTP_MAX_PATH];  /* private key file; "" tries ssh-agent, then ~/.ssh/id_* */
    char known_hosts[SFTP_MAX_PATH];
    unsigned connections;
    uint32_t timeout_ms;
    unsigned keepalive_s; /* 0: none */
    bool accept_new_host;
};

/* Parses "sftp://USER@HOST[:PORT]/PATH[?k=v&...]". 0, or -EINVAL with *msg. */
int sftp_parse_url(const char *url, struct sftp_opts *o, const char **msg);

/* Open read handles kept per session: packs never change once named, so a
 * read after the first of its pack is one round trip, not three. */
#define SFTP_HANDLE_CACHE 8

struct sftp_cached_handle {
    char key[BACKEND_MAX_KEY];
    LIBSSH2_SFTP_HANDLE *h;
    uint64_t used;
    uint64_t epoch; /* the backend's, when opened */
};

struct sftp_conn {
    int fd;
    LIBSSH2_SESSION *ssh;
    LIBSSH2_SFTP *sftp;
    bool broken; /* a transport error: the session is dropped before the next use */
    struct sftp_cached_handle cache[SFTP_HANDLE_CACHE];
    uint64_t tick;
};

/* Closes the cached read handle of a key (NULL: all of them). */
void sftp_forget_handle(struct sftp_conn *c, const char *key);

/*
 * Connects, checks the host key, authenticates and starts SFTP. 0, or
 * BACKEND_E_UNAVAILABLE when the server cannot be reached (worth retrying),
 * or negative errno when it refuses us (host key, authentication). The
 * reason goes into msg either way.
 */
int sftp_connect(struct sftp_conn *c, const struct sftp_opts *o, char *msg, size_t msg_len);
void sftp_disconnect(struct sftp_conn *c);
/* Reports a failed libssh2 call: a backend status, and the session marked broken if it is. */
int sftp_status(struct sftp_conn *c, int rc);

/* Remote path of a key (or of a key's directory, or a temporary beside it). */
int sftp_path(const struct sftp_opts *o, const char *key, char *out, size_t len);

/* What an operation needs besides its request. */
struct sftp_ctx {
    struct sftp_conn *conn;
    const struct sftp_opts *opts;
    uint8_t *buf; /* SFTP_WRITE_BUF bytes */
    const atomic_bool *cancel;
    atomic_bool *no_fsync; /* set once the server turned fsync@openssh.com down */
    /* Bumped by every delete and overwriting put, on any session: cached read
     * handles opened before it may show an object that is no longer there. */
    atomic_uint_fast64_t *epoch;
    uint64_t *rng;
};

/* One attempt of a request; the backend status. */
int sftp_op_run(struct sftp_ctx *x, struct backend_req *req);
/* mkdir -p of the remote root and removal of leftover temporaries, at open. */
int sftp_prepare_root(struct sftp_ctx *x, char *msg, size_t msg_len);
