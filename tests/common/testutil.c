/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "common/testutil.h"
#include "common/kernels.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct tu_driver tu;
struct tu_fake tu_fake;
CUdevice tu_dev;
CUcontext tu_ctx;

#define RESOLVE(field, name, version) \
    TU_OK(cupool_driver_get_proc(name, version, (void **)&tu.field))

/* The driver's cuMemsetD32 returns before the memset ran (for device memory it is asynchronous
 * with respect to the host) and runs it on the legacy default stream, which a stream made with
 * CU_STREAM_NON_BLOCKING does not wait for: a test's next work on such a stream could run
 * before it. Seen on an H200: a counter zeroed after four kernels of a pipeline had added to
 * it. The tests' tu.cuMemsetD32 therefore returns once the memset is done. */
static CUresult (*memset_d32_driver)(CUdeviceptr, unsigned int, size_t);
static CUresult memset_d32_done(CUdeviceptr p, unsigned int v, size_t n)
{
    CUresult r = memset_d32_driver(p, v, n);
    return r == CUDA_SUCCESS ? tu.cuCtxSynchronize() : r;
}

void tu_resolve(void)
{
    RESOLVE(cuDeviceGet, "cuDeviceGet", 2000);
    RESOLVE(cuDeviceGetCount, "cuDeviceGetCount", 2000);
    RESOLVE(cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000);
    RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000);
    RESOLVE(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000);
    RESOLVE(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 11000);
    RESOLVE(cuCtxSetCurrent, "cuCtxSetCurrent", 4000);
    RESOLVE(cuCtxGetCurrent, "cuCtxGetCurrent", 4000);
    RESOLVE(cuCtxGetId, "cuCtxGetId", 12000);
    RESOLVE(cuCtxSynchronize, "cuCtxSynchronize", 2000);
    RESOLVE(cuCtxCreate, "cuCtxCreate", 3020);
    RESOLVE(cuCtxDestroy, "cuCtxDestroy", 4000);
    RESOLVE(cuCtxPushCurrent, "cuCtxPushCurrent", 4000);
    RESOLVE(cuCtxPopCurrent, "cuCtxPopCurrent", 4000);
    RESOLVE(cuStreamCreate, "cuStreamCreate", 2000);
    RESOLVE(cuStreamDestroy, "cuStreamDestroy", 4000);
    RESOLVE(cuStreamQuery, "cuStreamQuery", 2000);
    RESOLVE(cuStreamGetCtx, "cuStreamGetCtx", 9020);
    RESOLVE(cuStreamSynchronize, "cuStreamSynchronize", 2000);
    RESOLVE(cuStreamGetFlags, "cuStreamGetFlags", 5050);
    RESOLVE(cuStreamGetPriority, "cuStreamGetPriority", 5050);
    RESOLVE(cuStreamBeginCapture, "cuStreamBeginCapture", 10010);
    RESOLVE(cuStreamEndCapture, "cuStreamEndCapture", 10000);
    RESOLVE(cuStreamIsCapturing, "cuStreamIsCapturing", 10000);
    RESOLVE(cuEventCreate, "cuEventCreate", 2000);
    RESOLVE(cuEventDestroy, "cuEventDestroy", 4000);
    RESOLVE(cuEventRecord, "cuEventRecord", 2000);
    RESOLVE(cuStreamWaitEvent, "cuStreamWaitEvent", 3020);
    RESOLVE(cuEventSynchronize, "cuEventSynchronize", 2000);
    RESOLVE(cuEventQuery, "cuEventQuery", 2000);
    RESOLVE(cuMemAlloc, "cuMemAlloc", 3020);
    RESOLVE(cuMemFree, "cuMemFree", 3020);
    RESOLVE(cuMemcpyDtoH, "cuMemcpyDtoH", 3020);
    RESOLVE(cuMemsetD32, "cuMemsetD32", 3020);
    memset_d32_driver = tu.cuMemsetD32;
    tu.cuMemsetD32 = memset_d32_done;
    RESOLVE(cuModuleLoadData, "cuModuleLoadData", 2000);
    RESOLVE(cuModuleGetFunction, "cuModuleGetFunction", 2000);
    RESOLVE(cuLaunchKernel, "cuLaunchKernel", 4000);

    memset(&tu_fake, 0, sizeof(tu_fake));
    const char *path = getenv("CUPOOL_DRIVER_PATH");
    void *h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return;
    *(void **)&tu_fake.live_streams = dlsym(h, "fakecuda_live_streams");
    *(void **)&tu_fake.live_events = dlsym(h, "fakecuda_live_events");
    *(void **)&tu_fake.calls = dlsym(h, "fakecuda_calls");
    *(void **)&tu_fake.calls_total = dlsym(h, "fakecuda_calls_total");
    *(void **)&tu_fake.calls_here = dlsym(h, "fakecuda_calls_here");
    *(void **)&tu_fake.fault = dlsym(h, "fakecuda_fault");
    *(void **)&tu_fake.fault_clear = dlsym(h, "fakecuda_fault_clear");
    *(void **)&tu_fake.register_kernel = dlsym(h, "fakecuda_register_kernel");
    *(void **)&tu_fake.teardown = dlsym(h, "fakecuda_teardown");
    *(void **)&tu_fake.set_strict_teardown = dlsym(h, "fakecuda_set_strict_teardown");
    *(void **)&tu_fake.poison_context = dlsym(h, "fakecuda_poison_context");
    *(void **)&tu_fake.slab_bytes = dlsym(h, "fakecuda_slab_bytes");
    *(void **)&tu_fake.exec_overlaps = dlsym(h, "fakecuda_exec_overlaps");
    *(void **)&tu_fake.instantiate_launch_overlaps =
        dlsym(h, "fakecuda_instantiate_launch_overlaps");
    *(void **)&tu_fake.instantiations_of_launched_graphs =
        dlsym(h, "fakecuda_instantiations_of_launched_graphs");
    *(void **)&tu_fake.live_graphs = dlsym(h, "fakecuda_live_graphs");
    *(void **)&tu_fake.live_execs = dlsym(h, "fakecuda_live_execs");
    *(void **)&tu_fake.exec_destroy_waits = dlsym(h, "fakecuda_exec_destroy_waits");
    *(void **)&tu_fake.graph_uploads = dlsym(h, "fakecuda_graph_uploads");
    *(void **)&tu_fake.graph_launch_uploads = dlsym(h, "fakecuda_graph_launch_uploads");
    *(void **)&tu_fake.exec_update_refuse = dlsym(h, "fakecuda_exec_update_refuse");
    tu_fake.present = tu_fake.live_streams != NULL;
    dlclose(h);
}

void tu_setup(void)
{
    TU_OK(cupool_init());
    tu_resolve();
    TU_OK(tu.cuDeviceGet(&tu_dev, 0));
    TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
}

void tu_load_kernels(struct tu_kernels *k)
{
    TU_OK(tu.cuModuleLoadData(&k->module, tu_kernels_ptx));
    TU_OK(tu.cuModuleGetFunction(&k->spin, k->module, "spin"));
    TU_OK(tu.cuModuleGetFunction(&k->addone, k->module, "addone"));
    TU_OK(tu.cuModuleGetFunction(&k->set_u32, k->module, "set_u32"));
    TU_OK(tu.cuModuleGetFunction(&k->add_u32, k->module, "add_u32"));
    TU_OK(tu.cuModuleGetFunction(&k->trap, k->module, "trap"));
}

void tu_pipeline_begin(struct tu_pipeline_fixture *f, size_t bytes)
{
    tu_setup();
    tu_load_kernels(&f->k);
    TU_OK(tu.cuStreamCreate(&f->s, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuMemAlloc(&f->mem, bytes));
}

void tu_pipeline_end(struct tu_pipeline_fixture *f)
{
    TU_OK(tu.cuStreamSynchronize(f->s));
    TU_OK(tu.cuStreamDestroy(f->s));
    TU_OK(tu.cuMemFree(f->mem));
}

CUresult tu_load_cond_setter(CUfunction *f)
{
    CUmodule m;
    CUresult r = tu.cuModuleLoadData(&m, tu_cond_ptx);
    if (r == CUDA_SUCCESS)
        r = tu.cuModuleGetFunction(f, m, "cupool_set_cond");
    return r;
}

CUresult tu_load_cluster_kernel(CUfunction *f)
{
    CUmodule m;
    CUresult r = tu.cuModuleLoadData(&m, tu_cluster_ptx);
    if (r == CUDA_SUCCESS)
        r = tu.cuModuleGetFunction(f, m, "cluster_width");
    return r;
}

CUresult tu_load_cluster_rank_kernel(CUfunction *f)
{
    CUmodule m;
    CUresult r = tu.cuModuleLoadData(&m, tu_cluster_ptx);
    if (r == CUDA_SUCCESS)
        r = tu.cuModuleGetFunction(f, m, "cluster_rank");
    return r;
}

int tu_clusters_or_skip(const char *what)
{
    int major = 0, minor = 0;
    TU_OK(tu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, tu_dev));
    TU_OK(tu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, tu_dev));
    if (major >= 9)
        return 1;
    printf("SKIP: %s: device %d has compute capability %d.%d; thread-block clusters need 9.0 "
           "(sm_90) or newer\n",
           what, (int)tu_dev, major, minor);
    return 0;
}

void tu_launch1(CUfunction f, CUstream s, void **args)
{
    TU_OK(tu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

int tu_two_devices(const char *test, CUcontext ctx[2])
{
    int count = 0;
    TU_OK(tu.cuDeviceGetCount(&count));
    if (count < 2) {
        ck_assert_msg(tu_real(), "%s: the simulated driver shows %d device(s), not 2", test,
                      count);
        printf("%s: one device only; needs two (not run)\n", test);
        return 0;
    }
    for (int d = 0; ctx && d < 2; d++) {
        CUdevice dev;
        TU_OK(tu.cuDeviceGet(&dev, d));
        TU_OK(tu.cuDevicePrimaryCtxRetain(&ctx[d], dev));
    }
    if (ctx)
        TU_OK(tu.cuCtxSetCurrent(ctx[0]));
    return 1;
}

cupool_class_stats_t tu_stats(cupool_kind_t kind, unsigned int flags)
{
    cupool_class_stats_t st[64] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 64, &n));
    for (size_t i = 0; i < n && i < 64; i++)
        if (st[i].kind == kind && st[i].flags == flags && st[i].context_alive)
            return st[i];
    ck_abort_msg("no live %s class with flags 0x%x among %zu classes",
                 kind == CUPOOL_KIND_STREAM ? "stream" : "event", flags, n);
    return st[0];
}

size_t tu_class_count(void)
{
    size_t n = 0;
    TU_OK(cupool_stats_get(NULL, 0, &n));
    return n;
}

int tu_real(void)
{
    const char *r = getenv("CUPOOLTEST_REAL");
    return r && !strcmp(r, "1");
}

/* In a child: can the real driver be loaded and does it see a device? */
static int gpu_answers(char *why, size_t whylen)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        char msg[512] = "";
        int ok = 0;
        if (cupool_init() != CUDA_SUCCESS) {
            snprintf(msg, sizeof(msg), "%s", cupool_error_string());
        } else {
            CUresult (*count)(int *) = NULL;
            int n = 0;
            if (cupool_driver_get_proc("cuDeviceGetCount", 2000, (void **)&count) == CUDA_SUCCESS &&
                count(&n) == CUDA_SUCCESS && n > 0)
                ok = 1;
            else
                snprintf(msg, sizeof(msg), "the driver loaded but reports no device");
        }
        ssize_t w = write(fds[1], msg, strlen(msg));
        (void)w;
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], why, whylen - 1);
    why[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int tu_run(Suite *s)
{
    if (tu_real()) {
        char why[512];
        if (!gpu_answers(why, sizeof(why))) {
            printf("SKIP: no GPU answers on the real driver: %s\n", why);
            srunner_free(srunner_create(s)); /* frees the suite: leak checkers stay quiet */
            return 77;
        }
        printf("running on the real CUDA driver\n");
    } else {
        printf("running on the driver at CUPOOL_DRIVER_PATH=%s\n",
               getenv("CUPOOL_DRIVER_PATH") ? getenv("CUPOOL_DRIVER_PATH") : "(unset)");
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

void tu_trim_leaves_nothing(void)
{
    cupool_class_stats_t st[64] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_trim());
    TU_OK(cupool_stats_get(st, 64, &n));
    for (size_t i = 0; i < n && i < 64; i++)
        ck_assert_uint_eq(st[i].idle, 0);
    if (tu_fake.present) {
        ck_assert_int_eq(tu_fake.live_streams(), 0);
        ck_assert_int_eq(tu_fake.live_events(), 0);
    }
}

int tu_lines_with(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}
