/*
 * The mcp transport: in the measured phase each client reaches cairnd
 * through a `cairn mcp` process of its own (`CAIRN --socket SOCKET
 * --no-autostart mcp`), over that process's standard input and output, as an
 * agent does: newline-delimited JSON-RPC 2.0, the initialize handshake, then
 * one tools/call per request (add with text content, get and delete by hash,
 * search with the workload's query).
 *
 * - A session is one process: spawned, initialized (initialize, its answer,
 *   notifications/initialized), then up to session_ops requests. Spawn to the
 *   initialize answer is the session's connect: under external_agent_churn
 *   every session is a new process and every connect is measured as an op.
 *   cairn mcp connects to cairnd at its first tool call, so that connect
 *   counts in the session's first request, not in the connect op.
 * - cairn mcp answers one request at a time, in order. With --pipeline D up
 *   to D requests are written ahead and wait in its input; their latency
 *   includes that wait.
 * - Reply lines are read with a bound (LG_MCP_MAX_LINE): a longer one ends
 *   the session as a bad reply instead of growing the buffer.
 * - A session that ends closes the process's input and output, which makes
 *   it exit; one still there EXIT_GRACE_MS later gets SIGTERM, then SIGKILL.
 *   A process's memory is freed once it has been reaped and its handles are
 *   closed, so the loop (and the phase) runs until every child is gone.
 */

#include "bench/loadgen/loadgen.h"
#include "proto/util.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

/*
 * Longest reply line: a get returns at most 1 MiB of text, which JSON
 * escaping can make up to 6 MiB in the worst case; search hits come twice
 * (structuredContent and its text), but are far smaller.
 */
#define LG_MCP_MAX_LINE (8u * 1024 * 1024)
#define READ_CHUNK (64u * 1024)
/* How long a session's handshake may take, and how long an ended process has to exit. */
#define HANDSHAKE_TIMEOUT_MS 10000
#define EXIT_GRACE_MS 2000
#define PROTOCOL_VERSION "2025-06-18"

struct mcp_pending {
    struct mcp_pending *next;
    uint64_t id;
    enum lg_op op;
    uint64_t start_ns;
};

struct lg_mcp {
    uv_process_t proc;
    uv_pipe_t in, out;        /* the child's stdin (we write) and stdout (we read) */
    uv_timer_t timer;         /* the handshake's timeout, then the grace before a kill */
    struct lg_client *client; /* NULL once the session ended */
    unsigned open_handles;
    bool spawned, exited, ready;
    int kills; /* signals sent after the grace: SIGTERM, then SIGKILL */
    uint64_t spawn_ns;
    /* Reply bytes read and not yet consumed; the first `scanned` hold no newline. */
    char *buf;
    size_t len, cap, scanned;
    struct mcp_pending *pending;
    unsigned outstanding;
    uint64_t next_id;
    unsigned session_left;
};

/* Lines to write, sent in one uv_write. */
struct mcp_write {
    uv_write_t req;
    char *data;
    size_t len, cap;
};

static void session_over(struct lg_mcp *m, unsigned error);

/* --- the process's life --- */

static void on_handle_closed(uv_handle_t *h)
{
    struct lg_mcp *m = h->data;

    if (--m->open_handles > 0)
        return;
    while (m->pending) {
        struct mcp_pending *p = m->pending;
        m->pending = p->next;
        free(p);
    }
    free(m->buf);
    free(m);
}

/* Closes the process handle and the timer: only once the child is reaped (or never ran). */
static void release(struct lg_mcp *m)
{
    uv_timer_stop(&m->timer);
    uv_close((uv_handle_t *)&m->proc, on_handle_closed);
    uv_close((uv_handle_t *)&m->timer, on_handle_closed);
}

static void on_grace_over(uv_timer_t *t)
{
    struct lg_mcp *m = t->data;

    if (m->exited)
        return;
    /* SIGTERM first, as an MCP client does; SIGKILL when even that is ignored. */
    uv_process_kill(&m->proc, m->kills++ == 0 ? SIGTERM : SIGKILL);
    uv_timer_start(&m->timer, on_grace_over, EXIT_GRACE_MS, 0);
}

/*
 * Ends the session: its open requests fail with `error`, the client lets go
 * of it, and the child is told to exit by the end of its input.
 */
static void detach(struct lg_mcp *m, unsigned error)
{
    struct lg_client *c = m->client;

    for (struct mcp_pending *p = m->pending; p; p = p->next)
        lg_record(c->run, p->op, p->start_ns, error ? error : LG_ERR_DISCONNECTED);
    m->outstanding = 0;
    c->mcp = NULL;
    m->client = NULL;
    uv_close((uv_handle_t *)&m->in, on_handle_closed);
    uv_close((uv_handle_t *)&m->out, on_handle_closed);
    if (!m->spawned || m->exited) {
        release(m);
        return;
    }
    uv_timer_stop(&m->timer);
    uv_timer_start(&m->timer, on_grace_over, EXIT_GRACE_MS, 0);
}

/*
 * The session is over, as planned (error 0) or not. One that ends before its
 * handshake finished is a failed connect.
 */
static void session_over(struct lg_mcp *m, unsigned error)
{
    struct lg_client *c = m->client;
    bool ready = m->ready;

    if (!c)
        return;
    detach(m, error);
    if (ready)
        lg_client_session_ended(c, error);
    else
        lg_client_connect_failed(c, m->spawn_ns, -EPIPE);
}

static void on_child_exit(uv_process_t *proc, int64_t status, int term_signal)
{
    struct lg_mcp *m = container_of(proc, struct lg_mcp, proc);

    m->exited = true;
    if (m->client)
        session_over(m, LG_ERR_DISCONNECTED); /* it went away on its own; that releases it */
    else
        release(m);
}

static void on_handshake_timeout(uv_timer_t *t)
{
    struct lg_mcp *m = t->data;

    if (m->client && !m->ready)
        session_over(m, LG_ERR_CONNECT);
}

/* --- writing --- */

static int append(const char *bytes, size_t n, void *userdata)
{
    struct mcp_write *w = userdata;

    if (n > w->cap - w->len) {
        size_t cap = w->cap ? w->cap : 4096;
        char *data;
        while (cap - w->len < n) {
            if (cap > SIZE_MAX / 2)
                return -1;
            cap *= 2;
        }
        if (!(data = realloc(w->data, cap)))
            return -1;
        w->data = data;
        w->cap = cap;
    }
    memcpy(w->data + w->len, bytes, n);
    w->len += n;
    return 0;
}

/* Appends `msg` (taken) as one line; no half line is left on failure. */
static int append_line(struct mcp_write *w, json_t *msg)
{
    size_t restore = w->len;
    int r = -1;

    if (msg && json_dump_callback(msg, append, w, JSON_COMPACT) == 0 && append("\n", 1, w) == 0)
        r = 0;
    json_decref(msg);
    if (r < 0)
        w->len = restore;
    return r;
}

static void free_write(struct mcp_write *w)
{
    free(w->data);
    free(w);
}

static void on_write(uv_write_t *req, int status)
{
    struct mcp_write *w = container_of(req, struct mcp_write, req);
    struct lg_mcp *m = req->handle->data;

    free_write(w);
    /* A child that stopped reading; after a close, writes end with UV_ECANCELED. */
    if (status < 0 && m->client)
        session_over(m, LG_ERR_DISCONNECTED);
}

/* Sends the lines of `w` (taken). 0 or a libuv error. */
static int send_lines(struct lg_mcp *m, struct mcp_write *w)
{
    uv_buf_t buf = uv_buf_init(w->data, (unsigned)w->len);
    int r;

    if (w->len > UINT_MAX) {
        free_write(w);
        return UV_E2BIG;
    }
    r = uv_write(&w->req, (uv_stream_t *)&m->in, &buf, 1, on_write);
    if (r < 0)
        free_write(w);
    return r;
}

static int send_one(struct lg_mcp *m, json_t *msg)
{
    struct mcp_write *w = calloc(1, sizeof(*w));

    if (!w || append_line(w, msg) < 0) {
        if (w)
            free_write(w);
        else
            json_decref(msg);
        return UV_ENOMEM;
    }
    return send_lines(m, w);
}

/* The MCP tool of each request op (connect is not a request). */
static const char *const tool_names[LG_OP_COUNT_] = {
    [LG_OP_GET] = "get",
    [LG_OP_SEARCH] = "search",
    [LG_OP_ADD] = "add",
    [LG_OP_DELETE] = "delete",
};

/* The tools/call of `req`, or NULL when out of memory. */
static json_t *request_json(struct lg_run *run, uint64_t id, const struct lg_request *req)
{
    const uint8_t *doc;
    const char *name;
    size_t len;
    json_t *args;

    switch (req->op) {
    case LG_OP_GET:
    case LG_OP_DELETE:
        args = json_pack("{s:s}", "ref", req->ref);
        break;
    case LG_OP_SEARCH:
        args = json_pack("{s:s}", "query", req->search.query);
        break;
    default:
        /* Text content only (main.c refuses random content with mcp): valid UTF-8. */
        doc = lg_workload_document(run->wl, req->unique, false, &name, &len);
        args = json_pack("{s:s%, s:s, s:[s], s:s}", "content", (const char *)doc, len, "name", name,
                         "tags", "loadgen", "mime", "text/plain");
        break;
    }
    if (!args)
        return NULL;
    return json_pack("{s:s, s:I, s:s, s:{s:s, s:o}}", "jsonrpc", "2.0", "id", (json_int_t)id,
                     "method", "tools/call", "params", "name", tool_names[req->op], "arguments",
                     args);
}

void lg_mcp_fill(struct lg_mcp *m)
{
    struct lg_client *c = m->client;
    struct lg_run *run = c->run;
    struct mcp_write *w = NULL;

    while (m->outstanding < c->pipeline && m->session_left > 0 && lg_client_may_issue(c)) {
        struct mcp_pending *p = calloc(1, sizeof(*p));
        struct lg_request req;

        if (!w)
            w = calloc(1, sizeof(*w));
        if (!p || !w) {
            free(p);
            run->fatal = -ENOMEM;
            break;
        }
        lg_client_pick(c, &req);
        if (req.op == LG_OP_ADD)
            req.unique = run->next_unique++;
        p->id = ++m->next_id;
        p->op = req.op;
        c->issued++;
        m->session_left--;
        if (append_line(w, request_json(run, p->id, &req)) < 0) {
            lg_record(run, p->op, uv_hrtime(), LG_ERR_LOCAL);
            free(p);
            continue;
        }
        p->start_ns = uv_hrtime();
        p->next = m->pending;
        m->pending = p;
        m->outstanding++;
    }
    if (w && w->len == 0) {
        free_write(w);
    } else if (w && send_lines(m, w) < 0) {
        session_over(m, LG_ERR_DISCONNECTED);
        return;
    }
    if (run->fatal) {
        session_over(m, LG_ERR_LOCAL);
        return;
    }
    /* Nothing was sent and nothing is awaited: the session or the client is done. */
    if (m->outstanding == 0)
        session_over(m, 0);
}

/* --- reading --- */

/* A tool failure's code: cairn mcp ends the text of a daemon error with "(code_name)". */
static unsigned tool_error_code(json_t *result)
{
    const char *text = json_string_value(
        json_object_get(json_array_get(json_object_get(result, "content"), 0), "text"));
    const char *open, *end;
    enum proto_error code;

    if (!text || !(end = strrchr(text, ')')) || end[1] || !(open = strrchr(text, '(')))
        return LG_ERR_TOOL;
    code = proto_error_from_name(open + 1, (size_t)(end - open - 1));
    if (code == PROTO_OK || strlen(proto_error_name(code)) != (size_t)(end - open - 1) ||
        strncmp(proto_error_name(code), open + 1, (size_t)(end - open - 1)) != 0)
        return LG_ERR_TOOL;
    return code;
}

/* The outcome of one tools/call reply: 0, or the error to count. */
static unsigned complete(struct lg_mcp *m, const struct mcp_pending *p, json_t *msg)
{
    struct lg_client *c = m->client;
    struct lg_run *run = c->run;
    json_t *result = json_object_get(msg, "result"), *out, *hits;
    const char *hash;

    if (json_object_get(msg, "error"))
        return LG_ERR_RPC;
    if (!json_is_object(result))
        return LG_ERR_BAD_REPLY;
    if (json_is_true(json_object_get(result, "isError")))
        return tool_error_code(result);
    out = json_object_get(result, "structuredContent");
    switch (p->op) {
    case LG_OP_ADD:
        hash = json_string_value(json_object_get(out, "hash"));
        if (!hash || strlen(hash) != PROTO_HASH_HEX)
            return LG_ERR_BAD_REPLY;
        if (run->cfg->profile != LG_PROFILE_ADD)
            lg_client_remember(c, hash, PROTO_HASH_HEX);
        return 0;
    case LG_OP_SEARCH:
        hits = json_object_get(out, "hits");
        if (!json_is_array(hits))
            return LG_ERR_BAD_REPLY;
        run->stats[LG_OP_SEARCH].search_hits += json_array_size(hits);
        return 0;
    default:
        return json_is_object(out) ? 0 : LG_ERR_BAD_REPLY;
    }
}

static struct mcp_pending *take_pending(struct lg_mcp *m, json_int_t id)
{
    for (struct mcp_pending **pp = &m->pending; *pp; pp = &(*pp)->next) {
        if ((json_int_t)(*pp)->id == id) {
            struct mcp_pending *p = *pp;
            *pp = p->next;
            return p;
        }
    }
    return NULL;
}

/* The answer to initialize: the session is up, or it failed to start. */
static void handshake_done(struct lg_mcp *m, json_t *msg)
{
    json_t *result = json_object_get(msg, "result");
    struct lg_client *c = m->client;

    if (json_integer_value(json_object_get(msg, "id")) != 0 ||
        !json_is_string(json_object_get(result, "protocolVersion"))) {
        session_over(m, LG_ERR_CONNECT);
        return;
    }
    if (send_one(m, json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
                              "notifications/initialized")) < 0) {
        session_over(m, LG_ERR_CONNECT);
        return;
    }
    uv_timer_stop(&m->timer);
    m->ready = true;
    m->session_left = lg_client_session_ops(c);
    if (lg_client_connected(c, m->spawn_ns) && m->client == c)
        lg_mcp_fill(m);
}

static void handle_line(struct lg_mcp *m, const char *line, size_t len)
{
    json_t *msg = json_loadb(line, len, 0, NULL);
    json_t *id = json_object_get(msg, "id");
    struct mcp_pending *p;
    unsigned error;

    /* cairn mcp sends no notifications or requests of its own: every line answers one of ours. */
    if (!json_is_object(msg) || !json_is_integer(id)) {
        json_decref(msg);
        session_over(m, LG_ERR_BAD_REPLY);
        return;
    }
    if (!m->ready) {
        handshake_done(m, msg);
        json_decref(msg);
        return;
    }
    p = take_pending(m, json_integer_value(id));
    if (!p) {
        json_decref(msg);
        session_over(m, LG_ERR_BAD_REPLY);
        return;
    }
    m->outstanding--;
    error = complete(m, p, msg);
    lg_record(m->client->run, p->op, p->start_ns, error);
    free(p);
    json_decref(msg);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct lg_mcp *m = h->data;

    /* After each read at most LG_MCP_MAX_LINE bytes are kept, so the cap leaves room. */
    if (m->cap - m->len < READ_CHUNK) {
        size_t cap = m->cap ? m->cap * 2 : 2 * READ_CHUNK;
        char *grown;
        if (cap > LG_MCP_MAX_LINE + 2 * READ_CHUNK)
            cap = LG_MCP_MAX_LINE + 2 * READ_CHUNK;
        if (cap <= m->cap || !(grown = realloc(m->buf, cap))) {
            buf->base = NULL;
            buf->len = 0;
            return;
        }
        m->buf = grown;
        m->cap = cap;
    }
    buf->base = m->buf + m->len;
    buf->len = m->cap - m->len;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    struct lg_mcp *m = stream->data;
    size_t start = 0, from;
    char *nl;

    if (!m->client || nread == 0)
        return;
    if (nread < 0) {
        session_over(m, nread == UV_ENOBUFS ? LG_ERR_LOCAL : LG_ERR_DISCONNECTED);
        return;
    }
    m->len += (size_t)nread;
    from = m->scanned;
    while (m->client && (nl = memchr(m->buf + from, '\n', m->len - from))) {
        size_t end = (size_t)(nl - m->buf);
        handle_line(m, m->buf + start, end - start);
        start = from = end + 1;
    }
    if (!m->client)
        return; /* the session ended on one of those lines */
    memmove(m->buf, m->buf + start, m->len - start);
    m->len -= start;
    m->scanned = m->len;
    if (m->len > LG_MCP_MAX_LINE) {
        session_over(m, LG_ERR_BAD_REPLY);
        return;
    }
    /* Before the clock starts only the handshake is answered; lg_mcp_fill runs at the start. */
    if (!m->ready || m->client->run->start_ns == 0)
        return;
    if (m->outstanding == 0 && (m->session_left == 0 || !lg_client_may_issue(m->client))) {
        session_over(m, 0);
        return;
    }
    lg_mcp_fill(m);
}

/* --- starting a session --- */

bool lg_mcp_ready(const struct lg_mcp *m)
{
    return m->ready;
}

static int spawn(struct lg_mcp *m, const struct lg_config *cfg)
{
    char *argv[] = {(char *)cfg->cairn, "--socket", (char *)cfg->socket,
                    "--no-autostart",   "mcp",      NULL};
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&m->in},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&m->out},
        /* Its complaints (cairnd unreachable, ...) go where ours go. */
        {.flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO},
    };
    uv_process_options_t opts = {
        .exit_cb = on_child_exit,
        .file = cfg->cairn,
        .args = argv,
        .stdio_count = 3,
        .stdio = stdio,
    };

    return uv_spawn(m->in.loop, &m->proc, &opts);
}

void lg_mcp_open(struct lg_client *c)
{
    struct lg_run *run = c->run;
    struct lg_mcp *m = calloc(1, sizeof(*m));
    int r;

    if (!m) {
        run->fatal = -ENOMEM;
        lg_client_connect_failed(c, uv_hrtime(), -ENOMEM);
        return;
    }
    m->client = c;
    c->mcp = m;
    m->spawn_ns = uv_hrtime();
    uv_pipe_init(&run->loop, &m->in, 0);
    uv_pipe_init(&run->loop, &m->out, 0);
    uv_timer_init(&run->loop, &m->timer);
    m->in.data = m->out.data = m->timer.data = m->proc.data = m;
    /* uv_spawn initializes the process handle even when it fails: it is closed either way. */
    m->open_handles = 4;
    r = spawn(m, run->cfg);
    m->proc.data = m;
    if (r == 0) {
        m->spawned = true;
        r = uv_read_start((uv_stream_t *)&m->out, on_alloc, on_read);
    }
    if (r == 0)
        r = send_one(m, json_pack("{s:s, s:i, s:s, s:{s:s, s:{}, s:{s:s, s:s}}}", "jsonrpc", "2.0",
                                  "id", 0, "method", "initialize", "params", "protocolVersion",
                                  PROTOCOL_VERSION, "capabilities", "clientInfo", "name",
                                  "cairn-loadgen", "version", "1"));
    if (r == 0)
        r = uv_timer_start(&m->timer, on_handshake_timeout, HANDSHAKE_TIMEOUT_MS, 0);
    if (r < 0) {
        /* A binary that cannot be run will not run on the next try either. */
        if ((r == UV_ENOENT || r == UV_EACCES || r == -ENOEXEC) && !m->spawned && !run->fatal)
            run->fatal = r;
        session_over(m, LG_ERR_CONNECT);
    }
}

/* --- the check before the run --- */

static int executable(const char *path)
{
    struct stat st;

    if (stat(path, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EACCES;
    return access(path, X_OK) == 0 ? 0 : -errno;
}

int lg_mcp_check_binary(const char *cairn)
{
    const char *path = getenv("PATH"), *dir, *end;
    char full[4096];
    int r = -ENOENT;

    if (!cairn[0])
        return -ENOENT;
    if (strchr(cairn, '/'))
        return executable(cairn);
    /* As execvp looks it up, which is how uv_spawn runs it. */
    for (dir = path && path[0] ? path : "/usr/local/bin:/usr/bin:/bin";; dir = end + 1) {
        size_t n;
        end = strchr(dir, ':');
        n = end ? (size_t)(end - dir) : strlen(dir);
        if ((size_t)snprintf(full, sizeof(full), "%.*s/%s", (int)(n ? n : 1), n ? dir : ".",
                             cairn) < sizeof(full) &&
            (r = executable(full)) == 0)
            return 0;
        if (!end)
            return r == -EACCES ? r : -ENOENT;
    }
}
