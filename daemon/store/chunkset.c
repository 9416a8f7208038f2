#include "daemon/store/chunkset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Slots start at this many, and are at most 3/4 full. */
#define CHUNKSET_MIN_SLOTS 1024u

void chunkset_init(struct chunkset *s, size_t max_count)
{
    memset(s, 0, sizeof(*s));
    s->max_count = max_count;
}

void chunkset_deinit(struct chunkset *s)
{
    free(s->ids);
    free(s->used);
    chunkset_init(s, s->max_count);
}

/* The ids are SHA-256 digests: their first bytes are as good as any hash of them. */
static size_t slot_of(const struct chunkset *s, const uint8_t id[PROTO_HASH_LEN])
{
    uint64_t h;

    memcpy(&h, id, sizeof(h));
    return (size_t)h & (s->slots - 1);
}

/* The slot holding id, or the empty one where it would go. */
static size_t probe(const struct chunkset *s, const uint8_t id[PROTO_HASH_LEN])
{
    size_t i = slot_of(s, id);

    while (s->used[i] && memcmp(s->ids[i], id, PROTO_HASH_LEN) != 0)
        i = (i + 1) & (s->slots - 1);
    return i;
}

static int grow(struct chunkset *s)
{
    struct chunkset bigger = *s;

    bigger.slots = s->slots ? 2 * s->slots : CHUNKSET_MIN_SLOTS;
    bigger.ids = malloc(bigger.slots * sizeof(*bigger.ids));
    bigger.used = calloc(bigger.slots, sizeof(*bigger.used));
    if (!bigger.ids || !bigger.used) {
        free(bigger.ids);
        free(bigger.used);
        return -ENOMEM;
    }
    for (size_t i = 0; i < s->slots; i++) {
        if (!s->used[i])
            continue;
        size_t to = probe(&bigger, s->ids[i]);
        bigger.used[to] = true;
        memcpy(bigger.ids[to], s->ids[i], PROTO_HASH_LEN);
    }
    free(s->ids);
    free(s->used);
    *s = bigger;
    return 0;
}

int chunkset_add(struct chunkset *s, const uint8_t id[PROTO_HASH_LEN], bool *added)
{
    size_t i;

    *added = false;
    if (s->slots && s->used[i = probe(s, id)])
        return 0;
    if (s->count >= s->max_count)
        return CHUNKSET_E_FULL;
    if (4 * (s->count + 1) > 3 * s->slots) {
        int r = grow(s);
        if (r < 0)
            return r;
    }
    i = probe(s, id);
    s->used[i] = true;
    memcpy(s->ids[i], id, PROTO_HASH_LEN);
    s->count++;
    *added = true;
    return 0;
}
