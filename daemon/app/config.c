#include "daemon/app/config.h"
#include "daemon/app/config-flags.h"

#include <errno.h>
#include <pwd.h>
#include <ini.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compress/compress.h"
#include "compress/cdc.h"
#include "daemon/net/net.h"
#include "daemon/store/store.h"
#include "proto/util.h"

struct ini_state {
    struct config *cfg;
    FILE *file;
    int lineno; /* counted by read_line: Debian's inih does not pass line numbers */
    const char *path;
    char *err;
    size_t err_len;
    bool failed;
    mode_t mode; /* of the open file, for secrets_exposed() */
};

/* The [backend] keys (and URL parameters) that hold secrets. */
static const char *const secret_keys[] = {"secret_access_key", "session_token", "api_token",
                                          "account_key", "sas"};

static const char *secret_key(const char *key, size_t len)
{
    for (size_t i = 0; i < ARRAY_SIZE(secret_keys); i++)
        if (len == strlen(secret_keys[i]) && strncmp(key, secret_keys[i], len) == 0)
            return secret_keys[i];
    return NULL;
}

bool config_is_secret(const char *section, const char *key)
{
    return strcmp(section, "backend") == 0 && secret_key(key, strlen(key));
}

/*
 * Whether an sftp URL holds a password (sftp://USER:PASSWORD@HOST): cairn
 * logs in by key only, and would take "USER:PASSWORD" for the user name and
 * show it wherever the URL goes.
 */
static bool url_has_password(const char *url)
{
    size_t end;

    if (strncmp(url, "sftp://", 7) != 0)
        return false;
    url += 7;
    end = strcspn(url, "/?");
    const char *at = memchr(url, '@', end);
    return at && memchr(url, ':', (size_t)(at - url));
}

/* The first secret-bearing parameter in a backend URL's query, or NULL. */
static const char *url_secret(const char *url)
{
    const char *p = strchr(url, '?'), *key;

    while (p && *p) {
        size_t len = strcspn(++p, "=&");
        if ((key = secret_key(p, len)))
            return key;
        p = strchr(p, '&');
    }
    return NULL;
}

/*
 * A secret may only sit in a file that nobody but its owner can read or
 * change: otherwise every local user has the bucket. Refused rather than
 * warned about, as ssh does for a private key.
 */
static const char *secrets_exposed(const struct ini_state *st, const char *section, const char *key,
                                   const char *value)
{
    bool secret = config_is_secret(section, key) ||
                  (strcmp(section, "backend") == 0 && strcmp(key, "url") == 0 && url_secret(value));

    if (!secret || !(st->mode & 077))
        return NULL;
    return "this file holds a secret but group or others may read or write it; "
           "chmod 600 it (or chmod go= it)";
}

/* Appends "&key=value" to a URL query, the value percent-encoded; unchanged and -1 when it does not
 * fit. */
static int append_param(char *dst, size_t dst_len, const char *key, const char *value)
{
    size_t start = strlen(dst), n = start;
    int w = snprintf(dst + n, dst_len - n, "&%s=", key);

    if (w < 0 || (size_t)w >= dst_len - n) {
        dst[start] = '\0';
        return -1;
    }
    n += (size_t)w;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("-._~/", *p);
        if (n + (plain ? 1 : 3) >= dst_len) {
            dst[start] = '\0';
            return -1;
        }
        if (plain)
            dst[n++] = (char)*p;
        else
            n += (size_t)snprintf(dst + n, 4, "%%%02X", *p);
    }
    dst[n] = '\0';
    return 0;
}

static int copy_str(char *dst, size_t dst_len, const char *src)
{
    size_t n = strlen(src);
    if (n == 0 || n >= dst_len)
        return -EINVAL;
    memcpy(dst, src, n + 1);
    return 0;
}

/* Parses a byte size with an optional K or M suffix (powers of 1024). */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || s[0] == '-')
        return -EINVAL;
    unsigned long long unit = 1;
    if (*end == 'K' || *end == 'k')
        unit = 1024, end++;
    else if (*end == 'M' || *end == 'm')
        unit = 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        unit = 1024ull * 1024 * 1024, end++;
    if (*end != '\0' || v > SIZE_MAX / unit)
        return -EINVAL;
    v *= unit;
    *out = (size_t)v;
    return 0;
}

/*
 * Parses a duration: a whole number and a unit, ms, s, m, h or d (no unit:
 * seconds), into milliseconds; up to max_ms.
 */
static int parse_duration(const char *s, uint64_t max_ms, uint64_t *out)
{
    static const struct {
        const char *unit;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);

    if (errno || end == s || s[0] == '-')
        return -EINVAL;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (v > max_ms / units[i].ms)
                return -EINVAL;
            *out = v * units[i].ms;
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

/*
 * Applies one setting. Returns NULL on success or a description of what is
 * wrong. Shared by the INI file and the flags so both validate the same way.
 */
static const char *apply(struct config *cfg, const char *section, const char *key,
                         const char *value)
{
    unsigned u;
    size_t sz;

    if (strcmp(section, "daemon") == 0) {
        if (strcmp(key, "socket") == 0)
            return copy_str(cfg->socket_path, sizeof(cfg->socket_path), value)
                       ? "socket path is empty or too long (max 107 bytes)"
                       : NULL;
        if (strcmp(key, "log_level") == 0)
            return log_level_parse(value, &cfg->log_level)
                       ? "log_level must be error, warn, info or debug"
                       : NULL;
        if (strcmp(key, "max_connections") == 0) {
            if (parse_uint(value, 1, 1000000, &u))
                return "max_connections must be between 1 and 1000000";
            cfg->max_connections = u;
            return NULL;
        }
        if (strcmp(key, "client_timeout") == 0) {
            uint64_t ms;
            if (parse_duration(value, 86400000, &ms))
                return "client_timeout must be a duration such as 60s, at most a day (0: never)";
            cfg->client_timeout_ms = ms;
            return NULL;
        }
        if (strcmp(key, "connection_memory") == 0) {
            if (parse_size(value, &sz) || sz < 4u * 1024 * 1024 || sz > 64ull * 1024 * 1024 * 1024)
                return "connection_memory must be between 4M and 65536M";
            cfg->connection_memory = sz;
            return NULL;
        }
        if (strcmp(key, "metrics_listen") == 0) {
            struct sockaddr_storage sa;
            int r;
            if (!value[0]) {
                cfg->metrics_listen[0] = '\0';
                return NULL;
            }
            if ((r = metrics_addr_parse(value, &sa)) < 0 ||
                copy_str(cfg->metrics_listen, sizeof(cfg->metrics_listen), value))
                return r == -EPERM ? "metrics_listen must be a loopback address (127.0.0.1:PORT, "
                                     "[::1]:PORT or localhost:PORT)"
                                   : "metrics_listen must be HOST:PORT, such as 127.0.0.1:9464";
            return NULL;
        }
        if (strcmp(key, "threads") == 0) {
            if (parse_uint(value, 0, 128, &u))
                return "threads must be between 0 (automatic) and 128";
            cfg->threads = u;
            return NULL;
        }
    } else if (strcmp(section, "store") == 0) {
        if (strcmp(key, "data_dir") == 0)
            return copy_str(cfg->data_dir, sizeof(cfg->data_dir), value)
                       ? "data_dir is empty or too long"
                       : NULL;
        if (strcmp(key, "compression_level") == 0) {
            if (parse_uint(value, 1, 19, &u))
                return "compression_level must be between 1 and 19";
            cfg->compression_level = (int)u;
            return NULL;
        }
        if (strcmp(key, "pack_size") == 0) {
            if (parse_size(value, &sz) || sz < 1024u * 1024 || sz > 1024u * 1024 * 1024)
                return "pack_size must be between 1M and 1024M";
            cfg->pack_size = sz;
            return NULL;
        }
        if (strcmp(key, "repack_threshold") == 0) {
            if (parse_uint(value, 1, 100, &u))
                return "repack_threshold must be a percentage from 1 to 100";
            cfg->repack_threshold = u;
            return NULL;
        }
        if (strcmp(key, "refresh_interval") == 0) {
            uint64_t ms;
            if (parse_duration(value, 86400000, &ms))
                return "refresh_interval must be a duration such as 5s or 500ms, at most a day "
                       "(0: only when asked)";
            cfg->refresh_interval_ms = ms;
            return NULL;
        }
        if (strcmp(key, "max_clock_skew") == 0) {
            uint64_t ms;
            if (parse_duration(value, 86400000, &ms))
                return "max_clock_skew must be a duration such as 60s or 5m, at most a day "
                       "(0: not checked)";
            cfg->max_clock_skew_ms = ms;
            return NULL;
        }
        if (strcmp(key, "gc_grace") == 0) {
            uint64_t ms;
            if (parse_duration(value, 30ull * 86400000, &ms) || ms < 1000)
                return "gc_grace must be a duration such as 1h or 30m, from 1s to 30d";
            cfg->gc_grace_ms = ms;
            return NULL;
        }
        if (strcmp(key, "cache_size") == 0) {
            /* A read decodes a whole block (up to 1 MiB): the cache must hold a few. */
            if (parse_size(value, &sz) || sz < 4u * 1024 * 1024 || sz > 64ull * 1024 * 1024 * 1024)
                return "cache_size must be between 4M and 65536M";
            cfg->cache_size = sz;
            return NULL;
        }
        if (strcmp(key, "encryption") == 0) {
            if (strcmp(value, "on") == 0 || strcmp(value, "aes-256-gcm") == 0)
                cfg->encryption = CONFIG_ENC_ON;
            else if (strcmp(value, "off") == 0)
                cfg->encryption = CONFIG_ENC_OFF;
            else
                return "encryption must be on, aes-256-gcm or off";
            return NULL;
        }
        if (strcmp(key, "password_file") == 0)
            return copy_str(cfg->password_file, sizeof(cfg->password_file), value)
                       ? "password_file is empty or too long"
                       : NULL;
        if (strcmp(key, "password_command") == 0)
            return copy_str(cfg->password_command, sizeof(cfg->password_command), value)
                       ? "password_command is empty or too long"
                       : NULL;
        if (strcmp(key, "read_cache_dir") == 0)
            return copy_str(cfg->read_cache_dir, sizeof(cfg->read_cache_dir), value)
                       ? "read_cache_dir is empty or too long"
                       : NULL;
        if (strcmp(key, "read_cache_size") == 0) {
            if (strcmp(value, "auto") == 0) {
                cfg->read_cache_auto = true;
                return NULL;
            }
            if (parse_size(value, &sz) || (sz != 0 && sz < 8u * 1024 * 1024) ||
                sz > 1024ull * 1024 * 1024 * 1024)
                return "read_cache_size must be auto, 0 (no read cache), or between 8M and 1024G";
            cfg->read_cache_auto = false;
            cfg->read_cache_size = sz;
            return NULL;
        }
        if (strcmp(key, "chunk_min") == 0 || strcmp(key, "chunk_avg") == 0 ||
            strcmp(key, "chunk_max") == 0) {
            if (parse_size(value, &sz) || sz < STORE_MIN_CHUNK || sz > STORE_MAX_CHUNK)
                return "chunk sizes must be between 64 and 1M";
            if (key[6] == 'm' && key[7] == 'i')
                cfg->chunk_min = sz;
            else if (key[6] == 'a')
                cfg->chunk_avg = sz;
            else
                cfg->chunk_max = sz;
            return NULL;
        }
    } else if (strcmp(section, "search") == 0) {
        if (strcmp(key, "max_text") == 0) {
            if (parse_size(value, &sz) || sz > 1024u * 1024 * 1024)
                return "max_text must be between 0 and 1024M";
            cfg->max_text = sz;
            return NULL;
        }
    } else if (strcmp(section, "backend") == 0) {
        /* sftp's, then s3's and r2's, then azure's (storage/sftp/sftp-url.c,
         * storage/s3/s3-url.h, storage/azure/azure-url.h). */
        static const char *const remote_keys[] = {
            "key",
            "known_hosts",
            "accept_new_host",
            "connections",
            "timeout",
            "keepalive",
            "endpoint",
            "region",
            "path_style",
            "allow_http",
            "connect_timeout",
            "stall_timeout",
            "storage_class",
            "profile",
            "access_key_id",
            "secret_access_key",
            "session_token",
            "account",
            "api_base",
            "api_token",
            "temp_ttl",
            "account_key",
            "sas",
        };
        if (strcmp(key, "url") == 0)
            return copy_str(cfg->backend_url, sizeof(cfg->backend_url), value)
                       ? "backend url is empty or too long"
                       : NULL;
        for (size_t i = 0; i < sizeof(remote_keys) / sizeof(remote_keys[0]); i++) {
            if (strcmp(key, remote_keys[i]) == 0)
                return append_param(cfg->backend_params, sizeof(cfg->backend_params), key, value)
                           ? "too many or too long [backend] options"
                           : NULL;
        }
    } else {
        return "unknown section";
    }
    return "unknown key";
}

/*
 * Feeds inih one line at a time, counting lines (Debian's inih does not pass
 * line numbers) and refusing what inih would silently misread: lines longer
 * than its buffer, which it would split, and leading whitespace, which it
 * would take as the continuation of the previous value.
 */
static char *read_line(char *str, int num, void *stream)
{
    struct ini_state *st = stream;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;

    if (st->failed)
        return NULL;
    len = getline(&line, &cap, st->file);
    if (len < 0) {
        free(line);
        return NULL;
    }
    st->lineno++;
    const char *text = line + strspn(line, " \t");
    if ((ssize_t)strlen(text) >= num) {
        snprintf(st->err, st->err_len, "%s:%d: line longer than %d bytes", st->path, st->lineno,
                 num - 2);
        st->failed = true;
        free(line);
        return NULL;
    }
    /* inih would go on in the section before and blame a later line. */
    if (text[0] == '[' && !strchr(text, ']')) {
        snprintf(st->err, st->err_len, "%s:%d: a section header ends with ']'", st->path,
                 st->lineno);
        st->failed = true;
        free(line);
        return NULL;
    }
    memcpy(str, text, strlen(text) + 1);
    free(line);
    return str;
}

/* "64MB", "512 KiB": a size in a spelling this file does not take (sizes are 64M, 512K). */
static bool size_spelled_otherwise(const char *v)
{
    static const char *const units[] = {"b", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib"};
    size_t digits = strspn(v, "0123456789");
    const char *u = v + digits + strspn(v + digits, " ");

    if (digits == 0 || !*u)
        return false;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcasecmp(u, units[i]) == 0)
            return true;
    return false;
}

/* apply(), with a word on sizes spelled as this file does not take them. */
static const char *apply_value(struct config *cfg, const char *section, const char *key,
                               const char *value)
{
    const char *problem = apply(cfg, section, key, value);

    if (problem && size_spelled_otherwise(value))
        return "sizes are written 64M, 512K or 2G (K, M and G are 1024, 1024^2 and 1024^3 "
               "bytes), not with B, KB, MB, KiB or MiB";
    return problem;
}

static int on_ini_entry(void *user, const char *section, const char *key, const char *value)
{
    struct ini_state *st = user;
    int lineno = st->lineno;
    const char *problem;

    if (st->failed)
        return 0;
    if (!key) /* a section header alone */
        problem = (strcmp(section, "daemon") && strcmp(section, "store") &&
                   strcmp(section, "search") && strcmp(section, "backend"))
                      ? "unknown section"
                      : NULL;
    else if (!(problem = secrets_exposed(st, section, key, value)))
        problem = apply_value(st->cfg, section, key, value);
    if (problem) {
        snprintf(st->err, st->err_len, "%s:%d: [%s] %s%s%s", st->path, lineno, section,
                 key ? key : "", key ? ": " : "", problem);
        st->failed = true;
        return 0;
    }
    if (key) {
        char from[sizeof(st->cfg->origins[0].from)];
        snprintf(from, sizeof(from), "%s:%d", st->path, lineno);
        config_note_origin(st->cfg, section, key, from);
    }
    return 1;
}

static void set_defaults(struct config *cfg)
{
    const char *xdg_runtime = getenv("XDG_RUNTIME_DIR");
    const char *xdg_data = getenv("XDG_DATA_HOME");
    const char *xdg_config = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    struct passwd *pw;

    /*
     * Without HOME (cron, su, some containers) the user database says where
     * home is. Never a shared directory such as /tmp: another user could
     * make the data directory there first. No home at all leaves the data
     * directory unset, which config_load() refuses unless one is given.
     */
    if (!home || !home[0])
        home = (pw = getpwuid(getuid())) && pw->pw_dir[0] ? pw->pw_dir : NULL;
    memset(cfg, 0, sizeof(*cfg));
    if (xdg_runtime && xdg_runtime[0] == '/')
        snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s/cairn/cairnd.sock", xdg_runtime);
    else
        snprintf(cfg->socket_path, sizeof(cfg->socket_path), "/tmp/cairn-%u/cairnd.sock",
                 (unsigned)getuid());
    if (xdg_data && xdg_data[0] == '/')
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/cairn", xdg_data);
    else if (home)
        snprintf(cfg->data_dir, sizeof(cfg->data_dir), "%s/.local/share/cairn", home);
    if (xdg_config && xdg_config[0] == '/')
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s/cairn/cairn.conf", xdg_config);
    else if (home)
        snprintf(cfg->config_path, sizeof(cfg->config_path), "%s/.config/cairn/cairn.conf", home);
    snprintf(cfg->backend_url, sizeof(cfg->backend_url), "local");
    cfg->log_level = LOG_LEVEL_INFO;
    cfg->compression_level = COMPRESS_DEFAULT_LEVEL;
    cfg->chunk_min = CDC_DEFAULT_MIN;
    cfg->chunk_avg = CDC_DEFAULT_AVG;
    cfg->chunk_max = CDC_DEFAULT_MAX;
    cfg->max_text = 16 * 1024 * 1024;
    cfg->pack_size = 16 * 1024 * 1024;
    cfg->repack_threshold = 50;
    cfg->refresh_interval_ms = 5000;
    cfg->gc_grace_ms = 3600000;
    cfg->max_clock_skew_ms = 60000;
    cfg->cache_size = 64 * 1024 * 1024;
    cfg->read_cache_auto = true;
    cfg->max_connections = 4096;
    cfg->client_timeout_ms = 60000;
    cfg->connection_memory = 64 * 1024 * 1024;
    cfg->threads = 0;
}

/*
 * A relative data directory (from a flag, the environment or the file) is
 * below the working directory cairnd was started in, as in format 1. It is
 * made absolute here, once, before anything else: the local backend only
 * takes absolute paths, and no later step may depend on the working
 * directory.
 */
static int absolute_data_dir(struct config *cfg, char *err, size_t err_len)
{
    char cwd[PATH_MAX], joined[sizeof(cfg->data_dir)];
    const char *rel = cfg->data_dir;
    int n;

    if (rel[0] == '/')
        return 0;
    if (!getcwd(cwd, sizeof(cwd))) {
        snprintf(err, err_len, "data dir %s is relative, but the working directory is unknown: %s",
                 rel, strerror(errno));
        return CONFIG_E_INVALID;
    }
    /* "./x" and "." name the same as "x" and the working directory. */
    while (rel[0] == '.' && rel[1] == '/')
        rel += 2 + strspn(rel + 2, "/");
    if (strcmp(rel, ".") == 0)
        rel = "";
    n = snprintf(joined, sizeof(joined), "%s%s%s", cwd, rel[0] && strcmp(cwd, "/") ? "/" : "", rel);
    if (n < 0 || (size_t)n >= sizeof(joined)) {
        snprintf(err, err_len, "data dir too long below the working directory %s: %s", cwd,
                 cfg->data_dir);
        return CONFIG_E_INVALID;
    }
    memcpy(cfg->data_dir, joined, (size_t)n + 1);
    return 0;
}

/* The read cache's directory: DATA_DIR/read-cache, or a path of its own (a relative one below
 * DATA_DIR). */
static int read_cache_path(struct config *cfg, char *err, size_t err_len)
{
    char joined[sizeof(cfg->read_cache_dir)];
    int n;

    if (cfg->read_cache_dir[0] == '/')
        return 0;
    n = snprintf(joined, sizeof(joined), "%s/%s", cfg->data_dir,
                 cfg->read_cache_dir[0] ? cfg->read_cache_dir : "read-cache");
    if (n < 0 || (size_t)n >= sizeof(joined)) {
        snprintf(err, err_len, "read_cache_dir too long below the data dir %s", cfg->data_dir);
        return CONFIG_E_INVALID;
    }
    memcpy(cfg->read_cache_dir, joined, (size_t)n + 1);
    return 0;
}

static int apply_checked(struct config *cfg, const char *section, const char *key,
                         const char *value, const char *origin, char *err, size_t err_len)
{
    const char *problem = apply_value(cfg, section, key, value);
    if (problem) {
        snprintf(err, err_len, "%s: %s", origin, problem);
        return CONFIG_E_INVALID;
    }
    config_note_origin(cfg, section, key, origin);
    return 0;
}

void config_note_origin(struct config *cfg, const char *section, const char *key, const char *from)
{
    char name[sizeof(cfg->origins[0].key)];
    unsigned i;

    snprintf(name, sizeof(name), "%s.%s", section, key);
    for (i = 0; i < cfg->norigins; i++) {
        if (strcmp(cfg->origins[i].key, name) == 0)
            break;
    }
    if (i == CONFIG_ORIGINS)
        return;
    if (i == cfg->norigins)
        cfg->norigins++;
    snprintf(cfg->origins[i].key, sizeof(cfg->origins[i].key), "%s", name);
    snprintf(cfg->origins[i].from, sizeof(cfg->origins[i].from), "%s", from);
}

int config_load(struct config *cfg, int argc, char **argv, char *err, size_t err_len)
{
    struct flags fl;
    const char *env, *secret;
    int r;

    set_defaults(cfg);
    r = config_parse_flags(&fl, argc, argv, err, err_len);
    if (r)
        return r;
    cfg->read_only = fl.read_only;
    cfg->rebuild_index = fl.rebuild_index;
    cfg->upgrade = fl.upgrade;
    cfg->print_config = fl.print_config;

    if (fl.config && copy_str(cfg->config_path, sizeof(cfg->config_path), fl.config)) {
        snprintf(err, err_len, "--config: path is empty or too long");
        return CONFIG_E_USAGE;
    }
    /* No home directory: there is no default config file. */
    FILE *f = cfg->config_path[0] ? fopen(cfg->config_path, "re") : NULL;
    if (!f && cfg->config_path[0] && (fl.config || errno != ENOENT)) {
        snprintf(err, err_len, "%s: %s", cfg->config_path, strerror(errno));
        return CONFIG_E_INVALID;
    }
    if (f) {
        struct stat sb;
        if (fstat(fileno(f), &sb) < 0) {
            snprintf(err, err_len, "%s: %s", cfg->config_path, strerror(errno));
            fclose(f);
            return CONFIG_E_INVALID;
        }
        struct ini_state st = {cfg, f, 0, cfg->config_path, err, err_len, false, sb.st_mode};
        r = ini_parse_stream(read_line, &st, on_ini_entry, &st);
        fclose(f);
        if (st.failed)
            return CONFIG_E_INVALID;
        if (r != 0) {
            snprintf(err, err_len, "%s:%d: syntax error", cfg->config_path, r);
            return CONFIG_E_INVALID;
        }
    }

    if ((env = getenv("CAIRN_SOCKET")) && *env &&
        (r = apply_checked(cfg, "daemon", "socket", env, "CAIRN_SOCKET", err, err_len)))
        return r;
    if ((env = getenv("CAIRN_DATA_DIR")) && *env &&
        (r = apply_checked(cfg, "store", "data_dir", env, "CAIRN_DATA_DIR", err, err_len)))
        return r;

    if (fl.socket &&
        (r = apply_checked(cfg, "daemon", "socket", fl.socket, "--socket", err, err_len)))
        return r;
    if (fl.data_dir &&
        (r = apply_checked(cfg, "store", "data_dir", fl.data_dir, "--data-dir", err, err_len)))
        return r;
    /* Every user can read a process's command line in /proc/PID/cmdline. */
    if (fl.backend && (secret = url_secret(fl.backend))) {
        snprintf(err, err_len,
                 "--backend: the URL holds %s, which every user can read on the command line; "
                 "put the URL in the config file (chmod 600) or the secret in the environment "
                 "(AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, CLOUDFLARE_API_TOKEN, "
                 "AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN, AZURE_STORAGE_CONNECTION_STRING)",
                 secret);
        return CONFIG_E_INVALID;
    }
    if (fl.backend &&
        (r = apply_checked(cfg, "backend", "url", fl.backend, "--backend", err, err_len)))
        return r;
    if (fl.log_level &&
        (r = apply_checked(cfg, "daemon", "log_level", fl.log_level, "--log-level", err, err_len)))
        return r;
    if (fl.encryption && (r = apply_checked(cfg, "store", "encryption", fl.encryption,
                                            "--encryption", err, err_len)))
        return r;
    if (url_has_password(cfg->backend_url)) {
        snprintf(err, err_len,
                 "backend URL: an sftp URL takes no password (USER:PASSWORD@): cairn logs in "
                 "with a key only (key=, ssh-agent or ~/.ssh/id_*)");
        return CONFIG_E_INVALID;
    }
    if (!cfg->data_dir[0]) {
        snprintf(err, err_len,
                 "no data directory: HOME is unset and uid %u has no home directory; give "
                 "--data-dir, CAIRN_DATA_DIR or XDG_DATA_HOME",
                 (unsigned)getuid());
        return CONFIG_E_INVALID;
    }
    if ((r = absolute_data_dir(cfg, err, err_len)) || (r = read_cache_path(cfg, err, err_len)))
        return r;
    struct cdc probe;
    if (cdc_init(&probe, cfg->chunk_min, cfg->chunk_avg, cfg->chunk_max) < 0) {
        snprintf(err, err_len,
                 "%s: chunk sizes must satisfy chunk_min < chunk_avg < chunk_max, with "
                 "chunk_avg a power of two",
                 cfg->config_path);
        return CONFIG_E_INVALID;
    }
    return 0;
}
