#pragma once

/*
 * AWS Signature Version 4 for the S3 backend: the Authorization header of a
 * request whose payload goes in a single chunk, as the S3 API reference
 * describes it ("Signature Calculations for the Authorization Header:
 * Transferring Payload in a Single Chunk"). The signer holds the credentials
 * and the region, and keeps the day's signing key so that most requests cost
 * two HMACs and one hash; it never logs. The backend builds its request
 * line from the encoded path and query that s3_sign() returns, so that what
 * is sent is byte for byte what was signed. Every text has a documented
 * maximum: what does not fit is refused with -ENAMETOOLONG, never cut short.
 * The module has no error codes of its own: every failure is a negative errno.
 *
 * A signer is not thread-safe (signing updates the key cache): use one per
 * thread, or serialise the calls.
 */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

struct s3_signer;

/* Limits on what the caller gives, in bytes, without the terminating NUL. */
#define S3_SIGN_ACCESS_KEY_MAX 128
#define S3_SIGN_SECRET_MAX 128
#define S3_SIGN_TOKEN_MAX 4096 /* STS session tokens are about 1 KiB today */
#define S3_SIGN_REGION_MAX 64
#define S3_SIGN_SERVICE_MAX 32
#define S3_SIGN_HOST_MAX 255
#define S3_SIGN_METHOD_MAX 16
#define S3_SIGN_PARAMS_MAX 16  /* query parameters of one request */
#define S3_SIGN_HEADERS_MAX 16 /* headers the caller signs besides the four of the signer */
#define S3_SIGN_HEADER_NAME_MAX 64
#define S3_SIGN_HEADER_VALUE_MAX 1024

/* Sizes of the outputs, each with its NUL. */
#define S3_SIGN_PATH_SIZE 4096   /* encoded path: an S3 key of 1024 bytes fits whatever it holds */
#define S3_SIGN_QUERY_SIZE 4096  /* encoded query string */
#define S3_SIGN_AMZ_DATE_SIZE 17 /* "20130524T000000Z" */
#define S3_SIGN_AUTH_SIZE 2048   /* the limits above allow 1465 bytes */
#define S3_SIGN_CANONICAL_SIZE 32768 /* canonical request; the limits above allow 31,305 bytes */
#define S3_SHA256_HEX_SIZE 65

/* The payload hash of an empty body. */
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* One header to sign, as the caller sends it; the name in any case. */
struct s3_header {
    const char *name;
    const char *value;
};

/* One query parameter, raw (not percent-encoded); a NULL value is the empty one. */
struct s3_param {
    const char *name;
    const char *value;
};

struct s3_request {
    const char *method;            /* "GET", "PUT", ... */
    const char *path;              /* raw, from the first '/': "/bucket/packs/0000" */
    const struct s3_param *params; /* in any order */
    size_t n_params;
    const char *host;                /* the Host header: "b.s3.amazonaws.com", "127.0.0.1:9000" */
    const struct s3_header *headers; /* more headers to sign, e.g. Range; not the signer's four */
    size_t n_headers;
    const char *payload_sha256; /* 64 lowercase hex digits: s3_sha256_hex() of the body */
    time_t now;                 /* the request time, UTC */
};

/*
 * What s3_sign() gives back. The request must carry path and query ("?query"
 * unless empty) in its request line, and the headers host, x-amz-date,
 * x-amz-content-sha256, authorization, the caller's signed headers, and
 * x-amz-security-token when security_token is not empty.
 */
struct s3_signed {
    char path[S3_SIGN_PATH_SIZE];
    char query[S3_SIGN_QUERY_SIZE];
    char amz_date[S3_SIGN_AMZ_DATE_SIZE];
    char authorization[S3_SIGN_AUTH_SIZE];
    char signature[S3_SHA256_HEX_SIZE];
    char security_token[S3_SIGN_TOKEN_MAX + 1]; /* the token that was signed, or "" */
};

/*
 * A signer for region ("us-east-1") and service ("s3"), both of lowercase
 * letters, digits and '-'. It signs nothing until it has credentials.
 * 0, -EINVAL, -ENAMETOOLONG or -ENOMEM.
 */
int s3_signer_new(struct s3_signer **out, const char *region, const char *service);
/* Wipes the credentials and the cached key. Returns NULL. */
struct s3_signer *s3_signer_free(struct s3_signer *s);

/*
 * Replaces the credentials, as when temporary ones are refreshed; session_token
 * is NULL or "" for long-term keys. The old secret and the cached key are
 * wiped. On an error the signer keeps its previous credentials.
 * 0, -EINVAL (empty, or a character that cannot go in a header) or -ENAMETOOLONG.
 */
int s3_signer_set_credentials(struct s3_signer *s, const char *access_key_id, const char *secret,
                              const char *session_token);
/* For a bucket that answered from another region. 0, -EINVAL or -ENAMETOOLONG. */
int s3_signer_set_region(struct s3_signer *s, const char *region);

/*
 * Signs req. 0; -EINVAL for a malformed request or a signer without
 * credentials; -ENAMETOOLONG when a part is over its limit; -ENOMEM when
 * libcrypto fails. On an error *out is unspecified.
 */
int s3_sign(struct s3_signer *s, const struct s3_request *req, struct s3_signed *out);

/*
 * The canonical request s3_sign() would hash for req, NUL-terminated in out:
 * what to compare with the CanonicalRequest of a SignatureDoesNotMatch error.
 * Its length, or -EINVAL / -ENAMETOOLONG as s3_sign().
 */
ssize_t s3_canonical_request(const struct s3_signer *s, const struct s3_request *req, char *out,
                             size_t out_len);

/* How many signing keys the signer has derived: one a day unless invalidated. */
unsigned long s3_signer_key_derivations(const struct s3_signer *s);

/*
 * Percent-encodes in once, as SigV4 and S3 want it: A-Z a-z 0-9 - _ . ~ stay,
 * '/' stays when keep_slash, every other byte becomes %XX (uppercase hex). No
 * path normalisation: "//" and dot segments stay. The length written (without
 * the NUL), or -ENAMETOOLONG when it and the NUL do not fit in out_len.
 */
ssize_t s3_uri_encode(const char *in, bool keep_slash, char *out, size_t out_len);

/*
 * SHA-256 of the concatenated iovecs as 64 lowercase hex digits: the payload
 * hash. 0 or -ENOMEM. (Hex of other bytes: proto_hex_encode().)
 */
int s3_sha256_hex(const struct iovec *iov, size_t iovcnt, char out[S3_SHA256_HEX_SIZE]);
