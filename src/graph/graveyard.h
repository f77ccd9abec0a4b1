/* SPDX-License-Identifier: MIT */
/* The graveyard (graph/graveyard.c): graphs and execs whose launches may still run, and the
 * launch path's nudge to reap them. */
#ifndef CUPOOL_GRAPH_GRAVEYARD_H
#define CUPOOL_GRAPH_GRAVEYARD_H
#include "graph/graph_impl.h"

extern _Atomic int cupool__graves_due;      /* graves waiting for a reap */
/* The maintenance thread watches the graveyard: set (by exchange, sequentially consistent) by
 * the launch that kicks the thread, before the kick; cleared by the thread once no grave it
 * can see the end of is left, after which it looks at cupool__graves_due once more (the
 * handshake: a launch that buried a grave either kicks or leaves it to that look). */
extern _Atomic bool cupool__graves_watched;
/* Test hook: called after a launch's kick of the thread for graves (NULL: none). */
extern void (*cupool__graves_kicked_hook)(void);
/* Destroys the graves whose work has finished (all: every one, at close). */
void cupool__graves_reap(bool all);

/* After a launch, while graves are due: the maintenance thread reaps them (maint.h); without
 * it (CUPOOL_BACKGROUND=0, or it could not start) the launching thread does, one launch in 16. */
static inline void graves_maybe_reap(void)
{
    static CUPOOL_TLS_IE unsigned tick;
    if (CUPOOL_LIKELY(atomic_load_explicit(&cupool__graves_due, CUPOOL_RELAXED) <= 0))
        return;
    /* the thread watches the graveyard until no grave it can see the end of is left: one
     * kick, not one per launch. The watch is set before the kick: set after it, a whole round
     * of the thread (the reap, the watch cleared) could end in between, and the late store
     * then left the watch on with nobody watching, for good. */
    if (atomic_load_explicit(&cupool__graves_watched, CUPOOL_RELAXED) ||
        atomic_exchange(&cupool__graves_watched, true))
        return;
    if (cupool__maint_kick(CUPOOL_MAINT_GRAVES)) {
        if (CUPOOL_UNLIKELY(cupool__graves_kicked_hook != NULL))
            cupool__graves_kicked_hook();
        return;
    }
    atomic_store(&cupool__graves_watched, false); /* no thread: this launch reaps, now and then */
    if ((++tick & 15) == 0)
        cupool__graves_reap(false);
}

#endif
