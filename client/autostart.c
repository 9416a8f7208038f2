/* Starting cairnd when a command finds nobody listening on the socket. */

#include "client/cli.h"
#include "client/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

/*
 * How long a start may take: a daemon on a remote backend fetches
 * credentials, probes the bucket and replays what it lacks before it
 * listens. After START_NOTE_MS the user hears that it is still starting.
 */
#define START_TIMEOUT_MS 60000
#define START_NOTE_MS 5000
#define POLL_INTERVAL_MS 5

static const char *env(const char *name)
{
    const char *value = getenv(name);

    return value && value[0] ? value : NULL;
}

int cli_data_dir(char *buf, size_t size, const char *configured)
{
    const char *dir = env("CAIRN_DATA_DIR"), *xdg = env("XDG_DATA_HOME"), *home = env("HOME");

    if (!dir && configured && configured[0])
        dir = configured;
    struct passwd *pw;
    int n;

    if (!dir && !xdg && !home && (pw = getpwuid(getuid())) && pw->pw_dir[0])
        home = pw->pw_dir;
    if (dir)
        n = snprintf(buf, size, "%s", dir);
    else if (xdg)
        n = snprintf(buf, size, "%s/cairn", xdg);
    else if (home)
        n = snprintf(buf, size, "%s/.local/share/cairn", home);
    else
        return -ENOENT;
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* mkdir -p; the daemon's data may be private, so new directories are 0700. */
static int make_dirs(char *path)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        int r = mkdir(path, 0700) < 0 && errno != EEXIST ? -errno : 0;
        *p = saved;
        if (r < 0 || saved == '\0')
            return r;
    }
}

/*
 * The daemon binary: $CAIRND, else cairnd beside this executable (installed),
 * else ../daemon/cairnd from it (a meson build tree), else "cairnd" for execvp
 * to find in PATH.
 */
static void find_daemon(char *buf, size_t size)
{
    static const char *const candidates[] = {"/cairnd", "/../daemon/cairnd"};
    char exe[PATH_MAX];
    const char *given = env("CAIRND");
    ssize_t n;

    if (given) {
        snprintf(buf, size, "%s", given);
        return;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        *strrchr(exe, '/') = '\0';
        for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
            int len = snprintf(buf, size, "%s%s", exe, candidates[i]);
            if (len > 0 && (size_t)len < size && access(buf, X_OK) == 0)
                return;
        }
    }
    snprintf(buf, size, "cairnd");
}

static int read_int(int fd, int *value)
{
    ssize_t n;

    do {
        n = read(fd, value, sizeof(*value));
    } while (n < 0 && errno == EINTR);
    return n == sizeof(*value) ? 0 : -1;
}

static void write_int(int fd, int value)
{
    ssize_t n;

    do {
        n = write(fd, &value, sizeof(value));
    } while (n < 0 && errno == EINTR);
}

/*
 * Runs `daemon` double-forked in a new session, so it does not die with this
 * terminal and cannot acquire it. The report pipe carries the grandchild's pid
 * from the middle child, then an errno if exec fails; it is close-on-exec, so
 * end of file means the exec happened. Returns the pid or -errno.
 *
 * This process is made a child subreaper first: the orphaned daemon is then
 * reparented to it rather than to init, so wait_for_daemon() can see an early
 * exit at once with waitpid() instead of depending on init to reap a zombie.
 * When the CLI exits, the daemon moves on to init as usual.
 */
static pid_t spawn(const char *daemon, const char *socket_path, const char *config, int null_fd,
                   int log_fd)
{
    char *const argv[] = {(char *)daemon,      "--socket",
                          (char *)socket_path, config ? "--config" : NULL,
                          (char *)config,      NULL};
    _cleanup_close_ int rd = -1, wr = -1;
    int fds[2], pid, err, status;
    pid_t middle;

    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0 || pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    rd = fds[0];
    wr = fds[1];
    middle = fork();
    if (middle < 0)
        return -errno;
    if (middle == 0) {
        pid_t grandchild;

        setsid();
        grandchild = fork();
        if (grandchild != 0) {
            write_int(wr, grandchild < 0 ? -errno : grandchild);
            _exit(0);
        }
        /*
         * The daemon gets exactly stdin, stdout and stderr: descriptors this
         * process inherited from its caller (a pipe a script waits on, say)
         * must not stay open for the daemon's lifetime. dup2 clears
         * close-on-exec on the three copies.
         */
        if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(null_fd, STDOUT_FILENO) < 0 ||
            dup2(log_fd, STDERR_FILENO) < 0)
            _exit(127);
        close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        execvp(daemon, argv);
        write_int(wr, errno);
        _exit(127);
    }
    close(wr);
    wr = -1;
    while (waitpid(middle, &status, 0) < 0 && errno == EINTR)
        ;
    if (read_int(rd, &pid) < 0)
        return -ECHILD;
    if (pid < 0)
        return pid;
    if (read_int(rd, &err) == 0)
        return -err;
    return pid;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What the daemon wrote to its log since `start` (its last size-1 bytes at most), without the last
 * newline. */
static void log_since(const char *log_path, off_t start, char *buf, size_t size)
{
    _cleanup_close_ int fd = open(log_path, O_RDONLY | O_CLOEXEC);
    off_t end;
    ssize_t n = 0;

    buf[0] = '\0';
    if (fd < 0 || (end = lseek(fd, 0, SEEK_END)) < 0)
        return;
    if (end - start > (off_t)size - 1)
        start = end - ((off_t)size - 1);
    n = pread(fd, buf, size - 1, start);
    n = n < 0 ? 0 : n;
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    buf[n] = '\0';
}

/* Polls until the daemon answers; it may still be creating its database. */
static int wait_for_daemon(pid_t pid, const char *socket_path, const char *log_path,
                           off_t log_start, struct client **out)
{
    long start = now_ms(), deadline = start + START_TIMEOUT_MS;
    bool noted = false;
    int status;

    for (;;) {
        int r = client_connect(out, socket_path, START_TIMEOUT_MS);

        if (r == 0)
            return 0;
        if (r != -ENOENT && r != -ECONNREFUSED) {
            cli_connect_error(socket_path, r);
            return -1;
        }
        /* Checked after the connect: a daemon that forks away still counts if it answers. */
        if (waitpid(pid, &status, WNOHANG) == pid) {
            char last[4096];

            log_since(log_path, log_start, last, sizeof(last));
            /* Its last words on lines of their own, as the daemon wrote them. */
            cli_error(0, CLI_CODE_UNREACHABLE, NULL,
                      "cairnd exited during startup (%s %d):%s%s\ncairn: (the daemon's log: %s)",
                      WIFEXITED(status) ? "status" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                      last[0] ? "\n" : "", last, log_path);
            return -1;
        }
        if (!noted && now_ms() - start >= START_NOTE_MS) {
            fprintf(stderr, "cairn: cairnd is still starting (its log: %s)\n", log_path);
            noted = true;
        }
        if (now_ms() >= deadline) {
            cli_error(0, CLI_CODE_UNREACHABLE, NULL,
                      "cairnd did not answer on %s within %d s; see %s", socket_path,
                      START_TIMEOUT_MS / 1000, log_path);
            return -1;
        }
        sleep_ms(POLL_INTERVAL_MS);
    }
}

int cli_autostart(struct cli *cli, struct client **out)
{
    char daemon[PATH_MAX], log_path[PATH_MAX];
    _cleanup_close_ int null_fd = -1, log_fd = -1;
    off_t log_start;
    pid_t pid;
    int r;

    find_daemon(daemon, sizeof(daemon));
    r = cli_data_dir(log_path, sizeof(log_path) - sizeof("/cairnd.log"), cli->config.data_dir);
    if (r < 0) {
        cli_error(0, CLI_CODE_UNREACHABLE, NULL, "cannot start cairnd: data directory: %s",
                  strerror(-r));
        return -1;
    }
    r = make_dirs(log_path);
    if (r < 0) {
        cli_error(0, CLI_CODE_UNREACHABLE, NULL, "cannot start cairnd: %s: %s", log_path,
                  strerror(-r));
        return -1;
    }
    strcat(log_path, "/cairnd.log");
    /* Never 0-2: spawn() dup2()s these onto 0-2 one after the other. */
    log_fd = util_fd_above_stdio(
        open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (log_fd < 0) {
        cli_error(0, CLI_CODE_UNREACHABLE, NULL, "cannot start cairnd: %s: %s", log_path,
                  strerror(errno));
        return -1;
    }
    log_start = lseek(log_fd, 0, SEEK_END);
    null_fd = util_fd_above_stdio(open("/dev/null", O_RDWR | O_CLOEXEC));
    if (null_fd < 0) {
        cli_error(0, CLI_CODE_UNREACHABLE, NULL, "cannot start cairnd: /dev/null: %s",
                  strerror(errno));
        return -1;
    }
    pid = spawn(daemon, cli->socket, cli->config_path, null_fd, log_fd);
    if (pid < 0) {
        cli_error(0, CLI_CODE_UNREACHABLE, NULL, "cannot start %s: %s%s", daemon, strerror(-pid),
                  pid == -ENOENT ? " (set CAIRND, or put cairnd in PATH)" : "");
        return -1;
    }
    return wait_for_daemon(pid, cli->socket, log_path, log_start < 0 ? 0 : log_start, out);
}
