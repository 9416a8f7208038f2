/*
 * CRC-32C (Castagnoli), the checksum of pack records and indexes. x86-64 CPUs
 * since Nehalem compute it in one instruction per 8 bytes (three at once in
 * independent lanes), so that path is used whenever the CPU has SSE4.2; everywhere else a
 * slice-by-8 table does the work eight bytes per step. Both produce the same values as the
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

/*
 * One crc32 instruction has a latency of three cycles but the CPU starts one
 * per cycle, so the body runs three independent lanes of `n` bytes each and
 * folds them together: with the register r of lane a and that of lane b
 * started from zero, the register of a followed by b is shift_n(r) ^ b,
 * where shift_n is r run through n zero bytes. shift_n is linear, so a table
 * per byte of the register computes it in four lookups.
 */
#define CRC32C_LONG 8192
#define CRC32C_SHORT 256

static uint32_t crc32c_long[4][256], crc32c_short[4][256];
static pthread_once_t crc32c_shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint32_t crc32c_zeros(uint32_t reg, size_t n)
{
    uint64_t state = reg;

    for (size_t i = 0; i < n; i += 8)
        state = _mm_crc32_u64(state, 0);
    return (uint32_t)state;
}

static void crc32c_shift_table(uint32_t table[4][256], size_t n)
{
    uint32_t bit[32];

    for (int i = 0; i < 32; i++)
        bit[i] = crc32c_zeros(1u << i, n);
    for (int k = 0; k < 4; k++) {
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = 0;
            for (int i = 0; i < 8; i++)
                if (b >> i & 1)
                    v ^= bit[8 * k + i];
            table[k][b] = v;
        }
    }
}

static void crc32c_shift_init(void)
{
    crc32c_shift_table(crc32c_long, CRC32C_LONG);
    crc32c_shift_table(crc32c_short, CRC32C_SHORT);
}

static uint64_t crc32c_shift(const uint32_t table[4][256], uint64_t reg)
{
    return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^ table[2][(reg >> 16) & 0xff] ^
           table[3][(reg >> 24) & 0xff];
}

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t word;

    memcpy(&word, p, sizeof(word));
    return word;
}

/* Three lanes of n bytes from p, into the register `state`. */
__attribute__((target("sse4.2"))) static uint64_t
crc32c_lanes(uint64_t state, const uint8_t *p, size_t n, const uint32_t table[4][256])
{
    uint64_t a = state, b = 0, c = 0;

    for (const uint8_t *end = p + n; p < end; p += 8) {
        a = _mm_crc32_u64(a, load64(p));
        b = _mm_crc32_u64(b, load64(p + n));
        c = _mm_crc32_u64(c, load64(p + 2 * n));
    }
    return crc32c_shift(table, crc32c_shift(table, a) ^ b) ^ c;
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
    if (len >= 3 * CRC32C_SHORT)
        pthread_once(&crc32c_shift_once, crc32c_shift_init);
    for (; len >= 3 * CRC32C_LONG; p += 3 * CRC32C_LONG, len -= 3 * CRC32C_LONG)
        state = crc32c_lanes(state, p, CRC32C_LONG, crc32c_long);
    for (; len >= 3 * CRC32C_SHORT; p += 3 * CRC32C_SHORT, len -= 3 * CRC32C_SHORT)
        state = crc32c_lanes(state, p, CRC32C_SHORT, crc32c_short);
    for (; len >= 8; p += 8, len -= 8)
        state = _mm_crc32_u64(state, load64(p));
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
