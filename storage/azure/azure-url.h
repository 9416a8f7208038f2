#pragma once

/*
 * The URL of the Azure Blob Storage backend and every option it takes,
 * checked once at startup:
 *
 *   azure://ACCOUNT/CONTAINER[/PREFIX][?name=value&...]
 *
 * ACCOUNT is the storage account (3 to 24 of a-z and 0-9, or Azurite's
 * devstoreaccount1), CONTAINER 3 to 63 of a-z, 0-9 and '-' (no "--", a
 * letter or digit at both ends). PREFIX is percent-decoded, its leading and
 * trailing '/' dropped; packs go under PREFIX/packs/. As for s3://, cairnd
 * appends the [backend] keys after the URL's own parameters and the first
 * value given wins.
 *
 *   endpoint=URL        the blob service, http[s]://HOST[:PORT][/PATH];
 *                       default https://ACCOUNT.blob.core.windows.net.
 *                       Azurite's is http://127.0.0.1:10000/ACCOUNT
 *   allow_http=0|1      an http:// endpoint is refused without it
 *   timeout=S           whole request, retries included (default 60)
 *   connect_timeout=S   default 10, at most timeout
 *   stall_timeout=S     no byte moved for this long fails the attempt (default 30)
 *   connections=N       requests in flight, 1..256 (default 16)
 *   account_key=BASE64  SharedKey credentials (a secret)
 *   sas=TOKEN           a service or account SAS token (a secret)
 *
 * Where the credentials come from otherwise is azure-creds.h's.
 */

#include <stdbool.h>
#include <stddef.h>

#define AZ_MAX_ACCOUNT 64
#define AZ_MAX_CONTAINER 64
#define AZ_MAX_PREFIX 512
#define AZ_MAX_URL 512
#define AZ_MAX_HOST 256
/* A base64 account key: 88 characters for Azure's 64 bytes. */
#define AZ_MAX_KEY_B64 256
#define AZ_MAX_SAS 2048

#define AZ_DEFAULT_TIMEOUT_S 60
#define AZ_DEFAULT_CONNECT_TIMEOUT_S 10
#define AZ_DEFAULT_STALL_TIMEOUT_S 30
#define AZ_DEFAULT_CONNECTIONS 16
#define AZ_MAX_CONNECTIONS 256
#define AZ_MAX_TIMEOUT_S 86400

struct az_opts {
    char account[AZ_MAX_ACCOUNT];
    char container[AZ_MAX_CONTAINER];
    char prefix[AZ_MAX_PREFIX]; /* decoded; no leading or trailing '/'; "" for none */

    /* The endpoint as given ("" for the default); az_set_endpoint() fills the parts. */
    char endpoint_raw[AZ_MAX_URL];
    char endpoint[AZ_MAX_URL]; /* "http[s]://host[:port][/path]", rebuilt, no trailing '/' */
    bool https;
    /* The path before /CONTAINER ("" or "/devstoreaccount1"), as sent and as signed. */
    char base_path[AZ_MAX_URL];

    bool allow_http;
    unsigned timeout_s, connect_timeout_s, stall_timeout_s;
    unsigned connections;

    /* Secrets: never logged, never in az_describe(); az_opts_clear() wipes them. */
    char account_key[AZ_MAX_KEY_B64];
    char sas[AZ_MAX_SAS];
};

/* Parses an azure:// URL. 0, or -EINVAL with *msg saying what is wrong. */
int az_parse_url(const char *url, struct az_opts *o, const char **msg);

/*
 * Settles the endpoint: `url` (the endpoint option, or the one a connection
 * string names, or NULL for the default) into its parts. `http_ok` allows
 * http:// without allow_http (the emulator of UseDevelopmentStorage=true).
 * 0, or -EINVAL with *msg.
 */
int az_set_endpoint(struct az_opts *o, const char *url, bool http_ok, const char **msg);

/* The URL to show in logs and status: every setting except the secrets. */
void az_describe(const struct az_opts *o, char *out, size_t len);

/* Wipes the whole struct, secrets included, in a way the compiler keeps. */
void az_opts_clear(struct az_opts *o);
