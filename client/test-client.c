/*
 * Unit tests of the client library and the CLI helpers that need no daemon,
 * one program in four files (test-client.h). This one holds the client over
 * a scripted peer: connecting, hello, get streams and what ends them early,
 * list streams and the frame limits in both directions; and main(), which
 * runs every file's group in turn.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/test-client.h"

/* get: streams p->content in 100000-byte pieces, a stray frame first, in 777-byte writes. */
static void script_get(struct peer *p)
{
    struct peer_frame f;
    size_t off = 0;

    if (!peer_recv(p, &f))
        return;
    peer_reply_error(p, f.id + 1000, PROTO_E_BAD_REQUEST); /* a leftover of another request */
    do {
        size_t n = p->content_len - off < 100000 ? p->content_len - off : 100000;
        bool first = off == 0, more = off + n < p->content_len;
        size_t start = peer_reply_begin(p, f.id, true, first ? 4 : 2);

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
    uint8_t *content = test_pattern(len), *back = malloc(len);
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
    struct peer_frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = peer_reply_begin(p, f.id, true, 3);
    proto_pack_cstr(&p->pk, "size");
    msgpack_pack_uint64(&p->pk, 10);
    proto_pack_cstr(&p->pk, "more");
    msgpack_pack_true(&p->pk);
    proto_pack_cstr(&p->pk, "data");
    proto_pack_bin(&p->pk, "12345", 5);
    proto_frame_end(&p->out, start);
    peer_reply_error(p, f.id, PROTO_E_INTEGRITY);
    peer_flush(p, 1 << 20);
    /* The connection stays usable: answer a status request. */
    if (peer_recv(p, &f)) {
        start = peer_reply_begin(p, f.id, true, 0);
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
    struct peer_frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = peer_reply_begin(p, f.id, true, 3);
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
    struct peer_frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = peer_reply_begin(p, f.id, true, 1);
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
    struct peer_frame f;
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

/* list: three frames of items. */
static void script_list(struct peer *p)
{
    struct peer_frame f;

    if (!peer_recv(p, &f))
        return;
    for (int frame = 0; frame < 3; frame++) {
        size_t start = peer_reply_begin(p, f.id, true, 2);

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
    struct peer_frame f;
    size_t start;

    if (!peer_recv(p, &f))
        return;
    start = peer_reply_begin(p, f.id, true, 1);
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
    struct peer_frame f;

    while (peer_recv(p, &f)) {
        size_t start = peer_reply_begin(p, f.id, true, 0);
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
        cmocka_unit_test(test_connect),           cmocka_unit_test(test_hello),
        cmocka_unit_test(test_get_stream),        cmocka_unit_test(test_get_integrity),
        cmocka_unit_test(test_get_short_stream),  cmocka_unit_test(test_hang_up_mid_reply),
        cmocka_unit_test(test_frame_too_large),   cmocka_unit_test(test_list_frames),
        cmocka_unit_test(test_request_too_large),
    };
    int failed = test_client_helpers_run();

    failed += cmocka_run_group_tests_name("client: over a scripted peer", tests, NULL, NULL);
    failed += test_client_add_run();
    return failed;
}
