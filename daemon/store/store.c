/*
 * The store object: what it is made of (its caches, and what its owner
 * lends it), the hooks of the parts above it, the registry of running
 * operations that gc's barriers rely on, and small shared helpers.
 */
#include "daemon/store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/store/cache.h"
#include "daemon/base/log.h"
#include "daemon/format/objects.h"
#include "daemon/pack/packer.h"
#include "daemon/readcache/readcache.h"
#include "daemon/format/record.h"
#include "daemon/store/refcache.h"
#include "daemon/store/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

/* Resolved references kept on the loop thread. */
#define STORE_REFCACHE_BYTES (4u * 1024 * 1024)

int store_new(struct store **out, uv_loop_t *loop, struct backend *be, struct db *db,
              struct readcache *rc, const struct store_config *cfg)
{
    struct store *st = calloc(1, sizeof(*st));
    int r;

    if (!st)
        return -ENOMEM;
    st->loop = loop;
    st->be = be;
    st->db = db;
    st->rcache = rc;
    st->cfg = *cfg;
    st->next_op_seq = 1;
    st->test_fail_apply = getenv("CAIRN_TEST_FAIL_APPLY");
    pthread_mutex_init(&st->decoding_lock, NULL);
    pthread_cond_init(&st->decoding_done, NULL);
    *out = st;
    if ((r = cdc_init(&st->cdc, cfg->chunk_min, cfg->chunk_avg, cfg->chunk_max)) < 0 ||
        (r = cache_new(&st->cache, cfg->cache_size)) < 0 ||
        (r = refcache_new(&st->refs, STORE_REFCACHE_BYTES)) < 0 || (r = store_bridge_init(st)) < 0)
        return r;
    return 0;
}

void store_set_writer(struct store *st, struct packer *pk)
{
    st->packer = pk;
}

void store_set_index_hooks(struct store *st, const struct store_index_hooks *hooks)
{
    st->index = hooks ? *hooks : (struct store_index_hooks){0};
}

void store_index_changed(struct store *st, int64_t rowid, char *text, size_t len)
{
    if (st->index.changed)
        st->index.changed(st->index.ctx, rowid, text, len);
    else
        free(text);
}

void store_index_removed(struct store *st)
{
    if (st->index.removed)
        st->index.removed(st->index.ctx);
}

void store_external_changes(struct store *st, const int64_t *rowids, size_t n, bool removed)
{
    refcache_forget_all(st->refs);
    for (size_t i = 0; i < n; i++)
        store_index_changed(st, rowids[i], NULL, 0);
    if (removed)
        store_index_removed(st);
}

void store_set_ops_ended_hook(struct store *st, const struct store_ops_hook *hook)
{
    st->ops_ended = hook ? *hook : (struct store_ops_hook){0};
}

void store_set_entry_floor(struct store *st, uint64_t time_ns)
{
    if (time_ns > st->last_entry_ns)
        st->last_entry_ns = time_ns;
}

void store_set_bucket_seen(struct store *st, uint64_t mono_ms)
{
    st->bucket_seen_ms = mono_ms;
}

void store_set_gc_grace(struct store *st, uint64_t grace_ms)
{
    st->gc_grace_ms = grace_ms;
}

uint64_t store_write_deadline(const struct store *st)
{
    return st->gc_grace_ms && st->bucket_seen_ms ? st->bucket_seen_ms + st->gc_grace_ms / 2 : 0;
}

static void on_bridge_closed(uv_handle_t *h)
{
    free(container_of((uv_async_t *)h, struct store, bridge_async));
}

struct store *store_free(struct store *st)
{
    if (!st)
        return NULL;
    st->refs = refcache_free(st->refs);
    st->cache = cache_free(st->cache);
    pthread_cond_destroy(&st->decoding_done);
    pthread_mutex_destroy(&st->decoding_lock);
    /*
     * The bridge's handle is part of the store, and libuv uses a closing
     * handle until its close callback has run: the memory goes there.
     */
    if (!store_bridge_close(st, on_bridge_closed))
        free(st);
    return NULL;
}

unsigned store_active(struct store *st)
{
    return st->active;
}

void store_get_stats(struct store *st, struct store_stats *out)
{
    struct cache_stats cs;

    cache_get_stats(st->cache, &cs);
    memset(out, 0, sizeof(*out));
    out->cache_bytes = cs.bytes;
    out->cache_max = cs.max_bytes;
    out->cache_hits = cs.hits;
    out->cache_misses = cs.misses;
    if (st->rcache) {
        struct readcache_stats rs;
        readcache_get_stats(st->rcache, &rs);
        out->read_cache = true;
        out->rc_bytes = rs.bytes;
        out->rc_max = rs.max_bytes;
        out->rc_hits = rs.hits;
        out->rc_misses = rs.misses;
        out->rc_fetched = rs.fetched;
        out->rc_damaged = rs.damaged;
    }
    out->open_pack = st->packer ? packer_open_seq(st->packer) : 0;
    if (st->be)
        out->backend = st->be->stats;
}

/* ---- running operations ---- */

void store_op_begin(struct store *st, struct store_op *op)
{
    op->seq = st->next_op_seq++;
    op->started_ms = uv_now(st->loop);
    op->next = NULL;
    op->prev = st->ops_tail;
    if (st->ops_tail)
        st->ops_tail->next = op;
    else
        st->ops_head = op;
    st->ops_tail = op;
}

void store_op_end(struct store *st, struct store_op *op)
{
    bool was_oldest = st->ops_head == op;

    if (op->prev)
        op->prev->next = op->next;
    else
        st->ops_head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        st->ops_tail = op->prev;
    op->prev = op->next = NULL;
    /* gc may be waiting for the oldest operations to end. */
    if (was_oldest && st->ops_ended.fn)
        st->ops_ended.fn(st->ops_ended.ctx);
}

const struct store_op *store_first_op(const struct store *st)
{
    return st->ops_head;
}

uint64_t store_oldest_op(const struct store *st)
{
    return st->ops_head ? st->ops_head->seq : st->next_op_seq;
}

uint64_t store_oldest_holder(const struct store *st)
{
    for (const struct store_op *op = st->ops_head; op; op = op->next)
        if (!op->retried)
            return op->seq;
    return st->next_op_seq;
}

size_t store_holders_before(const struct store *st, uint64_t seq, uint64_t *oldest_started_ms)
{
    size_t n = 0;

    for (const struct store_op *op = st->ops_head; op && op->seq < seq; op = op->next) {
        if (op->retried)
            continue;
        if (n++ == 0)
            *oldest_started_ms = op->started_ms;
    }
    return n;
}

uint64_t store_next_op(const struct store *st)
{
    return st->next_op_seq;
}

/* ---- helpers ---- */

bool store_test_fails_apply(const struct store *st, const char *name)
{
    return st->test_fail_apply && *st->test_fail_apply && name &&
           strcmp(name, st->test_fail_apply) == 0;
}

uint64_t store_entry_time(struct store *st)
{
    struct timespec ts;
    uint64_t now;

    clock_gettime(CLOCK_REALTIME, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    /* The journal must stay ordered even if the wall clock steps back. */
    st->last_entry_ns = now > st->last_entry_ns ? now : st->last_entry_ns + 1;
    return st->last_entry_ns;
}

int store_entry_record(struct store *st, const struct entry *e, struct packer_rec *rec)
{
    uint8_t *raw;
    size_t len;
    int r;

    if ((r = objects_entry_encode(e, &raw, &len)) < 0)
        return r;
    r = record_seal_build(PACK_REC_ENTRY, raw, len, st->cfg.compression_level, &rec->bytes,
                          &rec->len, rec->id, &rec->idx);
    free(raw);
    if (r < 0)
        return r;
    rec->type = PACK_REC_ENTRY;
    rec->nidx = 1;
    memcpy(rec->doc, e->doc, PROTO_HASH_LEN);
    rec->time_ns = e->time_ns;
    rec->op = e->op;
    return 0;
}

void store_rec_clear(struct packer_rec *rec)
{
    free(rec->bytes);
    free(rec->idx);
    memset(rec, 0, sizeof(*rec));
}

int store_commit_status(int status)
{
    return status == PACKER_E_UNAVAILABLE ? STORE_E_UNAVAILABLE : store_status_from_db(status);
}

int store_status_from_db(int status)
{
    if (status == DB_E_NOT_FOUND)
        return STORE_E_NOT_FOUND;
    if (status == DB_E_AMBIGUOUS)
        return STORE_E_AMBIGUOUS;
    return status;
}

int store_map_read_status(int status)
{
    if (status == BACKEND_E_UNAVAILABLE)
        return STORE_E_UNAVAILABLE;
    if (status == BACKEND_E_NOT_FOUND || status == BACKEND_E_TOO_LARGE)
        return STORE_E_INTEGRITY; /* a record the metadata promises is missing or mangled */
    return status;
}
