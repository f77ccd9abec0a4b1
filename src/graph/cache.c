/* SPDX-License-Identifier: MIT */
/*
 * The graph cache: entries and execs, the table and its LRU, type-stable structs, and the
 * launch attributes an update does not apply.
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

/* ---- the cache ---- */




/* Lock order (docs/design.md, "Locks"): after class_lock and the maintenance unit lock,
 * before fn_lock, the registry's and the allocator's; held across cuCtxGetId and
 * cuEventQuery, never across a grace period. */
pthread_mutex_t cupool__cache_lock = PTHREAD_MUTEX_INITIALIZER;
struct gentry *cupool__buckets[BUCKETS];
struct gentry *cupool__entries_head; /* every cached entry */
size_t cupool__cache_entries;
size_t cupool__cache_bytes;
size_t cupool__cache_execs;
struct gentry *cupool__free_entries; /* type-stable structs for reuse (cache lock) */
struct gexec *cupool__free_execs;
static _Atomic uint64_t exec_serial;
/* Bumped whenever an entry is freed, before each eviction attempt claims an entry's execs
 * (sequentially consistent, against fast_claim's claim-then-check: a Dekker handshake), and
 * by cupool_trim() before it returns free structs to the allocator. */
cupool__line_counter cupool__cache_epoch; /* read by every lock-free claim */
/* Ticks only when the most recently launched entry changes: last_use stamps (exact LRU order
 * without a shared write per launch). */
cupool__line_counter cupool__cache_clock = {1}; /* a new entry's last_use, 0, is older */

/* counters: the first four under cache_lock (a launch takes it anyway), the rest atomic,
 * added to only when non-zero */
uint64_t cupool__st_launches;
uint64_t cupool__st_hits;
uint64_t cupool__st_misses;
uint64_t cupool__st_evictions;
_Atomic uint64_t cupool__st_inst;
_Atomic uint64_t cupool__st_updates;
_Atomic uint64_t cupool__st_nodes_updated;
_Atomic uint64_t cupool__st_update_failures;
_Atomic uint64_t cupool__st_eager;
_Atomic uint64_t cupool__st_update_reason[UR_COUNT];
_Atomic uint64_t cupool__st_node_refusals;
_Atomic uint64_t cupool__st_update_errors;
/* the same, per device slot of the entries (cupool_graph_stats_device_get) */
struct cupool__gdev_stats cupool__st_dev[CUPOOL_GDEV_SLOTS];


void cupool__list_unlink(struct gentry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        cupool__entries_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    e->prev = e->next = NULL;
}

void cupool__list_push(struct gentry *e)
{
    e->next = cupool__entries_head;
    e->prev = NULL;
    if (cupool__entries_head)
        cupool__entries_head->prev = e;
    cupool__entries_head = e;
}







/* ---- type-stable structs ---- */

#define ENTRY_KEEP offsetof(struct gentry, last_use) /* busy is never cleared */
#define EXEC_KEEP offsetof(struct gexec, entry)

struct gentry *cupool__entry_struct_get(void)
{
    pthread_mutex_lock(&cupool__cache_lock);
    struct gentry *e = cupool__free_entries;
    if (e)
        cupool__free_entries = e->free_next;
    pthread_mutex_unlock(&cupool__cache_lock);
    if (e)
        memset((char *)e + ENTRY_KEEP, 0, sizeof(*e) - ENTRY_KEEP);
    else
        e = cupool__alloc(sizeof(*e));
    return e;
}

/* Cache lock held. */
void cupool__entry_struct_put(struct gentry *e)
{
    e->free_next = cupool__free_entries;
    cupool__free_entries = e;
}

void cupool__entry_struct_put_locked(struct gentry *e)
{
    pthread_mutex_lock(&cupool__cache_lock);
    cupool__entry_struct_put(e);
    pthread_mutex_unlock(&cupool__cache_lock);
}

/* An exec struct owned by the caller, with a new serial. */
struct gexec *cupool__exec_struct_get(void)
{
    pthread_mutex_lock(&cupool__cache_lock);
    struct gexec *x = cupool__free_execs;
    if (x)
        cupool__free_execs = x->free_next;
    pthread_mutex_unlock(&cupool__cache_lock);
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
void cupool__exec_struct_put(struct gexec *x)
{
    x->free_next = cupool__free_execs;
    cupool__free_execs = x;
}

void cupool__exec_struct_put_locked(struct gexec *x)
{
    pthread_mutex_lock(&cupool__cache_lock);
    cupool__exec_struct_put(x);
    pthread_mutex_unlock(&cupool__cache_lock);
}

/* The bytes the cache counts for x as it adds it (cache lock held), kept in x->counted_bytes
 * for its free to take away: the estimate is added and taken away whole, though the snapshot
 * may grow and a capture's fingerprint (60 bytes a kernel, left out) change size meanwhile. */
size_t cupool__exec_bytes(const struct gentry *e, struct gexec *x)
{
    x->counted_bytes = sizeof(*x) + x->snap_cap * sizeof(struct pnode) + x->snap_acap +
                       (size_t)e->n * DRIVER_BYTES_PER_NODE;
    return x->counted_bytes;
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
bool cupool__graph_fingerprint(CUgraph g, uint32_t **out, size_t *n)
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
void cupool__exec_fp_set(struct gexec *x, uint32_t *fp, size_t n, bool known)
{
    cupool__free(x->fp, x->nfp * sizeof(*x->fp));
    x->fp = fp;
    x->nfp = n;
    x->fp_known = known;
}

bool cupool__fp_same(const struct gexec *x, const uint32_t *fp, size_t n, bool known)
{
    return known && x->fp_known && n == x->nfp && (!n || memcmp(fp, x->fp, n * sizeof(*fp)) == 0);
}

/* Copies the pipeline's parameters into an exec's snapshot. */
bool cupool__snapshot(struct gexec *x, const struct cupool_pipeline *p)
{
    if (!cupool__grow((void **)&x->snap, &x->snap_cap, p->n, sizeof(*x->snap)) ||
        !cupool__grow((void **)&x->snap_args, &x->snap_acap, p->alen + 1, 1))
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
int cupool__entry_ctx_state(const struct gentry *e)
{
    CUresult err = CUDA_SUCCESS;
    return cupool__ctx_verdict(e->ctx, e->ctx_id, &err);
}
