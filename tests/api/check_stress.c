/* SPDX-License-Identifier: MIT */
/*
 * Many threads acquiring and releasing streams and events, handing some to other threads to
 * release. A shared ownership table proves no handle is ever held by two owners at once; at
 * the end nothing is in use and (on the simulated driver) the driver's live handles equal
 * cupool's idle plus in-use counts. Sized by CUPOOLTEST_STRESS_ITERS (default 20000 per thread)
 * so the sanitizer runs stay within minutes.
 */
#define _GNU_SOURCE
#include "common/testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 16
#define HELD_MAX 8
#define TABLE_BITS 16
#define TABLE_SIZE (1u << TABLE_BITS)

/* Handle -> "held by a test thread" flag. A handle's slot, once taken, stays its own (keys are
 * never removed), so the table is a plain lock-free set. Acquiring a handle whose flag is
 * already set means cupool handed it to two owners. */
static _Atomic(void *) keys[TABLE_SIZE];
static _Atomic int held_flag[TABLE_SIZE];
static _Atomic int violations;

static size_t slot_of(const void *h)
{
    return (size_t)(((uintptr_t)h * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - TABLE_BITS));
}

static _Atomic int *flag_of(void *h)
{
    for (size_t i = slot_of(h);; i = (i + 1) & (TABLE_SIZE - 1)) {
        void *cur = atomic_load(&keys[i]);
        if (cur == h)
            return &held_flag[i];
        if (cur == NULL) {
            void *expected = NULL;
            if (atomic_compare_exchange_strong(&keys[i], &expected, h) || expected == h)
                return &held_flag[i];
        }
    }
}

static void own(void *h)
{
    if (atomic_exchange(flag_of(h), 1) != 0)
        atomic_fetch_add(&violations, 1);
}

static void disown(void *h)
{
    if (atomic_exchange(flag_of(h), 0) != 1)
        atomic_fetch_add(&violations, 1);
}

/* A mailbox per thread: handles another thread acquired and this one must release. */
struct mailbox {
    pthread_mutex_t lock;
    void *items[256];
    int kinds[256];
    int n;
};
static struct mailbox boxes[THREADS];
static cupool_stream_pool_t stream_pool;
static cupool_event_pool_t event_pool;
static long iters;
static _Atomic int errors;

static void note(CUresult r)
{
    if (r != CUDA_SUCCESS)
        atomic_fetch_add(&errors, 1);
}

static void release_one(void *h, int kind)
{
    disown(h);
    switch (kind) {
    case 0: note(cupool_stream_release(h)); break;
    case 1: note(cupool_event_release(h)); break;
    case 2: note(cupool_stream_pool_release(stream_pool, h, CUPOOL_RELEASE_NOT_CAPTURING)); break;
    default: note(cupool_event_pool_release(event_pool, h)); break;
    }
}

static void drain_box(int me)
{
    struct mailbox *b = &boxes[me];
    pthread_mutex_lock(&b->lock);
    while (b->n > 0) {
        b->n--;
        release_one(b->items[b->n], b->kinds[b->n]);
    }
    pthread_mutex_unlock(&b->lock);
}

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    unsigned int seed = (unsigned int)me * 2654435761u;
    tu.cuCtxSetCurrent(tu_ctx);
    void *held[HELD_MAX];
    int kinds[HELD_MAX];
    for (long it = 0; it < iters; it++) {
        int n = 1 + (int)(rand_r(&seed) % HELD_MAX);
        for (int i = 0; i < n; i++) {
            kinds[i] = (int)(rand_r(&seed) % 4);
            CUresult r;
            switch (kinds[i]) {
            case 0: r = cupool_stream_acquire((CUstream *)&held[i], CU_STREAM_NON_BLOCKING, 0); break;
            case 1: r = cupool_event_acquire((CUevent *)&held[i], CU_EVENT_DISABLE_TIMING); break;
            case 2: r = cupool_stream_pool_acquire(stream_pool, (CUstream *)&held[i]); break;
            default: r = cupool_event_pool_acquire(event_pool, (CUevent *)&held[i]); break;
            }
            if (r != CUDA_SUCCESS) {
                note(r);
                n = i;
                break;
            }
            own(held[i]);
        }
        for (int i = 0; i < n; i++) {
            if (rand_r(&seed) % 4 == 0) {
                /* hand it to another thread to release */
                int to = (int)(rand_r(&seed) % THREADS);
                struct mailbox *b = &boxes[to];
                pthread_mutex_lock(&b->lock);
                if (b->n < 256) {
                    b->items[b->n] = held[i];
                    b->kinds[b->n] = kinds[i];
                    b->n++;
                    held[i] = NULL;
                }
                pthread_mutex_unlock(&b->lock);
            }
            if (held[i])
                release_one(held[i], kinds[i]);
        }
        if (it % 16 == 0)
            drain_box(me);
    }
    drain_box(me);
    return NULL;
}

START_TEST(sixteen_threads_cross_release)
{
    tu_setup();
    const char *it = getenv("CUPOOLTEST_STRESS_ITERS");
    iters = it ? atol(it) : 20000;
    /* Both APIs share these classes: flags NON_BLOCKING / DISABLE_TIMING. */
    TU_OK(cupool_stream_pool_get(&stream_pool, NULL, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_event_pool_get(&event_pool, NULL, CU_EVENT_DISABLE_TIMING));
    for (int i = 0; i < THREADS; i++)
        pthread_mutex_init(&boxes[i].lock, NULL);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++)
        drain_box(i); /* late hand-offs */
    ck_assert_int_eq(atomic_load(&errors), 0);
    ck_assert_int_eq(atomic_load(&violations), 0);
    cupool_class_stats_t st[8] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 8, &n));
    ck_assert_uint_eq(n, 2);
    uint64_t live[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(st[i].in_use, 0);
        ck_assert_uint_eq(st[i].acquires, st[i].releases);
        ck_assert_uint_ge(st[i].acquires, (uint64_t)iters);
        live[st[i].kind] += st[i].idle;
    }
    if (tu_fake.present) {
        ck_assert_int_eq(tu_fake.live_streams(), (int)live[CUPOOL_KIND_STREAM]);
        ck_assert_int_eq(tu_fake.live_events(), (int)live[CUPOOL_KIND_EVENT]);
    }
    /* Trim from here returns everything above the low-water mark except what other (exited)
     * threads' caches gave back to the depot: they hold nothing now. */
    tu_trim_leaves_nothing();
}
END_TEST

static Suite *stress_suite(void)
{
    Suite *s = suite_create("stress");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sixteen_threads_cross_release);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(stress_suite());
}
