#include "compress/compress.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <zstd.h>
#include <zstd_errors.h>

static const uint8_t magic[4] = {'c', 'R', 'n', 'O'};

static void header_write(uint8_t *p, enum compress_algo algo, uint64_t raw_size)
{
    memcpy(p, magic, sizeof(magic));
    p[4] = COMPRESS_VERSION;
    p[5] = (uint8_t)algo;
    p[6] = 0;
    p[7] = 0;
    for (int i = 0; i < 8; i++)
        p[8 + i] = (uint8_t)(raw_size >> (56 - 8 * i));
}

/*
 * One compression and one decompression context per thread, kept for the
 * thread's life: making one per call allocates (and clears) a large
 * workspace every time, which costs more than compressing a small block.
 */
static pthread_once_t keys_once = PTHREAD_ONCE_INIT;
static pthread_key_t cctx_key, dctx_key;
static int keys_status;

static void free_cctx(void *p)
{
    ZSTD_freeCCtx(p);
}

static void free_dctx(void *p)
{
    ZSTD_freeDCtx(p);
}

static void keys_init(void)
{
    if (pthread_key_create(&cctx_key, free_cctx) != 0 ||
        pthread_key_create(&dctx_key, free_dctx) != 0)
        keys_status = -ENOMEM;
}

static ZSTD_CCtx *thread_cctx(void)
{
    ZSTD_CCtx *c;

    if (pthread_once(&keys_once, keys_init) != 0 || keys_status != 0)
        return NULL;
    if ((c = pthread_getspecific(cctx_key)))
        return c;
    if ((c = ZSTD_createCCtx()) && pthread_setspecific(cctx_key, c) != 0) {
        ZSTD_freeCCtx(c);
        c = NULL;
    }
    return c;
}

static ZSTD_DCtx *thread_dctx(void)
{
    ZSTD_DCtx *d;

    if (pthread_once(&keys_once, keys_init) != 0 || keys_status != 0)
        return NULL;
    if ((d = pthread_getspecific(dctx_key)))
        return d;
    if ((d = ZSTD_createDCtx()) && pthread_setspecific(dctx_key, d) != 0) {
        ZSTD_freeDCtx(d);
        d = NULL;
    }
    return d;
}

size_t compress_bound(size_t len)
{
    size_t z = ZSTD_compressBound(len);
    return COMPRESS_HEADER_SIZE + (z > len ? z : len);
}

int compress_encode(const void *raw, size_t len, int level, void *out, size_t out_cap,
                    size_t *out_len)
{
    uint8_t *dst = out;

    if (out_cap < compress_bound(len) || level < 1 || level > ZSTD_maxCLevel())
        return -EINVAL;
    if (len > 0) {
        ZSTD_CCtx *cctx = thread_cctx();
        if (!cctx)
            return -ENOMEM;
        size_t z = ZSTD_compressCCtx(cctx, dst + COMPRESS_HEADER_SIZE,
                                     out_cap - COMPRESS_HEADER_SIZE, raw, len, level);
        if (ZSTD_isError(z)) {
            if (ZSTD_getErrorCode(z) == ZSTD_error_memory_allocation)
                return -ENOMEM;
            return -EINVAL;
        }
        /* Keep the compressed form only when it saves enough to pay for decoding. */
        if (z < len - len * COMPRESS_MIN_SAVING_PCT / 100) {
            header_write(dst, COMPRESS_ZSTD, len);
            *out_len = COMPRESS_HEADER_SIZE + z;
            return 0;
        }
        memcpy(dst + COMPRESS_HEADER_SIZE, raw, len);
    }
    header_write(dst, COMPRESS_RAW, len);
    *out_len = COMPRESS_HEADER_SIZE + len;
    return 0;
}

int compress_header_parse(const void *obj, size_t len, struct compress_header *hdr)
{
    const uint8_t *p = obj;

    if (len < COMPRESS_HEADER_SIZE || memcmp(p, magic, sizeof(magic)) != 0 ||
        p[4] != COMPRESS_VERSION || p[6] != 0 || p[7] != 0)
        return COMPRESS_E_CORRUPT;
    if (p[5] != COMPRESS_RAW && p[5] != COMPRESS_ZSTD)
        return COMPRESS_E_CORRUPT;
    hdr->version = p[4];
    hdr->algo = p[5];
    hdr->raw_size = 0;
    for (int i = 0; i < 8; i++)
        hdr->raw_size = (hdr->raw_size << 8) | p[8 + i];
    return 0;
}

int compress_decode(const void *obj, size_t len, size_t max_raw, void *out, size_t out_cap,
                    size_t *raw_len)
{
    struct compress_header hdr;
    const uint8_t *body = (const uint8_t *)obj + COMPRESS_HEADER_SIZE;
    size_t body_len;
    int r;

    r = compress_header_parse(obj, len, &hdr);
    if (r)
        return r;
    if (hdr.raw_size > max_raw)
        return COMPRESS_E_TOO_LARGE;
    if (hdr.raw_size > out_cap)
        return -ENOBUFS;
    body_len = len - COMPRESS_HEADER_SIZE;
    if (hdr.algo == COMPRESS_RAW) {
        if (body_len != hdr.raw_size)
            return COMPRESS_E_CORRUPT;
        memcpy(out, body, body_len);
        *raw_len = body_len;
        return 0;
    }
    unsigned long long frame_size = ZSTD_getFrameContentSize(body, body_len);
    if (frame_size != hdr.raw_size)
        return COMPRESS_E_CORRUPT;
    ZSTD_DCtx *dctx = thread_dctx();
    if (!dctx)
        return -ENOMEM;
    size_t n = ZSTD_decompressDCtx(dctx, out, out_cap, body, body_len);
    if (ZSTD_isError(n) || n != hdr.raw_size)
        return COMPRESS_E_CORRUPT;
    *raw_len = n;
    return 0;
}
