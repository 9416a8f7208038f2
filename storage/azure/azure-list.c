/*
 * Listing of the azure backend. The front end's cursor is a key to list
 * after, which callers may make up themselves; List Blobs only continues
 * from its own opaque NextMarker. So the backend remembers, for the last
 * AZ_MARKS pages it answered, the marker that continues after the page's
 * last key, and a cursor it does not know is served from the nearest
 * remembered cursor below it (or from the start), skipping what is not
 * after it. Pages that leave nothing after the cursor - skipped keys, or
 * the empty pages with a marker that the service may send - are followed
 * within the same attempt, which the request's deadline bounds.
 */
#include "storage/azure/azure-int.h"
#include "proto/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct list_ctx {
    struct backend_list *list;
    size_t cap;
    size_t skip;        /* length of "PREFIX/" */
    const char *want;   /* the list's own prefix ("packs/") */
    const char *cursor; /* "" or the key to list after */
};

static int on_entry(void *opaque, const char *name, size_t len, uint64_t size, int64_t mtime)
{
    struct list_ctx *c = opaque;
    struct backend_list *list = c->list;
    const char *key = name + c->skip;

    if (len <= c->skip || len - c->skip >= BACKEND_MAX_KEY)
        return 0;
    if (strncmp(key, c->want, strlen(c->want)) != 0 || !backend_key_valid(key))
        return 0;
    if (c->cursor[0] && strcmp(key, c->cursor) <= 0)
        return 0;
    /* more than we asked for: -EPROTO */
    return backend_list_add(list, &c->cap, BACKEND_LIST_MAX * 2, key, len - c->skip, size, mtime);
}

static void remember(struct az_be *ab, const char *prefix, const char *cursor, const char *marker)
{
    struct az_mark *m = NULL;

    for (unsigned i = 0; i < AZ_MARKS; i++) {
        if (strcmp(ab->marks[i].prefix, prefix) == 0 && strcmp(ab->marks[i].cursor, cursor) == 0)
            m = &ab->marks[i];
    }
    if (!m) {
        m = &ab->marks[ab->mark_next];
        ab->mark_next = (ab->mark_next + 1) % AZ_MARKS;
    }
    snprintf(m->prefix, sizeof(m->prefix), "%s", prefix);
    snprintf(m->cursor, sizeof(m->cursor), "%s", cursor);
    snprintf(m->marker, sizeof(m->marker), "%s", marker);
}

/* The marker of the greatest remembered cursor at or below `cursor`; "" for the start. */
static const char *nearest(const struct az_be *ab, const char *prefix, const char *cursor)
{
    const struct az_mark *best = NULL;

    if (!cursor[0])
        return "";
    for (unsigned i = 0; i < AZ_MARKS; i++) {
        const struct az_mark *m = &ab->marks[i];
        if (!m->cursor[0] || strcmp(m->prefix, prefix) != 0 || strcmp(m->cursor, cursor) > 0)
            continue;
        if (!best || strcmp(m->cursor, best->cursor) > 0)
            best = m;
    }
    return best ? best->marker : "";
}

static int send_page(struct az_op *op);

static void list_done(struct az_op *op)
{
    struct backend_list *list = container_of(op->req, struct backend_list, req);
    struct http_req *h = &op->http;
    struct az_be *ab = op->ab;
    struct az_list_page *page;
    struct list_ctx c = {
        .list = list,
        .cap = list->nentries,
        .skip = ab->o.prefix[0] ? strlen(ab->o.prefix) + 1 : 0,
        .want = op->req->key,
        .cursor = list->cursor,
    };
    int r;

    if (h->result == -ECANCELED || op->cancelled) {
        az_op_complete(op, -ECANCELED);
        return;
    }
    if (h->result != 0 || h->status != 200) {
        az_op_complete(op, az_map_failure(op));
        return;
    }
    if (!(page = malloc(sizeof(*page)))) {
        az_op_complete(op, -ENOMEM);
        return;
    }
    r = az_xml_parse_list((const char *)h->resp, h->resp_len, AZ_XML_MAX_NAME, on_entry, &c, page);
    http_req_reset(h);
    if (r == -ENOMEM || r == -EPROTO) {
        free(page);
        az_op_complete(op, r);
        return;
    }
    if (r < 0) {
        backend_log(BACKEND_LOG_INFO, "azure: LIST %s: malformed List Blobs response (%s)",
                    op->req->key, strerror(-r));
        free(page);
        az_op_complete(op, BACKEND_E_UNAVAILABLE);
        return;
    }
    snprintf(op->marker, sizeof(op->marker), "%s", page->next_marker);
    free(page);
    if (list->nentries == 0 && op->marker[0]) {
        /* Nothing after the cursor on this page: the next one, on the same attempt. */
        if ((r = send_page(op)) < 0)
            az_op_complete(op, r);
        return;
    }
    list->next_cursor[0] = '\0';
    if (op->marker[0]) {
        const char *last = list->entries[list->nentries - 1].key;
        memcpy(list->next_cursor, last, strlen(last) + 1);
        remember(ab, op->req->key, last, op->marker);
    }
    az_op_complete(op, 0);
}

static int send_page(struct az_op *op)
{
    struct backend_list *list = container_of(op->req, struct backend_list, req);
    struct az_be *ab = op->ab;
    char prefix[AZ_MAX_PREFIX + BACKEND_MAX_KEY + 2];
    char enc_prefix[3 * sizeof(prefix)], enc_marker[3 * AZ_XML_MAX_MARKER];
    size_t page = list->max_keys ? list->max_keys : (size_t)BACKEND_LIST_PAGE;
    int n;

    if (ab->list_page && ab->list_page < page)
        page = ab->list_page;
    n = ab->o.prefix[0] ? snprintf(prefix, sizeof(prefix), "%s/%s", ab->o.prefix, op->req->key)
                        : snprintf(prefix, sizeof(prefix), "%s", op->req->key);
    if (n < 0 || (size_t)n >= sizeof(prefix) ||
        az_encode(prefix, false, enc_prefix, sizeof(enc_prefix)) < 0 ||
        az_encode(op->marker, false, enc_marker, sizeof(enc_marker)) < 0)
        return -ENAMETOOLONG;
    n = snprintf(op->query, sizeof(op->query),
                 "restype=container&comp=list&prefix=%s&maxresults=%zu%s%s", enc_prefix,
                 list->max_keys ? list->max_keys : (size_t)BACKEND_LIST_PAGE,
                 op->marker[0] ? "&marker=" : "", enc_marker);
    if (n < 0 || (size_t)n >= sizeof(op->query))
        return -ENAMETOOLONG;
    return az_op_send(op, "GET", NULL, op->query, NULL, 0, AZ_LIST_BODY_MAX);
}

int az_list(struct backend *be, struct backend_req *req)
{
    struct backend_list *list = container_of(req, struct backend_list, req);
    struct az_be *ab = az_of(be);
    struct az_op *op;
    int r;

    if (!(op = az_op_new(ab, req, list_done)))
        return -ENOMEM;
    snprintf(op->marker, sizeof(op->marker), "%s", nearest(ab, req->key, list->cursor));
    if ((r = send_page(op)) < 0)
        return az_op_abandon(op, r);
    return 0;
}
