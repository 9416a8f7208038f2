/*
 * Progress of long commands on stderr: bytes, rate, files and, when the
 * total is known, an ETA. Drawn in place (\r) at most ten times a second
 * when stderr is a terminal; with -v also when it is not, one line per
 * second; never with -q or --json. It never touches stdout.
 */
#include "client/progress.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void cli_human_size(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    size_t u = 0;

    while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

void progress_init(struct progress *p, const struct cli *cli, const char *verb, bool lib_total)
{
    memset(p, 0, sizeof(*p));
    p->verb = verb;
    p->lib_total = lib_total;
    p->tty = isatty(STDERR_FILENO) == 1;
    p->on = !cli->json && cli->verbosity >= 0 && (p->tty || cli->verbosity > 0);
    p->start_ns = now_ns();
}

static void draw(struct progress *p, bool final)
{
    char done[32], total[32], rate[32], line[160];
    double secs = (double)(now_ns() - p->start_ns) / 1e9;
    int n;

    cli_human_size(p->bytes, done, sizeof(done));
    cli_human_size(secs > 0 ? (uint64_t)((double)p->bytes / secs) : 0, rate, sizeof(rate));
    n = snprintf(line, sizeof(line), "%s %s", p->verb, done);
    if (p->total > p->bytes || (p->total && final)) {
        cli_human_size(p->total, total, sizeof(total));
        n += snprintf(line + n, sizeof(line) - (size_t)n, " of %s", total);
    }
    n += snprintf(line + n, sizeof(line) - (size_t)n, ", %s/s", rate);
    if (p->files > 1)
        n += snprintf(line + n, sizeof(line) - (size_t)n, ", %u files", p->files);
    if (!final && p->total > p->bytes && p->bytes > 0 && secs > 0.5) {
        double eta = secs * (double)(p->total - p->bytes) / (double)p->bytes;
        snprintf(line + n, sizeof(line) - (size_t)n, ", ETA %u:%02u", (unsigned)eta / 60,
                 (unsigned)eta % 60);
    }
    if (p->tty)
        fprintf(stderr, "\r\033[K%s", line);
    else
        fprintf(stderr, "%s\n", line);
    p->drawn = true;
}

void progress_bytes(void *userdata, uint64_t n, uint64_t total)
{
    struct progress *p = userdata;
    uint64_t t;

    if (!p->on)
        return;
    p->bytes += n;
    if (p->lib_total && total)
        p->total = total;
    t = now_ns();
    if (t - p->last_ns >= (p->tty ? 100000000u : 1000000000u) && t - p->start_ns >= 300000000u) {
        p->last_ns = t;
        draw(p, false);
    }
}

void progress_job(void *userdata, const char *phase, uint64_t done, uint64_t total)
{
    struct progress *p = userdata;

    if (!p->on)
        return;
    if (strcmp(phase, "verify") == 0) {
        p->bytes = done;
        p->total = total;
        draw(p, false);
        return;
    }
    if (p->tty)
        fprintf(stderr, "\r\033[K");
    fprintf(stderr, "%s: %s", p->verb, phase);
    if (done)
        fprintf(stderr, ", %" PRIu64 " packs done", done);
    if (!p->tty)
        fputc('\n', stderr);
    p->drawn = true;
}

void progress_file(struct progress *p)
{
    p->files++;
}

void progress_erase(struct progress *p)
{
    if (p->on && p->drawn && p->tty) {
        fputs("\r\033[K", stderr);
        p->drawn = false;
    }
}

void progress_end(struct progress *p)
{
    if (p->on && p->drawn && p->tty)
        fputs("\r\033[K", stderr);
    p->drawn = false;
}
