/* SPDX-License-Identifier: MIT */
/* cuGetProcAddress: the forms of every entry point (entries.h), newest first by version. */
#include "internal.h"

/* ========================================================================================
 * cuGetProcAddress
 * ======================================================================================== */

struct fc_proc {
    const char *name;
    int version; /* CUDA version that introduced this form */
    void (*fn)(void);
};

#define PROC(name, version, fn) {#name, version, (void (*)(void))fn},

static const struct fc_proc g_procs[] = {FC_ENTRIES(PROC, PROC)};

/* FAKECUDA_HIDE names it: cuGetProcAddress does not find it. */
static int hidden(const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(g_hidden, name); p; p = strstr(p + 1, name))
        if (p > g_hidden && p[-1] == ',' && p[n] == ',')
            return 1;
    return 0;
}

/* The newest form of symbol introduced at or before cudaVersion. Per-thread-default-stream
 * lookups get the same functions (the NULL stream is always the legacy one here). */
static CUresult proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                            CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_proc *best = NULL;
    int named = 0;
    for (size_t i = 0; i < sizeof g_procs / sizeof g_procs[0]; i++) {
        if (strcmp(g_procs[i].name, symbol) != 0 || hidden(symbol))
            continue;
        named = 1;
        if (g_procs[i].version <= cudaVersion && (!best || g_procs[i].version > best->version))
            best = &g_procs[i];
    }
    *pfn = best ? (void *)best->fn : NULL;
    if (status)
        *status = best    ? CU_GET_PROC_ADDRESS_SUCCESS
                  : named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                          : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    ENTER(cuGetProcAddress, 0);
    return leave(proc_lookup(symbol, pfn, cudaVersion, flags, symbolStatus));
}

/* The CUDA 11.3 form, without the status: a missing symbol is CUDA_ERROR_NOT_FOUND. */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags)
{
    ENTER(cuGetProcAddress, 0);
    CUdriverProcAddressQueryResult st;
    CUresult r = proc_lookup(symbol, pfn, cudaVersion, flags, &st);
    if (r == CUDA_SUCCESS && st != CU_GET_PROC_ADDRESS_SUCCESS)
        r = CUDA_ERROR_NOT_FOUND;
    return leave(r);
}
