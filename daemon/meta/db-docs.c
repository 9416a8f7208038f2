/*
 * Documents: resolving references, loading a document with its names, tags
 * and metadata, listing and totals, the writes of an add and a delete, and
 * what the search indexer reads of them. A document's manifest root is
 * stored as a blob of packed entries (manifest.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"
#include "daemon/base/log.h"
#include "daemon/format/manifest.h"
#include "proto/util.h"

/* A document's name rows, each with the number of newer versions of its name. */
#define NAME_ROWS                                                                                  \
    "SELECT n.name AS name, n.t AS t, n.eid AS eid, (SELECT COUNT(*) FROM names m"                 \
    " WHERE m.name = n.name AND (m.t > n.t OR (m.t = n.t AND m.eid > n.eid))) AS newer"            \
    " FROM names n WHERE n.doc = ?1"
/* NAME, or NAME@{N} for a version N newer ones came after (the ref that reaches it). */
#define NAME_SHOWN "CASE WHEN newer = 0 THEN name ELSE name || '@{' || newer || '}' END"

const char *const db_docs_sql[DB_S_COUNT_] = {
    [DB_S_DOC_BY_HASH] = "SELECT id FROM documents WHERE hash = ?1",
    [DB_S_DOC_BY_PREFIX] = "SELECT id FROM documents WHERE hash >= ?1 AND hash < ?1 || 'g' LIMIT 2",
    [DB_S_DOC_BY_NAME] = "SELECT doc, mode, mtime FROM names WHERE name = ?1"
                         " ORDER BY t DESC, eid DESC LIMIT 1",
    [DB_S_DOC_BY_ID] = "SELECT hash, size, stored_size, chunks, mime, created, text, depth,"
                       " manifest, index_gen FROM documents WHERE id = ?1",
    /*
     * The name a document is shown under: one that points to it now, the
     * newest first, else NAME@{N} of its newest older version.
     */
    [DB_S_NEWEST_NAME] = "SELECT " NAME_SHOWN " FROM (" NAME_ROWS ")"
                         " ORDER BY newer = 0 DESC, t DESC, eid DESC LIMIT 1",
    [DB_S_NAMES_OF_DOC] =
        "SELECT name FROM names WHERE doc = ?1 GROUP BY name ORDER BY MIN(t), MIN(eid)",
    /* Every name of a document, oldest first; NAME@{N} where it is an older version only. */
    [DB_S_NAMES_SHOWN] = "SELECT " NAME_SHOWN " FROM (SELECT name, MIN(newer) AS newer,"
                         " MIN(t) AS t, MIN(eid) AS eid FROM (" NAME_ROWS ") GROUP BY name)"
                         " ORDER BY t, eid",
    [DB_S_TAGS_OF_DOC] = "SELECT tag FROM tags WHERE doc = ?1 ORDER BY tag",
    [DB_S_META_OF_DOC] = "SELECT key, value FROM meta WHERE doc = ?1 ORDER BY key",
    [DB_S_META_GET] = "SELECT value FROM meta WHERE doc = ?1 AND key = ?2",
    [DB_S_DOC_INSERT] = "INSERT INTO documents(hash, size, stored_size, chunks, mime, created,"
                        " text, depth, manifest, index_gen) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7,"
                        " ?8, ?9, 1)",
    [DB_S_DOC_DELETE] = "DELETE FROM documents WHERE id = ?1",
    [DB_S_DOC_INDEX_BUMP] = "UPDATE documents SET index_gen = index_gen + 1 WHERE id = ?1",
    [DB_S_NAME_INSERT] = "INSERT INTO names(name, doc, added, t, eid, mode, mtime)"
                         " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [DB_S_TAG_INSERT] = "INSERT OR IGNORE INTO tags(doc, tag) VALUES(?1, ?2)",
    [DB_S_META_UPSERT] = "INSERT INTO meta(doc, key, value) VALUES(?1, ?2, ?3)"
                         " ON CONFLICT(doc, key) DO UPDATE SET value = excluded.value",
    [DB_S_LIST_ALL] = "SELECT id FROM documents WHERE hash > ?1 ORDER BY hash LIMIT ?2",
    [DB_S_LIST_TAG] = "SELECT d.id FROM documents d JOIN tags t ON t.doc = d.id"
                      " WHERE t.tag = ?2 AND d.hash > ?1 ORDER BY d.hash LIMIT ?3",
    [DB_S_TOTALS] = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM documents",
    [DB_S_CHUNK_TOTALS] = "SELECT COUNT(*), COALESCE(SUM(stored), 0), COALESCE(SUM(size), 0)"
                          " FROM chunks WHERE condemned = 0 OR condemned > ?1",
    [DB_S_PACK_TOTALS] = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM packs",
    [DB_S_REMOVAL_INSERT] = "INSERT OR REPLACE INTO search_removals(doc, depth, manifest)"
                            " VALUES(?1, ?2, ?3)",
    [DB_S_REMOVALS] = "SELECT doc, depth, manifest FROM search_removals ORDER BY doc LIMIT ?1",
    [DB_S_REMOVAL_DELETE] = "DELETE FROM search_removals WHERE doc = ?1",
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
    free(doc->root);
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

int db_load_doc(struct db_conn *c, int64_t id, unsigned want, struct db_doc *doc)
{
    sqlite3_stmt *s = db_stmt(c, DB_S_DOC_BY_ID, db_docs_sql);
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
    doc->nchunks = (uint64_t)sqlite3_column_int64(s, 3);
    snprintf(doc->mime, sizeof(doc->mime), "%s", (const char *)sqlite3_column_text(s, 4));
    doc->created = sqlite3_column_int64(s, 5);
    doc->text = sqlite3_column_int(s, 6) != 0;
    doc->depth = (unsigned)sqlite3_column_int(s, 7);
    if (want & DB_WANT_MANIFEST) {
        size_t len = (size_t)sqlite3_column_bytes(s, 8);
        const void *blob = sqlite3_column_blob(s, 8);
        if (!manifest_root_valid(blob, len, doc->depth)) {
            log_error("database: document %s has a malformed manifest", doc->hash);
            r = -EIO;
        } else if (!(doc->root = malloc(len ? len : 1))) {
            r = -ENOMEM;
        } else {
            if (len)
                memcpy(doc->root, blob, len);
            doc->root_len = len;
        }
    }
    sqlite3_reset(s);
    if (r < 0)
        return r;

    if (!doc->name) {
        s = db_stmt(c, DB_S_NEWEST_NAME, db_docs_sql);
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
        if (!(s = db_stmt(c, DB_S_TAGS_OF_DOC, db_docs_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->tags, &doc->ntags)) < 0)
            return r;
    }
    if (want & DB_WANT_DETAILS) {
        size_t nvalues;
        if (!(s = db_stmt(c, DB_S_NAMES_SHOWN, db_docs_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = query_strings(c, s, 0, &doc->names, &doc->nnames)) < 0)
            return r;
        if (!(s = db_stmt(c, DB_S_META_OF_DOC, db_docs_sql)))
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
static int resolve_id(struct db_conn *c, const char *ref, size_t len, int64_t *id, bool *by_name,
                      struct db_fattr *fa)
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
            if (!(s = db_stmt(c, DB_S_DOC_BY_HASH, db_docs_sql)))
                return -EIO;
            sqlite3_bind_text(s, 1, lower, (int)len, SQLITE_TRANSIENT);
            r = db_query_id(c, s, id);
            if (r != DB_E_NOT_FOUND)
                return r;
        } else {
            int64_t first = 0;
            int rows = 0, rc;
            if (!(s = db_stmt(c, DB_S_DOC_BY_PREFIX, db_docs_sql)))
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
    if (!(s = db_stmt(c, DB_S_DOC_BY_NAME, db_docs_sql)))
        return -EIO;
    sqlite3_bind_text(s, 1, key, (int)len, SQLITE_TRANSIENT);
    r = db_query_name_row(c, s, id, fa);
    if (r == 0)
        *by_name = true;
    /* No such name: NAME@{N}, an older version, which stands for its document as its hash does. */
    return r == DB_E_NOT_FOUND ? db_resolve_version(c, key, len, id, fa) : r;
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
    r = resolve_id(c, ref, ref_len, &id, &by_name, &doc->fattr);
    if (r == 0 && by_name && !(doc->name = strndup(ref, ref_len)))
        r = -ENOMEM;
    doc->by_name = by_name;
    if (r == 0)
        r = db_load_doc(c, id, want, doc);
    db_reader_release(db, c);
    if (r != 0)
        db_doc_clear(doc);
    return r;
}

int db_load(struct db *db, int64_t rowid, unsigned want, struct db_doc *doc)
{
    struct db_conn *c = db_reader_acquire(db);
    int r;

    memset(doc, 0, sizeof(*doc));
    if (!c)
        return -EIO;
    r = db_load_doc(c, rowid, want, doc);
    db_reader_release(db, c);
    if (r != 0)
        db_doc_clear(doc);
    return r;
}

int db_name_current(struct db *db, const char *name, int64_t doc, const struct db_fattr *fa,
                    bool *current)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_fattr now = {0};
    sqlite3_stmt *s;
    int64_t id = -1;
    int r;

    *current = false;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_DOC_BY_NAME, db_docs_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    r = db_query_name_row(c, s, &id, &now);
    db_reader_release(db, c);
    if (r < 0)
        return r;
    /* As add_name decides whether an add makes a new version. */
    *current =
        r == 0 && id == doc && (fa->mode == 0 || (fa->mode == now.mode && fa->mtime == now.mtime));
    return 0;
}

int db_list(struct db *db, const char *tag, const char *after, size_t limit, struct db_doc **docs,
            size_t *ndocs)
{
    /* One snapshot: a document deleted meanwhile is either listed whole or not at all. */
    struct db_conn *c = db_snapshot_begin(db);
    struct db_doc *out = NULL;
    int64_t *ids = NULL;
    size_t n = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *docs = NULL;
    *ndocs = 0;
    if (!c)
        return -EIO;
    s = db_stmt(c, tag ? DB_S_LIST_TAG : DB_S_LIST_ALL, db_docs_sql);
    if (!s) {
        db_snapshot_end(db, c);
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
    db_snapshot_end(db, c);
    free(ids);
    if (r < 0) {
        db_docs_free(out, n);
        return r;
    }
    *docs = out;
    *ndocs = n;
    return 0;
}

int db_totals(struct db *db, uint64_t dead_gen, struct db_totals *t)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    int r = -EIO;

    memset(t, 0, sizeof(*t));
    if (!c)
        return -EIO;
    if ((s = db_stmt(c, DB_S_TOTALS, db_docs_sql)) && sqlite3_step(s) == SQLITE_ROW) {
        t->documents = (uint64_t)sqlite3_column_int64(s, 0);
        t->logical_bytes = (uint64_t)sqlite3_column_int64(s, 1);
        sqlite3_reset(s);
        if ((s = db_stmt(c, DB_S_CHUNK_TOTALS, db_docs_sql)))
            sqlite3_bind_int64(s, 1, (int64_t)dead_gen);
        if (s && sqlite3_step(s) == SQLITE_ROW) {
            t->chunks = (uint64_t)sqlite3_column_int64(s, 0);
            t->stored_bytes = (uint64_t)sqlite3_column_int64(s, 1);
            t->unique_bytes = (uint64_t)sqlite3_column_int64(s, 2);
            sqlite3_reset(s);
            if ((s = db_stmt(c, DB_S_PACK_TOTALS, db_docs_sql)) && sqlite3_step(s) == SQLITE_ROW) {
                t->packs = (uint64_t)sqlite3_column_int64(s, 0);
                t->pack_bytes = (uint64_t)sqlite3_column_int64(s, 1);
                r = 0;
            }
        }
    }
    if (s)
        sqlite3_reset(s);
    db_reader_release(db, c);
    return r;
}

/* ---- writes ---- */

/* Inserts the document row of a new document; its id goes to *id. */
static int insert_doc(struct db_conn *c, const struct db_add *add, const char *hex, int64_t now,
                      int64_t *id)
{
    sqlite3_stmt *s = db_stmt(c, DB_S_DOC_INSERT, db_docs_sql);
    int r;

    if (!s)
        return -EIO;
    sqlite3_bind_text(s, 1, hex, PROTO_HASH_HEX, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)add->size);
    sqlite3_bind_int64(s, 3, (int64_t)add->stored);
    sqlite3_bind_int64(s, 4, (int64_t)add->nchunks);
    sqlite3_bind_text(s, 5, add->mime, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, now);
    sqlite3_bind_int(s, 7, add->text);
    sqlite3_bind_int(s, 8, (int)add->depth);
    sqlite3_bind_blob(s, 9, add->root ? (const void *)add->root : "", (int)add->root_len,
                      SQLITE_STATIC);
    if ((r = db_step_done(c, s)) < 0)
        return r;
    *id = sqlite3_last_insert_rowid(c->sql);
    return 0;
}

/*
 * Adds a name version unless the name already points here, from the same
 * file (an add without a file's mode keeps the one recorded); *changed when
 * it did add one.
 */
static int add_name(struct db_conn *c, const struct db_add *add, int64_t id, int64_t now,
                    bool *changed)
{
    int64_t current = -1;
    struct db_fattr fa = {0};
    sqlite3_stmt *s = db_stmt(c, DB_S_DOC_BY_NAME, db_docs_sql);
    int r;

    if (!s)
        return -EIO;
    sqlite3_bind_text(s, 1, add->name, -1, SQLITE_STATIC);
    if ((r = db_query_name_row(c, s, &current, &fa)) < 0)
        return r;
    if (current == id &&
        (add->fattr.mode == 0 || (add->fattr.mode == fa.mode && add->fattr.mtime == fa.mtime)))
        return 0;
    if (!(s = db_stmt(c, DB_S_NAME_INSERT, db_docs_sql)))
        return -EIO;
    sqlite3_bind_text(s, 1, add->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, id);
    sqlite3_bind_int64(s, 3, now);
    sqlite3_bind_int64(s, 4, (int64_t)add->event_ns);
    sqlite3_bind_blob(s, 5, add->event_id, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, add->fattr.mode);
    sqlite3_bind_int64(s, 7, add->fattr.mode ? add->fattr.mtime : 0);
    *changed = true;
    return db_step_done(c, s);
}

int db_doc_id(struct db_conn *c, const char *hash_hex, int64_t *id)
{
    sqlite3_stmt *s = db_stmt(c, DB_S_DOC_BY_HASH, db_docs_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_text(s, 1, hash_hex, -1, SQLITE_STATIC);
    return db_query_id(c, s, id);
}

int db_txn_add(struct db_txn *txn, struct db_add *add)
{
    struct db_conn *c = txn->c;
    char hex[PROTO_HASH_HEX + 1];
    int64_t id, now = add->created_at ? add->created_at : (int64_t)time(NULL);
    bool changed = false;
    sqlite3_stmt *s;
    int r;

    proto_hex_encode(add->hash, PROTO_HASH_LEN, hex);
    r = db_doc_id(c, hex, &id);
    if (r < 0)
        return r;
    add->created = (r == DB_E_NOT_FOUND);
    if (add->created && (r = insert_doc(c, add, hex, now, &id)) < 0)
        return r;
    if (add->name && add->name[0] && (r = add_name(c, add, id, now, &changed)) < 0)
        return r;
    if ((r = db_merge_tags_meta(c, id, add->tags, add->ntags, add->meta_keys, add->meta_values,
                                add->nmeta, &changed)) < 0)
        return r;
    /* What the index holds of it changed: a new generation for the indexer to catch up to. */
    if (!add->created && changed) {
        if (!(s = db_stmt(c, DB_S_DOC_INDEX_BUMP, db_docs_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = db_step_done(c, s)) < 0)
            return r;
    }
    add->index_changed = add->created || changed;
    add->rowid = id;
    add->stored_size = add->stored;
    snprintf(add->stored_mime, sizeof(add->stored_mime), "%s", add->mime ? add->mime : "");
    if (!add->created) {
        /* Report the existing document's stored size and mime type. */
        struct db_doc doc = {0};
        if (db_load_doc(c, id, 0, &doc) == 0) {
            add->stored_size = doc.stored_size;
            snprintf(add->stored_mime, sizeof(add->stored_mime), "%s", doc.mime);
        }
        db_doc_clear(&doc);
    }
    return 0;
}

int db_txn_delete(struct db_txn *txn, const char *hash_hex)
{
    struct db_conn *c = txn->c;
    struct db_doc doc = {0};
    sqlite3_stmt *s;
    int64_t id;
    int r = db_doc_id(c, hash_hex, &id);

    if (r == 0)
        r = db_load_doc(c, id, DB_WANT_MANIFEST, &doc);
    if (r != 0)
        goto out;
    /* The index drops its entry later, reading the text back through this manifest. */
    if (!(s = db_stmt(c, DB_S_REMOVAL_INSERT, db_docs_sql))) {
        r = -EIO;
        goto out;
    }
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int(s, 2, (int)doc.depth);
    sqlite3_bind_blob(s, 3, doc.root ? (const void *)doc.root : "", (int)doc.root_len,
                      SQLITE_STATIC);
    if ((r = db_step_done(c, s)) < 0)
        goto out;
    if (!(s = db_stmt(c, DB_S_DOC_DELETE, db_docs_sql))) {
        r = -EIO;
        goto out;
    }
    sqlite3_bind_int64(s, 1, id);
    r = db_step_done(c, s);
out:
    db_doc_clear(&doc);
    return r;
}

/* ---- what the search indexer reads ---- */

int db_query_joined(struct db_conn *c, enum db_stmt_id id, int64_t doc, int col, int col2,
                    char **out)
{
    sqlite3_stmt *s = db_stmt(c, id, db_docs_sql);
    char *buf = NULL;
    size_t len = 0;
    FILE *f;
    int rc;

    if (!s)
        return -EIO;
    f = open_memstream(&buf, &len);
    if (!f)
        return -ENOMEM;
    sqlite3_bind_int64(s, 1, doc);
    for (bool first = true; (rc = sqlite3_step(s)) == SQLITE_ROW; first = false) {
        const unsigned char *a = sqlite3_column_text(s, col);
        const unsigned char *b = col2 >= 0 ? sqlite3_column_text(s, col2) : NULL;
        fprintf(f, "%s%s%s%s", first ? "" : "\n", a ? (const char *)a : "", b ? " " : "",
                b ? (const char *)b : "");
    }
    sqlite3_reset(s);
    if (fclose(f) != 0) {
        free(buf);
        return -ENOMEM;
    }
    if (rc != SQLITE_DONE) {
        free(buf);
        return -EIO;
    }
    *out = buf;
    return 0;
}

void db_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int db_doc_names(struct db *db, int64_t rowid, char ***names, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    sqlite3_stmt *s;
    char **v = NULL;
    size_t count = 0, cap = 0;
    int rc, r = 0;

    *names = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_NAMES_OF_DOC, db_docs_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_int64(s, 1, rowid);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            char **grown = realloc(v, ncap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            v = grown;
            cap = ncap;
        }
        if (!(v[count] = db_column_strdup(s, 0))) {
            r = -ENOMEM;
            break;
        }
        count++;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (r != 0) {
        db_names_free(v, count);
        return r;
    }
    *names = v;
    *n = count;
    return 0;
}

void db_index_doc_clear(struct db_index_doc *d)
{
    free(d->names);
    free(d->tags);
    free(d->meta);
    free(d->root);
    memset(d, 0, sizeof(*d));
}

int db_index_doc_load(struct db *db, int64_t rowid, struct db_index_doc *d)
{
    struct db_conn *c = db_snapshot_begin(db);
    struct db_doc doc = {0};
    sqlite3_stmt *s;
    int r;

    memset(d, 0, sizeof(*d));
    if (!c)
        return -EIO;
    /* One read transaction: the fields and the generation belong together. */
    doc.name = strdup(""); /* keeps db_load_doc from looking up the newest name */
    r = doc.name ? db_load_doc(c, rowid, DB_WANT_MANIFEST, &doc) : -ENOMEM;
    if (r == 0 && (s = db_stmt(c, DB_S_DOC_BY_ID, db_docs_sql))) {
        sqlite3_bind_int64(s, 1, rowid);
        if (sqlite3_step(s) == SQLITE_ROW)
            d->gen = (uint64_t)sqlite3_column_int64(s, 9);
        sqlite3_reset(s);
    }
    if (r == 0 && ((r = db_query_joined(c, DB_S_NAMES_OF_DOC, rowid, 0, -1, &d->names)) < 0 ||
                   (r = db_query_joined(c, DB_S_TAGS_OF_DOC, rowid, 0, -1, &d->tags)) < 0 ||
                   (r = db_query_joined(c, DB_S_META_OF_DOC, rowid, 0, 1, &d->meta)) < 0))
        db_index_doc_clear(d);
    db_snapshot_end(db, c);
    if (r == 0) {
        d->rowid = rowid;
        memcpy(d->hash, doc.hash, sizeof(d->hash));
        d->text = doc.text;
        d->depth = doc.depth;
        d->root = doc.root;
        d->root_len = doc.root_len;
        doc.root = NULL; /* moved */
    }
    db_doc_clear(&doc);
    return r;
}

void db_removals_free(struct db_removal *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(r[i].root);
    free(r);
}

int db_removals(struct db *db, size_t max, struct db_removal **out, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_removal *v = NULL;
    sqlite3_stmt *s;
    size_t count = 0;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_REMOVALS, db_docs_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_int64(s, 1, (int64_t)max);
    if (max > 0 && !(v = calloc(max, sizeof(*v))))
        r = -ENOMEM;
    while (r == 0 && (rc = sqlite3_step(s)) == SQLITE_ROW && count < max) {
        struct db_removal *e = &v[count];
        size_t len = (size_t)sqlite3_column_bytes(s, 2);
        e->rowid = sqlite3_column_int64(s, 0);
        e->depth = (unsigned)sqlite3_column_int(s, 1);
        if (!manifest_root_valid(sqlite3_column_blob(s, 2), len, e->depth))
            continue; /* never written so: skipped rather than trusted */
        if (!(e->root = malloc(len ? len : 1))) {
            r = -ENOMEM;
            break;
        }
        if (len)
            memcpy(e->root, sqlite3_column_blob(s, 2), len);
        e->root_len = len;
        count++;
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (r < 0) {
        db_removals_free(v, count);
        return r;
    }
    *out = v;
    *n = count;
    return 0;
}

int db_txn_removal_done(struct db_txn *txn, int64_t rowid)
{
    sqlite3_stmt *s = db_stmt(txn->c, DB_S_REMOVAL_DELETE, db_docs_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, rowid);
    return db_step_done(txn->c, s);
}
