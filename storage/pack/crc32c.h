#pragma once

/*
 * CRC-32C (Castagnoli), the checksum of pack records and indexes,
 * hardware-accelerated where the CPU has it (crc32c.c). It is part of the
 * pack format, so pack.h includes it; other checksummed formats (the read
 * cache's slice files) use the same function.
 */

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C: start with crc = 0. */
uint32_t pack_crc32c(uint32_t crc, const void *data, size_t len);
