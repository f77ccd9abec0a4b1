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

/* cuGraphInstantiateWithFlags, with no launch of cupool's inside the driver meanwhile. */
CUresult cupool__instantiate_gated(CUgraphExec *exec, CUgraph graph)
{
    if (!cupool__cfg.graph_gate) /* CUPOOL_GRAPH_GATE=0 */
        return CUPOOL_DRV(cupool__drv.cuGraphInstantiateWithFlags(exec, graph, 0));
    /* launches held back by earlier instantiations pass first */
    if (atomic_load(&gate_waiters)) {
        uint64_t deadline = cupool__monotonic_ns() + GATE_YIELD_NS;
        while (atomic_load(&gate_waiters) && cupool__monotonic_ns() < deadline)
            sched_yield();
    }
    atomic_fetch_add(&cupool__inst_gate, 1);
    launches_drain();
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphInstantiateWithFlags(exec, graph, 0));
    if (atomic_fetch_sub(&cupool__inst_gate, 1) == 1) { /* the last one out opens the gate */
        pthread_mutex_lock(&gate_mutex);
        pthread_cond_broadcast(&gate_open);
        pthread_mutex_unlock(&gate_mutex);
    }
    return r;
}
