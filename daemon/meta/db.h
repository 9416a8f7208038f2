#pragma once

/*
 * The metadata database (SQLite in WAL mode): documents with their manifest
 * roots, the name history, tags, key=value metadata, and where every record
 * lives: the packs, and the chunk, manifest segment and journal rows that
 * point into them. The full-text index lives in a database of its own
 * (daemon/search) that searches attach to the connections they run on.
 *
 * The packs are the log this database is recovered from: every change it
 * holds is first made durable in a pack (a journal entry, a record), so
 * commits are not synced here (synchronous=NORMAL); after a crash, what the
 * database lacks is replayed from the packs (replay.c). A change that must
 * survive on its own (a repack moving records before the old pack is
 * deleted) asks for a durable commit.
 *
 * Threading: every function here except db_new/db_free/db_write blocks and
 * runs on worker threads only. Reads take a connection from a pool; writes
 * are queued with db_write() on the loop thread and group-committed: one
 * writer job applies every queued change in one transaction (each change in
 * its own savepoint, so one failing change does not fail the others) and
 * calls each change's completion back on the loop thread.
 *
 * A row that names a record means the record is durable: rows are written
 * only after the backend acknowledged the append or put.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "proto/proto.h"
#include "storage/pack/pack.h"

struct db;
struct db_txn;

/* Expected outcomes (positive). */
enum {
    DB_E_NOT_FOUND = 1,
    DB_E_AMBIGUOUS,
    DB_E_INVALID_QUERY,
    DB_E_OLD_FORMAT, /* db_new: a database of format 1; upgrade.c converts it */
    DB_E_FORMAT2,    /* db_new: a database of format 2; it is made anew from the packs */
};

/* 4: names keep the mode and mtime of the file they were added from (3 is brought up to it). */
#define DB_FORMAT 4
#define DB_FORMAT_STR "4"

/*
 * The file a name version was added from (`cairn add -r`): its st_mode,
 * type bits included (regular file, directory or symbolic link; 0: none
 * recorded), and its mtime in nanoseconds since the epoch.
 */
struct db_fattr {
    uint32_t mode;
    int64_t mtime;
};

struct db_doc {
    int64_t rowid;
    char hash[PROTO_HASH_HEX + 1];
    char *name;            /* the name it was found by, else its newest name; NULL if none */
    bool by_name;          /* db_resolve: the ref was a name */
    int64_t named;         /* db_list_names: when the name got this version (Unix seconds) */
    struct db_fattr fattr; /* db_list_names, db_resolve of NAME or NAME@{N}: that version's file */
    uint64_t size, stored_size, nchunks;
    int64_t created;
    char mime[PROTO_MAX_MIME + 1];
    bool text; /* its content is indexed for search */
    unsigned depth;
    uint8_t *root; /* with DB_WANT_MANIFEST: the packed manifest root (manifest.h) */
    size_t root_len;
    char **tags; /* with DB_WANT_TAGS */
    size_t ntags;
    char **names; /* with DB_WANT_DETAILS: every name, oldest first */
    size_t nnames;
    char **meta_keys, **meta_values; /* with DB_WANT_DETAILS */
    size_t nmeta;
};

enum {
    DB_WANT_MANIFEST = 1u << 0,
    DB_WANT_TAGS = 1u << 1,
    DB_WANT_DETAILS = 1u << 2, /* names and metadata (implies tags) */
};

void db_doc_clear(struct db_doc *doc);
void db_docs_free(struct db_doc *docs, size_t n);

struct db_totals {
    uint64_t documents, logical_bytes;           /* logical: the sum of document sizes */
    uint64_t chunks, unique_bytes, stored_bytes; /* unique: raw bytes of distinct chunks */
    uint64_t packs, pack_bytes;
};

/* A document being added, as db_txn_add() records it. */
struct db_add {
    uint8_t hash[PROTO_HASH_LEN];
    uint64_t size, nchunks, stored;
    const char *mime;
    const char *name;      /* NULL or "" for none */
    struct db_fattr fattr; /* the name version's file; none without a name */
    const char *const *tags;
    size_t ntags;
    const char *const *meta_keys, *const *meta_values;
    size_t nmeta;
    unsigned depth;
    const uint8_t *root;
    size_t root_len;
    bool text;          /* index the content */
    int64_t created_at; /* Unix seconds: the journal entry's time */
    /* The journal entry's time (ns) and id: where its name version stands among others. */
    uint64_t event_ns;
    uint8_t event_id[PROTO_HASH_LEN];
    /* Outputs. */
    bool created;
    bool index_changed; /* what the index holds of it changed: it needs (re)indexing */
    uint64_t stored_size;
    int64_t rowid;
    /* The document's mime type: `mime` when created, else the one it was first stored with. */
    char stored_mime[PROTO_MAX_MIME + 1];
};

/* A queued change: `apply` runs on the writer thread, `done` on the loop. */
struct db_write {
    int (*apply)(struct db_txn *txn, struct db_write *w);
    void (*done)(struct db_write *w);
    bool durable; /* the commit must be on stable storage before done() */
    int status;   /* apply's result, or the commit's failure */
    struct db_write *next_;
};

/* 0, DB_E_OLD_FORMAT or DB_E_FORMAT2 (nothing changed), or negative errno. */
int db_new(struct db **out, uv_loop_t *loop, const char *path);
/*
 * Opens the database at `path` for reading only (cairnd --read-only), the
 * writer's connection too: nothing is written to it or beside it. It must
 * be of this format: 1 when it is of an older one (it is converted by a
 * start that may write), DB_E_OLD_FORMAT or DB_E_FORMAT2 as db_new,
 * -ENOENT when there is none, -EUCLEAN when its last commits are in a -wal
 * file that a read-only file system keeps it from reading (a start that
 * may write folds them in), or another negative errno. With no other
 * process writing it - cairnd.lock sees to that - a database on a
 * read-only file system is read as immutable. db_write on it fails.
 */
int db_open_read_only(struct db **out, uv_loop_t *loop, const char *path);
bool db_read_only(const struct db *db);
struct db *db_free(struct db *db);
const char *db_path(const struct db *db);

/*
 * Makes every commit so far durable, from any worker thread and without the
 * writer: commits are not synced (synchronous=NORMAL), but their pages are
 * in the write-ahead log when they return, and syncing that file is what a
 * synced commit would have done.
 */
int db_sync_log(struct db *db);

/* Queues a change; `done` is always called (on the loop thread). */
void db_write(struct db *db, struct db_write *w);
/* True while changes are queued or being committed. */
bool db_busy(struct db *db);

/* Inside `apply`: a nested savepoint, ended (and rolled back on `rollback`) by the second call. */
int db_txn_savepoint(struct db_txn *txn);
int db_txn_savepoint_end(struct db_txn *txn, bool rollback);

/* ---- documents (db-docs.c) ---- */

/* Records an add; merges names, tags and metadata into an existing document. */
int db_txn_add(struct db_txn *txn, struct db_add *add);
/*
 * Deletes the document with this hash (hex), leaving its manifest for the
 * index to drop its entry. DB_E_NOT_FOUND when it is not there.
 */
int db_txn_delete(struct db_txn *txn, const char *hash_hex);

/* A change of a document's tags and metadata (objects.h's edit entry). */
struct db_edit {
    const char *const *tags, *const *untags; /* added, removed */
    size_t ntags, nuntags;
    const char *const *meta_keys, *const *meta_values, *const *unmeta; /* set, removed */
    size_t nmeta, nunmeta;
    /* Outputs: the document's row id, and whether anything changed (it needs reindexing). */
    int64_t rowid;
    bool changed;
};

/* Applies an edit to the document with this hash (hex): DB_E_NOT_FOUND when it is not there. */
int db_txn_edit(struct db_txn *txn, const char *hash_hex, struct db_edit *ed);

/* Resolves a ref (PROTOCOL.md "References"); doc->by_name says whether it was a name. */
int db_resolve(struct db *db, const char *ref, size_t ref_len, unsigned want, struct db_doc *doc);
/* The document with this row id; DB_E_NOT_FOUND when it is gone. */
int db_load(struct db *db, int64_t rowid, unsigned want, struct db_doc *doc);
/*
 * Whether the newest version of `name` is the document with row id `doc`,
 * from the file `fa` (any, when its mode is 0): an add of it as `name` would
 * make no new version.
 */
int db_name_current(struct db *db, const char *name, int64_t doc, const struct db_fattr *fa,
                    bool *current);
/* Documents ordered by hash, after `after` (may be NULL), with `tag` (may be NULL). */
int db_list(struct db *db, const char *tag, const char *after, size_t limit, struct db_doc **docs,
            size_t *ndocs);
/*
 * The store's totals. The chunk counts leave out the rows gc runs up to
 * dead_gen condemned (what no document uses, found dead); 0 counts them all.
 */
int db_totals(struct db *db, uint64_t dead_gen, struct db_totals *t);

/* ---- names as paths (db-names.c) ---- */

struct db_name_doc {
    char hash[PROTO_HASH_HEX + 1];
    bool orphan; /* no other name points to it */
};

/*
 * The documents `name` points to (in any version), its newest first:
 * DB_E_NOT_FOUND when it names none. A snapshot for a prediction: the
 * transaction decides (db_txn_delete_if_unnamed).
 */
int db_name_docs(struct db *db, const char *name, struct db_name_doc **docs, size_t *n);

/* One version of a name (NAME@{version}: 0 is the newest). */
struct db_version {
    char hash[PROTO_HASH_HEX + 1];
    uint64_t size, version;
    int64_t named; /* Unix seconds: when the name got this version */
    struct db_fattr fattr;
};

/*
 * The versions of `name`, newest first, from `offset` on, at most `limit`
 * (malloc'd, *n of them), and how many it has in all: DB_E_NOT_FOUND when
 * none.
 */
int db_name_versions(struct db *db, const char *name, uint64_t offset, uint64_t limit,
                     struct db_version **out, size_t *n, uint64_t *total);
/* Takes every version of `name` off one document; *rowid is its row id when there was one, else 0.
 */
int db_txn_unname(struct db_txn *txn, const char *name, const char *hash_hex, int64_t *rowid);
/* Deletes the document (db_txn_delete) if no name points to it; *deleted when it did. */
int db_txn_delete_if_unnamed(struct db_txn *txn, const char *hash_hex, bool *deleted);

struct db_names_query {
    const char *prefix; /* names that start with it; NULL: all */
    const char *after;  /* start after this name (or hash, with `unnamed`); NULL: the start */
    const char *tag;    /* NULL: any */
    size_t limit;
    bool path;    /* the prefix is a path: the name itself and those under it (prefix/) */
    bool unnamed; /* instead: the documents no name points to, in hash order */
};

/*
 * Each name's newest version in name order (bytewise), as documents whose
 * `name` is that name and `named` its time; or the documents without a name.
 */
int db_list_names(struct db *db, const struct db_names_query *q, struct db_doc **docs, size_t *n);

/* What the names under a prefix hold (PROTOCOL.md `du`). */
struct db_du {
    uint64_t names, logical_bytes;                  /* each name's newest version */
    uint64_t documents, unique_bytes, stored_bytes; /* the distinct documents they point to */
};
int db_du(struct db *db, const char *prefix, bool path, struct db_du *du);

/* ---- writers and the numbers of their packs (db-writers.c) ---- */

/*
 * A pack's number in the database: the local index of its writer above the
 * pack's seq (pack.h). Writer 0 has index 0; the others get 1, 2, 3... in
 * the order this database first meets them, so a number means nothing
 * outside this database: the backend knows a pack by its key.
 */
#define DB_PACK_NUMBER(widx, seq) (((uint64_t)(widx) << 48) | (seq))
#define DB_PACK_WIDX(pack) ((unsigned)((pack) >> 48))
#define DB_PACK_SEQ(pack) ((pack)&PACK_SEQ_MAX)
#define DB_MAX_WRITERS 65535u

/* The backend key of pack number `pack` (any thread): 0, or -ENOENT for an unknown writer. */
int db_pack_key(struct db *db, uint64_t pack, char *key, size_t len);
/* The id of writer index widx (any thread): 0, or -ENOENT. */
int db_writer_id(struct db *db, unsigned widx, uint64_t *id);
/* The index of writer `id` if the database knows it (any thread): 0, or -ENOENT. */
int db_writer_index(struct db *db, uint64_t id, unsigned *widx);
/* Inside apply: the index of writer `id`, which becomes known now when new (-ENOSPC: too many). */
int db_txn_writer(struct db_txn *txn, uint64_t id, unsigned *widx);

/* ---- packs and records (db-store.c) ---- */

enum db_pack_state {
    DB_PACK_OPEN = 0,     /* being appended to */
    DB_PACK_SEALED = 1,   /* complete with its index; never changes */
    DB_PACK_DELETING = 2, /* repacked: its object goes once no reader needs it */
    /*
     * Marked by its writer's gc (db-marks.c): its live records are copied
     * elsewhere, and it goes once every writer has let go of it. Its rows
     * still read, but dedup never picks them.
     */
    DB_PACK_MARKED = 3,
};

struct db_pack {
    uint64_t seq, size; /* size: how far its records are in the database */
    enum db_pack_state state;
};

/* Where a record is; for a chunk, where in its block too. */
struct db_loc {
    uint64_t pack, off;
    uint32_t len;    /* the whole record, header included */
    uint32_t sub;    /* chunks: offset in the block's raw bytes */
    uint32_t size;   /* raw size of the chunk (or segment) */
    uint32_t stored; /* the chunk's share of the record's bytes */
};

/* A chunk's location; condemned ones too (they are still readable). */
int db_chunk_find(struct db *db, const uint8_t hash[PROTO_HASH_LEN], struct db_loc *loc);
/* For dedup: 0 and its stored share when stored and not condemned, else DB_E_NOT_FOUND. */
int db_chunk_lookup(struct db *db, const uint8_t hash[PROTO_HASH_LEN], uint32_t *stored);
int db_segment_find(struct db *db, const uint8_t hash[PROTO_HASH_LEN], struct db_loc *loc);

/*
 * A new copy of a chunk (segment) is durable at loc: it becomes the row's
 * location if the row is new or condemned, a marked pack's rows included (and
 * is then live again); a live row keeps its location and the new copy is
 * dead weight for gc.
 */
int db_txn_chunk_put(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                     const struct db_loc *loc);
/*
 * The same for a rebuild, where what verify found is not known: of several
 * copies of a chunk, the one found last (packs are read oldest first) wins.
 * A chunk is stored again only when its copy could not serve: found
 * damaged and healed, or condemned by gc (whose pack then goes); two
 * writers of a shared bucket that both stored it made two good copies.
 */
int db_txn_chunk_put_latest(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                            const struct db_loc *loc);
/*
 * The copy of a chunk at loc is damaged (verify): until a new copy is put,
 * a lookup finds the chunk not stored, and db_txn_chunk_put of a new copy
 * moves the row to it. _prune forgets copies no row points at any more.
 */
int db_txn_chunk_bad(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                     const struct db_loc *loc);
int db_txn_chunk_bad_prune(struct db_txn *txn);
/* Whether the chunk's row points at a copy known damaged (an add with heal rewrites it). */
int db_chunk_damaged(struct db *db, const uint8_t hash[PROTO_HASH_LEN], bool *damaged);
/* Whether any chunk's row points at a copy known damaged (nothing to heal when not). */
int db_chunks_bad_any(struct db *db, bool *any);
int db_txn_segment_put(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN],
                       const struct db_loc *loc);
/*
 * A journal entry is durable at loc (an entry already known keeps its row,
 * unless that is in a marked pack: then it moves to loc).
 * `op` is the entry's enum entry_op (objects.h). `applied`: its event is applied in the same
 * transaction; replay records the entries it finds unapplied and applies them in time order after.
 */
int db_txn_journal_put(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN],
                       const struct db_loc *loc, const uint8_t doc[PROTO_HASH_LEN],
                       uint64_t time_ns, int op, bool applied);
/* Journal entries whose events replay has yet to apply, oldest first. */
struct db_pending_entry {
    uint8_t id[PROTO_HASH_LEN];
    struct db_loc loc;
};
int db_pending_entries(struct db *db, size_t max, struct db_pending_entry **out, size_t *n);
/* The event is applied (or, with `drop`, refused: its row goes, its record is dead). */
int db_txn_journal_applied(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN], bool drop);
/*
 * Whether an applied journal entry of document `doc` comes after the entry
 * (time_ns, op, id) in the journal's order (time, then unnames, deletes and
 * adds, then id): that entry arrives late, and the document's state is
 * worked out again from all its entries.
 */
int db_journal_later(struct db *db, const uint8_t doc[PROTO_HASH_LEN], uint64_t time_ns, int op,
                     const uint8_t id[PROTO_HASH_LEN], bool *later);
/* The applied journal entries of a document, in the journal's order (malloc'd). */
int db_journal_of_doc(struct db *db, const uint8_t doc[PROTO_HASH_LEN],
                      struct db_pending_entry **out, size_t *n);
/* Whether a void entry cancels the entry `id` (objects.h). */
int db_txn_journal_voided(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN], bool *voided);
/* The journal row of entry `id`: where it is and whether it was applied; DB_E_NOT_FOUND. */
int db_journal_row(struct db *db, const uint8_t id[PROTO_HASH_LEN], struct db_pending_entry *row,
                   bool *applied);
/* The time of the newest journal entry (0 when none): new entries come after it. */
int db_journal_newest(struct db *db, uint64_t *time_ns);
/* Creates or updates a pack's row. */
int db_txn_pack_set(struct db_txn *txn, uint64_t seq, uint64_t size, enum db_pack_state state);
/* Drops a pack's row; its number is remembered (db_pack_high) and never given out again. */
int db_txn_pack_drop(struct db_txn *txn, uint64_t seq);
/* Remembers that pack number seq was used (as db_txn_pack_drop does). */
int db_txn_pack_high(struct db_txn *txn, uint64_t seq);
/*
 * The highest pack number of writer index widx whose row was dropped (0 when
 * none): a new pack of that writer is numbered above it, so a number, and the
 * read-cache slices kept under it, never stands for another pack.
 */
int db_pack_high(struct db *db, unsigned widx, uint64_t *seq);
/* Every pack the database knows, by sequence number. */
int db_packs(struct db *db, struct db_pack **packs, size_t *n);
/* How far a pack's records go (its row's size): 0, DB_E_NOT_FOUND or -EIO. Any thread. */
int db_pack_size(struct db *db, uint64_t seq, uint64_t *size);

/* ---- gc (db-gc.c) ---- */

/* A persistent counter of gc runs (condemnations carry the run's number). */
int db_txn_gc_generation(struct db_txn *txn, uint64_t *gen);
int db_gc_generation(struct db *db, uint64_t *gen);

/*
 * Calls fn for every document's manifest (its row id, depth and root) and
 * every pending index removal's (row id -1), in one snapshot.
 */
typedef int db_manifest_fn(void *ctx, int64_t rowid, unsigned depth, const uint8_t *root,
                           size_t root_len);
int db_each_manifest(struct db *db, db_manifest_fn *fn, void *ctx);

/*
 * One page of gc's sweep over the chunks (or segments) table, in hash order
 * after *cursor: rows `live` says are dead and not yet condemned get
 * condemned = gen (unless gen is 0: revive only); condemned rows that are
 * live again are revived. *done when the table is finished; counts are
 * added to.
 */
enum db_record_table { DB_TABLE_CHUNKS, DB_TABLE_SEGMENTS };
typedef bool db_live_fn(void *ctx, const uint8_t hash[PROTO_HASH_LEN]);
int db_txn_condemn_page(struct db_txn *txn, enum db_record_table table,
                        uint8_t cursor[PROTO_HASH_LEN], size_t page, db_live_fn *live, void *ctx,
                        uint64_t gen, uint64_t *condemned, uint64_t *revived, bool *done);

/* Per pack: what its records hold alive, with rows condemned up to `safe_gen` counted as dead. */
struct db_pack_use {
    /*
     * live: bytes of the records gc keeps, live_rows: how many rows that is;
     * rows: how many rows point into the pack at all.
     */
    uint64_t seq, size, live, live_rows, rows;
    enum db_pack_state state;
};
int db_pack_usage(struct db *db, uint64_t safe_gen, struct db_pack_use **out, size_t *n);
/*
 * How many chunk rows runs after `after` and up to `upto` condemned: what
 * db_totals stops counting once gc's condemnations up to `upto` are safe.
 */
int db_chunks_condemned(struct db *db, uint64_t after, uint64_t upto, uint64_t *n);

/* A record of a pack and whether gc keeps it. */
enum db_row_kind { DB_ROW_CHUNK, DB_ROW_SEGMENT, DB_ROW_ENTRY };
struct db_pack_row {
    enum db_row_kind kind;
    uint8_t hash[PROTO_HASH_LEN];
    struct db_loc loc;
    bool live;
    uint64_t condemned; /* chunks and segments */
};
/* Every row that points into pack `seq` (chunks, segments, journal entries), by offset. */
int db_pack_rows(struct db *db, uint64_t seq, uint64_t safe_gen, struct db_pack_row **rows,
                 size_t *n);
/* A record moved: the row follows if it still points where it was. */
int db_txn_row_move(struct db_txn *txn, const struct db_pack_row *row, const struct db_loc *to);
/* A dead record is dropped: its row goes if it still points there (and is still condemned). */
int db_txn_row_drop(struct db_txn *txn, const struct db_pack_row *row);
/* How many rows still point into pack `seq` (a repack must leave none). */
int db_txn_pack_rows_left(struct db_txn *txn, uint64_t seq, uint64_t *n);

/* ---- the shared bucket's gc marks (db-marks.c) ---- */

/*
 * A chunk or segment row of a marked pack carries this as its condemnation:
 * dedup never picks it, a sweep never revives it, and a copy put anywhere
 * becomes its location (db_txn_chunk_put); a journal entry of a marked pack
 * likewise follows a copy of it.
 */
#define DB_CONDEMNED_MARKED INT64_MAX

enum db_mark_state {
    /* This daemon's own runs. */
    DB_MARK_OWN_COPIED = 1,    /* the packs are marked here; the mark is not in the bucket yet */
    DB_MARK_OWN_PUBLISHED = 2, /* in the bucket: waiting for the other writers */
    DB_MARK_OWN_FINISHED = 3,  /* the packs are emptied and go; the done object is not in yet */
    DB_MARK_OWN_DONE = 4,      /* the done object is in the bucket */
    /* Another writer's. */
    DB_MARK_SEEN = 11,  /* its packs are marked here; acknowledged once `barrier` has passed */
    DB_MARK_ACKED = 12, /* this daemon's acknowledgement is in the bucket */
    DB_MARK_GONE = 13,  /* its packs are deleted and forgotten here */
};

struct db_mark {
    uint64_t writer, gen;
    enum db_mark_state state;
    uint64_t barrier; /* SEEN: the first operation that started after the packs were marked */
    char *body;       /* the mark's body (gcmark.h), malloc'd */
    size_t body_len;
    char *done; /* its done object's body, once it has one ("" before), malloc'd */
    size_t done_len;
    uint64_t copied; /* own runs: bytes of live records copied out of its packs */
};
/* Creates or updates a mark's row. */
int db_txn_mark_set(struct db_txn *txn, const struct db_mark *m);
/* Every mark the database knows, by writer and run (malloc'd; db_marks_free). */
int db_marks(struct db *db, struct db_mark **out, size_t *n);
void db_marks_free(struct db_mark *m, size_t n);
/*
 * Pack `pack` is marked: its state becomes DB_PACK_MARKED and its chunk and
 * segment rows DB_CONDEMNED_MARKED. A pack the database does not know is
 * left alone (*known false).
 */
int db_txn_pack_mark(struct db_txn *txn, uint64_t pack, bool *known);
/* A known journal entry's copy is at loc: its row moves there if it is in a marked pack. */
int db_txn_journal_relocate(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN],
                            const struct db_loc *loc);
/*
 * Pack `pack` is gone for good: every row still pointing into it goes, and
 * its own row; *rows says how many rows went.
 */
int db_txn_pack_forget(struct db_txn *txn, uint64_t pack, uint64_t *rows);

/* ---- the search index's queue (db-docs.c) ---- */

/* What the indexer needs of a document to (re)index it. */
struct db_index_doc {
    int64_t rowid;
    uint64_t gen;
    char hash[PROTO_HASH_HEX + 1];
    char *names, *tags, *meta; /* the indexed fields: one per line */
    bool text;
    unsigned depth;
    uint8_t *root;
    size_t root_len;
};
void db_index_doc_clear(struct db_index_doc *d);
/* Loads a document for indexing; DB_E_NOT_FOUND when it is gone. */
int db_index_doc_load(struct db *db, int64_t rowid, struct db_index_doc *d);
struct db_removal {
    int64_t rowid;
    unsigned depth;
    uint8_t *root;
    size_t root_len;
};
/* Pending removals from the index, oldest first, at most `max`. */
int db_removals(struct db *db, size_t max, struct db_removal **out, size_t *n);
void db_removals_free(struct db_removal *r, size_t n);
int db_txn_removal_done(struct db_txn *txn, int64_t rowid);

/*
 * Every name of document `rowid`, oldest first (a search hit's snippet when
 * its text has no match, and the name that matched): malloc'd strings in a
 * malloc'd array, freed with db_names_free.
 */
int db_doc_names(struct db *db, int64_t rowid, char ***names, size_t *n);
void db_names_free(char **names, size_t n);

/* ---- queries of other parts (the search index's: daemon/search/fts.c) ---- */

struct db_conn;
struct sqlite3;
struct sqlite3_stmt;

/* A reader connection from the pool (worker threads); NULL when none can be opened. */
struct db_conn *db_reader_acquire(struct db *db);
void db_reader_release(struct db *db, struct db_conn *c);
/* Its SQLite handle, for running and explaining the statements below. */
struct sqlite3 *db_conn_sqlite(struct db_conn *c);
/*
 * The statement `sql` prepared on this connection, reset and unbound. It is
 * kept there by its text, so a query shape in use is prepared once (the last
 * DB_CONN_PREPARED shapes stay). NULL (logged) on failure.
 */
struct sqlite3_stmt *db_conn_prepare(struct db_conn *c, const char *sql);
/* Attaches the database at `path` read-only as `schema` to this connection, once. */
int db_conn_attach(struct db_conn *c, const char *schema, const char *path);
/* A copy of a text column, "" for NULL; NULL only when out of memory. */
char *db_column_strdup(struct sqlite3_stmt *s, int col);
