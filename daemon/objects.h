#pragma once

/*
 * The journal: the metadata objects that make the backend self-describing, so
 * that the database can be rebuilt from the backend alone
 * (`cairnd --rebuild-index`). One entry per add and per delete:
 *
 *   entries/<sha256 of entry>
 *     {v: 1, op: "add", doc, time, size, mime, chunks: [[id (bin 32), size], ...],
 *      name?, tags?, meta?}
 *     {v: 1, op: "delete", doc, time}
 *
 * msgpack maps in the usual object envelope (compress.h). An add entry is the
 * document's manifest (its ordered chunks) together with the name, tags and
 * metadata that add brought; `time` is in nanoseconds since the epoch and
 * orders the journal.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/db.h"

/* Largest journal entry accepted when reading one back. */
#define OBJECTS_MAX_META_OBJECT (64u * 1024 * 1024)

struct entry {
    bool is_delete;
    uint8_t doc[PROTO_HASH_LEN];
    uint64_t time_ns;
    /* adds only */
    uint64_t size;
    char *mime, *name;       /* name may be NULL */
    struct db_chunk *chunks; /* stored_size is not recorded: 0 when decoded */
    size_t nchunks;
    char **tags;
    size_t ntags;
    char **meta_keys, **meta_values;
    size_t nmeta;
};

/* Returns a malloc'd object and the hash its key is made of. */
int objects_entry_encode(const struct entry *e, int level, uint8_t **obj, size_t *len,
                         uint8_t key_hash[PROTO_HASH_LEN]);
/* 0, -EBADMSG for a malformed object, or -ENOMEM. */
int objects_entry_decode(const uint8_t *obj, size_t len, struct entry *e);
void objects_entry_clear(struct entry *e);
