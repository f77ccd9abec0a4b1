/* SPDX-License-Identifier: MIT */
/*
 * The driver-fault sweep (simulated driver only). For every driver entry point cupool calls
 * (the pools, the graph cache, the eager pipeline path, the runtime wrappers) and every error
 * that entry point is documented to return, fail its 1st, 2nd or 4th call during a workload
 * that exercises the whole API, then clear the fault and check:
 *  - every public call returned either success or an error code, and nothing crashed;
 *  - every entry point's first call was reached (the sweep covers what it claims to);
 *  - no handle leaked: the driver's live streams and events are exactly cupool's, and once
 *    trimmed, no graph or graph exec of cupool's is left in the driver;
 *  - the pools and the graph cache work again: the same workload succeeds end to end, with
 *    every pipeline's result checked;
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

#include "common/testutil.h"
#include "cupool_runtime.h"

enum { POOLS = 0, LOAD = 1, GRAPH = 2, EAGER = 3 };
struct fault_case {
    const char *entry;
    CUresult errors[6]; /* 0-terminated */
    int kind; /* POOLS, LOAD (fails cupool_init), GRAPH, EAGER (CUPOOL_GRAPH_DISABLE=1) */
};

#define E_DI CUDA_ERROR_DEINITIALIZED
#define E_NI CUDA_ERROR_NOT_INITIALIZED
#define E_CTX CUDA_ERROR_INVALID_CONTEXT
#define E_VAL CUDA_ERROR_INVALID_VALUE
#define E_HDL CUDA_ERROR_INVALID_HANDLE
#define E_OOM CUDA_ERROR_OUT_OF_MEMORY

/* Errors from the CUDA driver API reference for each entry point (CUDA 13.0). */
static const struct fault_case cases[] = {
    {"cuGetProcAddress", {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED}, LOAD},
    {"cuDriverGetVersion", {CUDA_ERROR_INVALID_VALUE}, 1},
    {"cuInit",
     {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
      CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUDA_ERROR_OUT_OF_MEMORY},
     LOAD},
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
    /* the runtime wrappers, with no context current */
    {"cuDeviceGet", {E_DI, E_NI, E_VAL, CUDA_ERROR_INVALID_DEVICE}, POOLS},
    {"cuDevicePrimaryCtxRetain", {E_DI, E_NI, CUDA_ERROR_INVALID_DEVICE, E_OOM}, POOLS},
    /* the graph cache */
    {"cuFuncGetParamInfo", {E_DI, E_NI, E_CTX, E_VAL, E_HDL}, GRAPH},
    {"cuGraphCreate", {E_DI, E_NI, E_CTX, E_VAL, E_OOM}, GRAPH},
    {"cuGraphDestroy", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphAddKernelNode", {E_DI, E_NI, E_CTX, E_VAL}, GRAPH},
    {"cuGraphAddMemsetNode", {E_DI, E_NI, E_CTX, E_VAL}, GRAPH},
    {"cuGraphAddMemcpyNode", {E_DI, E_NI, E_CTX, E_VAL}, GRAPH},
    {"cuGraphAddHostNode", {E_DI, E_NI, E_CTX, E_VAL}, GRAPH},
    {"cuGraphAddEventRecordNode", {E_DI, E_NI, E_CTX, E_VAL}, GRAPH},
    {"cuGraphAddEventWaitNode", {E_DI, E_NI, E_CTX, E_VAL}, GRAPH},
    {"cuGraphInstantiateWithParams", {E_DI, E_NI, E_VAL, E_OOM}, GRAPH},
    {"cuGraphLaunch", {E_DI, E_NI, E_CTX, E_HDL, E_VAL}, GRAPH},
    {"cuGraphClone", {E_DI, E_NI, E_VAL, E_OOM}, GRAPH},
    {"cuGraphNodeFindInClone", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecDestroy", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecKernelNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecMemsetNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecMemcpyNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecHostNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecEventRecordNodeSetEvent", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecEventWaitNodeSetEvent", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphExecUpdate", {E_DI, E_NI, E_VAL, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE}, GRAPH},
    {"cuGraphDebugDotPrint", {E_DI, E_VAL, CUDA_ERROR_OPERATING_SYSTEM}, GRAPH},
    {"cuStreamBeginCapture", {E_DI, E_NI, E_VAL, CUDA_ERROR_ILLEGAL_STATE}, GRAPH},
    {"cuStreamEndCapture", {E_DI, E_NI, E_VAL, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED}, GRAPH},
    {"cuEventRecord", {E_DI, E_NI, E_CTX, E_HDL}, GRAPH},
    {"cuEventQuery", {E_DI, E_NI, E_HDL}, GRAPH},
    {"cuGraphGetNodes", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphKernelNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphMemsetNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphMemcpyNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphHostNodeSetParams", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphEventRecordNodeSetEvent", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphEventWaitNodeSetEvent", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphNodeGetType", {E_DI, E_NI, E_VAL}, GRAPH},
    {"cuGraphKernelNodeGetAttribute", {E_DI, E_NI, E_VAL, E_HDL}, GRAPH},
    {"cuGraphKernelNodeSetAttribute", {E_DI, E_NI, E_VAL, E_HDL}, GRAPH},
    {"cuGraphAddDependencies", {E_DI, E_NI, E_VAL}, GRAPH},
    /* the eager path (CUPOOL_GRAPH_DISABLE=1) */
    {"cuLaunchKernel", {E_DI, E_NI, E_CTX, E_HDL, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES}, EAGER},
    {"cuLaunchKernelEx", {E_DI, E_NI, E_CTX, E_HDL, E_VAL}, EAGER},
    {"cuMemsetD32Async", {E_DI, E_NI, E_CTX, E_VAL}, EAGER},
    {"cuMemsetD8Async", {E_DI, E_NI, E_CTX, E_VAL}, EAGER},
    {"cuMemcpyAsync", {E_DI, E_NI, E_CTX, E_VAL}, EAGER},
    {"cuStreamWaitEvent", {E_DI, E_NI, E_CTX, E_HDL}, EAGER},
    {"cuLaunchHostFunc", {E_DI, E_NI, E_CTX, E_HDL, CUDA_ERROR_NOT_SUPPORTED}, EAGER},
    {"cuEventRecord", {E_DI, E_NI, E_CTX, E_HDL}, EAGER},
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
    int (*live_graphs)(void);
    int (*live_execs)(void);
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
    *(void **)&fk.live_graphs = dlsym(h, "fakecuda_live_graphs");
    *(void **)&fk.live_execs = dlsym(h, "fakecuda_live_execs");
    ck_assert_msg(fk.fault && fk.live_events, "%s is not the simulated driver", path);
}

static CUcontext ctx2; /* a second context, never current during the workload */
static int workload(int strict);

/* A workload step: counts a failure in the caller's `failed`; with `strict`, fails the test.
 * Every failure must be a code the driver reference lists. */
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
    return failed;
}

/* ---- the graph cache and the eager path ---- */

/* The test's own driver call, retried while an injected fault (one call) hits it; it must
 * succeed in a strict round (in another, a fault may have left cupool's stream capturing,
 * when the driver "died" before cupool could end the capture). */
#define OWN(strict, call)                                                                   \
    do {                                                                                    \
        CUresult own_r_ = CUDA_ERROR_UNKNOWN;                                               \
        for (int own_i_ = 0; own_i_ < 3 && own_r_ != CUDA_SUCCESS; own_i_++)                \
            own_r_ = (call);                                                                \
        if (strict)                                                                         \
            TU_OK(own_r_);                                                                  \
    } while (0)

static struct tu_kernels gk;
static CUdeviceptr gmem; /* [0] counter, [1], [2] memset targets, [3] memcpy target, [4]
                          * bytes memset, [5] set by a kernel with launch attributes */
static unsigned host_runs[2];
static int graphs_used;

static void CUDA_CB host_count(void *user)
{
    (*(unsigned *)user)++;
}

static CUresult capture_set(CUstream s, void *user)
{
    unsigned v = *(unsigned *)user;
    void *args[] = {&gmem, &v};
    return tu.cuLaunchKernel(gk.set_u32, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

/*
 * Pipelines of every node kind (kernel, memset, memcpy, event record and wait, host, an
 * explicit dependency, a kernel with launch attributes whose dependency on a kernel is a
 * programmatic edge) launched on three streams with CUPOOL_GRAPH_EXECS_MAX=3, then with
 * changed parameters on those (updates of every node kind) and on a fourth stream (past the
 * limit: an exec instantiated for that launch from a clone given its parameters; launches
 * record completion events and share execs from then on), a DOT print, captures replayed
 * and updated, and a change of structure. strict: every call must succeed and every result
 * is checked. Returns the failed calls.
 */
static int graph_workload(int strict, unsigned salt)
{
    int failed = 0;
    CUstream s[4] = {0};
    CUevent ev[2] = {0};
    cupool_pipeline_t p = NULL;
    for (int i = 0; i < 4; i++)
        STEP(cupool_stream_acquire(&s[i], CU_STREAM_NON_BLOCKING, 0));
    for (int i = 0; i < 2; i++)
        STEP(cupool_event_acquire(&ev[i], CU_EVENT_DISABLE_TIMING));
    STEP(cupool_pipeline_create(&p));
    unsigned runs_before = host_runs[0] + host_runs[1];
    unsigned expect_runs = 0;
    for (int round = 0; p && round < 3; round++) {
        unsigned v = salt * 16 + (unsigned)round, w = v + 1;
        CUdeviceptr set_dst = gmem + 4 * (1 + (unsigned)round % 2);
        STEP(cupool_pipeline_reset(p));
        cupool_node_t n0 = 0, n1 = 0;
        STEP(cupool_pipeline_kernel(p, gk.set_u32, 1, 1, 1, 1, 1, 1, 0,
                                     (void *[]){&gmem, &v}, &n0));
        STEP(cupool_pipeline_memset(p, set_dst, w, 4, 1, &n1));
        STEP(cupool_pipeline_memcpy(p, gmem + 12, set_dst, 4, NULL));
        STEP(cupool_pipeline_memset(p, gmem + 16, w & 0xff, 1, 4, NULL)); /* bytes */
        STEP(cupool_pipeline_event_record(p, ev[round % 2], NULL));
        STEP(cupool_pipeline_event_wait(p, ev[(round + 1) % 2], NULL));
        STEP(cupool_pipeline_host(p, host_count, &host_runs[round % 2], NULL));
        cupool_node_t last = 0;
        STEP(cupool_pipeline_kernel(p, gk.add_u32, 1, 1, 1, 1, 1, 1, 0,
                                     (void *[]){&gmem, &w}, &last));
        STEP(cupool_pipeline_depend(p, last, (cupool_node_t[]){n0, n1}, 2));
        /* launch attributes: a node attribute, and a programmatic edge from `last` */
        CUlaunchAttribute la[2];
        memset(la, 0, sizeof(la));
        la[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        la[0].value.clusterDim.x = la[0].value.clusterDim.y = la[0].value.clusterDim.z = 1;
        la[1].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        la[1].value.programmaticStreamSerializationAllowed = 1;
        STEP(cupool_pipeline_kernel_ex(p, gk.set_u32, 1, 1, 1, 1, 1, 1, 0,
                                       (void *[]){&(CUdeviceptr){gmem + 20}, &w}, la, 2, NULL));
        if (round == 2) /* another structure: one node more */
            STEP(cupool_pipeline_kernel(p, gk.addone, 1, 1, 1, 1, 1, 1, 0,
                                         (void *[]){&gmem}, NULL));
        for (int i = 0; i < (round ? 4 : 3); i++) {
            CUresult r = s[i] ? cupool_pipeline_launch(p, s[i]) : CUDA_ERROR_INVALID_HANDLE;
            STEP(r);
            if (r == CUDA_SUCCESS)
                expect_runs++;
            if (s[i])
                OWN(strict, tu.cuStreamSynchronize(s[i]));
            if (strict && r == CUDA_SUCCESS) {
                unsigned out[6] = {0};
                TU_OK(tu.cuMemcpyDtoH(out, gmem, sizeof(out)));
                ck_assert_uint_eq(out[0], v + w + (round == 2));
                ck_assert_uint_eq(out[3], w);
                ck_assert_uint_eq(out[5], w);
            }
        }
        if (round == 0 && graphs_used)
            STEP(cupool_pipeline_dot(p, "/dev/null"));
    }
    if (strict && graphs_used)
        ck_assert_uint_eq(host_runs[0] + host_runs[1] - runs_before, expect_runs);
    unsigned cv = salt;
    for (int k = 0; k < 3 && s[0]; k++) {
        cv = salt + (unsigned)k;
        STEP(cupool_capture_launch(7, s[0], capture_set, &cv,
                                    k ? CUPOOL_CAPTURE_UPDATE : CUPOOL_CAPTURE_REPLAY));
        OWN(strict, tu.cuStreamSynchronize(s[0]));
        if (strict) {
            unsigned out = 0;
            TU_OK(tu.cuMemcpyDtoH(&out, gmem, 4));
            ck_assert_uint_eq(out, graphs_used ? cv : out); /* eager: no capture cache */
        }
    }
    if (p)
        STEP(cupool_pipeline_destroy(p));
    for (int i = 0; i < 2; i++)
        if (ev[i])
            STEP(cupool_event_release(ev[i]));
    for (int i = 0; i < 4; i++)
        if (s[i])
            STEP(cupool_stream_release(s[i]));
    return failed;
}

/* The runtime wrappers with no context current: they make device 0's primary context
 * current, as the runtime would (cuDeviceGet, cuDevicePrimaryCtxRetain, cuCtxSetCurrent). */

static int runtime_workload(int strict)
{
    CUcontext cur = NULL;
    OWN(strict, tu.cuCtxGetCurrent(&cur));
    OWN(strict, tu.cuCtxSetCurrent(NULL));
    cudaStream_t rs = NULL;
    cudaError_t e = cupool_cudaStreamCreate(&rs);
    int failed = e != cudaSuccess;
    ck_assert_msg(!strict || !failed, "cupool_cudaStreamCreate returned %d: %s", (int)e,
                  cupool_error_string());
    if (!failed) {
        e = cupool_cudaStreamDestroy(rs);
        ck_assert_msg(!strict || e == cudaSuccess, "cupool_cudaStreamDestroy returned %d", e);
        failed += e != cudaSuccess;
    }
    OWN(strict, tu.cuCtxSetCurrent(cur));
    return failed;
}

/* Everything, ending with the pools' workload, whose trim also drops every cached graph. */
static int all_workloads(int strict, unsigned salt)
{
    int failed = runtime_workload(strict) + graph_workload(strict, salt);
    return failed + workload(strict);
}

static void live_totals(int64_t *streams, int64_t *events, int64_t *dropped)
{
    cupool_class_stats_t st[64] = {CUPOOL_CLASS_STATS_INIT};
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
    /* the workload ends with a trim: nothing of the graph cache is left in the driver */
    ck_assert_msg(fk.live_graphs() == 0 && fk.live_execs() == 0,
                  "%s: the driver holds %d graphs and %d execs after trim", when,
                  fk.live_graphs(), fk.live_execs());
}

/* tu_setup() with the sweep's configuration: three execs per cached signature (a fourth
 * stream goes past the limit), the eager path for its entry points; kernels loaded, device
 * memory for the pipelines' results. */
static void sweep_setup(const struct fault_case *fc)
{
    setenv("CUPOOL_GRAPH_EXECS_MAX", "3", 1);
    /* every driver call on the workload's own thread, so that the n-th call of an entry is
     * the same one in every run (the maintenance thread's faults: check_maint) */
    setenv("CUPOOL_BACKGROUND", "0", 1);
    if (fc->kind == EAGER)
        setenv("CUPOOL_GRAPH_DISABLE", "1", 1);
    graphs_used = fc->kind != EAGER;
    tu_setup();
    tu_load_kernels(&gk);
    TU_OK(tu.cuMemAlloc(&gmem, 32));
    TU_OK(tu.cuCtxCreate(&ctx2, 0, tu_dev));
    CUcontext popped;
    TU_OK(tu.cuCtxPopCurrent(&popped));
}

START_TEST(fault_sweep)
{
    const struct combo *c = &combos[_i];
    printf("case %d: %s fails its call %lu with %s\n", _i, c->fc->entry, c->skip + 1,
           cupool_result_name(c->err));
    fflush(stdout);
    fk.fault_clear();
    if (c->fc->kind == LOAD) {
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
        sweep_setup(c->fc);
        all_workloads(1, 1);
        check_no_handle_leak("after a failed initialisation");
        return;
    }

    sweep_setup(c->fc);
    all_workloads(1, 1); /* warm: every class, layout and cached graph exists once */
    check_no_handle_leak("before any fault");
    size_t bytes[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        unsigned long before = fk.calls(c->fc->entry);
        fk.fault(c->fc->entry, c->skip, 1, c->err);
        all_workloads(0, 2 + (unsigned)round);
        unsigned long calls = fk.calls(c->fc->entry) - before;
        int fired = calls > c->skip;
        fk.fault_clear();
        /* the workload reaches every entry point the sweep names */
        ck_assert_msg(calls > 0, "the workload never called %s", c->fc->entry);
        (void)fired;
        /* (the fault may have hit one of the test's own calls instead of cupool's) */
        if (c->err == CUDA_ERROR_DEINITIALIZED && cupool_init() == CUDA_ERROR_DEINITIALIZED) {
            /* Dead for good: prompt errors, no driver call, releases are no-ops. */
            unsigned long total = fk.calls_total();
            CUstream s;
            CUevent e;
            cupool_pipeline_t p;
            TU_EQ(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_DEINITIALIZED);
            TU_EQ(cupool_event_acquire(&e, 0), CUDA_ERROR_DEINITIALIZED);
            TU_EQ(cupool_trim(), CUDA_ERROR_DEINITIALIZED);
            TU_EQ(cupool_pipeline_create(&p), CUDA_ERROR_DEINITIALIZED);
            TU_EQ(cupool_stream_release((CUstream)&s), CUDA_SUCCESS);
            ck_assert_msg(fk.calls_total() == total, "the dead library called the driver");
            return;
        }
        /* The pools and the graph cache work again, end to end, and nothing leaked. */
        all_workloads(1, 10 + (unsigned)round);
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
