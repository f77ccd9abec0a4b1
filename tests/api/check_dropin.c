/* SPDX-License-Identifier: MIT */
/*
 * Drop-in wrappers, exercised the way existing code calls them: plain cuStreamCreate,
 * cudaStreamCreate & co. This file is built twice: with cupool_compat.h (source level,
 * check_dropin_compat) and unchanged with -Wl,--wrap=NAME for each name (link level,
 * check_dropin_wrap). Both drivers.
 */
#define _GNU_SOURCE
#include "common/testutil.h"
#include <cuda_runtime_api.h>
#include <cupool_runtime.h>
#include <pthread.h>
#include <stdlib.h>

/* Raw driver handles (not cupool's), made before the compat macros rename the names. */
static CUstream raw_stream(void)
{
    CUstream s = NULL;
    TU_OK(tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

static CUevent raw_event(void)
{
    CUevent e = NULL;
    TU_OK(tu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    return e;
}

static unsigned stream_flags(CUstream s)
{
    unsigned f = 99;
    TU_OK(tu.cuStreamGetFlags(s, &f));
    return f;
}

static int stream_priority(CUstream s)
{
    int p = 99;
    TU_OK(tu.cuStreamGetPriority(s, &p));
    return p;
}

static void work_on(CUstream s, CUevent e)
{
    TU_OK(tu.cuEventRecord(e, s));
    TU_OK(tu.cuStreamSynchronize(s));
    TU_OK(tu.cuEventQuery(e));
}

#ifdef DROPIN_COMPAT
#include <cupool_compat.h>
#endif

static void setup(void)
{
    tu_setup();
}

START_TEST(driver_calls_get_pooled_handles)
{
    for (int i = 0; i < 1000; i++) {
        CUstream s;
        CUevent e;
        TU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        TU_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        if (i % 100 == 0) {
            ck_assert_uint_eq(stream_flags(s), CU_STREAM_NON_BLOCKING);
            work_on(s, e);
        }
        TU_OK(cuEventDestroy(e));
        TU_OK(cuStreamDestroy(s));
    }
    cupool_class_stats_t ss = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    cupool_class_stats_t es = tu_stats(CUPOOL_KIND_EVENT, CU_EVENT_DISABLE_TIMING);
    ck_assert_uint_eq(ss.acquires, 1000);
    ck_assert_uint_eq(ss.releases, 1000);
    ck_assert_uint_eq(ss.creates, 1); /* one driver stream served all 1000 */
    ck_assert_uint_eq(es.acquires, 1000);
    ck_assert_uint_eq(es.creates, 1);
    if (tu_fake.present) {
        ck_assert_int_eq(tu_fake.live_streams(), 1);
        ck_assert_int_eq(tu_fake.live_events(), 1);
    }
    tu_trim_leaves_nothing();
}
END_TEST

START_TEST(priority_and_flags_as_the_driver)
{
    int least, greatest;
    CUresult (*range)(int *, int *) = NULL;
    TU_OK(cupool_driver_get_proc("cuCtxGetStreamPriorityRange", 5050, (void **)&range));
    TU_OK(range(&least, &greatest));
    CUstream hi, lo, plain;
    TU_OK(cuStreamCreateWithPriority(&hi, CU_STREAM_NON_BLOCKING, greatest - 100)); /* clamped */
    TU_OK(cuStreamCreateWithPriority(&lo, CU_STREAM_DEFAULT, least + 100));
    TU_OK(cuStreamCreate(&plain, CU_STREAM_DEFAULT));
    ck_assert_int_eq(stream_priority(hi), greatest);
    ck_assert_int_eq(stream_priority(lo), least);
    ck_assert_uint_eq(stream_flags(hi), CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(stream_flags(plain), CU_STREAM_DEFAULT);
    CUstream bad = NULL;
    ck_assert_int_eq(cuStreamCreate(&bad, 0x40), CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_null(bad);
    ck_assert_int_eq(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    TU_OK(cuStreamDestroy(hi));
    TU_OK(cuStreamDestroy(lo));
    TU_OK(cuStreamDestroy(plain));
}
END_TEST

START_TEST(foreign_handles_go_to_the_driver)
{
    int streams = tu_fake.present ? tu_fake.live_streams() : 0;
    int events = tu_fake.present ? tu_fake.live_events() : 0;
    CUstream s = raw_stream();
    CUevent e = raw_event();
    TU_OK(cuStreamDestroy(s)); /* not cupool's: destroyed by the driver */
    TU_OK(cuEventDestroy(e));
    if (tu_fake.present) {
        ck_assert_int_eq(tu_fake.live_streams(), streams);
        ck_assert_int_eq(tu_fake.live_events(), events);
    }
    ck_assert_uint_eq(tu_class_count(), 0); /* nothing pooled */
}
END_TEST

START_TEST(double_and_crossed_destroys_are_refused)
{
    CUstream s;
    CUevent e;
    TU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    TU_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    ck_assert_int_eq(cuEventDestroy((CUevent)s), CUDA_ERROR_INVALID_HANDLE); /* a stream */
    ck_assert_int_eq(cuStreamDestroy((CUstream)e), CUDA_ERROR_INVALID_HANDLE); /* an event */
    work_on(s, e); /* both still fine */
    TU_OK(cuStreamDestroy(s));
    ck_assert_int_eq(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE); /* pooled: not destroyed */
    TU_OK(cuEventDestroy(e));
    ck_assert_int_eq(cuEventDestroy(e), CUDA_ERROR_INVALID_HANDLE);
    CUstream again;
    CUevent e2;
    TU_OK(cuStreamCreate(&again, CU_STREAM_NON_BLOCKING));
    TU_OK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    ck_assert_ptr_eq(again, s); /* the pooled stream, alive */
    work_on(again, e2);
    TU_OK(cuStreamDestroy(again));
    TU_OK(cuEventDestroy(e2));
}
END_TEST

START_TEST(runtime_calls_get_pooled_handles)
{
    for (int i = 0; i < 500; i++) {
        cudaStream_t a, b, c;
        cudaEvent_t x, y;
        ck_assert_int_eq(cudaStreamCreate(&a), cudaSuccess);
        ck_assert_int_eq(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
        ck_assert_int_eq(cudaStreamCreateWithPriority(&c, cudaStreamNonBlocking, 0), cudaSuccess);
        ck_assert_int_eq(cudaEventCreate(&x), cudaSuccess);
        ck_assert_int_eq(cudaEventCreateWithFlags(&y, cudaEventDisableTiming), cudaSuccess);
        if (i == 0) {
            ck_assert_uint_eq(stream_flags(a), CU_STREAM_DEFAULT);
            ck_assert_uint_eq(stream_flags(b), CU_STREAM_NON_BLOCKING);
            work_on(b, y);
        }
        ck_assert_int_eq(cudaEventDestroy(y), cudaSuccess);
        ck_assert_int_eq(cudaEventDestroy(x), cudaSuccess);
        ck_assert_int_eq(cudaStreamDestroy(c), cudaSuccess);
        ck_assert_int_eq(cudaStreamDestroy(b), cudaSuccess);
        ck_assert_int_eq(cudaStreamDestroy(a), cudaSuccess);
    }
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_DEFAULT).creates, 1);
    cupool_class_stats_t nb = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(nb.acquires, 1000);
    ck_assert_uint_le(nb.creates, 2); /* b and c are out at once */
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_EVENT, CU_EVENT_DEFAULT).creates, 1);
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_EVENT, CU_EVENT_DISABLE_TIMING).acquires, 500);
}
END_TEST

START_TEST(runtime_errors_are_the_runtimes)
{
    cudaStream_t s;
    ck_assert_int_eq(cudaStreamCreate(NULL), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaStreamCreateWithFlags(&s, 0x40), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaEventCreateWithFlags(NULL, 0), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaStreamCreate(&s), cudaSuccess);
    ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
    ck_assert_int_eq(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
    ck_assert_int_eq(cudaStreamDestroy(raw_stream()), cudaSuccess); /* foreign: the driver's */
    ck_assert_int_eq(cudaEventDestroy(raw_event()), cudaSuccess);
    /* the mapping: the runtime numbers as the driver where both have the error */
    ck_assert_int_eq(cupool_runtime_error(CUDA_SUCCESS), cudaSuccess);
    ck_assert_int_eq(cupool_runtime_error(CUDA_ERROR_INVALID_CONTEXT),
                     cudaErrorDeviceUninitialized);
    ck_assert_int_eq(cupool_runtime_error(CUDA_ERROR_OUT_OF_MEMORY), cudaErrorMemoryAllocation);
    ck_assert_int_eq(cupool_runtime_error(CUDA_ERROR_DEINITIALIZED), cudaErrorCudartUnloading);
    ck_assert_int_eq(cupool_runtime_error(CUDA_ERROR_ILLEGAL_ADDRESS), cudaErrorIllegalAddress);
    ck_assert_int_eq(cupool_runtime_error(CUDA_ERROR_NOT_PERMITTED), cudaErrorNotPermitted);
    ck_assert_int_eq(cupool_runtime_error(CUDA_ERROR_CONTEXT_ALREADY_CURRENT), cudaErrorUnknown);
    ck_assert_int_eq(cupool_runtime_error((CUresult)12345), cudaErrorUnknown);
}
END_TEST

/* With no current context, a runtime wrapper makes device 0's primary context current, as
 * the runtime's first call does. */
static void *contextless(void *arg)
{
    (void)arg;
    CUcontext before = (CUcontext)1, after = NULL;
    cudaStream_t s = NULL;
    cudaError_t r = cudaErrorUnknown;
    if (tu.cuCtxGetCurrent(&before) == CUDA_SUCCESS && before == NULL) {
        r = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        tu.cuCtxGetCurrent(&after);
    }
    intptr_t ok = r == cudaSuccess && after == tu_ctx && s && cudaStreamDestroy(s) == cudaSuccess;
    return (void *)ok;
}

START_TEST(runtime_call_without_a_context)
{
    pthread_t t;
    void *ok = NULL;
    ck_assert_int_eq(pthread_create(&t, NULL, contextless, NULL), 0);
    pthread_join(t, &ok);
    ck_assert_msg(ok != NULL, "the wrapper did not make device 0's primary context current");
    /* the driver's wrapper, like the driver, wants a context */
    TU_OK(tu.cuCtxSetCurrent(NULL));
    CUstream s = NULL;
    ck_assert_int_eq(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
}
END_TEST

START_TEST(disabled_is_the_driver)
{
    setenv("CUPOOL_DISABLE", "1", 1);
    tu_setup();
    int before = tu_fake.present ? tu_fake.live_streams() : 0;
    for (int i = 0; i < 10; i++) {
        CUstream s;
        cudaEvent_t e;
        TU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        ck_assert_int_eq(cudaEventCreate(&e), cudaSuccess);
        if (tu_fake.present)
            ck_assert_int_eq(tu_fake.live_streams(), before + 1);
        TU_OK(cuStreamDestroy(s));
        ck_assert_int_eq(cudaEventDestroy(e), cudaSuccess);
        if (tu_fake.present)
            ck_assert_int_eq(tu_fake.live_streams(), before); /* destroyed, not pooled */
    }
    CUstream s = raw_stream();
    TU_OK(cuStreamDestroy(s));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dropin");
    TCase *tc = tcase_create("dropin");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, driver_calls_get_pooled_handles);
    tcase_add_test(tc, priority_and_flags_as_the_driver);
    tcase_add_test(tc, foreign_handles_go_to_the_driver);
    tcase_add_test(tc, double_and_crossed_destroys_are_refused);
    tcase_add_test(tc, runtime_calls_get_pooled_handles);
    tcase_add_test(tc, runtime_errors_are_the_runtimes);
    tcase_add_test(tc, runtime_call_without_a_context);
    suite_add_tcase(s, tc);
    TCase *env = tcase_create("environment");
    tcase_add_test(env, disabled_is_the_driver);
    suite_add_tcase(s, env);
    return tu_run(s);
}
