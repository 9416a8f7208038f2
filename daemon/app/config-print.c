/*
 * cairnd --print-config: every setting, as a config file would say it, each
 * under a comment that says where it came from (the file and line, the
 * environment variable, the flag, or the default). The output is itself a
 * valid config file. Secrets are not shown: a [backend] secret is only
 * named in a comment, and one in the url's parameters reads REDACTED.
 */
#include "daemon/app/config.h"
#include "proto/proto.h"

#include <inttypes.h>
#include <string.h>

static const char *origin(const struct config *cfg, const char *section, const char *key)
{
    char name[sizeof(cfg->origins[0].key)];

    if (snprintf(name, sizeof(name), "%s.%s", section, key) >= (int)sizeof(name))
        return "default"; /* config_note_origin() could not have noted it either */
    for (unsigned i = 0; i < cfg->norigins; i++) {
        if (strcmp(cfg->origins[i].key, name) == 0)
            return cfg->origins[i].from;
    }
    return "default";
}

static void put(FILE *out, const struct config *cfg, const char *section, const char *key,
                const char *value)
{
    fprintf(out, "# %s: %s\n%s = %s\n", key, origin(cfg, section, key), key, value);
}

static void put_u64(FILE *out, const struct config *cfg, const char *section, const char *key,
                    uint64_t value)
{
    char buf[32];

    /* In the units the file takes, when they divide it. */
    if (value >= 1024 * 1024 && value % (1024 * 1024) == 0)
        snprintf(buf, sizeof(buf), "%" PRIu64 "M", value / (1024 * 1024));
    else if (value >= 1024 && value % 1024 == 0)
        snprintf(buf, sizeof(buf), "%" PRIu64 "K", value / 1024);
    else
        snprintf(buf, sizeof(buf), "%" PRIu64, value);
    put(out, cfg, section, key, buf);
}

static void put_uint(FILE *out, const struct config *cfg, const char *section, const char *key,
                     unsigned value)
{
    char buf[16];

    snprintf(buf, sizeof(buf), "%u", value);
    put(out, cfg, section, key, buf);
}

/* The [backend] options other than url, decoded from their "&key=value" form. */
static void put_backend_params(FILE *out, const struct config *cfg)
{
    const char *p = cfg->backend_params;

    while (*p == '&') {
        char key[32], value[sizeof(cfg->backend_params)];
        size_t k = 0, v = 0;
        for (p++; *p && *p != '=' && k + 1 < sizeof(key); p++)
            key[k++] = *p;
        key[k] = '\0';
        if (*p == '=')
            p++;
        for (; *p && *p != '&' && v + 1 < sizeof(value); p++) {
            if (*p == '%' && proto_hex_value(p[1]) >= 0 && proto_hex_value(p[2]) >= 0) {
                value[v++] = (char)(proto_hex_value(p[1]) * 16 + proto_hex_value(p[2]));
                p += 2;
            } else {
                value[v++] = *p;
            }
        }
        value[v] = '\0';
        if (config_is_secret("backend", key))
            fprintf(out, "# %s: %s (set, not shown)\n", key, origin(cfg, "backend", key));
        else
            put(out, cfg, "backend", key, value);
        explicit_bzero(value, sizeof(value));
    }
}

/* The url, with the value of any secret parameter in it replaced by REDACTED. */
static void put_url(FILE *out, const struct config *cfg)
{
    const char *url = cfg->backend_url, *query = strchr(url, '?');
    char shown[sizeof(cfg->backend_url) + 64];
    size_t n;

    if (!query) {
        put(out, cfg, "backend", "url", url);
        return;
    }
    n = (size_t)(query - url) + 1;
    memcpy(shown, url, n);
    for (const char *p = query + 1; *p;) {
        size_t len = strcspn(p, "&"), name_len = strcspn(p, "=&");
        char name[32];
        bool secret = false;
        if (name_len < sizeof(name)) {
            memcpy(name, p, name_len);
            name[name_len] = '\0';
            secret = config_is_secret("backend", name) && p[name_len] == '=';
        }
        const char *part = secret ? "=REDACTED" : p + name_len;
        size_t part_len = secret ? 9 : len - name_len;
        if (n + name_len + part_len + 2 >= sizeof(shown))
            break;
        memcpy(shown + n, p, name_len);
        memcpy(shown + n + name_len, part, part_len);
        n += name_len + part_len;
        p += len;
        if (*p == '&')
            shown[n++] = *p++;
    }
    shown[n] = '\0';
    put(out, cfg, "backend", "url", shown);
    explicit_bzero(shown, sizeof(shown));
}

void config_print(const struct config *cfg, FILE *out)
{
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    char buf[16];

    fprintf(out,
            "# cairnd " CAIRN_VERSION ": the effective settings, each under where it came "
            "from\n# (FILE:LINE, an environment variable, a flag, or the default).\n"
            "# config file: %s\n\n[daemon]\n",
            cfg->config_path);
    put(out, cfg, "daemon", "socket", cfg->socket_path);
    put(out, cfg, "daemon", "log_level",
        (unsigned)cfg->log_level < sizeof(levels) / sizeof(levels[0]) ? levels[cfg->log_level]
                                                                      : "info");
    put_uint(out, cfg, "daemon", "max_connections", cfg->max_connections);
    snprintf(buf, sizeof(buf), "%llums", (unsigned long long)cfg->client_timeout_ms);
    put(out, cfg, "daemon", "client_timeout", buf);
    put_u64(out, cfg, "daemon", "connection_memory", cfg->connection_memory);
    put(out, cfg, "daemon", "metrics_listen", cfg->metrics_listen);
    put_uint(out, cfg, "daemon", "threads", cfg->threads);
    fputs("\n[store]\n", out);
    put(out, cfg, "store", "data_dir", cfg->data_dir);
    snprintf(buf, sizeof(buf), "%d", cfg->compression_level);
    put(out, cfg, "store", "compression_level", buf);
    put_u64(out, cfg, "store", "chunk_min", cfg->chunk_min);
    put_u64(out, cfg, "store", "chunk_avg", cfg->chunk_avg);
    put_u64(out, cfg, "store", "chunk_max", cfg->chunk_max);
    put_u64(out, cfg, "store", "pack_size", cfg->pack_size);
    put_uint(out, cfg, "store", "repack_threshold", cfg->repack_threshold);
    snprintf(buf, sizeof(buf), "%llums", (unsigned long long)cfg->refresh_interval_ms);
    put(out, cfg, "store", "refresh_interval", buf);
    snprintf(buf, sizeof(buf), "%llums", (unsigned long long)cfg->gc_grace_ms);
    put(out, cfg, "store", "gc_grace", buf);
    snprintf(buf, sizeof(buf), "%llums", (unsigned long long)cfg->max_clock_skew_ms);
    put(out, cfg, "store", "max_clock_skew", buf);
    put_u64(out, cfg, "store", "cache_size", cfg->cache_size);
    put(out, cfg, "store", "read_cache_dir", cfg->read_cache_dir);
    /* The passphrase itself is never printed: only where it comes from. */
    if (cfg->encryption == CONFIG_ENC_UNSET)
        fputs("# encryption: not set: the store's own mode (a new store is plain)\n", out);
    else
        put(out, cfg, "store", "encryption",
            cfg->encryption == CONFIG_ENC_ON ? "aes-256-gcm" : "off");
    if (cfg->password_file[0])
        put(out, cfg, "store", "password_file", cfg->password_file);
    if (cfg->password_command[0])
        put(out, cfg, "store", "password_command", cfg->password_command);
    if (cfg->read_cache_auto)
        put(out, cfg, "store", "read_cache_size", "auto");
    else
        put_u64(out, cfg, "store", "read_cache_size", cfg->read_cache_size);
    fputs("\n[search]\n", out);
    put_u64(out, cfg, "search", "max_text", cfg->max_text);
    fputs("\n[backend]\n", out);
    put_url(out, cfg);
    put_backend_params(out, cfg);
}
