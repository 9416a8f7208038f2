#pragma once

/*
 * The read cache's slice files (readcache-file.c), shared with readcache.c.
 *
 * A slice file is named "<pack, 16 hex digits>-<slice, 8 hex digits>" and
 * holds a header of READCACHE_HEADER bytes, then the slice's bytes. The
 * header (little-endian): the magic "CAIRNRC1", the pack (8 bytes), the
 * slice (4), the length of the bytes (4), the CRC-32C of each
 * READCACHE_PAGE of them (4 each, READCACHE_PAGES of them, unused ones 0),
 * and the CRC-32C of all that (4). Half-written files end in ".tmp".
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "daemon/readcache/readcache.h"

#define READCACHE_HEADER 4096u
#define READCACHE_PAGES (READCACHE_SLICE / READCACHE_PAGE)
/* "<16 hex>-<8 hex>.tmp" and its NUL. */
#define READCACHE_NAME_MAX 32

/* Expected outcomes of reading a slice file besides 0. */
enum {
    READCACHE_E_GONE = 1, /* no such file (evicted meanwhile) */
    READCACHE_E_BAD,      /* a check failed: the file is damaged */
};

void readcache_file_name(char out[READCACHE_NAME_MAX], uint64_t pack, uint32_t slice);

/*
 * Writes a slice file (to a ".tmp" name, then renamed: a reader sees the
 * whole file or none) and fills crc[] with its pages' checksums. Nothing is
 * synced: a file torn by a crash fails its checks and is fetched again.
 * 0 or negative errno.
 */
int readcache_file_write(int dirfd, uint64_t pack, uint32_t slice, const uint8_t *data,
                         uint32_t len, uint32_t crc[READCACHE_PAGES]);

/*
 * Reads [in, in + want) of a slice's bytes (less when the slice is shorter)
 * into buf, checking every page it touches. `crc` holds the pages' checksums
 * when `*have_crc`; otherwise the header is read and checked first, and crc,
 * *len and *have_crc are filled from it. When `touch`, the file's
 * modification time is set to now (its last use, for the next start).
 * 0 with *n, READCACHE_E_GONE, READCACHE_E_BAD, or negative errno.
 */
int readcache_file_read(int dirfd, uint64_t pack, uint32_t slice, uint32_t crc[READCACHE_PAGES],
                        bool *have_crc, uint32_t *len, uint32_t in, void *buf, size_t want,
                        size_t *n, bool touch);

/* A slice file found by readcache_file_scan. */
struct readcache_found {
    uint64_t pack;
    uint32_t slice, len;
    struct timespec used;
};

/*
 * The slice files in the directory, in no order (malloc'd array); removes
 * half-written ones and files too short for a header. 0 or negative errno.
 */
int readcache_file_scan(int dirfd, struct readcache_found **out, size_t *n);
