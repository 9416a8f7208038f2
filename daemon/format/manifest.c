#include "daemon/format/manifest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

void manifest_entries_encode(const struct manifest_entry *e, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++, out += MANIFEST_ENTRY) {
        memcpy(out, e[i].hash, PROTO_HASH_LEN);
        put_be64(out + PROTO_HASH_LEN, e[i].bytes);
    }
}

void manifest_entry_at(const uint8_t *packed, size_t i, struct manifest_entry *e)
{
    const uint8_t *p = packed + i * MANIFEST_ENTRY;
    memcpy(e->hash, p, PROTO_HASH_LEN);
    e->bytes = get_be64(p + PROTO_HASH_LEN);
}

bool manifest_root_valid(const uint8_t *root, size_t len, unsigned depth)
{
    if (depth > MANIFEST_MAX_DEPTH || len % MANIFEST_ENTRY != 0 || len > MANIFEST_MAX_ROOT)
        return false;
    /* Above level 0 an empty list would name no segment: a document that was never written. */
    return depth == 0 || len > 0;
}

size_t manifest_segment_encode(unsigned level, const struct manifest_entry *e, size_t n,
                               uint8_t *out)
{
    memset(out, 0, MANIFEST_SEGMENT_HEADER);
    out[0] = (uint8_t)level;
    proto_be32_write(out + 4, (uint32_t)n);
    manifest_entries_encode(e, n, out + MANIFEST_SEGMENT_HEADER);
    return MANIFEST_SEGMENT_HEADER + n * MANIFEST_ENTRY;
}

int manifest_segment_parse(const uint8_t *raw, size_t len, unsigned *level, const uint8_t **entries,
                           size_t *n)
{
    uint32_t count;

    if (len < MANIFEST_SEGMENT_HEADER || raw[1] != 0 || raw[2] != 0 || raw[3] != 0)
        return MANIFEST_E_CORRUPT;
    count = proto_be32_read(raw + 4);
    if (raw[0] >= MANIFEST_MAX_DEPTH || count == 0 || count > MANIFEST_FANOUT ||
        len != MANIFEST_SEGMENT_HEADER + (size_t)count * MANIFEST_ENTRY)
        return MANIFEST_E_CORRUPT;
    *level = raw[0];
    *entries = raw + MANIFEST_SEGMENT_HEADER;
    *n = count;
    return 0;
}

/* Sums the byte counts of a packed list; false on overflow. */
static bool sum_bytes(const uint8_t *packed, size_t n, uint64_t *total)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = get_be64(packed + i * MANIFEST_ENTRY + PROTO_HASH_LEN);
        if (sum + b < sum)
            return false;
        sum += b;
    }
    *total = sum;
    return true;
}

int manifest_cursor_init(struct manifest_cursor *c, unsigned depth, const uint8_t *root,
                         size_t root_len)
{
    memset(c, 0, sizeof(*c));
    if (!manifest_root_valid(root, root_len, depth))
        return MANIFEST_E_CORRUPT;
    c->depth = depth;
    c->levels[0].n = root_len / MANIFEST_ENTRY;
    c->levels[0].packed = malloc(root_len ? root_len : 1);
    if (!c->levels[0].packed)
        return -ENOMEM;
    if (root_len)
        memcpy(c->levels[0].packed, root, root_len);
    if (!sum_bytes(root, c->levels[0].n, &c->levels[0].bytes)) {
        manifest_cursor_clear(c);
        return MANIFEST_E_CORRUPT;
    }
    return 0;
}

void manifest_cursor_clear(struct manifest_cursor *c)
{
    for (unsigned i = 0; i <= MANIFEST_MAX_DEPTH; i++)
        free(c->levels[i].packed);
    memset(c, 0, sizeof(*c));
}

int manifest_cursor_next(struct manifest_cursor *c, struct manifest_entry *out,
                         uint8_t want[PROTO_HASH_LEN])
{
    for (;;) {
        struct manifest_list *l = &c->levels[c->top];
        if (l->pos == l->n) {
            if (c->top == 0)
                return MANIFEST_E_END;
            free(l->packed);
            memset(l, 0, sizeof(*l));
            c->top--;
            continue;
        }
        if (c->top == c->depth) {
            manifest_entry_at(l->packed, l->pos++, out);
            c->offset += out->bytes;
            return 0;
        }
        memcpy(want, l->packed + l->pos * MANIFEST_ENTRY, PROTO_HASH_LEN);
        c->need = true;
        return MANIFEST_E_NEED;
    }
}

bool manifest_cursor_peek(const struct manifest_cursor *c, size_t ahead, struct manifest_entry *out)
{
    const struct manifest_list *l = &c->levels[c->top];

    if (c->top != c->depth || ahead >= l->n - l->pos)
        return false;
    manifest_entry_at(l->packed, l->pos + ahead, out);
    return true;
}

int manifest_cursor_feed(struct manifest_cursor *c, const uint8_t *raw, size_t len)
{
    struct manifest_list *parent = &c->levels[c->top], *child;
    struct manifest_entry promised;
    const uint8_t *entries;
    unsigned level;
    uint64_t total;
    size_t n;

    if (!c->need || c->top >= c->depth)
        return MANIFEST_E_CORRUPT;
    if (manifest_segment_parse(raw, len, &level, &entries, &n) != 0 ||
        level != c->depth - c->top - 1)
        return MANIFEST_E_CORRUPT;
    manifest_entry_at(parent->packed, parent->pos, &promised);
    /* A segment must hold exactly the bytes its parent says: catches a wrong tree. */
    if (!sum_bytes(entries, n, &total) || total != promised.bytes)
        return MANIFEST_E_CORRUPT;
    child = &c->levels[c->top + 1];
    child->packed = malloc(n * MANIFEST_ENTRY);
    if (!child->packed)
        return -ENOMEM;
    memcpy(child->packed, entries, n * MANIFEST_ENTRY);
    child->n = n;
    child->pos = 0;
    child->bytes = total;
    parent->pos++;
    c->top++;
    c->need = false;
    return 0;
}

void manifest_builder_init(struct manifest_builder *b)
{
    memset(b, 0, sizeof(*b));
}

void manifest_builder_clear(struct manifest_builder *b)
{
    for (unsigned i = 0; i <= MANIFEST_MAX_DEPTH; i++)
        free(b->levels[i]);
    memset(b, 0, sizeof(*b));
}

int manifest_builder_push(struct manifest_builder *b, unsigned level,
                          const struct manifest_entry *e)
{
    if (level > MANIFEST_MAX_DEPTH || b->n[level] >= MANIFEST_FANOUT)
        return -E2BIG;
    if (!b->levels[level] && !(b->levels[level] = malloc(MANIFEST_FANOUT * sizeof(*e))))
        return -ENOMEM;
    b->levels[level][b->n[level]++] = *e;
    if (level > b->high)
        b->high = level;
    if (level == 0)
        b->chunks++;
    return 0;
}

struct manifest_entry *manifest_builder_take(struct manifest_builder *b, unsigned level, size_t *n)
{
    struct manifest_entry *list = b->levels[level];

    *n = b->n[level];
    b->levels[level] = NULL;
    b->n[level] = 0;
    if (*n == 0) {
        free(list);
        return NULL;
    }
    return list;
}

bool manifest_builder_done(const struct manifest_builder *b, unsigned *depth, unsigned *spill)
{
    for (unsigned l = 0; l < b->high; l++) {
        if (b->n[l] > 0) {
            *spill = l;
            return false;
        }
    }
    *depth = b->high;
    return true;
}
