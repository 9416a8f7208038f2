#pragma once

/*
 * SHA-256 (FIPS 180-4) for the client, which checks what a get by full hash
 * receives. Its own, not OpenSSL's: loading libcrypto costs every `cairn`
 * command about a millisecond, more than the rest of a small get. Uses the
 * CPU's SHA instructions where it has them (x86-64 SHA-NI), else portable C.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

struct sha256 {
    uint32_t h[8];
    uint64_t bytes; /* hashed so far */
    uint8_t buf[64];
    size_t nbuf;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
void sha256_final(struct sha256 *s, uint8_t out[SHA256_LEN]);

/* Tests: false makes the portable code run even on a CPU with SHA instructions. */
void sha256_use_cpu(bool on);
/* Whether the CPU's SHA instructions are used now. */
bool sha256_cpu(void);
