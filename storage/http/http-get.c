/*
 * Ranged reads over HTTP (http-get.h), for every HTTP backend.
 */
#include "storage/http/http-get.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

bool http_get_range(const struct backend_get *get, const char *name, char *out, size_t len)
{
    if (!get->offset && get->length == BACKEND_TO_END)
        return false;
    if (get->length == BACKEND_TO_END)
        snprintf(out, len, "%s: bytes=%" PRIu64 "-", name, get->offset);
    else
        snprintf(out, len, "%s: bytes=%" PRIu64 "-%" PRIu64, name, get->offset,
                 get->length ? get->offset + get->length - 1 : get->offset);
    return true;
}

size_t http_get_body_max(const struct backend_get *get, size_t err_max)
{
    size_t want = get->max_len;

    if (get->length != BACKEND_TO_END && get->length < want)
        want = get->length ? (size_t)get->length : 1;
    if (want < SIZE_MAX)
        want++;
    return want < err_max ? err_max : want;
}

int http_get_finish(struct http_req *h, struct backend_get *get, const char *who)
{
    if (h->status == 416) {
        /* The offset is at or past the end: an empty read, as on a local file. */
        return 0;
    }
    if (h->content_length != UINT64_MAX && h->content_length != h->resp_len) {
        backend_log(BACKEND_LOG_INFO, "%s: GET %s: %zu of %" PRIu64 " bytes", who, get->req.key,
                    h->resp_len, h->content_length);
        return BACKEND_E_UNAVAILABLE;
    }
    if (get->length == 0) {
        http_req_reset(h);
        return 0;
    }
    if (h->resp_len > get->max_len || (get->length != BACKEND_TO_END && h->resp_len > get->length))
        return h->resp_len > get->max_len ? BACKEND_E_TOO_LARGE : -EPROTO;
    get->out = h->resp;
    get->out_len = h->resp_len;
    h->resp = NULL;
    h->resp_len = 0;
    if (!get->out) {
        /* An empty body: callers get a valid (empty) buffer. */
        get->out = malloc(1);
        if (!get->out)
            return -ENOMEM;
    }
    return 0;
}
