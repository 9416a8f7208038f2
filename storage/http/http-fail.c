#include "storage/http/http-fail.h"

#include <errno.h>

const char *http_op_name(enum backend_op op)
{
    switch (op) {
    case BACKEND_OP_PUT:
        return "PUT";
    case BACKEND_OP_GET:
        return "GET";
    case BACKEND_OP_HEAD:
        return "HEAD";
    case BACKEND_OP_DELETE:
        return "DELETE";
    case BACKEND_OP_LIST:
        return "LIST";
    default:
        return "?";
    }
}

int http_transport_failure(const struct http_req *h, const char *who, const char *op,
                           const char *key)
{
    if (h->result == HTTP_E_NETWORK) {
        backend_log(BACKEND_LOG_INFO, "%s: %s %s: %s", who, op, key, h->error);
        return BACKEND_E_UNAVAILABLE;
    }
    if (h->result == HTTP_E_TLS) {
        backend_log(BACKEND_LOG_ERROR, "%s: %s %s: TLS: %s", who, op, key, h->error);
        return -EPROTO;
    }
    return h->result == HTTP_E_TOO_LARGE ? BACKEND_E_TOO_LARGE : h->result;
}

bool http_status_retryable(long st)
{
    return st == 408 || st == 429 || st == 500 || st == 502 || st == 503 || st == 504;
}

int http_refusal_errno(long st, bool no_container)
{
    if (st == 403 || st == 401)
        return -EACCES;
    if (no_container)
        return -ENOENT;
    if (st == 400 || st == 416)
        return -EINVAL;
    return -EIO;
}
