/* SPDX-License-Identifier: MIT */
/*
 * The explicit pools: cupool_stream_pool_get and cupool_event_pool_get, and their acquire and
 * release, over the hit of pool/hot.h.
 */
#include "base/internal.h"
#include "pool/pool.h"
#include "pool/pool_impl.h"
#include "base/layer.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/lifecycle.h"
#include "pool/maint.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "pool/hot.h"

/* ---- explicit pools: the pool value's encoding is in pool/pool.h ---- */
_Static_assert(CUPOOL_MAX_CLASSES <= 1u << (POOL_GEN_SHIFT - POOL_INDEX_SHIFT),
               "pool handles hold every class index");

static inline uintptr_t pool_tag(const struct cupool__class_ops *ops)
{
    return ops->kind == CUPOOL_KIND_STREAM ? POOL_TAG_STREAM : POOL_TAG_EVENT;
}

/* The pool value of a class found alive, or 0 when it was retired since: a reclamation moves
 * the gen of a retired class on (publishing the incarnation that reuses its index) before its
 * grace period, so a gen read inside a read section may already be the next one's. Retirement
 * cleared `alive` before (class_retire, then the reclaimer's load of the phase), so a gen read
 * with acquire ordering and then a live `alive` is the class's own. */
static uintptr_t pool_handle(const struct cupool__class *cls, bool promised)
{
    uint64_t gen = atomic_load_explicit(&cls->gen, CUPOOL_ACQUIRE);
    if (!atomic_load_explicit(&cls->alive, CUPOOL_ACQUIRE))
        return 0;
    return (uintptr_t)(gen << POOL_GEN_SHIFT) | (uintptr_t)cls->index << POOL_INDEX_SHIFT |
           (promised ? POOL_PROMISED : 0) | pool_tag(cls->ops);
}

/* The class a pool handle names, or NULL with *why: CUDA_ERROR_INVALID_VALUE (not a pool of
 * this kind) or CUDA_ERROR_CONTEXT_IS_DESTROYED (its class was reclaimed: the context is
 * gone). Inside a read section. */
static inline struct cupool__class *
pool_class(const void *pool, const struct cupool__class_ops *ops, bool *promised, CUresult *why)
{
    uintptr_t v = (uintptr_t)pool;
    uint32_t index = (uint32_t)(v >> POOL_INDEX_SHIFT) & (CUPOOL_MAX_CLASSES - 1);
    *why = CUDA_ERROR_INVALID_VALUE;
    if (CUPOOL_UNLIKELY((v & 0xfu) != pool_tag(ops) || index >= cupool__class_limit()))
        return NULL;
    struct cupool__class *cls = cupool__class_at(index);
    if (CUPOOL_UNLIKELY(!cls))
        return NULL;
    uint64_t gen = (uint64_t)v >> POOL_GEN_SHIFT;
    uint64_t now = atomic_load_explicit(&cls->gen, CUPOOL_RELAXED) &
                   (UINT64_MAX >> POOL_GEN_SHIFT);
    if (CUPOOL_UNLIKELY(gen != now || cls->ops != ops)) {
        if (gen < now)
            *why = CUDA_ERROR_CONTEXT_IS_DESTROYED;
        return NULL;
    }
    *promised = (v & POOL_PROMISED) != 0;
    return cls;
}

static CUresult pool_refused(const struct cupool__class_ops *ops, const char *what, CUresult why)
{
    if (why == CUDA_ERROR_CONTEXT_IS_DESTROYED)
        return cupool__fail(why, "%s: the %s pool's context is gone (destroyed or reset); get "
                                 "a pool of the new context",
                            what, ops->name);
    return cupool__fail(why, "%s: not a %s pool", what, ops->name);
}

static CUresult pool_get(const struct cupool__class_ops *ops, CUcontext ctx, unsigned int flags,
                         int priority, uintptr_t *out)
{
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    unsigned long long id;
    r = (CUPOOL_DRV(cupool__drv.cuCtxGetId(ctx, &id)));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, ctx ? "cuCtxGetId(%p) failed" : "no usable current context (%p)",
                            (void *)ctx);
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    struct cupool__class *cls = NULL;
    r = cupool__class_get(ops, ctx, id, flags & ~CUPOOL_POOL_CONTEXT_OUTLIVES, priority, &cls);
    if (r == CUDA_SUCCESS && CUPOOL_UNLIKELY(cupool__pool_get_hook != NULL))
        cupool__pool_get_hook(); /* tests: a reclamation moves the class's gen on here */
    if (r == CUDA_SUCCESS &&
        (*out = pool_handle(cls, (flags & CUPOOL_POOL_CONTEXT_OUTLIVES) != 0)) == 0)
        r = cupool__fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                         "the context (id %llu) was destroyed or reset while its %s pool was "
                         "made",
                         id, ops->name);
    cupool__read_leave(cupool__th(rtc));
    return r;
}

CUresult cupool_stream_pool_get(cupool_stream_pool_t *pool, CUcontext ctx, unsigned int flags,
                                int priority)
{
    if (!pool || (flags & ~(STREAM_FLAGS_KNOWN | CUPOOL_POOL_CONTEXT_OUTLIVES)))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            !pool ? "cupool_stream_pool_get: pool is NULL"
                                  : "cupool_stream_pool_get: unknown flags 0x%x",
                            flags);
    uintptr_t h = 0;
    CUresult r = pool_get(&cupool__stream_ops, ctx, flags, priority, &h);
    if (r == CUDA_SUCCESS)
        *pool = (cupool_stream_pool_t)h;
    cupool__reclaim_if_due();
    return r;
}

CUresult cupool_event_pool_get(cupool_event_pool_t *pool, CUcontext ctx, unsigned int flags)
{
    if (!pool || !event_flags_valid(flags & ~CUPOOL_POOL_CONTEXT_OUTLIVES))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            !pool ? "cupool_event_pool_get: pool is NULL"
                                  : "cupool_event_pool_get: invalid flags 0x%x",
                            flags);
    uintptr_t h = 0;
    CUresult r = pool_get(&cupool__event_ops, ctx, flags, 0, &h);
    if (r == CUDA_SUCCESS)
        *pool = (cupool_event_pool_t)h;
    cupool__reclaim_if_due();
    return r;
}

/* An explicit pool's context check that failed: the lifecycle state's error, the context
 * gone (retired: CUDA_ERROR_CONTEXT_IS_DESTROYED), alive after all (CUDA_SUCCESS: the driver
 * did not repeat its verdict), or the driver's passing error. */
__attribute__((noinline)) static CUresult pool_ctx_refused(struct cupool__class *cls)
{
    if (!cupool__driver_callable())
        return cupool__enter();
    CUresult err = CUDA_SUCCESS;
    switch (cupool__class_ctx_check(cls, &err)) {
    case CTX_ALIVE:
        return CUDA_SUCCESS;
    case CTX_GONE:
        return cupool__fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                            "the context (id %llu) of this %s pool is gone (destroyed, reset, or "
                            "broken by a sticky error)",
                            cls->ctx_id, cls->ops->name);
    default:
        return err;
    }
}

/* Is the explicit pool's context alive? One cuCtxGetId(ctx) (~14 ns on an H200): nothing else
 * tells an explicit pool that its context was reset, and the driver crashes on a handle of a
 * reset context. */
static inline CUresult pool_ctx_check(struct cupool__class *cls)
{
    unsigned long long id = 0;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxGetId(cls->ctx, &id));
    if (CUPOOL_LIKELY(r == CUDA_SUCCESS && id == cls->ctx_id))
        return CUDA_SUCCESS;
    return pool_ctx_refused(cls);
}

/* The general explicit-pool acquire, inside a read section; `tried`: the hit (slot_hit)
 * failed already, so straight to acquire_general, which decides everything again. */
static CUresult pool_acquire_as(const void *pool, const struct cupool__class_ops *ops,
                                void **out, bool tried);

static inline CUresult pool_acquire(const void *pool, const struct cupool__class_ops *ops,
                                    void **out)
{
    return pool_acquire_as(pool, ops, out, false);
}

__attribute__((noinline)) static CUresult pool_acquire_as(const void *pool,
                                                          const struct cupool__class_ops *ops,
                                                          void **out, bool tried)
{
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    bool promised = false;
    CUresult why, r;
    struct cupool__class *cls = pool_class(pool, ops, &promised, &why);
    if (CUPOOL_UNLIKELY(!cls || !out))
        r = !out ? cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s pool acquire: output pointer is NULL",
                                ops->name)
                 : pool_refused(ops, "acquire", why);
    else if (!promised && (r = pool_ctx_check(cls)) != CUDA_SUCCESS)
        ;
    else
        r = tried ? cupool__acquire_general(cls, false, out) : acquire_from(cls, false, out);
    cupool__read_leave(cupool__th(rtc));
    return r;
}

/* The general path of an explicit-pool acquire, out of line, for the hit's every miss. */
__attribute__((noinline)) CUresult cupool__pool_acquire_tail(const void *pool,
                                                            const struct cupool__class_ops *ops,
                                                            void **out, bool tried)
{
    CUresult r = pool_acquire_as(pool, ops, out, tried);
    cupool__reclaim_if_due();
    return r;
}

/* A hit whose way out found reclamation due. */
__attribute__((noinline)) CUresult cupool__hit_then_reclaim(void)
{
    cupool__reclaim_deferred();
    return CUDA_SUCCESS;
}

/* The explicit-pool acquire whose hit needs driver calls (pool/hot.h, pool_acquire_hit): under
 * one hit guard (cupool__drv_begin_hit, whose check of the lifecycle state is the hit's),
 * pool_top's checks, then, for a pool without the promise, that its context still answers
 * with the class's id, and for a stream released unvouched that it is not capturing. The
 * magazine is this thread's alone: its top is still the record checked after the calls, and
 * the record still names its handle. A failed check, or a state other than RUNNING, goes the
 * general way, which checks again and says why. */
__attribute__((always_inline)) static inline CUresult
pool_acquire_calls(const void *pool, const struct cupool__class_ops *ops, uintptr_t tag,
                   void **out)
{
    uintptr_t v = (uintptr_t)pool;
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__slot *s;
    struct cupool__class *cls;
    struct cupool__mag_item it;
    uint32_t st;
    CUresult r = CUDA_SUCCESS;
    if (CUPOOL_UNLIKELY(tc == NULL || out == NULL || !cupool__drv_begin_hit(cupool__th(tc))))
        goto general;
    if (CUPOOL_UNLIKELY(!pool_top(tc, v, tag, &s, &cls, &it, &st)))
        goto refused;
    if (!(v & POOL_PROMISED)) {
        unsigned long long ctx_id = cls->ctx_id, id = 0;
        r = cupool__drv.cuCtxGetId(cls->ctx, &id);
        if (CUPOOL_UNLIKELY(r != CUDA_SUCCESS || id != ctx_id))
            goto refused;
    }
    if (tag == POOL_TAG_STREAM &&
        atomic_load_explicit(&it.rec->state, CUPOOL_RELAXED) == CUPOOL_H_IDLE_UNCHECKED) {
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        r = cupool__drv.cuStreamIsCapturing(atomic_load_explicit(&it.rec->handle, CUPOOL_RELAXED),
                                            &cs);
        if (CUPOOL_UNLIKELY(r != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE))
            goto refused;
    }
    cupool__drv_end_hit(cupool__th(tc));
    slot_take(tc, s, s->count, it.rec);
    *out = atomic_load_explicit(&it.rec->handle, CUPOOL_RELAXED);
    if (CUPOOL_UNLIKELY(atomic_load_explicit(&cupool__hot.reclaim_due, CUPOOL_RELAXED)))
        return cupool__hit_then_reclaim();
    return CUDA_SUCCESS;
refused:
    cupool__drv_end_hit(cupool__th(tc));
    cupool__driver_result(r);
general:
    return cupool__pool_acquire_tail(pool, ops, out, false);
}

__attribute__((noinline)) CUresult cupool__stream_pool_acquire_calls(const void *pool, void **out)
{
    return pool_acquire_calls(pool, &cupool__stream_ops, POOL_TAG_STREAM, out);
}

__attribute__((noinline)) CUresult cupool__event_pool_acquire_calls(const void *pool, void **out)
{
    return pool_acquire_calls(pool, &cupool__event_ops, POOL_TAG_EVENT, out);
}

CUresult cupool_stream_pool_acquire(cupool_stream_pool_t pool, CUstream *stream)
{
    return pool_acquire_hit(pool, &cupool__stream_ops, POOL_TAG_STREAM, (void **)stream);
}

CUresult cupool_event_pool_acquire(cupool_event_pool_t pool, CUevent *event)
{
    return pool_acquire_hit(pool, &cupool__event_ops, POOL_TAG_EVENT, (void **)event);
}

/* A release through an explicit pool. The handle's record pins its class (a class with a
 * handle out is never reclaimed), so no read section is needed past the pool's decoding. */
static inline CUresult pool_release(const void *pool, const struct cupool__class_ops *ops,
                                    void *h, uint32_t idle_state)
{
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    bool promised;
    CUresult why;
    struct cupool__class *cls = pool_class(pool, ops, &promised, &why);
    cupool__read_leave(cupool__th(rtc));
    if (CUPOOL_UNLIKELY(!cls))
        return why == CUDA_ERROR_CONTEXT_IS_DESTROYED
                   ? cupool__fail(CUDA_ERROR_INVALID_HANDLE,
                                  "%s %p: its pool's context is gone, so it is not that pool's",
                                  ops->name, h)
                   : pool_refused(ops, "release", why);
    return cupool__release_of(ops, cls, h, idle_state);
}

__attribute__((noinline)) CUresult cupool__pool_release_lookup(const void *pool,
                                                              const struct cupool__class_ops *ops,
                                                              uintptr_t tag, void *h,
                                                              uint32_t idle_state)
{
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL && ((uintptr_t)pool & 0xfu) == tag)) {
        struct cupool__handle *rec = cupool__reg_read(tc, h);
        if (rec != NULL && pool_push_matched(tc, rec, (uintptr_t)pool, h, idle_state))
            return CUDA_SUCCESS;
    }
    return pool_release(pool, ops, h, idle_state);
}

__attribute__((noinline)) CUresult cupool__pool_release_general(const void *pool,
                                                               const struct cupool__class_ops *ops,
                                                               void *h, uint32_t idle_state)
{
    return pool_release(pool, ops, h, idle_state);
}

CUresult cupool_stream_pool_release(cupool_stream_pool_t pool, CUstream stream,
                                    unsigned int release_flags)
{
    if (CUPOOL_UNLIKELY(release_flags & ~CUPOOL_RELEASE_NOT_CAPTURING))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_stream_pool_release: unknown release flags 0x%x",
                            release_flags);
    return pool_release_hit(
        pool, &cupool__stream_ops, POOL_TAG_STREAM, stream,
        (release_flags & CUPOOL_RELEASE_NOT_CAPTURING) ? CUPOOL_H_IDLE : CUPOOL_H_IDLE_UNCHECKED);
}

CUresult cupool_event_pool_release(cupool_event_pool_t pool, CUevent event)
{
    return pool_release_hit(pool, &cupool__event_ops, POOL_TAG_EVENT, event, CUPOOL_H_IDLE);
}
