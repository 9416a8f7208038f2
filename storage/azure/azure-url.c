/*
 * azure:// URLs (the options are documented in azure-url.h): the account,
 * container and prefix, then the parameters as plain values, then the
 * checks that involve several of them. The endpoint is settled apart
 * (az_set_endpoint), once the credentials have said whether a connection
 * string names one.
 */
#include "storage/azure/azure-url.h"
#include "storage/url.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum param {
    P_ENDPOINT,
    P_ALLOW_HTTP,
    P_TIMEOUT,
    P_CONNECT_TIMEOUT,
    P_STALL_TIMEOUT,
    P_CONNECTIONS,
    P_ACCOUNT_KEY,
    P_SAS,
    P_COUNT,
};

static const char *const param_names[P_COUNT] = {
    "endpoint",      "allow_http",  "timeout",     "connect_timeout",
    "stall_timeout", "connections", "account_key", "sas",
};

#define DIGITS "0123456789"
#define LOWER "abcdefghijklmnopqrstuvwxyz"
#define UPPER "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

static bool all_of(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++) {
        if (!s[i] || !strchr(set, s[i]))
            return false;
    }
    return true;
}

struct raw {
    struct az_opts *o;
    unsigned seen;
};

static const char *set_param(void *ctx, const char *name, const char *v)
{
    struct raw *raw = ctx;
    struct az_opts *o = raw->o;
    unsigned i = url_param_index(name, param_names, P_COUNT);

    if (i == P_COUNT)
        return "azure backend: unknown URL parameter (known: endpoint, allow_http, timeout, "
               "connect_timeout, stall_timeout, connections, account_key, sas)";
    if (raw->seen & (1u << i))
        return NULL;
    raw->seen |= 1u << i;
    switch ((enum param)i) {
    case P_ENDPOINT:
        if (!*v || strlen(v) >= sizeof(o->endpoint_raw))
            return "azure backend: endpoint is empty or too long";
        memcpy(o->endpoint_raw, v, strlen(v) + 1);
        return NULL;
    case P_ALLOW_HTTP:
        return url_parse_flag(v, &o->allow_http) ? "azure backend: allow_http must be 0 or 1"
                                                 : NULL;
    case P_TIMEOUT:
        return url_parse_count(v, AZ_MAX_TIMEOUT_S, &o->timeout_s)
                   ? "azure backend: timeout must be between 1 and 86400 (seconds)"
                   : NULL;
    case P_CONNECT_TIMEOUT:
        return url_parse_count(v, AZ_MAX_TIMEOUT_S, &o->connect_timeout_s)
                   ? "azure backend: connect_timeout must be between 1 and 86400 (seconds)"
                   : NULL;
    case P_STALL_TIMEOUT:
        return url_parse_count(v, AZ_MAX_TIMEOUT_S, &o->stall_timeout_s)
                   ? "azure backend: stall_timeout must be between 1 and 86400 (seconds)"
                   : NULL;
    case P_CONNECTIONS:
        return url_parse_count(v, AZ_MAX_CONNECTIONS, &o->connections)
                   ? "azure backend: connections must be between 1 and 256"
                   : NULL;
    case P_ACCOUNT_KEY:
        return url_copy_secret(o->account_key, sizeof(o->account_key), v)
                   ? "azure backend: account_key is empty, too long or has spaces"
                   : NULL;
    case P_SAS:
        /* A token copied with its '?' works as well. */
        return url_copy_secret(o->sas, sizeof(o->sas), v[0] == '?' ? v + 1 : v)
                   ? "azure backend: sas is empty, too long or has spaces"
                   : NULL;
    case P_COUNT:
        break;
    }
    return "azure backend: unknown URL parameter";
}

/* Azure's rule (3 to 24 of a-z, 0-9), and Azurite's devstoreaccount1 fits it too. */
static bool account_ok(const char *s, size_t n)
{
    return n >= 3 && n <= 24 && all_of(s, n, LOWER DIGITS);
}

/* 3 to 63 of a-z, 0-9 and '-', a letter or digit at both ends, no "--". */
static bool container_ok(const char *s, size_t n)
{
    if (n < 3 || n > 63 || !all_of(s, n, LOWER DIGITS "-") || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] == '-' && s[i + 1] == '-')
            return false;
    }
    return true;
}

static const char *parse_prefix(struct az_opts *o, const char *s, size_t n)
{
    switch (url_parse_prefix(s, n, o->prefix, sizeof(o->prefix))) {
    case URL_PREFIX_OK:
        return NULL;
    case URL_PREFIX_ESCAPE:
        return "azure backend: bad escape or prefix too long in the URL";
    case URL_PREFIX_EMPTY_SEG:
        return "azure backend: the prefix has an empty segment (\"//\")";
    case URL_PREFIX_DOT_SEG:
        return "azure backend: the prefix has a \".\" or \"..\" segment, which HTTP clients "
               "remove from the path they send";
    case URL_PREFIX_TEXT:
        break;
    }
    return "azure backend: the prefix must be UTF-8 without control characters";
}

int az_set_endpoint(struct az_opts *o, const char *url, bool http_ok, const char **msg)
{
    char dflt[AZ_MAX_URL];
    const char *h, *end, *path;
    size_t host_len, path_len;
    int n;

    if (!url || !*url) {
        snprintf(dflt, sizeof(dflt), "https://%s.blob.core.windows.net", o->account);
        url = dflt;
    }
    if (strncmp(url, "https://", 8) == 0)
        o->https = true, h = url + 8;
    else if (strncmp(url, "http://", 7) == 0)
        o->https = false, h = url + 7;
    else
        return *msg = "azure backend: endpoint must start with http:// or https://", -EINVAL;
    end = h + strcspn(h, "/?#");
    host_len = (size_t)(end - h);
    if (*end == '?' || *end == '#' || strpbrk(end, "?#"))
        return *msg = "azure backend: endpoint takes no query or fragment", -EINVAL;
    if (host_len == 0 || host_len >= AZ_MAX_HOST)
        return *msg = "azure backend: endpoint needs a host", -EINVAL;
    if (h[0] == '[' ? !all_of(h + 1, host_len - 1, DIGITS "abcdefABCDEF:.[]]")
                    : !all_of(h, host_len, LOWER UPPER DIGITS ".-_:"))
        return *msg = "azure backend: endpoint host has characters a host name cannot have",
               -EINVAL;
    path = end;
    path_len = strlen(path);
    while (path_len > 0 && path[path_len - 1] == '/')
        path_len--;
    /* The path is sent and signed as given: only characters that need no escape. */
    if (!all_of(path, path_len, LOWER UPPER DIGITS "/-._~") || memmem(path, path_len, "//", 2))
        return *msg = "azure backend: endpoint path must be plain /segments (a-z, 0-9, -._~)",
               -EINVAL;
    if (!o->https && !o->allow_http && !http_ok)
        return *msg = "azure backend: endpoint http://... sends requests unencrypted and needs "
                      "allow_http=1",
               -EINVAL;
    n = snprintf(o->endpoint, sizeof(o->endpoint), "%s://%.*s%.*s", o->https ? "https" : "http",
                 (int)host_len, h, (int)path_len, path);
    if (n < 0 || (size_t)n >= sizeof(o->endpoint))
        return *msg = "azure backend: endpoint too long", -EINVAL;
    for (char *c = o->endpoint; c < o->endpoint + (o->https ? 8 : 7) + host_len; c++) {
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    }
    memcpy(o->base_path, path, path_len);
    o->base_path[path_len] = '\0';
    return 0;
}

static const char *parse(const char *url, struct az_opts *o)
{
    struct raw raw = {.o = o};
    const char *p, *end, *query, *err;
    char name[32], value[AZ_MAX_SAS + 4];

    if (strncmp(url, "azure://", 8) != 0)
        return "azure backend: URL must start with azure://";
    p = url + 8;
    if (strchr(p, '#'))
        return "azure backend: the URL has a fragment ('#'); escape it as %23";
    end = p + strcspn(p, "/?");
    if (!account_ok(p, (size_t)(end - p)))
        return "azure backend: the account must be 3 to 24 of a-z and 0-9 "
               "(azure://ACCOUNT/CONTAINER[/PREFIX])";
    memcpy(o->account, p, (size_t)(end - p));
    o->account[end - p] = '\0';
    if (*end != '/')
        return "azure backend: the URL needs a container (azure://ACCOUNT/CONTAINER[/PREFIX])";
    p = end + 1;
    end = p + strcspn(p, "/?");
    if (!container_ok(p, (size_t)(end - p)))
        return "azure backend: the container must be 3 to 63 of a-z, 0-9 and '-', beginning and "
               "ending with a letter or digit, without \"--\"";
    memcpy(o->container, p, (size_t)(end - p));
    o->container[end - p] = '\0';
    query = strchr(end, '?');
    if ((err = parse_prefix(o, end, query ? (size_t)(query - end) : strlen(end))))
        return err;
    if (query &&
        (err = url_each_param(query + 1, name, sizeof(name), value, sizeof(value), set_param, &raw,
                              "azure backend: URL parameters are name=value, with good escapes "
                              "and values not too long")))
        return err;
    switch (url_settle_timeouts(o->timeout_s, &o->connect_timeout_s, &o->stall_timeout_s,
                                AZ_DEFAULT_CONNECT_TIMEOUT_S, AZ_DEFAULT_STALL_TIMEOUT_S)) {
    case URL_CONNECT_TOO_LONG:
        return "azure backend: connect_timeout must not be longer than timeout";
    case URL_STALL_TOO_LONG:
        return "azure backend: stall_timeout must not be longer than timeout";
    case URL_TIMEOUTS_OK:
        break;
    }
    if (o->account_key[0] && o->sas[0])
        return "azure backend: give account_key or sas, not both";
    return NULL;
}

int az_parse_url(const char *url, struct az_opts *o, const char **msg)
{
    memset(o, 0, sizeof(*o));
    o->timeout_s = AZ_DEFAULT_TIMEOUT_S;
    o->connections = AZ_DEFAULT_CONNECTIONS;
    if ((*msg = parse(url, o))) {
        az_opts_clear(o);
        return -EINVAL;
    }
    return 0;
}

void az_opts_clear(struct az_opts *o)
{
    explicit_bzero(o, sizeof(*o));
}

void az_describe(const struct az_opts *o, char *out, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return;
    out[0] = '\0';
    url_append(out, len, &used, "azure://%s/%s/", o->account, o->container);
    url_append_prefix(out, len, &used, o->prefix);
    url_append(out, len, &used, "?endpoint=%s", o->endpoint);
    if (o->allow_http)
        url_append(out, len, &used, "&allow_http=1");
    url_append(out, len, &used, "&timeout=%u&connect_timeout=%u&stall_timeout=%u&connections=%u",
               o->timeout_s, o->connect_timeout_s, o->stall_timeout_s, o->connections);
}
