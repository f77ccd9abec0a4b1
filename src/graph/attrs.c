/* SPDX-License-Identifier: MIT */
/*
 * Launch attributes of a pipeline's kernels (cupool_pipeline_kernel_ex): their checks, their
 * normalised form, and how they reach the driver: kernel-node attributes of the template
 * graph (cuGraphKernelNodeSetAttribute), programmatic edges, instantiation flags, and the
 * attribute array of an eager launch (cuLaunchKernelEx).
 *
 * Every attribute offered is structure, part of the pipeline's signature: the driver has no
 * call that changes a kernel node's attribute in an instantiated exec (cuGraphKernelNodeSet
 * Attribute acts on a graph's node; cuGraphExecKernelNodeSetParams and cuGraphExecNodeSetParams
 * take CUDA_KERNEL_NODE_PARAMS, which has none), and cuGraphExecUpdate, the one way left:
 *  - accepted a changed thread-block cluster dimension on the H200 (driver 580.159), reported
 *    success and kept launching the exec with the old one: a wrong result without an error;
 *  - refuses a cooperative node made non-cooperative or the reverse (documented);
 *  - refuses a changed priority in an exec instantiated with
 *    CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (documented), and without that flag a
 *    node's priority is not used at all (the launch stream's is);
 *  - documents nothing for the preferred cluster dimension, the cluster scheduling policy and
 *    the memory sync domain and its map: taken as the cluster dimension (instantiating
 *    afresh is always right);
 *  - has no attribute for programmatic stream serialization, which a graph expresses as the
 *    type of the edges into the node: topology.
 * So a change of any of them is another signature: another cache entry, instantiated once,
 * and replayed as a hit from then on. The arguments, grid, block and shared memory of such a
 * kernel are parameters as for any other, patched into the exec.
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

#include <string.h>

/* The names of the launch attributes cuda.h knows, for messages. */
static const char *attr_name(int id)
{
    static const char *const names[] = {
        "CU_LAUNCH_ATTRIBUTE_IGNORE",
        "CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW",
        "CU_LAUNCH_ATTRIBUTE_COOPERATIVE",
        "CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY",
        "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION",
        "CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE",
        "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION",
        "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT",
        "CU_LAUNCH_ATTRIBUTE_PRIORITY",
        "CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP",
        "CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN",
        "CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION",
        "CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT",
        "CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE",
        "CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT",
        "(attribute 15)",
        "CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING",
    };
    return id >= 0 && (size_t)id < sizeof(names) / sizeof(names[0]) ? names[id]
                                                                    : "(unknown to this cupool)";
}

#define BIT(id) (1u << (unsigned)(id))
/* The attributes a pipeline kernel takes. */
#define KATTR_SUPPORTED                                                                      \
    (BIT(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) |                                            \
     BIT(CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION) | BIT(CU_LAUNCH_ATTRIBUTE_COOPERATIVE) | \
     BIT(CU_LAUNCH_ATTRIBUTE_PRIORITY) |                                                     \
     BIT(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) |                            \
     BIT(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN) | BIT(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP) | \
     BIT(CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE))
/* Those set on a graph's kernel node (programmatic stream serialization is an edge type) */
#define KATTR_NODE (KATTR_SUPPORTED & ~BIT(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION))

#define WHO "cupool_pipeline_kernel_ex"

/* Checks attrs[0 .. nattrs - 1] against the kernel's launch shape (grid x, y, z, block x, y,
 * z, shared bytes) and writes their normalised form to *out; nothing else is touched. Every
 * problem is CUDA_ERROR_INVALID_VALUE with a message naming the attribute. */
CUresult cupool__kattr_parse(const CUlaunchAttribute *attrs, unsigned int nattrs,
                             const uint32_t shape[7], struct kattr *out)
{
    memset(out, 0, sizeof(*out));
    if (nattrs > CUPOOL_PIPELINE_ATTRS_MAX)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                            WHO ": %u launch attributes; at most %u are taken", nattrs,
                            (unsigned)CUPOOL_PIPELINE_ATTRS_MAX);
    if (nattrs && !attrs)
        return cupool__fail(CUDA_ERROR_INVALID_VALUE, WHO ": attrs is NULL with nattrs %u",
                            nattrs);
    unsigned at[32] = {0}; /* where each attribute was given */
    for (unsigned i = 0; i < nattrs; i++) {
        int id = (int)attrs[i].id;
        const CUlaunchAttributeValue *v = &attrs[i].value;
        if (id == CU_LAUNCH_ATTRIBUTE_IGNORE)
            continue;
        if (id < 0 || id >= 32 || !(KATTR_SUPPORTED & BIT(id)))
            return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                WHO ": attrs[%u]: launch attribute %d (%s) is not supported on "
                                "a pipeline kernel (supported: cluster dimension, preferred "
                                "cluster dimension, cooperative, priority, programmatic stream "
                                "serialization, memory sync domain and its map, cluster "
                                "scheduling policy)",
                                i, id, attr_name(id));
        if (out->given & BIT(id))
            return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                WHO ": attrs[%u]: %s given twice (attrs[%u] and attrs[%u])", i,
                                attr_name(id), at[id], i);
        out->given |= BIT(id);
        at[id] = i;
        switch (id) {
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: {
            const uint32_t d[3] = {v->clusterDim.x, v->clusterDim.y, v->clusterDim.z};
            if (!d[0] || !d[1] || !d[2])
                return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                    WHO ": attrs[%u]: cluster dimension %ux%ux%u: each must be "
                                    "at least 1",
                                    i, d[0], d[1], d[2]);
            if (shape[0] % d[0] || shape[1] % d[1] || shape[2] % d[2])
                return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                    WHO ": attrs[%u]: cluster dimension %ux%ux%u does not divide "
                                    "the grid %ux%ux%u",
                                    i, d[0], d[1], d[2], shape[0], shape[1], shape[2]);
            memcpy(out->cluster, d, sizeof(d));
            break;
        }
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION: /* checked below */
            out->preferred[0] = v->preferredClusterDim.x;
            out->preferred[1] = v->preferredClusterDim.y;
            out->preferred[2] = v->preferredClusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            out->cooperative = v->cooperative != 0;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            out->priority = v->priority;
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            out->programmatic = v->programmaticStreamSerializationAllowed != 0;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
            if ((unsigned)v->memSyncDomain > (unsigned)CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
                return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                    WHO ": attrs[%u]: memory sync domain %u is not a "
                                    "CUlaunchMemSyncDomain",
                                    i, (unsigned)v->memSyncDomain);
            out->sync_domain = (uint8_t)v->memSyncDomain;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
            out->sync_map[0] = v->memSyncDomainMap.default_;
            out->sync_map[1] = v->memSyncDomainMap.remote;
            break;
        default: /* CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE */
            if ((unsigned)v->clusterSchedulingPolicyPreference >
                (unsigned)CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
                return cupool__fail(CUDA_ERROR_INVALID_VALUE,
                                    WHO ": attrs[%u]: cluster scheduling policy %u is not a "
                                    "CUclusterSchedulingPolicy",
                                    i, (unsigned)v->clusterSchedulingPolicyPreference);
            out->policy = (uint8_t)v->clusterSchedulingPolicyPreference;
            break;
        }
    }
    if (out->given & BIT(CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION)) {
        /* cuda.h: a multiple (greater than zero) of the cluster dimension, dividing the grid */
        const uint32_t *d = out->preferred;
        for (int k = 0; k < 3; k++) {
            uint32_t c = out->cluster[k] ? out->cluster[k] : 1;
            if (!d[k] || d[k] % c || shape[k] % d[k])
                return cupool__fail(
                    CUDA_ERROR_INVALID_VALUE,
                    WHO ": attrs[%u]: preferred cluster dimension %ux%ux%u must be a multiple of "
                        "the cluster dimension %ux%ux%u and divide the grid %ux%ux%u",
                    at[CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION], d[0], d[1], d[2],
                    out->cluster[0] ? out->cluster[0] : 1, out->cluster[1] ? out->cluster[1] : 1,
                    out->cluster[2] ? out->cluster[2] : 1, shape[0], shape[1], shape[2]);
        }
    }
    return CUDA_SUCCESS;
}

/* Does the driver have what these attributes need, on the way pipelines launch (graphs, or
 * node by node with CUPOOL_GRAPH_DISABLE or without graphs)? CUDA_ERROR_NOT_SUPPORTED with a
 * message naming the missing entry point otherwise. */
CUresult cupool__kattr_support(const struct kattr *ka)
{
    const char *missing = NULL;
    if (cupool__cfg.graph_disable || !cupool__graphs_supported()) {
        if (!cupool__drv.cuLaunchKernelEx)
            missing = "cuLaunchKernelEx";
    } else if ((ka->given & KATTR_NODE) && !cupool__drv.cuGraphKernelNodeSetAttribute) {
        missing = "cuGraphKernelNodeSetAttribute";
    } else if (ka->programmatic && !cupool__drv.cuGraphAddDependencies) {
        missing = "cuGraphAddDependencies (CUDA 12.3, with edge data)";
    }
    if (missing)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                            WHO ": the driver (%s) lacks %s, which a kernel with launch "
                            "attributes needs",
                            cupool__drv.path, missing);
    return CUDA_SUCCESS;
}

/* The attributes set on a graph's kernel node, in this order (a preferred cluster dimension
 * after the cluster dimension it is a multiple of). */
static const int node_order[] = {
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
    CU_LAUNCH_ATTRIBUTE_PRIORITY,
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, /* launches only */
};

/* The driver's value of attribute id of ka. */
static void attr_value(const struct kattr *ka, int id, CUlaunchAttributeValue *v)
{
    memset(v, 0, sizeof(*v));
    switch (id) {
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        v->clusterDim.x = ka->cluster[0];
        v->clusterDim.y = ka->cluster[1];
        v->clusterDim.z = ka->cluster[2];
        break;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        v->preferredClusterDim.x = ka->preferred[0];
        v->preferredClusterDim.y = ka->preferred[1];
        v->preferredClusterDim.z = ka->preferred[2];
        break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        v->cooperative = ka->cooperative;
        break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        v->clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)ka->policy;
        break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        v->memSyncDomain = (CUlaunchMemSyncDomain)ka->sync_domain;
        break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        v->memSyncDomainMap.default_ = ka->sync_map[0];
        v->memSyncDomainMap.remote = ka->sync_map[1];
        break;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        v->priority = ka->priority;
        break;
    default: /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION */
        v->programmaticStreamSerializationAllowed = ka->programmatic;
        break;
    }
}

/* Sets ka's attributes on kernel node `node` (node i of its pipeline) of a graph not yet
 * instantiated: one cuGraphKernelNodeSetAttribute each. Returns the driver's error. */
CUresult cupool__kattr_node_set(CUgraphNode node, const struct kattr *ka, uint32_t i)
{
    if ((ka->given & KATTR_NODE) && !cupool__drv.cuGraphKernelNodeSetAttribute)
        return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                            "the driver lacks cuGraphKernelNodeSetAttribute: kernel node %u's "
                            "launch attributes cannot be set",
                            i);
    for (size_t k = 0; k < sizeof(node_order) / sizeof(node_order[0]); k++) {
        int id = node_order[k];
        if (!(ka->given & KATTR_NODE & BIT(id)))
            continue;
        CUlaunchAttributeValue v;
        attr_value(ka, id, &v);
        CUresult r = CUPOOL_DRV(cupool__drv.cuGraphKernelNodeSetAttribute(
            node, (CUkernelNodeAttrID)id, (const CUkernelNodeAttrValue *)&v));
        if (r != CUDA_SUCCESS)
            return cupool__fail(r, "cuGraphKernelNodeSetAttribute(%s) on kernel node %u failed",
                                attr_name(id), i);
    }
    return CUDA_SUCCESS;
}

/* Node i of p (a kernel with programmatic stream serialization), added to graph as `node`
 * without the dependencies on kernels (gnodes: the graph's nodes so far): gets them as
 * programmatic edges (CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC from the port
 * CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC), which is what a stream capture makes of such a
 * launch after a kernel: the kernel may begin before the one it depends on has finished, and
 * wait for it with cudaGridDependencySynchronize(). */
CUresult cupool__kattr_edges(CUgraph graph, const struct cupool_pipeline *p, uint32_t i,
                             const CUgraphNode *gnodes, CUgraphNode node)
{
    const struct pnode *n = &p->nodes[i];
    for (uint32_t d = 0; d < n->ndeps; d++) {
        uint32_t on = p->deps[n->dep_start + d];
        if (p->nodes[on].type != PN_KERNEL)
            continue;
        if (!cupool__drv.cuGraphAddDependencies)
            return cupool__fail(CUDA_ERROR_NOT_SUPPORTED,
                                "the driver lacks cuGraphAddDependencies with edge data (CUDA "
                                "12.3): kernel node %u's programmatic edge cannot be made",
                                i);
        CUgraphEdgeData ed;
        memset(&ed, 0, sizeof(ed));
        ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
        CUresult r =
            CUPOOL_DRV(cupool__drv.cuGraphAddDependencies(graph, &gnodes[on], &node, &ed, 1));
        if (r != CUDA_SUCCESS)
            return cupool__fail(r, "adding the programmatic edge from node %u to kernel node %u "
                                   "failed",
                                on, i);
    }
    return CUDA_SUCCESS;
}

/* Writes ka's attributes as cuLaunchKernelEx takes them (KATTR_LAUNCH_MAX at most); returns
 * their count. */
unsigned cupool__kattr_launch(const struct kattr *ka, CUlaunchAttribute *out)
{
    unsigned n = 0;
    for (size_t k = 0; k < sizeof(node_order) / sizeof(node_order[0]); k++) {
        int id = node_order[k];
        if (!(ka->given & BIT(id)))
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        out[n].id = (CUlaunchAttributeID)id;
        attr_value(ka, id, &out[n].value);
        n++;
    }
    return n;
}
_Static_assert(sizeof(node_order) / sizeof(node_order[0]) <= KATTR_LAUNCH_MAX,
               "KATTR_LAUNCH_MAX holds every attribute");

/* The flags p's graph is instantiated with: its kernels' priorities apply only with
 * CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (else the launch stream's priority does). */
unsigned long long cupool__kattr_inst_flags(const struct cupool_pipeline *p)
{
    for (uint32_t i = 0; i < p->n; i++)
        if (p->nodes[i].type == PN_KERNEL && p->nodes[i].attr &&
            (p->kattr[i].given & BIT(CU_LAUNCH_ATTRIBUTE_PRIORITY)))
            return CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
    return 0;
}
