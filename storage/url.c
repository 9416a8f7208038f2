#include "storage/url.h"
#include "proto/proto.h"

#include <errno.h>
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
