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
 *
 * A hit that calls the driver does so under the hit guard (cupool__drv_begin_hit,
 * base/driver.h): the driver-call guard of a thread with a record, in RUNNING only, whose load
 * of the lifecycle state is the hit's own check of it.
 *
 * Read top to bottom: the record's words; the out-of-line paths every hit falls back to; the
 * hit on a magazine's top (slot_hit, acquire_from); the current-context acquire
 * (current_acquire); the release (release_handle); the explicit pools' acquire and release
 * (pool_acquire_hit, pool_release_hit). Each public acquire and release inlines one of these;
 * everything else is out of line in pool/acquire.c and pool/api.c, reached by tail calls.
 */
#ifndef CUPOOL_POOL_HOT_H
#define CUPOOL_POOL_HOT_H
#include "base/internal.h"
#include "pool/pool.h"
#include "pool/pool_impl.h"
#include "base/driver.h"
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

/* ---- the out-of-line paths the hits fall back to (pool/acquire.c, pool/api.c) ---- */
struct cupool__class_ops;
/* The release of a handle other than the thread's last acquired one: a registry lookup. */
CUresult cupool__release_lookup(const struct cupool__class_ops *ops, struct cupool__class *expect,
                                void *h, uint32_t idle_state);
/* Every release but the fast one: other lifecycle states, refusals, a full magazine. */
CUresult cupool__release_general(const struct cupool__class_ops *ops, struct cupool__class *expect,
                                 void *h, uint32_t idle_state);
/* The explicit pools' general acquire (`tried`: the hit failed already) and release. */
CUresult cupool__pool_acquire_tail(const void *pool, const struct cupool__class_ops *ops,
                                   void **out, bool tried);
CUresult cupool__pool_release_general(const void *pool, const struct cupool__class_ops *ops,
                                      void *h, uint32_t idle_state);
/* A hit whose way out found reclamation due. */
CUresult cupool__hit_then_reclaim(void);

/* ---- the hit on a magazine's top ---- */

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
                      atomic_load_explicit(&cls->alive, CUPOOL_RELAXED)) &&
        slot_hit(tc, cls->index, kind_gen(cupool__class_kind(cls), cupool__class_gen32(cls)), out))
        return CUDA_SUCCESS;
    /* a failed capture check: checked again there */
    return cupool__acquire_general(cls, ctx_current, out);
}

/* ---- the current-context acquire ---- */

/* The class-cache set of (context id, key): a multiplicative hash of both, so that keys
 * differing only in high bits (priority -4 is 0xfffffffc) spread over the sets. */
static inline struct cupool__cc_entry *cc_set(struct cupool__tcache *tc, cupool_kind_t kind,
                                              unsigned long long id, uint64_t key)
{
    uint64_t h = ((uint64_t)id ^ (key * UINT64_C(0x9E3779B97F4A7C15))) *
                 UINT64_C(0xD6E8FEB86659FD93);
    return tc->cc[kind][h >> (64 - 5)]; /* CUPOOL_CC_SETS == 32 */
}

_Static_assert(CUPOOL_CC_SETS == 32 && CUPOOL_CC_WAYS == 2,
               "cc_set and current_acquire assume 32 x 2");

/* The class-cache key of (flags, requested priority), and back. */
static inline uint64_t cc_key(unsigned int flags, int priority)
{
    return (uint64_t)flags << 32 | (uint32_t)priority;
}
static inline unsigned int cc_key_flags(uint64_t key)
{
    return (unsigned int)(key >> 32);
}
static inline int cc_key_priority(uint64_t key)
{
    return (int)(uint32_t)key;
}

static inline bool cc_match(const struct cupool__cc_entry *e, unsigned long long id, uint64_t key)
{
    return e->ctx_id == id && e->key == key && e->cls != NULL;
}

/* The current-context acquire's ways off the hit (pool/acquire.c), each ending as a public
 * acquire does (cupool__reclaim_if_due). general: the whole acquire (no thread record yet, a
 * state other than RUNNING); refused: cuCtxGetId(NULL) failed with r (recorded already); miss:
 * anything else, with the current context's id. */
CUresult cupool__current_general(const struct cupool__class_ops *ops, uint64_t key, void **out);
CUresult cupool__current_refused(const struct cupool__class_ops *ops, CUresult r);
CUresult cupool__current_miss(const struct cupool__class_ops *ops, unsigned long long id,
                              uint64_t key, void **out);

/*
 * The current-context acquire. The hit, both driver calls under one hit guard
 * (cupool__drv_begin_hit): cuCtxGetId(NULL); the thread's class cache; the top of its
 * magazine for that class, whose record must carry the entry's pool word (the class's kind,
 * index and gen: the same incarnation) and be idle; for a stream released unvouched,
 * cuStreamIsCapturing. A class retired while its context still answers with the id
 * (cupool_context_release) hands nothing out: its `alive` is checked. Anything else tail-calls
 * one of the ways above, which decide everything again. Inlined into each public acquire.
 */
__attribute__((always_inline)) static inline CUresult
current_acquire(const struct cupool__class_ops *ops, cupool_kind_t kind, unsigned int flags,
                int priority, void **out)
{
    struct cupool__tcache *tc = cupool__tl;
    uint64_t key = cc_key(flags, priority);
    if (CUPOOL_UNLIKELY(tc == NULL || !cupool__drv_begin_hit(cupool__th(tc))))
        return cupool__current_general(ops, key, out);
    unsigned long long id;
    CUresult r;
    {
        /* the address taken only in here: the ways out can be tail calls */
        unsigned long long got;
        r = cupool__drv.cuCtxGetId(NULL, &got);
        id = got;
    }
    if (CUPOOL_UNLIKELY(r != CUDA_SUCCESS)) {
        cupool__drv_end_hit(cupool__th(tc));
        return cupool__current_refused(ops, cupool__driver_result(r));
    }
    struct cupool__cc_entry *e = cc_set(tc, kind, id, key);
    if (e->ctx_id != id || e->key != key)
        e++; /* way 1 (a fill reuses the entry of its own key: one entry per key at most) */
    struct cupool__slot *s;
    struct cupool__class *cls;
    if (CUPOOL_LIKELY(e->ctx_id == id && e->key == key && (cls = e->cls) != NULL &&
                      atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) &&
                      (s = slot_of(tc, cupool__pool_word_index(e->word))) != NULL &&
                      s->count != 0)) {
        struct cupool__mag_item it = s->loaded->items[s->count - 1];
        uint32_t st = atomic_load_explicit(&it.rec->state, CUPOOL_RELAXED);
        if (CUPOOL_LIKELY(it.rec->pool_word == e->word)) {
            bool hit = st == CUPOOL_H_IDLE;
            if (kind == CUPOOL_KIND_STREAM && st == CUPOOL_H_IDLE_UNCHECKED) {
                CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
                hit = cupool__driver_result(cupool__drv.cuStreamIsCapturing(
                          (CUstream)it.handle, &cs)) == CUDA_SUCCESS &&
                      cs == CU_STREAM_CAPTURE_STATUS_NONE;
            }
            if (CUPOOL_LIKELY(hit)) {
                cupool__drv_end_hit(cupool__th(tc));
                slot_take(tc, s, s->count, it.rec);
                *out = it.handle;
                if (CUPOOL_UNLIKELY(atomic_load_explicit(&cupool__hot.reclaim_due,
                                                         CUPOOL_RELAXED)))
                    return cupool__hit_then_reclaim();
                return CUDA_SUCCESS;
            }
        }
    }
    cupool__drv_end_hit(cupool__th(tc));
    return cupool__current_miss(ops, id, key, out);
}

/* ---- the release ---- */

/* Pushes an owned record onto this thread's loaded magazine for class index `index` when it
 * has room, in `idle_state`; false otherwise (nothing changed). */
__attribute__((always_inline)) static inline bool slot_push(struct cupool__tcache *tc,
                                                            uint32_t index,
                                                            struct cupool__handle *rec, void *h,
                                                            uint32_t idle_state)
{
    struct cupool__slot *s = slot_of(tc, index);
    if (CUPOOL_UNLIKELY(s == NULL || s->count >= s->limit))
        return false;
    atomic_store_explicit(&rec->state, idle_state, CUPOOL_RELAXED);
    s->loaded->items[s->count++] = (struct cupool__mag_item){rec, h};
    cupool__counter_inc(&s->releases);
    return true;
}

/* Pushes a record found for `h` onto this thread's magazine if every check passes (a record
 * of `kind`, owned, of class `expect` unless that is NULL); false otherwise (the general path
 * then decides). */
__attribute__((always_inline)) static inline bool
release_push(cupool_kind_t kind, struct cupool__class *expect, struct cupool__tcache *tc,
             struct cupool__handle *rec, void *h, uint32_t idle_state)
{
    /* Everything the decision needs is in the record's own cache line. A handle of a context
     * known to be gone may land in its dead class's magazine here: harmless, a dead class
     * hands nothing out, and trim forgets its handles without a driver call. */
    if (CUPOOL_LIKELY(cupool__state_now() == CUPOOL_ST_RUNNING &&
                      rec->kind == (uint32_t)kind &&
                      atomic_load_explicit(&rec->state, CUPOOL_RELAXED) == CUPOOL_H_OWNED &&
                      (!expect || atomic_load_explicit(&rec->cls, CUPOOL_RELAXED) == expect))) {
        /* an explicit pool names its class: its slot is found without waiting for the record */
        return slot_push(tc, expect ? expect->index : rec->index, rec, h, idle_state);
    }
    return false;
}

/* The release fast path: the thread's last acquired handle (else a registry lookup), the
 * ownership check, a push onto this thread's magazine. Inlined into each public release;
 * `kind` is ops->kind, a constant there. */
__attribute__((always_inline)) static inline CUresult
release_handle(const struct cupool__class_ops *ops, cupool_kind_t kind,
               struct cupool__class *expect, void *h, uint32_t idle_state)
{
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = tc ? tc->last : NULL;
    if (CUPOOL_UNLIKELY(rec == NULL || atomic_load_explicit(&rec->handle, CUPOOL_RELAXED) != h))
        return cupool__release_lookup(ops, expect, h, idle_state);
    if (CUPOOL_LIKELY(release_push(kind, expect, tc, rec, h, idle_state)))
        return CUDA_SUCCESS;
    return cupool__release_general(ops, expect, h, idle_state);
}

/* ---- the explicit pools ---- */

/*
 * The explicit-pool acquire: a hit on the top of the thread's magazine, without a read section
 * and without the class table's decoding. The pool value names (kind, index, gen); the top's
 * record must carry that pool word (struct cupool__handle) and be idle. Records are
 * type-stable and a class with a record registered is never reclaimed, so the match proves
 * that the class at the index is the incarnation the pool names (a pool of an older one
 * carries another gen, a value forged with the other kind's tag another word) and that the
 * record is this pool's; a false match needs 2^45 reuses of one class index between two
 * acquires. The class is still loaded for `alive` (a retired class hands nothing out); its line
 * is read-mostly and the load runs beside the magazine's.
 * pool_top makes these checks, but the lifecycle state's (its caller's) and for `out`: true
 * with the slot, the class and the top (*st: IDLE, or IDLE_UNCHECKED for a stream); false when
 * any fails.
 */
__attribute__((always_inline)) static inline bool
pool_top(struct cupool__tcache *tc, uintptr_t v, uintptr_t tag, struct cupool__slot **sp,
         struct cupool__class **clsp, struct cupool__mag_item *itp, uint32_t *st)
{
    if (CUPOOL_UNLIKELY((v & 0xfu) != tag))
        return false;
    uint32_t index = (uint32_t)(v >> POOL_INDEX_SHIFT) & (CUPOOL_MAX_CLASSES - 1);
    struct cupool__class *cls = atomic_load_explicit(&cupool__class_by_index[index],
                                                     CUPOOL_ACQUIRE);
    struct cupool__slot *s = slot_of(tc, index);
    if (CUPOOL_UNLIKELY(cls == NULL || !atomic_load_explicit(&cls->alive, CUPOOL_ACQUIRE) ||
                        s == NULL || s->count == 0)) /* a count implies a loaded magazine */
        return false;
    struct cupool__mag_item it = s->loaded->items[s->count - 1];
    *st = atomic_load_explicit(&it.rec->state, CUPOOL_RELAXED);
    if (CUPOOL_UNLIKELY(it.rec->pool_word != (v | POOL_PROMISED) ||
                        (*st != CUPOOL_H_IDLE &&
                         (tag != POOL_TAG_STREAM || *st != CUPOOL_H_IDLE_UNCHECKED))))
        return false;
    *sp = s;
    *clsp = cls;
    *itp = it;
    return true;
}

/* The explicit-pool acquire whose hit needs driver calls (pool/api.c): every acquire of a pool
 * without the promise, and a promised pool's stream released unvouched. */
CUresult cupool__stream_pool_acquire_calls(const void *pool, void **out);
CUresult cupool__event_pool_acquire_calls(const void *pool, void **out);

/*
 * The explicit-pool acquire. A pool without the promise checks its context (cuCtxGetId) and
 * a stream released unvouched is vetted (cuStreamIsCapturing): cupool__*_pool_acquire_calls,
 * out of line, make pool_top's checks under one hit guard, then those calls. Anything else, a
 * failed check included, tail-calls the general path, which checks and decides everything
 * again and says why. The promised hit of a vouched stream or an event is a leaf: no call, no
 * register saved.
 */
__attribute__((always_inline)) static inline CUresult
pool_acquire_hit(const void *pool, const struct cupool__class_ops *ops, uintptr_t tag, void **out)
{
    uintptr_t v = (uintptr_t)pool;
    if (!(v & POOL_PROMISED) && tag == POOL_TAG_STREAM)
        return cupool__stream_pool_acquire_calls(pool, out);
    if (!(v & POOL_PROMISED))
        return cupool__event_pool_acquire_calls(pool, out);
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__slot *s;
    struct cupool__class *cls;
    struct cupool__mag_item it;
    uint32_t st;
    if (CUPOOL_UNLIKELY(tc == NULL || out == NULL || cupool__state_now() != CUPOOL_ST_RUNNING ||
                        !pool_top(tc, v, tag, &s, &cls, &it, &st)))
        return cupool__pool_acquire_tail(pool, ops, out, false);
    if (tag == POOL_TAG_STREAM && st == CUPOOL_H_IDLE_UNCHECKED)
        return cupool__stream_pool_acquire_calls(pool, out);
    slot_take(tc, s, s->count, it.rec);
    *out = it.handle;
    if (CUPOOL_UNLIKELY(atomic_load_explicit(&cupool__hot.reclaim_due, CUPOOL_RELAXED)))
        return cupool__hit_then_reclaim();
    return CUDA_SUCCESS;
}

/* Pushes rec, found for h (the record names h: the caller checked), onto this thread's
 * magazine when its pool word names the class of pool value v (see pool_acquire_hit), it is
 * owned, and the magazine has room; false otherwise (nothing changed). */
__attribute__((always_inline)) static inline bool
pool_push_matched(struct cupool__tcache *tc, struct cupool__handle *rec, uintptr_t v, void *h,
                  uint32_t idle_state)
{
    if (CUPOOL_LIKELY(rec->pool_word == (v | POOL_PROMISED) &&
                      cupool__state_now() == CUPOOL_ST_RUNNING &&
                      atomic_load_explicit(&rec->state, CUPOOL_RELAXED) == CUPOOL_H_OWNED &&
                      rec->index < CUPOOL_SLOTS_PER_CHUNK)) {
        struct cupool__slot *s = &tc->slots0[rec->index];
        uint32_t n = s->count;
        if (CUPOOL_LIKELY(n < s->limit)) {
            atomic_store_explicit(&rec->state, idle_state, CUPOOL_RELAXED);
            s->loaded->items[n].rec = rec;
            s->loaded->items[n].handle = h;
            s->count = n + 1;
            cupool__counter_inc(&s->releases);
            return true;
        }
    }
    return false;
}

/* pool_release_hit's handle when it is not the thread's last acquired one (a release on
 * another thread than the acquire's, as a completion thread's): a registry lookup, then the
 * same match and push; the general way otherwise (pool/api.c). */
CUresult cupool__pool_release_lookup(const void *pool, const struct cupool__class_ops *ops,
                                     uintptr_t tag, void *h, uint32_t idle_state);

/* The explicit-pool release of the thread's last acquired handle onto a magazine with room,
 * matched by one compare of the record's pool word (its kind, index and gen) against the pool
 * value (see pool_acquire_hit): no read section, no load from the class. A leaf; another
 * handle tail-calls the lookup, anything else the general way. */
__attribute__((always_inline)) static inline CUresult
pool_release_hit(const void *pool, const struct cupool__class_ops *ops, uintptr_t tag, void *h,
                 uint32_t idle_state)
{
    uintptr_t v = (uintptr_t)pool;
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = tc ? tc->last : NULL;
    if (CUPOOL_UNLIKELY(rec == NULL || atomic_load_explicit(&rec->handle, CUPOOL_RELAXED) != h))
        return cupool__pool_release_lookup(pool, ops, tag, h, idle_state);
    if (CUPOOL_LIKELY((v & 0xfu) == tag && pool_push_matched(tc, rec, v, h, idle_state)))
        return CUDA_SUCCESS;
    return cupool__pool_release_general(pool, ops, h, idle_state);
}

#endif
