/*
 * s3:// and r2:// URLs (the options are documented in s3-url.h). Parsing
 * runs in three steps: the bucket and prefix, the parameters as plain
 * values, then the checks that involve several of them (allow_http against
 * the endpoint's scheme, path style against its host) and the derived
 * parts, so that the order of the parameters never matters.
 */
#include "storage/s3/s3-url.h"
#include "storage/url.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Parameters, in the order of the bits in `seen`; r2_only ones come last. */
enum param {
    P_ENDPOINT,
    P_REGION,
    P_PATH_STYLE,
    P_ALLOW_HTTP,
    P_TIMEOUT,
    P_CONNECT_TIMEOUT,
    P_STALL_TIMEOUT,
    P_CONNECTIONS,
    P_STORAGE_CLASS,
    P_PROFILE,
    P_ACCESS_KEY_ID,
    P_SECRET_ACCESS_KEY,
    P_SESSION_TOKEN,
    P_ACCOUNT,
    P_API_BASE,
    P_API_TOKEN,
    P_TEMP_TTL,
    P_COUNT,
};

static const char *const param_names[P_COUNT] = {
    "endpoint",      "region",          "path_style",    "allow_http",
    "timeout",       "connect_timeout", "stall_timeout", "connections",
    "storage_class", "profile",         "access_key_id", "secret_access_key",
    "session_token", "account",         "api_base",      "api_token",
    "temp_ttl",
};

/* What the parameters said, before the checks that need all of them. */
struct raw {
    struct s3_opts *o;
    unsigned seen;
    int path_style; /* -1: not given */
    char endpoint[S3_MAX_URL];
    char api_base[S3_MAX_URL];
};

static bool all_of(const char *s, const char *set)
{
    return s[strspn(s, set)] == '\0';
}

#define DIGITS "0123456789"
#define LOWER "abcdefghijklmnopqrstuvwxyz"
#define UPPER "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

static int copy_checked(char *dst, size_t dst_len, const char *v, const char *set)
{
    size_t n = strlen(v);
    if (n == 0 || n >= dst_len || (set && !all_of(v, set)))
        return -1;
    memcpy(dst, v, n + 1);
    return 0;
}

static const char *set_param(void *ctx, const char *name, const char *v)
{
    struct raw *raw = ctx;
    struct s3_opts *o = raw->o;
    unsigned i = url_param_index(name, param_names, P_COUNT);
    bool flag;

    if (i == P_COUNT)
        return "s3 backend: unknown URL parameter (known: endpoint, region, path_style, "
               "allow_http, timeout, connect_timeout, stall_timeout, connections, "
               "storage_class, profile, access_key_id, secret_access_key, session_token; "
               "for r2: account, api_base, api_token, temp_ttl)";
    if (i >= P_ACCOUNT && o->flavor != S3_FLAVOR_R2)
        return "s3 backend: account, api_base, api_token and temp_ttl are for r2:// only";
    if (raw->seen & (1u << i))
        return NULL;
    raw->seen |= 1u << i;
    switch ((enum param)i) {
    case P_ENDPOINT:
        return copy_checked(raw->endpoint, sizeof(raw->endpoint), v, NULL)
                   ? "s3 backend: endpoint is empty or too long"
                   : NULL;
    case P_API_BASE:
        return copy_checked(raw->api_base, sizeof(raw->api_base), v, NULL)
                   ? "s3 backend: api_base is empty or too long"
                   : NULL;
    case P_REGION:
        return copy_checked(o->region, sizeof(o->region), v, LOWER DIGITS "-")
                   ? "s3 backend: region must be 1 to 63 of a-z, 0-9 and '-'"
                   : NULL;
    case P_PATH_STYLE:
        if (url_parse_flag(v, &flag))
            return "s3 backend: path_style must be 0 or 1";
        raw->path_style = flag;
        return NULL;
    case P_ALLOW_HTTP:
        return url_parse_flag(v, &o->allow_http) ? "s3 backend: allow_http must be 0 or 1" : NULL;
    case P_TIMEOUT:
        return url_parse_count(v, S3_MAX_TIMEOUT_S, &o->timeout_s)
                   ? "s3 backend: timeout must be between 1 and 86400 (seconds)"
                   : NULL;
    case P_CONNECT_TIMEOUT:
        return url_parse_count(v, S3_MAX_TIMEOUT_S, &o->connect_timeout_s)
                   ? "s3 backend: connect_timeout must be between 1 and 86400 (seconds)"
                   : NULL;
    case P_STALL_TIMEOUT:
        return url_parse_count(v, S3_MAX_TIMEOUT_S, &o->stall_timeout_s)
                   ? "s3 backend: stall_timeout must be between 1 and 86400 (seconds)"
                   : NULL;
    case P_CONNECTIONS:
        return url_parse_count(v, S3_MAX_CONNECTIONS, &o->connections)
                   ? "s3 backend: connections must be between 1 and 256"
                   : NULL;
    case P_STORAGE_CLASS:
        return copy_checked(o->storage_class, sizeof(o->storage_class), v, UPPER DIGITS "_")
                   ? "s3 backend: storage_class must be 1 to 63 of A-Z, 0-9 and '_'"
                   : NULL;
    case P_PROFILE:
        return copy_checked(o->profile, sizeof(o->profile), v, LOWER UPPER DIGITS "-_.@+=,/:")
                   ? "s3 backend: profile must be 1 to 127 letters, digits or -_.@+=,/:"
                   : NULL;
    case P_ACCESS_KEY_ID:
        return url_copy_secret(o->access_key_id, sizeof(o->access_key_id), v)
                   ? "s3 backend: access_key_id is empty, too long or has spaces"
                   : NULL;
    case P_SECRET_ACCESS_KEY:
        return url_copy_secret(o->secret_access_key, sizeof(o->secret_access_key), v)
                   ? "s3 backend: secret_access_key is empty, too long or has spaces"
                   : NULL;
    case P_SESSION_TOKEN:
        return url_copy_secret(o->session_token, sizeof(o->session_token), v)
                   ? "s3 backend: session_token is empty, too long or has spaces"
                   : NULL;
    case P_ACCOUNT:
        return copy_checked(o->account, sizeof(o->account), v, DIGITS "abcdef")
                   ? "s3 backend: account must be the Cloudflare account ID, 1 to 64 of "
                     "0-9 and a-f"
                   : NULL;
    case P_API_TOKEN:
        return url_copy_secret(o->api_token, sizeof(o->api_token), v)
                   ? "s3 backend: api_token is empty, too long or has spaces"
                   : NULL;
    case P_TEMP_TTL:
        return url_parse_count(v, R2_MAX_TEMP_TTL_S, &o->temp_ttl_s)
                   ? "s3 backend: temp_ttl must be between 1 and 604800 (seconds)"
                   : NULL;
    case P_COUNT:
        break;
    }
    return "s3 backend: unknown URL parameter";
}

/* 3 to 63 of a-z, 0-9, '.', '-'; a letter or digit at both ends; no "..";
 * not shaped like an IP address (AWS's rules; R2's are a subset). */
static bool bucket_ok(const char *b, size_t n)
{
    bool only_digits_dots = true;

    if (n < 3 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '.' && c != '-')
            return false;
        if ((i == 0 || i == n - 1) && !alnum)
            return false;
        if (c == '.' && b[i + 1] == '.')
            return false;
        if (c != '.' && (c < '0' || c > '9'))
            only_digits_dots = false;
    }
    return !only_digits_dots;
}

static const char *parse_prefix(struct s3_opts *o, const char *s, size_t n)
{
    switch (url_parse_prefix(s, n, o->prefix, sizeof(o->prefix))) {
    case URL_PREFIX_OK:
        return NULL;
    case URL_PREFIX_ESCAPE:
        return "s3 backend: bad escape or prefix too long in the URL";
    case URL_PREFIX_EMPTY_SEG:
        return "s3 backend: the prefix has an empty segment (\"//\")";
    case URL_PREFIX_DOT_SEG:
        return "s3 backend: the prefix has a \".\" or \"..\" segment; HTTP clients remove those "
               "from the path they send, so no request would match its signature";
    case URL_PREFIX_TEXT:
        break;
    }
    return "s3 backend: the prefix must be UTF-8 without control characters";
}

/*
 * http[s]://HOST[:PORT] and, when path_ok, a path after it. The host is
 * lowercased (SigV4 signs it so). On success *path points into u.
 */
static const char *parse_http_url(const char *u, bool path_ok, bool *https, char *host,
                                  unsigned *port, const char **path)
{
    const char *h, *end, *port_s = NULL;
    size_t host_len;

    if (strncmp(u, "https://", 8) == 0)
        *https = true, h = u + 8;
    else if (strncmp(u, "http://", 7) == 0)
        *https = false, h = u + 7;
    else
        return "s3 backend: endpoint and api_base must start with http:// or https://";
    end = h + strcspn(h, "/?#");
    *path = end;
    if (*end == '?' || *end == '#' || (!path_ok && end[0] == '/' && end[1]))
        return "s3 backend: endpoint takes no path, query or fragment: http[s]://HOST[:PORT]";
    if (h < end && *h == '[') {
        const char *close = memchr(h, ']', (size_t)(end - h));
        if (!close || (close + 1 < end && close[1] != ':'))
            return "s3 backend: bad IPv6 literal in the endpoint";
        host_len = (size_t)(close - h - 1);
        if (host_len == 0 || host_len >= S3_MAX_HOST)
            return "s3 backend: bad IPv6 literal in the endpoint";
        memcpy(host, h + 1, host_len);
        host[host_len] = '\0';
        if (!all_of(host, DIGITS "abcdefABCDEF:."))
            return "s3 backend: bad IPv6 literal in the endpoint";
        port_s = close + 1 < end ? close + 2 : NULL;
    } else {
        const char *colon = memchr(h, ':', (size_t)(end - h));
        host_len = (size_t)((colon ? colon : end) - h);
        if (host_len == 0 || host_len >= S3_MAX_HOST)
            return "s3 backend: endpoint needs a host";
        memcpy(host, h, host_len);
        host[host_len] = '\0';
        if (!all_of(host, LOWER UPPER DIGITS ".-_"))
            return "s3 backend: endpoint host has characters a host name cannot have";
        port_s = colon ? colon + 1 : NULL;
    }
    for (char *c = host; *c; c++) {
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    }
    *port = *https ? 443 : 80;
    if (port_s) {
        char digits[8];
        unsigned long n;
        size_t plen = (size_t)(end - port_s);
        if (plen == 0 || plen >= sizeof(digits))
            return "s3 backend: bad port in the endpoint";
        memcpy(digits, port_s, plen);
        digits[plen] = '\0';
        if (url_parse_uint(digits, 1, 65535, &n))
            return "s3 backend: bad port in the endpoint";
        *port = (unsigned)n;
    }
    return NULL;
}

static bool is_ip_literal(const char *host)
{
    return strchr(host, ':') || all_of(host, DIGITS ".");
}

static const char *finish(struct s3_opts *o, struct raw *raw)
{
    const char *path, *err;
    bool api_https;
    char api_host[S3_MAX_HOST];
    unsigned api_port;
    int n;

    if (o->flavor == S3_FLAVOR_R2 && !o->account[0])
        return "s3 backend: r2:// needs account=ID (the Cloudflare account ID)";
    if (!o->region[0])
        snprintf(o->region, sizeof(o->region), "%s",
                 o->flavor == S3_FLAVOR_R2 ? "auto" : S3_DEFAULT_REGION);
    if (!raw->endpoint[0]) {
        if (o->flavor == S3_FLAVOR_R2)
            snprintf(raw->endpoint, sizeof(raw->endpoint), "https://%s.r2.cloudflarestorage.com",
                     o->account);
        else
            snprintf(raw->endpoint, sizeof(raw->endpoint), "https://s3.%s.amazonaws.com",
                     o->region);
    }
    if ((err = parse_http_url(raw->endpoint, false, &o->https, o->host, &o->port, &path)))
        return err;
    if (!o->https && !o->allow_http)
        return "s3 backend: endpoint http://... sends requests unencrypted and needs "
               "allow_http=1";
    if (o->flavor == S3_FLAVOR_R2) {
        if (!raw->api_base[0])
            snprintf(raw->api_base, sizeof(raw->api_base), "%s", R2_DEFAULT_API_BASE);
        if ((err = parse_http_url(raw->api_base, true, &api_https, api_host, &api_port, &path)))
            return err;
        if (!api_https && !o->allow_http)
            return "s3 backend: api_base http://... sends the API token unencrypted and needs "
                   "allow_http=1";
        size_t len = strlen(raw->api_base);
        while (len > 0 && raw->api_base[len - 1] == '/')
            len--;
        snprintf(o->api_base, sizeof(o->api_base), "%.*s", (int)len, raw->api_base);
    }
    switch (url_settle_timeouts(o->timeout_s, &o->connect_timeout_s, &o->stall_timeout_s,
                                S3_DEFAULT_CONNECT_TIMEOUT_S, S3_DEFAULT_STALL_TIMEOUT_S)) {
    case URL_CONNECT_TOO_LONG:
        return "s3 backend: connect_timeout must not be longer than timeout";
    case URL_STALL_TOO_LONG:
        return "s3 backend: stall_timeout must not be longer than timeout";
    case URL_TIMEOUTS_OK:
        break;
    }
    if (o->secret_access_key[0] && !o->access_key_id[0])
        return "s3 backend: secret_access_key needs access_key_id";
    if (o->session_token[0] && !o->secret_access_key[0])
        return "s3 backend: session_token needs access_key_id and secret_access_key";

    if (raw->path_style >= 0)
        o->path_style = raw->path_style;
    else
        o->path_style = o->flavor == S3_FLAVOR_R2 || is_ip_literal(o->host);
    if (!o->path_style && is_ip_literal(o->host))
        return "s3 backend: path_style=0 needs an endpoint with a host name, not an address";

    bool v6 = strchr(o->host, ':') != NULL;
    bool default_port = o->port == (o->https ? 443u : 80u);
    char port_s[8] = "";
    if (!default_port)
        snprintf(port_s, sizeof(port_s), ":%u", o->port);
    snprintf(o->host_header, sizeof(o->host_header), "%s%s%s%s", v6 ? "[" : "", o->host,
             v6 ? "]" : "", port_s);
    /* Rebuilt from its parts: the host lowercased, a default port left out. */
    n = snprintf(o->endpoint, sizeof(o->endpoint), "%s://%s", o->https ? "https" : "http",
                 o->host_header);
    if (n < 0 || (size_t)n >= sizeof(o->endpoint))
        return "s3 backend: endpoint too long";
    if (o->path_style) {
        snprintf(o->request_host, sizeof(o->request_host), "%s", o->host_header);
        snprintf(o->base_path, sizeof(o->base_path), "/%s", o->bucket);
    } else {
        snprintf(o->request_host, sizeof(o->request_host), "%s.%s", o->bucket, o->host_header);
        o->base_path[0] = '\0';
    }
    return NULL;
}

static const char *parse(const char *url, struct s3_opts *o)
{
    struct raw raw = {.o = o, .path_style = -1};
    const char *p, *end, *query, *err;
    char name[32], value[S3_MAX_SESSION_TOKEN];

    if (strncmp(url, "s3://", 5) == 0)
        o->flavor = S3_FLAVOR_S3;
    else if (strncmp(url, "r2://", 5) == 0)
        o->flavor = S3_FLAVOR_R2;
    else
        return "s3 backend: URL must start with s3:// or r2://";
    p = url + 5;
    end = p + strcspn(p, "/?#");
    if (*end == '#')
        return "s3 backend: the URL has a fragment ('#'); escape it as %23";
    if (!bucket_ok(p, (size_t)(end - p)))
        return "s3 backend: bucket name must be 3 to 63 of a-z, 0-9, '.' and '-', beginning and "
               "ending with a letter or digit (s3://BUCKET/PREFIX)";
    memcpy(o->bucket, p, (size_t)(end - p));
    o->bucket[end - p] = '\0';
    query = strchr(end, '?');
    if (strchr(end, '#'))
        return "s3 backend: the URL has a fragment ('#'); escape it as %23";
    if ((err = parse_prefix(o, end, query ? (size_t)(query - end) : strlen(end))))
        return err;
    if (query &&
        (err = url_each_param(query + 1, name, sizeof(name), value, sizeof(value), set_param, &raw,
                              "s3 backend: URL parameters are name=value, with good escapes and "
                              "values not too long")))
        return err;
    return finish(o, &raw);
}

int s3_parse_url(const char *url, struct s3_opts *o, const char **msg)
{
    memset(o, 0, sizeof(*o));
    o->timeout_s = S3_DEFAULT_TIMEOUT_S;
    o->connect_timeout_s = 0; /* unset: see finish() */
    o->stall_timeout_s = 0;
    o->connections = S3_DEFAULT_CONNECTIONS;
    o->temp_ttl_s = R2_DEFAULT_TEMP_TTL_S;
    if ((*msg = parse(url, o))) {
        s3_opts_clear(o);
        return -EINVAL;
    }
    return 0;
}

void s3_opts_clear(struct s3_opts *o)
{
    explicit_bzero(o, sizeof(*o));
}

void s3_describe(const struct s3_opts *o, char *out, size_t len)
{
    size_t used = 0;
    bool r2 = o->flavor == S3_FLAVOR_R2;

    if (len == 0)
        return;
    out[0] = '\0';
    url_append(out, len, &used, "%s://%s/", r2 ? "r2" : "s3", o->bucket);
    url_append_prefix(out, len, &used, o->prefix);
    url_append(out, len, &used, "?endpoint=%s&region=%s&path_style=%d", o->endpoint, o->region,
               o->path_style);
    if (r2)
        url_append(out, len, &used, "&account=%s&api_base=%s&temp_ttl=%u", o->account, o->api_base,
                   o->temp_ttl_s);
    if (o->allow_http)
        url_append(out, len, &used, "&allow_http=1");
    url_append(out, len, &used, "&timeout=%u&connect_timeout=%u&stall_timeout=%u&connections=%u",
               o->timeout_s, o->connect_timeout_s, o->stall_timeout_s, o->connections);
    if (o->storage_class[0])
        url_append(out, len, &used, "&storage_class=%s", o->storage_class);
    if (o->profile[0])
        url_append(out, len, &used, "&profile=%s", o->profile);
}
