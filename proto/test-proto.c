/*
 * Unit tests for the wire protocol module: framing, the msgpack validator that
 * guards msgpack_unpack_next() against hostile counts, message parsing, the
 * typed getters, the error-name vocabulary and the hex helpers. The fuzz loops
 * at the end are deterministic (fixed seed) so that a failure reproduces; run
 * them under ASan to catch out-of-bounds reads.
 */
#include "proto/proto.h"
#include "proto/util.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A frame under construction: proto_frame_begin() on init, _end() on finish. */
struct frame {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    size_t start;
};

static void frame_init(struct frame *f)
{
    msgpack_sbuffer_init(&f->sbuf);
    msgpack_packer_init(&f->pk, &f->sbuf, msgpack_sbuffer_write);
    assert_int_equal(proto_frame_begin(&f->sbuf, &f->start), 0);
}

static void frame_finish(struct frame *f)
{
    proto_frame_end(&f->sbuf, f->start);
}

static const uint8_t *frame_payload(const struct frame *f)
{
    return (const uint8_t *)f->sbuf.data + f->start + 4;
}

static size_t frame_payload_len(const struct frame *f)
{
    return f->sbuf.size - f->start - 4;
}

static void frame_destroy(struct frame *f)
{
    msgpack_sbuffer_destroy(&f->sbuf);
}

/* Copies `len` bytes into an exact-size heap block so ASan sees any over-read. */
static uint8_t *exact_copy(const void *src, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    if (len)
        memcpy(p, src, len);
    return p;
}

static int validate_exact(const void *buf, size_t len, unsigned depth)
{
    uint8_t *copy = exact_copy(buf, len);
    int r = proto_validate(copy, len, depth);
    free(copy);
    return r;
}

/* ---- framing ---------------------------------------------------------- */

static void test_frame_split_need_more(void **state)
{
    const uint8_t buf[] = {0x00, 0x00, 0x00, 0x05, 0x81, 0xa1, 'a', 0x01};
    const uint8_t *payload = NULL;
    size_t payload_len = 999, consumed = 999;

    /* Less than the length prefix: nothing is known yet. */
    for (size_t n = 0; n < 4; n++)
        assert_int_equal(
            proto_frame_split(buf, n, PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
            PROTO_FRAME_NEED_MORE);
    /* Prefix present, payload incomplete: the announced length is reported. */
    for (size_t n = 4; n < sizeof(buf); n++) {
        payload_len = 0;
        assert_int_equal(
            proto_frame_split(buf, n, PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
            PROTO_FRAME_NEED_MORE);
        assert_int_equal(payload_len, 5);
    }
    assert_null(payload);
    assert_int_equal(consumed, 999);
}

static void test_frame_split_empty(void **state)
{
    const uint8_t buf[] = {0, 0, 0, 0, 0x80};
    const uint8_t *payload = NULL;
    size_t payload_len = 999, consumed = 999;

    assert_int_equal(proto_frame_split(buf, 4, PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
                     PROTO_FRAME_EMPTY);
    assert_int_equal(payload_len, 0);
    assert_int_equal(
        proto_frame_split(buf, sizeof(buf), PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
        PROTO_FRAME_EMPTY);
    assert_null(payload);
}

static void test_frame_split_too_large(void **state)
{
    uint8_t buf[4];
    const uint8_t *payload = NULL;
    size_t payload_len = 0, consumed = 0;

    /* Rejected from the prefix alone: the reader must not wait for 1 MiB + 1. */
    proto_be32_write(buf, PROTO_MAX_FRAME + 1);
    assert_int_equal(proto_frame_split(buf, 4, PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
                     PROTO_FRAME_TOO_LARGE);
    assert_int_equal(payload_len, PROTO_MAX_FRAME + 1);

    proto_be32_write(buf, UINT32_MAX);
    assert_int_equal(proto_frame_split(buf, 4, PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
                     PROTO_FRAME_TOO_LARGE);
    assert_int_equal(payload_len, UINT32_MAX);

    /* Exactly the limit is allowed, it just needs more bytes. */
    proto_be32_write(buf, PROTO_MAX_FRAME);
    assert_int_equal(proto_frame_split(buf, 4, PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
                     PROTO_FRAME_NEED_MORE);
    assert_int_equal(payload_len, PROTO_MAX_FRAME);

    /* The limit is the caller's, not a constant. */
    proto_be32_write(buf, 17);
    assert_int_equal(proto_frame_split(buf, 4, 16, &payload, &payload_len, &consumed),
                     PROTO_FRAME_TOO_LARGE);
    assert_null(payload);
}

static void test_frame_split_exact_limit(void **state)
{
    enum { LIMIT = 16 };
    uint8_t buf[4 + LIMIT];
    const uint8_t *payload = NULL;
    size_t payload_len = 0, consumed = 0;

    memset(buf, 0xc0, sizeof(buf));
    proto_be32_write(buf, LIMIT);
    assert_int_equal(proto_frame_split(buf, sizeof(buf), LIMIT, &payload, &payload_len, &consumed),
                     0);
    assert_ptr_equal(payload, buf + 4);
    assert_int_equal(payload_len, LIMIT);
    assert_int_equal(consumed, sizeof(buf));
}

static void test_frame_split_exact(void **state)
{
    struct frame f;
    const uint8_t *payload = NULL;
    size_t payload_len = 0, consumed = 0;

    frame_init(&f);
    msgpack_pack_map(&f.pk, 1);
    proto_pack_cstr(&f.pk, "op");
    proto_pack_cstr(&f.pk, "ping");
    frame_finish(&f);

    const uint8_t *buf = (const uint8_t *)f.sbuf.data;
    assert_int_equal(proto_be32_read(buf), f.sbuf.size - 4);
    assert_int_equal(
        proto_frame_split(buf, f.sbuf.size, PROTO_MAX_FRAME, &payload, &payload_len, &consumed), 0);
    assert_ptr_equal(payload, buf + 4);
    assert_int_equal(payload_len, f.sbuf.size - 4);
    assert_int_equal(consumed, f.sbuf.size);
    assert_int_equal(proto_validate(payload, payload_len, PROTO_MAX_DEPTH), 0);
    frame_destroy(&f);
}

static void test_frame_split_back_to_back(void **state)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    size_t start1, start2;
    const uint8_t *payload;
    size_t payload_len, consumed, off = 0;
    struct proto_msg msg;
    uint64_t id;

    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    assert_int_equal(proto_frame_begin(&sbuf, &start1), 0);
    msgpack_pack_map(&pk, 1);
    proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, 1);
    proto_frame_end(&sbuf, start1);
    assert_int_equal(proto_frame_begin(&sbuf, &start2), 0);
    assert_int_equal(start2, start1 + 4 + proto_be32_read((uint8_t *)sbuf.data));
    msgpack_pack_map(&pk, 2);
    proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, 2);
    proto_pack_cstr(&pk, "op");
    proto_pack_cstr(&pk, "stat");
    proto_frame_end(&sbuf, start2);

    const uint8_t *buf = (const uint8_t *)sbuf.data;
    for (uint64_t want = 1; want <= 2; want++) {
        assert_int_equal(proto_frame_split(buf + off, sbuf.size - off, PROTO_MAX_FRAME, &payload,
                                           &payload_len, &consumed),
                         0);
        assert_ptr_equal(payload, buf + off + 4);
        assert_int_equal(proto_msg_parse(&msg, payload, payload_len), 0);
        assert_int_equal(proto_get_uint(msg.map, "id", &id), 0);
        assert_int_equal(id, want);
        assert_int_equal(msg.map->via.map.size, want);
        proto_msg_deinit(&msg);
        off += consumed;
    }
    assert_int_equal(off, sbuf.size);
    assert_int_equal(
        proto_frame_split(buf + off, 0, PROTO_MAX_FRAME, &payload, &payload_len, &consumed),
        PROTO_FRAME_NEED_MORE);
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_be32(void **state)
{
    uint8_t b[4];
    proto_be32_write(b, 0x01020304u);
    assert_memory_equal(b, "\x01\x02\x03\x04", 4);
    assert_int_equal(proto_be32_read(b), 0x01020304u);
    proto_be32_write(b, 0xfffefdfcu);
    assert_int_equal(proto_be32_read(b), 0xfffefdfcu);
}

/* ---- validator: every msgpack type is accepted ------------------------- */

static uint8_t big_body[70000];

/* Packs one value of a specific msgpack format; `first` is its type byte. */
struct value_case {
    const char *name;
    uint8_t first;
    msgpack_object_type type;
    void (*pack)(msgpack_packer *pk);
};

static void pk_nil(msgpack_packer *pk)
{
    msgpack_pack_nil(pk);
}
static void pk_false(msgpack_packer *pk)
{
    msgpack_pack_false(pk);
}
static void pk_true(msgpack_packer *pk)
{
    msgpack_pack_true(pk);
}
static void pk_posfix(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 0x7f);
}
static void pk_u8(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 0xff);
}
static void pk_u16(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 0xffff);
}
static void pk_u32(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, 0xffffffffu);
}
static void pk_u64(msgpack_packer *pk)
{
    msgpack_pack_uint64(pk, UINT64_MAX);
}
static void pk_negfix(msgpack_packer *pk)
{
    msgpack_pack_int64(pk, -32);
}
static void pk_i8(msgpack_packer *pk)
{
    msgpack_pack_int64(pk, -128);
}
static void pk_i16(msgpack_packer *pk)
{
    msgpack_pack_int64(pk, -32768);
}
static void pk_i32(msgpack_packer *pk)
{
    msgpack_pack_int64(pk, INT32_MIN);
}
static void pk_i64(msgpack_packer *pk)
{
    msgpack_pack_int64(pk, INT64_MIN);
}
static void pk_f32(msgpack_packer *pk)
{
    msgpack_pack_float(pk, 1.5f);
}
static void pk_f64(msgpack_packer *pk)
{
    msgpack_pack_double(pk, 2.25);
}
static void pk_fixstr(msgpack_packer *pk)
{
    proto_pack_cstr(pk, "hello");
}
static void pk_fixstr0(msgpack_packer *pk)
{
    proto_pack_str(pk, "", 0);
}
static void pk_str8(msgpack_packer *pk)
{
    proto_pack_str(pk, (const char *)big_body, 200);
}
static void pk_str16(msgpack_packer *pk)
{
    proto_pack_str(pk, (const char *)big_body, 300);
}
static void pk_str32(msgpack_packer *pk)
{
    proto_pack_str(pk, (const char *)big_body, 70000);
}
static void pk_bin8(msgpack_packer *pk)
{
    proto_pack_bin(pk, big_body, 3);
}
static void pk_bin16(msgpack_packer *pk)
{
    proto_pack_bin(pk, big_body, 256);
}
static void pk_bin32(msgpack_packer *pk)
{
    proto_pack_bin(pk, big_body, 65536);
}
static void pk_bin0(msgpack_packer *pk)
{
    proto_pack_bin(pk, big_body, 0);
}

static void pk_fixarray(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 3);
    msgpack_pack_nil(pk);
    proto_pack_cstr(pk, "x");
    msgpack_pack_array(pk, 0);
}

static void pk_array16(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 16);
    for (int i = 0; i < 16; i++)
        msgpack_pack_uint64(pk, (uint64_t)i * 1000);
}

static void pk_array32(msgpack_packer *pk)
{
    msgpack_pack_array(pk, 65536);
    for (int i = 0; i < 65536; i++)
        msgpack_pack_nil(pk);
}

static void pk_fixmap(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 2);
    proto_pack_cstr(pk, "a");
    msgpack_pack_map(pk, 0);
    msgpack_pack_uint64(pk, 7); /* keys need not be strings */
    msgpack_pack_true(pk);
}

static void pk_map16(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 16);
    for (int i = 0; i < 16; i++) {
        msgpack_pack_uint64(pk, (uint64_t)i);
        msgpack_pack_int64(pk, -i);
    }
}

static void pk_map32(msgpack_packer *pk)
{
    msgpack_pack_map(pk, 65536);
    for (int i = 0; i < 65536; i++) {
        msgpack_pack_uint64(pk, (uint64_t)i);
        msgpack_pack_nil(pk);
    }
}

static void pack_ext(msgpack_packer *pk, size_t len, int8_t type)
{
    msgpack_pack_ext(pk, len, type);
    msgpack_pack_ext_body(pk, big_body, len);
}

static void pk_fixext1(msgpack_packer *pk)
{
    pack_ext(pk, 1, 5);
}
static void pk_fixext2(msgpack_packer *pk)
{
    pack_ext(pk, 2, -5);
}
static void pk_fixext4(msgpack_packer *pk)
{
    pack_ext(pk, 4, 1);
}
static void pk_fixext8(msgpack_packer *pk)
{
    pack_ext(pk, 8, 2);
}
static void pk_fixext16(msgpack_packer *pk)
{
    pack_ext(pk, 16, 3);
}
static void pk_ext8(msgpack_packer *pk)
{
    pack_ext(pk, 3, 4);
}
static void pk_ext8_0(msgpack_packer *pk)
{
    pack_ext(pk, 0, 4);
}
static void pk_ext16(msgpack_packer *pk)
{
    pack_ext(pk, 300, 6);
}
static void pk_ext32(msgpack_packer *pk)
{
    pack_ext(pk, 65536, 7);
}

static const struct value_case value_cases[] = {
    {"nil", 0xc0, MSGPACK_OBJECT_NIL, pk_nil},
    {"false", 0xc2, MSGPACK_OBJECT_BOOLEAN, pk_false},
    {"true", 0xc3, MSGPACK_OBJECT_BOOLEAN, pk_true},
    {"positive fixint", 0x7f, MSGPACK_OBJECT_POSITIVE_INTEGER, pk_posfix},
    {"uint8", 0xcc, MSGPACK_OBJECT_POSITIVE_INTEGER, pk_u8},
    {"uint16", 0xcd, MSGPACK_OBJECT_POSITIVE_INTEGER, pk_u16},
    {"uint32", 0xce, MSGPACK_OBJECT_POSITIVE_INTEGER, pk_u32},
    {"uint64", 0xcf, MSGPACK_OBJECT_POSITIVE_INTEGER, pk_u64},
    {"negative fixint", 0xe0, MSGPACK_OBJECT_NEGATIVE_INTEGER, pk_negfix},
    {"int8", 0xd0, MSGPACK_OBJECT_NEGATIVE_INTEGER, pk_i8},
    {"int16", 0xd1, MSGPACK_OBJECT_NEGATIVE_INTEGER, pk_i16},
    {"int32", 0xd2, MSGPACK_OBJECT_NEGATIVE_INTEGER, pk_i32},
    {"int64", 0xd3, MSGPACK_OBJECT_NEGATIVE_INTEGER, pk_i64},
    {"float32", 0xca, MSGPACK_OBJECT_FLOAT32, pk_f32},
    {"float64", 0xcb, MSGPACK_OBJECT_FLOAT64, pk_f64},
    {"fixstr", 0xa5, MSGPACK_OBJECT_STR, pk_fixstr},
    {"empty fixstr", 0xa0, MSGPACK_OBJECT_STR, pk_fixstr0},
    {"str8", 0xd9, MSGPACK_OBJECT_STR, pk_str8},
    {"str16", 0xda, MSGPACK_OBJECT_STR, pk_str16},
    {"str32", 0xdb, MSGPACK_OBJECT_STR, pk_str32},
    {"empty bin8", 0xc4, MSGPACK_OBJECT_BIN, pk_bin0},
    {"bin8", 0xc4, MSGPACK_OBJECT_BIN, pk_bin8},
    {"bin16", 0xc5, MSGPACK_OBJECT_BIN, pk_bin16},
    {"bin32", 0xc6, MSGPACK_OBJECT_BIN, pk_bin32},
    {"fixarray", 0x93, MSGPACK_OBJECT_ARRAY, pk_fixarray},
    {"array16", 0xdc, MSGPACK_OBJECT_ARRAY, pk_array16},
    {"array32", 0xdd, MSGPACK_OBJECT_ARRAY, pk_array32},
    {"fixmap", 0x82, MSGPACK_OBJECT_MAP, pk_fixmap},
    {"map16", 0xde, MSGPACK_OBJECT_MAP, pk_map16},
    {"map32", 0xdf, MSGPACK_OBJECT_MAP, pk_map32},
    {"fixext1", 0xd4, MSGPACK_OBJECT_EXT, pk_fixext1},
    {"fixext2", 0xd5, MSGPACK_OBJECT_EXT, pk_fixext2},
    {"fixext4", 0xd6, MSGPACK_OBJECT_EXT, pk_fixext4},
    {"fixext8", 0xd7, MSGPACK_OBJECT_EXT, pk_fixext8},
    {"fixext16", 0xd8, MSGPACK_OBJECT_EXT, pk_fixext16},
    {"ext8", 0xc7, MSGPACK_OBJECT_EXT, pk_ext8},
    {"empty ext8", 0xc7, MSGPACK_OBJECT_EXT, pk_ext8_0},
    {"ext16", 0xc8, MSGPACK_OBJECT_EXT, pk_ext16},
    {"ext32", 0xc9, MSGPACK_OBJECT_EXT, pk_ext32},
};

/*
 * For each format: {"v": value, "z": 1} is accepted by the validator and the
 * parser, the value has the expected type, and every strict prefix as well as
 * the payload plus one trailing byte is rejected.
 */
static void test_validate_accepts_every_type(void **state)
{
    for (size_t i = 0; i < sizeof(big_body); i++)
        big_body[i] = (uint8_t)('a' + i % 26);

    for (size_t c = 0; c < ARRAY_SIZE(value_cases); c++) {
        const struct value_case *vc = &value_cases[c];
        struct frame f;
        struct proto_msg msg;
        uint64_t z = 0;

        frame_init(&f);
        msgpack_pack_map(&f.pk, 2);
        proto_pack_cstr(&f.pk, "v");
        vc->pack(&f.pk);
        proto_pack_cstr(&f.pk, "z");
        msgpack_pack_uint64(&f.pk, 1);
        frame_finish(&f);

        const uint8_t *p = frame_payload(&f);
        size_t len = frame_payload_len(&f);
        /* 0x82 (map of 2), 0xa1 'v', then the value's type byte. */
        if (p[3] != vc->first)
            fail_msg("%s: packed as 0x%02x, expected 0x%02x", vc->name, p[3], vc->first);
        if (validate_exact(p, len, PROTO_MAX_DEPTH) != 0)
            fail_msg("%s: valid payload rejected", vc->name);
        assert_int_equal(proto_msg_parse(&msg, p, len), 0);
        const msgpack_object *v = proto_map_get(msg.map, "v");
        assert_non_null(v);
        if (v->type != vc->type)
            fail_msg("%s: unpacked as type %d", vc->name, v->type);
        assert_int_equal(proto_get_uint(msg.map, "z", &z), 0);
        assert_int_equal(z, 1);
        proto_msg_deinit(&msg);

        /* Truncations: every prefix of a small payload, a sample of a large one. */
        for (size_t n = 0; n < len; n++) {
            if (len > 1024 && n > 64 && n < len - 64 && n % 997 != 0)
                continue;
            if (validate_exact(p, n, PROTO_MAX_DEPTH) != -EBADMSG)
                fail_msg("%s: prefix of %zu/%zu bytes accepted", vc->name, n, len);
        }

        /* Trailing bytes after the one map. */
        uint8_t *longer = malloc(len + 1);
        assert_non_null(longer);
        memcpy(longer, p, len);
        longer[len] = 0xc0;
        if (validate_exact(longer, len + 1, PROTO_MAX_DEPTH) != -EBADMSG)
            fail_msg("%s: trailing byte accepted", vc->name);
        assert_int_equal(proto_msg_parse(&msg, longer, len + 1), -EBADMSG);
        assert_null(msg.map);
        proto_msg_deinit(&msg);
        free(longer);
        frame_destroy(&f);
    }
}

/* Every single-byte scalar type byte is accepted as a whole value. */
static void test_validate_single_byte_values(void **state)
{
    for (unsigned b = 0; b < 256; b++) {
        uint8_t v = (uint8_t)b;
        bool single = b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3 || b == 0x80 ||
                      b == 0x90 || b == 0xa0;
        int r = validate_exact(&v, 1, PROTO_MAX_DEPTH);
        if (single && r != 0)
            fail_msg("0x%02x alone rejected", b);
        if (!single && r != -EBADMSG)
            fail_msg("0x%02x alone accepted", b);
    }
    assert_int_equal(validate_exact("", 0, PROTO_MAX_DEPTH), -EBADMSG);
}

/* ---- validator: rejections ------------------------------------------- */

struct bad_case {
    const char *name;
    const char *bytes;
    size_t len;
};

#define BAD(name, lit)                                                                             \
    {                                                                                              \
        name, lit, sizeof(lit) - 1                                                                 \
    }

static const struct bad_case bad_cases[] = {
    BAD("reserved 0xc1 alone", "\xc1"),
    BAD("reserved 0xc1 as value", "\x81\xa1v\xc1"),
    BAD("reserved 0xc1 as key", "\x81\xc1\x01"),
    BAD("reserved 0xc1 in array", "\x81\xa1v\x92\x01\xc1"),
    BAD("array32 count past end", "\xdd\xff\xff\xff\xff"),
    BAD("array32 count past end in map", "\x81\xa1v\xdd\xff\xff\xff\xff"),
    BAD("map32 count past end", "\xdf\xff\xff\xff\xff"),
    BAD("map32 count past end in map", "\x81\xa1v\xdf\x7f\xff\xff\xff\x01\x02"),
    BAD("array16 one element short", "\x81\xa1v\xdc\x00\x05\xc0\xc0\xc0\xc0"),
    BAD("map16 one value short", "\xde\x00\x02\x01\x02\x03"),
    BAD("fixarray one element short", "\x81\xa1v\x93\x01\x02"),
    BAD("fixmap one value short", "\x82\xa1"
                                  "a\x01\xa1"
                                  "b"),
    BAD("fixmap missing pairs", "\x8f\x01\x02"),
    BAD("array16 header truncated", "\x81\xa1v\xdc\x00"),
    BAD("map32 header truncated", "\x81\xa1v\xdf\x00\x00\x00"),
    BAD("fixstr past end", "\x81\xa1v\xa5"
                           "ab"),
    BAD("fixstr key past end", "\x81\xa9key"),
    BAD("str8 past end", "\x81\xa1v\xd9\x10"
                         "abc"),
    BAD("str8 length missing", "\x81\xa1v\xd9"),
    BAD("str16 past end", "\x81\xa1v\xda\x01\x00"
                          "abc"),
    BAD("str16 length truncated", "\x81\xa1v\xda\x01"),
    BAD("str32 past end", "\x81\xa1v\xdb\xff\xff\xff\xff"),
    BAD("str32 length truncated", "\x81\xa1v\xdb\x00\x00\x01"),
    BAD("bin8 past end", "\x81\xa1v\xc4\x05\x01"),
    BAD("bin32 past end", "\x81\xa1v\xc6\xff\xff\xff\xff"),
    BAD("ext8 type byte missing", "\x81\xa1v\xc7\x00"),
    BAD("ext8 past end", "\x81\xa1v\xc7\x02\x01\xaa"),
    BAD("ext32 past end", "\x81\xa1v\xc9\xff\xff\xff\xff\x01"),
    BAD("fixext16 past end", "\x81\xa1v\xd8\x01\x00\x00\x00"),
    BAD("uint16 truncated", "\x81\xa1v\xcd\x01"),
    BAD("uint64 truncated", "\x81\xa1v\xcf\x01\x02\x03\x04\x05\x06\x07"),
    BAD("float64 truncated", "\x81\xa1v\xcb\x01\x02\x03\x04\x05\x06\x07"),
    BAD("int32 truncated", "\x81\xa1v\xd2\x01\x02\x03"),
    BAD("map value missing", "\x81\xa1v"),
    BAD("trailing byte", "\x81\xa1v\x01\x00"),
    BAD("two maps", "\x81\xa1v\x01\x81\xa1v\x01"),
    BAD("trailing garbage", "\x80\xff\xff"),
};

static void test_validate_rejects(void **state)
{
    for (size_t i = 0; i < ARRAY_SIZE(bad_cases); i++) {
        const struct bad_case *bc = &bad_cases[i];
        struct proto_msg msg;

        if (validate_exact(bc->bytes, bc->len, PROTO_MAX_DEPTH) != -EBADMSG)
            fail_msg("%s: accepted by proto_validate", bc->name);
        uint8_t *copy = exact_copy(bc->bytes, bc->len);
        if (proto_msg_parse(&msg, copy, bc->len) != -EBADMSG)
            fail_msg("%s: accepted by proto_msg_parse", bc->name);
        assert_null(msg.map);
        proto_msg_deinit(&msg);
        free(copy);
    }
}

/*
 * Builds a map whose value is nested so that the payload has `levels`
 * non-empty containers (the outer map is level 1) around an integer.
 */
static void build_nested(struct frame *f, unsigned levels, bool arrays)
{
    frame_init(f);
    msgpack_pack_map(&f->pk, 1);
    proto_pack_cstr(&f->pk, "v");
    for (unsigned l = 1; l < levels; l++) {
        if (arrays) {
            msgpack_pack_array(&f->pk, 1);
        } else {
            msgpack_pack_map(&f->pk, 1);
            proto_pack_cstr(&f->pk, "k");
        }
    }
    msgpack_pack_uint64(&f->pk, 42);
    frame_finish(f);
}

static void test_validate_depth(void **state)
{
    for (int arrays = 0; arrays <= 1; arrays++) {
        struct frame f;
        struct proto_msg msg;

        build_nested(&f, PROTO_MAX_DEPTH, arrays);
        assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), PROTO_MAX_DEPTH),
                         0);
        assert_int_equal(proto_msg_parse(&msg, frame_payload(&f), frame_payload_len(&f)), 0);
        proto_msg_deinit(&msg);
        /* A caller's smaller limit applies. */
        assert_int_equal(
            validate_exact(frame_payload(&f), frame_payload_len(&f), PROTO_MAX_DEPTH - 1),
            -EBADMSG);
        frame_destroy(&f);

        build_nested(&f, PROTO_MAX_DEPTH + 1, arrays);
        assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), PROTO_MAX_DEPTH),
                         -EBADMSG);
        /* A larger limit is capped at PROTO_MAX_DEPTH: the stack is sized for it. */
        assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), 1000), -EBADMSG);
        assert_int_equal(proto_msg_parse(&msg, frame_payload(&f), frame_payload_len(&f)), -EBADMSG);
        proto_msg_deinit(&msg);
        frame_destroy(&f);

        /* Far deeper than the limit, and long enough that counts fit. */
        build_nested(&f, 200, arrays);
        assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), 1000), -EBADMSG);
        frame_destroy(&f);
    }

    /* Depth 0 allows only scalars; depth 1 a flat map. */
    assert_int_equal(validate_exact("\x01", 1, 0), 0);
    assert_int_equal(validate_exact("\x81\x01\x02", 3, 0), -EBADMSG);
    assert_int_equal(validate_exact("\x81\x01\x02", 3, 1), 0);
    assert_int_equal(validate_exact("\x81\x01\x91\x02", 4, 1), -EBADMSG);
    assert_int_equal(validate_exact("\x81\x01\x91\x02", 4, 2), 0);
}

/* Siblings do not add up: depth is nesting, not the number of containers. */
static void test_validate_wide_not_deep(void **state)
{
    struct frame f;

    frame_init(&f);
    msgpack_pack_map(&f.pk, 20);
    for (int i = 0; i < 20; i++) {
        msgpack_pack_uint64(&f.pk, (uint64_t)i);
        msgpack_pack_array(&f.pk, 2);
        msgpack_pack_array(&f.pk, 1);
        msgpack_pack_nil(&f.pk);
        msgpack_pack_map(&f.pk, 1);
        msgpack_pack_nil(&f.pk);
        msgpack_pack_nil(&f.pk);
    }
    frame_finish(&f);
    assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), 3), 0);
    assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), 2), -EBADMSG);
    frame_destroy(&f);
}

/* ---- message parsing and getters -------------------------------------- */

static void test_msg_parse_rejects_non_map(void **state)
{
    static const struct bad_case non_maps[] = {
        BAD("nil", "\xc0"),
        BAD("int", "\x01"),
        BAD("negative int", "\xff"),
        BAD("str", "\xa2hi"),
        BAD("bin", "\xc4\x01\x00"),
        BAD("empty array", "\x90"),
        BAD("array of map", "\x91\x81\xa1v\x01"),
        BAD("true", "\xc3"),
        BAD("float", "\xca\x00\x00\x00\x00"),
        BAD("ext", "\xd4\x01\x00"),
        BAD("map with an int key", "\x82\xa2id\x05\x01\x02"),
        BAD("map with a bin key", "\x81\xc4\x01k\x01"),
        BAD("map with a nil key", "\x81\xc0\x01"),
    };
    struct proto_msg msg;

    for (size_t i = 0; i < ARRAY_SIZE(non_maps); i++) {
        uint8_t *copy = exact_copy(non_maps[i].bytes, non_maps[i].len);
        /* Valid msgpack, so the validator alone is not what rejects it. */
        assert_int_equal(proto_validate(copy, non_maps[i].len, PROTO_MAX_DEPTH), 0);
        if (proto_msg_parse(&msg, copy, non_maps[i].len) != -EBADMSG)
            fail_msg("%s: accepted as a message", non_maps[i].name);
        assert_null(msg.map);
        proto_msg_deinit(&msg);
        free(copy);
    }

    /* The empty map is a map. */
    assert_int_equal(proto_msg_parse(&msg, (const uint8_t *)"\x80", 1), 0);
    assert_non_null(msg.map);
    assert_int_equal(msg.map->type, MSGPACK_OBJECT_MAP);
    assert_int_equal(msg.map->via.map.size, 0);
    proto_msg_deinit(&msg);
    assert_null(msg.map);
}

static void test_getters(void **state)
{
    static const uint8_t blob[] = {0x00, 0x01, 0xfe};
    struct frame f;
    struct proto_msg msg;
    uint64_t u = 77;
    bool b = true;
    const char *s = (const char *)&u;
    const uint8_t *bin = (const uint8_t *)&u;
    size_t len = 99;

    frame_init(&f);
    msgpack_pack_map(&f.pk, 8);
    proto_pack_cstr(&f.pk, "u");
    msgpack_pack_uint64(&f.pk, 1234567890123ull);
    proto_pack_cstr(&f.pk, "zero");
    msgpack_pack_uint64(&f.pk, 0);
    proto_pack_cstr(&f.pk, "neg");
    msgpack_pack_int64(&f.pk, -1);
    proto_pack_cstr(&f.pk, "b");
    msgpack_pack_false(&f.pk);
    proto_pack_cstr(&f.pk, "s");
    proto_pack_str(&f.pk, "hi\0there", 8);
    proto_pack_cstr(&f.pk, "x");
    proto_pack_bin(&f.pk, blob, sizeof(blob));
    proto_pack_cstr(&f.pk, "f");
    msgpack_pack_double(&f.pk, 1.0);
    proto_pack_cstr(&f.pk, "nil");
    msgpack_pack_nil(&f.pk);
    frame_finish(&f);
    assert_int_equal(proto_msg_parse(&msg, frame_payload(&f), frame_payload_len(&f)), 0);

    /* uint */
    assert_int_equal(proto_get_uint(msg.map, "u", &u), 0);
    assert_int_equal(u, 1234567890123ull);
    assert_int_equal(proto_get_uint(msg.map, "zero", &u), 0);
    assert_int_equal(u, 0);
    u = 77;
    assert_int_equal(proto_get_uint(msg.map, "neg", &u), -EINVAL);
    assert_int_equal(proto_get_uint(msg.map, "s", &u), -EINVAL);
    assert_int_equal(proto_get_uint(msg.map, "f", &u), -EINVAL);
    assert_int_equal(proto_get_uint(msg.map, "nil", &u), -EINVAL);
    assert_int_equal(proto_get_uint(msg.map, "missing", &u), PROTO_MISSING);
    assert_int_equal(proto_get_uint(msg.map, "", &u), PROTO_MISSING);
    assert_int_equal(proto_get_uint(msg.map, "uu", &u), PROTO_MISSING);
    assert_int_equal(u, 77);

    /* bool */
    assert_int_equal(proto_get_bool(msg.map, "b", &b), 0);
    assert_false(b);
    b = true;
    assert_int_equal(proto_get_bool(msg.map, "u", &b), -EINVAL);
    assert_int_equal(proto_get_bool(msg.map, "nil", &b), -EINVAL);
    assert_int_equal(proto_get_bool(msg.map, "missing", &b), PROTO_MISSING);
    assert_true(b);

    /* str: embedded NUL kept, the pointer is into the frame */
    assert_int_equal(proto_get_str(msg.map, "s", &s, &len), 0);
    assert_int_equal(len, 8);
    assert_memory_equal(s, "hi\0there", 8);
    assert_true(s > (const char *)frame_payload(&f) &&
                s < (const char *)frame_payload(&f) + frame_payload_len(&f));
    s = NULL;
    len = 99;
    assert_int_equal(proto_get_str(msg.map, "x", &s, &len), -EINVAL);
    assert_int_equal(proto_get_str(msg.map, "u", &s, &len), -EINVAL);
    assert_int_equal(proto_get_str(msg.map, "missing", &s, &len), PROTO_MISSING);
    assert_null(s);
    assert_int_equal(len, 99);

    /* bin */
    assert_int_equal(proto_get_bin(msg.map, "x", &bin, &len), 0);
    assert_int_equal(len, sizeof(blob));
    assert_memory_equal(bin, blob, sizeof(blob));
    bin = NULL;
    len = 99;
    assert_int_equal(proto_get_bin(msg.map, "s", &bin, &len), -EINVAL);
    assert_int_equal(proto_get_bin(msg.map, "missing", &bin, &len), PROTO_MISSING);
    assert_null(bin);
    assert_int_equal(len, 99);

    /* map_get and str_eq */
    assert_null(proto_map_get(msg.map, "five"));
    assert_null(proto_map_get(NULL, "u"));
    const msgpack_object *sv = proto_map_get(msg.map, "s");
    assert_non_null(sv);
    assert_false(proto_str_eq(sv, "hi")); /* the embedded NUL is part of the string */
    const msgpack_object *xv = proto_map_get(msg.map, "x");
    assert_false(proto_str_eq(xv, "\x00\x01\xfe"));
    /* A getter on something that is not a map finds nothing. */
    assert_int_equal(proto_get_uint(proto_map_get(msg.map, "u"), "u", &u), PROTO_MISSING);
    assert_int_equal(proto_get_uint(NULL, "u", &u), PROTO_MISSING);

    proto_msg_deinit(&msg);
    frame_destroy(&f);
}

static void test_str_eq(void **state)
{
    struct proto_msg msg;
    /* {"op": "get"} */
    assert_int_equal(proto_msg_parse(&msg, (const uint8_t *)"\x81\xa2op\xa3get", 8), 0);
    const msgpack_object *op = proto_map_get(msg.map, "op");
    assert_non_null(op);
    assert_true(proto_str_eq(op, "get"));
    assert_false(proto_str_eq(op, "ge"));
    assert_false(proto_str_eq(op, "gets"));
    assert_false(proto_str_eq(op, "GET"));
    assert_false(proto_str_eq(op, ""));
    assert_false(proto_str_eq(msg.map, "get"));
    proto_msg_deinit(&msg);
}

/*
 * Empty strings and binaries: msgpack-c hands out a NULL pointer for them, so
 * the lookup must not pass it to memcmp() (UBSan flags that), and callers get
 * length 0 with a pointer they must not dereference.
 */
static void test_empty_key_and_values(void **state)
{
    struct proto_msg msg;
    const char *s = "x";
    const uint8_t *bin = (const uint8_t *)"x";
    size_t len = 99;
    uint64_t u = 0;

    /* {"": 5, "s": "", "b": bin(0)} */
    static const uint8_t payload[] = {0x83, 0xa0, 0x05, 0xa1, 's', 0xa0, 0xa1, 'b', 0xc4, 0x00};
    assert_int_equal(proto_msg_parse(&msg, payload, sizeof(payload)), 0);
    assert_int_equal(proto_get_uint(msg.map, "", &u), 0);
    assert_int_equal(u, 5);
    assert_true(proto_str_eq(&msg.map->via.map.ptr[0].key, ""));
    assert_false(proto_str_eq(&msg.map->via.map.ptr[0].key, "s"));
    assert_int_equal(proto_get_str(msg.map, "s", &s, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(proto_get_bin(msg.map, "b", &bin, &len), 0);
    assert_int_equal(len, 0);
    assert_true(proto_str_eq(proto_map_get(msg.map, "s"), ""));
    proto_msg_deinit(&msg);
}

static void test_pack_error(void **state)
{
    struct frame f;
    struct proto_msg msg;
    const char *s;
    size_t len;
    uint64_t id;

    for (int with_message = 0; with_message <= 1; with_message++) {
        frame_init(&f);
        msgpack_pack_map(&f.pk, 2);
        proto_pack_cstr(&f.pk, "id");
        msgpack_pack_uint64(&f.pk, 9);
        proto_pack_error(&f.pk, PROTO_E_NOT_FOUND, with_message ? "no such object" : NULL);
        frame_finish(&f);
        assert_int_equal(proto_msg_parse(&msg, frame_payload(&f), frame_payload_len(&f)), 0);
        assert_int_equal(proto_get_uint(msg.map, "id", &id), 0);
        assert_int_equal(id, 9);
        const msgpack_object *err = proto_map_get(msg.map, "error");
        assert_non_null(err);
        assert_int_equal(err->type, MSGPACK_OBJECT_MAP);
        assert_int_equal(proto_get_str(err, "code", &s, &len), 0);
        assert_int_equal(proto_error_from_name(s, len), PROTO_E_NOT_FOUND);
        assert_int_equal(proto_get_str(err, "message", &s, &len), 0);
        const char *want = with_message ? "no such object" : "not_found";
        assert_int_equal(len, strlen(want));
        assert_memory_equal(s, want, len);
        proto_msg_deinit(&msg);
        frame_destroy(&f);
    }
}

/* ---- error names ------------------------------------------------------ */

static void test_error_names(void **state)
{
    /* The names are the protocol (PROTOCOL.md); the numbers are not. */
    assert_string_equal(proto_error_name(PROTO_OK), "ok");
    assert_string_equal(proto_error_name(PROTO_E_BAD_FRAME), "bad_frame");
    assert_string_equal(proto_error_name(PROTO_E_TOO_LARGE), "too_large");
    assert_string_equal(proto_error_name(PROTO_E_BAD_REQUEST), "bad_request");
    assert_string_equal(proto_error_name(PROTO_E_UNKNOWN_OP), "unknown_op");
    assert_string_equal(proto_error_name(PROTO_E_UNSUPPORTED_VERSION), "unsupported_version");
    assert_string_equal(proto_error_name(PROTO_E_NOT_FOUND), "not_found");
    assert_string_equal(proto_error_name(PROTO_E_AMBIGUOUS), "ambiguous");
    assert_string_equal(proto_error_name(PROTO_E_INTEGRITY), "integrity");
    assert_string_equal(proto_error_name(PROTO_E_BACKEND_UNAVAILABLE), "backend_unavailable");
    assert_string_equal(proto_error_name(PROTO_E_STORAGE), "storage_error");
    assert_string_equal(proto_error_name(PROTO_E_BUSY), "busy");
    assert_string_equal(proto_error_name(PROTO_E_SHUTTING_DOWN), "shutting_down");
    assert_string_equal(proto_error_name(PROTO_E_INTERNAL), "internal");

    for (int code = 0; code < PROTO_E_COUNT_; code++) {
        const char *name = proto_error_name((enum proto_error)code);
        assert_non_null(name);
        assert_true(strlen(name) > 0);
        if ((int)proto_error_from_name(name, strlen(name)) != code)
            fail_msg("error %d (%s) does not round-trip", code, name);
        for (int other = 0; other < code; other++)
            assert_string_not_equal(name, proto_error_name((enum proto_error)other));
    }

    assert_string_equal(proto_error_name(PROTO_E_COUNT_), "internal");
    assert_string_equal(proto_error_name((enum proto_error) - 1), "internal");
    assert_string_equal(proto_error_name((enum proto_error)1000), "internal");
}

static void test_error_from_unknown_name(void **state)
{
    /* Length, not NUL, ends the name: a prefix or an extension is unknown. */
    assert_int_equal(proto_error_from_name("not_found", 8), PROTO_E_INTERNAL);
    assert_int_equal(proto_error_from_name("not_foundx", 10), PROTO_E_INTERNAL);
    assert_int_equal(proto_error_from_name("not_foundx", 9), PROTO_E_NOT_FOUND);
    assert_int_equal(proto_error_from_name("NOT_FOUND", 9), PROTO_E_INTERNAL);
    assert_int_equal(proto_error_from_name("", 0), PROTO_E_INTERNAL);
    assert_int_equal(proto_error_from_name("whatever", 8), PROTO_E_INTERNAL);
    assert_int_equal(proto_error_from_name("busy\0", 5), PROTO_E_INTERNAL);
}

/* ---- hex ---------------------------------------------------------------- */

static void test_hex(void **state)
{
    static const uint8_t bin[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff};
    char hex[2 * sizeof(bin) + 1];
    uint8_t back[sizeof(bin)];

    memset(hex, 'X', sizeof(hex));
    proto_hex_encode(bin, sizeof(bin), hex);
    assert_string_equal(hex, "00017f80abcdefff");

    memset(back, 0x55, sizeof(back));
    assert_int_equal(proto_hex_decode(hex, strlen(hex), back, sizeof(back)), 0);
    assert_memory_equal(back, bin, sizeof(bin));
    memset(back, 0x55, sizeof(back));
    assert_int_equal(proto_hex_decode("00017F80ABCDEFFF", 16, back, sizeof(back)), 0);
    assert_memory_equal(back, bin, sizeof(bin));
    assert_int_equal(proto_hex_decode("00017f80AbCdEfFf", 16, back, sizeof(back)), 0);
    assert_memory_equal(back, bin, sizeof(bin));

    /* Wrong length in either direction, and bad digits anywhere. */
    assert_int_equal(proto_hex_decode(hex, 15, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("00017f80abcdefff00", 18, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("00017f80abcdeffg", 16, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("g0017f80abcdefff", 16, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("0001 f80abcdefff", 16, back, sizeof(back)), -EINVAL);
    assert_int_equal(proto_hex_decode("", 0, back, 0), 0);

    /* The empty encoding. */
    hex[0] = 'X';
    proto_hex_encode(bin, 0, hex);
    assert_string_equal(hex, "");

    /* A SHA-256 id round trip over every byte value. */
    uint8_t id[PROTO_HASH_LEN], id2[PROTO_HASH_LEN];
    char idhex[PROTO_HASH_HEX + 1];
    for (unsigned start = 0; start < 256; start += PROTO_HASH_LEN) {
        for (unsigned i = 0; i < PROTO_HASH_LEN; i++)
            id[i] = (uint8_t)(start + i);
        proto_hex_encode(id, sizeof(id), idhex);
        assert_int_equal(strlen(idhex), PROTO_HASH_HEX);
        assert_true(proto_is_hex(idhex, PROTO_HASH_HEX));
        for (unsigned i = 0; i < PROTO_HASH_HEX; i++)
            assert_true((idhex[i] >= '0' && idhex[i] <= '9') ||
                        (idhex[i] >= 'a' && idhex[i] <= 'f'));
        assert_int_equal(proto_hex_decode(idhex, PROTO_HASH_HEX, id2, sizeof(id2)), 0);
        assert_memory_equal(id, id2, sizeof(id));
    }
}

static void test_is_hex(void **state)
{
    assert_true(proto_is_hex("0123456789abcdefABCDEF", 22));
    assert_true(proto_is_hex("", 0));
    assert_true(proto_is_hex("abz", 2)); /* only `len` characters are looked at */
    assert_false(proto_is_hex("abz", 3));
    for (unsigned c = 1; c < 256; c++) {
        char s[2] = {(char)c, 0};
        bool want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (proto_is_hex(s, 1) != want)
            fail_msg("proto_is_hex wrong for 0x%02x", c);
    }
    assert_false(proto_is_hex("\0", 1));
}

/* ---- deterministic fuzzing -------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    /* xorshift64*: fixed seed, the same sequence on every platform. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static unsigned rng_below(unsigned n)
{
    return (unsigned)(rng_next() % n);
}

/* Walks a parsed message the way the daemon would. */
static void touch_message(const struct proto_msg *msg)
{
    uint64_t u;
    bool b;
    const char *s;
    const uint8_t *bin;
    size_t len;
    static const char *const keys[] = {"", "a", "op", "id", "v", "data", "name"};

    assert_int_equal(msg->map->type, MSGPACK_OBJECT_MAP);
    for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
        int r = proto_get_uint(msg->map, keys[i], &u);
        assert_true(r == 0 || r == PROTO_MISSING || r == -EINVAL);
        r = proto_get_bool(msg->map, keys[i], &b);
        assert_true(r == 0 || r == PROTO_MISSING || r == -EINVAL);
        r = proto_get_str(msg->map, keys[i], &s, &len);
        assert_true(r == 0 || r == PROTO_MISSING || r == -EINVAL);
        r = proto_get_bin(msg->map, keys[i], &bin, &len);
        assert_true(r == 0 || r == PROTO_MISSING || r == -EINVAL);
    }
}

/*
 * Runs one input through both entry points on an exact-size copy. The
 * validator is the guard for msgpack_unpack_next(), so whatever it accepts
 * must also unpack completely; and the parser must agree with it.
 */
static bool fuzz_one(const uint8_t *data, size_t len)
{
    uint8_t *copy = exact_copy(data, len);
    struct proto_msg msg;
    int v = proto_validate(copy, len, PROTO_MAX_DEPTH);
    int p = proto_msg_parse(&msg, copy, len);

    assert_true(v == 0 || v == -EBADMSG);
    assert_true(p == 0 || p == -EBADMSG);
    if (p == 0) {
        assert_int_equal(v, 0);
        touch_message(&msg);
    } else {
        assert_null(msg.map);
    }
    proto_msg_deinit(&msg);
    if (v == 0) {
        msgpack_unpacked up;
        size_t off = 0;
        msgpack_unpacked_init(&up);
        if (msgpack_unpack_next(&up, (const char *)copy, len, &off) != MSGPACK_UNPACK_SUCCESS ||
            off != len)
            fail_msg("validator accepted %zu bytes that msgpack cannot unpack completely", len);
        /* The parser accepts exactly the maps whose keys are all strings. */
        bool string_keyed = up.data.type == MSGPACK_OBJECT_MAP;
        for (uint32_t k = 0; string_keyed && k < up.data.via.map.size; k++)
            string_keyed = up.data.via.map.ptr[k].key.type == MSGPACK_OBJECT_STR;
        assert_int_equal(p == 0, string_keyed);
        msgpack_unpacked_destroy(&up);
    }
    free(copy);
    return v == 0;
}

static void test_fuzz_random_bytes(void **state)
{
    /* Bias towards interesting type bytes so that some inputs get deep. */
    static const uint8_t interesting[] = {0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa3, 0xbf,
                                          0xc0, 0xc1, 0xc4, 0xc7, 0xc9, 0xcc, 0xcf, 0xd4, 0xd8,
                                          0xd9, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0xff, 0x00, 0x01};
    uint8_t buf[96];
    unsigned accepted = 0;

    rng_state = 0x9E3779B97F4A7C15ull;
    for (unsigned iter = 0; iter < 300000; iter++) {
        size_t len = rng_below(sizeof(buf) + 1);
        for (size_t i = 0; i < len; i++) {
            uint64_t r = rng_next();
            if ((r & 3) == 0)
                buf[i] = interesting[(r >> 8) % sizeof(interesting)];
            else if ((r & 3) == 1)
                buf[i] = (uint8_t)((r >> 8) & 0x0f); /* small counts and lengths */
            else
                buf[i] = (uint8_t)(r >> 16);
        }
        if (len > 0 && (iter & 1))
            buf[0] = (uint8_t)(0x80 | rng_below(4)); /* a small map on top */
        accepted += fuzz_one(buf, len);
    }
    /* The generator must reach the accept path too, or the oracle is idle. */
    assert_true(accepted > 1000);
}

static void test_fuzz_mutated_frame(void **state)
{
    struct frame f;
    uint8_t buf[512];
    unsigned accepted = 0, parsed = 0;

    for (size_t i = 0; i < 64; i++)
        big_body[i] = (uint8_t)i;
    frame_init(&f);
    msgpack_pack_map(&f.pk, 8);
    proto_pack_cstr(&f.pk, "op");
    proto_pack_cstr(&f.pk, "put");
    proto_pack_cstr(&f.pk, "id");
    msgpack_pack_uint64(&f.pk, 300);
    proto_pack_cstr(&f.pk, "data");
    proto_pack_bin(&f.pk, big_body, 40);
    proto_pack_cstr(&f.pk, "tags");
    msgpack_pack_array(&f.pk, 3);
    proto_pack_cstr(&f.pk, "a");
    proto_pack_cstr(&f.pk, "bc");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_map(&f.pk, 1);
    msgpack_pack_nil(&f.pk);
    msgpack_pack_int64(&f.pk, -70000);
    proto_pack_cstr(&f.pk, "meta");
    msgpack_pack_map(&f.pk, 1);
    proto_pack_cstr(&f.pk, "k");
    proto_pack_str(&f.pk, (const char *)big_body + 32, 20);
    proto_pack_cstr(&f.pk, "f");
    msgpack_pack_double(&f.pk, 0.5);
    proto_pack_cstr(&f.pk, "e");
    pack_ext(&f.pk, 4, 3);
    proto_pack_cstr(&f.pk, "t");
    msgpack_pack_true(&f.pk);
    frame_finish(&f);

    const uint8_t *orig = frame_payload(&f);
    size_t orig_len = frame_payload_len(&f);
    assert_true(orig_len < sizeof(buf) / 2);
    assert_true(fuzz_one(orig, orig_len));

    rng_state = 0xC0FFEE1234567ull;
    for (unsigned iter = 0; iter < 300000; iter++) {
        size_t len = orig_len;
        memcpy(buf, orig, len);
        unsigned nmut = 1 + rng_below(4);
        for (unsigned m = 0; m < nmut && len > 0; m++) {
            size_t at = rng_below((unsigned)len);
            switch (rng_below(7)) {
            case 0:
                buf[at] ^= (uint8_t)(1u << rng_below(8));
                break;
            case 1:
                buf[at] = (uint8_t)rng_next();
                break;
            case 2:
                buf[at] = (uint8_t)(0xc1 + rng_below(31));
                break; /* type bytes */
            case 3:
                len = at;
                break; /* truncate */
            case 4:    /* insert a byte */
                if (len < sizeof(buf)) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = (uint8_t)rng_next();
                    len++;
                }
                break;
            case 5: /* delete a byte */
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
                break;
            case 6: { /* duplicate a span: repeats containers and lengths */
                size_t span = 1 + rng_below(16);
                if (at + span <= len && len + span <= sizeof(buf)) {
                    memmove(buf + at + span, buf + at, len - at);
                    len += span;
                }
                break;
            }
            }
        }
        bool ok = fuzz_one(buf, len);
        accepted += ok;
        parsed += ok && len > 0 && buf[0] >= 0x80 && buf[0] <= 0x8f;
    }
    assert_true(accepted > 1000);
    assert_true(parsed > 1000);
    frame_destroy(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_split_need_more),
        cmocka_unit_test(test_frame_split_empty),
        cmocka_unit_test(test_frame_split_too_large),
        cmocka_unit_test(test_frame_split_exact_limit),
        cmocka_unit_test(test_frame_split_exact),
        cmocka_unit_test(test_frame_split_back_to_back),
        cmocka_unit_test(test_be32),
        cmocka_unit_test(test_validate_accepts_every_type),
        cmocka_unit_test(test_validate_single_byte_values),
        cmocka_unit_test(test_validate_rejects),
        cmocka_unit_test(test_validate_depth),
        cmocka_unit_test(test_validate_wide_not_deep),
        cmocka_unit_test(test_msg_parse_rejects_non_map),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_str_eq),
        cmocka_unit_test(test_empty_key_and_values),
        cmocka_unit_test(test_pack_error),
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_error_from_unknown_name),
        cmocka_unit_test(test_hex),
        cmocka_unit_test(test_is_hex),
        cmocka_unit_test(test_fuzz_random_bytes),
        cmocka_unit_test(test_fuzz_mutated_frame),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
