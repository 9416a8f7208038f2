#pragma once

/*
 * What a failed request means to a backend, the parts every HTTP backend
 * reads the same way: a transfer that got no response, the statuses worth a
 * retry, and the errno of a refusal. The error codes in a response body are
 * each service's own.
 */

#include "storage/backend.h"
#include "storage/http/http.h"

#include <stdbool.h>

/* A backend operation's name in a log line: "PUT", "GET", "HEAD", "DELETE", "LIST". */
const char *http_op_name(enum backend_op op);

/*
 * A transfer that got no response (h->result != 0) as a backend status; a
 * network or TLS failure is logged as "WHO: OP KEY: ...".
 */
int http_transport_failure(const struct http_req *h, const char *who, const char *op,
                           const char *key);

/* 408, 429, 500, 502, 503, 504: the server may answer the same request later. */
bool http_status_retryable(long status);

/*
 * The errno of a request refused for good: -EACCES for 401 and 403, -ENOENT
 * when the bucket or container is missing, -EINVAL for 400 and 416, else -EIO.
 */
int http_refusal_errno(long status, bool no_container);
