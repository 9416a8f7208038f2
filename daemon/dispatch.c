#include "daemon/dispatch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/conn.h"
#include "daemon/daemon.h"
#include "daemon/db.h"
#include "daemon/log.h"
#include "daemon/search.h"
#include "daemon/store.h"
#include "proto/util.h"
#include "storage/backend.h"

#define LIST_PAGE 500

enum op_kind {
    OP_ADD,
    OP_GET,
    OP_DELETE,
    OP_LIST,
    OP_STAT,
    OP_STATUS,
    OP_SEARCH,
    OP_GC,
    OP_VERIFY,
};

struct op {
    struct request base;
    enum op_kind kind;
    struct daemon *d;
    bool abandoned; /* the connection is gone; a running job frees the op */
    bool job_running;
    int status;
    /* add */
    struct store_add *add;
    bool stream_open; /* more data frames are expected */
    bool add_full;
    /* get */
    struct store_get *get;
    /* delete, get, stat */
    char *ref;
    size_t ref_len;
    /* list */
    char *tag;
    uint64_t limit, listed;
    char after[PROTO_HASH_HEX + 1];
    struct db_doc *docs;
    size_t ndocs;
    /* stat, status */
    struct db_doc doc;
    struct db_totals totals;
    /* search */
    struct db_search_params search;
    char *query, *name_glob, *mime;
    char **tags;
    size_t ntags;
    struct db_hit *hits;
    size_t nhits;
    const char *search_msg;
    uv_work_t work;
};

static const char *const op_names[] = {"hello", "add",    "data",   "get", "delete", "list",
                                       "stat",  "status", "search", "gc",  "verify"};

static void free_strings(char **v, size_t n);

static struct op *op_of(struct request *req)
{
    return container_of(req, struct op, base);
}

static void op_free(struct op *op)
{
    free(op->ref);
    free(op->tag);
    db_docs_free(op->docs, op->ndocs);
    db_doc_clear(&op->doc);
    free(op->query);
    free(op->name_glob);
    free(op->mime);
    free_strings(op->tags, op->ntags);
    db_hits_free(op->hits, op->nhits);
    free(op);
}

/* Removes the op from its connection and frees it, unless a worker job still uses it. */
static void op_finish(struct op *op)
{
    if (!op->abandoned)
        conn_request_remove(op->base.conn, &op->base);
    op->abandoned = true;
    if (!op->job_running)
        op_free(op);
}

/* The protocol error code and message for a store or database status. */
static enum proto_error error_code(int status, const char **msg)
{
    switch (status) {
    case STORE_E_NOT_FOUND:
        *msg = "not found";
        return PROTO_E_NOT_FOUND;
    case STORE_E_AMBIGUOUS:
        *msg = "hash prefix matches more than one document";
        return PROTO_E_AMBIGUOUS;
    case STORE_E_INTEGRITY:
        *msg = "stored data failed its integrity check";
        return PROTO_E_INTEGRITY;
    case STORE_E_SIZE:
        *msg = "content size differs from the announced size";
        return PROTO_E_BAD_REQUEST;
    case STORE_E_TOO_LARGE:
        *msg = "document larger than the 1 TiB limit";
        return PROTO_E_TOO_LARGE;
    case STORE_E_UNAVAILABLE:
        *msg = "the storage backend is unavailable";
        return PROTO_E_BACKEND_UNAVAILABLE;
    case -ENOMEM:
    case -ENOBUFS:
        *msg = "out of memory";
        return PROTO_E_BUSY;
    default:
        break;
    }
    *msg = status < 0 ? strerror(-status) : "storage error";
    return PROTO_E_STORAGE;
}

static void reply_status_error(struct op *op, int status)
{
    const char *msg;
    enum proto_error code = error_code(status, &msg);

    reply_error(op->base.conn, op->base.id, code, msg);
}

/* ---- field validation ---- */

/* Copies a str field into a new C string; NULL when absent. -EINVAL when invalid. */
static int get_string(const msgpack_object *map, const char *key, size_t max, bool allow_empty,
                      char **out)
{
    const char *p;
    size_t len;
    int r = proto_get_str(map, key, &p, &len);

    *out = NULL;
    if (r == PROTO_MISSING)
        return 0;
    if (r < 0 || len > max || (!allow_empty && len == 0) || memchr(p, '\0', len))
        return -EINVAL;
    *out = strndup(p, len);
    return *out ? 0 : -ENOMEM;
}

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static int copy_str_obj(const msgpack_object *o, size_t max, char **out)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 || o->via.str.size > max ||
        memchr(o->via.str.ptr, '\0', o->via.str.size))
        return -EINVAL;
    *out = strndup(o->via.str.ptr, o->via.str.size);
    return *out ? 0 : -ENOMEM;
}

static const char *parse_add_params(const msgpack_object *map, struct store_add_params *p)
{
    const msgpack_object *o;
    uint64_t size;
    int r;

    memset(p, 0, sizeof(*p));
    if (get_string(map, "name", PROTO_MAX_NAME, true, &p->name))
        return "name must be a string of at most 4096 bytes without NUL";
    if (get_string(map, "mime", PROTO_MAX_MIME, false, &p->mime))
        return "mime must be a non-empty string of at most 255 bytes";
    if (!p->mime && !(p->mime = strdup("application/octet-stream")))
        return "out of memory";
    if ((o = proto_map_get(map, "tags"))) {
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PROTO_MAX_TAGS)
            return "tags must be an array of at most 64 strings";
        p->tags = calloc(o->via.array.size + 1, sizeof(char *));
        if (!p->tags)
            return "out of memory";
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (copy_str_obj(&o->via.array.ptr[i], PROTO_MAX_TAG, &p->tags[p->ntags]))
                return "each tag must be a non-empty string of at most 256 bytes";
            p->ntags++;
        }
    }
    if ((o = proto_map_get(map, "meta"))) {
        if (o->type != MSGPACK_OBJECT_MAP || o->via.map.size > PROTO_MAX_META)
            return "meta must be a map of at most 64 entries";
        p->meta_keys = calloc(o->via.map.size + 1, sizeof(char *));
        p->meta_values = calloc(o->via.map.size + 1, sizeof(char *));
        if (!p->meta_keys || !p->meta_values)
            return "out of memory";
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *v = &o->via.map.ptr[i].val;
            if (copy_str_obj(&o->via.map.ptr[i].key, PROTO_MAX_META_KEY, &p->meta_keys[i]))
                return "meta keys must be non-empty strings of at most 256 bytes";
            p->nmeta++;
            if (v->type != MSGPACK_OBJECT_STR || v->via.str.size > PROTO_MAX_META_VALUE ||
                memchr(v->via.str.ptr, '\0', v->via.str.size))
                return "meta values must be strings of at most 4096 bytes";
            if (!(p->meta_values[i] = strndup(v->via.str.ptr, v->via.str.size)))
                return "out of memory";
        }
    }
    r = proto_get_uint(map, "size", &size);
    if (r < 0)
        return "size must be an unsigned integer";
    if (r == 0) {
        p->has_size = true;
        p->size = size;
    }
    return NULL;
}

static void params_free(struct store_add_params *p)
{
    free(p->name);
    free(p->mime);
    free_strings(p->tags, p->ntags);
    /* Values may be one short of keys when validation stopped between them. */
    for (size_t i = 0; i <= p->nmeta && p->meta_keys; i++)
        free(p->meta_keys[i]);
    free(p->meta_keys);
    for (size_t i = 0; i <= p->nmeta && p->meta_values; i++)
        free(p->meta_values[i]);
    free(p->meta_values);
}

/* Reads `data` and `more`; -EINVAL when mistyped. */
static int get_data(const msgpack_object *map, const uint8_t **data, size_t *len, bool *more)
{
    int r = proto_get_bin(map, "data", data, len);
    if (r == PROTO_MISSING) {
        *data = NULL;
        *len = 0;
    } else if (r < 0) {
        return -EINVAL;
    }
    *more = false;
    return proto_get_bool(map, "more", more) < 0 ? -EINVAL : 0;
}

static struct op *op_new(struct conn *c, uint64_t id, enum op_kind kind)
{
    struct op *op = calloc(1, sizeof(*op));
    if (!op) {
        reply_error(c, id, PROTO_E_BUSY, "out of memory");
        return NULL;
    }
    op->kind = kind;
    op->d = c->d;
    op->base.id = id;
    conn_request_add(c, &op->base);
    return op;
}

/* Runs `work` on a worker thread and `done` on the loop. */
static void op_queue(struct op *op, uv_work_cb work, uv_after_work_cb done)
{
    int r = uv_queue_work(&op->d->loop, &op->work, work, done);
    if (r < 0) {
        reply_error(op->base.conn, op->base.id, PROTO_E_INTERNAL, uv_strerror(r));
        op_finish(op);
        return;
    }
    op->job_running = true;
}

/* Common tail of every worker job: returns false when the op was abandoned (and is now freed). */
static bool op_job_end(struct op *op)
{
    op->job_running = false;
    if (op->abandoned) {
        op_free(op);
        return false;
    }
    return true;
}

/* ---- hello ---- */

static void do_hello(struct conn *c, uint64_t id, const msgpack_object *map)
{
    const msgpack_object *v = proto_map_get(map, "versions");
    uint64_t chosen = 0;
    struct reply r;

    if (!v) {
        chosen = PROTO_VERSION;
    } else if (v->type != MSGPACK_OBJECT_ARRAY) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "versions must be an array of integers");
        return;
    } else {
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            const msgpack_object *e = &v->via.array.ptr[i];
            if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
                reply_error(c, id, PROTO_E_BAD_REQUEST, "versions must be an array of integers");
                return;
            }
            if (e->via.u64 >= PROTO_MIN_VERSION && e->via.u64 <= PROTO_VERSION &&
                e->via.u64 > chosen)
                chosen = e->via.u64;
        }
    }
    if (chosen == 0) {
        reply_error(c, id, PROTO_E_UNSUPPORTED_VERSION, "this daemon speaks protocol version 1");
        return;
    }
    reply_begin(&r, id, true, 5);
    proto_pack_cstr(&r.pk, "version");
    msgpack_pack_uint64(&r.pk, chosen);
    proto_pack_cstr(&r.pk, "server");
    proto_pack_cstr(&r.pk, "cairnd/" CAIRN_VERSION);
    proto_pack_cstr(&r.pk, "max_frame");
    msgpack_pack_uint32(&r.pk, PROTO_MAX_FRAME);
    proto_pack_cstr(&r.pk, "max_data");
    msgpack_pack_uint32(&r.pk, PROTO_MAX_DATA);
    proto_pack_cstr(&r.pk, "ops");
    msgpack_pack_array(&r.pk, ARRAY_SIZE(op_names));
    for (size_t i = 0; i < ARRAY_SIZE(op_names); i++)
        proto_pack_cstr(&r.pk, op_names[i]);
    reply_send(c, &r);
}

/* ---- add ---- */

static void add_done(void *userdata, int status, const struct store_add_result *res)
{
    struct op *op = userdata;
    struct conn *c = op->base.conn;

    op->add = NULL;
    if (op->add_full) {
        op->add_full = false;
        c->full_adds--;
    }
    if (status != 0) {
        reply_status_error(op, status);
    } else {
        struct reply r;
        reply_begin(&r, op->base.id, true, 5);
        proto_pack_cstr(&r.pk, "hash");
        proto_pack_cstr(&r.pk, res->hash);
        proto_pack_cstr(&r.pk, "name");
        proto_pack_cstr(&r.pk, res->name);
        proto_pack_cstr(&r.pk, "size");
        msgpack_pack_uint64(&r.pk, res->size);
        proto_pack_cstr(&r.pk, "stored_size");
        msgpack_pack_uint64(&r.pk, res->stored_size);
        proto_pack_cstr(&r.pk, "new");
        if (res->created)
            msgpack_pack_true(&r.pk);
        else
            msgpack_pack_false(&r.pk);
        reply_send(c, &r);
    }
    /* A failed add whose client is still streaming keeps its id until the last frame. */
    if (!op->stream_open)
        op_finish(op);
    else
        conn_kick(c);
}

static void add_ready(void *userdata)
{
    struct op *op = userdata;
    if (op->add_full) {
        op->add_full = false;
        op->base.conn->full_adds--;
    }
    conn_kick(op->base.conn);
}

static const struct store_add_ops add_ops = {
    .done = add_done,
    .ready = add_ready,
};

/* Feeds one piece of an add's content; `op` may be finished when this returns. */
static void add_feed(struct op *op, const uint8_t *data, size_t len, bool more)
{
    struct conn *c = op->base.conn;

    op->stream_open = more;
    if (!op->add) {
        /* The add already failed and replied: swallow the rest of its stream. */
        if (!more)
            op_finish(op);
        return;
    }
    if (!store_add_write(op->add, data, len, !more))
        return; /* ended: add_done has run */
    if (store_add_full(op->add) && !op->add_full) {
        op->add_full = true;
        c->full_adds++;
    }
}

static void do_add(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct store_add_params p;
    const char *problem = parse_add_params(map, &p);
    const uint8_t *data;
    size_t len;
    bool more;
    struct op *op;
    int r;

    if (!problem && get_data(map, &data, &len, &more) < 0)
        problem = "data must be binary and more a boolean";
    if (problem) {
        params_free(&p);
        reply_error(c, id, PROTO_E_BAD_REQUEST, problem);
        return;
    }
    op = op_new(c, id, OP_ADD);
    if (!op) {
        params_free(&p);
        return;
    }
    r = store_add_begin(c->d->store, &p, &add_ops, op, &op->add);
    if (r < 0) {
        reply_status_error(op, r);
        op_finish(op);
        return;
    }
    add_feed(op, data, len, more);
}

static void do_data(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct request *req = conn_request_find(c, id);
    struct op *op = req ? op_of(req) : NULL;
    const uint8_t *data;
    size_t len;
    bool more;

    if (!op || op->kind != OP_ADD || !op->stream_open) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "data for no open add stream");
        return;
    }
    if (get_data(map, &data, &len, &more) < 0) {
        /* The stream is broken: fail the add now rather than store something else. */
        reply_error(c, id, PROTO_E_BAD_REQUEST, "data must be binary and more a boolean");
        op->stream_open = false;
        if (op->add) {
            store_add_abort(op->add);
            op->add = NULL;
            if (op->add_full) {
                op->add_full = false;
                c->full_adds--;
            }
        }
        op_finish(op);
        return;
    }
    add_feed(op, data, len, more);
}

/* ---- get ---- */

static void get_data_cb(void *userdata, const struct db_doc *doc, const uint8_t *data, size_t len,
                        bool first, bool last)
{
    struct op *op = userdata;
    struct conn *c = op->base.conn;
    struct reply r;
    size_t off = 0;

    /* Split pieces larger than a frame's data allowance; always send at least one frame. */
    do {
        size_t n = len - off > PROTO_MAX_DATA ? PROTO_MAX_DATA : len - off;
        bool final = last && off + n == len;
        if (off == 0)
            reply_begin(&r, op->base.id, true, first ? 6 : 2);
        else
            reply_next(&r, op->base.id, true, 2);
        if (first && off == 0) {
            proto_pack_cstr(&r.pk, "hash");
            proto_pack_cstr(&r.pk, doc->hash);
            proto_pack_cstr(&r.pk, "name");
            proto_pack_cstr(&r.pk, doc->name ? doc->name : "");
            proto_pack_cstr(&r.pk, "size");
            msgpack_pack_uint64(&r.pk, doc->size);
            proto_pack_cstr(&r.pk, "mime");
            proto_pack_cstr(&r.pk, doc->mime);
        }
        proto_pack_cstr(&r.pk, "data");
        proto_pack_bin(&r.pk, data ? data + off : (const uint8_t *)"", n);
        proto_pack_cstr(&r.pk, "more");
        if (final)
            msgpack_pack_false(&r.pk);
        else
            msgpack_pack_true(&r.pk);
        reply_end(&r);
        off += n;
    } while (off < len);
    conn_send(c, &r.sbuf);

    if (last) {
        store_get_release(op->get);
        op->get = NULL;
        op_finish(op);
    } else if (c->wqueued < CONN_STREAM_WINDOW) {
        store_get_next(op->get);
    } else {
        conn_wait_drain(c, &op->base);
    }
}

static void get_error_cb(void *userdata, int status)
{
    struct op *op = userdata;

    reply_status_error(op, status);
    store_get_release(op->get);
    op->get = NULL;
    op_finish(op);
}

static const struct store_get_ops get_ops = {
    .data = get_data_cb,
    .error = get_error_cb,
};

/* Reads the required `ref` field into the op; replies and finishes it on error. */
static bool take_ref(struct op *op, const msgpack_object *map)
{
    const char *p;
    size_t len;
    int r = proto_get_str(map, "ref", &p, &len);

    if (r != 0 || len == 0 || len > PROTO_MAX_REF) {
        reply_error(op->base.conn, op->base.id, PROTO_E_BAD_REQUEST,
                    "ref must be a non-empty string of at most 4096 bytes");
        op_finish(op);
        return false;
    }
    op->ref = strndup(p, len);
    op->ref_len = len;
    if (!op->ref) {
        reply_error(op->base.conn, op->base.id, PROTO_E_BUSY, "out of memory");
        op_finish(op);
        return false;
    }
    return true;
}

static void do_get(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_GET);
    int r;

    if (!op || !take_ref(op, map))
        return;
    r = store_get_start(c->d->store, op->ref, op->ref_len, &get_ops, op, &op->get);
    if (r < 0) {
        reply_status_error(op, r);
        op_finish(op);
    }
}

/* ---- delete ---- */

static void delete_done(void *userdata, int status, const char *hash)
{
    struct op *op = userdata;
    struct reply r;

    if (!op_job_end(op))
        return;
    if (status != 0) {
        reply_status_error(op, status);
    } else {
        reply_begin(&r, op->base.id, true, 1);
        proto_pack_cstr(&r.pk, "hash");
        proto_pack_cstr(&r.pk, hash);
        reply_send(op->base.conn, &r);
    }
    op_finish(op);
}

static void do_delete(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_DELETE);
    int r;

    if (!op || !take_ref(op, map))
        return;
    r = store_delete(c->d->store, op->ref, op->ref_len, delete_done, op);
    if (r < 0) {
        reply_status_error(op, r);
        op_finish(op);
        return;
    }
    op->job_running = true;
}

/* ---- list ---- */

static void list_work(uv_work_t *work)
{
    struct op *op = container_of(work, struct op, work);
    uint64_t page = LIST_PAGE;

    if (op->limit && op->limit - op->listed < page)
        page = op->limit - op->listed;
    db_docs_free(op->docs, op->ndocs);
    op->docs = NULL;
    op->ndocs = 0;
    op->status = db_list(op->d->db, op->tag, op->after, (size_t)page, &op->docs, &op->ndocs);
}

static void pack_strings(msgpack_packer *pk, char **v, size_t n)
{
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        proto_pack_cstr(pk, v[i]);
}

static void list_done(uv_work_t *work, int status)
{
    struct op *op = container_of(work, struct op, work);
    struct conn *c;
    struct reply r;
    bool more;

    if (!op_job_end(op))
        return;
    c = op->base.conn;
    if (status < 0 || op->status != 0) {
        reply_status_error(op, status < 0 ? status : op->status);
        op_finish(op);
        return;
    }
    op->listed += op->ndocs;
    more = op->ndocs == LIST_PAGE && (!op->limit || op->listed < op->limit);
    reply_begin(&r, op->base.id, true, 2);
    proto_pack_cstr(&r.pk, "items");
    msgpack_pack_array(&r.pk, op->ndocs);
    for (size_t i = 0; i < op->ndocs; i++) {
        const struct db_doc *doc = &op->docs[i];
        msgpack_pack_map(&r.pk, 7);
        proto_pack_cstr(&r.pk, "hash");
        proto_pack_cstr(&r.pk, doc->hash);
        proto_pack_cstr(&r.pk, "name");
        proto_pack_cstr(&r.pk, doc->name ? doc->name : "");
        proto_pack_cstr(&r.pk, "size");
        msgpack_pack_uint64(&r.pk, doc->size);
        proto_pack_cstr(&r.pk, "stored_size");
        msgpack_pack_uint64(&r.pk, doc->stored_size);
        proto_pack_cstr(&r.pk, "mime");
        proto_pack_cstr(&r.pk, doc->mime);
        proto_pack_cstr(&r.pk, "created");
        msgpack_pack_int64(&r.pk, doc->created);
        proto_pack_cstr(&r.pk, "tags");
        pack_strings(&r.pk, doc->tags, doc->ntags);
    }
    proto_pack_cstr(&r.pk, "more");
    if (more)
        msgpack_pack_true(&r.pk);
    else
        msgpack_pack_false(&r.pk);
    if (op->ndocs > 0)
        memcpy(op->after, op->docs[op->ndocs - 1].hash, sizeof(op->after));
    reply_send(c, &r);
    if (!more)
        op_finish(op);
    else if (c->wqueued < CONN_STREAM_WINDOW)
        op_queue(op, list_work, list_done);
    else
        conn_wait_drain(c, &op->base);
}

static void do_list(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_LIST);
    const char *after;
    size_t after_len;
    int r;

    if (!op)
        return;
    if (get_string(map, "tag", PROTO_MAX_TAG, false, &op->tag) ||
        proto_get_uint(map, "limit", &op->limit) < 0) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "tag must be a string and limit an integer");
        op_finish(op);
        return;
    }
    r = proto_get_str(map, "after", &after, &after_len);
    if (r < 0 || (r == 0 && (after_len > PROTO_HASH_HEX || !proto_is_hex(after, after_len)))) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "after must be a hash");
        op_finish(op);
        return;
    }
    if (r == 0) {
        for (size_t i = 0; i < after_len; i++)
            op->after[i] = (char)(after[i] >= 'A' && after[i] <= 'F' ? after[i] + 32 : after[i]);
    }
    op_queue(op, list_work, list_done);
}

/* ---- stat ---- */

static void stat_work(uv_work_t *work)
{
    struct op *op = container_of(work, struct op, work);
    op->status = db_resolve(op->d->db, op->ref, op->ref_len, DB_WANT_DETAILS, &op->doc);
}

static void stat_done(uv_work_t *work, int status)
{
    struct op *op = container_of(work, struct op, work);
    const struct db_doc *doc = &op->doc;
    struct reply r;

    if (!op_job_end(op))
        return;
    if (status < 0 || op->status != 0) {
        reply_status_error(op, status < 0 ? status : store_status_from_db(op->status));
        op_finish(op);
        return;
    }
    reply_begin(&r, op->base.id, true, 10);
    proto_pack_cstr(&r.pk, "hash");
    proto_pack_cstr(&r.pk, doc->hash);
    proto_pack_cstr(&r.pk, "name");
    proto_pack_cstr(&r.pk, doc->name ? doc->name : "");
    proto_pack_cstr(&r.pk, "names");
    pack_strings(&r.pk, doc->names, doc->nnames);
    proto_pack_cstr(&r.pk, "size");
    msgpack_pack_uint64(&r.pk, doc->size);
    proto_pack_cstr(&r.pk, "stored_size");
    msgpack_pack_uint64(&r.pk, doc->stored_size);
    proto_pack_cstr(&r.pk, "chunks");
    msgpack_pack_uint32(&r.pk, doc->nchunks);
    proto_pack_cstr(&r.pk, "mime");
    proto_pack_cstr(&r.pk, doc->mime);
    proto_pack_cstr(&r.pk, "created");
    msgpack_pack_int64(&r.pk, doc->created);
    proto_pack_cstr(&r.pk, "tags");
    pack_strings(&r.pk, doc->tags, doc->ntags);
    proto_pack_cstr(&r.pk, "meta");
    msgpack_pack_map(&r.pk, doc->nmeta);
    for (size_t i = 0; i < doc->nmeta; i++) {
        proto_pack_cstr(&r.pk, doc->meta_keys[i]);
        proto_pack_cstr(&r.pk, doc->meta_values[i]);
    }
    reply_send(op->base.conn, &r);
    op_finish(op);
}

static void do_stat(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_STAT);

    if (op && take_ref(op, map))
        op_queue(op, stat_work, stat_done);
}

/* ---- status ---- */

static void status_work(uv_work_t *work)
{
    struct op *op = container_of(work, struct op, work);
    op->status = db_totals(op->d->db, &op->totals);
}

static void status_done(uv_work_t *work, int status)
{
    struct op *op = container_of(work, struct op, work);
    struct daemon *d = op->d;
    struct reply r;

    if (!op_job_end(op))
        return;
    if (status < 0 || op->status != 0) {
        reply_status_error(op, status < 0 ? status : op->status);
        op_finish(op);
        return;
    }
    reply_begin(&r, op->base.id, true, 13);
    proto_pack_cstr(&r.pk, "version");
    proto_pack_cstr(&r.pk, CAIRN_VERSION);
    proto_pack_cstr(&r.pk, "protocol");
    msgpack_pack_uint32(&r.pk, PROTO_VERSION);
    proto_pack_cstr(&r.pk, "pid");
    msgpack_pack_uint64(&r.pk, (uint64_t)getpid());
    proto_pack_cstr(&r.pk, "uptime");
    msgpack_pack_uint64(&r.pk, (uv_now(&d->loop) - d->started_ms) / 1000);
    proto_pack_cstr(&r.pk, "backend");
    proto_pack_cstr(&r.pk, d->backend_desc);
    proto_pack_cstr(&r.pk, "documents");
    msgpack_pack_uint64(&r.pk, op->totals.documents);
    proto_pack_cstr(&r.pk, "logical_bytes");
    msgpack_pack_uint64(&r.pk, op->totals.logical_bytes);
    proto_pack_cstr(&r.pk, "stored_bytes");
    msgpack_pack_uint64(&r.pk, op->totals.stored_bytes);
    proto_pack_cstr(&r.pk, "chunks");
    msgpack_pack_uint64(&r.pk, op->totals.chunks);
    proto_pack_cstr(&r.pk, "unique_bytes");
    msgpack_pack_uint64(&r.pk, op->totals.unique_bytes);
    /* How many times over the content is stored once (dedup) and how much zstd saves. */
    proto_pack_cstr(&r.pk, "dedup_ratio");
    msgpack_pack_double(&r.pk, op->totals.unique_bytes
                                   ? (double)op->totals.logical_bytes / op->totals.unique_bytes
                                   : 1.0);
    proto_pack_cstr(&r.pk, "compression_ratio");
    msgpack_pack_double(&r.pk, op->totals.stored_bytes
                                   ? (double)op->totals.unique_bytes / op->totals.stored_bytes
                                   : 1.0);
    proto_pack_cstr(&r.pk, "connections");
    msgpack_pack_uint32(&r.pk, d->nconns);
    reply_send(op->base.conn, &r);
    op_finish(op);
}

static void do_status(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_STATUS);
    if (op)
        op_queue(op, status_work, status_done);
}

/* ---- search ---- */

#define SEARCH_HITS_PER_FRAME 50

static void search_work(uv_work_t *work)
{
    struct op *op = container_of(work, struct op, work);
    op->status = db_search(op->d->db, &op->search, &op->hits, &op->nhits, &op->search_msg);
}

static void search_done(uv_work_t *work, int status)
{
    struct op *op = container_of(work, struct op, work);
    struct reply r;
    size_t i = 0;

    if (!op_job_end(op))
        return;
    if (status == 0 && op->status == DB_E_INVALID_QUERY) {
        reply_error(op->base.conn, op->base.id, PROTO_E_BAD_REQUEST, op->search_msg);
        op_finish(op);
        return;
    }
    if (status < 0 || op->status != 0) {
        reply_status_error(op, status < 0 ? status : op->status);
        op_finish(op);
        return;
    }
    /* Hits go out in frames of at most 50, so long names cannot outgrow a frame. */
    do {
        size_t n = op->nhits - i > SEARCH_HITS_PER_FRAME ? SEARCH_HITS_PER_FRAME : op->nhits - i;
        if (i == 0)
            reply_begin(&r, op->base.id, true, 2);
        else
            reply_next(&r, op->base.id, true, 2);
        proto_pack_cstr(&r.pk, "hits");
        msgpack_pack_array(&r.pk, n);
        for (size_t k = i; k < i + n; k++) {
            const struct db_hit *h = &op->hits[k];
            msgpack_pack_map(&r.pk, 5);
            proto_pack_cstr(&r.pk, "hash");
            proto_pack_cstr(&r.pk, h->hash);
            proto_pack_cstr(&r.pk, "name");
            proto_pack_cstr(&r.pk, h->name);
            proto_pack_cstr(&r.pk, "score");
            msgpack_pack_double(&r.pk, h->score);
            proto_pack_cstr(&r.pk, "size");
            msgpack_pack_uint64(&r.pk, h->size);
            proto_pack_cstr(&r.pk, "snippet");
            proto_pack_cstr(&r.pk, h->snippet);
        }
        i += n;
        proto_pack_cstr(&r.pk, "more");
        if (i < op->nhits)
            msgpack_pack_true(&r.pk);
        else
            msgpack_pack_false(&r.pk);
        reply_end(&r);
    } while (i < op->nhits);
    conn_send(op->base.conn, &r.sbuf);
    op_finish(op);
}

/* Reads an optional integer that may be negative (dates before 1970). */
static int get_int(const msgpack_object *map, const char *key, bool *has, int64_t *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    *has = false;
    if (!o)
        return 0;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        *out = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else
        return -EINVAL;
    *has = true;
    return 0;
}

static const char *parse_search(struct op *op, const msgpack_object *map)
{
    struct db_search_params *sp = &op->search;
    const msgpack_object *o;
    const char *q;
    size_t qlen;
    bool fuzzy = false;
    int r;

    r = proto_get_str(map, "query", &q, &qlen);
    if (r != 0)
        return "query must be a string";
    if (qlen > SEARCH_MAX_QUERY)
        return "invalid query: longer than 65536 bytes";
    /* Kept with its length: a NUL inside is reported by the query parser. */
    if (!(op->query = malloc(qlen + 1)))
        return "out of memory";
    memcpy(op->query, q, qlen);
    op->query[qlen] = '\0';
    sp->query = op->query;
    sp->query_len = qlen;
    sp->limit = 10;
    if (proto_get_uint(map, "limit", &sp->limit) < 0 || sp->limit < 1 ||
        sp->limit > SEARCH_MAX_LIMIT)
        return "limit must be an integer from 1 to 1000";
    if (proto_get_uint(map, "offset", &sp->offset) < 0)
        return "offset must be an unsigned integer";
    if ((o = proto_map_get(map, "tags"))) {
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > PROTO_MAX_TAGS)
            return "tags must be an array of at most 64 strings";
        if (!(op->tags = calloc(o->via.array.size + 1, sizeof(char *))))
            return "out of memory";
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (copy_str_obj(&o->via.array.ptr[i], PROTO_MAX_TAG, &op->tags[op->ntags]))
                return "each tag must be a non-empty string of at most 256 bytes";
            op->ntags++;
        }
        sp->tags = (const char *const *)op->tags;
        sp->ntags = op->ntags;
    }
    if (get_string(map, "name", PROTO_MAX_NAME, false, &op->name_glob))
        return "name must be a non-empty string of at most 4096 bytes";
    if (get_string(map, "mime", PROTO_MAX_MIME, false, &op->mime))
        return "mime must be a non-empty string of at most 255 bytes";
    sp->name_glob = op->name_glob;
    sp->mime = op->mime;
    if (get_int(map, "after", &sp->has_after, &sp->after) < 0 ||
        get_int(map, "before", &sp->has_before, &sp->before) < 0)
        return "after and before must be integers (Unix seconds)";
    if (proto_get_bool(map, "fuzzy", &fuzzy) < 0)
        return "fuzzy must be a boolean";
    sp->fuzzy = fuzzy;
    return NULL;
}

static void do_search(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_SEARCH);
    const char *problem;

    if (!op)
        return;
    problem = parse_search(op, map);
    if (problem) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, problem);
        op_finish(op);
        return;
    }
    op_queue(op, search_work, search_done);
}

/* ---- gc and verify ---- */

/* The store reports to a maintenance op through these; job_running keeps the op alive. */
static void gc_done(void *userdata, int status, const struct store_gc_result *res)
{
    struct op *op = userdata;
    struct reply r;

    if (!op_job_end(op))
        return;
    if (status != 0) {
        reply_status_error(op, status);
    } else {
        reply_begin(&r, op->base.id, true, 2);
        proto_pack_cstr(&r.pk, "chunks_removed");
        msgpack_pack_uint64(&r.pk, res->chunks_removed);
        proto_pack_cstr(&r.pk, "bytes_freed");
        msgpack_pack_uint64(&r.pk, res->bytes_freed);
        reply_send(op->base.conn, &r);
    }
    op_finish(op);
}

static void do_gc(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_GC);
    int r;

    if (!op)
        return;
    r = store_gc(c->d->store, gc_done, op);
    if (r < 0) {
        reply_status_error(op, r);
        op_finish(op);
        return;
    }
    op->job_running = true;
}

/* At most this many bad chunks are listed in a verify reply; `bad_count` has them all. */
#define VERIFY_MAX_LISTED 1000

static void verify_done(void *userdata, int status, const struct store_verify_result *res)
{
    struct op *op = userdata;
    size_t listed = res->nbad < VERIFY_MAX_LISTED ? res->nbad : VERIFY_MAX_LISTED;
    struct reply r;

    if (!op_job_end(op))
        return;
    if (status != 0) {
        reply_status_error(op, status);
        op_finish(op);
        return;
    }
    reply_begin(&r, op->base.id, true, 4);
    proto_pack_cstr(&r.pk, "chunks_checked");
    msgpack_pack_uint64(&r.pk, res->chunks_checked);
    proto_pack_cstr(&r.pk, "bytes_checked");
    msgpack_pack_uint64(&r.pk, res->bytes_checked);
    proto_pack_cstr(&r.pk, "bad_count");
    msgpack_pack_uint64(&r.pk, res->nbad);
    proto_pack_cstr(&r.pk, "bad");
    msgpack_pack_array(&r.pk, listed);
    for (size_t i = 0; i < listed; i++) {
        const struct store_bad_chunk *bad = &res->bad[i];
        const char *msg;
        size_t ndocs = bad->ndocs < 64 ? bad->ndocs : 64;
        msgpack_pack_map(&r.pk, 3);
        proto_pack_cstr(&r.pk, "chunk");
        proto_pack_cstr(&r.pk, bad->hash);
        proto_pack_cstr(&r.pk, "error");
        proto_pack_cstr(&r.pk, proto_error_name(error_code(bad->status, &msg)));
        proto_pack_cstr(&r.pk, "documents");
        msgpack_pack_array(&r.pk, ndocs);
        for (size_t d = 0; d < ndocs; d++) {
            msgpack_pack_map(&r.pk, 2);
            proto_pack_cstr(&r.pk, "hash");
            proto_pack_cstr(&r.pk, bad->docs[d].hash);
            proto_pack_cstr(&r.pk, "name");
            proto_pack_cstr(&r.pk, bad->docs[d].name ? bad->docs[d].name : "");
        }
    }
    reply_send(op->base.conn, &r);
    op_finish(op);
}

static void do_verify(struct conn *c, uint64_t id, const msgpack_object *map)
{
    const msgpack_object *refs = proto_map_get(map, "refs");
    const char *list[PROTO_MAX_TAGS];
    char *copies[PROTO_MAX_TAGS];
    size_t n = 0;
    struct op *op;
    int r;

    if (refs && (refs->type != MSGPACK_OBJECT_ARRAY || refs->via.array.size > PROTO_MAX_TAGS)) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "refs must be an array of at most 64 strings");
        return;
    }
    for (uint32_t i = 0; refs && i < refs->via.array.size; i++) {
        const msgpack_object *o = &refs->via.array.ptr[i];
        if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
            o->via.str.size > PROTO_MAX_REF || memchr(o->via.str.ptr, '\0', o->via.str.size)) {
            reply_error(c, id, PROTO_E_BAD_REQUEST, "each ref must be a non-empty string");
            goto out;
        }
        if (!(copies[n] = strndup(o->via.str.ptr, o->via.str.size))) {
            reply_error(c, id, PROTO_E_BUSY, "out of memory");
            goto out;
        }
        list[n] = copies[n];
        n++;
    }
    op = op_new(c, id, OP_VERIFY);
    if (!op)
        goto out;
    r = store_verify(c->d->store, list, n, verify_done, op);
    if (r < 0) {
        reply_status_error(op, r);
        op_finish(op);
    } else {
        op->job_running = true;
    }
out:
    for (size_t i = 0; i < n; i++)
        free(copies[i]);
}

/* ---- entry points ---- */

static const struct {
    const char *name;
    void (*fn)(struct conn *c, uint64_t id, const msgpack_object *map);
} ops[] = {
    {"hello", do_hello},   {"add", do_add},   {"data", do_data},     {"get", do_get},
    {"delete", do_delete}, {"list", do_list}, {"stat", do_stat},     {"status", do_status},
    {"search", do_search}, {"gc", do_gc},     {"verify", do_verify},
};

void dispatch_frame(struct conn *c, const uint8_t *payload, size_t len)
{
    struct proto_msg msg;
    const msgpack_object *op;
    uint64_t id = 0;
    int r;

    if (proto_msg_parse(&msg, payload, len) < 0) {
        /* Distinguish a valid non-map value (the stream is intact) from garbage. */
        if (proto_validate(payload, len, PROTO_MAX_DEPTH) == 0) {
            reply_error(c, 0, PROTO_E_BAD_REQUEST,
                        "a request must be a msgpack map with string keys");
            return;
        }
        log_info("closing a connection that sent malformed msgpack");
        reply_error(c, 0, PROTO_E_BAD_FRAME, "frame is not one valid msgpack value");
        conn_close_after_flush(c);
        return;
    }
    r = proto_get_uint(msg.map, "id", &id);
    if (r != 0 || id == 0) {
        reply_error(c, 0, PROTO_E_BAD_REQUEST, "id must be a non-zero unsigned integer");
        goto out;
    }
    op = proto_map_get(msg.map, "op");
    if (!op || op->type != MSGPACK_OBJECT_STR) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "op must be a string");
        goto out;
    }
    if (!proto_str_eq(op, "data")) {
        if (conn_request_find(c, id)) {
            reply_error(c, id, PROTO_E_BAD_REQUEST,
                        "id is already in use by a request in progress");
            goto out;
        }
        if (c->d->stopping) {
            reply_error(c, id, PROTO_E_SHUTTING_DOWN, "the daemon is shutting down");
            goto out;
        }
    }
    for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
        if (proto_str_eq(op, ops[i].name)) {
            ops[i].fn(c, id, msg.map);
            goto out;
        }
    }
    {
        char text[128];
        snprintf(text, sizeof(text), "unknown op '%.*s'",
                 (int)(op->via.str.size > 64 ? 64 : op->via.str.size), op->via.str.ptr);
        reply_error(c, id, PROTO_E_UNKNOWN_OP, text);
    }
out:
    proto_msg_deinit(&msg);
}

void dispatch_abandon(struct request *req)
{
    struct op *op = op_of(req);
    struct conn *c = req->conn;

    if (op->add) {
        store_add_abort(op->add);
        op->add = NULL;
    }
    if (op->add_full) {
        op->add_full = false;
        c->full_adds--;
    }
    if (op->get) {
        store_get_release(op->get);
        op->get = NULL;
    }
    op_finish(op);
}

void dispatch_drained(struct request *req)
{
    struct op *op = op_of(req);

    if (op->kind == OP_GET && op->get)
        store_get_next(op->get);
    else if (op->kind == OP_LIST)
        op_queue(op, list_work, list_done);
}

bool dispatch_stream_open(struct conn *c)
{
    for (struct request *req = c->reqs; req; req = req->next) {
        if (op_of(req)->kind == OP_ADD && op_of(req)->stream_open)
            return true;
    }
    return false;
}
