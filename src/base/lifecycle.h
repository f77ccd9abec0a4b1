/* SPDX-License-Identifier: MIT */
/*
 * Lifecycle: initialisation, exit, fork and unload, which move the state of base/state.h.
 */
#ifndef CUPOOL_LIFECYCLE_H
#define CUPOOL_LIFECYCLE_H
#include "base/internal.h"
#include "base/state.h"

/*
 * Initialises once (configuration, driver) and returns CUDA_SUCCESS when the library may
 * call the driver (RUNNING or PASSTHROUGH); otherwise the state's error code, with a message
 * for cupool_error_string(). For acquire-like calls.
 */
CUresult cupool__enter(void);

/* Registers, once, the exit handler that tells the destructor the process is ending; at the
 * library's first use (first initialisation attempt, first thread cache). */
void cupool__exit_marker_register(void);

#endif
