/* SPDX-License-Identifier: MIT */
/* Error reporting: the per-thread message behind cupool_error_string(), and logging. */
#ifndef CUPOOL_ERROR_H
#define CUPOOL_ERROR_H
#include "base/internal.h"

#define CUPOOL_ERRMSG_MAX 512

enum cupool__log_level {
    CUPOOL_LOG_NONE = 0,
    CUPOOL_LOG_ERROR = 1,
    CUPOOL_LOG_WARN = 2,
    CUPOOL_LOG_INFO = 3,
    CUPOOL_LOG_DEBUG = 4
};

/* Records a message for cupool_error_string() on the calling thread and returns `result`,
 * so error paths read `return cupool__fail(CUDA_ERROR_INVALID_VALUE, "...", ...);`.
 * Takes no lock and allocates nothing of cupool's (the message lives in the thread's own TLS):
 * safe in a forked child whose parent held any of cupool's locks at fork(). */
CUresult cupool__fail(CUresult result, const char *fmt, ...) CUPOOL_PRINTF(2, 3);

/* Writes "cupool: <message>\n" to stderr with one write(2) if `level` is enabled by CUPOOL_LOG.
 * Safe at exit and in signal-free contexts; never allocates. */
void cupool__log(int level, const char *fmt, ...) CUPOOL_PRINTF(2, 3);

/* The level CUPOOL_LOG selected (CUPOOL_LOG_WARN until the configuration is read). */
extern int cupool__log_level;

#endif
