/* Output: reply maps as JSON lines or as "key: value" text. */

#include "client/cli.h"
#include "client/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* jansson refuses strings that are not UTF-8; those get U+FFFD per bad byte. */
json_t *cli_json_text(const char *s, size_t len)
{
    _cleanup_free_ char *fixed = NULL;
    json_t *json;
    char *p;

    if (len == 0)
        return json_string("");
    json = json_stringn(s, len);
    if (json)
        return json;
    /* len is bounded by the frame size, so this cannot overflow. */
    fixed = p = malloc(3 * len);
    if (!fixed)
        return NULL;
    for (size_t i = 0; i < len;) {
        int n = client_utf8_seq((const uint8_t *)s + i, len - i);
        if (n > 0) {
            memcpy(p, s + i, (size_t)n);
            p += n;
            i += (size_t)n;
        } else {
            memcpy(p, "\xef\xbf\xbd", 3);
            p += 3;
            i++;
        }
    }
    return json_stringn_nocheck(fixed, (size_t)(p - fixed));
}

/* The framing keys a reply carries besides its op's fields. */
static bool is_framing(const msgpack_object *key)
{
    return proto_str_eq(key, "id") || proto_str_eq(key, "ok") || proto_str_eq(key, "more");
}

static json_t *json_map(const msgpack_object *map, bool skip_framing)
{
    json_t *obj = json_object();

    for (uint32_t i = 0; obj && i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        json_t *key, *value;

        if (kv->key.type != MSGPACK_OBJECT_STR || (skip_framing && is_framing(&kv->key)))
            continue;
        key = cli_json_text(kv->key.via.str.ptr, kv->key.via.str.size);
        value = cli_json_value(&kv->val);
        if (!key || !value ||
            json_object_setn_new_nocheck(obj, json_string_value(key), json_string_length(key),
                                         value) < 0) {
            json_decref(obj);
            obj = NULL;
        }
        json_decref(key);
    }
    return obj;
}

json_t *cli_json_value(const msgpack_object *obj)
{
    json_t *array;

    switch (obj->type) {
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(obj->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        /* json_int_t is signed; no cairn counter gets near this, but stay exact where possible. */
        if (obj->via.u64 > INT64_MAX)
            return json_real((double)obj->via.u64);
        return json_integer((json_int_t)obj->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer(obj->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return json_real(obj->via.f64);
    case MSGPACK_OBJECT_STR:
        return cli_json_text(obj->via.str.ptr, obj->via.str.size);
    case MSGPACK_OBJECT_ARRAY:
        array = json_array();
        for (uint32_t i = 0; array && i < obj->via.array.size; i++) {
            if (json_array_append_new(array, cli_json_value(&obj->via.array.ptr[i])) < 0) {
                json_decref(array);
                array = NULL;
            }
        }
        return array;
    case MSGPACK_OBJECT_MAP:
        return json_map(obj, false);
    default: /* nil, and bin or ext, which no reply field outside `data` uses */
        return json_null();
    }
}

json_t *cli_json_reply(const msgpack_object *map)
{
    return json_map(map, true);
}

int cli_print_json(FILE *out, json_t *json)
{
    int r;

    if (!json) {
        fputs("cairn: out of memory\n", stderr); /* not as JSON: that needs memory too */
        return -ENOMEM;
    }
    r = json_dumpf(json, out, JSON_COMPACT);
    json_decref(json);
    if (r < 0)
        return -EIO;
    fputc('\n', out);
    return 0;
}

void cli_format_time(uint64_t seconds, char buf[CLI_TIME_MAX])
{
    time_t t = (time_t)seconds;
    struct tm tm;

    if ((uint64_t)t != seconds || !gmtime_r(&t, &tm) ||
        strftime(buf, CLI_TIME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, CLI_TIME_MAX, "%" PRIu64, seconds);
}

void cli_format_mode(uint32_t mode, char buf[CLI_MODE_MAX])
{
    static const char rwx[] = "rwxrwxrwx";
    uint32_t type = mode & 0170000;

    buf[0] = type == 0040000 ? 'd' : type == 0120000 ? 'l' : type == 0100000 ? '-' : '?';
    for (int i = 0; i < 9; i++)
        buf[1 + i] = mode & (0400u >> i) ? rwx[i] : '-';
    /* setuid, setgid and sticky as ls shows them */
    if (mode & 04000)
        buf[3] = mode & 0100 ? 's' : 'S';
    if (mode & 02000)
        buf[6] = mode & 010 ? 's' : 'S';
    if (mode & 01000)
        buf[9] = mode & 01 ? 't' : 'T';
    buf[10] = '\0';
}

struct timespec cli_timespec_ns(int64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
    if (ts.tv_nsec < 0) {
        ts.tv_sec--;
        ts.tv_nsec += 1000000000;
    }
    return ts;
}

static bool is_empty(const msgpack_object *v)
{
    return v->type == MSGPACK_OBJECT_NIL || (v->type == MSGPACK_OBJECT_STR && !v->via.str.size) ||
           (v->type == MSGPACK_OBJECT_ARRAY && !v->via.array.size) ||
           (v->type == MSGPACK_OBJECT_MAP && !v->via.map.size);
}

/*
 * Text from the store (names, tags, metadata) on a terminal: control
 * characters go out as '?', as ls shows them, so a name cannot move the
 * cursor, change colours or split a line. Written as it is elsewhere.
 */
void cli_put_text(FILE *out, const char *s, size_t len)
{
    static int tty = -1;

    if (tty < 0)
        tty = isatty(STDOUT_FILENO) == 1;
    if (!tty) {
        fwrite(s, 1, len, out);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        fputc(c < 0x20 || c == 0x7f ? '?' : c, out);
    }
}

void cli_put_record(const struct cli *cli, FILE *out, const char *s, size_t len)
{
    if (cli->null) {
        fwrite(s, 1, len, out);
        fputc('\0', out);
        return;
    }
    cli_put_text(out, s, len);
    fputc('\n', out);
}

int cli_null_conflict(const struct cli *cli, const char *cmd, const char *other)
{
    if (!cli->null || (!cli->json && !other))
        return 0;
    return cli_usage_error("%s: -0 prints names or hashes alone: not with %s", cmd,
                           cli->json ? "--json" : other);
}

/* How a field's integer is shown. */
enum field_kind {
    FIELD_PLAIN,
    FIELD_TIME, /* Unix seconds */
    FIELD_MODE, /* st_mode: "-rwxr-xr-x (100755)" */
    FIELD_NS,   /* nanoseconds since the epoch: "2001-01-01T00:00:00.5Z" */
};

/* Items of a list or a map (each on its own line, in cli_print_fields), else one value. */
static void print_value(FILE *out, const msgpack_object *v, enum field_kind kind)
{
    char when[CLI_TIME_MAX], mode[CLI_MODE_MAX];

    switch (v->type) {
    case MSGPACK_OBJECT_STR:
        cli_put_text(out, v->via.str.ptr, v->via.str.size);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (kind == FIELD_TIME) {
            cli_format_time(v->via.u64, when);
            fputs(when, out);
        } else if (kind == FIELD_MODE && v->via.u64 <= UINT32_MAX) {
            cli_format_mode((uint32_t)v->via.u64, mode);
            fprintf(out, "%s (%06" PRIo64 ")", mode, v->via.u64);
        } else if (kind == FIELD_NS) {
            cli_format_time(v->via.u64 / 1000000000u, when);
            uint64_t frac = v->via.u64 % 1000000000u;
            size_t len = strlen(when);
            if (frac && len > 0 && when[len - 1] == 'Z')
                fprintf(out, "%.*s.%09" PRIu64 "Z", (int)len - 1, when, frac);
            else
                fputs(when, out);
        } else {
            fprintf(out, "%" PRIu64, v->via.u64);
        }
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        fprintf(out, "%" PRId64, v->via.i64);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        fputs(v->via.boolean ? "true" : "false", out);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        fprintf(out, "%g", v->via.f64);
        break;
    case MSGPACK_OBJECT_ARRAY:
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            fputs("\n  ", out);
            print_value(out, &v->via.array.ptr[i], FIELD_PLAIN);
        }
        break;
    case MSGPACK_OBJECT_MAP:
        for (uint32_t i = 0; i < v->via.map.size; i++) {
            fputs("\n  ", out);
            print_value(out, &v->via.map.ptr[i].key, FIELD_PLAIN);
            fputc('=', out);
            print_value(out, &v->via.map.ptr[i].val, FIELD_PLAIN);
        }
        break;
    default:
        break;
    }
}

void cli_print_fields(FILE *out, const msgpack_object *map, const char *const *keys)
{
    for (; *keys; keys++) {
        const msgpack_object *v = proto_map_get(map, *keys);

        if (!v)
            continue;
        fprintf(out, "%s:", *keys);
        /* A list or a map: an item a line, so a name with ", " in it is not two. */
        if (!is_empty(v)) {
            if (v->type != MSGPACK_OBJECT_ARRAY && v->type != MSGPACK_OBJECT_MAP)
                fputc(' ', out);
            print_value(out, v,
                        strcmp(*keys, "created") == 0 ? FIELD_TIME
                        : strcmp(*keys, "mode") == 0  ? FIELD_MODE
                        : strcmp(*keys, "mtime") == 0 ? FIELD_NS
                                                      : FIELD_PLAIN);
        }
        fputc('\n', out);
    }
}
