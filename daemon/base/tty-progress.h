#pragma once

/*
 * Progress of cairnd's offline work (`--rebuild-index`, `--upgrade`) on
 * stderr when it is a terminal: one line, drawn in place at most five times
 * a second, cleared at the end. Nothing when stderr is not a terminal (a
 * log or the journal).
 */

#include <stdbool.h>
#include <stdint.h>

struct tty_progress {
    bool on, drawn;
    uint64_t start_ns, last_ns;
    const char *what; /* the line drawn last: a new one is drawn at once */
};

void tty_progress_init(struct tty_progress *p, bool wanted);
/*
 * Redraws the line `what` with `done` of `total` units (and the ETA),
 * unless the same line was drawn too recently. `what` is a static string;
 * the ETA counts from its first line.
 */
void tty_progress_draw(struct tty_progress *p, const char *what, uint64_t done, uint64_t total,
                       const char *unit);
/* Clears the line, if one was drawn. */
void tty_progress_end(struct tty_progress *p);
