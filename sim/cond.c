/* SPDX-License-Identifier: MIT */
/*
 * Conditional nodes (CUDA 12.3): handles, cuGraphAddNode of a conditional node with its body
 * graphs, and the operation that runs the body its handle's value picks.
 *
 * As on an H200 (driver 580.159.04): a graph holding a conditional node (in itself or in a
 * body) is instantiated once only and cannot be cloned (CUDA_ERROR_NOT_SUPPORTED for both);
 * the handle's value is set on the device by a kernel calling cudaGraphSetConditional, which
 * here is the builtin kernel cupool_set_cond(u64 handle, u32 value); a SWITCH runs body[value]
 * and nothing for a value past its last body, an IF body 0 for a nonzero value and body 1
 * (when it has two) for zero. With CU_GRAPH_COND_ASSIGN_DEFAULT the handle takes its default
 * value at the start of every launch. Bodies hold kernel, empty, memset, memcpy and
 * conditional nodes only (cuda.h, CUDA_CONDITIONAL_NODE_PARAMS); other kinds are refused when
 * added with CUDA_ERROR_NOT_SUPPORTED. WHILE nodes are not simulated (CUDA_ERROR_NOT_SUPPORTED).
 * An exec runs its launches' bodies as they were when it was launched: a launch takes a copy
 * of every body, as of every other node.
 */
#include "internal.h"

struct fc_cond *cond_of(CUgraphConditionalHandle h)
{
    struct fc_cond *c = (struct fc_cond *)(uintptr_t)h;
    return c && c->magic == MAGIC_COND ? c : NULL;
}

void cond_unref(struct fc_cond *c)
{
    if (--c->refs == 0) {
        c->magic = 0;
        free(c);
    }
}

static void body_free(struct fc_body *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->op[i])
            op_free(b->op[i]);
    free(b->op);
    free(b->type);
    free(b->node);
}

/* op_free's part for OP_COND and OP_CONDRESET. */
void cond_op_free(struct fc_op *op)
{
    if (op->kind == OP_COND) {
        if (op->u.cond.body) {
            for (unsigned i = 0; i < op->u.cond.size; i++)
                body_free(&op->u.cond.body[i]);
            free(op->u.cond.body);
        }
        if (op->u.cond.c)
            cond_unref(op->u.cond.c);
    } else if (op->u.creset.c) {
        cond_unref(op->u.creset.c);
    }
}

/* Room for n operations in b (b->n set only once there is). */
static int body_alloc(struct fc_body *b, size_t n)
{
    b->op = calloc(n ? n : 1, sizeof *b->op);
    b->type = calloc(n ? n : 1, sizeof *b->type);
    b->node = calloc(n ? n : 1, sizeof *b->node);
    if (!b->op || !b->type || !b->node) {
        free(b->op), free(b->type), free(b->node);
        b->op = NULL, b->type = NULL, b->node = NULL;
        return 0;
    }
    b->n = n;
    return 1;
}

/* op_clone's part: op is a shallow copy of t; gives it bodies of its own. 0: no memory (op is
 * then freed by the caller with nothing of t's). */
int cond_op_clone(struct fc_op *op, const struct fc_op *t)
{
    if (op->kind == OP_CONDRESET) {
        op->u.creset.c->refs++;
        return 1;
    }
    op->u.cond.c->refs++;
    if (!t->u.cond.body)
        return 1;
    op->u.cond.body = calloc(t->u.cond.size, sizeof *op->u.cond.body);
    if (!op->u.cond.body)
        return 0;
    for (unsigned i = 0; i < t->u.cond.size; i++) {
        const struct fc_body *s = &t->u.cond.body[i];
        struct fc_body *d = &op->u.cond.body[i];
        if (!body_alloc(d, s->n))
            return 0;
        for (size_t j = 0; j < s->n; j++) {
            d->type[j] = s->type[j];
            d->node[j] = s->node[j];
            if (s->op[j] && !(d->op[j] = op_clone(s->op[j])))
                return 0;
        }
    }
    return 1;
}

/* Runs the body the handle's value picks, its operations in order on this thread. Lock held
 * (released around user code by run_op_inline). */
void cond_run(struct fc_op *op, int only_ready)
{
    unsigned v = op->u.cond.c->value, size = op->u.cond.size;
    long pick = -1;
    if (op->u.cond.type == CU_GRAPH_COND_TYPE_SWITCH)
        pick = v < size ? (long)v : -1;
    else /* IF */
        pick = v ? 0 : size == 2 ? 1 : -1;
    if (pick < 0 || !op->u.cond.body)
        return;
    struct fc_body *b = &op->u.cond.body[pick];
    for (size_t i = 0; i < b->n; i++)
        if (b->op[i] && !(tl_exec_ctx && tl_exec_ctx->sticky))
            run_op_inline(b->op[i], only_ready);
}

/* The operation of conditional node x for an exec: its bodies' nodes in a topological order,
 * their templates copied; every handle with CU_GRAPH_COND_ASSIGN_DEFAULT met on the way is
 * added to (*conds)[*nconds] (a reference each). */
CUresult cond_op_build(struct fc_node *x, struct fc_op **out, struct fc_cond ***conds,
                       size_t *nconds, size_t *cconds)
{
    struct fc_op *op = op_new(OP_COND);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.cond = x->tmpl->u.cond;
    op->u.cond.body = NULL;
    op->u.cond.c->refs++;
    CUresult r = CUDA_SUCCESS;
    op->u.cond.body = calloc(op->u.cond.size, sizeof *op->u.cond.body);
    if (!op->u.cond.body)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned i = 0; r == CUDA_SUCCESS && i < op->u.cond.size; i++) {
        struct fc_graph *g = (struct fc_graph *)x->bodies[i];
        struct fc_body *b = &op->u.cond.body[i];
        struct fc_node **order = malloc((g->nnodes ? g->nnodes : 1) * sizeof *order);
        int ok = order ? topo_order(g, order) : -1;
        if (ok < 0 || !body_alloc(b, g->nnodes))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if (!ok)
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; r == CUDA_SUCCESS && j < g->nnodes; j++) {
            struct fc_node *y = order[j];
            b->type[j] = y->type;
            b->node[j] = y;
            if (y->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
                r = cond_op_build(y, &b->op[j], conds, nconds, cconds);
            else if (y->tmpl && !(b->op[j] = op_clone(y->tmpl)))
                r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        free(order);
        for (size_t k = 0; r == CUDA_SUCCESS && k < g->nconds; k++) {
            struct fc_cond *c = g->conds[k];
            if (!(c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT))
                continue;
            if (*nconds == *cconds) {
                size_t cap = *cconds ? 2 * *cconds : 4;
                struct fc_cond **m = realloc(*conds, cap * sizeof *m);
                if (!m) {
                    r = CUDA_ERROR_OUT_OF_MEMORY;
                    break;
                }
                *conds = m;
                *cconds = cap;
            }
            c->refs++;
            (*conds)[(*nconds)++] = c;
        }
    }
    if (r != CUDA_SUCCESS) {
        op_free(op);
        return r;
    }
    *out = op;
    return CUDA_SUCCESS;
}

/* The slot of graph node `node` inside the bodies of conditional operation op (nested ones
 * included), with its type; NULL if it is not there. */
struct fc_op **cond_find_slot(struct fc_op *op, const void *node, CUgraphNodeType *type)
{
    for (unsigned i = 0; op->u.cond.body && i < op->u.cond.size; i++) {
        struct fc_body *b = &op->u.cond.body[i];
        for (size_t j = 0; j < b->n; j++) {
            if (b->node[j] == node) {
                *type = b->type[j];
                return &b->op[j];
            }
            if (b->type[j] == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
                struct fc_op **s = cond_find_slot(b->op[j], node, type);
                if (s)
                    return s;
            }
        }
    }
    return NULL;
}

/* Whether two conditional operations have the same type, body count and bodies (node count
 * and types, position by position, nested conditionals alike): what cuGraphExecUpdate
 * requires of them. */
int cond_same_shape(const struct fc_op *a, const struct fc_op *b)
{
    if (a->u.cond.type != b->u.cond.type || a->u.cond.size != b->u.cond.size)
        return 0;
    for (unsigned i = 0; i < a->u.cond.size; i++) {
        const struct fc_body *x = &a->u.cond.body[i], *y = &b->u.cond.body[i];
        if (x->n != y->n)
            return 0;
        for (size_t j = 0; j < x->n; j++) {
            if (x->type[j] != y->type[j])
                return 0;
            if (x->type[j] == CU_GRAPH_NODE_TYPE_CONDITIONAL && !cond_same_shape(x->op[j], y->op[j]))
                return 0;
        }
    }
    return 1;
}

/* After cuGraphExecUpdate: the exec's operation `to` (from the new graph) answers to the node
 * handles of the exec's own graph, as `from` did (same shape). */
void cond_keep_nodes(struct fc_op *to, const struct fc_op *from)
{
    for (unsigned i = 0; i < to->u.cond.size; i++) {
        struct fc_body *x = &to->u.cond.body[i];
        const struct fc_body *y = &from->u.cond.body[i];
        for (size_t j = 0; j < x->n; j++) {
            x->node[j] = y->node[j];
            if (x->type[j] == CU_GRAPH_NODE_TYPE_CONDITIONAL)
                cond_keep_nodes(x->op[j], y->op[j]);
        }
    }
}

/* May a node of this type go into g? Anything into a graph; into a body (or its bodies),
 * what CUDA_CONDITIONAL_NODE_PARAMS allows. */
int node_allowed_in(const struct fc_graph *g, CUgraphNodeType type)
{
    if (!g->parent)
        return 1;
    return type == CU_GRAPH_NODE_TYPE_KERNEL || type == CU_GRAPH_NODE_TYPE_EMPTY ||
           type == CU_GRAPH_NODE_TYPE_MEMSET || type == CU_GRAPH_NODE_TYPE_MEMCPY ||
           type == CU_GRAPH_NODE_TYPE_CONDITIONAL;
}

CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out,
                                                CUgraph hGraph, CUcontext ctx,
                                                unsigned int defaultLaunchValue,
                                                unsigned int flags)
{
    ENTER(cuGraphConditionalHandleCreate, 1);
    struct fc_graph *g;
    CUresult r = pHandle_out ? get_graph(hGraph, &g) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && ((flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT) ||
                              (ctx && (struct fc_ctx *)ctx != g->ctx)))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (g->nconds == g->cconds) {
        size_t cap = g->cconds ? 2 * g->cconds : 4;
        struct fc_cond **m = realloc(g->conds, cap * sizeof *m);
        if (!m)
            return leave(CUDA_ERROR_OUT_OF_MEMORY);
        g->conds = m;
        g->cconds = cap;
    }
    struct fc_cond *c = calloc(1, sizeof *c);
    if (!c)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    c->magic = MAGIC_COND;
    c->refs = 1; /* the graph's */
    c->value = c->dflt = defaultLaunchValue;
    c->flags = flags;
    c->g = g;
    g->conds[g->nconds++] = c;
    *pHandle_out = (CUgraphConditionalHandle)(uintptr_t)c;
    return leave(CUDA_SUCCESS);
}

/* A conditional node (the only kind this simulation adds through cuGraphAddNode; others:
 * CUDA_ERROR_NOT_SUPPORTED): its handle must be one of g's or of a graph g is a body of, not
 * used by another node, of g's context; IF with 1 or 2 bodies, SWITCH with 1 or more.
 * phGraph_out gets the body graphs (owned by the node). */
static CUresult add_node(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *deps,
                         const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *p)
{
    struct fc_graph *g;
    CUresult r = phGraphNode && p ? get_graph(hGraph, &g) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    if (p->reserved0[0] || p->reserved0[1] || p->reserved0[2])
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; edges && i < ndeps; i++)
        if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port ||
            edges[i].to_port)
            return CUDA_ERROR_NOT_SUPPORTED;
    if (p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUDA_CONDITIONAL_NODE_PARAMS *cp = &p->conditional;
    struct fc_cond *c = cond_of(cp->handle);
    if (!node_allowed_in(g, CU_GRAPH_NODE_TYPE_CONDITIONAL))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (cp->type == CU_GRAPH_COND_TYPE_WHILE)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!c || c->used || (cp->ctx && (struct fc_ctx *)cp->ctx != g->ctx) ||
        (cp->type != CU_GRAPH_COND_TYPE_IF && cp->type != CU_GRAPH_COND_TYPE_SWITCH) ||
        cp->size == 0 || (cp->type == CU_GRAPH_COND_TYPE_IF && cp->size > 2))
        return CUDA_ERROR_INVALID_VALUE;
    int mine = 0; /* the handle's graph is g or a graph g is (nested) in */
    for (struct fc_graph *a = g; a && !mine; a = a->parent ? a->parent->g : NULL)
        mine = a == c->g;
    if (!mine)
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = op_new(OP_COND);
    CUgraph *bodies = calloc(cp->size, sizeof *bodies);
    if (!op || !bodies) {
        free(op);
        free(bodies);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    op->u.cond.c = c;
    op->u.cond.type = cp->type;
    op->u.cond.size = cp->size;
    c->refs++;
    CUgraphNode made;
    r = node_add(g, CU_GRAPH_NODE_TYPE_CONDITIONAL, op, NULL, deps, ndeps, &made);
    if (r != CUDA_SUCCESS) {
        free(bodies);
        return r;
    }
    struct fc_node *n = (struct fc_node *)made;
    n->bodies = bodies;
    for (unsigned i = 0; i < cp->size; i++) {
        struct fc_graph *b = calloc(1, sizeof *b);
        if (!b)
            return CUDA_ERROR_OUT_OF_MEMORY; /* the node stays, with fewer bodies: not freed */
        b->magic = MAGIC_GRAPH;
        b->ctx = g->ctx;
        b->parent = n;
        bodies[i] = (CUgraph)b;
    }
    c->used = 1;
    for (struct fc_graph *a = g; a; a = a->parent ? a->parent->g : NULL)
        a->has_cond = 1;
    cp->phGraph_out = bodies;
    *phGraphNode = made;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies, size_t numDependencies,
                                CUgraphNodeParams *nodeParams)
{
    ENTER(cuGraphAddNode, 1);
    return leave(add_node(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams));
}

/* The form cuGetProcAddress gives from 12030: with edge data (default edges only here). */
CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                   const CUgraphNode *dependencies,
                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                   CUgraphNodeParams *nodeParams)
{
    ENTER(cuGraphAddNode, 1);
    return leave(add_node(phGraphNode, hGraph, dependencies, dependencyData, numDependencies,
                          nodeParams));
}
