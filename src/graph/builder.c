/* SPDX-License-Identifier: MIT */
/*
 * Building a pipeline: create, reset, destroy, the node adds, and the signature.
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

/* ---- building a pipeline ---- */


CUresult cupool_pipeline_create(cupool_pipeline_t *pipeline)
{
    if (!pipeline)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_create: pipeline is NULL");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    struct cupool_pipeline *p = cupool__alloc(sizeof(*p));
    if (!p)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline");
    static _Atomic uint64_t serial;
    p->magic = PIPELINE_MAGIC;
    p->sig_dirty = true;
    p->fn_epoch = atomic_load(&cupool__hot.fn_epoch);
    p->gen = (atomic_fetch_add(&serial, 1) + 1) << 32;
    *pipeline = p;
    return CUDA_SUCCESS;
}

CUresult cupool_pipeline_destroy(cupool_pipeline_t pipeline)
{
    if (cupool__forked()) /* a lock a parent's thread held may guard the memory */
        return cupool__enter();
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!pipeline)
        return CUDA_SUCCESS;
    if (!p)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_destroy: not a pipeline");
    p->magic = 0;
    cupool__pipeline_unhold(p);
    cupool__free(p->held, p->heldcap * sizeof(*p->held));
    cupool__free(p->nodes, p->cap * sizeof(*p->nodes));
    cupool__free(p->deps, p->depcap * sizeof(*p->deps));
    cupool__free(p->args, p->acap);
    cupool__free(p->sig, p->sigcap * sizeof(*p->sig));
    cupool__free(p->argv, p->argvcap * sizeof(*p->argv));
    cupool__free(p->chg, p->chgcap * sizeof(*p->chg));
    cupool__free(p->kattr, p->kattrcap * sizeof(*p->kattr));
    cupool__free(p, sizeof(*p));
    return CUDA_SUCCESS;
}

CUresult cupool_pipeline_reset(cupool_pipeline_t pipeline)
{
    if (cupool__forked())
        return cupool__enter();
    struct cupool_pipeline *p = cupool__pipeline_of(pipeline);
    if (!p)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_reset: not a pipeline");
    p->n = 0;
    p->ndeps = 0;
    p->alen = 0;
    /* described again with no launch between: a marked node may hold the last launch's
     * parameters again, so the next launch compares the marked nodes before setting them */
    if (CUPOOL_UNLIKELY(p->nchg))
        p->redescribed = true;
    /* after a trim, the layouts the old nodes named are let go (they are looked up afresh),
     * and with them the nodes to compare with */
    uint64_t fn_epoch = atomic_load_explicit(&cupool__hot.fn_epoch, CUPOOL_ACQUIRE);
    if (CUPOOL_UNLIKELY(p->fn_epoch != fn_epoch)) {
        cupool__pipeline_unhold(p);
        cupool__refill_forget(p);
    }
    p->sigpos = 1; /* word 0 is the node count, compared at launch */
    p->sig_dirty = p->last_nsig == 0;
    p->add_error = CUDA_SUCCESS;
    p->ncond = p->open_scope = p->open_body = p->dflt_dep = p->empty_bodies = 0;
    return CUDA_SUCCESS;
}

/* Records one structure word of the description being built, noting whether it matches the
 * last launch's word at the same place. */
static void sig_word(struct cupool_pipeline *p, uint64_t w)
{
    if (p->sig_dirty)
        return;
    if (p->sigpos >= p->last_nsig || p->sig[p->sigpos] != w)
        p->sig_dirty = true;
    else
        p->sigpos++;
}

/* The launch-attribute words of kernel node i with attributes (see signature()). */
static inline void kattr_words(const struct cupool_pipeline *p, uint32_t i, uint64_t *w)
{
    memcpy(w, &p->kattr[i], sizeof(struct kattr));
}

/* A node's second structure word: a kernel's function, a conditional node's kind and body
 * count, 0 for the rest. */
static inline uint64_t sig_what(const struct pnode *n)
{
    if (n->type == PN_KERNEL)
        return (uint64_t)(uintptr_t)n->u.k.fn;
    if (n->type == PN_COND)
        return (uint64_t)n->u.cond.kind << 32 | n->u.cond.nbodies;
    return 0;
}

/* The structure words of node i (see signature()). */
void cupool__sig_node(struct cupool_pipeline *p, uint32_t i)
{
    const struct pnode *n = &p->nodes[i];
    p->sig_mark = p->sigpos;
    p->dirty_mark = p->sig_dirty;
    bool attrs = n->type == PN_KERNEL && n->attr;
    sig_word(p, (uint64_t)(n->type | (attrs ? SIG_KATTR : 0) | (n->scope ? SIG_SCOPED : 0)) << 32 |
                    n->ndeps);
    sig_word(p, sig_what(n));
    if (n->scope)
        sig_word(p, (uint64_t)n->scope << 32 | n->body);
    if (attrs) {
        uint64_t w[KATTR_WORDS];
        kattr_words(p, i, w);
        for (size_t k = 0; k < KATTR_WORDS; k++)
            sig_word(p, w[k]);
    }
    for (uint32_t d = 0; d < n->ndeps; d++)
        sig_word(p, p->deps[n->dep_start + d]);
}

/* Room for the change marks of nodes below n; new words start clear. */
static bool chg_room(struct cupool_pipeline *p, size_t n)
{
    size_t had = p->chgcap;
    if (!GROW(p->chg, p->chgcap, n / 64 + 1))
        return false;
    if (p->chgcap > had)
        memset(p->chg + had, 0, (p->chgcap - had) * sizeof(*p->chg));
    return true;
}

/* Appends a node depending on the one before it, written afresh (no comparison with the
 * last launch's node at its place: see refill_node for that); *out gets it. */
CUresult cupool__node_push(struct cupool_pipeline *p, uint32_t type, struct pnode **out,
                           cupool_node_t *number)
{
    if (!GROW(p->nodes, p->cap, p->n + 1) || !GROW(p->deps, p->depcap, p->ndeps + 1) ||
        !chg_room(p, p->n))
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline node");
    struct pnode *n = &p->nodes[p->n];
    memset(n, 0, sizeof(*n));
    p->all_dirty = true;
    n->type = type;
    n->dep_start = p->ndeps;
    if (CUPOOL_UNLIKELY(p->ncond)) {
        /* with conditional nodes: in the open body, after the node before it there */
        n->scope = p->open_scope;
        n->body = p->open_body;
        if (p->dflt_dep) {
            p->deps[p->ndeps++] = p->dflt_dep - 1;
            n->ndeps = 1;
        } else if (p->open_scope) {
            p->empty_bodies--; /* the body's first node */
        }
        p->dflt_dep = p->n + 1;
    } else if (p->n > 0) {
        p->deps[p->ndeps++] = p->n - 1;
        n->ndeps = 1;
    }
    if (number)
        *number = p->n;
    p->n++;
    *out = n;
    return CUDA_SUCCESS;
}

/* ---- signature ---- */

uint64_t cupool__mix(uint64_t h, uint64_t v)
{
    h ^= v + UINT64_C(0x9E3779B97F4A7C15) + (h << 6) + (h >> 2);
    return h * UINT64_C(0xff51afd7ed558ccd);
}

/* Writes the signature words into p->sig; returns their count (0: out of memory). Per node:
 * its type (with SIG_KATTR for a kernel with launch attributes) and dependency count, its
 * function (0 for other kinds), a kernel's launch-attribute words when it has attributes,
 * its dependencies. */
size_t cupool__signature(struct cupool_pipeline *p, uint64_t *hash)
{
    size_t nattr = 0, nscoped = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        nattr += p->nodes[i].type == PN_KERNEL && p->nodes[i].attr;
        nscoped += p->nodes[i].scope != 0;
    }
    size_t need = 1 + (size_t)p->n * 3 + p->ndeps + nattr * KATTR_WORDS + nscoped;
    if (!GROW(p->sig, p->sigcap, need))
        return 0;
    size_t w = 0;
    uint64_t h = 0;
    uint32_t chain = 0;
    p->sig[w++] = p->n;
    for (uint32_t i = 0; i < p->n; i++) {
        const struct pnode *n = &p->nodes[i];
        bool attrs = n->type == PN_KERNEL && n->attr;
        if (chain == i && n->type == PN_KERNEL && !attrs && !n->scope && n->ndeps == (i > 0) &&
            (i == 0 || p->deps[n->dep_start] == i - 1))
            chain = i + 1;
        p->sig[w++] = (uint64_t)(n->type | (attrs ? SIG_KATTR : 0) | (n->scope ? SIG_SCOPED : 0))
                          << 32 |
                      n->ndeps;
        /* the function is structure (and its layout with it), and so is every launch
         * attribute (attrs.c), a conditional node's kind and body count, and where a node
         * is (its body); everything else is patched */
        p->sig[w++] = sig_what(n);
        if (n->scope)
            p->sig[w++] = (uint64_t)n->scope << 32 | n->body;
        if (attrs) {
            kattr_words(p, i, &p->sig[w]);
            w += KATTR_WORDS;
        }
        for (uint32_t d = 0; d < n->ndeps; d++)
            p->sig[w++] = p->deps[n->dep_start + d];
    }
    for (size_t i = 0; i < w; i++)
        h = cupool__mix(h, p->sig[i]);
    p->sig_chain = chain;
    *hash = h;
    return w;
}
