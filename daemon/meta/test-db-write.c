/*
 * Unit tests of listing, deleting and the search index's queue of removals
 * (db-docs.c), and of the writer (db.c): savepoints, group commit, a failing
 * change rolled back alone, durable commits, syncing the log, and reopening.
 */
#include "daemon/meta/test-db.h"
#include "daemon/meta/db-int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/util.h"

/* ---- listing -------------------------------------------------------------- */

static void test_list(void **state)
{
    struct test_db *e = *state;
    /* Added out of hash order; first bytes give the hash order 0x10 < 0x30 < ... */
    static const uint8_t firsts[] = {0x50, 0x10, 0x90, 0x30, 0x70};
    static const char *const names[] = {"n50", "n10", "n90", "n30", ""};
    struct test_doc d[5];
    char hex[5][PROTO_HASH_HEX + 1];
    struct db_doc *docs;
    size_t n;

    for (size_t i = 0; i < 5; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        test_hash(d[i].hash, firsts[i], (uint8_t)(30 + i));
        d[i].size = 100 * (i + 1);
        d[i].name = names[i];
        /* Every other document is red; 0x90 is also blue. */
        if (i % 2 == 0)
            d[i].tags[0] = "red";
        if (i == 2)
            d[i].tags[1] = "blue";
        d[i].nroot = 1;
        test_hex(d[i].hash, hex[i]);
        test_doc_add_ok(e, &d[i]);
    }

    /* Everything, by hash: 0x10 0x30 0x50 0x70 0x90 are indices 1 3 0 4 2. */
    static const size_t order[] = {1, 3, 0, 4, 2};
    assert_int_equal(db_list(e->db, NULL, NULL, 100, &docs, &n), 0);
    assert_int_equal(n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(docs[i].hash, hex[order[i]]);
        assert_int_equal(docs[i].size, d[order[i]].size);
        assert_null(docs[i].root); /* a list does not load manifests */
    }
    /* Listed documents carry their newest name and their tags. */
    assert_string_equal(docs[4].name, "n90");
    assert_int_equal(docs[4].ntags, 2);
    assert_string_equal(docs[4].tags[0], "blue");
    assert_string_equal(docs[4].tags[1], "red");
    assert_null(docs[3].name); /* 0x70 was added without a name */
    assert_int_equal(docs[0].ntags, 0);
    db_docs_free(docs, n);

    /* Filtered by tag, still in hash order: 0x50 0x70 0x90. */
    assert_int_equal(db_list(e->db, "red", NULL, 100, &docs, &n), 0);
    assert_int_equal(n, 3);
    assert_string_equal(docs[0].hash, hex[0]);
    assert_string_equal(docs[1].hash, hex[4]);
    assert_string_equal(docs[2].hash, hex[2]);
    db_docs_free(docs, n);
    assert_int_equal(db_list(e->db, "blue", NULL, 100, &docs, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(docs[0].hash, hex[2]);
    db_docs_free(docs, n);
    assert_int_equal(db_list(e->db, "green", NULL, 100, &docs, &n), 0);
    assert_int_equal(n, 0);
    assert_null(docs);

    /* A limit, then paging with `after`: every document exactly once. */
    assert_int_equal(db_list(e->db, NULL, NULL, 2, &docs, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(docs[0].hash, hex[1]);
    assert_string_equal(docs[1].hash, hex[3]);
    db_docs_free(docs, n);

    char after[PROTO_HASH_HEX + 1] = "";
    size_t seen = 0, pages = 0;
    for (;;) {
        assert_int_equal(db_list(e->db, NULL, after[0] ? after : NULL, 2, &docs, &n), 0);
        if (n == 0)
            break;
        pages++;
        for (size_t i = 0; i < n; i++, seen++) {
            assert_true(seen < 5);
            assert_string_equal(docs[i].hash, hex[order[seen]]);
        }
        memcpy(after, docs[n - 1].hash, sizeof(after));
        db_docs_free(docs, n);
    }
    assert_int_equal(seen, 5);
    assert_int_equal(pages, 3);

    /* `after` with a tag; `after` the last hash gives nothing. */
    assert_int_equal(db_list(e->db, "red", hex[0], 1, &docs, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(docs[0].hash, hex[4]);
    db_docs_free(docs, n);
    assert_int_equal(db_list(e->db, NULL, hex[2], 10, &docs, &n), 0);
    assert_int_equal(n, 0);
}

/* ---- deleting ------------------------------------------------------------- */

static void test_delete(void **state)
{
    struct test_db *e = *state;
    struct test_doc keep = {
        .size = 7, .name = "keep", .tags = {"t"}, .meta_keys = {"k"}, .meta_values = {"v"}};
    struct test_doc d = {.size = 8,
                         .name = "gone.txt",
                         .tags = {"t", "u"},
                         .meta_keys = {"k", "j"},
                         .meta_values = {"v", "w"},
                         .depth = 1,
                         .nroot = 2};
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc, *docs;
    struct db_totals t;
    size_t n;

    test_hash(keep.hash, 0x01, 40);
    test_hash(d.hash, 0xd0, 41);
    test_hex(d.hash, hex);
    test_doc_add_ok(e, &keep);
    int64_t id = test_doc_add_ok(e, &d).rowid;
    d.name = "gone-alias";
    test_doc_add_ok(e, &d);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM names"), 3);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM tags"), 3);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM meta"), 3);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM search_removals"), 0);

    assert_int_equal(test_doc_delete(e, hex), 0);
    assert_int_equal(db_resolve(e->db, "gone.txt", 8, 0, &doc), DB_E_NOT_FOUND);
    assert_int_equal(db_resolve(e->db, "gone-alias", 10, 0, &doc), DB_E_NOT_FOUND);
    assert_int_equal(db_resolve(e->db, hex, PROTO_HASH_HEX, 0, &doc), DB_E_NOT_FOUND);
    assert_int_equal(db_load(e->db, id, 0, &doc), DB_E_NOT_FOUND);
    assert_int_equal(db_list(e->db, "u", NULL, 10, &docs, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(db_list(e->db, "t", NULL, 10, &docs, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(docs[0].name, "keep");
    db_docs_free(docs, n);
    /* Its names, tags and metadata went with it; the other document's stayed. */
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM names"), 1);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM tags"), 1);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM meta"), 1);
    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, 1);
    assert_int_equal(t.logical_bytes, 7);
    /* The index still has to drop its entry. */
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM search_removals"), 1);

    /* The same content added again starts clean, under a new row id. */
    struct test_doc again = {.size = 8, .depth = 1, .nroot = 2};
    memcpy(again.hash, d.hash, PROTO_HASH_LEN);
    struct db_add out = test_doc_add_ok(e, &again);
    assert_true(out.created);
    assert_true(out.rowid > id); /* ids are never reused: the index keys on them */
    assert_int_equal(db_resolve(e->db, hex, PROTO_HASH_HEX, DB_WANT_DETAILS, &doc), 0);
    assert_null(doc.name);
    assert_int_equal(doc.ntags, 0);
    assert_int_equal(doc.nnames, 0);
    assert_int_equal(doc.nmeta, 0);
    db_doc_clear(&doc);

    /* Deleting what is gone is not found and queues nothing. */
    assert_int_equal(test_doc_delete(e, hex), 0);
    assert_int_equal(test_doc_delete(e, hex), DB_E_NOT_FOUND);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM search_removals"), 2);
    assert_int_equal(db_resolve(e->db, "keep", 4, 0, &doc), 0);
    db_doc_clear(&doc);
}

/* ---- the search index's removals ------------------------------------------ */

static int removal_done(struct db_txn *txn, void *ctx)
{
    return db_txn_removal_done(txn, *(int64_t *)ctx);
}

static void test_removals(void **state)
{
    struct test_db *e = *state;
    struct test_doc d[3];
    int64_t ids[3];
    char hex[PROTO_HASH_HEX + 1];
    struct db_removal *rm;
    size_t n;

    assert_int_equal(db_removals(e->db, 10, &rm, &n), 0);
    assert_int_equal(n, 0);
    db_removals_free(rm, n);
    for (size_t i = 0; i < 3; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        test_hash(d[i].hash, (uint8_t)(0xa0 + i), (uint8_t)(50 + i));
        d[i].size = 1000 + i;
        d[i].depth = (unsigned)i; /* depth 0 with one entry, 1 and 2 with more */
        d[i].nroot = i + 1;
        ids[i] = test_doc_add_ok(e, &d[i]).rowid;
    }
    /* Deleted out of row order: the queue is by row id (oldest first). */
    for (size_t k = 0; k < 3; k++) {
        size_t i = (k + 1) % 3;
        test_hex(d[i].hash, hex);
        assert_int_equal(test_doc_delete(e, hex), 0);
    }

    assert_int_equal(db_removals(e->db, 10, &rm, &n), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(rm[i].rowid, ids[i]);
        assert_int_equal(rm[i].depth, i);
        assert_int_equal(rm[i].root_len, (i + 1) * MANIFEST_ENTRY);
        assert_memory_equal(rm[i].root, d[i].root, rm[i].root_len);
    }
    db_removals_free(rm, n);

    /* At most `max`. */
    assert_int_equal(db_removals(e->db, 2, &rm, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rm[1].rowid, ids[1]);
    db_removals_free(rm, n);

    /* Done with the middle one; an unknown row id is harmless. */
    assert_int_equal(test_db_run(e, removal_done, &ids[1], false), 0);
    int64_t unknown = ids[2] + 100;
    assert_int_equal(test_db_run(e, removal_done, &unknown, false), 0);
    assert_int_equal(db_removals(e->db, 10, &rm, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(rm[0].rowid, ids[0]);
    assert_int_equal(rm[1].rowid, ids[2]);
    db_removals_free(rm, n);
}

/* ---- the writer ------------------------------------------------------------ */

enum op_kind {
    OP_ADD,
    OP_DELETE,
    OP_ADD_THEN_FAIL,  /* records an add, then fails: none of it may remain */
    OP_NESTED_ROLLBACK /* an add, and a second one in a savepoint rolled back */
};

struct op {
    struct db_write w;
    enum op_kind kind;
    struct test_doc *doc, *doc2;
    struct db_add add, add2;
    const char *hex; /* OP_DELETE */
    int applied, done_calls, done_seq, *seq;
    int savepoint_status;
    struct db *db;
    struct op *then; /* queued from this op's done callback */
};

static void add_of(struct db_add *add, struct test_doc *d)
{
    memset(add, 0, sizeof(*add));
    memcpy(add->hash, d->hash, PROTO_HASH_LEN);
    add->size = d->size;
    add->mime = "application/octet-stream";
    add->name = d->name;
    add->tags = d->tags;
    add->ntags = d->tags[0] ? 1 : 0;
    add->root = d->root;
    static uint64_t events;
    add->event_ns = ++events;
}

static int op_apply(struct db_txn *txn, struct db_write *w)
{
    struct op *op = container_of(w, struct op, w);
    int r;

    op->applied++;
    switch (op->kind) {
    case OP_ADD:
        return db_txn_add(txn, &op->add);
    case OP_DELETE:
        return db_txn_delete(txn, op->hex);
    case OP_ADD_THEN_FAIL:
        r = db_txn_add(txn, &op->add);
        return r ? r : -EINVAL;
    case OP_NESTED_ROLLBACK:
        if ((r = db_txn_add(txn, &op->add)) != 0)
            return r;
        if ((r = db_txn_savepoint(txn)) != 0)
            return r;
        r = db_txn_add(txn, &op->add2);
        op->savepoint_status = r;
        return db_txn_savepoint_end(txn, true);
    }
    return -ENOSYS;
}

static void op_done(struct db_write *w)
{
    struct op *op = container_of(w, struct op, w);

    op->done_calls++;
    op->done_seq = (*op->seq)++;
    if (op->then)
        db_write(op->db, &op->then->w);
}

static void op_init(struct op *op, struct test_db *e, int *seq, enum op_kind kind,
                    struct test_doc *d)
{
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    op->doc = d;
    op->seq = seq;
    op->db = e->db;
    op->w.apply = op_apply;
    op->w.done = op_done;
    if (d)
        add_of(&op->add, d);
}

static void run_loop(struct test_db *e)
{
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_false(db_busy(e->db));
}

#define MANY 64

static void test_group_commit(void **state)
{
    struct test_db *e = *state;
    struct test_doc d[MANY], extra = {.size = 1000, .name = "chained"};
    struct op ops[MANY], chained;
    char names[MANY][16];
    struct db_totals t;
    int seq = 0;

    for (size_t i = 0; i < MANY; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        test_hash(d[i].hash, (uint8_t)i, (uint8_t)(100 + i));
        snprintf(names[i], sizeof(names[i]), "doc-%zu", i);
        d[i].name = names[i];
        d[i].size = i + 1;
        op_init(&ops[i], e, &seq, OP_ADD, &d[i]);
    }
    /* One more write, queued from a done callback while a batch completes. */
    test_hash(extra.hash, 0xee, 250);
    op_init(&chained, e, &seq, OP_ADD, &extra);
    ops[MANY / 2].then = &chained;

    /* Everything is queued before the loop runs, so the writes pile up. */
    for (size_t i = 0; i < MANY; i++)
        db_write(e->db, &ops[i].w);
    assert_true(db_busy(e->db));
    for (size_t i = 0; i < MANY; i++)
        assert_int_equal(ops[i].done_calls, 0);
    run_loop(e);

    for (size_t i = 0; i < MANY; i++) {
        struct db_doc doc;
        assert_int_equal(ops[i].w.status, 0);
        assert_int_equal(ops[i].applied, 1);
        assert_int_equal(ops[i].done_calls, 1);
        assert_int_equal(ops[i].done_seq, (int)i); /* completions in queue order */
        assert_true(ops[i].add.created);
        assert_int_equal(db_resolve(e->db, names[i], strlen(names[i]), 0, &doc), 0);
        assert_int_equal(doc.rowid, ops[i].add.rowid);
        db_doc_clear(&doc);
    }
    assert_int_equal(chained.w.status, 0);
    assert_int_equal(chained.done_calls, 1);
    assert_int_equal(chained.done_seq, MANY);
    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, MANY + 1);
    assert_int_equal(t.logical_bytes, MANY * (MANY + 1) / 2 + 1000);
}

/*
 * The first write starts a batch at once; everything queued while it runs
 * forms the second batch. A failing change there is rolled back alone.
 */
static void test_failing_item_rolls_back_alone(void **state)
{
    struct test_db *e = *state;
    struct test_doc first = {.size = 1, .name = "first"};
    struct test_doc a = {.size = 2, .name = "a", .tags = {"x"}};
    struct test_doc bad = {.size = 3, .name = "bad", .tags = {"x"}};
    struct test_doc c = {.size = 4, .name = "c"};
    struct op op_first, op_a, op_bad, op_missing, op_c;
    char hex_bad[PROTO_HASH_HEX + 1], hex_missing[PROTO_HASH_HEX + 1];
    uint8_t missing[PROTO_HASH_LEN];
    struct db_totals t;
    struct db_doc doc;
    int seq = 0;

    test_hash(first.hash, 0x0f, 60);
    test_hash(a.hash, 0xaa, 61);
    test_hash(bad.hash, 0xbb, 62);
    test_hash(c.hash, 0xcc, 63);
    test_hash(missing, 0xdd, 64);
    test_hex(bad.hash, hex_bad);
    test_hex(missing, hex_missing);

    op_init(&op_first, e, &seq, OP_ADD, &first);
    op_init(&op_a, e, &seq, OP_ADD, &a);
    op_init(&op_bad, e, &seq, OP_ADD_THEN_FAIL, &bad);
    op_init(&op_missing, e, &seq, OP_DELETE, NULL);
    op_missing.hex = hex_missing;
    op_init(&op_c, e, &seq, OP_ADD, &c);

    db_write(e->db, &op_first.w);
    db_write(e->db, &op_a.w);
    db_write(e->db, &op_bad.w);
    db_write(e->db, &op_missing.w);
    db_write(e->db, &op_c.w);
    run_loop(e);

    assert_int_equal(op_first.w.status, 0);
    assert_int_equal(op_a.w.status, 0);
    assert_int_equal(op_bad.w.status, -EINVAL);
    assert_int_equal(op_missing.w.status, DB_E_NOT_FOUND);
    assert_int_equal(op_c.w.status, 0);
    struct op *all[] = {&op_first, &op_a, &op_bad, &op_missing, &op_c};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        assert_int_equal(all[i]->applied, 1);
        assert_int_equal(all[i]->done_calls, 1);
        assert_int_equal(all[i]->done_seq, (int)i);
    }

    /* Nothing the failed change wrote remains: document, name, tag. */
    assert_int_equal(db_resolve(e->db, "bad", 3, 0, &doc), DB_E_NOT_FOUND);
    assert_int_equal(db_resolve(e->db, hex_bad, PROTO_HASH_HEX, 0, &doc), DB_E_NOT_FOUND);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM tags"), 1);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM names"), 3);
    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, 3);
    assert_int_equal(t.logical_bytes, 1 + 2 + 4);
}

/* A nested savepoint rolled back undoes its own changes only. */
static void test_savepoint(void **state)
{
    struct test_db *e = *state;
    struct test_doc outer = {.size = 5, .name = "outer"}, inner = {.size = 6, .name = "inner"};
    struct db_doc doc;
    struct op op;
    int seq = 0;

    test_hash(outer.hash, 0x05, 70);
    test_hash(inner.hash, 0x06, 71);
    op_init(&op, e, &seq, OP_NESTED_ROLLBACK, &outer);
    add_of(&op.add2, &inner);
    db_write(e->db, &op.w);
    run_loop(e);
    assert_int_equal(op.w.status, 0);
    assert_int_equal(op.savepoint_status, 0);
    assert_int_equal(db_resolve(e->db, "outer", 5, 0, &doc), 0);
    db_doc_clear(&doc);
    assert_int_equal(db_resolve(e->db, "inner", 5, 0, &doc), DB_E_NOT_FOUND);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM documents"), 1);
}

/*
 * A durable write is synced before its callback; a normal one is not (the
 * packs are the log). Both write the same kind of change.
 */
static void test_durable_write(void **state)
{
    struct test_db *e = *state;
    struct test_doc d1 = {.size = 1, .name = "normal"}, d2 = {.size = 2, .name = "durable"};
    struct test_doc d3 = {.size = 3, .name = "normal-again"};
    uint64_t before;

    test_hash(d1.hash, 0x31, 80);
    test_hash(d2.hash, 0x32, 81);
    test_hash(d3.hash, 0x33, 82);

    before = test_syncs();
    test_doc_add_ok(e, &d1);
    assert_int_equal(test_syncs() - before, 0);

    struct op op;
    int seq = 0;
    op_init(&op, e, &seq, OP_ADD, &d2);
    op.w.durable = true;
    before = test_syncs();
    db_write(e->db, &op.w);
    run_loop(e);
    assert_int_equal(op.w.status, 0);
    assert_true(test_syncs() - before >= 1);

    /* The setting does not stick to later writes. */
    before = test_syncs();
    test_doc_add_ok(e, &d3);
    assert_int_equal(test_syncs() - before, 0);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM documents"), 3);
}

/*
 * A durable write whose commit could not be made durable fails, and changes
 * nothing: a repack must not delete the old pack on the word of a commit
 * that a power cut could undo. A normal write is not affected.
 */
static void test_durable_write_without_full_sync_fails(void **state)
{
    struct test_db *e = *state;
    struct test_doc d1 = {.size = 1, .name = "durable"}, d2 = {.size = 2, .name = "normal"};
    struct op op;
    int seq = 0;

    test_hash(d1.hash, 0x35, 84);
    test_hash(d2.hash, 0x36, 85);
    test_fail_exec("PRAGMA synchronous=FULL");
    op_init(&op, e, &seq, OP_ADD, &d1);
    op.w.durable = true;
    db_write(e->db, &op.w);
    run_loop(e);
    assert_true(op.w.status < 0);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM documents"), 0);
    test_doc_add_ok(e, &d2);
    test_fail_exec(NULL);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM documents"), 1);
}

/* The log of commits made without a sync is synced on request, by any thread, without the writer.
 */
static void test_sync_log(void **state)
{
    struct test_db *e = *state;
    struct test_doc d = {.size = 1, .name = "logged"};
    char path[PATH_MAX], wal[PATH_MAX + 8], real[PATH_MAX];
    uint64_t before;

    test_hash(d.hash, 0x34, 83);
    before = test_syncs();
    test_doc_add_ok(e, &d);
    assert_int_equal(test_syncs() - before, 0);
    assert_int_equal(db_sync_log(e->db), 0);
    assert_true(test_syncs() - before >= 1);
    /* What it synced is the write-ahead log beside the database. */
    test_last_sync(path, sizeof(path));
    snprintf(wal, sizeof(wal), "%s-wal", e->path);
    assert_non_null(realpath(wal, real));
    assert_string_equal(path, real);
    assert_false(db_busy(e->db));
}

/* What a committed write wrote is in the file: a new db on the same path sees it. */
static void test_reopen(void **state)
{
    struct test_db *e = *state;
    struct test_doc d = {.size = 42, .stored = 21, .name = "persisted", .tags = {"keep"}};
    struct db_doc doc;

    test_hash(d.hash, 0x42, 90);
    d.nroot = 2;
    test_doc_add_ok(e, &d);
    e->db = db_free(e->db);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(test_db_query(e, "PRAGMA user_version"), DB_FORMAT);
    assert_int_equal(db_new(&e->db, &e->loop, e->path), 0);

    assert_int_equal(db_resolve(e->db, "persisted", 9, DB_WANT_DETAILS | DB_WANT_MANIFEST, &doc),
                     0);
    assert_int_equal(doc.size, 42);
    assert_int_equal(doc.stored_size, 21);
    assert_int_equal(doc.ntags, 1);
    assert_string_equal(doc.tags[0], "keep");
    assert_int_equal(doc.root_len, 2 * MANIFEST_ENTRY);
    assert_memory_equal(doc.root, d.root, doc.root_len);
    db_doc_clear(&doc);
}

/* A transaction that dirties about a hundred pages: 100 rows of 600 bytes in the state table. */
static int fill_apply(struct db_txn *txn, void *ctx)
{
    int *round = ctx;
    char sql[160];

    snprintf(sql, sizeof(sql),
             "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 99)"
             " INSERT INTO state(key, value) SELECT 'fill-%d-' || i, randomblob(600) FROM n",
             *round);
    return sqlite3_exec(db_conn_sqlite(txn->c), sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

/*
 * The WAL is checkpointed by the database's own thread, not inside the
 * writer's commits: 100 transactions of about 100 pages each, each waited
 * for, leave a WAL of about the threshold (1000 frames), each checkpoint run
 * by the thread (SQLite's own, in the commits, would leave its count at 0).
 */
static void test_checkpoints_off_the_writer(void **state)
{
    struct test_db *e = *state;
    char wal[PATH_MAX + 8];
    struct stat st;
    int ran = 0;

    for (int round = 0; round < 100; round++) {
        assert_int_equal(test_db_run(e, fill_apply, &round, false), 0);
        ran = db_ckpt_idle(e->db, 10000);
        assert_true(ran >= 0);
    }
    /* About 10,000 frames, a checkpoint per 1,000: by the thread, not by the commits. */
    assert_true(ran >= 5);
    assert_int_equal(test_db_query(e, "SELECT count(*) FROM state WHERE key LIKE 'fill-%'"),
                     100 * 100);
    snprintf(wal, sizeof(wal), "%s-wal", e->path);
    assert_int_equal(stat(wal, &st), 0);
    /* 1,000 frames of 1 KiB pages and their headers, and a transaction more. */
    assert_true(st.st_size < 3000 * (1024 + 24));
    assert_true(st.st_size > 0);
}

int test_db_write_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_delete, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_removals, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_failing_item_rolls_back_alone, test_db_setup,
                                        test_db_teardown),
        cmocka_unit_test_setup_teardown(test_savepoint, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_durable_write, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_durable_write_without_full_sync_fails, test_db_setup,
                                        test_db_teardown),
        cmocka_unit_test_setup_teardown(test_sync_log, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_reopen, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_checkpoints_off_the_writer, test_db_setup,
                                        test_db_teardown),
    };
    return cmocka_run_group_tests_name("database: writes", tests, NULL, NULL);
}
