/* SPDX-License-Identifier: MIT */
/*
 * libcupool_preload.so: the binary-level drop-in (docs/drop-in.md). Loaded with LD_PRELOAD,
 * it gives unmodified programs pooled streams and events. It carries its own copy of cupool
 * (nothing of it exported, metadata from libc: no allocator is brought into the process) and
 * exports only the CUDA names it substitutes:
 *
 *   - the runtime's cudaStreamCreate, ...WithFlags, ...WithPriority, cudaStreamDestroy,
 *     cudaEventCreate, ...WithFlags, cudaEventDestroy: they take precedence over the shared
 *     runtime's (libcudart.so) for every caller;
 *   - the driver's cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy(_v2),
 *     cuEventCreate, cuEventDestroy(_v2): for programs linked with libcuda;
 *   - cuGetProcAddress(_v2) and dlsym: code that loads the driver itself (the CUDA runtime,
 *     static or shared, cuda-python, CuPy) resolves entry points through them; the five
 *     stream and event entry points come back as cupool's, every other one is the driver's,
 *     resolved with the caller's exact version and flags (per-thread default-stream variants
 *     included).
 *
 * With CUPOOL_DISABLE=1 every interposed name is the driver's or runtime's own (a pure
 * pass-through). dlsym calls made by this library itself (cupool loading the driver) are
 * never redirected.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "cupool_runtime.h"
#include "base/driver.h"
#include "base/error.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* cuda.h maps these names to their newest ABIs; the plain names are exported too */
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuGetProcAddress

typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);

/* libc's dlsym; read by the dlsym entry stub below, hence not static */
__attribute__((visibility("hidden"))) void *(*cupool__real_dlsym)(void *, const char *);
#define real_dlsym cupool__real_dlsym
static _Atomic(gpa1_fn) real_gpa1;
static _Atomic(gpa2_fn) real_gpa2;
static bool pass_through;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void preload_init(void)
{
    real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym)
        real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    const char *d = getenv("CUPOOL_DISABLE");
    pass_through = d && *d && strcmp(d, "0") != 0;
}

static inline void init(void)
{
    pthread_once(&once, preload_init);
}

/* Early, so that the dlsym stub has libc's dlsym before the program's code runs. */
__attribute__((constructor)) static void preload_ctor(void)
{
    init();
}

static bool same_object(const void *a, const void *b);

/* Is address inside this library? (dlsym calls from here are never redirected.) */
static bool is_self(const void *addr)
{
    return same_object(addr, (const void *)is_self);
}

static bool same_object(const void *a, const void *b)
{
    Dl_info x, y;
    return dladdr(a, &x) && dladdr(b, &y) && x.dli_fbase == y.dli_fbase;
}

/* ---- the real functions, for pass-through ---- */

/* A driver or runtime symbol as the next library in the search order defines it, else from
 * the driver library already loaded (the runtime opens it RTLD_LOCAL). */
static void *next_symbol(const char *name, bool driver)
{
    init();
    void *f = real_dlsym ? real_dlsym(RTLD_NEXT, name) : NULL;
    if (!f && driver) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (!h && getenv("CUPOOL_DRIVER_PATH"))
            h = dlopen(getenv("CUPOOL_DRIVER_PATH"), RTLD_NOW | RTLD_NOLOAD);
        if (h) {
            f = real_dlsym(h, name);
            dlclose(h);
        }
    }
    return f;
}

static gpa2_fn gpa2(void)
{
    gpa2_fn f = atomic_load_explicit(&real_gpa2, CUPOOL_RELAXED);
    if (!f) {
        f = (gpa2_fn)next_symbol("cuGetProcAddress_v2", true);
        atomic_store_explicit(&real_gpa2, f, CUPOOL_RELAXED);
    }
    return f;
}

static gpa1_fn gpa1(void)
{
    gpa1_fn f = atomic_load_explicit(&real_gpa1, CUPOOL_RELAXED);
    if (!f) {
        f = (gpa1_fn)next_symbol("cuGetProcAddress", true);
        atomic_store_explicit(&real_gpa1, f, CUPOOL_RELAXED);
    }
    return f;
}

static char driver_file[4096];
static _Atomic int driver_file_set;

const char *cupool__preload_driver_hint(void)
{
    return atomic_load_explicit(&driver_file_set, CUPOOL_ACQUIRE) == 2 ? driver_file : NULL;
}

/* Remembers the library a program found cuGetProcAddress in: cupool then loads that driver
 * unless CUPOOL_DRIVER_PATH names one. First one wins. */
static void note_driver(const void *sym)
{
    Dl_info di;
    int unset = 0;
    if (atomic_load_explicit(&driver_file_set, CUPOOL_RELAXED) != 0 || !dladdr(sym, &di) ||
        !di.dli_fname || !di.dli_fname[0] || strlen(di.dli_fname) >= sizeof(driver_file) ||
        !atomic_compare_exchange_strong(&driver_file_set, &unset, 1))
        return;
    strcpy(driver_file, di.dli_fname);
    atomic_store_explicit(&driver_file_set, 2, CUPOOL_RELEASE);
}

void cupool__preload_own_entries(void *h)
{
    init();
    const struct {
        void **slot;
        const char *abi;
    } e[] = {
        /* (cuda.h maps the destroys to their _v2 names, here too) */
        {(void **)&cupool__drv.cuStreamCreateWithPriority, "cuStreamCreateWithPriority"},
        {(void **)&cupool__drv.cuStreamDestroy_v2, "cuStreamDestroy_v2"},
        {(void **)&cupool__drv.cuEventCreate, "cuEventCreate"},
        {(void **)&cupool__drv.cuEventDestroy_v2, "cuEventDestroy_v2"},
        {(void **)&cupool__drv.cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset_v2"},
        {(void **)&cupool__drv.cuCtxDestroy_v2, "cuCtxDestroy_v2"},
    };
    for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++)
        if (*e[i].slot && is_self(*e[i].slot)) {
            void *f = real_dlsym ? real_dlsym(h, e[i].abi) : NULL;
            *e[i].slot = f && !is_self(f) ? f : NULL;
        }
}

/* ---- what is substituted ---- */

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/* cupool's function for a driver entry point name (any version), or NULL. */
static void *substitute(const char *name, int version)
{
    if (strncmp(name, "cu", 2) != 0)
        return NULL;
    if (!strcmp(name, "cuStreamCreate"))
        return (void *)cupool_cuStreamCreate;
    if (!strcmp(name, "cuStreamCreateWithPriority"))
        return (void *)cupool_cuStreamCreateWithPriority;
    if (!strcmp(name, "cuStreamDestroy") || !strcmp(name, "cuStreamDestroy_v2"))
        return (void *)cupool_cuStreamDestroy;
    if (!strcmp(name, "cuEventCreate"))
        return (void *)cupool_cuEventCreate;
    if (!strcmp(name, "cuEventDestroy") || !strcmp(name, "cuEventDestroy_v2"))
        return (void *)cupool_cuEventDestroy;
    /* the pools let go of a context before it is reset or destroyed (the ABI versions
     * cupool calls: the legacy ones are the driver's own) */
    if ((!strcmp(name, "cuDevicePrimaryCtxReset") && version >= 11000) ||
        !strcmp(name, "cuDevicePrimaryCtxReset_v2"))
        return (void *)cupool_cuDevicePrimaryCtxReset;
    if ((!strcmp(name, "cuCtxDestroy") && version >= 4000) || !strcmp(name, "cuCtxDestroy_v2"))
        return (void *)cupool_cuCtxDestroy;
    /* the lookup function itself, so that later lookups come here too */
    if (!strcmp(name, "cuGetProcAddress"))
        return version >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    if (!strcmp(name, "cuGetProcAddress_v2"))
        return (void *)cuGetProcAddress_v2;
    return NULL;
}

static void *substitute_runtime(const char *name)
{
    static const struct {
        const char *name;
        void *fn;
    } rt[] = {
        {"cudaStreamCreate", (void *)cupool_cudaStreamCreate},
        {"cudaStreamCreateWithFlags", (void *)cupool_cudaStreamCreateWithFlags},
        {"cudaStreamCreateWithPriority", (void *)cupool_cudaStreamCreateWithPriority},
        {"cudaStreamDestroy", (void *)cupool_cudaStreamDestroy},
        {"cudaEventCreate", (void *)cupool_cudaEventCreate},
        {"cudaEventCreateWithFlags", (void *)cupool_cudaEventCreateWithFlags},
        {"cudaEventDestroy", (void *)cupool_cudaEventDestroy},
    };
    if (strncmp(name, "cuda", 4) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++)
        if (!strcmp(name, rt[i].name))
            return rt[i].fn;
    return NULL;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    init();
    gpa2_fn real = gpa2();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && !pass_through && symbol && pfn && *pfn) {
        void *mine = substitute(symbol, cudaVersion);
        if (mine)
            *pfn = mine;
    }
    return r;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags)
{
    init();
    gpa1_fn real = gpa1();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && !pass_through && symbol && pfn && *pfn) {
        void *mine = substitute(symbol, cudaVersion);
        if (mine)
            *pfn = mine;
    }
    return r;
}

/* Does addr lie in a library with cupool inside (libcupool.so)? Its driver lookups must reach
 * the driver, not this library's pool. The last answer is kept. */
static bool in_cupool_library(const void *addr)
{
    static _Atomic(const void *) last_base;
    static _Atomic int last_answer;
    Dl_info di;
    if (!dladdr(addr, &di) || !di.dli_fname)
        return false;
    if (atomic_load_explicit(&last_base, CUPOOL_ACQUIRE) == di.dli_fbase)
        return atomic_load_explicit(&last_answer, CUPOOL_RELAXED);
    bool yes = false;
    void *h = dlopen(di.dli_fname[0] ? di.dli_fname : NULL, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        void *v = real_dlsym(h, "cupool_version");
        yes = v && same_object(v, addr);
        dlclose(h);
    }
    atomic_store_explicit(&last_answer, yes, CUPOOL_RELAXED);
    atomic_store_explicit(&last_base, di.dli_fbase, CUPOOL_RELEASE);
    return yes;
}

/* The ABI a dlsym name stands for: each name is its own ABI (no version to choose by). */
static void *substitute_by_name(const char *name)
{
    if (!strcmp(name, "cuGetProcAddress"))
        return (void *)cuGetProcAddress;
    return substitute(name, 12000);
}

/* dlsym: a driver library's cuGetProcAddress, or one of the substituted names, comes back as
 * this library's. The exported entry is a stub (below) that sends RTLD_NEXT lookups straight
 * to libc's dlsym with the caller's return address intact, so RTLD_NEXT keeps meaning "after
 * the caller" (glibc finds the caller from it), and nothing here runs, allocates or
 * substitutes for them. Everything else comes here. */
__attribute__((visibility("hidden"), used)) void *cupool__preload_dlsym(void *handle,
                                                                        const char *name);
__attribute__((visibility("hidden"), used)) void *cupool__preload_dlsym(void *handle,
                                                                        const char *name)
{
    init();
    if (!real_dlsym)
        return NULL;
    const void *caller = __builtin_return_address(0);
    void *r = real_dlsym(handle, name);
    if (!r || pass_through || handle == RTLD_NEXT || name[0] != 'c' || name[1] != 'u' ||
        is_self(caller) || same_object(caller, r) || in_cupool_library(caller))
        return r; /* a library looking up its own symbol (the driver) is not redirected */
    if (!strcmp(name, "cuGetProcAddress_v2")) {
        atomic_store_explicit(&real_gpa2, (gpa2_fn)r, CUPOOL_RELAXED);
        note_driver(r);
    } else if (!strcmp(name, "cuGetProcAddress")) {
        atomic_store_explicit(&real_gpa1, (gpa1_fn)r, CUPOOL_RELAXED);
        note_driver(r);
    }
    void *mine = substitute_by_name(name);
    if (!mine)
        mine = substitute_runtime(name);
    return mine ? mine : r;
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    cmpq $-1, %rdi\n" /* RTLD_NEXT */
        "    jne 1f\n"
        "    movq cupool__real_dlsym(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 1f\n"
        "    jmp *%rax\n"
        "1:  jmp cupool__preload_dlsym\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        "dlsym:\n"
        "    cmn x0, #1\n" /* RTLD_NEXT */
        "    b.ne 1f\n"
        "    adrp x16, cupool__real_dlsym\n"
        "    ldr x16, [x16, :lo12:cupool__real_dlsym]\n"
        "    cbz x16, 1f\n"
        "    br x16\n"
        "1:  b cupool__preload_dlsym\n"
        ".size dlsym, .-dlsym\n");
#else
/* elsewhere RTLD_NEXT lookups through the preload are resolved from its own position */
EXPORT void *dlsym(void *handle, const char *name)
{
    return cupool__preload_dlsym(handle, name);
}
#endif

/* ---- driver names, for programs linked with libcuda ---- */

#define PASS(type, name, params, args)                                                    \
    static type (*real_##name) params;                                                      \
    if (pass_through) {                                                                     \
        if (!real_##name)                                                                   \
            *(void **)&real_##name = next_symbol(#name, true);                              \
        return real_##name ? real_##name args : CUDA_ERROR_NOT_INITIALIZED;                 \
    }

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    init();
    PASS(CUresult, cuStreamCreate, (CUstream *, unsigned int), (phStream, Flags))
    return cupool_cuStreamCreate(phStream, Flags);
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    init();
    PASS(CUresult, cuStreamCreateWithPriority, (CUstream *, unsigned int, int),
         (phStream, flags, priority))
    return cupool_cuStreamCreateWithPriority(phStream, flags, priority);
}

EXPORT CUresult cuStreamDestroy(CUstream hStream);
EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    init();
    PASS(CUresult, cuStreamDestroy, (CUstream), (hStream))
    return cupool_cuStreamDestroy(hStream);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    init();
    PASS(CUresult, cuStreamDestroy_v2, (CUstream), (hStream))
    return cupool_cuStreamDestroy(hStream);
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    init();
    PASS(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice), (dev))
    return cupool_cuDevicePrimaryCtxReset(dev);
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    init();
    PASS(CUresult, cuCtxDestroy_v2, (CUcontext), (ctx))
    return cupool_cuCtxDestroy(ctx);
}

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    init();
    PASS(CUresult, cuEventCreate, (CUevent *, unsigned int), (phEvent, Flags))
    return cupool_cuEventCreate(phEvent, Flags);
}

EXPORT CUresult cuEventDestroy(CUevent hEvent);
EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
    init();
    PASS(CUresult, cuEventDestroy, (CUevent), (hEvent))
    return cupool_cuEventDestroy(hEvent);
}

EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    init();
    PASS(CUresult, cuEventDestroy_v2, (CUevent), (hEvent))
    return cupool_cuEventDestroy(hEvent);
}

/* ---- runtime names, for programs linked with the shared runtime ---- */

#define RT_PASS(name, params, args)                                                         \
    static cudaError_t (*real_##name) params;                                               \
    if (pass_through) {                                                                     \
        if (!real_##name)                                                                   \
            *(void **)&real_##name = next_symbol(#name, false);                             \
        return real_##name ? real_##name args : cudaErrorInitializationError;               \
    }

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    init();
    RT_PASS(cudaStreamCreate, (cudaStream_t *), (pStream))
    return cupool_cudaStreamCreate(pStream);
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    init();
    RT_PASS(cudaStreamCreateWithFlags, (cudaStream_t *, unsigned int), (pStream, flags))
    return cupool_cudaStreamCreateWithFlags(pStream, flags);
}

EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                int priority)
{
    init();
    RT_PASS(cudaStreamCreateWithPriority, (cudaStream_t *, unsigned int, int),
            (pStream, flags, priority))
    return cupool_cudaStreamCreateWithPriority(pStream, flags, priority);
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    init();
    RT_PASS(cudaStreamDestroy, (cudaStream_t), (stream))
    return cupool_cudaStreamDestroy(stream);
}

EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    init();
    RT_PASS(cudaEventCreate, (cudaEvent_t *), (event))
    return cupool_cudaEventCreate(event);
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    init();
    RT_PASS(cudaEventCreateWithFlags, (cudaEvent_t *, unsigned int), (event, flags))
    return cupool_cudaEventCreateWithFlags(event, flags);
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    init();
    RT_PASS(cudaEventDestroy, (cudaEvent_t), (event))
    return cupool_cudaEventDestroy(event);
}
