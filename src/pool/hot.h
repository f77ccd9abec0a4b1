/* SPDX-License-Identifier: MIT */
/*
 * The hot path, read top to bottom: the hit on the top of the thread's magazine that every
 * public acquire tries first (its misses go to pool/acquire.c).
 *
 * Hot path, acquire: one relaxed load of the lifecycle state; for the current-context API one
 * cuCtxGetId(NULL) and a per-thread class cache; then a pop from the thread's loaded magazine.
 * Release: the thread's last-acquired record or a lock-free registry lookup (one multiply,
 * one or two loads), the ownership check, and a push onto the releasing thread's magazine. No
 * lock, no atomic read-modify-write, no driver call on release.
 *
 * Streams released without CUPOOL_RELEASE_NOT_CAPTURING are pooled "unchecked" and vetted
 * with cuStreamIsCapturing() when an acquire next takes them. Vetting there, not at release,
 * is deliberate: at acquire the current context's id matches the class's, so the context and
 * its streams are known to be alive, while a release may come after a context reset, when any
 * driver call on the old stream crashes the driver (seen on an H200, driver 580.159).
 */
#ifndef CUPOOL_POOL_HOT_H
#define CUPOOL_POOL_HOT_H
#include "base/internal.h"
#include "pool/pool.h"
#include "pool/pool_impl.h"
#include <string.h>

/* A record's kind and gen (adjacent words) as one word, and the word a record of class
 * (kind, gen32) carries: one compare proves both (a pool value forged with the other kind's
 * tag names a class of the other kind). Built through an array, so any byte order agrees. */
_Static_assert(offsetof(struct cupool__handle, gen) == offsetof(struct cupool__handle, kind) + 4,
               "kind, gen: one load");
static inline uint64_t rec_kind_gen(const struct cupool__handle *rec)
{
    uint64_t w;
    memcpy(&w, &rec->kind, 8);
    return w;
}

static inline uint64_t kind_gen(uint32_t kind, uint32_t gen32)
{
    const uint32_t w[2] = {kind, gen32}; /* as in the record */
    uint64_t x;
    memcpy(&x, w, 8);
    return x;
}

/*
 * A hit on the top of this thread's magazine for class index `index`, when the record there
 * carries the kind and gen of `kg` (kind_gen: its class's incarnation, see struct
 * cupool__handle) and is a clean idle
 * handle, or a stream released unvouched that cuStreamIsCapturing finds idle. True: handed
 * out. False: not a hit, nothing changed; the caller goes to acquire_general, which decides
 * everything again (a stream whose capture check failed is checked once more there, and
 * disposed of or its error returned).
 * No read section is needed: the magazine is this thread's, records are type-stable, and a
 * class with a registered record is never reclaimed.
 */
/* The top of slot `s` handed out (the caller checked it). */
__attribute__((always_inline)) static inline void slot_take(struct cupool__tcache *tc,
                                                            struct cupool__slot *s, uint32_t n,
                                                            struct cupool__handle *rec)
{
    s->count = n - 1;
    atomic_store_explicit(&rec->state, CUPOOL_H_OWNED, CUPOOL_RELAXED);
    cupool__counter_inc(&s->acquires);
    tc->last = rec;
}

/* slot_hit's stream released unvouched: the capture check, then the hit (pool/acquire.c).
 * Out of line, so the vouched hit saves no registers. */
__attribute__((noinline)) bool cupool__slot_hit_unchecked(struct cupool__tcache *tc,
                                                          struct cupool__slot *s,
                                                          struct cupool__mag_item it, void **out);

__attribute__((always_inline)) static inline bool slot_hit(struct cupool__tcache *tc,
                                                           uint32_t index, uint64_t kg, void **out)
{
    struct cupool__slot *s = slot_of(tc, index);
    if (CUPOOL_UNLIKELY(s == NULL || s->count == 0)) /* a count implies a loaded magazine */
        return false;
    struct cupool__mag_item it = s->loaded->items[s->count - 1];
    struct cupool__handle *rec = it.rec;
    uint32_t st = atomic_load_explicit(&rec->state, CUPOOL_RELAXED);
    if (CUPOOL_UNLIKELY(rec_kind_gen(rec) != kg))
        return false;
    if (st == CUPOOL_H_IDLE_UNCHECKED)
        return cupool__slot_hit_unchecked(tc, s, it, out);
    if (CUPOOL_UNLIKELY(st != CUPOOL_H_IDLE))
        return false;
    slot_take(tc, s, s->count, rec);
    *out = it.handle;
    return true;
}

/*
 * The acquire of a handle of `cls`: a hit (slot_hit) when the thread's magazine for it has a
 * clean top, else the general path. An explicit pool's class may be known dead (its context
 * reset): its handles are never handed out; the current-context API matched the live
 * context's id just now. Inlined into each public acquire.
 */
__attribute__((always_inline)) static inline CUresult acquire_from(struct cupool__class *cls,
                                                                   bool ctx_current, void **out)
{
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL && cupool__state_now() == CUPOOL_ST_RUNNING &&
                      (ctx_current || atomic_load_explicit(&cls->alive, CUPOOL_RELAXED))) &&
        slot_hit(tc, cls->index, kind_gen(cupool__class_kind(cls), cupool__class_gen32(cls)), out))
        return CUDA_SUCCESS;
    /* a failed capture check: checked again there */
    return cupool__acquire_general(cls, ctx_current, out);
}

#endif
