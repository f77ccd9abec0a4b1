/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver, loaded at run time. libcuda.so.1 (or CUPOOL_DRIVER_PATH) is dlopen()ed
 * once; every entry point comes from cuGetProcAddress_v2 at the CUDA version that introduced
 * the ABI cupool calls (the plain names in libcuda are the oldest ABIs: cuStreamDestroy there
 * is not cuStreamDestroy_v2). Minimum driver: CUDA 12.0, for cuGetProcAddress_v2 and cuCtxGetId.
 */
#ifndef CUPOOL_DRIVER_H
#define CUPOOL_DRIVER_H
#include "base/internal.h"
#include "base/state.h"
#include "base/sync.h"
#include "base/thread.h"

/* X(name, version, return type, parameter list) for every entry point the library calls. */
#define CUPOOL_DRIVER_ENTRIES(X)                                                            \
    X(cuInit, 2000, CUresult, (unsigned int flags))                                         \
    X(cuDriverGetVersion, 2020, CUresult, (int *version))                                   \
    X(cuCtxGetCurrent, 4000, CUresult, (CUcontext * ctx))                                   \
    X(cuCtxSetCurrent, 4000, CUresult, (CUcontext ctx))                                     \
    X(cuCtxPushCurrent, 4000, CUresult, (CUcontext ctx))                                    \
    X(cuCtxPopCurrent, 4000, CUresult, (CUcontext * ctx))                                   \
    X(cuCtxGetId, 12000, CUresult, (CUcontext ctx, unsigned long long *id))                 \
    X(cuCtxGetStreamPriorityRange, 5050, CUresult, (int *least, int *greatest))             \
    X(cuStreamCreateWithPriority, 5050, CUresult, (CUstream * s, unsigned int f, int prio)) \
    X(cuStreamDestroy, 4000, CUresult, (CUstream s))                                        \
    X(cuStreamIsCapturing, 10000, CUresult, (CUstream s, CUstreamCaptureStatus * status))   \
    X(cuEventCreate, 2000, CUresult, (CUevent * e, unsigned int flags))                     \
    X(cuEventDestroy, 4000, CUresult, (CUevent e))

/* Entry points of the runtime-API wrappers (the primary context) and of the pipeline API
 * (graphs and eager launches). Optional: a driver without them still pools streams and
 * events; a call that needs one then returns CUDA_ERROR_NOT_SUPPORTED.
 * cuGraphInstantiate is asked for by its WithFlags name: cuGetProcAddress("cuGraphInstantiate")
 * returns the five-argument form at every version from 11000 (seen on an H200).
 * cuGraphAddDependencies at 12030 is the form with edge data (cuGraphAddDependencies_v2), and
 * so is cuGraphAddNode (cuGraphAddNode_v2). The module calls and the conditional-node calls
 * serve pipelines' conditional nodes (their setter kernel, graph/cond.c). */
#define CUPOOL_DRIVER_OPTIONAL(X)                                                           \
    X(cuDeviceGet, 2000, CUresult, (CUdevice * dev, int ordinal))                           \
    X(cuDevicePrimaryCtxRetain, 7000, CUresult, (CUcontext * ctx, CUdevice dev))            \
    X(cuDevicePrimaryCtxRelease, 11000, CUresult, (CUdevice dev))                           \
    X(cuDevicePrimaryCtxReset, 11000, CUresult, (CUdevice dev))                             \
    X(cuDevicePrimaryCtxGetState, 7000, CUresult, (CUdevice dev, unsigned *flags, int *active)) \
    X(cuCtxDestroy, 4000, CUresult, (CUcontext ctx))                                        \
    X(cuCtxGetDevice, 2000, CUresult, (CUdevice * dev))                                     \
    X(cuFuncGetParamInfo, 12040, CUresult, (CUfunction f, size_t i, size_t *off, size_t *size)) \
    X(cuLaunchKernel, 4000, CUresult,                                                       \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,       \
       unsigned bz, unsigned shmem, CUstream s, void **args, void **extra))                \
    X(cuLaunchKernelEx, 11060, CUresult,                                                    \
      (const CUlaunchConfig *config, CUfunction f, void **args, void **extra))              \
    X(cuMemsetD8Async, 3020, CUresult, (CUdeviceptr d, unsigned char v, size_t n, CUstream s)) \
    X(cuMemsetD32Async, 3020, CUresult, (CUdeviceptr d, unsigned int v, size_t n, CUstream s)) \
    X(cuMemcpyAsync, 4000, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)) \
    X(cuEventRecord, 2000, CUresult, (CUevent e, CUstream s))                               \
    X(cuEventQuery, 2000, CUresult, (CUevent e))                                            \
    X(cuStreamWaitEvent, 3020, CUresult, (CUstream s, CUevent e, unsigned flags))           \
    X(cuLaunchHostFunc, 10000, CUresult, (CUstream s, CUhostFn fn, void *data))             \
    X(cuGraphCreate, 10000, CUresult, (CUgraph * g, unsigned flags))                        \
    X(cuGraphDestroy, 10000, CUresult, (CUgraph g))                                         \
    X(cuGraphAddKernelNode, 12000, CUresult,                                                \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *d, size_t nd,                         \
       const CUDA_KERNEL_NODE_PARAMS *p))                                                   \
    X(cuGraphAddMemsetNode, 10000, CUresult,                                                \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *d, size_t nd,                         \
       const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c))                                      \
    X(cuGraphAddMemcpyNode, 10000, CUresult,                                                \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *d, size_t nd, const CUDA_MEMCPY3D *p, \
       CUcontext c))                                                                        \
    X(cuGraphAddHostNode, 10000, CUresult,                                                  \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *d, size_t nd,                         \
       const CUDA_HOST_NODE_PARAMS *p))                                                     \
    X(cuGraphAddEventRecordNode, 11040, CUresult,                                           \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *d, size_t nd, CUevent e))             \
    X(cuGraphAddEventWaitNode, 11040, CUresult,                                             \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *d, size_t nd, CUevent e))             \
    X(cuGraphInstantiateWithFlags, 11040, CUresult,                                         \
      (CUgraphExec * e, CUgraph g, unsigned long long flags))                               \
    X(cuGraphInstantiateWithParams, 12000, CUresult,                                        \
      (CUgraphExec * e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS * params))                 \
    X(cuGraphLaunch, 10000, CUresult, (CUgraphExec e, CUstream s))                          \
    X(cuGraphClone, 10000, CUresult, (CUgraph * c, CUgraph g))                              \
    X(cuGraphNodeFindInClone, 10000, CUresult, (CUgraphNode * n, CUgraphNode o, CUgraph c))  \
    X(cuGraphExecDestroy, 10000, CUresult, (CUgraphExec e))                                 \
    X(cuGraphExecKernelNodeSetParams, 12000, CUresult,                                      \
      (CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p))                     \
    X(cuGraphExecMemsetNodeSetParams, 10020, CUresult,                                      \
      (CUgraphExec e, CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c))        \
    X(cuGraphExecMemcpyNodeSetParams, 10020, CUresult,                                      \
      (CUgraphExec e, CUgraphNode n, const CUDA_MEMCPY3D *p, CUcontext c))                  \
    X(cuGraphExecHostNodeSetParams, 10020, CUresult,                                        \
      (CUgraphExec e, CUgraphNode n, const CUDA_HOST_NODE_PARAMS *p))                       \
    X(cuGraphExecEventRecordNodeSetEvent, 11040, CUresult,                                  \
      (CUgraphExec x, CUgraphNode n, CUevent e))                                            \
    X(cuGraphExecEventWaitNodeSetEvent, 11040, CUresult, (CUgraphExec x, CUgraphNode n, CUevent e)) \
    X(cuGraphDebugDotPrint, 11040, CUresult, (CUgraph g, const char *path, unsigned flags)) \
    X(cuStreamBeginCapture, 11000, CUresult, (CUstream s, CUstreamCaptureMode mode))        \
    X(cuStreamEndCapture, 10000, CUresult, (CUstream s, CUgraph * g))                       \
    X(cuGraphExecUpdate, 12000, CUresult,                                                   \
      (CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo * info))                       \
    X(cuGraphGetNodes, 10000, CUresult, (CUgraph g, CUgraphNode * nodes, size_t * n))         \
    X(cuGraphNodeGetType, 10000, CUresult, (CUgraphNode n, CUgraphNodeType * type))          \
    X(cuGraphKernelNodeGetAttribute, 11000, CUresult,                                       \
      (CUgraphNode n, CUkernelNodeAttrID attr, CUkernelNodeAttrValue * value))              \
    X(cuGraphKernelNodeSetAttribute, 11000, CUresult,                                       \
      (CUgraphNode n, CUkernelNodeAttrID attr, const CUkernelNodeAttrValue *value))         \
    X(cuGraphAddDependencies, 12030, CUresult,                                              \
      (CUgraph g, const CUgraphNode *from, const CUgraphNode *to, const CUgraphEdgeData *e, \
       size_t n))                                                                           \
    X(cuGraphKernelNodeSetParams, 12000, CUresult,                                          \
      (CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p))                                    \
    X(cuGraphMemsetNodeSetParams, 10000, CUresult,                                          \
      (CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p))                                    \
    X(cuGraphMemcpyNodeSetParams, 10000, CUresult, (CUgraphNode n, const CUDA_MEMCPY3D *p))  \
    X(cuGraphHostNodeSetParams, 10000, CUresult,                                            \
      (CUgraphNode n, const CUDA_HOST_NODE_PARAMS *p))                                      \
    X(cuGraphEventRecordNodeSetEvent, 11010, CUresult, (CUgraphNode n, CUevent e))          \
    X(cuGraphEventWaitNodeSetEvent, 11010, CUresult, (CUgraphNode n, CUevent e))            \
    X(cuModuleLoadData, 2000, CUresult, (CUmodule * m, const void *image))                  \
    X(cuModuleUnload, 2000, CUresult, (CUmodule m))                                         \
    X(cuModuleGetFunction, 2000, CUresult, (CUfunction * f, CUmodule m, const char *name))   \
    X(cuGraphConditionalHandleCreate, 12030, CUresult,                                      \
      (CUgraphConditionalHandle * h, CUgraph g, CUcontext c, unsigned dflt, unsigned flags)) \
    X(cuGraphAddNode, 12030, CUresult,                                                      \
      (CUgraphNode * n, CUgraph g, const CUgraphNode *d, const CUgraphEdgeData *e, size_t nd, \
       CUgraphNodeParams *p))

struct cupool__driver {
#define X(name, version, ret, params) ret(*name) params;
    CUPOOL_DRIVER_ENTRIES(X)
    CUPOOL_DRIVER_OPTIONAL(X)
#undef X
    CUresult (*get_proc)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status);
    int version;            /* cuDriverGetVersion, e.g. 13000 */
    char path[4096];        /* the file the dynamic linker opened */
};

/* Filled by cupool__driver_load(); read-only afterwards. */
extern struct cupool__driver cupool__drv;

/*
 * Opens `path`, resolves every entry point and calls cuInit(0). On failure returns the error
 * (see cupool_init() in cupool.h for the codes) and writes what was tried and what failed to
 * msg. Called once, under the initialisation once-guard.
 */
CUresult cupool__driver_load(const char *path, char *msg, size_t msglen);

/* Drops cupool's reference to the driver library (it stays mapped: opened RTLD_NODELETE). */
void cupool__driver_unload(void);

/* cupool_driver_get_proc() behind the public checks. */
CUresult cupool__driver_get_proc(const char *symbol, int version, void **pfn);

/* The driver said CUDA_ERROR_DEINITIALIZED: RUNNING or PASSTHROUGH become DEAD. */
void cupool__driver_died(void);

/* Records what a driver call returned: CUDA_ERROR_DEINITIALIZED moves the library to DEAD.
 * Returns `result`. Every guarded call (CUPOOL_DRV) goes through it. */
static inline CUresult cupool__driver_result(CUresult result)
{
    if (CUPOOL_UNLIKELY(result == CUDA_ERROR_DEINITIALIZED))
        cupool__driver_died();
    return result;
}

/* ---- Driver-call guard ----
 * Every driver call cupool makes is bracketed by cupool__drv_begin()/_end() (CUPOOL_DRV), so
 * that once the process starts exiting (or the library is unloaded) no new call starts and
 * the ones in flight are waited for before the driver's own exit handlers run. The calling
 * side costs a plain store, a compiler barrier and a load; the exiting side pays for the
 * ordering with membarrier(2): the handshake of base/sync.h, whose flag is the lifecycle
 * state and whose counter is the thread record's in_driver. */
extern _Atomic uint32_t cupool__drv_anon;     /* calls in flight on threads without a record */
extern CUPOOL_TLS_IE bool cupool__closer;     /* this thread is closing the library */

static inline void cupool__drv_end(_Atomic uint32_t *c)
{
    if (CUPOOL_UNLIKELY(c == &cupool__drv_anon))
        cupool__hs_leave_anon(c);
    else
        cupool__hs_leave(c);
}

/* May this thread call the driver now? In RUNNING or PASSTHROUGH, or as the thread closing
 * the library while the driver has not said it is gone. */
static inline bool cupool__driver_callable(void)
{
    int st = cupool__state_now();
    return CUPOOL_LIKELY(st == CUPOOL_ST_RUNNING || st == CUPOOL_ST_PASSTHROUGH) ||
           (cupool__closer && !atomic_load_explicit(&cupool__hot.driver_gone, CUPOOL_RELAXED));
}

/* Marks a driver call in flight; NULL when the driver may not be called any more (exit,
 * unload, fork, driver torn down). */
static inline _Atomic uint32_t *cupool__drv_begin(void)
{
    struct cupool__thread *t = cupool__self;
    _Atomic uint32_t *c;
    if (CUPOOL_LIKELY(t != NULL)) {
        c = &t->in_driver;
        cupool__hs_enter(c);
    } else {
        c = &cupool__drv_anon;
        cupool__hs_enter_anon(c);
    }
    if (CUPOOL_LIKELY(cupool__driver_callable()))
        return c;
    cupool__drv_end(c);
    return NULL;
}

/* The same guard for a hit (pool/hot.h): a thread with a record `t`, in RUNNING only. Any
 * other state, PASSTHROUGH and the closing thread's calls included, is false here, and the
 * hit's general path decides with cupool__drv_begin(). No thread-local load, no branch on a
 * thread without a record. True: the driver may be called until cupool__drv_end_hit(t). */
static inline bool cupool__drv_begin_hit(struct cupool__thread *t)
{
    cupool__hs_enter(&t->in_driver);
    if (CUPOOL_LIKELY(cupool__state_now() == CUPOOL_ST_RUNNING))
        return true;
    cupool__hs_leave(&t->in_driver);
    return false;
}

static inline void cupool__drv_end_hit(struct cupool__thread *t)
{
    cupool__hs_leave(&t->in_driver);
}

/* Evaluates a driver call under the guard, recording CUDA_ERROR_DEINITIALIZED (which moves
 * the library to DEAD); returns CUDA_ERROR_DEINITIALIZED without calling when the driver may
 * no longer be called. */
#define CUPOOL_DRV(call)                                                                    \
    __extension__({                                                                         \
        _Atomic uint32_t *drv_guard_ = cupool__drv_begin();                                 \
        CUresult drv_r_ = CUDA_ERROR_DEINITIALIZED;                                         \
        if (drv_guard_) {                                                                   \
            drv_r_ = cupool__driver_result(call);                                           \
            cupool__drv_end(drv_guard_);                                                    \
        }                                                                                   \
        drv_r_;                                                                             \
    })

/* Waits (at most about a second) until no other thread has a driver call in flight. The
 * caller has already moved the state out of RUNNING/PASSTHROUGH, so none can start. */
void cupool__driver_quiesce(void);


#endif
