/* SPDX-License-Identifier: MIT */
/*
 * A library whose constructor uses CUDA streams: the loader runs it before the constructor
 * of an LD_PRELOAD library, so the preload's cupool initialises from inside it. It calls
 * cuStreamCreate and cuStreamDestroy by name (left undefined here: the preload's exports bind
 * them) and takes what it needs to make a context current from the driver itself (RTLD_NEXT,
 * which runs nothing of the preload). check_preload runs tests/api/preload_ctor_prog with the
 * preload.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>

#undef cuStreamDestroy
CUresult cuStreamDestroy(CUstream hStream);

int preload_ctor_result = -1; /* 0: every call succeeded */
CUstream preload_ctor_streams[2];

__attribute__((constructor)) static void preload_ctor(void)
{
    const char *path = getenv("CUPOOL_DRIVER_PATH");
    if (!dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
        preload_ctor_result = 1;
        return;
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(RTLD_NEXT, "cuInit");
    CUresult (*dev)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(RTLD_NEXT, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))dlsym(RTLD_NEXT, "cuDevicePrimaryCtxRetain");
    CUresult (*set)(CUcontext) = (CUresult(*)(CUcontext))dlsym(RTLD_NEXT, "cuCtxSetCurrent");
    CUdevice d;
    CUcontext c;
    if (!init || !dev || !retain || !set || init(0) || dev(&d, 0) || retain(&c, d) || set(c)) {
        preload_ctor_result = 2;
        return;
    }
    for (int i = 0; i < 2; i++)
        if (cuStreamCreate(&preload_ctor_streams[i], 0) != CUDA_SUCCESS ||
            cuStreamDestroy(preload_ctor_streams[i]) != CUDA_SUCCESS) {
            preload_ctor_result = 3;
            return;
        }
    preload_ctor_result = 0;
}
