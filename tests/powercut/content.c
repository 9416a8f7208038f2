/* powercutfs's file contents: see content.h. */
#include "content.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_SIZE CONTENT_PAGE_SIZE

static void page_unref(struct page *p)
{
    if (p && --p->refs == 0)
        free(p);
}

void content_clear(struct content *c)
{
    for (size_t i = 0; i < c->npages; i++)
        page_unref(c->pages[i]);
    free(c->pages);
    *c = (struct content){0};
}

int content_assign(struct content *dst, const struct content *src)
{
    size_t used = (src->size + PAGE_SIZE - 1) / PAGE_SIZE;
    struct page **pages = NULL;

    if (used > 0 && !(pages = calloc(used, sizeof(*pages))))
        return -ENOMEM;
    for (size_t i = 0; i < used && i < src->npages; i++) {
        pages[i] = src->pages[i];
        if (pages[i])
            pages[i]->refs++;
    }
    content_clear(dst);
    dst->pages = pages;
    dst->npages = used;
    dst->size = src->size;
    return 0;
}

static int content_reserve(struct content *c, size_t npages)
{
    struct page **pages;

    if (npages <= c->npages)
        return 0;
    pages = realloc(c->pages, npages * sizeof(*pages));
    if (!pages)
        return -ENOMEM;
    memset(pages + c->npages, 0, (npages - c->npages) * sizeof(*pages));
    c->pages = pages;
    c->npages = npages;
    return 0;
}

/* Page i, private to this content (copied if shared, made if missing). */
static struct page *content_own(struct content *c, size_t i)
{
    struct page *p = c->pages[i], *copy;

    if (p && p->refs == 1)
        return p;
    if (!(copy = malloc(sizeof(*copy))))
        return NULL;
    copy->refs = 1;
    if (p)
        memcpy(copy->bytes, p->bytes, PAGE_SIZE);
    else
        memset(copy->bytes, 0, PAGE_SIZE);
    page_unref(p);
    c->pages[i] = copy;
    return copy;
}

int content_write(struct content *c, const char *buf, size_t len, uint64_t off)
{
    uint64_t end = off + len;
    int r = content_reserve(c, (end + PAGE_SIZE - 1) / PAGE_SIZE);

    for (uint64_t at = off; r == 0 && at < end;) {
        size_t i = at / PAGE_SIZE, in = at % PAGE_SIZE;
        size_t n = end - at < PAGE_SIZE - in ? end - at : PAGE_SIZE - in;
        struct page *p = content_own(c, i);

        if (!p)
            return -ENOMEM;
        memcpy(p->bytes + in, buf + (at - off), n);
        at += n;
    }
    if (r == 0 && end > c->size)
        c->size = end;
    return r;
}

size_t content_read(const struct content *c, char *buf, size_t len, uint64_t off)
{
    size_t done = 0;

    if (off >= c->size)
        return 0;
    if (len > c->size - off)
        len = c->size - off;
    while (done < len) {
        uint64_t at = off + done;
        size_t i = at / PAGE_SIZE, in = at % PAGE_SIZE;
        size_t n = len - done < PAGE_SIZE - in ? len - done : PAGE_SIZE - in;
        const struct page *p = i < c->npages ? c->pages[i] : NULL;

        if (p)
            memcpy(buf + done, p->bytes + in, n);
        else
            memset(buf + done, 0, n);
        done += n;
    }
    return done;
}

int content_truncate(struct content *c, uint64_t size)
{
    size_t keep = (size + PAGE_SIZE - 1) / PAGE_SIZE;

    if (size < c->size) {
        for (size_t i = keep; i < c->npages; i++) {
            page_unref(c->pages[i]);
            c->pages[i] = NULL;
        }
        if (size % PAGE_SIZE && keep - 1 < c->npages && c->pages[keep - 1]) {
            struct page *p = content_own(c, keep - 1);
            if (!p)
                return -ENOMEM;
            memset(p->bytes + size % PAGE_SIZE, 0, PAGE_SIZE - size % PAGE_SIZE);
        }
    }
    c->size = size;
    return 0;
}
