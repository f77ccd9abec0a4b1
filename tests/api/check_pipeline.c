/* SPDX-License-Identifier: MIT */
/*
 * Pipelines and the graph-replay cache, on both drivers: results are checked value by value
 * (kernels add into device memory, read back), after argument changes, across streams, after
 * eviction, and with CUPOOL_GRAPH_DISABLE=1.
 */
#define _GNU_SOURCE /* setenv */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/testutil.h"
#include "fakecuda.h" /* the launch_attrs kernel's words (simulated driver only) */

/* The instantiation gate waits at most 5 ms for launches in flight (a best effort against a
 * driver stall, not a correctness condition): a launch that sits in the driver longer (its
 * thread descheduled on a loaded machine, a sanitizer's slowdown) may overlap an
 * instantiation, and cupool counts each such instantiation (cupool__gate_timeouts). An
 * overlap without a timeout is a failure. */
#include "graph/graph.h"
#include <stdatomic.h>

static struct tu_kernels k;
static CUstream s1, s2;
static CUdeviceptr mem; /* 32 counters */

static void setup_env(const char *name, const char *value)
{
    if (name)
        setenv(name, value, 1);
    tu_setup();
    tu_load_kernels(&k);
    TU_OK(tu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuMemAlloc(&mem, 32 * 4));
    TU_OK(tu.cuMemsetD32(mem, 0, 32));
}

static void setup(void)
{
    setup_env(NULL, NULL);
}

static unsigned counter(int i)
{
    unsigned v[32];
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(tu.cuMemcpyDtoH(v, mem, sizeof v));
    return v[i];
}

static cupool_graph_stats_t gstats(void)
{
    cupool_graph_stats_t st = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&st));
    return st;
}

/* n kernels adding v[i] into counter slot (v[i] = base + i * step). */
/* n non-blocking streams into st, and their end */
static void streams_new(CUstream *st, int n)
{
    for (int i = 0; i < n; i++)
        TU_OK(tu.cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
}

static void streams_free(CUstream *st, int n)
{
    for (int i = 0; i < n; i++)
        TU_OK(tu.cuStreamDestroy(st[i]));
}

static void fill_chain(cupool_pipeline_t p, int n, int slot, unsigned base, unsigned step)
{
    TU_OK(cupool_pipeline_reset(p));
    CUdeviceptr ptr = mem + 4 * (CUdeviceptr)slot;
    for (int i = 0; i < n; i++) {
        unsigned v = base + (unsigned)i * step;
        void *args[] = {&ptr, &v};
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
}

START_TEST(hit_patches_only_changed_arguments)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 10, 0, 1, 0); /* ten times +1 */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(0), 10);
    cupool_graph_stats_t a = gstats();
    ck_assert_uint_eq(a.misses, 1);
    ck_assert_uint_eq(a.instantiations, 1);

    fill_chain(p, 10, 0, 1, 0); /* the same again: a hit, nothing updated */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(0), 20);
    cupool_graph_stats_t b = gstats();
    ck_assert_uint_eq(b.hits, a.hits + 1);
    ck_assert_uint_eq(b.nodes_updated, a.nodes_updated);

    fill_chain(p, 10, 0, 1, 0);
    unsigned big = 100;
    CUdeviceptr ptr = mem;
    void *args[] = {&ptr, &big};
    /* change two nodes: rebuild with nodes 3 and 7 adding 100 */
    TU_OK(cupool_pipeline_reset(p));
    for (int i = 0; i < 10; i++) {
        unsigned one = 1;
        void *a1[] = {&ptr, &one};
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0,
                                     (i == 3 || i == 7) ? args : a1, NULL));
    }
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(0), 20 + 8 + 200);
    cupool_graph_stats_t c = gstats();
    ck_assert_uint_eq(c.nodes_updated, b.nodes_updated + 2);
    ck_assert_uint_eq(c.instantiations, 1);
    /* printed with the other statistics */
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    ck_assert_ptr_nonnull(f);
    TU_OK(cupool_stats_print(f));
    fclose(f);
    ck_assert_msg(strstr(buf, "graph cache: 3 launches, 2 hits, 1 misses"), "%s", buf);

    fill_chain(p, 10, 0, 1, 0); /* back: the two nodes change again */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(0), 238);
    ck_assert_uint_eq(gstats().nodes_updated, c.nodes_updated + 2);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* An unchanged relaunch on the stream of the pipeline's last launch takes the exec that
 * launch kept as it is (no lookup, no update, no lock); anything that may have changed it
 * sends the launch the general way: another pipeline of the signature patched the exec with
 * its own arguments, a trim emptied the cache, another stream, another context's turn. Every
 * launch's result is checked, so a relaunch of a stale exec shows in the counter. */
START_TEST(unchanged_relaunch_takes_its_exec_and_gives_way)
{
    enum { SLOT = 30 };
    cupool_pipeline_t p, q;
    TU_OK(cupool_pipeline_create(&p));
    TU_OK(cupool_pipeline_create(&q));
    unsigned expect = 0;
    fill_chain(p, 3, SLOT, 1, 0); /* +3 a launch */
    TU_OK(cupool_pipeline_launch(p, s1));
    expect += 3;
    cupool_graph_stats_t before = gstats();
    for (int i = 0; i < 5; i++) {
        TU_OK(cupool_pipeline_launch(p, s1));
        expect += 3;
    }
    ck_assert_uint_eq(counter(SLOT), expect);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.claims_lock_free - before.claims_lock_free, 5);
    ck_assert_uint_eq(st.claims_locked, before.claims_locked);
    ck_assert_uint_eq(st.nodes_updated, before.nodes_updated);
    ck_assert_uint_eq(st.instantiations, before.instantiations);
    /* q, of the same signature, takes the exec on s1 and patches in its arguments */
    fill_chain(q, 3, SLOT, 100, 0); /* +300 */
    TU_OK(cupool_pipeline_launch(q, s1));
    expect += 300;
    ck_assert_uint_eq(counter(SLOT), expect);
    before = gstats();
    TU_OK(cupool_pipeline_launch(p, s1)); /* the exec holds q's arguments now */
    expect += 3;
    ck_assert_uint_eq(counter(SLOT), expect);
    ck_assert_uint_gt(gstats().nodes_updated, before.nodes_updated);
    TU_OK(cupool_pipeline_launch(q, s1));
    expect += 300;
    /* another stream, then back */
    TU_OK(cupool_pipeline_launch(p, s2));
    expect += 3;
    TU_OK(cupool_pipeline_launch(p, s1));
    expect += 3;
    ck_assert_uint_eq(counter(SLOT), expect);
    /* a trim frees the entry and its execs: the relaunch is a miss */
    TU_OK(cupool_trim());
    before = gstats();
    TU_OK(cupool_pipeline_launch(p, s1));
    expect += 3;
    ck_assert_uint_eq(counter(SLOT), expect);
    ck_assert_uint_eq(gstats().misses, before.misses + 1);
    for (int i = 0; i < 3; i++) {
        TU_OK(cupool_pipeline_launch(p, s1));
        TU_OK(cupool_pipeline_launch(q, s1));
        expect += 303;
    }
    ck_assert_uint_eq(counter(SLOT), expect);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_pipeline_destroy(q));
}
END_TEST

static void count_host(void *arg)
{
    (*(int *)arg)++;
}

START_TEST(dag_with_memset_memcpy_host_and_events)
{
    static int host_runs;
    host_runs = 0;
    CUevent ev;
    TU_OK(tu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    cupool_pipeline_t a, b;
    TU_OK(cupool_pipeline_create(&a));
    TU_OK(cupool_pipeline_create(&b));
    /* a: memset slots 4,5 to 10 -> {add 1 to slot 4, add 2 to slot 5} -> copy 4,5 to 6,7
     *    -> record ev */
    cupool_node_t set, x, y, cp, rec;
    TU_OK(cupool_pipeline_memset(a, mem + 16, 10, 4, 2, &set));
    CUdeviceptr p4 = mem + 16, p5 = mem + 20;
    unsigned one = 1, two = 2;
    void *ax[] = {&p4, &one}, *ay[] = {&p5, &two};
    TU_OK(cupool_pipeline_kernel(a, k.add_u32, 1, 1, 1, 1, 1, 1, 0, ax, &x));
    TU_OK(cupool_pipeline_kernel(a, k.add_u32, 1, 1, 1, 1, 1, 1, 0, ay, &y));
    TU_OK(cupool_pipeline_depend(a, y, &set, 1)); /* x and y both after the memset */
    TU_OK(cupool_pipeline_memcpy(a, mem + 24, mem + 16, 8, &cp));
    cupool_node_t xy[2] = {x, y};
    TU_OK(cupool_pipeline_depend(a, cp, xy, 2));
    TU_OK(cupool_pipeline_event_record(a, ev, &rec));
    /* b on another stream: wait ev, then host node, then slot 6 += 5 */
    CUdeviceptr p6 = mem + 24;
    unsigned five = 5;
    void *bz[] = {&p6, &five};
    TU_OK(cupool_pipeline_event_wait(b, ev, NULL));
    TU_OK(cupool_pipeline_host(b, count_host, &host_runs, NULL));
    TU_OK(cupool_pipeline_kernel(b, k.add_u32, 1, 1, 1, 1, 1, 1, 0, bz, NULL));
    for (int round = 1; round <= 3; round++) {
        TU_OK(cupool_pipeline_launch(a, s1));
        TU_OK(cupool_pipeline_launch(b, s2));
        ck_assert_uint_eq(counter(4), 11);
        ck_assert_uint_eq(counter(5), 12);
        ck_assert_uint_eq(counter(6), 16); /* 11 + 5: b ran after a's copy */
        ck_assert_uint_eq(counter(7), 12);
        ck_assert_int_eq(host_runs, round);
    }
    TU_OK(cupool_pipeline_destroy(a));
    TU_OK(cupool_pipeline_destroy(b));
    TU_OK(tu.cuEventDestroy(ev));
}
END_TEST


START_TEST(host_nodes_run_once_per_launch)
{
    static int runs;
    runs = 0;
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int i = 0; i < 4; i++) {
        TU_OK(cupool_pipeline_reset(p));
        TU_OK(cupool_pipeline_host(p, count_host, &runs, NULL));
        TU_OK(cupool_pipeline_launch(p, s1));
    }
    TU_OK(tu.cuStreamSynchronize(s1));
    ck_assert_int_eq(runs, 4);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

START_TEST(two_streams_never_share_an_exec)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int round = 0; round < 5; round++) {
        fill_chain(p, 4, 8, 1, 0);
        TU_OK(cupool_pipeline_launch(p, s1));
        fill_chain(p, 4, 9, 2, 0); /* same signature, other arguments */
        TU_OK(cupool_pipeline_launch(p, s2));
    }
    ck_assert_uint_eq(counter(8), 5 * 4);
    ck_assert_uint_eq(counter(9), 5 * 8);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.execs, 2); /* one per stream */
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* Several threads launching one signature on their own streams, arguments changing. */
static _Atomic int thread_errors;

/* One thread's launches: `launches` of a chain of `kernels` kernels into counter `slot`,
 * each adding 1 + i % period, on a stream of its own; after `start` when given. */
static void launch_loop(int slot, int kernels, int launches, unsigned period,
                        pthread_barrier_t *start)
{
    CUstream s = NULL;
    cupool_pipeline_t p = NULL;
    bool ok = tu.cuCtxSetCurrent(tu_ctx) == CUDA_SUCCESS &&
              tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
              cupool_pipeline_create(&p) == CUDA_SUCCESS;
    if (!ok)
        thread_errors++;
    if (start)
        pthread_barrier_wait(start);
    if (!ok)
        return;
    for (int i = 0; i < launches; i++) {
        fill_chain(p, kernels, slot, 1 + (unsigned)i % period, 0);
        if (cupool_pipeline_launch(p, s) != CUDA_SUCCESS)
            thread_errors++;
    }
    if (tu.cuStreamSynchronize(s) != CUDA_SUCCESS)
        thread_errors++;
    cupool_pipeline_destroy(p);
    tu.cuStreamDestroy(s);
}

static void *launcher(void *arg)
{
    launch_loop((int)(intptr_t)arg, 3, 50, 2, NULL); /* +1 or +2, three times */
    return NULL;
}

START_TEST(threads_share_a_signature)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, launcher, (void *)(intptr_t)(24 + i)), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(thread_errors, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(counter(24 + i), 25 * 3 + 25 * 6);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_le(st.execs, 4);
}
END_TEST

/* ---- capture ---- */

struct cap_args {
    int calls;
    int kernels;
    unsigned value;
    int slot;
    CUresult fail;
};

static CUresult captured_work(CUstream stream, void *user)
{
    struct cap_args *a = user;
    a->calls++;
    if (a->fail != CUDA_SUCCESS)
        return a->fail;
    CUdeviceptr ptr = mem + 4 * (CUdeviceptr)a->slot;
    void *args[] = {&ptr, &a->value};
    for (int i = 0; i < a->kernels; i++) {
        CUresult r = tu.cuLaunchKernel(k.add_u32, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

START_TEST(capture_replays_without_calling_again)
{
    struct cap_args a = {0, 2, 3, 14, CUDA_SUCCESS};
    TU_OK(cupool_capture_launch(42, s1, captured_work, &a, CUPOOL_CAPTURE_REPLAY));
    ck_assert_int_eq(a.calls, 1);
    ck_assert_uint_eq(counter(14), 6); /* captured, then launched */
    a.value = 100; /* a replay does not see it: the graph is the first capture */
    TU_OK(cupool_capture_launch(42, s1, captured_work, &a, CUPOOL_CAPTURE_REPLAY));
    TU_OK(cupool_capture_launch(42, s1, captured_work, &a, CUPOOL_CAPTURE_REPLAY));
    ck_assert_int_eq(a.calls, 1);
    ck_assert_uint_eq(counter(14), 18);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.hits, 2);
}
END_TEST

START_TEST(capture_update_patches_the_exec)
{
    struct cap_args a = {0, 2, 1, 15, CUDA_SUCCESS};
    TU_OK(cupool_capture_launch(43, s1, captured_work, &a, CUPOOL_CAPTURE_UPDATE));
    a.value = 10;
    TU_OK(cupool_capture_launch(43, s1, captured_work, &a, CUPOOL_CAPTURE_UPDATE));
    ck_assert_int_eq(a.calls, 2);
    ck_assert_uint_eq(counter(15), 2 + 20);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.instantiations, 1); /* the second launch updated, not instantiated */
    ck_assert_uint_eq(st.updates, 1);
    a.kernels = 3; /* another structure: the update fails, the exec is instantiated afresh */
    TU_OK(cupool_capture_launch(43, s1, captured_work, &a, CUPOOL_CAPTURE_UPDATE));
    ck_assert_uint_eq(counter(15), 22 + 30);
    st = gstats();
    ck_assert_uint_eq(st.update_failures, 1);
    ck_assert_uint_eq(st.instantiations, 2);
}
END_TEST

START_TEST(capture_error_leaves_nothing_behind)
{
    struct cap_args a = {0, 1, 1, 16, CUDA_ERROR_INVALID_VALUE};
    TU_EQ(cupool_capture_launch(44, s1, captured_work, &a, 0), CUDA_ERROR_INVALID_VALUE);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    TU_OK(tu.cuStreamIsCapturing(s1, &cs));
    ck_assert_int_eq(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    ck_assert_uint_eq(gstats().entries, 0);
    a.fail = CUDA_SUCCESS; /* the next call captures afresh */
    TU_OK(cupool_capture_launch(44, s1, captured_work, &a, 0));
    ck_assert_uint_eq(counter(16), 1);
    TU_EQ(cupool_capture_launch(44, s1, NULL, &a, 0), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_capture_launch(44, s1, captured_work, &a, 8), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

START_TEST(dot_file_of_a_cached_pipeline)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 3, 17, 1, 0);
    char path[] = "/tmp/cupool-pipeline-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    TU_EQ(cupool_pipeline_dot(p, path), CUDA_ERROR_NOT_FOUND); /* not launched yet */
    TU_OK(cupool_pipeline_launch(p, s1));
    TU_OK(cupool_pipeline_dot(p, path));
    ck_assert_int_ge(tu_lines_with(path, "digraph"), 1);
    ck_assert_int_ge(tu_lines_with(path, "add_u32"), 3);
    unlink(path);
    TU_OK(cupool_pipeline_launch(p, s1)); /* still a hit afterwards */
    ck_assert_uint_eq(counter(17), 6);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* Two pipelines of one structure, other arguments, relaunched unchanged in turn on one stream:
 * the shared exec must take each one's arguments every time. */
START_TEST(two_pipelines_alternate_on_one_exec)
{
    cupool_pipeline_t a, b;
    TU_OK(cupool_pipeline_create(&a));
    TU_OK(cupool_pipeline_create(&b));
    fill_chain(a, 4, 18, 1, 0);
    fill_chain(b, 4, 18, 10, 0);
    for (int i = 0; i < 5; i++) {
        TU_OK(cupool_pipeline_launch(a, s1));
        TU_OK(cupool_pipeline_launch(a, s1)); /* untouched: no comparison at all */
        TU_OK(cupool_pipeline_launch(b, s1));
    }
    ck_assert_uint_eq(counter(18), 5 * (2 * 4 + 40));
    ck_assert_uint_eq(gstats().execs, 1);
    TU_OK(cupool_pipeline_destroy(a));
    TU_OK(cupool_pipeline_destroy(b));
}
END_TEST

/* A DOT request of another structure in between must not make the next launch reuse the
 * previous structure's graph. */
START_TEST(dot_between_structures_keeps_signatures_apart)
{
    CUevent ev;
    TU_OK(tu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    CUdeviceptr ptr = mem + 4 * 19;
    unsigned one = 1;
    void *args[] = {&ptr, &one};
    TU_OK(cupool_pipeline_event_record(p, ev, NULL)); /* structure A */
    TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    TU_OK(cupool_pipeline_launch(p, s1));
    for (int i = 0; i < 2; i++) { /* structure B, same node count, another node type */
        TU_OK(cupool_pipeline_reset(p));
        TU_OK(cupool_pipeline_event_wait(p, ev, NULL));
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
        if (i == 0)
            TU_EQ(cupool_pipeline_dot(p, "/tmp/cupool-never-written.dot"), CUDA_ERROR_NOT_FOUND);
    }
    uint64_t misses = gstats().misses;
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(gstats().misses, misses + 1); /* B is not A */
    ck_assert_uint_eq(counter(19), 2);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(tu.cuEventDestroy(ev));
}
END_TEST

/* Two threads missing one capture key at the same moment with CUPOOL_CAPTURE_UPDATE: each
 * launch runs its own capture's arguments, whichever thread cached the key. */
static pthread_barrier_t both_capturing;

static CUresult capture_at_barrier(CUstream stream, void *user)
{
    struct cap_args *a = user;
    pthread_barrier_wait(&both_capturing); /* both calls are inside a capture: both missed */
    return captured_work(stream, a);
}

static void *capture_thread(void *arg)
{
    struct cap_args *a = arg;
    CUstream s;
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS ||
        tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return (void *)1;
    CUresult r = cupool_capture_launch(77, s, capture_at_barrier, a, CUPOOL_CAPTURE_UPDATE);
    tu.cuStreamSynchronize(s);
    return r == CUDA_SUCCESS ? NULL : (void *)1;
}

START_TEST(capture_update_race_keeps_each_callers_arguments)
{
    struct cap_args a = {0, 1, 1, 20, CUDA_SUCCESS}, b = {0, 1, 100, 21, CUDA_SUCCESS};
    pthread_barrier_init(&both_capturing, NULL, 2);
    pthread_t ta, tb;
    void *ra, *rb;
    pthread_create(&ta, NULL, capture_thread, &a);
    pthread_create(&tb, NULL, capture_thread, &b);
    pthread_join(ta, &ra);
    pthread_join(tb, &rb);
    pthread_barrier_destroy(&both_capturing);
    ck_assert_ptr_null(ra);
    ck_assert_ptr_null(rb);
    ck_assert_uint_eq(counter(20), 1);
    ck_assert_uint_eq(counter(21), 100);
}
END_TEST

/* Past CUPOOL_GRAPH_EXECS_MAX, streams share execs whose launches have finished: the exec
 * count stays bounded and instantiations stop once completion events are recorded. */
START_TEST(execs_shared_only_at_the_limit)
{
    setup_env("CUPOOL_GRAPH_EXECS_MAX", "2");
    CUstream s3;
    TU_OK(tu.cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
    CUstream streams[3] = {s1, s2, s3};
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int round = 0; round < 6; round++)
        for (int i = 0; i < 3; i++) {
            fill_chain(p, 2, 4 + i, (unsigned)(i + 1), 0); /* stream i adds 2 * (i + 1) */
            TU_OK(cupool_pipeline_launch(p, streams[i]));
            TU_OK(tu.cuStreamSynchronize(streams[i]));
        }
    for (int i = 0; i < 3; i++)
        ck_assert_uint_eq(counter(4 + i), 6 * 2 * (unsigned)(i + 1));
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.execs, 2);
    /* two execs, one used-once exec for the third stream's first launch (no completion was
     * recorded yet); then the third stream takes whichever has finished */
    ck_assert_uint_eq(st.instantiations, 3);
    ck_assert_uint_eq(st.hits, 17);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(tu.cuStreamDestroy(s3));
}
END_TEST

/* At the limit, the execs of streams gone quiet make way for the streams launching now: a
 * launch that goes through the lock finds one not launched since the limit was reached and
 * replaces it. The thread's next launches on those streams take the exec it launched last
 * once that one has finished, without the lock (pool_streams_past_the_limit_claim_lock_free). */
START_TEST(quiet_streams_give_up_their_execs)
{
    setup_env("CUPOOL_GRAPH_EXECS_MAX", "2");
    CUstream s3, s4;
    TU_OK(tu.cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuStreamCreate(&s4, CU_STREAM_NON_BLOCKING));
    CUstream streams[4] = {s1, s2, s3, s4};
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int i = 0; i < 2; i++) { /* s1 and s2 launch once, then go quiet */
        fill_chain(p, 2, 4 + i, (unsigned)(i + 1), 0);
        TU_OK(cupool_pipeline_launch(p, streams[i]));
        TU_OK(tu.cuStreamSynchronize(streams[i]));
    }
    cupool_graph_stats_t first = gstats();
    for (int round = 0; round < 5; round++)
        for (int i = 2; i < 4; i++) {
            fill_chain(p, 2, 4 + i, (unsigned)(i + 1), 0);
            TU_OK(cupool_pipeline_launch(p, streams[i]));
            TU_OK(tu.cuStreamSynchronize(streams[i]));
        }
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(counter(4 + i), (i < 2 ? 1 : 5) * 2 * (unsigned)(i + 1));
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.execs, 2);
    /* s1, s2; s3 once with a used-once exec (the limit just reached, no completion recorded
     * yet); s4 replaces the exec of quiet s1 (through the lock); from then on each launch
     * takes the exec the thread launched last, finished, without the lock */
    ck_assert_uint_eq(st.instantiations, 4);
    ck_assert_uint_eq(st.claims_locked - first.claims_locked, 2);
    cupool_graph_stats_t before = st;
    for (int i = 2; i < 4; i++) {
        fill_chain(p, 2, 4 + i, (unsigned)(i + 1), 0);
        TU_OK(cupool_pipeline_launch(p, streams[i]));
        TU_OK(tu.cuStreamSynchronize(streams[i]));
    }
    st = gstats();
    ck_assert_uint_eq(st.instantiations, before.instantiations);
    ck_assert_uint_eq(st.claims_locked, before.claims_locked);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(tu.cuStreamDestroy(s3));
    TU_OK(tu.cuStreamDestroy(s4));
}
END_TEST

/* A thread's remembered entry and exec after they were evicted and their structs reused for
 * another signature: the next launch must not take them. */
START_TEST(repeat_launch_after_eviction_and_reuse)
{
    setup_env("CUPOOL_GRAPH_CACHE_ENTRIES", "1");
    cupool_pipeline_t a, b;
    TU_OK(cupool_pipeline_create(&a));
    TU_OK(cupool_pipeline_create(&b));
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 3; i++) { /* a: hits claimed through the thread's slot */
            fill_chain(a, 3, 8, 1, 0);
            TU_OK(cupool_pipeline_launch(a, s1));
        }
        fill_chain(b, 5, 9, 2, 0); /* b evicts a (room for one): a's structs are reused */
        TU_OK(cupool_pipeline_launch(b, s1));
        struct cap_args c = {0, 2, 3, 10, CUDA_SUCCESS}; /* and a capture evicts b */
        TU_OK(cupool_capture_launch(77, s1, captured_work, &c, CUPOOL_CAPTURE_REPLAY));
        TU_OK(cupool_capture_launch(77, s1, captured_work, &c, CUPOOL_CAPTURE_REPLAY));
        ck_assert_int_eq(c.calls, 1);
    }
    ck_assert_uint_eq(counter(8), 4 * 3 * 3);
    ck_assert_uint_eq(counter(9), 4 * 5 * 2);
    ck_assert_uint_eq(counter(10), 4 * 2 * 2 * 3);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.launches, 4 * 6);
    ck_assert_uint_eq(st.misses, 4 * 3); /* a, b and the capture, every round */
    ck_assert_uint_eq(st.hits, 4 * 3);
    ck_assert_uint_ge(st.evictions, 4 * 3 - 1);
    ck_assert_uint_le(st.entries, 1);
    TU_OK(cupool_pipeline_destroy(a));
    TU_OK(cupool_pipeline_destroy(b));
}
END_TEST

/* Repeat launches (claimed without the cache lock) on several threads while another thread
 * trims the cache (freeing entries, execs and, after a grace period, their structs). */

static void *repeat_launcher(void *arg)
{
    int slot = (int)(intptr_t)arg;
    CUstream s;
    cupool_pipeline_t p;
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS ||
        tu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cupool_pipeline_create(&p) != CUDA_SUCCESS) {
        thread_errors++;
        return NULL;
    }
    for (int i = 0; i < 400; i++) {
        if (i % 50 == 0)
            fill_chain(p, 1 + (i / 50) % 3, slot, 1, 0); /* three structures in turn */
        if (cupool_pipeline_launch(p, s) != CUDA_SUCCESS)
            thread_errors++;
    }
    if (tu.cuStreamSynchronize(s) != CUDA_SUCCESS)
        thread_errors++;
    cupool_pipeline_destroy(p);
    tu.cuStreamDestroy(s);
    return NULL;
}

START_TEST(trim_during_repeat_launches)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, repeat_launcher, (void *)(intptr_t)(12 + i)),
                         0);
    for (int i = 0; i < 200; i++)
        TU_OK(cupool_trim());
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(thread_errors, 0);
    /* 400 launches of 1, 2, 3, 1, 2, 3, 1, 2 kernels, 50 each */
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(counter(12 + i), 50 * (1 + 2 + 3 + 1 + 2 + 3 + 1 + 2));
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.launches, 4 * 400);
    ck_assert_uint_eq(st.hits + st.misses, st.launches);
    TU_OK(cupool_trim());
    st = gstats();
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.execs, 0);
    ck_assert_uint_eq(st.bytes, 0);
}
END_TEST

/* Repeat launches (claimed without the cache lock) on several threads, each of its own
 * structure, with room in the cache for two: every miss evicts while the other threads are
 * claiming their execs lock-free, and arguments change on every launch. */

static pthread_barrier_t evict_start;

static void *evicting_launcher(void *arg)
{
    int slot = (int)(intptr_t)arg; /* 1 to 4 kernels (slot - 15): four structures */
    launch_loop(slot, slot - 15, 300, 3, &evict_start); /* adds 1, 2 or 3 per kernel */
    return NULL;
}

/* Runs the four launchers and checks every counter value by value. */
static cupool_graph_stats_t four_evicting_launchers(void)
{
    pthread_t t[4];
    ck_assert_int_eq(pthread_barrier_init(&evict_start, NULL, 4), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(
            pthread_create(&t[i], NULL, evicting_launcher, (void *)(intptr_t)(16 + i)), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&evict_start);
    ck_assert_int_eq(thread_errors, 0);
    for (int i = 0; i < 4; i++) /* 300 launches of i + 1 kernels adding 1, 2, 3 in turn */
        ck_assert_uint_eq(counter(16 + i), 100 * (1 + 2 + 3) * (unsigned)(i + 1));
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.launches, 4 * 300);
    ck_assert_uint_eq(st.hits + st.misses, st.launches);
    return st;
}

START_TEST(eviction_during_lock_free_repeat_launches)
{
    setup_env("CUPOOL_GRAPH_CACHE_ENTRIES", "2");
    uint64_t gate_timeouts_before = atomic_load(&cupool__gate_timeouts);
    unsigned long overlaps_before = tu_fake.present ? tu_fake.instantiate_launch_overlaps() : 0;
    cupool_graph_stats_t st = four_evicting_launchers();
    ck_assert_uint_le(st.entries, 4); /* over the bound only while every entry is in use */
    ck_assert_uint_ge(st.misses, 4);  /* each structure once at least */
    if (tu_fake.present) { /* instantiations on misses never overlapped the others' launches */
        if (atomic_load(&cupool__gate_timeouts) == gate_timeouts_before)
            ck_assert_uint_eq(tu_fake.instantiate_launch_overlaps(), overlaps_before);
        ck_assert_uint_eq(tu_fake.instantiations_of_launched_graphs(), 0);
    }
    if (getenv("CUPOOLTEST_VERBOSE"))
        printf("eviction race: %llu hits, %llu misses, %llu evictions\n",
               (unsigned long long)st.hits, (unsigned long long)st.misses,
               (unsigned long long)st.evictions);
}
END_TEST

/* CUPOOL_GRAPH_GATE=0: instantiations may overlap launches; results stay right. */
START_TEST(gate_off_keeps_results_right)
{
    setup_env("CUPOOL_GRAPH_GATE", "0");
    four_evicting_launchers();
}
END_TEST

/* Kernel layouts are learnt again after cupool_trim(): identical nodes described before and
 * after it are still identical (nothing to update). */
START_TEST(identical_nodes_across_a_trim_need_no_update)
{
    cupool_pipeline_t p, q;
    TU_OK(cupool_pipeline_create(&p));
    TU_OK(cupool_pipeline_create(&q));
    fill_chain(p, 3, 3, 1, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    TU_OK(cupool_trim());
    fill_chain(q, 3, 3, 1, 0); /* same structure and arguments, new layouts */
    for (int i = 0; i < 10; i++) {
        TU_OK(cupool_pipeline_launch(i % 2 ? p : q, s1));
    }
    ck_assert_uint_eq(counter(3), 11 * 3);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.nodes_updated, 0);
    ck_assert_uint_eq(st.updates, 0);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_pipeline_destroy(q));
}
END_TEST

/* Eight threads, each on its own stream, launch one signature with long kernels, after a
 * single stream used it: no launch may wait on an exec still running on another stream. */
static void *long_launcher(void *arg)
{
    CUstream s = arg;
    cupool_pipeline_t p;
    unsigned long long ns = 2000000; /* 2 ms */
    void *args[] = {&ns};
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS || cupool_pipeline_create(&p) != CUDA_SUCCESS ||
        cupool_pipeline_kernel(p, k.spin, 1, 1, 1, 1, 1, 1, 0, args, NULL) != CUDA_SUCCESS) {
        thread_errors++;
        return NULL;
    }
    for (int i = 0; i < 50; i++)
        if (cupool_pipeline_launch(p, s) != CUDA_SUCCESS)
            thread_errors++;
    if (tu.cuStreamSynchronize(s) != CUDA_SUCCESS)
        thread_errors++;
    cupool_pipeline_destroy(p);
    return NULL;
}

static void concurrent_streams(void)
{
    ck_assert_msg(tu_fake.present && tu_fake.exec_overlaps, "simulated driver expected");
    /* one stream first, as a service warming up, then eight new ones at once (all kept
     * alive, so no handle value repeats): the entry reaches CUPOOL_GRAPH_EXECS_MAX */
    CUstream st[9];
    pthread_t t[9];
    uint64_t gate_timeouts_before = atomic_load(&cupool__gate_timeouts);
    unsigned long overlaps_before = tu_fake.instantiate_launch_overlaps();
    streams_new(st, 9);
    for (int round = 0; round < 2; round++) {
        int first = round == 0 ? 0 : 1, last = round == 0 ? 1 : 9;
        for (int i = first; i < last; i++)
            ck_assert_int_eq(pthread_create(&t[i], NULL, long_launcher, st[i]), 0);
        for (int i = first; i < last; i++)
            pthread_join(t[i], NULL);
    }
    ck_assert_int_eq(thread_errors, 0);
    ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    /* no instantiation while another thread was inside a launch (on an H200 both can then
     * wait until the queued work drains), unless the gate's wait for launches in flight ran
     * out (where a destroy waits, it holds the simulated driver, so a launch can sit in it
     * past those 5 ms) */
    if (atomic_load(&cupool__gate_timeouts) == gate_timeouts_before)
        ck_assert_uint_eq(tu_fake.instantiate_launch_overlaps(), overlaps_before);
    /* every exec from a fresh clone of the template (on an H200, instantiating a graph with a
     * running exec while another thread synchronised could stall until the work drained) */
    ck_assert_uint_eq(tu_fake.instantiations_of_launched_graphs(), 0);
    /* no exec destroyed while its launches were queued: a destroy that waits would have held
     * up the launches of every other thread */
    ck_assert_uint_eq(tu_fake.exec_destroy_waits(), 0);
    streams_free(st, 9);
}

START_TEST(concurrent_streams_never_wait_on_each_other)
{
    concurrent_streams();
}
END_TEST

/* The same where destroying an exec waits for its queued launches (a driver may). */
START_TEST(concurrent_streams_with_a_waiting_exec_destroy)
{
    setup_env("FAKECUDA_DESTROY_WAITS", "1");
    concurrent_streams();
    TU_OK(cupool_trim()); /* destroys everything buried */
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.execs, 0);
    ck_assert_int_eq(tu_fake.live_events(), 0);
}
END_TEST

START_TEST(bad_input)
{
    cupool_pipeline_t p;
    TU_EQ(cupool_pipeline_create(NULL), CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool_pipeline_create(&p));
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE); /* no nodes */
    TU_EQ(cupool_pipeline_launch(NULL, s1), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_kernel(p, NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL),
          CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_kernel(p, k.add_u32, 0, 1, 1, 1, 1, 1, 0, NULL, NULL),
          CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, NULL, NULL),
          CUDA_ERROR_INVALID_VALUE); /* two parameters, no args */
    TU_EQ(cupool_pipeline_memset(p, mem, 0, 2, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_host(p, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    cupool_node_t a, b;
    TU_OK(cupool_pipeline_memset(p, mem, 0, 4, 1, &a));
    TU_OK(cupool_pipeline_memset(p, mem, 0, 4, 1, &b));
    cupool_node_t later = b;
    TU_EQ(cupool_pipeline_depend(p, a, &later, 1), CUDA_ERROR_INVALID_VALUE); /* not before */
    TU_EQ(cupool_pipeline_depend(p, 7, &a, 1), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_depend(p, b, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    cupool_node_t twice[2] = {a, a};
    TU_EQ(cupool_pipeline_depend(p, b, twice, 2), CUDA_ERROR_INVALID_VALUE);
    /* a refused add leaves the description short of what was meant: launches refuse, with
     * the first add's error, until a reset; nothing is launched meanwhile */
    cupool_graph_stats_t before = gstats();
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(cupool_error_string(), "an add failed with"));
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE);
    ck_assert_uint_eq(gstats().launches, before.launches);
    /* a failed first add: the launch names the add's failure, not an empty pipeline */
    cupool_pipeline_t q;
    TU_OK(cupool_pipeline_create(&q));
    TU_EQ(cupool_pipeline_memset(q, mem, 0, 3, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_launch(q, s1), CUDA_ERROR_INVALID_VALUE);
    ck_assert_msg(strstr(cupool_error_string(), "an add failed with CUDA_ERROR_INVALID_VALUE"),
                  "%s", cupool_error_string());
    TU_OK(cupool_pipeline_destroy(q));
    TU_OK(cupool_pipeline_reset(p));
    fill_chain(p, 2, 5, 3, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(5), 2 * 3);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_pipeline_destroy(NULL));
}
END_TEST

START_TEST(eviction_keeps_results_right)
{
    setup_env("CUPOOL_GRAPH_CACHE_ENTRIES", "2");
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int round = 0; round < 2; round++)
        for (int len = 1; len <= 3; len++) { /* three signatures, room for two */
            fill_chain(p, len, 10 + len, 1, 0);
            TU_OK(cupool_pipeline_launch(p, s1));
        }
    for (int len = 1; len <= 3; len++)
        ck_assert_uint_eq(counter(10 + len), 2 * (unsigned)len);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_le(st.entries, 2);
    ck_assert_uint_ge(st.evictions, 4); /* LRU order: every launch evicts the oldest */
    ck_assert_uint_eq(st.misses, 6);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

START_TEST(graph_disable_launches_eagerly)
{
    setup_env("CUPOOL_GRAPH_DISABLE", "1");
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int i = 0; i < 3; i++) {
        fill_chain(p, 5, 20, 2, 1); /* 2+3+4+5+6 */
        TU_OK(cupool_pipeline_launch(p, s1));
    }
    ck_assert_uint_eq(counter(20), 3 * 20);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.eager_launches, 3);
    ck_assert_uint_eq(st.entries, 0);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* Simulated driver: an update the driver refuses re-instantiates the exec. */
START_TEST(refused_update_reinstantiates)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 3, 21, 1, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    tu_fake.fault("cuGraphExecKernelNodeSetParams", 0, 1, CUDA_ERROR_INVALID_VALUE);
    fill_chain(p, 3, 21, 5, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(21), 3 + 15);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.update_failures, 1);
    ck_assert_uint_eq(st.instantiations, 2);
    ck_assert_uint_eq(tu_fake.instantiations_of_launched_graphs(), 0); /* a fresh clone */
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* A refused update whose fresh clone fails part-way: the launch goes node by node and no
 * graph is left behind once the cache is trimmed. */
START_TEST(refused_update_with_a_failing_clone_leaks_nothing)
{
    int graphs = tu_fake.live_graphs();
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 3, 22, 1, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    tu_fake.fault("cuGraphExecKernelNodeSetParams", 0, 1, CUDA_ERROR_INVALID_VALUE);
    tu_fake.fault("cuGraphNodeFindInClone", 1, 1, CUDA_ERROR_OUT_OF_MEMORY);
    fill_chain(p, 3, 22, 5, 0);
    TU_OK(cupool_pipeline_launch(p, s1)); /* eagerly, with the same results */
    ck_assert_uint_eq(counter(22), 3 + 15);
    tu_fake.fault_clear();
    TU_OK(cupool_pipeline_launch(p, s1)); /* and graphs again */
    ck_assert_uint_eq(counter(22), 3 + 15 + 15);
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(cupool_trim());
    ck_assert_int_eq(tu_fake.live_graphs(), graphs);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* A used-once exec is buried with its completion event; then the context is reset. Later
 * launches reap the graveyard: the dead context's event must never reach the driver (the
 * real driver crashes on it; the simulated one aborts). */
/* With one exec per signature, a launch on a second stream uses an exec once: it is buried
 * with its completion event. Returns the pipeline, its launches finished. */
static cupool_pipeline_t bury_a_used_once_exec(void)
{
    /* faults by call count: the graveyard reaped on the test's thread only */
    setenv("CUPOOL_BACKGROUND", "0", 1);
    setup_env("CUPOOL_GRAPH_EXECS_MAX", "1");
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 2, 4, 1, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    TU_OK(cupool_pipeline_launch(p, s2));
    TU_OK(tu.cuCtxSynchronize());
    return p;
}

START_TEST(buried_exec_of_a_reset_context_never_reaches_the_driver)
{
    bury_a_used_once_exec();
    TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    struct tu_kernels k2;
    tu_load_kernels(&k2);
    CUdeviceptr m2;
    TU_OK(tu.cuMemAlloc(&m2, 4));
    TU_OK(tu.cuMemsetD32(m2, 0, 1));
    cupool_pipeline_t q;
    TU_OK(cupool_pipeline_create(&q));
    unsigned v = 1;
    void *args[] = {&m2, &v};
    TU_OK(cupool_pipeline_kernel(q, k2.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    CUstream s3;
    TU_OK(tu.cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 40; i++) /* reaps now and then */
        TU_OK(cupool_pipeline_launch(q, s3));
    TU_OK(tu.cuStreamSynchronize(s3));
    unsigned got = 0;
    TU_OK(tu.cuMemcpyDtoH(&got, m2, 4));
    ck_assert_uint_eq(got, 40);
    TU_OK(cupool_trim());
    TU_OK(cupool_pipeline_destroy(q));
}
END_TEST

/* A passing cuCtxGetId error while the graveyard is emptied: the buried handles stay, and a
 * later trim destroys them (none is lost). */
START_TEST(buried_exec_kept_while_its_context_cannot_be_told)
{
    TU_OK(cupool_pipeline_destroy(bury_a_used_once_exec()));
    tu_fake.fault("cuCtxGetId", 1, 1, CUDA_ERROR_OUT_OF_MEMORY); /* the entry's check passes */
    cupool_trim();
    tu_fake.fault_clear();
    TU_OK(cupool_trim());
    ck_assert_int_eq(tu_fake.live_events(), 0);
    ck_assert_uint_eq(gstats().execs, 0);
}
END_TEST

/* A pipeline's event destroyed after its launch, the same structure described again with a
 * new event: a new exec (another stream) and the old one (updated) both run it right. The
 * cached template graph still names the first event: on the H200, instantiating a graph whose
 * event node names a destroyed event crashed the driver, and updating an exec's event node
 * over one was refused (CUDA_ERROR_INVALID_VALUE). */
static void record_pipeline(cupool_pipeline_t p, CUevent ev, unsigned v)
{
    TU_OK(cupool_pipeline_reset(p));
    void *args[] = {&mem, &v};
    TU_OK(cupool_pipeline_kernel(p, k.set_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    TU_OK(cupool_pipeline_event_record(p, ev, NULL));
}

START_TEST(destroyed_event_never_reaches_an_instantiation)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    CUevent e1, e2;
    TU_OK(tu.cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    record_pipeline(p, e1, 5);
    TU_OK(cupool_pipeline_launch(p, s1));
    TU_OK(tu.cuStreamSynchronize(s1));
    TU_OK(tu.cuEventDestroy(e1));
    TU_OK(tu.cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    record_pipeline(p, e2, 6);
    TU_OK(cupool_pipeline_launch(p, s2)); /* a new exec, from the template's clone */
    TU_OK(tu.cuEventSynchronize(e2));
    ck_assert_uint_eq(counter(0), 6);
    record_pipeline(p, e2, 7);
    TU_OK(cupool_pipeline_launch(p, s1)); /* the first exec: its event node named e1 */
    TU_OK(tu.cuEventSynchronize(e2));
    ck_assert_uint_eq(counter(0), 7);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_trim()); /* the cached graphs (naming e1 and e2) go */
    TU_OK(tu.cuEventDestroy(e2));
}
END_TEST

/* A capture whose end fails, once or twice in a row, or together with the capture check:
 * the call fails, and the caller's stream is not left capturing. */
static CUresult capture_one(CUstream stream, void *user)
{
    unsigned v = *(unsigned *)user;
    void *args[] = {&mem, &v};
    return tu.cuLaunchKernel(k.set_u32, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL);
}

START_TEST(failed_capture_end_never_leaves_the_stream_capturing)
{
    static const struct {
        const char *entry;
        long count;
        const char *also;
    } cases[] = {{"cuStreamEndCapture", 1, NULL},
                 {"cuStreamEndCapture", 2, NULL},
                 {"cuStreamEndCapture", 1, "cuStreamIsCapturing"}};
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned v = 40 + i;
        tu_fake.fault(cases[i].entry, 0, cases[i].count, CUDA_ERROR_OUT_OF_MEMORY);
        if (cases[i].also)
            tu_fake.fault(cases[i].also, 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
        TU_EQ(cupool_capture_launch(100 + i, s1, capture_one, &v, 0), CUDA_ERROR_OUT_OF_MEMORY);
        tu_fake.fault_clear();
        CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        TU_OK(tu.cuStreamIsCapturing(s1, &cs));
        ck_assert_msg(cs == CU_STREAM_CAPTURE_STATUS_NONE, "case %u left the stream capturing", i);
        TU_OK(tu.cuStreamSynchronize(s1));
        TU_OK(cupool_capture_launch(100 + i, s1, capture_one, &v, 0)); /* works again */
        ck_assert_uint_eq(counter(0), v);
    }
    TU_OK(cupool_trim());
    ck_assert_int_eq(tu_fake.live_graphs(), 0);
}
END_TEST


/* ---- lock-free claims: alternating signatures, many streams, threads ---- */

/* Signature sig of n kernels into counter `slot`: node i sets the counter to v where bit i of
 * sig is set, adds v elsewhere (so the signatures differ, and the result tells which ran). */
static void fill_alt(cupool_pipeline_t p, int sig, int n, int slot, unsigned v)
{
    TU_OK(cupool_pipeline_reset(p));
    CUdeviceptr ptr = mem + 4 * (CUdeviceptr)slot;
    void *args[] = {&ptr, &v};
    for (int i = 0; i < n; i++)
        TU_OK(cupool_pipeline_kernel(p, (sig >> i) & 1 ? k.set_u32 : k.add_u32, 1, 1, 1, 1, 1, 1,
                                     0, args, NULL));
}

/* What signature sig of n kernels leaves in a counter that held c, with value v. */
static unsigned alt_result(int sig, int n, unsigned c, unsigned v)
{
    for (int i = 0; i < n; i++)
        c = (sig >> i) & 1 ? v : c + v;
    return c;
}

/* Claims made since `before`: locked and lock-free. */
static void claims_since(cupool_graph_stats_t before, uint64_t *locked, uint64_t *lock_free)
{
    cupool_graph_stats_t now = gstats();
    *locked = now.claims_locked - before.claims_locked;
    *lock_free = now.claims_lock_free - before.claims_lock_free;
    ck_assert_uint_eq(now.launches - before.launches, *locked + *lock_free);
}

/* A thread alternating 16 signatures on one stream, three ways: a pipeline each, relaunched
 * unchanged; a pipeline each, described per request; one pipeline described per request with
 * each structure in turn. Once each signature has launched once, every launch claims its exec
 * without the cache lock. */
START_TEST(alternating_signatures_claim_lock_free)
{
    enum { S = 16, N = 5, ROUNDS = 4 };
    cupool_pipeline_t p[S], one;
    for (int i = 0; i < S; i++)
        TU_OK(cupool_pipeline_create(&p[i]));
    TU_OK(cupool_pipeline_create(&one));
    unsigned expect[3] = {0, 0, 0};
    for (int way = 0; way < 3; way++) {
        int slot = 24 + way;
        for (int round = 0; round <= ROUNDS; round++) {
            cupool_graph_stats_t before = gstats();
            for (int i = 0; i < S; i++) {
                unsigned v = (unsigned)(1 + i + round);
                cupool_pipeline_t q = way == 2 ? one : p[i];
                if (way > 0 || round == 0)
                    fill_alt(q, i, N, slot, v);
                else /* unchanged: the same arguments as the first round's */
                    v = (unsigned)(1 + i);
                TU_OK(cupool_pipeline_launch(q, s1));
                expect[way] = alt_result(i, N, expect[way], v);
            }
            uint64_t locked, lock_free;
            claims_since(before, &locked, &lock_free);
            if (round > 0) { /* every signature has an exec on s1, named in the thread's hints */
                ck_assert_msg(locked == 0, "way %d round %d: %llu of %d claims took the lock", way,
                              round, (unsigned long long)locked, S);
                ck_assert_uint_eq(lock_free, S);
            }
            ck_assert_uint_eq(counter(slot), expect[way]);
        }
    }
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.entries, S);
    ck_assert_uint_eq(st.execs, S); /* one per signature: one stream */
    ck_assert_uint_eq(st.instantiations, S);
    for (int i = 0; i < S; i++)
        TU_OK(cupool_pipeline_destroy(p[i]));
    TU_OK(cupool_pipeline_destroy(one));
}
END_TEST

/* Captures alternating keys on one stream: replays claim without the lock too. */
START_TEST(alternating_capture_keys_claim_lock_free)
{
    enum { KEYS = 12 };
    struct cap_args a[KEYS];
    for (int i = 0; i < KEYS; i++)
        a[i] = (struct cap_args){0, 1, (unsigned)(i + 1), 23, CUDA_SUCCESS};
    for (int round = 0; round < 3; round++) {
        cupool_graph_stats_t before = gstats();
        for (int i = 0; i < KEYS; i++)
            TU_OK(cupool_capture_launch(200 + (uint64_t)i, s1, captured_work, &a[i],
                                        CUPOOL_CAPTURE_REPLAY));
        uint64_t locked, lock_free;
        claims_since(before, &locked, &lock_free);
        if (round > 0)
            ck_assert_uint_eq(locked, 0);
    }
    for (int i = 0; i < KEYS; i++)
        ck_assert_int_eq(a[i].calls, 1);
    ck_assert_uint_eq(counter(23), 3 * KEYS * (KEYS + 1) / 2);
}
END_TEST

/* One signature launched on K streams in turn: an exec per stream, each claimed without the
 * lock once the stream has launched it. */
static void streams_in_turn(int K)
{
    CUstream st[16];
    ck_assert_int_le(K, 16);
    streams_new(st, K);
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int round = 0; round < 4; round++) {
        cupool_graph_stats_t before = gstats();
        for (int i = 0; i < K; i++) {
            fill_chain(p, 3, 28, 1, 0);
            TU_OK(cupool_pipeline_launch(p, st[i]));
        }
        uint64_t locked, lock_free;
        claims_since(before, &locked, &lock_free);
        if (round > 0)
            ck_assert_msg(locked == 0, "round %d: %llu of %d claims took the lock", round,
                          (unsigned long long)locked, K);
    }
    ck_assert_uint_eq(counter(28), 4 * (unsigned)K * 3);
    cupool_graph_stats_t s = gstats();
    ck_assert_uint_eq(s.execs, (unsigned)K);
    ck_assert_uint_eq(s.instantiations, (unsigned)K);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    TU_OK(cupool_pipeline_destroy(p));
    streams_free(st, K);
}

START_TEST(one_signature_on_eight_streams_claims_lock_free)
{
    streams_in_turn(8);
}
END_TEST

START_TEST(one_signature_on_twelve_streams_claims_lock_free)
{
    setup_env(NULL, NULL); /* CUPOOL_GRAPH_EXECS_MAX's default, 16, serves 12 streams */
    streams_in_turn(12);
}
END_TEST

/* A service that launches each request on a stream of a pool meets a stream new to the
 * signature nearly every time. Past CUPOOL_GRAPH_EXECS_MAX, such a launch takes the exec the
 * thread launched last of the signature once that launch has finished, without the cache
 * lock; an exec still running is never taken (no exec runs on two streams at once). Before,
 * every such launch took the lock and queried the entry's execs under it. */
START_TEST(pool_streams_past_the_limit_claim_lock_free)
{
    setup_env("CUPOOL_GRAPH_EXECS_MAX", "2");
    enum { NS = 24, ROUNDS = 3, SLOT = 29 };
    CUstream st[NS];
    streams_new(st, NS);
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    unsigned expect = 0;
    for (int round = 0; round < ROUNDS; round++) {
        cupool_graph_stats_t before = gstats();
        for (int i = 0; i < NS; i++) {
            unsigned v = (unsigned)(round * NS + i + 1);
            fill_chain(p, 3, SLOT, v, 0);
            TU_OK(cupool_pipeline_launch(p, st[i]));
            TU_OK(tu.cuStreamSynchronize(st[i]));
            expect += 3 * v;
        }
        uint64_t locked, lock_free;
        claims_since(before, &locked, &lock_free);
        /* the first round: a miss, a second exec, the used-once exec of the limit's first
         * launch, the replacement of the exec that recorded no completion; then none */
        ck_assert_msg(locked == (round == 0 ? 4 : 0), "round %d: %llu of %d claims took the lock",
                      round, (unsigned long long)locked, NS);
        ck_assert_uint_eq(counter(SLOT), expect);
    }
    cupool_graph_stats_t s = gstats();
    ck_assert_uint_eq(s.instantiations, 4);
    ck_assert_uint_le(s.execs, 2);
    /* without waiting: a launch whose exec may still run takes the lock's way instead */
    for (int i = 0; i < NS; i++) {
        fill_chain(p, 3, SLOT, 1, 0);
        TU_OK(cupool_pipeline_launch(p, st[i]));
        expect += 3;
    }
    ck_assert_uint_eq(counter(SLOT), expect);
    ck_assert_uint_le(gstats().execs, 2);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    TU_OK(cupool_pipeline_destroy(p));
    streams_free(st, NS);
}
END_TEST

/* Threads launching one signature on streams of a shared pool, past CUPOOL_GRAPH_EXECS_MAX
 * (so the entry shares its execs among streams and the launches through the lock store the
 * threads' any-stream hints), while the main thread trims: a launch lets go of its entry
 * once its exec is back, and the entry may be freed from then on, so nothing of it is read
 * after (under the sanitizers a read of a freed entry fails the test). Every counter is
 * checked, and no exec ran on two streams at once. */
enum { POOL_TRIM_THREADS = 4, POOL_TRIM_STREAMS = 3, POOL_TRIM_LAUNCHES = 1200 };
static CUstream pool_trim_st[POOL_TRIM_STREAMS];
static _Atomic int pool_trim_running;

static void *pool_trim_launcher(void *arg)
{
    int slot = (int)(intptr_t)arg;
    cupool_pipeline_t p;
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS || cupool_pipeline_create(&p) != CUDA_SUCCESS) {
        thread_errors++;
        pool_trim_running--;
        return NULL;
    }
    for (int i = 0; i < POOL_TRIM_LAUNCHES; i++) {
        fill_chain(p, 2, slot, 1 + (unsigned)(i / 2) % 3, 0); /* each value twice: relaunches */
        if (cupool_pipeline_launch(p, pool_trim_st[(i + slot) % POOL_TRIM_STREAMS]) !=
            CUDA_SUCCESS)
            thread_errors++;
    }
    cupool_pipeline_destroy(p);
    pool_trim_running--;
    return NULL;
}

START_TEST(pool_streams_past_the_limit_during_trims)
{
    setup_env("CUPOOL_GRAPH_EXECS_MAX", "1");
    for (int i = 0; i < POOL_TRIM_STREAMS; i++)
        TU_OK(tu.cuStreamCreate(&pool_trim_st[i], CU_STREAM_NON_BLOCKING));
    pthread_t t[POOL_TRIM_THREADS];
    pool_trim_running = POOL_TRIM_THREADS;
    for (int i = 0; i < POOL_TRIM_THREADS; i++)
        ck_assert_int_eq(
            pthread_create(&t[i], NULL, pool_trim_launcher, (void *)(intptr_t)(20 + i)), 0);
    while (pool_trim_running > 0)
        TU_OK(cupool_trim());
    for (int i = 0; i < POOL_TRIM_THREADS; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(thread_errors, 0);
    for (int i = 0; i < POOL_TRIM_THREADS; i++) /* 2 kernels adding 1, 1, 2, 2, 3, 3, ... */
        ck_assert_uint_eq(counter(20 + i), 2 * 2 * (1 + 2 + 3) * (POOL_TRIM_LAUNCHES / 6));
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.launches, POOL_TRIM_THREADS * POOL_TRIM_LAUNCHES);
    ck_assert_uint_eq(st.hits + st.misses, st.launches);
    ck_assert_uint_eq(st.claims_lock_free + st.claims_locked, st.launches);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    for (int i = 0; i < POOL_TRIM_STREAMS; i++)
        TU_OK(tu.cuStreamDestroy(pool_trim_st[i]));
}
END_TEST

/* Past CUPOOL_GRAPH_EXECS_MAX, a launch on a stream without an exec of its own takes the one
 * the thread launched last only once its completion event says it finished: a query that
 * fails, or a completion that could not be recorded, sends the launch the locked way, and an
 * unchanged relaunch whose cuGraphLaunch fails returns the error and launches the next time.
 * Every round's results are checked, and no exec ran on two streams at once. */
START_TEST(any_stream_claim_with_failing_queries_and_records)
{
    setup_env("CUPOOL_GRAPH_EXECS_MAX", "1");
    enum { SLOT = 28, NS = 4 };
    CUstream st[NS];
    streams_new(st, NS);
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    unsigned expect = 0;
    for (int round = 0; round < 6; round++) {
        if (round == 2)
            tu_fake.fault("cuEventQuery", 0, 5, CUDA_ERROR_INVALID_HANDLE);
        if (round == 4)
            tu_fake.fault("cuEventRecord", 0, 3, CUDA_ERROR_INVALID_HANDLE);
        cupool_graph_stats_t before = gstats();
        for (int i = 0; i < NS; i++) {
            unsigned v = (unsigned)(round + i + 1);
            fill_chain(p, 2, SLOT, v, 0);
            TU_OK(cupool_pipeline_launch(p, st[i]));
            TU_OK(cupool_pipeline_launch(p, st[i])); /* unchanged, on its stream */
            expect += 4 * v;
        }
        ck_assert_uint_eq(counter(SLOT), expect);
        uint64_t locked, lock_free;
        claims_since(before, &locked, &lock_free);
        if (round == 2 || round == 4) /* the failures took the lock's way */
            ck_assert_uint_gt(locked, 0);
    }
    ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    TU_OK(cupool_pipeline_launch(p, st[0])); /* the exec of the last launch, still running */
    tu_fake.fault("cuGraphLaunch", 0, 1, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    cupool_graph_stats_t before = gstats();
    ck_assert_int_eq(cupool_pipeline_launch(p, st[0]), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    TU_OK(cupool_pipeline_launch(p, st[0]));
    cupool_graph_stats_t after = gstats();
    ck_assert_uint_eq(after.launches - before.launches, 2);
    ck_assert_uint_eq(after.instantiations, before.instantiations);
    expect += 2 * 2 * (5 + NS); /* two launches of the last round's last value */
    ck_assert_uint_eq(counter(SLOT), expect);
    ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    TU_OK(cupool_pipeline_destroy(p));
    streams_free(st, NS);
}
END_TEST

/* A thread launches one signature on four streams and exits: its execs stay with the entry
 * (none leaked, none lost), and another thread launching on those streams uses them (no new
 * instantiation), claiming them without the lock from its second round on, never while one
 * still runs elsewhere. */
struct four_streams {
    CUstream st[4];
    int rounds;
    unsigned base;
};

static void *launch_on_four(void *arg)
{
    struct four_streams *f = arg;
    cupool_pipeline_t p;
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS || cupool_pipeline_create(&p) != CUDA_SUCCESS) {
        thread_errors++;
        return NULL;
    }
    for (int round = 0; round < f->rounds; round++) {
        /* (no Check assertion off the test's thread) */
        cupool_graph_stats_t before = CUPOOL_GRAPH_STATS_INIT, after = CUPOOL_GRAPH_STATS_INIT;
        if (cupool_graph_stats_get(&before) != CUDA_SUCCESS)
            thread_errors++;
        for (int i = 0; i < 4; i++) {
            CUdeviceptr ptr = mem + 4 * (CUdeviceptr)(12 + i);
            unsigned v = f->base + (unsigned)i;
            void *args[] = {&ptr, &v};
            if (cupool_pipeline_reset(p) != CUDA_SUCCESS ||
                cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL) ||
                cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL) ||
                cupool_pipeline_launch(p, f->st[i]) != CUDA_SUCCESS)
                thread_errors++;
        }
        if (cupool_graph_stats_get(&after) != CUDA_SUCCESS ||
            (round > 0 && after.claims_locked != before.claims_locked))
            thread_errors++;
    }
    cupool_pipeline_destroy(p);
    return NULL;
}

START_TEST(exited_threads_execs_serve_other_threads)
{
    int execs0 = tu_fake.present ? tu_fake.live_execs() : 0;
    struct four_streams f = {{0}, 5, 1};
    for (int i = 0; i < 4; i++)
        TU_OK(tu.cuStreamCreate(&f.st[i], CU_STREAM_NON_BLOCKING));
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, launch_on_four, &f), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(thread_errors, 0);
    cupool_graph_stats_t a = gstats();
    ck_assert_uint_eq(a.execs, 4);
    ck_assert_uint_eq(a.instantiations, 4);
    f.base = 10; /* another thread, other arguments, the same streams */
    ck_assert_int_eq(pthread_create(&t, NULL, launch_on_four, &f), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(thread_errors, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(counter(12 + i), 5 * 2 * (1 + (unsigned)i) + 5 * 2 * (10 + (unsigned)i));
    cupool_graph_stats_t b = gstats();
    ck_assert_uint_eq(b.instantiations, a.instantiations);
    ck_assert_uint_eq(b.execs, 4);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.exec_overlaps(), 0);
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(cupool_trim());
    ck_assert_uint_eq(gstats().execs, 0);
    if (tu_fake.present)
        ck_assert_int_eq(tu_fake.live_execs(), execs0);
    for (int i = 0; i < 4; i++)
        TU_OK(tu.cuStreamDestroy(f.st[i]));
}
END_TEST

/* ---- refilling in place: adds compare with the last launch ---- */

static cupool_graph_stats_t launch_counted(cupool_pipeline_t p, CUstream s)
{
    cupool_graph_stats_t before = gstats();
    TU_OK(cupool_pipeline_launch(p, s));
    cupool_graph_stats_t now = gstats();
    cupool_graph_stats_t d;
    memset(&d, 0, sizeof d);
    d.nodes_compared = now.nodes_compared - before.nodes_compared;
    d.nodes_updated = now.nodes_updated - before.nodes_updated;
    d.misses = now.misses - before.misses;
    return d;
}

/* A 50-kernel chain into counter 30, node i adding v[i]. */
static void fill_values(cupool_pipeline_t p, const unsigned *v, int n)
{
    TU_OK(cupool_pipeline_reset(p));
    CUdeviceptr ptr = mem + 4 * 30;
    for (int i = 0; i < n; i++) {
        void *args[] = {&ptr, (void *)&v[i]};
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
}

static unsigned sum_of(const unsigned *v, int n)
{
    unsigned t = 0;
    for (int i = 0; i < n; i++)
        t += v[i];
    return t;
}

/* A pipeline refilled per request: an unchanged relaunch compares no node, a changed one only
 * the nodes whose parameters changed since its last launch (even across several resets in
 * between), a change of launch shape counts as a change; another pipeline on the same exec,
 * or a trim, makes the next launch compare every node. */
START_TEST(refill_compares_only_changed_nodes)
{
    enum { N = 50 };
    unsigned v[N], total = 0;
    for (int i = 0; i < N; i++)
        v[i] = 1;
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_values(p, v, N);
    cupool_graph_stats_t d = launch_counted(p, s1);
    ck_assert_uint_eq(d.misses, 1);
    total += sum_of(v, N);

    fill_values(p, v, N); /* unchanged */
    d = launch_counted(p, s1);
    ck_assert_uint_eq(d.nodes_compared, 0);
    ck_assert_uint_eq(d.nodes_updated, 0);
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);

    v[3] = 100, v[41] = 7; /* two nodes change */
    fill_values(p, v, N);
    d = launch_counted(p, s1);
    ck_assert_uint_eq(d.nodes_compared, 2);
    ck_assert_uint_eq(d.nodes_updated, 2);
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);

    /* described twice before the launch: node 3 back to 1, then node 20 changed too */
    v[3] = 1;
    fill_values(p, v, N);
    v[3] = 100, v[20] = 5;
    fill_values(p, v, N);
    d = launch_counted(p, s1);
    ck_assert_uint_le(d.nodes_compared, 2); /* node 3 may be visited: it was written */
    ck_assert_uint_eq(d.nodes_updated, 1);   /* only node 20 differs from the exec's */
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);

    /* a launch shape change (here dynamic shared memory) is a change of that node only */
    TU_OK(cupool_pipeline_reset(p));
    CUdeviceptr ptr = mem + 4 * 30;
    for (int i = 0; i < N; i++) {
        void *args[] = {&ptr, &v[i]};
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, i == 9 ? 64 : 0, args,
                                     NULL));
    }
    d = launch_counted(p, s1);
    ck_assert_uint_eq(d.nodes_compared, 1);
    ck_assert_uint_eq(d.nodes_updated, 1);
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);

    /* another pipeline of the structure on the same exec: it holds q's arguments now, so p's
     * next launch compares every node */
    cupool_pipeline_t q;
    TU_OK(cupool_pipeline_create(&q));
    fill_values(q, v, N);
    TU_OK(cupool_pipeline_launch(q, s1));
    total += sum_of(v, N);
    fill_values(p, v, N);
    d = launch_counted(p, s1);
    ck_assert_uint_eq(d.nodes_compared, N);
    ck_assert_uint_eq(d.nodes_updated, 0);
    total += sum_of(v, N);
    fill_values(p, v, N);
    ck_assert_uint_eq(launch_counted(p, s1).nodes_compared, 0); /* and then none again */
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);

    TU_OK(cupool_trim()); /* forgets layouts and graphs: a miss, then refills compare again */
    fill_values(p, v, N);
    ck_assert_uint_eq(launch_counted(p, s1).misses, 1);
    total += sum_of(v, N);
    fill_values(p, v, N);
    ck_assert_uint_eq(launch_counted(p, s1).nodes_compared, 0);
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_pipeline_destroy(q));
}
END_TEST

/* Refills of every node kind (memset, kernel, copy, event record and wait, host) with
 * explicit dependencies: unchanged, nothing compared and no new signature; each parameter
 * change is seen and applied. */
START_TEST(refill_of_every_node_kind)
{
    static int host_a, host_b;
    host_a = host_b = 0;
    CUevent e1, e2;
    TU_OK(tu.cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    TU_OK(tu.cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int round = 0; round < 6; round++) {
        /* rounds 2 and 3 change the memset value, the copy's source, the events and the host
         * function's argument; round 4 goes back */
        bool alt = round == 2 || round == 3;
        unsigned one = 1;
        CUdeviceptr p8 = mem + 4 * 8;
        void *args[] = {&p8, &one};
        cupool_node_t set, kern, cp, rec, wait;
        TU_OK(cupool_pipeline_reset(p));
        TU_OK(cupool_pipeline_memset(p, mem + 4 * 8, alt ? 20 : 10, 4, 2, &set));
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, &kern));
        TU_OK(cupool_pipeline_memcpy(p, mem + 4 * 10, mem + 4 * (alt ? 9 : 8), 4, &cp));
        TU_OK(cupool_pipeline_depend(p, cp, &kern, 1));
        TU_OK(cupool_pipeline_event_record(p, alt ? e2 : e1, &rec));
        TU_OK(cupool_pipeline_event_wait(p, alt ? e2 : e1, &wait));
        cupool_node_t both[2] = {cp, rec};
        TU_OK(cupool_pipeline_depend(p, wait, both, 2));
        TU_OK(cupool_pipeline_host(p, count_host, alt ? &host_b : &host_a, NULL));
        cupool_graph_stats_t d = launch_counted(p, s1);
        ck_assert_uint_eq(d.misses, round == 0);
        if (round == 1 || round == 3 || round == 5)
            ck_assert_uint_eq(d.nodes_compared, 0);
        if (round == 2 || round == 4)
            ck_assert_uint_eq(d.nodes_updated, 5);
        ck_assert_uint_eq(counter(8), alt ? 21 : 11);
        ck_assert_uint_eq(counter(9), alt ? 20 : 10);
        ck_assert_uint_eq(counter(10), alt ? 20 : 11);
    }
    ck_assert_int_eq(host_a, 4);
    ck_assert_int_eq(host_b, 2);
    ck_assert_uint_eq(gstats().entries, 1);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(tu.cuEventDestroy(e1));
    TU_OK(tu.cuEventDestroy(e2));
}
END_TEST

/* Refills that fail part-way (a NULL argument, a zero dimension), or change the structure
 * part-way and come back, never leave a stale parameter behind: every launch's results are
 * the description's. */
START_TEST(refill_after_failed_and_diverging_adds)
{
    enum { N = 6 };
    unsigned v[N] = {1, 2, 3, 4, 5, 6}, total = 0;
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_values(p, v, N);
    TU_OK(cupool_pipeline_launch(p, s1));
    total += sum_of(v, N);

    /* a refill whose fourth node has a NULL argument: refused, the launch too */
    TU_OK(cupool_pipeline_reset(p));
    CUdeviceptr ptr = mem + 4 * 30;
    unsigned big = 1000;
    for (int i = 0; i < 3; i++) {
        void *args[] = {&ptr, &v[i]};
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
    void *bad[] = {&ptr, NULL}; /* a good first argument, then a NULL one */
    TU_EQ(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, bad, NULL),
          CUDA_ERROR_INVALID_VALUE);
    void *zero[] = {&ptr, &big};
    TU_EQ(cupool_pipeline_kernel(p, k.add_u32, 1, 0, 1, 1, 1, 1, 0, zero, NULL),
          CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE);
    fill_values(p, v, N); /* the same as the last launch: its results */
    TU_OK(cupool_pipeline_launch(p, s1));
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);

    /* another structure described (a memset where a kernel was), then the first again with
     * one argument changed, before any launch */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_memset(p, mem + 4 * 31, 0, 4, 1, NULL));
    for (int i = 1; i < N; i++) {
        void *args[] = {&ptr, &big};
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
    v[4] = 50;
    fill_values(p, v, N);
    TU_OK(cupool_pipeline_launch(p, s1));
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);
    fill_values(p, v, N);
    TU_OK(cupool_pipeline_launch(p, s1));
    total += sum_of(v, N);
    ck_assert_uint_eq(counter(30), total);
    ck_assert_uint_eq(gstats().entries, 1);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* A structure described twice without a launch between, differing from the last launch: the
 * second description refills the first one's nodes in place (same functions), yet it is not
 * the last launch's structure, so the launch must not reuse that exec. The per-request path
 * that spares comparing structure words must tell the two apart. */
START_TEST(redescribed_structure_is_not_the_last_launch)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    CUdeviceptr ptr = mem + 4 * 29;
    unsigned a = 5, b = 7;
    void *args_a[] = {&ptr, &a}, *args_b[] = {&ptr, &b};
    /* launched: add 5, add 7 */
    TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args_a, NULL));
    TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args_b, NULL));
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(29), 12);
    /* described, not launched: add 5, set 7; then the same again, and launched */
    for (int round = 0; round < 2; round++) {
        TU_OK(cupool_pipeline_reset(p));
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args_a, NULL));
        TU_OK(cupool_pipeline_kernel(p, k.set_u32, 1, 1, 1, 1, 1, 1, 0, args_b, NULL));
    }
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(29), 7); /* the set ran last, not a second add */
    /* and back to the first structure, described twice */
    for (int round = 0; round < 2; round++) {
        TU_OK(cupool_pipeline_reset(p));
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args_a, NULL));
        TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args_b, NULL));
    }
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(29), 19);
    ck_assert_uint_eq(gstats().entries, 2);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST


/* ---- launch attributes (cupool_pipeline_kernel_ex) ---- */

static CUlaunchAttribute cluster_attr(unsigned x)
{
    CUlaunchAttribute a;
    memset(&a, 0, sizeof a);
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = x;
    a.value.clusterDim.y = a.value.clusterDim.z = 1;
    return a;
}

/* cluster_rank over 16 blocks of 32 threads at most: the first `grid` blocks hold what clusters
 * of cx give, the rest nothing. */
static void check_ranks(CUdeviceptr out, unsigned grid, unsigned cx, int step)
{
    unsigned got[16 * 32];
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(tu.cuMemcpyDtoH(got, out, sizeof got));
    for (unsigned b = 0; b < 16; b++)
        for (unsigned t = 0; t < 32; t++) {
            unsigned want = b < grid ? tu_cluster_rank_of(b, cx) : 0;
            ck_assert_msg(got[b * 32 + t] == want,
                          "step %d (grid %u, clusters of %u): block %u thread %u read 0x%x, "
                          "expected 0x%x",
                          step, grid, cx, b, t, got[b * 32 + t], want);
        }
}

/* A cluster kernel whose cluster dimension and grid change from launch to launch: every
 * thread reads the cluster it was launched in, value by value. Graphs (eager: with
 * CUPOOL_GRAPH_DISABLE=1, through cuLaunchKernelEx): a launch with a cluster dimension not
 * seen before is a miss and one instantiation, any other a hit, whose grid change is a node
 * update. The driver does not apply a changed cluster dimension to an exec (check_graph's
 * kernel_node_cluster_fixed_at_instantiation): were it a parameter, the results would be
 * wrong. */
static void cluster_steps(int graphs)
{
    CUfunction rank;
    TU_OK(tu_load_cluster_rank_kernel(&rank));
    CUdeviceptr out;
    TU_OK(tu.cuMemAlloc(&out, 4 * 32 * 16));
    static const struct {
        unsigned grid, cx;
    } step[] = {{8, 2}, {8, 2}, {16, 2}, {8, 4}, {16, 4}, {8, 2}, {16, 8}, {8, 1}, {16, 4}, {8, 8}};
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    cupool_graph_stats_t a = gstats();
    int seen[9] = {0}, distinct = 0;
    for (int i = 0; i < (int)(sizeof step / sizeof step[0]); i++) {
        TU_OK(tu.cuMemsetD32(out, 0, 32 * 16));
        TU_OK(cupool_pipeline_reset(p));
        CUlaunchAttribute at = cluster_attr(step[i].cx);
        void *args[] = {&out};
        TU_OK(cupool_pipeline_kernel_ex(p, rank, step[i].grid, 1, 1, 32, 1, 1, 0, args, &at, 1,
                                        NULL));
        TU_OK(cupool_pipeline_launch(p, s1));
        check_ranks(out, step[i].grid, step[i].cx, i);
        distinct += !seen[step[i].cx];
        seen[step[i].cx] = 1;
        cupool_graph_stats_t b = gstats();
        if (graphs) {
            ck_assert_uint_eq(b.misses - a.misses, (unsigned)distinct);
            ck_assert_uint_eq(b.instantiations - a.instantiations, (unsigned)distinct);
            ck_assert_uint_eq(b.hits - a.hits, (unsigned)(i + 1 - distinct));
            ck_assert_uint_eq(b.update_failures, a.update_failures);
        } else {
            ck_assert_uint_eq(b.eager_launches - a.eager_launches, (unsigned)i + 1);
            ck_assert_uint_eq(b.instantiations, a.instantiations);
        }
    }
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(tu.cuMemFree(out));
}

START_TEST(cluster_dimension_is_structure)
{
    if (tu_clusters_or_skip("cluster_dimension_is_structure"))
        cluster_steps(1);
}
END_TEST

START_TEST(cluster_dimension_eager)
{
    setup_env("CUPOOL_GRAPH_DISABLE", "1");
    if (tu_clusters_or_skip("cluster_dimension_eager"))
        cluster_steps(0);
}
END_TEST

/* Simulated driver: the builtin kernel launch_attrs writes the attributes it ran with. Node 0
 * gives every attribute a node takes (on a grid of 4); node 1, after it, programmatic stream
 * serialization only. On a stream of priority -2. */
static void probe_describe(cupool_pipeline_t p, CUfunction probe, CUdeviceptr out, int prio)
{
    CUlaunchAttribute a[8];
    memset(a, 0, sizeof a);
    a[0] = cluster_attr(2);
    a[1].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION;
    a[1].value.preferredClusterDim.x = 4;
    a[1].value.preferredClusterDim.y = a[1].value.preferredClusterDim.z = 1;
    a[2].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a[2].value.cooperative = 7; /* nonzero: cooperative */
    a[3].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    a[3].value.priority = prio;
    a[4].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
    a[4].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
    a[5].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP;
    a[5].value.memSyncDomainMap.default_ = 2;
    a[5].value.memSyncDomainMap.remote = 3;
    a[6].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    a[6].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    a[7].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
    CUdeviceptr out1 = out + 4 * FAKECUDA_LAUNCH_ATTRS_WORDS;
    void *args0[] = {&out}, *args1[] = {&out1};
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_kernel_ex(p, probe, 4, 1, 1, 1, 1, 1, 0, args0, a, 8, NULL));
    CUlaunchAttribute pss;
    memset(&pss, 0, sizeof pss);
    pss.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pss.value.programmaticStreamSerializationAllowed = 1;
    TU_OK(cupool_pipeline_kernel_ex(p, probe, 1, 1, 1, 1, 1, 1, 0, args1, &pss, 1, NULL));
}

/* The words launch_attrs wrote for node `node`. */
static void probe_read(CUdeviceptr out, int node, unsigned *w)
{
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(tu.cuMemcpyDtoH(w, out + 4 * FAKECUDA_LAUNCH_ATTRS_WORDS * (CUdeviceptr)node,
                          4 * FAKECUDA_LAUNCH_ATTRS_WORDS));
}

/* Both nodes of probe_describe, launched (graph or eager): node 0 ran with every attribute
 * it was given, value by value (its priority: -3 or -1, alternately a new signature each);
 * node 1 with its programmatic edge from node 0 (graph) or the attribute (eager). Node 1
 * gives no priority: in a graph instantiated with node priorities it runs at a node's default
 * (0), node by node at the stream's (-2). */
static void launch_attributes_reach(int graphs)
{
    CUfunction probe;
    TU_OK(tu.cuModuleGetFunction(&probe, k.module, "launch_attrs"));
    CUdeviceptr out;
    TU_OK(tu.cuMemAlloc(&out, 2 * 4 * FAKECUDA_LAUNCH_ATTRS_WORDS));
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, -2));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    cupool_graph_stats_t a = gstats();
    static const int prio[] = {-3, -3, -1, -3, -1};
    for (int i = 0; i < 5; i++) {
        TU_OK(tu.cuMemsetD32(out, 0xdead, 2 * FAKECUDA_LAUNCH_ATTRS_WORDS));
        probe_describe(p, probe, out, prio[i]);
        TU_OK(cupool_pipeline_launch(p, s));
        unsigned w[FAKECUDA_LAUNCH_ATTRS_WORDS];
        probe_read(out, 0, w);
        ck_assert_uint_eq(w[FAKECUDA_LA_CLUSTER_X], 2);
        ck_assert_uint_eq(w[FAKECUDA_LA_CLUSTER_Y], 1);
        ck_assert_uint_eq(w[FAKECUDA_LA_CLUSTER_Z], 1);
        ck_assert_uint_eq(w[FAKECUDA_LA_PREFERRED_CLUSTER_X], 4);
        ck_assert_uint_eq(w[FAKECUDA_LA_COOPERATIVE], 1);
        ck_assert_int_eq((int)w[FAKECUDA_LA_PRIORITY], prio[i]);
        ck_assert_uint_eq(w[FAKECUDA_LA_PROGRAMMATIC], 0);
        ck_assert_uint_eq(w[FAKECUDA_LA_MEM_SYNC_DOMAIN], CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE);
        ck_assert_uint_eq(w[FAKECUDA_LA_SYNC_MAP_DEFAULT], 2);
        ck_assert_uint_eq(w[FAKECUDA_LA_SYNC_MAP_REMOTE], 3);
        ck_assert_uint_eq(w[FAKECUDA_LA_CLUSTER_POLICY], CU_CLUSTER_SCHEDULING_POLICY_SPREAD);
        probe_read(out, 1, w);
        ck_assert_uint_eq(w[FAKECUDA_LA_CLUSTER_X], 1);
        ck_assert_uint_eq(w[FAKECUDA_LA_COOPERATIVE], 0);
        ck_assert_uint_eq(w[FAKECUDA_LA_PROGRAMMATIC], 1);
        ck_assert_int_eq((int)w[FAKECUDA_LA_PRIORITY], graphs ? 0 : -2);
    }
    cupool_graph_stats_t b = gstats();
    if (graphs) { /* priorities -3 and -1: two signatures, each instantiated once */
        ck_assert_uint_eq(b.misses - a.misses, 2);
        ck_assert_uint_eq(b.instantiations - a.instantiations, 2);
        ck_assert_uint_eq(b.hits - a.hits, 3);
    } else {
        ck_assert_uint_eq(b.eager_launches - a.eager_launches, 5);
    }
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_stream_release(s));
    TU_OK(tu.cuMemFree(out));
}

/* A kernel of nine parameters of sizes 8 (the output), 4, 2, 1, 16, 8, 4, 8 and 4 bytes (its
 * layout longer than a cache line, sizes other than 4 and 8 among them): it writes the eight
 * values after the first, packed (47 bytes), to its output. */
static const size_t wide_sizes[9] = {8, 4, 2, 1, 16, 8, 4, 8, 4};
#define WIDE_BYTES 47
static void k_wide(void **args, const unsigned int grid[3], const unsigned int block[3])
{
    (void)grid, (void)block;
    uint64_t out;
    memcpy(&out, args[0], 8);
    unsigned char *o = (unsigned char *)(uintptr_t)out;
    for (int i = 1; i < 9; i++) {
        memcpy(o, args[i], wide_sizes[i]);
        o += wide_sizes[i];
    }
}

/* Two wide kernels refilled per request: a change of any byte of any argument of the second
 * (the first and last byte of each) reaches the kernel, and the node alone is updated; the
 * same description again updates nothing and launches the changed values. */
START_TEST(refill_detects_every_argument_byte_of_a_wide_kernel)
{
    ck_assert_int_eq(tu_fake.register_kernel("wide9", 9, wide_sizes, k_wide), 0);
    CUfunction wide;
    TU_OK(tu.cuModuleGetFunction(&wide, k.module, "wide9"));
    CUdeviceptr out[2];
    for (int j = 0; j < 2; j++)
        TU_OK(tu.cuMemAlloc(&out[j], 64));
    unsigned char v[2][WIDE_BYTES]; /* each node's argument values, packed */
    for (int j = 0; j < 2; j++)
        for (int b = 0; b < WIDE_BYTES; b++)
            v[j][b] = (unsigned char)(j * 100 + b);
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    uint64_t updated = 0;
    for (int step = 0; step <= 2 * 8 + 1; step++) {
        /* step 0: the first launch; then the first and last byte of argument a changed in
         * turn (step 2a - 1, 2a); the last step describes the same again */
        int a = (step + 1) / 2, at = 0;
        if (step > 0 && step <= 16) {
            for (int i = 1; i < a; i++)
                at += (int)wide_sizes[i];
            if (step % 2 == 0)
                at += (int)wide_sizes[a] - 1;
            v[1][at] ^= 0x5a;
        }
        TU_OK(cupool_pipeline_reset(p));
        for (int j = 0; j < 2; j++) {
            void *args[9] = {&out[j]};
            unsigned char *at_j = v[j];
            for (int i = 1; i < 9; i++) {
                args[i] = at_j;
                at_j += wide_sizes[i];
            }
            TU_OK(cupool_pipeline_kernel(p, wide, 1, 1, 1, 1, 1, 1, 0, args, NULL));
        }
        TU_OK(cupool_pipeline_launch(p, s1));
        TU_OK(tu.cuStreamSynchronize(s1));
        for (int j = 0; j < 2; j++) {
            unsigned char got[WIDE_BYTES];
            TU_OK(tu.cuMemcpyDtoH(got, out[j], WIDE_BYTES));
            ck_assert_msg(memcmp(got, v[j], WIDE_BYTES) == 0,
                          "step %d: node %d ran stale arguments", step, j);
        }
        cupool_graph_stats_t st = gstats();
        if (step > 0)
            ck_assert_uint_eq(st.nodes_updated, updated + (step <= 16));
        updated = st.nodes_updated;
        ck_assert_uint_eq(st.instantiations, 1);
    }
    TU_OK(cupool_pipeline_destroy(p));
    for (int j = 0; j < 2; j++)
        TU_OK(tu.cuMemFree(out[j]));
}
END_TEST

/* A kernel whose layout changes under the same name (and so the same CUfunction): two
 * parameters (the counter, a 64-bit addend), then, re-registered, one (the counter, plus 1). */
static void k_relayout2(void **args, const unsigned int grid[3], const unsigned int block[3])
{
    (void)grid, (void)block;
    uint64_t ptr, add;
    memcpy(&ptr, args[0], 8);
    memcpy(&add, args[1], 8);
    *(unsigned *)(uintptr_t)ptr += (unsigned)add;
}

static void k_relayout1(void **args, const unsigned int grid[3], const unsigned int block[3])
{
    (void)grid, (void)block;
    uint64_t ptr;
    memcpy(&ptr, args[0], 8);
    *(unsigned *)(uintptr_t)ptr += 1;
}

/* The cache's bytes are added and taken away whole: an exec's snapshot that grows while it is
 * cached (a pipeline whose arguments are longer than the entry's first exec took, for the same
 * signature: here a pipeline described before cupool_trim() dropped the layout of a function
 * whose layout then changed, launched after one described with the new layout) leaves the
 * bytes at 0, on the whole cache and on its device, once everything is trimmed. */
START_TEST(grown_snapshot_keeps_the_bytes_exact)
{
    static const size_t two[2] = {8, 8}, one[1] = {8};
    ck_assert_int_eq(tu_fake.register_kernel("relayout", 2, two, k_relayout2), 0);
    CUfunction f;
    TU_OK(tu.cuModuleGetFunction(&f, k.module, "relayout"));
    CUdeviceptr ptr = mem + 4 * 5;
    uint64_t add = 10;
    cupool_pipeline_t a, b;
    TU_OK(cupool_pipeline_create(&a));
    TU_OK(cupool_pipeline_create(&b));
    TU_OK(cupool_pipeline_kernel(a, f, 1, 1, 1, 1, 1, 1, 0, (void *[]){&ptr, &add}, NULL));
    TU_OK(cupool_pipeline_launch(a, s1)); /* a: 16 bytes of arguments */
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(cupool_trim());
    ck_assert_int_eq(tu_fake.register_kernel("relayout", 1, one, k_relayout1), 0);
    TU_OK(cupool_pipeline_kernel(b, f, 1, 1, 1, 1, 1, 1, 0, (void *[]){&ptr}, NULL));
    TU_OK(cupool_pipeline_launch(b, s1)); /* b: 8 bytes, the same signature: a new entry */
    TU_OK(cupool_pipeline_launch(a, s1)); /* a hits b's entry: its exec's snapshot grows */
    TU_OK(cupool_pipeline_launch(b, s1));
    TU_OK(tu.cuCtxSynchronize());
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.misses, 2);
    TU_OK(cupool_trim());
    st = gstats();
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.execs, 0);
    ck_assert_uint_eq(st.bytes, 0);
    cupool_graph_stats_t d = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_device_get(tu_dev, &d));
    ck_assert_uint_eq(d.bytes, 0);
    TU_OK(cupool_pipeline_destroy(a));
    TU_OK(cupool_pipeline_destroy(b));
}
END_TEST

START_TEST(launch_attributes_reach_the_kernel)
{
    launch_attributes_reach(1);
}
END_TEST

START_TEST(launch_attributes_reach_the_kernel_eagerly)
{
    setup_env("CUPOOL_GRAPH_DISABLE", "1");
    launch_attributes_reach(0);
}
END_TEST

/* Bad attributes are refused with a message naming the problem, before anything is written:
 * the pipeline keeps its nodes, and its launches return the first add's error until a reset.
 * Attributes given as CU_LAUNCH_ATTRIBUTE_IGNORE only are a plain kernel: the same signature
 * as cupool_pipeline_kernel's. */
static void refused_ex(cupool_pipeline_t p, const CUlaunchAttribute *a, unsigned n,
                       unsigned grid, const char *says)
{
    CUdeviceptr ptr = mem;
    unsigned one = 1;
    void *args[] = {&ptr, &one};
    TU_EQ(cupool_pipeline_kernel_ex(p, k.add_u32, grid, 1, 1, 1, 1, 1, 0, args, a, n, NULL),
          CUDA_ERROR_INVALID_VALUE);
    ck_assert_msg(strstr(cupool_error_string(), says), "expected \"%s\" in: %s", says,
                  cupool_error_string());
}

START_TEST(kernel_ex_bad_input)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 2, 6, 1, 0);
    CUlaunchAttribute a[CUPOOL_PIPELINE_ATTRS_MAX + 1];
    memset(a, 0, sizeof a);
    refused_ex(p, NULL, 1, 1, "attrs is NULL");
    refused_ex(p, a, CUPOOL_PIPELINE_ATTRS_MAX + 1, 1, "at most 16");
    a[0].id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
    refused_ex(p, a, 1, 1, "launch attribute 1 (CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW)");
    a[0].id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
    refused_ex(p, a, 1, 1, "CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) is not supported");
    a[0].id = (CUlaunchAttributeID)99;
    refused_ex(p, a, 1, 1, "launch attribute 99");
    a[0] = cluster_attr(2);
    a[1] = cluster_attr(2);
    refused_ex(p, a, 2, 4, "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION given twice");
    a[0] = cluster_attr(0);
    refused_ex(p, a, 1, 4, "each must be at least 1");
    a[0] = cluster_attr(3);
    refused_ex(p, a, 1, 8, "does not divide the grid 8x1x1");
    a[0] = cluster_attr(2);
    a[1].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION;
    a[1].value.preferredClusterDim.x = 3;
    a[1].value.preferredClusterDim.y = a[1].value.preferredClusterDim.z = 1;
    refused_ex(p, a, 2, 12, "must be a multiple of the cluster dimension 2x1x1");
    memset(a, 0, sizeof a);
    a[0].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
    a[0].value.memSyncDomain = (CUlaunchMemSyncDomain)7;
    refused_ex(p, a, 1, 1, "memory sync domain 7");
    a[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    a[0].value.clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)9;
    refused_ex(p, a, 1, 1, "cluster scheduling policy 9");
    a[0] = cluster_attr(1);
    TU_EQ(cupool_pipeline_kernel_ex(NULL, k.add_u32, 1, 1, 1, 1, 1, 1, 0, NULL, a, 1, NULL),
          CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_kernel_ex(p, k.add_u32, 1, 0, 1, 1, 1, 1, 0, NULL, a, 1, NULL),
          CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_kernel_ex(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, NULL, a, 1, NULL),
          CUDA_ERROR_INVALID_VALUE); /* no args for two parameters */
    /* nothing was added, the first error is remembered */
    cupool_graph_stats_t before = gstats();
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_nonnull(strstr(cupool_error_string(), "an add failed with"));
    ck_assert_uint_eq(gstats().launches, before.launches);
    TU_OK(cupool_pipeline_reset(p));
    fill_chain(p, 2, 6, 1, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(6), 2);
    /* IGNORE only: the plain kernel's signature (a hit on the entry just made) */
    memset(a, 0, sizeof a);
    CUdeviceptr ptr = mem + 4 * 6;
    unsigned one = 1;
    void *args[] = {&ptr, &one};
    TU_OK(cupool_pipeline_reset(p));
    for (int i = 0; i < 2; i++)
        TU_OK(cupool_pipeline_kernel_ex(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, a, 3, NULL));
    before = gstats();
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(6), 4);
    ck_assert_uint_eq(gstats().hits, before.hits + 1);
    ck_assert_uint_eq(gstats().misses, before.misses);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* A pipeline of kernels with and without attributes (cooperative, which every GPU of the
 * H100/H200 kind takes), refilled per request: an unchanged refill compares nothing, changed
 * arguments compare only their nodes; an attribute dropped from one node is another
 * signature (a miss), and taking it back a hit of the first entry. */
START_TEST(refill_with_attributes)
{
    CUlaunchAttribute coop;
    memset(&coop, 0, sizeof coop);
    coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    coop.value.cooperative = 1;
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    CUdeviceptr ptr = mem + 4 * 7;
    unsigned v[6] = {1, 1, 1, 1, 1, 1}, total = 0;
    for (int round = 0; round < 6; round++) {
        if (round == 2)
            v[1] = 10, v[4] = 20; /* two arguments change */
        int drop = round == 3;  /* node 3 without its attribute */
        TU_OK(cupool_pipeline_reset(p));
        for (int i = 0; i < 6; i++) {
            void *args[] = {&ptr, &v[i]};
            if (i % 2 == 1 && !(drop && i == 3))
                TU_OK(cupool_pipeline_kernel_ex(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, &coop,
                                                1, NULL));
            else
                TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
        }
        cupool_graph_stats_t before = gstats();
        TU_OK(cupool_pipeline_launch(p, s1));
        cupool_graph_stats_t after = gstats();
        total += sum_of(v, 6);
        ck_assert_uint_eq(counter(7), total);
        unsigned misses = (unsigned)(after.misses - before.misses);
        unsigned compared = (unsigned)(after.nodes_compared - before.nodes_compared);
        switch (round) {
        case 0: /* first */
        case 3: /* another structure */
            ck_assert_uint_eq(misses, 1);
            break;
        case 1: /* unchanged */
        case 5:
            ck_assert_uint_eq(misses, 0);
            ck_assert_uint_eq(compared, 0);
            break;
        case 2:
            ck_assert_uint_eq(misses, 0);
            ck_assert_uint_eq(compared, 2);
            ck_assert_uint_eq(after.nodes_updated - before.nodes_updated, 2);
            break;
        default: /* 4: back to the first structure: its exec, compared node by node */
            ck_assert_uint_eq(misses, 0);
            ck_assert_uint_eq(after.instantiations - before.instantiations, 0);
            break;
        }
    }
    ck_assert_uint_eq(gstats().instantiations, 2);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* A driver without cuGraphKernelNodeSetAttribute: a kernel with attributes cannot be a graph
 * node; the add says so (CUDA_ERROR_NOT_SUPPORTED, the entry point named), the pipeline is
 * marked failed, and kernels without attributes still launch. */
START_TEST(kernel_ex_without_node_attributes)
{
    setenv("FAKECUDA_HIDE", "cuGraphKernelNodeSetAttribute", 1);
    setup();
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    CUdeviceptr ptr = mem + 4 * 8;
    unsigned one = 1;
    void *args[] = {&ptr, &one};
    CUlaunchAttribute at = cluster_attr(1);
    TU_EQ(cupool_pipeline_kernel_ex(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, &at, 1, NULL),
          CUDA_ERROR_NOT_SUPPORTED);
    ck_assert_msg(strstr(cupool_error_string(), "lacks cuGraphKernelNodeSetAttribute"), "%s",
                  cupool_error_string());
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_NOT_SUPPORTED); /* the failed add, first */
    TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_NOT_SUPPORTED); /* the failed add */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(8), 1);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* Node by node without cuLaunchKernelEx: the same, naming cuLaunchKernelEx. */
START_TEST(kernel_ex_eager_without_launch_ex)
{
    setenv("FAKECUDA_HIDE", "cuLaunchKernelEx", 1);
    setup_env("CUPOOL_GRAPH_DISABLE", "1");
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    CUdeviceptr ptr = mem + 4 * 8;
    unsigned one = 1;
    void *args[] = {&ptr, &one};
    CUlaunchAttribute at = cluster_attr(1);
    TU_EQ(cupool_pipeline_kernel_ex(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, &at, 1, NULL),
          CUDA_ERROR_NOT_SUPPORTED);
    ck_assert_msg(strstr(cupool_error_string(), "lacks cuLaunchKernelEx"), "%s",
                  cupool_error_string());
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_kernel_ex(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL, 0, NULL));
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(8), 1);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* ---- upload at instantiation ---- */

/* Simulated driver: every exec cupool instantiates (a miss, a second stream's exec, a
 * capture) is uploaded on the stream of the launch it is for, so no launch uploads one;
 * with CUPOOL_GRAPH_UPLOAD=0, or a driver without cuGraphInstantiateWithParams, each exec's
 * first launch does. Results are the same either way. */
static void uploads_run(int expect_uploads)
{
    unsigned long up0 = tu_fake.graph_uploads(), at_launch0 = tu_fake.graph_launch_uploads();
    cupool_graph_stats_t a = gstats();
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (int i = 0; i < 3; i++) {
        fill_chain(p, 4, 9, 1, 0);
        TU_OK(cupool_pipeline_launch(p, s1));
        TU_OK(cupool_pipeline_launch(p, s2));
    }
    struct cap_args c = {0, 2, 1, 9, CUDA_SUCCESS};
    TU_OK(cupool_capture_launch(45, s1, captured_work, &c, CUPOOL_CAPTURE_REPLAY));
    TU_OK(cupool_capture_launch(45, s1, captured_work, &c, CUPOOL_CAPTURE_REPLAY));
    ck_assert_uint_eq(counter(9), 6 * 4 + 2 * 2);
    cupool_graph_stats_t b = gstats();
    unsigned long inst = (unsigned long)(b.instantiations - a.instantiations);
    ck_assert_uint_eq(inst, 3); /* the pipeline's two execs, the capture's */
    unsigned long up = tu_fake.graph_uploads() - up0;
    unsigned long at_launch = tu_fake.graph_launch_uploads() - at_launch0;
    ck_assert_uint_eq(up, inst); /* each exec uploaded once, one way or the other */
    ck_assert_uint_eq(at_launch, expect_uploads ? 0 : inst);
    ck_assert_uint_eq(b.uploads - a.uploads, expect_uploads ? inst : 0);
    TU_OK(cupool_pipeline_destroy(p));
}

START_TEST(new_execs_uploaded_at_instantiation)
{
    uploads_run(1);
}
END_TEST

START_TEST(upload_off_uploads_at_first_launch)
{
    setup_env("CUPOOL_GRAPH_UPLOAD", "0");
    uploads_run(0);
}
END_TEST

START_TEST(upload_without_instantiate_with_params)
{
    setenv("FAKECUDA_HIDE", "cuGraphInstantiateWithParams", 1);
    setup();
    uploads_run(0);
}
END_TEST

/* A refused instantiation with upload says what the driver's result info said. */
START_TEST(refused_instantiation_names_its_result)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 2, 10, 1, 0);
    tu_fake.fault("cuGraphInstantiateWithParams", 0, 1, CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE);
    ck_assert_msg(strstr(cupool_error_string(), "cuGraphInstantiateWithParams") &&
                      strstr(cupool_error_string(), "CUDA_GRAPH_INSTANTIATE_ERROR"),
                  "%s", cupool_error_string());
    TU_OK(cupool_pipeline_launch(p, s1)); /* and then it instantiates */
    ck_assert_uint_eq(counter(10), 2);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* ---- precise updates ---- */

/* Simulated driver: a capture updated on every call whose update is refused once for each
 * reason cuGraphExecUpdate's result info can give: each reason counted exactly once, each
 * cured by one instantiation, results right every time. A refusal no instantiation cures
 * (the call failing with CUDA_ERROR_OUT_OF_MEMORY) is the launch's error, counted as other
 * and uncured, launches nothing and leaves the exec: the next launch updates it. */
START_TEST(each_update_refusal_counted_exactly)
{
    struct cap_args c = {0, 2, 1, 11, CUDA_SUCCESS};
    unsigned total = 0;
    TU_OK(cupool_capture_launch(46, s1, captured_work, &c, CUPOOL_CAPTURE_UPDATE));
    total += 2 * c.value;
    static const CUgraphExecUpdateResult reasons[] = {
        CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED,
        CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE,
        CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED,
        CU_GRAPH_EXEC_UPDATE_ERROR,
    };
    enum { NR = sizeof(reasons) / sizeof(reasons[0]) };
    for (int i = 0; i < NR; i++) {
        cupool_graph_stats_t a = gstats();
        tu_fake.exec_update_refuse(reasons[i], 1);
        c.value = 10 + (unsigned)i;
        TU_OK(cupool_capture_launch(46, s1, captured_work, &c, CUPOOL_CAPTURE_UPDATE));
        total += 2 * c.value;
        ck_assert_uint_eq(counter(11), total);
        cupool_graph_stats_t b = gstats();
        const uint64_t got[NR] = {
            b.update_topology_changed - a.update_topology_changed,
            b.update_node_type_changed - a.update_node_type_changed,
            b.update_function_changed - a.update_function_changed,
            b.update_parameters_changed - a.update_parameters_changed,
            b.update_not_supported - a.update_not_supported,
            b.update_unsupported_function_change - a.update_unsupported_function_change,
            b.update_attributes_changed - a.update_attributes_changed,
            b.update_other - a.update_other,
        };
        for (int j = 0; j < NR; j++)
            ck_assert_msg(got[j] == (j == i), "refused for reason %d: counter %d moved by %llu",
                          (int)reasons[i], j, (unsigned long long)got[j]);
        ck_assert_uint_eq(b.update_failures - a.update_failures, 1);
        ck_assert_uint_eq(b.instantiations - a.instantiations, 1);
        ck_assert_uint_eq(b.update_errors, a.update_errors);
    }
    /* a structure change, refused by the driver itself (topology) */
    cupool_graph_stats_t a = gstats();
    c.kernels = 3;
    TU_OK(cupool_capture_launch(46, s1, captured_work, &c, CUPOOL_CAPTURE_UPDATE));
    total += 3 * c.value;
    ck_assert_uint_eq(counter(11), total);
    cupool_graph_stats_t b = gstats();
    ck_assert_uint_eq(b.update_topology_changed - a.update_topology_changed, 1);
    ck_assert_uint_eq(b.instantiations - a.instantiations, 1);
    /* not curable: the error, nothing launched, the exec kept */
    tu_fake.fault("cuGraphExecUpdate", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
    c.value = 100;
    TU_EQ(cupool_capture_launch(46, s1, captured_work, &c, CUPOOL_CAPTURE_UPDATE),
          CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_msg(strstr(cupool_error_string(), "would not cure"), "%s", cupool_error_string());
    ck_assert_uint_eq(counter(11), total);
    cupool_graph_stats_t d = gstats();
    ck_assert_uint_eq(d.update_other - b.update_other, 1);
    ck_assert_uint_eq(d.update_errors - b.update_errors, 1);
    ck_assert_uint_eq(d.instantiations, b.instantiations);
    ck_assert_uint_eq(d.update_failures, b.update_failures);
    TU_OK(cupool_capture_launch(46, s1, captured_work, &c, CUPOOL_CAPTURE_UPDATE));
    total += 3 * c.value;
    ck_assert_uint_eq(counter(11), total);
    cupool_graph_stats_t e = gstats();
    ck_assert_uint_eq(e.instantiations, d.instantiations); /* updated, not instantiated */
    ck_assert_uint_eq(e.updates - d.updates, 1);
}
END_TEST

/* Simulated driver: a pipeline's node update refused in a way no instantiation cures
 * (CUDA_ERROR_OUT_OF_MEMORY): counted (node_update_refusals, update_errors), returned by the
 * launch, which launches nothing, not even node by node; the next launch instantiates an exec
 * in its place. One that instantiation cures (CUDA_ERROR_INVALID_VALUE: refused_update_
 * reinstantiates) is counted the same way but not as an error. */
START_TEST(uncured_node_refusal_returns_the_error)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    fill_chain(p, 3, 12, 1, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    cupool_graph_stats_t a = gstats();
    tu_fake.fault("cuGraphExecKernelNodeSetParams", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
    fill_chain(p, 3, 12, 5, 0);
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_msg(strstr(cupool_error_string(), "would not cure"), "%s", cupool_error_string());
    ck_assert_uint_eq(counter(12), 3);
    cupool_graph_stats_t b = gstats();
    ck_assert_uint_eq(b.node_update_refusals - a.node_update_refusals, 1);
    ck_assert_uint_eq(b.update_errors - a.update_errors, 1);
    ck_assert_uint_eq(b.update_failures, a.update_failures);
    ck_assert_uint_eq(b.instantiations, a.instantiations);
    ck_assert_uint_eq(b.eager_launches, a.eager_launches);
    fill_chain(p, 3, 12, 5, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(12), 3 + 15);
    ck_assert_uint_eq(gstats().instantiations, b.instantiations + 1);
    tu_fake.fault("cuGraphExecKernelNodeSetParams", 0, 1, CUDA_ERROR_INVALID_VALUE);
    fill_chain(p, 3, 12, 2, 0);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(12), 3 + 15 + 6);
    cupool_graph_stats_t c = gstats();
    ck_assert_uint_eq(c.node_update_refusals - b.node_update_refusals, 1);
    ck_assert_uint_eq(c.update_errors, b.update_errors);
    ck_assert_uint_eq(c.update_failures - b.update_failures, 1);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* ---- two devices: the cache holds the entries of both, counted per device ---- */

/* One device's side of a two-device test: its primary context, its kernels, a stream of its
 * own and four counters in its memory. */
struct dev_side {
    CUcontext ctx;
    struct tu_kernels k;
    CUstream s;
    CUdeviceptr mem;
};

/* Two simulated devices (FAKECUDA_DEVICES; on the real driver, the host's), each side made
 * with its context current. 0 when the host has one device: the test then says so and
 * checks nothing. */
static int two_devices(struct dev_side dv[2], const char *test)
{
    setenv("FAKECUDA_DEVICES", "2", 1);
    tu_setup();
    CUcontext ctx[2];
    if (!tu_two_devices(test, ctx))
        return 0;
    for (int d = 0; d < 2; d++) {
        dv[d].ctx = ctx[d];
        TU_OK(tu.cuCtxSetCurrent(dv[d].ctx));
        tu_load_kernels(&dv[d].k);
        TU_OK(tu.cuStreamCreate(&dv[d].s, CU_STREAM_NON_BLOCKING));
        TU_OK(tu.cuMemAlloc(&dv[d].mem, 4 * 4));
        TU_OK(tu.cuMemsetD32(dv[d].mem, 0, 4));
    }
    return 1;
}

/* Signature A on a device: three kernels adding v, v + 1 and v + 2 into its counter 0. */
static void fill_dev_a(cupool_pipeline_t p, const struct dev_side *d, unsigned v)
{
    TU_OK(cupool_pipeline_reset(p));
    CUdeviceptr ptr = d->mem;
    for (unsigned i = 0; i < 3; i++) {
        unsigned vi = v + i;
        void *args[] = {&ptr, &vi};
        TU_OK(cupool_pipeline_kernel(p, d->k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
}

/* Signature B on a device: its counter 1 set to v, then v added into its counter 2. */
static void fill_dev_b(cupool_pipeline_t p, const struct dev_side *d, unsigned v)
{
    TU_OK(cupool_pipeline_reset(p));
    CUdeviceptr c1 = d->mem + 4, c2 = d->mem + 8;
    TU_OK(cupool_pipeline_kernel(p, d->k.set_u32, 1, 1, 1, 1, 1, 1, 0, (void *[]){&c1, &v},
                                 NULL));
    TU_OK(cupool_pipeline_kernel(p, d->k.add_u32, 1, 1, 1, 1, 1, 1, 0, (void *[]){&c2, &v},
                                 NULL));
}

/* Device d's counters, its context current (and left current). */
static void dev_counters(const struct dev_side *d, unsigned v[4])
{
    TU_OK(tu.cuCtxSetCurrent(d->ctx));
    TU_OK(tu.cuCtxSynchronize());
    TU_OK(tu.cuMemcpyDtoH(v, d->mem, 4 * sizeof(unsigned)));
}

static cupool_graph_stats_t dstats(int device)
{
    cupool_graph_stats_t st = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_device_get(device, &st));
    ck_assert_uint_eq(st.size, sizeof(st));
    return st;
}

/* The figures kept per device, summed over every device, are the whole cache's (nothing of
 * the test's is of an unknown device); the others are 0 per device. */
static void devices_sum_to_the_totals(void)
{
    cupool_graph_stats_t sum, all = gstats();
    memset(&sum, 0, sizeof sum);
    for (int d = 0; d < CUPOOL_STATS_DEVICES; d++) {
        cupool_graph_stats_t g = dstats(d);
        sum.launches += g.launches;
        sum.hits += g.hits;
        sum.misses += g.misses;
        sum.instantiations += g.instantiations;
        sum.updates += g.updates;
        sum.nodes_updated += g.nodes_updated;
        sum.evictions += g.evictions;
        sum.entries += g.entries;
        sum.execs += g.execs;
        sum.bytes += g.bytes;
        sum.claims_lock_free += g.claims_lock_free;
        sum.claims_locked += g.claims_locked;
        ck_assert_uint_eq(g.launches, g.claims_lock_free + g.claims_locked);
        ck_assert_uint_eq(g.launches, g.hits + g.misses);
        ck_assert_uint_eq(g.update_failures + g.eager_launches + g.nodes_compared + g.uploads +
                              g.update_other + g.node_update_refusals + g.update_errors,
                          0);
    }
    ck_assert_uint_eq(sum.launches, all.launches);
    ck_assert_uint_eq(sum.hits, all.hits);
    ck_assert_uint_eq(sum.misses, all.misses);
    ck_assert_uint_eq(sum.instantiations, all.instantiations);
    ck_assert_uint_eq(sum.updates, all.updates);
    ck_assert_uint_eq(sum.nodes_updated, all.nodes_updated);
    ck_assert_uint_eq(sum.evictions, all.evictions);
    ck_assert_uint_eq(sum.entries, all.entries);
    ck_assert_uint_eq(sum.execs, all.execs);
    ck_assert_uint_eq(sum.bytes, all.bytes);
    ck_assert_uint_eq(sum.claims_lock_free, all.claims_lock_free);
    ck_assert_uint_eq(sum.claims_locked, all.claims_locked);
}

/* After a trim: each device evicted `evictions` entries in all and holds nothing. */
static void devices_trimmed_to_nothing(uint64_t evictions)
{
    for (int d = 0; d < 2; d++) {
        cupool_graph_stats_t g = dstats(d);
        ck_assert_uint_eq(g.evictions, evictions);
        ck_assert_uint_eq(g.entries, 0);
        ck_assert_uint_eq(g.execs, 0);
        ck_assert_uint_eq(g.bytes, 0);
    }
}

/* The same structures launched with each device current on a stream of its own, interleaved:
 * one pipeline described for each device in turn (signature A) and a pipeline per device
 * (signature B). The cache holds an entry per (device, signature) at once; every launch runs
 * its device's exec (the driver refuses an exec launched on another context's stream, and
 * each device's counters come out as its own launches made them); the statistics of each
 * device count its own launches, exactly, and add up to the whole cache's. */
START_TEST(two_devices_side_by_side_in_the_cache)
{
    struct dev_side dv[2];
    if (!two_devices(dv, "two_devices_side_by_side_in_the_cache"))
        return;
    enum { ROUNDS = 40 };
    cupool_pipeline_t a, b[2];
    TU_OK(cupool_pipeline_create(&a));
    for (int d = 0; d < 2; d++)
        TU_OK(cupool_pipeline_create(&b[d]));
    unsigned sum0[2] = {0, 0}, last1[2] = {0, 0}, sum2[2] = {0, 0};
    for (int round = 0; round < ROUNDS; round++)
        for (int d = 0; d < 2; d++) {
            TU_OK(tu.cuCtxSetCurrent(dv[d].ctx));
            unsigned v = 1 + (unsigned)round + 1000 * (unsigned)d;
            fill_dev_a(a, &dv[d], v);
            TU_OK(cupool_pipeline_launch(a, dv[d].s));
            fill_dev_b(b[d], &dv[d], 2 * v);
            TU_OK(cupool_pipeline_launch(b[d], dv[d].s));
            sum0[d] += 3 * v + 3;
            last1[d] = 2 * v;
            sum2[d] += 2 * v;
        }
    for (int d = 0; d < 2; d++) {
        unsigned v[4];
        dev_counters(&dv[d], v);
        ck_assert_uint_eq(v[0], sum0[d]);
        ck_assert_uint_eq(v[1], last1[d]);
        ck_assert_uint_eq(v[2], sum2[d]);
        ck_assert_uint_eq(v[3], 0);
    }
    cupool_graph_stats_t all = gstats();
    ck_assert_uint_eq(all.launches, 4 * ROUNDS);
    ck_assert_uint_eq(all.entries, 4); /* two signatures on each device, side by side */
    ck_assert_uint_eq(all.eager_launches, 0);
    for (int d = 0; d < 2; d++) {
        cupool_graph_stats_t g = dstats(d);
        ck_assert_uint_eq(g.launches, 2 * ROUNDS);
        ck_assert_uint_eq(g.misses, 2);
        ck_assert_uint_eq(g.hits, 2 * ROUNDS - 2);
        ck_assert_uint_eq(g.instantiations, 2);
        ck_assert_uint_eq(g.entries, 2);
        ck_assert_uint_eq(g.execs, 2); /* one stream */
        ck_assert_uint_gt(g.bytes, 0);
        /* from the second round on, each launch claims the exec its thread's hint names */
        ck_assert_uint_eq(g.claims_locked, 2);
        ck_assert_uint_eq(g.claims_lock_free, 2 * ROUNDS - 2);
        /* every launch after a signature's first changed every argument: A's 3, B's 2 */
        ck_assert_uint_eq(g.updates, 2 * (ROUNDS - 1));
        ck_assert_uint_eq(g.nodes_updated, 5 * (ROUNDS - 1));
        ck_assert_uint_eq(g.evictions, 0);
    }
    ck_assert_uint_eq(dstats(0).bytes + dstats(1).bytes, all.bytes);
    for (int d = 2; d < CUPOOL_STATS_DEVICES; d++)
        ck_assert_uint_eq(dstats(d).launches, 0);
    devices_sum_to_the_totals();

    /* a trim evicts each device's entries, counted on its device; the next launches miss
     * again, each on its device */
    TU_OK(cupool_trim());
    devices_trimmed_to_nothing(2);
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dv[d].ctx));
        fill_dev_a(a, &dv[d], 7);
        TU_OK(cupool_pipeline_launch(a, dv[d].s));
        sum0[d] += 3 * 7 + 3;
    }
    for (int d = 0; d < 2; d++) {
        unsigned v[4];
        dev_counters(&dv[d], v);
        ck_assert_uint_eq(v[0], sum0[d]);
        cupool_graph_stats_t g = dstats(d);
        ck_assert_uint_eq(g.misses, 3);
        ck_assert_uint_eq(g.launches, 2 * ROUNDS + 1);
        ck_assert_uint_eq(g.entries, 1);
        ck_assert_uint_eq(g.execs, 1);
        ck_assert_uint_eq(g.instantiations, 3);
    }
    devices_sum_to_the_totals();
    if (tu_fake.present) {
        /* what a wrong-device exec would meet: device 0's pipeline on device 1's stream is
         * refused (the launch reports it), nothing of device 1 is touched */
        TU_OK(tu.cuCtxSetCurrent(dv[0].ctx));
        fill_dev_a(a, &dv[0], 5);
        ck_assert_int_ne(cupool_pipeline_launch(a, dv[1].s), CUDA_SUCCESS);
        unsigned v[4];
        dev_counters(&dv[1], v);
        ck_assert_uint_eq(v[0], sum0[1]);
    }
    TU_OK(cupool_pipeline_destroy(a));
    for (int d = 0; d < 2; d++)
        TU_OK(cupool_pipeline_destroy(b[d]));
}
END_TEST

/* Two threads, each launching signature A on one device and then, after a barrier, on the
 * other: the claims each makes without the lock count in its own counters, per device, and
 * each device's statistics are the sum of both threads' for that device. */
enum { TWO_DEV_ROUNDS = 25 };
static struct dev_side two_dv[2];
static pthread_barrier_t two_dev_phase;

static void *two_dev_launcher(void *arg)
{
    int first = (int)(intptr_t)arg;
    cupool_pipeline_t p;
    if (cupool_pipeline_create(&p) != CUDA_SUCCESS)
        thread_errors++;
    for (int phase = 0; phase < 2; phase++) {
        int d = phase ? 1 - first : first;
        if (tu.cuCtxSetCurrent(two_dv[d].ctx) != CUDA_SUCCESS)
            thread_errors++;
        for (int round = 0; round < TWO_DEV_ROUNDS; round++) {
            /* (no Check assertion off the test's thread: counted instead) */
            CUdeviceptr ptr = two_dv[d].mem;
            unsigned v = 1 + (unsigned)round + 100 * (unsigned)phase;
            if (cupool_pipeline_reset(p) != CUDA_SUCCESS)
                thread_errors++;
            for (unsigned i = 0; i < 3; i++) {
                unsigned vi = v + i;
                if (cupool_pipeline_kernel(p, two_dv[d].k.add_u32, 1, 1, 1, 1, 1, 1, 0,
                                           (void *[]){&ptr, &vi}, NULL) != CUDA_SUCCESS)
                    thread_errors++;
            }
            if (cupool_pipeline_launch(p, two_dv[d].s) != CUDA_SUCCESS)
                thread_errors++;
        }
        if (tu.cuStreamSynchronize(two_dv[d].s) != CUDA_SUCCESS)
            thread_errors++;
        pthread_barrier_wait(&two_dev_phase); /* the other device's turn */
    }
    cupool_pipeline_destroy(p);
    return NULL;
}

START_TEST(two_devices_claim_lock_free_per_thread)
{
    if (!two_devices(two_dv, "two_devices_claim_lock_free_per_thread"))
        return;
    ck_assert_int_eq(pthread_barrier_init(&two_dev_phase, NULL, 2), 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, two_dev_launcher, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&two_dev_phase);
    ck_assert_int_eq(thread_errors, 0);
    /* each phase's launches add 3v + 3 for v = 1 + round (+ 100 in the second) */
    unsigned expect = 0;
    for (unsigned phase = 0; phase < 2; phase++)
        for (unsigned round = 0; round < TWO_DEV_ROUNDS; round++)
            expect += 3 * (1 + round + 100 * phase) + 3;
    for (int d = 0; d < 2; d++) {
        unsigned v[4];
        dev_counters(&two_dv[d], v);
        ck_assert_uint_eq(v[0], expect);
        cupool_graph_stats_t g = dstats(d);
        ck_assert_uint_eq(g.launches, 2 * TWO_DEV_ROUNDS);
        ck_assert_uint_eq(g.misses, 1);
        ck_assert_uint_eq(g.entries, 1);
        ck_assert_uint_eq(g.execs, 1); /* one stream: the second thread takes the first's */
        ck_assert_uint_eq(g.instantiations, 1);
        /* the miss; then the second thread's first launch, whose hints name nothing of this
         * device yet */
        ck_assert_uint_eq(g.claims_locked, 2);
        ck_assert_uint_eq(g.claims_lock_free, 2 * TWO_DEV_ROUNDS - 2);
        ck_assert_uint_eq(g.updates, 2 * TWO_DEV_ROUNDS - 1);
        ck_assert_uint_eq(g.nodes_updated, 3 * (2 * TWO_DEV_ROUNDS - 1));
    }
    devices_sum_to_the_totals();
    ck_assert_uint_eq(gstats().claims_lock_free, 4 * TWO_DEV_ROUNDS - 4);
}
END_TEST

/* Every path that counts per device, on each of two devices: a capture updated in place
 * (CUPOOL_CAPTURE_UPDATE, its update counted by the capture path), a pipeline's exec for a
 * second stream (a hit that instantiates), and a miss whose entry fails to build (counted on
 * its device all the same); each device's figures exact, their sums the totals. Then an entry
 * whose device the driver does not say counts in the totals alone, and a trim empties every
 * device. */
struct cover_capture {
    const struct dev_side *d;
    unsigned v;
};

static CUresult cover_capture_fn(CUstream stream, void *user)
{
    struct cover_capture *c = user;
    CUdeviceptr ptr = c->d->mem + 12;
    void *args[] = {&ptr, &c->v};
    return tu.cuLaunchKernel(c->d->k.add_u32, 1, 1, 1, 1, 1, 1, 0, stream, args, NULL);
}

START_TEST(two_devices_every_path_counts_on_its_device)
{
    struct dev_side dv[2];
    setenv("CUPOOL_GRAPH_UPLOAD", "1", 1); /* instantiated by cuGraphInstantiateWithParams */
    if (!two_devices(dv, "two_devices_every_path_counts_on_its_device"))
        return;
    cupool_pipeline_t a, b;
    TU_OK(cupool_pipeline_create(&a));
    TU_OK(cupool_pipeline_create(&b));
    CUstream other[2];
    unsigned sum3[2] = {0, 0};
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dv[d].ctx));
        TU_OK(tu.cuStreamCreate(&other[d], CU_STREAM_NON_BLOCKING));
        for (unsigned i = 0; i < 3; i++) { /* a miss, then two updates of its exec */
            struct cover_capture c = {&dv[d], 10 * (unsigned)d + i + 1};
            TU_OK(cupool_capture_launch(5, dv[d].s, cover_capture_fn, &c,
                                        CUPOOL_CAPTURE_UPDATE));
            sum3[d] += c.v;
        }
        TU_OK(tu.cuStreamSynchronize(dv[d].s));
        fill_dev_a(a, &dv[d], 1);
        TU_OK(cupool_pipeline_launch(a, dv[d].s)); /* a miss */
        TU_OK(tu.cuStreamSynchronize(dv[d].s));
        TU_OK(cupool_pipeline_launch(a, other[d])); /* a hit, with an exec of its own */
        if (tu_fake.present) { /* a miss whose entry fails to build */
            fill_dev_b(b, &dv[d], 1);
            tu_fake.fault("cuGraphInstantiateWithParams", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
            TU_EQ(cupool_pipeline_launch(b, dv[d].s), CUDA_ERROR_OUT_OF_MEMORY);
            tu_fake.fault_clear();
        }
    }
    int failed = tu_fake.present ? 1 : 0;
    for (int d = 0; d < 2; d++) {
        unsigned v[4];
        dev_counters(&dv[d], v);
        ck_assert_uint_eq(v[0], 2 * (1 + 2 + 3));
        ck_assert_uint_eq(v[3], sum3[d]);
        cupool_graph_stats_t g = dstats(d);
        ck_assert_uint_eq(g.launches, 3 + 2 + failed);
        ck_assert_uint_eq(g.misses, 1 + 1 + failed);
        ck_assert_uint_eq(g.hits, 2 + 1);
        ck_assert_uint_eq(g.instantiations, 1 + 2);
        ck_assert_uint_eq(g.updates, 2);
        ck_assert_uint_eq(g.entries, 2);
        ck_assert_uint_eq(g.execs, 1 + 2);
        ck_assert_uint_gt(g.bytes, 0);
    }
    devices_sum_to_the_totals();
    if (tu_fake.present) {
        /* the driver does not say the device of a new entry: the totals count it, no device
         * does */
        cupool_graph_stats_t before = gstats(), d1 = dstats(1);
        TU_OK(tu.cuCtxSetCurrent(dv[1].ctx));
        fill_dev_b(b, &dv[1], 2);
        tu_fake.fault("cuCtxGetDevice", 0, 1, CUDA_ERROR_INVALID_CONTEXT);
        TU_OK(cupool_pipeline_launch(b, dv[1].s));
        tu_fake.fault_clear();
        cupool_graph_stats_t after = gstats();
        ck_assert_uint_eq(after.launches, before.launches + 1);
        ck_assert_uint_eq(after.misses, before.misses + 1);
        ck_assert_uint_eq(after.entries, before.entries + 1);
        ck_assert_uint_eq(after.execs, before.execs + 1);
        ck_assert_uint_eq(dstats(1).launches, d1.launches);
        ck_assert_uint_eq(dstats(1).entries, d1.entries);
        TU_OK(cupool_trim());
        ck_assert_uint_eq(gstats().evictions, before.evictions + 2 + 2 + 1);
    } else {
        TU_OK(cupool_trim());
    }
    devices_trimmed_to_nothing(2);
    cupool_graph_stats_t all = gstats();
    ck_assert_uint_eq(all.entries, 0);
    ck_assert_uint_eq(all.execs, 0);
    ck_assert_uint_eq(all.bytes, 0);
    TU_OK(cupool_pipeline_destroy(a));
    TU_OK(cupool_pipeline_destroy(b));
}
END_TEST

/* Two captures of one key on device 0 miss at once: the first waits in its function until
 * the second has cached its entry, so the first's own entry is dropped and it takes the
 * second's; it needs an exec of its own (the second's last ran on another stream), whose
 * instantiation fails, and the launch lets the entry go. A third thread, on device 1, then
 * evicts that entry and reuses its struct for one of its own, without synchronising with
 * the first. The first's instantiation (of the entry it dropped) counts on device 0 all the
 * same: the launch took the entry's device slot while it still held the entry. (Under
 * ThreadSanitizer, a read of the slot after the entry was let go is a data race with the
 * reuse: the rounds give it several chances to be seen.) */
static _Atomic int lost_second_done, lost_evict_go;
static unsigned long lost_inst_calls; /* cuGraphInstantiateWithParams calls before a round */
static uint64_t lost_key;
static CUstream lost_s2;

static CUresult lost_add_one(CUstream stream, void *user)
{
    (void)user;
    CUdeviceptr ptr = two_dv[0].mem;
    unsigned v = 1;
    return tu.cuLaunchKernel(two_dv[0].k.add_u32, 1, 1, 1, 1, 1, 1, 0, stream,
                             (void *[]){&ptr, &v}, NULL);
}

/* Waits for *flag to be set, for 20 s at most (then counts an error: a round whose order
 * the test did not get fails instead of hanging). */
static bool lost_wait(_Atomic int *flag)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (!atomic_load_explicit(flag, memory_order_acquire)) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 20) {
            thread_errors++;
            return false;
        }
        sched_yield();
    }
    return true;
}

static CUresult lost_add_one_later(CUstream stream, void *user)
{
    atomic_store_explicit(&lost_evict_go, 1, memory_order_release);
    lost_wait(&lost_second_done);
    return lost_add_one(stream, user);
}

static void *lost_second(void *arg)
{
    (void)arg;
    /* only once the first missed and is inside its capture: started before, the second could
     * cache the entry before the first looked, and the first's launch would be a hit */
    if (!lost_wait(&lost_evict_go) || tu.cuCtxSetCurrent(two_dv[0].ctx) != CUDA_SUCCESS ||
        cupool_capture_launch(lost_key, lost_s2, lost_add_one, NULL, 0) != CUDA_SUCCESS ||
        tu.cuStreamSynchronize(lost_s2) != CUDA_SUCCESS)
        thread_errors++;
    /* the first's instantiation of its own entry succeeds, that of its exec fails */
    tu_fake.fault("cuGraphInstantiateWithParams", 1, 1, CUDA_ERROR_OUT_OF_MEMORY);
    atomic_store_explicit(&lost_second_done, 1, memory_order_release);
    return NULL;
}

static void *lost_evicter(void *arg)
{
    (void)arg;
    if (!lost_wait(&lost_evict_go))
        return NULL;
    /* until the first's failed instantiation (the second's, the first's, the failed one) */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (tu_fake.calls("cuGraphInstantiateWithParams") < lost_inst_calls + 3) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 20) {
            thread_errors++;
            return NULL;
        }
        sched_yield();
    }
    struct timespec nap = {0, 50000000};
    nanosleep(&nap, NULL); /* the first is back from its launch by now */
    if (tu.cuCtxSetCurrent(two_dv[1].ctx) != CUDA_SUCCESS)
        thread_errors++;
    cupool_pipeline_t p;
    if (cupool_pipeline_create(&p) != CUDA_SUCCESS) {
        thread_errors++;
        return NULL;
    }
    /* with one entry cached at most, each evicts the one before (the first, device 0's);
     * the second reuses the struct of device 0's entry */
    for (int sig = 1; sig <= 4; sig++) {
        CUdeviceptr ptr = two_dv[1].mem;
        unsigned v = 1;
        if (cupool_pipeline_reset(p) != CUDA_SUCCESS)
            thread_errors++;
        for (int i = 0; i < sig; i++)
            if (cupool_pipeline_kernel(p, two_dv[1].k.add_u32, 1, 1, 1, 1, 1, 1, 0,
                                       (void *[]){&ptr, &v}, NULL) != CUDA_SUCCESS)
                thread_errors++;
        if (cupool_pipeline_launch(p, two_dv[1].s) != CUDA_SUCCESS)
            thread_errors++;
    }
    if (tu.cuStreamSynchronize(two_dv[1].s) != CUDA_SUCCESS)
        thread_errors++;
    cupool_pipeline_destroy(p);
    return NULL;
}

START_TEST(two_devices_failed_exec_after_a_lost_publish_counts_on_its_device)
{
    setenv("CUPOOL_GRAPH_CACHE_ENTRIES", "1", 1);
    setenv("CUPOOL_GRAPH_UPLOAD", "1", 1); /* instantiated by cuGraphInstantiateWithParams */
    if (!two_devices(two_dv, "two_devices_failed_exec_after_a_lost_publish_counts_on_its_device"))
        return;
    if (!tu_fake.present)
        return; /* the failure is injected */
    enum { ROUNDS = 6 };
    TU_OK(tu.cuCtxSetCurrent(two_dv[0].ctx));
    TU_OK(tu.cuStreamCreate(&lost_s2, CU_STREAM_NON_BLOCKING));
    for (int round = 0; round < ROUNDS; round++) {
        atomic_store(&lost_second_done, 0);
        atomic_store(&lost_evict_go, 0);
        lost_key = 1000 + (uint64_t)round;
        lost_inst_calls = tu_fake.calls("cuGraphInstantiateWithParams");
        pthread_t second, evicter;
        ck_assert_int_eq(pthread_create(&evicter, NULL, lost_evicter, NULL), 0);
        ck_assert_int_eq(pthread_create(&second, NULL, lost_second, NULL), 0);
        CUresult r = cupool_capture_launch(lost_key, two_dv[0].s, lost_add_one_later, NULL, 0);
        /* (no driver call until the evicter is done: it would order the two threads) */
        pthread_join(evicter, NULL);
        pthread_join(second, NULL);
        tu_fake.fault_clear();
        TU_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
        ck_assert_int_eq(thread_errors, 0);
        TU_OK(tu.cuCtxSetCurrent(two_dv[0].ctx));
    }
    cupool_graph_stats_t g = dstats(0);
    ck_assert_uint_eq(g.launches, 2 * ROUNDS);
    ck_assert_uint_eq(g.misses, 2 * ROUNDS);
    ck_assert_uint_eq(g.instantiations, 2 * ROUNDS); /* the second's entry, and the first's */
    ck_assert_uint_eq(g.evictions, ROUNDS);
    ck_assert_uint_eq(g.entries, 0);
    g = dstats(1);
    ck_assert_uint_eq(g.misses, 4 * ROUNDS);
    ck_assert_uint_eq(g.instantiations, 4 * ROUNDS);
    ck_assert_uint_eq(g.entries, 1);
    devices_sum_to_the_totals();
    unsigned v[4];
    dev_counters(&two_dv[0], v);
    ck_assert_uint_eq(v[0], ROUNDS); /* the seconds' launches; the firsts launched nothing */
}
END_TEST

/* Four signatures on two devices through a cache of three entries and two execs an entry, on
 * three streams a device, with failed instantiations, refused node updates, trims and a reset
 * of device 1's primary context along the way: after every launch the per-device figures sum
 * to the totals, and a final trim leaves the cache, and so every device, at zero. */
START_TEST(two_devices_sums_survive_every_upset)
{
    setenv("CUPOOL_GRAPH_CACHE_ENTRIES", "3", 1);
    setenv("CUPOOL_GRAPH_EXECS_MAX", "2", 1);
    struct dev_side dv[2];
    if (!two_devices(dv, "two_devices_sums_survive_every_upset"))
        return;
    CUstream st[2][3];
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dv[d].ctx));
        for (int i = 0; i < 3; i++)
            TU_OK(tu.cuStreamCreate(&st[d][i], CU_STREAM_NON_BLOCKING));
    }
    cupool_pipeline_t p[4];
    for (int i = 0; i < 4; i++)
        TU_OK(cupool_pipeline_create(&p[i]));
    for (int round = 0; round < 120; round++) {
        int d = round % 2, n = (round / 4) % 4 + 1, si = (round / 3) % 3;
        TU_OK(tu.cuCtxSetCurrent(dv[d].ctx));
        TU_OK(cupool_pipeline_reset(p[n - 1]));
        CUdeviceptr ptr = dv[d].mem;
        for (int i = 0; i < n; i++) {
            unsigned v = (unsigned)(round + i);
            TU_OK(cupool_pipeline_kernel(p[n - 1], dv[d].k.add_u32, 1, 1, 1, 1, 1, 1, 0,
                                         (void *[]){&ptr, &v}, NULL));
        }
        if (round % 5 == 1) {
            tu_fake.fault("cuGraphInstantiate", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
            tu_fake.fault("cuGraphInstantiateWithParams", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
        }
        if (round % 7 == 3)
            tu_fake.fault("cuGraphExecKernelNodeSetParams", 0, 1, CUDA_ERROR_INVALID_VALUE);
        (void)cupool_pipeline_launch(p[n - 1], st[d][si]);
        tu_fake.fault_clear();
        if (round % 40 == 39)
            TU_OK(cupool_trim());
        if (round == 60) { /* device 1's primary context reset, made again */
            CUdevice dev1;
            TU_OK(tu.cuDeviceGet(&dev1, 1));
            TU_OK(tu.cuCtxSetCurrent(dv[1].ctx));
            TU_OK(tu.cuCtxSynchronize());
            TU_OK(tu.cuDevicePrimaryCtxReset(dev1));
            TU_OK(tu.cuDevicePrimaryCtxRetain(&dv[1].ctx, dev1));
            TU_OK(tu.cuCtxSetCurrent(dv[1].ctx));
            tu_load_kernels(&dv[1].k);
            TU_OK(tu.cuMemAlloc(&dv[1].mem, 4 * 4));
            for (int i = 0; i < 3; i++)
                TU_OK(tu.cuStreamCreate(&st[1][i], CU_STREAM_NON_BLOCKING));
        }
        devices_sum_to_the_totals();
    }
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dv[d].ctx));
        TU_OK(tu.cuCtxSynchronize());
    }
    cupool_graph_stats_t mid = gstats();
    printf("two devices, every upset: %" PRIu64 " misses, %" PRIu64 " evictions, %" PRIu64
           " instantiations, %" PRIu64 " update failures, %" PRIu64 " eager launches\n",
           mid.misses, mid.evictions, mid.instantiations, mid.update_failures,
           mid.eager_launches);
    ck_assert_uint_gt(mid.evictions, 0);
    ck_assert_uint_gt(mid.update_failures, 0);
    TU_OK(cupool_trim());
    devices_sum_to_the_totals();
    cupool_graph_stats_t all = gstats();
    ck_assert_uint_eq(all.entries, 0);
    ck_assert_uint_eq(all.execs, 0);
    ck_assert_uint_eq(all.bytes, 0);
    for (int i = 0; i < 4; i++)
        TU_OK(cupool_pipeline_destroy(p[i]));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("pipeline");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, hit_patches_only_changed_arguments);
    tcase_add_test(tc, unchanged_relaunch_takes_its_exec_and_gives_way);
    tcase_add_test(tc, dag_with_memset_memcpy_host_and_events);
    tcase_add_test(tc, host_nodes_run_once_per_launch);
    tcase_add_test(tc, two_streams_never_share_an_exec);
    tcase_add_test(tc, threads_share_a_signature);
    tcase_add_test(tc, two_pipelines_alternate_on_one_exec);
    tcase_add_test(tc, capture_replays_without_calling_again);
    tcase_add_test(tc, capture_update_patches_the_exec);
    tcase_add_test(tc, capture_error_leaves_nothing_behind);
    tcase_add_test(tc, dot_file_of_a_cached_pipeline);
    tcase_add_test(tc, dot_between_structures_keeps_signatures_apart);
    tcase_add_test(tc, capture_update_race_keeps_each_callers_arguments);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, redescribed_structure_is_not_the_last_launch);
    tcase_add_test(tc, trim_during_repeat_launches);
    tcase_add_test(tc, identical_nodes_across_a_trim_need_no_update);
    tcase_add_test(tc, destroyed_event_never_reaches_an_instantiation);
    tcase_add_test(tc, alternating_signatures_claim_lock_free);
    tcase_add_test(tc, alternating_capture_keys_claim_lock_free);
    tcase_add_test(tc, one_signature_on_eight_streams_claims_lock_free);
    tcase_add_test(tc, exited_threads_execs_serve_other_threads);
    tcase_add_test(tc, refill_compares_only_changed_nodes);
    tcase_add_test(tc, refill_of_every_node_kind);
    tcase_add_test(tc, refill_after_failed_and_diverging_adds);
    tcase_add_test(tc, cluster_dimension_is_structure);
    tcase_add_test(tc, kernel_ex_bad_input);
    tcase_add_test(tc, refill_with_attributes);
    suite_add_tcase(s, tc);
    TCase *env = tcase_create("environment");
    tcase_add_test(env, eviction_keeps_results_right);
    tcase_add_test(env, graph_disable_launches_eagerly);
    tcase_add_test(env, execs_shared_only_at_the_limit);
    tcase_add_test(env, repeat_launch_after_eviction_and_reuse);
    tcase_add_test(env, eviction_during_lock_free_repeat_launches);
    tcase_add_test(env, gate_off_keeps_results_right);
    tcase_add_test(env, quiet_streams_give_up_their_execs);
    tcase_add_test(env, pool_streams_past_the_limit_claim_lock_free);
    tcase_add_test(env, pool_streams_past_the_limit_during_trims);
    tcase_add_test(env, buried_exec_of_a_reset_context_never_reaches_the_driver);
    tcase_add_test(env, one_signature_on_twelve_streams_claims_lock_free);
    tcase_add_test(env, cluster_dimension_eager);
    tcase_add_test(env, two_devices_side_by_side_in_the_cache);
    tcase_add_test(env, two_devices_claim_lock_free_per_thread);
    tcase_add_test(env, two_devices_every_path_counts_on_its_device);
    tcase_add_test(env, two_devices_failed_exec_after_a_lost_publish_counts_on_its_device);
    tcase_add_test(env, two_devices_sums_survive_every_upset);
    suite_add_tcase(s, env);
    if (!tu_real()) {
        TCase *sim = tcase_create("simulated");
        tcase_add_checked_fixture(sim, setup, NULL);
        tcase_add_test(sim, refused_update_reinstantiates);
        tcase_add_test(sim, refused_update_with_a_failing_clone_leaks_nothing);
        tcase_add_test(sim, concurrent_streams_never_wait_on_each_other);
        tcase_add_test(sim, failed_capture_end_never_leaves_the_stream_capturing);
        tcase_add_test(sim, launch_attributes_reach_the_kernel);
        tcase_add_test(sim, refill_detects_every_argument_byte_of_a_wide_kernel);
        tcase_add_test(sim, grown_snapshot_keeps_the_bytes_exact);
        tcase_add_test(sim, new_execs_uploaded_at_instantiation);
        tcase_add_test(sim, refused_instantiation_names_its_result);
        tcase_add_test(sim, each_update_refusal_counted_exactly);
        tcase_add_test(sim, uncured_node_refusal_returns_the_error);
        TCase *simenv = tcase_create("simulated-environment");
        tcase_add_test(simenv, concurrent_streams_with_a_waiting_exec_destroy);
        tcase_add_test(simenv, buried_exec_kept_while_its_context_cannot_be_told);
        tcase_add_test(simenv, launch_attributes_reach_the_kernel_eagerly);
        tcase_add_test(simenv, kernel_ex_without_node_attributes);
        tcase_add_test(simenv, kernel_ex_eager_without_launch_ex);
        tcase_add_test(simenv, upload_off_uploads_at_first_launch);
        tcase_add_test(simenv, upload_without_instantiate_with_params);
        tcase_add_test(simenv, any_stream_claim_with_failing_queries_and_records);
        suite_add_tcase(s, simenv);
        suite_add_tcase(s, sim);
    }
    return tu_run(s);
}
