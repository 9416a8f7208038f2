#pragma once

/*
 * The URL of the S3 and Cloudflare R2 backends and every option it takes,
 * checked once at startup, plus the parts every request is built from.
 *
 *   s3://BUCKET[/PREFIX][?name=value&...]
 *   r2://BUCKET[/PREFIX]?account=ID[&name=value&...]
 *
 * PREFIX is percent-decoded, with its leading and trailing '/' dropped
 * ("" stores at the top of the bucket); it must be UTF-8 without control
 * characters or empty segments. Values are percent-decoded, and '+' is a
 * plus. cairnd appends the [backend] keys after the URL's own parameters,
 * and a parameter given twice keeps its first value, so that what the URL
 * says wins (as for sftp://).
 *
 *   endpoint=URL        http[s]://HOST[:PORT] without a path; default
 *                       https://s3.REGION.amazonaws.com, for r2
 *                       https://ACCOUNT.r2.cloudflarestorage.com
 *   region=NAME         default us-east-1 (s3), auto (r2)
 *   path_style=0|1      https://HOST/BUCKET/KEY rather than
 *                       https://BUCKET.HOST/KEY; default 0 for s3 and 1 for
 *                       r2, and 1 when the endpoint host is an IP address,
 *                       where no BUCKET.HOST name can exist
 *   allow_http=0|1      an http:// endpoint or api_base is refused without it
 *   timeout=S           whole request, retries included (default 60)
 *   connect_timeout=S   default 10, at most timeout
 *   stall_timeout=S     no byte moved for this long fails the attempt (default 30)
 *   connections=N       requests in flight, 1..256 (default 16)
 *   storage_class=NAME  x-amz-storage-class of uploads, [A-Z0-9_]
 *   profile=NAME        section of ~/.aws/credentials (see s3-creds.h)
 *   access_key_id, secret_access_key, session_token   credentials
 * r2:// only:
 *   account=ID          [a-f0-9]{1,64}, required
 *   api_base=URL        Cloudflare API (default https://api.cloudflare.com/client/v4)
 *   api_token=TOKEN     API token that mints temporary credentials
 *   temp_ttl=S          their lifetime, 1..604800 (default 3600)
 */

#include <stdbool.h>
#include <stddef.h>

#define S3_MAX_HOST 256
#define S3_MAX_URL 512
#define S3_MAX_PREFIX 512
#define S3_MAX_KEY_ID 128
#define S3_MAX_SECRET 128
/* STS session tokens run to about a kilobyte; leave room. */
#define S3_MAX_SESSION_TOKEN 2048
#define S3_MAX_API_TOKEN 256
#define S3_MAX_PROFILE 128

#define S3_DEFAULT_REGION "us-east-1"
#define S3_DEFAULT_TIMEOUT_S 60
#define S3_DEFAULT_CONNECT_TIMEOUT_S 10
#define S3_DEFAULT_STALL_TIMEOUT_S 30
#define S3_DEFAULT_CONNECTIONS 16
#define S3_MAX_CONNECTIONS 256
#define S3_MAX_TIMEOUT_S 86400
#define R2_DEFAULT_API_BASE "https://api.cloudflare.com/client/v4"
#define R2_DEFAULT_TEMP_TTL_S 3600
#define R2_MAX_TEMP_TTL_S 604800

enum s3_flavor {
    S3_FLAVOR_S3,
    S3_FLAVOR_R2,
};

struct s3_opts {
    enum s3_flavor flavor;
    char bucket[64];
    char prefix[S3_MAX_PREFIX]; /* decoded; no leading or trailing '/'; "" for none */

    /* The endpoint, given or default, and its parts. */
    char endpoint[S3_MAX_URL]; /* "https://host[:port]", no trailing '/' */
    bool https;
    char host[S3_MAX_HOST]; /* without the brackets of an IPv6 literal */
    unsigned port;          /* explicit, or 443 / 80 */
    /* "host", or "host:port" when the port is not the scheme's ([v6] in brackets). */
    char host_header[S3_MAX_HOST + 10];
    /* Where requests go: path style sends Host: host_header and puts
     * base_path ("/BUCKET") before every key; virtual-hosted style sends
     * Host: BUCKET.host_header (request_host) and base_path is "". */
    char request_host[64 + S3_MAX_HOST + 10];
    char base_path[66];

    char region[64];
    bool path_style;
    bool allow_http;
    unsigned timeout_s, connect_timeout_s, stall_timeout_s;
    unsigned connections;
    char storage_class[64]; /* "" for the bucket's default */
    char profile[S3_MAX_PROFILE];

    /* Secrets: never logged, never in s3_describe(); s3_opts_clear() wipes them. */
    char access_key_id[S3_MAX_KEY_ID];
    char secret_access_key[S3_MAX_SECRET];
    char session_token[S3_MAX_SESSION_TOKEN];

    /* r2:// only. */
    char account[65];
    char api_base[S3_MAX_URL]; /* no trailing '/' */
    char api_token[S3_MAX_API_TOKEN];
    unsigned temp_ttl_s;
};

/* Parses an s3:// or r2:// URL. 0, or -EINVAL with *msg saying what is wrong. */
int s3_parse_url(const char *url, struct s3_opts *o, const char **msg);

/* The URL to show in logs and status: every setting except the secrets. */
void s3_describe(const struct s3_opts *o, char *out, size_t len);

/* Wipes the whole struct, secrets included, in a way the compiler keeps. */
void s3_opts_clear(struct s3_opts *o);
