/*
 * Unit tests of the client library and the CLI helpers that need no daemon.
 * The framing and streaming tests talk to a scripted peer on a socketpair:
 * a thread that reads raw frames and answers with hand-built ones, so the
 * client's own handling of partial reads, stray ids, streams, early errors
 * and hang-ups is what is being tested.
 */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "client/cli.h"

/* --- helpers --- */

/* Parses a msgpack payload built in `sbuf` into `msg`. */
static void parse(struct proto_msg *msg, const msgpack_sbuffer *sbuf)
{
    assert_int_equal(proto_msg_parse(msg, (const uint8_t *)sbuf->data, sbuf->size), 0);
}

static char *json_line(json_t *json)
{
    char *text = json_dumps(json, JSON_COMPACT);

    json_decref(json);
    return text;
}

/* Runs cli_print_fields() and returns what it printed. */
static char *fields_text(const msgpack_object *map, const char *const *keys)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    cli_print_fields(out, map, keys);
    fclose(out);
    return text;
}

/* --- -m KEY=VALUE --- */

static void test_parse_meta(void **state)
{
    struct client_meta m;
    char plain[] = "author=ann", empty[] = "k=", eqs[] = "url=a=b", none[] = "novalue",
         nokey[] = "=v", blank[] = "";

    assert_int_equal(cli_parse_meta(plain, &m), 0);
    assert_string_equal(m.key, "author");
    assert_string_equal(m.value, "ann");
    assert_int_equal(cli_parse_meta(empty, &m), 0);
    assert_string_equal(m.key, "k");
    assert_string_equal(m.value, "");
    assert_int_equal(cli_parse_meta(eqs, &m), 0);
    assert_string_equal(m.key, "url");
    assert_string_equal(m.value, "a=b");
    assert_int_equal(cli_parse_meta(none, &m), -EINVAL);
    assert_int_equal(cli_parse_meta(nokey, &m), -EINVAL);
    assert_int_equal(cli_parse_meta(blank, &m), -EINVAL);
}

/* --- UTF-8 and mime --- */

static void test_utf8_seq(void **state)
{
    static const struct {
        const char *bytes;
        size_t len;
        int expect;
    } cases[] = {
        {"a", 1, 1},
        {"\xc3\xa9", 2, 2},
        {"\xe2\x82\xac", 3, 3},
        {"\xf0\x9f\x98\x80", 4, 4},
        {"\xf4\x8f\xbf\xbf", 4, 4}, /* U+10FFFF */
        {"\xc0\xaf", 2, 0},         /* overlong '/' */
        {"\xe0\x80\xaf", 3, 0},     /* overlong */
        {"\xed\xa0\x80", 3, 0},     /* surrogate */
        {"\xf4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0},
        {"\x80", 1, 0},  /* lone continuation */
        {"\xc3", 1, -1}, /* cut short */
        {"\xe2\x82", 2, -1},
        {"\xe2\x28\xa1", 3, 0}, /* bad continuation */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(client_utf8_seq((const uint8_t *)cases[i].bytes, cases[i].len),
                         cases[i].expect);
}

static void test_mime_guess(void **state)
{
    static const char text[] = "text/plain", binary[] = "application/octet-stream";
    uint8_t buf[CLIENT_MIME_WINDOW + 16];

    assert_string_equal(client_mime_guess((const uint8_t *)"hello\n", 6), text);
    assert_string_equal(client_mime_guess((const uint8_t *)"caf\xc3\xa9", 5), text);
    assert_string_equal(client_mime_guess((const uint8_t *)"", 0), text);
    assert_string_equal(client_mime_guess((const uint8_t *)"a\0b", 3), binary);
    assert_string_equal(client_mime_guess((const uint8_t *)"\xff\xfe", 2), binary);
    /* Cut by the end of the content: not UTF-8. */
    assert_string_equal(client_mime_guess((const uint8_t *)"caf\xc3", 4), binary);

    /* A sequence cut by the 8 KiB window still counts as text... */
    memset(buf, 'x', sizeof(buf));
    memcpy(buf + CLIENT_MIME_WINDOW - 1, "\xc3\xa9", 2);
    assert_string_equal(client_mime_guess(buf, sizeof(buf)), text);
    /* ...and what lies beyond the window is not looked at. */
    buf[CLIENT_MIME_WINDOW + 4] = '\0';
    assert_string_equal(client_mime_guess(buf, sizeof(buf)), text);
    buf[CLIENT_MIME_WINDOW - 2] = '\0';
    assert_string_equal(client_mime_guess(buf, sizeof(buf)), binary);
}

/* --- paths --- */

static void test_socket_path(void **state)
{
    char path[108], small[8], longdir[200];

    setenv("CAIRN_SOCKET", "/run/x.sock", 1);
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    assert_int_equal(client_socket_path(path, sizeof(path)), 0);
    assert_string_equal(path, "/run/x.sock");

    setenv("CAIRN_SOCKET", "", 1); /* empty counts as unset */
    assert_int_equal(client_socket_path(path, sizeof(path)), 0);
    assert_string_equal(path, "/run/user/1000/cairn/cairnd.sock");
    assert_int_equal(client_socket_path(small, sizeof(small)), -ENAMETOOLONG);

    unsetenv("CAIRN_SOCKET");
    unsetenv("XDG_RUNTIME_DIR");
    assert_int_equal(client_socket_path(path, sizeof(path)), 0);
    char expect[64];
    snprintf(expect, sizeof(expect), "/tmp/cairn-%u/cairnd.sock", (unsigned)getuid());
    assert_string_equal(path, expect);

    /* Longer than a socket address can hold, even if the buffer is large. */
    memset(longdir, 'd', sizeof(longdir) - 1);
    longdir[0] = '/';
    longdir[sizeof(longdir) - 1] = '\0';
    setenv("XDG_RUNTIME_DIR", longdir, 1);
    char big[512];
    assert_int_equal(client_socket_path(big, sizeof(big)), -ENAMETOOLONG);
    unsetenv("XDG_RUNTIME_DIR");
}

static void test_data_dir(void **state)
{
    char dir[256];

    setenv("CAIRN_DATA_DIR", "/srv/cairn", 1);
    setenv("XDG_DATA_HOME", "/home/u/.data", 1);
    setenv("HOME", "/home/u", 1);
    assert_int_equal(cli_data_dir(dir, sizeof(dir), NULL), 0);
    assert_string_equal(dir, "/srv/cairn");
    unsetenv("CAIRN_DATA_DIR");
    assert_int_equal(cli_data_dir(dir, sizeof(dir), NULL), 0);
    assert_string_equal(dir, "/home/u/.data/cairn");
    setenv("XDG_DATA_HOME", "", 1);
    assert_int_equal(cli_data_dir(dir, sizeof(dir), NULL), 0);
    assert_string_equal(dir, "/home/u/.local/share/cairn");
    assert_int_equal(cli_data_dir(dir, 8, NULL), -ENAMETOOLONG);
}

/* --- output --- */

static void test_json_reply(void **state)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    struct proto_msg msg;
    char *text;

    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, 7);
    proto_pack_cstr(&pk, "ok");
    msgpack_pack_true(&pk);
    proto_pack_cstr(&pk, "more");
    msgpack_pack_false(&pk);
    proto_pack_cstr(&pk, "name");
    proto_pack_cstr(&pk, "say \"hi\"\n\\"); /* needs escaping */
    proto_pack_cstr(&pk, "bad");
    proto_pack_str(&pk, "caf\xe9!", 5); /* Latin-1, not UTF-8 */
    proto_pack_cstr(&pk, "size");
    msgpack_pack_uint64(&pk, UINT64_C(5000000000));
    proto_pack_cstr(&pk, "tags");
    msgpack_pack_array(&pk, 2);
    proto_pack_cstr(&pk, "a");
    proto_pack_cstr(&pk, "\xc3\xa9");
    proto_pack_cstr(&pk, "meta");
    msgpack_pack_map(&pk, 1);
    proto_pack_cstr(&pk, "k");
    proto_pack_cstr(&pk, "v");
    proto_pack_cstr(&pk, "new");
    msgpack_pack_true(&pk);
    parse(&msg, &sbuf);

    text = json_line(cli_json_reply(msg.map));
    assert_string_equal(text, "{\"name\":\"say \\\"hi\\\"\\n\\\\\",\"bad\":\"caf\xef\xbf\xbd!\","
                              "\"size\":5000000000,\"tags\":[\"a\",\"\xc3\xa9\"],"
                              "\"meta\":{\"k\":\"v\"},\"new\":true}");
    free(text);
    /* A nested map keeps every key: only a reply's own framing is dropped. */
    text = json_line(cli_json_value(msg.map));
    assert_non_null(strstr(text, "\"id\":7,\"ok\":true,\"more\":false"));
    free(text);
    proto_msg_deinit(&msg);
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_format_time(void **state)
{
    char buf[CLI_TIME_MAX];

    cli_format_time(0, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00Z");
    cli_format_time(1700000000, buf);
    assert_string_equal(buf, "2023-11-14T22:13:20Z");
}

static void test_print_fields(void **state)
{
    static const char *const keys[] = {"hash", "name", "created", "tags", "meta", "absent", NULL};
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    struct proto_msg msg;
    char *text;

    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    proto_pack_cstr(&pk, "meta");
    msgpack_pack_map(&pk, 2);
    proto_pack_cstr(&pk, "a");
    proto_pack_cstr(&pk, "1");
    proto_pack_cstr(&pk, "b");
    proto_pack_cstr(&pk, "2");
    proto_pack_cstr(&pk, "hash");
    proto_pack_cstr(&pk, "ab12");
    proto_pack_cstr(&pk, "name");
    proto_pack_cstr(&pk, "");
    proto_pack_cstr(&pk, "created");
    msgpack_pack_uint64(&pk, 1700000000);
    proto_pack_cstr(&pk, "tags");
    msgpack_pack_array(&pk, 2);
    proto_pack_cstr(&pk, "x");
    proto_pack_cstr(&pk, "y");
    parse(&msg, &sbuf);

    text = fields_text(msg.map, keys);
    assert_string_equal(text, "hash: ab12\n"
                              "name:\n"
                              "created: 2023-11-14T22:13:20Z\n"
                              "tags: x, y\n"
                              "meta: a=1, b=2\n");
    free(text);
    proto_msg_deinit(&msg);
    msgpack_sbuffer_destroy(&sbuf);
}

/* --- a scripted peer on a socketpair --- */

struct frame {
    char op[16];
    uint64_t id;
    bool more, has_size;
    uint64_t size;
    size_t data_len;
    char mime[32];
};

struct peer {
    int fd;
    int client_fd;
    void (*script)(struct peer *p);
    pthread_t thread;
    const uint8_t *content; /* what a get streams */
    size_t content_len;
    /* What the peer saw, checked by the test once the thread is joined. */
    struct frame frames[16];
    int n_frames;
    uint8_t *received; /* reassembled add content */
    size_t received_len;
    msgpack_sbuffer out;
    msgpack_packer pk;
};

static bool read_exact(int fd, void *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = read(fd, (uint8_t *)buf + done, len - done);
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return true;
}

/* Reads one frame and records it; false at end of stream. */
static bool peer_recv(struct peer *p, struct frame *f)
{
    static uint8_t payload[PROTO_MAX_FRAME];
    uint8_t prefix[4];
    struct proto_msg msg;
    const uint8_t *data;
    const char *s;
    size_t len;

    if (!read_exact(p->fd, prefix, 4))
        return false;
    len = proto_be32_read(prefix);
    if (len > sizeof(payload) || !read_exact(p->fd, payload, len) ||
        proto_msg_parse(&msg, payload, len) < 0)
        return false;
    memset(f, 0, sizeof(*f));
    proto_get_uint(msg.map, "id", &f->id);
    proto_get_bool(msg.map, "more", &f->more);
    f->has_size = proto_get_uint(msg.map, "size", &f->size) == 0;
    if (proto_get_str(msg.map, "op", &s, &len) == 0)
        snprintf(f->op, sizeof(f->op), "%.*s", (int)len, s);
    if (proto_get_str(msg.map, "mime", &s, &len) == 0)
        snprintf(f->mime, sizeof(f->mime), "%.*s", (int)len, s);
    if (proto_get_bin(msg.map, "data", &data, &f->data_len) == 0 && f->data_len > 0) {
        p->received = realloc(p->received, p->received_len + f->data_len);
        memcpy(p->received + p->received_len, data, f->data_len);
        p->received_len += f->data_len;
    }
    proto_msg_deinit(&msg);
    if (p->n_frames < 16)
        p->frames[p->n_frames++] = *f;
    return true;
}

/* Starts a reply frame in p->out: a map with id, ok and `nfields` more entries. */
static size_t reply_begin(struct peer *p, uint64_t id, bool ok, uint32_t nfields)
{
    size_t start;

    proto_frame_begin(&p->out, &start);
    msgpack_pack_map(&p->pk, nfields + 2);
    proto_pack_cstr(&p->pk, "id");
    msgpack_pack_uint64(&p->pk, id);
    proto_pack_cstr(&p->pk, "ok");
    if (ok)
        msgpack_pack_true(&p->pk);
    else
        msgpack_pack_false(&p->pk);
    return start;
}

static void reply_error(struct peer *p, uint64_t id, enum proto_error code)
{
    size_t start = reply_begin(p, id, false, 1);

    proto_pack_error(&p->pk, code, "scripted failure");
    proto_frame_end(&p->out, start);
}

/* Sends what p->out holds in `piece`-byte writes, so frames arrive split. */
static void peer_flush(struct peer *p, size_t piece)
{
    for (size_t off = 0; off < p->out.size; off += piece) {
        size_t n = p->out.size - off < piece ? p->out.size - off : piece;
        if (write(p->fd, p->out.data + off, n) != (ssize_t)n)
            break;
    }
    msgpack_sbuffer_clear(&p->out);
}

static void *peer_main(void *arg)
{
    struct peer *p = arg;

    p->script(p);
    close(p->fd);
    return NULL;
}

static struct client *peer_start(struct peer *p, void (*script)(struct peer *p))
{
    struct client *c;
    int fds[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    p->fd = fds[1];
    p->client_fd = fds[0];
    p->script = script;
    msgpack_sbuffer_init(&p->out);
    msgpack_packer_init(&p->pk, &p->out, msgpack_sbuffer_write);
    assert_int_equal(client_adopt(&c, fds[0]), 0);
    assert_int_equal(pthread_create(&p->thread, NULL, peer_main, p), 0);
    return c;
}

/* Leaves p->received for the test to check and free. */
static void peer_join(struct peer *p)
{
    pthread_join(p->thread, NULL);
    msgpack_sbuffer_destroy(&p->out);
}

/* Content with a pattern, so a misplaced piece shows. */
static uint8_t *pattern(size_t len)
{
    uint8_t *buf = malloc(len ? len : 1);

    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 7 + i / 251);
    return buf;
}

static int memfd_with(const uint8_t *data, size_t len)
{
    int fd = memfd_create("content", MFD_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

/* get: streams p->content in 100000-byte pieces, a stray frame first, in 777-byte writes. */
static void script_get(struct peer *p)
{
    struct frame f;
    size_t off = 0;

    if (!peer_recv(p, &f))
        return;
    reply_error(p, f.id + 1000, PROTO_E_BAD_REQUEST); /* a leftover of another request */
    do {
        size_t n = p->content_len - off < 100000 ? p->content_len - off : 100000;
        bool first = off == 0, more = off + n < p->content_len;
        size_t start = reply_begin(p, f.id, true, first ? 4 : 2);

        if (first) {
            proto_pack_cstr(&p->pk, "hash");
            proto_pack_cstr(&p->pk, "00");
            proto_pack_cstr(&p->pk, "size");
            msgpack_pack_uint64(&p->pk, p->content_len);
        }
        proto_pack_cstr(&p->pk, "more");
        if (more)
            msgpack_pack_true(&p->pk);
        else
            msgpack_pack_false(&p->pk);
        proto_pack_cstr(&p->pk, "data");
        proto_pack_bin(&p->pk, p->content + off, n);
        proto_frame_end(&p->out, start);
        off += n;
    } while (off < p->content_len);
    peer_flush(p, 777);
}

static void test_get_stream(void **state)
{
    const size_t len = 3 * PROTO_MAX_FRAME + 1; /* wraps the receive buffer */
    uint8_t *content = pattern(len), *back = malloc(len);
    struct peer p = {.content = content, .content_len = len};
    struct client *c = peer_start(&p, script_get);
    int out = memfd_create("out", MFD_CLOEXEC);

    assert_int_equal(client_get(c, "ref", out), 0);
    assert_int_equal(pread(out, back, len, 0), (ssize_t)len);
    assert_memory_equal(back, content, len);
    assert_int_equal(lseek(out, 0, SEEK_END), (off_t)len);
    peer_join(&p);
    assert_string_equal(p.frames[0].op, "get");
    client_free(c);
    close(out);
    free(content);
    free(back);
}

/* get: one good piece, then the stream ends with an integrity error. */
static void script_get_integrity(struct peer *p)
{
    struct frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = reply_begin(p, f.id, true, 3);
    proto_pack_cstr(&p->pk, "size");
    msgpack_pack_uint64(&p->pk, 10);
    proto_pack_cstr(&p->pk, "more");
    msgpack_pack_true(&p->pk);
    proto_pack_cstr(&p->pk, "data");
    proto_pack_bin(&p->pk, "12345", 5);
    proto_frame_end(&p->out, start);
    reply_error(p, f.id, PROTO_E_INTEGRITY);
    peer_flush(p, 1 << 20);
    /* The connection stays usable: answer a status request. */
    if (peer_recv(p, &f)) {
        start = reply_begin(p, f.id, true, 0);
        proto_frame_end(&p->out, start);
        peer_flush(p, 1 << 20);
    }
}

static void test_get_integrity(void **state)
{
    struct peer p = {0};
    struct client *c = peer_start(&p, script_get_integrity);
    const msgpack_object *reply;
    int out = memfd_create("out", MFD_CLOEXEC);

    assert_int_equal(client_get(c, "ref", out), CLIENT_E_DAEMON);
    assert_int_equal(client_error(c)->code, PROTO_E_INTEGRITY);
    assert_string_equal(client_error(c)->code_name, "integrity");
    assert_string_equal(client_error(c)->message, "scripted failure");
    assert_true(client_connected(c));
    assert_int_equal(client_status(c, &reply), 0);
    client_free(c);
    peer_join(&p);
    close(out);
}

/* A stream that ends before the size its first frame announced. */
static void script_get_short(struct peer *p)
{
    struct frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = reply_begin(p, f.id, true, 3);
    proto_pack_cstr(&p->pk, "size");
    msgpack_pack_uint64(&p->pk, 10);
    proto_pack_cstr(&p->pk, "more");
    msgpack_pack_false(&p->pk);
    proto_pack_cstr(&p->pk, "data");
    proto_pack_bin(&p->pk, "12345", 5);
    proto_frame_end(&p->out, start);
    peer_flush(p, 1 << 20);
}

static void test_get_short_stream(void **state)
{
    struct peer p = {0};
    struct client *c = peer_start(&p, script_get_short);
    int out = memfd_create("out", MFD_CLOEXEC);

    assert_int_equal(client_get(c, "ref", out), -EBADMSG);
    assert_false(client_connected(c));
    client_free(c);
    peer_join(&p);
    close(out);
}

/* Half a frame, then hang up. */
static void script_hang_up(struct peer *p)
{
    struct frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = reply_begin(p, f.id, true, 1);
    proto_pack_cstr(&p->pk, "hash");
    proto_pack_cstr(&p->pk, "0123456789");
    proto_frame_end(&p->out, start);
    p->out.size -= 5;
    peer_flush(p, 1 << 20);
}

static void test_hang_up_mid_reply(void **state)
{
    struct peer p = {0};
    struct client *c = peer_start(&p, script_hang_up);
    const msgpack_object *reply;

    assert_int_equal(client_stat(c, "ref", &reply), -ECONNRESET);
    assert_false(client_connected(c));
    assert_int_equal(client_status(c, &reply), -ENOTCONN);
    client_free(c);
    peer_join(&p);
}

/* A length prefix over the limit must not make the client allocate or wait for it. */
static void script_too_large(struct peer *p)
{
    struct frame f;
    uint8_t prefix[4];

    if (!peer_recv(p, &f))
        return;
    proto_be32_write(prefix, PROTO_MAX_FRAME + 1);
    if (write(p->fd, prefix, 4) != 4)
        return;
}

static void test_frame_too_large(void **state)
{
    struct peer p = {0};
    struct client *c = peer_start(&p, script_too_large);
    const msgpack_object *reply;

    assert_int_equal(client_status(c, &reply), -EBADMSG);
    assert_false(client_connected(c));
    client_free(c);
    peer_join(&p);
}

/* add: takes frames until more is false, answers with the total. */
static void script_add(struct peer *p)
{
    struct frame f;
    size_t start;

    do {
        if (!peer_recv(p, &f))
            return;
    } while (f.more);
    start = reply_begin(p, f.id, true, 1);
    proto_pack_cstr(&p->pk, "size");
    msgpack_pack_uint64(&p->pk, p->received_len);
    proto_frame_end(&p->out, start);
    peer_flush(p, 1 << 20);
}

static void test_add_regular_file(void **state)
{
    const size_t len = 600000;
    uint8_t *content = pattern(len);
    int in = memfd_with(content, len);
    struct peer p = {0};
    struct client *c = peer_start(&p, script_add);
    static const char *const tags[] = {"t1", "t2"};
    const struct client_meta meta[] = {{"k", "v"}};
    struct client_add_req req = {.name = "n", .tags = tags, .n_tags = 2, .meta = meta, .n_meta = 1};
    const msgpack_object *reply;
    uint64_t size = 0;

    assert_int_equal(client_add(c, &req, in, &reply), 0);
    assert_int_equal(proto_get_uint(reply, "size", &size), 0);
    assert_int_equal(size, len);
    client_free(c);
    peer_join(&p);

    /*
     * One add frame, then data frames of at most 256 KiB. No size is
     * announced even for a regular file: it may change while it is read.
     */
    assert_int_equal(p.n_frames, 3);
    assert_string_equal(p.frames[0].op, "add");
    assert_false(p.frames[0].has_size);
    assert_string_equal(p.frames[0].mime, "application/octet-stream");
    assert_int_equal(p.frames[0].data_len, PROTO_MAX_DATA);
    assert_true(p.frames[0].more);
    assert_string_equal(p.frames[1].op, "data");
    assert_int_equal(p.frames[1].id, p.frames[0].id);
    assert_int_equal(p.frames[1].data_len, PROTO_MAX_DATA);
    assert_true(p.frames[1].more);
    assert_int_equal(p.frames[2].data_len, len - 2 * PROTO_MAX_DATA);
    assert_false(p.frames[2].more);
    assert_int_equal(p.received_len, len);
    assert_memory_equal(p.received, content, len);
    free(p.received);
    close(in);
    free(content);
}

/*
 * read_limit: only that many bytes of the input are read and sent (a file
 * that grows while it is read), at a piece boundary plus one, and below one.
 */
static void test_add_read_limit(void **state)
{
    const size_t len = 600000;
    const uint64_t limits[] = {PROTO_MAX_DATA + 1, PROTO_MAX_DATA, 1000};
    uint8_t *content = pattern(len);

    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        int in = memfd_with(content, len);
        struct peer p = {0};
        struct client *c = peer_start(&p, script_add);
        struct client_add_req req = {.name = "n", .read_limit = limits[i]};
        const msgpack_object *reply;
        uint64_t size = 0;

        assert_int_equal(client_add(c, &req, in, &reply), 0);
        assert_int_equal(proto_get_uint(reply, "size", &size), 0);
        assert_int_equal(size, limits[i]);
        client_free(c);
        peer_join(&p);
        assert_int_equal(p.received_len, limits[i]);
        assert_memory_equal(p.received, content, limits[i]);
        assert_false(p.frames[p.n_frames - 1].more);
        free(p.received);
        close(in);
    }
    free(content);
}

/* From a pipe: no size, and an exact multiple of the piece size ends without an empty frame. */
static void test_add_pipe_exact_multiple(void **state)
{
    const size_t len = 2 * PROTO_MAX_DATA;
    uint8_t *content = pattern(len);
    struct peer p = {0};
    struct client *c;
    struct client_add_req req = {.mime = "x/y"};
    const msgpack_object *reply;
    int fds[2];

    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    if (fcntl(fds[1], F_SETPIPE_SZ, (int)len) < (int)len) {
        close(fds[0]);
        close(fds[1]);
        free(content);
        skip();
    }
    assert_int_equal(write(fds[1], content, len), (ssize_t)len);
    close(fds[1]);
    c = peer_start(&p, script_add);
    assert_int_equal(client_add(c, &req, fds[0], &reply), 0);
    client_free(c);
    peer_join(&p);
    assert_int_equal(p.n_frames, 2);
    assert_false(p.frames[0].has_size);
    assert_string_equal(p.frames[0].mime, "x/y");
    assert_true(p.frames[0].more);
    assert_false(p.frames[1].more);
    assert_int_equal(p.frames[1].data_len, PROTO_MAX_DATA);
    assert_int_equal(p.received_len, len);
    assert_memory_equal(p.received, content, len);
    free(p.received);
    close(fds[0]);
    free(content);
}

/* add: fails after the first frame, then answers stray data frames like the daemon would. */
static void script_add_early_error(struct peer *p)
{
    struct frame f;

    if (!peer_recv(p, &f))
        return;
    reply_error(p, f.id, PROTO_E_BACKEND_UNAVAILABLE);
    peer_flush(p, 1 << 20);
    while (peer_recv(p, &f)) {
        if (strcmp(f.op, "data") == 0) {
            reply_error(p, f.id, PROTO_E_BAD_REQUEST);
            peer_flush(p, 1 << 20);
            continue;
        }
        /* A later request on the same connection. */
        size_t start = reply_begin(p, f.id, true, 0);
        proto_frame_end(&p->out, start);
        peer_flush(p, 1 << 20);
    }
}

static void test_add_early_error(void **state)
{
    const size_t len = 8 * PROTO_MAX_DATA;
    uint8_t *content = pattern(len);
    int in = memfd_with(content, len);
    struct peer p = {0};
    struct client *c = peer_start(&p, script_add_early_error);
    struct client_add_req req = {0};
    const msgpack_object *reply;
    int data_frames = 0, sndbuf = 4096;

    /* A small send buffer makes each send wait for the peer, as a busy daemon would. */
    setsockopt(p.client_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    assert_int_equal(client_add(c, &req, in, &reply), CLIENT_E_DAEMON);
    assert_int_equal(client_error(c)->code, PROTO_E_BACKEND_UNAVAILABLE);
    /* The stray bad_request answers to data frames already sent are skipped. */
    assert_int_equal(client_status(c, &reply), 0);
    client_free(c);
    peer_join(&p);
    for (int i = 0; i < p.n_frames; i++)
        data_frames += strcmp(p.frames[i].op, "data") == 0;
    /* Streaming stopped long before the 7 data frames the content needs. */
    assert_true(data_frames < 7);
    free(p.received);
    close(in);
    free(content);
}

/* list: three frames of items. */
static void script_list(struct peer *p)
{
    struct frame f;

    if (!peer_recv(p, &f))
        return;
    for (int frame = 0; frame < 3; frame++) {
        size_t start = reply_begin(p, f.id, true, 2);

        proto_pack_cstr(&p->pk, "more");
        if (frame < 2)
            msgpack_pack_true(&p->pk);
        else
            msgpack_pack_false(&p->pk);
        proto_pack_cstr(&p->pk, "items");
        msgpack_pack_array(&p->pk, 2);
        for (int i = 0; i < 2; i++) {
            msgpack_pack_map(&p->pk, 1);
            proto_pack_cstr(&p->pk, "size");
            msgpack_pack_uint64(&p->pk, (uint64_t)(frame * 2 + i));
        }
        proto_frame_end(&p->out, start);
    }
    peer_flush(p, 3);
}

static void count_doc(void *userdata, const msgpack_object *doc)
{
    uint64_t *sum = userdata, size = 0;

    proto_get_uint(doc, "size", &size);
    *sum = *sum * 10 + size;
}

static void test_list_frames(void **state)
{
    struct peer p = {0};
    struct client *c = peer_start(&p, script_list);
    uint64_t order = 0;

    assert_int_equal(client_list(c, "tag", count_doc, &order), 0);
    assert_int_equal(order, 12345); /* 0..5, in order, each once */
    client_free(c);
    peer_join(&p);
}

/* The errors autostart relies on: nobody there, and nobody listening. */
static void test_connect(void **state)
{
    char dir[] = "/tmp/cairn-test-XXXXXX", path[64], toolong[200];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct client *c = NULL;
    int fd;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/s.sock", dir);
    assert_int_equal(client_connect(&c, path, 1000), -ENOENT);

    memset(toolong, 'x', sizeof(toolong) - 1);
    toolong[sizeof(toolong) - 1] = '\0';
    assert_int_equal(client_connect(&c, toolong, 1000), -ENAMETOOLONG);

    /* Bound but not listening, like the socket a crashed daemon leaves behind. */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(client_connect(&c, path, 1000), -ECONNREFUSED);

    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(client_connect(&c, path, 1000), 0);
    assert_true(client_connected(c));
    client_free(c);
    close(fd);
    unlink(path);
    rmdir(dir);
}

/* hello: answers with the highest common version. */
static void script_hello(struct peer *p)
{
    struct frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = reply_begin(p, f.id, true, 1);
    proto_pack_cstr(&p->pk, "version");
    msgpack_pack_uint64(&p->pk, PROTO_VERSION);
    proto_frame_end(&p->out, start);
    peer_flush(p, 1 << 20);
}

static void test_hello(void **state)
{
    struct peer p = {0};
    struct client *c = peer_start(&p, script_hello);
    const msgpack_object *reply;
    uint64_t version = 0;

    assert_int_equal(client_hello(c, &reply), 0);
    assert_int_equal(proto_get_uint(reply, "version", &version), 0);
    assert_int_equal(version, PROTO_VERSION);
    client_free(c);
    peer_join(&p);
    assert_string_equal(p.frames[0].op, "hello");
    assert_int_not_equal(p.frames[0].id, 0);
}

/* A request over the frame limit fails locally and leaves the connection usable. */
static void script_status(struct peer *p)
{
    struct frame f;

    while (peer_recv(p, &f)) {
        size_t start = reply_begin(p, f.id, true, 0);
        proto_frame_end(&p->out, start);
        peer_flush(p, 1 << 20);
    }
}

static void test_request_too_large(void **state)
{
    struct peer p = {0};
    struct client *c = peer_start(&p, script_status);
    const msgpack_object *reply;
    char *big = malloc(PROTO_MAX_FRAME + 1);

    memset(big, 'r', PROTO_MAX_FRAME);
    big[PROTO_MAX_FRAME] = '\0';
    assert_int_equal(client_stat(c, big, &reply), -EMSGSIZE);
    assert_true(client_connected(c));
    assert_int_equal(client_status(c, &reply), 0);
    client_free(c);
    peer_join(&p);
    assert_int_equal(p.n_frames, 1);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_meta),
        cmocka_unit_test(test_utf8_seq),
        cmocka_unit_test(test_mime_guess),
        cmocka_unit_test(test_socket_path),
        cmocka_unit_test(test_data_dir),
        cmocka_unit_test(test_json_reply),
        cmocka_unit_test(test_format_time),
        cmocka_unit_test(test_print_fields),
        cmocka_unit_test(test_connect),
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_get_stream),
        cmocka_unit_test(test_get_integrity),
        cmocka_unit_test(test_get_short_stream),
        cmocka_unit_test(test_hang_up_mid_reply),
        cmocka_unit_test(test_frame_too_large),
        cmocka_unit_test(test_add_regular_file),
        cmocka_unit_test(test_add_read_limit),
        cmocka_unit_test(test_add_pipe_exact_multiple),
        cmocka_unit_test(test_add_early_error),
        cmocka_unit_test(test_list_frames),
        cmocka_unit_test(test_request_too_large),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
