/* SPDX-License-Identifier: MIT */
/*
 * Conditional nodes of pipelines: the setter kernel each context loads once, and what the
 * driver must offer (docs/design.md, "Conditional nodes").
 *
 * A conditional node whose branch the host chooses per launch is, in the graph, a one-thread
 * kernel (cupool_set_cond, below) that calls cudaGraphSetConditional(handle, value), followed
 * by the conditional node. The setter ships as PTX text (the library has no compiler): on an
 * H200 (driver 580.159.04) PTX declaring cudaGraphSetConditional as an .extern .func loaded
 * with no device runtime linked, the driver resolving the call.
 *
 * Modules belong to a context. Each (context, context id) gets its module on the first miss
 * of a conditional pipeline there, kept in a list under setter_lock: a record counts the
 * cache entries using its function (users: from cupool__setter_get to cupool__setter_put,
 * which the entry's release makes). The module is never unloaded: it stays for its
 * context's life (cupool__setters_trim says why). cupool_trim() and cupool_context_release()
 * (the graph layer's trim) forget the record of a context that is gone (destroyed, reset:
 * another id) without a driver call, the driver having freed the module with its context.
 * At exit and unload every record goes, the same way.
 */
#include "base/internal.h"
#include "base/alloc.h"
#include "base/driver.h"
#include "base/error.h"
#include "pool/pool.h"
#include "graph/graph.h"
#include "graph/graph_impl.h"
#include "graph/setter_ptx.h"

#include <pthread.h>
#include <string.h>

/* The setter: one thread calls cudaGraphSetConditional(handle, value). */
static const char setter_ptx[] = CUPOOL_SETTER_PTX;

struct cupool__setter {
    CUcontext ctx;
    unsigned long long ctx_id;
    CUmodule module;
    CUfunction fn;
    uint32_t users; /* cache entries using fn */
    struct cupool__setter *next;
};

/* (Nests inside cupool__cache_lock; no driver call is made under it but the module's load.) */
static pthread_mutex_t setter_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cupool__setter *setters;

/* Does the driver have what conditional nodes need? CUDA_ERROR_NOT_SUPPORTED naming the
 * first entry point missing (who: the call, for the message). */
CUresult cupool__cond_supported(const char *who)
{
    const char *missing = !cupool__drv.cuGraphConditionalHandleCreate ? "cuGraphConditionalHandleCreate"
                          : !cupool__drv.cuGraphAddNode               ? "cuGraphAddNode (CUDA 12.3)"
                          : !cupool__drv.cuModuleLoadData             ? "cuModuleLoadData"
                          : !cupool__drv.cuModuleGetFunction          ? "cuModuleGetFunction"
                          : !cupool__drv.cuModuleUnload               ? "cuModuleUnload"
                                                                      : NULL;
    if (missing)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                            "%s: the driver lacks %s, which conditional nodes need", who, missing);
    return CUDA_SUCCESS;
}

/* The body a conditional node's value picks (-1: none): SWITCH, body[value] (none past the
 * last); IF, body 0 for a nonzero value, body 1 (when it has two) for zero. */
int cupool__cond_pick(const struct pnode *n)
{
    uint32_t v = n->u.cond.value, nb = n->u.cond.nbodies;
    if (n->u.cond.kind == PC_SWITCH)
        return v < nb ? (int)v : -1;
    return v ? 0 : nb == 2 ? 1 : -1;
}

/* The record of (ctx, ctx_id) in the list, or NULL. setter_lock held. */
static struct cupool__setter *setter_find(CUcontext ctx, unsigned long long ctx_id)
{
    struct cupool__setter *s = setters;
    while (s && !(s->ctx == ctx && s->ctx_id == ctx_id))
        s = s->next;
    return s;
}

/* The setter of context ctx (current on this thread; its id ctx_id), its module loaded on the
 * first call there; *out is held for a cache entry until cupool__setter_put. The module is
 * loaded (a PTX JIT: milliseconds) outside setter_lock, which an entry's release takes under
 * the cache lock: two threads may load one at once for a context, and the one that finds the
 * other's record listed first unloads its own, which nothing has used. */
CUresult cupool__setter_get(CUcontext ctx, unsigned long long ctx_id, struct cupool__setter **out)
{
    CUresult r = cupool__cond_supported("a pipeline with a conditional node");
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&setter_lock);
    struct cupool__setter *s = setter_find(ctx, ctx_id);
    if (s) {
        s->users++;
        pthread_mutex_unlock(&setter_lock);
        *out = s;
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&setter_lock);
    struct cupool__setter *mine = cupool__alloc(sizeof(*mine));
    if (!mine)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a setter kernel record");
    memset(mine, 0, sizeof(*mine));
    mine->ctx = ctx;
    mine->ctx_id = ctx_id;
    r = CUPOOL_DRV(cupool__drv.cuModuleLoadData(&mine->module, setter_ptx));
    if (r == CUDA_SUCCESS) {
        r = CUPOOL_DRV(cupool__drv.cuModuleGetFunction(&mine->fn, mine->module,
                                                       "cupool_set_cond"));
        if (r != CUDA_SUCCESS)
            CUPOOL_DRV(cupool__drv.cuModuleUnload(mine->module));
    }
    if (r != CUDA_SUCCESS) {
        cupool__free(mine, sizeof(*mine));
        return cupool__fail(r, "loading the setter kernel of conditional nodes (PTX calling "
                               "cudaGraphSetConditional) failed");
    }
    pthread_mutex_lock(&setter_lock);
    s = setter_find(ctx, ctx_id);
    if (!s) {
        mine->next = setters;
        setters = s = mine;
        mine = NULL;
    }
    s->users++;
    pthread_mutex_unlock(&setter_lock);
    if (mine) { /* another thread's came first: ours was never used */
        CUPOOL_DRV(cupool__drv.cuModuleUnload(mine->module));
        cupool__free(mine, sizeof(*mine));
    }
    *out = s;
    return CUDA_SUCCESS;
}

void cupool__setter_put(struct cupool__setter *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&setter_lock);
    s->users--;
    pthread_mutex_unlock(&setter_lock);
}

CUfunction cupool__setter_fn(const struct cupool__setter *s)
{
    return s->fn;
}

/* Forgets the records of contexts that are gone (trim, context release), without a call: the
 * driver freed their modules with them. A live context's module stays loaded for the
 * context's life, even with no cache entry using it: a launch of it may still be queued (a
 * trim destroys execs whose launches have not finished, which the driver frees once they
 * do), and nothing tells cupool when the last one ends, so an unload could pull the setter
 * from under a queued launch. One small module per context that ran a conditional pipeline
 * is the whole cost. closing (the library's exit or unload, after the cache's close): every
 * record is forgotten, without a call. A record whose context cannot be told now stays. */
void cupool__setters_trim(bool closing)
{
    struct cupool__setter *idle = NULL;
    pthread_mutex_lock(&setter_lock);
    struct cupool__setter **link = &setters;
    while (*link) {
        struct cupool__setter *s = *link;
        if (s->users && !closing) {
            link = &s->next;
            continue;
        }
        *link = s->next;
        s->next = idle;
        idle = s;
    }
    pthread_mutex_unlock(&setter_lock);
    /* outside the lock: the context check is a driver call */
    while (idle) {
        struct cupool__setter *s = idle;
        idle = s->next;
        CUresult err = CUDA_SUCCESS;
        if (!closing && cupool__ctx_verdict(s->ctx, s->ctx_id, &err) != 0) {
            pthread_mutex_lock(&setter_lock); /* alive, or cannot be told: kept */
            s->next = setters;
            setters = s;
            pthread_mutex_unlock(&setter_lock);
            continue;
        }
        cupool__free(s, sizeof(*s));
    }
}
