/*
 * Unit tests for the wire protocol module, one program in six files
 * (test-proto-util.h lists them). This one holds the msgpack validator that guards
 * msgpack_unpack_next() against hostile counts: every msgpack format is
 * accepted, whole and nowhere else, and main(), which runs every file's
 * group in turn.
 */
#include "proto/test-proto-util.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_accepts_every_type),
        cmocka_unit_test(test_validate_single_byte_values),
    };
    int failed = test_proto_frame_run();

    failed += cmocka_run_group_tests_name("proto: validator accepts every type", tests, NULL, NULL);
    failed += test_proto_reject_run();
    failed += test_proto_msg_run();
    failed += test_proto_hex_run();
    failed += test_proto_fuzz_run();
    return failed;
}
