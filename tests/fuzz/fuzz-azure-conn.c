/*
 * What the azure backend reads at start besides its responses:
 * AZURE_STORAGE_CONNECTION_STRING (the connection string parser, then the
 * credentials resolved from it for an azure:// URL, and the endpoint it
 * names), and the azure:// URL itself with its description. A NUL byte
 * splits the input into the connection string and the URL.
 */
#include <stdlib.h>
#include <string.h>

#include "storage/azure/azure-creds.h"
#include "storage/azure/azure-url.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = fuzz_cstr(data, size);
    const uint8_t *nul = memchr(data, 0, size);
    char *url = nul ? fuzz_cstr(nul + 1, size - (size_t)(nul + 1 - data)) : NULL;
    struct az_opts *o = calloc(1, sizeof(*o));
    struct az_creds *c = calloc(1, sizeof(*c));
    struct az_conn *cs = calloc(1, sizeof(*cs));
    const char *msg;
    char out[2048];

    if (in && o && c && cs) {
        (void)az_conn_parse(in, cs, &msg);
        if (az_parse_url(url ? url : "azure://devstoreaccount1/box/p", o, &msg) == 0) {
            setenv("AZURE_STORAGE_CONNECTION_STRING", in, 1);
            if (az_creds_resolve(c, o, out, sizeof(out)) == 0)
                (void)az_set_endpoint(o, c->endpoint[0] ? c->endpoint : o->endpoint_raw,
                                      c->endpoint_http_ok, &msg);
            az_describe(o, out, sizeof(out));
            unsetenv("AZURE_STORAGE_CONNECTION_STRING");
        }
    }
    free(in);
    free(url);
    free(o);
    free(c);
    free(cs);
    return 0;
}
