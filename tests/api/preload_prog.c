/* SPDX-License-Identifier: MIT */
/*
 * An ordinary CUDA program that knows nothing of cupool: it loads the driver itself, as the
 * CUDA runtime and cuda-python do (dlopen, dlsym of cuGetProcAddress_v2, then
 * cuGetProcAddress for each entry point), or resolves entry points with dlsym directly, and
 * creates and destroys streams and events in a loop, using each one. check_preload runs it
 * with and without libcupool_preload.so.
 *
 *   preload_prog MODE N    MODE: gpa (cuGetProcAddress) or dlsym; N: pairs; or
 *                          gpa-reset / dlsym-reset: then N rounds of 300 streams created and
 *                          destroyed (over a small idle cap, so that cupool's maintenance
 *                          thread destroys a backlog) and a cuDevicePrimaryCtxReset
 * Prints "pairs N ns P driver-creates C" (C: streams the driver created, simulated driver
 * only, else -1) and exits 0 when every call behaved as the driver's.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuEventCreate)(CUevent *, unsigned);
static CUresult (*p_cuEventDestroy)(CUevent);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuStreamGetFlags)(CUstream, unsigned *);
static CUresult (*p_cuDevicePrimaryCtxReset)(CUdevice);

static int failures;
#define OK(call)                                                                             \
    do {                                                                                     \
        CUresult r_ = (call);                                                                \
        if (r_ != CUDA_SUCCESS) {                                                            \
            fprintf(stderr, "preload_prog: %s = %d\n", #call, (int)r_);                      \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "gpa";
    int n = argc > 2 ? atoi(argv[2]) : 1000;
    int resets = strstr(mode, "-reset") != NULL;
    if (resets) { /* read by cupool at its first call */
        setenv("CUPOOL_STREAM_IDLE_MAX", "16", 1);
        setenv("CUPOOL_MAGAZINE_SIZE", "4", 1);
        mode = !strncmp(mode, "dlsym", 5) ? "dlsym" : "gpa";
    }
    const char *path = getenv("PRELOAD_PROG_DRIVER"); /* a driver cupool is not told of */
    if (!path)
        path = getenv("CUPOOL_DRIVER_PATH");
    void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "preload_prog: no driver: %s\n", dlerror());
        return 77;
    }
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    *(void **)&gpa = dlsym(h, "cuGetProcAddress_v2");
    if (!gpa)
        return 77;
#define GET(name, v)                                                                         \
    if (!strcmp(mode, "dlsym"))                                                              \
        *(void **)&p_##name = dlsym(h, #name);                                               \
    else                                                                                     \
        OK(gpa(#name, (void **)&p_##name, v, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
    GET(cuInit, 2000)
    GET(cuDeviceGet, 2000)
    GET(cuDevicePrimaryCtxRetain, 7000)
    GET(cuCtxSetCurrent, 4000)
    GET(cuStreamCreate, 2000)
    GET(cuEventCreate, 2000)
    GET(cuEventRecord, 2000)
    GET(cuStreamSynchronize, 2000)
    GET(cuStreamGetFlags, 5050)
    if (!strcmp(mode, "dlsym")) { /* the ABI names, as cuda.h maps them */
        *(void **)&p_cuStreamDestroy = dlsym(h, "cuStreamDestroy_v2");
        *(void **)&p_cuEventDestroy = dlsym(h, "cuEventDestroy_v2");
        *(void **)&p_cuDevicePrimaryCtxReset = dlsym(h, "cuDevicePrimaryCtxReset_v2");
    } else {
        OK(gpa("cuStreamDestroy", (void **)&p_cuStreamDestroy, 4000, 0, NULL));
        OK(gpa("cuEventDestroy", (void **)&p_cuEventDestroy, 4000, 0, NULL));
        OK(gpa("cuDevicePrimaryCtxReset", (void **)&p_cuDevicePrimaryCtxReset, 11000, 0, NULL));
    }
    if (failures || !p_cuInit || !p_cuStreamCreate || !p_cuStreamDestroy || !p_cuEventDestroy)
        return 1;
    if (p_cuInit(0) != CUDA_SUCCESS)
        return 77;
    CUdevice dev;
    CUcontext ctx;
    OK(p_cuDeviceGet(&dev, 0));
    OK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
    OK(p_cuCtxSetCurrent(ctx));
    /* RTLD_NEXT still means "after the caller": malloc is libc's, from here and from a
     * library opened with dlopen */
    if (dlsym(RTLD_NEXT, "malloc") != dlsym(RTLD_DEFAULT, "malloc")) {
        fprintf(stderr, "preload_prog: dlsym(RTLD_NEXT, malloc) is not libc's malloc\n");
        failures++;
    }
    const char *next_lib = getenv("PRELOAD_PROG_NEXT_LIB");
    if (next_lib) {
        void *nh = dlopen(next_lib, RTLD_NOW | RTLD_LOCAL);
        void *(*next_malloc)(void) = NULL;
        if (nh)
            *(void **)&next_malloc = dlsym(nh, "preload_next_malloc");
        if (!next_malloc || next_malloc() != dlsym(RTLD_DEFAULT, "malloc")) {
            fprintf(stderr, "preload_prog: RTLD_NEXT from a dlopen()ed library is not libc's "
                            "malloc (%s)\n", nh ? "lookup" : dlerror());
            failures++;
        }
    }
    /* the 4-argument cuGetProcAddress, looked up by its own name, is the 4-argument one */
    CUresult (*gpa1)(const char *, void **, int, cuuint64_t);
    *(void **)&gpa1 = dlsym(h, "cuGetProcAddress");
    void *via1 = NULL;
    if (!gpa1 || gpa1("cuStreamCreate", &via1, 2000, 0) != CUDA_SUCCESS || !via1) {
        fprintf(stderr, "preload_prog: cuGetProcAddress (11.3 form) failed\n");
        failures++;
    }
    if (resets) {
        /* the program resets the context while streams it destroyed sit over the idle cap:
         * cupool's maintenance thread may be destroying them at that moment, which the driver
         * does not survive unless cupool lets go of the context first (the simulated driver
         * aborts the process) */
        static CUstream held[300];
        for (int round = 0; round < n && !failures; round++) {
            for (int i = 0; i < 300; i++)
                OK(p_cuStreamCreate(&held[i], CU_STREAM_NON_BLOCKING));
            for (int i = 0; i < 300; i++)
                OK(p_cuStreamDestroy(held[i]));
            OK(p_cuDevicePrimaryCtxReset(dev));
            OK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
            OK(p_cuCtxSetCurrent(ctx));
        }
        CUstream s;
        OK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); /* the new context works */
        OK(p_cuStreamSynchronize(s));
        OK(p_cuStreamDestroy(s));
        printf("resets %d\n", n);
        return failures ? 1 : 0;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        CUstream s;
        OK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        OK(p_cuStreamDestroy(s));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
    for (int i = 0; i < 10; i++) { /* each one works as the driver's */
        CUstream s;
        CUevent e;
        unsigned flags = 99;
        OK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        OK(p_cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        OK(p_cuStreamGetFlags(s, &flags));
        if (flags != CU_STREAM_NON_BLOCKING)
            failures++;
        OK(p_cuEventRecord(e, s));
        OK(p_cuStreamSynchronize(s));
        OK(p_cuEventDestroy(e));
        OK(p_cuStreamDestroy(s));
    }
    unsigned long (*calls)(const char *);
    *(void **)&calls = dlsym(h, "fakecuda_calls");
    long creates = calls ? (long)(calls("cuStreamCreate") + calls("cuStreamCreateWithPriority")) : -1;
    printf("pairs %d ns %.1f driver-creates %ld\n", n, ns, creates);
    return failures ? 1 : 0;
}
