/* Progress of cairnd's offline work on a terminal (tty-progress.h). */
#include "daemon/base/tty-progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

void tty_progress_init(struct tty_progress *p, bool wanted)
{
    *p = (struct tty_progress){.on = wanted && isatty(STDERR_FILENO) == 1, .start_ns = uv_hrtime()};
}

void tty_progress_draw(struct tty_progress *p, const char *what, uint64_t done, uint64_t total,
                       const char *unit)
{
    uint64_t now = uv_hrtime();
    double secs = (double)(now - p->start_ns) / 1e9;

    bool same = p->what && strcmp(what, p->what) == 0;

    if (!p->on || (p->drawn && same && now - p->last_ns < 200000000u))
        return;
    if (!same) {
        p->what = what;
        p->start_ns = now;
        secs = 0;
    }
    p->last_ns = now;
    fprintf(stderr, "\r\033[K%s %" PRIu64 " of %" PRIu64 "%s", what, done, total, unit);
    if (done > 0 && secs > 0.5 && total > done) {
        double eta = secs * (double)(total - done) / (double)done;
        fprintf(stderr, ", ETA %u:%02u", (unsigned)eta / 60, (unsigned)eta % 60);
    }
    fflush(stderr);
    p->drawn = true;
}

void tty_progress_end(struct tty_progress *p)
{
    if (p->on && p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = false;
}
