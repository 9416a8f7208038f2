/*
 * Unit tests of gc's queries (db-gc.c): the run counter, the manifests to
 * mark from, the sweep that condemns and revives rows page by page, how
 * much of each pack is alive (condemnations up to safe_gen count as dead;
 * journal entries by their own rules), the rows of a pack, and a repack's
 * moves and drops.
 */
#include "daemon/meta/test-db.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- the run counter ------------------------------------------------------ */

struct gen_ctx {
    uint64_t gen;
    bool fail;
};

static int gen_apply(struct db_txn *txn, void *ctx)
{
    struct gen_ctx *g = ctx;
    int r = db_txn_gc_generation(txn, &g->gen);
    return r == 0 && g->fail ? -EINTR : r;
}

static void test_gc_generation(void **state)
{
    struct test_db *e = *state;
    struct gen_ctx g = {0};
    uint64_t gen = 99;

    assert_int_equal(db_gc_generation(e->db, &gen), 0);
    assert_int_equal(gen, 0);
    assert_int_equal(test_db_run(e, gen_apply, &g, false), 0);
    assert_int_equal(g.gen, 1);
    assert_int_equal(test_db_run(e, gen_apply, &g, false), 0);
    assert_int_equal(g.gen, 2);
    assert_int_equal(db_gc_generation(e->db, &gen), 0);
    assert_int_equal(gen, 2);
    /* A run whose change fails leaves the counter where it was. */
    g.fail = true;
    assert_int_equal(test_db_run(e, gen_apply, &g, false), -EINTR);
    assert_int_equal(db_gc_generation(e->db, &gen), 0);
    assert_int_equal(gen, 2);
}

/* ---- marking -------------------------------------------------------------- */

struct seen_manifest {
    int64_t rowid;
    unsigned depth;
    uint8_t root[TEST_DOC_MAX * MANIFEST_ENTRY];
    size_t len;
};

struct each_ctx {
    struct seen_manifest seen[8];
    size_t n, stop_after;
};

static int each_fn(void *ctx, int64_t rowid, unsigned depth, const uint8_t *root, size_t len)
{
    struct each_ctx *c = ctx;

    if (c->n == 8 || len > sizeof(c->seen[0].root))
        return -E2BIG;
    c->seen[c->n] = (struct seen_manifest){.rowid = rowid, .depth = depth, .len = len};
    if (len)
        memcpy(c->seen[c->n].root, root, len);
    if (++c->n == c->stop_after)
        return 77;
    return 0;
}

static const struct seen_manifest *find_seen(const struct each_ctx *c, int64_t rowid,
                                             unsigned depth)
{
    for (size_t i = 0; i < c->n; i++) {
        if (c->seen[i].rowid == rowid && c->seen[i].depth == depth)
            return &c->seen[i];
    }
    fail_msg("no manifest of row %lld at depth %u", (long long)rowid, depth);
    return NULL;
}

static void test_each_manifest(void **state)
{
    struct test_db *e = *state;
    struct test_doc a = {.size = 10, .nroot = 2}, b = {.size = 20, .depth = 1, .nroot = 3};
    struct test_doc gone = {.size = 30, .depth = 2, .nroot = 1}, empty = {.size = 0};
    struct each_ctx c = {0};
    char hex[PROTO_HASH_HEX + 1];

    assert_int_equal(db_each_manifest(e->db, each_fn, &c), 0);
    assert_int_equal(c.n, 0);
    test_hash(a.hash, 0x01, 1);
    test_hash(b.hash, 0x02, 2);
    test_hash(gone.hash, 0x03, 3);
    test_hash(empty.hash, 0x04, 4);
    int64_t ida = test_doc_add_ok(e, &a).rowid;
    int64_t idb = test_doc_add_ok(e, &b).rowid;
    test_doc_add_ok(e, &gone);
    int64_t ide = test_doc_add_ok(e, &empty).rowid;
    test_hex(gone.hash, hex);
    assert_int_equal(test_doc_delete(e, hex), 0);

    /* Every document's manifest, and the deleted one's while the index still needs it. */
    assert_int_equal(db_each_manifest(e->db, each_fn, &c), 0);
    assert_int_equal(c.n, 4);
    const struct seen_manifest *s = find_seen(&c, ida, 0);
    assert_int_equal(s->len, 2 * MANIFEST_ENTRY);
    assert_memory_equal(s->root, a.root, s->len);
    s = find_seen(&c, idb, 1);
    assert_int_equal(s->len, 3 * MANIFEST_ENTRY);
    assert_memory_equal(s->root, b.root, s->len);
    s = find_seen(&c, ide, 0);
    assert_int_equal(s->len, 0);
    s = find_seen(&c, -1, 2);
    assert_int_equal(s->len, MANIFEST_ENTRY);
    assert_memory_equal(s->root, gone.root, s->len);

    /* A callback's non-zero result stops the walk and is returned. */
    memset(&c, 0, sizeof(c));
    c.stop_after = 2;
    assert_int_equal(db_each_manifest(e->db, each_fn, &c), 77);
    assert_int_equal(c.n, 2);
}

/* ---- sweeping ------------------------------------------------------------- */

#define NROWS 10

static void test_condemn_page(void **state)
{
    struct test_db *e = *state;
    uint8_t h[NROWS][PROTO_HASH_LEN], live[NROWS][PROTO_HASH_LEN];
    struct test_live l = {.hashes = live};
    uint64_t condemned = 0, revived = 0;
    unsigned pages;
    uint32_t stored;

    for (uint8_t i = 0; i < NROWS; i++) {
        struct db_loc loc = {.pack = 1, .off = 16 + 100u * i, .len = 100, .size = 50, .stored = 9};
        /* Put in reverse hash order: the sweep goes by hash, not by insertion. */
        test_hash(h[i], (uint8_t)(0xf0 - 0x10 * i), i);
        assert_int_equal(test_chunk_put(e, h[i], &loc), 0);
    }
    /* The even ones are referenced. */
    for (size_t i = 0; i < NROWS; i += 2)
        memcpy(live[l.n++], h[i], PROTO_HASH_LEN);

    /* Pages of 3: 10 rows take 4 pages, each row is asked about once. */
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &l, 1, 3, &condemned, &revived, &pages), 0);
    assert_int_equal(pages, 4);
    assert_int_equal(l.calls, NROWS);
    assert_int_equal(condemned, NROWS / 2);
    assert_int_equal(revived, 0);
    for (size_t i = 0; i < NROWS; i++)
        assert_int_equal(db_chunk_lookup(e->db, h[i], &stored), i % 2 ? DB_E_NOT_FOUND : 0);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM chunks WHERE condemned = 1"),
                     NROWS / 2);

    /* A page that ends exactly at the end needs one more, empty page to say so. */
    l.calls = 0;
    condemned = revived = 0;
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &l, 2, 5, &condemned, &revived, &pages), 0);
    assert_int_equal(pages, 3);
    assert_int_equal(l.calls, NROWS);
    /* Already condemned rows keep the run that condemned them. */
    assert_int_equal(condemned, 0);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM chunks WHERE condemned = 1"),
                     NROWS / 2);

    /* h1 is referenced again and h0 no longer: a revive-only pass (gen 0) revives h1 ... */
    memcpy(live[0], h[1], PROTO_HASH_LEN);
    condemned = revived = 0;
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &l, 0, 100, &condemned, &revived, &pages), 0);
    assert_int_equal(pages, 1);
    assert_int_equal(revived, 1);
    assert_int_equal(condemned, 0);
    assert_int_equal(db_chunk_lookup(e->db, h[1], &stored), 0);
    assert_int_equal(db_chunk_lookup(e->db, h[0], &stored), 0);
    /* ... and the next real run condemns h0 with its own number. */
    condemned = revived = 0;
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &l, 3, 4, &condemned, &revived, NULL), 0);
    assert_int_equal(condemned, 1);
    assert_int_equal(revived, 0);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM chunks WHERE condemned = 3"), 1);
    assert_int_equal(db_chunk_lookup(e->db, h[0], &stored), DB_E_NOT_FOUND);

    /* The segments table is swept apart from the chunks. */
    struct db_loc sl = {.pack = 2, .off = 16, .len = 90, .size = 48};
    assert_int_equal(test_segment_put(e, h[0], &sl), 0);
    condemned = revived = 0;
    struct test_live none = {0};
    assert_int_equal(test_sweep(e, DB_TABLE_SEGMENTS, &none, 4, 10, &condemned, &revived, NULL), 0);
    assert_int_equal(condemned, 1);
    assert_int_equal(none.calls, 1);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM segments WHERE condemned = 4"), 1);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM chunks WHERE condemned = 4"), 0);

    /* The totals leave out the rows condemned by the runs found dead: h3..h9 by 1, h0 by 3. */
    struct db_totals t;
    uint64_t n;
    const uint64_t want[][4] = {
        {0, 10, 500, 90}, {1, 6, 300, 54}, {2, 6, 300, 54}, {3, 5, 250, 45}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_int_equal(db_totals(e->db, want[i][0], &t), 0);
        assert_int_equal(t.chunks, want[i][1]);
        assert_int_equal(t.unique_bytes, want[i][2]);
        assert_int_equal(t.stored_bytes, want[i][3]);
    }
    /* Counted once: by the first run whose range takes in the condemning run. */
    assert_int_equal(db_chunks_condemned(e->db, 0, 1, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(db_chunks_condemned(e->db, 1, 3, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(db_chunks_condemned(e->db, 3, 10, &n), 0);
    assert_int_equal(n, 0);
}

/* One page at a time by hand: the cursor ends at each page's last row. */
struct one_page {
    uint8_t cursor[PROTO_HASH_LEN];
    struct test_live *live;
    uint64_t condemned, revived;
    bool done;
};

static int one_page_apply(struct db_txn *txn, void *ctx)
{
    struct one_page *p = ctx;
    return db_txn_condemn_page(txn, DB_TABLE_CHUNKS, p->cursor, 2, test_live_has, p->live, 5,
                               &p->condemned, &p->revived, &p->done);
}

static void test_condemn_cursor(void **state)
{
    struct test_db *e = *state;
    uint8_t h[5][PROTO_HASH_LEN];
    struct test_live l = {.hashes = h + 1, .n = 4}; /* all but h[0] */
    struct one_page p = {.live = &l};

    for (uint8_t i = 0; i < 5; i++) {
        struct db_loc loc = {.pack = 1, .off = 16, .len = 10, .size = 5, .stored = 5};
        test_hash(h[i], (uint8_t)(0x10 * (i + 1)), i);
        assert_int_equal(test_chunk_put(e, h[i], &loc), 0);
    }
    assert_int_equal(test_db_run(e, one_page_apply, &p, false), 0);
    assert_memory_equal(p.cursor, h[1], PROTO_HASH_LEN);
    assert_false(p.done);
    assert_int_equal(p.condemned, 1);
    assert_int_equal(l.calls, 2);
    assert_int_equal(test_db_run(e, one_page_apply, &p, false), 0);
    assert_memory_equal(p.cursor, h[3], PROTO_HASH_LEN);
    assert_false(p.done);
    assert_int_equal(test_db_run(e, one_page_apply, &p, false), 0);
    assert_memory_equal(p.cursor, h[4], PROTO_HASH_LEN);
    assert_true(p.done);
    assert_int_equal(l.calls, 5);
    /* Past the end: nothing, the cursor stays. */
    assert_int_equal(test_db_run(e, one_page_apply, &p, false), 0);
    assert_memory_equal(p.cursor, h[4], PROTO_HASH_LEN);
    assert_true(p.done);
    assert_int_equal(l.calls, 5);
    assert_int_equal(p.condemned, 1);
    assert_int_equal(p.revived, 0);
}

/* ---- what is alive where ---------------------------------------------------- */

/*
 * Packs 1 to 4 (4 holds nothing) and rows that point into them and into a
 * pack 9 the database does not list:
 *   pack 1: chunks c1 (live, stored 100) and c2 (condemned by run 1, 200) in
 *           one block at 16, segment s3 at 300 (live, 60 bytes), journal
 *           entry jF at 400 (an add, live, 20), chunk c3 at 500 (condemned
 *           by run 3, 300);
 *   pack 2: chunk c4 (live, 5), segments s1 (live, 50) and s2 (condemned
 *           by run 2, 70);
 *   pack 3: journal entries of documents A to D (below);
 *   pack 9: chunk c9 (live, 1000).
 */
enum { C1, C2, C3, C4, C9, S1, S2, S3, NHASH };
enum { JA_ADD, JA_DEL, JB_ADD, JC_DEL, JD_DEL, JD_ADD, JF_ADD, NJOURNAL };

struct fixture {
    uint8_t h[NHASH][PROTO_HASH_LEN];
    uint8_t j[NJOURNAL][PROTO_HASH_LEN];
};

static const struct {
    uint8_t doc;
    bool is_delete;
    uint64_t time, pack, off;
    uint32_t len;
    bool live;
} journal[NJOURNAL] = {
    /* An add with a later delete of its document is dead; the delete lives on while it has an
     * earlier add to cancel. */
    [JA_ADD] = {0xa0, false, 10, 3, 16, 40, false},
    [JA_DEL] = {0xa0, true, 20, 3, 56, 30, true},
    [JB_ADD] = {0xb0, false, 5, 3, 86, 25, true},
    /* A delete with no earlier add of its document is dead. */
    [JC_DEL] = {0xc0, true, 30, 3, 111, 15, false},
    /* A delete before the add: the add is live, the delete dead. */
    [JD_DEL] = {0xd0, true, 35, 3, 126, 17, false},
    [JD_ADD] = {0xd0, false, 40, 3, 143, 11, true},
    [JF_ADD] = {0xf0, false, 80, 1, 400, 20, true},
};

static void fixture_setup(struct test_db *e, struct fixture *f)
{
    static const struct db_loc locs[NHASH] = {
        [C1] = {1, 16, 400, 0, 1000, 100},   [C2] = {1, 16, 400, 1000, 2000, 200},
        [C3] = {1, 500, 300, 0, 3000, 300},  [C4] = {2, 16, 5, 0, 5, 5},
        [C9] = {9, 16, 1000, 0, 1000, 1000}, [S1] = {2, 100, 50, 0, 40, 0},
        [S2] = {2, 200, 70, 0, 80, 0},       [S3] = {1, 300, 60, 0, 48, 0},
    };
    uint64_t condemned = 0, revived = 0;

    assert_int_equal(test_pack_set(e, 1, 1000, DB_PACK_SEALED), 0);
    assert_int_equal(test_pack_set(e, 2, 2000, DB_PACK_SEALED), 0);
    assert_int_equal(test_pack_set(e, 3, 300, DB_PACK_OPEN), 0);
    assert_int_equal(test_pack_set(e, 4, 50, DB_PACK_SEALED), 0);
    for (uint8_t i = 0; i < NHASH; i++) {
        test_hash(f->h[i], (uint8_t)(0x10 + 0x10 * i), i);
        if (i < S1)
            assert_int_equal(test_chunk_put(e, f->h[i], &locs[i]), 0);
        else
            assert_int_equal(test_segment_put(e, f->h[i], &locs[i]), 0);
    }
    for (uint8_t i = 0; i < NJOURNAL; i++) {
        struct db_loc loc = {.pack = journal[i].pack, .off = journal[i].off, .len = journal[i].len};
        uint8_t doc[PROTO_HASH_LEN];
        test_hash(f->j[i], 0x77, (uint8_t)(100 + i));
        test_hash(doc, journal[i].doc, 0);
        assert_int_equal(
            test_journal_put(e, f->j[i], &loc, doc, journal[i].time, journal[i].is_delete, true),
            0);
    }
    /* Runs 1, 2 and 3 condemn c2, s2 and c3. */
    const uint8_t(*h)[PROTO_HASH_LEN] = f->h;
    uint8_t live1[4][PROTO_HASH_LEN], live3[3][PROTO_HASH_LEN], live2[2][PROTO_HASH_LEN];
    memcpy(live1[0], h[C1], PROTO_HASH_LEN);
    memcpy(live1[1], h[C3], PROTO_HASH_LEN);
    memcpy(live1[2], h[C4], PROTO_HASH_LEN);
    memcpy(live1[3], h[C9], PROTO_HASH_LEN);
    memcpy(live3[0], h[C1], PROTO_HASH_LEN);
    memcpy(live3[1], h[C4], PROTO_HASH_LEN);
    memcpy(live3[2], h[C9], PROTO_HASH_LEN);
    memcpy(live2[0], h[S1], PROTO_HASH_LEN);
    memcpy(live2[1], h[S3], PROTO_HASH_LEN);
    struct test_live l1 = {.hashes = live1, .n = 4}, l2 = {.hashes = live2, .n = 2};
    struct test_live l3 = {.hashes = live3, .n = 3};
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &l1, 1, 100, &condemned, &revived, NULL), 0);
    assert_int_equal(test_sweep(e, DB_TABLE_SEGMENTS, &l2, 2, 100, &condemned, &revived, NULL), 0);
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &l3, 3, 100, &condemned, &revived, NULL), 0);
    assert_int_equal(condemned, 3);
    assert_int_equal(revived, 0);
}

static void assert_usage(struct test_db *e, uint64_t safe_gen, const uint64_t live[4])
{
    static const struct {
        uint64_t size;
        enum db_pack_state state;
    } packs[4] = {
        {1000, DB_PACK_SEALED}, {2000, DB_PACK_SEALED}, {300, DB_PACK_OPEN}, {50, DB_PACK_SEALED}};
    struct db_pack_use *use;
    size_t n;

    assert_int_equal(db_pack_usage(e->db, safe_gen, &use, &n), 0);
    assert_int_equal(n, 4); /* pack 9 has rows but no pack row: not listed */
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(use[i].seq, i + 1);
        assert_int_equal(use[i].size, packs[i].size);
        assert_int_equal(use[i].state, packs[i].state);
        if (use[i].live != live[i])
            fail_msg("safe_gen %llu, pack %zu: live %llu, expected %llu",
                     (unsigned long long)safe_gen, i + 1, (unsigned long long)use[i].live,
                     (unsigned long long)live[i]);
    }
    free(use);
}

static void test_pack_usage(void **state)
{
    struct test_db *e = *state;
    struct fixture f;

    fixture_setup(e, &f);
    /* Journal entries alive in pack 3: JA_DEL 30 + JB_ADD 25 + JD_ADD 11. */
    assert_usage(e, 0, (const uint64_t[]){100 + 200 + 300 + 60 + 20, 5 + 50 + 70, 66, 0});
    assert_usage(e, 1, (const uint64_t[]){100 + 300 + 60 + 20, 5 + 50 + 70, 66, 0});
    assert_usage(e, 2, (const uint64_t[]){100 + 300 + 60 + 20, 5 + 50, 66, 0});
    assert_usage(e, 3, (const uint64_t[]){100 + 60 + 20, 5 + 50, 66, 0});
    assert_usage(e, UINT32_MAX, (const uint64_t[]){100 + 60 + 20, 5 + 50, 66, 0});
}

/*
 * While a pack waits to be deleted, deletes stay alive: it may hold an add
 * entry whose row is gone, which a rebuild from the packs would replay.
 */
static void test_deletes_live_while_a_pack_waits(void **state)
{
    struct test_db *e = *state;
    struct fixture f;
    struct db_pack_row *rows;
    size_t n;

    fixture_setup(e, &f);
    assert_int_equal(test_pack_set(e, 5, 70, DB_PACK_DELETING), 0);
    assert_int_equal(db_pack_rows(e->db, 3, 0, &rows, &n), 0);
    assert_int_equal(n, JF_ADD);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rows[i].live, journal[i].live || journal[i].is_delete);
    free(rows);
    assert_int_equal(test_pack_drop(e, 5), 0);
    assert_usage(e, 0, (const uint64_t[]){100 + 200 + 300 + 60 + 20, 5 + 50 + 70, 66, 0});
}

static void test_pack_rows(void **state)
{
    struct test_db *e = *state;
    struct fixture f;
    struct db_pack_row *rows;
    size_t n;

    fixture_setup(e, &f);
    /* Pack 1 by offset, then by place in the block. */
    assert_int_equal(db_pack_rows(e->db, 1, 2, &rows, &n), 0);
    assert_int_equal(n, 5);
    static const struct {
        enum db_row_kind kind;
        int which;
        uint64_t off;
        uint32_t sub, len, stored;
        bool live;
        uint64_t condemned;
    } want[] = {
        {DB_ROW_CHUNK, C1, 16, 0, 400, 100, true, 0},
        {DB_ROW_CHUNK, C2, 16, 1000, 400, 200, false, 1},
        {DB_ROW_SEGMENT, S3, 300, 0, 60, 60, true, 0},
        {DB_ROW_ENTRY, -JF_ADD - 1, 400, 0, 20, 20, true, 0},
        {DB_ROW_CHUNK, C3, 500, 0, 300, 300, true, 3}, /* run 3 > safe_gen 2 */
    };
    for (size_t i = 0; i < n; i++) {
        const uint8_t *hash = want[i].which >= 0 ? f.h[want[i].which] : f.j[-want[i].which - 1];
        assert_int_equal(rows[i].kind, want[i].kind);
        assert_memory_equal(rows[i].hash, hash, PROTO_HASH_LEN);
        assert_int_equal(rows[i].loc.pack, 1);
        assert_int_equal(rows[i].loc.off, want[i].off);
        assert_int_equal(rows[i].loc.sub, want[i].sub);
        assert_int_equal(rows[i].loc.len, want[i].len);
        assert_int_equal(rows[i].loc.stored, want[i].stored);
        assert_int_equal(rows[i].live, want[i].live);
        assert_int_equal(rows[i].condemned, want[i].condemned);
    }
    free(rows);

    /* Pack 3: journal entries by the rules above. */
    assert_int_equal(db_pack_rows(e->db, 3, 0, &rows, &n), 0);
    assert_int_equal(n, JF_ADD);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rows[i].kind, DB_ROW_ENTRY);
        assert_memory_equal(rows[i].hash, f.j[i], PROTO_HASH_LEN);
        assert_int_equal(rows[i].loc.off, journal[i].off);
        if (rows[i].live != journal[i].live)
            fail_msg("journal entry %zu: live %d", i, rows[i].live);
    }
    free(rows);
    assert_int_equal(db_pack_rows(e->db, 4, 0, &rows, &n), 0);
    assert_int_equal(n, 0);
    free(rows);
}

/* ---- a repack's moves and drops ----------------------------------------------- */

struct row_op {
    const struct db_pack_row *row;
    const struct db_loc *to; /* NULL: drop */
    uint64_t seq, left;
};

static int row_apply(struct db_txn *txn, void *ctx)
{
    struct row_op *o = ctx;
    return o->to ? db_txn_row_move(txn, o->row, o->to) : db_txn_row_drop(txn, o->row);
}

static void row_move(struct test_db *e, const struct db_pack_row *row, const struct db_loc *to)
{
    struct row_op o = {.row = row, .to = to};
    assert_int_equal(test_db_run(e, row_apply, &o, false), 0);
}

static void row_drop(struct test_db *e, const struct db_pack_row *row)
{
    struct row_op o = {.row = row};
    assert_int_equal(test_db_run(e, row_apply, &o, false), 0);
}

static int left_apply(struct db_txn *txn, void *ctx)
{
    struct row_op *o = ctx;
    return db_txn_pack_rows_left(txn, o->seq, &o->left);
}

static uint64_t rows_left(struct test_db *e, uint64_t seq)
{
    struct row_op o = {.seq = seq, .left = 12345};
    assert_int_equal(test_db_run(e, left_apply, &o, false), 0);
    return o.left;
}

static void test_row_move_drop(void **state)
{
    struct test_db *e = *state;
    struct fixture f;
    struct db_pack_row *rows, *rows2;
    struct db_loc got;
    size_t n, n2;

    fixture_setup(e, &f);
    assert_int_equal(rows_left(e, 1), 5);
    assert_int_equal(rows_left(e, 4), 0);
    assert_int_equal(db_pack_rows(e->db, 1, 3, &rows, &n), 0);
    assert_int_equal(n, 5);

    /* c3 is referenced again after the rows were read: a revive-only pass. */
    uint8_t again[4][PROTO_HASH_LEN];
    memcpy(again[0], f.h[C1], PROTO_HASH_LEN);
    memcpy(again[1], f.h[C3], PROTO_HASH_LEN);
    memcpy(again[2], f.h[C4], PROTO_HASH_LEN);
    memcpy(again[3], f.h[C9], PROTO_HASH_LEN);
    struct test_live la = {.hashes = again, .n = 4};
    uint64_t condemned = 0, revived = 0;
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &la, 0, 10, &condemned, &revived, NULL), 0);
    assert_int_equal(revived, 1);

    /* Live rows move to pack 5, dead ones are dropped: but c3 is not dropped, it lives. */
    struct db_loc to[5] = {
        {5, 16, 300, 0, 0, 80}, {0}, {5, 316, 60, 0, 0, 60}, {5, 376, 20, 0, 0, 20}, {0}};
    for (size_t i = 0; i < n; i++) {
        if (rows[i].live)
            row_move(e, &rows[i], &to[i]);
        else
            row_drop(e, &rows[i]);
    }
    assert_int_equal(rows_left(e, 1), 1);
    assert_int_equal(db_chunk_find(e->db, f.h[C3], &got), 0);
    assert_int_equal(got.pack, 1);
    struct db_loc c3_to = {5, 396, 300, 0, 0, 300};
    row_move(e, &rows[4], &c3_to);
    assert_int_equal(rows_left(e, 1), 0);
    assert_int_equal(rows_left(e, 5), 4);
    /* A moved chunk keeps its size, and takes its new place in its new block. */
    assert_int_equal(db_chunk_find(e->db, f.h[C1], &got), 0);
    assert_int_equal(got.pack, 5);
    assert_int_equal(got.off, 16);
    assert_int_equal(got.len, 300);
    assert_int_equal(got.sub, 0);
    assert_int_equal(got.size, 1000);
    assert_int_equal(got.stored, 80);
    assert_int_equal(db_segment_find(e->db, f.h[S3], &got), 0);
    assert_int_equal(got.pack, 5);
    assert_int_equal(got.off, 316);
    assert_int_equal(got.size, 48);
    assert_int_equal(db_chunk_find(e->db, f.h[C2], &got), DB_E_NOT_FOUND);
    assert_int_equal(db_pack_rows(e->db, 5, 3, &rows2, &n2), 0);
    assert_int_equal(n2, 4);
    assert_int_equal(rows2[2].kind, DB_ROW_ENTRY);
    assert_memory_equal(rows2[2].hash, f.j[JF_ADD], PROTO_HASH_LEN);
    assert_int_equal(rows2[2].loc.off, 376);
    assert_memory_equal(rows2[3].hash, f.h[C3], PROTO_HASH_LEN);
    assert_true(rows2[3].live);
    free(rows2);

    /* A row that no longer points where it was is left alone by both. */
    struct db_loc elsewhere = {6, 16, 1, 0, 0, 1};
    row_move(e, &rows[0], &elsewhere);
    row_drop(e, &rows[0]);
    assert_int_equal(db_chunk_find(e->db, f.h[C1], &got), 0);
    assert_int_equal(got.pack, 5);
    free(rows);

    /* A condemned row revived since its page was read is not dropped. */
    assert_int_equal(db_pack_rows(e->db, 2, 3, &rows, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(rows[2].kind, DB_ROW_SEGMENT);
    assert_false(rows[2].live);
    assert_int_equal(rows[2].condemned, 2);
    uint8_t live[3][PROTO_HASH_LEN];
    memcpy(live[0], f.h[S1], PROTO_HASH_LEN);
    memcpy(live[1], f.h[S2], PROTO_HASH_LEN);
    memcpy(live[2], f.h[S3], PROTO_HASH_LEN);
    struct test_live l = {.hashes = live, .n = 3};
    condemned = revived = 0;
    assert_int_equal(test_sweep(e, DB_TABLE_SEGMENTS, &l, 0, 10, &condemned, &revived, NULL), 0);
    assert_int_equal(revived, 1);
    row_drop(e, &rows[2]);
    assert_int_equal(db_segment_find(e->db, f.h[S2], &got), 0);
    assert_int_equal(rows_left(e, 2), 3);
    free(rows);

    /* Dropping a dead add entry kills the delete that only cancelled it. */
    assert_int_equal(db_pack_rows(e->db, 3, 0, &rows, &n), 0);
    row_drop(e, &rows[JA_ADD]);
    row_drop(e, &rows[JC_DEL]);
    free(rows);
    assert_int_equal(rows_left(e, 3), JF_ADD - 2);
    assert_usage(e, 0, (const uint64_t[]){0, 5 + 50 + 70, 25 + 11, 0});
}

/* ---- the shared bucket's marks (db-marks.c) -------------------------------- */

struct mark_ctx {
    uint64_t pack, rows;
    bool known, forget;
    struct db_mark m;
};

static int mark_apply(struct db_txn *txn, void *ctx)
{
    struct mark_ctx *c = ctx;
    int r = c->m.writer ? db_txn_mark_set(txn, &c->m) : 0;

    if (r == 0 && c->pack)
        r = c->forget ? db_txn_pack_forget(txn, c->pack, &c->rows)
                      : db_txn_pack_mark(txn, c->pack, &c->known);
    return r;
}

static void test_marked_pack(void **state)
{
    struct test_db *e = *state;
    uint8_t a[PROTO_HASH_LEN], b[PROTO_HASH_LEN], j[PROTO_HASH_LEN], doc[PROTO_HASH_LEN];
    const uint8_t(*both)[PROTO_HASH_LEN] = (const uint8_t(*)[PROTO_HASH_LEN])a;
    struct test_live live = {.hashes = both, .n = 1};
    struct db_loc in7 = {.pack = 7, .off = 16, .len = 100, .size = 50, .stored = 9};
    struct db_loc in8 = {.pack = 8, .off = 16, .len = 100, .size = 50, .stored = 9};
    struct db_loc loc;
    struct mark_ctx c = {0};
    struct db_mark *marks;
    uint64_t condemned = 0, revived = 0;
    uint32_t stored;
    size_t n;

    test_hash(a, 0xa0, 1);
    test_hash(b, 0xb0, 2);
    test_hash(j, 0xc0, 3);
    test_hash(doc, 0xd0, 4);
    assert_int_equal(test_pack_set(e, 7, 1000, DB_PACK_SEALED), 0);
    assert_int_equal(test_pack_set(e, 8, 1000, DB_PACK_SEALED), 0);
    assert_int_equal(test_chunk_put(e, a, &in7), 0);
    in7.off += 100;
    assert_int_equal(test_segment_put(e, b, &in7), 0);
    in7.off += 100;
    assert_int_equal(test_journal_put(e, j, &in7, doc, 5, false, true), 0);

    /* A pack the database does not know: nothing happens. */
    c.pack = 99;
    assert_int_equal(test_db_run(e, mark_apply, &c, false), 0);
    assert_false(c.known);
    /* Pack 7 marked: its rows read, but dedup no longer picks them. */
    c.pack = 7;
    c.m = (struct db_mark){.writer = 0xa1,
                           .gen = 3,
                           .state = DB_MARK_SEEN,
                           .barrier = 12,
                           .body = "mark body",
                           .body_len = 9};
    assert_int_equal(test_db_run(e, mark_apply, &c, false), 0);
    assert_true(c.known);
    assert_int_equal(test_db_query(e, "SELECT state FROM packs WHERE seq = 7"), DB_PACK_MARKED);
    assert_int_equal(db_chunk_lookup(e->db, a, &stored), DB_E_NOT_FOUND);
    assert_int_equal(db_chunk_find(e->db, a, &loc), 0);
    assert_int_equal(loc.pack, 7);
    /* A sweep that finds it referenced leaves it condemned: its writer decides what lives. */
    assert_int_equal(test_sweep(e, DB_TABLE_CHUNKS, &live, 4, 10, &condemned, &revived, NULL), 0);
    assert_int_equal(revived, 0);
    assert_int_equal(db_chunk_lookup(e->db, a, &stored), DB_E_NOT_FOUND);
    /* Copies elsewhere become the rows' locations: chunk, segment and journal entry alike. */
    assert_int_equal(test_chunk_put(e, a, &in8), 0);
    in8.off += 100;
    assert_int_equal(test_segment_put(e, b, &in8), 0);
    in8.off += 100;
    assert_int_equal(test_journal_put(e, j, &in8, doc, 5, false, false), 0);
    assert_int_equal(db_chunk_find(e->db, a, &loc), 0);
    assert_int_equal(loc.pack, 8);
    assert_int_equal(db_chunk_lookup(e->db, a, &stored), 0);
    assert_int_equal(db_segment_find(e->db, b, &loc), 0);
    assert_int_equal(loc.pack, 8);
    assert_int_equal(test_db_query(e, "SELECT pack FROM journal"), 8);
    /* The entry keeps having been applied. */
    assert_int_equal(test_db_query(e, "SELECT applied FROM journal"), 1);
    /* A known entry in a pack that is not marked keeps its row. */
    in7.off += 100;
    assert_int_equal(test_journal_put(e, j, &in7, doc, 5, false, false), 0);
    assert_int_equal(test_db_query(e, "SELECT pack FROM journal"), 8);

    /* Forgetting pack 8 takes its rows and its row with it. */
    c = (struct mark_ctx){.pack = 8, .forget = true};
    assert_int_equal(test_db_run(e, mark_apply, &c, false), 0);
    assert_int_equal(c.rows, 3);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM packs WHERE seq = 8"), 0);
    assert_int_equal(db_chunk_find(e->db, a, &loc), DB_E_NOT_FOUND);

    /* The marks as they were set, and updated. */
    assert_int_equal(db_marks(e->db, &marks, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(marks[0].writer, 0xa1);
    assert_int_equal(marks[0].gen, 3);
    assert_int_equal(marks[0].state, DB_MARK_SEEN);
    assert_int_equal(marks[0].barrier, 12);
    assert_string_equal(marks[0].body, "mark body");
    db_marks_free(marks, n);
    c = (struct mark_ctx){
        .m = {.writer = 0xa1, .gen = 3, .state = DB_MARK_ACKED, .body = "x", .body_len = 1}};
    assert_int_equal(test_db_run(e, mark_apply, &c, false), 0);
    c.m.gen = 2;
    assert_int_equal(test_db_run(e, mark_apply, &c, false), 0);
    assert_int_equal(db_marks(e->db, &marks, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(marks[0].gen, 2);
    assert_int_equal(marks[1].state, DB_MARK_ACKED);
    assert_int_equal(marks[1].body_len, 1);
    db_marks_free(marks, n);
}

int test_db_gc_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gc_generation, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_each_manifest, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_condemn_page, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_condemn_cursor, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_pack_usage, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_deletes_live_while_a_pack_waits, test_db_setup,
                                        test_db_teardown),
        cmocka_unit_test_setup_teardown(test_pack_rows, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_row_move_drop, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_marked_pack, test_db_setup, test_db_teardown),
    };
    return cmocka_run_group_tests_name("database: gc", tests, NULL, NULL);
}
