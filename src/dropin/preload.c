/* SPDX-License-Identifier: MIT */
/*
 * libcupool_preload.so: the binary-level drop-in (docs/drop-in.md). Loaded with LD_PRELOAD,
 * it gives unmodified programs pooled streams and events. It carries its own copy of cupool
 * (nothing of it exported, metadata from libc: no allocator is brought into the process) and
 * exports only the CUDA names it substitutes, those of the drop-in list (dropin/names.h):
 *
 *   - the runtime's stream and event create and destroy calls: they take precedence over the
 *     shared runtime's (libcudart.so) for every caller;
 *   - the driver's, and its context reset and destroy (so that the pools let go of a context
 *     first): for programs linked with libcuda;
 *   - cuGetProcAddress(_v2) and dlsym: code that loads the driver itself (the CUDA runtime,
 *     static or shared, cuda-python, CuPy) resolves entry points through them; the listed
 *     entry points come back as cupool's, every other one is the driver's, resolved with the
 *     caller's exact version and flags (per-thread default-stream variants included).
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
#include "dropin/names.h"
#include "base/layer.h"

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

static void preload_own_entries(void *h);
static const char *preload_driver_hint(void);

static void preload_init(void)
{
    real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym)
        real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    const char *d = getenv("CUPOOL_DISABLE");
    pass_through = d && *d && strcmp(d, "0") != 0;
    /* what the driver loader asks of the preload (base/layer.h): here, not in the
     * constructor, for every way into this library's cupool passes through an export that
     * runs this first, while a constructor of the program's libraries may run before ours */
    cupool__driver_hooks.own_entries = preload_own_entries;
    cupool__driver_hooks.driver_hint = preload_driver_hint;
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

static const char *preload_driver_hint(void)
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

static void preload_own_entries(void *h)
{
    init();
    /* the ABIs cupool calls itself (dropin/names.h, slot 1), which the preload exports too */
#define OWN_ENTRY(name, target, link, compat, slot, params, args) \
    CUPOOL_DROPIN_IF(slot, {(void **)&cupool__drv.name, #name},)
    const struct {
        void **slot;
        const char *abi;
    } e[] = {CUPOOL_DROPIN_DRIVER(OWN_ENTRY)};
#undef OWN_ENTRY
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

#define SUBSTITUTE(name, target, link, compat, slot, params, args) {#name, (void *)target},
static const struct {
    const char *name;
    void *fn;
} driver_names[] = {CUPOOL_DROPIN_DRIVER(SUBSTITUTE)},
  runtime_names[] = {CUPOOL_DROPIN_RUNTIME(SUBSTITUTE)};
#undef SUBSTITUTE

/* cupool's function for a driver entry point name (any version), or NULL. */
static void *substitute(const char *name, int version)
{
    if (strncmp(name, "cu", 2) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof(driver_names) / sizeof(driver_names[0]); i++)
        if (!strcmp(name, driver_names[i].name))
            return driver_names[i].fn;
    /* the pools let go of a context before it is reset or destroyed: the legacy names
     * stand for the ABIs cupool wraps from these versions on (before, they are the driver's
     * own) */
    if (!strcmp(name, "cuDevicePrimaryCtxReset") && version >= 11000)
        return (void *)cupool_cuDevicePrimaryCtxReset;
    if (!strcmp(name, "cuCtxDestroy") && version >= 4000)
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
    if (strncmp(name, "cuda", 4) != 0)
        return NULL;
    for (size_t i = 0; i < sizeof(runtime_names) / sizeof(runtime_names[0]); i++)
        if (!strcmp(name, runtime_names[i].name))
            return runtime_names[i].fn;
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

/* Every driver name of dropin/names.h (a declaration first: cuda.h declares only the ABI
 * names it maps to). */
#define EXPORT_DRIVER(name, target, link, compat, slot, params, args) \
    EXPORT CUresult name params;                                      \
    EXPORT CUresult name params                                       \
    {                                                                 \
        init();                                                       \
        PASS(CUresult, name, params, args)                            \
        return target args;                                           \
    }
CUPOOL_DROPIN_DRIVER(EXPORT_DRIVER)

/* ---- runtime names, for programs linked with the shared runtime ---- */

#define RT_PASS(name, params, args)                                                         \
    static cudaError_t (*real_##name) params;                                               \
    if (pass_through) {                                                                     \
        if (!real_##name)                                                                   \
            *(void **)&real_##name = next_symbol(#name, false);                             \
        return real_##name ? real_##name args : cudaErrorInitializationError;               \
    }

#define EXPORT_RUNTIME(name, target, link, compat, slot, params, args) \
    EXPORT cudaError_t name params                                     \
    {                                                                  \
        init();                                                        \
        RT_PASS(name, params, args)                                    \
        return target args;                                            \
    }
CUPOOL_DROPIN_RUNTIME(EXPORT_RUNTIME)
