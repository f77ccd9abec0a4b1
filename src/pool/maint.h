/* SPDX-License-Identifier: MIT */
/*
 * The maintenance thread: the driver work of pooling that no request thread should pay for.
 * It destroys idle handles whose idle time has decayed (CUPOOL_DECAY_MS) and those beyond the
 * hard idle caps, replenishes a class ahead of demand after a miss, and reaps the graph
 * cache's graveyard. It starts lazily, at the first kick; never runs in a forked child; stops
 * at exit (no join: the process is ending, and no driver call starts once exit began) and at
 * unload (joined, before the library's memory goes). CUPOOL_BACKGROUND=0 keeps it off; the
 * same work then runs inline, on the threads that cause it, as before.
 *
 * Contract. Kicks are lock-free and cheap when nothing is asked (one relaxed load); a kick that
 * asks for new work sets a bit in `cupool__maint_want` (atomic OR) and, when the thread sleeps,
 * wakes it (its mutex and condition variable: the one lock, taken by kickers only on the slow
 * paths that asked for work, never inside a read section of the kicker's and never while
 * holding another cupool lock... except the graph cache's, where the kick only sets the bit).
 */
#ifndef CUPOOL_MAINT_H
#define CUPOOL_MAINT_H
#include "base/internal.h"

enum {
    CUPOOL_MAINT_POOLS = 1u << 0,  /* a class has a retire backlog, or wants a refill */
    CUPOOL_MAINT_GRAVES = 1u << 1, /* the graph cache's graveyard has graves due */
    CUPOOL_MAINT_RECLAIM = 1u << 2, /* a deferred reclamation is to be tried again later */
};

extern _Atomic uint32_t cupool__maint_want;

/* The unit lock: the maintenance thread holds it around each unit of its driver work (one
 * class's drain, refill or decay step; one graveyard reap), so that cupool_context_release()
 * can wait for the unit in progress and retire a context's classes before the application
 * destroys or resets it, and cupool_trim() trims no class while a magazine is being filled
 * for it. Lock order (docs/design.md, "Locks"): before every lock but
 * reclaim_lock, with which it is never held; held across driver calls and, in
 * cupool_context_release, a graph-cache trim's grace period. Never taken in a forked child,
 * nor by a thread inside a read section. */
#include <pthread.h>
extern pthread_mutex_t cupool__maint_unit;

/* Whether the work goes to the maintenance thread (CUPOOL_BACKGROUND and a running state);
 * false: do it inline. */
bool cupool__maint_enabled(void);

/* Asks the maintenance thread for `what` (starting it on first use). False when it cannot run
 * (disabled, not RUNNING, a forked child, could not start): the caller does the work inline. */
bool cupool__maint_kick(uint32_t what);

/* Asks for `what` without waking the thread while it polls (it looks at the bits within a
 * millisecond while a class has a reserve to fill: cupool__pools_maintain's answer), and as
 * cupool__maint_kick otherwise. No system call while it polls: for request threads'
 * exchanges, where a futex wake would be the tail. False as cupool__maint_kick. */
bool cupool__maint_nudge(uint32_t what);

/* Tells the thread of pool work due at monotonic time `at` (a new class's first decay tick):
 * a kick only when the thread would sleep past it (or does not run yet). */
bool cupool__maint_due(uint64_t at);

/* Hands the next try of a deferred reclamation that backed off (pool/class.c,
 * cupool__reclaim_deferred) to the maintenance thread, due at monotonic time `at`: the calls of
 * request threads then need not each look at the clock until it is due. False when the thread
 * cannot take it (as cupool__maint_kick): the caller keeps the reclamation flag set. */
bool cupool__maint_reclaim_later(uint64_t at);

/* Stops it: at exit (join false) and unload (join true). Idempotent. */
void cupool__maint_stop(bool join);
/* In a forked child: the thread does not exist there; forget it without touching its lock. */
void cupool__maint_forget(void);

/* What the maintenance thread calls (pool/decay.c; the graph layer's graveyard goes through
 * its maintain hook, base/layer.h). */
/* One round over the pools: drain retire stacks, refill classes that asked, and the decay
 * steps that are due. Returns the ns until the pools want the next round: 0 at once (more
 * work than a round's units), a millisecond while a class keeps a reserve, else until the
 * earliest class's next decay step (UINT64_MAX: no class). */
uint64_t cupool__pools_maintain(void);

/* The decay tick's period: a quarter of CUPOOL_DECAY_MS (ns). */
uint64_t cupool__decay_period_ns(void);

/* Counters (cupool_maintenance_stats_get). */
extern _Atomic uint64_t cupool__maint_wakeups, cupool__maint_creates, cupool__maint_destroys,
    cupool__req_creates, cupool__req_destroys, cupool__maint_graph_reaps;
/* Test hooks. The clock decay ticks are measured by, in ns (NULL: the monotonic clock). */
extern uint64_t (*cupool__decay_clock)(void);
/* Kicks the maintenance thread and waits until it has run a whole round begun after the
 * call. False after timeout_ns, or when the thread does not run. */
bool cupool__maint_flush(uint64_t timeout_ns);
/* Whether the thread's last round asked to look again within a millisecond (a reserve to
 * fill). For tests: an idle process must not keep it polling. */
bool cupool__maint_polling(void);
/* Tests only: called, when set, by cupool__maint_nudge between its load of the polling flag
 * and its OR of the bit (a test plays the thread's side of that race there); and a store of
 * the polling flag as the thread's round makes it. NULL, and unused, otherwise. */
extern void (*cupool__maint_nudge_hook)(void);
void cupool__maint_polling_set(bool polling);
/* Whether the thread's last round left it looking at the graveyard again within a
 * millisecond (graves whose launches it waits for). For tests: as above. */
bool cupool__maint_graves_polling(void);

/* True on the maintenance thread. */
extern CUPOOL_TLS_IE bool cupool__maint_self;

#endif
