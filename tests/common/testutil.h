/* SPDX-License-Identifier: MIT */
/*
 * Shared test support. Every suite runs against the driver cupool loads: the simulated one
 * (CUPOOL_DRIVER_PATH points at fakecuda.so under `make check`) or the real one
 * (tests/real-driver.sh). Tests reach the driver through cupool_driver_get_proc(), and the
 * simulation's control functions through dlsym(), which finds nothing on the real driver:
 * tu_fake.present says which one is loaded.
 *
 * Check runs each test in a forked child, so each test starts with a fresh cupool and a fresh
 * driver; nothing in a suite's main() may touch CUDA (a child of a CUDA process cannot use it).
 */
#ifndef CUPOOL_TESTUTIL_H
#define CUPOOL_TESTUTIL_H

#include <check.h>
#include <cuda.h>
#include <stddef.h>

#include "cupool.h"

/* Driver entry points tests call, resolved through cupool at the ABI versions named in
 * testutil.c. */
struct tu_driver {
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuDevicePrimaryCtxReset)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxGetId)(CUcontext, unsigned long long *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuCtxCreate)(CUcontext *, unsigned int, CUdevice);
    CUresult (*cuCtxDestroy)(CUcontext);
    CUresult (*cuCtxPushCurrent)(CUcontext);
    CUresult (*cuCtxPopCurrent)(CUcontext *);
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamQuery)(CUstream);
    CUresult (*cuStreamGetCtx)(CUstream, CUcontext *);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamGetFlags)(CUstream, unsigned int *);
    CUresult (*cuStreamGetPriority)(CUstream, int *);
    CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemsetD32)(CUdeviceptr, unsigned int, size_t);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                               unsigned int, unsigned int, unsigned int, CUstream, void **,
                               void **);
};
extern struct tu_driver tu;

/* The simulation's control functions; all NULL on the real driver. */
struct tu_fake {
    int present;
    int (*live_streams)(void);
    int (*live_events)(void);
    unsigned long (*calls)(const char *);
    unsigned long (*calls_total)(void);
    unsigned long (*calls_here)(const char *); /* the calling thread's calls of an entry */
    void (*fault)(const char *, unsigned long, long, CUresult);
    void (*fault_clear)(void);
    void (*teardown)(void);
    void (*set_strict_teardown)(int);
    void (*poison_context)(CUcontext, CUresult);
    size_t (*slab_bytes)(void);
    unsigned long (*exec_overlaps)(void);
    unsigned long (*instantiate_launch_overlaps)(void);
    unsigned long (*instantiations_of_launched_graphs)(void);
    int (*live_graphs)(void);
    int (*live_execs)(void);
    unsigned long (*exec_destroy_waits)(void);
    unsigned long (*graph_uploads)(void);
    unsigned long (*graph_launch_uploads)(void);
    void (*exec_update_refuse)(CUgraphExecUpdateResult, unsigned);
    int (*register_kernel)(const char *, int, const size_t *,
                           void (*)(void **, const unsigned int[3], const unsigned int[3]));
};
extern struct tu_fake tu_fake;

extern CUdevice tu_dev;
extern CUcontext tu_ctx;

/* Loads cupool and the driver, resolves tu and tu_fake, and makes device 0's primary context
 * current. Fails the test on error. Call at the start of each test (or a checked fixture). */
void tu_setup(void);

/* Resolves tu and tu_fake only (cupool_init() must already have succeeded). */
void tu_resolve(void);

/* Test kernels: loads common/kernels.h into the current context. */
struct tu_kernels {
    CUmodule module;
    CUfunction spin, addone, set_u32, add_u32, trap;
};
void tu_load_kernels(struct tu_kernels *k);

/* What a pipeline suite starts from: tu_setup(), the kernels, a non-blocking stream and
 * `bytes` of device memory; tu_pipeline_end() synchronises and frees the stream and memory. */
struct tu_pipeline_fixture {
    struct tu_kernels k;
    CUstream s;
    CUdeviceptr mem;
};
void tu_pipeline_begin(struct tu_pipeline_fixture *f, size_t bytes);
void tu_pipeline_end(struct tu_pipeline_fixture *f);
/* The cluster_width kernel (common/kernels.h) into the current context: CUDA_SUCCESS, or the
 * driver's error where the GPU has no thread-block clusters (before sm_90). */
CUresult tu_load_cluster_kernel(CUfunction *f);
/* The setter of conditional nodes (cupool_set_cond, common/kernels.h) into the current
 * context: CUDA_SUCCESS or the driver's error. */
CUresult tu_load_cond_setter(CUfunction *f);
/* The cluster_rank kernel (common/kernels.h), as tu_load_cluster_kernel. */
CUresult tu_load_cluster_rank_kernel(CUfunction *f);
/* Has the current device thread-block clusters (compute capability 9.0 or newer)? If not,
 * prints "SKIP: <what>: <the reason>" (naming the compute capability) and returns 0: the
 * test then returns at once, having checked nothing. */
int tu_clusters_or_skip(const char *what);
/* What cluster_rank writes for the thread of block b in a grid of one dimension launched in
 * clusters of cx blocks (cx 1: without a cluster). */
static inline unsigned tu_cluster_rank_of(unsigned b, unsigned cx)
{
    return (b / cx) << 16 | cx << 8 | (b % cx);
}
void tu_launch1(CUfunction f, CUstream s, void **args);

/* For a test of two devices, after tu_setup() (with FAKECUDA_DEVICES=2 set before it, so that
 * the simulated driver models two): both devices' primary contexts into ctx (may be NULL),
 * device 0's current, and 1. With fewer devices: on the real driver (a host with one GPU) says
 * "<test>: one device only; needs two (not run)" and returns 0, and the test checks nothing;
 * on the simulated driver fails the test. */
int tu_two_devices(const char *test, CUcontext ctx[2]);
/* Statistics of the first class matching kind/flags (priority ignored), or fails the test. */
cupool_class_stats_t tu_stats(cupool_kind_t kind, unsigned int flags);
/* Number of classes. */
size_t tu_class_count(void);

/* cupool_trim(), then no class holds an idle handle and (simulated driver) no stream or event
 * is alive. */
void tu_trim_leaves_nothing(void);

/* Lines of the file at path that contain needle; fails the test if it cannot be read. */
int tu_lines_with(const char *path, const char *needle);

/*
 * Runs a suite the way every test program does: honours CUPOOLTEST_REAL=1 (set by
 * tests/real-driver.sh) by first checking, in a child process, that a GPU answers, and
 * exiting 77 (automake's SKIP) when none does. Returns the process exit status.
 */
int tu_run(Suite *s);
/* True when running against the real driver (CUPOOLTEST_REAL=1). */
int tu_real(void);

#define TU_OK(call)                                                                        \
    do {                                                                                   \
        CUresult tu_r_ = (call);                                                           \
        ck_assert_msg(tu_r_ == CUDA_SUCCESS, "%s returned %s: %s", #call,                  \
                      cupool_result_name(tu_r_), cupool_error_string());                   \
    } while (0)

#define TU_EQ(call, expected)                                                              \
    do {                                                                                   \
        CUresult tu_r_ = (call);                                                           \
        ck_assert_msg(tu_r_ == (expected), "%s returned %s, expected %s (%s)", #call,      \
                      cupool_result_name(tu_r_), cupool_result_name(expected),             \
                      cupool_error_string());                                              \
    } while (0)

#endif
