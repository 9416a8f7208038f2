#pragma once

/*
 * Content-defined chunking (FastCDC with normalized chunking). Chunk
 * boundaries depend only on the bytes around them, so inserting or removing
 * data in a document moves the boundaries near the change and leaves the
 * others, and identical stretches of different documents cut into identical
 * chunks. Cut points are the same however the input is split into pieces, as
 * long as callers follow cdc_next()'s rules.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CDC_DEFAULT_MIN (16u * 1024)
#define CDC_DEFAULT_AVG (64u * 1024)
#define CDC_DEFAULT_MAX (256u * 1024)

struct cdc {
    size_t min, avg, max;
    uint64_t mask_small; /* before `avg`: more bits, cuts less likely */
    uint64_t mask_large; /* after `avg`: fewer bits, cuts more likely */
};

/*
 * Sets up a chunker. Requires 64 <= min < avg < max and avg a power of two
 * between 256 bytes and 16 MiB; -EINVAL otherwise.
 */
int cdc_init(struct cdc *c, size_t min, size_t avg, size_t max);

/*
 * Finds the end of the next chunk in data[0..len). Returns its length, or 0
 * when more data is needed to decide: a chunk ends either at a cut point, at
 * `max` bytes, or, when `final` says no data follows, at `len`.
 */
size_t cdc_next(const struct cdc *c, const uint8_t *data, size_t len, bool final);
