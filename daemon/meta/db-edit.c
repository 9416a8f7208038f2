/*
 * A document's tags and metadata: merged by an add, changed by an edit
 * (`cairn tag`, `cairn meta`; objects.h's edit entry).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"

const char *const db_edit_sql[DB_S_COUNT_] = {
    [DB_S_TAG_DELETE] = "DELETE FROM tags WHERE doc = ?1 AND tag = ?2",
    [DB_S_META_DELETE] = "DELETE FROM meta WHERE doc = ?1 AND key = ?2",
};

int db_merge_tags_meta(struct db_conn *c, int64_t id, const char *const *tags, size_t ntags,
                       const char *const *keys, const char *const *values, size_t nmeta,
                       bool *changed)
{
    sqlite3_stmt *s;
    int r;

    for (size_t i = 0; i < ntags; i++) {
        if (!(s = db_stmt(c, DB_S_TAG_INSERT, db_docs_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, tags[i], -1, SQLITE_STATIC);
        if ((r = db_step_done(c, s)) < 0)
            return r;
        *changed |= sqlite3_changes(c->sql) > 0;
    }
    for (size_t i = 0; i < nmeta; i++) {
        bool same = false;
        if (!(s = db_stmt(c, DB_S_META_GET, db_docs_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, keys[i], -1, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW) {
            const unsigned char *v = sqlite3_column_text(s, 0);
            same = v && strcmp((const char *)v, values[i]) == 0;
        }
        sqlite3_reset(s);
        if (same)
            continue;
        if (!(s = db_stmt(c, DB_S_META_UPSERT, db_docs_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, keys[i], -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, values[i], -1, SQLITE_STATIC);
        if ((r = db_step_done(c, s)) < 0)
            return r;
        *changed = true;
    }
    return 0;
}

/* Deletes the rows of `stmt` (?1 the document, ?2 each of `v`); *changed when one went. */
static int remove_rows(struct db_conn *c, enum db_stmt_id stmt, int64_t id, const char *const *v,
                       size_t n, bool *changed)
{
    sqlite3_stmt *s;
    int r;

    for (size_t i = 0; i < n; i++) {
        if (!(s = db_stmt(c, stmt, db_edit_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, v[i], -1, SQLITE_STATIC);
        if ((r = db_step_done(c, s)) < 0)
            return r;
        *changed |= sqlite3_changes(c->sql) > 0;
    }
    return 0;
}

int db_txn_edit(struct db_txn *txn, const char *hash_hex, struct db_edit *ed)
{
    struct db_conn *c = txn->c;
    bool changed = false;
    sqlite3_stmt *s;
    int64_t id;
    int r;

    ed->rowid = 0;
    ed->changed = false;
    if ((r = db_doc_id(c, hash_hex, &id)) != 0)
        return r;
    /* Removals first: an edit that adds and removes one tag keeps it. */
    if ((r = remove_rows(c, DB_S_TAG_DELETE, id, ed->untags, ed->nuntags, &changed)) < 0 ||
        (r = remove_rows(c, DB_S_META_DELETE, id, ed->unmeta, ed->nunmeta, &changed)) < 0 ||
        (r = db_merge_tags_meta(c, id, ed->tags, ed->ntags, ed->meta_keys, ed->meta_values,
                                ed->nmeta, &changed)) < 0)
        return r;
    if (changed) {
        /* Tags and metadata are indexed for search: the document's entry is stale. */
        if (!(s = db_stmt(c, DB_S_DOC_INDEX_BUMP, db_docs_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, id);
        if ((r = db_step_done(c, s)) < 0)
            return r;
    }
    ed->rowid = id;
    ed->changed = changed;
    return 0;
}
