/*
 * Unit tests of the socket-independent codec: request frames must be what
 * PROTOCOL.md says field by field (the daemon's parser would reject a map
 * whose announced size is off), and the decoder must split replies correctly
 * however the bytes arrive, grow only up to one maximal frame, and refuse
 * frames that break the protocol.
 */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client/client.h"

/* --- helpers --- */

/* Splits the frame at sbuf[*off..] and parses it; advances *off past it. */
static void take_frame(struct proto_msg *msg, const msgpack_sbuffer *sbuf, size_t *off)
{
    const uint8_t *payload;
    size_t len, consumed;

    assert_int_equal(proto_frame_split((const uint8_t *)sbuf->data + *off, sbuf->size - *off,
                                       PROTO_MAX_FRAME, &payload, &len, &consumed),
                     0);
    assert_int_equal(proto_msg_parse(msg, payload, len), 0);
    *off += consumed;
}

static void assert_str_field(const msgpack_object *map, const char *key, const char *want)
{
    const char *s;
    size_t len;

    assert_int_equal(proto_get_str(map, key, &s, &len), 0);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(s, want, len);
}

static uint64_t uint_field(const msgpack_object *map, const char *key)
{
    uint64_t v = 0;

    assert_int_equal(proto_get_uint(map, key, &v), 0);
    return v;
}

static bool bool_field(const msgpack_object *map, const char *key)
{
    bool v = false;

    assert_int_equal(proto_get_bool(map, key, &v), 0);
    return v;
}

/* A reply frame as the daemon would build it. */
static void reply_frame(msgpack_sbuffer *sbuf, uint64_t id, bool ok, int more, const char *code)
{
    msgpack_packer pk;
    size_t start;

    msgpack_packer_init(&pk, sbuf, msgpack_sbuffer_write);
    assert_int_equal(proto_frame_begin(sbuf, &start), 0);
    msgpack_pack_map(&pk, 2 + (more >= 0) + (code != NULL));
    proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    proto_pack_cstr(&pk, "ok");
    ok ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    if (more >= 0) {
        proto_pack_cstr(&pk, "more");
        more ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    }
    if (code)
        proto_pack_error(&pk, proto_error_from_name(code, strlen(code)), "because");
    proto_frame_end(sbuf, start);
}

/* Feeds bytes in pieces of `step` and collects every decoded reply's id and last flag. */
static size_t feed(struct client_decoder *dec, const uint8_t *bytes, size_t len, size_t step,
                   uint64_t *ids, bool *lasts, size_t max)
{
    size_t n = 0, off = 0;

    while (off < len) {
        struct client_reply reply;
        uint8_t *space;
        size_t avail, chunk;
        int r;

        assert_int_equal(client_decoder_space(dec, &space, &avail), 0);
        chunk = len - off < step ? len - off : step;
        if (chunk > avail)
            chunk = avail;
        memcpy(space, bytes + off, chunk);
        client_decoder_advance(dec, chunk);
        off += chunk;
        while ((r = client_decoder_next(dec, &reply)) == 0) {
            assert_true(n < max);
            ids[n] = reply.id;
            lasts[n] = reply.last;
            n++;
        }
        assert_int_equal(r, CLIENT_DECODE_NEED_MORE);
    }
    return n;
}

/* --- encoding --- */

static void test_encode_get_delete_status(void **state)
{
    msgpack_sbuffer sbuf;
    struct proto_msg msg = {0};
    size_t off = 0;

    msgpack_sbuffer_init(&sbuf);
    assert_int_equal(client_encode_get(&sbuf, 7, "notes.txt"), 0);
    assert_int_equal(client_encode_delete(&sbuf, 8, "abcdef01"), 0);
    assert_int_equal(client_encode_status(&sbuf, 9), 0);

    take_frame(&msg, &sbuf, &off);
    assert_int_equal(uint_field(msg.map, "id"), 7);
    assert_str_field(msg.map, "op", "get");
    assert_str_field(msg.map, "ref", "notes.txt");
    proto_msg_deinit(&msg);
    take_frame(&msg, &sbuf, &off);
    assert_int_equal(uint_field(msg.map, "id"), 8);
    assert_str_field(msg.map, "op", "delete");
    assert_str_field(msg.map, "ref", "abcdef01");
    proto_msg_deinit(&msg);
    take_frame(&msg, &sbuf, &off);
    assert_str_field(msg.map, "op", "status");
    assert_int_equal(msg.map->via.map.size, 2);
    proto_msg_deinit(&msg);
    assert_int_equal(off, sbuf.size);
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_encode_add_stream(void **state)
{
    static const char *const tags[] = {"a", "bb"};
    static const struct client_meta meta[] = {{"k", "v"}};
    struct client_add_req req = {
        .name = "doc", .tags = tags, .n_tags = 2, .meta = meta, .n_meta = 1};
    msgpack_sbuffer sbuf;
    struct proto_msg msg = {0};
    const uint8_t *data;
    size_t off = 0, len;

    msgpack_sbuffer_init(&sbuf);
    assert_int_equal(client_encode_add(&sbuf, 3, &req, 10, "hello", 5, true), 0);
    assert_int_equal(client_encode_data(&sbuf, 3, "world", 5, false), 0);

    take_frame(&msg, &sbuf, &off);
    assert_str_field(msg.map, "op", "add");
    assert_str_field(msg.map, "name", "doc");
    assert_str_field(msg.map, "mime", "text/plain");
    assert_int_equal(uint_field(msg.map, "size"), 10);
    assert_true(bool_field(msg.map, "more"));
    assert_int_equal(proto_map_get(msg.map, "tags")->via.array.size, 2);
    assert_str_field(proto_map_get(msg.map, "meta"), "k", "v");
    assert_int_equal(proto_get_bin(msg.map, "data", &data, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "hello", 5);
    proto_msg_deinit(&msg);

    take_frame(&msg, &sbuf, &off);
    assert_int_equal(uint_field(msg.map, "id"), 3);
    assert_str_field(msg.map, "op", "data");
    assert_false(bool_field(msg.map, "more"));
    assert_int_equal(proto_get_bin(msg.map, "data", &data, &len), 0);
    assert_memory_equal(data, "world", 5);
    proto_msg_deinit(&msg);
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_encode_add_minimal(void **state)
{
    static const uint8_t binary[] = {0, 1, 2};
    msgpack_sbuffer sbuf;
    struct proto_msg msg = {0};
    size_t off = 0;

    msgpack_sbuffer_init(&sbuf);
    assert_int_equal(client_encode_add(&sbuf, 1, NULL, -1, binary, sizeof(binary), false), 0);
    take_frame(&msg, &sbuf, &off);
    /* id, op, mime, more, data */
    assert_int_equal(msg.map->via.map.size, 5);
    assert_null(proto_map_get(msg.map, "size"));
    assert_null(proto_map_get(msg.map, "name"));
    assert_str_field(msg.map, "mime", "application/octet-stream");
    proto_msg_deinit(&msg);
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_encode_search(void **state)
{
    static const char *const tags[] = {"man"};
    struct client_search_req full = {.query = "socket option",
                                     .limit = 5,
                                     .offset = 10,
                                     .tags = tags,
                                     .n_tags = 1,
                                     .name = "*.2",
                                     .mime = "text/plain",
                                     .has_after = true,
                                     .after = 1700000000,
                                     .has_before = true,
                                     .before = -1,
                                     .fuzzy = true};
    struct client_search_req bare = {.query = "x"};
    msgpack_sbuffer sbuf;
    struct proto_msg msg = {0};
    const msgpack_object *before;
    size_t off = 0;

    msgpack_sbuffer_init(&sbuf);
    assert_int_equal(client_encode_search(&sbuf, 4, &full), 0);
    assert_int_equal(client_encode_search(&sbuf, 5, &bare), 0);

    take_frame(&msg, &sbuf, &off);
    assert_str_field(msg.map, "op", "search");
    assert_str_field(msg.map, "query", "socket option");
    assert_int_equal(uint_field(msg.map, "limit"), 5);
    assert_int_equal(uint_field(msg.map, "offset"), 10);
    assert_str_field(msg.map, "name", "*.2");
    assert_str_field(msg.map, "mime", "text/plain");
    /* A non-negative time is a msgpack unsigned, as PROTOCOL.md asks of integers. */
    assert_int_equal(uint_field(msg.map, "after"), 1700000000);
    before = proto_map_get(msg.map, "before");
    assert_int_equal(before->type, MSGPACK_OBJECT_NEGATIVE_INTEGER);
    assert_true(bool_field(msg.map, "fuzzy"));
    assert_int_equal(proto_map_get(msg.map, "tags")->via.array.size, 1);
    proto_msg_deinit(&msg);

    take_frame(&msg, &sbuf, &off);
    assert_int_equal(msg.map->via.map.size, 3);
    assert_str_field(msg.map, "query", "x");
    proto_msg_deinit(&msg);
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_encode_too_large(void **state)
{
    size_t big = PROTO_MAX_FRAME;
    uint8_t *data = calloc(1, big);
    msgpack_sbuffer sbuf;
    size_t before;

    assert_non_null(data);
    msgpack_sbuffer_init(&sbuf);
    assert_int_equal(client_encode_get(&sbuf, 1, "x"), 0);
    before = sbuf.size;
    assert_int_equal(client_encode_data(&sbuf, 2, data, big, false), -EMSGSIZE);
    /* The buffer keeps only the whole frame it had. */
    assert_int_equal(sbuf.size, before);
    free(data);
    msgpack_sbuffer_destroy(&sbuf);
}

/* --- decoding --- */

static void test_decode_byte_by_byte(void **state)
{
    msgpack_sbuffer sbuf;
    struct client_decoder dec;
    uint64_t ids[8];
    bool lasts[8];
    size_t n;

    msgpack_sbuffer_init(&sbuf);
    reply_frame(&sbuf, 1, true, 1, NULL);  /* a stream frame */
    reply_frame(&sbuf, 2, true, -1, NULL); /* a single reply without `more` */
    reply_frame(&sbuf, 1, true, 0, NULL);  /* the stream's last frame */
    reply_frame(&sbuf, 3, false, -1, "unknown_op");
    for (size_t step = 1; step <= sbuf.size; step += step < 8 ? 1 : 13) {
        client_decoder_init(&dec);
        n = feed(&dec, (const uint8_t *)sbuf.data, sbuf.size, step, ids, lasts, 8);
        assert_int_equal(n, 4);
        assert_int_equal(ids[0], 1);
        assert_false(lasts[0]);
        assert_int_equal(ids[1], 2);
        assert_true(lasts[1]);
        assert_int_equal(ids[2], 1);
        assert_true(lasts[2]);
        assert_int_equal(ids[3], 3);
        assert_true(lasts[3]);
        client_decoder_deinit(&dec);
    }
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_decode_error_code(void **state)
{
    msgpack_sbuffer sbuf;
    struct client_decoder dec;
    struct client_reply reply;
    uint8_t *space;
    size_t avail;

    msgpack_sbuffer_init(&sbuf);
    reply_frame(&sbuf, 9, false, -1, "not_found");
    client_decoder_init(&dec);
    assert_int_equal(client_decoder_space(&dec, &space, &avail), 0);
    assert_true(avail >= sbuf.size);
    memcpy(space, sbuf.data, sbuf.size);
    client_decoder_advance(&dec, sbuf.size);
    assert_int_equal(client_decoder_next(&dec, &reply), 0);
    assert_false(reply.ok);
    assert_true(reply.last);
    assert_int_equal(reply.code, PROTO_E_NOT_FOUND);
    assert_int_equal(reply.code_name_len, strlen("not_found"));
    assert_memory_equal(reply.code_name, "not_found", reply.code_name_len);
    assert_int_equal(client_decoder_next(&dec, &reply), CLIENT_DECODE_NEED_MORE);
    client_decoder_deinit(&dec);
    msgpack_sbuffer_destroy(&sbuf);
}

/* A maximal frame arrives in small reads; the buffer grows to it and no further. */
static void test_decode_large_frame(void **state)
{
    size_t data_len = PROTO_MAX_DATA;
    uint8_t *data = malloc(data_len);
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    struct client_decoder dec;
    uint64_t ids[4];
    bool lasts[4];
    size_t start;

    assert_non_null(data);
    memset(data, 'x', data_len);
    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    for (uint64_t id = 1; id <= 3; id++) {
        assert_int_equal(proto_frame_begin(&sbuf, &start), 0);
        msgpack_pack_map(&pk, 4);
        proto_pack_cstr(&pk, "id");
        msgpack_pack_uint64(&pk, id);
        proto_pack_cstr(&pk, "ok");
        msgpack_pack_true(&pk);
        proto_pack_cstr(&pk, "more");
        msgpack_pack_false(&pk);
        proto_pack_cstr(&pk, "data");
        proto_pack_bin(&pk, data, data_len);
        proto_frame_end(&sbuf, start);
    }
    client_decoder_init(&dec);
    assert_int_equal(feed(&dec, (const uint8_t *)sbuf.data, sbuf.size, 4000, ids, lasts, 4), 3);
    assert_int_equal(ids[2], 3);
    assert_true(dec.cap <= (size_t)PROTO_MAX_FRAME + 4);
    client_decoder_deinit(&dec);
    msgpack_sbuffer_destroy(&sbuf);
    free(data);
}

static void decode_bad(const uint8_t *bytes, size_t len)
{
    struct client_decoder dec;
    struct client_reply reply;
    uint8_t *space;
    size_t avail;

    client_decoder_init(&dec);
    assert_int_equal(client_decoder_space(&dec, &space, &avail), 0);
    memcpy(space, bytes, len);
    client_decoder_advance(&dec, len);
    assert_int_equal(client_decoder_next(&dec, &reply), -EBADMSG);
    client_decoder_deinit(&dec);
}

static void test_decode_bad_frames(void **state)
{
    /* Over the frame limit, zero length, not msgpack, a map without an id. */
    static const uint8_t too_long[] = {0x00, 0x10, 0x00, 0x01, 0x80};
    static const uint8_t empty[] = {0, 0, 0, 0};
    static const uint8_t garbage[] = {0, 0, 0, 1, 0xc1};
    static const uint8_t no_id[] = {0, 0, 0, 4, 0x81, 0xa2, 'o', 'k'};
    static const uint8_t no_id_ok[] = {0, 0, 0, 5, 0x81, 0xa2, 'o', 'k', 0xc3};

    decode_bad(too_long, sizeof(too_long));
    decode_bad(empty, sizeof(empty));
    decode_bad(garbage, sizeof(garbage));
    decode_bad(no_id, sizeof(no_id));
    decode_bad(no_id_ok, sizeof(no_id_ok));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_get_delete_status), cmocka_unit_test(test_encode_add_stream),
        cmocka_unit_test(test_encode_add_minimal),       cmocka_unit_test(test_encode_search),
        cmocka_unit_test(test_encode_too_large),         cmocka_unit_test(test_decode_byte_by_byte),
        cmocka_unit_test(test_decode_error_code),        cmocka_unit_test(test_decode_large_frame),
        cmocka_unit_test(test_decode_bad_frames),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
