#pragma once

/*
 * Where the azure backend's credentials come from, decided once at
 * startup. The first source that has them wins:
 *   1. account_key in the URL or [backend] (SharedKey);
 *   2. sas in the URL or [backend] (a service or account SAS token);
 *   3. AZURE_STORAGE_CONNECTION_STRING: AccountName=...;AccountKey=... with
 *      DefaultEndpointsProtocol and EndpointSuffix or BlobEndpoint, or
 *      SharedAccessSignature=... with BlobEndpoint, or
 *      UseDevelopmentStorage=true (Azurite's well-known account and key on
 *      http://127.0.0.1:10000/devstoreaccount1);
 *   4. AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY, else with
 *      AZURE_STORAGE_SAS_TOKEN.
 * A connection string or AZURE_STORAGE_ACCOUNT naming another account than
 * the URL's is an error, as is one that is malformed: not a reason to look
 * further.
 */

#include "storage/azure/azure-url.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A decoded account key: Azure's are 64 bytes. */
#define AZ_MAX_KEY 64

/* What a connection string says; "" (or false) for what it does not. */
struct az_conn {
    char account[AZ_MAX_ACCOUNT];
    char key_b64[AZ_MAX_KEY_B64];
    char sas[AZ_MAX_SAS];
    char protocol[8];         /* "https" or "http" */
    char suffix[AZ_MAX_HOST]; /* EndpointSuffix */
    char blob_endpoint[AZ_MAX_URL];
    bool dev_storage;
};

/*
 * Parses a connection string: "Name=Value" parts split at ';' (empty parts
 * skipped), names compared without case, a value running to the next ';'
 * ('=' inside it kept, as base64 keys end in them). Unknown names are
 * skipped; a name given twice, a part without '=', or a value too long is
 * -EINVAL with *msg. On failure c holds no secret.
 */
int az_conn_parse(const char *s, struct az_conn *c, const char **msg);

enum az_auth {
    AZ_AUTH_KEY = 1, /* SharedKey: the Authorization header */
    AZ_AUTH_SAS,     /* the token appended to every request's query */
};

struct az_creds {
    enum az_auth auth;
    /* For a log line, never a secret: "account_key in the URL or [backend]". */
    char origin[128];
    uint8_t key[AZ_MAX_KEY];
    size_t key_len;
    char sas[AZ_MAX_SAS]; /* without a leading '?' */
    /* An endpoint the source names ("" for none), and whether it may be http://. */
    char endpoint[AZ_MAX_URL];
    bool endpoint_http_ok;
};

/* Decodes standard base64 (padding required, no spaces): the length, or -1. */
int az_base64_decode(const char *s, uint8_t *out, size_t out_len);

/*
 * Resolves the credentials for o. 0, or -EINVAL (none found, or a source
 * malformed or for another account) with the reason in msg. On failure c
 * holds no secret.
 */
int az_creds_resolve(struct az_creds *c, const struct az_opts *o, char *msg, size_t msg_len);

/* Wipes c, secrets included, in a way the compiler keeps. */
void az_creds_clear(struct az_creds *c);
