#pragma once
/*
 * A file's contents for powercutfs: 4 KiB pages, shared copy-on-write
 * between contents, so that copying one (a sync, or a cut) costs a pointer
 * per page and writing to a shared page copies that page only. Single
 * threaded, like the file system. Functions return 0 or -ENOMEM.
 */
#include <stddef.h>
#include <stdint.h>

#define CONTENT_PAGE_SIZE 4096u

struct page {
    unsigned refs;
    char bytes[CONTENT_PAGE_SIZE];
};

/* A file's contents in one of the two states; pages may be shared. */
struct content {
    struct page **pages; /* NULL entries read as zeros */
    size_t npages;       /* allocated entries */
    uint64_t size;
};

void content_clear(struct content *c);
/* dst becomes a copy of src that shares its pages. */
int content_assign(struct content *dst, const struct content *src);
int content_write(struct content *c, const char *buf, size_t len, uint64_t off);
/* Copies up to len bytes at off into buf; returns how many (0 past the end). */
size_t content_read(const struct content *c, char *buf, size_t len, uint64_t off);
/* Bytes past a shrunk size read as zeros if the file grows again. */
int content_truncate(struct content *c, uint64_t size);
