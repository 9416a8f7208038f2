/*
 * The shared credentials file is read by a small parser of its own rather
 * than libinih: its lines hold secrets, and here every buffer they pass
 * through is wiped before it is released. The format is botocore's: [name]
 * sections, "key = value" lines, '#' and ';' comments on lines of their own
 * (a value is never cut at a '#': secrets are not that predictable).
 */
#include "storage/s3/s3-creds.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_CREDS                                                                                   \
    "s3 backend: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile in "   \
    "~/.aws/credentials, or access_key_id/secret_access_key in [backend]"

/* A line of the credentials file; longer ones are refused, not split. */
#define LINE_MAX_BYTES 4096

__attribute__((format(printf, 5, 6))) static int fail(struct s3_creds *c, char *msg, size_t msg_len,
                                                      int err, const char *fmt, ...)
{
    va_list ap;

    s3_creds_clear(c);
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
    return err;
}

static int copy(char *dst, size_t dst_len, const char *v)
{
    size_t n = strlen(v);
    if (n >= dst_len)
        return -1;
    memcpy(dst, v, n + 1);
    return 0;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static char *trim(char *s)
{
    char *end;

    s += strspn(s, " \t\r\n");
    end = s + strlen(s);
    while (end > s && strchr(" \t\r\n", end[-1]))
        *--end = '\0';
    return s;
}

struct profile_read {
    bool found;
    char key_id[S3_MAX_KEY_ID];
    char secret[S3_MAX_SECRET];
    char token[S3_MAX_SESSION_TOKEN];
};

/* Reads the section `name` of the file at path. 0 (found or not), or a negative errno. */
static int read_profile(const char *path, const char *name, struct profile_read *out,
                        const char **problem)
{
    char line[LINE_MAX_BYTES];
    bool in_section = false;
    FILE *f;
    int r = 0;

    memset(out, 0, sizeof(*out));
    *problem = NULL;
    if (!(f = fopen(path, "re")))
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        size_t n = strlen(line);
        if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
            *problem = "a line longer than 4095 bytes";
            r = -EINVAL;
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#' || *s == ';')
            continue;
        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close) {
                *problem = "a section header without ']'";
                r = -EINVAL;
                break;
            }
            *close = '\0';
            in_section = strcmp(trim(s + 1), name) == 0;
            out->found |= in_section;
            continue;
        }
        if (!in_section)
            continue;
        char *eq = strchr(s, '=');
        if (!eq)
            continue; /* botocore skips what it cannot read outside our keys too */
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        int bad = 0;
        if (strcmp(key, "aws_access_key_id") == 0)
            bad = copy(out->key_id, sizeof(out->key_id), value);
        else if (strcmp(key, "aws_secret_access_key") == 0)
            bad = copy(out->secret, sizeof(out->secret), value);
        else if (strcmp(key, "aws_session_token") == 0)
            bad = copy(out->token, sizeof(out->token), value);
        if (bad) {
            *problem = "a credential value too long";
            r = -EINVAL;
            break;
        }
    }
    if (!r && ferror(f))
        r = -EIO;
    explicit_bzero(line, sizeof(line));
    fclose(f);
    if (r)
        explicit_bzero(out, sizeof(*out));
    return r;
}

/* Fills the key from one source; -1 when a value does not fit. */
static int take(struct s3_creds *c, const char *id, const char *secret, const char *token)
{
    if (copy(c->access_key_id, sizeof(c->access_key_id), id) ||
        copy(c->secret_access_key, sizeof(c->secret_access_key), secret ? secret : "") ||
        copy(c->session_token, sizeof(c->session_token), token ? token : ""))
        return -1;
    return 0;
}

static int from_profile(struct s3_creds *c, const struct s3_opts *o, bool need_secret, char *msg,
                        size_t msg_len)
{
    char path[PATH_MAX];
    const char *name = o->profile[0] ? o->profile : env("AWS_PROFILE");
    bool named = name != NULL;
    const char *file = env("AWS_SHARED_CREDENTIALS_FILE"), *home = env("HOME");
    const char *problem;
    struct profile_read p;
    int r;

    if (!name)
        name = "default";
    if (file)
        snprintf(path, sizeof(path), "%s", file);
    else if (home)
        snprintf(path, sizeof(path), "%s/.aws/credentials", home);
    else
        return named ? fail(c, msg, msg_len, -EINVAL,
                            "s3 backend: profile %s: no credentials file (HOME is not set)", name)
                     : fail(c, msg, msg_len, -EINVAL, NO_CREDS "");
    r = read_profile(path, name, &p, &problem);
    if (r == -ENOENT && !named && !file)
        return fail(c, msg, msg_len, -EINVAL, NO_CREDS "");
    if (r == -EINVAL)
        return fail(c, msg, msg_len, -EINVAL, "s3 backend: %s: %s", path, problem);
    if (r < 0)
        return fail(c, msg, msg_len, -EIO, "s3 backend: cannot read %s: %s", path, strerror(-r));
    if (!p.found) {
        explicit_bzero(&p, sizeof(p));
        if (!named)
            return fail(c, msg, msg_len, -EINVAL, NO_CREDS "");
        return fail(c, msg, msg_len, -EINVAL, "s3 backend: profile %s is not in %s", name, path);
    }
    if (!p.key_id[0] || (need_secret && !p.secret[0]) || (p.token[0] && !p.secret[0])) {
        explicit_bzero(&p, sizeof(p));
        return fail(c, msg, msg_len, -EINVAL,
                    "s3 backend: profile %s in %s needs aws_access_key_id and "
                    "aws_secret_access_key",
                    name, path);
    }
    r = take(c, p.key_id, p.secret, p.token);
    explicit_bzero(&p, sizeof(p));
    if (r)
        return fail(c, msg, msg_len, -EINVAL, "s3 backend: a credential in %s is too long", path);
    c->source = S3_CREDS_PROFILE;
    snprintf(c->origin, sizeof(c->origin), "profile %s in %s", name, path);
    return 0;
}

int s3_creds_resolve(struct s3_creds *c, const struct s3_opts *o, char *msg, size_t msg_len)
{
    const char *token_origin = NULL;
    bool need_secret;
    int r;

    memset(c, 0, sizeof(*c));
    if (o->flavor == S3_FLAVOR_R2) {
        const char *t = o->api_token[0] ? o->api_token : env("CLOUDFLARE_API_TOKEN");
        if (t && copy(c->api_token, sizeof(c->api_token), t))
            return fail(c, msg, msg_len, -EINVAL, "s3 backend: CLOUDFLARE_API_TOKEN is too long");
        if (t)
            token_origin =
                o->api_token[0] ? "api_token in the URL or [backend]" : "CLOUDFLARE_API_TOKEN";
    }
    c->temporary = c->api_token[0] != '\0';
    need_secret = !c->temporary;

    if (o->access_key_id[0]) {
        if (need_secret && !o->secret_access_key[0])
            return fail(c, msg, msg_len, -EINVAL,
                        "s3 backend: access_key_id is set but secret_access_key is not");
        if (take(c, o->access_key_id, o->secret_access_key, o->session_token))
            return fail(c, msg, msg_len, -EINVAL, "s3 backend: a credential is too long");
        c->source = S3_CREDS_CONFIG;
        snprintf(c->origin, sizeof(c->origin), "access_key_id in the URL or [backend]");
    } else if (env("AWS_ACCESS_KEY_ID") || env("AWS_SECRET_ACCESS_KEY")) {
        const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
        if (!id || (need_secret && !secret))
            return fail(c, msg, msg_len, -EINVAL, "s3 backend: %s is set but %s is not",
                        id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                        id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
        /* A session token belongs to the key it came with, so it only counts beside it. */
        if (take(c, id, secret, secret ? env("AWS_SESSION_TOKEN") : NULL))
            return fail(c, msg, msg_len, -EINVAL,
                        "s3 backend: AWS_ACCESS_KEY_ID or a sibling is too long");
        c->source = S3_CREDS_ENV;
        snprintf(c->origin, sizeof(c->origin), "environment (AWS_ACCESS_KEY_ID)");
    } else if ((r = from_profile(c, o, need_secret, msg, msg_len))) {
        return r;
    }
    if (token_origin) {
        size_t n = strlen(c->origin);
        snprintf(c->origin + n, sizeof(c->origin) - n,
                 ", as the parent key of temporary credentials minted with %s", token_origin);
    }
    return 0;
}

void s3_creds_clear(struct s3_creds *c)
{
    explicit_bzero(c, sizeof(*c));
}
