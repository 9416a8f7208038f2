#pragma once

/*
 * The stored-object format. Every chunk cairn writes to a backend is one
 * object: a 16-byte header (magic "cRnO", format version, algorithm, raw size)
 * followed by the body, zstd-compressed or raw. Data that compression would
 * shrink by less than COMPRESS_MIN_SAVING_PCT percent is stored raw, so
 * incompressible content costs nothing to read back.
 *
 * Header layout (all integers big-endian):
 *   0..3   magic "cRnO"
 *   4      format version (1)
 *   5      algorithm: 0 raw, 1 zstd
 *   6..7   reserved, zero
 *   8..15  raw (uncompressed) size in bytes
 */

#include <stddef.h>
#include <stdint.h>

#define COMPRESS_HEADER_SIZE 16
#define COMPRESS_VERSION 1
#define COMPRESS_MIN_SAVING_PCT 3
#define COMPRESS_DEFAULT_LEVEL 3

/* Expected outcomes (positive); negative errno is fatal. */
enum {
    COMPRESS_E_CORRUPT = 1, /* bad magic, version, size or body */
    COMPRESS_E_TOO_LARGE,   /* raw size over the caller's limit */
};

enum compress_algo {
    COMPRESS_RAW = 0,
    COMPRESS_ZSTD = 1,
};

struct compress_header {
    uint8_t version;
    uint8_t algo;
    uint64_t raw_size;
};

/* Output capacity compress_encode() needs for `len` input bytes. */
size_t compress_bound(size_t len);

/*
 * Encodes `raw` into `out` (capacity compress_bound(len)) at zstd `level`
 * (1..19); stores it raw when compression does not pay. 0 or -ENOMEM/-EINVAL.
 */
int compress_encode(const void *raw, size_t len, int level, void *out, size_t out_cap,
                    size_t *out_len);

/* Parses and checks the header of an object of `len` bytes. */
int compress_header_parse(const void *obj, size_t len, struct compress_header *hdr);

/*
 * Decodes a whole object into `out`, which must hold at least the header's raw
 * size; `max_raw` bounds that size. 0, COMPRESS_E_*, or negative errno.
 */
int compress_decode(const void *obj, size_t len, size_t max_raw, void *out, size_t out_cap,
                    size_t *raw_len);
