/* SPDX-License-Identifier: MIT */
/*
 * Process exit, unload and fork, each in a program of its own (tests/lifecycle/
 * lifecycle_child.c, dlclose_child.c): the exit status must be the program's own and stderr
 * must stay empty. On the simulated driver FAKECUDA_TEARDOWN_AT_EXIT=1 makes the driver tear
 * down from its exit handler and abort on any later call, so a driver call after teardown
 * fails the test.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/testutil.h"

struct outcome {
    int status; /* exit status, or 128 + signal */
    char err[4096];
    char out[4096];
};

static const char *builddir(void)
{
    const char *b = getenv("CUPOOLTEST_BUILDDIR");
    return b ? b : ".";
}

static void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs argv with extra "NAME=value" settings (NULL-terminated list, may be NULL). */
static struct outcome spawn(char *const argv[], const char *const *env)
{
    struct outcome o;
    char errpath[] = "/tmp/cupool-lifecycle-err-XXXXXX";
    char outpath[] = "/tmp/cupool-lifecycle-out-XXXXXX";
    int efd = mkstemp(errpath), ofd = mkstemp(outpath);
    ck_assert(efd >= 0 && ofd >= 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(efd, 2);
        dup2(ofd, 1);
        setenv("FAKECUDA_TEARDOWN_AT_EXIT", "1", 1);
        for (const char *const *e = env; e && *e; e++)
            putenv((char *)*e);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st = 0;
    ck_assert(waitpid(pid, &st, 0) == pid);
    o.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp(errpath, o.err, sizeof(o.err));
    slurp(outpath, o.out, sizeof(o.out));
    close(efd);
    close(ofd);
    unlink(errpath);
    unlink(outpath);
    return o;
}

static struct outcome run_child(const char *how, const char *const *env)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/lifecycle/lifecycle_child%s", builddir(),
             strcmp(how, "cxx-static") ? "" : "_cxx");
    char *argv[] = {path, (char *)how, NULL};
    return spawn(argv, env);
}

#define EXPECT_QUIET_EXIT(o, code, how)                                                     \
    do {                                                                                    \
        ck_assert_msg((o).status == (code), "%s: exit status %d, expected %d; stderr: %s",  \
                      how, (o).status, (code), (o).err);                                    \
        ck_assert_msg((o).err[0] == '\0', "%s: printed on stderr: %s", how, (o).err);       \
    } while (0)

START_TEST(return_from_main)
{
    struct outcome o = run_child("return", NULL);
    EXPECT_QUIET_EXIT(o, 0, "return from main");
}
END_TEST

START_TEST(exit_from_worker_while_others_acquire)
{
    /* The race it guards against is narrow: run it many times. */
    for (int i = 0; i < 25; i++) {
        struct outcome o = run_child("exit-worker", NULL);
        EXPECT_QUIET_EXIT(o, 3, "exit() from a worker");
    }
}
END_TEST

START_TEST(exit_while_maintenance_destroys)
{
    /* The driver tears itself down at exit and aborts on any later call: the maintenance
     * thread's destroys must stop before its teardown, though nobody joins the thread. */
    for (int i = 0; i < 10; i++) {
        struct outcome o = run_child("maint-exit", NULL);
        EXPECT_QUIET_EXIT(o, 5, "exit() while the maintenance thread destroys");
    }
}
END_TEST

START_TEST(quick_exit_)
{
    struct outcome o = run_child("quick-exit", NULL);
    EXPECT_QUIET_EXIT(o, 4, "quick_exit");
}
END_TEST

START_TEST(release_after_driver_teardown)
{
    struct outcome o = run_child("late-release", NULL);
    EXPECT_QUIET_EXIT(o, 0, "releases from atexit and destructors after teardown");
}
END_TEST

START_TEST(dropin_calls_from_an_exit_handler)
{
    struct outcome o = run_child("dropin-at-exit", NULL);
    if (o.status == 77 && tu_real())
        return; /* no GPU answers */
    EXPECT_QUIET_EXIT(o, 0, "drop-in create and destroy from an exit handler");
}
END_TEST

START_TEST(release_from_cxx_static_destructor)
{
    struct outcome o = run_child("cxx-static", NULL);
    EXPECT_QUIET_EXIT(o, 0, "release from a C++ static destructor");
}
END_TEST

/* Sums the idle, destroys and creates columns of a CUPOOL_STATS file. */
static void stats_file_totals(const char *path, long *idle, long *destroys, long *creates)
{
    char buf[8192];
    slurp(path, buf, sizeof(buf));
    *idle = *destroys = *creates = 0;
    int classes = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char kind[16], alive[8];
        unsigned long long ctx;
        unsigned flags;
        int prio;
        long acq, hits, cr, de, dropped, idl, inuse, high;
        if (sscanf(line, "%15s %llu %x %d %7s %ld %ld %ld %ld %ld %ld %ld %ld", kind, &ctx,
                   &flags, &prio, alive, &acq, &hits, &cr, &de, &dropped, &idl, &inuse,
                   &high) == 13) {
            *idle += idl;
            *destroys += de;
            *creates += cr;
            classes++;
        }
    }
    ck_assert_msg(classes > 0, "no class lines in the statistics file: %s", buf);
}

START_TEST(destroy_on_exit_opt_in)
{
    char path[] = "/tmp/cupool-lifecycle-stats-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    char stats[64 + sizeof(path)];
    snprintf(stats, sizeof(stats), "CUPOOL_STATS=%s", path);
    long idle, destroys, creates;

    /* By default, idle handles are left to the process's end. */
    unlink(path);
    const char *leave[] = {stats, NULL};
    struct outcome o = run_child("idle-at-exit", leave);
    EXPECT_QUIET_EXIT(o, 0, "idle handles at exit");
    stats_file_totals(path, &idle, &destroys, &creates);
    ck_assert_msg(idle > 0 && destroys == 0, "default exit: idle %ld, destroys %ld", idle,
                  destroys);

    /* CUPOOL_DESTROY_ON_EXIT=1: destroyed before the driver's teardown. */
    unlink(path);
    const char *destroy[] = {stats, "CUPOOL_DESTROY_ON_EXIT=1", NULL};
    o = run_child("idle-at-exit", destroy);
    EXPECT_QUIET_EXIT(o, 0, "CUPOOL_DESTROY_ON_EXIT=1");
    stats_file_totals(path, &idle, &destroys, &creates);
    ck_assert_msg(idle == 0 && destroys == creates,
                  "CUPOOL_DESTROY_ON_EXIT=1: idle %ld, destroys %ld, creates %ld", idle,
                  destroys, creates);
    unlink(path);
}
END_TEST

START_TEST(fork_child_refuses_parent_unaffected_exec_works)
{
    struct outcome o = run_child("fork", NULL);
    EXPECT_QUIET_EXIT(o, 0, "fork");
}
END_TEST

START_TEST(dlclose_destroys_idle_handles_and_frees_memory)
{
    char prog[4096], lib[4096];
    snprintf(prog, sizeof(prog), "%s/tests/lifecycle/dlclose_child", builddir());
    snprintf(lib, sizeof(lib), "%s/.libs/libcupool.so", builddir());
    char *argv[] = {prog, lib, (char *)"60", NULL};
    /* With room in the static TLS block, libcupool.so opens jemalloc even when loaded after
     * startup: its arena is created and destroyed at every cycle (docs/design.md, Metadata). */
    const char *env[] = {"GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096", NULL};
    struct outcome o = spawn(argv, env);
    fprintf(stdout, "%s", o.out);
    EXPECT_QUIET_EXIT(o, 0, "dlopen/use/dlclose cycles");
}
END_TEST

/* The default build (jemalloc opened at run time, never linked) loads with dlopen() after
 * startup, with no GLIBC_TUNABLES: jemalloc, which needs more static TLS than is left, is not
 * loaded there, and the metadata comes from libc. */
START_TEST(late_dlopen_loads_default_build)
{
    char prog[4096], lib[4096];
    snprintf(prog, sizeof(prog), "%s/tests/lifecycle/dlclose_child", builddir());
    snprintf(lib, sizeof(lib), "%s/.libs/libcupool.so", builddir());
    char *argv[] = {prog, lib, (char *)"3", NULL};
    struct outcome o = spawn(argv, NULL);
    fprintf(stdout, "%s", o.out);
    EXPECT_QUIET_EXIT(o, 0, "dlopen after startup");
}
END_TEST

/* Python's ctypes loads the default build after the interpreter started, and the library
 * works through it: a stream from the runtime wrapper (which makes device 0's primary
 * context current), released; the statistics name the allocator in use. */
static const char ctypes_script[] =
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "assert lib.cupool_init() == 0, 'cupool_init failed'\n"
    "s = ctypes.c_void_p()\n"
    "r = lib.cupool_cudaStreamCreate(ctypes.byref(s))\n"
    "assert r == 0 and s.value, 'cupool_cudaStreamCreate returned %d' % r\n"
    "lib.cupool_cudaStreamDestroy.argtypes = [ctypes.c_void_p]\n"
    "assert lib.cupool_cudaStreamDestroy(s) == 0\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.fdopen.restype = ctypes.c_void_p\n"
    "lib.cupool_stats_print.argtypes = [ctypes.c_void_p]\n"
    "assert lib.cupool_stats_print(libc.fdopen(1, b'w')) == 0\n"
    "print('ctypes: ok')\n";

START_TEST(python_ctypes_loads_default_build)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* a sanitizer's runtime must come first in the process: python3 cannot load the
     * instrumented library (the C host of late_dlopen_loads_default_build still does) */
    printf("python_ctypes_loads_default_build: sanitizer build (not run)\n");
    return;
#endif
    char lib[4096], script[] = "/tmp/cupool-ctypes-XXXXXX";
    snprintf(lib, sizeof(lib), "%s/.libs/libcupool.so", builddir());
    int fd = mkstemp(script);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, ctypes_script, sizeof(ctypes_script) - 1),
                     (ssize_t)(sizeof(ctypes_script) - 1));
    close(fd);
    /* python3 from PATH */
    static char py[4096];
    const char *path = getenv("PATH");
    py[0] = '\0';
    while (path && *path && !py[0]) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        snprintf(py, sizeof(py), "%.*s/python3", (int)n, path);
        if (n == 0 || access(py, X_OK) != 0)
            py[0] = '\0';
        path = end ? end + 1 : NULL;
    }
    if (!py[0]) {
        unlink(script);
        printf("python_ctypes_loads_default_build: no python3 (not run)\n");
        return;
    }
    char *argv[] = {py, script, lib, NULL};
    struct outcome o = spawn(argv, NULL);
    unlink(script);
    fprintf(stdout, "%s", o.out);
    ck_assert_msg(o.status == 0, "python3 ctypes: status %d: %s", o.status, o.err);
    ck_assert_msg(strstr(o.out, "ctypes: ok"), "%s", o.out);
    /* the statistics say which allocator serves the metadata */
    ck_assert_msg(strstr(o.out, "from libc") || strstr(o.out, "from jemalloc arena"), "%s",
                  o.out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lifecycle");
    TCase *tc = tcase_create("exit");
    tcase_add_test(tc, return_from_main);
    tcase_add_test(tc, exit_from_worker_while_others_acquire);
    tcase_add_test(tc, quick_exit_);
    tcase_add_test(tc, exit_while_maintenance_destroys);
    tcase_add_test(tc, release_after_driver_teardown);
    tcase_add_test(tc, dropin_calls_from_an_exit_handler);
#ifdef CUPOOL_TEST_HAVE_CXX
    tcase_add_test(tc, release_from_cxx_static_destructor);
#else
    (void)release_from_cxx_static_destructor;
#endif
    tcase_add_test(tc, destroy_on_exit_opt_in);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("fork_unload");
    tcase_add_test(tf, fork_child_refuses_parent_unaffected_exec_works);
    tcase_add_test(tf, dlclose_destroys_idle_handles_and_frees_memory);
    tcase_add_test(tf, late_dlopen_loads_default_build);
    tcase_add_test(tf, python_ctypes_loads_default_build);
    tcase_set_timeout(tf, 300);
    suite_add_tcase(s, tf);
    return tu_run(s);
}
