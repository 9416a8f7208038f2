/*
 * One attempt of the local backend on the libuv threadpool: every operation
 * that touches the disk (local.c's reads, local-write.c's writes) runs as a
 * struct local_job, and the request completes on the loop thread with the
 * status its worker left.
 */
#include "storage/local/local-int.h"
#include "proto/util.h"

#include <errno.h>
#include <stdlib.h>

static void job_done(uv_work_t *work, int status)
{
    struct local_job *job = container_of(work, struct local_job, work);
    struct backend_req *req = job->req;

    req->status = status < 0 ? status : job->status;
    free(job);
    backend_complete(req);
}

int local_queue(struct backend *be, struct backend_req *req, uv_work_cb fn)
{
    struct local_job *job = malloc(sizeof(*job));
    int r;

    if (!job)
        return -ENOMEM;
    job->lp = local_of(be);
    job->req = req;
    job->status = 0;
    r = uv_queue_work(be->loop, &job->work, fn, job_done);
    if (r < 0)
        free(job);
    return r;
}
