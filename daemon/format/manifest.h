#pragma once

/*
 * Manifests: what a document is made of, as a tree whose size in memory
 * never depends on the document's size.
 *
 * A manifest entry is a hash and a byte count. At level 0 the entries are
 * the document's chunks in order (hash = chunk id, bytes = chunk size). A
 * document of at most MANIFEST_FANOUT chunks keeps that list as its root,
 * inline in its database row and journal entry (depth 0). A larger one
 * stores full lists of MANIFEST_FANOUT entries as segments (pack records of
 * type PACK_REC_MANIFEST, id = SHA-256 of the segment's raw bytes), and the
 * level above lists those segments (hash = segment id, bytes = the content
 * bytes below it), and so on until one level fits in a root. An add holds
 * one partial list per level; a get holds one segment per level.
 *
 * Segment raw layout (big-endian): level u8 | 0 u8 | 0 u16 | count u32 |
 * count x (hash [32] | bytes u64). The root is the entries alone.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* Expected outcomes (positive). */
enum {
    MANIFEST_E_CORRUPT = 1, /* bad layout, level, count or sizes */
    MANIFEST_E_END,         /* the cursor has passed the last chunk */
    MANIFEST_E_NEED,        /* the cursor needs a segment: feed it */
};

#define MANIFEST_FANOUT 1024u
#define MANIFEST_ENTRY 40u
#define MANIFEST_SEGMENT_HEADER 8u
/* Depth 6 of fan-out 1024 covers 2^60 chunks: more than any document can have. */
#define MANIFEST_MAX_DEPTH 6u
#define MANIFEST_MAX_SEGMENT (MANIFEST_SEGMENT_HEADER + MANIFEST_FANOUT * MANIFEST_ENTRY)
#define MANIFEST_MAX_ROOT (MANIFEST_FANOUT * MANIFEST_ENTRY)

struct manifest_entry {
    uint8_t hash[PROTO_HASH_LEN];
    uint64_t bytes;
};

/* Packs entries into out (n * MANIFEST_ENTRY bytes): a root, or a segment's body. */
void manifest_entries_encode(const struct manifest_entry *e, size_t n, uint8_t *out);
/* Reads the i-th entry of a packed list. */
void manifest_entry_at(const uint8_t *packed, size_t i, struct manifest_entry *e);

/* A root as stored: its length must be a multiple of the entry size, count 0..FANOUT. */
bool manifest_root_valid(const uint8_t *root, size_t len, unsigned depth);

/* Writes a segment's raw bytes (MANIFEST_SEGMENT_HEADER + n entries) into out. */
size_t manifest_segment_encode(unsigned level, const struct manifest_entry *e, size_t n,
                               uint8_t *out);
/* Checks a segment's raw bytes: 0 with its level and where its n entries start. */
int manifest_segment_parse(const uint8_t *raw, size_t len, unsigned *level, const uint8_t **entries,
                           size_t *n);

/*
 * Walks the chunks of a manifest in order. Segments are not read here: when
 * the next chunk lies in a segment the cursor does not hold, next() returns
 * MANIFEST_E_NEED with the segment's id, and the caller reads the segment
 * (checking it against that id) and hands its raw bytes to feed(). A cursor
 * holds one segment per level, so its memory is bounded by the depth.
 */
struct manifest_list {
    uint8_t *packed; /* owned copy of the entries */
    size_t n, pos;
    uint64_t bytes; /* the sum of its entries */
};

struct manifest_cursor {
    unsigned depth;
    /* levels[d]: the list the cursor is in at depth d (0 = the root). */
    struct manifest_list levels[MANIFEST_MAX_DEPTH + 1];
    unsigned top;    /* levels[0..top] are loaded */
    bool need;       /* next() asked for a segment */
    uint64_t offset; /* content offset of the next chunk */
};

/* Starts at the first chunk. -ENOMEM, MANIFEST_E_CORRUPT, or 0. */
int manifest_cursor_init(struct manifest_cursor *c, unsigned depth, const uint8_t *root,
                         size_t root_len);
void manifest_cursor_clear(struct manifest_cursor *c);
/*
 * The next chunk in *out (0), MANIFEST_E_END, or MANIFEST_E_NEED with the
 * id of the segment to feed in want. The cursor moves past the chunk.
 */
int manifest_cursor_next(struct manifest_cursor *c, struct manifest_entry *out,
                         uint8_t want[PROTO_HASH_LEN]);
/*
 * The chunk `ahead` places after the one next() returned last, when the
 * cursor holds it (it is in the leaf list being walked): true with *out.
 * For reading ahead; the cursor does not move.
 */
bool manifest_cursor_peek(const struct manifest_cursor *c, size_t ahead,
                          struct manifest_entry *out);
/*
 * Supplies the segment next() asked for (raw bytes, already checked against
 * its id): 0, MANIFEST_E_CORRUPT when its level or byte total does not fit
 * where it hangs in the tree, or -ENOMEM.
 */
int manifest_cursor_feed(struct manifest_cursor *c, const uint8_t *raw, size_t len);

/*
 * Builds a manifest while a document streams in, on the loop thread. The
 * owner pushes chunk entries in order at level 0. Before pushing onto a full
 * level (manifest_builder_full) it takes that list with take(), stores it as
 * a segment, and pushes the segment's entry one level up once it has its
 * id. Segments must be stored in the order they were taken, so that each
 * level keeps its order. A full list is only spilled when more follows, so
 * a document of exactly MANIFEST_FANOUT chunks still has an inline root.
 */
struct manifest_builder {
    struct manifest_entry *levels[MANIFEST_MAX_DEPTH + 1];
    size_t n[MANIFEST_MAX_DEPTH + 1];
    unsigned high; /* the highest level that ever received an entry */
    uint64_t chunks;
};

void manifest_builder_init(struct manifest_builder *b);
void manifest_builder_clear(struct manifest_builder *b);
static inline bool manifest_builder_full(const struct manifest_builder *b, unsigned level)
{
    return b->n[level] == MANIFEST_FANOUT;
}
/* Appends an entry: 0, -ENOMEM, or -E2BIG when the level is full or past the top. */
int manifest_builder_push(struct manifest_builder *b, unsigned level,
                          const struct manifest_entry *e);
/* Moves a level's list out (malloc'd, *n entries; NULL when empty) and empties it. */
struct manifest_entry *manifest_builder_take(struct manifest_builder *b, unsigned level, size_t *n);
/*
 * When the document has ended and nothing is being stored: true when the
 * lists form a root (every level below the highest is empty), with its
 * depth. Otherwise *spill is the lowest non-empty level to take and store
 * next.
 */
bool manifest_builder_done(const struct manifest_builder *b, unsigned *depth, unsigned *spill);
