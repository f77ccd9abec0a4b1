/* SPDX-License-Identifier: MIT */
/* The handle registry: insert, lookup, remove, growth, and lookups racing with inserts. */
#define _GNU_SOURCE
#include <check.h>

#include "common/testutil.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "pool/pool.h"
#include "pool/registry.h"

static struct cupool__class the_class = {.index = 5, .ops = &cupool__event_ops};
static struct cupool__class *const CLS = &the_class;

static void *fake_handle(uintptr_t i)
{
    return (void *)(0x7f0000000000u + i * 0x230); /* spaced like driver allocations */
}

START_TEST(insert_lookup_remove_grow)
{
    enum { N = 20000 };
    static struct cupool__handle *rec[N];
    ck_assert_ptr_null(cupool__registry_lookup(fake_handle(1)));
    ck_assert_ptr_null(cupool__registry_lookup(NULL));
    for (uintptr_t i = 0; i < N; i++) {
        rec[i] = cupool__registry_insert(fake_handle(i), CLS, CUPOOL_H_OWNED);
        ck_assert_ptr_nonnull(rec[i]);
    }
    ck_assert_uint_eq(cupool__registry_count(), N);
    for (uintptr_t i = 0; i < N; i++) {
        struct cupool__handle *r = cupool__registry_lookup(fake_handle(i));
        ck_assert_ptr_eq(r, rec[i]);
        ck_assert_ptr_eq(atomic_load(&r->cls), CLS);
        ck_assert_uint_eq(r->index, 5);
        ck_assert_uint_eq(r->kind, CUPOOL_KIND_EVENT);
        ck_assert_uint_eq(atomic_load(&r->state), CUPOOL_H_OWNED);
    }
    ck_assert_ptr_null(cupool__registry_lookup(fake_handle(N + 5)));
    for (uintptr_t i = 0; i < N; i += 2)
        cupool__registry_remove(rec[i]);
    ck_assert_uint_eq(cupool__registry_count(), N / 2);
    for (uintptr_t i = 0; i < N; i++) {
        struct cupool__handle *r = cupool__registry_lookup(fake_handle(i));
        if (i % 2)
            ck_assert_ptr_eq(r, rec[i]);
        else
            ck_assert_ptr_null(r);
    }
    /* removed records are reused; tombstones do not grow the table without bound */
    for (int round = 0; round < 50; round++) {
        for (uintptr_t i = 0; i < N; i += 2)
            rec[i] = cupool__registry_insert(fake_handle(i + 1000000 * (round + 1)), CLS,
                                             CUPOOL_H_IDLE);
        for (uintptr_t i = 0; i < N; i += 2)
            cupool__registry_remove(rec[i]);
    }
    ck_assert_uint_eq(cupool__registry_count(), N / 2);
    for (uintptr_t i = 1; i < N; i += 2)
        ck_assert_ptr_eq(cupool__registry_lookup(fake_handle(i)), rec[i]);
}
END_TEST

static _Atomic int stop;
static _Atomic int misses;
enum { STABLE = 512 };

static void *reader(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop))
        for (uintptr_t i = 0; i < STABLE; i++)
            if (cupool__registry_lookup(fake_handle(i)) == NULL)
                atomic_fetch_add(&misses, 1);
    return NULL;
}

START_TEST(lookups_race_with_growth)
{
    for (uintptr_t i = 0; i < STABLE; i++)
        cupool__registry_insert(fake_handle(i), CLS, CUPOOL_H_OWNED);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, reader, NULL);
    /* grow the table many times and churn tombstones while readers look up stable handles */
    static struct cupool__handle *r[100000];
    for (uintptr_t i = 0; i < 100000; i++)
        r[i] = cupool__registry_insert(fake_handle(STABLE + i), CLS, CUPOOL_H_IDLE);
    for (uintptr_t i = 0; i < 100000; i++)
        cupool__registry_remove(r[i]);
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&misses), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, insert_lookup_remove_grow);
    tcase_add_test(tc, lookups_race_with_growth);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
