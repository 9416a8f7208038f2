#include "daemon/pack/merge.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/pack/packer.h"
#include "daemon/format/record.h"

/* The chunks of the shared block being filled. */
struct shared {
    struct record_piece *pieces;
    size_t n, cap, raw;
    uint8_t **raws; /* decoded originals whose bytes the pieces point into */
    size_t nraws;
    struct packer_rec **members;
    size_t nmembers;
};

static void shared_reset(struct shared *s)
{
    for (size_t i = 0; i < s->nraws; i++)
        free(s->raws[i]);
    s->n = s->raw = s->nraws = s->nmembers = 0;
}

static void shared_free(struct shared *s)
{
    shared_reset(s);
    free(s->pieces);
    free(s->raws);
    free(s->members);
}

/* Compresses the pieces gathered into one record and points its members at it. */
static int flush(struct shared *s, int level, struct packer_rec **out, size_t *nout)
{
    struct packer_rec rec = {.type = PACK_REC_BLOCK}, *grown;
    int r;

    if (s->n == 0)
        return 0;
    r = record_block_build(s->pieces, s->n, level, &rec.bytes, &rec.len, rec.id, &rec.idx);
    if (r < 0)
        return r;
    rec.nidx = s->n;
    if (!(grown = realloc(*out, (*nout + 1) * sizeof(*grown)))) {
        free(rec.bytes);
        free(rec.idx);
        return -ENOMEM;
    }
    *out = grown;
    grown[(*nout)++] = rec;
    /* Members learn their place only once every shared block exists (pointers move). */
    for (size_t i = 0; i < s->nmembers; i++)
        s->members[i]->merged = (struct packer_rec *)(uintptr_t)*nout; /* index + 1 */
    shared_reset(s);
    return 0;
}

static int grow(void **v, size_t *cap, size_t want, size_t size)
{
    if (want <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 64;
    while (ncap < want)
        ncap *= 2;
    void *g = realloc(*v, ncap * size);
    if (!g)
        return -ENOMEM;
    *v = g;
    *cap = ncap;
    return 0;
}

/* Adds one small block's chunks to the shared block, starting a new one when full. */
static int take(struct shared *s, struct packer_rec *rec, int level, struct packer_rec **out,
                size_t *nout, size_t *raws_cap, size_t *members_cap)
{
    struct pack_block_chunk *chunks;
    uint8_t *raw;
    size_t raw_len;
    uint32_t count;
    int r = record_block_open(rec->bytes, rec->len, &chunks, &count, &raw, &raw_len);

    if (r != 0)
        return r < 0 ? r : -EINVAL; /* a record this daemon just built: a bug */
    if ((s->raw + raw_len > MERGE_BLOCK || s->n + count > PACK_MAX_BLOCK_CHUNKS) &&
        (r = flush(s, level, out, nout)) < 0)
        goto out;
    if ((r = grow((void **)&s->pieces, &s->cap, s->n + count, sizeof(*s->pieces))) < 0 ||
        (r = grow((void **)&s->raws, raws_cap, s->nraws + 1, sizeof(*s->raws))) < 0 ||
        (r = grow((void **)&s->members, members_cap, s->nmembers + 1, sizeof(*s->members))) < 0)
        goto out;
    rec->merged_shift = (uint32_t)s->raw;
    for (uint32_t i = 0; i < count; i++) {
        struct record_piece *p = &s->pieces[s->n++];
        p->data = raw + chunks[i].sub_off;
        p->len = chunks[i].size;
        memcpy(p->hash, chunks[i].id, PROTO_HASH_LEN);
    }
    s->raw += raw_len;
    s->raws[s->nraws++] = raw;
    s->members[s->nmembers++] = rec;
    raw = NULL; /* owned by the shared block now */
out:
    free(raw);
    free(chunks);
    return r;
}

int merge_blocks(struct packer_rec *const *recs, size_t n, int level, struct packer_rec **out,
                 size_t *nout)
{
    struct shared s = {0};
    size_t raws_cap = 0, members_cap = 0;
    int r = 0;

    *out = NULL;
    *nout = 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (recs[i]->mergeable)
            r = take(&s, recs[i], level, out, nout, &raws_cap, &members_cap);
    }
    if (r == 0)
        r = flush(&s, level, out, nout);
    shared_free(&s);
    for (size_t i = 0; i < n; i++) {
        struct packer_rec *rec = recs[i];
        uintptr_t k = (uintptr_t)rec->merged;
        rec->merged = r == 0 && k ? &(*out)[k - 1] : NULL;
    }
    if (r < 0) {
        for (size_t i = 0; i < *nout; i++) {
            free((*out)[i].bytes);
            free((*out)[i].idx);
        }
        free(*out);
        *out = NULL;
        *nout = 0;
    }
    return r;
}
