/*
 * Requests through cairnd itself: a real daemon (daemon_new) on a local
 * backend in a temporary directory, made once per process, serves each input
 * on a fresh connection to its real listening socket, so the bytes go through
 * conn.c (accept, the peer check, frame splitting, flow control), dispatch.c
 * and every op's own parsing and validation in op-*.c down to the store and
 * the database.
 *
 * An input is up to FUZZ_MAX_SEGMENTS segments separated by FUZZ_SEP (four
 * 0xc1 bytes: a byte msgpack never uses, so a separator only turns up inside
 * a str or bin). A segment is
 *
 *   kind:u8 id:u8 body
 *
 * where kind, modulo FUZZ_KINDS, picks
 *   - an op of PROTOCOL.md (fuzz_ops): the frame sent is the body's msgpack
 *     map with `id` and `op` put in front (the body's map header is replaced
 *     by one counting two more entries; the rest of the body is copied as
 *     it is, so a malformed body still reaches the validator; a body that
 *     does not start with a map header follows a map of id and op alone);
 *   - FUZZ_RAW_FRAME: the body is the whole payload of one frame;
 *   - FUZZ_RAW_BYTES: the body goes on the stream as it is (lengths that lie,
 *     frames over the limit, a partial frame at the end);
 *   - FUZZ_HANG_UP: the client goes away once what came before is written,
 *     without reading a reply; the segments after it are not sent.
 * Otherwise the harness shuts its side down once everything is written, and
 * reads and checks every reply until cairnd closes the connection. Either
 * way it then waits until no request of it is left in the store and the
 * search index has caught up.
 *
 * Each input starts from the same store: a few documents (fuzz_docs;
 * make-seeds.py computes the same hashes), added once by a daemon of their
 * own, whose data directory is then copied for every start. An input that
 * wrote to the store (any file of the data directory changed) is followed by
 * a new daemon on a new copy, so that an input does the same whatever ran
 * before it, and a crash replays from its input alone. With
 * CAIRN_TEST_NO_SYNC=1 (set here) nothing waits for the disk.
 *
 * The checks beyond the sanitizers': every reply frame is one msgpack map
 * under the frame limit with an unsigned `id` and a boolean `ok`, an error
 * carries `{code, message}` strings, and its id is 0 or one the input sent;
 * `internal`, `storage_error`, `integrity` and `backend_unavailable` mean
 * the daemon or its healthy local store failed, and abort the run; and once
 * the input is done, nothing but the listening socket keeps the daemon's
 * loop alive.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "daemon/app/config.h"
#include "daemon/app/daemon.h"
#include "daemon/base/log.h"
#include "daemon/gc/gc.h"
#include "daemon/net/net.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"
#include "proto/proto.h"
#include "proto/util.h"
#include "tests/fuzz/fuzz.h"

/*
 * The ops, in PROTOCOL.md's order, which is also the order `hello` lists
 * them in: the start-up checks that the daemon's list is this one, so a new
 * op cannot stay out of reach of the fuzzer unnoticed.
 */
static const char *const fuzz_ops[] = {
    "hello",  "add", "data",    "get", "delete", "list",     "stat",    "status", "search", "gc",
    "verify", "du",  "refresh", "key", "log",    "shutdown", "metrics", "name",   "edit"};
/*
 * The ops before the raw kinds; ops added later take kinds after them
 * (FUZZ_KEY, FUZZ_LOG, FUZZ_SHUTDOWN, FUZZ_METRICS, FUZZ_NAME, FUZZ_EDIT), so that the inputs of
 * the corpus keep their meaning.
 */
#define FUZZ_FIRST_OPS 13
enum {
    FUZZ_RAW_FRAME = FUZZ_FIRST_OPS,
    FUZZ_RAW_BYTES,
    FUZZ_HANG_UP,
    FUZZ_KEY,
    FUZZ_LOG,
    FUZZ_SHUTDOWN,
    FUZZ_METRICS,
    FUZZ_NAME,
    FUZZ_EDIT,
    FUZZ_KINDS,
};

#define FUZZ_SEP "\xc1\xc1\xc1\xc1"
#define FUZZ_SEP_LEN 4
/*
 * A few more than the requests the daemon takes in flight (64), so that it
 * stops reading; many more would only make an input slow.
 */
#define FUZZ_MAX_SEGMENTS 80

/* The documents every input finds in the store. */
struct fuzz_doc {
    const char *name, *mime, *tag, *text;
    /* > 0: the content is that many bytes of fuzz_blob_byte() instead of text */
    size_t blob;
    size_t period; /* > 0: the blob repeats its first `period` bytes */
};
static const struct fuzz_doc fuzz_docs[] = {
    {"notes/a.txt", "text/plain", "work", "hello world, the quick brown fox\n", 0, 0},
    {"notes/a.txt", "text/plain", "draft", "second version of a\n", 0, 0},
    {"usr/share/doc/readme", "text/markdown", NULL, "read me first\n", 0, 0},
    {"alias", NULL, NULL, "read me first\n", 0, 0},
    {"", NULL, "x", "nameless\n", 0, 0},
    {"bin/blob", NULL, NULL, NULL, 20000, 0},
    /*
     * More than the 1 MiB a get may have queued for its client: a get of it
     * waits for the client to read. Its chunks repeat, so that verify and gc
     * have little more to read.
     */
    {"big/periodic", NULL, NULL, NULL, 1280 * 1024, 20000},
    /* Their hashes share 8 hex digits, 2c678fac: a ref of those is ambiguous. */
    {"pair/a", NULL, NULL, "collide 186454\n", 0, 0},
    {"pair/b", NULL, NULL, "collide 190114\n", 0, 0},
};

/* Deterministic bytes that cut into several chunks at the configured sizes. */
static uint8_t fuzz_blob_byte(size_t i)
{
    return (uint8_t)(((uint32_t)i * 2654435761u) >> 24);
}

/* Data frames of the starting documents carry at most this much, as the CLI's do. */
#define FUZZ_DOC_PIECE PROTO_MAX_DATA

static const char fuzz_config[] = "[daemon]\n"
                                  "threads = 2\n"
                                  "[store]\n"
                                  "chunk_min = 1024\n"
                                  "chunk_avg = 4096\n"
                                  "chunk_max = 16384\n"
                                  "pack_size = 1M\n"
                                  "cache_size = 4M\n";

static struct {
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path) - 2]; /* config, socket, stores */
    char template[PATH_MAX]; /* the starting store, copied to data_dir for each start */
    char data_dir[PATH_MAX];
    char conf[PATH_MAX];
    char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct daemon *d;
    uint64_t start_print; /* fingerprint() of data_dir at the start */
    bool print; /* FUZZ_DISPATCH_PRINT=1: every reply goes to stdout, to see what an input does */
} fz;

/* ---- the client side of one connection ---- */

struct client {
    uv_pipe_t pipe;
    uv_write_t write;
    uv_shutdown_t shutdown;
    uv_buf_t out;
    uint8_t *in;
    size_t in_len, in_cap;
    bool ids_known; /* only op segments were sent: every reply id is in ids[] */
    bool ids[256];  /* the ids the input sent */
    unsigned replies, failed;
    uint8_t *first; /* a copy of the first reply's payload, when asked for */
    size_t first_len;
    bool keep_first;
    bool hang_up; /* close once written, read nothing (FUZZ_HANG_UP) */
    bool eof, closed;
};

__attribute__((noreturn)) static void fuzz_fail(const char *what, const uint8_t *payload,
                                                size_t len)
{
    fprintf(stderr, "fuzz-dispatch: %s (reply of %zu bytes:", what, len);
    for (size_t i = 0; i < len && i < 64; i++)
        fprintf(stderr, " %02x", payload[i]);
    fprintf(stderr, "%s)\n", len > 64 ? " ..." : "");
    abort();
}

/* What PROTOCOL.md promises of every reply frame. */
static void check_reply(struct client *cl, const uint8_t *payload, size_t len)
{
    static const char *const daemon_failures[] = {"internal", "storage_error", "integrity",
                                                  "backend_unavailable"};
    struct proto_msg msg;
    const msgpack_object *err, *code, *message;
    uint64_t id;
    bool ok;

    if (proto_msg_parse(&msg, payload, len) < 0)
        fuzz_fail("a reply is not one msgpack map", payload, len);
    if (proto_get_uint(msg.map, "id", &id) != 0 || proto_get_bool(msg.map, "ok", &ok) != 0)
        fuzz_fail("a reply lacks an unsigned id or a boolean ok", payload, len);
    if (cl->ids_known && id != 0 && (id > 255 || !cl->ids[id]))
        fuzz_fail("a reply carries an id no request had", payload, len);
    if (!ok) {
        err = proto_map_get(msg.map, "error");
        code = err && err->type == MSGPACK_OBJECT_MAP ? proto_map_get(err, "code") : NULL;
        message = err && err->type == MSGPACK_OBJECT_MAP ? proto_map_get(err, "message") : NULL;
        if (!code || code->type != MSGPACK_OBJECT_STR || !message ||
            message->type != MSGPACK_OBJECT_STR)
            fuzz_fail("a failure reply lacks error.code or error.message", payload, len);
        for (size_t i = 0; i < ARRAY_SIZE(daemon_failures); i++) {
            if (proto_str_eq(code, daemon_failures[i]))
                fuzz_fail("the daemon failed a request of its own fault", payload, len);
        }
        cl->failed++;
    }
    if (fz.print) {
        /* stdout is buffered: stderr would take a write for every byte of a data field. */
        msgpack_object_print(stdout, msg.unpacked.data);
        putchar('\n');
        fflush(stdout);
    }
    if (cl->keep_first && !cl->first && (cl->first = malloc(len)))
        memcpy(cl->first, payload, cl->first_len = len);
    cl->replies++;
    proto_msg_deinit(&msg);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct client *cl = container_of((uv_pipe_t *)h, struct client, pipe);

    if (cl->in_cap - cl->in_len < suggested) {
        uint8_t *grown = realloc(cl->in, cl->in_len + suggested);
        if (!grown)
            abort();
        cl->in = grown;
        cl->in_cap = cl->in_len + suggested;
    }
    *buf = uv_buf_init((char *)cl->in + cl->in_len, (unsigned)(cl->in_cap - cl->in_len));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct client *cl = container_of((uv_pipe_t *)s, struct client, pipe);
    size_t pos = 0;

    if (nread < 0) {
        /* EOF, or a reset when cairnd closed with our data unread: the connection is over. */
        cl->eof = true;
        uv_read_stop(s);
        return;
    }
    cl->in_len += (size_t)nread;
    for (;;) {
        const uint8_t *payload;
        size_t plen, consumed;
        int r = proto_frame_split(cl->in + pos, cl->in_len - pos, PROTO_MAX_FRAME, &payload, &plen,
                                  &consumed);
        if (r == PROTO_FRAME_NEED_MORE)
            break;
        if (r != 0)
            fuzz_fail(r == PROTO_FRAME_EMPTY ? "an empty reply frame"
                                             : "a reply frame over the frame limit",
                      cl->in + pos, cl->in_len - pos);
        check_reply(cl, payload, plen);
        pos += consumed;
    }
    memmove(cl->in, cl->in + pos, cl->in_len - pos);
    cl->in_len -= pos;
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    /* Fails when cairnd closed first (a bad frame): nothing to do either way. */
}

static void on_written(uv_write_t *req, int status)
{
    struct client *cl = container_of(req, struct client, write);

    if (cl->hang_up) {
        cl->eof = true; /* no more reading: the connection is over for the client */
        return;
    }
    /* Saying that nothing more comes makes cairnd answer what it got, then close. */
    if (status == 0 && uv_shutdown(&cl->shutdown, (uv_stream_t *)&cl->pipe, on_shutdown) < 0)
        abort();
}

static void on_client_closed(uv_handle_t *h)
{
    container_of((uv_pipe_t *)h, struct client, pipe)->closed = true;
}

/*
 * True when the daemon has forgotten the connection and runs nothing of it:
 * no store operation, search or gc (a gc goes on after its client went
 * away).
 */
static bool settled(const struct client *cl)
{
    struct store_progress gc;

    return cl->closed && server_connections(fz.d->srv) == 0 && store_active(fz.d->store) == 0 &&
           !search_busy(fz.d->search) && !gc_progress(fz.d->gc, &gc);
}

static void count_scheduled(uv_handle_t *h, void *arg)
{
    if (uv_is_active(h) && uv_has_ref(h))
        (*(unsigned *)arg)++;
}

/* The handles that keep the loop alive, the listening socket included. */
static unsigned scheduled(uv_loop_t *loop)
{
    unsigned n = 0;

    uv_walk(loop, count_scheduled, &n);
    return n;
}

/*
 * True while worker jobs are still queued or running with no handle of
 * their own: those of requests (list, stat, du, status) whose client went
 * away finish on their own, and only then free their op.
 */
static bool working(uv_loop_t *loop)
{
    bool alive;

    uv_unref((uv_handle_t *)&fz.d->listener);
    alive = uv_loop_alive(loop);
    uv_ref((uv_handle_t *)&fz.d->listener);
    return alive && scheduled(loop) == 1;
}

/*
 * With no client and nothing left to do, only the listening socket may keep
 * the loop alive: anything else (a timer armed for nothing, a handle left
 * open) would hold up a stopping daemon.
 */
static void check_idle(uv_loop_t *loop)
{
    if (scheduled(loop) != 1) {
        fprintf(stderr, "fuzz-dispatch: an idle cairnd has more than its listener scheduled:\n");
        uv_print_active_handles(loop, stderr);
        abort();
    }
}

/*
 * Sends `out` on a new connection to cairnd and runs the daemon's loop until
 * every reply has come, the connection is closed on both sides, and the
 * store has finished what the input started.
 */
static void exchange(struct client *cl)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    uv_loop_t *loop = &fz.d->loop;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    memcpy(sa.sun_path, fz.sock, sizeof(fz.sock));
    /* A listening Unix socket takes the connection into its backlog at once; the loop accepts it.
     */
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        perror("fuzz-dispatch: connect");
        abort();
    }
    if (uv_pipe_init(loop, &cl->pipe, 0) < 0 || uv_pipe_open(&cl->pipe, fd) < 0 ||
        (!cl->hang_up && uv_read_start((uv_stream_t *)&cl->pipe, on_alloc, on_read) < 0) ||
        uv_write(&cl->write, (uv_stream_t *)&cl->pipe, &cl->out, 1, on_written) < 0)
        abort();
    while (!cl->eof)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&cl->pipe, on_client_closed);
    while (!settled(cl))
        uv_run(loop, UV_RUN_ONCE);
    /* Adds are indexed shortly after their reply: the next input finds them indexed. */
    for (;;) {
        if (daemon_drain(fz.d) < 0)
            abort();
        if (!working(loop))
            break;
        uv_run(loop, UV_RUN_ONCE);
    }
    check_idle(loop);
    if (cl->in_len > 0)
        fuzz_fail("cairnd closed the connection in the middle of a reply frame", cl->in,
                  cl->in_len);
}

static void client_free(struct client *cl)
{
    free(cl->in);
    free(cl->first);
}

/* ---- building the frames of an input ---- */

static void put(msgpack_sbuffer *sb, const void *p, size_t len)
{
    /* msgpack-c would add 0 to the NULL data of an empty buffer. */
    if (len > 0 && msgpack_sbuffer_write(sb, p, len) < 0)
        abort();
}

/* The element count of a msgpack map header at p, and the header's size; false if none. */
static bool map_header(const uint8_t *p, size_t len, uint32_t *count, size_t *hlen)
{
    if (len >= 1 && (p[0] & 0xf0) == 0x80) {
        *count = p[0] & 0x0f;
        *hlen = 1;
    } else if (len >= 3 && p[0] == 0xde) {
        *count = (uint32_t)p[1] << 8 | p[2];
        *hlen = 3;
    } else if (len >= 5 && p[0] == 0xdf) {
        *count = proto_be32_read(p + 1);
        *hlen = 5;
    } else {
        return false;
    }
    return true;
}

/* Appends the frame or bytes of one segment to sb. */
static void build_segment(struct client *cl, msgpack_sbuffer *sb, const uint8_t *seg, size_t len)
{
    unsigned kind = seg[0] % FUZZ_KINDS;
    uint8_t id = seg[1];
    const uint8_t *body = seg + 2;
    size_t body_len = len - 2, start, hlen = 0;
    uint32_t count = 0;
    msgpack_packer pk;

    if (kind == FUZZ_HANG_UP) {
        cl->hang_up = true;
        return;
    }
    if (kind == FUZZ_RAW_BYTES) {
        cl->ids_known = false;
        put(sb, body, body_len);
        return;
    }
    if (proto_frame_begin(sb, &start) < 0)
        abort();
    if (kind == FUZZ_RAW_FRAME) {
        cl->ids_known = false;
        put(sb, body, body_len);
    } else {
        msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
        if (!map_header(body, body_len, &count, &hlen))
            count = 0;
        /* A count past what fits stays as it is: the validator is to reject it. */
        msgpack_pack_map(&pk, count <= UINT32_MAX - 2 ? count + 2 : count);
        proto_pack_cstr(&pk, "id");
        msgpack_pack_uint8(&pk, id);
        proto_pack_cstr(&pk, "op");
        proto_pack_cstr(&pk,
                        fuzz_ops[kind < FUZZ_FIRST_OPS ? kind : FUZZ_FIRST_OPS + kind - FUZZ_KEY]);
        put(sb, body + hlen, body_len - hlen);
        cl->ids[id] = true;
    }
    proto_frame_end(sb, start);
}

/* ---- the daemon and its data directory ---- */

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return remove(path);
}

static void remove_tree(const char *path)
{
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT) {
        perror("fuzz-dispatch: removing a directory");
        abort();
    }
}

static void copy_file(const char *from, const char *to, mode_t mode)
{
    char buf[64 * 1024];
    int in = open(from, O_RDONLY | O_CLOEXEC), out;
    ssize_t n;

    out = in < 0 ? -1 : open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
    if (out < 0) {
        perror("fuzz-dispatch: copying the starting store");
        abort();
    }
    while ((n = read(in, buf, sizeof(buf))) > 0) {
        if (util_write_all(out, buf, (size_t)n) < 0)
            abort();
    }
    if (n < 0 || close(out) < 0)
        abort();
    close(in);
}

/* Copies fz.template to fz.data_dir (regular files and directories: all a stopped store holds). */
static int copy_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    char to[PATH_MAX];
    size_t skip = strlen(fz.template);

    if ((size_t)snprintf(to, sizeof(to), "%s%s", fz.data_dir, path + skip) >= sizeof(to))
        abort();
    if (type == FTW_D)
        return mkdir(to, st->st_mode & 07777) == 0 ? 0 : -1;
    if (type != FTW_F || !S_ISREG(st->st_mode))
        return -1;
    copy_file(path, to, st->st_mode);
    return 0;
}

/*
 * What the files of the data directory look like: the sum over each
 * regular file of its name, size and modification time. Any write moves
 * it, a read does not. The lock file and SQLite's shared-memory index,
 * which readers touch too, are left out.
 */
static uint64_t fingerprint_sum;

static int fingerprint_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    const char *base = path + ftw->base;
    size_t len = strlen(base);
    uint64_t h = 1469598103934665603ull;

    if (type != FTW_F || strcmp(base, "cairnd.lock") == 0 ||
        (len > 4 && strcmp(base + len - 4, "-shm") == 0))
        return 0;
    for (const char *c = path; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    h ^= (uint64_t)st->st_size * 0x9e3779b97f4a7c15ull;
    h ^= ((uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec) *
         0xc2b2ae3d27d4eb4full;
    fingerprint_sum += h;
    return 0;
}

static uint64_t fingerprint(void)
{
    fingerprint_sum = 0;
    if (nftw(fz.data_dir, fingerprint_entry, 16, FTW_PHYS) != 0)
        abort();
    return fingerprint_sum;
}

static void daemon_start(const char *data_dir)
{
    char *argv[] = {"cairnd", "--config",   fz.conf,          "--socket",
                    fz.sock,  "--data-dir", (char *)data_dir, NULL};
    struct sigaction saved_int, saved_term;
    struct config cfg;
    char err[1024];

    if (config_load(&cfg, ARRAY_SIZE(argv) - 1, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz-dispatch: config: %s\n", err);
        abort();
    }
    log_init(LOG_LEVEL_ERROR);
    /*
     * cairnd stops on SIGINT and SIGTERM; here libFuzzer handles them (it
     * prints its statistics and leaves), so the daemon's watchers are
     * stopped and libFuzzer's handlers put back; the `shutdown` op, which
     * stops it the same way, is refused (bad_request).
     */
    sigaction(SIGINT, NULL, &saved_int);
    sigaction(SIGTERM, NULL, &saved_term);
    if (daemon_new(&fz.d, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz-dispatch: cairnd: %s\n", err);
        abort();
    }
    uv_signal_stop(&fz.d->sig_int);
    uv_signal_stop(&fz.d->sig_term);
    server_set_shutdown(fz.d->srv, NULL, NULL);
    sigaction(SIGINT, &saved_int, NULL);
    sigaction(SIGTERM, &saved_term, NULL);
}

/*
 * A daemon on a fresh copy of the starting store: what every input meets.
 * A copy and a start cost a few milliseconds; adding the documents anew
 * would cost several times that.
 */
static void restart(void)
{
    if (fz.d) {
        fz.d = daemon_free(fz.d);
        remove_tree(fz.data_dir);
    }
    if (nftw(fz.template, copy_entry, 16, FTW_PHYS) != 0) {
        perror("fuzz-dispatch: copying the starting store");
        abort();
    }
    daemon_start(fz.data_dir);
    /* Whatever a start leaves to do in the background is done before the first input. */
    if (daemon_drain(fz.d) < 0)
        abort();
    fz.start_print = fingerprint();
}

/* The add frame of one starting document, then its data frames. */
static void pack_doc(msgpack_sbuffer *sb, const struct fuzz_doc *doc, uint64_t id)
{
    size_t len = doc->blob ? doc->blob : strlen(doc->text), start, off = 0;
    uint8_t *content = malloc(len ? len : 1);
    msgpack_packer pk;

    if (!content)
        abort();
    for (size_t k = 0; k < len; k++)
        content[k] =
            doc->blob ? fuzz_blob_byte(doc->period ? k % doc->period : k) : (uint8_t)doc->text[k];
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    do {
        size_t n = len - off > FUZZ_DOC_PIECE ? FUZZ_DOC_PIECE : len - off;
        bool first = off == 0;

        if (proto_frame_begin(sb, &start) < 0)
            abort();
        msgpack_pack_map(&pk, 4 + (first ? 1 + (doc->mime != NULL) + 2 * (doc->tag != NULL) : 0));
        proto_pack_cstr(&pk, "id");
        msgpack_pack_uint64(&pk, id);
        proto_pack_cstr(&pk, "op");
        proto_pack_cstr(&pk, first ? "add" : "data");
        if (first) {
            proto_pack_cstr(&pk, "name");
            proto_pack_cstr(&pk, doc->name);
        }
        if (first && doc->mime) {
            proto_pack_cstr(&pk, "mime");
            proto_pack_cstr(&pk, doc->mime);
        }
        if (first && doc->tag) {
            proto_pack_cstr(&pk, "tags");
            msgpack_pack_array(&pk, 1);
            proto_pack_cstr(&pk, doc->tag);
            proto_pack_cstr(&pk, "meta");
            msgpack_pack_map(&pk, 1);
            proto_pack_cstr(&pk, "tag");
            proto_pack_cstr(&pk, doc->tag);
        }
        proto_pack_cstr(&pk, "data");
        proto_pack_bin(&pk, content + off, n);
        proto_pack_cstr(&pk, "more");
        off += n;
        if (off < len)
            msgpack_pack_true(&pk);
        else
            msgpack_pack_false(&pk);
        proto_frame_end(sb, start);
    } while (off < len);
    free(content);
}

/* Adds fuzz_docs through the same connection path the inputs take. */
static void add_docs(void)
{
    msgpack_sbuffer sb;

    msgpack_sbuffer_init(&sb);
    for (size_t i = 0; i < ARRAY_SIZE(fuzz_docs); i++) {
        struct client cl;

        pack_doc(&sb, &fuzz_docs[i], i + 1);
        /* One at a time: the second version of a name must be the newer one. */
        cl = (struct client){.out = uv_buf_init(sb.data, (unsigned)sb.size)};
        exchange(&cl);
        if (cl.replies != 1 || cl.failed != 0) {
            fprintf(stderr, "fuzz-dispatch: adding the starting documents failed\n");
            abort();
        }
        client_free(&cl);
        msgpack_sbuffer_clear(&sb);
    }
    msgpack_sbuffer_destroy(&sb);
}

/* Checks that the daemon's `hello` lists exactly fuzz_ops. */
static void check_ops(void)
{
    static const uint8_t hello[] = "\x00\x00\x00\x0e\x82\xa2id\x01\xa2op\xa5hello";
    struct client cl = {.out = uv_buf_init((char *)hello, sizeof(hello) - 1), .keep_first = true};
    struct proto_msg msg;
    const msgpack_object *ops;
    bool same;

    exchange(&cl);
    if (!cl.first || proto_msg_parse(&msg, cl.first, cl.first_len) < 0)
        abort();
    ops = proto_map_get(msg.map, "ops");
    same = ops && ops->type == MSGPACK_OBJECT_ARRAY && ops->via.array.size == ARRAY_SIZE(fuzz_ops);
    for (size_t i = 0; same && i < ARRAY_SIZE(fuzz_ops); i++)
        same = proto_str_eq(&ops->via.array.ptr[i], fuzz_ops[i]);
    proto_msg_deinit(&msg);
    client_free(&cl);
    if (!same) {
        fprintf(stderr, "fuzz-dispatch: cairnd's ops differ from fuzz_ops: update the harness, "
                        "make-seeds.py and the corpus\n");
        abort();
    }
}

static void cleanup(void)
{
    if (fz.d)
        fz.d = daemon_free(fz.d);
    remove_tree(fz.data_dir);
    remove_tree(fz.template);
    unlink(fz.conf);
    rmdir(fz.dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");
    FILE *f;

    /* Durability is not what this exercises; syncs would make every input slow. */
    setenv("CAIRN_TEST_NO_SYNC", "1", 1);
    /* Progress frames of gc and verify every millisecond, so that their code runs too. */
    setenv("CAIRN_TEST_PROGRESS_MS", "1", 1);
    signal(SIGPIPE, SIG_IGN);
    /* The socket's path, the longest, must fit in sun_path. */
    if ((size_t)snprintf(fz.dir, sizeof(fz.dir), "%s/cairn-fuzz-dispatch.XXXXXX",
                         tmp && *tmp ? tmp : "/tmp") >= sizeof(fz.dir)) {
        fprintf(stderr, "fuzz-dispatch: TMPDIR is too long for a socket path\n");
        abort();
    }
    if (!mkdtemp(fz.dir)) {
        perror("fuzz-dispatch: mkdtemp");
        abort();
    }
    snprintf(fz.template, sizeof(fz.template), "%s/start", fz.dir);
    snprintf(fz.data_dir, sizeof(fz.data_dir), "%s/data", fz.dir);
    snprintf(fz.conf, sizeof(fz.conf), "%s/cairn.conf", fz.dir);
    snprintf(fz.sock, sizeof(fz.sock), "%s/s", fz.dir);
    if (!(f = fopen(fz.conf, "w")) || fputs(fuzz_config, f) < 0 || fclose(f) != 0) {
        perror("fuzz-dispatch: config");
        abort();
    }
    atexit(cleanup);
    /* The starting store is made once, by a daemon of its own, then copied for each start. */
    daemon_start(fz.template);
    add_docs();
    check_ops();
    fz.d = daemon_free(fz.d);
    restart();
    /* After the set-up's own replies: only what the inputs make is printed. */
    fz.print = getenv("FUZZ_DISPATCH_PRINT") && strcmp(getenv("FUZZ_DISPATCH_PRINT"), "1") == 0;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct client cl = {.ids_known = true};
    msgpack_sbuffer sb;
    const uint8_t *p = data, *end = data + size;
    unsigned nseg = 0;

    msgpack_sbuffer_init(&sb);
    while (p <= end && nseg < FUZZ_MAX_SEGMENTS && !cl.hang_up) {
        const uint8_t *sep = memmem(p, (size_t)(end - p), FUZZ_SEP, FUZZ_SEP_LEN);
        const uint8_t *seg_end = sep ? sep : end;

        if (seg_end - p >= 2) {
            build_segment(&cl, &sb, p, (size_t)(seg_end - p));
            nseg++;
        }
        if (!sep)
            break;
        p = sep + FUZZ_SEP_LEN;
    }
    if (sb.size > 0) {
        cl.out = uv_buf_init(sb.data, (unsigned)sb.size);
        exchange(&cl);
    }
    client_free(&cl);
    msgpack_sbuffer_destroy(&sb);
    /* The next input finds the store as this one did, unless this one wrote to it. */
    if (fingerprint() != fz.start_print)
        restart();
    return 0;
}
