/* SPDX-License-Identifier: MIT */
/*
 * Source-level drop-in (docs/drop-in.md): include this after the CUDA headers, in the files
 * whose stream and event create and destroy calls should use cupool's pools, and link with
 * -lcupool. It defines object-like macros, so calls and function-pointer uses alike are
 * routed:
 *
 *   cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy(_v2), cuEventCreate,
 *   cuEventDestroy(_v2)                             -> cupool_cu* (cupool.h)
 *   cudaStreamCreate, cudaStreamCreateWithFlags, cudaStreamCreateWithPriority,
 *   cudaStreamDestroy, cudaEventCreate, cudaEventCreateWithFlags,
 *   cudaEventDestroy                                -> cupool_cuda* (cupool_runtime.h)
 *
 * The runtime names are routed only when the CUDA runtime header came first (its include
 * guard __CUDA_RUNTIME_API_H__ is defined) or CUPOOL_COMPAT_RUNTIME is defined. Define
 * CUPOOL_COMPAT_NO_DRIVER or CUPOOL_COMPAT_NO_RUNTIME to leave one API alone. Include the CUDA
 * headers first: a runtime header included after this one is not routed (silently).
 *
 * In C++, cuda_runtime.h's overload cudaEventCreate(event, flags) keeps working: an overload
 * of cupool_cudaEventCreate with the same arguments is provided.
 */
#ifndef CUPOOL_COMPAT_H
#define CUPOOL_COMPAT_H
#include <cupool.h>

#ifndef CUPOOL_COMPAT_NO_DRIVER
/* BEGIN compat-driver: written by scripts/dropin-names from src/dropin/names.h */
#undef cuStreamCreate
#define cuStreamCreate cupool_cuStreamCreate
#undef cuStreamCreateWithPriority
#define cuStreamCreateWithPriority cupool_cuStreamCreateWithPriority
#undef cuStreamDestroy
#define cuStreamDestroy cupool_cuStreamDestroy
#undef cuStreamDestroy_v2
#define cuStreamDestroy_v2 cupool_cuStreamDestroy
#undef cuEventCreate
#define cuEventCreate cupool_cuEventCreate
#undef cuEventDestroy
#define cuEventDestroy cupool_cuEventDestroy
#undef cuEventDestroy_v2
#define cuEventDestroy_v2 cupool_cuEventDestroy
/* END compat-driver */
#endif

#if !defined(CUPOOL_COMPAT_NO_RUNTIME) &&                                                    \
    (defined(__CUDA_RUNTIME_API_H__) || defined(CUPOOL_COMPAT_RUNTIME))
#include <cupool_runtime.h>
#ifdef __cplusplus
/* cuda_runtime.h's C++ overload of cudaEventCreate with flags */
static inline cudaError_t cupool_cudaEventCreate(cudaEvent_t *event, unsigned int flags)
{
    return cupool_cudaEventCreateWithFlags(event, flags);
}
#endif
/* BEGIN compat-runtime: written by scripts/dropin-names from src/dropin/names.h */
#define cudaStreamCreate cupool_cudaStreamCreate
#define cudaStreamCreateWithFlags cupool_cudaStreamCreateWithFlags
#define cudaStreamCreateWithPriority cupool_cudaStreamCreateWithPriority
#define cudaStreamDestroy cupool_cudaStreamDestroy
#define cudaEventCreate cupool_cudaEventCreate
#define cudaEventCreateWithFlags cupool_cudaEventCreateWithFlags
#define cudaEventDestroy cupool_cudaEventDestroy
/* END compat-runtime */
#endif

#endif /* CUPOOL_COMPAT_H */
