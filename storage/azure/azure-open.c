/*
 * Opening the azure backend: the URL, the credentials, the endpoint, and
 * then the checks against the service, blocking, before the loop runs, so
 * that cairnd refuses to start and says why rather than failing its first
 * add: one List Blobs of at most one blob (the endpoint answers, the
 * container exists, the credentials are good), and with a SAS token also a
 * small blob written and deleted again, as a token that cannot write or
 * delete would fail every add or gc.
 */
#include "storage/azure/azure-int.h"
#include "storage/http/xml.h"
#include "storage/url.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((format(printf, 2, 3))) static void set_msg(struct az_be *ab, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ab->msg, sizeof(ab->msg), fmt, ap);
    va_end(ap);
}

static void no_done(struct az_op *op)
{
    (void)op;
}

/* One blocking request of the probe: 0 with the answer in *status, err and the message set. */
static int probe_one(struct az_be *ab, const char *method, const char *path, const char *query,
                     const char *const *extra, size_t nextra, const struct iovec *body,
                     long *status, struct xml_error *err, char *neterr, size_t neterr_len)
{
    struct az_op *op = calloc(1, sizeof(*op));
    struct backend_req fake = {.op = BACKEND_OP_LIST};
    int r;

    if (!op)
        return -ENOMEM;
    op->ab = ab;
    op->req = &fake;
    op->done = no_done;
    if (body) {
        op->http.body = body;
        op->http.body_iovcnt = 1;
    }
    memset(err, 0, sizeof(*err));
    if ((r = az_op_prepare(op, method, path, query, extra, nextra, AZ_ERROR_BODY_MAX)) < 0) {
        set_msg(ab, "azure: cannot build the first request: %s", strerror(-r));
        az_op_clear(op);
        free(op);
        return r;
    }
    http_perform(&ab->http_opts, &op->http);
    r = op->http.result;
    *status = op->http.status;
    az_error_of(&op->http, err);
    snprintf(neterr, neterr_len, "%s", op->http.error);
    az_op_clear(op);
    free(op);
    return r;
}

static int refused(struct az_be *ab, const char *what, long st, const struct xml_error *err)
{
    const char *how = ab->creds.auth == AZ_AUTH_SAS ? "SAS token" : "account key";

    if (st == 404 && strcmp(err->code, "ContainerNotFound") == 0) {
        set_msg(ab, "azure: container %s does not exist in account %s at %s", ab->o.container,
                ab->o.account, ab->o.endpoint);
        return -ENOENT;
    }
    if (st == 403 &&
        (strcmp(err->code, "AuthorizationPermissionMismatch") == 0 ||
         strcmp(err->code, "AuthorizationFailure") == 0) &&
        ab->creds.auth == AZ_AUTH_SAS) {
        set_msg(ab,
                "azure: the SAS token (%s) does not allow %s in container %s: cairn needs "
                "read, add, create, write, delete and list (sp=racwdl): %s",
                ab->creds.origin, what, ab->o.container, err->code);
        return -EACCES;
    }
    if (st == 403 || st == 401) {
        set_msg(ab, "azure: %s refused our %s (%s) when %s: %s%s%s%s", ab->o.endpoint, how,
                ab->creds.origin, what, err->code[0] ? err->code : "HTTP 403",
                err->message[0] ? ": " : "", err->message,
                strstr(err->message, "time") || strstr(err->message, "date")
                    ? " (is this machine's clock right?)"
                    : "");
        return -EACCES;
    }
    set_msg(ab, "azure: %s answered HTTP %ld %s%s%s when %s", ab->o.endpoint, st, err->code,
            err->message[0] ? ": " : "", err->message, what);
    return -EIO;
}

static int probe(struct az_be *ab)
{
    uint64_t give_up = uv_hrtime() / 1000000 + ab->o.timeout_s * 1000u;
    unsigned delay_ms = 200;
    char prefix[3 * AZ_MAX_PREFIX + 8], query[3 * AZ_MAX_PREFIX + 96], neterr[CURL_ERROR_SIZE];
    struct xml_error err;
    long st;
    int r;

    if (az_encode(ab->o.prefix, false, prefix, sizeof(prefix)) < 0)
        return -ENAMETOOLONG;
    snprintf(query, sizeof(query), "restype=container&comp=list&maxresults=1&prefix=%s%s", prefix,
             ab->o.prefix[0] ? "%2F" : "");
    for (;;) {
        r = probe_one(ab, "GET", NULL, query, NULL, 0, NULL, &st, &err, neterr, sizeof(neterr));
        if (r == 0 && st == 200)
            break;
        if (r < 0)
            return r;
        if (r == HTTP_E_TLS) {
            set_msg(ab, "azure: TLS to %s failed: %s", ab->o.endpoint, neterr);
            return -EPROTO;
        }
        bool transient = r == HTTP_E_NETWORK || st >= 500 || st == 429 || st == 408;
        if (!transient)
            return refused(ab, "listing the container", st, &err);
        if (uv_hrtime() / 1000000 + delay_ms >= give_up) {
            if (r)
                set_msg(ab, "azure: cannot reach %s: %s", ab->o.endpoint, neterr);
            else
                set_msg(ab, "azure: %s still answers HTTP %ld %s", ab->o.endpoint, st, err.code);
            return -EHOSTUNREACH;
        }
        backend_log(BACKEND_LOG_WARN, "azure: %s not ready (%s), trying again", ab->o.endpoint,
                    r             ? neterr
                    : err.code[0] ? err.code
                                  : "server error");
        usleep(delay_ms * 1000);
        if (delay_ms < 5000)
            delay_ms *= 2;
    }
    if (ab->creds.auth != AZ_AUTH_SAS)
        return 0;
    /* A token may list and not write: try a small blob outside cairn's keys, and remove it. */
    char path[AZ_MAX_PATH], key[64];
    static const char body[] = "cairn write check\n";
    struct iovec iov = {(void *)body, sizeof(body) - 1};
    const char *extra[1] = {"x-ms-blob-type: BlockBlob"};

    snprintf(key, sizeof(key), "probe/write-check-%ld", (long)getpid());
    if ((r = az_blob_path(ab, key, path, sizeof(path))) < 0)
        return r;
    r = probe_one(ab, "PUT", path, "", extra, 1, &iov, &st, &err, neterr, sizeof(neterr));
    if (r == 0 && st != 201)
        return refused(ab, "writing a blob", st, &err);
    if (r) {
        set_msg(ab, "azure: cannot reach %s: %s", ab->o.endpoint, neterr);
        return -EHOSTUNREACH;
    }
    r = probe_one(ab, "DELETE", path, "", NULL, 0, NULL, &st, &err, neterr, sizeof(neterr));
    if (r == 0 && st != 202 && st != 404)
        return refused(ab, "deleting a blob", st, &err);
    if (r) {
        set_msg(ab, "azure: cannot reach %s: %s", ab->o.endpoint, neterr);
        return -EHOSTUNREACH;
    }
    return 0;
}

/*
 * Tests only: CAIRN_TEST_AZURE_BLOCK_SIZE=N, blocks of N bytes above N, to
 * test block uploads with small packs; CAIRN_TEST_AZURE_LIST_PAGE=N, at most
 * N blobs per List Blobs page, to test paging with few packs.
 */
static void test_sizes(struct az_be *ab)
{
    const char *v;
    unsigned long n;

    if ((v = getenv("CAIRN_TEST_AZURE_LIST_PAGE")) &&
        url_parse_uint(v, 1, BACKEND_LIST_MAX, &n) == 0)
        ab->list_page = n;
    v = getenv("CAIRN_TEST_AZURE_BLOCK_SIZE");

    ab->put_single_max = AZ_PUT_SINGLE_MAX;
    ab->block_size = AZ_BLOCK_SIZE;
    if (v && url_parse_uint(v, 1024, AZ_BLOCK_SIZE, &n) == 0) {
        ab->put_single_max = n;
        ab->block_size = n;
    }
}

int az_open_checks(struct az_be *ab, const char *url, const char **msg)
{
    const char *m;
    int r;

    if ((r = az_parse_url(url, &ab->o, msg)) != 0)
        return r;
    *msg = ab->msg;
    if (http_global_init() < 0) {
        set_msg(ab, "azure: libcurl failed to initialise");
        return -EIO;
    }
    if ((r = az_creds_resolve(&ab->creds, &ab->o, ab->msg, sizeof(ab->msg))) < 0)
        return r;
    /* The endpoint option wins over one a connection string names. */
    if ((r = az_set_endpoint(&ab->o,
                             ab->o.endpoint_raw[0] ? ab->o.endpoint_raw : ab->creds.endpoint,
                             !ab->o.endpoint_raw[0] && ab->creds.endpoint_http_ok, &m)) < 0) {
        set_msg(ab, "%s", m);
        return r;
    }
    if (!(ab->marks = calloc(AZ_MARKS, sizeof(*ab->marks)))) {
        set_msg(ab, "azure: out of memory");
        return -ENOMEM;
    }
    test_sizes(ab);
    ab->http_opts = (struct http_opts){
        .connections = ab->o.connections,
        .connect_timeout_ms = ab->o.connect_timeout_s * 1000u,
        .stall_timeout_ms = ab->o.stall_timeout_s * 1000u,
    };
    backend_log(BACKEND_LOG_INFO, "azure: credentials from %s", ab->creds.origin);
    return probe(ab);
}
