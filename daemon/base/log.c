#include "daemon/base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum log_level log_threshold = LOG_LEVEL_INFO;
static bool log_journal;
/* stderr is a file or a pipe, not a terminal: lines start with the time (cairnd.log). */
static bool log_stamped;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* syslog priorities: err, warning, info, debug */
static const int level_priority[] = {3, 4, 6, 7};

int log_level_parse(const char *s, enum log_level *out)
{
    for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    if (strcmp(s, "warning") == 0) {
        *out = LOG_LEVEL_WARN;
        return 0;
    }
    return -EINVAL;
}

/*
 * JOURNAL_STREAM is "DEV:INODE" of the stream systemd connected to the
 * service's stdout/stderr. It is inherited by whatever the service starts,
 * so it only counts when stderr is still that stream: a cairnd that the CLI
 * started from such a process writes to cairnd.log, without prefixes.
 */
static bool stderr_is_journal(void)
{
    const char *e = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    char end;

    if (!e || sscanf(e, "%llu:%llu%c", &dev, &ino, &end) != 2 || fstat(2, &st) < 0)
        return false;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_init_early(void)
{
    log_journal = stderr_is_journal();
    log_stamped = !log_journal && !isatty(STDERR_FILENO);
}

/* "2026-12-01T03:04:05.678Z " when lines are stamped; its length. */
static int stamp(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    size_t n;

    if (!log_stamped)
        return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    return n ? (int)n + snprintf(buf + n, len - n, ".%03ldZ ", ts.tv_nsec / 1000000) : 0;
}

bool log_to_journal(void)
{
    return log_journal;
}

void log_init(enum log_level threshold)
{
    log_threshold = threshold;
    log_init_early();
}

/* One line: the journal priority, or the time and "cairnd: " and the level when labelled. */
static void write_line(enum log_level level, bool labelled, const char *fmt, va_list ap)
{
    char line[1024];
    int n;

    if (log_journal) {
        n = snprintf(line, sizeof(line), "<%d>", level_priority[level]);
    } else {
        n = stamp(line, sizeof(line));
        n += snprintf(line + n, sizeof(line) - (size_t)n,
                      labelled ? "cairnd: %s: " : "cairnd: ", level_names[level]);
    }
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    /*
     * Text from outside (a server's error message, a path) must not make a
     * line of its own or reach the terminal as escape sequences: control
     * characters are shown as '?'.
     */
    size_t len = strlen(line);
    for (size_t i = (size_t)n; i < len; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = '?';
    /* One write per line keeps lines from different threads whole. */
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}

void log_plain(enum log_level level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    write_line(level, false, fmt, ap);
    va_end(ap);
}

void log_write(enum log_level level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    write_line(level, true, fmt, ap);
    va_end(ap);
}
