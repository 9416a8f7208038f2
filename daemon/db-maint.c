/*
 * Maintenance queries on the chunk table and the manifests: what gc may
 * delete, what a scrub reads, the orphans a rebuild records, and which
 * documents use a bad chunk.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/db-int.h"

const char *const db_maint_sql[DB_S_COUNT_] = {
    [DB_S_CHUNK_REFS] = "SELECT refs FROM chunks WHERE hash = ?1",
    [DB_S_CHUNKS_UNREFERENCED] = "SELECT hash, size, stored_size FROM chunks WHERE refs = 0",
    [DB_S_CHUNK_DROP] = "DELETE FROM chunks WHERE hash = ?1 AND refs = 0",
    [DB_S_CHUNKS_ALL] = "SELECT hash, size, stored_size FROM chunks WHERE refs > 0 ORDER BY hash",
    [DB_S_DOC_MANIFESTS] = "SELECT id, chunks, manifest FROM documents",
};

static int query_chunks(struct db *db, enum db_stmt_id id, struct db_chunk **out, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_chunk *chunks = NULL;
    size_t cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, id))) {
        db_reader_release(db, c);
        return -EIO;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_bytes(s, 0) != PROTO_HASH_LEN)
            continue; /* not a chunk id; never written by cairnd */
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            struct db_chunk *grown = realloc(chunks, cap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            chunks = grown;
        }
        memcpy(chunks[*n].hash, sqlite3_column_blob(s, 0), PROTO_HASH_LEN);
        chunks[*n].size = (uint32_t)sqlite3_column_int64(s, 1);
        chunks[*n].stored_size = (uint32_t)sqlite3_column_int64(s, 2);
        (*n)++;
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r < 0) {
        free(chunks);
        *n = 0;
        return r;
    }
    *out = chunks;
    return 0;
}

int db_unreferenced_chunks(struct db *db, struct db_chunk **chunks, size_t *n)
{
    return query_chunks(db, DB_S_CHUNKS_UNREFERENCED, chunks, n);
}

int db_chunk_refs(struct db *db, const uint8_t hash[PROTO_HASH_LEN], int64_t *refs)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int r;

    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_CHUNK_REFS))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    r = db_query_id(c, s, refs);
    db_reader_release(db, c);
    return r;
}

int db_all_chunks(struct db *db, struct db_chunk **chunks, size_t *n)
{
    return query_chunks(db, DB_S_CHUNKS_ALL, chunks, n);
}

int db_txn_orphan_chunk(struct db_txn *txn, const struct db_chunk *chunk)
{
    sqlite3_stmt *s = db_stmt(txn->conn, DB_S_CHUNK_INSERT);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, chunk->hash, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, chunk->size);
    sqlite3_bind_int64(s, 3, chunk->stored_size);
    return db_step_done(txn->conn, s);
}

int db_txn_drop_chunk(struct db_txn *txn, const uint8_t hash[PROTO_HASH_LEN], bool *deleted)
{
    sqlite3_stmt *s = db_stmt(txn->conn, DB_S_CHUNK_DROP);
    int r;

    *deleted = false;
    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    r = db_step_done(txn->conn, s);
    if (r == 0)
        *deleted = sqlite3_changes(txn->conn->sql) > 0;
    return r;
}

static int hash_cmp(const void *a, const void *b)
{
    return memcmp(a, b, PROTO_HASH_LEN);
}

int db_docs_with_chunks(struct db *db, const uint8_t (*sorted)[PROTO_HASH_LEN], size_t n,
                        struct db_doc **docs, size_t *ndocs)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_doc *out = NULL;
    size_t cap = 0, count = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *docs = NULL;
    *ndocs = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_DOC_MANIFESTS))) {
        db_reader_release(db, c);
        return -EIO;
    }
    /* A scan of every manifest: fine for a scrub, which reads every chunk anyway. */
    rc = SQLITE_DONE;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const uint8_t *blob = sqlite3_column_blob(s, 2);
        size_t len = (size_t)sqlite3_column_bytes(s, 2);
        struct db_chunk *hits = NULL;
        uint32_t nhits = 0;
        for (size_t off = 0; off + DB_CHUNK_ENTRY <= len; off += DB_CHUNK_ENTRY) {
            if (!bsearch(blob + off, sorted, n, PROTO_HASH_LEN, hash_cmp))
                continue;
            struct db_chunk *grown = realloc(hits, (nhits + 1) * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            hits = grown;
            memcpy(hits[nhits].hash, blob + off, PROTO_HASH_LEN);
            hits[nhits].size = proto_be32_read(blob + off + 32);
            hits[nhits].stored_size = proto_be32_read(blob + off + 36);
            nhits++;
        }
        if (r == 0 && nhits > 0) {
            if (count == cap) {
                cap = cap ? cap * 2 : 8;
                struct db_doc *grown = realloc(out, cap * sizeof(*grown));
                if (!grown) {
                    free(hits);
                    r = -ENOMEM;
                    break;
                }
                out = grown;
            }
            memset(&out[count], 0, sizeof(out[count]));
            out[count].rowid = sqlite3_column_int64(s, 0);
            out[count].chunks = hits;
            out[count].nchunks = nhits;
            count++;
        } else {
            free(hits);
        }
    }
    sqlite3_reset(s);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    /* Fill in hash and name of each document found. */
    for (size_t i = 0; r == 0 && i < count; i++) {
        struct db_chunk *hits = out[i].chunks;
        uint32_t nhits = out[i].nchunks;
        out[i].chunks = NULL;
        r = db_load_doc(c, out[i].rowid, 0, &out[i]);
        out[i].chunks = hits;
        out[i].nchunks = nhits;
    }
    db_reader_release(db, c);
    if (r < 0) {
        db_docs_free(out, count);
        return r;
    }
    *docs = out;
    *ndocs = count;
    return 0;
}
