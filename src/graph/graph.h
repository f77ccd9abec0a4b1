/* SPDX-License-Identifier: MIT */
/* The graph layer's internal interface (src/graph/): what the layers above it and the unit
 * tests read of it. */
#ifndef CUPOOL_GRAPH_H
#define CUPOOL_GRAPH_H
#include <stdint.h>

/* Instantiations that began while a launch of cupool's was still inside the driver, because
 * the instantiation gate's wait for launches in flight (5 ms at most: a best effort against
 * a driver stall, not a correctness condition) ran out. Only then may an instantiation and a
 * launch overlap. Counted from the start of the process; any thread. */
extern _Atomic uint64_t cupool__gate_timeouts;

#endif
