/*
 * cairn mcp's standard input: the bounded line reader (read ahead, over-long
 * lines skipped, a last line without its newline) over the input as a file,
 * and each line it yields parsed as the server does.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/mcp-input.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mcp_input in;
    char *line;
    size_t len;
    int fd = memfd_create("stdin", 0), got;

    if (fd < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    mcp_input_init(&in, fd);
    mcp_input_readahead(&in);
    while ((got = mcp_input_line(&in, &line, &len)) != 0) {
        if (got == 1) {
            json_error_t err;
            json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
            json_decref(msg);
        }
        mcp_input_readahead(&in);
    }
    mcp_input_free(&in);
    close(fd);
    return 0;
}
