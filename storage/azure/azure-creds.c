/*
 * The azure backend's credentials (azure-creds.h): the connection string's
 * parser and the order of the sources. Every buffer a secret passes through
 * is wiped before it is released.
 */
#include "storage/azure/azure-creds.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NO_CREDS                                                                                   \
    "azure backend: no credentials: set account_key or sas in [backend], "                         \
    "AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or "         \
    "AZURE_STORAGE_SAS_TOKEN"

/* Azurite's documented development account and key, public by design. */
#define DEV_ACCOUNT "devstoreaccount1"
#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#define DEV_ENDPOINT "http://127.0.0.1:10000/devstoreaccount1"

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int az_base64_decode(const char *s, uint8_t *out, size_t out_len)
{
    size_t n = strlen(s), o = 0;

    if (n == 0 || n % 4)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        size_t pad = 0;
        for (size_t k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value(s[i + k])) < 0) {
                return -1;
            }
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        uint8_t b[3] = {(uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w};
        /* Bits a padded group leaves over must be zero: one spelling per key. */
        if ((pad == 2 && (w & 0xffff)) || (pad == 1 && (w & 0xff)))
            return -1;
        if (o + 3 - pad > out_len)
            return -1;
        memcpy(out + o, b, 3 - pad);
        o += 3 - pad;
    }
    return (int)o;
}

static int copy(char *dst, size_t dst_len, const char *v, size_t n)
{
    if (n >= dst_len)
        return -1;
    memcpy(dst, v, n);
    dst[n] = '\0';
    return 0;
}

int az_conn_parse(const char *s, struct az_conn *c, const char **msg)
{
    static const char *const names[] = {
        "AccountName",    "AccountKey",   "SharedAccessSignature", "DefaultEndpointsProtocol",
        "EndpointSuffix", "BlobEndpoint", "UseDevelopmentStorage"};
    unsigned seen = 0;

    memset(c, 0, sizeof(*c));
    while (*s) {
        size_t part = strcspn(s, ";");
        const char *eq = memchr(s, '=', part);
        size_t name_len, value_len;
        const char *value, *name;
        unsigned i;

        if (part == 0 || strspn(s, " \t") == part) {
            s += part + (s[part] == ';');
            continue;
        }
        if (!eq) {
            *msg = "azure backend: AZURE_STORAGE_CONNECTION_STRING has a part without '=' "
                   "(Name=Value;Name=Value)";
            goto fail;
        }
        name = s;
        name_len = (size_t)(eq - s);
        while (name_len && (name[0] == ' ' || name[0] == '\t'))
            name++, name_len--;
        while (name_len && (name[name_len - 1] == ' ' || name[name_len - 1] == '\t'))
            name_len--;
        value = eq + 1;
        value_len = (size_t)(s + part - value);
        for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            if (strlen(names[i]) == name_len && strncasecmp(name, names[i], name_len) == 0)
                break;
        }
        if (i < sizeof(names) / sizeof(names[0])) {
            int bad = 0;
            if (seen & (1u << i)) {
                *msg = "azure backend: AZURE_STORAGE_CONNECTION_STRING names a setting twice";
                goto fail;
            }
            seen |= 1u << i;
            switch (i) {
            case 0:
                bad = copy(c->account, sizeof(c->account), value, value_len);
                break;
            case 1:
                bad = copy(c->key_b64, sizeof(c->key_b64), value, value_len);
                break;
            case 2:
                if (value_len && value[0] == '?')
                    value++, value_len--;
                bad = copy(c->sas, sizeof(c->sas), value, value_len);
                break;
            case 3:
                bad = copy(c->protocol, sizeof(c->protocol), value, value_len) ||
                      (strcmp(c->protocol, "https") && strcmp(c->protocol, "http"));
                break;
            case 4:
                bad = copy(c->suffix, sizeof(c->suffix), value, value_len);
                break;
            case 5:
                bad = copy(c->blob_endpoint, sizeof(c->blob_endpoint), value, value_len);
                break;
            case 6:
                if (value_len == 4 && strncasecmp(value, "true", 4) == 0)
                    c->dev_storage = true;
                else if (!(value_len == 5 && strncasecmp(value, "false", 5) == 0))
                    bad = 1;
                break;
            }
            if (bad) {
                *msg = "azure backend: AZURE_STORAGE_CONNECTION_STRING has a value that is too "
                       "long or malformed";
                goto fail;
            }
        }
        s += part + (s[part] == ';');
    }
    return 0;
fail:
    explicit_bzero(c, sizeof(*c));
    return -EINVAL;
}

__attribute__((format(printf, 5, 6))) static int fail(struct az_creds *c, char *msg, size_t msg_len,
                                                      int err, const char *fmt, ...)
{
    va_list ap;

    az_creds_clear(c);
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
    return err;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int take_key(struct az_creds *c, const char *b64)
{
    int n = az_base64_decode(b64, c->key, sizeof(c->key));
    if (n <= 0)
        return -1;
    c->key_len = (size_t)n;
    c->auth = AZ_AUTH_KEY;
    return 0;
}

static int take_sas(struct az_creds *c, const char *sas)
{
    if (sas[0] == '?')
        sas++;
    /* It goes into every URL as it is: printable, no space, no fragment. */
    for (const char *p = sas; *p; p++) {
        if (*p <= ' ' || *p > '~' || *p == '#')
            return -1;
    }
    if (!*sas || copy(c->sas, sizeof(c->sas), sas, strlen(sas)))
        return -1;
    c->auth = AZ_AUTH_SAS;
    return 0;
}

static int from_connection_string(struct az_creds *c, const struct az_opts *o, const char *s,
                                  char *msg, size_t msg_len)
{
    struct az_conn cs;
    const char *err;
    int r = 0;

    if (az_conn_parse(s, &cs, &err) < 0)
        return fail(c, msg, msg_len, -EINVAL, "%s", err);
    snprintf(c->origin, sizeof(c->origin), "AZURE_STORAGE_CONNECTION_STRING");
    if (cs.dev_storage) {
        if (strcmp(o->account, DEV_ACCOUNT) != 0)
            r = fail(c, msg, msg_len, -EINVAL,
                     "azure backend: AZURE_STORAGE_CONNECTION_STRING says UseDevelopmentStorage, "
                     "whose account is " DEV_ACCOUNT ", but the URL names %s",
                     o->account);
        else if (take_key(c, DEV_KEY) < 0)
            r = fail(c, msg, msg_len, -EINVAL, "azure backend: bad development key");
        else {
            snprintf(c->endpoint, sizeof(c->endpoint), "%s", DEV_ENDPOINT);
            c->endpoint_http_ok = true;
            snprintf(c->origin, sizeof(c->origin),
                     "AZURE_STORAGE_CONNECTION_STRING (UseDevelopmentStorage)");
        }
        explicit_bzero(&cs, sizeof(cs));
        return r;
    }
    if (cs.account[0] && strcmp(cs.account, o->account) != 0) {
        r = fail(c, msg, msg_len, -EINVAL,
                 "azure backend: AZURE_STORAGE_CONNECTION_STRING is for account %s, the URL "
                 "names %s",
                 cs.account, o->account);
    } else if (cs.key_b64[0]) {
        if (take_key(c, cs.key_b64) < 0)
            r = fail(c, msg, msg_len, -EINVAL,
                     "azure backend: the AccountKey of AZURE_STORAGE_CONNECTION_STRING is not "
                     "base64");
    } else if (cs.sas[0]) {
        if (take_sas(c, cs.sas) < 0)
            r = fail(c, msg, msg_len, -EINVAL,
                     "azure backend: the SharedAccessSignature of "
                     "AZURE_STORAGE_CONNECTION_STRING is malformed");
    } else {
        r = fail(c, msg, msg_len, -EINVAL,
                 "azure backend: AZURE_STORAGE_CONNECTION_STRING has neither AccountKey nor "
                 "SharedAccessSignature");
    }
    if (r == 0 && cs.blob_endpoint[0])
        snprintf(c->endpoint, sizeof(c->endpoint), "%s", cs.blob_endpoint);
    else if (r == 0 && (cs.suffix[0] || cs.protocol[0]))
        snprintf(c->endpoint, sizeof(c->endpoint), "%s://%s.blob.%s",
                 cs.protocol[0] ? cs.protocol : "https", o->account,
                 cs.suffix[0] ? cs.suffix : "core.windows.net");
    explicit_bzero(&cs, sizeof(cs));
    return r;
}

int az_creds_resolve(struct az_creds *c, const struct az_opts *o, char *msg, size_t msg_len)
{
    const char *v;

    memset(c, 0, sizeof(*c));
    if (o->account_key[0]) {
        if (take_key(c, o->account_key) < 0)
            return fail(c, msg, msg_len, -EINVAL,
                        "azure backend: account_key is not base64 (as the portal shows it)");
        snprintf(c->origin, sizeof(c->origin), "account_key in the URL or [backend]");
        return 0;
    }
    if (o->sas[0]) {
        if (take_sas(c, o->sas) < 0)
            return fail(c, msg, msg_len, -EINVAL, "azure backend: sas is malformed");
        snprintf(c->origin, sizeof(c->origin), "sas in the URL or [backend]");
        return 0;
    }
    if ((v = env("AZURE_STORAGE_CONNECTION_STRING")))
        return from_connection_string(c, o, v, msg, msg_len);
    if ((v = env("AZURE_STORAGE_ACCOUNT"))) {
        if (strcmp(v, o->account) != 0)
            return fail(c, msg, msg_len, -EINVAL,
                        "azure backend: AZURE_STORAGE_ACCOUNT is %.64s, the URL names %s", v,
                        o->account);
        if ((v = env("AZURE_STORAGE_KEY"))) {
            if (take_key(c, v) < 0)
                return fail(c, msg, msg_len, -EINVAL,
                            "azure backend: AZURE_STORAGE_KEY is not base64");
            snprintf(c->origin, sizeof(c->origin), "environment (AZURE_STORAGE_KEY)");
            return 0;
        }
        if ((v = env("AZURE_STORAGE_SAS_TOKEN"))) {
            if (take_sas(c, v) < 0)
                return fail(c, msg, msg_len, -EINVAL,
                            "azure backend: AZURE_STORAGE_SAS_TOKEN is malformed");
            snprintf(c->origin, sizeof(c->origin), "environment (AZURE_STORAGE_SAS_TOKEN)");
            return 0;
        }
        return fail(c, msg, msg_len, -EINVAL,
                    "azure backend: AZURE_STORAGE_ACCOUNT is set but neither AZURE_STORAGE_KEY "
                    "nor AZURE_STORAGE_SAS_TOKEN");
    }
    return fail(c, msg, msg_len, -EINVAL, NO_CREDS);
}

void az_creds_clear(struct az_creds *c)
{
    explicit_bzero(c, sizeof(*c));
}
