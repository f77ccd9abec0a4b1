/* SPDX-License-Identifier: MIT */
/*
 * The drop-in names: the one list of the CUDA entry points cupool stands in for. Everything
 * else is made from it:
 *   - dropin.c: the __wrap_ aliases of the link-level drop-in (-Wl,--wrap=NAME);
 *   - preload.c: the names libcupool_preload.so exports, what its cuGetProcAddress and dlsym
 *     hand out instead of the driver's, and the driver entries it must not take for its own;
 *   - include/cupool_compat.h: the source-level macros, and the --wrap options of the test
 *     build and of docs/drop-in.md, both written by `scripts/dropin-names` from this file
 *     (tests/check_dropin_names.sh fails when one differs from what it writes).
 *
 * X(name, target, link, compat, slot, params, args):
 *   name    the symbol a program references (cuda.h maps cuStreamDestroy and cuEventDestroy
 *           to their _v2 ABIs; both spellings are listed);
 *   target  cupool's wrapper, of the same signature (cupool.h, cupool_runtime.h);
 *   link    1: one of the link-level names (--wrap=name), which the compat header routes too;
 *   compat  1: cupool_compat.h defines name as target;
 *   slot    1: cupool calls this ABI itself, through cupool__drv.name (base/driver.h), which
 *           under the preload must be the driver's, never the preload's own export;
 *   params, args: the parameter list and the argument list, parenthesised.
 * One entry per line, and the first five fields without spaces: scripts/dropin-names reads
 * this file with sed.
 */
#ifndef CUPOOL_DROPIN_NAMES_H
#define CUPOOL_DROPIN_NAMES_H

/* The driver's names: each returns CUresult. */
#define CUPOOL_DROPIN_DRIVER(X) \
    X(cuStreamCreate, cupool_cuStreamCreate, 1, 1, 0, (CUstream *phStream, unsigned int Flags), (phStream, Flags)) \
    X(cuStreamCreateWithPriority, cupool_cuStreamCreateWithPriority, 1, 1, 1, (CUstream *phStream, unsigned int flags, int priority), (phStream, flags, priority)) \
    X(cuStreamDestroy, cupool_cuStreamDestroy, 0, 1, 0, (CUstream hStream), (hStream)) \
    X(cuStreamDestroy_v2, cupool_cuStreamDestroy, 1, 1, 1, (CUstream hStream), (hStream)) \
    X(cuEventCreate, cupool_cuEventCreate, 1, 1, 1, (CUevent *phEvent, unsigned int Flags), (phEvent, Flags)) \
    X(cuEventDestroy, cupool_cuEventDestroy, 0, 1, 0, (CUevent hEvent), (hEvent)) \
    X(cuEventDestroy_v2, cupool_cuEventDestroy, 1, 1, 1, (CUevent hEvent), (hEvent)) \
    X(cuDevicePrimaryCtxReset_v2, cupool_cuDevicePrimaryCtxReset, 0, 0, 1, (CUdevice dev), (dev)) \
    X(cuCtxDestroy_v2, cupool_cuCtxDestroy, 0, 0, 1, (CUcontext ctx), (ctx))

/* The runtime's names: each returns cudaError_t. */
#define CUPOOL_DROPIN_RUNTIME(X) \
    X(cudaStreamCreate, cupool_cudaStreamCreate, 1, 1, 0, (cudaStream_t *pStream), (pStream)) \
    X(cudaStreamCreateWithFlags, cupool_cudaStreamCreateWithFlags, 1, 1, 0, (cudaStream_t *pStream, unsigned int flags), (pStream, flags)) \
    X(cudaStreamCreateWithPriority, cupool_cudaStreamCreateWithPriority, 1, 1, 0, (cudaStream_t *pStream, unsigned int flags, int priority), (pStream, flags, priority)) \
    X(cudaStreamDestroy, cupool_cudaStreamDestroy, 1, 1, 0, (cudaStream_t stream), (stream)) \
    X(cudaEventCreate, cupool_cudaEventCreate, 1, 1, 0, (cudaEvent_t *event), (event)) \
    X(cudaEventCreateWithFlags, cupool_cudaEventCreateWithFlags, 1, 1, 0, (cudaEvent_t *event, unsigned int flags), (event, flags)) \
    X(cudaEventDestroy, cupool_cudaEventDestroy, 1, 1, 0, (cudaEvent_t event), (event))

/* CUPOOL_DROPIN_IF_1(x) is x, CUPOOL_DROPIN_IF_0(x) nothing: an entry's flags select it. */
#define CUPOOL_DROPIN_IF_0(...)
#define CUPOOL_DROPIN_IF_1(...) __VA_ARGS__
#define CUPOOL_DROPIN_IF(flag, ...) CUPOOL_DROPIN_IF_##flag(__VA_ARGS__)

#endif
