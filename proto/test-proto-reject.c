/*
 * Unit tests of what the validator rejects: reserved bytes, counts and lengths
 * past the end, trailing bytes, and nesting past the depth limit.
 */
#include "proto/test-proto-util.h"

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
 * Builds a map whose value nests `levels` containers in all (the outer map is
 * level 1) around an integer, or with `empty`, the innermost one empty.
 */
static void build_nested(struct frame *f, unsigned levels, bool arrays, bool empty)
{
    frame_init(f);
    msgpack_pack_map(&f->pk, 1);
    proto_pack_cstr(&f->pk, "v");
    for (unsigned l = empty ? 2 : 1; l < levels; l++) {
        if (arrays) {
            msgpack_pack_array(&f->pk, 1);
        } else {
            msgpack_pack_map(&f->pk, 1);
            proto_pack_cstr(&f->pk, "k");
        }
    }
    if (!empty)
        msgpack_pack_uint64(&f->pk, 42);
    else if (arrays)
        msgpack_pack_array(&f->pk, 0);
    else
        msgpack_pack_map(&f->pk, 0);
    frame_finish(f);
}

/* PROTO_MAX_DEPTH levels pass (and a smaller limit applies); one more is refused. */
static void assert_depth_limit(bool arrays, bool empty)
{
    struct frame f;
    struct proto_msg msg;

    build_nested(&f, PROTO_MAX_DEPTH, arrays, empty);
    assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), PROTO_MAX_DEPTH), 0);
    assert_int_equal(proto_msg_parse(&msg, frame_payload(&f), frame_payload_len(&f)), 0);
    proto_msg_deinit(&msg);
    assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), PROTO_MAX_DEPTH - 1),
                     -EBADMSG);
    frame_destroy(&f);

    build_nested(&f, PROTO_MAX_DEPTH + 1, arrays, empty);
    assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), PROTO_MAX_DEPTH),
                     -EBADMSG);
    /* A larger limit is capped at PROTO_MAX_DEPTH: the stack is sized for it. */
    assert_int_equal(validate_exact(frame_payload(&f), frame_payload_len(&f), 1000), -EBADMSG);
    assert_int_equal(proto_msg_parse(&msg, frame_payload(&f), frame_payload_len(&f)), -EBADMSG);
    proto_msg_deinit(&msg);
    frame_destroy(&f);
}

static void test_validate_depth(void **state)
{
    for (int arrays = 0; arrays <= 1; arrays++) {
        struct frame f;

        assert_depth_limit(arrays, false);
        /* Far deeper than the limit, and long enough that counts fit. */
        build_nested(&f, 200, arrays, false);
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

/* An empty container is a container: past the limit it is refused like any other. */
static void test_validate_depth_empty(void **state)
{
    for (int arrays = 0; arrays <= 1; arrays++)
        assert_depth_limit(arrays, true);

    /* The 32-bit forms of empty containers count too, as does the top level. */
    assert_int_equal(validate_exact("\x80", 1, 0), -EBADMSG);
    assert_int_equal(validate_exact("\x90", 1, 0), -EBADMSG);
    assert_int_equal(validate_exact("\x80", 1, 1), 0);
    assert_int_equal(validate_exact("\x81\x01\xdd\x00\x00\x00\x00", 7, 1), -EBADMSG);
    assert_int_equal(validate_exact("\x81\x01\xdf\x00\x00\x00\x00", 7, 1), -EBADMSG);
    assert_int_equal(validate_exact("\x81\x01\xdc\x00\x00", 5, 1), -EBADMSG);
    assert_int_equal(validate_exact("\x81\x01\xde\x00\x00", 5, 2), 0);
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

int test_proto_reject_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_rejects),
        cmocka_unit_test(test_validate_depth),
        cmocka_unit_test(test_validate_depth_empty),
        cmocka_unit_test(test_validate_wide_not_deep),
    };

    return cmocka_run_group_tests_name("proto: validator rejections", tests, NULL, NULL);
}
