/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver, loaded at run time. libcuda.so.1 (or CUPOOL_DRIVER_PATH) is dlopen()ed
 * once; every entry point comes from cuGetProcAddress_v2 at the CUDA version that introduced
 * the ABI cupool calls (the plain names in libcuda are the oldest ABIs: cuStreamDestroy there
 * is not cuStreamDestroy_v2). Minimum driver: CUDA 12.0, for cuGetProcAddress_v2 and cuCtxGetId.
 */
#ifndef CUPOOL_DRIVER_H
#define CUPOOL_DRIVER_H
#include "internal.h"

/* X(name, version, return type, parameter list) for every entry point the library calls. */
#define CUPOOL_DRIVER_ENTRIES(X)                                                            \
    X(cuInit, 2000, CUresult, (unsigned int flags))                                         \
    X(cuDriverGetVersion, 2020, CUresult, (int *version))                                   \
    X(cuCtxGetCurrent, 4000, CUresult, (CUcontext * ctx))                                   \
    X(cuCtxSetCurrent, 4000, CUresult, (CUcontext ctx))                                     \
    X(cuCtxPushCurrent, 4000, CUresult, (CUcontext ctx))                                    \
    X(cuCtxPopCurrent, 4000, CUresult, (CUcontext * ctx))                                   \
    X(cuCtxGetId, 12000, CUresult, (CUcontext ctx, unsigned long long *id))                 \
    X(cuCtxGetStreamPriorityRange, 5050, CUresult, (int *least, int *greatest))             \
    X(cuStreamCreateWithPriority, 5050, CUresult, (CUstream * s, unsigned int f, int prio)) \
    X(cuStreamDestroy, 4000, CUresult, (CUstream s))                                        \
    X(cuStreamIsCapturing, 10000, CUresult, (CUstream s, CUstreamCaptureStatus * status))   \
    X(cuEventCreate, 2000, CUresult, (CUevent * e, unsigned int flags))                     \
    X(cuEventDestroy, 4000, CUresult, (CUevent e))

struct cupool__driver {
#define X(name, version, ret, params) ret(*name) params;
    CUPOOL_DRIVER_ENTRIES(X)
#undef X
    CUresult (*get_proc)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status);
    int version;            /* cuDriverGetVersion, e.g. 13000 */
    char path[4096];        /* the file the dynamic linker opened */
};

/* Filled by cupool__driver_load(); read-only afterwards. */
extern struct cupool__driver cupool__drv;

/*
 * Opens `path`, resolves every entry point and calls cuInit(0). On failure returns the error
 * (see cupool_init() in cupool.h for the codes) and writes what was tried and what failed to
 * msg. Called once, under the initialisation once-guard.
 */
CUresult cupool__driver_load(const char *path, char *msg, size_t msglen);

/* Drops cupool's reference to the driver library (it stays mapped: opened RTLD_NODELETE). */
void cupool__driver_unload(void);

/* cupool_driver_get_proc() behind the public checks. */
CUresult cupool__driver_get_proc(const char *symbol, int version, void **pfn);

#endif
