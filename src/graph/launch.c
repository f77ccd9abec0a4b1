/* SPDX-License-Identifier: MIT */
/*
 * Launching: the claim (a thread's hints, then the cache), the exec's launch and release,
 * cupool_pipeline_launch and cupool_capture_launch.
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

/* ---- steps shared by pipeline and capture launches ---- */

/* Finds the entry of a launch (`known`, the entry of this signature seen at cache epoch
 * *epoch, while the epoch holds; else a lookup), counts the launch, and claims an exec for
 * stream (NULL: a new one is needed; the entry is then held busy). *epoch gets the cache's
 * epoch now. */
static struct gentry *entry_claim(struct gentry *known, uint64_t hash, unsigned long long ctx_id,
                                  const uint64_t *sig, size_t nsig, CUstream stream,
                                  struct gexec **x, uint64_t *epoch)
{
    pthread_mutex_lock(&cupool__cache_lock);
    cupool__st_launches++;
    uint64_t now = atomic_load(&cupool__cache_epoch.v);
    struct gentry *e = known && *epoch == now ? known : cupool__lookup(hash, ctx_id, sig, nsig);
    *x = NULL;
    if (e) {
        cupool__st_hits++;
        cupool__st_dev[e->dev].launches++;
        cupool__st_dev[e->dev].hits++;
        entry_touch(e);
        atomic_fetch_add(&e->busy, 1);
        *x = cupool__exec_pick(e, stream);
    } else {
        cupool__st_misses++; /* in its device's counters once the miss knows its device */
    }
    *epoch = now;
    pthread_mutex_unlock(&cupool__cache_lock);
    return e;
}

/* One lock-free claim through hint h (see fast_claim): the exec is owned, the cache epoch then
 * shown unchanged (a Dekker handshake with entry_evict(), which moves the epoch on before it
 * owns an entry's execs), and the exec shown to be the same by its serial. Owning one of its
 * execs keeps the entry from being evicted, so the entry is not pinned. The entry's key
 * (context, signature words sig[0 .. nsig-1]) is compared once the exec is held, unless the
 * entry is `known` (the entry of this signature as of cache epoch known_epoch, a pipeline's
 * last launch) and the hint's is as of the same epoch. With `any` (the thread's any-stream
 * hint), the exec may have run last on another stream: it is taken only from an entry sharing
 * execs among streams (at CUPOOL_GRAPH_EXECS_MAX, where every launch records its completion)
 * and once its last launch's completion event says it finished (cuEventQuery, after the read
 * section: the owned exec cannot be freed), so two streams never run it at once. True with
 * the exec owned; false with nothing held. */
static inline __attribute__((always_inline)) bool
hint_claim(struct cupool__tcache *tc, const struct ghint *s, bool any, const struct gentry *known,
           uint64_t known_epoch, unsigned long long ctx_id, const uint64_t *sig, size_t nsig,
           CUstream stream)
{
    struct gentry *e = s->entry;
    bool trusted = known == e && known_epoch == s->epoch;
    /* the entry and exec may be free structs now: touched only inside a read section, so
     * cupool_trim() returns free structs to the allocator only once no claim is inside one */
    cupool__read_enter(cupool__th(tc));
    /* the hint may outlive its structs: cupool_trim() moves the epoch on before it frees any */
    struct gexec *c = s->exec;
    bool got = atomic_load_explicit(&cupool__cache_epoch.v, CUPOOL_RELAXED) == s->epoch &&
               exec_own(c);
    bool query = false;
    if (got) {
        /* owned, then the epoch: an eviction of e that began before the claim shows here;
         * one that begins after it finds the exec owned and gives up. With the epoch
         * unchanged since the hint was taken, e was never freed; with the serial, c is
         * still the exec of e that this hint saw. */
        got = atomic_load(&cupool__cache_epoch.v) == s->epoch && c->entry == e &&
              c->serial == s->serial && c->launched &&
              (trusted || (e->ctx_id == ctx_id && e->nsig == nsig &&
                           memcmp(e->sig, sig, nsig * sizeof(*sig)) == 0));
        if (got && c->last_stream != stream) {
            got = any && atomic_load_explicit(&e->multi_stream, CUPOOL_RELAXED) &&
                  c->done_valid && c->exec != NULL;
            query = got;
        }
        if (!got)
            exec_disown(c);
    }
    cupool__read_leave(cupool__th(tc));
    if (query && CUPOOL_DRV(cupool__drv.cuEventQuery(c->done)) != CUDA_SUCCESS) {
        exec_disown(c);
        return false; /* running still (or the query failed): the locked path decides */
    }
    return got;
}

/* A lock-free claim of an exec of e made: e stamped as just used, the hit counted. */
static inline void claim_counted(struct cupool__tcache *tc, struct gentry *e)
{
    entry_touch(e);
    cupool__counter_inc(&tc->graph_hits[e->dev]);
}

/* The lock-free claim of a repeat launch (see the top of this file): through the thread's
 * hint for `hash` on `stream` (the exec it launched there last), else, for an entry sharing
 * execs among streams, through its any-stream hint for `hash` (the exec it launched last of
 * the signature, on whichever stream), once that exec's last launch has finished. A service
 * that launches each request on a stream of a pool meets a new stream nearly every time: the
 * second way keeps its repeat launches off the cache lock once the entry has reached
 * CUPOOL_GRAPH_EXECS_MAX. Returns the entry, unpinned, with *x owned and *epoch the epoch it
 * was found at, or NULL (then nothing is held) for the locked path. */
static inline __attribute__((always_inline)) struct gentry *
fast_claim(struct cupool__tcache *tc, uint64_t hash, const struct gentry *known,
           uint64_t known_epoch, unsigned long long ctx_id, const uint64_t *sig, size_t nsig,
           CUstream stream, struct gexec **x, uint64_t *epoch)
{
    struct cupool__ghints *t = tc->ghints;
    if (!t || stream == CU_STREAM_PER_THREAD)
        return NULL;
    struct ghint *s = hint_find(t, hash, stream);
    if (!s || !hint_claim(tc, s, false, known, known_epoch, ctx_id, sig, nsig, stream)) {
        s = hint_find(t, hash, HINT_ANY_STREAM);
        if (!s || !hint_claim(tc, s, true, known, known_epoch, ctx_id, sig, nsig, stream))
            return NULL;
    }
    struct gentry *e = s->entry;
    claim_counted(tc, e);
    *x = s->exec;
    *epoch = s->epoch;
    return e;
}

/* Caches a new entry (or, if another thread cached the same key meanwhile, frees it and uses
 * that one, handing its graph to *graph when graph is not NULL) and claims an exec. Counts the
 * miss that made it in its device's counters. */
static struct gentry *entry_publish(struct gentry *fresh, CUstream stream, CUgraph *graph,
                                    struct gexec **x, uint64_t *epoch)
{
    pthread_mutex_lock(&cupool__cache_lock);
    size_t bytes = fresh->bytes + cupool__exec_bytes(fresh, fresh->execs[0]);
    cupool__cache_entries++;
    cupool__cache_bytes += bytes;
    cupool__cache_execs++;
    struct cupool__gdev_stats *d = &cupool__st_dev[fresh->dev];
    d->launches++;
    d->misses++;
    d->entries++;
    d->bytes += bytes;
    d->execs++;
    struct gentry *e = cupool__lookup(fresh->hash, fresh->ctx_id, fresh->sig, fresh->nsig);
    atomic_fetch_add(&(e ? e : fresh)->busy, 1);
    if (!e) {
        e = fresh;
        e->hnext = cupool__buckets[e->hash % BUCKETS];
        cupool__buckets[e->hash % BUCKETS] = e;
        cupool__list_push(e);
        e->published = true;
        *x = e->execs[0]; /* owned since its instantiation */
    } else {
        if (graph) {
            *graph = fresh->graph;
            fresh->graph = NULL;
        }
        cupool__entry_free(fresh);
        *x = cupool__exec_pick(e, stream);
    }
    entry_touch(e);
    cupool__evict(); /* never this entry: it is busy */
    *epoch = atomic_load(&cupool__cache_epoch.v);
    pthread_mutex_unlock(&cupool__cache_lock);
    return e;
}

/* A new exec for a launch that found none free (of graph, or of e's template graph), busy;
 * *one_off when the entry is at CUPOOL_GRAPH_EXECS_MAX (then used once and destroyed). On
 * failure the entry is released. */
static CUresult exec_add(struct gentry *e, CUgraph graph, struct cupool_pipeline *p,
                         CUstream stream, struct gexec **x, bool *one_off)
{
    CUresult r = cupool__exec_new_of(e, graph, p, &stream, x);
    pthread_mutex_lock(&cupool__cache_lock);
    /* a place exec_pick reserved (this launch's, or one another launch will not need now) */
    bool place = e->npending > 0 && e->nexecs < execs_max();
    if (e->npending > 0)
        e->npending--;
    if (r == CUDA_SUCCESS) {
        size_t bytes = cupool__exec_bytes(e, *x);
        cupool__cache_bytes += bytes;
        cupool__cache_execs++;
        cupool__st_dev[e->dev].bytes += bytes;
        cupool__st_dev[e->dev].execs++;
        *one_off = !place;
        if (place)
            e->execs[e->nexecs++] = *x;
    } else {
        atomic_fetch_sub(&e->busy, 1);
    }
    pthread_mutex_unlock(&cupool__cache_lock);
    return r;
}

/* Gives back a place exec_pick reserved for a launch that ends before exec_add. */
static void exec_unreserve(struct gentry *e)
{
    pthread_mutex_lock(&cupool__cache_lock);
    if (e->npending > 0)
        e->npending--;
    pthread_mutex_unlock(&cupool__cache_lock);
}

/* Launches x on stream and, for an entry serving several streams, records its completion.
 * *recorded says whether the completion event now stands for this launch. */
static inline CUresult exec_launch(struct gentry *e, struct gexec *x, CUstream stream,
                                   bool *recorded)
{
    *recorded = false;
    _Atomic uint32_t *gate = gate_enter();
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphLaunch(x->exec, stream));
    if (r == CUDA_SUCCESS && atomic_load_explicit(&e->multi_stream, CUPOOL_RELAXED)) {
        if (!x->done)
            CUPOOL_DRV(cupool__drv.cuEventCreate(&x->done, CU_EVENT_DISABLE_TIMING));
        *recorded =
            x->done && CUPOOL_DRV(cupool__drv.cuEventRecord(x->done, stream)) == CUDA_SUCCESS;
    }
    gate_leave(gate);
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGraphLaunch failed");
    return CUDA_SUCCESS;
}

/* Node parameters a launch compared with its exec's: this thread's counter. */
_Atomic uint64_t cupool__st_compared; /* of threads without a cache */
static inline void count_compared(uint64_t n)
{
    if (!n)
        return;
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL))
        cupool__counter_add(&tc->graph_compared, n);
    else
        atomic_fetch_add_explicit(&cupool__st_compared, n, CUPOOL_RELAXED);
}

/* Counts what a launch of an entry of device slot dev did. */
static void count_launch(uint8_t dev, uint64_t inst, uint64_t failures, uint64_t updated)
{
    if (inst) {
        atomic_fetch_add_explicit(&cupool__st_inst, inst, CUPOOL_RELAXED);
        atomic_fetch_add_explicit(&cupool__st_dev[dev].inst, inst, CUPOOL_RELAXED);
    }
    if (failures)
        atomic_fetch_add_explicit(&cupool__st_update_failures, failures, CUPOOL_RELAXED);
    if (updated) {
        struct cupool__tcache *tc = cupool__tl; /* the thread's own counters: no shared write */
        if (CUPOOL_LIKELY(tc != NULL)) {
            cupool__counter_add(&tc->graph_updates[dev], 1);
            cupool__counter_add(&tc->graph_nodes_updated[dev], updated);
        } else {
            atomic_fetch_add_explicit(&cupool__st_updates, 1, CUPOOL_RELAXED);
            atomic_fetch_add_explicit(&cupool__st_nodes_updated, updated, CUPOOL_RELAXED);
            atomic_fetch_add_explicit(&cupool__st_dev[dev].updates, 1, CUPOOL_RELAXED);
            atomic_fetch_add_explicit(&cupool__st_dev[dev].nodes_updated, updated,
                                      CUPOOL_RELAXED);
        }
    }
}

/* Releases an exec after a launch: it stays in its entry (keep) or is dropped; and the
 * entry, when the launch pinned it (entry_claim; fast_claim does not). */
static void exec_drop(struct gentry *e, struct gexec *x, CUstream stream, bool launched,
                      bool recorded, bool pinned);

static inline void exec_done(struct gentry *e, struct gexec *x, bool keep, CUstream stream,
                             bool launched, bool recorded, bool pinned)
{
    if (CUPOOL_LIKELY(keep)) {
        /* the next picker reads these after seeing busy clear (release / acquire) */
        x->launched = launched || x->launched;
        if (launched)
            x->last_stream = stream;
        x->done_valid = recorded;
        exec_disown(x);
        if (pinned)
            atomic_fetch_sub(&e->busy, 1);
        return;
    }
    exec_drop(e, x, stream, launched, recorded, pinned);
}

/* exec_done's exec that is not kept: dropped from its entry and freed (to the graveyard while
 * its launch may run). */
static __attribute__((noinline)) void exec_drop(struct gentry *e, struct gexec *x,
                                                CUstream stream, bool launched, bool recorded,
                                                bool pinned)
{
    if (x->exec) {
        /* dropped with its launch queued: record its completion so the graveyard knows when
         * to destroy it */
        if (launched && !recorded) {
            _Atomic uint32_t *gate = gate_enter();
            if (!x->done)
                CUPOOL_DRV(cupool__drv.cuEventCreate(&x->done, CU_EVENT_DISABLE_TIMING));
            recorded =
                x->done && CUPOOL_DRV(cupool__drv.cuEventRecord(x->done, stream)) == CUDA_SUCCESS;
            gate_leave(gate);
        }
        x->done_valid = launched ? recorded : x->done_valid;
    }
    pthread_mutex_lock(&cupool__cache_lock);
    for (int i = 0; i < e->nexecs; i++)
        if (e->execs[i] == x) {
            e->execs[i] = e->execs[--e->nexecs];
            break;
        }
    cupool__exec_free(e, x, true);
    if (pinned)
        atomic_fetch_sub(&e->busy, 1);
    cupool__evict();
    pthread_mutex_unlock(&cupool__cache_lock);
}

/* ---- the launch: one routine for pipelines and captures ---- */

#define CAPTURE_TAG UINT64_C(0xCA97C0DE00000000)

/* Runs fn under thread-local capture on stream (of context ctx); *graph gets the result. */
static CUresult capture(CUstream stream, cupool_capture_fn fn, void *user, CUcontext ctx,
                        unsigned long long ctx_id, CUgraph *graph)
{
    CUresult r = CUPOOL_DRV(
        cupool__drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuStreamBeginCapture failed");
    CUresult user_r = fn(stream, user);
    *graph = NULL;
    r = CUPOOL_DRV(cupool__drv.cuStreamEndCapture(stream, graph));
    /* Never leave the caller's stream capturing: while the driver says it still is (or cannot
     * say), end the capture again, keeping nothing of it. A few tries: a passing error may
     * hit either call more than once. */
    for (int tries = 0; r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED && tries < 4; tries++) {
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        CUresult q = CUPOOL_DRV(cupool__drv.cuStreamIsCapturing(stream, &cs));
        if (q == CUDA_SUCCESS && cs == CU_STREAM_CAPTURE_STATUS_NONE)
            break;
        if (q == CUDA_ERROR_DEINITIALIZED)
            break;
        CUgraph again = NULL;
        if (CUPOOL_DRV(cupool__drv.cuStreamEndCapture(stream, &again)) == CUDA_SUCCESS ||
            again) {
            cupool__objects_destroy(NULL, again, NULL, ctx, ctx_id);
            if (q == CUDA_SUCCESS)
                break; /* ended now */
        }
    }
    if (user_r != CUDA_SUCCESS || r != CUDA_SUCCESS) {
        cupool__objects_destroy(NULL, *graph, NULL, ctx, ctx_id);
        *graph = NULL;
        if (user_r != CUDA_SUCCESS)
            return cupool__fail(user_r, "the captured function failed");
        return cupool__fail(r, "cuStreamEndCapture failed (capture invalidated?)");
    }
    return CUDA_SUCCESS;
}

/* What one launch through the cache is made of: the signature and its context, the last
 * launch's entry, and either a pipeline's description or a capture's function; and what the
 * launch counted. */
struct launch_src {
    uint64_t hash;
    const uint64_t *sig;
    size_t nsig;
    unsigned long long ctx_id;
    CUcontext ctx;        /* the current context (a pipeline asks for it only on a miss) */
    struct gentry *known; /* the entry the last launch used, while `epoch` holds */
    uint64_t epoch;
    /* a pipeline's launch (NULL for a capture). dirty: its description differs from the
     * last launch's; same: its structure is the last launch's */
    struct cupool_pipeline *p;
    bool dirty, same;
    /* a capture's: its function, and the graph captured on this call (NULL: none) */
    cupool_capture_fn fn;
    void *user;
    unsigned int flags;
    CUgraph fresh;
    uint64_t inst, failures, updated, compared;
    bool unchanged, patched; /* the exec held the pipeline's parameters already, or the
                                update brought its snapshot up to date */
};

/* The device slot of a miss's entry: the current context's device (the launch's context,
 * whose id keys the entry), asked once per entry; CUPOOL_GDEV_UNKNOWN when the driver does not
 * say or the ordinal has no slot of its own. */
static uint8_t miss_device(void)
{
    CUdevice dev = -1;
    if (!cupool__drv.cuCtxGetDevice ||
        CUPOOL_DRV(cupool__drv.cuCtxGetDevice(&dev)) != CUDA_SUCCESS || dev < 0 ||
        dev >= CUPOOL_STATS_DEVICES)
        return CUPOOL_GDEV_UNKNOWN;
    return (uint8_t)dev;
}

/* A miss that published no entry (its entry failed to build): counted in its device's
 * counters all the same, as the whole cache's counted it (entry_claim). */
static void miss_unpublished(uint8_t dev)
{
    pthread_mutex_lock(&cupool__cache_lock);
    cupool__st_dev[dev].launches++;
    cupool__st_dev[dev].misses++;
    pthread_mutex_unlock(&cupool__cache_lock);
}

/* A miss: a new entry for the signature, published, and this launch's claim on it (*x: an
 * exec of it, or NULL when none is free). A pipeline builds the entry's template from its
 * description; a capture runs its function under capture. */
static CUresult src_entry_new(struct launch_src *s, CUstream stream, struct gentry **e,
                              struct gexec **x)
{
    CUresult r;
    if (s->p) {
        if (!s->ctx && (r = CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&s->ctx))) != CUDA_SUCCESS) {
            miss_unpublished(CUPOOL_GDEV_UNKNOWN);
            return cupool__fail(r, "cuCtxGetCurrent failed");
        }
        uint8_t dev = miss_device();
        struct gentry *fresh = NULL;
        r = cupool__entry_new(s->p, s->hash, s->nsig, s->ctx_id, s->ctx, dev, &stream, &fresh);
        if (r != CUDA_SUCCESS) {
            miss_unpublished(dev);
            return r;
        }
        s->inst++;
        *e = entry_publish(fresh, stream, NULL, x, &s->epoch);
        return CUDA_SUCCESS;
    }
    uint8_t dev = miss_device();
    CUgraph graph = NULL;
    r = capture(stream, s->fn, s->user, s->ctx, s->ctx_id, &graph);
    if (r != CUDA_SUCCESS) {
        miss_unpublished(dev);
        return r;
    }
    struct gentry *ne = cupool__entry_struct_get();
    uint64_t *nsig = cupool__alloc(s->nsig * sizeof(*nsig));
    struct gexec *nx = NULL;
    if (ne && nsig) {
        ne->hash = s->hash;
        ne->ctx_id = s->ctx_id;
        ne->ctx = s->ctx;
        ne->dev = dev;
        ne->sig = nsig;
        memcpy(nsig, s->sig, s->nsig * sizeof(*nsig));
        ne->nsig = s->nsig;
        ne->captured = true;
        ne->graph = graph;
        r = cupool__exec_new(ne, &stream, &nx);
    } else {
        r = cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph cache entry");
    }
    if (r != CUDA_SUCCESS) {
        cupool__objects_destroy(NULL, graph, NULL, s->ctx, s->ctx_id);
        cupool__free(nsig, s->nsig * sizeof(*nsig));
        if (ne)
            cupool__entry_struct_put_locked(ne);
        miss_unpublished(dev);
        return r;
    }
    s->inst++;
    ne->execs[0] = nx;
    ne->nexecs = 1;
    ne->bytes = sizeof(*ne) + s->nsig * sizeof(*nsig) + 16 * DRIVER_BYTES_PER_NODE;
    /* if another thread cached this key meanwhile, CUPOOL_CAPTURE_UPDATE still updates the
     * exec this call gets with this call's capture (the graph comes back in s->fresh) */
    *e = entry_publish(ne, stream, (s->flags & CUPOOL_CAPTURE_UPDATE) ? &s->fresh : NULL, x,
                       &s->epoch);
    return CUDA_SUCCESS;
}

/* A pipeline's exec that the driver would not update (on the H200 an event node whose event
 * was destroyed since is refused): instantiated afresh, from a fresh clone (the old one has
 * a launched exec, see exec_new_of) carrying this launch's parameters. */
static CUresult exec_rebuild(struct launch_src *s, struct gentry *e, struct gexec *x,
                             CUstream stream)
{
    cupool__objects_destroy(x->exec, NULL, NULL, e->ctx, e->ctx_id); /* its launches run on */
    x->exec = NULL;
    CUgraph clone = NULL;
    CUgraphNode *nodes = NULL;
    CUresult r;
    if (e->ncond) { /* a graph of its own again, from this launch's description */
        CUgraphConditionalHandle *handles = NULL;
        r = cupool__exec_graph_new(e, s->p, &clone, &nodes, &handles);
        if (r == CUDA_SUCCESS) {
            cupool__exec_graph_free(e, x->graph, x->nodes, x->handles, x->nnodes);
            x->graph = clone;
            x->nodes = nodes;
            x->handles = handles;
            x->nnodes = e->n;
            r = cupool__instantiate_gated(&x->exec, x->graph, e->inst_flags, &stream);
        }
    } else if ((r = cupool__template_clone(e, &clone, &nodes)) == CUDA_SUCCESS) {
        cupool__objects_destroy(NULL, x->graph, NULL, e->ctx, e->ctx_id);
        cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
        x->graph = clone;
        x->nodes = nodes;
        x->nnodes = e->n;
        r = cupool__clone_take_params(e, x, s->p);
        if (r == CUDA_SUCCESS)
            r = cupool__instantiate_gated(&x->exec, x->graph, e->inst_flags, &stream);
    }
    s->inst++;
    s->updated = 0;
    s->unchanged = s->patched = false; /* the snapshot records this launch's parameters */
    x->snap_owner = NULL;
    x->launched = false;
    if (r != CUDA_SUCCESS)
        x->exec = NULL;
    return r;
}

/* ---- precise updates: what a refused update says, and whether instantiating cures it ---- */

/* The names of cuGraphExecUpdate's results, for messages. */
static const char *update_result_name(CUgraphExecUpdateResult why)
{
    switch ((int)why) {
    case CU_GRAPH_EXEC_UPDATE_SUCCESS: return "CU_GRAPH_EXEC_UPDATE_SUCCESS";
    case CU_GRAPH_EXEC_UPDATE_ERROR: return "CU_GRAPH_EXEC_UPDATE_ERROR";
    case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: return "TOPOLOGY_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: return "NODE_TYPE_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED: return "FUNCTION_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: return "PARAMETERS_CHANGED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: return "NOT_SUPPORTED";
    case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
        return "UNSUPPORTED_FUNCTION_CHANGE";
    case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: return "ATTRIBUTES_CHANGED";
    default: return "a result unknown to this cupool";
    }
}

/* Counts a refused cuGraphExecUpdate (r: what it returned) by the reason its result info
 * gives: each CU_GRAPH_EXEC_UPDATE_ERROR_* reason its own counter; CU_GRAPH_EXEC_UPDATE_ERROR,
 * a result unknown here, or the call failing with an error other than
 * CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE in "other". */
static void count_update_refusal(CUresult r, CUgraphExecUpdateResult why)
{
    int k = UR_OTHER;
    if (r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE &&
        (int)why >= (int)CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED &&
        (int)why <= (int)CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED)
        k = UR_TOPOLOGY_CHANGED + ((int)why - (int)CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    atomic_fetch_add_explicit(&cupool__st_update_reason[k], 1, CUPOOL_RELAXED);
}

/* Does instantiating afresh cure an update the driver refused with r? Yes when the driver
 * said the update itself is not possible: CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE (whatever the
 * reason: a new exec of the new graph has no old one to match), CUDA_ERROR_INVALID_VALUE (a
 * node update refused: an event destroyed since, a shape the node cannot take) and
 * CUDA_ERROR_NOT_SUPPORTED. No for anything else: a context destroyed or broken by a sticky
 * error, the driver gone or torn down, memory exhausted: an instantiation would fail the
 * same way, or on a context that can run nothing, so the launch returns the error instead. */
static bool refusal_curable(CUresult r)
{
    return r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE || r == CUDA_ERROR_INVALID_VALUE ||
           r == CUDA_ERROR_NOT_SUPPORTED;
}

/* A capture's exec, with CUPOOL_CAPTURE_UPDATE on a hit: patched with the new capture. A
 * refusal is counted by the reason cuGraphExecUpdate's result info gives; an update the
 * driver accepts although a kernel's launch attribute that it does not update in place
 * changed (graph_fingerprint; the H200 accepted a changed cluster dimension and kept the old
 * one) is refused by cupool itself, counted as ATTRIBUTES_CHANGED (asking the driver first
 * lets a changed topology or node type be counted as what it is). A refusal that
 * instantiating cures (refusal_curable) instantiates the new capture in the exec's place;
 * any other leaves the exec as it was and is the launch's error (*uncured). */
static CUresult exec_recapture(struct launch_src *s, struct gexec *x, CUstream stream,
                               bool *uncured)
{
    uint32_t *fp = NULL;
    size_t nfp = 0;
    bool fp_known = cupool__graph_fingerprint(s->fresh, &fp, &nfp);
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof(info));
    info.result = CU_GRAPH_EXEC_UPDATE_ERROR;
    _Atomic uint32_t *gate = gate_enter();
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphExecUpdate(x->exec, s->fresh, &info));
    gate_leave(gate);
    if (r == CUDA_SUCCESS && !cupool__fp_same(x, fp, nfp, fp_known)) {
        r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE; /* the exec is instantiated afresh below */
        info.result = CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED;
    }
    if (r == CUDA_SUCCESS) {
        atomic_fetch_add_explicit(&cupool__st_updates, 1, CUPOOL_RELAXED);
        atomic_fetch_add_explicit(&cupool__st_dev[x->entry->dev].updates, 1, CUPOOL_RELAXED);
        cupool__free(fp, nfp * sizeof(*fp));
        return CUDA_SUCCESS;
    }
    count_update_refusal(r, info.result);
    if (!refusal_curable(r)) {
        cupool__free(fp, nfp * sizeof(*fp));
        atomic_fetch_add_explicit(&cupool__st_update_errors, 1, CUPOOL_RELAXED);
        *uncured = true;
        return cupool__fail(r, "cuGraphExecUpdate of capture key 0x%llx failed (%s), which a new "
                               "instantiation would not cure: nothing launched, the cached exec "
                               "left as it was",
                            (unsigned long long)s->sig[1], cupool_result_name(r));
    }
    cupool__log(CUPOOL_LOG_DEBUG,
                "capture key 0x%llx: the update was refused (%s, %s%s%s); instantiating the new "
                "capture",
                (unsigned long long)s->sig[1], cupool_result_name(r),
                update_result_name(info.result), info.errorNode ? ", a node named" : "",
                info.errorFromNode ? " with the dependency at fault" : "");
    s->failures++;
    cupool__objects_destroy(x->exec, NULL, NULL, s->ctx, s->ctx_id);
    x->exec = NULL;
    r = cupool__instantiate_gated(&x->exec, s->fresh, 0, &stream);
    s->inst++;
    if (r == CUDA_SUCCESS) {
        cupool__exec_fp_set(x, fp, nfp, fp_known);
    } else {
        x->exec = NULL;
        cupool__free(fp, nfp * sizeof(*fp));
    }
    return r;
}

/* A pipeline's node update the driver refused with `why` (cupool__exec_update): counted; an
 * exec instantiated afresh when that cures it (refusal_curable: exec_rebuild), else the
 * launch's error, with nothing launched (*uncured; the exec, partly updated, is dropped). */
static CUresult node_refused(struct launch_src *s, struct gentry *e, struct gexec *x,
                             CUstream stream, CUresult why, bool *uncured)
{
    atomic_fetch_add_explicit(&cupool__st_node_refusals, 1, CUPOOL_RELAXED);
    if (refusal_curable(why)) {
        cupool__log(CUPOOL_LOG_DEBUG,
                    "a node update of a cached pipeline graph was refused (%s); instantiating "
                    "the exec afresh",
                    cupool_result_name(why));
        s->failures++;
        return exec_rebuild(s, e, x, stream);
    }
    atomic_fetch_add_explicit(&cupool__st_update_errors, 1, CUPOOL_RELAXED);
    *uncured = true;
    return cupool__fail(why, "updating a node of a cached pipeline graph failed (%s), which a new "
                             "instantiation would not cure: nothing launched",
                        cupool_result_name(why));
}

/*
 * The launch through the cache, for a pipeline and a capture alike: claim the signature's
 * entry and an exec of it (the thread's hint without the lock, else the cache); on a miss,
 * a new entry (src_entry_new); without a free exec, a new one; bring the exec up to date
 * (a pipeline's diff, or a capture's update); launch it (a pipeline whose exec is unusable
 * goes node by node); give the exec back, keeping it if it may serve again, and remember it
 * in the thread's hints.
 */
static inline __attribute__((always_inline)) CUresult cache_launch(struct launch_src *s,
                                                                 CUstream stream)
{
    CUresult r = CUDA_SUCCESS;
    struct gexec *x;
    struct cupool__tcache *tc = cupool__tl;
    struct gentry *e = tc ? fast_claim(tc, s->hash, s->known, s->epoch, s->ctx_id, s->sig,
                                       s->nsig, stream, &x, &s->epoch)
                          : NULL;
    bool fast = e != NULL; /* then this thread's hint already names e and x */
    if (!fast)
        e = entry_claim(s->known, s->hash, s->ctx_id, s->sig, s->nsig, stream, &x, &s->epoch);
    if (!e) {
        if ((r = src_entry_new(s, stream, &e, &x)) != CUDA_SUCCESS)
            return r;
    } else if (!s->p && (s->flags & CUPOOL_CAPTURE_UPDATE)) {
        r = capture(stream, s->fn, s->user, s->ctx, s->ctx_id, &s->fresh);
        if (r != CUDA_SUCCESS) {
            if (x) {
                exec_done(e, x, true, stream, false, x->done_valid, !fast);
            } else {
                exec_unreserve(e);
                atomic_fetch_sub(&e->busy, 1);
            }
            return r;
        }
    }
    if (s->p) {
        s->p->last_entry = e;
        s->p->last_epoch = s->epoch;
        s->p->last_ctx_id = s->ctx_id;
    }
    bool one_off = false; /* an exec beyond CUPOOL_GRAPH_EXECS_MAX: used once, then destroyed */
    if (!x) {
        /* read while the launch holds e: a failed exec_add lets it go (to eviction, reuse) */
        uint8_t dev = e->dev;
        /* a capture's new exec comes from this call's capture when there is one */
        r = exec_add(e, s->fresh, s->p, stream, &x, &one_off);
        if (s->fresh) {
            cupool__objects_destroy(NULL, s->fresh, NULL, s->ctx, s->ctx_id);
            s->fresh = NULL; /* no update needed */
        }
        if (r != CUDA_SUCCESS) {
            count_launch(dev, s->inst, 0, 0);
            return r;
        }
        s->inst++;
    }
    bool uncured = false; /* an update refused in a way no instantiation cures */
    if (s->p) {
        /* every repeat launch of an unchanged pipeline: no call */
        if (cupool__exec_holds(x, s->p, s->dirty))
            s->unchanged = true;
        else if ((r = cupool__exec_update(e, x, s->p, s->same, &s->updated, &s->unchanged,
                                          &s->patched, &s->compared)) != CUDA_SUCCESS)
            r = node_refused(s, e, x, stream, r, &uncured);
    } else if (s->fresh) {
        r = exec_recapture(s, x, stream, &uncured);
        cupool__objects_destroy(NULL, s->fresh, NULL, s->ctx, s->ctx_id);
        s->fresh = NULL;
    }
    bool launched = false, recorded = false;
    if (r == CUDA_SUCCESS && x->exec) {
        r = exec_launch(e, x, stream, &recorded);
        launched = r == CUDA_SUCCESS;
    } else if (s->p) {
        /* the exec is unusable: this launch goes node by node, unless the update's error is
         * one no instantiation cures (then it is the launch's) */
        if (!uncured)
            r = cupool__eager_supported() ? cupool__eager_launch(s->p, stream) : r;
        cupool__objects_destroy(x->exec, NULL, NULL, e->ctx, e->ctx_id);
        x->exec = NULL;
    } else if (r != CUDA_SUCCESS && !uncured) {
        cupool__fail(r, "instantiating a captured graph failed");
    }
    bool keep = !one_off && x->exec != NULL;
    if (s->p) {
        /* the exec now holds the pipeline's parameters (unless they were already its own, or
         * the update brought its snapshot up to date) */
        keep = keep && (s->unchanged || s->patched || cupool__snapshot(x, s->p));
        if (keep) {
            x->snap_owner = s->p;
            x->snap_gen = s->dirty ? s->p->gen + 1 : s->p->gen;
        }
        cupool__refill_launched(s->p, s->dirty);
    }
    uint64_t serial = x->serial; /* read while owned */
    if (s->p) {
        s->p->last_exec = keep && launched ? x : NULL;
        s->p->last_serial = serial;
        s->p->last_stream = stream;
    }
    count_launch(e->dev, s->inst, s->failures, s->updated);
    if (s->p)
        count_compared(s->compared);
    /* only an entry sharing execs among streams is claimed through the any-stream hint
     * (fast_claim): no other takes a way of the thread's hints from a stream's hint. Read
     * while the launch holds e: once exec_done lets it go, e may be evicted and freed. */
    bool any_hint = atomic_load_explicit(&e->multi_stream, CUPOOL_RELAXED);
    exec_done(e, x, keep, stream, launched, recorded, !fast);
    if (keep && launched && !fast) {
        cupool__hint_put(s->hash, stream, e, x, serial, s->epoch);
        if (any_hint)
            cupool__hint_put(s->hash, HINT_ANY_STREAM, e, x, serial, s->epoch);
    }
    graves_maybe_reap();
    return r;
}

/*
 * A pipeline's unchanged relaunch on the stream of its last launch (the caller checked the
 * description: the same structure, no node changed since, no conditional node, the same
 * context): the exec that launch kept, claimed through hint_claim as a thread's hint is
 * (trusted: the entry is the pipeline's last, as of its epoch), which holds exactly this
 * description (its snapshot is the pipeline's, of this generation), so it
 * is launched as it is. The lock-free claim with none of the general path's steps: no
 * signature, hint table, update or snapshot. False (nothing held, nothing launched) when the
 * exec cannot be claimed so; then the general path decides. *rp: the launch's result.
 */
static inline __attribute__((always_inline)) bool
pipeline_relaunch(struct cupool_pipeline *p, CUstream stream, CUresult *rp)
{
    struct cupool__tcache *tc = cupool__tl;
    struct gentry *e = p->last_entry;
    if (CUPOOL_UNLIKELY(!tc || !e || stream == CU_STREAM_PER_THREAD))
        return false;
    /* the pipeline's last launch, as a hint of its own: the same claim, its entry known */
    const struct ghint h = {p->last_hash, stream, e, p->last_exec, p->last_serial, p->last_epoch};
    if (!hint_claim(tc, &h, false, e, p->last_epoch, p->last_ctx_id, NULL, 0, stream))
        return false;
    struct gexec *c = h.exec;
    /* owned now: it cannot be freed; launched as it is only if it holds this description */
    if (CUPOOL_UNLIKELY(c->exec == NULL || !cupool__exec_holds(c, p, false))) {
        exec_disown(c);
        return false;
    }
    claim_counted(tc, e);
    bool recorded;
    CUresult r = exec_launch(e, c, stream, &recorded);
    cupool__refill_launched(p, false);
    exec_done(e, c, true, stream, r == CUDA_SUCCESS, recorded, false);
    graves_maybe_reap();
    *rp = r;
    return true;
}

CUresult cupool_pipeline_launch(cupool_pipeline_t pipeline, CUstream stream)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (CUPOOL_UNLIKELY(p && p->add_error != CUDA_SUCCESS)) /* before the count: it may be 0 */
        return cupool__fail(p->add_error,
                            "cupool_pipeline_launch: an add failed with %s since the last "
                            "cupool_pipeline_reset: the description is incomplete",
                            cupool_result_name(p->add_error));
    if (!p || p->n == 0)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_launch: %s",
                            !p ? "not a pipeline" : "the pipeline has no nodes");
    if (CUPOOL_UNLIKELY(p->open_scope || p->empty_bodies))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_pipeline_launch: %s", p->open_scope
                                ? "a conditional node's body is still open "
                                  "(cupool_pipeline_body_end)"
                                : "a conditional node has a body without a node");
    CUresult r;
    if (CUPOOL_UNLIKELY(cupool__state_now() != CUPOOL_ST_RUNNING) &&
        (r = cupool__enter()) != CUDA_SUCCESS)
        return r;
    if (!cupool__argv_room(p))
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory to launch a pipeline");
    if (cupool__cfg.graph_disable || !cupool__graphs_supported()) {
        if (!cupool__eager_supported())
            return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                                "this driver lacks the entry points pipelines need");
        return cupool__eager_launch(p, stream);
    }
    /* the current context: the graphs of a reset or another context are never touched */
    unsigned long long ctx_id = 0;
    r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &ctx_id));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cupool_pipeline_launch: no usable current context");
    /* the description as the last launch's, on its stream: its exec as it is */
    if (p->last_exec && p->last_stream == stream && p->last_ctx_id == ctx_id &&
        !p->sig_dirty && p->sigpos == p->last_nsig && p->n == p->last_n && !p->all_dirty &&
        !p->nchg && !p->ncond && pipeline_relaunch(p, stream, &r))
        return r;
    /* made after the call, which sees only ctx_id: no store to it is kept for the driver */
    struct launch_src s = {.p = p, .ctx_id = ctx_id};
    /* the signature: reused when the description kept the last launch's structure */
    s.same = !p->sig_dirty && p->sigpos == p->last_nsig && p->n == p->last_n;
    if (!s.same) {
        uint64_t hash;
        size_t nsig = cupool__signature(p, &hash);
        if (!nsig)
            return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline signature");
        p->last_nsig = p->sigpos = nsig;
        p->last_hash = hash;
        p->last_n = p->n;
        p->sig_dirty = false;
        p->last_entry = NULL;
        p->last_exec = NULL;
    }
    s.hash = p->last_hash;
    s.sig = p->sig;
    s.nsig = p->last_nsig;
    /* the description differs from the last launch's (its parameters: marked as added) */
    s.dirty = !s.same || p->all_dirty || p->nchg;
    s.known = p->last_ctx_id == s.ctx_id ? p->last_entry : NULL;
    s.epoch = p->last_epoch;
    return cache_launch(&s, stream);
}

CUresult cupool_capture_launch(uint64_t key, CUstream stream, cupool_capture_fn fn,
                               void *user_data, unsigned int flags)
{
    if (!fn || (flags & ~CUPOOL_CAPTURE_UPDATE))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_capture_launch: %s",
                            !fn ? "fn is NULL" : "unknown flags");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!cupool__graphs_supported() || !cupool__drv.cuStreamBeginCapture ||
        !cupool__drv.cuStreamEndCapture || !cupool__drv.cuGraphExecUpdate)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                            "this driver lacks the capture or graph entry points");
    uint64_t sig[2] = {CAPTURE_TAG, key};
    struct launch_src s = {.sig = sig, .nsig = 2, .fn = fn, .user = user_data, .flags = flags};
    r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &s.ctx_id));
    if (r == CUDA_SUCCESS)
        r = CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&s.ctx));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cupool_capture_launch: no usable current context");
    s.hash = cupool__mix(cupool__mix(0, sig[0]), sig[1]);
    return cache_launch(&s, stream);
}

/* The figures kept per device (cupool_graph_stats_device_get), for the outputs: X(field, type,
 * help) each. */
#define GRAPH_DEVICE_FIELDS(X)                                                                \
    X(launches, "counter", "Launches through the graph cache of the device's entries")        \
    X(hits, "counter", "Of those, launches that found their signature cached")                \
    X(misses, "counter", "Of those, launches that built a graph")                             \
    X(instantiations, "counter", "Graph instantiations of the device's entries")              \
    X(updates, "counter", "Launches of the device's entries that updated at least one node")  \
    X(nodes_updated, "counter", "Node parameter updates of the device's entries")             \
    X(evictions, "counter", "Cache entries of the device evicted")                            \
    X(claims_lock_free, "counter", "Launches of the device's entries claimed lock-free")      \
    X(claims_locked, "counter", "Launches of the device's entries that took the cache lock")  \
    X(entries, "gauge", "Entries of the device cached now")                                   \
    X(execs, "gauge", "Graph execs of the device's entries alive now")                        \
    X(bytes, "gauge", "Estimated memory held by the device's entries")

/* The devices' part of the graph report: a member "devices" of the JSON "graph" object (an
 * array, an object per device that launched through the cache), the families
 * cupool_graph_device_* labelled by device (a sample per such device), and a line per device
 * in the table when two devices or more launched. */
static void graph_devices_report(FILE *out, cupool_stats_format_t format)
{
    cupool_graph_stats_t dv[CUPOOL_STATS_DEVICES];
    int used = 0;
    for (int d = 0; d < CUPOOL_STATS_DEVICES; d++) {
        dv[d] = (cupool_graph_stats_t)CUPOOL_GRAPH_STATS_INIT;
        if (cupool_graph_stats_device_get(d, &dv[d]) != CUDA_SUCCESS)
            memset(&dv[d], 0, sizeof(dv[d]));
        used += dv[d].launches != 0;
    }
    if (format == CUPOOL_STATS_FORMAT_JSON) {
        fputs(",\"devices\":[", out);
        bool first = true;
        for (int d = 0; d < CUPOOL_STATS_DEVICES; d++) {
            if (!dv[d].launches)
                continue;
            fprintf(out, "%s{\"device\":%d", first ? "" : ",", d);
#define DEVICE_JSON(field, type, help) fprintf(out, ",\"" #field "\":%" PRIu64, dv[d].field);
            GRAPH_DEVICE_FIELDS(DEVICE_JSON)
#undef DEVICE_JSON
            fputc('}', out);
            first = false;
        }
        fputc(']', out);
        return;
    }
    if (format == CUPOOL_STATS_FORMAT_PROMETHEUS) {
#define DEVICE_FAMILY(field, type, help)                                                      \
    fprintf(out,                                                                              \
            "# HELP cupool_graph_device_" #field "%s " help "\n# TYPE cupool_graph_device_"   \
            #field "%s " type "\n",                                                           \
            type[0] == 'c' ? "_total" : "", type[0] == 'c' ? "_total" : "");                  \
    for (int d = 0; d < CUPOOL_STATS_DEVICES; d++)                                            \
        if (dv[d].launches)                                                                   \
            fprintf(out, "cupool_graph_device_" #field "%s{device=\"%d\"} %" PRIu64 "\n",     \
                    type[0] == 'c' ? "_total" : "", d, dv[d].field);
        GRAPH_DEVICE_FIELDS(DEVICE_FAMILY)
#undef DEVICE_FAMILY
        return;
    }
    for (int d = 0; used > 1 && d < CUPOOL_STATS_DEVICES; d++)
        if (dv[d].launches)
            fprintf(out,
                    "graph cache, device %d: %" PRIu64 " launches, %" PRIu64 " hits, %" PRIu64
                    " misses, %" PRIu64 " instantiations, %" PRIu64 " updates (%" PRIu64
                    " nodes), %" PRIu64 " evictions; %" PRIu64 " entries, %" PRIu64
                    " execs, %" PRIu64 " bytes\n",
                    d, dv[d].launches, dv[d].hits, dv[d].misses, dv[d].instantiations,
                    dv[d].updates, dv[d].nodes_updated, dv[d].evictions, dv[d].entries,
                    dv[d].execs, dv[d].bytes);
}

/* The graph layer's part of cupool_stats_print_format: a line of the table once pipelines
 * were launched; the JSON member "graph" and the Prometheus families cupool_graph_* always;
 * then the devices' part (graph_devices_report). */
static CUresult graph_report(FILE *out, cupool_stats_format_t format)
{
    cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
    if (cupool_graph_stats_get(&g) != CUDA_SUCCESS)
        memset(&g, 0, sizeof(g));
    if (format == CUPOOL_STATS_FORMAT_JSON) {
        fprintf(out,
                ",\"graph\":{\"launches\":%" PRIu64 ",\"hits\":%" PRIu64 ",\"misses\":%" PRIu64
                ",\"instantiations\":%" PRIu64 ",\"updates\":%" PRIu64 ",\"nodes_updated\":%" PRIu64
                ",\"update_failures\":%" PRIu64 ",\"evictions\":%" PRIu64
                ",\"eager_launches\":%" PRIu64 ",\"entries\":%" PRIu64 ",\"execs\":%" PRIu64
                ",\"bytes\":%" PRIu64 ",\"claims_lock_free\":%" PRIu64
                ",\"claims_locked\":%" PRIu64 ",\"nodes_compared\":%" PRIu64,
                g.launches, g.hits, g.misses, g.instantiations, g.updates, g.nodes_updated,
                g.update_failures, g.evictions, g.eager_launches, g.entries, g.execs, g.bytes,
                g.claims_lock_free, g.claims_locked, g.nodes_compared);
        fprintf(out,
                ",\"uploads\":%" PRIu64 ",\"update_topology_changed\":%" PRIu64
                ",\"update_node_type_changed\":%" PRIu64 ",\"update_function_changed\":%" PRIu64
                ",\"update_parameters_changed\":%" PRIu64 ",\"update_not_supported\":%" PRIu64
                ",\"update_unsupported_function_change\":%" PRIu64
                ",\"update_attributes_changed\":%" PRIu64 ",\"update_other\":%" PRIu64
                ",\"node_update_refusals\":%" PRIu64 ",\"update_errors\":%" PRIu64,
                g.uploads, g.update_topology_changed, g.update_node_type_changed,
                g.update_function_changed, g.update_parameters_changed, g.update_not_supported,
                g.update_unsupported_function_change, g.update_attributes_changed,
                g.update_other, g.node_update_refusals, g.update_errors);
        graph_devices_report(out, format);
        fputc('}', out);
        return CUDA_SUCCESS;
    }
    if (format == CUPOOL_STATS_FORMAT_PROMETHEUS) {
#define GRAPH_METRIC(field, type, help)                                                         \
    cupool__prom_metric(out, type[0] == 'c' ? "cupool_graph_" #field "_total"                   \
                                            : "cupool_graph_" #field,                           \
                        type, help, g.field)
        GRAPH_METRIC(launches, "counter", "Pipeline and capture launches through the graph cache");
        GRAPH_METRIC(hits, "counter", "Launches that found their signature cached");
        GRAPH_METRIC(misses, "counter", "Launches that built a graph");
        GRAPH_METRIC(instantiations, "counter", "Graph instantiations");
        GRAPH_METRIC(updates, "counter", "Launches that updated at least one node");
        GRAPH_METRIC(nodes_updated, "counter", "Node parameter updates");
        GRAPH_METRIC(update_failures, "counter", "Updates not made (instantiated afresh)");
        GRAPH_METRIC(evictions, "counter", "Cache entries evicted");
        GRAPH_METRIC(eager_launches, "counter", "Launches made node by node");
        GRAPH_METRIC(claims_lock_free, "counter", "Launches that claimed an exec lock-free");
        GRAPH_METRIC(claims_locked, "counter", "Launches that took the cache lock");
        GRAPH_METRIC(nodes_compared, "counter", "Node parameters compared with an exec's");
        GRAPH_METRIC(uploads, "counter", "Execs uploaded on their launch stream as instantiated");
        GRAPH_METRIC(update_topology_changed, "counter",
                     "Capture updates refused: CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED");
        GRAPH_METRIC(update_node_type_changed, "counter",
                     "Capture updates refused: CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED");
        GRAPH_METRIC(update_function_changed, "counter",
                     "Capture updates refused: CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED");
        GRAPH_METRIC(update_parameters_changed, "counter",
                     "Capture updates refused: CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED");
        GRAPH_METRIC(update_not_supported, "counter",
                     "Capture updates refused: CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED");
        GRAPH_METRIC(update_unsupported_function_change, "counter",
                     "Capture updates refused: "
                     "CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE");
        GRAPH_METRIC(update_attributes_changed, "counter",
                     "Capture updates refused: CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED, or "
                     "a launch attribute changed that the driver does not update in place");
        GRAPH_METRIC(update_other, "counter",
                     "Capture updates refused for another reason, or failed");
        GRAPH_METRIC(node_update_refusals, "counter",
                     "Pipeline node updates the driver refused");
        GRAPH_METRIC(update_errors, "counter",
                     "Refused updates a new instantiation would not cure (the launch failed)");
        GRAPH_METRIC(entries, "gauge", "Entries cached now");
        GRAPH_METRIC(execs, "gauge", "Graph execs alive now");
        GRAPH_METRIC(bytes, "gauge", "Estimated host and driver memory held by the graph cache");
#undef GRAPH_METRIC
        graph_devices_report(out, format);
        return CUDA_SUCCESS;
    }
    if (g.launches || g.eager_launches)
        fprintf(out,
                "graph cache: %" PRIu64 " launches, %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
                " instantiations, %" PRIu64 " updates (%" PRIu64 " nodes), %" PRIu64
                " update failures, %" PRIu64 " evictions, %" PRIu64 " eager launches; %" PRIu64
                " entries, %" PRIu64 " execs, %" PRIu64 " bytes\n",
                g.launches, g.hits, g.misses, g.instantiations, g.updates, g.nodes_updated,
                g.update_failures, g.evictions, g.eager_launches, g.entries, g.execs, g.bytes);
    graph_devices_report(out, format);
    uint64_t refused = g.update_topology_changed + g.update_node_type_changed +
                       g.update_function_changed + g.update_parameters_changed +
                       g.update_not_supported + g.update_unsupported_function_change +
                       g.update_attributes_changed + g.update_other + g.node_update_refusals;
    if ((g.launches || g.eager_launches) && (g.uploads || refused))
        fprintf(out,
                "graph cache: %" PRIu64 " execs uploaded as instantiated; refused updates: %" PRIu64
                " topology changed, %" PRIu64 " node type changed, %" PRIu64
                " function changed, %" PRIu64 " parameters changed, %" PRIu64
                " not supported, %" PRIu64 " unsupported function change, %" PRIu64
                " attributes changed, %" PRIu64 " other, %" PRIu64 " node updates; %" PRIu64
                " not cured by instantiating\n",
                g.uploads, g.update_topology_changed, g.update_node_type_changed,
                g.update_function_changed, g.update_parameters_changed, g.update_not_supported,
                g.update_unsupported_function_change, g.update_attributes_changed,
                g.update_other, g.node_update_refusals, g.update_errors);
    return CUDA_SUCCESS;
}

/* The graph layer's hooks (base/layer.h): the cache goes with the pools at exit and unload,
 * is trimmed with them, and its graveyard is reaped by the maintenance thread. */
static const struct cupool__layer graph_layer = {
    .rank = CUPOOL_LAYER_GRAPH,
    .close = cupool__graph_cache_close,
    .trim = cupool__graph_cache_trim,
    .report = graph_report,
    .maintain = cupool__graph_graves_maintain,
};

__attribute__((constructor)) static void graph_layer_register(void)
{
    cupool__layer_register(&graph_layer);
}
