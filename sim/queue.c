/* SPDX-License-Identifier: MIT */
/* Operations, the FIFO queues of streams, and their lazy execution. */
#include "internal.h"

/* ========================================================================================
 * Operations and lazy execution
 * ======================================================================================== */

struct fc_op *op_new(enum op_kind kind)
{
    struct fc_op *op = calloc(1, sizeof *op);
    if (op)
        op->kind = kind;
    return op;
}

struct fc_queue *queue_new(struct fc_ctx *c)
{
    struct fc_queue *q = calloc(1, sizeof *q);
    if (q) {
        q->refs = 1;
        q->ctx = c;
    }
    return q;
}

/* The operations a memset, a copy and a host function queue (or a graph node templates). */
struct fc_op *memset_op_new(void *dst, unsigned value, size_t elem, size_t count)
{
    struct fc_op *op = op_new(OP_MEMSET);
    if (op) {
        op->u.set.dst = dst;
        op->u.set.value = value;
        op->u.set.elem = elem;
        op->u.set.count = count;
    }
    return op;
}

struct fc_op *copy_op_new(void *dst, const void *src, size_t n)
{
    struct fc_op *op = op_new(OP_COPY);
    if (op) {
        op->u.copy.dst = dst;
        op->u.copy.src = src;
        op->u.copy.n = n;
    }
    return op;
}

struct fc_op *host_op_new(CUhostFn fn, void *data)
{
    struct fc_op *op = op_new(OP_HOSTFN);
    if (op) {
        op->u.host.fn = fn;
        op->u.host.data = data;
    }
    return op;
}

void op_free(struct fc_op *op)
{
    switch (op->kind) {
    case OP_KERNEL:
        free(op->u.k.blob);
        break;
    case OP_RECORD:
        event_unref(op->u.rec.ev);
        break;
    case OP_WAIT:
        if (op->u.wait.q)
            queue_unref(op->u.wait.q);
        if (op->u.wait.ev) /* NULL: a launch waiting for its exec's previous launch */
            event_unref(op->u.wait.ev);
        break;
    case OP_COND:
    case OP_CONDRESET:
        cond_op_free(op);
        break;
    default:
        break;
    }
    free(op);
}

/* An operation left its queue, run (ran) or dropped: completes its event record. */
static void op_retire(struct fc_op *op, int ran)
{
    if (op->kind != OP_RECORD)
        return;
    struct fc_event *e = op->u.rec.ev;
    if (ran && (!e->has_time || op->seq > e->time_seq)) {
        e->has_time = 1;
        e->time_seq = op->seq;
        e->time_ns = op->ready_at;
    }
    if (e->rec_q && e->rec_seq == op->seq) {
        queue_unref(e->rec_q);
        e->rec_q = NULL;
    }
}

/* Drops every queued operation. */
void queue_discard(struct fc_queue *q)
{
    while (q->head) {
        struct fc_op *op = q->head;
        q->head = op->next;
        if (!q->head)
            q->tail = NULL;
        op_retire(op, 0);
        op_free(op);
    }
}

void queue_unref(struct fc_queue *q)
{
    if (--q->refs == 0) {
        queue_discard(q);
        free(q);
    }
}

/* Appends op: ready at max(now, end of the queue's previous work, not_before) + duration. */
static void queue_push(struct fc_queue *q, struct fc_op *op, uint64_t not_before)
{
    uint64_t start = max_u64(max_u64(now_ns(), q->last_ready), not_before);
    op->ready_at = start + op->duration;
    q->last_ready = op->ready_at;
    op->seq = ++g_seq;
    op->next = NULL;
    if (q->tail)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
}

/* Runs one popped operation. Lock held; released around user code and sleeping. */
static void run_op(struct fc_op *op, int only_ready)
{
    if (!only_ready && op->ready_at > now_ns()) {
        unlock();
        sleep_until(op->ready_at); /* the simulated device is still busy */
        lock();
    }
    switch (op->kind) {
    case OP_RECORD:
        break; /* op_retire completes the event */
    case OP_WAIT:
        if (op->u.wait.q)
            (void)drain(op->u.wait.q, op->u.wait.seq, only_ready);
        break;
    case OP_KERNEL:
        unlock();
        tl_cluster_x = op->u.k.cluster[0] ? op->u.k.cluster[0] : 1;
        tl_op = op;
        op->u.k.fn(op->u.k.args, op->u.k.grid, op->u.k.block);
        tl_op = NULL;
        lock();
        break;
    case OP_MEMSET:
        unlock();
        for (size_t i = 0; i < op->u.set.count; i++) {
            if (op->u.set.elem == 1) {
                op->u.set.dst[i] = (unsigned char)op->u.set.value;
            } else {
                uint32_t v = op->u.set.value;
                memcpy(op->u.set.dst + i * 4, &v, 4);
            }
        }
        lock();
        break;
    case OP_COPY:
        unlock();
        memcpy(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
        lock();
        break;
    case OP_HOSTFN:
        unlock();
        op->u.host.fn(op->u.host.data);
        lock();
        break;
    case OP_COND:
        cond_run(op, only_ready);
        break;
    case OP_CONDRESET:
        op->u.creset.c->value = op->u.creset.c->dflt;
        break;
    }
}

/* Runs an operation of a conditional node's body, in place (cond_run). Lock held. */
void run_op_inline(struct fc_op *op, int only_ready)
{
    run_op(op, only_ready);
}

/*
 * Runs, in order and on the calling thread, the operations of q with sequence number <= upto.
 * only_ready: query mode, runs only operations whose simulated time has come and never
 * waits; CUDA_ERROR_NOT_READY if some remain. Otherwise waits for the simulated time and
 * for operations of q other threads are running. A thread that needs an operation it is
 * itself running (a host function synchronising its own stream) gets NOT_PERMITTED.
 * A sticky-broken context drops the queue and returns its error. Lock held.
 */
CUresult drain(struct fc_queue *q, uint64_t upto, int only_ready)
{
    CUresult r = CUDA_SUCCESS;
    q->refs++;
    for (;;) {
        if (q->dead) {
            r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
            break;
        }
        if (q->ctx->sticky) {
            queue_discard(q);
            r = q->ctx->sticky;
            break;
        }
        struct fc_op *op = q->head;
        int busy_pending = q->busy && q->busy_seq <= upto;
        if (!busy_pending && !(op && op->seq <= upto))
            break; /* done */
        if (q->busy) {
            if (q->busy_owner == tl_self()) {
                r = only_ready ? CUDA_ERROR_NOT_READY : CUDA_ERROR_NOT_PERMITTED;
                break;
            }
            if (only_ready) {
                r = CUDA_ERROR_NOT_READY;
                break;
            }
            pthread_cond_wait(&g_cond, &g_lock);
            continue;
        }
        if (only_ready && op->ready_at > now_ns()) {
            r = CUDA_ERROR_NOT_READY;
            break;
        }
        if (only_ready && op->kind == OP_WAIT && op->u.wait.q) {
            /* the awaited record must be done before this wait can run */
            if (drain(op->u.wait.q, op->u.wait.seq, 1) == CUDA_ERROR_NOT_READY) {
                r = CUDA_ERROR_NOT_READY;
                break;
            }
            if (q->head != op || q->busy || q->dead)
                continue; /* the lock was released: look again */
        }
        q->head = op->next;
        if (!q->head)
            q->tail = NULL;
        q->busy = 1;
        q->busy_owner = tl_self();
        q->busy_seq = op->seq;
        struct fc_ctx *saved = tl_exec_ctx;
        tl_exec_ctx = q->ctx;
        run_op(op, only_ready);
        tl_exec_ctx = saved;
        q->busy = 0;
        op_retire(op, 1);
        op_free(op);
        pthread_cond_broadcast(&g_cond);
    }
    queue_unref(q);
    return r;
}

/*
 * Runs the work of a context: DRAIN_ALL every queue (streams, NULL stream, orphaned queues
 * of destroyed streams: cuCtxSynchronize); DRAIN_LEGACY the NULL stream and the blocking
 * streams (what synchronising the legacy stream waits for). Lock held.
 */
CUresult ctx_drain(struct fc_ctx *c, int only_ready, int which)
{
    uint64_t upto = only_ready ? UINT64_MAX : g_seq;
    size_t cap = 1, n = 0;
    for (struct fc_stream *s = c->streams; s; s = s->next)
        cap++;
    for (struct fc_queue *q = c->orphans; q; q = q->orphan_next)
        cap++;
    struct fc_queue **qs = malloc(cap * sizeof *qs);
    if (!qs)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (c->legacy.q)
        qs[n++] = c->legacy.q;
    for (struct fc_stream *s = c->streams; s; s = s->next)
        if (which == DRAIN_ALL || !(s->flags & CU_STREAM_NON_BLOCKING))
            qs[n++] = s->q;
    if (which == DRAIN_ALL)
        for (struct fc_queue *q = c->orphans; q; q = q->orphan_next)
            qs[n++] = q;
    for (size_t i = 0; i < n; i++)
        qs[i]->refs++;

    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        CUresult e = drain(qs[i], upto, only_ready);
        if (e != CUDA_SUCCESS && (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY))
            r = e;
    }
    for (size_t i = 0; i < n; i++)
        queue_unref(qs[i]);
    free(qs);

    if (which == DRAIN_ALL && !only_ready) {
        /* orphaned queues that ran dry are done */
        struct fc_queue **link = &c->orphans;
        while (*link) {
            struct fc_queue *q = *link;
            if (!q->head && !q->busy) {
                *link = q->orphan_next;
                queue_unref(q);
            } else {
                link = &q->orphan_next;
            }
        }
    }
    if (c->sticky)
        r = c->sticky;
    return r;
}

/* Queues op on stream s, or records it when s is being captured. Takes op. */
CUresult submit(struct fc_stream *s, struct fc_op *op, uint64_t not_before)
{
    if (s->cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
        op_free(op);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (s->cap == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        struct fc_graph *g = s->graph;
        /* a captured kernel node's priority is the stream's unless the launch gave one */
        if (op->kind == OP_KERNEL && !op->u.k.priority_set)
            op->u.k.priority = s->priority;
        op->next = NULL;
        if (g->tail)
            g->tail->next = op;
        else
            g->head = op;
        g->tail = op;
        g->nops++;
        return CUDA_SUCCESS;
    }
    /* a kernel runs at its priority attribute's, else at the stream's (a graph launch has
     * decided already) */
    if (op->kind == OP_KERNEL && !op->u.k.run_priority_set) {
        int prio = op->u.k.priority_set ? op->u.k.priority : s->priority;
        op->u.k.run_priority = prio < FC_PRIO_GREATEST ? FC_PRIO_GREATEST
                               : prio > FC_PRIO_LEAST  ? FC_PRIO_LEAST
                                                       : prio;
        op->u.k.run_priority_set = 1;
    }
    queue_push(s->q, op, not_before);
    return CUDA_SUCCESS;
}

/* A copy of a template operation (the kernel's argument bytes included). */
struct fc_op *op_clone(const struct fc_op *t)
{
    struct fc_op *op = op_new(t->kind);
    if (!op)
        return NULL;
    *op = *t;
    op->next = NULL;
    if (t->kind == OP_KERNEL && t->u.k.blob) {
        op->u.k.blob = malloc(t->u.k.blob_len);
        if (!op->u.k.blob) {
            free(op);
            return NULL;
        }
        memcpy(op->u.k.blob, t->u.k.blob, t->u.k.blob_len);
        for (int i = 0; i < FC_MAX_PARAMS; i++)
            if (t->u.k.args[i])
                op->u.k.args[i] = op->u.k.blob + ((unsigned char *)t->u.k.args[i] - t->u.k.blob);
    }
    if ((t->kind == OP_COND || t->kind == OP_CONDRESET) && !cond_op_clone(op, t)) {
        op_free(op);
        return NULL;
    }
    return op;
}
