/*
 * Deleting the packs gc emptied once no running operation can still read
 * them: the object first, then its row (a crash between the two leaves the
 * row, and the next start finishes the deletion).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/crash.h"
#include "daemon/base/log.h"
#include "daemon/gc/gc-int.h"
#include "daemon/meta/db.h"
#include "daemon/readcache/readcache.h"
#include "daemon/store/store.h"
#include "proto/util.h"
#include "storage/backend.h"

struct gc_reap {
    uint64_t seq;
    uint64_t barrier; /* operations older than this may still read the pack */
    bool running;
    struct backend_del del;
    struct db_write dbw;
    struct gc *gc;
    struct gc_reap *next;
};

static void reap_dropped(struct db_write *w)
{
    struct gc_reap *rp = container_of(w, struct gc_reap, dbw);
    struct gc *gc = rp->gc;
    struct gc_reap **pp = &gc->reaping;

    while (*pp != rp)
        pp = &(*pp)->next;
    *pp = rp->next;
    free(rp);
    gc_reap(gc);
    gc_reaped(gc);
}

static int reap_apply(struct db_txn *txn, struct db_write *w)
{
    struct gc_reap *rp = container_of(w, struct gc_reap, dbw);
    return db_txn_pack_drop(txn, rp->seq);
}

static void reap_deleted(struct backend_req *req)
{
    struct gc_reap *rp = container_of(req, struct gc_reap, del.req);

    /* The old pack is gone; its row still says it is being deleted. */
    crash_point("repack-deleted");
    if (rp->gc->rc)
        readcache_forget_pack(rp->gc->rc, rp->seq);
    if (req->status != 0 && req->status != BACKEND_E_NOT_FOUND) {
        /* The row stays marked: the next start (replay) tries again. */
        log_warn("gc: deleting %s failed: %s", req->key,
                 req->status < 0 ? strerror(-req->status) : "backend unavailable");
        rp->dbw.apply = NULL;
    }
    if (!rp->dbw.apply) {
        struct gc *gc = rp->gc;
        struct gc_reap **pp = &gc->reaping;
        while (*pp != rp)
            pp = &(*pp)->next;
        *pp = rp->next;
        free(rp);
        gc_reaped(gc);
        return;
    }
    db_write(rp->gc->db, &rp->dbw);
}

void gc_reap(struct gc *gc)
{
    uint64_t oldest = store_oldest_op(gc->st);

    for (struct gc_reap *rp = gc->reaping; rp; rp = rp->next) {
        if (rp->running || rp->barrier > oldest)
            continue;
        rp->running = true;
        if (db_pack_key(gc->db, rp->seq, rp->del.req.key, sizeof(rp->del.req.key)) < 0)
            continue; /* no such writer: cannot happen for a pack the database names */
        rp->del.req.cb = reap_deleted;
        rp->dbw.apply = reap_apply;
        rp->dbw.done = reap_dropped;
        if (backend_del(gc->be, &rp->del) < 0)
            rp->running = false; /* tried again when the next operation ends */
    }
}

int gc_reap_later(struct gc *gc, uint64_t seq)
{
    struct gc_reap *rp = calloc(1, sizeof(*rp));

    if (!rp)
        return -ENOMEM;
    rp->gc = gc;
    rp->seq = seq;
    /* Operations that started before the commit may hold the old locations. */
    rp->barrier = store_next_op(gc->st);
    rp->next = gc->reaping;
    gc->reaping = rp;
    gc_reap(gc);
    return 0;
}

void gc_reap_finished(struct gc *gc)
{
    for (size_t i = 0; i < gc->nfinished; i++)
        if (gc_reap_later(gc, gc->finished[i]) < 0)
            log_warn("gc: pack %016" PRIx64 " goes at the next start", gc->finished[i]);
    free(gc->finished);
    gc->finished = NULL;
    gc->nfinished = 0;
}

bool gc_reaps_running(const struct gc *gc)
{
    for (const struct gc_reap *rp = gc->reaping; rp; rp = rp->next)
        if (rp->running)
            return true;
    return false;
}
