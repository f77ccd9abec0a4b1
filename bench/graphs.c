/* SPDX-License-Identifier: MIT */
/*
 * cupool-bench graphs: pipelines of 1, 10 and 50 tiny kernels (add_u32 into one counter),
 * launched five ways, each timed two ways:
 *   eager        one cuLaunchKernel per kernel
 *   floor        a graph instantiated once by hand, then cuGraphLaunch: the floor
 *   floor-changed the same with every node's argument set by hand before each launch
 *                (cuGraphExecKernelNodeSetParams): the driver's own cost of a change
 *   hit          cupool_pipeline_launch of an unchanged pipeline (a cache hit, no update)
 *   hit-changed  the same with every kernel's argument changed on every launch
 *   describe+hit cupool_pipeline_reset + one cupool_pipeline_kernel per node + launch
 *   floor-filled the floor's launch after a hand-written fill of the nodes' parameters, a call
 *                per node (as "(calls)" below): the floor of describe+hit, each in the same
 *                interleaved run, so both pay the same cold caches after the synchronisation
 *   miss         the graph cache emptied by cupool_trim() before every launch (build,
 *                instantiate, launch)
 * "host" is the CPU time of the launch call(s) alone, each launch followed by an untimed
 * cuStreamSynchronize so the launch queue never fills (with thousands of back-to-back
 * launches the host ends up waiting for the GPU, which hides the cost being measured);
 * "end to end" is launch plus synchronisation. Figures are medians of per-launch times; the
 * ways take turns launch by launch (each on its own stream), so drift affects them alike.
 * Then the graph cache's alternations, each beside its hand-built floor in the same run (the
 * two take turns in blocks of at least 32 launches; host time per launch, each followed by an
 * untimed synchronisation), with the ratio:
 *   signatures   S = 1, 2, 4, 8, 16, 64 pipelines of 8 kernels, each of its own structure
 *                (which nodes add and which set), launched in turn on one stream, against
 *                the same S graphs instantiated by hand and their execs launched in turn
 *   streams      one pipeline of 10 kernels launched on K = 1, 2, 4, 8, 12 streams in turn,
 *                against K execs of the same graph, each launched on its own stream
 *   describe     cupool_pipeline_reset + one cupool_pipeline_kernel per node (the per-request
 *                description, unchanged), against a hand-written fill of the same node arrays
 *                (CUDA_KERNEL_NODE_PARAMS, kernelParams, the argument values copied), N = 1,
 *                10, 50; and describe+hit minus hit, per node, with its floor (floor-filled
 *                minus floor), from a run of those four ways and floor+ctxid alone: 20x the
 *                launches at N = 1, 4x at N = 10 and 50, the interquartile mean of each
 *                round's difference; from the same rounds, hit minus floor over the floor's
 *                own interquartile mean ("paired"): the first table's ratio of two medians
 *                moved by up to 5 points between runs on one VM, more than cupool's share of
 *                it; and hit minus floor+ctxid (cuCtxGetId(NULL), then the floor's launch: the
 *                one driver call a hit adds, to know the current context)
 * The share of launches claimed without the cache lock is printed beside each.
 * Then 8 threads on 8 streams launch one signature whose kernel runs 2 ms, against one
 * stream doing the same: aggregate kernels per second.
 * Then 4 variants of a one-kernel pipeline as one pipeline with a SWITCH node (its branch
 * chosen per launch) against the 4 variants as pipelines of their own and a warm hit of one,
 * beside the same SWITCH graph by hand (the driver's own cost of a conditional graph), every
 * SWITCH launch checked value by value, and the cache bytes of each way (switch_bench).
 * Then the first launch of a new exec of 10 kernels (each way in turn, a fresh exec per
 * sample): by hand, instantiated with cuGraphInstantiateWithFlags (the first cuGraphLaunch
 * uploads it) and with cuGraphInstantiateWithParams uploading on the launch stream
 * (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD), the instantiation, the first launch's host time and
 * launch + cuStreamSynchronize each timed; a warm exec's launch (the floor); cupool's miss
 * (cupool_trim() first: describe-time build, clone, instantiate, launch in one call) with
 * this process's CUPOOL_GRAPH_UPLOAD and, from a second run of this program (the setting is
 * read once per process), with the other; a warm hit.
 * With a FILE for JSON (cupool_bench_graphs_json), the same figures go there as one JSON
 * object instead of the tables.
 */
#define _GNU_SOURCE
#include <cupool.h>

#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/kernels.h"

static struct {
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuGraphCreate)(CUgraph *, unsigned int);
    CUresult (*cuGraphAddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                     const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphInstantiateWithParams)(CUgraphExec *, CUgraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuCtxGetId)(CUcontext, unsigned long long *);
    CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                               const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphDestroy)(CUgraph);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuGraphConditionalHandleCreate)(CUgraphConditionalHandle *, CUgraph, CUcontext,
                                               unsigned int, unsigned int);
    CUresult (*cuGraphAddNode)(CUgraphNode *, CUgraph, const CUgraphNode *,
                               const CUgraphEdgeData *, size_t, CUgraphNodeParams *);
} g;

static CUfunction add_u32, set_u32, spin;
static CUdeviceptr counter;
static CUcontext bench_ctx;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void check(const char *what, CUresult r)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cupool-bench graphs: %s: %s (%s)\n", what, cupool_result_name(r),
                cupool_error_string());
        exit(1);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum way {
    W_EAGER,
    W_FLOOR,
    W_FLOOR_CHANGED,
    W_HIT,
    W_HIT_CHANGED,
    W_DESCRIBE,
    W_FLOOR_FILLED,
    W_FLOOR_CTX, /* the floor after cuCtxGetId(NULL): the driver call a hit cannot avoid */
    W_MISS,
    W_COUNT
};
static const char *const way_names[W_COUNT] = {"eager",        "floor",       "floor-changed",
                                               "hit",          "hit-changed", "describe+hit",
                                               "floor-filled", "floor+ctxid", "miss"};
static void hand_fill_calls(int n, unsigned base); /* describing by hand, below */

static void describe(cupool_pipeline_t p, int n, unsigned base)
{
    check("reset", cupool_pipeline_reset(p));
    for (int i = 0; i < n; i++) {
        unsigned v = base + (unsigned)i;
        void *args[] = {&counter, &v};
        check("kernel", cupool_pipeline_kernel(p, add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
}

/* One way of launching, with its own stream (so the cupool ways, which share a signature,
 * each keep an exec of their own, as separate services would). */
struct way_run {
    enum way w;
    int n;
    CUstream s;
    CUgraph graph;
    CUgraphExec exec;
    CUgraphNode nodes[64];
    cupool_pipeline_t p;
    double *h, *e; /* per-launch host and end-to-end ns */
};

static unsigned one = 1;
static void *one_args[] = {&counter, &one};
static CUstream g_sync_stream; /* the describe figures' one launch */

static void way_setup(struct way_run *r, enum way w, int n, int iters)
{
    memset(r, 0, sizeof(*r));
    r->w = w;
    r->n = n;
    r->h = malloc(sizeof(double) * (size_t)iters);
    r->e = malloc(sizeof(double) * (size_t)iters);
    check("stream", g.cuStreamCreate(&r->s, CU_STREAM_NON_BLOCKING));
    if (w == W_FLOOR || w == W_FLOOR_CHANGED || w == W_FLOOR_FILLED || w == W_FLOOR_CTX) {
        CUgraphNode *nodes = r->nodes;
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof kp);
        kp.func = add_u32;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = one_args;
        check("cuGraphCreate", g.cuGraphCreate(&r->graph, 0));
        for (int i = 0; i < n; i++)
            check("cuGraphAddKernelNode", g.cuGraphAddKernelNode(&nodes[i], r->graph,
                                                                 i ? &nodes[i - 1] : NULL,
                                                                 i ? 1 : 0, &kp));
        check("instantiate", g.cuGraphInstantiateWithFlags(&r->exec, r->graph, 0));
    } else if (w != W_EAGER) {
        check("pipeline", cupool_pipeline_create(&r->p));
        describe(r->p, n, 1);
        check("warm launch", cupool_pipeline_launch(r->p, r->s));
        check("sync", g.cuStreamSynchronize(r->s));
    }
}

/* One timed launch (it < 0: a warm-up, not recorded). */
static void way_step(struct way_run *r, int it)
{
    if (r->w == W_HIT_CHANGED)
        describe(r->p, r->n, it % 2 ? 1 : 1000); /* every argument differs from the last launch */
    if (r->w == W_MISS)
        check("cupool_trim", cupool_trim()); /* drops the cached graph: the next is a miss */
    double t0 = now_ns();
    switch (r->w) {
    case W_EAGER:
        for (int i = 0; i < r->n; i++)
            check("cuLaunchKernel",
                  g.cuLaunchKernel(add_u32, 1, 1, 1, 1, 1, 1, 0, r->s, one_args, NULL));
        break;
    case W_FLOOR_CHANGED: { /* by hand: every node's argument set, then the launch */
        unsigned v = it % 2 ? 1 : 1000;
        void *args[] = {&counter, &v};
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof kp);
        kp.func = add_u32;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = args;
        for (int i = 0; i < r->n; i++)
            check("cuGraphExecKernelNodeSetParams",
                  g.cuGraphExecKernelNodeSetParams(r->exec, r->nodes[i], &kp));
    }
        /* fall through */
    case W_FLOOR:
        check("cuGraphLaunch", g.cuGraphLaunch(r->exec, r->s));
        break;
    case W_FLOOR_CTX: { /* the current context's id, as a hit asks for it, then the floor */
        unsigned long long id;
        check("cuCtxGetId", g.cuCtxGetId(NULL, &id));
        check("cuGraphLaunch", g.cuGraphLaunch(r->exec, r->s));
        break;
    }
    case W_FLOOR_FILLED: /* by hand: the request's parameters filled, a call per node */
        hand_fill_calls(r->n, 1);
        check("cuGraphLaunch", g.cuGraphLaunch(r->exec, r->s));
        break;
    case W_DESCRIBE:
        describe(r->p, r->n, 1);
        /* fall through */
    default:
        check("cupool_pipeline_launch", cupool_pipeline_launch(r->p, r->s));
        break;
    }
    double t1 = now_ns();
    check("sync", g.cuStreamSynchronize(r->s));
    double t2 = now_ns();
    if (it >= 0) {
        r->h[it] = t1 - t0;
        r->e[it] = t2 - t0;
    }
}

/* End to end per launch in a stream of `count` back-to-back launches and one synchronisation:
 * the steady state of a service launching repeatedly (CPU and GPU overlap). */
static double way_stream(struct way_run *r, int count)
{
    double t0 = now_ns();
    for (int i = 0; i < count; i++) {
        if (r->w == W_EAGER)
            for (int k = 0; k < r->n; k++)
                check("cuLaunchKernel",
                      g.cuLaunchKernel(add_u32, 1, 1, 1, 1, 1, 1, 0, r->s, one_args, NULL));
        else if (r->w == W_FLOOR)
            check("cuGraphLaunch", g.cuGraphLaunch(r->exec, r->s));
        else
            check("cupool_pipeline_launch", cupool_pipeline_launch(r->p, r->s));
    }
    check("sync", g.cuStreamSynchronize(r->s));
    return (now_ns() - t0) / count;
}

static void way_finish(struct way_run *r, int iters, double *host, double *e2e)
{
    *host = median(r->h, iters);
    *e2e = median(r->e, iters);
    if (r->exec)
        g.cuGraphExecDestroy(r->exec);
    if (r->graph)
        g.cuGraphDestroy(r->graph);
    if (r->p)
        cupool_pipeline_destroy(r->p);
    free(r->h);
    free(r->e);
}

/* Per-launch host and end-to-end times (ns, medians) of every way for pipelines of n kernels.
 * The ways other than the miss take turns launch by launch, in a rotating order, so that a
 * drift in clocks or load affects them alike; the miss (which empties the cache) runs alone. */
static void time_ways(int n, int iters, double *host, double *e2e, double *streamed)
{
    struct way_run r[W_COUNT];
    for (int w = 0; w < W_MISS; w++)
        way_setup(&r[w], (enum way)w, n, iters);
    for (int it = -3; it < iters; it++) /* three untimed warm-up rounds */
        for (int k = 0; k < W_MISS; k++)
            way_step(&r[(k + (it + 3)) % W_MISS], it);
    /* streamed: eager, floor and hit, in turns, median of 5 streams of `iters` launches */
    static const enum way sw[3] = {W_EAGER, W_FLOOR, W_HIT};
    double v[3][5];
    for (int rep = 0; rep < 5; rep++)
        for (int k = 0; k < 3; k++)
            v[k][rep] = way_stream(&r[sw[k]], iters);
    for (int k = 0; k < 3; k++)
        streamed[k] = median(v[k], 5);
    for (int w = 0; w < W_MISS; w++)
        way_finish(&r[w], iters, &host[w], &e2e[w]);
    int miss_iters = iters / 10 + 5;
    way_setup(&r[W_MISS], W_MISS, n, miss_iters);
    for (int it = -3; it < miss_iters; it++)
        way_step(&r[W_MISS], it);
    way_finish(&r[W_MISS], miss_iters, &host[W_MISS], &e2e[W_MISS]);
}

/* ---- alternations: S signatures on one stream, one signature on K streams ---- */

#define ALT_NODES 8    /* kernels per signature of the S alternation */
#define STREAM_NODES 10 /* kernels of the K-stream signature */
#define MAX_ALT 64

/* Node i of signature k: set_u32 where bit i of k is set, add_u32 elsewhere (distinct
 * structures for k < 256; the arguments are the same). */
static CUfunction alt_fn(int k, int i)
{
    return (k >> i) & 1 ? set_u32 : add_u32;
}

static void alt_describe(cupool_pipeline_t p, int k, int n)
{
    check("reset", cupool_pipeline_reset(p));
    for (int i = 0; i < n; i++)
        check("kernel",
              cupool_pipeline_kernel(p, alt_fn(k, i), 1, 1, 1, 1, 1, 1, 0, one_args, NULL));
}

/* The same structure built by hand and instantiated. */
static CUgraphExec alt_exec(int k, int n, CUgraph *graph)
{
    CUgraphNode nodes[64];
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = one_args;
    check("cuGraphCreate", g.cuGraphCreate(graph, 0));
    for (int i = 0; i < n; i++) {
        kp.func = alt_fn(k, i);
        check("cuGraphAddKernelNode",
              g.cuGraphAddKernelNode(&nodes[i], *graph, i ? &nodes[i - 1] : NULL, i ? 1 : 0, &kp));
    }
    CUgraphExec exec;
    check("instantiate", g.cuGraphInstantiateWithFlags(&exec, *graph, 0));
    return exec;
}

/* One timed launch, then an untimed synchronisation: host ns. */
static double timed_launch(cupool_pipeline_t p, CUgraphExec exec, CUstream s)
{
    double t0 = now_ns();
    if (p)
        check("cupool_pipeline_launch", cupool_pipeline_launch(p, s));
    else
        check("cuGraphLaunch", g.cuGraphLaunch(exec, s));
    double t1 = now_ns();
    check("sync", g.cuStreamSynchronize(s));
    return t1 - t0;
}

struct alt_result {
    int count;              /* S or K */
    double cupool, floor;   /* host ns per launch, medians */
    double lock_free;       /* share of cupool's launches claimed without the cache lock */
};

/* `ways` launch slots taken in turn: slot j launches p[j % np] (cupool) on s[j % ns], or
 * exec[j % nx] by hand on s[j % ns]. cupool and the floor alternate in blocks of at least 32
 * launches (whole turns), `samples` launches each at least, after a warm-up turn of each. */
static void alternate(cupool_pipeline_t *p, int np, CUgraphExec *exec, int nx, CUstream *s,
                      int ns, int ways, int samples, struct alt_result *out)
{
    int block = ways * ((32 + ways - 1) / ways);
    int total = block * ((samples + block - 1) / block);
    double *c = malloc(sizeof(double) * (size_t)total), *h = malloc(sizeof(double) * (size_t)total);
    for (int j = 0; j < 2 * ways; j++) { /* warm: every exec instantiated, every hint taken */
        timed_launch(p[j % np], NULL, s[j % ns]);
        timed_launch(NULL, exec[j % nx], s[j % ns]);
    }
    cupool_graph_stats_t a = CUPOOL_GRAPH_STATS_INIT, b = CUPOOL_GRAPH_STATS_INIT;
    uint64_t locked = 0, free_ = 0;
    for (int done = 0; done < total; done += block) {
        check("stats", cupool_graph_stats_get(&a));
        for (int j = 0; j < block; j++)
            c[done + j] = timed_launch(p[j % np], NULL, s[j % ns]);
        check("stats", cupool_graph_stats_get(&b));
        locked += b.claims_locked - a.claims_locked;
        free_ += b.claims_lock_free - a.claims_lock_free;
        for (int j = 0; j < block; j++)
            h[done + j] = timed_launch(NULL, exec[j % nx], s[j % ns]);
    }
    out->cupool = median(c, total);
    out->floor = median(h, total);
    out->lock_free = locked + free_ ? (double)free_ / (double)(locked + free_) : 0;
    free(c);
    free(h);
}

/* S pipelines of ALT_NODES kernels, each of its own structure, in turn on one stream. */
static void alt_signatures(int S, int samples, struct alt_result *out)
{
    cupool_pipeline_t p[MAX_ALT];
    CUgraph graph[MAX_ALT];
    CUgraphExec exec[MAX_ALT];
    CUstream s;
    check("cupool_trim", cupool_trim()); /* no exec of an earlier figure's streams */
    check("stream", g.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int k = 0; k < S; k++) {
        check("pipeline", cupool_pipeline_create(&p[k]));
        alt_describe(p[k], k, ALT_NODES);
        exec[k] = alt_exec(k, ALT_NODES, &graph[k]);
    }
    out->count = S;
    alternate(p, S, exec, S, &s, 1, S, samples, out);
    for (int k = 0; k < S; k++) {
        cupool_pipeline_destroy(p[k]);
        g.cuGraphExecDestroy(exec[k]);
        g.cuGraphDestroy(graph[k]);
    }
    check("sync", g.cuStreamSynchronize(s));
    g.cuStreamDestroy(s);
}

/* One pipeline of STREAM_NODES kernels on K streams in turn, against K execs of one graph,
 * exec k on stream k. */
static void alt_streams(int K, int samples, struct alt_result *out)
{
    cupool_pipeline_t p;
    CUgraph graph;
    CUgraphExec exec[MAX_ALT];
    CUstream s[MAX_ALT];
    check("cupool_trim", cupool_trim()); /* no exec of an earlier figure's streams */
    check("pipeline", cupool_pipeline_create(&p));
    describe(p, STREAM_NODES, 1);
    exec[0] = alt_exec(0, STREAM_NODES, &graph); /* add_u32 only: the pipeline's structure */
    for (int k = 1; k < K; k++)
        check("instantiate", g.cuGraphInstantiateWithFlags(&exec[k], graph, 0));
    for (int k = 0; k < K; k++)
        check("stream", g.cuStreamCreate(&s[k], CU_STREAM_NON_BLOCKING));
    out->count = K;
    alternate(&p, 1, exec, K, s, K, K, samples, out);
    cupool_pipeline_destroy(p);
    for (int k = 0; k < K; k++) {
        g.cuGraphExecDestroy(exec[k]);
        check("sync", g.cuStreamSynchronize(s[k]));
        g.cuStreamDestroy(s[k]);
    }
    g.cuGraphDestroy(graph);
}

/* ---- describing per request: cupool's description against a hand-written fill ---- */

/* What a hand-written program fills per request for the same nodes: each kernel's
 * parameters, its kernelParams array, and the argument values copied (as cuLaunchKernel and
 * cupool_pipeline_kernel copy them). */
static struct {
    CUDA_KERNEL_NODE_PARAMS kp[64];
    void *argv[64][2];
    struct {
        CUdeviceptr p;
        unsigned v;
    } val[64];
} hand;

static void hand_fill(int n, unsigned base)
{
    for (int i = 0; i < n; i++) {
        unsigned v = base + (unsigned)i;
        hand.val[i].p = counter;
        hand.val[i].v = v;
        hand.argv[i][0] = &hand.val[i].p;
        hand.argv[i][1] = &hand.val[i].v;
        CUDA_KERNEL_NODE_PARAMS *kp = &hand.kp[i];
        memset(kp, 0, sizeof(*kp));
        kp->func = add_u32;
        kp->gridDimX = kp->gridDimY = kp->gridDimZ = 1;
        kp->blockDimX = kp->blockDimY = kp->blockDimZ = 1;
        kp->kernelParams = hand.argv[i];
    }
    __asm__ volatile("" ::: "memory"); /* the arrays are used */
}

/* The same fill for one node, from what cupool_pipeline_kernel takes (the function, the
 * launch shape, the argument pointers): a call per node, as the description makes. */
static __attribute__((noinline)) void hand_node(int i, CUfunction f, unsigned gx, unsigned gy,
                                                unsigned gz, unsigned bx, unsigned by,
                                                unsigned bz, unsigned shmem, void **args)
{
    memcpy(&hand.val[i].p, args[0], sizeof(hand.val[i].p));
    memcpy(&hand.val[i].v, args[1], sizeof(hand.val[i].v));
    hand.argv[i][0] = &hand.val[i].p;
    hand.argv[i][1] = &hand.val[i].v;
    CUDA_KERNEL_NODE_PARAMS *kp = &hand.kp[i];
    memset(kp, 0, sizeof(*kp));
    kp->func = f;
    kp->gridDimX = gx, kp->gridDimY = gy, kp->gridDimZ = gz;
    kp->blockDimX = bx, kp->blockDimY = by, kp->blockDimZ = bz;
    kp->sharedMemBytes = shmem;
    kp->kernelParams = hand.argv[i];
}

static void hand_fill_calls(int n, unsigned base)
{
    for (int i = 0; i < n; i++) {
        unsigned v = base + (unsigned)i;
        void *args[] = {&counter, &v};
        hand_node(i, add_u32, 1, 1, 1, 1, 1, 1, 0, args);
    }
    __asm__ volatile("" ::: "memory");
}

struct describe_result {
    int n;
    double hand, hand_calls, cupool; /* ns per description of n kernels, medians: the fill
                                        inline, the fill a call per node, cupool's */
    double over_hit;       /* describe+hit minus hit, per node, ns (describe_over) */
    double fill_over_floor; /* its floor: floor-filled minus floor, per node, ns (the same) */
    double hit_minus_floor; /* hit minus floor, per launch, ns (the same rounds) */
    double floor_mid;       /* the floor's own interquartile mean, ns per launch */
    double hit_minus_floor_ctx; /* hit minus floor+ctxid, per launch, ns (the same rounds) */
    double floor_ctx_mid;       /* floor+ctxid's own interquartile mean, ns per launch */
    int over_samples;       /* launches per way behind those four */
};

/* The mean of the middle half of v (sorted in place): the interquartile mean, a location that
 * outliers do not move and that, unlike the median, does not jump between the modes of a
 * distribution whose centre is sparse (a VM that runs at two speeds). */
static double mid_mean(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    int lo = n / 4, hi = n - n / 4;
    double sum = 0;
    for (int i = lo; i < hi; i++)
        sum += v[i];
    return hi > lo ? sum / (hi - lo) : median(v, n);
}

/*
 * describe+hit minus hit, and its floor (floor-filled minus floor), per node (ns), from a run
 * of those four ways and floor+ctxid alone, in turns launch by launch, `samples` launches each: the
 * interquartile mean of the rounds' differences. The difference is small beside the launch
 * it rides on (about 13 ns of describing on a ~2 us launch at N = 1), so it takes many more
 * launches than the first table's figures: from that table's 1,000 launches per way, the
 * difference of the two medians moved between 16 and 53 ns from run to run on one H200.
 */
static void describe_over(int n, int samples, struct describe_result *out)
{
    static const enum way ws[5] = {W_HIT, W_DESCRIBE, W_FLOOR, W_FLOOR_FILLED, W_FLOOR_CTX};
    struct way_run r[5];
    for (int k = 0; k < 5; k++)
        way_setup(&r[k], ws[k], n, samples);
    for (int it = -3; it < samples; it++)
        for (int k = 0; k < 5; k++)
            way_step(&r[(k + (it + 3)) % 5], it);
    double *d = malloc(sizeof(double) * (size_t)samples),
           *f = malloc(sizeof(double) * (size_t)samples),
           *h = malloc(sizeof(double) * (size_t)samples),
           *hc = malloc(sizeof(double) * (size_t)samples);
    for (int it = 0; it < samples; it++) {
        d[it] = r[1].h[it] - r[0].h[it];
        f[it] = r[3].h[it] - r[2].h[it];
        h[it] = r[0].h[it] - r[2].h[it];
        hc[it] = r[0].h[it] - r[4].h[it];
    }
    out->over_hit = mid_mean(d, samples) / n;
    out->fill_over_floor = mid_mean(f, samples) / n;
    out->hit_minus_floor = mid_mean(h, samples);
    out->hit_minus_floor_ctx = mid_mean(hc, samples);
    out->floor_ctx_mid = mid_mean(r[4].h, samples);
    out->floor_mid = mid_mean(r[2].h, samples); /* sorts the floor's times: read last */
    free(d);
    free(f);
    free(h);
    free(hc);
    for (int k = 0; k < 5; k++) {
        double host, e2e;
        way_finish(&r[k], samples, &host, &e2e);
    }
}

/* ns per description, medians of `samples` batches (each long enough for the timer not to
 * matter), the two taking turns batch by batch. */
static void describe_cost(int n, int samples, struct describe_result *out)
{
    cupool_pipeline_t p;
    check("pipeline", cupool_pipeline_create(&p));
    describe(p, n, 1);
    check("launch", cupool_pipeline_launch(p, g_sync_stream));
    check("sync", g.cuStreamSynchronize(g_sync_stream));
    int reps = 2000 / n + 20;
    double *c = malloc(sizeof(double) * (size_t)samples);
    double *h = malloc(sizeof(double) * (size_t)samples);
    double *hc = malloc(sizeof(double) * (size_t)samples);
    for (int it = -3; it < samples; it++) {
        double t0 = now_ns();
        for (int r = 0; r < reps; r++)
            hand_fill(n, 1);
        double t1 = now_ns();
        for (int r = 0; r < reps; r++)
            hand_fill_calls(n, 1);
        double t2 = now_ns();
        for (int r = 0; r < reps; r++)
            describe(p, n, 1);
        double t3 = now_ns();
        if (it >= 0) {
            h[it] = (t1 - t0) / reps;
            hc[it] = (t2 - t1) / reps;
            c[it] = (t3 - t2) / reps;
        }
    }
    out->n = n;
    out->hand = median(h, samples);
    out->hand_calls = median(hc, samples);
    out->cupool = median(c, samples);
    free(c);
    free(h);
    free(hc);
    cupool_pipeline_destroy(p);
}

/* ---- concurrency: one signature on several streams ---- */

struct spinner {
    pthread_t t;
    CUstream s;
    int launches;
    _Atomic int done;  /* launches made so far */
    _Atomic int stage; /* 0 before the barrier, 1 launching, 2 synchronising, 3 finished */
    int by_hand; /* a graph and exec of its own, launched with cuGraphLaunch: the control */
    pthread_barrier_t *start;
    double t_start;                 /* ns: past the start barrier (by hand 3: instantiated) */
    double t_first, t_last, t_sync; /* ns: first and last launch returned, synchronised */
    double slowest;                 /* ns: the slowest launch call */
    int slowest_i;
};

static unsigned long long spin_ns = 2000000;
static int print_timeline; /* --timeline */
static CUgraph shared_graph; /* by_hand == 2: every thread's exec from this one graph */
static pthread_mutex_t shared_graph_lock = PTHREAD_MUTEX_INITIALIZER;

/* A spinner's launches, by hand (exec) or through cupool (p), then its synchronisation,
 * with the times of each stage. */
static void spin_launches(struct spinner *sp, CUgraphExec exec, cupool_pipeline_t p)
{
    sp->t_start = now_ns();
    sp->stage = 1;
    for (int i = 0; i < sp->launches; i++) {
        double l0 = now_ns();
        if (p)
            check("launch", cupool_pipeline_launch(p, sp->s));
        else
            check("cuGraphLaunch", g.cuGraphLaunch(exec, sp->s));
        double l1 = now_ns();
        if (l1 - l0 > sp->slowest)
            sp->slowest = l1 - l0, sp->slowest_i = i;
        if (i == 0)
            sp->t_first = l1;
        sp->done++;
    }
    sp->t_last = now_ns();
    sp->stage = 2;
    check("sync", g.cuStreamSynchronize(sp->s));
    sp->t_sync = now_ns();
    sp->stage = 3;
}

static void *spin_thread(void *arg)
{
    struct spinner *sp = arg;
    g.cuCtxSetCurrent(bench_ctx);
    void *args[] = {&spin_ns};
    if (sp->by_hand) {
        CUgraph graph;
        CUgraphNode node;
        CUgraphExec exec;
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof kp);
        kp.func = spin;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = args;
        if (sp->by_hand == 3) /* instantiate after the start, as a cache miss would */
            pthread_barrier_wait(sp->start);
        pthread_mutex_lock(&shared_graph_lock);
        if (sp->by_hand == 2 && !shared_graph) {
            check("cuGraphCreate", g.cuGraphCreate(&shared_graph, 0));
            check("cuGraphAddKernelNode",
                  g.cuGraphAddKernelNode(&node, shared_graph, NULL, 0, &kp));
        }
        if (sp->by_hand == 2) {
            graph = NULL;
            check("instantiate", g.cuGraphInstantiateWithFlags(&exec, shared_graph, 0));
        } else {
            check("cuGraphCreate", g.cuGraphCreate(&graph, 0));
            check("cuGraphAddKernelNode", g.cuGraphAddKernelNode(&node, graph, NULL, 0, &kp));
            check("instantiate", g.cuGraphInstantiateWithFlags(&exec, graph, 0));
        }
        pthread_mutex_unlock(&shared_graph_lock);
        if (sp->by_hand != 3)
            pthread_barrier_wait(sp->start);
        spin_launches(sp, exec, NULL);
        g.cuGraphExecDestroy(exec);
        if (graph)
            g.cuGraphDestroy(graph);
        return NULL;
    }
    cupool_pipeline_t p;
    check("pipeline", cupool_pipeline_create(&p));
    check("kernel", cupool_pipeline_kernel(p, spin, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    pthread_barrier_wait(sp->start);
    spin_launches(sp, NULL, p);
    cupool_pipeline_destroy(p);
    return NULL;
}

/* Kernels per second with `threads` threads, each on its own stream. */
static double throughput(int threads, int launches, int by_hand)
{
    struct spinner sp[8];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        check("stream", g.cuStreamCreate(&sp[i].s, CU_STREAM_NON_BLOCKING));
        sp[i].launches = launches;
        sp[i].by_hand = by_hand;
        sp[i].done = 0;
        sp[i].stage = 0;
        sp[i].slowest = 0;
        sp[i].slowest_i = -1;
        sp[i].start = &start;
        pthread_create(&sp[i].t, NULL, spin_thread, &sp[i]);
    }
    pthread_barrier_wait(&start);
    double t0 = now_ns();
    /* a run that should take 0.1 s and has not ended in 20 s: say where each thread is */
    for (int waited = 0; waited < 20000; waited += 10) {
        int finished = 0;
        for (int i = 0; i < threads; i++)
            finished += sp[i].stage == 3;
        if (finished == threads)
            break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        if (waited + 10 >= 20000) {
            fprintf(stderr, "cupool-bench graphs: %d-thread run (%s) not done after 20 s:\n",
                    threads, by_hand ? "by hand" : "cupool");
            for (int i = 0; i < threads; i++)
                fprintf(stderr, "  thread %d: stage %d, %d launches\n", i, sp[i].stage,
                        sp[i].done);
            cupool_stats_print(stderr);
        }
    }
    for (int i = 0; i < threads; i++)
        pthread_join(sp[i].t, NULL);
    /* from the first thread past the start to the last synchronisation (the watchdog's
     * 10 ms polling would round the end up) */
    double end = t0;
    for (int i = 0; i < threads; i++) {
        end = sp[i].t_sync > end ? sp[i].t_sync : end;
        t0 = by_hand != 3 && sp[i].t_start < t0 ? sp[i].t_start : t0;
    }
    double t = end - t0;
    pthread_barrier_destroy(&start);
    if (print_timeline) { /* when each thread's launches returned, ms */
        static const char *const how[4] = {"cupool", "by hand, a graph per thread",
                                           "by hand, one graph", "by hand, instantiated after "
                                                                 "the start"};
        fprintf(stderr, "timeline (%s, %d threads), ms from the start: first launch, last "
                        "launch, synchronised:\n", how[by_hand], threads);
        for (int i = 0; i < threads; i++)
            fprintf(stderr, "  thread %d: %8.3f %8.3f %8.3f (slowest launch: #%d, %.3f ms)\n", i,
                    (sp[i].t_first - t0) / 1e6, (sp[i].t_last - t0) / 1e6,
                    (sp[i].t_sync - t0) / 1e6, sp[i].slowest_i, sp[i].slowest / 1e6);
    }

    return threads * launches / (t / 1e9);
}


/* ---- the first launch of a new exec: upload at instantiation ---- */

#define FIRST_NODES 10
/* Set in the environment of the second run: it measures cupool's first launches only and
 * prints them on one line (first_launch_other). Not a CUPOOL_ name: cupool reads those. */
#define FIRST_ONLY_ENV "CUPOOLBENCH_FIRST_LAUNCH_ONLY"

enum fl_way { FL_HAND, FL_HAND_UPLOAD, FL_FLOOR, FL_MISS, FL_HIT, FL_COUNT };
static const char *const fl_names[FL_COUNT] = {
    "by hand, no upload", "by hand, upload at instantiation", "floor: a warm exec",
    "cupool miss", "cupool hit"};
static const char *const fl_keys[FL_COUNT] = {"hand_no_upload", "hand_upload", "floor",
                                              "cupool_miss", "cupool_hit"};

struct first_result {
    int samples;
    /* medians (ns): the instantiation by hand; the launch call (cupool's miss: the whole
     * call, build and instantiation included); launch + cuStreamSynchronize */
    double inst[FL_COUNT], launch[FL_COUNT], e2e[FL_COUNT];
    int have_way[FL_COUNT];
    int upload;                        /* this process's CUPOOL_GRAPH_UPLOAD, as seen */
    int other_ok;                      /* the second run's figures came back */
    double other_launch, other_e2e;    /* cupool's miss with the other setting */
};

static CUgraph first_graph(void)
{
    CUgraph graph;
    CUgraphNode nodes[FIRST_NODES];
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = add_u32;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = one_args;
    check("cuGraphCreate", g.cuGraphCreate(&graph, 0));
    for (int i = 0; i < FIRST_NODES; i++)
        check("cuGraphAddKernelNode", g.cuGraphAddKernelNode(&nodes[i], graph,
                                                             i ? &nodes[i - 1] : NULL,
                                                             i ? 1 : 0, &kp));
    return graph;
}

/* Each way once (it: the sample), timed into inst/launch/e2e[way][it]. */
static void first_step(enum fl_way w, int it, CUstream s, CUgraph graph, CUgraphExec warm,
                       cupool_pipeline_t p, double *inst, double *launch, double *e2e)
{
    CUgraphExec e = NULL;
    double t0 = now_ns(), t1 = t0;
    switch (w) {
    case FL_HAND:
        check("cuGraphInstantiateWithFlags", g.cuGraphInstantiateWithFlags(&e, graph, 0));
        t1 = now_ns();
        break;
    case FL_HAND_UPLOAD: {
        CUDA_GRAPH_INSTANTIATE_PARAMS ip;
        memset(&ip, 0, sizeof ip);
        ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
        ip.hUploadStream = s;
        check("cuGraphInstantiateWithParams", g.cuGraphInstantiateWithParams(&e, graph, &ip));
        t1 = now_ns();
        break;
    }
    case FL_MISS:
        check("cupool_trim", cupool_trim()); /* the next launch is a miss */
        t0 = t1 = now_ns();
        break;
    case FL_HIT: /* re-cached, untimed, when a miss's trim dropped it */
        check("cupool_pipeline_launch", cupool_pipeline_launch(p, s));
        check("sync", g.cuStreamSynchronize(s));
        t0 = t1 = now_ns();
        break;
    default:
        break;
    }
    double t2;
    if (w == FL_MISS || w == FL_HIT) {
        check("cupool_pipeline_launch", cupool_pipeline_launch(p, s));
        t2 = now_ns();
    } else {
        check("cuGraphLaunch", g.cuGraphLaunch(e ? e : warm, s));
        t2 = now_ns();
    }
    check("sync", g.cuStreamSynchronize(s));
    double t3 = now_ns();
    inst[it] = t1 - t0;
    launch[it] = t2 - t1;
    e2e[it] = t3 - t1;
    if (e)
        check("cuGraphExecDestroy", g.cuGraphExecDestroy(e));
}

/* The first launches of new execs, `samples` of each way, the ways taking turns; only
 * cupool's miss and hit with cupool_only (the second run). */
static void first_launch(int samples, int cupool_only, struct first_result *r)
{
    memset(r, 0, sizeof(*r));
    r->samples = samples;
    for (int w = 0; w < FL_COUNT; w++)
        r->have_way[w] = !cupool_only || w == FL_MISS || w == FL_HIT;
    if (!g.cuGraphInstantiateWithParams)
        r->have_way[FL_HAND_UPLOAD] = 0;
    CUstream s[FL_COUNT];
    for (int w = 0; w < FL_COUNT; w++)
        check("stream", g.cuStreamCreate(&s[w], CU_STREAM_NON_BLOCKING));
    CUgraph graph = first_graph();
    CUgraphExec warm = NULL;
    if (r->have_way[FL_FLOOR]) {
        check("instantiate", g.cuGraphInstantiateWithFlags(&warm, graph, 0));
        check("warm launch", g.cuGraphLaunch(warm, s[FL_FLOOR]));
        check("sync", g.cuStreamSynchronize(s[FL_FLOOR]));
    }
    cupool_pipeline_t miss, hit;
    check("pipeline", cupool_pipeline_create(&miss));
    check("pipeline", cupool_pipeline_create(&hit));
    describe(miss, FIRST_NODES, 1);
    describe(hit, FIRST_NODES, 1);
    check("warm launch", cupool_pipeline_launch(hit, s[FL_HIT]));
    check("sync", g.cuStreamSynchronize(s[FL_HIT]));
    double *v = malloc(sizeof(double) * 3 * FL_COUNT * (size_t)samples);
    if (!v)
        check("memory", CUDA_ERROR_OUT_OF_MEMORY);
#define V(k, w) (v + ((size_t)(k) * FL_COUNT + (size_t)(w)) * (size_t)samples)
    cupool_graph_stats_t a = CUPOOL_GRAPH_STATS_INIT, b = CUPOOL_GRAPH_STATS_INIT;
    cupool_graph_stats_get(&a);
    for (int it = 0; it < samples; it++)
        for (int k = 0; k < FL_COUNT; k++) {
            enum fl_way w = (enum fl_way)((k + it) % FL_COUNT);
            if (r->have_way[w])
                first_step(w, it, s[w], graph, warm, w == FL_HIT ? hit : miss,
                           V(0, w) + 0, V(1, w), V(2, w));
        }
    cupool_graph_stats_get(&b);
    r->upload = b.uploads > a.uploads; /* the misses uploaded their execs */
    for (int w = 0; w < FL_COUNT; w++)
        if (r->have_way[w]) {
            r->inst[w] = median(V(0, w), samples);
            r->launch[w] = median(V(1, w), samples);
            r->e2e[w] = median(V(2, w), samples);
        }
#undef V
    free(v);
    if (warm)
        check("cuGraphExecDestroy", g.cuGraphExecDestroy(warm));
    check("cuGraphDestroy", g.cuGraphDestroy(graph));
    check("destroy", cupool_pipeline_destroy(miss));
    check("destroy", cupool_pipeline_destroy(hit));
    for (int w = 0; w < FL_COUNT; w++)
        check("stream", g.cuStreamDestroy(s[w]));
}

/* cupool's miss with the other CUPOOL_GRAPH_UPLOAD: this program run again with the other
 * setting and FIRST_ONLY_ENV, its one line read back. False when that run could not be made
 * (no /proc/self/exe, a failed spawn): the figure is then missing, not guessed. */
static int first_launch_other(int iters, struct first_result *r)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    extern char **environ;
    size_t ne = 0;
    while (environ[ne])
        ne++;
    char **env = calloc(ne + 3, sizeof(*env));
    if (!env)
        return 0;
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "CUPOOL_GRAPH_UPLOAD=", 20) != 0 &&
            strncmp(environ[i], FIRST_ONLY_ENV "=", sizeof(FIRST_ONLY_ENV)) != 0)
            env[k++] = environ[i];
    env[k++] = r->upload ? "CUPOOL_GRAPH_UPLOAD=0" : "CUPOOL_GRAPH_UPLOAD=1";
    env[k++] = FIRST_ONLY_ENV "=1";
    env[k] = NULL;
    char iters_s[32];
    snprintf(iters_s, sizeof iters_s, "%d", iters);
    char *argv[] = {exe, "graphs", "--graph-launches", iters_s, NULL};
    int fds[2];
    if (pipe(fds) != 0) {
        free(env);
        return 0;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, exe, &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return 0;
    }
    char out[8192];
    size_t got = 0;
    for (ssize_t m; got < sizeof(out) - 1 && (m = read(fds[0], out + got, sizeof(out) - 1 - got)) > 0;)
        got += (size_t)m;
    out[got] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const char *line = strstr(out, "cupool-first-launch ");
    int upload = -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && line &&
           sscanf(line, "cupool-first-launch %lf %lf %d", &r->other_launch, &r->other_e2e,
                  &upload) == 3 &&
           upload == !r->upload;
}

static void print_first(const struct first_result *r, const char *label)
{
    printf("\ngraphs: the first launch of a new exec of %d kernels, us (medians of %d, each way "
           "in turn)%s\n",
           FIRST_NODES, r->samples, label);
    printf("%-48s %12s %13s %13s %16s\n", "", "instantiate", "launch, host", "launch+sync",
           "instantiate+l+s");
    for (int w = 0; w < FL_COUNT; w++) {
        char name[64];
        if (w == FL_MISS)
            snprintf(name, sizeof name, "cupool miss (whole call), CUPOOL_GRAPH_UPLOAD=%d",
                     r->upload);
        else
            snprintf(name, sizeof name, "%s", fl_names[w]);
        int by_hand = w == FL_HAND || w == FL_HAND_UPLOAD;
        if (!r->have_way[w])
            printf("%-48s %12s %13s %13s %16s\n", name, "n/a", "n/a", "n/a", "n/a");
        else if (by_hand)
            printf("%-48s %12.2f %13.2f %13.2f %16.2f\n", name, r->inst[w] / 1e3,
                   r->launch[w] / 1e3, r->e2e[w] / 1e3, (r->inst[w] + r->e2e[w]) / 1e3);
        else
            printf("%-48s %12s %13.2f %13.2f %16s\n", name, "-", r->launch[w] / 1e3,
                   r->e2e[w] / 1e3, "-");
        if (w != FL_MISS)
            continue;
        snprintf(name, sizeof name, "cupool miss (another run), CUPOOL_GRAPH_UPLOAD=%d",
                 !r->upload);
        if (r->other_ok)
            printf("%-48s %12s %13.2f %13.2f %16s\n", name, "-", r->other_launch / 1e3,
                   r->other_e2e / 1e3, "-");
        else
            printf("%-48s (the second run could not be made)\n", name);
    }
    if (r->have_way[FL_HAND_UPLOAD])
        printf("by hand, upload at instantiation against none, same run: first launch %+.2f us "
               "(host), %+.2f us (launch+sync); instantiation %+.2f us\n",
               (r->launch[FL_HAND_UPLOAD] - r->launch[FL_HAND]) / 1e3,
               (r->e2e[FL_HAND_UPLOAD] - r->e2e[FL_HAND]) / 1e3,
               (r->inst[FL_HAND_UPLOAD] - r->inst[FL_HAND]) / 1e3);
    printf("(a miss builds the graph, clones it and instantiates the clone within the call: its "
           "floor is instantiate+l+s by hand; a first launch's excess over the warm exec's is "
           "the upload and a first run's own cost)\n");
}

static void json_first(FILE *f, const struct first_result *r)
{
    fprintf(f, ",\"first_launch\":{\"nodes\":%d,\"samples\":%d,\"cupool_graph_upload\":%d",
            FIRST_NODES, r->samples, r->upload);
    for (int w = 0; w < FL_COUNT; w++) {
        if (!r->have_way[w])
            continue;
        fprintf(f, ",\"%s\":{", fl_keys[w]);
        if (w == FL_HAND || w == FL_HAND_UPLOAD)
            fprintf(f, "\"instantiate_us\":%.4f,", r->inst[w] / 1e3);
        fprintf(f, "\"launch_host_us\":%.4f,\"launch_sync_us\":%.4f}", r->launch[w] / 1e3,
                r->e2e[w] / 1e3);
    }
    if (r->other_ok)
        fprintf(f, ",\"cupool_miss_other_run\":{\"cupool_graph_upload\":%d,\"launch_host_us\":%.4f,"
                   "\"launch_sync_us\":%.4f}",
                !r->upload, r->other_launch / 1e3, r->other_e2e / 1e3);
    fprintf(f, "}");
}

#define GET(name, v) check(#name, cupool_driver_get_proc(#name, v, (void **)&g.name))

static const int alt_sizes[] = {1, 2, 4, 8, 16, 64};
static const int stream_counts[] = {1, 2, 4, 8, 12};
#define NALT (int)(sizeof(alt_sizes) / sizeof(alt_sizes[0]))
#define NSTREAMS (int)(sizeof(stream_counts) / sizeof(stream_counts[0]))

static void print_alt(const char *title, const char *what, const struct alt_result *r, int n,
                      const char *label)
{
    printf("\n%s, host us per launch (medians)%s\n", title, label);
    printf("%4s %10s %10s %8s %17s\n", what, "cupool", "floor", "ratio", "lock-free claims");
    for (int i = 0; i < n; i++)
        printf("%4d %10.3f %10.3f %7.3fx %16.1f%%\n", r[i].count, r[i].cupool / 1e3,
               r[i].floor / 1e3, r[i].cupool / r[i].floor, 100 * r[i].lock_free);
}

static void json_alt(FILE *f, const char *name, const char *what, const struct alt_result *r,
                     int n, int nodes)
{
    fprintf(f, ",\"%s\":[", name);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s{\"%s\":%d,\"nodes\":%d,\"cupool_us\":%.4f,\"floor_us\":%.4f,"
                   "\"ratio\":%.4f,\"lock_free_claims\":%.4f}",
                i ? "," : "", what, r[i].count, nodes, r[i].cupool / 1e3, r[i].floor / 1e3,
                r[i].cupool / r[i].floor, r[i].lock_free);
    fprintf(f, "]");
}

/* ---- a SWITCH over 4 variants against 4 cached pipelines ---- */

#define SW_BODIES 4

/* Host ns per launch (medians) and end to end (launch + cuStreamSynchronize):
 *   sw       one pipeline with a SWITCH node of 4 one-kernel bodies (add_u32 of 1, 2, 4 and 8
 *            to the counter), described per request with the next branch, then launched:
 *            the launch call alone (sw) and description + launch (sw_desc);
 *   four     4 one-kernel pipelines, one per variant, described once, launched in turn;
 *   warm     one one-kernel pipeline relaunched unchanged (a warm hit: the target's base);
 *   hand_sw  the same SWITCH graph by hand: the setter kernel's node patched
 *            (cuGraphExecKernelNodeSetParams) and cuGraphLaunch, the driver's own floor;
 *   hand_one a one-kernel exec relaunched by hand (cuGraphLaunch).
 * Every launch of the SWITCH ways is checked: the counter grows by the chosen body's value. */
struct switch_result {
    int ok, samples, wrong;
    double sw, sw_desc, four, warm, hand_sw, hand_one;
    double sw_e2e, four_e2e, warm_e2e, hand_sw_e2e;
    unsigned long long sw_bytes, four_bytes, sw_inst;
};

static unsigned sw_value[SW_BODIES] = {1, 2, 4, 8};
static void *sw_args[SW_BODIES][2] = {{&counter, &sw_value[0]},
                                      {&counter, &sw_value[1]},
                                      {&counter, &sw_value[2]},
                                      {&counter, &sw_value[3]}};

static unsigned counter_now(void)
{
    unsigned v = 0;
    check("cuMemcpyDtoH", g.cuMemcpyDtoH(&v, counter, 4));
    return v;
}

static void sw_describe(cupool_pipeline_t p, unsigned branch)
{
    cupool_node_t sw;
    check("reset", cupool_pipeline_reset(p));
    check("switch", cupool_pipeline_switch(p, SW_BODIES, branch, &sw));
    for (unsigned b = 0; b < SW_BODIES; b++) {
        check("body", cupool_pipeline_body(p, sw, b));
        check("kernel", cupool_pipeline_kernel(p, add_u32, 1, 1, 1, 1, 1, 1, 0, sw_args[b], NULL));
        check("body_end", cupool_pipeline_body_end(p));
    }
}

static CUDA_KERNEL_NODE_PARAMS one_kernel(CUfunction f, void **args)
{
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = f;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args;
    return kp;
}

static void switch_bench(int samples, struct switch_result *r)
{
    memset(r, 0, sizeof *r);
    r->samples = samples;
    CUfunction setter;
    CUmodule cmod;
    if (!g.cuGraphConditionalHandleCreate || !g.cuGraphAddNode ||
        g.cuModuleLoadData(&cmod, tu_cond_ptx) != CUDA_SUCCESS ||
        g.cuModuleGetFunction(&setter, cmod, "cupool_set_cond") != CUDA_SUCCESS)
        return; /* no conditional nodes on this driver */
    CUstream s;
    check("stream", g.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* the SWITCH graph by hand */
    CUgraph hg;
    CUgraphConditionalHandle h;
    unsigned hb = 0;
    void *hargs[2] = {&h, &hb};
    check("cuGraphCreate", g.cuGraphCreate(&hg, 0));
    check("cuGraphConditionalHandleCreate",
          g.cuGraphConditionalHandleCreate(&h, hg, bench_ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUDA_KERNEL_NODE_PARAMS skp = one_kernel(setter, hargs);
    CUgraphNode sn, cn, bn;
    check("setter node", g.cuGraphAddKernelNode(&sn, hg, NULL, 0, &skp));
    CUgraphNodeParams cp;
    memset(&cp, 0, sizeof cp);
    cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    cp.conditional.handle = h;
    cp.conditional.type = CU_GRAPH_COND_TYPE_SWITCH;
    cp.conditional.size = SW_BODIES;
    cp.conditional.ctx = bench_ctx;
    check("conditional node", g.cuGraphAddNode(&cn, hg, &sn, NULL, 1, &cp));
    for (int b = 0; b < SW_BODIES; b++) {
        CUDA_KERNEL_NODE_PARAMS bkp = one_kernel(add_u32, sw_args[b]);
        check("body node", g.cuGraphAddKernelNode(&bn, cp.conditional.phGraph_out[b], NULL, 0,
                                                  &bkp));
    }
    CUgraphExec hx, onex;
    check("instantiate", g.cuGraphInstantiateWithFlags(&hx, hg, 0));
    CUgraph og;
    CUgraphNode on;
    CUDA_KERNEL_NODE_PARAMS okp = one_kernel(add_u32, one_args);
    check("cuGraphCreate", g.cuGraphCreate(&og, 0));
    check("node", g.cuGraphAddKernelNode(&on, og, NULL, 0, &okp));
    check("instantiate", g.cuGraphInstantiateWithFlags(&onex, og, 0));
    /* cupool's: the SWITCH pipeline, the four variants, the warm one, each measured alone
     * from an emptied cache for its bytes */
    cupool_pipeline_t sp, fp[SW_BODIES], wp;
    check("create", cupool_pipeline_create(&sp));
    check("create", cupool_pipeline_create(&wp));
    check("kernel", cupool_pipeline_kernel(wp, add_u32, 1, 1, 1, 1, 1, 1, 0, one_args, NULL));
    for (int b = 0; b < SW_BODIES; b++) {
        check("create", cupool_pipeline_create(&fp[b]));
        check("kernel", cupool_pipeline_kernel(fp[b], add_u32, 1, 1, 1, 1, 1, 1, 0, sw_args[b],
                                               NULL));
    }
    cupool_graph_stats_t st0 = CUPOOL_GRAPH_STATS_INIT, st1 = CUPOOL_GRAPH_STATS_INIT;
    check("trim", cupool_trim());
    cupool_graph_stats_get(&st0);
    for (unsigned b = 0; b < SW_BODIES; b++) {
        sw_describe(sp, b);
        check("launch", cupool_pipeline_launch(sp, s));
    }
    check("sync", g.cuStreamSynchronize(s));
    cupool_graph_stats_get(&st1);
    r->sw_bytes = (unsigned long long)st1.bytes;
    r->sw_inst = (unsigned long long)(st1.instantiations - st0.instantiations);
    check("trim", cupool_trim());
    for (int b = 0; b < SW_BODIES; b++)
        check("launch", cupool_pipeline_launch(fp[b], s));
    check("sync", g.cuStreamSynchronize(s));
    cupool_graph_stats_get(&st1);
    r->four_bytes = (unsigned long long)st1.bytes;
    check("launch", cupool_pipeline_launch(wp, s));
    sw_describe(sp, 0);
    check("launch", cupool_pipeline_launch(sp, s));
    check("sync", g.cuStreamSynchronize(s));
    double *v = calloc(10 * (size_t)samples, sizeof *v);
    if (!v)
        exit(1);
    double *a[10];
    for (int k = 0; k < 10; k++)
        a[k] = v + (size_t)k * samples;
    for (int i = 0; i < samples; i++) {
        unsigned b = (unsigned)i % SW_BODIES, before = counter_now();
        double t0 = now_ns();
        sw_describe(sp, b);
        double t1 = now_ns();
        check("launch", cupool_pipeline_launch(sp, s));
        double t2 = now_ns();
        check("sync", g.cuStreamSynchronize(s));
        double t3 = now_ns();
        a[0][i] = t2 - t1, a[1][i] = t2 - t0, a[2][i] = t3 - t1;
        if (counter_now() - before != sw_value[b])
            r->wrong++;
        t0 = now_ns();
        check("launch", cupool_pipeline_launch(fp[b], s));
        t1 = now_ns();
        check("sync", g.cuStreamSynchronize(s));
        a[3][i] = t1 - t0, a[4][i] = now_ns() - t0;
        t0 = now_ns();
        check("launch", cupool_pipeline_launch(wp, s));
        t1 = now_ns();
        check("sync", g.cuStreamSynchronize(s));
        a[5][i] = t1 - t0, a[6][i] = now_ns() - t0;
        before = counter_now();
        hb = b;
        t0 = now_ns();
        check("setter", g.cuGraphExecKernelNodeSetParams(hx, sn, &skp));
        check("cuGraphLaunch", g.cuGraphLaunch(hx, s));
        t1 = now_ns();
        check("sync", g.cuStreamSynchronize(s));
        a[7][i] = t1 - t0, a[8][i] = now_ns() - t0;
        if (counter_now() - before != sw_value[b])
            r->wrong++;
        t0 = now_ns();
        check("cuGraphLaunch", g.cuGraphLaunch(onex, s));
        a[9][i] = now_ns() - t0;
        check("sync", g.cuStreamSynchronize(s));
    }
    r->sw = median(a[0], samples), r->sw_desc = median(a[1], samples);
    r->sw_e2e = median(a[2], samples), r->four = median(a[3], samples);
    r->four_e2e = median(a[4], samples), r->warm = median(a[5], samples);
    r->warm_e2e = median(a[6], samples), r->hand_sw = median(a[7], samples);
    r->hand_sw_e2e = median(a[8], samples), r->hand_one = median(a[9], samples);
    r->ok = 1;
    free(v);
    check("destroy", cupool_pipeline_destroy(sp));
    check("destroy", cupool_pipeline_destroy(wp));
    for (int b = 0; b < SW_BODIES; b++)
        check("destroy", cupool_pipeline_destroy(fp[b]));
    check("cuGraphExecDestroy", g.cuGraphExecDestroy(hx));
    check("cuGraphExecDestroy", g.cuGraphExecDestroy(onex));
    check("cuGraphDestroy", g.cuGraphDestroy(hg));
    check("cuGraphDestroy", g.cuGraphDestroy(og));
    check("cuStreamDestroy", g.cuStreamDestroy(s));
}

static void print_switch(const struct switch_result *r, const char *label)
{
    if (!r->ok) {
        printf("\ngraphs: conditional nodes: not measured (the driver has none)%s\n", label);
        return;
    }
    printf("\ngraphs: 4 variants as one SWITCH pipeline against 4 cached pipelines, us per launch "
           "(medians of %d, in turns)%s\n", r->samples, label);
    printf("%-58s %10s %12s\n", "", "host", "launch+sync");
    printf("%-58s %10.2f %12.2f\n", "cupool SWITCH, launch (branch changed each time)",
           r->sw / 1e3, r->sw_e2e / 1e3);
    printf("%-58s %10.2f %12s\n", "cupool SWITCH, describe + launch", r->sw_desc / 1e3, "-");
    printf("%-58s %10.2f %12.2f\n", "cupool, 4 cached pipelines in turn", r->four / 1e3,
           r->four_e2e / 1e3);
    printf("%-58s %10.2f %12.2f\n", "cupool, a warm hit of one one-kernel pipeline",
           r->warm / 1e3, r->warm_e2e / 1e3);
    printf("%-58s %10.2f %12.2f\n", "floor: the SWITCH exec by hand (setter patched + launch)",
           r->hand_sw / 1e3, r->hand_sw_e2e / 1e3);
    printf("%-58s %10.2f %12s\n", "floor: a one-kernel exec by hand (cuGraphLaunch)",
           r->hand_one / 1e3, "-");
    printf("SWITCH / its floor by hand %.3fx; SWITCH / a warm hit %.3fx (the driver's own: %.3fx); "
           "cache bytes: SWITCH %llu (%llu instantiation%s for 4 branches), 4 pipelines %llu; "
           "%d of %d checked launches wrong%s\n",
           r->sw / r->hand_sw, r->sw / r->warm, r->hand_sw / r->hand_one, r->sw_bytes,
           r->sw_inst, r->sw_inst == 1 ? "" : "s", r->four_bytes, r->wrong, 2 * r->samples,
           label);
}

static void json_switch(FILE *f, const struct switch_result *r)
{
    if (!r->ok)
        return;
    fprintf(f, ",\"switch\":{\"samples\":%d,\"wrong\":%d,\"switch_host_us\":%.4f,"
               "\"switch_describe_host_us\":%.4f,\"switch_end_to_end_us\":%.4f,"
               "\"four_pipelines_host_us\":%.4f,\"four_pipelines_end_to_end_us\":%.4f,"
               "\"warm_hit_host_us\":%.4f,\"warm_hit_end_to_end_us\":%.4f,"
               "\"hand_switch_host_us\":%.4f,\"hand_switch_end_to_end_us\":%.4f,"
               "\"hand_one_kernel_host_us\":%.4f,\"switch_bytes\":%llu,"
               "\"four_pipelines_bytes\":%llu,\"switch_instantiations\":%llu}",
            r->samples, r->wrong, r->sw / 1e3, r->sw_desc / 1e3, r->sw_e2e / 1e3, r->four / 1e3,
            r->four_e2e / 1e3, r->warm / 1e3, r->warm_e2e / 1e3, r->hand_sw / 1e3,
            r->hand_sw_e2e / 1e3, r->hand_one / 1e3, r->sw_bytes, r->four_bytes, r->sw_inst);
}

static int graphs_run(CUcontext ctx, int iters, int timeline, const char *label, FILE *json)
{
    print_timeline = timeline;
    bench_ctx = ctx;
    GET(cuModuleLoadData, 2000);
    GET(cuModuleGetFunction, 2000);
    GET(cuStreamCreate, 2000);
    GET(cuStreamSynchronize, 2000);
    GET(cuMemAlloc, 3020);
    GET(cuLaunchKernel, 4000);
    GET(cuGraphCreate, 10000);
    GET(cuGraphAddKernelNode, 12000);
    GET(cuGraphInstantiateWithFlags, 11040);
    GET(cuGraphLaunch, 10000);
    GET(cuCtxGetId, 12000);
    GET(cuGraphExecKernelNodeSetParams, 12000);
    GET(cuGraphExecDestroy, 10000);
    GET(cuGraphDestroy, 10000);
    GET(cuCtxSetCurrent, 4000);
    GET(cuStreamDestroy, 4000);
    GET(cuMemcpyDtoH, 3020);
    if (cupool_driver_get_proc("cuGraphConditionalHandleCreate", 12030,
                               (void **)&g.cuGraphConditionalHandleCreate) != CUDA_SUCCESS ||
        cupool_driver_get_proc("cuGraphAddNode", 12030, (void **)&g.cuGraphAddNode) !=
            CUDA_SUCCESS)
        g.cuGraphConditionalHandleCreate = NULL; /* no conditional figures */
    if (cupool_driver_get_proc("cuGraphInstantiateWithParams", 12000,
                               (void **)&g.cuGraphInstantiateWithParams) != CUDA_SUCCESS)
        g.cuGraphInstantiateWithParams = NULL; /* that way is then n/a */
    CUmodule mod;
    check("module", g.cuModuleLoadData(&mod, tu_kernels_ptx));
    check("add_u32", g.cuModuleGetFunction(&add_u32, mod, "add_u32"));
    check("set_u32", g.cuModuleGetFunction(&set_u32, mod, "set_u32"));
    check("spin", g.cuModuleGetFunction(&spin, mod, "spin"));
    check("alloc", g.cuMemAlloc(&counter, 4));
    check("stream", g.cuStreamCreate(&g_sync_stream, CU_STREAM_NON_BLOCKING));
    int first_samples = iters < 40 ? iters : 40;
    if (getenv(FIRST_ONLY_ENV)) { /* the second run of first_launch_other */
        struct first_result fr;
        first_launch(first_samples, 1, &fr);
        printf("cupool-first-launch %.1f %.1f %d\n", fr.launch[FL_MISS], fr.e2e[FL_MISS],
               fr.upload);
        return 0;
    }

    static const int sizes[3] = {1, 10, 50};
    double host[3][W_COUNT], e2e[3][W_COUNT], streamed[3][3];
    for (int i = 0; i < 3; i++)
        time_ways(sizes[i], iters, host[i], e2e[i], streamed[i]);
    struct alt_result alt[NALT], str[NSTREAMS];
    struct describe_result desc[3];
    for (int i = 0; i < NALT; i++)
        alt_signatures(alt_sizes[i], iters, &alt[i]);
    for (int i = 0; i < NSTREAMS; i++)
        alt_streams(stream_counts[i], iters, &str[i]);
    for (int i = 0; i < 3; i++) {
        describe_cost(sizes[i], iters, &desc[i]);
        /* 20x the launches at N = 1, 4x at N = 10 and 50 */
        desc[i].over_samples =
            iters * 20 / sizes[i] > iters * 4 ? iters * 20 / sizes[i] : iters * 4;
        describe_over(sizes[i], desc[i].over_samples, &desc[i]);
    }
    const char *emax = getenv("CUPOOL_GRAPH_EXECS_MAX");
    int execs_max = emax && *emax ? atoi(emax) : 16; /* the default */

    int launches = 50;
    cupool_graph_stats_t s0 = CUPOOL_GRAPH_STATS_INIT, s1 = CUPOOL_GRAPH_STATS_INIT;
    double one = throughput(1, launches, 0);
    cupool_graph_stats_get(&s0);
    double eight = throughput(8, launches, 0);
    cupool_graph_stats_get(&s1);
    double hand1 = throughput(1, launches, 1), hand8 = throughput(8, launches, 1);
    double shared8 = throughput(8, launches, 2);
    double late8 = throughput(8, launches, 3);
    struct first_result first;
    first_launch(first_samples, 0, &first);
    first.other_ok = first_launch_other(iters, &first);
    struct switch_result swr;
    switch_bench(first_samples * 25, &swr);
    cupool_graph_stats_t st = CUPOOL_GRAPH_STATS_INIT;
    cupool_graph_stats_get(&st);

    if (json) {
        fprintf(json, "{\"iterations\":%d,\"pipelines\":[", iters);
        for (int i = 0; i < 3; i++) {
            fprintf(json, "%s{\"nodes\":%d", i ? "," : "", sizes[i]);
            for (int w = 0; w < W_COUNT; w++)
                fprintf(json, ",\"%s_host_us\":%.4f,\"%s_end_to_end_us\":%.4f", way_names[w],
                        host[i][w] / 1e3, way_names[w], e2e[i][w] / 1e3);
            fprintf(json, ",\"hit_over_floor\":%.4f,\"hit_over_floor_paired\":%.4f,"
                          "\"hit_minus_floor_ns\":%.2f,\"hit_over_floor_ctxid_paired\":%.4f,"
                          "\"hit_minus_floor_ctxid_ns\":%.2f,\"streamed_us\":{\"eager\":%.4f,"
                          "\"floor\":%.4f,\"hit\":%.4f}}",
                    host[i][W_HIT] / host[i][W_FLOOR],
                    1 + desc[i].hit_minus_floor / desc[i].floor_mid, desc[i].hit_minus_floor,
                    1 + desc[i].hit_minus_floor_ctx / desc[i].floor_ctx_mid,
                    desc[i].hit_minus_floor_ctx,
                    streamed[i][0] / 1e3,
                    streamed[i][1] / 1e3, streamed[i][2] / 1e3);
        }
        fprintf(json, "]");
        json_alt(json, "signatures_on_one_stream", "signatures", alt, NALT, ALT_NODES);
        json_alt(json, "one_signature_on_streams", "streams", str, NSTREAMS, STREAM_NODES);
        fprintf(json, ",\"graph_execs_max\":%d,\"describe\":[", execs_max);
        for (int i = 0; i < 3; i++)
            fprintf(json, "%s{\"nodes\":%d,\"hand_fill_ns\":%.2f,\"hand_fill_calls_ns\":%.2f,"
                          "\"describe_ns\":%.2f,\"ratio\":%.4f,\"ratio_calls\":%.4f,"
                          "\"describe_hit_minus_hit_per_node_ns\":%.2f,"
                          "\"filled_floor_minus_floor_per_node_ns\":%.2f,"
                          "\"minus_launches_per_way\":%d}",
                    i ? "," : "", desc[i].n, desc[i].hand, desc[i].hand_calls, desc[i].cupool,
                    desc[i].cupool / desc[i].hand, desc[i].cupool / desc[i].hand_calls,
                    desc[i].over_hit, desc[i].fill_over_floor, desc[i].over_samples);
        fprintf(json, "],\"throughput_kernels_per_s\":{\"cupool_1\":%.0f,\"cupool_8\":%.0f,"
                      "\"hand_1\":%.0f,\"hand_8\":%.0f,\"hand_8_one_graph\":%.0f,"
                      "\"hand_8_late\":%.0f}",
                one, eight, hand1, hand8, shared8, late8);
        json_first(json, &first);
        json_switch(json, &swr);
        fprintf(json, ",");
        fprintf(json, "\"cache\":{\"launches\":%llu,\"hits\":%llu,\"misses\":%llu,"
                      "\"instantiations\":%llu,\"nodes_updated\":%llu,\"nodes_compared\":%llu,"
                      "\"claims_lock_free\":%llu,\"claims_locked\":%llu,\"evictions\":%llu}}",
                (unsigned long long)st.launches, (unsigned long long)st.hits,
                (unsigned long long)st.misses, (unsigned long long)st.instantiations,
                (unsigned long long)st.nodes_updated, (unsigned long long)st.nodes_compared,
                (unsigned long long)st.claims_lock_free, (unsigned long long)st.claims_locked,
                (unsigned long long)st.evictions);
        return 0;
    }

    printf("\ngraphs: pipelines of N tiny kernels, us per launch (median of %d)%s\n", iters, label);
    printf("%-13s", "host");
    for (int i = 0; i < 3; i++)
        printf(" %9s%-3d", "N=", sizes[i]);
    printf("   %-13s", "end to end");
    for (int i = 0; i < 3; i++)
        printf(" %9s%-3d", "N=", sizes[i]);
    printf("\n");
    for (int w = 0; w < W_COUNT; w++) {
        printf("%-13s", way_names[w]);
        for (int i = 0; i < 3; i++)
            printf(" %12.2f", host[i][w] / 1e3);
        printf("   %-13s", way_names[w]);
        for (int i = 0; i < 3; i++)
            printf(" %12.2f", e2e[i][w] / 1e3);
        printf("\n");
    }
    printf("hit vs floor, host: ");
    for (int i = 0; i < 3; i++)
        printf("N=%d %+.1f%%%s", sizes[i], 100 * (host[i][W_HIT] / host[i][W_FLOOR] - 1),
               i < 2 ? ", " : "\n");
    printf("hit vs floor, host, paired (the interquartile mean of each round's hit - floor, "
           "over the floor's; %d / %d / %d launches each, from the describe+hit run below): ",
           desc[0].over_samples, desc[1].over_samples, desc[2].over_samples);
    for (int i = 0; i < 3; i++)
        printf("N=%d %+.1f%% (%+.1f ns)%s", sizes[i],
               100 * desc[i].hit_minus_floor / desc[i].floor_mid, desc[i].hit_minus_floor,
               i < 2 ? ", " : "\n");
    printf("hit vs floor+ctxid (the floor after cuCtxGetId(NULL), the one driver call a hit "
           "adds: it must know the current context), paired, the same rounds: ");
    for (int i = 0; i < 3; i++)
        printf("N=%d %+.1f%% (%+.1f ns)%s", sizes[i],
               100 * desc[i].hit_minus_floor_ctx / desc[i].floor_ctx_mid,
               desc[i].hit_minus_floor_ctx, i < 2 ? ", " : "\n");
    printf("per changed node (hit-changed - hit)/N, host us: ");
    for (int i = 0; i < 3; i++)
        printf("N=%d %.3f%s", sizes[i], (host[i][W_HIT_CHANGED] - host[i][W_HIT]) / sizes[i] / 1e3,
               i < 2 ? ", " : "\n");
    printf("  of which the driver, by hand (floor-changed - floor)/N: ");
    for (int i = 0; i < 3; i++)
        printf("N=%d %.3f%s", sizes[i],
               (host[i][W_FLOOR_CHANGED] - host[i][W_FLOOR]) / sizes[i] / 1e3, i < 2 ? ", " : "\n");
    printf("  cupool's own (hit-changed - floor-changed)/N: ");
    for (int i = 0; i < 3; i++)
        printf("N=%d %.3f%s", sizes[i],
               (host[i][W_HIT_CHANGED] - host[i][W_FLOOR_CHANGED]) / sizes[i] / 1e3,
               i < 2 ? ", " : "\n");
    printf("end to end, single launch + sync, eager / hit: ");
    for (int i = 0; i < 3; i++)
        printf("N=%d %.2fx%s", sizes[i], e2e[i][W_EAGER] / e2e[i][W_HIT], i < 2 ? ", " : "\n");
    printf("end to end, streamed (%d back-to-back launches, one sync), us per launch:\n", iters);
    for (int k = 0; k < 3; k++) {
        static const char *const names[3] = {"eager", "floor", "hit"};
        printf("  %-11s", names[k]);
        for (int i = 0; i < 3; i++)
            printf(" N=%d %8.2f", sizes[i], streamed[i][k] / 1e3);
        printf("\n");
    }
    printf("end to end, streamed, eager / hit: ");
    for (int i = 0; i < 3; i++)
        printf("N=%d %.2fx%s", sizes[i], streamed[i][0] / streamed[i][2], i < 2 ? ", " : "\n");

    char title[160];
    snprintf(title, sizeof title, "graphs: S signatures of %d kernels alternating on one stream; "
             "floor: the same S graphs' execs alternated by hand", ALT_NODES);
    print_alt(title, "S", alt, NALT, label);
    snprintf(title, sizeof title, "graphs: one signature of %d kernels on K streams in turn; "
             "floor: K execs, each on its own stream, by hand", STREAM_NODES);
    print_alt(title, "K", str, NSTREAMS, label);
    if (stream_counts[NSTREAMS - 1] > execs_max)
        printf("(CUPOOL_GRAPH_EXECS_MAX=%d: beyond it, streams share execs, and every launch "
               "records a completion event)\n",
               execs_max);
    printf("\ngraphs: describing per request, ns per pipeline of N kernels (medians)%s\n", label);
    printf("%4s %10s %10s %10s %8s %8s %28s %28s\n", "N", "hand fill", "(calls)", "describe",
           "ratio", "(calls)", "describe+hit - hit, per node", "by hand: filled - floor");
    for (int i = 0; i < 3; i++)
        printf("%4d %10.1f %10.1f %10.1f %7.2fx %7.2fx %25.1f ns %25.1f ns\n", desc[i].n,
               desc[i].hand, desc[i].hand_calls, desc[i].cupool, desc[i].cupool / desc[i].hand,
               desc[i].cupool / desc[i].hand_calls, desc[i].over_hit, desc[i].fill_over_floor);
    printf("(hand fill: the nodes' CUDA_KERNEL_NODE_PARAMS, kernelParams and argument values, "
           "inline, and (calls) a call per node taking cupool_pipeline_kernel's arguments; "
           "describe: cupool_pipeline_reset + cupool_pipeline_kernel per node; the last two "
           "columns, per node: what describing adds to a hit, and what the hand-written fill by "
           "calls adds to the floor's launch, from a run of those four ways and floor+ctxid alone in turns "
           "launch by launch, the interquartile mean of each round's difference, over "
           "%d / %d / %d launches per way at N = 1 / 10 / 50)\n",
           desc[0].over_samples, desc[1].over_samples, desc[2].over_samples);

    printf("\nby hand (an exec per thread, cuGraphLaunch): 1 stream %.0f kernels/s, 8 threads on "
           "8 streams %.0f kernels/s (%.2fx)%s\n",
           hand1, hand8, hand8 / hand1, label);
    printf("by hand, the 8 execs instantiated from one graph: %.0f kernels/s (%.2fx)%s\n",
           shared8, shared8 / hand1, label);
    printf("by hand, each exec instantiated by its thread after the start: %.0f kernels/s "
           "(%.2fx)%s\n",
           late8, late8 / hand1, label);
    printf("one signature, %llu us kernel: 1 stream %.0f kernels/s, 8 threads on 8 streams "
           "%.0f kernels/s (%.2fx; %llu instantiations, %llu nodes updated)%s\n",
           spin_ns / 1000, one, eight, eight / one,
           (unsigned long long)(s1.instantiations - s0.instantiations),
           (unsigned long long)(s1.nodes_updated - s0.nodes_updated), label);
    print_first(&first, label);
    print_switch(&swr, label);
    printf("graph cache: %llu launches, %llu hits, %llu misses, %llu instantiations, %llu "
           "nodes updated, %llu nodes compared, %llu evictions, %llu entries, %llu execs, "
           "%llu bytes; %llu claims lock-free, %llu locked\n",
           (unsigned long long)st.launches, (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.instantiations,
           (unsigned long long)st.nodes_updated, (unsigned long long)st.nodes_compared,
           (unsigned long long)st.evictions, (unsigned long long)st.entries,
           (unsigned long long)st.execs, (unsigned long long)st.bytes,
           (unsigned long long)st.claims_lock_free, (unsigned long long)st.claims_locked);
    return 0;
}

int cupool_bench_graphs(CUcontext ctx, int iters, int timeline, const char *label)
{
    return graphs_run(ctx, iters, timeline, label, NULL);
}

/* The same figures as one JSON object written to out (no newline after it). */
int cupool_bench_graphs_json(CUcontext ctx, int iters, FILE *out)
{
    return graphs_run(ctx, iters, 0, "", out);
}
