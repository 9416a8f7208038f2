/*
 * The ops that read documents: get streams one document's content, list
 * pages through the catalogue, stat describes one document. Get and list
 * stop reading ahead while the client has not read what is queued for it.
 */

#include <stdlib.h>
#include <string.h>

#include "daemon/net/conn-budget.h"
#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/meta/db.h"
#include "daemon/net/op.h"
#include "daemon/store/store.h"

#define LIST_PAGE 500
#define GET_PROMISE PROTO_MAX_DATA
/*
 * Bytes of names a stat reply carries at most: with 64 tags and 64 metadata
 * entries at their limits (about 300 KiB) the frame stays under REPLY_BUDGET.
 */
#define STAT_NAMES_BUDGET (192u * 1024)

struct op_get {
    struct op op;
    struct store_get *get; /* NULL once released */
    char *ref;
    size_t ref_len;
    /*
     * Until its first piece is queued, a get counts GET_PROMISE bytes in
     * connection memory: a burst of gets started at once must not all read
     * their first piece past the bound.
     */
    bool promised;
};
OP_ASSERT_FIRST(struct op_get);

struct op_list {
    struct op op;
    uv_work_t work;
    int status; /* the worker's result */
    char *tag;
    uint64_t limit, listed;
    bool names, unnamed; /* one item per name (db_list_names); documents without a name */
    bool path;           /* names only: the prefix is a path (the name and those under it) */
    char *prefix;        /* names only: those that start with it */
    char *after_name;    /* names only: the last name listed */
    char after[PROTO_HASH_HEX + 1]; /* the last hash listed; the next page starts after it */
    struct db_doc *docs;            /* the current page */
    size_t ndocs;
};
OP_ASSERT_FIRST(struct op_list);

struct op_stat {
    struct op op;
    uv_work_t work;
    int status; /* the worker's result */
    char *ref;
    size_t ref_len;
    struct db_doc doc;
};
OP_ASSERT_FIRST(struct op_stat);

/* ---- get ---- */

static struct op_get *op_get_of(struct op *op)
{
    return container_of(op, struct op_get, op);
}

static void get_clear(struct op *op)
{
    free(op_get_of(op)->ref);
}

static void get_release(struct op_get *g)
{
    store_get_release(g->get);
    g->get = NULL;
}

static void get_keep_promise(struct op_get *g)
{
    if (g->promised) {
        g->promised = false;
        budget_release(g->op.base.conn->srv, GET_PROMISE, false);
    }
}

static void get_data_cb(void *userdata, const struct db_doc *doc, const uint8_t *data, size_t len,
                        bool first, bool last)
{
    struct op_get *g = userdata;
    struct conn *c = g->op.base.conn;
    uint64_t id = g->op.base.id;
    struct reply r;
    size_t off = 0;

    /* Split pieces larger than a frame's data allowance; always send at least one frame. */
    do {
        size_t n = len - off > PROTO_MAX_DATA ? PROTO_MAX_DATA : len - off;
        bool final = last && off + n == len;
        if (off == 0)
            reply_begin(&r, id, true, first ? 6 : 2);
        else
            reply_next(&r, id, true, 2);
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
    get_keep_promise(g);

    if (last) {
        get_release(g);
        op_finish(&g->op);
    } else if (conn_can_stream(c)) {
        store_get_next(g->get);
    } else {
        conn_wait_drain(c, &g->op.base);
    }
}

static void get_error_cb(void *userdata, int status)
{
    struct op_get *g = userdata;

    op_reply_status_error(&g->op, status);
    get_keep_promise(g);
    get_release(g);
    op_finish(&g->op);
}

static const struct store_get_ops get_ops = {
    .data = get_data_cb,
    .error = get_error_cb,
};

void op_do_get(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_GET, sizeof(struct op_get), get_clear);
    uint64_t offset = 0, length = UINT64_MAX, to;
    struct op_get *g;
    int r;

    if (!op)
        return;
    g = op_get_of(op);
    if (!op_take_ref(op, map, &g->ref, &g->ref_len))
        return;
    if (proto_get_uint(map, "offset", &offset) < 0 || proto_get_uint(map, "length", &length) < 0) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "offset and length must be unsigned integers");
        op_finish(op);
        return;
    }
    to = length > UINT64_MAX - offset ? UINT64_MAX : offset + length;
    r = store_get_start(c->srv->st, g->ref, g->ref_len, offset, to, &get_ops, g, &g->get);
    if (r < 0) {
        op_reply_status_error(op, r);
        op_finish(op);
        return;
    }
    g->promised = true;
    budget_take(c->srv, GET_PROMISE, false);
    /* A hot document is answered right here, from the caches. */
    store_get_next(g->get);
}

void op_get_abandon(struct op *op)
{
    struct op_get *g = op_get_of(op);

    get_keep_promise(g);
    if (g->get)
        get_release(g);
}

void op_get_drained(struct op *op)
{
    struct op_get *g = op_get_of(op);

    if (g->get)
        store_get_next(g->get);
}

/* ---- list ---- */

static struct op_list *op_list_of(struct op *op)
{
    return container_of(op, struct op_list, op);
}

static void list_clear(struct op *op)
{
    struct op_list *l = op_list_of(op);

    free(l->tag);
    free(l->prefix);
    free(l->after_name);
    db_docs_free(l->docs, l->ndocs);
}

static void list_work(uv_work_t *work)
{
    struct op_list *l = container_of(work, struct op_list, work);
    uint64_t page = LIST_PAGE;

    if (l->limit && l->limit - l->listed < page)
        page = l->limit - l->listed;
    db_docs_free(l->docs, l->ndocs);
    l->docs = NULL;
    l->ndocs = 0;
    if (l->names || l->unnamed) {
        struct db_names_query q = {
            .prefix = l->prefix,
            .path = l->path,
            .after = l->names ? l->after_name : l->after,
            .tag = l->tag,
            .limit = (size_t)page,
            .unnamed = l->unnamed,
        };
        l->status = db_list_names(l->op.srv->db, &q, &l->docs, &l->ndocs);
        return;
    }
    l->status = db_list(l->op.srv->db, l->tag, l->after, (size_t)page, &l->docs, &l->ndocs);
}

static void list_done(uv_work_t *work, int status);

/* How many of the page's docs fit in one frame (REPLY_BUDGET); at least one, which always fits. */
static size_t list_fit(const struct db_doc *docs, size_t n)
{
    size_t used = 0, fit;

    for (fit = 0; fit < n; fit++) {
        const struct db_doc *doc = &docs[fit];
        /* Ten keys, five of them integers (with mode and mtime). */
        size_t cost = 10 * reply_str_cost(16) + reply_str_cost(PROTO_HASH_HEX) +
                      reply_str_cost(doc->name ? strlen(doc->name) : 0) +
                      reply_str_cost(strlen(doc->mime)) + 5 * 9 + 5;
        for (size_t t = 0; t < doc->ntags; t++)
            cost += reply_str_cost(strlen(doc->tags[t]));
        if (fit > 0 && used + cost > REPLY_BUDGET)
            break;
        used += cost;
    }
    return fit;
}

static void list_queue(struct op_list *l)
{
    op_queue(&l->op, &l->work, list_work, list_done);
}

static void list_done(uv_work_t *work, int status)
{
    struct op_list *l = container_of(work, struct op_list, work);
    struct conn *c;
    struct reply r;
    size_t fit;
    bool more;

    if (!op_job_end(&l->op))
        return;
    c = l->op.base.conn;
    if (status < 0 || l->status != 0) {
        op_reply_status_error(&l->op, status < 0 ? status : l->status);
        op_finish(&l->op);
        return;
    }
    fit = list_fit(l->docs, l->ndocs);
    l->listed += fit;
    /* Docs that did not fit in this frame are read again for the next one. */
    more = fit < l->ndocs || (l->ndocs == LIST_PAGE && (!l->limit || l->listed < l->limit));
    reply_begin(&r, l->op.base.id, true, 2);
    proto_pack_cstr(&r.pk, "items");
    msgpack_pack_array(&r.pk, fit);
    for (size_t i = 0; i < fit; i++) {
        const struct db_doc *doc = &l->docs[i];
        msgpack_pack_map(&r.pk, (l->names ? 8 : 7) + op_fattr_fields(&doc->fattr));
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
        op_pack_strings(&r.pk, (const char *const *)doc->tags, 0, doc->ntags);
        if (l->names) {
            proto_pack_cstr(&r.pk, "named");
            msgpack_pack_int64(&r.pk, doc->named);
        }
        op_pack_fattr(&r.pk, &doc->fattr);
    }
    proto_pack_cstr(&r.pk, "more");
    proto_pack_bool(&r.pk, more);
    if (fit > 0 && l->names) {
        /* Handed over: the page is read again before the name is needed. */
        free(l->after_name);
        l->after_name = l->docs[fit - 1].name;
        l->docs[fit - 1].name = NULL;
    } else if (fit > 0) {
        memcpy(l->after, l->docs[fit - 1].hash, sizeof(l->after));
    }
    reply_send(c, &r);
    if (!more)
        op_finish(&l->op);
    else if (conn_can_stream(c))
        list_queue(l);
    else
        conn_wait_drain(c, &l->op.base);
}

void op_do_list(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_LIST, sizeof(struct op_list), list_clear);
    struct op_list *l;
    const char *after;
    size_t after_len;
    int r;

    if (!op)
        return;
    l = op_list_of(op);
    if (op_get_string(map, "tag", PROTO_MAX_TAG, false, &l->tag) ||
        proto_get_uint(map, "limit", &l->limit) < 0 ||
        (proto_map_get(map, "names") && proto_get_bool(map, "names", &l->names) != 0) ||
        (proto_map_get(map, "unnamed") && proto_get_bool(map, "unnamed", &l->unnamed) != 0) ||
        (l->names && l->unnamed)) {
        reply_error(c, id, PROTO_E_BAD_REQUEST,
                    "tag must be a string, limit an integer, names and unnamed booleans "
                    "(not both true)");
        op_finish(op);
        return;
    }
    if (l->names) {
        if (op_get_string(map, "prefix", PROTO_MAX_REF, true, &l->prefix) ||
            op_get_string(map, "after", PROTO_MAX_REF, true, &l->after_name) ||
            (proto_map_get(map, "path") && proto_get_bool(map, "path", &l->path) != 0)) {
            reply_error(c, id, PROTO_E_BAD_REQUEST,
                        "prefix and after must be strings of at most 4096 bytes, path a boolean");
            op_finish(op);
            return;
        }
        list_queue(l);
        return;
    }
    if (proto_map_get(map, "prefix") || proto_map_get(map, "path")) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, "prefix and path need names: true");
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
            l->after[i] = (char)(after[i] >= 'A' && after[i] <= 'F' ? after[i] + 32 : after[i]);
    }
    list_queue(l);
}

void op_list_drained(struct op *op)
{
    list_queue(op_list_of(op));
}

/* ---- stat ---- */

static struct op_stat *op_stat_of(struct op *op)
{
    return container_of(op, struct op_stat, op);
}

static void stat_clear(struct op *op)
{
    struct op_stat *s = op_stat_of(op);

    free(s->ref);
    db_doc_clear(&s->doc);
}

static void stat_work(uv_work_t *work)
{
    struct op_stat *s = container_of(work, struct op_stat, work);
    s->status = db_resolve(s->op.srv->db, s->ref, s->ref_len, DB_WANT_DETAILS, &s->doc);
}

static void stat_done(uv_work_t *work, int status)
{
    struct op_stat *s = container_of(work, struct op_stat, work);
    const struct db_doc *doc = &s->doc;
    struct reply r;

    if (!op_job_end(&s->op))
        return;
    if (status < 0 || s->status != 0) {
        op_reply_status_error(&s->op, status < 0 ? status : store_status_from_db(s->status));
        op_finish(&s->op);
        return;
    }
    /* The newest names that fit in STAT_NAMES_BUDGET (names are oldest first). */
    size_t cut = op_strings_cut((const char *const *)doc->names, doc->nnames, STAT_NAMES_BUDGET);
    reply_begin(&r, s->op.base.id, true, (cut > 0 ? 11 : 10) + op_fattr_fields(&doc->fattr));
    proto_pack_cstr(&r.pk, "hash");
    proto_pack_cstr(&r.pk, doc->hash);
    proto_pack_cstr(&r.pk, "name");
    proto_pack_cstr(&r.pk, doc->name ? doc->name : "");
    op_pack_fattr(&r.pk, &doc->fattr);
    proto_pack_cstr(&r.pk, "names");
    op_pack_strings(&r.pk, (const char *const *)doc->names, cut, doc->nnames);
    if (cut > 0) {
        proto_pack_cstr(&r.pk, "names_cut");
        msgpack_pack_uint64(&r.pk, cut);
    }
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
    op_pack_strings(&r.pk, (const char *const *)doc->tags, 0, doc->ntags);
    proto_pack_cstr(&r.pk, "meta");
    msgpack_pack_map(&r.pk, doc->nmeta);
    for (size_t i = 0; i < doc->nmeta; i++) {
        proto_pack_cstr(&r.pk, doc->meta_keys[i]);
        proto_pack_cstr(&r.pk, doc->meta_values[i]);
    }
    reply_send(s->op.base.conn, &r);
    op_finish(&s->op);
}

void op_do_stat(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_STAT, sizeof(struct op_stat), stat_clear);
    struct op_stat *s;

    if (!op)
        return;
    s = op_stat_of(op);
    if (op_take_ref(op, map, &s->ref, &s->ref_len))
        op_queue(op, &s->work, stat_work, stat_done);
}
