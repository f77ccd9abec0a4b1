/* SPDX-License-Identifier: MIT */
/*
 * The one reader/updater synchronisation primitive: an asymmetric handshake, as in userspace
 * RCU's membarrier flavour. Readers are frequent and must cost a plain store and a compiler
 * barrier; updaters are rare and pay for the ordering with membarrier(2).
 *
 * Contract (every use below, and the driver-call guard of base/driver.h and the graph layer's
 * instantiation gate, keep it):
 *  - Reader: marks itself in a counter of its own thread's record (struct cupool__thread),
 *    written only by that thread with a plain store, then cupool__reader_fence(); then it
 *    checks the flag the updater raises, and backs out if it is up. Wait-free.
 *  - Updater: raises its flag (a store the reader loads), then cupool__membarrier() (a barrier
 *    on every running thread), then waits for the readers' counters (cupool__wait_threads):
 *    after the barrier, a reader either saw the flag or is visible in its counter (Dekker).
 *  - Without membarrier(2) (an old kernel, a seccomp filter), cupool__hot.sync_fence is set
 *    and readers issue a full fence instead; an updater that finds no barrier to issue relies
 *    on that (see cupool__synchronize).
 *  - Threads without a record count themselves in a shared counter with an atomic
 *    read-modify-write (a full barrier), which the updater waits for too.
 * What may run together: any number of readers, with updaters of other instances; updaters of
 * one instance serialise themselves (each instance says how). Progress: readers wait-free;
 * an updater waits up to its timeout and reports failure after it.
 */
#ifndef CUPOOL_SYNC_H
#define CUPOOL_SYNC_H
#include "base/internal.h"
#include "base/thread.h"

/* The reader's fence: a compiler barrier (membarrier(2) supplies the CPU side) or, without
 * membarrier, a full fence. */
static inline void cupool__reader_fence(void)
{
    if (CUPOOL_UNLIKELY(atomic_load_explicit(&cupool__hot.sync_fence, CUPOOL_RELAXED)))
        atomic_thread_fence(memory_order_seq_cst);
    else
        atomic_signal_fence(memory_order_seq_cst);
}

/* Whether cupool__membarrier() is the expedited kind (microseconds), the condition for
 * asymmetric handshakes on a hot path. Set once at initialisation. */
extern bool cupool__membarrier_expedited;
static inline bool cupool__membarrier_ready(void)
{
    return cupool__membarrier_expedited;
}

/* The reader's mark in its own counter c (a field of its struct cupool__thread), and its end.
 * For an instance whose updater is rare (exit, unload, reclamation): the updater may pay for
 * any barrier, so the reader fences only where none exists (cupool__reader_fence). */
static inline void cupool__hs_enter(_Atomic uint32_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, CUPOOL_RELAXED) + 1, CUPOOL_RELAXED);
    cupool__reader_fence();
}

static inline void cupool__hs_leave(_Atomic uint32_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, CUPOOL_RELAXED) - 1, CUPOOL_RELEASE);
}

/* The same for an instance whose updater is frequent (the graph layer's instantiation gate:
 * one per cache miss): its updater takes membarrier(2) only in the expedited kind, so where
 * that is missing the reader fences (cupool__hs_barrier_frequent is then a fence). */
static inline void cupool__hs_enter_frequent(_Atomic uint32_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, CUPOOL_RELAXED) + 1, CUPOOL_RELAXED);
    if (CUPOOL_LIKELY(cupool__membarrier_ready()))
        atomic_signal_fence(memory_order_seq_cst); /* the CPU side: membarrier */
    else
        atomic_thread_fence(memory_order_seq_cst);
}

/* A reader without a record counts itself in a shared counter: the read-modify-write is a
 * full barrier, so no updater's barrier is needed for it. */
static inline void cupool__hs_enter_anon(_Atomic uint32_t *c)
{
    atomic_fetch_add(c, 1);
}

static inline void cupool__hs_leave_anon(_Atomic uint32_t *c)
{
    atomic_fetch_sub(c, 1);
}

/* Registers for membarrier(2) (MEMBARRIER_CMD_PRIVATE_EXPEDITED); once, at initialisation. */
void cupool__membarrier_register(void);
/* A memory barrier on every thread of the process that is running now (membarrier(2), or its
 * global variant; where membarrier fails after initialisation, a process-wide TLB flush on
 * x86). Returns false where none is available: then only this thread's fence was issued. */
bool cupool__membarrier(void);
/* True when membarrier(2) was unavailable from initialisation on: every reader has fenced
 * itself since (cupool__hot.sync_fence was set before any reader ran). */
extern bool cupool__readers_fence_since_init;
/* The updater's barrier of a frequent instance (cupool__hs_enter_frequent). */
static inline void cupool__hs_barrier_frequent(void)
{
    if (cupool__membarrier_ready())
        (void)cupool__membarrier();
    else
        atomic_thread_fence(memory_order_seq_cst);
}
/* Frees what the barrier's fallback mapped (unload). */
void cupool__sync_unload(void);

/* The monotonic clock, in ns. */
uint64_t cupool__monotonic_ns(void);

/* The updater's wait: until, in every other thread's record, the counter at offset `field` (a
 * _Atomic uint32_t of struct cupool__thread) is zero, and *anon too (threads without a
 * record): up to timeout_ns (false then). The caller has issued the barrier first. */
bool cupool__wait_threads(size_t field, _Atomic uint32_t *anon, uint64_t timeout_ns);

/* ---- Read sections: the reclamation handshake ----
 *
 * Lock-free readers (registry lookups, the graph cache's lock-free claim, explicit pools and
 * class lookups) run inside a read section; an updater that unpublished something (a
 * replaced registry table, a freed graph-cache struct, a retired class) reclaims it only
 * after cupool__synchronize() has seen every section that might have read it end. This is
 * userspace RCU's scheme, its membarrier flavour, with urcu's two-phase grace period.
 * Contract:
 *  - Reader: cupool__read_enter() / cupool__read_leave(), nestable, wait-free. The outermost
 *    enter stores the current grace-period phase with a nesting count of 1 (a plain store),
 *    inner ones add 1; then the reader's fence. A thread without a record keeps its nesting
 *    and phase in a thread-local word (cupool__read_anon_tl) and counts its outermost section
 *    in the shared counter of that phase (cupool__read_anon[phase], an atomic add, a full
 *    barrier): so it is waited for in two phases too, and overlapping anonymous readers never
 *    hold a grace period up. A section must not wait for a lock an updater may hold while it
 *    synchronizes (none does: updaters drop their locks first, and only synchronizers take the
 *    grace-period lock).
 *  - Updater: unpublish (a store the reader would load), then cupool__synchronize(): a
 *    barrier on every running thread, then, under the grace-period lock, a wait for every
 *    thread to be outside any section or inside one begun in the current phase; a flip of the
 *    phase; the same wait again; a last barrier. A thread that keeps entering sections does not
 *    hold a grace period up: its next section begins in the new phase. Returns false after
 *    timeout_ns (a section held up, or no barrier available): the updater keeps what it wanted
 *    to free for a later try.
 *  - Ordering: whatever a reader loaded inside a section that began before the unpublishing
 *    store is no longer referenced once cupool__synchronize() returned true.
 *  Must not be called by a thread that, in a section of its own, still holds a pointer to what
 *  is reclaimed (its own sections are not waited for). */
#define CUPOOL_RD_PHASE 0x80000000u
#define CUPOOL_RD_NEST (CUPOOL_RD_PHASE - 1)
extern _Atomic uint32_t cupool__read_anon[2]; /* readers without a record, by phase */
/* This thread's sections without a record: phase | nesting, as in_read. */
extern CUPOOL_TLS_IE uint32_t cupool__read_anon_tl;
#define CUPOOL_RD_IDX(v) ((v) >> 31) /* the phase bit as an index into cupool__read_anon */

/* t: the calling thread's record (cupool__self), or NULL for a thread without one. */
static inline void cupool__read_enter(struct cupool__thread *t)
{
    if (CUPOOL_LIKELY(t != NULL)) {
        uint32_t v = atomic_load_explicit(&t->in_read, CUPOOL_RELAXED);
        v = (v & CUPOOL_RD_NEST)
                ? v + 1
                : (atomic_load_explicit(&cupool__hot.gp_phase, CUPOOL_ACQUIRE) | 1);
        atomic_store_explicit(&t->in_read, v, CUPOOL_RELAXED);
        /* a grace period needs to know which readers fence themselves (cupool__synchronize) */
        if (CUPOOL_UNLIKELY(atomic_load_explicit(&cupool__hot.sync_fence, CUPOOL_RELAXED)) &&
            !atomic_load_explicit(&t->read_fenced, CUPOOL_RELAXED))
            atomic_store_explicit(&t->read_fenced, 1, CUPOOL_RELAXED);
        cupool__reader_fence();
    } else {
        uint32_t v = cupool__read_anon_tl;
        if (v & CUPOOL_RD_NEST) {
            cupool__read_anon_tl = v + 1;
        } else {
            v = atomic_load_explicit(&cupool__hot.gp_phase, CUPOOL_ACQUIRE) | 1;
            cupool__read_anon_tl = v;
            atomic_fetch_add(&cupool__read_anon[CUPOOL_RD_IDX(v)], 1);
        }
    }
}

static inline void cupool__read_leave(struct cupool__thread *t)
{
    if (CUPOOL_LIKELY(t != NULL))
        atomic_store_explicit(&t->in_read, atomic_load_explicit(&t->in_read, CUPOOL_RELAXED) - 1,
                              CUPOOL_RELEASE);
    else if (!(--cupool__read_anon_tl & CUPOOL_RD_NEST))
        atomic_fetch_sub(&cupool__read_anon[CUPOOL_RD_IDX(cupool__read_anon_tl)], 1);
}

/* True if the calling thread is inside a read section (with or without its record). */
static inline bool cupool__read_inside(void)
{
    struct cupool__thread *t = cupool__self;
    return (cupool__read_anon_tl & CUPOOL_RD_NEST) ||
           (t && (atomic_load_explicit(&t->in_read, CUPOOL_RELAXED) & CUPOOL_RD_NEST));
}

/* The updater's half (above). Returns false at once when the calling thread is inside a read
 * section of its own: two threads each waiting, inside a section, for the other's section
 * to end would only meet at their timeouts. */
bool cupool__synchronize(uint64_t timeout_ns);
/* Grace periods that waited timeout_ns without seeing every section end (count; for tests). */
extern _Atomic uint64_t cupool__gp_timeouts;

#endif
