/*
 * AWS Signature Version 4, header-based, single-chunk payload:
 *
 *   CanonicalRequest = Method \n CanonicalURI \n CanonicalQuery \n
 *                      CanonicalHeaders \n SignedHeaders \n PayloadHash
 *   StringToSign     = "AWS4-HMAC-SHA256" \n AmzDate \n Scope \n hex(SHA256(CanonicalRequest))
 *   Scope            = Date/Region/Service/aws4_request
 *   SigningKey       = HMAC(HMAC(HMAC(HMAC("AWS4" Secret, Date), Region), Service),
 *                           "aws4_request")
 *   Signature        = hex(HMAC(SigningKey, StringToSign))
 */
#include "storage/s3/s3-sign.h"
#include "proto/proto.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define ALGORITHM "AWS4-HMAC-SHA256"
#define TERMINATOR "aws4_request"
#define SHA256_LEN 32
/* "x-amz-date" and the like: what the signer adds to every request. */
#define SIGNER_HEADERS 4
/* Every signed header name with a ';' after it. */
#define SIGNED_HEADERS_SIZE ((S3_SIGN_HEADERS_MAX + SIGNER_HEADERS) * (S3_SIGN_HEADER_NAME_MAX + 1))

struct s3_signer {
    char access_key_id[S3_SIGN_ACCESS_KEY_MAX + 1];
    /* "AWS4" and the secret: the key of the first HMAC, kept whole. */
    char aws4_secret[4 + S3_SIGN_SECRET_MAX + 1];
    size_t aws4_secret_len;
    char session_token[S3_SIGN_TOKEN_MAX + 1];
    bool has_credentials;
    char region[S3_SIGN_REGION_MAX + 1];
    char service[S3_SIGN_SERVICE_MAX + 1];

    /* The signing key of key_date (YYYYMMDD) for the current secret and region. */
    bool key_valid;
    char key_date[9];
    unsigned char key[SHA256_LEN];
    unsigned long key_derivations;

    /* Room for the canonical request, here rather than on a thread's stack. */
    char canonical[S3_SIGN_CANONICAL_SIZE];
};

/* Appends to a fixed buffer; remembers an overflow instead of cutting short. */
struct text {
    char *buf;
    size_t len;
    size_t size;
    bool overflow;
};

static void text_init(struct text *t, char *buf, size_t size)
{
    t->buf = buf;
    t->len = 0;
    t->size = size;
    t->overflow = size == 0;
    if (size > 0)
        buf[0] = '\0';
}

static void text_add(struct text *t, const char *s, size_t n)
{
    if (t->overflow || n >= t->size - t->len) {
        t->overflow = true;
        return;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void text_str(struct text *t, const char *s)
{
    text_add(t, s, strlen(s));
}

static void text_char(struct text *t, char c)
{
    text_add(t, &c, 1);
}

static bool is_unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '~';
}

ssize_t s3_uri_encode(const char *in, bool keep_slash, char *out, size_t out_len)
{
    static const char digits[] = "0123456789ABCDEF";
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        if (is_unreserved(*p) || (keep_slash && *p == '/')) {
            if (out_len - o < 2)
                return -ENAMETOOLONG;
            out[o++] = (char)*p;
        } else {
            if (out_len - o < 4)
                return -ENAMETOOLONG;
            out[o++] = '%';
            out[o++] = digits[*p >> 4];
            out[o++] = digits[*p & 15];
        }
    }
    if (out_len - o < 1)
        return -ENAMETOOLONG;
    out[o] = '\0';
    return (ssize_t)o;
}

int s3_sha256_hex(const struct iovec *iov, size_t iovcnt, char out[S3_SHA256_HEX_SIZE])
{
    unsigned char md[SHA256_LEN];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int r = -ENOMEM;

    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
        goto out;
    for (size_t i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > 0 && !EVP_DigestUpdate(ctx, iov[i].iov_base, iov[i].iov_len))
            goto out;
    }
    if (!EVP_DigestFinal_ex(ctx, md, &md_len) || md_len != SHA256_LEN)
        goto out;
    proto_hex_encode(md, SHA256_LEN, out);
    r = 0;
out:
    EVP_MD_CTX_free(ctx);
    return r;
}

static int sha256_hex_of(const char *s, size_t n, char out[S3_SHA256_HEX_SIZE])
{
    struct iovec iov = {.iov_base = (void *)s, .iov_len = n};
    return s3_sha256_hex(&iov, 1, out);
}

static int hmac(const void *key, size_t key_len, const char *msg, size_t msg_len,
                unsigned char out[SHA256_LEN])
{
    unsigned int out_len = 0;

    if (!HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, msg_len, out,
              &out_len) ||
        out_len != SHA256_LEN)
        return -ENOMEM;
    return 0;
}

/* Copies a checked string into a field of size `size`; -ENAMETOOLONG if it does not fit. */
static int copy_field(char *field, size_t size, const char *s)
{
    size_t n = strlen(s);
    if (n >= size)
        return -ENAMETOOLONG;
    memcpy(field, s, n + 1);
    return 0;
}

/* Region and service go into the credential scope: lowercase letters, digits and '-'. */
static int check_scope_part(const char *s, size_t max)
{
    size_t n = 0;

    if (!s || !*s)
        return -EINVAL;
    for (; s[n]; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return -EINVAL;
    }
    return n > max ? -ENAMETOOLONG : 0;
}

/* A header value or credential: printable, with no CR, LF or other control byte. */
static bool is_header_safe(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return false;
    }
    return true;
}

static void invalidate_key(struct s3_signer *s)
{
    OPENSSL_cleanse(s->key, sizeof(s->key));
    s->key_valid = false;
}

static void wipe_credentials(struct s3_signer *s)
{
    OPENSSL_cleanse(s->aws4_secret, sizeof(s->aws4_secret));
    OPENSSL_cleanse(s->session_token, sizeof(s->session_token));
    OPENSSL_cleanse(s->access_key_id, sizeof(s->access_key_id));
    s->aws4_secret_len = 0;
    s->has_credentials = false;
    invalidate_key(s);
}

int s3_signer_new(struct s3_signer **out, const char *region, const char *service)
{
    struct s3_signer *s;
    int r;

    *out = NULL;
    if ((r = check_scope_part(region, S3_SIGN_REGION_MAX)) < 0 ||
        (r = check_scope_part(service, S3_SIGN_SERVICE_MAX)) < 0)
        return r;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    /* Both were checked against the sizes of the fields. */
    (void)copy_field(s->region, sizeof(s->region), region);
    (void)copy_field(s->service, sizeof(s->service), service);
    *out = s;
    return 0;
}

struct s3_signer *s3_signer_free(struct s3_signer *s)
{
    if (s) {
        OPENSSL_cleanse(s, sizeof(*s));
        free(s);
    }
    return NULL;
}

int s3_signer_set_credentials(struct s3_signer *s, const char *access_key_id, const char *secret,
                              const char *session_token)
{
    size_t id_len, secret_len, token_len;

    if (!access_key_id || !secret || !*access_key_id || !*secret)
        return -EINVAL;
    if (!session_token)
        session_token = "";
    id_len = strlen(access_key_id);
    secret_len = strlen(secret);
    token_len = strlen(session_token);
    /* The key id goes into "Credential=ID/scope, ...": no separator may hide in it. */
    for (const char *p = access_key_id; *p; p++) {
        if (*p <= ' ' || *p == 0x7f || *p == '/' || *p == ',' || *p == '=')
            return -EINVAL;
    }
    if (!is_header_safe(session_token))
        return -EINVAL;
    if (id_len > S3_SIGN_ACCESS_KEY_MAX || secret_len > S3_SIGN_SECRET_MAX ||
        token_len > S3_SIGN_TOKEN_MAX)
        return -ENAMETOOLONG;

    wipe_credentials(s);
    memcpy(s->access_key_id, access_key_id, id_len + 1);
    memcpy(s->aws4_secret, "AWS4", 4);
    memcpy(s->aws4_secret + 4, secret, secret_len + 1);
    s->aws4_secret_len = 4 + secret_len;
    memcpy(s->session_token, session_token, token_len + 1);
    s->has_credentials = true;
    return 0;
}

int s3_signer_set_region(struct s3_signer *s, const char *region)
{
    int r = check_scope_part(region, S3_SIGN_REGION_MAX);
    if (r < 0)
        return r;
    if (strcmp(s->region, region) != 0) {
        (void)copy_field(s->region, sizeof(s->region), region);
        invalidate_key(s);
    }
    return 0;
}

unsigned long s3_signer_key_derivations(const struct s3_signer *s)
{
    return s->key_derivations;
}

/* The signing key for date (YYYYMMDD), derived only when the day, secret or region changed. */
static int signing_key(struct s3_signer *s, const char *date)
{
    unsigned char k_date[SHA256_LEN], k_region[SHA256_LEN], k_service[SHA256_LEN];
    int r;

    if (s->key_valid && memcmp(s->key_date, date, 8) == 0)
        return 0;
    invalidate_key(s);
    if ((r = hmac(s->aws4_secret, s->aws4_secret_len, date, 8, k_date)) == 0 &&
        (r = hmac(k_date, SHA256_LEN, s->region, strlen(s->region), k_region)) == 0 &&
        (r = hmac(k_region, SHA256_LEN, s->service, strlen(s->service), k_service)) == 0 &&
        (r = hmac(k_service, SHA256_LEN, TERMINATOR, strlen(TERMINATOR), s->key)) == 0) {
        memcpy(s->key_date, date, 8);
        s->key_date[8] = '\0';
        s->key_valid = true;
        s->key_derivations++;
    }
    OPENSSL_cleanse(k_date, sizeof(k_date));
    OPENSSL_cleanse(k_region, sizeof(k_region));
    OPENSSL_cleanse(k_service, sizeof(k_service));
    return r;
}

static int amz_date(time_t now, char out[S3_SIGN_AMZ_DATE_SIZE])
{
    struct tm tm;

    /* Years past 9999 would not fit the format that S3 parses. */
    if (!gmtime_r(&now, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900)
        return -EINVAL;
    if (strftime(out, S3_SIGN_AMZ_DATE_SIZE, "%Y%m%dT%H%M%SZ", &tm) != S3_SIGN_AMZ_DATE_SIZE - 1)
        return -EINVAL;
    return 0;
}

static bool is_method(const char *m)
{
    size_t n = 0;

    if (!m)
        return false;
    for (; m[n]; n++) {
        if (m[n] < 'A' || m[n] > 'Z')
            return false;
    }
    return n > 0 && n <= S3_SIGN_METHOD_MAX;
}

static bool is_payload_hash(const char *h)
{
    size_t n = 0;

    if (!h)
        return false;
    for (; h[n]; n++) {
        if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f')))
            return false;
    }
    return n == S3_SHA256_HEX_SIZE - 1;
}

static bool is_host(const char *h)
{
    size_t n = 0;

    if (!h)
        return false;
    for (; h[n]; n++) {
        unsigned char c = (unsigned char)h[n];
        if (c <= ' ' || c == 0x7f || c == '/' || c == '@')
            return false;
    }
    return n > 0 && n <= S3_SIGN_HOST_MAX;
}

/* An RFC 9110 token character. */
static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

struct param {
    const char *name;  /* encoded */
    const char *value; /* encoded */
};

static int compare_params(const void *a, const void *b)
{
    const struct param *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->value, y->value);
}

/*
 * The canonical query string: every name and value encoded (with '/'), the
 * pairs sorted by name, then value, "name=value" joined with '&'.
 */
static int canonical_query(const struct s3_request *req, char *out, size_t out_len)
{
    struct param params[S3_SIGN_PARAMS_MAX];
    /* Each encoded part, NUL-terminated, one after the other. */
    char encoded[S3_SIGN_QUERY_SIZE * 2];
    size_t used = 0;
    struct text t;

    if (req->n_params > S3_SIGN_PARAMS_MAX || (req->n_params > 0 && !req->params))
        return -EINVAL;
    for (size_t i = 0; i < req->n_params; i++) {
        const char *name = req->params[i].name;
        const char *value = req->params[i].value ? req->params[i].value : "";
        ssize_t n;

        if (!name || !*name)
            return -EINVAL;
        n = s3_uri_encode(name, false, encoded + used, sizeof(encoded) - used);
        if (n < 0)
            return (int)n;
        params[i].name = encoded + used;
        used += (size_t)n + 1;
        n = s3_uri_encode(value, false, encoded + used, sizeof(encoded) - used);
        if (n < 0)
            return (int)n;
        params[i].value = encoded + used;
        used += (size_t)n + 1;
    }
    qsort(params, req->n_params, sizeof(params[0]), compare_params);

    text_init(&t, out, out_len);
    for (size_t i = 0; i < req->n_params; i++) {
        if (i > 0)
            text_char(&t, '&');
        text_str(&t, params[i].name);
        text_char(&t, '=');
        text_str(&t, params[i].value);
    }
    return t.overflow ? -ENAMETOOLONG : 0;
}

struct header {
    char name[S3_SIGN_HEADER_NAME_MAX + 1]; /* lowercase */
    const char *value;                      /* as given */
};

static int compare_headers(const void *a, const void *b)
{
    const struct header *x = a, *y = b;
    return strcmp(x->name, y->name);
}

/* The names that s3_sign() sets itself; a caller giving one would sign it twice. */
static bool is_signer_header(const char *lower)
{
    static const char *const names[] = {"host", "x-amz-date", "x-amz-content-sha256",
                                        "x-amz-security-token", "authorization"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(lower, names[i]) == 0)
            return true;
    }
    return false;
}

static int add_header(struct header *h, const char *name, const char *value)
{
    size_t n = 0;

    if (!name || !value || !*name)
        return -EINVAL;
    for (; name[n]; n++) {
        char c = name[n];
        if (!is_tchar(c))
            return -EINVAL;
        if (n >= S3_SIGN_HEADER_NAME_MAX)
            return -ENAMETOOLONG;
        h->name[n] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    h->name[n] = '\0';
    if (!is_header_safe(value))
        return -EINVAL;
    if (strlen(value) > S3_SIGN_HEADER_VALUE_MAX)
        return -ENAMETOOLONG;
    h->value = value;
    return 0;
}

/* A header value trimmed, with each run of spaces and tabs inside it made one space. */
static void text_header_value(struct text *t, const char *v)
{
    bool space = false;

    while (*v == ' ' || *v == '\t')
        v++;
    for (; *v; v++) {
        if (*v == ' ' || *v == '\t') {
            space = true;
            continue;
        }
        if (space)
            text_char(t, ' ');
        space = false;
        text_char(t, *v);
    }
}

/*
 * Builds the canonical request of req in text, with its encoded path and
 * query in path/query and the SignedHeaders list in signed_headers.
 */
static int build_canonical(const struct s3_signer *s, const struct s3_request *req,
                           const char *date, char *path, char *query,
                           char signed_headers[SIGNED_HEADERS_SIZE], struct text *text)
{
    struct header headers[S3_SIGN_HEADERS_MAX + SIGNER_HEADERS];
    size_t n = 0;
    struct text sh;
    ssize_t len;
    int r;

    if (!s->has_credentials || !req || !is_method(req->method) || !req->path ||
        req->path[0] != '/' || !is_host(req->host) || !is_payload_hash(req->payload_sha256) ||
        req->n_headers > S3_SIGN_HEADERS_MAX || (req->n_headers > 0 && !req->headers))
        return -EINVAL;

    len = s3_uri_encode(req->path, true, path, S3_SIGN_PATH_SIZE);
    if (len < 0)
        return (int)len;
    if ((r = canonical_query(req, query, S3_SIGN_QUERY_SIZE)) < 0)
        return r;

    for (size_t i = 0; i < req->n_headers; i++) {
        if ((r = add_header(&headers[n], req->headers[i].name, req->headers[i].value)) < 0)
            return r;
        if (is_signer_header(headers[n].name))
            return -EINVAL;
        n++;
    }
    /* The signer's own names are lowercase tokens and fit. */
    (void)add_header(&headers[n++], "host", req->host);
    (void)add_header(&headers[n++], "x-amz-date", date);
    (void)add_header(&headers[n++], "x-amz-content-sha256", req->payload_sha256);
    if (s->session_token[0]) {
        headers[n] = (struct header){.name = "x-amz-security-token", .value = s->session_token};
        n++;
    }
    qsort(headers, n, sizeof(headers[0]), compare_headers);
    for (size_t i = 1; i < n; i++) {
        /* One name twice would need its values joined; S3 requests never need that. */
        if (strcmp(headers[i - 1].name, headers[i].name) == 0)
            return -EINVAL;
    }

    text_init(&sh, signed_headers, SIGNED_HEADERS_SIZE);
    text_str(text, req->method);
    text_char(text, '\n');
    text_str(text, path);
    text_char(text, '\n');
    text_str(text, query);
    text_char(text, '\n');
    for (size_t i = 0; i < n; i++) {
        text_str(text, headers[i].name);
        text_char(text, ':');
        text_header_value(text, headers[i].value);
        text_char(text, '\n');
        if (i > 0)
            text_char(&sh, ';');
        text_str(&sh, headers[i].name);
    }
    text_char(text, '\n');
    text_str(text, signed_headers);
    text_char(text, '\n');
    text_str(text, req->payload_sha256);
    return text->overflow || sh.overflow ? -ENAMETOOLONG : 0;
}

ssize_t s3_canonical_request(const struct s3_signer *s, const struct s3_request *req, char *out,
                             size_t out_len)
{
    char date[S3_SIGN_AMZ_DATE_SIZE];
    char path[S3_SIGN_PATH_SIZE], query[S3_SIGN_QUERY_SIZE];
    char signed_headers[SIGNED_HEADERS_SIZE];
    struct text t;
    int r;

    if (!req)
        return -EINVAL;
    if ((r = amz_date(req->now, date)) < 0)
        return r;
    text_init(&t, out, out_len);
    if ((r = build_canonical(s, req, date, path, query, signed_headers, &t)) < 0)
        return r;
    return (ssize_t)t.len;
}

int s3_sign(struct s3_signer *s, const struct s3_request *req, struct s3_signed *out)
{
    char signed_headers[SIGNED_HEADERS_SIZE];
    char canonical_hash[S3_SHA256_HEX_SIZE];
    char to_sign[256];
    unsigned char signature[SHA256_LEN];
    struct text t;
    int r;

    if (!req)
        return -EINVAL;
    if ((r = amz_date(req->now, out->amz_date)) < 0)
        return r;
    text_init(&t, s->canonical, sizeof(s->canonical));
    r = build_canonical(s, req, out->amz_date, out->path, out->query, signed_headers, &t);
    if (r == 0)
        r = sha256_hex_of(t.buf, t.len, canonical_hash);
    /* The canonical request holds the session token, whole or in part. */
    OPENSSL_cleanse(s->canonical, t.len);
    if (r < 0)
        return r;

    /* The scope's parts are checked short enough: to_sign is at most 218 bytes. */
    text_init(&t, to_sign, sizeof(to_sign));
    text_str(&t, ALGORITHM "\n");
    text_str(&t, out->amz_date);
    text_char(&t, '\n');
    text_add(&t, out->amz_date, 8);
    text_char(&t, '/');
    text_str(&t, s->region);
    text_char(&t, '/');
    text_str(&t, s->service);
    text_str(&t, "/" TERMINATOR "\n");
    text_str(&t, canonical_hash);
    if (t.overflow)
        return -ENAMETOOLONG;

    if ((r = signing_key(s, out->amz_date)) < 0)
        return r;
    if ((r = hmac(s->key, sizeof(s->key), t.buf, t.len, signature)) < 0)
        return r;
    proto_hex_encode(signature, SHA256_LEN, out->signature);

    text_init(&t, out->authorization, sizeof(out->authorization));
    text_str(&t, ALGORITHM " Credential=");
    text_str(&t, s->access_key_id);
    text_char(&t, '/');
    text_add(&t, out->amz_date, 8);
    text_char(&t, '/');
    text_str(&t, s->region);
    text_char(&t, '/');
    text_str(&t, s->service);
    text_str(&t, "/" TERMINATOR ", SignedHeaders=");
    text_str(&t, signed_headers);
    text_str(&t, ", Signature=");
    text_str(&t, out->signature);
    if (t.overflow)
        return -ENAMETOOLONG;
    memcpy(out->security_token, s->session_token, strlen(s->session_token) + 1);
    return 0;
}
