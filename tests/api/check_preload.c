/* SPDX-License-Identifier: MIT */
/*
 * libcupool_preload.so under an unmodified program (tests/api/preload_prog.c), which loads the
 * driver itself and resolves entry points through cuGetProcAddress or dlsym. Both drivers:
 * the simulated one also counts the streams the driver created.
 */
#define _GNU_SOURCE
#include "common/testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct outcome {
    int status;
    char out[1024];
    char err[16384];
};

static const char *builddir(void)
{
    const char *b = getenv("CUPOOLTEST_BUILDDIR");
    return b ? b : ".";
}

static void slurp(int fd, char *buf, size_t len)
{
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, len - 1);
    buf[n > 0 ? n : 0] = '\0';
}

/* A sanitizer runtime this test runs with must come first in LD_PRELOAD too. */
static void sanitizer_runtime(char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        char *p = strchr(line, '/');
        if (p && (strstr(p, "/libasan.so") || strstr(p, "/libtsan.so"))) {
            p[strcspn(p, "\n")] = '\0';
            snprintf(buf, len, "%s:", p);
            break;
        }
    }
    if (f)
        fclose(f);
}

/* Runs tests/api/PROGRAM MODE N, with the preload when `preload`, plus env settings. */
static struct outcome run_prog(const char *program, const char *mode, int n, int preload,
                               const char *env1)
{
    struct outcome o;
    char prog[4096], lib[4096], count[16], pre[4096];
    snprintf(prog, sizeof prog, "%s/tests/api/%s", builddir(), program);
    snprintf(lib, sizeof lib, "%s/.libs/libcupool_preload.so", builddir());
    snprintf(count, sizeof count, "%d", n);
    sanitizer_runtime(pre, sizeof pre);
    FILE *out = tmpfile(), *err = tmpfile();
    ck_assert(out && err);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fileno(out), 1);
        dup2(fileno(err), 2);
        if (preload) {
            char v[8192];
            snprintf(v, sizeof v, "%s%s", pre, lib);
            setenv("LD_PRELOAD", v, 1);
        }
        setenv("CUPOOL_STATS", "stderr", 1);
        char next[4096];
        snprintf(next, sizeof next, "%s/tests/api/.libs/preload_next.so", builddir());
        setenv("PRELOAD_PROG_NEXT_LIB", next, 1);
        if (env1 && env1[0] == '!') { /* "!NAME": NAME unset, its value kept for the program */
            const char *v = getenv(env1 + 1);
            if (v)
                setenv("PRELOAD_PROG_DRIVER", v, 1);
            unsetenv(env1 + 1);
        } else if (env1) {
            putenv((char *)env1);
        }
        execl(prog, prog, mode, count, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", prog, strerror(errno));
        _exit(127);
    }
    int st = 0;
    ck_assert(waitpid(pid, &st, 0) == pid);
    o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp(fileno(out), o.out, sizeof o.out);
    slurp(fileno(err), o.err, sizeof o.err);
    fclose(out);
    fclose(err);
    if (o.status == 77 && !tu_fake.present)
        exit(77); /* no GPU answers */
    ck_assert_msg(o.status == 0, "%s %s exited %d: %s", program, mode, o.status, o.err);
    return o;
}

static struct outcome run(const char *mode, int n, int preload, const char *env1)
{
    return run_prog("preload_prog", mode, n, preload, env1);
}

static long driver_creates(const struct outcome *o)
{
    const char *p = strstr(o->out, "driver-creates ");
    ck_assert_msg(p != NULL, "no result line: %s", o->out);
    return atol(p + strlen("driver-creates "));
}

/* acquires and creates of the non-blocking stream class in the CUPOOL_STATS report, or
 * -1 when there is none (cupool was not in the process). */
static void stream_stats(const struct outcome *o, long *acquires, long *creates)
{
    *acquires = *creates = -1;
    for (const char *l = o->err; (l = strstr(l, "\nstream ")) != NULL; l++) {
        char kind[16], alive[8];
        unsigned long long ctx, acq, hits, cre;
        unsigned flags;
        int prio;
        if (sscanf(l + 1, "%15s %llu %x %d %7s %llu %llu %llu", kind, &ctx, &flags, &prio, alive,
                   &acq, &hits, &cre) == 8 &&
            flags == CU_STREAM_NON_BLOCKING) {
            *acquires = (long)acq;
            *creates = (long)cre;
        }
    }
}

static void setup(void)
{
    tu_setup(); /* resolves tu_fake: is the simulated driver in use? */
}

static void pooled(const char *mode)
{
    struct outcome o = run(mode, 2000, 1, NULL);
    long acquires, creates;
    stream_stats(&o, &acquires, &creates);
    ck_assert_msg(acquires == 2010, "acquires %ld in: %s", acquires, o.err);
    ck_assert_int_eq(creates, 1); /* one driver stream served 2010 creates */
    if (tu_fake.present)
        ck_assert_int_eq(driver_creates(&o), 1);
}

START_TEST(preload_pools_cuGetProcAddress_lookups)
{
    pooled("gpa");
}
END_TEST

START_TEST(preload_pools_dlsym_lookups)
{
    pooled("dlsym");
}
END_TEST

/* CUPOOL_DRIVER_PATH unset, the program opens its driver from a path of its own: the
 * preload's cupool loads that same driver. */
/* A program that resets its context (through the driver's name: cuGetProcAddress or dlsym)
 * while streams it destroyed wait over a small idle cap for cupool's maintenance thread: the
 * preload's reset lets go of the context first, so no destroy of the old context's streams
 * reaches the driver after it (the simulated driver aborts on one, the H200 crashes). */
START_TEST(preload_resets_safely_while_the_maintenance_thread_works)
{
    struct outcome o = run("gpa-reset", tu_fake.present ? 100 : 5, 1, NULL);
    ck_assert_msg(strstr(o.out, "resets "), "%s", o.out);
    o = run("dlsym-reset", tu_fake.present ? 100 : 5, 1, NULL);
    ck_assert_msg(strstr(o.out, "resets "), "%s", o.out);
}
END_TEST

START_TEST(preload_follows_the_programs_driver)
{
    struct outcome o = run("gpa", 500, 1, "!CUPOOL_DRIVER_PATH");
    long acquires, creates;
    stream_stats(&o, &acquires, &creates);
    ck_assert_msg(acquires == 510, "acquires %ld in: %s", acquires, o.err);
    ck_assert_int_eq(creates, 1);
}
END_TEST

/* A library's constructor that makes and destroys streams runs before the preload's own
 * constructor: the preload's cupool initialises from inside it and still pools (it used to
 * call its own exports as the driver's, recursing until the stack ran out). */
START_TEST(preload_serves_a_library_constructor_that_runs_first)
{
    struct outcome o = run_prog("preload_ctor_prog", "", 0, 1, NULL);
    ck_assert_msg(strstr(o.out, "ctor 0 reused 1") != NULL, "output: %s; stderr: %s", o.out,
                  o.err);
}
END_TEST

START_TEST(without_preload_nothing_changes)
{
    struct outcome o = run("gpa", 200, 0, NULL);
    long acquires, creates;
    stream_stats(&o, &acquires, &creates);
    ck_assert_int_eq(acquires, -1); /* no cupool in the process */
    if (tu_fake.present)
        ck_assert_int_eq(driver_creates(&o), 210);
}
END_TEST

START_TEST(disabled_preload_passes_everything_through)
{
    struct outcome o = run("gpa", 200, 1, "CUPOOL_DISABLE=1");
    long acquires, creates;
    stream_stats(&o, &acquires, &creates);
    ck_assert_int_eq(acquires, -1); /* cupool never called */
    if (tu_fake.present)
        ck_assert_int_eq(driver_creates(&o), 210);
    o = run("dlsym", 200, 1, "CUPOOL_DISABLE=1");
    if (tu_fake.present)
        ck_assert_int_eq(driver_creates(&o), 210);
}
END_TEST

#ifdef CUPOOL_TEST_HAVE_CUDART
/* Programs on the CUDA runtime, shared and static (real driver: the runtime needs NVIDIA's). */
static void runtime_program(const char *program)
{
    struct outcome o = run_prog(program, "", 0, 1, NULL);
    ck_assert_msg(strstr(o.out, "preload_rt: ok") != NULL, "%s: %s", o.out, o.err);
    long acquires, creates;
    stream_stats(&o, &acquires, &creates);
    ck_assert_msg(acquires >= 1000, "acquires %ld in: %s", acquires, o.err);
    ck_assert_int_le(creates, 2); /* 1000 loop streams from one or two driver streams */
}

START_TEST(shared_runtime_program)
{
    runtime_program("preload_rt_shared");
}
END_TEST

START_TEST(static_runtime_program)
{
    runtime_program("preload_rt_static");
}
END_TEST
#endif

int main(void)
{
    /* A sanitizer build instruments the preload too, and the sanitizer runtime's own start-up
     * calls dlsym, which the preload interposes: instrumented code would run before the
     * sanitizer is initialised. The preload is tested in the plain builds. */
    char san[4096];
    sanitizer_runtime(san, sizeof san);
    if (san[0]) {
        printf("check_preload: SKIP under a sanitizer (%s)\n", san);
        return 77;
    }
    Suite *s = suite_create("preload");
    TCase *tc = tcase_create("preload");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, preload_pools_cuGetProcAddress_lookups);
    tcase_add_test(tc, preload_pools_dlsym_lookups);
    tcase_add_test(tc, preload_follows_the_programs_driver);
    tcase_add_test(tc, preload_resets_safely_while_the_maintenance_thread_works);
    tcase_add_test(tc, preload_serves_a_library_constructor_that_runs_first);
    tcase_add_test(tc, without_preload_nothing_changes);
    tcase_add_test(tc, disabled_preload_passes_everything_through);
    suite_add_tcase(s, tc);
#ifdef CUPOOL_TEST_HAVE_CUDART
    if (tu_real()) {
        TCase *rt = tcase_create("runtime");
        tcase_add_checked_fixture(rt, setup, NULL);
        tcase_set_timeout(rt, 120);
        tcase_add_test(rt, shared_runtime_program);
        tcase_add_test(rt, static_runtime_program);
        suite_add_tcase(s, rt);
    }
#endif
    return tu_run(s);
}
