/* SPDX-License-Identifier: MIT */
/*
 * cupool-bench workloads: the ways services use cupool away from its best case, each beside
 * its floor measured in the same run.
 *
 *   cupool-bench workloads [--json] [--quick] [--signatures S] [--timer tsc|clock]
 *                          [--devices N|all] [NAMES...]
 *
 * Workloads (NAMES; all of them, in this order, when none is named):
 *   handoff       thread A acquires streams and passes them through a single-producer
 *                 single-consumer ring (1024 slots, so up to 1024 in flight) to thread B,
 *                 which releases them. Methods: pool-promised (a CUPOOL_POOL_CONTEXT_OUTLIVES
 *                 pool, released vouched), pool (an explicit pool, released vouched: one
 *                 cuCtxGetId(ctx) per acquire), current-context (cupool_stream_acquire/_release: one
 *                 cuCtxGetId(NULL) and one cuStreamIsCapturing per acquire). Floor: the same
 *                 ring passing pre-created driver streams, with one write on each side to a
 *                 per-handle 64-byte-aligned record (the cache-line transfer any ownership
 *                 check pays), plus the driver calls the method's acquire makes. ns per handle:
 *                 wall time from the start until B released the last handle, over the handles.
 *   burst         M acquires then M releases on one thread, vouched streams of an explicit
 *                 pool, M = 1, 64, 128, 256, 1024, many rounds after warm-up rounds; ns per
 *                 pair; floor: M = 1, measured in turns with each M.
 *   burst-cold    the same from a class never used (or trimmed): a first burst of 1024, ten
 *                 more 2 ms apart, then a first burst of 2048 (beyond what is idle) and ten
 *                 more: where the creates ran (request thread or maintenance thread).
 *   dropin-batch  cupool_cuStreamCreate 1000 times then cupool_cuStreamDestroy 1000 times,
 *                 repeated (after a warm-up round); the same for events; ns per create+destroy;
 *                 floor: the raw driver doing the same batches. The figure that matters is
 *                 driver creates per 1000 wrapper creates.
 *   class-clash   the current-context API alternating keys on one thread: two priorities (0
 *                 and -4, same flags), every distinct class of the context, and 89 keys
 *                 (flags x priority, priorities clamped to the device's range, so 89 keys make
 *                 fewer classes: the row says how many). ns per pair; floor: one key,
 *                 and a row of the driver's own two calls alternating two streams against
 *                 one stream.
 *   explicit      pairs on 1 and 16 threads: the explicit stream pool (not vouched) against
 *                 cuCtxGetId(ctx) + cuStreamIsCapturing + a thread-local array pop+push; the
 *                 current-context API against cuCtxGetId(NULL) + cuStreamIsCapturing +
 *                 pop+push; the check-free stream pair (CUPOOL_POOL_CONTEXT_OUTLIVES, released
 *                 vouched) and event pair against a pop+push; and the check-free stream pair
 *                 with the checked pool's two driver calls inline (what the checked pair is
 *                 made of: no target of its own). In class-clash and explicit, thread i
 *                 of a row and of its floor is pinned to the i-th allowed CPU.
 *   service-mix   16 request threads; each request acquires a stream and two events from
 *                 explicit pools, records the first event,
 *                 describes and launches one of S pipeline signatures (S = 4 by default; tiny
 *                 kernels add_u32/set_u32 on a counter of the thread's own, new arguments each
 *                 request), records the second event and hands the three handles through a
 *                 64-slot ring of its own (16 x 64 = 1024 in flight at most) to one completion
 *                 thread, which polls cuEventQuery and then releases the three. A warm-up, then
 *                 the measured phase. Floor: 16 threads that only pop and push a thread-local
 *                 array, each operation timed with the same timer, for as long as the measured
 *                 phase lasted: its max is the machine's own noise. The warm-up lasts at least
 *                 two decay ticks (CUPOOL_DECAY_MS / 4 each) and until 500 ms pass with no create or
 *                 destroy on a request thread. Five rows: "checked" (pools that check their
 *                 context, the stream released unvouched: two driver calls per stream
 *                 acquire, one per event acquire), "promised" (pools made with
 *                 CUPOOL_POOL_CONTEXT_OUTLIVES, the stream released vouched once its last
 *                 event fired: no driver call in any acquire or release), and "by hand": the
 *                 same threads, rings and driver calls without cupool (handles the driver
 *                 created beforehand in thread-local stacks, handed back through a return ring
 *                 per request thread, a 64-byte record per handle checked and written on
 *                 each side, as any pool that refuses a double or foreign release must; S
 *                 graphs instantiated per thread, patched with cuGraphExecKernelNodeSetParams
 *                 and launched with cuGraphLaunch): the floor of the promised row's tails;
 *                 "by hand checked": the same plus the driver calls a checked pool makes on
 *                 each acquire (cuCtxGetId, cuStreamIsCapturing for the stream), the checked
 *                 row's floor; and "by hand, blind writes": "by hand" with the records only
 *                 written, not checked (a reference: what the check itself costs).
 *                 With --devices N > 1 the request threads are spread over N devices (thread
 *                 i on device i % N: its primary context current, its pipeline, counter and
 *                 explicit pools of that context), each device has a completion thread of
 *                 its own, and every 4th request of a thread is released by the next
 *                 device's completion thread, with that device current; each acquired
 *                 stream's context is checked (cuStreamGetCtx). Every row ends by reading
 *                 back each thread's counter slots and checking each value.
 *   devices       the service mix (checked, then promised) on device 0's request threads
 *                 alone, then on every device's at once (--devices N, default every device;
 *                 with fewer than two it says it needs two and gives no figure): per device
 *                 requests/s, ns per request, the single calls' percentiles, its classes'
 *                 creates and destroys, and device 0 with all busy over device 0 alone.
 * The graph-cache workloads (signatures alternating on one stream, one signature on K
 * streams, describing per request) are part of `cupool-bench graphs`.
 *
 * Figures, for every row: ns per operation (mean; for pair loops from runs with no timer
 * inside the loop: of 7 rounds, each a run of the row and one of its floor in turns, the
 * round whose ratio is the median; bursts and hand-off: the median of 3 runs); p50, p99, p99.9,
 * p99.99 and max of single acquires and of single releases, each call timed by itself from a
 * separate run of the same work (TSC, calibrated against CLOCK_MONOTONIC, or clock_gettime
 * with --timer clock; a single-call figure includes one timer reading, whose own cost the
 * output states; percentiles come from a log-linear histogram, at most 1.6% high); driver
 * creates and destroys per 1000 acquires over the measured runs (cupool_stats_get deltas,
 * every class), and of them how many ran on request threads (cupool_maintenance_stats_get:
 * request_creates/destroys; background_* are the maintenance thread's). Every workload starts
 * with cupool_trim(), so idle handles of one do not serve the next. The ratio is the row's ns
 * per operation over its floor's (burst-cold and service-mix: means of the timed single calls,
 * for the mix with the floor's max beside its own). The run ends with the key figures: the
 * ones the targets are stated in, each with its target and whether this run met it.
 * Without a GPU the run uses the simulated driver; every figure is then labelled "simulated".
 */
#define _GNU_SOURCE
#include <cupool.h>

#include <errno.h>
#include <math.h> /* isfinite (a macro: no libm) */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define WL_HAVE_TSC 1
#else
#define WL_HAVE_TSC 0
#endif

#include "common/kernels.h"

/* ---- options ---- */

enum wl_id {
    W_HANDOFF,
    W_BURST,
    W_BURST_COLD,
    W_DROPIN,
    W_CLASH,
    W_EXPLICIT,
    W_MIX,
    W_DEVICES,
    W_COUNT
};
static const char *const wl_names[W_COUNT] = {"handoff",      "burst",       "burst-cold",
                                              "dropin-batch", "class-clash", "explicit",
                                              "service-mix",  "devices"};
static const char *const wl_what[W_COUNT] = {
    "thread A acquires, thread B releases, through a 1024-slot ring; ns per handle",
    "M acquires then M releases on one thread, vouched explicit-pool streams; ns per pair",
    "bursts from a class with nothing idle, then beyond what is idle; ns per pair",
    "1000 drop-in creates then 1000 destroys, repeated; ns per create+destroy",
    "current-context API alternating keys on one thread; ns per pair",
    "explicit pools and the current-context API against their driver-call floors; ns per pair",
    "16 request threads, one completion thread, S pipeline signatures; ns per call",
    "the service mix on device 0 alone, then on every device at once; per device"};

static int want[W_COUNT], order[W_COUNT], norder;
static int opt_json, opt_quick, opt_signatures = 4, opt_timer_clock;
/* --devices: 0 when not given (the service mix on device 0; the devices workload on every
 * device), -1 for "all" */
static int opt_devices;

#define WL_MAX_DEV 16 /* one service-mix request thread per device at least */

static void wl_usage(FILE *f)
{
    fprintf(f,
            "usage: cupool-bench workloads [--json] [--quick] [--signatures S] "
            "[--timer tsc|clock] [--devices N|all] [NAMES...]\n"
            "  NAMES            any of: handoff burst burst-cold dropin-batch class-clash "
            "explicit\n"
            "                   service-mix devices (default: all, in that order; devices is\n"
            "                   skipped, saying why, where fewer than two devices are used)\n"
            "  --json           one JSON document on stdout instead of tables\n"
            "  --quick          a tenth of the iterations (for tests; figures are noisier)\n"
            "  --signatures S   service-mix: pipeline signatures, 1 to 64 (default 4)\n"
            "  --devices N      1 to the device count (at most %d), or all: service-mix spreads\n"
            "                   its request threads over N devices (thread i on device i %% N;\n"
            "                   default 1), devices runs on N (default: every device)\n"
            "  --timer T        single-call timer: tsc (default where the CPU has an invariant\n"
            "                   TSC) or clock (clock_gettime(CLOCK_MONOTONIC))\n"
            "service-mix rows: checked (pools that check their context, streams released\n"
            "unvouched) and promised (CUPOOL_POOL_CONTEXT_OUTLIVES pools, streams released\n"
            "vouched: no driver call on a request thread). The run ends with the key figures,\n"
            "each against its target (stated for the H200: on the simulated driver they get\n"
            "no verdict; (aim): a goal, not a requirement). devices: the service mix on\n"
            "device 0 alone, then on N devices at once, per device, and device 0 busy beside\n"
            "the others over device 0 alone. cupool-bench(1) says more.\n",
            WL_MAX_DEV);
}

/* 0: go on; 1: --help printed (exit 0); 2: bad arguments (printed). */
int cupool_bench_workloads_parse(int argc, char **argv, int *json)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int found = 0;
        for (int w = 0; w < W_COUNT; w++)
            if (!strcmp(a, wl_names[w])) {
                if (!want[w])
                    order[norder++] = w;
                want[w] = found = 1;
            }
        if (found)
            continue;
        if (!strcmp(a, "--json"))
            opt_json = 1;
        else if (!strcmp(a, "--quick"))
            opt_quick = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            wl_usage(stdout);
            return 1;
        } else if (i + 1 < argc && !strcmp(a, "--signatures")) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || v < 1 || v > 64) {
                fprintf(stderr, "cupool-bench: --signatures must be an integer from 1 to 64, "
                                "not '%s'\n", argv[i]);
                return 2;
            }
            opt_signatures = (int)v;
        } else if (i + 1 < argc && !strcmp(a, "--devices")) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (!strcmp(argv[i], "all"))
                opt_devices = -1;
            else if (errno || *end || v < 1 || v > WL_MAX_DEV) {
                fprintf(stderr, "cupool-bench: --devices must be an integer from 1 to the device "
                                "count (at most %d) or 'all', not '%s'\n", WL_MAX_DEV, argv[i]);
                return 2;
            } else
                opt_devices = (int)v;
        } else if (i + 1 < argc && !strcmp(a, "--timer")) {
            const char *t = argv[++i];
            if (!strcmp(t, "clock"))
                opt_timer_clock = 1;
            else if (!strcmp(t, "tsc") && WL_HAVE_TSC)
                opt_timer_clock = 0;
            else {
                fprintf(stderr, "cupool-bench: --timer must be %s, not '%s'\n",
                        WL_HAVE_TSC ? "tsc or clock" : "clock (no TSC on this CPU)", t);
                return 2;
            }
        } else {
            fprintf(stderr, "cupool-bench: workloads: unknown argument '%s'\n", a);
            wl_usage(stderr);
            return 2;
        }
    }
    if (!norder)
        for (int w = 0; w < W_COUNT; w++)
            want[w] = 1, order[norder++] = w;
    *json = opt_json;
    return 0;
}

/* Iteration counts: a tenth with --quick. */
static long iters(long n)
{
    long v = opt_quick ? n / 10 : n;
    return v < 1 ? 1 : v;
}

/* ---- driver entry points ---- */

static struct {
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuCtxGetId)(CUcontext, unsigned long long *);
    CUresult (*cuCtxGetStreamPriorityRange)(int *, int *);
    CUresult (*cuStreamCreateWithPriority)(CUstream *, unsigned int, int);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuStreamGetCtx)(CUstream, CUcontext *);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuGraphCreate)(CUgraph *, unsigned int);
    CUresult (*cuGraphAddKernelNode)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                                     const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphExecKernelNodeSetParams)(CUgraphExec, CUgraphNode,
                                               const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphDestroy)(CUgraph);
} d;

static CUcontext ctx;
static unsigned long long ctx_id;
static int prio_least, prio_greatest;
static cupool_stream_pool_t spool, promised_spool;
static cupool_event_pool_t epool, promised_epool;
static const unsigned int SFLAGS = CU_STREAM_NON_BLOCKING;
static const unsigned int EFLAGS = CU_EVENT_DISABLE_TIMING;

/* The devices the service mix runs on: each one's primary context, explicit pools of that
 * context, and the mix's kernels from a module loaded in it. devs[0] is ctx and the pools
 * above. */
struct wl_dev {
    CUcontext ctx;
    unsigned long long id;
    cupool_stream_pool_t spool, promised_spool;
    cupool_event_pool_t epool, promised_epool;
    CUmodule mod;
    CUfunction k_add, k_set;
};
static struct wl_dev devs[WL_MAX_DEV];
static int dev_count;   /* the devices the driver reports */
static int mix_devices; /* --devices for the service mix (1 unless given) */
static int devices_n;   /* the devices workload's device count */

/* ---- failures: the first one is kept; every wait and loop stops on it ---- */

static _Atomic int aborted;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static char fail_msg[1024];
static const char *cur_wl = "setup";

static void wl_fail(const char *what, CUresult r, const char *fmt, ...)
{
    pthread_mutex_lock(&fail_lock);
    if (!atomic_load(&aborted)) {
        int n = snprintf(fail_msg, sizeof fail_msg, "%s: %s", cur_wl, what);
        if (n < 0)
            n = 0;
        if (fmt && (size_t)n < sizeof fail_msg) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(fail_msg + n, sizeof fail_msg - (size_t)n, fmt, ap);
            va_end(ap);
        } else if ((size_t)n < sizeof fail_msg)
            snprintf(fail_msg + n, sizeof fail_msg - (size_t)n, ": %s (%s)",
                     cupool_result_name(r), cupool_error_string());
        atomic_store(&aborted, 1);
    }
    pthread_mutex_unlock(&fail_lock);
}

/* On the main thread with no other thread of the workload running: report and exit. */
static void die_if_failed(void)
{
    if (atomic_load(&aborted)) {
        fflush(stdout);
        fprintf(stderr, "cupool-bench workloads: %s\n", fail_msg);
        exit(1);
    }
}

#define MCHECK(call)                            \
    do {                                        \
        CUresult r_ = (call);                   \
        if (r_ != CUDA_SUCCESS) {               \
            wl_fail(#call, r_, NULL);           \
            die_if_failed();                    \
        }                                       \
    } while (0)

/* In a worker: record the failure and leave through `out`. */
#define WCHECK(call)                            \
    do {                                        \
        CUresult r_ = (call);                   \
        if (r_ != CUDA_SUCCESS) {               \
            wl_fail(#call, r_, NULL);           \
            goto out;                           \
        }                                       \
    } while (0)

static void spawn(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int e = pthread_create(t, NULL, fn, arg);
    if (e) {
        fprintf(stderr, "cupool-bench workloads: pthread_create: %s\n", strerror(e));
        exit(1);
    }
}

/* Pins the calling thread to the i-th CPU it may run on (modulo their number), so that a row
 * and its floor, run in turns, run on the same CPUs: unpinned, a one-thread row moved by up to
 * 2x between runs on an H200 VM as the scheduler placed it. Best effort: a failure leaves the
 * thread where it is. */
static void pin_self(int i)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) == 0)
        return;
    int want = i % CPU_COUNT(&allowed);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed) && want-- == 0) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            (void)pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
}

/* ---- the timer ---- */

static int use_tsc;
static double ns_per_tick = 1.0;
static double timer_cost_ns, timer_cost_p50_ns, tsc_drift;
static uint64_t run_mono0, run_tick0;

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline uint64_t ticks(void)
{
#if WL_HAVE_TSC
    if (use_tsc) {
        _mm_lfence(); /* the reading waits for the timed call to finish, and nothing later
                         starts before it */
        uint64_t t = __rdtsc();
        _mm_lfence();
        return t;
    }
#endif
    return mono_ns();
}

static inline void cpu_relax(void)
{
#if WL_HAVE_TSC
    _mm_pause();
#endif
}

static int cpu_has_invariant_tsc(void)
{
#if WL_HAVE_TSC
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return 0;
    char line[4096];
    int constant = 0, nonstop = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5))
            continue;
        constant = strstr(line, " constant_tsc") != NULL;
        nonstop = strstr(line, " nonstop_tsc") != NULL;
        break;
    }
    fclose(f);
    return constant && nonstop;
#else
    return 0;
#endif
}

/* ---- latency histograms: log-linear, in timer ticks, exact below 128 ticks ---- */

#define HSUB_BITS 6
#define HSUB (1u << HSUB_BITS)
#define HBUCKETS (59 * HSUB)

struct hist {
    uint64_t n, sum, max;
    uint64_t b[HBUCKETS];
};

static struct hist *hist_new(void)
{
    struct hist *h = calloc(1, sizeof *h);
    if (!h) {
        fprintf(stderr, "cupool-bench workloads: out of memory\n");
        exit(1);
    }
    return h;
}

static inline void hist_add(struct hist *h, uint64_t v)
{
    unsigned i;
    if (v < 2 * HSUB)
        i = (unsigned)v;
    else {
        unsigned shift = (unsigned)(63 - __builtin_clzll(v)) - HSUB_BITS;
        i = shift * HSUB + (unsigned)(v >> shift);
    }
    h->b[i]++;
    h->n++;
    h->sum += v;
    if (v > h->max)
        h->max = v;
}

static void hist_merge(struct hist *into, const struct hist *h)
{
    for (unsigned i = 0; i < HBUCKETS; i++)
        into->b[i] += h->b[i];
    into->n += h->n;
    into->sum += h->sum;
    if (h->max > into->max)
        into->max = h->max;
}

static uint64_t bucket_high(unsigned i)
{
    if (i < 2 * HSUB)
        return i;
    unsigned shift = i / HSUB - 1;
    uint64_t top = i % HSUB + HSUB;
    return ((top + 1) << shift) - 1;
}

/* ns at quantile q: the highest value of the bucket holding it (never above the max) */
static double hist_q(const struct hist *h, double q)
{
    if (!h->n)
        return 0;
    double at = q * (double)h->n;
    uint64_t rank = (uint64_t)at, cum = 0;
    if ((double)rank < at)
        rank++;
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < HBUCKETS; i++) {
        cum += h->b[i];
        if (cum >= rank) {
            uint64_t v = bucket_high(i);
            return (double)(v < h->max ? v : h->max) * ns_per_tick;
        }
    }
    return (double)h->max * ns_per_tick;
}

struct lat {
    uint64_t n;
    double mean, p50, p99, p999, p9999, max; /* ns */
};

static struct lat lat_of(const struct hist *h)
{
    struct lat l = {0};
    if (!h || !h->n)
        return l;
    l.n = h->n;
    l.mean = (double)h->sum / (double)h->n * ns_per_tick;
    l.p50 = hist_q(h, 0.50);
    l.p99 = hist_q(h, 0.99);
    l.p999 = hist_q(h, 0.999);
    l.p9999 = hist_q(h, 0.9999);
    l.max = (double)h->max * ns_per_tick;
    return l;
}

static void timer_init(void)
{
    use_tsc = WL_HAVE_TSC && !opt_timer_clock && cpu_has_invariant_tsc();
    if (use_tsc) {
        uint64_t m0 = mono_ns(), t0 = ticks(), m1;
        while ((m1 = mono_ns()) - m0 < 50000000u)
            ;
        uint64_t t1 = ticks();
        ns_per_tick = (double)(m1 - m0) / (double)(t1 - t0);
    }
    run_mono0 = mono_ns();
    run_tick0 = ticks();
    struct hist *h = hist_new();
    for (int i = 0; i < 200000; i++) {
        uint64_t a = ticks(), b = ticks();
        hist_add(h, b - a);
    }
    struct lat l = lat_of(h);
    timer_cost_ns = l.mean;
    timer_cost_p50_ns = l.p50;
    free(h);
}

/* ---- driver-call accounting ---- */

struct counts {
    uint64_t creates, destroys, req_creates, req_destroys, bg_creates, bg_destroys;
};

/* Every class's statistics, in an array of *n the caller frees. */
static cupool_class_stats_t *class_stats_all(size_t *np)
{
    size_t n = 0, cap = 0;
    cupool_class_stats_t *st = NULL;
    for (;;) {
        MCHECK(cupool_stats_get(st, cap, &n));
        if (n <= cap)
            break;
        free(st);
        cap = n + 16;
        st = calloc(cap, sizeof *st);
        if (!st) {
            fprintf(stderr, "cupool-bench workloads: out of memory\n");
            exit(1);
        }
        st[0].size = sizeof *st; /* the array's element size */
    }
    *np = n;
    return st;
}

static void counts_now(struct counts *c)
{
    size_t n = 0;
    cupool_class_stats_t *st = class_stats_all(&n);
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < n; i++) {
        c->creates += st[i].creates;
        c->destroys += st[i].destroys;
    }
    free(st);
    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    MCHECK(cupool_maintenance_stats_get(&m));
    c->req_creates = m.request_creates;
    c->req_destroys = m.request_destroys;
    c->bg_creates = m.background_creates;
    c->bg_destroys = m.background_destroys;
}

/* acc += now - since */
static void counts_add_since(struct counts *acc, const struct counts *since)
{
    struct counts now;
    counts_now(&now);
    acc->creates += now.creates - since->creates;
    acc->destroys += now.destroys - since->destroys;
    acc->req_creates += now.req_creates - since->req_creates;
    acc->req_destroys += now.req_destroys - since->req_destroys;
    acc->bg_creates += now.bg_creates - since->bg_creates;
    acc->bg_destroys += now.bg_destroys - since->bg_destroys;
}

/* ---- result rows ---- */

struct row {
    int wl;
    char name[64];
    char params[256]; /* JSON members */
    const char *unit;
    double ns;        /* ns per operation, mean */
    char floor[96];
    double floor_ns;  /* 0: no floor */
    struct lat acq, rel, facq, frel;
    uint64_t ops;     /* acquires over the counted runs */
    struct counts dc;
    int counted;      /* dc is meaningful */
    char extra[512];  /* JSON members */
    char note[512];
};

#define MAX_ROWS 64
static struct row rows[MAX_ROWS];
static int nrows;
static const char *label = "";

static struct row *row_new(int wl, const char *unit, const char *fmt, ...)
{
    if (nrows == MAX_ROWS) {
        fprintf(stderr, "cupool-bench workloads: too many rows\n");
        exit(1);
    }
    struct row *r = &rows[nrows++];
    memset(r, 0, sizeof *r);
    r->wl = wl;
    r->unit = unit;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->name, sizeof r->name, fmt, ap);
    va_end(ap);
    return r;
}

static void fmt_ns(char *buf, size_t len, double ns)
{
    if (ns < 10)
        snprintf(buf, len, "%.1fns", ns);
    else if (ns < 1000)
        snprintf(buf, len, "%.0fns", ns);
    else if (ns < 1e6)
        snprintf(buf, len, "%.*fus", ns < 1e4 ? 2 : ns < 1e5 ? 1 : 0, ns / 1e3);
    else
        snprintf(buf, len, "%.*fms", ns < 1e7 ? 2 : ns < 1e8 ? 1 : 0, ns / 1e6);
}

static void print_lat(const char *what, const struct lat *l)
{
    char a[16], b[16], c[16], e[16], f[16];
    fmt_ns(a, sizeof a, l->p50);
    fmt_ns(b, sizeof b, l->p99);
    fmt_ns(c, sizeof c, l->p999);
    fmt_ns(e, sizeof e, l->p9999);
    fmt_ns(f, sizeof f, l->max);
    printf(" %s p50 %s p99 %s p99.9 %s p99.99 %s max %s", what, a, b, c, e, f);
}

static double per_1000(uint64_t v, uint64_t ops)
{
    return ops ? 1000.0 * (double)v / (double)ops : 0;
}

/* One line of single-call percentiles (acquires, then releases), if there are any. */
static void print_lats(const char *what, const struct lat *a, const struct lat *r)
{
    if (!a->n && !r->n)
        return;
    printf("  %*s%s", 44 - (int)strlen(what), "", what);
    if (a->n)
        print_lat("acquire", a);
    if (r->n)
        print_lat("| release", r);
    printf("\n");
}

/* What workload wl runs, as its table and JSON say. */
static const char *wl_desc(int wl)
{
    if (wl == W_MIX && mix_devices > 1)
        return "16 request threads spread over devices, a completion thread per device, S "
               "pipeline signatures; ns per call";
    return wl_what[wl];
}

static void print_rows(int wl, int first)
{
    printf("\n%s: %s%s\n", wl_names[wl], wl_desc(wl), label);
    printf("  %-44s %10s  %-56s %10s %8s  %-18s %-18s\n", "row", "ns/op", "floor", "ns/op",
           "ratio", "creates/1k (req)", "destroys/1k (req)");
    for (int i = first; i < nrows; i++) {
        struct row *r = &rows[i];
        char ratio[16] = "-", fns[16] = "-", cr[32] = "-", de[32] = "-";
        if (r->floor_ns > 0) {
            snprintf(ratio, sizeof ratio, "%.2fx", r->ns / r->floor_ns);
            snprintf(fns, sizeof fns, "%.1f", r->floor_ns);
        }
        if (r->counted) {
            snprintf(cr, sizeof cr, "%.2f (%.2f)", per_1000(r->dc.creates, r->ops),
                     per_1000(r->dc.req_creates, r->ops));
            snprintf(de, sizeof de, "%.2f (%.2f)", per_1000(r->dc.destroys, r->ops),
                     per_1000(r->dc.req_destroys, r->ops));
        }
        printf("  %-44s %10.1f  %-56s %10s %8s  %-18s %-18s\n", r->name, r->ns,
               r->floor[0] ? r->floor : "-", fns, ratio, cr, de);
        print_lats("", &r->acq, &r->rel);
        print_lats("floor ", &r->facq, &r->frel);
        if (r->note[0])
            printf("  %-44s %s\n", "", r->note);
    }
    fflush(stdout);
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_num(double v)
{
    if (isfinite(v))
        printf("%.3f", v);
    else
        printf("null");
}

static void json_lat(const char *key, const struct lat *l)
{
    printf(",\"%s\":", key);
    if (!l->n) {
        printf("null");
        return;
    }
    printf("{\"count\":%llu,\"mean_ns\":", (unsigned long long)l->n);
    json_num(l->mean);
    printf(",\"p50_ns\":");
    json_num(l->p50);
    printf(",\"p99_ns\":");
    json_num(l->p99);
    printf(",\"p99_9_ns\":");
    json_num(l->p999);
    printf(",\"p99_99_ns\":");
    json_num(l->p9999);
    printf(",\"max_ns\":");
    json_num(l->max);
    printf("}");
}

static void json_row(const struct row *r)
{
    printf("{\"row\":");
    json_str(r->name);
    printf(",\"workload\":\"%s\",\"params\":{%s},\"unit\":\"%s\",\"ns_per_op\":",
           wl_names[r->wl], r->params, r->unit);
    json_num(r->ns);
    json_lat("acquire", &r->acq);
    json_lat("release", &r->rel);
    printf(",\"floor\":");
    if (r->floor[0]) {
        printf("{\"name\":");
        json_str(r->floor);
        printf(",\"ns_per_op\":");
        json_num(r->floor_ns);
        json_lat("acquire", &r->facq);
        json_lat("release", &r->frel);
        printf("}");
    } else
        printf("null");
    printf(",\"ratio\":");
    if (r->floor_ns > 0)
        json_num(r->ns / r->floor_ns);
    else
        printf("null");
    if (r->counted) {
        const struct counts *c = &r->dc;
        printf(",\"ops\":%llu,\"creates\":%llu,\"destroys\":%llu,\"request_creates\":%llu,"
               "\"request_destroys\":%llu,\"background_creates\":%llu,"
               "\"background_destroys\":%llu,\"creates_per_1000\":",
               (unsigned long long)r->ops, (unsigned long long)c->creates,
               (unsigned long long)c->destroys, (unsigned long long)c->req_creates,
               (unsigned long long)c->req_destroys, (unsigned long long)c->bg_creates,
               (unsigned long long)c->bg_destroys);
        json_num(per_1000(c->creates, r->ops));
        printf(",\"destroys_per_1000\":");
        json_num(per_1000(c->destroys, r->ops));
        printf(",\"request_creates_per_1000\":");
        json_num(per_1000(c->req_creates, r->ops));
        printf(",\"request_destroys_per_1000\":");
        json_num(per_1000(c->req_destroys, r->ops));
    }
    if (r->extra[0])
        printf(",\"extra\":{%s}", r->extra);
    if (r->note[0]) {
        printf(",\"note\":");
        json_str(r->note);
    }
    printf("}");
}

static double median3(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n is tiny */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define REPEATS 3

/* A row's ns and floor from rounds that ran each in turns: the round whose ratio is the
 * median of the rounds' ratios. Each round's two runs share the machine's state of the
 * moment (the VMs drift by tens of percent within a run), so the ratio of one round is the
 * figure that noise moves least; ns and floor then come from one round, and ns / floor is
 * that median ratio. The spread of the ratios goes in the row's extra. */
static void median_round(struct row *row, const double *a, const double *f, int n)
{
    double q[16];
    int idx[16];
    for (int i = 0; i < n; i++) {
        q[i] = f[i] > 0 ? a[i] / f[i] : 0;
        idx[i] = i;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && q[idx[j - 1]] > q[idx[j]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    int m = idx[n / 2];
    row->ns = a[m];
    row->floor_ns = f[m];
    snprintf(row->extra, sizeof row->extra, "\"rounds\":%d,\"ratio_min\":%.3f,\"ratio_max\":%.3f",
             n, q[idx[0]], q[idx[n - 1]]);
}

/* ---- waiting, bounded: 10 s without progress is a failure, never a hang ---- */

struct waiter {
    unsigned spins;
    uint64_t since;
};

static int waiter_spin(struct waiter *w, const char *what)
{
    w->spins++;
    if (w->spins % 64 == 0)
        sched_yield(); /* machines with fewer CPUs than threads */
    else
        cpu_relax();
    if (w->spins % 1024 == 0) {
        if (atomic_load_explicit(&aborted, memory_order_relaxed))
            return 0;
        uint64_t now = mono_ns();
        if (!w->since)
            w->since = now;
        else if (now - w->since > 10000000000u) {
            wl_fail(what, CUDA_SUCCESS, ": no progress for 10 s");
            return 0;
        }
    }
    return 1;
}

/* ---- steady state ----
 * Each workload begins with cupool_trim(), which restarts its classes' warm-up: until a
 * class's first decay tick (a quarter of CUPOOL_DECAY_MS, 2.5 s by default) its misses create
 * what they need and nothing ahead (docs/design.md, "Idle capacity"). A warm-up that reaches
 * the steady state the targets are stated for lasts past that tick. */
static uint64_t wl_start_ns; /* when the running workload's trim returned */

static uint64_t decay_tick_ns(void)
{
    const char *dm = getenv("CUPOOL_DECAY_MS");
    unsigned long long ms = dm && *dm ? strtoull(dm, NULL, 10) : 0;
    return (ms ? ms : 10000u) * 1000000u / 4;
}

/* Driver creates and destroys on request threads so far (cupool_maintenance_stats_get). */
static uint64_t request_calls_now(void)
{
    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    MCHECK(cupool_maintenance_stats_get(&m));
    return m.request_creates + m.request_destroys;
}

/* Driver creates on any thread and destroys on request threads so far: the service mix's
 * warm-up lasts until these stop (the maintenance thread's decay destroys go on). */
static uint64_t growth_calls_now(void)
{
    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    MCHECK(cupool_maintenance_stats_get(&m));
    return m.request_creates + m.background_creates + m.request_destroys;
}

/* ---- a single-producer single-consumer ring ---- */

struct item {
    void *a, *b, *c;
    uintptr_t i;
};

struct ring {
    _Alignas(64) uint64_t cap, mask; /* read-only */
    _Alignas(64) _Atomic uint64_t head;
    uint64_t tail_seen; /* the producer's */
    _Alignas(64) _Atomic uint64_t tail;
    uint64_t head_seen; /* the consumer's */
    _Alignas(64) struct item slot[];
};

static struct ring *ring_new(uint64_t cap)
{
    struct ring *r = aligned_alloc(64, (sizeof(struct ring) + cap * sizeof(struct item) + 63) /
                                           64 * 64);
    if (!r) {
        fprintf(stderr, "cupool-bench workloads: out of memory\n");
        exit(1);
    }
    memset(r, 0, sizeof *r);
    r->cap = cap;
    r->mask = cap - 1;
    return r;
}

static int ring_push(struct ring *r, const struct item *it, const char *what)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (h - r->tail_seen >= r->cap) {
        struct waiter w = {0};
        while (h - (r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire)) >=
               r->cap)
            if (!waiter_spin(&w, what))
                return 0;
    }
    r->slot[h & r->mask] = *it;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    return 1;
}

/* The oldest item, or NULL if the ring is empty (never waits). */
static struct item *ring_peek(struct ring *r)
{
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (t == r->head_seen) {
        r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire);
        if (t == r->head_seen)
            return NULL;
    }
    return &r->slot[t & r->mask];
}

static void ring_drop(struct ring *r)
{
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    atomic_store_explicit(&r->tail, t + 1, memory_order_release);
}

static int ring_pop(struct ring *r, struct item *out, const char *what)
{
    struct item *it;
    struct waiter w = {0};
    while (!(it = ring_peek(r)))
        if (!waiter_spin(&w, what))
            return 0;
    *out = *it;
    ring_drop(r);
    return 1;
}

/* ---- pair loops on 1 or more threads ---- */

enum op {
    OP_POOL,           /* explicit pool, released unvouched */
    OP_POOL_VOUCHED,   /* explicit pool, released with CUPOOL_RELEASE_NOT_CAPTURING */
    OP_PROMISED,       /* CUPOOL_POOL_CONTEXT_OUTLIVES pool, released vouched */
    OP_EVENT_PROMISED, /* CUPOOL_POOL_CONTEXT_OUTLIVES event pool */
    OP_PROMISED_CALLS, /* the promised pair plus, inline, the driver calls of a checked pool */
    OP_CUPOOL,         /* cupool_stream_acquire/_release, one key */
    OP_CUPOOL_KEYS,    /* the same, keys taken in turn */
    OP_HAND_CTX,       /* a hand-written pool out of line: the pool row's calls + records */
    OP_HAND_NULL,      /* the same with cuCtxGetId(NULL): the current-context row's */
    OP_HAND_GUARDED,   /* OP_HAND_CTX with the guarantees cupool gives: guard, retire, counts */
    OP_FLOOR_CTX,      /* pop + cuCtxGetId(ctx) + cuStreamIsCapturing, push */
    OP_FLOOR_NULL,     /* pop + cuCtxGetId(NULL) + cuStreamIsCapturing, push */
    OP_FLOOR_KEYS,     /* the same on one driver-made stream per key, taken in turn */
    OP_FLOOR_LOCAL     /* pop, push */
};

struct key {
    unsigned int flags;
    int priority;
};

struct pjob {
    enum op op;
    const struct key *keys;
    int nkeys, k;
    int timed;
    long n;
    struct hist *ha, *hr;
    pthread_barrier_t *start;
    double ns;
    CUstream fs; /* the floor's stream, created by the driver */
    int cpu;     /* pinned to the cpu-th allowed CPU (pin_self) */
    void *volatile stack[16];
    volatile unsigned int count;
    pthread_t t;
};

/*
 * The hand-written equivalent of a checked pool pair, the least any library pool with an
 * ownership check does: out-of-line acquire and release reached through function pointers (a
 * library's calls go through its PLT); a thread-local stack of per-handle 64-byte records; on
 * acquire the pop, the context check (cuCtxGetId, against the id the pool was made in), the
 * capture check (cuStreamIsCapturing) and one write to the record; on release the thread's
 * last-acquired record matched against the handle, its state checked, one write, the push.
 * No lookup for a handle other than the last one, no statistics, no lifecycle guard: less
 * than a library must do, so what cupool adds over it is an upper bound on its own overhead.
 */
struct hpool_rec {
    _Alignas(64) CUstream handle;
    volatile unsigned int state; /* 0 idle, 1 owned */
};
struct hpool_tls {
    struct hpool_rec *items[16];
    unsigned int count;
    struct hpool_rec *last;
    _Atomic unsigned int in_driver; /* the guarded pool's: raised around its driver calls */
    unsigned long long acquires, releases; /* the guarded pool's statistics */
    struct hpool_rec recs[16];
};
static __thread struct hpool_tls *hpool_tl;
static unsigned long long hpool_ctx_id;
/* The guarded pool's lifecycle state (1: running) and its pool's liveness (1: not retired). */
static _Atomic int hpool_running = 1, hpool_alive = 1;

static __attribute__((noinline)) CUresult hpool_acquire(CUcontext c, CUstream *out)
{
    struct hpool_tls *t = hpool_tl;
    if (t == NULL || t->count == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct hpool_rec *rec = t->items[t->count - 1];
    if (rec->state != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    unsigned long long id;
    CUstreamCaptureStatus cs;
    CUresult r = d.cuCtxGetId(c, &id);
    if (r != CUDA_SUCCESS || id != hpool_ctx_id)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_CONTEXT;
    r = d.cuStreamIsCapturing(rec->handle, &cs);
    if (r != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE)
        return r != CUDA_SUCCESS ? r : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    t->count--;
    rec->state = 1;
    t->last = rec;
    *out = rec->handle;
    return CUDA_SUCCESS;
}

static __attribute__((noinline)) CUresult hpool_release(CUstream s)
{
    struct hpool_tls *t = hpool_tl;
    struct hpool_rec *rec = t ? t->last : NULL;
    if (rec == NULL || rec->handle != s || rec->state != 1 || t->count == 16)
        return CUDA_ERROR_INVALID_HANDLE;
    rec->state = 0;
    t->items[t->count++] = rec;
    return CUDA_SUCCESS;
}

static CUresult (*volatile hpool_acquire_fn)(CUcontext, CUstream *) = hpool_acquire;
static CUresult (*volatile hpool_release_fn)(CUstream) = hpool_release;

/*
 * The same pool with what cupool's explicit pool promises beyond the ownership check, written
 * the least costly way: its driver calls under a guard that a closing thread can wait for
 * (the thread's in-driver count raised, a compiler fence, the lifecycle state read: the
 * reader's side of an asymmetric handshake whose closer issues membarrier(2); the count
 * lowered after the calls), a pool that can be retired (its liveness read before a hit), the
 * lifecycle state read on release (no push once closing began), and one statistics count per
 * acquire and per release. Its floor row: what these guarantees cost a hand-written pool.
 */
static __attribute__((noinline)) CUresult hpool_acquire_guarded(CUcontext c, CUstream *out)
{
    struct hpool_tls *t = hpool_tl;
    if (t == NULL || t->count == 0 || !atomic_load_explicit(&hpool_alive, memory_order_relaxed))
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct hpool_rec *rec = t->items[t->count - 1];
    if (rec->state != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    atomic_store_explicit(&t->in_driver,
                          atomic_load_explicit(&t->in_driver, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    CUresult r = CUDA_ERROR_DEINITIALIZED;
    if (atomic_load_explicit(&hpool_running, memory_order_relaxed)) {
        unsigned long long id;
        CUstreamCaptureStatus cs;
        r = d.cuCtxGetId(c, &id);
        if (r == CUDA_SUCCESS && id != hpool_ctx_id)
            r = CUDA_ERROR_INVALID_CONTEXT;
        if (r == CUDA_SUCCESS)
            r = d.cuStreamIsCapturing(rec->handle, &cs);
        if (r == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE)
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    atomic_store_explicit(&t->in_driver,
                          atomic_load_explicit(&t->in_driver, memory_order_relaxed) - 1,
                          memory_order_release);
    if (r != CUDA_SUCCESS)
        return r;
    t->count--;
    rec->state = 1;
    t->acquires++;
    t->last = rec;
    *out = rec->handle;
    return CUDA_SUCCESS;
}

static __attribute__((noinline)) CUresult hpool_release_guarded(CUstream s)
{
    struct hpool_tls *t = hpool_tl;
    struct hpool_rec *rec = t ? t->last : NULL;
    if (rec == NULL || rec->handle != s || rec->state != 1 || t->count == 16 ||
        !atomic_load_explicit(&hpool_running, memory_order_relaxed))
        return CUDA_ERROR_INVALID_HANDLE;
    rec->state = 0;
    t->items[t->count++] = rec;
    t->releases++;
    return CUDA_SUCCESS;
}

static CUresult (*volatile hpool_acquire_guarded_fn)(CUcontext, CUstream *) =
    hpool_acquire_guarded;
static CUresult (*volatile hpool_release_guarded_fn)(CUstream) = hpool_release_guarded;

static inline __attribute__((always_inline)) CUresult pair_once(struct pjob *j, enum op op,
                                                                int timed)
{
    CUresult r;
    CUstream s = NULL;
    CUevent e = NULL;
    unsigned long long id;
    CUstreamCaptureStatus cs;
    uint64_t t0 = 0, t1 = 0, t2 = 0;
    if (timed)
        t0 = ticks();
    switch (op) {
    case OP_POOL:
    case OP_POOL_VOUCHED: r = cupool_stream_pool_acquire(spool, &s); break;
    case OP_PROMISED: r = cupool_stream_pool_acquire(promised_spool, &s); break;
    case OP_PROMISED_CALLS:
        r = cupool_stream_pool_acquire(promised_spool, &s);
        if (r == CUDA_SUCCESS)
            r = d.cuCtxGetId(ctx, &id);
        if (r == CUDA_SUCCESS)
            r = d.cuStreamIsCapturing(s, &cs);
        break;
    case OP_EVENT_PROMISED: r = cupool_event_pool_acquire(promised_epool, &e); break;
    case OP_CUPOOL: r = cupool_stream_acquire(&s, SFLAGS, 0); break;
    case OP_HAND_CTX: r = hpool_acquire_fn(ctx, &s); break;
    case OP_HAND_NULL: r = hpool_acquire_fn(NULL, &s); break;
    case OP_HAND_GUARDED: r = hpool_acquire_guarded_fn(ctx, &s); break;
    case OP_CUPOOL_KEYS: {
        const struct key *k = &j->keys[j->k];
        j->k = j->k + 1 == j->nkeys ? 0 : j->k + 1;
        r = cupool_stream_acquire(&s, k->flags, k->priority);
        break;
    }
    case OP_FLOOR_CTX:
    case OP_FLOOR_NULL:
        s = j->stack[--j->count];
        r = d.cuCtxGetId(op == OP_FLOOR_CTX ? ctx : NULL, &id);
        if (r == CUDA_SUCCESS)
            r = d.cuStreamIsCapturing(s, &cs);
        break;
    case OP_FLOOR_KEYS:
        s = j->stack[j->k];
        r = d.cuCtxGetId(NULL, &id);
        if (r == CUDA_SUCCESS)
            r = d.cuStreamIsCapturing(s, &cs);
        break;
    default:
        s = j->stack[--j->count];
        r = CUDA_SUCCESS;
        break;
    }
    if (r != CUDA_SUCCESS)
        return r;
    if (timed)
        t1 = ticks();
    switch (op) {
    case OP_POOL: r = cupool_stream_pool_release(spool, s, 0); break;
    case OP_POOL_VOUCHED: r = cupool_stream_pool_release(spool, s, CUPOOL_RELEASE_NOT_CAPTURING); break;
    case OP_PROMISED:
    case OP_PROMISED_CALLS:
        r = cupool_stream_pool_release(promised_spool, s, CUPOOL_RELEASE_NOT_CAPTURING);
        break;
    case OP_EVENT_PROMISED: r = cupool_event_pool_release(promised_epool, e); break;
    case OP_CUPOOL:
    case OP_CUPOOL_KEYS: r = cupool_stream_release(s); break;
    case OP_HAND_CTX:
    case OP_HAND_NULL: r = hpool_release_fn(s); break;
    case OP_HAND_GUARDED: r = hpool_release_guarded_fn(s); break;
    case OP_FLOOR_KEYS:
        j->stack[j->k] = s;
        j->k = j->k + 1 == j->nkeys ? 0 : j->k + 1;
        break;
    default: j->stack[j->count++] = s; break;
    }
    if (timed) {
        t2 = ticks();
        hist_add(j->ha, t1 - t0);
        hist_add(j->hr, t2 - t1);
    }
    return r;
}

#define PAIR_CASE(OP)                                                  \
    case OP:                                                           \
        if (timed)                                                     \
            for (long i = 0; i < n && r == CUDA_SUCCESS; i++)          \
                r = pair_once(j, OP, 1);                               \
        else                                                           \
            for (long i = 0; i < n && r == CUDA_SUCCESS; i++)          \
                r = pair_once(j, OP, 0);                               \
        break;

static CUresult pairs(struct pjob *j, long n, int timed)
{
    CUresult r = CUDA_SUCCESS;
    switch (j->op) {
        PAIR_CASE(OP_POOL)
        PAIR_CASE(OP_POOL_VOUCHED)
        PAIR_CASE(OP_PROMISED)
        PAIR_CASE(OP_EVENT_PROMISED)
        PAIR_CASE(OP_PROMISED_CALLS)
        PAIR_CASE(OP_CUPOOL)
        PAIR_CASE(OP_CUPOOL_KEYS)
        PAIR_CASE(OP_HAND_CTX)
        PAIR_CASE(OP_HAND_NULL)
        PAIR_CASE(OP_HAND_GUARDED)
        PAIR_CASE(OP_FLOOR_CTX)
        PAIR_CASE(OP_FLOOR_NULL)
        PAIR_CASE(OP_FLOOR_KEYS)
        PAIR_CASE(OP_FLOOR_LOCAL)
    }
    return r;
}

static void *pair_thread(void *arg)
{
    struct pjob *j = arg;
    int floor = j->op >= OP_FLOOR_CTX;
    pin_self(j->cpu);
    WCHECK(d.cuCtxSetCurrent(ctx));
    if (j->op == OP_FLOOR_KEYS) {
        for (int k = 0; k < j->nkeys && k < 16; k++)
            WCHECK(d.cuStreamCreateWithPriority((CUstream *)&j->stack[k], j->keys[k].flags,
                                                j->keys[k].priority));
    } else if (floor) {
        WCHECK(d.cuStreamCreateWithPriority(&j->fs, SFLAGS, 0));
        j->stack[0] = j->fs;
        j->count = 1;
    } else if (j->op == OP_HAND_CTX || j->op == OP_HAND_NULL || j->op == OP_HAND_GUARDED) {
        hpool_tl = calloc(1, sizeof *hpool_tl);
        if (!hpool_tl)
            wl_fail("calloc", CUDA_ERROR_OUT_OF_MEMORY, NULL);
        WCHECK(d.cuStreamCreateWithPriority(&j->fs, SFLAGS, 0));
        for (int k = 0; k < 16; k++) {
            hpool_tl->recs[k].handle = j->fs;
            hpool_tl->items[hpool_tl->count++] = &hpool_tl->recs[k];
        }
    }
    {
        CUresult r = pairs(j, 1000, 0); /* warm: this thread's magazines are loaded */
        if (r != CUDA_SUCCESS)
            wl_fail("warm-up pairs", r, NULL);
    }
out:
    pthread_barrier_wait(j->start);
    if (!atomic_load(&aborted)) {
        uint64_t t0 = mono_ns();
        CUresult r = pairs(j, j->n, j->timed);
        j->ns = (double)(mono_ns() - t0) / (double)j->n;
        if (r != CUDA_SUCCESS)
            wl_fail("pairs", r, NULL);
    }
    if (j->fs) {
        CUresult r = d.cuStreamDestroy(j->fs);
        if (r != CUDA_SUCCESS)
            wl_fail("cuStreamDestroy (floor stream)", r, NULL);
    }
    free(hpool_tl);
    hpool_tl = NULL;
    for (int k = 0; j->op == OP_FLOOR_KEYS && k < j->nkeys && k < 16; k++)
        if (j->stack[k]) {
            CUresult r = d.cuStreamDestroy((CUstream)j->stack[k]);
            if (r != CUDA_SUCCESS)
                wl_fail("cuStreamDestroy (floor stream)", r, NULL);
        }
    return NULL;
}

/* Mean over threads of each thread's ns per pair; with ha/hr, every call timed into them. */
static double run_pairs(enum op op, const struct key *keys, int nkeys, int threads, long n,
                        struct hist *ha, struct hist *hr)
{
    struct pjob *j = calloc((size_t)threads, sizeof *j);
    pthread_barrier_t start;
    if (!j) {
        fprintf(stderr, "cupool-bench workloads: out of memory\n");
        exit(1);
    }
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++) {
        j[i].op = op;
        j[i].cpu = i;
        j[i].keys = keys;
        j[i].nkeys = nkeys;
        j[i].n = n;
        j[i].start = &start;
        j[i].timed = ha != NULL;
        if (ha) {
            j[i].ha = hist_new();
            j[i].hr = hist_new();
        }
        spawn(&j[i].t, pair_thread, &j[i]);
    }
    double sum = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(j[i].t, NULL);
        sum += j[i].ns;
        if (ha) {
            hist_merge(ha, j[i].ha);
            hist_merge(hr, j[i].hr);
            free(j[i].ha);
            free(j[i].hr);
        }
    }
    pthread_barrier_destroy(&start);
    free(j);
    die_if_failed();
    return sum / threads;
}

/* A row of pairs beside its floor (another op): PAIR_ROUNDS untimed rounds of each in turns
 * (the round of the median ratio, median_round), then one timed run of each; driver calls
 * counted over the row's own runs. */
#define PAIR_ROUNDS 7

static void pairs_vs_floor(struct row *row, enum op op, const struct key *keys, int nkeys,
                           enum op fop, const struct key *fkeys, int fnkeys, int threads,
                           long n)
{
    /* PAIR_ROUNDS rounds of half the pairs, the row first in even rounds and the floor first
     * in odd ones, so that neither always runs on a machine the other just warmed */
    double a[PAIR_ROUNDS], f[PAIR_ROUNDS];
    struct counts c0;
    long half = n / 2 > 1000 ? n / 2 : n;
    for (int i = 0; i < PAIR_ROUNDS; i++) {
        if (i % 2)
            f[i] = run_pairs(fop, fkeys, fnkeys, threads, half, NULL, NULL);
        counts_now(&c0);
        a[i] = run_pairs(op, keys, nkeys, threads, half, NULL, NULL);
        counts_add_since(&row->dc, &c0);
        if (i % 2 == 0)
            f[i] = run_pairs(fop, fkeys, fnkeys, threads, half, NULL, NULL);
    }
    struct hist *ha = hist_new(), *hr = hist_new(), *fa = hist_new(), *fr = hist_new();
    counts_now(&c0);
    run_pairs(op, keys, nkeys, threads, n, ha, hr);
    counts_add_since(&row->dc, &c0);
    run_pairs(fop, fkeys, fnkeys, threads, n, fa, fr);
    median_round(row, a, f, PAIR_ROUNDS);
    row->acq = lat_of(ha);
    row->rel = lat_of(hr);
    row->facq = lat_of(fa);
    row->frel = lat_of(fr);
    /* each thread's 1000 warm-up pairs of each run are counted too */
    row->ops = (uint64_t)threads * ((uint64_t)(half + 1000) * PAIR_ROUNDS + (uint64_t)n + 1000);
    row->counted = 1;
    free(ha), free(hr), free(fa), free(fr);
}

/* ---- handoff ---- */

enum ho_variant { HO_PROMISED, HO_POOL, HO_CUPOOL };
static const char *const ho_names[3] = {"pool-promised", "pool", "current-context"};
static const char *const ho_floors[3] = {
    "ring + record writes", "ring + records + cuCtxGetId(ctx)",
    "ring + records + cuCtxGetId(NULL) + cuStreamIsCapturing"};

#define HO_CAP 1024
#define HO_HANDLES 2048 /* floor: more than can be in flight */

struct ho_record {
    _Alignas(64) volatile uintptr_t owner;
};

struct ho_job {
    enum ho_variant v;
    int floor;
    long n;
    struct ring *ring;
    struct hist *ha, *hr; /* NULL: untimed */
    pthread_barrier_t *start;
    CUstream *pre;
    struct ho_record *rec;
};

static void *ho_producer(void *arg)
{
    struct ho_job *j = arg;
    WCHECK(d.cuCtxSetCurrent(ctx));
out:
    pthread_barrier_wait(j->start);
    for (long i = 0; i < j->n && !atomic_load_explicit(&aborted, memory_order_relaxed); i++) {
        CUstream s = NULL;
        CUresult r = CUDA_SUCCESS;
        unsigned long long id;
        CUstreamCaptureStatus cs;
        uint64_t t0 = j->ha ? ticks() : 0;
        if (j->floor) {
            s = j->pre[i & (HO_HANDLES - 1)];
            j->rec[i & (HO_HANDLES - 1)].owner = 1;
            if (j->v == HO_POOL)
                r = d.cuCtxGetId(ctx, &id);
            else if (j->v == HO_CUPOOL && (r = d.cuCtxGetId(NULL, &id)) == CUDA_SUCCESS)
                r = d.cuStreamIsCapturing(s, &cs);
        } else if (j->v == HO_CUPOOL)
            r = cupool_stream_acquire(&s, SFLAGS, 0);
        else
            r = cupool_stream_pool_acquire(j->v == HO_POOL ? spool : promised_spool, &s);
        if (j->ha)
            hist_add(j->ha, ticks() - t0);
        if (r != CUDA_SUCCESS) {
            wl_fail(j->floor ? "floor driver call" : "acquire", r, NULL);
            break;
        }
        struct item it = {s, NULL, NULL, (uintptr_t)i};
        if (!ring_push(j->ring, &it, "handoff ring full"))
            break;
    }
    return NULL;
}

static void *ho_consumer(void *arg)
{
    struct ho_job *j = arg;
    pthread_barrier_wait(j->start);
    for (long i = 0; i < j->n; i++) {
        struct item it;
        if (!ring_pop(j->ring, &it, "handoff ring empty"))
            break;
        CUresult r = CUDA_SUCCESS;
        uint64_t t0 = j->hr ? ticks() : 0;
        if (j->floor)
            j->rec[it.i & (HO_HANDLES - 1)].owner = 0;
        else if (j->v == HO_CUPOOL)
            r = cupool_stream_release((CUstream)it.a);
        else
            r = cupool_stream_pool_release(j->v == HO_POOL ? spool : promised_spool,
                                           (CUstream)it.a, CUPOOL_RELEASE_NOT_CAPTURING);
        if (j->hr)
            hist_add(j->hr, ticks() - t0);
        if (r != CUDA_SUCCESS) {
            wl_fail("release", r, NULL);
            break;
        }
    }
    return NULL;
}

static CUstream ho_pre[HO_HANDLES];
static struct ho_record *ho_rec;

/* ns per handle, from the start until the consumer released the last one */
static double ho_run(enum ho_variant v, int floor, long n, struct hist *ha, struct hist *hr)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 3);
    struct ho_job j = {v, floor, n, ring_new(HO_CAP), ha, hr, &start, ho_pre, ho_rec};
    pthread_t a, b;
    spawn(&a, ho_producer, &j);
    spawn(&b, ho_consumer, &j);
    pthread_barrier_wait(&start);
    uint64_t t0 = mono_ns();
    pthread_join(b, NULL);
    uint64_t t1 = mono_ns();
    pthread_join(a, NULL);
    pthread_barrier_destroy(&start);
    free(j.ring);
    die_if_failed();
    return (double)(t1 - t0) / (double)n;
}

static void wl_handoff(void)
{
    long n = iters(200000);
    ho_rec = aligned_alloc(64, sizeof(struct ho_record) * HO_HANDLES);
    if (!ho_rec) {
        fprintf(stderr, "cupool-bench workloads: out of memory\n");
        exit(1);
    }
    memset(ho_rec, 0, sizeof(struct ho_record) * HO_HANDLES);
    for (int i = 0; i < HO_HANDLES; i++)
        MCHECK(d.cuStreamCreateWithPriority(&ho_pre[i], SFLAGS, 0));
    for (int v = HO_PROMISED; v <= HO_CUPOOL; v++) {
        struct row *row = row_new(W_HANDOFF, "handle", "%s", ho_names[v]);
        snprintf(row->params, sizeof row->params,
                 "\"handles\":%ld,\"ring_slots\":%d,\"vouched\":%s", n, HO_CAP,
                 v == HO_CUPOOL ? "false" : "true");
        snprintf(row->floor, sizeof row->floor, "%s", ho_floors[v]);
        /* warm-up, timed as the last run is: a slower consumer lets the producer run the
         * full 1024 ahead, and the class grows to that bound here, not in a measured run */
        struct hist *wa = hist_new(), *wr = hist_new();
        ho_run((enum ho_variant)v, 0, n / 2 + 1, wa, wr);
        free(wa), free(wr);
        /* then on until past the first decay tick and a round without request-thread
         * creates (steady state, above), 30 s at most */
        for (;;) {
            uint64_t c = request_calls_now();
            ho_run((enum ho_variant)v, 0, n / 2 + 1, NULL, NULL);
            die_if_failed();
            uint64_t now = mono_ns();
            if ((now - wl_start_ns >= decay_tick_ns() + 100000000u && request_calls_now() == c) ||
                now - wl_start_ns >= 30000000000u)
                break;
        }
        double a[REPEATS], f[REPEATS];
        struct counts c0;
        for (int i = 0; i < REPEATS; i++) {
            counts_now(&c0);
            a[i] = ho_run((enum ho_variant)v, 0, n, NULL, NULL);
            counts_add_since(&row->dc, &c0);
            f[i] = ho_run((enum ho_variant)v, 1, n, NULL, NULL);
        }
        struct hist *ha = hist_new(), *hr = hist_new(), *fa = hist_new(), *fr = hist_new();
        counts_now(&c0);
        ho_run((enum ho_variant)v, 0, n, ha, hr);
        counts_add_since(&row->dc, &c0);
        ho_run((enum ho_variant)v, 1, n, fa, fr);
        row->ns = median3(a, REPEATS);
        row->floor_ns = median3(f, REPEATS);
        row->acq = lat_of(ha), row->rel = lat_of(hr);
        row->facq = lat_of(fa), row->frel = lat_of(fr);
        row->ops = (uint64_t)n * (REPEATS + 1);
        row->counted = 1;
        free(ha), free(hr), free(fa), free(fr);
    }
    for (int i = 0; i < HO_HANDLES; i++)
        MCHECK(d.cuStreamDestroy(ho_pre[i]));
    free(ho_rec);
}

/* ---- bursts ---- */

/* `rounds` bursts of M acquires then M releases from pool (released vouched); ns per pair.
 * With ha/hr every call is timed. gap_ns: a pause between rounds (not counted). */
static double burst_run(cupool_stream_pool_t pool, CUstream *s, int M, long rounds,
                        struct hist *ha, struct hist *hr, long gap_ns)
{
    uint64_t busy = 0, start = mono_ns();
    for (long k = 0; k < rounds; k++) {
        uint64_t t0 = gap_ns ? mono_ns() : 0;
        for (int i = 0; i < M; i++) {
            uint64_t a = ha ? ticks() : 0;
            CUresult r = cupool_stream_pool_acquire(pool, &s[i]);
            if (ha)
                hist_add(ha, ticks() - a);
            if (r != CUDA_SUCCESS) {
                wl_fail("cupool_stream_pool_acquire", r, NULL);
                return 0;
            }
        }
        for (int i = 0; i < M; i++) {
            uint64_t a = hr ? ticks() : 0;
            CUresult r = cupool_stream_pool_release(pool, s[i], CUPOOL_RELEASE_NOT_CAPTURING);
            if (hr)
                hist_add(hr, ticks() - a);
            if (r != CUDA_SUCCESS) {
                wl_fail("cupool_stream_pool_release", r, NULL);
                return 0;
            }
        }
        if (gap_ns) { /* the pause is not counted */
            busy += mono_ns() - t0;
            struct timespec ts = {0, gap_ns};
            nanosleep(&ts, NULL);
        }
    }
    if (!gap_ns)
        busy = mono_ns() - start;
    return (double)busy / ((double)rounds * M);
}

static void wl_burst(void)
{
    static const int Ms[] = {1, 64, 128, 256, 1024};
    long total = iters(262144); /* pairs per run, whatever M */
    CUstream *s = malloc(sizeof(CUstream) * 1024);
    if (!s)
        exit(1);
    burst_run(spool, s, 1, 1000, NULL, NULL, 0);
    for (size_t m = 0; m < sizeof Ms / sizeof *Ms; m++) {
        int M = Ms[m];
        long rounds = total / M > 4 ? total / M : 4, warm = rounds / 4 > 8 ? rounds / 4 : 8;
        struct row *row = row_new(W_BURST, "pair", "M=%d", M);
        snprintf(row->params, sizeof row->params, "\"M\":%d,\"rounds\":%ld,\"warmup_rounds\":%ld",
                 M, rounds, warm);
        snprintf(row->floor, sizeof row->floor, "M=1 (same run, in turns)");
        burst_run(spool, s, M, warm, NULL, NULL, 0);
        die_if_failed();
        double a[REPEATS], f[REPEATS];
        struct counts c0;
        for (int i = 0; i < REPEATS; i++) {
            counts_now(&c0);
            a[i] = burst_run(spool, s, M, rounds, NULL, NULL, 0);
            counts_add_since(&row->dc, &c0);
            f[i] = burst_run(spool, s, 1, (long)rounds * M, NULL, NULL, 0);
            die_if_failed();
        }
        struct hist *ha = hist_new(), *hr = hist_new(), *fa = hist_new(), *fr = hist_new();
        counts_now(&c0);
        burst_run(spool, s, M, rounds, ha, hr, 0);
        counts_add_since(&row->dc, &c0);
        burst_run(spool, s, 1, (long)rounds * M, fa, fr, 0);
        die_if_failed();
        row->ns = median3(a, REPEATS);
        row->floor_ns = median3(f, REPEATS);
        row->acq = lat_of(ha), row->rel = lat_of(hr);
        row->facq = lat_of(fa), row->frel = lat_of(fr);
        row->ops = (uint64_t)rounds * (uint64_t)M * (REPEATS + 1);
        row->counted = 1;
        free(ha), free(hr), free(fa), free(fr);
    }
    free(s);
}

/* Is there a class of this context with these stream flags and (clamped) priority? */
static int stream_class_exists(unsigned int flags, int priority)
{
    size_t n = 0;
    cupool_class_stats_t *st = class_stats_all(&n);
    int found = 0;
    for (size_t i = 0; i < n; i++)
        found |= st[i].kind == CUPOOL_KIND_STREAM && st[i].context_id == ctx_id &&
                 st[i].flags == flags && st[i].priority == priority && st[i].context_alive;
    free(st);
    return found;
}

static void wl_burst_cold(void)
{
    int prio = prio_greatest; /* a class no earlier workload of the default order uses */
    int existed = stream_class_exists(SFLAGS, prio);
    cupool_stream_pool_t pool;
    MCHECK(cupool_stream_pool_get(&pool, ctx, SFLAGS, prio));
    CUstream *s = malloc(sizeof(CUstream) * 2048);
    if (!s)
        exit(1);
    long warm_rounds = 10;
    static const struct {
        int M;
        int warm;
    } steps[4] = {{1024, 0}, {1024, 1}, {2048, 0}, {2048, 1}};
    struct row *cold = NULL, *first = NULL;
    for (int k = 0; k < 4; k++) {
        int M = steps[k].M;
        long rounds = steps[k].warm ? warm_rounds : 1;
        struct row *row = row_new(W_BURST_COLD, "pair", "M=%d %s", M,
                                  steps[k].warm ? "next 10 bursts" :
                                  k ? "first, beyond idle" : "first, nothing idle");
        snprintf(row->params, sizeof row->params,
                 "\"M\":%d,\"rounds\":%ld,\"gap_ms\":%d,\"priority\":%d,\"class_new\":%s", M,
                 rounds, steps[k].warm ? 2 : 0, prio, existed ? "false" : "true");
        struct hist *ha = hist_new(), *hr = hist_new();
        struct counts c0;
        counts_now(&c0);
        burst_run(pool, s, M, rounds, ha, hr, steps[k].warm ? 2000000 : 0);
        counts_add_since(&row->dc, &c0);
        die_if_failed();
        row->acq = lat_of(ha), row->rel = lat_of(hr);
        row->ns = row->acq.mean + row->rel.mean;
        row->ops = (uint64_t)rounds * (uint64_t)M;
        row->counted = 1;
        if (!first)
            first = row;
        if (!steps[k].warm)
            cold = row;
        else if (cold) {
            snprintf(cold->floor, sizeof cold->floor, "the next 10 bursts of M=%d", M);
            cold->floor_ns = row->ns;
        }
        free(ha), free(hr);
        if (!steps[k].warm) { /* a pause, as a service between bursts */
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    snprintf(first->note, sizeof first->note, "ns/op: means of the timed single calls%s",
             existed ? "; the class existed before this workload (trimmed at its start)" : "");
    free(s);
}

/* ---- drop-in batches ---- */

static void dropin_batch(int events, int driver, CUstream *s, CUevent *e, long rounds,
                         struct hist *ha, struct hist *hr)
{
    for (long k = 0; k < rounds && !atomic_load(&aborted); k++) {
        for (int i = 0; i < 1000; i++) {
            uint64_t t = ha ? ticks() : 0;
            CUresult r = events ? (driver ? d.cuEventCreate(&e[i], EFLAGS)
                                          : cupool_cuEventCreate(&e[i], EFLAGS))
                                : (driver ? d.cuStreamCreateWithPriority(&s[i], 0, 0)
                                          : cupool_cuStreamCreate(&s[i], 0));
            if (ha)
                hist_add(ha, ticks() - t);
            if (r != CUDA_SUCCESS) {
                wl_fail(events ? "create (event)" : "create (stream)", r, NULL);
                return;
            }
        }
        for (int i = 0; i < 1000; i++) {
            uint64_t t = hr ? ticks() : 0;
            CUresult r = events ? (driver ? d.cuEventDestroy(e[i]) : cupool_cuEventDestroy(e[i]))
                                : (driver ? d.cuStreamDestroy(s[i]) : cupool_cuStreamDestroy(s[i]));
            if (hr)
                hist_add(hr, ticks() - t);
            if (r != CUDA_SUCCESS) {
                wl_fail(events ? "destroy (event)" : "destroy (stream)", r, NULL);
                return;
            }
        }
    }
}

static void wl_dropin(void)
{
    long rounds = iters(100), drounds = iters(10);
    CUstream *s = malloc(sizeof(CUstream) * 1000);
    CUevent *e = malloc(sizeof(CUevent) * 1000);
    if (!s || !e)
        exit(1);
    for (int ev = 0; ev < 2; ev++) {
        struct row *row = row_new(W_DROPIN, "create+destroy", ev ? "events" : "streams");
        snprintf(row->params, sizeof row->params,
                 "\"batch\":1000,\"rounds\":%ld,\"warmup_rounds\":1,\"driver_rounds\":%ld,"
                 "\"flags\":%u", rounds, drounds, ev ? EFLAGS : 0u);
        snprintf(row->floor, sizeof row->floor, "the raw driver, the same batches (x%ld)",
                 drounds);
        struct hist *ha = hist_new(), *hr = hist_new(), *fa = hist_new(), *fr = hist_new();
        dropin_batch(ev, 0, s, e, 1, NULL, NULL); /* warm-up round */
        die_if_failed();
        struct counts c0;
        counts_now(&c0);
        uint64_t t0 = mono_ns();
        dropin_batch(ev, 0, s, e, rounds, NULL, NULL);
        row->ns = (double)(mono_ns() - t0) / ((double)rounds * 1000);
        die_if_failed();
        dropin_batch(ev, 0, s, e, rounds, ha, hr);
        counts_add_since(&row->dc, &c0);
        die_if_failed();
        t0 = mono_ns();
        dropin_batch(ev, 1, s, e, drounds, NULL, NULL);
        row->floor_ns = (double)(mono_ns() - t0) / ((double)drounds * 1000);
        dropin_batch(ev, 1, s, e, drounds, fa, fr);
        die_if_failed();
        row->acq = lat_of(ha), row->rel = lat_of(hr);
        row->facq = lat_of(fa), row->frel = lat_of(fr);
        row->ops = (uint64_t)rounds * 2000;
        row->counted = 1;
        snprintf(row->note, sizeof row->note,
                 "%.2f driver creates per 1000 wrapper creates (%.2f on request threads); "
                 "ratio < 1: faster than the driver",
                 per_1000(row->dc.creates, row->ops), per_1000(row->dc.req_creates, row->ops));
        snprintf(row->extra, sizeof row->extra, "\"driver_creates_per_1000_wrapper_creates\":%.3f",
                 per_1000(row->dc.creates, row->ops));
        free(ha), free(hr), free(fa), free(fr);
    }
    free(s);
    free(e);
}

/* ---- class clash ---- */

static int clamp_prio(int p)
{
    /* priorities: least (numerically largest, usually 0) .. greatest (e.g. -5) */
    return p > prio_least ? prio_least : p < prio_greatest ? prio_greatest : p;
}

static int distinct_classes(const struct key *k, int n)
{
    int count = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = k[j].flags == k[i].flags && clamp_prio(k[j].priority) == clamp_prio(k[i].priority);
        count += !seen;
    }
    return count;
}

static void wl_clash(void)
{
    long n = iters(1000000);
    static const struct key one[1] = {{CU_STREAM_NON_BLOCKING, 0}};
    static const struct key two[2] = {{CU_STREAM_NON_BLOCKING, 0}, {CU_STREAM_NON_BLOCKING, -4}};
    struct key all[64], many[89];
    int nall = 0;
    for (int f = 0; f < 2; f++)
        for (int p = prio_least; p >= prio_greatest && nall < 64; p--)
            all[nall++] = (struct key){f ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT, p};
    /* 89 keys: both flags, priorities spread around the device's range (clamped) */
    for (int i = 0; i < 89; i++)
        many[i] = (struct key){i % 2 ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT,
                               prio_least + 22 - i / 2};
    struct row *base = row_new(W_CLASH, "pair", "1 key");
    snprintf(base->params, sizeof base->params, "\"keys\":1,\"classes\":1,\"pairs\":%ld", n);
    snprintf(base->floor, sizeof base->floor, "cuCtxGetId(NULL) + cuStreamIsCapturing + pop/push");
    pairs_vs_floor(base, OP_CUPOOL_KEYS, one, 1, OP_FLOOR_NULL, NULL, 0, 1, n);
    const struct {
        const struct key *k;
        int n;
        const char *what;
    } sets[3] = {{two, 2, "2 keys (priority 0, -4)"}, {all, nall, "every class"},
                 {many, 89, "89 keys"}};
    for (int i = 0; i < 3; i++) {
        int classes = distinct_classes(sets[i].k, sets[i].n);
        struct row *row = row_new(W_CLASH, "pair", "%s", sets[i].what);
        if (i)
            snprintf(row->name, sizeof row->name, "%d keys, %d classes", sets[i].n, classes);
        snprintf(row->params, sizeof row->params,
                 "\"keys\":%d,\"classes\":%d,\"pairs\":%ld,\"priority_range\":[%d,%d]",
                 sets[i].n, classes, n, prio_least, prio_greatest);
        snprintf(row->floor, sizeof row->floor, "1 key (in turns)");
        pairs_vs_floor(row, OP_CUPOOL_KEYS, sets[i].k, sets[i].n, OP_CUPOOL_KEYS, one, 1, 1, n);
        if (i == 0) {
            /* what the driver's own calls cost alternating two streams, against one */
            struct row *dr = row_new(W_CLASH, "pair", "driver, 2 streams (priority 0, -4)");
            snprintf(dr->params, sizeof dr->params, "\"keys\":2,\"pairs\":%ld", n);
            snprintf(dr->floor, sizeof dr->floor, "driver, 1 stream (in turns)");
            pairs_vs_floor(dr, OP_FLOOR_KEYS, two, 2, OP_FLOOR_KEYS, one, 1, 1, n);
        }
        if (i == 2)
            snprintf(row->note, sizeof row->note,
                     "stream classes are (flags, clamped priority): 2 flags x %d priorities "
                     "[%d, %d] give at most %d per context",
                     prio_least - prio_greatest + 1, prio_greatest, prio_least, nall);
    }
}

/* ---- explicit pools ---- */

static void wl_explicit(void)
{
    static const struct {
        const char *name;
        enum op op, fop;
        const char *floor;
    } v[8] = {
        {"pool", OP_POOL, OP_FLOOR_CTX, "cuCtxGetId(ctx) + cuStreamIsCapturing + pop/push"},
        /* the least a library pool with an ownership check does (hand_acquire) */
        {"by hand: pool", OP_HAND_CTX, OP_FLOOR_CTX,
         "cuCtxGetId(ctx) + cuStreamIsCapturing + pop/push"},
        /* the same with cupool's guarantees beyond the check (hpool_acquire_guarded) */
        {"by hand, guarded: pool", OP_HAND_GUARDED, OP_FLOOR_CTX,
         "cuCtxGetId(ctx) + cuStreamIsCapturing + pop/push"},
        /* what the checked pair is made of: the check-free pair and the same two calls */
        {"pool-promised + the calls inline", OP_PROMISED_CALLS, OP_FLOOR_CTX,
         "cuCtxGetId(ctx) + cuStreamIsCapturing + pop/push"},
        {"current-context", OP_CUPOOL, OP_FLOOR_NULL,
         "cuCtxGetId(NULL) + cuStreamIsCapturing + pop/push"},
        {"by hand: current-context", OP_HAND_NULL, OP_FLOOR_NULL,
         "cuCtxGetId(NULL) + cuStreamIsCapturing + pop/push"},
        {"pool-promised stream", OP_PROMISED, OP_FLOOR_LOCAL, "thread-local pop/push"},
        {"pool-promised event", OP_EVENT_PROMISED, OP_FLOOR_LOCAL, "thread-local pop/push"},
    };
    static const int threads[2] = {1, 16};
    WCHECK(d.cuCtxGetId(ctx, &hpool_ctx_id));
    for (int i = 0; i < 8; i++)
        for (int t = 0; t < 2; t++) {
            long n = iters(threads[t] == 1 ? 1000000 : 250000);
            struct row *row = row_new(W_EXPLICIT, "pair", "%s, %d thread%s", v[i].name,
                                      threads[t], threads[t] == 1 ? "" : "s");
            snprintf(row->params, sizeof row->params,
                     "\"method\":\"%s\",\"threads\":%d,\"pairs_per_thread\":%ld", v[i].name,
                     threads[t], n);
            snprintf(row->floor, sizeof row->floor, "%s", v[i].floor);
            pairs_vs_floor(row, v[i].op, NULL, 0, v[i].fop, NULL, 0, threads[t], n);
            long cpus = sysconf(_SC_NPROCESSORS_ONLN);
            if (threads[t] > cpus)
                snprintf(row->note, sizeof row->note,
                         "* %d threads on %ld CPUs: they take turns, and these figures time that",
                         threads[t], cpus);
        }
out:;
}

/* ---- service mix ---- */

#define MIX_THREADS 16
#define MIX_RING 64
/* With the request threads spread over N > 1 devices, every MIX_CROSS_EVERY-th request of a
 * thread goes through a second ring of its own to the next device's completion thread, which
 * releases its three handles with that other device current: a cross-device pipeline's
 * pattern. Its events go back to their own device's class and are acquired again and
 * recorded on that device's streams. */
#define MIX_CROSS_EVERY 4
/* Each request thread's counter: MIX_SLOTS u32 slots, MIX_RING + 1 for the requests of its
 * ring and as many for those of its cross ring, taken in turn. A ring holds MIX_RING requests
 * and a request is launched before it is pushed, so the (k + MIX_RING + 1)-th request of a
 * ring is launched only after the completion thread took the k-th out once its last event
 * fired: the requests writing one slot run one after the other, and the final value of every
 * slot is known (mix_expected). The run reads back and checks each one. */
#define MIX_RING_SLOTS (MIX_RING + 1)
#define MIX_SLOTS (2 * MIX_RING_SLOTS)

/* 0: pools that check their context, streams released unvouched (every acquire calls the
 * driver twice); 1: promised pools, streams released vouched (no driver call at all) */
static int mix_promised;
/* 1: the same mix by hand (mix_hand_request): the floor a service pays without cupool;
 * with mix_hand_checked, each acquire also makes the driver calls a checked pool makes
 * (cuCtxGetId, and cuStreamIsCapturing for the stream): the checked row's floor */
static int mix_hand, mix_hand_checked, mix_hand_blind;
/* The devices the request threads are spread over (thread i on device i % mix_ndev). */
static int mix_ndev = 1;
static _Atomic long mix_done;
/* Set by the main thread once the warm-up has lasted two decay ticks (a quarter of
 * CUPOOL_DECAY_MS each, 2.5 s by default: cupool's classes are past their own warm-up at the
 * first, which the trim that began the workload restarted, and their reserves have had a tick
 * to follow the mix's growth; docs/design.md, "Idle capacity") and then gone MIX_STEADY_NS
 * without a driver create on any thread (the classes stopped growing, their headroom filled)
 * or a destroy on a request thread; MIX_WARM_MAX_NS at most. That is the steady state the
 * targets are stated for. (Counting request-thread calls alone let the measured phase begin
 * while the maintenance thread was still growing the classes.) */
static _Atomic int mix_warm_over;
#define MIX_STEADY_NS 500000000u
#define MIX_WARM_MAX_NS 20000000000u
static _Atomic int mix_stop;
static pthread_barrier_t mix_b_warm, mix_b_go;

/* Events released with another device current, marked (handle | 1) in a slot of their own
 * until a request thread of their device acquires them again: a slot that two events share
 * keeps the later mark, so the count of re-acquired events is a lower bound, never more. */
#define XMARK_SLOTS 65536u
static _Atomic uintptr_t xmark[XMARK_SLOTS];

static inline _Atomic uintptr_t *xmark_of(const void *h)
{
    uintptr_t v = (uintptr_t)h;
    return &xmark[(v >> 4 ^ v >> 20 ^ v >> 36) & (XMARK_SLOTS - 1)];
}

struct mix_req {
    pthread_t t;
    int idx, dev;
    long warm, n;
    struct ring *ring;  /* to its device's completion thread */
    struct ring *xring; /* with N > 1 devices: to the next device's completion thread */
    CUdeviceptr counter; /* MIX_SLOTS u32 slots on its device */
    unsigned long own_seq, cross_seq; /* requests pushed on each ring so far */
    cupool_pipeline_t p;
    struct hist *ha;
    struct hand_side *hand; /* the mix by hand: this thread's own handles and graphs */
    long warm_done;         /* warm-up requests made (written by its thread before mix_b_warm) */
    uint64_t tb, te;        /* ticks: its measured requests' start and end */
    uint64_t ctx_checks;    /* streams it checked to be of its device's context */
    uint64_t reacquired;    /* events it acquired after another device's thread released them */
};

/*
 * The service mix by hand: what a service writes without cupool, with the same threads,
 * rings and driver calls. Each request thread owns streams and events that the driver
 * created beforehand (more than its ring can hold in flight), keeps the idle ones in
 * thread-local stacks, and gets the released ones back from the completion thread through a
 * return ring of its own; each acquire and release checks the handle's 64-byte record (owner
 * 0 on acquire, 1 on release, else the run fails) and then writes it: the least a pool that
 * refuses a double or foreign release does. The check reads a line another core wrote last,
 * so it waits for the cache-line transfer that a write alone leaves to the store buffer; with
 * mix_hand_blind the records are only written (no check: the least any record costs). Its S
 * graphs are
 * instantiated once per thread; a request patches every node's arguments
 * (cuGraphExecKernelNodeSetParams, as a changed argument needs) and calls cuGraphLaunch.
 */
#define HAND_STREAMS (2 * MIX_RING)
#define HAND_MAX_NODES 6 /* 2^6 = 64 signatures at most */

struct hand_rec {
    _Alignas(64) void *h;
    volatile uintptr_t owner;
};

struct hand_side {
    struct hand_rec rec[3 * HAND_STREAMS]; /* HAND_STREAMS streams, then twice as many events */
    struct hand_rec *sfree[HAND_STREAMS], *efree[2 * HAND_STREAMS];
    int ns, ne;
    struct ring *back;  /* completion thread -> this thread: released (stream, event, event) */
    struct ring *xback; /* N > 1 devices: the same from the next device's completion thread */
    const struct wl_dev *dv; /* its device */
    CUgraph graph[64];
    CUgraphExec exec[64];
    CUgraphNode node[64][HAND_MAX_NODES];
};

/* Takes back what the completion threads returned; waits while nothing came back (every
 * handle is then in flight: the GPU is behind). */
static int hand_refill(struct hand_side *h, int event)
{
    struct waiter w = {0};
    for (;;) {
        struct item *it;
        for (int k = 0; k < 2; k++) {
            struct ring *back = k ? h->xback : h->back;
            while (back && (it = ring_peek(back))) {
                h->sfree[h->ns++] = it->a;
                h->efree[h->ne++] = it->b;
                h->efree[h->ne++] = it->c;
                ring_drop(back);
            }
        }
        if (event ? h->ne : h->ns)
            return 1;
        if (!waiter_spin(&w, "service-mix by hand: handles to come back"))
            return 0;
    }
}

static inline struct hand_rec *hand_acquire(struct hand_side *h, int event)
{
    if ((event ? h->ne : h->ns) == 0 && !hand_refill(h, event))
        return NULL;
    struct hand_rec *r = event ? h->efree[--h->ne] : h->sfree[--h->ns];
    if (mix_hand_checked) {
        unsigned long long id;
        CUstreamCaptureStatus cs;
        CUresult e = d.cuCtxGetId(h->dv->ctx, &id);
        if (e == CUDA_SUCCESS && !event)
            e = d.cuStreamIsCapturing(r->h, &cs);
        if (e != CUDA_SUCCESS) {
            wl_fail("by hand: the checks", e, NULL);
            return NULL;
        }
    }
    if (!mix_hand_blind && r->owner != 0) {
        wl_fail("by hand: acquire of a record not idle", CUDA_ERROR_INVALID_HANDLE, NULL);
        return NULL;
    }
    r->owner = 1;
    return r;
}

static CUresult hand_side_make(struct hand_side *h, CUdeviceptr counter, int nodes)
{
    CUresult r;
    for (int i = 0; i < 3 * HAND_STREAMS; i++) {
        r = i < HAND_STREAMS ? d.cuStreamCreateWithPriority((CUstream *)&h->rec[i].h, SFLAGS, 0)
                             : d.cuEventCreate((CUevent *)&h->rec[i].h, EFLAGS);
        if (r != CUDA_SUCCESS)
            return r;
        if (i < HAND_STREAMS)
            h->sfree[h->ns++] = &h->rec[i];
        else
            h->efree[h->ne++] = &h->rec[i];
    }
    unsigned int v = 0;
    void *args[] = {&counter, &v};
    for (int sig = 0; sig < opt_signatures; sig++) {
        if ((r = d.cuGraphCreate(&h->graph[sig], 0)) != CUDA_SUCCESS)
            return r;
        for (int k = 0; k < nodes; k++) {
            CUDA_KERNEL_NODE_PARAMS kp = {0};
            kp.func = (sig >> k) & 1 ? h->dv->k_set : h->dv->k_add;
            kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
            kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
            kp.kernelParams = args;
            if ((r = d.cuGraphAddKernelNode(&h->node[sig][k], h->graph[sig],
                                            k ? &h->node[sig][k - 1] : NULL, k ? 1 : 0, &kp)) !=
                CUDA_SUCCESS)
                return r;
        }
        if ((r = d.cuGraphInstantiateWithFlags(&h->exec[sig], h->graph[sig], 0)) != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* After the mix, on the main thread with the side's device current: every request has
 * completed, so nothing is in use. */
static void hand_side_free(struct hand_side *h)
{
    for (int sig = 0; sig < opt_signatures; sig++) {
        if (h->exec[sig])
            MCHECK(d.cuGraphExecDestroy(h->exec[sig]));
        if (h->graph[sig])
            MCHECK(d.cuGraphDestroy(h->graph[sig]));
    }
    for (int i = 0; i < 3 * HAND_STREAMS; i++)
        if (h->rec[i].h)
            MCHECK(i < HAND_STREAMS ? d.cuStreamDestroy(h->rec[i].h) : d.cuEventDestroy(h->rec[i].h));
    free(h->back);
    free(h->xback);
    free(h);
}

static int mix_nodes(void)
{
    int nodes = 2;
    while ((1 << nodes) < opt_signatures)
        nodes++;
    return nodes;
}

/* Request i of a thread goes to the next device's completion thread (N > 1 devices only). */
static inline int mix_cross(long i)
{
    return mix_ndev > 1 && i % MIX_CROSS_EVERY == MIX_CROSS_EVERY - 1;
}

/* The counter slot of the thread's next request on the ring `cross` picks. */
static inline CUdeviceptr mix_slot(struct mix_req *q, int cross)
{
    unsigned long s = cross ? MIX_RING_SLOTS + q->cross_seq++ % MIX_RING_SLOTS
                            : q->own_seq++ % MIX_RING_SLOTS;
    return q->counter + s * sizeof(uint32_t);
}

/* What every counter slot of thread idx holds after its requests 0 .. total-1: each request
 * runs its signature's kernels in order on its slot, set_u32 (v) for a set bit and add_u32
 * (+= v) for a clear one, with v = the request's number. */
static void mix_expected(int idx, long total, uint32_t *exp)
{
    int nodes = mix_nodes();
    unsigned long own = 0, cross = 0;
    memset(exp, 0, MIX_SLOTS * sizeof *exp);
    for (long i = 0; i < total; i++) {
        unsigned long s = mix_cross(i) ? MIX_RING_SLOTS + cross++ % MIX_RING_SLOTS
                                       : own++ % MIX_RING_SLOTS;
        int sig = (int)((i + idx) % opt_signatures);
        uint32_t v = (uint32_t)i, x = exp[s];
        for (int k = 0; k < nodes; k++)
            x = (sig >> k) & 1 ? v : x + v;
        exp[s] = x;
    }
}

/* N > 1 devices: the stream is of the thread's own device's context (cuStreamGetCtx), and
 * each event that another device's thread released last is counted as acquired again (it is
 * then recorded on the stream: the driver refuses an event of another context there). */
static int mix_check_handles(struct mix_req *q, CUstream s, CUevent e0, CUevent e1)
{
    CUcontext c = NULL;
    CUresult r = d.cuStreamGetCtx(s, &c);
    if (r != CUDA_SUCCESS) {
        wl_fail("cuStreamGetCtx", r, NULL);
        return 0;
    }
    if (c != devs[q->dev].ctx) {
        wl_fail("a stream of the wrong context", CUDA_ERROR_INVALID_CONTEXT,
                ": request thread %d of device %d acquired stream %p of context %p, not of its "
                "device's %p",
                q->idx, q->dev, (void *)s, (void *)c, (void *)devs[q->dev].ctx);
        return 0;
    }
    q->ctx_checks++;
    if (mix_hand)
        return 1;
    for (int k = 0; k < 2; k++) {
        CUevent e = k ? e1 : e0;
        _Atomic uintptr_t *m = xmark_of(e);
        uintptr_t mark = (uintptr_t)e | 1;
        if (atomic_load_explicit(m, memory_order_relaxed) == mark &&
            atomic_compare_exchange_strong_explicit(m, &mark, 0, memory_order_relaxed,
                                                    memory_order_relaxed))
            q->reacquired++;
    }
    return 1;
}

/* A request's three timed acquires (stream, event, event) into its thread's histogram. */
static void mix_times(struct mix_req *q, uint64_t t0, uint64_t t1, uint64_t t2, uint64_t t3)
{
    hist_add(q->ha, t1 - t0);
    hist_add(q->ha, t2 - t1);
    hist_add(q->ha, t3 - t2);
}

static int mix_hand_request(struct mix_req *q, long i, int measured)
{
    struct hand_side *h = q->hand;
    CUresult r;
    uint64_t t0 = ticks();
    struct hand_rec *s = hand_acquire(h, 0);
    uint64_t t1 = ticks();
    struct hand_rec *e0 = s ? hand_acquire(h, 1) : NULL;
    uint64_t t2 = ticks();
    struct hand_rec *e1 = e0 ? hand_acquire(h, 1) : NULL;
    uint64_t t3 = ticks();
    if (!e1)
        return 0;
    if (measured)
        mix_times(q, t0, t1, t2, t3);
    if (mix_ndev > 1 && !mix_check_handles(q, s->h, e0->h, e1->h))
        return 0;
    int sig = (int)((i + q->idx) % opt_signatures), nodes = mix_nodes(), cross = mix_cross(i);
    unsigned int v = (unsigned int)i;
    CUdeviceptr slot = mix_slot(q, cross);
    void *args[] = {&slot, &v};
    if ((r = d.cuEventRecord(e0->h, s->h)) != CUDA_SUCCESS) {
        wl_fail("cuEventRecord", r, NULL);
        return 0;
    }
    for (int k = 0; k < nodes; k++) {
        CUDA_KERNEL_NODE_PARAMS kp = {0};
        kp.func = (sig >> k) & 1 ? h->dv->k_set : h->dv->k_add;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = args;
        if ((r = d.cuGraphExecKernelNodeSetParams(h->exec[sig], h->node[sig][k], &kp)) !=
            CUDA_SUCCESS) {
            wl_fail("cuGraphExecKernelNodeSetParams", r, NULL);
            return 0;
        }
    }
    if ((r = d.cuGraphLaunch(h->exec[sig], s->h)) != CUDA_SUCCESS) {
        wl_fail("cuGraphLaunch", r, NULL);
        return 0;
    }
    if ((r = d.cuEventRecord(e1->h, s->h)) != CUDA_SUCCESS) {
        wl_fail("cuEventRecord", r, NULL);
        return 0;
    }
    struct item it = {s, e0, e1, (uintptr_t)measured};
    return ring_push(cross ? q->xring : q->ring, &it, "service-mix ring full");
}

static int mix_request(struct mix_req *q, long i, int measured)
{
    if (mix_hand)
        return mix_hand_request(q, i, measured);
    const struct wl_dev *dv = &devs[q->dev];
    CUstream s;
    CUevent e0, e1;
    CUresult r;
    uint64_t t0 = ticks();
    if ((r = cupool_stream_pool_acquire(mix_promised ? dv->promised_spool : dv->spool, &s)) !=
        CUDA_SUCCESS) {
        wl_fail("cupool_stream_pool_acquire", r, NULL);
        return 0;
    }
    uint64_t t1 = ticks();
    if ((r = cupool_event_pool_acquire(mix_promised ? dv->promised_epool : dv->epool, &e0)) !=
        CUDA_SUCCESS) {
        wl_fail("cupool_event_pool_acquire", r, NULL);
        return 0;
    }
    uint64_t t2 = ticks();
    if ((r = cupool_event_pool_acquire(mix_promised ? dv->promised_epool : dv->epool, &e1)) !=
        CUDA_SUCCESS) {
        wl_fail("cupool_event_pool_acquire", r, NULL);
        return 0;
    }
    uint64_t t3 = ticks();
    if (measured)
        mix_times(q, t0, t1, t2, t3);
    if (mix_ndev > 1 && !mix_check_handles(q, s, e0, e1))
        return 0;
    int sig = (int)((i + q->idx) % opt_signatures), nodes = mix_nodes(), cross = mix_cross(i);
    unsigned int v = (unsigned int)i;
    CUdeviceptr slot = mix_slot(q, cross);
    void *args[] = {&slot, &v};
    if ((r = d.cuEventRecord(e0, s)) != CUDA_SUCCESS) {
        wl_fail("cuEventRecord", r, NULL);
        return 0;
    }
    if ((r = cupool_pipeline_reset(q->p)) != CUDA_SUCCESS) {
        wl_fail("cupool_pipeline_reset", r, NULL);
        return 0;
    }
    for (int k = 0; k < nodes; k++) /* the signature: which node is a set, which an add */
        if ((r = cupool_pipeline_kernel(q->p, (sig >> k) & 1 ? dv->k_set : dv->k_add, 1, 1, 1, 1,
                                        1, 1, 0, args, NULL)) != CUDA_SUCCESS) {
            wl_fail("cupool_pipeline_kernel", r, NULL);
            return 0;
        }
    if ((r = cupool_pipeline_launch(q->p, s)) != CUDA_SUCCESS) {
        wl_fail("cupool_pipeline_launch", r, NULL);
        return 0;
    }
    if ((r = d.cuEventRecord(e1, s)) != CUDA_SUCCESS) {
        wl_fail("cuEventRecord", r, NULL);
        return 0;
    }
    struct item it = {s, e0, e1, (uintptr_t)measured};
    return ring_push(cross ? q->xring : q->ring, &it, "service-mix ring full");
}

static void *mix_req_thread(void *arg)
{
    struct mix_req *q = arg;
    WCHECK(d.cuCtxSetCurrent(devs[q->dev].ctx));
    WCHECK(cupool_pipeline_create(&q->p));
    if (q->hand)
        WCHECK(hand_side_make(q->hand, q->counter, mix_nodes()));
    /* at least q->warm requests, then on until the main thread says the warm-up is over */
    for (long i = 0; (i < q->warm || !atomic_load_explicit(&mix_warm_over, memory_order_acquire)) &&
                     !atomic_load(&aborted);
         i++, q->warm_done = i)
        if (!mix_request(q, i, 0))
            break;
out:
    pthread_barrier_wait(&mix_b_warm);
    pthread_barrier_wait(&mix_b_go);
    q->tb = ticks();
    for (long i = 0; i < q->n && q->p && !atomic_load(&aborted); i++)
        if (!mix_request(q, q->warm_done + i, 1))
            break;
    q->te = ticks();
    return NULL;
}

/* A completion thread, with its device's context current: it takes the requests of the rings
 * of its device's request threads and, with N > 1 devices, of the previous device's threads'
 * cross rings. */
struct mix_completion {
    pthread_t t;
    int dev;
    int nsrc;
    struct ring *src[2 * MIX_THREADS];
    struct ring *back[2 * MIX_THREADS]; /* the mix by hand: where src[j]'s handles go back */
    int hdev[2 * MIX_THREADS];          /* the device of src[j]'s handles */
    struct hist *hr[WL_MAX_DEV];        /* single releases, by the handles' device */
    uint64_t last[WL_MAX_DEV];          /* ticks: the last measured request done, by device */
    uint64_t xrel[WL_MAX_DEV];          /* events of that device released here, another's
                                           context current */
};

/* One release by hand: the record checked (owned) and written idle; blind: only written. */
static inline void hand_release_rec(struct hand_rec *r)
{
    if (!mix_hand_blind && r->owner != 1)
        wl_fail("by hand: release of a record not owned", CUDA_ERROR_INVALID_HANDLE, NULL);
    r->owner = 0;
}

/* The completion thread's releases by hand: each record checked and written, the three
 * handles pushed onto their thread's return ring (timed with the last release). */
static void mix_hand_release(struct ring *back, struct item *it, uint64_t t[4])
{
    t[0] = ticks();
    hand_release_rec(it->a);
    t[1] = ticks();
    hand_release_rec(it->b);
    t[2] = ticks();
    hand_release_rec(it->c);
    struct item back_it = {it->a, it->b, it->c, 0};
    ring_push(back, &back_it, "service-mix by hand: return ring full");
    t[3] = ticks();
}

static void *mix_done_thread(void *arg)
{
    struct mix_completion *c = arg;
    unsigned idle = 0;
    uint64_t stuck_since = 0;
    CUresult r0 = d.cuCtxSetCurrent(devs[c->dev].ctx);
    if (r0 != CUDA_SUCCESS) {
        wl_fail("cuCtxSetCurrent (completion thread)", r0, NULL);
        return NULL;
    }
    while (!atomic_load_explicit(&mix_stop, memory_order_acquire) && !atomic_load(&aborted)) {
        int progressed = 0, pending = 0;
        for (int i = 0; i < c->nsrc; i++) {
            struct item *it;
            int hd = c->hdev[i];
            const struct wl_dev *dv = &devs[hd];
            while ((it = ring_peek(c->src[i]))) {
                CUresult r = d.cuEventQuery(mix_hand ? ((struct hand_rec *)it->c)->h
                                                     : (CUevent)it->c);
                if (r == CUDA_ERROR_NOT_READY) {
                    pending = 1;
                    break;
                }
                if (r != CUDA_SUCCESS) {
                    wl_fail("cuEventQuery", r, NULL);
                    return NULL;
                }
                uint64_t t[4];
                CUresult r2 = CUDA_SUCCESS, r3 = CUDA_SUCCESS;
                if (mix_hand) {
                    mix_hand_release(c->back[i], it, t);
                    if (atomic_load_explicit(&aborted, memory_order_relaxed))
                        return NULL;
                } else {
                    if (hd != c->dev) { /* marked before they can be handed out again */
                        atomic_store_explicit(xmark_of(it->b), (uintptr_t)it->b | 1,
                                              memory_order_relaxed);
                        atomic_store_explicit(xmark_of(it->c), (uintptr_t)it->c | 1,
                                              memory_order_relaxed);
                    }
                    t[0] = ticks();
                    /* the stream's work is done (its last event fired): nothing captures on it */
                    r = mix_promised ? cupool_stream_pool_release(dv->promised_spool,
                                                                  (CUstream)it->a,
                                                                  CUPOOL_RELEASE_NOT_CAPTURING)
                                     : cupool_stream_pool_release(dv->spool, (CUstream)it->a, 0);
                    t[1] = ticks();
                    r2 = cupool_event_pool_release(mix_promised ? dv->promised_epool : dv->epool,
                                                   (CUevent)it->b);
                    t[2] = ticks();
                    r3 = cupool_event_pool_release(mix_promised ? dv->promised_epool : dv->epool,
                                                   (CUevent)it->c);
                    t[3] = ticks();
                }
                if (r || r2 || r3) {
                    wl_fail("release (completion thread)", r ? r : r2 ? r2 : r3, NULL);
                    return NULL;
                }
                if (hd != c->dev)
                    c->xrel[hd] += 2;
                if (it->i) {
                    hist_add(c->hr[hd], t[1] - t[0]);
                    hist_add(c->hr[hd], t[2] - t[1]);
                    hist_add(c->hr[hd], t[3] - t[2]);
                    c->last[hd] = t[3];
                }
                ring_drop(c->src[i]);
                atomic_fetch_add_explicit(&mix_done, 1, memory_order_release);
                progressed = 1;
            }
        }
        if (progressed) {
            idle = 0;
            stuck_since = 0;
            continue;
        }
        if (++idle % 64 == 0)
            sched_yield();
        else
            cpu_relax();
        if (pending && idle % 1024 == 0) {
            uint64_t now = mono_ns();
            if (!stuck_since)
                stuck_since = now;
            else if (now - stuck_since > 10000000000u) {
                wl_fail("service-mix", CUDA_SUCCESS, ": no request completed for 10 s");
                return NULL;
            }
        }
    }
    return NULL;
}

/* Wait (bounded) until `target` requests completed. */
static void mix_wait_done(long target)
{
    struct waiter w = {0};
    long last = -1;
    while (atomic_load_explicit(&mix_done, memory_order_acquire) < target) {
        long now = atomic_load_explicit(&mix_done, memory_order_relaxed);
        if (now != last) {
            last = now;
            w.since = 0;
        }
        if (!waiter_spin(&w, "service-mix completion"))
            return;
    }
}

/* The floor: threads that pop and push a thread-local array until a deadline, every
 * operation timed. */
struct local_job {
    pthread_t t;
    uint64_t until; /* ticks */
    struct hist *ha, *hr;
    pthread_barrier_t *start;
};

static void *local_thread(void *arg)
{
    struct local_job *j = arg;
    void *volatile stack[16];
    volatile unsigned int count = 1;
    stack[0] = j;
    pthread_barrier_wait(j->start);
    uint64_t until = j->until;
    for (;;) {
        for (int k = 0; k < 4096; k++) {
            uint64_t t0 = ticks();
            void *top = stack[--count];
            uint64_t t1 = ticks();
            stack[count++] = top;
            uint64_t t2 = ticks();
            hist_add(j->ha, t1 - t0);
            hist_add(j->hr, t2 - t1);
        }
        if (ticks() >= until || atomic_load_explicit(&aborted, memory_order_relaxed))
            break;
    }
    return NULL;
}

/* The measured phase's request-thread creates, as they happen: a thread that samples the
 * maintenance statistics every millisecond and, at each rise, prints (on stderr) when it came
 * and each class's handles in use and idle then, so an episode can be told apart (which kind,
 * at what demand against the class's high-water mark). */
struct mix_watch {
    pthread_t t;
    uint64_t t0;
    _Atomic int stop;
    int episodes;
};

static void *mix_watch_thread(void *arg)
{
    struct mix_watch *w = arg;
    uint64_t seen = UINT64_MAX;
    cupool_class_stats_t st[16];
    while (!atomic_load_explicit(&w->stop, memory_order_acquire)) {
        cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
        if (cupool_maintenance_stats_get(&m) != CUDA_SUCCESS)
            break;
        if (seen != UINT64_MAX && m.request_creates != seen && w->episodes++ < 16) {
            size_t n = 0;
            st[0] = (cupool_class_stats_t)CUPOOL_CLASS_STATS_INIT;
            fprintf(stderr, "  service-mix: +%llu request-thread creates at %.1f ms:",
                    (unsigned long long)(m.request_creates - seen),
                    (double)(mono_ns() - w->t0) / 1e6);
            if (cupool_stats_get(st, 16, &n) == CUDA_SUCCESS)
                for (size_t i = 0; i < n && i < 16; i++) {
                    if (mix_ndev > 1)
                        fprintf(stderr, " [device %d", st[i].device);
                    fprintf(stderr, "%s%s flags %u: in use %llu, idle %llu, high water %llu]",
                            mix_ndev > 1 ? " " : " [",
                            st[i].kind == CUPOOL_KIND_STREAM ? "stream" : "event", st[i].flags,
                            (unsigned long long)st[i].in_use, (unsigned long long)st[i].idle,
                            (unsigned long long)st[i].high_water);
                }
            fputc('\n', stderr);
        }
        seen = m.request_creates;
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
    }
    return NULL;
}

/* Makes device k's context current on the calling (main) thread. */
static void dev_current(int k)
{
    MCHECK(d.cuCtxSetCurrent(devs[k].ctx));
}

/* Creates and destroys so far of every class of each device 0 .. nd-1 (by the class's
 * context id). */
static void dev_counts_now(int nd, uint64_t *cre, uint64_t *des)
{
    size_t n = 0;
    cupool_class_stats_t *st = class_stats_all(&n);
    for (int k = 0; k < nd; k++) {
        cre[k] = des[k] = 0;
        for (size_t i = 0; i < n; i++)
            if (st[i].context_id == devs[k].id) {
                cre[k] += st[i].creates;
                des[k] += st[i].destroys;
            }
    }
    free(st);
}

/* One run of the mix's request threads on one device or more: what it gives per device. */
struct mix_dev_result {
    int threads;
    long requests;          /* measured */
    double seconds;         /* from its threads' first measured acquire to its last completion */
    double requests_per_s;  /* requests / seconds */
    double ns_per_request;  /* a request thread's wall time per measured request, mean */
    struct lat acq, rel;    /* single acquires and releases of its handles */
    uint64_t creates, destroys; /* its classes' driver calls over the measured phase */
    uint64_t slots_checked; /* counter slots read back and found as expected */
    uint64_t ctx_checks;    /* acquired streams found of its context (N > 1) */
    uint64_t xrel;          /* its events released with another device current */
    uint64_t reacquired;    /* of them, acquired again by its threads (a lower bound) */
};

struct mix_run {
    int ndev, only0;  /* in: devices; only device 0's request threads */
    int threads;      /* request threads that ran */
    uint64_t t0, t1;  /* CLOCK_MONOTONIC ns: the measured phase, from the start to the last
                         completion */
    long warmed, n;   /* warm-up requests (all threads); measured requests per thread */
    struct counts dc; /* every class, over the measured phase */
    cupool_graph_stats_t g0, g1;
    struct lat acq, rel; /* every device's single calls */
    double ns;           /* their mean, ns */
    struct mix_dev_result dev[WL_MAX_DEV];
};

static int mix_active(const struct mix_run *m, int i)
{
    return !m->only0 || i % m->ndev == 0;
}

/*
 * The service mix's threads, rings and completion threads, run once with the variant the
 * globals choose (mix_promised, mix_hand...): a warm-up, the measured phase, then every
 * counter slot read back and checked (mix_expected). Request thread i runs on device
 * i % ndev (its device's primary context current, its pipeline, counter and pools of that
 * context); each device has a completion thread of its own, with its context current; with
 * ndev > 1, every MIX_CROSS_EVERY-th request of a thread goes to the next device's completion
 * thread (mix_cross), and each acquired stream's context is checked. Fails the run (and
 * exits) on any error or wrong value.
 */
static void mix_run(struct mix_run *m)
{
    long warm = iters(2000), n = iters(20000);
    int nd = m->ndev;
    mix_ndev = nd;
    for (int k = 0; k < nd; k++) {
        dev_current(k);
        MCHECK(d.cuModuleLoadData(&devs[k].mod, tu_kernels_ptx));
        MCHECK(d.cuModuleGetFunction(&devs[k].k_add, devs[k].mod, "add_u32"));
        MCHECK(d.cuModuleGetFunction(&devs[k].k_set, devs[k].mod, "set_u32"));
    }
    struct mix_req q[MIX_THREADS];
    struct mix_completion c[WL_MAX_DEV];
    memset(q, 0, sizeof q);
    memset(c, 0, sizeof c);
    atomic_store(&mix_done, 0);
    atomic_store(&mix_stop, 0);
    atomic_store(&mix_warm_over, 0);
    for (unsigned i = 0; i < XMARK_SLOTS; i++)
        atomic_store_explicit(&xmark[i], 0, memory_order_relaxed);
    static const uint32_t zero[MIX_SLOTS];
    int active = 0;
    for (int i = 0; i < MIX_THREADS; i++) {
        q[i].idx = i;
        q[i].dev = i % nd;
        if (!mix_active(m, i))
            continue;
        active++;
        q[i].warm = warm;
        q[i].n = n;
        q[i].ring = ring_new(MIX_RING);
        if (nd > 1)
            q[i].xring = ring_new(MIX_RING);
        q[i].ha = hist_new();
        dev_current(q[i].dev);
        MCHECK(d.cuMemAlloc(&q[i].counter, sizeof zero));
        MCHECK(d.cuMemcpyHtoD(q[i].counter, zero, sizeof zero));
        if (mix_hand) {
            q[i].hand = calloc(1, sizeof *q[i].hand);
            if (!q[i].hand) {
                fprintf(stderr, "cupool-bench workloads: out of memory\n");
                exit(1);
            }
            q[i].hand->dv = &devs[q[i].dev];
            q[i].hand->back = ring_new(HAND_STREAMS);
            if (nd > 1)
                q[i].hand->xback = ring_new(HAND_STREAMS);
        }
    }
    for (int k = 0; k < nd; k++) { /* the zeroed counters, before any request */
        dev_current(k);
        MCHECK(d.cuCtxSynchronize());
    }
    dev_current(0);
    m->threads = active;
    pthread_barrier_init(&mix_b_warm, NULL, (unsigned)active + 1);
    pthread_barrier_init(&mix_b_go, NULL, (unsigned)active + 1);
    /* each device's completion thread: its own threads' rings, then the previous device's
     * threads' cross rings */
    for (int k = 0; k < nd; k++) {
        c[k].dev = k;
        for (int x = 0; x < 2; x++)
            for (int i = 0; i < MIX_THREADS; i++) {
                if (!mix_active(m, i) || (x ? nd == 1 || (q[i].dev + 1) % nd != k : q[i].dev != k))
                    continue;
                int j = c[k].nsrc++;
                c[k].src[j] = x ? q[i].xring : q[i].ring;
                c[k].back[j] = q[i].hand ? (x ? q[i].hand->xback : q[i].hand->back) : NULL;
                c[k].hdev[j] = q[i].dev;
                if (!c[k].hr[q[i].dev])
                    c[k].hr[q[i].dev] = hist_new();
            }
        if (c[k].nsrc)
            spawn(&c[k].t, mix_done_thread, &c[k]);
    }
    for (int i = 0; i < MIX_THREADS; i++)
        if (mix_active(m, i))
            spawn(&q[i].t, mix_req_thread, &q[i]);
    {
        uint64_t start = mono_ns(), quiet_since = start, tick_ns = decay_tick_ns();
        uint64_t seen = growth_calls_now();
        while (!atomic_load(&aborted)) {
            struct timespec nap = {0, 20000000}; /* the workload runs meanwhile */
            nanosleep(&nap, NULL);
            uint64_t now = mono_ns(), c = growth_calls_now();
            if (c != seen)
                seen = c, quiet_since = now;
            if ((now - start >= 2 * tick_ns + 100000000u && now - quiet_since >= MIX_STEADY_NS) ||
                now - start >= MIX_WARM_MAX_NS)
                break;
        }
        atomic_store_explicit(&mix_warm_over, 1, memory_order_release);
    }
    pthread_barrier_wait(&mix_b_warm);
    long warmed = 0;
    for (int i = 0; i < MIX_THREADS; i++)
        warmed += q[i].warm_done;
    mix_wait_done(warmed);
    struct counts c0;
    counts_now(&c0);
    uint64_t cre0[WL_MAX_DEV], des0[WL_MAX_DEV], cre1[WL_MAX_DEV], des1[WL_MAX_DEV];
    dev_counts_now(nd, cre0, des0);
    m->g0 = (cupool_graph_stats_t)CUPOOL_GRAPH_STATS_INIT;
    m->g1 = (cupool_graph_stats_t)CUPOOL_GRAPH_STATS_INIT;
    MCHECK(cupool_graph_stats_get(&m->g0));
    struct mix_watch watch = {.t0 = mono_ns()};
    if (!mix_hand)
        spawn(&watch.t, mix_watch_thread, &watch);
    pthread_barrier_wait(&mix_b_go);
    uint64_t t0 = mono_ns();
    for (int i = 0; i < MIX_THREADS; i++)
        if (mix_active(m, i))
            pthread_join(q[i].t, NULL);
    mix_wait_done(warmed + (long)active * n);
    uint64_t t1 = mono_ns();
    if (!mix_hand) {
        atomic_store_explicit(&watch.stop, 1, memory_order_release);
        pthread_join(watch.t, NULL);
        if (watch.episodes)
            fprintf(stderr, "  service-mix: measured phase %.1f ms\n", (double)(t1 - t0) / 1e6);
    }
    m->dc = (struct counts){0};
    counts_add_since(&m->dc, &c0);
    dev_counts_now(nd, cre1, des1);
    MCHECK(cupool_graph_stats_get(&m->g1));
    atomic_store_explicit(&mix_stop, 1, memory_order_release);
    for (int k = 0; k < nd; k++)
        if (c[k].nsrc)
            pthread_join(c[k].t, NULL);
    die_if_failed();
    m->t0 = t0;
    m->t1 = t1;
    m->warmed = warmed;
    m->n = n;

    /* every counter slot, read back from its device: each one as its requests left it */
    for (int k = 0; k < nd; k++) {
        dev_current(k);
        MCHECK(d.cuCtxSynchronize());
    }
    for (int i = 0; i < MIX_THREADS; i++) {
        if (!mix_active(m, i))
            continue;
        uint32_t got[MIX_SLOTS], want[MIX_SLOTS];
        dev_current(q[i].dev);
        MCHECK(d.cuMemcpyDtoH(got, q[i].counter, sizeof got));
        mix_expected(i, q[i].warm_done + n, want);
        for (int s = 0; s < MIX_SLOTS; s++)
            if (got[s] != want[s]) {
                wl_fail("a wrong counter", CUDA_SUCCESS,
                        ": device %d, request thread %d, slot %d holds %u, not %u after its %ld "
                        "requests",
                        q[i].dev, i, s, got[s], want[s], q[i].warm_done + n);
                die_if_failed();
            }
        m->dev[q[i].dev].slots_checked += nd > 1 ? MIX_SLOTS : MIX_RING_SLOTS; /* written */
    }

    struct hist *ha = hist_new(), *hr = hist_new();
    for (int k = 0; k < nd; k++) {
        struct mix_dev_result *r = &m->dev[k];
        struct hist *da = hist_new(), *dr = hist_new();
        uint64_t tb = UINT64_MAX, te = 0;
        double per = 0;
        for (int i = 0; i < MIX_THREADS; i++) {
            if (!mix_active(m, i) || q[i].dev != k)
                continue;
            r->threads++;
            hist_merge(da, q[i].ha);
            if (q[i].tb < tb)
                tb = q[i].tb;
            per += (double)(q[i].te - q[i].tb) * ns_per_tick / (double)n;
            r->ctx_checks += q[i].ctx_checks;
            r->reacquired += q[i].reacquired;
        }
        for (int j = 0; j < nd; j++) {
            if (c[j].hr[k])
                hist_merge(dr, c[j].hr[k]);
            if (c[j].last[k] > te)
                te = c[j].last[k];
            r->xrel += c[j].xrel[k];
        }
        if (r->threads) {
            r->requests = (long)r->threads * n;
            r->seconds = te > tb ? (double)(te - tb) * ns_per_tick / 1e9 : 0;
            r->requests_per_s = r->seconds > 0 ? (double)r->requests / r->seconds : 0;
            r->ns_per_request = per / r->threads;
            r->creates = cre1[k] - cre0[k];
            r->destroys = des1[k] - des0[k];
        }
        r->acq = lat_of(da);
        r->rel = lat_of(dr);
        hist_merge(ha, da);
        hist_merge(hr, dr);
        free(da), free(dr);
        /* the pattern happened: events released with the other device current came back */
        if (nd > 1 && !mix_hand && r->xrel >= 256 && r->reacquired == 0) {
            wl_fail("cross-device releases", CUDA_SUCCESS,
                    ": none of device %d's %llu events released with another device current "
                    "was acquired again",
                    k, (unsigned long long)r->xrel);
            die_if_failed();
        }
    }
    m->acq = lat_of(ha);
    m->rel = lat_of(hr);
    m->ns = (double)(ha->sum + hr->sum) / (double)(ha->n + hr->n) * ns_per_tick;
    free(ha), free(hr);

    for (int i = 0; i < MIX_THREADS; i++) {
        if (!mix_active(m, i))
            continue;
        free(q[i].ha);
        free(q[i].ring);
        free(q[i].xring);
        dev_current(q[i].dev);
        MCHECK(cupool_pipeline_destroy(q[i].p));
        if (q[i].hand)
            hand_side_free(q[i].hand);
        MCHECK(d.cuMemFree(q[i].counter));
    }
    for (int k = 0; k < nd; k++) {
        for (int j = 0; j < nd; j++)
            free(c[k].hr[j]);
        dev_current(k);
        MCHECK(d.cuModuleUnload(devs[k].mod));
    }
    dev_current(0);
    pthread_barrier_destroy(&mix_b_warm);
    pthread_barrier_destroy(&mix_b_go);
}

static void wl_mix(void)
{
    struct mix_run m = {.ndev = mix_devices};
    mix_run(&m);
    char spread[24] = "";
    if (m.ndev > 1)
        snprintf(spread, sizeof spread, ", %d devices", m.ndev);
    struct row *row = row_new(W_MIX, "acquire or release", "%s, S=%d, %d request threads%s",
                              mix_hand ? (mix_hand_checked ? "by hand checked"
                                          : mix_hand_blind ? "by hand, blind writes"
                                                           : "by hand")
                                       : mix_promised ? "promised" : "checked",
                              opt_signatures, MIX_THREADS, spread);
    row->dc = m.dc;

    /* the floor, for as long as the measured phase ran */
    struct local_job lj[MIX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, MIX_THREADS + 1);
    struct hist *fa = hist_new(), *fr = hist_new();
    uint64_t dur_ticks = (uint64_t)((double)(m.t1 - m.t0) / ns_per_tick);
    for (int i = 0; i < MIX_THREADS; i++) {
        lj[i] = (struct local_job){.ha = hist_new(), .hr = hist_new(), .start = &start};
        spawn(&lj[i].t, local_thread, &lj[i]);
    }
    uint64_t until = ticks() + dur_ticks;
    for (int i = 0; i < MIX_THREADS; i++)
        lj[i].until = until;
    pthread_barrier_wait(&start);
    for (int i = 0; i < MIX_THREADS; i++) {
        pthread_join(lj[i].t, NULL);
        hist_merge(fa, lj[i].ha);
        hist_merge(fr, lj[i].hr);
        free(lj[i].ha);
        free(lj[i].hr);
    }
    pthread_barrier_destroy(&start);

    row->acq = m.acq, row->rel = m.rel;
    row->facq = lat_of(fa), row->frel = lat_of(fr);
    row->ns = m.ns;
    row->floor_ns = (double)(fa->sum + fr->sum) / (double)(fa->n + fr->n) * ns_per_tick;
    snprintf(row->floor, sizeof row->floor, "%d threads popping and pushing local arrays",
             MIX_THREADS);
    row->ops = (uint64_t)MIX_THREADS * (uint64_t)m.n * 3;
    row->counted = 1;
    double mx = row->acq.max > row->rel.max ? row->acq.max : row->rel.max;
    double fmx = row->facq.max > row->frel.max ? row->facq.max : row->frel.max;
    double secs = (double)(m.t1 - m.t0) / 1e9;
    int nodes = mix_nodes();
    uint64_t slots = 0, ctx_checks = 0, xrel = 0, reacq = 0;
    for (int k = 0; k < m.ndev; k++) {
        slots += m.dev[k].slots_checked;
        ctx_checks += m.dev[k].ctx_checks;
        xrel += m.dev[k].xrel;
        reacq += m.dev[k].reacquired;
    }
    int len = snprintf(row->params, sizeof row->params,
                       "\"signatures\":%d,\"kernels_per_request\":%d,\"request_threads\":%d,"
                       "\"completion_threads\":%d,\"ring_slots_per_thread\":%d,"
                       "\"warmup_requests\":%ld,\"requests\":%ld",
                       opt_signatures, nodes, MIX_THREADS, m.ndev, MIX_RING, m.warmed,
                       (long)MIX_THREADS * m.n);
    if (m.ndev > 1 && len > 0 && (size_t)len < sizeof row->params)
        snprintf(row->params + len, sizeof row->params - (size_t)len,
                 ",\"devices\":%d,\"cross_device_every\":%d", m.ndev, MIX_CROSS_EVERY);
    len = snprintf(row->extra, sizeof row->extra,
                   "\"seconds\":%.3f,\"requests_per_s\":%.0f,\"max_ns\":%.1f,\"floor_max_ns\":%.1f,"
                   "\"max_ratio\":%.3f,\"instantiations\":%llu,\"graph_launches\":%llu,"
                   "\"graph_hits\":%llu,\"graph_claims_lock_free\":%llu,"
                   "\"counter_slots_checked\":%llu",
                   secs, (double)MIX_THREADS * (double)m.n / secs, mx, fmx,
                   fmx > 0 ? mx / fmx : 0,
                   (unsigned long long)(m.g1.instantiations - m.g0.instantiations),
                   (unsigned long long)(m.g1.launches - m.g0.launches),
                   (unsigned long long)(m.g1.hits - m.g0.hits),
                   (unsigned long long)(m.g1.claims_lock_free - m.g0.claims_lock_free),
                   (unsigned long long)slots);
    if (m.ndev > 1 && len > 0 && (size_t)len < sizeof row->extra)
        len += snprintf(row->extra + len, sizeof row->extra - (size_t)len,
                        ",\"stream_contexts_checked\":%llu,\"events_released_cross_device\":%llu",
                        (unsigned long long)ctx_checks, (unsigned long long)xrel);
    if (m.ndev > 1 && !mix_hand && len > 0 && (size_t)len < sizeof row->extra)
        snprintf(row->extra + len, sizeof row->extra - (size_t)len,
                 ",\"events_reacquired_after_cross_device\":%llu", (unsigned long long)reacq);
    char mxs[16], fmxs[16];
    fmt_ns(mxs, sizeof mxs, mx);
    fmt_ns(fmxs, sizeof fmxs, fmx);
    len = snprintf(row->note, sizeof row->note,
                   "%.0f requests/s; max %s = %.2fx the floor's max (%s); %llu instantiations in "
                   "the measured phase",
                   (double)MIX_THREADS * (double)m.n / secs, mxs, fmx > 0 ? mx / fmx : 0, fmxs,
                   (unsigned long long)(m.g1.instantiations - m.g0.instantiations));
    if (!mix_hand && m.g1.launches > m.g0.launches && len > 0 && (size_t)len < sizeof row->note)
        len += snprintf(row->note + len, sizeof row->note - (size_t)len,
                        "; %.1f%% of graph launches claimed lock-free",
                        100.0 * (double)(m.g1.claims_lock_free - m.g0.claims_lock_free) /
                            (double)(m.g1.launches - m.g0.launches));
    if (m.ndev > 1 && len > 0 && (size_t)len < sizeof row->note)
        len += snprintf(row->note + len, sizeof row->note - (size_t)len,
                        "; %llu counter slots as expected, %llu streams of their device's "
                        "context, %llu events released with another device current",
                        (unsigned long long)slots, (unsigned long long)ctx_checks,
                        (unsigned long long)xrel);
    if (m.ndev > 1 && !mix_hand && len > 0 && (size_t)len < sizeof row->note)
        snprintf(row->note + len, sizeof row->note - (size_t)len,
                 ", %llu of them acquired again", (unsigned long long)reacq);
    free(fa), free(fr);
}

/* ---- devices: the service mix on device 0 alone, then on every device at once ---- */

/* One variant of the mix (checked or promised pools) run twice: device 0's request threads
 * alone (the others' idle), then every device's at once. */
struct dev_summary {
    int ran;
    const char *how;
    struct mix_run alone, all;
};
static struct dev_summary dev_sum[2];
static const char *devices_skipped; /* why the devices workload gave no figure, or NULL */

static double p999_of(const struct lat *a, const struct lat *r)
{
    return a->p999 > r->p999 ? a->p999 : r->p999;
}

/* A run's request-thread creates and destroys per 1000 of its acquires (every device's:
 * cupool counts them per process). */
static double dev_req_per_1000(const struct mix_run *m)
{
    return per_1000(m->dc.req_creates + m->dc.req_destroys,
                    (uint64_t)m->threads * (uint64_t)m->n * 3);
}

/* The row of device k in run m: ns per request of its threads, its single calls, its classes'
 * creates and destroys; device 0's with every device busy has device 0 alone as its floor. */
static void dev_row(const struct dev_summary *ds, const struct mix_run *m, int k)
{
    const struct mix_dev_result *r = &m->dev[k];
    char busy[32];
    if (m->only0)
        snprintf(busy, sizeof busy, " alone");
    else
        snprintf(busy, sizeof busy, ", %d devices busy", m->ndev);
    struct row *row = row_new(W_DEVICES, "request", "%s, device %d%s", ds->how, k, busy);
    uint64_t ops = (uint64_t)r->requests * 3;
    row->ns = r->ns_per_request;
    row->acq = r->acq;
    row->rel = r->rel;
    if (!m->only0 && k == 0) {
        const struct mix_dev_result *a = &ds->alone.dev[0];
        snprintf(row->floor, sizeof row->floor, "%s, device 0 alone", ds->how);
        row->floor_ns = a->ns_per_request;
        row->facq = a->acq;
        row->frel = a->rel;
    }
    snprintf(row->params, sizeof row->params,
             "\"variant\":\"%s\",\"run\":\"%s\",\"device\":%d,\"devices\":%d,"
             "\"devices_busy\":%d,\"request_threads\":%d,\"requests\":%ld,\"signatures\":%d",
             ds->how, m->only0 ? "alone" : "all", k, m->ndev, m->only0 ? 1 : m->ndev, r->threads,
             r->requests, opt_signatures);
    snprintf(row->extra, sizeof row->extra,
             "\"seconds\":%.3f,\"requests_per_s\":%.0f,\"ns_per_request\":%.1f,\"acquires\":%llu,"
             "\"creates\":%llu,\"destroys\":%llu,\"creates_per_1000\":%.3f,"
             "\"destroys_per_1000\":%.3f,\"counter_slots_checked\":%llu,"
             "\"stream_contexts_checked\":%llu,\"events_released_cross_device\":%llu,"
             "\"events_reacquired_after_cross_device\":%llu",
             r->seconds, r->requests_per_s, r->ns_per_request, (unsigned long long)ops,
             (unsigned long long)r->creates, (unsigned long long)r->destroys,
             per_1000(r->creates, ops), per_1000(r->destroys, ops),
             (unsigned long long)r->slots_checked, (unsigned long long)r->ctx_checks,
             (unsigned long long)r->xrel, (unsigned long long)r->reacquired);
}

static void wl_devices(void)
{
    if (devices_n < 2) {
        devices_skipped = "needs two devices";
        fprintf(opt_json ? stderr : stdout, "\ndevices: needs two devices, and %s: no figure\n",
                dev_count < 2 ? "this run sees one (the simulated driver models two with "
                                "FAKECUDA_DEVICES=2)"
                              : "--devices 1 was given");
        return;
    }
    for (int v = 0; v < 2; v++) {
        struct dev_summary *ds = &dev_sum[v];
        ds->how = v ? "promised" : "checked";
        mix_promised = v;
        mix_hand = mix_hand_checked = mix_hand_blind = 0;
        ds->alone = (struct mix_run){.ndev = devices_n, .only0 = 1};
        mix_run(&ds->alone);
        MCHECK(cupool_trim());
        ds->all = (struct mix_run){.ndev = devices_n};
        mix_run(&ds->all);
        MCHECK(cupool_trim());
        ds->ran = 1;
        dev_row(ds, &ds->alone, 0);
        for (int k = 0; k < devices_n; k++)
            dev_row(ds, &ds->all, k);
    }
}

static void print_devices(int first)
{
    printf("\n%s: %s%s\n", wl_names[W_DEVICES], wl_what[W_DEVICES], label);
    printf("  (%d request threads in all, thread i on device i %% %d, each device with its own "
           "completion thread; alone: device 0's %d threads only; every %dth request's handles "
           "are released by the next device's completion thread, with that device current)\n",
           MIX_THREADS, devices_n, dev_sum[0].alone.threads, MIX_CROSS_EVERY);
    printf("  %-40s %12s %11s %8s %11s %11s\n", "row", "requests/s", "ns/request", "x alone",
           "creates/1k", "destroys/1k");
    const struct row *r = &rows[first]; /* per variant: alone's device 0, then all's devices */
    for (int v = 0; v < 2; v++) {
        const struct dev_summary *ds = &dev_sum[v];
        for (int j = 0; ds->ran && j <= devices_n; j++, r++) {
            const struct mix_dev_result *dr = j ? &ds->all.dev[j - 1] : &ds->alone.dev[0];
            uint64_t ops = (uint64_t)dr->requests * 3;
            char x[16] = "-";
            if (j == 1 && ds->alone.dev[0].requests_per_s > 0)
                snprintf(x, sizeof x, "%.2fx",
                         dr->requests_per_s / ds->alone.dev[0].requests_per_s);
            printf("  %-40s %12.0f %11.1f %8s %11.2f %11.2f\n", r->name, dr->requests_per_s,
                   r->ns, x, per_1000(dr->creates, ops), per_1000(dr->destroys, ops));
            print_lats("", &r->acq, &r->rel);
        }
    }
    for (int v = 0; v < 2; v++) {
        const struct dev_summary *ds = &dev_sum[v];
        if (!ds->ran)
            continue;
        const struct mix_dev_result *a = &ds->alone.dev[0], *b = &ds->all.dev[0];
        uint64_t slots = 0, ctx_checks = 0, xrel = 0, reacq = 0;
        for (int k = 0; k < devices_n; k++) {
            slots += ds->alone.dev[k].slots_checked + ds->all.dev[k].slots_checked;
            ctx_checks += ds->alone.dev[k].ctx_checks + ds->all.dev[k].ctx_checks;
            xrel += ds->alone.dev[k].xrel + ds->all.dev[k].xrel;
            reacq += ds->alone.dev[k].reacquired + ds->all.dev[k].reacquired;
        }
        printf("  %s: device 0 with %d devices busy / alone: requests/s %.2fx, p99.9 %.2fx; "
               "request-thread creates+destroys per 1000 acquires: %.2f alone, %.2f all busy "
               "(every device's: cupool counts them per process)\n",
               ds->how, devices_n,
               a->requests_per_s > 0 ? b->requests_per_s / a->requests_per_s : 0,
               p999_of(&a->acq, &a->rel) > 0
                   ? p999_of(&b->acq, &b->rel) / p999_of(&a->acq, &a->rel)
                   : 0,
               dev_req_per_1000(&ds->alone), dev_req_per_1000(&ds->all));
        printf("  %s: every value checked: %llu counter slots as expected, %llu streams of their "
               "device's context, %llu events released with another device current, %llu of "
               "them acquired again and recorded on their own device's streams\n",
               ds->how, (unsigned long long)slots, (unsigned long long)ctx_checks,
               (unsigned long long)xrel, (unsigned long long)reacq);
    }
    fflush(stdout);
}

/* The devices workload's own member of its JSON object: the device count, and per variant
 * the runs' request-thread counts and device 0's ratios (the per-device figures are its
 * rows); or why there is no figure. */
static void json_devices(void)
{
    printf(",\"devices\":{\"count\":%d", devices_n);
    if (devices_skipped) {
        printf(",\"skipped\":");
        json_str(devices_skipped);
        printf("}");
        return;
    }
    printf(",\"request_threads\":%d,\"cross_device_every\":%d,\"variants\":[", MIX_THREADS,
           MIX_CROSS_EVERY);
    for (int v = 0; v < 2; v++) {
        const struct dev_summary *ds = &dev_sum[v];
        printf("%s{\"variant\":\"%s\"", v ? "," : "", ds->how);
        for (int k = 0; k < 2; k++) {
            const struct mix_run *m = k ? &ds->all : &ds->alone;
            uint64_t ops = (uint64_t)m->threads * (uint64_t)m->n * 3;
            printf(",\"%s\":{\"request_threads\":%d,\"seconds\":%.3f,\"request_creates\":%llu,"
                   "\"request_destroys\":%llu,\"request_creates_per_1000\":",
                   k ? "all" : "alone", m->threads, (double)(m->t1 - m->t0) / 1e9,
                   (unsigned long long)m->dc.req_creates, (unsigned long long)m->dc.req_destroys);
            json_num(per_1000(m->dc.req_creates, ops));
            printf(",\"request_destroys_per_1000\":");
            json_num(per_1000(m->dc.req_destroys, ops));
            printf("}");
        }
        const struct mix_dev_result *a = &ds->alone.dev[0], *b = &ds->all.dev[0];
        printf(",\"device0_all_over_alone\":{\"requests_per_s\":");
        json_num(a->requests_per_s > 0 ? b->requests_per_s / a->requests_per_s : NAN);
        printf(",\"ns_per_request\":");
        json_num(a->ns_per_request > 0 ? b->ns_per_request / a->ns_per_request : NAN);
        printf(",\"p99_9\":");
        double pa = p999_of(&a->acq, &a->rel);
        json_num(pa > 0 ? p999_of(&b->acq, &b->rel) / pa : NAN);
        printf("}}");
    }
    printf("]}");
}

/* ---- key figures: the ones the targets are stated in ---- */

struct key_fig {
    char what[96];
    double value;
    const char *unit; /* "x", "ns", "per 1000" */
    double target;    /* value <= target meets it */
};

#define MAX_KEYS 64
static struct key_fig keys_out[MAX_KEYS];
static int nkeys_out;

/* The row of workload wl named name (prefix: whose name begins with it). */
static const struct row *find_row(int wl, const char *name, int prefix)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i].wl == wl && (prefix ? !strncmp(rows[i].name, name, strlen(name))
                                        : !strcmp(rows[i].name, name)))
            return &rows[i];
    return NULL;
}

static void key_add(double value, const char *unit, double target, const char *fmt, ...)
{
    if (nkeys_out == MAX_KEYS)
        return;
    struct key_fig *k = &keys_out[nkeys_out++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->what, sizeof k->what, fmt, ap);
    va_end(ap);
    k->value = value;
    k->unit = unit;
    k->target = target;
}

static void key_figures(void)
{
    const struct row *r;
    for (int v = 0; v < 3; v++)
        if ((r = find_row(W_HANDOFF, ho_names[v], 0))) {
            key_add(r->ns / r->floor_ns, "x", 2, "handoff %s / its floor", r->name);
            key_add(per_1000(r->dc.req_creates + r->dc.req_destroys, r->ops), "per 1000", 0,
                    "handoff %s: request-thread creates+destroys", r->name);
        }
    double worst = 0;
    const struct row *wr = NULL;
    for (int i = 0; i < nrows; i++)
        if (rows[i].wl == W_BURST && rows[i].floor_ns > 0 && rows[i].ns / rows[i].floor_ns > worst)
            worst = rows[i].ns / rows[i].floor_ns, wr = &rows[i];
    if (wr)
        key_add(worst, "x", 2, "burst: worst M (%s) / M=1", wr->name);
    if ((r = find_row(W_BURST, "M=1024", 0)))
        key_add(per_1000(r->dc.creates + r->dc.destroys, r->ops), "per 1000", 0,
                "burst M=1024: driver creates+destroys");
    if ((r = find_row(W_DROPIN, "streams", 0)))
        key_add(per_1000(r->dc.creates, r->ops), "per 1000", 1,
                "dropin-batch: driver creates per 1000 wrapper creates");
    if ((r = find_row(W_CLASH, "2 keys", 1)))
        key_add(r->ns / r->floor_ns, "x", 1.2, "class-clash: 2 keys / 1 key");
    if ((r = find_row(W_CLASH, "driver, 2 streams", 1)))
        key_add(r->ns / r->floor_ns, "x", -1,
                "class-clash floor: the driver's calls on 2 streams / on 1");
    for (int i = 0; i < nrows; i++)
        if (rows[i].wl == W_EXPLICIT && !strncmp(rows[i].name, "pool-promised +", 15))
            continue; /* what the checked pair is made of: no target of its own */
        else if (rows[i].wl == W_EXPLICIT && !strncmp(rows[i].name, "by hand", 7))
            key_add(rows[i].ns / rows[i].floor_ns, "x", -1,
                    "explicit %s / its floor (no target)", rows[i].name);
        else if (rows[i].wl == W_EXPLICIT && (!strncmp(rows[i].name, "pool,", 5) ||
                                         !strncmp(rows[i].name, "current-context", 15)))
            key_add(rows[i].ns / rows[i].floor_ns, "x", 1.15, "explicit %s / its floor",
                    rows[i].name);
        else if (rows[i].wl == W_EXPLICIT)
            key_add(rows[i].ns / rows[i].floor_ns, "x", 3, "explicit %s / pop+push (aim)",
                    rows[i].name);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 2; k++) {
            /* cupool's pairs against the hand-written pool's, in the same run */
            char a[48], b[80];
            snprintf(a, sizeof a, "%s, %s", k ? "current-context" : "pool",
                     t ? "16 threads" : "1 thread");
            snprintf(b, sizeof b, "by hand: %s", a);
            const struct row *c = find_row(W_EXPLICIT, a, 0), *h = find_row(W_EXPLICIT, b, 0);
            if (c && h && h->ns > 0)
                key_add(c->ns / h->ns, "x", -1, "explicit %s / the same by hand", a);
            snprintf(b, sizeof b, "by hand, guarded: %s", a);
            if (c && !k && (h = find_row(W_EXPLICIT, b, 0)) && h->ns > 0)
                key_add(c->ns / h->ns, "x", -1, "explicit %s / the same by hand, guarded", a);
        }
    for (int t = 0; t < 2; t++) {
        /* the checked pair against its parts: the check-free pair and the two calls inline */
        const struct row *c = find_row(W_EXPLICIT, t ? "pool, 16 threads" : "pool, 1 thread", 0);
        const struct row *p = find_row(W_EXPLICIT, t ? "pool-promised + the calls inline, 16 threads"
                                                     : "pool-promised + the calls inline, 1 thread",
                                       0);
        if (c && p && p->ns > 0)
            key_add(c->ns / p->ns, "x", 1.05,
                    "explicit pool, %s / the check-free pair + its calls (aim)",
                    t ? "16 threads" : "1 thread");
    }
    for (int v = 0; v < 2; v++)
        if ((r = find_row(W_MIX, v ? "by hand, S=" : "by hand checked, ", 1))) {
            /* the floor of the tail targets: the same mix written without cupool */
            key_add(r->acq.p999 > r->rel.p999 ? r->acq.p999 : r->rel.p999, "ns", 1000,
                    "service-mix %s (the floor): p99.9", v ? "by hand" : "by hand checked");
            key_add(r->acq.p9999 > r->rel.p9999 ? r->acq.p9999 : r->rel.p9999, "ns", 5000,
                    "service-mix %s (the floor): p99.99", v ? "by hand" : "by hand checked");
        }
    if ((r = find_row(W_MIX, "by hand, blind writes", 1)))
        key_add(r->acq.p9999 > r->rel.p9999 ? r->acq.p9999 : r->rel.p9999, "ns", -1,
                "service-mix by hand, blind writes (no ownership check): p99.99");
    for (int v = 0; v < 2; v++)
        if ((r = find_row(W_MIX, v ? "promised" : "checked", 1))) {
            const char *how = v ? "promised" : "checked";
            key_add(r->acq.p999 > r->rel.p999 ? r->acq.p999 : r->rel.p999, "ns", 1000,
                    "service-mix %s: p99.9 of single acquires and releases", how);
            key_add(r->acq.p9999 > r->rel.p9999 ? r->acq.p9999 : r->rel.p9999, "ns", 5000,
                    "service-mix %s: p99.99 of single acquires and releases", how);
            double mx = r->acq.max > r->rel.max ? r->acq.max : r->rel.max;
            double fmx = r->facq.max > r->frel.max ? r->facq.max : r->frel.max;
            key_add(fmx > 0 ? mx / fmx : 0, "x", 2, "service-mix %s: max / the floor's max",
                    how);
            key_add(per_1000(r->dc.req_creates + r->dc.req_destroys, r->ops), "per 1000", 0,
                    "service-mix %s: request-thread creates+destroys", how);
            const struct row *h = find_row(W_MIX, v ? "by hand, S=" : "by hand checked, ", 1);
            if (h) {
                double p = r->acq.p999 > r->rel.p999 ? r->acq.p999 : r->rel.p999;
                double hp = h->acq.p999 > h->rel.p999 ? h->acq.p999 : h->rel.p999;
                double q = r->acq.p9999 > r->rel.p9999 ? r->acq.p9999 : r->rel.p9999;
                double hq = h->acq.p9999 > h->rel.p9999 ? h->acq.p9999 : h->rel.p9999;
                key_add(hp > 0 ? p / hp : 0, "x", 1, "service-mix %s: p99.9 / the hand-written mix's (aim)",
                        how);
                key_add(hq > 0 ? q / hq : 0, "x", 1,
                        "service-mix %s: p99.99 / the hand-written mix's (aim)", how);
            }
        }
    for (int v = 0; v < 2; v++) {
        /* what the other devices' traffic does to device 0's: no target, the figure itself */
        const struct dev_summary *ds = &dev_sum[v];
        if (!ds->ran)
            continue;
        const struct mix_dev_result *a = &ds->alone.dev[0], *b = &ds->all.dev[0];
        double pa = p999_of(&a->acq, &a->rel);
        key_add(a->requests_per_s > 0 ? b->requests_per_s / a->requests_per_s : 0, "x", -1,
                "devices %s: device 0's requests/s, %d devices busy / alone", ds->how,
                devices_n);
        key_add(pa > 0 ? p999_of(&b->acq, &b->rel) / pa : 0, "x", -1,
                "devices %s: device 0's p99.9, %d devices busy / alone", ds->how, devices_n);
        key_add(dev_req_per_1000(&ds->all), "per 1000", 0,
                "devices %s: request-thread creates+destroys, %d devices busy", ds->how,
                devices_n);
    }
}

/* ---- the run ---- */

#define GET(name, v)                                                            \
    do {                                                                        \
        CUresult r_ = cupool_driver_get_proc(#name, v, (void **)&d.name);       \
        if (r_ != CUDA_SUCCESS) {                                               \
            wl_fail("the driver's " #name, r_, NULL);                           \
            die_if_failed();                                                    \
        }                                                                       \
    } while (0)

int cupool_bench_workloads(CUcontext context, int simulated, const char *gpu, int driver_version,
                           const char *date)
{
    ctx = context;
    label = simulated ? " [simulated]" : "";
    GET(cuDeviceGetCount, 2000);
    GET(cuDeviceGet, 2000);
    GET(cuDevicePrimaryCtxRetain, 7000);
    GET(cuCtxSetCurrent, 4000);
    GET(cuCtxSynchronize, 2000);
    GET(cuCtxGetId, 12000);
    GET(cuCtxGetStreamPriorityRange, 5050);
    GET(cuStreamCreateWithPriority, 5050);
    GET(cuStreamDestroy, 4000);
    GET(cuStreamIsCapturing, 10000);
    GET(cuStreamGetCtx, 9020);
    GET(cuEventCreate, 2000);
    GET(cuEventDestroy, 4000);
    GET(cuEventRecord, 2000);
    GET(cuEventQuery, 2000);
    GET(cuModuleLoadData, 2000);
    GET(cuModuleUnload, 2000);
    GET(cuModuleGetFunction, 2000);
    GET(cuMemAlloc, 3020);
    GET(cuMemFree, 3020);
    GET(cuMemcpyHtoD, 3020);
    GET(cuMemcpyDtoH, 3020);
    GET(cuGraphCreate, 10000);
    GET(cuGraphAddKernelNode, 12000);
    GET(cuGraphInstantiateWithFlags, 11040);
    GET(cuGraphExecKernelNodeSetParams, 12000);
    GET(cuGraphLaunch, 10000);
    GET(cuGraphExecDestroy, 10000);
    GET(cuGraphDestroy, 10000);
    MCHECK(d.cuCtxSetCurrent(ctx));
    MCHECK(d.cuCtxGetId(ctx, &ctx_id));
    MCHECK(d.cuCtxGetStreamPriorityRange(&prio_least, &prio_greatest));
    MCHECK(cupool_stream_pool_get(&spool, ctx, SFLAGS, 0));
    MCHECK(cupool_event_pool_get(&epool, ctx, EFLAGS));
    /* the benchmark never resets or destroys ctx while it runs: the promise holds */
    MCHECK(cupool_stream_pool_get(&promised_spool, ctx, SFLAGS | CUPOOL_POOL_CONTEXT_OUTLIVES, 0));
    MCHECK(cupool_event_pool_get(&promised_epool, ctx, EFLAGS | CUPOOL_POOL_CONTEXT_OUTLIVES));
    MCHECK(d.cuDeviceGetCount(&dev_count));
    int most = dev_count < WL_MAX_DEV ? dev_count : WL_MAX_DEV;
    if (opt_devices > dev_count) {
        fprintf(stderr, "cupool-bench: --devices must be from 1 to the device count (%d here), "
                        "not %d\n", dev_count, opt_devices);
        return 2;
    }
    mix_devices = opt_devices > 0 ? opt_devices : opt_devices < 0 ? most : 1;
    devices_n = opt_devices > 0 ? opt_devices : most;
    devs[0] = (struct wl_dev){.ctx = ctx, .id = ctx_id, .spool = spool,
                              .promised_spool = promised_spool, .epool = epool,
                              .promised_epool = promised_epool};
    /* the other devices' primary contexts and pools, where a workload uses them */
    int used = want[W_MIX] ? mix_devices : 1;
    if (want[W_DEVICES] && devices_n > used)
        used = devices_n;
    for (int k = 1; k < used; k++) {
        struct wl_dev *dv = &devs[k];
        CUdevice dev;
        MCHECK(d.cuDeviceGet(&dev, k));
        MCHECK(d.cuDevicePrimaryCtxRetain(&dv->ctx, dev));
        MCHECK(d.cuCtxGetId(dv->ctx, &dv->id));
        MCHECK(cupool_stream_pool_get(&dv->spool, dv->ctx, SFLAGS, 0));
        MCHECK(cupool_event_pool_get(&dv->epool, dv->ctx, EFLAGS));
        /* nor these contexts: the promise holds for them too */
        MCHECK(cupool_stream_pool_get(&dv->promised_spool, dv->ctx,
                                      SFLAGS | CUPOOL_POOL_CONTEXT_OUTLIVES, 0));
        MCHECK(cupool_event_pool_get(&dv->promised_epool, dv->ctx,
                                     EFLAGS | CUPOOL_POOL_CONTEXT_OUTLIVES));
    }
    timer_init();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!opt_json) {
        printf("cupool-bench workloads, cupool %s, %s: %s, CUDA driver %d.%d, %ld CPUs%s%s\n",
               cupool_version(), date, gpu, driver_version / 1000, driver_version % 1000 / 10,
               cpus, label, opt_quick ? " (--quick: a tenth of the iterations)" : "");
        printf("timer: %s, %.4f ns per tick; one reading costs %.1f ns (mean; p50 %.1f ns), and "
               "every single-call figure includes one\n",
               use_tsc ? "TSC (lfence; rdtsc; lfence), calibrated against CLOCK_MONOTONIC"
                       : "clock_gettime(CLOCK_MONOTONIC)",
               ns_per_tick, timer_cost_ns, timer_cost_p50_ns);
        printf("creates/1k, destroys/1k: driver calls per 1000 acquires over the measured runs "
               "(every class); (req): of them on request threads\n");
        if (want[W_MIX] && mix_devices > 1)
            printf("service-mix: its %d request threads spread over %d devices (thread i on "
                   "device i %% %d), a completion thread per device\n",
                   MIX_THREADS, mix_devices, mix_devices);
        fflush(stdout);
    }
    int first_row[W_COUNT];
    for (int i = 0; i < norder; i++) {
        int w = order[i];
        cur_wl = wl_names[w];
        MCHECK(cupool_trim());
        wl_start_ns = mono_ns();
        first_row[w] = nrows;
        switch (w) {
        case W_HANDOFF: wl_handoff(); break;
        case W_BURST: wl_burst(); break;
        case W_BURST_COLD: wl_burst_cold(); break;
        case W_DROPIN: wl_dropin(); break;
        case W_CLASH: wl_clash(); break;
        case W_EXPLICIT: wl_explicit(); break;
        case W_DEVICES: wl_devices(); break;
        default:
            /* checked, promised, then the same mix by hand: with the checked pools' driver
             * calls, without them, and with blind record writes (no ownership check) */
            for (int v = 0; v < 5; v++) {
                mix_promised = v == 1;
                mix_hand = v >= 2;
                mix_hand_checked = v == 2;
                mix_hand_blind = v == 4;
                wl_mix();
                die_if_failed();
                MCHECK(cupool_trim());
            }
            break;
        }
        die_if_failed();
        if (!opt_json && w == W_DEVICES && !devices_skipped)
            print_devices(first_row[w]);
        else if (!opt_json && w != W_DEVICES)
            print_rows(w, first_row[w]);
        if (!opt_json && w == W_EXPLICIT)
            printf("  (pool: an explicit stream pool, released unvouched, so each acquire makes "
                   "both driver calls of its floor; by hand: the least a pool with an ownership "
                   "check does, out of line, a 64-byte record per handle, the same calls, beside "
                   "the same floor; pool-promised: a CUPOOL_POOL_CONTEXT_OUTLIVES pool, released "
                   "vouched, no driver call; + the calls inline: the bench makes the checked "
                   "pool's two calls after a promised acquire)\n");
    }
    key_figures();
    uint64_t mono1 = mono_ns(), tick1 = ticks();
    if (use_tsc)
        tsc_drift = (double)(tick1 - run_tick0) * ns_per_tick / (double)(mono1 - run_mono0) - 1;
    cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;
    MCHECK(cupool_maintenance_stats_get(&m));
    if (!opt_json) {
        printf("\nmaintenance thread: %s, %llu wakeups, %llu creates, %llu destroys; request "
               "threads: %llu creates, %llu destroys (whole run, the cupool_trim() calls between "
               "workloads included)\n",
               m.running ? "running" : "not running", (unsigned long long)m.wakeups,
               (unsigned long long)m.background_creates,
               (unsigned long long)m.background_destroys, (unsigned long long)m.request_creates,
               (unsigned long long)m.request_destroys);
        if (nkeys_out)
            printf("\nkey figures%s: each value against its target in brackets, stated for the "
                   "H200; (aim): a goal, not a requirement%s\n",
                   label,
                   label[0] ? "\n(on the simulated driver there is no verdict: the figures time "
                              "the simulation; docs/benchmarks.md has the H200's)"
                            : "");
        for (int i = 0; i < nkeys_out; i++) {
            const struct key_fig *k = &keys_out[i];
            char v[24], t[24];
            if (k->unit[0] == 'n') {
                fmt_ns(v, sizeof v, k->value);
                fmt_ns(t, sizeof t, k->target);
            } else if (k->unit[0] == 'x') {
                snprintf(v, sizeof v, "%.2fx", k->value);
                snprintf(t, sizeof t, "%gx", k->target);
            } else {
                snprintf(v, sizeof v, k->value > 0 && k->value < 0.01 ? "%.1e/1k" : "%.2f/1k",
                         k->value);
                snprintf(t, sizeof t, "%g/1k", k->target);
            }
            if (k->target < 0) /* a floor, quoted beside the figures it explains */
                printf("  %-72s %10s\n", k->what, v);
            else
                printf("  %-72s %10s  [<= %s] %s\n", k->what, v, t,
                       label[0] ? "(simulated)" : k->value <= k->target ? "met" : "NOT MET");
        }
        if (use_tsc && (tsc_drift > 0.002 || tsc_drift < -0.002))
            printf("note: the TSC drifted %.2f%% against CLOCK_MONOTONIC over the run\n",
                   100 * tsc_drift);
        return 0;
    }
    printf("{\"date\":\"%s\",\"gpu\":", date);
    json_str(gpu);
    printf(",\"cuda_driver_version\":%d,\"simulated\":%s,\"cpus\":%ld,\"cupool_version\":\"%s\","
           "\"quick\":%s,\"device_count\":%d,\"mix_devices\":%d,\n"
           "\"timer\":{\"source\":\"%s\",\"ns_per_tick\":%.6f,\"cost_ns\":%.2f,"
           "\"cost_p50_ns\":%.2f,\"drift\":%.6f},\n\"environment\":{",
           driver_version, simulated ? "true" : "false", cpus, cupool_version(),
           opt_quick ? "true" : "false", dev_count, mix_devices,
           use_tsc ? "tsc" : "clock_gettime", ns_per_tick,
           timer_cost_ns, timer_cost_p50_ns, tsc_drift);
    int firstenv = 1;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "CUPOOL_", 7) || !eq || !strncmp(*e, "CUPOOL_DRIVER_PATH=", 19))
            continue;
        printf("%s\"%.*s\":", firstenv ? "" : ",", (int)(eq - *e), *e);
        json_str(eq + 1);
        firstenv = 0;
    }
    printf("},\n\"maintenance\":{\"running\":%s,\"wakeups\":%llu,\"background_creates\":%llu,"
           "\"background_destroys\":%llu,\"request_creates\":%llu,\"request_destroys\":%llu},\n"
           "\"workloads\":[",
           m.running ? "true" : "false", (unsigned long long)m.wakeups,
           (unsigned long long)m.background_creates, (unsigned long long)m.background_destroys,
           (unsigned long long)m.request_creates, (unsigned long long)m.request_destroys);
    for (int i = 0; i < norder; i++) {
        int w = order[i];
        printf("%s\n{\"workload\":\"%s\",\"description\":", i ? "," : "", wl_names[w]);
        json_str(wl_desc(w));
        printf(",\"rows\":[");
        int firstr = 1;
        for (int k = 0; k < nrows; k++) {
            if (rows[k].wl != w)
                continue;
            printf("%s\n", firstr ? "" : ",");
            json_row(&rows[k]);
            firstr = 0;
        }
        printf("]");
        if (w == W_DEVICES)
            json_devices();
        printf("}");
    }
    printf("\n],\n\"key_figures\":[");
    for (int i = 0; i < nkeys_out; i++) {
        const struct key_fig *k = &keys_out[i];
        printf("%s\n{\"figure\":", i ? "," : "");
        json_str(k->what);
        printf(",\"value\":");
        json_num(k->value);
        if (k->target < 0)
            printf(",\"unit\":\"%s\",\"target_max\":null,\"met\":null}", k->unit);
        else /* no verdict on the simulated driver, as in the table */
            printf(",\"unit\":\"%s\",\"target_max\":%g,\"met\":%s}", k->unit, k->target,
                   label[0] ? "null" : k->value <= k->target ? "true" : "false");
    }
    printf("\n]}\n");
    return 0;
}
