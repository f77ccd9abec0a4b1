/* SPDX-License-Identifier: MIT */
/*
 * cupool inside a hostile host: a sandbox that denies membarrier(2), fork storms, context
 * resets met first by an explicit pool, pass-through mode across a reset, creation races,
 * passing driver errors, endless trims and context churn. Each test is the regression test of
 * one guarantee in docs/reliability.md. Runs on the simulated driver and on the real one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

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

int main(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("hostile");
    tcase_add_test(tc, registry_reclaims_without_membarrier);
    tcase_set_timeout(tc, 600);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
