/*
 * What the client library reads from cairnd (or from whatever listens on
 * the socket it was pointed at): the input is the whole byte stream of
 * replies, fed through a socket to one request picked by its first byte
 * (get, get of a range, list, stat, status, delete), as the CLI and the MCP
 * server make them. The client's request ids start at 1.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client.h"
#include "tests/fuzz/fuzz.h"

/* What fits in a Unix socket's buffer, so writing it all never blocks. */
#define REPLY_MAX_INPUT (128u * 1024)

static int on_data(void *userdata, const msgpack_object *first, const uint8_t *data, size_t len)
{
    size_t *total = userdata;
    (void)first;
    (void)data;
    *total += len;
    return 0;
}

static void on_doc(void *userdata, const msgpack_object *doc)
{
    size_t *total = userdata;
    (void)doc;
    (*total)++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const msgpack_object *reply;
    struct client *c;
    size_t total = 0;
    int sv[2];
    int buf = 4 * REPLY_MAX_INPUT;

    if (size < 1 || size - 1 > REPLY_MAX_INPUT)
        return 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    if (write(sv[1], data + 1, size - 1) != (ssize_t)(size - 1))
        abort();
    shutdown(sv[1], SHUT_WR); /* the "daemon" says nothing more; it still takes the requests */
    if (client_adopt(&c, sv[0]) != 0)
        abort();
    switch (data[0] % 6) {
    case 0:
        (void)client_get_fn(c, "doc", on_data, &total);
        break;
    case 1:
        (void)client_get_range(c, "doc", 10, 100, on_data, &total);
        break;
    case 2:
        (void)client_list_page(c, NULL, NULL, 0, on_doc, &total);
        break;
    case 3:
        (void)client_stat(c, "doc", &reply);
        break;
    case 4:
        (void)client_status(c, &reply);
        break;
    default:
        (void)client_delete(c, "doc", false, &reply);
        break;
    }
    (void)client_error(c);
    client_free(c);
    close(sv[1]);
    return 0;
}
