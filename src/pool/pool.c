/* SPDX-License-Identifier: MIT */
/*
 * The pools: thread caches, classes, the depot exchange, and (at the end of this file) the
 * public acquire/release functions, which are the hot path.
 *
 * Hot path, acquire: one relaxed load of the lifecycle state; for the current-context API one
 * cuCtxGetId(NULL) and a 4-entry per-thread class cache; then a pop from the thread's loaded
 * magazine. Release: a lock-free registry lookup (one multiply, one or two loads), the
 * ownership check, and a push onto the releasing thread's magazine. No lock, no atomic
 * read-modify-write, no driver call on release.
 *
 * Streams released without CUPOOL_RELEASE_NOT_CAPTURING are pooled "unchecked" and vetted
 * with cuStreamIsCapturing() when an acquire next takes them. Vetting there, not at release,
 * is deliberate: at acquire the current context's id matches the class's, so the context and
 * its streams are known to be alive, while a release may come after a context reset, when any
 * driver call on the old stream crashes the driver (seen on an H200, driver 580.159).
 */
#include "base/internal.h"
#include "pool/pool.h"
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


static pthread_key_t tc_key;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;

/* The class table: index -> class struct (see struct cupool__class). class_lock serialises
 * creation, reuse and reclamation, and guards free_index; lookups read the table without it,
 * inside read sections. Lock order: class_lock, then the registry's, then the allocator's;
 * no other lock of cupool's is held when class_lock is taken, and none is held while a
 * reclamation waits for readers. */
static pthread_mutex_t class_lock = PTHREAD_MUTEX_INITIALIZER;
/* One reclamation pass at a time (taken with trylock: a pass finding another under way leaves
 * the work to it). Held across the pass's grace period, never while class_lock is held. */
static pthread_mutex_t reclaim_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t class_count; /* indexes used so far (the high water) */
static _Atomic(struct cupool__class *) class_by_index[CUPOOL_MAX_CLASSES];
static uint32_t free_index[CUPOOL_MAX_CLASSES]; /* reclaimed indexes, a stack */
static uint32_t nfree_index;
static _Atomic uint32_t classes_dead; /* retired and not yet reclaimed (count) */
_Atomic uint64_t cupool__classes_retired;
void (*cupool__class_miss_hook)(void);
void (*cupool__pool_get_hook)(void);
void (*cupool__reclaim_gen_hook)(void);

uint32_t cupool__class_limit(void)
{
    uint32_t n = atomic_load_explicit(&class_count, CUPOOL_ACQUIRE);
    return n < CUPOOL_MAX_CLASSES ? n : CUPOOL_MAX_CLASSES;
}

struct cupool__class *cupool__class_at(uint32_t index)
{
    return atomic_load_explicit(&class_by_index[index], CUPOOL_ACQUIRE);
}

struct cupool__tcache *cupool__tcaches(void)
{
    return (struct cupool__tcache *)cupool__threads();
}

/* ---------------------------------------------------------------------------------------- */
/* Thread caches                                                                            */
/* ---------------------------------------------------------------------------------------- */

static inline struct cupool__slot *slot_of(struct cupool__tcache *tc, uint32_t index)
{
    if (CUPOOL_LIKELY(index < CUPOOL_SLOTS_PER_CHUNK))
        return &tc->slots0[index];
    struct cupool__slot *chunk = atomic_load_explicit(&tc->chunks[index / CUPOOL_SLOTS_PER_CHUNK],
                                                      CUPOOL_RELAXED);
    return chunk ? &chunk[index % CUPOOL_SLOTS_PER_CHUNK] : NULL;
}

const struct cupool__slot *cupool__slot_peek(const struct cupool__tcache *tc, uint32_t index)
{
    if (index < CUPOOL_SLOTS_PER_CHUNK)
        return &tc->slots0[index];
    struct cupool__slot *chunk = atomic_load_explicit(
        (_Atomic(struct cupool__slot *) *)&tc->chunks[index / CUPOOL_SLOTS_PER_CHUNK],
        CUPOOL_ACQUIRE);
    return chunk ? &chunk[index % CUPOOL_SLOTS_PER_CHUNK] : NULL;
}

static struct cupool__slot *slot_get(struct cupool__tcache *tc, uint32_t index)
{
    struct cupool__slot *s = slot_of(tc, index);
    if (s)
        return s;
    struct cupool__slot *chunk = cupool__alloc(CUPOOL_SLOTS_PER_CHUNK * sizeof(*chunk));
    if (!chunk)
        return NULL;
    atomic_store_explicit(&tc->chunks[index / CUPOOL_SLOTS_PER_CHUNK], chunk, CUPOOL_RELEASE);
    return &chunk[index % CUPOOL_SLOTS_PER_CHUNK];
}

static bool depot_put(struct cupool__class *cls, struct cupool__magazine *m);

/* A slot's loaded magazine keeps its count in the slot (see struct cupool__slot). */
static inline void slot_set_loaded(struct cupool__slot *s, struct cupool__magazine *m)
{
    s->loaded = m;
    s->count = m ? m->count : 0;
}

static inline struct cupool__magazine *slot_take_loaded(struct cupool__slot *s)
{
    struct cupool__magazine *m = s->loaded;
    if (m)
        m->count = s->count;
    s->loaded = NULL;
    s->count = 0;
    return m;
}

/* Moves a slot's magazines to its class's depot (or the global empty stack). No driver call. */
static void slot_flush(struct cupool__class *cls, struct cupool__slot *s)
{
    struct cupool__magazine *mags[2] = {slot_take_loaded(s), s->previous};
    s->previous = NULL;
    for (int i = 0; i < 2; i++) {
        if (!mags[i])
            continue;
        if (mags[i]->count)
            depot_put(cls, mags[i]);
        else
            cupool__mag_put(mags[i]);
    }
}

static void tcache_flush(struct cupool__tcache *tc)
{
    cupool__read_enter(cupool__th(tc));
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        struct cupool__slot *s = slot_of(tc, i);
        struct cupool__class *cls = cupool__class_at(i);
        if (s && cls)
            slot_flush(cls, s);
    }
    cupool__read_leave(cupool__th(tc));
}

static inline bool class_retired(const struct cupool__class *c)
{
    return !atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) && cupool__class_walkable(c);
}

/* Moves this thread's cached handles of retired classes to their retire stacks, where trim
 * or a reclamation forgets them (no driver call): a retired class can be reclaimed only once
 * no thread caches a handle of it. Only when a class was retired since this thread last
 * looked (one load otherwise); from the slow paths of acquire and release. */
static void tcache_sweep_retired(struct cupool__tcache *tc)
{
    uint64_t now = atomic_load_explicit(&cupool__classes_retired, CUPOOL_RELAXED);
    if (CUPOOL_LIKELY(tc->retired_seen == now))
        return;
    tc->retired_seen = now;
    cupool__read_enter(cupool__th(tc));
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        struct cupool__class *cls = cupool__class_at(i);
        struct cupool__slot *s = cls ? slot_of(tc, i) : NULL;
        if (s && (s->loaded || s->previous) && class_retired(cls))
            slot_flush(cls, s);
    }
    cupool__read_leave(cupool__th(tc));
}

/* pthread key destructor: the exiting thread's cached handles go to the depot, without any
 * driver call, and its cache becomes free for a later thread. */
static void tcache_exit(void *arg)
{
    struct cupool__tcache *tc = arg;
    if (cupool__state_now() != CUPOOL_ST_FORKED)
        tcache_flush(tc);
    cupool__self = NULL;
    atomic_store_explicit(&tc->th.active, 0, CUPOOL_RELEASE);
}

static void tc_key_create(void)
{
    if (pthread_key_create(&tc_key, tcache_exit) != 0)
        cupool__log(CUPOOL_LOG_ERROR, "pthread_key_create failed: thread caches will not be "
                                      "returned at thread exit");
}

struct cupool__tcache *cupool__tcache_self(void)
{
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL))
        return tc;
    pthread_once(&tc_once, tc_key_create);
    cupool__exit_marker_register();
    tc = (struct cupool__tcache *)cupool__thread_adopt();
    if (!tc) {
        tc = cupool__alloc(sizeof(*tc));
        if (!tc)
            return NULL;
        atomic_store_explicit(&tc->th.active, 1, CUPOOL_RELAXED);
        cupool__thread_push(&tc->th);
    }
    pthread_setspecific(tc_key, tc);
    cupool__self = &tc->th;
    return tc;
}

static void pool_unload(void)
{
    /* No thread-exit destructor may run into an unmapped library. */
    pthread_once(&tc_once, tc_key_create);
    pthread_key_delete(tc_key);
}

static void pool_init(void)
{
    cupool__mag_init(cupool__cfg.magazine_size);
    pthread_once(&tc_once, tc_key_create);
}

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
    atomic_fetch_add(&classes_dead, 1);
    atomic_fetch_add(&cupool__classes_retired, 1);
    cupool__log(CUPOOL_LOG_INFO, "context %llu is %s: its %s pool is retired", cls->ctx_id,
                phase == CUPOOL_CLASS_BROKEN ? "broken" : "gone", cls->ops->name);
}

static void class_mark_dead(struct cupool__class *cls)
{
    class_retire(cls, CUPOOL_CLASS_GONE);
}

static void class_mark_broken(struct cupool__class *cls)
{
    class_retire(cls, CUPOOL_CLASS_BROKEN);
}


/* Errors after which a context is unusable for good: those cuda.h says leave the context or
 * process "in an inconsistent state" (the driver's sticky errors), and a destroyed context. */
static bool error_is_sticky(CUresult r)
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

/* What a check of a class's context found. */
enum ctx_state { CTX_ALIVE, CTX_GONE, CTX_UNKNOWN };

/* Errors by which the driver says a context is gone, or broken for good. */
static bool error_says_gone(CUresult r)
{
    return r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
           (error_is_sticky(r) && r != CUDA_ERROR_DEINITIALIZED);
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

/* Is the class's context broken by a sticky error? Confirms a sticky error another call
 * returned with an independent question: cuCtxGetId(NULL) with the context current answers
 * with the context's sticky error (as on the H200, and the simulated driver) and succeeds in
 * a healthy context. False when it cannot be shown. */
static bool class_ctx_broken(const struct cupool__class *cls)
{
    CUcontext prev = NULL;
    if (CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&prev)) != CUDA_SUCCESS)
        return false;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxPushCurrent(cls->ctx));
    if (r != CUDA_SUCCESS)
        return false;
    unsigned long long id = 0;
    CUresult probe = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &id));
    CUcontext popped;
    /* the caller's current context back, by other means if the pop fails */
    if (CUPOOL_DRV(cupool__drv.cuCtxPopCurrent(&popped)) != CUDA_SUCCESS &&
        CUPOOL_DRV(cupool__drv.cuCtxSetCurrent(prev)) != CUDA_SUCCESS)
        cupool__log(CUPOOL_LOG_WARN, "could not restore the caller's current context after "
                                     "probing context %llu",
                    cls->ctx_id);
    return error_is_sticky(probe) && probe != CUDA_ERROR_DEINITIALIZED;
}

static enum ctx_state class_ctx_check(struct cupool__class *cls, CUresult *err)
{
    if (!atomic_load_explicit(&cls->alive, CUPOOL_RELAXED))
        return CTX_GONE;
    switch (cupool__ctx_verdict(cls->ctx, cls->ctx_id, err)) {
    case 1:
        return CTX_ALIVE;
    case 0:
        class_mark_dead(cls);
        return CTX_GONE;
    default:
        if (*err != CUDA_ERROR_DEINITIALIZED)
            *err = cupool__fail(*err, "checking context %llu of a %s pool failed", cls->ctx_id,
                                cls->ops->name);
        return CTX_UNKNOWN;
    }
}

/* Forgets a handle without a driver call (its context is gone, or it is broken). */
static void handle_forget(struct cupool__class *cls, struct cupool__handle *rec)
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
static CUresult handle_destroy(struct cupool__class *cls, struct cupool__handle *rec)
{
    void *h = atomic_load_explicit(&rec->handle, CUPOOL_RELAXED);
    if (atomic_load_explicit(&rec->state, CUPOOL_RELAXED) == CUPOOL_H_STALE) {
        /* the value now names another handle; this one died with its context */
        handle_forget(cls, rec);
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
        bool sticky = error_is_sticky(r);
        bool confirmed = sticky ? class_ctx_broken(cls)
                                : cupool__ctx_verdict(cls->ctx, cls->ctx_id, &err) == 0;
        if (confirmed) {
            if (sticky)
                class_mark_broken(cls);
            else
                class_mark_dead(cls);
            handle_forget(cls, rec);
            return CUDA_SUCCESS;
        }
    }
    return cupool__fail(r, "destroying %s %p of context %llu failed", cls->ops->name, h,
                        cls->ctx_id);
}

/* Ends a handle by its context's verdict (CTX_ALIVE or CTX_GONE): destroyed in a live
 * context, forgotten without a driver call in a gone one. A failed destroy keeps the handle
 * registered, for a retry, and is returned. */
static CUresult handle_dispose(struct cupool__class *cls, struct cupool__handle *rec,
                               enum ctx_state st)
{
    if (st == CTX_GONE) {
        handle_forget(cls, rec);
        return CUDA_SUCCESS;
    }
    return handle_destroy(cls, rec);
}

/* A handle that cannot be pooled (no memory for a magazine): destroyed if its context is
 * known alive, else forgotten. */
static CUresult handle_discard(struct cupool__class *cls, struct cupool__handle *rec)
{
    CUresult err = CUDA_SUCCESS;
    if (class_ctx_check(cls, &err) == CTX_ALIVE && handle_destroy(cls, rec) == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    handle_forget(cls, rec);
    return CUDA_SUCCESS;
}

/* Queues one idle handle for destruction by a later trim (its destroy failed now); a stream
 * goes unchecked, so that it is vetted again should a miss rescue it. Forgotten when there is
 * no memory for a magazine. */
static void handle_retire(struct cupool__class *cls, struct cupool__handle *rec)
{
    struct cupool__magazine *m = cupool__mag_get();
    if (!m) {
        handle_forget(cls, rec);
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
static CUresult destroy_items(struct cupool__class *cls, struct cupool__magazine *m, uint32_t n)
{
    CUresult err = CUDA_SUCCESS;
    enum ctx_state st = class_ctx_check(cls, &err);
    if (st == CTX_UNKNOWN)
        return err;
    for (uint32_t i = 0; i < n && m->count; i++) {
        /* The maintenance thread asks before every destroy: the application may reset or
         * destroy the context at any moment of its work (cupool_context_release() is how it
         * waits for that work to end); a request thread's own call cannot overlap a reset the
         * application orders after it. */
        if (i > 0 && cupool__maint_self && st == CTX_ALIVE &&
            (st = class_ctx_check(cls, &err)) == CTX_UNKNOWN)
            return err;
        CUresult r = handle_dispose(cls, m->items[m->count - 1].rec, st);
        if (r != CUDA_SUCCESS)
            return r;
        m->count--;
    }
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------------------------------- */
/* The depot exchange (slow paths of acquire and release)                                   */
/* ---------------------------------------------------------------------------------------- */

static void class_decay_inline(struct cupool__class *cls);

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

static bool class_ask(struct cupool__class *cls, uint32_t bits)
{
    return class_ask_as(cls, bits, true);
}

/* Pushes a filled magazine to the depot, or to the retire stack when the depot would exceed
 * its hard cap (CUPOOL_*_IDLE_MAX). Two threads may both pass the check at once: the cap can be
 * overshot by one magazine per concurrent thread. Returns true if the caller must destroy
 * retired magazines itself (no maintenance thread); the maintenance thread is asked to
 * otherwise. No driver call. */
static bool depot_put(struct cupool__class *cls, struct cupool__magazine *m)
{
    int64_t n = m->count;
    int64_t idle = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
    if (idle + n > (int64_t)cls->idle_max || !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED)) {
        atomic_fetch_add_explicit(&cls->retire_idle, n, CUPOOL_RELAXED);
        cupool__stack_push(&cls->retire, m);
        return !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) ||
               !class_ask(cls, CUPOOL_CLASS_WANT_DRAIN);
    }
    atomic_fetch_add_explicit(&cls->depot_idle, n, CUPOOL_RELAXED);
    cupool__stack_push(&cls->depot, m);
    class_decay_inline(cls);
    return false;
}

/* Lowers the depot's recorded minimum to `now_idle` (the decay's measure of demand). */
static inline void depot_min_lower(struct cupool__class *cls, int64_t now_idle)
{
    int64_t m = atomic_load_explicit(&cls->depot_min, CUPOOL_RELAXED);
    while (now_idle < m && !atomic_compare_exchange_weak_explicit(
                               &cls->depot_min, &m, now_idle, CUPOOL_RELAXED, CUPOOL_RELAXED))
        ;
}

/* A filled magazine taken from the depot: the decay's minimum, and a refill ahead of demand
 * when the depot runs low below the reserve a miss asked for. */
static inline void depot_taken(struct cupool__class *cls, int64_t n)
{
    int64_t after = atomic_fetch_sub_explicit(&cls->depot_idle, n, CUPOOL_RELAXED) - n;
    depot_min_lower(cls, after);
    uint32_t reserve = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
    if (CUPOOL_UNLIKELY(reserve && after < (int64_t)reserve / 2) &&
        !(atomic_load_explicit(&cls->want, CUPOOL_RELAXED) & CUPOOL_CLASS_WANT_REFILL))
        (void)class_ask_as(cls, CUPOOL_CLASS_WANT_REFILL, false); /* the thread polls */
    class_decay_inline(cls);
}

/* Destroys retired magazines until at most `keep` remain queued, and at most `max` of them
 * (0: no limit). Returns the first error. */
static CUresult drain_retired(struct cupool__class *cls, int64_t keep, int max)
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
        CUresult r = destroy_items(cls, m, m->count);
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
static struct cupool__handle *refill(struct cupool__class *cls, struct cupool__slot *s)
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

/* Makes `cls`'s context current for a creation, pushing it when another is current;
 * ctx_leave() undoes it. */
struct ctx_guard {
    bool pushed;
    CUcontext prev;
};

static CUresult ctx_enter(struct cupool__class *cls, struct ctx_guard *g)
{
    unsigned long long id = 0;
    g->pushed = false;
    g->prev = NULL;
    if (CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &id)) == CUDA_SUCCESS && id == cls->ctx_id)
        return CUDA_SUCCESS;
    CUresult err = CUDA_SUCCESS;
    switch (class_ctx_check(cls, &err)) {
    case CTX_GONE:
        return cupool__fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                            "the context (id %llu) of this %s pool is gone (destroyed, reset, or broken by a sticky error)",
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
    return CUDA_SUCCESS;
}

static void ctx_leave(const struct ctx_guard *g)
{
    CUcontext popped;
    if (!g->pushed)
        return;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxPopCurrent(&popped));
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED)
        return; /* popped; or exit or unload began: the driver is not called any more */
    /* The pop failed: put the caller's context back by other means. */
    if (CUPOOL_DRV(cupool__drv.cuCtxSetCurrent(g->prev)) != CUDA_SUCCESS)
        cupool__log(CUPOOL_LOG_WARN, "could not restore the caller's current context after a "
                                     "pool's creation (cuCtxPopCurrent and cuCtxSetCurrent failed)");
}

/* Creates one handle for `cls` and registers it in `state`. */
static CUresult handle_create(struct cupool__class *cls, bool ctx_current, uint32_t state,
                              struct cupool__handle **out)
{
    struct ctx_guard g = {false, NULL};
    if (!ctx_current) {
        CUresult r = ctx_enter(cls, &g);
        if (r != CUDA_SUCCESS)
            return r;
    }
    void *h = NULL;
    CUresult r = (CUPOOL_DRV(cls->ops->create(cls, &h)));
    ctx_leave(&g);
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
static void prewarm(struct cupool__class *cls, uint32_t n, bool ctx_current)
{
    struct cupool__magazine *m = NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (!m && !(m = cupool__mag_get()))
            break;
        struct cupool__handle *rec;
        if (handle_create(cls, ctx_current, CUPOOL_H_IDLE, &rec) != CUDA_SUCCESS) {
            if (cupool__state_now() == CUPOOL_ST_RUNNING) /* not the process's exit */
                cupool__log(CUPOOL_LOG_WARN, "prewarming %s pool: %s", cls->ops->name,
                            cupool_error_string());
            break;
        }
        m->items[m->count++] =
            (struct cupool__mag_item){rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
        if (m->count == cupool__hot.mag_capacity) {
            depot_put(cls, m);
            m = NULL;
        }
    }
    if (m && m->count)
        depot_put(cls, m);
    else if (m)
        cupool__mag_put(m);
}

/* ---------------------------------------------------------------------------------------- */
/* Idle capacity that follows demand: decay, reserve, the maintenance thread's rounds        */
/* ---------------------------------------------------------------------------------------- */

uint64_t cupool__decay_period_ns(void)
{
    /* four ticks per decay time: a handle idle for the whole of it goes within 1.25 x */
    uint64_t ms = cupool__cfg.decay_ms ? cupool__cfg.decay_ms : 10000;
    uint64_t ns = ms * 1000000ull / 4;
    return ns ? ns : 1;
}

uint64_t (*cupool__decay_clock)(void);

static inline uint64_t decay_now(void)
{
    return CUPOOL_UNLIKELY(cupool__decay_clock != NULL) ? cupool__decay_clock()
                                                        : cupool__monotonic_ns();
}

/* A miss (the depot was empty): the maintenance thread is asked to keep a reserve in the
 * depot, grown (doubled, from two magazines, to at most half the hard cap) once per fill. */
static void class_missed(struct cupool__class *cls)
{
    atomic_store_explicit(&cls->missed, true, CUPOOL_RELAXED);
    /* a class's first misses are its warm-up: what they create is its working set, and
     * creating more ahead of it would only guess (a program using one stream would get 33) */
    if (!atomic_load_explicit(&cls->warm, CUPOOL_RELAXED) || !cupool__maint_enabled())
        return;
    if (atomic_exchange_explicit(&cls->reserve_met, false, CUPOOL_RELAXED)) {
        uint32_t r = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
        uint32_t grown = r ? 2 * r : 2 * cupool__hot.mag_capacity;
        uint32_t cap = cls->idle_max / 2;
        grown = grown > cap ? cap : grown;
        if (grown > r)
            atomic_store_explicit(&cls->reserve, grown, CUPOOL_RELAXED);
    }
    (void)class_ask(cls, CUPOOL_CLASS_WANT_REFILL);
}

/* Destroys depot handles, at most `max_mags` magazines' worth, until the depot holds at most
 * `target`. Returns the handles destroyed (or forgotten: a context that is gone); *err gets the
 * first failure (the handle and the rest of its magazine stay pooled). */
static int64_t depot_shrink(struct cupool__class *cls, int64_t target, int max_mags,
                            CUresult *err)
{
    int64_t gone = 0;
    for (int i = 0; (max_mags == 0 || i < max_mags) &&
                    atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED) > target;
         i++) {
        struct cupool__magazine *m = cupool__stack_pop(&cls->depot);
        if (!m)
            break;
        int64_t before = atomic_fetch_sub_explicit(&cls->depot_idle, m->count, CUPOOL_RELAXED);
        depot_min_lower(cls, before - m->count);
        int64_t excess = before - target;
        uint32_t n = excess >= (int64_t)m->count ? m->count : (uint32_t)(excess > 0 ? excess : 0);
        uint32_t had = m->count;
        CUresult r = destroy_items(cls, m, n);
        gone += had - m->count;
        if (r != CUDA_SUCCESS && *err == CUDA_SUCCESS)
            *err = r;
        if (m->count) {
            atomic_fetch_add_explicit(&cls->depot_idle, m->count, CUPOOL_RELAXED);
            cupool__stack_push(&cls->depot, m);
            break;
        }
        cupool__mag_put(m);
    }
    return gone;
}

/*
 * One decay step of cls, by the thread that moved next_tick_ns on (it alone touches mins).
 * Handles that stayed in the depot through the last four ticks (one decay time,
 * CUPOOL_DECAY_MS) were never needed in it: they are destroyed, down to the larger of the
 * reserve and the low-water mark (CUPOOL_*_PREWARM). The model is the working-set estimate of
 * Bonwick & Adams's depot and jemalloc's decay-based purging. At most max_mags magazines
 * (0: all); true when more were due.
 */
static bool class_decay_step(struct cupool__class *cls, int max_mags, CUresult *err)
{
    int64_t cur = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
    int64_t m = atomic_exchange_explicit(&cls->depot_min, cur, CUPOOL_RELAXED);
    cls->mins[cls->nmins++ % 4] = m < cur ? m : cur;
    atomic_store_explicit(&cls->warm, true, CUPOOL_RELAXED);
    if (!atomic_exchange_explicit(&cls->missed, false, CUPOOL_RELAXED)) {
        uint32_t r = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
        atomic_store_explicit(&cls->reserve, r / 2, CUPOOL_RELAXED);
    }
    if (cupool__cfg.decay_ms == 0 || cls->nmins < 4)
        return false;
    int64_t lo = cls->mins[0];
    for (int i = 1; i < 4; i++)
        lo = cls->mins[i] < lo ? cls->mins[i] : lo;
    int64_t keep = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
    keep = keep > (int64_t)cls->low_water ? keep : (int64_t)cls->low_water;
    if (lo <= keep)
        return false;
    int64_t want_gone = lo - keep;
    int64_t gone = depot_shrink(cls, cur - want_gone, max_mags, err);
    for (int i = 0; i < 4; i++)
        cls->mins[i] = cls->mins[i] > gone ? cls->mins[i] - gone : 0;
    cls->decay_due = *err == CUDA_SUCCESS ? want_gone - gone : 0;
    return cls->decay_due > 0;
}

/* The rest of a decay step, max_mags magazines more (the maintenance thread, after the step).
 * True while some is left. */
static bool class_decay_more(struct cupool__class *cls, int max_mags, CUresult *err)
{
    if (cls->decay_due <= 0)
        return false;
    int64_t cur = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
    int64_t keep = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
    keep = keep > (int64_t)cls->low_water ? keep : (int64_t)cls->low_water;
    int64_t target = cur - cls->decay_due;
    target = target > keep ? target : keep;
    int64_t gone = cur > target ? depot_shrink(cls, target, max_mags, err) : 0;
    for (int i = 0; i < 4; i++)
        cls->mins[i] = cls->mins[i] > gone ? cls->mins[i] - gone : 0;
    cls->decay_due = *err == CUDA_SUCCESS && gone > 0 ? cls->decay_due - gone : 0;
    return cls->decay_due > 0;
}

/* Claims cls's decay step if it is due (compare-and-swap of next_tick_ns). */
static bool class_tick_claim(struct cupool__class *cls, uint64_t now)
{
    uint64_t due = atomic_load_explicit(&cls->next_tick_ns, CUPOOL_ACQUIRE);
    return now >= due &&
           atomic_compare_exchange_strong_explicit(&cls->next_tick_ns, &due,
                                                   now + cupool__decay_period_ns(), CUPOOL_ACQ_REL,
                                                   CUPOOL_RELAXED);
}

/* Without the maintenance thread (CUPOOL_BACKGROUND=0), the decay runs on the depot exchanges
 * of the class, at most two magazines per step: the inline fallback. */
static void class_decay_inline(struct cupool__class *cls)
{
    if (CUPOOL_LIKELY(cupool__cfg.background) && cupool__maint_enabled())
        return;
    if (cupool__cfg.decay_ms == 0 || cupool__state_now() != CUPOOL_ST_RUNNING)
        return;
    if (class_tick_claim(cls, decay_now())) {
        CUresult err = CUDA_SUCCESS;
        (void)class_decay_step(cls, 2, &err);
    }
}

/* Creates into the depot, at most max_mags magazines, until it holds cls's reserve. True when
 * more is due. On the maintenance thread. */
static bool class_refill(struct cupool__class *cls, int max_mags, CUresult *err)
{
    int64_t target = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
    target = target > (int64_t)cls->idle_max ? (int64_t)cls->idle_max : target;
    for (int i = 0; i < max_mags; i++) {
        int64_t have = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
        if (have >= target || !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) ||
            !cupool__maint_enabled())
            break;
        struct cupool__magazine *m = cupool__mag_get();
        if (!m)
            return false;
        uint32_t n = target - have < (int64_t)cupool__hot.mag_capacity ? (uint32_t)(target - have)
                                                                    : cupool__hot.mag_capacity;
        while (m->count < n) {
            struct cupool__handle *rec;
            CUresult r = handle_create(cls, false, CUPOOL_H_IDLE, &rec);
            if (r != CUDA_SUCCESS) {
                *err = r;
                break;
            }
            m->items[m->count++] = (struct cupool__mag_item){
                rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
        }
        if (m->count)
            (void)depot_put(cls, m); /* under the hard cap: target is */
        else
            cupool__mag_put(m);
        if (*err != CUDA_SUCCESS)
            return false;
    }
    if (atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED) >= target) {
        atomic_store_explicit(&cls->reserve_met, true, CUPOOL_RELAXED);
        return false;
    }
    return atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) != 0;
}

/* The work units of one round: small, so that no read section of the maintenance thread
 * lasts long (a magazine of streams is ~16 x 5 us to create or destroy). */
#define MAINT_MAGS 4

uint64_t cupool__pools_maintain(void)
{
    struct cupool__tcache *tc = cupool__tl;
    bool more = false, failed = false, reserves = false;
    uint64_t now = decay_now(), next_due = UINT64_MAX;
    cupool__read_enter(cupool__th(tc));
    uint32_t n = cupool__class_limit();
    cupool__read_leave(cupool__th(tc));
    for (uint32_t i = 0; i < n && cupool__maint_enabled(); i++) {
        cupool__read_enter(cupool__th(tc));
        struct cupool__class *c = cupool__class_at(i);
        if (!c || !atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE)) {
            cupool__read_leave(cupool__th(tc));
            continue;
        }
        cupool__read_leave(cupool__th(tc));
        /* one unit of work per class under the unit lock (cupool_context_release waits for
         * it), then the class is looked at again: it may have been released meanwhile */
        pthread_mutex_lock(&cupool__maint_unit);
        cupool__read_enter(cupool__th(tc));
        c = cupool__class_at(i);
        if (!c || !atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE)) {
            cupool__read_leave(cupool__th(tc));
            pthread_mutex_unlock(&cupool__maint_unit);
            continue;
        }
        uint32_t w = atomic_exchange_explicit(&c->want, 0, CUPOOL_RELAXED);
        CUresult err = CUDA_SUCCESS;
        bool again = false;
        if ((w & CUPOOL_CLASS_WANT_DRAIN) || atomic_load_explicit(&c->retire_idle, CUPOOL_RELAXED)) {
            err = drain_retired(c, 0, MAINT_MAGS);
            if (err == CUDA_SUCCESS && atomic_load_explicit(&c->retire_idle, CUPOOL_RELAXED))
                again = true, w |= CUPOOL_CLASS_WANT_DRAIN;
        }
        if (err == CUDA_SUCCESS && (w & CUPOOL_CLASS_WANT_REFILL)) {
            if (class_refill(c, MAINT_MAGS, &err))
                again = true;
            else
                w &= ~CUPOOL_CLASS_WANT_REFILL;
        }
        if (err == CUDA_SUCCESS && c->decay_due > 0)
            again |= class_decay_more(c, MAINT_MAGS, &err);
        else if (err == CUDA_SUCCESS && class_tick_claim(c, now))
            again |= class_decay_step(c, MAINT_MAGS, &err);
        if (err != CUDA_SUCCESS)
            failed = true; /* a passing driver error: the next round tries again */
        else
            w &= ~CUPOOL_CLASS_WANT_DRAIN;
        if (w)
            atomic_fetch_or_explicit(&c->want, w, CUPOOL_RELAXED);
        more |= again;
        /* a reserve still to fill: its exchanges nudge without waking the thread */
        uint32_t rsv = atomic_load_explicit(&c->reserve, CUPOOL_RELAXED);
        reserves |= rsv != 0 && atomic_load_explicit(&c->depot_idle, CUPOOL_RELAXED) < (int64_t)rsv;
        uint64_t due = atomic_load_explicit(&c->next_tick_ns, CUPOOL_RELAXED);
        next_due = due < next_due ? due : next_due;
        cupool__read_leave(cupool__th(tc));
        pthread_mutex_unlock(&cupool__maint_unit);
    }
    if (more)
        return 0;
    if (failed)
        return 100000000u; /* 100 ms */
    /* a class with a reserve is growing: its exchanges ask for refills without waking the
     * thread, which looks every millisecond until the reserves decay; otherwise the next
     * class's decay step is the next deadline (classes are made between the thread's ticks) */
    uint64_t wait = next_due > now ? next_due - now : 0;
    if (cupool__decay_clock != NULL)
        wait = UINT64_MAX; /* a test drives the clock: it flushes the thread itself */
    return reserves && wait > 1000000u ? 1000000u : wait;
}

/* ---------------------------------------------------------------------------------------- */
/* Classes                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/*
 * The class index: an open-addressing hash table (linear probing) from a class's key (kind,
 * context id, flags, clamped priority) to its index + 1. 0 ends a probe; CLASS_TOMB (a removed
 * entry) does not. Twice the most classes there can be, so probes stay short.
 * Contract: written only under class_lock (an insert when a class is published, a removal when
 * its struct is reclaimed, a rebuild in place once tombstones fill a quarter of it); read
 * lock-free inside read sections. A reader trusts no entry: it checks the class it names is
 * live and has the key, so an entry a rebuild is moving can only make it miss, and a miss goes
 * to class_lock, under which the table is exact.
 */
#define CLASS_HASH_SIZE (2u * CUPOOL_MAX_CLASSES)
#define CLASS_TOMB UINT32_MAX
static _Atomic uint32_t class_hash[CLASS_HASH_SIZE];
static uint32_t class_hash_tombs; /* under class_lock */

static inline uint32_t class_key_hash(const struct cupool__class_ops *ops,
                                      unsigned long long ctx_id, unsigned int flags,
                                      int priority)
{
    uint64_t h = (uint64_t)ctx_id * UINT64_C(0x9E3779B97F4A7C15);
    h ^= ((uint64_t)flags << 32 | (uint32_t)priority) * UINT64_C(0xC2B2AE3D27D4EB4F);
    h ^= (uint64_t)ops->kind << 17;
    h ^= h >> 29;
    return (uint32_t)(h * UINT64_C(0x94D049BB133111EB) >> 40) & (CLASS_HASH_SIZE - 1);
}

static inline bool class_has_key(const struct cupool__class *c, const struct cupool__class_ops *ops,
                                 unsigned long long ctx_id, unsigned int flags, int priority)
{
    return atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) && c->ops == ops &&
           c->ctx_id == ctx_id && c->flags == flags && c->priority == priority;
}

/* The live class of these parameters, or NULL. A class retired while its context id still
 * answers (a sticky error; or the driver said the context was gone, then answered again) is
 * replaced, not reused. Lock-free; the caller is inside a read section (or holds class_lock,
 * where the answer is exact). */
static struct cupool__class *class_find(const struct cupool__class_ops *ops,
                                        unsigned long long ctx_id, unsigned int flags,
                                        int priority)
{
    uint32_t limit = cupool__class_limit();
    uint32_t i = class_key_hash(ops, ctx_id, flags, priority);
    for (uint32_t probes = 0; probes < CLASS_HASH_SIZE; probes++, i = (i + 1) & (CLASS_HASH_SIZE - 1)) {
        uint32_t v = atomic_load_explicit(&class_hash[i], CUPOOL_ACQUIRE);
        if (v == 0)
            return NULL;
        if (v == CLASS_TOMB || v - 1 >= limit)
            continue;
        struct cupool__class *c = cupool__class_at(v - 1);
        if (c && class_has_key(c, ops, ctx_id, flags, priority))
            return c;
    }
    return NULL;
}

static void class_hash_put(const struct cupool__class *c)
{
    uint32_t i = class_key_hash(c->ops, c->ctx_id, c->flags, c->priority);
    for (;; i = (i + 1) & (CLASS_HASH_SIZE - 1)) {
        uint32_t v = atomic_load_explicit(&class_hash[i], CUPOOL_RELAXED);
        if (v == 0 || v == CLASS_TOMB) {
            if (v == CLASS_TOMB)
                class_hash_tombs--;
            atomic_store_explicit(&class_hash[i], c->index + 1, CUPOOL_RELEASE);
            return;
        }
    }
}

/* Rebuilds the index in place from the live classes. class_lock held. */
static void class_hash_rebuild(void)
{
    for (uint32_t i = 0; i < CLASS_HASH_SIZE; i++)
        atomic_store_explicit(&class_hash[i], 0, CUPOOL_RELAXED);
    class_hash_tombs = 0;
    uint32_t limit = cupool__class_limit();
    for (uint32_t k = 0; k < limit; k++) {
        struct cupool__class *c = cupool__class_at(k);
        if (c && atomic_load_explicit(&c->alive, CUPOOL_RELAXED))
            class_hash_put(c);
    }
}

/* Publishes c in the index (c->alive is about to become 1). class_lock held. */
static void class_hash_insert(const struct cupool__class *c)
{
    if (class_hash_tombs > CLASS_HASH_SIZE / 4)
        class_hash_rebuild();
    class_hash_put(c);
}

/* Removes the entry of c's index (its struct is being reclaimed). class_lock held. */
static void class_hash_remove(const struct cupool__class *c)
{
    uint32_t i = class_key_hash(c->ops, c->ctx_id, c->flags, c->priority);
    for (uint32_t probes = 0; probes < CLASS_HASH_SIZE; probes++, i = (i + 1) & (CLASS_HASH_SIZE - 1)) {
        uint32_t v = atomic_load_explicit(&class_hash[i], CUPOOL_RELAXED);
        if (v == 0)
            return; /* not there (a rebuild left a retired class out) */
        if (v == c->index + 1) {
            atomic_store_explicit(&class_hash[i], CLASS_TOMB, CUPOOL_RELEASE);
            class_hash_tombs++;
            return;
        }
    }
}

/* A context pointer seen with a new id means the old context behind that pointer was reset
 * (the primary context keeps its CUcontext across cuDevicePrimaryCtxReset): retire its pools.
 * Inside a read section. */
static void classes_retire_reset(CUcontext ctx, unsigned long long ctx_id)
{
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        struct cupool__class *c = cupool__class_at(i);
        if (c && atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) && c->ctx == ctx &&
            c->ctx_id != ctx_id)
            class_mark_dead(c);
    }
}

/* Forgets every idle handle in a retired class's depot and retire stack (no driver call: its
 * context is gone). */
static void class_forget_idle(struct cupool__class *cls)
{
    struct cupool__mag_stack *stacks[2] = {&cls->depot, &cls->retire};
    _Atomic int64_t *counts[2] = {&cls->depot_idle, &cls->retire_idle};
    for (int k = 0; k < 2; k++) {
        struct cupool__magazine *m;
        while ((m = cupool__stack_pop(stacks[k])) != NULL) {
            atomic_fetch_sub_explicit(counts[k], m->count, CUPOOL_RELAXED);
            while (m->count)
                handle_forget(cls, m->items[--m->count].rec);
            cupool__mag_put(m);
        }
    }
}

/* Retired classes that make a class creation try a reclamation first (count). */
#define RECLAIM_AT 16

/* Reclaims retired classes whose context is gone and of which no handle is left: their
 * indexes (and structs, and every thread's slot at them) serve new classes, so a process
 * that resets or creates contexts for months never fills the table. The struct's gen moves
 * on first, then every read section that may still hold the old class is waited for (no lock
 * held); if that cannot be shown in time the classes wait for the next pass. Returns the
 * number reclaimed, or -1 when the grace period did not end within timeout_ns. From trim, from
 * class creation and from cupool__reclaim_deferred(); the caller is outside every read
 * section of its own. */
static int classes_reclaim(uint64_t timeout_ns)
{
    if (!atomic_load(&classes_dead))
        return 0;
    /* exclusive: two passes would both pick a class, and free its index twice */
    if (pthread_mutex_trylock(&reclaim_lock) != 0)
        return 0;
    enum { BATCH = 256 };
    struct cupool__class *cand[BATCH];
    uint64_t cand_gen[BATCH];
    uint32_t n = 0;
    pthread_mutex_lock(&class_lock);
    uint32_t limit = cupool__class_limit();
    for (uint32_t i = 0; i < limit && n < BATCH; i++) {
        struct cupool__class *c = cupool__class_at(i);
        if (!c || atomic_load(&c->alive))
            continue;
        int phase = atomic_load(&c->phase);
        if (phase == CUPOOL_CLASS_BROKEN) {
            /* broken, not proven gone: its id may still answer, and a thread's class cache
             * may still match it; reclaimable once the context itself is gone */
            CUresult err;
            if (cupool__ctx_verdict(c->ctx, c->ctx_id, &err) != 0)
                continue;
            atomic_store(&c->phase, phase = CUPOOL_CLASS_GONE);
        }
        if (phase != CUPOOL_CLASS_GONE)
            continue;
        class_forget_idle(c);
        if (atomic_load(&c->live) != 0)
            continue; /* owned by a caller, or in a thread's magazine: later */
        /* unpublished: out of every walk of the table (trim, sweeps, statistics), and pool
         * handles and class-cache entries stop matching; only sections begun before this can
         * still hold it, and the grace period waits for those */
        atomic_store(&c->phase, CUPOOL_CLASS_RECLAIMING);
        cand_gen[n] = atomic_fetch_add(&c->gen, 1) + 1;
        cand[n++] = c;
    }
    pthread_mutex_unlock(&class_lock);
    if (n > 0 && CUPOOL_UNLIKELY(cupool__reclaim_gen_hook != NULL))
        cupool__reclaim_gen_hook(); /* tests: the gens moved on, the grace period not begun */
    bool grace = n > 0 && cupool__synchronize(timeout_ns);
    int freed = 0;
    pthread_mutex_lock(&class_lock);
    for (uint32_t k = 0; k < n; k++) {
        struct cupool__class *c = cand[k];
        /* nothing can have revived it (no handle exists, no creator takes a retired struct),
         * but it is checked: a wrongly freed index would serve two classes */
        bool ok = grace && !atomic_load(&c->alive) &&
                  atomic_load(&c->phase) == CUPOOL_CLASS_RECLAIMING &&
                  atomic_load(&c->live) == 0 && atomic_load(&c->gen) == cand_gen[k];
        if (!ok) {
            if (atomic_load(&c->phase) == CUPOOL_CLASS_RECLAIMING)
                atomic_store(&c->phase, CUPOOL_CLASS_GONE); /* a later pass tries again */
            continue;
        }
        class_hash_remove(c);
        atomic_store(&c->phase, CUPOOL_CLASS_FREE);
        free_index[nfree_index++] = c->index;
        atomic_fetch_sub(&classes_dead, 1);
        freed++;
    }
    pthread_mutex_unlock(&class_lock);
    pthread_mutex_unlock(&reclaim_lock);
    return n > 0 && !grace ? -1 : freed;
}

/* Asks the driver about the context of every live class, retiring those it proves gone
 * (cupool__ctx_verdict: a passing error keeps the class). A context destroyed with
 * cuCtxDestroy leaves its classes behind otherwise: nothing else looks at a class whose
 * handles are all owned or cached, or whose depot holds no more than its low-water mark.
 * One cuCtxGetId per class. From trim and from class creation finding every index in use;
 * inside a read section (each class struct stays mapped, and a retired one is skipped). */
static void classes_check_contexts(void)
{
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        struct cupool__class *c = cupool__class_at(i);
        CUresult err;
        if (c && atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) &&
            cupool__ctx_verdict(c->ctx, c->ctx_id, &err) == 0)
            class_mark_dead(c);
    }
}

/* classes_reclaim() from inside the caller's read sections (class creation finding every
 * index in use), after asking the driver about every live class's context: the sections,
 * with or without the thread's cache, are left for the pass and entered again. The caller
 * holds no class across the call. True if any class was reclaimed. */
static bool classes_reclaim_outside(void)
{
    classes_check_contexts();
    struct cupool__tcache *tc = cupool__tl;
    uint32_t depth = tc ? atomic_load_explicit(&tc->th.in_read, CUPOOL_RELAXED) & CUPOOL_RD_NEST : 0;
    uint32_t anon = cupool__read_anon_tl & CUPOOL_RD_NEST;
    for (uint32_t i = 0; i < depth; i++)
        cupool__read_leave(cupool__th(tc));
    for (uint32_t i = 0; i < anon; i++)
        cupool__read_leave(NULL);
    bool any = classes_reclaim(10000000u) > 0;
    for (uint32_t i = 0; i < anon; i++)
        cupool__read_enter(NULL);
    for (uint32_t i = 0; i < depth; i++)
        cupool__read_enter(cupool__th(tc));
    return any;
}

/* Deferred reclamation runs on callers' threads, so it waits briefly (a grace period takes
 * microseconds when no section is held up) and, when a section was held up, backs off:
 * the next try is RECLAIM_BACKOFF_MIN_NS later, doubling to RECLAIM_BACKOFF_MAX_NS while
 * tries keep failing. A caller thus stalls at most RECLAIM_WAIT_NS, at most once per backoff
 * period, however long another thread stays in a section (cupool_trim waits longer). */
#define RECLAIM_WAIT_NS 200000u
#define RECLAIM_BACKOFF_MIN_NS 1000000u
#define RECLAIM_BACKOFF_MAX_NS 1000000000u
static _Atomic uint64_t reclaim_not_before; /* monotonic ns */
static _Atomic uint64_t reclaim_backoff;    /* ns; 0: the last try succeeded */
static _Atomic bool reclaim_trying;         /* a thread is in a try (one at a time) */

void cupool__reclaim_deferred(void)
{
    int st = cupool__state_now();
    if (st != CUPOOL_ST_RUNNING && st != CUPOOL_ST_PASSTHROUGH)
        return; /* a forked child, an exit or an unload: nothing is reclaimed any more */
    if (cupool__read_inside())
        return; /* still inside a section: the next call on the way out does it */
    uint64_t now = cupool__monotonic_ns();
    uint64_t not_before = atomic_load_explicit(&reclaim_not_before, CUPOOL_RELAXED);
    if (now < not_before) {
        /* backing off: the maintenance thread tries again after the pause, and the calls
         * meanwhile pay nothing; without the thread the flag stays set for a call after the
         * pause (each call on its way out reads the clock till then). The flag is cleared
         * before the hand-off, so a need set meanwhile is never wiped by this store. */
        atomic_store_explicit(&cupool__hot.reclaim_due, false, CUPOOL_SEQ_CST);
        if (!cupool__maint_reclaim_later(not_before))
            atomic_store_explicit(&cupool__hot.reclaim_due, true, CUPOOL_RELAXED);
        return;
    }
    /* one try at a time (the maintenance thread's retry and a request thread's call may meet
     * at the end of a pause): the other's outcome decides, and the flag, if set, stays so */
    if (atomic_exchange_explicit(&reclaim_trying, true, CUPOOL_ACQUIRE))
        return;
    atomic_store_explicit(&cupool__hot.reclaim_due, false, CUPOOL_SEQ_CST);
    bool ok = cupool__registry_reclaim(RECLAIM_WAIT_NS);
    if (atomic_load(&classes_dead) >= RECLAIM_AT && classes_reclaim(RECLAIM_WAIT_NS) < 0)
        ok = false;
    if (ok) {
        atomic_store_explicit(&reclaim_backoff, 0, CUPOOL_RELAXED);
        atomic_store_explicit(&reclaim_trying, false, CUPOOL_RELEASE);
        return;
    }
    uint64_t b = atomic_load_explicit(&reclaim_backoff, CUPOOL_RELAXED);
    b = b ? (b >= RECLAIM_BACKOFF_MAX_NS / 2 ? RECLAIM_BACKOFF_MAX_NS : 2 * b)
          : RECLAIM_BACKOFF_MIN_NS;
    atomic_store_explicit(&reclaim_backoff, b, CUPOOL_RELAXED);
    uint64_t retry = cupool__monotonic_ns() + b;
    atomic_store_explicit(&reclaim_not_before, retry, CUPOOL_RELAXED);
    atomic_store_explicit(&reclaim_trying, false, CUPOOL_RELEASE);
    if (!cupool__maint_reclaim_later(retry))
        atomic_store_explicit(&cupool__hot.reclaim_due, true, CUPOOL_RELAXED);
}

/* Sum of every thread's slot counters at index i (what a class taking the index starts
 * from). */
static void slot_totals(uint32_t i, uint64_t *acquires, uint64_t *releases)
{
    *acquires = *releases = 0;
    for (const struct cupool__tcache *tc = cupool__tcaches(); tc; tc = cupool__tc_next(tc)) {
        const struct cupool__slot *s = cupool__slot_peek(tc, i);
        if (s) {
            *acquires += atomic_load_explicit(&s->acquires, CUPOOL_RELAXED);
            *releases += atomic_load_explicit(&s->releases, CUPOOL_RELAXED);
        }
    }
}

/* A class struct for a new class, not findable yet: a reclaimed index's, or a fresh index's.
 * class_lock held. NULL when every index is in use. */
static struct cupool__class *class_slot_take(void)
{
    struct cupool__class *c;
    if (nfree_index) {
        c = cupool__class_at(free_index[--nfree_index]);
    } else {
        uint32_t index = atomic_load_explicit(&class_count, CUPOOL_RELAXED);
        if (index >= CUPOOL_MAX_CLASSES)
            return NULL;
        c = cupool__alloc(sizeof(*c));
        if (!c)
            return NULL;
        c->index = index;
        /* not a class until class_init: every walker of the table skips a FREE struct */
        atomic_store_explicit(&c->phase, CUPOOL_CLASS_FREE, CUPOOL_RELAXED);
        atomic_store_explicit(&class_by_index[index], c, CUPOOL_RELEASE);
        atomic_store_explicit(&class_count, index + 1, CUPOOL_RELEASE);
    }
    return c;
}

/* Fills a class struct taken by class_slot_take() and publishes it. class_lock held. */
static void class_init(struct cupool__class *c, const struct cupool__class_ops *ops,
                       CUcontext ctx, unsigned long long ctx_id, unsigned int flags,
                       int priority)
{
    bool stream = ops->kind == CUPOOL_KIND_STREAM;
    c->magic = CUPOOL_CLASS_MAGIC;
    c->ops = ops;
    c->flags = flags;
    c->priority = priority;
    c->ctx_id = ctx_id;
    c->ctx = ctx;
    c->idle_max = stream ? cupool__cfg.stream_idle_max : cupool__cfg.event_idle_max;
    c->low_water = stream ? cupool__cfg.stream_prewarm : cupool__cfg.event_prewarm;
    slot_totals(c->index, &c->base_acquires, &c->base_releases);
    atomic_store_explicit(&c->depot_idle, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->retire_idle, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->creates, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->destroys, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->dropped, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->misses, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->live, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->high_water, 0, CUPOOL_RELAXED);
    /* the depot starts empty: its minimum over the first interval is 0, so handles released
     * into it then decay a whole decay time after the interval, not earlier */
    atomic_store_explicit(&c->depot_min, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->reserve, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->want, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->missed, false, CUPOOL_RELAXED);
    atomic_store_explicit(&c->reserve_met, true, CUPOOL_RELAXED);
    atomic_store_explicit(&c->warm, false, CUPOOL_RELAXED);
    atomic_store_explicit(&c->next_tick_ns, decay_now() + cupool__decay_period_ns(),
                          CUPOOL_RELAXED);
    c->nmins = 0;
    c->decay_due = 0;
    atomic_store_explicit(&c->phase, CUPOOL_CLASS_LIVE, CUPOOL_RELEASE);
    class_hash_insert(c);
    atomic_store_explicit(&c->alive, 1, CUPOOL_RELEASE); /* findable from here on */
}

/*
 * The class of (ops, context, flags, priority). ctx is the context (NULL: the current one, whose
 * id is ctx_id). Creates and prewarms the class the first time. Thread-safe: lookups are
 * lock-free, creation takes class_lock and looks again under it, so racing creators find one
 * class and no index is ever lost. The caller is inside a read section.
 */
static CUresult class_get(const struct cupool__class_ops *ops, CUcontext ctx,
                          unsigned long long ctx_id, unsigned int flags, int priority,
                          struct cupool__class **out)
{
    bool ctx_current = ctx == NULL;
    CUresult r;
    int clamped = 0;
    if (ops->kind == CUPOOL_KIND_STREAM && ctx_current) {
        /* the current context's range, cached per thread by context id */
        if ((r = cupool__stream_priority_clamp_as(ctx_id, priority, &clamped)) != CUDA_SUCCESS)
            return r;
    } else if (ops->kind == CUPOOL_KIND_STREAM) {
        struct cupool__class probe = {.ctx = ctx, .ctx_id = ctx_id, .ops = ops, .alive = 1};
        struct ctx_guard g = {false, NULL};
        if ((r = ctx_enter(&probe, &g)) != CUDA_SUCCESS)
            return r;
        r = cupool__stream_priority_clamp(priority, &clamped);
        ctx_leave(&g);
        if (r != CUDA_SUCCESS)
            return r;
    }
    struct cupool__class *c = class_find(ops, ctx_id, flags, clamped);
    if (c) {
        *out = c;
        return CUDA_SUCCESS;
    }
    if (ctx_current) { /* the context itself is needed only to make a class */
        r = (CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&ctx)));
        if (r != CUDA_SUCCESS)
            return cupool__fail(r, "cuCtxGetCurrent failed");
        if (!ctx)
            return cupool__fail(CUDA_ERROR_INVALID_CONTEXT, "no current context");
    }
    if (CUPOOL_UNLIKELY(cupool__class_miss_hook != NULL))
        cupool__class_miss_hook(); /* tests: every racing creator gets here before any creates */
    for (int attempt = 0;; attempt++) {
        pthread_mutex_lock(&class_lock);
        c = class_find(ops, ctx_id, flags, clamped);
        bool fresh = false;
        if (!c && (c = class_slot_take()) != NULL) {
            class_init(c, ops, ctx, ctx_id, flags, clamped);
            fresh = true;
        }
        pthread_mutex_unlock(&class_lock);
        if (c && !fresh) {
            *out = c;
            return CUDA_SUCCESS;
        }
        if (c) {
            /* its first decay tick: the thread must wake for it (a kick per class made the
             * thread walk the whole table once per class when 16,384 were made) */
            (void)cupool__maint_due(cupool__monotonic_ns() + cupool__decay_period_ns());
            classes_retire_reset(ctx, ctx_id);
            if (atomic_load(&classes_dead) >= RECLAIM_AT) /* keeps indexes (and slots) low */
                atomic_store_explicit(&cupool__hot.reclaim_due, true, CUPOOL_RELAXED);
            if (c->low_water && cupool__state_now() == CUPOOL_ST_RUNNING)
                prewarm(c, c->low_water, ctx_current);
            *out = c;
            return CUDA_SUCCESS;
        }
        /* every index in use: reclaim the classes of contexts that are gone, once (the
         * caller's read section is left for it: no grace period inside one) */
        if (attempt > 0 || !classes_reclaim_outside())
            return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY,
                                "more than %d pool classes (of live contexts) in use, or no "
                                "memory for a new %s pool",
                                CUPOOL_MAX_CLASSES, ops->name);
    }
}

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
        if (handle_destroy(cls, rec) != CUDA_SUCCESS)
            handle_retire(cls, rec); /* destroyed by a later trim; vetted again if rescued */
        return 1;
    }
    if (error_is_sticky(r) && r != CUDA_ERROR_DEINITIALIZED && class_ctx_broken(cls)) {
        class_mark_broken(cls);
        handle_forget(cls, rec);
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
                            "the context (id %llu) of this %s pool is gone (destroyed, reset, or broken by a sticky error)",
                            cls->ctx_id, cls->ops->name);
    struct cupool__tcache *tc = cupool__tcache_self();
    struct cupool__slot *s = tc ? slot_get(tc, cls->index) : NULL;
    if (!s)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for the thread's %s cache",
                            cls->ops->name);
    tcache_sweep_retired(tc);
    if (cupool__state_now() == CUPOOL_ST_RUNNING) {
        struct cupool__handle *rec = refill(cls, s);
        if (rec) {
            *out = rec;
            return CUDA_SUCCESS;
        }
    }
    if (cupool__state_now() == CUPOOL_ST_RUNNING)
        class_missed(cls);
    CUresult r = handle_create(cls, ctx_current, CUPOOL_H_OWNED, out);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add_explicit(&cls->misses, 1, CUPOOL_RELAXED);
    return r;
}

/* Takes a handle of `cls` for the caller, whatever it takes: the general path behind
 * acquire_from(). */
__attribute__((noinline)) static CUresult acquire_general(struct cupool__class *cls,
                                                          bool ctx_current, void **out)
{
    int st = cupool__state_now();
    if (st != CUPOOL_ST_RUNNING && st != CUPOOL_ST_PASSTHROUGH) {
        CUresult r = cupool__enter();
        if (r != CUDA_SUCCESS)
            return r;
    }
    if (!ctx_current && !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED))
        return cupool__fail(CUDA_ERROR_CONTEXT_IS_DESTROYED,
                            "the context (id %llu) of this %s pool is gone (destroyed, reset, or broken by a sticky error)",
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
                handle_forget(cls, rec);
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

/* slot_hit's stream released unvouched: the capture check, then the hit. Out of line, so the
 * vouched hit saves no registers. */
__attribute__((noinline)) static bool slot_hit_unchecked(struct cupool__tcache *tc,
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

__attribute__((always_inline)) static inline bool slot_hit(struct cupool__tcache *tc, uint32_t index,
                                                          uint64_t kg, void **out)
{
    struct cupool__slot *s = slot_of(tc, index);
    struct cupool__magazine *m = s ? s->loaded : NULL;
    if (CUPOOL_UNLIKELY(m == NULL || s->count == 0))
        return false;
    struct cupool__mag_item it = m->items[s->count - 1];
    struct cupool__handle *rec = it.rec;
    uint32_t st = atomic_load_explicit(&rec->state, CUPOOL_RELAXED);
    if (CUPOOL_UNLIKELY(rec_kind_gen(rec) != kg))
        return false;
    if (st == CUPOOL_H_IDLE_UNCHECKED)
        return slot_hit_unchecked(tc, s, it, out);
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
    return acquire_general(cls, ctx_current, out); /* a failed capture check: checked again */
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
    if (expect && cls != expect)
        return refused(cupool__fail(CUDA_ERROR_INVALID_HANDLE,
                                    "%s %p belongs to another pool (context %llu, flags 0x%x)",
                                    ops->name, h, cls->ctx_id, cls->flags));
    if (atomic_load_explicit(&rec->state, CUPOOL_RELAXED) != CUPOOL_H_OWNED)
        return refused(cupool__fail(CUDA_ERROR_INVALID_HANDLE, "%s %p was already released",
                                    ops->name, h));
    /* Owned, but its context is gone: forget it without touching the driver (the release is
     * counted first: once forgotten, nothing pins the class) */
    struct cupool__tcache *tc = cupool__tcache_self();
    struct cupool__slot *s = tc ? slot_get(tc, cls->index) : NULL;
    if (s)
        cupool__counter_inc(&s->releases);
    handle_forget(cls, rec);
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
    struct cupool__slot *s = tc ? slot_get(tc, cls->index) : NULL;
    bool retired = false;
    if (tc)
        tcache_sweep_retired(tc);
    if (s && s->loaded && s->count == cupool__hot.mag_capacity) {
        struct cupool__magazine *p = s->previous;
        if (p && p->count == 0) {
            s->previous = slot_take_loaded(s);
            slot_set_loaded(s, p);
        } else {
            if (p)
                retired = depot_put(cls, p);
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
        return handle_discard(cls, rec);
    }
    atomic_store_explicit(&rec->state, idle_state, CUPOOL_RELAXED);
    m->items[s->count++] =
        (struct cupool__mag_item){rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
    cupool__counter_inc(&s->releases);
    if (retired)
        drain_retired(cls, 1, 2); /* keep the newest magazine queued: a later miss may rescue
                                     it; at most two magazines: this release's share of the
                                     work plus one of any backlog left by exited threads */
    return CUDA_SUCCESS;
}

static CUresult release_general(const struct cupool__class_ops *ops,
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
            return release_general(ops, expect, h, idle_state);
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
    enum ctx_state cs = class_ctx_check(cls, &err);
    if (cs == CTX_UNKNOWN)
        return err;
    CUresult r = handle_dispose(cls, rec, cs);
    if (r != CUDA_SUCCESS)
        return r;
    struct cupool__tcache *tc = cupool__tcache_self();
    struct cupool__slot *s = tc ? slot_get(tc, cls->index) : NULL;
    if (s)
        cupool__counter_inc(&s->releases);
    return CUDA_SUCCESS;
}

/* Every release but the fast one: other lifecycle states, refusals, a full magazine. */
__attribute__((noinline)) static CUresult release_general(const struct cupool__class_ops *ops,
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

/* Pushes an owned record onto this thread's loaded magazine for class index `index` when it
 * has room, in `idle_state`; false otherwise (nothing changed). */
__attribute__((always_inline)) static inline bool slot_push(struct cupool__tcache *tc,
                                                            uint32_t index,
                                                            struct cupool__handle *rec, void *h,
                                                            uint32_t idle_state)
{
    struct cupool__slot *s = slot_of(tc, index);
    struct cupool__magazine *m = s ? s->loaded : NULL;
    if (CUPOOL_UNLIKELY(m == NULL || s->count >= cupool__hot.mag_capacity))
        return false;
    atomic_store_explicit(&rec->state, idle_state, CUPOOL_RELAXED);
    m->items[s->count++] = (struct cupool__mag_item){rec, h};
    cupool__counter_inc(&s->releases);
    return true;
}

/* Pushes a record found for `h` onto this thread's magazine if every check passes; false
 * otherwise (the general path then decides). */
__attribute__((always_inline)) static inline bool
release_push(const struct cupool__class_ops *ops, struct cupool__class *expect,
             struct cupool__tcache *tc, struct cupool__handle *rec, void *h, uint32_t idle_state)
{
    /* Everything the decision needs is in the record's own cache line. A handle of a context
     * known to be gone may land in its dead class's magazine here: harmless, a dead class
     * hands nothing out, and trim forgets its handles without a driver call. */
    if (CUPOOL_LIKELY(cupool__state_now() == CUPOOL_ST_RUNNING &&
                      rec->kind == (uint32_t)ops->kind &&
                      atomic_load_explicit(&rec->state, CUPOOL_RELAXED) == CUPOOL_H_OWNED &&
                      (!expect || atomic_load_explicit(&rec->cls, CUPOOL_RELAXED) == expect))) {
        /* an explicit pool names its class: its slot is found without waiting for the record */
        return slot_push(tc, expect ? expect->index : rec->index, rec, h, idle_state);
    }
    return false;
}

/* A release of a handle other than the thread's last acquired one: a registry lookup first.
 * Out of line, so the fast path below saves no registers. */
__attribute__((noinline)) static CUresult release_lookup(const struct cupool__class_ops *ops,
                                                         struct cupool__class *expect, void *h,
                                                         uint32_t idle_state)
{
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = cupool__reg_read(tc, h);
    if (rec != NULL && tc != NULL && release_push(ops, expect, tc, rec, h, idle_state))
        return CUDA_SUCCESS;
    return release_general(ops, expect, h, idle_state);
}

/* The release fast path: the thread's last acquired handle (else a registry lookup), the
 * ownership check, a push onto this thread's magazine. Inlined into each public release. */
__attribute__((always_inline)) static inline CUresult release_handle(
    const struct cupool__class_ops *ops, struct cupool__class *expect, void *h, uint32_t idle_state)
{
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = tc ? tc->last : NULL;
    if (CUPOOL_UNLIKELY(rec == NULL || atomic_load_explicit(&rec->handle, CUPOOL_RELAXED) != h))
        return release_lookup(ops, expect, h, idle_state);
    if (CUPOOL_LIKELY(release_push(ops, expect, tc, rec, h, idle_state)))
        return CUDA_SUCCESS;
    return release_general(ops, expect, h, idle_state);
}

/* A release of a handle cupool knows, as release_handle; false (and nothing done) when the
 * registry does not know h, which the drop-in destroys hand to the driver. One lookup. */
bool cupool__release_known(const struct cupool__class_ops *ops, void *h, CUresult *result)
{
    uint32_t idle_state = ops->kind == CUPOOL_KIND_STREAM ? CUPOOL_H_IDLE_UNCHECKED : CUPOOL_H_IDLE;
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = tc ? tc->last : NULL;
    if (!h || (rec != NULL && atomic_load_explicit(&rec->handle, CUPOOL_RELAXED) == h)) {
        *result = release_handle(ops, NULL, h, idle_state); /* the thread's last handle */
        return true;
    }
    rec = cupool__reg_read(tc, h);
    if (!rec)
        return false;
    *result = tc && release_push(ops, NULL, tc, rec, h, idle_state)
                  ? CUDA_SUCCESS
                  : release_general(ops, NULL, h, idle_state);
    return true;
}

/* The class-cache set of (context id, key): a multiplicative hash of both, so that keys
 * differing only in high bits (priority -4 is 0xfffffffc) spread over the sets. */
static inline struct cupool__cc_entry *cc_set(struct cupool__tcache *tc, cupool_kind_t kind,
                                              unsigned long long id, uint64_t key)
{
    uint64_t h = ((uint64_t)id ^ (key * UINT64_C(0x9E3779B97F4A7C15))) * UINT64_C(0xD6E8FEB86659FD93);
    return tc->cc[kind][h >> (64 - 5)]; /* CUPOOL_CC_SETS == 32 */
}

_Static_assert(CUPOOL_CC_SETS == 32 && CUPOOL_CC_WAYS == 2, "cc_set and acquire_current assume 32 x 2");

static inline bool cc_match(const struct cupool__cc_entry *e, unsigned long long id, uint64_t key)
{
    return e->ctx_id == id && e->key == key && e->cls != NULL;
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
                                                               unsigned int flags, int priority,
                                                               void **out)
{
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    struct cupool__class *cls = NULL;
    CUresult r = class_get(ops, NULL, id, flags, priority, &cls);
    if (r == CUDA_SUCCESS) {
        struct cupool__tcache *tc = cupool__tcache_self();
        if (tc) {
            uint64_t key = (uint64_t)flags << 32 | (uint32_t)priority;
            struct cupool__cc_entry *e = cc_victim(cc_set(tc, ops->kind, id, key), id, key);
            e->ctx_id = id;
            e->key = key;
            e->cls = cls;
            e->gen = atomic_load_explicit(&cls->gen, CUPOOL_ACQUIRE);
            e->index = cls->index;
            if (!atomic_load_explicit(&cls->alive, CUPOOL_ACQUIRE))
                e->cls = NULL; /* retired meanwhile: the gen read may be the next one's */
        }
        r = acquire_from(cls, true, out);
    }
    cupool__read_leave(cupool__th(rtc));
    return r;
}

/* Current-context acquire: the context's id picks the class through the thread's cache. */
__attribute__((always_inline)) static inline CUresult
acquire_current(const struct cupool__class_ops *ops, unsigned int flags, int priority, void **out)
{
    int st = cupool__state_now();
    if (CUPOOL_UNLIKELY(st != CUPOOL_ST_RUNNING)) {
        CUresult r = cupool__enter();
        if (r != CUDA_SUCCESS)
            return r;
    }
    unsigned long long id;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &id));
    if (CUPOOL_UNLIKELY(r != CUDA_SUCCESS)) {
        if (r == CUDA_ERROR_INVALID_CONTEXT)
            return cupool__fail(r, "no current context: make one current (cuCtxSetCurrent, "
                                   "cudaSetDevice) before acquiring a %s", ops->name);
        return cupool__fail(r, "cuCtxGetId of the current context failed");
    }
    uint64_t key = (uint64_t)flags << 32 | (uint32_t)priority;
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL)) {
        struct cupool__cc_entry *e = cc_set(tc, ops->kind, id, key);
        if (!cc_match(e, id, key))
            e++; /* way 1 */
        if (CUPOOL_LIKELY(cc_match(e, id, key))) {
            if (CUPOOL_LIKELY(cupool__state_now() == CUPOOL_ST_RUNNING) &&
                slot_hit(tc, e->index, kind_gen((uint32_t)ops->kind, (uint32_t)e->gen), out))
                return CUDA_SUCCESS;
            cupool__read_enter(cupool__th(tc));
            /* the struct may have been reclaimed and reused for another class since */
            if (CUPOOL_LIKELY(atomic_load_explicit(&e->cls->gen, CUPOOL_RELAXED) == e->gen)) {
                r = acquire_general(e->cls, true, out); /* the hit above failed */
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
    return acquire_current_slow(ops, id, flags, priority, out);
}

/* ---------------------------------------------------------------------------------------- */
/* Public API                                                                               */
/* ---------------------------------------------------------------------------------------- */

#define STREAM_FLAGS_KNOWN ((unsigned int)CU_STREAM_NON_BLOCKING)

static bool event_flags_valid(unsigned int flags)
{
    const unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                               CU_EVENT_INTERPROCESS;
    if (flags & ~known)
        return false;
    /* The driver refuses interprocess events that record timing. */
    return !(flags & CU_EVENT_INTERPROCESS) || (flags & CU_EVENT_DISABLE_TIMING);
}

CUresult cupool_stream_acquire(CUstream *stream, unsigned int flags, int priority)
{
    if (CUPOOL_UNLIKELY(!stream || (flags & ~STREAM_FLAGS_KNOWN)))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            !stream ? "cupool_stream_acquire: stream is NULL"
                                    : "cupool_stream_acquire: unknown flags 0x%x (known: "
                                      "CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING)",
                            flags);
    CUresult r = acquire_current(&cupool__stream_ops, flags, priority, (void **)stream);
    cupool__reclaim_if_due();
    return r;
}

CUresult cupool_stream_release(CUstream stream)
{
    return release_handle(&cupool__stream_ops, NULL, stream, CUPOOL_H_IDLE_UNCHECKED);
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
    CUresult r = acquire_current(&cupool__event_ops, flags, 0, (void **)event);
    cupool__reclaim_if_due();
    return r;
}

CUresult cupool_event_release(CUevent event)
{
    return release_handle(&cupool__event_ops, NULL, event, CUPOOL_H_IDLE);
}

/* ---- explicit pools ----
 * A pool handle names a class by index and generation, not by address: a class is reused once
 * its context is gone and nothing of it is left (classes_reclaim), and a handle of the old
 * class must then be refused, never serve the new one. Bits 0-3: a tag per kind; bit 4: the
 * caller's promise that the context outlives the pool's use (CUPOOL_POOL_CONTEXT_OUTLIVES);
 * bits 5-18: the index; bits 19-63: the class's gen. Never NULL. */
#define POOL_TAG_STREAM 0x5u
#define POOL_TAG_EVENT 0x9u
#define POOL_PROMISED 0x10u
#define POOL_INDEX_SHIFT 5
#define POOL_GEN_SHIFT 19
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
static inline struct cupool__class *pool_class(const void *pool, const struct cupool__class_ops *ops,
                                               bool *promised, CUresult *why)
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
    r = class_get(ops, ctx, id, flags & ~CUPOOL_POOL_CONTEXT_OUTLIVES, priority, &cls);
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
    switch (class_ctx_check(cls, &err)) {
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
        r = tried ? acquire_general(cls, false, out) : acquire_from(cls, false, out);
    cupool__read_leave(cupool__th(rtc));
    return r;
}

#define TAG_KIND(tag) ((tag) == POOL_TAG_STREAM ? (uint32_t)CUPOOL_KIND_STREAM : (uint32_t)CUPOOL_KIND_EVENT)

/* The (kind, gen) word of the records of the class a pool value names (see kind_gen). */
static inline uint64_t pool_kind_gen(uintptr_t v, uint32_t kind)
{
    return kind_gen(kind, (uint32_t)(v >> POOL_GEN_SHIFT));
}

/*
 * The explicit-pool hit, without a read section and without the class table's decoding. The
 * pool value names (index, gen, and the kind in its tag). The top of the thread's magazine for
 * that index must be a clean idle record carrying that kind and gen: records are type-stable
 * and a class with a record registered is never reclaimed, so the match proves that the class
 * at the index is the incarnation the pool names (a pool of an older one carries another gen;
 * a value forged with the other kind's tag, another kind), and the record is this pool's. The class is still loaded for `alive` (a retired class hands nothing out); its
 * line is read-mostly and the load runs beside the magazine's. A non-promised pool checks its
 * context (cuCtxGetId) and vets a stream released unvouched (cuStreamIsCapturing), under one
 * driver-call guard (pool_acquire_checked); anything else tail-calls the general path, which
 * decides everything again. The promised hit is a leaf: no call, no register saved.
 * (A false match needs 2^32 reuses of one class index between two acquires.)
 */
__attribute__((noinline)) static CUresult pool_acquire_tail(const void *pool,
                                                            const struct cupool__class_ops *ops,
                                                            void **out, bool tried)
{
    CUresult r = pool_acquire_as(pool, ops, out, tried);
    cupool__reclaim_if_due();
    return r;
}

/* A hit whose way out found reclamation due. */
__attribute__((noinline)) static CUresult hit_then_reclaim(void)
{
    cupool__reclaim_deferred();
    return CUDA_SUCCESS;
}

/* pool_acquire_hit for a pool without the promise: its context checked first, and a stream
 * released unvouched vetted, both driver calls under one guard. */
__attribute__((noinline)) static CUresult pool_acquire_checked(const void *pool,
                                                               const struct cupool__class_ops *ops,
                                                               void **out)
{
    uintptr_t v = (uintptr_t)pool;
    struct cupool__tcache *tc = cupool__tl;
    uint32_t index = (uint32_t)(v >> POOL_INDEX_SHIFT) & (CUPOOL_MAX_CLASSES - 1);
    uint64_t gen = (uint64_t)v >> POOL_GEN_SHIFT;
    struct cupool__class *cls = atomic_load_explicit(&class_by_index[index], CUPOOL_ACQUIRE);
    if (CUPOOL_UNLIKELY(cls == NULL ||
                        (atomic_load_explicit(&cls->gen, CUPOOL_ACQUIRE) &
                         (UINT64_MAX >> POOL_GEN_SHIFT)) != gen ||
                        !atomic_load_explicit(&cls->alive, CUPOOL_ACQUIRE)))
        return pool_acquire_tail(pool, ops, out, false);
    struct cupool__slot *s = slot_of(tc, index);
    struct cupool__magazine *m = s ? s->loaded : NULL;
    uint32_t n = s ? s->count : 0;
    struct cupool__mag_item it = {NULL, NULL};
    uint32_t st = CUPOOL_H_FREE;
    if (CUPOOL_LIKELY(m != NULL && n != 0)) {
        it = m->items[n - 1];
        if (rec_kind_gen(it.rec) == pool_kind_gen(v, (uint32_t)ops->kind))
            st = atomic_load_explicit(&it.rec->state, CUPOOL_RELAXED);
    }
    unsigned long long id = 0;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = CUDA_ERROR_DEINITIALIZED, rc = CUDA_SUCCESS;
    _Atomic uint32_t *guard = cupool__drv_begin();
    if (CUPOOL_LIKELY(guard != NULL)) {
        r = cupool__driver_result(cupool__drv.cuCtxGetId(cls->ctx, &id));
        if (r == CUDA_SUCCESS && id == cls->ctx_id && st == CUPOOL_H_IDLE_UNCHECKED)
            rc = cupool__driver_result(
                cupool__drv.cuStreamIsCapturing((CUstream)it.handle, &cs));
        cupool__drv_end(guard);
    }
    if (CUPOOL_UNLIKELY(r != CUDA_SUCCESS || id != cls->ctx_id))
        return pool_acquire_tail(pool, ops, out, false); /* says why, with the class held */
    if (CUPOOL_LIKELY((st == CUPOOL_H_IDLE ||
                       (st == CUPOOL_H_IDLE_UNCHECKED && rc == CUDA_SUCCESS &&
                        cs == CU_STREAM_CAPTURE_STATUS_NONE)))) {
        slot_take(tc, s, n, it.rec);
        *out = it.handle;
        cupool__reclaim_if_due();
        return CUDA_SUCCESS;
    }
    /* not a hit, or a capture check that failed: checked again there */
    return pool_acquire_tail(pool, ops, out, true);
}


__attribute__((always_inline)) static inline CUresult
pool_acquire_hit(const void *pool, const struct cupool__class_ops *ops, uintptr_t tag, void **out)
{
    uintptr_t v = (uintptr_t)pool;
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_UNLIKELY(tc == NULL || out == NULL || (v & 0xfu) != tag ||
                        cupool__state_now() != CUPOOL_ST_RUNNING))
        return pool_acquire_tail(pool, ops, out, false);
    if (!(v & POOL_PROMISED))
        return pool_acquire_checked(pool, ops, out);
    uint32_t index = (uint32_t)(v >> POOL_INDEX_SHIFT) & (CUPOOL_MAX_CLASSES - 1);
    struct cupool__class *cls = atomic_load_explicit(&class_by_index[index], CUPOOL_ACQUIRE);
    if (CUPOOL_LIKELY(cls != NULL && atomic_load_explicit(&cls->alive, CUPOOL_ACQUIRE) &&
                      slot_hit(tc, index, pool_kind_gen(v, TAG_KIND(tag)), out))) {
        if (CUPOOL_UNLIKELY(atomic_load_explicit(&cupool__hot.reclaim_due, CUPOOL_RELAXED)))
            return hit_then_reclaim();
        return CUDA_SUCCESS;
    }
    /* not a hit, or a stream whose capture check failed: checked again there */
    return pool_acquire_tail(pool, ops, out, true);
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
    return release_handle(ops, cls, h, idle_state);
}

__attribute__((noinline)) static CUresult pool_release_general(const void *pool,
                                                               const struct cupool__class_ops *ops,
                                                               void *h, uint32_t idle_state)
{
    return pool_release(pool, ops, h, idle_state);
}

/* The explicit-pool release of the thread's last acquired handle onto a magazine with room,
 * matched by the record's index, kind and gen against the pool value (see pool_acquire_hit):
 * no read section, no load from the class.
 * A leaf; anything else tail-calls the general way. */
__attribute__((always_inline)) static inline CUresult
pool_release_hit(const void *pool, const struct cupool__class_ops *ops, uintptr_t tag, void *h,
                 uint32_t idle_state)
{
    uintptr_t v = (uintptr_t)pool;
    struct cupool__tcache *tc = cupool__tl;
    struct cupool__handle *rec = tc ? tc->last : NULL;
    if (CUPOOL_LIKELY(rec != NULL && atomic_load_explicit(&rec->handle, CUPOOL_RELAXED) == h &&
                      (v & 0xfu) == tag && cupool__state_now() == CUPOOL_ST_RUNNING)) {
        uint32_t index = (uint32_t)(v >> POOL_INDEX_SHIFT) & (CUPOOL_MAX_CLASSES - 1);
        if (CUPOOL_LIKELY(rec->index == index && index < CUPOOL_SLOTS_PER_CHUNK &&
                          rec_kind_gen(rec) == pool_kind_gen(v, TAG_KIND(tag)) &&
                          atomic_load_explicit(&rec->state, CUPOOL_RELAXED) == CUPOOL_H_OWNED)) {
            struct cupool__slot *s = &tc->slots0[index];
            struct cupool__magazine *m = s->loaded;
            uint32_t n = s->count;
            if (CUPOOL_LIKELY(m != NULL && n < cupool__hot.mag_capacity)) {
                atomic_store_explicit(&rec->state, idle_state, CUPOOL_RELAXED);
                m->items[n].rec = rec;
                m->items[n].handle = h;
                s->count = n + 1;
                cupool__counter_inc(&s->releases);
                return CUDA_SUCCESS;
            }
        }
    }
    return pool_release_general(pool, ops, h, idle_state);
}

CUresult cupool_stream_pool_release(cupool_stream_pool_t pool, CUstream stream,
                                    unsigned int release_flags)
{
    if (CUPOOL_UNLIKELY(release_flags & ~CUPOOL_RELEASE_NOT_CAPTURING))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_stream_pool_release: unknown release flags 0x%x",
                            release_flags);
    return pool_release_hit(pool, &cupool__stream_ops, POOL_TAG_STREAM, stream,
                            (release_flags & CUPOOL_RELEASE_NOT_CAPTURING) ? CUPOOL_H_IDLE
                                                                            : CUPOOL_H_IDLE_UNCHECKED);
}

CUresult cupool_event_pool_release(cupool_event_pool_t pool, CUevent event)
{
    return pool_release_hit(pool, &cupool__event_ops, POOL_TAG_EVENT, event, CUPOOL_H_IDLE);
}

/* ---------------------------------------------------------------------------------------- */
/* Trim                                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* What a class learned of its demand goes with a trim: the reserve, and the warm-up is over
 * again only at the next decay tick, so the misses that follow a trim (it emptied the depot)
 * create what they need and no reserve ahead of them. (A loop of acquire, release and trim
 * once made the maintenance thread fill and the trim destroy a doubling reserve: 400 rounds
 * created 400,000 streams.) */
static void class_forget_demand(struct cupool__class *cls)
{
    atomic_store_explicit(&cls->reserve, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->reserve_met, true, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->warm, false, CUPOOL_RELAXED);
}

static CUresult trim_class(struct cupool__class *cls, int64_t keep)
{
    class_forget_demand(cls);
    CUresult first = drain_retired(cls, 0, 0);
    (void)depot_shrink(cls, keep, 0, &first);
    return first;
}

/* Trims the classes of the table, each inside a read section of its own (a reclamation
 * elsewhere waits for at most one): every walkable one down to its low-water mark; or, with
 * `only`, the live classes of that context (and id, when known) down to nothing, retired
 * after. Returns the first error. */
static CUresult trim_classes(struct cupool__tcache *tc, CUcontext only, unsigned long long only_id,
                             bool id_known)
{
    CUresult first = CUDA_SUCCESS;
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        cupool__read_enter(cupool__th(tc));
        struct cupool__class *c = cupool__class_at(i);
        bool mine = c && (only ? atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) && c->ctx == only &&
                                     (!id_known || c->ctx_id == only_id)
                               : cupool__class_walkable(c));
        if (mine) {
            CUresult r = trim_class(c, only ? 0 : (int64_t)c->low_water);
            if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
                first = r;
            if (only)
                class_mark_dead(c); /* what other threads still cache is forgotten, no call */
        }
        cupool__read_leave(cupool__th(tc));
    }
    return first;
}

/* The entry of trim and context release: the library initialised, the caller's own magazines
 * back to their depots. */
static CUresult trim_enter(struct cupool__tcache **tc)
{
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    *tc = cupool__tcache_peek();
    if (*tc)
        tcache_flush(*tc);
    return CUDA_SUCCESS;
}

CUresult cupool_context_release(CUcontext ctx)
{
    if (!ctx)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_context_release: ctx is NULL");
    struct cupool__tcache *tc = NULL;
    CUresult r = trim_enter(&tc);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned long long id = 0;
    bool known = CUPOOL_DRV(cupool__drv.cuCtxGetId(ctx, &id)) == CUDA_SUCCESS;
    /* the maintenance thread is between units of work from here, and finds the classes of
     * ctx retired when it looks again: it never calls the driver with their handles */
    pthread_mutex_lock(&cupool__maint_unit);
    CUresult first = trim_classes(tc, ctx, id, known);
    cupool__layers_trim(); /* the graph cache's graveyard too: nothing is left for the thread */
    pthread_mutex_unlock(&cupool__maint_unit);
    classes_reclaim(10000000u);
    return first;
}

/* ---------------------------------------------------------------------------------------- */
/* Exit and unload                                                                          */
/* ---------------------------------------------------------------------------------------- */


/* Destroys every idle handle of a class: its retire stack and its whole depot. */
static void close_class(struct cupool__class *cls)
{
    drain_retired(cls, 0, 0);
    struct cupool__magazine *m;
    while ((m = cupool__stack_pop(&cls->depot)) != NULL) {
        atomic_fetch_sub_explicit(&cls->depot_idle, m->count, CUPOOL_RELAXED);
        destroy_items(cls, m, m->count);
        if (m->count) {
            /* the driver refused: leave the rest to the process */
            atomic_fetch_add_explicit(&cls->depot_idle, m->count, CUPOOL_RELAXED);
            cupool__stack_push(&cls->depot, m);
            break;
        }
        cupool__mag_put(m);
    }
}

/* Destroys idle handles while the driver still answers (the caller is the closer): those of
 * every thread when `all_threads` (unload: no thread may be inside the library), else the
 * calling thread's and the depots' (exit: other threads may still be running). Handles of
 * contexts that are gone are forgotten without a driver call. */
static void pool_close(bool all_threads)
{
    if (all_threads) {
        for (struct cupool__tcache *tc = cupool__tcaches(); tc; tc = cupool__tc_next(tc))
            tcache_flush(tc);
    } else if (cupool__tl) {
        tcache_flush(cupool__tl);
    }
    struct cupool__tcache *rtc = cupool__tl;
    cupool__read_enter(cupool__th(rtc));
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        /* handles over the cap went to the retire stack: the whole depot goes either way */
        struct cupool__class *c = cupool__class_at(i);
        if (c && cupool__class_walkable(c))
            close_class(c);
    }
    cupool__read_leave(cupool__th(rtc));
}

/* The pool layer's hooks (base/layer.h): the maintenance thread is the pools'. */
static const struct cupool__layer pool_layer = {
    .rank = CUPOOL_LAYER_POOL,
    .init = pool_init,
    .close = pool_close,
    .stop = cupool__maint_stop,
    .unload = pool_unload,
    .forked = cupool__maint_forget,
    .report = cupool__pool_report,
};

__attribute__((constructor)) static void pool_layer_register(void)
{
    cupool__layer_register(&pool_layer);
}

CUresult cupool_trim(void)
{
    struct cupool__tcache *tc = NULL;
    CUresult r = trim_enter(&tc);
    if (r != CUDA_SUCCESS)
        return r;
    /* contexts destroyed since (cuCtxDestroy) retire their classes here, so that the pass
     * below forgets their idle handles and the reclamation frees their indexes */
    cupool__read_enter(cupool__th(tc));
    classes_check_contexts();
    cupool__read_leave(cupool__th(tc));
    CUresult first = trim_classes(tc, NULL, 0, false);
    atomic_store_explicit(&cupool__hot.reclaim_due, false, CUPOOL_RELAXED);
    cupool__registry_reclaim(10000000u);
    classes_reclaim(10000000u);
    cupool__layers_trim(); /* the graph cache */
    return first;
}
