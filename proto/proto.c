#include "proto/proto.h"

#include <errno.h>
#include <string.h>

static const char *const error_names[PROTO_E_COUNT_] = {
    [PROTO_OK] = "ok",
    [PROTO_E_BAD_FRAME] = "bad_frame",
    [PROTO_E_TOO_LARGE] = "too_large",
    [PROTO_E_BAD_REQUEST] = "bad_request",
    [PROTO_E_UNKNOWN_OP] = "unknown_op",
    [PROTO_E_UNSUPPORTED_VERSION] = "unsupported_version",
    [PROTO_E_NOT_FOUND] = "not_found",
    [PROTO_E_AMBIGUOUS] = "ambiguous",
    [PROTO_E_INTEGRITY] = "integrity",
    [PROTO_E_BACKEND_UNAVAILABLE] = "backend_unavailable",
    [PROTO_E_STORAGE] = "storage_error",
    [PROTO_E_BUSY] = "busy",
    [PROTO_E_SHUTTING_DOWN] = "shutting_down",
    [PROTO_E_READ_ONLY] = "read_only",
    [PROTO_E_INTERNAL] = "internal",
};

const char *proto_error_name(enum proto_error code)
{
    if ((unsigned)code >= PROTO_E_COUNT_)
        return "internal";
    return error_names[code];
}

enum proto_error proto_error_from_name(const char *name, size_t len)
{
    for (unsigned i = 0; i < PROTO_E_COUNT_; i++) {
        if (strlen(error_names[i]) == len && memcmp(error_names[i], name, len) == 0)
            return (enum proto_error)i;
    }
    return PROTO_E_INTERNAL;
}

int proto_frame_split(const uint8_t *buf, size_t len, size_t max_frame, const uint8_t **payload,
                      size_t *payload_len, size_t *consumed)
{
    if (len < 4)
        return PROTO_FRAME_NEED_MORE;
    uint32_t n = proto_be32_read(buf);
    *payload_len = n;
    if (n == 0)
        return PROTO_FRAME_EMPTY;
    if (n > max_frame)
        return PROTO_FRAME_TOO_LARGE;
    if (len - 4 < n)
        return PROTO_FRAME_NEED_MORE;
    *payload = buf + 4;
    *consumed = (size_t)n + 4;
    return 0;
}

/* Reads a big-endian unsigned of `width` bytes; the caller checked bounds. */
static uint64_t read_be(const uint8_t *p, unsigned width)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < width; i++)
        v = (v << 8) | p[i];
    return v;
}

/*
 * Classifies the value header at p[0..avail). On success stores how many
 * header bytes it has, how many payload bytes follow it (`skip`), whether it
 * is a map or an array (`container`, true for an empty one too) and how many
 * child values it contains (`children`, maps count keys and values).
 */
static int header_info(const uint8_t *p, size_t avail, size_t *hdr, uint64_t *skip, bool *container,
                       uint64_t *children)
{
    uint8_t b = p[0];
    unsigned lw = 0; /* width of a length field after the type byte */
    *hdr = 1;
    *skip = 0;
    *container = (b >= 0x80 && b <= 0x9f) || (b >= 0xdc && b <= 0xdf);
    *children = 0;

    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 0;
    if (b >= 0x80 && b <= 0x8f) {
        *children = 2u * (b & 0x0f);
        return 0;
    }
    if (b >= 0x90 && b <= 0x9f) {
        *children = b & 0x0f;
        return 0;
    }
    if (b >= 0xa0 && b <= 0xbf) {
        *skip = b & 0x1f;
        return 0;
    }
    switch (b) {
    case 0xc4:
    case 0xd9:
        lw = 1;
        break; /* bin8, str8 */
    case 0xc5:
    case 0xda:
        lw = 2;
        break;
    case 0xc6:
    case 0xdb:
        lw = 4;
        break;
    case 0xc7:
        lw = 1;
        *skip = 1;
        break; /* ext8: length + type byte */
    case 0xc8:
        lw = 2;
        *skip = 1;
        break;
    case 0xc9:
        lw = 4;
        *skip = 1;
        break;
    case 0xca:
        *skip = 4;
        return 0;
    case 0xcb:
        *skip = 8;
        return 0;
    case 0xcc:
    case 0xd0:
        *skip = 1;
        return 0;
    case 0xcd:
    case 0xd1:
        *skip = 2;
        return 0;
    case 0xce:
    case 0xd2:
        *skip = 4;
        return 0;
    case 0xcf:
    case 0xd3:
        *skip = 8;
        return 0;
    case 0xd4:
        *skip = 2;
        return 0;
    case 0xd5:
        *skip = 3;
        return 0;
    case 0xd6:
        *skip = 5;
        return 0;
    case 0xd7:
        *skip = 9;
        return 0;
    case 0xd8:
        *skip = 17;
        return 0;
    case 0xdc:
    case 0xdd:
    case 0xde:
    case 0xdf: {
        unsigned w = (b == 0xdc || b == 0xde) ? 2 : 4;
        if (avail < 1 + (size_t)w)
            return -EBADMSG;
        uint64_t n = read_be(p + 1, w);
        *hdr = 1 + w;
        *children = (b >= 0xde) ? 2 * n : n;
        return 0;
    }
    default: /* 0xc1 is never used */
        return -EBADMSG;
    }
    if (avail < 1 + (size_t)lw)
        return -EBADMSG;
    *hdr = 1 + lw;
    *skip += read_be(p + 1, lw);
    return 0;
}

int proto_validate(const uint8_t *buf, size_t len, unsigned max_depth)
{
    uint64_t pending[PROTO_MAX_DEPTH + 2];
    unsigned depth = 0;
    size_t pos = 0;

    if (max_depth > PROTO_MAX_DEPTH)
        max_depth = PROTO_MAX_DEPTH;
    pending[0] = 1;
    for (;;) {
        if (pending[depth] == 0) {
            if (depth == 0)
                break;
            depth--;
            continue;
        }
        pending[depth]--;
        if (pos >= len)
            return -EBADMSG;
        size_t hdr;
        uint64_t skip, children;
        bool container;
        if (header_info(buf + pos, len - pos, &hdr, &skip, &container, &children) < 0)
            return -EBADMSG;
        pos += hdr;
        if (skip > len - pos)
            return -EBADMSG;
        pos += (size_t)skip;
        /* An empty map or array is a level too: the limit is on containers. */
        if (container && depth + 1 > max_depth)
            return -EBADMSG;
        if (children > 0) {
            /* Every child takes at least one byte. */
            if (children > len - pos)
                return -EBADMSG;
            pending[++depth] = children;
        }
    }
    return pos == len ? 0 : -EBADMSG;
}

int proto_msg_parse(struct proto_msg *msg, const uint8_t *payload, size_t len)
{
    size_t off = 0;

    msgpack_unpacked_init(&msg->unpacked);
    msg->map = NULL;
    if (proto_validate(payload, len, PROTO_MAX_DEPTH) < 0)
        return -EBADMSG;
    if (msgpack_unpack_next(&msg->unpacked, (const char *)payload, len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != len || msg->unpacked.data.type != MSGPACK_OBJECT_MAP) {
        msgpack_unpacked_destroy(&msg->unpacked);
        msgpack_unpacked_init(&msg->unpacked);
        return -EBADMSG;
    }
    /* Keys are field names; a map keyed by anything else is not a message. */
    for (uint32_t i = 0; i < msg->unpacked.data.via.map.size; i++) {
        if (msg->unpacked.data.via.map.ptr[i].key.type != MSGPACK_OBJECT_STR) {
            msgpack_unpacked_destroy(&msg->unpacked);
            msgpack_unpacked_init(&msg->unpacked);
            return -EBADMSG;
        }
    }
    msg->map = &msg->unpacked.data;
    return 0;
}

void proto_msg_deinit(struct proto_msg *msg)
{
    msgpack_unpacked_destroy(&msg->unpacked);
    msg->map = NULL;
}

bool proto_str_eq(const msgpack_object *obj, const char *s)
{
    size_t n = strlen(s);
    return obj->type == MSGPACK_OBJECT_STR && obj->via.str.size == n &&
           (n == 0 || memcmp(obj->via.str.ptr, s, n) == 0);
}

const msgpack_object *proto_map_get(const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        if (proto_str_eq(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

int proto_get_uint(const msgpack_object *map, const char *key, uint64_t *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return PROTO_MISSING;
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -EINVAL;
    *out = o->via.u64;
    return 0;
}

int proto_get_int(const msgpack_object *map, const char *key, int64_t *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return PROTO_MISSING;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        *out = (int64_t)o->via.u64;
    else
        return -EINVAL;
    return 0;
}

int proto_get_bool(const msgpack_object *map, const char *key, bool *out)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return PROTO_MISSING;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return -EINVAL;
    *out = o->via.boolean;
    return 0;
}

int proto_get_str(const msgpack_object *map, const char *key, const char **ptr, size_t *len)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return PROTO_MISSING;
    if (o->type != MSGPACK_OBJECT_STR)
        return -EINVAL;
    *ptr = o->via.str.ptr;
    *len = o->via.str.size;
    return 0;
}

int proto_get_bin(const msgpack_object *map, const char *key, const uint8_t **ptr, size_t *len)
{
    const msgpack_object *o = proto_map_get(map, key);
    if (!o)
        return PROTO_MISSING;
    if (o->type != MSGPACK_OBJECT_BIN)
        return -EINVAL;
    *ptr = (const uint8_t *)o->via.bin.ptr;
    *len = o->via.bin.size;
    return 0;
}

int proto_frame_begin(msgpack_sbuffer *sbuf, size_t *start)
{
    static const char zero[4];
    *start = sbuf->size;
    return msgpack_sbuffer_write(sbuf, zero, sizeof(zero));
}

void proto_frame_end(msgpack_sbuffer *sbuf, size_t start)
{
    proto_be32_write((uint8_t *)sbuf->data + start, (uint32_t)(sbuf->size - start - 4));
}

void proto_pack_str(msgpack_packer *pk, const char *s, size_t len)
{
    msgpack_pack_str(pk, len);
    msgpack_pack_str_body(pk, s, len);
}

void proto_pack_cstr(msgpack_packer *pk, const char *s)
{
    proto_pack_str(pk, s, strlen(s));
}

void proto_pack_bool(msgpack_packer *pk, bool b)
{
    if (b)
        msgpack_pack_true(pk);
    else
        msgpack_pack_false(pk);
}

void proto_pack_bin(msgpack_packer *pk, const void *data, size_t len)
{
    msgpack_pack_bin(pk, len);
    msgpack_pack_bin_body(pk, data, len);
}

void proto_pack_error(msgpack_packer *pk, enum proto_error code, const char *message)
{
    proto_pack_cstr(pk, "error");
    msgpack_pack_map(pk, 2);
    proto_pack_cstr(pk, "code");
    proto_pack_cstr(pk, proto_error_name(code));
    proto_pack_cstr(pk, "message");
    proto_pack_cstr(pk, message ? message : proto_error_name(code));
}

void proto_hex_encode(const uint8_t *bin, size_t len, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        hex[2 * i] = digits[bin[i] >> 4];
        hex[2 * i + 1] = digits[bin[i] & 15];
    }
    hex[2 * len] = '\0';
}

int proto_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool proto_is_hex(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (proto_hex_value(s[i]) < 0)
            return false;
    }
    return true;
}

bool proto_file_mode_valid(uint64_t mode)
{
    uint64_t type = mode & ~(uint64_t)07777;
    return type == 0100000 || type == 0040000 || type == 0120000;
}

int proto_hex_decode(const char *hex, size_t hexlen, uint8_t *bin, size_t len)
{
    if (hexlen != 2 * len || !proto_is_hex(hex, hexlen))
        return -EINVAL;
    for (size_t i = 0; i < len; i++)
        bin[i] = (uint8_t)(proto_hex_value(hex[2 * i]) << 4 | proto_hex_value(hex[2 * i + 1]));
    return 0;
}
