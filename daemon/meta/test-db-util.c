/* The environment of the database unit tests (test-db.h). */
#include "daemon/meta/test-db.h"

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "proto/util.h"

/* ---- the environment ------------------------------------------------------------- */

int test_db_setup(void **state)
{
    struct test_db *e = calloc(1, sizeof(*e));
    const char *tmp = getenv("TMPDIR");

    assert_non_null(e);
    if (!tmp || !*tmp)
        tmp = "/tmp";
    assert_true(snprintf(e->dir, sizeof(e->dir), "%s/cairn-test-db-XXXXXX", tmp) <
                (int)sizeof(e->dir));
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->path, sizeof(e->path), "%s/cairn.db", e->dir);
    assert_int_equal(uv_loop_init(&e->loop), 0);
    assert_int_equal(db_new(&e->db, &e->loop, e->path), 0);
    assert_non_null(e->db);
    assert_string_equal(db_path(e->db), e->path);
    *state = e;
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

int test_db_teardown(void **state)
{
    struct test_db *e = *state;

    if (e->db) {
        assert_false(db_busy(e->db));
        e->db = db_free(e->db);
        assert_null(e->db);
    }
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    assert_int_equal(nftw(e->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    assert_int_equal(access(e->dir, F_OK), -1);
    free(e);
    return 0;
}

/* ---- changes ------------------------------------------------------------------------ */

struct fn_write {
    struct db_write w;
    test_db_fn *fn;
    void *ctx;
    int applied, done_calls;
};

static int fn_apply(struct db_txn *txn, struct db_write *w)
{
    struct fn_write *fw = container_of(w, struct fn_write, w);

    fw->applied++;
    return fw->fn(txn, fw->ctx);
}

static void fn_done(struct db_write *w)
{
    container_of(w, struct fn_write, w)->done_calls++;
}

int test_db_run(struct test_db *e, test_db_fn *fn, void *ctx, bool durable)
{
    struct fn_write fw = {
        .w = {.apply = fn_apply, .done = fn_done, .durable = durable}, .fn = fn, .ctx = ctx};

    fw.w.status = 12345; /* db_write must reset it */
    db_write(e->db, &fw.w);
    assert_true(db_busy(e->db));
    assert_int_equal(fw.done_calls, 0); /* never from inside db_write */
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_false(db_busy(e->db));
    assert_int_equal(fw.applied, 1);
    assert_int_equal(fw.done_calls, 1);
    return fw.w.status;
}

void test_hash(uint8_t hash[PROTO_HASH_LEN], uint8_t first, uint8_t seed)
{
    for (size_t i = 0; i < PROTO_HASH_LEN; i++)
        hash[i] = (uint8_t)(seed * 37 + i * 11 + 1);
    hash[0] = first;
}

void test_hex(const uint8_t hash[PROTO_HASH_LEN], char hex[PROTO_HASH_HEX + 1])
{
    proto_hex_encode(hash, PROTO_HASH_LEN, hex);
}

static size_t count_strings(const char *const *v)
{
    size_t n = 0;
    while (n < TEST_DOC_MAX && v[n])
        n++;
    return n;
}

static int add_apply(struct db_txn *txn, void *ctx)
{
    return db_txn_add(txn, ctx);
}

int test_doc_add(struct test_db *e, struct test_doc *d, struct db_add *out)
{
    struct manifest_entry entries[TEST_DOC_MAX];
    struct db_add add = {0};
    int r;

    assert_true(d->nroot <= TEST_DOC_MAX);
    for (size_t i = 0; i < d->nroot; i++) {
        test_hash(entries[i].hash, (uint8_t)(0xe0 + i), d->hash[1]);
        entries[i].bytes = d->size / d->nroot + (i == 0 ? d->size % d->nroot : 0);
    }
    manifest_entries_encode(entries, d->nroot, d->root);
    memcpy(add.hash, d->hash, PROTO_HASH_LEN);
    add.size = d->size;
    add.nchunks = d->depth == 0 ? d->nroot : d->nroot * MANIFEST_FANOUT;
    add.stored = d->stored;
    add.mime = d->mime ? d->mime : "application/octet-stream";
    add.name = d->name;
    add.tags = d->tags;
    add.ntags = count_strings(d->tags);
    add.meta_keys = d->meta_keys;
    add.meta_values = d->meta_values;
    add.nmeta = count_strings(d->meta_keys);
    add.depth = d->depth;
    add.root = d->root;
    add.root_len = d->nroot * MANIFEST_ENTRY;
    add.text = d->text;
    add.created_at = d->created_at;
    /* Each add a later event than the one before, as the journal's times are. */
    static uint64_t events;
    add.event_ns = ++events;
    memcpy(add.event_id, &add.event_ns, sizeof(add.event_ns));
    r = test_db_run(e, add_apply, &add, false);
    if (out)
        *out = add;
    return r;
}

struct db_add test_doc_add_ok(struct test_db *e, struct test_doc *d)
{
    struct db_add out;

    assert_int_equal(test_doc_add(e, d, &out), 0);
    return out;
}

static int delete_apply(struct db_txn *txn, void *ctx)
{
    return db_txn_delete(txn, ctx);
}

int test_doc_delete(struct test_db *e, const char *hex)
{
    return test_db_run(e, delete_apply, (void *)hex, false);
}

int64_t test_db_query(struct test_db *e, const char *sql)
{
    sqlite3 *conn;
    sqlite3_stmt *s;
    int64_t v = -1;

    assert_int_equal(sqlite3_open_v2(e->path, &conn, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(conn, sql, -1, &s, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(conn));
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(conn);
    return v;
}

/* ---- record locations and packs ------------------------------------------------ */

struct loc_put {
    const uint8_t *hash, *doc;
    const struct db_loc *loc;
    uint64_t time_ns;
    bool is_delete, applied, drop;
    uint64_t seq, size;
    enum db_pack_state state;
};

static int chunk_apply(struct db_txn *txn, void *ctx)
{
    struct loc_put *p = ctx;
    return db_txn_chunk_put(txn, p->hash, p->loc);
}

int test_chunk_put(struct test_db *e, const uint8_t hash[PROTO_HASH_LEN], const struct db_loc *loc)
{
    struct loc_put p = {.hash = hash, .loc = loc};
    return test_db_run(e, chunk_apply, &p, false);
}

static int segment_apply(struct db_txn *txn, void *ctx)
{
    struct loc_put *p = ctx;
    return db_txn_segment_put(txn, p->hash, p->loc);
}

int test_segment_put(struct test_db *e, const uint8_t hash[PROTO_HASH_LEN],
                     const struct db_loc *loc)
{
    struct loc_put p = {.hash = hash, .loc = loc};
    return test_db_run(e, segment_apply, &p, false);
}

static int journal_apply(struct db_txn *txn, void *ctx)
{
    struct loc_put *p = ctx;
    return db_txn_journal_put(txn, p->hash, p->loc, p->doc, p->time_ns, p->is_delete, p->applied);
}

int test_journal_put(struct test_db *e, const uint8_t id[PROTO_HASH_LEN], const struct db_loc *loc,
                     const uint8_t doc[PROTO_HASH_LEN], uint64_t time_ns, bool is_delete,
                     bool applied)
{
    struct loc_put p = {.hash = id,
                        .loc = loc,
                        .doc = doc,
                        .time_ns = time_ns,
                        .is_delete = is_delete,
                        .applied = applied};
    return test_db_run(e, journal_apply, &p, false);
}

static int applied_apply(struct db_txn *txn, void *ctx)
{
    struct loc_put *p = ctx;
    return db_txn_journal_applied(txn, p->hash, p->drop);
}

int test_journal_applied(struct test_db *e, const uint8_t id[PROTO_HASH_LEN], bool drop)
{
    struct loc_put p = {.hash = id, .drop = drop};
    return test_db_run(e, applied_apply, &p, false);
}

static int pack_set_apply(struct db_txn *txn, void *ctx)
{
    struct loc_put *p = ctx;
    return db_txn_pack_set(txn, p->seq, p->size, p->state);
}

int test_pack_set(struct test_db *e, uint64_t seq, uint64_t size, enum db_pack_state state)
{
    struct loc_put p = {.seq = seq, .size = size, .state = state};
    return test_db_run(e, pack_set_apply, &p, false);
}

static int pack_drop_apply(struct db_txn *txn, void *ctx)
{
    struct loc_put *p = ctx;
    return db_txn_pack_drop(txn, p->seq);
}

int test_pack_drop(struct test_db *e, uint64_t seq)
{
    struct loc_put p = {.seq = seq};
    return test_db_run(e, pack_drop_apply, &p, false);
}

/* ---- gc's sweep ------------------------------------------------------------------ */

bool test_live_has(void *ctx, const uint8_t hash[PROTO_HASH_LEN])
{
    struct test_live *l = ctx;

    l->calls++;
    for (size_t i = 0; i < l->n; i++) {
        if (memcmp(l->hashes[i], hash, PROTO_HASH_LEN) == 0)
            return true;
    }
    return false;
}

struct sweep {
    enum db_record_table table;
    uint8_t cursor[PROTO_HASH_LEN];
    size_t page;
    struct test_live *live;
    uint64_t gen, condemned, revived;
    bool done;
};

static int sweep_apply(struct db_txn *txn, void *ctx)
{
    struct sweep *s = ctx;
    return db_txn_condemn_page(txn, s->table, s->cursor, s->page, test_live_has, s->live, s->gen,
                               &s->condemned, &s->revived, &s->done);
}

int test_sweep(struct test_db *e, enum db_record_table table, struct test_live *live, uint64_t gen,
               size_t page, uint64_t *condemned, uint64_t *revived, unsigned *pages)
{
    struct sweep s = {.table = table, .page = page, .live = live, .gen = gen};
    unsigned n = 0;
    int r;

    do {
        uint8_t before[PROTO_HASH_LEN];
        memcpy(before, s.cursor, PROTO_HASH_LEN);
        s.done = false;
        if ((r = test_db_run(e, sweep_apply, &s, false)) != 0)
            return r;
        n++;
        /* The cursor only moves forward (and stays on an empty last page). */
        assert_true(memcmp(s.cursor, before, PROTO_HASH_LEN) >= 0);
        assert_true(n < 10000);
    } while (!s.done);
    *condemned += s.condemned;
    *revived += s.revived;
    if (pages)
        *pages = n;
    return 0;
}
