/*
 * az-raw: the peer of backend-bench --url azure://... - the same Blob
 * service requests made as plainly as libcurl allows, signed the same way
 * (SharedKey, storage/azure's az_sign), so the backend's own cost shows as
 * a ratio to a bare HTTP client's.
 *
 *   az-raw --endpoint http://HOST:PORT/ACCOUNT --account A --container C [--prefix P]
 *          --size BYTES --iterations N [--range BYTES] [--list=50]
 *
 * The key is AZURE_STORAGE_KEY (base64). One curl easy handle does every
 * request and keeps its connection alive from one to the next, as the
 * backend's connection pool does; the connection is opened by a first,
 * untimed request, as the backend is opened before backend-bench's clock
 * starts. The operations are backend-bench's, in its order, under the same
 * keys below the prefix (bench/raw-common.h runs them): put of PREFIXobj/oN (Put Blob), get (Get
 * Blob), range (Get Blob with x-ms-range: the last BYTES bytes), head (Get Blob Properties),
 * list_50 (List Blobs of PREFIXla/, holding 50 blobs of 1 KiB put beforehand, untimed, unless they
 * are there already; every page) and delete (Delete Blob).
 *
 * Output: backend-bench's JSON, with the samples under modes.libcurl. Exit 1
 * when a request fails or a read returns other bytes than were written.
 */

#include "raw-common.h"

#include "storage/azure/azure-creds.h"
#include "storage/azure/azure-sign.h"

#include <curl/curl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_URL 4096

struct az_raw {
    struct raw_bench b; /* first: the callbacks' struct raw_bench * is this */
    char endpoint[512]; /* scheme://host[:port], without the path */
    char base[256];     /* the endpoint's path: "/ACCOUNT" on Azurite, "" on Azure */
    char account[64];
    char container[64];
    uint8_t key[AZ_MAX_KEY];
    size_t key_len;
};

/*
 * One request on the kept handle: `path` as sent (from the endpoint's path
 * on), `query` without '?' ("" for none), a PUT's body, an x-ms-range or
 * NULL. The HTTP status, or -1 when the transfer failed.
 */
static long request(struct az_raw *r, const char *method, const char *path, const char *query,
                    const uint8_t *body, size_t body_len, const char *range)
{
    char date[AZ_DATE_SIZE], h_date[64], h_auth[AZ_AUTH_SIZE + 32], auth[AZ_AUTH_SIZE],
        url[MAX_URL];
    const char *hdrs[4];
    size_t nh = 0;
    struct curl_slist *headers = NULL;
    bool put = strcmp(method, "PUT") == 0;

    az_format_date(time(NULL), date);
    snprintf(h_date, sizeof(h_date), "x-ms-date: %s", date);
    hdrs[nh++] = h_date;
    hdrs[nh++] = "x-ms-version: " AZ_VERSION;
    if (put)
        hdrs[nh++] = "x-ms-blob-type: BlockBlob";
    if (range)
        hdrs[nh++] = range;
    struct az_sign_req sr = {.method = method,
                             .path = path,
                             .query = query,
                             .content_length = put ? body_len : 0,
                             .headers = hdrs,
                             .nheaders = nh};
    if (az_sign(r->account, r->key, r->key_len, &sr, auth, sizeof(auth)) < 0) {
        fprintf(stderr, "az-raw: cannot sign %s %s\n", method, path);
        return -1;
    }
    snprintf(h_auth, sizeof(h_auth), "Authorization: %s", auth);
    for (size_t i = 0; i < nh; i++)
        headers = curl_slist_append(headers, hdrs[i]);
    headers = curl_slist_append(headers, h_auth);
    headers = curl_slist_append(headers, "Expect:");
    snprintf(url, sizeof(url), "%s%s%s%s", r->endpoint, path, query[0] ? "?" : "", query);
    return raw_perform(&r->b, method, url, body, body_len, headers);
}

static void blob_path(const struct az_raw *r, char *out, size_t len, const char *dir, unsigned i)
{
    char name[700], enc[2100];

    snprintf(name, sizeof(name), "%s%s/o%06u", r->b.prefix, dir, i);
    raw_encode(name, true, enc, sizeof(enc));
    snprintf(out, len, "%s/%s/%s", r->base, r->container, enc);
}

static long object(struct raw_bench *b, const char *method, const char *dir, unsigned i,
                   const uint8_t *body, size_t body_len, const char *range)
{
    struct az_raw *r = (struct az_raw *)b;
    char path[3000];

    blob_path(r, path, sizeof(path), dir, i);
    return request(r, method, path, "", body, body_len, range);
}

/* Every page of List Blobs of PREFIXla/; the number of <Blob>s in *count. */
static int list(struct raw_bench *b, unsigned *count)
{
    struct az_raw *r = (struct az_raw *)b;
    char path[512], full[600], enc_prefix[2000], marker[3200] = "", query[6000];

    *count = 0;
    snprintf(path, sizeof(path), "%s/%s", r->base, r->container);
    snprintf(full, sizeof(full), "%sla/", b->prefix);
    raw_encode(full, false, enc_prefix, sizeof(enc_prefix));
    do {
        snprintf(query, sizeof(query), "restype=container&comp=list&prefix=%s%s%s", enc_prefix,
                 marker[0] ? "&marker=" : "", marker);
        if (raw_expect(b, request(r, "GET", path, query, NULL, 0, NULL), 200, "list", 0) < 0)
            return -1;
        b->body[b->len] = '\0';
        for (const char *p = (const char *)b->body; (p = strstr(p, "<Blob>")); p += 6)
            (*count)++;
        marker[0] = '\0';
        const char *m = strstr((const char *)b->body, "<NextMarker>");
        if (m) {
            char raw_marker[1100];
            size_t o = 0;
            for (m += strlen("<NextMarker>"); *m && *m != '<' && o + 1 < sizeof(raw_marker); m++)
                raw_marker[o++] = *m;
            raw_marker[o] = '\0';
            raw_encode(raw_marker, false, marker, sizeof(marker));
        }
    } while (marker[0]);
    return 0;
}

static const struct raw_service az_service = {
    .name = "az-raw",
    .list_noun = "blobs",
    .range_name = "x-ms-range",
    .put_status = 201,
    .delete_status = 202,
    .object = object,
    .list = list,
};

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"endpoint", required_argument, NULL, 'e'},
        {"account", required_argument, NULL, 'a'},
        {"container", required_argument, NULL, 'c'},
        RAW_COMMON_OPTIONS,
        {0},
    };
    struct az_raw r = {.b = {.svc = &az_service, .iterations = 10}};
    const char *key = getenv("AZURE_STORAGE_KEY"), *ep = NULL;
    int opt, status, n;

    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'e':
            ep = optarg;
            break;
        case 'a':
            if (raw_copy(r.account, sizeof(r.account), optarg) < 0)
                goto usage;
            break;
        case 'c':
            if (raw_copy(r.container, sizeof(r.container), optarg) < 0)
                goto usage;
            break;
        default:
            if (raw_option(&r.b, opt, optarg) != 0)
                goto usage;
            break;
        }
    }
    if (optind < argc || !ep || !r.account[0] || !r.container[0] || r.b.range > r.b.size || !key)
        goto usage;
    /* scheme://host[:port] and the path after it */
    const char *host = strstr(ep, "://");
    const char *slash = host ? strchr(host + 3, '/') : NULL;
    size_t ep_len = slash ? (size_t)(slash - ep) : strlen(ep);
    if (!host || ep_len >= sizeof(r.endpoint) ||
        raw_copy(r.base, sizeof(r.base), slash ? slash : "") < 0)
        goto usage;
    memcpy(r.endpoint, ep, ep_len);
    r.endpoint[ep_len] = '\0';
    if (r.base[0] && r.base[strlen(r.base) - 1] == '/')
        r.base[strlen(r.base) - 1] = '\0';
    if ((n = az_base64_decode(key, r.key, sizeof(r.key))) <= 0) {
        fprintf(stderr, "az-raw: AZURE_STORAGE_KEY is not base64\n");
        return 2;
    }
    r.key_len = (size_t)n;
    if (raw_end_prefix(&r.b) < 0)
        goto usage;
    status = raw_start(&r.b);
    if (status == 0)
        status = raw_run(&r.b);
    explicit_bzero(r.key, sizeof(r.key));
    return status;

usage:
    fprintf(stderr, "usage: az-raw --endpoint URL --account A --container C [--prefix P] "
                    "--size BYTES [--iterations N] [--range BYTES] [--list=50]\n"
                    "       (AZURE_STORAGE_KEY in the environment)\n");
    return 2;
}
