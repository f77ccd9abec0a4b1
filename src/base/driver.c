/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE /* dlinfo */
#include "base/internal.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/sync.h"
#include "base/layer.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

CUPOOL_TLS_IE bool cupool__closer;
_Atomic uint32_t cupool__drv_anon;

/* The driver said CUDA_ERROR_DEINITIALIZED (state.h). */
void cupool__driver_died(void)
{
    atomic_store(&cupool__hot.driver_gone, true);
    int expected = CUPOOL_ST_RUNNING;
    if (!atomic_compare_exchange_strong(&cupool__hot.state, &expected, CUPOOL_ST_DEAD)) {
        expected = CUPOOL_ST_PASSTHROUGH;
        atomic_compare_exchange_strong(&cupool__hot.state, &expected, CUPOOL_ST_DEAD);
    }
    cupool__log(CUPOOL_LOG_INFO, "the driver returned CUDA_ERROR_DEINITIALIZED: cupool will not "
                                 "call it again");
}

void cupool__driver_quiesce(void)
{
    cupool__membarrier();
    cupool__wait_threads(offsetof(struct cupool__thread, in_driver), &cupool__drv_anon,
                         1000000000u);
}

struct cupool__driver cupool__drv;
static void *driver_handle; /* our reference, dropped by cupool__driver_unload() */

/* Words for a cuGetProcAddress status, for messages. */
static const char *proc_status_text(CUdriverProcAddressQueryResult status)
{
    switch (status) {
    case CU_GET_PROC_ADDRESS_SUCCESS: return "found";
    case CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: return "symbol not found";
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
        return "the entry point is newer than the CUDA version asked for: ask for the version "
               "that introduced it, or a later one";
    default: return "unknown status";
    }
}

static CUresult resolve(const char *symbol, int version, void **pfn, char *msg, size_t msglen)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    void *p = NULL;
    CUresult r = cupool__drv.get_proc(symbol, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (r != CUDA_SUCCESS) {
        snprintf(msg, msglen, "cuGetProcAddress_v2(\"%s\", %d) in %s returned %s", symbol,
                 version, cupool__drv.path, cupool_result_name(r));
        return r; /* the stub's CUDA_ERROR_STUB_LIBRARY, or a failure worth retrying */
    }
    if (status != CU_GET_PROC_ADDRESS_SUCCESS || !p) {
        snprintf(msg, msglen, "cuGetProcAddress_v2(\"%s\", %d) in %s: %s", symbol, version,
                 cupool__drv.path, status == CU_GET_PROC_ADDRESS_SUCCESS ? "NULL pointer" : proc_status_text(status));
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *pfn = p;
    return CUDA_SUCCESS;
}

CUresult cupool__driver_load(const char *path, char *msg, size_t msglen)
{
    dlerror();
    /* RTLD_NODELETE: the driver stays mapped for the life of the process, as the CUDA runtime
     * leaves it, even when libcupool itself is unloaded: contexts and handles live on in it. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *why = dlerror();
        snprintf(msg, msglen,
                 "dlopen(\"%s\") failed: %s; no CUDA driver found (install the NVIDIA driver, or "
                 "set CUPOOL_DRIVER_PATH)",
                 path, why ? why : "unknown reason");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        snprintf(cupool__drv.path, sizeof(cupool__drv.path), "%s", lm->l_name);
    else
        snprintf(cupool__drv.path, sizeof(cupool__drv.path), "%s", path);

    *(void **)&cupool__drv.get_proc = dlsym(h, "cuGetProcAddress_v2");
    if (!cupool__drv.get_proc) {
        snprintf(msg, msglen,
                 "%s has no cuGetProcAddress_v2: it is not a CUDA driver, or one older than "
                 "CUDA 12.0 (R525), which cupool needs",
                 cupool__drv.path);
        dlclose(h);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUresult r;
#define X(name, version, ret, params)                                                 \
    r = resolve(#name, version, (void **)&cupool__drv.name, msg, msglen);             \
    if (r != CUDA_SUCCESS) {                                                          \
        if (r == CUDA_ERROR_STUB_LIBRARY)                                             \
            snprintf(msg, msglen,                                                     \
                     "%s is the CUDA toolkit's stub libcuda, not a driver: install the " \
                     "NVIDIA driver or fix the library path",                         \
                     cupool__drv.path);                                               \
        dlclose(h);                                                                   \
        return r;                                                                     \
    }
    CUPOOL_DRIVER_ENTRIES(X)
#undef X
    /* optional: a missing one stays NULL */
#define X(name, version, ret, params)                                                 \
    if (resolve(#name, version, (void **)&cupool__drv.name, msg, msglen) != CUDA_SUCCESS) \
        cupool__drv.name = NULL;
    CUPOOL_DRIVER_OPTIONAL(X)
#undef X
    if (cupool__driver_hooks.own_entries)
        cupool__driver_hooks.own_entries(h);
    msg[0] = '\0';
    r = cupool__drv.cuDriverGetVersion(&cupool__drv.version);
    if (r != CUDA_SUCCESS) {
        snprintf(msg, msglen, "cuDriverGetVersion in %s returned %s", cupool__drv.path,
                 cupool_result_name(r));
        dlclose(h);
        return r;
    }
    if (cupool__drv.version < 12000) {
        snprintf(msg, msglen, "%s reports CUDA %d.%d; cupool needs a CUDA 12.0 (R525) driver or newer",
                 cupool__drv.path, cupool__drv.version / 1000, cupool__drv.version % 1000 / 10);
        dlclose(h);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    r = cupool__drv.cuInit(0);
    if (r != CUDA_SUCCESS) {
        if (r == CUDA_ERROR_STUB_LIBRARY)
            snprintf(msg, msglen,
                     "cuInit(0) in %s returned CUDA_ERROR_STUB_LIBRARY: this is the CUDA toolkit's "
                     "stub libcuda, not a driver",
                     cupool__drv.path);
        else
            snprintf(msg, msglen, "cuInit(0) in %s returned %s", cupool__drv.path,
                     cupool_result_name(r));
        dlclose(h);
        return r;
    }
    driver_handle = h;
    return CUDA_SUCCESS;
}

CUresult cupool__driver_get_proc(const char *symbol, int version, void **pfn)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    void *p = NULL;
    CUresult r = CUPOOL_DRV(
        cupool__drv.get_proc(symbol, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGetProcAddress_v2(\"%s\", %d) failed", symbol, version);
    if (status != CU_GET_PROC_ADDRESS_SUCCESS || !p)
        return cupool__fail(CUDA_ERROR_NOT_FOUND, "cuGetProcAddress_v2(\"%s\", %d): %s", symbol,
                            version, proc_status_text(status));
    *pfn = p;
    return CUDA_SUCCESS;
}

void cupool__driver_unload(void)
{
    if (driver_handle)
        dlclose(driver_handle);
    driver_handle = NULL;
}
