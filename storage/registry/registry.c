/*
 * Which backend serves a URL: the table of every backend by its scheme, and
 * backend_new() (storage/backend.h), which looks the scheme up and opens
 * that backend through the front end. This is the one file that knows every
 * backend, so that the front end below them knows none, and a new backend
 * is one line here.
 */
#include "storage/backend.h"
#include "storage/azure/azure.h"
#include "storage/local/local.h"
#include "storage/s3/s3.h"
#include "storage/sftp/sftp.h"
#include "proto/util.h"

#include <errno.h>
#include <string.h>

static const struct backend_ops *const backend_table[] = {
    &backend_local_ops, &backend_sftp_ops, &backend_s3_ops, &backend_r2_ops, &backend_azure_ops,
};

static const struct backend_ops *ops_for_url(const char *url)
{
    size_t scheme_len = strcspn(url, ":");

    /* "file://" is the conventional spelling of a local directory. */
    if (scheme_len == 4 && strncmp(url, "file", 4) == 0)
        return &backend_local_ops;
    for (size_t i = 0; i < ARRAY_SIZE(backend_table); i++) {
        if (strlen(backend_table[i]->name) == scheme_len &&
            strncmp(url, backend_table[i]->name, scheme_len) == 0)
            return backend_table[i];
    }
    return NULL;
}

int backend_new(struct backend **out, uv_loop_t *loop, const char *url, const char **msg)
{
    const struct backend_ops *ops = ops_for_url(url);

    *msg = NULL;
    if (!ops) {
        *msg =
            "unknown backend (supported: local, local:/PATH, file:///PATH, "
            "sftp://USER@HOST[:PORT]/PATH, s3://BUCKET[/PREFIX], r2://BUCKET[/PREFIX]?account=ID, "
            "azure://ACCOUNT/CONTAINER[/PREFIX])";
        return -EINVAL;
    }
    return backend_new_ops(out, loop, ops, url, msg);
}
