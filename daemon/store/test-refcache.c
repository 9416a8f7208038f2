/*
 * Unit tests of the resolved-reference cache (daemon/store/refcache.c): hits and
 * misses, which references are kept (full hashes in any case, the name a
 * document was found by; never prefixes), the epoch rule that keeps a
 * lookup started before a change from being cached after it, forgetting by
 * name and by document, small manifests only, and the bound in bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/store/refcache.h"

/* A document as a resolve returns it: hash, the name it was found by, a root. */
struct fake_doc {
    struct db_doc doc;
    uint8_t root[REFCACHE_MAX_ROOT + 40];
};

static void fake_doc(struct fake_doc *f, unsigned n, const char *name, size_t root_len)
{
    memset(f, 0, sizeof(*f));
    for (size_t i = 0; i < PROTO_HASH_HEX; i++)
        f->doc.hash[i] = "0123456789abcdef"[(n * 7 + i * 3) % 16];
    f->doc.hash[0] = "0123456789abcdef"[n % 16];
    f->doc.hash[1] = "0123456789abcdef"[n / 16 % 16];
    f->doc.name = (char *)name;
    f->doc.rowid = n;
    f->doc.size = 1000 + n;
    f->doc.stored_size = 500 + n;
    f->doc.nchunks = n;
    f->doc.created = 1700000000 + n;
    snprintf(f->doc.mime, sizeof(f->doc.mime), "type/%u", n);
    f->doc.depth = n % 3;
    for (size_t i = 0; i < sizeof(f->root); i++)
        f->root[i] = (uint8_t)(n + i);
    f->doc.root = f->root;
    f->doc.root_len = root_len;
}

static void insert(struct refcache *rc, const char *ref, const struct fake_doc *f)
{
    refcache_insert(rc, ref, strlen(ref), &f->doc, refcache_epoch(rc));
}

/* Looks `ref` up and expects it to give the fake document (NULL: a miss). */
static void expect(struct refcache *rc, const char *ref, const struct fake_doc *f)
{
    struct db_doc got;
    bool hit;

    memset(&got, 0, sizeof(got));
    hit = refcache_lookup(rc, ref, strlen(ref), &got);
    if (!f) {
        if (hit) {
            char hash[PROTO_HASH_HEX + 1];
            memcpy(hash, got.hash, sizeof(hash));
            db_doc_clear(&got);
            fail_msg("'%s' hit document %s", ref, hash);
        }
        return;
    }
    if (!hit)
        fail_msg("'%s' missed", ref);
    assert_string_equal(got.hash, f->doc.hash);
    assert_int_equal(got.rowid, f->doc.rowid);
    assert_int_equal(got.size, f->doc.size);
    assert_int_equal(got.stored_size, f->doc.stored_size);
    assert_int_equal(got.nchunks, f->doc.nchunks);
    assert_int_equal(got.created, f->doc.created);
    assert_string_equal(got.mime, f->doc.mime);
    assert_int_equal(got.depth, f->doc.depth);
    assert_int_equal(got.root_len, f->doc.root_len);
    assert_non_null(got.root);
    assert_memory_equal(got.root, f->doc.root, f->doc.root_len);
    if (f->doc.name) {
        assert_non_null(got.name);
        assert_string_equal(got.name, f->doc.name);
    } else {
        assert_null(got.name);
    }
    /* The caller's copy: clearing it leaves the entry alone. */
    db_doc_clear(&got);
}

/*
 * A new cache, replacing the test's previous one; the teardown frees the
 * last, so a failing test leaks nothing.
 */
static struct refcache *fresh(void **state, size_t max_bytes)
{
    struct refcache *rc;

    refcache_free(*state);
    *state = NULL;
    assert_int_equal(refcache_new(&rc, max_bytes), 0);
    *state = rc;
    return rc;
}

static int teardown(void **state)
{
    *state = refcache_free(*state);
    return 0;
}

static void upper(const char *in, char *out)
{
    size_t i = 0;
    for (; in[i]; i++)
        out[i] = (char)(in[i] >= 'a' && in[i] <= 'f' ? in[i] - 32 : in[i]);
    out[i] = '\0';
}

static void test_hits_and_misses(void **state)
{
    struct refcache *rc;
    struct fake_doc a, b;
    char up[PROTO_HASH_HEX + 1], prefix[9];

    rc = fresh(state, 1 << 20);
    fake_doc(&a, 1, "notes.txt", 3 * 40);
    fake_doc(&b, 2, NULL, 0);
    expect(rc, a.doc.hash, NULL);
    expect(rc, "notes.txt", NULL);

    /* By full hash, found again in either case; by the name it was found by. */
    insert(rc, a.doc.hash, &a);
    insert(rc, "notes.txt", &a);
    expect(rc, a.doc.hash, &a);
    upper(a.doc.hash, up);
    expect(rc, up, &a);
    expect(rc, "notes.txt", &a);
    expect(rc, "notes.tx", NULL);
    expect(rc, "Notes.txt", NULL); /* names compare exactly */

    /* Inserted under an upper-case hash, found under lower case. */
    upper(b.doc.hash, up);
    insert(rc, up, &b);
    expect(rc, b.doc.hash, &b);
    expect(rc, up, &b);

    /* A second insert under a key already there changes nothing. */
    insert(rc, a.doc.hash, &b);
    expect(rc, a.doc.hash, &a);
    *state = rc = refcache_free(rc);
    assert_null(rc);

    /* Size 0 disables it. */
    rc = fresh(state, 0);
    insert(rc, a.doc.hash, &a);
    expect(rc, a.doc.hash, NULL);

    /* Prefixes are never kept: any add could make them ambiguous. */
    rc = fresh(state, 1 << 20);
    memcpy(prefix, a.doc.hash, 8);
    prefix[8] = '\0';
    insert(rc, prefix, &a);
    expect(rc, prefix, NULL);
    /* Nor a name the document was not found by (a resolve by hash reports its newest name). */
    insert(rc, "other-name", &a);
    expect(rc, "other-name", NULL);
    insert(rc, "notes.tx", &a);
    expect(rc, "notes.tx", NULL);
    /* Nor a name for a document that has none. */
    insert(rc, "x", &b);
    expect(rc, "x", NULL);
}

/*
 * A name made of 64 hex digits is a name when no document has that hash,
 * and names compare exactly: the upper-case name must not answer for the
 * lower-case one (which may be another document's name).
 */
static void test_hex_names_are_names(void **state)
{
    struct refcache *rc;
    struct fake_doc a, b;
    char upper_name[PROTO_HASH_HEX + 1], lower_name[PROTO_HASH_HEX + 1];

    memset(upper_name, 'A', PROTO_HASH_HEX);
    upper_name[PROTO_HASH_HEX] = '\0';
    memset(lower_name, 'a', PROTO_HASH_HEX);
    lower_name[PROTO_HASH_HEX] = '\0';

    /*
     * Found by its name "AAAA...": not kept under either spelling. The
     * database tells names from hashes, and a document added later whose
     * hash is "aaaa..." would take that ref over without touching the name.
     */
    rc = fresh(state, 1 << 20);
    fake_doc(&a, 3, upper_name, 40);
    insert(rc, upper_name, &a);
    expect(rc, upper_name, NULL);
    expect(rc, lower_name, NULL);
    insert(rc, lower_name, &a);
    expect(rc, lower_name, NULL);

    /* Found by its name "aaaa...": not kept either. */
    rc = fresh(state, 1 << 20);
    fake_doc(&b, 4, lower_name, 40);
    insert(rc, lower_name, &b);
    expect(rc, lower_name, NULL);
    expect(rc, upper_name, NULL);

    /* Its own hash, in either case, is kept. */
    insert(rc, b.doc.hash, &b);
    expect(rc, b.doc.hash, &b);
    memcpy(upper_name, b.doc.hash, sizeof(upper_name));
    for (char *p = upper_name; *p; p++)
        *p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
    expect(rc, upper_name, &b);
}

static void test_epoch(void **state)
{
    struct refcache *rc;
    struct fake_doc a, b;
    uint64_t e0, e1;

    rc = fresh(state, 1 << 20);
    fake_doc(&a, 4, "report", 40);
    fake_doc(&b, 5, "report", 40);
    /* A lookup starts (on a worker) ... */
    e0 = refcache_epoch(rc);
    /* ... an add renames meanwhile ... */
    refcache_forget_name(rc, "report");
    e1 = refcache_epoch(rc);
    assert_true(e1 != e0);
    /* ... and the lookup's result, read before the change, is not kept. */
    refcache_insert(rc, "report", 6, &a.doc, e0);
    expect(rc, "report", NULL);
    refcache_insert(rc, a.doc.hash, PROTO_HASH_HEX, &a.doc, e0);
    expect(rc, a.doc.hash, NULL);
    /* One that started after it is. */
    refcache_insert(rc, "report", 6, &b.doc, e1);
    expect(rc, "report", &b);
    /* A delete moves the epoch too. */
    refcache_forget_doc(rc, a.doc.hash);
    assert_true(refcache_epoch(rc) != e1);
    refcache_insert(rc, a.doc.hash, PROTO_HASH_HEX, &a.doc, e1);
    expect(rc, a.doc.hash, NULL);
}

static void test_forget(void **state)
{
    struct refcache *rc;
    struct fake_doc a1, a2, b;

    rc = fresh(state, 1 << 20);
    fake_doc(&a1, 6, "a-one", 40);
    a2 = a1;
    a2.doc.name = "a-two";
    a2.doc.root = a2.root;
    fake_doc(&b, 7, "b", 40);
    insert(rc, a1.doc.hash, &a1);
    insert(rc, "a-one", &a1);
    insert(rc, "a-two", &a2);
    insert(rc, b.doc.hash, &b);
    insert(rc, "b", &b);

    /* A name now points elsewhere: that name goes, nothing else. */
    refcache_forget_name(rc, "a-two");
    expect(rc, "a-two", NULL);
    expect(rc, "a-one", &a1);
    expect(rc, a1.doc.hash, &a1);
    refcache_forget_name(rc, "no-such-name");
    refcache_forget_name(rc, "");
    refcache_forget_name(rc, NULL);
    expect(rc, "b", &b);

    /* A document is gone: every key that led to it goes. */
    insert(rc, "a-two", &a2);
    refcache_forget_doc(rc, a1.doc.hash);
    expect(rc, a1.doc.hash, NULL);
    expect(rc, "a-one", NULL);
    expect(rc, "a-two", NULL);
    expect(rc, "b", &b);
    expect(rc, b.doc.hash, &b);
    refcache_forget_doc(rc, a1.doc.hash);
}

static void test_bounds(void **state)
{
    struct refcache *rc;
    struct fake_doc d[200], big;
    char names[200][16];
    size_t kept = 0;

    /* Small manifests only. */
    rc = fresh(state, 1 << 20);
    fake_doc(&big, 8, "big", REFCACHE_MAX_ROOT + 40);
    insert(rc, big.doc.hash, &big);
    insert(rc, "big", &big);
    expect(rc, big.doc.hash, NULL);
    expect(rc, "big", NULL);
    fake_doc(&big, 8, "big", REFCACHE_MAX_ROOT);
    insert(rc, "big", &big);
    expect(rc, "big", &big);

    /* A budget for a few dozen entries: the oldest go, the newest stay. */
    rc = fresh(state, 8192);
    for (unsigned i = 0; i < 200; i++) {
        snprintf(names[i], sizeof(names[i]), "doc-%u", i);
        fake_doc(&d[i], i, names[i], 40);
        insert(rc, names[i], &d[i]);
        /* Used after every insert: the first one is never the least recently used. */
        expect(rc, names[0], &d[0]);
    }
    for (unsigned i = 0; i < 200; i++) {
        struct db_doc got;
        if (refcache_lookup(rc, names[i], strlen(names[i]), &got)) {
            kept++;
            db_doc_clear(&got);
        }
    }
    assert_true(kept >= 2);
    /* Each entry costs at least its key, its root and its name. */
    assert_true(kept <= 8192 / (40 + 2 * strlen("doc-1")));
}

/* The newest entries survive, the oldest are gone (checked apart so the lookups above do not
 * reorder them). */
static void test_eviction_order(void **state)
{
    struct refcache *rc;
    struct fake_doc d[100];
    char names[100][16];

    rc = fresh(state, 4096);
    for (unsigned i = 0; i < 100; i++) {
        snprintf(names[i], sizeof(names[i]), "n-%u", i);
        fake_doc(&d[i], i, names[i], 40);
        insert(rc, names[i], &d[i]);
    }
    expect(rc, names[99], &d[99]);
    expect(rc, names[98], &d[98]);
    expect(rc, names[0], NULL);
    expect(rc, names[1], NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_hits_and_misses, teardown),
        cmocka_unit_test_teardown(test_hex_names_are_names, teardown),
        cmocka_unit_test_teardown(test_epoch, teardown),
        cmocka_unit_test_teardown(test_forget, teardown),
        cmocka_unit_test_teardown(test_bounds, teardown),
        cmocka_unit_test_teardown(test_eviction_order, teardown),
    };
    return cmocka_run_group_tests_name("reference cache", tests, NULL, NULL);
}
