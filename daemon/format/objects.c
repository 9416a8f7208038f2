#include "daemon/format/objects.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/format/manifest.h"

#define ENTRY_VERSION 2

static void pack_strings(msgpack_packer *pk, const char *key, char **v, size_t n)
{
    proto_pack_cstr(pk, key);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        proto_pack_cstr(pk, v[i]);
}

int objects_entry_encode(const struct entry *e, uint8_t **raw, size_t *len)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    static const char *const ops[] = {"add", "delete", "unname", "void", "edit"};
    uint32_t n = 4;

    if (e->op == ENTRY_ADD)
        n += 7 + (e->name && e->name[0]) * (1 + 2 * (e->fmode != 0)) + (e->ntags > 0) +
             (e->nmeta > 0);
    else if (e->op == ENTRY_DELETE)
        n += e->if_unnamed;
    else if (e->op == ENTRY_VOID)
        ;
    else if (e->op == ENTRY_EDIT)
        n += (e->ntags > 0) + (e->nuntags > 0) + (e->nmeta > 0) + (e->nunmeta > 0);
    else if (e->op == ENTRY_UNNAME && e->name && e->name[0])
        n++;
    else
        return -EINVAL; /* an unname entry without a name, or no op */
    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n);
    proto_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, ENTRY_VERSION);
    proto_pack_cstr(&pk, "op");
    proto_pack_cstr(&pk, ops[e->op]);
    proto_pack_cstr(&pk, "doc");
    proto_pack_bin(&pk, e->doc, PROTO_HASH_LEN);
    proto_pack_cstr(&pk, "time");
    msgpack_pack_uint64(&pk, e->time_ns);
    if (e->op == ENTRY_DELETE && e->if_unnamed) {
        proto_pack_cstr(&pk, "if_unnamed");
        msgpack_pack_true(&pk);
    } else if (e->op == ENTRY_UNNAME) {
        proto_pack_cstr(&pk, "name");
        proto_pack_cstr(&pk, e->name);
    } else if (e->op == ENTRY_ADD) {
        proto_pack_cstr(&pk, "size");
        msgpack_pack_uint64(&pk, e->size);
        proto_pack_cstr(&pk, "mime");
        proto_pack_cstr(&pk, e->mime ? e->mime : "application/octet-stream");
        proto_pack_cstr(&pk, "text");
        proto_pack_bool(&pk, e->text);
        proto_pack_cstr(&pk, "chunks");
        msgpack_pack_uint64(&pk, e->nchunks);
        proto_pack_cstr(&pk, "stored");
        msgpack_pack_uint64(&pk, e->stored);
        proto_pack_cstr(&pk, "depth");
        msgpack_pack_uint32(&pk, e->depth);
        proto_pack_cstr(&pk, "root");
        proto_pack_bin(&pk, e->root ? e->root : (const uint8_t *)"", e->root_len);
        if (e->name && e->name[0]) {
            proto_pack_cstr(&pk, "name");
            proto_pack_cstr(&pk, e->name);
            if (e->fmode) {
                proto_pack_cstr(&pk, "fmode");
                msgpack_pack_uint32(&pk, e->fmode);
                proto_pack_cstr(&pk, "fmtime");
                msgpack_pack_int64(&pk, e->fmtime);
            }
        }
    }
    if (e->op == ENTRY_EDIT) {
        if (e->nuntags > 0)
            pack_strings(&pk, "untags", e->untags, e->nuntags);
        if (e->nunmeta > 0)
            pack_strings(&pk, "unmeta", e->unmeta, e->nunmeta);
    }
    if (e->op == ENTRY_ADD || e->op == ENTRY_EDIT) {
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
    if (!sbuf.data) {
        msgpack_sbuffer_destroy(&sbuf);
        return -ENOMEM;
    }
    *raw = (uint8_t *)sbuf.data; /* msgpack's sbuffer is malloc'd: handed over */
    *len = sbuf.size;
    return 0;
}

static char *dup_str(const msgpack_object *o)
{
    if (!o || o->type != MSGPACK_OBJECT_STR || memchr(o->via.str.ptr, '\0', o->via.str.size))
        return NULL;
    return strndup(o->via.str.ptr, o->via.str.size);
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

static int get_meta(const msgpack_object *meta, struct entry *e)
{
    if (!meta)
        return 0;
    if (meta->type != MSGPACK_OBJECT_MAP)
        return -EBADMSG;
    e->meta_keys = calloc(meta->via.map.size + 1, sizeof(char *));
    e->meta_values = calloc(meta->via.map.size + 1, sizeof(char *));
    if (!e->meta_keys || !e->meta_values)
        return -ENOMEM;
    for (uint32_t i = 0; i < meta->via.map.size; i++) {
        e->meta_keys[i] = dup_str(&meta->via.map.ptr[i].key);
        e->meta_values[i] = dup_str(&meta->via.map.ptr[i].val);
        e->nmeta++;
        if (!e->meta_keys[i] || !e->meta_values[i])
            return -EBADMSG;
    }
    return 0;
}

/* The add-only fields: sizes, manifest root, name, tags and metadata. */
static int decode_add(const msgpack_object *map, struct entry *e)
{
    const uint8_t *root;
    uint64_t depth;
    size_t root_len;
    int r;

    if (!(e->mime = dup_str(proto_map_get(map, "mime"))) ||
        proto_get_uint(map, "size", &e->size) != 0 ||
        proto_get_uint(map, "chunks", &e->nchunks) != 0 ||
        proto_get_uint(map, "stored", &e->stored) != 0 ||
        proto_get_uint(map, "depth", &depth) != 0 || proto_get_bool(map, "text", &e->text) != 0 ||
        proto_get_bin(map, "root", &root, &root_len) != 0 || depth > MANIFEST_MAX_DEPTH ||
        !manifest_root_valid(root, root_len, (unsigned)depth))
        return -EBADMSG;
    e->depth = (unsigned)depth;
    e->root_len = root_len;
    if (!(e->root = malloc(root_len ? root_len : 1)))
        return -ENOMEM;
    if (root_len)
        memcpy(e->root, root, root_len);
    if (proto_map_get(map, "name") && !(e->name = dup_str(proto_map_get(map, "name"))))
        return -EBADMSG;
    if (proto_map_get(map, "fmode")) {
        uint64_t mode;
        if (proto_get_uint(map, "fmode", &mode) != 0 ||
            proto_get_int(map, "fmtime", &e->fmtime) != 0)
            return -EBADMSG;
        if (e->name && e->name[0] && proto_file_mode_valid(mode))
            e->fmode = (uint32_t)mode;
        else
            e->fmtime = 0;
    }
    if ((r = get_strings(proto_map_get(map, "tags"), &e->tags, &e->ntags)) < 0)
        return r;
    return get_meta(proto_map_get(map, "meta"), e);
}

int objects_entry_decode(const uint8_t *raw, size_t len, struct entry *e)
{
    struct proto_msg msg;
    const msgpack_object *op;
    const uint8_t *doc;
    size_t doc_len;
    uint64_t version;
    int r;

    memset(e, 0, sizeof(*e));
    if (len > OBJECTS_MAX_ENTRY || proto_msg_parse(&msg, raw, len) < 0)
        return -EBADMSG;
    op = proto_map_get(msg.map, "op");
    if (proto_get_uint(msg.map, "v", &version) != 0 || version != ENTRY_VERSION || !op ||
        proto_get_bin(msg.map, "doc", &doc, &doc_len) != 0 || doc_len != PROTO_HASH_LEN ||
        proto_get_uint(msg.map, "time", &e->time_ns) != 0) {
        r = -EBADMSG;
        goto out;
    }
    memcpy(e->doc, doc, PROTO_HASH_LEN);
    if (proto_str_eq(op, "delete")) {
        e->op = ENTRY_DELETE;
        r = proto_map_get(msg.map, "if_unnamed") &&
                    proto_get_bool(msg.map, "if_unnamed", &e->if_unnamed) != 0
                ? -EBADMSG
                : 0;
    } else if (proto_str_eq(op, "unname")) {
        e->op = ENTRY_UNNAME;
        e->name = dup_str(proto_map_get(msg.map, "name"));
        r = e->name && e->name[0] ? 0 : -EBADMSG;
    } else if (proto_str_eq(op, "add")) {
        r = decode_add(msg.map, e);
    } else if (proto_str_eq(op, "void")) {
        e->op = ENTRY_VOID;
        r = 0;
    } else if (proto_str_eq(op, "edit")) {
        e->op = ENTRY_EDIT;
        if ((r = get_strings(proto_map_get(msg.map, "tags"), &e->tags, &e->ntags)) == 0 &&
            (r = get_strings(proto_map_get(msg.map, "untags"), &e->untags, &e->nuntags)) == 0 &&
            (r = get_strings(proto_map_get(msg.map, "unmeta"), &e->unmeta, &e->nunmeta)) == 0)
            r = get_meta(proto_map_get(msg.map, "meta"), e);
    } else {
        r = -EBADMSG;
    }
out:
    proto_msg_deinit(&msg);
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
    free(e->root);
    free_strings(e->tags, e->ntags);
    free_strings(e->meta_keys, e->nmeta);
    free_strings(e->meta_values, e->nmeta);
    free_strings(e->untags, e->nuntags);
    free_strings(e->unmeta, e->nunmeta);
    memset(e, 0, sizeof(*e));
}
