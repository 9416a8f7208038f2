#pragma once

/* Progress of long commands on stderr (progress.c). */

#include <stdbool.h>
#include <stdint.h>

#include "client/cli.h"

struct progress {
    bool on, tty, drawn;
    bool lib_total; /* take the total the client library reports (a get's size) */
    const char *verb;
    uint64_t bytes, total; /* total: 0 when unknown (no ETA then) */
    unsigned files;
    uint64_t start_ns, last_ns;
};

/*
 * On when stderr is a terminal (or with -v), never with -q or --json. The
 * caller may set p->total itself.
 */
void progress_init(struct progress *p, const struct cli *cli, const char *verb, bool lib_total);
/* A client_progress_fn: n more bytes, of total (0: unknown). */
void progress_bytes(void *userdata, uint64_t n, uint64_t total);
/*
 * A client_job_progress_fn: verify's bytes (of total) as a get's, gc's
 * phase with the packs it rewrote or deleted so far.
 */
void progress_job(void *userdata, const char *phase, uint64_t done, uint64_t total);
/* One more file done. */
void progress_file(struct progress *p);
/* Erases the progress line before output goes to the terminal; the next draw puts it back. */
void progress_erase(struct progress *p);
/* Clears the progress line. */
void progress_end(struct progress *p);
/* "12.3 MiB" */
void cli_human_size(uint64_t n, char *buf, size_t len);
