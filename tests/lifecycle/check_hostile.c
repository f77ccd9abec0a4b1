/* SPDX-License-Identifier: MIT */
/*
 * cupool inside a hostile host: a sandbox that denies membarrier(2), fork storms, context
 * resets met first by an explicit pool, pass-through mode across a reset, creation races,
 * passing driver errors, endless trims and context churn. Each test is the regression test of
 * one guarantee in docs/reliability.md. Runs on the simulated driver and on the real one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/testutil.h"
#include "pool/pool.h" /* cupool__class_limit(): class indexes in use */

/* Iterations scaled down by CUPOOLTEST_STRESS_ITERS (the sanitizer runs set it). */
static long scaled(long full)
{
    const char *it = getenv("CUPOOLTEST_STRESS_ITERS");
    long n = it ? atol(it) : 0;
    if (n <= 0 || n >= 20000)
        return full;
    long s = full * n / 20000;
    return s > 1 ? s : 1;
}

/* ---- a sandbox that denies membarrier(2) --------------------------------------------- */

/* A seccomp filter, as container runtimes install: membarrier(2) fails with EPERM, every
 * other system call is allowed. In this test's process only (Check forks each test). */
static void deny_membarrier(void)
{
#ifdef SYS_membarrier
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_membarrier, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog fprog = {(unsigned short)(sizeof(prog) / sizeof(prog[0])), prog};
    ck_assert_int_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
    ck_assert_int_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog), 0);
    errno = 0;
    ck_assert_int_eq(syscall(SYS_membarrier, 0, 0, 0), -1);
    ck_assert_int_eq(errno, EPERM);
#endif
}

/* Without membarrier(2) every grace period still completes: 800k event creations and
 * destructions in pass-through mode fill the registry with tombstones and replace its table
 * thousands of times, and the replaced tables are freed (metadata stays flat). */
START_TEST(registry_reclaims_without_membarrier)
{
    deny_membarrier();
    setenv("CUPOOL_DISABLE", "1", 1);
    setenv("CUPOOL_LOG", "error", 1);
    tu_setup();
    long n = scaled(800000);
    size_t early = 0;
    for (long i = 0; i < n; i++) {
        CUevent e;
        TU_OK(cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING));
        TU_OK(cupool_event_release(e));
        if (i == 10000 || (i == n - 1 && !early))
            early = cupool_metadata_bytes();
    }
    size_t late = cupool_metadata_bytes();
    printf("no membarrier: %ld event pairs, metadata %zu bytes after 10000, %zu at the end\n", n,
           early, late);
    ck_assert_msg(late <= early + 16384, "metadata grew from %zu to %zu bytes", early, late);
}
END_TEST

/* ---- fork in the middle of a storm --------------------------------------------------- */

#define STORM_WORKERS 4
static _Atomic int storm_stop, storm_errors, storm_ready;
static struct tu_kernels storm_k;
static CUdeviceptr storm_mem;
static cupool_pipeline_t storm_idle_pipeline; /* the parent's, never used by the workers */

static void storm_fail(const char *what, CUresult r)
{
    if (atomic_fetch_add(&storm_errors, 1) < 5)
        fprintf(stderr, "storm: %s returned %s: %s\n", what, cupool_result_name(r),
                cupool_error_string());
}

#define STORM_OK(call)                                                                      \
    do {                                                                                    \
        CUresult r_ = (call);                                                               \
        if (r_ != CUDA_SUCCESS)                                                             \
            storm_fail(#call, r_);                                                          \
    } while (0)

/* each worker's own word of storm_mem (the simulated kernels are host code: shared words
 * would be a data race of the test's own) */
static _Thread_local CUdeviceptr storm_word;

static CUresult storm_capture(CUstream s, void *user)
{
    unsigned v = (unsigned)(uintptr_t)user;
    void *args[] = {&storm_word, &v};
    return tu.cuLaunchKernel(storm_k.set_u32, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

/* Creates, fills, launches and destroys pipelines, captures, acquires and releases streams
 * and events of both APIs, trims now and then: every lock cupool has is taken over and
 * over. */
static void *storm_worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    storm_word = storm_mem + 4 * (CUdeviceptr)id;
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS) {
        storm_fail("cuCtxSetCurrent", CUDA_ERROR_UNKNOWN);
        return NULL;
    }
    cupool_event_pool_t ep;
    STORM_OK(cupool_event_pool_get(&ep, NULL, CU_EVENT_DISABLE_TIMING));
    atomic_fetch_add(&storm_ready, 1);
    for (unsigned it = 0; !atomic_load(&storm_stop); it++) {
        CUstream s;
        CUevent e[3];
        CUresult r = cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, -(int)(it % 3));
        if (r != CUDA_SUCCESS) {
            storm_fail("cupool_stream_acquire", r);
            continue;
        }
        STORM_OK(cupool_event_acquire(&e[0], 0));
        STORM_OK(cupool_event_pool_acquire(ep, &e[1]));
        STORM_OK(cupool_event_acquire(&e[2], CU_EVENT_DISABLE_TIMING));
        cupool_pipeline_t p;
        STORM_OK(cupool_pipeline_create(&p));
        unsigned v = id * 1000 + it;
        for (unsigned k = 0; k < 2 + it % 3; k++)
            STORM_OK(cupool_pipeline_kernel(p, storm_k.add_u32, 1, 1, 1, 1, 1, 1, 0,
                                            (void *[]){&storm_word, &v}, NULL));
        STORM_OK(cupool_pipeline_memset(p, storm_word, 0, 4, 1, NULL));
        STORM_OK(cupool_pipeline_event_record(p, e[0], NULL));
        STORM_OK(cupool_pipeline_launch(p, s));
        STORM_OK(cupool_capture_launch(id * 8 + it % 4, s, storm_capture,
                                       (void *)(uintptr_t)v, CUPOOL_CAPTURE_UPDATE));
        STORM_OK(tu.cuStreamSynchronize(s));
        STORM_OK(cupool_pipeline_destroy(p));
        STORM_OK(cupool_event_release(e[0]));
        STORM_OK(cupool_event_pool_release(ep, e[1]));
        STORM_OK(cupool_event_release(e[2]));
        STORM_OK(cupool_stream_release(s));
        if (it % 64 == 63)
            STORM_OK(cupool_trim());
    }
    return NULL;
}

/* What a forked child sees: every call refuses with CUDA_ERROR_NOT_PERMITTED (a release of
 * the parent's handle included), with a message. Exit status: the number of calls that did
 * not. */
static int child_calls(CUstream parents_stream)
{
    int bad = 0;
    CUstream s = NULL;
    CUevent e = NULL;
    cupool_stream_pool_t sp = NULL;
    cupool_pipeline_t p = NULL;
    cupool_class_stats_t st[4] = {CUPOOL_CLASS_STATS_INIT};
    cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
    size_t n = 0;
#define REFUSED(call)                                                                       \
    do {                                                                                    \
        CUresult r_ = (call);                                                               \
        if (r_ != CUDA_ERROR_NOT_PERMITTED && bad++ == 0)                                   \
            fprintf(stderr, "forked child: %s returned %s\n", #call, cupool_result_name(r_)); \
    } while (0)
    REFUSED(cupool_stream_acquire(&s, 0, 0));
    REFUSED(cupool_event_acquire(&e, 0));
    REFUSED(cupool_stream_release(parents_stream));
    REFUSED(cupool_stream_pool_get(&sp, NULL, 0, 0));
    REFUSED(cupool_trim());
    REFUSED(cupool_init());
    REFUSED(cupool_pipeline_create(&p));
    REFUSED(cupool_pipeline_memset(storm_idle_pipeline, storm_mem, 0, 4, 1, NULL));
    REFUSED(cupool_pipeline_kernel(storm_idle_pipeline, storm_k.addone, 1, 1, 1, 1, 1, 1, 0,
                                   (void *[]){&storm_mem}, NULL));
    REFUSED(cupool_pipeline_reset(storm_idle_pipeline));
    REFUSED(cupool_pipeline_launch(storm_idle_pipeline, NULL));
    REFUSED(cupool_pipeline_destroy(storm_idle_pipeline));
    REFUSED(cupool_capture_launch(1, NULL, storm_capture, NULL, 0));
    REFUSED(cupool_stats_get(st, 4, &n));
    REFUSED(cupool_graph_stats_get(&g));
    REFUSED(cupool_graph_stats_device_get(0, &g));
    REFUSED(cupool_cuStreamCreate(&s, 0));
    REFUSED(cupool_cuEventDestroy((CUevent)(uintptr_t)0x1234));
#undef REFUSED
    bad += s != NULL || e != NULL || p != NULL;
    bad += strstr(cupool_error_string(), "fork") == NULL;
    return bad;
}

/* Hundreds of forks from a thread that never called cupool, while four threads storm every
 * lock cupool has: each child gets CUDA_ERROR_NOT_PERMITTED from every call within seconds
 * (a child blocked on a lock a parent's thread held at fork() is killed and fails the test),
 * and the parent's storm goes on without an error. */
struct forker_result {
    int forks, hung, wrong;
};
static CUstream forker_stream;

static void *forker(void *arg)
{
    struct forker_result *res = arg;
    int forks = (int)scaled(300);
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20); /* never outlive a hung test */
            _exit(child_calls(forker_stream));
        }
        if (pid < 0)
            break;
        res->forks++;
        int status = 0, done = 0;
        for (int t = 0; t < 1000 && !done; t++) { /* 10 s */
            if (waitpid(pid, &status, WNOHANG) == pid) {
                done = 1;
                break;
            }
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
        if (!done) {
            res->hung++;
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            res->wrong++;
        }
        struct timespec ts = {0, 1000000 + (long)(i % 7) * 300000}; /* forks land anywhere */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

START_TEST(fork_storm_children_refuse_without_hanging)
{
    tu_setup();
    tu_load_kernels(&storm_k);
    TU_OK(tu.cuMemAlloc(&storm_mem, 64));
    TU_OK(cupool_pipeline_create(&storm_idle_pipeline));
    TU_OK(cupool_pipeline_memset(storm_idle_pipeline, storm_mem, 0, 4, 1, NULL));
    TU_OK(cupool_stream_acquire(&forker_stream, 0, 0));
    pthread_t w[STORM_WORKERS], f;
    for (unsigned i = 0; i < STORM_WORKERS; i++)
        ck_assert_int_eq(pthread_create(&w[i], NULL, storm_worker, (void *)(uintptr_t)i), 0);
    while (atomic_load(&storm_ready) < STORM_WORKERS)
        sched_yield();
    struct forker_result res = {0, 0, 0};
    ck_assert_int_eq(pthread_create(&f, NULL, forker, &res), 0);
    pthread_join(f, NULL);
    atomic_store(&storm_stop, 1);
    for (unsigned i = 0; i < STORM_WORKERS; i++)
        pthread_join(w[i], NULL);
    printf("fork storm: %d forks, %d children hung, %d answered wrongly, %d storm errors\n",
           res.forks, res.hung, res.wrong, atomic_load(&storm_errors));
    ck_assert_int_gt(res.forks, 0);
    ck_assert_int_eq(res.hung, 0);
    ck_assert_int_eq(res.wrong, 0);
    ck_assert_int_eq(atomic_load(&storm_errors), 0);
    TU_OK(cupool_stream_release(forker_stream));
    TU_OK(cupool_pipeline_destroy(storm_idle_pipeline));
}
END_TEST

/* ---- pass-through mode across a context reset ------------------------------------------ */

/* Reset the primary context with handles out, then release them under CUPOOL_DISABLE=1: the
 * releases never reach the driver with a dead handle (the simulated driver aborts on one, the
 * H200 segfaulted), and the new context's handles work. */
START_TEST(passthrough_release_after_reset_is_harmless)
{
    setenv("CUPOOL_DISABLE", "1", 1);
    tu_setup();
    CUstream s;
    CUevent e;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_event_acquire(&e, 0));
    TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
    TU_OK(cupool_stream_release(s));
    TU_OK(cupool_event_release(e));
    TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_event_acquire(&e, 0));
    TU_OK(tu.cuEventRecord(e, s));
    TU_OK(tu.cuEventSynchronize(e));
    TU_OK(cupool_event_release(e));
    TU_OK(cupool_stream_release(s));
    if (tu_fake.present) {
        ck_assert_int_eq(tu_fake.live_streams(), 0);
        ck_assert_int_eq(tu_fake.live_events(), 0);
    }
}
END_TEST

/* ---- passing driver errors ----------------------------------------------------------- */

/* A verdict on the context that the driver does not repeat (one CUDA_ERROR_INVALID_CONTEXT or
 * CONTEXT_IS_DESTROYED from cuCtxGetId(ctx), one CONTEXT_IS_DESTROYED or sticky error from a
 * destroy) never retires a live class. 17,000 rounds (more than the class table holds): no
 * class replaced, no handle leaked in the driver, metadata flat, every acquire served.
 * Simulated driver only (it injects the faults). */
START_TEST(passing_errors_never_retire_a_live_class)
{
    /* faults by call count, each meant for this thread's trim: no maintenance thread (its
     * own faults: check_maint) */
    setenv("CUPOOL_BACKGROUND", "0", 1);
    tu_setup();
    if (!tu_fake.present) {
        printf("passing errors: needs the simulated driver's fault injection (not run)\n");
        return;
    }
    static const struct {
        const char *entry;
        CUresult err;
    } faults[] = {
        {"cuCtxGetId", CUDA_ERROR_INVALID_CONTEXT},
        {"cuCtxGetId", CUDA_ERROR_CONTEXT_IS_DESTROYED},
        {"cuCtxGetId", CUDA_ERROR_ILLEGAL_ADDRESS},
        {"cuStreamDestroy", CUDA_ERROR_CONTEXT_IS_DESTROYED},
        {"cuStreamDestroy", CUDA_ERROR_INVALID_CONTEXT},
        {"cuStreamDestroy", CUDA_ERROR_LAUNCH_FAILED},
        {"cuEventDestroy", CUDA_ERROR_CONTEXT_IS_DESTROYED},
        {"cuEventDestroy", CUDA_ERROR_ILLEGAL_ADDRESS},
    };
    const int nf = (int)(sizeof(faults) / sizeof(faults[0]));
    long rounds = scaled(17000);
    size_t early = 0;
    for (long i = 0; i < rounds; i++) {
        CUstream s[4];
        CUevent e[4];
        for (int k = 0; k < 4; k++) {
            TU_OK(cupool_stream_acquire(&s[k], 0, 0));
            TU_OK(cupool_event_acquire(&e[k], 0));
        }
        for (int k = 0; k < 4; k++) {
            TU_OK(cupool_stream_release(s[k]));
            TU_OK(cupool_event_release(e[k]));
        }
        tu_fake.fault(faults[i % nf].entry, 0, 1, faults[i % nf].err);
        CUresult r = cupool_trim(); /* the fault may fail it: the handle stays for later */
        (void)r;
        tu_fake.fault_clear();
        if (i == 100)
            early = cupool_metadata_bytes();
    }
    ck_assert_uint_eq(tu_class_count(), 2);
    cupool_class_stats_t st = tu_stats(CUPOOL_KIND_STREAM, 0);
    cupool_class_stats_t ev = tu_stats(CUPOOL_KIND_EVENT, 0);
    ck_assert_uint_eq(st.dropped + ev.dropped, 0);
    ck_assert_int_eq(tu_fake.live_streams(), (int)(st.idle + st.in_use));
    ck_assert_int_eq(tu_fake.live_events(), (int)(ev.idle + ev.in_use));
    size_t late = cupool_metadata_bytes();
    printf("passing errors: %ld rounds, metadata %zu bytes after 100, %zu at the end\n", rounds,
           early, late);
    ck_assert_msg(late <= early + 4096, "metadata grew from %zu to %zu", early, late);
    tu_trim_leaves_nothing();
}
END_TEST

/* ---- explicit pools after a context reset --------------------------------------------- */

/* cuDevicePrimaryCtxReset followed directly by explicit pools, no other cupool call between:
 * both refuse with CUDA_ERROR_CONTEXT_IS_DESTROYED (a vouched stream and an event included),
 * never hand out a handle the reset destroyed; pools of the new context work, and the old
 * handles keep refusing after trim has reclaimed their classes. */
START_TEST(explicit_pools_refuse_right_after_reset)
{
    tu_setup();
    cupool_event_pool_t ep;
    cupool_stream_pool_t sp;
    CUevent e, x = NULL;
    CUstream s, y = NULL;
    TU_OK(cupool_event_pool_get(&ep, NULL, CU_EVENT_DISABLE_TIMING));
    TU_OK(cupool_stream_pool_get(&sp, NULL, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(cupool_event_pool_acquire(ep, &e));
    TU_OK(cupool_event_pool_release(ep, e));
    TU_OK(cupool_stream_pool_acquire(sp, &s));
    TU_OK(cupool_stream_pool_release(sp, s, CUPOOL_RELEASE_NOT_CAPTURING));
    TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
    TU_EQ(cupool_event_pool_acquire(ep, &x), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    TU_EQ(cupool_stream_pool_acquire(sp, &y), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    ck_assert_ptr_null(x);
    ck_assert_ptr_null(y);
    TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
    TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    TU_EQ(cupool_event_pool_acquire(ep, &x), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    cupool_event_pool_t ep2;
    TU_OK(cupool_event_pool_get(&ep2, NULL, CU_EVENT_DISABLE_TIMING));
    ck_assert_ptr_ne(ep, ep2);
    TU_OK(cupool_event_pool_acquire(ep2, &x));
    TU_OK(tu.cuEventRecord(x, NULL));
    TU_OK(tu.cuEventSynchronize(x));
    TU_OK(cupool_trim()); /* the old classes are reclaimed: nothing of them is left */
    TU_EQ(cupool_event_pool_acquire(ep, &e), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    TU_EQ(cupool_stream_pool_acquire(sp, &y), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    TU_EQ(cupool_event_pool_release(ep, x), CUDA_ERROR_INVALID_HANDLE); /* not that pool's */
    TU_OK(cupool_event_pool_release(ep2, x));
}
END_TEST

/* ---- the class table: creation races, context churn ------------------------------------ */

#define RACE_THREADS 16
#define RACE_CTXS 32
#define RACE_EVENT_FLAGS 6
#define RACE_KEYS (RACE_CTXS * (12 + RACE_EVENT_FLAGS))
static CUcontext race_ctx[RACE_CTXS];
static pthread_barrier_t race_barrier;
static _Atomic int race_errors;

/* Every thread asks for the same classes in the same order, all starting at once, so that
 * they meet on each: per context, 2 stream flags x 6 priorities and 6 event flag sets. */
static void *race_thread(void *arg)
{
    (void)arg;
    static const unsigned ev[RACE_EVENT_FLAGS] = {
        0, CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING,
        CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING,
        CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING,
        CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC};
    pthread_barrier_wait(&race_barrier);
    for (unsigned key = 0; key < RACE_KEYS; key++) {
        CUcontext c = race_ctx[key % RACE_CTXS];
        unsigned k = key / RACE_CTXS;
        CUresult r;
        if (k < 12) {
            cupool_stream_pool_t p;
            r = cupool_stream_pool_get(&p, c, k % 2 ? CU_STREAM_NON_BLOCKING : 0, -(int)(k / 2));
        } else {
            cupool_event_pool_t p;
            r = cupool_event_pool_get(&p, c, ev[k - 12]);
        }
        if (r != CUDA_SUCCESS)
            atomic_fetch_add(&race_errors, 1);
    }
    return NULL;
}

static void race_widen(void)
{
    struct timespec ts = {0, 2000000}; /* every creator misses before any creates */
    nanosleep(&ts, NULL);
}

/* Racing creators of one class find one class, and no index is lost: the indexes in use are
 * exactly the classes there are. (A hook holds each creator 2 ms between its lookup's miss and
 * the creation, so they do meet there, even on two CPUs.) */
START_TEST(class_creation_races_lose_no_index)
{
    tu_setup();
    cupool__class_miss_hook = race_widen;
    for (int i = 0; i < RACE_CTXS; i++) {
        TU_OK(tu.cuCtxCreate(&race_ctx[i], 0, tu_dev));
        CUcontext popped;
        TU_OK(tu.cuCtxPopCurrent(&popped));
    }
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    pthread_barrier_init(&race_barrier, NULL, RACE_THREADS);
    pthread_t t[RACE_THREADS];
    for (unsigned i = 0; i < RACE_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_thread, (void *)(uintptr_t)i), 0);
    for (unsigned i = 0; i < RACE_THREADS; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&race_errors), 0);
    printf("class races: %zu classes, %u indexes in use\n", tu_class_count(),
           cupool__class_limit());
    ck_assert_uint_eq(tu_class_count(), RACE_KEYS);
    ck_assert_uint_eq(cupool__class_limit(), RACE_KEYS);
    for (int i = 0; i < RACE_CTXS; i++)
        TU_OK(tu.cuCtxDestroy(race_ctx[i]));
}
END_TEST

/* A context reset thousands of times (more than the class table holds classes, three per
 * context): the classes of every gone context are reclaimed, so acquires never fail for want
 * of a class, the indexes in use stay few, and metadata stays flat. A pool handle of the first
 * context keeps refusing, and never serves the classes that reused its index. */
START_TEST(context_churn_reclaims_classes)
{
    tu_setup();
    long rounds = tu_fake.present ? scaled(9000) : 40;
    cupool_event_pool_t first = NULL;
    size_t early = 0;
    uint32_t max_limit = 0;
    for (long i = 0; i < rounds; i++) {
        CUstream s;
        CUevent e, pe;
        cupool_event_pool_t ep;
        TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
        TU_OK(cupool_event_acquire(&e, 0));
        TU_OK(cupool_event_pool_get(&ep, NULL, CU_EVENT_DISABLE_TIMING));
        TU_OK(cupool_event_pool_acquire(ep, &pe));
        TU_OK(tu.cuEventRecord(pe, s));
        TU_OK(cupool_event_pool_release(ep, pe));
        TU_OK(cupool_event_release(e));
        if (i % 2)
            TU_OK(cupool_stream_release(s)); /* the other half are released after the reset */
        if (!first)
            first = ep;
        TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
        TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
        TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
        TU_OK(tu.cuCtxSetCurrent(tu_ctx));
        if (i % 2 == 0)
            TU_OK(cupool_stream_release(s));
        uint32_t limit = cupool__class_limit();
        max_limit = limit > max_limit ? limit : max_limit;
        if (i == 200 || (i == rounds - 1 && !early))
            early = cupool_metadata_bytes();
    }
    CUevent x = NULL;
    TU_EQ(cupool_event_pool_acquire(first, &x), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    ck_assert_ptr_null(x);
    size_t late = cupool_metadata_bytes();
    printf("context churn: %ld resets, at most %u class indexes in use, %zu classes listed, "
           "metadata %zu bytes after 200, %zu at the end\n",
           rounds, max_limit, tu_class_count(), early, late);
    ck_assert_uint_le(max_limit, 3 * 16 + 16);
    ck_assert_msg(late <= early + 16384, "metadata grew from %zu to %zu", early, late);
    TU_OK(cupool_trim());
    ck_assert_uint_le(tu_class_count(), 3);
}
END_TEST

/* Classes reclaimed by several threads at once: two threads trim without pause while the
 * main thread makes 16 pools a round (current-context handles too) and resets the context.
 * Every round's 16 pools are distinct values, every handle they and the current-context API
 * hand out is of the live context (the simulated driver aborts on one of a reset context), and
 * the indexes in use stay bounded. Two reclaimers once picked one class, freed its index
 * twice, and gave one struct to two classes. */
static _Atomic int trimmers_stop;

/* arg: the context current when the trimmers started (tu_ctx itself is rewritten by the
 * rounds' resets while the threads start) */
static void *trimmer(void *arg)
{
    if (tu.cuCtxSetCurrent((CUcontext)arg) != CUDA_SUCCESS)
        return NULL;
    while (!atomic_load(&trimmers_stop))
        (void)cupool_trim();
    return NULL;
}

START_TEST(concurrent_reclamation_keeps_classes_apart)
{
    tu_setup();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, trimmer, (void *)tu_ctx), 0);
    static const unsigned ef[4] = {0, CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING,
                                   CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING};
    long rounds = tu_fake.present ? scaled(3000) : 30;
    uint32_t max_limit = 0;
    for (long r = 0; r < rounds; r++) {
        void *pools[16];
        int n = 0;
        for (int i = 0; i < 4; i++) {
            cupool_event_pool_t p;
            TU_OK(cupool_event_pool_get(&p, NULL, ef[i]));
            pools[n++] = p;
        }
        for (int f = 0; f < 2; f++)
            for (int pr = 0; pr > -6; pr--) {
                cupool_stream_pool_t p;
                TU_OK(cupool_stream_pool_get(&p, NULL, f ? CU_STREAM_NON_BLOCKING : 0, pr));
                pools[n++] = p;
            }
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                ck_assert_msg(pools[i] != pools[j], "round %ld: pools %d and %d are one value",
                              r, i, j);
        for (int i = 0; i < 4; i++) {
            CUevent e, c;
            TU_OK(cupool_event_pool_acquire((cupool_event_pool_t)pools[i], &e));
            TU_OK(tu.cuEventRecord(e, NULL));
            TU_OK(cupool_event_pool_release((cupool_event_pool_t)pools[i], e));
            TU_OK(cupool_event_acquire(&c, ef[i]));
            TU_OK(tu.cuEventRecord(c, NULL));
            TU_OK(cupool_event_release(c));
        }
        for (int pr = 0; pr > -6; pr--) {
            CUstream s;
            TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, pr));
            TU_OK(tu.cuStreamQuery(s));
            TU_OK(cupool_stream_release(s));
        }
        TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
        TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
        TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
        TU_OK(tu.cuCtxSetCurrent(tu_ctx));
        uint32_t limit = cupool__class_limit();
        max_limit = limit > max_limit ? limit : max_limit;
    }
    atomic_store(&trimmers_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("concurrent reclamation: %ld rounds of 16 pools, at most %u class indexes in use\n",
           rounds, max_limit);
    ck_assert_uint_lt(max_limit, CUPOOL_MAX_CLASSES / 2);
}
END_TEST

/* ---- contexts destroyed, readers without a cache, sections held up ------------------ */

/* A context created with cuCtxCreate and destroyed with cuCtxDestroy, a stream acquired and
 * released in each, thousands of times (more than the class table holds): trim asks the
 * driver about every class's context, so the classes of destroyed contexts are reclaimed
 * whether their handles sit in the depot at its low-water mark (one thread, prewarm 1) or in
 * another thread's magazine (a worker makes the contexts, the main thread trims). Such
 * classes were never looked at, and acquires failed once the table was full. */
static _Atomic int churn_done;
static long churn_rounds;
static _Atomic int churn_errors;

static void destroyed_context_round(void)
{
    CUcontext c, popped;
    CUstream s;
    if (tu.cuCtxCreate(&c, 0, tu_dev) != CUDA_SUCCESS ||
        cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS ||
        cupool_stream_release(s) != CUDA_SUCCESS || tu.cuCtxPopCurrent(&popped) != CUDA_SUCCESS ||
        tu.cuCtxDestroy(c) != CUDA_SUCCESS) {
        fprintf(stderr, "destroyed contexts: %s\n", cupool_error_string());
        atomic_fetch_add(&churn_errors, 1);
    }
}

static void *churn_worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < churn_rounds && !atomic_load(&churn_errors); i++)
        destroyed_context_round();
    atomic_store(&churn_done, 1);
    return NULL;
}

START_TEST(destroyed_contexts_release_their_classes)
{
    setenv("CUPOOL_STREAM_PREWARM", "1", 1);
    tu_setup();
    long rounds = tu_fake.present ? 17000 : 30;
    uint32_t max_limit = 0;
    for (long i = 0; i < rounds && !atomic_load(&churn_errors); i++) {
        destroyed_context_round();
        TU_OK(cupool_trim());
        uint32_t limit = cupool__class_limit();
        max_limit = limit > max_limit ? limit : max_limit;
    }
    int errors = atomic_load(&churn_errors);
    ck_assert_int_eq(errors, 0);
    ck_assert_uint_le(max_limit, 4);
    churn_rounds = tu_fake.present ? 17000 : 10;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, churn_worker, NULL), 0);
    long trims = 0;
    while (!atomic_load(&churn_done)) {
        TU_OK(cupool_trim());
        trims++;
    }
    pthread_join(t, NULL); /* the worker's magazines go back to their classes */
    /* A trim's grace period gives up after 10 ms, which a loaded machine's scheduler can
     * exceed; reclamation is a promise of eventually, not of one trim. */
    for (int i = 0; i < 100 && tu_class_count() > 1; i++)
        TU_OK(cupool_trim());
    printf("destroyed contexts: %ld contexts with trims, at most %u class indexes in use; "
           "%ld made by a worker during %ld trims, %zu classes listed after\n",
           rounds, max_limit, churn_rounds, trims, tu_class_count());
    errors = atomic_load(&churn_errors);
    ck_assert_int_eq(errors, 0);
    ck_assert_uint_le(tu_class_count(), 1);
}
END_TEST

/* Tests that make thousands of contexts run on the simulated driver only (a real context
 * costs milliseconds and memory): true there; elsewhere says "not run" and false. */
static bool cheap_contexts(const char *test)
{
    if (tu_fake.present)
        return true;
    printf("%s: needs the simulated driver's cheap contexts (not run)\n", test);
    return false;
}

/* Contexts with 12 stream classes each (two flags, six priorities), current again after. */
static void make_context_classes(CUcontext *ctx, int n)
{
    for (int i = 0; i < n; i++) {
        CUcontext popped;
        TU_OK(tu.cuCtxCreate(&ctx[i], 0, tu_dev));
        for (int f = 0; f < 2; f++)
            for (int pr = 0; pr > -6; pr--) {
                cupool_stream_pool_t p;
                TU_OK(cupool_stream_pool_get(&p, ctx[i], f ? CU_STREAM_NON_BLOCKING : 0, pr));
            }
        TU_OK(tu.cuCtxPopCurrent(&popped));
    }
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
}

/* Threads that never acquired anything (monitors polling cupool_stats_get over 1200 classes)
 * are in read sections most of the time, overlapping one another: grace periods still end,
 * so the classes of 1500 resets are reclaimed as they go. Such readers were counted in one
 * shared counter without a phase that overlapping readers never let reach zero: every
 * reclamation timed out and the table grew by one class per reset. */
static _Atomic int pollers_stop;

static void *stats_poller(void *arg)
{
    (void)arg;
    size_t n;
    while (!atomic_load(&pollers_stop))
        (void)cupool_stats_get(NULL, 0, &n);
    return NULL;
}

START_TEST(readers_without_a_cache_never_hold_up_reclamation)
{
    tu_setup();
    if (!cheap_contexts("readers without a cache"))
        return;
    enum { NCTX = 100 };
    static CUcontext ctx[NCTX];
    make_context_classes(ctx, NCTX);
    uint32_t base = cupool__class_limit();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, stats_poller, NULL), 0);
    long rounds = scaled(1500);
    uint32_t max_limit = 0;
    for (long i = 0; i < rounds; i++) {
        CUstream s;
        TU_OK(tu.cuDevicePrimaryCtxRelease(tu_dev));
        TU_OK(tu.cuDevicePrimaryCtxReset(tu_dev));
        TU_OK(tu.cuDevicePrimaryCtxRetain(&tu_ctx, tu_dev));
        TU_OK(tu.cuCtxSetCurrent(tu_ctx));
        TU_OK(cupool_stream_acquire(&s, 0, 0));
        TU_OK(cupool_stream_release(s));
        TU_OK(cupool_trim());
        uint32_t limit = cupool__class_limit();
        max_limit = limit > max_limit ? limit : max_limit;
    }
    atomic_store(&pollers_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("readers without a cache: %ld resets beside %u classes, at most %u indexes in use\n",
           rounds, base, max_limit);
    ck_assert_uint_le(max_limit, base + 64);
    for (int i = 0; i < NCTX; i++)
        TU_OK(tu.cuCtxDestroy(ctx[i]));
}
END_TEST

/* cupool_stats_print() to a pipe nobody reads blocks in its writes; those happen outside its
 * read sections, so a grace period still ends while it is blocked. It once wrote inside its
 * section: every grace period timed out while it was blocked. */
static FILE *blocked_out;

static void *blocked_printer(void *arg)
{
    (void)arg;
    (void)cupool_stats_print(blocked_out);
    return NULL;
}

START_TEST(blocked_statistics_writer_holds_up_nothing)
{
    tu_setup();
    if (!cheap_contexts("blocked statistics writer"))
        return;
    enum { NCTX = 100 }; /* 1200 classes: about 120 KB of lines, more than a pipe holds */
    static CUcontext ctx[NCTX];
    make_context_classes(ctx, NCTX);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    int capacity = fcntl(fds[1], F_GETPIPE_SZ);
    ck_assert_int_gt(capacity, 0);
    ck_assert_ptr_nonnull(blocked_out = fdopen(fds[1], "w"));
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, blocked_printer, NULL), 0);
    int queued = 0;
    for (int looks = 0; looks < 10000 && queued < capacity; looks++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        ck_assert_int_eq(ioctl(fds[0], FIONREAD, &queued), 0);
    }
    ck_assert_int_eq(queued, capacity); /* the writer is blocked in the middle of its table */
    ck_assert(cupool__synchronize(100000000u));
    /* drain until the writer is done (the write end stays open: reads must not block) */
    ck_assert_int_eq(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
    char buf[4096];
    while (read(fds[0], buf, sizeof buf) > 0 || pthread_tryjoin_np(t, NULL) != 0)
        ;
    fclose(blocked_out);
    close(fds[0]);
    for (int i = 0; i < NCTX; i++)
        TU_OK(tu.cuCtxDestroy(ctx[i]));
}
END_TEST

/* A thread that stays in a read section (here, held open on purpose) holds grace periods up;
 * the reclamation that public calls do on their way out then backs off instead of waiting
 * on every call: 4000 acquires, each a registry insert that asks for the replaced tables to
 * be freed, give a few dozen failed grace periods, not one (of 10 ms) per call. */
static _Atomic int section_held, section_release;

static void *section_holder(void *arg)
{
    (void)arg;
    CUevent e;
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS ||
        cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
        cupool_event_release(e) != CUDA_SUCCESS)
        return NULL; /* section_held stays 0: the test fails */
    struct cupool__tcache *tc = cupool__tcache_self();
    cupool__read_enter(cupool__th(tc));
    atomic_store(&section_held, 1);
    while (!atomic_load(&section_release)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cupool__read_leave(cupool__th(tc));
    return NULL;
}

/* Starts a thread that holds a read section until section_release; returns once it does. */
static pthread_t section_hold(void)
{
    atomic_store(&section_held, 0);
    atomic_store(&section_release, 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, section_holder, NULL), 0);
    for (int looks = 0; looks < 10000 && !atomic_load(&section_held); looks++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    ck_assert(atomic_load(&section_held));
    return t;
}

START_TEST(held_up_grace_periods_back_off)
{
    tu_setup();
    pthread_t t = section_hold();
    enum { N = 4000 };
    static CUevent ev[N];
    uint64_t before = atomic_load(&cupool__gp_timeouts);
    uint64_t t0 = cupool__monotonic_ns();
    for (int i = 0; i < N; i++)
        TU_OK(cupool_event_acquire(&ev[i], CU_EVENT_DISABLE_TIMING));
    uint64_t failed = atomic_load(&cupool__gp_timeouts) - before;
    double secs = (double)(cupool__monotonic_ns() - t0) / 1e9;
    atomic_store(&section_release, 1);
    pthread_join(t, NULL);
    for (int i = 0; i < N; i++)
        TU_OK(cupool_event_release(ev[i]));
    printf("held-up grace periods: %d acquires in %.2f s tried %llu grace periods that timed "
           "out\n",
           N, secs, (unsigned long long)failed);
    /* the backoff doubles from 1 ms to 1 s: about 11 tries, then one a second */
    ck_assert_uint_le(failed, 12 + (uint64_t)secs + 2);
    ck_assert(cupool__synchronize(100000000u)); /* and once the section ends, they end */
}
END_TEST

/* The class table full of classes of destroyed contexts: a thread without a cache (one that
 * only makes explicit pools) reclaims them like any other thread, instead of waiting on its
 * own read section until the reclamation timed out and failing with OUT_OF_MEMORY. */
static CUcontext full_fresh;
static CUresult full_result;

static void *cacheless_pool_get(void *arg)
{
    (void)arg;
    cupool_stream_pool_t p;
    full_result = cupool_stream_pool_get(&p, full_fresh, 0, 0);
    return NULL;
}

START_TEST(full_table_reclaims_from_a_thread_without_cache)
{
    tu_setup();
    if (!cheap_contexts("full table"))
        return;
    uint32_t n = CUPOOL_MAX_CLASSES - cupool__class_limit();
    CUcontext *ctx = calloc(n, sizeof(*ctx));
    ck_assert_ptr_nonnull(ctx);
    for (uint32_t i = 0; i < n; i++) {
        CUcontext popped;
        cupool_stream_pool_t p;
        TU_OK(tu.cuCtxCreate(&ctx[i], 0, tu_dev));
        TU_OK(cupool_stream_pool_get(&p, ctx[i], 0, 0));
        TU_OK(tu.cuCtxPopCurrent(&popped));
    }
    ck_assert_uint_eq(cupool__class_limit(), CUPOOL_MAX_CLASSES);
    for (uint32_t i = 0; i < n; i++)
        TU_OK(tu.cuCtxDestroy(ctx[i]));
    CUcontext popped;
    TU_OK(tu.cuCtxCreate(&full_fresh, 0, tu_dev));
    TU_OK(tu.cuCtxPopCurrent(&popped));
    for (int k = 0; k < 2; k++) {
        pthread_t t;
        full_result = CUDA_ERROR_UNKNOWN;
        ck_assert_int_eq(pthread_create(&t, NULL, cacheless_pool_get, NULL), 0);
        pthread_join(t, NULL);
        ck_assert_msg(full_result == CUDA_SUCCESS, "pool_get at a full table: %s",
                      cupool_result_name(full_result));
    }
    printf("full table: %u classes of destroyed contexts; a thread without a cache made a pool\n",
           n);
    TU_OK(tu.cuCtxDestroy(full_fresh));
    free(ctx);
}
END_TEST

/* A child forked while the parent has reclamation pending (replaced registry tables, asked
 * for inside a section of the parent's) refuses every call without running it: the
 * reclamation takes locks another parent thread may have held at the fork (children hung on
 * the registry's lock), and waits on sections that never end in the child. Its metadata
 * does not change and its calls return CUDA_ERROR_NOT_PERMITTED. */
START_TEST(forked_child_never_reclaims)
{
    tu_setup();
    enum { N = 3000 };
    static CUevent ev[N];
    struct cupool__tcache *tc = cupool__tcache_self();
    ck_assert_ptr_nonnull(tc);
    cupool__read_enter(cupool__th(tc)); /* the acquires' reclamation waits until the section ends */
    for (int i = 0; i < N; i++)
        TU_OK(cupool_event_acquire(&ev[i], CU_EVENT_DISABLE_TIMING));
    ck_assert(atomic_load(&cupool__hot.reclaim_due)); /* replaced tables wait for a grace period */
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        cupool__read_leave(cupool__th(tc));
        size_t before = cupool_metadata_bytes();
        CUevent e;
        CUstream s;
        int bad = cupool_event_acquire(&e, 0) != CUDA_ERROR_NOT_PERMITTED;
        bad |= (cupool_stream_acquire(&s, 0, 0) != CUDA_ERROR_NOT_PERMITTED) << 1;
        bad |= (cupool_event_release(ev[0]) != CUDA_ERROR_NOT_PERMITTED) << 2;
        bad |= (cupool_metadata_bytes() != before) << 3;
        _exit(bad);
    }
    cupool__read_leave(cupool__th(tc));
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child status 0x%x (exit bits: 1 event acquire, 2 stream acquire, 4 release, "
                  "8 metadata changed)",
                  status);
    for (int i = 0; i < N; i++)
        TU_OK(cupool_event_release(ev[i]));
}
END_TEST

/* membarrier(2) denied after initialisation (a sandbox locked down once the program set up):
 * grace periods still complete, so replaced registry tables and retired classes are still
 * reclaimed. */
START_TEST(reclaims_when_membarrier_is_denied_later)
{
    setenv("CUPOOL_DISABLE", "1", 1);
    setenv("CUPOOL_LOG", "error", 1);
    tu_setup();
    CUevent e;
    TU_OK(cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING)); /* initialised, then locked */
    TU_OK(cupool_event_release(e));
    deny_membarrier();
    long n = scaled(800000);
    size_t early = 0;
    for (long i = 0; i < n; i++) {
        TU_OK(cupool_event_acquire(&e, CU_EVENT_DISABLE_TIMING));
        TU_OK(cupool_event_release(e));
        if (i == 10000 || (i == n - 1 && !early))
            early = cupool_metadata_bytes();
    }
    size_t late = cupool_metadata_bytes();
    printf("membarrier denied after initialisation: %ld event pairs, metadata %zu bytes after "
           "10000, %zu at the end\n",
           n, early, late);
    ck_assert_msg(late <= early + 16384, "metadata grew from %zu to %zu bytes", early, late);
}
END_TEST

/* ---- trim, over and over ----------------------------------------------------------- */

/* 2000 trims of a 32-kernel pipeline (32 distinct functions, from 8 loads of the test module):
 * every trim forgets the learnt argument layouts and the next launch learns them again, and
 * their memory is given back: metadata after 2000 trims is what it was after 20. Every
 * launch's result is checked. */
START_TEST(trims_keep_metadata_bounded)
{
    tu_setup();
    enum { LOADS = 8 };
    CUfunction fn[4 * LOADS];
    for (int m = 0; m < LOADS; m++) {
        struct tu_kernels k;
        tu_load_kernels(&k);
        fn[4 * m] = k.add_u32, fn[4 * m + 1] = k.addone;
        fn[4 * m + 2] = k.set_u32, fn[4 * m + 3] = k.add_u32;
    }
    CUdeviceptr d;
    TU_OK(tu.cuMemAlloc(&d, 4));
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    cupool_pipeline_t p;
    TU_OK(cupool_pipeline_create(&p));
    long trims = scaled(2000);
    size_t early = 0;
    for (long i = 0; i < trims; i++) {
        unsigned base = (unsigned)i, two = 2;
        TU_OK(cupool_pipeline_reset(p));
        for (int n = 0; n < 32; n++) {
            void *args_set[] = {&d, &base}, *args_add[] = {&d, &two}, *args_one[] = {&d};
            int kind = n % 4;
            TU_OK(cupool_pipeline_kernel(p, fn[n], 1, 1, 1, 1, 1, 1, 0,
                                         kind == 1 ? args_one : kind == 2 ? args_set : args_add,
                                         NULL));
        }
        TU_OK(cupool_pipeline_launch(p, s));
        TU_OK(tu.cuStreamSynchronize(s));
        unsigned v = 0;
        TU_OK(tu.cuMemcpyDtoH(&v, d, 4));
        /* the last set (node 30) writes base; node 31 adds 2 */
        ck_assert_uint_eq(v, base + 2);
        TU_OK(cupool_trim());
        if (i == 20 || (i == trims - 1 && !early))
            early = cupool_metadata_bytes();
    }
    size_t late = cupool_metadata_bytes();
    printf("trims: %ld trims of a 32-kernel pipeline, metadata %zu bytes after 20, %zu at the "
           "end\n",
           trims, early, late);
    ck_assert_msg(late <= early + 4096, "metadata grew from %zu to %zu", early, late);
    TU_OK(cupool_pipeline_destroy(p));
    TU_OK(cupool_stream_release(s));
}
END_TEST

/* ---- capture updates and launch attributes -------------------------------------------- */

static CUfunction cw_fn;
static CUdeviceptr cw_out;
static CUresult (*cw_launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **);

/* The captured work: cluster_width on 8 blocks of 32 threads, in clusters of *user blocks. */
static CUresult cluster_capture(CUstream s, void *user)
{
    CUlaunchAttribute a;
    memset(&a, 0, sizeof(a));
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = *(unsigned *)user;
    a.value.clusterDim.y = a.value.clusterDim.z = 1;
    CUlaunchConfig c;
    memset(&c, 0, sizeof(c));
    c.gridDimX = 8, c.gridDimY = c.gridDimZ = 1;
    c.blockDimX = 32, c.blockDimY = c.blockDimZ = 1;
    c.hStream = s;
    c.attrs = &a;
    c.numAttrs = 1;
    void *args[] = {&cw_out};
    return cw_launch_ex(&c, cw_fn, args, NULL);
}

/* CUPOOL_CAPTURE_UPDATE of a kernel whose thread-block cluster width changes between calls
 * (2, 2, 4, 4, 1, 8, 8, 2, 1, 1): every block sees the width asked for, every time. The
 * driver accepts an update with a changed cluster dimension but does not apply it to a
 * launched exec (seen on an H200), so cupool instantiates afresh exactly when the width
 * changes (counted as a refusal for changed attributes) and updates when it does not. Skipped,
 * saying why, below compute capability 9.0. */
START_TEST(capture_update_applies_cluster_dimension)
{
    tu_setup();
    if (!tu_clusters_or_skip("capture_update_applies_cluster_dimension"))
        return;
    TU_OK(tu_load_cluster_kernel(&cw_fn));
    TU_OK(cupool_driver_get_proc("cuLaunchKernelEx", 11060, (void **)&cw_launch_ex));
    TU_OK(tu.cuMemAlloc(&cw_out, 8 * 4));
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    static const unsigned widths[] = {2, 2, 4, 4, 1, 8, 8, 2, 1, 1};
    const int nw = (int)(sizeof(widths) / sizeof(widths[0]));
    cupool_graph_stats_t before = CUPOOL_GRAPH_STATS_INIT, after = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&before));
    int changes = 0;
    for (int i = 0; i < nw; i++) {
        unsigned w = widths[i];
        changes += i > 0 && widths[i] != widths[i - 1];
        TU_OK(tu.cuMemsetD32(cw_out, 0, 8));
        TU_OK(cupool_capture_launch(42, s, cluster_capture, &w, CUPOOL_CAPTURE_UPDATE));
        TU_OK(tu.cuStreamSynchronize(s));
        unsigned seen[8];
        TU_OK(tu.cuMemcpyDtoH(seen, cw_out, sizeof(seen)));
        for (int b = 0; b < 8; b++)
            ck_assert_msg(seen[b] == w, "launch %d asked clusters of %u; block %d saw %u", i, w,
                          b, seen[b]);
    }
    TU_OK(cupool_graph_stats_get(&after));
    printf("cluster capture: %d launches, %llu instantiations, %llu updates, %llu re-"
           "instantiated for a changed attribute\n",
           nw, (unsigned long long)(after.instantiations - before.instantiations),
           (unsigned long long)(after.updates - before.updates),
           (unsigned long long)(after.update_failures - before.update_failures));
    ck_assert_uint_eq(after.instantiations - before.instantiations, 1 + (unsigned)changes);
    ck_assert_uint_eq(after.update_failures - before.update_failures, (unsigned)changes);
    /* the driver accepts those updates: cupool's own refusal, counted as attributes changed */
    ck_assert_uint_eq(after.update_attributes_changed - before.update_attributes_changed,
                      (unsigned)changes);
    ck_assert_uint_eq(after.updates - before.updates, (unsigned)(nw - 1 - changes));
    TU_OK(cupool_stream_release(s));
}
END_TEST

/* A pool value forged with the other kind's tag (the stream tag on an event pool's index and
 * generation) names an event class: the stream calls refuse it, on their fast paths too (the
 * thread's magazine for that index holds events), and the event stays the caller's. */
START_TEST(forged_kind_pool_values_are_refused)
{
    tu_setup();
    for (int promised = 0; promised < 2; promised++) {
        cupool_stream_pool_t sp;
        cupool_event_pool_t ep;
        unsigned pf = promised ? CUPOOL_POOL_CONTEXT_OUTLIVES : 0;
        TU_OK(cupool_stream_pool_get(&sp, tu_ctx, CU_STREAM_NON_BLOCKING | pf, 0));
        TU_OK(cupool_event_pool_get(&ep, tu_ctx, CU_EVENT_DISABLE_TIMING | pf));
        uintptr_t stag = (uintptr_t)sp & 0xfu, etag = (uintptr_t)ep & 0xfu;
        ck_assert_uint_ne(stag, etag);
        cupool_stream_pool_t forged = (cupool_stream_pool_t)(((uintptr_t)ep & ~(uintptr_t)0xf) | stag);
        CUevent e[4];
        for (int i = 0; i < 4; i++) /* the thread's magazine for the index holds events */
            TU_OK(cupool_event_pool_acquire(ep, &e[i]));
        for (int i = 0; i < 4; i++)
            TU_OK(cupool_event_pool_release(ep, e[i]));
        CUstream s = NULL;
        ck_assert_int_ne(cupool_stream_pool_acquire(forged, &s), CUDA_SUCCESS);
        ck_assert_ptr_null(s);
        CUevent held;
        TU_OK(cupool_event_pool_acquire(ep, &held));
        ck_assert_int_ne(cupool_stream_pool_release(forged, (CUstream)held, 0), CUDA_SUCCESS);
        ck_assert_int_ne(cupool_stream_pool_release(forged, (CUstream)held,
                                                    CUPOOL_RELEASE_NOT_CAPTURING),
                         CUDA_SUCCESS);
        TU_OK(cupool_event_pool_release(ep, held)); /* still the caller's */
        TU_EQ(cupool_event_pool_release(ep, held), CUDA_ERROR_INVALID_HANDLE);
    }
}
END_TEST

/* An event pool's own value given to the stream calls, with the event the thread acquired
 * last: the value names the event's class exactly (index and gen), yet the stream release
 * refuses it on its fast path too, so the event is never pooled as a stream released
 * unvouched (which the next acquire would vet with cuStreamIsCapturing). */
START_TEST(other_kinds_pool_value_is_refused_on_release)
{
    tu_setup();
    for (int promised = 0; promised < 2; promised++) {
        cupool_event_pool_t ep;
        TU_OK(cupool_event_pool_get(&ep, tu_ctx,
                                    CU_EVENT_DISABLE_TIMING |
                                        (promised ? CUPOOL_POOL_CONTEXT_OUTLIVES : 0)));
        CUevent e, again;
        TU_OK(cupool_event_pool_acquire(ep, &e));
        TU_EQ(cupool_stream_pool_release((cupool_stream_pool_t)ep, (CUstream)e, 0),
              CUDA_ERROR_INVALID_VALUE);
        TU_OK(cupool_event_pool_release(ep, e)); /* still the caller's */
        unsigned long vets = tu_fake.present ? tu_fake.calls("cuStreamIsCapturing") : 0;
        TU_OK(cupool_event_pool_acquire(ep, &again));
        ck_assert_ptr_eq(again, e);
        if (tu_fake.present)
            ck_assert_uint_eq(tu_fake.calls("cuStreamIsCapturing"), vets);
        TU_OK(cupool_event_pool_release(ep, again));
    }
}
END_TEST

/* cupool_stream_pool_get racing the end of its context: between the lookup that found the
 * class alive and the read of its generation, a reclamation retires the class and moves its
 * generation on, to the value the class that reuses the index will have. The pool value must
 * not name that class: pool_get says the context is gone. (Hooks hold the interleaving: the
 * getter waits, inside its read section, until the reclaimer has moved the generation on; the
 * reclaimer's grace period then waits for the getter. The value once named the next class.) */
static _Atomic int pg_in_get, pg_gen_moved;
static void pg_get_hook(void)
{
    atomic_store(&pg_in_get, 1);
    for (long spins = 0; !atomic_load(&pg_gen_moved) && spins < 4000000000L; spins++)
        sched_yield();
}
static void pg_gen_hook(void)
{
    atomic_store(&pg_gen_moved, 1);
}
static CUcontext pg_ctx;
static CUresult pg_result;
static cupool_stream_pool_t pg_pool;
static void *pg_getter(void *arg)
{
    (void)arg;
    pg_result = cupool_stream_pool_get(&pg_pool, pg_ctx, CU_STREAM_NON_BLOCKING, 0);
    return NULL;
}

START_TEST(pool_get_racing_a_reclamation_never_names_the_next_class)
{
    setenv("CUPOOL_BACKGROUND", "0", 1); /* the reclamation runs in this test's trim */
    tu_setup();
    TU_OK(tu.cuCtxCreate(&pg_ctx, 0, tu_dev));
    CUcontext popped;
    TU_OK(tu.cuCtxPopCurrent(&popped));
    cupool_stream_pool_t first;
    TU_OK(cupool_stream_pool_get(&first, pg_ctx, CU_STREAM_NON_BLOCKING, 0)); /* the class */
    cupool__pool_get_hook = pg_get_hook;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, pg_getter, NULL), 0);
    while (!atomic_load(&pg_in_get))
        sched_yield();
    cupool__pool_get_hook = NULL;
    cupool__reclaim_gen_hook = pg_gen_hook;
    TU_OK(cupool_context_release(pg_ctx));
    TU_OK(tu.cuCtxDestroy(pg_ctx));
    TU_OK(cupool_trim()); /* reclaims the class: the hook, then the grace period */
    pthread_join(t, NULL);
    cupool__reclaim_gen_hook = NULL;
    ck_assert(atomic_load(&pg_gen_moved));
    /* a new context's class of the same key takes the freed index */
    CUcontext next;
    TU_OK(tu.cuCtxCreate(&next, 0, tu_dev));
    TU_OK(tu.cuCtxPopCurrent(&popped));
    cupool_stream_pool_t np;
    TU_OK(cupool_stream_pool_get(&np, next, CU_STREAM_NON_BLOCKING, 0));
    if (pg_result == CUDA_SUCCESS)
        ck_assert_ptr_ne(pg_pool, np); /* failed before: the values were equal */
    TU_EQ(pg_result, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUstream s;
    TU_EQ(cupool_stream_pool_acquire(first, &s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    TU_OK(cupool_stream_pool_acquire(np, &s));
    TU_OK(cupool_stream_pool_release(np, s, 0));
    TU_OK(cupool_context_release(next));
    TU_OK(tu.cuCtxDestroy(next));
}
END_TEST

/* While a held-up reclamation backs off, the maintenance thread takes its next tries: the hit
 * paths' one relaxed load finds the flag clear, so their calls read no clock on the way out
 * (they did, each call, for up to the backoff's second: 20 to 40 ns a pair on the H200 after
 * a trim). Once the section ends, the thread's retry reclaims what waited. */
START_TEST(backed_off_reclamation_leaves_the_calls_alone)
{
    tu_setup();
    pthread_t t = section_hold();
    enum { N = 4000 };
    static CUevent ev[N];
    uint64_t before = atomic_load(&cupool__gp_timeouts);
    for (int i = 0; i < N; i++) /* the registry grows: old tables wait for the held section */
        TU_OK(cupool_event_acquire(&ev[i], CU_EVENT_DISABLE_TIMING));
    ck_assert_uint_gt(atomic_load(&cupool__gp_timeouts), before); /* a try timed out */
    ck_assert(!atomic_load(&cupool__hot.reclaim_due)); /* set, each call, before */
    size_t held = cupool_metadata_bytes();
    atomic_store(&section_release, 1);
    pthread_join(t, NULL);
    bool reclaimed = false;
    for (int looks = 0; looks < 5000 && !reclaimed; looks++) { /* the backoff is 1 s at most */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        reclaimed = cupool_metadata_bytes() < held;
    }
    ck_assert_msg(reclaimed, "the maintenance thread's retry reclaimed nothing");
    for (int i = 0; i < N; i++)
        TU_OK(cupool_event_release(ev[i]));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_add_test(tc, registry_reclaims_without_membarrier);
    tcase_add_test(tc, fork_storm_children_refuse_without_hanging);
    tcase_add_test(tc, passthrough_release_after_reset_is_harmless);
    tcase_add_test(tc, passing_errors_never_retire_a_live_class);
    tcase_add_test(tc, explicit_pools_refuse_right_after_reset);
    tcase_add_test(tc, class_creation_races_lose_no_index);
    tcase_add_test(tc, context_churn_reclaims_classes);
    tcase_add_test(tc, trims_keep_metadata_bounded);
    tcase_add_test(tc, concurrent_reclamation_keeps_classes_apart);
    tcase_add_test(tc, reclaims_when_membarrier_is_denied_later);
    tcase_add_test(tc, capture_update_applies_cluster_dimension);
    tcase_add_test(tc, destroyed_contexts_release_their_classes);
    tcase_add_test(tc, readers_without_a_cache_never_hold_up_reclamation);
    tcase_add_test(tc, blocked_statistics_writer_holds_up_nothing);
    tcase_add_test(tc, held_up_grace_periods_back_off);
    tcase_add_test(tc, backed_off_reclamation_leaves_the_calls_alone);
    tcase_add_test(tc, full_table_reclaims_from_a_thread_without_cache);
    tcase_add_test(tc, forked_child_never_reclaims);
    tcase_add_test(tc, forged_kind_pool_values_are_refused);
    tcase_add_test(tc, other_kinds_pool_value_is_refused_on_release);
    tcase_add_test(tc, pool_get_racing_a_reclamation_never_names_the_next_class);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
