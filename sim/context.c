/* SPDX-License-Identifier: MIT */
/* Devices, primary contexts and created contexts: the current-context stack, their
 * activation and teardown, and the entry points on them. */
#include "internal.h"

/* ========================================================================================
 * Contexts: the current one, activation, teardown, sticky errors
 * ======================================================================================== */

/* The calling thread's current context, which must be usable. */
CUresult need_ctx(struct fc_ctx **out)
{
    struct fc_ctx *c = tl_top();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx_alive(c))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

/* Same, and not sticky-broken. */
CUresult need_healthy_ctx(struct fc_ctx **out)
{
    CUresult r = need_ctx(out);
    if (r == CUDA_SUCCESS && (*out)->sticky)
        r = (*out)->sticky;
    return r;
}

/* A CUcontext passed in by the caller: garbage aborts; a destroyed created context and the
 * value cuCtxGetCurrent returns for a reset primary context are INVALID_CONTEXT. */
static CUresult check_ctx_handle(CUcontext h, struct fc_ctx **out)
{
    if (h == FC_CTX_DESTROYED_PTR)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!pool_owns(&g_ctx_pool, h))
        die("%p is not a context", (void *)h);
    struct fc_ctx *c = (struct fc_ctx *)h;
    if (!c->primary && c->h.state != ST_LIVE)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return CUDA_SUCCESS;
}

/* Makes a context usable: new id, fresh NULL stream. */
static CUresult ctx_activate(struct fc_ctx *c)
{
    struct fc_queue *q = queue_new(c);
    if (!q)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&c->legacy, 0, sizeof c->legacy);
    c->legacy.h.magic = MAGIC_STREAM;
    c->legacy.h.state = ST_LIVE;
    c->legacy.ctx = c;
    c->legacy.legacy = 1;
    c->legacy.q = q;
    c->id = g_next_ctx_id++;
    c->sticky = CUDA_SUCCESS;
    c->was_reset = 0;
    c->active = 1;
    return CUDA_SUCCESS;
}

static int ctx_queue_busy(const struct fc_ctx *c, int by_self)
{
    const struct fc_queue *q;
#define FC_BUSY(qq) ((qq) && (qq)->busy && (!by_self || (qq)->busy_owner == tl_self()))
    if (FC_BUSY(c->legacy.q))
        return 1;
    for (const struct fc_stream *s = c->streams; s; s = s->next)
        if (FC_BUSY(s->q))
            return 1;
    for (q = c->orphans; q; q = q->orphan_next)
        if (FC_BUSY(q))
            return 1;
#undef FC_BUSY
    return 0;
}

/*
 * Destroys everything a context owns (cuDevicePrimaryCtxReset, last primary release,
 * cuCtxDestroy): pending work is dropped, handles die, memory is freed. Waits for operations
 * other threads are running in it. Lock held; may release it while waiting.
 */
static CUresult ctx_teardown(struct fc_ctx *c)
{
    if (ctx_queue_busy(c, 1))
        return CUDA_ERROR_NOT_PERMITTED; /* from inside one of its own operations */
    c->dying = 1;
    if (c->legacy.q)
        c->legacy.q->dead = 1;
    for (struct fc_stream *s = c->streams; s; s = s->next)
        s->q->dead = 1;
    for (struct fc_queue *q = c->orphans; q; q = q->orphan_next)
        q->dead = 1;
    while (ctx_queue_busy(c, 0))
        pthread_cond_wait(&g_cond, &g_lock);

    while (c->streams) {
        struct fc_stream *s = c->streams;
        c->streams = s->next;
        if (s->graph)
            graph_free(s->graph);
        queue_discard(s->q);
        queue_unref(s->q);
        pool_put(&g_stream_pool, s, ST_CTX_GONE);
        g_live_streams--;
    }
    if (c->legacy.q) {
        queue_discard(c->legacy.q);
        queue_unref(c->legacy.q);
        c->legacy.q = NULL;
    }
    while (c->orphans) {
        struct fc_queue *q = c->orphans;
        c->orphans = q->orphan_next;
        queue_discard(q);
        queue_unref(q);
    }
    while (c->events) {
        struct fc_event *e = c->events;
        c->events = e->next;
        e->h.state = ST_CTX_GONE;
        g_live_events--;
        event_unref(e);
    }
    while (c->modules) {
        struct fc_module *m = c->modules;
        c->modules = m->next;
        pool_put(&g_module_pool, m, ST_CTX_GONE);
    }
    while (c->allocs) {
        struct fc_alloc *a = c->allocs;
        c->allocs = a->next;
        free(a->base);
        free(a);
    }
    while (c->execs)
        exec_free(c->execs);
    while (c->graphs)
        graph_free(c->graphs);
    c->active = 0;
    c->dying = 0;
    c->sticky = CUDA_SUCCESS;
    if (!c->primary)
        c->h.state = ST_DESTROYED;
    pthread_cond_broadcast(&g_cond);
    return CUDA_SUCCESS;
}

/* Breaks a live context with err (sticky: later calls in it return err); the first error stays. */
void poison(struct fc_ctx *c, CUresult err)
{
    if (c && ctx_alive(c) && !c->sticky && err != CUDA_SUCCESS)
        c->sticky = err;
}

/* ========================================================================================
 * Devices and primary contexts
 * ======================================================================================== */

static int dev_ok(CUdevice dev) { return dev >= 0 && dev < g_ndev; }

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    ENTER(cuDeviceGet, 1);
    if (!device)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(ordinal))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    ENTER(cuDeviceGetCount, 1);
    if (!count)
        return leave(CUDA_ERROR_INVALID_VALUE);
    *count = g_ndev;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTER(cuDeviceGetName, 1);
    if (!name || len <= 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", "fakecuda simulated device");
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ENTER(cuDeviceGetAttribute, 1);
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = dev; break;
    default: *pi = 0; break;
    }
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxRetain, 1);
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct fc_ctx *c = g_primary[dev];
    while (c->dying)
        pthread_cond_wait(&g_cond, &g_lock);
    if (!c->active) {
        CUresult r = ctx_activate(c);
        if (r != CUDA_SUCCESS)
            return leave(r);
    }
    c->refcount++;
    *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

/* Releasing the last reference destroys the primary context, as the real driver does (the
 * threads that have it current keep its pointer; cuCtxGetId on it is CONTEXT_IS_DESTROYED). */
static CUresult primary_release(CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxRelease, 1);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct fc_ctx *c = g_primary[dev];
    if (c->refcount == 0)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    if (c->refcount == 1 && ctx_alive(c)) {
        CUresult r = ctx_teardown(c);
        if (r != CUDA_SUCCESS)
            return leave(r);
    }
    c->refcount--;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }

/* Destroys all the primary context's resources; the CUcontext pointer stays, its id dies,
 * the retain count stays (the next retain activates it again, with a new id). */
static CUresult primary_reset(CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxReset, 1);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    struct fc_ctx *c = g_primary[dev];
    CUresult r = ctx_alive(c) ? ctx_teardown(c) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        c->was_reset = 1;
    return leave(r);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    ENTER(cuDevicePrimaryCtxGetState, 1);
    if (!flags || !active)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    *flags = g_primary[dev]->flags;
    *active = ctx_alive(g_primary[dev]);
    return leave(CUDA_SUCCESS);
}

/* ========================================================================================
 * Created contexts and the current-context stack
 * ======================================================================================== */

static CUresult ctx_create(CUcontext *pctx, CUctxCreateParams *params, unsigned flags,
                           CUdevice dev)
{
    ENTER(cuCtxCreate, 1);
    if (!pctx || (flags & ~(unsigned)CU_CTX_FLAGS_MASK))
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (params) {
        if (params->cigParams)
            return leave(CUDA_ERROR_NOT_SUPPORTED);
        if (!params->execAffinityParams)
            return leave(CUDA_ERROR_INVALID_VALUE);
    }
    if (!dev_ok(dev))
        return leave(CUDA_ERROR_INVALID_DEVICE);
    if (tl_depth == FC_CTX_STACK)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    struct fc_ctx *c = pool_get(&g_ctx_pool);
    if (!c)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    c->dev = dev;
    c->flags = flags;
    c->all_next = g_contexts;
    g_contexts = c;
    if (ctx_activate(c) != CUDA_SUCCESS) {
        c->h.state = ST_DESTROYED;
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    tl_stack[tl_depth++] = c;
    *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, ctxCreateParams, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, NULL, flags, dev);
}

static CUresult ctx_destroy(CUcontext ctx)
{
    ENTER(cuCtxDestroy, 1);
    struct fc_ctx *c;
    if (!ctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = check_ctx_handle(ctx, &c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (c->primary || !ctx_alive(c))
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    r = ctx_teardown(c);
    if (r == CUDA_SUCCESS && tl_top() == c)
        tl_depth--;
    return leave(r);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    ENTER(cuCtxSetCurrent, 1);
    struct fc_ctx *c;
    if (!ctx) {
        if (tl_depth)
            tl_depth--;
        return leave(CUDA_SUCCESS);
    }
    CUresult r = check_ctx_handle(ctx, &c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (tl_depth)
        tl_stack[tl_depth - 1] = c;
    else
        tl_stack[tl_depth++] = c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER(cuCtxGetCurrent, 1);
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct fc_ctx *c = tl_top();
    if (c && c->primary && !ctx_alive(c) && c->was_reset)
        *pctx = FC_CTX_DESTROYED_PTR; /* what the real driver returned after a reset */
    else
        *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

static CUresult ctx_push(CUcontext ctx)
{
    ENTER(cuCtxPushCurrent, 1);
    struct fc_ctx *c;
    if (!ctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = check_ctx_handle(ctx, &c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (tl_depth == FC_CTX_STACK)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    tl_stack[tl_depth++] = c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }

static CUresult ctx_pop(CUcontext *pctx)
{
    ENTER(cuCtxPopCurrent, 1);
    if (!tl_depth)
        return leave(CUDA_ERROR_INVALID_CONTEXT);
    struct fc_ctx *c = tl_stack[--tl_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx) { return ctx_pop(pctx); }
CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) { return ctx_pop(pctx); }

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    ENTER(cuCtxGetId, 1);
    struct fc_ctx *c;
    CUresult r;
    if (!ctxId)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (ctx)
        r = check_ctx_handle(ctx, &c);
    else
        r = (c = tl_top()) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS && !ctx_alive(c))
        r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (r == CUDA_SUCCESS && !ctx && c->sticky)
        r = c->sticky; /* as on an H200: a broken current context answers with its error; asked
                          by handle, it still gives its id */
    if (r == CUDA_SUCCESS)
        *ctxId = c->id;
    return leave(r);
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    ENTER(cuCtxGetDevice, 1);
    struct fc_ctx *c;
    if (!device)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_ctx(&c);
    if (r == CUDA_SUCCESS)
        *device = c->dev;
    return leave(r);
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    ENTER(cuCtxSynchronize, 1);
    struct fc_ctx *c;
    CUresult r = need_healthy_ctx(&c);
    if (r == CUDA_SUCCESS)
        r = ctx_drain(c, 0, DRAIN_ALL);
    return leave(r);
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    ENTER(cuCtxGetStreamPriorityRange, 1);
    struct fc_ctx *c;
    CUresult r = need_healthy_ctx(&c);
    if (r == CUDA_SUCCESS) {
        if (leastPriority)
            *leastPriority = FC_PRIO_LEAST;
        if (greatestPriority)
            *greatestPriority = FC_PRIO_GREATEST;
    }
    return leave(r);
}
