#pragma once

/*
 * The S3 responses cairn reads beyond an error document (which is
 * storage/http/xml.h's): a ListObjectsV2 page (<ListBucketResult>), read on
 * the shared tokenizer, and S3's times.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* S3 keys are at most 1024 bytes of UTF-8. */
#define S3_XML_MAX_KEY 1024
/* NextContinuationToken, decoded, including its NUL. */
#define S3_XML_MAX_TOKEN 1024

/*
 * One <Contents> entry of a list page: key[0..key_len) is decoded UTF-8 and
 * NUL-terminated; mtime is its <LastModified> in seconds since 1970 (0 when
 * the server gave none). The callback returns 0 to go on; anything else
 * stops the parse, which returns that value.
 */
typedef int (*s3_xml_list_cb)(void *opaque, const char *key, size_t key_len, uint64_t size,
                              int64_t mtime);

/* An ISO 8601 time in UTC as S3 writes it ("2026-12-02T08:45:19.000Z"): 0 or -EBADMSG. */
int s3_xml_parse_time(const char *s, int64_t *out);

struct s3_list_page {
    bool truncated;                    /* <IsTruncated>true</IsTruncated> */
    bool has_key_count;                /* <KeyCount> was there */
    uint64_t key_count;                /* as S3 says; entries is what was read */
    uint64_t entries;                  /* <Contents> passed to the callback */
    char next_token[S3_XML_MAX_TOKEN]; /* "" when absent */
};

/*
 * Parses a ListObjectsV2 page and calls cb once per <Contents>, in document
 * order. A key longer than max_key bytes (at most S3_XML_MAX_KEY) fails the
 * page with -ENAMETOOLONG rather than being cut. A truncated page without a
 * continuation token is -EBADMSG: it could not be continued. Returns 0,
 * -EBADMSG for anything malformed or out of range, -EINVAL for a bad
 * max_key, or the callback's non-zero value.
 */
int s3_xml_parse_list(const char *buf, size_t len, size_t max_key, s3_xml_list_cb cb, void *opaque,
                      struct s3_list_page *page);
