/*
 * SigV4 canonicalisation and signing of whatever a request can carry: the
 * input is split at newlines into the method, the path, the host, then
 * "name=value" query parameters up to an empty line, then "name:value"
 * headers up to an empty line, then the access key id, the secret, the
 * session token and a region. Object keys come from cairn itself, but prefixes, hosts,
 * regions and credentials come from the user and the environment.
 */
#include <string.h>
#include <time.h>

#include "storage/s3/s3-sign.h"
#include "tests/fuzz/fuzz.h"

#define MAX_FIELDS 48

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size), *field[MAX_FIELDS], *canonical = NULL, *p;
    struct s3_param params[S3_SIGN_PARAMS_MAX];
    struct s3_header headers[S3_SIGN_HEADERS_MAX];
    struct s3_request req;
    struct s3_signer *signer = NULL;
    struct s3_signed *out = NULL;
    size_t n = 0, i;

    if (!text)
        return 0;
    for (p = text; n < MAX_FIELDS; n++) {
        field[n] = p;
        if (!(p = strchr(p, '\n'))) {
            n++;
            break;
        }
        *p++ = '\0';
    }
    while (n < MAX_FIELDS)
        field[n++] = "";
    memset(&req, 0, sizeof(req));
    req.method = field[0];
    req.path = field[1];
    req.host = field[2];
    req.payload_sha256 = S3_EMPTY_SHA256;
    req.now = 1369353600 + (time_t)(size * 86399);
    req.params = params;
    req.headers = headers;
    for (i = 3; i < MAX_FIELDS && *field[i] && req.n_params < S3_SIGN_PARAMS_MAX; i++) {
        char *eq = strchr(field[i], '=');
        params[req.n_params].name = field[i];
        params[req.n_params].value = eq ? (*eq = '\0', eq + 1) : "";
        req.n_params++;
    }
    for (i++; i < MAX_FIELDS && *field[i] && req.n_headers < S3_SIGN_HEADERS_MAX; i++) {
        char *colon = strchr(field[i], ':');
        headers[req.n_headers].name = field[i];
        headers[req.n_headers].value = colon ? (*colon = '\0', colon + 1) : "";
        req.n_headers++;
    }
    i = i + 1 < MAX_FIELDS - 4 ? i + 1 : MAX_FIELDS - 4;
    if (s3_signer_new(&signer, "us-east-1", "s3") != 0)
        goto out;
    (void)s3_signer_set_region(signer, *field[i + 3] ? field[i + 3] : "eu-west-1");
    if ((canonical = malloc(S3_SIGN_CANONICAL_SIZE)))
        (void)s3_canonical_request(signer, &req, canonical, S3_SIGN_CANONICAL_SIZE);
    if (s3_signer_set_credentials(signer, *field[i] ? field[i] : "AKIDEXAMPLE",
                                  *field[i + 1] ? field[i + 1] : "secret", field[i + 2]) == 0 &&
        (out = malloc(sizeof(*out))))
        (void)s3_sign(signer, &req, out);
out:
    free(out);
    free(canonical);
    s3_signer_free(signer);
    free(text);
    return 0;
}
