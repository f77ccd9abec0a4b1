/* SPDX-License-Identifier: MIT */
/*
 * Trimming, cupool_context_release, closing at exit and unload, and the pool layer's hooks.
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
    atomic_store_explicit(&cls->headroom, 0, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->reserve_met, true, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->warm, false, CUPOOL_RELAXED);
}

static CUresult trim_class(struct cupool__class *cls, int64_t keep)
{
    class_forget_demand(cls);
    CUresult first = cupool__drain_retired(cls, 0, 0);
    (void)cupool__depot_shrink(cls, keep, 0, &first);
    /* what the trim took out of the depot is no swing of demand: the interval under way
     * starts again from the depot as it is (a push racing with this may be missed: the swing
     * is an estimate), and the next tick drops what the earlier ones recorded */
    int64_t now = atomic_load_explicit(&cls->depot_idle, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->depot_min, now, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->depot_max, now, CUPOOL_RELAXED);
    atomic_store_explicit(&cls->forget, true, CUPOOL_RELAXED);
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
        bool mine = c && (only ? atomic_load_explicit(&c->alive, CUPOOL_ACQUIRE) &&
                                     c->ctx == only && (!id_known || c->ctx_id == only_id)
                               : cupool__class_walkable(c));
        if (mine) {
            CUresult r = trim_class(c, only ? 0 : (int64_t)c->low_water);
            if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
                first = r;
            if (only)
                cupool__class_mark_dead(
                    c); /* what other threads still cache is forgotten, no call */
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
        cupool__tcache_flush(*tc);
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
    cupool__classes_reclaim(10000000u);
    return first;
}

/* ---------------------------------------------------------------------------------------- */
/* Exit and unload                                                                          */
/* ---------------------------------------------------------------------------------------- */


/* Destroys every idle handle of a class: its retire stack and its whole depot. */
static void close_class(struct cupool__class *cls)
{
    cupool__drain_retired(cls, 0, 0);
    struct cupool__magazine *m;
    while ((m = cupool__stack_pop(&cls->depot)) != NULL) {
        atomic_fetch_sub_explicit(&cls->depot_idle, m->count, CUPOOL_RELAXED);
        cupool__destroy_items(cls, m, m->count);
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
void cupool__pool_close(bool all_threads)
{
    if (all_threads) {
        for (struct cupool__tcache *tc = cupool__tcaches(); tc; tc = cupool__tc_next(tc))
            cupool__tcache_flush(tc);
    } else if (cupool__tl) {
        cupool__tcache_flush(cupool__tl);
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

CUresult cupool_trim(void)
{
    struct cupool__tcache *tc = NULL;
    CUresult r = trim_enter(&tc);
    if (r != CUDA_SUCCESS)
        return r;
    /* contexts destroyed since (cuCtxDestroy) retire their classes here, so that the pass
     * below forgets their idle handles and the reclamation frees their indexes */
    cupool__read_enter(cupool__th(tc));
    cupool__classes_check_contexts();
    cupool__read_leave(cupool__th(tc));
    /* the maintenance thread is between units of work while the classes are trimmed: a
     * magazine it was filling (a refill or a tick's growth) lands before the trim, not after
     * it, and its next unit finds the class's demand forgotten (not warm) and stops */
    pthread_mutex_lock(&cupool__maint_unit);
    CUresult first = trim_classes(tc, NULL, 0, false);
    pthread_mutex_unlock(&cupool__maint_unit);
    atomic_store_explicit(&cupool__hot.reclaim_due, false, CUPOOL_RELAXED);
    cupool__registry_reclaim(10000000u);
    cupool__classes_reclaim(10000000u);
    cupool__layers_trim(); /* the graph cache */
    return first;
}
