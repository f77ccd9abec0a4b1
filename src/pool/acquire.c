/* SPDX-License-Identifier: MIT */
/*
 * Acquire and release off the hit: the general paths of both, the release checks and the
 * release fast path, and the current-context API (its class cache and public functions).
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

/* ---------------------------------------------------------------------------------------- */
/* Acquire and release, shared by streams and events                                        */
/* ---------------------------------------------------------------------------------------- */

/* Puts a just-popped record back on top of the slot's loaded magazine (room is certain). */
static void slot_push_back(struct cupool__slot *s, struct cupool__handle *rec)
{
    s->loaded->items[s->count++] =
        (struct cupool__mag_item){rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
}

/*
 * Checks a pooled stream the previous owner released unchecked, just popped from slot s,
 * of a class whose context is known alive.
 * Returns 0 when it may be handed out; 1 when it was dropped (it was in capture) and another
 * should be tried; -1 with *err when the acquire fails: the context is gone or broken (the
 * stream is forgotten), or a transient driver error (the stream goes back where it was).
 */
static int stream_vet(struct cupool__class *cls, struct cupool__slot *s,
                      struct cupool__handle *rec, CUresult *err)
{
    /* the context is alive: the current one, or an explicit pool's just checked (or promised
     * by its caller) */
    CUstream h = atomic_load_explicit(&rec->handle, CUPOOL_RELAXED);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = CUPOOL_DRV(cupool__drv.cuStreamIsCapturing(h, &status));
    if (CUPOOL_LIKELY(r == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE))
        return 0;
    if (r == CUDA_SUCCESS) {
        cupool__log(CUPOOL_LOG_WARN,
                    "stream %p was released while in stream capture; it is destroyed, not reused",
                    (void *)h);
        atomic_fetch_add_explicit(&cls->dropped, 1, CUPOOL_RELAXED);
        if (cupool__handle_destroy(cls, rec) != CUDA_SUCCESS)
            cupool__handle_retire(cls,
                                  rec); /* destroyed by a later trim; vetted again if rescued */
        return 1;
    }
    if (cupool__error_is_sticky(r) && r != CUDA_ERROR_DEINITIALIZED &&
        cupool__class_ctx_broken(cls)) {
        cupool__class_mark_broken(cls);
        cupool__handle_forget(cls, rec);
        *err = cupool__fail(r, "the context (id %llu) of stream %p is broken", cls->ctx_id,
                            (void *)h);
    } else {
        slot_push_back(s, rec);
        *err = cupool__fail(r, "cuStreamIsCapturing(%p) failed", (void *)h);
    }
    return -1;
}

/* Everything but a magazine hit: init and lifecycle states, dead classes, the depot
 * exchange, and creation on a miss (or always, with CUPOOL_DISABLE). */
static CUresult acquire_slow(struct cupool__class *cls, bool ctx_current,
                             struct cupool__handle **out)
{
    if (!atomic_load_explicit(&cls->alive, CUPOOL_RELAXED))
        return cupool__fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                            "the context (id %llu) of this %s pool is gone (destroyed, reset, or "
                            "broken by a sticky error)",
                            cls->ctx_id, cls->ops->name);
    struct cupool__tcache *tc = cupool__tcache_self();
    struct cupool__slot *s = tc ? cupool__slot_get(tc, cls->index) : NULL;
    if (!s)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for the thread's %s cache",
                            cls->ops->name);
    cupool__tcache_sweep_retired(tc);
    if (cupool__state_now() == CUPOOL_ST_RUNNING) {
        struct cupool__handle *rec = cupool__refill(cls, s);
        if (rec) {
            *out = rec;
            return CUDA_SUCCESS;
        }
    }
    if (cupool__state_now() == CUPOOL_ST_RUNNING)
        cupool__class_missed(cls);
    CUresult r = cupool__handle_create(cls, ctx_current, CUPOOL_H_OWNED, out);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add_explicit(&cls->misses, 1, CUPOOL_RELAXED);
    return r;
}

/* Takes a handle of `cls` for the caller, whatever it takes: the general path behind
 * acquire_from(). */
__attribute__((noinline)) CUresult cupool__acquire_general(struct cupool__class *cls,
                                                           bool ctx_current, void **out)
{
    int st = cupool__state_now();
    if (st != CUPOOL_ST_RUNNING && st != CUPOOL_ST_PASSTHROUGH) {
        CUresult r = cupool__enter();
        if (r != CUDA_SUCCESS)
            return r;
    }
    /* a retired class hands nothing out, to the current-context API too: its context may
     * still answer with the class's id (cupool_context_release), and current_acquire then
     * looks the key up afresh */
    if (!atomic_load_explicit(&cls->alive, CUPOOL_RELAXED))
        return cupool__fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                            "the context (id %llu) of this %s pool is gone (destroyed, reset, or "
                            "broken by a sticky error)",
                            cls->ctx_id, cls->ops->name);
    for (;;) {
        struct cupool__tcache *tc = cupool__tl;
        struct cupool__slot *s = tc ? slot_of(tc, cls->index) : NULL;
        struct cupool__magazine *m = s ? s->loaded : NULL;
        struct cupool__handle *rec;
        if (CUPOOL_LIKELY(m && s->count && cupool__state_now() == CUPOOL_ST_RUNNING)) {
            rec = m->items[--s->count].rec;
        } else {
            CUresult r = acquire_slow(cls, ctx_current, &rec);
            if (r != CUDA_SUCCESS)
                return r;
            s = slot_of(cupool__tl, cls->index);
        }
        uint32_t st = atomic_load_explicit(&rec->state, CUPOOL_RELAXED);
        if (CUPOOL_UNLIKELY(st != CUPOOL_H_IDLE && st != CUPOOL_H_OWNED)) {
            if (st == CUPOOL_H_STALE) {
                cupool__handle_forget(cls, rec);
                continue;
            }
            CUresult err = CUDA_SUCCESS;
            int v = stream_vet(cls, s, rec, &err);
            if (v > 0)
                continue;
            if (v < 0)
                return err;
        }
        atomic_store_explicit(&rec->state, CUPOOL_H_OWNED, CUPOOL_RELAXED);
        cupool__counter_inc(&s->acquires);
        cupool__tl->last = rec;
        *out = atomic_load_explicit(&rec->handle, CUPOOL_RELAXED);
        return CUDA_SUCCESS;
    }
}

/* Why a release was refused; or, for a handle of a context that is gone, its quiet end. */
/* A refused release is a bug in the caller: say so at warning level (CUPOOL_LOG). */
static CUresult refused(CUresult r)
{
    cupool__log(CUPOOL_LOG_WARN, "release refused: %s", cupool_error_string());
    return r;
}

static CUresult release_refused(const struct cupool__class_ops *ops,
                                const struct cupool__class *expect, void *h,
                                struct cupool__handle *rec)
{
    if (!h)
        return cupool__fail(CUDA_ERROR_INVALID_HANDLE, "NULL %s", ops->name);
    if (!rec)
        return refused(cupool__fail(CUDA_ERROR_INVALID_HANDLE,
                            "%s %p was not handed out by cupool (or was already destroyed)",
                            ops->name, h));
    struct cupool__class *cls = atomic_load_explicit(&rec->cls, CUPOOL_RELAXED);
    if (cls->ops != ops)
        return refused(cupool__fail(CUDA_ERROR_INVALID_HANDLE,
                                    "%p is not %s %s (it is a pooled %s)", h,
                                    ops->kind == CUPOOL_KIND_EVENT ? "an" : "a", ops->name,
                                    cls->ops->name));
    if (expect && cls != expect && ops->kind == CUPOOL_KIND_STREAM)
        return refused(cupool__fail(CUDA_ERROR_INVALID_HANDLE,
                                    "%s %p belongs to another pool (context %llu, flags 0x%x, "
                                    "priority %d; this pool: context %llu, flags 0x%x, "
                                    "priority %d)",
                                    ops->name, h, cls->ctx_id, cls->flags, cls->priority,
                                    expect->ctx_id, expect->flags, expect->priority));
    if (expect && cls != expect)
        return refused(cupool__fail(CUDA_ERROR_INVALID_HANDLE,
                                    "%s %p belongs to another pool (context %llu, flags 0x%x; "
                                    "this pool: context %llu, flags 0x%x)",
                                    ops->name, h, cls->ctx_id, cls->flags, expect->ctx_id,
                                    expect->flags));
    if (atomic_load_explicit(&rec->state, CUPOOL_RELAXED) != CUPOOL_H_OWNED)
        return refused(cupool__fail(CUDA_ERROR_INVALID_HANDLE, "%s %p was already released",
                                    ops->name, h));
    /* Owned, but its context is gone: forget it without touching the driver (the release is
     * counted first: once forgotten, nothing pins the class) */
    struct cupool__tcache *tc = cupool__tcache_self();
    struct cupool__slot *s = tc ? cupool__slot_get(tc, cls->index) : NULL;
    if (s)
        cupool__counter_inc(&s->releases);
    cupool__handle_forget(cls, rec);
    return CUDA_SUCCESS;
}

static inline bool release_ok(const struct cupool__class_ops *ops,
                              const struct cupool__class *expect, struct cupool__handle *rec,
                              struct cupool__class **cls_out)
{
    if (CUPOOL_UNLIKELY(!rec))
        return false;
    struct cupool__class *cls = atomic_load_explicit(&rec->cls, CUPOOL_RELAXED);
    *cls_out = cls;
    return cls->ops == ops && (!expect || cls == expect) &&
           atomic_load_explicit(&rec->state, CUPOOL_RELAXED) == CUPOOL_H_OWNED &&
           atomic_load_explicit(&cls->alive, CUPOOL_RELAXED);
}

/* Magazine full (or no cache yet): exchange with the depot, then push. */
static CUresult release_slow(struct cupool__class *cls, struct cupool__handle *rec,
                             uint32_t idle_state)
{
    struct cupool__tcache *tc = cupool__tcache_self();
    struct cupool__slot *s = tc ? cupool__slot_get(tc, cls->index) : NULL;
    bool retired = false;
    if (tc)
        cupool__tcache_sweep_retired(tc);
    if (s && s->loaded && s->count == cupool__hot.mag_capacity) {
        struct cupool__magazine *p = s->previous;
        if (p && p->count == 0) {
            s->previous = slot_take_loaded(s);
            slot_set_loaded(s, p);
        } else {
            if (p)
                retired = cupool__depot_put(cls, p);
            s->previous = slot_take_loaded(s);
            slot_set_loaded(s, cupool__mag_get());
        }
    } else if (s && !s->loaded) {
        slot_set_loaded(s, cupool__mag_get());
    }
    struct cupool__magazine *m = s ? s->loaded : NULL;
    if (!m) {
        /* No memory for a magazine: the handle cannot be pooled; destroy it now. */
        if (s)
            cupool__counter_inc(&s->releases);
        return cupool__handle_discard(cls, rec);
    }
    atomic_store_explicit(&rec->state, idle_state, CUPOOL_RELAXED);
    m->items[s->count++] =
        (struct cupool__mag_item){rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
    cupool__counter_inc(&s->releases);
    if (retired)
        cupool__drain_retired(cls, 1, 2); /* keep the newest magazine queued: a later miss may
                                     rescue it; at most two magazines: this release's share of the
                                     work plus one of any backlog left by exited threads */
    return CUDA_SUCCESS;
}

CUresult cupool__release_general(const struct cupool__class_ops *ops,
                                struct cupool__class *expect, void *h, uint32_t idle_state);

/* Release in any state but RUNNING. */
static CUresult release_other_state(const struct cupool__class_ops *ops,
                                    struct cupool__class *expect, void *h, uint32_t idle_state)
{
    int st = cupool__state_now();
    if (st == CUPOOL_ST_EXITING || st == CUPOOL_ST_DEAD || st == CUPOOL_ST_UNLOADED)
        return CUDA_SUCCESS; /* the handle is left to the dying driver */
    if (st != CUPOOL_ST_PASSTHROUGH) {
        CUresult r = cupool__enter();
        if (r != CUDA_SUCCESS)
            return r;
        if (cupool__state_now() == CUPOOL_ST_RUNNING)
            return cupool__release_general(ops, expect, h, idle_state);
    }
    /* CUPOOL_DISABLE: validate exactly as when pooling, then destroy. */
    struct cupool__handle *rec = cupool__reg_read(cupool__tl, h);
    struct cupool__class *cls = NULL;
    if (!release_ok(ops, expect, rec, &cls))
        return release_refused(ops, expect, h, rec);
    /* The context may have been reset since the acquire: a handle of a context that is gone
     * never reaches the driver (it crashes on one); it is forgotten. A check or destroy that
     * fails for a passing reason leaves the handle the caller's, registered, for a retry. */
    CUresult err = CUDA_SUCCESS;
    enum ctx_state cs = cupool__class_ctx_check(cls, &err);
    if (cs == CTX_UNKNOWN)
        return err;
    CUresult r = cupool__handle_dispose(cls, rec, cs);
    if (r != CUDA_SUCCESS)
        return r;
    struct cupool__tcache *tc = cupool__tcache_self();
    struct cupool__slot *s = tc ? cupool__slot_get(tc, cls->index) : NULL;
    if (s)
        cupool__counter_inc(&s->releases);
    return CUDA_SUCCESS;
}

/* Every release but the fast one: other lifecycle states, refusals, a full magazine. */
__attribute__((noinline)) CUresult cupool__release_general(const struct cupool__class_ops *ops,
                                                          struct cupool__class *expect, void *h,
                                                          uint32_t idle_state)
{
    if (cupool__state_now() != CUPOOL_ST_RUNNING)
        return release_other_state(ops, expect, h, idle_state);
    struct cupool__handle *rec = cupool__reg_read(cupool__tl, h);
    struct cupool__class *cls = NULL;
    if (!release_ok(ops, expect, rec, &cls))
        return release_refused(ops, expect, h, rec);
    return release_slow(cls, rec, idle_state);
}

/* A release of a handle other than the thread's last acquired one: a registry lookup first.
 * Out of line, so release_handle (pool/hot.h) saves no registers. */
__attribute__((noinline)) CUresult cupool__release_lookup(const struct cupool__class_ops *ops,
                                                         struct cupool__class *expect, void *h,
                                                         uint32_t idle_state)
{
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = cupool__reg_read(tc, h);
    if (rec != NULL && tc != NULL && release_push(ops->kind, expect, tc, rec, h, idle_state))
        return CUDA_SUCCESS;
    return cupool__release_general(ops, expect, h, idle_state);
}

/* A release of a handle cupool knows, as release_handle; false (and nothing done) when the
 * registry does not know h, which the drop-in destroys hand to the driver. One lookup. */
bool cupool__release_known(const struct cupool__class_ops *ops, void *h, CUresult *result)
{
    uint32_t idle_state = ops->kind == CUPOOL_KIND_STREAM ? CUPOOL_H_IDLE_UNCHECKED : CUPOOL_H_IDLE;
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = tc ? tc->last : NULL;
    if (!h || (rec != NULL && atomic_load_explicit(&rec->handle, CUPOOL_RELAXED) == h)) {
        /* the thread's last handle */
        *result = release_handle(ops, ops->kind, NULL, h, idle_state);
        return true;
    }
    rec = cupool__reg_read(tc, h);
    if (!rec)
        return false;
    *result = tc && release_push(ops->kind, NULL, tc, rec, h, idle_state)
                  ? CUDA_SUCCESS
                  : cupool__release_general(ops, NULL, h, idle_state);
    return true;
}

/* The entry a fill of (id, key) takes: its own (stale) one, else way 0 after way 0 moved to
 * way 1 (the older fill goes). */
static struct cupool__cc_entry *cc_victim(struct cupool__cc_entry *set, unsigned long long id,
                                          uint64_t key)
{
    for (int w = 0; w < CUPOOL_CC_WAYS; w++)
        if (set[w].ctx_id == id && set[w].key == key)
            return &set[w];
    for (int w = CUPOOL_CC_WAYS - 1; w > 0; w--)
        set[w] = set[w - 1];
    return &set[0];
}

/* The current-context acquire past a class-cache hit: the class lookup (creating it the first
 * time) and the cache entry, inside a read section. */
__attribute__((noinline)) static CUresult acquire_current_slow(const struct cupool__class_ops *ops,
                                                               unsigned long long id,
                                                               uint64_t key, void **out)
{
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    struct cupool__class *cls = NULL;
    CUresult r = cupool__class_get(ops, NULL, id, cc_key_flags(key), cc_key_priority(key), &cls);
    if (r == CUDA_SUCCESS) {
        struct cupool__tcache *tc = cupool__tcache_self();
        if (tc) {
            struct cupool__cc_entry *e = cc_victim(cc_set(tc, ops->kind, id, key), id, key);
            e->ctx_id = id;
            e->key = key;
            e->cls = cls;
            e->word = cupool__pool_word((uint32_t)ops->kind, cls->index,
                                        atomic_load_explicit(&cls->gen, CUPOOL_ACQUIRE));
            if (!atomic_load_explicit(&cls->alive, CUPOOL_ACQUIRE))
                e->cls = NULL; /* retired meanwhile: the gen read may be the next one's */
        }
        r = acquire_from(cls, true, out);
    }
    cupool__read_leave(cupool__th(rtc));
    return r;
}

/* The current-context acquire once cuCtxGetId(NULL) said `id` and the hit (current_acquire,
 * pool/hot.h) did not take a handle: the class cache's entry through the general path, or the
 * class looked up afresh. */
static CUresult current_miss(const struct cupool__class_ops *ops, unsigned long long id,
                             uint64_t key, void **out)
{
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL)) {
        struct cupool__cc_entry *e = cc_set(tc, ops->kind, id, key);
        if (!cc_match(e, id, key))
            e++; /* way 1 */
        if (CUPOOL_LIKELY(cc_match(e, id, key))) {
            /* the hit missed (or its capture check failed): the general path decides */
            cupool__read_enter(cupool__th(tc));
            /* the struct may have been reclaimed and reused for another class since */
            struct cupool__class *cls = e->cls;
            if (CUPOOL_LIKELY(cupool__pool_word((uint32_t)ops->kind, cls->index,
                                                atomic_load_explicit(&cls->gen,
                                                                     CUPOOL_RELAXED)) == e->word)) {
                CUresult r = cupool__acquire_general(cls, true, out);
                cupool__read_leave(cupool__th(tc));
                if (CUPOOL_LIKELY(r != CUDA_ERROR_CONTEXT_IS_DESTROYED))
                    return r;
            } else {
                cupool__read_leave(cupool__th(tc));
            }
            /* The cached class was retired (or reused), yet the current context answers with
             * its id: look the class up afresh. */
            e->cls = NULL;
        }
    }
    return acquire_current_slow(ops, id, key, out);
}

__attribute__((noinline)) CUresult cupool__current_miss(const struct cupool__class_ops *ops,
                                                       unsigned long long id, uint64_t key,
                                                       void **out)
{
    CUresult r = current_miss(ops, id, key, out);
    cupool__reclaim_if_due();
    return r;
}

/* cuCtxGetId(NULL) failed with r: why, in words. */
static CUresult current_refused(const struct cupool__class_ops *ops, CUresult r)
{
    if (r == CUDA_ERROR_INVALID_CONTEXT)
        return cupool__fail(r, "no current context: make one current (cuCtxSetCurrent, "
                               "cudaSetDevice) before acquiring a %s", ops->name);
    return cupool__fail(r, "cuCtxGetId of the current context failed");
}

__attribute__((noinline)) CUresult cupool__current_refused(const struct cupool__class_ops *ops,
                                                          CUresult r)
{
    r = current_refused(ops, r);
    cupool__reclaim_if_due();
    return r;
}

/* The current-context acquire off the hit's preconditions: a thread without a record yet, a
 * state other than RUNNING (initialisation first, PASSTHROUGH, the lifecycle's refusals). */
__attribute__((noinline)) CUresult cupool__current_general(const struct cupool__class_ops *ops,
                                                          uint64_t key, void **out)
{
    if (CUPOOL_UNLIKELY(cupool__state_now() != CUPOOL_ST_RUNNING)) {
        CUresult r = cupool__enter();
        if (r != CUDA_SUCCESS)
            return r;
    }
    unsigned long long id;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &id));
    r = r != CUDA_SUCCESS ? current_refused(ops, r) : current_miss(ops, id, key, out);
    cupool__reclaim_if_due();
    return r;
}

/* slot_hit's stream released unvouched (pool/hot.h). */
__attribute__((noinline)) bool cupool__slot_hit_unchecked(struct cupool__tcache *tc,
                                                          struct cupool__slot *s,
                                                          struct cupool__mag_item it, void **out)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (CUPOOL_DRV(cupool__drv.cuStreamIsCapturing((CUstream)it.handle, &cs)) != CUDA_SUCCESS ||
        cs != CU_STREAM_CAPTURE_STATUS_NONE)
        return false;
    slot_take(tc, s, s->count, it.rec);
    *out = it.handle;
    return true;
}

/* release_handle for the explicit pools' general path (pool/api.c). */
CUresult cupool__release_of(const struct cupool__class_ops *ops, struct cupool__class *expect,
                            void *h, uint32_t idle_state)
{
    return release_handle(ops, ops->kind, expect, h, idle_state);
}

/* ---- the current-context API ---- */

CUresult cupool_stream_acquire(CUstream *stream, unsigned int flags, int priority)
{
    if (CUPOOL_UNLIKELY(!stream || (flags & ~STREAM_FLAGS_KNOWN)))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            !stream ? "cupool_stream_acquire: stream is NULL"
                                    : "cupool_stream_acquire: unknown flags 0x%x (known: "
                                      "CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING)",
                            flags);
    return current_acquire(&cupool__stream_ops, CUPOOL_KIND_STREAM, flags, priority,
                           (void **)stream);
}

CUresult cupool_stream_release(CUstream stream)
{
    return release_handle(&cupool__stream_ops, CUPOOL_KIND_STREAM, NULL, stream,
                          CUPOOL_H_IDLE_UNCHECKED);
}

CUresult cupool_event_acquire(CUevent *event, unsigned int flags)
{
    if (CUPOOL_UNLIKELY(!event || !event_flags_valid(flags)))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            !event ? "cupool_event_acquire: event is NULL"
                                   : "cupool_event_acquire: invalid flags 0x%x (known: "
                                     "CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING, "
                                     "CU_EVENT_INTERPROCESS with CU_EVENT_DISABLE_TIMING)",
                            flags);
    return current_acquire(&cupool__event_ops, CUPOOL_KIND_EVENT, flags, 0, (void **)event);
}

CUresult cupool_event_release(CUevent event)
{
    return release_handle(&cupool__event_ops, CUPOOL_KIND_EVENT, NULL, event, CUPOOL_H_IDLE);
}
