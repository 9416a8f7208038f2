#pragma once

/*
 * The local-directory backend, local:/PATH (or file:///PATH): every object
 * is a file under PATH, written durably and read through a cache of open
 * descriptors. It is the backend that can append in place, read on worker
 * threads, and serve reads from the page cache on the loop thread. Its
 * files share local-int.h.
 */

#include "storage/backend.h"

extern const struct backend_ops backend_local_ops;
