/*
 * The database's core: the schema, connections and their statement cache,
 * the reader pool and the group-committing writer. The queries are in
 * db-docs.c, db-names.c, db-store.c and db-gc.c; db-int.h is what they
 * share. Other parts run queries of their own on reader connections
 * (db_conn_prepare: the search index's, daemon/search/fts.c).
 */
#include "daemon/meta/db.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "daemon/meta/db-int.h"
#include "daemon/base/log.h"
#include "proto/util.h"
#include "storage/backend.h"

static const char schema_sql[] =
    /*
     * id is never reused (AUTOINCREMENT): the search index keys on it and may
     * still hold a deleted document's entry for a moment.
     */
    "CREATE TABLE IF NOT EXISTS documents("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " hash TEXT NOT NULL UNIQUE,"
    " size INTEGER NOT NULL,"
    " stored_size INTEGER NOT NULL,"
    " chunks INTEGER NOT NULL,"
    " mime TEXT NOT NULL,"
    " created INTEGER NOT NULL,"
    " text INTEGER NOT NULL,"
    " depth INTEGER NOT NULL,"
    " manifest BLOB NOT NULL,"
    " index_gen INTEGER NOT NULL);"
    /*
     * A name's versions, ordered by the events that made them (the journal
     * entry's time, then its id): the same order on every daemon, whatever
     * order the events arrived in.
     */
    "CREATE TABLE IF NOT EXISTS names("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL,"
    " doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
    " added INTEGER NOT NULL,"
    " t INTEGER NOT NULL,"
    " eid BLOB NOT NULL,"
    /* The file the version was added from (add -r): st_mode (0: none) and mtime in ns. */
    " mode INTEGER NOT NULL DEFAULT 0,"
    " mtime INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS names_by_name ON names(name, t, eid);"
    "CREATE INDEX IF NOT EXISTS names_by_doc ON names(doc, t, eid);"
    "CREATE TABLE IF NOT EXISTS tags("
    " doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
    " tag TEXT NOT NULL,"
    " PRIMARY KEY(doc, tag)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS tags_by_tag ON tags(tag, doc);"
    "CREATE TABLE IF NOT EXISTS meta("
    " doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,"
    " key TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " PRIMARY KEY(doc, key)) WITHOUT ROWID;"
    /*
     * The writers whose packs the database knows, by the local index that a
     * pack's number carries (DB_PACK_NUMBER); index 0 is writer 0.
     */
    "CREATE TABLE IF NOT EXISTS writers("
    " idx INTEGER PRIMARY KEY,"
    " id INTEGER NOT NULL UNIQUE);"
    /* Where the records are: packs, and the rows that point into them. */
    "CREATE TABLE IF NOT EXISTS packs("
    " seq INTEGER PRIMARY KEY,"
    " size INTEGER NOT NULL,"
    " state INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS chunks("
    " hash BLOB PRIMARY KEY,"
    " pack INTEGER NOT NULL,"
    " off INTEGER NOT NULL,"
    " len INTEGER NOT NULL,"
    " sub INTEGER NOT NULL,"
    " size INTEGER NOT NULL,"
    " stored INTEGER NOT NULL,"
    " condemned INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS chunks_by_pack ON chunks(pack, off);"
    "CREATE TABLE IF NOT EXISTS segments("
    " hash BLOB PRIMARY KEY,"
    " pack INTEGER NOT NULL,"
    " off INTEGER NOT NULL,"
    " len INTEGER NOT NULL,"
    " size INTEGER NOT NULL,"
    " condemned INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS segments_by_pack ON segments(pack, off);"
    "CREATE TABLE IF NOT EXISTS journal("
    " hash BLOB PRIMARY KEY,"
    " pack INTEGER NOT NULL,"
    " off INTEGER NOT NULL,"
    " len INTEGER NOT NULL,"
    " doc BLOB NOT NULL,"
    " time INTEGER NOT NULL,"
    " op INTEGER NOT NULL,"
    /* 0: found in a pack by replay, its event not applied yet (replay.c) */
    " applied INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS journal_by_doc ON journal(doc, time);"
    "CREATE INDEX IF NOT EXISTS journal_pending ON journal(time) WHERE applied = 0;"
    "CREATE INDEX IF NOT EXISTS journal_by_pack ON journal(pack, off);"
    /*
     * Copies of add entries that a pack holds besides the one their row
     * names, found by replay: what a repack cut before its commit left in the
     * open pack, or a second copy a rebuild reads. Dead weight that no repack
     * copies, but a rebuild reads every pack: while one holds such an add, its
     * document's later deletes are not dead (db-gc.c). They go with their pack.
     */
    "CREATE TABLE IF NOT EXISTS journal_copies("
    " pack INTEGER NOT NULL,"
    " off INTEGER NOT NULL,"
    " doc BLOB NOT NULL,"
    " time INTEGER NOT NULL,"
    " PRIMARY KEY(pack, off)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS journal_copies_by_doc ON journal_copies(doc, time);"
    /* Deleted documents the search index still has to drop (daemon/search/indexer.c). */
    "CREATE TABLE IF NOT EXISTS search_removals("
    " doc INTEGER PRIMARY KEY,"
    " depth INTEGER NOT NULL,"
    " manifest BLOB NOT NULL);"
    /*
     * The shared bucket's gc marks this daemon knows (db-marks.c): its own
     * runs' and the other writers', by writer id and run, with how far each
     * has come here.
     */
    "CREATE TABLE IF NOT EXISTS marks("
    " writer INTEGER NOT NULL,"
    " gen INTEGER NOT NULL,"
    " state INTEGER NOT NULL,"
    " barrier INTEGER NOT NULL,"
    " body BLOB NOT NULL,"
    " done BLOB NOT NULL,"
    " copied INTEGER NOT NULL,"
    " PRIMARY KEY(writer, gen)) WITHOUT ROWID;"
    /*
     * Chunk copies verify found damaged (store/verify.c): to an add, a chunk
     * whose row points at one is not stored, so the add writes a fresh copy,
     * and the row moves to it (db_txn_chunk_put).
     */
    "CREATE TABLE IF NOT EXISTS bad_chunks("
    " hash BLOB NOT NULL,"
    " pack INTEGER NOT NULL,"
    " off INTEGER NOT NULL,"
    " PRIMARY KEY(hash, pack, off)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS state("
    " key TEXT PRIMARY KEY,"
    " value INTEGER NOT NULL) WITHOUT ROWID;";

sqlite3_stmt *db_stmt(struct db_conn *c, enum db_stmt_id id, const char *const sql[DB_S_COUNT_])
{
    sqlite3_stmt *s = c->stmts[id];
    if (s) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return s;
    }
    if (sqlite3_prepare_v3(c->sql, sql[id], -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK) {
        log_error("database: cannot prepare statement: %s", sqlite3_errmsg(c->sql));
        return NULL;
    }
    c->stmts[id] = s;
    return s;
}

static void close_conn(struct db_conn *c)
{
    if (!c)
        return;
    for (int i = 0; i < DB_S_COUNT_; i++)
        sqlite3_finalize(c->stmts[i]);
    for (int i = 0; i < DB_CONN_PREPARED; i++)
        sqlite3_finalize(c->prepared[i]);
    sqlite3_close(c->sql);
    free(c);
}

void db_conn_close(struct db_conn *c)
{
    close_conn(c);
}

int db_errno(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_FULL:
        return -ENOSPC; /* a full disk says so, as a failed pack write does */
    case SQLITE_NOMEM:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

static int exec(struct db_conn *c, const char *sql)
{
    char *msg = NULL;
    int rc = sqlite3_exec(c->sql, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        log_error("database: %s: %s", sql, msg ? msg : "error");
        sqlite3_free(msg);
        return db_errno(rc);
    }
    return 0;
}

/*
 * A connection to the database: the writer's reads and writes, or a
 * reader's. A read-only database (db_open_read_only) opens every
 * connection, the writer's too, by its read-only URI.
 */
static int open_conn(const struct db *db, bool writer, struct db_conn **out)
{
    struct db_conn *c = calloc(1, sizeof(*c));
    int flags = SQLITE_OPEN_NOMUTEX;

    if (!c)
        return -ENOMEM;
    writer = writer && !db->ro_uri;
    flags |= db->ro_uri ? SQLITE_OPEN_READONLY | SQLITE_OPEN_URI
             : writer   ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                        : SQLITE_OPEN_READONLY;
    c->read_only = db->ro_uri != NULL;
    if (sqlite3_open_v2(db->ro_uri ? db->ro_uri : db->path, &c->sql, flags, NULL) != SQLITE_OK) {
        log_error("database %s: %s", db->path, c->sql ? sqlite3_errmsg(c->sql) : "cannot open");
        close_conn(c);
        return -EIO;
    }
    sqlite3_busy_timeout(c->sql, 10000);
    sqlite3_extended_result_codes(c->sql, 1);
    if (writer) {
        /*
         * NORMAL: a commit is not synced, because what it records is durable in
         * a pack already and is replayed from there after a crash. Writes that
         * must stand on their own ask for a durable commit (db_write.durable).
         */
        if (exec(c, "PRAGMA page_size=1024") || exec(c, "PRAGMA journal_mode=WAL") ||
            exec(c, backend_sync_disabled() ? "PRAGMA synchronous=OFF"
                                            : "PRAGMA synchronous=NORMAL") ||
            exec(c, "PRAGMA foreign_keys=ON") || exec(c, "PRAGMA temp_store=MEMORY")) {
            close_conn(c);
            return -EIO;
        }
    }
    *out = c;
    return 0;
}

int db_conn_open_writable(const struct db *db, struct db_conn **out)
{
    return open_conn(db, true, out);
}

struct db_conn *db_reader_acquire(struct db *db)
{
    struct db_conn *c = NULL;

    pthread_mutex_lock(&db->pool_lock);
    if (db->pool_free) {
        c = db->pool_free;
        db->pool_free = c->next_free;
    }
    pthread_mutex_unlock(&db->pool_lock);
    if (c)
        return c;
    if (open_conn(db, false, &c) < 0)
        return NULL;
    pthread_mutex_lock(&db->pool_lock);
    if (db->pool_n == db->pool_cap) {
        size_t ncap = db->pool_cap ? db->pool_cap * 2 : 8;
        struct db_conn **all = realloc(db->pool_all, ncap * sizeof(*all));
        if (!all) {
            pthread_mutex_unlock(&db->pool_lock);
            close_conn(c);
            return NULL;
        }
        db->pool_all = all;
        db->pool_cap = ncap;
    }
    db->pool_all[db->pool_n++] = c;
    pthread_mutex_unlock(&db->pool_lock);
    return c;
}

void db_reader_release(struct db *db, struct db_conn *c)
{
    /* Leave no statement holding a read transaction open between uses. */
    for (int i = 0; i < DB_S_COUNT_; i++) {
        if (c->stmts[i])
            sqlite3_reset(c->stmts[i]);
    }
    for (int i = 0; i < DB_CONN_PREPARED; i++) {
        if (c->prepared[i])
            sqlite3_reset(c->prepared[i]);
    }
    pthread_mutex_lock(&db->pool_lock);
    c->next_free = db->pool_free;
    db->pool_free = c;
    pthread_mutex_unlock(&db->pool_lock);
}

struct sqlite3 *db_conn_sqlite(struct db_conn *c)
{
    return c->sql;
}

struct sqlite3_stmt *db_conn_prepare(struct db_conn *c, const char *sql)
{
    sqlite3_stmt *s;

    for (int i = 0; i < DB_CONN_PREPARED; i++) {
        if (c->prepared[i] && strcmp(sqlite3_sql(c->prepared[i]), sql) == 0) {
            sqlite3_reset(c->prepared[i]);
            sqlite3_clear_bindings(c->prepared[i]);
            return c->prepared[i];
        }
    }
    if (sqlite3_prepare_v3(c->sql, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK) {
        log_error("database: cannot prepare statement: %s", sqlite3_errmsg(c->sql));
        return NULL;
    }
    unsigned slot = c->prepared_next++ % DB_CONN_PREPARED;
    sqlite3_finalize(c->prepared[slot]);
    c->prepared[slot] = s;
    return s;
}

/* Whether PATH-wal holds frames (commits not yet copied into PATH). */
static bool wal_has_frames(const char *path)
{
    char wal[PATH_MAX + 8];
    struct stat st;

    snprintf(wal, sizeof(wal), "%s-wal", path);
    return stat(wal, &st) == 0 && st.st_size > 0;
}

int db_conn_attach(struct db_conn *c, const char *schema, const char *path)
{
    char *sql;
    int rc;

    if (strcmp(c->attached, schema) == 0)
        return 0;
    if (c->attached[0] || strlen(schema) >= sizeof(c->attached))
        return -EINVAL;
    /* A read-only daemon's: immutable, as its own database, unless commits wait in a -wal. */
    sql = sqlite3_mprintf("ATTACH 'file:%q?mode=ro%s' AS %w", path,
                          c->read_only && !wal_has_frames(path) ? "&immutable=1" : "", schema);
    if (!sql)
        return -ENOMEM;
    rc = sqlite3_exec(c->sql, sql, NULL, NULL, NULL);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) {
        log_error("database: cannot attach %s: %s", path, sqlite3_errmsg(c->sql));
        return -EIO;
    }
    snprintf(c->attached, sizeof(c->attached), "%s", schema);
    return 0;
}

struct db_conn *db_snapshot_begin(struct db *db)
{
    struct db_conn *c = db_reader_acquire(db);

    if (c && sqlite3_exec(c->sql, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        db_reader_release(db, c);
        return NULL;
    }
    return c;
}

void db_snapshot_end(struct db *db, struct db_conn *c)
{
    sqlite3_exec(c->sql, "COMMIT", NULL, NULL, NULL);
    db_reader_release(db, c);
}

/*
 * Format 1 (one object per chunk, reference counts) is converted by
 * upgrade.c; format 2 (names ordered by arrival, packs of one writer) is
 * made anew from the packs; a newer format than this build knows is refused.
 */
static int check_format(struct db_conn *c, int *found)
{
    sqlite3_stmt *s;
    int version = -1;

    if (sqlite3_prepare_v2(c->sql, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK)
        return -EIO;
    if (sqlite3_step(s) == SQLITE_ROW)
        version = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    if (version < 0)
        return -EIO;
    if (version == 1)
        return DB_E_OLD_FORMAT;
    if (version == 2)
        return DB_E_FORMAT2;
    if (version > DB_FORMAT) {
        log_error("database: format %d is newer than this cairnd (format %d)", version, DB_FORMAT);
        return -EPROTO;
    }
    *found = version;
    return 0;
}

/*
 * Makes the tables of this format, and brings a database of format 3 (names
 * without their files' mode and mtime) up to it in one transaction.
 */
static int make_schema(struct db_conn *c, int version)
{
    static const char format3_to_4[] =
        "ALTER TABLE names ADD COLUMN mode INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE names ADD COLUMN mtime INTEGER NOT NULL DEFAULT 0;";
    int r;

    if ((r = exec(c, "BEGIN IMMEDIATE")) < 0)
        return r;
    if ((version == 3 && (r = exec(c, format3_to_4)) < 0) || (r = exec(c, schema_sql)) < 0 ||
        (r = exec(c, "PRAGMA user_version=" DB_FORMAT_STR)) < 0 || (r = exec(c, "COMMIT")) < 0) {
        exec(c, "ROLLBACK");
        return r;
    }
    return 0;
}

/*
 * "file:PATH?mode=ro", PATH percent-encoded where a URI would read it
 * otherwise, and with immutable=1 where asked: the caller's sqlite3_mprintf
 * string, or NULL.
 */
static char *read_only_uri(const char *path, bool immutable)
{
    size_t n = strlen(path);
    char *enc = malloc(3 * n + 1), *o = enc, *uri;

    if (!enc)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
        if (*p == '?' || *p == '#' || *p == '%' || *p <= 0x20 || *p >= 0x7f)
            o += sprintf(o, "%%%02X", *p);
        else
            *o++ = (char)*p;
    }
    *o = '\0';
    uri = sqlite3_mprintf("file:%s?mode=ro%s", enc, immutable ? "&immutable=1" : "");
    free(enc);
    return uri;
}

/*
 * The URI a read-only connection opens PATH by, in *uri: 0, -EUCLEAN when
 * its -wal file holds commits that cannot be read (SQLite cannot make the
 * shared-memory file it needs for them: a read-only file system), or
 * another negative errno. Nothing can change the file meanwhile
 * (cairnd.lock), so without such commits it is opened immutable: SQLite
 * then makes no -shm or -wal file beside it, and takes no lock.
 */
static int choose_read_only_uri(const char *path, char **uri)
{
    bool wal = wal_has_frames(path);
    sqlite3 *sql = NULL;
    int rc;

    if (access(path, F_OK) < 0)
        return -errno;
    if (!(*uri = read_only_uri(path, !wal)))
        return -ENOMEM;
    rc = sqlite3_open_v2(*uri, &sql, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(sql, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
    sqlite3_close(sql);
    if (rc == SQLITE_OK)
        return 0;
    sqlite3_free(*uri);
    *uri = NULL;
    return wal && (rc & 0xff) == SQLITE_CANTOPEN ? -EUCLEAN : -EIO;
}

/* db_new, or with `read_only` db_open_read_only: the same results. */
static int db_open(struct db **out, uv_loop_t *loop, const char *path, bool read_only)
{
    struct db *db = calloc(1, sizeof(*db));
    int r, version = 0;

    if (!db)
        return -ENOMEM;
    db->loop = loop;
    db->path = strdup(path);
    pthread_mutex_init(&db->pool_lock, NULL);
    r = db->path ? 0 : -ENOMEM;
    if (r == 0 && read_only)
        r = choose_read_only_uri(path, &db->ro_uri);
    if (r == 0)
        r = open_conn(db, true, &db->writer);
    if (r == 0)
        r = check_format(db->writer, &version);
    /* A read-only database is not brought up to this format: that is a write. */
    if (r == 0 && read_only && version != DB_FORMAT)
        r = 1;
    if (r == 0 && !read_only && make_schema(db->writer, version) < 0)
        r = -EIO;
    if (r == 0)
        r = db_writers_load(db);
    if (r == 0 && !read_only)
        r = db_ckpt_start(db);
    if (r != 0) {
        db_free(db);
        return r;
    }
    *out = db;
    return 0;
}

int db_new(struct db **out, uv_loop_t *loop, const char *path)
{
    return db_open(out, loop, path, false);
}

int db_open_read_only(struct db **out, uv_loop_t *loop, const char *path)
{
    return db_open(out, loop, path, true);
}

bool db_read_only(const struct db *db)
{
    return db->ro_uri != NULL;
}

const char *db_path(const struct db *db)
{
    return db->path;
}

int db_sync_log(struct db *db)
{
    char path[PATH_MAX + 8];
    int fd, r = 0;

    if (backend_sync_disabled())
        return 0;
    snprintf(path, sizeof(path), "%s-wal", db->path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno; /* no log: everything is in the database file */
    if (fdatasync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

struct db *db_free(struct db *db)
{
    if (!db)
        return NULL;
    db_ckpt_stop(db);
    for (size_t i = 0; i < db->pool_n; i++)
        close_conn(db->pool_all[i]);
    free(db->pool_all);
    if (db->writer) {
        /* Fold the WAL back so the database file alone is complete. */
        sqlite3_wal_checkpoint_v2(db->writer->sql, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
        close_conn(db->writer);
    }
    pthread_mutex_destroy(&db->pool_lock);
    db_writers_free(db);
    free(db->path);
    sqlite3_free(db->ro_uri);
    free(db);
    return NULL;
}

/* ---- group-committed writes ---- */

static void batch_work(uv_work_t *work)
{
    struct db *db = container_of(work, struct db, batch_work);
    struct db_txn txn = {db, db->writer, 0};
    bool durable = false;
    int r;

    for (struct db_write *w = db->batch; w; w = w->next_)
        durable |= w->durable;
    durable = durable && !backend_sync_disabled();
    /*
     * The setting is read at commit; it may only change outside a
     * transaction. Without it the commit would not be durable when its
     * writers are told it is (a repack then deletes the old pack): fail them.
     */
    if (durable && (r = exec(db->writer, "PRAGMA synchronous=FULL")) < 0) {
        for (struct db_write *w = db->batch; w; w = w->next_)
            w->status = r;
        return;
    }
    r = exec(db->writer, "BEGIN IMMEDIATE");
    for (struct db_write *w = db->batch; w; w = w->next_) {
        if (r < 0) {
            w->status = r;
            continue;
        }
        if ((w->status = exec(db->writer, "SAVEPOINT item")) < 0)
            continue;
        w->status = w->apply(&txn, w);
        if (w->status != 0)
            exec(db->writer, "ROLLBACK TO item");
        exec(db->writer, "RELEASE item");
    }
    if (r == 0 && (r = exec(db->writer, "COMMIT")) < 0) {
        exec(db->writer, "ROLLBACK");
        for (struct db_write *w = db->batch; w; w = w->next_) {
            if (w->status == 0)
                w->status = r; /* -ENOSPC for a full disk */
        }
    }
    /* Left FULL, later commits are only slower. */
    if (durable)
        exec(db->writer, "PRAGMA synchronous=NORMAL");
}

int db_txn_savepoint(struct db_txn *txn)
{
    txn->depth++;
    return exec(txn->c, "SAVEPOINT nested");
}

int db_txn_savepoint_end(struct db_txn *txn, bool rollback)
{
    int r = 0;

    if (rollback)
        r = exec(txn->c, "ROLLBACK TO nested");
    if (exec(txn->c, "RELEASE nested") < 0)
        r = -EIO;
    txn->depth--;
    return r;
}

static void batch_start(struct db *db);

static void batch_done(uv_work_t *work, int status)
{
    struct db *db = container_of(work, struct db, batch_work);
    struct db_write *w = db->batch, *next;

    db->batch = NULL;
    db->batch_running = false;
    for (; w; w = next) {
        next = w->next_;
        if (status < 0)
            w->status = status;
        w->done(w);
    }
    batch_start(db);
}

static void batch_start(struct db *db)
{
    if (db->batch_running || !db->queue_head)
        return;
    db->batch = db->queue_head;
    db->queue_head = db->queue_tail = NULL;
    db->batch_running = true;
    int r = uv_queue_work(db->loop, &db->batch_work, batch_work, batch_done);
    if (r < 0)
        batch_done(&db->batch_work, r);
}

void db_write(struct db *db, struct db_write *w)
{
    w->next_ = NULL;
    w->status = 0;
    if (db->queue_tail)
        db->queue_tail->next_ = w;
    else
        db->queue_head = w;
    db->queue_tail = w;
    batch_start(db);
}

bool db_busy(struct db *db)
{
    return db->batch_running || db->queue_head;
}

/* ---- helpers shared by reads and writes ---- */

int db_step_done(struct db_conn *c, sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return 0;
    log_error("database: %s", sqlite3_errmsg(c->sql));
    return db_errno(rc);
}

int db_query_id(struct db_conn *c, sqlite3_stmt *s, int64_t *out)
{
    int rc = sqlite3_step(s);
    int r = 0;
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else if (rc == SQLITE_DONE)
        r = DB_E_NOT_FOUND;
    else {
        log_error("database: %s", sqlite3_errmsg(c->sql));
        r = -EIO;
    }
    sqlite3_reset(s);
    return r;
}

void db_fattr_column(sqlite3_stmt *s, int col, struct db_fattr *fa)
{
    int64_t mode = sqlite3_column_int64(s, col);
    /* Anything but a mode a client could have sent (proto_file_mode_valid) is none. */
    fa->mode = proto_file_mode_valid((uint64_t)mode) ? (uint32_t)mode : 0;
    fa->mtime = fa->mode ? sqlite3_column_int64(s, col + 1) : 0;
}

int db_query_name_row(struct db_conn *c, sqlite3_stmt *s, int64_t *id, struct db_fattr *fa)
{
    int rc = sqlite3_step(s);
    int r = 0;
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(s, 0);
        db_fattr_column(s, 1, fa);
    } else if (rc == SQLITE_DONE) {
        r = DB_E_NOT_FOUND;
    } else {
        log_error("database: %s", sqlite3_errmsg(c->sql));
        r = -EIO;
    }
    sqlite3_reset(s);
    return r;
}

char *db_column_strdup(sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    return strdup(t ? (const char *)t : "");
}
