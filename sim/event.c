/* SPDX-License-Identifier: MIT */
/* Events. */
#include "internal.h"

/* ========================================================================================
 * Events
 * ======================================================================================== */

/* Like get_stream, for events (never NULL). */
CUresult get_event(CUevent h, struct fc_event **out, int check_sticky)
{
    struct fc_event *e = (struct fc_event *)h;
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pool_owns(&g_event_pool, e))
        die("%p is not an event", (void *)h);
    if (e->h.state == ST_DESTROYED)
        die("event %p was destroyed", (void *)h);
    if (e->h.state == ST_CTX_GONE)
        die("event %p belongs to a context that was reset or destroyed", (void *)h);
    if (e->ctx->dying)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (check_sticky && e->ctx->sticky)
        return e->ctx->sticky;
    *out = e;
    return CUDA_SUCCESS;
}

/* Drops a reference; the memory goes back to the FIFO pool when the last one goes. */
void event_unref(struct fc_event *e)
{
    if (--e->refs > 0)
        return;
    if (e->rec_q) {
        queue_unref(e->rec_q);
        e->rec_q = NULL;
    }
    pool_put(&g_event_pool, e, e->h.state);
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    ENTER(cuEventCreate, 1);
    struct fc_ctx *c;
    const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~known) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_event *e = pool_get(&g_event_pool);
    if (!e)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    e->ctx = c;
    e->flags = Flags;
    e->refs = 1;
    e->next = c->events;
    if (c->events)
        c->events->prev = e;
    c->events = e;
    g_live_events++;
    *phEvent = (CUevent)e;
    return leave(CUDA_SUCCESS);
}

static CUresult event_destroy(CUevent hEvent)
{
    ENTER(cuEventDestroy, 1);
    struct fc_event *e;
    CUresult r = get_event(hEvent, &e, 0);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_ctx *c = e->ctx;
    if (c->sticky)
        return leave(c->sticky);
    if (e->prev)
        e->prev->next = e->next;
    else
        c->events = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->h.state = ST_DESTROYED;
    g_live_events--;
    event_unref(e); /* a pending record keeps the memory until it has run */
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) { return event_destroy(hEvent); }
CUresult CUDAAPI cuEventDestroy(CUevent hEvent) { return event_destroy(hEvent); }

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    ENTER(cuEventRecord, 1);
    struct fc_event *e;
    struct fc_stream *s;
    CUresult r = get_event(hEvent, &e, 1);
    if (r == CUDA_SUCCESS)
        r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (s->ctx != e->ctx)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    struct fc_op *op = op_new(OP_RECORD);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    op->u.rec.ev = e;
    e->refs++;
    int captured = s->cap != CU_STREAM_CAPTURE_STATUS_NONE;
    r = submit(s, op, 0);
    if (r != CUDA_SUCCESS || captured)
        return leave(r);
    if (e->rec_q)
        queue_unref(e->rec_q);
    e->rec_q = s->q;
    s->q->refs++;
    e->rec_seq = op->seq;
    e->rec_ready = op->ready_at;
    e->recorded = 1;
    return leave(CUDA_SUCCESS);
}

/* Runs the event's stream up to its latest record (only_ready: as far as simulated time
 * allows). A never-recorded event is complete. */
static CUresult event_run(struct fc_event *e, int only_ready)
{
    if (!e->rec_q)
        return CUDA_SUCCESS;
    return drain(e->rec_q, e->rec_seq, only_ready);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    ENTER(cuEventQuery, 1);
    struct fc_event *e;
    CUresult r = get_event(hEvent, &e, 1);
    if (r == CUDA_SUCCESS)
        r = event_run(e, 1);
    return leave(r);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    ENTER(cuEventSynchronize, 1);
    struct fc_event *e;
    CUresult r = get_event(hEvent, &e, 1);
    if (r == CUDA_SUCCESS)
        r = event_run(e, 0);
    return leave(r);
}

/* Simulated time between the two records: each record's time is when the simulated device
 * reached it (the end of the work queued before it). */
static CUresult elapsed_time(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    ENTER(cuEventElapsedTime, 1);
    struct fc_event *a, *b;
    if (!pMilliseconds)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_event(hStart, &a, 1);
    if (r == CUDA_SUCCESS)
        r = get_event(hEnd, &b, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) || !a->recorded || !b->recorded)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    r = event_run(a, 1);
    if (r == CUDA_SUCCESS)
        r = event_run(b, 1);
    if (r == CUDA_SUCCESS && (!a->has_time || !b->has_time))
        r = CUDA_ERROR_NOT_READY;
    if (r != CUDA_SUCCESS)
        return leave(r);
    *pMilliseconds = (float)(((double)b->time_ns - (double)a->time_ns) / 1e6);
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed_time(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed_time(pMilliseconds, hStart, hEnd);
}
