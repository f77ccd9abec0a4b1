/* SPDX-License-Identifier: MIT */
/*
 * fakecuda.c: a simulated CUDA driver library (the libcuda.so.1 subset cupool and its tests
 * use), for machines without a GPU.
 *
 * It simulates devices, primary and created contexts, streams, events, modules, kernels and
 * device memory (plain host memory: a CUdeviceptr is a host address). Work queued on a
 * stream is kept in a per-stream FIFO and executed lazily, on the calling thread, when
 * something forces it (a synchronisation, a query whose simulated time has come, a
 * synchronous copy). Kernels are host functions looked up by name in a table. The handle
 * life cycles, error codes and crash points follow what the real driver did on an H200
 * (driver 580, CUDA 13.0); fakecuda.h lists them, with the control API for tests.
 *
 * Locking: one global mutex guards all state. An operation that runs user code (kernel,
 * copy, memset, host function) runs with the mutex released while its queue is marked busy,
 * so host functions may call back into the driver, and a second thread that needs the same
 * queue waits on a condition variable instead of running later work early.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
/*
 * __CUDA_API_VERSION_INTERNAL is how the driver itself compiles cuda.h: no renaming macros
 * are left afterwards, and the legacy and versioned entry points are all declared with their
 * real prototypes, so every definition below is checked against the real signature.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "fakecuda.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>

/* ========================================================================================
 * Limits and magic numbers
 * ======================================================================================== */

#define FC_MAX_DEVICES 8
#define FC_MAX_KERNELS 128      /* builtins + registered kernels */
#define FC_MAX_PARAMS 32        /* kernel parameters */
#define FC_MAX_PARAM_SIZE 4096  /* bytes per kernel parameter */
#define FC_NAME_MAX 64          /* kernel name, including the NUL */
#define FC_CTX_STACK 64         /* per-thread context stack depth */
#define FC_MAX_SLABS 40
#define FC_EVENT_HOLDBACK 1024  /* destroyed events waiting before their memory is reused */
#define FC_DRIVER_VERSION 13000
#define FC_PRIO_LEAST 0
#define FC_PRIO_GREATEST (-5)
#define FC_CTX_DESTROYED_PTR ((CUcontext)(uintptr_t)0x2) /* what the real driver returned */

#define MAGIC_CTX 0x46437478u    /* "FCtx" */
#define MAGIC_STREAM 0x46437374u /* "FCst" */
#define MAGIC_EVENT 0x46436576u  /* "FCev" */
#define MAGIC_MODULE 0x46436d6fu /* "FCmo" */
#define MAGIC_FUNC 0x4643666eu   /* "FCfn" */
#define MAGIC_GRAPH 0x46436772u  /* "FCgr" */

/* handle states: a freed handle keeps its memory (and magic) so later use is detected */
enum { ST_UNUSED = 0, ST_LIVE, ST_DESTROYED, ST_CTX_GONE };

/* ========================================================================================
 * Types
 * ======================================================================================== */

struct fc_hdr {
    uint32_t magic;
    uint32_t state;
    struct fc_hdr *free_next;
};

struct fc_op;
struct fc_ctx;

/* A FIFO of operations. Owned (reference counted) by its stream, then by the context's
 * orphan list once the stream is destroyed, and by events and wait operations pointing at
 * a record in it. */
struct fc_queue {
    struct fc_op *head, *tail;
    unsigned refs;
    int busy;               /* an operation popped from it is running */
    const void *busy_owner; /* the thread running it */
    uint64_t busy_seq;      /* and its sequence number */
    int dead;               /* its context was reset or destroyed */
    uint64_t last_ready;    /* ready_at of the last operation queued */
    struct fc_ctx *ctx;
    struct fc_queue *orphan_next;
};

/* the operations recorded while a stream is captured */
struct fc_node;
/* A graph: its nodes (cuGraphAdd*Node, or a capture's operations once it ends). */
struct fc_graph {
    uint32_t magic;
    struct fc_ctx *ctx;
    struct fc_graph *prev, *next;
    struct fc_op *head, *tail; /* operations recorded while capturing */
    size_t nops;
    struct fc_node *nhead, *ntail;
    size_t nnodes;
    int exec_launched; /* an exec instantiated from it has been launched */
};
struct fc_node {
    uint32_t magic;
    struct fc_graph *g;
    CUgraphNodeType type;
    struct fc_op *tmpl; /* kernel, memset, memcpy, host; NULL for empty, event nodes */
    struct fc_event *ev; /* event record / wait nodes (a reference) */
    size_t index;       /* insertion order in its graph */
    struct fc_node **deps;
    size_t ndeps, cap;
    struct fc_node *next;
    struct fc_node *origin; /* the node it was cloned from (cuGraphClone), never dereferenced */
};

struct fc_exec {
    uint32_t magic;
    struct fc_ctx *ctx;
    struct fc_exec *prev, *next;
    size_t n;
    CUgraphNodeType *type;
    struct fc_op **tmpl;     /* per position, NULL for event and empty nodes */
    struct fc_event **ev;    /* per position, event nodes */
    const void **node;       /* the graph node each position came from (never dereferenced) */
    size_t *dep_index;       /* topology, for cuGraphExecUpdate: flattened dependency indexes */
    size_t *dep_start;       /* n + 1 offsets into dep_index */
    struct fc_queue *last_q; /* the queue of the last launch, and its last operation */
    uint64_t last_seq, last_ready;
    struct fc_graph *src; /* the graph it was instantiated from, while that lives */
    int launched;         /* launched at least once */
};

static CUresult capture_to_nodes(struct fc_graph *g);
static struct fc_graph *graph_new(struct fc_ctx *c);


struct fc_stream {
    struct fc_hdr h;
    struct fc_ctx *ctx;
    struct fc_stream *prev, *next;
    struct fc_queue *q;
    unsigned flags;
    int priority;
    int legacy; /* the context's NULL stream */
    unsigned long long id;
    CUstreamCaptureStatus cap;
    unsigned long long cap_id;
    struct fc_graph *graph;
};

struct fc_event {
    struct fc_hdr h;
    struct fc_ctx *ctx;
    struct fc_event *prev, *next;
    unsigned flags;
    unsigned refs;          /* the handle while live + each queued operation naming it */
    int recorded;           /* recorded at least once (outside a capture) */
    struct fc_queue *rec_q; /* queue holding the latest record while it has not run */
    uint64_t rec_seq;
    uint64_t rec_ready;     /* simulated completion time of the latest record */
    int has_time;
    uint64_t time_seq, time_ns;
};

struct fc_module;
struct fc_function {
    uint32_t magic;
    int slot; /* index in the kernel table */
    struct fc_module *mod;
};

struct fc_module {
    struct fc_hdr h;
    struct fc_ctx *ctx;
    struct fc_module *prev, *next;
    struct fc_function fn[FC_MAX_KERNELS];
};

struct fc_alloc {
    struct fc_alloc *next;
    unsigned char *base;
    size_t size;
};

struct fc_ctx {
    struct fc_hdr h;
    int primary;
    CUdevice dev;
    int active;        /* primary: retained and not reset; created: not destroyed */
    int dying;         /* its resources are being torn down */
    int was_reset;     /* primary: cuDevicePrimaryCtxReset since it was last activated */
    unsigned refcount; /* primary retains (a reset keeps them, as on the real driver) */
    unsigned flags;
    unsigned long long id;
    CUresult sticky;
    struct fc_stream legacy;
    struct fc_stream *streams;
    struct fc_event *events;
    struct fc_module *modules;
    struct fc_alloc *allocs;
    struct fc_queue *orphans;
    struct fc_graph *graphs;
    struct fc_exec *execs;
    struct fc_ctx *all_next;
};

enum op_kind { OP_KERNEL, OP_MEMSET, OP_COPY, OP_RECORD, OP_WAIT, OP_HOSTFN };

struct fc_op {
    struct fc_op *next;
    enum op_kind kind;
    uint64_t seq;
    uint64_t ready_at;
    uint64_t duration;
    union {
        struct {
            fakecuda_kernel_fn fn;
            int slot; /* in the kernel table */
            unsigned grid[3], block[3];
            void *args[FC_MAX_PARAMS];
            unsigned char *blob;
            size_t blob_len;
            /* launch attributes (cuLaunchKernelEx, or a kernel node's): 0 when not set */
            unsigned cluster[3], preferred_cluster[3];
            int cooperative, cluster_policy, mem_sync_domain, priority;
        } k;
        struct {
            unsigned char *dst;
            unsigned value;
            size_t elem, count;
        } set;
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        struct {
            struct fc_event *ev;
        } rec;
        struct {
            struct fc_event *ev;
            struct fc_queue *q; /* queue holding the awaited record, or NULL */
            uint64_t seq;
        } wait;
        struct {
            CUhostFn fn;
            void *data;
        } host;
    } u;
};

struct fc_kernel {
    char name[FC_NAME_MAX];
    int nparams;
    size_t sizes[FC_MAX_PARAMS];
    fakecuda_kernel_fn fn;
};

struct fc_fault {
    int active;
    unsigned long skip;
    long count;
    CUresult err;
};

/* Slab allocator for handles: memory is never returned to malloc, so a stale or garbage
 * pointer can be checked (is it inside a slab, at an element boundary, with our magic?)
 * without touching unmapped memory. Freed elements are reused LIFO (streams, like the real
 * driver) or FIFO after `holdback` others (events, modules). */
struct fc_pool {
    const char *what;
    size_t size;
    uint32_t magic;
    int lifo;
    size_t holdback; /* FIFO only; SIZE_MAX: never reuse */
    char *slab[FC_MAX_SLABS];
    size_t slab_len[FC_MAX_SLABS];
    int nslabs;
    size_t used; /* elements handed out from the last slab */
    struct fc_hdr *free_head, *free_tail;
    size_t nfree;
};

/* ========================================================================================
 * Global state
 * ======================================================================================== */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;

static int g_env_read;
static int g_stub;                              /* FAKECUDA_STUB=1 */
static int g_driver_version = FC_DRIVER_VERSION; /* FAKECUDA_DRIVER_VERSION */
static char g_hidden[512];                      /* FAKECUDA_HIDE, as ",name,name," */
static int g_initialized;
static int g_fork_child;
static int g_torn_down;
static int g_strict;
static int g_handlers_registered;
static int g_ndev;
static struct fc_ctx *g_primary[FC_MAX_DEVICES];
static struct fc_ctx *g_contexts; /* every context ever made */
static unsigned long long g_next_ctx_id = 1;
static unsigned long long g_next_stream_id = 1;
static unsigned long long g_next_capture_id = 1;
static uint64_t g_seq; /* last operation sequence number */
static int g_live_streams, g_live_events;

static struct fc_pool g_ctx_pool = {"context", sizeof(struct fc_ctx), MAGIC_CTX, 0, SIZE_MAX,
                                    {0}, {0}, 0, 0, NULL, NULL, 0};
static struct fc_pool g_stream_pool = {"stream", sizeof(struct fc_stream), MAGIC_STREAM, 1, 0,
                                       {0}, {0}, 0, 0, NULL, NULL, 0};
static struct fc_pool g_event_pool = {"event", sizeof(struct fc_event), MAGIC_EVENT, 0,
                                      FC_EVENT_HOLDBACK, {0}, {0}, 0, 0, NULL, NULL, 0};
static struct fc_pool g_module_pool = {"module", sizeof(struct fc_module), MAGIC_MODULE, 0, 64,
                                       {0}, {0}, 0, 0, NULL, NULL, 0};

/* per thread: the context stack, the entry point being run (for messages), the context
 * whose operation this thread is executing (for the builtin kernels) */
static _Thread_local struct fc_ctx *tl_stack[FC_CTX_STACK];
static _Thread_local int tl_depth;
static _Thread_local const char *tl_entry = "fakecuda";
static _Thread_local struct fc_ctx *tl_exec_ctx;
static _Thread_local unsigned tl_cluster_x; /* cluster width of the kernel running (1: none) */
static _Thread_local char tl_token;

static const void *tl_self(void) { return &tl_token; }
static void lock(void) { pthread_mutex_lock(&g_lock); }
static void unlock(void) { pthread_mutex_unlock(&g_lock); }

/* Prints `fakecuda: <entry>: <what> (the real driver crashes here)` and aborts. */
static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fakecuda: %s: ", tl_entry);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (the real driver crashes here)\n");
    abort();
}

/* ========================================================================================
 * Entry points: names, call counters, fault injection, common prologue
 * ======================================================================================== */

/* The one table of the entry points: X(name, version, fn) is an entry point (its call
 * counter, its fault injection, and its first form for cuGetProcAddress: the CUDA version
 * that introduced it and the function); Y(name, version, fn) is another form of the entry
 * before it (a newer ABI, or another name counted with it) for cuGetProcAddress only. */
#define FC_ENTRIES(X, Y) \
    X(cuInit, 2000, cuInit) \
    X(cuDriverGetVersion, 2020, cuDriverGetVersion) \
    X(cuGetErrorName, 6000, cuGetErrorName) \
    X(cuGetErrorString, 6000, cuGetErrorString) \
    X(cuGetProcAddress, 11030, cuGetProcAddress) \
    Y(cuGetProcAddress, 12000, cuGetProcAddress_v2) \
    X(cuDeviceGet, 2000, cuDeviceGet) \
    X(cuDeviceGetCount, 2000, cuDeviceGetCount) \
    X(cuDeviceGetName, 2000, cuDeviceGetName) \
    X(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute) \
    X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain) \
    X(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease) \
    Y(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2) \
    X(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset) \
    Y(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2) \
    X(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState) \
    X(cuCtxCreate, 3020, cuCtxCreate_v2) \
    Y(cuCtxCreate, 12050, cuCtxCreate_v4) \
    X(cuCtxDestroy, 2000, cuCtxDestroy) \
    Y(cuCtxDestroy, 4000, cuCtxDestroy_v2) \
    X(cuCtxSetCurrent, 4000, cuCtxSetCurrent) \
    X(cuCtxGetCurrent, 4000, cuCtxGetCurrent) \
    X(cuCtxPushCurrent, 2000, cuCtxPushCurrent) \
    Y(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2) \
    X(cuCtxPopCurrent, 2000, cuCtxPopCurrent) \
    Y(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2) \
    X(cuCtxGetId, 12000, cuCtxGetId) \
    X(cuCtxGetDevice, 2000, cuCtxGetDevice) \
    X(cuCtxSynchronize, 2000, cuCtxSynchronize) \
    X(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange) \
    X(cuStreamCreate, 2000, cuStreamCreate) \
    X(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority) \
    X(cuStreamDestroy, 2000, cuStreamDestroy) \
    Y(cuStreamDestroy, 4000, cuStreamDestroy_v2) \
    X(cuStreamQuery, 2000, cuStreamQuery) \
    X(cuStreamSynchronize, 2000, cuStreamSynchronize) \
    X(cuStreamWaitEvent, 2000, cuStreamWaitEvent) \
    X(cuStreamGetFlags, 5050, cuStreamGetFlags) \
    X(cuStreamGetPriority, 5050, cuStreamGetPriority) \
    X(cuStreamGetCtx, 9020, cuStreamGetCtx) \
    X(cuStreamGetId, 12000, cuStreamGetId) \
    X(cuStreamIsCapturing, 10000, cuStreamIsCapturing) \
    X(cuStreamBeginCapture, 10000, cuStreamBeginCapture) \
    Y(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2) \
    X(cuStreamEndCapture, 10000, cuStreamEndCapture) \
    X(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo) \
    Y(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2) \
    Y(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3) \
    X(cuLaunchHostFunc, 10000, cuLaunchHostFunc) \
    X(cuEventCreate, 2000, cuEventCreate) \
    X(cuEventDestroy, 2000, cuEventDestroy) \
    Y(cuEventDestroy, 4000, cuEventDestroy_v2) \
    X(cuEventRecord, 2000, cuEventRecord) \
    X(cuEventQuery, 2000, cuEventQuery) \
    X(cuEventSynchronize, 2000, cuEventSynchronize) \
    X(cuEventElapsedTime, 2000, cuEventElapsedTime) \
    Y(cuEventElapsedTime, 12080, cuEventElapsedTime_v2) \
    X(cuMemAlloc, 3020, cuMemAlloc_v2) \
    X(cuMemFree, 3020, cuMemFree_v2) \
    X(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2) \
    X(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2) \
    X(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2) \
    X(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2) \
    X(cuMemcpyAsync, 4000, cuMemcpyAsync) \
    X(cuMemsetD8, 3020, cuMemsetD8_v2) \
    X(cuMemsetD32, 3020, cuMemsetD32_v2) \
    X(cuMemsetD8Async, 3020, cuMemsetD8Async) \
    X(cuMemsetD32Async, 3020, cuMemsetD32Async) \
    X(cuModuleLoadData, 2000, cuModuleLoadData) \
    X(cuModuleUnload, 2000, cuModuleUnload) \
    X(cuModuleGetFunction, 2000, cuModuleGetFunction) \
    X(cuLaunchKernel, 4000, cuLaunchKernel) \
    X(cuLaunchKernelEx, 11060, cuLaunchKernelEx) \
    X(cuGraphKernelNodeGetAttribute, 11000, cuGraphKernelNodeGetAttribute) \
    X(cuGraphKernelNodeSetParams, 12000, cuGraphKernelNodeSetParams_v2) \
    X(cuGraphMemsetNodeSetParams, 10000, cuGraphMemsetNodeSetParams) \
    X(cuGraphMemcpyNodeSetParams, 10000, cuGraphMemcpyNodeSetParams) \
    X(cuGraphHostNodeSetParams, 10000, cuGraphHostNodeSetParams) \
    X(cuGraphEventRecordNodeSetEvent, 11010, cuGraphEventRecordNodeSetEvent) \
    X(cuGraphEventWaitNodeSetEvent, 11010, cuGraphEventWaitNodeSetEvent) \
    X(cuFuncGetParamInfo, 12040, cuFuncGetParamInfo) \
    X(cuGraphCreate, 10000, cuGraphCreate) \
    X(cuGraphDestroy, 10000, cuGraphDestroy) \
    X(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2) \
    X(cuGraphAddMemsetNode, 10000, cuGraphAddMemsetNode) \
    X(cuGraphAddMemcpyNode, 10000, cuGraphAddMemcpyNode) \
    X(cuGraphAddHostNode, 10000, cuGraphAddHostNode) \
    X(cuGraphAddEmptyNode, 10000, cuGraphAddEmptyNode) \
    X(cuGraphAddEventRecordNode, 11010, cuGraphAddEventRecordNode) \
    X(cuGraphAddEventWaitNode, 11010, cuGraphAddEventWaitNode) \
    X(cuGraphAddDependencies, 10000, cuGraphAddDependencies) \
    Y(cuGraphAddDependencies, 12030, cuGraphAddDependencies_v2) \
    X(cuGraphGetNodes, 10000, cuGraphGetNodes) \
    X(cuGraphNodeGetType, 10000, cuGraphNodeGetType) \
    X(cuGraphInstantiate, 10000, cuGraphInstantiate_v2) \
    Y(cuGraphInstantiate, 11000, cuGraphInstantiate_v2) \
    Y(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags) \
    X(cuGraphExecDestroy, 10000, cuGraphExecDestroy) \
    X(cuGraphLaunch, 10000, cuGraphLaunch) \
    X(cuGraphExecKernelNodeSetParams, 12000, cuGraphExecKernelNodeSetParams_v2) \
    X(cuGraphExecMemsetNodeSetParams, 10020, cuGraphExecMemsetNodeSetParams) \
    X(cuGraphExecMemcpyNodeSetParams, 10020, cuGraphExecMemcpyNodeSetParams) \
    X(cuGraphExecHostNodeSetParams, 10020, cuGraphExecHostNodeSetParams) \
    X(cuGraphExecEventRecordNodeSetEvent, 11010, cuGraphExecEventRecordNodeSetEvent) \
    X(cuGraphExecEventWaitNodeSetEvent, 11010, cuGraphExecEventWaitNodeSetEvent) \
    X(cuGraphExecUpdate, 12000, cuGraphExecUpdate_v2) \
    X(cuGraphDebugDotPrint, 11030, cuGraphDebugDotPrint) \
    X(cuGraphClone, 10000, cuGraphClone) \
    X(cuGraphNodeFindInClone, 10000, cuGraphNodeFindInClone)

#define FC_ENUM(n, v, f) E_##n,
#define FC_NAME(n, v, f) #n,
#define FC_NONE(n, v, f)
enum { FC_ENTRIES(FC_ENUM, FC_NONE) E_COUNT };
static const char *const g_entry_names[E_COUNT] = {FC_ENTRIES(FC_NAME, FC_NONE)};

static unsigned long g_calls[E_COUNT];
static __thread unsigned long tl_calls[E_COUNT]; /* the calling thread's own */
static unsigned long g_calls_total;
static unsigned long g_calls_after_teardown;
static struct fc_fault g_fault[E_COUNT];
static struct fc_fault g_fault_all;

/* Entry index for a base name; "cuStreamDestroy_v2" and "_ptsz"/"_ptds" forms are accepted. */
static int entry_index(const char *name)
{
    static const char *const suffixes[] = {"", "_v2", "_v3", "_v4", "_ptsz", "_ptds"};
    if (!name)
        return -1;
    for (int i = 0; i < E_COUNT; i++) {
        size_t n = strlen(g_entry_names[i]);
        if (strncmp(name, g_entry_names[i], n) != 0)
            continue;
        for (size_t s = 0; s < sizeof suffixes / sizeof suffixes[0]; s++)
            if (strcmp(name + n, suffixes[s]) == 0)
                return i;
    }
    return -1;
}

/* One step of a fault: 1 (and *err) when this call fails. */
static int fault_step(struct fc_fault *f, CUresult *err)
{
    if (!f->active)
        return 0;
    if (f->skip > 0) {
        f->skip--;
        return 0;
    }
    if (f->count == 0) {
        f->active = 0;
        return 0;
    }
    if (f->count > 0 && --f->count == 0)
        f->active = 0;
    *err = f->err;
    return 1;
}

/* The failure modes the environment asks for (read once, at the first call). */
static void read_env(void)
{
    const char *v;
    g_env_read = 1;
    v = getenv("FAKECUDA_STUB");
    g_stub = v && strcmp(v, "1") == 0;
    v = getenv("FAKECUDA_DRIVER_VERSION");
    if (v && *v)
        g_driver_version = atoi(v);
    v = getenv("FAKECUDA_HIDE");
    if (v && *v && strlen(v) + 3 <= sizeof g_hidden) {
        snprintf(g_hidden, sizeof g_hidden, ",%s,", v);
        for (char *p = g_hidden; *p; p++)
            if (*p == ' ' || *p == ':' || *p == ';')
                *p = ',';
    }
}

/* FAKECUDA_HIDE names it: cuGetProcAddress does not find it. */
static int hidden(const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(g_hidden, name); p; p = strstr(p + 1, name))
        if (p > g_hidden && p[-1] == ',' && p[n] == ',')
            return 1;
    return 0;
}

/*
 * Prologue of every entry point: counts the call, then refuses it when acting as a stub
 * library, after teardown, in a forked child or before cuInit (need_init), or by an injected
 * fault. Returns 1 with the global lock held when the call proceeds, else 0 with *early set
 * and the lock released.
 */
static int enter(int e, int need_init, CUresult *early)
{
    lock();
    g_calls[e]++;
    tl_calls[e]++;
    g_calls_total++;
    tl_entry = g_entry_names[e];
    if (!g_env_read)
        read_env();
    if (g_stub) {
        *early = CUDA_ERROR_STUB_LIBRARY; /* what the toolkit's stub libcuda returns */
    } else if (g_torn_down) {
        g_calls_after_teardown++;
        if (g_strict) {
            fprintf(stderr, "fakecuda: %s called after driver teardown\n", g_entry_names[e]);
            abort();
        }
        *early = CUDA_ERROR_DEINITIALIZED;
    } else if (need_init && (g_fork_child || !g_initialized)) {
        *early = CUDA_ERROR_NOT_INITIALIZED;
    } else if (fault_step(&g_fault[e], early) || fault_step(&g_fault_all, early)) {
        /* *early set */
    } else {
        return 1;
    }
    unlock();
    return 0;
}

static CUresult leave(CUresult r)
{
    unlock();
    return r;
}

#define ENTER(name, need_init)                                                              \
    do {                                                                                    \
        CUresult early_;                                                                    \
        if (!enter(E_##name, (need_init), &early_))                                         \
            return early_;                                                                  \
    } while (0)

/* ========================================================================================
 * Time
 * ======================================================================================== */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
    while (now_ns() < t && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* ========================================================================================
 * Handle pools
 * ======================================================================================== */

static _Atomic size_t slab_bytes; /* all handle tables' slabs (bytes); they never shrink */

/* A zeroed element (header set, state LIVE), or NULL when out of memory. */
static void *pool_get(struct fc_pool *p)
{
    struct fc_hdr *h;
    if (p->free_head && (p->lifo || p->nfree > p->holdback)) {
        h = p->free_head;
        p->free_head = h->free_next;
        if (!p->free_head)
            p->free_tail = NULL;
        p->nfree--;
    } else {
        if (p->nslabs == 0 || p->used == p->slab_len[p->nslabs - 1]) {
            if (p->nslabs == FC_MAX_SLABS)
                return NULL;
            size_t n = (size_t)64 << (p->nslabs < 16 ? p->nslabs : 16);
            char *s = calloc(n, p->size);
            if (!s)
                return NULL;
            slab_bytes += n * p->size;
            p->slab[p->nslabs] = s;
            p->slab_len[p->nslabs] = n;
            p->nslabs++;
            p->used = 0;
        }
        h = (struct fc_hdr *)(void *)(p->slab[p->nslabs - 1] + p->used * p->size);
        p->used++;
    }
    memset((char *)h + sizeof *h, 0, p->size - sizeof *h);
    h->magic = p->magic;
    h->state = ST_LIVE;
    h->free_next = NULL;
    return h;
}

/* Marks the element dead (state) and queues it for reuse. */
static void pool_put(struct fc_pool *p, void *obj, uint32_t state)
{
    struct fc_hdr *h = obj;
    h->state = state;
    h->free_next = NULL;
    if (p->lifo) {
        h->free_next = p->free_head;
        p->free_head = h;
        if (!p->free_tail)
            p->free_tail = h;
    } else {
        if (p->free_tail)
            p->free_tail->free_next = h;
        else
            p->free_head = h;
        p->free_tail = h;
    }
    p->nfree++;
}

/* The element of p whose memory contains ptr (any byte of it), or NULL. Never dereferences
 * ptr outside the slabs. */
static struct fc_hdr *pool_container(const struct fc_pool *p, const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    for (int i = 0; i < p->nslabs; i++) {
        uintptr_t base = (uintptr_t)p->slab[i];
        size_t n = i == p->nslabs - 1 ? p->used : p->slab_len[i];
        if (a >= base && a < base + n * p->size) {
            size_t idx = (a - base) / p->size;
            struct fc_hdr *h = (struct fc_hdr *)(void *)(p->slab[i] + idx * p->size);
            return h->magic == p->magic ? h : NULL;
        }
    }
    return NULL;
}

/* ptr is exactly an element of p */
static int pool_owns(const struct fc_pool *p, const void *ptr)
{
    return ptr && pool_container(p, ptr) == ptr;
}

/* ========================================================================================
 * Contexts
 * ======================================================================================== */

static struct fc_ctx *tl_top(void) { return tl_depth ? tl_stack[tl_depth - 1] : NULL; }
static int ctx_alive(const struct fc_ctx *c) { return c->active && !c->dying; }

/* The calling thread's current context, which must be usable. */
static CUresult need_ctx(struct fc_ctx **out)
{
    struct fc_ctx *c = tl_top();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx_alive(c))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

/* Same, and not sticky-broken. */
static CUresult need_healthy_ctx(struct fc_ctx **out)
{
    CUresult r = need_ctx(out);
    if (r == CUDA_SUCCESS && (*out)->sticky)
        r = (*out)->sticky;
    return r;
}

/* A CUcontext passed in by the caller: garbage aborts; a destroyed created context and the
 * value cuCtxGetCurrent returns for a reset primary context are INVALID_CONTEXT. */
static CUresult check_ctx_handle(CUcontext h, struct fc_ctx **out)
{
    if (h == FC_CTX_DESTROYED_PTR)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!pool_owns(&g_ctx_pool, h))
        die("%p is not a context", (void *)h);
    struct fc_ctx *c = (struct fc_ctx *)h;
    if (!c->primary && c->h.state != ST_LIVE)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

static struct fc_queue *queue_new(struct fc_ctx *c)
{
    struct fc_queue *q = calloc(1, sizeof *q);
    if (q) {
        q->refs = 1;
        q->ctx = c;
    }
    return q;
}

/* Makes a context usable: new id, fresh NULL stream. */
static CUresult ctx_activate(struct fc_ctx *c)
{
    struct fc_queue *q = queue_new(c);
    if (!q)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&c->legacy, 0, sizeof c->legacy);
    c->legacy.h.magic = MAGIC_STREAM;
    c->legacy.h.state = ST_LIVE;
    c->legacy.ctx = c;
    c->legacy.legacy = 1;
    c->legacy.q = q;
    c->id = g_next_ctx_id++;
    c->sticky = CUDA_SUCCESS;
    c->was_reset = 0;
    c->active = 1;
    return CUDA_SUCCESS;
}

static void queue_unref(struct fc_queue *q);
static void queue_discard(struct fc_queue *q);
static void op_free(struct fc_op *op);
static void event_unref(struct fc_event *e);

static void node_free(struct fc_node *n);
static void exec_free(struct fc_exec *e);

static _Atomic int g_live_graphs; /* graphs created and not destroyed (clones, captures) */
static _Atomic int g_live_execs;  /* execs instantiated and not destroyed */

static void graph_free(struct fc_graph *g)
{
    struct fc_ctx *c = g->ctx;
    if (g->prev)
        g->prev->next = g->next;
    else
        c->graphs = g->next;
    if (g->next)
        g->next->prev = g->prev;
    while (g->head) {
        struct fc_op *op = g->head;
        g->head = op->next;
        op_free(op);
    }
    while (g->nhead) {
        struct fc_node *n = g->nhead;
        g->nhead = n->next;
        node_free(n);
    }
    for (struct fc_exec *e = c->execs; e; e = e->next)
        if (e->src == g)
            e->src = NULL;
    g->magic = 0;
    free(g);
    atomic_fetch_sub(&g_live_graphs, 1);
}

static int ctx_queue_busy(const struct fc_ctx *c, int by_self)
{
    const struct fc_queue *q;
#define FC_BUSY(qq) ((qq) && (qq)->busy && (!by_self || (qq)->busy_owner == tl_self()))
    if (FC_BUSY(c->legacy.q))
        return 1;
    for (const struct fc_stream *s = c->streams; s; s = s->next)
        if (FC_BUSY(s->q))
            return 1;
    for (q = c->orphans; q; q = q->orphan_next)
        if (FC_BUSY(q))
            return 1;
#undef FC_BUSY
    return 0;
}

/*
 * Destroys everything a context owns (cuDevicePrimaryCtxReset, last primary release,
 * cuCtxDestroy): pending work is dropped, handles die, memory is freed. Waits for operations
 * other threads are running in it. Lock held; may release it while waiting.
 */
static CUresult ctx_teardown(struct fc_ctx *c)
{
    if (ctx_queue_busy(c, 1))
        return CUDA_ERROR_NOT_PERMITTED; /* from inside one of its own operations */
    c->dying = 1;
    if (c->legacy.q)
        c->legacy.q->dead = 1;
    for (struct fc_stream *s = c->streams; s; s = s->next)
        s->q->dead = 1;
    for (struct fc_queue *q = c->orphans; q; q = q->orphan_next)
        q->dead = 1;
    while (ctx_queue_busy(c, 0))
        pthread_cond_wait(&g_cond, &g_lock);

    while (c->streams) {
        struct fc_stream *s = c->streams;
        c->streams = s->next;
        if (s->graph)
            graph_free(s->graph);
        queue_discard(s->q);
        queue_unref(s->q);
        pool_put(&g_stream_pool, s, ST_CTX_GONE);
        g_live_streams--;
    }
    if (c->legacy.q) {
        queue_discard(c->legacy.q);
        queue_unref(c->legacy.q);
        c->legacy.q = NULL;
    }
    while (c->orphans) {
        struct fc_queue *q = c->orphans;
        c->orphans = q->orphan_next;
        queue_discard(q);
        queue_unref(q);
    }
    while (c->events) {
        struct fc_event *e = c->events;
        c->events = e->next;
        e->h.state = ST_CTX_GONE;
        g_live_events--;
        event_unref(e);
    }
    while (c->modules) {
        struct fc_module *m = c->modules;
        c->modules = m->next;
        pool_put(&g_module_pool, m, ST_CTX_GONE);
    }
    while (c->allocs) {
        struct fc_alloc *a = c->allocs;
        c->allocs = a->next;
        free(a->base);
        free(a);
    }
    while (c->execs)
        exec_free(c->execs);
    while (c->graphs)
        graph_free(c->graphs);
    c->active = 0;
    c->dying = 0;
    c->sticky = CUDA_SUCCESS;
    if (!c->primary)
        c->h.state = ST_DESTROYED;
    pthread_cond_broadcast(&g_cond);
    return CUDA_SUCCESS;
}

/* ========================================================================================
 * Operations and lazy execution
 * ======================================================================================== */

static struct fc_op *op_new(enum op_kind kind)
{
    struct fc_op *op = calloc(1, sizeof *op);
    if (op)
        op->kind = kind;
    return op;
}

/* The operations a memset, a copy and a host function queue (or a graph node templates). */
static struct fc_op *memset_op_new(void *dst, unsigned value, size_t elem, size_t count)
{
    struct fc_op *op = op_new(OP_MEMSET);
    if (op) {
        op->u.set.dst = dst;
        op->u.set.value = value;
        op->u.set.elem = elem;
        op->u.set.count = count;
    }
    return op;
}

static struct fc_op *copy_op_new(void *dst, const void *src, size_t n)
{
    struct fc_op *op = op_new(OP_COPY);
    if (op) {
        op->u.copy.dst = dst;
        op->u.copy.src = src;
        op->u.copy.n = n;
    }
    return op;
}

static struct fc_op *host_op_new(CUhostFn fn, void *data)
{
    struct fc_op *op = op_new(OP_HOSTFN);
    if (op) {
        op->u.host.fn = fn;
        op->u.host.data = data;
    }
    return op;
}

static void op_free(struct fc_op *op)
{
    switch (op->kind) {
    case OP_KERNEL:
        free(op->u.k.blob);
        break;
    case OP_RECORD:
        event_unref(op->u.rec.ev);
        break;
    case OP_WAIT:
        if (op->u.wait.q)
            queue_unref(op->u.wait.q);
        if (op->u.wait.ev) /* NULL: a launch waiting for its exec's previous launch */
            event_unref(op->u.wait.ev);
        break;
    default:
        break;
    }
    free(op);
}

/* An operation left its queue, run (ran) or dropped: completes its event record. */
static void op_retire(struct fc_op *op, int ran)
{
    if (op->kind != OP_RECORD)
        return;
    struct fc_event *e = op->u.rec.ev;
    if (ran && (!e->has_time || op->seq > e->time_seq)) {
        e->has_time = 1;
        e->time_seq = op->seq;
        e->time_ns = op->ready_at;
    }
    if (e->rec_q && e->rec_seq == op->seq) {
        queue_unref(e->rec_q);
        e->rec_q = NULL;
    }
}

/* Drops every queued operation. */
static void queue_discard(struct fc_queue *q)
{
    while (q->head) {
        struct fc_op *op = q->head;
        q->head = op->next;
        if (!q->head)
            q->tail = NULL;
        op_retire(op, 0);
        op_free(op);
    }
}

static void queue_unref(struct fc_queue *q)
{
    if (--q->refs == 0) {
        queue_discard(q);
        free(q);
    }
}

/* Appends op: ready at max(now, end of the queue's previous work, not_before) + duration. */
static void queue_push(struct fc_queue *q, struct fc_op *op, uint64_t not_before)
{
    uint64_t start = max_u64(max_u64(now_ns(), q->last_ready), not_before);
    op->ready_at = start + op->duration;
    q->last_ready = op->ready_at;
    op->seq = ++g_seq;
    op->next = NULL;
    if (q->tail)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
}

static CUresult drain(struct fc_queue *q, uint64_t upto, int only_ready);

/* Runs one popped operation. Lock held; released around user code and sleeping. */
static void run_op(struct fc_op *op, int only_ready)
{
    if (!only_ready && op->ready_at > now_ns()) {
        unlock();
        sleep_until(op->ready_at); /* the simulated device is still busy */
        lock();
    }
    switch (op->kind) {
    case OP_RECORD:
        break; /* op_retire completes the event */
    case OP_WAIT:
        if (op->u.wait.q)
            (void)drain(op->u.wait.q, op->u.wait.seq, only_ready);
        break;
    case OP_KERNEL:
        unlock();
        tl_cluster_x = op->u.k.cluster[0] ? op->u.k.cluster[0] : 1;
        op->u.k.fn(op->u.k.args, op->u.k.grid, op->u.k.block);
        lock();
        break;
    case OP_MEMSET:
        unlock();
        for (size_t i = 0; i < op->u.set.count; i++) {
            if (op->u.set.elem == 1) {
                op->u.set.dst[i] = (unsigned char)op->u.set.value;
            } else {
                uint32_t v = op->u.set.value;
                memcpy(op->u.set.dst + i * 4, &v, 4);
            }
        }
        lock();
        break;
    case OP_COPY:
        unlock();
        memcpy(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
        lock();
        break;
    case OP_HOSTFN:
        unlock();
        op->u.host.fn(op->u.host.data);
        lock();
        break;
    }
}

/*
 * Runs, in order and on the calling thread, the operations of q with sequence number <= upto.
 * only_ready: query mode, runs only operations whose simulated time has come and never
 * waits; CUDA_ERROR_NOT_READY if some remain. Otherwise waits for the simulated time and
 * for operations of q other threads are running. A thread that needs an operation it is
 * itself running (a host function synchronising its own stream) gets NOT_PERMITTED.
 * A sticky-broken context drops the queue and returns its error. Lock held.
 */
static CUresult drain(struct fc_queue *q, uint64_t upto, int only_ready)
{
    CUresult r = CUDA_SUCCESS;
    q->refs++;
    for (;;) {
        if (q->dead) {
            r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
            break;
        }
        if (q->ctx->sticky) {
            queue_discard(q);
            r = q->ctx->sticky;
            break;
        }
        struct fc_op *op = q->head;
        int busy_pending = q->busy && q->busy_seq <= upto;
        if (!busy_pending && !(op && op->seq <= upto))
            break; /* done */
        if (q->busy) {
            if (q->busy_owner == tl_self()) {
                r = only_ready ? CUDA_ERROR_NOT_READY : CUDA_ERROR_NOT_PERMITTED;
                break;
            }
            if (only_ready) {
                r = CUDA_ERROR_NOT_READY;
                break;
            }
            pthread_cond_wait(&g_cond, &g_lock);
            continue;
        }
        if (only_ready && op->ready_at > now_ns()) {
            r = CUDA_ERROR_NOT_READY;
            break;
        }
        if (only_ready && op->kind == OP_WAIT && op->u.wait.q) {
            /* the awaited record must be done before this wait can run */
            if (drain(op->u.wait.q, op->u.wait.seq, 1) == CUDA_ERROR_NOT_READY) {
                r = CUDA_ERROR_NOT_READY;
                break;
            }
            if (q->head != op || q->busy || q->dead)
                continue; /* the lock was released: look again */
        }
        q->head = op->next;
        if (!q->head)
            q->tail = NULL;
        q->busy = 1;
        q->busy_owner = tl_self();
        q->busy_seq = op->seq;
        struct fc_ctx *saved = tl_exec_ctx;
        tl_exec_ctx = q->ctx;
        run_op(op, only_ready);
        tl_exec_ctx = saved;
        q->busy = 0;
        op_retire(op, 1);
        op_free(op);
        pthread_cond_broadcast(&g_cond);
    }
    queue_unref(q);
    return r;
}

enum { DRAIN_ALL, DRAIN_LEGACY };

/*
 * Runs the work of a context: DRAIN_ALL every queue (streams, NULL stream, orphaned queues
 * of destroyed streams: cuCtxSynchronize); DRAIN_LEGACY the NULL stream and the blocking
 * streams (what synchronising the legacy stream waits for). Lock held.
 */
static CUresult ctx_drain(struct fc_ctx *c, int only_ready, int which)
{
    uint64_t upto = only_ready ? UINT64_MAX : g_seq;
    size_t cap = 1, n = 0;
    for (struct fc_stream *s = c->streams; s; s = s->next)
        cap++;
    for (struct fc_queue *q = c->orphans; q; q = q->orphan_next)
        cap++;
    struct fc_queue **qs = malloc(cap * sizeof *qs);
    if (!qs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (c->legacy.q)
        qs[n++] = c->legacy.q;
    for (struct fc_stream *s = c->streams; s; s = s->next)
        if (which == DRAIN_ALL || !(s->flags & CU_STREAM_NON_BLOCKING))
            qs[n++] = s->q;
    if (which == DRAIN_ALL)
        for (struct fc_queue *q = c->orphans; q; q = q->orphan_next)
            qs[n++] = q;
    for (size_t i = 0; i < n; i++)
        qs[i]->refs++;

    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        CUresult e = drain(qs[i], upto, only_ready);
        if (e != CUDA_SUCCESS && (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY))
            r = e;
    }
    for (size_t i = 0; i < n; i++)
        queue_unref(qs[i]);
    free(qs);

    if (which == DRAIN_ALL && !only_ready) {
        /* orphaned queues that ran dry are done */
        struct fc_queue **link = &c->orphans;
        while (*link) {
            struct fc_queue *q = *link;
            if (!q->head && !q->busy) {
                *link = q->orphan_next;
                queue_unref(q);
            } else {
                link = &q->orphan_next;
            }
        }
    }
    if (c->sticky)
        r = c->sticky;
    return r;
}

/* Queues op on stream s, or records it when s is being captured. Takes op. */
static CUresult submit(struct fc_stream *s, struct fc_op *op, uint64_t not_before)
{
    if (s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        op_free(op);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        struct fc_graph *g = s->graph;
        op->next = NULL;
        if (g->tail)
            g->tail->next = op;
        else
            g->head = op;
        g->tail = op;
        g->nops++;
        return CUDA_SUCCESS;
    }
    queue_push(s->q, op, not_before);
    return CUDA_SUCCESS;
}

/* ========================================================================================
 * Kernel table and builtin kernels
 * ======================================================================================== */

static void k_spin(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_addone(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_set_u32(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_add_u32(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_trap(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_cluster_width(void **args, const unsigned grid[3], const unsigned block[3]);

static struct fc_kernel g_kernels[FC_MAX_KERNELS] = {
    {"spin", 1, {8}, k_spin},
    {"addone", 1, {8}, k_addone},
    {"set_u32", 2, {8, 4}, k_set_u32},
    {"add_u32", 2, {8, 4}, k_add_u32},
    {"trap", 0, {0}, k_trap},
    {"cluster_width", 1, {8}, k_cluster_width},
};
static int g_nkernels = 6;

static int kernel_find(const char *name)
{
    for (int i = 0; i < g_nkernels; i++)
        if (strcmp(g_kernels[i].name, name) == 0)
            return i;
    return -1;
}

static struct fc_alloc *find_alloc(uintptr_t p, size_t n, struct fc_ctx **owner);

static void poison(struct fc_ctx *c, CUresult err)
{
    if (c && ctx_alive(c) && !c->sticky && err != CUDA_SUCCESS)
        c->sticky = err;
}

/* A builtin kernel's pointer argument: n bytes of device memory, else the context breaks
 * with an illegal address, as on the device. */
static uint32_t *kernel_ptr(void *arg, size_t n)
{
    uint64_t p;
    memcpy(&p, arg, sizeof p);
    lock();
    int ok = find_alloc((uintptr_t)p, n, NULL) != NULL;
    if (!ok)
        poison(tl_exec_ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    unlock();
    return ok ? (uint32_t *)(uintptr_t)p : NULL;
}

static void k_spin(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)args, (void)grid, (void)block; /* its duration is its simulated time */
}

static void k_addone(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    uint32_t *p = kernel_ptr(args[0], 4);
    if (p)
        __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
}

static void k_set_u32(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    uint32_t *p = kernel_ptr(args[0], 4), v;
    memcpy(&v, args[1], 4);
    if (p)
        *p = v;
}

static void k_add_u32(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    uint32_t *p = kernel_ptr(args[0], 4), v;
    memcpy(&v, args[1], 4);
    if (p)
        __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

/* ((u32 *)p)[block] = the width of the block's thread-block cluster, for every block of the
 * grid (1 without a cluster), as %cluster_nctaid.x reads on an sm_90 GPU. */
static void k_cluster_width(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)block;
    uint32_t *p = kernel_ptr(args[0], 4 * (size_t)grid[0]);
    for (unsigned b = 0; p && b < grid[0]; b++)
        p[b] = tl_cluster_x;
}

/* As on an H200 (driver 580.159): a trapped kernel fails with CUDA_ERROR_LAUNCH_FAILED and
 * leaves the whole process unusable ("an inconsistent state", cuda.h): every context. */
static void k_trap(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)args, (void)grid, (void)block;
    lock();
    for (struct fc_ctx *c = g_contexts; c; c = c->all_next)
        poison(c, CUDA_ERROR_LAUNCH_FAILED);
    unlock();
}

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

/* ========================================================================================
 * Devices and primary contexts
 * ======================================================================================== */

static int dev_ok(CUdevice dev) { return dev >= 0 && dev < g_ndev; }

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER(cuDeviceGet, 1);
    if (!device)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(ordinal))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    ENTER(cuDeviceGetCount, 1);
    if (!count)
        return leave(CUDA_ERROR_INVALID_VALUE);
    *count = g_ndev;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTER(cuDeviceGetName, 1);
    if (!name || len <= 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", "fakecuda simulated device");
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ENTER(cuDeviceGetAttribute, 1);
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = dev; break;
    default: *pi = 0; break;
    }
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxRetain, 1);
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct fc_ctx *c = g_primary[dev];
    while (c->dying)
        pthread_cond_wait(&g_cond, &g_lock);
    if (!c->active) {
        CUresult r = ctx_activate(c);
        if (r != CUDA_SUCCESS)
            return leave(r);
    }
    c->refcount++;
    *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

/* Releasing the last reference destroys the primary context, as the real driver does (the
 * threads that have it current keep its pointer; cuCtxGetId on it is CONTEXT_IS_DESTROYED). */
static CUresult primary_release(CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxRelease, 1);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct fc_ctx *c = g_primary[dev];
    if (c->refcount == 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (c->refcount == 1 && ctx_alive(c)) {
        CUresult r = ctx_teardown(c);
        if (r != CUDA_SUCCESS)
            return leave(r);
    }
    c->refcount--;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }

/* Destroys all the primary context's resources; the CUcontext pointer stays, its id dies,
 * the retain count stays (the next retain activates it again, with a new id). */
static CUresult primary_reset(CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxReset, 1);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct fc_ctx *c = g_primary[dev];
    CUresult r = ctx_alive(c) ? ctx_teardown(c) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        c->was_reset = 1;
    return leave(r);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    ENTER(cuDevicePrimaryCtxGetState, 1);
    if (!flags || !active)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    *flags = g_primary[dev]->flags;
    *active = ctx_alive(g_primary[dev]);
    return leave(CUDA_SUCCESS);
}

/* ========================================================================================
 * Contexts
 * ======================================================================================== */

static CUresult ctx_create(CUcontext *pctx, CUctxCreateParams *params, unsigned flags,
                           CUdevice dev)
{
    ENTER(cuCtxCreate, 1);
    if (!pctx || (flags & ~(unsigned)CU_CTX_FLAGS_MASK))
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (params) {
        if (params->cigParams)
            return leave(CUDA_ERROR_NOT_SUPPORTED);
        if (!params->execAffinityParams)
            return leave(CUDA_ERROR_INVALID_VALUE);
    }
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if (tl_depth == FC_CTX_STACK)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    struct fc_ctx *c = pool_get(&g_ctx_pool);
    if (!c)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    c->dev = dev;
    c->flags = flags;
    c->all_next = g_contexts;
    g_contexts = c;
    if (ctx_activate(c) != CUDA_SUCCESS) {
        c->h.state = ST_DESTROYED;
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    tl_stack[tl_depth++] = c;
    *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, ctxCreateParams, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, NULL, flags, dev);
}

static CUresult ctx_destroy(CUcontext ctx)
{
    ENTER(cuCtxDestroy, 1);
    struct fc_ctx *c;
    if (!ctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = check_ctx_handle(ctx, &c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (c->primary || !ctx_alive(c))
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    r = ctx_teardown(c);
    if (r == CUDA_SUCCESS && tl_top() == c)
        tl_depth--;
    return leave(r);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    ENTER(cuCtxSetCurrent, 1);
    struct fc_ctx *c;
    if (!ctx) {
        if (tl_depth)
            tl_depth--;
        return leave(CUDA_SUCCESS);
    }
    CUresult r = check_ctx_handle(ctx, &c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (tl_depth)
        tl_stack[tl_depth - 1] = c;
    else
        tl_stack[tl_depth++] = c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER(cuCtxGetCurrent, 1);
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct fc_ctx *c = tl_top();
    if (c && c->primary && !ctx_alive(c) && c->was_reset)
        *pctx = FC_CTX_DESTROYED_PTR; /* what the real driver returned after a reset */
    else
        *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

static CUresult ctx_push(CUcontext ctx)
{
    ENTER(cuCtxPushCurrent, 1);
    struct fc_ctx *c;
    if (!ctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = check_ctx_handle(ctx, &c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (tl_depth == FC_CTX_STACK)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    tl_stack[tl_depth++] = c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }

static CUresult ctx_pop(CUcontext *pctx)
{
    ENTER(cuCtxPopCurrent, 1);
    if (!tl_depth)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    struct fc_ctx *c = tl_stack[--tl_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx) { return ctx_pop(pctx); }
CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) { return ctx_pop(pctx); }

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    ENTER(cuCtxGetId, 1);
    struct fc_ctx *c;
    CUresult r;
    if (!ctxId)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (ctx)
        r = check_ctx_handle(ctx, &c);
    else
        r = (c = tl_top()) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS && !ctx_alive(c))
        r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (r == CUDA_SUCCESS && !ctx && c->sticky)
        r = c->sticky; /* as on an H200: a broken current context answers with its error; asked
                          by handle, it still gives its id */
    if (r == CUDA_SUCCESS)
        *ctxId = c->id;
    return leave(r);
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    ENTER(cuCtxGetDevice, 1);
    struct fc_ctx *c;
    if (!device)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_ctx(&c);
    if (r == CUDA_SUCCESS)
        *device = c->dev;
    return leave(r);
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    ENTER(cuCtxSynchronize, 1);
    struct fc_ctx *c;
    CUresult r = need_healthy_ctx(&c);
    if (r == CUDA_SUCCESS)
        r = ctx_drain(c, 0, DRAIN_ALL);
    return leave(r);
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    ENTER(cuCtxGetStreamPriorityRange, 1);
    struct fc_ctx *c;
    CUresult r = need_healthy_ctx(&c);
    if (r == CUDA_SUCCESS) {
        if (leastPriority)
            *leastPriority = FC_PRIO_LEAST;
        if (greatestPriority)
            *greatestPriority = FC_PRIO_GREATEST;
    }
    return leave(r);
}

/* ========================================================================================
 * Streams
 * ======================================================================================== */

/*
 * A CUstream from the caller. NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the current
 * context's NULL stream. A destroyed stream, a stream of a reset context and garbage abort,
 * as they crash the real driver. With check_sticky, a broken context returns its error.
 */
static CUresult get_stream(CUstream h, struct fc_stream **out, int check_sticky)
{
    struct fc_stream *s;
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        struct fc_ctx *c;
        CUresult r = need_ctx(&c);
        if (r != CUDA_SUCCESS)
            return r;
        s = &c->legacy;
    } else {
        s = (struct fc_stream *)h;
        if (!pool_owns(&g_stream_pool, s))
            die("%p is not a stream", (void *)h);
        if (s->h.state == ST_DESTROYED)
            die("stream %p was destroyed", (void *)h);
        if (s->h.state == ST_CTX_GONE)
            die("stream %p belongs to a context that was reset or destroyed", (void *)h);
        if (s->ctx->dying)
            return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    if (check_sticky && s->ctx->sticky)
        return s->ctx->sticky;
    *out = s;
    return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream *phStream, unsigned flags, int priority)
{
    struct fc_ctx *c;
    if (!phStream || (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_queue *q = queue_new(c);
    struct fc_stream *s = q ? pool_get(&g_stream_pool) : NULL;
    if (!s) {
        free(q);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->ctx = c;
    s->q = q;
    s->flags = flags;
    s->priority = priority < FC_PRIO_GREATEST ? FC_PRIO_GREATEST
                  : priority > FC_PRIO_LEAST  ? FC_PRIO_LEAST
                                              : priority;
    s->id = g_next_stream_id++;
    s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
    s->next = c->streams;
    if (c->streams)
        c->streams->prev = s;
    c->streams = s;
    g_live_streams++;
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    ENTER(cuStreamCreate, 1);
    return leave(stream_create(phStream, Flags, 0));
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    ENTER(cuStreamCreateWithPriority, 1);
    return leave(stream_create(phStream, flags, priority));
}

/* Returns at once; queued work moves to the context's orphan list and runs at the next
 * context-wide synchronisation. The handle goes on a LIFO free list (the next stream
 * created gets it back, as on the real driver). */
static CUresult stream_destroy(CUstream hStream)
{
    ENTER(cuStreamDestroy, 1);
    struct fc_stream *s;
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    CUresult r = get_stream(hStream, &s, 0);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_ctx *c = s->ctx;
    if (c->sticky)
        return leave(c->sticky); /* as on an H200: a broken context destroys nothing */
    if (s->graph)
        graph_free(s->graph);
    if (s->q->head || s->q->busy) {
        s->q->orphan_next = c->orphans;
        c->orphans = s->q;
    } else {
        queue_unref(s->q);
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pool_put(&g_stream_pool, s, ST_DESTROYED);
    g_live_streams--;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }
CUresult CUDAAPI cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }

/* Query or synchronise a stream (query: only_ready). A capturing stream refuses and its
 * capture is invalidated, as on the real driver. */
static CUresult stream_run(CUstream hStream, int only_ready)
{
    struct fc_stream *s;
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->cap != CU_STREAM_CAPTURE_STATUS_NONE) {
        s->cap = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->legacy)
        return ctx_drain(s->ctx, only_ready, DRAIN_LEGACY);
    return drain(s->q, only_ready ? UINT64_MAX : g_seq, only_ready);
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    ENTER(cuStreamQuery, 1);
    return leave(stream_run(hStream, 1));
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    ENTER(cuStreamSynchronize, 1);
    return leave(stream_run(hStream, 0));
}

static CUresult get_event(CUevent h, struct fc_event **out, int check_sticky);

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    ENTER(cuStreamWaitEvent, 1);
    struct fc_stream *s;
    struct fc_event *e;
    if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        r = get_event(hEvent, &e, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (!e->recorded && s->cap == CU_STREAM_CAPTURE_STATUS_NONE)
        return leave(CUDA_SUCCESS); /* never recorded: nothing to wait for */
    if (!e->rec_q && s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
        /* already complete: only orders the simulated time */
        s->q->last_ready = max_u64(s->q->last_ready, e->rec_ready);
        return leave(CUDA_SUCCESS);
    }
    struct fc_op *op = op_new(OP_WAIT);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    op->u.wait.ev = e;
    e->refs++;
    if (e->rec_q) {
        op->u.wait.q = e->rec_q;
        op->u.wait.seq = e->rec_seq;
        e->rec_q->refs++;
    }
    return leave(submit(s, op, e->rec_ready));
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    ENTER(cuStreamGetFlags, 1);
    struct fc_stream *s;
    if (!flags)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *flags = s->flags;
    return leave(r);
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
    ENTER(cuStreamGetPriority, 1);
    struct fc_stream *s;
    if (!priority)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *priority = s->priority;
    return leave(r);
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    ENTER(cuStreamGetCtx, 1);
    struct fc_stream *s;
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *pctx = (CUcontext)s->ctx;
    return leave(r);
}

CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    ENTER(cuStreamGetId, 1);
    struct fc_stream *s;
    if (!streamId)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *streamId = s->id;
    return leave(r);
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    ENTER(cuLaunchHostFunc, 1);
    struct fc_stream *s;
    if (!fn)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_op *op = host_op_new(fn, userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(submit(s, op, 0));
}

/* ========================================================================================
 * Stream capture (operations are recorded in a list, never executed)
 * ======================================================================================== */

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    ENTER(cuStreamIsCapturing, 1);
    struct fc_stream *s;
    if (!captureStatus)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *captureStatus = s->cap;
    return leave(r);
}

static CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode)
{
    ENTER(cuStreamBeginCapture, 1);
    struct fc_stream *s;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (s->legacy)
        return leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (s->cap != CU_STREAM_CAPTURE_STATUS_NONE)
        return leave(CUDA_ERROR_ILLEGAL_STATE);
    struct fc_graph *g = graph_new(s->ctx); /* counted alive, as every graph */
    if (!g)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    s->graph = g;
    s->cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->cap_id = g_next_capture_id++;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode);
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* The graph stays owned by the context (freed when it is reset or destroyed). */
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    ENTER(cuStreamEndCapture, 1);
    struct fc_stream *s;
    if (!phGraph)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (s->cap == CU_STREAM_CAPTURE_STATUS_NONE)
        return leave(CUDA_ERROR_ILLEGAL_STATE);
    struct fc_graph *g = s->graph;
    int invalidated = s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
    s->graph = NULL;
    if (invalidated) {
        graph_free(g);
        *phGraph = NULL;
        return leave(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    r = capture_to_nodes(g);
    if (r != CUDA_SUCCESS) {
        graph_free(g);
        *phGraph = NULL;
        return leave(r);
    }
    *phGraph = (CUgraph)g;
    return leave(CUDA_SUCCESS);
}

static CUresult capture_info(CUstream hStream, CUstreamCaptureStatus *status,
                             cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps)
{
    ENTER(cuStreamGetCaptureInfo, 1);
    struct fc_stream *s;
    if (!status)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    *status = s->cap;
    if (id)
        *id = s->cap != CU_STREAM_CAPTURE_STATUS_NONE ? s->cap_id : 0;
    if (graph)
        *graph = s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (CUgraph)s->graph : NULL;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream,
                                           CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           const CUgraphEdgeData **edgeData_out,
                                           size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream,
                                           CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        NULL, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out)
{
    return capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}

/* ========================================================================================
 * Events
 * ======================================================================================== */

/* Like get_stream, for events (never NULL). */
static CUresult get_event(CUevent h, struct fc_event **out, int check_sticky)
{
    struct fc_event *e = (struct fc_event *)h;
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pool_owns(&g_event_pool, e))
        die("%p is not an event", (void *)h);
    if (e->h.state == ST_DESTROYED)
        die("event %p was destroyed", (void *)h);
    if (e->h.state == ST_CTX_GONE)
        die("event %p belongs to a context that was reset or destroyed", (void *)h);
    if (e->ctx->dying)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (check_sticky && e->ctx->sticky)
        return e->ctx->sticky;
    *out = e;
    return CUDA_SUCCESS;
}

/* Drops a reference; the memory goes back to the FIFO pool when the last one goes. */
static void event_unref(struct fc_event *e)
{
    if (--e->refs > 0)
        return;
    if (e->rec_q) {
        queue_unref(e->rec_q);
        e->rec_q = NULL;
    }
    pool_put(&g_event_pool, e, e->h.state);
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    ENTER(cuEventCreate, 1);
    struct fc_ctx *c;
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~known) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_event *e = pool_get(&g_event_pool);
    if (!e)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    e->ctx = c;
    e->flags = Flags;
    e->refs = 1;
    e->next = c->events;
    if (c->events)
        c->events->prev = e;
    c->events = e;
    g_live_events++;
    *phEvent = (CUevent)e;
    return leave(CUDA_SUCCESS);
}

static CUresult event_destroy(CUevent hEvent)
{
    ENTER(cuEventDestroy, 1);
    struct fc_event *e;
    CUresult r = get_event(hEvent, &e, 0);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_ctx *c = e->ctx;
    if (c->sticky)
        return leave(c->sticky);
    if (e->prev)
        e->prev->next = e->next;
    else
        c->events = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->h.state = ST_DESTROYED;
    g_live_events--;
    event_unref(e); /* a pending record keeps the memory until it has run */
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) { return event_destroy(hEvent); }
CUresult CUDAAPI cuEventDestroy(CUevent hEvent) { return event_destroy(hEvent); }

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    ENTER(cuEventRecord, 1);
    struct fc_event *e;
    struct fc_stream *s;
    CUresult r = get_event(hEvent, &e, 1);
    if (r == CUDA_SUCCESS)
        r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (s->ctx != e->ctx)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    struct fc_op *op = op_new(OP_RECORD);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    op->u.rec.ev = e;
    e->refs++;
    int captured = s->cap != CU_STREAM_CAPTURE_STATUS_NONE;
    r = submit(s, op, 0);
    if (r != CUDA_SUCCESS || captured)
        return leave(r);
    if (e->rec_q)
        queue_unref(e->rec_q);
    e->rec_q = s->q;
    s->q->refs++;
    e->rec_seq = op->seq;
    e->rec_ready = op->ready_at;
    e->recorded = 1;
    return leave(CUDA_SUCCESS);
}

/* Runs the event's stream up to its latest record (only_ready: as far as simulated time
 * allows). A never-recorded event is complete. */
static CUresult event_run(struct fc_event *e, int only_ready)
{
    if (!e->rec_q)
        return CUDA_SUCCESS;
    return drain(e->rec_q, e->rec_seq, only_ready);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    ENTER(cuEventQuery, 1);
    struct fc_event *e;
    CUresult r = get_event(hEvent, &e, 1);
    if (r == CUDA_SUCCESS)
        r = event_run(e, 1);
    return leave(r);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    ENTER(cuEventSynchronize, 1);
    struct fc_event *e;
    CUresult r = get_event(hEvent, &e, 1);
    if (r == CUDA_SUCCESS)
        r = event_run(e, 0);
    return leave(r);
}

/* Simulated time between the two records: each record's time is when the simulated device
 * reached it (the end of the work queued before it). */
static CUresult elapsed_time(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    ENTER(cuEventElapsedTime, 1);
    struct fc_event *a, *b;
    if (!pMilliseconds)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_event(hStart, &a, 1);
    if (r == CUDA_SUCCESS)
        r = get_event(hEnd, &b, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) || !a->recorded || !b->recorded)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    r = event_run(a, 1);
    if (r == CUDA_SUCCESS)
        r = event_run(b, 1);
    if (r == CUDA_SUCCESS && (!a->has_time || !b->has_time))
        r = CUDA_ERROR_NOT_READY;
    if (r != CUDA_SUCCESS)
        return leave(r);
    *pMilliseconds = (float)(((double)b->time_ns - (double)a->time_ns) / 1e6);
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed_time(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed_time(pMilliseconds, hStart, hEnd);
}

/* ========================================================================================
 * Memory (device memory is host memory; a CUdeviceptr is its address)
 * ======================================================================================== */

/* The allocation of a live context holding [p, p + n), or NULL. */
static struct fc_alloc *find_alloc(uintptr_t p, size_t n, struct fc_ctx **owner)
{
    for (struct fc_ctx *c = g_contexts; c; c = c->all_next) {
        if (!ctx_alive(c))
            continue;
        for (struct fc_alloc *a = c->allocs; a; a = a->next) {
            uintptr_t base = (uintptr_t)a->base;
            if (p >= base && p - base <= a->size && n <= a->size - (p - base) &&
                (n > 0 || p < base + a->size)) {
                if (owner)
                    *owner = c;
                return a;
            }
        }
    }
    return NULL;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER(cuMemAlloc, 1);
    struct fc_ctx *c;
    if (!dptr || bytesize == 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (bytesize > SIZE_MAX - 255)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    size_t rounded = (bytesize + 255) & ~(size_t)255; /* device allocations are 256-aligned */
    struct fc_alloc *a = malloc(sizeof *a);
    unsigned char *p = a ? aligned_alloc(256, rounded) : NULL;
    if (!p) {
        free(a);
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    memset(p, 0, rounded);
    a->base = p;
    a->size = bytesize;
    a->next = c->allocs;
    c->allocs = a;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER(cuMemFree, 1);
    struct fc_ctx *c;
    if (!dptr)
        return leave(CUDA_SUCCESS); /* as the real driver */
    struct fc_alloc *a = find_alloc((uintptr_t)dptr, 0, &c);
    if (!a || (uintptr_t)a->base != (uintptr_t)dptr)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (c->sticky)
        return leave(c->sticky);
    struct fc_alloc **link = &c->allocs;
    while (*link != a)
        link = &(*link)->next;
    *link = a->next;
    free(a->base);
    free(a);
    return leave(CUDA_SUCCESS);
}

/* Synchronous copies and memsets: everything queued in the context runs first. */
static CUresult sync_prologue(struct fc_ctx **c)
{
    CUresult r = need_healthy_ctx(c);
    if (r == CUDA_SUCCESS)
        r = ctx_drain(*c, 0, DRAIN_ALL);
    return r;
}

static CUresult memcpy_sync(void *dst, const void *src, size_t n, uintptr_t dev)
{
    struct fc_ctx *c;
    CUresult r = sync_prologue(&c);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if (!dst || !src || !find_alloc(dev, n, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, src, n);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    ENTER(cuMemcpyHtoD, 1);
    return leave(memcpy_sync((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                             (uintptr_t)dstDevice));
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    ENTER(cuMemcpyDtoH, 1);
    return leave(memcpy_sync(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                             (uintptr_t)srcDevice));
}

static CUresult memcpy_async(void *dst, const void *src, size_t n, uintptr_t dev, CUstream h)
{
    struct fc_stream *s;
    CUresult r = get_stream(h, &s, 1);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if (!dst || !src || !find_alloc(dev, n, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = copy_op_new(dst, src, n);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return submit(s, op, 0);
}

/* Unified addressing: either side may be device memory or host memory; at least one must
 * be a simulated allocation. */
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                               CUstream hStream)
{
    ENTER(cuMemcpyAsync, 1);
    uintptr_t dev = find_alloc((uintptr_t)dst, ByteCount, NULL) ? (uintptr_t)dst : (uintptr_t)src;
    return leave(memcpy_async((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount,
                              dev, hStream));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                      size_t ByteCount, CUstream hStream)
{
    ENTER(cuMemcpyHtoDAsync, 1);
    return leave(memcpy_async((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                              (uintptr_t)dstDevice, hStream));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    ENTER(cuMemcpyDtoHAsync, 1);
    return leave(memcpy_async(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                              (uintptr_t)srcDevice, hStream));
}

static CUresult memset_check(CUdeviceptr dst, size_t elem, size_t n)
{
    if (n > SIZE_MAX / elem || (elem == 4 && (dst & 3)) ||
        !find_alloc((uintptr_t)dst, n * elem, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult memset_async(CUdeviceptr dst, unsigned value, size_t elem, size_t n, CUstream h)
{
    struct fc_stream *s;
    CUresult r = get_stream(h, &s, 1);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    r = memset_check(dst, elem, n);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_op *op = memset_op_new((void *)(uintptr_t)dst, value, elem, n);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return submit(s, op, 0);
}

/* The "synchronous" memsets of device memory are asynchronous with respect to the host, as
 * the real driver's are ("API synchronization behavior" in its documentation): queued on the
 * legacy NULL stream, which streams made with CU_STREAM_NON_BLOCKING do not wait for. (A test
 * that zeroed a counter and then launched on such a stream saw the memset land after four of
 * its kernels on an H200.) */
CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    ENTER(cuMemsetD8, 1);
    return leave(memset_async(dstDevice, uc, 1, N, NULL));
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    ENTER(cuMemsetD32, 1);
    return leave(memset_async(dstDevice, ui, 4, N, NULL));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
    ENTER(cuMemsetD8Async, 1);
    return leave(memset_async(dstDevice, uc, 1, N, hStream));
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream)
{
    ENTER(cuMemsetD32Async, 1);
    return leave(memset_async(dstDevice, ui, 4, N, hStream));
}

/* ========================================================================================
 * Modules and kernel launches
 * ======================================================================================== */

/* A CUmodule from the caller: garbage aborts, an unloaded module is INVALID_HANDLE. */
static CUresult get_module(CUmodule h, struct fc_module **out)
{
    if (!h)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pool_owns(&g_module_pool, h))
        die("%p is not a module", (void *)h);
    struct fc_module *m = (struct fc_module *)h;
    if (m->h.state != ST_LIVE || m->ctx->dying)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = m;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    ENTER(cuModuleLoadData, 1);
    struct fc_ctx *c;
    if (!module || !image)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_module *m = pool_get(&g_module_pool);
    if (!m)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    m->ctx = c;
    m->next = c->modules;
    if (c->modules)
        c->modules->prev = m;
    c->modules = m;
    *module = (CUmodule)m;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    ENTER(cuModuleUnload, 1);
    struct fc_module *m;
    CUresult r = get_module(hmod, &m);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_ctx *c = m->ctx;
    if (c->sticky)
        return leave(c->sticky);
    if (m->prev)
        m->prev->next = m->next;
    else
        c->modules = m->next;
    if (m->next)
        m->next->prev = m->prev;
    pool_put(&g_module_pool, m, ST_DESTROYED);
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    ENTER(cuModuleGetFunction, 1);
    struct fc_module *m;
    if (!hfunc || !name)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_module(hmod, &m);
    if (r == CUDA_SUCCESS && m->ctx->sticky)
        r = m->ctx->sticky;
    if (r != CUDA_SUCCESS)
        return leave(r);
    int slot = kernel_find(name);
    if (slot < 0)
        return leave(CUDA_ERROR_NOT_FOUND);
    struct fc_function *f = &m->fn[slot];
    f->magic = MAGIC_FUNC;
    f->slot = slot;
    f->mod = m;
    *hfunc = (CUfunction)f;
    return leave(CUDA_SUCCESS);
}

/* A CUfunction: it lives inside its module's memory, so the module pool vouches for it. */
static CUresult get_function(CUfunction h, struct fc_function **out)
{
    if (!h)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_module *m = (struct fc_module *)pool_container(&g_module_pool, h);
    uintptr_t off = m ? (uintptr_t)h - (uintptr_t)m->fn : 1;
    if (!m || (uintptr_t)h < (uintptr_t)m->fn || off % sizeof(struct fc_function) != 0 ||
        off / sizeof(struct fc_function) >= FC_MAX_KERNELS ||
        ((struct fc_function *)(void *)h)->magic != MAGIC_FUNC)
        die("%p is not a function", (void *)h);
    struct fc_function *f = (struct fc_function *)(void *)h;
    if (m->h.state != ST_LIVE || m->ctx->dying)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = f;
    return CUDA_SUCCESS;
}

/* A kernel launch of fn with its arguments copied now (as the driver takes them). */
static CUresult kernel_op(const struct fc_function *fn, const unsigned grid[3],
                          const unsigned block[3], void **kernelParams, struct fc_op **out)
{
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
        (uint64_t)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_kernel *k = &g_kernels[fn->slot];
    if (k->nparams > 0 && !kernelParams)
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = 0;
    for (int i = 0; i < k->nparams; i++) {
        if (!kernelParams[i])
            return CUDA_ERROR_INVALID_VALUE;
        total += (k->sizes[i] + 15) & ~(size_t)15;
    }
    struct fc_op *op = op_new(OP_KERNEL);
    unsigned char *blob = op && total ? malloc(total) : NULL;
    if (!op || (total && !blob)) {
        free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t off = 0;
    for (int i = 0; i < k->nparams; i++) {
        memcpy(blob + off, kernelParams[i], k->sizes[i]); /* arguments are taken at launch */
        op->u.k.args[i] = blob + off;
        off += (k->sizes[i] + 15) & ~(size_t)15;
    }
    op->u.k.blob = blob;
    op->u.k.blob_len = total;
    op->u.k.fn = k->fn;
    op->u.k.slot = fn->slot;
    memcpy(op->u.k.grid, grid, sizeof op->u.k.grid);
    memcpy(op->u.k.block, block, sizeof op->u.k.block);
    if (k->fn == k_spin && k->nparams >= 1 && k->sizes[0] >= sizeof(uint64_t))
        memcpy(&op->duration, op->u.k.args[0], sizeof op->duration);
    *out = op;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    ENTER(cuLaunchKernel, 1);
    struct fc_function *fn;
    struct fc_stream *s;
    (void)sharedMemBytes;
    if (extra)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    CUresult r = get_function(f, &fn);
    if (r == CUDA_SUCCESS)
        r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (fn->mod->ctx != s->ctx)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
    const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
    struct fc_op *op;
    r = kernel_op(fn, grid, block, kernelParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(submit(s, op, 0));
}

/* Launch attributes of a kernel launch (cuLaunchKernelEx): the ones the simulation models are
 * kept on the operation (and, under capture, on the kernel node it becomes); unknown ones are
 * refused. A cluster dimension must divide the grid. */
static CUresult launch_attrs(struct fc_op *op, const CUlaunchAttribute *attrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const CUlaunchAttributeValue *v = &attrs[i].value;
        switch (attrs[i].id) {
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            if (!v->clusterDim.x || !v->clusterDim.y || !v->clusterDim.z ||
                op->u.k.grid[0] % v->clusterDim.x || op->u.k.grid[1] % v->clusterDim.y ||
                op->u.k.grid[2] % v->clusterDim.z ||
                (uint64_t)v->clusterDim.x * v->clusterDim.y * v->clusterDim.z > 8)
                return CUDA_ERROR_INVALID_VALUE;
            op->u.k.cluster[0] = v->clusterDim.x;
            op->u.k.cluster[1] = v->clusterDim.y;
            op->u.k.cluster[2] = v->clusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
            op->u.k.preferred_cluster[0] = v->preferredClusterDim.x;
            op->u.k.preferred_cluster[1] = v->preferredClusterDim.y;
            op->u.k.preferred_cluster[2] = v->preferredClusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            op->u.k.cooperative = v->cooperative;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
            op->u.k.cluster_policy = (int)v->clusterSchedulingPolicyPreference;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
            op->u.k.mem_sync_domain = (int)v->memSyncDomain;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            op->u.k.priority = v->priority;
            break;
        default:
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    ENTER(cuLaunchKernelEx, 1);
    struct fc_function *fn;
    struct fc_stream *s;
    if (!config || extra || (config->numAttrs && !config->attrs))
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_function(f, &fn);
    if (r == CUDA_SUCCESS)
        r = get_stream(config->hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (fn->mod->ctx != s->ctx)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    struct fc_op *op;
    r = kernel_op(fn, grid, block, kernelParams, &op);
    if (r == CUDA_SUCCESS && (r = launch_attrs(op, config->attrs, config->numAttrs)) != CUDA_SUCCESS)
        op_free(op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(submit(s, op, 0));
}

/* ========================================================================================
 * Graphs: node graphs built with cuGraphAdd*Node (or by capture), instantiated into execs.
 * An exec holds one template operation per node in a topological order; a launch queues a
 * copy of each on the stream, so the nodes run one after another in dependency order (one
 * valid schedule of the DAG). As on an H200 (driver 580.159): launches of one exec never
 * overlap (a launch on another stream waits for the previous one), updates of grid, block,
 * shared memory, arguments and even the function of a kernel node are accepted, memset
 * nodes take a new value, element size or destination, and cuGraphExecUpdate refuses a
 * changed topology (CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED).
 * ======================================================================================== */

#define MAGIC_NODE 0x46436e64u /* "FCnd" */
#define MAGIC_EXEC 0x46436578u /* "FCex" */

/* A copy of a template operation (the kernel's argument bytes included). */
static struct fc_op *op_clone(const struct fc_op *t)
{
    struct fc_op *op = op_new(t->kind);
    if (!op)
        return NULL;
    *op = *t;
    op->next = NULL;
    if (t->kind == OP_KERNEL && t->u.k.blob) {
        op->u.k.blob = malloc(t->u.k.blob_len);
        if (!op->u.k.blob) {
            free(op);
            return NULL;
        }
        memcpy(op->u.k.blob, t->u.k.blob, t->u.k.blob_len);
        for (int i = 0; i < FC_MAX_PARAMS; i++)
            if (t->u.k.args[i])
                op->u.k.args[i] = op->u.k.blob + ((unsigned char *)t->u.k.args[i] - t->u.k.blob);
    }
    return op;
}

static void node_free(struct fc_node *n)
{
    if (n->tmpl)
        op_free(n->tmpl);
    if (n->ev)
        event_unref(n->ev);
    free(n->deps);
    n->magic = 0;
    free(n);
}

static struct fc_node *graph_nodes_head(struct fc_graph *g);

static CUresult get_graph(CUgraph h, struct fc_graph **out)
{
    struct fc_graph *g = (struct fc_graph *)h;
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    if (g->magic != MAGIC_GRAPH)
        die("%p is not a graph", (void *)h);
    if (!ctx_alive(g->ctx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = g;
    return CUDA_SUCCESS;
}

static CUresult get_node(CUgraphNode h, struct fc_node **out)
{
    struct fc_node *n = (struct fc_node *)h;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->magic != MAGIC_NODE)
        die("%p is not a graph node", (void *)h);
    *out = n;
    return CUDA_SUCCESS;
}

static CUresult get_exec(CUgraphExec h, struct fc_exec **out)
{
    struct fc_exec *e = (struct fc_exec *)h;
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    if (e->magic != MAGIC_EXEC)
        die("%p is not a graph exec", (void *)h);
    if (!ctx_alive(e->ctx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = e;
    return CUDA_SUCCESS;
}

static struct fc_graph *graph_new(struct fc_ctx *c)
{
    struct fc_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    atomic_fetch_add(&g_live_graphs, 1);
    g->magic = MAGIC_GRAPH;
    g->ctx = c;
    g->next = c->graphs;
    if (g->next)
        g->next->prev = g;
    c->graphs = g;
    return g;
}

/* Adds a node after checking its dependencies belong to g. Takes tmpl and ev. */
static CUresult node_add(struct fc_graph *g, CUgraphNodeType type, struct fc_op *tmpl,
                         struct fc_event *ev, const CUgraphNode *deps, size_t ndeps,
                         CUgraphNode *out)
{
    CUresult r = CUDA_SUCCESS;
    struct fc_node *n = NULL;
    if (!out || (ndeps && !deps))
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < ndeps; i++) {
        struct fc_node *d;
        r = get_node(deps[i], &d);
        if (r == CUDA_SUCCESS && d->g != g)
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; r == CUDA_SUCCESS && j < i; j++)
            if (deps[j] == deps[i])
                r = CUDA_ERROR_INVALID_VALUE; /* a duplicate edge */
    }
    if (r == CUDA_SUCCESS && !(n = calloc(1, sizeof *n)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && ndeps && !(n->deps = malloc(ndeps * sizeof *n->deps)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        if (n)
            free(n);
        if (tmpl)
            op_free(tmpl);
        if (ev)
            event_unref(ev);
        return r;
    }
    n->magic = MAGIC_NODE;
    n->g = g;
    n->type = type;
    n->tmpl = tmpl;
    n->ev = ev;
    n->index = g->nnodes++;
    for (size_t i = 0; i < ndeps; i++)
        n->deps[i] = (struct fc_node *)deps[i];
    n->ndeps = n->cap = ndeps;
    if (g->ntail)
        g->ntail->next = n;
    else
        g->nhead = n;
    g->ntail = n;
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

static struct fc_node *graph_nodes_head(struct fc_graph *g)
{
    return g->nhead;
}

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    ENTER(cuGraphCreate, 1);
    struct fc_ctx *c;
    if (!phGraph || flags)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_graph *g = graph_new(c);
    if (!g)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    *phGraph = (CUgraph)g;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    ENTER(cuGraphDestroy, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        graph_free(g);
    return leave(r);
}

static int graph_use_begin(void *g);
static void graph_use_end(int slot);

/* A copy of a graph: every node (parameters copied, events referenced) and edge, in the same
 * order; each copy remembers its original for cuGraphNodeFindInClone. */
CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    ENTER(cuGraphClone, 1);
    struct fc_graph *g;
    CUresult r = phGraphClone ? get_graph(originalGraph, &g) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    int slot = graph_use_begin(g);
    struct fc_graph *c = graph_new(g->ctx);
    struct fc_node **copy = malloc((g->nnodes ? g->nnodes : 1) * sizeof *copy);
    if (!c || !copy)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (struct fc_node *n = g->nhead; r == CUDA_SUCCESS && n; n = n->next) {
        CUgraphNode deps[64], made;
        if (n->ndeps > 64) {
            r = CUDA_ERROR_NOT_SUPPORTED;
            break;
        }
        for (size_t j = 0; j < n->ndeps; j++)
            deps[j] = (CUgraphNode)copy[n->deps[j]->index];
        struct fc_op *op = NULL;
        if (n->tmpl && !(op = op_clone(n->tmpl))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        if (n->ev)
            n->ev->refs++;
        r = node_add(c, n->type, op, n->ev, deps, n->ndeps, &made);
        if (r == CUDA_SUCCESS) {
            copy[n->index] = (struct fc_node *)made;
            copy[n->index]->origin = n;
        }
    }
    graph_use_end(slot);
    free(copy);
    if (r != CUDA_SUCCESS) {
        if (c)
            graph_free(c);
        return leave(r);
    }
    *phGraphClone = (CUgraph)c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                        CUgraph hClonedGraph)
{
    ENTER(cuGraphNodeFindInClone, 1);
    struct fc_graph *c;
    CUresult r = phNode && hOriginalNode ? get_graph(hClonedGraph, &c) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    for (struct fc_node *n = c->nhead; n; n = n->next)
        if (n->origin == (const void *)hOriginalNode) {
            *phNode = (CUgraphNode)n;
            return leave(CUDA_SUCCESS);
        }
    return leave(CUDA_ERROR_INVALID_VALUE);
}

/* The function of a kernel node: func (CUkernel is not simulated), in g's context. */
static CUresult node_function(struct fc_graph *g, CUfunction func, struct fc_function **fn)
{
    CUresult r = get_function(func, fn);
    if (r == CUDA_SUCCESS && (*fn)->mod->ctx != g->ctx)
        r = CUDA_ERROR_INVALID_VALUE;
    return r;
}

static CUresult kernel_node_op(struct fc_graph *g, const CUDA_KERNEL_NODE_PARAMS *p,
                               struct fc_op **op)
{
    struct fc_function *fn;
    if (!p || p->extra || (!p->func && p->kern))
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = node_function(g, p->func, &fn);
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    return kernel_op(fn, grid, block, p->kernelParams, op);
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphAddKernelNode, 1);
    struct fc_graph *g;
    struct fc_op *op = NULL;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = nodeParams ? kernel_node_op(g, nodeParams, &op) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_KERNEL, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

static CUresult memset_node_op(const CUDA_MEMSET_NODE_PARAMS *p, struct fc_op **out)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 4) || p->height != 1 || !p->width)
        return CUDA_ERROR_INVALID_VALUE; /* 1D, 8- or 32-bit elements are simulated */
    CUresult r = memset_check(p->dst, p->elementSize, p->width);
    if (r != CUDA_SUCCESS)
        return r;
    *out = memset_op_new((void *)(uintptr_t)p->dst, p->value, p->elementSize, p->width);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    ENTER(cuGraphAddMemsetNode, 1);
    struct fc_graph *g;
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = memset_node_op(memsetParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_MEMSET, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

/* 1D copies between any two addresses (unified addressing): srcDevice/dstDevice or
 * srcHost/dstHost by memory type, WidthInBytes bytes, Height and Depth 1. */
static CUresult memcpy_node_op(const CUDA_MEMCPY3D *p, struct fc_op **out)
{
    if (!p || p->Height > 1 || p->Depth > 1 || !p->WidthInBytes || p->srcXInBytes ||
        p->dstXInBytes || p->srcY || p->dstY || p->srcZ || p->dstZ)
        return CUDA_ERROR_INVALID_VALUE;
    const void *src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost
                                                              : (const void *)(uintptr_t)p->srcDevice;
    void *dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost : (void *)(uintptr_t)p->dstDevice;
    if (!src || !dst)
        return CUDA_ERROR_INVALID_VALUE;
    *out = copy_op_new(dst, src, p->WidthInBytes);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    ENTER(cuGraphAddMemcpyNode, 1);
    struct fc_graph *g;
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = memcpy_node_op(copyParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_MEMCPY, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                    const CUgraphNode *dependencies, size_t numDependencies,
                                    const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphAddHostNode, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && (!nodeParams || !nodeParams->fn))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_op *op = host_op_new(nodeParams->fn, nodeParams->userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_HOST, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies, size_t numDependencies)
{
    ENTER(cuGraphAddEmptyNode, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_EMPTY, NULL, NULL, dependencies, numDependencies,
                          phGraphNode));
}

static CUresult event_node_add(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                               size_t ndeps, CUevent event, CUgraphNodeType type)
{
    struct fc_graph *g;
    struct fc_event *e;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = get_event(event, &e, 0);
    if (r == CUDA_SUCCESS && e->ctx != g->ctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    e->refs++;
    return node_add(g, type, NULL, e, deps, ndeps, out);
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                           const CUgraphNode *dependencies,
                                           size_t numDependencies, CUevent event)
{
    ENTER(cuGraphAddEventRecordNode, 1);
    return leave(event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event,
                                CU_GRAPH_NODE_TYPE_EVENT_RECORD));
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         CUevent event)
{
    ENTER(cuGraphAddEventWaitNode, 1);
    return leave(event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event,
                                CU_GRAPH_NODE_TYPE_WAIT_EVENT));
}

static CUresult add_dependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                 size_t numDependencies);

CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from,
                                        const CUgraphNode *to, size_t numDependencies)
{
    ENTER(cuGraphAddDependencies, 1);
    return leave(add_dependencies(hGraph, from, to, numDependencies));
}

/* What cuGetProcAddress gives for cuGraphAddDependencies from 12030 (seen on an H200): edge
 * data may be NULL or all-default edges; ports and edge types are not simulated. */
CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                           const CUgraphNode *to, const CUgraphEdgeData *edgeData,
                                           size_t numDependencies)
{
    ENTER(cuGraphAddDependencies, 1);
    for (size_t i = 0; edgeData && i < numDependencies; i++)
        if (edgeData[i].from_port || edgeData[i].to_port || edgeData[i].type)
            return leave(CUDA_ERROR_NOT_SUPPORTED);
    return leave(add_dependencies(hGraph, from, to, numDependencies));
}

static CUresult add_dependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                 size_t numDependencies)
{
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && numDependencies && (!from || !to))
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < numDependencies; i++) {
        struct fc_node *a, *b;
        r = get_node(from[i], &a);
        if (r == CUDA_SUCCESS)
            r = get_node(to[i], &b);
        if (r == CUDA_SUCCESS && (a->g != g || b->g != g || a == b))
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; r == CUDA_SUCCESS && j < b->ndeps; j++)
            if (b->deps[j] == a)
                r = CUDA_ERROR_INVALID_VALUE; /* already there */
        if (r == CUDA_SUCCESS && b->ndeps == b->cap) {
            size_t cap = b->cap ? 2 * b->cap : 4;
            struct fc_node **d = realloc(b->deps, cap * sizeof *d);
            if (!d)
                r = CUDA_ERROR_OUT_OF_MEMORY;
            else
                b->deps = d, b->cap = cap;
        }
        if (r == CUDA_SUCCESS)
            b->deps[b->ndeps++] = a;
    }
    return r;
}

/* ---- setting a graph node's parameters (not an exec's): kind must match; a kernel node keeps
 * its launch attributes; setting a live event over one destroyed since is fine (as on an
 * H200) ---- */

static CUresult node_set_op(CUgraphNode h, CUgraphNodeType type, struct fc_op *op)
{
    struct fc_node *n;
    CUresult r = get_node(h, &n);
    if (r == CUDA_SUCCESS && n->type != type)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) {
        op_free(op);
        return r;
    }
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
        struct fc_op *old = n->tmpl;
        memcpy(op->u.k.cluster, old->u.k.cluster, sizeof op->u.k.cluster);
        memcpy(op->u.k.preferred_cluster, old->u.k.preferred_cluster,
               sizeof op->u.k.preferred_cluster);
        op->u.k.cooperative = old->u.k.cooperative;
        op->u.k.cluster_policy = old->u.k.cluster_policy;
        op->u.k.mem_sync_domain = old->u.k.mem_sync_domain;
        op->u.k.priority = old->u.k.priority;
    }
    op_free(n->tmpl);
    n->tmpl = op;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                               const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphKernelNodeSetParams, 1);
    struct fc_node *n;
    struct fc_op *op = NULL;
    CUresult r = get_node(hNode, &n);
    if (r == CUDA_SUCCESS)
        r = nodeParams ? kernel_node_op(n->g, nodeParams, &op) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_KERNEL, op));
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode hNode,
                                            const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphMemsetNodeSetParams, 1);
    struct fc_op *op = NULL;
    CUresult r = memset_node_op(nodeParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_MEMSET, op));
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    ENTER(cuGraphMemcpyNodeSetParams, 1);
    struct fc_op *op = NULL;
    CUresult r = memcpy_node_op(nodeParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, op));
}

CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphHostNodeSetParams, 1);
    if (!nodeParams || !nodeParams->fn)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct fc_op *op = host_op_new(nodeParams->fn, nodeParams->userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_HOST, op));
}

static CUresult node_set_event(CUgraphNode h, CUevent event, CUgraphNodeType type)
{
    struct fc_node *n;
    struct fc_event *ev;
    CUresult r = get_node(h, &n);
    if (r == CUDA_SUCCESS)
        r = get_event(event, &ev, 0);
    if (r == CUDA_SUCCESS && (n->type != type || ev->ctx != n->g->ctx))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    ev->refs++;
    event_unref(n->ev);
    n->ev = ev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    ENTER(cuGraphEventRecordNodeSetEvent, 1);
    return leave(node_set_event(hNode, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD));
}

CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    ENTER(cuGraphEventWaitNodeSetEvent, 1);
    return leave(node_set_event(hNode, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT));
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    ENTER(cuGraphGetNodes, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && !numNodes)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    size_t i = 0;
    for (struct fc_node *n = graph_nodes_head(g); n; n = n->next, i++)
        if (nodes && i < *numNodes)
            nodes[i] = (CUgraphNode)n;
    if (!nodes || i < *numNodes)
        *numNodes = i;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    ENTER(cuGraphNodeGetType, 1);
    struct fc_node *n;
    CUresult r = type ? get_node(hNode, &n) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *type = n->type;
    return leave(r);
}

/* A kernel node's launch attribute (its value when never set: 0, a cluster of 1 x 1 x 1). */
CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               CUkernelNodeAttrValue *value_out)
{
    ENTER(cuGraphKernelNodeGetAttribute, 1);
    struct fc_node *n;
    CUresult r = value_out ? get_node(hNode, &n) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && n->type != CU_GRAPH_NODE_TYPE_KERNEL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    const struct fc_op *op = n->tmpl;
    memset(value_out, 0, sizeof *value_out);
    switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        value_out->clusterDim.x = op->u.k.cluster[0] ? op->u.k.cluster[0] : 1;
        value_out->clusterDim.y = op->u.k.cluster[1] ? op->u.k.cluster[1] : 1;
        value_out->clusterDim.z = op->u.k.cluster[2] ? op->u.k.cluster[2] : 1;
        break;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        value_out->preferredClusterDim.x = op->u.k.preferred_cluster[0];
        value_out->preferredClusterDim.y = op->u.k.preferred_cluster[1];
        value_out->preferredClusterDim.z = op->u.k.preferred_cluster[2];
        break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        value_out->cooperative = op->u.k.cooperative;
        break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        value_out->clusterSchedulingPolicyPreference =
            (CUclusterSchedulingPolicy)op->u.k.cluster_policy;
        break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        value_out->memSyncDomain = (CUlaunchMemSyncDomain)op->u.k.mem_sync_domain;
        break;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        value_out->priority = op->u.k.priority;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
        break;
    }
    return leave(r);
}

static void exec_free(struct fc_exec *e)
{
    struct fc_ctx *c = e->ctx;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->execs = e->next;
    if (e->next)
        e->next->prev = e->prev;
    for (size_t i = 0; i < e->n; i++) {
        if (e->tmpl && e->tmpl[i])
            op_free(e->tmpl[i]);
        if (e->ev && e->ev[i])
            event_unref(e->ev[i]);
    }
    if (e->last_q)
        queue_unref(e->last_q);
    free(e->type);
    free(e->tmpl);
    free(e->ev);
    free(e->node);
    free(e->dep_index);
    free(e->dep_start);
    e->magic = 0;
    free(e);
    atomic_fetch_sub(&g_live_execs, 1);
}

/* Kahn's algorithm, ties broken by insertion order. order[] gets the nodes; false on a cycle. */
static int topo_order(struct fc_graph *g, struct fc_node **order)
{
    size_t n = g->nnodes, done = 0;
    char *placed = calloc(n ? n : 1, 1);
    if (!placed)
        return -1;
    while (done < n) {
        int progress = 0;
        for (struct fc_node *x = g->nhead; x; x = x->next) {
            if (placed[x->index])
                continue;
            size_t i = 0;
            while (i < x->ndeps && placed[x->deps[i]->index])
                i++;
            if (i == x->ndeps) {
                placed[x->index] = 1;
                order[done++] = x;
                progress = 1;
            }
        }
        if (!progress)
            break;
    }
    free(placed);
    return done == n;
}

/* The exec of graph g: nodes in a topological order, with copies of their templates. */
static CUresult exec_build(struct fc_graph *g, struct fc_exec **out)
{
    size_t n = g->nnodes, nd = 0;
    for (struct fc_node *x = g->nhead; x; x = x->next)
        nd += x->ndeps;
    struct fc_exec *e = calloc(1, sizeof *e);
    struct fc_node **order = malloc((n ? n : 1) * sizeof *order);
    size_t *pos = malloc((n ? n : 1) * sizeof *pos);
    if (e) {
        e->type = calloc(n ? n : 1, sizeof *e->type);
        e->tmpl = calloc(n ? n : 1, sizeof *e->tmpl);
        e->ev = calloc(n ? n : 1, sizeof *e->ev);
        e->node = calloc(n ? n : 1, sizeof *e->node);
        e->dep_index = calloc(nd ? nd : 1, sizeof *e->dep_index);
        e->dep_start = calloc(n + 1, sizeof *e->dep_start);
    }
    CUresult r = CUDA_SUCCESS;
    if (!e || !order || !pos || !e->type || !e->tmpl || !e->ev || !e->node || !e->dep_index ||
        !e->dep_start)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    int ok = r == CUDA_SUCCESS ? topo_order(g, order) : 0;
    if (r == CUDA_SUCCESS && ok < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (r == CUDA_SUCCESS && !ok)
        r = CUDA_ERROR_INVALID_VALUE; /* a cycle */
    if (r == CUDA_SUCCESS) {
        e->magic = MAGIC_EXEC;
        e->ctx = g->ctx;
        e->src = g;
        e->n = n;
        for (size_t i = 0; i < n; i++)
            pos[order[i]->index] = i;
        size_t k = 0;
        for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
            struct fc_node *x = order[i];
            e->type[i] = x->type;
            e->node[i] = x;
            e->dep_start[i] = k;
            for (size_t j = 0; j < x->ndeps; j++)
                e->dep_index[k++] = pos[x->deps[j]->index];
            if (x->tmpl && !(e->tmpl[i] = op_clone(x->tmpl)))
                r = CUDA_ERROR_OUT_OF_MEMORY;
            if (x->ev && x->ev->h.state != ST_LIVE)
                die("instantiating a graph whose event node names event %p, destroyed since "
                    "(on an H200 cuGraphInstantiateWithFlags crashed; cloning, destroying and "
                    "launching did not)",
                    (void *)x->ev);
            if (x->ev) {
                e->ev[i] = x->ev;
                x->ev->refs++;
            }
        }
        e->dep_start[n] = k;
    }
    free(order);
    free(pos);
    if (r != CUDA_SUCCESS) {
        if (e) {
            for (size_t i = 0; i < e->n; i++) {
                if (e->tmpl && e->tmpl[i])
                    op_free(e->tmpl[i]);
                if (e->ev && e->ev[i])
                    event_unref(e->ev[i]);
            }
            free(e->type), free(e->tmpl), free(e->ev), free(e->node);
            free(e->dep_index), free(e->dep_start), free(e);
        }
        return r;
    }
    e->next = g->ctx->execs;
    if (e->next)
        e->next->prev = e;
    g->ctx->execs = e;
    atomic_fetch_add(&g_live_execs, 1);
    *out = e;
    return CUDA_SUCCESS;
}

/* A CUgraph is not internally synchronised (CUDA documentation); on the H200, threads
 * instantiating one graph at once were followed by heap corruption or a hang. The simulation
 * makes such use fail loudly: a thread inside a call that reads a graph claims it here, and
 * a second thread on the same graph at the same time aborts the process. The window is
 * widened so that tests meet an overlap when there is one. */
static _Atomic(void *) graph_users[128];

static int graph_use_begin(void *g)
{
    int mine = -1;
    for (int i = 0; i < 128 && mine < 0; i++) {
        void *none = NULL;
        if (atomic_compare_exchange_strong(&graph_users[i], &none, g))
            mine = i;
    }
    for (int i = 0; i < 128; i++)
        if (i != mine && atomic_load(&graph_users[i]) == g) {
            fprintf(stderr, "fakecuda: two threads use CUgraph %p at once (a CUgraph is not "
                            "thread-safe)\n", g);
            abort();
        }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
    return mine;
}

static void graph_use_end(int slot)
{
    if (slot >= 0)
        atomic_store(&graph_users[slot], NULL);
}

/* Instantiations of a graph an exec of which has been launched: on an H200 such an
 * instantiation, while that exec ran and another thread synchronised, stalled until the
 * queued work drained (2 of 44 trials; none from a clone of the graph). */
static _Atomic unsigned long g_inst_of_launched;

static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    struct fc_graph *g;
    if (!phGraphExec || flags)
        return CUDA_ERROR_INVALID_VALUE; /* no instantiate flag is simulated */
    CUresult r = get_graph(hGraph, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (g->exec_launched)
        atomic_fetch_add(&g_inst_of_launched, 1);
    struct fc_exec *e;
    r = exec_build(g, &e);
    if (r == CUDA_SUCCESS)
        *phGraphExec = (CUgraphExec)e;
    return r;
}

static CUresult instantiate_entry(CUgraphExec *phGraphExec, CUgraph hGraph,
                                  unsigned long long flags)
{
    ENTER(cuGraphInstantiate, 1);
    return leave(instantiate(phGraphExec, hGraph, flags));
}

/* An instantiation while another thread is inside cuGraphLaunch: on an H200 both calls can
 * then wait until the queued work drains (tens of ms behind long kernels). Counted, outside
 * the simulation's lock, by whichever of the two calls finds the other under way. */
static _Atomic long g_launching, g_instantiating;
static _Atomic unsigned long g_inst_launch_overlaps;

static void inst_begin(void)
{
    atomic_fetch_add(&g_instantiating, 1);
    if (atomic_load(&g_launching) > 0)
        atomic_fetch_add(&g_inst_launch_overlaps, 1);
}

static void inst_end(void)
{
    atomic_fetch_sub(&g_instantiating, 1);
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{
    inst_begin();
    int slot = graph_use_begin(hGraph);
    CUresult r = instantiate_entry(phGraphExec, hGraph, flags);
    graph_use_end(slot);
    inst_end();
    return r;
}

/* The five-argument form cuGetProcAddress("cuGraphInstantiate") returns, even at 12000 (seen
 * on an H200: only cuda.h maps the name to cuGraphInstantiateWithFlags). */
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer,
                                       size_t bufferSize)
{
    inst_begin();
    CUresult r = instantiate_entry(phGraphExec, hGraph, 0);
    inst_end();
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = '\0';
    return r;
}

static unsigned long g_exec_overlaps;      /* launches that waited on the exec's other stream */
static unsigned long g_exec_destroy_waits; /* exec destroys with launches still queued */

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    ENTER(cuGraphExecDestroy, 1);
    struct fc_exec *e;
    CUresult r = get_exec(hGraphExec, &e);
    /* Destroying an exec whose launches are still queued is counted; with
     * FAKECUDA_DESTROY_WAITS=1 it also waits until they have run, as a driver might (the
     * documentation promises asynchronous release, and on an H200 one thread's destroy of an
     * exec with a 2 ms launch queued returned in 22 us; an earlier slowdown of eight threads
     * launching and destroying execs turned out to be the instantiation stall, see
     * fakecuda_instantiate_launch_overlaps). */
    struct fc_queue *pq = r == CUDA_SUCCESS ? e->last_q : NULL;
    if (pq && !pq->dead &&
        ((pq->busy && pq->busy_seq <= e->last_seq) || (pq->head && pq->head->seq <= e->last_seq))) {
        g_exec_destroy_waits++;
        if (getenv("FAKECUDA_DESTROY_WAITS"))
            (void)drain(pq, e->last_seq, 0);
    }
    if (r == CUDA_SUCCESS)
        exec_free(e);
    return leave(r);
}

/* Queues one launch of e on s: a wait for the exec's previous launch when it was on another
 * queue (launches of one exec never overlap), then every node in order. Lock held. */

static CUresult exec_launch(struct fc_exec *e, struct fc_stream *s)
{
    uint64_t not_before = 0;
    if (e->src)
        e->src->exec_launched = 1;
    e->launched = 1;
    if (e->last_q && e->last_q != s->q && !e->last_q->dead) {
        struct fc_queue *pq = e->last_q; /* still running there: this launch is serialised */
        if ((pq->busy && pq->busy_seq <= e->last_seq) || (pq->head && pq->head->seq <= e->last_seq))
            g_exec_overlaps++;
        struct fc_op *w = op_new(OP_WAIT);
        if (!w)
            return CUDA_ERROR_OUT_OF_MEMORY;
        w->u.wait.ev = NULL;
        w->u.wait.q = e->last_q;
        w->u.wait.seq = e->last_seq;
        e->last_q->refs++;
        not_before = e->last_ready;
        CUresult r = submit(s, w, not_before);
        if (r != CUDA_SUCCESS)
            return r;
    }
    struct fc_op *last = NULL;
    for (size_t i = 0; i < e->n; i++) {
        struct fc_op *op = NULL;
        struct fc_event *ev = e->ev[i];
        switch (e->type[i]) {
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
            op = op_new(OP_RECORD);
            if (op) {
                op->u.rec.ev = ev;
                ev->refs++;
            }
            break;
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
            if (!ev->rec_q)
                continue; /* never recorded, or complete: nothing to wait for */
            op = op_new(OP_WAIT);
            if (op) {
                op->u.wait.ev = ev;
                ev->refs++;
                op->u.wait.q = ev->rec_q;
                op->u.wait.seq = ev->rec_seq;
                ev->rec_q->refs++;
            }
            break;
        case CU_GRAPH_NODE_TYPE_EMPTY:
            continue;
        default:
            op = op_clone(e->tmpl[i]);
            break;
        }
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = submit(s, op, not_before);
        if (r != CUDA_SUCCESS)
            return r;
        if (e->type[i] == CU_GRAPH_NODE_TYPE_EVENT_RECORD &&
            s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
            if (ev->rec_q)
                queue_unref(ev->rec_q);
            ev->rec_q = s->q;
            s->q->refs++;
            ev->rec_seq = op->seq;
            ev->rec_ready = op->ready_at;
            ev->recorded = 1;
        }
        last = op;
    }
    if (last && s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
        if (e->last_q)
            queue_unref(e->last_q);
        e->last_q = s->q;
        s->q->refs++;
        e->last_seq = last->seq;
        e->last_ready = last->ready_at;
    }
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream);

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    atomic_fetch_add(&g_launching, 1);
    if (atomic_load(&g_instantiating) > 0)
        atomic_fetch_add(&g_inst_launch_overlaps, 1);
    CUresult r = graph_launch(hGraphExec, hStream);
    atomic_fetch_sub(&g_launching, 1);
    return r;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream)
{
    ENTER(cuGraphLaunch, 1);
    struct fc_exec *e;
    struct fc_stream *s;
    CUresult r = get_exec(hGraphExec, &e);
    if (r == CUDA_SUCCESS)
        r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS && s->ctx != e->ctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = exec_launch(e, s);
    return leave(r);
}

/* The position of graph node h in exec e, or -1. */
static long exec_pos(const struct fc_exec *e, CUgraphNode h)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->node[i] == (const void *)h)
            return (long)i;
    return -1;
}

/* Replaces the template at the position of node h: the kind must match. Takes op. */
static CUresult exec_set(CUgraphExec hExec, CUgraphNode h, CUgraphNodeType type,
                         struct fc_op *op)
{
    struct fc_exec *e;
    CUresult r = get_exec(hExec, &e);
    long i = r == CUDA_SUCCESS ? exec_pos(e, h) : -1;
    if (r == CUDA_SUCCESS && (i < 0 || e->type[i] != type))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) {
        op_free(op);
        return r;
    }
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) { /* new parameters; the node's attributes stay */
        struct fc_op *old = e->tmpl[i];
        memcpy(op->u.k.cluster, old->u.k.cluster, sizeof op->u.k.cluster);
        memcpy(op->u.k.preferred_cluster, old->u.k.preferred_cluster,
               sizeof op->u.k.preferred_cluster);
        op->u.k.cooperative = old->u.k.cooperative;
        op->u.k.cluster_policy = old->u.k.cluster_policy;
        op->u.k.mem_sync_domain = old->u.k.mem_sync_domain;
        op->u.k.priority = old->u.k.priority;
    }
    op_free(e->tmpl[i]);
    e->tmpl[i] = op;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphExecKernelNodeSetParams, 1);
    struct fc_node *n;
    struct fc_op *op = NULL;
    CUresult r = get_node(hNode, &n);
    if (r == CUDA_SUCCESS)
        r = nodeParams ? kernel_node_op(n->g, nodeParams, &op) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL, op));
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                CUcontext ctx)
{
    ENTER(cuGraphExecMemsetNodeSetParams, 1);
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = memset_node_op(memsetParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, op));
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    ENTER(cuGraphExecMemcpyNodeSetParams, 1);
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = memcpy_node_op(copyParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, op));
}

CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphExecHostNodeSetParams, 1);
    if (!nodeParams || !nodeParams->fn)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct fc_op *op = host_op_new(nodeParams->fn, nodeParams->userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, op));
}

static CUresult exec_set_event(CUgraphExec hExec, CUgraphNode h, CUevent event,
                               CUgraphNodeType type)
{
    struct fc_exec *x;
    struct fc_event *ev;
    CUresult r = get_exec(hExec, &x);
    if (r == CUDA_SUCCESS)
        r = get_event(event, &ev, 0);
    long i = r == CUDA_SUCCESS ? exec_pos(x, h) : -1;
    if (r == CUDA_SUCCESS && (i < 0 || x->type[i] != type || ev->ctx != x->ctx))
        r = CUDA_ERROR_INVALID_VALUE;
    /* as on an H200: the node's event destroyed since, the update is refused */
    if (r == CUDA_SUCCESS && x->ev[i]->h.state != ST_LIVE)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    ev->refs++;
    event_unref(x->ev[i]);
    x->ev[i] = ev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUevent event)
{
    ENTER(cuGraphExecEventRecordNodeSetEvent, 1);
    return leave(exec_set_event(hGraphExec, hNode, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD));
}

CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  CUevent event)
{
    ENTER(cuGraphExecEventWaitNodeSetEvent, 1);
    return leave(exec_set_event(hGraphExec, hNode, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT));
}

/* Same topology (node count, types, dependencies in a topological order): every node's
 * parameters are copied into the exec, which keeps its own node handles. */
CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                      CUgraphExecUpdateResultInfo *resultInfo)
{
    ENTER(cuGraphExecUpdate, 1);
    struct fc_exec *e, *fresh = NULL;
    struct fc_graph *g;
    CUresult r = get_exec(hGraphExec, &e);
    if (r == CUDA_SUCCESS)
        r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && !resultInfo)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = exec_build(g, &fresh);
    if (r != CUDA_SUCCESS)
        return leave(r);
    memset(resultInfo, 0, sizeof *resultInfo);
    CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    if (fresh->n != e->n || memcmp(fresh->dep_start, e->dep_start, (e->n + 1) * sizeof(size_t)) ||
        memcmp(fresh->dep_index, e->dep_index, e->dep_start[e->n] * sizeof(size_t)))
        why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    for (size_t i = 0; why == CU_GRAPH_EXEC_UPDATE_SUCCESS && i < e->n; i++)
        if (fresh->type[i] != e->type[i]) {
            why = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
            resultInfo->errorNode = (CUgraphNode)fresh->node[i];
        } else if (e->type[i] == CU_GRAPH_NODE_TYPE_KERNEL &&
                   !fresh->tmpl[i]->u.k.cooperative != !e->tmpl[i]->u.k.cooperative) {
            /* documented: a cooperative node cannot become non-cooperative, nor the reverse */
            why = CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED;
            resultInfo->errorNode = (CUgraphNode)fresh->node[i];
        }
    if (why == CU_GRAPH_EXEC_UPDATE_SUCCESS) {
        for (size_t i = 0; i < e->n; i++) {
            /* as on an H200 (driver 580.159): the update is accepted, but a changed cluster
             * dimension is not applied to an exec that has been launched */
            if (e->launched && e->type[i] == CU_GRAPH_NODE_TYPE_KERNEL)
                memcpy(fresh->tmpl[i]->u.k.cluster, e->tmpl[i]->u.k.cluster,
                       sizeof e->tmpl[i]->u.k.cluster);
        }
        for (size_t i = 0; i < e->n; i++) { /* swap parameters, keep e's node handles */
            struct fc_op *t = e->tmpl[i];
            struct fc_event *v = e->ev[i];
            e->tmpl[i] = fresh->tmpl[i];
            e->ev[i] = fresh->ev[i];
            fresh->tmpl[i] = t;
            fresh->ev[i] = v;
        }
    }
    exec_free(fresh);
    resultInfo->result = why;
    return leave(why == CU_GRAPH_EXEC_UPDATE_SUCCESS ? CUDA_SUCCESS
                                                     : CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
}

static const char *node_type_name(CUgraphNodeType t)
{
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "KERNEL";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "EVENT_RECORD";
    default: return "OTHER";
    }
}

/* A DOT file like the driver's in outline: one record per node, labelled with its type (and
 * a kernel's name and launch shape), and an edge per dependency. */
CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
    ENTER(cuGraphDebugDotPrint, 1);
    struct fc_graph *g;
    (void)flags;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && !path)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    FILE *f = fopen(path, "w");
    if (!f)
        return leave(CUDA_ERROR_OPERATING_SYSTEM);
    fprintf(f, "digraph dot {\nsubgraph cluster_1 {\nlabel=\"graph_1\" graph[style=\"dashed\"];\n");
    for (struct fc_node *n = g->nhead; n; n = n->next) {
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL)
            fprintf(f, "\"graph_1_node_%zu\"[shape=\"record\" label=\"{KERNEL | {ID | %zu | %s\\<\\<\\<%u,%u,0\\>\\>\\>}}\"];\n",
                    n->index, n->index, g_kernels[n->tmpl->u.k.slot].name,
                    n->tmpl->u.k.grid[0], n->tmpl->u.k.block[0]);
        else
            fprintf(f, "\"graph_1_node_%zu\"[shape=\"record\" label=\"{%s | {ID | %zu}}\"];\n",
                    n->index, node_type_name(n->type), n->index);
    }
    for (struct fc_node *n = g->nhead; n; n = n->next)
        for (size_t i = 0; i < n->ndeps; i++)
            fprintf(f, "\"graph_1_node_%zu\" -> \"graph_1_node_%zu\";\n", n->deps[i]->index,
                    n->index);
    fprintf(f, "}\n}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return leave(CUDA_ERROR_OPERATING_SYSTEM);
    return leave(CUDA_SUCCESS);
}

/* Parameter layout as the H200 reports it: natural alignment (at most 8), in order;
 * CUDA_ERROR_INVALID_VALUE past the last parameter. */
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    ENTER(cuFuncGetParamInfo, 1);
    struct fc_function *fn;
    CUresult r = get_function(func, &fn);
    if (r != CUDA_SUCCESS)
        return leave(r);
    const struct fc_kernel *k = &g_kernels[fn->slot];
    if (paramIndex >= (size_t)k->nparams)
        return leave(CUDA_ERROR_INVALID_VALUE);
    size_t off = 0;
    for (size_t i = 0; i <= paramIndex; i++) {
        size_t a = k->sizes[i] >= 8 ? 8 : k->sizes[i] >= 4 ? 4 : k->sizes[i] >= 2 ? 2 : 1;
        off = (off + a - 1) & ~(a - 1);
        if (i == paramIndex)
            break;
        off += k->sizes[i];
    }
    if (paramOffset)
        *paramOffset = off;
    if (paramSize)
        *paramSize = k->sizes[paramIndex];
    return leave(CUDA_SUCCESS);
}

/* Turns the operations recorded by a capture into a chain of nodes (each depends on the one
 * before), as the driver does for work captured on one stream. */
static CUresult capture_to_nodes(struct fc_graph *g)
{
    CUgraphNode prev = NULL;
    while (g->head) {
        struct fc_op *op = g->head;
        g->head = op->next;
        if (!g->head)
            g->tail = NULL;
        g->nops--;
        op->next = NULL;
        CUgraphNodeType type;
        struct fc_event *ev = NULL;
        switch (op->kind) {
        case OP_KERNEL: type = CU_GRAPH_NODE_TYPE_KERNEL; break;
        case OP_MEMSET: type = CU_GRAPH_NODE_TYPE_MEMSET; break;
        case OP_COPY: type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
        case OP_HOSTFN: type = CU_GRAPH_NODE_TYPE_HOST; break;
        case OP_RECORD:
            type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
            ev = op->u.rec.ev;
            ev->refs++;
            op_free(op);
            op = NULL;
            break;
        default: /* OP_WAIT */
            if (!op->u.wait.ev) {
                /* a wait on another queue (a graph launch ordered after the same exec's
                 * launch elsewhere): a property of that launch, not captured work */
                op_free(op);
                continue;
            }
            type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
            ev = op->u.wait.ev;
            ev->refs++;
            op_free(op);
            op = NULL;
            break;
        }
        CUgraphNode n;
        CUresult r = node_add(g, type, op, ev, prev ? &prev : NULL, prev ? 1 : 0, &n);
        if (r != CUDA_SUCCESS)
            return r;
        prev = n;
    }
    return CUDA_SUCCESS;
}

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

/* ========================================================================================
 * Control API (fakecuda.h): not entry points, never counted or refused
 * ======================================================================================== */

int fakecuda_live_streams(void)
{
    lock();
    int n = g_live_streams;
    unlock();
    return n;
}

int fakecuda_live_events(void)
{
    lock();
    int n = g_live_events;
    unlock();
    return n;
}

unsigned long fakecuda_calls(const char *entry)
{
    int i = entry_index(entry);
    lock();
    unsigned long n = i >= 0 ? g_calls[i] : 0;
    unlock();
    return n;
}

unsigned long fakecuda_calls_here(const char *entry)
{
    int i = entry_index(entry);
    return i >= 0 ? tl_calls[i] : 0;
}

unsigned long fakecuda_calls_total(void)
{
    lock();
    unsigned long n = g_calls_total;
    unlock();
    return n;
}

void fakecuda_reset_counters(void)
{
    lock();
    memset(g_calls, 0, sizeof g_calls);
    g_calls_total = 0;
    g_calls_after_teardown = 0;
    unlock();
}

void fakecuda_fault(const char *entry, unsigned long skip, long count, CUresult err)
{
    int all = entry && strcmp(entry, "*") == 0;
    int i = all ? -1 : entry_index(entry);
    if (!all && i < 0) {
        fprintf(stderr, "fakecuda: fakecuda_fault: unknown entry point '%s' ignored\n",
                entry ? entry : "(null)");
        return;
    }
    lock();
    struct fc_fault *f = all ? &g_fault_all : &g_fault[i];
    f->active = count != 0;
    f->skip = skip;
    f->count = count < 0 ? -1 : count;
    f->err = err;
    unlock();
}

void fakecuda_fault_clear(void)
{
    lock();
    memset(g_fault, 0, sizeof g_fault);
    memset(&g_fault_all, 0, sizeof g_fault_all);
    unlock();
}

void fakecuda_teardown(void)
{
    lock();
    g_torn_down = 1;
    unlock();
}

void fakecuda_set_strict_teardown(int on)
{
    lock();
    g_strict = on != 0;
    unlock();
}

unsigned long fakecuda_calls_after_teardown(void)
{
    lock();
    unsigned long n = g_calls_after_teardown;
    unlock();
    return n;
}

void fakecuda_poison_context(CUcontext ctx, CUresult err)
{
    lock();
    struct fc_ctx *c = ctx ? (struct fc_ctx *)ctx : tl_top();
    if (c && pool_owns(&g_ctx_pool, c))
        poison(c, err);
    else if (c)
        fprintf(stderr, "fakecuda: fakecuda_poison_context: %p is not a context\n", (void *)ctx);
    unlock();
}

int fakecuda_register_kernel(const char *name, int nparams, const size_t *param_sizes,
                             fakecuda_kernel_fn fn)
{
    if (!name || !*name || strlen(name) >= FC_NAME_MAX || !fn || nparams < 0 ||
        nparams > FC_MAX_PARAMS || (nparams > 0 && !param_sizes))
        return -1;
    for (int i = 0; i < nparams; i++)
        if (param_sizes[i] == 0 || param_sizes[i] > FC_MAX_PARAM_SIZE)
            return -1;
    lock();
    int slot = kernel_find(name);
    if (slot < 0) {
        if (g_nkernels == FC_MAX_KERNELS) {
            unlock();
            return -1;
        }
        slot = g_nkernels++;
    }
    struct fc_kernel *k = &g_kernels[slot];
    memset(k, 0, sizeof *k);
    memcpy(k->name, name, strlen(name) + 1);
    k->nparams = nparams;
    for (int i = 0; i < nparams; i++)
        k->sizes[i] = param_sizes[i];
    k->fn = fn;
    unlock();
    return 0;
}

unsigned long fakecuda_exec_destroy_waits(void)
{
    lock();
    unsigned long n = g_exec_destroy_waits;
    unlock();
    return n;
}

int fakecuda_live_execs(void)
{
    return atomic_load(&g_live_execs);
}

int fakecuda_live_graphs(void)
{
    return atomic_load(&g_live_graphs);
}

unsigned long fakecuda_instantiations_of_launched_graphs(void)
{
    return atomic_load(&g_inst_of_launched);
}

unsigned long fakecuda_instantiate_launch_overlaps(void)
{
    return atomic_load(&g_inst_launch_overlaps);
}

unsigned long fakecuda_exec_overlaps(void)
{
    lock();
    unsigned long n = g_exec_overlaps;
    unlock();
    return n;
}

size_t fakecuda_slab_bytes(void)
{
    return slab_bytes;
}
