/*
 * Unit tests of manifests (daemon/format/manifest.c): packed entries and roots,
 * segments and hostile segment bytes, the cursor over trees of depth 0, 1
 * and 2 built by hand (segments asked for and fed, levels and byte totals
 * that do not fit rejected), and the builder, driven the way an add drives
 * it, round-tripped through the cursor up to depth 2.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/sha.h>

#include "daemon/format/manifest.h"

/* Entry i of a made-up document: its hash names i, its size varies. */
static void chunk_entry(struct manifest_entry *e, uint64_t i)
{
    memset(e->hash, 0xab, PROTO_HASH_LEN);
    for (int k = 0; k < 8; k++)
        e->hash[k] = (uint8_t)(i >> (8 * k));
    e->bytes = 1 + i % 1000;
}

static void assert_entry_equal(const struct manifest_entry *a, const struct manifest_entry *b)
{
    assert_memory_equal(a->hash, b->hash, PROTO_HASH_LEN);
    assert_int_equal(a->bytes, b->bytes);
}

static void test_entries_and_roots(void **state)
{
    struct manifest_entry in[3], out;
    uint8_t packed[3 * MANIFEST_ENTRY];

    for (int i = 0; i < 3; i++)
        chunk_entry(&in[i], (uint64_t)i * 77);
    in[2].bytes = UINT64_MAX;
    manifest_entries_encode(in, 3, packed);
    /* Big-endian byte count after the hash. */
    assert_memory_equal(packed + MANIFEST_ENTRY, in[1].hash, PROTO_HASH_LEN);
    assert_int_equal(packed[MANIFEST_ENTRY + PROTO_HASH_LEN + 7], in[1].bytes & 0xff);
    assert_int_equal(packed[MANIFEST_ENTRY + PROTO_HASH_LEN + 6], in[1].bytes >> 8);
    for (size_t i = 0; i < 3; i++) {
        manifest_entry_at(packed, i, &out);
        assert_entry_equal(&out, &in[i]);
    }

    assert_true(manifest_root_valid(packed, 0, 0)); /* an empty document */
    assert_true(manifest_root_valid(packed, 3 * MANIFEST_ENTRY, 0));
    assert_true(manifest_root_valid(packed, MANIFEST_ENTRY, MANIFEST_MAX_DEPTH));
    assert_true(manifest_root_valid(packed, MANIFEST_MAX_ROOT, 1));
    assert_false(manifest_root_valid(packed, 0, 1)); /* above level 0 it names something */
    assert_false(manifest_root_valid(packed, MANIFEST_ENTRY, MANIFEST_MAX_DEPTH + 1));
    assert_false(manifest_root_valid(packed, MANIFEST_ENTRY + 1, 0));
    assert_false(manifest_root_valid(packed, MANIFEST_ENTRY - 1, 0));
    assert_false(manifest_root_valid(packed, MANIFEST_MAX_ROOT + MANIFEST_ENTRY, 0));
}

static void test_segment_encode_parse(void **state)
{
    struct manifest_entry in[MANIFEST_FANOUT], out;
    uint8_t *raw = malloc(MANIFEST_MAX_SEGMENT + MANIFEST_ENTRY);
    const uint8_t *entries;
    unsigned level;
    size_t n, len;

    assert_non_null(raw);
    for (size_t i = 0; i < MANIFEST_FANOUT; i++)
        chunk_entry(&in[i], i);
    len = manifest_segment_encode(2, in, 3, raw);
    assert_int_equal(len, MANIFEST_SEGMENT_HEADER + 3 * MANIFEST_ENTRY);
    assert_int_equal(raw[0], 2);
    assert_int_equal(raw[7], 3);
    assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n), 0);
    assert_int_equal(level, 2);
    assert_int_equal(n, 3);
    assert_ptr_equal(entries, raw + MANIFEST_SEGMENT_HEADER);
    manifest_entry_at(entries, 2, &out);
    assert_entry_equal(&out, &in[2]);

    /* Every shorter or longer length, and every truncation, is refused. */
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(manifest_segment_parse(raw, cut, &level, &entries, &n),
                         MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_segment_parse(raw, len + 1, &level, &entries, &n),
                     MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_segment_parse(raw, len + MANIFEST_ENTRY, &level, &entries, &n),
                     MANIFEST_E_CORRUPT);
    /* Reserved bytes must be zero. */
    for (int k = 1; k < 4; k++) {
        raw[k] = 1;
        assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n),
                         MANIFEST_E_CORRUPT);
        raw[k] = 0;
    }
    /* Levels 0 to MAX_DEPTH - 1 only. */
    raw[0] = MANIFEST_MAX_DEPTH - 1;
    assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n), 0);
    raw[0] = MANIFEST_MAX_DEPTH;
    assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n), MANIFEST_E_CORRUPT);
    raw[0] = 0xff;
    assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n), MANIFEST_E_CORRUPT);

    /* No empty segments; counts up to FANOUT; a count the bytes do not hold. */
    len = manifest_segment_encode(0, in, 0, raw);
    assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n), MANIFEST_E_CORRUPT);
    len = manifest_segment_encode(0, in, MANIFEST_FANOUT, raw);
    assert_int_equal(len, MANIFEST_MAX_SEGMENT);
    assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n), 0);
    assert_int_equal(n, MANIFEST_FANOUT);
    raw[6] = (MANIFEST_FANOUT + 1) >> 8;
    raw[7] = (MANIFEST_FANOUT + 1) & 0xff;
    memset(raw + len, 0, MANIFEST_ENTRY);
    assert_int_equal(manifest_segment_parse(raw, len + MANIFEST_ENTRY, &level, &entries, &n),
                     MANIFEST_E_CORRUPT);
    raw[4] = 0x80; /* a count of 2^31 + ... */
    assert_int_equal(manifest_segment_parse(raw, len, &level, &entries, &n), MANIFEST_E_CORRUPT);
    free(raw);
}

/* ---- the cursor over trees built by hand ------------------------------------- */

/* A segment kept by the test: its raw bytes and its id. */
struct seg {
    uint8_t raw[MANIFEST_SEGMENT_HEADER + 8 * MANIFEST_ENTRY];
    size_t len;
    struct manifest_entry up; /* its entry one level up: id and the bytes below it */
};

static void seg_make(struct seg *s, unsigned level, const struct manifest_entry *e, size_t n)
{
    assert_true(n <= 8);
    s->len = manifest_segment_encode(level, e, n, s->raw);
    SHA256(s->raw, s->len, s->up.hash);
    s->up.bytes = 0;
    for (size_t i = 0; i < n; i++)
        s->up.bytes += e[i].bytes;
}

/* Expects the cursor's next chunk to be `want`, at content offset `*offset`. */
static void expect_chunk(struct manifest_cursor *c, const struct manifest_entry *want,
                         uint64_t *offset)
{
    struct manifest_entry got;
    uint8_t need[PROTO_HASH_LEN];

    assert_int_equal(manifest_cursor_next(c, &got, need), 0);
    assert_entry_equal(&got, want);
    *offset += want->bytes;
    assert_int_equal(c->offset, *offset);
}

static void expect_need(struct manifest_cursor *c, const struct seg *s)
{
    struct manifest_entry got;
    uint8_t need[PROTO_HASH_LEN];

    assert_int_equal(manifest_cursor_next(c, &got, need), MANIFEST_E_NEED);
    assert_memory_equal(need, s->up.hash, PROTO_HASH_LEN);
}

static void expect_end(struct manifest_cursor *c)
{
    struct manifest_entry got;
    uint8_t need[PROTO_HASH_LEN];

    assert_int_equal(manifest_cursor_next(c, &got, need), MANIFEST_E_END);
    assert_int_equal(manifest_cursor_next(c, &got, need), MANIFEST_E_END);
}

static void test_cursor_depth0(void **state)
{
    struct manifest_entry e[3];
    uint8_t root[3 * MANIFEST_ENTRY];
    struct manifest_cursor c;
    uint64_t offset = 0;

    for (int i = 0; i < 3; i++)
        chunk_entry(&e[i], (uint64_t)i + 5);
    manifest_entries_encode(e, 3, root);
    assert_int_equal(manifest_cursor_init(&c, 0, root, sizeof(root)), 0);
    /* The cursor has its own copy of the root. */
    memset(root, 0, sizeof(root));
    for (int i = 0; i < 3; i++)
        expect_chunk(&c, &e[i], &offset);
    expect_end(&c);
    /* Nothing to feed at depth 0. */
    assert_int_equal(manifest_cursor_feed(&c, root, sizeof(root)), MANIFEST_E_CORRUPT);
    manifest_cursor_clear(&c);

    /* An empty document ends at once. */
    assert_int_equal(manifest_cursor_init(&c, 0, root, 0), 0);
    expect_end(&c);
    manifest_cursor_clear(&c);
}

static void test_cursor_depth1(void **state)
{
    struct manifest_entry chunks[5], up[2];
    struct seg s[2], wrong_level, wrong_bytes;
    uint8_t root[2 * MANIFEST_ENTRY];
    struct manifest_cursor c;
    uint64_t offset = 0;

    for (int i = 0; i < 5; i++)
        chunk_entry(&chunks[i], (uint64_t)i * 3 + 1);
    seg_make(&s[0], 0, chunks, 3);
    seg_make(&s[1], 0, chunks + 3, 2);
    seg_make(&wrong_level, 1, chunks, 3); /* same entries, but says level 1 */
    chunks[2].bytes++;
    seg_make(&wrong_bytes, 0, chunks, 3); /* one byte more than its parent says */
    chunks[2].bytes--;
    up[0] = s[0].up;
    up[1] = s[1].up;
    manifest_entries_encode(up, 2, root);

    assert_int_equal(manifest_cursor_init(&c, 1, root, sizeof(root)), 0);
    /* Nothing asked for yet: nothing can be fed. */
    assert_int_equal(manifest_cursor_feed(&c, s[0].raw, s[0].len), MANIFEST_E_CORRUPT);
    expect_need(&c, &s[0]);
    expect_need(&c, &s[0]); /* asking again asks for the same */
    assert_int_equal(manifest_cursor_feed(&c, wrong_level.raw, wrong_level.len),
                     MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_cursor_feed(&c, wrong_bytes.raw, wrong_bytes.len),
                     MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_cursor_feed(&c, s[0].raw, s[0].len - 1), MANIFEST_E_CORRUPT);
    /* Refused segments leave the cursor where it was. */
    expect_need(&c, &s[0]);
    assert_int_equal(manifest_cursor_feed(&c, s[0].raw, s[0].len), 0);
    /* Fed once: a second feed is not asked for. */
    assert_int_equal(manifest_cursor_feed(&c, s[1].raw, s[1].len), MANIFEST_E_CORRUPT);
    for (int i = 0; i < 3; i++)
        expect_chunk(&c, &chunks[i], &offset);
    expect_need(&c, &s[1]);
    assert_int_equal(manifest_cursor_feed(&c, s[1].raw, s[1].len), 0);
    for (int i = 3; i < 5; i++)
        expect_chunk(&c, &chunks[i], &offset);
    expect_end(&c);
    assert_int_equal(offset, s[0].up.bytes + s[1].up.bytes);
    manifest_cursor_clear(&c);
}

static void test_cursor_depth2(void **state)
{
    struct manifest_entry chunks[8], mid[2], top[2];
    struct seg leaf[4], inner[2], inner_bad;
    uint8_t root[2 * MANIFEST_ENTRY];
    struct manifest_cursor c;
    uint64_t offset = 0;

    /* Leaves of 2, 1, 3 and 2 chunks; inner segments of 2 leaves each. */
    static const size_t leaf_n[4] = {2, 1, 3, 2}, leaf_at[4] = {0, 2, 3, 6};
    for (int i = 0; i < 8; i++)
        chunk_entry(&chunks[i], (uint64_t)i * 11 + 2);
    for (int i = 0; i < 4; i++)
        seg_make(&leaf[i], 0, chunks + leaf_at[i], leaf_n[i]);
    for (int i = 0; i < 2; i++) {
        mid[0] = leaf[2 * i].up;
        mid[1] = leaf[2 * i + 1].up;
        seg_make(&inner[i], 1, mid, 2);
        top[i] = inner[i].up;
    }
    mid[0] = leaf[0].up;
    mid[1] = leaf[2].up; /* the wrong leaf: its bytes do not add up to what the root says */
    seg_make(&inner_bad, 1, mid, 2);
    manifest_entries_encode(top, 2, root);

    assert_int_equal(manifest_cursor_init(&c, 2, root, sizeof(root)), 0);
    expect_need(&c, &inner[0]);
    /* A leaf where an inner segment hangs: the wrong level. */
    assert_int_equal(manifest_cursor_feed(&c, leaf[0].raw, leaf[0].len), MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_cursor_feed(&c, inner_bad.raw, inner_bad.len), MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_cursor_feed(&c, inner[0].raw, inner[0].len), 0);
    expect_need(&c, &leaf[0]);
    /* An inner segment where a leaf hangs. */
    assert_int_equal(manifest_cursor_feed(&c, inner[1].raw, inner[1].len), MANIFEST_E_CORRUPT);
    for (int l = 0; l < 4; l++) {
        if (l == 2) {
            expect_need(&c, &inner[1]);
            assert_int_equal(manifest_cursor_feed(&c, inner[1].raw, inner[1].len), 0);
        }
        if (l > 0)
            expect_need(&c, &leaf[l]);
        /* Another leaf with the same level but other bytes does not fit here. */
        const struct seg *other = &leaf[(l + 1) % 4];
        if (other->up.bytes != leaf[l].up.bytes)
            assert_int_equal(manifest_cursor_feed(&c, other->raw, other->len), MANIFEST_E_CORRUPT);
        assert_int_equal(manifest_cursor_feed(&c, leaf[l].raw, leaf[l].len), 0);
        for (size_t i = 0; i < leaf_n[l]; i++)
            expect_chunk(&c, &chunks[leaf_at[l] + i], &offset);
    }
    expect_end(&c);
    assert_int_equal(offset, top[0].bytes + top[1].bytes);
    manifest_cursor_clear(&c);
}

static void test_cursor_hostile(void **state)
{
    struct manifest_entry e[2];
    uint8_t root[2 * MANIFEST_ENTRY];
    struct manifest_cursor c;
    struct seg s;

    chunk_entry(&e[0], 1);
    chunk_entry(&e[1], 2);
    manifest_entries_encode(e, 2, root);
    assert_int_equal(manifest_cursor_init(&c, 0, root, MANIFEST_ENTRY + 3), MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_cursor_init(&c, 1, root, 0), MANIFEST_E_CORRUPT);
    assert_int_equal(manifest_cursor_init(&c, MANIFEST_MAX_DEPTH + 1, root, sizeof(root)),
                     MANIFEST_E_CORRUPT);
    /* Byte counts that overflow when added up. */
    e[0].bytes = UINT64_MAX;
    manifest_entries_encode(e, 2, root);
    assert_int_equal(manifest_cursor_init(&c, 0, root, sizeof(root)), MANIFEST_E_CORRUPT);
    manifest_cursor_clear(&c);

    /*
     * A segment whose entries overflow when added up, under a parent that
     * claims the wrapped-around sum: refused all the same.
     */
    seg_make(&s, 0, e, 2); /* s.up.bytes wraps around to e[1].bytes - 1 */
    assert_int_equal(s.up.bytes, e[1].bytes - 1);
    manifest_entries_encode(&s.up, 1, root);
    assert_int_equal(manifest_cursor_init(&c, 1, root, MANIFEST_ENTRY), 0);
    expect_need(&c, &s);
    assert_int_equal(manifest_cursor_feed(&c, s.raw, s.len), MANIFEST_E_CORRUPT);
    manifest_cursor_clear(&c);
}

/* ---- the builder ------------------------------------------------------------------ */

static void test_builder_limits(void **state)
{
    struct manifest_builder b;
    struct manifest_entry e, *list;
    unsigned depth = 99, spill = 99;
    size_t n = 99;

    manifest_builder_init(&b);
    /* Nothing pushed: an empty depth-0 root. */
    assert_true(manifest_builder_done(&b, &depth, &spill));
    assert_int_equal(depth, 0);
    assert_null(manifest_builder_take(&b, 0, &n));
    assert_int_equal(n, 0);

    chunk_entry(&e, 1);
    assert_int_equal(manifest_builder_push(&b, MANIFEST_MAX_DEPTH + 1, &e), -E2BIG);
    for (unsigned i = 0; i < MANIFEST_FANOUT; i++) {
        assert_false(manifest_builder_full(&b, 0));
        assert_int_equal(manifest_builder_push(&b, 0, &e), 0);
    }
    /* Exactly FANOUT chunks: full, but still a depth-0 root, since nothing follows. */
    assert_true(manifest_builder_full(&b, 0));
    assert_int_equal(b.chunks, MANIFEST_FANOUT);
    assert_true(manifest_builder_done(&b, &depth, &spill));
    assert_int_equal(depth, 0);
    /* One more needs the full list taken first. */
    assert_int_equal(manifest_builder_push(&b, 0, &e), -E2BIG);
    assert_int_equal(b.chunks, MANIFEST_FANOUT);

    /* An entry above with one below: level 0 must be spilled before it is a root. */
    assert_int_equal(manifest_builder_push(&b, 1, &e), 0);
    assert_false(manifest_builder_done(&b, &depth, &spill));
    assert_int_equal(spill, 0);
    list = manifest_builder_take(&b, 0, &n);
    assert_non_null(list);
    assert_int_equal(n, MANIFEST_FANOUT);
    assert_entry_equal(&list[MANIFEST_FANOUT - 1], &e);
    free(list);
    assert_false(manifest_builder_full(&b, 0));
    assert_true(manifest_builder_done(&b, &depth, &spill));
    assert_int_equal(depth, 1);
    /* Segment entries do not count as chunks. */
    assert_int_equal(b.chunks, MANIFEST_FANOUT);
    manifest_builder_clear(&b);
}

/* Segments "stored" by the test, found again by id. */
struct sim_store {
    struct sim_seg {
        uint8_t id[PROTO_HASH_LEN];
        uint8_t *raw;
        size_t len;
    } * segs;
    size_t n, cap;
};

static void sim_push(struct manifest_builder *b, struct sim_store *st, unsigned level,
                     const struct manifest_entry *e);

/* Takes a level's list, stores it as a segment and pushes its entry one level up. */
static void sim_spill(struct manifest_builder *b, struct sim_store *st, unsigned level)
{
    struct manifest_entry up = {0}, *list;
    size_t n;

    list = manifest_builder_take(b, level, &n);
    assert_non_null(list);
    assert_true(n >= 1 && n <= MANIFEST_FANOUT);
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 64;
        st->segs = realloc(st->segs, st->cap * sizeof(*st->segs));
        assert_non_null(st->segs);
    }
    struct sim_seg *s = &st->segs[st->n++];
    s->raw = malloc(MANIFEST_SEGMENT_HEADER + n * MANIFEST_ENTRY);
    assert_non_null(s->raw);
    s->len = manifest_segment_encode(level, list, n, s->raw);
    SHA256(s->raw, s->len, s->id);
    for (size_t i = 0; i < n; i++)
        up.bytes += list[i].bytes;
    memcpy(up.hash, s->id, PROTO_HASH_LEN);
    free(list);
    sim_push(b, st, level + 1, &up);
}

static void sim_push(struct manifest_builder *b, struct sim_store *st, unsigned level,
                     const struct manifest_entry *e)
{
    if (manifest_builder_full(b, level))
        sim_spill(b, st, level);
    assert_int_equal(manifest_builder_push(b, level, e), 0);
}

static const struct sim_seg *sim_find(const struct sim_store *st, const uint8_t *id)
{
    for (size_t i = st->n; i-- > 0;) {
        if (memcmp(st->segs[i].id, id, PROTO_HASH_LEN) == 0)
            return &st->segs[i];
    }
    fail_msg("the cursor asked for a segment never stored");
    return NULL;
}

/* Builds the manifest of an n-chunk document and walks it back with the cursor. */
static void roundtrip(uint64_t nchunks, unsigned want_depth, size_t want_root)
{
    struct manifest_builder b;
    struct sim_store st = {0};
    struct manifest_entry e, got, *list;
    struct manifest_cursor c;
    uint8_t need[PROTO_HASH_LEN], *root;
    unsigned depth, spill;
    uint64_t i, offset = 0, feeds = 0;
    size_t n;
    int r;

    manifest_builder_init(&b);
    for (i = 0; i < nchunks; i++) {
        chunk_entry(&e, i);
        sim_push(&b, &st, 0, &e);
    }
    assert_int_equal(b.chunks, nchunks);
    while (!manifest_builder_done(&b, &depth, &spill))
        sim_spill(&b, &st, spill);
    if (depth != want_depth)
        fail_msg("%llu chunks: depth %u, expected %u", (unsigned long long)nchunks, depth,
                 want_depth);
    list = manifest_builder_take(&b, depth, &n);
    assert_int_equal(n, want_root);
    root = malloc(n * MANIFEST_ENTRY + 1);
    assert_non_null(root);
    manifest_entries_encode(list, n, root);
    free(list);
    manifest_builder_clear(&b);
    assert_true(manifest_root_valid(root, n * MANIFEST_ENTRY, depth));

    assert_int_equal(manifest_cursor_init(&c, depth, root, n * MANIFEST_ENTRY), 0);
    i = 0;
    while ((r = manifest_cursor_next(&c, &got, need)) != MANIFEST_E_END) {
        if (r == MANIFEST_E_NEED) {
            const struct sim_seg *s = sim_find(&st, need);
            assert_int_equal(manifest_cursor_feed(&c, s->raw, s->len), 0);
            feeds++;
            continue;
        }
        assert_int_equal(r, 0);
        chunk_entry(&e, i++);
        assert_entry_equal(&got, &e);
        offset += e.bytes;
        assert_int_equal(c.offset, offset);
    }
    assert_int_equal(i, nchunks);
    /* Every stored segment was read exactly once. */
    assert_int_equal(feeds, st.n);
    manifest_cursor_clear(&c);
    for (size_t k = 0; k < st.n; k++)
        free(st.segs[k].raw);
    free(st.segs);
    free(root);
}

static void test_builder_roundtrip(void **state)
{
    const uint64_t f = MANIFEST_FANOUT;

    roundtrip(0, 0, 0);
    roundtrip(1, 0, 1);
    roundtrip(f - 1, 0, f - 1);
    roundtrip(f, 0, f); /* exactly FANOUT: still inline */
    roundtrip(f + 1, 1, 2);
    roundtrip(3 * f - 7, 1, 3);
    roundtrip(f * f, 1, f); /* the largest depth-1 document */
    roundtrip(f * f + 1, 2, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_and_roots), cmocka_unit_test(test_segment_encode_parse),
        cmocka_unit_test(test_cursor_depth0),     cmocka_unit_test(test_cursor_depth1),
        cmocka_unit_test(test_cursor_depth2),     cmocka_unit_test(test_cursor_hostile),
        cmocka_unit_test(test_builder_limits),    cmocka_unit_test(test_builder_roundtrip),
    };
    return cmocka_run_group_tests_name("manifests", tests, NULL, NULL);
}
