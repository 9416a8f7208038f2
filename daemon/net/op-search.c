/*
 * The search op: validates a query and its filters, runs it against the
 * full-text index on a worker thread, and sends the hits in frames small
 * enough that long names cannot outgrow one.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/conn.h"
#include "daemon/net/net-int.h"
#include "daemon/meta/db.h"
#include "daemon/net/op.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"

#define SEARCH_HITS_PER_FRAME 50

struct op_search {
    struct op op;
    /* The strings the params point into are owned here. */
    struct search_params params;
    char *query, *name_glob, *mime;
    char **tags;
    size_t ntags;
};
OP_ASSERT_FIRST(struct op_search);

static struct op_search *op_search_of(struct op *op)
{
    return container_of(op, struct op_search, op);
}

static void search_clear(struct op *op)
{
    struct op_search *s = op_search_of(op);

    free(s->query);
    free(s->name_glob);
    free(s->mime);
    op_free_strings(s->tags, s->ntags);
}

static void search_done(void *userdata, int status, const char *msg, struct search_hit *hits,
                        size_t nhits)
{
    struct op_search *s = userdata;
    struct reply r;
    size_t i = 0;

    if (!op_job_end(&s->op)) {
        search_hits_free(hits, nhits);
        return;
    }
    if (status == DB_E_INVALID_QUERY) {
        reply_error(s->op.base.conn, s->op.base.id, PROTO_E_BAD_REQUEST, msg);
        op_finish(&s->op);
        return;
    }
    if (status != 0) {
        op_reply_status_error(&s->op, status);
        op_finish(&s->op);
        return;
    }
    /* Hits go out in frames of at most 50, so long names cannot outgrow a frame. */
    do {
        size_t n = nhits - i > SEARCH_HITS_PER_FRAME ? SEARCH_HITS_PER_FRAME : nhits - i;
        if (i == 0)
            reply_begin(&r, s->op.base.id, true, 2);
        else
            reply_next(&r, s->op.base.id, true, 2);
        proto_pack_cstr(&r.pk, "hits");
        msgpack_pack_array(&r.pk, n);
        for (size_t k = i; k < i + n; k++) {
            const struct search_hit *h = &hits[k];
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
        proto_pack_bool(&r.pk, i < nhits);
        reply_end(&r);
    } while (i < nhits);
    conn_send(s->op.base.conn, &r.sbuf);
    search_hits_free(hits, nhits);
    op_finish(&s->op);
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

static const char *parse_search(struct op_search *s, const msgpack_object *map)
{
    struct search_params *sp = &s->params;
    const msgpack_object *o;
    const char *q;
    size_t qlen;
    bool fuzzy = false, all = false;
    int r;

    r = proto_get_str(map, "query", &q, &qlen);
    if (r != 0)
        return "query must be a string";
    if (qlen > SEARCH_MAX_QUERY)
        return "invalid query: longer than 65536 bytes";
    /* Kept with its length: a NUL inside is reported by the query parser. */
    if (!(s->query = malloc(qlen + 1)))
        return "out of memory";
    memcpy(s->query, q, qlen);
    s->query[qlen] = '\0';
    sp->query = s->query;
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
        if (!(s->tags = calloc(o->via.array.size + 1, sizeof(char *))))
            return "out of memory";
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (op_copy_str(&o->via.array.ptr[i], PROTO_MAX_TAG, &s->tags[s->ntags]))
                return "each tag must be a non-empty string of at most 256 bytes";
            s->ntags++;
        }
        sp->tags = (const char *const *)s->tags;
        sp->ntags = s->ntags;
    }
    if (op_get_string(map, "name", PROTO_MAX_NAME, false, &s->name_glob))
        return "name must be a non-empty string of at most 4096 bytes";
    if (op_get_string(map, "mime", PROTO_MAX_MIME, false, &s->mime))
        return "mime must be a non-empty string of at most 255 bytes";
    sp->name_glob = s->name_glob;
    sp->mime = s->mime;
    if (get_int(map, "after", &sp->has_after, &sp->after) < 0 ||
        get_int(map, "before", &sp->has_before, &sp->before) < 0)
        return "after and before must be integers (Unix seconds)";
    if (proto_get_bool(map, "fuzzy", &fuzzy) < 0)
        return "fuzzy must be a boolean";
    sp->fuzzy = fuzzy;
    if (proto_get_bool(map, "all", &all) < 0)
        return "all must be a boolean";
    sp->all_words = all;
    return NULL;
}

void op_do_search(struct conn *c, uint64_t id, const msgpack_object *map)
{
    struct op *op = op_new(c, id, OP_SEARCH, sizeof(struct op_search), search_clear);
    struct op_search *s;
    const char *problem;

    if (!op)
        return;
    s = op_search_of(op);
    problem = parse_search(s, map);
    if (problem) {
        reply_error(c, id, PROTO_E_BAD_REQUEST, problem);
        op_finish(op);
        return;
    }
    int r = search_run(c->srv->search, &s->params, search_done, s);
    if (r < 0) {
        op_reply_status_error(op, r);
        op_finish(op);
        return;
    }
    op->job_running = true;
}
