/* SPDX-License-Identifier: MIT */
/*
 * A program that uses cupool and then leaves the way real programs do; check_lifecycle.c
 * runs it once per way of leaving and checks its exit status and that it printed nothing on
 * stderr. On the simulated driver, FAKECUDA_TEARDOWN_AT_EXIT=1 makes the driver tear itself
 * down from an exit handler and abort on any later call, as a strict real one could crash.
 *
 *   lifecycle_child return        handles idle, held and with work queued; return from main
 *   lifecycle_child exit-worker   four threads acquiring and releasing; a fifth calls exit(3)
 *   lifecycle_child quick-exit    quick_exit(4)
 *   lifecycle_child late-release  releases and acquires from an atexit handler and a
 *                                 destructor that run after the driver's teardown
 *   lifecycle_child cxx-static    releases from a C++ static object's destructor (only in
 *                                 lifecycle_child_cxx, the build with lifecycle_static.cc;
 *                                 exits 77 otherwise)
 *   lifecycle_child idle-at-exit  only idle handles at exit (for CUPOOL_DESTROY_ON_EXIT)
 *   lifecycle_child fork          forks after use: the child's calls fail with
 *                                 CUDA_ERROR_NOT_PERMITTED and touch nothing, then it execs
 *                                 "fresh"; the parent carries on
 *   lifecycle_child fresh         a clean start: acquire, launch, synchronise, release
 *   lifecycle_child maint-exit    exit(5) while the maintenance thread destroys a backlog of
 *                                 streams over a tiny idle cap (its driver calls must stop)
 * Anything unexpected is written to stderr and makes the exit status 1.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <dlfcn.h>

#include "cupool.h"
#include "common/kernels.h"

/* Driver entry points this program calls itself, through cupool_driver_get_proc(). Not the
 * test library's: that one reports through Check, which only works inside a test runner. */
static struct {
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemsetD32)(CUdeviceptr, unsigned int, size_t);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
                               unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
                               void **, void **);
} tu;
static struct {
    int present;
    unsigned long (*calls_total)(void);
} tu_fake;
static CUcontext tu_ctx;
struct tu_kernels {
    CUfunction spin, addone;
};

#define NHELD 2

static CUstream held_streams[NHELD];
static CUevent held_events[NHELD];
static cupool_stream_pool_t spool;
static CUstream held_pool_stream;
static struct tu_kernels kern;
static CUdeviceptr counter;
static int failures;

static void complain(const char *what, CUresult got, CUresult want)
{
    fprintf(stderr, "lifecycle_child: %s returned %s, expected %s (%s)\n", what,
            cupool_result_name(got), cupool_result_name(want), cupool_error_string());
    failures++;
}

#define EXPECT(call, want)                                                                  \
    do {                                                                                    \
        CUresult r_ = (call);                                                               \
        if (r_ != (want))                                                                   \
            complain(#call, r_, (want));                                                    \
    } while (0)

static void must(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "lifecycle_child: %s returned %s: %s\n", what, cupool_result_name(r),
                cupool_error_string());
        exit(1);
    }
}

#define RESOLVE(name, version) must(cupool_driver_get_proc(#name, version, (void **)&tu.name), #name)

static void setup(void)
{
    must(cupool_init(), "cupool_init");
    RESOLVE(cuDeviceGet, 2000);
    RESOLVE(cuDevicePrimaryCtxRetain, 7000);
    RESOLVE(cuCtxSetCurrent, 4000);
    RESOLVE(cuCtxSynchronize, 2000);
    RESOLVE(cuStreamSynchronize, 2000);
    RESOLVE(cuEventRecord, 2000);
    RESOLVE(cuMemAlloc, 3020);
    RESOLVE(cuMemcpyDtoH, 3020);
    RESOLVE(cuMemsetD32, 3020);
    RESOLVE(cuModuleLoadData, 2000);
    RESOLVE(cuModuleGetFunction, 2000);
    RESOLVE(cuLaunchKernel, 4000);
    const char *drv = getenv("CUPOOL_DRIVER_PATH");
    void *h = drv ? dlopen(drv, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (h && (*(void **)&tu_fake.calls_total = dlsym(h, "fakecuda_calls_total")) != NULL)
        tu_fake.present = 1;
    CUdevice dev;
    must(tu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    must(tu.cuDevicePrimaryCtxRetain(&tu_ctx, dev), "cuDevicePrimaryCtxRetain");
    must(tu.cuCtxSetCurrent(tu_ctx), "cuCtxSetCurrent");
    CUmodule mod;
    must(tu.cuModuleLoadData(&mod, tu_kernels_ptx), "cuModuleLoadData");
    must(tu.cuModuleGetFunction(&kern.spin, mod, "spin"), "cuModuleGetFunction(spin)");
    must(tu.cuModuleGetFunction(&kern.addone, mod, "addone"), "cuModuleGetFunction(addone)");
}

static void tu_launch1(CUfunction f, CUstream s, void **args)
{
    must(tu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "cuLaunchKernel");
}

/* A program mid-flight: pools warm, some handles idle, some held, work queued on both. */
static void use_cupool(void)
{
    setup();
    EXPECT(tu.cuMemAlloc(&counter, 4), CUDA_SUCCESS);
    EXPECT(tu.cuMemsetD32(counter, 0, 1), CUDA_SUCCESS);
    EXPECT(tu.cuCtxSynchronize(), CUDA_SUCCESS); /* the memset ran: the streams below do not
                                                    wait for the legacy default stream */
    CUstream s[4];
    CUevent e[4];
    for (int i = 0; i < 4; i++) {
        EXPECT(cupool_stream_acquire(&s[i], CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
        EXPECT(cupool_event_acquire(&e[i], CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    }
    unsigned long long ns = 20000000; /* 20 ms of queued work */
    void *spin_args[] = {&ns};
    void *add_args[] = {&counter};
    for (int i = 0; i < 4; i++) {
        tu_launch1(kern.spin, s[i], spin_args);
        tu_launch1(kern.addone, s[i], add_args);
        EXPECT(tu.cuEventRecord(e[i], s[i]), CUDA_SUCCESS);
    }
    for (int i = 0; i < NHELD; i++) {
        held_streams[i] = s[i];
        held_events[i] = e[i];
    }
    for (int i = NHELD; i < 4; i++) {
        EXPECT(cupool_stream_release(s[i]), CUDA_SUCCESS); /* released with work queued */
        EXPECT(cupool_event_release(e[i]), CUDA_SUCCESS);
    }
    EXPECT(cupool_stream_pool_get(&spool, NULL, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
    EXPECT(cupool_stream_pool_acquire(spool, &held_pool_stream), CUDA_SUCCESS);
    tu_launch1(kern.spin, held_pool_stream, spin_args);
}

/* Releases after the driver's teardown: no-ops that succeed; acquires fail quietly. */
static void release_late(const char *where)
{
    for (int i = 0; i < NHELD; i++) {
        if (held_streams[i])
            EXPECT(cupool_stream_release(held_streams[i]), CUDA_SUCCESS);
        if (held_events[i])
            EXPECT(cupool_event_release(held_events[i]), CUDA_SUCCESS);
        held_streams[i] = NULL;
        held_events[i] = NULL;
    }
    if (held_pool_stream)
        EXPECT(cupool_stream_pool_release(spool, held_pool_stream, 0), CUDA_SUCCESS);
    held_pool_stream = NULL;
    CUstream s = NULL;
    CUevent e = NULL;
    EXPECT(cupool_stream_acquire(&s, 0, 0), CUDA_ERROR_DEINITIALIZED);
    EXPECT(cupool_event_acquire(&e, 0), CUDA_ERROR_DEINITIALIZED);
    EXPECT(cupool_trim(), CUDA_ERROR_DEINITIALIZED);
    size_t n = 0;
    EXPECT(cupool_stats_get(NULL, 0, &n), CUDA_SUCCESS);
    if (failures) {
        fprintf(stderr, "lifecycle_child: %d failure(s) in %s\n", failures, where);
        _exit(1);
    }
}

static void late_atexit(void)
{
    release_late("an atexit handler");
}

static int late_destructor_armed;
__attribute__((destructor)) static void late_destructor(void)
{
    if (late_destructor_armed)
        release_late("a destructor");
}

/* Called from the C++ static object's destructor (lifecycle_static.cc). */
void lifecycle_child_static_release(void);
void lifecycle_child_static_release(void)
{
    release_late("a C++ static destructor");
}
int lifecycle_child_static_armed;
__attribute__((weak)) int lifecycle_child_have_cxx = 0; /* 1 in lifecycle_child_cxx */

/* Churners that have made their own driver call (cuCtxSetCurrent): exit_soon waits for all
 * of them, or a churner started late (a sanitizer's slowdown) would make it after the
 * driver's teardown, a call of the test's own, not cupool's. */
static _Atomic int churners_started;

static void *churn(void *arg)
{
    (void)arg;
    CUcontext ctx = tu_ctx;
    tu.cuCtxSetCurrent(ctx);
    atomic_fetch_add(&churners_started, 1);
    cupool_event_pool_t epool;
    cupool_event_pool_get(&epool, ctx, CU_EVENT_DISABLE_TIMING);
    for (;;) {
        CUstream s;
        CUevent e;
        if (cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS)
            cupool_stream_release(s);
        if (cupool_event_pool_acquire(epool, &e) == CUDA_SUCCESS)
            cupool_event_pool_release(epool, e);
        if (cupool_stream_acquire(&s, 0, -1) == CUDA_SUCCESS) /* creates now and then */
            cupool_stream_release(s);
        cupool_trim(); /* destroys now and then */
    }
    return NULL;
}

static void *exit_soon(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 1000000};
    while (atomic_load(&churners_started) < 4)
        nanosleep(&ts, NULL);
    ts.tv_nsec = 30000000;
    nanosleep(&ts, NULL);
    exit(3);
}

static int fresh(void)
{
    use_cupool();
    for (int i = 0; i < NHELD; i++) {
        EXPECT(tu.cuStreamSynchronize(held_streams[i]), CUDA_SUCCESS);
        EXPECT(cupool_stream_release(held_streams[i]), CUDA_SUCCESS);
        EXPECT(cupool_event_release(held_events[i]), CUDA_SUCCESS);
    }
    EXPECT(tu.cuCtxSynchronize(), CUDA_SUCCESS);
    unsigned int v = 0;
    EXPECT(tu.cuMemcpyDtoH(&v, counter, 4), CUDA_SUCCESS);
    if (v != 4) {
        fprintf(stderr, "lifecycle_child: counter %u after 4 increments\n", v);
        failures++;
    }
    return failures ? 1 : 0;
}

static int forked(const char *self)
{
    use_cupool();
    unsigned long before = tu_fake.present ? tu_fake.calls_total() : 0;
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        CUstream s;
        CUevent e;
        EXPECT(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_NOT_PERMITTED);
        EXPECT(cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING), CUDA_ERROR_NOT_PERMITTED);
        EXPECT(cupool_stream_pool_acquire(spool, &s), CUDA_ERROR_NOT_PERMITTED);
        EXPECT(cupool_stream_release(held_streams[0]), CUDA_ERROR_NOT_PERMITTED);
        EXPECT(cupool_event_release(held_events[0]), CUDA_ERROR_NOT_PERMITTED);
        EXPECT(cupool_trim(), CUDA_ERROR_NOT_PERMITTED);
        if (tu_fake.present && tu_fake.calls_total() != before) {
            fprintf(stderr, "lifecycle_child: the forked child called the driver %lu times\n",
                    tu_fake.calls_total() - before);
            failures++;
        }
        if (failures)
            _exit(1);
        execl(self, self, "fresh", (char *)NULL);
        perror("execl");
        _exit(1);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "lifecycle_child: forked child ended with status 0x%x\n", status);
        failures++;
    }
    /* The parent is unaffected: its held handles work, release, and come back. */
    for (int i = 0; i < NHELD; i++) {
        EXPECT(tu.cuStreamSynchronize(held_streams[i]), CUDA_SUCCESS);
        EXPECT(cupool_stream_release(held_streams[i]), CUDA_SUCCESS);
        EXPECT(cupool_event_release(held_events[i]), CUDA_SUCCESS);
    }
    CUstream s;
    EXPECT(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
    void *add_args[] = {&counter};
    tu_launch1(kern.addone, s, add_args);
    EXPECT(tu.cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT(cupool_stream_release(s), CUDA_SUCCESS);
    EXPECT(tu.cuCtxSynchronize(), CUDA_SUCCESS);
    unsigned int v = 0;
    EXPECT(tu.cuMemcpyDtoH(&v, counter, 4), CUDA_SUCCESS);
    if (v != 5) {
        fprintf(stderr, "lifecycle_child: parent counter %u, expected 5\n", v);
        failures++;
    }
    return failures ? 1 : 0;
}

/* An exit handler registered after the program's own cuInit but before cupool's first use
 * runs after cupool's exit handler: a drop-in create and destroy there must still reach the
 * driver, as the replaced calls would. */
static void dropin_atexit(void)
{
    CUstream s = NULL;
    CUresult r = cupool_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    CUresult d = r == CUDA_SUCCESS ? cupool_cuStreamDestroy(s) : r;
    if (r != CUDA_SUCCESS || d != CUDA_SUCCESS) {
        fprintf(stderr, "lifecycle_child: drop-in create %d, destroy %d in an exit handler\n",
                (int)r, (int)d);
        _exit(3);
    }
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "";
    if (!strcmp(how, "return")) {
        use_cupool();
        return failures ? 1 : 0;
    }
    if (!strcmp(how, "exit-worker")) {
        use_cupool();
        pthread_t t[5];
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], NULL, churn, NULL);
        pthread_create(&t[4], NULL, exit_soon, NULL);
        pthread_join(t[0], NULL); /* never returns: the worker exits the process */
        return 1;
    }
    if (!strcmp(how, "quick-exit")) {
        use_cupool();
        quick_exit(failures ? 1 : 4);
    }
    if (!strcmp(how, "late-release")) {
        atexit(late_atexit); /* before cupool's first call: runs after the driver's teardown */
        late_destructor_armed = 1;
        use_cupool();
        return failures ? 1 : 0;
    }
    if (!strcmp(how, "cxx-static")) {
        if (!lifecycle_child_have_cxx)
            return 77;
        lifecycle_child_static_armed = 1;
        use_cupool();
        return failures ? 1 : 0;
    }
    if (!strcmp(how, "idle-at-exit")) {
        use_cupool();
        EXPECT(tu.cuCtxSynchronize(), CUDA_SUCCESS);
        for (int i = 0; i < NHELD; i++) {
            EXPECT(cupool_stream_release(held_streams[i]), CUDA_SUCCESS);
            EXPECT(cupool_event_release(held_events[i]), CUDA_SUCCESS);
        }
        EXPECT(cupool_stream_pool_release(spool, held_pool_stream, 0), CUDA_SUCCESS);
        return failures ? 1 : 0;
    }
    if (!strcmp(how, "dropin-at-exit")) {
        const char *path = getenv("CUPOOL_DRIVER_PATH");
        void *h = dlopen(path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        CUresult (*init)(unsigned) = NULL;
        if (h)
            *(void **)&init = dlsym(h, "cuInit");
        if (!init || init(0) != CUDA_SUCCESS)
            return 77;
        atexit(dropin_atexit); /* after the driver's own initialisation, before cupool's */
        use_cupool();
        return failures ? 1 : 0;
    }
    if (!strcmp(how, "maint-exit")) {
        /* set before the first call: the configuration is read once */
        setenv("CUPOOL_STREAM_IDLE_MAX", "16", 1);
        setenv("CUPOOL_MAGAZINE_SIZE", "4", 1);
        setup();
        enum { N = 512 };
        static CUstream s[N];
        for (int i = 0; i < N; i++)
            must(cupool_stream_acquire(&s[i], CU_STREAM_NON_BLOCKING, 0), "cupool_stream_acquire");
        for (int i = 0; i < N; i++)
            must(cupool_stream_release(s[i]), "cupool_stream_release");
        cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
        must(cupool_maintenance_stats_get(&m), "cupool_maintenance_stats_get");
        if (!m.running) {
            fprintf(stderr, "lifecycle_child: the maintenance thread is not running\n");
            return 1;
        }
        /* the backlog (~490 streams over the cap) is the maintenance thread's, not ours */
        if (m.request_destroys != 0) {
            fprintf(stderr, "lifecycle_child: %llu destroys on the releasing thread\n",
                    (unsigned long long)m.request_destroys);
            return 1;
        }
        exit(failures ? 1 : 5); /* while it destroys */
    }
    if (!strcmp(how, "fork"))
        return forked(argv[0]);
    if (!strcmp(how, "fresh"))
        return fresh();
    fprintf(stderr, "usage: %s return|exit-worker|quick-exit|late-release|cxx-static|"
                    "idle-at-exit|dropin-at-exit|fork|fresh|maint-exit\n",
            argv[0]);
    return 2;
}
