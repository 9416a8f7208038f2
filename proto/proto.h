#pragma once

/*
 * The cairn wire protocol: framing, the error-code vocabulary, and small
 * helpers to read and build msgpack maps. A frame is a 4-byte big-endian
 * payload length followed by exactly one msgpack map; proto/PROTOCOL.md is
 * the specification. Both the daemon and the client library use this module,
 * so the rules (limits, error names, validation) live in exactly one place.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define PROTO_VERSION 1
#define PROTO_MIN_VERSION 1

/* Largest accepted frame payload (bytes after the length prefix). */
#define PROTO_MAX_FRAME (1024u * 1024u)
/* Largest `data` field a sender puts in one frame; leaves room for the map. */
#define PROTO_MAX_DATA (256u * 1024u)
/* Deepest msgpack nesting accepted in a frame. */
#define PROTO_MAX_DEPTH 8

/* Field limits, enforced by the daemon and documented in PROTOCOL.md. */
#define PROTO_MAX_NAME 4096
#define PROTO_MAX_REF 4096
#define PROTO_MAX_TAG 256
#define PROTO_MAX_TAGS 64
#define PROTO_MAX_META 64
#define PROTO_MAX_META_KEY 256
#define PROTO_MAX_META_VALUE 4096
#define PROTO_MAX_MIME 255
#define PROTO_MAX_QUERY (64u * 1024)

/*
 * Error codes carried in replies as `error.code` strings. The numeric values
 * are internal; only the names are part of the protocol.
 */
enum proto_error {
    PROTO_OK = 0,
    PROTO_E_BAD_FRAME,
    PROTO_E_TOO_LARGE,
    PROTO_E_BAD_REQUEST,
    PROTO_E_UNKNOWN_OP,
    PROTO_E_UNSUPPORTED_VERSION,
    PROTO_E_NOT_FOUND,
    PROTO_E_AMBIGUOUS,
    PROTO_E_INTEGRITY,
    PROTO_E_BACKEND_UNAVAILABLE,
    PROTO_E_STORAGE,
    PROTO_E_BUSY,
    PROTO_E_SHUTTING_DOWN,
    PROTO_E_READ_ONLY,
    PROTO_E_INTERNAL,
    PROTO_E_COUNT_
};

const char *proto_error_name(enum proto_error code);
/* Returns PROTO_E_INTERNAL for names it does not know. */
enum proto_error proto_error_from_name(const char *name, size_t len);

/* Results of proto_frame_split(). */
enum {
    PROTO_FRAME_NEED_MORE = 1, /* not a whole frame yet */
    PROTO_FRAME_TOO_LARGE = 2, /* length prefix over the limit */
    PROTO_FRAME_EMPTY = 3,     /* zero-length frame */
};

/*
 * Looks for one complete frame at the start of `buf`. On 0 stores the payload
 * span in *payload and *payload_len, and the bytes consumed (prefix included) in
 * *consumed. Otherwise returns one of PROTO_FRAME_*; *payload_len then holds
 * the announced length when it is known.
 */
int proto_frame_split(const uint8_t *buf, size_t len, size_t max_frame, const uint8_t **payload,
                      size_t *payload_len, size_t *consumed);

/*
 * Checks that `buf` holds exactly one well-formed msgpack value whose
 * containers nest at most `max_depth` deep and whose announced element counts
 * fit in the remaining bytes. Run before msgpack_unpack_next() so that hostile
 * counts never turn into huge allocations. Returns 0 or -EBADMSG.
 */
int proto_validate(const uint8_t *buf, size_t len, unsigned max_depth);

/*
 * A decoded frame: validated, unpacked, and known to be a map. Strings and
 * binaries point into the frame buffer, which must outlive the message.
 */
struct proto_msg {
    msgpack_unpacked unpacked;
    const msgpack_object *map;
};

/* 0, or -EBADMSG when the payload is not exactly one msgpack map with string keys. */
int proto_msg_parse(struct proto_msg *msg, const uint8_t *payload, size_t len);
void proto_msg_deinit(struct proto_msg *msg);

/* Field access on a map object; NULL when the key is absent. */
const msgpack_object *proto_map_get(const msgpack_object *map, const char *key);

/*
 * Typed getters. Each returns 0 and fills the output when the field is present
 * with the right type, PROTO_MISSING when it is absent (outputs untouched),
 * and -EINVAL when it is present with the wrong type.
 */
#define PROTO_MISSING 1
int proto_get_uint(const msgpack_object *map, const char *key, uint64_t *out);
/* A signed integer: a negative one, or a positive one up to INT64_MAX. */
int proto_get_int(const msgpack_object *map, const char *key, int64_t *out);
int proto_get_bool(const msgpack_object *map, const char *key, bool *out);
int proto_get_str(const msgpack_object *map, const char *key, const char **ptr, size_t *len);
int proto_get_bin(const msgpack_object *map, const char *key, const uint8_t **ptr, size_t *len);

/* True when the object is a str equal to `s`. */
bool proto_str_eq(const msgpack_object *obj, const char *s);

/*
 * Frame building on a msgpack_sbuffer: proto_frame_begin() reserves the length
 * prefix, the caller packs one map, proto_frame_end() patches the length.
 * Several frames may be built back to back in one buffer.
 */
int proto_frame_begin(msgpack_sbuffer *sbuf, size_t *start);
void proto_frame_end(msgpack_sbuffer *sbuf, size_t start);

void proto_pack_cstr(msgpack_packer *pk, const char *s);
void proto_pack_bool(msgpack_packer *pk, bool b);
void proto_pack_str(msgpack_packer *pk, const char *s, size_t len);
void proto_pack_bin(msgpack_packer *pk, const void *data, size_t len);
/* Packs `error: {code, message}`; the caller counts it as one map entry. */
void proto_pack_error(msgpack_packer *pk, enum proto_error code, const char *message);

static inline uint32_t proto_be32_read(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void proto_be32_write(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Hex helpers for SHA-256 ids (64 lowercase hex digits). */
#define PROTO_HASH_LEN 32
#define PROTO_HASH_HEX 64
void proto_hex_encode(const uint8_t *bin, size_t len, char *hex /* 2*len+1 */);
/* 0 when `hex` is exactly 2*len lowercase or uppercase hex digits. */
int proto_hex_decode(const char *hex, size_t hexlen, uint8_t *bin, size_t len);
bool proto_is_hex(const char *s, size_t len);
/*
 * A file mode an add may give its name (PROTOCOL.md `add`, `mode`): the type
 * bits of a regular file (0100000), a directory (0040000) or a symbolic link
 * (0120000), with permission bits up to 07777 and nothing else.
 */
bool proto_file_mode_valid(uint64_t mode);
/* The value of one hex digit (either case), or -1. */
int proto_hex_value(char c);
