#pragma once

/*
 * SharedKey signing of Blob service requests (versions 2009-09-19 and
 * later): the string-to-sign is the verb, the twelve standard headers in
 * their fixed order (Content-Length empty when it is 0), the x-ms-* headers
 * canonicalized (names lowercased, sorted, "name:value" with the value's
 * runs of space folded), and the canonicalized resource: "/ACCOUNT" then the
 * request's path as sent (so an emulator's path-style URL names the
 * account twice), then each query parameter on a line of its own as
 * "name:value", names lowercased, both decoded, sorted by name, the values
 * of a repeated name sorted and joined with ','. The signature is
 * base64(HMAC-SHA256(key, string-to-sign)).
 */

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* The service version every request pins (x-ms-version). */
#define AZ_VERSION "2021-12-02"
/* "x-ms-date" values: "Sun, 06 Nov 1994 08:49:37 GMT". */
#define AZ_DATE_SIZE 32
/* "SharedKey ACCOUNT:" and 44 characters of base64. */
#define AZ_AUTH_SIZE 160
/* Query parameters of one request at most. */
#define AZ_MAX_PARAMS 16
/* The longest string-to-sign accepted. */
#define AZ_STS_MAX 8192

struct az_sign_req {
    const char *method;
    const char *path;  /* as sent: percent-encoded, starting with '/' */
    const char *query; /* as sent, without '?'; "" or NULL for none */
    uint64_t content_length;
    /* Every header sent, "Name: value": the standard ones and x-ms-* are picked from them. */
    const char *const *headers;
    size_t nheaders;
};

/* The RFC 1123 date of t, for x-ms-date. */
void az_format_date(time_t t, char out[AZ_DATE_SIZE]);

/* The string-to-sign of req for account; its length, or -EINVAL/-ENAMETOOLONG. */
int az_string_to_sign(const char *account, const struct az_sign_req *req, char *out,
                      size_t out_len);

/* "SharedKey ACCOUNT:SIGNATURE" into out; 0 or negative errno. */
int az_sign(const char *account, const uint8_t *key, size_t key_len, const struct az_sign_req *req,
            char *out, size_t out_len);
