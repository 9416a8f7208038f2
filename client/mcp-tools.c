/*
 * The MCP server's tools (add, get, search, list, stat, delete) and
 * resources (documents as cairn://doc/<hash> and cairn://name/<name>), each
 * a call or two of the client library on the one daemon connection.
 * Reads return at most MCP_MAX_READ bytes, asked of cairnd as a range (the
 * chunks before it are not even read), so memory and time do not grow with
 * the document or the offset.
 */
#include "client/mcp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <unistd.h>

#include "proto/proto.h"
#include "proto/util.h"

/* ---- schemas ----------------------------------------------------------------------- */

#define DOC_PROPS                                                                                  \
    "\"hash\":{\"type\":\"string\"},\"name\":{\"type\":\"string\"},"                               \
    "\"size\":{\"type\":\"integer\"},\"mime\":{\"type\":\"string\"}"

static const struct tool {
    const char *name, *description, *input, *output;
} tools[] = {
    {"add",
     "Store a document: text given as `content`, or a file on this machine given as `path`. "
     "Returns its SHA-256 hash, by which (or by its name) it can be read back.",
     "{\"type\":\"object\",\"properties\":{\"content\":{\"type\":\"string\"},"
     "\"path\":{\"type\":\"string\"},\"name\":{\"type\":\"string\"},"
     "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":64},"
     "\"meta\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}},"
     "\"mime\":{\"type\":\"string\"}},\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"hash\":{\"type\":\"string\"},"
     "\"size\":{\"type\":\"integer\"}},\"required\":[\"hash\"]}"},
    {"get",
     "Read a document by hash, unique hash prefix (8+ digits) or name: at most 1 MiB from "
     "`offset`. Text comes back as text, anything else as a base64 blob with its mime type.",
     "{\"type\":\"object\",\"properties\":{\"ref\":{\"type\":\"string\"},"
     "\"offset\":{\"type\":\"integer\",\"minimum\":0},"
     "\"length\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1048576}},"
     "\"required\":[\"ref\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{" DOC_PROPS ",\"offset\":{\"type\":\"integer\"},"
     "\"length\":{\"type\":\"integer\"},\"truncated\":{\"type\":\"boolean\"}},"
     "\"required\":[\"hash\",\"size\",\"offset\",\"length\",\"truncated\"]}"},
    {"search",
     "Ranked full-text search over names, tags, metadata and text: words, \"phrases\", OR, "
     "NOT or -word, prefix*, name:word, tag:value.",
     "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"},"
     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000},"
     "\"offset\":{\"type\":\"integer\",\"minimum\":0},"
     "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":16},"
     "\"name\":{\"type\":\"string\"},\"mime\":{\"type\":\"string\"},"
     "\"fuzzy\":{\"type\":\"boolean\"},\"allWords\":{\"type\":\"boolean\"}},"
     "\"required\":[\"query\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"hits\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"object\",\"properties\":{\"hash\":{\"type\":\"string\"},\"name\":{\"type\":\"string\"},"
     "\"score\":{\"type\":\"number\"},\"snippet\":{\"type\":\"string\"}}}}},"
     "\"required\":[\"hits\"]}"},
    {"list",
     "List stored documents in hash order, optionally those that carry `tag`; with `prefix`, "
     "the names that start with it instead, in name order, each with the document it names now "
     "and `named` (when the name got it, Unix seconds); pass `nextCursor` back as `cursor` for "
     "the next page.",
     "{\"type\":\"object\",\"properties\":{\"prefix\":{\"type\":\"string\"},"
     "\"tag\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\",\"minimum\":1,"
     "\"maximum\":1000},\"cursor\":{\"type\":\"string\"}},\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"object\",\"properties\":{" DOC_PROPS ",\"named\":{\"type\":\"integer\"}}}},"
     "\"nextCursor\":{\"type\":\"string\"}},"
     "\"required\":[\"items\"]}"},
    {"stat", "A document's details: names, size, stored size, mime type, tags, metadata.",
     "{\"type\":\"object\",\"properties\":{\"ref\":{\"type\":\"string\"}},"
     "\"required\":[\"ref\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{" DOC_PROPS "},\"required\":[\"hash\"]}"},
    {"delete",
     "Delete by hash (the document with every name pointing to it) or remove a name (every "
     "version of it; a document it pointed to goes only when no other name points to it). "
     "`dryRun` reports what would go without changing anything.",
     "{\"type\":\"object\",\"properties\":{\"ref\":{\"type\":\"string\"},"
     "\"dryRun\":{\"type\":\"boolean\"}},\"required\":[\"ref\"],\"additionalProperties\":false}",
     "{\"type\":\"object\",\"properties\":{\"hash\":{\"type\":\"string\"},"
     "\"name\":{\"type\":\"string\"},\"names\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"string\"}},\"deleted\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
     "\"dry_run\":{\"type\":\"boolean\"}},\"required\":[\"hash\"]}"},
};

json_t *mcp_tools_list(void)
{
    json_t *list = json_array();

    for (size_t i = 0; list && i < ARRAY_SIZE(tools); i++) {
        json_t *in = json_loads(tools[i].input, 0, NULL);
        json_t *out = json_loads(tools[i].output, 0, NULL);
        json_t *t = in && out
                        ? json_pack("{s:s, s:s, s:o, s:o}", "name", tools[i].name, "description",
                                    tools[i].description, "inputSchema", in, "outputSchema", out)
                        : NULL;
        if (!t || json_array_append_new(list, t) < 0) {
            json_decref(in);
            json_decref(out);
            json_decref(list);
            return json_array();
        }
    }
    return list;
}

/* ---- helpers ------------------------------------------------------------------------ */

/* Why a client call failed, as a tool error. */
static json_t *failure(struct mcp *m, const char *what, int rc)
{
    const struct client_error *e = m->cli->client ? client_error(m->cli->client) : NULL;

    if (rc == CLIENT_E_DAEMON && e)
        return mcp_tool_error("%s: %s (%s)", what, e->message, e->code_name);
    if (rc == CLIENT_E_IO && e)
        return mcp_tool_error("%s: %s", what, strerror(e->errnum));
    return mcp_tool_error("%s: %s", what, strerror(rc < 0 ? -rc : EIO));
}

static struct client *connection(struct mcp *m)
{
    return cli_client(m->cli);
}

/* An optional string argument: 0 (NULL when absent), or -1 when it is not a string. */
static int opt_str(json_t *args, const char *key, const char **out)
{
    json_t *v = json_object_get(args, key);
    *out = v ? json_string_value(v) : NULL;
    return v && !*out ? -1 : 0;
}

static int opt_uint(json_t *args, const char *key, uint64_t min, uint64_t max, uint64_t *out)
{
    json_t *v = json_object_get(args, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || (uint64_t)json_integer_value(v) < min ||
        (uint64_t)json_integer_value(v) > max)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* An optional boolean argument: 0 (unchanged when absent), or -1 when it is not a boolean. */
static int opt_bool(json_t *args, const char *key, bool *out)
{
    json_t *v = json_object_get(args, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return -1;
    *out = json_is_true(v);
    return 0;
}

/* An optional array of at most `max` strings into out[]; its length, or -1. */
static int opt_strs(json_t *args, const char *key, const char **out, size_t max)
{
    json_t *v = json_object_get(args, key), *item;
    size_t i;

    if (!v)
        return 0;
    if (!json_is_array(v) || json_array_size(v) > max)
        return -1;
    json_array_foreach(v, i, item)
    {
        if (!(out[i] = json_string_value(item)) || !out[i][0])
            return -1;
    }
    return (int)json_array_size(v);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const uint8_t *p, size_t n)
{
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;

    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = b64[v >> 18 & 63];
        *o++ = b64[v >> 12 & 63];
        *o++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? b64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* Whether p[0..*n) is UTF-8 text; a sequence cut at the end is dropped from *n. */
static bool utf8_text(const uint8_t *p, size_t *n)
{
    size_t i = 0;

    while (i < *n) {
        int l = client_utf8_seq(p + i, *n - i);
        if (l < 0) {
            *n = i;
            return true;
        }
        if (l == 0 || p[i] == 0)
            return false;
        i += (size_t)l;
    }
    return true;
}

/* ---- reading a range ------------------------------------------------------------------ */

struct range {
    uint64_t offset, length, pos;
    uint8_t *buf;
    size_t got;
    json_t *info; /* the first frame's fields */
};

static int range_take(void *userdata, const msgpack_object *first, const uint8_t *data, size_t len)
{
    struct range *rg = userdata;
    uint64_t end = rg->offset + rg->length;

    if (first) {
        rg->info = cli_json_reply(first);
        if (!rg->info)
            return -ENOMEM;
        json_object_del(rg->info, "data");
    }
    if (rg->pos + len > rg->offset && rg->pos < end) {
        uint64_t from = rg->offset > rg->pos ? rg->offset - rg->pos : 0;
        uint64_t to = end - rg->pos < len ? end - rg->pos : len;
        memcpy(rg->buf + rg->got, data + from, (size_t)(to - from));
        rg->got += (size_t)(to - from);
    }
    rg->pos += len;
    return 0; /* the daemon sends the range and no more */
}

/* Reads [offset, offset + length) of ref into rg; 0 or a client error code. */
static int read_range(struct mcp *m, const char *ref, struct range *rg)
{
    struct client *c = connection(m);

    if (!c)
        return -ENOTCONN;
    if (!(rg->buf = malloc(rg->length)))
        return -ENOMEM;
    rg->pos = rg->offset;
    return client_get_range(c, ref, rg->offset, rg->length, range_take, rg);
}

/* The content item of what a read returned: text for UTF-8 text, else a base64 blob. */
static json_t *content_item(const char *uri, const char *mime, const uint8_t *p, size_t *n,
                            bool resource)
{
    size_t len = *n;
    char *blob;
    json_t *item;

    if (utf8_text(p, &len) && (len > 0 || *n == 0)) {
        *n = len;
        if (resource)
            return json_pack("{s:s, s:s, s:s%}", "uri", uri, "mimeType", mime, "text",
                             (const char *)p, len);
        return json_pack("{s:s, s:s%}", "type", "text", "text", (const char *)p, len);
    }
    if (!(blob = base64(p, *n)))
        return NULL;
    item = json_pack("{s:s, s:s, s:s}", "uri", uri, "mimeType", mime, "blob", blob);
    free(blob);
    return resource || !item ? item : json_pack("{s:s, s:o}", "type", "resource", "resource", item);
}

/* ---- the tools ------------------------------------------------------------------------ */

static json_t *tool_get(struct mcp *m, json_t *args)
{
    struct range rg = {.length = MCP_MAX_READ};
    const char *ref, *mime, *hash;
    uint64_t size = 0;
    char uri[PROTO_HASH_HEX + 32];
    json_t *item, *out;
    int r;

    if (opt_str(args, "ref", &ref) || !ref || !ref[0] ||
        opt_uint(args, "offset", 0, UINT64_MAX / 2, &rg.offset) ||
        opt_uint(args, "length", 1, MCP_MAX_READ, &rg.length))
        return mcp_tool_error("get: wants ref, and offset >= 0 and length 1..1048576 if given");
    r = read_range(m, ref, &rg);
    if (r != 0) {
        free(rg.buf);
        json_decref(rg.info);
        return failure(m, ref, r);
    }
    mime = json_string_value(json_object_get(rg.info, "mime"));
    mime = mime ? mime : "application/octet-stream";
    hash = json_string_value(json_object_get(rg.info, "hash"));
    if (json_integer_value(json_object_get(rg.info, "size")) > 0)
        size = (uint64_t)json_integer_value(json_object_get(rg.info, "size"));
    snprintf(uri, sizeof(uri), "cairn://doc/%s", hash ? hash : "");
    item = content_item(uri, mime, rg.buf, &rg.got, false);
    free(rg.buf);
    json_object_set_new(rg.info, "offset", json_integer((json_int_t)rg.offset));
    json_object_set_new(rg.info, "length", json_integer((json_int_t)rg.got));
    json_object_set_new(rg.info, "truncated", json_boolean(rg.offset + rg.got < size));
    out = item ? json_pack("{s:[o], s:o, s:b}", "content", item, "structuredContent", rg.info,
                           "isError", 0)
               : NULL;
    if (!out)
        json_decref(rg.info);
    return out ? out : mcp_tool_error("get: out of memory");
}

/* Whether the real path `real` is `dir` or below it. */
static bool below(const char *real, const char *dir)
{
    size_t n = strlen(dir);

    if (strcmp(dir, "/") == 0)
        return true;
    return strncmp(real, dir, n) == 0 && (real[n] == '\0' || real[n] == '/');
}

/*
 * The file `add {path}` names, opened for reading, or NULL with the tool
 * error. What an agent asks for may come from text injected into its
 * context: only a regular file (no FIFO to hang on, no device to read
 * forever), below a directory the user allowed (--allow-path, none by
 * default), reached without a symbolic link after the check, read up to
 * the size it had (a file of /proc claims 0 and is read as empty).
 */
static json_t *open_for_add(struct mcp *m, const char *path, int *fd, uint64_t *size)
{
    _cleanup_free_ char *real = NULL;
    struct stat st;
    size_t i;

    if (m->n_allow == 0)
        return mcp_tool_error("add: reading files is off: give content, or start cairn mcp with "
                              "--allow-path DIR to let add read the files below DIR");
    if (!(real = realpath(path, NULL)))
        return mcp_tool_error("add: %s: %s", path, strerror(errno));
    for (i = 0; i < m->n_allow && !below(real, m->allow[i]); i++)
        ;
    if (i == m->n_allow)
        return mcp_tool_error("add: %s is not below a directory cairn mcp may read (--allow-path)",
                              path);
    *fd = open(real, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (*fd < 0)
        return mcp_tool_error("add: %s: %s", path, strerror(errno));
    if (fstat(*fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        return mcp_tool_error("add: %s is not a regular file", path);
    }
    *size = (uint64_t)st.st_size;
    return NULL;
}

static json_t *tool_add(struct mcp *m, json_t *args)
{
    const char *tags[PROTO_MAX_TAGS], *content, *path, *name, *mime;
    struct client_meta meta[PROTO_MAX_TAGS];
    struct client_add_req req = {.tags = tags, .meta = meta};
    const msgpack_object *reply;
    struct client *c;
    json_t *jm = json_object_get(args, "meta"), *v;
    const char *key;
    int ntags, fd, r;

    ntags = opt_strs(args, "tags", tags, PROTO_MAX_TAGS);
    if (opt_str(args, "content", &content) || opt_str(args, "path", &path) ||
        opt_str(args, "name", &name) || opt_str(args, "mime", &mime) || ntags < 0 ||
        (jm && (!json_is_object(jm) || json_object_size(jm) > PROTO_MAX_TAGS)) || !content == !path)
        return mcp_tool_error("add: wants either content or path, and optional name, tags "
                              "(strings), meta (an object of strings) and mime");
    req.n_tags = (size_t)ntags;
    req.name = name;
    req.mime = mime;
    json_object_foreach(jm, key, v)
    {
        if (!json_is_string(v))
            return mcp_tool_error("add: meta values must be strings");
        meta[req.n_meta].key = key;
        meta[req.n_meta++].value = json_string_value(v);
    }
    if (!(c = connection(m)))
        return mcp_tool_error("add: cairnd is not reachable");
    if (path) {
        uint64_t size = 0;
        json_t *refused;

        fd = -1;
        refused = open_for_add(m, path, &fd, &size);
        if (refused)
            return refused;
        if (size == 0) {
            /* read_limit 0 reads to the end; an empty file is empty content. */
            close(fd);
            fd = memfd_create("cairn-mcp-add", MFD_CLOEXEC);
            if (fd < 0)
                return mcp_tool_error("add: %s", strerror(errno));
        }
        req.read_limit = size;
        if (!req.name || !req.name[0])
            req.name = path;
    } else {
        /* Text already in memory, handed to the streaming add through a memory file. */
        size_t len = json_string_length(json_object_get(args, "content"));
        fd = memfd_create("cairn-mcp-add", MFD_CLOEXEC);
        if (fd < 0 || util_write_all(fd, content, len) < 0 || lseek(fd, 0, SEEK_SET) != 0) {
            r = errno;
            if (fd >= 0)
                close(fd);
            return mcp_tool_error("add: %s", strerror(r));
        }
    }
    r = client_add(c, &req, fd, &reply);
    close(fd);
    if (r != 0)
        return failure(m, "add", r);
    return mcp_tool_result(cli_json_reply(reply));
}

struct hits {
    json_t *array;
};

static void collect(void *userdata, const msgpack_object *doc)
{
    struct hits *h = userdata;
    json_t *v = cli_json_value(doc);
    if (!v || json_array_append_new(h->array, v) < 0)
        json_decref(v);
}

static json_t *tool_search(struct mcp *m, json_t *args)
{
    const char *tags[16];
    struct client_search_req req = {.tags = tags};
    struct hits h = {json_array()};
    struct client *c;
    int ntags = opt_strs(args, "tags", tags, 16), r;

    if (opt_str(args, "query", &req.query) || !req.query || !req.query[0] ||
        opt_uint(args, "limit", 1, 1000, &req.limit) ||
        opt_uint(args, "offset", 0, INT64_MAX, &req.offset) || opt_str(args, "name", &req.name) ||
        opt_str(args, "mime", &req.mime) || ntags < 0 || opt_bool(args, "fuzzy", &req.fuzzy) ||
        opt_bool(args, "allWords", &req.all)) {
        json_decref(h.array);
        return mcp_tool_error("search: wants a query, and optional limit, offset, tags, name, "
                              "mime, fuzzy and allWords");
    }
    req.n_tags = (size_t)ntags;
    if (!(c = connection(m))) {
        json_decref(h.array);
        return mcp_tool_error("search: cairnd is not reachable");
    }
    r = client_search(c, &req, collect, &h);
    if (r != 0) {
        json_decref(h.array);
        return failure(m, "search", r);
    }
    return mcp_tool_result(json_pack("{s:o}", "hits", h.array));
}

struct page {
    json_t *items;
    uint64_t limit;
    bool names; /* items are names (a prefix was given): the cursor is a name */
    size_t seen;
    char last[PROTO_MAX_NAME + 1];      /* the last item seen: where the next page starts */
    char last_item[PROTO_MAX_NAME + 1]; /* the last one taken */
    bool more;                          /* a match beyond the limit */
};

static void page_take(void *userdata, const msgpack_object *doc)
{
    struct page *p = userdata;
    json_t *v = cli_json_value(doc);
    const char *key = json_string_value(json_object_get(v, p->names ? "name" : "hash"));

    p->seen++;
    if (!key || strlen(key) > PROTO_MAX_NAME) {
        json_decref(v);
        return;
    }
    snprintf(p->last, sizeof(p->last), "%s", key);
    if (json_array_size(p->items) >= p->limit) {
        p->more = true;
        json_decref(v);
        return;
    }
    snprintf(p->last_item, sizeof(p->last_item), "%s", key);
    if (json_array_append_new(p->items, v) < 0)
        json_decref(v);
}

/*
 * Documents after `cursor` (a hash), or with a prefix the names that start
 * with it after `cursor` (a name), every version a name points to being
 * the document it names now; the next cursor into *next.
 */
static int list_docs(struct mcp *m, const char *tag, const char *prefix, const char *cursor,
                     uint64_t limit, json_t **items, char *next, size_t next_len)
{
    enum { PAGE = 500 };
    struct page p = {.items = json_array(), .limit = limit, .names = prefix != NULL};
    struct client_list_req req = {.mode = prefix ? CLIENT_LIST_NAMES : CLIENT_LIST_DOCS,
                                  .tag = tag,
                                  .prefix = prefix,
                                  .limit = PAGE};
    struct client *c = connection(m);
    int r = 0;

    next[0] = '\0';
    if (!c) {
        json_decref(p.items);
        return -ENOTCONN;
    }
    snprintf(p.last, sizeof(p.last), "%s", cursor ? cursor : "");
    for (;;) {
        p.seen = 0;
        req.after = p.last[0] ? p.last : NULL;
        r = client_list_req(c, &req, page_take, &p);
        if (r != 0)
            break;
        if (json_array_size(p.items) >= limit) {
            if (p.more || p.seen == PAGE)
                snprintf(next, next_len, "%s", p.last_item);
            break;
        }
        if (p.seen < PAGE)
            break;
    }
    if (r != 0) {
        json_decref(p.items);
        return r;
    }
    *items = p.items;
    return 0;
}

static json_t *tool_list(struct mcp *m, json_t *args)
{
    const char *prefix, *tag, *cursor;
    uint64_t limit = 100;
    char next[PROTO_MAX_NAME + 1];
    json_t *items, *out;
    int r;

    if (opt_str(args, "prefix", &prefix) || opt_str(args, "tag", &tag) ||
        opt_str(args, "cursor", &cursor) || opt_uint(args, "limit", 1, 1000, &limit) ||
        (prefix && strlen(prefix) > PROTO_MAX_NAME) ||
        (cursor && !(prefix && prefix[0]) &&
         (strlen(cursor) > PROTO_HASH_HEX || !proto_is_hex(cursor, strlen(cursor)))) ||
        (cursor && strlen(cursor) > PROTO_MAX_NAME))
        return mcp_tool_error("list: wants optional prefix, tag, limit (1..1000) and a cursor "
                              "from an earlier nextCursor");
    r = list_docs(m, tag && tag[0] ? tag : NULL, prefix && prefix[0] ? prefix : NULL, cursor, limit,
                  &items, next, sizeof(next));
    if (r != 0)
        return failure(m, "list", r);
    out = json_pack("{s:o}", "items", items);
    if (out && next[0])
        json_object_set_new(out, "nextCursor", json_string(next));
    return mcp_tool_result(out);
}

static json_t *tool_ref(struct mcp *m, json_t *args, bool del)
{
    const msgpack_object *reply;
    const char *ref;
    bool dry_run = false;
    struct client *c;
    int r;

    if (opt_str(args, "ref", &ref) || !ref || !ref[0])
        return mcp_tool_error("%s: wants ref", del ? "delete" : "stat");
    if (del && opt_bool(args, "dryRun", &dry_run))
        return mcp_tool_error("delete: dryRun must be a boolean");
    if (!(c = connection(m)))
        return mcp_tool_error("%s: cairnd is not reachable", del ? "delete" : "stat");
    r = del ? client_delete(c, ref, dry_run, &reply) : client_stat(c, ref, &reply);
    if (r != 0)
        return failure(m, ref, r);
    return mcp_tool_result(cli_json_reply(reply));
}

json_t *mcp_tools_call(struct mcp *m, const char *name, json_t *args, int *code, const char **msg)
{
    json_t *empty = NULL, *r;

    if (args && !json_is_object(args)) {
        *code = MCP_INVALID_PARAMS;
        *msg = "arguments must be an object";
        return NULL;
    }
    if (!args)
        args = empty = json_object();
    if (strcmp(name, "add") == 0)
        r = tool_add(m, args);
    else if (strcmp(name, "get") == 0)
        r = tool_get(m, args);
    else if (strcmp(name, "search") == 0)
        r = tool_search(m, args);
    else if (strcmp(name, "list") == 0)
        r = tool_list(m, args);
    else if (strcmp(name, "stat") == 0 || strcmp(name, "delete") == 0)
        r = tool_ref(m, args, name[0] == 'd');
    else {
        *code = MCP_INVALID_PARAMS;
        *msg = "unknown tool";
        r = NULL;
    }
    json_decref(empty);
    return r;
}

/* ---- resources ---------------------------------------------------------------------- */

json_t *mcp_resource_templates(void)
{
    return json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:s}]", "uriTemplate", "cairn://doc/{hash}",
                     "name", "document", "description",
                     "a document by its hash or a unique hash prefix (first 1 MiB)", "uriTemplate",
                     "cairn://name/{name}", "name", "named document", "description",
                     "the newest document under a name (percent-encoded; first 1 MiB)");
}

json_t *mcp_resources_list(struct mcp *m, json_t *params, int *code, const char **msg)
{
    const char *cursor = json_string_value(json_object_get(params, "cursor"));
    char next[PROTO_HASH_HEX + 1];
    json_t *items, *res, *item, *out;
    size_t i;

    if (cursor && (strlen(cursor) > PROTO_HASH_HEX || !proto_is_hex(cursor, strlen(cursor)))) {
        *code = MCP_INVALID_PARAMS;
        *msg = "bad cursor";
        return NULL;
    }
    if (list_docs(m, NULL, NULL, cursor, 100, &items, next, sizeof(next)) != 0) {
        *code = MCP_INTERNAL_ERROR;
        *msg = "cannot list documents (is cairnd running?)";
        return NULL;
    }
    res = json_array();
    json_array_foreach(items, i, item)
    {
        const char *hash = json_string_value(json_object_get(item, "hash"));
        const char *name = json_string_value(json_object_get(item, "name"));
        char uri[PROTO_HASH_HEX + 16];
        snprintf(uri, sizeof(uri), "cairn://doc/%s", hash);
        json_array_append_new(res, json_pack("{s:s, s:s, s:O, s:O}", "uri", uri, "name",
                                             name && name[0] ? name : hash, "mimeType",
                                             json_object_get(item, "mime"), "size",
                                             json_object_get(item, "size")));
    }
    json_decref(items);
    out = json_pack("{s:o}", "resources", res);
    if (out && next[0])
        json_object_set_new(out, "nextCursor", json_string(next));
    return out;
}

json_t *mcp_resources_read(struct mcp *m, json_t *params, int *code, const char **msg)
{
    const char *uri = json_string_value(json_object_get(params, "uri")), *mime, *src;
    char ref[PROTO_MAX_NAME + 1];
    struct range rg = {.length = MCP_MAX_READ};
    size_t n = 0;
    json_t *item;
    int r;

    *code = MCP_INVALID_PARAMS;
    *msg = "uri must be cairn://doc/HASH or cairn://name/NAME";
    if (!uri)
        return NULL;
    if (strncmp(uri, "cairn://doc/", 12) == 0)
        src = uri + 12;
    else if (strncmp(uri, "cairn://name/", 13) == 0)
        src = uri + 13;
    else
        return NULL;
    /* Percent-decoded: a name may hold any character. */
    for (; *src && n < PROTO_MAX_NAME; src++) {
        if (*src == '%' && proto_hex_value(src[1]) >= 0 && proto_hex_value(src[2]) >= 0) {
            ref[n++] = (char)(proto_hex_value(src[1]) * 16 + proto_hex_value(src[2]));
            src += 2;
        } else {
            ref[n++] = *src;
        }
    }
    ref[n] = '\0';
    if (*src || n == 0 || memchr(ref, '\0', n))
        return NULL;
    /*
     * cairnd reads 8 to 64 hex digits as a hash first: a name like that
     * could give another document, so it is refused rather than misread.
     */
    if (uri[8] == 'n' && n >= 8 && n <= PROTO_HASH_HEX && proto_is_hex(ref, n)) {
        *msg = "a name of 8 to 64 hex digits reads as a hash: use cairn://doc/HASH";
        return NULL;
    }
    r = read_range(m, ref, &rg);
    if (r != 0) {
        free(rg.buf);
        json_decref(rg.info);
        *code = r == CLIENT_E_DAEMON ? MCP_RESOURCE_NOT_FOUND : MCP_INTERNAL_ERROR;
        *msg = r == CLIENT_E_DAEMON ? "resource not found" : "cannot read the document";
        return NULL;
    }
    mime = json_string_value(json_object_get(rg.info, "mime"));
    item = content_item(uri, mime ? mime : "application/octet-stream", rg.buf, &rg.got, true);
    free(rg.buf);
    json_decref(rg.info);
    *code = MCP_INTERNAL_ERROR;
    *msg = "out of memory";
    return item ? json_pack("{s:[o]}", "contents", item) : NULL;
}
