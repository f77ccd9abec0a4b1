/* SPDX-License-Identifier: MIT */
/*
 * The library's state: UNINIT -> RUNNING (or PASSTHROUGH with CUPOOL_DISABLE=1, or FAILED
 * when the driver cannot be loaded) -> EXITING (atexit) / DEAD (the driver said
 * CUDA_ERROR_DEINITIALIZED); FORKED in a child created after initialisation; UNLOADED while
 * dlclose() takes it down. Only RUNNING takes the fast paths; every other state is handled
 * on the slow path, so the fast path checks one load of the hot line. Lifecycle (lifecycle.c)
 * makes the transitions of initialisation, exit, fork and unload; the driver loader
 * (driver.c) the one to DEAD.
 */
#ifndef CUPOOL_STATE_H
#define CUPOOL_STATE_H
#include "base/internal.h"

enum cupool__state {
    CUPOOL_ST_UNINIT = 0,
    CUPOOL_ST_RUNNING,
    CUPOOL_ST_PASSTHROUGH, /* CUPOOL_DISABLE=1: acquire creates, release destroys */
    CUPOOL_ST_FAILED,      /* driver could not be loaded: every call returns the load error */
    CUPOOL_ST_EXITING,     /* process exit has begun: no driver call ever again */
    CUPOOL_ST_DEAD,        /* driver reported CUDA_ERROR_DEINITIALIZED: no driver call again */
    CUPOOL_ST_FORKED,      /* child of fork() after initialisation: nothing works, by design */
    CUPOOL_ST_UNLOADED     /* the library is being unloaded (dlclose) */
};

/* An acquire load: a thread that sees RUNNING also sees the driver table initialisation
 * filled in (free on x86; one ordered load on Arm). */
static inline int cupool__state_now(void)
{
    return atomic_load_explicit(&cupool__hot.state, CUPOOL_ACQUIRE);
}

/* True in a child forked after initialisation: the caller must refuse (cupool__enter() gives
 * the error) before it takes any lock or allocates. */
static inline bool cupool__forked(void)
{
    return CUPOOL_UNLIKELY(cupool__state_now() == CUPOOL_ST_FORKED);
}

#endif
