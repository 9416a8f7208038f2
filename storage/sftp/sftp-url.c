/*
 * sftp://USER@HOST[:PORT]/PATH[?key=value&...]
 *
 * PATH is absolute on the server; "/~/PATH" is relative to the user's home
 * directory. USER, PATH and the values are percent-decoded. Parameters:
 *   key=FILE            private key (default: ssh-agent, then ~/.ssh/id_ed25519,
 *                       id_ecdsa, id_rsa)
 *   known_hosts=FILE    default ~/.ssh/known_hosts
 *   accept_new_host=1   record the key of a host known_hosts does not list
 *   connections=N       SSH sessions, 1..64 (default 4)
 *   timeout=MS          limit on each blocking SSH step (default 30000)
 *   keepalive=S         seconds between keepalives of an idle session (0: none)
 * A parameter given twice keeps its first value, so that what the URL says
 * wins over the [backend] keys that cairnd appends after it.
 */
#include "storage/sftp/sftp-int.h"
#include "storage/url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void home_path(char *out, size_t len, const char *rel)
{
    const char *home = getenv("HOME");
    snprintf(out, len, "%s/%s", home && *home ? home : ".", rel);
}

/* One "name=value" parameter; seen[] marks the ones already set. */
static const char *set_param(struct sftp_opts *o, const char *name, const char *value,
                             unsigned *seen)
{
    static const char *const names[] = {"key",         "known_hosts", "accept_new_host",
                                        "connections", "timeout",     "keepalive"};
    unsigned long n;
    unsigned i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(name, names[i]) == 0)
            break;
    }
    if (i == sizeof(names) / sizeof(names[0]))
        return "unknown sftp URL parameter (known: key, known_hosts, accept_new_host, "
               "connections, timeout, keepalive)";
    if (*seen & (1u << i))
        return NULL;
    *seen |= 1u << i;
    switch (i) {
    case 0:
    case 1: {
        char *dst = i == 0 ? o->key : o->known_hosts;
        if (!*value || strlen(value) >= SFTP_MAX_PATH)
            return "sftp key or known_hosts path is empty or too long";
        snprintf(dst, SFTP_MAX_PATH, "%s", value);
        return NULL;
    }
    case 2:
        if (strcmp(value, "0") && strcmp(value, "1"))
            return "sftp accept_new_host must be 0 or 1";
        o->accept_new_host = value[0] == '1';
        return NULL;
    case 3:
        if (url_parse_uint(value, 1, SFTP_MAX_CONNECTIONS, &n))
            return "sftp connections must be between 1 and 64";
        o->connections = (unsigned)n;
        return NULL;
    case 4:
        if (url_parse_uint(value, 100, 3600000, &n))
            return "sftp timeout must be between 100 and 3600000 (milliseconds)";
        o->timeout_ms = (uint32_t)n;
        return NULL;
    default:
        if (url_parse_uint(value, 0, 86400, &n))
            return "sftp keepalive must be between 0 and 86400 (seconds)";
        o->keepalive_s = (unsigned)n;
        return NULL;
    }
}

static const char *parse_query(struct sftp_opts *o, const char *q)
{
    unsigned seen = 0;
    char name[32], value[SFTP_MAX_PATH];
    const char *err;
    int r;

    while ((r = url_next_param(&q, name, sizeof(name), value, sizeof(value))) > 0) {
        if ((err = set_param(o, name, value, &seen)))
            return err;
    }
    return r < 0 ? "sftp URL parameters are name=value, with good escapes and not too long" : NULL;
}

/* HOST or [V6] then an optional :PORT, in s[0..n). */
static const char *parse_host(struct sftp_opts *o, const char *s, size_t n)
{
    const char *host = s, *port = NULL;
    size_t host_len;
    unsigned long p;

    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close)
            return "unclosed [ in the sftp host";
        host = s + 1;
        host_len = (size_t)(close - host);
        if (close + 1 < s + n) {
            if (close[1] != ':')
                return "junk after ] in the sftp host";
            port = close + 2;
        }
    } else {
        const char *colon = memchr(s, ':', n);
        host_len = colon ? (size_t)(colon - s) : n;
        port = colon ? colon + 1 : NULL;
    }
    if (host_len == 0 || host_len >= sizeof(o->host))
        return "sftp URL needs a host";
    memcpy(o->host, host, host_len);
    o->host[host_len] = '\0';
    if (port) {
        char digits[8];
        size_t plen = (size_t)(s + n - port);
        if (plen == 0 || plen >= sizeof(digits))
            return "bad sftp port";
        memcpy(digits, port, plen);
        digits[plen] = '\0';
        if (url_parse_uint(digits, 1, 65535, &p))
            return "bad sftp port";
        o->port = (unsigned)p;
    }
    return NULL;
}

int sftp_parse_url(const char *url, struct sftp_opts *o, const char **msg)
{
    const char *p, *at, *slash, *query;
    char path[SFTP_MAX_PATH];
    size_t path_len;

    memset(o, 0, sizeof(*o));
    o->port = SFTP_DEFAULT_PORT;
    o->connections = SFTP_DEFAULT_CONNECTIONS;
    o->timeout_ms = SFTP_DEFAULT_TIMEOUT_MS;
    o->keepalive_s = SFTP_DEFAULT_KEEPALIVE_S;
    if (strncmp(url, "sftp://", 7) != 0) {
        *msg = "sftp URL must start with sftp://";
        return -EINVAL;
    }
    p = url + 7;
    slash = p + strcspn(p, "/?");
    at = memchr(p, '@', (size_t)(slash - p));
    if (!at || at == p || url_decode(p, (size_t)(at - p), o->user, sizeof(o->user))) {
        *msg = "sftp URL needs a user: sftp://USER@HOST[:PORT]/PATH";
        return -EINVAL;
    }
    if ((*msg = parse_host(o, at + 1, (size_t)(slash - at - 1))))
        return -EINVAL;
    if (*slash != '/') {
        *msg = "sftp URL needs a path: sftp://USER@HOST[:PORT]/PATH";
        return -EINVAL;
    }
    query = strchr(slash, '?');
    path_len = query ? (size_t)(query - slash) : strlen(slash);
    if (url_decode(slash, path_len, path, sizeof(path))) {
        *msg = "bad escape or path too long in the sftp URL";
        return -EINVAL;
    }
    /* Trailing slashes are dropped, except the root's own. */
    for (size_t n = strlen(path); n > 1 && path[n - 1] == '/'; n--)
        path[n - 1] = '\0';
    if (strcmp(path, "/~") == 0 || strncmp(path, "/~/", 3) == 0)
        snprintf(o->root, sizeof(o->root), "%s", path[2] ? path + 3 : ".");
    else
        snprintf(o->root, sizeof(o->root), "%s", path);
    if (query && (*msg = parse_query(o, query + 1)))
        return -EINVAL;
    if (!o->known_hosts[0])
        home_path(o->known_hosts, sizeof(o->known_hosts), ".ssh/known_hosts");
    return 0;
}

int sftp_path(const struct sftp_opts *o, const char *key, char *out, size_t len)
{
    size_t rl = strlen(o->root);
    int n = snprintf(out, len, "%s%s%s", o->root, rl && o->root[rl - 1] == '/' ? "" : "/", key);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
