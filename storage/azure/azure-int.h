#pragma once

/*
 * The azure backend's parts: its URL and options (azure-url.c),
 * credentials (azure-creds.c), the SharedKey signer (azure-sign.c), the
 * List Blobs XML (azure-xml.c), one HTTP request of an attempt
 * (azure-op.c), the operations (azure.c), uploads in blocks
 * (azure-put.c), listing (azure-list.c) and the checks at start
 * (azure-open.c). HTTP itself is storage/http, shared with s3.
 */

#include "storage/azure/azure-creds.h"
#include "storage/azure/azure-sign.h"
#include "storage/azure/azure-url.h"
#include "storage/azure/azure-xml.h"
#include "storage/backend.h"
#include "storage/http/http.h"

#include <stdbool.h>
#include <stdint.h>

/* Largest error document kept from a failed response. */
#define AZ_ERROR_BODY_MAX (64u * 1024)
/* A List Blobs page of 1000 blobs with their properties is about 1 MiB. */
#define AZ_LIST_BODY_MAX (8u * 1024 * 1024)
/* Packs larger than this go up as blocks (Put Block, then Put Block List) of AZ_BLOCK_SIZE. */
#define AZ_PUT_SINGLE_MAX (32u * 1024 * 1024)
#define AZ_BLOCK_SIZE (8u * 1024 * 1024)
/* Azure's limit of blocks in a blob. */
#define AZ_MAX_BLOCKS 50000
/* List cursors remembered with the opaque marker that continues after them. */
#define AZ_MARKS 32
/* The path of a request as sent: base path, container, PREFIX/KEY percent-encoded. */
#define AZ_MAX_PATH (AZ_MAX_URL + AZ_MAX_CONTAINER + 3 * (AZ_MAX_PREFIX + BACKEND_MAX_KEY) + 8)
#define AZ_MAX_QUERY (3 * AZ_XML_MAX_MARKER + 3 * (AZ_MAX_PREFIX + BACKEND_MAX_KEY) + 128)

struct az_op;

/* A list cursor (a key) and the marker that lists what comes after it. */
struct az_mark {
    char prefix[BACKEND_MAX_KEY];
    char cursor[BACKEND_MAX_KEY];
    char marker[AZ_XML_MAX_MARKER];
};

struct az_be {
    struct backend *be;
    struct az_opts o;
    struct az_creds creds;
    struct http *http;
    struct http_opts http_opts;
    struct az_op *ops; /* attempts in flight, for cancel */
    struct az_mark *marks;
    unsigned mark_next;
    size_t put_single_max, block_size;
    size_t list_page; /* blobs asked for per List Blobs at most; 0: as the caller asks */
    char msg[512];    /* open's explanation of a failure */
};

/* One attempt of one request: one or more HTTP requests, one after the other. */
struct az_op {
    struct http_req http;
    struct az_be *ab;
    struct backend_req *req;
    void (*done)(struct az_op *op); /* an HTTP answer is in http */
    struct az_op *next;             /* ab->ops */
    bool cancelled;
    char h_date[AZ_DATE_SIZE + 16], h_version[48], h_auth[AZ_AUTH_SIZE + 24];
    char h_extra[4][160];
    char path[AZ_MAX_PATH];
    char query[AZ_MAX_QUERY];
    /* Listing (azure-list.c): the marker of the page asked for. */
    char marker[AZ_XML_MAX_MARKER];
    /* Uploads in blocks (azure-put.c). */
    unsigned block, nblocks;
    uint64_t total;
    struct iovec *blk_iov;
    size_t blk_iovcnt;
    char *blocklist;
    struct iovec blocklist_iov;
};

static inline struct az_be *az_of(struct backend *be)
{
    return be->priv;
}

/* The blob's name PREFIX/KEY (or KEY), percent-encoded for a path, into out. */
int az_blob_path(const struct az_be *ab, const char *key, char *out, size_t len);
/* A new attempt of req in ab's list; `done` gets each answer. NULL without memory. */
struct az_op *az_op_new(struct az_be *ab, struct backend_req *req, void (*done)(struct az_op *op));
/*
 * Builds, signs and (az_op_send) starts one request: `path` as sent (see
 * az_blob_path; NULL for the container itself), `query` the encoded
 * parameters without '?' (the SAS is added here), `extra` up to 4 more
 * "Name: value" headers, the body op->http.body as set; at most body_max
 * bytes of the answer are kept.
 */
int az_op_prepare(struct az_op *op, const char *method, const char *path, const char *query,
                  const char *const *extra, size_t nextra, size_t body_max);
int az_op_send(struct az_op *op, const char *method, const char *path, const char *query,
               const char *const *extra, size_t nextra, size_t body_max);
/* Ends the attempt with `status`: the front end hears of it, the op is freed. */
void az_op_complete(struct az_op *op, int status);
/* A start that failed: the op is freed, r returned (no callback comes). */
int az_op_abandon(struct az_op *op, int r);
/* Frees what the op holds besides itself (the probe's op is on the stack). */
void az_op_clear(struct az_op *op);
struct xml_error;
/* The error code (from the body, else x-ms-error-code) and the first line of the message. */
void az_error_of(const struct http_req *h, struct xml_error *err);
/* A failed answer as a backend status; the server's code and message go to the log. */
int az_map_failure(struct az_op *op);
/* Percent-encodes s (all but unreserved characters, and '/' when keep_slash) into out. */
int az_encode(const char *s, bool keep_slash, char *out, size_t len);

/* Puts (azure-put.c): one Put Blob, or blocks and a block list. */
int az_put(struct backend *be, struct backend_req *req);
/* Lists (azure-list.c). */
int az_list(struct backend *be, struct backend_req *req);
/* Opening (azure-open.c): URL, credentials, endpoint, and the checks against the server. */
int az_open_checks(struct az_be *ab, const char *url, const char **msg);
