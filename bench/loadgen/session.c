/*
 * Clients and their daemon connections on the libuv loop. A client is one
 * closed loop: it keeps up to `pipeline` requests in flight on its connection
 * and sends the next one as soon as one finishes. In the external_agent_churn
 * profile a client hangs up after a few requests and connects again, and each
 * connect is measured as an op of its own. The client loop here also drives
 * the mcp transport (mcp.c) through lg_mcp_open() and lg_mcp_fill().
 *
 * Latency is measured from the moment a request is handed to the socket to
 * the reply frame that finishes it (the last frame of a get's stream).
 */

#include "bench/loadgen/loadgen.h"
#include "proto/util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct lg_pending {
    struct lg_pending *next;
    uint64_t id;
    enum lg_op op;
    uint64_t start_ns;
    unsigned seed_index;
};

struct lg_conn {
    uv_pipe_t pipe;
    uv_connect_t connect_req;
    struct lg_client *client; /* NULL once the client let go of it */
    struct client_decoder dec;
    struct lg_pending *pending;
    unsigned outstanding;
    uint64_t next_id;
    uint64_t connect_ns;
    unsigned session_left; /* requests before hanging up */
    bool connected;
};

#define CONNECT_RETRY_MS 10

struct write_buf {
    uv_write_t req;
    msgpack_sbuffer sbuf;
};

static void client_next(struct lg_client *c);
static void conn_fill(struct lg_conn *conn);
static void count_hits(struct lg_run *run, const msgpack_object *reply);

void lg_record(struct lg_run *run, enum lg_op op, uint64_t start_ns, unsigned error)
{
    struct lg_op_stats *st = &run->stats[op];

    st->count++;
    lg_hist_record(&st->latency, uv_hrtime() - start_ns);
    if (error) {
        st->failures++;
        st->errors[error < LG_ERR_COUNT_ ? error : PROTO_E_INTERNAL]++;
    }
}

static void record(struct lg_run *run, enum lg_op op, uint64_t start_ns, unsigned error,
                   const msgpack_object *reply)
{
    lg_record(run, op, start_ns, error);
    if (!error && op == LG_OP_SEARCH)
        count_hits(run, reply);
}

/* --- the phase's end --- */

static void on_deadline_closed(uv_handle_t *h)
{
}

static void start_clients(struct lg_run *run);

/* Whether the client's session is up: connected, or (mcp) past its handshake. */
static bool client_ready(const struct lg_client *c)
{
    return (c->conn && c->conn->connected) || (c->mcp && lg_mcp_ready(c->mcp));
}

/*
 * Clients of a steady profile all connect before the clock starts, so the
 * measured phase has every client busy from its first request on.
 */
static void maybe_start(struct lg_run *run)
{
    if (run->start_ns != 0)
        return;
    for (unsigned i = 0; i < run->nclients; i++) {
        const struct lg_client *c = &run->clients[i];
        if (!c->finished && !client_ready(c))
            return;
    }
    start_clients(run);
}

static void on_retry_closed(uv_handle_t *h)
{
}

static void client_finish(struct lg_client *c)
{
    struct lg_run *run = c->run;

    if (c->finished)
        return;
    c->finished = true;
    uv_close((uv_handle_t *)&c->retry, on_retry_closed);
    if (--run->running_clients == 0) {
        run->end_ns = uv_hrtime();
        uv_timer_stop(&run->deadline);
        uv_close((uv_handle_t *)&run->deadline, on_deadline_closed);
        return;
    }
    maybe_start(run);
}

bool lg_client_may_issue(const struct lg_client *c)
{
    const struct lg_run *run = c->run;

    if (run->fatal || run->deadline_passed)
        return false;
    return c->quota == 0 ? run->cfg->duration > 0 : c->issued < c->quota;
}

/* --- connections --- */

static void on_conn_closed(uv_handle_t *h)
{
    struct lg_conn *conn = container_of((uv_pipe_t *)h, struct lg_conn, pipe);

    while (conn->pending) {
        struct lg_pending *p = conn->pending;
        conn->pending = p->next;
        free(p);
    }
    client_decoder_deinit(&conn->dec);
    free(conn);
}

/* Hangs up; requests still open fail with `error` (0 when none can be open). */
static void conn_close(struct lg_conn *conn, unsigned error)
{
    struct lg_client *c = conn->client;

    for (struct lg_pending *p = conn->pending; p; p = p->next) {
        if (c && lg_measuring(c->run))
            record(c->run, p->op, p->start_ns, error ? error : LG_ERR_DISCONNECTED, NULL);
    }
    conn->outstanding = 0;
    if (c) {
        c->conn = NULL;
        conn->client = NULL;
    }
    uv_close((uv_handle_t *)&conn->pipe, on_conn_closed);
}

static void on_write(uv_write_t *req, int status)
{
    struct write_buf *wb = container_of(req, struct write_buf, req);

    /* A failed write also fails the read side, which reports it; only the buffer is ours. */
    msgpack_sbuffer_destroy(&wb->sbuf);
    free(wb);
}

void lg_client_remember(struct lg_client *c, const char *hash, size_t len)
{
    if (len != PROTO_HASH_HEX)
        return;
    if (c->npool == c->cappool) {
        size_t cap = c->cappool ? c->cappool * 2 : 64;
        void *pool = realloc(c->pool, cap * sizeof(*c->pool));
        if (!pool)
            return; /* a document we cannot remember is one we do not delete */
        c->pool = pool;
        c->cappool = cap;
    }
    memcpy(c->pool[c->npool], hash, len);
    c->pool[c->npool][len] = '\0';
    c->npool++;
}

static void complete(struct lg_conn *conn, struct lg_pending *p, const struct client_reply *reply)
{
    struct lg_client *c = conn->client;
    struct lg_run *run = c->run;
    const char *hash = NULL;
    size_t hash_len = 0;
    unsigned error = reply->ok ? 0 : reply->code;

    if (reply->ok && p->op == LG_OP_ADD &&
        (proto_get_str(reply->map, "hash", &hash, &hash_len) != 0 || hash_len != PROTO_HASH_HEX))
        error = LG_ERR_BAD_REPLY;
    if (lg_measuring(run)) {
        record(run, p->op, p->start_ns, error, reply->map);
        if (!error && p->op == LG_OP_ADD && run->cfg->profile != LG_PROFILE_ADD)
            lg_client_remember(c, hash, hash_len);
    } else {
        record(run, p->op, p->start_ns, error, reply->map);
        if (!error) {
            char hex[PROTO_HASH_HEX + 1];
            memcpy(hex, hash, PROTO_HASH_HEX);
            hex[PROTO_HASH_HEX] = '\0';
            lg_workload_set_seeded(run->wl, p->seed_index, hex);
        }
    }
}

static struct lg_pending *take_pending(struct lg_conn *conn, uint64_t id)
{
    for (struct lg_pending **pp = &conn->pending; *pp; pp = &(*pp)->next) {
        if ((*pp)->id == id) {
            struct lg_pending *p = *pp;
            *pp = p->next;
            return p;
        }
    }
    return NULL;
}

static struct lg_pending *find_pending(struct lg_conn *conn, uint64_t id)
{
    for (struct lg_pending *p = conn->pending; p; p = p->next) {
        if (p->id == id)
            return p;
    }
    return NULL;
}

static void count_hits(struct lg_run *run, const msgpack_object *reply)
{
    const msgpack_object *hits = proto_map_get(reply, "hits");

    if (lg_measuring(run) && hits && hits->type == MSGPACK_OBJECT_ARRAY)
        run->stats[LG_OP_SEARCH].search_hits += hits->via.array.size;
}

void lg_client_session_ended(struct lg_client *c, unsigned error)
{
    if (error)
        c->reconnect = true;
    if (!lg_measuring(c->run) && error && !c->run->fatal)
        c->run->fatal = -EPIPE; /* seeding needs every document */
    client_next(c);
}

/* The connection is finished with: hang up, then go on with the client's next step. */
static void conn_done(struct lg_conn *conn, unsigned error)
{
    struct lg_client *c = conn->client;

    conn_close(conn, error);
    lg_client_session_ended(c, error);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct lg_conn *conn = container_of((uv_pipe_t *)h, struct lg_conn, pipe);
    uint8_t *space;
    size_t avail;

    if (client_decoder_space(&conn->dec, &space, &avail) < 0) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = (char *)space;
    buf->len = avail;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct lg_conn *conn = container_of((uv_pipe_t *)stream, struct lg_conn, pipe);
    struct client_reply reply;
    int r;

    if (!conn->client)
        return;
    if (nread == UV_ENOBUFS) {
        conn_done(conn, LG_ERR_LOCAL);
        return;
    }
    if (nread < 0) {
        conn_done(conn, LG_ERR_DISCONNECTED);
        return;
    }
    client_decoder_advance(&conn->dec, (size_t)nread);
    while ((r = client_decoder_next(&conn->dec, &reply)) == 0) {
        struct lg_pending *p;

        /* Frames of a stream (get, search) before its last one: the request lives on. */
        if (!reply.last) {
            p = find_pending(conn, reply.id);
            if (!p) {
                conn_done(conn, LG_ERR_BAD_REPLY);
                return;
            }
            if (p->op == LG_OP_SEARCH)
                count_hits(conn->client->run, reply.map);
            continue;
        }
        p = take_pending(conn, reply.id);
        if (!p) {
            /* id 0 is the daemon failing a frame it could not attribute: our bug or its. */
            conn_done(conn, reply.ok ? LG_ERR_BAD_REPLY : reply.code);
            return;
        }
        conn->outstanding--;
        complete(conn, p, &reply);
        free(p);
    }
    if (r < 0) {
        conn_done(conn, LG_ERR_BAD_REPLY);
        return;
    }
    if (conn->outstanding == 0 && (conn->session_left == 0 || !lg_client_may_issue(conn->client))) {
        conn_done(conn, 0);
        return;
    }
    conn_fill(conn);
}

void lg_client_pick(struct lg_client *c, struct lg_request *req)
{
    struct lg_run *run = c->run;
    double mix[LG_OP_COUNT_], u, acc = 0;

    memset(req, 0, sizeof(*req));
    if (!lg_measuring(run)) {
        req->op = LG_OP_ADD;
        return;
    }
    lg_workload_mix(run->cfg->profile, mix);
    u = (double)(lg_rand(&c->rng) >> 11) / 9007199254740992.0;
    req->op = LG_OP_GET;
    for (unsigned op = 0; op < LG_OP_COUNT_; op++) {
        acc += mix[op];
        if (u < acc && mix[op] > 0) {
            req->op = (enum lg_op)op;
            break;
        }
    }
    /* A client deletes only what it added itself; with nothing to delete it adds instead. */
    if (req->op == LG_OP_DELETE && c->npool == 0)
        req->op = LG_OP_ADD;
    switch (req->op) {
    case LG_OP_GET:
        req->ref = lg_workload_seeded_hash(run->wl, &c->rng);
        break;
    case LG_OP_SEARCH:
        lg_workload_query(run->wl, &c->rng, &req->search);
        break;
    case LG_OP_DELETE: {
        size_t i = lg_rand(&c->rng) % c->npool;
        /* Swap it to the end; the pool entry stays valid until the next add. */
        char tmp[PROTO_HASH_HEX + 1];
        memcpy(tmp, c->pool[i], sizeof(tmp));
        memcpy(c->pool[i], c->pool[c->npool - 1], sizeof(tmp));
        memcpy(c->pool[c->npool - 1], tmp, sizeof(tmp));
        c->npool--;
        req->ref = c->pool[c->npool];
        break;
    }
    default:
        break;
    }
}

/* Sends requests until the pipeline is full; they go out in one write. */
static void conn_fill(struct lg_conn *conn)
{
    struct lg_client *c = conn->client;
    struct lg_run *run = c->run;
    struct write_buf *wb = NULL;
    int r;

    while (conn->outstanding < c->pipeline && conn->session_left > 0 && lg_client_may_issue(c)) {
        struct lg_request req;
        struct lg_pending *p = calloc(1, sizeof(*p));

        if (!wb && (wb = calloc(1, sizeof(*wb))))
            msgpack_sbuffer_init(&wb->sbuf);
        if (!p || !wb) {
            free(p);
            run->fatal = -ENOMEM;
            break;
        }
        lg_client_pick(c, &req);
        p->id = ++conn->next_id;
        p->op = req.op;
        if (req.op == LG_OP_ADD)
            req.unique = run->next_unique++;
        if (!lg_measuring(run)) {
            p->seed_index = c->seed_next;
            req.unique = c->seed_next;
            c->seed_next += run->nclients;
        }
        r = lg_workload_encode(run->wl, &wb->sbuf, p->id, &req, !lg_measuring(run));
        p->start_ns = uv_hrtime();
        c->issued++;
        conn->session_left--;
        if (r < 0) {
            if (lg_measuring(run))
                record(run, p->op, p->start_ns, LG_ERR_LOCAL, NULL);
            else
                run->fatal = r;
            free(p);
            continue;
        }
        p->next = conn->pending;
        conn->pending = p;
        conn->outstanding++;
    }
    /*
     * Even when nothing was built (the deadline passed while this connection
     * was being made), fall through: the check at the end must hang it up.
     */
    if (wb && wb->sbuf.size == 0) {
        msgpack_sbuffer_destroy(&wb->sbuf);
        free(wb);
    } else if (wb) {
        uv_buf_t buf = uv_buf_init(wb->sbuf.data, (unsigned)wb->sbuf.size);
        r = uv_write(&wb->req, (uv_stream_t *)&conn->pipe, &buf, 1, on_write);
        if (r < 0) {
            msgpack_sbuffer_destroy(&wb->sbuf);
            free(wb);
            conn_done(conn, LG_ERR_DISCONNECTED);
            return;
        }
    }
    if (run->fatal) {
        conn_done(conn, LG_ERR_LOCAL);
        return;
    }
    /* Nothing was sent and nothing is awaited: the session or the client is done. */
    if (conn->outstanding == 0)
        conn_done(conn, 0);
}

static void on_retry(uv_timer_t *t)
{
    client_next(container_of(t, struct lg_client, retry));
}

unsigned lg_client_session_ops(const struct lg_client *c)
{
    return lg_churn(c->run) ? c->run->cfg->session_ops : UINT_MAX;
}

void lg_client_connect_failed(struct lg_client *c, uint64_t connect_ns, int status)
{
    struct lg_run *run = c->run;

    /* Every failed connect uses up one request of the quota, so a dead daemon ends the run. */
    if (lg_measuring(run)) {
        lg_record(run, LG_OP_CONNECT, connect_ns, LG_ERR_CONNECT);
        c->issued++;
    } else if (!run->fatal) {
        run->fatal = status < 0 ? status : -ECONNREFUSED;
    }
    c->reconnect = true;
    /* A daemon that is gone would otherwise be hammered with connects. */
    if (lg_client_may_issue(c) && uv_timer_start(&c->retry, on_retry, CONNECT_RETRY_MS, 0) == 0)
        return;
    client_next(c);
}

bool lg_client_connected(struct lg_client *c, uint64_t connect_ns)
{
    struct lg_run *run = c->run;

    if (lg_churn(run) || (lg_measuring(run) && c->reconnect))
        lg_record(run, LG_OP_CONNECT, connect_ns, 0);
    if (run->start_ns == 0) {
        maybe_start(run); /* which sends on every client once the last one is up */
        return false;
    }
    return true;
}

static void on_connect(uv_connect_t *req, int status)
{
    struct lg_conn *conn = container_of(req, struct lg_conn, connect_req);
    struct lg_client *c = conn->client;
    int r;

    if (status == 0 && !c->run->fatal) {
        conn->connected = true;
        r = uv_read_start((uv_stream_t *)&conn->pipe, on_alloc, on_read);
        if (r < 0)
            status = r;
    }
    if (status < 0 || c->run->fatal) {
        uint64_t connect_ns = conn->connect_ns;
        conn_close(conn, LG_ERR_CONNECT);
        lg_client_connect_failed(c, connect_ns, status);
        return;
    }
    conn->session_left = lg_client_session_ops(c);
    if (lg_client_connected(c, conn->connect_ns))
        conn_fill(conn);
}

static void conn_open(struct lg_client *c)
{
    struct lg_conn *conn = calloc(1, sizeof(*conn));
    int r;

    if (!conn || (r = uv_pipe_init(&c->run->loop, &conn->pipe, 0)) < 0) {
        free(conn);
        c->run->fatal = -ENOMEM;
        client_finish(c);
        return;
    }
    client_decoder_init(&conn->dec);
    conn->client = c;
    c->conn = conn;
    conn->connect_ns = uv_hrtime();
    /* Errors, an over-long path included, come to on_connect. */
    uv_pipe_connect(&conn->connect_req, &conn->pipe, c->run->cfg->socket, on_connect);
}

/* After a connection ends: connect again if there is more to do, else finish. */
static void client_next(struct lg_client *c)
{
    if (c->conn || c->mcp)
        return;
    if (!lg_client_may_issue(c))
        client_finish(c);
    else if (lg_measuring(c->run) && c->run->cfg->transport == LG_TRANSPORT_MCP)
        lg_mcp_open(c);
    else
        conn_open(c);
}

static void on_deadline(uv_timer_t *t)
{
    struct lg_run *run = container_of(t, struct lg_run, deadline);

    run->deadline_passed = true;
}

static void start_clients(struct lg_run *run)
{
    run->start_ns = uv_hrtime();
    if (lg_measuring(run) && run->cfg->duration > 0)
        uv_timer_start(&run->deadline, on_deadline, (uint64_t)(run->cfg->duration * 1000), 0);
    for (unsigned i = 0; i < run->nclients; i++) {
        struct lg_client *c = &run->clients[i];
        if (c->conn && c->conn->connected)
            conn_fill(c->conn);
        else if (c->mcp && lg_mcp_ready(c->mcp))
            lg_mcp_fill(c->mcp);
    }
}

int lg_run_phase(struct lg_run *run, enum lg_phase phase, unsigned nclients, uint64_t quota,
                 unsigned pipeline)
{
    unsigned files = run->cfg->files;
    uint64_t begin_ns;
    int r;

    memset(run->stats, 0, sizeof(run->stats));
    run->phase = phase;
    run->start_ns = run->end_ns = 0;
    run->deadline_passed = false;
    run->fatal = 0;
    run->nclients = nclients;
    run->running_clients = nclients;
    run->clients = calloc(nclients, sizeof(*run->clients));
    if (!run->clients)
        return -ENOMEM;
    r = uv_timer_init(&run->loop, &run->deadline);
    if (r < 0) {
        free(run->clients);
        run->clients = NULL;
        return r;
    }
    for (unsigned i = 0; i < nclients; i++) {
        struct lg_client *c = &run->clients[i];
        c->run = run;
        c->index = i;
        c->rng = run->cfg->seed * 0x2545f4914f6cdd1dull + i + 1;
        c->pipeline = pipeline;
        c->seed_next = i;
        uv_timer_init(&run->loop, &c->retry);
        /* Seeding splits the documents between clients: client i adds i, i+n, i+2n, ... */
        c->quota = phase == LG_PHASE_SEED ? files / nclients + (i < files % nclients) : quota;
    }
    begin_ns = uv_hrtime();
    if (lg_churn(run))
        run->start_ns = begin_ns;
    for (unsigned i = 0; i < nclients; i++)
        client_next(&run->clients[i]);
    if (lg_churn(run) && run->cfg->duration > 0)
        uv_timer_start(&run->deadline, on_deadline, (uint64_t)(run->cfg->duration * 1000), 0);
    uv_run(&run->loop, UV_RUN_DEFAULT);
    if (run->end_ns == 0)
        run->end_ns = uv_hrtime();
    /* No client ever connected: the phase lasted from its beginning. */
    if (run->start_ns == 0)
        run->start_ns = begin_ns;
    for (unsigned i = 0; i < nclients; i++)
        free(run->clients[i].pool);
    free(run->clients);
    run->clients = NULL;
    return run->fatal;
}
