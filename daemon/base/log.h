#pragma once

/*
 * Logging for cairnd: leveled messages to stderr. Under systemd (when
 * stderr is the stream JOURNAL_STREAM names) each line carries a "<N>"
 * syslog priority prefix so the journal records the level. The level is checked before any
 * formatting. Secrets are never passed to these functions.
 */

#include <stdbool.h>

enum log_level {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN,
    LOG_LEVEL_INFO,
    LOG_LEVEL_DEBUG,
};

extern enum log_level log_threshold;

/* Parses "error", "warn", "info" or "debug". 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *out);
void log_init(enum log_level threshold);
/* Detects the journal before the configuration (and so the level) is known. */
void log_init_early(void);
/* True when stderr goes to the journal (lines carry "<N>" prefixes). */
bool log_to_journal(void);
/*
 * Start-up messages that are printed whatever the level (a bad command line,
 * a failed setup): "cairnd: MESSAGE", or "<N>MESSAGE" under the journal.
 */
void log_plain(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(level, ...)                                                                         \
    do {                                                                                           \
        if ((level) <= log_threshold)                                                              \
            log_write((level), __VA_ARGS__);                                                       \
    } while (0)
#define log_error(...) log_at(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_at(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_LEVEL_DEBUG, __VA_ARGS__)
