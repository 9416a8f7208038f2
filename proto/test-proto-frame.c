/* Unit tests of framing: splitting a byte stream into frames, and the length prefix. */
#include "proto/test-proto-util.h"

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

int test_proto_frame_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_split_need_more),
        cmocka_unit_test(test_frame_split_empty),
        cmocka_unit_test(test_frame_split_too_large),
        cmocka_unit_test(test_frame_split_exact_limit),
        cmocka_unit_test(test_frame_split_exact),
        cmocka_unit_test(test_frame_split_back_to_back),
        cmocka_unit_test(test_be32),
    };

    return cmocka_run_group_tests_name("proto: framing", tests, NULL, NULL);
}
