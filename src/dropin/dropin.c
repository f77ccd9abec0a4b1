/* SPDX-License-Identifier: MIT */
/*
 * Drop-in wrappers (docs/drop-in.md): the driver's and the runtime's stream and event create
 * and destroy calls, with their exact signatures, on cupool's pools; and __wrap_ entry points
 * of the same for `-Wl,--wrap=NAME` (the names: dropin/names.h). A destroy of a handle cupool
 * did not hand out goes to the driver, as the replaced call would have.
 */
#include "base/internal.h"
#include "cupool_runtime.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/lifecycle.h"
#include "pool/pool.h"
#include "dropin/names.h"

/* The process is exiting: cupool itself calls the driver no more, but the caller's own call
 * would have reached the driver, so the wrappers make it unguarded, as the replaced call
 * would (an exit handler that outlives the driver fails as it would have without cupool). */
static bool exiting(void)
{
    return cupool__state_now() == CUPOOL_ST_EXITING && cupool__drv.cuStreamCreateWithPriority;
}

/* Whether the driver may be called for a wrapper: loaded (cupool__enter), or the process
 * exiting with it loaded (cupool lets the call through then). */
static CUresult driver_ready(void)
{
    return exiting() ? CUDA_SUCCESS : cupool__enter();
}

/* The driver's destroy of a handle cupool never handed out. */
static CUresult foreign_destroy(const void *h, bool stream)
{
    if (stream ? !cupool__drv.cuStreamDestroy : !cupool__drv.cuEventDestroy)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (exiting())
        return stream ? cupool__drv.cuStreamDestroy((CUstream)(uintptr_t)h)
                      : cupool__drv.cuEventDestroy((CUevent)(uintptr_t)h);
    return stream ? CUPOOL_DRV(cupool__drv.cuStreamDestroy((CUstream)(uintptr_t)h))
                  : CUPOOL_DRV(cupool__drv.cuEventDestroy((CUevent)(uintptr_t)h));
}

/* Release if cupool's; a handle the registry does not know goes to the driver's destroy. A
 * known handle that will not release (a double or crossed destroy) is an error, never passed
 * to the driver. Once cupool has destroyed an idle handle itself (trim, idle bounds) its value
 * is unknown again, and a late destroy reaches the driver, as it would without cupool. */
static CUresult destroy(const void *h, bool stream)
{
    CUresult r;
    if (cupool__release_known(stream ? &cupool__stream_ops : &cupool__event_ops, (void *)h, &r))
        return r;
    if ((r = driver_ready()) != CUDA_SUCCESS) /* the driver may not be loaded yet */
        return r;
    return foreign_destroy(h, stream);
}

static CUresult stream_create(CUstream *s, unsigned int flags, int priority)
{
    CUresult r = cupool_stream_acquire(s, flags, priority);
    if (r == CUDA_ERROR_DEINITIALIZED && s && exiting())
        r = cupool__drv.cuStreamCreateWithPriority(s, flags, priority);
    return r;
}

static CUresult event_create(CUevent *e, unsigned int flags)
{
    CUresult r = cupool_event_acquire(e, flags);
    if (r == CUDA_ERROR_DEINITIALIZED && e && exiting())
        r = cupool__drv.cuEventCreate(e, flags);
    return r;
}

CUPOOL_API CUresult cupool_cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, 0);
}

CUPOOL_API CUresult cupool_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                      int priority)
{
    return stream_create(phStream, flags, priority);
}

CUPOOL_API CUresult cupool_cuStreamDestroy(CUstream hStream)
{
    return destroy(hStream, true);
}

CUPOOL_API CUresult cupool_cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    return event_create(phEvent, Flags);
}

CUPOOL_API CUresult cupool_cuEventDestroy(CUevent hEvent)
{
    return destroy(hEvent, false);
}

/* ---- contexts about to go: the pools let go of them first ---- */

/* A reset or destroy of a context whose handles cupool pools: cupool_context_release() first,
 * so that the maintenance thread, which calls the driver at moments the program does not
 * order, has finished with that context before the driver tears it down (the driver crashes
 * on a handle of a reset context). Then the driver's own call, whatever cupool said. */
CUPOOL_API CUresult cupool_cuDevicePrimaryCtxReset(CUdevice dev)
{
    CUresult r = driver_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!cupool__drv.cuDevicePrimaryCtxReset)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED, "the driver has no cuDevicePrimaryCtxReset");
    unsigned flags = 0;
    int active = 0;
    CUcontext ctx = NULL;
    if (!exiting() && cupool__drv.cuDevicePrimaryCtxGetState &&
        cupool__drv.cuDevicePrimaryCtxRetain && cupool__drv.cuDevicePrimaryCtxRelease &&
        CUPOOL_DRV(cupool__drv.cuDevicePrimaryCtxGetState(dev, &flags, &active)) ==
            CUDA_SUCCESS &&
        active && CUPOOL_DRV(cupool__drv.cuDevicePrimaryCtxRetain(&ctx, dev)) == CUDA_SUCCESS) {
        (void)cupool_context_release(ctx); /* the reset that follows ends the handles anyway */
        (void)CUPOOL_DRV(cupool__drv.cuDevicePrimaryCtxRelease(dev));
    }
    return exiting() ? cupool__drv.cuDevicePrimaryCtxReset(dev)
                     : CUPOOL_DRV(cupool__drv.cuDevicePrimaryCtxReset(dev));
}

CUPOOL_API CUresult cupool_cuCtxDestroy(CUcontext ctx)
{
    CUresult r = driver_ready();
    if (r != CUDA_SUCCESS)
        return r;
    if (!cupool__drv.cuCtxDestroy)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED, "the driver has no cuCtxDestroy");
    if (ctx && !exiting())
        (void)cupool_context_release(ctx);
    return exiting() ? cupool__drv.cuCtxDestroy(ctx) : CUPOOL_DRV(cupool__drv.cuCtxDestroy(ctx));
}

/* ---- the runtime API ---- */

/* Values of cudaError_t (CUDA 13's driver_types.h). The runtime numbers an error as the
 * driver does wherever both have it; a CUresult outside this list has no runtime name. */
static const unsigned short runtime_values[] = {
    0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   12,  13,  16,  17,  18,  19,  20,  21,
    22,  23,  24,  25,  26,  27,  28,  31,  32,  34,  35,  36,  37,  43,  44,  45,  46,  49,
    52,  53,  65,  66,  67,  68,  69,  98,  100, 101, 102, 103, 127, 200, 201, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225,
    226, 300, 301, 302, 303, 304, 400, 401, 402, 500, 600, 700, 701, 702, 703, 704, 705, 708,
    709, 710, 711, 712, 713, 714, 715, 716, 717, 718, 719, 720, 721, 800, 801, 802, 803, 804,
    805, 806, 807, 808, 809, 810, 811, 812, 900, 901, 902, 903, 904, 905, 906, 907, 908, 909,
    910, 911, 912, 913, 914, 915, 999};

CUPOOL_API cudaError_t cupool_runtime_error(CUresult result)
{
    size_t lo = 0, hi = sizeof(runtime_values) / sizeof(runtime_values[0]);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (runtime_values[mid] == (unsigned)result)
            return (cudaError_t)result;
        if (runtime_values[mid] < (unsigned)result)
            lo = mid + 1;
        else
            hi = mid;
    }
    return cudaErrorUnknown;
}

/* The runtime's first call makes its device's primary context current; with no context
 * current, so do the wrappers (device 0: the runtime's default device). Called only after an
 * acquire found no context, so the common path pays nothing for it. */
static CUresult runtime_context(void)
{
    if (!cupool__drv.cuDeviceGet || !cupool__drv.cuDevicePrimaryCtxRetain)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED, "the driver lacks cuDevicePrimaryCtxRetain");
    CUcontext ctx = NULL;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&ctx));
    if (r != CUDA_SUCCESS || ctx)
        return r == CUDA_SUCCESS ? CUDA_ERROR_INVALID_CONTEXT : r; /* a context, yet refused */
    CUdevice dev;
    r = CUPOOL_DRV(cupool__drv.cuDeviceGet(&dev, 0));
    if (r == CUDA_SUCCESS)
        r = CUPOOL_DRV(cupool__drv.cuDevicePrimaryCtxRetain(&ctx, dev));
    if (r == CUDA_SUCCESS)
        r = CUPOOL_DRV(cupool__drv.cuCtxSetCurrent(ctx));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "no current context, and device 0's primary context failed");
    return CUDA_SUCCESS;
}

CUPOOL_API cudaError_t cupool_cudaStreamCreateWithPriority(cudaStream_t *pStream,
                                                           unsigned int flags, int priority)
{
    if (!pStream)
        return cudaErrorInvalidValue;
    CUresult r = stream_create(pStream, flags, priority);
    if (r == CUDA_ERROR_INVALID_CONTEXT && runtime_context() == CUDA_SUCCESS)
        r = stream_create(pStream, flags, priority);
    return cupool_runtime_error(r);
}

CUPOOL_API cudaError_t cupool_cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return cupool_cudaStreamCreateWithPriority(pStream, flags, 0);
}

CUPOOL_API cudaError_t cupool_cudaStreamCreate(cudaStream_t *pStream)
{
    return cupool_cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

CUPOOL_API cudaError_t cupool_cudaStreamDestroy(cudaStream_t stream)
{
    return cupool_runtime_error(destroy(stream, true));
}

CUPOOL_API cudaError_t cupool_cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!event)
        return cudaErrorInvalidValue;
    CUresult r = event_create(event, flags);
    if (r == CUDA_ERROR_INVALID_CONTEXT && runtime_context() == CUDA_SUCCESS)
        r = event_create(event, flags);
    return cupool_runtime_error(r);
}

CUPOOL_API cudaError_t cupool_cudaEventCreate(cudaEvent_t *event)
{
    return cupool_cudaEventCreateWithFlags(event, cudaEventDefault);
}

CUPOOL_API cudaError_t cupool_cudaEventDestroy(cudaEvent_t event)
{
    return cupool_runtime_error(destroy(event, false));
}

/* ---- link level: -Wl,--wrap=NAME routes the program's calls of NAME here ----
 * The names are the link-level ones of dropin/names.h: the symbols programs reference (cuda.h
 * maps cuStreamDestroy and cuEventDestroy to their _v2 ABIs). Each __wrap_ name is the
 * wrapper itself (an ELF alias), not a function calling it. */
#define WRAP_DRIVER(name, target, link, compat, slot, params, args)                         \
    CUPOOL_DROPIN_IF(link,                                                                  \
                     CUPOOL_API CUresult __wrap_##name params __attribute__((alias(#target)));)
#define WRAP_RUNTIME(name, target, link, compat, slot, params, args)                        \
    CUPOOL_DROPIN_IF(link, CUPOOL_API cudaError_t __wrap_##name params                      \
                               __attribute__((alias(#target)));)
CUPOOL_DROPIN_DRIVER(WRAP_DRIVER)
CUPOOL_DROPIN_RUNTIME(WRAP_RUNTIME)
