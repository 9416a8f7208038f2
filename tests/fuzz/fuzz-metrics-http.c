/*
 * The request heads the metrics listener ([daemon] metrics_listen) reads
 * from any local process: metrics_request_check on what on_read hands it,
 * a NUL-terminated head of at most 4095 bytes without NUL.
 */
#include <stdint.h>
#include <string.h>

#include "daemon/net/metrics.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char head[4096];
    bool is_head;
    int r;

    if (size >= sizeof(head) || memchr(data, '\0', size))
        return 0;
    memcpy(head, data, size);
    head[size] = '\0';
    r = metrics_request_check(head, &is_head);
    if (r != 0 && r != 400 && r != 404 && r != 405)
        __builtin_trap();
    if (is_head && r == 405)
        __builtin_trap();
    return 0;
}
