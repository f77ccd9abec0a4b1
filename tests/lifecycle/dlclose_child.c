/* SPDX-License-Identifier: MIT */
/*
 * Loads libcupool with dlopen(), uses it, unloads it with dlclose(), many times in one
 * process, and checks what unloading promises:
 *  - every idle handle is destroyed (on the simulated driver: its live-handle counts drop to
 *    the handles still held), and handles still held stay valid (the driver destroys them
 *    afterwards without complaint);
 *  - every byte is freed: the host heap (mallinfo2) stops growing after the first cycles and
 *    the resident size grows by less than half the metadata a cycle uses; under a leak
 *    checker (ASan's LeakSanitizer) nothing is reported at exit.
 * Not linked with libcupool: usage `dlclose_child LIBCUPOOL.so CYCLES`. Uses the driver that
 * CUPOOL_DRIVER_PATH names, or libcuda.so.1. Prints one summary line; problems go to stderr
 * and make the exit status 1.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cupool.h> /* types only: the library is reached through dlsym() */
#include "common/maint_threads.h"
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSTREAMS 8
#define NEVENTS 8
#define NHELD 2
#define WARMUP 10 /* cycles before the heap is measured: the C library's caches settle */

typedef CUresult (*init_fn)(void);
typedef CUresult (*proc_fn)(const char *, int, void **);
typedef CUresult (*sacq_fn)(CUstream *, unsigned int, int);
typedef CUresult (*srel_fn)(CUstream);
typedef CUresult (*eacq_fn)(CUevent *, unsigned int);
typedef CUresult (*erel_fn)(CUevent);
typedef size_t (*bytes_fn)(void);
typedef const char *(*errstr_fn)(void);

static int failures;

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "dlclose_child: %s not found: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

#define CHECK(call)                                                                         \
    do {                                                                                    \
        CUresult r_ = (call);                                                               \
        if (r_ != CUDA_SUCCESS) {                                                           \
            fprintf(stderr, "dlclose_child: cycle %d: %s returned %d: %s\n", cycle, #call,  \
                    (int)r_, errstr());                                                     \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBCUPOOL.so CYCLES\n", argv[0]);
        return 2;
    }
    int cycles = atoi(argv[2]);
    const char *drvpath = getenv("CUPOOL_DRIVER_PATH") ? getenv("CUPOOL_DRIVER_PATH")
                                                       : "libcuda.so.1";
    int (*live_streams)(void) = NULL, (*live_events)(void) = NULL;
    size_t (*driver_heap)(void) = NULL; /* the simulated driver's own heap use */
    size_t driver_heap_after_warmup = 0;
    CUresult (*stream_destroy)(CUstream) = NULL;
    CUresult (*event_destroy)(CUevent) = NULL;
    size_t heap_after_warmup = 0, metadata = 0;
    long rss_after_warmup = 0;
    for (int cycle = 0; cycle < cycles; cycle++) {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            fprintf(stderr, "dlclose_child: dlopen(%s): %s\n", argv[1], dlerror());
            return 1;
        }
        errstr_fn errstr = (errstr_fn)sym(lib, "cupool_error_string");
        CHECK(((init_fn)sym(lib, "cupool_init"))());
        proc_fn proc = (proc_fn)sym(lib, "cupool_driver_get_proc");
        CUresult (*device_get)(CUdevice *, int);
        CUresult (*retain)(CUcontext *, CUdevice);
        CUresult (*set_current)(CUcontext);
        CHECK(proc("cuDeviceGet", 2000, (void **)&device_get));
        CHECK(proc("cuDevicePrimaryCtxRetain", 7000, (void **)&retain));
        CHECK(proc("cuCtxSetCurrent", 4000, (void **)&set_current));
        CHECK(proc("cuStreamDestroy", 4000, (void **)&stream_destroy));
        CHECK(proc("cuEventDestroy", 4000, (void **)&event_destroy));
        if (cycle == 0) {
            void *drv = dlopen(drvpath, RTLD_NOW | RTLD_NOLOAD);
            if (drv) {
                *(void **)&live_streams = dlsym(drv, "fakecuda_live_streams");
                *(void **)&live_events = dlsym(drv, "fakecuda_live_events");
                *(void **)&driver_heap = dlsym(drv, "fakecuda_slab_bytes");
                dlclose(drv);
            }
        }
        CUdevice dev;
        CUcontext ctx;
        CHECK(device_get(&dev, 0));
        CHECK(retain(&ctx, dev)); /* one reference per cycle: the context stays alive */
        CHECK(set_current(ctx));

        sacq_fn sacq = (sacq_fn)sym(lib, "cupool_stream_acquire");
        srel_fn srel = (srel_fn)sym(lib, "cupool_stream_release");
        eacq_fn eacq = (eacq_fn)sym(lib, "cupool_event_acquire");
        erel_fn erel = (erel_fn)sym(lib, "cupool_event_release");
        CUstream s[NSTREAMS];
        CUevent e[NEVENTS];
        for (int i = 0; i < NSTREAMS; i++)
            CHECK(sacq(&s[i], CU_STREAM_NON_BLOCKING, 0));
        for (int i = 0; i < NEVENTS; i++)
            CHECK(eacq(&e[i], CU_EVENT_DISABLE_TIMING));
        for (int i = NHELD; i < NSTREAMS; i++)
            CHECK(srel(s[i]));
        for (int i = NHELD; i < NEVENTS; i++)
            CHECK(erel(e[i]));
        /* the maintenance thread runs (it started with the first class) and is joined at
         * dlclose: none may be left running code that is about to be unmapped */
        cupool_maintenance_stats_t ms = CUPOOL_MAINTENANCE_STATS_INIT;
        CHECK(((CUresult(*)(cupool_maintenance_stats_t *))sym(lib, "cupool_maintenance_stats_get"))(&ms));
        if (!ms.running) {
            fprintf(stderr, "dlclose_child: cycle %d: the maintenance thread is not running\n",
                    cycle);
            failures++;
        }
        size_t bytes = ((bytes_fn)sym(lib, "cupool_metadata_bytes"))();
        metadata = bytes;
        if (bytes == 0) {
            fprintf(stderr, "dlclose_child: cupool_metadata_bytes() is 0 with pools in use\n");
            failures++;
        }

        if (dlclose(lib) != 0) {
            fprintf(stderr, "dlclose_child: dlclose: %s\n", dlerror());
            return 1;
        }
        if (maint_threads_after_join(5000) != 0) {
            fprintf(stderr, "dlclose_child: cycle %d: a cupool-maint thread outlived dlclose\n",
                    cycle);
            failures++;
        }
        if (dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD)) {
            fprintf(stderr, "dlclose_child: libcupool is still loaded after dlclose\n");
            return 1;
        }
        /* Idle handles went with the library; held ones are the caller's and still valid. */
        if (live_streams && (live_streams() != NHELD || live_events() != NHELD)) {
            fprintf(stderr,
                    "dlclose_child: cycle %d: %d streams and %d events alive after unload, "
                    "expected the %d held of each\n",
                    cycle, live_streams(), live_events(), NHELD);
            failures++;
        }
        for (int i = 0; i < NHELD; i++) {
            CUresult r1 = stream_destroy(s[i]), r2 = event_destroy(e[i]);
            if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS) {
                fprintf(stderr, "dlclose_child: destroying a held handle after unload: %d %d\n",
                        (int)r1, (int)r2);
                failures++;
            }
        }
        if (cycle == WARMUP - 1) {
            heap_after_warmup = mallinfo2().uordblks;
            driver_heap_after_warmup = driver_heap ? driver_heap() : 0;
            rss_after_warmup = rss_kib();
        }
    }
    /* The driver's own growth (the simulation holds destroyed events back before reusing them)
     * is not cupool's: leave it out. */
    size_t driver_growth = driver_heap ? driver_heap() - driver_heap_after_warmup : 0;
    size_t heap = mallinfo2().uordblks - driver_growth;
    long rss = rss_kib() - (long)(driver_growth / 1024);
    int measured = cycles > WARMUP ? cycles - WARMUP : 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    printf("dlclose_child: %d cycles, %zu bytes of cupool metadata each; heap and resident size "
           "not measured under a sanitizer\n",
           cycles, metadata);
#else
    printf("dlclose_child: %d cycles, %zu bytes of cupool metadata each; over the last %d: host "
           "heap in use %zu -> %zu bytes, resident %ld -> %ld KiB (the driver's own growth, %zu "
           "bytes, left out)\n",
           cycles, metadata, measured, heap_after_warmup, heap, rss_after_warmup, rss,
           driver_growth);
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* A sanitizer's allocator owns the heap: mallinfo2 and the resident size say nothing of
     * cupool here. LeakSanitizer checks every byte at exit instead. */
    measured = 0;
#endif
    /* A leak of the metadata would grow the heap by `metadata` bytes a cycle (libc builds);
     * the real driver's own heap moves by a few KiB. */
    if (measured > 0 && heap > heap_after_warmup + 16384) {
        fprintf(stderr, "dlclose_child: host heap grew by %zu bytes over %d cycles\n",
                heap - heap_after_warmup, measured);
        failures++;
    }
    /* jemalloc keeps a few KiB of a destroyed arena's metadata resident (its default
     * opt.retain); anything near the metadata itself is a leak. */
    if (measured > 0 && (rss - rss_after_warmup) * 1024 > (long)(metadata / 2) * measured) {
        fprintf(stderr, "dlclose_child: resident size grew by %ld KiB over %d cycles\n",
                rss - rss_after_warmup, measured);
        failures++;
    }
    return failures ? 1 : 0;
}
