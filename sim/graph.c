/* SPDX-License-Identifier: MIT */
/* Graphs: creation, destruction, cloning, the nodes a capture becomes, DOT output, and the
 * check that no two threads use one CUgraph at once. */
#include "internal.h"

/* ========================================================================================
 * Graphs: node graphs built with cuGraphAdd*Node (or by capture), instantiated into execs.
 * An exec holds one template operation per node in a topological order; a launch queues a
 * copy of each on the stream, so the nodes run one after another in dependency order (one
 * valid schedule of the DAG). As on an H200 (driver 580.159): launches of one exec never
 * overlap (a launch on another stream waits for the previous one), updates of grid, block,
 * shared memory, arguments and even the function of a kernel node are accepted, memset
 * nodes take a new value, element size or destination, and cuGraphExecUpdate refuses a
 * changed topology (CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED).
 * ======================================================================================== */

_Atomic int g_live_graphs; /* graphs created and not destroyed (clones, captures) */

CUresult get_graph(CUgraph h, struct fc_graph **out)
{
    struct fc_graph *g = (struct fc_graph *)h;
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    if (g->magic != MAGIC_GRAPH)
        die("%p is not a graph", (void *)h);
    if (!ctx_alive(g->ctx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = g;
    return CUDA_SUCCESS;
}

struct fc_graph *graph_new(struct fc_ctx *c)
{
    struct fc_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    atomic_fetch_add(&g_live_graphs, 1);
    g->magic = MAGIC_GRAPH;
    g->ctx = c;
    g->next = c->graphs;
    if (g->next)
        g->next->prev = g;
    c->graphs = g;
    return g;
}

void graph_free(struct fc_graph *g)
{
    struct fc_ctx *c = g->ctx;
    if (g->parent) {
        /* a conditional node's body: in no list, freed with its node */
    } else if (g->prev) {
        g->prev->next = g->next;
    } else {
        c->graphs = g->next;
    }
    if (!g->parent && g->next)
        g->next->prev = g->prev;
    while (g->head) {
        struct fc_op *op = g->head;
        g->head = op->next;
        op_free(op);
    }
    while (g->nhead) {
        struct fc_node *n = g->nhead;
        g->nhead = n->next;
        node_free(n);
    }
    for (struct fc_exec *e = c->execs; e; e = e->next)
        if (e->src == g)
            e->src = NULL;
    for (size_t i = 0; i < g->nconds; i++)
        cond_unref(g->conds[i]);
    free(g->conds);
    int body = g->parent != NULL;
    g->magic = 0;
    free(g);
    if (!body)
        atomic_fetch_sub(&g_live_graphs, 1);
}

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    ENTER(cuGraphCreate, 1);
    struct fc_ctx *c;
    if (!phGraph || flags)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_graph *g = graph_new(c);
    if (!g)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    *phGraph = (CUgraph)g;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    ENTER(cuGraphDestroy, 1);
    struct fc_graph *g;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS)
        graph_free(g);
    return leave(r);
}

/* A copy of a graph: every node (parameters copied, events referenced) and edge, in the same
 * order; each copy remembers its original for cuGraphNodeFindInClone. */
CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    ENTER(cuGraphClone, 1);
    struct fc_graph *g;
    CUresult r = phGraphClone ? get_graph(originalGraph, &g) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (g->has_cond) /* as on an H200 */
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    int slot = graph_use_begin(g);
    struct fc_graph *c = graph_new(g->ctx);
    struct fc_node **copy = malloc((g->nnodes ? g->nnodes : 1) * sizeof *copy);
    if (!c || !copy)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (struct fc_node *n = g->nhead; r == CUDA_SUCCESS && n; n = n->next) {
        CUgraphNode deps[64], made;
        if (n->ndeps > 64) {
            r = CUDA_ERROR_NOT_SUPPORTED;
            break;
        }
        for (size_t j = 0; j < n->ndeps; j++)
            deps[j] = (CUgraphNode)copy[n->deps[j]->index];
        struct fc_op *op = NULL;
        if (n->tmpl && !(op = op_clone(n->tmpl))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        if (n->ev)
            n->ev->refs++;
        r = node_add(c, n->type, op, n->ev, deps, n->ndeps, &made);
        if (r == CUDA_SUCCESS) {
            copy[n->index] = (struct fc_node *)made;
            copy[n->index]->origin = n;
            for (size_t j = 0; r == CUDA_SUCCESS && j < n->ndeps; j++)
                r = node_dep_set_type(copy[n->index], j, node_dep_type(n, j));
        }
    }
    graph_use_end(slot);
    free(copy);
    if (r != CUDA_SUCCESS) {
        if (c)
            graph_free(c);
        return leave(r);
    }
    *phGraphClone = (CUgraph)c;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                        CUgraph hClonedGraph)
{
    ENTER(cuGraphNodeFindInClone, 1);
    struct fc_graph *c;
    CUresult r = phNode && hOriginalNode ? get_graph(hClonedGraph, &c) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    for (struct fc_node *n = c->nhead; n; n = n->next)
        if (n->origin == (const void *)hOriginalNode) {
            *phNode = (CUgraphNode)n;
            return leave(CUDA_SUCCESS);
        }
    return leave(CUDA_ERROR_INVALID_VALUE);
}

/* A CUgraph is not internally synchronised (CUDA documentation); on the H200, threads
 * instantiating one graph at once were followed by heap corruption or a hang. The simulation
 * makes such use fail loudly: a thread inside a call that reads a graph claims it here, and
 * a second thread on the same graph at the same time aborts the process. The window is
 * widened so that tests meet an overlap when there is one. */
static _Atomic(void *) graph_users[128];

int graph_use_begin(void *g)
{
    int mine = -1;
    for (int i = 0; i < 128 && mine < 0; i++) {
        void *none = NULL;
        if (atomic_compare_exchange_strong(&graph_users[i], &none, g))
            mine = i;
    }
    for (int i = 0; i < 128; i++)
        if (i != mine && atomic_load(&graph_users[i]) == g) {
            fprintf(stderr, "fakecuda: two threads use CUgraph %p at once (a CUgraph is not "
                            "thread-safe)\n", g);
            abort();
        }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
    return mine;
}

void graph_use_end(int slot)
{
    if (slot >= 0)
        atomic_store(&graph_users[slot], NULL);
}

/* Turns the operations recorded by a capture into a chain of nodes (each depends on the one
 * before), as the driver does for work captured on one stream. A kernel launched with
 * programmatic stream serialization after a kernel depends on it through a programmatic
 * edge. */
CUresult capture_to_nodes(struct fc_graph *g)
{
    CUgraphNode prev = NULL;
    CUgraphNodeType prev_type = CU_GRAPH_NODE_TYPE_EMPTY;
    while (g->head) {
        struct fc_op *op = g->head;
        g->head = op->next;
        if (!g->head)
            g->tail = NULL;
        g->nops--;
        op->next = NULL;
        CUgraphNodeType type;
        struct fc_event *ev = NULL;
        switch (op->kind) {
        case OP_KERNEL: type = CU_GRAPH_NODE_TYPE_KERNEL; break;
        case OP_MEMSET: type = CU_GRAPH_NODE_TYPE_MEMSET; break;
        case OP_COPY: type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
        case OP_HOSTFN: type = CU_GRAPH_NODE_TYPE_HOST; break;
        case OP_RECORD:
            type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
            ev = op->u.rec.ev;
            ev->refs++;
            op_free(op);
            op = NULL;
            break;
        default: /* OP_WAIT */
            if (!op->u.wait.ev) {
                /* a wait on another queue (a graph launch ordered after the same exec's
                 * launch elsewhere): a property of that launch, not captured work */
                op_free(op);
                continue;
            }
            type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
            ev = op->u.wait.ev;
            ev->refs++;
            op_free(op);
            op = NULL;
            break;
        }
        int programmatic = op && op->kind == OP_KERNEL && op->u.k.programmatic;
        if (programmatic)
            op->u.k.programmatic = 0; /* an edge's property in a graph */
        CUgraphNode n;
        CUresult r = node_add(g, type, op, ev, prev ? &prev : NULL, prev ? 1 : 0, &n);
        if (r == CUDA_SUCCESS && prev && programmatic && prev_type == CU_GRAPH_NODE_TYPE_KERNEL)
            r = node_dep_set_type((struct fc_node *)n, 0, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC);
        if (r != CUDA_SUCCESS)
            return r;
        prev = n;
        prev_type = type;
    }
    return CUDA_SUCCESS;
}

static const char *node_type_name(CUgraphNodeType t)
{
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "KERNEL";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "EVENT_RECORD";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "CONDITIONAL";
    default: return "OTHER";
    }
}

/* A DOT file like the driver's in outline: one record per node, labelled with its type (and
 * a kernel's name and launch shape), and an edge per dependency. */
CUresult CUDAAPI cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
    ENTER(cuGraphDebugDotPrint, 1);
    struct fc_graph *g;
    (void)flags;
    CUresult r = get_graph(hGraph, &g);
    if (r == CUDA_SUCCESS && !path)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return leave(r);
    FILE *f = fopen(path, "w");
    if (!f)
        return leave(CUDA_ERROR_OPERATING_SYSTEM);
    fprintf(f, "digraph dot {\nsubgraph cluster_1 {\nlabel=\"graph_1\" graph[style=\"dashed\"];\n");
    for (struct fc_node *n = g->nhead; n; n = n->next) {
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL)
            fprintf(f, "\"graph_1_node_%zu\"[shape=\"record\" label=\"{KERNEL | {ID | %zu | %s\\<\\<\\<%u,%u,0\\>\\>\\>}}\"];\n",
                    n->index, n->index, g_kernels[n->tmpl->u.k.slot].name,
                    n->tmpl->u.k.grid[0], n->tmpl->u.k.block[0]);
        else
            fprintf(f, "\"graph_1_node_%zu\"[shape=\"record\" label=\"{%s | {ID | %zu}}\"];\n",
                    n->index, node_type_name(n->type), n->index);
    }
    for (struct fc_node *n = g->nhead; n; n = n->next)
        for (size_t i = 0; i < n->ndeps; i++)
            fprintf(f, "\"graph_1_node_%zu\" -> \"graph_1_node_%zu\"%s;\n", n->deps[i]->index,
                    n->index,
                    node_dep_type(n, i) == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
                        ? " [style=\"dashed\" label=\"programmatic\"]"
                        : "");
    fprintf(f, "}\n}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return leave(CUDA_ERROR_OPERATING_SYSTEM);
    return leave(CUDA_SUCCESS);
}
