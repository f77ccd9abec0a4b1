/* SPDX-License-Identifier: MIT */
/*
 * The driver-fault sweep (simulated driver only). For every driver entry point cupool calls
 * and every error that entry point is documented to return, fail its 1st, 2nd or 4th call
 * during a workload that exercises the whole API, then clear the fault and check:
 *  - every public call returned either success or an error code, and nothing crashed;
 *  - no handle leaked: the driver's live streams and events are exactly cupool's (plus, for a
 *    driver verdict that a context is gone, the handles cupool then forgot: those die with
 *    the context on a real driver);
 *  - the pools work again: the same workload succeeds end to end;
 *  - no byte leaked: cupool's metadata does not grow over a second fault-and-recover round.
 * CUDA_ERROR_DEINITIALIZED instead moves cupool to its dead state for good: every later call
 * fails promptly without calling the driver, and releases succeed as no-ops.
 * Sticky context errors (illegal address and kin) are not injected here: they break a whole
 * context, which check_api's poisoned-context tests reproduce faithfully.
 * Load-time entry points (cuGetProcAddress, cuDriverGetVersion, cuInit) fail cupool_init(),
 * which a later call retries once the fault clears.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

struct fault_case {
    const char *entry;
    CUresult errors[6]; /* 0-terminated */
    int load_time;
};

/* Errors from the CUDA driver API reference for each entry point (CUDA 13.0). */
static const struct fault_case cases[] = {
    {"cuGetProcAddress", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED}, 1},
    {"cuDriverGetVersion", {CUDA_ERROR_INVALID_VALUE}, 1},
    {"cuInit",
     {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
      CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUDA_ERROR_OUT_OF_MEMORY},
     1},
    {"cuCtxGetCurrent", {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED}, 0},
    {"cuCtxSetCurrent",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT}, 0},
    {"cuCtxPushCurrent",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT,
      CUDA_ERROR_INVALID_VALUE},
     0},
    {"cuCtxPopCurrent",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT}, 0},
    {"cuCtxGetId",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_CONTEXT_IS_DESTROYED,
      CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE},
     0},
    {"cuCtxGetStreamPriorityRange",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT,
      CUDA_ERROR_INVALID_VALUE},
     0},
    {"cuStreamCreateWithPriority",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT,
      CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY},
     0},
    {"cuStreamDestroy",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT,
      CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE},
     0},
    {"cuStreamIsCapturing",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_VALUE,
      CUDA_ERROR_STREAM_CAPTURE_IMPLICIT},
     0},
    {"cuEventCreate",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT,
      CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY},
     0},
    {"cuEventDestroy",
     {CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT,
      CUDA_ERROR_INVALID_HANDLE},
     0},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))
static const unsigned long skips[] = {0, 1, 3}; /* fail the 1st, 2nd or 4th call */
#define NSKIPS (sizeof(skips) / sizeof(skips[0]))

/* Every (entry, error, skip) combination, numbered for the loop test. */
struct combo {
    const struct fault_case *fc;
    CUresult err;
    unsigned long skip;
};
static struct combo combos[NCASES * 6 * NSKIPS];
static int ncombos;

static void build_combos(void)
{
    for (size_t i = 0; i < NCASES; i++)
        for (int e = 0; cases[i].errors[e]; e++)
            for (size_t k = 0; k < NSKIPS; k++)
                combos[ncombos++] = (struct combo){&cases[i], cases[i].errors[e], skips[k]};
}

/* The simulated driver's controls, reached before cupool loads it (for load-time faults). */
static struct {
    void (*fault)(const char *, unsigned long, long, CUresult);
    void (*fault_clear)(void);
    unsigned long (*calls)(const char *);
    unsigned long (*calls_total)(void);
    int (*live_streams)(void);
    int (*live_events)(void);
} fk;

static void fake_open(void)
{
    const char *path = getenv("CUPOOL_DRIVER_PATH");
    ck_assert_msg(path, "the fault sweep needs the simulated driver (CUPOOL_DRIVER_PATH)");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h, "dlopen(%s): %s", path, dlerror());
    *(void **)&fk.fault = dlsym(h, "fakecuda_fault");
    *(void **)&fk.fault_clear = dlsym(h, "fakecuda_fault_clear");
    *(void **)&fk.calls = dlsym(h, "fakecuda_calls");
    *(void **)&fk.calls_total = dlsym(h, "fakecuda_calls_total");
    *(void **)&fk.live_streams = dlsym(h, "fakecuda_live_streams");
    *(void **)&fk.live_events = dlsym(h, "fakecuda_live_events");
    ck_assert_msg(fk.fault && fk.live_events, "%s is not the simulated driver", path);
}

static CUcontext ctx2; /* a second context, never current during the workload */

/*
 * Uses every public entry point that reaches the driver: both APIs, three stream classes
 * (each lookup of a stream class asks for the priority range), explicit pools in the current
 * and in another context (push/pop around creation), reuse of unchecked streams (the capture
 * check), trim (destroy). strict: every call must succeed. Otherwise failures are allowed,
 * but each must be a known error code. Returns the number of failed calls.
 */
static int workload(int strict)
{
    int failed = 0;
#define STEP(call)                                                                          \
    do {                                                                                    \
        CUresult r_ = (call);                                                               \
        if (r_ != CUDA_SUCCESS) {                                                           \
            failed++;                                                                       \
            ck_assert_msg(!strict, "%s returned %s: %s", #call, cupool_result_name(r_),     \
                          cupool_error_string());                                           \
            ck_assert_msg(strcmp(cupool_result_name(r_), "CUDA_ERROR_UNKNOWN_CODE") != 0,   \
                          "%s returned an unknown code %d", #call, (int)r_);                \
        }                                                                                   \
    } while (0)
    CUstream s[6] = {0};
    CUevent e[4] = {0};
    cupool_stream_pool_t sp = NULL, sp2 = NULL;
    cupool_event_pool_t ep = NULL;
    STEP(cupool_stream_pool_get(&sp, NULL, CU_STREAM_NON_BLOCKING, 0));
    STEP(cupool_stream_pool_get(&sp2, ctx2, 0, -1));
    STEP(cupool_event_pool_get(&ep, NULL, CU_EVENT_DISABLE_TIMING));
    for (int rep = 0; rep < 2; rep++) {
        STEP(cupool_stream_acquire(&s[0], CU_STREAM_NON_BLOCKING, 0));
        STEP(cupool_stream_acquire(&s[1], CU_STREAM_NON_BLOCKING, 0));
        STEP(cupool_stream_acquire(&s[2], 0, -1));
        if (sp)
            STEP(cupool_stream_pool_acquire(sp, &s[3]));
        if (sp2)
            STEP(cupool_stream_pool_acquire(sp2, &s[4]));
        if (sp2)
            STEP(cupool_stream_pool_acquire(sp2, &s[5]));
        STEP(cupool_event_acquire(&e[0], CU_EVENT_DISABLE_TIMING));
        STEP(cupool_event_acquire(&e[1], 0));
        if (ep)
            STEP(cupool_event_pool_acquire(ep, &e[2]));
        for (int i = 0; i < 3; i++)
            if (s[i])
                STEP(cupool_stream_release(s[i]));
        if (s[3])
            STEP(cupool_stream_pool_release(sp, s[3], 0));
        if (s[4])
            STEP(cupool_stream_pool_release(sp2, s[4], 0));
        if (s[5])
            STEP(cupool_stream_pool_release(sp2, s[5], CUPOOL_RELEASE_NOT_CAPTURING));
        for (int i = 0; i < 2; i++)
            if (e[i])
                STEP(cupool_event_release(e[i]));
        if (e[2])
            STEP(cupool_event_pool_release(ep, e[2]));
        memset(s, 0, sizeof(s));
        memset(e, 0, sizeof(e));
    }
    STEP(cupool_trim());
#undef STEP
    return failed;
}

static void live_totals(int64_t *streams, int64_t *events, int64_t *dropped)
{
    cupool_class_stats_t st[64];
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 64, &n));
    ck_assert(n <= 64);
    *streams = *events = *dropped = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t live = (int64_t)(st[i].idle + st[i].in_use);
        if (st[i].kind == CUPOOL_KIND_STREAM)
            *streams += live;
        else
            *events += live;
        *dropped += (int64_t)st[i].dropped;
    }
}

/* The driver's live handles are exactly cupool's: a single failed call never makes cupool
 * forget a handle the driver still holds (a context is declared gone only when the driver
 * repeats its verdict, which a one-shot fault does not). */
static void check_no_handle_leak(const char *when)
{
    int64_t streams, events, dropped;
    live_totals(&streams, &events, &dropped);
    ck_assert_msg(fk.live_streams() == streams && fk.live_events() == events,
                  "%s: cupool counts %lld streams / %lld events alive, the driver %d / %d "
                  "(cupool forgot %lld)",
                  when, (long long)streams, (long long)events, fk.live_streams(),
                  fk.live_events(), (long long)dropped);
}

START_TEST(fault_sweep)
{
    const struct combo *c = &combos[_i];
    fk.fault_clear();
    if (c->fc->load_time) {
        /* Fail initialisation, then see the next call retry it. */
        fk.fault(c->fc->entry, c->skip, 1, c->err);
        CUresult r = cupool_init();
        unsigned long calls = fk.calls(c->fc->entry);
        fk.fault_clear();
        if (calls > c->skip) {
            ck_assert_msg(r != CUDA_SUCCESS, "%s failing with %s: cupool_init succeeded",
                          c->fc->entry, cupool_result_name(c->err));
            ck_assert_msg(strlen(cupool_error_string()) > 10, "no message");
        }
        int permanent = c->err == CUDA_ERROR_NOT_SUPPORTED ||
                        c->err == CUDA_ERROR_INVALID_DEVICE ||
                        c->err == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ||
                        c->err == CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE;
        if (calls > c->skip && permanent) {
            /* a driver that says it cannot work is believed: no retry */
            ck_assert_int_eq(cupool_init(), r);
            return;
        }
        tu_setup();
        TU_OK(tu.cuCtxCreate(&ctx2, 0, tu_dev));
        CUcontext popped;
        TU_OK(tu.cuCtxPopCurrent(&popped));
        workload(1);
        check_no_handle_leak("after a failed initialisation");
        return;
    }

    tu_setup();
    TU_OK(tu.cuCtxCreate(&ctx2, 0, tu_dev));
    CUcontext popped;
    TU_OK(tu.cuCtxPopCurrent(&popped));
    workload(1); /* warm: every class exists */
    check_no_handle_leak("before any fault");
    size_t bytes[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        unsigned long before = fk.calls(c->fc->entry);
        fk.fault(c->fc->entry, c->skip, 1, c->err);
        workload(0);
        int fired = fk.calls(c->fc->entry) - before > c->skip;
        fk.fault_clear();
        if (fired && c->err == CUDA_ERROR_DEINITIALIZED) {
            /* Dead for good: prompt errors, no driver call, releases are no-ops. */
            unsigned long total = fk.calls_total();
            CUstream s;
            CUevent e;
            TU_EQ(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_DEINITIALIZED);
            TU_EQ(cupool_event_acquire(&e, 0), CUDA_ERROR_DEINITIALIZED);
            TU_EQ(cupool_trim(), CUDA_ERROR_DEINITIALIZED);
            TU_EQ(cupool_stream_release((CUstream)&s), CUDA_SUCCESS);
            ck_assert_msg(fk.calls_total() == total, "the dead library called the driver");
            return;
        }
        /* The pools work again, end to end, and nothing leaked. */
        workload(1);
        check_no_handle_leak("after the fault cleared");
        bytes[round] = cupool_metadata_bytes();
    }
    ck_assert_msg(bytes[1] <= bytes[0], "metadata grew from %zu to %zu bytes between rounds",
                  bytes[0], bytes[1]);
}
END_TEST

static void setup_fake(void)
{
    fake_open();
}

int main(void)
{
    if (tu_real()) {
        printf("SKIP: the fault sweep needs the simulated driver\n");
        return 77;
    }
    build_combos();
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("sweep");
    tcase_add_checked_fixture(tc, setup_fake, NULL);
    tcase_add_loop_test(tc, fault_sweep, 0, ncombos);
    suite_add_tcase(s, tc);
    printf("%d fault cases over %zu entry points\n", ncombos, NCASES);
    return tu_run(s);
}
