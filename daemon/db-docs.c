/*
 * Documents: resolving references, loading a document with its names, tags
 * and metadata, listing and totals, and the writes of an add and a delete.
 * A document's manifest is stored as a blob of DB_CHUNK_ENTRY-byte entries.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "daemon/db-int.h"
#include "daemon/log.h"
#include "proto/util.h"

const char *const db_docs_sql[DB_S_COUNT_] = {
    [DB_S_DOC_BY_HASH] = "SELECT id FROM documents WHERE hash = ?1",
    [DB_S_DOC_BY_PREFIX] = "SELECT id FROM documents WHERE hash >= ?1 AND hash < ?1 || 'g' LIMIT 2",
    [DB_S_DOC_BY_NAME] = "SELECT doc FROM names WHERE name = ?1 ORDER BY seq DESC LIMIT 1",
    [DB_S_DOC_BY_ID] = "SELECT hash, size, stored_size, chunks, mime, created, manifest"
                       " FROM documents WHERE id = ?1",
    [DB_S_NEWEST_NAME] = "SELECT name FROM names WHERE doc = ?1 ORDER BY seq DESC LIMIT 1",
    [DB_S_NAMES_OF_DOC] = "SELECT name FROM names WHERE doc = ?1 GROUP BY name ORDER BY MIN(seq)",
    [DB_S_TAGS_OF_DOC] = "SELECT tag FROM tags WHERE doc = ?1 ORDER BY tag",
    [DB_S_META_OF_DOC] = "SELECT key, value FROM meta WHERE doc = ?1 ORDER BY key",
    [DB_S_CHUNK_LOOKUP] = "SELECT stored_size FROM chunks WHERE hash = ?1",
    [DB_S_CHUNK_INSERT] = "INSERT INTO chunks(hash, size, stored_size, refs) VALUES(?1, ?2, ?3, 0)"
                          " ON CONFLICT(hash) DO NOTHING",
    [DB_S_CHUNK_REF] = "UPDATE chunks SET refs = refs + 1 WHERE hash = ?1",
    [DB_S_CHUNK_UNREF] = "UPDATE chunks SET refs = refs - 1 WHERE hash = ?1 AND refs > 0",
    [DB_S_DOC_INSERT] = "INSERT INTO documents(hash, size, stored_size, chunks, mime, created,"
                        " manifest) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [DB_S_DOC_DELETE] = "DELETE FROM documents WHERE id = ?1",
    [DB_S_NAME_INSERT] = "INSERT INTO names(name, doc, added) VALUES(?1, ?2, ?3)",
    [DB_S_TAG_INSERT] = "INSERT OR IGNORE INTO tags(doc, tag) VALUES(?1, ?2)",
    [DB_S_META_UPSERT] = "INSERT INTO meta(doc, key, value) VALUES(?1, ?2, ?3)"
                         " ON CONFLICT(doc, key) DO UPDATE SET value = excluded.value",
    [DB_S_LIST_ALL] = "SELECT id FROM documents WHERE hash > ?1 ORDER BY hash LIMIT ?2",
    [DB_S_LIST_TAG] = "SELECT d.id FROM documents d JOIN tags t ON t.doc = d.id"
                      " WHERE t.tag = ?2 AND d.hash > ?1 ORDER BY d.hash LIMIT ?3",
    [DB_S_TOTALS] = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM documents",
    [DB_S_CHUNK_TOTALS] = "SELECT COUNT(*), COALESCE(SUM(stored_size), 0), COALESCE(SUM(size), 0)"
                          " FROM chunks",
};

/* Collects one text column of every row into a NULL-free array. */
static int query_strings(struct db_conn *c, sqlite3_stmt *s, int col, char ***out, size_t *n)
{
    size_t cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            char **grown = realloc(*out, cap * sizeof(char *));
            if (!grown)
                goto oom;
            *out = grown;
        }
        if (!((*out)[*n] = db_column_strdup(s, col)))
            goto oom;
        (*n)++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
        log_error("database: %s", sqlite3_errmsg(c->sql));
        return -EIO;
    }
    return 0;
oom:
    sqlite3_reset(s);
    return -ENOMEM;
}

static void strings_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void db_doc_clear(struct db_doc *doc)
{
    free(doc->name);
    free(doc->chunks);
    strings_free(doc->tags, doc->ntags);
    strings_free(doc->names, doc->nnames);
    strings_free(doc->meta_keys, doc->nmeta);
    strings_free(doc->meta_values, doc->nmeta);
    memset(doc, 0, sizeof(*doc));
}

void db_docs_free(struct db_doc *docs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        db_doc_clear(&docs[i]);
    free(docs);
}

static void put_be32(uint8_t *p, uint32_t v)
{
    proto_be32_write(p, v);
}

static void db_chunks_encode(const struct db_chunk *chunks, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++, out += DB_CHUNK_ENTRY) {
        memcpy(out, chunks[i].hash, PROTO_HASH_LEN);
        put_be32(out + 32, chunks[i].size);
        put_be32(out + 36, chunks[i].stored_size);
    }
}

static int chunks_decode(const uint8_t *blob, size_t len, uint32_t n, struct db_chunk **out)
{
    if (len != (size_t)n * DB_CHUNK_ENTRY)
        return -EBADMSG;
    struct db_chunk *chunks = calloc(n ? n : 1, sizeof(*chunks));
    if (!chunks)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++, blob += DB_CHUNK_ENTRY) {
        memcpy(chunks[i].hash, blob, PROTO_HASH_LEN);
        chunks[i].size = proto_be32_read(blob + 32);
        chunks[i].stored_size = proto_be32_read(blob + 36);
    }
    *out = chunks;
    return 0;
}

int db_load_doc(struct db_conn *c, int64_t id, unsigned want, struct db_doc *doc)
{
    sqlite3_stmt *s = db_stmt(c, DB_S_DOC_BY_ID);
    int rc, r = 0;

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, id);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        return rc == SQLITE_DONE ? DB_E_NOT_FOUND : -EIO;
    }
    doc->rowid = id;
    snprintf(doc->hash, sizeof(doc->hash), "%s", (const char *)sqlite3_column_text(s, 0));
    doc->size = (uint64_t)sqlite3_column_int64(s, 1);
    doc->stored_size = (uint64_t)sqlite3_column_int64(s, 2);
    doc->nchunks = (uint32_t)sqlite3_column_int64(s, 3);
    snprintf(doc->mime, sizeof(doc->mime), "%s", (const char *)sqlite3_column_text(s, 4));
    doc->created = sqlite3_column_int64(s, 5);
    if (want & DB_WANT_CHUNKS)
        r = chunks_decode(sqlite3_column_blob(s, 6), (size_t)sqlite3_column_bytes(s, 6),
                          doc->nchunks, &doc->chunks);
    sqlite3_reset(s);
    if (r < 0)
        return r;

    if (!doc->name) {
        s = db_stmt(c, DB_S_NEWEST_NAME);
        if (!s)
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if (sqlite3_step(s) == SQLITE_ROW && !(doc->name = db_column_strdup(s, 0)))
            r = -ENOMEM;
        sqlite3_reset(s);
        if (r < 0)
            return r;
    }
    if (want & (DB_WANT_TAGS | DB_WANT_DETAILS)) {
        if (!(s = db_stmt(c, DB_S_TAGS_OF_DOC)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->tags, &doc->ntags)) < 0)
            return r;
    }
    if (want & DB_WANT_DETAILS) {
        size_t nvalues;
        if (!(s = db_stmt(c, DB_S_NAMES_OF_DOC)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->names, &doc->nnames)) < 0)
            return r;
        if (!(s = db_stmt(c, DB_S_META_OF_DOC)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->meta_keys, &doc->nmeta)) < 0)
            return r;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 1, &doc->meta_values, &nvalues)) < 0)
            return r;
        if (nvalues != doc->nmeta)
            return -EIO;
    }
    return 0;
}

/*
 * Finds the document id for a ref (PROTOCOL.md "References"). When it was
 * found by name, *by_name is set so the caller reports that name.
 */
static int resolve_id(struct db_conn *c, const char *ref, size_t len, int64_t *id, bool *by_name)
{
    char key[PROTO_MAX_REF + 1];
    sqlite3_stmt *s;
    int r;

    *by_name = false;
    if (len == 0 || len > PROTO_MAX_REF || memchr(ref, '\0', len))
        return DB_E_NOT_FOUND;
    memcpy(key, ref, len);
    key[len] = '\0';
    if (len >= 8 && len <= PROTO_HASH_HEX && proto_is_hex(ref, len)) {
        char lower[PROTO_HASH_HEX + 1];
        for (size_t i = 0; i <= len; i++)
            lower[i] = (char)(key[i] >= 'A' && key[i] <= 'F' ? key[i] + 32 : key[i]);
        if (len == PROTO_HASH_HEX) {
            if (!(s = db_stmt(c, DB_S_DOC_BY_HASH)))
                return -EIO;
            sqlite3_bind_text(s, 1, lower, (int)len, SQLITE_TRANSIENT);
            r = db_query_id(c, s, id);
            if (r != DB_E_NOT_FOUND)
                return r;
        } else {
            int64_t first = 0;
            int rows = 0, rc;
            if (!(s = db_stmt(c, DB_S_DOC_BY_PREFIX)))
                return -EIO;
            sqlite3_bind_text(s, 1, lower, (int)len, SQLITE_TRANSIENT);
            while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                if (rows++ == 0)
                    first = sqlite3_column_int64(s, 0);
            }
            sqlite3_reset(s);
            if (rc != SQLITE_DONE)
                return -EIO;
            if (rows > 1)
                return DB_E_AMBIGUOUS;
            if (rows == 1) {
                *id = first;
                return 0;
            }
        }
    }
    if (!(s = db_stmt(c, DB_S_DOC_BY_NAME)))
        return -EIO;
    sqlite3_bind_text(s, 1, key, (int)len, SQLITE_TRANSIENT);
    r = db_query_id(c, s, id);
    if (r == 0)
        *by_name = true;
    return r;
}

int db_resolve(struct db *db, const char *ref, size_t ref_len, unsigned want, struct db_doc *doc)
{
    struct db_conn *c = db_reader_acquire(db);
    int64_t id;
    bool by_name;
    int r;

    memset(doc, 0, sizeof(*doc));
    if (!c)
        return -EIO;
    r = resolve_id(c, ref, ref_len, &id, &by_name);
    if (r == 0 && by_name && !(doc->name = strndup(ref, ref_len)))
        r = -ENOMEM;
    if (r == 0)
        r = db_load_doc(c, id, want, doc);
    db_reader_release(db, c);
    if (r != 0)
        db_doc_clear(doc);
    return r;
}

int db_name_current(struct db *db, const char *name, int64_t doc, bool *current)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int64_t id = -1;
    int r;

    *current = false;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_DOC_BY_NAME))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    r = db_query_id(c, s, &id);
    db_reader_release(db, c);
    if (r < 0)
        return r;
    *current = r == 0 && id == doc;
    return 0;
}

int db_chunk_lookup(struct db *db, const uint8_t hash[PROTO_HASH_LEN], uint32_t *stored_size)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int64_t v;
    int r;

    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_CHUNK_LOOKUP))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_blob(s, 1, hash, PROTO_HASH_LEN, SQLITE_STATIC);
    r = db_query_id(c, s, &v);
    if (r == 0)
        *stored_size = (uint32_t)v;
    db_reader_release(db, c);
    return r;
}

int db_list(struct db *db, const char *tag, const char *after, size_t limit, struct db_doc **docs,
            size_t *ndocs)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_doc *out = NULL;
    int64_t *ids = NULL;
    size_t n = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *docs = NULL;
    *ndocs = 0;
    if (!c)
        return -EIO;
    s = db_stmt(c, tag ? DB_S_LIST_TAG : DB_S_LIST_ALL);
    if (!s) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, after ? after : "", -1, SQLITE_TRANSIENT);
    if (tag) {
        sqlite3_bind_text(s, 2, tag, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 3, (int64_t)limit);
    } else {
        sqlite3_bind_int64(s, 2, (int64_t)limit);
    }
    /* Collect ids first: db_load_doc reuses statements, so the cursor must be finished. */
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            int64_t *grown = realloc(ids, cap * sizeof(*ids));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            ids = grown;
        }
        ids[n++] = sqlite3_column_int64(s, 0);
    }
    sqlite3_reset(s);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0 && n > 0 && !(out = calloc(n, sizeof(*out))))
        r = -ENOMEM;
    for (size_t i = 0; r == 0 && i < n; i++)
        r = db_load_doc(c, ids[i], DB_WANT_TAGS, &out[i]);
    db_reader_release(db, c);
    free(ids);
    if (r < 0) {
        db_docs_free(out, n);
        return r;
    }
    *docs = out;
    *ndocs = n;
    return 0;
}

int db_totals(struct db *db, struct db_totals *t)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int r = -EIO;

    memset(t, 0, sizeof(*t));
    if (!c)
        return -EIO;
    if ((s = db_stmt(c, DB_S_TOTALS)) && sqlite3_step(s) == SQLITE_ROW) {
        t->documents = (uint64_t)sqlite3_column_int64(s, 0);
        t->logical_bytes = (uint64_t)sqlite3_column_int64(s, 1);
        sqlite3_reset(s);
        if ((s = db_stmt(c, DB_S_CHUNK_TOTALS)) && sqlite3_step(s) == SQLITE_ROW) {
            t->chunks = (uint64_t)sqlite3_column_int64(s, 0);
            t->stored_bytes = (uint64_t)sqlite3_column_int64(s, 1);
            t->unique_bytes = (uint64_t)sqlite3_column_int64(s, 2);
            r = 0;
        }
    }
    if (s)
        sqlite3_reset(s);
    db_reader_release(db, c);
    return r;
}

/* ---- writes ---- */

int db_txn_add(struct db_txn *txn, struct db_add *add)
{
    struct db_conn *c = txn->conn;
    char hex[PROTO_HASH_HEX + 1];
    int64_t id, now = add->created_at ? add->created_at : (int64_t)time(NULL);
    sqlite3_stmt *s;
    int r;

    proto_hex_encode(add->hash, PROTO_HASH_LEN, hex);
    /* Chunk rows first: they record objects the backend has made durable. */
    for (size_t i = 0; i < add->nchunks; i++) {
        if (!(s = db_stmt(c, DB_S_CHUNK_INSERT)))
            return -EIO;
        sqlite3_bind_blob(s, 1, add->chunks[i].hash, PROTO_HASH_LEN, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, add->chunks[i].size);
        sqlite3_bind_int64(s, 3, add->chunks[i].stored_size);
        if ((r = db_step_done(c, s)) < 0)
            return r;
    }

    if (!(s = db_stmt(c, DB_S_DOC_BY_HASH)))
        return -EIO;
    sqlite3_bind_text(s, 1, hex, PROTO_HASH_HEX, SQLITE_STATIC);
    r = db_query_id(c, s, &id);
    if (r < 0)
        return r;
    add->created = (r == DB_E_NOT_FOUND);
    add->stored_size = 0;
    for (size_t i = 0; i < add->nchunks; i++)
        add->stored_size += add->chunks[i].stored_size;
    if (add->created) {
        size_t blob_len = add->nchunks * DB_CHUNK_ENTRY;
        _cleanup_free_ uint8_t *blob = malloc(blob_len ? blob_len : 1);
        if (!blob)
            return -ENOMEM;
        db_chunks_encode(add->chunks, add->nchunks, blob);
        if (!(s = db_stmt(c, DB_S_DOC_INSERT)))
            return -EIO;
        sqlite3_bind_text(s, 1, hex, PROTO_HASH_HEX, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (int64_t)add->size);
        sqlite3_bind_int64(s, 3, (int64_t)add->stored_size);
        sqlite3_bind_int64(s, 4, (int64_t)add->nchunks);
        sqlite3_bind_text(s, 5, add->mime, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 6, now);
        sqlite3_bind_blob(s, 7, blob, (int)blob_len, SQLITE_STATIC);
        if ((r = db_step_done(c, s)) < 0)
            return r;
        id = sqlite3_last_insert_rowid(c->sql);
        for (size_t i = 0; i < add->nchunks; i++) {
            if (!(s = db_stmt(c, DB_S_CHUNK_REF)))
                return -EIO;
            sqlite3_bind_blob(s, 1, add->chunks[i].hash, PROTO_HASH_LEN, SQLITE_STATIC);
            if ((r = db_step_done(c, s)) < 0)
                return r;
        }
    }

    if (add->name && add->name[0]) {
        int64_t current = -1;
        if (!(s = db_stmt(c, DB_S_DOC_BY_NAME)))
            return -EIO;
        sqlite3_bind_text(s, 1, add->name, -1, SQLITE_STATIC);
        if ((r = db_query_id(c, s, &current)) < 0)
            return r;
        /* A new version only when the name does not already point here. */
        if (current != id) {
            if (!(s = db_stmt(c, DB_S_NAME_INSERT)))
                return -EIO;
            sqlite3_bind_text(s, 1, add->name, -1, SQLITE_STATIC);
            sqlite3_bind_int64(s, 2, id);
            sqlite3_bind_int64(s, 3, now);
            if ((r = db_step_done(c, s)) < 0)
                return r;
        }
    }
    for (size_t i = 0; i < add->ntags; i++) {
        if (!(s = db_stmt(c, DB_S_TAG_INSERT)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, add->tags[i], -1, SQLITE_STATIC);
        if ((r = db_step_done(c, s)) < 0)
            return r;
    }
    for (size_t i = 0; i < add->nmeta; i++) {
        if (!(s = db_stmt(c, DB_S_META_UPSERT)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, add->meta_keys[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, add->meta_values[i], -1, SQLITE_STATIC);
        if ((r = db_step_done(c, s)) < 0)
            return r;
    }
    if (add->created || (add->name && add->name[0]) || add->ntags || add->nmeta) {
        r = db_fts_sync(txn, id, add->created, add->text, add->text_len);
        if (r < 0)
            return r;
    }
    if (!add->created) {
        /* Report the existing document's stored size. */
        struct db_doc doc = {0};
        if (db_load_doc(c, id, 0, &doc) == 0)
            add->stored_size = doc.stored_size;
        db_doc_clear(&doc);
    }
    return 0;
}

int db_txn_delete(struct db_txn *txn, const char *ref, size_t ref_len,
                  char hash_hex[PROTO_HASH_HEX + 1])
{
    struct db_conn *c = txn->conn;
    struct db_doc doc = {0};
    sqlite3_stmt *s;
    int64_t id;
    bool by_name;
    int r;

    r = resolve_id(c, ref, ref_len, &id, &by_name);
    if (r == 0)
        r = db_load_doc(c, id, DB_WANT_CHUNKS, &doc);
    if (r != 0)
        goto out;
    memcpy(hash_hex, doc.hash, sizeof(doc.hash));
    for (uint32_t i = 0; i < doc.nchunks; i++) {
        if (!(s = db_stmt(c, DB_S_CHUNK_UNREF))) {
            r = -EIO;
            goto out;
        }
        sqlite3_bind_blob(s, 1, doc.chunks[i].hash, PROTO_HASH_LEN, SQLITE_STATIC);
        if ((r = db_step_done(c, s)) < 0)
            goto out;
    }
    if ((r = db_fts_delete(txn, id)) < 0)
        goto out;
    if (!(s = db_stmt(c, DB_S_DOC_DELETE))) {
        r = -EIO;
        goto out;
    }
    sqlite3_bind_int64(s, 1, id);
    r = db_step_done(c, s);
out:
    db_doc_clear(&doc);
    return r;
}
