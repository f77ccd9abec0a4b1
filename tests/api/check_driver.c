/* SPDX-License-Identifier: MIT */
/* Loading the driver, and what a program sees without one; configuration messages; the host's
 * malloc left alone. */
#define _GNU_SOURCE
#include "build_config.h"
#include "common/testutil.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Every entry point fails with `expected`, nothing crashes, and the message says why. */
static void assert_everything_fails(CUresult expected, const char *needle)
{
    CUstream s = NULL;
    CUevent e = NULL;
    cupool_stream_pool_t sp = NULL;
    cupool_event_pool_t ep = NULL;
    void *fn = NULL;
    TU_EQ(cupool_init(), expected);
    ck_assert_msg(strstr(cupool_error_string(), needle) != NULL, "message \"%s\" lacks \"%s\"",
                  cupool_error_string(), needle);
    TU_EQ(cupool_stream_acquire(&s, 0, 0), expected);
    TU_EQ(cupool_event_acquire(&e, 0), expected);
    TU_EQ(cupool_stream_pool_get(&sp, NULL, 0, 0), expected);
    TU_EQ(cupool_event_pool_get(&ep, NULL, 0), expected);
    TU_EQ(cupool_stream_release((CUstream)0x1000), expected);
    TU_EQ(cupool_event_release((CUevent)0x1000), expected);
    TU_EQ(cupool_trim(), expected);
    TU_EQ(cupool_driver_get_proc("cuInit", 2000, &fn), expected);
    ck_assert_ptr_null(s);
    ck_assert_ptr_null(e);
    size_t n = 1;
    TU_OK(cupool_stats_get(NULL, 0, &n));
    ck_assert_uint_eq(n, 0);
    FILE *devnull = fopen("/dev/null", "w");
    TU_OK(cupool_stats_print(devnull));
    fclose(devnull);
    ck_assert_msg(strstr(cupool_error_string(), needle) != NULL, "%s", cupool_error_string());
}

START_TEST(missing_driver)
{
    setenv("CUPOOL_DRIVER_PATH", "/nonexistent/libcuda.so.1", 1);
    assert_everything_fails(CUDA_ERROR_NOT_INITIALIZED, "dlopen(\"/nonexistent/libcuda.so.1\")");
}
END_TEST

START_TEST(not_a_driver)
{
    setenv("CUPOOL_DRIVER_PATH", "libm.so.6", 1);
    assert_everything_fails(CUDA_ERROR_NOT_SUPPORTED, "has no cuGetProcAddress_v2");
}
END_TEST

START_TEST(simulated_stub_library)
{
    setenv("FAKECUDA_STUB", "1", 1);
    assert_everything_fails(CUDA_ERROR_STUB_LIBRARY, "stub libcuda");
}
END_TEST

START_TEST(toolkit_stub_library)
{
    /* The CUDA toolkit's own stub, if the toolkit that configure found ships one. */
    if (access(CUPOOL_TEST_CUDA_STUB, R_OK) != 0) {
        ck_assert_msg(0, "no toolkit stub at %s", CUPOOL_TEST_CUDA_STUB);
        return;
    }
    setenv("CUPOOL_DRIVER_PATH", CUPOOL_TEST_CUDA_STUB, 1);
    assert_everything_fails(CUDA_ERROR_STUB_LIBRARY, "stub libcuda");
}
END_TEST

START_TEST(old_driver)
{
    setenv("FAKECUDA_DRIVER_VERSION", "11080", 1);
    assert_everything_fails(CUDA_ERROR_NOT_SUPPORTED, "needs a CUDA 12.0");
}
END_TEST

START_TEST(missing_entry_point)
{
    setenv("FAKECUDA_HIDE", "cuCtxGetId", 1);
    assert_everything_fails(CUDA_ERROR_NOT_SUPPORTED, "cuGetProcAddress_v2(\"cuCtxGetId\", 12000)");
}
END_TEST

START_TEST(no_device)
{
    setenv("FAKECUDA_DEVICES", "0", 1);
    assert_everything_fails(CUDA_ERROR_NO_DEVICE, "cuInit(0)");
}
END_TEST

START_TEST(driver_loads)
{
    TU_OK(cupool_init());
    TU_OK(cupool_init()); /* idempotent */
    void *fn = NULL;
    TU_OK(cupool_driver_get_proc("cuDeviceGetCount", 2000, &fn));
    ck_assert_ptr_nonnull(fn);
    int n = 0;
    TU_OK(((CUresult(*)(int *))fn)(&n));
    ck_assert_int_ge(n, 1);
    TU_EQ(cupool_driver_get_proc("cuNoSuchEntryPoint", 12000, &fn), CUDA_ERROR_NOT_FOUND);
    TU_EQ(cupool_driver_get_proc(NULL, 2000, &fn), CUDA_ERROR_INVALID_VALUE);
    TU_EQ(cupool_driver_get_proc("cuInit", 2000, NULL), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

START_TEST(names_and_version)
{
    ck_assert_str_eq(cupool_result_name(CUDA_SUCCESS), "CUDA_SUCCESS");
    ck_assert_str_eq(cupool_result_name(CUDA_ERROR_INVALID_HANDLE), "CUDA_ERROR_INVALID_HANDLE");
    ck_assert_str_eq(cupool_result_name(CUDA_ERROR_STUB_LIBRARY), "CUDA_ERROR_STUB_LIBRARY");
    ck_assert_str_eq(cupool_result_name((CUresult)123456), "CUDA_ERROR_UNKNOWN_CODE");
    ck_assert_str_eq(cupool_version(), PACKAGE_VERSION);
    ck_assert_str_eq(cupool_error_string(), "no error");
}
END_TEST

START_TEST(host_malloc_not_replaced)
{
    tu_setup();
    CUstream s;
    TU_OK(cupool_stream_acquire(&s, 0, 0));
    TU_OK(cupool_stream_release(s));
    Dl_info info;
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    ck_assert_ptr_nonnull(m);
    ck_assert_int_ne(dladdr(m, &info), 0);
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    /* the sanitizers bring their own malloc, by design; otherwise it must be libc's */
    ck_assert_msg(!strncmp(base, "libc.so", 7) || strstr(base, "san"), "malloc comes from %s",
                  info.dli_fname);
}
END_TEST

/* Runs `fn` in a child with stderr captured; returns what it printed. */
static char *child_stderr(void (*fn)(void))
{
    char path[] = "/tmp/cupool-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        fn();
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    static char buf[8192];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return buf;
}

static void init_only(void)
{
    cupool_init();
}

START_TEST(bad_environment_reported)
{
    setenv("CUPOOL_MAGAZINE_SIZE", "abc", 1);
    setenv("CUPOOL_MAGAZIN_SIZE", "8", 1);
    setenv("CUPOOL_STREAM_IDLE_MAX", "-1", 1);
    const char *err = child_stderr(init_only);
    ck_assert_msg(strstr(err, "cupool: CUPOOL_MAGAZINE_SIZE=\"abc\" is not valid: expected an "
                              "integer from 1 to 1024; using the default 16\n"),
                  "%s", err);
    ck_assert_msg(strstr(err, "unknown variable CUPOOL_MAGAZIN_SIZE ignored (did you mean "
                              "CUPOOL_MAGAZINE_SIZE?)"),
                  "%s", err);
    ck_assert_msg(strstr(err, "CUPOOL_STREAM_IDLE_MAX=\"-1\" is not valid"), "%s", err);
    /* one line per problem, nothing else */
    int lines = 0;
    for (const char *p = err; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(lines, 3);
    setenv("CUPOOL_LOG", "none", 1);
    err = child_stderr(init_only);
    ck_assert_str_eq(err, "");
}
END_TEST

static void acquire_and_exit(void)
{
    tu_setup();
    CUstream s;
    if (cupool_stream_acquire(&s, 0, 0) != CUDA_SUCCESS)
        _exit(3);
    exit(0); /* the atexit handler prints the statistics */
}

/* Runs acquire_and_exit in a child whose working directory is dir, stdout to out_path; true
 * if it exited with status 0 within 10 s (else it is killed). */
static bool child_exits_promptly(const char *dir, const char *out_path)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || chdir(dir) != 0)
            _exit(4);
        acquire_and_exit();
    }
    for (int i = 0; i < 1000; i++) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return WIFEXITED(status) && WEXITSTATUS(status) == 0;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return false;
}

/* Exit never waits on CUPOOL_STATS: a FIFO nobody reads fails the open at once, and
 * "stdout" means standard output, not a file of that name. */
START_TEST(stats_never_block_exit)
{
    char dir[] = "/tmp/cupool-stats-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char fifo[256], out[256], named[256];
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    snprintf(out, sizeof(out), "%s/out.txt", dir);
    snprintf(named, sizeof(named), "%s/stdout", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    setenv("CUPOOL_STATS", fifo, 1);
    setenv("CUPOOL_LOG", "none", 1);
    ck_assert_msg(child_exits_promptly(dir, out), "exit blocked on a FIFO without a reader");

    setenv("CUPOOL_STATS", "stdout", 1);
    ck_assert(child_exits_promptly(dir, out));
    ck_assert_msg(access(named, F_OK) != 0, "CUPOOL_STATS=stdout wrote a file named stdout");
    ck_assert_int_eq(tu_lines_with(out, "statistics"), 1);
    unlink(fifo);
    unlink(out);
    rmdir(dir);
}
END_TEST

START_TEST(stats_at_exit)
{
    setenv("CUPOOL_STATS", "stderr", 1);
    const char *err = child_stderr(acquire_and_exit);
    ck_assert_msg(strstr(err, "statistics") && strstr(err, "stream"), "%s", err);

    char dir[] = "/tmp/cupool-stats-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char file[256], link[256], victim[256];
    snprintf(file, sizeof(file), "%s/stats.txt", dir);
    setenv("CUPOOL_STATS", file, 1);
    err = child_stderr(acquire_and_exit);
    ck_assert_str_eq(err, "");
    FILE *f = fopen(file, "r");
    ck_assert_ptr_nonnull(f);
    char line[256] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    fclose(f);
    ck_assert_msg(strstr(line, "statistics"), "%s", line);

    /* a symbolic link at the path is not followed */
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    snprintf(link, sizeof(link), "%s/link", dir);
    f = fopen(victim, "w");
    fputs("precious\n", f);
    fclose(f);
    ck_assert_int_eq(symlink(victim, link), 0);
    setenv("CUPOOL_STATS", link, 1);
    err = child_stderr(acquire_and_exit);
    ck_assert_msg(strstr(err, "cannot open"), "%s", err);
    f = fopen(victim, "r");
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    fclose(f);
    ck_assert_str_eq(line, "precious\n");
    unlink(link);
    unlink(victim);
    unlink(file);
    rmdir(dir);
}
END_TEST

static Suite *driver_suite(void)
{
    Suite *s = suite_create("driver");
    TCase *tc = tcase_create("loading");
    tcase_add_test(tc, driver_loads);
    tcase_add_test(tc, names_and_version);
    tcase_add_test(tc, host_malloc_not_replaced);
    tcase_add_test(tc, missing_driver);
    tcase_add_test(tc, not_a_driver);
    if (!tu_real()) {
        /* failure modes the simulated driver acts out */
        tcase_add_test(tc, simulated_stub_library);
        tcase_add_test(tc, old_driver);
        tcase_add_test(tc, missing_entry_point);
        tcase_add_test(tc, no_device);
    }
    if (access(CUPOOL_TEST_CUDA_STUB, R_OK) == 0)
        tcase_add_test(tc, toolkit_stub_library);
    suite_add_tcase(s, tc);
    TCase *env = tcase_create("environment");
    tcase_add_test(env, bad_environment_reported);
    tcase_add_test(env, stats_at_exit);
    tcase_add_test(env, stats_never_block_exit);
    suite_add_tcase(s, env);
    return s;
}

int main(void)
{
    if (access(CUPOOL_TEST_CUDA_STUB, R_OK) != 0)
        printf("note: no toolkit stub at %s; its test is not built into this run\n",
               CUPOOL_TEST_CUDA_STUB);
    return tu_run(driver_suite());
}
