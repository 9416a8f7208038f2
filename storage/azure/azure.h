#pragma once

/*
 * The Azure Blob Storage backend, azure://ACCOUNT/CONTAINER[/PREFIX][?...]:
 * each attempt of a request is one or a few SharedKey-signed (or SAS)
 * HTTP requests on the loop, through storage/http. The URL's options are in
 * azure-url.h, where the credentials come from in azure-creds.h; the
 * backend's files share azure-int.h.
 */

#include "storage/backend.h"

extern const struct backend_ops backend_azure_ops;
