#include "daemon/app/systemd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "daemon/base/log.h"

static const char *family_name(int family)
{
    switch (family) {
    case AF_INET:
        return "AF_INET";
    case AF_INET6:
        return "AF_INET6";
    case AF_NETLINK:
        return "AF_NETLINK";
    default:
        return "non-AF_UNIX";
    }
}

/* NULL when fd is a listening AF_UNIX stream socket, else what it is instead. */
static const char *socket_problem(int fd, char *buf, size_t len)
{
    struct stat st;
    int v;
    socklen_t vl = sizeof(v);

    if (fstat(fd, &st) < 0) {
        snprintf(buf, len, "cannot be examined: %s", strerror(errno));
        return buf;
    }
    if (!S_ISSOCK(st.st_mode))
        return "is not a socket";
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &vl) < 0) {
        snprintf(buf, len, "cannot be examined: %s", strerror(errno));
        return buf;
    }
    if (v != AF_UNIX) {
        snprintf(buf, len, "is an %s socket, not AF_UNIX (ListenStream= must name a path)",
                 family_name(v));
        return buf;
    }
    vl = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &vl) < 0) {
        snprintf(buf, len, "cannot be examined: %s", strerror(errno));
        return buf;
    }
    if (v != SOCK_STREAM)
        return "is not a stream socket (use ListenStream=, not ListenDatagram= or "
               "ListenSequentialPacket=)";
    vl = sizeof(v);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl) < 0) {
        snprintf(buf, len, "cannot be examined: %s", strerror(errno));
        return buf;
    }
    if (!v)
        return "is not listening (a connection passed with Accept=yes? cairnd.socket needs "
               "Accept=no)";
    return NULL;
}

int sysd_listen_fd(int *fd, char *err, size_t err_len)
{
    char buf[256];
    const char *problem;
    int n = sd_listen_fds(1);

    if (n < 0) {
        snprintf(err, err_len, "sockets from systemd (LISTEN_FDS): %s", strerror(-n));
        return -1;
    }
    if (n == 0)
        return 0;
    if (n > 1) {
        snprintf(err, err_len,
                 "systemd passed %d sockets; cairnd listens on exactly one (one ListenStream= "
                 "in cairnd.socket)",
                 n);
        for (int i = 0; i < n; i++)
            close(SD_LISTEN_FDS_START + i);
        return -1;
    }
    problem = socket_problem(SD_LISTEN_FDS_START, buf, sizeof(buf));
    if (problem) {
        snprintf(err, err_len, "the socket systemd passed (fd %d) %s", SD_LISTEN_FDS_START,
                 problem);
        close(SD_LISTEN_FDS_START);
        return -1;
    }
    *fd = SD_LISTEN_FDS_START;
    return 1;
}

bool sysd_notify_enabled(void)
{
    const char *e = getenv("NOTIFY_SOCKET");
    return e && e[0];
}

/*
 * The notify protocol by hand rather than sd_notify(): the same datagram to
 * the same address, but sent with MSG_DONTWAIT, so that a receiver that
 * stops reading can never stall the event loop.
 */
int sysd_notify(const char *fmt, ...)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char msg[512];
    socklen_t salen;
    size_t plen;
    va_list ap;
    int fd, r = 0;

    if (!path || !path[0])
        return -ENOTCONN;
    plen = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || plen >= sizeof(sa.sun_path))
        return -EAFNOSUPPORT; /* vsock and other forms: not ours */
    memcpy(sa.sun_path, path, plen);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace */
    salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + (path[0] == '/'));
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT, (struct sockaddr *)&sa, salen) <
        0)
        r = -errno;
    close(fd);
    if (r < 0)
        log_debug("notify %.*s to %s: %s", (int)strcspn(msg, "\n"), msg, path, strerror(-r));
    return r;
}

uint64_t sysd_watchdog_usec(void)
{
    uint64_t usec = 0;

    if (sd_watchdog_enabled(0, &usec) <= 0)
        return 0;
    return usec;
}
