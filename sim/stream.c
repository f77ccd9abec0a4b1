/* SPDX-License-Identifier: MIT */
/* Streams and stream capture. */
#include "internal.h"

/* ========================================================================================
 * Streams
 * ======================================================================================== */

/*
 * A CUstream from the caller. NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the current
 * context's NULL stream. A destroyed stream, a stream of a reset context and garbage abort,
 * as they crash the real driver. With check_sticky, a broken context returns its error.
 */
CUresult get_stream(CUstream h, struct fc_stream **out, int check_sticky)
{
    struct fc_stream *s;
    if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
        struct fc_ctx *c;
        CUresult r = need_ctx(&c);
        if (r != CUDA_SUCCESS)
            return r;
        s = &c->legacy;
    } else {
        s = (struct fc_stream *)h;
        if (!pool_owns(&g_stream_pool, s))
            die("%p is not a stream", (void *)h);
        if (s->h.state == ST_DESTROYED)
            die("stream %p was destroyed", (void *)h);
        if (s->h.state == ST_CTX_GONE)
            die("stream %p belongs to a context that was reset or destroyed", (void *)h);
        if (s->ctx->dying)
            return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    if (check_sticky && s->ctx->sticky)
        return s->ctx->sticky;
    *out = s;
    return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream *phStream, unsigned flags, int priority)
{
    struct fc_ctx *c;
    if (!phStream || (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_queue *q = queue_new(c);
    struct fc_stream *s = q ? pool_get(&g_stream_pool) : NULL;
    if (!s) {
        free(q);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s->ctx = c;
    s->q = q;
    s->flags = flags;
    s->priority = priority < FC_PRIO_GREATEST ? FC_PRIO_GREATEST
                  : priority > FC_PRIO_LEAST  ? FC_PRIO_LEAST
                                              : priority;
    s->id = g_next_stream_id++;
    s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
    s->next = c->streams;
    if (c->streams)
        c->streams->prev = s;
    c->streams = s;
    g_live_streams++;
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    ENTER(cuStreamCreate, 1);
    return leave(stream_create(phStream, Flags, 0));
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    ENTER(cuStreamCreateWithPriority, 1);
    return leave(stream_create(phStream, flags, priority));
}

/* Returns at once; queued work moves to the context's orphan list and runs at the next
 * context-wide synchronisation. The handle goes on a LIFO free list (the next stream
 * created gets it back, as on the real driver). */
static CUresult stream_destroy(CUstream hStream)
{
    ENTER(cuStreamDestroy, 1);
    struct fc_stream *s;
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    CUresult r = get_stream(hStream, &s, 0);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_ctx *c = s->ctx;
    if (c->sticky)
        return leave(c->sticky); /* as on an H200: a broken context destroys nothing */
    if (s->graph)
        graph_free(s->graph);
    if (s->q->head || s->q->busy) {
        s->q->orphan_next = c->orphans;
        c->orphans = s->q;
    } else {
        queue_unref(s->q);
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pool_put(&g_stream_pool, s, ST_DESTROYED);
    g_live_streams--;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }
CUresult CUDAAPI cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }

/* Query or synchronise a stream (query: only_ready). A capturing stream refuses and its
 * capture is invalidated, as on the real driver. */
static CUresult stream_run(CUstream hStream, int only_ready)
{
    struct fc_stream *s;
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->cap != CU_STREAM_CAPTURE_STATUS_NONE) {
        s->cap = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->legacy)
        return ctx_drain(s->ctx, only_ready, DRAIN_LEGACY);
    return drain(s->q, only_ready ? UINT64_MAX : g_seq, only_ready);
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    ENTER(cuStreamQuery, 1);
    return leave(stream_run(hStream, 1));
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    ENTER(cuStreamSynchronize, 1);
    return leave(stream_run(hStream, 0));
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    ENTER(cuStreamWaitEvent, 1);
    struct fc_stream *s;
    struct fc_event *e;
    if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        r = get_event(hEvent, &e, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (!e->recorded && s->cap == CU_STREAM_CAPTURE_STATUS_NONE)
        return leave(CUDA_SUCCESS); /* never recorded: nothing to wait for */
    if (!e->rec_q && s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
        /* already complete: only orders the simulated time */
        s->q->last_ready = max_u64(s->q->last_ready, e->rec_ready);
        return leave(CUDA_SUCCESS);
    }
    struct fc_op *op = op_new(OP_WAIT);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    op->u.wait.ev = e;
    e->refs++;
    if (e->rec_q) {
        op->u.wait.q = e->rec_q;
        op->u.wait.seq = e->rec_seq;
        e->rec_q->refs++;
    }
    return leave(submit(s, op, e->rec_ready));
}

CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    ENTER(cuStreamGetFlags, 1);
    struct fc_stream *s;
    if (!flags)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *flags = s->flags;
    return leave(r);
}

CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
    ENTER(cuStreamGetPriority, 1);
    struct fc_stream *s;
    if (!priority)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *priority = s->priority;
    return leave(r);
}

CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    ENTER(cuStreamGetCtx, 1);
    struct fc_stream *s;
    if (!pctx)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *pctx = (CUcontext)s->ctx;
    return leave(r);
}

CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    ENTER(cuStreamGetId, 1);
    struct fc_stream *s;
    if (!streamId)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *streamId = s->id;
    return leave(r);
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    ENTER(cuLaunchHostFunc, 1);
    struct fc_stream *s;
    if (!fn)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_op *op = host_op_new(fn, userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(submit(s, op, 0));
}

/* ========================================================================================
 * Stream capture (operations are recorded in a list, never executed)
 * ======================================================================================== */

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    ENTER(cuStreamIsCapturing, 1);
    struct fc_stream *s;
    if (!captureStatus)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS)
        *captureStatus = s->cap;
    return leave(r);
}

static CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode)
{
    ENTER(cuStreamBeginCapture, 1);
    struct fc_stream *s;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (s->legacy)
        return leave(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (s->cap != CU_STREAM_CAPTURE_STATUS_NONE)
        return leave(CUDA_ERROR_ILLEGAL_STATE);
    struct fc_graph *g = graph_new(s->ctx); /* counted alive, as every graph */
    if (!g)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    s->graph = g;
    s->cap = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    s->cap_id = g_next_capture_id++;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode);
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* The graph stays owned by the context (freed when it is reset or destroyed). */
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    ENTER(cuStreamEndCapture, 1);
    struct fc_stream *s;
    if (!phGraph)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (s->cap == CU_STREAM_CAPTURE_STATUS_NONE)
        return leave(CUDA_ERROR_ILLEGAL_STATE);
    struct fc_graph *g = s->graph;
    int invalidated = s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    s->cap = CU_STREAM_CAPTURE_STATUS_NONE;
    s->graph = NULL;
    if (invalidated) {
        graph_free(g);
        *phGraph = NULL;
        return leave(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    }
    r = capture_to_nodes(g);
    if (r != CUDA_SUCCESS) {
        graph_free(g);
        *phGraph = NULL;
        return leave(r);
    }
    *phGraph = (CUgraph)g;
    return leave(CUDA_SUCCESS);
}

static CUresult capture_info(CUstream hStream, CUstreamCaptureStatus *status,
                             cuuint64_t *id, CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps)
{
    ENTER(cuStreamGetCaptureInfo, 1);
    struct fc_stream *s;
    if (!status)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    *status = s->cap;
    if (id)
        *id = s->cap != CU_STREAM_CAPTURE_STATUS_NONE ? s->cap_id : 0;
    if (graph)
        *graph = s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (CUgraph)s->graph : NULL;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream,
                                           CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           const CUgraphEdgeData **edgeData_out,
                                           size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        edgeData_out, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream,
                                           CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        NULL, numDependencies_out);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out)
{
    return capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
}
