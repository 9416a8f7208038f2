/*
 * The shared bucket's gc marks (db.h, README "Several machines, one
 * bucket"): which writer's runs this daemon knows and how far each has
 * come here, and the packs they mark and forget.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"

static const char set_sql[] =
    "INSERT INTO marks(writer, gen, state, barrier, body, done, copied)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(writer, gen) DO UPDATE"
    " SET state = excluded.state, barrier = excluded.barrier, body = excluded.body,"
    " done = excluded.done, copied = excluded.copied";
static const char list_sql[] =
    "SELECT writer, gen, state, barrier, body, done, copied FROM marks ORDER BY writer, gen";
static const char pack_state_sql[] = "UPDATE packs SET state = 3 WHERE seq = ?1";
static const char chunks_mark_sql[] = "UPDATE chunks SET condemned = ?2 WHERE pack = ?1";
static const char segments_mark_sql[] = "UPDATE segments SET condemned = ?2 WHERE pack = ?1";
static const char relocate_sql[] = "UPDATE journal SET pack = ?2, off = ?3, len = ?4"
                                   " WHERE hash = ?1 AND pack IN (SELECT seq FROM packs"
                                   " WHERE state = 3)";
static const char *const forget_sql[] = {
    "DELETE FROM chunks WHERE pack = ?1",
    "DELETE FROM segments WHERE pack = ?1",
    "DELETE FROM journal WHERE pack = ?1",
    "DELETE FROM packs WHERE seq = ?1",
};

int db_txn_mark_set(struct db_txn *txn, const struct db_mark *m)
{
    sqlite3_stmt *s = db_conn_prepare(txn->c, set_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)m->writer);
    sqlite3_bind_int64(s, 2, (int64_t)m->gen);
    sqlite3_bind_int(s, 3, (int)m->state);
    sqlite3_bind_int64(s, 4, (int64_t)m->barrier);
    sqlite3_bind_blob(s, 5, m->body ? m->body : "", (int)m->body_len, SQLITE_STATIC);
    sqlite3_bind_blob(s, 6, m->done ? m->done : "", (int)m->done_len, SQLITE_STATIC);
    sqlite3_bind_int64(s, 7, (int64_t)m->copied);
    return db_step_done(txn->c, s);
}

/* A copy of a blob column, NUL-terminated. */
static int column_copy(sqlite3_stmt *s, int col, char **out, size_t *len)
{
    *len = (size_t)sqlite3_column_bytes(s, col);
    if (!(*out = malloc(*len + 1)))
        return -ENOMEM;
    if (*len)
        memcpy(*out, sqlite3_column_blob(s, col), *len);
    (*out)[*len] = '\0';
    return 0;
}

void db_marks_free(struct db_mark *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(m[i].body);
        free(m[i].done);
    }
    free(m);
}

int db_marks(struct db *db, struct db_mark **out, size_t *n)
{
    struct db_conn *c = db_reader_acquire(db);
    struct db_mark *v = NULL;
    size_t count = 0, cap = 0;
    sqlite3_stmt *s;
    int rc, r = 0;

    *out = NULL;
    *n = 0;
    if (!c)
        return -EIO;
    if (!(s = db_conn_prepare(c, list_sql))) {
        db_reader_release(db, c);
        return -EIO;
    }
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct db_mark *grown = realloc(v, ncap * sizeof(*grown));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            v = grown;
            cap = ncap;
        }
        struct db_mark *m = &v[count];
        memset(m, 0, sizeof(*m));
        m->writer = (uint64_t)sqlite3_column_int64(s, 0);
        m->gen = (uint64_t)sqlite3_column_int64(s, 1);
        m->state = (enum db_mark_state)sqlite3_column_int(s, 2);
        m->barrier = (uint64_t)sqlite3_column_int64(s, 3);
        m->copied = (uint64_t)sqlite3_column_int64(s, 6);
        count++;
        if ((r = column_copy(s, 4, &m->body, &m->body_len)) < 0 ||
            (r = column_copy(s, 5, &m->done, &m->done_len)) < 0)
            break;
    }
    if (r == 0 && rc != SQLITE_DONE)
        r = -EIO;
    sqlite3_reset(s);
    db_reader_release(db, c);
    if (r < 0) {
        db_marks_free(v, count);
        return r;
    }
    *out = v;
    *n = count;
    return 0;
}

int db_txn_pack_mark(struct db_txn *txn, uint64_t pack, bool *known)
{
    sqlite3_stmt *s = db_conn_prepare(txn->c, pack_state_sql);
    int r;

    *known = false;
    if (!s)
        return -EIO;
    sqlite3_bind_int64(s, 1, (int64_t)pack);
    if ((r = db_step_done(txn->c, s)) < 0)
        return r;
    if (sqlite3_changes(txn->c->sql) == 0)
        return 0;
    *known = true;
    for (int i = 0; i < 2; i++) {
        if (!(s = db_conn_prepare(txn->c, i ? segments_mark_sql : chunks_mark_sql)))
            return -EIO;
        sqlite3_bind_int64(s, 1, (int64_t)pack);
        sqlite3_bind_int64(s, 2, DB_CONDEMNED_MARKED);
        if ((r = db_step_done(txn->c, s)) < 0)
            return r;
    }
    return 0;
}

int db_txn_pack_forget(struct db_txn *txn, uint64_t pack, uint64_t *rows)
{
    *rows = 0;
    for (size_t i = 0; i < sizeof(forget_sql) / sizeof(forget_sql[0]); i++) {
        sqlite3_stmt *s = db_conn_prepare(txn->c, forget_sql[i]);
        int r;
        if (!s)
            return -EIO;
        sqlite3_bind_int64(s, 1, (int64_t)pack);
        if ((r = db_step_done(txn->c, s)) < 0)
            return r;
        if (i < 3)
            *rows += (uint64_t)sqlite3_changes(txn->c->sql);
    }
    return db_txn_pack_high(txn, pack);
}

int db_txn_journal_relocate(struct db_txn *txn, const uint8_t id[PROTO_HASH_LEN],
                            const struct db_loc *loc)
{
    sqlite3_stmt *s = db_conn_prepare(txn->c, relocate_sql);

    if (!s)
        return -EIO;
    sqlite3_bind_blob(s, 1, id, PROTO_HASH_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, (int64_t)loc->pack);
    sqlite3_bind_int64(s, 3, (int64_t)loc->off);
    sqlite3_bind_int64(s, 4, loc->len);
    return db_step_done(txn->c, s);
}
