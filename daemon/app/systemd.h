#pragma once

/*
 * systemd integration: the listening socket of socket activation, and the
 * notify protocol (READY=1, STATUS=, STOPPING=1, WATCHDOG=1). Without
 * LISTEN_FDS cairnd binds its own socket; without NOTIFY_SOCKET nothing is
 * sent. Everything here is safe to call from the loop thread: a notification
 * is one non-blocking datagram, dropped (and logged at debug level) when the
 * receiver's queue is full, never waited for.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Takes the socket systemd passed (sd_listen_fds; LISTEN_* are then removed
 * from the environment). Returns 0 when none was passed, 1 with *fd set to a
 * listening AF_UNIX stream socket, or -1 with a message in err: more than
 * one socket, or one of the wrong kind (the fds passed are closed then).
 */
int sysd_listen_fd(int *fd, char *err, size_t err_len);

/* True when NOTIFY_SOCKET is set. */
bool sysd_notify_enabled(void);

/*
 * Sends one notification ("READY=1\nSTATUS=..."), formatted like printf.
 * Returns 0, -ENOTCONN without NOTIFY_SOCKET, or another negative errno.
 */
int sysd_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog interval in microseconds (WATCHDOG_USEC, for this pid), or 0 when off. */
uint64_t sysd_watchdog_usec(void);
