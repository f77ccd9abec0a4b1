/* SPDX-License-Identifier: MIT */
/*
 * Reliability in a living process: thread churn, two devices, sticky context errors, and
 * privileged (setuid) processes. Runs on the simulated driver and on the real one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/testutil.h"

/* ---- thread churn ---------------------------------------------------------------------- */

#define CHURN_THREADS 10000
#define CHURN_CONCURRENT 16
#define CHURN_MAGAZINE 8
#define CHURN_IDLE_MAX 32

static cupool_event_pool_t churn_events;
static _Atomic int churn_errors;

static void *churn_thread(void *arg)
{
    unsigned n = (unsigned)(uintptr_t)arg;
    if (tu.cuCtxSetCurrent(tu_ctx) != CUDA_SUCCESS) {
        churn_errors++;
        return NULL;
    }
    CUstream s[3];
    CUevent e[3];
    unsigned k = 1 + n % 3;
    for (unsigned i = 0; i < k; i++) {
        if (cupool_stream_acquire(&s[i], CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS)
            churn_errors++;
        if ((i & 1 ? cupool_event_pool_acquire(churn_events, &e[i])
                   : cupool_event_acquire(&e[i], CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
            churn_errors++;
    }
    for (unsigned i = 0; i < k; i++) {
        if (cupool_stream_release(s[i]) != CUDA_SUCCESS)
            churn_errors++;
        if (cupool_event_release(e[i]) != CUDA_SUCCESS)
            churn_errors++;
    }
    return NULL; /* the thread's magazines go back at its exit */
}

static void churn(unsigned from, unsigned to)
{
    for (unsigned base = from; base < to; base += CHURN_CONCURRENT) {
        pthread_t t[CHURN_CONCURRENT];
        for (unsigned i = 0; i < CHURN_CONCURRENT; i++)
            ck_assert_int_eq(pthread_create(&t[i], NULL, churn_thread, (void *)(uintptr_t)(base + i)), 0);
        for (unsigned i = 0; i < CHURN_CONCURRENT; i++)
            pthread_join(t[i], NULL);
    }
}

START_TEST(ten_thousand_threads_stay_within_caps)
{
    setenv("CUPOOL_MAGAZINE_SIZE", "8", 1);
    setenv("CUPOOL_STREAM_IDLE_MAX", "32", 1);
    setenv("CUPOOL_EVENT_IDLE_MAX", "32", 1);
    tu_setup();
    TU_OK(cupool_event_pool_get(&churn_events, NULL, CU_EVENT_DISABLE_TIMING));
    churn(0, 1000);
    size_t bytes_1000 = cupool_metadata_bytes();
    churn(1000, CHURN_THREADS);
    size_t bytes_all = cupool_metadata_bytes();
    ck_assert_int_eq(churn_errors, 0);
    /* Memory is bounded by the peak number of threads, not by how many came and went: a new
     * peak of overlapping threads may add a thread cache (5.5 KiB) and magazines, while
     * anything kept per thread that came and went would add megabytes here. */
    ck_assert_msg(bytes_all <= bytes_1000 + CHURN_CONCURRENT * 8192,
                  "metadata grew from %zu to %zu bytes over %d threads", bytes_1000, bytes_all,
                  CHURN_THREADS - 1000);
    cupool_class_stats_t st[8] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 8, &n));
    ck_assert_uint_eq(n, 2);
    for (size_t i = 0; i < n; i++) {
        /* Every thread has exited: nothing in use; idle within the depot cap plus the one
         * retired magazine kept for a returning demand, plus one magazine per thread that
         * can pass the cap check at the same moment. */
        uint64_t bound = CHURN_IDLE_MAX + CHURN_MAGAZINE * (1 + CHURN_CONCURRENT);
        ck_assert_uint_eq(st[i].in_use, 0);
        ck_assert_msg(st[i].idle <= bound, "class %zu: %llu idle, bound %llu", i,
                      (unsigned long long)st[i].idle, (unsigned long long)bound);
        /* Demand never exceeded 16 threads x 3 handles: creation stays near that. */
        ck_assert_msg(st[i].high_water <= bound + CHURN_CONCURRENT * 3,
                      "class %zu: high water %llu", i, (unsigned long long)st[i].high_water);
        ck_assert_uint_eq(st[i].acquires, st[i].releases);
    }
    tu_trim_leaves_nothing();
    printf("thread churn: %d threads, metadata %zu bytes after 1000, %zu after all\n",
           CHURN_THREADS, bytes_1000, bytes_all);
}
END_TEST

/* ---- two devices ----------------------------------------------------------------------- */

START_TEST(handles_never_cross_devices)
{
    setenv("FAKECUDA_DEVICES", "2", 1); /* the simulated driver: two devices */
    tu_setup();
    CUcontext ctx[2];
    if (!tu_two_devices("handles_never_cross_devices", ctx))
        return;
    struct tu_kernels k[2];
    CUdeviceptr mem[2];
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        tu_load_kernels(&k[d]);
        TU_OK(tu.cuMemAlloc(&mem[d], 3 * 4)); /* one counter per stream of a round */
        TU_OK(tu.cuMemsetD32(mem[d], 0, 3));
    }
    cupool_stream_pool_t pool[2];
    for (int d = 0; d < 2; d++)
        TU_OK(cupool_stream_pool_get(&pool[d], ctx[d], CU_STREAM_NON_BLOCKING, 0));
    ck_assert_ptr_ne(pool[0], pool[1]);
    /* Acquire on each device, then release every handle while the *other* device is
     * current, many times over: a handle must come back only on its own device. */
    for (int round = 0; round < 20; round++) {
        CUstream s[2][3];
        CUevent e[2][3];
        for (int d = 0; d < 2; d++) {
            TU_OK(tu.cuCtxSetCurrent(ctx[d]));
            for (int i = 0; i < 3; i++) {
                if (i == 2)
                    TU_OK(cupool_stream_pool_acquire(pool[d], &s[d][i]));
                else
                    TU_OK(cupool_stream_acquire(&s[d][i], CU_STREAM_NON_BLOCKING, 0));
                TU_OK(cupool_event_acquire(&e[d][i], CU_EVENT_DISABLE_TIMING));
                CUcontext owner = NULL;
                TU_OK(tu.cuStreamGetCtx(s[d][i], &owner));
                ck_assert_msg(owner == ctx[d], "round %d: device %d got a stream of %p", round,
                              d, (void *)owner);
                /* work on it: a kernel with this device's memory, an event of this device */
                CUdeviceptr counter = mem[d] + 4 * (CUdeviceptr)i;
                tu_launch1(k[d].addone, s[d][i], (void *[]){&counter});
                TU_OK(tu.cuEventRecord(e[d][i], s[d][i]));
            }
        }
        for (int d = 0; d < 2; d++) {
            TU_OK(tu.cuCtxSetCurrent(ctx[1 - d])); /* the other device is current */
            for (int i = 0; i < 3; i++) {
                TU_OK(tu.cuEventSynchronize(e[d][i]));
                if (i == 2) {
                    /* the other device's pool refuses it; its own takes it */
                    TU_EQ(cupool_stream_pool_release(pool[1 - d], s[d][i], 0),
                          CUDA_ERROR_INVALID_HANDLE);
                    TU_OK(cupool_stream_pool_release(pool[d], s[d][i], 0));
                } else {
                    TU_OK(cupool_stream_release(s[d][i]));
                }
                TU_OK(cupool_event_release(e[d][i]));
            }
        }
    }
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        TU_OK(tu.cuCtxSynchronize());
        unsigned v[3] = {0, 0, 0};
        TU_OK(tu.cuMemcpyDtoH(v, mem[d], sizeof(v)));
        for (int i = 0; i < 3; i++)
            ck_assert_uint_eq(v[i], 20);
    }
    /* Classes are per context: one stream class (the explicit pool is the current-context
     * API's class of the same flags) and one event class per device. */
    cupool_class_stats_t st[8] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 8, &n));
    ck_assert_uint_eq(n, 4);
}
END_TEST

/* A cross-device pipeline's events: each round, device 0's stream adds to its counter and
 * records an event acquired with device 0 current; device 1's stream waits for it, adds to
 * its own counter, and records an event acquired with device 1 current, which device 0's
 * stream waits for before the next round. Each event is released with the *other* device
 * current, and the next round acquires it again with its own device current and records it
 * on that device's stream: it must come back on its own device only (a record on another
 * context's stream fails). Values are checked one by one at the end. */
START_TEST(events_released_on_the_other_device_serve_a_cross_device_pipeline)
{
    setenv("FAKECUDA_DEVICES", "2", 1); /* the simulated driver: two devices */
    tu_setup();
    CUcontext ctx[2];
    if (!tu_two_devices("events_released_on_the_other_device_serve_a_cross_device_pipeline",
                        ctx))
        return;
    enum { ROUNDS = 200 };
    struct tu_kernels k[2];
    CUdeviceptr mem[2];
    CUstream s[2];
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        tu_load_kernels(&k[d]);
        TU_OK(tu.cuMemAlloc(&mem[d], 4));
        TU_OK(tu.cuMemsetD32(mem[d], 0, 1));
        TU_OK(cupool_stream_acquire(&s[d], CU_STREAM_NON_BLOCKING, 0));
    }
    CUevent seen[2][ROUNDS];
    CUevent back = NULL; /* device 1's event of the last round, for device 0 to wait on */
    for (int r = 0; r < ROUNDS; r++) {
        CUevent e[2];
        for (int d = 0; d < 2; d++) {
            TU_OK(tu.cuCtxSetCurrent(ctx[d]));
            if (d == 0 && back != NULL) {
                TU_OK(tu.cuStreamWaitEvent(s[0], back, 0));
                TU_OK(tu.cuCtxSetCurrent(ctx[0]));
            }
            if (d == 1)
                TU_OK(tu.cuStreamWaitEvent(s[1], e[0], 0));
            tu_launch1(k[d].addone, s[d], (void *[]){&mem[d]});
            TU_OK(cupool_event_acquire(&e[d], CU_EVENT_DISABLE_TIMING));
            seen[d][r] = e[d];
            TU_OK(tu.cuEventRecord(e[d], s[d])); /* fails for another context's event */
        }
        /* released with the other device current; device 1's after device 0 waited on it */
        TU_OK(tu.cuCtxSetCurrent(ctx[1]));
        TU_OK(cupool_event_release(e[0]));
        if (back != NULL) {
            TU_OK(tu.cuCtxSetCurrent(ctx[0]));
            TU_OK(cupool_event_release(back));
        }
        back = e[1];
    }
    TU_OK(tu.cuCtxSetCurrent(ctx[0]));
    TU_OK(cupool_event_release(back));
    for (int d = 0; d < 2; d++) {
        TU_OK(tu.cuCtxSetCurrent(ctx[d]));
        TU_OK(tu.cuCtxSynchronize());
        unsigned v = 0;
        TU_OK(tu.cuMemcpyDtoH(&v, mem[d], sizeof v));
        ck_assert_uint_eq(v, ROUNDS);
        TU_OK(cupool_stream_release(s[d]));
    }
    /* the events were reused, each on its own device only */
    for (int r = 1; r < ROUNDS; r++)
        for (int d = 0; d < 2; d++)
            for (int q = 0; q < r; q++)
                ck_assert_ptr_ne(seen[d][r], seen[1 - d][q]);
    cupool_class_stats_t st[8] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 8, &n));
    uint64_t creates = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        if (st[i].kind == CUPOOL_KIND_EVENT) {
            ck_assert_uint_eq(st[i].acquires, ROUNDS);
            ck_assert_uint_eq(st[i].in_use, 0);
            creates += st[i].creates;
        }
    ck_assert_uint_le(creates, 2 * 3); /* at most three of each device's in flight at once */
}
END_TEST

/* ---- sticky errors --------------------------------------------------------------------- */

START_TEST(sticky_error_drops_streams_of_the_broken_context)
{
    tu_setup();
    CUcontext victim;
    unsigned long long victim_id;
    TU_OK(tu.cuCtxCreate(&victim, 0, tu_dev)); /* now current */
    TU_OK(tu.cuCtxGetId(victim, &victim_id));
    struct tu_kernels kv, kh;
    tu_load_kernels(&kv);
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, CU_STREAM_NON_BLOCKING, 0));
    tu_launch1(kv.trap, s, NULL);
    CUresult sync = tu.cuStreamSynchronize(s);
    ck_assert_msg(sync != CUDA_SUCCESS, "a trapping kernel synchronised without error");
    /* What the driver answers in a broken context (recorded for docs/reliability.md). */
    unsigned long long id_now = 0;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult g_null = tu.cuCtxGetId(NULL, &id_now), g_ctx = tu.cuCtxGetId(victim, &id_now);
    CUresult capt = tu.cuStreamIsCapturing(s, &cs), query = tu.cuStreamQuery(s);
    printf("broken context: synchronize %s; cuCtxGetId(NULL) %s, cuCtxGetId(ctx) %s, "
           "cuStreamIsCapturing %s, cuStreamQuery %s\n",
           cupool_result_name(sync), cupool_result_name(g_null), cupool_result_name(g_ctx),
           cupool_result_name(capt), cupool_result_name(query));
    fflush(stdout);
    TU_OK(cupool_stream_release(s)); /* release makes no driver call: accepted */
    /* The broken context's stream is never handed out again: acquires there fail with the
     * context's error (from the context lookup or from vetting the pooled stream). */
    for (int i = 0; i < 3; i++) {
        CUstream again = NULL;
        CUresult r = cupool_stream_acquire(&again, CU_STREAM_NON_BLOCKING, 0);
        ck_assert_msg(r != CUDA_SUCCESS, "acquire in a broken context handed out %p",
                      (void *)again);
        if (i == 0) {
            printf("broken context: acquire returned %s: %s\n", cupool_result_name(r),
                   cupool_error_string());
            fflush(stdout);
        }
    }
    /* trim finds the context broken for good (its id check or the destroy meets the sticky
     * error) and forgets the stream: nothing of the broken context stays pooled. */
    CUresult tr = cupool_trim();
    printf("broken context: trim returned %s: %s\n", cupool_result_name(tr),
           tr == CUDA_SUCCESS ? "" : cupool_error_string());
    fflush(stdout);
    cupool_class_stats_t st[8] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    TU_OK(cupool_stats_get(st, 8, &n));
    uint64_t gone = 0, idle = 0, in_use = 0;
    for (size_t i = 0; i < n; i++) {
        if (st[i].context_id != victim_id)
            continue;
        gone += st[i].dropped + st[i].destroys;
        idle += st[i].idle;
        in_use += st[i].in_use;
        printf("broken context: class alive %d, dropped %llu, destroys %llu\n",
               st[i].context_alive, (unsigned long long)st[i].dropped,
               (unsigned long long)st[i].destroys);
        fflush(stdout);
    }
    ck_assert_uint_ge(gone, 1); /* forgotten (or destroyed, where the driver still could) */
    ck_assert_uint_eq(idle, 0);
    ck_assert_uint_eq(in_use, 0);

    /* Other contexts: cupool adds no poisoning of its own. On an H200 the driver breaks the
     * whole process after a trap (cuda.h: "an inconsistent state"), so every context answers
     * with the error and cupool passes it on, handing nothing out; where the driver keeps
     * another context working, cupool's pools there work too. */
    CUcontext popped;
    TU_OK(tu.cuCtxPopCurrent(&popped));
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    CUresult other = tu.cuCtxSynchronize();
    printf("broken context: the primary context then synchronises with %s\n",
           cupool_result_name(other));
    fflush(stdout);
    if (other != CUDA_SUCCESS) {
        for (int i = 0; i < 3; i++) {
            CUstream h = NULL;
            CUresult r = cupool_stream_acquire(&h, CU_STREAM_NON_BLOCKING, 0);
            ck_assert_msg(r != CUDA_SUCCESS, "a broken process got stream %p", (void *)h);
        }
        return;
    }
    tu_load_kernels(&kh);
    CUdeviceptr p;
    TU_OK(tu.cuMemAlloc(&p, 4));
    TU_OK(tu.cuMemsetD32(p, 41, 1));
    for (int i = 0; i < 3; i++) {
        CUstream h;
        TU_OK(cupool_stream_acquire(&h, CU_STREAM_NON_BLOCKING, 0));
        tu_launch1(kh.addone, h, (void *[]){&p});
        TU_OK(tu.cuStreamSynchronize(h));
        TU_OK(cupool_stream_release(h));
    }
    unsigned v = 0;
    TU_OK(tu.cuMemcpyDtoH(&v, p, 4));
    ck_assert_uint_eq(v, 44);
}
END_TEST

/* ---- privileged processes -------------------------------------------------------------- */

static const char *builddir(void)
{
    const char *b = getenv("CUPOOLTEST_BUILDDIR");
    return b ? b : ".";
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    char buf[65536];
    ssize_t n;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(out, buf, (size_t)n) != n)
            n = -1;
    int ok = in >= 0 && out >= 0;
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return ok ? 0 : -1;
}

/* Runs prog with CUPOOL_DRIVER_PATH and CUPOOL_STATS set; output and stderr into out/err. */
static int run_reporting(const char *prog, const char *fake, const char *stats, char *out,
                         size_t outlen, char *err, size_t errlen)
{
    char opath[] = "/tmp/cupool-secure-out-XXXXXX", epath[] = "/tmp/cupool-secure-err-XXXXXX";
    int ofd = mkstemp(opath), efd = mkstemp(epath);
    ck_assert(ofd >= 0 && efd >= 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(ofd, 1);
        dup2(efd, 2);
        setenv("CUPOOL_DRIVER_PATH", fake, 1);
        setenv("CUPOOL_STATS", stats, 1);
        execl(prog, prog, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(opath, "r");
    size_t n = f ? fread(out, 1, outlen - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    f = fopen(epath, "r");
    n = f ? fread(err, 1, errlen - 1, f) : 0;
    err[n] = '\0';
    if (f)
        fclose(f);
    close(ofd);
    close(efd);
    unlink(opath);
    unlink(epath);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(setuid_process_ignores_path_variables)
{
    if (geteuid() != 0) {
        printf("setuid_process_ignores_path_variables: needs root to make a setuid program "
               "(not run)\n");
        return;
    }
    char fake[4096], src[4096];
    snprintf(fake, sizeof(fake), "%s/sim/.libs/fakecuda.so", builddir());
    snprintf(src, sizeof(src), "%s/tests/lifecycle/secure_child", builddir());
    /* Try /tmp, then the build tree: one of them may be mounted nosuid. */
    const char *bases[] = {"/tmp", builddir()};
    for (int b = 0; b < 2; b++) {
        char dir[4096], prog[4200], stats[4200], out[4096], err[4096];
        snprintf(dir, sizeof(dir), "%s/cupool-secure-XXXXXX", bases[b]);
        ck_assert_ptr_nonnull(mkdtemp(dir));
        ck_assert_int_eq(chmod(dir, 0777), 0); /* the setuid user may write the statistics */
        snprintf(prog, sizeof(prog), "%s/secure_child", dir);
        snprintf(stats, sizeof(stats), "%s/stats.txt", dir);
        ck_assert_int_eq(copy_file(src, prog), 0);

        /* Unprivileged: both variables are honoured (the test can tell): the simulated
         * driver loads, and the statistics file is written at exit. */
        int rc = run_reporting(prog, fake, stats, out, sizeof(out), err, sizeof(err));
        int plain_ok = rc == 0 && strstr(out, "secure=0") &&
                       strstr(out, "init=CUDA_SUCCESS") && strstr(out, fake);
        int plain_stats = access(stats, F_OK) == 0;
        char plain_out[4096];
        snprintf(plain_out, sizeof(plain_out), "%s", out);
        unlink(stats);

        /* setuid nobody, run by root: AT_SECURE, so both are ignored. */
        int prepared = chown(prog, 65534, 65534) == 0 && chmod(prog, 06755) == 0;
        rc = prepared ? run_reporting(prog, fake, stats, out, sizeof(out), err, sizeof(err)) : -1;
        int secure = strstr(out, "secure=1") != NULL;
        int wrote_stats = access(stats, F_OK) == 0;
        /* clean up before judging: never leave a setuid program behind */
        unlink(prog);
        unlink(stats);
        rmdir(dir);
        ck_assert_msg(plain_ok, "plain run: output: %s", plain_out);
        ck_assert_msg(plain_stats, "plain run wrote no statistics");
        ck_assert_msg(prepared, "could not make the copy setuid");
        if (secure) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
            /* (a sanitizer's runtime cannot finish its own work in a setuid process) */
            ck_assert_msg(rc == 0, "setuid run: status %d, stderr: %s", rc, err);
#endif
            ck_assert_msg(!strstr(out, fake), "setuid run used CUPOOL_DRIVER_PATH: %s", out);
            ck_assert_msg(!wrote_stats, "setuid run wrote CUPOOL_STATS' file");
            ck_assert_msg(strstr(err, "CUPOOL_DRIVER_PATH") && strstr(err, "CUPOOL_STATS"),
                          "setuid run did not say it ignored the variables: %s", err);
            return;
        }
    }
    ck_abort_msg("no directory allowed a setuid program to run (both mounted nosuid?)");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reliability");
    TCase *tc = tcase_create("reliability");
    tcase_add_test(tc, ten_thousand_threads_stay_within_caps);
    tcase_add_test(tc, handles_never_cross_devices);
    tcase_add_test(tc, events_released_on_the_other_device_serve_a_cross_device_pipeline);
    tcase_add_test(tc, sticky_error_drops_streams_of_the_broken_context);
    tcase_add_test(tc, setuid_process_ignores_path_variables);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
