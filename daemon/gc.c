/*
 * Garbage collection: removes the chunks no document references.
 *
 * The danger is an add running at the same time that will reference such a
 * chunk: it may have found the chunk already stored (and will not write it),
 * or it may be writing it anew. gc therefore
 *   1. lists the unreferenced chunks and skips those pinned by running adds;
 *   2. deletes their rows, each only if still unreferenced, in one commit;
 *   3. waits for every encode job that started before that commit, because
 *      those may have seen the rows and will pin the chunks when they end;
 *   4. deletes the objects of the chunks no add has pinned since step 1 (adds
 *      record what they pin while a gc runs), marking them as
 *      being deleted so that an add wanting one now writes it only after the
 *      deletion (add.c put_object). Any add that looks a chunk up after step 2
 *      finds no row and writes the chunk itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

#define GC_MAX_DELETES 16

struct gc_waiter {
    store_gc_cb *done;
    void *userdata;
    struct gc_waiter *next;
};

struct store_gc {
    struct store *st;
    struct gc_waiter *waiters;
    uv_work_t work;
    int status;
    struct db_chunk *cands;
    bool *dropped; /* the row of cands[i] was deleted in step 2 */
    size_t ncands;
    struct db_write dbw;
    bool draining;
    uint64_t drain_gen;
    size_t next; /* next candidate whose object to delete */
    unsigned deletes_running;
    struct store_gc_result res;
    struct pinset touched; /* chunks adds pinned while this gc ran */
    bool *kept;            /* dropped in step 2, but an add wanted it: its row comes back */
    bool restoring;
};

struct gc_delete {
    struct backend_req req;
    struct store_gc *gc;
    size_t index;
};

static void gc_finish(struct store_gc *gc)
{
    struct store *st = gc->st;
    struct gc_waiter *w = gc->waiters;

    st->gc = NULL;
    if (gc->status == 0)
        log_info("gc: removed %llu chunks, %llu bytes", (unsigned long long)gc->res.chunks_removed,
                 (unsigned long long)gc->res.bytes_freed);
    while (w) {
        struct gc_waiter *next = w->next;
        w->done(w->userdata, gc->status, &gc->res);
        free(w);
        w = next;
    }
    free(gc->cands);
    free(gc->dropped);
    free(gc->kept);
    pinset_free(&gc->touched);
    free(gc);
}

/*
 * A chunk gc dropped but kept for an add gets its row back (unreferenced,
 * unless the add committed meanwhile): if that add fails, the next gc still
 * sees the chunk instead of losing track of its object.
 */
static int restore_apply(struct db_txn *txn, struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);

    for (size_t i = 0; i < gc->ncands; i++) {
        if (gc->kept[i]) {
            int r = db_txn_orphan_chunk(txn, &gc->cands[i]);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

static void restore_done(struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);

    if (w->status != 0 && gc->status == 0)
        gc->status = w->status < 0 ? w->status : -EIO;
    gc_finish(gc);
}

static void gc_end(struct store_gc *gc)
{
    bool any = false;

    for (size_t i = 0; gc->kept && i < gc->ncands && !any; i++)
        any = gc->kept[i];
    if (!any || gc->restoring) {
        gc_finish(gc);
        return;
    }
    gc->restoring = true;
    gc->dbw.apply = restore_apply;
    gc->dbw.done = restore_done;
    db_write(gc->st->db, &gc->dbw);
}

int store_gc_touch(struct store *st, const uint8_t hash[PROTO_HASH_LEN])
{
    return pinset_has(&st->gc->touched, hash) ? 0 : pinset_add(&st->gc->touched, hash);
}

bool store_gc_touched(const struct store *st, const uint8_t hash[PROTO_HASH_LEN])
{
    return st->gc && pinset_has(&st->gc->touched, hash);
}

static void delete_more(struct store_gc *gc);

static void delete_done(struct backend_req *req)
{
    struct gc_delete *del = container_of(req, struct gc_delete, req);
    struct store_gc *gc = del->gc;
    const struct db_chunk *c = &gc->cands[del->index];

    if (req->status == 0 || req->status == BACKEND_E_NOT_FOUND) {
        gc->res.chunks_removed++;
        gc->res.bytes_freed += c->stored_size;
    } else {
        /* The row is gone, so the object is only wasted space; a later gc cannot see it. */
        log_warn("gc: deleting %s failed: %s", req->key,
                 req->status < 0 ? strerror(-req->status) : "backend unavailable");
    }
    gc->deletes_running--;
    store_deletion_done(gc->st, c->hash);
    free(del);
    delete_more(gc);
}

static void delete_more(struct store_gc *gc)
{
    struct store *st = gc->st;

    while (gc->deletes_running < GC_MAX_DELETES && gc->next < gc->ncands) {
        size_t i = gc->next++;
        const struct db_chunk *c = &gc->cands[i];
        /*
         * Used by an add since this gc began (pinned now, or pinned, committed
         * and released): its commit restored the row, so the object stays.
         */
        if (!gc->dropped[i])
            continue;
        if (pinset_has(&st->pins, c->hash) || store_gc_touched(st, c->hash)) {
            gc->kept[i] = true;
            continue;
        }
        struct gc_delete *del = calloc(1, sizeof(*del));
        if (!del || pinset_add(&st->deleting, c->hash) < 0) {
            free(del);
            gc->status = -ENOMEM;
            break;
        }
        del->gc = gc;
        del->index = i;
        del->req.cb = delete_done;
        store_object_key(del->req.key, sizeof(del->req.key), "chunks", c->hash);
        if (backend_delete(st->be, &del->req) < 0) {
            store_deletion_done(st, c->hash);
            free(del);
            continue;
        }
        gc->deletes_running++;
    }
    if (gc->deletes_running == 0 && (gc->next == gc->ncands || gc->status < 0))
        gc_end(gc);
}

void store_gc_poke(struct store *st)
{
    struct store_gc *gc = st->gc;

    if (gc && gc->draining && st->encodes_running[gc->drain_gen & 1] == 0) {
        gc->draining = false;
        delete_more(gc);
    }
}

static int drop_apply(struct db_txn *txn, struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);

    for (size_t i = 0; i < gc->ncands; i++) {
        if (gc->dropped[i]) { /* marked "try" by drop_start */
            int r = db_txn_drop_chunk(txn, gc->cands[i].hash, &gc->dropped[i]);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

static void drop_done(struct db_write *w)
{
    struct store_gc *gc = container_of(w, struct store_gc, dbw);
    struct store *st = gc->st;

    if (w->status != 0) {
        gc->status = w->status < 0 ? w->status : -EIO;
        gc_finish(gc);
        return;
    }
    /* Encode jobs from now on see the rows gone; wait for the older ones. */
    gc->drain_gen = st->encode_gen++;
    gc->draining = true;
    store_gc_poke(st);
}

static void list_work(uv_work_t *work)
{
    struct store_gc *gc = container_of(work, struct store_gc, work);
    gc->status = db_unreferenced_chunks(gc->st->db, &gc->cands, &gc->ncands);
}

static void list_done(uv_work_t *work, int status)
{
    struct store_gc *gc = container_of(work, struct store_gc, work);
    struct store *st = gc->st;
    size_t tries = 0;

    if (status < 0 && gc->status == 0)
        gc->status = status;
    if (gc->status == 0 && gc->ncands > 0 &&
        (!(gc->dropped = calloc(gc->ncands, sizeof(bool))) ||
         !(gc->kept = calloc(gc->ncands, sizeof(bool)))))
        gc->status = -ENOMEM;
    if (gc->status != 0 || gc->ncands == 0) {
        gc_finish(gc);
        return;
    }
    for (size_t i = 0; i < gc->ncands; i++) {
        gc->dropped[i] = !pinset_has(&st->pins, gc->cands[i].hash);
        tries += gc->dropped[i];
    }
    if (tries == 0) {
        gc_finish(gc);
        return;
    }
    gc->dbw.apply = drop_apply;
    gc->dbw.done = drop_done;
    db_write(st->db, &gc->dbw);
}

int store_gc(struct store *st, store_gc_cb *done, void *userdata)
{
    struct gc_waiter *w = calloc(1, sizeof(*w));
    struct store_gc *gc;
    int r;

    if (!w)
        return -ENOMEM;
    w->done = done;
    w->userdata = userdata;
    if (st->gc) {
        w->next = st->gc->waiters;
        st->gc->waiters = w;
        return 0;
    }
    gc = calloc(1, sizeof(*gc));
    if (!gc) {
        free(w);
        return -ENOMEM;
    }
    gc->st = st;
    gc->waiters = w;
    r = uv_queue_work(st->loop, &gc->work, list_work, list_done);
    if (r < 0) {
        free(w);
        free(gc);
        return r;
    }
    st->gc = gc;
    return 0;
}
