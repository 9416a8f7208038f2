#include "daemon/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/sha.h>

#include "compress/compress.h"
#include "daemon/log.h"
#include "daemon/objects.h"
#include "daemon/store-int.h"
#include "proto/util.h"
#include "storage/backend.h"

int store_new(struct store **out, uv_loop_t *loop, struct backend *be, struct db *db,
              const struct store_config *cfg)
{
    struct store *st = calloc(1, sizeof(*st));
    int r;

    if (!st)
        return -ENOMEM;
    r = cdc_init(&st->cdc, cfg->chunk_min, cfg->chunk_avg, cfg->chunk_max);
    if (r < 0) {
        free(st);
        return r;
    }
    st->loop = loop;
    st->be = be;
    st->db = db;
    st->cfg = *cfg;
    *out = st;
    return 0;
}

struct store *store_free(struct store *st)
{
    if (st) {
        pinset_free(&st->pins);
        pinset_free(&st->deleting);
        free(st);
    }
    return NULL;
}

int store_status_from_db(int status)
{
    if (status == DB_E_NOT_FOUND)
        return STORE_E_NOT_FOUND;
    if (status == DB_E_AMBIGUOUS)
        return STORE_E_AMBIGUOUS;
    return status;
}

unsigned store_active(struct store *st)
{
    return st->active;
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

void store_object_key(char *key, size_t len, const char *dir, const uint8_t hash[PROTO_HASH_LEN])
{
    char hex[PROTO_HASH_HEX + 1];
    proto_hex_encode(hash, PROTO_HASH_LEN, hex);
    snprintf(key, len, "%s/%s", dir, hex);
}

int store_decode_chunk(const uint8_t *obj, size_t len, const struct db_chunk *c, uint8_t **raw)
{
    uint8_t hash[PROTO_HASH_LEN];
    size_t raw_len;

    *raw = malloc(c->size ? c->size : 1);
    if (!*raw)
        return -ENOMEM;
    /* Never hand out bytes that do not hash to the id the manifest names. */
    if (compress_decode(obj, len, STORE_MAX_CHUNK, *raw, c->size, &raw_len) == 0 &&
        raw_len == c->size) {
        SHA256(*raw, raw_len, hash);
        if (memcmp(hash, c->hash, PROTO_HASH_LEN) == 0)
            return 0;
    }
    free(*raw);
    *raw = NULL;
    return STORE_E_INTEGRITY;
}

int store_map_read_status(int status)
{
    if (status == BACKEND_E_UNAVAILABLE)
        return STORE_E_UNAVAILABLE;
    if (status == BACKEND_E_NOT_FOUND || status == BACKEND_E_TOO_LARGE)
        return STORE_E_INTEGRITY; /* an object the metadata promises is missing or mangled */
    return status;
}

/* ---- pin sets: open addressing on the (already uniform) hash bytes ---- */

struct pin {
    uint8_t hash[PROTO_HASH_LEN];
    uint32_t count; /* 0: empty slot */
};

static size_t pin_slot(const struct pinset *s, const uint8_t *hash)
{
    uint64_t h;
    memcpy(&h, hash, sizeof(h));
    return (size_t)h & (s->cap - 1);
}

static struct pin *pin_find(const struct pinset *s, const uint8_t *hash)
{
    if (s->cap == 0)
        return NULL;
    for (size_t i = pin_slot(s, hash);; i = (i + 1) & (s->cap - 1)) {
        struct pin *p = &s->slots[i];
        if (p->count == 0)
            return NULL;
        if (memcmp(p->hash, hash, PROTO_HASH_LEN) == 0)
            return p;
    }
}

static void pin_insert(struct pinset *s, const uint8_t *hash, uint32_t count)
{
    size_t i = pin_slot(s, hash);
    while (s->slots[i].count != 0)
        i = (i + 1) & (s->cap - 1);
    memcpy(s->slots[i].hash, hash, PROTO_HASH_LEN);
    s->slots[i].count = count;
}

int pinset_add(struct pinset *s, const uint8_t hash[PROTO_HASH_LEN])
{
    struct pin *p = pin_find(s, hash);

    if (p) {
        p->count++;
        return 0;
    }
    if ((s->used + 1) * 2 > s->cap) {
        struct pinset grown = {calloc(s->cap ? s->cap * 2 : 64, sizeof(struct pin)),
                               s->cap ? s->cap * 2 : 64, s->used};
        if (!grown.slots)
            return -ENOMEM;
        for (size_t i = 0; i < s->cap; i++) {
            if (s->slots[i].count)
                pin_insert(&grown, s->slots[i].hash, s->slots[i].count);
        }
        free(s->slots);
        *s = grown;
    }
    pin_insert(s, hash, 1);
    s->used++;
    return 0;
}

void pinset_remove(struct pinset *s, const uint8_t hash[PROTO_HASH_LEN])
{
    struct pin *p = pin_find(s, hash);

    if (!p || --p->count > 0)
        return;
    /* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
    size_t hole = (size_t)(p - s->slots);
    for (size_t i = (hole + 1) & (s->cap - 1); s->slots[i].count; i = (i + 1) & (s->cap - 1)) {
        size_t home = pin_slot(s, s->slots[i].hash);
        bool movable = hole <= i ? (home <= hole || home > i) : (home <= hole && home > i);
        if (movable) {
            s->slots[hole] = s->slots[i];
            s->slots[i].count = 0;
            hole = i;
        }
    }
    s->slots[hole].count = 0;
    s->used--;
}

bool pinset_has(const struct pinset *s, const uint8_t hash[PROTO_HASH_LEN])
{
    return pin_find(s, hash) != NULL;
}

void pinset_free(struct pinset *s)
{
    free(s->slots);
    memset(s, 0, sizeof(*s));
}

int store_pin(struct store *st, const uint8_t hash[PROTO_HASH_LEN])
{
    int r = pinset_add(&st->pins, hash);
    if (r == 0 && st->gc && (r = store_gc_touch(st, hash)) < 0)
        pinset_remove(&st->pins, hash);
    return r;
}

/* ---- puts that wait for gc's deletion of the same object ---- */

bool store_wait_deletion(struct store *st, struct store_waiter *w)
{
    if (!pinset_has(&st->deleting, w->hash))
        return false;
    w->next = st->deleting_waiters;
    st->deleting_waiters = w;
    return true;
}

void store_deletion_done(struct store *st, const uint8_t hash[PROTO_HASH_LEN])
{
    struct store_waiter **pp = &st->deleting_waiters, *ready = NULL;

    pinset_remove(&st->deleting, hash);
    if (pinset_has(&st->deleting, hash))
        return;
    while (*pp) {
        struct store_waiter *w = *pp;
        if (memcmp(w->hash, hash, PROTO_HASH_LEN) == 0) {
            *pp = w->next;
            w->next = ready;
            ready = w;
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        struct store_waiter *w = ready;
        ready = w->next;
        w->resume(w);
    }
}

/* ---- get ---- */

struct store_get {
    struct store *st;
    const struct store_get_ops *ops;
    void *userdata;
    char *ref;
    size_t ref_len;
    struct db_doc doc;
    uint32_t next_chunk;
    bool busy, released, sent_first;
    bool prefetched; /* resolve_work also read and decoded the first chunk */
    int status;
    uv_work_t work;
    struct backend_req req;
    uint8_t *raw;
    size_t raw_len;
};

static void get_free(struct store_get *get)
{
    db_doc_clear(&get->doc);
    free(get->ref);
    free(get->raw);
    free(get->req.out);
    get->st->active--;
    free(get);
}

/* Called when a step finished; returns true if the get was released meanwhile (and freed). */
static bool get_step_end(struct store_get *get)
{
    get->busy = false;
    if (get->released) {
        get_free(get);
        return true;
    }
    return false;
}

static void decode_chunk(struct store_get *get);

/*
 * Reads the next chunk in this worker job, when the backend reads cheaply
 * enough for that (backend_read_sync), and decodes it. Sets get->status.
 */
static void read_decode_chunk(struct store_get *get)
{
    char key[BACKEND_MAX_KEY];
    int r;

    store_object_key(key, sizeof(key), "chunks", get->doc.chunks[get->next_chunk].hash);
    r = backend_read_sync(get->st->be, key, compress_bound(STORE_MAX_CHUNK), &get->req.out,
                          &get->req.out_len);
    if (r != 0) {
        if (r == BACKEND_E_NOT_FOUND)
            log_error("integrity: %s of document %s is missing", key, get->doc.hash);
        get->status = store_map_read_status(r);
        return;
    }
    decode_chunk(get);
}

static void resolve_work(uv_work_t *work)
{
    struct store_get *get = container_of(work, struct store_get, work);

    get->status = db_resolve(get->st->db, get->ref, get->ref_len, DB_WANT_CHUNKS, &get->doc);
    /* The common small document: its first chunk comes back with the lookup, in one job. */
    if (get->status == 0 && get->doc.nchunks > 0 && backend_can_read_sync(get->st->be)) {
        get->prefetched = true;
        read_decode_chunk(get);
    }
}

static void deliver(struct store_get *get, const uint8_t *data, size_t len, bool last)
{
    bool first = !get->sent_first;
    get->sent_first = true;
    get->ops->data(get->userdata, &get->doc, data, len, first, last);
}

static void decode_done(uv_work_t *work, int status);

static void resolve_done(uv_work_t *work, int status)
{
    struct store_get *get = container_of(work, struct store_get, work);

    if (get->prefetched) {
        decode_done(work, status);
        return;
    }
    if (get_step_end(get))
        return;
    if (status < 0 || get->status != 0) {
        get->ops->error(get->userdata, status < 0 ? status : store_status_from_db(get->status));
        return;
    }
    if (get->doc.nchunks == 0)
        deliver(get, NULL, 0, true);
    else
        store_get_next(get);
}

static void decode_work(uv_work_t *work)
{
    decode_chunk(container_of(work, struct store_get, work));
}

static void read_decode_work(uv_work_t *work)
{
    read_decode_chunk(container_of(work, struct store_get, work));
}

/* Decodes get->req.out into get->raw and checks it against the chunk's id. */
static void decode_chunk(struct store_get *get)
{
    const struct db_chunk *c = &get->doc.chunks[get->next_chunk];

    get->status = store_decode_chunk(get->req.out, get->req.out_len, c, &get->raw);
    get->raw_len = c->size;
    free(get->req.out);
    get->req.out = NULL;
}

static void decode_done(uv_work_t *work, int status)
{
    struct store_get *get = container_of(work, struct store_get, work);

    get->prefetched = false;
    if (get_step_end(get))
        return;
    if (status < 0 || get->status != 0) {
        char hex[PROTO_HASH_HEX + 1];
        proto_hex_encode(get->doc.chunks[get->next_chunk].hash, PROTO_HASH_LEN, hex);
        if (get->status == STORE_E_INTEGRITY)
            log_error("integrity: chunk %s of document %s fails its check", hex, get->doc.hash);
        get->ops->error(get->userdata, status < 0 ? status : get->status);
        return;
    }
    get->next_chunk++;
    uint8_t *raw = get->raw;
    get->raw = NULL;
    deliver(get, raw, get->raw_len, get->next_chunk == get->doc.nchunks);
    free(raw);
}

static void chunk_read_done(struct backend_req *req)
{
    struct store_get *get = container_of(req, struct store_get, req);
    int r;

    if (req->status != 0) {
        if (get_step_end(get))
            return;
        if (req->status == BACKEND_E_NOT_FOUND)
            log_error("integrity: chunk %s of document %s is missing", req->key, get->doc.hash);
        get->ops->error(get->userdata, store_map_read_status(req->status));
        return;
    }
    if (get->released) {
        get_step_end(get);
        return;
    }
    r = uv_queue_work(get->st->loop, &get->work, decode_work, decode_done);
    if (r < 0) {
        get->busy = false;
        get->ops->error(get->userdata, r);
    }
}

void store_get_next(struct store_get *get)
{
    char hex[PROTO_HASH_HEX + 1];
    int r;

    if (get->busy || get->next_chunk >= get->doc.nchunks)
        return;
    if (backend_can_read_sync(get->st->be)) {
        get->busy = true;
        r = uv_queue_work(get->st->loop, &get->work, read_decode_work, decode_done);
        if (r < 0) {
            get->busy = false;
            get->ops->error(get->userdata, r);
        }
        return;
    }
    proto_hex_encode(get->doc.chunks[get->next_chunk].hash, PROTO_HASH_LEN, hex);
    memset(&get->req, 0, sizeof(get->req));
    snprintf(get->req.key, sizeof(get->req.key), "chunks/%s", hex);
    get->req.max_len = compress_bound(STORE_MAX_CHUNK);
    get->req.cb = chunk_read_done;
    get->busy = true;
    r = backend_get(get->st->be, &get->req);
    if (r < 0) {
        get->busy = false;
        get->ops->error(get->userdata, r);
    }
}

int store_get_start(struct store *st, const char *ref, size_t ref_len,
                    const struct store_get_ops *ops, void *userdata, struct store_get **out)
{
    struct store_get *get = calloc(1, sizeof(*get));
    int r;

    if (!get || !(get->ref = malloc(ref_len + 1))) {
        free(get);
        return -ENOMEM;
    }
    memcpy(get->ref, ref, ref_len);
    get->ref[ref_len] = '\0';
    get->ref_len = ref_len;
    get->st = st;
    get->ops = ops;
    get->userdata = userdata;
    get->busy = true;
    r = uv_queue_work(st->loop, &get->work, resolve_work, resolve_done);
    if (r < 0) {
        free(get->ref);
        free(get);
        return r;
    }
    st->active++;
    *out = get;
    return 0;
}

void store_get_release(struct store_get *get)
{
    if (get->busy) {
        get->released = true; /* freed when the running step ends */
        return;
    }
    get_free(get);
}

/* ---- delete ---- */

struct store_delete {
    struct store *st;
    store_delete_cb *done;
    void *userdata;
    char *ref;
    size_t ref_len;
    uv_work_t work;
    int status;
    struct db_doc doc;
    uint8_t *obj;
    struct backend_req req;
    struct db_write dbw;
    char hash[PROTO_HASH_HEX + 1];
};

static void delete_end(struct store_delete *del, int status)
{
    del->done(del->userdata, status, del->hash);
    db_doc_clear(&del->doc);
    free(del->ref);
    free(del->obj);
    del->st->active--;
    free(del);
}

static int delete_apply(struct db_txn *txn, struct db_write *w)
{
    struct store_delete *del = container_of(w, struct store_delete, dbw);
    char hash[PROTO_HASH_HEX + 1];
    /* By hash: the ref may name another document by now. */
    return db_txn_delete(txn, del->doc.hash, PROTO_HASH_HEX, hash);
}

static void delete_committed(struct db_write *w)
{
    struct store_delete *del = container_of(w, struct store_delete, dbw);
    int status = w->status;

    /* DB_E_NOT_FOUND: deleted meanwhile by someone else. */
    delete_end(del, store_status_from_db(status));
}

static void delete_entry_done(struct backend_req *req)
{
    struct store_delete *del = container_of(req, struct store_delete, req);

    if (req->status != 0) {
        delete_end(del, req->status < 0 ? req->status : STORE_E_UNAVAILABLE);
        return;
    }
    del->dbw.apply = delete_apply;
    del->dbw.done = delete_committed;
    db_write(del->st->db, &del->dbw);
}

static void delete_resolve_work(uv_work_t *work)
{
    struct store_delete *del = container_of(work, struct store_delete, work);
    del->status = db_resolve(del->st->db, del->ref, del->ref_len, 0, &del->doc);
}

static void delete_resolve_done(uv_work_t *work, int status)
{
    struct store_delete *del = container_of(work, struct store_delete, work);
    struct entry e = {.is_delete = true};
    uint8_t key[PROTO_HASH_LEN];
    size_t len;
    int r;

    if (status < 0 || del->status != 0) {
        delete_end(del, status < 0 ? status : store_status_from_db(del->status));
        return;
    }
    memcpy(del->hash, del->doc.hash, sizeof(del->hash));
    e.time_ns = store_entry_time(del->st);
    proto_hex_decode(del->doc.hash, PROTO_HASH_HEX, e.doc, PROTO_HASH_LEN);
    r = objects_entry_encode(&e, del->st->cfg.compression_level, &del->obj, &len, key);
    if (r < 0) {
        delete_end(del, r);
        return;
    }
    store_object_key(del->req.key, sizeof(del->req.key), "entries", key);
    del->req.data = del->obj;
    del->req.len = len;
    del->req.cb = delete_entry_done;
    r = backend_put(del->st->be, &del->req);
    if (r < 0)
        delete_end(del, r);
}

int store_delete(struct store *st, const char *ref, size_t ref_len, store_delete_cb *done,
                 void *userdata)
{
    struct store_delete *del = calloc(1, sizeof(*del));
    int r;

    if (!del || !(del->ref = strndup(ref, ref_len))) {
        free(del);
        return -ENOMEM;
    }
    del->st = st;
    del->done = done;
    del->userdata = userdata;
    del->ref_len = ref_len;
    r = uv_queue_work(st->loop, &del->work, delete_resolve_work, delete_resolve_done);
    if (r < 0) {
        free(del->ref);
        free(del);
        return r;
    }
    st->active++;
    return 0;
}
