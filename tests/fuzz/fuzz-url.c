/*
 * Backend URLs as given by --backend or the [backend] section: the s3:// and
 * r2:// parser (and the description logged from what it parsed), the
 * sftp:// parser, and the shared percent-decoder and parameter splitter.
 */
#include <string.h>

#include "storage/s3/s3-url.h"
#include "storage/sftp/sftp-int.h"
#include "storage/url.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = fuzz_cstr(data, size);
    const char *msg, *q;
    struct s3_opts *s3;
    struct sftp_opts *sftp;
    char out[4096], name[256], value[2048];

    if (!url)
        return 0;
    if ((s3 = calloc(1, sizeof(*s3)))) {
        if (s3_parse_url(url, s3, &msg) == 0)
            s3_describe(s3, out, sizeof(out));
        s3_opts_clear(s3);
        free(s3);
    }
    if ((sftp = calloc(1, sizeof(*sftp)))) {
        (void)sftp_parse_url(url, sftp, &msg);
        free(sftp);
    }
    (void)url_decode(url, size, out, sizeof(out));
    if ((q = strchr(url, '?'))) {
        unsigned long n;
        q++;
        while (url_next_param(&q, name, sizeof(name), value, sizeof(value)) == 1)
            (void)url_parse_uint(value, 1, 1000000, &n);
    }
    free(url);
    return 0;
}
