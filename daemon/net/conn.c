#include "daemon/net/conn.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/net/conn-budget.h"
#include "daemon/net/net-int.h"
#include "daemon/base/log.h"
#include "proto/util.h"

struct write_req {
    uv_write_t w;
    struct conn *conn;
    char *data;
    size_t len;
};

void conn_ref(struct conn *c)
{
    c->refs++;
}

static void rbuf_free(struct conn *c)
{
    size_t cap = c->rcap;

    free(c->rbuf);
    c->rbuf = NULL;
    c->rpos = c->rlen = c->rcap = 0;
    budget_release(c->srv, cap, true);
}

static void conn_free(struct conn *c)
{
    struct server *srv = c->srv;

    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->nconns--;
    budget_forget(c);
    rbuf_free(c);
    free(c);
    conn_check_gone(srv);
}

void conn_unref(struct conn *c)
{
    if (--c->refs == 0)
        conn_free(c);
}

static void on_close(uv_handle_t *h)
{
    struct conn *c = container_of((uv_pipe_t *)h, struct conn, pipe);

    /* Requests still running keep their own reference and drop their replies. */
    while (c->reqs)
        c->srv->handler->abandon(c->reqs);
    conn_unref(c);
}

void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    c->reading = false;
    /*
     * The requests in progress are abandoned in on_close, on a later turn of
     * the loop, not here: conn_close() runs inside a request's completion
     * when its reply cannot be sent, and that request must not be freed
     * under the completion still using it. Until then every reply is dropped
     * (conn_send) and nothing new is read.
     */
    uv_close((uv_handle_t *)&c->pipe, on_close);
}

void conn_close_after_flush(struct conn *c)
{
    c->close_after_flush = true;
    if (c->reading) {
        uv_read_stop((uv_stream_t *)&c->pipe);
        c->reading = false;
    }
    if (c->wqueued == 0)
        conn_close(c);
}

static bool can_process(const struct conn *c)
{
    return !c->closing && !c->close_after_flush && c->inflight < CONN_MAX_INFLIGHT &&
           c->wqueued < CONN_MAX_QUEUED && c->full_adds == 0 && !budget_hold_requests(c);
}

bool conn_can_stream(const struct conn *c)
{
    return c->wqueued < CONN_STREAM_WINDOW && !budget_over(c);
}

static void on_write(uv_write_t *w, int status)
{
    struct write_req *wr = container_of(w, struct write_req, w);
    struct conn *c = wr->conn;

    c->wqueued -= wr->len;
    c->last_active = uv_now(c->srv->loop);
    free(wr->data);
    budget_release(c->srv, wr->len, false);
    free(wr);
    if (status < 0 && status != UV_ECANCELED && !c->closing) {
        log_debug("connection write failed: %s", uv_strerror(status));
        conn_close(c);
    }
    if (!c->closing) {
        if (c->close_after_flush && c->wqueued == 0) {
            conn_close(c);
        } else {
            /* Wake streams that were waiting for the client to catch up. */
            while (c->drain_waiters && conn_can_stream(c)) {
                struct request *req = c->drain_waiters;
                c->drain_waiters = req->drain_next;
                req->waiting_drain = false;
                req->drain_next = NULL;
                c->srv->handler->drained(req);
                if (c->closing)
                    break;
            }
            conn_kick(c);
        }
    }
    conn_unref(c);
}

/*
 * Test-only fault injection: with CAIRN_TEST_FAIL_SEND=N in cairnd's
 * environment, the Nth reply send of the process fails as an allocation
 * failure would (tests/integration/test_hostile.py). Loop thread only.
 */
static bool send_fault(void)
{
    static unsigned long at, sends;
    static bool read_env;

    if (!read_env) {
        const char *v = getenv("CAIRN_TEST_FAIL_SEND");
        at = v ? strtoul(v, NULL, 10) : 0;
        read_env = true;
    }
    return at && ++sends == at;
}

void conn_send(struct conn *c, msgpack_sbuffer *frames)
{
    struct write_req *wr;
    uv_buf_t buf;
    int r;

    if (c->closing || frames->size == 0) {
        msgpack_sbuffer_destroy(frames);
        return;
    }
    c->last_active = uv_now(c->srv->loop);
    wr = send_fault() ? NULL : malloc(sizeof(*wr));
    if (!wr) {
        msgpack_sbuffer_destroy(frames);
        conn_close(c);
        return;
    }
    wr->conn = c;
    wr->len = frames->size;
    wr->data = msgpack_sbuffer_release(frames);
    buf = uv_buf_init(wr->data, (unsigned)wr->len);
    c->srv->metrics.bytes_out += wr->len;
    r = uv_write(&wr->w, (uv_stream_t *)&c->pipe, &buf, 1, on_write);
    if (r < 0) {
        free(wr->data);
        free(wr);
        conn_close(c);
        return;
    }
    c->wqueued += wr->len;
    budget_take(c->srv, wr->len, false);
    conn_ref(c);
}

void conn_wait_drain(struct conn *c, struct request *req)
{
    if (req->waiting_drain)
        return;
    req->waiting_drain = true;
    req->drain_next = c->drain_waiters;
    c->drain_waiters = req;
}

void conn_request_add(struct conn *c, struct request *req)
{
    req->conn = c;
    req->prev = NULL;
    req->next = c->reqs;
    if (c->reqs)
        c->reqs->prev = req;
    c->reqs = req;
    c->inflight++;
    conn_ref(c);
}

void conn_request_remove(struct conn *c, struct request *req)
{
    if (req->waiting_drain) {
        struct request **p = &c->drain_waiters;
        while (*p && *p != req)
            p = &(*p)->drain_next;
        if (*p)
            *p = req->drain_next;
        req->waiting_drain = false;
    }
    if (req->prev)
        req->prev->next = req->next;
    else
        c->reqs = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
    c->inflight--;
    if (c->srv->stopping && c->inflight == 0 && !c->closing)
        conn_close_after_flush(c);
    else
        conn_kick(c);
    conn_unref(c);
}

struct request *conn_request_find(struct conn *c, uint64_t id)
{
    for (struct request *r = c->reqs; r; r = r->next) {
        if (r->id == id)
            return r;
    }
    return NULL;
}

/* Splits and dispatches the complete frames in the buffer while flow control allows. */
static void process_frames(struct conn *c)
{
    /*
     * Nothing buffered: a frame dispatched in an earlier pass kicked the
     * connection while frames were left, and that pass then took them all
     * and freed the buffer. (c->rbuf + 0 on NULL is undefined behaviour.)
     */
    if (!c->rbuf)
        return;
    conn_ref(c); /* a dispatched frame may close the connection */
    while (can_process(c)) {
        const uint8_t *payload;
        size_t plen, consumed;
        int r = proto_frame_split(c->rbuf + c->rpos, c->rlen - c->rpos, PROTO_MAX_FRAME, &payload,
                                  &plen, &consumed);
        if (r == PROTO_FRAME_NEED_MORE)
            break;
        if (r == PROTO_FRAME_TOO_LARGE) {
            log_info("closing a connection that sent a %zu-byte frame", plen);
            reply_error(c, 0, PROTO_E_TOO_LARGE, "frame larger than 1048576 bytes");
            conn_close_after_flush(c);
            break;
        }
        if (r == PROTO_FRAME_EMPTY) {
            reply_error(c, 0, PROTO_E_BAD_FRAME, "empty frame");
            conn_close_after_flush(c);
            break;
        }
        c->rpos += consumed;
        budget_frame_done(c);
        c->srv->handler->frame(c, payload, plen);
    }
    if (!c->closing && c->rbuf) {
        /* Keep only the partial frame; free the buffer when it is empty. */
        if (c->rpos == c->rlen) {
            rbuf_free(c);
        } else if (c->rpos > 0) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
            /* Others wait for room: give back what the partial frame does not use. */
            if (c->srv->budget_head && c->rcap > CONN_READ_SIZE && c->rlen <= c->rcap / 2) {
                size_t ncap = c->rlen > CONN_READ_SIZE ? c->rlen : CONN_READ_SIZE;
                uint8_t *shrunk = realloc(c->rbuf, ncap);
                if (shrunk) {
                    size_t freed = c->rcap - ncap;
                    c->rbuf = shrunk;
                    c->rcap = ncap;
                    budget_release(c->srv, freed, true);
                }
            }
        }
    }
    conn_unref(c);
}

static void set_reading(struct conn *c, bool on);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = container_of((uv_pipe_t *)h, struct conn, pipe);
    struct server *srv = c->srv;
    size_t have = c->rlen - c->rpos, want = CONN_READ_SIZE, frame_cap = 0;

    (void)suggested;
    /* Room toward the frame being received, doubling with what has arrived. */
    if (have >= 4) {
        uint32_t n = proto_be32_read(c->rbuf + c->rpos);
        if (n <= PROTO_MAX_FRAME && n + 4 > have) {
            size_t need = n + 4 - have, step = need < have ? need : have;
            frame_cap = c->rpos + n + 4;
            if (step > want)
                want = step;
        }
    }
    *buf = uv_buf_init(NULL, 0);
    if (c->rcap - c->rlen < want) {
        /* 0: no room, in line for it (on_read stops reading). */
        size_t ncap = budget_room(c, c->rlen + want, frame_cap);
        if (ncap == 0)
            return;
        if (ncap > c->rcap) {
            uint8_t *grown = realloc(c->rbuf, ncap);
            if (!grown)
                return;
            budget_take(srv, ncap - c->rcap, true);
            c->rbuf = grown;
            c->rcap = ncap;
        }
    }
    *buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = container_of((uv_pipe_t *)s, struct conn, pipe);

    if (nread == UV_EOF) {
        /* Requests already received still get their replies (a half-closed client waits for them).
         */
        c->eof = true;
        set_reading(c, false);
        conn_kick(c);
        return;
    }
    if (nread == UV_ENOBUFS && c->budget_wait) {
        /* Connection memory is full: budget_wake() resumes this one. */
        set_reading(c, false);
        return;
    }
    if (nread < 0) {
        log_debug("connection read failed: %s", uv_strerror((int)nread));
        conn_close(c);
        return;
    }
    if (nread == 0)
        return;
    c->last_active = uv_now(c->srv->loop);
    c->rlen += (size_t)nread;
    c->srv->metrics.bytes_in += (uint64_t)nread;
    process_frames(c);
    if (!c->closing)
        conn_kick(c);
}

static void set_reading(struct conn *c, bool on)
{
    if (on && c->eof)
        on = false;
    if (on == c->reading)
        return;
    if (on) {
        if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0) {
            conn_close(c);
            return;
        }
    } else {
        uv_read_stop((uv_stream_t *)&c->pipe);
    }
    c->reading = on;
}

static bool has_frame(const struct conn *c)
{
    const uint8_t *payload;
    size_t plen, consumed;
    return c->rbuf && proto_frame_split(c->rbuf + c->rpos, c->rlen - c->rpos, PROTO_MAX_FRAME,
                                        &payload, &plen, &consumed) != PROTO_FRAME_NEED_MORE;
}

static void on_pending_idle(uv_idle_t *h)
{
    conn_run_pending(container_of(h, struct server, pending_idle));
}

void conn_kick(struct conn *c)
{
    struct server *srv = c->srv;

    if (c->closing || c->close_after_flush)
        return;
    if (!can_process(c)) {
        set_reading(c, false);
        return;
    }
    if (c->eof && !has_frame(c)) {
        /* Nothing more can arrive: an add still waiting for data never completes. */
        if (c->srv->handler->stream_open(c))
            conn_close(c);
        else if (c->inflight == 0)
            conn_close_after_flush(c);
        return;
    }
    if (has_frame(c)) {
        /* Process on the next loop turn, never from inside someone's callback. */
        set_reading(c, false);
        if (!c->pending) {
            c->pending = true;
            conn_ref(c);
            c->pending_next = srv->pending;
            srv->pending = c;
            uv_idle_start(&srv->pending_idle, on_pending_idle);
        }
        return;
    }
    set_reading(c, !c->budget_wait);
}

void conn_run_pending(struct server *srv)
{
    struct conn *list = srv->pending;

    srv->pending = NULL;
    while (list) {
        struct conn *c = list;
        list = c->pending_next;
        c->pending = false;
        c->pending_next = NULL;
        if (!c->closing) {
            process_frames(c);
            conn_kick(c);
        }
        conn_unref(c);
    }
    if (!srv->pending)
        uv_idle_stop(&srv->pending_idle);
}

static bool peer_allowed(struct conn *c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return false;
    if (cred.uid != getuid()) {
        log_warn("refused a connection from uid %u (pid %d)", (unsigned)cred.uid, (int)cred.pid);
        return false;
    }
    return true;
}

/*
 * At the connection limit, a new client of the user takes the place of the
 * connection that has been idle longest (no request, no partial frame, no
 * reply unsent, nothing for CONN_EVICT_IDLE_MS): thousands of connections
 * left open and silent must not lock every other client out. False when
 * every connection is busy.
 */
#define CONN_EVICT_IDLE_MS 1000

static bool evict_idlest(struct server *srv, struct conn *newcomer)
{
    uint64_t now = uv_now(srv->loop);
    struct conn *idlest = NULL;

    for (struct conn *c = srv->conns; c; c = c->next) {
        if (c == newcomer || c->closing || c->reqs || c->inflight || c->wqueued ||
            c->rlen > c->rpos || now - c->last_active < CONN_EVICT_IDLE_MS)
            continue;
        if (!idlest || c->last_active < idlest->last_active)
            idlest = c;
    }
    if (!idlest)
        return false;
    log_info("connection limit (%u) reached; closing the connection idle longest (%" PRIu64
             " s) for a new client",
             srv->max_connections, (now - idlest->last_active) / 1000);
    conn_close(idlest);
    return true;
}

/*
 * What a connection waits for from its client: to read what was sent, or
 * (while the daemon is reading, not holding it back) the rest of a frame
 * or of an add. NULL when it waits for nothing the client owes.
 */
static const char *stalled_on(struct conn *c)
{
    if (c->wqueued > 0 || c->drain_waiters)
        return "did not read its replies";
    if (c->reading && c->rlen > c->rpos)
        return "stopped in the middle of a frame";
    if (c->reading && c->srv->handler->stream_open(c))
        return "stopped sending an add";
    return NULL;
}

void conn_sweep(struct server *srv)
{
    uint64_t now = uv_now(srv->loop);
    const char *why;

    if (srv->client_timeout_ms == 0)
        return;
    for (struct conn *c = srv->conns; c; c = c->next) {
        if (c->closing || now - c->last_active < srv->client_timeout_ms || !(why = stalled_on(c)))
            continue;
        log_info("closed a connection whose client %s for %" PRIu64 " s (client_timeout)", why,
                 (now - c->last_active) / 1000);
        conn_close(c);
    }
}

void conn_accept(struct server *srv, uv_stream_t *listener)
{
    struct conn *c = calloc(1, sizeof(*c));

    if (!c) {
        log_error("out of memory accepting a connection");
        return;
    }
    c->srv = srv;
    c->refs = 1; /* the handle */
    if (uv_pipe_init(srv->loop, &c->pipe, 0) < 0) {
        free(c);
        return;
    }
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    c->last_active = uv_now(srv->loop);
    if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0) {
        conn_close(c);
        return;
    }
    /* First: another uid must not even make room for itself. */
    if (!peer_allowed(c)) {
        conn_close(c);
        return;
    }
    srv->metrics.accepted++;
    if (srv->nconns > srv->max_connections && !evict_idlest(srv, c)) {
        log_warn("connection limit (%u) reached; refusing a client", srv->max_connections);
        reply_error(c, 0, PROTO_E_BUSY, "too many connections");
        conn_close_after_flush(c);
        return;
    }
    conn_kick(c);
}

void reply_begin(struct reply *r, uint64_t id, bool ok, uint32_t nfields)
{
    msgpack_sbuffer_init(&r->sbuf);
    msgpack_packer_init(&r->pk, &r->sbuf, msgpack_sbuffer_write);
    reply_next(r, id, ok, nfields);
}

void reply_next(struct reply *r, uint64_t id, bool ok, uint32_t nfields)
{
    proto_frame_begin(&r->sbuf, &r->start);
    msgpack_pack_map(&r->pk, nfields + 2);
    proto_pack_cstr(&r->pk, "id");
    msgpack_pack_uint64(&r->pk, id);
    proto_pack_cstr(&r->pk, "ok");
    proto_pack_bool(&r->pk, ok);
}

void reply_end(struct reply *r)
{
    proto_frame_end(&r->sbuf, r->start);
}

void reply_send(struct conn *c, struct reply *r)
{
    reply_end(r);
    conn_send(c, &r->sbuf);
}

void reply_error(struct conn *c, uint64_t id, enum proto_error code, const char *message)
{
    struct reply r;
    if ((unsigned)code < PROTO_E_COUNT_)
        c->srv->metrics.errors[code]++;
    reply_begin(&r, id, false, 1);
    proto_pack_error(&r.pk, code, message);
    reply_send(c, &r);
}

void conn_check_gone(struct server *srv)
{
    if (srv->stopping && srv->nconns == 0 && srv->nscrapes == 0 && srv->gone) {
        void (*gone)(void *ctx) = srv->gone;
        srv->gone = NULL;
        gone(srv->gone_ctx);
    }
}
