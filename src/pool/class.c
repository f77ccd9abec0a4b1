/* SPDX-License-Identifier: MIT */
/*
 * The class table: classes by index and by key, their creation, retirement and reclamation.
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

/* The class table: index -> class struct (see struct cupool__class). class_lock serialises
 * creation, reuse and reclamation, and guards free_index; lookups read the table without it,
 * inside read sections. Lock order (docs/design.md, "Locks"): after reclaim_lock and the
 * maintenance unit lock, before the graph cache's, the registry's and the allocator's; no
 * lock but reclaim_lock is held when class_lock is taken, and class_lock is released before
 * a reclamation waits for readers. */
static pthread_mutex_t class_lock = PTHREAD_MUTEX_INITIALIZER;
/* One reclamation pass at a time (taken with trylock: a pass finding another under way leaves
 * the work to it). Held across the pass's grace period, never while class_lock is held. */
static pthread_mutex_t reclaim_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t class_count; /* indexes used so far (the high water) */
_Atomic(struct cupool__class *) cupool__class_by_index[CUPOOL_MAX_CLASSES];
static uint32_t free_index[CUPOOL_MAX_CLASSES]; /* reclaimed indexes, a stack */
static uint32_t nfree_index;
_Atomic uint32_t cupool__classes_dead; /* retired and not yet reclaimed (count) */
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
    return atomic_load_explicit(&cupool__class_by_index[index], CUPOOL_ACQUIRE);
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
    for (uint32_t probes = 0; probes < CLASS_HASH_SIZE;
         probes++, i = (i + 1) & (CLASS_HASH_SIZE - 1)) {
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
    for (uint32_t probes = 0; probes < CLASS_HASH_SIZE;
         probes++, i = (i + 1) & (CLASS_HASH_SIZE - 1)) {
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
            cupool__class_mark_dead(c);
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
                cupool__handle_forget(cls, m->items[--m->count].rec);
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
int cupool__classes_reclaim(uint64_t timeout_ns)
{
    if (!atomic_load(&cupool__classes_dead))
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
        atomic_fetch_sub(&cupool__classes_dead, 1);
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
void cupool__classes_check_contexts(void)
{
    uint32_t n = cupool__class_limit();
    for (uint32_t i = 0; i < n; i++) {
        struct cupool__class *c = cupool__class_at(i);
        CUresult err;
        if (c && atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) &&
            cupool__ctx_verdict(c->ctx, c->ctx_id, &err) == 0)
            cupool__class_mark_dead(c);
    }
}

/* classes_reclaim() from inside the caller's read sections (class creation finding every
 * index in use), after asking the driver about every live class's context: the sections,
 * with or without the thread's cache, are left for the pass and entered again. The caller
 * holds no class across the call. True if any class was reclaimed. */
static bool classes_reclaim_outside(void)
{
    cupool__classes_check_contexts();
    struct cupool__tcache *tc = cupool__tl;
    uint32_t depth = tc ? atomic_load_explicit(&tc->th.in_read, CUPOOL_RELAXED) & CUPOOL_RD_NEST
                        : 0;
    uint32_t anon = cupool__read_anon_tl & CUPOOL_RD_NEST;
    for (uint32_t i = 0; i < depth; i++)
        cupool__read_leave(cupool__th(tc));
    for (uint32_t i = 0; i < anon; i++)
        cupool__read_leave(NULL);
    bool any = cupool__classes_reclaim(10000000u) > 0;
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
    if (atomic_load(&cupool__classes_dead) >= RECLAIM_AT &&
        cupool__classes_reclaim(RECLAIM_WAIT_NS) < 0)
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
        atomic_store_explicit(&cupool__class_by_index[index], c, CUPOOL_RELEASE);
        atomic_store_explicit(&class_count, index + 1, CUPOOL_RELEASE);
    }
    return c;
}

/* Fills a class struct taken by class_slot_take() and publishes it. class_lock held. */
static void class_init(struct cupool__class *c, const struct cupool__class_ops *ops,
                       CUcontext ctx, unsigned long long ctx_id, int device,
                       unsigned int flags, int priority)
{
    bool stream = ops->kind == CUPOOL_KIND_STREAM;
    c->magic = CUPOOL_CLASS_MAGIC;
    c->ops = ops;
    c->flags = flags;
    c->priority = priority;
    c->ctx_id = ctx_id;
    c->ctx = ctx;
    c->device = device;
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
    atomic_store_explicit(&c->depot_max, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->reserve, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->headroom, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->want, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&c->missed, false, CUPOOL_RELAXED);
    atomic_store_explicit(&c->reserve_met, true, CUPOOL_RELAXED);
    atomic_store_explicit(&c->warm, false, CUPOOL_RELAXED);
    atomic_store_explicit(&c->next_tick_ns, decay_now() + cupool__decay_period_ns(),
                          CUPOOL_RELAXED);
    c->nmins = 0;
    atomic_store_explicit(&c->forget, false, CUPOOL_RELAXED);
    c->decay_due = 0;
    c->grow_due = 0;
    atomic_store_explicit(&c->phase, CUPOOL_CLASS_LIVE, CUPOOL_RELEASE);
    class_hash_insert(c);
    atomic_store_explicit(&c->alive, 1, CUPOOL_RELEASE); /* findable from here on */
}

/* The device of a class's context, for its statistics: asked once, when the class is made
 * (never on a lookup that finds it). -1 when the driver does not say. */
static int class_device(const struct cupool__class_ops *ops, CUcontext ctx,
                        unsigned long long ctx_id, bool ctx_current)
{
    if (!cupool__drv.cuCtxGetDevice)
        return -1;
    struct cupool__class probe = {.ctx = ctx, .ctx_id = ctx_id, .ops = ops, .alive = 1};
    struct ctx_guard g = {false, NULL, NULL};
    if (!ctx_current && cupool__ctx_enter(&probe, &g) != CUDA_SUCCESS)
        return -1;
    CUdevice dev = -1;
    CUresult r = CUPOOL_DRV(cupool__drv.cuCtxGetDevice(&dev));
    cupool__ctx_leave(&g);
    return r == CUDA_SUCCESS ? (int)dev : -1;
}

/*
 * The class of (ops, context, flags, priority). ctx is the context (NULL: the current one, whose
 * id is ctx_id). Creates and prewarms the class the first time. Thread-safe: lookups are
 * lock-free, creation takes class_lock and looks again under it, so racing creators find one
 * class and no index is ever lost. The caller is inside a read section.
 */
CUresult cupool__class_get(const struct cupool__class_ops *ops, CUcontext ctx,
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
        struct ctx_guard g = {false, NULL, NULL};
        if ((r = cupool__ctx_enter(&probe, &g)) != CUDA_SUCCESS)
            return r;
        r = cupool__stream_priority_clamp(priority, &clamped);
        cupool__ctx_leave(&g);
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
    int device = class_device(ops, ctx, ctx_id, ctx_current);
    if (CUPOOL_UNLIKELY(cupool__class_miss_hook != NULL))
        cupool__class_miss_hook(); /* tests: every racing creator gets here before any creates */
    for (int attempt = 0;; attempt++) {
        pthread_mutex_lock(&class_lock);
        c = class_find(ops, ctx_id, flags, clamped);
        bool fresh = false;
        if (!c && (c = class_slot_take()) != NULL) {
            class_init(c, ops, ctx, ctx_id, device, flags, clamped);
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
            if (atomic_load(&cupool__classes_dead) >=
                RECLAIM_AT) /* keeps indexes (and slots) low */
                atomic_store_explicit(&cupool__hot.reclaim_due, true, CUPOOL_RELAXED);
            if (c->low_water && cupool__state_now() == CUPOOL_ST_RUNNING)
                cupool__prewarm(c, c->low_water, ctx_current);
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

/* The pool layer's hooks (base/layer.h): the maintenance thread is the pools'. Registered
 * here, in the file every use of the pools links (a static archive drops the constructors
 * of members nothing references). */
static const struct cupool__layer pool_layer = {
    .rank = CUPOOL_LAYER_POOL,
    .init = cupool__pool_init,
    .close = cupool__pool_close,
    .stop = cupool__maint_stop,
    .unload = cupool__pool_unload,
    .forked = cupool__maint_forget,
    .report = cupool__pool_report,
};

__attribute__((constructor)) static void pool_layer_register(void)
{
    cupool__layer_register(&pool_layer);
}
