/* SPDX-License-Identifier: MIT */
/*
 * The maintenance thread (maint.h): one per process, started at the first kick. It sleeps on a
 * condition variable (CLOCK_MONOTONIC) until a kick or its next deadline: the decay tick (a
 * quarter of CUPOOL_DECAY_MS), a class's next look, or the graveyard's next look. jemalloc's
 * background purging threads are the model; this one is a single thread, since creation and
 * destruction serialise in the driver anyway.
 */
#define _GNU_SOURCE
#include "pool/maint.h"
#include "base/layer.h"
#include "base/config.h"
#include "base/error.h"
#include "base/lifecycle.h"
#include "pool/pool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

_Atomic uint32_t cupool__maint_want;
pthread_mutex_t cupool__maint_unit = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint64_t cupool__maint_wakeups, cupool__maint_creates, cupool__maint_destroys,
    cupool__req_creates, cupool__req_destroys, cupool__maint_graph_reaps;
CUPOOL_TLS_IE bool cupool__maint_self;

/*
 * The thread's lifecycle, and the lock.
 * maint_lock guards maint_sleeping and the start; maint_state is also read without it (an
 * atomic). It nests with no other cupool lock (docs/design.md, "Locks"): no kicker holds one
 * when it takes maint_lock, and the thread takes none while holding it.
 */
enum { M_NONE, M_RUNNING, M_STOPPING, M_OFF };
static _Atomic int maint_state;
static pthread_mutex_t maint_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t maint_cond;
static pthread_once_t maint_once = PTHREAD_ONCE_INIT;
static bool maint_sleeping;  /* under maint_lock */
static bool maint_joinable;  /* under maint_lock */
static pthread_t maint_thread;
/* Flushes (cupool__maint_flush): the sequence asked for, and the one the thread's last
 * completed round had seen when it began. */
static _Atomic uint64_t flush_asked, flush_done;
/* Set while the thread looks again within a millisecond (a class keeps a reserve to fill):
 * a nudge then needs no wake-up. Stored by the thread, sequentially consistent, before it
 * exchanges cupool__maint_want; a nudge ORs want, then loads this again (cupool__maint_nudge). */
static _Atomic bool maint_polling;
/* Set while it looks at the graveyard again within a millisecond (cupool__maint_graves_polling). */
static _Atomic bool maint_graves_polling;
/* When the thread wakes next at the latest (monotonic ns; UINT64_MAX while it works). */
static _Atomic uint64_t maint_wake_at = UINT64_MAX;
/* When the thread tries a deferred reclamation again (monotonic ns; UINT64_MAX: none asked):
 * lowered by cupool__maint_reclaim_later (compare-and-swap), taken by the thread. */
static _Atomic uint64_t maint_reclaim_at = UINT64_MAX;

static void cond_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&maint_cond, &a);
    pthread_condattr_destroy(&a);
}

bool cupool__maint_enabled(void)
{
    int ms = atomic_load_explicit(&maint_state, CUPOOL_RELAXED);
    return cupool__cfg.background && cupool__state_now() == CUPOOL_ST_RUNNING &&
           (ms == M_NONE || ms == M_RUNNING);
}

static void *maint_main(void *arg)
{
    (void)arg;
    cupool__maint_self = true;
    pthread_setname_np(pthread_self(), "cupool-maint");
    (void)cupool__tcache_self(); /* its driver calls count in its own cache (the exit guard) */
    uint64_t period = cupool__decay_period_ns();
    uint64_t now = cupool__monotonic_ns();
    uint64_t next_tick = now + period, next_pools = UINT64_MAX, next_graves = UINT64_MAX;
    pthread_mutex_lock(&maint_lock);
    for (;;) {
        if (atomic_load(&maint_state) != M_RUNNING || cupool__state_now() != CUPOOL_ST_RUNNING)
            break;
        uint64_t seen = atomic_load(&flush_asked);
        uint32_t want = atomic_exchange(&cupool__maint_want, 0);
        now = cupool__monotonic_ns();
        bool tick = now >= next_tick;
        uint64_t reclaim_at = atomic_load_explicit(&maint_reclaim_at, CUPOOL_ACQUIRE);
        if (!want && !tick && now < next_pools && now < next_graves && now < reclaim_at) {
            uint64_t until = next_tick;
            until = next_pools < until ? next_pools : until;
            until = next_graves < until ? next_graves : until;
            until = reclaim_at < until ? reclaim_at : until;
            struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
            atomic_store_explicit(&maint_wake_at, until, CUPOOL_RELAXED);
            maint_sleeping = true;
            int rc;
            do
                rc = pthread_cond_timedwait(&maint_cond, &maint_lock, &ts);
            while (rc == EINTR);
            maint_sleeping = false;
            atomic_store_explicit(&maint_wake_at, UINT64_MAX, CUPOOL_RELAXED);
            continue;
        }
        pthread_mutex_unlock(&maint_lock);
        atomic_fetch_add_explicit(&cupool__maint_wakeups, 1, CUPOOL_RELAXED);
        if (tick)
            next_tick = now + period;
        if ((want & CUPOOL_MAINT_POOLS) || tick || now >= next_pools) {
            uint64_t d = cupool__pools_maintain();
            /* sequentially consistent, as the exchange of want below and a nudger's OR of it
             * and its load of this flag: a thread that stops polling either sees a bit a
             * nudger set, or that nudger sees it stopped and wakes it (cupool__maint_nudge) */
            atomic_store(&maint_polling, d <= 1000000u);
            uint64_t at = cupool__monotonic_ns();
            /* saturated: a wait past the clock's end is no deadline at all */
            next_pools = d >= UINT64_MAX - at ? UINT64_MAX : at + d;
        }
        if ((want & CUPOOL_MAINT_GRAVES) || now >= next_graves) {
            atomic_fetch_add_explicit(&cupool__maint_graph_reaps, 1, CUPOOL_RELAXED);
            /* graves waiting for their launches: look again in a millisecond */
            next_graves = cupool__layers_maintain() ? cupool__monotonic_ns() + 1000000u
                                                          : UINT64_MAX;
            atomic_store_explicit(&maint_graves_polling, next_graves != UINT64_MAX,
                                  CUPOOL_RELAXED);
        }
        if (now >= reclaim_at) {
            /* outside any read section of its own, holding no lock: as a request thread on
             * its way out of a public call (a new backoff asks for the thread again) */
            (void)atomic_exchange_explicit(&maint_reclaim_at, UINT64_MAX, CUPOOL_ACQ_REL);
            cupool__reclaim_deferred();
        }
        /* a flush waits for the thread to be idle: no round due at once */
        if (next_pools != 0 && next_pools <= cupool__monotonic_ns())
            ; /* more work right away (a long decay or drain, in units) */
        else
            atomic_store(&flush_done, seen);
        pthread_mutex_lock(&maint_lock);
    }
    pthread_mutex_unlock(&maint_lock);
    return NULL;
}

/* Starts the thread if nobody has; true when it runs. */
static bool maint_start(void)
{
    pthread_once(&maint_once, cond_init);
    pthread_mutex_lock(&maint_lock);
    if (atomic_load(&maint_state) == M_NONE) {
        /* every signal blocked in the new thread: the program's handlers run on its threads */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&maint_thread, NULL, maint_main, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc == 0) {
            maint_joinable = true;
            atomic_store(&maint_state, M_RUNNING);
        } else {
            atomic_store(&maint_state, M_OFF);
            cupool__log(CUPOOL_LOG_WARN, "could not start the maintenance thread (error %d): its "
                                         "work runs on the threads that cause it",
                        rc);
        }
    }
    bool on = atomic_load(&maint_state) == M_RUNNING;
    pthread_mutex_unlock(&maint_lock);
    return on;
}

/* Wakes the thread if it sleeps: under the lock it sleeps with, so that a thread about to
 * sleep (it read want under the lock) is signalled once it waits. */
static void maint_wake(void)
{
    pthread_mutex_lock(&maint_lock);
    if (maint_sleeping)
        pthread_cond_signal(&maint_cond);
    pthread_mutex_unlock(&maint_lock);
}

bool cupool__maint_kick(uint32_t what)
{
    if (!cupool__cfg.background || cupool__state_now() != CUPOOL_ST_RUNNING)
        return false;
    int ms = atomic_load_explicit(&maint_state, CUPOOL_ACQUIRE);
    if (CUPOOL_UNLIKELY(ms != M_RUNNING)) {
        if (ms != M_NONE || cupool__maint_self || !maint_start())
            return false;
    } else if ((atomic_load_explicit(&cupool__maint_want, CUPOOL_RELAXED) & what) == what) {
        return true; /* asked already, not yet taken: the thread will see it */
    }
    atomic_fetch_or(&cupool__maint_want, what);
    if (cupool__maint_self)
        return true; /* it looks at want before it sleeps */
    maint_wake();
    return true;
}

bool cupool__maint_reclaim_later(uint64_t at)
{
    if (!cupool__maint_enabled())
        return false;
    uint64_t cur = atomic_load_explicit(&maint_reclaim_at, CUPOOL_RELAXED);
    while (at < cur && !atomic_compare_exchange_weak_explicit(&maint_reclaim_at, &cur, at,
                                                              CUPOOL_RELEASE, CUPOOL_RELAXED))
        ;
    return cupool__maint_kick(CUPOOL_MAINT_RECLAIM);
}

bool cupool__maint_due(uint64_t at)
{
    if (atomic_load_explicit(&maint_state, CUPOOL_ACQUIRE) == M_RUNNING &&
        at >= atomic_load_explicit(&maint_wake_at, CUPOOL_RELAXED))
        return true; /* it wakes before then anyway, and looks at every class */
    return cupool__maint_kick(CUPOOL_MAINT_POOLS);
}

bool cupool__maint_nudge(uint32_t what)
{
    if (atomic_load_explicit(&maint_state, CUPOOL_ACQUIRE) != M_RUNNING ||
        !atomic_load_explicit(&maint_polling, CUPOOL_RELAXED))
        return cupool__maint_kick(what);
    if (!cupool__cfg.background || cupool__state_now() != CUPOOL_ST_RUNNING)
        return false;
    if ((atomic_load_explicit(&cupool__maint_want, CUPOOL_RELAXED) & what) != what) {
        if (CUPOOL_UNLIKELY(cupool__maint_nudge_hook != NULL))
            cupool__maint_nudge_hook();
        atomic_fetch_or(&cupool__maint_want, what);
        /* The thread may have stopped polling since the load above and gone to sleep past
         * this bit, which no kick would then signal (they find it set). Both sides are
         * sequentially consistent: the thread stores maint_polling, then exchanges want; this
         * ORs want, then loads maint_polling. So either its exchange sees the bit, or this
         * sees it stopped, and wakes it. */
        if (!atomic_load(&maint_polling))
            maint_wake();
    }
    return true;
}

void cupool__maint_stop(bool join)
{
    int ms = atomic_load(&maint_state);
    if (ms == M_OFF)
        return;
    pthread_once(&maint_once, cond_init);
    pthread_mutex_lock(&maint_lock);
    ms = atomic_exchange(&maint_state, M_OFF);
    bool joinable = maint_joinable && ms != M_OFF;
    if (joinable)
        maint_joinable = false;
    pthread_cond_broadcast(&maint_cond);
    pthread_mutex_unlock(&maint_lock);
    if (joinable && (!join || cupool__maint_self))
        pthread_detach(maint_thread); /* exit: it ends by itself, nobody waits for it */
    else if (joinable)
        pthread_join(maint_thread, NULL);
}

bool cupool__maint_flush(uint64_t timeout_ns)
{
    uint64_t seq = atomic_fetch_add(&flush_asked, 1) + 1;
    if (!cupool__maint_kick(CUPOOL_MAINT_POOLS | CUPOOL_MAINT_GRAVES))
        return false;
    uint64_t deadline = cupool__monotonic_ns() + timeout_ns;
    while (atomic_load(&flush_done) < seq) {
        if (atomic_load(&maint_state) != M_RUNNING || cupool__monotonic_ns() > deadline)
            return false;
        /* the round may have started before the bits were set: ask again */
        (void)cupool__maint_kick(CUPOOL_MAINT_POOLS | CUPOOL_MAINT_GRAVES);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return true;
}

void (*cupool__maint_nudge_hook)(void);

void cupool__maint_polling_set(bool polling)
{
    atomic_store(&maint_polling, polling);
}

bool cupool__maint_polling(void)
{
    return atomic_load_explicit(&maint_polling, CUPOOL_RELAXED);
}

bool cupool__maint_graves_polling(void)
{
    return atomic_load_explicit(&maint_graves_polling, CUPOOL_RELAXED);
}

void cupool__maint_forget(void)
{
    atomic_store(&maint_state, M_OFF);
}

CUresult cupool_maintenance_stats_get(cupool_maintenance_stats_t *out)
{
    if (!out)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_maintenance_stats_get: stats is NULL");
    if (cupool__stats_size(out) < CUPOOL_MAINTENANCE_STATS_SIZE_V1)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_maintenance_stats_get: stats->size is %zu, below the %zu "
                            "bytes of the first cupool_maintenance_stats_t (set it to sizeof)",
                            cupool__stats_size(out), (size_t)CUPOOL_MAINTENANCE_STATS_SIZE_V1);
    cupool_maintenance_stats_t full = {0}, *stats = &full; /* then the caller's prefix */
    stats->running = atomic_load(&maint_state) == M_RUNNING;
    stats->wakeups = atomic_load_explicit(&cupool__maint_wakeups, CUPOOL_RELAXED);
    stats->background_creates = atomic_load_explicit(&cupool__maint_creates, CUPOOL_RELAXED);
    stats->background_destroys = atomic_load_explicit(&cupool__maint_destroys, CUPOOL_RELAXED);
    stats->request_creates = atomic_load_explicit(&cupool__req_creates, CUPOOL_RELAXED);
    stats->request_destroys = atomic_load_explicit(&cupool__req_destroys, CUPOOL_RELAXED);
    stats->graph_reaps = atomic_load_explicit(&cupool__maint_graph_reaps, CUPOOL_RELAXED);
    cupool__stats_put(out, stats, sizeof(*stats));
    return CUDA_SUCCESS;
}
