/* SPDX-License-Identifier: MIT */
/* Streams: how a stream class creates and destroys its handles, and priority clamping. */
#include "base/internal.h"
#include "pool/pool.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/lifecycle.h"

static CUresult stream_create(const struct cupool__class *cls, void **handle)
{
    return cupool__drv.cuStreamCreateWithPriority((CUstream *)handle, cls->flags, cls->priority);
}

static CUresult stream_destroy(void *handle)
{
    return cupool__drv.cuStreamDestroy((CUstream)handle);
}

const struct cupool__class_ops cupool__stream_ops = {
    .kind = CUPOOL_KIND_STREAM,
    .name = "stream",
    .create = stream_create,
    .destroy = stream_destroy,
};

/* The driver clamps out-of-range priorities (seen on an H200: -100 became -5, +7 became 0), so
 * cupool clamps the same way before choosing a class: equal streams share one pool. Runs with
 * the class's context current. */
CUresult cupool__stream_priority_clamp(int requested, int *clamped)
{
    return cupool__stream_priority_clamp_as(0, requested, clamped);
}

CUresult cupool__stream_priority_clamp_as(unsigned long long ctx_id, int requested, int *clamped)
{
    int least = 0, greatest = 0;
    struct cupool__tcache *tc = cupool__tcache_peek();
    if (ctx_id != 0 && tc != NULL && tc->prio_ctx_id == ctx_id) {
        least = tc->prio_least;
        greatest = tc->prio_greatest;
    } else {
        CUresult r = (CUPOOL_DRV(cupool__drv.cuCtxGetStreamPriorityRange(&least, &greatest)));
        if (r != CUDA_SUCCESS)
            return cupool__fail(r, "cuCtxGetStreamPriorityRange failed");
        if (ctx_id != 0 && tc != NULL) {
            tc->prio_ctx_id = ctx_id;
            tc->prio_least = least;
            tc->prio_greatest = greatest;
        }
    }
    /* greatest is numerically the lowest (e.g. -5), least the highest (0) */
    int v = requested;
    if (v < greatest)
        v = greatest;
    if (v > least)
        v = least;
    *clamped = v;
    return CUDA_SUCCESS;
}
