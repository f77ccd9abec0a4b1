/* SPDX-License-Identifier: MIT */
/*
 * Statistics, trim and close of the graph cache, DOT output, and the graph layer's hooks.
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

/* The checks both statistics calls make before reading anything: CUDA_SUCCESS or the error
 * they return (fn: the caller's name, for the message). */
static CUresult stats_call_check(const char *fn, const cupool_graph_stats_t *out)
{
    if (cupool__forked()) /* the cache lock may be held by a parent's thread */
        return cupool__enter();
    if (!out)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: stats is NULL", fn);
    if (cupool__stats_size(out) < CUPOOL_GRAPH_STATS_SIZE_V1)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "%s: stats->size is %zu, below the %zu bytes of the first "
                            "cupool_graph_stats_t (set it to sizeof)",
                            fn, cupool__stats_size(out), (size_t)CUPOOL_GRAPH_STATS_SIZE_V1);
    return CUDA_SUCCESS;
}

CUresult cupool_graph_stats_get(cupool_graph_stats_t *out)
{
    CUresult r = stats_call_check("cupool_graph_stats_get", out);
    if (r != CUDA_SUCCESS)
        return r;
    cupool_graph_stats_t full, *stats = &full; /* filled whole, then the caller's prefix */
    memset(stats, 0, sizeof(*stats));
    stats->eager_launches = atomic_load_explicit(&cupool__st_eager, CUPOOL_RELAXED);
    uint64_t fast = 0, updates = 0, nodes = 0, compared = 0; /* counted by each thread */
    for (const struct cupool__tcache *tc = cupool__tcaches(); tc; tc = cupool__tc_next(tc)) {
        for (int d = 0; d < CUPOOL_GDEV_SLOTS; d++) { /* kept per device */
            fast += atomic_load_explicit(&tc->graph_hits[d], CUPOOL_RELAXED);
            updates += atomic_load_explicit(&tc->graph_updates[d], CUPOOL_RELAXED);
            nodes += atomic_load_explicit(&tc->graph_nodes_updated[d], CUPOOL_RELAXED);
        }
        compared += atomic_load_explicit(&tc->graph_compared, CUPOOL_RELAXED);
    }
    stats->claims_lock_free = fast;
    stats->nodes_compared = compared + atomic_load_explicit(&cupool__st_compared, CUPOOL_RELAXED);
    pthread_mutex_lock(&cupool__cache_lock);
    stats->launches = cupool__st_launches + fast;
    stats->claims_locked = cupool__st_launches;
    stats->hits = cupool__st_hits + fast;
    stats->misses = cupool__st_misses;
    stats->instantiations = atomic_load_explicit(&cupool__st_inst, CUPOOL_RELAXED);
    stats->updates = updates + atomic_load_explicit(&cupool__st_updates, CUPOOL_RELAXED);
    stats->nodes_updated = nodes + atomic_load_explicit(&cupool__st_nodes_updated, CUPOOL_RELAXED);
    stats->update_failures = atomic_load_explicit(&cupool__st_update_failures, CUPOOL_RELAXED);
    stats->evictions = cupool__st_evictions;
    stats->entries = cupool__cache_entries;
    stats->execs = cupool__cache_execs;
    stats->bytes = cupool__cache_bytes;
    pthread_mutex_unlock(&cupool__cache_lock);
    stats->uploads = atomic_load_explicit(&cupool__st_uploads, CUPOOL_RELAXED);
    uint64_t *reason[UR_COUNT] = {
        [UR_TOPOLOGY_CHANGED] = &stats->update_topology_changed,
        [UR_NODE_TYPE_CHANGED] = &stats->update_node_type_changed,
        [UR_FUNCTION_CHANGED] = &stats->update_function_changed,
        [UR_PARAMETERS_CHANGED] = &stats->update_parameters_changed,
        [UR_NOT_SUPPORTED] = &stats->update_not_supported,
        [UR_UNSUPPORTED_FUNCTION_CHANGE] = &stats->update_unsupported_function_change,
        [UR_ATTRIBUTES_CHANGED] = &stats->update_attributes_changed,
        [UR_OTHER] = &stats->update_other,
    };
    for (int k = 0; k < UR_COUNT; k++)
        *reason[k] = atomic_load_explicit(&cupool__st_update_reason[k], CUPOOL_RELAXED);
    stats->node_update_refusals = atomic_load_explicit(&cupool__st_node_refusals, CUPOOL_RELAXED);
    stats->update_errors = atomic_load_explicit(&cupool__st_update_errors, CUPOOL_RELAXED);
    cupool__stats_put(out, stats, sizeof(*stats));
    return CUDA_SUCCESS;
}

CUresult cupool_graph_stats_device_get(int device, cupool_graph_stats_t *out)
{
    CUresult r = stats_call_check("cupool_graph_stats_device_get", out);
    if (r != CUDA_SUCCESS)
        return r;
    if (device < 0 || device >= CUPOOL_STATS_DEVICES)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_graph_stats_device_get: device %d is not an ordinal from 0 "
                            "to %d (CUPOOL_STATS_DEVICES - 1)",
                            device, CUPOOL_STATS_DEVICES - 1);
    cupool_graph_stats_t full, *stats = &full; /* filled whole, then the caller's prefix */
    memset(stats, 0, sizeof(*stats));
    uint64_t fast = 0, updates = 0, nodes = 0; /* counted by each thread */
    for (const struct cupool__tcache *tc = cupool__tcaches(); tc; tc = cupool__tc_next(tc)) {
        fast += atomic_load_explicit(&tc->graph_hits[device], CUPOOL_RELAXED);
        updates += atomic_load_explicit(&tc->graph_updates[device], CUPOOL_RELAXED);
        nodes += atomic_load_explicit(&tc->graph_nodes_updated[device], CUPOOL_RELAXED);
    }
    struct cupool__gdev_stats *d = &cupool__st_dev[device];
    stats->claims_lock_free = fast;
    pthread_mutex_lock(&cupool__cache_lock);
    stats->launches = d->launches + fast;
    stats->claims_locked = d->launches;
    stats->hits = d->hits + fast;
    stats->misses = d->misses;
    stats->evictions = d->evictions;
    stats->entries = d->entries;
    stats->execs = d->execs;
    stats->bytes = d->bytes;
    pthread_mutex_unlock(&cupool__cache_lock);
    stats->instantiations = atomic_load_explicit(&d->inst, CUPOOL_RELAXED);
    stats->updates = updates + atomic_load_explicit(&d->updates, CUPOOL_RELAXED);
    stats->nodes_updated = nodes + atomic_load_explicit(&d->nodes_updated, CUPOOL_RELAXED);
    cupool__stats_put(out, stats, sizeof(*stats));
    return CUDA_SUCCESS;
}

/* Destroys every cached graph while the driver answers (unload, exit with
 * CUPOOL_DESTROY_ON_EXIT); the caller is the closer. */
void cupool__graph_cache_close(bool all_threads)
{
    pthread_mutex_lock(&cupool__cache_lock);
    struct gentry *e = cupool__entries_head;
    while (e) {
        struct gentry *next = e->next;
        if (all_threads) { /* unload: no launch can be running */
            cupool__entry_unlink(e);
            cupool__entry_free(e);
        } else {
            cupool__entry_evict(e); /* exit: other threads may be launching: not theirs */
        }
        e = next;
    }
    pthread_mutex_unlock(&cupool__cache_lock);
    cupool__graves_reap(true);
    cupool__setters_trim(true);
}

/* cupool_trim(): drops every cached graph not in use right now, and forgets kernel layouts
 * (a module may have been unloaded). */
void cupool__graph_cache_trim(void)
{
    cupool__fn_table_trim();
    pthread_mutex_lock(&cupool__cache_lock);
    struct gentry *e = cupool__entries_head;
    while (e) {
        struct gentry *next = e->next;
        cupool__entry_evict(e);
        e = next;
    }
    pthread_mutex_unlock(&cupool__cache_lock);
    cupool__graves_reap(true); /* everything buried, now (trim may wait) */
    cupool__setters_trim(false); /* the setter modules no entry uses any more */
    pthread_mutex_lock(&cupool__cache_lock);
    /* free structs back to the allocator, once no lock-free claim can be touching one: the
     * epoch moves on (every thread's hint is stale from now on), then a grace period lets
     * claims that read the old epoch finish */
    struct gentry *fe = cupool__free_entries;
    struct gexec *fx = cupool__free_execs;
    cupool__free_entries = NULL;
    cupool__free_execs = NULL;
    if (fe || fx)
        atomic_fetch_add(&cupool__cache_epoch.v, 1);
    pthread_mutex_unlock(&cupool__cache_lock);
    if (!fe && !fx)
        return;
    if (cupool__synchronize(10000000u)) {
        while (fe) {
            struct gentry *next = fe->free_next;
            cupool__free(fe, sizeof(*fe));
            fe = next;
        }
        while (fx) {
            struct gexec *next = fx->free_next;
            cupool__free(fx, sizeof(*fx));
            fx = next;
        }
        return;
    }
    pthread_mutex_lock(&cupool__cache_lock); /* not shown now: kept for a later trim */
    while (fe) {
        struct gentry *next = fe->free_next;
        cupool__entry_struct_put(fe);
        fe = next;
    }
    while (fx) {
        struct gexec *next = fx->free_next;
        cupool__exec_struct_put(fx);
        fx = next;
    }
    pthread_mutex_unlock(&cupool__cache_lock);
}

CUresult cupool_pipeline_dot(cupool_pipeline_t pipeline, const char *path)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || !path || p->n == 0)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_dot: %s",
                            !p ? "not a pipeline" : !path ? "path is NULL" : "no nodes");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!cupool__drv.cuGraphDebugDotPrint)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED, "the driver has no cuGraphDebugDotPrint");
    unsigned long long ctx_id;
    r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &ctx_id));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cupool_pipeline_dot: no usable current context");
    uint64_t hash;
    size_t nsig = cupool__signature(p, &hash);
    if (!nsig)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline signature");
    /* p->sig now holds this structure, not the last launch's: forget the last launch's */
    p->sig_dirty = true;
    p->last_nsig = 0;
    p->last_entry = NULL;
    p->last_exec = NULL;
    pthread_mutex_lock(&cupool__cache_lock);
    struct gentry *e = cupool__lookup(hash, ctx_id, p->sig, nsig);
    if (e) /* held busy so it is not evicted while printing */
        atomic_fetch_add(&e->busy, 1);
    pthread_mutex_unlock(&cupool__cache_lock);
    if (!e)
        return cupool__fail(CUDA_ERROR_NOT_FOUND,
                            "cupool_pipeline_dot: no cached graph for this pipeline's structure "
                            "(launch it first)");
    if (e->ncond) {
        /* no template: a graph built for the print (never instantiated), then destroyed */
        CUgraph g = NULL;
        CUgraphNode *nodes = NULL;
        CUgraphConditionalHandle *handles = NULL;
        r = cupool__argv_room(p) ? cupool__exec_graph_new(e, p, &g, &nodes, &handles)
                                 : CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS) {
            r = CUPOOL_DRV(
                cupool__drv.cuGraphDebugDotPrint(g, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
            cupool__exec_graph_free(e, g, nodes, handles, e->n);
        }
    } else {
        pthread_mutex_lock(&cupool__template_lock);
        r = CUPOOL_DRV(
            cupool__drv.cuGraphDebugDotPrint(e->graph, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
        pthread_mutex_unlock(&cupool__template_lock);
    }
    atomic_fetch_sub(&e->busy, 1);
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGraphDebugDotPrint(%s) failed", path);
    return CUDA_SUCCESS;
}
