#pragma once

/*
 * The List Blobs response (<EnumerationResults>), read on the shared XML
 * tokenizer (storage/http/xml.h) with its limits: each <Blob>'s <Name>, and
 * its <Content-Length> and <Last-Modified> under <Properties>, and the page's
 * <NextMarker>, which is opaque and passed back as it is. Error documents are
 * xml_parse_error()'s.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Blob names are at most 1024 characters. */
#define AZ_XML_MAX_NAME 1024
/* NextMarker, decoded, with its NUL. */
#define AZ_XML_MAX_MARKER 1024

/* One <Blob>: name[0..len) decoded and NUL-terminated; mtime 0 when absent. 0 goes on. */
typedef int (*az_xml_list_cb)(void *opaque, const char *name, size_t len, uint64_t size,
                              int64_t mtime);

struct az_list_page {
    uint64_t entries;                    /* <Blob> elements passed to the callback */
    char next_marker[AZ_XML_MAX_MARKER]; /* "" on the last page */
};

/* An RFC 1123 time as Azure writes it ("Wed, 02 Dec 2026 19:30:00 GMT"): 0 or -EBADMSG. */
int az_xml_parse_time(const char *s, int64_t *out);

/*
 * Parses a List Blobs page and calls cb once per <Blob>, in document order,
 * only once the whole page has been checked. A name longer than max_name
 * (at most AZ_XML_MAX_NAME) is -ENAMETOOLONG; anything malformed, a <Blob>
 * without a name or length, or a marker too long is -EBADMSG; -EINVAL for a
 * bad max_name; else 0 or the callback's non-zero value.
 */
int az_xml_parse_list(const char *buf, size_t len, size_t max_name, az_xml_list_cb cb, void *opaque,
                      struct az_list_page *page);
