/* SPDX-License-Identifier: MIT */
/* Definitions shared by every source file of the library. Internal names start with cupool__
 * and are hidden (the library is built with -fvisibility=hidden; only CUPOOL_API is exported). */
#ifndef CUPOOL_INTERNAL_H
#define CUPOOL_INTERNAL_H

#include "build_config.h" /* from configure */
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cupool.h"

#define CUPOOL_LIKELY(x) __builtin_expect(!!(x), 1)
#define CUPOOL_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* One pointer of initial-exec TLS: fast to reach, and small enough that the library can still
 * be dlopen()ed (glibc keeps a little static TLS spare for that). */
#define CUPOOL_TLS_IE __thread __attribute__((tls_model("initial-exec")))
#define CUPOOL_CACHELINE 64
#define CUPOOL_PRINTF(f, a) __attribute__((format(printf, f, a)))

#define CUPOOL_RELAXED memory_order_relaxed
#define CUPOOL_ACQUIRE memory_order_acquire
#define CUPOOL_RELEASE memory_order_release
#define CUPOOL_ACQ_REL memory_order_acq_rel

/* Single-writer counter: only its owning thread adds, any thread may read. A plain load and
 * store (no lock prefix): the fast path pays no atomic read-modify-write. */
static inline void cupool__counter_inc(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, CUPOOL_RELAXED) + 1, CUPOOL_RELAXED);
}

static inline void cupool__counter_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, CUPOOL_RELAXED) + n, CUPOOL_RELAXED);
}

#endif
