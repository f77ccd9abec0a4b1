/* SPDX-License-Identifier: MIT */
/*
 * Small growable arrays from cupool's allocator, and kernel argument layouts
 * (cuFuncGetParamInfo), shared by the pipelines that hold them.
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

/* ---- small growable arrays from cupool's allocator ---- */

bool cupool__grow(void **p, size_t *cap, size_t need, size_t elem)
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


/* ---- function argument layouts ---- */

/* Lock order (docs/design.md, "Locks"): after the graph cache's, before the allocator's. */
static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fninfo *fn_table[256];
/* cupool__hot.fn_epoch is bumped by cupool_trim(): layouts learnt before are looked up again
 * (a function of an unloaded module can be followed by another at the same address). The old
 * layouts stay while pipelines still hold them (their nodes point at them), then go. */

static size_t fn_bucket(CUfunction f)
{
    return (size_t)(((uint64_t)(uintptr_t)f * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
}

static size_t fninfo_size(uint32_t nparams)
{
    return sizeof(struct fninfo) + nparams * sizeof(struct fnparam);
}

static void fninfo_free(struct fninfo *fi)
{
    cupool__free(fi, fninfo_size(fi->nparams));
}

/* Drops one pipeline's hold on a layout. fn_lock held. */
static void fninfo_unref(struct fninfo *fi)
{
    if (--fi->refs == 0 && !fi->listed)
        fninfo_free(fi);
}

/* Drops every layout a pipeline holds (its nodes are gone or going). */
void cupool__pipeline_unhold(struct cupool_pipeline *p)
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
    struct fnparam *param = NULL; /* read into a growable array, then into the layout's block */
    size_t cap = 0;
    uint32_t n = 0, bytes = 0;
    CUresult r;
    for (;;) {
        size_t o = 0, sz = 0;
        r = CUPOOL_DRV(cupool__drv.cuFuncGetParamInfo(f, n, &o, &sz));
        if (r == CUDA_ERROR_INVALID_VALUE) {
            r = CUDA_SUCCESS; /* past the last parameter (or f has none) */
            break;
        }
        if (r != CUDA_SUCCESS) {
            r = cupool__fail(r, "cuFuncGetParamInfo(%p, %u) failed", (void *)f, n);
            break;
        }
        if (!GROW(param, cap, (size_t)n + 1)) {
            r = cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a kernel's layout");
            break;
        }
        param[n++] = (struct fnparam){(uint32_t)o, (uint32_t)sz};
        if (o + sz > bytes)
            bytes = (uint32_t)(o + sz);
    }
    struct fninfo *fi = r == CUDA_SUCCESS ? cupool__alloc(fninfo_size(n)) : NULL;
    if (r == CUDA_SUCCESS && !fi)
        r = cupool__fail(CUDA_ERROR_OUT_OF_MEMORY, "no memory for a kernel's layout");
    if (fi) {
        fi->fn = f;
        fi->nparams = n;
        fi->bytes = bytes;
        if (n)
            memcpy(fi->param, param, n * sizeof(*param));
        *out = fi;
    }
    cupool__free(param, cap * sizeof(*param));
    return r;
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
CUresult cupool__fninfo_get(struct cupool_pipeline *p, CUfunction f, const struct fninfo **out)
{
    uint64_t epoch = atomic_load_explicit(&cupool__hot.fn_epoch, CUPOOL_ACQUIRE);
    if (CUPOOL_UNLIKELY(p->fn_epoch != epoch)) {
        memset(p->fcache, 0, sizeof(p->fcache)); /* held ones stay: nodes may name them */
        p->fn_epoch = epoch;
        cupool__refill_forget(p); /* the nodes in place name the old layouts */
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
void cupool__fn_table_trim(void)
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
    atomic_fetch_add_explicit(&cupool__hot.fn_epoch, 1, CUPOOL_RELEASE);
    pthread_mutex_unlock(&fn_lock);
}
