/* SPDX-License-Identifier: MIT */
/* The graveyard (graph/graveyard.c): graphs and execs whose launches may still run, and the
 * launch path's nudge to reap them. */
#ifndef CUPOOL_GRAPH_GRAVEYARD_H
#define CUPOOL_GRAPH_GRAVEYARD_H
#include "graph/graph_impl.h"

extern _Atomic int cupool__graves_due;      /* graves waiting for a reap */
extern _Atomic bool cupool__graves_watched; /* the maintenance thread watches them */
/* Destroys the graves whose work has finished (all: every one, at close). */
void cupool__graves_reap(bool all);

/* After a launch, while graves are due: the maintenance thread reaps them (maint.h); without
 * it (CUPOOL_BACKGROUND=0, or it could not start) the launching thread does, one launch in 16. */
static inline void graves_maybe_reap(void)
{
    static CUPOOL_TLS_IE unsigned tick;
    if (CUPOOL_LIKELY(atomic_load_explicit(&cupool__graves_due, CUPOOL_RELAXED) <= 0))
        return;
    /* the thread watches the graveyard until it is empty: one kick, not one per launch */
    if (atomic_load_explicit(&cupool__graves_watched, CUPOOL_RELAXED))
        return;
    if (cupool__maint_kick(CUPOOL_MAINT_GRAVES)) {
        atomic_store_explicit(&cupool__graves_watched, true, CUPOOL_RELAXED);
        return;
    }
    if ((++tick & 15) == 0)
        cupool__graves_reap(false);
}

#endif
