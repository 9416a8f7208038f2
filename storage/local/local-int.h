#pragma once

/*
 * Internals of the local-directory backend, shared by its files: local.c
 * (opening, closing and every read), local-write.c (puts, appends and
 * deletes, which must end durable), local-job.c (one attempt on the
 * threadpool) and local-fdcache.c (the descriptors that reads share).
 *
 * Object "dir/name" is the file ROOT/dir/name; ROOT/.tmp holds files being
 * written, and is emptied at open. Keys never start with a dot, so neither
 * .tmp nor anything else hidden can be mistaken for an object.
 */

#include "storage/backend.h"
#include "storage/local/local-fdcache.h"

#include <limits.h>
#include <stdatomic.h>

#define LOCAL_TMP_DIR ".tmp"

struct local {
    char root[PATH_MAX];
    int root_fd;
    /*
     * Serialises creating an object directory with making it durable, so
     * that a writer who finds the directory already there knows its entry
     * in the root is durable too.
     */
    uv_mutex_t dir_lock;
    atomic_uint_fast64_t tmp_seq;
    struct local_fdcache cache;
};

/* One attempt on the threadpool. `status` is written by the worker, read after it. */
struct local_job {
    uv_work_t work;
    struct local *lp;
    struct backend_req *req;
    int status;
};

static inline struct local *local_of(struct backend *be)
{
    return be->priv;
}

/* Runs fn(job) on the threadpool and completes the request with job->status. 0 or -errno. */
int local_queue(struct backend *be, struct backend_req *req, uv_work_cb fn);

int local_put(struct backend *be, struct backend_req *req);
int local_append(struct backend *be, struct backend_req *req);
int local_del(struct backend *be, struct backend_req *req);
