#include "daemon/objects.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/sha.h>

#include "compress/compress.h"

/* Wraps a packed msgpack buffer in the object envelope. */
static int seal(msgpack_sbuffer *sbuf, int level, uint8_t **obj, size_t *len)
{
    size_t cap = compress_bound(sbuf->size);
    uint8_t *out = malloc(cap);
    int r;

    if (!out)
        return -ENOMEM;
    r = compress_encode(sbuf->data, sbuf->size, level, out, cap, len);
    if (r < 0) {
        free(out);
        return r;
    }
    *obj = out;
    return 0;
}

static void pack_strings(msgpack_packer *pk, const char *key, char **v, size_t n)
{
    proto_pack_cstr(pk, key);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        proto_pack_cstr(pk, v[i]);
}

int objects_entry_encode(const struct entry *e, int level, uint8_t **obj, size_t *len,
                         uint8_t key_hash[PROTO_HASH_LEN])
{
    char hex[PROTO_HASH_HEX + 1];
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    uint32_t n = 4;
    int r;

    if (!e->is_delete)
        n += 3 + (e->name && e->name[0]) + (e->ntags > 0) + (e->nmeta > 0);
    proto_hex_encode(e->doc, PROTO_HASH_LEN, hex);
    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n);
    proto_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 1);
    proto_pack_cstr(&pk, "op");
    proto_pack_cstr(&pk, e->is_delete ? "delete" : "add");
    proto_pack_cstr(&pk, "doc");
    proto_pack_cstr(&pk, hex);
    proto_pack_cstr(&pk, "time");
    msgpack_pack_uint64(&pk, e->time_ns);
    if (!e->is_delete) {
        proto_pack_cstr(&pk, "size");
        msgpack_pack_uint64(&pk, e->size);
        proto_pack_cstr(&pk, "mime");
        proto_pack_cstr(&pk, e->mime ? e->mime : "application/octet-stream");
        proto_pack_cstr(&pk, "chunks");
        msgpack_pack_array(&pk, e->nchunks);
        for (size_t i = 0; i < e->nchunks; i++) {
            msgpack_pack_array(&pk, 2);
            proto_pack_bin(&pk, e->chunks[i].hash, PROTO_HASH_LEN);
            msgpack_pack_uint32(&pk, e->chunks[i].size);
        }
        if (e->name && e->name[0]) {
            proto_pack_cstr(&pk, "name");
            proto_pack_cstr(&pk, e->name);
        }
        if (e->ntags > 0)
            pack_strings(&pk, "tags", e->tags, e->ntags);
        if (e->nmeta > 0) {
            proto_pack_cstr(&pk, "meta");
            msgpack_pack_map(&pk, e->nmeta);
            for (size_t i = 0; i < e->nmeta; i++) {
                proto_pack_cstr(&pk, e->meta_keys[i]);
                proto_pack_cstr(&pk, e->meta_values[i]);
            }
        }
    }
    SHA256((const uint8_t *)sbuf.data, sbuf.size, key_hash);
    r = seal(&sbuf, level, obj, len);
    msgpack_sbuffer_destroy(&sbuf);
    return r;
}

/* Opens the envelope and parses the msgpack map inside; *raw must be freed. */
static int unseal(const uint8_t *obj, size_t len, uint8_t **raw, struct proto_msg *msg)
{
    struct compress_header hdr;
    size_t raw_len;

    *raw = NULL;
    if (compress_header_parse(obj, len, &hdr) != 0 || hdr.raw_size > OBJECTS_MAX_META_OBJECT)
        return -EBADMSG;
    *raw = malloc(hdr.raw_size ? hdr.raw_size : 1);
    if (!*raw)
        return -ENOMEM;
    if (compress_decode(obj, len, OBJECTS_MAX_META_OBJECT, *raw, hdr.raw_size, &raw_len) != 0 ||
        proto_msg_parse(msg, *raw, raw_len) < 0) {
        free(*raw);
        *raw = NULL;
        return -EBADMSG;
    }
    return 0;
}

static char *dup_str(const msgpack_object *o)
{
    if (!o || o->type != MSGPACK_OBJECT_STR || memchr(o->via.str.ptr, '\0', o->via.str.size))
        return NULL;
    return strndup(o->via.str.ptr, o->via.str.size);
}

static int get_hash(const msgpack_object *map, const char *key, uint8_t hash[PROTO_HASH_LEN])
{
    const char *hex;
    size_t len;
    if (proto_get_str(map, key, &hex, &len) != 0)
        return -EBADMSG;
    return proto_hex_decode(hex, len, hash, PROTO_HASH_LEN) < 0 ? -EBADMSG : 0;
}

/* The [[id, size], ...] list of an add entry. */
static int get_chunks(const msgpack_object *chunks, struct entry *e)
{
    if (!chunks || chunks->type != MSGPACK_OBJECT_ARRAY)
        return -EBADMSG;
    e->chunks = calloc(chunks->via.array.size ? chunks->via.array.size : 1, sizeof(*e->chunks));
    if (!e->chunks)
        return -ENOMEM;
    for (uint32_t i = 0; i < chunks->via.array.size; i++) {
        const msgpack_object *c = &chunks->via.array.ptr[i];
        if (c->type != MSGPACK_OBJECT_ARRAY || c->via.array.size != 2 ||
            c->via.array.ptr[0].type != MSGPACK_OBJECT_BIN ||
            c->via.array.ptr[0].via.bin.size != PROTO_HASH_LEN ||
            c->via.array.ptr[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            c->via.array.ptr[1].via.u64 > UINT32_MAX)
            return -EBADMSG;
        memcpy(e->chunks[i].hash, c->via.array.ptr[0].via.bin.ptr, PROTO_HASH_LEN);
        e->chunks[i].size = (uint32_t)c->via.array.ptr[1].via.u64;
        e->nchunks++;
    }
    return 0;
}

static int get_strings(const msgpack_object *o, char ***out, size_t *n)
{
    if (!o)
        return 0;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return -EBADMSG;
    *out = calloc(o->via.array.size + 1, sizeof(char *));
    if (!*out)
        return -ENOMEM;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        if (!((*out)[i] = dup_str(&o->via.array.ptr[i])))
            return -EBADMSG;
        (*n)++;
    }
    return 0;
}

int objects_entry_decode(const uint8_t *obj, size_t len, struct entry *e)
{
    struct proto_msg msg;
    const msgpack_object *op, *meta;
    uint8_t *raw;
    int r = unseal(obj, len, &raw, &msg);

    memset(e, 0, sizeof(*e));
    if (r < 0)
        return r;
    op = proto_map_get(msg.map, "op");
    if (!op || get_hash(msg.map, "doc", e->doc) < 0 ||
        proto_get_uint(msg.map, "time", &e->time_ns) != 0) {
        r = -EBADMSG;
        goto out;
    }
    if (proto_str_eq(op, "delete")) {
        e->is_delete = true;
        goto out;
    }
    if (!proto_str_eq(op, "add") || !(e->mime = dup_str(proto_map_get(msg.map, "mime"))) ||
        proto_get_uint(msg.map, "size", &e->size) != 0) {
        r = -EBADMSG;
        goto out;
    }
    if ((r = get_chunks(proto_map_get(msg.map, "chunks"), e)) < 0)
        goto out;
    if (proto_map_get(msg.map, "name") && !(e->name = dup_str(proto_map_get(msg.map, "name")))) {
        r = -EBADMSG;
        goto out;
    }
    if ((r = get_strings(proto_map_get(msg.map, "tags"), &e->tags, &e->ntags)) < 0)
        goto out;
    meta = proto_map_get(msg.map, "meta");
    if (meta) {
        if (meta->type != MSGPACK_OBJECT_MAP) {
            r = -EBADMSG;
            goto out;
        }
        e->meta_keys = calloc(meta->via.map.size + 1, sizeof(char *));
        e->meta_values = calloc(meta->via.map.size + 1, sizeof(char *));
        if (!e->meta_keys || !e->meta_values) {
            r = -ENOMEM;
            goto out;
        }
        for (uint32_t i = 0; i < meta->via.map.size; i++) {
            e->meta_keys[i] = dup_str(&meta->via.map.ptr[i].key);
            e->meta_values[i] = dup_str(&meta->via.map.ptr[i].val);
            e->nmeta++;
            if (!e->meta_keys[i] || !e->meta_values[i]) {
                r = -EBADMSG;
                goto out;
            }
        }
    }
out:
    proto_msg_deinit(&msg);
    free(raw);
    if (r < 0)
        objects_entry_clear(e);
    return r;
}

static void free_strings(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i <= n; i++)
        free(v[i]);
    free(v);
}

void objects_entry_clear(struct entry *e)
{
    free(e->mime);
    free(e->name);
    free(e->chunks);
    free_strings(e->tags, e->ntags);
    free_strings(e->meta_keys, e->nmeta);
    free_strings(e->meta_values, e->nmeta);
    memset(e, 0, sizeof(*e));
}
