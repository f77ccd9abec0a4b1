/* SPDX-License-Identifier: MIT */
/*
 * A pipeline's signature (src/graph/builder.c) and the in-place comparison of a redescribed
 * pipeline (src/graph/refill.c), reached through the graph layer's internal interface: what
 * is structure (node kinds, kernel functions, dependencies) and what is a parameter.
 */
#define _GNU_SOURCE
#include <check.h>

#include "common/testutil.h"
#include <string.h>

#include "graph/graph_impl.h"

static struct tu_pipeline_fixture fx;

static void setup(void)
{
    tu_pipeline_begin(&fx, 64);
}

static void teardown(void)
{
    tu_pipeline_end(&fx);
}

/* The signature words of a description: kernels (f of each, argument v + i), `n` of them, in
 * the default chain, or with node `split` depending on nothing. */
struct sig {
    uint64_t hash;
    size_t n;
    uint64_t w[64];
    uint32_t chain;
};

static struct sig sig_of(cupool_pipeline_t pl, const CUfunction *f, int n, unsigned v, int split)
{
    TU_OK(cupool_pipeline_reset(pl));
    for (int i = 0; i < n; i++) {
        unsigned val = v + (unsigned)i;
        void *args[] = {&fx.mem, &val};
        cupool_node_t node;
        TU_OK(cupool_pipeline_kernel(pl, f[i], 1, 1, 1, 1, 1, 1, 0, args, &node));
        if (i == split)
            TU_OK(cupool_pipeline_depend(pl, node, NULL, 0));
    }
    struct cupool_pipeline *p = cupool__pipeline_of(pl);
    ck_assert_ptr_nonnull(p);
    struct sig s = {0};
    s.n = cupool__signature(p, &s.hash);
    ck_assert_uint_gt(s.n, 0);
    ck_assert_uint_le(s.n, 64);
    memcpy(s.w, p->sig, s.n * sizeof(uint64_t));
    s.chain = p->sig_chain;
    return s;
}

static bool same(const struct sig *a, const struct sig *b)
{
    return a->hash == b->hash && a->n == b->n && !memcmp(a->w, b->w, a->n * sizeof(uint64_t));
}

START_TEST(structure_is_the_signature_parameters_are_not)
{
    cupool_pipeline_t pl;
    TU_OK(cupool_pipeline_create(&pl));
    CUfunction adds[4] = {fx.k.add_u32, fx.k.add_u32, fx.k.add_u32, fx.k.add_u32};
    CUfunction mixed[4] = {fx.k.add_u32, fx.k.set_u32, fx.k.add_u32, fx.k.add_u32};
    struct sig a = sig_of(pl, adds, 4, 1, -1);
    struct sig b = sig_of(pl, adds, 4, 100, -1); /* other argument values */
    ck_assert(same(&a, &b));
    struct sig c = sig_of(pl, mixed, 4, 1, -1); /* another function at node 1 */
    ck_assert(!same(&a, &c));
    struct sig d = sig_of(pl, adds, 3, 1, -1); /* one node fewer */
    ck_assert(!same(&a, &d));
    struct sig e = sig_of(pl, adds, 4, 1, 2); /* node 2 depends on nothing */
    ck_assert(!same(&a, &e));
    /* the default chain's prefix: every node of a, none past the split of e */
    ck_assert_uint_eq(a.chain, 4);
    ck_assert_uint_eq(e.chain, 2);
    /* the word count: the node count, then per node its kind and dependency count, its
     * function, and its dependencies */
    ck_assert_uint_eq(a.n, 1 + 4 * 2 + 3);
    ck_assert_uint_eq(a.w[0], 4);
    cupool_pipeline_destroy(pl);
}
END_TEST

/* Described again after a launch, the same structure keeps the last launch's signature
 * (no hashing at the next launch) and only nodes whose parameters changed are marked. */
START_TEST(redescribing_marks_only_what_changed)
{
    cupool_pipeline_t pl;
    TU_OK(cupool_pipeline_create(&pl));
    CUfunction adds[4] = {fx.k.add_u32, fx.k.add_u32, fx.k.add_u32, fx.k.add_u32};
    (void)sig_of(pl, adds, 4, 1, -1);
    TU_OK(cupool_pipeline_launch(pl, fx.s));
    struct cupool_pipeline *p = cupool__pipeline_of(pl);
    /* the same description: nothing differs */
    TU_OK(cupool_pipeline_reset(pl));
    for (int i = 0; i < 4; i++) {
        unsigned val = 1 + (unsigned)i;
        void *args[] = {&fx.mem, &val};
        TU_OK(cupool_pipeline_kernel(pl, fx.k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
    ck_assert(!p->sig_dirty);
    ck_assert_uint_eq(p->sigpos, p->last_nsig);
    ck_assert(!p->all_dirty);
    ck_assert_uint_eq(p->nchg, 0);
    TU_OK(cupool_pipeline_launch(pl, fx.s));
    /* node 2's argument changes: it alone is marked, the structure is unchanged */
    TU_OK(cupool_pipeline_reset(pl));
    for (int i = 0; i < 4; i++) {
        unsigned val = (i == 2 ? 50u : 1u) + (unsigned)i;
        void *args[] = {&fx.mem, &val};
        TU_OK(cupool_pipeline_kernel(pl, fx.k.add_u32, 1, 1, 1, 1, 1, 1, 0, args, NULL));
    }
    ck_assert(!p->sig_dirty);
    ck_assert(!p->all_dirty);
    ck_assert_uint_eq(p->nchg, 1);
    ck_assert(p->chg[0] & (UINT64_C(1) << 2));
    TU_OK(cupool_pipeline_launch(pl, fx.s));
    /* another function at node 1: the structure differs */
    TU_OK(cupool_pipeline_reset(pl));
    for (int i = 0; i < 4; i++) {
        unsigned val = 1;
        void *args[] = {&fx.mem, &val};
        TU_OK(cupool_pipeline_kernel(pl, i == 1 ? fx.k.set_u32 : fx.k.add_u32, 1, 1, 1, 1, 1, 1, 0,
                                     args, NULL));
    }
    ck_assert(p->sig_dirty || p->all_dirty);
    TU_OK(cupool_pipeline_launch(pl, fx.s));
    TU_OK(tu.cuStreamSynchronize(fx.s));
    cupool_pipeline_destroy(pl);
}
END_TEST


/* The signature of one kernel with launch attributes attrs[0 .. n-1] (grid 8, argument v). */
static struct sig sig_attrs(cupool_pipeline_t pl, const CUlaunchAttribute *attrs, unsigned n,
                            unsigned v)
{
    TU_OK(cupool_pipeline_reset(pl));
    void *args[] = {&fx.mem, &v};
    TU_OK(cupool_pipeline_kernel_ex(pl, fx.k.add_u32, 8, 1, 1, 1, 1, 1, 0, args, attrs, n, NULL));
    struct cupool_pipeline *p = cupool__pipeline_of(pl);
    struct sig s = {0};
    s.n = cupool__signature(p, &s.hash);
    ck_assert_uint_gt(s.n, 0);
    ck_assert_uint_le(s.n, 64);
    memcpy(s.w, p->sig, s.n * sizeof(uint64_t));
    return s;
}

/* Launch attributes are structure, whatever the order they are given in; an attribute given
 * with a different value (a priority, a cluster dimension, cooperative or not) is another
 * signature; IGNORE entries and no attribute at all are a plain kernel's. */
START_TEST(launch_attributes_are_structure)
{
    cupool_pipeline_t pl;
    TU_OK(cupool_pipeline_create(&pl));
    CUlaunchAttribute a[3];
    memset(a, 0, sizeof a);
    a[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a[0].value.clusterDim.x = 2;
    a[0].value.clusterDim.y = a[0].value.clusterDim.z = 1;
    a[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    a[1].value.priority = -1;
    a[2].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a[2].value.cooperative = 1;
    struct sig base = sig_attrs(pl, a, 3, 1);
    struct sig args = sig_attrs(pl, a, 3, 99); /* another argument: a parameter */
    ck_assert(same(&base, &args));
    CUlaunchAttribute r[3] = {a[2], a[0], a[1]};
    struct sig reordered = sig_attrs(pl, r, 3, 1);
    ck_assert(same(&base, &reordered));
    a[1].value.priority = -2;
    struct sig prio = sig_attrs(pl, a, 3, 1);
    ck_assert(!same(&base, &prio));
    a[1].value.priority = -1;
    a[0].value.clusterDim.x = 4;
    struct sig cluster = sig_attrs(pl, a, 3, 1);
    ck_assert(!same(&base, &cluster));
    a[0].value.clusterDim.x = 2;
    a[2].value.cooperative = 0;
    struct sig plain_coop = sig_attrs(pl, a, 3, 1);
    ck_assert(!same(&base, &plain_coop));
    struct sig two = sig_attrs(pl, a, 2, 1); /* cooperative 0 given, or not given: two */
    ck_assert(!same(&plain_coop, &two));
    CUlaunchAttribute ign[2];
    memset(ign, 0, sizeof ign);
    struct sig ignored = sig_attrs(pl, ign, 2, 1);
    struct sig none = sig_attrs(pl, NULL, 0, 1);
    ck_assert(same(&ignored, &none));
    ck_assert(!same(&none, &base));
    TU_OK(cupool_pipeline_reset(pl));
    unsigned v = 1;
    void *argv[] = {&fx.mem, &v};
    TU_OK(cupool_pipeline_kernel(pl, fx.k.add_u32, 8, 1, 1, 1, 1, 1, 0, argv, NULL));
    struct sig plain = {0};
    plain.n = cupool__signature(cupool__pipeline_of(pl), &plain.hash);
    memcpy(plain.w, cupool__pipeline_of(pl)->sig, plain.n * sizeof(uint64_t));
    ck_assert(same(&plain, &none));
    TU_OK(cupool_pipeline_destroy(pl));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("signature");
    TCase *tc = tcase_create("signature");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, structure_is_the_signature_parameters_are_not);
    tcase_add_test(tc, redescribing_marks_only_what_changed);
    tcase_add_test(tc, launch_attributes_are_structure);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
