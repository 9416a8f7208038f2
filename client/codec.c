/*
 * Socket-independent wire code: request frames built into a caller's buffer,
 * and reply frames split out of bytes the caller read however it likes. An
 * event-loop client (the load generator) does its own I/O around these; the
 * rules they apply - frame limits, msgpack validation, what ends a request -
 * are the proto module's and PROTOCOL.md's, the same as the blocking client's.
 */

#include "client/client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Room the decoder starts with; it grows to a full frame only when one arrives. */
#define DECODER_INITIAL_CAP ((size_t)64 * 1024)
#define DECODER_MAX_CAP ((size_t)PROTO_MAX_FRAME + 4)

/* --- encoding --- */

/* A packer sink that remembers a failed allocation instead of losing it. */
struct encoder {
    msgpack_sbuffer *sbuf;
    msgpack_packer pk;
    size_t start;
    bool failed;
};

static int encoder_write(void *data, const char *bytes, size_t len)
{
    struct encoder *enc = data;

    if (msgpack_sbuffer_write(enc->sbuf, bytes, len) < 0) {
        enc->failed = true;
        return -1;
    }
    return 0;
}

/* Opens a frame whose map holds `nfields` entries besides id and op. */
static void encoder_begin(struct encoder *enc, msgpack_sbuffer *sbuf, uint64_t id, const char *op,
                          uint32_t nfields)
{
    enc->sbuf = sbuf;
    enc->failed = false;
    msgpack_packer_init(&enc->pk, enc, encoder_write);
    if (proto_frame_begin(sbuf, &enc->start) < 0)
        enc->failed = true;
    msgpack_pack_map(&enc->pk, nfields + 2);
    proto_pack_cstr(&enc->pk, "id");
    msgpack_pack_uint64(&enc->pk, id);
    proto_pack_cstr(&enc->pk, "op");
    proto_pack_cstr(&enc->pk, op);
}

/*
 * Closes the frame. A failed or oversized frame is cut off again, so the
 * buffer holds only whole frames whatever happens.
 */
static int encoder_end(struct encoder *enc)
{
    int r = 0;

    if (enc->failed)
        r = -ENOMEM;
    else if (enc->sbuf->size - enc->start - 4 > PROTO_MAX_FRAME)
        r = -EMSGSIZE;
    if (r < 0) {
        if (enc->sbuf->size > enc->start)
            enc->sbuf->size = enc->start;
        return r;
    }
    proto_frame_end(enc->sbuf, enc->start);
    return 0;
}

static void pack_bool(msgpack_packer *pk, const char *key, bool value)
{
    proto_pack_cstr(pk, key);
    proto_pack_bool(pk, value);
}

static void pack_strs(msgpack_packer *pk, const char *key, const char *const *strs, size_t n)
{
    proto_pack_cstr(pk, key);
    msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++)
        proto_pack_cstr(pk, strs[i]);
}

static bool nonempty(const char *s)
{
    return s && s[0];
}

uint32_t client_add_head_fields(const struct client_add_req *req, int64_t size)
{
    return 1 + nonempty(req->name) * (1 + 2 * (req->mode != 0)) + (req->n_tags > 0) +
           (req->n_meta > 0) + (size >= 0) + req->heal;
}

void client_pack_add_head(msgpack_packer *pk, const struct client_add_req *req, int64_t size,
                          const void *first, size_t first_len)
{
    if (req->heal)
        pack_bool(pk, "heal", true);
    if (nonempty(req->name)) {
        proto_pack_cstr(pk, "name");
        proto_pack_cstr(pk, req->name);
        if (req->mode) {
            proto_pack_cstr(pk, "mode");
            msgpack_pack_uint32(pk, req->mode);
            proto_pack_cstr(pk, "mtime");
            msgpack_pack_int64(pk, req->mtime);
        }
    }
    if (req->n_tags > 0)
        pack_strs(pk, "tags", req->tags, req->n_tags);
    if (req->n_meta > 0) {
        proto_pack_cstr(pk, "meta");
        msgpack_pack_map(pk, req->n_meta);
        for (size_t i = 0; i < req->n_meta; i++) {
            proto_pack_cstr(pk, req->meta[i].key);
            proto_pack_cstr(pk, req->meta[i].value);
        }
    }
    if (size >= 0) {
        proto_pack_cstr(pk, "size");
        msgpack_pack_uint64(pk, (uint64_t)size);
    }
    proto_pack_cstr(pk, "mime");
    proto_pack_cstr(pk, req->mime ? req->mime : client_mime_guess(first, first_len));
}

int client_encode_add(msgpack_sbuffer *sbuf, uint64_t id, const struct client_add_req *req,
                      int64_t size, const void *data, size_t len, bool more)
{
    static const struct client_add_req unnamed;
    struct encoder enc;

    if (!req)
        req = &unnamed;
    encoder_begin(&enc, sbuf, id, "add", 2 + client_add_head_fields(req, size)); /* + more, data */
    client_pack_add_head(&enc.pk, req, size, data, len);
    pack_bool(&enc.pk, "more", more);
    proto_pack_cstr(&enc.pk, "data");
    proto_pack_bin(&enc.pk, data, len);
    return encoder_end(&enc);
}

int client_encode_data(msgpack_sbuffer *sbuf, uint64_t id, const void *data, size_t len, bool more)
{
    struct encoder enc;

    encoder_begin(&enc, sbuf, id, "data", 2);
    pack_bool(&enc.pk, "more", more);
    proto_pack_cstr(&enc.pk, "data");
    proto_pack_bin(&enc.pk, data, len);
    return encoder_end(&enc);
}

/* The ops whose only field is an optional `ref`. */
static int encode_ref_op(msgpack_sbuffer *sbuf, uint64_t id, const char *op, const char *ref)
{
    struct encoder enc;

    encoder_begin(&enc, sbuf, id, op, ref ? 1 : 0);
    if (ref) {
        proto_pack_cstr(&enc.pk, "ref");
        proto_pack_cstr(&enc.pk, ref);
    }
    return encoder_end(&enc);
}

int client_encode_get(msgpack_sbuffer *sbuf, uint64_t id, const char *ref)
{
    return encode_ref_op(sbuf, id, "get", ref);
}

int client_encode_delete(msgpack_sbuffer *sbuf, uint64_t id, const char *ref)
{
    return encode_ref_op(sbuf, id, "delete", ref);
}

int client_encode_stat(msgpack_sbuffer *sbuf, uint64_t id, const char *ref)
{
    return encode_ref_op(sbuf, id, "stat", ref);
}

int client_encode_status(msgpack_sbuffer *sbuf, uint64_t id)
{
    return encode_ref_op(sbuf, id, "status", NULL);
}

int client_encode_search(msgpack_sbuffer *sbuf, uint64_t id, const struct client_search_req *req)
{
    struct encoder enc;
    uint32_t nfields = 1 + (req->limit > 0) + (req->offset > 0) + (req->n_tags > 0) +
                       nonempty(req->name) + nonempty(req->mime) + req->has_after +
                       req->has_before + req->fuzzy + req->all;

    encoder_begin(&enc, sbuf, id, "search", nfields);
    proto_pack_cstr(&enc.pk, "query");
    proto_pack_cstr(&enc.pk, req->query ? req->query : "");
    if (req->limit > 0) {
        proto_pack_cstr(&enc.pk, "limit");
        msgpack_pack_uint64(&enc.pk, req->limit);
    }
    if (req->offset > 0) {
        proto_pack_cstr(&enc.pk, "offset");
        msgpack_pack_uint64(&enc.pk, req->offset);
    }
    if (req->n_tags > 0)
        pack_strs(&enc.pk, "tags", req->tags, req->n_tags);
    if (nonempty(req->name)) {
        proto_pack_cstr(&enc.pk, "name");
        proto_pack_cstr(&enc.pk, req->name);
    }
    if (nonempty(req->mime)) {
        proto_pack_cstr(&enc.pk, "mime");
        proto_pack_cstr(&enc.pk, req->mime);
    }
    /* msgpack-c packs a non-negative int64 in the unsigned formats, as PROTOCOL.md wants. */
    if (req->has_after) {
        proto_pack_cstr(&enc.pk, "after");
        msgpack_pack_int64(&enc.pk, req->after);
    }
    if (req->has_before) {
        proto_pack_cstr(&enc.pk, "before");
        msgpack_pack_int64(&enc.pk, req->before);
    }
    if (req->fuzzy)
        pack_bool(&enc.pk, "fuzzy", true);
    if (req->all)
        pack_bool(&enc.pk, "all", true);
    return encoder_end(&enc);
}

/* --- decoding --- */

void client_decoder_init(struct client_decoder *dec)
{
    memset(dec, 0, sizeof(*dec));
    msgpack_unpacked_init(&dec->msg.unpacked);
}

void client_decoder_deinit(struct client_decoder *dec)
{
    proto_msg_deinit(&dec->msg);
    free(dec->buf);
    dec->buf = NULL;
    dec->cap = dec->pos = dec->len = dec->consumed = 0;
}

/* Lets go of the frame handed out last: the caller is done with its reply. */
static void release_frame(struct client_decoder *dec)
{
    proto_msg_deinit(&dec->msg);
    dec->pos += dec->consumed;
    dec->len -= dec->consumed;
    dec->consumed = 0;
    if (dec->len == 0)
        dec->pos = 0;
}

int client_decoder_space(struct client_decoder *dec, uint8_t **space, size_t *avail)
{
    size_t need = 4;

    release_frame(dec);
    if (dec->len >= 4) {
        uint32_t announced = proto_be32_read(dec->buf + dec->pos);
        /* An oversized frame is reported by client_decoder_next(); read nothing for it. */
        need = announced > PROTO_MAX_FRAME ? 4 : (size_t)announced + 4;
    }
    /* The unread tail moves to the front only when the frame it starts would not fit. */
    if (dec->pos > 0 && dec->pos + need > dec->cap) {
        memmove(dec->buf, dec->buf + dec->pos, dec->len);
        dec->pos = 0;
    }
    if (need > dec->cap) {
        size_t cap = dec->cap ? dec->cap : DECODER_INITIAL_CAP;
        uint8_t *buf;

        while (cap < need)
            cap *= 2;
        if (cap > DECODER_MAX_CAP)
            cap = DECODER_MAX_CAP;
        buf = realloc(dec->buf, cap);
        if (!buf)
            return -ENOMEM;
        dec->buf = buf;
        dec->cap = cap;
    }
    if (dec->pos + dec->len == dec->cap) {
        /* Full of whole frames: client_decoder_next() must take them out first. */
        *space = NULL;
        *avail = 0;
        return -ENOBUFS;
    }
    *space = dec->buf + dec->pos + dec->len;
    *avail = dec->cap - dec->pos - dec->len;
    return 0;
}

void client_decoder_advance(struct client_decoder *dec, size_t n)
{
    dec->len += n;
}

int client_decoder_next(struct client_decoder *dec, struct client_reply *reply)
{
    const uint8_t *payload;
    size_t len, consumed;
    const msgpack_object *err;
    bool more = false;
    int r;

    release_frame(dec);
    r = proto_frame_split(dec->buf ? dec->buf + dec->pos : NULL, dec->len, PROTO_MAX_FRAME,
                          &payload, &len, &consumed);
    if (r == PROTO_FRAME_NEED_MORE)
        return CLIENT_DECODE_NEED_MORE;
    if (r != 0 || proto_msg_parse(&dec->msg, payload, len) < 0)
        return -EBADMSG;
    dec->consumed = consumed;

    memset(reply, 0, sizeof(*reply));
    reply->map = dec->msg.map;
    reply->ok = true;
    /* `ok` and `more` may be absent on stream continuations; see client_await(). */
    if (proto_get_uint(reply->map, "id", &reply->id) != 0 ||
        proto_get_bool(reply->map, "ok", &reply->ok) < 0 ||
        proto_get_bool(reply->map, "more", &more) < 0)
        return -EBADMSG;
    reply->last = !reply->ok || !more;
    if (!reply->ok) {
        const char *code = "internal";
        size_t code_len = strlen(code);

        err = proto_map_get(reply->map, "error");
        proto_get_str(err, "code", &code, &code_len);
        reply->code = proto_error_from_name(code, code_len);
        reply->code_name = code;
        reply->code_name_len = code_len;
    }
    return 0;
}
