/*
 * Unit tests for the metadata database on a real libuv loop and a real SQLite
 * file in a temporary directory: group-committed writes through db_write(),
 * ref resolution (hash, prefix, name, name versions), merging of re-added
 * content, chunk reference counts, listing, totals and deletion. Every test
 * ends with the database freed, the loop run dry, uv_loop_close() == 0 and
 * the temporary directory removed.
 *
 * The read functions are documented for worker threads; the tests call them
 * on the main thread while no batch runs, which is equivalent.
 */
#include "daemon/db.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "proto/util.h"

/* ---- environment: temp dir, loop, database -------------------------------- */

struct env {
    char dir[PATH_MAX / 2]; /* mkdtemp result, removed at the end */
    char path[PATH_MAX];    /* the database file */
    uv_loop_t loop;
    struct db *db;
    int done_seq; /* completions seen so far, to check their order */
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    const char *tmp = getenv("TMPDIR");

    assert_non_null(e);
    if (!tmp || !*tmp)
        tmp = "/tmp";
    assert_true(snprintf(e->dir, sizeof(e->dir), "%s/cairn-test-db-XXXXXX", tmp) <
                (int)sizeof(e->dir));
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->path, sizeof(e->path), "%s/meta.db", e->dir);
    assert_int_equal(uv_loop_init(&e->loop), 0);
    assert_int_equal(db_new(&e->db, &e->loop, e->path), 0);
    assert_non_null(e->db);
    *state = e;
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int teardown(void **state)
{
    struct env *e = *state;

    assert_false(db_busy(e->db));
    e->db = db_free(e->db);
    assert_null(e->db);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    assert_int_equal(nftw(e->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    assert_int_equal(access(e->dir, F_OK), -1);
    free(e);
    return 0;
}

/* ---- writes through db_write() -------------------------------------------- */

enum op_kind {
    OP_ADD,
    OP_DELETE,
    OP_ADD_THEN_FAIL, /* records an add, then fails: none of it may remain */
};

struct op {
    struct db_write w;
    struct env *env;
    enum op_kind kind;
    struct db_add add;
    const char *ref; /* OP_DELETE */
    char deleted[PROTO_HASH_HEX + 1];
    int applied;     /* apply calls (writer thread) */
    int done_calls;  /* done calls (loop thread) */
    int done_seq;    /* position among all completions */
    struct op *then; /* queued from this op's done callback */
};

static int op_apply(struct db_txn *txn, struct db_write *w)
{
    struct op *op = container_of(w, struct op, w);
    int r;

    op->applied++;
    switch (op->kind) {
    case OP_ADD:
        return db_txn_add(txn, &op->add);
    case OP_DELETE:
        return db_txn_delete(txn, op->ref, strlen(op->ref), op->deleted);
    case OP_ADD_THEN_FAIL:
        /* No cmocka asserts here: this is the writer thread. */
        r = db_txn_add(txn, &op->add);
        return r ? r : -EINVAL;
    }
    return -ENOSYS;
}

static void op_done(struct db_write *w)
{
    struct op *op = container_of(w, struct op, w);

    op->done_calls++;
    op->done_seq = op->env->done_seq++;
    if (op->then)
        db_write(op->env->db, &op->then->w);
}

static void op_init(struct op *op, struct env *e, enum op_kind kind)
{
    memset(op, 0, sizeof(*op));
    op->env = e;
    op->kind = kind;
    op->w.apply = op_apply;
    op->w.done = op_done;
    op->w.status = 12345; /* db_write must reset it */
}

/* Runs the loop until every queued write completed; the loop then has nothing left. */
static void run(struct env *e)
{
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_false(db_busy(e->db));
}

/* Queues one op, runs it, checks it completed once, and returns its status. */
static int run_op(struct env *e, struct op *op)
{
    db_write(e->db, &op->w);
    assert_true(db_busy(e->db));
    run(e);
    assert_int_equal(op->applied, 1);
    assert_int_equal(op->done_calls, 1);
    return op->w.status;
}

/* A document's description; hashes are made up, the database does not check them. */
struct doc_spec {
    uint8_t hash[PROTO_HASH_LEN];
    uint64_t size;
    const char *mime, *name;
    const char *tags[4];
    const char *meta_keys[4], *meta_values[4];
    struct db_chunk chunks[4];
    size_t nchunks;
};

static size_t count_strings(const char *const *v, size_t max)
{
    size_t n = 0;
    while (n < max && v[n])
        n++;
    return n;
}

static void op_add_init(struct op *op, struct env *e, const struct doc_spec *d)
{
    op_init(op, e, OP_ADD);
    memcpy(op->add.hash, d->hash, PROTO_HASH_LEN);
    op->add.size = d->size;
    op->add.mime = d->mime ? d->mime : "application/octet-stream";
    op->add.name = d->name;
    op->add.tags = d->tags;
    op->add.ntags = count_strings(d->tags, 4);
    op->add.meta_keys = d->meta_keys;
    op->add.meta_values = d->meta_values;
    op->add.nmeta = count_strings(d->meta_keys, 4);
    op->add.chunks = d->chunks;
    op->add.nchunks = d->nchunks;
}

static struct db_add add_doc(struct env *e, const struct doc_spec *d)
{
    struct op op;

    op_add_init(&op, e, d);
    assert_int_equal(run_op(e, &op), 0);
    return op.add;
}

static int delete_ref(struct env *e, const char *ref, char hash[PROTO_HASH_HEX + 1])
{
    struct op op;

    op_init(&op, e, OP_DELETE);
    op.ref = ref;
    int r = run_op(e, &op);
    if (hash)
        memcpy(hash, op.deleted, sizeof(op.deleted));
    return r;
}

/* Fills a hash whose bytes all derive from `seed`; the first byte is `first`. */
static void make_hash(uint8_t hash[PROTO_HASH_LEN], uint8_t first, uint8_t seed)
{
    for (size_t i = 0; i < PROTO_HASH_LEN; i++)
        hash[i] = (uint8_t)(seed * 37 + i * 11 + 1);
    hash[0] = first;
}

static void make_chunk(struct db_chunk *c, uint8_t seed, uint32_t size, uint32_t stored)
{
    make_hash(c->hash, 0xc0, seed);
    c->size = size;
    c->stored_size = stored;
}

static void hex_of(const uint8_t hash[PROTO_HASH_LEN], char hex[PROTO_HASH_HEX + 1])
{
    proto_hex_encode(hash, PROTO_HASH_LEN, hex);
}

static int resolve(struct env *e, const char *ref, unsigned want, struct db_doc *doc)
{
    return db_resolve(e->db, ref, strlen(ref), want, doc);
}

/* Resolves `ref` and expects the document with `hash`, reported under `name` (NULL: none). */
static void assert_resolves(struct env *e, const char *ref, const uint8_t hash[PROTO_HASH_LEN],
                            const char *name)
{
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    int r;

    hex_of(hash, hex);
    r = resolve(e, ref, 0, &doc);
    if (r != 0)
        fail_msg("'%s' did not resolve: %d", ref, r);
    assert_string_equal(doc.hash, hex);
    if (name) {
        assert_non_null(doc.name);
        assert_string_equal(doc.name, name);
    } else {
        assert_null(doc.name);
    }
    db_doc_clear(&doc);
}

static void assert_resolve_fails(struct env *e, const char *ref, int expect)
{
    struct db_doc doc;
    int r = resolve(e, ref, DB_WANT_DETAILS, &doc);
    if (r != expect)
        fail_msg("'%s' resolved with %d, expected %d", ref, r, expect);
    /* A failed resolve leaves nothing to free. */
    assert_null(doc.name);
    assert_null(doc.tags);
}

/* Reads a chunk's reference count straight from the file: no API exposes it. */
static int64_t chunk_refs(struct env *e, const struct db_chunk *c)
{
    sqlite3 *sql;
    sqlite3_stmt *s;
    int64_t refs = -1;

    assert_int_equal(sqlite3_open_v2(e->path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_prepare_v2(sql, "SELECT refs FROM chunks WHERE hash = ?1", -1, &s, NULL),
        SQLITE_OK);
    sqlite3_bind_blob(s, 1, c->hash, PROTO_HASH_LEN, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW)
        refs = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(sql);
    return refs;
}

/* Counts rows of a table straight from the file. */
static int64_t count_rows(struct env *e, const char *table)
{
    char query[128];
    sqlite3 *sql;
    sqlite3_stmt *s;
    int64_t n = -1;

    snprintf(query, sizeof(query), "SELECT COUNT(*) FROM %s", table);
    assert_int_equal(sqlite3_open_v2(e->path, &sql, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(sql, query, -1, &s, NULL), SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW)
        n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(sql);
    return n;
}

/* ---- adding and resolving ------------------------------------------------- */

static void test_add_and_resolve(void **state)
{
    struct env *e = *state;
    struct doc_spec d = {
        .size = 300000,
        .mime = "text/plain",
        .name = "notes/alpha.txt",
        .tags = {"work", "draft"},
        .meta_keys = {"owner", "lang"},
        .meta_values = {"ann", "en"},
        .nchunks = 2,
    };
    char hex[PROTO_HASH_HEX + 1], ref[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    int64_t before = (int64_t)time(NULL);

    make_hash(d.hash, 0x3a, 1);
    make_chunk(&d.chunks[0], 1, 262144, 1000);
    make_chunk(&d.chunks[1], 2, 37856, 234);
    hex_of(d.hash, hex);

    struct db_add out = add_doc(e, &d);
    assert_true(out.created);
    assert_int_equal(out.stored_size, 1234);

    /* By full hash, with every detail. */
    assert_int_equal(resolve(e, hex, DB_WANT_CHUNKS | DB_WANT_DETAILS, &doc), 0);
    assert_string_equal(doc.hash, hex);
    assert_non_null(doc.name); /* found by hash: its newest name */
    assert_string_equal(doc.name, "notes/alpha.txt");
    assert_int_equal(doc.size, 300000);
    assert_int_equal(doc.stored_size, 1234);
    assert_int_equal(doc.nchunks, 2);
    assert_string_equal(doc.mime, "text/plain");
    assert_true(doc.created >= before && doc.created <= (int64_t)time(NULL));
    assert_non_null(doc.chunks);
    for (size_t i = 0; i < 2; i++) {
        assert_memory_equal(doc.chunks[i].hash, d.chunks[i].hash, PROTO_HASH_LEN);
        assert_int_equal(doc.chunks[i].size, d.chunks[i].size);
        assert_int_equal(doc.chunks[i].stored_size, d.chunks[i].stored_size);
    }
    assert_int_equal(doc.ntags, 2); /* sorted */
    assert_string_equal(doc.tags[0], "draft");
    assert_string_equal(doc.tags[1], "work");
    assert_int_equal(doc.nnames, 1);
    assert_string_equal(doc.names[0], "notes/alpha.txt");
    assert_int_equal(doc.nmeta, 2); /* sorted by key */
    assert_string_equal(doc.meta_keys[0], "lang");
    assert_string_equal(doc.meta_values[0], "en");
    assert_string_equal(doc.meta_keys[1], "owner");
    assert_string_equal(doc.meta_values[1], "ann");
    db_doc_clear(&doc);

    /* Without DB_WANT_* only the row and the name are loaded. */
    assert_int_equal(resolve(e, hex, 0, &doc), 0);
    assert_null(doc.chunks);
    assert_null(doc.tags);
    assert_null(doc.names);
    assert_int_equal(doc.nchunks, 2);
    db_doc_clear(&doc);

    /* By an 8-digit prefix, a longer one, and upper-case hex. */
    memcpy(ref, hex, 8);
    ref[8] = '\0';
    assert_resolves(e, ref, d.hash, "notes/alpha.txt");
    memcpy(ref, hex, 63);
    ref[63] = '\0';
    assert_resolves(e, ref, d.hash, "notes/alpha.txt");
    for (size_t i = 0; i <= PROTO_HASH_HEX; i++)
        ref[i] = (char)(hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 32 : hex[i]);
    assert_true(strcmp(ref, hex) != 0);
    assert_resolves(e, ref, d.hash, "notes/alpha.txt");
    ref[8] = '\0';
    assert_resolves(e, ref, d.hash, "notes/alpha.txt");

    /* By name. */
    assert_resolves(e, "notes/alpha.txt", d.hash, "notes/alpha.txt");

    /* Things that name nothing. */
    assert_resolve_fails(e, "notes/beta.txt", DB_E_NOT_FOUND);
    assert_resolve_fails(e, "notes/alpha.tx", DB_E_NOT_FOUND);
    memcpy(ref, hex, 7); /* too short for a prefix, so a name */
    ref[7] = '\0';
    assert_resolve_fails(e, ref, DB_E_NOT_FOUND);
    memcpy(ref, hex, PROTO_HASH_HEX + 1);
    ref[PROTO_HASH_HEX - 1] = ref[PROTO_HASH_HEX - 1] == '0' ? '1' : '0';
    assert_resolve_fails(e, ref, DB_E_NOT_FOUND);
    assert_resolve_fails(e, "", DB_E_NOT_FOUND);
    assert_int_equal(db_resolve(e->db, "notes/alpha.txt\0x", 17, 0, &doc), DB_E_NOT_FOUND);
}

/* A document added without a name has none, by hash or in a list. */
static void test_add_without_name(void **state)
{
    struct env *e = *state;
    struct doc_spec d = {.size = 0, .name = ""};
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;

    make_hash(d.hash, 0x11, 2);
    hex_of(d.hash, hex);
    assert_true(add_doc(e, &d).created);
    assert_int_equal(resolve(e, hex, DB_WANT_CHUNKS | DB_WANT_DETAILS, &doc), 0);
    assert_null(doc.name);
    assert_int_equal(doc.nnames, 0);
    assert_int_equal(doc.nchunks, 0);
    assert_int_equal(doc.size, 0);
    assert_string_equal(doc.mime, "application/octet-stream");
    db_doc_clear(&doc);
    assert_resolve_fails(e, "", DB_E_NOT_FOUND);
}

static void test_ambiguous_prefix(void **state)
{
    struct env *e = *state;
    struct doc_spec a = {.size = 1, .name = "a"}, b = {.size = 2, .name = "b"};
    char hex_a[PROTO_HASH_HEX + 1], hex_b[PROTO_HASH_HEX + 1], ref[PROTO_HASH_HEX + 1];
    char deleted[PROTO_HASH_HEX + 1];

    /* Both hashes start with the same five bytes: ten shared hex digits. */
    make_hash(a.hash, 0x5e, 3);
    memcpy(b.hash, a.hash, PROTO_HASH_LEN);
    b.hash[5] ^= 0x10; /* differs at hex digit 10 (0-based) */
    hex_of(a.hash, hex_a);
    hex_of(b.hash, hex_b);
    assert_memory_equal(hex_a, hex_b, 10);
    assert_true(hex_a[10] != hex_b[10]);
    add_doc(e, &a);
    add_doc(e, &b);

    for (size_t len = 8; len <= 10; len++) {
        memcpy(ref, hex_a, len);
        ref[len] = '\0';
        assert_resolve_fails(e, ref, DB_E_AMBIGUOUS);
    }
    memcpy(ref, hex_a, 11);
    ref[11] = '\0';
    assert_resolves(e, ref, a.hash, "a");
    memcpy(ref, hex_b, 11);
    assert_resolves(e, ref, b.hash, "b");

    /* A delete by an ambiguous prefix deletes nothing. */
    memcpy(ref, hex_a, 8);
    ref[8] = '\0';
    assert_int_equal(delete_ref(e, ref, deleted), DB_E_AMBIGUOUS);
    assert_resolves(e, hex_a, a.hash, "a");
    assert_resolves(e, hex_b, b.hash, "b");
}

/* A name made of hex digits is still a name when no hash matches it. */
static void test_hex_looking_names(void **state)
{
    struct env *e = *state;
    struct doc_spec a = {.size = 1, .name = "deadbeef"};
    struct doc_spec b = {.size = 2};
    char long_name[PROTO_HASH_HEX + 1], hex_b[PROTO_HASH_HEX + 1];

    make_hash(a.hash, 0x01, 4);
    make_hash(b.hash, 0x02, 5);
    hex_of(b.hash, hex_b);
    /* 64 hex digits that are not any document's hash, used as a name. */
    memset(long_name, 'f', PROTO_HASH_HEX);
    long_name[PROTO_HASH_HEX] = '\0';
    b.name = long_name;
    add_doc(e, &a);
    add_doc(e, &b);

    assert_resolves(e, "deadbeef", a.hash, "deadbeef");
    assert_resolves(e, long_name, b.hash, long_name);
    /* Upper case finds hashes, but names compare exactly. */
    assert_resolve_fails(e, "DEADBEEF", DB_E_NOT_FOUND);

    /* A hash prefix is tried before a name (PROTOCOL.md "References"). */
    struct doc_spec c = {.size = 3};
    char prefix_b[9];
    memcpy(prefix_b, hex_b, 8);
    prefix_b[8] = '\0';
    make_hash(c.hash, 0x03, 6);
    c.name = prefix_b;
    add_doc(e, &c);
    assert_resolves(e, prefix_b, b.hash, long_name);
}

static void test_name_versions(void **state)
{
    struct env *e = *state;
    struct doc_spec v1 = {.size = 10, .name = "report.pdf", .tags = {"v1"}};
    struct doc_spec v2 = {.size = 20, .name = "report.pdf", .tags = {"v2"}};
    struct doc_spec other = {.size = 30, .name = "other"};
    char hex1[PROTO_HASH_HEX + 1], hex2[PROTO_HASH_HEX + 1], deleted[PROTO_HASH_HEX + 1];
    struct db_doc doc;

    make_hash(v1.hash, 0x71, 6);
    make_hash(v2.hash, 0x72, 7);
    make_hash(other.hash, 0x73, 8);
    hex_of(v1.hash, hex1);
    hex_of(v2.hash, hex2);
    add_doc(e, &v1);
    add_doc(e, &other);
    add_doc(e, &v2);

    assert_resolves(e, "report.pdf", v2.hash, "report.pdf");
    /* The older version stays reachable by hash and keeps the name in its history. */
    assert_int_equal(resolve(e, hex1, DB_WANT_DETAILS, &doc), 0);
    assert_string_equal(doc.name, "report.pdf");
    assert_int_equal(doc.nnames, 1);
    assert_string_equal(doc.names[0], "report.pdf");
    db_doc_clear(&doc);

    /* Re-adding the current version under its own name changes nothing. */
    assert_false(add_doc(e, &v2).created);
    assert_resolves(e, "report.pdf", v2.hash, "report.pdf");

    /* Deleting the newest version falls back to the previous one. */
    assert_int_equal(delete_ref(e, "report.pdf", deleted), 0);
    assert_string_equal(deleted, hex2);
    assert_resolves(e, "report.pdf", v1.hash, "report.pdf");
    assert_resolve_fails(e, hex2, DB_E_NOT_FOUND);

    /* Adding v2 again makes it the newest version again, after v1. */
    assert_true(add_doc(e, &v2).created);
    assert_resolves(e, "report.pdf", v2.hash, "report.pdf");
    /* Then v1 again: a newer version of the name pointing back to v1. */
    assert_false(add_doc(e, &v1).created);
    assert_resolves(e, "report.pdf", v1.hash, "report.pdf");
    assert_resolves(e, "other", other.hash, "other");
}

/* A document's newest name is the one reported when it is found by hash. */
static void test_several_names(void **state)
{
    struct env *e = *state;
    struct doc_spec d = {.size = 5, .name = "first"};
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;

    make_hash(d.hash, 0x44, 9);
    hex_of(d.hash, hex);
    assert_true(add_doc(e, &d).created);
    d.name = "second";
    assert_false(add_doc(e, &d).created);

    assert_resolves(e, hex, d.hash, "second");
    assert_resolves(e, "first", d.hash, "first"); /* reports the name it was found by */
    assert_int_equal(resolve(e, "first", DB_WANT_DETAILS, &doc), 0);
    assert_int_equal(doc.nnames, 2);
    assert_string_equal(doc.names[0], "first");
    assert_string_equal(doc.names[1], "second");
    db_doc_clear(&doc);
}

static void test_add_twice_merges(void **state)
{
    struct env *e = *state;
    struct doc_spec first = {
        .size = 5000,
        .mime = "text/plain",
        .name = "one",
        .tags = {"a", "b"},
        .meta_keys = {"k1", "k2"},
        .meta_values = {"v1", "v2"},
        .nchunks = 1,
    };
    struct doc_spec second = first;
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    struct db_totals t;

    make_hash(first.hash, 0x9a, 10);
    make_chunk(&first.chunks[0], 10, 5000, 777);
    memcpy(second.hash, first.hash, PROTO_HASH_LEN);
    second.chunks[0] = first.chunks[0];
    second.chunks[0].stored_size = 999; /* recompressed differently: the stored one counts */
    second.mime = "image/png";          /* ignored: the stored document's fields stay */
    second.name = "two";
    second.tags[0] = "c";
    second.tags[1] = "b";
    second.meta_keys[0] = "k2";
    second.meta_values[0] = "v2-new";
    second.meta_keys[1] = "k3";
    second.meta_values[1] = "v3";
    hex_of(first.hash, hex);

    struct db_add out1 = add_doc(e, &first);
    assert_true(out1.created);
    assert_int_equal(out1.stored_size, 777);
    struct db_add out2 = add_doc(e, &second);
    assert_false(out2.created);
    assert_int_equal(out2.stored_size, 777);

    assert_int_equal(resolve(e, hex, DB_WANT_DETAILS, &doc), 0);
    assert_string_equal(doc.mime, "text/plain");
    assert_string_equal(doc.name, "two");
    assert_int_equal(doc.ntags, 3);
    assert_string_equal(doc.tags[0], "a");
    assert_string_equal(doc.tags[1], "b");
    assert_string_equal(doc.tags[2], "c");
    assert_int_equal(doc.nmeta, 3);
    assert_string_equal(doc.meta_keys[0], "k1");
    assert_string_equal(doc.meta_values[0], "v1");
    assert_string_equal(doc.meta_keys[1], "k2");
    assert_string_equal(doc.meta_values[1], "v2-new");
    assert_string_equal(doc.meta_keys[2], "k3");
    assert_string_equal(doc.meta_values[2], "v3");
    assert_int_equal(doc.nnames, 2);
    db_doc_clear(&doc);

    /* The content is stored once, and its chunk referenced once. */
    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents, 1);
    assert_int_equal(t.logical_bytes, 5000);
    assert_int_equal(t.stored_bytes, 777);
    assert_int_equal(t.chunks, 1);
    assert_int_equal(chunk_refs(e, &first.chunks[0]), 1);
}

/* ---- chunks and totals ---------------------------------------------------- */

static void test_chunks_and_totals(void **state)
{
    struct env *e = *state;
    struct doc_spec d1 = {.size = 3000, .name = "d1", .nchunks = 2};
    struct doc_spec d2 = {.size = 6000, .name = "d2", .nchunks = 3};
    struct db_chunk unknown;
    struct db_totals t;
    uint32_t stored;

    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents + t.logical_bytes + t.stored_bytes + t.chunks, 0);

    make_hash(d1.hash, 0x20, 11);
    make_hash(d2.hash, 0x21, 12);
    make_chunk(&d1.chunks[0], 20, 1000, 100);
    make_chunk(&d1.chunks[1], 21, 2000, 200); /* shared with d2 */
    d2.chunks[0] = d1.chunks[1];
    make_chunk(&d2.chunks[1], 22, 2000, 300);
    d2.chunks[2] = d1.chunks[1]; /* twice in one document */
    make_chunk(&unknown, 23, 1, 1);

    assert_int_equal(db_chunk_lookup(e->db, d1.chunks[0].hash, &stored), DB_E_NOT_FOUND);
    assert_int_equal(add_doc(e, &d1).stored_size, 300);
    stored = 0;
    assert_int_equal(db_chunk_lookup(e->db, d1.chunks[0].hash, &stored), 0);
    assert_int_equal(stored, 100);
    assert_int_equal(db_chunk_lookup(e->db, d1.chunks[1].hash, &stored), 0);
    assert_int_equal(stored, 200);
    assert_int_equal(db_chunk_lookup(e->db, d2.chunks[1].hash, &stored), DB_E_NOT_FOUND);

    assert_int_equal(add_doc(e, &d2).stored_size, 700);
    assert_int_equal(db_chunk_lookup(e->db, d2.chunks[1].hash, &stored), 0);
    assert_int_equal(stored, 300);
    assert_int_equal(db_chunk_lookup(e->db, unknown.hash, &stored), DB_E_NOT_FOUND);

    assert_int_equal(chunk_refs(e, &d1.chunks[0]), 1);
    assert_int_equal(chunk_refs(e, &d1.chunks[1]), 3);
    assert_int_equal(chunk_refs(e, &d2.chunks[1]), 1);

    /* Logical bytes per document; stored bytes and chunks per distinct chunk. */
    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents, 2);
    assert_int_equal(t.logical_bytes, 9000);
    assert_int_equal(t.stored_bytes, 600);
    assert_int_equal(t.chunks, 3);

    /* Deleting d2 drops every reference it held, and only those. */
    assert_int_equal(delete_ref(e, "d2", NULL), 0);
    assert_int_equal(chunk_refs(e, &d1.chunks[0]), 1);
    assert_int_equal(chunk_refs(e, &d1.chunks[1]), 1);
    assert_int_equal(chunk_refs(e, &d2.chunks[1]), 0);
    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents, 1);
    assert_int_equal(t.logical_bytes, 3000);

    assert_int_equal(delete_ref(e, "d1", NULL), 0);
    assert_int_equal(chunk_refs(e, &d1.chunks[0]), 0);
    assert_int_equal(chunk_refs(e, &d1.chunks[1]), 0);
    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents, 0);
    assert_int_equal(t.logical_bytes, 0);
}

/* ---- listing -------------------------------------------------------------- */

static void test_list(void **state)
{
    struct env *e = *state;
    /* Added out of hash order; first bytes give the hash order 0x10 < 0x30 < ... */
    static const uint8_t firsts[] = {0x50, 0x10, 0x90, 0x30, 0x70};
    static const char *const names[] = {"n50", "n10", "n90", "n30", ""};
    struct doc_spec d[5];
    char hex[5][PROTO_HASH_HEX + 1];
    struct db_doc *docs;
    size_t n;

    for (size_t i = 0; i < 5; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        make_hash(d[i].hash, firsts[i], (uint8_t)(30 + i));
        d[i].size = 100 * (i + 1);
        d[i].name = names[i];
        /* Every other document is red; 0x90 is also blue. */
        if (i % 2 == 0)
            d[i].tags[0] = "red";
        if (i == 2)
            d[i].tags[1] = "blue";
        hex_of(d[i].hash, hex[i]);
        add_doc(e, &d[i]);
    }

    /* Everything, by hash: 0x10 0x30 0x50 0x70 0x90 are indices 1 3 0 4 2. */
    static const size_t order[] = {1, 3, 0, 4, 2};
    assert_int_equal(db_list(e->db, NULL, NULL, 100, &docs, &n), 0);
    assert_int_equal(n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(docs[i].hash, hex[order[i]]);
        assert_int_equal(docs[i].size, d[order[i]].size);
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
    struct env *e = *state;
    struct doc_spec keep = {
        .size = 7, .name = "keep", .tags = {"t"}, .meta_keys = {"k"}, .meta_values = {"v"}};
    struct doc_spec d = {.size = 8,
                         .name = "gone.txt",
                         .tags = {"t", "u"},
                         .meta_keys = {"k", "j"},
                         .meta_values = {"v", "w"},
                         .nchunks = 1};
    char hex[PROTO_HASH_HEX + 1], deleted[PROTO_HASH_HEX + 1];
    struct db_doc doc, *docs;
    struct db_totals t;
    size_t n;

    make_hash(keep.hash, 0x01, 40);
    make_hash(d.hash, 0xd0, 41);
    make_chunk(&d.chunks[0], 41, 8, 30);
    hex_of(d.hash, hex);
    add_doc(e, &keep);
    add_doc(e, &d);
    d.name = "gone-alias";
    add_doc(e, &d);
    assert_int_equal(count_rows(e, "names"), 3);
    assert_int_equal(count_rows(e, "tags"), 3);
    assert_int_equal(count_rows(e, "meta"), 3);

    memset(deleted, 'x', sizeof(deleted));
    assert_int_equal(delete_ref(e, "gone.txt", deleted), 0);
    assert_string_equal(deleted, hex);

    assert_resolve_fails(e, "gone.txt", DB_E_NOT_FOUND);
    assert_resolve_fails(e, "gone-alias", DB_E_NOT_FOUND);
    assert_resolve_fails(e, hex, DB_E_NOT_FOUND);
    assert_int_equal(db_list(e->db, "u", NULL, 10, &docs, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(db_list(e->db, "t", NULL, 10, &docs, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(docs[0].name, "keep");
    db_docs_free(docs, n);
    /* Its names, tags and metadata went with it; the other document's stayed. */
    assert_int_equal(count_rows(e, "names"), 1);
    assert_int_equal(count_rows(e, "tags"), 1);
    assert_int_equal(count_rows(e, "meta"), 1);
    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents, 1);
    assert_int_equal(t.logical_bytes, 7);

    /* The same content added again starts clean. */
    struct doc_spec again = {.size = 8, .nchunks = 1};
    memcpy(again.hash, d.hash, PROTO_HASH_LEN);
    again.chunks[0] = d.chunks[0];
    assert_true(add_doc(e, &again).created);
    assert_int_equal(resolve(e, hex, DB_WANT_DETAILS, &doc), 0);
    assert_null(doc.name);
    assert_int_equal(doc.ntags, 0);
    assert_int_equal(doc.nnames, 0);
    assert_int_equal(doc.nmeta, 0);
    db_doc_clear(&doc);
    assert_int_equal(chunk_refs(e, &d.chunks[0]), 1);

    /* Deleting by hash prefix works; deleting what is gone is not found. */
    char prefix[9];
    memcpy(prefix, hex, 8);
    prefix[8] = '\0';
    assert_int_equal(delete_ref(e, prefix, deleted), 0);
    assert_string_equal(deleted, hex);
    assert_int_equal(delete_ref(e, prefix, deleted), DB_E_NOT_FOUND);
    assert_int_equal(delete_ref(e, "gone.txt", deleted), DB_E_NOT_FOUND);
    assert_resolves(e, "keep", keep.hash, "keep");
}

/* ---- group commit ---------------------------------------------------------- */

#define MANY 64

static void test_group_commit(void **state)
{
    struct env *e = *state;
    struct doc_spec d[MANY];
    struct op ops[MANY], chained;
    char names[MANY][16];
    struct db_totals t;

    for (size_t i = 0; i < MANY; i++) {
        memset(&d[i], 0, sizeof(d[i]));
        make_hash(d[i].hash, (uint8_t)i, (uint8_t)(100 + i));
        snprintf(names[i], sizeof(names[i]), "doc-%zu", i);
        d[i].name = names[i];
        d[i].size = i + 1;
        d[i].nchunks = 1;
        make_chunk(&d[i].chunks[0], (uint8_t)(100 + i), (uint32_t)i + 1, 10);
        op_add_init(&ops[i], e, &d[i]);
    }
    /* One more write, queued from a done callback while a batch completes. */
    struct doc_spec extra = {.size = 1000, .name = "chained"};
    make_hash(extra.hash, 0xee, 250);
    op_add_init(&chained, e, &extra);
    ops[MANY / 2].then = &chained;

    /* Everything is queued before the loop runs, so the writes pile up. */
    for (size_t i = 0; i < MANY; i++)
        db_write(e->db, &ops[i].w);
    assert_true(db_busy(e->db));
    for (size_t i = 0; i < MANY; i++)
        assert_int_equal(ops[i].done_calls, 0);
    run(e);

    for (size_t i = 0; i < MANY; i++) {
        assert_int_equal(ops[i].w.status, 0);
        assert_int_equal(ops[i].applied, 1);
        assert_int_equal(ops[i].done_calls, 1);
        assert_int_equal(ops[i].done_seq, (int)i); /* completions in queue order */
        assert_true(ops[i].add.created);
        assert_resolves(e, names[i], d[i].hash, names[i]);
    }
    assert_int_equal(chained.w.status, 0);
    assert_int_equal(chained.done_calls, 1);
    assert_int_equal(chained.done_seq, MANY);
    assert_resolves(e, "chained", extra.hash, "chained");

    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents, MANY + 1);
    assert_int_equal(t.chunks, MANY);
    assert_int_equal(t.logical_bytes, MANY * (MANY + 1) / 2 + 1000);
}

/*
 * The first write starts a batch at once; everything queued while it runs
 * forms the second batch. A failing change there is rolled back alone.
 */
static void test_failing_item_rolls_back_alone(void **state)
{
    struct env *e = *state;
    struct doc_spec first = {.size = 1, .name = "first"};
    struct doc_spec a = {.size = 2, .name = "a", .tags = {"x"}, .nchunks = 1};
    struct doc_spec bad = {.size = 3, .name = "bad", .tags = {"x"}, .nchunks = 2};
    struct doc_spec c = {.size = 4, .name = "c", .nchunks = 1};
    struct op op_first, op_a, op_bad, op_missing, op_c;
    char hex_bad[PROTO_HASH_HEX + 1];
    struct db_totals t;
    uint32_t stored;

    make_hash(first.hash, 0x0f, 60);
    make_hash(a.hash, 0xaa, 61);
    make_hash(bad.hash, 0xbb, 62);
    make_hash(c.hash, 0xcc, 63);
    make_chunk(&a.chunks[0], 61, 2, 20);
    make_chunk(&bad.chunks[0], 62, 2, 40); /* only `bad` has this one */
    bad.chunks[1] = a.chunks[0];           /* shared with a: its ref must not count */
    make_chunk(&c.chunks[0], 63, 4, 50);
    hex_of(bad.hash, hex_bad);

    op_add_init(&op_first, e, &first);
    op_add_init(&op_a, e, &a);
    op_add_init(&op_bad, e, &bad);
    op_bad.kind = OP_ADD_THEN_FAIL;
    op_init(&op_missing, e, OP_DELETE);
    op_missing.ref = "no-such-document";
    op_add_init(&op_c, e, &c);

    db_write(e->db, &op_first.w);
    db_write(e->db, &op_a.w);
    db_write(e->db, &op_bad.w);
    db_write(e->db, &op_missing.w);
    db_write(e->db, &op_c.w);
    run(e);

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

    assert_resolves(e, "first", first.hash, "first");
    assert_resolves(e, "a", a.hash, "a");
    assert_resolves(e, "c", c.hash, "c");
    /* Nothing the failed change wrote remains: document, name, tag, chunk, ref. */
    assert_resolve_fails(e, "bad", DB_E_NOT_FOUND);
    assert_resolve_fails(e, hex_bad, DB_E_NOT_FOUND);
    assert_int_equal(db_chunk_lookup(e->db, bad.chunks[0].hash, &stored), DB_E_NOT_FOUND);
    assert_int_equal(chunk_refs(e, &a.chunks[0]), 1);
    assert_int_equal(count_rows(e, "tags"), 1);
    assert_int_equal(db_totals(e->db, &t), 0);
    assert_int_equal(t.documents, 3);
    assert_int_equal(t.logical_bytes, 1 + 2 + 4);
    assert_int_equal(t.chunks, 2);
    assert_int_equal(t.stored_bytes, 70);
}

/* What a committed write wrote is in the file: a new db on the same path sees it. */
static void test_reopen(void **state)
{
    struct env *e = *state;
    struct doc_spec d = {.size = 42, .name = "persisted", .tags = {"keep"}, .nchunks = 1};
    struct db_doc doc;

    make_hash(d.hash, 0x42, 70);
    make_chunk(&d.chunks[0], 70, 42, 21);
    add_doc(e, &d);
    e->db = db_free(e->db);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(db_new(&e->db, &e->loop, e->path), 0);

    assert_int_equal(resolve(e, "persisted", DB_WANT_DETAILS, &doc), 0);
    assert_int_equal(doc.size, 42);
    assert_int_equal(doc.stored_size, 21);
    assert_int_equal(doc.ntags, 1);
    assert_string_equal(doc.tags[0], "keep");
    db_doc_clear(&doc);
    assert_int_equal(chunk_refs(e, &d.chunks[0]), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_add_and_resolve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_without_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ambiguous_prefix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hex_looking_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_name_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_several_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_add_twice_merges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunks_and_totals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failing_item_rolls_back_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
