#pragma once

/*
 * The journal: records that make the packs self-describing, so the
 * database can be rebuilt from the packs alone (`cairnd --rebuild-index`)
 * and recovered after a crash (replay.c). One entry per add and per delete,
 * each a pack record of type PACK_REC_ENTRY whose id is the SHA-256 of the
 * entry's raw bytes, a msgpack map in the object envelope (compress.h):
 *
 *   {v: 2, op: "add", doc: bin32, time, size, mime, text, chunks, stored,
 *    depth, root: bin, name?, tags?, meta?}
 *   {v: 2, op: "delete", doc: bin32, time}
 *
 * An add entry carries the document's manifest root (manifest.h: depth and
 * the packed root entries), so it alone says what the document is made of,
 * with the name, tags and metadata that add brought. `time` (nanoseconds
 * since the epoch) orders the journal; `chunks` is the number of chunks,
 * `stored` the document's share of stored bytes when it was added, and
 * `text` whether its content is indexed for search.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* Largest raw journal entry accepted (a full root plus names, tags and metadata). */
#define OBJECTS_MAX_ENTRY (1024u * 1024)

struct entry {
    bool is_delete;
    uint8_t doc[PROTO_HASH_LEN];
    uint64_t time_ns;
    /* adds only */
    uint64_t size, nchunks, stored;
    bool text;
    char *mime, *name; /* name may be NULL */
    unsigned depth;
    uint8_t *root; /* packed manifest entries */
    size_t root_len;
    char **tags;
    size_t ntags;
    char **meta_keys, **meta_values;
    size_t nmeta;
};

/* The entry's raw bytes (msgpack, malloc'd). */
int objects_entry_encode(const struct entry *e, uint8_t **raw, size_t *len);
/* Parses raw bytes: 0, -EBADMSG for a malformed entry, or -ENOMEM. The entry owns its strings. */
int objects_entry_decode(const uint8_t *raw, size_t len, struct entry *e);
void objects_entry_clear(struct entry *e);
