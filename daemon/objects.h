#pragma once

/*
 * The metadata objects that make the backend self-describing, so that the
 * database can be rebuilt from the backend alone (`cairnd --rebuild-index`):
 *
 *   manifests/<document hash>  {v: 1, size, mime, chunks: [[id (bin 32), size], ...]}
 *   entries/<sha256 of entry>  {v: 1, op: "add", doc, time, mime, name?, tags?, meta?}
 *                              {v: 1, op: "delete", doc, time}
 *
 * Both are msgpack maps in the usual object envelope (compress.h). A manifest
 * says what a document is made of; entries are the journal of adds and
 * deletes, with the names, tags and metadata each add brought; `time` is in
 * nanoseconds since the epoch and orders the journal.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/db.h"

/* Largest manifest or entry object accepted when reading one back. */
#define OBJECTS_MAX_META_OBJECT (64u * 1024 * 1024)

struct entry {
    bool is_delete;
    uint8_t doc[PROTO_HASH_LEN];
    uint64_t time_ns;
    char *mime, *name; /* adds; name may be NULL */
    char **tags;
    size_t ntags;
    char **meta_keys, **meta_values;
    size_t nmeta;
};

struct manifest {
    uint64_t size;
    char *mime;
    struct db_chunk *chunks; /* stored_size 0: a manifest does not record it */
    size_t nchunks;
};

/* Each encoder returns a malloc'd object and the hash its key is made of. */
int objects_manifest_encode(uint64_t size, const char *mime, const struct db_chunk *chunks,
                            size_t nchunks, int level, uint8_t **obj, size_t *len);
int objects_entry_encode(const struct entry *e, int level, uint8_t **obj, size_t *len,
                         uint8_t key_hash[PROTO_HASH_LEN]);

/* Decoders: 0, -EBADMSG for a malformed object, or -ENOMEM. */
int objects_manifest_decode(const uint8_t *obj, size_t len, struct manifest *m);
int objects_entry_decode(const uint8_t *obj, size_t len, struct entry *e);

void objects_manifest_clear(struct manifest *m);
void objects_entry_clear(struct entry *e);
