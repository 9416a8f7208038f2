/* The scripted peer of the client's unit tests (test-client.h). */
#include "client/test-client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

bool peer_recv(struct peer *p, struct peer_frame *f)
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

size_t peer_reply_begin(struct peer *p, uint64_t id, bool ok, uint32_t nfields)
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

void peer_reply_error(struct peer *p, uint64_t id, enum proto_error code)
{
    size_t start = peer_reply_begin(p, id, false, 1);

    proto_pack_error(&p->pk, code, "scripted failure");
    proto_frame_end(&p->out, start);
}

void peer_flush(struct peer *p, size_t piece)
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

struct client *peer_start(struct peer *p, void (*script)(struct peer *p))
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

void peer_join(struct peer *p)
{
    pthread_join(p->thread, NULL);
    msgpack_sbuffer_destroy(&p->out);
}

uint8_t *test_pattern(size_t len)
{
    uint8_t *buf = malloc(len ? len : 1);

    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 7 + i / 251);
    return buf;
}
