#include "bench-util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int bench_parse_uint(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max)
        return -1;
    *out = v;
    return 0;
}

/*
 * VmHWM, not getrusage(): a process's ru_maxrss also counts the memory of
 * whoever spawned it before exec (a Python runner, tens of MiB), VmHWM only
 * what this program touched.
 */
long bench_peak_rss_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    }
    fclose(f);
    return kib;
}

void bench_fill(uint8_t *data, size_t len, uint64_t seed)
{
    uint64_t x = seed;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (uint8_t)x;
    }
}
