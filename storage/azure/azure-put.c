/*
 * Puts of the azure backend. A pack up to put_single_max bytes is one Put
 * Blob; a larger one goes up as blocks of block_size (Put Block, one after
 * the other on the same attempt) and is then committed by a Put Block List,
 * which is what makes it appear, whole, under its name. A create-only put
 * sends If-None-Match: * with the Put Blob or the Put Block List: 409
 * BlobAlreadyExists and 412 both mean the blob exists (and the front end
 * tells an earlier attempt of ours that landed from someone else's blob).
 * Blocks never committed are dropped by the service after a week.
 */
#include "storage/azure/azure-int.h"
#include "proto/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

/* Each block's ID: the same length for all of a blob's, as the service requires. */
static void block_id(unsigned i, char out[32])
{
    char raw[19];

    snprintf(raw, sizeof(raw), "cairn-blk-%08u", i % 100000000u);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)raw, 18);
}

/* The iovecs of the put's bytes [from, from + len) into op->blk_iov. */
static int slice(struct az_op *op, const struct backend_put *put, uint64_t from, uint64_t len)
{
    size_t n = 0, cap = 0;
    uint64_t at = 0;

    for (size_t i = 0; i < put->iovcnt && len; i++) {
        uint64_t l = put->iov[i].iov_len;
        if (at + l <= from || l == 0) {
            at += l;
            continue;
        }
        uint64_t skip = from > at ? from - at : 0;
        uint64_t take = l - skip < len ? l - skip : len;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct iovec *g = realloc(op->blk_iov, ncap * sizeof(*g));
            if (!g)
                return -ENOMEM;
            op->blk_iov = g;
            cap = ncap;
        }
        op->blk_iov[n++] = (struct iovec){(char *)put->iov[i].iov_base + skip, (size_t)take};
        from += take;
        len -= take;
        at += l;
    }
    op->blk_iovcnt = n;
    return 0;
}

static void put_done(struct az_op *op);

static int send_block(struct az_op *op)
{
    struct backend_put *put = container_of(op->req, struct backend_put, req);
    uint64_t bs = op->ab->block_size, from = (uint64_t)op->block * bs;
    uint64_t len = op->total - from < bs ? op->total - from : bs;
    char id[32], enc[64], query[128];
    int r;

    if ((r = slice(op, put, from, len)) < 0)
        return r;
    block_id(op->block, id);
    if ((r = az_encode(id, false, enc, sizeof(enc))) < 0)
        return r;
    snprintf(query, sizeof(query), "comp=block&blockid=%s", enc);
    op->http.body = op->blk_iov;
    op->http.body_iovcnt = op->blk_iovcnt;
    return az_op_send(op, "PUT", op->path, query, NULL, 0, AZ_ERROR_BODY_MAX);
}

static int send_block_list(struct az_op *op)
{
    struct backend_put *put = container_of(op->req, struct backend_put, req);
    static const char head[] = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
    static const char tail[] = "</BlockList>";
    const char *extra[2] = {"Content-Type: application/xml", "If-None-Match: *"};
    size_t cap = sizeof(head) + sizeof(tail) + (size_t)op->nblocks * 48, n;
    char *at;

    free(op->blocklist);
    if (!(op->blocklist = malloc(cap)))
        return -ENOMEM;
    at = op->blocklist;
    memcpy(at, head, sizeof(head) - 1);
    at += sizeof(head) - 1;
    for (unsigned i = 0; i < op->nblocks; i++) {
        char id[32];
        block_id(i, id);
        at += sprintf(at, "<Latest>%s</Latest>", id);
    }
    memcpy(at, tail, sizeof(tail) - 1);
    at += sizeof(tail) - 1;
    n = (size_t)(at - op->blocklist);
    op->blocklist_iov = (struct iovec){op->blocklist, n};
    op->http.body = &op->blocklist_iov;
    op->http.body_iovcnt = 1;
    return az_op_send(op, "PUT", op->path, "comp=blocklist", extra,
                      put->flags & BACKEND_PUT_CREATE ? 2 : 1, AZ_ERROR_BODY_MAX);
}

static void put_done(struct az_op *op)
{
    struct http_req *h = &op->http;
    int r;

    if (h->result == -ECANCELED || op->cancelled) {
        az_op_complete(op, -ECANCELED);
        return;
    }
    if (h->result != 0 || h->status != 201) {
        az_op_complete(op, az_map_failure(op));
        return;
    }
    if (op->nblocks == 0 || op->block == op->nblocks) {
        az_op_complete(op, 0); /* the blob, or its block list, is committed */
        return;
    }
    http_req_reset(h);
    r = ++op->block < op->nblocks ? send_block(op) : send_block_list(op);
    if (r < 0)
        az_op_complete(op, r);
}

int az_put(struct backend *be, struct backend_req *req)
{
    struct backend_put *put = container_of(req, struct backend_put, req);
    struct az_be *ab = az_of(be);
    const char *extra[2];
    size_t nextra = 0;
    struct az_op *op;
    int r;

    if (!(op = az_op_new(ab, req, put_done)))
        return -ENOMEM;
    for (size_t i = 0; i < put->iovcnt; i++)
        op->total += put->iov[i].iov_len;
    if ((r = az_blob_path(ab, req->key, op->path, sizeof(op->path))) < 0)
        return az_op_abandon(op, r);
    if (op->total > ab->put_single_max) {
        uint64_t n = (op->total + ab->block_size - 1) / ab->block_size;
        if (n > AZ_MAX_BLOCKS)
            return az_op_abandon(op, -EFBIG);
        op->nblocks = (unsigned)n;
        op->block = 0;
        if ((r = send_block(op)) < 0)
            return az_op_abandon(op, r);
        return 0;
    }
    extra[nextra++] = "x-ms-blob-type: BlockBlob";
    if (put->flags & BACKEND_PUT_CREATE)
        extra[nextra++] = "If-None-Match: *";
    op->http.body = put->iov;
    op->http.body_iovcnt = put->iovcnt;
    if ((r = az_op_send(op, "PUT", op->path, "", extra, nextra, AZ_ERROR_BODY_MAX)) < 0)
        return az_op_abandon(op, r);
    return 0;
}
