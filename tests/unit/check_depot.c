/* SPDX-License-Identifier: MIT */
/* Magazines and the depot's lock-free stacks: order, the ABA interleaving forced through the
 * test hook, and many threads pushing and popping at once. */
#define _GNU_SOURCE
#include <check.h>

#include "common/testutil.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pool/magazine.h"

START_TEST(lifo_order)
{
    cupool__mag_init(8);
    struct cupool__mag_stack s = {0};
    ck_assert_ptr_null(cupool__stack_pop(&s));
    struct cupool__magazine *m[5];
    for (int i = 0; i < 5; i++) {
        m[i] = cupool__mag_get();
        ck_assert_ptr_nonnull(m[i]);
        ck_assert_uint_eq(m[i]->count, 0);
        cupool__stack_push(&s, m[i]);
    }
    for (int i = 4; i >= 0; i--)
        ck_assert_ptr_eq(cupool__stack_pop(&s), m[i]);
    ck_assert_ptr_null(cupool__stack_pop(&s));
    /* empties are recycled, not reallocated */
    uint32_t before = cupool__mag_allocated();
    for (int i = 0; i < 5; i++)
        cupool__mag_put(m[i]);
    for (int i = 0; i < 5; i++)
        m[i] = cupool__mag_get();
    ck_assert_uint_eq(cupool__mag_allocated(), before);
}
END_TEST

/* The classic ABA: a popper reads top A and A->next = B; meanwhile others pop A, pop B and
 * push A back, so the head names A again but A->next is now C. A bare pointer CAS would install
 * B (already taken) as the head. The generation tag must make the CAS fail. */
static struct cupool__magazine *A, *B, *C;
static int hook_runs;

static void interleave(struct cupool__mag_stack *s, struct cupool__magazine *top)
{
    if (hook_runs++ || top != A)
        return;
    cupool__stack_pop_hook = NULL; /* the interleaved operations run unhooked */
    ck_assert_ptr_eq(cupool__stack_pop(s), A);
    ck_assert_ptr_eq(cupool__stack_pop(s), B);
    cupool__stack_push(s, A); /* head names A again; A->next is C */
}

START_TEST(aba_is_caught)
{
    cupool__mag_init(4);
    struct cupool__mag_stack s = {0};
    A = cupool__mag_get();
    B = cupool__mag_get();
    C = cupool__mag_get();
    cupool__stack_push(&s, C);
    cupool__stack_push(&s, B);
    cupool__stack_push(&s, A); /* A -> B -> C */
    hook_runs = 0;
    cupool__stack_pop_hook = interleave;
    struct cupool__magazine *got = cupool__stack_pop(&s);
    cupool__stack_pop_hook = NULL;
    ck_assert_int_ge(hook_runs, 1);
    ck_assert_ptr_eq(got, A);
    /* With the tag the stack is now just C; without it, it would name B, which is "taken". */
    ck_assert_ptr_eq(cupool__stack_pop(&s), C);
    ck_assert_ptr_null(cupool__stack_pop(&s));
}
END_TEST

#define THREADS 8
#define MAGS 64
static struct cupool__mag_stack shared;
static _Atomic int held[MAGS + 1024];
static _Atomic int bad;
static struct cupool__magazine *all[MAGS];

static void *churn(void *arg)
{
    unsigned int seed = (unsigned int)(uintptr_t)arg;
    struct cupool__magazine *mine[MAGS];
    int n = 0;
    for (int it = 0; it < 200000; it++) {
        if (n > 0 && (rand_r(&seed) & 1)) {
            struct cupool__magazine *m = mine[--n];
            if (atomic_exchange(&held[m->id], 0) != 1)
                atomic_fetch_add(&bad, 1);
            cupool__stack_push(&shared, m);
        } else if (n < MAGS) {
            struct cupool__magazine *m = cupool__stack_pop(&shared);
            if (m) {
                if (atomic_exchange(&held[m->id], 1) != 0)
                    atomic_fetch_add(&bad, 1); /* popped by two threads */
                mine[n++] = m;
            }
        }
    }
    while (n > 0) {
        struct cupool__magazine *m = mine[--n];
        atomic_store(&held[m->id], 0);
        cupool__stack_push(&shared, m);
    }
    return NULL;
}

START_TEST(concurrent_push_pop)
{
    cupool__mag_init(4);
    for (int i = 0; i < MAGS; i++) {
        all[i] = cupool__mag_get();
        ck_assert_uint_lt(all[i]->id, MAGS + 1024);
        cupool__stack_push(&shared, all[i]);
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&bad), 0);
    /* every magazine is in the stack exactly once */
    int seen[MAGS + 1024] = {0};
    int count = 0;
    for (struct cupool__magazine *m; (m = cupool__stack_pop(&shared)) != NULL; count++) {
        ck_assert_int_eq(seen[m->id]++, 0);
    }
    ck_assert_int_eq(count, MAGS);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("depot");
    TCase *tc = tcase_create("stacks");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, lifo_order);
    tcase_add_test(tc, aba_is_caught);
    tcase_add_test(tc, concurrent_push_pop);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
