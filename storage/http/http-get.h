#pragma once

/*
 * The read path that the HTTP backends share: a backend_get (a ranged read
 * of an object) as an HTTP GET with a Range header, and its answer as the
 * read's result, checked against what was asked: a short body is a
 * transient failure, an object larger than max_len is BACKEND_E_TOO_LARGE,
 * and a range at or past the end is an empty read, as on a local file.
 */

#include "storage/backend.h"
#include "storage/http/http.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * "NAME: bytes=A-B" (or "bytes=A-" to the end) for get into out, true; false
 * when the read is of the whole object and needs no range. A read of nothing
 * still asks for one byte, to tell a missing object.
 */
bool http_get_range(const struct backend_get *get, const char *name, char *out, size_t len);

/* The response bytes to keep for get: one past what it may take (to tell a too-large object
 * from one that fits exactly), and at least err_max, for an error document. */
size_t http_get_body_max(const struct backend_get *get, size_t err_max);

/*
 * A 200, 206 or 416 answer to get's GET as its result: 0 (get->out and
 * out_len set, the body taken from h), BACKEND_E_UNAVAILABLE for a body
 * shorter than its Content-Length, BACKEND_E_TOO_LARGE, -EPROTO or
 * -ENOMEM. `who` names the backend in the log ("s3", "azure").
 */
int http_get_finish(struct http_req *h, struct backend_get *get, const char *who);
