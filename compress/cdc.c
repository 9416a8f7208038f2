#include "compress/cdc.h"

#include <errno.h>
#include <pthread.h>

/*
 * The gear table: one pseudo-random 64-bit value per byte value. It is part
 * of the storage format (it decides where chunks end, and so which chunks
 * deduplicate across versions), so it is generated from a fixed seed and
 * must never change.
 */
static uint64_t gear[256];
static pthread_once_t gear_once = PTHREAD_ONCE_INIT;

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void gear_init(void)
{
    uint64_t state = 0x636169726e636463ull; /* "cairncdc" */

    for (int i = 0; i < 256; i++)
        gear[i] = splitmix64(&state);
}

/*
 * A mask of `bits` ones on every other bit from the top. The gear hash shifts
 * left once per byte, so high bits summarize the last 64 bytes; spreading the
 * ones widens the window that decides a cut.
 */
static uint64_t spread_mask(unsigned bits)
{
    uint64_t m = 0;
    for (unsigned i = 0; i < bits; i++)
        m |= 1ull << (63 - 2 * i);
    return m;
}

int cdc_init(struct cdc *c, size_t min, size_t avg, size_t max)
{
    unsigned bits = 0;

    if (min < 64 || min >= avg || avg >= max || avg < 256 || avg > (16u << 20) ||
        (avg & (avg - 1)) != 0)
        return -EINVAL;
    while ((1ull << bits) < avg)
        bits++;
    /* Normalized chunking, level 2: two bits harder before avg, two easier after. */
    if (bits + 2 > 32)
        return -EINVAL;
    pthread_once(&gear_once, gear_init);
    c->min = min;
    c->avg = avg;
    c->max = max;
    c->mask_small = spread_mask(bits + 2);
    c->mask_large = spread_mask(bits - 2);
    return 0;
}

size_t cdc_next(const struct cdc *c, const uint8_t *data, size_t len, bool final)
{
    size_t n = len < c->max ? len : c->max;
    size_t normal = c->avg < n ? c->avg : n;
    uint64_t fp = 0;
    size_t i;

    if (n <= c->min)
        return final || len >= c->max ? n : 0;
    /* The first `min` bytes never end a chunk, so they are not hashed. */
    for (i = c->min; i < normal; i++) {
        fp = (fp << 1) + gear[data[i]];
        if (!(fp & c->mask_small))
            return i + 1;
    }
    for (; i < n; i++) {
        fp = (fp << 1) + gear[data[i]];
        if (!(fp & c->mask_large))
            return i + 1;
    }
    /* No cut point: a chunk ends at max, or at the end of the document. */
    return final || n == c->max ? n : 0;
}
