#include "daemon/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum log_level log_threshold = LOG_LEVEL_INFO;
static bool log_journal;

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

void log_init(enum log_level threshold)
{
    log_threshold = threshold;
    log_journal = getenv("JOURNAL_STREAM") != NULL;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    if (log_journal)
        n = snprintf(line, sizeof(line), "<%d>", level_priority[level]);
    else
        n = snprintf(line, sizeof(line), "cairnd: %s: ", level_names[level]);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    /* One write per line keeps lines from different threads whole. */
    size_t len = strlen(line);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}
