/* SPDX-License-Identifier: MIT */
/*
 * The driver's graph semantics the graph-replay cache relies on, checked on both drivers:
 * the simulated one must behave as the H200 did (driver 580.159, 2026-11-29), so a test that
 * passes here on the simulation and fails on the GPU means the simulation is wrong.
 * Results are checked value by value: kernels write device memory, read back afterwards.
 */
#define _GNU_SOURCE /* mkstemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/testutil.h"

static struct {
    CUresult (*cuGraphCreate)(CUgraph *, unsigned int);
    CUresult (*cuGraphDestroy)(CUgraph);
    CUresult (*cuGraphAddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                     const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*cuGraphAddMemsetNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                     const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
    CUresult (*cuGraphAddMemcpyNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                     const CUDA_MEMCPY3D *, CUcontext);
    CUresult (*cuGraphAddHostNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                   const CUDA_HOST_NODE_PARAMS *);
    CUresult (*cuGraphAddEventRecordNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                          CUevent);
    CUresult (*cuGraphAddEventWaitNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                        CUevent);
    CUresult (*cuGraphAddDependencies)(CUgraph, const CUgraphNode *, const CUgraphNode *, size_t);
    CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
    CUresult (*cuGraphNodeGetType)(CUgraphNode, CUgraphNodeType *);
    CUresult (*cuGraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                               const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*cuGraphExecMemsetNodeSetParams)(CUgraphExec, CUgraphNode,
                                               const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
    CUresult (*cuGraphExecUpdate)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
    CUresult (*cuGraphDebugDotPrint)(CUgraph, const char *, unsigned int);
    CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
    CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
    CUresult (*cuGraphKernelNodeSetAttribute)(CUgraphNode, CUkernelNodeAttrID,
                                              const CUkernelNodeAttrValue *);
    CUresult (*cuGraphKernelNodeGetAttribute)(CUgraphNode, CUkernelNodeAttrID,
                                              CUkernelNodeAttrValue *);
    CUresult (*add_edges)(CUgraph, const CUgraphNode *, const CUgraphNode *,
                                          const CUgraphEdgeData *, size_t);
    CUresult (*cuGraphInstantiateWithParams)(CUgraphExec *, CUgraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *);
    CUresult (*cuGraphUpload)(CUgraphExec, CUstream);
    CUresult (*cuGraphConditionalHandleCreate)(CUgraphConditionalHandle *, CUgraph, CUcontext,
                                               unsigned int, unsigned int);
    CUresult (*add_node)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *,
                         size_t, CUgraphNodeParams *);
    CUresult (*cuGraphClone)(CUgraph *, CUgraph);
} gr;

static struct tu_kernels k;
static CUstream s1, s2;
static CUdeviceptr mem; /* 16 counters */

#define RES(name, version) TU_OK(cupool_driver_get_proc(#name, version, (void **)&gr.name))

static void setup(void)
{
    tu_setup();
    RES(cuGraphCreate, 10000);
    RES(cuGraphDestroy, 10000);
    RES(cuGraphAddKernelNode, 12000);
    RES(cuGraphAddMemsetNode, 10000);
    RES(cuGraphAddMemcpyNode, 10000);
    RES(cuGraphAddHostNode, 10000);
    RES(cuGraphAddEventRecordNode, 11010);
    RES(cuGraphAddEventWaitNode, 11010);
    RES(cuGraphAddDependencies, 10000);
    RES(cuGraphGetNodes, 10000);
    RES(cuGraphNodeGetType, 10000);
    /* by its own name: cuGetProcAddress("cuGraphInstantiate") gives the old five-argument
     * form even at 12000 (cuda.h alone maps the name; a three-argument call crashes) */
    TU_OK(cupool_driver_get_proc("cuGraphInstantiateWithFlags", 11040,
                                 (void **)&gr.cuGraphInstantiate));
    RES(cuGraphExecDestroy, 10000);
    RES(cuGraphLaunch, 10000);
    RES(cuGraphExecKernelNodeSetParams, 12000);
    RES(cuGraphExecMemsetNodeSetParams, 10020);
    RES(cuGraphExecUpdate, 12000);
    RES(cuGraphDebugDotPrint, 11030);
    RES(cuFuncGetParamInfo, 12040);
    RES(cuStreamBeginCapture, 10010);
    RES(cuGraphKernelNodeSetAttribute, 11000);
    RES(cuGraphKernelNodeGetAttribute, 11000);
    /* from 12030 the name gives the form with edge data */
    TU_OK(cupool_driver_get_proc("cuGraphAddDependencies", 12030,
                                 (void **)&gr.add_edges));
    RES(cuGraphInstantiateWithParams, 12000);
    RES(cuGraphUpload, 11010);
    RES(cuGraphConditionalHandleCreate, 12030);
    /* from 12030 the name gives the form with edge data */
    TU_OK(cupool_driver_get_proc("cuGraphAddNode", 12030, (void **)&gr.add_node));
    RES(cuGraphClone, 10000);
    tu_load_kernels(&k);
    TU_OK(tu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuMemAlloc(&mem, 16 * 4));
    TU_OK(tu.cuMemsetD32(mem, 0, 16));
}

static CUDA_KERNEL_NODE_PARAMS kparams(CUfunction f, void **args)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    return p;
}

static unsigned counter(int i)
{
    unsigned v[16];
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(tu.cuMemcpyDtoH(v, mem, sizeof v));
    return v[i];
}

/* A chain of n add_u32(mem + 4 * slot, v) nodes; nodes[] gets them. */
static CUgraph chain(int n, int slot, unsigned v, CUgraphNode *nodes)
{
    CUgraph g;
    TU_OK(gr.cuGraphCreate(&g, 0));
    CUdeviceptr p = mem + 4 * (CUdeviceptr)slot;
    void *args[] = {&p, &v};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(k.add_u32, args);
    for (int i = 0; i < n; i++)
        TU_OK(gr.cuGraphAddKernelNode(&nodes[i], g, i ? &nodes[i - 1] : NULL, i ? 1 : 0, &kp));
    return g;
}

START_TEST(param_info_layout)
{
    size_t off = 0, size = 0;
    TU_OK(gr.cuFuncGetParamInfo(k.add_u32, 0, &off, &size));
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(size, 8);
    TU_OK(gr.cuFuncGetParamInfo(k.add_u32, 1, &off, &size));
    ck_assert_uint_eq(off, 8);
    ck_assert_uint_eq(size, 4);
    TU_EQ(gr.cuFuncGetParamInfo(k.add_u32, 2, &off, &size), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(gr.cuFuncGetParamInfo(k.trap, 0, &off, &size), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

START_TEST(chain_launches_and_args_are_taken_at_add)
{
    CUgraphNode n[10];
    CUgraph g = chain(10, 0, 3, n);
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    TU_OK(gr.cuGraphLaunch(e, s1));
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(0), 60);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST

START_TEST(kernel_node_updates_args_and_function)
{
    CUgraphNode n[3];
    CUgraph g = chain(3, 1, 1, n);
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    CUdeviceptr p = mem + 4;
    unsigned v = 10;
    void *args[] = {&p, &v};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(k.add_u32, args);
    TU_OK(gr.cuGraphExecKernelNodeSetParams(e, n[0], &kp)); /* argument 1 -> 10 */
    void *one[] = {&p};
    CUDA_KERNEL_NODE_PARAMS other = kparams(k.addone, one);
    TU_OK(gr.cuGraphExecKernelNodeSetParams(e, n[2], &other)); /* another function */
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(1), 10 + 1 + 1);
    /* the template graph is untouched: a new exec of it adds 1 three times */
    CUgraphExec e2;
    TU_OK(gr.cuGraphInstantiate(&e2, g, 0));
    TU_OK(gr.cuGraphLaunch(e2, s1));
    ck_assert_uint_eq(counter(1), 12 + 3);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphExecDestroy(e2));
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST

START_TEST(kernel_node_updates_launch_shape)
{
    CUgraph g;
    CUgraphNode n;
    TU_OK(gr.cuGraphCreate(&g, 0));
    CUdeviceptr p = mem + 8;
    unsigned v = 5;
    void *args[] = {&p, &v};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(k.set_u32, args); /* every thread writes v */
    TU_OK(gr.cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    v = 77;
    kp.gridDimX = 4;
    kp.blockDimX = 32;
    kp.sharedMemBytes = 1024;
    TU_OK(gr.cuGraphExecKernelNodeSetParams(e, n, &kp));
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(2), 77);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST

static void count_host(void *arg)
{
    (*(int *)arg)++;
}

START_TEST(dag_memset_kernels_memcpy_host)
{
    /* memset -> {add 1, add 2} -> copy to host -> host node; memset updated in the exec */
    static int host_runs;
    static unsigned out[2];
    host_runs = 0;
    CUgraph g;
    TU_OK(gr.cuGraphCreate(&g, 0));
    CUgraphNode set, a, b, cp, host;
    CUDA_MEMSET_NODE_PARAMS mp;
    memset(&mp, 0, sizeof mp);
    mp.dst = mem + 12;
    mp.value = 100;
    mp.elementSize = 4;
    mp.width = 2;
    mp.height = 1;
    TU_OK(gr.cuGraphAddMemsetNode(&set, g, NULL, 0, &mp, tu_ctx));
    CUdeviceptr p0 = mem + 12, p1 = mem + 16;
    unsigned v1 = 1, v2 = 2;
    void *a0[] = {&p0, &v1}, *a1[] = {&p1, &v2};
    CUDA_KERNEL_NODE_PARAMS ka = kparams(k.add_u32, a0), kb = kparams(k.add_u32, a1);
    TU_OK(gr.cuGraphAddKernelNode(&a, g, &set, 1, &ka));
    TU_OK(gr.cuGraphAddKernelNode(&b, g, &set, 1, &kb));
    CUDA_MEMCPY3D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = mem + 12;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = out;
    c.WidthInBytes = sizeof out;
    c.Height = c.Depth = 1;
    CUgraphNode ab[2] = {a, b};
    TU_OK(gr.cuGraphAddMemcpyNode(&cp, g, ab, 2, &c, tu_ctx));
    CUDA_HOST_NODE_PARAMS hp;
    memset(&hp, 0, sizeof hp);
    hp.fn = count_host;
    hp.userData = &host_runs;
    TU_OK(gr.cuGraphAddHostNode(&host, g, &cp, 1, &hp));
    size_t nn = 0;
    TU_OK(gr.cuGraphGetNodes(g, NULL, &nn));
    ck_assert_uint_eq(nn, 5);
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    TU_OK(gr.cuGraphLaunch(e, s1));
    TU_OK(tu.cuStreamSynchronize(s1));
    ck_assert_uint_eq(out[0], 101);
    ck_assert_uint_eq(out[1], 102);
    ck_assert_int_eq(host_runs, 1);
    mp.value = 200;
    TU_OK(gr.cuGraphExecMemsetNodeSetParams(e, set, &mp, tu_ctx));
    TU_OK(gr.cuGraphLaunch(e, s1));
    TU_OK(tu.cuStreamSynchronize(s1));
    ck_assert_uint_eq(out[0], 201);
    ck_assert_uint_eq(out[1], 202);
    ck_assert_int_eq(host_runs, 2);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST

START_TEST(one_exec_launches_never_overlap)
{
    /* A 50 ms kernel launched from one exec on two streams: the second launch waits for the
     * first (seen on the H200: 40 ms for two 20 ms launches, 20 ms with two execs). */
    CUgraph g;
    CUgraphNode n;
    TU_OK(gr.cuGraphCreate(&g, 0));
    unsigned long long ns = 50000000;
    void *args[] = {&ns};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(k.spin, args);
    TU_OK(gr.cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    /* s1 is busy for 100 ms first, so its launch of e ends at about 150 ms; s2's launch,
     * queued right after, would end at 50 ms if it did not wait. */
    unsigned long long busy = 100000000;
    tu_launch1(k.spin, s1, (void *[]){&busy});
    TU_OK(gr.cuGraphLaunch(e, s1));
    TU_OK(gr.cuGraphLaunch(e, s2));
    TU_OK(tu.cuStreamSynchronize(s2));
    TU_OK(tu.cuStreamQuery(s1)); /* s2's launch could only finish after s1's */
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST

START_TEST(exec_update_same_topology_only)
{
    CUgraphNode n[4], m[4], one;
    CUgraph g = chain(4, 5, 1, n);
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    CUgraph same = chain(4, 5, 7, m); /* same structure, other arguments */
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    TU_OK(gr.cuGraphExecUpdate(e, same, &info));
    ck_assert_int_eq(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(5), 28);
    CUgraph shorter = chain(1, 5, 1, &one);
    memset(&info, 0, sizeof info);
    TU_EQ(gr.cuGraphExecUpdate(e, shorter, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    ck_assert_int_eq(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    TU_OK(gr.cuGraphLaunch(e, s1)); /* the exec is unchanged by the refusal */
    ck_assert_uint_eq(counter(5), 56);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
    TU_OK(gr.cuGraphDestroy(same));
    TU_OK(gr.cuGraphDestroy(shorter));
}
END_TEST

START_TEST(event_nodes_order_two_graphs)
{
    /* graph A: spin, add 1, record ev; graph B: wait ev, set counter 7 -> counter 7, not 8 */
    CUevent ev;
    TU_OK(tu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CUgraph a, b;
    CUgraphNode sa, aa, ra, wb, xb;
    TU_OK(gr.cuGraphCreate(&a, 0));
    TU_OK(gr.cuGraphCreate(&b, 0));
    unsigned long long ns = 20000000;
    void *spin_args[] = {&ns};
    CUDA_KERNEL_NODE_PARAMS ks = kparams(k.spin, spin_args);
    TU_OK(gr.cuGraphAddKernelNode(&sa, a, NULL, 0, &ks));
    CUdeviceptr p = mem + 24;
    unsigned one = 1, seven = 7;
    void *add_args[] = {&p, &one}, *set_args[] = {&p, &seven};
    CUDA_KERNEL_NODE_PARAMS kadd = kparams(k.add_u32, add_args);
    CUDA_KERNEL_NODE_PARAMS kset = kparams(k.set_u32, set_args);
    TU_OK(gr.cuGraphAddKernelNode(&aa, a, &sa, 1, &kadd));
    TU_OK(gr.cuGraphAddEventRecordNode(&ra, a, &aa, 1, ev));
    TU_OK(gr.cuGraphAddEventWaitNode(&wb, b, NULL, 0, ev));
    TU_OK(gr.cuGraphAddKernelNode(&xb, b, &wb, 1, &kset));
    CUgraphExec ea, eb;
    TU_OK(gr.cuGraphInstantiate(&ea, a, 0));
    TU_OK(gr.cuGraphInstantiate(&eb, b, 0));
    TU_OK(gr.cuGraphLaunch(ea, s1));
    TU_OK(gr.cuGraphLaunch(eb, s2));
    ck_assert_uint_eq(counter(6), 7);
    TU_OK(gr.cuGraphExecDestroy(ea));
    TU_OK(gr.cuGraphExecDestroy(eb));
    TU_OK(gr.cuGraphDestroy(a));
    TU_OK(gr.cuGraphDestroy(b));
    TU_OK(tu.cuEventDestroy(ev));
}
END_TEST

START_TEST(capture_makes_nodes_that_replay)
{
    CUstream cs;
    TU_OK(tu.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p = mem + 28;
    unsigned v = 3;
    void *args[] = {&p, &v};
    TU_OK(gr.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < 3; i++)
        tu_launch1(k.add_u32, cs, args);
    CUgraph g;
    TU_OK(tu.cuStreamEndCapture(cs, &g));
    CUgraphNode nodes[8];
    size_t nn = 8;
    TU_OK(gr.cuGraphGetNodes(g, nodes, &nn));
    ck_assert_uint_eq(nn, 3);
    for (size_t i = 0; i < nn; i++) {
        CUgraphNodeType t;
        TU_OK(gr.cuGraphNodeGetType(nodes[i], &t));
        ck_assert_int_eq(t, CU_GRAPH_NODE_TYPE_KERNEL);
    }
    ck_assert_uint_eq(counter(7), 0); /* captured, not run */
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    TU_OK(gr.cuGraphLaunch(e, s1));
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(7), 18);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
    TU_OK(tu.cuStreamDestroy(cs));
}
END_TEST

START_TEST(dot_file_names_nodes_and_edges)
{
    CUgraphNode n[3];
    CUgraph g = chain(3, 8, 1, n);
    char path[] = "/tmp/cupool-graph-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    TU_OK(gr.cuGraphDebugDotPrint(g, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
    ck_assert_int_ge(tu_lines_with(path, "digraph"), 1);
    ck_assert_int_ge(tu_lines_with(path, "add_u32"), 3);
    ck_assert_int_ge(tu_lines_with(path, "->"), 2);
    unlink(path);
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST


/* ---- launch attributes of kernel nodes ---- */

static CUkernelNodeAttrValue cluster_of(unsigned x)
{
    CUkernelNodeAttrValue v;
    memset(&v, 0, sizeof v);
    v.clusterDim.x = x;
    v.clusterDim.y = v.clusterDim.z = 1;
    return v;
}

/* cluster_rank's output for `blocks` blocks of 32 threads, checked thread by thread against
 * clusters of cx blocks. */
static void check_cluster_ranks(CUdeviceptr out, unsigned blocks, unsigned cx, const char *when)
{
    unsigned got[16 * 32];
    ck_assert(blocks <= 16);
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(tu.cuMemcpyDtoH(got, out, 4 * 32 * (size_t)blocks));
    for (unsigned b = 0; b < blocks; b++)
        for (unsigned t = 0; t < 32; t++)
            ck_assert_msg(got[b * 32 + t] == tu_cluster_rank_of(b, cx),
                          "%s: block %u thread %u read 0x%x, clusters of %u give 0x%x", when, b,
                          t, got[b * 32 + t], cx, tu_cluster_rank_of(b, cx));
}

/* A kernel node's thread-block cluster dimension is taken when the graph is instantiated: a
 * later change of the node's attribute does not reach an exec made before, and only a new
 * instantiation launches it. cuGraphExecUpdate with the changed node is accepted; what the
 * exec then launches is not reliable: on an H200 (driver 580.159) it kept the old dimension
 * in one run and mixed the two in another (block 2 read cluster 1, 2 blocks, rank 2). So the
 * launch after it is checked on the simulated driver only, which keeps the old dimension.
 * Why a pipeline's cluster dimension is part of its signature. */
START_TEST(kernel_node_cluster_fixed_at_instantiation)
{
    if (!tu_clusters_or_skip("kernel_node_cluster_fixed_at_instantiation"))
        return;
    CUfunction rank;
    TU_OK(tu_load_cluster_rank_kernel(&rank));
    CUdeviceptr out;
    TU_OK(tu.cuMemAlloc(&out, 4 * 32 * 8));
    void *args[] = {&out};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(rank, args);
    kp.gridDimX = 8;
    kp.blockDimX = 32;
    CUgraph g;
    CUgraphNode n;
    TU_OK(gr.cuGraphCreate(&g, 0));
    TU_OK(gr.cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
    CUkernelNodeAttrValue v = cluster_of(2), back;
    TU_OK(gr.cuGraphKernelNodeSetAttribute(n, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v));
    memset(&back, 0, sizeof back);
    TU_OK(gr.cuGraphKernelNodeGetAttribute(n, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &back));
    ck_assert_uint_eq(back.clusterDim.x, 2);
    CUgraphExec e2;
    TU_OK(gr.cuGraphInstantiate(&e2, g, 0));
    TU_OK(gr.cuGraphLaunch(e2, s1));
    check_cluster_ranks(out, 8, 2, "instantiated with clusters of 2");
    v = cluster_of(4);
    TU_OK(gr.cuGraphKernelNodeSetAttribute(n, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v));
    TU_OK(tu.cuMemsetD32(out, 0, 32 * 8));
    TU_OK(gr.cuGraphLaunch(e2, s1));
    check_cluster_ranks(out, 8, 2, "the node set to 4 after the instantiation");
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    TU_OK(gr.cuGraphExecUpdate(e2, g, &info));
    ck_assert_int_eq(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
    TU_OK(tu.cuMemsetD32(out, 0, 32 * 8));
    TU_OK(gr.cuGraphLaunch(e2, s1));
    TU_OK(tu.cuCtxSynchronize());
    if (tu_fake.present)
        check_cluster_ranks(out, 8, 2, "updated to 4 after a launch (accepted, not applied)");
    CUgraphExec e4;
    TU_OK(gr.cuGraphInstantiate(&e4, g, 0));
    TU_OK(gr.cuGraphLaunch(e4, s1));
    check_cluster_ranks(out, 8, 4, "instantiated again after the change");
    TU_OK(gr.cuGraphExecDestroy(e2));
    TU_OK(gr.cuGraphExecDestroy(e4));
    TU_OK(gr.cuGraphDestroy(g));
    TU_OK(tu.cuMemFree(out));
}
END_TEST

/* A cluster dimension of 0 is refused with CUDA_ERROR_INVALID_CLUSTER_SIZE (H200, driver
 * 580.159); one that does not divide the grid (cuda.h: "must be a divisor of the grid") by
 * the attribute's set or by the instantiation, with CUDA_ERROR_INVALID_CLUSTER_SIZE on the
 * simulated driver (the H200's code for it was not seen yet: either of the two is taken). */
START_TEST(kernel_node_cluster_refusals)
{
    if (!tu_clusters_or_skip("kernel_node_cluster_refusals"))
        return;
    CUfunction rank;
    TU_OK(tu_load_cluster_rank_kernel(&rank));
    CUdeviceptr out;
    TU_OK(tu.cuMemAlloc(&out, 4 * 32 * 8));
    void *args[] = {&out};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(rank, args);
    kp.gridDimX = 8;
    kp.blockDimX = 32;
    CUgraph g;
    CUgraphNode n;
    TU_OK(gr.cuGraphCreate(&g, 0));
    TU_OK(gr.cuGraphAddKernelNode(&n, g, NULL, 0, &kp));
    CUkernelNodeAttrValue v = cluster_of(0);
    TU_EQ(gr.cuGraphKernelNodeSetAttribute(n, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v),
          CUDA_ERROR_INVALID_CLUSTER_SIZE);
    v = cluster_of(3);
    CUresult r = gr.cuGraphKernelNodeSetAttribute(n, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v);
    if (r == CUDA_SUCCESS) {
        CUgraphExec e;
        r = gr.cuGraphInstantiate(&e, g, 0);
        if (r == CUDA_SUCCESS)
            TU_OK(gr.cuGraphExecDestroy(e));
    }
    if (tu_fake.present)
        TU_EQ(r, CUDA_ERROR_INVALID_CLUSTER_SIZE);
    else
        ck_assert_msg(r == CUDA_ERROR_INVALID_CLUSTER_SIZE || r == CUDA_ERROR_INVALID_VALUE,
                      "a cluster of 3 on a grid of 8: %s", cupool_result_name(r));
    TU_OK(gr.cuGraphDestroy(g));
    TU_OK(tu.cuMemFree(out));
}
END_TEST

/* Documented: cuGraphExecUpdate refuses a kernel node that became cooperative (or stopped
 * being), and a changed priority in an exec instantiated with
 * CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY; without that flag a priority change is an
 * update like any other. The refusal names the new graph's node. */
START_TEST(exec_update_refuses_cooperative_and_node_priority_changes)
{
    CUdeviceptr p = mem + 36;
    unsigned one = 1;
    void *args[] = {&p, &one};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(k.add_u32, args);
    CUgraph g[3];
    CUgraphNode n[3];
    for (int i = 0; i < 3; i++) {
        TU_OK(gr.cuGraphCreate(&g[i], 0));
        TU_OK(gr.cuGraphAddKernelNode(&n[i], g[i], NULL, 0, &kp));
    }
    CUkernelNodeAttrValue v;
    memset(&v, 0, sizeof v);
    v.cooperative = 1;
    TU_OK(gr.cuGraphKernelNodeSetAttribute(n[1], CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v));
    memset(&v, 0, sizeof v);
    v.priority = -1;
    TU_OK(gr.cuGraphKernelNodeSetAttribute(n[2], CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    CUgraphExec e;
    CUgraphExecUpdateResultInfo info;
    TU_OK(gr.cuGraphInstantiate(&e, g[0], 0));
    memset(&info, 0, sizeof info);
    TU_EQ(gr.cuGraphExecUpdate(e, g[1], &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    ck_assert_int_eq(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED);
    ck_assert_ptr_eq(info.errorNode, n[1]);
    memset(&info, 0, sizeof info);
    TU_OK(gr.cuGraphExecUpdate(e, g[2], &info)); /* priority, without node priorities */
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(9), 1);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphInstantiate(&e, g[0], CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY));
    memset(&info, 0, sizeof info);
    TU_EQ(gr.cuGraphExecUpdate(e, g[2], &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    ck_assert_int_eq(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED);
    ck_assert_ptr_eq(info.errorNode, n[2]);
    TU_OK(gr.cuGraphLaunch(e, s1)); /* unchanged by the refusal */
    ck_assert_uint_eq(counter(9), 2);
    TU_OK(gr.cuGraphExecDestroy(e));
    for (int i = 0; i < 3; i++)
        TU_OK(gr.cuGraphDestroy(g[i]));
}
END_TEST

/* A programmatic edge (what programmatic stream serialization becomes in a graph) between two
 * kernel nodes instantiates and runs both; from a memset node it is refused (cuda.h: "may
 * only be used between kernel nodes"). */
START_TEST(programmatic_edge_between_kernels)
{
    if (!tu_clusters_or_skip("programmatic_edge_between_kernels (programmatic dependent "
                             "launch)"))
        return;
    CUdeviceptr p = mem + 40;
    unsigned two = 2, three = 3;
    void *a2[] = {&p, &two}, *a3[] = {&p, &three};
    CUDA_KERNEL_NODE_PARAMS k2 = kparams(k.add_u32, a2), k3 = kparams(k.add_u32, a3);
    CUDA_MEMSET_NODE_PARAMS mp;
    memset(&mp, 0, sizeof mp);
    mp.dst = mem + 44;
    mp.elementSize = 4;
    mp.width = 1;
    mp.height = 1;
    CUgraph g;
    CUgraphNode a, b, m;
    TU_OK(gr.cuGraphCreate(&g, 0));
    TU_OK(gr.cuGraphAddKernelNode(&a, g, NULL, 0, &k2));
    TU_OK(gr.cuGraphAddKernelNode(&b, g, NULL, 0, &k3));
    TU_OK(gr.cuGraphAddMemsetNode(&m, g, NULL, 0, &mp, tu_ctx));
    CUgraphEdgeData ed;
    memset(&ed, 0, sizeof ed);
    ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
    TU_EQ(gr.add_edges(g, &m, &b, &ed, 1), CUDA_ERROR_INVALID_VALUE);
    TU_OK(gr.add_edges(g, &a, &b, &ed, 1));
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    TU_OK(gr.cuGraphLaunch(e, s1));
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(10), 10);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST

/* cuGraphInstantiateWithParams with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD on the stream that will
 * launch it: result_out says success and the exec runs; an unknown flag is refused
 * (CUDA_GRAPH_INSTANTIATE_ERROR). Simulated driver: the upload happens at the instantiation,
 * so the first launch uploads nothing; an exec instantiated without it is uploaded by its
 * first launch, or by cuGraphUpload. */
START_TEST(instantiate_with_upload)
{
    CUgraphNode n[3];
    CUgraph g = chain(3, 12, 1, n);
    unsigned long up = tu_fake.present ? tu_fake.graph_uploads() : 0;
    unsigned long at_launch = tu_fake.present ? tu_fake.graph_launch_uploads() : 0;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    memset(&ip, 0, sizeof ip);
    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    ip.hUploadStream = s1;
    ip.result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiateWithParams(&e, g, &ip));
    ck_assert_int_eq(ip.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);
    ck_assert_ptr_null(ip.hErrNode_out);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.graph_uploads(), up + 1);
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(12), 3);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.graph_launch_uploads(), at_launch);
    TU_OK(gr.cuGraphExecDestroy(e));
    CUgraphExec plain, uploaded;
    TU_OK(gr.cuGraphInstantiate(&plain, g, 0));
    TU_OK(gr.cuGraphInstantiate(&uploaded, g, 0));
    TU_OK(gr.cuGraphUpload(uploaded, s2));
    TU_OK(gr.cuGraphLaunch(plain, s1));
    TU_OK(gr.cuGraphLaunch(uploaded, s2));
    ck_assert_uint_eq(counter(12), 9);
    if (tu_fake.present) {
        ck_assert_uint_eq(tu_fake.graph_uploads(), up + 3);
        ck_assert_uint_eq(tu_fake.graph_launch_uploads(), at_launch + 1); /* plain's */
    }
    memset(&ip, 0, sizeof ip);
    ip.flags = 1ull << 40;
    TU_EQ(gr.cuGraphInstantiateWithParams(&e, g, &ip), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(ip.result_out, CUDA_GRAPH_INSTANTIATE_ERROR);
    TU_OK(gr.cuGraphExecDestroy(plain));
    TU_OK(gr.cuGraphExecDestroy(uploaded));
    TU_OK(gr.cuGraphDestroy(g));
}
END_TEST

/* ---- conditional nodes (CUDA 12.3) ---- */

static CUfunction setter_kernel(void)
{
    CUfunction f;
    TU_OK(tu_load_cond_setter(&f));
    return f;
}

/* A graph: setter(h, v) -> conditional node `type` of `size` bodies on handle h (default dflt,
 * flags), body b: add_u32(counter slot, 1 << b). *set_node: the setter (none when setter is
 * NULL), body[b]: body b's node. */
static CUgraph cond_graph(CUfunction setter, CUgraphConditionalNodeType type, unsigned size,
                          unsigned v, unsigned dflt, unsigned flags, int slot,
                          CUgraphNode *set_node, CUgraphNode *body, CUgraphConditionalHandle *h)
{
    CUgraph g;
    CUcontext ctx;
    TU_OK(tu.cuCtxGetCurrent(&ctx));
    TU_OK(gr.cuGraphCreate(&g, 0));
    TU_OK(gr.cuGraphConditionalHandleCreate(h, g, ctx, dflt, flags));
    CUgraphNode set = NULL, cond;
    if (setter) {
        void *args[] = {h, &v};
        CUDA_KERNEL_NODE_PARAMS kp = kparams(setter, args);
        TU_OK(gr.cuGraphAddKernelNode(&set, g, NULL, 0, &kp));
    }
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = *h;
    np.conditional.type = type;
    np.conditional.size = size;
    np.conditional.ctx = ctx;
    TU_OK(gr.add_node(&cond, g, set ? &set : NULL, NULL, set ? 1 : 0, &np));
    ck_assert_ptr_nonnull(np.conditional.phGraph_out);
    CUdeviceptr p = mem + 4 * (CUdeviceptr)slot;
    for (unsigned b = 0; b < size; b++) {
        unsigned add = 1u << b;
        void *args[] = {&p, &add};
        CUDA_KERNEL_NODE_PARAMS kp = kparams(k.add_u32, args);
        TU_OK(gr.cuGraphAddKernelNode(&body[b], np.conditional.phGraph_out[b], NULL, 0, &kp));
    }
    if (set_node)
        *set_node = set;
    return g;
}

/* The setter's value in an exec, as cupool patches it. */
static void set_value(CUgraphExec e, CUgraphNode set, CUfunction setter,
                      CUgraphConditionalHandle *h, unsigned v)
{
    void *args[] = {h, &v};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(setter, args);
    TU_OK(gr.cuGraphExecKernelNodeSetParams(e, set, &kp));
}

/* What the H200 showed (driver 580.159.04): a setter kernel calling cudaGraphSetConditional
 * in front of a SWITCH of 4 bodies runs body[value], none past the last; a graph holding a
 * conditional node instantiates once only and does not clone (CUDA_ERROR_NOT_SUPPORTED);
 * body nodes are updated in the exec through the body graphs' nodes; cuGraphExecUpdate from
 * a graph built again is accepted and runs the new graph's branch. */
START_TEST(conditional_switch_picks_a_body_once_only_instantiation)
{
    CUfunction setter = setter_kernel();
    CUgraphNode set, body[4];
    CUgraphConditionalHandle h;
    CUgraph g = cond_graph(setter, CU_GRAPH_COND_TYPE_SWITCH, 4, 0, 0,
                           CU_GRAPH_COND_ASSIGN_DEFAULT, 13, &set, body, &h);
    CUgraphExec e, again;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    TU_EQ(gr.cuGraphInstantiate(&again, g, 0), CUDA_ERROR_NOT_SUPPORTED);
    CUgraph copy;
    TU_EQ(gr.cuGraphClone(&copy, g), CUDA_ERROR_NOT_SUPPORTED);
    unsigned total = 0;
    for (unsigned v = 0; v <= 5; v++) { /* 4 and 5: past the last body, nothing runs */
        set_value(e, set, setter, &h, v);
        TU_OK(gr.cuGraphLaunch(e, s1));
        total += v < 4 ? 1u << v : 0;
        ck_assert_uint_eq(counter(13), total);
    }
    /* a body node's arguments, through the body graph's node */
    CUdeviceptr p = mem + 4 * 13;
    unsigned add = 100;
    void *args[] = {&p, &add};
    CUDA_KERNEL_NODE_PARAMS kp = kparams(k.add_u32, args);
    TU_OK(gr.cuGraphExecKernelNodeSetParams(e, body[2], &kp));
    set_value(e, set, setter, &h, 2);
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(13), total + 100);
    total += 100;
    /* a graph built again (a handle of its own, value 1) updates the exec */
    CUgraphNode set2, body2[4];
    CUgraphConditionalHandle h2;
    CUgraph g2 = cond_graph(setter, CU_GRAPH_COND_TYPE_SWITCH, 4, 1, 0,
                            CU_GRAPH_COND_ASSIGN_DEFAULT, 13, &set2, body2, &h2);
    CUgraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    TU_OK(gr.cuGraphExecUpdate(e, g2, &info));
    ck_assert_int_eq(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(13), total + 2);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));
    TU_OK(gr.cuGraphDestroy(g2));
}
END_TEST

/* IF: body 0 for a nonzero value, body 1 (of two) for zero, nothing for zero with one body;
 * CU_GRAPH_COND_ASSIGN_DEFAULT without a setter: the default value at every launch. */
START_TEST(conditional_if_and_default_value)
{
    CUfunction setter = setter_kernel();
    CUgraphNode set, body[2];
    CUgraphConditionalHandle h;
    CUgraph g = cond_graph(setter, CU_GRAPH_COND_TYPE_IF, 2, 7, 0, CU_GRAPH_COND_ASSIGN_DEFAULT,
                           14, &set, body, &h);
    CUgraphExec e;
    TU_OK(gr.cuGraphInstantiate(&e, g, 0));
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(14), 1); /* nonzero: body 0 */
    set_value(e, set, setter, &h, 0);
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(14), 3); /* zero: body 1 */
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(g));

    CUgraph one = cond_graph(setter, CU_GRAPH_COND_TYPE_IF, 1, 0, 0, CU_GRAPH_COND_ASSIGN_DEFAULT,
                             14, &set, body, &h);
    TU_OK(gr.cuGraphInstantiate(&e, one, 0));
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(14), 3); /* zero, one body: nothing */
    set_value(e, set, setter, &h, 1);
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(14), 4);
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(one));

    CUgraphNode sw[4];
    CUgraph dflt = cond_graph(NULL, CU_GRAPH_COND_TYPE_SWITCH, 4, 0, 3,
                              CU_GRAPH_COND_ASSIGN_DEFAULT, 15, NULL, sw, &h);
    TU_OK(gr.cuGraphInstantiate(&e, dflt, 0));
    TU_OK(gr.cuGraphLaunch(e, s1));
    TU_OK(gr.cuGraphLaunch(e, s1));
    ck_assert_uint_eq(counter(15), 16); /* body 3 (adds 8), twice */
    TU_OK(gr.cuGraphExecDestroy(e));
    TU_OK(gr.cuGraphDestroy(dflt));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("graph");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, param_info_layout);
    tcase_add_test(tc, chain_launches_and_args_are_taken_at_add);
    tcase_add_test(tc, kernel_node_updates_args_and_function);
    tcase_add_test(tc, kernel_node_updates_launch_shape);
    tcase_add_test(tc, dag_memset_kernels_memcpy_host);
    tcase_add_test(tc, one_exec_launches_never_overlap);
    tcase_add_test(tc, exec_update_same_topology_only);
    tcase_add_test(tc, event_nodes_order_two_graphs);
    tcase_add_test(tc, capture_makes_nodes_that_replay);
    tcase_add_test(tc, dot_file_names_nodes_and_edges);
    tcase_add_test(tc, kernel_node_cluster_fixed_at_instantiation);
    tcase_add_test(tc, kernel_node_cluster_refusals);
    tcase_add_test(tc, exec_update_refuses_cooperative_and_node_priority_changes);
    tcase_add_test(tc, programmatic_edge_between_kernels);
    tcase_add_test(tc, instantiate_with_upload);
    tcase_add_test(tc, conditional_switch_picks_a_body_once_only_instantiation);
    tcase_add_test(tc, conditional_if_and_default_value);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
