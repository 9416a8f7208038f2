/*
 * The read cache's slice files: naming, writing, reading with checks, and
 * taking stock of a directory at start (see readcache-int.h for the format).
 */
#include "daemon/readcache/readcache-int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "storage/pack/pack.h"

static const char magic[8] = {'C', 'A', 'I', 'R', 'N', 'R', 'C', '1'};

/* Bytes of the header that carry something (the rest is zero). */
#define HEADER_USED (8 + 8 + 4 + 4 + 4 * READCACHE_PAGES + 4)

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

void readcache_file_name(char out[READCACHE_NAME_MAX], uint64_t pack, uint32_t slice)
{
    snprintf(out, READCACHE_NAME_MAX, "%016" PRIx64 "-%08" PRIx32, pack, slice);
}

static bool parse_name(const char *name, uint64_t *pack, uint32_t *slice)
{
    uint64_t p = 0;
    uint32_t s = 0;

    if (strlen(name) != 25 || name[16] != '-')
        return false;
    for (int i = 0; i < 25; i++) {
        if (i == 16)
            continue;
        char c = name[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            return false;
        if (i < 16)
            p = p << 4 | d;
        else
            s = s << 4 | d;
    }
    *pack = p;
    *slice = s;
    return true;
}

static void page_crcs(const uint8_t *data, uint32_t len, uint32_t crc[READCACHE_PAGES])
{
    for (uint32_t i = 0; i < READCACHE_PAGES; i++) {
        uint32_t at = i * READCACHE_PAGE;
        crc[i] = at < len ? pack_crc32c(0, data + at,
                                        len - at < READCACHE_PAGE ? len - at : READCACHE_PAGE)
                          : 0;
    }
}

static int write_all(int fd, const void *buf, size_t len, off_t off)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (w == 0)
            return -EIO;
        p += w;
        len -= (size_t)w;
        off += w;
    }
    return 0;
}

int readcache_file_write(int dirfd, uint64_t pack, uint32_t slice, const uint8_t *data,
                         uint32_t len, uint32_t crc[READCACHE_PAGES])
{
    char name[READCACHE_NAME_MAX], tmp[READCACHE_NAME_MAX + 4];
    uint8_t header[HEADER_USED] = {0};
    int fd, r;

    if (len > READCACHE_SLICE)
        return -EINVAL;
    page_crcs(data, len, crc);
    memcpy(header, magic, 8);
    put64(header + 8, pack);
    put32(header + 16, slice);
    put32(header + 20, len);
    for (uint32_t i = 0; i < READCACHE_PAGES; i++)
        put32(header + 24 + 4 * i, crc[i]);
    put32(header + HEADER_USED - 4, pack_crc32c(0, header, HEADER_USED - 4));
    readcache_file_name(name, pack, slice);
    snprintf(tmp, sizeof(tmp), "%s.tmp", name);
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    r = write_all(fd, header, sizeof(header), 0);
    if (r == 0)
        r = write_all(fd, data, len, READCACHE_HEADER);
    /* A slice shorter than its pages still makes the file as long as the header says. */
    if (r == 0 && len == 0 && ftruncate(fd, READCACHE_HEADER) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
        r = -errno;
    if (r != 0)
        unlinkat(dirfd, tmp, 0);
    return r;
}

static int read_all(int fd, void *buf, size_t len, off_t off, size_t *got)
{
    uint8_t *p = buf;
    size_t done = 0;

    *got = 0;
    while (done < len) {
        ssize_t n = pread(fd, p + done, len - done, off + (off_t)done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *got = done;
    return 0;
}

static int read_header(int fd, uint64_t pack, uint32_t slice, uint32_t crc[READCACHE_PAGES],
                       uint32_t *len)
{
    uint8_t header[HEADER_USED];
    size_t got;
    int r = read_all(fd, header, sizeof(header), 0, &got);

    if (r != 0)
        return r;
    if (got != sizeof(header) || memcmp(header, magic, 8) != 0 ||
        get32(header + HEADER_USED - 4) != pack_crc32c(0, header, HEADER_USED - 4) ||
        get64(header + 8) != pack || get32(header + 16) != slice ||
        get32(header + 20) > READCACHE_SLICE)
        return READCACHE_E_BAD;
    *len = get32(header + 20);
    for (uint32_t i = 0; i < READCACHE_PAGES; i++)
        crc[i] = get32(header + 24 + 4 * i);
    return 0;
}

/* A page read for its part only (the first or last of a range): kept per thread. */
static __thread uint8_t page_buf[READCACHE_PAGE];

/* Pages [first, last] of the file into dst, each checked: 0, READCACHE_E_BAD or -errno. */
static int read_pages(int fd, const uint32_t crc[READCACHE_PAGES], uint32_t len, uint32_t first,
                      uint32_t last, uint8_t *dst)
{
    uint32_t from = first * READCACHE_PAGE, to = (last + 1) * READCACHE_PAGE;
    size_t got;
    int r;

    if (to > len)
        to = len;
    if ((r = read_all(fd, dst, to - from, (off_t)READCACHE_HEADER + from, &got)) != 0)
        return r;
    if (got != to - from)
        return READCACHE_E_BAD;
    for (uint32_t p = first; p <= last; p++) {
        uint32_t at = p * READCACHE_PAGE - from;
        uint32_t plen = to - from - at < READCACHE_PAGE ? to - from - at : READCACHE_PAGE;
        if (pack_crc32c(0, dst + at, plen) != crc[p])
            return READCACHE_E_BAD;
    }
    return 0;
}

/* Part of one page, through page_buf. */
static int read_part(int fd, const uint32_t crc[READCACHE_PAGES], uint32_t len, uint32_t page,
                     uint32_t in, size_t n, uint8_t *dst)
{
    int r = read_pages(fd, crc, len, page, page, page_buf);

    if (r == 0)
        memcpy(dst, page_buf + (in - page * READCACHE_PAGE), n);
    return r;
}

int readcache_file_read(int dirfd, uint64_t pack, uint32_t slice, uint32_t crc[READCACHE_PAGES],
                        bool *have_crc, uint32_t *len, uint32_t in, void *buf, size_t want,
                        size_t *n, bool touch)
{
    char name[READCACHE_NAME_MAX];
    uint8_t *dst = buf;
    uint32_t end;
    int fd, r = 0;

    readcache_file_name(name, pack, slice);
    fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? READCACHE_E_GONE : -errno;
    if (!*have_crc) {
        if ((r = read_header(fd, pack, slice, crc, len)) != 0)
            goto out;
        *have_crc = true;
    }
    *n = 0;
    if (in >= *len || want == 0)
        goto out;
    if (want > *len - in)
        want = *len - in;
    end = in + (uint32_t)want;
    /*
     * Every page is checked whole: the pages the range covers entirely are
     * read straight into buf, the partly covered first and last through a
     * page of their own.
     */
    while (r == 0 && in < end) {
        uint32_t page = in / READCACHE_PAGE, pstart = page * READCACHE_PAGE;
        uint32_t pend = pstart + READCACHE_PAGE < *len ? pstart + READCACHE_PAGE : *len;
        if (in > pstart || end < pend) {
            uint32_t part = (end < pend ? end : pend) - in;
            r = read_part(fd, crc, *len, page, in, part, dst);
            dst += part;
            in += part;
        } else {
            /* Whole pages up to the last one the range covers entirely. */
            uint32_t last = end == *len ? (end - 1) / READCACHE_PAGE : end / READCACHE_PAGE - 1;
            uint32_t upto = (last + 1) * READCACHE_PAGE < *len ? (last + 1) * READCACHE_PAGE : *len;
            r = read_pages(fd, crc, *len, page, last, dst);
            dst += upto - in;
            in = upto;
        }
    }
    if (r == 0) {
        *n = want;
        if (touch)
            futimens(fd, NULL); /* a hint for the next start's order; failure changes nothing */
    }
out:
    close(fd);
    return r;
}

int readcache_file_scan(int dirfd, struct readcache_found **out, size_t *n)
{
    struct readcache_found *v = NULL;
    size_t count = 0, cap = 0;
    struct dirent *de;
    int fd = dup(dirfd), r = 0;
    DIR *d;

    *out = NULL;
    *n = 0;
    if (fd < 0)
        return -errno;
    if (!(d = fdopendir(fd))) {
        r = -errno;
        close(fd);
        return r;
    }
    while ((de = readdir(d))) {
        struct stat sb;
        size_t nl = strlen(de->d_name);
        uint64_t pack;
        uint32_t slice;
        if (nl > 4 && strcmp(de->d_name + nl - 4, ".tmp") == 0) {
            unlinkat(dirfd, de->d_name, 0); /* a write a crash cut short */
            continue;
        }
        if (!parse_name(de->d_name, &pack, &slice) ||
            fstatat(dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode))
            continue;
        if (sb.st_size < (off_t)READCACHE_HEADER ||
            sb.st_size > (off_t)(READCACHE_HEADER + READCACHE_SLICE)) {
            unlinkat(dirfd, de->d_name, 0);
            continue;
        }
        if (count == cap) {
            cap = cap ? cap * 2 : 256;
            struct readcache_found *grown = realloc(v, cap * sizeof(*v));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            v = grown;
        }
        v[count].pack = pack;
        v[count].slice = slice;
        /* The length the file has room for; its header, read at first use, has the last word. */
        v[count].len = (uint32_t)(sb.st_size - READCACHE_HEADER);
        v[count].used = sb.st_mtim;
        count++;
    }
    closedir(d);
    if (r != 0) {
        free(v);
        return r;
    }
    *out = v;
    *n = count;
    return 0;
}

uint64_t readcache_default_size(const char *dir)
{
    char path[4096];
    struct statvfs vfs;
    uint64_t size;

    snprintf(path, sizeof(path), "%s", dir);
    /* The directory may not exist yet: ask about the nearest parent that does. */
    while (statvfs(path, &vfs) < 0) {
        char *slash = strrchr(path, '/');
        if (!slash)
            return READCACHE_MIN_BYTES;
        if (slash == path) {
            path[1] = '\0';
            if (statvfs(path, &vfs) < 0)
                return READCACHE_MIN_BYTES;
            break;
        }
        *slash = '\0';
    }
    size = (uint64_t)vfs.f_bavail * vfs.f_frsize / 100 * READCACHE_DEFAULT_PERCENT;
    if (size > READCACHE_DEFAULT_MAX)
        size = READCACHE_DEFAULT_MAX;
    if (size < READCACHE_MIN_BYTES)
        size = READCACHE_MIN_BYTES;
    return size;
}

int readcache_clear(const char *dir)
{
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    struct dirent *de;
    DIR *d;

    if (dirfd < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!(d = fdopendir(dirfd))) {
        int r = -errno;
        close(dirfd);
        return r;
    }
    while ((de = readdir(d))) {
        uint64_t pack;
        uint32_t slice;
        size_t nl = strlen(de->d_name);
        /* Only what the cache makes: slice files and their half-written ".tmp"s. */
        if (parse_name(de->d_name, &pack, &slice) ||
            (nl > 4 && strcmp(de->d_name + nl - 4, ".tmp") == 0))
            unlinkat(dirfd, de->d_name, 0);
    }
    closedir(d);
    return 0;
}
