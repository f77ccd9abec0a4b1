/* SPDX-License-Identifier: MIT */
/* Graph execs: instantiation, launch, destruction, parameter updates, cuGraphExecUpdate. */
#include "internal.h"

_Atomic int g_live_execs;  /* execs instantiated and not destroyed */

static CUresult get_exec(CUgraphExec h, struct fc_exec **out)
{
    struct fc_exec *e = (struct fc_exec *)h;
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    if (e->magic != MAGIC_EXEC)
        die("%p is not a graph exec", (void *)h);
    if (!ctx_alive(e->ctx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = e;
    return CUDA_SUCCESS;
}

void exec_free(struct fc_exec *e)
{
    struct fc_ctx *c = e->ctx;
    if (e->prev)
        e->prev->next = e->next;
    else
        c->execs = e->next;
    if (e->next)
        e->next->prev = e->prev;
    for (size_t i = 0; i < e->n; i++) {
        if (e->tmpl && e->tmpl[i])
            op_free(e->tmpl[i]);
        if (e->ev && e->ev[i])
            event_unref(e->ev[i]);
    }
    if (e->last_q)
        queue_unref(e->last_q);
    for (size_t i = 0; i < e->nconds; i++)
        cond_unref(e->conds[i]);
    free(e->conds);
    free(e->type);
    free(e->tmpl);
    free(e->ev);
    free(e->node);
    free(e->dep_index);
    free(e->dep_start);
    free(e->dep_type);
    e->magic = 0;
    free(e);
    atomic_fetch_sub(&g_live_execs, 1);
}

/* Kahn's algorithm, ties broken by insertion order. order[] gets the nodes; false on a cycle. */
int topo_order(struct fc_graph *g, struct fc_node **order)
{
    size_t n = g->nnodes, done = 0;
    char *placed = calloc(n ? n : 1, 1);
    if (!placed)
        return -1;
    while (done < n) {
        int progress = 0;
        for (struct fc_node *x = g->nhead; x; x = x->next) {
            if (placed[x->index])
                continue;
            size_t i = 0;
            while (i < x->ndeps && placed[x->deps[i]->index])
                i++;
            if (i == x->ndeps) {
                placed[x->index] = 1;
                order[done++] = x;
                progress = 1;
            }
        }
        if (!progress)
            break;
    }
    free(placed);
    return done == n;
}

/* The exec of graph g: nodes in a topological order, with copies of their templates. */
static CUresult exec_build(struct fc_graph *g, struct fc_exec **out)
{
    size_t n = g->nnodes, nd = 0;
    for (struct fc_node *x = g->nhead; x; x = x->next)
        nd += x->ndeps;
    struct fc_exec *e = calloc(1, sizeof *e);
    struct fc_node **order = malloc((n ? n : 1) * sizeof *order);
    size_t *pos = malloc((n ? n : 1) * sizeof *pos);
    if (e) {
        e->type = calloc(n ? n : 1, sizeof *e->type);
        e->tmpl = calloc(n ? n : 1, sizeof *e->tmpl);
        e->ev = calloc(n ? n : 1, sizeof *e->ev);
        e->node = calloc(n ? n : 1, sizeof *e->node);
        e->dep_index = calloc(nd ? nd : 1, sizeof *e->dep_index);
        e->dep_start = calloc(n + 1, sizeof *e->dep_start);
        e->dep_type = calloc(nd ? nd : 1, 1);
    }
    CUresult r = CUDA_SUCCESS;
    if (!e || !order || !pos || !e->type || !e->tmpl || !e->ev || !e->node || !e->dep_index ||
        !e->dep_start || !e->dep_type)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    int ok = r == CUDA_SUCCESS ? topo_order(g, order) : 0;
    if (r == CUDA_SUCCESS && ok < 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else if (r == CUDA_SUCCESS && !ok)
        r = CUDA_ERROR_INVALID_VALUE; /* a cycle */
    if (r == CUDA_SUCCESS) {
        e->magic = MAGIC_EXEC;
        e->ctx = g->ctx;
        e->src = g;
        e->n = n;
        for (size_t i = 0; i < n; i++)
            pos[order[i]->index] = i;
        size_t k = 0, ccap = 0;
        for (size_t i = 0; i < g->nconds && r == CUDA_SUCCESS; i++) {
            struct fc_cond *c = g->conds[i];
            if (!(c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT))
                continue;
            if (e->nconds == ccap) {
                size_t cap = ccap ? 2 * ccap : 4;
                struct fc_cond **m = realloc(e->conds, cap * sizeof *m);
                if (!m) {
                    r = CUDA_ERROR_OUT_OF_MEMORY;
                    break;
                }
                e->conds = m;
                ccap = cap;
            }
            c->refs++;
            e->conds[e->nconds++] = c;
        }
        for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
            struct fc_node *x = order[i];
            e->type[i] = x->type;
            e->node[i] = x;
            e->dep_start[i] = k;
            int programmatic = 0;
            for (size_t j = 0; j < x->ndeps; j++) {
                e->dep_type[k] = (unsigned char)node_dep_type(x, j);
                programmatic |= e->dep_type[k] == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
                e->dep_index[k++] = pos[x->deps[j]->index];
            }
            if (x->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
                r = cond_op_build(x, &e->tmpl[i], &e->conds, &e->nconds, &ccap);
            else if (x->tmpl && !(e->tmpl[i] = op_clone(x->tmpl)))
                r = CUDA_ERROR_OUT_OF_MEMORY;
            /* a kernel reached through a programmatic edge may overlap its predecessor */
            if (r == CUDA_SUCCESS && x->type == CU_GRAPH_NODE_TYPE_KERNEL)
                e->tmpl[i]->u.k.programmatic = programmatic;
            if (x->ev && x->ev->h.state != ST_LIVE)
                die("instantiating a graph whose event node names event %p, destroyed since "
                    "(on an H200 cuGraphInstantiateWithFlags crashed; cloning, destroying and "
                    "launching did not)",
                    (void *)x->ev);
            if (x->ev) {
                e->ev[i] = x->ev;
                x->ev->refs++;
            }
        }
        e->dep_start[n] = k;
    }
    free(order);
    free(pos);
    if (r != CUDA_SUCCESS) {
        if (e) {
            for (size_t i = 0; i < e->n; i++) {
                if (e->tmpl && e->tmpl[i])
                    op_free(e->tmpl[i]);
                if (e->ev && e->ev[i])
                    event_unref(e->ev[i]);
            }
            for (size_t i = 0; i < e->nconds; i++)
                cond_unref(e->conds[i]);
            free(e->conds);
            free(e->type), free(e->tmpl), free(e->ev), free(e->node);
            free(e->dep_index), free(e->dep_start), free(e->dep_type), free(e);
        }
        return r;
    }
    e->next = g->ctx->execs;
    if (e->next)
        e->next->prev = e;
    g->ctx->execs = e;
    atomic_fetch_add(&g_live_execs, 1);
    *out = e;
    return CUDA_SUCCESS;
}
/* Instantiations of a graph an exec of which has been launched: on an H200 such an
 * instantiation, while that exec ran and another thread synchronised, stalled until the
 * queued work drained (2 of 44 trials; none from a clone of the graph). */
_Atomic unsigned long g_inst_of_launched;

_Atomic unsigned long g_uploads;        /* execs uploaded, however */
_Atomic unsigned long g_launch_uploads; /* of which by their first launch */

/* Instantiates hGraph. Flags: CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (kernels run at
 * their nodes' priority attribute instead of the launch stream's); CUDA_GRAPH_INSTANTIATE_
 * FLAG_UPLOAD with upload (cuGraphInstantiateWithParams only, as documented): the exec is
 * uploaded on that stream now, so that its first launch does not upload it. Any other flag:
 * CUDA_ERROR_INVALID_VALUE. *why gets the CUgraphInstantiateResult, *err_node the node at
 * fault (a cycle), for cuGraphInstantiateWithParams. */
static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags,
                            int with_params, struct fc_stream *upload,
                            CUgraphInstantiateResult *why, CUgraphNode *err_node)
{
    struct fc_graph *g;
    *why = CUDA_GRAPH_INSTANTIATE_ERROR;
    *err_node = NULL;
    unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY |
                               (with_params ? CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD : 0);
    if (!phGraphExec || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = get_graph(hGraph, &g);
    if (r != CUDA_SUCCESS)
        return r;
    if (!(flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
        upload = NULL;
    if (upload && upload->ctx != g->ctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (g->parent)
        return CUDA_ERROR_INVALID_VALUE; /* a conditional node's body */
    if (g->has_cond && g->instantiated)
        return CUDA_ERROR_NOT_SUPPORTED; /* once only, as on an H200 */
    if (g->exec_launched)
        atomic_fetch_add(&g_inst_of_launched, 1);
    struct fc_exec *e;
    r = exec_build(g, &e);
    if (r == CUDA_ERROR_INVALID_VALUE) { /* a cycle */
        *why = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
        *err_node = (CUgraphNode)g->nhead;
    }
    if (r != CUDA_SUCCESS)
        return r;
    g->instantiated++;
    e->node_priority = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY) != 0;
    if (upload) {
        e->uploaded = 1;
        atomic_fetch_add(&g_uploads, 1);
    }
    *why = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    *phGraphExec = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

static CUresult instantiate_entry(CUgraphExec *phGraphExec, CUgraph hGraph,
                                  unsigned long long flags)
{
    ENTER(cuGraphInstantiate, 1);
    CUgraphInstantiateResult why;
    CUgraphNode err_node;
    return leave(instantiate(phGraphExec, hGraph, flags, 0, NULL, &why, &err_node));
}

/* An instantiation while another thread is inside cuGraphLaunch: on an H200 both calls can
 * then wait until the queued work drains (tens of ms behind long kernels). Counted, outside
 * the simulation's lock, by whichever of the two calls finds the other under way. */
static _Atomic long g_launching, g_instantiating;
_Atomic unsigned long g_inst_launch_overlaps;

static void inst_begin(void)
{
    atomic_fetch_add(&g_instantiating, 1);
    if (atomic_load(&g_launching) > 0)
        atomic_fetch_add(&g_inst_launch_overlaps, 1);
}

static void inst_end(void)
{
    atomic_fetch_sub(&g_instantiating, 1);
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{
    inst_begin();
    int slot = graph_use_begin(hGraph);
    CUresult r = instantiate_entry(phGraphExec, hGraph, flags);
    graph_use_end(slot);
    inst_end();
    return r;
}

static CUresult instantiate_params(CUgraphExec *phGraphExec, CUgraph hGraph,
                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    ENTER(cuGraphInstantiateWithParams, 1);
    if (!params)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct fc_stream *s = NULL;
    CUresult r = CUDA_SUCCESS;
    if (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
        r = get_stream(params->hUploadStream, &s, 1);
    if (r == CUDA_SUCCESS && s && s->cap != CU_STREAM_CAPTURE_STATUS_NONE)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* no upload into a capture */
    CUgraphInstantiateResult why = CUDA_GRAPH_INSTANTIATE_ERROR;
    CUgraphNode err_node = NULL;
    if (r == CUDA_SUCCESS)
        r = instantiate(phGraphExec, hGraph, params->flags, 1, s, &why, &err_node);
    params->result_out = why;
    params->hErrNode_out = err_node;
    return leave(r);
}

/* cuGraphInstantiateWithParams: as cuGraphInstantiateWithFlags, with
 * CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD (the exec uploaded on hUploadStream, which must be a
 * stream of the graph's context that is not capturing) and the result written to
 * result_out and hErrNode_out. */
CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    inst_begin();
    int slot = graph_use_begin(hGraph);
    CUresult r = instantiate_params(phGraphExec, hGraph, instantiateParams);
    graph_use_end(slot);
    inst_end();
    return r;
}

/* Uploads an exec on a stream (counted; once uploaded, a launch uploads nothing). */
CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    ENTER(cuGraphUpload, 1);
    struct fc_exec *e;
    struct fc_stream *s;
    CUresult r = get_exec(hGraphExec, &e);
    if (r == CUDA_SUCCESS)
        r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS && s->ctx != e->ctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !e->uploaded) {
        e->uploaded = 1;
        atomic_fetch_add(&g_uploads, 1);
    }
    return leave(r);
}

/* The five-argument form cuGetProcAddress("cuGraphInstantiate") returns, even at 12000 (seen
 * on an H200: only cuda.h maps the name to cuGraphInstantiateWithFlags). */
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer,
                                       size_t bufferSize)
{
    inst_begin();
    CUresult r = instantiate_entry(phGraphExec, hGraph, 0);
    inst_end();
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = '\0';
    return r;
}

unsigned long g_exec_overlaps;      /* launches that waited on the exec's other stream */
unsigned long g_exec_destroy_waits; /* exec destroys with launches still queued */

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    ENTER(cuGraphExecDestroy, 1);
    struct fc_exec *e;
    CUresult r = get_exec(hGraphExec, &e);
    /* Destroying an exec whose launches are still queued is counted; with
     * FAKECUDA_DESTROY_WAITS=1 it also waits until they have run, as a driver might (the
     * documentation promises asynchronous release, and on an H200 one thread's destroy of an
     * exec with a 2 ms launch queued returned in 22 us; an earlier slowdown of eight threads
     * launching and destroying execs turned out to be the instantiation stall, see
     * fakecuda_instantiate_launch_overlaps). */
    struct fc_queue *pq = r == CUDA_SUCCESS ? e->last_q : NULL;
    if (pq && !pq->dead &&
        ((pq->busy && pq->busy_seq <= e->last_seq) || (pq->head && pq->head->seq <= e->last_seq))) {
        g_exec_destroy_waits++;
        if (getenv("FAKECUDA_DESTROY_WAITS"))
            (void)drain(pq, e->last_seq, 0);
    }
    if (r == CUDA_SUCCESS)
        exec_free(e);
    return leave(r);
}

/* Queues one launch of e on s: a wait for the exec's previous launch when it was on another
 * queue (launches of one exec never overlap), then every node in order. Lock held. */

static CUresult exec_launch(struct fc_exec *e, struct fc_stream *s)
{
    uint64_t not_before = 0;
    if (e->src)
        e->src->exec_launched = 1;
    e->launched = 1;
    if (!e->uploaded) { /* a launch of an exec not uploaded yet uploads it first */
        e->uploaded = 1;
        atomic_fetch_add(&g_uploads, 1);
        atomic_fetch_add(&g_launch_uploads, 1);
    }
    if (e->last_q && e->last_q != s->q && !e->last_q->dead) {
        struct fc_queue *pq = e->last_q; /* still running there: this launch is serialised */
        if ((pq->busy && pq->busy_seq <= e->last_seq) || (pq->head && pq->head->seq <= e->last_seq))
            g_exec_overlaps++;
        struct fc_op *w = op_new(OP_WAIT);
        if (!w)
            return CUDA_ERROR_OUT_OF_MEMORY;
        w->u.wait.ev = NULL;
        w->u.wait.q = e->last_q;
        w->u.wait.seq = e->last_seq;
        e->last_q->refs++;
        not_before = e->last_ready;
        CUresult r = submit(s, w, not_before);
        if (r != CUDA_SUCCESS)
            return r;
    }
    struct fc_op *last = NULL;
    for (size_t i = 0; i < e->nconds; i++) { /* CU_GRAPH_COND_ASSIGN_DEFAULT handles */
        struct fc_op *op = op_new(OP_CONDRESET);
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        op->u.creset.c = e->conds[i];
        e->conds[i]->refs++;
        CUresult r = submit(s, op, not_before);
        if (r != CUDA_SUCCESS)
            return r;
        last = op;
    }
    for (size_t i = 0; i < e->n; i++) {
        struct fc_op *op = NULL;
        struct fc_event *ev = e->ev[i];
        switch (e->type[i]) {
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
            op = op_new(OP_RECORD);
            if (op) {
                op->u.rec.ev = ev;
                ev->refs++;
            }
            break;
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
            if (!ev->rec_q)
                continue; /* never recorded, or complete: nothing to wait for */
            op = op_new(OP_WAIT);
            if (op) {
                op->u.wait.ev = ev;
                ev->refs++;
                op->u.wait.q = ev->rec_q;
                op->u.wait.seq = ev->rec_seq;
                ev->rec_q->refs++;
            }
            break;
        case CU_GRAPH_NODE_TYPE_EMPTY:
            continue;
        default:
            op = op_clone(e->tmpl[i]);
            if (op && op->kind == OP_KERNEL) {
                /* its node's priority under CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY,
                 * else the stream's (cuda.h) */
                int prio = e->node_priority ? op->u.k.priority : s->priority;
                op->u.k.run_priority = prio < FC_PRIO_GREATEST ? FC_PRIO_GREATEST
                                       : prio > FC_PRIO_LEAST  ? FC_PRIO_LEAST
                                                               : prio;
                op->u.k.run_priority_set = 1;
            }
            break;
        }
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = submit(s, op, not_before);
        if (r != CUDA_SUCCESS)
            return r;
        if (e->type[i] == CU_GRAPH_NODE_TYPE_EVENT_RECORD &&
            s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
            if (ev->rec_q)
                queue_unref(ev->rec_q);
            ev->rec_q = s->q;
            s->q->refs++;
            ev->rec_seq = op->seq;
            ev->rec_ready = op->ready_at;
            ev->recorded = 1;
        }
        last = op;
    }
    if (last && s->cap == CU_STREAM_CAPTURE_STATUS_NONE) {
        if (e->last_q)
            queue_unref(e->last_q);
        e->last_q = s->q;
        s->q->refs++;
        e->last_seq = last->seq;
        e->last_ready = last->ready_at;
    }
    return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream);

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    atomic_fetch_add(&g_launching, 1);
    if (atomic_load(&g_instantiating) > 0)
        atomic_fetch_add(&g_inst_launch_overlaps, 1);
    CUresult r = graph_launch(hGraphExec, hStream);
    atomic_fetch_sub(&g_launching, 1);
    return r;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream)
{
    ENTER(cuGraphLaunch, 1);
    struct fc_exec *e;
    struct fc_stream *s;
    CUresult r = get_exec(hGraphExec, &e);
    if (r == CUDA_SUCCESS)
        r = get_stream(hStream, &s, 1);
    if (r == CUDA_SUCCESS && s->ctx != e->ctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = exec_launch(e, s);
    return leave(r);
}

/* The position of graph node h in exec e, or -1. */
static long exec_pos(const struct fc_exec *e, CUgraphNode h)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->node[i] == (const void *)h)
            return (long)i;
    return -1;
}

/* The template slot of graph node h in exec e, at its top level or inside a conditional
 * node's bodies (named by the node of the body graph, as cuda.h has it), with its type; NULL
 * if e has none. */
static struct fc_op **exec_slot(struct fc_exec *e, CUgraphNode h, CUgraphNodeType *type)
{
    long i = exec_pos(e, h);
    if (i >= 0) {
        *type = e->type[i];
        return &e->tmpl[i];
    }
    for (size_t j = 0; j < e->n; j++)
        if (e->type[j] == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
            struct fc_op **s = cond_find_slot(e->tmpl[j], (const void *)h, type);
            if (s)
                return s;
        }
    return NULL;
}

/* Replaces the template at the place of node h: the kind must match. Takes op. */
static CUresult exec_set(CUgraphExec hExec, CUgraphNode h, CUgraphNodeType type,
                         struct fc_op *op)
{
    struct fc_exec *e;
    CUgraphNodeType at = CU_GRAPH_NODE_TYPE_EMPTY;
    CUresult r = get_exec(hExec, &e);
    struct fc_op **slot = r == CUDA_SUCCESS ? exec_slot(e, h, &at) : NULL;
    if (r == CUDA_SUCCESS && (!slot || at != type))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) {
        op_free(op);
        return r;
    }
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) { /* new parameters; the node's attributes stay */
        kernel_attrs_copy(op, *slot);
        op->u.k.programmatic = (*slot)->u.k.programmatic; /* an edge's, not a parameter */
        if (!kernel_shape_fits(op)) { /* the node's cluster dimension must divide the grid */
            op_free(op);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    op_free(*slot);
    *slot = op;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphExecKernelNodeSetParams, 1);
    struct fc_node *n;
    struct fc_op *op = NULL;
    CUresult r = get_node(hNode, &n);
    if (r == CUDA_SUCCESS)
        r = nodeParams ? kernel_node_op(n->g, nodeParams, &op) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_KERNEL, op));
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                CUcontext ctx)
{
    ENTER(cuGraphExecMemsetNodeSetParams, 1);
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = memset_node_op(memsetParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, op));
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    ENTER(cuGraphExecMemcpyNodeSetParams, 1);
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = memcpy_node_op(copyParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, op));
}

CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphExecHostNodeSetParams, 1);
    if (!nodeParams || !nodeParams->fn)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct fc_op *op = host_op_new(nodeParams->fn, nodeParams->userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(exec_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, op));
}

static CUresult exec_set_event(CUgraphExec hExec, CUgraphNode h, CUevent event,
                               CUgraphNodeType type)
{
    struct fc_exec *x;
    struct fc_event *ev;
    CUresult r = get_exec(hExec, &x);
    if (r == CUDA_SUCCESS)
        r = get_event(event, &ev, 0);
    long i = r == CUDA_SUCCESS ? exec_pos(x, h) : -1;
    if (r == CUDA_SUCCESS && (i < 0 || x->type[i] != type || ev->ctx != x->ctx))
        r = CUDA_ERROR_INVALID_VALUE;
    /* as on an H200: the node's event destroyed since, the update is refused */
    if (r == CUDA_SUCCESS && x->ev[i]->h.state != ST_LIVE)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    ev->refs++;
    event_unref(x->ev[i]);
    x->ev[i] = ev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUevent event)
{
    ENTER(cuGraphExecEventRecordNodeSetEvent, 1);
    return leave(exec_set_event(hGraphExec, hNode, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD));
}

CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  CUevent event)
{
    ENTER(cuGraphExecEventWaitNodeSetEvent, 1);
    return leave(exec_set_event(hGraphExec, hNode, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT));
}

/* fakecuda_exec_update_refuse(): the next updates that would succeed are refused with a
 * reason of the test's choosing. Lock held. */
static CUgraphExecUpdateResult g_refuse_reason;
static unsigned g_refuse_count;

void fakecuda_exec_update_refuse(CUgraphExecUpdateResult reason, unsigned count)
{
    lock();
    g_refuse_reason = reason;
    g_refuse_count = reason == CU_GRAPH_EXEC_UPDATE_SUCCESS ? 0 : count;
    unlock();
}

/* Where fresh's topology differs from e's (*why TOPOLOGY_CHANGED): the node count (no node
 * named), or a node's dependencies (that node of hGraph, and the dependency that differs,
 * when one does), edge types included. */
static int topology_differs(const struct fc_exec *e, const struct fc_exec *fresh,
                            CUgraphExecUpdateResultInfo *info)
{
    if (fresh->n != e->n)
        return 1;
    for (size_t i = 0; i < e->n; i++) {
        size_t a = e->dep_start[i], b = fresh->dep_start[i];
        size_t na = e->dep_start[i + 1] - a, nb = fresh->dep_start[i + 1] - b;
        if (na != nb) {
            info->errorNode = (CUgraphNode)fresh->node[i];
            return 1;
        }
        for (size_t j = 0; j < na; j++)
            if (e->dep_index[a + j] != fresh->dep_index[b + j] ||
                e->dep_type[a + j] != fresh->dep_type[b + j]) {
                info->errorNode = (CUgraphNode)fresh->node[i];
                info->errorFromNode = (CUgraphNode)fresh->node[fresh->dep_index[b + j]];
                return 1;
            }
    }
    return 0;
}

/* Same topology (node count, types, dependencies and their edge types in a topological
 * order): every node's parameters are copied into the exec, which keeps its own node
 * handles. Refused, as documented, when a kernel node's cooperative attribute changed, or its
 * priority in an exec instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
 * (CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED, that node named). A kernel's changed
 * cluster dimension is accepted and not applied to an exec that has been launched (nor, taken
 * as alike, its preferred cluster dimension, cluster scheduling policy, memory sync domain or
 * domain map). On an H200 (driver 580.159) that is what the update did for a recaptured
 * kernel and, in one of two runs, for a node's own attribute; in the other run the launch
 * after it mixed the two dimensions: nothing reliable, which the simulation renders as the
 * first. */
CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                      CUgraphExecUpdateResultInfo *resultInfo)
{
    ENTER(cuGraphExecUpdate, 1);
    struct fc_exec *e, *fresh = NULL;
    struct fc_graph *g;
    CUresult r = get_exec(hGraphExec, &e);
    if (r == CUDA_SUCCESS)
        r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && !resultInfo)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = exec_build(g, &fresh);
    if (r != CUDA_SUCCESS)
        return leave(r);
    memset(resultInfo, 0, sizeof *resultInfo);
    CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    if (topology_differs(e, fresh, resultInfo))
        why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    for (size_t i = 0; why == CU_GRAPH_EXEC_UPDATE_SUCCESS && i < e->n; i++) {
        const struct fc_op *o = e->tmpl[i], *n = fresh->tmpl[i];
        if (fresh->type[i] != e->type[i])
            why = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        else if (e->type[i] == CU_GRAPH_NODE_TYPE_CONDITIONAL && !cond_same_shape(o, n))
            why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED; /* type, bodies, their nodes */
        else if (e->type[i] == CU_GRAPH_NODE_TYPE_KERNEL &&
                 (!n->u.k.cooperative != !o->u.k.cooperative ||
                  (e->node_priority && n->u.k.priority != o->u.k.priority)))
            why = CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED;
        if (why != CU_GRAPH_EXEC_UPDATE_SUCCESS)
            resultInfo->errorNode = (CUgraphNode)fresh->node[i];
    }
    if (why == CU_GRAPH_EXEC_UPDATE_SUCCESS && g_refuse_count) { /* a test's refusal */
        g_refuse_count--;
        why = g_refuse_reason;
        resultInfo->errorNode = e->n ? (CUgraphNode)fresh->node[0] : NULL;
    }
    if (why == CU_GRAPH_EXEC_UPDATE_SUCCESS) {
        for (size_t i = 0; i < e->n; i++) {
            if (!e->launched || e->type[i] != CU_GRAPH_NODE_TYPE_KERNEL)
                continue;
            struct fc_op *n = fresh->tmpl[i];
            const struct fc_op *o = e->tmpl[i];
            memcpy(n->u.k.cluster, o->u.k.cluster, sizeof n->u.k.cluster);
            memcpy(n->u.k.preferred_cluster, o->u.k.preferred_cluster,
                   sizeof n->u.k.preferred_cluster);
            n->u.k.cluster_policy = o->u.k.cluster_policy;
            n->u.k.mem_sync_domain = o->u.k.mem_sync_domain;
            memcpy(n->u.k.sync_map, o->u.k.sync_map, sizeof n->u.k.sync_map);
        }
        for (size_t i = 0; i < e->n; i++) { /* swap parameters, keep e's node handles */
            if (e->type[i] == CU_GRAPH_NODE_TYPE_CONDITIONAL)
                cond_keep_nodes(fresh->tmpl[i], e->tmpl[i]);
            struct fc_op *t = e->tmpl[i];
            struct fc_event *v = e->ev[i];
            e->tmpl[i] = fresh->tmpl[i];
            e->ev[i] = fresh->ev[i];
            fresh->tmpl[i] = t;
            fresh->ev[i] = v;
        }
    }
    if (why == CU_GRAPH_EXEC_UPDATE_SUCCESS) { /* the new graph's handles, reset at launch */
        struct fc_cond **c = e->conds;
        size_t nc = e->nconds;
        e->conds = fresh->conds;
        e->nconds = fresh->nconds;
        fresh->conds = c;
        fresh->nconds = nc;
    }
    exec_free(fresh);
    resultInfo->result = why;
    return leave(why == CU_GRAPH_EXEC_UPDATE_SUCCESS ? CUDA_SUCCESS
                                                     : CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
}
