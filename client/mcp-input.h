#pragma once

/* cairn mcp's standard input: bounded request lines, read ahead between requests. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mcp_input {
    int fd;
    char *buf;
    size_t start, end, cap; /* unconsumed bytes: buf[start, end) */
    bool skipping;          /* inside a line longer than MCP_MAX_LINE */
    bool eof;               /* the end of input (or a read error) was seen */
    uint64_t eof_at_ms;     /* when, on the monotonic clock */
};

void mcp_input_init(struct mcp_input *in, int fd);
void mcp_input_free(struct mcp_input *in);
/*
 * The next line, without its newline and NUL-terminated, valid until the
 * next call: 1 with a line, 0 at the end of input, 2 for a line longer than
 * MCP_MAX_LINE (skipped without being kept). Blocks until one is there.
 */
int mcp_input_line(struct mcp_input *in, char **line, size_t *len);
/* Reads what is already waiting on the descriptor, without blocking (up to a bound). */
void mcp_input_readahead(struct mcp_input *in);
/* Milliseconds since the end of input was seen; 0 while it has not been. */
uint64_t mcp_input_ended_ms(const struct mcp_input *in);
