/* SPDX-License-Identifier: MIT */
/*
 * cupool drop-in wrappers for the CUDA runtime API's stream and event creation: the exact
 * signatures and return types of cudaStreamCreate & co., handing out pooled handles.
 * Include after the CUDA runtime headers or alone (it needs only driver_types.h). See
 * docs/drop-in.md; include/cupool_compat.h routes the real names here.
 *
 * cudaStream_t and cudaEvent_t are the driver's CUstream and CUevent, so handles from these
 * wrappers work with every runtime and driver call. Each wrapper uses the calling thread's
 * current context; with none current it makes the primary context of device 0 current first,
 * as the runtime does on its first call (a program that called cudaSetDevice() has its
 * device's primary context current already, CUDA 12 and later).
 *
 * Errors: the CUresult of the underlying cupool call mapped to the cudaError_t of the same
 * meaning (the runtime numbers its errors as the driver does: CUDA_ERROR_INVALID_VALUE ->
 * cudaErrorInvalidValue, CUDA_ERROR_INVALID_CONTEXT -> cudaErrorDeviceUninitialized,
 * CUDA_ERROR_INVALID_HANDLE -> cudaErrorInvalidResourceHandle, ...); a driver error with no
 * runtime counterpart becomes cudaErrorUnknown. Thread-safe, as the functions they replace.
 */
#ifndef CUPOOL_RUNTIME_H
#define CUPOOL_RUNTIME_H
#include <cupool.h>
#include <driver_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** cudaStreamCreate: a pooled stream, blocking (cudaStreamDefault), default priority. */
CUPOOL_API cudaError_t cupool_cudaStreamCreate(cudaStream_t *pStream);
/** cudaStreamCreateWithFlags: flags cudaStreamDefault or cudaStreamNonBlocking, else
 * cudaErrorInvalidValue. */
CUPOOL_API cudaError_t cupool_cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
/** cudaStreamCreateWithPriority: priorities outside the device's range are clamped to it, as
 * the runtime does. */
CUPOOL_API cudaError_t cupool_cudaStreamCreateWithPriority(cudaStream_t *pStream,
                                                           unsigned int flags, int priority);
/** cudaStreamDestroy: a pooled stream goes back to its pool (work still queued in it runs on,
 * as after cudaStreamDestroy); a stream cupool did not create is destroyed by the driver.
 * Destroying a pooled stream twice returns cudaErrorInvalidResourceHandle and changes
 * nothing. */
CUPOOL_API cudaError_t cupool_cudaStreamDestroy(cudaStream_t stream);
/** cudaEventCreate: a pooled event, flags cudaEventDefault. */
CUPOOL_API cudaError_t cupool_cudaEventCreate(cudaEvent_t *event);
/** cudaEventCreateWithFlags: cudaEventBlockingSync, cudaEventDisableTiming,
 * cudaEventInterprocess (with DisableTiming). A reused event may hold its last record's state:
 * record it before waiting on or querying it. */
CUPOOL_API cudaError_t cupool_cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
/** cudaEventDestroy: as cupool_cudaStreamDestroy, for events. */
CUPOOL_API cudaError_t cupool_cudaEventDestroy(cudaEvent_t event);

/** The cudaError_t of the same meaning as a CUresult (see the top of this file). */
CUPOOL_API cudaError_t cupool_runtime_error(CUresult result);

#ifdef __cplusplus
}
#endif
#endif /* CUPOOL_RUNTIME_H */
