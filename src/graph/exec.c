/* SPDX-License-Identifier: MIT */
/*
 * Execs: node parameters, template clones, instantiation, choosing an exec for a launch,
 * updating it; the eager fallback.
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

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

/* ---- driver parameters of a node ---- */

static void kernel_params(const struct pnode *n, const unsigned char *args, void **argv,
                          CUDA_KERNEL_NODE_PARAMS *kp)
{
    const struct fninfo *fi = n->u.k.info;
    for (uint32_t i = 0; i < fi->nparams; i++)
        argv[i] = (void *)(args + n->u.k.arg_off + fi->param[i].off);
    memset(kp, 0, sizeof(*kp));
    kp->func = n->u.k.fn;
    const uint32_t *sh = n->u.k.shape;
    kp->gridDimX = sh[0], kp->gridDimY = sh[1], kp->gridDimZ = sh[2];
    kp->blockDimX = sh[3], kp->blockDimY = sh[4], kp->blockDimZ = sh[5];
    kp->sharedMemBytes = sh[6];
    kp->kernelParams = fi->nparams ? argv : NULL;
}

static void memset_params(const struct pnode *n, CUDA_MEMSET_NODE_PARAMS *mp)
{
    memset(mp, 0, sizeof(*mp));
    mp->dst = n->u.set.dst;
    mp->value = n->u.set.value;
    mp->elementSize = n->u.set.elem;
    mp->width = n->u.set.count;
    mp->height = 1;
}

static void memcpy_params(const struct pnode *n, CUDA_MEMCPY3D *cp)
{
    memset(cp, 0, sizeof(*cp));
    cp->srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    cp->srcDevice = n->u.copy.src;
    cp->dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    cp->dstDevice = n->u.copy.dst;
    cp->WidthInBytes = n->u.copy.bytes;
    cp->Height = cp->Depth = 1;
}

bool cupool__argv_room_grow(struct cupool_pipeline *p)
{
    size_t need = p->max_params ? p->max_params : 1;
    return p->argvcap >= need || GROW(p->argv, p->argvcap, need);
}

/* A conditional node's setter kernel: cupool_set_cond(handle, value), one thread. */
static void setter_params(CUfunction fn, CUgraphConditionalHandle *h, uint32_t *value,
                          void **argv, CUDA_KERNEL_NODE_PARAMS *kp)
{
    memset(kp, 0, sizeof(*kp));
    kp->func = fn;
    kp->gridDimX = kp->gridDimY = kp->gridDimZ = 1;
    kp->blockDimX = kp->blockDimY = kp->blockDimZ = 1;
    argv[0] = h;
    argv[1] = value;
    kp->kernelParams = argv;
}

/* Builds a graph of the pipeline into *graph_out: gnodes[i] gets node i's graph node (for a
 * conditional node, its setter kernel's, which updates name), handles[i] a conditional node's
 * handle (handles NULL: the pipeline has none). A node inside a body goes into the body graph
 * the driver gave its conditional node, after its dependencies there. Not under the cache
 * lock; on failure the caller destroys *graph_out (NULL when none was made). */
static CUresult graph_build_into(struct gentry *e, struct cupool_pipeline *p, CUgraph *graph_out,
                                 CUgraphNode *gnodes, CUgraphConditionalHandle *handles)
{
    *graph_out = NULL;
    CUgraph graph = NULL;
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphCreate(&graph, 0));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGraphCreate failed");
    *graph_out = graph;
    /* what a dependency on node i names (a conditional node's own node, not its setter), and
     * the body graphs of each conditional node */
    CUgraphNode *depn = gnodes;
    CUgraph **bodies = NULL;
    if (handles) {
        depn = cupool__alloc(p->n * sizeof(*depn));
        bodies = cupool__alloc(p->n * sizeof(*bodies));
        if (!depn || !bodies) {
            cupool__free(depn, p->n * sizeof(*depn));
            cupool__free(bodies, p->n * sizeof(*bodies));
            return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory to build a graph");
        }
    }
    CUgraphNode deps_buf[16], *deps = deps_buf;
    size_t depcap = 16;
    bool said = false; /* the failure was described already */
    for (uint32_t i = 0; i < p->n && r == CUDA_SUCCESS; i++) {
        const struct pnode *n = &p->nodes[i];
        if (n->ndeps > depcap) {
            if (deps != deps_buf)
                cupool__free(deps, depcap * sizeof(*deps));
            depcap = n->ndeps;
            deps = cupool__alloc(depcap * sizeof(*deps));
            if (!deps) {
                deps = deps_buf; /* nothing to free later */
                depcap = 16;
                r = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
        }
        for (uint32_t d = 0; d < n->ndeps; d++)
            deps[d] = depn[p->deps[n->dep_start + d]];
        /* the graph it goes into: its conditional node's body, or the top level */
        CUgraph g = n->scope ? bodies[n->scope - 1][n->body] : graph;
        CUgraphNode *out = &gnodes[i];
        switch (n->type) {
        case PN_KERNEL: {
            CUDA_KERNEL_NODE_PARAMS kp;
            kernel_params(n, p->args, p->argv, &kp);
            const struct kattr *ka = n->attr ? &p->kattr[i] : NULL;
            size_t nd = n->ndeps;
            if (ka && ka->programmatic) { /* the kernels it depends on: programmatic edges */
                nd = 0;
                for (uint32_t d = 0; d < n->ndeps; d++) {
                    uint32_t on = p->deps[n->dep_start + d];
                    if (p->nodes[on].type != PN_KERNEL)
                        deps[nd++] = depn[on];
                }
            }
            r = CUPOOL_DRV(cupool__drv.cuGraphAddKernelNode(out, g, deps, nd, &kp));
            if (r == CUDA_SUCCESS && ka) {
                r = cupool__kattr_node_set(*out, ka, i);
                if (r == CUDA_SUCCESS && ka->programmatic)
                    r = cupool__kattr_edges(g, p, i, depn, *out);
                said = r != CUDA_SUCCESS;
            }
            break;
        }
        case PN_MEMSET: {
            CUDA_MEMSET_NODE_PARAMS mp;
            memset_params(n, &mp);
            r = CUPOOL_DRV(cupool__drv.cuGraphAddMemsetNode(out, g, deps, n->ndeps, &mp, e->ctx));
            break;
        }
        case PN_MEMCPY: {
            CUDA_MEMCPY3D cp;
            memcpy_params(n, &cp);
            r = CUPOOL_DRV(cupool__drv.cuGraphAddMemcpyNode(out, g, deps, n->ndeps, &cp, e->ctx));
            break;
        }
        case PN_RECORD:
            r = CUPOOL_DRV(
                cupool__drv.cuGraphAddEventRecordNode(out, g, deps, n->ndeps, n->u.ev.ev));
            break;
        case PN_WAIT:
            r = CUPOOL_DRV(cupool__drv.cuGraphAddEventWaitNode(out, g, deps, n->ndeps, n->u.ev.ev));
            break;
        case PN_COND: {
            /* a handle of its own (the setter sets it at each launch, so its default is never
             * used), the setter kernel after the node's dependencies, the conditional node
             * after the setter */
            CUgraphConditionalHandle h = 0;
            r = CUPOOL_DRV(cupool__drv.cuGraphConditionalHandleCreate(&h, g, e->ctx, 0,
                                                                      CU_GRAPH_COND_ASSIGN_DEFAULT));
            if (r != CUDA_SUCCESS) {
                r = cupool__fail(r, "cuGraphConditionalHandleCreate failed (conditional node %u)",
                                 i);
                said = true;
                break;
            }
            handles[i] = h;
            CUDA_KERNEL_NODE_PARAMS kp;
            void *argv[2];
            uint32_t value = n->u.cond.value;
            setter_params(cupool__setter_fn(e->setter), &handles[i], &value, argv, &kp);
            r = CUPOOL_DRV(cupool__drv.cuGraphAddKernelNode(out, g, deps, n->ndeps, &kp));
            if (r != CUDA_SUCCESS)
                break;
            CUgraphNodeParams np;
            memset(&np, 0, sizeof(np));
            np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
            np.conditional.handle = h;
            np.conditional.type =
                n->u.cond.kind == PC_SWITCH ? CU_GRAPH_COND_TYPE_SWITCH : CU_GRAPH_COND_TYPE_IF;
            np.conditional.size = n->u.cond.nbodies;
            np.conditional.ctx = e->ctx;
            r = CUPOOL_DRV(cupool__drv.cuGraphAddNode(&depn[i], g, out, NULL, 1, &np));
            if (r != CUDA_SUCCESS) {
                r = cupool__fail(r, "adding conditional node %u (cuGraphAddNode) failed", i);
                said = true;
                break;
            }
            bodies[i] = np.conditional.phGraph_out;
            continue; /* depn[i] is the conditional node */
        }
        default: {
            CUDA_HOST_NODE_PARAMS hp = {n->u.host.fn, n->u.host.user};
            r = CUPOOL_DRV(cupool__drv.cuGraphAddHostNode(out, g, deps, n->ndeps, &hp));
            break;
        }
        }
        if (depn != gnodes)
            depn[i] = gnodes[i];
    }
    if (deps != deps_buf)
        cupool__free(deps, depcap * sizeof(*deps));
    if (depn != gnodes) {
        cupool__free(depn, p->n * sizeof(*depn));
        cupool__free(bodies, p->n * sizeof(*bodies));
    }
    if (r != CUDA_SUCCESS && !said)
        return cupool__fail(r, "adding node to a pipeline graph failed");
    return r;
}

/* Builds the template graph of an entry from the pipeline. Not under the cache lock. */
static CUresult graph_build(struct gentry *e, struct cupool_pipeline *p)
{
    return graph_build_into(e, p, &e->graph, e->gnodes, NULL); /* the caller destroys it */
}

/* A graph of its own for an exec of e, a pipeline with conditional nodes (such a graph can be
 * instantiated once only and not cloned): built from the description p, with a conditional
 * handle of its own per conditional node. *nodes and *handles get e->n entries each. On
 * failure nothing is left behind. */
CUresult cupool__exec_graph_new(struct gentry *e, struct cupool_pipeline *p, CUgraph *graph,
                                CUgraphNode **nodes, CUgraphConditionalHandle **handles)
{
    *graph = NULL;
    *nodes = cupool__alloc(e->n * sizeof(**nodes));
    *handles = cupool__alloc(e->n * sizeof(**handles));
    CUresult r = CUDA_SUCCESS;
    if (!*nodes || !*handles || !cupool__argv_room(p))
        r = cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph exec");
    else
        r = graph_build_into(e, p, graph, *nodes, *handles);
    if (r != CUDA_SUCCESS) {
        cupool__exec_graph_free(e, *graph, *nodes, *handles, e->n);
        *graph = NULL;
        *nodes = NULL;
        *handles = NULL;
    }
    return r;
}

/* Lets go of what cupool__exec_graph_new made. */
void cupool__exec_graph_free(struct gentry *e, CUgraph graph, CUgraphNode *nodes,
                             CUgraphConditionalHandle *handles, uint32_t n)
{
    cupool__objects_destroy(NULL, graph, NULL, e->ctx, e->ctx_id);
    cupool__free(nodes, nodes ? n * sizeof(*nodes) : 0);
    cupool__free(handles, handles ? n * sizeof(*handles) : 0);
}

/* A CUgraph is not internally synchronised (CUDA driver API documentation): a cached entry's
 * template graph is used by one thread at a time. On the H200, eight threads instantiating
 * one template graph at once were followed by heap corruption in the process ("double free
 * or corruption") or a hang. Instantiations from a template (the rare miss path) and DOT
 * output take this lock. */
/* (Nests with no other cupool lock: docs/design.md, "Locks".) */
pthread_mutex_t cupool__template_lock = PTHREAD_MUTEX_INITIALIZER;

/* A clone of e's template and the clone's nodes in the template's order (e->n of them),
 * under the template's lock. On failure nothing is left behind. */
CUresult cupool__template_clone(struct gentry *e, CUgraph *graph, CUgraphNode **nodes)
{
    *nodes = NULL;
    CUgraphNode *n = e->n ? cupool__alloc(e->n * sizeof(*n)) : NULL;
    if (e->n && !n)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph exec");
    *graph = NULL;
    pthread_mutex_lock(&cupool__template_lock);
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphClone(graph, e->graph));
    bool cloned = r == CUDA_SUCCESS;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < e->n; i++)
        r = CUPOOL_DRV(cupool__drv.cuGraphNodeFindInClone(&n[i], e->gnodes[i], *graph));
    pthread_mutex_unlock(&cupool__template_lock);
    if (r != CUDA_SUCCESS) {
        if (cloned)
            cupool__objects_destroy(NULL, *graph, NULL, e->ctx, e->ctx_id);
        *graph = NULL;
        cupool__free(n, e->n * sizeof(*n));
        return cupool__fail(r, "cloning a cached template graph failed");
    }
    *nodes = n;
    return CUDA_SUCCESS;
}

static bool kernel_same(const struct pnode *n, const struct pnode *o);

/* What a conditional node's update needs: the setter kernel and the exec's handles. */
struct condargs {
    const struct gentry *e;
    const struct gexec *x;
};

/* Sets node i of p into the graph node gn: through the exec when exec is given
 * (cuGraphExec*SetParams: an update), else into a graph not instantiated yet (cuGraph*
 * SetParams). One driver call; a conditional node's is its setter kernel's (its branch value
 * and x's handle). Returns the driver's error (not recorded: the callers say what failed). */
static CUresult node_set(const struct cupool_pipeline *p, uint32_t i, CUgraphNode gn,
                         CUgraphExec exec, CUcontext ctx, const struct condargs *ca)
{
    const struct pnode *n = &p->nodes[i];
    switch (n->type) {
    case PN_COND: {
        CUDA_KERNEL_NODE_PARAMS kp;
        void *argv[2];
        CUgraphConditionalHandle h = ca->x->handles[i];
        uint32_t value = n->u.cond.value;
        setter_params(cupool__setter_fn(ca->e->setter), &h, &value, argv, &kp);
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecKernelNodeSetParams(exec, gn, &kp))
                    : CUPOOL_DRV(cupool__drv.cuGraphKernelNodeSetParams(gn, &kp));
    }
    case PN_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS kp;
        kernel_params(n, p->args, p->argv, &kp);
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecKernelNodeSetParams(exec, gn, &kp))
                    : CUPOOL_DRV(cupool__drv.cuGraphKernelNodeSetParams(gn, &kp));
    }
    case PN_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS mp;
        memset_params(n, &mp);
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecMemsetNodeSetParams(exec, gn, &mp, ctx))
                    : CUPOOL_DRV(cupool__drv.cuGraphMemsetNodeSetParams(gn, &mp));
    }
    case PN_MEMCPY: {
        CUDA_MEMCPY3D cp;
        memcpy_params(n, &cp);
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecMemcpyNodeSetParams(exec, gn, &cp, ctx))
                    : CUPOOL_DRV(cupool__drv.cuGraphMemcpyNodeSetParams(gn, &cp));
    }
    case PN_RECORD:
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecEventRecordNodeSetEvent(exec, gn,
                                                                               n->u.ev.ev))
                    : CUPOOL_DRV(cupool__drv.cuGraphEventRecordNodeSetEvent(gn, n->u.ev.ev));
    case PN_WAIT:
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecEventWaitNodeSetEvent(exec, gn,
                                                                             n->u.ev.ev))
                    : CUPOOL_DRV(cupool__drv.cuGraphEventWaitNodeSetEvent(gn, n->u.ev.ev));
    default: {
        CUDA_HOST_NODE_PARAMS hp = {n->u.host.fn, n->u.host.user};
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecHostNodeSetParams(exec, gn, &hp))
                    : CUPOOL_DRV(cupool__drv.cuGraphHostNodeSetParams(gn, &hp));
    }
    }
}

/* Whether node i of p carries the parameters of o (with its argument bytes old_args). */
static bool node_same(const struct cupool_pipeline *p, uint32_t i, const struct pnode *o,
                      const unsigned char *old_args)
{
    const struct pnode *n = &p->nodes[i];
    switch (n->type) {
    case PN_KERNEL:
        return kernel_same(n, o) &&
               (!n->u.k.info->bytes || memcmp(p->args + n->u.k.arg_off,
                                              old_args + o->u.k.arg_off, n->u.k.info->bytes) == 0);
    case PN_MEMSET:
        return memcmp(&n->u.set, &o->u.set, sizeof n->u.set) == 0;
    case PN_MEMCPY:
        return memcmp(&n->u.copy, &o->u.copy, sizeof n->u.copy) == 0;
    case PN_RECORD:
    case PN_WAIT:
        return n->u.ev.ev == o->u.ev.ev;
    case PN_COND:
        return n->u.cond.value == o->u.cond.value;
    default:
        return memcmp(&n->u.host, &o->u.host, sizeof n->u.host) == 0;
    }
}

/* node_set when node i differs from o (*set true then); nothing otherwise. */
static CUresult node_set_changed(const struct cupool_pipeline *p, uint32_t i,
                                 const struct pnode *o, const unsigned char *old_args,
                                 CUgraphNode gn, CUgraphExec exec, CUcontext ctx,
                                 const struct condargs *ca, bool *set)
{
    *set = !node_same(p, i, o, old_args);
    return *set ? node_set(p, i, gn, exec, ctx, ca) : CUDA_SUCCESS;
}

/* node_set_changed for every node of p (old[], old_args: the description the graph nodes
 * gn[] last carried). *count: the nodes set. Stops at the first error, which it returns. */
static CUresult nodes_set_changed(const struct cupool_pipeline *p, const struct pnode *old,
                                  const unsigned char *old_args, const CUgraphNode *gn,
                                  CUgraphExec exec, CUcontext ctx, const struct condargs *ca,
                                  uint64_t *count)
{
    *count = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        bool set;
        CUresult r = node_set_changed(p, i, &old[i], old_args, gn[i], exec, ctx, ca, &set);
        if (r != CUDA_SUCCESS)
            return r;
        *count += set;
    }
    return CUDA_SUCCESS;
}

/* Gives the nodes of an exec's own clone of e's template the parameters of the launching
 * description p, before the clone is instantiated: a template keeps the parameters of the
 * launch that built it, and nothing of an earlier description may reach an instantiation.
 * On the H200 (driver 580.159, 2026-12-01) cuGraphInstantiateWithFlags crashed on a graph
 * whose event node named an event destroyed since (a pooled event, released and trimmed),
 * while cloning, destroying and launching such graphs did not, and setting a live event
 * into the clone made it instantiate cleanly. Only the nodes that differ are set (one driver
 * call each, on the instantiation path only). */
CUresult cupool__clone_take_params(const struct gentry *e, const struct gexec *x,
                                   struct cupool_pipeline *p)
{
    uint64_t set;
    const struct condargs ca = {e, x};
    CUresult r = nodes_set_changed(p, e->tmpl, e->tmpl_args, x->nodes, NULL, e->ctx, &ca, &set);
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "setting the parameters of a new exec's graph failed (%u nodes set)",
                            (unsigned)set);
    return CUDA_SUCCESS;
}

/* A new exec of e, owned by the caller: of graph when given (a capture's own), else of a
 * clone of e's template carrying the parameters of p (the launching pipeline; NULL: the
 * template's own, as when p built it). Instantiated with e's flags, and uploaded on *upload
 * (the stream of the launch it is for) when upload is not NULL (cupool__instantiate_gated). */
CUresult cupool__exec_new_of(struct gentry *e, CUgraph graph, struct cupool_pipeline *p,
                             const CUstream *upload, struct gexec **out)
{
    struct gexec *x = cupool__exec_struct_get();
    if (!x)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph exec");
    x->entry = e;
    /* A capture's own graph is this call's alone. The template is shared, and instantiated
     * only through a clone of its own per exec: on the H200, instantiating a graph while an
     * exec of that same graph was running and another thread sat in cuStreamSynchronize
     * stalled for as long as the queued work took to drain (2 of 44 trials; 0 of 32 from a
     * fresh clone, 0 of 24 from another graph). The clone's nodes name the exec's nodes in
     * updates. */
    CUresult r = CUDA_SUCCESS;
    if (!graph && e->ncond) {
        /* a graph of its own, from the launching description (never cloned: see above) */
        r = cupool__exec_graph_new(e, p, &x->graph, &x->nodes, &x->handles);
        if (r == CUDA_SUCCESS) {
            x->nnodes = e->n;
            graph = x->graph;
        }
    } else if (!graph) {
        r = cupool__template_clone(e, &x->graph, &x->nodes);
        if (r == CUDA_SUCCESS) {
            x->nnodes = e->n;
            graph = x->graph;
            if (p)
                r = cupool__clone_take_params(e, x, p);
        }
    }
    uint32_t *fp = NULL;
    size_t nfp = 0;
    bool fp_known = false;
    if (r == CUDA_SUCCESS && e->captured)
        fp_known = cupool__graph_fingerprint(graph, &fp, &nfp);
    if (r == CUDA_SUCCESS)
        r = cupool__instantiate_gated(&x->exec, graph, e->inst_flags, upload); /* says why */
    if (r == CUDA_SUCCESS)
        cupool__exec_fp_set(x, fp, nfp, fp_known);
    else
        cupool__free(fp, nfp * sizeof(*fp));
    if (r == CUDA_SUCCESS && x->graph && !x->nnodes) {
        /* no nodes to update (a capture's entry): the clone has served */
        cupool__objects_destroy(NULL, x->graph, NULL, e->ctx, e->ctx_id);
        x->graph = NULL;
    }
    if (r != CUDA_SUCCESS) {
        cupool__objects_destroy(NULL, x->graph, NULL, e->ctx, e->ctx_id);
        cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
        cupool__free(x->handles, x->handles ? x->nnodes * sizeof(*x->handles) : 0);
        x->graph = NULL;
        x->nodes = NULL;
        x->handles = NULL;
        cupool__exec_struct_put_locked(x);
        return r;
    }
    /* its parameters are p's, or the template's */
    if (p ? !cupool__snapshot(x, p)
          : (!cupool__grow((void **)&x->snap, &x->snap_cap, e->n, sizeof(*x->snap)) ||
             !cupool__grow((void **)&x->snap_args, &x->snap_acap, e->tmpl_alen + 1, 1))) {
        cupool__objects_destroy(x->exec, x->graph, NULL, e->ctx, e->ctx_id);
        cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
        cupool__free(x->handles, x->handles ? x->nnodes * sizeof(*x->handles) : 0);
        cupool__free(x->snap, x->snap_cap * sizeof(*x->snap));
        cupool__free(x->snap_args, x->snap_acap);
        cupool__exec_fp_set(x, NULL, 0, false);
        cupool__exec_struct_put_locked(x);
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph exec");
    }
    if (!p) {
        if (e->n)
            memcpy(x->snap, e->tmpl, e->n * sizeof(*e->tmpl));
        if (e->tmpl_alen)
            memcpy(x->snap_args, e->tmpl_args, e->tmpl_alen);
        x->snap_alen = e->tmpl_alen;
    }
    *out = x;
    return CUDA_SUCCESS;
}

CUresult cupool__exec_new(struct gentry *e, const CUstream *upload, struct gexec **out)
{
    return cupool__exec_new_of(e, NULL, NULL, upload, out);
}

/* A new entry for the pipeline: template graph and a first exec (owned by the caller; uploaded
 * on *upload when not NULL), counted in device slot dev. Not under the lock. */
CUresult cupool__entry_new(struct cupool_pipeline *p, uint64_t hash, size_t nsig,
                           unsigned long long ctx_id, CUcontext ctx, uint8_t dev,
                           const CUstream *upload, struct gentry **out)
{
    struct gentry *e = cupool__entry_struct_get();
    if (!e)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph cache entry");
    e->hash = hash;
    e->ctx_id = ctx_id;
    e->ctx = ctx;
    e->dev = dev;
    e->n = p->n;
    e->nsig = nsig;
    e->ncond = p->ncond;
    e->inst_flags = cupool__kattr_inst_flags(p);
    e->sig = cupool__alloc(nsig * sizeof(*e->sig));
    e->gnodes = cupool__alloc(p->n * sizeof(*e->gnodes));
    e->tmpl = cupool__alloc(p->n * sizeof(*e->tmpl));
    e->tmpl_args = cupool__alloc(p->alen + 1);
    CUresult r = CUDA_SUCCESS;
    if (!e->sig || !e->gnodes || !e->tmpl || !e->tmpl_args)
        r = cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph cache entry");
    if (r == CUDA_SUCCESS) {
        memcpy(e->sig, p->sig, nsig * sizeof(*e->sig));
        memcpy(e->tmpl, p->nodes, p->n * sizeof(*p->nodes));
        if (p->alen)
            memcpy(e->tmpl_args, p->args, p->alen);
        e->tmpl_alen = p->alen;
        /* with conditional nodes: no template (each exec gets a graph of its own), and the
         * context's setter kernel */
        r = e->ncond ? cupool__setter_get(ctx, ctx_id, &e->setter) : graph_build(e, p);
    }
    struct gexec *x = NULL;
    if (r == CUDA_SUCCESS)
        r = cupool__exec_new_of(e, NULL, e->ncond ? p : NULL, upload, &x);
    if (r != CUDA_SUCCESS) {
        cupool__setter_put(e->setter);
        e->setter = NULL;
        cupool__objects_destroy(NULL, e->graph, NULL, ctx, ctx_id);
        cupool__free(e->sig, nsig * sizeof(*e->sig));
        cupool__free(e->gnodes, p->n * sizeof(*e->gnodes));
        cupool__free(e->tmpl, p->n * sizeof(*e->tmpl));
        cupool__free(e->tmpl_args, p->alen + 1);
        cupool__entry_struct_put_locked(e);
        return r;
    }
    e->execs[0] = x;
    e->nexecs = 1;
    e->bytes = sizeof(*e) + nsig * sizeof(*e->sig) +
               p->n * (sizeof(*e->gnodes) + sizeof(*e->tmpl) + DRIVER_BYTES_PER_NODE) + p->alen;
    *out = e;
    return CUDA_SUCCESS;
}



/* Picks an exec for a launch on stream and owns it, or returns NULL when a new one is needed.
 * Preference: one last launched on this stream, one never launched, a new one while the entry
 * has fewer than CUPOOL_GRAPH_EXECS_MAX (or in place of one whose stream went quiet), and
 * only then one whose launch on another stream has finished (sharing one among streams costs
 * argument updates whenever their pipelines differ, and a completion event per launch;
 * instantiating costs once). Lock held; a
 * lock-free claim may own an exec meanwhile, so each is owned before it is looked at. */
struct gexec *cupool__exec_pick(struct gentry *e, CUstream stream)
{
    struct gexec *never = NULL;
    for (int i = 0; i < e->nexecs; i++) {
        struct gexec *x = e->execs[i];
        if (!exec_own(x))
            continue;
        /* CU_STREAM_PER_THREAD is one value naming every thread's own stream: no match */
        if (x->launched && x->last_stream == stream && stream != CU_STREAM_PER_THREAD) {
            if (never)
                exec_disown(never);
            return x; /* stream order keeps its launches apart */
        }
        if (!x->launched && !never)
            never = x;
        else
            exec_disown(x);
    }
    if (never)
        return never;
    if (e->nexecs + e->npending < execs_max()) {
        e->npending++; /* the caller instantiates one (exec_add) */
        return NULL;
    }
    /* at the limit. From now on launches record their completion. */
    bool was_multi = atomic_exchange_explicit(&e->multi_stream, true, CUPOOL_RELAXED);
    /* An exec not launched since the entry reached the limit (its launches would have recorded
     * completion) belongs to a stream gone quiet: destroyed (the driver frees an exec still
     * running once it completes), so that this stream instantiates its own. */
    for (int i = 0; was_multi && i < e->nexecs; i++) {
        struct gexec *x = e->execs[i];
        if (!exec_own(x))
            continue;
        if (!x->done_valid) {
            e->execs[i] = e->execs[--e->nexecs];
            cupool__exec_free(e, x, true);
            e->npending++;
            return NULL;
        }
        exec_disown(x);
    }
    /* else one whose launch on another stream has finished */
    for (int i = 0; i < e->nexecs; i++) {
        struct gexec *x = e->execs[i];
        if (!exec_own(x))
            continue;
        if (x->done_valid && CUPOOL_DRV(cupool__drv.cuEventQuery(x->done)) == CUDA_SUCCESS)
            return x;
        exec_disown(x);
    }
    return NULL; /* all busy or running: the caller uses a new exec once */
}

/* Same kernel launch, argument values aside? Field by field: the layout pointer (info) may
 * differ for the same function once cupool_trim() has dropped the learnt layouts. */
static bool kernel_same(const struct pnode *n, const struct pnode *o)
{
    return n->u.k.fn == o->u.k.fn &&
           n->u.k.arg_off == o->u.k.arg_off &&
           memcmp(n->u.k.shape, o->u.k.shape, sizeof n->u.k.shape) == 0;
}

/* Copies node i of p (and its argument bytes) into x's snapshot. */
static inline void snapshot_node(struct gexec *x, const struct cupool_pipeline *p, uint32_t i)
{
    const struct pnode *n = &p->nodes[i];
    x->snap[i] = *n;
    if (n->type == PN_KERNEL && n->u.k.info->bytes)
        memcpy(x->snap_args + n->u.k.arg_off, p->args + n->u.k.arg_off, n->u.k.info->bytes);
}

/* Updates the nodes of x that differ from the pipeline: only the nodes marked since the
 * pipeline's last launch when x ran that launch (tagged (p, p->gen)) and the structure is the
 * same, bringing the snapshot up to date as it goes (*patched); else every node, compared
 * with x's snapshot (which the caller then replaces). *compared: the nodes compared. Returns
 * CUDA_SUCCESS, or the error of the node update the driver refused (the updates stop there;
 * not recorded: the caller says what it makes of it). */
CUresult cupool__exec_update(struct gentry *e, struct gexec *x, struct cupool_pipeline *p,
                             bool same, uint64_t *updated, bool *unchanged, bool *patched,
                             uint64_t *compared)
{
    *updated = 0;
    *compared = 0;
    *patched = false;
    /* x ran this pipeline's last launch; the caller ruled out that nothing changed since
     * (cupool__exec_holds) */
    bool last_own = x->snap_owner == p && x->snap_gen == p->gen;
    const struct condargs ca = {e, x};
    *unchanged = false;
    if (last_own && same && !p->all_dirty && p->alen == x->snap_alen) {
        /* x holds the last launch's parameters: only the marked nodes can differ */
        _Atomic uint32_t *gate = gate_enter();
        CUresult r = CUDA_SUCCESS;
        uint32_t words = (p->n + 63) / 64;
        for (uint32_t w = 0; w < words && r == CUDA_SUCCESS; w++)
            for (uint64_t bits = p->chg[w]; bits && r == CUDA_SUCCESS; bits &= bits - 1) {
                uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
                /* marked at its add: it differs from the last launch's node, which is
                 * this snapshot's, so it is set without comparing again, unless it was
                 * described more than once since (it may be back to that node) */
                bool set = true;
                ++*compared;
                r = p->redescribed ? node_set_changed(p, i, &x->snap[i], x->snap_args,
                                                      x->nodes[i], x->exec, e->ctx, &ca, &set)
                                   : node_set(p, i, x->nodes[i], x->exec, e->ctx, &ca);
                if (r == CUDA_SUCCESS) {
                    *updated += set;
                    snapshot_node(x, p, i);
                }
            }
        gate_leave(gate);
        *patched = r == CUDA_SUCCESS;
        return r;
    }
    /* every node: in the common case, nothing changed, two comparisons for the whole pipeline */
    *compared = p->n;
    *unchanged = p->alen == x->snap_alen &&
                 memcmp(p->nodes, x->snap, p->n * sizeof(*p->nodes)) == 0 &&
                 (!p->alen || memcmp(p->args, x->snap_args, p->alen) == 0);
    if (*unchanged)
        return CUDA_SUCCESS;
    _Atomic uint32_t *gate = gate_enter();
    CUresult r =
        nodes_set_changed(p, x->snap, x->snap_args, x->nodes, x->exec, e->ctx, &ca, updated);
    gate_leave(gate);
    return r;
}

/* cupool__refill_launched's part for a description that differed from the last launch's:
 * a new generation, the marks cleared. */
void cupool__refill_consumed(struct cupool_pipeline *p)
{
    p->gen++;
    if (p->nchg)
        memset(p->chg, 0, p->chgcap * sizeof(*p->chg));
    p->nchg = 0;
    p->all_dirty = false;
    p->redescribed = false;
}

/* Launches kernel node i (parameters kp) with its launch attributes ka on s: cuLaunchKernelEx
 * with the attributes it was described with. */
static CUresult eager_kernel_ex(const CUDA_KERNEL_NODE_PARAMS *kp, const struct kattr *ka,
                                CUstream s, uint32_t i)
{
    if (!cupool__drv.cuLaunchKernelEx)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                            "the driver lacks cuLaunchKernelEx: kernel node %u, which has launch "
                            "attributes, cannot be launched node by node",
                            i);
    CUlaunchAttribute attrs[KATTR_LAUNCH_MAX];
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = kp->gridDimX, cfg.gridDimY = kp->gridDimY, cfg.gridDimZ = kp->gridDimZ;
    cfg.blockDimX = kp->blockDimX, cfg.blockDimY = kp->blockDimY, cfg.blockDimZ = kp->blockDimZ;
    cfg.sharedMemBytes = kp->sharedMemBytes;
    cfg.hStream = s;
    cfg.attrs = attrs;
    cfg.numAttrs = cupool__kattr_launch(ka, attrs);
    CUresult r = CUPOOL_DRV(cupool__drv.cuLaunchKernelEx(&cfg, kp->func, kp->kernelParams, NULL));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "launching node %u of a pipeline (cuLaunchKernelEx, %u launch "
                               "attributes) failed",
                            i, cfg.numAttrs);
    return CUDA_SUCCESS;
}

/* Does node n, in a body, run: is its body the one its conditional node picks, and that node
 * in a body that runs (nested)? */
static bool eager_chosen(const struct cupool_pipeline *p, const struct pnode *n)
{
    for (; n->scope; n = &p->nodes[n->scope - 1])
        if (cupool__cond_pick(&p->nodes[n->scope - 1]) != (int)n->body)
            return false;
    return true;
}

/* Launches the nodes one by one (CUPOOL_GRAPH_DISABLE, or no graph support). Insertion order
 * is a topological order: every dependency was added before its dependant, and a conditional
 * node's bodies follow it before the next node of its scope (cupool_pipeline_body), so the
 * nodes of the body it picks run in its place; the other bodies' nodes are skipped. */
CUresult cupool__eager_launch(struct cupool_pipeline *p, CUstream s)
{
    atomic_fetch_add_explicit(&cupool__st_eager, 1, CUPOOL_RELAXED);
    for (uint32_t i = 0; i < p->n; i++) {
        const struct pnode *n = &p->nodes[i];
        CUresult r;
        if (CUPOOL_UNLIKELY(n->scope) && !eager_chosen(p, n))
            continue; /* in a body its conditional node does not run */
        switch (n->type) {
        case PN_COND: /* its chosen body's nodes follow it */
            continue;
        case PN_KERNEL: {
            CUDA_KERNEL_NODE_PARAMS kp;
            kernel_params(n, p->args, p->argv, &kp);
            if (n->attr) { /* with its launch attributes */
                r = eager_kernel_ex(&kp, &p->kattr[i], s, i);
                if (r != CUDA_SUCCESS)
                    return r; /* said what failed */
                break;
            }
            r = CUPOOL_DRV(cupool__drv.cuLaunchKernel(kp.func, kp.gridDimX, kp.gridDimY,
                                                      kp.gridDimZ, kp.blockDimX, kp.blockDimY,
                                                      kp.blockDimZ, kp.sharedMemBytes, s,
                                                      kp.kernelParams, NULL));
            break;
        }
        case PN_MEMSET:
            r = n->u.set.elem == 1
                    ? CUPOOL_DRV(cupool__drv.cuMemsetD8Async(n->u.set.dst,
                                                             (unsigned char)n->u.set.value,
                                                             n->u.set.count, s))
                    : CUPOOL_DRV(cupool__drv.cuMemsetD32Async(n->u.set.dst, n->u.set.value,
                                                              n->u.set.count, s));
            break;
        case PN_MEMCPY:
            r = CUPOOL_DRV(cupool__drv.cuMemcpyAsync(n->u.copy.dst, n->u.copy.src,
                                                     n->u.copy.bytes, s));
            break;
        case PN_RECORD:
            r = CUPOOL_DRV(cupool__drv.cuEventRecord(n->u.ev.ev, s));
            break;
        case PN_WAIT:
            r = CUPOOL_DRV(cupool__drv.cuStreamWaitEvent(s, n->u.ev.ev, 0));
            break;
        default:
            r = CUPOOL_DRV(cupool__drv.cuLaunchHostFunc(s, n->u.host.fn, n->u.host.user));
            break;
        }
        if (r != CUDA_SUCCESS)
            return cupool__fail(r, "launching node %u of a pipeline failed", i);
    }
    return CUDA_SUCCESS;
}

static bool graphs_supported_now(void)
{
    return cupool__drv.cuGraphCreate && cupool__drv.cuGraphAddKernelNode &&
           cupool__drv.cuGraphAddMemsetNode && cupool__drv.cuGraphAddMemcpyNode &&
           cupool__drv.cuGraphAddHostNode && cupool__drv.cuGraphAddEventRecordNode &&
           cupool__drv.cuGraphAddEventWaitNode && cupool__drv.cuGraphInstantiateWithFlags &&
           cupool__drv.cuGraphLaunch && cupool__drv.cuGraphExecDestroy &&
           cupool__drv.cuGraphClone && cupool__drv.cuGraphNodeFindInClone &&
           cupool__drv.cuGraphExecKernelNodeSetParams &&
           cupool__drv.cuGraphExecMemsetNodeSetParams &&
           cupool__drv.cuGraphExecMemcpyNodeSetParams &&
           cupool__drv.cuGraphExecHostNodeSetParams &&
           cupool__drv.cuGraphExecEventRecordNodeSetEvent &&
           cupool__drv.cuGraphExecEventWaitNodeSetEvent && cupool__drv.cuEventQuery &&
           cupool__drv.cuEventRecord && cupool__drv.cuGraphDestroy &&
           cupool__drv.cuGraphKernelNodeSetParams && cupool__drv.cuGraphMemsetNodeSetParams &&
           cupool__drv.cuGraphMemcpyNodeSetParams && cupool__drv.cuGraphHostNodeSetParams &&
           cupool__drv.cuGraphEventRecordNodeSetEvent && cupool__drv.cuGraphEventWaitNodeSetEvent;
}

/* The driver table is fixed once the library runs: look once (cupool__graphs_supported). */
_Atomic int cupool__graphs_known;
bool cupool__graphs_supported_slow(void)
{
    int k = atomic_load_explicit(&cupool__graphs_known, CUPOOL_RELAXED);
    if (CUPOOL_UNLIKELY(k == 0)) {
        k = graphs_supported_now() ? 2 : 1;
        atomic_store_explicit(&cupool__graphs_known, k, CUPOOL_RELAXED);
    }
    return k == 2;
}

bool cupool__eager_supported(void)
{
    return cupool__drv.cuLaunchKernel && cupool__drv.cuMemsetD8Async &&
           cupool__drv.cuMemsetD32Async && cupool__drv.cuMemcpyAsync &&
           cupool__drv.cuEventRecord && cupool__drv.cuStreamWaitEvent &&
           cupool__drv.cuLaunchHostFunc;
}
