/*
 * Deletes of the S3 backend. A gc deletes the packs it emptied one after
 * the other as its commits land. A delete with none in flight goes out at
 * once, as a plain DELETE; those that come while deletes are in flight wait
 * for them, and then go out together as one DeleteObjects request (POST
 * ?delete) of up to S3_DELETE_BATCH keys, as a group commit does: a lone
 * delete waits for nothing, a burst costs a few requests.
 *
 * DeleteObjects answers 200 even when some keys failed, listing those in
 * <Error> elements (quiet mode lists nothing else). A batch with any error
 * is reported as a transient failure of each of its deletes: the front end
 * tries them again, which is harmless (a delete of a missing key succeeds),
 * and a key that keeps failing fails on its own once the deadline passes.
 */
#include "storage/s3/s3-int.h"
#include "proto/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

/* Delete requests in flight at once; more deletes wait and go in a batch. */
#define S3_DELETE_INFLIGHT 2

/* One DeleteObjects request: the op's own req is its first member. */
struct s3_del_batch {
    struct s3_op op;
    struct backend_req *members[S3_DELETE_BATCH];
    size_t n;
    char *body;
    struct iovec iov;
    char h_md5[64];
};

static void delete_ended(struct s3_be *sb);

/* The answer to a plain DELETE. */
static void delete_done(struct s3_op *op)
{
    struct http_req *h = &op->http;
    int status;

    delete_ended(op->sb);
    if (h->result == -ECANCELED || op->cancelled)
        status = -ECANCELED;
    else if (h->result != 0)
        status = s3_map_failure(op);
    else
        /* S3 answers 204 whether or not the key existed. */
        status = h->status == 204 || h->status == 200 ? 0 : s3_map_failure(op);
    s3_op_complete(op, status);
}

static void batch_free(struct s3_del_batch *b)
{
    free(b->body);
    s3_op_free(&b->op); /* frees b: op is its first member */
}

static void batch_done(struct s3_op *op)
{
    struct s3_del_batch *b = container_of(op, struct s3_del_batch, op);
    struct http_req *h = &op->http;
    struct s3_be *sb = op->sb;
    uint32_t retry_after = h->retry_after_ms;
    int status;

    if (h->result == 0 && h->status == 200)
        /* Quiet mode: an <Error> is a key that was not deleted. */
        status = h->resp && memmem(h->resp, h->resp_len, "<Error>", 7) ? BACKEND_E_UNAVAILABLE : 0;
    else
        status = s3_map_failure(op);
    if (status == BACKEND_E_UNAVAILABLE && h->result == 0 && h->status == 200)
        backend_log(BACKEND_LOG_INFO, "s3: DeleteObjects of %zu keys: some failed; trying again",
                    b->n);
    /* Freed first: the callbacks may start new deletes, or close the backend. */
    struct backend_req *members[S3_DELETE_BATCH];
    size_t n = b->n;
    memcpy(members, b->members, n * sizeof(*members));
    s3_op_unlink(op);
    batch_free(b);
    delete_ended(sb);
    for (size_t i = 0; i < n; i++) {
        members[i]->status = status;
        members[i]->retry_after_ms = retry_after;
        backend_complete(members[i]);
    }
}

static const char *entity(char c)
{
    switch (c) {
    case '&':
        return "&amp;";
    case '<':
        return "&lt;";
    case '>':
        return "&gt;";
    case '"':
        return "&quot;";
    case '\'':
        return "&apos;";
    default:
        return NULL;
    }
}

/* Appends s XML-escaped at *at (when at is not NULL); returns the escaped length. */
static size_t put_escaped(char **at, const char *s)
{
    size_t total = 0;

    for (; *s; s++) {
        const char *ent = entity(*s);
        size_t len = ent ? strlen(ent) : 1;
        if (at) {
            memcpy(*at, ent ? ent : s, len);
            *at += len;
        }
        total += len;
    }
    return total;
}

/* The <Delete> document of the batch, and its Content-MD5 header. */
static int build_body(struct s3_del_batch *b)
{
    static const char head[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
                               "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                               "<Quiet>true</Quiet>";
    static const char tail[] = "</Delete>";
    static const char obj_open[] = "<Object><Key>", obj_close[] = "</Key></Object>";
    char name[BACKEND_MAX_KEY + S3_MAX_PREFIX + 2];
    unsigned char md5[EVP_MAX_MD_SIZE];
    unsigned md5_len = 0;
    size_t cap = sizeof(head) + sizeof(tail);
    char *at;
    int r;

    for (size_t i = 0; i < b->n; i++) {
        if ((r = s3_object_name(&b->op.sb->o, b->members[i]->key, name, sizeof(name))) < 0)
            return r;
        cap += sizeof(obj_open) + sizeof(obj_close) + put_escaped(NULL, name);
    }
    if (!(b->body = malloc(cap)))
        return -ENOMEM;
    at = b->body;
    memcpy(at, head, sizeof(head) - 1);
    at += sizeof(head) - 1;
    for (size_t i = 0; i < b->n; i++) {
        s3_object_name(&b->op.sb->o, b->members[i]->key, name, sizeof(name));
        memcpy(at, obj_open, sizeof(obj_open) - 1);
        at += sizeof(obj_open) - 1;
        put_escaped(&at, name);
        memcpy(at, obj_close, sizeof(obj_close) - 1);
        at += sizeof(obj_close) - 1;
    }
    memcpy(at, tail, sizeof(tail) - 1);
    at += sizeof(tail) - 1;
    b->iov = (struct iovec){b->body, (size_t)(at - b->body)};
    /* DeleteObjects wants an MD5 (or a checksum header, which R2 may refuse). */
    if (!EVP_Digest(b->body, b->iov.iov_len, md5, &md5_len, EVP_md5(), NULL))
        return -ENOMEM;
    memcpy(b->h_md5, "Content-MD5: ", 13);
    EVP_EncodeBlock((unsigned char *)b->h_md5 + 13, md5, (int)md5_len);
    return 0;
}

/* Starts one DeleteObjects of the n queued requests; on failure they end with its status. */
static void send_batch(struct s3_be *sb, struct backend_req **reqs, size_t n)
{
    struct s3_del_batch *b = calloc(1, sizeof(*b));
    static const struct s3_param query[] = {{"delete", NULL}};
    const char *extra[2];
    char hash[S3_SHA256_HEX_SIZE];
    int r = -ENOMEM;

    if (b) {
        b->op.sb = sb;
        b->op.req = reqs[0];
        b->op.done = batch_done;
        b->op.batch = true;
        memcpy(b->members, reqs, n * sizeof(*reqs));
        b->n = n;
        r = build_body(b);
    }
    if (r == 0 && (r = s3_sha256_hex(&b->iov, 1, hash)) == 0) {
        memcpy(b->op.hash, hash, sizeof(hash));
        b->op.http.body = &b->iov;
        b->op.http.body_iovcnt = 1;
        extra[0] = b->h_md5;
        extra[1] = "Content-Type: application/xml";
        r = s3_op_send(&b->op, "POST", "", query, 1, extra, 2, S3_ERROR_BODY_MAX);
    }
    if (r == 0) {
        b->op.next = sb->ops;
        sb->ops = &b->op;
        sb->deletes_inflight++;
        return;
    }
    if (b)
        batch_free(b);
    /* Called from the delete timer, never inside the caller's own call. */
    for (size_t i = 0; i < n; i++) {
        reqs[i]->status = r;
        backend_complete(reqs[i]);
    }
}

static void on_delete_timer(uv_timer_t *t)
{
    s3_delete_flush(t->data);
}

void s3_delete_flush(struct s3_be *sb)
{
    while (sb->delq) {
        struct backend_req *reqs[S3_DELETE_BATCH];
        size_t n = 0;
        while (sb->delq && n < S3_DELETE_BATCH) {
            reqs[n++] = sb->delq;
            sb->delq = sb->delq->next_;
        }
        sb->ndelq -= n;
        if (n > 1) {
            send_batch(sb, reqs, n);
            continue;
        }
        int r = s3_send_bare(sb, reqs[0], "DELETE", delete_done);
        if (r < 0) {
            reqs[0]->status = r;
            backend_complete(reqs[0]);
        } else {
            sb->deletes_inflight++;
        }
    }
    sb->delq_tail = NULL;
}

/* A delete request ended (a plain DELETE, or a batch): what waits may go. */
static void delete_ended(struct s3_be *sb)
{
    sb->deletes_inflight--;
    /* Not from inside the caller's callback chain: on the next turn of the loop. */
    if (sb->delq && sb->delete_timer_open)
        uv_timer_start(&sb->delete_timer, on_delete_timer, 0, 0);
}

int s3_delete_queue(struct s3_be *sb, struct backend_req *req)
{
    int r;

    if (sb->deletes_inflight < S3_DELETE_INFLIGHT && !sb->delq) {
        /* Nothing to wait for: a plain DELETE at once. */
        if ((r = s3_send_bare(sb, req, "DELETE", delete_done)) == 0)
            sb->deletes_inflight++;
        return r;
    }
    req->next_ = NULL;
    if (sb->delq_tail)
        sb->delq_tail->next_ = req;
    else
        sb->delq = req;
    sb->delq_tail = req;
    sb->ndelq++;
    /* A full batch goes now; the rest when a delete in flight ends. */
    if (sb->ndelq >= S3_DELETE_BATCH)
        uv_timer_start(&sb->delete_timer, on_delete_timer, 0, 0);
    return 0;
}

void s3_delete_init(struct s3_be *sb)
{
    uv_timer_init(sb->be->loop, &sb->delete_timer);
    sb->delete_timer.data = sb;
    sb->delete_timer_open = true;
}

static void on_delete_timer_closed(uv_handle_t *h)
{
    struct s3_be *sb = h->data;
    sb->stopped(sb);
}

void s3_delete_stop(struct s3_be *sb, void (*stopped)(struct s3_be *sb))
{
    if (!sb->delete_timer_open) {
        stopped(sb);
        return;
    }
    sb->delete_timer_open = false;
    sb->stopped = stopped;
    uv_close((uv_handle_t *)&sb->delete_timer, on_delete_timer_closed);
}
