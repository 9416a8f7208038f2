/*
 * The daemon's listening socket: the one systemd passed, or one bound at
 * the configured path, whose directory is the owner's alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/app/app-int.h"
#include "daemon/app/daemon.h"
#include "daemon/base/log.h"
#include "daemon/net/net.h"
#include "proto/util.h"

/* True when something accepts connections on `path`. */
static bool socket_alive(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool alive;

    if (fd < 0)
        return false;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    alive = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return alive;
}

/*
 * Out of descriptors (EMFILE, ENFILE): the client waiting is accepted on
 * the spare descriptor and closed at once. libuv does the same with a
 * descriptor of its own, but when another thread takes that one's number
 * between its close and its reopening, libuv has none left and calls here
 * again and again for as long as the limit holds: a busy loop (libuv
 * issue 1189). This spare can be lost the same way, but it is taken again
 * at every call: both would have to be lost, and every descriptor held,
 * for the loop to come back.
 */
static void shed_connection(struct daemon *d, uv_stream_t *listener)
{
    uv_os_fd_t lfd;
    uint64_t now = uv_now(&d->loop);
    int fd = -1, e = 0;

    if (d->spare_fd >= 0)
        close(d->spare_fd);
    if (uv_fileno((uv_handle_t *)listener, &lfd) == 0)
        fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    e = fd < 0 ? errno : 0;
    if (fd >= 0)
        close(fd);
    d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (now - d->shed_logged >= 1000) {
        d->shed_logged = now;
        log_warn("out of file descriptors (RLIMIT_NOFILE): %s",
                 fd >= 0 || e == EAGAIN ? "refusing clients until some leave"
                                        : "not even one spare to refuse a client with");
    }
}

static void on_connection(uv_stream_t *listener, int status)
{
    struct daemon *d = container_of((uv_pipe_t *)listener, struct daemon, listener);

    if (status == UV_EMFILE || status == UV_ENFILE) {
        shed_connection(d, listener);
        return;
    }
    if (status < 0) {
        log_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    if (d->stopping)
        return;
    server_accept(d->srv, listener);
}

/* Serves on the socket systemd passed: its path, mode and owner are the socket unit's. */
static int setup_activated_socket(struct daemon *d, char *err, size_t err_len)
{
    size_t len = sizeof(d->socket_path);
    int fd = d->listen_fd, r;

    d->listen_fd = -1;
    uv_pipe_init(&d->loop, &d->listener, 0);
    r = uv_pipe_open(&d->listener, fd);
    if (r == 0) {
        d->activated = true;
        r = uv_listen((uv_stream_t *)&d->listener, SOMAXCONN, on_connection);
    } else {
        close(fd);
    }
    if (r < 0) {
        snprintf(err, err_len, "cannot listen on the socket systemd passed: %s", uv_strerror(r));
        uv_close((uv_handle_t *)&d->listener, NULL);
        return DAEMON_E_SETUP;
    }
    if (uv_pipe_getsockname(&d->listener, d->socket_path, &len) < 0 || len == 0)
        snprintf(d->socket_path, sizeof(d->socket_path), "(fd %d from systemd)", fd);
    else if (d->socket_path[0] == '\0')
        d->socket_path[0] = '@'; /* abstract namespace, as systemd writes it */
    d->listening = true;
    d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

int daemon_listen(struct daemon *d, const char *path, char *err, size_t err_len)
{
    char dir[sizeof(d->socket_path)];
    char *slash;
    struct stat st;
    mode_t old_mask;
    int r;

    if (d->listen_fd >= 0)
        return setup_activated_socket(d, err, err_len);
    snprintf(d->socket_path, sizeof(d->socket_path), "%s", path);
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        char why[sizeof(dir) + 128];
        /*
         * A directory someone else may write is a directory where they can
         * move the socket aside and answer in the daemon's place: refused,
         * as is one another user owns (they could chmod it so at will). A
         * directory made here is the owner's alone, whatever the umask.
         * /tmp and other sticky directories of root or this user pass: no one else may
         * rename or remove the socket there.
         */
        r = util_mkdir_p(dir, 0700);
        if (r < 0) {
            snprintf(err, err_len, "socket directory %s: %s", dir, strerror(-r));
            return DAEMON_E_SETUP;
        }
        if (util_check_dir(dir, true, why, sizeof(why)) < 0) {
            snprintf(err, err_len, "refusing the socket directory: %s", why);
            return DAEMON_E_SETUP;
        }
    }
    if (lstat(path, &st) == 0) {
        if (socket_alive(path)) {
            snprintf(err, err_len, "a daemon is already listening on %s", path);
            return DAEMON_E_LOCKED;
        }
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, err_len, "%s exists and is not a socket", path);
            return DAEMON_E_SETUP;
        }
        unlink(path); /* stale, left by a daemon that died */
    }
    uv_pipe_init(&d->loop, &d->listener, 0);
    old_mask = umask(0177);
    r = uv_pipe_bind(&d->listener, path);
    umask(old_mask);
    if (r == 0)
        r = chmod(path, 0600) < 0 ? -errno : 0;
    if (r == 0)
        r = uv_listen((uv_stream_t *)&d->listener, SOMAXCONN, on_connection);
    if (r < 0) {
        snprintf(err, err_len, "cannot listen on %s: %s", path, uv_strerror(r));
        uv_close((uv_handle_t *)&d->listener, NULL);
        return DAEMON_E_SETUP;
    }
    d->listening = true;
    d->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

void daemon_stop_listening(struct daemon *d)
{
    if (!d->listening)
        return;
    d->listening = false;
    uv_close((uv_handle_t *)&d->listener, NULL);
    if (d->spare_fd >= 0)
        close(d->spare_fd);
    d->spare_fd = -1;
    /* An activated socket's path belongs to the socket unit, which keeps listening. */
    if (!d->activated)
        unlink(d->socket_path);
}
