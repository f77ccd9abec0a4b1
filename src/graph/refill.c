/* SPDX-License-Identifier: MIT */
/*
 * Refilling in place: adds that compare with the last launch's nodes, so an unchanged relaunch
 * compares nothing (docs/design.md, "Graph-replay cache").
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

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

/* ---- refilling in place: adds compare with the last launch's nodes ---- */



/* Node i's parameters differ from the last launch's. */
static inline void refill_mark(struct cupool_pipeline *p, uint32_t i)
{
    uint64_t bit = UINT64_C(1) << (i % 64);
    if (!(p->chg[i / 64] & bit)) {
        p->chg[i / 64] |= bit;
        p->nchg++;
    }
}

/* The node at the next place, to be refilled in place: the last launch had a node of this
 * type there (and there is room for its dependency). NULL: node_push writes it afresh. */
static inline struct pnode *refill_node(struct cupool_pipeline *p, uint32_t type)
{
    uint32_t i = p->n;
    if (CUPOOL_LIKELY(i < p->hw && p->nodes[i].type == type && p->ndeps < p->depcap))
        return &p->nodes[i];
    return NULL;
}

/* Completes the add of a node refilled in place (changed: a parameter differs from the last
 * launch's): its default dependency, its number, its mark and its structure words. */
static inline void refill_done(struct cupool_pipeline *p, struct pnode *n, bool changed,
                               cupool_node_t *number)
{
    uint32_t i = p->n;
    n->dep_start = p->ndeps;
    n->ndeps = i > 0;
    if (i > 0)
        p->deps[p->ndeps++] = i - 1;
    if (number)
        *number = i;
    p->n = i + 1;
    if (changed)
        refill_mark(p, i);
    cupool__sig_node(p, i);
}

/* Copies size bytes from src to dst unless they are equal already; true if they differed.
 * Without a call, so that the per-request path keeps its registers. */
static inline bool bytes_refill(unsigned char *dst, const unsigned char *src, uint32_t size)
{
    uint64_t v, w;
    if (CUPOOL_LIKELY(size == 8)) {
        memcpy(&v, src, 8);
        memcpy(&w, dst, 8);
        if (v == w)
            return false;
        memcpy(dst, &v, 8);
        return true;
    }
    if (size == 4) {
        uint32_t v4, w4;
        memcpy(&v4, src, 4);
        memcpy(&w4, dst, 4);
        if (v4 == w4)
            return false;
        memcpy(dst, &v4, 4);
        return true;
    }
    bool differs = false;
    uint32_t i = 0;
    for (; i + 8 <= size; i += 8) {
        memcpy(&v, src + i, 8);
        memcpy(&w, dst + i, 8);
        if (v != w) {
            memcpy(dst + i, &v, 8);
            differs = true;
        }
    }
    for (; i < size; i++)
        if (dst[i] != src[i]) {
            dst[i] = src[i];
            differs = true;
        }
    return differs;
}

/* The structure words of a refilled node with its default dependency (as sig_node). */
static inline void sig_refilled(struct cupool_pipeline *p, uint64_t w0, uint64_t w1, uint32_t i)
{
    size_t pos = p->sigpos;
    bool dirty = p->sig_dirty;
    p->sig_mark = pos;
    p->dirty_mark = dirty;
    if (dirty)
        return;
    size_t end = pos + 2 + (i > 0);
    const uint64_t *sg = p->sig;
    if (end <= p->last_nsig && sg[pos] == w0 && sg[pos + 1] == w1 && (!i || sg[pos + 2] == i - 1))
        p->sigpos = end;
    else
        p->sig_dirty = true;
}

/* A kernel add refilled in place: the last launch's node at this place launched the same
 * function with its arguments at the same offset, and with the same launch attributes (ka;
 * NULL: none). False, with nothing added, for the general path (kernel_add), which also
 * reports bad arguments: no pipeline, a zero dimension, a NULL argument, a library not
 * running. The per-request path: every field is read once, only what differs is written,
 * and every check comes before the first write. (A trim since the reset does not matter: the
 * layouts in place are held by the pipeline, and f, being described, is the function they
 * were learnt for.) ka's attributes were checked against this launch shape already. */
static inline __attribute__((always_inline)) bool
kernel_refill(struct cupool_pipeline *p, CUfunction f, unsigned int gx, unsigned int gy,
              unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
              unsigned int shmem, void **args, const struct kattr *ka, cupool_node_t *number)
{
    if (CUPOOL_UNLIKELY(!p || p->magic != PIPELINE_MAGIC ||
                        cupool__state_now() != CUPOOL_ST_RUNNING))
        return false;
    uint32_t i = p->n, nd = p->ndeps;
    if (i >= p->hw || nd >= p->depcap)
        return false;
    struct pnode *n = &p->nodes[i];
    if (n->type != PN_KERNEL || n->u.k.fn != f)
        return false;
    /* the same attributes as the node in place (they are structure: the node's words) */
    if (ka ? !n->attr || memcmp(&p->kattr[i], ka, sizeof(*ka)) != 0 : n->attr != 0)
        return false;
    uint32_t off = (uint32_t)((p->alen + 15) & ~(size_t)15);
    const struct fninfo *fi = n->u.k.info;
    uint32_t np = fi->nparams;
    if (n->u.k.arg_off != off || (np && !args))
        return false;
    for (uint32_t a = 0; a < np; a++)
        if (CUPOOL_UNLIKELY(!args[a]))
            return false;
    /* the launch shape (a changed one must be valid: the old one was) */
    uint32_t *d = n->u.k.shape;
    bool changed = ((d[0] ^ gx) | (d[1] ^ gy) | (d[2] ^ gz) | (d[3] ^ bx) | (d[4] ^ by) |
                    (d[5] ^ bz) | (d[6] ^ shmem)) != 0;
    if (changed) {
        if ((gx == 0) | (gy == 0) | (gz == 0) | (bx == 0) | (by == 0) | (bz == 0))
            return false;
        d[0] = gx, d[1] = gy, d[2] = gz, d[3] = bx, d[4] = by, d[5] = bz, d[6] = shmem;
    }
    /* from here on the add cannot fail */
    unsigned char *bytes = p->args + off;
    const struct fnparam *pa = fi->param;
    for (uint32_t a = 0; a < np; a++)
        changed |= bytes_refill(bytes + pa[a].off, args[a], pa[a].size);
    p->alen = off + fi->bytes;
    n->dep_start = nd;
    n->ndeps = i > 0;
    if (i > 0) {
        p->deps[nd] = i - 1;
        p->ndeps = nd + 1;
    }
    p->n = i + 1;
    if (number)
        *number = i;
    if (changed)
        refill_mark(p, i);
    if (ka)
        cupool__sig_node(p, i); /* with the attribute words */
    else
        sig_refilled(p, (uint64_t)PN_KERNEL << 32 | (i > 0), (uint64_t)(uintptr_t)f, i);
    return true;
}

/* The public adds. In a forked child they refuse before touching anything (the parent's
 * pipeline may have been mid-change at fork()); each failure is noted in the pipeline. */
#define PUBLIC_ADD(call) (cupool__forked() ? cupool__enter() : add_noted(pipeline, (call)))

/* A failed add leaves the description short of what its caller meant: the pipeline keeps
 * the first such error, and launches return it until cupool_pipeline_reset(). */
static CUresult add_noted(cupool_pipeline_t pipeline, CUresult r)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (r != CUDA_SUCCESS && p && p->add_error == CUDA_SUCCESS)
        p->add_error = r;
    return r;
}

/* The checks every kernel add makes first (who: the public call, for the message). */
static CUresult kernel_check(const struct cupool_pipeline *p, CUfunction f, unsigned int grid_x,
                             unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                             unsigned int block_y, unsigned int block_z, const char *who)
{
    if (!p || !f || !grid_x || !grid_y || !grid_z || !block_x || !block_y || !block_z)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: %s", who,
                            !p   ? "not a pipeline"
                            : !f ? "function is NULL"
                                 : "a grid or block dimension is 0");
    return CUDA_SUCCESS;
}

/* The general kernel add: the node written afresh, with the launch attributes ka (NULL:
 * none), which the caller checked. */
static CUresult kernel_add(cupool_pipeline_t pipeline, CUfunction f, unsigned int grid_x,
                           unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                           unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
                           void **args, const struct kattr *ka, cupool_node_t *node,
                           const char *who)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    CUresult r = kernel_check(p, f, grid_x, grid_y, grid_z, block_x, block_y, block_z, who);
    if (r != CUDA_SUCCESS)
        return r;
    r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    const struct fninfo *fi = NULL;
    r = cupool__fninfo_get(p, f, &fi);
    if (r != CUDA_SUCCESS)
        return r;
    if (fi->nparams && !args)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "%s: args is NULL for a kernel of %u parameters", who, fi->nparams);
    for (uint32_t i = 0; i < fi->nparams; i++)
        if (!args[i])
            return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: args[%u] is NULL", who, i);
    size_t off = (p->alen + 15) & ~(size_t)15;
    if (!cupool__grow((void **)&p->args, &p->acap, off + fi->bytes + 1, 1))
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for kernel arguments");
    if (ka && !GROW(p->kattr, p->kattrcap, (size_t)p->n + 1))
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for launch attributes");
    struct pnode *n;
    r = cupool__node_push(p, PN_KERNEL, &n, node);
    if (r != CUDA_SUCCESS)
        return r;
    if (ka) {
        n->attr = 1;
        p->kattr[p->n - 1] = *ka;
    }
    memset(p->args + off, 0, fi->bytes);
    for (uint32_t i = 0; i < fi->nparams; i++)
        memcpy(p->args + off + fi->param[i].off, args[i], fi->param[i].size);
    p->alen = off + fi->bytes;
    n->u.k.fn = f;
    n->u.k.info = fi;
    uint32_t shape[K_SHAPE] = {grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes};
    memcpy(n->u.k.shape, shape, sizeof(shape));
    n->u.k.arg_off = (uint32_t)off;
    if (fi->nparams > p->max_params)
        p->max_params = fi->nparams;
    cupool__sig_node(p, p->n - 1);
    return CUDA_SUCCESS;
}

static CUresult memset_add(cupool_pipeline_t pipeline, CUdeviceptr dst, unsigned int value,
                           unsigned int element_bytes, size_t count, cupool_node_t *node)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || !dst || !count || (element_bytes != 1 && element_bytes != 4))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_memset: %s",
                            !p ? "not a pipeline" : "needs dst, count > 0, element_bytes 1 or 4");
    struct pnode *n = refill_node(p, PN_MEMSET);
    if (n) {
        bool changed = n->u.set.dst != dst || n->u.set.value != value ||
                       n->u.set.elem != element_bytes || n->u.set.count != count;
        n->u.set.dst = dst;
        n->u.set.value = value;
        n->u.set.elem = element_bytes;
        n->u.set.count = count;
        refill_done(p, n, changed, node);
        return CUDA_SUCCESS;
    }
    CUresult r = cupool__node_push(p, PN_MEMSET, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.set.dst = dst;
        n->u.set.value = value;
        n->u.set.elem = element_bytes;
        n->u.set.count = count;
        cupool__sig_node(p, p->n - 1);
    }
    return r;
}

static CUresult memcpy_add(cupool_pipeline_t pipeline, CUdeviceptr dst, CUdeviceptr src,
                           size_t bytes, cupool_node_t *node)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || !dst || !src || !bytes)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_memcpy: %s",
                            !p ? "not a pipeline" : "needs dst, src and bytes > 0");
    struct pnode *n = refill_node(p, PN_MEMCPY);
    if (n) {
        bool changed = n->u.copy.dst != dst || n->u.copy.src != src || n->u.copy.bytes != bytes;
        n->u.copy.dst = dst;
        n->u.copy.src = src;
        n->u.copy.bytes = bytes;
        refill_done(p, n, changed, node);
        return CUDA_SUCCESS;
    }
    CUresult r = cupool__node_push(p, PN_MEMCPY, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.copy.dst = dst;
        n->u.copy.src = src;
        n->u.copy.bytes = bytes;
        cupool__sig_node(p, p->n - 1);
    }
    return r;
}

/* An add of a kind the driver does not take in a conditional node's body (cuda.h,
 * CUDA_CONDITIONAL_NODE_PARAMS: kernel, empty, memset, memcpy, child graph and conditional
 * nodes only). */
static CUresult body_refuses(const struct cupool_pipeline *p, const char *who)
{
    return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                        "%s: body %u of conditional node %u is open, and a conditional node's "
                        "body takes kernels, memsets, memcpys and conditional nodes only (event "
                        "records and waits and host functions: not in a body)",
                        who, p->open_body, p->open_scope - 1);
}

static CUresult event_node(cupool_pipeline_t pipeline, CUevent ev, uint32_t type,
                           cupool_node_t *node, const char *what)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || !ev)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: %s", what,
                            !p ? "not a pipeline" : "event is NULL");
    if (p->open_scope)
        return body_refuses(p, what);
    struct pnode *n = refill_node(p, type);
    if (n) {
        bool changed = n->u.ev.ev != ev;
        n->u.ev.ev = ev;
        refill_done(p, n, changed, node);
        return CUDA_SUCCESS;
    }
    CUresult r = cupool__node_push(p, type, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.ev.ev = ev;
        cupool__sig_node(p, p->n - 1);
    }
    return r;
}

CUresult cupool_pipeline_event_record(cupool_pipeline_t pipeline, CUevent event,
                                      cupool_node_t *node)
{
    return PUBLIC_ADD(
        event_node(pipeline, event, PN_RECORD, node, "cupool_pipeline_event_record"));
}

CUresult cupool_pipeline_event_wait(cupool_pipeline_t pipeline, CUevent event, cupool_node_t *node)
{
    return PUBLIC_ADD(event_node(pipeline, event, PN_WAIT, node, "cupool_pipeline_event_wait"));
}

static CUresult host_add(cupool_pipeline_t pipeline, CUhostFn fn, void *user_data,
                         cupool_node_t *node)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || !fn)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_host: %s",
                            !p ? "not a pipeline" : "fn is NULL");
    if (p->open_scope)
        return body_refuses(p, "cupool_pipeline_host");
    struct pnode *n = refill_node(p, PN_HOST);
    if (n) {
        bool changed = n->u.host.fn != fn || n->u.host.user != user_data;
        n->u.host.fn = fn;
        n->u.host.user = user_data;
        refill_done(p, n, changed, node);
        return CUDA_SUCCESS;
    }
    CUresult r = cupool__node_push(p, PN_HOST, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.host.fn = fn;
        n->u.host.user = user_data;
        cupool__sig_node(p, p->n - 1);
    }
    return r;
}

static CUresult depend_add(cupool_pipeline_t pipeline, cupool_node_t node, const cupool_node_t *on,
                           size_t count)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || node >= (p ? p->n : 0) || (count && !on))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_depend: %s",
                            !p ? "not a pipeline" : "node out of range, or on NULL");
    for (size_t i = 0; i < count; i++) {
        if (on[i] >= node)
            return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                "cupool_pipeline_depend: node %u cannot depend on node %u "
                                "(dependencies must be added before)",
                                node, on[i]);
        const struct pnode *a = &p->nodes[node], *b = &p->nodes[on[i]];
        if (a->scope != b->scope || a->body != b->body)
            return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                "cupool_pipeline_depend: node %u cannot depend on node %u: they "
                                "are in different scopes (the top level, or a conditional "
                                "node's body): dependencies stay inside a body",
                                node, on[i]);
        for (size_t j = 0; j < i; j++)
            if (on[j] == on[i])
                return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                    "cupool_pipeline_depend: node %u listed twice", on[i]);
    }
    if (!GROW(p->deps, p->depcap, p->ndeps + count))
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for pipeline dependencies");
    struct pnode *n = &p->nodes[node];
    bool last = node + 1 == p->n;
    if (last) { /* the node just added: its words are emitted again, compared in place */
        p->sigpos = p->sig_mark;
        p->sig_dirty = p->dirty_mark;
    } else {
        p->sig_dirty = true; /* an earlier node's words changed: recompute at launch */
    }
    n->dep_start = p->ndeps;
    n->ndeps = (uint32_t)count;
    for (size_t i = 0; i < count; i++)
        p->deps[p->ndeps++] = on[i];
    if (last)
        cupool__sig_node(p, node);
    return CUDA_SUCCESS;
}

/* The public adds (PUBLIC_ADD above). */

/* The general kernel add, out of the per-request path's way. */
static __attribute__((noinline, cold)) CUresult
kernel_add_public(cupool_pipeline_t pipeline, CUfunction f, unsigned int grid_x,
                  unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                  unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
                  void **args, cupool_node_t *node)
{
    return PUBLIC_ADD(kernel_add(pipeline, f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                                 shared_bytes, args, NULL, node, "cupool_pipeline_kernel"));
}

/* Every kernel add that cupool_pipeline_kernel's lean path leaves: a refill in place that
 * writes (a changed launch shape, an argument of an unusual size) or the general add. */
static __attribute__((noinline)) CUresult
kernel_add_other(cupool_pipeline_t pipeline, CUfunction f, unsigned int grid_x,
                 unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                 unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
                 void **args, cupool_node_t *node)
{
    if (kernel_refill(pipeline, f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                      shared_bytes, args, NULL, node))
        return CUDA_SUCCESS;
    return kernel_add_public(pipeline, f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                             shared_bytes, args, node);
}

/* The end of a refill in place of node n (the next place) whose parameters are written: its
 * arguments' end, default dependency, number and structure words (as kernel_refill, with
 * sig_chain sparing the comparison of the words in the common case). Pairs of neighbouring
 * words are stored as one. */
static inline __attribute__((always_inline)) CUresult
kernel_refilled(struct cupool_pipeline *p, struct pnode *n, const struct fninfo *fi, uint32_t off,
                cupool_node_t *number)
{
    _Static_assert(offsetof(struct pnode, dep_start) == offsetof(struct pnode, ndeps) + 4,
                   "ndeps, dep_start: one store");
    _Static_assert(offsetof(struct cupool_pipeline, ndeps) ==
                       offsetof(struct cupool_pipeline, n) + 4,
                   "n, ndeps: one store");
    uint32_t i = p->n, nd = p->ndeps, has_dep = i > 0;
    p->alen = off + fi->bytes;
    const uint32_t nd_ds[2] = {has_dep, nd}; /* ndeps, dep_start: one store, any byte order */
    memcpy(&n->ndeps, nd_ds, 8);
    if (CUPOOL_LIKELY(has_dep)) /* not at node 0: a one-node request leaves deps[] untouched */
        p->deps[nd] = i - 1;    /* nd < depcap */
    const uint32_t n_nd[2] = {i + 1, nd + has_dep}; /* n, ndeps */
    memcpy(&p->n, n_nd, 8);
    if (number)
        *number = i;
    if (CUPOOL_LIKELY(!p->sig_dirty && !p->all_dirty && i < p->sig_chain)) {
        /* the words so far matched the last launch's, so sigpos is this node's place */
        p->sig_mark = p->sigpos;
        p->dirty_mark = false;
        p->sigpos += 2 + has_dep;
    } else {
        sig_refilled(p, (uint64_t)PN_KERNEL << 32 | has_dep, (uint64_t)(uintptr_t)n->u.k.fn, i);
    }
    return CUDA_SUCCESS;
}

/* The lean path's refill when an argument differs from the node in place (or has a size
 * other than 4 or 8): everything is checked (shape equal, arguments non-NULL), so it writes
 * what differs, marks the node if anything did, and completes the add. */
static __attribute__((noinline)) CUresult
kernel_refill_args(struct cupool_pipeline *p, struct pnode *n, void **args, cupool_node_t *number)
{
    const struct fninfo *fi = n->u.k.info;
    uint32_t off = n->u.k.arg_off;
    unsigned char *bytes = p->args + off;
    bool changed = false;
    for (uint32_t a = 0; a < fi->nparams; a++)
        changed |= bytes_refill(bytes + fi->param[a].off, args[a], fi->param[a].size);
    if (changed)
        refill_mark(p, p->n);
    return kernel_refilled(p, n, fi, off, number);
}

/* The lean path's way out once the node in place was found to have this function and shape:
 * the general path, with those taken from the node (equal to the caller's), so the public
 * function need not keep its eleven arguments alive past that test. */
static __attribute__((noinline)) CUresult kernel_add_at(struct cupool_pipeline *p,
                                                        const struct pnode *n, void **args,
                                                        cupool_node_t *node)
{
    const uint32_t *d = n->u.k.shape;
    return kernel_add_other(p, n->u.k.fn, d[0], d[1], d[2], d[3], d[4], d[5], d[6], args, node);
}

/* The per-request path: the node at the next place launched this very function with this
 * shape, its arguments at the same offset, and (usually) the same argument values. It only
 * reads until it knows the add cannot fail, then writes the node's default dependency,
 * number and structure words; the rest (a change of shape, an error, an unusual argument
 * size) goes to kernel_add_other, and changed argument values to kernel_refill_args. */
CUresult cupool_pipeline_kernel(cupool_pipeline_t pipeline, CUfunction f, unsigned int grid_x,
                                unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                                unsigned int block_y, unsigned int block_z,
                                unsigned int shared_bytes, void **args, cupool_node_t *node)
{
    struct cupool_pipeline *p = pipeline;
    if (CUPOOL_UNLIKELY(!p || p->magic != PIPELINE_MAGIC || p->n >= p->hw ||
                        p->ndeps >= p->depcap || cupool__state_now() != CUPOOL_ST_RUNNING))
        goto other;
    struct pnode *n = &p->nodes[p->n];
    /* the kind (a kernel without launch attributes), function and shape in one test (the
     * union's words of another kind of node are read, never used) */
    const uint32_t *d = n->u.k.shape;
    if (CUPOOL_UNLIKELY(((d[0] ^ grid_x) | (d[1] ^ grid_y) | (d[2] ^ grid_z) | (d[3] ^ block_x) |
                         (d[4] ^ block_y) | (d[5] ^ block_z) | (d[6] ^ shared_bytes) |
                         (n->type ^ PN_KERNEL) | n->attr) != 0 ||
                        n->u.k.fn != f))
        goto other;
    /* from here on the function and shape are the node's: kernel_add_at takes them there */
    const struct fninfo *fi = n->u.k.info;
    uint32_t off = (uint32_t)((p->alen + 15) & ~(size_t)15);
    if (CUPOOL_UNLIKELY(n->u.k.arg_off != off))
        return kernel_add_at(p, n, args, node);
    uint32_t np = fi->nparams;
    if (np) {
        if (CUPOOL_UNLIKELY(!args))
            return kernel_add_at(p, n, args, node);
        /* compare only: every argument is checked before anything is written */
        const unsigned char *bytes = p->args + off;
        const struct fnparam *pa = fi->param;
        uint64_t differs = 0;
        for (uint32_t a = 0; a < np; a++) {
            const unsigned char *v = args[a], *w = bytes + pa[a].off;
            if (CUPOOL_UNLIKELY(!v))
                return kernel_add_at(p, n, args, node);
            uint32_t size = pa[a].size;
            if (CUPOOL_LIKELY(size == 8)) {
                uint64_t x, y;
                memcpy(&x, v, 8);
                memcpy(&y, w, 8);
                differs |= x ^ y;
            } else if (CUPOOL_LIKELY(size == 4)) {
                uint32_t x, y;
                memcpy(&x, v, 4);
                memcpy(&y, w, 4);
                differs |= x ^ y;
            } else {
                differs = 1; /* compared (and written) there */
            }
        }
        if (differs)
            return kernel_refill_args(p, n, args, node);
    }
    return kernel_refilled(p, n, fi, off, node);
other:
    return kernel_add_other(pipeline, f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                            shared_bytes, args, node);
}

/* A kernel add with launch attributes: checked and normalised first (attrs.c), then refilled
 * in place when the node there has the same function, argument place and attributes, else
 * written afresh. No attribute given (or only CU_LAUNCH_ATTRIBUTE_IGNORE): a plain kernel,
 * exactly as cupool_pipeline_kernel adds it. */
static CUresult kernel_ex_add(cupool_pipeline_t pipeline, CUfunction f, unsigned int grid_x,
                              unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                              unsigned int block_y, unsigned int block_z,
                              unsigned int shared_bytes, void **args,
                              const CUlaunchAttribute *attrs, unsigned int nattrs,
                              cupool_node_t *node)
{
    static const char who[] = "cupool_pipeline_kernel_ex";
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    CUresult r = kernel_check(p, f, grid_x, grid_y, grid_z, block_x, block_y, block_z, who);
    if (r != CUDA_SUCCESS)
        return r;
    const uint32_t shape[7] = {grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes};
    struct kattr ka;
    r = cupool__kattr_parse(attrs, nattrs, shape, &ka);
    if (r != CUDA_SUCCESS)
        return r;
    const struct kattr *kp = ka.given ? &ka : NULL;
    if (kp) {
        if ((r = cupool__enter()) != CUDA_SUCCESS || (r = cupool__kattr_support(kp)) != CUDA_SUCCESS)
            return r;
        if (kernel_refill(p, f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
                          args, kp, node))
            return CUDA_SUCCESS;
    } else if (kernel_refill(p, f, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                             shared_bytes, args, NULL, node)) {
        return CUDA_SUCCESS;
    }
    return kernel_add(pipeline, f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes,
                      args, kp, node, who);
}

CUresult cupool_pipeline_kernel_ex(cupool_pipeline_t pipeline, CUfunction f, unsigned int grid_x,
                                   unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                                   unsigned int block_y, unsigned int block_z,
                                   unsigned int shared_bytes, void **args,
                                   const CUlaunchAttribute *attrs, unsigned int nattrs,
                                   cupool_node_t *node)
{
    return PUBLIC_ADD(kernel_ex_add(pipeline, f, grid_x, grid_y, grid_z, block_x, block_y,
                                    block_z, shared_bytes, args, attrs, nattrs, node));
}

CUresult cupool_pipeline_memset(cupool_pipeline_t pipeline, CUdeviceptr dst, unsigned int value,
                                unsigned int element_bytes, size_t count, cupool_node_t *node)
{
    return PUBLIC_ADD(memset_add(pipeline, dst, value, element_bytes, count, node));
}

CUresult cupool_pipeline_memcpy(cupool_pipeline_t pipeline, CUdeviceptr dst, CUdeviceptr src,
                                size_t bytes, cupool_node_t *node)
{
    return PUBLIC_ADD(memcpy_add(pipeline, dst, src, bytes, node));
}

CUresult cupool_pipeline_host(cupool_pipeline_t pipeline, CUhostFn fn, void *user_data,
                              cupool_node_t *node)
{
    return PUBLIC_ADD(host_add(pipeline, fn, user_data, node));
}

CUresult cupool_pipeline_depend(cupool_pipeline_t pipeline, cupool_node_t node,
                                const cupool_node_t *on, size_t count)
{
    return PUBLIC_ADD(depend_add(pipeline, node, on, count));
}

/* ---- conditional nodes (cupool_pipeline_switch, _if, _body, _body_end) ----
 * Always written afresh (node_push), and the description is not refilled in place past one
 * (hw 0): node_push places each node in the open body, after the node before it there. */

/* Appends a conditional node of kind `kind` with nbodies bodies and its branch value (the
 * setter kernel's argument, a parameter like any kernel argument). */
static CUresult cond_add(cupool_pipeline_t pipeline, uint32_t kind, unsigned int nbodies,
                         unsigned int value, cupool_node_t *node, const char *who)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || nbodies == 0 || (kind == PC_IF && nbodies > 2))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: %s", who,
                            !p              ? "not a pipeline"
                            : kind == PC_IF ? "an IF node has 1 or 2 bodies"
                                            : "a SWITCH node has at least 1 body");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    /* what the graph needs, unless pipelines launch node by node */
    if (!cupool__cfg.graph_disable && cupool__graphs_supported() &&
        (r = cupool__cond_supported(who)) != CUDA_SUCCESS)
        return r;
    if (p->empty_bodies > UINT32_MAX - nbodies)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: too many bodies", who);
    uint32_t had = p->ncond, dflt = p->dflt_dep;
    if (had == 0) /* from here on node_push places each node in the open body */
        p->dflt_dep = p->n; /* the node before it (p->n - 1), or none */
    p->ncond = 1;
    struct pnode *n;
    r = cupool__node_push(p, PN_COND, &n, node);
    if (r != CUDA_SUCCESS) {
        p->ncond = had;
        p->dflt_dep = dflt;
        return r;
    }
    p->ncond = had + 1;
    p->empty_bodies += nbodies;
    p->hw = 0; /* nothing is refilled in place from here on */
    n->u.cond.kind = kind;
    n->u.cond.nbodies = nbodies;
    n->u.cond.value = value;
    cupool__sig_node(p, p->n - 1);
    return CUDA_SUCCESS;
}

CUresult cupool_pipeline_switch(cupool_pipeline_t pipeline, unsigned int nbodies,
                                unsigned int branch, cupool_node_t *node)
{
    return PUBLIC_ADD(cond_add(pipeline, PC_SWITCH, nbodies, branch, node,
                               "cupool_pipeline_switch"));
}

CUresult cupool_pipeline_if(cupool_pipeline_t pipeline, unsigned int nbodies, unsigned int value,
                            cupool_node_t *node)
{
    return PUBLIC_ADD(cond_add(pipeline, PC_IF, nbodies, value, node, "cupool_pipeline_if"));
}

static CUresult body_open(cupool_pipeline_t pipeline, cupool_node_t node, unsigned int i)
{
    static const char who[] = "cupool_pipeline_body";
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: not a pipeline", who);
    if (node >= p->n || p->nodes[node].type != PN_COND)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: node %u is not a conditional node",
                            who, node);
    const struct pnode *c = &p->nodes[node];
    if (i >= c->u.cond.nbodies)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "%s: conditional node %u has %u bodies: no body %u", who, node,
                            c->u.cond.nbodies, i);
    if (c->scope != p->open_scope || c->body != p->open_body || p->dflt_dep != node + 1)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "%s: conditional node %u is not the last node of the open scope "
                            "(a conditional node's bodies are filled right after it, before the "
                            "next node of its scope: end the open body first)",
                            who, node);
    /* the body's last node so far, if it was opened before: the next add depends on it */
    uint32_t last = 0;
    for (uint32_t j = p->n; j > node + 1 && !last; j--)
        if (p->nodes[j - 1].scope == node + 1 && p->nodes[j - 1].body == i)
            last = j;
    p->open_scope = node + 1;
    p->open_body = i;
    p->dflt_dep = last;
    return CUDA_SUCCESS;
}

CUresult cupool_pipeline_body(cupool_pipeline_t pipeline, cupool_node_t node, unsigned int i)
{
    return PUBLIC_ADD(body_open(pipeline, node, i));
}

static CUresult body_close(cupool_pipeline_t pipeline)
{
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p || !p->open_scope)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_body_end: %s",
                            !p ? "not a pipeline" : "no body is open");
    uint32_t c = p->open_scope - 1;
    p->open_scope = p->nodes[c].scope;
    p->open_body = p->nodes[c].body;
    p->dflt_dep = c + 1;
    return CUDA_SUCCESS;
}

CUresult cupool_pipeline_body_end(cupool_pipeline_t pipeline)
{
    return PUBLIC_ADD(body_close(pipeline));
}
