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
/* A shared variable alone in its cache line (its type padded to the line): for a word that
 * some threads write often and others read often, so that its neighbours do not pay for it. */
#define CUPOOL_LINE(type)                                                                   \
    struct {                                                                                \
        alignas(CUPOOL_CACHELINE) type v;                                                   \
    }
#define CUPOOL_PRINTF(f, a) __attribute__((format(printf, f, a)))

#define CUPOOL_RELAXED memory_order_relaxed
#define CUPOOL_ACQUIRE memory_order_acquire
#define CUPOOL_RELEASE memory_order_release
#define CUPOOL_ACQ_REL memory_order_acq_rel
#define CUPOOL_SEQ_CST memory_order_seq_cst

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

/* The growable statistics structs of cupool.h: each begins with `size_t size`, the caller's
 * sizeof. The caller's size at dst (read with memcpy: an array element's alignment is the
 * caller's business). */
static inline size_t cupool__stats_size(const void *dst)
{
    size_t n;
    __builtin_memcpy(&n, dst, sizeof(n));
    return n;
}

/* Writes the filled struct src (src_size bytes, its size field ignored) to dst, whose size
 * field says how many bytes it holds: the fields that fit, with size set to the bytes
 * written. Nothing past them is touched. */
static inline void cupool__stats_put(void *dst, void *src, size_t src_size)
{
    size_t want = cupool__stats_size(dst);
    size_t n = want < src_size ? want : src_size;
    __builtin_memcpy(src, &n, sizeof(n));
    __builtin_memcpy(dst, src, n);
}

/*
 * The read-mostly words that the hot paths load on every call, together in one cache line
 * that nothing hot writes. Each of them sat next to a variable that other threads write
 * often (the maintenance thread's lock, the anonymous-reader counters, the graph cache's LRU
 * clock), so every acquire and release could miss on a line it only reads.
 * Contract: any thread may read any field at any time (atomic loads; mag_capacity plain,
 * fixed before the first magazine). Each field is written only at a rare event: the
 * lifecycle's transitions, membarrier(2) found missing, the driver gone, a reclamation asked
 * for, a registry table grown, a grace period's phase flip, a cupool_trim(). A field that a hot path writes
 * must never be added here.
 */
struct cupool__hot {
    /* enum cupool__state (base/state.h); read through cupool__state_now() */
    alignas(CUPOOL_CACHELINE) _Atomic int state;
    /* Whether readers of the asymmetric handshakes must issue a full fence themselves: set at
     * initialisation when membarrier(2) is unavailable (an old kernel, or a seccomp filter
     * that denies it), so that the updater's side can rely on a plain fence of its own; and
     * set later if membarrier(2) starts failing (a seccomp filter installed afterwards). */
    _Atomic bool sync_fence;
    /* Set once the driver reported CUDA_ERROR_DEINITIALIZED, whatever the state was then. */
    _Atomic bool driver_gone;
    /* Reclamation that a read section asked for (pool/pool.h: cupool__reclaim_if_due). */
    _Atomic bool reclaim_due;
    /* Items per magazine (CUPOOL_MAGAZINE_SIZE), fixed at initialisation (magazine.h). */
    uint32_t mag_capacity;
    /* The grace-period phase, 0 or CUPOOL_RD_PHASE (base/sync.h: read sections). */
    _Atomic uint32_t gp_phase;
    /* The registry's published table: address | log2(slots) (registry.h). */
    _Atomic uintptr_t reg_current;
    /* The kernel layouts' generation, moved on by cupool_trim() (graph/layout.c): a pipeline's
     * reset compares it, beside the state, on every request. */
    _Atomic uint64_t fn_epoch;
};
extern struct cupool__hot cupool__hot;
_Static_assert(sizeof(struct cupool__hot) == CUPOOL_CACHELINE, "the hot words fill one line");

#endif
