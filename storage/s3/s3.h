#pragma once

/*
 * The S3 backend, s3://BUCKET[/PREFIX][?...], and Cloudflare R2, which
 * speaks S3: r2://BUCKET[/PREFIX]?account=ID[&...]. Each attempt of a
 * request is one signed HTTP request on the loop. The URL's options are in
 * s3-url.h, where the credentials come from in s3-creds.h; the backend's
 * files share s3-int.h.
 */

#include "storage/backend.h"

extern const struct backend_ops backend_s3_ops;
extern const struct backend_ops backend_r2_ops;
