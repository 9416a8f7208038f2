#include "storage/url.h"
#include "proto/proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int url_decode(const char *s, size_t n, char *out, size_t out_len)
{
    size_t o = 0;

    if (out_len == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            int hi = i + 2 < n ? proto_hex_value(s[i + 1]) : -1;
            int lo = hi >= 0 ? proto_hex_value(s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = (char)(hi * 16 + lo);
            i += 2;
        }
        if (c == '\0' || o + 1 >= out_len)
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

int url_next_param(const char **q, char *name, size_t name_len, char *value, size_t value_len)
{
    const char *p = *q;
    size_t len;
    const char *eq;

    while (*p == '&')
        p++;
    if (!*p) {
        *q = p;
        return 0;
    }
    len = strcspn(p, "&");
    eq = memchr(p, '=', len);
    if (!eq || eq == p || (size_t)(eq - p) >= name_len)
        return -1;
    memcpy(name, p, (size_t)(eq - p));
    name[eq - p] = '\0';
    if (url_decode(eq + 1, len - (size_t)(eq - p) - 1, value, value_len))
        return -1;
    *q = p + len;
    return 1;
}

int url_parse_uint(const char *v, unsigned long min, unsigned long max, unsigned long *out)
{
    char *end;
    unsigned long n;

    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    n = strtoul(v, &end, 10);
    if (errno || *end || n < min || n > max)
        return -1;
    *out = n;
    return 0;
}

bool url_text_ok(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;

    while (*s) {
        unsigned c = *s, need;
        uint32_t cp;
        if (c < 0x20 || c == 0x7f)
            return false;
        if (c < 0x80) {
            s++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            need = 1, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            need = 2, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            need = 3, cp = c & 0x07;
        else
            return false;
        for (unsigned k = 1; k <= need; k++) {
            if ((s[k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[k] & 0x3f);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += need + 1;
    }
    return true;
}

/* A segment "." or "..": libcurl (and proxies) normalise it away; a signature would not. */
static bool dot_segment(const char *prefix)
{
    for (const char *seg = prefix; *seg;) {
        size_t n = strcspn(seg, "/");
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return true;
        seg += n + (seg[n] == '/');
    }
    return false;
}

enum url_prefix_error url_parse_prefix(const char *s, size_t n, char *prefix, size_t prefix_len)
{
    const char *p;
    size_t len;

    if (url_decode(s, n, prefix, prefix_len))
        return URL_PREFIX_ESCAPE;
    p = prefix + strspn(prefix, "/");
    len = strlen(p);
    while (len > 0 && p[len - 1] == '/')
        len--;
    memmove(prefix, p, len);
    prefix[len] = '\0';
    if (strstr(prefix, "//"))
        return URL_PREFIX_EMPTY_SEG;
    if (dot_segment(prefix))
        return URL_PREFIX_DOT_SEG;
    if (!url_text_ok(prefix))
        return URL_PREFIX_TEXT;
    return URL_PREFIX_OK;
}

int url_copy_secret(char *dst, size_t dst_len, const char *v)
{
    size_t n = strlen(v);

    if (n == 0 || n >= dst_len)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] <= ' ' || v[i] > '~')
            return -1;
    }
    memcpy(dst, v, n + 1);
    return 0;
}

int url_parse_flag(const char *v, bool *out)
{
    if (strcmp(v, "0") && strcmp(v, "1"))
        return -1;
    *out = v[0] == '1';
    return 0;
}

int url_parse_count(const char *v, unsigned long max, unsigned *out)
{
    unsigned long n;

    if (url_parse_uint(v, 1, max, &n))
        return -1;
    *out = (unsigned)n;
    return 0;
}

unsigned url_param_index(const char *name, const char *const *names, unsigned count)
{
    unsigned i;

    for (i = 0; i < count; i++) {
        if (strcmp(name, names[i]) == 0)
            break;
    }
    return i;
}

const char *url_each_param(const char *query, char *name, size_t name_len, char *value,
                           size_t value_len,
                           const char *(*set)(void *ctx, const char *name, const char *value),
                           void *ctx, const char *bad_syntax)
{
    const char *err;
    int r;

    while ((r = url_next_param(&query, name, name_len, value, value_len)) > 0) {
        err = set(ctx, name, value);
        explicit_bzero(value, value_len);
        if (err)
            return err;
    }
    explicit_bzero(value, value_len);
    return r < 0 ? bad_syntax : NULL;
}

enum url_timeouts_error url_settle_timeouts(unsigned timeout, unsigned *connect, unsigned *stall,
                                            unsigned default_connect, unsigned default_stall)
{
    if (!*connect)
        *connect = default_connect < timeout ? default_connect : timeout;
    if (!*stall)
        *stall = default_stall < timeout ? default_stall : timeout;
    if (*connect > timeout)
        return URL_CONNECT_TOO_LONG;
    if (*stall > timeout)
        return URL_STALL_TOO_LONG;
    return URL_TIMEOUTS_OK;
}

void url_append(char *out, size_t len, size_t *used, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*used + 1 >= len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(out + *used, len - *used, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    *used = (size_t)n >= len - *used ? len - 1 : *used + (size_t)n;
}

void url_append_prefix(char *out, size_t len, size_t *used, const char *prefix)
{
    for (const unsigned char *p = (const unsigned char *)prefix; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("-._~/", *p);
        if (plain)
            url_append(out, len, used, "%c", *p);
        else
            url_append(out, len, used, "%%%02X", *p);
    }
}
