/* SPDX-License-Identifier: MIT */
/*
 * Idle capacity that follows demand: the decay ticks, the reserve, and the maintenance
 * thread's rounds over the classes.
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



/* A miss (the depot was empty): the maintenance thread is asked to keep a reserve in the
 * depot, grown (doubled, from two magazines, to at most half the hard cap) once per fill. */
void cupool__class_missed(struct cupool__class *cls)
{
    atomic_store_explicit(&cls->missed, true, CUPOOL_RELAXED);
    /* a class's first misses are its warm-up: what they create is its working set, and
     * creating more ahead of it would only guess (a program using one stream would get 33) */
    if (!atomic_load_explicit(&cls->warm, CUPOOL_RELAXED) || !cupool__maint_enabled())
        return;
    /* past the warm-up, a create on the thread that asked is what the idle capacity exists to
     * prevent: say what the class held (what is neither in the depot nor queued for
     * destruction sits in threads' magazines or is in use) */
    if (cupool__log_level >= CUPOOL_LOG_INFO)
        cupool__log(CUPOOL_LOG_INFO,
                    "%s class (context %llu, flags %u, priority %d): the depot was empty; a "
                    "handle is created on the calling thread (%lld alive, %lld in the depot, "
                    "%lld queued for destruction; reserve %u, headroom %u)",
                    cls->ops->name, cls->ctx_id, cls->flags, cls->priority,
                    (long long)atomic_load_explicit(&cls->live, CUPOOL_RELAXED),
                    (long long)atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED),
                    (long long)atomic_load_explicit(&cls->retire_idle, CUPOOL_RELAXED),
                    atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED),
                    atomic_load_explicit(&cls->headroom, CUPOOL_RELAXED));
    if (atomic_exchange_explicit(&cls->reserve_met, false, CUPOOL_RELAXED)) {
        uint32_t r = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
        uint32_t grown = r ? 2 * r : 2 * cupool__hot.mag_capacity;
        uint32_t cap = cls->idle_max / 2;
        grown = grown > cap ? cap : grown;
        if (grown > r)
            atomic_store_explicit(&cls->reserve, grown, CUPOOL_RELAXED);
    }
    (void)cupool__class_ask(cls, CUPOOL_CLASS_WANT_REFILL);
}

/* The headroom (struct cupool__class) from the swing of the demand over the last decay time:
 * the depot's highest count less its lowest, that is how far the handles in use and in
 * threads' caches rose from their quietest moment to their busiest. The headroom is
 * CUPOOL_HEADROOM_PERCENT of it, at most half the hard cap: a fluctuation beyond the recent
 * peak is on the scale of the swing, not of the level, so a class that holds many handles
 * steadily keeps none extra, and one whose demand stops sees it fall to nothing within one
 * decay time. A refill that lifts the depot after its low point adds to the next swing (by at
 * most half the headroom, the refill's threshold), so with p percent the headroom settles at
 * most at p / (1 - p/2) of the true swing: twice it at the variable's top, 100. */
static void class_set_headroom(struct cupool__class *cls, int64_t swing)
{
    uint64_t h = swing > 0 ? (uint64_t)swing * cupool__cfg.headroom_percent / 100 : 0;
    uint64_t cap = cls->idle_max / 2;
    atomic_store_explicit(&cls->headroom, (uint32_t)(h < cap ? h : cap), CUPOOL_RELAXED);
}

/* Destroys depot handles, at most `max_mags` magazines' worth, until the depot holds at most
 * `target`. Returns the handles destroyed (or forgotten: a context that is gone); *err gets the
 * first failure (the handle and the rest of its magazine stay pooled). */
int64_t cupool__depot_shrink(struct cupool__class *cls, int64_t target, int max_mags,
                             CUresult *err)
{
    int64_t gone = 0;
    for (int i = 0; (max_mags == 0 || i < max_mags) &&
                    atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED) > target;
         i++) {
        struct cupool__magazine *m = cupool__stack_pop(&cls->depot);
        if (!m)
            break;
        /* no depot_min_lower here: the moment the magazine is out of the depot is no low
         * point of demand (what it keeps goes back); decay_took and the trim record the
         * depot as they leave it */
        int64_t before = atomic_fetch_sub_explicit(&cls->depot_idle, m->count, CUPOOL_RELAXED);
        int64_t excess = before - target;
        uint32_t n = excess >= (int64_t)m->count ? m->count : (uint32_t)(excess > 0 ? excess : 0);
        uint32_t had = m->count;
        CUresult r = cupool__destroy_items(cls, m, n);
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

/* After the decay destroyed `gone` depot handles: what it took is no swing of demand. The
 * recorded minima and maxima come down by it, and the interval under way starts from the
 * depot as it is now (a push racing with this may be missed: the swing is an estimate). */
static void decay_took(struct cupool__class *cls, int64_t gone)
{
    if (gone <= 0)
        return;
    for (int i = 0; i < 4; i++) {
        cls->mins[i] = cls->mins[i] > gone ? cls->mins[i] - gone : 0;
        cls->maxes[i] = cls->maxes[i] > gone ? cls->maxes[i] - gone : 0;
    }
    int64_t now = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->depot_max, now, CUPOOL_RELAXED);
    depot_min_lower(cls, now);
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
    int64_t hi = atomic_exchange_explicit(&cls->depot_max, cur, CUPOOL_RELAXED);
    if (atomic_exchange_explicit(&cls->forget, false, CUPOOL_RELAXED))
        cls->nmins = 0; /* a trim since the last tick: its demand starts afresh */
    cls->maxes[cls->nmins % 4] = hi > cur ? hi : cur;
    cls->mins[cls->nmins++ % 4] = m < cur ? m : cur;
    atomic_store_explicit(&cls->warm, true, CUPOOL_RELAXED);
    if (!atomic_exchange_explicit(&cls->missed, false, CUPOOL_RELAXED)) {
        uint32_t r = atomic_load_explicit(&cls->reserve, CUPOOL_RELAXED);
        atomic_store_explicit(&cls->reserve, r / 2, CUPOOL_RELAXED);
    }
    /* the depot's lowest and highest counts over the last decay time (the intervals recorded
     * so far) */
    uint32_t seen = cls->nmins < 4 ? cls->nmins : 4;
    int64_t lo = cls->mins[0], top = cls->maxes[0];
    for (uint32_t i = 1; i < seen; i++) {
        lo = cls->mins[i] < lo ? cls->mins[i] : lo;
        top = cls->maxes[i] > top ? cls->maxes[i] : top;
    }
    class_set_headroom(cls, top - lo);
    int64_t keep = class_ahead(cls);
    keep = keep > (int64_t)cls->low_water ? keep : (int64_t)cls->low_water;
    /* the depot ran lower over the last interval than what the class keeps ahead of demand:
     * the demand's peak rose into the margin (or the margin grew), and the refills that the
     * depot exchanges asked for came too late or not at all (they look at the depot as it is
     * then, which the releases after the peak filled again). The class grows by the
     * shortfall, on the maintenance thread, so that the next such peak leaves the margin in
     * the depot; the mirror of the decay below, which takes what the depot never needed. */
    int64_t low = m < cur ? m : cur;
    cls->grow_due = keep > low && cupool__maint_enabled() ? keep - low : 0;
    if (cupool__cfg.decay_ms == 0 || cls->nmins < 4)
        return cls->grow_due > 0;
    if (lo <= keep)
        return cls->grow_due > 0;
    int64_t want_gone = lo - keep;
    int64_t gone = cupool__depot_shrink(cls, cur - want_gone, max_mags, err);
    decay_took(cls, gone);
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
    int64_t keep = class_ahead(cls);
    keep = keep > (int64_t)cls->low_water ? keep : (int64_t)cls->low_water;
    int64_t target = cur - cls->decay_due;
    target = target > keep ? target : keep;
    int64_t gone = cur > target ? cupool__depot_shrink(cls, target, max_mags, err) : 0;
    decay_took(cls, gone);
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
void cupool__class_decay_inline(struct cupool__class *cls)
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

/* Creates up to `want` (at most a magazine's worth) handles of cls into one magazine and puts
 * it in the depot. Returns how many were made; *err gets a failure; -1 with no magazine. */
static int64_t depot_create(struct cupool__class *cls, int64_t want, CUresult *err)
{
    struct cupool__magazine *m = cupool__mag_get();
    if (!m)
        return -1;
    uint32_t n = want < (int64_t)cupool__hot.mag_capacity ? (uint32_t)want
                                                          : cupool__hot.mag_capacity;
    while (m->count < n) {
        struct cupool__handle *rec;
        CUresult r = cupool__handle_create(cls, false, CUPOOL_H_IDLE, &rec);
        if (r != CUDA_SUCCESS) {
            *err = r;
            break;
        }
        m->items[m->count++] =
            (struct cupool__mag_item){rec, atomic_load_explicit(&rec->handle, CUPOOL_RELAXED)};
    }
    int64_t made = m->count;
    if (m->count)
        (void)cupool__depot_put(cls, m); /* under the hard cap: the callers' targets are */
    else
        cupool__mag_put(m);
    return made;
}

/* Creates into the depot, at most max_mags magazines, until it holds what cls keeps ahead of
 * demand (class_ahead: its reserve or its headroom). True when more is due. On the
 * maintenance thread. */
static bool class_refill(struct cupool__class *cls, int max_mags, CUresult *err)
{
    int64_t target = class_ahead(cls);
    target = target > (int64_t)cls->idle_max ? (int64_t)cls->idle_max : target;
    for (int i = 0; i < max_mags; i++) {
        int64_t have = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
        if (have >= target || !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) ||
            !cupool__maint_enabled())
            break;
        int64_t made = depot_create(cls, target - have, err);
        if (made > 0) {
            /* what the maintenance thread created is no demand, and covers what the last
             * tick found the depot short of: the interval's low point rises by it (a later,
             * lower one still counts), and the growth due falls by it */
            atomic_fetch_add_explicit(&cls->depot_min, made, CUPOOL_RELAXED);
            cls->grow_due = cls->grow_due > made ? cls->grow_due - made : 0;
        }
        if (made < 0 || *err != CUDA_SUCCESS)
            return false;
    }
    if (atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED) >= target) {
        atomic_store_explicit(&cls->reserve_met, true, CUPOOL_RELAXED);
        return false;
    }
    return atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) != 0;
}

/* Creates what the last decay step found the depot short of (grow_due), at most max_mags
 * magazines, and never past the hard cap. What it adds is no swing of demand: the recorded
 * minima and maxima rise by it and the interval under way starts from the depot as it is
 * now (the mirror of decay_took). True when more is due. On the maintenance thread, the
 * tick's owner. */
static bool class_grow(struct cupool__class *cls, int max_mags, CUresult *err)
{
    int64_t made = 0;
    for (int i = 0; i < max_mags && cls->grow_due > 0; i++) {
        int64_t have = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
        int64_t room = (int64_t)cls->idle_max - have;
        /* not warm: a trim since the tick forgot the class's demand, this growth with it */
        if (room <= 0 || !atomic_load_explicit(&cls->alive, CUPOOL_RELAXED) ||
            !atomic_load_explicit(&cls->warm, CUPOOL_RELAXED) || !cupool__maint_enabled()) {
            cls->grow_due = 0;
            break;
        }
        int64_t n = depot_create(cls, cls->grow_due < room ? cls->grow_due : room, err);
        if (n < 0 || *err != CUDA_SUCCESS) {
            cls->grow_due = 0; /* the next tick looks again */
            made += n > 0 ? n : 0;
            break;
        }
        cls->grow_due -= n;
        made += n;
    }
    if (made > 0) {
        for (int i = 0; i < 4; i++) {
            cls->mins[i] += made;
            cls->maxes[i] += made;
        }
        int64_t now = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
        atomic_store_explicit(&cls->depot_max, now, CUPOOL_RELAXED);
        atomic_store_explicit(&cls->depot_min, now, CUPOOL_RELAXED);
    }
    return cls->grow_due > 0;
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
        if ((w & CUPOOL_CLASS_WANT_DRAIN) ||
            atomic_load_explicit(&c->retire_idle, CUPOOL_RELAXED)) {
            err = cupool__drain_retired(c, 0, MAINT_MAGS);
            if (err == CUDA_SUCCESS && atomic_load_explicit(&c->retire_idle, CUPOOL_RELAXED))
                again = true, w |= CUPOOL_CLASS_WANT_DRAIN;
        }
        /* the refill's own error: it holds off no decay (below) */
        CUresult refill_err = CUDA_SUCCESS;
        if (err == CUDA_SUCCESS && (w & CUPOOL_CLASS_WANT_REFILL)) {
            if (class_refill(c, MAINT_MAGS, &refill_err))
                again = true;
            else if (refill_err == CUDA_SUCCESS)
                w &= ~CUPOOL_CLASS_WANT_REFILL;
            /* else a passing driver error cut it short: still asked for, the next round
             * tries again (the depot may hold half of it or more already, and no exchange
             * would ask again before the next one empties it). The class's tick still runs:
             * an error that does not pass would otherwise hold off the decay of the reserve
             * it fails to fill, and the thread would try again every 100 ms for good; the
             * reserve, which no miss renews, halves until the depot meets it */
        }
        if (refill_err != CUDA_SUCCESS)
            c->grow_due = 0; /* its creates would fail as the refill's did: the next tick
                              * looks again (as class_grow does on an error) */
        if (err == CUDA_SUCCESS && c->grow_due > 0)
            again |= class_grow(c, MAINT_MAGS, &err);
        else if (err == CUDA_SUCCESS && c->decay_due > 0)
            again |= class_decay_more(c, MAINT_MAGS, &err);
        else if (err == CUDA_SUCCESS && class_tick_claim(c, now))
            again |= class_decay_step(c, MAINT_MAGS, &err);
        /* a headroom the step set (or a reserve) that the depot is below half of: filled now,
         * not only at the next depot exchange (a class whose demand paused has none) */
        int64_t ahead = class_ahead(c);
        if (err == CUDA_SUCCESS && !(w & CUPOOL_CLASS_WANT_REFILL) && ahead &&
            atomic_load_explicit(&c->depot_idle, CUPOOL_RELAXED) < ahead / 2 &&
            atomic_load_explicit(&c->warm, CUPOOL_RELAXED)) {
            w |= CUPOOL_CLASS_WANT_REFILL;
            again = true;
        }
        if (err != CUDA_SUCCESS || refill_err != CUDA_SUCCESS)
            failed = true; /* a passing driver error: the next round tries again */
        if (err == CUDA_SUCCESS)
            w &= ~CUPOOL_CLASS_WANT_DRAIN;
        if (w)
            atomic_fetch_or_explicit(&c->want, w, CUPOOL_RELAXED);
        more |= again;
        /* a reserve still to fill (a class growing past its warm-up): its exchanges nudge
         * without waking the thread, which polls until the reserve decays. Not the headroom:
         * it lasts as long as the demand swings, and a depot exchange that leaves the depot
         * below half of it wakes the thread (depot_taken) */
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
    uint64_t wait = next_due > now ? next_due - now : 0; /* no class: past the clock's end */
    if (cupool__decay_clock != NULL)
        wait = UINT64_MAX; /* a test drives the clock: it flushes the thread itself */
    return reserves && wait > 1000000u ? 1000000u : wait;
}
