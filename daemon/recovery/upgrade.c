/*
 * Upgrading a data directory of format 1 (one file per chunk under
 * objects/chunks/, one per journal entry under objects/entries/, reference
 * counts in cairn.db) to packs.
 *
 * The old database says what is alive: every chunk some document uses, and
 * every document with its names (in the order they were given), tags,
 * metadata and creation time. Those become pack records: each chunk object
 * is copied as it is into a block of its own (no recompression), each
 * document gets a journal entry for its creation (with its tags and
 * metadata) and one per name it was given, at the times the old database
 * recorded. A version of a name that follows one of the same name and
 * document (the version between them was of a document since deleted) gets
 * a stand-in for that deleted document around it (write_repeated_name), so
 * the names come back version for version. The new database is then rebuilt
 * from the packs by the store's ordinary replay, the same code that
 * recovers from a crash.
 *
 * Safe to cut at any point: until the old database is renamed to
 * cairn.db.v1-<time> the directory is still format 1, and a new attempt
 * starts over (removing the packs of the one before); after the rename the
 * packs hold everything and replay does the rest. The old objects are
 * removed last.
 */
#include "daemon/recovery/recovery.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/sha.h>
#include <sqlite3.h>

#include "compress/compress.h"
#include "daemon/base/crash.h"
#include "daemon/meta/db.h"
#include "daemon/base/log.h"
#include "daemon/format/manifest.h"
#include "daemon/format/objects.h"
#include "daemon/pack/packer.h"
#include "daemon/format/record.h"
#include "daemon/format/text.h"
#include "daemon/base/tty-progress.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* Progress goes to the log every this many chunks. */
#define UPGRADE_LOG_EVERY 10000
/* Format 1 manifest entries: hash, raw size, stored size (big-endian). */
#define V1_ENTRY 40

struct upgrade {
    uv_loop_t *loop;
    struct backend *be;
    char root[PATH_MAX]; /* the local backend's directory */
    sqlite3 *old;
    int level;
    uint64_t pack_size;
    size_t max_text;
    /* The pack being filled. */
    uint64_t seq;
    uint8_t *buf;
    size_t len, cap;
    struct pack_index_entry *index;
    size_t nindex, index_cap;
    uint64_t chunks, docs, events, packs;
    struct tty_progress progress;
};

/* A count from the old database (0 when it cannot say): the progress's total. */
static uint64_t old_count(struct upgrade *u, const char *sql)
{
    sqlite3_stmt *s;
    uint64_t n = 0;

    if (sqlite3_prepare_v2(u->old, sql, -1, &s, NULL) != SQLITE_OK)
        return 0;
    if (sqlite3_step(s) == SQLITE_ROW)
        n = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return n;
}

/* ---- writing whole packs ---- */

static void put_done(struct backend_req *req)
{
    *(bool *)req->userdata = true;
}

static int pack_flush(struct upgrade *u)
{
    struct backend_put put = {0};
    struct iovec iov[2];
    uint8_t *ibytes;
    size_t ilen;
    bool done = false;
    int r;

    if (u->nindex == 0)
        return 0;
    ilen = pack_index_size(u->nindex);
    if (!(ibytes = malloc(ilen)))
        return -ENOMEM;
    pack_index_encode(ibytes, u->index, u->nindex, u->len, u->seq);
    iov[0] = (struct iovec){u->buf, u->len};
    iov[1] = (struct iovec){ibytes, ilen};
    /* Packs of writer 0: a store of format 1 had one writer. */
    pack_key(put.req.key, sizeof(put.req.key), 0, u->seq);
    put.req.cb = put_done;
    put.req.userdata = &done;
    put.iov = iov;
    put.iovcnt = 2;
    put.flags = BACKEND_PUT_CREATE;
    r = backend_put(u->be, &put);
    if (r == 0) {
        while (!done)
            uv_run(u->loop, UV_RUN_ONCE);
        r = put.req.status;
    }
    free(ibytes);
    if (r != 0)
        return r < 0 ? r : -EIO;
    u->packs++;
    u->seq++;
    u->len = 0;
    u->nindex = 0;
    return 0;
}

/* Appends a record (its index entries get their offsets here). */
static int pack_add(struct upgrade *u, const uint8_t *rec, size_t len, struct pack_index_entry *idx,
                    size_t nidx)
{
    int r;

    if (u->len > PACK_HEADER_SIZE && u->len + len > u->pack_size && (r = pack_flush(u)) < 0)
        return r;
    if (u->len == 0) {
        if (u->cap < PACK_HEADER_SIZE + len) {
            size_t cap = u->pack_size + len + PACK_HEADER_SIZE;
            uint8_t *grown = realloc(u->buf, cap);
            if (!grown)
                return -ENOMEM;
            u->buf = grown;
            u->cap = cap;
        }
        pack_header_encode(u->buf, u->seq);
        u->len = PACK_HEADER_SIZE;
    }
    if (u->len + len > u->cap) {
        size_t cap = u->len + len;
        uint8_t *grown = realloc(u->buf, cap);
        if (!grown)
            return -ENOMEM;
        u->buf = grown;
        u->cap = cap;
    }
    for (size_t i = 0; i < nidx; i++) {
        if (u->nindex == u->index_cap) {
            size_t cap = u->index_cap ? u->index_cap * 2 : 1024;
            struct pack_index_entry *grown = realloc(u->index, cap * sizeof(*grown));
            if (!grown)
                return -ENOMEM;
            u->index = grown;
            u->index_cap = cap;
        }
        idx[i].record_off = u->len;
        idx[i].record_len = (uint32_t)len;
        u->index[u->nindex++] = idx[i];
    }
    memcpy(u->buf + u->len, rec, len);
    u->len += len;
    return 0;
}

/* ---- chunks: each old object becomes a block of one, as it is ---- */

static int read_file(const char *path, size_t max, uint8_t **out, size_t *len)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint8_t *buf;
    size_t got = 0;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0)
        return -errno;
    if ((uint64_t)st.st_size > max)
        return -EFBIG;
    if (!(buf = malloc(st.st_size ? (size_t)st.st_size : 1)))
        return -ENOMEM;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            free(buf);
            return n < 0 ? -errno : -EIO;
        }
        got += (size_t)n;
    }
    *out = buf;
    *len = got;
    return 0;
}

static int copy_chunk(struct upgrade *u, const uint8_t hash[PROTO_HASH_LEN])
{
    char hex[PROTO_HASH_HEX + 1], path[PATH_MAX + 128];
    struct compress_header hdr;
    struct pack_block_chunk c = {.sub_off = 0};
    struct pack_index_entry idx = {.type = PACK_IDX_CHUNK};
    uint8_t table[PACK_BLOCK_ENTRY + 4], id[PROTO_HASH_LEN], *obj, *rec;
    size_t len;
    int r;

    proto_hex_encode(hash, PROTO_HASH_LEN, hex);
    snprintf(path, sizeof(path), "%s/chunks/%.2s/%s", u->root, hex, hex);
    r = read_file(path, PACK_MAX_PAYLOAD - sizeof(table), &obj, &len);
    if (r < 0) {
        /* A document that used it is not carried over (replay refuses it and logs which). */
        log_warn("upgrade: chunk %s cannot be read: %s", hex, strerror(-r));
        return 0;
    }
    if (compress_header_parse(obj, len, &hdr) != 0 || hdr.raw_size == 0 ||
        hdr.raw_size > RECORD_BLOCK_MAX) {
        log_warn("upgrade: chunk %s is damaged; left out", hex);
        free(obj);
        return 0;
    }
    memcpy(c.id, hash, PROTO_HASH_LEN);
    c.size = (uint32_t)hdr.raw_size;
    pack_block_table_encode(table, &c, 1);
    SHA256(table, sizeof(table), id);
    if (!(rec = malloc(PACK_RECORD_HEADER + sizeof(table) + len))) {
        free(obj);
        return -ENOMEM;
    }
    memcpy(rec + PACK_RECORD_HEADER, table, sizeof(table));
    memcpy(rec + PACK_RECORD_HEADER + sizeof(table), obj, len);
    struct pack_part part = {rec + PACK_RECORD_HEADER, sizeof(table) + len};
    pack_record_header_encode(rec, PACK_REC_BLOCK, id, &part, 1);
    memcpy(idx.id, hash, PROTO_HASH_LEN);
    idx.raw_size = c.size;
    r = pack_add(u, rec, PACK_RECORD_HEADER + sizeof(table) + len, &idx, 1);
    free(rec);
    free(obj);
    if (r == 0 && ++u->chunks % UPGRADE_LOG_EVERY == 0)
        log_info("upgrade: %" PRIu64 " chunks copied into %" PRIu64 " packs", u->chunks,
                 u->packs + 1);
    return r;
}

static int copy_chunks(struct upgrade *u)
{
    uint64_t total = old_count(u, "SELECT count(*) FROM chunks WHERE refs > 0"), done = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    if (sqlite3_prepare_v2(u->old, "SELECT hash FROM chunks WHERE refs > 0 ORDER BY hash", -1, &s,
                           NULL) != SQLITE_OK)
        return -EIO;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_bytes(s, 0) == PROTO_HASH_LEN)
            r = copy_chunk(u, sqlite3_column_blob(s, 0));
        tty_progress_draw(&u->progress, "upgrade: copied", ++done, total, " chunks into packs");
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    sqlite3_finalize(s);
    return r;
}

/* ---- documents: manifests and journal entries ---- */

/* Stores the full lists of a manifest as segments; leaves the root in *root. */
static int build_manifest(struct upgrade *u, const uint8_t *blob, size_t n, bool write,
                          unsigned *depth, uint8_t **root, size_t *root_len)
{
    struct manifest_entry *level = calloc(n ? n : 1, sizeof(*level));
    size_t count = n;
    int r = 0;

    if (!level)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        memcpy(level[i].hash, blob + i * V1_ENTRY, PROTO_HASH_LEN);
        level[i].bytes = proto_be32_read(blob + i * V1_ENTRY + PROTO_HASH_LEN);
    }
    *depth = 0;
    /* Level by level: a list too long for a root becomes segments one level up. */
    while (r == 0 && count > MANIFEST_FANOUT) {
        size_t up = 0;
        uint8_t raw[MANIFEST_MAX_SEGMENT];
        for (size_t i = 0; r == 0 && i < count; i += MANIFEST_FANOUT) {
            size_t k = count - i < MANIFEST_FANOUT ? count - i : MANIFEST_FANOUT;
            size_t len = manifest_segment_encode(*depth, level + i, k, raw);
            struct manifest_entry e = {.bytes = 0};
            for (size_t j = 0; j < k; j++)
                e.bytes += level[i + j].bytes;
            if (write) {
                struct pack_index_entry *idx;
                uint8_t *rec;
                size_t rec_len;
                r = record_seal_build(PACK_REC_MANIFEST, raw, len, u->level, &rec, &rec_len, e.hash,
                                      &idx);
                if (r == 0) {
                    r = pack_add(u, rec, rec_len, idx, 1);
                    free(rec);
                    free(idx);
                }
            } else {
                SHA256(raw, len, e.hash);
            }
            level[up++] = e;
        }
        count = up;
        (*depth)++;
    }
    if (r == 0 && (*root_len = count * MANIFEST_ENTRY, *root = malloc(*root_len ? *root_len : 1)))
        manifest_entries_encode(level, count, *root);
    else if (r == 0)
        r = -ENOMEM;
    free(level);
    return r;
}

/*
 * Whether a document is text as the search index takes it (its first
 * max_text bytes are UTF-8 without NUL), read back from its old chunks.
 */
static bool is_text(struct upgrade *u, const uint8_t *blob, uint64_t n)
{
    struct text_acc acc;
    bool text;
    size_t len;

    text_acc_init(&acc, u->max_text);
    for (uint64_t i = 0; i < n && acc.ok && acc.len < acc.max; i++) {
        char hex[PROTO_HASH_HEX + 1], path[PATH_MAX + 128];
        uint32_t size = proto_be32_read(blob + i * V1_ENTRY + PROTO_HASH_LEN);
        uint8_t *obj, *raw;
        size_t obj_len, raw_len;
        proto_hex_encode(blob + i * V1_ENTRY, PROTO_HASH_LEN, hex);
        snprintf(path, sizeof(path), "%s/chunks/%.2s/%s", u->root, hex, hex);
        if (size > RECORD_BLOCK_MAX || read_file(path, PACK_MAX_PAYLOAD, &obj, &obj_len) < 0)
            return false; /* the document cannot come back anyway */
        raw = malloc(size ? size : 1);
        int r = raw ? compress_decode(obj, obj_len, RECORD_BLOCK_MAX, raw, size, &raw_len) : -1;
        free(obj);
        if (r != 0 || raw_len != size) {
            free(raw);
            text_acc_clear(&acc);
            return false;
        }
        text_acc_feed(&acc, raw, raw_len, i + 1 == n);
        free(raw);
    }
    if (acc.ok && acc.len >= acc.max)
        text_acc_feed(&acc, NULL, 0, true);
    if (n == 0)
        text_acc_feed(&acc, NULL, 0, true);
    text = text_acc_text(&acc, &len) != NULL;
    text_acc_clear(&acc);
    return text;
}

static char **column_strings(sqlite3 *db, const char *sql, int64_t doc, int col, size_t *n)
{
    sqlite3_stmt *s;
    char **v = NULL;

    *n = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_int64(s, 1, doc);
    while (sqlite3_step(s) == SQLITE_ROW) {
        char **grown = realloc(v, (*n + 2) * sizeof(char *));
        if (!grown)
            break;
        v = grown;
        v[*n] = strdup((const char *)sqlite3_column_text(s, col));
        v[++*n] = NULL;
    }
    sqlite3_finalize(s);
    return v;
}

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* A journal entry as a record of the pack being filled. */
static int write_entry(struct upgrade *u, const struct entry *e)
{
    struct pack_index_entry *idx;
    uint8_t *raw, *rec;
    size_t raw_len, rec_len;
    uint8_t id[PROTO_HASH_LEN];
    int r = objects_entry_encode(e, &raw, &raw_len);

    if (r < 0)
        return r;
    r = record_seal_build(PACK_REC_ENTRY, raw, raw_len, u->level, &rec, &rec_len, id, &idx);
    free(raw);
    if (r == 0) {
        r = pack_add(u, rec, rec_len, idx, 1);
        free(rec);
        free(idx);
    }
    if (r == 0)
        u->events++;
    return r;
}

/*
 * One event of the old history: a document's creation (name NULL, with its
 * tags and metadata) or a name given to it, as a journal entry.
 */
static int write_event(struct upgrade *u, int64_t doc, const char *name, uint64_t time_ns,
                       bool creation)
{
    sqlite3_stmt *s;
    struct entry e = {.time_ns = time_ns};
    int r = -EIO;

    if (sqlite3_prepare_v2(u->old,
                           "SELECT hash, size, stored_size, chunks, mime, manifest FROM documents"
                           " WHERE id = ?1",
                           -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    sqlite3_bind_int64(s, 1, doc);
    if (sqlite3_step(s) != SQLITE_ROW)
        goto out;
    if (proto_hex_decode((const char *)sqlite3_column_text(s, 0),
                         (size_t)sqlite3_column_bytes(s, 0), e.doc, PROTO_HASH_LEN) < 0)
        goto out;
    e.size = (uint64_t)sqlite3_column_int64(s, 1);
    e.stored = (uint64_t)sqlite3_column_int64(s, 2);
    e.nchunks = (uint64_t)sqlite3_column_int64(s, 3);
    e.mime = (char *)sqlite3_column_text(s, 4);
    size_t blob_len = (size_t)sqlite3_column_bytes(s, 5);
    if (blob_len != e.nchunks * V1_ENTRY)
        goto out;
    r = build_manifest(u, sqlite3_column_blob(s, 5), e.nchunks, creation, &e.depth, &e.root,
                       &e.root_len);
    if (r < 0)
        goto out;
    e.text = is_text(u, sqlite3_column_blob(s, 5), e.nchunks);
    e.name = (char *)name;
    if (creation) {
        e.tags = column_strings(u->old, "SELECT tag FROM tags WHERE doc = ?1 ORDER BY tag", doc, 0,
                                &e.ntags);
        e.meta_keys = column_strings(u->old, "SELECT key FROM meta WHERE doc = ?1 ORDER BY key",
                                     doc, 0, &e.nmeta);
        size_t nv;
        e.meta_values = column_strings(u->old, "SELECT value FROM meta WHERE doc = ?1 ORDER BY key",
                                       doc, 0, &nv);
        if (nv != e.nmeta) {
            r = -EIO;
            goto out;
        }
    }
    r = write_entry(u, &e);
out:
    free(e.root);
    free_strings(e.tags, e.ntags);
    free_strings(e.meta_keys, e.nmeta);
    free_strings(e.meta_values, e.nmeta);
    sqlite3_finalize(s);
    return r;
}

/*
 * A stand-in for a document format 1 deleted, whose version of a name lay
 * between two versions of that name pointing at one document (P1, P2, P1
 * with P2 deleted). Its hash is no document's: derived from the name
 * version it stands for, and checked against the old database (what exists
 * while the history is replayed comes from there).
 */
static int placeholder_hash(struct upgrade *u, const char *name, int64_t seq,
                            uint8_t out[PROTO_HASH_LEN])
{
    static const char tag[] = "cairn upgrade: a version of a name whose document was deleted";
    size_t len = sizeof(tag) + strlen(name) + 48;
    char *text = malloc(len);
    sqlite3_stmt *s;
    int r = DB_E_NOT_FOUND;

    if (!text)
        return -ENOMEM;
    if (sqlite3_prepare_v2(u->old, "SELECT 1 FROM documents WHERE hash = ?1", -1, &s, NULL) !=
        SQLITE_OK) {
        free(text);
        return -EIO;
    }
    for (unsigned attempt = 0; r == DB_E_NOT_FOUND; attempt++) {
        char hex[PROTO_HASH_HEX + 1];
        int n = snprintf(text, len, "%s\n%s\n%" PRId64 "\n%u", tag, name, seq, attempt);
        SHA256((const unsigned char *)text, (size_t)n, out);
        proto_hex_encode(out, PROTO_HASH_LEN, hex);
        sqlite3_reset(s);
        sqlite3_bind_text(s, 1, hex, PROTO_HASH_HEX, SQLITE_TRANSIENT);
        int rc = sqlite3_step(s);
        r = rc == SQLITE_DONE ? 0 : rc == SQLITE_ROW ? DB_E_NOT_FOUND : -EIO;
    }
    sqlite3_finalize(s);
    free(text);
    return r;
}

/* The nanosecond of the next event at second t: each second's events a nanosecond apart. */
struct history_clock {
    int64_t second;
    uint64_t within;
};

static int next_time(struct history_clock *c, int64_t t, uint64_t *time_ns)
{
    c->within = t == c->second ? c->within + 1 : 0;
    c->second = t;
    if (t < 0 || c->within >= 1000000000u)
        return -ERANGE;
    *time_ns = (uint64_t)t * 1000000000u + c->within;
    return 0;
}

/*
 * Replay gives a name a new version only when it does not point at the
 * document already (as every add does), so a version whose name's previous
 * surviving version is of the same document would be dropped: format 1 made
 * it while the version in between pointed elsewhere, at a document since
 * deleted. So that document is stood in for: an empty document the name
 * points at just before, deleted (with its version) just after, as the
 * journal of a format 2 store would have it.
 */
static int write_repeated_name(struct upgrade *u, struct history_clock *clock, int64_t t,
                               int64_t doc, const char *name, int64_t seq)
{
    struct entry ph = {.mime = "application/octet-stream", .name = (char *)name};
    uint64_t time_ns;
    int r;

    if ((r = placeholder_hash(u, name, seq, ph.doc)) != 0)
        return r < 0 ? r : -EIO;
    if ((r = next_time(clock, t, &ph.time_ns)) < 0 || (r = write_entry(u, &ph)) < 0)
        return r;
    if ((r = next_time(clock, t, &time_ns)) < 0 || (r = write_event(u, doc, name, time_ns, false)))
        return r;
    struct entry tombstone = {.op = ENTRY_DELETE};
    memcpy(tombstone.doc, ph.doc, PROTO_HASH_LEN);
    if ((r = next_time(clock, t, &tombstone.time_ns)) < 0)
        return r;
    return write_entry(u, &tombstone);
}

/*
 * The history in order: each document's creation, then the names given,
 * each at its recorded second; within a second, creations first, then names
 * in the order they were given. Nanoseconds within the second keep that
 * order for replay, which sorts by time. `prev` is the document of the name's
 * previous version in that order (a window over the same ordering).
 */
static int write_history(struct upgrade *u)
{
    static const char sql[] =
        "SELECT t, k, doc, name, LAG(doc) OVER (PARTITION BY name ORDER BY t, k, doc) FROM ("
        " SELECT created AS t, 0 AS k, id AS doc, NULL AS name FROM documents"
        " UNION ALL SELECT n.added, n.seq, n.doc, n.name FROM names n)"
        " ORDER BY t, k, doc";
    struct history_clock clock = {.second = INT64_MIN};
    uint64_t total = old_count(u, "SELECT count(*) FROM documents"), done = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    if (sqlite3_prepare_v2(u->old, sql, -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t t = sqlite3_column_int64(s, 0), seq = sqlite3_column_int64(s, 1);
        int64_t doc = sqlite3_column_int64(s, 2);
        const char *name = (const char *)sqlite3_column_text(s, 3);
        bool creation = seq == 0;
        uint64_t time_ns;
        if (!creation && sqlite3_column_type(s, 4) != SQLITE_NULL &&
            sqlite3_column_int64(s, 4) == doc) {
            r = write_repeated_name(u, &clock, t, doc, name, seq);
            continue;
        }
        if ((r = next_time(&clock, t, &time_ns)) == 0)
            r = write_event(u, doc, name, time_ns, creation);
        u->docs += creation;
        if (creation)
            tty_progress_draw(&u->progress, "upgrade: wrote", ++done, total, " documents' entries");
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    sqlite3_finalize(s);
    return r;
}

/* ---- the directory ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* Removes what a format 1 store kept beside the packs, once it is not needed. */
static void remove_v1_objects(const char *root)
{
    static const char *const dirs[] = {"chunks", "entries"};
    char path[PATH_MAX + 16];

    for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
        snprintf(path, sizeof(path), "%s/%s", root, dirs[i]);
        if (access(path, F_OK) == 0) {
            log_info("upgrade: removing the format 1 objects in %s", path);
            if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
                log_warn("upgrade: could not remove all of %s: %s", path, strerror(errno));
        }
    }
}

/* Deletes packs an interrupted upgrade left: format 1 never had any. */
static int remove_partial_packs(const char *root)
{
    char path[PATH_MAX + 16];

    snprintf(path, sizeof(path), "%s/packs", root);
    if (access(path, F_OK) != 0)
        return 0;
    log_info("upgrade: removing the packs of an interrupted upgrade");
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -errno;
}

int upgrade_local_root(const char *url, char *root, size_t len)
{
    const char *path;

    if (strncmp(url, "local:", 6) == 0)
        path = url + 6;
    else if (strncmp(url, "file://", 7) == 0)
        path = url + 7;
    else
        return -EINVAL;
    if (path[0] != '/' || (size_t)snprintf(root, len, "%s", path) >= len)
        return -EINVAL;
    return 0;
}

void upgrade_cleanup(const char *backend_url)
{
    char root[PATH_MAX];

    if (upgrade_local_root(backend_url, root, sizeof(root)) == 0)
        remove_v1_objects(root);
}

static int fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int fd, r = 0;

    if (backend_sync_disabled())
        return 0;
    snprintf(dir, sizeof(dir), "%.*s", slash && slash != path ? (int)(slash - path) : 1,
             slash ? path : ".");
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -errno;
    if (fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

static int set_aside(const char *db_path, char *aside, size_t len)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    char from[PATH_MAX + 16], to[PATH_MAX + 64];
    long now = (long)time(NULL);

    snprintf(aside, len, "%s.v1-%ld", db_path, now);
    for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
        snprintf(from, sizeof(from), "%s%s", db_path, suffixes[i]);
        snprintf(to, sizeof(to), "%s%s", aside, suffixes[i]);
        if (rename(from, to) < 0 && errno != ENOENT)
            return -errno;
    }
    return fsync_parent(db_path);
}

int upgrade_run(uv_loop_t *loop, struct backend *be, const char *backend_url, const char *db_path,
                uint64_t pack_size, int level, size_t max_text, char *err, size_t err_len)
{
    struct upgrade u = {.loop = loop,
                        .be = be,
                        .level = level,
                        .pack_size = pack_size,
                        .max_text = max_text,
                        .seq = 1};
    char aside[PATH_MAX + 32];
    int r;

    if (upgrade_local_root(backend_url, u.root, sizeof(u.root)) < 0) {
        snprintf(err, err_len, "format 1 data lives on a local backend, not %s", backend_url);
        return -EINVAL;
    }
    log_info("upgrade: converting %s (format 1) to packs in %s/packs", db_path, u.root);
    if ((r = remove_partial_packs(u.root)) < 0) {
        snprintf(err, err_len, "cannot remove the packs of an interrupted upgrade: %s",
                 strerror(-r));
        return r;
    }
    /* The old database is only read, in one snapshot. */
    if (sqlite3_open_v2(db_path, &u.old, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_exec(u.old, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, err_len, "cannot read %s: %s", db_path,
                 u.old ? sqlite3_errmsg(u.old) : "cannot open");
        sqlite3_close(u.old);
        return -EIO;
    }
    tty_progress_init(&u.progress, true);
    r = copy_chunks(&u);
    if (r == 0)
        r = write_history(&u);
    if (r == 0)
        r = pack_flush(&u);
    tty_progress_end(&u.progress);
    sqlite3_exec(u.old, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(u.old);
    free(u.buf);
    free(u.index);
    if (r < 0) {
        snprintf(err, err_len, "upgrade failed: %s (the data directory is unchanged)",
                 strerror(-r));
        return r;
    }
    /* The packs hold everything now: from here on the directory is format 2. */
    crash_point("upgrade-packed");
    if ((r = set_aside(db_path, aside, sizeof(aside))) < 0) {
        snprintf(err, err_len, "cannot move %s aside: %s", db_path, strerror(-r));
        return r;
    }
    log_info("upgrade: %" PRIu64 " chunks and %" PRIu64 " documents (%" PRIu64
             " journal entries) in %" PRIu64 " packs; the old database is kept as %s",
             u.chunks, u.docs, u.events, u.packs, aside);
    return 0;
}
