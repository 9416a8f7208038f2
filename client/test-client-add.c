/*
 * Unit tests of add's upload streams over the scripted peer (test-client.h):
 * data frames of at most PROTO_MAX_DATA, read limits, pipes, and a daemon
 * that fails the add while its data is still being sent.
 */
#include "client/test-client.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static int memfd_with(const uint8_t *data, size_t len)
{
    int fd = memfd_create("content", MFD_CLOEXEC);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

/* add: takes frames until more is false, answers with the total. */
static void script_add(struct peer *p)
{
    struct peer_frame f;
    size_t start;

    do {
        if (!peer_recv(p, &f))
            return;
    } while (f.more);
    start = peer_reply_begin(p, f.id, true, 1);
    proto_pack_cstr(&p->pk, "size");
    msgpack_pack_uint64(&p->pk, p->received_len);
    proto_frame_end(&p->out, start);
    peer_flush(p, 1 << 20);
}

static void test_add_regular_file(void **state)
{
    const size_t len = 600000;
    uint8_t *content = test_pattern(len);
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
    uint8_t *content = test_pattern(len);

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
    uint8_t *content = test_pattern(len);
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
    struct peer_frame f;

    if (!peer_recv(p, &f))
        return;
    peer_reply_error(p, f.id, PROTO_E_BACKEND_UNAVAILABLE);
    peer_flush(p, 1 << 20);
    while (peer_recv(p, &f)) {
        if (strcmp(f.op, "data") == 0) {
            peer_reply_error(p, f.id, PROTO_E_BAD_REQUEST);
            peer_flush(p, 1 << 20);
            continue;
        }
        /* A later request on the same connection. */
        size_t start = peer_reply_begin(p, f.id, true, 0);
        proto_frame_end(&p->out, start);
        peer_flush(p, 1 << 20);
    }
}

static void test_add_early_error(void **state)
{
    const size_t len = 8 * PROTO_MAX_DATA;
    uint8_t *content = test_pattern(len);
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

int test_client_add_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_regular_file),
        cmocka_unit_test(test_add_read_limit),
        cmocka_unit_test(test_add_pipe_exact_multiple),
        cmocka_unit_test(test_add_early_error),
    };

    return cmocka_run_group_tests_name("client: add", tests, NULL, NULL);
}
