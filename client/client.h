#pragma once

/*
 * A small blocking client for cairnd, used by the `cairn` CLI, the tests and
 * load generators. It owns one Unix socket connection, builds request frames
 * with the proto module and reads reply frames into one bounded buffer
 * (PROTO_MAX_FRAME + 4 bytes), so a misbehaving daemon can never make it
 * allocate more. Replies are matched by id; frames for other ids (leftovers of
 * an abandoned request) are skipped. Content streams in and out in pieces of
 * at most PROTO_MAX_DATA bytes: no helper ever holds a whole document.
 *
 * Errors: 0 is success; a negative errno means the connection is unusable
 * (the client closes it: -ECONNRESET when the daemon hung up, -EBADMSG for a
 * malformed reply); the positive CLIENT_E_* codes below are expected outcomes
 * described by client_error().
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/proto.h"

struct client;

enum {
    CLIENT_E_DAEMON = 1, /* the daemon answered ok: false, or (code integrity) the content of a
                            get by full hash did not hash to it */
    CLIENT_E_IO,         /* reading the input or writing the output fd failed */
};

/* Details of the last CLIENT_E_* outcome. */
struct client_error {
    enum proto_error code; /* PROTO_E_INTERNAL for codes this client does not know */
    char code_name[32];    /* as the daemon sent it, truncated */
    char message[512];     /* the daemon's message, or the code name when it sent none */
    int errnum;            /* CLIENT_E_IO: the errno of the failed read or write */
};

/* One `meta` entry of an add. */
struct client_meta {
    const char *key;
    const char *value;
};

/* The optional fields of an add; a zeroed struct adds an unnamed document. */
struct client_add_req {
    const char *name; /* NULL or "": no name */
    const char *mime; /* NULL: client_mime_guess() of the first piece */
    const char *const *tags;
    size_t n_tags;
    const struct client_meta *meta;
    size_t n_meta;
    /* client_add(): read at most this many bytes of the input; 0 reads it to its end. */
    uint64_t read_limit;
    /* Only fresh copies of chunks verify found damaged; no document (PROTOCOL.md add). */
    bool heal;
    /* With a name: the file it comes from, st_mode (0: none sent) and mtime in ns. */
    uint32_t mode;
    int64_t mtime;
};

/*
 * Told of content bytes as an add sends them or a get receives them: `n` more,
 * of `total` (0 when unknown: an add streams until its input ends).
 */
typedef void client_progress_fn(void *userdata, uint64_t n, uint64_t total);
void client_set_progress(struct client *c, client_progress_fn *fn, void *userdata);

/* Called by client_list() once per document; the map lives until it returns. */
typedef void client_doc_fn(void *userdata, const msgpack_object *doc);

/*
 * Connects to the socket at `path`. A positive timeout_ms bounds the wait for a
 * listener whose backlog is full (-ETIMEDOUT); 0 waits as long as it takes.
 * -ENOENT and -ECONNREFUSED mean nobody listens there. -EPERM: refused for
 * safety before a byte was sent, because another user owns or may write the
 * socket's directory (util_check_dir(), sticky root-owned directories such as
 * /tmp pass) or the daemon answering runs as another uid than this one or
 * root (SO_PEERCRED);
 * client_refusal() says which.
 */
int client_connect(struct client **out, const char *path, int timeout_ms);
/* After client_connect() returned -EPERM in this thread: why, as a sentence; else "". */
const char *client_refusal(void);
/* Takes over an already connected stream socket; it is closed by client_free(). */
int client_adopt(struct client **out, int fd);
struct client *client_free(struct client *c);
/*
 * The daemon's pid and uid, as SO_PEERCRED named them when the connection was
 * made (the pid is systemd's, 1, on a socket it passed); false if unknown.
 */
bool client_peer(const struct client *c, pid_t *pid, uid_t *uid);
/*
 * Discards what the daemon still sends until it closes the connection, then
 * closes this end too. 0, -ETIMEDOUT after timeout_ms (-1: no limit), -errno.
 */
int client_wait_closed(struct client *c, int timeout_ms);
/* False once a connection error closed the socket; connect again to go on. */
bool client_connected(const struct client *c);
const struct client_error *client_error(const struct client *c);

/*
 * Request framing. client_begin() starts a frame whose map has `nfields` + 2
 * entries and packs `id` (returned; never 0) and `op`; the caller packs exactly
 * `nfields` key/value pairs with client_packer() and sends. Frames begun before
 * a send go out together, which is how a caller pipelines requests.
 */
uint64_t client_begin(struct client *c, const char *op, uint32_t nfields);
/* Starts a continuation frame {id, op: "data"} of the streamed request `id`. */
void client_continue(struct client *c, uint64_t id, uint32_t nfields);
msgpack_packer *client_packer(struct client *c);
/* Finishes the open frame and writes out every buffered frame. */
int client_send(struct client *c);
/*
 * Like client_send(), but the open frame's last field is `data` holding
 * data[0..len), which is written from where it is instead of being copied.
 * `data` counts as one of the frame's `nfields`.
 */
int client_send_data(struct client *c, const void *data, size_t len);

/*
 * Reads the next reply frame for `id` and returns its map in *reply, valid
 * until the next receive or client_free(). Frames for other ids are skipped; a
 * frame with id 0 (the daemon's answer to a frame it could not attribute)
 * counts as an answer. ok: false gives CLIENT_E_DAEMON.
 */
int client_await(struct client *c, uint64_t id, const msgpack_object **reply);
/* Like client_await(), but -EAGAIN instead of blocking when no frame is there. */
int client_poll(struct client *c, uint64_t id, const msgpack_object **reply);
/*
 * The next reply frame whatever its request, with that request's id in *id
 * (0 for errors about no particular request); for callers with several
 * requests in flight. Returns like client_await().
 */
int client_await_next(struct client *c, uint64_t *id, const msgpack_object **reply);

/* The operations of PROTOCOL.md; *reply as for client_await(). */
int client_hello(struct client *c, const msgpack_object **reply);
/* Streams in_fd to its end; sends `size` when in_fd is a regular file. */
int client_add(struct client *c, const struct client_add_req *req, int in_fd,
               const msgpack_object **reply);
/*
 * Writes the content to out_fd piece by piece as it arrives. On failure part
 * of it may have been written already; the caller discards it.
 */
int client_get(struct client *c, const char *ref, int out_fd);
/*
 * client_get() into a new, empty regular file (not opened with O_APPEND):
 * aligned 4 KiB blocks of zeros become holes, as `cp --sparse` makes them.
 */
int client_get_sparse(struct client *c, const char *ref, int out_fd);
/* Bytes [offset, offset + length) only (UINT64_MAX: to the end) to out_fd; sparse as above if
 * asked. */
int client_get_range_fd(struct client *c, const char *ref, uint64_t offset, uint64_t length,
                        int out_fd, bool sparse);
/*
 * Receives a document's content piece by piece: `first` is the first frame
 * (hash, name, size, mime) with the first piece, NULL later. The callback
 * returns 0 to go on, 1 when it has what it wanted (the connection is then
 * closed to stop the stream: connect again for the next request), or
 * negative errno to fail with CLIENT_E_IO.
 */
typedef int client_data_fn(void *userdata, const msgpack_object *first, const uint8_t *data,
                           size_t len);
int client_get_fn(struct client *c, const char *ref, client_data_fn *fn, void *userdata);
/* The same for bytes [offset, offset + length) only (UINT64_MAX: to the end). */
int client_get_range(struct client *c, const char *ref, uint64_t offset, uint64_t length,
                     client_data_fn *fn, void *userdata);
/*
 * Deletes by ref: a hash (or prefix) deletes the document with its names, a
 * name removes that name (PROTOCOL.md `delete`). dry_run: only says what
 * would go.
 */
int client_delete(struct client *c, const char *ref, bool dry_run, const msgpack_object **reply);
/* PROTOCOL.md `list`: documents in hash order, names in name order, or documents without a name. */
enum client_list_mode { CLIENT_LIST_DOCS, CLIENT_LIST_NAMES, CLIENT_LIST_UNNAMED };
struct client_list_req {
    enum client_list_mode mode;
    const char *tag;    /* NULL: any */
    const char *prefix; /* names only; NULL: all */
    bool path;          /* names only: prefix is a path (the name itself and those under it) */
    const char *after;  /* a hash (a name, for names); NULL: the start */
    uint64_t limit;     /* 0: all */
};
int client_list_req(struct client *c, const struct client_list_req *req, client_doc_fn *fn,
                    void *userdata);
/* Every document (with `tag` when it is not NULL), in hash order. */
int client_list(struct client *c, const char *tag, client_doc_fn *fn, void *userdata);
/* The same from the first hash after `after` (NULL: the start), at most `limit` (0: all). */
int client_list_page(struct client *c, const char *tag, const char *after, uint64_t limit,
                     client_doc_fn *fn, void *userdata);
struct client_search_req;
/* Searches (PROTOCOL.md "search"); calls `fn` for each hit, best first. */
int client_search(struct client *c, const struct client_search_req *req, client_doc_fn *fn,
                  void *userdata);
int client_stat(struct client *c, const char *ref, const msgpack_object **reply);
/* PROTOCOL.md `edit`: what to add to and remove from a document's tags and metadata. */
struct client_edit_req {
    const char *const *tags, *const *untags, *const *unmeta;
    size_t ntags, nuntags, nunmeta;
    const struct client_meta *meta;
    size_t nmeta;
};
int client_edit(struct client *c, const char *ref, const struct client_edit_req *req,
                const msgpack_object **reply);
/* PROTOCOL.md `name`: gives REF's document the name NAME; with `rename`, REF's name goes. */
int client_name(struct client *c, const char *ref, const char *name, bool rename,
                const msgpack_object **reply);
/* The versions of `name`, newest first, from `offset` on, at most `limit`. */
int client_log(struct client *c, const char *name, uint64_t offset, uint64_t limit,
               const msgpack_object **reply);
int client_status(struct client *c, const msgpack_object **reply);
/* The daemon's metrics: a reply whose `text` is the Prometheus text format. */
int client_metrics(struct client *c, const msgpack_object **reply);
/* PROTOCOL.md `du`: what the names under `prefix` (NULL: every name) hold. */
int client_du(struct client *c, const char *prefix, bool path, const msgpack_object **reply);
/*
 * A long job's progress (gc, verify): its phase ("mark", "sweep", "repack",
 * "verify"), and `done` of `total` (0: unknown) in its unit. When set, gc
 * and verify ask cairnd for it (PROTOCOL.md) and report each one here.
 */
typedef void client_job_progress_fn(void *userdata, const char *phase, uint64_t done,
                                    uint64_t total);
void client_set_job_progress(struct client *c, client_job_progress_fn *fn, void *userdata);
int client_gc(struct client *c, const msgpack_object **reply);
/* Reads what the bucket's other writers have written since this daemon last looked. */
int client_refresh(struct client *c, const msgpack_object **reply);
/* Asks the daemon to stop as on SIGTERM; the reply has its `pid`. */
int client_shutdown(struct client *c, const msgpack_object **reply);
/* The key op: action list, add (pass), remove (key) or passwd (pass). */
int client_key(struct client *c, const char *action, const char *key, const char *pass, size_t plen,
               const msgpack_object **reply);
/*
 * Sends a whole document of at most PROTO_MAX_DATA bytes as one add frame and
 * returns without waiting: *id is the request to await (client_await_next).
 */
int client_add_send(struct client *c, const struct client_add_req *req, const void *data,
                    size_t len, uint64_t *id);
/* Verifies the chunks of `refs`, or the whole store when nrefs is 0 (at most 64 refs). */
int client_verify(struct client *c, const char *const *refs, size_t nrefs,
                  const msgpack_object **reply);

/*
 * The default socket path: $CAIRN_SOCKET, else
 * $XDG_RUNTIME_DIR/cairn/cairnd.sock, else /tmp/cairn-$UID/cairnd.sock (empty
 * variables count as unset). -ENAMETOOLONG when it does not fit `size` or a
 * socket address.
 */
int client_socket_path(char *buf, size_t size);

/*
 * Length (1-4) of the valid UTF-8 sequence at s[0..len), 0 when the bytes there
 * are not valid UTF-8 (overlong forms and surrogates included), -1 when they
 * are a valid start cut short by `len`.
 */
int client_utf8_seq(const uint8_t *s, size_t len);
/*
 * "text/plain" when the first CLIENT_MIME_WINDOW bytes of data[0..len) are
 * UTF-8 without NUL bytes, else "application/octet-stream". A sequence cut by
 * the window counts as valid; one cut by the end of the data does not.
 */
#define CLIENT_MIME_WINDOW 8192
const char *client_mime_guess(const uint8_t *data, size_t len);

/*
 * Socket-independent wire code (codec.c), for callers that run their own I/O,
 * such as an event loop with many connections. The blocking functions above
 * and these apply the same framing rules of the proto module.
 *
 * Encoders append one whole request frame to `sbuf`, so frames for several
 * requests can be built back to back and written together. Each returns 0,
 * -ENOMEM, or -EMSGSIZE when the frame would exceed PROTO_MAX_FRAME; on
 * failure `sbuf` is left as it was before the call.
 */

/* The fields of a `search` request; zeroed fields are not sent. */
struct client_search_req {
    const char *query;
    uint64_t limit; /* 0: the daemon's default */
    uint64_t offset;
    const char *const *tags;
    size_t n_tags;
    const char *name; /* glob on document names */
    const char *mime;
    bool has_after, has_before;
    int64_t after, before; /* Unix time in seconds */
    bool fuzzy;
    bool all; /* only documents with every word (no hits with some of them after) */
};

/*
 * The first frame of an add: `data` is the first piece of content and `more`
 * says whether client_encode_data() frames follow. `size` < 0 leaves the size
 * out; req NULL adds an unnamed document; a NULL req->mime is guessed from
 * `data` with client_mime_guess().
 */
int client_encode_add(msgpack_sbuffer *sbuf, uint64_t id, const struct client_add_req *req,
                      int64_t size, const void *data, size_t len, bool more);
/* The add frame's fields but `data` and `more` (client_pack_add_head packs them). */
uint32_t client_add_head_fields(const struct client_add_req *req, int64_t size);
void client_pack_add_head(msgpack_packer *pk, const struct client_add_req *req, int64_t size,
                          const void *first, size_t first_len);
/* A continuation {id, op: "data", data, more} of the add `id`. */
int client_encode_data(msgpack_sbuffer *sbuf, uint64_t id, const void *data, size_t len, bool more);
int client_encode_get(msgpack_sbuffer *sbuf, uint64_t id, const char *ref);
int client_encode_delete(msgpack_sbuffer *sbuf, uint64_t id, const char *ref);
int client_encode_stat(msgpack_sbuffer *sbuf, uint64_t id, const char *ref);
int client_encode_status(msgpack_sbuffer *sbuf, uint64_t id);
int client_encode_search(msgpack_sbuffer *sbuf, uint64_t id, const struct client_search_req *req);

/*
 * A reply decoder: the caller reads into the space client_decoder_space()
 * offers, reports the byte count with client_decoder_advance(), then calls
 * client_decoder_next() until it returns CLIENT_DECODE_NEED_MORE. The buffer
 * starts small and grows only up to one maximal frame (PROTO_MAX_FRAME + 4).
 */
struct client_decoder {
    uint8_t *buf;
    size_t cap, pos, len, consumed;
    struct proto_msg msg;
};

/* One decoded reply frame; valid until the next client_decoder_* call. */
struct client_reply {
    uint64_t id;
    bool ok;
    /*
     * The request is finished with this frame: it failed (ok: false) or has
     * no `more: true`. Streamed replies (get, list) end at their last frame.
     */
    bool last;
    enum proto_error code; /* when !ok; PROTO_E_INTERNAL for unknown codes */
    const char *code_name; /* when !ok: the code as sent, not NUL-terminated */
    size_t code_name_len;
    const msgpack_object *map;
};

#define CLIENT_DECODE_NEED_MORE 1

void client_decoder_init(struct client_decoder *dec);
void client_decoder_deinit(struct client_decoder *dec);
/*
 * Where the next bytes go: 0, -ENOMEM, or -ENOBUFS when the buffer is full of
 * whole frames that client_decoder_next() has not taken out yet.
 */
int client_decoder_space(struct client_decoder *dec, uint8_t **space, size_t *avail);
/* Accounts for `n` bytes written into the space. */
void client_decoder_advance(struct client_decoder *dec, size_t n);
/*
 * 0 with the next frame in *reply; CLIENT_DECODE_NEED_MORE when no whole frame
 * is buffered; -EBADMSG when the bytes break the protocol (over-long, empty or
 * malformed frame, or a reply without an id): the stream is unusable.
 */
int client_decoder_next(struct client_decoder *dec, struct client_reply *reply);
