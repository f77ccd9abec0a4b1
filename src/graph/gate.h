/* SPDX-License-Identifier: MIT */
/* The instantiation gate (graph/gate.c): the launching side, inline, and the instantiation
 * that closes it. */
#ifndef CUPOOL_GRAPH_GATE_H
#define CUPOOL_GRAPH_GATE_H
#include "graph/graph_impl.h"

extern _Atomic uint32_t cupool__launch_anon; /* gated launches of threads without a cache */
extern _Atomic uint32_t cupool__inst_gate;   /* instantiations starting or running */
/* Instantiates graph with flags, with no launch of cupool's inside the driver meanwhile, and
 * uploads the exec on *upload (NULL: no upload) where it can (gate.c). */
CUresult cupool__instantiate_gated(CUgraphExec *exec, CUgraph graph, unsigned long long flags,
                                   const CUstream *upload);
extern _Atomic uint64_t cupool__st_uploads; /* execs uploaded as they were instantiated */
/* A launch that found the gate closed waits here. */
void cupool__gate_wait(_Atomic uint32_t *c);

static inline void gate_leave(_Atomic uint32_t *c)
{
    if (!c)
        return;
    if (CUPOOL_UNLIKELY(c == &cupool__launch_anon))
        cupool__hs_leave_anon(c);
    else
        cupool__hs_leave(c);
}

/* Counts this thread in and reports whether the gate is open (if not, it is counted out
 * again): the reader side of the gate's handshake (base/sync.h, a frequent instance; its flag
 * is cupool__inst_gate, its counters the records' in_launch). */
static inline bool gate_try(_Atomic uint32_t *c)
{
    if (CUPOOL_LIKELY(c != &cupool__launch_anon))
        cupool__hs_enter_frequent(c);
    else
        cupool__hs_enter_anon(c);
    if (CUPOOL_LIKELY(!atomic_load_explicit(&cupool__inst_gate, CUPOOL_RELAXED)))
        return true;
    gate_leave(c);
    return false;
}

/* The gated sections in flight: this thread's (in its cache), or the shared count of threads
 * without a cache. */
static inline _Atomic uint32_t *gate_count(void)
{
    struct cupool__tcache *tc = cupool__tl;
    return CUPOOL_LIKELY(tc != NULL) ? &tc->th.in_launch : &cupool__launch_anon;
}

/* Enters a section of driver calls on graphs, execs and their events that no instantiation
 * of cupool's may overlap (graph/gate.c); returns what gate_leave() takes (NULL: the gate is
 * off). Sections do not nest, and inside one this thread must not instantiate. */
static inline _Atomic uint32_t *gate_enter(void)
{
    if (CUPOOL_UNLIKELY(!cupool__cfg.graph_gate))
        return NULL;
    _Atomic uint32_t *c = gate_count();
    if (CUPOOL_UNLIKELY(!gate_try(c)))
        cupool__gate_wait(c);
    return c;
}

#endif
