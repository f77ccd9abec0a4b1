/* SPDX-License-Identifier: MIT */
/* Graph nodes: adding them, their dependencies, their parameters and attributes. */
#include "internal.h"

void node_free(struct fc_node *n)
{
    if (n->bodies) {
        for (unsigned i = 0; i < n->tmpl->u.cond.size; i++)
            if (n->bodies[i])
                graph_free((struct fc_graph *)n->bodies[i]);
        free(n->bodies);
    }
    if (n->tmpl)
        op_free(n->tmpl);
    if (n->ev)
        event_unref(n->ev);
    free(n->deps);
    free(n->dep_type);
    n->magic = 0;
    free(n);
}

CUresult get_node(CUgraphNode h, struct fc_node **out)
{
    struct fc_node *n = (struct fc_node *)h;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    if (n->magic != MAGIC_NODE)
        die("%p is not a graph node", (void *)h);
    *out = n;
    return CUDA_SUCCESS;
}

/* Adds a node after checking its dependencies belong to g. Takes tmpl and ev. */
CUresult node_add(struct fc_graph *g, CUgraphNodeType type, struct fc_op *tmpl,
                         struct fc_event *ev, const CUgraphNode *deps, size_t ndeps,
                         CUgraphNode *out)
{
    CUresult r = CUDA_SUCCESS;
    struct fc_node *n = NULL;
    if (!out || (ndeps && !deps))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (!node_allowed_in(g, type))
        r = CUDA_ERROR_NOT_SUPPORTED; /* not in a conditional node's body */
    for (size_t i = 0; r == CUDA_SUCCESS && i < ndeps; i++) {
        struct fc_node *d;
        r = get_node(deps[i], &d);
        if (r == CUDA_SUCCESS && d->g != g)
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; r == CUDA_SUCCESS && j < i; j++)
            if (deps[j] == deps[i])
                r = CUDA_ERROR_INVALID_VALUE; /* a duplicate edge */
    }
    if (r == CUDA_SUCCESS && !(n = calloc(1, sizeof *n)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && ndeps && !(n->deps = malloc(ndeps * sizeof *n->deps)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        if (n)
            free(n);
        if (tmpl)
            op_free(tmpl);
        if (ev)
            event_unref(ev);
        return r;
    }
    n->magic = MAGIC_NODE;
    n->g = g;
    n->type = type;
    n->tmpl = tmpl;
    n->ev = ev;
    n->index = g->nnodes++;
    for (size_t i = 0; i < ndeps; i++)
        n->deps[i] = (struct fc_node *)deps[i];
    n->ndeps = n->cap = ndeps;
    if (g->ntail)
        g->ntail->next = n;
    else
        g->nhead = n;
    g->ntail = n;
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

static struct fc_node *graph_nodes_head(struct fc_graph *g)
{
    return g->nhead;
}

/* The function of a kernel node: func (CUkernel is not simulated), in g's context. */
static CUresult node_function(struct fc_graph *g, CUfunction func, struct fc_function **fn)
{
    CUresult r = get_function(func, fn);
    if (r == CUDA_SUCCESS && (*fn)->mod->ctx != g->ctx)
        r = CUDA_ERROR_INVALID_VALUE;
    return r;
}

CUresult kernel_node_op(struct fc_graph *g, const CUDA_KERNEL_NODE_PARAMS *p,
                               struct fc_op **op)
{
    struct fc_function *fn;
    if (!p || p->extra || (!p->func && p->kern))
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = node_function(g, p->func, &fn);
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
    const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
    return kernel_op(fn, grid, block, p->kernelParams, op);
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphAddKernelNode, 1);
    struct fc_graph *g;
    struct fc_op *op = NULL;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = nodeParams ? kernel_node_op(g, nodeParams, &op) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_KERNEL, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

CUresult memset_node_op(const CUDA_MEMSET_NODE_PARAMS *p, struct fc_op **out)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 4) || p->height != 1 || !p->width)
        return CUDA_ERROR_INVALID_VALUE; /* 1D, 8- or 32-bit elements are simulated */
    CUresult r = memset_check(p->dst, p->elementSize, p->width);
    if (r != CUDA_SUCCESS)
        return r;
    *out = memset_op_new((void *)(uintptr_t)p->dst, p->value, p->elementSize, p->width);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    ENTER(cuGraphAddMemsetNode, 1);
    struct fc_graph *g;
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = memset_node_op(memsetParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_MEMSET, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

/* 1D copies between any two addresses (unified addressing): srcDevice/dstDevice or
 * srcHost/dstHost by memory type, WidthInBytes bytes, Height and Depth 1. */
CUresult memcpy_node_op(const CUDA_MEMCPY3D *p, struct fc_op **out)
{
    if (!p || p->Height > 1 || p->Depth > 1 || !p->WidthInBytes || p->srcXInBytes ||
        p->dstXInBytes || p->srcY || p->dstY || p->srcZ || p->dstZ)
        return CUDA_ERROR_INVALID_VALUE;
    const void *src = p->srcMemoryType == CU_MEMORYTYPE_HOST ? p->srcHost
                                                              : (const void *)(uintptr_t)p->srcDevice;
    void *dst = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost : (void *)(uintptr_t)p->dstDevice;
    if (!src || !dst)
        return CUDA_ERROR_INVALID_VALUE;
    *out = copy_op_new(dst, src, p->WidthInBytes);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    ENTER(cuGraphAddMemcpyNode, 1);
    struct fc_graph *g;
    struct fc_op *op = NULL;
    (void)ctx;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = memcpy_node_op(copyParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_MEMCPY, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                    const CUgraphNode *dependencies, size_t numDependencies,
                                    const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphAddHostNode, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && (!nodeParams || !nodeParams->fn))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_op *op = host_op_new(nodeParams->fn, nodeParams->userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_HOST, op, NULL, dependencies, numDependencies,
                          phGraphNode));
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies, size_t numDependencies)
{
    ENTER(cuGraphAddEmptyNode, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_add(g, CU_GRAPH_NODE_TYPE_EMPTY, NULL, NULL, dependencies, numDependencies,
                          phGraphNode));
}

static CUresult event_node_add(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                               size_t ndeps, CUevent event, CUgraphNodeType type)
{
    struct fc_graph *g;
    struct fc_event *e;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        r = get_event(event, &e, 0);
    if (r == CUDA_SUCCESS && e->ctx != g->ctx)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    e->refs++;
    return node_add(g, type, NULL, e, deps, ndeps, out);
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                           const CUgraphNode *dependencies,
                                           size_t numDependencies, CUevent event)
{
    ENTER(cuGraphAddEventRecordNode, 1);
    return leave(event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event,
                                CU_GRAPH_NODE_TYPE_EVENT_RECORD));
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         CUevent event)
{
    ENTER(cuGraphAddEventWaitNode, 1);
    return leave(event_node_add(phGraphNode, hGraph, dependencies, numDependencies, event,
                                CU_GRAPH_NODE_TYPE_WAIT_EVENT));
}

static CUresult add_dependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                 const CUgraphEdgeData *edgeData, size_t numDependencies);

CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from,
                                        const CUgraphNode *to, size_t numDependencies)
{
    ENTER(cuGraphAddDependencies, 1);
    return leave(add_dependencies(hGraph, from, to, NULL, numDependencies));
}

/* What cuGetProcAddress gives for cuGraphAddDependencies from 12030 (seen on an H200): edge
 * data may be NULL or all-default edges, or programmatic edges between two kernel nodes
 * (type CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC from the port CU_GRAPH_KERNEL_NODE_PORT_
 * PROGRAMMATIC or _LAUNCH_ORDER, as cuda.h documents): the downstream kernel may then start
 * before the upstream one has finished (it runs after it here). Other ports and edge types:
 * CUDA_ERROR_INVALID_VALUE. */
CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                           const CUgraphNode *to, const CUgraphEdgeData *edgeData,
                                           size_t numDependencies)
{
    ENTER(cuGraphAddDependencies, 1);
    return leave(add_dependencies(hGraph, from, to, edgeData, numDependencies));
}

/* The type of an edge from a to b with edge data d (NULL: default), or -1 if refused. */
static int edge_type(const struct fc_node *a, const struct fc_node *b, const CUgraphEdgeData *d)
{
    if (!d)
        return CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;
    for (size_t i = 0; i < sizeof d->reserved; i++)
        if (d->reserved[i])
            return -1;
    if (d->to_port)
        return -1; /* "no node types define non-zero ports" */
    if (d->type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
        return d->from_port == CU_GRAPH_KERNEL_NODE_PORT_DEFAULT ? CU_GRAPH_DEPENDENCY_TYPE_DEFAULT
                                                                : -1;
    if (d->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC && a->type == CU_GRAPH_NODE_TYPE_KERNEL &&
        b->type == CU_GRAPH_NODE_TYPE_KERNEL &&
        (d->from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC ||
         d->from_port == CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER))
        return CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    return -1;
}

/* Adds the edge a -> b of the given type (a dependency of b). */
static CUresult edge_add(struct fc_node *a, struct fc_node *b, int type)
{
    if (b->ndeps == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4;
        struct fc_node **d = realloc(b->deps, cap * sizeof *d);
        if (!d)
            return CUDA_ERROR_OUT_OF_MEMORY;
        b->deps = d;
        if (b->dep_type) {
            unsigned char *t = realloc(b->dep_type, cap);
            if (!t)
                return CUDA_ERROR_OUT_OF_MEMORY;
            b->dep_type = t;
        }
        b->cap = cap;
    }
    if (type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && !b->dep_type) {
        b->dep_type = calloc(b->cap, 1);
        if (!b->dep_type)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (b->dep_type)
        b->dep_type[b->ndeps] = (unsigned char)type;
    b->deps[b->ndeps++] = a;
    return CUDA_SUCCESS;
}

static CUresult add_dependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                 const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && numDependencies && (!from || !to))
        r = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; r == CUDA_SUCCESS && i < numDependencies; i++) {
        struct fc_node *a, *b;
        r = get_node(from[i], &a);
        if (r == CUDA_SUCCESS)
            r = get_node(to[i], &b);
        if (r == CUDA_SUCCESS && (a->g != g || b->g != g || a == b))
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; r == CUDA_SUCCESS && j < b->ndeps; j++)
            if (b->deps[j] == a)
                r = CUDA_ERROR_INVALID_VALUE; /* already there */
        int type = r == CUDA_SUCCESS ? edge_type(a, b, edgeData ? &edgeData[i] : NULL) : 0;
        if (r == CUDA_SUCCESS && type < 0)
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            r = edge_add(a, b, type);
    }
    return r;
}

/* Gives dependency d of node n a type (cloning a graph, or a capture's programmatic edge). */
CUresult node_dep_set_type(struct fc_node *n, size_t d, int type)
{
    if (!n->dep_type && type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
        return CUDA_SUCCESS;
    if (!n->dep_type && !(n->dep_type = calloc(n->cap ? n->cap : 1, 1)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->dep_type[d] = (unsigned char)type;
    return CUDA_SUCCESS;
}

/* The type of dependency d of node n. */
int node_dep_type(const struct fc_node *n, size_t d)
{
    return n->dep_type ? n->dep_type[d] : CU_GRAPH_DEPENDENCY_TYPE_DEFAULT;
}

/* ---- setting a graph node's parameters (not an exec's): kind must match; a kernel node keeps
 * its launch attributes; setting a live event over one destroyed since is fine (as on an
 * H200) ---- */

static CUresult node_set_op(CUgraphNode h, CUgraphNodeType type, struct fc_op *op)
{
    struct fc_node *n;
    CUresult r = get_node(h, &n);
    if (r == CUDA_SUCCESS && n->type != type)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS) {
        op_free(op);
        return r;
    }
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
        kernel_attrs_copy(op, n->tmpl);
        if (!kernel_shape_fits(op)) { /* the node's cluster dimension must divide the grid */
            op_free(op);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    op_free(n->tmpl);
    n->tmpl = op;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                               const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphKernelNodeSetParams, 1);
    struct fc_node *n;
    struct fc_op *op = NULL;
    CUresult r = get_node(hNode, &n);
    if (r == CUDA_SUCCESS)
        r = nodeParams ? kernel_node_op(n->g, nodeParams, &op) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_KERNEL, op));
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode hNode,
                                            const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphMemsetNodeSetParams, 1);
    struct fc_op *op = NULL;
    CUresult r = memset_node_op(nodeParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_MEMSET, op));
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    ENTER(cuGraphMemcpyNodeSetParams, 1);
    struct fc_op *op = NULL;
    CUresult r = memcpy_node_op(nodeParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, op));
}

CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    ENTER(cuGraphHostNodeSetParams, 1);
    if (!nodeParams || !nodeParams->fn)
        return leave(CUDA_ERROR_INVALID_VALUE);
    struct fc_op *op = host_op_new(nodeParams->fn, nodeParams->userData);
    if (!op)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    return leave(node_set_op(hNode, CU_GRAPH_NODE_TYPE_HOST, op));
}

static CUresult node_set_event(CUgraphNode h, CUevent event, CUgraphNodeType type)
{
    struct fc_node *n;
    struct fc_event *ev;
    CUresult r = get_node(h, &n);
    if (r == CUDA_SUCCESS)
        r = get_event(event, &ev, 0);
    if (r == CUDA_SUCCESS && (n->type != type || ev->ctx != n->g->ctx))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    ev->refs++;
    event_unref(n->ev);
    n->ev = ev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    ENTER(cuGraphEventRecordNodeSetEvent, 1);
    return leave(node_set_event(hNode, event, CU_GRAPH_NODE_TYPE_EVENT_RECORD));
}

CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    ENTER(cuGraphEventWaitNodeSetEvent, 1);
    return leave(node_set_event(hNode, event, CU_GRAPH_NODE_TYPE_WAIT_EVENT));
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    ENTER(cuGraphGetNodes, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && !numNodes)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    size_t i = 0;
    for (struct fc_node *n = graph_nodes_head(g); n; n = n->next, i++)
        if (nodes && i < *numNodes)
            nodes[i] = (CUgraphNode)n;
    if (!nodes || i < *numNodes)
        *numNodes = i;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    ENTER(cuGraphNodeGetType, 1);
    struct fc_node *n;
    CUresult r = type ? get_node(hNode, &n) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *type = n->type;
    return leave(r);
}

/* A kernel node's launch attribute (its value when never set: 0, a cluster of 1 x 1 x 1). */
CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               CUkernelNodeAttrValue *value_out)
{
    ENTER(cuGraphKernelNodeGetAttribute, 1);
    struct fc_node *n;
    CUresult r = value_out ? get_node(hNode, &n) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && n->type != CU_GRAPH_NODE_TYPE_KERNEL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(kernel_attr_get(n->tmpl, attr, value_out));
}

/* Sets a kernel node's launch attribute (kernel_attr_set says which and how they are
 * checked). An exec instantiated before keeps the attributes it was instantiated with. */
CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               const CUkernelNodeAttrValue *value)
{
    ENTER(cuGraphKernelNodeSetAttribute, 1);
    struct fc_node *n;
    CUresult r = value ? get_node(hNode, &n) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && n->type != CU_GRAPH_NODE_TYPE_KERNEL)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_op probe = *n->tmpl; /* checked on a copy: a refused value changes nothing */
    r = kernel_attr_set(&probe, attr, value, 1);
    if (r == CUDA_SUCCESS)
        kernel_attrs_copy(n->tmpl, &probe);
    return leave(r);
}
