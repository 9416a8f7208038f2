#pragma once

/*
 * Internals of the pack module that its unit tests need to reach: the two
 * CRC-32C implementations behind pack_crc32c() (crc32c.h), so the tests can
 * check that the hardware path and the table path agree on the same
 * inputs. Only crc32c.c and the pack tests include this header.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The portable slice-by-8 path; same contract as pack_crc32c(). */
uint32_t pack_crc32c_sw(uint32_t crc, const void *data, size_t len);

/* True when this CPU can run pack_crc32c_hw(). */
bool pack_crc32c_hw_available(void);

/*
 * The SSE4.2 path; same contract as pack_crc32c(). Only callable when
 * pack_crc32c_hw_available(); on other architectures it is the table path.
 */
uint32_t pack_crc32c_hw(uint32_t crc, const void *data, size_t len);
