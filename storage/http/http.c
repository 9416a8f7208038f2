/*
 * HTTP on the loop (http.h): libcurl's multi socket interface driven by
 * libuv handles, a watchdog for stalled transfers, and the callbacks that
 * stream a request's body out and its response in.
 */
#include "storage/http/http.h"
#include "proto/util.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One per socket curl asks us to watch; freed in its close callback. */
struct http_sock {
    uv_poll_t poll;
    curl_socket_t fd;
    struct http *http;
    struct http_sock *prev, *next;
};

struct http {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;      /* curl's timer */
    uv_timer_t done_timer; /* delivers finished requests outside the caller's calls */
    uv_timer_t watchdog;   /* cuts requests that move no byte for stall_timeout_ms */
    struct http_opts opts;
    struct http_req *done_head, *done_tail;
    struct http_req *active; /* started, not yet finished */
    struct http_sock *socks;
    unsigned open_handles; /* uv handles not yet closed */
    bool closing;
    void (*closed)(void *arg);
    void *closed_arg;
};

static void on_sock_closed(uv_handle_t *h);

static void maybe_closed(struct http *http)
{
    if (!http->closing || http->open_handles)
        return;
    void (*cb)(void *) = http->closed;
    void *arg = http->closed_arg;
    free(http);
    if (cb)
        cb(arg);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct http *http = h->data;
    http->open_handles--;
    maybe_closed(http);
}

static void sock_close(struct http *http, struct http_sock *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        http->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

static void on_sock_closed(uv_handle_t *h)
{
    struct http_sock *s = container_of((uv_poll_t *)h, struct http_sock, poll);
    struct http *http = s->http;
    free(s);
    http->open_handles--;
    maybe_closed(http);
}

/* ---- finishing ------------------------------------------------------------ */

static void on_done_timer(uv_timer_t *t);

static void queue_done(struct http_req *req)
{
    struct http *http = req->http;

    req->next_ = NULL;
    if (http->done_tail)
        http->done_tail->next_ = req;
    else
        http->done_head = req;
    http->done_tail = req;
    if (!http->closing)
        uv_timer_start(&http->done_timer, on_done_timer, 0, 0);
}

static void active_remove(struct http_req *req)
{
    struct http_req **p = &req->http->active;

    while (*p && *p != req)
        p = &(*p)->next_;
    if (*p)
        *p = req->next_;
    req->next_ = NULL;
    /* Nothing left to watch: an idle backend keeps no timer running (a stopping cairnd
     * would otherwise wait up to a quarter of stall_timeout for its next tick). */
    if (!req->http->active)
        uv_timer_stop(&req->http->watchdog);
}

/* Frees the easy handle and the header list (the handle out of any multi). */
static void easy_free(struct http_req *req)
{
    curl_easy_cleanup(req->easy);
    req->easy = NULL;
    curl_slist_free_all(req->slist);
    req->slist = NULL;
}

static void release_easy(struct http_req *req)
{
    active_remove(req);
    if (req->easy)
        curl_multi_remove_handle(req->http->multi, req->easy);
    easy_free(req);
}

static void deliver_done(struct http *http)
{
    while (http->done_head) {
        struct http_req *req = http->done_head;
        http->done_head = req->next_;
        if (!http->done_head)
            http->done_tail = NULL;
        req->next_ = NULL;
        req->http = NULL;
        req->cb(req);
    }
}

static void on_done_timer(uv_timer_t *t)
{
    deliver_done(container_of(t, struct http, done_timer));
}

static int classify(CURLcode rc)
{
    switch (rc) {
    case CURLE_OK:
        return 0;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
        return HTTP_E_TLS;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
        return -EINVAL;
    default:
        /* Connection errors, timeouts, stalls (low-speed abort), short bodies. */
        return HTTP_E_NETWORK;
    }
}

static void finish_easy(struct http_req *req, CURLcode rc)
{
    if (req->cancelled) {
        req->result = -ECANCELED;
    } else if (req->too_large) {
        req->result = HTTP_E_TOO_LARGE;
    } else {
        req->result = classify(rc);
        if (req->result == 0)
            curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &req->status);
        else if (!req->error[0])
            snprintf(req->error, sizeof(req->error), "%s", curl_easy_strerror(rc));
    }
    if (req->result != 0)
        http_req_reset(req);
    release_easy(req);
    queue_done(req);
}

static void check_multi_info(struct http *http)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(http->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct http_req *req = NULL;
        CURLcode rc = msg->data.result;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&req);
        finish_easy(req, rc);
    }
}

/* ---- curl's sockets and timer on libuv ------------------------------------ */

static void on_poll(uv_poll_t *p, int status, int events)
{
    struct http_sock *s = container_of(p, struct http_sock, poll);
    struct http *http = s->http;
    int flags = 0, running;

    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    curl_multi_socket_action(http->multi, s->fd, flags, &running);
    check_multi_info(http);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    struct http *http = userp;
    struct http_sock *s = socketp;
    int events = 0;

    (void)easy;
    if (http->closing)
        return 0;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            sock_close(http, s);
            curl_multi_assign(http->multi, fd, NULL);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return -1;
        s->fd = fd;
        s->http = http;
        if (uv_poll_init_socket(http->loop, &s->poll, fd) < 0) {
            free(s);
            return -1;
        }
        http->open_handles++;
        s->next = http->socks;
        if (s->next)
            s->next->prev = s;
        http->socks = s;
        curl_multi_assign(http->multi, fd, s);
    }
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= UV_WRITABLE;
    uv_poll_start(&s->poll, events, on_poll);
    return 0;
}

static void on_timer(uv_timer_t *t)
{
    struct http *http = container_of(t, struct http, timer);
    int running;

    curl_multi_socket_action(http->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_multi_info(http);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    struct http *http = userp;

    (void)multi;
    if (timeout_ms < 0)
        uv_timer_stop(&http->timer);
    else
        /* Never call back into curl from here: a 0 timeout runs on the next loop turn. */
        uv_timer_start(&http->timer, on_timer, (uint64_t)timeout_ms, 0);
    return 0;
}

/* ---- the no-progress watchdog ----------------------------------------------- */

/*
 * curl's own low-speed check averages over its last five seconds, so a
 * request that sent its body and then heard nothing was cut only after
 * stall_timeout plus those five seconds. Here a request is cut when no byte
 * has moved either way for stall_timeout, counted from its last byte.
 */
static int on_progress(void *userp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct http_req *req = userp;

    (void)dltotal;
    (void)ultotal;
    if (dlnow != req->seen_down || ulnow != req->seen_up) {
        req->seen_down = dlnow;
        req->seen_up = ulnow;
        /* A blocking http_perform() has no loop; its whole attempt has a timeout. */
        if (req->http->loop)
            req->progress_at = uv_now(req->http->loop);
    }
    return 0;
}

static void on_watchdog(uv_timer_t *t)
{
    struct http *http = container_of(t, struct http, watchdog);
    uint64_t now = uv_now(http->loop);
    struct http_req *req = http->active;

    while (req) {
        struct http_req *next = req->next_;
        if (now - req->progress_at >= http->opts.stall_timeout_ms) {
            snprintf(req->error, sizeof(req->error), "no byte moved for %u ms",
                     (unsigned)(now - req->progress_at));
            finish_easy(req, CURLE_OPERATION_TIMEDOUT);
        }
        req = next;
    }
    if (!http->active)
        uv_timer_stop(&http->watchdog);
}

static void watchdog_arm(struct http *http)
{
    /* Checked four times per stall period: a stall is cut at most a quarter late. */
    uint64_t every = http->opts.stall_timeout_ms / 4;

    if (!http->opts.stall_timeout_ms || uv_is_active((uv_handle_t *)&http->watchdog))
        return;
    if (every < 50)
        every = 50;
    uv_timer_start(&http->watchdog, on_watchdog, every, every);
}

/* ---- request and response bodies ------------------------------------------ */

static size_t on_read(char *out, size_t size, size_t nitems, void *userp)
{
    struct http_req *req = userp;
    size_t room = size * nitems, n = 0;

    if (req->cancelled)
        return CURL_READFUNC_ABORT;
    while (n < room && req->iov_idx < req->body_iovcnt) {
        const struct iovec *v = &req->body[req->iov_idx];
        size_t take = v->iov_len - req->iov_off;
        if (take > room - n)
            take = room - n;
        if (take)
            memcpy(out + n, (const char *)v->iov_base + req->iov_off, take);
        n += take;
        req->iov_off += take;
        if (req->iov_off == v->iov_len) {
            req->iov_idx++;
            req->iov_off = 0;
        }
    }
    req->body_sent += n;
    return n;
}

/* curl rewinds the body when it must send it again (a reused connection that was closed). */
static int on_seek(void *userp, curl_off_t offset, int origin)
{
    struct http_req *req = userp;
    uint64_t left;

    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > req->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    req->iov_idx = 0;
    req->iov_off = 0;
    left = (uint64_t)offset;
    while (req->iov_idx < req->body_iovcnt && left >= req->body[req->iov_idx].iov_len) {
        left -= req->body[req->iov_idx].iov_len;
        req->iov_idx++;
    }
    req->iov_off = (size_t)left;
    req->body_sent = (uint64_t)offset;
    req->rewound = true;
    return CURL_SEEKFUNC_OK;
}

static size_t on_write(char *in, size_t size, size_t nmemb, void *userp)
{
    struct http_req *req = userp;
    size_t n = size * nmemb;

    if (req->cancelled)
        return 0;
    if (n > req->body_max - req->resp_len) {
        req->too_large = true;
        return 0;
    }
    if (req->resp_len + n > req->resp_cap) {
        size_t cap = req->resp_cap ? req->resp_cap : 4096;
        while (cap < req->resp_len + n)
            cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
        if (cap > req->body_max)
            cap = req->body_max;
        uint8_t *grown = realloc(req->resp, cap);
        if (!grown)
            return 0;
        req->resp = grown;
        req->resp_cap = cap;
    }
    memcpy(req->resp + req->resp_len, in, n);
    req->resp_len += n;
    return n;
}

static bool header_is(const char *line, size_t len, const char *name, const char **value,
                      size_t *vlen)
{
    size_t nl = strlen(name);

    if (len <= nl || line[nl] != ':' || strncasecmp(line, name, nl) != 0)
        return false;
    line += nl + 1;
    len -= nl + 1;
    while (len && (*line == ' ' || *line == '\t')) {
        line++;
        len--;
    }
    while (len && (line[len - 1] == '\r' || line[len - 1] == '\n' || line[len - 1] == ' '))
        len--;
    *value = line;
    *vlen = len;
    return true;
}

/* A decimal number that fills [s, s+len) exactly, below 2^63. */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 19)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *userp)
{
    struct http_req *req = userp;
    size_t len = size * nitems;
    const char *v;
    size_t vlen;
    uint64_t n;

    /* A new status line (after a 100 Continue, say) starts the headers again. */
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        req->total_size = UINT64_MAX;
        req->content_length = UINT64_MAX;
        req->retry_after_ms = 0;
        req->error_code[0] = '\0';
    } else if (header_is(line, len, "x-ms-error-code", &v, &vlen)) {
        size_t cut = vlen < sizeof(req->error_code) - 1 ? vlen : sizeof(req->error_code) - 1;
        size_t k;
        for (k = 0; k < cut && v[k] > ' ' && v[k] <= '~'; k++)
            req->error_code[k] = v[k];
        req->error_code[k] = '\0';
    } else if (header_is(line, len, "content-length", &v, &vlen)) {
        if (parse_u64(v, vlen, &n))
            req->content_length = n;
    } else if (header_is(line, len, "content-range", &v, &vlen)) {
        /* "bytes A-B/TOTAL", or "bytes STAR/TOTAL" with a 416 */
        const char *slash = memchr(v, '/', vlen);
        if (slash && parse_u64(slash + 1, vlen - (size_t)(slash + 1 - v), &n))
            req->total_size = n;
    } else if (header_is(line, len, "retry-after", &v, &vlen)) {
        /* Seconds; an HTTP date is ignored (our own backoff applies). Capped at 60 s. */
        if (parse_u64(v, vlen, &n))
            req->retry_after_ms = n > 60 ? 60000 : (uint32_t)n * 1000;
    }
    return len;
}

/* ---- starting ------------------------------------------------------------- */

static int setup_easy(struct http *http, struct http_req *req)
{
    CURL *e = req->easy;
    bool put = strcmp(req->method, "PUT") == 0;
    bool post = strcmp(req->method, "POST") == 0;

    for (size_t i = 0; i < req->nheaders; i++) {
        struct curl_slist *l = curl_slist_append(req->slist, req->headers[i]);
        if (!l)
            return -ENOMEM;
        req->slist = l;
    }
    /* No "Expect: 100-continue": it costs a round trip per PUT. */
    const char *extra[] = {"Expect:", "Accept:"};
    for (size_t i = 0; i < 2; i++) {
        struct curl_slist *l = curl_slist_append(req->slist, extra[i]);
        if (!l)
            return -ENOMEM;
        req->slist = l;
    }
    curl_easy_setopt(e, CURLOPT_URL, req->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->slist);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)req);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, req->error);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)http->opts.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, req);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, req);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, req);
    if (strcmp(req->method, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (put || post) {
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, req);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, req);
        if (put) {
            curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
        } else {
            curl_easy_setopt(e, CURLOPT_POST, 1L);
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
        }
    } else if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
    }
    return 0;
}

/* Resets a request's results and sums its body; 0 or -EINVAL. */
static int req_init(struct http *http, struct http_req *req)
{
    req->http = http;
    req->result = 0;
    req->status = 0;
    req->resp = NULL;
    req->resp_len = req->resp_cap = 0;
    req->total_size = UINT64_MAX;
    req->content_length = UINT64_MAX;
    req->retry_after_ms = 0;
    req->error[0] = '\0';
    req->error_code[0] = '\0';
    req->slist = NULL;
    req->easy = NULL;
    req->iov_idx = req->iov_off = 0;
    req->body_len = req->body_sent = 0;
    req->seen_down = req->seen_up = 0;
    req->progress_at = 0;
    req->cancelled = req->too_large = req->rewound = false;
    req->next_ = NULL;
    for (size_t i = 0; i < req->body_iovcnt; i++) {
        if (req->body[i].iov_len > UINT64_MAX - req->body_len)
            return -EINVAL;
        req->body_len += req->body[i].iov_len;
    }
    return 0;
}

int http_start(struct http *http, struct http_req *req)
{
    int r;

    if (http->closing)
        return -ECANCELED;
    if ((r = req_init(http, req)) < 0)
        return r;
    req->easy = curl_easy_init();
    if (!req->easy)
        return -ENOMEM;
    r = setup_easy(http, req);
    if (r == 0 && curl_multi_add_handle(http->multi, req->easy) != CURLM_OK)
        r = -ENOMEM;
    if (r == 0) {
        req->progress_at = uv_now(http->loop);
        req->next_ = http->active;
        http->active = req;
        watchdog_arm(http);
    } else {
        easy_free(req);
        req->http = NULL;
    }
    return r;
}

int http_perform(const struct http_opts *opts, struct http_req *req)
{
    struct http tmp = {.opts = *opts};
    CURLcode rc;
    int r;

    if ((r = req_init(&tmp, req)) < 0)
        return req->result = r;
    req->easy = curl_easy_init();
    if (!req->easy) {
        req->http = NULL;
        return -ENOMEM;
    }
    r = setup_easy(&tmp, req);
    if (r == 0) {
        /* Blocking, so the whole attempt needs a bound of its own. */
        curl_easy_setopt(req->easy, CURLOPT_TIMEOUT_MS,
                         (long)opts->connect_timeout_ms + (long)opts->stall_timeout_ms);
        rc = curl_easy_perform(req->easy);
        if (req->too_large)
            r = HTTP_E_TOO_LARGE;
        else if ((r = classify(rc)) == 0)
            curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &req->status);
        else if (!req->error[0])
            snprintf(req->error, sizeof(req->error), "%s", curl_easy_strerror(rc));
    }
    req->result = r;
    if (r != 0)
        http_req_reset(req);
    easy_free(req);
    req->http = NULL;
    return r;
}

void http_cancel(struct http_req *req)
{
    if (!req->http || !req->easy || req->cancelled)
        return;
    req->cancelled = true;
    finish_easy(req, CURLE_ABORTED_BY_CALLBACK);
}

void http_req_reset(struct http_req *req)
{
    free(req->resp);
    req->resp = NULL;
    req->resp_len = req->resp_cap = 0;
}

/* ---- life cycle ----------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_status;

static void init_curl(void)
{
    curl_init_status = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int http_global_init(void)
{
    pthread_once(&curl_once, init_curl);
    return curl_init_status == CURLE_OK ? 0 : -EIO;
}

int http_new(struct http **out, uv_loop_t *loop, const struct http_opts *opts)
{
    struct http *http = calloc(1, sizeof(*http));
    long conns = opts->connections ? (long)opts->connections : 1;

    if (!http)
        return -ENOMEM;
    http->loop = loop;
    http->opts = *opts;
    http->multi = curl_multi_init();
    if (!http->multi) {
        free(http);
        return -ENOMEM;
    }
    curl_multi_setopt(http->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(http->multi, CURLMOPT_SOCKETDATA, http);
    curl_multi_setopt(http->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(http->multi, CURLMOPT_TIMERDATA, http);
    curl_multi_setopt(http->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, conns);
    curl_multi_setopt(http->multi, CURLMOPT_MAX_HOST_CONNECTIONS, conns);
    curl_multi_setopt(http->multi, CURLMOPT_MAXCONNECTS, conns);
    uv_timer_init(loop, &http->timer);
    uv_timer_init(loop, &http->done_timer);
    uv_timer_init(loop, &http->watchdog);
    http->timer.data = http;
    http->done_timer.data = http;
    http->watchdog.data = http;
    http->open_handles = 3;
    *out = http;
    return 0;
}

void http_free(struct http *http, void (*closed)(void *arg), void *arg)
{
    if (!http) {
        if (closed)
            closed(arg);
        return;
    }
    /* Requests still running end as cancelled, and hear so before the handles go. */
    http->closing = true;
    while (http->active) {
        struct http_req *req = http->active;
        req->cancelled = true;
        finish_easy(req, CURLE_ABORTED_BY_CALLBACK);
    }
    deliver_done(http);
    /* Stop watching curl's sockets while they are still open; curl closes them. */
    while (http->socks)
        sock_close(http, http->socks);
    http->closed = closed;
    http->closed_arg = arg;
    /* Closes curl's sockets, which come back through on_curl_socket as removals. */
    curl_multi_cleanup(http->multi);
    http->multi = NULL;
    uv_close((uv_handle_t *)&http->timer, on_handle_closed);
    uv_close((uv_handle_t *)&http->done_timer, on_handle_closed);
    uv_close((uv_handle_t *)&http->watchdog, on_handle_closed);
}
