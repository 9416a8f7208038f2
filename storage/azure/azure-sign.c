/*
 * SharedKey (azure-sign.h): the string-to-sign built into one buffer with
 * every length checked, then its HMAC.
 */
#include "storage/azure/azure-sign.h"
#include "storage/url.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

void az_format_date(time_t t, char out[AZ_DATE_SIZE])
{
    static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;

    gmtime_r(&t, &tm);
    snprintf(out, AZ_DATE_SIZE, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7],
             tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
             tm.tm_sec);
}

struct buf {
    char *p;
    size_t len, cap;
    bool overflow;
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->overflow || n >= b->cap - b->len) {
        b->overflow = true;
        return;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* A header "Name: value" whose name is `name` (any case): its value, trimmed. */
static bool header_value(const char *h, const char *name, const char **v, size_t *vlen)
{
    size_t n = strlen(name);
    const char *colon = strchr(h, ':');

    if (!colon || (size_t)(colon - h) != n || strncasecmp(h, name, n) != 0)
        return false;
    *v = colon + 1 + strspn(colon + 1, " \t");
    *vlen = strlen(*v);
    while (*vlen && ((*v)[*vlen - 1] == ' ' || (*v)[*vlen - 1] == '\t'))
        (*vlen)--;
    return true;
}

/* A value with its runs of whitespace folded to one space (the canonical x-ms-* form). */
static void put_folded(struct buf *b, const char *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i] == ' ' || v[i] == '\t') {
            while (i + 1 < n && (v[i + 1] == ' ' || v[i + 1] == '\t'))
                i++;
            put(b, " ", 1);
        } else if (v[i] == '\r' || v[i] == '\n') {
            b->overflow = true; /* no header carries a line break */
        } else {
            put(b, &v[i], 1);
        }
    }
}

struct xms {
    char name[64];
    const char *value;
    size_t value_len;
};

static int cmp_xms(const void *a, const void *b)
{
    return strcmp(((const struct xms *)a)->name, ((const struct xms *)b)->name);
}

struct qparam {
    char name[64];
    char value[2048];
};

static int cmp_param(const void *a, const void *b)
{
    const struct qparam *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

static int canonical_query(struct buf *b, const char *q)
{
    struct qparam *ps;
    size_t n = 0;
    int r = 0;

    if (!q || !*q)
        return 0;
    if (!(ps = calloc(AZ_MAX_PARAMS, sizeof(*ps))))
        return -ENOMEM;
    while (*q) {
        size_t part = strcspn(q, "&");
        const char *eq = memchr(q, '=', part);
        size_t name_len = eq ? (size_t)(eq - q) : part;
        if (part == 0) {
            q++;
            continue;
        }
        if (n == AZ_MAX_PARAMS || url_decode(q, name_len, ps[n].name, sizeof(ps[n].name)) ||
            (eq && url_decode(eq + 1, part - name_len - 1, ps[n].value, sizeof(ps[n].value)))) {
            r = -EINVAL;
            break;
        }
        for (char *c = ps[n].name; *c; c++) {
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
        }
        n++;
        q += part + (q[part] == '&');
    }
    if (r == 0) {
        qsort(ps, n, sizeof(*ps), cmp_param);
        for (size_t i = 0; i < n; i++) {
            if (i > 0 && strcmp(ps[i].name, ps[i - 1].name) == 0) {
                put(b, ",", 1);
            } else {
                put(b, "\n", 1);
                puts_(b, ps[i].name);
                put(b, ":", 1);
            }
            puts_(b, ps[i].value);
        }
    }
    OPENSSL_cleanse(ps, AZ_MAX_PARAMS * sizeof(*ps));
    free(ps);
    return r;
}

int az_string_to_sign(const char *account, const struct az_sign_req *req, char *out, size_t out_len)
{
    static const char *const standard[] = {
        "Content-Encoding",
        "Content-Language",
        "Content-Length",
        "Content-MD5",
        "Content-Type",
        "Date",
        "If-Modified-Since",
        "If-Match",
        "If-None-Match",
        "If-Unmodified-Since",
        "Range",
    };
    struct buf b = {out, 0, out_len, false};
    struct xms xs[AZ_MAX_PARAMS];
    size_t nx = 0;
    int r;

    if (out_len == 0 || !req->method || !req->path || req->path[0] != '/')
        return -EINVAL;
    out[0] = '\0';
    puts_(&b, req->method);
    put(&b, "\n", 1);
    for (size_t s = 0; s < sizeof(standard) / sizeof(standard[0]); s++) {
        const char *v = NULL;
        size_t vlen = 0;
        if (s == 2) {
            /* From the body's length, not a header: empty when 0 (versions since 2015-02-21). */
            char num[24];
            if (req->content_length) {
                snprintf(num, sizeof(num), "%" PRIu64, req->content_length);
                puts_(&b, num);
            }
            put(&b, "\n", 1);
            continue;
        }
        for (size_t i = 0; i < req->nheaders; i++) {
            if (header_value(req->headers[i], standard[s], &v, &vlen))
                break;
            v = NULL;
        }
        if (v)
            put_folded(&b, v, vlen);
        put(&b, "\n", 1);
    }
    for (size_t i = 0; i < req->nheaders; i++) {
        const char *h = req->headers[i], *colon = strchr(h, ':');
        size_t n = colon ? (size_t)(colon - h) : 0;
        if (!colon || n < 5 || strncasecmp(h, "x-ms-", 5) != 0)
            continue;
        if (nx == AZ_MAX_PARAMS || n >= sizeof(xs[nx].name))
            return -EINVAL;
        for (size_t k = 0; k < n; k++)
            xs[nx].name[k] = (char)(h[k] >= 'A' && h[k] <= 'Z' ? h[k] - 'A' + 'a' : h[k]);
        xs[nx].name[n] = '\0';
        header_value(h, xs[nx].name, &xs[nx].value, &xs[nx].value_len);
        nx++;
    }
    qsort(xs, nx, sizeof(*xs), cmp_xms);
    for (size_t i = 0; i < nx; i++) {
        puts_(&b, xs[i].name);
        put(&b, ":", 1);
        put_folded(&b, xs[i].value, xs[i].value_len);
        put(&b, "\n", 1);
    }
    put(&b, "/", 1);
    puts_(&b, account);
    puts_(&b, req->path);
    if ((r = canonical_query(&b, req->query)) < 0)
        return r;
    if (b.overflow)
        return -ENAMETOOLONG;
    return (int)b.len;
}

int az_sign(const char *account, const uint8_t *key, size_t key_len, const struct az_sign_req *req,
            char *out, size_t out_len)
{
    char *sts = malloc(AZ_STS_MAX);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned mac_len = 0;
    char sig[96];
    int n, r;

    if (!sts)
        return -ENOMEM;
    n = az_string_to_sign(account, req, sts, AZ_STS_MAX);
    if (n < 0) {
        free(sts);
        return n;
    }
    if (!HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)sts, (size_t)n, mac,
              &mac_len)) {
        free(sts);
        return -EIO;
    }
    free(sts);
    EVP_EncodeBlock((unsigned char *)sig, mac, (int)mac_len);
    r = snprintf(out, out_len, "SharedKey %s:%s", account, sig);
    OPENSSL_cleanse(mac, sizeof(mac));
    OPENSSL_cleanse(sig, sizeof(sig));
    return r < 0 || (size_t)r >= out_len ? -ENAMETOOLONG : 0;
}
