/* SPDX-License-Identifier: MIT */
/*
 * Class lookup (src/pool/class.c), reached through the pool layer's internal interface: one
 * class per key (kind, context id, flags, clamped priority), found again by lookup however
 * many classes there are, and a class of a context that is gone reclaimed and its index
 * serving a new class under another generation.
 */
#define _GNU_SOURCE
#include <check.h>

#include "common/testutil.h"

#include "pool/pool.h"
#include "pool/pool_impl.h"

static void setup(void)
{
    tu_setup();
}

/* The class of a key in context ctx (NULL: the current one), looked up inside a read
 * section as the pools do. */
static struct cupool__class *class_of(const struct cupool__class_ops *ops, CUcontext ctx,
                                      unsigned int flags, int priority)
{
    unsigned long long id = 0;
    TU_OK(tu.cuCtxGetId(ctx, &id));
    struct cupool__tcache *tc = cupool__tcache_self();
    ck_assert_ptr_nonnull(tc);
    struct cupool__class *cls = NULL;
    cupool__read_enter(cupool__th(tc));
    CUresult r = cupool__class_get(ops, ctx, id, flags, priority, &cls);
    cupool__read_leave(cupool__th(tc));
    TU_OK(r);
    ck_assert_ptr_nonnull(cls);
    ck_assert_uint_eq(cls->ctx_id, id);
    return cls;
}

START_TEST(one_class_per_key)
{
    struct cupool__class *s0 = class_of(&cupool__stream_ops, tu_ctx, 0, 0);
    ck_assert_ptr_eq(class_of(&cupool__stream_ops, tu_ctx, 0, 0), s0);
    struct cupool__class *s1 = class_of(&cupool__stream_ops, tu_ctx, CU_STREAM_NON_BLOCKING, 0);
    ck_assert_ptr_ne(s1, s0);
    struct cupool__class *e0 = class_of(&cupool__event_ops, tu_ctx, 0, 0);
    ck_assert_ptr_ne(e0, s0);
    ck_assert_ptr_ne(e0, s1);
    ck_assert_int_eq(e0->ops->kind, CUPOOL_KIND_EVENT);
    /* priorities are clamped to the context's range before keying: past the greatest one,
     * the class of the greatest */
    int least = 0, greatest = 0;
    TU_OK(cupool__stream_priority_clamp(-1000, &greatest));
    TU_OK(cupool__stream_priority_clamp(1000, &least));
    struct cupool__class *top = class_of(&cupool__stream_ops, tu_ctx, 0, greatest);
    ck_assert_ptr_eq(class_of(&cupool__stream_ops, tu_ctx, 0, -1000), top);
    ck_assert_int_eq(top->priority, greatest);
    ck_assert_ptr_eq(class_of(&cupool__stream_ops, tu_ctx, 0, 1000),
                     class_of(&cupool__stream_ops, tu_ctx, 0, least));
}
END_TEST

/* Many classes (contexts times flags): each found again, each at its own index. */
START_TEST(many_classes_are_each_found_again)
{
    enum { CTXS = 24 };
    CUcontext ctx[CTXS];
    struct cupool__class *cls[CTXS][2];
    CUdevice dev;
    TU_OK(tu.cuDeviceGet(&dev, 0));
    for (int i = 0; i < CTXS; i++) {
        TU_OK(tu.cuCtxCreate(&ctx[i], 0, dev));
        for (int f = 0; f < 2; f++)
            cls[i][f] = class_of(&cupool__stream_ops, ctx[i], f ? CU_STREAM_NON_BLOCKING : 0, 0);
    }
    for (int i = 0; i < CTXS; i++)
        for (int f = 0; f < 2; f++) {
            ck_assert_ptr_eq(class_of(&cupool__stream_ops, ctx[i], f ? CU_STREAM_NON_BLOCKING : 0,
                                      0),
                             cls[i][f]);
            ck_assert_ptr_eq(cupool__class_at(cls[i][f]->index), cls[i][f]);
            for (int j = 0; j < i; j++)
                ck_assert_uint_ne(cls[i][f]->index, cls[j][f]->index);
        }
    for (int i = 0; i < CTXS; i++)
        TU_OK(tu.cuCtxDestroy(ctx[i]));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
}
END_TEST

/* A class of a destroyed context is retired and, with nothing of it left, reclaimed by a
 * trim; its index then serves a new class, whose generation has moved on. */
START_TEST(a_reclaimed_index_serves_a_new_generation)
{
    CUdevice dev;
    CUcontext a, b;
    TU_OK(tu.cuDeviceGet(&dev, 0));
    TU_OK(tu.cuCtxCreate(&a, 0, dev));
    struct cupool__class *ca = class_of(&cupool__event_ops, a, CU_EVENT_DISABLE_TIMING, 0);
    uint32_t index = ca->index;
    uint64_t gen = atomic_load(&ca->gen);
    TU_OK(tu.cuCtxDestroy(a));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    TU_OK(cupool_trim()); /* asks about every context: a's classes retire and are reclaimed */
    ck_assert_int_eq(atomic_load(&ca->phase), CUPOOL_CLASS_FREE);
    TU_OK(tu.cuCtxCreate(&b, 0, dev));
    struct cupool__class *cb = class_of(&cupool__event_ops, b, CU_EVENT_DISABLE_TIMING, 0);
    ck_assert_uint_eq(cb->index, index); /* the freed index, taken again */
    ck_assert_ptr_eq(cb, ca);            /* the struct is bound to its index */
    ck_assert_uint_gt(atomic_load(&cb->gen), gen);
    TU_OK(tu.cuCtxDestroy(b));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("class");
    TCase *tc = tcase_create("lookup");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, one_class_per_key);
    tcase_add_test(tc, many_classes_are_each_found_again);
    tcase_add_test(tc, a_reclaimed_index_serves_a_new_generation);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
