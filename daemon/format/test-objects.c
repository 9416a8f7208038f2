/*
 * Unit tests of journal entries (daemon/format/objects.c): adds (with and without
 * name, tags and metadata, manifest roots of depth 0 and above) and deletes
 * round-trip through encode and decode; hostile bytes (every truncation,
 * trailing bytes, not a map, each field missing or of the wrong type, roots
 * of a bad length, versions other than 2, strings with NUL bytes, entries
 * one byte over the size limit) are refused with -EBADMSG and leave nothing to free.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "daemon/format/manifest.h"
#include "daemon/format/objects.h"

static void make_hash(uint8_t h[PROTO_HASH_LEN], uint8_t seed)
{
    for (size_t i = 0; i < PROTO_HASH_LEN; i++)
        h[i] = (uint8_t)(seed + i * 29);
}

static void assert_entry_empty(const struct entry *e)
{
    assert_int_equal(e->op, ENTRY_ADD);
    assert_null(e->mime);
    assert_null(e->name);
    assert_null(e->root);
    assert_null(e->tags);
    assert_null(e->meta_keys);
    assert_null(e->meta_values);
    assert_int_equal(e->ntags + e->nmeta + e->root_len + e->time_ns + e->size, 0);
}

static void test_add_roundtrip(void **state)
{
    char *tags[] = {"work", "draft", ""};
    char *keys[] = {"owner", "lang"}, *values[] = {"ann", ""};
    uint8_t root[3 * MANIFEST_ENTRY];
    struct entry in = {
        .time_ns = 1700000000123456789ull,
        .size = 5ull << 40,
        .nchunks = 3 * MANIFEST_FANOUT,
        .stored = 12345,
        .text = true,
        .mime = "text/plain; charset=utf-8",
        .name = "docs/notes \xc3\xa9t\xc3\xa9.txt",
        .depth = 2,
        .root = root,
        .root_len = sizeof(root),
        .tags = tags,
        .ntags = 3,
        .meta_keys = keys,
        .meta_values = values,
        .nmeta = 2,
        .fmode = 0100755,
        .fmtime = -1234567890123,
    };
    struct entry out;
    uint8_t *raw;
    size_t len;

    make_hash(in.doc, 1);
    for (size_t i = 0; i < sizeof(root); i++)
        root[i] = (uint8_t)(i * 7);
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_true(len > 0 && len <= OBJECTS_MAX_ENTRY);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.op, ENTRY_ADD);
    assert_memory_equal(out.doc, in.doc, PROTO_HASH_LEN);
    assert_int_equal(out.time_ns, in.time_ns);
    assert_int_equal(out.size, in.size);
    assert_int_equal(out.nchunks, in.nchunks);
    assert_int_equal(out.stored, in.stored);
    assert_true(out.text);
    assert_string_equal(out.mime, in.mime);
    assert_string_equal(out.name, in.name);
    assert_int_equal(out.fmode, 0100755);
    assert_int_equal(out.fmtime, -1234567890123);
    assert_int_equal(out.depth, 2);
    assert_int_equal(out.root_len, sizeof(root));
    assert_memory_equal(out.root, root, sizeof(root));
    assert_int_equal(out.ntags, 3);
    for (size_t i = 0; i < 3; i++)
        assert_string_equal(out.tags[i], tags[i]);
    assert_int_equal(out.nmeta, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(out.meta_keys[i], keys[i]);
        assert_string_equal(out.meta_values[i], values[i]);
    }
    objects_entry_clear(&out);
    assert_entry_empty(&out);
    free(raw);
}

/* An add with nothing optional: no name (NULL or ""), tags or metadata, an empty root. */
static void test_add_minimal(void **state)
{
    struct entry in = {.time_ns = 1}, out;
    uint8_t *raw, *raw2;
    size_t len, len2;

    make_hash(in.doc, 2);
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.op, ENTRY_ADD);
    assert_string_equal(out.mime, "application/octet-stream");
    assert_null(out.name);
    assert_false(out.text);
    assert_int_equal(out.depth, 0);
    assert_int_equal(out.root_len, 0);
    assert_int_equal(out.ntags, 0);
    assert_int_equal(out.nmeta, 0);
    assert_int_equal(out.size + out.nchunks + out.stored, 0);
    objects_entry_clear(&out);
    /* An empty name is no name: the same bytes. */
    in.name = "";
    assert_int_equal(objects_entry_encode(&in, &raw2, &len2), 0);
    assert_int_equal(len2, len);
    assert_memory_equal(raw2, raw, len);
    free(raw);
    free(raw2);
}

/* An edit: tags added and removed, metadata set and removed; an empty edit has none of them. */
static void test_edit_roundtrip(void **state)
{
    char *tags[] = {"new", NULL}, *untags[] = {"old", "older", NULL}, *unmeta[] = {"gone", NULL};
    char *keys[] = {"owner", NULL}, *values[] = {"ann", NULL};
    struct entry in = {.op = ENTRY_EDIT,
                       .time_ns = 7,
                       .tags = tags,
                       .ntags = 1,
                       .untags = untags,
                       .nuntags = 2,
                       .meta_keys = keys,
                       .meta_values = values,
                       .nmeta = 1,
                       .unmeta = unmeta,
                       .nunmeta = 1},
                 out;
    uint8_t *raw;
    size_t len;

    make_hash(in.doc, 4);
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.op, ENTRY_EDIT);
    assert_memory_equal(out.doc, in.doc, PROTO_HASH_LEN);
    assert_int_equal(out.time_ns, 7);
    assert_int_equal(out.ntags, 1);
    assert_string_equal(out.tags[0], "new");
    assert_int_equal(out.nuntags, 2);
    assert_string_equal(out.untags[1], "older");
    assert_int_equal(out.nmeta, 1);
    assert_string_equal(out.meta_values[0], "ann");
    assert_int_equal(out.nunmeta, 1);
    assert_string_equal(out.unmeta[0], "gone");
    assert_null(out.name);
    assert_null(out.root);
    objects_entry_clear(&out);
    free(raw);
    in = (struct entry){.op = ENTRY_EDIT, .time_ns = 8};
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.ntags + out.nuntags + out.nmeta + out.nunmeta, 0);
    objects_entry_clear(&out);
    free(raw);
}

/*
 * A file's mode goes only with a name; one this build does not know (a
 * FIFO's, bits past 07777) is read as none, and a mistyped one is refused.
 */
static void test_add_file_mode(void **state)
{
    static const uint64_t unknown[] = {0010644, 0100644 | 010000, 0, 0140755};
    struct entry in = {.time_ns = 1, .fmode = 0120777, .fmtime = 5}, out;
    uint8_t *raw;
    size_t len;

    make_hash(in.doc, 3);
    /* Without a name, no mode is written. */
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.fmode + out.fmtime, 0);
    objects_entry_clear(&out);
    free(raw);
    in.name = "link";
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        in.fmode = (uint32_t)unknown[i];
        assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
        assert_int_equal(objects_entry_decode(raw, len, &out), 0);
        assert_string_equal(out.name, "link");
        assert_int_equal(out.fmode + out.fmtime, 0);
        objects_entry_clear(&out);
        free(raw);
    }
    in.fmode = 0040700;
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.fmode, 0040700);
    assert_int_equal(out.fmtime, 5);
    objects_entry_clear(&out);
    free(raw);
}

static void test_delete_roundtrip(void **state)
{
    struct entry in = {.op = ENTRY_DELETE, .time_ns = UINT64_MAX, .mime = "ignored"}, out;
    uint8_t *raw;
    size_t len;

    make_hash(in.doc, 3);
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.op, ENTRY_DELETE);
    assert_memory_equal(out.doc, in.doc, PROTO_HASH_LEN);
    assert_int_equal(out.time_ns, UINT64_MAX);
    assert_null(out.mime); /* a delete carries nothing else */
    assert_null(out.root);
    objects_entry_clear(&out);
    free(raw);
}

/* `rm NAME`'s entries: an unname with its name, a delete that applies only when unnamed. */
static void test_unname_and_conditional_delete(void **state)
{
    struct entry un = {.op = ENTRY_UNNAME, .time_ns = 7, .name = "a/b.txt"};
    struct entry cond = {.op = ENTRY_DELETE, .time_ns = 7, .if_unnamed = true}, out;
    struct entry nameless = {.op = ENTRY_UNNAME, .time_ns = 7};
    uint8_t *raw, *raw2;
    size_t len, len2;

    make_hash(un.doc, 4);
    memcpy(cond.doc, un.doc, PROTO_HASH_LEN);
    assert_int_equal(objects_entry_encode(&un, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.op, ENTRY_UNNAME);
    assert_string_equal(out.name, "a/b.txt");
    assert_memory_equal(out.doc, un.doc, PROTO_HASH_LEN);
    objects_entry_clear(&out);
    assert_int_equal(objects_entry_encode(&cond, &raw2, &len2), 0);
    assert_int_equal(objects_entry_decode(raw2, len2, &out), 0);
    assert_int_equal(out.op, ENTRY_DELETE);
    assert_true(out.if_unnamed);
    objects_entry_clear(&out);
    /* Same doc and time, different entries: different bytes, so different record ids. */
    assert_true(len != len2 || memcmp(raw, raw2, len) != 0);
    free(raw);
    free(raw2);
    assert_int_equal(objects_entry_encode(&nameless, &raw, &len), -EINVAL);
}

/* A void entry: the cancelled entry's id in doc, nothing else. */
static void test_void_entry(void **state)
{
    struct entry v = {.op = ENTRY_VOID, .time_ns = 9}, out;
    uint8_t *raw;
    size_t len;

    (void)state;
    make_hash(v.doc, 5);
    assert_int_equal(objects_entry_encode(&v, &raw, &len), 0);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(out.op, ENTRY_VOID);
    assert_int_equal(out.time_ns, 9);
    assert_memory_equal(out.doc, v.doc, PROTO_HASH_LEN);
    assert_null(out.name);
    objects_entry_clear(&out);
    free(raw);
}

/* ---- hostile bytes ------------------------------------------------------------------ */

static void expect_bad(const uint8_t *raw, size_t len, const char *what)
{
    struct entry e;
    int r;

    memset(&e, 0x5a, sizeof(e));
    r = objects_entry_decode(raw, len, &e);
    if (r != -EBADMSG)
        fail_msg("%s: decoded with %d", what, r);
    assert_entry_empty(&e);
}

static void test_truncated(void **state)
{
    char *tags[] = {"t"}, *keys[] = {"k"}, *values[] = {"v"};
    uint8_t root[MANIFEST_ENTRY] = {1, 2, 3};
    struct entry in = {.time_ns = 5,
                       .name = "n",
                       .root = root,
                       .root_len = sizeof(root),
                       .tags = tags,
                       .ntags = 1,
                       .meta_keys = keys,
                       .meta_values = values,
                       .nmeta = 1};
    uint8_t *raw;
    size_t len;

    make_hash(in.doc, 4);
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    for (size_t cut = 0; cut < len; cut++) {
        char what[32];
        snprintf(what, sizeof(what), "cut to %zu", cut);
        expect_bad(raw, cut, what);
    }
    /* One trailing byte: not exactly one map. */
    uint8_t *longer = malloc(len + 1);
    assert_non_null(longer);
    memcpy(longer, raw, len);
    longer[len] = 0xc0;
    expect_bad(longer, len + 1, "a trailing byte");
    free(longer);
    free(raw);
}

/* A well-formed entry up to OBJECTS_MAX_ENTRY bytes decodes; one byte more does not. */
static void test_size_limit(void **state)
{
    char *tag = malloc(OBJECTS_MAX_ENTRY);
    char *tags[1] = {tag};
    struct entry in = {.time_ns = 1, .tags = tags, .ntags = 1}, out;
    uint8_t *raw;
    size_t len, tag_len = OBJECTS_MAX_ENTRY - 1000;

    assert_non_null(tag);
    make_hash(in.doc, 5);
    /* Grow the one tag until the entry is exactly at the limit. */
    for (;;) {
        memset(tag, 'x', tag_len);
        tag[tag_len] = '\0';
        assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
        if (len >= OBJECTS_MAX_ENTRY)
            break;
        free(raw);
        tag_len += OBJECTS_MAX_ENTRY - len;
    }
    assert_int_equal(len, OBJECTS_MAX_ENTRY);
    assert_int_equal(objects_entry_decode(raw, len, &out), 0);
    assert_int_equal(strlen(out.tags[0]), tag_len);
    objects_entry_clear(&out);
    free(raw);
    tag[tag_len] = 'x';
    tag[tag_len + 1] = '\0';
    assert_int_equal(objects_entry_encode(&in, &raw, &len), 0);
    assert_int_equal(len, OBJECTS_MAX_ENTRY + 1);
    expect_bad(raw, len, "one byte over the limit");
    free(raw);
    free(tag);
}

/* How one field of an otherwise valid add is packed: left out, or replaced. */
enum how { KEEP, OMIT, AS_STR, AS_INT, AS_NEG, AS_BOOL, AS_ARRAY, AS_MAP, SPECIAL };

struct field_case {
    const char *key;
    enum how how;
    const char *what;
};

static void pack_str_n(msgpack_packer *pk, const char *s, size_t n)
{
    proto_pack_str(pk, s, n);
}

/*
 * Packs a valid add (depth 1, one root entry, a name, a tag, one metadata
 * pair) with `key` packed as `how`; SPECIAL cases are handled per key.
 */
static void pack_add(msgpack_sbuffer *sb, const char *key, enum how how, int special)
{
    static const char *const keys[] = {"v",      "op",     "doc",   "time", "size", "mime", "text",
                                       "chunks", "stored", "depth", "root", "name", "tags", "meta"};
    const size_t nkeys = sizeof(keys) / sizeof(keys[0]);
    msgpack_packer pk;
    uint8_t bytes[2 * MANIFEST_ENTRY + 8] = {0};

    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, (uint32_t)(nkeys - (how == OMIT)));
    for (size_t i = 0; i < nkeys; i++) {
        const char *k = keys[i];
        bool this = key && strcmp(k, key) == 0;
        if (this && how == OMIT)
            continue;
        proto_pack_cstr(&pk, k);
        if (this && how != KEEP && how != SPECIAL) {
            switch (how) {
            case AS_STR:
                proto_pack_cstr(&pk, "2");
                break;
            case AS_INT:
                msgpack_pack_uint32(&pk, 1);
                break;
            case AS_NEG:
                msgpack_pack_int32(&pk, -1);
                break;
            case AS_BOOL:
                msgpack_pack_true(&pk);
                break;
            case AS_ARRAY:
                msgpack_pack_array(&pk, 1);
                msgpack_pack_uint32(&pk, 7);
                break;
            case AS_MAP:
                msgpack_pack_map(&pk, 1);
                proto_pack_cstr(&pk, "a");
                proto_pack_cstr(&pk, "b");
                break;
            default:
                break;
            }
            continue;
        }
        if (strcmp(k, "v") == 0) {
            msgpack_pack_uint32(&pk, this ? (uint32_t)special : 2);
        } else if (strcmp(k, "op") == 0) {
            proto_pack_cstr(&pk, this ? "remove" : "add");
        } else if (strcmp(k, "doc") == 0) {
            proto_pack_bin(&pk, bytes, this ? (size_t)special : PROTO_HASH_LEN);
        } else if (strcmp(k, "depth") == 0) {
            msgpack_pack_uint32(&pk, this ? (uint32_t)special : 1);
        } else if (strcmp(k, "root") == 0) {
            if (this && special < 0)
                proto_pack_bin(&pk, NULL, 0);
            else
                proto_pack_bin(&pk, bytes, this ? (size_t)special : MANIFEST_ENTRY);
        } else if (strcmp(k, "mime") == 0 || strcmp(k, "name") == 0) {
            if (this)
                pack_str_n(&pk, "a\0b", 3); /* a NUL inside */
            else
                proto_pack_cstr(&pk, k);
        } else if (strcmp(k, "text") == 0) {
            msgpack_pack_false(&pk);
        } else if (strcmp(k, "tags") == 0) {
            msgpack_pack_array(&pk, 2);
            proto_pack_cstr(&pk, "t");
            if (this)
                pack_str_n(&pk, "x\0y", 3);
            else
                proto_pack_cstr(&pk, "u");
        } else if (strcmp(k, "meta") == 0) {
            msgpack_pack_map(&pk, 2);
            proto_pack_cstr(&pk, "k");
            proto_pack_cstr(&pk, "v");
            proto_pack_cstr(&pk, "j");
            if (this && special == 1)
                msgpack_pack_uint32(&pk, 9); /* a value that is not a string */
            else if (this)
                pack_str_n(&pk, "w\0", 2);
            else
                proto_pack_cstr(&pk, "w");
        } else {
            msgpack_pack_uint64(&pk, 42); /* time, size, chunks, stored */
        }
    }
}

static void expect_add(const char *key, enum how how, int special, const char *what, bool ok)
{
    msgpack_sbuffer sb;
    struct entry e;

    pack_add(&sb, key, how, special);
    if (ok) {
        assert_int_equal(objects_entry_decode((const uint8_t *)sb.data, sb.size, &e), 0);
        objects_entry_clear(&e);
    } else {
        expect_bad((const uint8_t *)sb.data, sb.size, what);
    }
    msgpack_sbuffer_destroy(&sb);
}

static void test_hostile_fields(void **state)
{
    /* The base entry is valid, and so is each optional field left out. */
    expect_add(NULL, KEEP, 0, "valid", true);
    expect_add("name", OMIT, 0, "no name", true);
    expect_add("tags", OMIT, 0, "no tags", true);
    expect_add("meta", OMIT, 0, "no meta", true);

    /* Every required field missing. */
    static const char *const required[] = {"v",    "op",     "doc",    "time",  "size", "mime",
                                           "text", "chunks", "stored", "depth", "root"};
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        expect_add(required[i], OMIT, 0, required[i], false);

    /* Wrong types. */
    static const struct field_case wrong[] = {
        {"v", AS_STR, "v as a string"},         {"op", AS_INT, "op as a number"},
        {"doc", AS_STR, "doc as a string"},     {"time", AS_STR, "time as a string"},
        {"time", AS_NEG, "a negative time"},    {"size", AS_BOOL, "size as a boolean"},
        {"chunks", AS_STR, "chunks as a str"},  {"stored", AS_NEG, "a negative stored"},
        {"depth", AS_STR, "depth as a string"}, {"root", AS_STR, "root as a string"},
        {"mime", AS_INT, "mime as a number"},   {"text", AS_INT, "text as a number"},
        {"name", AS_INT, "name as a number"},   {"tags", AS_MAP, "tags as a map"},
        {"tags", AS_STR, "tags as a string"},   {"tags", AS_ARRAY, "a tag that is a number"},
        {"meta", AS_ARRAY, "meta as an array"}, {"meta", AS_STR, "meta as a string"},
    };
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++)
        expect_add(wrong[i].key, wrong[i].how, 0, wrong[i].what, false);

    /* Versions other than 2, an unknown op, a doc id of the wrong length. */
    expect_add("v", SPECIAL, 1, "version 1", false);
    expect_add("v", SPECIAL, 3, "version 3", false);
    expect_add("v", SPECIAL, 2, "version 2", true);
    expect_add("op", SPECIAL, 0, "op remove", false);
    expect_add("doc", SPECIAL, PROTO_HASH_LEN - 1, "a 31-byte doc", false);
    expect_add("doc", SPECIAL, PROTO_HASH_LEN + 1, "a 33-byte doc", false);

    /* Roots: not a whole number of entries, empty above level 0, too deep. */
    expect_add("root", SPECIAL, MANIFEST_ENTRY + 1, "a 41-byte root", false);
    expect_add("root", SPECIAL, MANIFEST_ENTRY - 1, "a 39-byte root", false);
    expect_add("root", SPECIAL, -1, "an empty root at depth 1", false);
    expect_add("root", SPECIAL, 2 * MANIFEST_ENTRY, "a 2-entry root", true);
    expect_add("depth", SPECIAL, MANIFEST_MAX_DEPTH + 1, "depth 7", false);
    expect_add("depth", SPECIAL, MANIFEST_MAX_DEPTH, "depth 6", true);

    /* Strings with a NUL byte inside. */
    expect_add("mime", SPECIAL, 0, "a NUL in the mime type", false);
    expect_add("name", SPECIAL, 0, "a NUL in the name", false);
    expect_add("tags", SPECIAL, 0, "a NUL in a tag", false);
    expect_add("meta", SPECIAL, 0, "a NUL in a metadata value", false);
    expect_add("meta", SPECIAL, 1, "a metadata value that is a number", false);
}

static void test_not_a_map(void **state)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;

    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 2);
    proto_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 2);
    expect_bad((const uint8_t *)sb.data, sb.size, "an array");
    msgpack_sbuffer_destroy(&sb);
    expect_bad((const uint8_t *)"", 0, "nothing");
    expect_bad((const uint8_t *)"\x80", 1, "an empty map");
    /* A delete with a bad doc is refused as well. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    proto_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 2);
    proto_pack_cstr(&pk, "op");
    proto_pack_cstr(&pk, "delete");
    proto_pack_cstr(&pk, "doc");
    proto_pack_bin(&pk, "short", 5);
    proto_pack_cstr(&pk, "time");
    msgpack_pack_uint32(&pk, 1);
    expect_bad((const uint8_t *)sb.data, sb.size, "a delete with a 5-byte doc");
    msgpack_sbuffer_destroy(&sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_roundtrip),
        cmocka_unit_test(test_add_minimal),
        cmocka_unit_test(test_add_file_mode),
        cmocka_unit_test(test_edit_roundtrip),
        cmocka_unit_test(test_delete_roundtrip),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_unname_and_conditional_delete),
        cmocka_unit_test(test_void_entry),
        cmocka_unit_test(test_size_limit),
        cmocka_unit_test(test_hostile_fields),
        cmocka_unit_test(test_not_a_map),
    };
    return cmocka_run_group_tests_name("journal entries", tests, NULL, NULL);
}
