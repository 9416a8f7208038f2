/*
 * The wire: a stream of length-prefixed frames as cairnd reads them from a
 * client (and the CLI from cairnd), each payload checked by proto_validate,
 * unpacked into a map by proto_msg_parse, and read through the typed field
 * getters every op uses.
 */
#include "proto/proto.h"
#include "tests/fuzz/fuzz.h"

static const char *const keys[] = {"op",      "id",      "ref",     "name",     "tags",   "meta",
                                   "mime",    "data",    "more",    "limit",    "offset", "length",
                                   "query",   "after",   "client",  "versions", "error",  "code",
                                   "message", "hash",    "size",    "items",    "cursor", "prefix",
                                   "names",   "unnamed", "dry_run", "deleted"};

static void read_fields(const msgpack_object *map)
{
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *s;
        const uint8_t *b;
        size_t len;
        uint64_t u;
        bool flag;
        const msgpack_object *o = proto_map_get(map, keys[i]);

        (void)proto_get_uint(map, keys[i], &u);
        (void)proto_get_bool(map, keys[i], &flag);
        if (proto_get_str(map, keys[i], &s, &len) == 0) {
            (void)proto_str_eq(o, "add");
            if (proto_is_hex(s, len) && len == PROTO_HASH_HEX) {
                uint8_t bin[PROTO_HASH_LEN];
                (void)proto_hex_decode(s, len, bin, sizeof(bin));
            }
            (void)proto_error_from_name(s, len);
        }
        (void)proto_get_bin(map, keys[i], &b, &len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    while (size > 0) {
        const uint8_t *payload;
        size_t payload_len, consumed;
        struct proto_msg msg;

        if (proto_frame_split(data, size, PROTO_MAX_FRAME, &payload, &payload_len, &consumed) != 0)
            break;
        if (proto_validate(payload, payload_len, PROTO_MAX_DEPTH) == 0 &&
            proto_msg_parse(&msg, payload, payload_len) == 0) {
            read_fields(msg.map);
            proto_msg_deinit(&msg);
        }
        data += consumed;
        size -= consumed;
    }
    return 0;
}
