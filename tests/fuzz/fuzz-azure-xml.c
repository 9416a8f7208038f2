/*
 * Azure response bodies: List Blobs pages (every name handed to the caller)
 * and <Error> documents, as the service, a proxy or a man in the middle of
 * an http:// endpoint could send them.
 */
#include <string.h>

#include "storage/azure/azure-xml.h"
#include "storage/http/xml.h"
#include "tests/fuzz/fuzz.h"

static int on_blob(void *opaque, const char *name, size_t len, uint64_t size, int64_t mtime)
{
    size_t *total = opaque;

    /* The name must be as long as said and NUL-terminated: read all of it. */
    *total += strlen(name) == len ? len + size % 2 + (mtime > 0) : 0;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct az_list_page page;
    struct xml_error err;
    size_t total = 0;

    (void)az_xml_parse_list((const char *)data, size, AZ_XML_MAX_NAME, on_blob, &total, &page);
    (void)strlen(page.next_marker);
    (void)xml_parse_error((const char *)data, size, &err);
    return 0;
}
