/* The operations of PROTOCOL.md, built on the framing in client.c. */

#include "client/client.h"
#include "client/internal.h"
#include "client/sha256.h"
#include "proto/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A reply that breaks the protocol leaves the stream out of step. */
static int bad_reply(struct client *c)
{
    client_disconnect(c);
    return -EBADMSG;
}

/* Sends {op, ref?} and waits for the single reply. */
static int call(struct client *c, const char *op, const char *ref, const msgpack_object **reply)
{
    uint64_t id = client_begin(c, op, ref ? 1 : 0);
    int r;

    if (ref) {
        proto_pack_cstr(&c->pk, "ref");
        proto_pack_cstr(&c->pk, ref);
    }
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}

int client_hello(struct client *c, const msgpack_object **reply)
{
    uint64_t id = client_begin(c, "hello", 2);
    int r;

    proto_pack_cstr(&c->pk, "versions");
    msgpack_pack_array(&c->pk, PROTO_VERSION - PROTO_MIN_VERSION + 1);
    for (unsigned v = PROTO_MIN_VERSION; v <= PROTO_VERSION; v++)
        msgpack_pack_unsigned_int(&c->pk, v);
    proto_pack_cstr(&c->pk, "client");
    proto_pack_cstr(&c->pk, "cairn-client/" CAIRN_VERSION);
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}

int client_delete(struct client *c, const char *ref, bool dry_run, const msgpack_object **reply)
{
    uint64_t id = client_begin(c, "delete", dry_run ? 2 : 1);
    int r;

    proto_pack_cstr(&c->pk, "ref");
    proto_pack_cstr(&c->pk, ref);
    if (dry_run) {
        proto_pack_cstr(&c->pk, "dry_run");
        msgpack_pack_true(&c->pk);
    }
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}

int client_stat(struct client *c, const char *ref, const msgpack_object **reply)
{
    return call(c, "stat", ref, reply);
}

int client_log(struct client *c, const char *name, uint64_t offset, uint64_t limit,
               const msgpack_object **reply)
{
    uint64_t id = client_begin(c, "log", 3);
    int r;

    proto_pack_cstr(&c->pk, "name");
    proto_pack_cstr(&c->pk, name);
    proto_pack_cstr(&c->pk, "offset");
    msgpack_pack_uint64(&c->pk, offset);
    proto_pack_cstr(&c->pk, "limit");
    msgpack_pack_uint64(&c->pk, limit);
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}

static void pack_str_list(msgpack_packer *pk, const char *key, const char *const *v, size_t n)
{
    proto_pack_cstr(pk, key);
    msgpack_pack_array(pk, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        proto_pack_cstr(pk, v[i]);
}

int client_edit(struct client *c, const char *ref, const struct client_edit_req *req,
                const msgpack_object **reply)
{
    uint64_t id = client_begin(c, "edit",
                               1 + (req->ntags > 0) + (req->nuntags > 0) + (req->nmeta > 0) +
                                   (req->nunmeta > 0));
    int r;

    proto_pack_cstr(&c->pk, "ref");
    proto_pack_cstr(&c->pk, ref);
    if (req->ntags > 0)
        pack_str_list(&c->pk, "tags", req->tags, req->ntags);
    if (req->nuntags > 0)
        pack_str_list(&c->pk, "untags", req->untags, req->nuntags);
    if (req->nunmeta > 0)
        pack_str_list(&c->pk, "unmeta", req->unmeta, req->nunmeta);
    if (req->nmeta > 0) {
        proto_pack_cstr(&c->pk, "meta");
        msgpack_pack_map(&c->pk, (uint32_t)req->nmeta);
        for (size_t i = 0; i < req->nmeta; i++) {
            proto_pack_cstr(&c->pk, req->meta[i].key);
            proto_pack_cstr(&c->pk, req->meta[i].value);
        }
    }
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}

int client_name(struct client *c, const char *ref, const char *name, bool rename,
                const msgpack_object **reply)
{
    uint64_t id = client_begin(c, "name", 3);
    int r;

    proto_pack_cstr(&c->pk, "ref");
    proto_pack_cstr(&c->pk, ref);
    proto_pack_cstr(&c->pk, "name");
    proto_pack_cstr(&c->pk, name);
    proto_pack_cstr(&c->pk, "rename");
    proto_pack_bool(&c->pk, rename);
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}

int client_status(struct client *c, const msgpack_object **reply)
{
    return call(c, "status", NULL, reply);
}

int client_metrics(struct client *c, const msgpack_object **reply)
{
    return call(c, "metrics", NULL, reply);
}

int client_du(struct client *c, const char *prefix, bool path, const msgpack_object **reply)
{
    uint64_t id = client_begin(c, "du", prefix ? 1 + path : 0);
    int r;

    if (prefix) {
        proto_pack_cstr(&c->pk, "prefix");
        proto_pack_cstr(&c->pk, prefix);
        if (path) {
            proto_pack_cstr(&c->pk, "path");
            msgpack_pack_true(&c->pk);
        }
    }
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}

void client_set_progress(struct client *c, client_progress_fn *fn, void *userdata)
{
    c->progress = fn;
    c->progress_data = userdata;
}

static void progress(struct client *c, uint64_t n, uint64_t total)
{
    if (c->progress && n)
        c->progress(c->progress_data, n, total);
}

int client_add_send(struct client *c, const struct client_add_req *req, const void *data,
                    size_t len, uint64_t *id)
{
    int r;

    *id = c->next_id++;
    r = client_encode_add(&c->sbuf, *id, req, (int64_t)len, data, len, false);
    if (r == 0 && (r = client_send(c)) == 0)
        progress(c, len, len);
    return r;
}

void client_set_job_progress(struct client *c, client_job_progress_fn *fn, void *userdata)
{
    c->job_progress = fn;
    c->job_progress_data = userdata;
}

/* The job's final reply; its progress frames (more: true) go to c->job_progress. */
static int await_job(struct client *c, uint64_t id, const msgpack_object **reply)
{
    for (;;) {
        const msgpack_object *p;
        char phase[32];
        const char *s = "";
        size_t len = 0;
        uint64_t done = 0, total = 0;
        bool more = false;
        int r = client_await(c, id, reply);

        if (r != 0 || proto_get_bool(*reply, "more", &more) != 0 || !more)
            return r;
        p = proto_map_get(*reply, "progress");
        if (!p || p->type != MSGPACK_OBJECT_MAP)
            return bad_reply(c);
        proto_get_str(p, "phase", &s, &len);
        proto_get_uint(p, "done", &done);
        proto_get_uint(p, "total", &total);
        snprintf(phase, sizeof(phase), "%.*s", (int)(len < sizeof(phase) ? len : 0), s);
        if (c->job_progress)
            c->job_progress(c->job_progress_data, phase, done, total);
    }
}

/* The request's header with `extra` fields to come, plus progress: true when wanted. */
static uint64_t begin_job(struct client *c, const char *op, uint32_t extra)
{
    uint64_t id = client_begin(c, op, extra + (c->job_progress != NULL));

    if (c->job_progress) {
        proto_pack_cstr(&c->pk, "progress");
        msgpack_pack_true(&c->pk);
    }
    return id;
}

int client_gc(struct client *c, const msgpack_object **reply)
{
    uint64_t id = begin_job(c, "gc", 0);
    int r = client_send(c);

    return r < 0 ? r : await_job(c, id, reply);
}

int client_refresh(struct client *c, const msgpack_object **reply)
{
    return call(c, "refresh", NULL, reply);
}

int client_shutdown(struct client *c, const msgpack_object **reply)
{
    return call(c, "shutdown", NULL, reply);
}

int client_verify(struct client *c, const char *const *refs, size_t nrefs,
                  const msgpack_object **reply)
{
    uint64_t id = begin_job(c, "verify", nrefs ? 1 : 0);
    int r;

    if (nrefs) {
        proto_pack_cstr(&c->pk, "refs");
        msgpack_pack_array(&c->pk, nrefs);
        for (size_t i = 0; i < nrefs; i++)
            proto_pack_cstr(&c->pk, refs[i]);
    }
    r = client_send(c);
    return r < 0 ? r : await_job(c, id, reply);
}

/* Reads until buf[0..cap) is full or the input ends; the byte count or -errno. */
static ssize_t read_full(int fd, uint8_t *buf, size_t have, size_t cap)
{
    while (have < cap) {
        ssize_t n = read(fd, buf + have, cap - have);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        have += (size_t)n;
    }
    return (ssize_t)have;
}

static void pack_more(msgpack_packer *pk, bool more)
{
    proto_pack_cstr(pk, "more");
    proto_pack_bool(pk, more);
}

/* Begins the `add` frame with every field but `data`; `first` is the first piece. */
/* read_full() up to `cap`, but no more than *left bytes in all (what it read is taken off). */
static ssize_t read_limited(int fd, uint8_t *buf, size_t have, size_t cap, uint64_t *left)
{
    ssize_t n;

    if (cap - have > *left)
        cap = have + (size_t)*left;
    n = read_full(fd, buf, have, cap);
    if (n > 0)
        *left -= (uint64_t)n - have;
    return n;
}

static uint64_t begin_add(struct client *c, const struct client_add_req *req, int64_t size,
                          const uint8_t *first, size_t first_len, bool more)
{
    uint64_t id = client_begin(c, "add", 2 + client_add_head_fields(req, size)); /* + more, data */

    client_pack_add_head(&c->pk, req, size, first, first_len);
    pack_more(&c->pk, more);
    return id;
}

/*
 * Pieces are read one byte past PROTO_MAX_DATA: the extra byte tells whether
 * more input follows, so every frame carries the right `more` without a
 * trailing empty frame, and then starts the next piece.
 */
int client_add(struct client *c, const struct client_add_req *req, int in_fd,
               const msgpack_object **reply)
{
    const size_t cap = (size_t)PROTO_MAX_DATA + 1;
    /*
     * No size is announced: a file may change while it is read (or, like
     * those in /proc, say a size it does not have), and what was read is
     * what is stored.
     */
    int64_t size = -1;
    uint64_t left = req->read_limit ? req->read_limit : UINT64_MAX;
    ssize_t n;
    uint64_t id;
    bool more;
    int r;

    if (!c->iobuf && !(c->iobuf = malloc(cap)))
        return -ENOMEM;
    n = read_limited(in_fd, c->iobuf, 0, cap, &left);
    if (n < 0)
        return client_io_error(c, (int)-n);
    more = (size_t)n == cap;
    id = begin_add(c, req, size, c->iobuf, (size_t)n, more);
    r = client_send_data(c, c->iobuf, more ? PROTO_MAX_DATA : (size_t)n);
    while (r == 0 && more) {
        progress(c, PROTO_MAX_DATA, 0);
        c->iobuf[0] = c->iobuf[PROTO_MAX_DATA];
        n = read_limited(in_fd, c->iobuf, 1, cap, &left);
        if (n < 0) {
            /* The daemon waits for the rest of this document; only hanging up ends the add. */
            client_disconnect(c);
            return client_io_error(c, (int)-n);
        }
        /* A daemon that failed the add early has said so: stop streaming. */
        r = client_poll(c, id, reply);
        if (r != -EAGAIN)
            return r;
        more = (size_t)n == cap;
        client_continue(c, id, 2);
        pack_more(&c->pk, more);
        r = client_send_data(c, c->iobuf, more ? PROTO_MAX_DATA : (size_t)n);
    }
    if (r == 0)
        progress(c, (size_t)n, 0);
    return r < 0 ? r : client_await(c, id, reply);
}

#define SPARSE_BLOCK 4096

static bool all_zero(const uint8_t *p, size_t n)
{
    return n > 0 && p[0] == 0 && memcmp(p, p + 1, n - 1) == 0;
}

/* The next piece of a sparse write at file offset pos: a whole zero block, or data up to one. */
static size_t next_piece(const uint8_t *p, size_t len, uint64_t pos, bool *hole)
{
    size_t n = (size_t)(SPARSE_BLOCK - pos % SPARSE_BLOCK);

    if (n > len)
        n = len;
    *hole = n == SPARSE_BLOCK && all_zero(p, n);
    if (*hole)
        return n;
    /* Data runs on until a whole zero block starts. */
    while (n < len) {
        size_t next = len - n < SPARSE_BLOCK ? len - n : SPARSE_BLOCK;
        if (next == SPARSE_BLOCK && all_zero(p + n, next))
            break;
        n += next;
    }
    return n;
}

/* Writes len bytes at *pos, seeking over whole zero blocks; *hole_at_end says whether it ended on
 * one. */
static int write_sparse(int fd, const uint8_t *p, size_t len, uint64_t *pos, bool *hole_at_end)
{
    while (len > 0) {
        bool hole;
        size_t n = next_piece(p, len, *pos, &hole);
        if (hole) {
            if (lseek(fd, (off_t)n, SEEK_CUR) < 0)
                return -errno;
        } else {
            int r = util_write_all(fd, p, n);
            if (r < 0)
                return r;
        }
        *hole_at_end = hole;
        p += n;
        len -= n;
        *pos += n;
    }
    return 0;
}

/* Where a get's content goes: a file descriptor (maybe written sparse), or a callback. */
struct get_sink {
    int fd;
    bool sparse, hole_at_end;
    uint64_t pos;
    client_data_fn *fn;
    void *userdata;
    struct sha256 *sha; /* a whole document asked for by its full hash: what arrives is hashed */
};

/* 0, 1 to stop early (callback only), or -errno of the write. */
static int sink_put(struct get_sink *k, const msgpack_object *first, const uint8_t *data,
                    size_t len, bool last)
{
    int r = 0;

    if (k->fn)
        return k->fn(k->userdata, first, data, len);
    if (len > 0)
        r = k->sparse ? write_sparse(k->fd, data, len, &k->pos, &k->hole_at_end)
                      : util_write_all(k->fd, data, len);
    /* A hole at the end is there only once the file is that long. */
    if (r == 0 && last && k->hole_at_end && ftruncate(k->fd, (off_t)k->pos) < 0)
        r = -errno;
    return r;
}

static int get_stream(struct client *c, const char *ref, uint64_t offset, uint64_t length,
                      struct get_sink *k);

/*
 * A full hash names the content: what arrives for it must hash to it, so a
 * daemon that is not the user's own (or a broken one) cannot hand over other
 * bytes as that document. A range cannot be checked on its own, and a name
 * or a prefix names no content.
 */
static int get_to(struct client *c, const char *ref, uint64_t offset, uint64_t length,
                  struct get_sink *k)
{
    struct sha256 sha;

    if (offset > 0 || length != UINT64_MAX || strlen(ref) != PROTO_HASH_HEX ||
        !proto_is_hex(ref, PROTO_HASH_HEX))
        return get_stream(c, ref, offset, length, k);
    sha256_init(&sha);
    k->sha = &sha;
    return get_stream(c, ref, offset, length, k);
}

/* The last piece has come: 0 when all of it hashes to `ref`, else an integrity error. */
static int check_content(struct client *c, const char *ref, struct sha256 *sha)
{
    uint8_t digest[SHA256_LEN], want[SHA256_LEN];

    sha256_final(sha, digest);
    if (proto_hex_decode(ref, PROTO_HASH_HEX, want, sizeof(want)) == 0 &&
        memcmp(digest, want, sizeof(digest)) == 0)
        return 0;
    c->error.code = PROTO_E_INTEGRITY;
    snprintf(c->error.code_name, sizeof(c->error.code_name), "%s",
             proto_error_name(PROTO_E_INTEGRITY));
    snprintf(c->error.message, sizeof(c->error.message),
             "integrity: the content cairnd sent does not hash to %.64s", ref);
    return CLIENT_E_DAEMON;
}

int client_get(struct client *c, const char *ref, int out_fd)
{
    struct get_sink k = {.fd = out_fd};
    return get_to(c, ref, 0, UINT64_MAX, &k);
}

int client_get_sparse(struct client *c, const char *ref, int out_fd)
{
    struct get_sink k = {.fd = out_fd, .sparse = true};
    return get_to(c, ref, 0, UINT64_MAX, &k);
}

int client_get_range_fd(struct client *c, const char *ref, uint64_t offset, uint64_t length,
                        int out_fd, bool sparse)
{
    struct get_sink k = {.fd = out_fd, .sparse = sparse};
    return get_to(c, ref, offset, length, &k);
}

int client_get_fn(struct client *c, const char *ref, client_data_fn *fn, void *userdata)
{
    return client_get_range(c, ref, 0, UINT64_MAX, fn, userdata);
}

int client_get_range(struct client *c, const char *ref, uint64_t offset, uint64_t length,
                     client_data_fn *fn, void *userdata)
{
    struct get_sink k = {.fd = -1, .fn = fn, .userdata = userdata};
    return get_to(c, ref, offset, length, &k);
}

static int get_stream(struct client *c, const char *ref, uint64_t offset, uint64_t length,
                      struct get_sink *k)
{
    const msgpack_object *reply, *first;
    uint64_t size = 0, total = 0;
    bool ranged = offset > 0 || length != UINT64_MAX, sized, more;
    uint64_t id;
    int r;

    id = client_begin(c, "get", ranged ? 3 : 1);
    proto_pack_cstr(&c->pk, "ref");
    proto_pack_cstr(&c->pk, ref);
    if (ranged) {
        proto_pack_cstr(&c->pk, "offset");
        msgpack_pack_uint64(&c->pk, offset);
        proto_pack_cstr(&c->pk, "length");
        msgpack_pack_uint64(&c->pk, length);
    }
    r = client_send(c);
    if (r < 0 || (r = client_await(c, id, &reply)) != 0)
        return r;
    sized = proto_get_uint(reply, "size", &size) == 0;
    if (sized) {
        /* What the range holds of the document: that many bytes must come. */
        uint64_t end = length > size - (offset < size ? offset : size) ? size : offset + length;
        size = offset < size ? end - offset : 0;
    }
    first = reply;
    for (;;) {
        const uint8_t *data = NULL;
        size_t len = 0;

        more = false;
        if (proto_get_bin(reply, "data", &data, &len) < 0 ||
            proto_get_bool(reply, "more", &more) < 0)
            return bad_reply(c);
        total += len;
        if (sized && (total > size || (!more && total != size)))
            return bad_reply(c);
        /* Checked before the last piece is written: a document of one frame is then not. */
        if (k->sha)
            sha256_update(k->sha, data, len);
        if (k->sha && !more && (r = check_content(c, ref, k->sha)) != 0)
            return r;
        r = sink_put(k, first, data, len, !more);
        first = NULL;
        if (r == 0)
            progress(c, len, sized ? size : 0);
        if (r == 1) {
            /* The caller has what it wanted: hanging up stops the rest of the stream. */
            client_disconnect(c);
            return 0;
        }
        if (r < 0) {
            /* The rest of the stream is of no use now; hanging up stops it. */
            client_disconnect(c);
            return client_io_error(c, -r);
        }
        if (!more)
            return 0;
        r = client_await(c, id, &reply);
        if (r != 0)
            return r;
    }
}

/* Reads the frames of a streamed reply, calling `fn` for each map in its `key` array. */
static int stream_items(struct client *c, uint64_t id, const char *key, client_doc_fn *fn,
                        void *userdata)
{
    const msgpack_object *reply, *items;
    bool more;
    int r;

    do {
        r = client_await(c, id, &reply);
        if (r != 0)
            return r;
        more = false;
        items = proto_map_get(reply, key);
        if ((items && items->type != MSGPACK_OBJECT_ARRAY) ||
            proto_get_bool(reply, "more", &more) < 0)
            return bad_reply(c);
        for (uint32_t i = 0; items && i < items->via.array.size; i++) {
            if (items->via.array.ptr[i].type != MSGPACK_OBJECT_MAP)
                return bad_reply(c);
            fn(userdata, &items->via.array.ptr[i]);
        }
    } while (more);
    return 0;
}

int client_list(struct client *c, const char *tag, client_doc_fn *fn, void *userdata)
{
    return client_list_page(c, tag, NULL, 0, fn, userdata);
}

int client_list_page(struct client *c, const char *tag, const char *after, uint64_t limit,
                     client_doc_fn *fn, void *userdata)
{
    struct client_list_req req = {.tag = tag, .after = after, .limit = limit};
    return client_list_req(c, &req, fn, userdata);
}

int client_list_req(struct client *c, const struct client_list_req *req, client_doc_fn *fn,
                    void *userdata)
{
    bool names = req->mode == CLIENT_LIST_NAMES, unnamed = req->mode == CLIENT_LIST_UNNAMED;
    uint64_t id = client_begin(c, "list",
                               (req->tag ? 1 : 0) + (req->after ? 1 : 0) + (req->limit ? 1 : 0) +
                                   (names || unnamed) + (names && req->prefix) +
                                   (names && req->prefix && req->path));
    int r;

    if (req->tag) {
        proto_pack_cstr(&c->pk, "tag");
        proto_pack_cstr(&c->pk, req->tag);
    }
    if (req->after) {
        proto_pack_cstr(&c->pk, "after");
        proto_pack_cstr(&c->pk, req->after);
    }
    if (req->limit) {
        proto_pack_cstr(&c->pk, "limit");
        msgpack_pack_uint64(&c->pk, req->limit);
    }
    if (names || unnamed) {
        proto_pack_cstr(&c->pk, names ? "names" : "unnamed");
        msgpack_pack_true(&c->pk);
    }
    if (names && req->prefix) {
        proto_pack_cstr(&c->pk, "prefix");
        proto_pack_cstr(&c->pk, req->prefix);
    }
    if (names && req->prefix && req->path) {
        proto_pack_cstr(&c->pk, "path");
        msgpack_pack_true(&c->pk);
    }
    r = client_send(c);
    return r < 0 ? r : stream_items(c, id, "items", fn, userdata);
}

int client_search(struct client *c, const struct client_search_req *req, client_doc_fn *fn,
                  void *userdata)
{
    uint64_t id = c->next_id++;
    int r = client_encode_search(&c->sbuf, id, req);

    if (r == 0)
        r = client_send(c);
    return r < 0 ? r : stream_items(c, id, "hits", fn, userdata);
}

int client_key(struct client *c, const char *action, const char *key, const char *pass, size_t plen,
               const msgpack_object **reply)
{
    uint64_t id = client_begin(c, "key", 1 + (key != NULL) + (pass != NULL));
    int r;

    proto_pack_cstr(&c->pk, "action");
    proto_pack_cstr(&c->pk, action);
    if (key) {
        proto_pack_cstr(&c->pk, "key");
        proto_pack_cstr(&c->pk, key);
    }
    if (pass) {
        proto_pack_cstr(&c->pk, "passphrase");
        msgpack_pack_str_with_body(&c->pk, pass, plen);
    }
    r = client_send(c);
    return r < 0 ? r : client_await(c, id, reply);
}
