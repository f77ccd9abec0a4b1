/* SPDX-License-Identifier: MIT */
/* cuInit, fork and exit handling, the driver version, error names and strings. */
#include "internal.h"

/* ========================================================================================
 * Initialisation, version, errors
 * ======================================================================================== */

static void atfork_prepare(void) { lock(); }
static void atfork_parent(void) { unlock(); }
static void atfork_child(void)
{
    /* the real driver refuses every call in a child forked after cuInit */
    if (g_initialized)
        g_fork_child = 1;
    pthread_cond_init(&g_cond, NULL); /* no other thread exists to wait on it */
    unlock();
}

static void teardown_at_exit(void)
{
    lock();
    g_strict = 1;
    g_torn_down = 1;
    unlock();
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    ENTER(cuInit, 0);
    if (g_fork_child)
        return leave(CUDA_ERROR_NOT_INITIALIZED);
    if (Flags != 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (g_initialized)
        return leave(CUDA_SUCCESS);

    const char *env = getenv("FAKECUDA_DEVICES");
    char *end = NULL;
    long n = env && *env ? strtol(env, &end, 10) : 1;
    if (env && *env && (*end || n < 0))
        n = 1;
    if (n == 0)
        return leave(CUDA_ERROR_NO_DEVICE);
    g_ndev = n > FC_MAX_DEVICES ? FC_MAX_DEVICES : (int)n;
    for (int i = 0; i < g_ndev; i++) {
        if (!g_primary[i]) {
            struct fc_ctx *c = pool_get(&g_ctx_pool);
            if (!c)
                return leave(CUDA_ERROR_OUT_OF_MEMORY);
            c->primary = 1;
            c->dev = i;
            c->all_next = g_contexts;
            g_contexts = c;
            g_primary[i] = c;
        }
    }
    if (!g_handlers_registered) {
        g_handlers_registered = 1;
        pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
        const char *t = getenv("FAKECUDA_TEARDOWN_AT_EXIT");
        if (t && strcmp(t, "1") == 0)
            atexit(teardown_at_exit);
    }
    g_initialized = 1;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    ENTER(cuDriverGetVersion, 0);
    if (!driverVersion)
        return leave(CUDA_ERROR_INVALID_VALUE);
    *driverVersion = g_driver_version;
    return leave(CUDA_SUCCESS);
}

#define FC_ERRORS(X)                                                                        \
    X(CUDA_SUCCESS, "no error")                                                             \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                         \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                            \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                   \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                     \
    X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")                             \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                           \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                  \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                           \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                 \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current")                        \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for the device")          \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use")                          \
    X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                               \
    X(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid")                          \
    X(CUDA_ERROR_FILE_NOT_FOUND, "file not found")                                          \
    X(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")  \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                 \
    X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")   \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                       \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                             \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")               \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")        \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated")                 \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled")             \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled")               \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context already active")                  \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                              \
    X(CUDA_ERROR_ASSERT, "device-side assert triggered")                                    \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error")                              \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered")             \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address")                                  \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space") \
    X(CUDA_ERROR_INVALID_PC, "invalid program counter")                                     \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                               \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                  \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                  \
    X(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized")                            \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing") \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture") \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "operation would result in a merge of separate capture sequences") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "capturing stream has unjoined work")             \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "dependency created on uncaptured work in another stream") \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream") \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread") \
    X(CUDA_ERROR_TIMEOUT, "wait operation timed out")                                       \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

struct fc_error_text {
    CUresult code;
    const char *name, *text;
};
#define FC_ERROR_ENTRY(code, text) {code, #code, text},
static const struct fc_error_text g_errors[] = {FC_ERRORS(FC_ERROR_ENTRY)};

static CUresult error_text(CUresult error, const char **pStr, int want_name)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++) {
        if (g_errors[i].code == error) {
            *pStr = want_name ? g_errors[i].name : g_errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    ENTER(cuGetErrorName, 0);
    return leave(error_text(error, pStr, 1));
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    ENTER(cuGetErrorString, 0);
    return leave(error_text(error, pStr, 0));
}
