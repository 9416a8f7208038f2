#pragma once

/*
 * Where the S3 backend's credentials come from, decided once at startup.
 * The first source that has them wins:
 *   1. access_key_id and secret_access_key [and session_token] in the URL or [backend];
 *   2. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY [and AWS_SESSION_TOKEN];
 *   3. the profile (profile=, else AWS_PROFILE, else "default") in
 *      $AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials.
 * For r2:// with an API token (api_token=, else CLOUDFLARE_API_TOKEN) the
 * key found that way is the parent of temporary credentials that s3-r2.c
 * fetches, so only its access key ID is needed. A source that has half
 * of a pair is an error rather than a reason to look further: it is a typo.
 */

#include "storage/s3/s3-url.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

enum s3_creds_source {
    S3_CREDS_CONFIG = 1, /* URL parameters or [backend] keys */
    S3_CREDS_ENV,        /* AWS_ACCESS_KEY_ID and friends */
    S3_CREDS_PROFILE,    /* a section of the shared credentials file */
};

struct s3_creds {
    enum s3_creds_source source;
    /* For a log line, never a secret: "environment (AWS_ACCESS_KEY_ID)",
     * "profile backup in /home/u/.aws/credentials", and the API token's. */
    char origin[PATH_MAX + S3_MAX_PROFILE + 160];
    char access_key_id[S3_MAX_KEY_ID];
    char secret_access_key[S3_MAX_SECRET];    /* "" only for an r2 parent key */
    char session_token[S3_MAX_SESSION_TOKEN]; /* "" for none */
    /* r2:// only: "" when the key is used directly. */
    char api_token[S3_MAX_API_TOKEN];
    bool temporary; /* r2 with an API token: access_key_id is the parent key */
};

/*
 * Resolves the credentials for o. 0, or -EINVAL (none found, or a source
 * half-filled) or -EIO (the credentials file could not be read) with the
 * reason in msg. On failure c holds no secret.
 */
int s3_creds_resolve(struct s3_creds *c, const struct s3_opts *o, char *msg, size_t msg_len);

/* Wipes c, secrets included, in a way the compiler keeps. */
void s3_creds_clear(struct s3_creds *c);
