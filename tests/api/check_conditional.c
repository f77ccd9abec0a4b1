/* SPDX-License-Identifier: MIT */
/*
 * Conditional nodes in pipelines (cupool_pipeline_switch, _if, _body, _body_end), on both
 * drivers: the branch the host chooses runs, value by value; a branch change is a hit that
 * patches one node; a body's arguments are patched, a body's structure is a new entry; the
 * eager fallback runs the same; bad input is refused and loses nothing; two streams get an
 * exec (and a graph) each; a trim while idle lets everything go.
 */
#define _GNU_SOURCE /* setenv */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/testutil.h"

static struct tu_kernels k;
static CUstream s1, s2;
static CUdeviceptr mem; /* 16 counters */

static void setup_env(const char *name, const char *value)
{
    if (name)
        setenv(name, value, 1);
    tu_setup();
    tu_load_kernels(&k);
    TU_OK(tu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuMemAlloc(&mem, 16 * 4));
    TU_OK(tu.cuMemsetD32(mem, 0, 16));
}

static void setup(void)
{
    setup_env(NULL, NULL);
}

static unsigned counter(int i)
{
    unsigned v[16];
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

static CUresult add(cupool_pipeline_t p, int slot, unsigned v, cupool_node_t *node)
{
    CUdeviceptr ptr = mem + 4 * (CUdeviceptr)slot;
    void *args[] = {&ptr, &v};
    return cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, node);
}

/* The value body b of the 4-way SWITCH adds (distinct, so each branch shows). */
static const unsigned body_add[4] = {1, 10, 100, 1000};

/* add(slot+1, 1); SWITCH(branch) of 4 bodies, body b: add(slot, body_add[b]) (body `wide`
 * gets a second kernel adding 1 more, when wide < 4); add(slot+1, 2). body2 replaces body
 * 2's value when nonzero. */
static void describe_switch(cupool_pipeline_t p, int slot, unsigned branch, unsigned body2,
                            unsigned wide)
{
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(add(p, slot + 1, 1, NULL));
    cupool_node_t sw;
    TU_OK(cupool_pipeline_switch(p, 4, branch, &sw));
    ck_assert_uint_eq(sw, 1);
    for (unsigned b = 0; b < 4; b++) {
        TU_OK(cupool_pipeline_body(p, sw, b));
        TU_OK(add(p, slot, b == 2 && body2 ? body2 : body_add[b], NULL));
        if (b == wide)
            TU_OK(add(p, slot, 1, NULL));
        TU_OK(cupool_pipeline_body_end(p));
    }
    cupool_node_t last;
    TU_OK(add(p, slot + 1, 2, &last));
    ck_assert_uint_eq(last, wide < 4 ? 7 : 6);
}

/* Every branch in turn and one past the last, checked value by value: one instantiation for
 * them all, each change of branch a hit that updates one node (the setter). */
static void every_branch(int slot)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    unsigned total = 0, around = 0;
    const unsigned branches[] = {0, 1, 2, 3, 7, 2};
    for (unsigned i = 0; i < sizeof branches / sizeof *branches; i++) {
        describe_switch(p, slot, branches[i], 0, 4);
        TU_OK(cupool_pipeline_launch(p, s1));
        total += branches[i] < 4 ? body_add[branches[i]] : 0;
        around += 3;
        ck_assert_uint_eq(counter(slot), total);
        ck_assert_uint_eq(counter(slot + 1), around);
    }
    TU_OK(cupool_pipeline_destroy(p));
}

START_TEST(switch_runs_the_chosen_branch_one_exec)
{
    every_branch(0);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.launches, 6);
    ck_assert_uint_eq(st.misses, 1);
    ck_assert_uint_eq(st.hits, 5);
    ck_assert_uint_eq(st.instantiations, 1);
    ck_assert_uint_eq(st.updates, 5);
    ck_assert_uint_eq(st.nodes_updated, 5); /* the setter's value, once a launch */
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.execs, 1);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.calls("cuModuleLoadData"), 2); /* the tests', the setter's */
}
END_TEST

/* The same with CUPOOL_GRAPH_DISABLE=1: node by node, the same results. */
START_TEST(eager_fallback_runs_the_same_branches)
{
    setup_env("CUPOOL_GRAPH_DISABLE", "1");
    every_branch(2);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.eager_launches, 6);
    ck_assert_uint_eq(st.entries, 0);
}
END_TEST

START_TEST(body_arguments_are_patched_in_place)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    describe_switch(p, 4, 2, 5, 4);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(4), 5);
    cupool_graph_stats_t a = gstats();
    describe_switch(p, 4, 2, 9, 4); /* body 2's argument only */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(4), 14);
    cupool_graph_stats_t b = gstats();
    ck_assert_uint_eq(b.instantiations, a.instantiations);
    ck_assert_uint_eq(b.hits, a.hits + 1);
    ck_assert_uint_eq(b.nodes_updated, a.nodes_updated + 1);
    describe_switch(p, 4, 1, 9, 4); /* another branch and the same body 2 */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(4), 24);
    describe_switch(p, 4, 1, 9, 4); /* nothing changed: no update */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(4), 34);
    cupool_graph_stats_t c = gstats();
    ck_assert_uint_eq(c.instantiations, a.instantiations);
    ck_assert_uint_eq(c.nodes_updated, b.nodes_updated + 1);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* A body with another structure (a second kernel, or a memset for a kernel) is another
 * entry; going back to the first structure is a hit on the first. */
START_TEST(body_structure_is_a_new_entry)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    describe_switch(p, 6, 1, 0, 4);
    TU_OK(cupool_pipeline_launch(p, s1));
    describe_switch(p, 6, 1, 0, 1); /* body 1: two kernels */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(6), 10 + 11);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.entries, 2);
    describe_switch(p, 6, 3, 0, 4); /* the first structure again */
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(6), 21 + 1000);
    st = gstats();
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.instantiations, 2);
    /* body 0 a memset instead of a kernel: another entry */
    TU_OK(cupool_pipeline_reset(p));
    cupool_node_t sw;
    TU_OK(cupool_pipeline_switch(p, 2, 0, &sw));
    TU_OK(cupool_pipeline_body(p, sw, 0));
    TU_OK(cupool_pipeline_memset(p, mem + 4 * 8, 77, 4, 1, NULL));
    TU_OK(cupool_pipeline_body_end(p));
    TU_OK(cupool_pipeline_body(p, sw, 1));
    TU_OK(add(p, 8, 1, NULL));
    TU_OK(cupool_pipeline_body_end(p));
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(8), 77);
    st = gstats();
    ck_assert_uint_eq(st.misses, 3);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* IF with two bodies: body 0 for a nonzero value, body 1 for zero; with one: nothing for
 * zero. A SWITCH nested in an IF's body. */
START_TEST(if_with_one_and_two_bodies_and_nesting)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    const unsigned values[] = {5, 0, 1, 0};
    unsigned total = 0;
    for (unsigned i = 0; i < 4; i++) {
        TU_OK(cupool_pipeline_reset(p));
        cupool_node_t c;
        TU_OK(cupool_pipeline_if(p, 2, values[i], &c));
        TU_OK(cupool_pipeline_body(p, c, 0));
        TU_OK(add(p, 9, 1, NULL));
        TU_OK(cupool_pipeline_body_end(p));
        TU_OK(cupool_pipeline_body(p, c, 1));
        TU_OK(add(p, 9, 100, NULL));
        TU_OK(cupool_pipeline_body_end(p));
        TU_OK(cupool_pipeline_launch(p, s1));
        total += values[i] ? 1 : 100;
        ck_assert_uint_eq(counter(9), total);
    }
    for (unsigned i = 0; i < 4; i++) {
        TU_OK(cupool_pipeline_reset(p));
        cupool_node_t c;
        TU_OK(cupool_pipeline_if(p, 1, values[i], &c));
        TU_OK(cupool_pipeline_body(p, c, 0));
        TU_OK(add(p, 10, 1, NULL));
        TU_OK(cupool_pipeline_body_end(p));
        TU_OK(add(p, 11, 1, NULL));
        TU_OK(cupool_pipeline_launch(p, s1));
    }
    ck_assert_uint_eq(counter(10), 2);
    ck_assert_uint_eq(counter(11), 4);
    /* nested: IF(outer) { SWITCH(inner) of 2 { +1 | +10 }; +1000 } */
    unsigned nested = 0;
    for (unsigned outer = 0; outer < 2; outer++)
        for (unsigned inner = 0; inner < 3; inner++) {
            TU_OK(cupool_pipeline_reset(p));
            cupool_node_t c, sw;
            TU_OK(cupool_pipeline_if(p, 1, outer, &c));
            TU_OK(cupool_pipeline_body(p, c, 0));
            TU_OK(cupool_pipeline_switch(p, 2, inner, &sw));
            for (unsigned b = 0; b < 2; b++) {
                TU_OK(cupool_pipeline_body(p, sw, b));
                TU_OK(add(p, 12, b ? 10 : 1, NULL));
                TU_OK(cupool_pipeline_body_end(p));
            }
            TU_OK(add(p, 12, 1000, NULL));
            TU_OK(cupool_pipeline_body_end(p));
            TU_OK(cupool_pipeline_launch(p, s1));
            nested += outer ? (inner == 0 ? 1 : inner == 1 ? 10 : 0) + 1000 : 0;
            ck_assert_uint_eq(counter(12), nested);
        }
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

static void count_host(void *arg)
{
    ++*(int *)arg;
}

/* Expects a launch refused with `want` (the add's error, remembered), then a reset and a
 * good description launching. */
static void refused_then_good(cupool_pipeline_t p, CUresult want)
{
    TU_EQ(cupool_pipeline_launch(p, s1), want);
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(add(p, 13, 1, NULL));
    TU_OK(cupool_pipeline_launch(p, s1));
}

START_TEST(bad_input_is_refused_and_loses_nothing)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    cupool_node_t c = 99, first;
    TU_EQ(cupool_pipeline_switch(p, 0, 0, &c), CUDA_ERROR_INVALID_VALUE);
    ck_assert_uint_eq(c, 99);
    refused_then_good(p, CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool_pipeline_reset(p));
    TU_EQ(cupool_pipeline_if(p, 3, 1, &c), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_if(p, 0, 1, &c), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_switch(NULL, 1, 0, &c), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_body(NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_body_end(NULL), CUDA_ERROR_INVALID_VALUE);
    /* body out of range, of a node that is no conditional node, end without a body */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(add(p, 13, 1, &first));
    TU_OK(cupool_pipeline_switch(p, 2, 0, &c));
    TU_EQ(cupool_pipeline_body(p, c, 2), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_body(p, first, 0), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_body(p, 42, 0), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_pipeline_body_end(p), CUDA_ERROR_INVALID_VALUE);
    refused_then_good(p, CUDA_ERROR_INVALID_VALUE);
    /* unbalanced: a launch with a body open, or a body left empty (nothing was refused at
     * the adds: the launch refuses, and a later good launch works) */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_switch(p, 2, 0, &c));
    TU_OK(cupool_pipeline_body(p, c, 0));
    TU_OK(add(p, 13, 1, NULL));
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE); /* open */
    TU_OK(cupool_pipeline_body_end(p));
    TU_EQ(cupool_pipeline_launch(p, s1), CUDA_ERROR_INVALID_VALUE); /* body 1 empty */
    TU_OK(cupool_pipeline_body(p, c, 1));
    TU_OK(add(p, 13, 10, NULL));
    TU_OK(cupool_pipeline_body_end(p));
    TU_OK(cupool_pipeline_launch(p, s1)); /* now complete: body 0 runs */
    /* another body of the node while one is open, or once a node follows it */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_switch(p, 2, 0, &c));
    TU_OK(cupool_pipeline_body(p, c, 0));
    TU_EQ(cupool_pipeline_body(p, c, 1), CUDA_ERROR_INVALID_VALUE);
    refused_then_good(p, CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_switch(p, 1, 0, &c));
    TU_OK(cupool_pipeline_body(p, c, 0));
    TU_OK(add(p, 13, 1, NULL));
    TU_OK(cupool_pipeline_body_end(p));
    TU_OK(add(p, 13, 1, NULL));
    TU_EQ(cupool_pipeline_body(p, c, 0), CUDA_ERROR_INVALID_VALUE);
    refused_then_good(p, CUDA_ERROR_INVALID_VALUE);
    /* dependencies across scopes, both ways */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(add(p, 13, 1, &first));
    TU_OK(cupool_pipeline_switch(p, 1, 0, &c));
    TU_OK(cupool_pipeline_body(p, c, 0));
    cupool_node_t inner, inner2;
    TU_OK(add(p, 13, 1, &inner));
    TU_OK(add(p, 13, 1, &inner2));
    TU_EQ(cupool_pipeline_depend(p, inner2, &first, 1), CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool_pipeline_body_end(p));
    cupool_node_t after;
    TU_OK(add(p, 13, 1, &after));
    TU_EQ(cupool_pipeline_depend(p, after, &inner, 1), CUDA_ERROR_INVALID_VALUE);
    refused_then_good(p, CUDA_ERROR_INVALID_VALUE);
    /* a dependency within a body is fine */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_switch(p, 1, 0, &c));
    TU_OK(cupool_pipeline_body(p, c, 0));
    TU_OK(add(p, 14, 1, &inner));
    TU_OK(add(p, 14, 2, &inner2));
    TU_OK(add(p, 14, 4, &after));
    cupool_node_t both[] = {inner, inner2};
    TU_OK(cupool_pipeline_depend(p, after, both, 2));
    TU_OK(cupool_pipeline_body_end(p));
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(14), 7);
    /* kinds a body does not take */
    CUevent ev;
    TU_OK(tu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    int hosts = 0;
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_switch(p, 1, 0, &c));
    TU_OK(cupool_pipeline_body(p, c, 0));
    TU_EQ(cupool_pipeline_event_record(p, ev, NULL), CUDA_ERROR_NOT_SUPPORTED);
    TU_EQ(cupool_pipeline_event_wait(p, ev, NULL), CUDA_ERROR_NOT_SUPPORTED);
    TU_EQ(cupool_pipeline_host(p, count_host, &hosts, NULL), CUDA_ERROR_NOT_SUPPORTED);
    refused_then_good(p, CUDA_ERROR_NOT_SUPPORTED);
    ck_assert_int_eq(hosts, 0);
    /* at the top level they are fine beside a conditional node */
    TU_OK(cupool_pipeline_reset(p));
    TU_OK(cupool_pipeline_host(p, count_host, &hosts, NULL));
    TU_OK(cupool_pipeline_switch(p, 1, 0, &c));
    TU_OK(cupool_pipeline_body(p, c, 0));
    TU_OK(add(p, 15, 1, NULL));
    TU_OK(cupool_pipeline_body_end(p));
    TU_OK(cupool_pipeline_event_record(p, ev, NULL));
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(15), 1);
    ck_assert_int_eq(hosts, 1);
    TU_OK(tu.cuEventDestroy(ev));
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* Two threads, each with its own pipeline of the same structure, launch on their own stream
 * at once: an exec each, each with its graph, and every branch's result right. */
struct racer {
    CUstream s;
    int slot;
    unsigned expect;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    for (unsigned i = 0; i < 40; i++) {
        unsigned branch = (i + (unsigned)r->slot) % 5; /* 4: no body */
        TU_OK(cupool_pipeline_reset(p));
        cupool_node_t sw;
        TU_OK(cupool_pipeline_switch(p, 4, branch, &sw));
        for (unsigned b = 0; b < 4; b++) {
            TU_OK(cupool_pipeline_body(p, sw, b));
            CUdeviceptr ptr = mem + 4 * (CUdeviceptr)r->slot;
            unsigned v = body_add[b];
            void *args[] = {&ptr, &v};
            TU_OK(cupool_pipeline_kernel(p, k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
            TU_OK(cupool_pipeline_body_end(p));
        }
        TU_OK(cupool_pipeline_launch(p, r->s));
        r->expect += branch < 4 ? body_add[branch] : 0;
    }
    TU_OK(cupool_pipeline_destroy(p));
    return NULL;
}

START_TEST(two_streams_get_an_exec_and_a_graph_each)
{
    unsigned long overlaps = tu_fake.present ? tu_fake.exec_overlaps() : 0;
    struct racer r[2] = {{s1, 0, 0}, {s2, 1, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    ck_assert_uint_eq(counter(0), r[0].expect);
    ck_assert_uint_eq(counter(1), r[1].expect);
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.entries, 1);
    ck_assert_uint_eq(st.execs, 2);
    /* two, or three when both first launches missed at once (one new entry is dropped) */
    ck_assert_uint_ge(st.instantiations, 2);
    ck_assert_uint_le(st.instantiations, 3);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.exec_overlaps(), overlaps);
}
END_TEST

/* cupool_trim() while nothing runs: the entry, its exec and graph go, and the next launch
 * builds them again; the setter's module stays loaded for its context's life (a trim cannot
 * know that no launch of it is still queued: it destroys execs whose launches have not
 * finished), so the next launch loads nothing. */
START_TEST(trim_while_idle_lets_everything_go)
{
    int graphs = tu_fake.present ? tu_fake.live_graphs() : 0;
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    describe_switch(p, 3, 1, 0, 4);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(3), 10);
    TU_OK(cupool_trim());
    cupool_graph_stats_t st = gstats();
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.execs, 0);
    if (tu_fake.present) {
        ck_assert_int_eq(tu_fake.live_graphs(), graphs);
        ck_assert_int_eq(tu_fake.live_execs(), 0);
        ck_assert_uint_eq(tu_fake.calls("cuModuleUnload"), 0);
    }
    describe_switch(p, 3, 3, 0, 4);
    TU_OK(cupool_pipeline_launch(p, s1));
    ck_assert_uint_eq(counter(3), 1010);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.calls("cuModuleLoadData"), 2);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* cupool_pipeline_dot prints a graph of a conditional pipeline (built for the print). */
START_TEST(dot_of_a_conditional_pipeline)
{
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    describe_switch(p, 5, 0, 0, 4);
    TU_OK(cupool_pipeline_launch(p, s1));
    char path[] = "/tmp/cupool-cond-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    TU_OK(cupool_pipeline_dot(p, path));
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
    ck_assert_ptr_nonnull(strstr(buf, "digraph"));
    if (tu_fake.present)
        ck_assert_ptr_nonnull(strstr(buf, "CONDITIONAL"));
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("conditional");
    TCase *tc = tcase_create("conditional");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, switch_runs_the_chosen_branch_one_exec);
    tcase_add_test(tc, body_arguments_are_patched_in_place);
    tcase_add_test(tc, body_structure_is_a_new_entry);
    tcase_add_test(tc, if_with_one_and_two_bodies_and_nesting);
    tcase_add_test(tc, bad_input_is_refused_and_loses_nothing);
    tcase_add_test(tc, two_streams_get_an_exec_and_a_graph_each);
    tcase_add_test(tc, trim_while_idle_lets_everything_go);
    tcase_add_test(tc, dot_of_a_conditional_pipeline);
    suite_add_tcase(s, tc);
    TCase *env = tcase_create("environment");
    tcase_add_test(env, eager_fallback_runs_the_same_branches);
    suite_add_tcase(s, env);
    return tu_run(s);
}
