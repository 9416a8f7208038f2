#pragma once

/*
 * The journal: records that make the packs self-describing, so the
 * database can be rebuilt from the packs alone (`cairnd --rebuild-index`)
 * and recovered after a crash (replay.c). One entry per add, per delete and
 * per name removed, each a pack record of type PACK_REC_ENTRY whose id is the SHA-256 of the
 * entry's raw bytes, a msgpack map in the object envelope (compress.h):
 *
 *   {v: 2, op: "add", doc: bin32, time, size, mime, text, chunks, stored,
 *    depth, root: bin, name?, fmode?, fmtime?, tags?, meta?}
 *   {v: 2, op: "delete", doc: bin32, time, if_unnamed?: true}
 *   {v: 2, op: "unname", doc: bin32, time, name}
 *   {v: 2, op: "void", doc: bin32, time}
 *   {v: 2, op: "edit", doc: bin32, time, tags?, untags?, meta?, unmeta?}
 *
 * A delete with `if_unnamed` deletes the document only if no name points to
 * it when the entry applies (`cairn rm NAME`: a document goes with its last
 * name); one that did not apply leaves no journal row. An unname entry takes
 * the name off that one document: every version of the name that points to
 * it goes.
 *
 * A void entry cancels the entry whose id its `doc` holds: a writer whose
 * database could not apply an entry it had already written (the client was
 * told the operation failed) writes one after it, so a replay, a rebuild
 * and the other writers of a shared bucket never apply that entry, and undo
 * it where they already had (the document is worked out again from its
 * other entries). Void entries are never dead weight for gc.
 *
 * An edit entry changes a stored document's tags and metadata (`cairn tag`,
 * `cairn meta`): `tags` are added and `untags` removed, `meta` keys set and
 * `unmeta` keys removed; an edit of a document that is not there changes
 * nothing.
 *
 * An add entry carries the document's manifest root (manifest.h: depth and
 * the packed root entries), so it alone says what the document is made of,
 * with the name, tags and metadata that add brought, and the mode and mtime
 * (ns) of the file the name was added from (`fmode`, `fmtime`: only with a
 * name; a mode this build does not know is read as none). `time` (nanoseconds
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

/* The op of an entry, as the database's journal table records it. */
enum entry_op {
    ENTRY_ADD = 0,
    ENTRY_DELETE = 1,
    ENTRY_UNNAME = 2,
    ENTRY_VOID = 3, /* doc: the id of the entry it cancels */
    ENTRY_EDIT = 4,
};

struct entry {
    enum entry_op op;
    bool if_unnamed; /* deletes only */
    uint8_t doc[PROTO_HASH_LEN];
    uint64_t time_ns;
    /* adds only */
    uint64_t size, nchunks, stored;
    bool text;
    char *mime, *name; /* adds: may be NULL; unname: the name */
    uint32_t fmode;    /* adds with a name: the file's st_mode (proto_file_mode_valid), or 0 */
    int64_t fmtime;    /* with fmode: the file's mtime, ns since the epoch */
    unsigned depth;
    uint8_t *root; /* packed manifest entries */
    size_t root_len;
    char **tags;
    size_t ntags;
    char **meta_keys, **meta_values; /* adds and edits: metadata set */
    size_t nmeta;
    /* edits only: the tags and the metadata keys removed */
    char **untags, **unmeta;
    size_t nuntags, nunmeta;
};

/* The entry's raw bytes (msgpack, malloc'd). */
int objects_entry_encode(const struct entry *e, uint8_t **raw, size_t *len);
/* Parses raw bytes: 0, -EBADMSG for a malformed entry, or -ENOMEM. The entry owns its strings. */
int objects_entry_decode(const uint8_t *raw, size_t len, struct entry *e);
void objects_entry_clear(struct entry *e);
