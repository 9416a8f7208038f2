/*
 * Unit tests of the metadata database's documents (db-docs.c) and its
 * group-committing writer (db.c): adds with manifest roots, references
 * (hashes, prefixes, names and name versions), merging of re-added content,
 * listing, totals, deletes and the search index's queue of removals, what
 * the indexer loads, savepoints, group commit, a failing change rolled back
 * alone, durable commits, and reopening (the last six in test-db-write.c).
 * main() runs the groups of every file.
 */
#include "daemon/meta/test-db.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/util.h"

static int resolve(struct test_db *e, const char *ref, unsigned want, struct db_doc *doc)
{
    return db_resolve(e->db, ref, strlen(ref), want, doc);
}

/* Resolves `ref` and expects the document with `hash`, reported under `name` (NULL: none). */
static void assert_resolves(struct test_db *e, const char *ref, const uint8_t hash[PROTO_HASH_LEN],
                            const char *name)
{
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    int r;

    test_hex(hash, hex);
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

static void assert_resolve_fails(struct test_db *e, const char *ref, int expect)
{
    struct db_doc doc;
    int r = resolve(e, ref, DB_WANT_DETAILS | DB_WANT_MANIFEST, &doc);
    if (r != expect)
        fail_msg("'%s' resolved with %d, expected %d", ref, r, expect);
    /* A failed resolve leaves nothing to free. */
    assert_null(doc.name);
    assert_null(doc.tags);
    assert_null(doc.root);
}

static void prefix_of(const char *hex, size_t len, char *out)
{
    memcpy(out, hex, len);
    out[len] = '\0';
}

/* ---- adding and resolving ------------------------------------------------- */

static void test_add_and_resolve(void **state)
{
    struct test_db *e = *state;
    struct test_doc d = {
        .size = 300000,
        .stored = 1234,
        .mime = "text/plain",
        .name = "notes/alpha.txt",
        .tags = {"work", "draft"},
        .meta_keys = {"owner", "lang"},
        .meta_values = {"ann", "en"},
        .nroot = 3,
        .text = true,
        .created_at = 1700000000,
    };
    char hex[PROTO_HASH_HEX + 1], ref[PROTO_HASH_HEX + 2];
    struct db_doc doc;

    test_hash(d.hash, 0x3a, 1);
    test_hex(d.hash, hex);
    struct db_add out = test_doc_add_ok(e, &d);
    assert_true(out.created);
    assert_true(out.index_changed);
    assert_int_equal(out.stored_size, 1234);
    assert_true(out.rowid > 0);

    /* By full hash, with everything. */
    assert_int_equal(resolve(e, hex, DB_WANT_MANIFEST | DB_WANT_DETAILS, &doc), 0);
    assert_int_equal(doc.rowid, out.rowid);
    assert_string_equal(doc.hash, hex);
    assert_non_null(doc.name); /* found by hash: its newest name */
    assert_string_equal(doc.name, "notes/alpha.txt");
    assert_int_equal(doc.size, 300000);
    assert_int_equal(doc.stored_size, 1234);
    assert_int_equal(doc.nchunks, 3);
    assert_string_equal(doc.mime, "text/plain");
    assert_int_equal(doc.created, 1700000000); /* the journal entry's time */
    assert_true(doc.text);
    assert_int_equal(doc.depth, 0);
    assert_int_equal(doc.root_len, 3 * MANIFEST_ENTRY);
    assert_memory_equal(doc.root, d.root, 3 * MANIFEST_ENTRY);
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
    assert_null(doc.root);
    assert_null(doc.tags);
    assert_null(doc.names);
    assert_int_equal(doc.nchunks, 3);
    db_doc_clear(&doc);
    /* Tags alone. */
    assert_int_equal(db_load(e->db, out.rowid, DB_WANT_TAGS, &doc), 0);
    assert_int_equal(doc.ntags, 2);
    assert_null(doc.names);
    assert_string_equal(doc.name, "notes/alpha.txt");
    db_doc_clear(&doc);
    assert_int_equal(db_load(e->db, out.rowid + 1, DB_WANT_DETAILS, &doc), DB_E_NOT_FOUND);
    assert_null(doc.name);

    /* By an 8-digit prefix, a longer one, and upper-case hex. */
    prefix_of(hex, 8, ref);
    assert_resolves(e, ref, d.hash, "notes/alpha.txt");
    prefix_of(hex, 63, ref);
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
    prefix_of(hex, 7, ref); /* too short for a prefix, so a name */
    assert_resolve_fails(e, ref, DB_E_NOT_FOUND);
    memcpy(ref, hex, PROTO_HASH_HEX + 1);
    ref[PROTO_HASH_HEX - 1] = ref[PROTO_HASH_HEX - 1] == '0' ? '1' : '0';
    assert_resolve_fails(e, ref, DB_E_NOT_FOUND);
    memcpy(ref, hex, PROTO_HASH_HEX); /* 65 digits: neither hash nor prefix */
    ref[PROTO_HASH_HEX] = '0';
    ref[PROTO_HASH_HEX + 1] = '\0';
    assert_resolve_fails(e, ref, DB_E_NOT_FOUND);
    assert_resolve_fails(e, "", DB_E_NOT_FOUND);
    assert_int_equal(db_resolve(e->db, "notes/alpha.txt\0x", 17, 0, &doc), DB_E_NOT_FOUND);
    /* Only ref_len bytes count. */
    assert_int_equal(db_resolve(e->db, "notes/alpha.txtXYZ", 15, 0, &doc), 0);
    assert_string_equal(doc.name, "notes/alpha.txt");
    db_doc_clear(&doc);
}

/* A document added without a name or created time has none, and the time of its add. */
static void test_add_without_name(void **state)
{
    struct test_db *e = *state;
    struct test_doc d = {.size = 0, .name = ""};
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    int64_t before = (int64_t)time(NULL);

    test_hash(d.hash, 0x11, 2);
    test_hex(d.hash, hex);
    assert_true(test_doc_add_ok(e, &d).created);
    assert_int_equal(resolve(e, hex, DB_WANT_MANIFEST | DB_WANT_DETAILS, &doc), 0);
    assert_null(doc.name);
    assert_int_equal(doc.nnames, 0);
    assert_int_equal(doc.nchunks, 0);
    assert_int_equal(doc.size, 0);
    assert_int_equal(doc.root_len, 0); /* an empty document's root is empty */
    assert_false(doc.text);
    assert_string_equal(doc.mime, "application/octet-stream");
    assert_true(doc.created >= before && doc.created <= (int64_t)time(NULL));
    db_doc_clear(&doc);
    assert_resolve_fails(e, "", DB_E_NOT_FOUND);
}

static void test_ambiguous_prefix(void **state)
{
    struct test_db *e = *state;
    struct test_doc a = {.size = 1, .name = "a"}, b = {.size = 2, .name = "b"};
    char hex_a[PROTO_HASH_HEX + 1], hex_b[PROTO_HASH_HEX + 1], ref[PROTO_HASH_HEX + 1];

    /* Both hashes start with the same five bytes: ten shared hex digits. */
    test_hash(a.hash, 0x5e, 3);
    memcpy(b.hash, a.hash, PROTO_HASH_LEN);
    b.hash[5] ^= 0x10; /* differs at hex digit 10 (0-based) */
    test_hex(a.hash, hex_a);
    test_hex(b.hash, hex_b);
    assert_memory_equal(hex_a, hex_b, 10);
    assert_true(hex_a[10] != hex_b[10]);
    test_doc_add_ok(e, &a);
    test_doc_add_ok(e, &b);

    for (size_t len = 8; len <= 10; len++) {
        prefix_of(hex_a, len, ref);
        assert_resolve_fails(e, ref, DB_E_AMBIGUOUS);
    }
    prefix_of(hex_a, 11, ref);
    assert_resolves(e, ref, a.hash, "a");
    prefix_of(hex_b, 11, ref);
    assert_resolves(e, ref, b.hash, "b");

    /* A delete takes a whole hash: a prefix deletes nothing. */
    prefix_of(hex_a, 11, ref);
    assert_int_equal(test_doc_delete(e, ref), DB_E_NOT_FOUND);
    assert_resolves(e, hex_a, a.hash, "a");
    assert_resolves(e, hex_b, b.hash, "b");

    /* Once one is gone, the short prefix is unique again. */
    assert_int_equal(test_doc_delete(e, hex_b), 0);
    prefix_of(hex_a, 8, ref);
    assert_resolves(e, ref, a.hash, "a");
}

/* A name made of hex digits is still a name when no hash matches it. */
static void test_hex_looking_names(void **state)
{
    struct test_db *e = *state;
    struct test_doc a = {.size = 1, .name = "deadbeef"};
    struct test_doc b = {.size = 2};
    struct test_doc c = {.size = 3};
    char long_name[PROTO_HASH_HEX + 1], hex_b[PROTO_HASH_HEX + 1], prefix_b[9];

    test_hash(a.hash, 0x01, 4);
    test_hash(b.hash, 0x02, 5);
    test_hash(c.hash, 0x03, 6);
    test_hex(b.hash, hex_b);
    /* 64 hex digits that are not any document's hash, used as a name. */
    memset(long_name, 'f', PROTO_HASH_HEX);
    long_name[PROTO_HASH_HEX] = '\0';
    b.name = long_name;
    test_doc_add_ok(e, &a);
    test_doc_add_ok(e, &b);

    assert_resolves(e, "deadbeef", a.hash, "deadbeef");
    assert_resolves(e, long_name, b.hash, long_name);
    /* Upper case finds hashes, but names compare exactly. */
    assert_resolve_fails(e, "DEADBEEF", DB_E_NOT_FOUND);

    /* A hash prefix is tried before a name (PROTOCOL.md "References"). */
    prefix_of(hex_b, 8, prefix_b);
    c.name = prefix_b;
    test_doc_add_ok(e, &c);
    assert_resolves(e, prefix_b, b.hash, long_name);
}

static void test_name_versions(void **state)
{
    struct test_db *e = *state;
    struct test_doc v1 = {.size = 10, .name = "report.pdf", .tags = {"v1"}};
    struct test_doc v2 = {.size = 20, .name = "report.pdf", .tags = {"v2"}};
    struct test_doc other = {.size = 30, .name = "other"};
    char hex1[PROTO_HASH_HEX + 1], hex2[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    const struct db_fattr nofile = {0};
    bool current;

    test_hash(v1.hash, 0x71, 6);
    test_hash(v2.hash, 0x72, 7);
    test_hash(other.hash, 0x73, 8);
    test_hex(v1.hash, hex1);
    test_hex(v2.hash, hex2);
    int64_t id1 = test_doc_add_ok(e, &v1).rowid;
    test_doc_add_ok(e, &other);
    int64_t id2 = test_doc_add_ok(e, &v2).rowid;

    assert_resolves(e, "report.pdf", v2.hash, "report.pdf");
    assert_int_equal(db_name_current(e->db, "report.pdf", id2, &nofile, &current), 0);
    assert_true(current);
    assert_int_equal(db_name_current(e->db, "report.pdf", id1, &nofile, &current), 0);
    assert_false(current);
    assert_int_equal(db_name_current(e->db, "nothing", id1, &nofile, &current), 0);
    assert_false(current);
    /* The older version stays reachable by hash, shown as the version ref that reaches it. */
    assert_int_equal(resolve(e, hex1, DB_WANT_DETAILS, &doc), 0);
    assert_string_equal(doc.name, "report.pdf@{1}");
    assert_int_equal(doc.nnames, 1);
    assert_string_equal(doc.names[0], "report.pdf@{1}");
    db_doc_clear(&doc);

    /* Re-adding the current version under its own name changes nothing. */
    struct db_add again = test_doc_add_ok(e, &v2);
    assert_false(again.created);
    assert_false(again.index_changed);
    assert_resolves(e, "report.pdf", v2.hash, "report.pdf");

    /* Deleting the newest version falls back to the previous one. */
    assert_int_equal(test_doc_delete(e, hex2), 0);
    assert_resolves(e, "report.pdf", v1.hash, "report.pdf");
    assert_resolve_fails(e, hex2, DB_E_NOT_FOUND);
    assert_int_equal(db_name_current(e->db, "report.pdf", id1, &nofile, &current), 0);
    assert_true(current);

    /* Adding v2 again makes it the newest version again, after v1. */
    assert_true(test_doc_add_ok(e, &v2).created);
    assert_resolves(e, "report.pdf", v2.hash, "report.pdf");
    /* Then v1 again: a newer version of the name pointing back to v1. */
    struct db_add back = test_doc_add_ok(e, &v1);
    assert_false(back.created);
    assert_true(back.index_changed);
    assert_resolves(e, "report.pdf", v1.hash, "report.pdf");
    assert_resolves(e, "other", other.hash, "other");
}

/* A document's newest name is the one reported when it is found by hash. */
static void test_several_names(void **state)
{
    struct test_db *e = *state;
    struct test_doc d = {.size = 5, .name = "first"};
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;

    test_hash(d.hash, 0x44, 9);
    test_hex(d.hash, hex);
    assert_true(test_doc_add_ok(e, &d).created);
    d.name = "second";
    assert_false(test_doc_add_ok(e, &d).created);

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
    struct test_db *e = *state;
    struct test_doc first = {
        .size = 5000,
        .stored = 777,
        .mime = "text/plain",
        .name = "one",
        .tags = {"a", "b"},
        .meta_keys = {"k1", "k2"},
        .meta_values = {"v1", "v2"},
        .nroot = 1,
    };
    struct test_doc second = first;
    char hex[PROTO_HASH_HEX + 1];
    struct db_doc doc;
    struct db_totals t;

    test_hash(first.hash, 0x9a, 10);
    memcpy(second.hash, first.hash, PROTO_HASH_LEN);
    second.stored = 999;       /* recompressed differently: the stored one counts */
    second.mime = "image/png"; /* ignored: the stored document's fields stay */
    second.name = "two";
    second.tags[0] = "c";
    second.tags[1] = "b";
    second.meta_keys[0] = "k2";
    second.meta_values[0] = "v2-new";
    second.meta_keys[1] = "k3";
    second.meta_values[1] = "v3";
    test_hex(first.hash, hex);

    struct db_add out1 = test_doc_add_ok(e, &first);
    assert_true(out1.created);
    assert_int_equal(out1.stored_size, 777);
    struct db_add out2 = test_doc_add_ok(e, &second);
    assert_false(out2.created);
    assert_true(out2.index_changed);
    assert_int_equal(out2.stored_size, 777);
    assert_int_equal(out2.rowid, out1.rowid);

    assert_int_equal(resolve(e, hex, DB_WANT_DETAILS, &doc), 0);
    assert_string_equal(doc.mime, "text/plain");
    assert_int_equal(doc.stored_size, 777);
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

    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, 1);
    assert_int_equal(t.logical_bytes, 5000);
}

/* ---- what the indexer loads, and when a document needs indexing again ------ */

static void expect_index_doc(struct test_db *e, int64_t rowid, uint64_t gen, const char *names,
                             const char *tags, const char *meta)
{
    struct db_index_doc d;

    assert_int_equal(db_index_doc_load(e->db, rowid, &d), 0);
    assert_int_equal(d.rowid, rowid);
    if (d.gen != gen)
        fail_msg("index_gen %llu, expected %llu", (unsigned long long)d.gen,
                 (unsigned long long)gen);
    assert_string_equal(d.names, names);
    assert_string_equal(d.tags, tags);
    assert_string_equal(d.meta, meta);
    db_index_doc_clear(&d);
}

static void test_index_doc(void **state)
{
    struct test_db *e = *state;
    struct test_doc d = {.size = 80,
                         .name = "n1",
                         .tags = {"t2", "t1"},
                         .meta_keys = {"k"},
                         .meta_values = {"v"},
                         .depth = 1,
                         .nroot = 2,
                         .text = true};
    struct test_doc other = {.size = 1, .name = "n-other"};
    struct db_index_doc ix;
    char hex[PROTO_HASH_HEX + 1];

    test_hash(d.hash, 0x61, 20);
    test_hash(other.hash, 0x62, 21);
    test_hex(d.hash, hex);
    int64_t id = test_doc_add_ok(e, &d).rowid;

    assert_int_equal(db_index_doc_load(e->db, id, &ix), 0);
    assert_int_equal(ix.rowid, id);
    assert_int_equal(ix.gen, 1);
    assert_string_equal(ix.hash, hex);
    assert_string_equal(ix.names, "n1");
    assert_string_equal(ix.tags, "t1\nt2");
    assert_string_equal(ix.meta, "k v");
    assert_true(ix.text);
    assert_int_equal(ix.depth, 1);
    assert_int_equal(ix.root_len, 2 * MANIFEST_ENTRY);
    assert_memory_equal(ix.root, d.root, 2 * MANIFEST_ENTRY);
    db_index_doc_clear(&ix);

    /* The same again: nothing the index holds changed. */
    struct db_add out = test_doc_add_ok(e, &d);
    assert_false(out.index_changed);
    expect_index_doc(e, id, 1, "n1", "t1\nt2", "k v");
    /* A tag already there and metadata with the same value: still nothing. */
    d.tags[0] = "t1";
    d.tags[1] = NULL;
    assert_false(test_doc_add_ok(e, &d).index_changed);
    expect_index_doc(e, id, 1, "n1", "t1\nt2", "k v");
    /* A new tag. */
    d.tags[0] = "t3";
    assert_true(test_doc_add_ok(e, &d).index_changed);
    expect_index_doc(e, id, 2, "n1", "t1\nt2\nt3", "k v");
    /* A new metadata value, then a new key. */
    d.meta_values[0] = "w";
    assert_true(test_doc_add_ok(e, &d).index_changed);
    expect_index_doc(e, id, 3, "n1", "t1\nt2\nt3", "k w");
    d.meta_keys[1] = "j";
    d.meta_values[1] = "x";
    assert_true(test_doc_add_ok(e, &d).index_changed);
    expect_index_doc(e, id, 4, "n1", "t1\nt2\nt3", "j x\nk w");
    /* A new name. */
    d.name = "n2";
    assert_true(test_doc_add_ok(e, &d).index_changed);
    expect_index_doc(e, id, 5, "n1\nn2", "t1\nt2\nt3", "j x\nk w");
    /* An older name of its own that another document took meanwhile: a new version. */
    other.name = "n1";
    test_doc_add_ok(e, &other);
    d.name = "n1";
    assert_true(test_doc_add_ok(e, &d).index_changed);
    expect_index_doc(e, id, 6, "n1\nn2", "t1\nt2\nt3", "j x\nk w");
    assert_resolves(e, "n1", d.hash, "n1");

    /* Gone: not found, and nothing left to free. */
    assert_int_equal(test_doc_delete(e, hex), 0);
    memset(&ix, 0x55, sizeof(ix));
    assert_int_equal(db_index_doc_load(e->db, id, &ix), DB_E_NOT_FOUND);
    assert_null(ix.names);
    assert_null(ix.root);
}

/* ---- totals ------------------------------------------------------------------ */

static int put_chunks(struct db_txn *txn, void *ctx)
{
    const uint32_t *sizes = ctx;
    int r = 0;

    for (uint8_t i = 0; r == 0 && sizes[i]; i++) {
        uint8_t hash[PROTO_HASH_LEN];
        struct db_loc loc = {.pack = 1, .off = 16 + i, .len = 100, .size = sizes[i]};
        loc.stored = sizes[i] / 10;
        test_hash(hash, 0xc0, i);
        r = db_txn_chunk_put(txn, hash, &loc);
    }
    if (r == 0)
        r = db_txn_pack_set(txn, 1, 4096, DB_PACK_SEALED);
    if (r == 0)
        r = db_txn_pack_set(txn, 2, 100, DB_PACK_OPEN);
    return r;
}

static void test_totals(void **state)
{
    struct test_db *e = *state;
    struct test_doc d1 = {.size = 3000, .name = "d1"}, d2 = {.size = 6000, .name = "d2"};
    uint32_t sizes[] = {1000, 2000, 3000, 0};
    struct db_totals t;

    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents + t.logical_bytes + t.chunks + t.unique_bytes + t.stored_bytes +
                         t.packs + t.pack_bytes,
                     0);
    test_hash(d1.hash, 0x20, 11);
    test_hash(d2.hash, 0x21, 12);
    test_doc_add_ok(e, &d1);
    test_doc_add_ok(e, &d2);
    assert_int_equal(test_db_run(e, put_chunks, sizes, false), 0);

    /* Logical bytes per document; unique and stored bytes per distinct chunk; packs. */
    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, 2);
    assert_int_equal(t.logical_bytes, 9000);
    assert_int_equal(t.chunks, 3);
    assert_int_equal(t.unique_bytes, 6000);
    assert_int_equal(t.stored_bytes, 600);
    assert_int_equal(t.packs, 2);
    assert_int_equal(t.pack_bytes, 4196);

    d1.name = "d1-again"; /* a second add of the same content counts once */
    test_doc_add_ok(e, &d1);
    char hex[PROTO_HASH_HEX + 1];
    test_hex(d2.hash, hex);
    assert_int_equal(test_doc_delete(e, hex), 0);
    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, 1);
    assert_int_equal(t.logical_bytes, 3000);
    assert_int_equal(t.chunks, 3); /* chunks go with gc, not with the delete */
}

/*
 * db_open_read_only: reads what the database holds, writes fail, and
 * nothing is made beside it (no -shm, no -wal); a missing database is
 * -ENOENT, not made.
 */
static void test_read_only(void **state)
{
    struct test_db *e = *state;
    struct test_doc d1 = {.size = 3000, .name = "d1"};
    char side[PATH_MAX + 8], missing[PATH_MAX + 16];
    struct db_totals t;
    struct db *other;

    test_hash(d1.hash, 0x30, 13);
    test_doc_add_ok(e, &d1);
    e->db = db_free(e->db); /* the last connection: SQLite folds its -wal back in */
    assert_int_equal(db_open_read_only(&e->db, &e->loop, e->path), 0);
    assert_true(db_read_only(e->db));
    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, 1);
    assert_int_equal(t.logical_bytes, 3000);
    d1.name = "d1-again";
    assert_int_not_equal(test_doc_add(e, &d1, NULL), 0);
    assert_int_equal(db_totals(e->db, 0, &t), 0);
    assert_int_equal(t.documents, 1);
    snprintf(side, sizeof(side), "%s-shm", e->path);
    assert_int_equal(access(side, F_OK), -1);
    snprintf(side, sizeof(side), "%s-wal", e->path);
    assert_int_equal(access(side, F_OK), -1);
    snprintf(missing, sizeof(missing), "%s/none.db", e->dir);
    assert_int_equal(db_open_read_only(&other, &e->loop, missing), -ENOENT);
    assert_int_equal(access(missing, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_add_and_resolve, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_add_without_name, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_ambiguous_prefix, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_hex_looking_names, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_name_versions, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_several_names, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_add_twice_merges, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_index_doc, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_totals, test_db_setup, test_db_teardown),
        cmocka_unit_test_setup_teardown(test_read_only, test_db_setup, test_db_teardown),
    };
    int failed = cmocka_run_group_tests_name("database: documents", tests, NULL, NULL);

    return failed + test_db_write_run() + test_db_store_run() + test_db_gc_run();
}
