/*
 * Names as paths (PROTOCOL.md `delete`): a name can be taken off the
 * documents it points to, and a document then goes only when no name is
 * left pointing to it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"

/* A name in the path ?5 (NULL: any): ?5 itself, or under it (?7 is ?5 and '/', ?6 bytes). */
#define NAME_IN_PATH                                                                               \
    " AND (?5 IS NULL OR n.name = ?5 OR substr(CAST(n.name AS BLOB), 1, ?6) = CAST(?7 AS BLOB))"

const char *const db_names_sql[DB_S_COUNT_] = {
    /* Every document the name points to, its newest version first. */
    [DB_S_NAME_DOCS] = "SELECT d.hash, NOT EXISTS (SELECT 1 FROM names m WHERE m.doc = d.id"
                       " AND m.name != ?1) FROM names n JOIN documents d ON d.id = n.doc"
                       " WHERE n.name = ?1 GROUP BY d.id ORDER BY MAX(n.t) DESC, MAX(n.eid) DESC",
    [DB_S_NAME_UNLINK] = "DELETE FROM names WHERE name = ?1 AND doc = ?2",
    [DB_S_DOC_NAMED] = "SELECT doc FROM names WHERE doc = ?1 LIMIT 1",
    /*
     * Each name's newest version, in name order, after ?1, from the prefix ?4
     * on; with the tag ?3 (NULL: any); with a path ?5 (NULL: none), only the
     * name ?5 and those that start with ?7 (?5 and '/', ?6 bytes). The
     * caller stops at the first name without the prefix.
     */
    [DB_S_LIST_NAMES] =
        "SELECT n.doc, n.name, n.added, n.mode, n.mtime FROM names n WHERE n.name > ?1"
        " AND n.name >= ?4 AND n.seq = (SELECT x.seq FROM names x"
        " WHERE x.name = n.name ORDER BY x.t DESC, x.eid DESC LIMIT 1) AND (?3 IS NULL OR EXISTS "
        "(SELECT 1 FROM"
        " tags t WHERE t.doc = n.doc AND t.tag = ?3))" NAME_IN_PATH " ORDER BY n.name LIMIT ?2",
    /* du: the names from ?1 up to ?2 (NULL: no bound), in the path ?5 as above. */
    [DB_S_DU_NAMES] = "SELECT COUNT(*), COALESCE(SUM(d.size), 0) FROM names n JOIN documents d"
                      " ON d.id = n.doc WHERE n.name >= ?1 AND (?2 IS NULL OR n.name < ?2)"
                      " AND n.seq = (SELECT x.seq FROM names x WHERE x.name = n.name"
                      " ORDER BY x.t DESC, x.eid DESC LIMIT 1)" NAME_IN_PATH,
    [DB_S_DU_DOCS] = "SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(stored_size), 0)"
                     " FROM documents WHERE id IN (SELECT n.doc FROM names n WHERE n.name >= ?1"
                     " AND (?2 IS NULL OR n.name < ?2) AND n.seq = (SELECT x.seq"
                     " FROM names x WHERE x.name = n.name ORDER BY x.t DESC, x.eid DESC"
                     " LIMIT 1)" NAME_IN_PATH ")",
    /* Documents no name points to, in hash order after ?1, with the tag ?3 (NULL: any). */
    [DB_S_LIST_UNNAMED] = "SELECT d.id FROM documents d WHERE d.hash > ?1 AND NOT EXISTS"
                          " (SELECT 1 FROM names n WHERE n.doc = d.id) AND (?3 IS NULL OR"
                          " EXISTS (SELECT 1 FROM tags t WHERE t.doc = d.id AND t.tag = ?3))"
                          " ORDER BY d.hash LIMIT ?2",
    /* A name's versions, newest first (NAME@{N} is the one at offset N). */
    [DB_S_NAME_VERSION] =
        "SELECT doc, mode, mtime FROM names WHERE name = ?1 ORDER BY t DESC, eid DESC"
        " LIMIT 1 OFFSET ?2",
    [DB_S_NAME_VERSIONS] = "SELECT d.hash, d.size, n.added, n.mode, n.mtime FROM names n"
                           " JOIN documents d"
                           " ON d.id = n.doc WHERE n.name = ?1 ORDER BY n.t DESC, n.eid DESC"
                           " LIMIT ?2 OFFSET ?3",
    [DB_S_NAME_VERSION_COUNT] = "SELECT COUNT(*) FROM names WHERE name = ?1",
};

/* Versions a ref can reach back: NAME@{0} to NAME@{DB_MAX_VERSION}. */
#define DB_MAX_VERSION 999999

int db_resolve_version(struct db_conn *c, const char *ref, size_t len, int64_t *id,
                       struct db_fattr *fa)
{
    size_t open, digits;
    uint64_t n = 0;
    sqlite3_stmt *s;

    /* ref ends in "@{DIGITS}": the digits are ref[open, len - 1), the name ref[0, open - 2). */
    if (len < 5 || ref[len - 1] != '}')
        return DB_E_NOT_FOUND;
    open = len - 1;
    while (open > 0 && ref[open - 1] >= '0' && ref[open - 1] <= '9')
        open--;
    digits = len - 1 - open;
    if (digits == 0 || digits > 6 || open < 3 || ref[open - 1] != '{' || ref[open - 2] != '@')
        return DB_E_NOT_FOUND;
    for (size_t i = open; i < len - 1; i++)
        n = n * 10 + (uint64_t)(ref[i] - '0');
    if (n > DB_MAX_VERSION || !(s = db_stmt(c, DB_S_NAME_VERSION, db_names_sql)))
        return n > DB_MAX_VERSION ? DB_E_NOT_FOUND : -EIO;
    sqlite3_bind_text(s, 1, ref, (int)(open - 2), SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, (int64_t)n);
    return db_query_name_row(c, s, id, fa);
}

int db_name_versions(struct db *db, const char *name, uint64_t offset, uint64_t limit,
                     struct db_version **out, size_t *n, uint64_t *total)
{
    struct db_conn *c = db_snapshot_begin(db);
    struct db_version *v = NULL;
    size_t count = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    *total = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_NAME_VERSION_COUNT, db_names_sql))) {
        r = -EIO;
        goto out;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW)
        *total = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (*total == 0) {
        r = DB_E_NOT_FOUND;
        goto out;
    }
    if (!(s = db_stmt(c, DB_S_NAME_VERSIONS, db_names_sql))) {
        r = -EIO;
        goto out;
    }
    if (limit > 0 && !(v = calloc(limit, sizeof(*v)))) {
        r = -ENOMEM;
        goto out;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)limit);
    sqlite3_bind_int64(s, 3, offset > INT64_MAX ? INT64_MAX : (int64_t)offset);
    while (count < limit && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        const unsigned char *hash = sqlite3_column_text(s, 0);
        snprintf(v[count].hash, sizeof(v[count].hash), "%s", hash ? (const char *)hash : "");
        v[count].size = (uint64_t)sqlite3_column_int64(s, 1);
        v[count].named = sqlite3_column_int64(s, 2);
        db_fattr_column(s, 3, &v[count].fattr);
        v[count].version = offset + count;
        count++;
    }
    sqlite3_reset(s);
out:
    db_snapshot_end(db, c);
    if (r != 0) {
        free(v);
        return r;
    }
    *out = v;
    *n = count;
    return 0;
}

int db_name_docs(struct db *db, const char *name, struct db_name_doc **out, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_name_doc *v = NULL;
    size_t cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, DB_S_NAME_DOCS, db_names_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const unsigned char *hash = sqlite3_column_text(s, 0);
        if (*n == cap) {
            struct db_name_doc *grown = realloc(v, (cap = cap ? cap * 2 : 8) * sizeof(*v));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            v = grown;
        }
        if (!hash || strlen((const char *)hash) != PROTO_HASH_HEX) {
            r = -EIO;
            break;
        }
        memcpy(v[*n].hash, hash, PROTO_HASH_HEX + 1);
        v[*n].orphan = sqlite3_column_int(s, 1) != 0;
        (*n)++;
    }
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0 && *n == 0)
        r = DB_E_NOT_FOUND;
    if (r != 0) {
        free(v);
        *n = 0;
        return r;
    }
    *out = v;
    return 0;
}

int db_txn_unname(struct db_txn *txn, const char *name, const char *hash_hex, int64_t *rowid)
{
    struct db_conn *c = txn->c;
    sqlite3_stmt *s;
    int64_t id;
    int r;

    *rowid = 0;
    if ((r = db_doc_id(c, hash_hex, &id)) != 0)
        return r == DB_E_NOT_FOUND ? 0 : r;
    if (!(s = db_stmt(c, DB_S_NAME_UNLINK, db_names_sql)))
        return -EIO;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, id);
    if ((r = db_step_done(c, s)) < 0 || sqlite3_changes(c->sql) == 0)
        return r;
    *rowid = id;
    /* Names are indexed for search: the document's entry is stale now. */
    if (!(s = db_stmt(c, DB_S_DOC_INDEX_BUMP, db_docs_sql)))
        return -EIO;
    sqlite3_bind_int64(s, 1, id);
    return db_step_done(c, s);
}

int db_txn_delete_if_unnamed(struct db_txn *txn, const char *hash_hex, bool *deleted)
{
    struct db_conn *c = txn->c;
    sqlite3_stmt *s;
    int64_t id, named;
    int r;

    *deleted = false;
    if ((r = db_doc_id(c, hash_hex, &id)) != 0)
        return r == DB_E_NOT_FOUND ? 0 : r;
    if (!(s = db_stmt(c, DB_S_DOC_NAMED, db_names_sql)))
        return -EIO;
    sqlite3_bind_int64(s, 1, id);
    r = db_query_id(c, s, &named);
    if (r != DB_E_NOT_FOUND)
        return r; /* 0: a name still points to it */
    if ((r = db_txn_delete(txn, hash_hex)) == 0)
        *deleted = true;
    return r;
}

struct row {
    int64_t id, added;
    char *name;
    struct db_fattr fattr;
};

struct rows {
    struct row *v;
    size_t n, cap;
};

/* Takes `row` (its name too, freed when it cannot). */
static int rows_push(struct rows *rw, const struct row *row)
{
    if (rw->n == rw->cap) {
        size_t cap = rw->cap ? rw->cap * 2 : 64;
        struct row *v = realloc(rw->v, cap * sizeof(*v));
        if (!v) {
            free(row->name);
            return -ENOMEM;
        }
        rw->v = v;
        rw->cap = cap;
    }
    rw->v[rw->n++] = *row;
    return 0;
}

static void rows_free(struct rows *rw)
{
    for (size_t i = 0; i < rw->n; i++)
        free(rw->v[i].name);
    free(rw->v);
}

/* Loads the documents of the rows (with their names, unless `unnamed`) in the snapshot c. */
static int load_rows(struct db_conn *c, struct rows *rw, bool unnamed, struct db_doc **docs)
{
    struct db_doc *out = calloc(rw->n ? rw->n : 1, sizeof(*out));
    int r = out ? 0 : -ENOMEM;

    for (size_t i = 0; r == 0 && i < rw->n; i++) {
        if (!unnamed) {
            out[i].name = rw->v[i].name; /* handed over; db_load_doc keeps a name it is given */
            rw->v[i].name = NULL;
            out[i].named = rw->v[i].added;
            out[i].fattr = rw->v[i].fattr;
        }
        r = db_load_doc(c, rw->v[i].id, DB_WANT_TAGS, &out[i]);
    }
    if (r < 0) {
        db_docs_free(out, rw->n);
        return r;
    }
    *docs = out;
    return 0;
}

/* Binds ?5, ?6 and ?7 of NAME_IN_PATH: the path, or NULL for any name. */
static int bind_path(sqlite3_stmt *s, const char *path)
{
    size_t len = path ? strlen(path) : 0;
    char *under;

    if (!path || len == 0 || path[len - 1] == '/')
        return 0; /* "" or "dir/": the prefix alone says it */
    if (!(under = malloc(len + 2)))
        return -ENOMEM;
    memcpy(under, path, len);
    memcpy(under + len, "/", 2);
    sqlite3_bind_text(s, 5, path, (int)len, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 6, (int64_t)len + 1);
    sqlite3_bind_text(s, 7, under, (int)len + 1, SQLITE_TRANSIENT);
    free(under);
    return 0;
}

int db_list_names(struct db *db, const struct db_names_query *q, struct db_doc **docs, size_t *n)
{
    /* One snapshot, as db_list: a name removed meanwhile is listed whole or not at all. */
    struct db_conn *c = db_snapshot_begin(db);
    size_t plen = q->prefix ? strlen(q->prefix) : 0;
    struct rows rw = {0};
    sqlite3_stmt *s;
    int rc, r = 0;

    *docs = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_stmt(c, q->unnamed ? DB_S_LIST_UNNAMED : DB_S_LIST_NAMES, db_names_sql))) {
        db_snapshot_end(db, c);
        return -EIO;
    }
    sqlite3_bind_text(s, 1, q->after ? q->after : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(s, 2, (int64_t)q->limit);
    if (q->tag)
        sqlite3_bind_text(s, 3, q->tag, -1, SQLITE_TRANSIENT);
    if (!q->unnamed) {
        sqlite3_bind_text(s, 4, q->prefix ? q->prefix : "", -1, SQLITE_TRANSIENT);
        if ((r = bind_path(s, q->path ? q->prefix : NULL)) < 0) {
            db_snapshot_end(db, c);
            return r;
        }
    }
    /* Collect first: db_load_doc reuses statements, so the cursor must be finished. */
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct row row = {.id = sqlite3_column_int64(s, 0)};
        if (!q->unnamed) {
            const char *v = (const char *)sqlite3_column_text(s, 1);
            /* Names sort bytewise: past the first that lacks the prefix, none has it. */
            if (!v || strncmp(v, q->prefix ? q->prefix : "", plen) != 0) {
                rc = SQLITE_DONE;
                break;
            }
            if (!(row.name = strdup(v))) {
                r = -ENOMEM;
                break;
            }
            row.added = sqlite3_column_int64(s, 2);
            db_fattr_column(s, 3, &row.fattr);
        }
        if ((r = rows_push(&rw, &row)) < 0)
            break;
    }
    sqlite3_reset(s);
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    if (r == 0)
        r = load_rows(c, &rw, q->unnamed, docs);
    db_snapshot_end(db, c);
    if (r == 0)
        *n = rw.n;
    rows_free(&rw);
    return r;
}

/*
 * The least string above every string that starts with `prefix`: the
 * prefix with its last byte below 0xff raised by one (bytes after it
 * dropped). False when there is none (empty, or all 0xff).
 */
static bool prefix_bound(const char *prefix, char *bound, size_t size)
{
    size_t len = strlen(prefix);

    if (len >= size)
        return false;
    memcpy(bound, prefix, len + 1);
    while (len > 0 && (unsigned char)bound[len - 1] == 0xff)
        bound[--len] = '\0';
    if (len == 0)
        return false;
    bound[len - 1] = (char)((unsigned char)bound[len - 1] + 1);
    return true;
}

int db_du(struct db *db, const char *prefix, bool path, struct db_du *du)
{
    /* One snapshot: both sums see the same names. */
    struct db_conn *c = db_snapshot_begin(db);
    char bound[PROTO_MAX_REF + 1];
    bool bounded = prefix && prefix_bound(prefix, bound, sizeof(bound));
    sqlite3_stmt *s;
    int r = 0;

    memset(du, 0, sizeof(*du));
    if (!c)
        return -EIO;
    for (int q = 0; r == 0 && q < 2; q++) {
        if (!(s = db_stmt(c, q == 0 ? DB_S_DU_NAMES : DB_S_DU_DOCS, db_names_sql))) {
            r = -EIO;
            break;
        }
        sqlite3_bind_text(s, 1, prefix ? prefix : "", -1, SQLITE_TRANSIENT);
        if (bounded)
            sqlite3_bind_text(s, 2, bound, -1, SQLITE_TRANSIENT);
        if ((r = bind_path(s, path ? prefix : NULL)) < 0) {
            sqlite3_reset(s);
            break;
        }
        if (sqlite3_step(s) != SQLITE_ROW) {
            r = -EIO;
        } else if (q == 0) {
            du->names = (uint64_t)sqlite3_column_int64(s, 0);
            du->logical_bytes = (uint64_t)sqlite3_column_int64(s, 1);
        } else {
            du->documents = (uint64_t)sqlite3_column_int64(s, 0);
            du->unique_bytes = (uint64_t)sqlite3_column_int64(s, 1);
            du->stored_bytes = (uint64_t)sqlite3_column_int64(s, 2);
        }
        sqlite3_reset(s);
    }
    db_snapshot_end(db, c);
    return r;
}
