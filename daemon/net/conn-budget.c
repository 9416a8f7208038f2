/* Connection memory: see conn-budget.h. */

#include "daemon/net/conn-budget.h"

#include <stdint.h>

#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"

/*
 * What c may grow its read buffer to, wanting ncap, with `used` bytes taken:
 * ncap within the bound; a first read of CONN_RESERVE_READ whatever is taken
 * (each connection's own, so holders cannot use it up for a new client);
 * else 0.
 */
static size_t fits(const struct conn *c, size_t ncap, size_t used)
{
    if (used + (ncap - c->rcap) <= c->srv->buffer_limit)
        return ncap;
    if (c->rcap == 0)
        return ncap < CONN_RESERVE_READ ? ncap : CONN_RESERVE_READ;
    return 0;
}

bool budget_over(const struct conn *c)
{
    return c->wqueued > 0 && c->srv->buffered > c->srv->buffer_limit;
}

bool budget_hold_requests(const struct conn *c)
{
    return (c->wqueued > 0 || c->inflight > 0) && c->srv->buffered > c->srv->buffer_limit;
}

static void dequeue(struct conn *c)
{
    struct server *srv = c->srv;

    if (!c->budget_wait)
        return;
    if (c->budget_prev)
        c->budget_prev->budget_next = c->budget_next;
    else
        srv->budget_head = c->budget_next;
    if (c->budget_next)
        c->budget_next->budget_prev = c->budget_prev;
    else
        srv->budget_tail = c->budget_prev;
    c->budget_prev = c->budget_next = NULL;
    c->budget_wait = false;
    srv->waiting_held -= c->rcap;
}

static void enqueue(struct conn *c, size_t ncap)
{
    struct server *srv = c->srv;

    c->budget_ncap = ncap;
    if (c->budget_wait)
        return;
    c->budget_wait = true;
    srv->waiting_held += c->rcap;
    c->budget_next = NULL;
    c->budget_prev = srv->budget_tail;
    if (srv->budget_tail)
        srv->budget_tail->budget_next = c;
    else
        srv->budget_head = c;
    srv->budget_tail = c;
}

/* Nothing will be given back unless someone in line goes on: the first. */
static bool stuck(const struct server *srv)
{
    return srv->budget_head && !srv->budget_forced && srv->rbuffered == srv->waiting_held;
}

/* Resumes, in order, every waiting connection whose growth now fits. */
static void wake(struct server *srv)
{
    size_t planned = srv->buffered;

    for (struct conn *c = srv->budget_head, *next; c; c = next) {
        size_t cap = fits(c, c->budget_ncap, planned);
        next = c->budget_next;
        if (cap == 0)
            continue;
        planned += cap - c->rcap;
        dequeue(c);
        conn_kick(c);
    }
    if (stuck(srv)) {
        struct conn *c = srv->budget_head;
        dequeue(c);
        srv->budget_forced = c;
        conn_kick(c);
    }
}

size_t budget_room(struct conn *c, size_t ncap, size_t frame_cap)
{
    struct server *srv = c->srv;
    size_t cap;

    if (srv->budget_forced == c)
        return ncap > frame_cap ? ncap : frame_cap;
    if ((cap = fits(c, ncap, srv->buffered)) != 0)
        return cap;
    if (c->rcap > c->rlen)
        return c->rcap;
    enqueue(c, ncap);
    if (stuck(srv)) {
        if (srv->budget_head == c) {
            dequeue(c);
            srv->budget_forced = c;
            return ncap > frame_cap ? ncap : frame_cap;
        }
        wake(srv);
    }
    return 0;
}

void budget_frame_done(struct conn *c)
{
    struct server *srv = c->srv;

    if (srv->budget_forced != c)
        return;
    srv->budget_forced = NULL;
    if (srv->budget_head)
        wake(srv);
}

void budget_forget(struct conn *c)
{
    dequeue(c);
    budget_frame_done(c);
}

void budget_take(struct server *srv, size_t n, bool read)
{
    srv->buffered += n;
    if (read)
        srv->rbuffered += n;
}

void budget_release(struct server *srv, size_t n, bool read)
{
    srv->buffered -= n;
    if (read)
        srv->rbuffered -= n;
    if (srv->budget_head)
        wake(srv);
}
