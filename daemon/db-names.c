/*
 * Names as paths (PROTOCOL.md `delete`): a name can be taken off the
 * documents it points to, and a document then goes only when no name is
 * left pointing to it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/db-int.h"

const char *const db_names_sql[DB_S_COUNT_] = {
    /* Every document the name points to, its newest version first. */
    [DB_S_NAME_DOCS] = "SELECT d.hash, NOT EXISTS (SELECT 1 FROM names m WHERE m.doc = d.id"
                       " AND m.name != ?1) FROM names n JOIN documents d ON d.id = n.doc"
                       " WHERE n.name = ?1 GROUP BY d.id ORDER BY MAX(n.seq) DESC",
    [DB_S_NAME_UNLINK] = "DELETE FROM names WHERE name = ?1 AND doc = ?2",
    [DB_S_DOC_NAMED] = "SELECT doc FROM names WHERE doc = ?1 LIMIT 1",
};

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
    if (!(s = db_stmt(c, DB_S_NAME_DOCS))) {
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

static int doc_id(struct db_conn *c, const char *hash_hex, int64_t *id)
{
    sqlite3_stmt *s = db_stmt(c, DB_S_DOC_BY_HASH);

    if (!s)
        return -EIO;
    sqlite3_bind_text(s, 1, hash_hex, -1, SQLITE_STATIC);
    return db_query_id(c, s, id);
}

int db_txn_unname(struct db_txn *txn, const char *name, const char *hash_hex, int64_t *rowid)
{
    struct db_conn *c = txn->conn;
    sqlite3_stmt *s;
    int64_t id;
    int r;

    *rowid = 0;
    if ((r = doc_id(c, hash_hex, &id)) != 0)
        return r == DB_E_NOT_FOUND ? 0 : r;
    if (!(s = db_stmt(c, DB_S_NAME_UNLINK)))
        return -EIO;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, id);
    if ((r = db_step_done(c, s)) < 0 || sqlite3_changes(c->sql) == 0)
        return r;
    *rowid = id;
    /* Names are indexed for search: the document's entry is stale now. */
    if (!(s = db_stmt(c, DB_S_DOC_INDEX_BUMP)))
        return -EIO;
    sqlite3_bind_int64(s, 1, id);
    return db_step_done(c, s);
}

int db_txn_delete_if_unnamed(struct db_txn *txn, const char *hash_hex, bool *deleted)
{
    struct db_conn *c = txn->conn;
    sqlite3_stmt *s;
    int64_t id, named;
    int r;

    *deleted = false;
    if ((r = doc_id(c, hash_hex, &id)) != 0)
        return r == DB_E_NOT_FOUND ? 0 : r;
    if (!(s = db_stmt(c, DB_S_DOC_NAMED)))
        return -EIO;
    sqlite3_bind_int64(s, 1, id);
    r = db_query_id(c, s, &named);
    if (r != DB_E_NOT_FOUND)
        return r; /* 0: a name still points to it */
    if ((r = db_txn_delete(txn, hash_hex)) == 0)
        *deleted = true;
    return r;
}
