/* SPDX-License-Identifier: MIT */
/*
 * Pipelines and the graph-replay cache (docs/design.md, "Graph-replay cache").
 *
 * A pipeline is a list of nodes with their parameters (kernel arguments copied into one
 * buffer, laid out as cuFuncGetParamInfo says) and dependencies (by default the node before).
 * Its signature is a list of 64-bit words: node types, kernel functions and argument sizes,
 * dependency lists. The cache maps (context id, signature) to an entry: a template graph with
 * its node handles and up to CUPOOL_GRAPH_EXECS_MAX execs, each remembering the parameters
 * of its last launch. A launch diffs the pipeline against the chosen exec and updates only
 * the nodes that differ.
 *
 * An exec is reused on the stream that launched it last, or once its last launch finished.
 * A launch on a new stream gets an exec of its own until the entry has
 * CUPOOL_GRAPH_EXECS_MAX; only then are execs shared among streams. "Finished" needs an event
 * recorded after each launch, a driver call, so an entry records events only from then on
 * (most entries never do).
 *
 * The cache is one table under one mutex, held for lookups and exec selection, never across
 * an instantiation or a launch. A repeat launch skips it: each thread keeps, per signature
 * hash and stream, the entry and exec it launched last (its hints, a set-associative table
 * behind one pointer of its thread cache), and claims them again without the lock when they
 * are unchanged and the exec is free and was last launched on the same stream (fast_claim).
 * That claim may touch an entry or exec just freed, so both are type-stable: freed ones wait
 * on free lists for reuse, and their memory goes back only in cupool_trim(), after a grace
 * period, or at unload.
 *
 * A pipeline refilled per request is compared as it is added (kernel_refill, refill_node):
 * the adds find the last launch's nodes in place, write only what differs and mark what did,
 * so a launch compares nothing, or only the marked nodes, with an exec that ran the last
 * launch (exec_update).
 */
#include "base/internal.h"
#include "base/alloc.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/error.h"
#include "base/lifecycle.h"
#include "pool/maint.h"
#include "pool/pool.h"
#include "graph/graph.h"
#include "base/layer.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#define PIPELINE_MAGIC 0x7069706cu /* "pipl" */

enum pn_type { PN_KERNEL = 1, PN_MEMSET, PN_MEMCPY, PN_RECORD, PN_WAIT, PN_HOST };

/* A kernel's argument layout, from cuFuncGetParamInfo: shared by every pipeline that holds
 * it (refs), and listed in fn_table until cupool_trim() forgets the layouts learnt so far. It
 * is freed once it is neither listed nor held, so layouts take memory for what the live
 * pipelines use and what the table lists, whatever the number of trims. fn_lock guards refs,
 * listed and the table; the other fields are fixed once it is published. */
struct fninfo {
    CUfunction fn;
    uint32_t nparams;
    uint32_t bytes; /* end of the last parameter */
    struct fnparam {
        uint32_t off, size; /* bytes */
    } *param;
    size_t cap;     /* entries allocated in param */
    uint32_t refs;  /* pipelines holding it */
    bool listed;    /* in fn_table */
    struct fninfo *next;
};

struct pnode {
    uint32_t type;
    uint32_t ndeps, dep_start; /* into the pipeline's deps[] */
    uint32_t pad;
    union {
        struct {
            CUfunction fn;
            const struct fninfo *info;
            /* grid x, y, z, block x, y, z, dynamic shared memory (bytes): K_SHAPE words */
            uint32_t shape[7];
            uint32_t arg_off; /* into the args buffer */
        } k;
        struct {
            CUdeviceptr dst;
            uint32_t value, elem;
            size_t count;
        } set;
        struct {
            CUdeviceptr dst, src;
            size_t bytes;
        } copy;
        struct {
            CUevent ev;
        } ev;
        struct {
            CUhostFn fn;
            void *user;
        } host;
    } u;
};

#define K_SHAPE 7 /* words of a kernel node's launch shape */

#define FN_CACHE 8

struct cupool_pipeline {
    uint32_t magic;
    struct pnode *nodes;
    uint32_t n, ndeps;
    size_t cap, depcap;
    uint32_t *deps;
    unsigned char *args;
    size_t alen, acap;
    /* The signature of the last launch, and whether the description since matches it: node
     * adds compare their structure words in place (sigpos), so a pipeline refilled with the
     * same structure skips hashing and lookup at launch. */
    uint64_t *sig;
    size_t sigcap, sigpos, last_nsig;
    uint64_t last_hash;
    uint32_t last_n;
    /* The last launch's leading nodes that were kernels with their default dependency (their
     * words at 3i (1 for node 0): type, function, i - 1): while all_dirty is false, the node
     * in place at such a place still has that launch's function, so a kernel refilled there
     * with it matches its words without reading them (kernel_refilled). Set by signature(). */
    uint32_t sig_chain;
    bool sig_dirty;            /* structure differs from the last launch's (or none yet) */
    /* sigpos and sig_dirty before the last node's words: cupool_pipeline_depend on the node
     * just added emits its words again */
    size_t sig_mark;
    bool dirty_mark;
    CUresult add_error;        /* the first failed add since the last reset (launches refuse) */
    struct gentry *last_entry; /* the entry the last launch used, valid while ... */
    uint64_t last_epoch;       /* ... the cache's epoch has not moved */
    unsigned long long last_ctx_id;
    uint32_t max_params;
    /* The parameters of the last launch, compared as nodes are added (refill): a reset keeps
     * nodes[] and args[], so an add at a place where the last launch had a node of the same
     * kind (same function and argument place, for a kernel) compares its parameters with that
     * node's and writes only what differs, marking the node in chg[] (a bit per node). Every
     * other add writes afresh and sets all_dirty. Invariant, while all_dirty is false: every
     * node below hw that is not marked holds the last launch's parameters. A launch consumes
     * the marks (hw becomes its node count, the marks and all_dirty are cleared). */
    uint32_t hw;    /* nodes of the last launch still in place (0: none to compare with) */
    uint32_t nchg;  /* nodes marked */
    bool all_dirty; /* an add wrote without comparing: any node may differ */
    uint64_t *chg;
    size_t chgcap; /* words allocated in chg */
    /* The description's version, unique across pipelines: moves on at a launch whose
     * description differs from the last launch's. An exec whose snapshot is tagged with
     * (this pipeline, gen) holds exactly the last launch's parameters. */
    uint64_t gen;
    void **argv; /* scratch for kernelParams */
    size_t argvcap;
    const struct fninfo *fcache[FN_CACHE]; /* functions this pipeline used lately */
    unsigned fnext;
    uint64_t fn_epoch; /* fn_epoch when fcache was filled */
    /* every layout its nodes may name (each counted in its refs), dropped at a reset that
     * follows a trim, and at destroy */
    struct fninfo **held;
    size_t nheld, heldcap;
};

static void refill_forget(struct cupool_pipeline *p);
static bool chg_room(struct cupool_pipeline *p, size_t n);

/* ---- small growable arrays from cupool's allocator ---- */

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *fresh = cupool__alloc(n * elem);
    if (!fresh)
        return false;
    if (*p)
        memcpy(fresh, *p, *cap * elem);
    cupool__free(*p, *cap * elem);
    *p = fresh;
    *cap = n;
    return true;
}

#define GROW(arr, cap, need) grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))

/* ---- function argument layouts ---- */

static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fninfo *fn_table[256];
/* Bumped by cupool_trim(): layouts learnt before are looked up again (a function of an
 * unloaded module can be followed by another at the same address). The old layouts stay
 * while pipelines still hold them (their nodes point at them), then go. */
static _Atomic uint64_t fn_epoch;

static size_t fn_bucket(CUfunction f)
{
    return (size_t)(((uint64_t)(uintptr_t)f * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
}

static void fninfo_free(struct fninfo *fi)
{
    cupool__free(fi->param, fi->cap * sizeof(*fi->param));
    cupool__free(fi, sizeof(*fi));
}

/* Drops one pipeline's hold on a layout. fn_lock held. */
static void fninfo_unref(struct fninfo *fi)
{
    if (--fi->refs == 0 && !fi->listed)
        fninfo_free(fi);
}

/* Drops every layout a pipeline holds (its nodes are gone or going). */
static void pipeline_unhold(struct cupool_pipeline *p)
{
    if (p->nheld) {
        pthread_mutex_lock(&fn_lock);
        for (size_t i = 0; i < p->nheld; i++)
            fninfo_unref(p->held[i]);
        pthread_mutex_unlock(&fn_lock);
    }
    p->nheld = 0;
    memset(p->fcache, 0, sizeof(p->fcache));
}

/* Makes p hold fi (once). fn_lock held. False if out of memory. */
static bool pipeline_hold(struct cupool_pipeline *p, struct fninfo *fi)
{
    for (size_t i = 0; i < p->nheld; i++)
        if (p->held[i] == fi)
            return true;
    if (!GROW(p->held, p->heldcap, p->nheld + 1))
        return false;
    p->held[p->nheld++] = fi;
    fi->refs++;
    return true;
}

static struct fninfo *fn_lookup(CUfunction f)
{
    struct fninfo *fi = fn_table[fn_bucket(f)];
    while (fi && fi->fn != f)
        fi = fi->next;
    return fi;
}

/* Reads f's layout from the driver once (not under fn_lock). */
static CUresult fninfo_read(CUfunction f, struct fninfo **out)
{
    if (!cupool__drv.cuFuncGetParamInfo)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                            "pipeline kernels need cuFuncGetParamInfo (a CUDA 12.4 driver)");
    struct fninfo *fi = cupool__alloc(sizeof(*fi));
    if (!fi)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a kernel's layout");
    fi->fn = f;
    for (;;) {
        size_t o = 0, sz = 0;
        CUresult r = CUPOOL_DRV(cupool__drv.cuFuncGetParamInfo(f, fi->nparams, &o, &sz));
        if (r == CUDA_ERROR_INVALID_VALUE)
            break; /* past the last parameter (or f has none) */
        if (r != CUDA_SUCCESS) {
            uint32_t at = fi->nparams;
            fninfo_free(fi);
            return cupool__fail(r, "cuFuncGetParamInfo(%p, %u) failed", (void *)f, at);
        }
        if (!GROW(fi->param, fi->cap, fi->nparams + 1)) {
            fninfo_free(fi);
            return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a kernel's layout");
        }
        fi->param[fi->nparams] = (struct fnparam){(uint32_t)o, (uint32_t)sz};
        if (o + sz > fi->bytes)
            fi->bytes = (uint32_t)(o + sz);
        fi->nparams++;
    }
    *out = fi;
    return CUDA_SUCCESS;
}

static bool fninfo_same(const struct fninfo *a, const struct fninfo *b)
{
    return a->nparams == b->nparams &&
           (!a->nparams || memcmp(a->param, b->param, a->nparams * sizeof(*a->param)) == 0);
}

/* Learns f's layout: read until two readings agree (three at most). The end of the parameter
 * list is CUDA_ERROR_INVALID_VALUE, which a passing failure of one call would imitate: a
 * layout cut short would copy too few argument bytes at every later launch. Once per
 * function (and per trim), a few calls of ~0.1 us. */
static CUresult fninfo_learn(CUfunction f, struct fninfo **out)
{
    struct fninfo *a = NULL, *b = NULL;
    CUresult r = fninfo_read(f, &a);
    for (int reading = 1; r == CUDA_SUCCESS && reading < 3; reading++) {
        r = fninfo_read(f, &b);
        if (r != CUDA_SUCCESS)
            break;
        if (fninfo_same(a, b)) {
            fninfo_free(b);
            *out = a;
            return CUDA_SUCCESS;
        }
        fninfo_free(a);
        a = b;
        b = NULL;
    }
    if (a)
        fninfo_free(a);
    if (r == CUDA_SUCCESS)
        r = cupool__fail(CUDA_ERROR_UNKNOWN,
                         "cuFuncGetParamInfo(%p) gave a different parameter list each time",
                         (void *)f);
    return r;
}

/* f's layout, held by p: from p's recent functions, the shared table, or the driver. */
static CUresult fninfo_get(struct cupool_pipeline *p, CUfunction f, const struct fninfo **out)
{
    uint64_t epoch = atomic_load_explicit(&fn_epoch, CUPOOL_ACQUIRE);
    if (CUPOOL_UNLIKELY(p->fn_epoch != epoch)) {
        memset(p->fcache, 0, sizeof(p->fcache)); /* held ones stay: nodes may name them */
        p->fn_epoch = epoch;
        refill_forget(p); /* the nodes in place name the old layouts */
    }
    for (unsigned i = 0; i < FN_CACHE; i++)
        if (p->fcache[i] && p->fcache[i]->fn == f) {
            *out = p->fcache[i];
            return CUDA_SUCCESS;
        }
    pthread_mutex_lock(&fn_lock);
    struct fninfo *fi = fn_lookup(f);
    bool held = fi && pipeline_hold(p, fi);
    pthread_mutex_unlock(&fn_lock);
    if (fi && !held)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline's layouts");
    if (!fi) {
        struct fninfo *fresh = NULL;
        CUresult r = fninfo_learn(f, &fresh);
        if (r != CUDA_SUCCESS)
            return r;
        pthread_mutex_lock(&fn_lock);
        fi = fn_lookup(f);
        if (!fi) {
            fi = fresh;
            fi->listed = true;
            fi->next = fn_table[fn_bucket(f)];
            fn_table[fn_bucket(f)] = fi;
            fresh = NULL;
        }
        held = pipeline_hold(p, fi);
        pthread_mutex_unlock(&fn_lock);
        if (fresh) /* another thread was first */
            fninfo_free(fresh);
        if (!held)
            return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline's layouts");
    }
    p->fcache[p->fnext++ % FN_CACHE] = fi;
    *out = fi;
    return CUDA_SUCCESS;
}

/* cupool_trim(): forgets every learnt layout; those pipelines still hold go when they drop
 * them. */
static void fn_table_trim(void)
{
    pthread_mutex_lock(&fn_lock);
    for (size_t b = 0; b < sizeof(fn_table) / sizeof(fn_table[0]); b++) {
        struct fninfo *fi = fn_table[b];
        fn_table[b] = NULL;
        while (fi) {
            struct fninfo *next = fi->next;
            fi->listed = false;
            fi->next = NULL;
            if (fi->refs == 0)
                fninfo_free(fi);
            fi = next;
        }
    }
    atomic_fetch_add_explicit(&fn_epoch, 1, CUPOOL_RELEASE);
    pthread_mutex_unlock(&fn_lock);
}

/* ---- building a pipeline ---- */

static struct cupool_pipeline *pipeline_of(cupool_pipeline_t p)
{
    return p && p->magic == PIPELINE_MAGIC ? p : NULL;
}

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
    p->fn_epoch = atomic_load(&fn_epoch);
    p->gen = (atomic_fetch_add(&serial, 1) + 1) << 32;
    *pipeline = p;
    return CUDA_SUCCESS;
}

CUresult cupool_pipeline_destroy(cupool_pipeline_t pipeline)
{
    if (cupool__forked()) /* a lock a parent's thread held may guard the memory */
        return cupool__enter();
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!pipeline)
        return CUDA_SUCCESS;
    if (!p)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_destroy: not a pipeline");
    p->magic = 0;
    pipeline_unhold(p);
    cupool__free(p->held, p->heldcap * sizeof(*p->held));
    cupool__free(p->nodes, p->cap * sizeof(*p->nodes));
    cupool__free(p->deps, p->depcap * sizeof(*p->deps));
    cupool__free(p->args, p->acap);
    cupool__free(p->sig, p->sigcap * sizeof(*p->sig));
    cupool__free(p->argv, p->argvcap * sizeof(*p->argv));
    cupool__free(p->chg, p->chgcap * sizeof(*p->chg));
    cupool__free(p, sizeof(*p));
    return CUDA_SUCCESS;
}

CUresult cupool_pipeline_reset(cupool_pipeline_t pipeline)
{
    if (cupool__forked())
        return cupool__enter();
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!p)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_reset: not a pipeline");
    p->n = 0;
    p->ndeps = 0;
    p->alen = 0;
    /* after a trim, the layouts the old nodes named are let go (they are looked up afresh),
     * and with them the nodes to compare with */
    if (CUPOOL_UNLIKELY(p->fn_epoch != atomic_load_explicit(&fn_epoch, CUPOOL_ACQUIRE))) {
        pipeline_unhold(p);
        refill_forget(p);
    }
    p->sigpos = 1; /* word 0 is the node count, compared at launch */
    p->sig_dirty = p->last_nsig == 0;
    p->add_error = CUDA_SUCCESS;
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

/* The structure words of node i (see signature()). */
static void sig_node(struct cupool_pipeline *p, uint32_t i)
{
    const struct pnode *n = &p->nodes[i];
    p->sig_mark = p->sigpos;
    p->dirty_mark = p->sig_dirty;
    sig_word(p, (uint64_t)n->type << 32 | n->ndeps);
    sig_word(p, n->type == PN_KERNEL ? (uint64_t)(uintptr_t)n->u.k.fn : 0);
    for (uint32_t d = 0; d < n->ndeps; d++)
        sig_word(p, p->deps[n->dep_start + d]);
}

/* Appends a node depending on the one before it, written afresh (no comparison with the
 * last launch's node at its place: see refill_node for that); *out gets it. */
static CUresult node_push(struct cupool_pipeline *p, uint32_t type, struct pnode **out,
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
    if (p->n > 0) {
        p->deps[p->ndeps++] = p->n - 1;
        n->ndeps = 1;
    }
    if (number)
        *number = p->n;
    p->n++;
    *out = n;
    return CUDA_SUCCESS;
}

/* ---- refilling in place: adds compare with the last launch's nodes ---- */

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

/* The nodes in place no longer hold the last launch's parameters (their layouts were let go
 * after a trim): later adds write afresh, and the next launch compares every node. */
static void refill_forget(struct cupool_pipeline *p)
{
    p->hw = 0;
    p->all_dirty = true;
}

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
    sig_node(p, i);
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
 * function with its arguments at the same offset. False, with nothing added, for the general
 * path (kernel_add), which also reports bad arguments: no pipeline, a zero dimension, a NULL
 * argument, a library not running. The per-request path: every field is read once, only
 * what differs is written, and every check comes before the first write. (A trim since the
 * reset does not matter: the layouts in place are held by the pipeline, and f, being
 * described, is the function they were learnt for.) */
static inline __attribute__((always_inline)) bool
kernel_refill(struct cupool_pipeline *p, CUfunction f, unsigned int gx, unsigned int gy,
              unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
              unsigned int shmem, void **args, cupool_node_t *number)
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
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (r != CUDA_SUCCESS && p && p->add_error == CUDA_SUCCESS)
        p->add_error = r;
    return r;
}

static CUresult kernel_add(cupool_pipeline_t pipeline, CUfunction f, unsigned int grid_x,
                           unsigned int grid_y, unsigned int grid_z, unsigned int block_x,
                           unsigned int block_y, unsigned int block_z, unsigned int shared_bytes,
                           void **args, cupool_node_t *node)
{
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!p || !f || !grid_x || !grid_y || !grid_z || !block_x || !block_y || !block_z)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            !p ? "cupool_pipeline_kernel: not a pipeline"
                               : !f ? "cupool_pipeline_kernel: function is NULL"
                                    : "cupool_pipeline_kernel: a grid or block dimension is 0");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    const struct fninfo *fi = NULL;
    r = fninfo_get(p, f, &fi);
    if (r != CUDA_SUCCESS)
        return r;
    if (fi->nparams && !args)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            "cupool_pipeline_kernel: args is NULL for a kernel of %u parameters",
                            fi->nparams);
    for (uint32_t i = 0; i < fi->nparams; i++)
        if (!args[i])
            return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                "cupool_pipeline_kernel: args[%u] is NULL", i);
    size_t off = (p->alen + 15) & ~(size_t)15;
    if (!grow((void **)&p->args, &p->acap, off + fi->bytes + 1, 1))
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for kernel arguments");
    struct pnode *n;
    r = node_push(p, PN_KERNEL, &n, node);
    if (r != CUDA_SUCCESS)
        return r;
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
    sig_node(p, p->n - 1);
    return CUDA_SUCCESS;
}

static CUresult memset_add(cupool_pipeline_t pipeline, CUdeviceptr dst, unsigned int value,
                           unsigned int element_bytes, size_t count, cupool_node_t *node)
{
    struct cupool_pipeline *p = pipeline_of(pipeline);
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
    CUresult r = node_push(p, PN_MEMSET, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.set.dst = dst;
        n->u.set.value = value;
        n->u.set.elem = element_bytes;
        n->u.set.count = count;
        sig_node(p, p->n - 1);
    }
    return r;
}

static CUresult memcpy_add(cupool_pipeline_t pipeline, CUdeviceptr dst, CUdeviceptr src,
                           size_t bytes, cupool_node_t *node)
{
    struct cupool_pipeline *p = pipeline_of(pipeline);
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
    CUresult r = node_push(p, PN_MEMCPY, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.copy.dst = dst;
        n->u.copy.src = src;
        n->u.copy.bytes = bytes;
        sig_node(p, p->n - 1);
    }
    return r;
}

static CUresult event_node(cupool_pipeline_t pipeline, CUevent ev, uint32_t type,
                           cupool_node_t *node, const char *what)
{
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!p || !ev)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "%s: %s", what,
                            !p ? "not a pipeline" : "event is NULL");
    struct pnode *n = refill_node(p, type);
    if (n) {
        bool changed = n->u.ev.ev != ev;
        n->u.ev.ev = ev;
        refill_done(p, n, changed, node);
        return CUDA_SUCCESS;
    }
    CUresult r = node_push(p, type, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.ev.ev = ev;
        sig_node(p, p->n - 1);
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
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!p || !fn)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_host: %s",
                            !p ? "not a pipeline" : "fn is NULL");
    struct pnode *n = refill_node(p, PN_HOST);
    if (n) {
        bool changed = n->u.host.fn != fn || n->u.host.user != user_data;
        n->u.host.fn = fn;
        n->u.host.user = user_data;
        refill_done(p, n, changed, node);
        return CUDA_SUCCESS;
    }
    CUresult r = node_push(p, PN_HOST, &n, node);
    if (r == CUDA_SUCCESS) {
        n->u.host.fn = fn;
        n->u.host.user = user_data;
        sig_node(p, p->n - 1);
    }
    return r;
}

static CUresult depend_add(cupool_pipeline_t pipeline, cupool_node_t node, const cupool_node_t *on,
                           size_t count)
{
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!p || node >= (p ? p->n : 0) || (count && !on))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_depend: %s",
                            !p ? "not a pipeline" : "node out of range, or on NULL");
    for (size_t i = 0; i < count; i++) {
        if (on[i] >= node)
            return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                "cupool_pipeline_depend: node %u cannot depend on node %u "
                                "(dependencies must be added before)",
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
        sig_node(p, node);
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
                                 shared_bytes, args, node));
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
                      shared_bytes, args, node))
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
    _Static_assert(offsetof(struct cupool_pipeline, ndeps) == offsetof(struct cupool_pipeline, n) + 4,
                   "n, ndeps: one store");
    uint32_t i = p->n, nd = p->ndeps, has_dep = i > 0;
    p->alen = off + fi->bytes;
    const uint32_t nd_ds[2] = {has_dep, nd}; /* ndeps, dep_start: one store, any byte order */
    memcpy(&n->ndeps, nd_ds, 8);
    p->deps[nd] = i - 1; /* nd < depcap; read only below ndeps (when i is 0, it is not) */
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
    /* the kind, function and shape in one test, the shape two words at a time (the union's
     * words of another kind of node are read, never used) */
    uint64_t s01, s23, s45;
    memcpy(&s01, &n->u.k.shape[0], 8);
    memcpy(&s23, &n->u.k.shape[2], 8);
    memcpy(&s45, &n->u.k.shape[4], 8);
    if (CUPOOL_UNLIKELY(((s01 ^ ((uint64_t)grid_y << 32 | grid_x)) |
                         (s23 ^ ((uint64_t)block_x << 32 | grid_z)) |
                         (s45 ^ ((uint64_t)block_z << 32 | block_y)) |
                         (n->u.k.shape[6] ^ shared_bytes) | (n->type ^ PN_KERNEL)) != 0 ||
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

/* ---- signature ---- */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + UINT64_C(0x9E3779B97F4A7C15) + (h << 6) + (h >> 2);
    return h * UINT64_C(0xff51afd7ed558ccd);
}

/* Writes the signature words into p->sig; returns their count (0: out of memory). */
static size_t signature(struct cupool_pipeline *p, uint64_t *hash)
{
    size_t need = 1 + (size_t)p->n * 3 + p->ndeps;
    if (!GROW(p->sig, p->sigcap, need))
        return 0;
    size_t w = 0;
    uint64_t h = 0;
    uint32_t chain = 0;
    p->sig[w++] = p->n;
    for (uint32_t i = 0; i < p->n; i++) {
        const struct pnode *n = &p->nodes[i];
        if (chain == i && n->type == PN_KERNEL && n->ndeps == (i > 0) &&
            (i == 0 || p->deps[n->dep_start] == i - 1))
            chain = i + 1;
        p->sig[w++] = (uint64_t)n->type << 32 | n->ndeps;
        /* the function is structure (and its layout with it); everything else is patched */
        p->sig[w++] = n->type == PN_KERNEL ? (uint64_t)(uintptr_t)n->u.k.fn : 0;
        for (uint32_t d = 0; d < n->ndeps; d++)
            p->sig[w++] = p->deps[n->dep_start + d];
    }
    for (size_t i = 0; i < w; i++)
        h = mix(h, p->sig[i]);
    p->sig_chain = chain;
    *hash = h;
    return w;
}

/* ---- the cache ---- */

struct gexec {
    /* Ownership: whoever turns it from false to true (compare-and-swap) owns the exec and
     * alone may read or change the fields below, or free it. A free exec stays true. Never
     * reset: first in the struct, so recycling clears everything after it. */
    _Atomic bool busy;
    struct gentry *entry; /* its entry, and a serial new at each (re)use of the struct */
    uint64_t serial;
    struct gexec *free_next;
    CUgraphExec exec;
    /* Its own clone of the entry's template, instantiated once, and the clone's nodes in the
     * template's order (for updates): NULL for an exec of a capture's own graph (see
     * exec_new_of for why a template is never instantiated twice). */
    CUgraph graph;
    CUgraphNode *nodes;
    uint32_t nnodes;
    CUstream last_stream; /* compared only, never passed to the driver again */
    CUevent done;         /* recorded after each launch once the entry is multi-stream */
    bool launched, done_valid;
    /* The description its snapshot equals, as (pipeline, generation): a relaunch of an
     * untouched pipeline on this exec skips the comparison. */
    const struct cupool_pipeline *snap_owner;
    uint64_t snap_gen;
    struct pnode *snap; /* the parameters of its last launch (or of the template) */
    unsigned char *snap_args;
    size_t snap_cap, snap_acap, snap_alen;
    /* of an exec of a capture: the launch attributes of its kernel nodes that an update does
     * not change (graph_fingerprint); fp_known false when they could not be read */
    uint32_t *fp;
    size_t nfp;
    bool fp_known;
};

#define EXECS_LIMIT 64

struct gentry {
    /* Locked launches and DOT prints using the entry now: it is not evicted meanwhile (a
     * lock-free launch holds one of its execs instead, see fast_claim). Only ever added to
     * and subtracted from: first in the struct, so recycling clears everything after it. */
    _Atomic int busy;
    _Atomic uint64_t last_use; /* cache_clock when last launched: eviction order */
    uint64_t evict_pass;       /* the eviction pass that last failed to evict it */
    bool published;            /* it has been in the table (a thread's hint may name it) */
    struct gentry *free_next;
    uint64_t hash;
    unsigned long long ctx_id;
    CUcontext ctx;
    uint64_t *sig;
    size_t nsig;
    CUgraph graph;
    CUgraphNode *gnodes;
    uint32_t n;
    struct pnode *tmpl; /* the parameters the graph was built with */
    unsigned char *tmpl_args;
    size_t tmpl_alen;
    struct gexec *execs[EXECS_LIMIT];
    bool captured; /* cupool_capture_launch's: its execs keep launch-attribute fingerprints */
    int nexecs;
    int npending; /* new execs being instantiated for it (counted against the limit) */
    _Atomic bool multi_stream; /* set under the lock, read without */
    size_t bytes;
    struct gentry *hnext, *prev, *next; /* hash chain; list of all entries */
};

#define BUCKETS 1024
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gentry *buckets[BUCKETS];
static struct gentry *entries_head; /* every cached entry */
static size_t cache_entries, cache_bytes, cache_execs;
static struct gentry *free_entries; /* type-stable structs for reuse (cache lock) */
static struct gexec *free_execs;
static _Atomic uint64_t exec_serial;
/* Bumped whenever an entry is freed, before each eviction attempt claims an entry's execs
 * (sequentially consistent, against fast_claim's claim-then-check: a Dekker handshake), and
 * by cupool_trim() before it returns free structs to the allocator. */
static CUPOOL_LINE(_Atomic uint64_t) cache_epoch; /* read by every lock-free claim */
/* Ticks only when the most recently launched entry changes: last_use stamps (exact LRU order
 * without a shared write per launch). */
static CUPOOL_LINE(_Atomic uint64_t) cache_clock = {1}; /* a new entry's last_use, 0, is older */

/* counters: the first four under cache_lock (a launch takes it anyway), the rest atomic,
 * added to only when non-zero */
static uint64_t st_launches, st_hits, st_misses, st_evictions;
static _Atomic uint64_t st_inst, st_updates, st_nodes_updated, st_update_failures, st_eager;

#define DRIVER_BYTES_PER_NODE 1024 /* an estimate of the driver's memory per node and exec */

static void list_unlink(struct gentry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        entries_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->prev = e->next = NULL;
}

static void list_push(struct gentry *e)
{
    e->next = entries_head;
    e->prev = NULL;
    if (entries_head)
        entries_head->prev = e;
    entries_head = e;
}

/* Stamps e as the most recently launched entry. A shared write only when it was not already. */
static inline void entry_touch(struct gentry *e)
{
    uint64_t now = atomic_load_explicit(&cache_clock.v, CUPOOL_RELAXED);
    if (atomic_load_explicit(&e->last_use, CUPOOL_RELAXED) != now)
        atomic_store_explicit(&e->last_use,
                              atomic_fetch_add_explicit(&cache_clock.v, 1, CUPOOL_RELAXED) + 1,
                              CUPOOL_RELAXED);
}

/* Takes ownership of an exec (see struct gexec). Sequentially consistent: fast_claim() and
 * entry_evict() each follow a write with a read of what the other writes (the claim, the
 * cache epoch). */
static inline bool exec_own(struct gexec *x)
{
    bool idle = false;
    return atomic_compare_exchange_strong(&x->busy, &idle, true);
}

static inline void exec_disown(struct gexec *x)
{
    atomic_store_explicit(&x->busy, false, CUPOOL_RELEASE);
}

/* ---- type-stable structs ---- */

#define ENTRY_KEEP offsetof(struct gentry, last_use) /* busy is never cleared */
#define EXEC_KEEP offsetof(struct gexec, entry)

static struct gentry *entry_struct_get(void)
{
    pthread_mutex_lock(&cache_lock);
    struct gentry *e = free_entries;
    if (e)
        free_entries = e->free_next;
    pthread_mutex_unlock(&cache_lock);
    if (e)
        memset((char *)e + ENTRY_KEEP, 0, sizeof(*e) - ENTRY_KEEP);
    else
        e = cupool__alloc(sizeof(*e));
    return e;
}

/* Cache lock held. */
static void entry_struct_put(struct gentry *e)
{
    e->free_next = free_entries;
    free_entries = e;
}

static void entry_struct_put_locked(struct gentry *e)
{
    pthread_mutex_lock(&cache_lock);
    entry_struct_put(e);
    pthread_mutex_unlock(&cache_lock);
}

/* An exec struct owned by the caller, with a new serial. */
static struct gexec *exec_struct_get(void)
{
    pthread_mutex_lock(&cache_lock);
    struct gexec *x = free_execs;
    if (x)
        free_execs = x->free_next;
    pthread_mutex_unlock(&cache_lock);
    if (x) {
        memset((char *)x + EXEC_KEEP, 0, sizeof(*x) - EXEC_KEEP); /* busy stays true */
    } else {
        x = cupool__alloc(sizeof(*x));
        if (!x)
            return NULL;
        atomic_store_explicit(&x->busy, true, CUPOOL_RELAXED);
    }
    x->serial = atomic_fetch_add_explicit(&exec_serial, 1, CUPOOL_RELAXED) + 1;
    return x;
}

/* An owned exec struct back to the free list (still busy). Cache lock held. */
static void exec_struct_put(struct gexec *x)
{
    x->free_next = free_execs;
    free_execs = x;
}

static void exec_struct_put_locked(struct gexec *x)
{
    pthread_mutex_lock(&cache_lock);
    exec_struct_put(x);
    pthread_mutex_unlock(&cache_lock);
}

static size_t exec_bytes(const struct gentry *e, const struct gexec *x)
{
    /* (a capture's fingerprint, 60 bytes a kernel, is left out: it may change size while the
     * exec is cached, and the estimate is added and taken away whole) */
    return sizeof(*x) + x->snap_cap * sizeof(struct pnode) + x->snap_acap +
           (size_t)e->n * DRIVER_BYTES_PER_NODE;
}

/* ---- launch attributes an update does not apply ----
 * On the H200 (driver 580.159, 2026-12-01) cuGraphExecUpdate accepted a recaptured graph whose
 * kernel launched with another thread-block cluster dimension, returned success, and the exec
 * went on launching with the first capture's dimension: a wrong result, with no error. The
 * driver documents that a cooperative node cannot become non-cooperative, nor the reverse.
 * Attributes of the same kind (preferred cluster dimension, cluster scheduling policy, memory
 * synchronisation domain) are taken as not updatable either: instantiating afresh is always
 * right. So an exec of a capture keeps these attributes of its kernel nodes, in node order
 * (its fingerprint), and a recapture whose fingerprint differs is instantiated anew instead of
 * updated. Pipelines set no launch attribute. */
static const CUkernelNodeAttrID fp_attrs[] = {
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE, CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN};
#define FP_ATTRS (sizeof(fp_attrs) / sizeof(fp_attrs[0]))
#define FP_WORDS_PER_NODE (FP_ATTRS * 3)

/* The words of one attribute's value (three each; unused ones 0). */
static void fp_words(CUkernelNodeAttrID id, const CUkernelNodeAttrValue *v, uint32_t *w)
{
    w[0] = w[1] = w[2] = 0;
    switch ((int)id) {
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        w[0] = v->clusterDim.x, w[1] = v->clusterDim.y, w[2] = v->clusterDim.z;
        break;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        w[0] = v->preferredClusterDim.x, w[1] = v->preferredClusterDim.y;
        w[2] = v->preferredClusterDim.z;
        break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        w[0] = (uint32_t)v->cooperative;
        break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        w[0] = (uint32_t)v->clusterSchedulingPolicyPreference;
        break;
    default: /* CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN */
        w[0] = (uint32_t)v->memSyncDomain;
        break;
    }
}

/* Reads the fingerprint of graph's kernel nodes into a new array (*out, *n words). False when
 * it cannot be read (no entry points, a driver error): the caller then takes it as different
 * from every other. An attribute the driver does not know (CUDA_ERROR_INVALID_VALUE, an older
 * driver) reads as all ones. */
static bool graph_fingerprint(CUgraph g, uint32_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!cupool__drv.cuGraphGetNodes || !cupool__drv.cuGraphNodeGetType ||
        !cupool__drv.cuGraphKernelNodeGetAttribute)
        return false;
    size_t count = 0;
    if (CUPOOL_DRV(cupool__drv.cuGraphGetNodes(g, NULL, &count)) != CUDA_SUCCESS)
        return false;
    if (count == 0)
        return true;
    CUgraphNode *nodes = cupool__alloc(count * sizeof(*nodes));
    uint32_t *fp = cupool__alloc(count * FP_WORDS_PER_NODE * sizeof(*fp));
    bool ok = nodes && fp;
    size_t got = count, w = 0;
    ok = ok && CUPOOL_DRV(cupool__drv.cuGraphGetNodes(g, nodes, &got)) == CUDA_SUCCESS &&
         got == count;
    for (size_t i = 0; ok && i < count; i++) {
        CUgraphNodeType type;
        ok = CUPOOL_DRV(cupool__drv.cuGraphNodeGetType(nodes[i], &type)) == CUDA_SUCCESS;
        if (!ok || type != CU_GRAPH_NODE_TYPE_KERNEL)
            continue;
        for (size_t a = 0; ok && a < FP_ATTRS; a++, w += 3) {
            CUkernelNodeAttrValue v;
            memset(&v, 0, sizeof(v));
            CUresult r = CUPOOL_DRV(cupool__drv.cuGraphKernelNodeGetAttribute(nodes[i],
                                                                              fp_attrs[a], &v));
            if (r == CUDA_SUCCESS)
                fp_words(fp_attrs[a], &v, &fp[w]);
            else if (r == CUDA_ERROR_INVALID_VALUE)
                fp[w] = fp[w + 1] = fp[w + 2] = UINT32_MAX;
            else
                ok = false;
        }
    }
    cupool__free(nodes, count * sizeof(*nodes));
    if (!ok) {
        cupool__free(fp, count * FP_WORDS_PER_NODE * sizeof(*fp));
        return false;
    }
    *out = fp;
    *n = count * FP_WORDS_PER_NODE; /* allocated size; the words past w stay 0 */
    return true;
}

/* Gives an exec the fingerprint fp (taking it), freeing its old one. */
static void exec_fp_set(struct gexec *x, uint32_t *fp, size_t n, bool known)
{
    cupool__free(x->fp, x->nfp * sizeof(*x->fp));
    x->fp = fp;
    x->nfp = n;
    x->fp_known = known;
}

static bool fp_same(const struct gexec *x, const uint32_t *fp, size_t n, bool known)
{
    return known && x->fp_known && n == x->nfp && (!n || memcmp(fp, x->fp, n * sizeof(*fp)) == 0);
}

/* Copies the pipeline's parameters into an exec's snapshot. */
static bool snapshot(struct gexec *x, const struct cupool_pipeline *p)
{
    if (!grow((void **)&x->snap, &x->snap_cap, p->n, sizeof(*x->snap)) ||
        !grow((void **)&x->snap_args, &x->snap_acap, p->alen + 1, 1))
        return false;
    memcpy(x->snap, p->nodes, p->n * sizeof(*p->nodes));
    if (p->alen)
        memcpy(x->snap_args, p->args, p->alen);
    x->snap_alen = p->alen;
    return true;
}

/* Is the entry's context still the one its graph was built in? (No call on a dead one.) */
/* 1: the entry's context is the one its graph was built in; 0: it is gone; -1: unknown now
 * (a passing driver error). */
static int entry_ctx_state(const struct gentry *e)
{
    CUresult err = CUDA_SUCCESS;
    return cupool__ctx_verdict(e->ctx, e->ctx_id, &err);
}

/* ---- deferred destruction ----
 * An exec leaving the cache may still have launches queued on the GPU. Its driver objects are
 * not destroyed under the cache lock (the documentation promises asynchronous release, but a
 * destroy that waited for the GPU would hold up every launch that misses; on the H200 one
 * returned in 22 us with a 2 ms launch queued): they are buried here and destroyed outside
 * the lock, once their completion event says they are done, or, for an exec that never
 * recorded one, when more than GRAVES_BLIND_MAX of those are waiting (the driver frees a
 * still-running exec once it completes). cupool_trim() and unload destroy them all. */
struct grave {
    CUgraphExec exec;
    CUgraph graph; /* the exec's own clone of its template, or a template or capture graph */
    CUevent done;
    bool done_valid; /* done stands for the exec's last launch */
    bool ready;      /* nothing of it can be running: destroy at the next reap */
    CUcontext ctx;
    unsigned long long ctx_id;
};
#define GRAVES_BLIND_MAX 16
/* The graveyard (cache lock): grows as needed, so nothing that must be destroyed is ever
 * dropped, and a destroy the driver refused once is tried again at a later reap. */
static struct grave *graves;
static int ngraves, nblind;
static size_t graves_cap;
/* the instantiation gate (below): sections of driver calls no instantiation overlaps */
static inline _Atomic uint32_t *gate_enter(void);
static inline void gate_leave(_Atomic uint32_t *c);

static _Atomic int graves_due; /* graves a launch may reap now (read without the lock) */
/* the maintenance thread looks at the graveyard until it is empty (set by the launch that
 * kicked it; cleared by the thread once it found no grave left) */
static _Atomic bool graves_watched;

static bool grave_blind(const struct grave *g)
{
    return !g->ready && !g->done_valid;
}

static void graves_count(void)
{
    int due = ngraves - nblind + (nblind > GRAVES_BLIND_MAX ? nblind : 0);
    atomic_store_explicit(&graves_due, due, CUPOOL_RELAXED);
}

/* Destroys what it can of g's objects, clearing each one the driver destroyed; true when
 * nothing is left (or its context is gone: nothing to call), false when the grave must stay
 * (its context cannot be told now, or a destroy failed for a passing reason). */
static bool grave_destroy(struct grave *g)
{
    CUresult err = CUDA_SUCCESS;
    int st = cupool__ctx_verdict(g->ctx, g->ctx_id, &err);
    if (st == 0 || err == CUDA_ERROR_DEINITIALIZED)
        return true; /* its context is gone, or the driver: nothing left to destroy */
    if (st < 0)
        return false;
    /* an object is gone once destroyed, or once the driver itself is */
#define GONE(call) ((r = CUPOOL_DRV(call)) == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED)
    CUresult r;
    if (g->exec && GONE(cupool__drv.cuGraphExecDestroy(g->exec)))
        g->exec = NULL;
    if (g->graph && GONE(cupool__drv.cuGraphDestroy(g->graph)))
        g->graph = NULL;
    if (g->done && GONE(cupool__drv.cuEventDestroy(g->done)))
        g->done = NULL;
#undef GONE
    if (g->exec || g->graph || g->done) {
        g->ready = true; /* what is left has been let go of: retry at the next reap */
        return false;
    }
    return true;
}

/* The last resort: a destroy failed and there is no memory to keep the object for a retry. */
static void grave_lost(const char *what)
{
    cupool__log(CUPOOL_LOG_WARN, "no memory to keep %s whose destroy failed: it is left to the "
                                 "driver",
                what);
}

/* Adds a grave. Cache lock held. False when there is no memory for it (the caller destroys
 * its objects itself then: the rare slow case). */
static bool grave_add(const struct grave *g)
{
    if (!GROW(graves, graves_cap, (size_t)ngraves + 1))
        return false;
    graves[ngraves++] = *g;
    nblind += grave_blind(g);
    graves_count();
    return true;
}

/* Destroys driver objects of a context now, outside the cache lock; whatever the driver does
 * not destroy (a passing error) is buried and tried again at a later reap: a failed destroy
 * never leaks the object. */
static void objects_destroy(CUgraphExec exec, CUgraph graph, CUevent done, CUcontext ctx,
                            unsigned long long ctx_id)
{
    if (!exec && !graph && !done)
        return;
    struct grave g = {exec, graph, done, false, true, ctx, ctx_id};
    if (grave_destroy(&g))
        return;
    pthread_mutex_lock(&cache_lock);
    bool buried = grave_add(&g);
    pthread_mutex_unlock(&cache_lock);
    if (!buried)
        grave_lost("a graph object");
}

/* Buries x's driver objects (and, for an entry, its template graph: graph given). Cache lock
 * held. False when there is no memory (the caller destroys them itself then). */
static bool exec_bury(const struct gentry *e, struct gexec *x)
{
    struct grave g = {x->exec, x->graph, x->done, x->done_valid && x->done != NULL, false,
                      e->ctx, e->ctx_id};
    return grave_add(&g);
}

/* Destroys the buried objects that are done (all of them when `all`), outside the lock. */
static void graves_reap(bool all)
{
    enum { BATCH = 64 };
    for (int round = 0;; round++) {
        struct grave out[BATCH];
        int n = 0;
        pthread_mutex_lock(&cache_lock);
        bool blind = all || nblind > GRAVES_BLIND_MAX;
        CUcontext vctx = NULL;
        unsigned long long vid = 0;
        int vst = -1;
        bool vknown = false;
        /* a retry round looks only at graves not yet tried in this reap (moved to the end) */
        int limit = ngraves;
        for (int i = 0; i < limit && n < BATCH;) {
            struct grave *g = &graves[i];
            bool go = g->ready || (g->done_valid ? all : blind);
            if (!go && g->done_valid) {
                /* no call on an event of a reset context (the driver crashes) */
                if (!vknown || g->ctx != vctx || g->ctx_id != vid) {
                    CUresult err = CUDA_SUCCESS;
                    vst = cupool__ctx_verdict(g->ctx, g->ctx_id, &err);
                    vctx = g->ctx, vid = g->ctx_id, vknown = true;
                }
                go = vst == 0 || (vst == 1 && CUPOOL_DRV(cupool__drv.cuEventQuery(g->done)) !=
                                                  CUDA_ERROR_NOT_READY);
            }
            if (go) {
                out[n++] = *g;
                nblind -= grave_blind(g);
                graves[i] = graves[--ngraves];
                limit--;
            } else {
                i++;
            }
        }
        graves_count();
        pthread_mutex_unlock(&cache_lock);
        int keep = 0;
        for (int i = 0; i < n; i++)
            if (!grave_destroy(&out[i]))
                out[keep++] = out[i]; /* cannot be told or destroyed now: back, for later */
        if (keep) {
            pthread_mutex_lock(&cache_lock);
            for (int i = 0; i < keep; i++)
                if (!grave_add(&out[i]))
                    grave_lost("a graph object");
            pthread_mutex_unlock(&cache_lock);
        }
        if (n < BATCH || keep == n)
            return; /* all looked at, or nothing more can go now */
    }
}

/* After a launch, while graves are due: the maintenance thread reaps them (maint.h); without
 * it (CUPOOL_BACKGROUND=0, or it could not start) the launching thread does, one launch in 16. */
static inline void graves_maybe_reap(void)
{
    static CUPOOL_TLS_IE unsigned tick;
    if (CUPOOL_LIKELY(atomic_load_explicit(&graves_due, CUPOOL_RELAXED) <= 0))
        return;
    /* the thread watches the graveyard until it is empty: one kick, not one per launch */
    if (atomic_load_explicit(&graves_watched, CUPOOL_RELAXED))
        return;
    if (cupool__maint_kick(CUPOOL_MAINT_GRAVES)) {
        atomic_store_explicit(&graves_watched, true, CUPOOL_RELAXED);
        return;
    }
    if ((++tick & 15) == 0)
        graves_reap(false);
}

static bool graph_graves_maintain(void)
{
    atomic_store(&graves_watched, true);
    pthread_mutex_lock(&cupool__maint_unit); /* cupool_context_release waits for it */
    graves_reap(false);
    pthread_mutex_unlock(&cupool__maint_unit);
    pthread_mutex_lock(&cache_lock);
    bool more = ngraves > 0;
    pthread_mutex_unlock(&cache_lock);
    if (more)
        return true;
    atomic_store(&graves_watched, false);
    /* a grave buried since the look above saw the watch still on and did not kick */
    return atomic_load(&graves_due) > 0;
}

static void exec_free(struct gentry *e, struct gexec *x, bool alive)
{
    if (alive && (x->exec || x->done || x->graph) && !exec_bury(e, x)) {
        struct grave g = {x->exec, x->graph, x->done, false, true, e->ctx, e->ctx_id};
        if (!grave_destroy(&g)) /* no memory for a grave: now, under the lock (rare) */
            grave_lost("a graph exec");
    }
    cache_bytes -= exec_bytes(e, x);
    cache_execs--;
    cupool__free(x->snap, x->snap_cap * sizeof(*x->snap));
    cupool__free(x->snap_args, x->snap_acap);
    cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
    exec_fp_set(x, NULL, 0, false);
    exec_struct_put(x);
}

/* Frees an entry that is out of the table and the LRU list. Cache lock held. */
static void entry_free_as(struct gentry *e, bool alive)
{
    if (e->published) /* a thread's hint may name it */
        atomic_fetch_add(&cache_epoch.v, 1);
    for (int i = 0; i < e->nexecs; i++)
        exec_free(e, e->execs[i], alive);
    if (alive && e->graph) {
        /* destroyed outside the lock, at the next reap (nothing of it runs) */
        struct grave g = {NULL, e->graph, NULL, false, true, e->ctx, e->ctx_id};
        if (!grave_add(&g) && !grave_destroy(&g))
            grave_lost("a template graph");
        e->graph = NULL;
    }
    cache_bytes -= e->bytes;
    cache_entries--;
    cupool__free(e->sig, e->nsig * sizeof(*e->sig));
    cupool__free(e->gnodes, e->n * sizeof(*e->gnodes));
    cupool__free(e->tmpl, e->n * sizeof(*e->tmpl));
    cupool__free(e->tmpl_args, e->tmpl_alen + 1);
    entry_struct_put(e);
}

/* Frees an entry; its driver objects are buried unless its context is proven gone (the
 * graveyard asks again before it calls the driver). Lock held. */
static void entry_free(struct gentry *e)
{
    entry_free_as(e, entry_ctx_state(e) != 0);
}

static void entry_unlink(struct gentry *e)
{
    struct gentry **link = &buckets[e->hash % BUCKETS];
    while (*link && *link != e)
        link = &(*link)->hnext;
    if (*link)
        *link = e->hnext;
    list_unlink(e);
}

/* Evicts e unless it is busy or its context cannot be checked now (then its driver objects
 * would leak: it stays, and a later eviction tries again). Lock held. */
static bool entry_evict(struct gentry *e)
{
    if (atomic_load(&e->busy))
        return false; /* plainly in use: no need to disturb the lock-free claims */
    /* the epoch first, then the execs: a lock-free claim takes an exec, then checks the epoch */
    atomic_fetch_add(&cache_epoch.v, 1);
    if (atomic_load(&e->busy))
        return false;
    int owned = 0; /* its execs, owned so that no claim can take one meanwhile */
    while (owned < e->nexecs && exec_own(e->execs[owned]))
        owned++;
    int st = owned == e->nexecs ? entry_ctx_state(e) : -1;
    if (st < 0) {
        while (owned > 0)
            exec_disown(e->execs[--owned]);
        return false;
    }
    entry_unlink(e);
    entry_free_as(e, st == 1);
    st_evictions++;
    return true;
}


/* Evicts least recently used idle entries while the cache is over a bound. Lock held. */
static void evict(void)
{
    static uint64_t pass;
    pass++;
    while (cache_entries > cupool__cfg.graph_cache_entries ||
           cache_bytes > cupool__cfg.graph_cache_bytes) {
        struct gentry *victim = NULL;
        uint64_t oldest = UINT64_MAX;
        for (struct gentry *e = entries_head; e; e = e->next) {
            uint64_t t = atomic_load_explicit(&e->last_use, CUPOOL_RELAXED);
            if (e->evict_pass != pass && !atomic_load_explicit(&e->busy, CUPOOL_RELAXED) &&
                (!victim || t < oldest)) {
                victim = e;
                oldest = t;
            }
        }
        if (!victim)
            return;
        if (!entry_evict(victim))
            victim->evict_pass = pass; /* busy after all, or its context unknown now */
    }
}

static struct gentry *lookup(uint64_t hash, unsigned long long ctx_id, const uint64_t *sig,
                             size_t nsig)
{
    for (struct gentry *e = buckets[hash % BUCKETS]; e; e = e->hnext)
        if (e->hash == hash && e->ctx_id == ctx_id && e->nsig == nsig &&
            memcmp(e->sig, sig, nsig * sizeof(*sig)) == 0)
            return e; /* the full comparison: a hash collision never launches another graph */
    return NULL;
}

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

static bool argv_room(struct cupool_pipeline *p)
{
    size_t need = p->max_params ? p->max_params : 1;
    return CUPOOL_LIKELY(p->argvcap >= need) || GROW(p->argv, p->argvcap, need);
}

/* Builds the template graph of an entry from the pipeline. Not under the cache lock. */
static CUresult graph_build(struct gentry *e, struct cupool_pipeline *p)
{
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphCreate(&e->graph, 0));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGraphCreate failed");
    CUgraphNode deps_buf[16], *deps = deps_buf;
    size_t depcap = 16;
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
            deps[d] = e->gnodes[p->deps[n->dep_start + d]];
        CUgraphNode *out = &e->gnodes[i];
        switch (n->type) {
        case PN_KERNEL: {
            CUDA_KERNEL_NODE_PARAMS kp;
            kernel_params(n, p->args, p->argv, &kp);
            r = CUPOOL_DRV(cupool__drv.cuGraphAddKernelNode(out, e->graph, deps, n->ndeps, &kp));
            break;
        }
        case PN_MEMSET: {
            CUDA_MEMSET_NODE_PARAMS mp;
            memset_params(n, &mp);
            r = CUPOOL_DRV(
                cupool__drv.cuGraphAddMemsetNode(out, e->graph, deps, n->ndeps, &mp, e->ctx));
            break;
        }
        case PN_MEMCPY: {
            CUDA_MEMCPY3D cp;
            memcpy_params(n, &cp);
            r = CUPOOL_DRV(
                cupool__drv.cuGraphAddMemcpyNode(out, e->graph, deps, n->ndeps, &cp, e->ctx));
            break;
        }
        case PN_RECORD:
            r = CUPOOL_DRV(cupool__drv.cuGraphAddEventRecordNode(out, e->graph, deps, n->ndeps,
                                                                 n->u.ev.ev));
            break;
        case PN_WAIT:
            r = CUPOOL_DRV(cupool__drv.cuGraphAddEventWaitNode(out, e->graph, deps, n->ndeps,
                                                               n->u.ev.ev));
            break;
        default: {
            CUDA_HOST_NODE_PARAMS hp = {n->u.host.fn, n->u.host.user};
            r = CUPOOL_DRV(cupool__drv.cuGraphAddHostNode(out, e->graph, deps, n->ndeps, &hp));
            break;
        }
        }
    }
    if (deps != deps_buf)
        cupool__free(deps, depcap * sizeof(*deps));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "adding node to a pipeline graph failed");
    return CUDA_SUCCESS;
}

/* A CUgraph is not internally synchronised (CUDA driver API documentation): a cached entry's
 * template graph is used by one thread at a time. On the H200, eight threads instantiating
 * one template graph at once were followed by heap corruption in the process ("double free
 * or corruption") or a hang. Instantiations from a template (the rare miss path) and DOT
 * output take this lock. */
static pthread_mutex_t template_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the instantiation gate ----
 * On the H200 (driver 580.159.04), a cuGraphInstantiate that runs while another thread is
 * inside cuGraphLaunch can make both calls, and the driver calls of other threads meanwhile,
 * wait until the queued work drains: with 2 ms kernels queued 50 deep, stalls of 10 to
 * 100 ms, in a quarter of the trials, with or without a graph shared between the threads;
 * with the two kept apart by a lock, none in 12 trials (docs/design.md). One thread
 * instantiating while work is queued is not affected. So cupool never instantiates while one
 * of its own launches (or exec updates, or completion-event records) is inside the driver:
 * an instantiation closes the gate and waits for those in flight (a few microseconds each);
 * a launch that finds the gate closed waits for the instantiations to end. Instantiations
 * may run at once (each is of a graph of its own, see exec_new_of): one after the other, the
 * last of eight threads starting together instantiated while the first were already
 * synchronising, and stalled again (3.8x instead of 7.9x in 1 to 3 runs of 10). A section
 * pays a plain store and a load (an asymmetric Dekker handshake: the instantiating side pays
 * with membarrier(2), or, where the kernel lacks it, each section with a fence). */
static _Atomic uint32_t inst_gate;   /* instantiations starting or running (at once) */
static _Atomic uint32_t launch_anon; /* gated launches of threads without a cache */
/* Launches held at the gate go first: an instantiation waits (GATE_YIELD_NS at most) until
 * none is waiting before it closes the gate again, so that back-to-back instantiations on
 * other threads cannot hold a launch back for longer than about one of them. */
static _Atomic uint32_t gate_waiters;
static pthread_mutex_t gate_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_open = PTHREAD_COND_INITIALIZER;
#define GATE_YIELD_NS 2000000u
#define GATE_DRAIN_NS 5000000u

/* The gated sections in flight: this thread's (in its cache), or the shared count of threads
 * without a cache. */
static inline _Atomic uint32_t *gate_count(void)
{
    struct cupool__tcache *tc = cupool__tl;
    return CUPOOL_LIKELY(tc != NULL) ? &tc->th.in_launch : &launch_anon;
}

static inline void gate_leave(_Atomic uint32_t *c)
{
    if (!c)
        return;
    if (CUPOOL_UNLIKELY(c == &launch_anon))
        atomic_fetch_sub(c, 1);
    else
        atomic_store_explicit(c, atomic_load_explicit(c, CUPOOL_RELAXED) - 1, CUPOOL_RELEASE);
}

/* Counts this thread in and reports whether the gate is open (if not, it is counted out
 * again). */
static inline bool gate_try(_Atomic uint32_t *c)
{
    if (CUPOOL_LIKELY(c != &launch_anon)) {
        atomic_store_explicit(c, atomic_load_explicit(c, CUPOOL_RELAXED) + 1, CUPOOL_RELAXED);
        if (CUPOOL_LIKELY(cupool__membarrier_ready()))
            atomic_signal_fence(memory_order_seq_cst); /* the CPU side: membarrier */
        else
            atomic_thread_fence(memory_order_seq_cst);
    } else {
        atomic_fetch_add(c, 1);
        if (!cupool__membarrier_ready())
            atomic_thread_fence(memory_order_seq_cst);
    }
    if (CUPOOL_LIKELY(!atomic_load_explicit(&inst_gate, CUPOOL_RELAXED)))
        return true;
    gate_leave(c);
    return false;
}

/* Enters a section of driver calls on graphs, execs and their events that no instantiation
 * of cupool's may overlap (above); returns what gate_leave() takes (NULL: the gate is off).
 * Sections do not nest, and inside one this thread must not instantiate. */
static __attribute__((noinline)) void gate_wait(_Atomic uint32_t *c)
{
    /* an instantiation is starting or running: wait for the gate to open, ahead of the next
     * instantiation (see gate_waiters) */
    atomic_fetch_add(&gate_waiters, 1);
    do {
        pthread_mutex_lock(&gate_mutex);
        while (atomic_load(&inst_gate))
            pthread_cond_wait(&gate_open, &gate_mutex);
        pthread_mutex_unlock(&gate_mutex);
    } while (!gate_try(c));
    atomic_fetch_sub(&gate_waiters, 1);
}

static inline _Atomic uint32_t *gate_enter(void)
{
    if (CUPOOL_UNLIKELY(!cupool__cfg.graph_gate))
        return NULL;
    _Atomic uint32_t *c = gate_count();
    if (CUPOOL_UNLIKELY(!gate_try(c)))
        gate_wait(c);
    return c;
}

/* Waits until no other thread is inside a gated section: GATE_DRAIN_NS at most (a launch
 * blocked on a full queue, or its thread descheduled, is not waited out: the gate is a best
 * effort against a driver stall, not a correctness condition). */
_Atomic uint64_t cupool__gate_timeouts;

static void launches_drain(void)
{
    if (cupool__membarrier_ready())
        cupool__membarrier();
    else
        atomic_thread_fence(memory_order_seq_cst);
    if (!cupool__wait_threads(offsetof(struct cupool__thread, in_launch), &launch_anon,
                              GATE_DRAIN_NS))
        atomic_fetch_add_explicit(&cupool__gate_timeouts, 1, CUPOOL_RELAXED);
}

/* cuGraphInstantiateWithFlags, with no launch of cupool's inside the driver meanwhile. */
static CUresult instantiate_gated(CUgraphExec *exec, CUgraph graph)
{
    if (!cupool__cfg.graph_gate) /* CUPOOL_GRAPH_GATE=0 */
        return CUPOOL_DRV(cupool__drv.cuGraphInstantiateWithFlags(exec, graph, 0));
    /* launches held back by earlier instantiations pass first */
    if (atomic_load(&gate_waiters)) {
        uint64_t deadline = cupool__monotonic_ns() + GATE_YIELD_NS;
        while (atomic_load(&gate_waiters) && cupool__monotonic_ns() < deadline)
            sched_yield();
    }
    atomic_fetch_add(&inst_gate, 1);
    launches_drain();
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphInstantiateWithFlags(exec, graph, 0));
    if (atomic_fetch_sub(&inst_gate, 1) == 1) { /* the last one out opens the gate */
        pthread_mutex_lock(&gate_mutex);
        pthread_cond_broadcast(&gate_open);
        pthread_mutex_unlock(&gate_mutex);
    }
    return r;
}

/* A clone of e's template and the clone's nodes in the template's order (e->n of them),
 * under the template's lock. On failure nothing is left behind. */
static CUresult template_clone(struct gentry *e, CUgraph *graph, CUgraphNode **nodes)
{
    *nodes = NULL;
    CUgraphNode *n = e->n ? cupool__alloc(e->n * sizeof(*n)) : NULL;
    if (e->n && !n)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph exec");
    *graph = NULL;
    pthread_mutex_lock(&template_lock);
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphClone(graph, e->graph));
    bool cloned = r == CUDA_SUCCESS;
    for (uint32_t i = 0; r == CUDA_SUCCESS && i < e->n; i++)
        r = CUPOOL_DRV(cupool__drv.cuGraphNodeFindInClone(&n[i], e->gnodes[i], *graph));
    pthread_mutex_unlock(&template_lock);
    if (r != CUDA_SUCCESS) {
        if (cloned)
            objects_destroy(NULL, *graph, NULL, e->ctx, e->ctx_id);
        *graph = NULL;
        cupool__free(n, e->n * sizeof(*n));
        return cupool__fail(r, "cloning a cached template graph failed");
    }
    *nodes = n;
    return CUDA_SUCCESS;
}

static bool kernel_same(const struct pnode *n, const struct pnode *o);

/* Sets into the graph node gn node i of p if it differs from the description it last carried
 * (o, with its argument bytes old_args): through the exec when exec is given
 * (cuGraphExec*SetParams: an update), else into a graph not instantiated yet (cuGraph*
 * SetParams). One driver call if it differs (*set true then). Returns the driver's error (not
 * recorded: the callers say what failed). */
static CUresult node_set_changed(const struct cupool_pipeline *p, uint32_t i,
                                 const struct pnode *o, const unsigned char *old_args,
                                 CUgraphNode gn, CUgraphExec exec, CUcontext ctx, bool *set)
{
    const struct pnode *n = &p->nodes[i];
    *set = false;
    switch (n->type) {
    case PN_KERNEL: {
        const struct fninfo *fi = n->u.k.info;
        if (kernel_same(n, o) &&
            (!fi->bytes ||
             memcmp(p->args + n->u.k.arg_off, old_args + o->u.k.arg_off, fi->bytes) == 0))
            return CUDA_SUCCESS;
        CUDA_KERNEL_NODE_PARAMS kp;
        kernel_params(n, p->args, p->argv, &kp);
        *set = true;
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecKernelNodeSetParams(exec, gn, &kp))
                    : CUPOOL_DRV(cupool__drv.cuGraphKernelNodeSetParams(gn, &kp));
    }
    case PN_MEMSET: {
        if (memcmp(&n->u.set, &o->u.set, sizeof n->u.set) == 0)
            return CUDA_SUCCESS;
        CUDA_MEMSET_NODE_PARAMS mp;
        memset_params(n, &mp);
        *set = true;
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecMemsetNodeSetParams(exec, gn, &mp, ctx))
                    : CUPOOL_DRV(cupool__drv.cuGraphMemsetNodeSetParams(gn, &mp));
    }
    case PN_MEMCPY: {
        if (memcmp(&n->u.copy, &o->u.copy, sizeof n->u.copy) == 0)
            return CUDA_SUCCESS;
        CUDA_MEMCPY3D cp;
        memcpy_params(n, &cp);
        *set = true;
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecMemcpyNodeSetParams(exec, gn, &cp, ctx))
                    : CUPOOL_DRV(cupool__drv.cuGraphMemcpyNodeSetParams(gn, &cp));
    }
    case PN_RECORD:
        if (n->u.ev.ev == o->u.ev.ev)
            return CUDA_SUCCESS;
        *set = true;
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecEventRecordNodeSetEvent(exec, gn,
                                                                               n->u.ev.ev))
                    : CUPOOL_DRV(cupool__drv.cuGraphEventRecordNodeSetEvent(gn, n->u.ev.ev));
    case PN_WAIT:
        if (n->u.ev.ev == o->u.ev.ev)
            return CUDA_SUCCESS;
        *set = true;
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecEventWaitNodeSetEvent(exec, gn,
                                                                             n->u.ev.ev))
                    : CUPOOL_DRV(cupool__drv.cuGraphEventWaitNodeSetEvent(gn, n->u.ev.ev));
    default: {
        if (memcmp(&n->u.host, &o->u.host, sizeof n->u.host) == 0)
            return CUDA_SUCCESS;
        CUDA_HOST_NODE_PARAMS hp = {n->u.host.fn, n->u.host.user};
        *set = true;
        return exec ? CUPOOL_DRV(cupool__drv.cuGraphExecHostNodeSetParams(exec, gn, &hp))
                    : CUPOOL_DRV(cupool__drv.cuGraphHostNodeSetParams(gn, &hp));
    }
    }
}

/* node_set_changed for every node of p (old[], old_args: the description the graph nodes
 * gn[] last carried). *count: the nodes set. Stops at the first error, which it returns. */
static CUresult nodes_set_changed(const struct cupool_pipeline *p, const struct pnode *old,
                                  const unsigned char *old_args, const CUgraphNode *gn,
                                  CUgraphExec exec, CUcontext ctx, uint64_t *count)
{
    *count = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        bool set;
        CUresult r = node_set_changed(p, i, &old[i], old_args, gn[i], exec, ctx, &set);
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
static CUresult clone_take_params(const struct gentry *e, const struct gexec *x,
                                  struct cupool_pipeline *p)
{
    uint64_t set;
    CUresult r = nodes_set_changed(p, e->tmpl, e->tmpl_args, x->nodes, NULL, e->ctx, &set);
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "setting the parameters of a new exec's graph failed (%u nodes set)",
                            (unsigned)set);
    return CUDA_SUCCESS;
}

/* A new exec of e, owned by the caller: of graph when given (a capture's own), else of a
 * clone of e's template carrying the parameters of p (the launching pipeline; NULL: the
 * template's own, as when p built it). */
static CUresult exec_new_of(struct gentry *e, CUgraph graph, struct cupool_pipeline *p,
                            struct gexec **out)
{
    struct gexec *x = exec_struct_get();
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
    if (!graph) {
        r = template_clone(e, &x->graph, &x->nodes);
        if (r == CUDA_SUCCESS) {
            x->nnodes = e->n;
            graph = x->graph;
            if (p)
                r = clone_take_params(e, x, p);
        }
    }
    uint32_t *fp = NULL;
    size_t nfp = 0;
    bool fp_known = false;
    if (r == CUDA_SUCCESS && e->captured)
        fp_known = graph_fingerprint(graph, &fp, &nfp);
    if (r == CUDA_SUCCESS) {
        r = instantiate_gated(&x->exec, graph);
        if (r != CUDA_SUCCESS)
            cupool__fail(r, "cuGraphInstantiateWithFlags failed");
    }
    if (r == CUDA_SUCCESS)
        exec_fp_set(x, fp, nfp, fp_known);
    else
        cupool__free(fp, nfp * sizeof(*fp));
    if (r == CUDA_SUCCESS && x->graph && !x->nnodes) {
        /* no nodes to update (a capture's entry): the clone has served */
        objects_destroy(NULL, x->graph, NULL, e->ctx, e->ctx_id);
        x->graph = NULL;
    }
    if (r != CUDA_SUCCESS) {
        objects_destroy(NULL, x->graph, NULL, e->ctx, e->ctx_id);
        cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
        x->graph = NULL;
        x->nodes = NULL;
        exec_struct_put_locked(x);
        return r;
    }
    /* its parameters are p's, or the template's */
    if (p ? !snapshot(x, p)
          : (!grow((void **)&x->snap, &x->snap_cap, e->n, sizeof(*x->snap)) ||
             !grow((void **)&x->snap_args, &x->snap_acap, e->tmpl_alen + 1, 1))) {
        objects_destroy(x->exec, x->graph, NULL, e->ctx, e->ctx_id);
        cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
        cupool__free(x->snap, x->snap_cap * sizeof(*x->snap));
        cupool__free(x->snap_args, x->snap_acap);
        exec_fp_set(x, NULL, 0, false);
        exec_struct_put_locked(x);
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

static CUresult exec_new(struct gentry *e, struct gexec **out)
{
    return exec_new_of(e, NULL, NULL, out);
}

/* A new entry for the pipeline: template graph and a first exec (owned by the caller). Not
 * under the lock. */
static CUresult entry_new(struct cupool_pipeline *p, uint64_t hash, size_t nsig,
                          unsigned long long ctx_id, CUcontext ctx, struct gentry **out)
{
    struct gentry *e = entry_struct_get();
    if (!e)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph cache entry");
    e->hash = hash;
    e->ctx_id = ctx_id;
    e->ctx = ctx;
    e->n = p->n;
    e->nsig = nsig;
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
        r = graph_build(e, p);
    }
    struct gexec *x = NULL;
    if (r == CUDA_SUCCESS)
        r = exec_new(e, &x);
    if (r != CUDA_SUCCESS) {
        objects_destroy(NULL, e->graph, NULL, ctx, ctx_id);
        cupool__free(e->sig, nsig * sizeof(*e->sig));
        cupool__free(e->gnodes, p->n * sizeof(*e->gnodes));
        cupool__free(e->tmpl, p->n * sizeof(*e->tmpl));
        cupool__free(e->tmpl_args, p->alen + 1);
        entry_struct_put_locked(e);
        return r;
    }
    e->execs[0] = x;
    e->nexecs = 1;
    e->bytes = sizeof(*e) + nsig * sizeof(*e->sig) +
               p->n * (sizeof(*e->gnodes) + sizeof(*e->tmpl) + DRIVER_BYTES_PER_NODE) + p->alen;
    *out = e;
    return CUDA_SUCCESS;
}

static inline int execs_max(void)
{
    int m = (int)cupool__cfg.graph_execs_max;
    return m < EXECS_LIMIT ? m : EXECS_LIMIT;
}

/* Picks an exec for a launch on stream and owns it, or returns NULL when a new one is needed.
 * Preference: one last launched on this stream, one never launched, a new one while the entry
 * has fewer than CUPOOL_GRAPH_EXECS_MAX (or in place of one whose stream went quiet), and
 * only then one whose launch on another stream has finished (sharing one among streams costs
 * argument updates whenever their pipelines differ, and a completion event per launch;
 * instantiating costs once). Lock held; a
 * lock-free claim may own an exec meanwhile, so each is owned before it is looked at. */
static struct gexec *exec_pick(struct gentry *e, CUstream stream)
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
            exec_free(e, x, true);
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
 * with x's snapshot (which the caller then replaces). dirty: the description differs from
 * the last launch's. *compared: the nodes compared. Returns false if the driver refused. */
static bool exec_update(struct gentry *e, struct gexec *x, struct cupool_pipeline *p, bool dirty,
                        bool same, uint64_t *updated, bool *unchanged, bool *patched,
                        uint64_t *compared)
{
    *updated = 0;
    *compared = 0;
    *patched = false;
    bool last_own = x->snap_owner == p && x->snap_gen == p->gen;
    /* this exec last ran exactly this description: nothing to compare */
    if (last_own && !dirty) {
        *unchanged = true;
        return true;
    }
    *unchanged = false;
    if (last_own && same && !p->all_dirty && p->alen == x->snap_alen) {
        /* x holds the last launch's parameters: only the marked nodes can differ */
        _Atomic uint32_t *gate = gate_enter();
        CUresult r = CUDA_SUCCESS;
        uint32_t words = (p->n + 63) / 64;
        for (uint32_t w = 0; w < words && r == CUDA_SUCCESS; w++)
            for (uint64_t bits = p->chg[w]; bits && r == CUDA_SUCCESS; bits &= bits - 1) {
                uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
                bool set;
                ++*compared;
                r = node_set_changed(p, i, &x->snap[i], x->snap_args, x->nodes[i], x->exec,
                                     e->ctx, &set);
                if (r == CUDA_SUCCESS) {
                    *updated += set;
                    snapshot_node(x, p, i);
                }
            }
        gate_leave(gate);
        *patched = r == CUDA_SUCCESS;
        return r == CUDA_SUCCESS;
    }
    /* every node: in the common case, nothing changed, two comparisons for the whole pipeline */
    *compared = p->n;
    *unchanged = p->alen == x->snap_alen &&
                 memcmp(p->nodes, x->snap, p->n * sizeof(*p->nodes)) == 0 &&
                 (!p->alen || memcmp(p->args, x->snap_args, p->alen) == 0);
    if (*unchanged)
        return true;
    _Atomic uint32_t *gate = gate_enter();
    CUresult r = nodes_set_changed(p, x->snap, x->snap_args, x->nodes, x->exec, e->ctx, updated);
    gate_leave(gate);
    return r == CUDA_SUCCESS;
}

/* The launch consumed the description's marks: it is the last launch's from now on. */
static void refill_launched(struct cupool_pipeline *p, bool dirty)
{
    if (dirty) {
        p->gen++;
        if (p->nchg)
            memset(p->chg, 0, p->chgcap * sizeof(*p->chg));
        p->nchg = 0;
        p->all_dirty = false;
    }
    p->hw = p->n;
}

/* Launches the nodes one by one (CUPOOL_GRAPH_DISABLE, or no graph support). Insertion order
 * is a topological order: every dependency was added before its dependant. */
static CUresult eager_launch(struct cupool_pipeline *p, CUstream s)
{
    atomic_fetch_add_explicit(&st_eager, 1, CUPOOL_RELAXED);
    for (uint32_t i = 0; i < p->n; i++) {
        const struct pnode *n = &p->nodes[i];
        CUresult r;
        switch (n->type) {
        case PN_KERNEL: {
            CUDA_KERNEL_NODE_PARAMS kp;
            kernel_params(n, p->args, p->argv, &kp);
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

/* The driver table is fixed once the library runs: look once. */
static bool graphs_supported(void)
{
    static _Atomic int known; /* 0 unknown, 1 no, 2 yes */
    int k = atomic_load_explicit(&known, CUPOOL_RELAXED);
    if (CUPOOL_UNLIKELY(k == 0)) {
        k = graphs_supported_now() ? 2 : 1;
        atomic_store_explicit(&known, k, CUPOOL_RELAXED);
    }
    return k == 2;
}

static bool eager_supported(void)
{
    return cupool__drv.cuLaunchKernel && cupool__drv.cuMemsetD8Async &&
           cupool__drv.cuMemsetD32Async && cupool__drv.cuMemcpyAsync &&
           cupool__drv.cuEventRecord && cupool__drv.cuStreamWaitEvent &&
           cupool__drv.cuLaunchHostFunc;
}

/* ---- steps shared by pipeline and capture launches ---- */

/* Finds the entry of a launch (`known`, the entry of this signature seen at cache epoch
 * *epoch, while the epoch holds; else a lookup), counts the launch, and claims an exec for
 * stream (NULL: a new one is needed; the entry is then held busy). *epoch gets the cache's
 * epoch now. */
static struct gentry *entry_claim(struct gentry *known, uint64_t hash, unsigned long long ctx_id,
                                  const uint64_t *sig, size_t nsig, CUstream stream,
                                  struct gexec **x, uint64_t *epoch)
{
    pthread_mutex_lock(&cache_lock);
    st_launches++;
    uint64_t now = atomic_load(&cache_epoch.v);
    struct gentry *e = known && *epoch == now ? known : lookup(hash, ctx_id, sig, nsig);
    *x = NULL;
    if (e) {
        st_hits++;
        entry_touch(e);
        atomic_fetch_add(&e->busy, 1);
        *x = exec_pick(e, stream);
    } else {
        st_misses++;
    }
    *epoch = now;
    pthread_mutex_unlock(&cache_lock);
    return e;
}

/* ---- a thread's hints: the exec it launched last, per signature and stream ----
 * A repeat launch finds the entry and exec to claim here, without the cache lock. The table
 * is set-associative, so that a thread alternating signatures on a stream, or one signature
 * on several streams, keeps a hint for each: sets of HINT_WAYS hints, the set chosen by the
 * (signature hash, stream) key. A full set replaces a hint whose entry was seen before the
 * cache epoch moved (no claim can use it), else, while every way of the set has been used
 * since the clock last passed it, the table doubles (up to HINT_SETS_MAX sets), else the way
 * the set's clock comes to first without its reference bit. Allocated by the thread's first
 * kept launch and kept with its cache (a later thread reusing the cache inherits the hints:
 * they are only hints, each validated by the claim). Read and written only by the thread
 * holding the cache; no stream in it is ever passed to the driver (compared only). */
#define HINT_WAYS 8
#define HINT_SETS_MIN 8   /* 64 hints, 3.6 KiB */
#define HINT_SETS_MAX 256 /* 2048 hints, 114 KiB */

struct ghint {
    uint64_t hash;   /* the signature's */
    CUstream stream; /* compared only */
    struct gentry *entry;
    struct gexec *exec;
    uint64_t serial; /* the exec's when the hint was taken */
    uint64_t epoch;  /* cache_epoch when the entry was found */
};

struct cupool__ghints {
    uint32_t nsets;     /* a power of two */
    uint64_t *tag;      /* [nsets][HINT_WAYS]: each hint's key | 1; 0: an empty way */
    uint8_t *ref;       /* [nsets]: reference bits, a bit per way */
    uint8_t *hand;      /* [nsets]: the clock's next way */
    struct ghint *h;    /* [nsets][HINT_WAYS] */
};

static inline uint64_t hint_key(uint64_t hash, CUstream stream)
{
    uint64_t k = hash ^ ((uint64_t)(uintptr_t)stream * UINT64_C(0x9E3779B97F4A7C15));
    return k ^ (k >> 29);
}

static inline uint32_t hint_set(const struct cupool__ghints *t, uint64_t key)
{
    return (uint32_t)(key >> 40) & (t->nsets - 1);
}

/* This thread's hint for hash on stream, or NULL. */
static inline struct ghint *hint_find(struct cupool__ghints *t, uint64_t hash, CUstream stream)
{
    uint64_t key = hint_key(hash, stream);
    uint32_t set = hint_set(t, key);
    uint64_t tag = key | 1, *tags = &t->tag[(size_t)set * HINT_WAYS];
    for (unsigned w = 0; w < HINT_WAYS; w++)
        if (tags[w] == tag) {
            struct ghint *h = &t->h[(size_t)set * HINT_WAYS + w];
            if (CUPOOL_LIKELY(h->hash == hash && h->stream == stream)) {
                if (!(t->ref[set] & (1u << w)))
                    t->ref[set] |= (uint8_t)(1u << w);
                return h;
            }
        }
    return NULL;
}

/* The lock-free claim of a repeat launch (see the top of this file). The thread's hint for
 * `hash` on `stream` names an entry and exec; the exec is owned, the cache epoch then shown
 * unchanged (a Dekker handshake with entry_evict(), which moves the epoch on before it owns
 * an entry's execs), and the exec shown to be the same by its serial. Owning one of its execs
 * keeps the entry from being evicted, so the entry is not pinned: a repeat launch makes one
 * locked read-modify-write (the exec's claim). The entry's key (context, signature words
 * sig[0 .. nsig-1]) is compared once the exec is held, unless the entry is `known`: the
 * entry of this signature as of cache epoch known_epoch (a pipeline's last launch), and the
 * hint's as of the same epoch. Returns the entry, unpinned, with *x owned and *epoch the
 * epoch it was found at, or NULL (then nothing is held) for the locked path. */
static inline __attribute__((always_inline)) struct gentry *
fast_claim(struct cupool__tcache *tc, uint64_t hash, const struct gentry *known,
           uint64_t known_epoch, unsigned long long ctx_id, const uint64_t *sig, size_t nsig,
           CUstream stream, struct gexec **x, uint64_t *epoch)
{
    struct cupool__ghints *t = tc->ghints;
    struct ghint *s = t ? hint_find(t, hash, stream) : NULL;
    if (!s || stream == CU_STREAM_PER_THREAD)
        return NULL;
    struct gentry *e = s->entry;
    bool trusted = known == e && known_epoch == s->epoch;
    /* the entry and exec may be free structs now: touched only inside a read section, so
     * cupool_trim() returns free structs to the allocator only once no claim is inside one */
    cupool__read_enter(cupool__th(tc));
    /* the hint may outlive its structs: cupool_trim() moves the epoch on before it frees any */
    struct gexec *c = s->exec;
    bool got = atomic_load_explicit(&cache_epoch.v, CUPOOL_RELAXED) == s->epoch && exec_own(c);
    if (got) {
        /* owned, then the epoch: an eviction of e that began before the claim shows here;
         * one that begins after it finds the exec owned and gives up. With the epoch
         * unchanged since the hint was taken, e was never freed; with the serial, c is
         * still the exec of e that this hint saw. */
        got = atomic_load(&cache_epoch.v) == s->epoch && c->entry == e &&
              c->serial == s->serial && c->launched && c->last_stream == stream &&
              (trusted || (e->ctx_id == ctx_id && e->nsig == nsig &&
                           memcmp(e->sig, sig, nsig * sizeof(*sig)) == 0));
        if (!got)
            exec_disown(c);
    }
    cupool__read_leave(cupool__th(tc));
    if (!got)
        return NULL;
    entry_touch(e);
    cupool__counter_inc(&tc->graph_hits);
    *x = c;
    *epoch = s->epoch;
    return e;
}

static void hints_free(struct cupool__ghints *t)
{
    size_t n = (size_t)t->nsets * HINT_WAYS;
    cupool__free(t->tag, n * sizeof(*t->tag));
    cupool__free(t->h, n * sizeof(*t->h));
    cupool__free(t->ref, t->nsets);
    cupool__free(t->hand, t->nsets);
}

/* Gives t nsets empty sets (its old arrays are the caller's to free). */
static bool hints_alloc(struct cupool__ghints *t, uint32_t nsets)
{
    size_t n = (size_t)nsets * HINT_WAYS;
    struct cupool__ghints fresh = {nsets, cupool__alloc(n * sizeof(*t->tag)),
                                   cupool__alloc(nsets), cupool__alloc(nsets),
                                   cupool__alloc(n * sizeof(*t->h))};
    if (!fresh.tag || !fresh.ref || !fresh.hand || !fresh.h) {
        cupool__free(fresh.tag, n * sizeof(*t->tag));
        cupool__free(fresh.h, n * sizeof(*t->h));
        cupool__free(fresh.ref, nsets);
        cupool__free(fresh.hand, nsets);
        return false;
    }
    memset(fresh.tag, 0, n * sizeof(*t->tag));
    memset(fresh.ref, 0, nsets);
    memset(fresh.hand, 0, nsets);
    *t = fresh;
    return true;
}

static void hint_store(struct cupool__ghints *t, const struct ghint *h, bool grow_ok);

/* Doubles the table, keeping every hint. False (nothing changed) when out of memory. */
static bool hints_grow(struct cupool__ghints *t)
{
    struct cupool__ghints old = *t;
    if (!hints_alloc(t, old.nsets * 2))
        return false;
    for (size_t i = 0; i < (size_t)old.nsets * HINT_WAYS; i++)
        if (old.tag[i])
            hint_store(t, &old.h[i], false);
    hints_free(&old);
    return true;
}

/* Stores h in its set (see the top of this section). */
static void hint_store(struct cupool__ghints *t, const struct ghint *h, bool grow_ok)
{
    uint64_t key = hint_key(h->hash, h->stream), tag = key | 1;
    uint32_t set = hint_set(t, key);
    uint64_t *tags = &t->tag[(size_t)set * HINT_WAYS];
    struct ghint *hs = &t->h[(size_t)set * HINT_WAYS];
    unsigned way = HINT_WAYS;
    for (unsigned w = 0; w < HINT_WAYS && way == HINT_WAYS; w++)
        if (tags[w] == tag && hs[w].hash == h->hash && hs[w].stream == h->stream)
            way = w;
    for (unsigned w = 0; w < HINT_WAYS && way == HINT_WAYS; w++)
        if (!tags[w])
            way = w;
    uint64_t now = atomic_load_explicit(&cache_epoch.v, CUPOOL_RELAXED);
    for (unsigned w = 0; w < HINT_WAYS && way == HINT_WAYS; w++)
        if (hs[w].epoch != now)
            way = w; /* stale: no claim can use it */
    if (way == HINT_WAYS && grow_ok && t->ref[set] == (1u << HINT_WAYS) - 1 &&
        t->nsets < HINT_SETS_MAX && hints_grow(t)) {
        hint_store(t, h, false);
        return;
    }
    while (way == HINT_WAYS) {
        unsigned w = t->hand[set];
        t->hand[set] = (uint8_t)((w + 1) % HINT_WAYS);
        if (t->ref[set] & (1u << w))
            t->ref[set] &= (uint8_t)~(1u << w);
        else
            way = w;
    }
    tags[way] = tag;
    t->ref[set] |= (uint8_t)(1u << way);
    hs[way] = *h;
}

/* Remembers, in this thread's hints, the entry and exec a launch on stream just kept (entry
 * seen at cache epoch `epoch`, exec of serial `serial`). */
static void hint_put(uint64_t hash, CUstream stream, struct gentry *e, struct gexec *x,
                     uint64_t serial, uint64_t epoch)
{
    struct cupool__tcache *tc = cupool__tcache_self();
    if (!tc)
        return;
    struct cupool__ghints *t = tc->ghints;
    if (CUPOOL_UNLIKELY(!t)) {
        t = cupool__alloc(sizeof(*t));
        if (!t)
            return; /* no hints: launches take the locked path */
        if (!hints_alloc(t, HINT_SETS_MIN)) {
            cupool__free(t, sizeof(*t));
            return;
        }
        tc->ghints = t;
    }
    struct ghint h = {hash, stream, e, x, serial, epoch};
    hint_store(t, &h, true);
}

/* Caches a new entry (or, if another thread cached the same key meanwhile, frees it and uses
 * that one, handing its graph to *graph when graph is not NULL) and claims an exec. */
static struct gentry *entry_publish(struct gentry *fresh, CUstream stream, CUgraph *graph,
                                    struct gexec **x, uint64_t *epoch)
{
    pthread_mutex_lock(&cache_lock);
    cache_entries++;
    cache_bytes += fresh->bytes + exec_bytes(fresh, fresh->execs[0]);
    cache_execs++;
    struct gentry *e = lookup(fresh->hash, fresh->ctx_id, fresh->sig, fresh->nsig);
    atomic_fetch_add(&(e ? e : fresh)->busy, 1);
    if (!e) {
        e = fresh;
        e->hnext = buckets[e->hash % BUCKETS];
        buckets[e->hash % BUCKETS] = e;
        list_push(e);
        e->published = true;
        *x = e->execs[0]; /* owned since its instantiation */
    } else {
        if (graph) {
            *graph = fresh->graph;
            fresh->graph = NULL;
        }
        entry_free(fresh);
        *x = exec_pick(e, stream);
    }
    entry_touch(e);
    evict(); /* never this entry: it is busy */
    *epoch = atomic_load(&cache_epoch.v);
    pthread_mutex_unlock(&cache_lock);
    return e;
}

/* A new exec for a launch that found none free (of graph, or of e's template graph), busy;
 * *one_off when the entry is at CUPOOL_GRAPH_EXECS_MAX (then used once and destroyed). On
 * failure the entry is released. */
static CUresult exec_add(struct gentry *e, CUgraph graph, struct cupool_pipeline *p,
                         struct gexec **x, bool *one_off)
{
    CUresult r = exec_new_of(e, graph, p, x);
    pthread_mutex_lock(&cache_lock);
    /* a place exec_pick reserved (this launch's, or one another launch will not need now) */
    bool place = e->npending > 0 && e->nexecs < execs_max();
    if (e->npending > 0)
        e->npending--;
    if (r == CUDA_SUCCESS) {
        cache_bytes += exec_bytes(e, *x);
        cache_execs++;
        *one_off = !place;
        if (place)
            e->execs[e->nexecs++] = *x;
    } else {
        atomic_fetch_sub(&e->busy, 1);
    }
    pthread_mutex_unlock(&cache_lock);
    return r;
}

/* Gives back a place exec_pick reserved for a launch that ends before exec_add. */
static void exec_unreserve(struct gentry *e)
{
    pthread_mutex_lock(&cache_lock);
    if (e->npending > 0)
        e->npending--;
    pthread_mutex_unlock(&cache_lock);
}

/* Launches x on stream and, for an entry serving several streams, records its completion.
 * *recorded says whether the completion event now stands for this launch. */
static inline CUresult exec_launch(struct gentry *e, struct gexec *x, CUstream stream,
                                   bool *recorded)
{
    *recorded = false;
    _Atomic uint32_t *gate = gate_enter();
    CUresult r = CUPOOL_DRV(cupool__drv.cuGraphLaunch(x->exec, stream));
    if (r == CUDA_SUCCESS && atomic_load_explicit(&e->multi_stream, CUPOOL_RELAXED)) {
        if (!x->done)
            CUPOOL_DRV(cupool__drv.cuEventCreate(&x->done, CU_EVENT_DISABLE_TIMING));
        *recorded =
            x->done && CUPOOL_DRV(cupool__drv.cuEventRecord(x->done, stream)) == CUDA_SUCCESS;
    }
    gate_leave(gate);
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGraphLaunch failed");
    return CUDA_SUCCESS;
}

/* Node parameters a launch compared with its exec's: this thread's counter. */
static _Atomic uint64_t st_compared; /* of threads without a cache */
static inline void count_compared(uint64_t n)
{
    if (!n)
        return;
    struct cupool__tcache *tc = cupool__tl;
    if (CUPOOL_LIKELY(tc != NULL))
        cupool__counter_add(&tc->graph_compared, n);
    else
        atomic_fetch_add_explicit(&st_compared, n, CUPOOL_RELAXED);
}

static void count_launch(uint64_t inst, uint64_t failures, uint64_t updated)
{
    if (inst)
        atomic_fetch_add_explicit(&st_inst, inst, CUPOOL_RELAXED);
    if (failures)
        atomic_fetch_add_explicit(&st_update_failures, failures, CUPOOL_RELAXED);
    if (updated) {
        struct cupool__tcache *tc = cupool__tl; /* the thread's own counters: no shared write */
        if (CUPOOL_LIKELY(tc != NULL)) {
            cupool__counter_add(&tc->graph_updates, 1);
            cupool__counter_add(&tc->graph_nodes_updated, updated);
        } else {
            atomic_fetch_add_explicit(&st_updates, 1, CUPOOL_RELAXED);
            atomic_fetch_add_explicit(&st_nodes_updated, updated, CUPOOL_RELAXED);
        }
    }
}

/* Releases an exec after a launch: it stays in its entry (keep) or is dropped; and the
 * entry, when the launch pinned it (entry_claim; fast_claim does not). */
static void exec_done(struct gentry *e, struct gexec *x, bool keep, CUstream stream,
                      bool launched, bool recorded, bool pinned)
{
    if (!keep && x->exec) {
        /* dropped with its launch queued: record its completion so the graveyard knows when
         * to destroy it */
        if (launched && !recorded) {
            _Atomic uint32_t *gate = gate_enter();
            if (!x->done)
                CUPOOL_DRV(cupool__drv.cuEventCreate(&x->done, CU_EVENT_DISABLE_TIMING));
            recorded =
                x->done && CUPOOL_DRV(cupool__drv.cuEventRecord(x->done, stream)) == CUDA_SUCCESS;
            gate_leave(gate);
        }
        x->done_valid = launched ? recorded : x->done_valid;
    }
    if (keep) {
        /* the next picker reads these after seeing busy clear (release / acquire) */
        x->launched = launched || x->launched;
        if (launched)
            x->last_stream = stream;
        x->done_valid = recorded;
        exec_disown(x);
        if (pinned)
            atomic_fetch_sub(&e->busy, 1);
        return;
    }
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < e->nexecs; i++)
        if (e->execs[i] == x) {
            e->execs[i] = e->execs[--e->nexecs];
            break;
        }
    exec_free(e, x, true);
    if (pinned)
        atomic_fetch_sub(&e->busy, 1);
    evict();
    pthread_mutex_unlock(&cache_lock);
}

CUresult cupool_pipeline_launch(cupool_pipeline_t pipeline, CUstream stream)
{
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!p || p->n == 0)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_launch: %s",
                            !p ? "not a pipeline" : "the pipeline has no nodes");
    if (CUPOOL_UNLIKELY(p->add_error != CUDA_SUCCESS))
        return cupool__fail(p->add_error,
                            "cupool_pipeline_launch: a node could not be added (error %d) since "
                            "the last cupool_pipeline_reset: the description is incomplete",
                            (int)p->add_error);
    CUresult r;
    if (CUPOOL_UNLIKELY(cupool__state_now() != CUPOOL_ST_RUNNING) &&
        (r = cupool__enter()) != CUDA_SUCCESS)
        return r;
    if (!argv_room(p))
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory to launch a pipeline");
    if (cupool__cfg.graph_disable || !graphs_supported()) {
        if (!eager_supported())
            return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                                "this driver lacks the entry points pipelines need");
        return eager_launch(p, stream);
    }
    /* the current context: the graphs of a reset or another context are never touched */
    unsigned long long ctx_id;
    r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &ctx_id));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cupool_pipeline_launch: no usable current context");
    /* the signature: reused when the description kept the last launch's structure */
    bool same = !p->sig_dirty && p->sigpos == p->last_nsig && p->n == p->last_n;
    if (!same) {
        uint64_t hash;
        size_t nsig = signature(p, &hash);
        if (!nsig)
            return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline signature");
        p->last_nsig = p->sigpos = nsig;
        p->last_hash = hash;
        p->last_n = p->n;
        p->sig_dirty = false;
        p->last_entry = NULL;
    }
    uint64_t hash = p->last_hash;
    size_t nsig = p->last_nsig;
    /* the description differs from the last launch's (its parameters: marked as added) */
    bool dirty = !same || p->all_dirty || p->nchg;

    uint64_t inst = 0, failures = 0, epoch = p->last_epoch;
    struct gexec *x;
    /* the entry the last launch used, while the cache's epoch holds */
    struct gentry *known = p->last_ctx_id == ctx_id ? p->last_entry : NULL;
    struct cupool__tcache *tc = cupool__tl;
    struct gentry *e =
        tc ? fast_claim(tc, hash, known, epoch, ctx_id, p->sig, nsig, stream, &x, &epoch) : NULL;
    bool fast = e != NULL; /* then this thread's hint already names e and x */
    if (!fast)
        e = entry_claim(known, hash, ctx_id, p->sig, nsig, stream, &x, &epoch);
    if (!e) {
        CUcontext ctx = NULL;
        r = CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&ctx));
        if (r != CUDA_SUCCESS)
            return cupool__fail(r, "cuCtxGetCurrent failed");
        struct gentry *fresh = NULL;
        r = entry_new(p, hash, nsig, ctx_id, ctx, &fresh);
        if (r != CUDA_SUCCESS)
            return r;
        inst++;
        e = entry_publish(fresh, stream, NULL, &x, &epoch);
    }
    p->last_entry = e;
    p->last_epoch = epoch;
    p->last_ctx_id = ctx_id;
    bool one_off = false; /* an exec beyond CUPOOL_GRAPH_EXECS_MAX: used once, then destroyed */
    if (!x) {
        r = exec_add(e, NULL, p, &x, &one_off);
        if (r != CUDA_SUCCESS) {
            count_launch(inst, 0, 0);
            return r;
        }
        inst++;
    }

    uint64_t updated = 0, compared = 0;
    bool unchanged = false, patched = false;
    if (!exec_update(e, x, p, dirty, same, &updated, &unchanged, &patched, &compared)) {
        /* the driver refused an update (on the H200 an event node whose event was destroyed
         * since is refused): instantiate this exec afresh, from a fresh clone (the old one has
         * a launched exec, see exec_new_of) carrying this launch's parameters */
        failures++;
        objects_destroy(x->exec, NULL, NULL, e->ctx, e->ctx_id); /* its launches run on */
        x->exec = NULL;
        CUgraph clone = NULL;
        CUgraphNode *nodes = NULL;
        r = template_clone(e, &clone, &nodes);
        if (r == CUDA_SUCCESS) {
            objects_destroy(NULL, x->graph, NULL, e->ctx, e->ctx_id);
            cupool__free(x->nodes, x->nnodes * sizeof(*x->nodes));
            x->graph = clone;
            x->nodes = nodes;
            x->nnodes = e->n;
            r = clone_take_params(e, x, p);
            if (r == CUDA_SUCCESS)
                r = instantiate_gated(&x->exec, x->graph);
        }
        inst++;
        updated = 0;
        unchanged = patched = false; /* the snapshot below records this launch's parameters */
        x->snap_owner = NULL;
        x->launched = false;
        if (r != CUDA_SUCCESS)
            x->exec = NULL;
    }
    bool launched = false, recorded = false;
    if (r == CUDA_SUCCESS) {
        r = exec_launch(e, x, stream, &recorded);
        launched = r == CUDA_SUCCESS;
    } else {
        /* the exec is unusable: this launch goes node by node */
        r = eager_supported() ? eager_launch(p, stream) : r;
        objects_destroy(x->exec, NULL, NULL, e->ctx, e->ctx_id);
        x->exec = NULL;
    }
    /* the exec now holds the pipeline's parameters (unless they were already its own, or the
     * update brought its snapshot up to date) */
    bool keep = !one_off && x->exec != NULL && (unchanged || patched || snapshot(x, p));
    if (keep) {
        x->snap_owner = p;
        x->snap_gen = dirty ? p->gen + 1 : p->gen;
    }
    refill_launched(p, dirty);
    uint64_t serial = x->serial; /* read while owned */
    count_launch(inst, failures, updated);
    count_compared(compared);
    exec_done(e, x, keep, stream, launched, recorded, !fast);
    if (keep && launched && !fast)
        hint_put(hash, stream, e, x, serial, epoch);
    graves_maybe_reap();
    return r;
}

CUresult cupool_graph_stats_get(cupool_graph_stats_t *stats)
{
    if (cupool__forked()) /* the cache lock may be held by a parent's thread */
        return cupool__enter();
    if (!stats)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_graph_stats_get: stats is NULL");
    memset(stats, 0, sizeof(*stats));
    stats->eager_launches = atomic_load_explicit(&st_eager, CUPOOL_RELAXED);
    uint64_t fast = 0, updates = 0, nodes = 0, compared = 0; /* counted by each thread */
    for (const struct cupool__tcache *tc = cupool__tcaches(); tc; tc = cupool__tc_next(tc)) {
        fast += atomic_load_explicit(&tc->graph_hits, CUPOOL_RELAXED);
        updates += atomic_load_explicit(&tc->graph_updates, CUPOOL_RELAXED);
        nodes += atomic_load_explicit(&tc->graph_nodes_updated, CUPOOL_RELAXED);
        compared += atomic_load_explicit(&tc->graph_compared, CUPOOL_RELAXED);
    }
    stats->claims_lock_free = fast;
    stats->nodes_compared = compared + atomic_load_explicit(&st_compared, CUPOOL_RELAXED);
    pthread_mutex_lock(&cache_lock);
    stats->launches = st_launches + fast;
    stats->claims_locked = st_launches;
    stats->hits = st_hits + fast;
    stats->misses = st_misses;
    stats->instantiations = atomic_load_explicit(&st_inst, CUPOOL_RELAXED);
    stats->updates = updates + atomic_load_explicit(&st_updates, CUPOOL_RELAXED);
    stats->nodes_updated = nodes + atomic_load_explicit(&st_nodes_updated, CUPOOL_RELAXED);
    stats->update_failures = atomic_load_explicit(&st_update_failures, CUPOOL_RELAXED);
    stats->evictions = st_evictions;
    stats->entries = cache_entries;
    stats->execs = cache_execs;
    stats->bytes = cache_bytes;
    pthread_mutex_unlock(&cache_lock);
    return CUDA_SUCCESS;
}

/* Destroys every cached graph while the driver answers (unload, exit with
 * CUPOOL_DESTROY_ON_EXIT); the caller is the closer. */
static void graph_cache_close(bool all_threads)
{
    pthread_mutex_lock(&cache_lock);
    struct gentry *e = entries_head;
    while (e) {
        struct gentry *next = e->next;
        if (all_threads) { /* unload: no launch can be running */
            entry_unlink(e);
            entry_free(e);
        } else {
            entry_evict(e); /* exit: other threads may be launching: not theirs */
        }
        e = next;
    }
    pthread_mutex_unlock(&cache_lock);
    graves_reap(true);
}

/* cupool_trim(): drops every cached graph not in use right now, and forgets kernel layouts
 * (a module may have been unloaded). */
static void graph_cache_trim(void)
{
    fn_table_trim();
    pthread_mutex_lock(&cache_lock);
    struct gentry *e = entries_head;
    while (e) {
        struct gentry *next = e->next;
        entry_evict(e);
        e = next;
    }
    pthread_mutex_unlock(&cache_lock);
    graves_reap(true); /* everything buried, now (trim may wait) */
    pthread_mutex_lock(&cache_lock);
    /* free structs back to the allocator, once no lock-free claim can be touching one: the
     * epoch moves on (every thread's hint is stale from now on), then a grace period lets
     * claims that read the old epoch finish */
    struct gentry *fe = free_entries;
    struct gexec *fx = free_execs;
    free_entries = NULL;
    free_execs = NULL;
    if (fe || fx)
        atomic_fetch_add(&cache_epoch.v, 1);
    pthread_mutex_unlock(&cache_lock);
    if (!fe && !fx)
        return;
    if (cupool__synchronize(10000000u)) {
        while (fe) {
            struct gentry *next = fe->free_next;
            cupool__free(fe, sizeof(*fe));
            fe = next;
        }
        while (fx) {
            struct gexec *next = fx->free_next;
            cupool__free(fx, sizeof(*fx));
            fx = next;
        }
        return;
    }
    pthread_mutex_lock(&cache_lock); /* not shown now: kept for a later trim */
    while (fe) {
        struct gentry *next = fe->free_next;
        entry_struct_put(fe);
        fe = next;
    }
    while (fx) {
        struct gexec *next = fx->free_next;
        exec_struct_put(fx);
        fx = next;
    }
    pthread_mutex_unlock(&cache_lock);
}

CUresult cupool_pipeline_dot(cupool_pipeline_t pipeline, const char *path)
{
    struct cupool_pipeline *p = pipeline_of(pipeline);
    if (!p || !path || p->n == 0)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_pipeline_dot: %s",
                            !p ? "not a pipeline" : !path ? "path is NULL" : "no nodes");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!cupool__drv.cuGraphDebugDotPrint)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED, "the driver has no cuGraphDebugDotPrint");
    unsigned long long ctx_id;
    r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &ctx_id));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cupool_pipeline_dot: no usable current context");
    uint64_t hash;
    size_t nsig = signature(p, &hash);
    if (!nsig)
        return cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a pipeline signature");
    /* p->sig now holds this structure, not the last launch's: forget the last launch's */
    p->sig_dirty = true;
    p->last_nsig = 0;
    p->last_entry = NULL;
    pthread_mutex_lock(&cache_lock);
    struct gentry *e = lookup(hash, ctx_id, p->sig, nsig);
    if (e) /* held busy so it is not evicted while printing */
        atomic_fetch_add(&e->busy, 1);
    pthread_mutex_unlock(&cache_lock);
    if (!e)
        return cupool__fail(CUDA_ERROR_NOT_FOUND,
                            "cupool_pipeline_dot: no cached graph for this pipeline's structure "
                            "(launch it first)");
    pthread_mutex_lock(&template_lock);
    r = CUPOOL_DRV(
        cupool__drv.cuGraphDebugDotPrint(e->graph, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
    pthread_mutex_unlock(&template_lock);
    atomic_fetch_sub(&e->busy, 1);
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuGraphDebugDotPrint(%s) failed", path);
    return CUDA_SUCCESS;
}

/* ---- captured graphs ---- */

#define CAPTURE_TAG UINT64_C(0xCA97C0DE00000000)

/* Runs fn under thread-local capture on stream (of context ctx); *graph gets the result. */
static CUresult capture(CUstream stream, cupool_capture_fn fn, void *user, CUcontext ctx,
                        unsigned long long ctx_id, CUgraph *graph)
{
    CUresult r = CUPOOL_DRV(
        cupool__drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cuStreamBeginCapture failed");
    CUresult user_r = fn(stream, user);
    *graph = NULL;
    r = CUPOOL_DRV(cupool__drv.cuStreamEndCapture(stream, graph));
    /* Never leave the caller's stream capturing: while the driver says it still is (or cannot
     * say), end the capture again, keeping nothing of it. A few tries: a passing error may
     * hit either call more than once. */
    for (int tries = 0; r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED && tries < 4; tries++) {
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        CUresult q = CUPOOL_DRV(cupool__drv.cuStreamIsCapturing(stream, &cs));
        if (q == CUDA_SUCCESS && cs == CU_STREAM_CAPTURE_STATUS_NONE)
            break;
        if (q == CUDA_ERROR_DEINITIALIZED)
            break;
        CUgraph again = NULL;
        if (CUPOOL_DRV(cupool__drv.cuStreamEndCapture(stream, &again)) == CUDA_SUCCESS ||
            again) {
            objects_destroy(NULL, again, NULL, ctx, ctx_id);
            if (q == CUDA_SUCCESS)
                break; /* ended now */
        }
    }
    if (user_r != CUDA_SUCCESS || r != CUDA_SUCCESS) {
        objects_destroy(NULL, *graph, NULL, ctx, ctx_id);
        *graph = NULL;
        if (user_r != CUDA_SUCCESS)
            return cupool__fail(user_r, "the captured function failed");
        return cupool__fail(r, "cuStreamEndCapture failed (capture invalidated?)");
    }
    return CUDA_SUCCESS;
}

CUresult cupool_capture_launch(uint64_t key, CUstream stream, cupool_capture_fn fn,
                               void *user_data, unsigned int flags)
{
    if (!fn || (flags & ~CUPOOL_CAPTURE_UPDATE))
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, "cupool_capture_launch: %s",
                            !fn ? "fn is NULL" : "unknown flags");
    CUresult r = cupool__enter();
    if (r != CUDA_SUCCESS)
        return r;
    if (!graphs_supported() || !cupool__drv.cuStreamBeginCapture ||
        !cupool__drv.cuStreamEndCapture || !cupool__drv.cuGraphExecUpdate)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                            "this driver lacks the capture or graph entry points");
    unsigned long long ctx_id;
    CUcontext ctx = NULL;
    r = CUPOOL_DRV(cupool__drv.cuCtxGetId(NULL, &ctx_id));
    if (r == CUDA_SUCCESS)
        r = CUPOOL_DRV(cupool__drv.cuCtxGetCurrent(&ctx));
    if (r != CUDA_SUCCESS)
        return cupool__fail(r, "cupool_capture_launch: no usable current context");
    uint64_t sig[2] = {CAPTURE_TAG, key};
    uint64_t hash = mix(mix(0, sig[0]), sig[1]);

    uint64_t epoch = 0, inst = 0;
    struct gexec *x;
    struct cupool__tcache *tc = cupool__tl;
    struct gentry *e =
        tc ? fast_claim(tc, hash, NULL, 0, ctx_id, sig, 2, stream, &x, &epoch) : NULL;
    bool fast = e != NULL; /* then this thread's hint already names e and x */
    if (!fast)
        e = entry_claim(NULL, hash, ctx_id, sig, 2, stream, &x, &epoch);
    CUgraph fresh_graph = NULL;
    if (!e) {
        r = capture(stream, fn, user_data, ctx, ctx_id, &fresh_graph);
        if (r != CUDA_SUCCESS)
            return r;
        struct gentry *ne = entry_struct_get();
        uint64_t *nsig = cupool__alloc(sizeof(sig));
        struct gexec *nx = NULL;
        if (ne && nsig) {
            ne->hash = hash;
            ne->ctx_id = ctx_id;
            ne->ctx = ctx;
            ne->sig = nsig;
            memcpy(nsig, sig, sizeof(sig));
            ne->nsig = 2;
            ne->captured = true;
            ne->graph = fresh_graph;
            r = exec_new(ne, &nx);
        } else {
            r = cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a graph cache entry");
        }
        if (r != CUDA_SUCCESS) {
            objects_destroy(NULL, fresh_graph, NULL, ctx, ctx_id);
            cupool__free(nsig, sizeof(sig));
            if (ne)
                entry_struct_put_locked(ne);
            return r;
        }
        inst++;
        fresh_graph = NULL; /* the entry's now */
        ne->execs[0] = nx;
        ne->nexecs = 1;
        ne->bytes = sizeof(*ne) + sizeof(sig) + 16 * DRIVER_BYTES_PER_NODE;
        /* if another thread cached this key meanwhile, CUPOOL_CAPTURE_UPDATE still updates
         * the exec this call gets with this call's capture */
        e = entry_publish(ne, stream, (flags & CUPOOL_CAPTURE_UPDATE) ? &fresh_graph : NULL, &x,
                          &epoch);
    } else if (flags & CUPOOL_CAPTURE_UPDATE) {
        r = capture(stream, fn, user_data, ctx, ctx_id, &fresh_graph);
        if (r != CUDA_SUCCESS) {
            if (x) {
                exec_done(e, x, true, stream, false, x->done_valid, !fast);
            } else {
                exec_unreserve(e);
                atomic_fetch_sub(&e->busy, 1);
            }
            return r;
        }
    }
    bool one_off = false;
    if (!x) {
        /* a new exec: from this call's capture when there is one (no update needed) */
        r = exec_add(e, fresh_graph, NULL, &x, &one_off);
        objects_destroy(NULL, fresh_graph, NULL, ctx, ctx_id);
        fresh_graph = NULL;
        if (r != CUDA_SUCCESS) {
            count_launch(inst, 0, 0);
            return r;
        }
        inst++;
    }
    uint64_t failures = 0;
    if (fresh_graph) {
        /* CUPOOL_CAPTURE_UPDATE on a hit: patch the exec with the new capture, unless a launch
         * attribute the driver does not update in place changed (graph_fingerprint): then,
         * and when the driver refuses the update, instantiate the new capture instead */
        uint32_t *fp = NULL;
        size_t nfp = 0;
        bool fp_known = graph_fingerprint(fresh_graph, &fp, &nfp);
        r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        if (fp_same(x, fp, nfp, fp_known)) {
            CUgraphExecUpdateResultInfo info;
            memset(&info, 0, sizeof(info));
            _Atomic uint32_t *gate = gate_enter();
            r = CUPOOL_DRV(cupool__drv.cuGraphExecUpdate(x->exec, fresh_graph, &info));
            gate_leave(gate);
        }
        if (r == CUDA_SUCCESS) {
            atomic_fetch_add_explicit(&st_updates, 1, CUPOOL_RELAXED);
            cupool__free(fp, nfp * sizeof(*fp));
        } else {
            failures++;
            objects_destroy(x->exec, NULL, NULL, ctx, ctx_id);
            x->exec = NULL;
            r = instantiate_gated(&x->exec, fresh_graph);
            inst++;
            if (r == CUDA_SUCCESS) {
                exec_fp_set(x, fp, nfp, fp_known);
            } else {
                x->exec = NULL;
                cupool__free(fp, nfp * sizeof(*fp));
            }
        }
        objects_destroy(NULL, fresh_graph, NULL, ctx, ctx_id);
    }
    bool launched = false, recorded = false;
    if (r == CUDA_SUCCESS && x->exec) {
        r = exec_launch(e, x, stream, &recorded);
        launched = r == CUDA_SUCCESS;
    } else if (r != CUDA_SUCCESS) {
        cupool__fail(r, "instantiating a captured graph failed");
    }
    bool keep = !one_off && x->exec != NULL;
    uint64_t serial = x->serial; /* read while owned */
    count_launch(inst, failures, 0);
    exec_done(e, x, keep, stream, launched, recorded, !fast);
    if (keep && launched && !fast)
        hint_put(hash, stream, e, x, serial, epoch);
    graves_maybe_reap();
    return r;
}

/* The graph layer's line of cupool_stats_print. */
static void graph_report(FILE *out)
{
    cupool_graph_stats_t g;
    if (cupool_graph_stats_get(&g) == CUDA_SUCCESS && (g.launches || g.eager_launches))
        fprintf(out,
                "graph cache: %" PRIu64 " launches, %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
                " instantiations, %" PRIu64 " updates (%" PRIu64 " nodes), %" PRIu64
                " update failures, %" PRIu64 " evictions, %" PRIu64 " eager launches; %" PRIu64
                " entries, %" PRIu64 " execs, %" PRIu64 " bytes\n",
                g.launches, g.hits, g.misses, g.instantiations, g.updates, g.nodes_updated,
                g.update_failures, g.evictions, g.eager_launches, g.entries, g.execs, g.bytes);
}

/* The graph layer's hooks (base/layer.h): the cache goes with the pools at exit and unload,
 * is trimmed with them, and its graveyard is reaped by the maintenance thread. */
static const struct cupool__layer graph_layer = {
    .rank = CUPOOL_LAYER_GRAPH,
    .close = graph_cache_close,
    .trim = graph_cache_trim,
    .report = graph_report,
    .maintain = graph_graves_maintain,
};

__attribute__((constructor)) static void graph_layer_register(void)
{
    cupool__layer_register(&graph_layer);
}
