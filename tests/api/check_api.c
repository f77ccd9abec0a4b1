/* SPDX-License-Identifier: MIT */
/* The public stream and event API, on whichever driver cupool loads (see testutil.h). */
#define _GNU_SOURCE
#include "common/testutil.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void setup(void)
{
    tu_setup();
}

/* The simulated-driver cases inject faults by call count and count calls: every driver call
 * on the test's thread (no maintenance thread), so that the n-th call is the test's. */
static void setup_inline(void)
{
    setenv("CUPOOL_BACKGROUND", "0", 1);
    tu_setup();
}

/* ---- streams: basics ---- */

START_TEST(stream_acquire_release_reuses)
{
    CUstream s = NULL, again = NULL;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    ck_assert_ptr_nonnull(s);
    unsigned int flags = 99;
    TU_OK(tu.cuStreamGetFlags(s, &flags));
    ck_assert_uint_eq(flags & CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
    TU_OK(tu.cuStreamQuery(s));
    TU_OK(cupool_stream_release(s));
    TU_OK(cupool_stream_acquire(&again, CU_STREAM_NON_BLOCKING, 0));
    ck_assert_ptr_eq(again, s); /* LIFO: the thread's own magazine */
    TU_OK(cupool_stream_release(again));
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.acquires, 2);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.creates, 1);
    ck_assert_uint_eq(st.releases, 2);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.idle, 1);
    ck_assert_uint_eq(st.high_water, 1);
}
END_TEST

START_TEST(stream_ownership_exclusive)
{
    enum { N = 100 };
    CUstream s[N];
    for (int i = 0; i < N; i++) {
        TU_OK(cupool_stream_acquire(&s[i], 0, 0));
        for (int j = 0; j < i; j++)
            ck_assert_ptr_ne(s[i], s[j]);
    }
    for (int i = 0; i < N; i++)
        TU_OK(cupool_stream_release(s[i]));
    /* Reacquire: all N come back from the pool, still distinct, no new creation. */
    for (int i = 0; i < N; i++) {
        TU_OK(cupool_stream_acquire(&s[i], 0, 0));
        for (int j = 0; j < i; j++)
            ck_assert_ptr_ne(s[i], s[j]);
    }
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.creates, N);
    ck_assert_uint_eq(st.in_use, N);
    ck_assert_uint_eq(st.high_water, N);
    for (int i = 0; i < N; i++)
        TU_OK(cupool_stream_release(s[i]));
}
END_TEST

START_TEST(stream_bad_arguments)
{
    CUstream s = (CUstream)0x1234;
    TU_EQ(cupool_stream_acquire(NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stream_acquire(&s, 2, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_eq(s, (CUstream)0x1234);
    ck_assert_msg(strstr(cupool_error_string(), "unknown flags 0x2") != NULL, "%s",
                  cupool_error_string());
    TU_EQ(cupool_stream_release(NULL), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_uint_eq(tu_class_count(), 0);
}
END_TEST

START_TEST(stream_double_release_rejected)
{
    CUstream s, t;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_stream_release(s));
    cupool_class_stats_t before = tu_stats(CUPOOL_KIND_STREAM, 0);
    TU_EQ(cupool_stream_release(s), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_msg(strstr(cupool_error_string(), "already released") != NULL, "%s",
                  cupool_error_string());
    cupool_class_stats_t after = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(after.releases, before.releases);
    ck_assert_uint_eq(after.idle, before.idle);
    /* The pool holds the stream once: two acquires give two different streams. */
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_stream_acquire(&t, 0, 0));
    ck_assert_ptr_ne(s, t);
    TU_OK(cupool_stream_release(s));
    TU_OK(cupool_stream_release(t));
}
END_TEST

/* What a release catches, and the limit docs/reliability.md states ("What a release can and
 * cannot catch"): a second release of a handle cupool holds idle is refused, however often;
 * once the value was handed out again, a stale second release cannot be told from the new
 * owner's and is taken as it, and the new owner's own release is the one refused. */
START_TEST(release_checks_and_their_limits)
{
    CUstream a, b;
    CUevent e;
    TU_OK(cupool_stream_acquire(&a, 0, 0));
    TU_OK(cupool_stream_release(a));
    for (int i = 0; i < 3; i++) /* idle: refused, nothing changes */
        TU_EQ(cupool_stream_release(a), CUDA_ERROR_INVALID_HANDLE);
    TU_EQ(cupool_event_release((CUevent)a), CUDA_ERROR_INVALID_HANDLE); /* not an event */
    TU_OK(cupool_stream_acquire(&b, 0, 0));
    ck_assert_ptr_eq(a, b);                 /* the same value, now b's owner's */
    TU_OK(cupool_stream_release(a));        /* the stale release: taken as b's */
    TU_EQ(cupool_stream_release(b), CUDA_ERROR_INVALID_HANDLE); /* b's own: refused */
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.idle, 1);
    TU_OK(cupool_event_acquire(&e, 0));
    TU_OK(cupool_event_release(e));
    TU_EQ(cupool_event_release(e), CUDA_ERROR_INVALID_HANDLE);
}
END_TEST

START_TEST(stream_foreign_release_rejected)
{
    CUstream mine;
    TU_OK(tu.cuStreamCreate(&mine, 0));
    TU_OK(cupool_stream_acquire(&(CUstream){0}, 0, 0)); /* cupool initialised with a class */
    TU_EQ(cupool_stream_release(mine), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_msg(strstr(cupool_error_string(), "not handed out by cupool") != NULL, "%s",
                  cupool_error_string());
    TU_OK(tu.cuStreamQuery(mine)); /* untouched: still the caller's */
    TU_OK(tu.cuStreamDestroy(mine));
    CUevent e;
    TU_OK(cupool_event_acquire(&e, 0));
    TU_EQ(cupool_stream_release((CUstream)e), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_msg(strstr(cupool_error_string(), "is not a stream (it is a pooled event)"), "%s",
                  cupool_error_string());
    TU_OK(cupool_event_release(e)); /* the failed stream release did not take it */
}
END_TEST

START_TEST(stream_priority_clamped_into_one_class)
{
    CUstream a, b;
    TU_OK(cupool_stream_acquire(&a, 0, -100));
    int prio = 1;
    TU_OK(tu.cuStreamGetPriority(a, &prio));
    TU_OK(cupool_stream_release(a));
    int least_or_greatest = prio;
    /* Asking for exactly the clamped value lands in the same class and reuses the stream. */
    TU_OK(cupool_stream_acquire(&b, 0, least_or_greatest));
    ck_assert_ptr_eq(a, b);
    TU_OK(cupool_stream_release(b));
    ck_assert_uint_eq(tu_class_count(), 1);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_int_eq(st.priority, prio);
    /* A different priority is a different class. */
    TU_OK(cupool_stream_acquire(&b, 0, 1000));
    TU_OK(tu.cuStreamGetPriority(b, &prio));
    ck_assert_int_eq(prio, 0);
    TU_OK(cupool_stream_release(b));
    ck_assert_uint_eq(tu_class_count(), prio == least_or_greatest ? 1 : 2);
}
END_TEST

START_TEST(stream_flags_are_separate_classes)
{
    CUstream a, b;
    TU_OK(cupool_stream_acquire(&a, 0, 0));
    TU_OK(cupool_stream_release(a));
    TU_OK(cupool_stream_acquire(&b, CU_STREAM_NON_BLOCKING, 0));
    ck_assert_ptr_ne(a, b);
    TU_OK(cupool_stream_release(b));
    ck_assert_uint_eq(tu_class_count(), 2);
}
END_TEST

START_TEST(no_current_context)
{
    TU_OK(tu.cuCtxSetCurrent(NULL));
    CUstream s = NULL;
    CUevent e = NULL;
    TU_EQ(cupool_stream_acquire(&s, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
    TU_EQ(cupool_event_acquire(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(cupool_error_string(), "no current context") != NULL, "%s",
                  cupool_error_string());
    cupool_stream_pool_t pool;
    TU_EQ(cupool_stream_pool_get(&pool, NULL, 0, 0), CUDA_ERROR_INVALID_CONTEXT);
}
END_TEST

/* ---- ordering of queued work across owners ---- */

START_TEST(reused_stream_runs_after_previous_owners_work)
{
    struct tu_kernels k;
    tu_load_kernels(&k);
    CUdeviceptr p;
    TU_OK(tu.cuMemAlloc(&p, 4));
    TU_OK(tu.cuMemsetD32(p, 0, 1));
    /* Owner A: 200 ms of work, then *p = 1; released without synchronising. */
    CUstream a, b;
    TU_OK(cupool_stream_acquire(&a, CU_STREAM_NON_BLOCKING, 0));
    uint64_t ns = 200000000;
    unsigned int one = 1, ten = 10;
    tu_launch1(k.spin, a, (void *[]){&ns});
    tu_launch1(k.set_u32, a, (void *[]){&p, &one});
    TU_EQ(tu.cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    TU_OK(cupool_stream_release(a));
    /* Owner B gets the same stream; its work runs after A's, and its sync waits for A's. */
    TU_OK(cupool_stream_acquire(&b, CU_STREAM_NON_BLOCKING, 0));
    ck_assert_ptr_eq(a, b);
    tu_launch1(k.add_u32, b, (void *[]){&p, &ten});
    TU_OK(tu.cuStreamSynchronize(b));
    unsigned int v = 0;
    TU_OK(tu.cuMemcpyDtoH(&v, p, 4));
    ck_assert_uint_eq(v, 11); /* 1 then +10: A's set ran first */
    TU_OK(cupool_stream_release(b));
    TU_OK(tu.cuMemFree(p));
}
END_TEST

/* ---- capture and error states ---- */

START_TEST(stream_released_in_capture_is_never_reused)
{
    CUstream s, t;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(tu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    TU_OK(cupool_stream_release(s));
    TU_OK(cupool_stream_acquire(&t, CU_STREAM_NON_BLOCKING, 0));
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    TU_OK(tu.cuStreamIsCapturing(t, &cs));
    ck_assert_int_eq(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.dropped, 1);
    ck_assert_uint_eq(st.destroys, 1);
    ck_assert_uint_eq(st.in_use, 1);
    ck_assert_uint_eq(st.idle, 0);
    TU_OK(cupool_stream_release(t));
    if (tu_fake.present)
        ck_assert_int_eq(tu_fake.live_streams(), 1);
}
END_TEST

/* Driver calls of an explicit pool's hit: the context check (cuCtxGetId(ctx)) unless the pool
 * was made with the promise CUPOOL_POOL_CONTEXT_OUTLIVES, and the capture check unless the
 * stream was released vouched. */
START_TEST(stream_vouched_release_skips_check)
{
    cupool_stream_pool_t pool, promised;
    TU_OK(cupool_stream_pool_get(&pool, NULL, 0, 0));
    TU_OK(cupool_stream_pool_get(&promised, NULL, CUPOOL_POOL_CONTEXT_OUTLIVES, 0));
    ck_assert_ptr_ne(pool, promised); /* two handles, one class */
    ck_assert_uint_eq(tu_class_count(), 1);
    CUstream s, t;
    TU_OK(cupool_stream_pool_acquire(pool, &s));
    TU_OK(cupool_stream_pool_release(pool, s, CUPOOL_RELEASE_NOT_CAPTURING));
    unsigned long before = tu_fake.present ? tu_fake.calls_total() : 0;
    TU_OK(cupool_stream_pool_acquire(pool, &t));
    ck_assert_ptr_eq(s, t);
    if (tu_fake.present) { /* the context check only */
        ck_assert_uint_eq(tu_fake.calls_total() - before, 1);
        ck_assert_uint_eq(tu_fake.calls("cuStreamIsCapturing"), 0);
    }
    TU_OK(cupool_stream_pool_release(promised, t, CUPOOL_RELEASE_NOT_CAPTURING));
    before = tu_fake.present ? tu_fake.calls_total() : 0;
    TU_OK(cupool_stream_pool_acquire(promised, &t));
    ck_assert_ptr_eq(s, t);
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.calls_total(), before); /* no driver call at all */
    TU_OK(cupool_stream_pool_release(pool, t, 0));
    if (tu_fake.present) {
        before = tu_fake.calls_total();
        TU_OK(cupool_stream_pool_acquire(pool, &t));
        /* unchecked: cuCtxGetId(pool context) + cuStreamIsCapturing */
        ck_assert_uint_eq(tu_fake.calls_total() - before, 2);
        ck_assert_uint_eq(tu_fake.calls("cuStreamIsCapturing"), 1);
        TU_OK(cupool_stream_pool_release(pool, t, 0));
        before = tu_fake.calls_total();
        TU_OK(cupool_stream_pool_acquire(promised, &t));
        ck_assert_uint_eq(tu_fake.calls_total() - before, 1); /* cuStreamIsCapturing */
        TU_OK(cupool_stream_pool_release(promised, t, 0));
    }
}
END_TEST

/* ---- explicit pools ---- */

START_TEST(explicit_pools)
{
    cupool_stream_pool_t p1, p2, p3;
    TU_OK(cupool_stream_pool_get(&p1, NULL, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_stream_pool_get(&p2, tu_ctx, CU_STREAM_NON_BLOCKING, 0));
    ck_assert_ptr_eq(p1, p2);
    TU_OK(cupool_stream_pool_get(&p3, NULL, 0, 0));
    ck_assert_ptr_ne(p1, p3);
    CUstream s;
    TU_OK(cupool_stream_pool_acquire(p1, &s));
    TU_EQ(cupool_stream_pool_release(p3, s, 0), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_msg(strstr(cupool_error_string(), "another pool") != NULL, "%s",
                  cupool_error_string());
    /* the message says how the two pools differ, the priority included */
    ck_assert_msg(strstr(cupool_error_string(), "flags 0x1, priority 0; this pool: context") &&
                      strstr(cupool_error_string(), "flags 0x0, priority 0)"),
                  "%s", cupool_error_string());
    TU_EQ(cupool_stream_pool_release(p1, s, 0x80), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stream_pool_release(NULL, s, 0), CUDA_ERROR_INVALID_VALUE);
    /* The current-context API and the explicit pool share the class. */
    TU_OK(cupool_stream_release(s));
    CUstream t;
    TU_OK(cupool_stream_acquire(&t, CU_STREAM_NON_BLOCKING, 0));
    ck_assert_ptr_eq(s, t);
    TU_OK(cupool_stream_pool_release(p1, t, 0));
    TU_EQ(cupool_stream_pool_acquire(p1, NULL), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stream_pool_acquire(NULL, &t), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stream_pool_get(NULL, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stream_pool_get(&p1, NULL, 4, 0), CUDA_ERROR_INVALID_VALUE);

    cupool_event_pool_t e1, e2;
    TU_OK(cupool_event_pool_get(&e1, NULL, CU_EVENT_DISABLE_TIMING));
    TU_OK(cupool_event_pool_get(&e2, tu_ctx, CU_EVENT_DISABLE_TIMING));
    ck_assert_ptr_eq(e1, e2);
    CUevent ev;
    TU_OK(cupool_event_pool_acquire(e1, &ev));
    /* A stream pool is not an event pool. */
    TU_EQ(cupool_event_pool_release((cupool_event_pool_t)p1, ev), CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool_event_pool_release(e1, ev));
    TU_EQ(cupool_event_pool_get(&e1, NULL, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

/* A release through an explicit pool of a handle other than the thread's last acquired one
 * (a completion thread's release) finds its record by lookup and matches it against the pool
 * value: the right pool takes it back, onto the releasing thread's magazine; a wrong pool, the
 * other kind's release, or a second release is refused and the handle stays the caller's. */
struct other_thread_release {
    cupool_stream_pool_t pool;
    CUstream s;
    CUresult r, again;
    CUstream next;
};

static void *release_elsewhere(void *arg)
{
    struct other_thread_release *o = arg;
    o->r = cupool_stream_pool_release(o->pool, o->s, CUPOOL_RELEASE_NOT_CAPTURING);
    o->again = cupool_stream_pool_release(o->pool, o->s, CUPOOL_RELEASE_NOT_CAPTURING);
    if (tu.cuCtxSetCurrent(tu_ctx) == CUDA_SUCCESS &&
        cupool_stream_pool_acquire(o->pool, &o->next) == CUDA_SUCCESS)
        (void)cupool_stream_pool_release(o->pool, o->next, CUPOOL_RELEASE_NOT_CAPTURING);
    return NULL;
}

START_TEST(explicit_pool_release_of_a_handle_not_the_last)
{
    cupool_stream_pool_t p1, p3;
    TU_OK(cupool_stream_pool_get(&p1, tu_ctx, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_stream_pool_get(&p3, tu_ctx, 0, 0));
    CUstream s0, s1;
    TU_OK(cupool_stream_pool_acquire(p1, &s0));
    TU_OK(cupool_stream_pool_acquire(p1, &s1)); /* the last acquired: s0 is not */
    TU_EQ(cupool_stream_pool_release(p3, s0, 0), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_msg(strstr(cupool_error_string(), "another pool") != NULL, "%s",
                  cupool_error_string());
    TU_EQ(cupool_event_pool_release((cupool_event_pool_t)p1, (CUevent)s0),
          CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool_stream_pool_release(p1, s0, CUPOOL_RELEASE_NOT_CAPTURING));
    TU_EQ(cupool_stream_pool_release(p1, s0, CUPOOL_RELEASE_NOT_CAPTURING),
          CUDA_ERROR_INVALID_HANDLE);
    /* on another thread: taken back there, and handed out there next */
    struct other_thread_release o = {.pool = p1, .s = s1};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, release_elsewhere, &o), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    TU_OK(o.r);
    TU_EQ(o.again, CUDA_ERROR_INVALID_HANDLE);
    ck_assert_ptr_eq(o.next, s1);
    /* s0 is still this thread's next */
    CUstream again;
    TU_OK(cupool_stream_pool_acquire(p1, &again));
    ck_assert_ptr_eq(again, s0);
    TU_OK(cupool_stream_pool_release(p1, again, CUPOOL_RELEASE_NOT_CAPTURING));
}
END_TEST

/* ---- events ---- */

START_TEST(event_acquire_record_release)
{
    CUevent e, again;
    CUstream s;
    TU_OK(cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING));
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(tu.cuEventRecord(e, s));
    TU_OK(tu.cuEventSynchronize(e));
    TU_OK(cupool_event_release(e));
    unsigned long before = tu_fake.present ? tu_fake.calls_total() : 0;
    TU_OK(cupool_event_acquire(&again, CU_EVENT_DISABLE_TIMING));
    if (tu_fake.present)
        ck_assert_uint_eq(tu_fake.calls_total() - before, 1); /* cuCtxGetId only */
    ck_assert_ptr_eq(e, again);
    TU_EQ(cupool_event_release((CUevent)s), CUDA_ERROR_INVALID_HANDLE);
    TU_OK(cupool_event_release(again));
    TU_EQ(cupool_event_release(again), CUDA_ERROR_INVALID_HANDLE);
    TU_OK(cupool_stream_release(s));
}
END_TEST

START_TEST(event_bad_flags)
{
    CUevent e = NULL;
    static const unsigned int bad[] = {8, 0x10, CU_EVENT_INTERPROCESS,
                                       CU_EVENT_INTERPROCESS | CU_EVENT_BLOCKING_SYNC, ~0u};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        TU_EQ(cupool_event_acquire(&e, bad[i]), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_event_acquire(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_null(e);
    TU_OK(cupool_event_acquire(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    TU_OK(cupool_event_release(e));
}
END_TEST

/* ---- threads ---- */

struct handoff {
    CUstream s;
    CUresult r;
};

static void *release_in_thread(void *arg)
{
    struct handoff *h = arg;
    tu.cuCtxSetCurrent(tu_ctx);
    h->r = cupool_stream_release(h->s);
    /* The stream is now in this thread's magazine; this thread's next acquire gets it. */
    CUstream again = NULL;
    CUresult r = cupool_stream_acquire(&again, 0, 0);
    if (h->r == CUDA_SUCCESS)
        h->r = r != CUDA_SUCCESS ? r : again != h->s ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        cupool_stream_release(again);
    return NULL;
}

START_TEST(cross_thread_release)
{
    struct handoff h = {0};
    TU_OK(cupool_stream_acquire(&h.s, 0, 0));
    pthread_t t;
    /* The other thread needs the context current for its own acquire. */
    ck_assert_int_eq(pthread_create(&t, NULL, release_in_thread, &h), 0);
    pthread_join(t, NULL);
    TU_OK(h.r);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.creates, 1);
}
END_TEST

static void *churn_thread(void *arg)
{
    CUcontext ctx = arg;
    tu.cuCtxSetCurrent(ctx);
    CUstream s[10];
    for (int i = 0; i < 10; i++)
        if (cupool_stream_acquire(&s[i], 0, 0) != CUDA_SUCCESS)
            return (void *)1;
    for (int i = 0; i < 10; i++)
        cupool_stream_release(s[i]);
    return NULL;
}

START_TEST(thread_exit_returns_magazines)
{
    pthread_t t;
    void *ret = (void *)1;
    ck_assert_int_eq(pthread_create(&t, NULL, churn_thread, tu_ctx), 0);
    pthread_join(t, &ret);
    ck_assert_ptr_null(ret);
    unsigned long creates_before = tu_stats(CUPOOL_KIND_STREAM, 0).creates;
    ck_assert_uint_eq(creates_before, 10);
    /* The exited thread's streams are in the depot: 10 acquires here create nothing. */
    CUstream s[10];
    for (int i = 0; i < 10; i++)
        TU_OK(cupool_stream_acquire(&s[i], 0, 0));
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.creates, 10);
    ck_assert_uint_eq(st.in_use, 10);
    for (int i = 0; i < 10; i++)
        TU_OK(cupool_stream_release(s[i]));
}
END_TEST

/* ---- caps, trim, prewarm, pass-through ---- */

START_TEST(idle_cap_destroys_lazily)
{
    /* magazine 4, depot cap 8: releasing 64 streams keeps at most 8 in the depot, 8 in this
     * thread's magazines and one magazine (4) queued for destruction. */
    setenv("CUPOOL_MAGAZINE_SIZE", "4", 1);
    setenv("CUPOOL_STREAM_IDLE_MAX", "8", 1);
    setenv("CUPOOL_BACKGROUND", "0", 1); /* the inline fallback: destroyed on the exchange */
    tu_setup();
    enum { N = 64 };
    CUstream s[N];
    for (int i = 0; i < N; i++)
        TU_OK(cupool_stream_acquire(&s[i], 0, 0));
    for (int i = 0; i < N; i++)
        TU_OK(cupool_stream_release(s[i]));
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_le(st.idle, 8 + 8 + 4);
    ck_assert_uint_eq(st.destroys, N - st.idle);
    if (tu_fake.present)
        ck_assert_int_eq(tu_fake.live_streams(), (int)st.idle);
    /* trim leaves nothing idle (low-water 0) */
    TU_OK(cupool_trim());
    st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.idle, 0);
    ck_assert_uint_eq(st.destroys, N);
    if (tu_fake.present)
        ck_assert_int_eq(tu_fake.live_streams(), 0);
}
END_TEST

/* Exited threads hand their magazines back without a driver call; above the cap they queue
 * for destruction. A later release destroys at most two magazines of that backlog, never
 * the lot. */
static pthread_barrier_t all_hold;

static void *fill_and_exit(void *arg)
{
    (void)arg;
    CUevent e[16];
    tu.cuCtxSetCurrent(tu_ctx);
    for (int i = 0; i < 16; i++)
        TU_OK(cupool_event_acquire(&e[i], CU_EVENT_DISABLE_TIMING));
    pthread_barrier_wait(&all_hold); /* 10 x 16 events alive at once */
    for (int i = 0; i < 16; i++)
        TU_OK(cupool_event_release(e[i]));
    return NULL;
}

START_TEST(release_drains_backlog_in_bounded_steps)
{
    setenv("CUPOOL_MAGAZINE_SIZE", "8", 1);
    setenv("CUPOOL_EVENT_IDLE_MAX", "8", 1);
    setenv("CUPOOL_BACKGROUND", "0", 1); /* the inline fallback */
    tu_setup();
    pthread_t t[10];
    pthread_barrier_init(&all_hold, NULL, 10);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, fill_and_exit, NULL), 0);
    for (int i = 0; i < 10; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&all_hold);
    uint64_t backlog = tu_stats(CUPOOL_KIND_EVENT, CU_EVENT_DISABLE_TIMING).idle;
    ck_assert_uint_eq(backlog, 160); /* all idle, 20 times the cap: the exits called no driver */
    CUevent e[64];
    for (int i = 0; i < 64; i++)
        TU_OK(cupool_event_acquire(&e[i], CU_EVENT_DISABLE_TIMING));
    unsigned long worst = 0;
    for (int i = 0; i < 64; i++) {
        unsigned long before = tu_fake.present ? tu_fake.calls("cuEventDestroy") : 0;
        TU_OK(cupool_event_release(e[i]));
        unsigned long n = tu_fake.present ? tu_fake.calls("cuEventDestroy") - before : 0;
        worst = n > worst ? n : worst;
    }
    ck_assert_msg(worst <= 2 * 8, "one release destroyed %lu events", worst);
    TU_OK(cupool_trim());
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_EVENT, CU_EVENT_DISABLE_TIMING).idle, 0);
}
END_TEST

START_TEST(prewarm_and_trim_low_water)
{
    setenv("CUPOOL_STREAM_PREWARM", "6", 1);
    tu_setup();
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.creates, 6);
    ck_assert_uint_eq(st.hits, 1);
    ck_assert_uint_eq(st.idle, 5);
    TU_OK(cupool_stream_release(s));
    TU_OK(cupool_trim()); /* keeps the low-water mark: 6 idle */
    st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.idle, 6);
    ck_assert_uint_eq(st.destroys, 0);
}
END_TEST

START_TEST(disabled_is_pass_through)
{
    setenv("CUPOOL_DISABLE", "1", 1);
    tu_setup();
    CUstream s;
    CUevent e;
    for (int i = 0; i < 5; i++) {
        TU_OK(cupool_stream_acquire(&s, 0, 0));
        TU_OK(cupool_event_acquire(&e, 0));
        if (tu_fake.present) {
            ck_assert_int_eq(tu_fake.live_streams(), 1);
            ck_assert_int_eq(tu_fake.live_events(), 1);
        }
        TU_OK(cupool_stream_release(s));
        TU_OK(cupool_event_release(e));
        TU_EQ(cupool_event_release(e), CUDA_ERROR_INVALID_HANDLE);
        if (tu_fake.present) {
            ck_assert_int_eq(tu_fake.live_streams(), 0);
            ck_assert_int_eq(tu_fake.live_events(), 0);
        }
    }
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.creates, 5);
    ck_assert_uint_eq(st.destroys, 5);
    ck_assert_uint_eq(st.hits, 0);
    ck_assert_uint_eq(st.idle, 0);
}
END_TEST

/* ---- statistics ---- */

START_TEST(stats_get_and_print)
{
    CUstream s;
    CUevent e;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING));
    size_t n = 99;
    TU_OK(cupool_stats_get(NULL, 0, &n));
    ck_assert_uint_eq(n, 2);
    cupool_class_stats_t one[1] = {CUPOOL_CLASS_STATS_INIT};
    TU_OK(cupool_stats_get(one, 1, &n));
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(one[0].kind, CUPOOL_KIND_STREAM); /* oldest class first */
    TU_EQ(cupool_stats_get(NULL, 1, &n), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stats_get(one, 1, NULL), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_stats_print(NULL), CUDA_ERROR_INVALID_VALUE);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    TU_OK(cupool_stats_print(f));
    fclose(f);
    ck_assert_msg(strstr(buf, "stream") && strstr(buf, "event") && strstr(buf, "acquires"), "%s",
                  buf);
    free(buf);
    TU_OK(cupool_stream_release(s));
    TU_OK(cupool_event_release(e));
}
END_TEST

/* ---- lifecycle corners that belong to the basic contract ---- */

START_TEST(context_reset_old_handles_harmless)
{
    struct tu_kernels k;
    CUstream old, fresh;
    CUevent old_ev;
    TU_OK(cupool_stream_acquire(&old, 0, 0));
    TU_OK(cupool_event_acquire(&old_ev, 0));
    CUstream idle;
    TU_OK(cupool_stream_acquire(&idle, 0, 0));
    TU_OK(cupool_stream_release(idle)); /* one idle stream of the old context in the pool */
    TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    /* Releasing handles of the reset context touches no driver state. */
    TU_OK(cupool_stream_release(old));
    TU_OK(cupool_event_release(old_ev));
    TU_OK(cupool_stream_acquire(&fresh, 0, 0));
    /* The new stream belongs to the new context and works. */
    tu_load_kernels(&k);
    CUdeviceptr p;
    TU_OK(tu.cuMemAlloc(&p, 4));
    TU_OK(tu.cuMemsetD32(p, 5, 1));
    tu_launch1(k.addone, fresh, (void *[]){&p});
    TU_OK(tu.cuStreamSynchronize(fresh));
    unsigned int v = 0;
    TU_OK(tu.cuMemcpyDtoH(&v, p, 4));
    ck_assert_uint_eq(v, 6);
    TU_OK(cupool_stream_release(fresh));
    cupool_class_stats_t st[8] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 8, &n));
    int dead = 0;
    for (size_t i = 0; i < n; i++)
        dead += !st[i].context_alive;
    ck_assert_int_eq(dead, 2); /* the old stream and event classes */
    TU_OK(cupool_trim()); /* must not touch the old context's idle stream either */
    /* nothing of the old context is left: trim reclaimed its classes */
    TU_OK(cupool_stats_get(st, 8, &n));
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(st[0].context_alive, 1);
}
END_TEST

START_TEST(explicit_pool_of_reset_context_refuses)
{
    cupool_event_pool_t ep;
    CUevent a, b, y;
    TU_OK(cupool_event_pool_get(&ep, NULL, 0));
    TU_OK(cupool_event_pool_acquire(ep, &a));
    TU_OK(cupool_event_pool_acquire(ep, &b));
    TU_OK(cupool_event_pool_release(ep, a));
    TU_OK(cupool_event_pool_release(ep, b));
    TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    TU_OK(cupool_event_acquire(&y, 0)); /* the new context: cupool learns the old one is gone */
    CUevent x = NULL;
    TU_EQ(cupool_event_pool_acquire(ep, &x), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    ck_assert_ptr_null(x);
    TU_OK(tu.cuEventRecord(y, NULL)); /* the new context's event works */
    TU_OK(tu.cuEventSynchronize(y));
    TU_OK(cupool_event_release(y));
}
END_TEST

START_TEST(forked_child_refuses)
{
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    pid_t pid = fork();
    if (pid == 0) {
        CUstream c = NULL;
        CUresult r1 = cupool_stream_acquire(&c, 0, 0);
        CUresult r2 = cupool_stream_release(s);
        _exit(r1 == CUDA_ERROR_NOT_PERMITTED && r2 == CUDA_ERROR_NOT_PERMITTED && !c ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    TU_OK(cupool_stream_release(s)); /* the parent is unaffected */
}
END_TEST

/* ---- simulated driver only: faults, teardown, driver-call accounting ---- */

START_TEST(fault_in_create_leaves_pool_working)
{
    ck_assert_msg(tu_fake.present, "simulated driver expected");
    CUstream s = NULL;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_stream_release(s));
    CUstream held = s;
    TU_OK(cupool_stream_acquire(&held, 0, 0)); /* takes the idle one: the next must create */
    tu_fake.fault("cuStreamCreateWithPriority", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
    CUstream t = NULL;
    TU_EQ(cupool_stream_acquire(&t, 0, 0), CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_ptr_null(t);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_uint_eq(st.in_use, 1);
    ck_assert_uint_eq(st.creates, 1);
    TU_OK(cupool_stream_acquire(&t, 0, 0)); /* fault cleared itself after one call */
    ck_assert_int_eq(tu_fake.live_streams(), 2);
    TU_OK(cupool_stream_release(t));
    TU_OK(cupool_stream_release(held));
    tu_fake.fault("cuEventCreate", 0, -1, CUDA_ERROR_INVALID_CONTEXT);
    CUevent e;
    TU_EQ(cupool_event_acquire(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    tu_fake.fault_clear();
    TU_OK(cupool_event_acquire(&e, 0));
    TU_OK(cupool_event_release(e));
    ck_assert_int_eq(tu_fake.live_events(), 1);
}
END_TEST

START_TEST(release_makes_no_driver_call)
{
    ck_assert_msg(tu_fake.present, "simulated driver expected");
    CUstream s[40];
    CUevent e[40];
    for (int i = 0; i < 40; i++) {
        TU_OK(cupool_stream_acquire(&s[i], 0, 0));
        TU_OK(cupool_event_acquire(&e[i], 0));
    }
    unsigned long before = tu_fake.calls_total();
    for (int i = 0; i < 40; i++) {
        TU_OK(cupool_stream_release(s[i]));
        TU_OK(cupool_event_release(e[i]));
    }
    ck_assert_uint_eq(tu_fake.calls_total(), before);
}
END_TEST

START_TEST(teardown_stops_driver_calls)
{
    ck_assert_msg(tu_fake.present, "simulated driver expected");
    CUstream s, t;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_stream_acquire(&t, 0, 0));
    TU_OK(cupool_stream_release(t));
    tu_fake.teardown();
    /* The first call that reaches the driver learns it is gone ... */
    TU_EQ(cupool_stream_acquire(&t, 0, 0), CUDA_ERROR_DEINITIALIZED);
    /* ... and from then on cupool never calls it: strict mode aborts on any call. */
    tu_fake.set_strict_teardown(1);
    TU_EQ(cupool_stream_acquire(&t, 0, 0), CUDA_ERROR_DEINITIALIZED);
    TU_EQ(cupool_event_acquire(&(CUevent){0}, 0), CUDA_ERROR_DEINITIALIZED);
    TU_OK(cupool_stream_release(s));
    TU_EQ(cupool_trim(), CUDA_ERROR_DEINITIALIZED);
    TU_OK(cupool_stats_print(stderr));
}
END_TEST

START_TEST(live_handles_match_statistics)
{
    ck_assert_msg(tu_fake.present, "simulated driver expected");
    CUstream s[30];
    CUevent e[30];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 30; i++) {
            TU_OK(cupool_stream_acquire(&s[i], (unsigned int)(i & 1), -(i % 3)));
            TU_OK(cupool_event_acquire(&e[i], (unsigned int)(i & 2)));
        }
        for (int i = 0; i < 30; i += 2) {
            TU_OK(cupool_stream_release(s[i]));
            TU_OK(cupool_event_release(e[i]));
        }
        cupool_class_stats_t st[32] = {CUPOOL_CLASS_STATS_INIT};
        size_t n = 0;
        TU_OK(cupool_stats_get(st, 32, &n));
        uint64_t streams = 0, events = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t live = st[i].idle + st[i].in_use;
            if (st[i].kind == CUPOOL_KIND_STREAM)
                streams += live;
            else
                events += live;
        }
        ck_assert_int_eq(tu_fake.live_streams(), (int)streams);
        ck_assert_int_eq(tu_fake.live_events(), (int)events);
        for (int i = 1; i < 30; i += 2) {
            TU_OK(cupool_stream_release(s[i]));
            TU_OK(cupool_event_release(e[i]));
        }
    }
}
END_TEST

/* Leaves n idle streams (flags 0) in the pool: n acquired at once, then all released. */
static void make_idle_streams(int n)
{
    CUstream s[64];
    ck_assert_int_le(n, 64);
    for (int i = 0; i < n; i++)
        TU_OK(cupool_stream_acquire(&s[i], 0, 0));
    for (int i = 0; i < n; i++)
        TU_OK(cupool_stream_release(s[i]));
}

START_TEST(transient_context_check_error_keeps_pool)
{
    CUstream s[1];
    make_idle_streams(40);
    /* both of trim's context checks fail: its pass over every class, then the check before
     * destroying */
    tu_fake.fault("cuCtxGetId", 0, 2, CUDA_ERROR_UNKNOWN);
    TU_EQ(cupool_trim(), CUDA_ERROR_UNKNOWN); /* its context check failed: nothing destroyed */
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_int_eq(st.context_alive, 1);
    ck_assert_uint_eq(st.idle, 40);
    ck_assert_int_eq(tu_fake.live_streams(), 40);
    TU_OK(cupool_stream_acquire(&s[0], 0, 0)); /* the pool still works */
    TU_OK(cupool_stream_release(s[0]));
    TU_OK(cupool_trim());
    ck_assert_int_eq(tu_fake.live_streams(), 0);
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_STREAM, 0).idle, 0);
}
END_TEST

/* A context check answered once with a verdict that the context is gone (a passing one,
 * injected) retires nothing: the driver repeats a true verdict when asked again, and this
 * one it does not. The class and its idle streams stay, and trim destroys them normally. */
START_TEST(passing_context_verdict_keeps_class)
{
    CUstream s;
    make_idle_streams(4);
    tu_fake.fault("cuCtxGetId", 0, 1, CUDA_ERROR_INVALID_CONTEXT);
    TU_OK(cupool_trim());
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_int_eq(st.context_alive, 1);
    ck_assert_uint_eq(st.destroys, 4);
    ck_assert_uint_eq(st.dropped, 0);
    ck_assert_int_eq(tu_fake.live_streams(), 0);
    for (int i = 0; i < 3; i++) {
        TU_OK(cupool_stream_acquire(&s, 0, 0));
        TU_OK(cupool_stream_release(s));
    }
    cupool_stream_pool_t pool;
    TU_OK(cupool_stream_pool_get(&pool, NULL, 0, 0)); /* the same class */
    TU_OK(cupool_stream_pool_acquire(pool, &s));
    TU_OK(cupool_stream_pool_release(pool, s, 0));
    ck_assert_uint_eq(tu_class_count(), 1);
}
END_TEST

/* cupool's own bookkeeping keeps a broken context's trouble to itself: with only one context
 * broken (the simulation can do that; a real driver breaks the whole process), the other
 * context's pools keep working and stay alive, and the broken one's stream is never reused. */
START_TEST(sticky_error_spares_other_contexts_pools)
{
    CUcontext other;
    CUstream s, t;
    TU_OK(cupool_stream_acquire(&s, 0, 0)); /* primary context */
    TU_OK(cupool_stream_release(s));
    TU_OK(tu.cuCtxCreate(&other, 0, tu_dev)); /* now current */
    TU_OK(cupool_stream_acquire(&t, 0, 0));
    TU_OK(cupool_stream_release(t));
    CUcontext popped;
    TU_OK(tu.cuCtxPopCurrent(&popped));
    tu_fake.poison_context(tu_ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    ck_assert_int_ne(cupool_stream_acquire(&s, 0, 0), CUDA_SUCCESS);
    TU_OK(cupool_trim()); /* the broken context's stream is forgotten, the other's destroyed */
    TU_OK(tu.cuCtxPushCurrent(other));
    for (int i = 0; i < 3; i++) {
        TU_OK(cupool_stream_acquire(&t, 0, 0));
        TU_OK(tu.cuStreamSynchronize(t));
        TU_OK(cupool_stream_release(t));
    }
    cupool_class_stats_t st[4] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 4, &n));
    ck_assert_uint_eq(n, 2);
    unsigned long long other_id;
    TU_OK(tu.cuCtxGetId(other, &other_id));
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(st[i].context_alive, st[i].context_id == other_id);
}
END_TEST

START_TEST(failed_destroy_keeps_handle)
{
    make_idle_streams(20);
    tu_fake.fault("cuStreamDestroy", 0, 1, CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_trim(), CUDA_ERROR_INVALID_VALUE);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    ck_assert_int_eq(tu_fake.live_streams(), (int)(st.idle + st.in_use));
    TU_OK(cupool_trim());
    ck_assert_int_eq(tu_fake.live_streams(), 0);
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_STREAM, 0).idle, 0);
}
END_TEST

START_TEST(transient_capture_check_error_keeps_stream)
{
    CUstream s, t;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_stream_release(s));
    tu_fake.fault("cuStreamIsCapturing", 0, 2, CUDA_ERROR_NOT_READY);
    TU_EQ(cupool_stream_acquire(&t, 0, 0), CUDA_ERROR_NOT_READY);
    TU_OK(cupool_stream_acquire(&t, 0, 0));
    ck_assert_ptr_eq(t, s); /* kept, and handed out once the driver answers */
    TU_OK(cupool_stream_release(t));
    ck_assert_int_eq(tu_fake.live_streams(), 1);
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_STREAM, 0).idle, 1);
}
END_TEST

/* A second context of tu_dev, made with cuCtxCreate: pushed over the one current before. */
static CUcontext ctx_create_pushed(void)
{
    CUresult (*ctx_create)(CUcontext *, void *, unsigned int, CUdevice);
    TU_OK(cupool_driver_get_proc("cuCtxCreate", 12050, (void **)&ctx_create));
    CUcontext c;
    TU_OK(ctx_create(&c, NULL, 0, tu_dev));
    return c;
}

/* The caller's context stack is `top` over tu_ctx, one level deep: a pop finds `top`, then
 * tu_ctx is current (not `top` a second time). */
static void ck_stack_is_over_tu_ctx(CUcontext top)
{
    CUcontext cur = NULL, popped = NULL;
    TU_OK(tu.cuCtxGetCurrent(&cur));
    ck_assert_ptr_eq(cur, top);
    TU_OK(tu.cuCtxPopCurrent(&popped));
    ck_assert_ptr_eq(popped, top);
    TU_OK(tu.cuCtxGetCurrent(&cur));
    ck_assert_ptr_eq(cur, tu_ctx);
}

START_TEST(failed_pop_restores_callers_context)
{
    CUcontext other = ctx_create_pushed(); /* current now */
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    cupool_stream_pool_t p;
    TU_OK(cupool_stream_pool_get(&p, other, 0, 0));
    tu_fake.fault("cuCtxPopCurrent", 0, 1, CUDA_ERROR_UNKNOWN);
    CUstream s;
    TU_OK(cupool_stream_pool_acquire(p, &s)); /* a miss: created in `other`, pushed and popped */
    CUcontext cur = NULL;
    TU_OK(tu.cuCtxGetCurrent(&cur));
    ck_assert_ptr_eq(cur, tu_ctx);
    TU_OK(cupool_stream_pool_release(p, s, 0));
}
END_TEST

/* A pop that fails after a miss's push leaves the caller's context stack as it was: one
 * level deep, the caller's context on top and the one it pushed over below (a pop of its own
 * then finds the context under it). */
START_TEST(failed_pop_keeps_callers_context_stack)
{
    CUcontext other = ctx_create_pushed(); /* over tu_ctx */
    cupool_stream_pool_t p;
    TU_OK(cupool_stream_pool_get(&p, tu_ctx, 0, 0));
    tu_fake.fault("cuCtxPopCurrent", 0, 1, CUDA_ERROR_UNKNOWN);
    CUstream s;
    TU_OK(cupool_stream_pool_acquire(p, &s)); /* a miss: created in tu_ctx, pushed and popped */
    tu_fake.fault_clear();
    ck_stack_is_over_tu_ctx(other);
    TU_OK(cupool_stream_pool_release(p, s, 0));
}
END_TEST

/* The same for the probe that confirms a sticky error (class_ctx_broken): a stream of a
 * broken context met on an acquire with another context pushed over it, the probe's pop
 * failing once. */
START_TEST(failed_pop_after_a_sticky_probe_keeps_callers_context_stack)
{
    cupool_stream_pool_t p;
    TU_OK(cupool_stream_pool_get(&p, tu_ctx, 0, 0));
    CUstream s;
    TU_OK(cupool_stream_pool_acquire(p, &s));
    TU_OK(cupool_stream_pool_release(p, s, 0)); /* idle in tu_ctx's class */
    CUcontext other = ctx_create_pushed(); /* over tu_ctx */
    tu_fake.poison_context(tu_ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    tu_fake.fault("cuCtxPopCurrent", 0, 1, CUDA_ERROR_UNKNOWN);
    ck_assert_int_ne(cupool_stream_pool_acquire(p, &s), CUDA_SUCCESS);
    tu_fake.fault_clear();
    ck_stack_is_over_tu_ctx(other);
}
END_TEST

/* cupool_context_release(ctx) forgets what other threads cache of ctx: a thread whose
 * current context is still ctx (it answers with the same id until it is reset) gets a
 * handle of a new class from its next current-context acquire, never one of the retired
 * class's, and cupool makes no driver call with the old handle. */
struct cr_worker {
    pthread_barrier_t *step;
    CUstream first, second;
    CUresult r1, r2;
};

static void *cr_worker_main(void *arg)
{
    struct cr_worker *w = arg;
    tu.cuCtxSetCurrent(tu_ctx);
    w->r1 = cupool_stream_acquire(&w->first, 0, 0);
    if (w->r1 == CUDA_SUCCESS)
        w->r1 = cupool_stream_release(w->first); /* now in this thread's magazine */
    pthread_barrier_wait(w->step);               /* main: cupool_context_release */
    pthread_barrier_wait(w->step);
    w->r2 = cupool_stream_acquire(&w->second, 0, 0);
    if (w->r2 == CUDA_SUCCESS)
        w->r2 = cupool_stream_release(w->second);
    return NULL;
}

START_TEST(context_release_forgets_other_threads_caches)
{
    pthread_barrier_t step;
    pthread_barrier_init(&step, NULL, 2);
    struct cr_worker w = {.step = &step};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, cr_worker_main, &w), 0);
    pthread_barrier_wait(&step);
    TU_OK(cupool_context_release(tu_ctx));
    unsigned long vets = tu_fake.present ? tu_fake.calls("cuStreamIsCapturing") : 0;
    pthread_barrier_wait(&step);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&step);
    TU_OK(w.r1);
    TU_OK(w.r2);
    ck_assert_ptr_ne(w.second, w.first); /* the old stream is forgotten, not handed out */
    if (tu_fake.present) /* the new stream was made just now: nothing to vet */
        ck_assert_uint_eq(tu_fake.calls("cuStreamIsCapturing"), vets);
}
END_TEST

/* The same for the explicit pools, whose hits skip the class cache: after
 * cupool_context_release(ctx), a thread whose magazines still hold a stream and an event of
 * ctx's classes (the context answers with the same id: the checked pool's context check
 * passes) gets none of them from the pools' acquires, checked or promised. */
struct crp_worker {
    pthread_barrier_t *step;
    cupool_stream_pool_t sp, psp;
    cupool_event_pool_t ep;
    CUstream s1, s2, p1, p2;
    CUevent e1, e2;
    CUresult r[6];
};

static void *crp_worker_main(void *arg)
{
    struct crp_worker *w = arg;
    tu.cuCtxSetCurrent(tu_ctx);
    w->r[0] = cupool_stream_pool_acquire(w->sp, &w->s1);
    w->r[1] = cupool_stream_pool_acquire(w->psp, &w->p1);
    w->r[2] = cupool_event_pool_acquire(w->ep, &w->e1);
    if (w->r[0] == CUDA_SUCCESS) /* all three now in this thread's magazines */
        w->r[0] = cupool_stream_pool_release(w->sp, w->s1, 0);
    if (w->r[1] == CUDA_SUCCESS)
        w->r[1] = cupool_stream_pool_release(w->psp, w->p1, CUPOOL_RELEASE_NOT_CAPTURING);
    if (w->r[2] == CUDA_SUCCESS)
        w->r[2] = cupool_event_pool_release(w->ep, w->e1);
    pthread_barrier_wait(w->step); /* main: cupool_context_release */
    pthread_barrier_wait(w->step);
    w->r[3] = cupool_stream_pool_acquire(w->sp, &w->s2);
    w->r[4] = cupool_stream_pool_acquire(w->psp, &w->p2);
    w->r[5] = cupool_event_pool_acquire(w->ep, &w->e2);
    return NULL;
}

START_TEST(context_release_retires_explicit_pools_in_other_threads)
{
    pthread_barrier_t step;
    pthread_barrier_init(&step, NULL, 2);
    struct crp_worker w = {.step = &step};
    TU_OK(cupool_stream_pool_get(&w.sp, tu_ctx, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_stream_pool_get(&w.psp, tu_ctx,
                                 CU_STREAM_NON_BLOCKING | CUPOOL_POOL_CONTEXT_OUTLIVES, 0));
    TU_OK(cupool_event_pool_get(&w.ep, tu_ctx, CU_EVENT_DISABLE_TIMING));
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, crp_worker_main, &w), 0);
    pthread_barrier_wait(&step);
    TU_OK(cupool_context_release(tu_ctx));
    pthread_barrier_wait(&step);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&step);
    for (int i = 0; i < 3; i++)
        TU_OK(w.r[i]);
    /* whatever the pools answer now, none hands out what the retired classes held */
    if (w.r[3] == CUDA_SUCCESS)
        ck_assert_ptr_ne(w.s2, w.s1);
    if (w.r[4] == CUDA_SUCCESS)
        ck_assert_ptr_ne(w.p2, w.p1);
    if (w.r[5] == CUDA_SUCCESS)
        ck_assert_ptr_ne(w.e2, w.e1);
    printf("explicit pools after cupool_context_release: %d %d %d\n", (int)w.r[3], (int)w.r[4],
           (int)w.r[5]);
    if (w.r[3] == CUDA_SUCCESS)
        TU_OK(cupool_stream_release(w.s2));
    if (w.r[4] == CUDA_SUCCESS)
        TU_OK(cupool_stream_release(w.p2));
    if (w.r[5] == CUDA_SUCCESS)
        TU_OK(cupool_event_release(w.e2));
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("streams");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, stream_acquire_release_reuses);
    tcase_add_test(tc, stream_ownership_exclusive);
    tcase_add_test(tc, stream_bad_arguments);
    tcase_add_test(tc, stream_double_release_rejected);
    tcase_add_test(tc, release_checks_and_their_limits);
    tcase_add_test(tc, stream_foreign_release_rejected);
    tcase_add_test(tc, stream_priority_clamped_into_one_class);
    tcase_add_test(tc, stream_flags_are_separate_classes);
    tcase_add_test(tc, no_current_context);
    tcase_add_test(tc, reused_stream_runs_after_previous_owners_work);
    tcase_add_test(tc, stream_released_in_capture_is_never_reused);
    tcase_add_test(tc, stream_vouched_release_skips_check);
    tcase_add_test(tc, explicit_pools);
    tcase_add_test(tc, explicit_pool_release_of_a_handle_not_the_last);
    tcase_add_test(tc, event_acquire_record_release);
    tcase_add_test(tc, event_bad_flags);
    tcase_add_test(tc, cross_thread_release);
    tcase_add_test(tc, context_release_forgets_other_threads_caches);
    tcase_add_test(tc, context_release_retires_explicit_pools_in_other_threads);
    tcase_add_test(tc, thread_exit_returns_magazines);
    tcase_add_test(tc, stats_get_and_print);
    tcase_add_test(tc, context_reset_old_handles_harmless);
    tcase_add_test(tc, explicit_pool_of_reset_context_refuses);
    tcase_add_test(tc, forked_child_refuses);
    suite_add_tcase(s, tc);
    /* Fault injection, teardown and live-handle counts need the simulated driver. */
    if (!tu_real()) {
        TCase *sim = tcase_create("simulated");
        tcase_add_checked_fixture(sim, setup_inline, NULL);
        tcase_add_test(sim, fault_in_create_leaves_pool_working);
        tcase_add_test(sim, release_makes_no_driver_call);
        tcase_add_test(sim, teardown_stops_driver_calls);
        tcase_add_test(sim, live_handles_match_statistics);
        tcase_add_test(sim, transient_context_check_error_keeps_pool);
        tcase_add_test(sim, passing_context_verdict_keeps_class);
        tcase_add_test(sim, sticky_error_spares_other_contexts_pools);
        tcase_add_test(sim, failed_destroy_keeps_handle);
        tcase_add_test(sim, transient_capture_check_error_keeps_stream);
        tcase_add_test(sim, failed_pop_restores_callers_context);
        tcase_add_test(sim, failed_pop_keeps_callers_context_stack);
        tcase_add_test(sim, failed_pop_after_a_sticky_probe_keeps_callers_context_stack);
        suite_add_tcase(s, sim);
    }
    /* These set CUPOOL_* before the first cupool call, so they run their own setup. */
    TCase *env = tcase_create("environment");
    tcase_add_test(env, idle_cap_destroys_lazily);
    tcase_add_test(env, prewarm_and_trim_low_water);
    tcase_add_test(env, release_drains_backlog_in_bounded_steps);
    tcase_add_test(env, disabled_is_pass_through);
    suite_add_tcase(s, env);
    return s;
}

int main(void)
{
    return tu_run(api_suite());
}
