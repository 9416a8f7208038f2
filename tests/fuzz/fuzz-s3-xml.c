/*
 * S3 response bodies: ListObjectsV2 pages (every key handed to the caller)
 * and <Error> documents, as an S3 server, a proxy or a man in the middle of
 * an http:// endpoint could send them.
 */
#include <string.h>

#include "storage/s3/s3-xml.h"
#include "storage/http/xml.h"
#include "tests/fuzz/fuzz.h"

static int on_key(void *opaque, const char *key, size_t key_len, uint64_t size, int64_t mtime)
{
    size_t *total = opaque;

    /* The key must be as long as said and NUL-terminated: read all of it. */
    *total += strlen(key) == key_len ? key_len + size % 2 + (mtime > 0) : 0;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct s3_list_page page;
    struct xml_error err;
    size_t total = 0;

    (void)s3_xml_parse_list((const char *)data, size, S3_XML_MAX_KEY, on_key, &total, &page);
    (void)xml_parse_error((const char *)data, size, &err);
    return 0;
}
