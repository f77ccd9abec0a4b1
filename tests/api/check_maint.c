/* SPDX-License-Identifier: MIT */
/*
 * Idle capacity that follows demand, and the maintenance thread that does the pools' driver
 * work: decay (on a clock the test moves), the hard caps drained off the releasing thread,
 * refills ahead of demand after warm-up, steady states with no create or destroy (hand-off
 * between threads, repeated bursts, the drop-in batch pattern), fork, the inline fallback,
 * driver faults on the maintenance thread, and two devices' classes served by the one thread. Runs on the simulated driver and on the real one;
 * driver calls per thread are counted where the simulation can count them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/testutil.h"
#include "common/maint_threads.h"
#include "pool/maint.h" /* cupool__decay_clock, cupool__maint_flush: the test drives the clock */
#include "pool/pool.h"

#define FLUSH_NS (10ull * 1000000000ull)

static _Atomic uint64_t fake_now = 1000000000ull;
static uint64_t fake_clock(void)
{
    return atomic_load(&fake_now);
}

/* CUPOOL_DECAY_MS=1000 (a tick each 250 ms of the test's clock), the test's clock, setup. */
static uint64_t period;
static void setup_decay(const char *decay_ms)
{
    setenv("CUPOOL_DECAY_MS", decay_ms, 1);
    cupool__decay_clock = fake_clock;
    tu_setup();
    period = cupool__decay_period_ns();
}

/* One decay tick: the clock moves a period on, the maintenance thread runs a whole round. */
static void tick(void)
{
    atomic_fetch_add(&fake_now, period);
    ck_assert_msg(cupool__maint_flush(FLUSH_NS), "the maintenance thread did not run a round");
}

static cupool_maintenance_stats_t mstats(void)
{
    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    TU_OK(cupool_maintenance_stats_get(&m));
    return m;
}

/* Creates and destroys made by the calling thread (simulation only; 0 on the real driver). */
static unsigned long here_calls(void)
{
    if (!tu_fake.present)
        return 0;
    return tu_fake.calls_here("cuStreamCreate") + tu_fake.calls_here("cuStreamCreateWithPriority") +
           tu_fake.calls_here("cuStreamDestroy") + tu_fake.calls_here("cuStreamDestroy_v2") +
           tu_fake.calls_here("cuEventCreate") + tu_fake.calls_here("cuEventDestroy") +
           tu_fake.calls_here("cuEventDestroy_v2");
}

static void churn(int n)
{
    CUstream s[1024];
    ck_assert_int_le(n, 1024);
    for (int i = 0; i < n; i++)
        TU_OK(cupool_stream_acquire(&s[i], CU_STREAM_NON_BLOCKING, 0));
    for (int i = 0; i < n; i++)
        TU_OK(cupool_stream_release(s[i]));
}

START_TEST(decay_destroys_unused_idle_handles_off_request_threads)
{
    setenv("CUPOOL_HEADROOM_PERCENT", "0", 1); /* the decay's own arithmetic */
    setup_decay("1000");
    churn(96); /* 32 stay in this thread's magazines, 64 go to the depot */
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.idle, 96);
    ck_assert_uint_eq(st.destroys, 0);
    ck_assert(cupool__maint_flush(FLUSH_NS));
    /* four ticks: the first interval began with the depot empty, so nothing has been idle
     * for four whole intervals (one decay time) yet */
    for (int i = 0; i < 4; i++)
        tick();
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING).destroys, 0);
    unsigned long mine = here_calls();
    tick(); /* the depot held 64 through four whole intervals */
    st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.destroys, 64);
    ck_assert_uint_eq(st.idle, 32);
    cupool_maintenance_stats_t m = mstats();
    ck_assert_uint_eq(m.request_destroys, 0);
    ck_assert_uint_ge(m.background_destroys, 64);
    ck_assert_uint_eq(here_calls(), mine);
    if (tu_fake.present)
        ck_assert_int_eq(tu_fake.live_streams(), 32);
}
END_TEST

START_TEST(demand_keeps_its_handles)
{
    setenv("CUPOOL_HEADROOM_PERCENT", "0", 1); /* the decay's own arithmetic */
    setup_decay("1000");
    /* 256 in use at once every interval: the depot is drawn down to nothing each time, so
     * nothing decays however many ticks pass */
    for (int i = 0; i < 12; i++) {
        churn(256);
        tick();
    }
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.creates, 256);
    ck_assert_uint_eq(st.destroys, 0);
    /* demand stops: the excess goes after one decay time */
    for (int i = 0; i < 5; i++)
        tick();
    st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.destroys, 256 - 32);
    ck_assert_uint_eq(mstats().request_destroys, 0);
}
END_TEST

START_TEST(repeated_bursts_reach_a_steady_state)
{
    setup_decay("1000"); /* the test's clock: no decay tick during the test */
    churn(1024); /* warm-up: the burst's handles are created once */
    cupool_class_stats_t st0 = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    printf("warm-up: creates %llu misses-or-prewarm, dropped %llu, destroys %llu\n",
           (unsigned long long)st0.creates, (unsigned long long)st0.dropped,
           (unsigned long long)st0.destroys);
    unsigned long mine = here_calls();
    for (int i = 0; i < 20; i++) {
        churn(1024);
        cupool_class_stats_t s1 = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
        cupool_maintenance_stats_t m = mstats();
        if (s1.creates != st0.creates || i == 0)
            printf("burst %d: creates %llu destroys %llu dropped %llu idle %llu in use %llu; "
                   "background %llu/%llu, request %llu/%llu\n",
                   i, (unsigned long long)s1.creates, (unsigned long long)s1.destroys,
                   (unsigned long long)s1.dropped, (unsigned long long)s1.idle,
                   (unsigned long long)s1.in_use, (unsigned long long)m.background_creates,
                   (unsigned long long)m.background_destroys,
                   (unsigned long long)m.request_creates, (unsigned long long)m.request_destroys);
    }
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.creates, st0.creates);
    ck_assert_uint_eq(st.destroys, st0.destroys);
    ck_assert_uint_eq(here_calls(), mine);
}
END_TEST

/* ---- hand-off: acquired on one thread, released on another ---- */

#define RING 1024
static struct {
    CUstream slot[RING];
    _Atomic unsigned long head, tail; /* written by the producer / the consumer */
    long total;
    unsigned long consumer_calls;
    CUresult err;
} ring;

/* The releasing thread; arg: a context to make current first (NULL: none). */
static void *consumer(void *arg)
{
    if (arg && tu.cuCtxSetCurrent((CUcontext)arg) != CUDA_SUCCESS)
        ring.err = CUDA_ERROR_INVALID_CONTEXT;
    for (long n = 0; n < ring.total; n++) {
        unsigned long t = atomic_load_explicit(&ring.tail, memory_order_relaxed);
        while (atomic_load_explicit(&ring.head, memory_order_acquire) == t)
            sched_yield();
        CUresult r = cupool_stream_release(ring.slot[t % RING]);
        if (r != CUDA_SUCCESS)
            ring.err = r;
        atomic_store_explicit(&ring.tail, t + 1, memory_order_release);
    }
    ring.consumer_calls = here_calls();
    return NULL;
}

/* `total` hand-offs through the ring. With ctx (two devices' contexts), this thread acquires
 * on each device in turn, 64 in a row with that device current, and checks each stream's
 * context; the consumer releases everything with ctx[1] current. */
static void handoff_on(long total, const CUcontext *ctx)
{
    ring.total = total;
    atomic_store(&ring.head, 0);
    atomic_store(&ring.tail, 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, consumer, ctx ? (void *)ctx[1] : NULL), 0);
    for (long n = 0; n < total; n++) {
        unsigned long h = atomic_load_explicit(&ring.head, memory_order_relaxed);
        while (h - atomic_load_explicit(&ring.tail, memory_order_acquire) >= RING)
            sched_yield();
        int d = (int)(n / 64 % 2);
        if (ctx && n % 64 == 0)
            TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        CUstream s;
        TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
        if (ctx) {
            CUcontext owner = NULL;
            TU_OK(tu.cuStreamGetCtx(s, &owner));
            ck_assert_msg(owner == ctx[d], "hand-off %ld: device %d got a stream of %p", n, d,
                          (void *)owner);
        }
        ring.slot[h % RING] = s;
        atomic_store_explicit(&ring.head, h + 1, memory_order_release);
    }
    pthread_join(t, NULL);
    TU_OK(ring.err);
}

static void handoff(long total)
{
    handoff_on(total, NULL);
}

START_TEST(handoff_reaches_a_steady_state)
{
    setup_decay("1000"); /* the test's clock: no decay tick during the test */
    /* The acquiring thread misses only when every stream is in flight (at most RING) or in
     * the releasing thread's two magazines (at most 2 x 16): so the class never holds more
     * than RING + 32 + 1 streams, however long the hand-off runs, and nothing is destroyed. */
    const uint64_t bound = RING + 2 * 16 + 1;
    handoff(8 * RING);
    cupool_class_stats_t st0 = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_le(st0.creates, bound);
    handoff(64 * RING);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_le(st.creates, bound);
    ck_assert_uint_eq(st.destroys, 0);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(ring.consumer_calls, 0); /* the releasing thread never calls the driver */
    printf("hand-off: %llu streams serve %d in flight over %ld hand-offs (bound %llu)\n",
           (unsigned long long)st.creates, RING, 72L * RING, (unsigned long long)bound);
}
END_TEST

START_TEST(dropin_batches_reach_a_steady_state)
{
    setup_decay("1000"); /* the test's clock: no decay tick during the test */
    enum { N = 1000 };
    static CUstream s[N];
    uint64_t creates0 = 0;
    for (int round = 0; round < 12; round++) {
        if (round == 2)
            creates0 = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_DEFAULT).creates;
        for (int i = 0; i < N; i++)
            TU_OK(cupool_cuStreamCreate(&s[i], CU_STREAM_DEFAULT));
        for (int i = 0; i < N; i++)
            TU_OK(cupool_cuStreamDestroy(s[i]));
    }
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_DEFAULT);
    ck_assert_uint_eq(st.creates, creates0); /* rounds 2..11: 10,000 creates, no driver's */
    ck_assert_uint_le(st.creates, N);
}
END_TEST

START_TEST(over_cap_backlog_is_destroyed_by_the_maintenance_thread)
{
    setenv("CUPOOL_STREAM_IDLE_MAX", "64", 1);
    tu_setup();
    unsigned long mine = here_calls();
    churn(512);
    unsigned long created = here_calls() - mine; /* the 512 creates */
    ck_assert_uint_eq(mstats().request_destroys, 0); /* the releases destroyed nothing */
    ck_assert(cupool__maint_flush(FLUSH_NS));
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    /* the depot's cap, plus this thread's two magazines; the rest went */
    ck_assert_uint_le(st.idle, 64 + 32);
    ck_assert_uint_eq(st.destroys, 512 - st.idle);
    cupool_maintenance_stats_t m = mstats();
    ck_assert_uint_eq(m.request_destroys, 0);
    ck_assert_uint_ge(m.background_destroys, st.destroys);
    ck_assert_uint_eq(here_calls() - mine, created);
}
END_TEST

START_TEST(growth_after_warm_up_is_created_ahead)
{
    setup_decay("1000");
    churn(16);
    tick(); /* the class is past its warm-up: its working set is 16 */
    CUstream held[64];
    for (int i = 0; i < 17; i++) /* the 17th misses: demand grows */
        TU_OK(cupool_stream_acquire(&held[i], CU_STREAM_NON_BLOCKING, 0));
    ck_assert(cupool__maint_flush(FLUSH_NS)); /* the maintenance thread fills a reserve */
    cupool_maintenance_stats_t m = mstats();
    ck_assert_uint_ge(m.background_creates, 32);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.creates, m.background_creates + m.request_creates);
    /* more growth is served from it: no create on this thread */
    unsigned long mine = here_calls();
    for (int i = 17; i < 17 + 32; i++)
        TU_OK(cupool_stream_acquire(&held[i], CU_STREAM_NON_BLOCKING, 0));
    ck_assert_uint_eq(mstats().request_creates, m.request_creates);
    ck_assert_uint_eq(here_calls(), mine);
    for (int i = 0; i < 17 + 32; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

/* Steady demand of 256 in use at once, every decay interval, for six ticks; then `excess` more
 * than that. Returns the creates the fluctuation made on request threads. */
static uint64_t fluctuation_request_creates(int excess)
{
    setup_decay("1000");
    /* the maintenance thread is kept out of the class (its unit lock) while demand runs, and
     * each tick's work is let finish (a round does at most a few magazines), so that what
     * the depot holds when the fluctuation comes is the policy's alone, not a race's */
    for (int i = 0; i < 6; i++) {
        pthread_mutex_lock(&cupool__maint_unit);
        churn(256);
        pthread_mutex_unlock(&cupool__maint_unit);
        tick();
        for (uint64_t was = UINT64_MAX, now;
             (now = mstats().background_creates + mstats().background_destroys) != was;
             was = now)
            ck_assert(cupool__maint_flush(FLUSH_NS));
    }
    uint64_t before = mstats().request_creates;
    unsigned long mine = here_calls();
    pthread_mutex_lock(&cupool__maint_unit);
    churn(256 + excess);
    pthread_mutex_unlock(&cupool__maint_unit);
    uint64_t made = mstats().request_creates - before;
    if (tu_fake.present)
        ck_assert_uint_eq(here_calls() - mine, made);
    return made;
}

START_TEST(headroom_absorbs_a_fluctuation_off_request_threads)
{
    /* the default headroom, the demand's whole swing (0 to 256 in use each interval), was
     * created ahead by the maintenance thread: a burst 32 above the steady peak creates
     * nothing on the request thread */
    ck_assert_uint_eq(fluctuation_request_creates(32), 0);
    ck_assert_uint_eq(mstats().request_destroys, 0);
    cupool_class_stats_t st;
    /* demand stops: within two decay times the swing, and the headroom with it, falls to
     * nothing, and all but what this thread still caches (32) decays */
    for (int i = 0; i < 8; i++) {
        tick();
        st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
        fprintf(stderr, "after demand stopped, tick %d: alive %llu, destroys %llu\n", i + 1,
               (unsigned long long)(st.idle + st.in_use), (unsigned long long)st.destroys);
    }
    ck_assert_uint_le(st.idle + st.in_use, 32);
    ck_assert_uint_eq(mstats().request_destroys, 0);
}
END_TEST

/* A class that holds many handles steadily (no swing) keeps no headroom: nothing is created
 * ahead of it, and the maintenance thread does not keep polling for a headroom it will never
 * be asked to fill (it polled every millisecond, forever, when the headroom followed the level
 * of demand). */
START_TEST(steady_holders_keep_no_headroom_and_leave_the_thread_asleep)
{
    setup_decay("1000");
    CUstream held[1000];
    for (int i = 0; i < 1000; i++)
        TU_OK(cupool_stream_acquire(&held[i], CU_STREAM_NON_BLOCKING, 0));
    churn(8); /* a little steady use on top: created once, then this thread's magazines */
    uint64_t made = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING).creates;
    for (int round = 0; round < 8; round++) {
        churn(8);
        tick();
    }
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.creates, made);
    ck_assert_uint_eq(mstats().background_creates, 0);
    ck_assert(!cupool__maint_polling());
    for (int i = 0; i < 1000; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

START_TEST(without_headroom_a_fluctuation_creates_on_the_request_thread)
{
    /* the control: with no headroom, the class keeps exactly its recent demand and the
     * fluctuation's first handles are created by the thread that asked */
    setenv("CUPOOL_HEADROOM_PERCENT", "0", 1);
    ck_assert_uint_gt(fluctuation_request_creates(32), 0);
}
END_TEST

/* A request that waits longer than any before it (a completion thread off its CPU for longer
 * than the warm-up ever saw) lifts the demand above its recent peak by a good part of its
 * swing: the default headroom, the whole swing, absorbs three quarters of it off the request
 * threads. Half the swing (the earlier default) did not: 192 above a peak that swung by 256
 * created 80 on the thread that asked. */
START_TEST(default_headroom_absorbs_three_quarters_of_the_swing)
{
    ck_assert_uint_eq(fluctuation_request_creates(192), 0);
}
END_TEST

START_TEST(half_the_swing_does_not_absorb_three_quarters_of_it)
{
    setenv("CUPOOL_HEADROOM_PERCENT", "50", 1);
    ck_assert_uint_gt(fluctuation_request_creates(192), 0);
}
END_TEST

/* A process that has made no class yet (pipelines only, say) and whose maintenance thread
 * was started sleeps until it is asked for something. With no class, the wait until the next
 * class's decay tick wrapped around the clock: the thread went round without pause, at full
 * CPU, and a flush never found it idle. */
START_TEST(with_no_class_the_thread_sleeps)
{
    tu_setup();
    size_t n = 1;
    TU_OK(cupool_stats_get(NULL, 0, &n));
    ck_assert_uint_eq(n, 0);
    ck_assert(cupool__maint_flush(FLUSH_NS)); /* starts it; a round, then idle */
    uint64_t w0 = mstats().wakeups;
    ck_assert(cupool__maint_flush(FLUSH_NS));
    /* the flush's own round, and at most one begun before it */
    ck_assert_uint_le(mstats().wakeups - w0, 2);
    ck_assert(!cupool__maint_polling());
}
END_TEST

START_TEST(no_thread_without_background)
{
    setenv("CUPOOL_BACKGROUND", "0", 1);
    setenv("CUPOOL_STREAM_IDLE_MAX", "16", 1);
    tu_setup();
    churn(256);
    cupool_maintenance_stats_t m = mstats();
    ck_assert_int_eq(m.running, 0);
    ck_assert_uint_eq(m.background_destroys, 0);
    ck_assert_uint_gt(m.request_destroys, 0); /* the inline fallback */
    ck_assert(!cupool__maint_flush(FLUSH_NS));
    int found = maint_threads();
    ck_assert_int_eq(found, 0);
}
END_TEST

START_TEST(forked_child_has_no_maintenance_thread)
{
    setup_decay("1000");
    churn(64);
    ck_assert(mstats().running);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
        int bad = cupool_maintenance_stats_get(&m) != CUDA_SUCCESS || m.running;
        CUstream s;
        bad |= cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0) != CUDA_ERROR_NOT_PERMITTED;
        bad |= cupool__maint_flush(FLUSH_NS); /* nothing to kick */
        _exit(bad);
    }
    int st = 0;
    ck_assert(waitpid(pid, &st, 0) == pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    /* the parent's thread carries on */
    tick();
    ck_assert(mstats().running);
}
END_TEST

START_TEST(failed_destroys_on_the_maintenance_thread_are_retried)
{
    setup_decay("1000"); /* resolves tu_fake: before it, present is 0 on any driver */
    if (!tu_fake.present)
        return;
    churn(96);
    for (int i = 0; i < 4; i++)
        tick();
    /* the decay's destroys fail once each, for a while: the handles stay pooled */
    tu_fake.fault("cuStreamDestroy_v2", 0, 8, CUDA_ERROR_UNKNOWN);
    tu_fake.fault("cuStreamDestroy", 0, 8, CUDA_ERROR_UNKNOWN);
    tick();
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_int_eq(tu_fake.live_streams(), (int)(st.idle + st.in_use));
    tu_fake.fault_clear();
    for (int i = 0; i < 6; i++)
        tick();
    st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.idle, 32);
    ck_assert_int_eq(tu_fake.live_streams(), 32);
    ck_assert_uint_eq(mstats().request_destroys, 0);
}
END_TEST

/* The over-cap backlog's destroys fail for a while on the maintenance thread: every handle
 * stays pooled (the driver's count is cupool's idle and in use), none is destroyed on the
 * releasing thread, and once the error passes the thread's next round drains the backlog. */
START_TEST(failed_drains_of_the_over_cap_backlog_are_retried)
{
    setenv("CUPOOL_STREAM_IDLE_MAX", "64", 1);
    tu_setup();
    if (!tu_fake.present)
        return;
    tu_fake.fault("cuStreamDestroy", 0, -1, CUDA_ERROR_UNKNOWN);
    churn(512); /* ~416 over the depot's cap and this thread's two magazines */
    ck_assert(cupool__maint_flush(FLUSH_NS));
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.destroys, 0);
    ck_assert_uint_eq(st.idle, 512);
    ck_assert_int_eq(tu_fake.live_streams(), 512);
    ck_assert_uint_gt(tu_fake.calls("cuStreamDestroy"), 0); /* the thread did try */
    tu_fake.fault_clear();
    ck_assert(cupool__maint_flush(FLUSH_NS)); /* a kick: no need to wait for the retry */
    ck_assert(cupool__maint_flush(FLUSH_NS));
    st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_le(st.idle, 64 + 32);
    ck_assert_uint_eq(st.destroys, 512 - st.idle);
    ck_assert_int_eq(tu_fake.live_streams(), (int)st.idle);
    ck_assert_uint_eq(mstats().request_destroys, 0);
}
END_TEST

/* Passing create and destroy errors, in bursts of one to five calls every few calls, while
 * four threads acquire and release bursts of up to 400 streams and the maintenance thread
 * grows, refills and decays the class (a decay time of 8 ms): whatever failed where, the
 * class's books match the driver (the streams alive are cupool's idle and in use, and its
 * creates less its destroys and drops), and a trim leaves nothing once the errors pass. */
static _Atomic int storm_over;

static void *fault_storm(void *arg)
{
    (void)arg;
    static const char *const entries[] = {"cuStreamCreateWithPriority", "cuStreamDestroy"};
    static const CUresult errs[] = {CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN,
                                    CUDA_ERROR_INVALID_CONTEXT};
    unsigned seed = 12345;
    while (!atomic_load(&storm_over)) {
        for (int i = 0; i < 2; i++) {
            unsigned r = (unsigned)rand_r(&seed);
            tu_fake.fault(entries[i], r % 7, 1 + (long)(r / 7 % 5), errs[r / 35 % 3]);
        }
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *storm_worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
    CUstream held[400];
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    for (int round = 0; round < 100; round++) {
        int n = 1 + rand_r(&seed) % 400, got = 0;
        for (int i = 0; i < n; i++)
            got += cupool_stream_acquire(&held[got], CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS;
        for (int i = 0; i < got; i++)
            TU_OK(cupool_stream_release(held[i]));
    }
    return NULL;
}

START_TEST(passing_errors_while_the_thread_grows_and_decays_keep_the_books)
{
    setenv("CUPOOL_DECAY_MS", "8", 1);
    tu_setup();
    if (!tu_fake.present)
        return;
    pthread_t f, w[4];
    ck_assert_int_eq(pthread_create(&f, NULL, fault_storm, NULL), 0);
    for (uintptr_t i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&w[i], NULL, storm_worker, (void *)i), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(w[i], NULL);
    atomic_store(&storm_over, 1);
    pthread_join(f, NULL);
    tu_fake.fault_clear();
    /* the thread's driver work is done under its unit lock: both counts of one moment */
    pthread_mutex_lock(&cupool__maint_unit);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    int alive = tu_fake.live_streams();
    pthread_mutex_unlock(&cupool__maint_unit);
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_int_eq(alive, (int)st.idle);
    ck_assert_uint_eq(st.creates - st.destroys - st.dropped, st.idle);
    ck_assert_uint_gt(mstats().background_creates, 0); /* the thread did grow the class */
    tu_trim_leaves_nothing();
}
END_TEST

/* A cached graph of a context that a sticky error broke is let go at a trim: its exec's
 * completion event cannot be destroyed any more (every call on the context fails), and a
 * grave kept for a retry would have the maintenance thread look at the graveyard every
 * millisecond for good. The break is confirmed (cuCtxGetId(NULL) with the context pushed
 * current answers with it), as the pools confirm it before they forget a broken context's
 * handles. Simulation only: the real driver breaks the whole process. */
START_TEST(graves_of_a_broken_context_are_let_go)
{
    setenv("CUPOOL_GRAPH_EXECS_MAX", "1", 1); /* a second stream: launches record completion */
    tu_setup();
    if (!tu_fake.present)
        return;
    CUcontext victim;
    TU_OK(tu.cuCtxCreate(&victim, 0, tu_dev)); /* now current */
    struct tu_kernels kv;
    tu_load_kernels(&kv);
    CUdeviceptr m;
    TU_OK(tu.cuMemAlloc(&m, 4));
    CUstream s[2];
    for (int i = 0; i < 2; i++)
        TU_OK(tu.cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    unsigned v = 1;
    TU_OK(cupool_pipeline_kernel(p, kv.add_u32, 1, 1, 1, 1, 1, 1, 0, (void *[]){&m, &v}, NULL));
    for (int r = 0; r < 6; r++)
        TU_OK(cupool_pipeline_launch(p, s[r % 2]));
    TU_OK(tu.cuCtxSynchronize());
    CUcontext popped;
    TU_OK(tu.cuCtxPopCurrent(&popped)); /* tu_ctx current: the victim is probed pushed */
    tu_fake.poison_context(victim, CUDA_ERROR_ILLEGAL_ADDRESS);
    TU_OK(cupool_trim());
    ck_assert(cupool__maint_flush(FLUSH_NS));
    ck_assert(cupool__maint_flush(FLUSH_NS)); /* a round that began after the trim */
    ck_assert(!cupool__maint_graves_polling());
    CUcontext cur = NULL;
    TU_OK(tu.cuCtxGetCurrent(&cur));
    ck_assert_ptr_eq(cur, tu_ctx);
    TU_OK(cupool_pipeline_destroy(p));
}
END_TEST

/* A program that trims between requests: each trim empties the depot, so the next acquire
 * misses. Trim forgets the class's learned demand (reserve, warm-up), so those misses create
 * only what they need; before, each one doubled the reserve and the maintenance thread filled
 * it, for the next trim to destroy: 400 rounds made 400,000 streams. */
START_TEST(trims_between_requests_create_nothing_ahead)
{
    setup_decay("1000");
    churn(4);
    tick(); /* past the warm-up */
    for (int i = 0; i < 50; i++) {
        churn(4);
        TU_OK(cupool_trim());
        ck_assert(cupool__maint_flush(FLUSH_NS));
    }
    cupool_maintenance_stats_t m = mstats();
    ck_assert_uint_eq(m.background_creates, 0);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_le(st.high_water, 4);
}
END_TEST

/* The application resets the context while the maintenance thread destroys a backlog of its
 * streams. cupool_context_release() first: the thread's unit in progress ends, the context's
 * classes are retired, and none of its handles reaches the driver after the reset (the
 * simulated driver aborts the process on any call with a reset context's stream, as the real
 * one crashes). Without the call the test ran into exactly that, in 8 runs of 10. */
START_TEST(context_release_keeps_the_thread_off_a_reset_context)
{
    setenv("CUPOOL_STREAM_IDLE_MAX", "16", 1);
    setenv("CUPOOL_MAGAZINE_SIZE", "4", 1);
    setenv("CUPOOL_DECAY_MS", "1", 1); /* and decay steps all the time */
    tu_setup();
    int rounds = tu_fake.present ? 200 : 10;
    for (int round = 0; round < rounds; round++) {
        churn(256 + 64 * (round % 4)); /* a backlog of ~250 over the cap, for the thread */
        TU_OK(cupool_context_release(tu_ctx));
        TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
        TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
        TU_OK(tu.cuCtxSetCurrent(tu_ctx));
        TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev)); /* the retain of tu_setup stays */
    }
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0)); /* pools made afresh */
    TU_OK(cupool_stream_release(s));
    TU_EQ(cupool_context_release(NULL), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

/* The class of the calling thread's context (the tests here make one). */
static struct cupool__class *only_class(void)
{
    struct cupool__class *found = NULL;
    for (uint32_t i = 0; i < cupool__class_limit(); i++) {
        struct cupool__class *c = cupool__class_at(i);
        if (c && atomic_load(&c->alive)) {
            ck_assert_ptr_null(found);
            found = c;
        }
    }
    ck_assert_ptr_nonnull(found);
    return found;
}

/* Lets the maintenance thread finish what its rounds have due (growth, decay). */
static void settle(void)
{
    for (uint64_t was = UINT64_MAX, now;
         (now = mstats().background_creates + mstats().background_destroys) != was; was = now)
        ck_assert(cupool__maint_flush(FLUSH_NS));
}

/* A decay clock that stops the maintenance thread at the start of a round (it reads the clock
 * there) once the gate's class has growth due: read on the thread that writes it. */
enum { GATE_OFF, GATE_ARMED, GATE_CAUGHT, GATE_OPEN };
static _Atomic int gate;
static struct cupool__class *gate_class;
static uint64_t gated_clock(void)
{
    if (atomic_load(&gate) == GATE_ARMED && gate_class->grow_due > 0) {
        atomic_store(&gate, GATE_CAUGHT);
        while (atomic_load(&gate) != GATE_OPEN)
            sched_yield();
    }
    return atomic_load(&fake_now);
}

/* A trim while the maintenance thread grows a class: the trim forgets the class's demand
 * (its reserve, headroom and warm-up), so what the last tick found the depot short of is
 * forgotten too. The growth went on after the trim: 576 streams created into the depot the
 * trim had just emptied, with the class no longer warm and its headroom nothing. */
START_TEST(a_trim_forgets_the_growth_that_was_due)
{
    /* the gated clock from the start (it reads the test's clock until armed): the maintenance
     * thread reads cupool__decay_clock, which is set before the thread exists */
    setenv("CUPOOL_DECAY_MS", "1000", 1);
    cupool__decay_clock = gated_clock;
    tu_setup();
    period = cupool__decay_period_ns();
    static CUstream h[600];
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 256; i++)
            TU_OK(cupool_stream_acquire(&h[i], CU_STREAM_NON_BLOCKING, 0));
        tick();
        settle();
        for (int i = 0; i < 256; i++)
            TU_OK(cupool_stream_release(h[i]));
        tick();
        settle();
    }
    struct cupool__class *c = only_class();
    /* a peak far above the recent ones, that the maintenance thread sees only at the tick */
    pthread_mutex_lock(&cupool__maint_unit);
    for (int i = 0; i < 600; i++)
        TU_OK(cupool_stream_acquire(&h[i], CU_STREAM_NON_BLOCKING, 0));
    for (int i = 0; i < 600; i++)
        TU_OK(cupool_stream_release(h[i]));
    pthread_mutex_unlock(&cupool__maint_unit);
    /* the thread stops at the start of the round after the tick's, with the growth due */
    gate_class = c;
    atomic_store(&gate, GATE_ARMED);
    atomic_fetch_add(&fake_now, period);
    (void)cupool__maint_kick(CUPOOL_MAINT_POOLS);
    while (atomic_load(&gate) != GATE_CAUGHT)
        sched_yield();
    TU_OK(cupool_trim());
    ck_assert_uint_eq(tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING).idle, 0);
    atomic_store(&gate, GATE_OPEN);
    settle();
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.idle, 0);
    ck_assert_uint_eq(st.in_use, 0);
    if (tu_fake.present)
        ck_assert_int_eq(tu_fake.live_streams(), 0);
}
END_TEST

/* Demand stops and the decay takes the depot down to the low-water mark: it pops whole
 * magazines and puts back what it keeps, and the moment the last one was out of the depot
 * was recorded as the depot's low point. The next tick saw a swing, and a low point short of
 * the low-water mark, and grew the class by it (4 streams, created with nobody asking and
 * destroyed a decay time later). */
START_TEST(a_class_whose_demand_stopped_creates_nothing)
{
    setenv("CUPOOL_STREAM_PREWARM", "20", 1);
    setup_decay("1000");
    churn(256);
    tick();
    settle();
    uint64_t made = mstats().background_creates;
    for (int i = 0; i < 12; i++) {
        tick();
        settle();
    }
    ck_assert_uint_eq(mstats().background_creates, made);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_uint_eq(st.idle, 20 + 32); /* the low-water mark, and this thread's magazines */
    ck_assert_uint_eq(st.creates, made + 256); /* the prewarmed 20 are of the 256 */
}
END_TEST

/* A miss past the warm-up asks for a reserve, which the maintenance thread creates at once;
 * the depot's low point over that interval was the miss (nothing). The tick then grew the
 * class by the reserve once more, though the depot held it: 64 kept ahead for a reserve of
 * 32 (with the headroom the refill's lift was the swing, and the same again). */
static void refilled_reserve_grown_again(const char *percent)
{
    setenv("CUPOOL_HEADROOM_PERCENT", percent, 1);
    setup_decay("1000");
    churn(16);
    tick(); /* past the warm-up: its working set is 16 */
    CUstream held[17];
    for (int i = 0; i < 17; i++) /* the 17th misses */
        TU_OK(cupool_stream_acquire(&held[i], CU_STREAM_NON_BLOCKING, 0));
    settle(); /* the reserve: 32 */
    uint64_t made = mstats().background_creates;
    ck_assert_uint_eq(made, 32);
    tick();
    settle();
    ck_assert_msg(mstats().background_creates == made,
                  "headroom %s%%: the tick created %llu more for a reserve the depot held", percent,
                  (unsigned long long)(mstats().background_creates - made));
    for (int i = 0; i < 17; i++)
        TU_OK(cupool_stream_release(held[i]));
}

START_TEST(a_refilled_reserve_is_not_grown_again)
{
    refilled_reserve_grown_again("0");
}
END_TEST

START_TEST(a_refilled_reserve_is_not_grown_again_with_the_headroom)
{
    refilled_reserve_grown_again("100");
}
END_TEST

/* A miss past the warm-up asks for a reserve of two magazines; the maintenance thread's
 * creates fail for a while once the first magazine is filled (a passing driver error). A round
 * after the error passed must create the rest. The refill's request was dropped with the
 * error, and a depot holding half the reserve is one no exchange asks to fill: the class kept
 * 16 ahead, not 32, until a request thread emptied the depot again. */
START_TEST(a_refill_cut_short_by_a_driver_error_is_finished)
{
    setenv("CUPOOL_HEADROOM_PERCENT", "0", 1); /* the reserve alone */
    setup_decay("1000");
    if (!tu_fake.present)
        return;
    churn(16);
    tick(); /* past the warm-up: its working set is 16 */
    CUstream held[17];
    /* the thread is held off until the fault is in place: the 17th acquire misses, asks for
     * the reserve (32) and creates its own stream */
    pthread_mutex_lock(&cupool__maint_unit);
    for (int i = 0; i < 17; i++)
        TU_OK(cupool_stream_acquire(&held[i], CU_STREAM_NON_BLOCKING, 0));
    /* the thread's creates fail from its 17th on: the first magazine (16) is in the depot */
    tu_fake.fault("cuStreamCreateWithPriority", 16, -1, CUDA_ERROR_OUT_OF_MEMORY);
    tu_fake.fault("cuStreamCreate", 16, -1, CUDA_ERROR_OUT_OF_MEMORY);
    pthread_mutex_unlock(&cupool__maint_unit);
    ck_assert(cupool__maint_flush(FLUSH_NS));
    ck_assert(cupool__maint_flush(FLUSH_NS));
    ck_assert_uint_eq(mstats().background_creates, 16);
    tu_fake.fault_clear(); /* the error passed */
    settle();
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_msg(st.idle == 32, "the depot holds %llu of the reserve of 32 after the error",
                  (unsigned long long)st.idle);
    ck_assert_uint_eq(mstats().background_creates, 32);
    ck_assert_uint_eq(mstats().request_creates, 17);
    for (int i = 0; i < 17; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

static unsigned long stream_creates_all(void)
{
    return tu_fake.calls("cuStreamCreate") + tu_fake.calls("cuStreamCreateWithPriority");
}

/* As above, but the error does not pass (the device's memory stays full). The refill stays
 * asked for, and the class's decay must still run: the reserve, which no miss renews, halves
 * each tick until the depot's half of it meets it, and the refill is then done; the idle
 * handles nothing uses decay. When the refill's error held off the class's tick as well, the
 * reserve never decayed: the thread tried again every 100 ms for as long as the error lasted
 * (a driver call each time), and the class's idle handles never decayed either. */
START_TEST(a_refill_failing_for_good_lets_the_class_decay)
{
    setenv("CUPOOL_HEADROOM_PERCENT", "0", 1); /* the reserve alone */
    setup_decay("1000");
    if (!tu_fake.present)
        return;
    churn(16);
    tick(); /* past the warm-up: its working set is 16 */
    CUstream held[17];
    pthread_mutex_lock(&cupool__maint_unit);
    for (int i = 0; i < 17; i++) /* the 17th misses and asks for the reserve (32) */
        TU_OK(cupool_stream_acquire(&held[i], CU_STREAM_NON_BLOCKING, 0));
    tu_fake.fault("cuStreamCreateWithPriority", 16, -1, CUDA_ERROR_OUT_OF_MEMORY);
    tu_fake.fault("cuStreamCreate", 16, -1, CUDA_ERROR_OUT_OF_MEMORY);
    pthread_mutex_unlock(&cupool__maint_unit);
    ck_assert(cupool__maint_flush(FLUSH_NS));
    ck_assert_uint_eq(mstats().background_creates, 16);
    /* no demand for a while: the reserve decays (two ticks bring it to the 16 the depot
     * holds), then the depot's 16, idle through a decay time, go */
    for (int i = 0; i < 8; i++)
        tick();
    unsigned long tried = stream_creates_all();
    for (int i = 0; i < 4; i++)
        tick();
    struct timespec ts = {0, 300000000}; /* past the thread's 100 ms retry, three times */
    nanosleep(&ts, NULL);
    ck_assert(cupool__maint_flush(FLUSH_NS));
    ck_assert_msg(stream_creates_all() == tried,
                  "the thread still tries to refill a reserve no miss asked for again: %lu more "
                  "creates after 12 ticks",
                  stream_creates_all() - tried);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
    ck_assert_msg(st.destroys == 16, "the class's idle handles decayed by %llu, not 16",
                  (unsigned long long)st.destroys);
    ck_assert_uint_eq(mstats().background_creates, 16);
    tu_fake.fault_clear();
    for (int i = 0; i < 17; i++)
        TU_OK(cupool_stream_release(held[i]));
}
END_TEST

/* A nudge that races the thread leaving its polling state (cupool__maint_nudge): the nudger
 * finds the thread polling, and before its bit lands the thread stores that it stopped,
 * takes `want` (empty) and goes to sleep. The bit must still wake it. With the test's clock
 * and a decay time of an hour the thread's next deadline is its tick, 15 minutes away, so a
 * lost wake-up outlasts the test's wait (it did: the bit stayed set, and every kick after it
 * found the bit set and returned). */
static void thread_stops_polling(void)
{
    cupool__maint_polling_set(false); /* the thread is asleep already: see the test */
}

START_TEST(a_nudge_racing_the_thread_leaving_its_polling_wakes_it)
{
    setup_decay("3600000"); /* its next tick 15 minutes away: a lost bit waits that long */
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0)); /* the thread exists */
    TU_OK(cupool_stream_release(s));
    ck_assert(cupool__maint_flush(FLUSH_NS)); /* then sleeps until its tick */
    /* the flush's last kick may have left a bit for one more round: let it take it */
    for (uint64_t until = cupool__monotonic_ns() + FLUSH_NS;
         (atomic_load(&cupool__maint_want) & CUPOOL_MAINT_POOLS) &&
         cupool__monotonic_ns() < until;)
        sched_yield();
    ck_assert_uint_eq(atomic_load(&cupool__maint_want) & CUPOOL_MAINT_POOLS, 0);
    uint64_t woke = atomic_load(&cupool__maint_wakeups);
    cupool__maint_polling_set(true); /* as a round that left a reserve to fill stores it */
    cupool__maint_nudge_hook = thread_stops_polling;
    ck_assert(cupool__maint_nudge(CUPOOL_MAINT_POOLS));
    cupool__maint_nudge_hook = NULL;
    /* the thread takes the bit, then counts the wake-up: wait for both (no kick, which would
     * wake it whatever the nudge did), for at most FLUSH_NS */
    uint64_t deadline = cupool__monotonic_ns() + FLUSH_NS;
    while (((atomic_load(&cupool__maint_want) & CUPOOL_MAINT_POOLS) ||
            atomic_load(&cupool__maint_wakeups) == woke) &&
           cupool__monotonic_ns() < deadline)
        sched_yield();
    ck_assert_msg(!(atomic_load(&cupool__maint_want) & CUPOOL_MAINT_POOLS),
                  "the nudge's bit is still waiting: the thread sleeps past it");
    ck_assert_uint_gt(atomic_load(&cupool__maint_wakeups), woke);
}
END_TEST

/* ---- two devices: each device's classes, one maintenance thread ---- */

static CUcontext dctx[2];

/* Two devices' primary contexts into dctx (tu_two_devices), or 0. */
static int two_devices(const char *test)
{
    return tu_two_devices(test, dctx);
}

/* The statistics of the live class of (kind, flags) whose context is ctx, or fails. */
static cupool_class_stats_t ctx_stats(CUcontext ctx, cupool_kind_t kind, unsigned flags)
{
    unsigned long long id = 0;
    TU_OK(tu.cuCtxGetId(ctx, &id));
    cupool_class_stats_t st[64] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 64, &n));
    for (size_t i = 0; i < n && i < 64; i++)
        if (st[i].kind == kind && st[i].flags == flags && st[i].context_id == id &&
            st[i].context_alive)
            return st[i];
    ck_abort_msg("no live class of context %llu", id);
    return st[0];
}

START_TEST(two_devices_decay_each_class_off_request_threads)
{
    setenv("FAKECUDA_DEVICES", "2", 1);
    setenv("CUPOOL_HEADROOM_PERCENT", "0", 1); /* the decay's own arithmetic */
    setup_decay("1000");
    if (!two_devices("two_devices_decay_each_class_off_request_threads"))
        return;
    /* 96 streams on device 0, 128 on device 1: each class keeps 32 in this thread's
     * magazines and puts the rest in its depot */
    static const int made[2] = {96, 128};
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dctx[d]));
        churn(made[d]);
    }
    for (int d = 0; d < 2; d++)
        ck_assert_uint_eq(ctx_stats(dctx[d], CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING).idle,
                          made[d]);
    ck_assert(cupool__maint_flush(FLUSH_NS));
    for (int i = 0; i < 4; i++)
        tick();
    unsigned long mine = here_calls();
    tick(); /* each depot held its excess through four whole intervals */
    for (int d = 0; d < 2; d++) {
        cupool_class_stats_t st = ctx_stats(dctx[d], CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
        ck_assert_uint_eq(st.destroys, made[d] - 32);
        ck_assert_uint_eq(st.idle, 32);
    }
    ck_assert_uint_eq(mstats().request_destroys, 0);
    ck_assert_uint_eq(here_calls(), mine);
    if (tu_fake.present)
        ck_assert_int_eq(tu_fake.live_streams(), 64);
    /* what is left is each device's own: acquired with its device current, every stream
     * belongs to that device's context */
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dctx[d]));
        CUstream s[32];
        for (int i = 0; i < 32; i++) {
            TU_OK(cupool_stream_acquire(&s[i], CU_STREAM_NON_BLOCKING, 0));
            CUcontext owner = NULL;
            TU_OK(tu.cuStreamGetCtx(s[i], &owner));
            ck_assert_ptr_eq(owner, dctx[d]);
        }
        for (int i = 0; i < 32; i++)
            TU_OK(cupool_stream_release(s[i]));
    }
}
END_TEST

START_TEST(two_devices_grow_each_class_on_the_maintenance_thread)
{
    setenv("FAKECUDA_DEVICES", "2", 1);
    setup_decay("1000");
    if (!two_devices("two_devices_grow_each_class_on_the_maintenance_thread"))
        return;
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dctx[d]));
        churn(16);
    }
    tick(); /* both classes are past their warm-up: each one's working set is 16 */
    static CUstream held[2][64];
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dctx[d]));
        for (int i = 0; i < 17; i++) /* the 17th misses: demand grows */
            TU_OK(cupool_stream_acquire(&held[d][i], CU_STREAM_NON_BLOCKING, 0));
    }
    TU_OK(tu.cuCtxSetCurrent(dctx[0]));
    ck_assert(cupool__maint_flush(FLUSH_NS)); /* the thread fills a reserve for each */
    cupool_maintenance_stats_t m = mstats();
    ck_assert_uint_ge(m.background_creates, 2 * 32);
    uint64_t creates = 0;
    for (int d = 0; d < 2; d++) {
        cupool_class_stats_t st = ctx_stats(dctx[d], CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
        ck_assert_uint_ge(st.creates, 17 + 32);
        creates += st.creates;
    }
    ck_assert_uint_eq(creates, m.background_creates + m.request_creates);
    /* more growth on each device is served from its own reserve: no create on this thread,
     * and every stream the thread made ahead belongs to its class's context (made with that
     * context pushed, whichever was current on the requesting thread) */
    unsigned long mine = here_calls();
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dctx[d]));
        for (int i = 17; i < 17 + 32; i++) {
            TU_OK(cupool_stream_acquire(&held[d][i], CU_STREAM_NON_BLOCKING, 0));
            CUcontext owner = NULL;
            TU_OK(tu.cuStreamGetCtx(held[d][i], &owner));
            ck_assert_ptr_eq(owner, dctx[d]);
        }
    }
    ck_assert_uint_eq(mstats().request_creates, m.request_creates);
    ck_assert_uint_eq(here_calls(), mine);
    /* released with the other device current: each goes back to its own class */
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(dctx[1 - d]));
        for (int i = 0; i < 17 + 32; i++)
            TU_OK(cupool_stream_release(held[d][i]));
    }
    for (int d = 0; d < 2; d++)
        ck_assert_uint_eq(ctx_stats(dctx[d], CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING).in_use,
                          0);
}
END_TEST

START_TEST(two_devices_handoff_reaches_a_steady_state)
{
    setenv("FAKECUDA_DEVICES", "2", 1);
    setup_decay("1000"); /* the test's clock: no decay tick during the test */
    if (!two_devices("two_devices_handoff_reaches_a_steady_state"))
        return;
    /* each class has at most RING in flight, and the consumer's two magazines of it */
    const uint64_t bound = RING + 2 * 16 + 1;
    handoff_on(8 * RING, dctx);
    uint64_t c0[2];
    for (int d = 0; d < 2; d++) {
        c0[d] = ctx_stats(dctx[d], CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING).creates;
        ck_assert_uint_le(c0[d], bound);
    }
    handoff_on(32 * RING, dctx);
    for (int d = 0; d < 2; d++) {
        cupool_class_stats_t st = ctx_stats(dctx[d], CUPOOL_KIND_STREAM, CU_STREAM_NON_BLOCKING);
        ck_assert_uint_le(st.creates, bound);
        ck_assert_uint_eq(st.destroys, 0);
        ck_assert_uint_eq(st.in_use, 0);
        printf("two devices, hand-off: device %d: %llu streams (%llu after warm-up)\n", d,
               (unsigned long long)st.creates, (unsigned long long)c0[d]);
    }
    ck_assert_uint_eq(ring.consumer_calls, 0); /* the releasing thread never calls the driver */
    ck_assert_uint_eq(mstats().request_destroys, 0);
}
END_TEST

/* Events of device 0 released with device 1 current sit idle in device 0's class (the
 * thread's magazine, then the depot); device 0's primary context is then reset: an acquire
 * with device 0's new context current never hands out one of the old context's events (the
 * simulated driver aborts on a call on one), nor does the maintenance thread or a trim touch
 * them; device 1's events serve on throughout. */
START_TEST(events_released_on_the_other_device_survive_a_reset_of_their_own)
{
    setenv("FAKECUDA_DEVICES", "2", 1); /* the simulated driver: two devices */
    setenv("CUPOOL_MAGAZINE_SIZE", "2", 1);
    setup_decay("1000");
    if (!two_devices("events_released_on_the_other_device_survive_a_reset_of_their_own"))
        return;
    CUcontext *ctx = dctx;
    enum { N = 9 };
    CUstream s[2];
    CUevent e[2][N];
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        TU_OK(tu.cuStreamCreate(&s[d], CU_STREAM_NON_BLOCKING));
        for (int i = 0; i < N; i++) {
            TU_OK(cupool_event_acquire(&e[d][i], CU_EVENT_DISABLE_TIMING));
            TU_OK(tu.cuEventRecord(e[d][i], s[d]));
        }
        TU_OK(tu.cuStreamSynchronize(s[d]));
    }
    TU_OK(tu.cuCtxSetCurrent(ctx[1]));
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < N; i++)
            TU_OK(cupool_event_release(e[d][i]));
    /* device 0's primary context reset with device 1 current, all its references dropped */
    CUdevice dev0;
    TU_OK(tu.cuDeviceGet(&dev0, 0));
    TU_OK(tu.cuStreamDestroy(s[1]));
    TU_OK(tu.cuStreamCreate(&s[1], CU_STREAM_NON_BLOCKING));
    TU_OK(tu.cuDevicePrimaryCtxReset(dev0));
    CUcontext again;
    TU_OK(tu.cuDevicePrimaryCtxRetain(&again, dev0));
    ck_assert_ptr_eq(again, ctx[0]); /* the same pointer, a new id */
    for (int round = 0; round < 3; round++) {
        for (int d = 0; d < 2; d++) {
            TU_OK(tu.cuCtxSetCurrent(ctx[d]));
            if (d == 0 && round == 0)
                TU_OK(tu.cuStreamCreate(&s[0], CU_STREAM_NON_BLOCKING));
            for (int i = 0; i < N; i++) {
                TU_OK(cupool_event_acquire(&e[d][i], CU_EVENT_DISABLE_TIMING));
                TU_OK(tu.cuEventRecord(e[d][i], s[d])); /* fails for another context's event */
            }
            TU_OK(tu.cuStreamSynchronize(s[d]));
        }
        TU_OK(tu.cuCtxSetCurrent(ctx[1 - round % 2]));
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < N; i++)
                TU_OK(cupool_event_release(e[d][i]));
        for (int t = 0; t < 5; t++)
            tick(); /* the maintenance thread decays both classes */
    }
    TU_OK(cupool_trim());
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        TU_OK(tu.cuStreamDestroy(s[d]));
    }
    cupool_class_stats_t st[8] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 8, &n));
    for (size_t i = 0; i < n && i < 8; i++)
        ck_assert_int_eq(st[i].context_alive, 1); /* the old context's class reclaimed */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("maint");
    TCase *tc = tcase_create("maint");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, decay_destroys_unused_idle_handles_off_request_threads);
    tcase_add_test(tc, demand_keeps_its_handles);
    tcase_add_test(tc, repeated_bursts_reach_a_steady_state);
    tcase_add_test(tc, handoff_reaches_a_steady_state);
    tcase_add_test(tc, dropin_batches_reach_a_steady_state);
    tcase_add_test(tc, over_cap_backlog_is_destroyed_by_the_maintenance_thread);
    tcase_add_test(tc, growth_after_warm_up_is_created_ahead);
    tcase_add_test(tc, headroom_absorbs_a_fluctuation_off_request_threads);
    tcase_add_test(tc, without_headroom_a_fluctuation_creates_on_the_request_thread);
    tcase_add_test(tc, default_headroom_absorbs_three_quarters_of_the_swing);
    tcase_add_test(tc, half_the_swing_does_not_absorb_three_quarters_of_it);
    tcase_add_test(tc, steady_holders_keep_no_headroom_and_leave_the_thread_asleep);
    tcase_add_test(tc, with_no_class_the_thread_sleeps);
    tcase_add_test(tc, no_thread_without_background);
    tcase_add_test(tc, forked_child_has_no_maintenance_thread);
    tcase_add_test(tc, failed_destroys_on_the_maintenance_thread_are_retried);
    tcase_add_test(tc, failed_drains_of_the_over_cap_backlog_are_retried);
    tcase_add_test(tc, passing_errors_while_the_thread_grows_and_decays_keep_the_books);
    tcase_add_test(tc, graves_of_a_broken_context_are_let_go);
    tcase_add_test(tc, context_release_keeps_the_thread_off_a_reset_context);
    tcase_add_test(tc, trims_between_requests_create_nothing_ahead);
    tcase_add_test(tc, a_trim_forgets_the_growth_that_was_due);
    tcase_add_test(tc, a_class_whose_demand_stopped_creates_nothing);
    tcase_add_test(tc, a_refilled_reserve_is_not_grown_again);
    tcase_add_test(tc, a_refilled_reserve_is_not_grown_again_with_the_headroom);
    tcase_add_test(tc, a_refill_cut_short_by_a_driver_error_is_finished);
    tcase_add_test(tc, a_refill_failing_for_good_lets_the_class_decay);
    tcase_add_test(tc, a_nudge_racing_the_thread_leaving_its_polling_wakes_it);
    tcase_add_test(tc, two_devices_decay_each_class_off_request_threads);
    tcase_add_test(tc, two_devices_grow_each_class_on_the_maintenance_thread);
    tcase_add_test(tc, two_devices_handoff_reaches_a_steady_state);
    tcase_add_test(tc, events_released_on_the_other_device_survive_a_reset_of_their_own);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
