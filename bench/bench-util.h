/*
 * What backend-bench and its raw libcurl peers (s3-raw, az-raw) share that
 * needs no HTTP: numeric arguments, the peak memory reported with the
 * samples, and the incompressible data written.
 */
#ifndef CAIRN_BENCH_UTIL_H
#define CAIRN_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* A decimal number of at most `max` ("-", junk, overflow: -1). */
int bench_parse_uint(const char *s, uint64_t max, uint64_t *out);

/* This process's peak resident memory in KiB (VmHWM), or -1. */
long bench_peak_rss_kib(void);

/* `len` bytes of xorshift output from `seed` (not 0): incompressible. */
void bench_fill(uint8_t *data, size_t len, uint64_t seed);

#endif
