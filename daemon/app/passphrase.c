/*
 * Where an encrypted store's passphrase comes from, in this order
 * (README "Encryption at rest"): the file CAIRN_PASSWORD_FILE names,
 * [store] password_file, the standard output of [store] password_command
 * (run with /bin/sh -c, its standard input /dev/null; the command holds no
 * secret, its output does), else a prompt on the controlling terminal with
 * echo off. The passphrase is one line (a trailing newline is dropped),
 * 1 to PASSPHRASE_MAX bytes; it never reaches the log, the command line or
 * --print-config, and every copy is wiped once the keys are open. Runs at
 * start, before the daemon serves.
 */
#include "daemon/app/app-int.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "daemon/app/config.h"
#include "daemon/base/log.h"

#define PASSPHRASE_MAX 1024

extern char **environ;

/* Reads fd to its end (at most PASSPHRASE_MAX + 2 bytes) into buf: the length, or -1. */
static ssize_t read_all(int fd, char *buf, size_t cap)
{
    size_t got = 0;

    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* One line of buf[0..len): its newline dropped; 0 with *out (malloc'd), or -EINVAL. */
static int take_line(char *buf, size_t len, const char *from, char **out, size_t *out_len)
{
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    if (len > 0 && buf[len - 1] == '\r')
        len--;
    if (len == 0 || len > PASSPHRASE_MAX || memchr(buf, '\n', len) || memchr(buf, '\0', len)) {
        log_error("the passphrase from %s must be one line of 1 to %d bytes", from, PASSPHRASE_MAX);
        return -EINVAL;
    }
    if (!(*out = malloc(len + 1)))
        return -ENOMEM;
    memcpy(*out, buf, len);
    (*out)[len] = '\0';
    *out_len = len;
    return 0;
}

static int from_file(const char *path, const char *what, char **out, size_t *len)
{
    char buf[PASSPHRASE_MAX + 2];
    struct stat sb;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), r;

    if (fd < 0) {
        log_error("%s %s: %s", what, path, strerror(errno));
        return -errno;
    }
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        log_error("%s %s is not a regular file", what, path);
        close(fd);
        return -EINVAL;
    }
    if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
        log_error("%s %s may be read by group or others: chmod 600 it", what, path);
        close(fd);
        return -EPERM;
    }
    n = read_all(fd, buf, sizeof(buf));
    close(fd);
    r = n < 0 ? -EIO : take_line(buf, (size_t)n, path, out, len);
    OPENSSL_cleanse(buf, sizeof(buf));
    return r;
}

static int from_command(const char *cmd, char **out, size_t *len)
{
    char buf[PASSPHRASE_MAX + 2];
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    posix_spawn_file_actions_t fa;
    int fds[2], status, r;
    pid_t pid;
    ssize_t n;

    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    r = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (r != 0) {
        close(fds[0]);
        log_error("password_command: cannot run it: %s", strerror(r));
        return -r;
    }
    n = read_all(fds[0], buf, sizeof(buf));
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        log_error("password_command failed (%s %d)", WIFEXITED(status) ? "exit" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        r = -EINVAL;
    } else {
        r = n < 0 ? -EIO : take_line(buf, (size_t)n, "password_command", out, len);
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    return r;
}

static int from_terminal(char **out, size_t *len)
{
    char buf[PASSPHRASE_MAX + 2];
    struct termios old, quiet;
    size_t got = 0;
    int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY), r;

    if (fd < 0) {
        log_error("this store is encrypted and no passphrase was given: set CAIRN_PASSWORD_FILE, "
                  "[store] password_file or password_command, or start cairnd on a terminal");
        return -ENOKEY;
    }
    static const char prompt[] = "cairnd: passphrase of the store: ";
    if (write(fd, prompt, sizeof(prompt) - 1) < 0 || tcgetattr(fd, &old) < 0) {
        close(fd);
        return -EIO;
    }
    quiet = old;
    quiet.c_lflag &= ~(tcflag_t)(ECHO | ECHONL);
    tcsetattr(fd, TCSAFLUSH, &quiet);
    while (got < sizeof(buf)) {
        ssize_t n = read(fd, buf + got, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || buf[got++] == '\n')
            break;
    }
    tcsetattr(fd, TCSAFLUSH, &old);
    if (write(fd, "\n", 1) < 0) {
        /* only the echo of the newline was lost */
    }
    close(fd);
    r = take_line(buf, got, "the terminal", out, len);
    OPENSSL_cleanse(buf, sizeof(buf));
    return r;
}

int app_passphrase(void *ctx, char **out, size_t *len)
{
    const struct config *cfg = ctx;
    const char *env = getenv("CAIRN_PASSWORD_FILE");

    if (env && *env)
        return from_file(env, "CAIRN_PASSWORD_FILE", out, len);
    if (cfg->password_file[0])
        return from_file(cfg->password_file, "password_file", out, len);
    if (cfg->password_command[0])
        return from_command(cfg->password_command, out, len);
    return from_terminal(out, len);
}
