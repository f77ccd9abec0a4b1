/* SPDX-License-Identifier: MIT */
/*
 * cupool-bench: what a stream or event costs from the raw driver and from cupool, at 1 to 16
 * threads, in one run.
 *
 *   cupool-bench [streams] [events] [calls] [graphs] [--threads 1,2,4,8,16] [--pairs N]
 *                [--driver-pairs N] [--repeats R] [--graph-launches N] [--timeline] [--json]
 *
 * Each thread makes the current context current, warms up, waits at a barrier, then times N
 * create+destroy (driver) or acquire+release (cupool) pairs back to back. A repeat's figure is
 * the mean over threads of each thread's ns per pair (the per-thread cost); the table shows
 * the median of the repeats. Methods:
 *   driver        cuStreamCreateWithPriority + cuStreamDestroy (cuEventCreate + cuEventDestroy)
 *   cupool        cupool_stream_acquire + cupool_stream_release (current-context API)
 *   pool          cupool_stream_pool_acquire + cupool_stream_pool_release (explicit pool)
 *   pool-vouched  the same, released with CUPOOL_RELEASE_NOT_CAPTURING (streams only); an
 *                 explicit pool checks its context (cuCtxGetId) on every acquire
 *   pool-promised pools made with CUPOOL_POOL_CONTEXT_OUTLIVES, streams released vouched:
 *                 the check-free hit (no driver call at all)
 * `calls` times the driver calls cupool's hot paths make (cuCtxGetId, cuStreamIsCapturing),
 * and cuCtxGetCurrent for comparison, per call and per thread, so a table's figures can be
 * split into driver time and cupool's own; and, as a yardstick of the machine, a pop and push
 * on a thread-private array stack (what a magazine hit does, without cupool's checks).
 * `workloads` (bench/workloads.c) runs the ways services use cupool away from that best case:
 * hand-off between threads, bursts, drop-in batches, alternating classes, the explicit pools
 * against their driver-call floors, and a service mix, each beside its floor in the same run,
 * and the service mix on device 0 alone against every device at once (`--devices`).
 * Without a GPU the run says so and uses the simulated driver; every figure is then labelled
 * "simulated".
 */
#define _GNU_SOURCE
#include <cupool.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CUPOOL_BIN_TO_PKGLIB
#define CUPOOL_BIN_TO_PKGLIB "../lib/cupool"
#endif
#ifndef CUPOOL_PKGLIBDIR
#define CUPOOL_PKGLIBDIR "/usr/local/lib/cupool"
#endif

enum kind { STREAMS, EVENTS, CALLS };
int cupool_bench_graphs(CUcontext ctx, int iters, int timeline, const char *label);
int cupool_bench_graphs_json(CUcontext ctx, int iters, FILE *out);
int cupool_bench_workloads_parse(int argc, char **argv, int *json);
int cupool_bench_workloads(CUcontext ctx, int simulated, const char *gpu, int driver_version,
                           const char *date);
enum method { M_DRIVER, M_CUPOOL, M_POOL, M_POOL_VOUCHED, M_POOL_PROMISED, M_COUNT };
static const char *const method_names[M_COUNT] = {"driver", "cupool", "pool", "pool-vouched",
                                                  "pool-promised"};
enum call { C_GET_CURRENT, C_GET_ID_NULL, C_GET_ID_CTX, C_IS_CAPTURING, C_LOCAL, C_COUNT };
static const char *const call_names[C_COUNT] = {"cuCtxGetCurrent", "cuCtxGetId(NULL)",
                                                "cuCtxGetId(ctx)", "cuStreamIsCapturing",
                                                "thread-local pop+push"};
static const char *const kind_names[3] = {"streams", "events", "calls"};

static struct {
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuStreamCreateWithPriority)(CUstream *, unsigned int, int);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxGetId)(CUcontext, unsigned long long *);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
} drv;

static CUcontext ctx;
static cupool_stream_pool_t stream_pool, promised_stream_pool;
static cupool_event_pool_t event_pool, promised_event_pool;
static long pairs = 1000000, driver_pairs = 2000;
static int repeats = 5;
static int simulated;

static const unsigned int STREAM_FLAGS = CU_STREAM_NON_BLOCKING;
static const unsigned int EVENT_FLAGS = CU_EVENT_DISABLE_TIMING;

static void die(const char *what, CUresult r)
{
    fprintf(stderr, "cupool-bench: %s: %s (%s)\n", what, cupool_result_name(r),
            cupool_error_string());
    exit(1);
}

#define CHECK(call)                      \
    do {                                 \
        CUresult r_ = (call);            \
        if (r_ != CUDA_SUCCESS)          \
            die(#call, r_);              \
    } while (0)

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ---- the timed loops ---- */

static CUresult run_calls(enum call c, long n)
{
    CUresult r = CUDA_SUCCESS;
    CUcontext cur;
    unsigned long long id;
    CUstreamCaptureStatus cs;
    CUstream s = NULL;
    if (c == C_IS_CAPTURING && (r = drv.cuStreamCreateWithPriority(&s, STREAM_FLAGS, 0)))
        return r;
    if (c == C_LOCAL) {
        /* a 16-slot stack of pointers in this thread's own memory, popped and pushed back */
        void *volatile stack[16];
        volatile unsigned int count = 1;
        stack[0] = &cur;
        for (long i = 0; i < n; i++) {
            void *top = stack[--count];
            stack[count++] = top;
        }
        return CUDA_SUCCESS;
    }
    for (long i = 0; i < n && r == CUDA_SUCCESS; i++) {
        switch (c) {
        case C_GET_CURRENT: r = drv.cuCtxGetCurrent(&cur); break;
        case C_GET_ID_NULL: r = drv.cuCtxGetId(NULL, &id); break;
        case C_GET_ID_CTX: r = drv.cuCtxGetId(ctx, &id); break;
        default: r = drv.cuStreamIsCapturing(s, &cs); break;
        }
    }
    if (s)
        drv.cuStreamDestroy(s);
    return r;
}

static CUresult run_pairs(enum kind k, enum method m, long n)
{
    CUresult r = CUDA_SUCCESS;
    if (k == CALLS)
        return run_calls((enum call)m, n);
    for (long i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (k == STREAMS) {
            CUstream s;
            switch (m) {
            case M_DRIVER:
                if ((r = drv.cuStreamCreateWithPriority(&s, STREAM_FLAGS, 0)) == CUDA_SUCCESS)
                    r = drv.cuStreamDestroy(s);
                break;
            case M_CUPOOL:
                if ((r = cupool_stream_acquire(&s, STREAM_FLAGS, 0)) == CUDA_SUCCESS)
                    r = cupool_stream_release(s);
                break;
            case M_POOL:
                if ((r = cupool_stream_pool_acquire(stream_pool, &s)) == CUDA_SUCCESS)
                    r = cupool_stream_pool_release(stream_pool, s, 0);
                break;
            case M_POOL_VOUCHED:
                if ((r = cupool_stream_pool_acquire(stream_pool, &s)) == CUDA_SUCCESS)
                    r = cupool_stream_pool_release(stream_pool, s, CUPOOL_RELEASE_NOT_CAPTURING);
                break;
            default:
                if ((r = cupool_stream_pool_acquire(promised_stream_pool, &s)) == CUDA_SUCCESS)
                    r = cupool_stream_pool_release(promised_stream_pool, s,
                                                   CUPOOL_RELEASE_NOT_CAPTURING);
                break;
            }
        } else {
            CUevent e;
            switch (m) {
            case M_DRIVER:
                if ((r = drv.cuEventCreate(&e, EVENT_FLAGS)) == CUDA_SUCCESS)
                    r = drv.cuEventDestroy(e);
                break;
            case M_CUPOOL:
                if ((r = cupool_event_acquire(&e, EVENT_FLAGS)) == CUDA_SUCCESS)
                    r = cupool_event_release(e);
                break;
            case M_POOL_PROMISED:
                if ((r = cupool_event_pool_acquire(promised_event_pool, &e)) == CUDA_SUCCESS)
                    r = cupool_event_pool_release(promised_event_pool, e);
                break;
            default:
                if ((r = cupool_event_pool_acquire(event_pool, &e)) == CUDA_SUCCESS)
                    r = cupool_event_pool_release(event_pool, e);
                break;
            }
        }
    }
    return r;
}

struct worker {
    pthread_t thread;
    enum kind kind;
    enum method method;
    long n;
    pthread_barrier_t *start;
    double ns;
    CUresult r;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->r = drv.cuCtxSetCurrent(ctx);
    if (w->r == CUDA_SUCCESS) /* warm: the thread's magazines hold a handle afterwards */
        w->r = run_pairs(w->kind, w->method, w->method == M_DRIVER ? 20 : 1000);
    pthread_barrier_wait(w->start);
    double t0 = now_ns();
    if (w->r == CUDA_SUCCESS)
        w->r = run_pairs(w->kind, w->method, w->n);
    w->ns = (now_ns() - t0) / (double)w->n;
    return NULL;
}

/* One repeat: mean over threads of each thread's ns per pair. */
static double measure(enum kind k, enum method m, int threads)
{
    struct worker w[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned int)threads);
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){.kind = k, .method = m, .start = &start,
                               .n = k != CALLS && m == M_DRIVER ? driver_pairs : pairs};
        if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        if (w[i].r != CUDA_SUCCESS)
            die(method_names[m], w[i].r);
        sum += w[i].ns;
    }
    pthread_barrier_destroy(&start);
    return sum / threads;
}

/* Sums over every class of kind k (streams or events): acquires and driver creates. */
static void kind_counts(enum kind k, uint64_t *acquires, uint64_t *creates)
{
    size_t n = 0;
    *acquires = *creates = 0;
    if (cupool_stats_get(NULL, 0, &n) != CUDA_SUCCESS || n == 0)
        return;
    cupool_class_stats_t *st = calloc(n, sizeof *st);
    size_t got = 0;
    if (st)
        st[0].size = sizeof *st;
    if (st && cupool_stats_get(st, n, &got) == CUDA_SUCCESS)
        for (size_t i = 0; i < got && i < n; i++)
            if ((st[i].kind == CUPOOL_KIND_STREAM) == (k == STREAMS)) {
                *acquires += st[i].acquires;
                *creates += st[i].creates;
            }
    free(st);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- driver choice ---- */

/* In a child (so this process stays untouched): does the real driver load and see a GPU? */
static int real_gpu_answers(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int n = 0;
        CUresult (*count)(int *) = NULL;
        CUresult r = cupool_init();
        if (r == CUDA_SUCCESS)
            r = cupool_driver_get_proc("cuDeviceGetCount", 2000, (void **)&count);
        if (r == CUDA_SUCCESS)
            r = count(&n);
        if (r != CUDA_SUCCESS || n == 0) {
            const char *msg = r != CUDA_SUCCESS ? cupool_error_string() : "no CUDA device";
            ssize_t wr = write(fds[1], msg, strlen(msg));
            (void)wr;
            _exit(1);
        }
        _exit(0);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], why, len - 1);
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int find_simulator(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        /* uninstalled: bench/cupool-bench or bench/.libs/cupool-bench in the build tree */
        static const char *const rel[] = {"/../sim/.libs/fakecuda.so",
                                          "/../../sim/.libs/fakecuda.so"};
        for (int i = 0; i < 2; i++) {
            if ((size_t)snprintf(out, len, "%.*s%s", (int)(len - 64), exe, rel[i]) < len &&
                access(out, R_OK) == 0)
                return 1;
        }
        /* installed: the simulated driver's place relative to the binary's (a moved install
         * keeps the two together) */
        if (CUPOOL_BIN_TO_PKGLIB[0] &&
            (size_t)snprintf(out, len, "%s/%s/fakecuda.so", exe, CUPOOL_BIN_TO_PKGLIB) < len &&
            access(out, R_OK) == 0)
            return 1;
    }
    snprintf(out, len, "%s/fakecuda.so", CUPOOL_PKGLIBDIR);
    return access(out, R_OK) == 0;
}

#define RESOLVE(name, version) CHECK(cupool_driver_get_proc(#name, version, (void **)&drv.name))

static void setup_driver(int json)
{
    char why[512] = "";
    const char *forced = getenv("CUPOOL_DRIVER_PATH");
    if (!forced || !*forced) {
        if (!real_gpu_answers(why, sizeof(why))) {
            char sim[PATH_MAX];
            if (!find_simulator(sim, sizeof(sim))) {
                fprintf(stderr, "cupool-bench: no GPU (%s) and no simulated driver found\n", why);
                exit(1);
            }
            fprintf(json ? stderr : stdout,
                    "NO GPU: %s\nRunning on the SIMULATED driver %s: every figure below measures "
                    "the simulation, not CUDA.\n\n",
                    why, sim);
            setenv("CUPOOL_DRIVER_PATH", sim, 1);
        }
    }
    CHECK(cupool_init());
    /* The simulated driver exports its control functions; the real one has none. */
    const char *path = getenv("CUPOOL_DRIVER_PATH");
    void *h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    simulated = h && dlsym(h, "fakecuda_live_streams") != NULL;
    if (h)
        dlclose(h);
    RESOLVE(cuDeviceGet, 2000);
    RESOLVE(cuDeviceGetName, 2000);
    RESOLVE(cuDriverGetVersion, 2020);
    RESOLVE(cuDevicePrimaryCtxRetain, 7000);
    RESOLVE(cuCtxSetCurrent, 4000);
    RESOLVE(cuStreamCreateWithPriority, 5050);
    RESOLVE(cuStreamDestroy, 4000);
    RESOLVE(cuEventCreate, 2000);
    RESOLVE(cuEventDestroy, 4000);
    RESOLVE(cuCtxGetCurrent, 4000);
    RESOLVE(cuCtxGetId, 12000);
    RESOLVE(cuStreamIsCapturing, 10000);
    CUdevice dev;
    CHECK(drv.cuDeviceGet(&dev, 0));
    CHECK(drv.cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(drv.cuCtxSetCurrent(ctx));
    CHECK(cupool_stream_pool_get(&stream_pool, ctx, STREAM_FLAGS, 0));
    CHECK(cupool_event_pool_get(&event_pool, ctx, EVENT_FLAGS));
    /* the benchmark never resets or destroys ctx while it runs: the promise holds */
    CHECK(cupool_stream_pool_get(&promised_stream_pool, ctx,
                                 STREAM_FLAGS | CUPOOL_POOL_CONTEXT_OUTLIVES, 0));
    CHECK(cupool_event_pool_get(&promised_event_pool, ctx,
                                EVENT_FLAGS | CUPOOL_POOL_CONTEXT_OUTLIVES));
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: cupool-bench [streams] [events] [calls] [graphs] [--threads LIST] "
               "[--pairs N] [--driver-pairs N] [--repeats R] [--graph-launches N] [--timeline] "
               "[--json]\n"
               "       cupool-bench workloads [--json] [--quick] [--signatures S] "
               "[--timer tsc|clock] [--devices N|all] [NAMES...]\n"
               "  streams, events   acquire+release vs create+destroy (default: the first three)\n"
               "  calls             the driver calls on cupool's hot paths, alone\n"
               "  graphs            pipelines of 1, 10, 50 kernels: eager, hand-written graph,\n"
               "                    cupool hits, misses; alternating signatures, K streams,\n"
               "                    describing per request; 8 streams on one signature\n"
               "  --graph-launches N  timed launches per graphs figure (default 200)\n"
               "  --timeline        graphs: when each thread of the one-signature runs (fifty\n"
               "                    2 ms kernels per thread) launched and finished, on stderr\n"
               "                    (not with --json)\n"
               "  --threads LIST    comma-separated thread counts (default 1,2,4,8,16)\n"
               "  --pairs N         cupool pairs per thread per repeat (default 1000000)\n"
               "  --driver-pairs N  raw driver pairs per thread per repeat (default 2000)\n"
               "  --repeats R       repeats; the median is reported (default 5)\n"
               "  --json            one JSON document on stdout instead of tables (with\n"
               "                    graphs: a \"graphs\" object in it)\n"
               "  workloads         hand-off, bursts, drop-in batches, class clashes, explicit\n"
               "                    pools, a service mix, each beside its floor; latency\n"
               "                    percentiles; the mix on each device at once (devices)\n"
               "                    (cupool-bench workloads --help says more)\n");
}

static long parse_long(const char *s, const char *what, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max) {
        fprintf(stderr, "cupool-bench: %s must be an integer from %ld to %ld, not '%s'\n", what,
                min, max, s);
        exit(2);
    }
    return v;
}

/* The GPU's name, the driver's version and today's date (UTC), for the output's header. */
static void describe_run(char *gpu, size_t gpu_len, int *version, char *date, size_t date_len)
{
    CUdevice dev;
    CHECK(drv.cuDeviceGet(&dev, 0));
    CHECK(drv.cuDeviceGetName(gpu, (int)gpu_len, dev));
    CHECK(drv.cuDriverGetVersion(version));
    time_t t = time(NULL);
    strftime(date, date_len, "%Y-%m-%d", gmtime(&t));
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "workloads")) {
        int json = 0, rc = cupool_bench_workloads_parse(argc - 2, argv + 2, &json);
        if (rc)
            return rc == 1 ? 0 : rc;
        setup_driver(json);
        char gpu[256] = "", date[32];
        int version = 0;
        describe_run(gpu, sizeof(gpu), &version, date, sizeof(date));
        return cupool_bench_workloads(ctx, simulated, gpu, version, date);
    }
    int kinds[3] = {0, 0, 0}, json = 0, graphs = 0, graph_iters = 200, timeline = 0;
    int threads[16] = {1, 2, 4, 8, 16}, nthreads = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "streams"))
            kinds[STREAMS] = 1;
        else if (!strcmp(a, "events"))
            kinds[EVENTS] = 1;
        else if (!strcmp(a, "calls"))
            kinds[CALLS] = 1;
        else if (!strcmp(a, "graphs"))
            graphs = 1;
        else if (i + 1 < argc && !strcmp(a, "--graph-launches"))
            graph_iters = (int)parse_long(argv[++i], "--graph-launches", 10, 1000000);
        else if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--timeline"))
            timeline = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (i + 1 < argc && !strcmp(a, "--pairs"))
            pairs = parse_long(argv[++i], "--pairs", 1, 1000000000);
        else if (i + 1 < argc && !strcmp(a, "--driver-pairs"))
            driver_pairs = parse_long(argv[++i], "--driver-pairs", 1, 100000000);
        else if (i + 1 < argc && !strcmp(a, "--repeats"))
            repeats = (int)parse_long(argv[++i], "--repeats", 1, 1000);
        else if (i + 1 < argc && !strcmp(a, "--threads")) {
            nthreads = 0;
            char *list = argv[++i], *save = NULL;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (nthreads == 16) {
                    fprintf(stderr, "cupool-bench: at most 16 thread counts\n");
                    return 2;
                }
                threads[nthreads++] = (int)parse_long(t, "a thread count", 1, 64);
            }
            if (!nthreads) {
                usage(stderr);
                return 2;
            }
        } else {
            fprintf(stderr, "cupool-bench: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!kinds[STREAMS] && !kinds[EVENTS] && !kinds[CALLS] && !graphs)
        kinds[STREAMS] = kinds[EVENTS] = kinds[CALLS] = 1;
    if (timeline && !graphs) {
        fprintf(stderr, "cupool-bench: --timeline is for graphs\n");
        return 2;
    }
    if (timeline && json) {
        fprintf(stderr, "cupool-bench: --timeline cannot be combined with --json (the "
                        "timeline has no JSON form): drop one of the two\n");
        return 2;
    }

    setup_driver(json);
    char gpu[256] = "", date[32];
    int version = 0;
    describe_run(gpu, sizeof(gpu), &version, date, sizeof(date));
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    const char *label = simulated ? " [simulated]" : "";
    if (json)
        printf("{\"date\":\"%s\",\"gpu\":\"%s\",\"cuda_driver_version\":%d,\"simulated\":%s,"
               "\"cpus\":%ld,\"cupool_version\":\"%s\",\"pairs\":%ld,\"driver_pairs\":%ld,"
               "\"repeats\":%d,\"results\":[",
               date, gpu, version, simulated ? "true" : "false", cpus, cupool_version(), pairs,
               driver_pairs, repeats);
    else {
        printf("cupool-bench %s, %s: %s, CUDA driver %d.%d, %ld CPUs%s\n", cupool_version(), date,
               gpu, version / 1000, version % 1000 / 10, cpus, label);
        if (kinds[STREAMS] || kinds[EVENTS] || kinds[CALLS])
            printf("ns per create+destroy (driver) or acquire+release (cupool) pair, per thread; "
                   "median of %d repeats\n",
                   repeats);
        if (simulated)
            printf("On the simulated driver the timings measure a simulation on this CPU and say "
                   "nothing about\ncupool's speed with CUDA. What holds on any machine: every "
                   "call succeeded, and the\ncounts of driver creates per cupool acquire below "
                   "each table.\n");
        int over = 0;
        for (int ti = 0; ti < nthreads; ti++)
            over |= threads[ti] > cpus;
        if (over && (kinds[STREAMS] || kinds[EVENTS] || kinds[CALLS]))
            printf("WARNING: rows marked * run more threads than this machine's %ld CPUs: their "
                   "threads take\nturns on the CPUs, so their per-thread figures include the "
                   "waiting.\n",
                   cpus);
    }
    double stream_ns[16][M_COUNT] = {{0}};

    int first = 1;
    for (int k = STREAMS; k <= CALLS; k++) {
        if (!kinds[k])
            continue;
        int calls = k == CALLS;
        int nmethods = calls ? C_COUNT : M_COUNT;
        /* events have no vouched release */
#define SKIP(m) (!calls && k == EVENTS && (m) == M_POOL_VOUCHED)
        const char *const *names = calls ? call_names : method_names;
        double med[16][(int)C_COUNT > (int)M_COUNT ? (int)C_COUNT : (int)M_COUNT];
        if (!json) {
            if (calls)
                printf("\ndriver calls on cupool's hot paths, ns per call, per thread%s\n", label);
            else
                printf("\n%s%s\n", kind_names[k], label);
            printf("%7s", "threads");
            for (int m = 0; m < nmethods; m++)
                if (!SKIP(m))
                    printf(" %*s", calls ? 22 : 13, names[m]);
            for (int m = 1; !calls && m < nmethods; m++) {
                if (SKIP(m))
                    continue;
                char head[24];
                snprintf(head, sizeof(head), "%s x", names[m]);
                printf(" %15s", head);
            }
            printf("\n");
        }
        uint64_t acq0 = 0, cre0 = 0;
        if (!calls)
            kind_counts((enum kind)k, &acq0, &cre0);
        for (int ti = 0; ti < nthreads; ti++) {
            for (int m = 0; m < nmethods; m++) {
                if (SKIP(m))
                    continue;
                double rep[1000];
                for (int r = 0; r < repeats; r++)
                    rep[r] = measure((enum kind)k, (enum method)m, threads[ti]);
                qsort(rep, (size_t)repeats, sizeof(double), cmp_double);
                med[ti][m] = repeats % 2 ? rep[repeats / 2]
                                         : (rep[repeats / 2 - 1] + rep[repeats / 2]) / 2;
                if (json) {
                    printf("%s{\"kind\":\"%s\",\"method\":\"%s\",\"threads\":%d,"
                           "\"ns_per_%s_median\":%.2f,\"repeats_ns\":[",
                           first ? "" : ",", kind_names[k], names[m], threads[ti],
                           calls ? "call" : "pair", med[ti][m]);
                    for (int r = 0; r < repeats; r++)
                        printf("%s%.2f", r ? "," : "", rep[r]);
                    printf("]}");
                    first = 0;
                }
            }
            if (k == STREAMS)
                for (int m = 0; m < M_COUNT; m++)
                    stream_ns[ti][m] = med[ti][m];
            if (!json) {
                printf("%6d%c", threads[ti], threads[ti] > cpus ? '*' : ' ');
                for (int m = 0; m < nmethods; m++)
                    if (!SKIP(m))
                        printf(" %*.1f", calls ? 22 : 13, med[ti][m]);
                for (int m = 1; !calls && m < nmethods; m++) {
                    if (SKIP(m))
                        continue;
                    double x = med[ti][M_DRIVER] / med[ti][m];
                    printf(" %14.*fx", x < 10 ? 2 : 0, x);
                }
                printf("\n");
                fflush(stdout);
            }
        }
        if (!json) {
            printf("per-thread cost at %d threads / at %d thread%s:", threads[nthreads - 1],
                   threads[0], threads[0] == 1 ? "" : "s");
            for (int m = 0; m < nmethods; m++)
                if (!SKIP(m))
                    printf(" %s %.2f%s", names[m], med[nthreads - 1][m] / med[0][m],
                           m + 1 < nmethods ? "," : "\n");
            if (!calls) {
                printf("(\"cupool x\" etc.: speedup over the driver at the same thread count)\n");
                uint64_t acq1, cre1;
                kind_counts((enum kind)k, &acq1, &cre1);
                uint64_t a = acq1 - acq0, c = cre1 - cre0;
                printf("every call succeeded; cupool made %llu driver creates for %llu acquires "
                       "(%.2f per 1000): the rest reused pooled %s\n",
                       (unsigned long long)c, (unsigned long long)a,
                       a ? 1000.0 * (double)c / (double)a : 0.0, kind_names[k]);
            }
        }
    }
#undef SKIP
    if (json) {
        printf("]");
        if (graphs) {
            printf(",\"graphs\":");
            fflush(stdout);
            int rc = cupool_bench_graphs_json(ctx, graph_iters, stdout);
            printf("}\n");
            return rc;
        }
        printf("}\n");
        return 0;
    }
    if (kinds[STREAMS] && !simulated && stream_ns[0][M_DRIVER] > 0) {
        /* what it buys, in one line (first and last thread counts measured) */
        int t = nthreads - 1;
        printf("\nIn one line: a stream costs %.0f ns from cupool_stream_acquire+release and "
               "%.0f ns from a promised pool, instead of %.1f us to create and destroy one with "
               "the driver (%d thread%s",
               stream_ns[0][M_CUPOOL], stream_ns[0][M_POOL_PROMISED],
               stream_ns[0][M_DRIVER] / 1000, threads[0], threads[0] == 1 ? "" : "s");
        if (t > 0)
            printf("; %.0f and %.0f ns instead of %.1f us at %d threads", stream_ns[t][M_CUPOOL],
                   stream_ns[t][M_POOL_PROMISED], stream_ns[t][M_DRIVER] / 1000, threads[t]);
        printf(")\n");
    }
    if (graphs)
        return cupool_bench_graphs(ctx, graph_iters, timeline, label);
    return 0;
}
