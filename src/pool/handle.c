/* SPDX-License-Identifier: MIT */
/*
 * A class's handles off the hot path: accounting, context checks, disposal, the depot
 * exchange, creation and prewarming.
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

/* ---------------------------------------------------------------------------------------- */
/* Accounting and handle disposal (slow paths)                                             */
/* ---------------------------------------------------------------------------------------- */

static void live_add(struct cupool__class *cls, int64_t delta)
{
    int64_t now = atomic_fetch_add_explicit(&cls->live, delta, CUPOOL_RELAXED) + delta;
    if (delta <= 0)
        return;
    uint64_t hw = atomic_load_explicit(&cls->high_water, CUPOOL_RELAXED);
    while ((uint64_t)now > hw &&
           !atomic_compare_exchange_weak_explicit(&cls->high_water, &hw, (uint64_t)now,
                                                  CUPOOL_RELAXED, CUPOOL_RELAXED))
        ;
}

/* Retires a class: its context is gone (phase GONE: reclaimable once its handles are
 * forgotten) or broken by a sticky error (BROKEN: reclaimable once a later check finds the
 * context gone). */
static void class_retire(struct cupool__class *cls, int phase)
{
    if (!atomic_exchange(&cls->alive, 0))
        return;
    atomic_store(&cls->phase, phase);
    atomic_fetch_add(&cupool__classes_dead, 1);
    atomic_fetch_add(&cupool__classes_retired, 1);
    cupool__log(CUPOOL_LOG_INFO, "context %llu is %s: its %s pool is retired", cls->ctx_id,
                phase == CUPOOL_CLASS_BROKEN ? "broken" : "gone", cls->ops->name);
}

void cupool__class_mark_dead(struct cupool__class *cls)
{
    class_retire(cls, CUPOOL_CLASS_GONE);
}

void cupool__class_mark_broken(struct cupool__class *cls)
{
    class_retire(cls, CUPOOL_CLASS_BROKEN);
}


/* Errors after which a context is unusable for good: those cuda.h says leave the context or
 * process "in an inconsistent state" (the driver's sticky errors), and a destroyed context. */
bool cupool__error_is_sticky(CUresult r)
{
    switch ((int)r) {
    case 214: /* CUDA_ERROR_ECC_UNCORRECTABLE */
    case 226: /* CUDA_ERROR_CONTAINED */
    case 700: /* CUDA_ERROR_ILLEGAL_ADDRESS */
    case 702: /* CUDA_ERROR_LAUNCH_TIMEOUT */
    case 710: /* CUDA_ERROR_ASSERT */
    case 714: /* CUDA_ERROR_HARDWARE_STACK_ERROR */
    case 715: /* CUDA_ERROR_ILLEGAL_INSTRUCTION */
    case 716: /* CUDA_ERROR_MISALIGNED_ADDRESS */
    case 717: /* CUDA_ERROR_INVALID_ADDRESS_SPACE */
    case 718: /* CUDA_ERROR_INVALID_PC */
    case 719: /* CUDA_ERROR_LAUNCH_FAILED */
    case 721: /* CUDA_ERROR_TENSOR_MEMORY_LEAK */
    case 810: /* CUDA_ERROR_MPS_CLIENT_TERMINATED */
    case 911: /* CUDA_ERROR_EXTERNAL_DEVICE */
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_DEINITIALIZED:
        return true;
    default:
        return false;
    }
}

/* Errors by which the driver says a context is gone, or broken for good. */
static bool error_says_gone(CUresult r)
{
    return r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
           (cupool__error_is_sticky(r) && r != CUDA_ERROR_DEINITIALIZED);
}

/*
 * Is the class's context still the one its handles were made in? A context is declared gone
 * only on the driver's proof: cuCtxGetId(ctx) answers with another id (a reset primary
 * context keeps its CUcontext), or it says the context is destroyed, invalid or broken
 * (CUDA_ERROR_CONTEXT_IS_DESTROYED, CUDA_ERROR_INVALID_CONTEXT, a sticky error) and says so
 * again when asked a second time. A verdict the driver does not repeat, or any other error,
 * is taken as passing: CTX_UNKNOWN-style -1 with *err set, and the caller keeps every handle
 * as it is, to try again later. 1: alive; 0: gone.
 */
int cupool__ctx_verdict(CUcontext ctx, unsigned long long ctx_id, CUresult *err)
{
    if (!cupool__driver_callable()) {
        *err = CUDA_ERROR_DEINITIALIZED;
        return -1;
    }
    CUresult r = CUDA_SUCCESS;
    for (int ask = 0; ask < 2; ask++) {
        unsigned long long id = 0;
        r = CUPOOL_DRV(cupool__drv.cuCtxGetId(ctx, &id));
        if (r == CUDA_SUCCESS)
            return id == ctx_id; /* another id: the context behind the pointer was replaced */
        if (!error_says_gone(r))
            break;
        if (ask == 1)
            return 0; /* the driver said so twice */
    }
    *err = r;
    return -1;
}

/* Pops `pushed`, pushed over `prev`, leaving the caller's context stack as it was; false
 * when the caller's context could not be put back on top. A pop that fails with no effect (a
 * passing error) leaves the push on top: popped again (a cuCtxSetCurrent over the push would
 * leave the stack a level deeper: the caller's own pop would find its context a second time).
 * A pop that took effect and said otherwise leaves prev on top: nothing more to do (where prev
 * is `pushed` itself, the two cannot be told apart, and the stack may stay a level deeper).
 * cuCtxSetCurrent(prev) is the last resort. CUDA_ERROR_DEINITIALIZED (exit or unload began):
 * the driver is not called any more. */
static bool ctx_pop_back(CUcontext pushed, CUcontext prev)
{
    CUcontext popped, cur = NULL;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxPopCurrent(&popped));
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED)
        return true;
    if (CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&cur)) == CUDA_SUCCESS) {
        if (cur == prev)
            return true;
        if (cur == pushed && CUPOOL_DRV(cupool__drv.cuCtxPopCurrent(&popped)) == CUDA_SUCCESS)
            return true;
    }
    return CUPOOL_DRV(cupool__drv.cuCtxSetCurrent(prev)) == CUDA_SUCCESS;
}

/* Is ctx broken by a sticky error? Confirms a sticky error another call returned with an
 * independent question: cuCtxGetId(NULL) with the context current answers with the context's
 * sticky error (as on the H200, and the simulated driver) and succeeds in a healthy context.
 * False when it cannot be shown. ctx_id: for the message only. */
static bool ctx_broken(CUcontext ctx, unsigned long long ctx_id)
{
    CUcontext prev = NULL;
    if (CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&prev)) != CUDA_SUCCESS)
        return false;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxPushCurrent(ctx));
    if (r != CUDA_SUCCESS)
        return false;
    unsigned long long id = 0;
    CUresult probe = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &id));
    if (!ctx_pop_back(ctx, prev))
        cupool__log(CUPOOL_LOG_WARN, "could not restore the caller's current context after "
                                     "probing context %llu",
                    ctx_id);
    return cupool__error_is_sticky(probe) && probe != CUDA_ERROR_DEINITIALIZED;
}

bool cupool__class_ctx_broken(const struct cupool__class *cls)
{
    return ctx_broken(cls->ctx, cls->ctx_id);
}

bool cupool__ctx_broken_by(CUcontext ctx, unsigned long long ctx_id, CUresult r)
{
    return cupool__error_is_sticky(r) && r != CUDA_ERROR_DEINITIALIZED &&
           ctx_broken(ctx, ctx_id);
}

enum ctx_state cupool__class_ctx_check(struct cupool__class *cls, CUresult *err)
{
    if (!atomic_load_explicit(&cls->alive, CUPOOL_RELAXED))
        return CTX_GONE;
    switch (cupool__ctx_verdict(cls->ctx, cls->ctx_id, err)) {
    case 1:
        return CTX_ALIVE;
    case 0:
        cupool__class_mark_dead(cls);
        return CTX_GONE;
    default:
        if (*err != CUDA_ERROR_DEINITIALIZED)
            *err = cupool__fail(*err, "checking context %llu of a %s pool failed", cls->ctx_id,
                                cls->ops->name);
        return CTX_UNKNOWN;
    }
}

/* Forgets a handle without a driver call (its context is gone, or it is broken). */
void cupool__handle_forget(struct cupool__class *cls, struct cupool__handle *rec)
{
    cupool__registry_remove(rec);
    live_add(cls, -1);
    atomic_fetch_add_explicit(&cls->dropped, 1, CUPOOL_RELAXED);
}

/*
 * Destroys a handle of a class whose context is alive. The record goes only after the driver
 * agreed: a failed destroy keeps the handle registered (and the caller keeps it pooled). A
 * handle the driver reuses right after the destroy finds this record and marks it stale,
 * which _remove() then respects. A destroy that fails with a verdict on the context (gone, or
 * a sticky error) retires the class only once the driver confirms it (cupool__ctx_verdict,
 * class_ctx_broken); then the handle is forgotten, as everything of that context.
 */
CUresult cupool__handle_destroy(struct cupool__class *cls, struct cupool__handle *rec)
{
    void *h = atomic_load_explicit(&rec->handle, CUPOOL_RELAXED);
    if (atomic_load_explicit(&rec->state, CUPOOL_RELAXED) == CUPOOL_H_STALE) {
        /* the value now names another handle; this one died with its context */
        cupool__handle_forget(cls, rec);
        return CUDA_SUCCESS;
    }
    CUresult r = (CUPOOL_DRV(cls->ops->destroy(h)));
    if (r == CUDA_SUCCESS) {
        cupool__registry_remove(rec);
        live_add(cls, -1);
        atomic_fetch_add_explicit(&cls->destroys, 1, CUPOOL_RELAXED);
        atomic_fetch_add_explicit(cupool__maint_self ? &cupool__maint_destroys
                                                     : &cupool__req_destroys,
                                  1, CUPOOL_RELAXED);
        return CUDA_SUCCESS;
    }
    if (r != CUDA_ERROR_DEINITIALIZED && error_says_gone(r)) {
        CUresult err = CUDA_SUCCESS;
        bool sticky = cupool__error_is_sticky(r);
        bool confirmed = sticky ? cupool__class_ctx_broken(cls)
                                : cupool__ctx_verdict(cls->ctx, cls->ctx_id, &err) == 0;
        if (confirmed) {
            if (sticky)
                cupool__class_mark_broken(cls);
            else
                cupool__class_mark_dead(cls);
            cupool__handle_forget(cls, rec);
            return CUDA_SUCCESS;
        }
    }
    return cupool__fail(r, "destroying %s %p of context %llu failed", cls->ops->name, h,
                        cls->ctx_id);
}

/* Ends a handle by its context's verdict (CTX_ALIVE or CTX_GONE): destroyed in a live
 * context, forgotten without a driver call in a gone one. A failed destroy keeps the handle
 * registered, for a retry, and is returned. */
CUresult cupool__handle_dispose(struct cupool__class *cls, struct cupool__handle *rec,
                                enum ctx_state st)
{
    if (st == CTX_GONE) {
        cupool__handle_forget(cls, rec);
        return CUDA_SUCCESS;
    }
    return cupool__handle_destroy(cls, rec);
}

/* A handle that cannot be pooled (no memory for a magazine): destroyed if its context is
 * known alive, else forgotten. */
CUresult cupool__handle_discard(struct cupool__class *cls, struct cupool__handle *rec)
{
    CUresult err = CUDA_SUCCESS;
    if (cupool__class_ctx_check(cls, &err) == CTX_ALIVE &&
        cupool__handle_destroy(cls, rec) == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    cupool__handle_forget(cls, rec);
    return CUDA_SUCCESS;
}

/* Queues one idle handle for destruction by a later trim (its destroy failed now); a stream
 * goes unchecked, so that it is vetted again should a miss rescue it. Forgotten when there is
 * no memory for a magazine. */
void cupool__handle_retire(struct cupool__class *cls, struct cupool__handle *rec)
{
    struct cupool__magazine *m = cupool__mag_get();
    if (!m) {
        cupool__handle_forget(cls, rec);
        return;
    }
    atomic_store_explicit(&rec->state,
                          cls->ops->kind == CUPOOL_KIND_STREAM ? CUPOOL_H_IDLE_UNCHECKED
                                                               : CUPOOL_H_IDLE,
                          CUPOOL_RELAXED);
    m->items[m->count++] =
        (struct cupool__mag_item){rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
    atomic_fetch_add_explicit(&cls->retire_idle, 1, CUPOOL_RELAXED);
    cupool__stack_push(&cls->retire, m);
}

/* Destroys up to n handles from the top of a magazine, with one context check for the batch.
 * Stops at the first failure, leaving the rest (the failed one included) in the magazine. */
CUresult cupool__destroy_items(struct cupool__class *cls, struct cupool__magazine *m, uint32_t n)
{
    CUresult err = CUDA_SUCCESS;
    enum ctx_state st = cupool__class_ctx_check(cls, &err);
    if (st == CTX_UNKNOWN)
        return err;
    for (uint32_t i = 0; i < n && m->count; i++) {
        /* The maintenance thread asks before every destroy: the application may reset or
         * destroy the context at any moment of its work (cupool_context_release() is how it
         * waits for that work to end); a request thread's own call cannot overlap a reset the
         * application orders after it. */
        if (i > 0 && cupool__maint_self && st == CTX_ALIVE &&
            (st = cupool__class_ctx_check(cls, &err)) == CTX_UNKNOWN)
            return err;
        CUresult r = cupool__handle_dispose(cls, m->items[m->count - 1].rec, st);
        if (r != CUDA_SUCCESS)
            return r;
        m->count--;
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- */
/* The depot exchange (slow paths of acquire and release)                                   */
/* ---------------------------------------------------------------------------------------- */


/* Asks the maintenance thread for `bits` of work on cls; false when it cannot run (the
 * caller then does the work inline). `wake`: signal it now (a miss, a cap overrun: rare, and
 * the caller paid a driver call or will); otherwise its next round sees it (no system call). */
static bool class_ask_as(struct cupool__class *cls, uint32_t bits, bool wake)
{
    if (!cupool__maint_enabled())
        return false;
    if ((atomic_load_explicit(&cls->want, CUPOOL_RELAXED) & bits) != bits)
        atomic_fetch_or_explicit(&cls->want, bits, CUPOOL_RELAXED);
    return wake ? cupool__maint_kick(CUPOOL_MAINT_POOLS) : cupool__maint_nudge(CUPOOL_MAINT_POOLS);
}

bool cupool__class_ask(struct cupool__class *cls, uint32_t bits)
{
    return class_ask_as(cls, bits, true);
}

/* Pushes a filled magazine to the depot, or to the retire stack when the depot would exceed
 * its hard cap (CUPOOL_*_IDLE_MAX). Two threads may both pass the check at once: the cap can be
 * overshot by one magazine per concurrent thread. Returns true if the caller must destroy
 * retired magazines itself (no maintenance thread); the maintenance thread is asked to
 * otherwise. No driver call. */
bool cupool__depot_put(struct cupool__class *cls, struct cupool__magazine *m)
{
    int64_t n = m->count;
    int64_t idle = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
    if (idle + n > (int64_t)cls->idle_max || !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED)) {
        atomic_fetch_add_explicit(&cls->retire_idle, n, CUPOOL_RELAXED);
        cupool__stack_push(&cls->retire, m);
        return !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) ||
               !cupool__class_ask(cls, CUPOOL_CLASS_WANT_DRAIN);
    }
    depot_max_raise(cls, atomic_fetch_add_explicit(&cls->depot_idle, n, CUPOOL_RELAXED) + n);
    cupool__stack_push(&cls->depot, m);
    cupool__class_decay_inline(cls);
    return false;
}



/* A filled magazine taken from the depot: the decay's minimum, and a refill ahead of demand
 * when the depot runs below half of what it keeps ahead (the reserve a miss asked for, or the
 * headroom of the last decay step). */
static inline void depot_taken(struct cupool__class *cls, int64_t n)
{
    int64_t after = atomic_fetch_sub_explicit(&cls->depot_idle, n, CUPOOL_RELAXED) - n;
    depot_min_lower(cls, after);
    int64_t ahead = class_ahead(cls);
    if (CUPOOL_UNLIKELY(ahead && after < ahead / 2) &&
        !(atomic_load_explicit(&cls->want, CUPOOL_RELAXED) & CUPOOL_CLASS_WANT_REFILL))
        /* no system call while the thread polls (a reserve to fill); a wake-up otherwise */
        (void)class_ask_as(cls, CUPOOL_CLASS_WANT_REFILL, false);
    cupool__class_decay_inline(cls);
}

/* Destroys retired magazines until at most `keep` remain queued, and at most `max` of them
 * (0: no limit). Returns the first error. */
CUresult cupool__drain_retired(struct cupool__class *cls, int64_t keep, int max)
{
    CUresult first = CUDA_SUCCESS;
    for (int done = 0; (max == 0 || done < max) &&
                       atomic_load_explicit(&cls->retire_idle, CUPOOL_RELAXED) >
                           keep * (int64_t)cupool__hot.mag_capacity;
         done++) {
        struct cupool__magazine *m = cupool__stack_pop(&cls->retire);
        if (!m)
            break;
        atomic_fetch_sub_explicit(&cls->retire_idle, m->count, CUPOOL_RELAXED);
        CUresult r = cupool__destroy_items(cls, m, m->count);
        if (m->count) {
            /* not all destroyed: keep the rest queued, try again later */
            atomic_fetch_add_explicit(&cls->retire_idle, m->count, CUPOOL_RELAXED);
            cupool__stack_push(&cls->retire, m);
            first = first == CUDA_SUCCESS ? r : first;
            break;
        }
        cupool__mag_put(m);
    }
    return first;
}

/* Refills an empty slot: swap in `previous` if it holds handles, else take a filled magazine
 * from the depot (or rescue one queued for destruction). Returns a record or NULL. */
struct cupool__handle *cupool__refill(struct cupool__class *cls, struct cupool__slot *s)
{
    struct cupool__magazine *p = s->previous;
    if (p && p->count) {
        s->previous = slot_take_loaded(s);
        slot_set_loaded(s, p);
        return p->items[--s->count].rec;
    }
    struct cupool__magazine *full = cupool__stack_pop(&cls->depot);
    if (full) {
        depot_taken(cls, full->count);
    } else if ((full = cupool__stack_pop(&cls->retire)) != NULL) {
        atomic_fetch_sub_explicit(&cls->retire_idle, full->count, CUPOOL_RELAXED);
    } else {
        return NULL;
    }
    if (p)
        cupool__mag_put(p); /* empty here */
    s->previous = slot_take_loaded(s);
    slot_set_loaded(s, full);
    /* The next acquires write these records, last written by whichever thread released them
     * (a completion thread, in a hand-off): ask for their lines now, all at once, rather than
     * one miss per acquire. */
    for (uint32_t i = 0; i < full->count; i++)
        __builtin_prefetch(full->items[i].rec, 1, 3);
    return s->count ? full->items[--s->count].rec : NULL;
}

CUresult cupool__ctx_enter(struct cupool__class *cls, struct ctx_guard *g)
{
    unsigned long long id = 0;
    g->pushed = false;
    g->prev = NULL;
    if (CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &id)) == CUDA_SUCCESS && id == cls->ctx_id)
        return CUDA_SUCCESS;
    CUresult err = CUDA_SUCCESS;
    switch (cupool__class_ctx_check(cls, &err)) {
    case CTX_GONE:
        return cupool__fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                            "the context (id %llu) of this %s pool is gone (destroyed, reset, or "
                            "broken by a sticky error)",
                            cls->ctx_id, cls->ops->name);
    case CTX_UNKNOWN:
        return err;
    case CTX_ALIVE:
        break;
    }
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&g->prev));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuCtxGetCurrent failed");
    r = CUPOOL_DRV(cupool__drv.cuCtxPushCurrent(cls->ctx));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuCtxPushCurrent(context %llu) failed", cls->ctx_id);
    g->pushed = true;
    g->ctx = cls->ctx;
    return CUDA_SUCCESS;
}

void cupool__ctx_leave(const struct ctx_guard *g)
{
    if (g->pushed && !ctx_pop_back(g->ctx, g->prev))
        cupool__log(CUPOOL_LOG_WARN,
                    "could not restore the caller's current context after a "
                    "pool's creation (cuCtxPopCurrent and cuCtxSetCurrent failed)");
}

/* Creates one handle for `cls` and registers it in `state`. */
CUresult cupool__handle_create(struct cupool__class *cls, bool ctx_current, uint32_t state,
                               struct cupool__handle **out)
{
    struct ctx_guard g = {false, NULL, NULL};
    if (!ctx_current) {
        CUresult r = cupool__ctx_enter(cls, &g);
        if (r != CUDA_SUCCESS)
            return r;
    }
    void *h = NULL;
    CUresult r = (CUPOOL_DRV(cls->ops->create(cls, &h)));
    cupool__ctx_leave(&g);
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "creating %s %s (flags 0x%x) in context %llu failed",
                            cls->ops->kind == CUPOOL_KIND_EVENT ? "an" : "a", cls->ops->name,
                            cls->flags, cls->ctx_id);
    struct cupool__handle *rec = cupool__registry_insert(h, cls, state);
    if (!rec) {
        CUPOOL_DRV(cls->ops->destroy(h));
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory to register a new %s",
                            cls->ops->name);
    }
    atomic_fetch_add_explicit(&cls->creates, 1, CUPOOL_RELAXED);
    atomic_fetch_add_explicit(cupool__maint_self ? &cupool__maint_creates : &cupool__req_creates,
                              1, CUPOOL_RELAXED);
    live_add(cls, 1);
    *out = rec;
    return CUDA_SUCCESS;
}

/* Creates `n` idle handles into the depot (CUPOOL_*_PREWARM). Errors are logged, not fatal. */
void cupool__prewarm(struct cupool__class *cls, uint32_t n, bool ctx_current)
{
    struct cupool__magazine *m = NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (!m && !(m = cupool__mag_get()))
            break;
        struct cupool__handle *rec;
        if (cupool__handle_create(cls, ctx_current, CUPOOL_H_IDLE, &rec) != CUDA_SUCCESS) {
            if (cupool__state_now() == CUPOOL_ST_RUNNING) /* not the process's exit */
                cupool__log(CUPOOL_LOG_WARN, "prewarming %s pool: %s", cls->ops->name,
                            cupool_error_string());
            break;
        }
        m->items[m->count++] =
            (struct cupool__mag_item){rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
        if (m->count == cupool__hot.mag_capacity) {
            cupool__depot_put(cls, m);
            m = NULL;
        }
    }
    if (m && m->count)
        cupool__depot_put(cls, m);
    else if (m)
        cupool__mag_put(m);
}
