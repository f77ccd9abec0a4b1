/* SPDX-License-Identifier: MIT */
/*
 * Deferred destruction: graphs and execs whose launches may still run wait in the graveyard
 * until their events say they finished.
 */
#include "base/internal.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/layer.h"
#include "base/lifecycle.h"
#include "pool/maint.h"
#include "pool/pool.h"
#include "graph/graph.h"
#include "graph/graph_impl.h"
#include "graph/gate.h"
#include "graph/graveyard.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#define GRAVES_BLIND_MAX 16
/* The graveyard (cache lock): grows as needed, so nothing that must be destroyed is ever
 * dropped, and a destroy the driver refused once is tried again at a later reap. */
static struct grave *graves;
static int ngraves, nblind;
static size_t graves_cap;
/* the instantiation gate (below): sections of driver calls no instantiation overlaps */
static inline _Atomic uint32_t *gate_enter(void);
static inline void gate_leave(_Atomic uint32_t *c);

_Atomic int cupool__graves_due; /* graves a launch may reap now (read without the lock) */
/* the maintenance thread looks at the graveyard until it is empty (set by the launch that
 * kicked it; cleared by the thread once it found no grave left) */
_Atomic bool cupool__graves_watched;
void (*cupool__graves_kicked_hook)(void);

static bool grave_blind(const struct grave *g)
{
    return !g->ready && !g->done_valid;
}

/* Sequentially consistent: the count and the watch are the two sides of a handshake
 * (cupool__graves_watched). */
static void graves_count(void)
{
    int due = ngraves - nblind + (nblind > GRAVES_BLIND_MAX ? nblind : 0);
    atomic_store(&cupool__graves_due, due);
}

/* Destroys what it can of g's objects, clearing each one the driver destroyed; true when
 * nothing is left (or its context is gone: nothing to call; or broken by a sticky error,
 * confirmed: the driver destroys nothing of it any more, and the grave would be retried every
 * millisecond for good), false when the grave must stay (its context cannot be told now, or a
 * destroy failed for a passing reason). */
static bool grave_destroy(struct grave *g)
{
    CUresult err = CUDA_SUCCESS;
    int st = cupool__ctx_verdict(g->ctx, g->ctx_id, &err);
    if (st == 0 || err == CUDA_ERROR_DEINITIALIZED)
        return true; /* its context is gone, or the driver: nothing left to destroy */
    if (st < 0)
        return false;
    /* an object is gone once destroyed, or once the driver itself is */
#define GONE(call) ((r = CUPOOL_DRV(call)) == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED || \
                    (failed = r, false))
    CUresult r, failed = CUDA_SUCCESS;
    if (g->exec && GONE(cupool__drv.cuGraphExecDestroy(g->exec)))
        g->exec = NULL;
    if (g->graph && GONE(cupool__drv.cuGraphDestroy(g->graph)))
        g->graph = NULL;
    if (g->done && GONE(cupool__drv.cuEventDestroy(g->done)))
        g->done = NULL;
#undef GONE
    if ((g->exec || g->graph || g->done) && cupool__ctx_broken_by(g->ctx, g->ctx_id, failed))
        return true; /* as the pools forget a broken context's handles */
    if (g->exec || g->graph || g->done) {
        g->ready = true; /* what is left has been let go of: retry at the next reap */
        return false;
    }
    return true;
}

/* The last resort: a destroy failed and there is no memory to keep the object for a retry. */
static void grave_lost(const char *what)
{
    cupool__log(CUPOOL_LOG_WARN, "no memory to keep %s whose destroy failed: it is left to the "
                                 "driver",
                what);
}

/* Adds a grave. Cache lock held. False when there is no memory for it (the caller destroys
 * its objects itself then: the rare slow case). */
static bool grave_add(const struct grave *g)
{
    if (!GROW(graves, graves_cap, (size_t)ngraves + 1))
        return false;
    graves[ngraves++] = *g;
    nblind += grave_blind(g);
    graves_count();
    return true;
}

/* Destroys driver objects of a context now, outside the cache lock; whatever the driver does
 * not destroy (a passing error) is buried and tried again at a later reap: a failed destroy
 * never leaks the object. */
void cupool__objects_destroy(CUgraphExec exec, CUgraph graph, CUevent done, CUcontext ctx,
                             unsigned long long ctx_id)
{
    if (!exec && !graph && !done)
        return;
    struct grave g = {exec, graph, done, false, true, ctx, ctx_id};
    if (grave_destroy(&g))
        return;
    pthread_mutex_lock(&cupool__cache_lock);
    bool buried = grave_add(&g);
    pthread_mutex_unlock(&cupool__cache_lock);
    if (!buried)
        grave_lost("a graph object");
}

/* Buries x's driver objects (and, for an entry, its template graph: graph given). Cache lock
 * held. False when there is no memory (the caller destroys them itself then). */
static bool exec_bury(const struct gentry *e, struct gexec *x)
{
    struct grave g = {x->exec, x->graph, x->done, x->done_valid && x->done != NULL, false,
                      e->ctx, e->ctx_id};
    return grave_add(&g);
}

/* Destroys the buried objects that are done (all of them when `all`), outside the lock. */
void cupool__graves_reap(bool all)
{
    enum { BATCH = 64 };
    for (int round = 0;; round++) {
        struct grave out[BATCH];
        int n = 0;
        pthread_mutex_lock(&cupool__cache_lock);
        bool blind = all || nblind > GRAVES_BLIND_MAX;
        CUcontext vctx = NULL;
        unsigned long long vid = 0;
        int vst = -1;
        bool vknown = false;
        /* a retry round looks only at graves not yet tried in this reap (moved to the end) */
        int limit = ngraves;
        for (int i = 0; i < limit && n < BATCH;) {
            struct grave *g = &graves[i];
            bool go = g->ready || (g->done_valid ? all : blind);
            if (!go && g->done_valid) {
                /* no call on an event of a reset context (the driver crashes) */
                if (!vknown || g->ctx != vctx || g->ctx_id != vid) {
                    CUresult err = CUDA_SUCCESS;
                    vst = cupool__ctx_verdict(g->ctx, g->ctx_id, &err);
                    vctx = g->ctx, vid = g->ctx_id, vknown = true;
                }
                go = vst == 0 || (vst == 1 && CUPOOL_DRV(cupool__drv.cuEventQuery(g->done)) !=
                                                  CUDA_ERROR_NOT_READY);
            }
            if (go) {
                out[n++] = *g;
                nblind -= grave_blind(g);
                graves[i] = graves[--ngraves];
                limit--;
            } else {
                i++;
            }
        }
        graves_count();
        pthread_mutex_unlock(&cupool__cache_lock);
        int keep = 0;
        for (int i = 0; i < n; i++)
            if (!grave_destroy(&out[i]))
                out[keep++] = out[i]; /* cannot be told or destroyed now: back, for later */
        if (keep) {
            pthread_mutex_lock(&cupool__cache_lock);
            for (int i = 0; i < keep; i++)
                if (!grave_add(&out[i]))
                    grave_lost("a graph object");
            pthread_mutex_unlock(&cupool__cache_lock);
        }
        if (n < BATCH || keep == n)
            return; /* all looked at, or nothing more can go now */
    }
}



/* The maintenance thread's look at the graveyard. True while graves it can see the end of
 * remain (cupool__graves_due: an event to query, or ready): it looks again in a millisecond.
 * Graves without an event wait for a trim, or for enough of them to be destroyed blind;
 * looking every millisecond would not bring them closer, so they keep no watch. */
bool cupool__graph_graves_maintain(void)
{
    atomic_store(&cupool__graves_watched, true);
    pthread_mutex_lock(&cupool__maint_unit); /* cupool_context_release waits for it */
    cupool__graves_reap(false);
    pthread_mutex_unlock(&cupool__maint_unit);
    if (atomic_load(&cupool__graves_due) > 0)
        return true;
    atomic_store(&cupool__graves_watched, false);
    /* a grave buried since the look above saw the watch still on and did not kick */
    return atomic_load(&cupool__graves_due) > 0;
}

void cupool__exec_free(struct gentry *e, struct gexec *x, bool alive)
{
    if (alive && (x->exec || x->done || x->graph) && !exec_bury(e, x)) {
        struct grave g = {x->exec, x->graph, x->done, false, true, e->ctx, e->ctx_id};
        if (!grave_destroy(&g)) /* no memory for a grave: now, under the lock (rare) */
            grave_lost("a graph exec");
    }
    size_t bytes = x->counted_bytes; /* what its add counted (cupool__exec_bytes) */
    cupool__cache_bytes -= bytes;
    cupool__cache_execs--;
    cupool__st_dev[e->dev].bytes -= bytes;
    cupool__st_dev[e->dev].execs--;
    cupool__free(x->snap, x->snap_cap * sizeof(*x->snap));
    cupool__free(x->snap_args, x->snap_acap);
    cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
    cupool__free(x->handles, x->handles ? x->nnodes * sizeof(*x->handles) : 0);
    cupool__exec_fp_set(x, NULL, 0, false);
    cupool__exec_struct_put(x);
}

/* Frees an entry that is out of the table and the LRU list. Cache lock held. */
static void entry_free_as(struct gentry *e, bool alive)
{
    if (e->published) /* a thread's hint may name it */
        atomic_fetch_add(&cupool__cache_epoch.v, 1);
    for (int i = 0; i < e->nexecs; i++)
        cupool__exec_free(e, e->execs[i], alive);
    if (alive && e->graph) {
        /* destroyed outside the lock, at the next reap (nothing of it runs) */
        struct grave g = {NULL, e->graph, NULL, false, true, e->ctx, e->ctx_id};
        if (!grave_add(&g) && !grave_destroy(&g))
            grave_lost("a template graph");
        e->graph = NULL;
    }
    cupool__cache_bytes -= e->bytes;
    cupool__cache_entries--;
    cupool__st_dev[e->dev].bytes -= e->bytes;
    cupool__st_dev[e->dev].entries--;
    cupool__free(e->sig, e->nsig * sizeof(*e->sig));
    cupool__free(e->gnodes, e->n * sizeof(*e->gnodes));
    cupool__free(e->tmpl, e->n * sizeof(*e->tmpl));
    cupool__free(e->tmpl_args, e->tmpl_alen + 1);
    cupool__setter_put(e->setter);
    cupool__entry_struct_put(e);
}

/* Frees an entry; its driver objects are buried unless its context is proven gone (the
 * graveyard asks again before it calls the driver). Lock held. */
void cupool__entry_free(struct gentry *e)
{
    entry_free_as(e, cupool__entry_ctx_state(e) != 0);
}

void cupool__entry_unlink(struct gentry *e)
{
    struct gentry **link = &cupool__buckets[e->hash % BUCKETS];
    while (*link && *link != e)
        link = &(*link)->hnext;
    if (*link)
        *link = e->hnext;
    cupool__list_unlink(e);
}

/* Evicts e unless it is busy or its context cannot be checked now (then its driver objects
 * would leak: it stays, and a later eviction tries again). Lock held. */
bool cupool__entry_evict(struct gentry *e)
{
    if (atomic_load(&e->busy))
        return false; /* plainly in use: no need to disturb the lock-free claims */
    /* the epoch first, then the execs: a lock-free claim takes an exec, then checks the epoch */
    atomic_fetch_add(&cupool__cache_epoch.v, 1);
    if (atomic_load(&e->busy))
        return false;
    int owned = 0; /* its execs, owned so that no claim can take one meanwhile */
    while (owned < e->nexecs && exec_own(e->execs[owned]))
        owned++;
    int st = owned == e->nexecs ? cupool__entry_ctx_state(e) : -1;
    if (st < 0) {
        while (owned > 0)
            exec_disown(e->execs[--owned]);
        return false;
    }
    cupool__st_evictions++;
    cupool__st_dev[e->dev].evictions++;
    cupool__entry_unlink(e);
    entry_free_as(e, st == 1);
    return true;
}


/* Evicts least recently used idle entries while the cache is over a bound. Lock held. */
void cupool__evict(void)
{
    static uint64_t pass;
    pass++;
    while (cupool__cache_entries > cupool__cfg.graph_cache_entries ||
           cupool__cache_bytes > cupool__cfg.graph_cache_bytes) {
        struct gentry *victim = NULL;
        uint64_t oldest = UINT64_MAX;
        for (struct gentry *e = cupool__entries_head; e; e = e->next) {
            uint64_t t = atomic_load_explicit(&e->last_use, CUPOOL_RELAXED);
            if (e->evict_pass != pass && !atomic_load_explicit(&e->busy, CUPOOL_RELAXED) &&
                (!victim || t < oldest)) {
                victim = e;
                oldest = t;
            }
        }
        if (!victim)
            return;
        if (!cupool__entry_evict(victim))
            victim->evict_pass = pass; /* busy after all, or its context unknown now */
    }
}

struct gentry *cupool__lookup(uint64_t hash, unsigned long long ctx_id, const uint64_t *sig,
                              size_t nsig)
{
    for (struct gentry *e = cupool__buckets[hash % BUCKETS]; e; e = e->hnext)
        if (e->hash == hash && e->ctx_id == ctx_id && e->nsig == nsig &&
            memcmp(e->sig, sig, nsig * sizeof(*sig)) == 0)
            return e; /* the full comparison: a hash collision never launches another graph */
    return NULL;
}
