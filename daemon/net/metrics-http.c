/*
 * The metrics on a loopback TCP port ([daemon] metrics_listen): an HTTP/1.x
 * server that answers `GET /metrics` (and HEAD) with the text metrics.c
 * renders, one request per connection, then closes. Nothing else: any other
 * path is 404, any other method 405, a request head past 4 KiB 431, one not
 * complete within 5 s is closed, and at most 8 scrapes are served at once
 * (more are closed unanswered). The database totals are read on a worker.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/gc/gc.h"
#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/net/net.h"
#include "proto/util.h"

#define SCRAPE_MAX_HEAD 4096
#define SCRAPE_TIMEOUT_MS 5000
#define SCRAPE_MAX 8

struct metrics_listener {
    uv_tcp_t tcp;
};

struct scrape {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_work_t work;
    uv_write_t wr;
    struct server *srv;
    struct scrape *next, *prev;
    char head[SCRAPE_MAX_HEAD];
    size_t len;
    bool is_head; /* a HEAD request: no body */
    char *out;
    uint64_t dead_gen;
    struct db_totals totals;
    int status;
    bool working, closing;
    int open_handles;
};

int metrics_addr_parse(const char *s, struct sockaddr_storage *out)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    size_t hlen;
    char *end;
    unsigned long port;

    memset(out, 0, sizeof(*out));
    if (!colon || colon == s || !colon[1])
        return -EINVAL;
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (*end || errno || port == 0 || port > 65535 || colon[1] == '+' || colon[1] == '-')
        return -EINVAL;
    hlen = (size_t)(colon - s);
    if (hlen >= sizeof(host))
        return -EINVAL;
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    if (host[0] == '[') {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)out;
        if (hlen < 3 || host[hlen - 1] != ']')
            return -EINVAL;
        host[hlen - 1] = '\0';
        if (uv_ip6_addr(host + 1, (int)port, a6) != 0)
            return -EINVAL;
        /* Loopback only: ::1. */
        if (!IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr))
            return -EPERM;
        return 0;
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)out;
    if (uv_ip4_addr(host, (int)port, a4) != 0)
        return -EINVAL;
    /* Loopback only: 127.0.0.0/8. */
    if ((ntohl(a4->sin_addr.s_addr) >> 24) != 127)
        return -EPERM;
    return 0;
}

/* A listener's handle is its struct's first member. */
static void on_listener_closed(uv_handle_t *h)
{
    free(h);
}

static void scrape_free_if_done(struct scrape *s)
{
    struct server *srv = s->srv;

    if (s->open_handles > 0 || s->working)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else
        srv->scrapes = s->next;
    if (s->next)
        s->next->prev = s->prev;
    srv->nscrapes--;
    free(s->out);
    free(s);
    conn_check_gone(srv);
}

static void on_scrape_handle_closed(uv_handle_t *h)
{
    struct scrape *s = h->data;

    s->open_handles--;
    scrape_free_if_done(s);
}

static void scrape_close(struct scrape *s)
{
    if (s->closing)
        return;
    s->closing = true;
    uv_close((uv_handle_t *)&s->timer, on_scrape_handle_closed);
    uv_close((uv_handle_t *)&s->tcp, on_scrape_handle_closed);
}

static void on_written(uv_write_t *wr, int status)
{
    (void)status;
    scrape_close(wr->data);
}

/* Sends the answer (head and `body` of `blen` bytes; no body for HEAD), then closes. */
static void respond(struct scrape *s, const char *status, const char *body, size_t blen)
{
    static const char fmt[] = "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; "
                              "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n";
    int hlen = snprintf(NULL, 0, fmt, status, blen);
    size_t send = (size_t)hlen + (s->is_head ? 0 : blen);
    char *buf = hlen > 0 ? malloc(send + 1) : NULL;
    uv_buf_t b;

    if (!buf) {
        scrape_close(s);
        return;
    }
    snprintf(buf, (size_t)hlen + 1, fmt, status, blen);
    if (!s->is_head && blen)
        memcpy(buf + hlen, body, blen);
    free(s->out);
    s->out = buf;
    b = uv_buf_init(buf, (unsigned)send);
    s->wr.data = s;
    if (uv_write(&s->wr, (uv_stream_t *)&s->tcp, &b, 1, on_written) < 0)
        scrape_close(s);
}

static void respond_text(struct scrape *s, const char *status, const char *text)
{
    respond(s, status, text, strlen(text));
}

static void totals_work(uv_work_t *work)
{
    struct scrape *s = container_of(work, struct scrape, work);
    s->status = db_totals(s->srv->db, s->dead_gen, &s->totals);
}

static void totals_done(uv_work_t *work, int status)
{
    struct scrape *s = container_of(work, struct scrape, work);
    char *text;
    size_t len;

    s->working = false;
    if (s->closing) {
        scrape_free_if_done(s);
        return;
    }
    if (status < 0 || s->status != 0 || metrics_render(s->srv, &s->totals, &text, &len) < 0) {
        respond_text(s, "500 Internal Server Error", "the metrics could not be read\n");
        return;
    }
    respond(s, "200 OK", text, len);
    free(text);
}

int metrics_request_check(char *head, bool *is_head)
{
    char *eol = strpbrk(head, "\r\n"), *sp1, *sp2, *q;

    *is_head = false;
    if (eol)
        *eol = '\0';
    sp1 = strchr(head, ' ');
    sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || strncmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return 400;
    *sp1 = *sp2 = '\0';
    *is_head = strcmp(head, "HEAD") == 0;
    if (!*is_head && strcmp(head, "GET") != 0)
        return 405;
    if ((q = strchr(sp1 + 1, '?')))
        *q = '\0';
    return strcmp(sp1 + 1, "/metrics") == 0 ? 0 : 404;
}

/* The request head is complete: its first line says what is asked. */
static void handle(struct scrape *s)
{
    switch (metrics_request_check(s->head, &s->is_head)) {
    case 0:
        break;
    case 405:
        respond_text(s, "405 Method Not Allowed", "only GET /metrics\n");
        return;
    case 404:
        respond_text(s, "404 Not Found", "only GET /metrics\n");
        return;
    default:
        respond_text(s, "400 Bad Request", "not an HTTP/1 request\n");
        return;
    }
    s->dead_gen = s->srv->gc ? gc_dead_generation(s->srv->gc) : 0;
    if (uv_queue_work(s->srv->loop, &s->work, totals_work, totals_done) < 0) {
        respond_text(s, "500 Internal Server Error", "the metrics could not be read\n");
        return;
    }
    s->working = true;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct scrape *s = h->data;
    (void)suggested;
    /* One byte kept for the NUL that ends the head as a string. */
    *buf = uv_buf_init(s->head + s->len, (unsigned)(sizeof(s->head) - 1 - s->len));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct scrape *s = st->data;
    (void)buf;

    if (nread < 0) {
        scrape_close(s);
        return;
    }
    if (memchr(s->head + s->len, '\0', (size_t)nread)) {
        uv_read_stop(st);
        respond_text(s, "400 Bad Request", "not an HTTP/1 request\n");
        return;
    }
    s->len += (size_t)nread;
    s->head[s->len] = '\0';
    if (strstr(s->head, "\r\n\r\n") || strstr(s->head, "\n\n")) {
        uv_read_stop(st);
        handle(s);
    } else if (s->len == sizeof(s->head) - 1) {
        uv_read_stop(st);
        respond_text(s, "431 Request Header Fields Too Large", "request head too large\n");
    }
}

static void on_timeout(uv_timer_t *t)
{
    struct scrape *s = t->data;

    /* A slow client; one whose answer is on its way is left to finish. */
    if (!s->working)
        scrape_close(s);
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct server *srv = listener->data;
    struct scrape *s;

    if (status < 0)
        return;
    s = calloc(1, sizeof(*s));
    if (!s)
        return;
    s->srv = srv;
    s->tcp.data = s->timer.data = s;
    uv_tcp_init(srv->loop, &s->tcp);
    uv_timer_init(srv->loop, &s->timer);
    s->open_handles = 2;
    s->next = srv->scrapes;
    if (srv->scrapes)
        srv->scrapes->prev = s;
    srv->scrapes = s;
    srv->nscrapes++;
    if (uv_accept(listener, (uv_stream_t *)&s->tcp) < 0 || srv->stopping ||
        srv->nscrapes > SCRAPE_MAX) {
        scrape_close(s);
        return;
    }
    uv_timer_start(&s->timer, on_timeout, SCRAPE_TIMEOUT_MS, 0);
    if (uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read) < 0)
        scrape_close(s);
}

int server_metrics_listen(struct server *srv, const char *addr, char *err, size_t err_len)
{
    struct sockaddr_storage sa;
    struct metrics_listener *l;
    int r = metrics_addr_parse(addr, &sa);

    if (r < 0) {
        snprintf(err, err_len, "metrics_listen %s: %s", addr,
                 r == -EPERM ? "not a loopback address" : "not HOST:PORT");
        return r;
    }
    if (!(l = calloc(1, sizeof(*l)))) {
        snprintf(err, err_len, "out of memory");
        return -ENOMEM;
    }
    uv_tcp_init(srv->loop, &l->tcp);
    l->tcp.data = srv;
    if ((r = uv_tcp_bind(&l->tcp, (const struct sockaddr *)&sa, 0)) < 0 ||
        (r = uv_listen((uv_stream_t *)&l->tcp, 16, on_connection)) < 0) {
        snprintf(err, err_len, "metrics_listen %s: %s", addr, uv_strerror(r));
        uv_close((uv_handle_t *)&l->tcp, on_listener_closed);
        return r;
    }
    srv->mlistener = l;
    log_info("metrics on http://%s/metrics", addr);
    return 0;
}

void server_metrics_close(struct server *srv)
{
    if (srv->mlistener) {
        uv_close((uv_handle_t *)&srv->mlistener->tcp, on_listener_closed);
        srv->mlistener = NULL;
    }
    for (struct scrape *s = srv->scrapes; s; s = s->next)
        scrape_close(s);
}
