/*
 * cairn mcp's standard input: request lines read with a bound, and read
 * ahead between requests so that the end of input is seen while requests
 * are still queued (see mcp_input_ended_ms).
 *
 * Memory: the unconsumed bytes never exceed MCP_MAX_LINE plus one read; a
 * longer line is skipped to its end without being kept.
 */
#include "client/mcp-input.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/mcp.h"

#define READ_CHUNK (64u * 1024)
/* Read ahead while fewer unconsumed bytes than this are buffered. */
#define READAHEAD (1024u * 1024)

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void mcp_input_init(struct mcp_input *in, int fd)
{
    memset(in, 0, sizeof(*in));
    in->fd = fd;
}

void mcp_input_free(struct mcp_input *in)
{
    free(in->buf);
    in->buf = NULL;
}

static void set_eof(struct mcp_input *in)
{
    if (!in->eof) {
        in->eof = true;
        in->eof_at_ms = now_ms();
    }
}

/* One read(2) of up to READ_CHUNK bytes appended to the buffer. -1 on out of memory. */
static int read_once(struct mcp_input *in)
{
    ssize_t n;

    if (in->start > 0 && in->start == in->end)
        in->start = in->end = 0;
    /* Room for one read and the NUL a last line without a newline gets. */
    if (in->cap - in->end <= READ_CHUNK && in->start > 0) {
        memmove(in->buf, in->buf + in->start, in->end - in->start);
        in->end -= in->start;
        in->start = 0;
    }
    if (in->cap - in->end <= READ_CHUNK) {
        size_t need = in->end + READ_CHUNK + 1, ncap = in->cap ? in->cap * 2 : 2 * READ_CHUNK;
        char *grown;
        if (ncap > MCP_MAX_LINE + 2 * READ_CHUNK)
            ncap = MCP_MAX_LINE + 2 * READ_CHUNK;
        if (ncap < need)
            ncap = need;
        if (!(grown = realloc(in->buf, ncap)))
            return -1;
        in->buf = grown;
        in->cap = ncap;
    }
    do {
        n = read(in->fd, in->buf + in->end, READ_CHUNK);
    } while (n < 0 && errno == EINTR);
    if (n <= 0)
        set_eof(in); /* a read error ends the input like its end does */
    else
        in->end += (size_t)n;
    return 0;
}

void mcp_input_readahead(struct mcp_input *in)
{
    struct pollfd p = {.fd = in->fd, .events = POLLIN};

    while (!in->eof && in->end - in->start < READAHEAD && poll(&p, 1, 0) > 0) {
        if (read_once(in) < 0)
            return;
    }
}

uint64_t mcp_input_ended_ms(const struct mcp_input *in)
{
    return in->eof ? now_ms() - in->eof_at_ms : 0;
}

int mcp_input_line(struct mcp_input *in, char **line, size_t *len)
{
    size_t scanned = 0;

    for (;;) {
        char *from = in->buf + in->start + scanned;
        char *nl = in->end > in->start + scanned ? memchr(from, '\n', in->end - in->start - scanned)
                                                 : NULL;

        if (nl) {
            *nl = '\0';
            *line = in->buf + in->start;
            *len = (size_t)(nl - *line);
            in->start += *len + 1;
            if (in->skipping || *len >= MCP_MAX_LINE) {
                in->skipping = false; /* the end of an over-long line, or all of one */
                return 2;
            }
            return 1;
        }
        if (in->skipping) {
            in->start = in->end = 0; /* the rest of an over-long line: dropped unseen */
            scanned = 0;
        } else {
            scanned = in->end - in->start;
            if (scanned >= MCP_MAX_LINE) {
                in->skipping = true;
                in->start = in->end = 0;
                scanned = 0;
            }
        }
        if (in->eof) {
            if (in->skipping) {
                in->skipping = false;
                return 2;
            }
            if (in->end == in->start)
                return 0;
            /* A last line without its newline still counts (read_once left room for the NUL). */
            *line = in->buf + in->start;
            *len = in->end - in->start;
            (*line)[*len] = '\0';
            in->start = in->end;
            return 1;
        }
        if (read_once(in) < 0) {
            /* out of memory for a line under the limit: treat it as over-long */
            in->skipping = true;
            in->start = in->end = 0;
            scanned = 0;
        }
    }
}
