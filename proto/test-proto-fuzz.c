/*
 * Deterministic fuzzing of the validator and the parser: random bytes and
 * mutations of a real frame. The loops use a fixed seed so that a failure
 * reproduces; run them under ASan to catch out-of-bounds reads.
 */
#include "proto/test-proto-util.h"

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
    uint8_t body[64];
    struct frame f;
    uint8_t buf[512];
    unsigned accepted = 0, parsed = 0;

    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)i;
    frame_init(&f);
    msgpack_pack_map(&f.pk, 8);
    proto_pack_cstr(&f.pk, "op");
    proto_pack_cstr(&f.pk, "put");
    proto_pack_cstr(&f.pk, "id");
    msgpack_pack_uint64(&f.pk, 300);
    proto_pack_cstr(&f.pk, "data");
    proto_pack_bin(&f.pk, body, 40);
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
    proto_pack_str(&f.pk, (const char *)body + 32, 20);
    proto_pack_cstr(&f.pk, "f");
    msgpack_pack_double(&f.pk, 0.5);
    proto_pack_cstr(&f.pk, "e");
    msgpack_pack_ext(&f.pk, 4, 3);
    msgpack_pack_ext_body(&f.pk, body, 4);
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

int test_proto_fuzz_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz_random_bytes),
        cmocka_unit_test(test_fuzz_mutated_frame),
    };

    return cmocka_run_group_tests_name("proto: fuzzing", tests, NULL, NULL);
}
