/*
 * Unit tests of message parsing, the typed getters, error replies and the
 * error-name vocabulary.
 */
#include "proto/test-proto-util.h"

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

int test_proto_msg_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_msg_parse_rejects_non_map),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_str_eq),
        cmocka_unit_test(test_empty_key_and_values),
        cmocka_unit_test(test_pack_error),
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_error_from_unknown_name),
    };

    return cmocka_run_group_tests_name("proto: messages and error names", tests, NULL, NULL);
}
