/* The connection: connecting, sending request frames, receiving reply frames. */

#include "client/client.h"
#include "client/util.h"
#include "client/internal.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* Room for the largest frame the daemon may send, length prefix included. */
#define RECV_CAP ((size_t)PROTO_MAX_FRAME + 4)

/* Packer sink: remembers an allocation failure so client_send() can report it. */
static int sbuf_write(void *data, const char *bytes, size_t len)
{
    struct client *c = data;

    if (msgpack_sbuffer_write(&c->sbuf, bytes, len) < 0) {
        c->oom = true;
        return -1;
    }
    return 0;
}

int client_adopt(struct client **out, int fd)
{
    struct client *c = calloc(1, sizeof(*c));

    if (!c)
        return -ENOMEM;
    c->fd = fd;
    c->next_id = 1;
    {
        struct ucred cred;
        socklen_t len = sizeof(cred);

        c->peer_known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
        c->peer_pid = c->peer_known ? cred.pid : 0;
        c->peer_uid = c->peer_known ? cred.uid : 0;
    }
    msgpack_sbuffer_init(&c->sbuf);
    msgpack_packer_init(&c->pk, c, sbuf_write);
    msgpack_unpacked_init(&c->msg.unpacked);
    *out = c;
    return 0;
}

static int set_send_timeout(int fd, int timeout_ms)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};

    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ? -errno : 0;
}

/* Why the last client_connect() of this thread returned -EPERM. */
static _Thread_local char refusal[PATH_MAX + 256];

const char *client_refusal(void)
{
    return refusal;
}

/*
 * Whoever may write the socket's directory may move the daemon's socket
 * aside and answer in its place (and be sent every document), so such a
 * directory is refused before anything is sent, the way cairnd refuses to
 * listen there. A missing one is -ENOENT: nobody listens, and a daemon
 * started now makes it.
 */
static int check_socket_dir(const char *path)
{
    char dir[sizeof(((struct sockaddr_un *)NULL)->sun_path)], why[PATH_MAX + 128];
    const char *slash = strrchr(path, '/');
    int r;

    if (!slash || slash == path)
        return 0;
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    r = util_check_dir(dir, true, why, sizeof(why));
    if (r == -ENOENT)
        return r;
    if (r < 0) {
        snprintf(refusal, sizeof(refusal), "refusing the socket directory: %s", why);
        return -EPERM;
    }
    return 0;
}

/*
 * The daemon must run as this user: any other could keep or change what it
 * is sent. Root passes: on a socket systemd passed, SO_PEERCRED names the
 * process that called listen(), PID 1, and root could read everything anyway.
 */
static int check_peer(int fd, const char *path)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -errno;
    if (cred.uid != geteuid() && cred.uid != 0) {
        snprintf(refusal, sizeof(refusal),
                 "refusing the daemon on %s: it runs as uid %u, not as this user (uid %u)", path,
                 (unsigned)cred.uid, (unsigned)geteuid());
        return -EPERM;
    }
    return 0;
}

int client_connect(struct client **out, const char *path, int timeout_ms)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    _cleanup_close_ int fd = -1;
    int r;

    refusal[0] = '\0';
    if (len >= sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    memcpy(addr.sun_path, path, len + 1);
    if ((r = check_socket_dir(path)) < 0)
        return r;
    /* With stdout closed the socket would be fd 1, and get would send content to the daemon. */
    fd = util_fd_above_stdio(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd < 0)
        return -errno;
    /*
     * Linux bounds a blocking AF_UNIX connect() to a full backlog by the send
     * timeout, which saves a non-blocking connect and a poll loop. The timeout
     * is cleared afterwards: a daemon applying backpressure to a long add is
     * slow, not gone.
     */
    if (timeout_ms > 0 && (r = set_send_timeout(fd, timeout_ms)) < 0)
        return r;
    while (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        if (errno == EINTR)
            continue;
        if (errno == EISCONN)
            break;
        return errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -errno;
    }
    if (timeout_ms > 0 && (r = set_send_timeout(fd, 0)) < 0)
        return r;
    if ((r = check_peer(fd, path)) < 0)
        return r;
    r = client_adopt(out, fd);
    if (r == 0)
        fd = -1; /* consumed */
    return r;
}

struct client *client_free(struct client *c)
{
    if (!c)
        return NULL;
    client_disconnect(c);
    proto_msg_deinit(&c->msg);
    msgpack_sbuffer_destroy(&c->sbuf);
    free(c->rbuf);
    free(c->iobuf);
    free(c);
    return NULL;
}

void client_disconnect(struct client *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

bool client_peer(const struct client *c, pid_t *pid, uid_t *uid)
{
    *pid = c->peer_pid;
    *uid = c->peer_uid;
    return c->peer_known;
}

int client_wait_closed(struct client *c, int timeout_ms)
{
    uint8_t scratch[4096];
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};

    while (c->fd >= 0) {
        int n = poll(&pfd, 1, timeout_ms);
        ssize_t got;

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ETIMEDOUT;
        got = recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0)
            break; /* the end, or ECONNRESET: closed either way */
    }
    client_disconnect(c);
    return 0;
}

bool client_connected(const struct client *c)
{
    return c->fd >= 0;
}

const struct client_error *client_error(const struct client *c)
{
    return &c->error;
}

int client_io_error(struct client *c, int errnum)
{
    c->error.errnum = errnum;
    return CLIENT_E_IO;
}

/* Any error that leaves the stream out of step ends the connection. */
static int fail(struct client *c, int r)
{
    client_disconnect(c);
    return r;
}

/* --- sending --- */

/* `trailing` counts bytes of the frame that are sent from outside the buffer. */
static void end_frame(struct client *c, size_t trailing)
{
    size_t len = c->sbuf.size - c->frame_start - 4 + trailing;

    /* A larger frame makes the daemon drop the connection; fail it here instead. */
    if (len > PROTO_MAX_FRAME)
        c->oversize = true;
    else if (!c->oom)
        proto_be32_write((uint8_t *)c->sbuf.data + c->frame_start, (uint32_t)len);
    c->frame_open = false;
}

static void begin_frame(struct client *c, uint64_t id, const char *op, uint32_t nfields)
{
    if (c->frame_open)
        end_frame(c, 0);
    if (proto_frame_begin(&c->sbuf, &c->frame_start) < 0)
        c->oom = true;
    c->frame_open = true;
    msgpack_pack_map(&c->pk, nfields + 2);
    proto_pack_cstr(&c->pk, "id");
    msgpack_pack_uint64(&c->pk, id);
    proto_pack_cstr(&c->pk, "op");
    proto_pack_cstr(&c->pk, op);
}

uint64_t client_begin(struct client *c, const char *op, uint32_t nfields)
{
    uint64_t id = c->next_id++;

    begin_frame(c, id, op, nfields);
    return id;
}

void client_continue(struct client *c, uint64_t id, uint32_t nfields)
{
    begin_frame(c, id, "data", nfields);
}

msgpack_packer *client_packer(struct client *c)
{
    return &c->pk;
}

/* Writes all of iov[0..n), resuming after partial writes and signals. */
static int send_all(int fd, struct iovec *iov, int n)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};

    while (mh.msg_iovlen > 0) {
        /* MSG_NOSIGNAL: a daemon that hangs up is an error to report, not a signal. */
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno == EPIPE ? -ECONNRESET : -errno;
        }
        while (mh.msg_iovlen > 0 && (size_t)w >= mh.msg_iov->iov_len) {
            w -= (ssize_t)mh.msg_iov->iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov->iov_base = (uint8_t *)mh.msg_iov->iov_base + w;
            mh.msg_iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int flush(struct client *c, const void *data, size_t len)
{
    struct iovec iov[2] = {
        {.iov_base = c->sbuf.data, .iov_len = c->sbuf.size},
        {.iov_base = (void *)data, .iov_len = len},
    };
    int r = c->oom ? -ENOMEM : c->oversize ? -EMSGSIZE : c->fd < 0 ? -ENOTCONN : 0;

    /* The buffer is emptied whatever happens, so a failed request never leaks
     * part of a frame into the next one. */
    msgpack_sbuffer_clear(&c->sbuf);
    c->oom = c->oversize = false;
    if (r < 0)
        return r;
    r = send_all(c->fd, iov, len > 0 ? 2 : 1);
    return r < 0 ? fail(c, r) : 0;
}

int client_send(struct client *c)
{
    if (c->frame_open)
        end_frame(c, 0);
    return flush(c, NULL, 0);
}

int client_send_data(struct client *c, const void *data, size_t len)
{
    proto_pack_cstr(&c->pk, "data");
    msgpack_pack_bin(&c->pk, len);
    end_frame(c, len);
    return flush(c, data, len);
}

/* --- receiving --- */

/*
 * Reads what the socket has; 0, or -EAGAIN when !wait and nothing is there.
 * Unconsumed bytes move to the front only when the frame they start would not
 * fit behind them, so a stream of large frames is rarely copied.
 */
static int fill(struct client *c, bool wait)
{
    size_t need = c->rlen >= 4 ? 4 + (size_t)proto_be32_read(c->rbuf + c->rpos) : 4;

    if (c->rlen == 0) {
        c->rpos = 0;
    } else if (c->rpos + need > RECV_CAP) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen);
        c->rpos = 0;
    }
    for (;;) {
        uint8_t *end = c->rbuf + c->rpos + c->rlen;
        ssize_t n = recv(c->fd, end, RECV_CAP - c->rpos - c->rlen, wait ? 0 : MSG_DONTWAIT);
        if (n > 0) {
            c->rlen += (size_t)n;
            return 0;
        }
        if (n == 0)
            return -ECONNRESET; /* the daemon hung up, maybe in the middle of a reply */
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return wait ? -ETIMEDOUT : -EAGAIN;
        return -errno;
    }
}

/* Parses the next frame into c->msg, reading as needed. */
static int next_frame(struct client *c, bool wait)
{
    const uint8_t *payload;
    size_t len, consumed;
    int r;

    /* The previous frame stayed in the buffer while the caller looked at it. */
    proto_msg_deinit(&c->msg);
    c->rpos += c->consumed;
    c->rlen -= c->consumed;
    c->consumed = 0;
    if (c->fd < 0)
        return -ENOTCONN;
    if (!c->rbuf && !(c->rbuf = malloc(RECV_CAP)))
        return -ENOMEM;
    while ((r = proto_frame_split(c->rbuf + c->rpos, c->rlen, PROTO_MAX_FRAME, &payload, &len,
                                  &consumed)) == PROTO_FRAME_NEED_MORE) {
        r = fill(c, wait);
        if (r == -EAGAIN)
            return r;
        if (r < 0)
            return fail(c, r);
    }
    if (r != 0 || proto_msg_parse(&c->msg, payload, len) < 0)
        return fail(c, -EBADMSG);
    c->consumed = consumed;
    return 0;
}

static void copy_str(char *dst, size_t size, const char *src, size_t len)
{
    if (len >= size)
        len = size - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* Records the `error` map of a failed reply. */
static int daemon_error(struct client *c, const msgpack_object *reply)
{
    const msgpack_object *err = proto_map_get(reply, "error");
    const char *code = "internal", *msg = NULL;
    size_t code_len = strlen(code), msg_len = 0;

    proto_get_str(err, "code", &code, &code_len);
    if (proto_get_str(err, "message", &msg, &msg_len) != 0 || msg_len == 0) {
        msg = code;
        msg_len = code_len;
    }
    c->error.code = proto_error_from_name(code, code_len);
    copy_str(c->error.code_name, sizeof(c->error.code_name), code, code_len);
    copy_str(c->error.message, sizeof(c->error.message), msg, msg_len);
    return CLIENT_E_DAEMON;
}

static int await(struct client *c, uint64_t id, const msgpack_object **reply, bool wait)
{
    for (;;) {
        uint64_t frame_id;
        bool ok = true;
        int r = next_frame(c, wait);

        if (r < 0)
            return r;
        if (proto_get_uint(c->msg.map, "id", &frame_id) != 0 ||
            proto_get_bool(c->msg.map, "ok", &ok) < 0)
            return fail(c, -EBADMSG);
        if (frame_id != id && frame_id != 0)
            continue;
        *reply = c->msg.map;
        /*
         * `ok` is read as true when absent: PROTOCOL.md lists it for every
         * reply but shows stream continuations with only `data` and `more`.
         */
        return ok ? 0 : daemon_error(c, c->msg.map);
    }
}

int client_await(struct client *c, uint64_t id, const msgpack_object **reply)
{
    return await(c, id, reply, true);
}

int client_poll(struct client *c, uint64_t id, const msgpack_object **reply)
{
    return await(c, id, reply, false);
}

int client_await_next(struct client *c, uint64_t *id, const msgpack_object **reply)
{
    bool ok = true;
    int r = next_frame(c, true);

    if (r < 0)
        return r;
    if (proto_get_uint(c->msg.map, "id", id) != 0 || proto_get_bool(c->msg.map, "ok", &ok) < 0)
        return fail(c, -EBADMSG);
    *reply = c->msg.map;
    return ok ? 0 : daemon_error(c, c->msg.map);
}
