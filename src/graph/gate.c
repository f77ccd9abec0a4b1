/* SPDX-License-Identifier: MIT */
/*
 * The instantiation gate: no instantiation overlaps a launch of cupool's inside the driver
 * (one of the handshakes of base/sync.h).
 */
#include "base/internal.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/layer.h"
#include "base/lifecycle.h"
#include "pool/maint.h"
#include "pool/pool.h"
#include "graph/graph.h"
#include "graph/graph_impl.h"
#include "graph/gate.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

/* ---- the instantiation gate ----
 * On the H200 (driver 580.159.04), a cuGraphInstantiate that runs while another thread is
 * inside cuGraphLaunch can make both calls, and the driver calls of other threads meanwhile,
 * wait until the queued work drains: with 2 ms kernels queued 50 deep, stalls of 10 to
 * 100 ms, in a quarter of the trials, with or without a graph shared between the threads;
 * with the two kept apart by a lock, none in 12 trials (docs/design.md). One thread
 * instantiating while work is queued is not affected. So cupool never instantiates while one
 * of its own launches (or exec updates, or completion-event records) is inside the driver:
 * an instantiation closes the gate and waits for those in flight (a few microseconds each);
 * a launch that finds the gate closed waits for the instantiations to end. Instantiations
 * may run at once (each is of a graph of its own, see exec_new_of): one after the other, the
 * last of eight threads starting together instantiated while the first were already
 * synchronising, and stalled again (3.8x instead of 7.9x in 1 to 3 runs of 10). A section
 * pays a plain store and a load: the handshake of base/sync.h, as a frequent instance (the
 * instantiating side pays with membarrier(2), or, where the expedited kind is missing, each
 * section with a fence). */
_Atomic uint32_t cupool__inst_gate;   /* instantiations starting or running (at once) */
_Atomic uint32_t cupool__launch_anon; /* gated launches of threads without a cache */
/* Launches held at the gate go first: an instantiation waits (GATE_YIELD_NS at most) until
 * none is waiting before it closes the gate again, so that back-to-back instantiations on
 * other threads cannot hold a launch back for longer than about one of them. */
static _Atomic uint32_t gate_waiters;
/* Only for the gate_open condition; nests with no other cupool lock (docs/design.md, "Locks"). */
static pthread_mutex_t gate_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_open = PTHREAD_COND_INITIALIZER;
#define GATE_YIELD_NS 2000000u
#define GATE_DRAIN_NS 5000000u

/* A launch that found the gate closed (gate_enter, graph_impl.h). */
__attribute__((noinline)) void cupool__gate_wait(_Atomic uint32_t *c)
{
    /* an instantiation is starting or running: wait for the gate to open, ahead of the next
     * instantiation (see gate_waiters) */
    atomic_fetch_add(&gate_waiters, 1);
    do {
        pthread_mutex_lock(&gate_mutex);
        while (atomic_load(&cupool__inst_gate))
            pthread_cond_wait(&gate_open, &gate_mutex);
        pthread_mutex_unlock(&gate_mutex);
    } while (!gate_try(c));
    atomic_fetch_sub(&gate_waiters, 1);
}

_Atomic uint64_t cupool__gate_timeouts;

/* Waits until no other thread is inside a gated section: GATE_DRAIN_NS at most (a launch
 * blocked on a full queue, or its thread descheduled, is not waited out: the gate is a best
 * effort against a driver stall, not a correctness condition). The updater side of the
 * gate's handshake. */
static void launches_drain(void)
{
    cupool__hs_barrier_frequent();
    if (!cupool__wait_threads(offsetof(struct cupool__thread, in_launch), &cupool__launch_anon,
                              GATE_DRAIN_NS))
        atomic_fetch_add_explicit(&cupool__gate_timeouts, 1, CUPOOL_RELAXED);
}

/* Execs instantiated with an upload on their launch stream (graph statistics). */
_Atomic uint64_t cupool__st_uploads;

/* What CUgraphInstantiateResult says, for messages. */
static const char *instantiate_result_text(CUgraphInstantiateResult r)
{
    switch ((int)r) {
    case CUDA_GRAPH_INSTANTIATE_SUCCESS:
        return "CUDA_GRAPH_INSTANTIATE_SUCCESS";
    case CUDA_GRAPH_INSTANTIATE_ERROR:
        return "CUDA_GRAPH_INSTANTIATE_ERROR (an invalid value or an unexpected error)";
    case CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE:
        return "CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE (a cycle, or another invalid structure)";
    case CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED:
        return "CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED";
    case CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED:
        return "CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED";
    default:
        return "an instantiation result unknown to this cupool";
    }
}

/* May a new exec be uploaded on *upload as it is instantiated? With CUPOOL_GRAPH_UPLOAD (on
 * by default), a driver with cuGraphInstantiateWithParams, and a stream that is not capturing
 * (an upload is stream work; a capture would take it, or refuse it). */
static bool upload_wanted(const CUstream *upload)
{
    if (!upload || !cupool__cfg.graph_upload || !cupool__drv.cuGraphInstantiateWithParams)
        return false;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUPOOL_DRV(cupool__drv.cuStreamIsCapturing(*upload, &cs)) == CUDA_SUCCESS &&
           cs == CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The instantiation: cuGraphInstantiateWithParams with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD on
 * *upload when `up`, so that the exec's first launch does not carry its upload (its result
 * info read on failure); else cuGraphInstantiateWithFlags, as before there was an upload (a
 * driver without cuGraphInstantiateWithParams, CUPOOL_GRAPH_UPLOAD=0, a capture's stream). */
static CUresult instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags,
                            const CUstream *upload, bool up)
{
    if (!up) {
        CUresult r = CUPOOL_DRV(cupool__drv.cuGraphInstantiateWithFlags(exec, graph, flags));
        if (r != CUDA_SUCCESS)
            return cupool__fail(r, "cuGraphInstantiateWithFlags (flags 0x%llx) failed", flags);
        return CUDA_SUCCESS;
    }
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof(ip));
    ip.flags = flags | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    ip.hUploadStream = *upload;
    ip.result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphInstantiateWithParams(exec, graph, &ip));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGraphInstantiateWithParams (flags 0x%llx, uploading on the "
                               "launch stream) failed: %s%s",
                            (unsigned long long)ip.flags, instantiate_result_text(ip.result_out),
                            ip.hErrNode_out ? "; the driver named a node at fault" : "");
    atomic_fetch_add_explicit(&cupool__st_uploads, 1, CUPOOL_RELAXED);
    return CUDA_SUCCESS;
}

/* Instantiates graph into *exec with flags (the entry's), with no launch of cupool's inside
 * the driver meanwhile; uploads it on *upload (the stream of the launch it is for; NULL:
 * none) where it can (instantiate()). On failure the error says what was tried. */
CUresult cupool__instantiate_gated(CUgraphExec *exec, CUgraph graph, unsigned long long flags,
                                   const CUstream *upload)
{
    bool up = upload_wanted(upload);
    if (!cupool__cfg.graph_gate) /* CUPOOL_GRAPH_GATE=0 */
        return instantiate(exec, graph, flags, upload, up);
    /* launches held back by earlier instantiations pass first */
    if (atomic_load(&gate_waiters)) {
        uint64_t deadline = cupool__monotonic_ns() + GATE_YIELD_NS;
        while (atomic_load(&gate_waiters) && cupool__monotonic_ns() < deadline)
            sched_yield();
    }
    atomic_fetch_add(&cupool__inst_gate, 1);
    launches_drain();
    CUresult r = instantiate(exec, graph, flags, upload, up);
    if (atomic_fetch_sub(&cupool__inst_gate, 1) == 1) { /* the last one out opens the gate */
        pthread_mutex_lock(&gate_mutex);
        pthread_cond_broadcast(&gate_open);
        pthread_mutex_unlock(&gate_mutex);
    }
    return r;
}
