/*
 * Reading ahead for replay. Replaying a pack takes a few small reads in a
 * row (its header, its trailer, its index, its journal records), each one a
 * round trip to a remote backend; a rebuild of thousands of packs from a
 * bucket 50 ms away would spend minutes waiting. So the packs about to be
 * read are fetched a window at a time, all at once: the first and the last
 * REPLAY_PREFETCH_SPAN bytes of each, which hold the header, the trailer,
 * the index and (the journal entry of a batch comes last) usually every
 * record replay reads besides chunks. replay_get() serves what lies inside
 * those bytes and reads the rest as before.
 *
 * A read ahead that fails is forgotten, not reported: the read replay makes
 * itself then fails with the backend's status, which is what says why.
 * Memory is bounded by the window: REPLAY_PREFETCH_WINDOW packs of at most
 * two spans each.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/meta/db.h"
#include "daemon/pack/packer.h"
#include "daemon/recovery/replay-int.h"
#include "daemon/store/store.h"
#include "proto/util.h"
#include "storage/pack/pack.h"

struct prefetch_read {
    struct backend_get get;
    struct replay_prefetch *pf;
};

struct prefetch_pack {
    uint64_t seq;
    char key[BACKEND_MAX_KEY];
    struct prefetch_read head, tail;
};

struct replay_prefetch {
    struct prefetch_pack packs[REPLAY_PREFETCH_WINDOW];
    size_t npacks;
    uint64_t sizes[REPLAY_PREFETCH_WINDOW];
    const struct recovery_parts *rv;
    /* The loop thread's: reads in flight, and the call that waits for them all. */
    unsigned pending;
    bool starting;
    struct replay_call *waiting;
};

static void on_read(struct backend_req *req)
{
    struct prefetch_read *rd = container_of(req, struct prefetch_read, get.req);
    struct replay_prefetch *pf = rd->pf;

    if (req->status != 0)
        backend_get_reset(&rd->get);
    if (--pf->pending == 0 && !pf->starting)
        replay_call_end(pf->waiting);
}

static void start_read(const struct recovery_parts *rv, struct replay_prefetch *pf,
                       struct prefetch_pack *p, struct prefetch_read *rd, uint64_t off,
                       uint64_t len)
{
    rd->pf = pf;
    rd->get = (struct backend_get){.offset = off, .length = len, .max_len = (size_t)len};
    memcpy(rd->get.req.key, p->key, sizeof(p->key));
    rd->get.req.cb = on_read;
    if (backend_get(rv->be, &rd->get) == 0)
        pf->pending++;
    else
        rd->get.req.status = -EIO; /* not started: replay reads for itself */
}

void replay_prefetch_free(struct replay *rp)
{
    struct replay_prefetch *pf = rp->prefetch;

    if (!pf)
        return;
    /* Every read has ended: replay_prefetch_start waits for them. */
    for (size_t i = 0; i < pf->npacks; i++) {
        backend_get_reset(&pf->packs[i].head.get);
        backend_get_reset(&pf->packs[i].tail.get);
    }
    free(pf);
    rp->prefetch = NULL;
}

/* On the loop thread: every read of the window started; the call ends when they have all ended. */
static void start_reads(void *ctx, struct replay_call *c)
{
    struct replay_prefetch *pf = ctx;
    const struct recovery_parts *rv = pf->rv;

    pf->waiting = c;
    pf->starting = true;
    for (size_t i = 0; i < pf->npacks; i++) {
        struct prefetch_pack *p = &pf->packs[i];
        uint64_t size = pf->sizes[i];
        uint64_t head = size < REPLAY_PREFETCH_SPAN ? size : REPLAY_PREFETCH_SPAN;

        if (head)
            start_read(rv, pf, p, &p->head, 0, head);
        /* The tail only where it is not inside the head already. */
        if (size > head)
            start_read(
                rv, pf, p, &p->tail,
                size - (size - head < REPLAY_PREFETCH_SPAN ? size - head : REPLAY_PREFETCH_SPAN),
                size - head < REPLAY_PREFETCH_SPAN ? size - head : REPLAY_PREFETCH_SPAN);
    }
    pf->starting = false;
    if (pf->pending == 0)
        replay_call_end(c);
}

int replay_prefetch_start(struct replay *rp, const uint64_t *seqs, const uint64_t *sizes, size_t n)
{
    const struct recovery_parts *rv = &rp->rv;
    struct replay_prefetch *pf;

    replay_prefetch_free(rp);
    if (n == 0)
        return 0;
    if (n > REPLAY_PREFETCH_WINDOW)
        n = REPLAY_PREFETCH_WINDOW;
    if (!(pf = calloc(1, sizeof(*pf))))
        return -ENOMEM;
    pf->rv = rv;
    for (size_t i = 0; i < n; i++) {
        struct prefetch_pack *p = &pf->packs[pf->npacks];

        p->seq = seqs[i];
        if (db_pack_key(rv->db, p->seq, p->key, sizeof(p->key)) < 0)
            p->key[0] = '\0'; /* cannot be: the listing made the writer known */
        p->head.get.req.status = p->tail.get.req.status = -ENOENT;
        pf->sizes[pf->npacks++] = sizes[i];
    }
    /* On the loop: at start recovery runs it itself, a refresh's thread through the bridge. */
    replay_start_on_loop(rp, start_reads, pf);
    rp->prefetch = pf;
    return 0;
}

/* Copies [off, off + len) of a read ahead that holds it. */
static bool serve(const struct prefetch_read *rd, uint64_t off, uint64_t len, uint8_t **out,
                  size_t *out_len)
{
    const struct backend_get *g = &rd->get;

    if (g->req.status != 0 || !g->out || off < g->offset || off - g->offset > g->out_len ||
        len > g->out_len - (off - g->offset))
        return false;
    if (!(*out = malloc(len ? len : 1)))
        return false;
    memcpy(*out, g->out + (off - g->offset), len);
    *out_len = len;
    return true;
}

bool replay_prefetch_take(struct replay *rp, const char *key, uint64_t off, uint64_t len,
                          uint8_t **out, size_t *out_len)
{
    struct replay_prefetch *pf = rp->prefetch;

    if (!pf)
        return false;
    for (size_t i = 0; i < pf->npacks; i++) {
        const struct prefetch_pack *p = &pf->packs[i];
        if (strcmp(p->key, key) != 0)
            continue;
        return serve(&p->head, off, len, out, out_len) || serve(&p->tail, off, len, out, out_len);
    }
    return false;
}
