/*
 * CRC-32C (Castagnoli), the checksum of pack records and indexes. x86-64 CPUs
 * since Nehalem compute it in one instruction per 8 bytes, so that path is
 * used whenever the CPU has SSE4.2; everywhere else a slice-by-8 table does
 * the work eight bytes per step. Both produce the same values as the
 * reflected polynomial 0x82F63B78 with the register inverted on entry and
 * exit, so that pack_crc32c(0, "123456789", 9) == 0xE3069283.
 */
#include "storage/pack/crc32c.h"
#include "storage/pack/pack-int.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_HAVE_SSE42 1
#include <nmmintrin.h>
#endif

#define CRC32C_POLY 0x82F63B78u

/*
 * table[0] is the classic byte-at-a-time table; table[k][b] is the CRC
 * contribution of byte b followed by k zero bytes, which lets eight input
 * bytes be folded in with eight independent lookups.
 */
static uint32_t crc32c_table[8][256];
static pthread_once_t crc32c_table_once = PTHREAD_ONCE_INIT;

static void crc32c_table_init(void)
{
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t crc = b;
        for (int bit = 0; bit < 8; bit++)
            crc = (crc >> 1) ^ (CRC32C_POLY & (0u - (crc & 1)));
        crc32c_table[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; b++) {
        for (int k = 1; k < 8; k++) {
            uint32_t prev = crc32c_table[k - 1][b];
            crc32c_table[k][b] = (prev >> 8) ^ crc32c_table[0][prev & 0xff];
        }
    }
}

uint32_t pack_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
    const uint32_t(*t)[256] = (const uint32_t(*)[256])crc32c_table;

    pthread_once(&crc32c_table_once, crc32c_table_init);
    crc = ~crc;
    /* Bytes are assembled explicitly, so the result does not depend on host byte order. */
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
              t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#ifdef CRC32C_HAVE_SSE42

bool pack_crc32c_hw_available(void)
{
    return __builtin_cpu_supports("sse4.2");
}

__attribute__((target("sse4.2"))) uint32_t pack_crc32c_hw(uint32_t crc, const void *data,
                                                          size_t len)
{
    const uint8_t *p = data;
    uint64_t state = ~crc;

    /* Aligning first keeps the 8-byte loads from straddling cache lines. */
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        state = _mm_crc32_u8((uint32_t)state, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, sizeof(word));
        state = _mm_crc32_u64(state, word);
        p += 8;
        len -= 8;
    }
    while (len--)
        state = _mm_crc32_u8((uint32_t)state, *p++);
    return ~(uint32_t)state;
}

#else

bool pack_crc32c_hw_available(void)
{
    return false;
}

uint32_t pack_crc32c_hw(uint32_t crc, const void *data, size_t len)
{
    return pack_crc32c_sw(crc, data, len);
}

#endif

uint32_t pack_crc32c(uint32_t crc, const void *data, size_t len)
{
    /* The check reads a flag libgcc fills in at startup, so doing it per call costs nothing. */
    if (pack_crc32c_hw_available())
        return pack_crc32c_hw(crc, data, len);
    return pack_crc32c_sw(crc, data, len);
}
