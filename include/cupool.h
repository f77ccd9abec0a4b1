/* SPDX-License-Identifier: MIT */
/*
 * cupool: pooled CUDA streams and events for latency-sensitive services.
 *
 * Creating a CUDA stream costs ~5.5-8.8 us on an H200 (driver 580, CUDA 13.0) and the driver
 * serialises creation across threads. cupool hands out streams and events from per-thread
 * caches (magazines) backed by a lock-free shared depot, so a warm acquire+release pair costs
 * tens of nanoseconds and never touches a driver lock.
 *
 * Conventions for every function below:
 *  - Errors are CUresult values. cupool-specific failures map to the nearest driver code and
 *    are listed per function. cupool_error_string() describes the most recent failure on the
 *    calling thread in words (what was tried and what failed).
 *  - The CUDA driver (libcuda.so.1, or CUPOOL_DRIVER_PATH) is loaded at the first call; no
 *    link-time dependency on libcuda or libcudart exists. Minimum driver: CUDA 12.0 (R525),
 *    the first release with cuGetProcAddress_v2 and cuCtxGetId.
 *  - All functions are thread-safe. A handle acquired by one thread may be released by any
 *    thread, provided the caller orders the two (as for any object handed between threads).
 *  - After the process has begun to exit (atexit), or once the driver reports
 *    CUDA_ERROR_DEINITIALIZED, acquires fail with CUDA_ERROR_DEINITIALIZED and releases succeed
 *    without touching the driver (the handle is left to the dying driver). In a child created
 *    by fork() after cupool was initialised, every call fails with CUDA_ERROR_NOT_PERMITTED.
 */
#ifndef CUPOOL_H
#define CUPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CUPOOL_BUILDING) && !defined(CUPOOL_BUILDING_PRELOAD) && defined(__GNUC__)
#define CUPOOL_API __attribute__((visibility("default")))
#else
#define CUPOOL_API
#endif

#define CUPOOL_VERSION_MAJOR 0
#define CUPOOL_VERSION_MINOR 1
#define CUPOOL_VERSION_PATCH 0
/** Compile-time version as one integer: major * 10000 + minor * 100 + patch. */
#define CUPOOL_VERSION (CUPOOL_VERSION_MAJOR * 10000 + CUPOOL_VERSION_MINOR * 100 + CUPOOL_VERSION_PATCH)

/** Version of the loaded library as "major.minor.patch"; a static string, never NULL. */
CUPOOL_API const char *cupool_version(void);

/**
 * Describes the most recent failed cupool call made by the calling thread: which driver
 * library or entry point was tried and what failed, e.g.
 * "dlopen(\"libcuda.so.1\") failed: libcuda.so.1: cannot open shared object file".
 * Returns "no error" if no call on this thread has failed. The string stays valid until the
 * thread's next cupool call. Successful calls do not clear it (like errno).
 */
CUPOOL_API const char *cupool_error_string(void);

/**
 * Name of a CUresult ("CUDA_ERROR_INVALID_VALUE"), from cupool's own table, so it works
 * without a driver. Unknown values give "CUDA_ERROR_UNKNOWN_CODE". Never NULL.
 */
CUPOOL_API const char *cupool_result_name(CUresult result);

/**
 * Loads the driver and reads the CUPOOL_* environment now instead of at the first call.
 * Does nothing more once it has succeeded. A failure another attempt cannot cure (the first
 * four codes below, and CUDA_ERROR_INVALID_DEVICE) is remembered and returned by every later
 * call; any other failure of cuInit, cuDriverGetVersion or cuGetProcAddress (out of memory,
 * for instance) is retried by the next call.
 * Returns CUDA_SUCCESS, or:
 *  - CUDA_ERROR_NOT_INITIALIZED: the driver library could not be opened (no driver installed).
 *  - CUDA_ERROR_STUB_LIBRARY: the library found is the CUDA toolkit's stub libcuda.
 *  - CUDA_ERROR_NOT_SUPPORTED: the driver is older than CUDA 12.0 or lacks an entry point.
 *  - CUDA_ERROR_NO_DEVICE or any other error cuInit(0) returned.
 *  - CUDA_ERROR_NOT_PERMITTED: called in a child forked after cupool was initialised.
 *  - CUDA_ERROR_DEINITIALIZED: the process is exiting, the driver reported it was torn
 *    down, or the library is being unloaded.
 * Thread-safe; concurrent first calls initialise once.
 */
CUPOOL_API CUresult cupool_init(void);

/**
 * Resolves a driver entry point through the driver cupool loaded (cuGetProcAddress_v2 with
 * CU_GET_PROC_ADDRESS_DEFAULT), so programs and tests can call the same driver without
 * linking libcuda. cuda_version is the CUDA version whose ABI the caller expects, e.g. 4000
 * for cuStreamDestroy_v2 semantics. Returns CUDA_SUCCESS and *pfn, or CUDA_ERROR_INVALID_VALUE
 * (NULL argument), CUDA_ERROR_NOT_FOUND (no such symbol at that version) or an init error.
 */
CUPOOL_API CUresult cupool_driver_get_proc(const char *symbol, int cuda_version, void **pfn);

/* ------------------------------------------------------------------------------------------ */
/* Streams, current-context API: shaped like cuStreamCreateWithPriority / cuStreamDestroy.    */
/* ------------------------------------------------------------------------------------------ */

/**
 * Hands the caller a stream of the current context with the given flags and priority,
 * exclusively, until cupool_stream_release(). Reuses an idle pooled stream when one exists;
 * otherwise creates one (cuStreamCreateWithPriority). A hit costs one cuCtxGetId call (~17 ns
 * on an H200), one cuStreamIsCapturing call (~17 ns) on the reused stream unless it was
 * released with CUPOOL_RELEASE_NOT_CAPTURING, and the pool's own work (a few ns).
 *
 * flags: CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING. priority: as for
 * cuStreamCreateWithPriority; values outside the context's range are clamped to it (as the
 * driver does), so equal clamped priorities share one pool.
 *
 * A stream found in stream capture (released while capturing) is never handed out: it is
 * destroyed and the next idle stream is tried. A reused stream may still have work queued by
 * its previous owner (releasing does not wait). Work the new owner enqueues runs after it, in
 * stream order, and cuStreamSynchronize() by the new owner waits for it too. Synchronise or
 * record an event before releasing if that matters.
 *
 * Returns CUDA_SUCCESS, or: CUDA_ERROR_INVALID_VALUE (stream NULL, or unknown flags);
 * CUDA_ERROR_INVALID_CONTEXT (no current context); CUDA_ERROR_CONTEXT_IS_DESTROYED (the
 * current context was destroyed or reset); the sticky error of a broken context (e.g.
 * CUDA_ERROR_ILLEGAL_ADDRESS, as cuStreamIsCapturing reports it); any error of
 * cuStreamCreateWithPriority on a miss; CUDA_ERROR_OUT_OF_MEMORY (cupool's metadata); or an
 * init error (see cupool_init()). On error *stream is left unchanged.
 */
CUPOOL_API CUresult cupool_stream_acquire(CUstream *stream, unsigned int flags, int priority);

/**
 * Gives back a stream obtained from cupool_stream_acquire() or cupool_stream_pool_acquire().
 * Any thread may release it. No driver call on its fast path: the stream goes into the calling
 * thread's magazine. Once per CUPOOL_MAGAZINE_SIZE releases at most, a release exchanges a
 * full magazine with the shared depot; if that finds the depot above CUPOOL_STREAM_IDLE_MAX,
 * it destroys at most two magazines' worth of queued idle streams (one cuCtxGetId check,
 * then one cuStreamDestroy each) before returning. Releasing a stream whose context has since
 * been reset or destroyed makes no driver call: cupool forgets it once it sees the context
 * gone. One exception (docs/reliability.md, Limits): if the driver has meanwhile given the
 * same handle value to a new stream that cupool handed out, the late release is taken as a
 * release of the new stream; release before a reset, or not at all after it. A stream
 * released while in stream capture is dropped when an acquire next meets it, never handed
 * out.
 *
 * Returns CUDA_SUCCESS, or CUDA_ERROR_INVALID_HANDLE: the stream was not handed out by
 * cupool, was already released, or is an event. Nothing changes on error. As every call: the
 * init error if the driver never loaded, CUDA_ERROR_NOT_PERMITTED in a forked child; after
 * exit began or the driver was torn down, CUDA_SUCCESS without any work.
 * Releasing the same stream from two threads at the same instant is a race in the caller
 * (as with free()); it is detected only when the two releases are ordered.
 */
CUPOOL_API CUresult cupool_stream_release(CUstream stream);

/* ------------------------------------------------------------------------------------------ */
/* Events, current-context API: shaped like cuEventCreate / cuEventDestroy.                   */
/* ------------------------------------------------------------------------------------------ */

/**
 * Hands the caller an event of the current context with the given flags (any combination of
 * CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING, CU_EVENT_INTERPROCESS; INTERPROCESS needs
 * DISABLE_TIMING, as in the driver). A reused event may hold the state of its last record;
 * record it before waiting on or querying it.
 * Returns CUDA_SUCCESS, or CUDA_ERROR_INVALID_VALUE (event NULL, unknown or invalid flags),
 * and otherwise as cupool_stream_acquire() with cuEventCreate in place of stream creation.
 */
CUPOOL_API CUresult cupool_event_acquire(CUevent *event, unsigned int flags);

/**
 * Gives back an event obtained from cupool_event_acquire() or cupool_event_pool_acquire().
 * No driver call on its fast path; over CUPOOL_EVENT_IDLE_MAX, as cupool_stream_release().
 * Returns CUDA_SUCCESS, or CUDA_ERROR_INVALID_HANDLE (not handed out by cupool, already
 * released, or a stream); nothing changes on error.
 */
CUPOOL_API CUresult cupool_event_release(CUevent event);

/* ------------------------------------------------------------------------------------------ */
/* Explicit pools: resolve context, flags and priority once, then acquire with no driver call. */
/* ------------------------------------------------------------------------------------------ */

/** A stream pool: one (context, flags, priority) class. Once its context is gone (reset,
 *  destroyed) every acquire through it returns CUDA_ERROR_CONTEXT_IS_DESTROYED. An opaque
 *  value, not an address; never NULL. */
typedef struct cupool_stream_pool_st *cupool_stream_pool_t;
/** An event pool: one (context, flags) class; as cupool_stream_pool_t. */
typedef struct cupool_event_pool_st *cupool_event_pool_t;

/**
 * Pool flag (cupool_stream_pool_get, cupool_event_pool_get), cupool's own: the caller's
 * promise that the pool's context outlives every use of the pool handle returned: no
 * cuDevicePrimaryCtxReset (cudaDeviceReset), cuCtxDestroy or last cuDevicePrimaryCtxRelease of
 * that context while any thread may acquire through it. With the promise, an acquire hit
 * makes no driver call at all (a stream released with CUPOOL_RELEASE_NOT_CAPTURING, or any
 * event). Without it (the default) every acquire first asks the driver whether the context is
 * still the pool's (one cuCtxGetId(ctx), ~14 ns on an H200) and refuses with
 * CUDA_ERROR_CONTEXT_IS_DESTROYED once it is gone. Breaking the promise hands out handles the
 * driver destroyed with the context: their next use fails, or crashes the driver.
 */
#define CUPOOL_POOL_CONTEXT_OUTLIVES 0x80000000u

/**
 * Returns in *pool the stream pool of context ctx (NULL: the current context) for the given
 * flags (CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING, optionally with
 * CUPOOL_POOL_CONTEXT_OUTLIVES) and (clamped) priority. Calling it again with equal arguments
 * returns the same pool; pools need no destruction. Prewarms CUPOOL_STREAM_PREWARM streams the first time a class is
 * seen. Returns CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE (pool NULL, unknown flags),
 * CUDA_ERROR_INVALID_CONTEXT (ctx NULL and no current context), a driver error (e.g.
 * CUDA_ERROR_CONTEXT_IS_DESTROYED for a destroyed ctx; also when ctx is released, destroyed
 * or reset by another thread while the pool is made), an init error, or
 * CUDA_ERROR_DEINITIALIZED / CUDA_ERROR_NOT_PERMITTED in those lifecycle states.
 */
CUPOOL_API CUresult cupool_stream_pool_get(cupool_stream_pool_t *pool, CUcontext ctx,
                                           unsigned int flags, int priority);

/**
 * Like cupool_stream_acquire() for this pool, whatever context is current. Every acquire first
 * checks that the pool's context is still the one it was made for (cuCtxGetId(ctx), ~14 ns on
 * an H200), unless the pool was made with CUPOOL_POOL_CONTEXT_OUTLIVES. A reused stream
 * released without CUPOOL_RELEASE_NOT_CAPTURING is then checked with cuStreamIsCapturing()
 * (~17 ns). So a hit costs one driver call (none with the promise) for a vouched stream, two
 * (one) for another. A miss creates the stream in the pool's context (pushing it current if
 * needed). Returns as cupool_stream_acquire(); CUDA_ERROR_INVALID_VALUE if pool is not a
 * stream pool or stream is NULL; CUDA_ERROR_CONTEXT_IS_DESTROYED once the pool's context was
 * reset or destroyed (even when this is the first cupool call since, and even for a stream
 * released with CUPOOL_RELEASE_NOT_CAPTURING); a passing error of that check otherwise (the
 * pool then stays as it was).
 */
CUPOOL_API CUresult cupool_stream_pool_acquire(cupool_stream_pool_t pool, CUstream *stream);

/** Release flag: the caller vouches that the stream is not in stream capture, so the acquire
 *  that next hands it out skips cuStreamIsCapturing() (~17 ns on an H200). A stream released
 *  with this flag while capturing corrupts its next owner's work. (The context check of an
 *  explicit pool is governed by CUPOOL_POOL_CONTEXT_OUTLIVES, not by this flag.) */
#define CUPOOL_RELEASE_NOT_CAPTURING 0x1u

/**
 * Like cupool_stream_release(), checking that the stream belongs to this pool.
 * release_flags: 0 or CUPOOL_RELEASE_NOT_CAPTURING.
 * Returns as cupool_stream_release(), plus CUDA_ERROR_INVALID_VALUE (pool NULL or unknown
 * release_flags) and CUDA_ERROR_INVALID_HANDLE (the stream belongs to another pool).
 */
CUPOOL_API CUresult cupool_stream_pool_release(cupool_stream_pool_t pool, CUstream stream,
                                               unsigned int release_flags);

/** Event pool of context ctx (NULL: current) for flags; as cupool_stream_pool_get(). */
CUPOOL_API CUresult cupool_event_pool_get(cupool_event_pool_t *pool, CUcontext ctx,
                                          unsigned int flags);
/** Like cupool_event_acquire() for this pool: one cuCtxGetId(ctx) on a hit (none with
 *  CUPOOL_POOL_CONTEXT_OUTLIVES); CUDA_ERROR_CONTEXT_IS_DESTROYED once the context is gone. */
CUPOOL_API CUresult cupool_event_pool_acquire(cupool_event_pool_t pool, CUevent *event);
/** Like cupool_event_release(), checking that the event belongs to this pool. */
CUPOOL_API CUresult cupool_event_pool_release(cupool_event_pool_t pool, CUevent event);

/* ------------------------------------------------------------------------------------------ */
/* Maintenance and statistics                                                                  */
/* ------------------------------------------------------------------------------------------ */

/**
 * Destroys idle handles now: first moves the calling thread's own cached handles to the
 * shared depot, then destroys every handle queued for destruction and every idle handle in
 * the depot above each class's low-water mark (CUPOOL_STREAM_PREWARM / CUPOOL_EVENT_PREWARM).
 * Handles cached by other threads (at most 2 x CUPOOL_MAGAZINE_SIZE per thread and class) are
 * not touched. Handles of a context that no longer exists are forgotten without a driver call.
 * Asks the driver about every pool's context first (one cuCtxGetId(ctx) per class): the pools
 * of contexts destroyed or reset since are retired, and their class slots reclaimed once no
 * handle of theirs is left (waiting up to 10 ms for other threads' lock-free lookups).
 * Returns CUDA_SUCCESS or the first error: a failed destroy keeps that handle (and the rest of
 * its magazine) pooled for a later trim; a transient failure of the context check destroys
 * nothing. Also an init
 * error; CUDA_ERROR_DEINITIALIZED after exit began or the driver was torn down (nothing is
 * destroyed then); CUDA_ERROR_NOT_PERMITTED in a forked child.
 * It also drops every cached pipeline or captured graph that no launch is using now
 * (cupool_pipeline_launch builds them again on demand).
 * Thread-safe; may run concurrently with acquires and releases.
 */
CUPOOL_API CUresult cupool_trim(void);

/**
 * Lets go of everything cupool holds of context ctx, before the application destroys or
 * resets it (cuCtxDestroy, cuDevicePrimaryCtxReset, cudaDeviceReset, the last
 * cuDevicePrimaryCtxRelease). Waits for the maintenance thread's work in progress to end (it
 * works on a class at a time, for at most a few hundred microseconds), destroys ctx's idle
 * handles (the calling thread's magazines, the depots and the queues) and retires its pools,
 * then drops the graph cache's idle entries and destroys its retired graphs, as cupool_trim()
 * does. From its return on, no thread of cupool calls the driver with a handle of ctx: handles
 * of ctx that callers still hold are forgotten when released, those other threads cache are
 * forgotten without a driver call, and explicit pools of ctx refuse with
 * CUDA_ERROR_CONTEXT_IS_DESTROYED. Using ctx through cupool afterwards makes new pools.
 * Why: the maintenance thread calls the driver at any time, and the driver crashes on a
 * handle of a context that was reset (seen on the H200); it checks the context before every
 * destroy, which narrows the window a reset could fall into to one driver call, and this call
 * closes it. Without the maintenance thread (CUPOOL_BACKGROUND=0) it is optional.
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (ctx NULL); the first failed destroy (that
 * handle is forgotten with the rest when the context goes); an init error;
 * CUDA_ERROR_DEINITIALIZED after exit began; CUDA_ERROR_NOT_PERMITTED in a forked child.
 * Thread-safe. Other threads must not be using ctx's handles, as the driver requires for the
 * destroy or reset that follows.
 */
CUPOOL_API CUresult cupool_context_release(CUcontext ctx);

/** Kind of handle a class pools. */
typedef enum cupool_kind {
    CUPOOL_KIND_STREAM = 0,
    CUPOOL_KIND_EVENT = 1
} cupool_kind_t;

/*
 * Statistics structs grow at their end, release after release, without breaking callers built
 * against an older cupool.h. Each begins with `size_t size`: the caller sets it to the sizeof
 * the struct it was compiled with before the call (the CUPOOL_*_STATS_INIT initialisers do).
 * cupool writes only the first `size` bytes, the fields that fit, and stores in `size` the
 * bytes it wrote: the smaller of the caller's size and its own struct's. A caller built against
 * an older header thus gets its old prefix and nothing past it; one built against a newer header
 * than the library's learns from `size` which fields were filled. A size smaller than the first
 * version's (CUPOOL_*_STATS_SIZE_V1) is refused with CUDA_ERROR_INVALID_VALUE.
 */
#if defined(__cplusplus)
/* C++: a value-initialised struct with its size set (no missing-field warning under -Wextra) */
#define CUPOOL_STATS_INIT_(type) ([]() { type cupool_s_{}; cupool_s_.size = sizeof(type); return cupool_s_; }())
#else
#define CUPOOL_STATS_INIT_(type) { .size = sizeof(type) }
#endif

/**
 * Statistics of one class. Counters are sums of per-thread counters read without stopping
 * the threads, so a snapshot taken during traffic may be off by the operations in flight.
 */
typedef struct cupool_class_stats {
    size_t size;                   /**< set by the caller: sizeof(cupool_class_stats_t) */
    cupool_kind_t kind;
    unsigned long long context_id; /**< cuCtxGetId of the class's context */
    int device;                    /**< the context's device (cuCtxGetDevice; the ordinal) when
                                        the class was made; -1 if the driver did not say */
    unsigned int flags;            /**< stream or event creation flags */
    int priority;                  /**< stream priority after clamping; 0 for events */
    int context_alive;             /**< 0 once cupool saw the context destroyed or reset */
    uint64_t acquires;   /**< handles handed out (count) */
    uint64_t hits;       /**< acquires served without creating a handle */
    uint64_t releases;   /**< handles given back, pooled or dropped */
    uint64_t creates;    /**< driver creations (misses and prewarming) */
    uint64_t destroys;   /**< driver destructions (over the idle cap, trim, pass-through) */
    uint64_t dropped;    /**< released handles not pooled: in error, or of a dead context */
    uint64_t idle;       /**< handles alive and not handed out (in magazines or depot) */
    uint64_t in_use;     /**< handles handed out and not yet released */
    uint64_t high_water; /**< most handles of this class alive at once (in use + idle) */
} cupool_class_stats_t;

/** The size of the first version of cupool_class_stats_t (the smallest accepted). */
#define CUPOOL_CLASS_STATS_SIZE_V1 (offsetof(cupool_class_stats_t, high_water) + sizeof(uint64_t))
/** Initialiser: `cupool_class_stats_t st[16] = {CUPOOL_CLASS_STATS_INIT};` (element 0 is
 * enough for an array). */
#define CUPOOL_CLASS_STATS_INIT CUPOOL_STATS_INIT_(cupool_class_stats_t)

/**
 * Copies per-class statistics into stats[0 .. capacity-1] and the number of classes into
 * *count (which may exceed capacity: call again with a larger array). stats may be NULL when
 * capacity is 0. With capacity > 0, stats[0].size gives the size of every element of the
 * array (its stride): set it (CUPOOL_CLASS_STATS_INIT); each element written gets its size
 * set as above. Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (count NULL, stats NULL with
 * capacity > 0, or stats[0].size below CUPOOL_CLASS_STATS_SIZE_V1). Never calls the driver;
 * works in every lifecycle state.
 */
CUPOOL_API CUresult cupool_stats_get(cupool_class_stats_t *stats, size_t capacity, size_t *count);

/**
 * Prints the statistics as a table, one line per class, to out, then (once pipelines were
 * launched) one line of graph-cache counters, and one per device once pipelines were launched
 * on two devices or more (cupool_graph_stats_device_get). Never calls the driver.
 * Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (out NULL).
 */
CUPOOL_API CUresult cupool_stats_print(FILE *out);

/** Output formats of cupool_stats_print_format(). */
typedef enum cupool_stats_format {
    CUPOOL_STATS_FORMAT_TABLE = 0,     /**< the table of cupool_stats_print() */
    CUPOOL_STATS_FORMAT_JSON = 1,      /**< one JSON object (RFC 8259) on one line */
    CUPOOL_STATS_FORMAT_PROMETHEUS = 2 /**< Prometheus text exposition format 0.0.4 */
} cupool_stats_format_t;

/**
 * Prints every statistic, of the classes, the maintenance thread and the graph cache, to out
 * in `format`, and flushes out. JSON: one object {"version", "pid", "driver", "allocator",
 * "metadata_bytes", "magazine_size", "pooling_disabled", "classes": [one object per class:
 * every field of cupool_class_stats_t but size, kind as "stream" or "event", context_alive as
 * a boolean], "maintenance": {...}, "graph": {..., "devices": [one object per device that
 * launched through the graph cache: "device" and the fields kept per device]}}, numbers as
 * integers, strings escaped. Prometheus: metrics named cupool_*, counters suffixed _total,
 * per-class metrics labelled kind, context_id, device, flags (hex) and priority, per-device
 * graph-cache metrics (cupool_graph_device_*) labelled device. Never calls the driver; thread-safe;
 * a stream that blocks holds up no other thread. Write errors are left in out (ferror).
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (out NULL, or format not one of the above);
 * CUDA_ERROR_OUT_OF_MEMORY (no memory for the snapshot of the classes; nothing was written);
 * CUDA_ERROR_NOT_PERMITTED in a child forked after cupool was initialised.
 */
CUPOOL_API CUresult cupool_stats_print_format(FILE *out, cupool_stats_format_t format);

/**
 * Who paid for handle creation and destruction, summed over every stream and event class
 * since start (counts). cupool's maintenance thread (CUPOOL_BACKGROUND, on by default)
 * replenishes a class ahead of demand and destroys idle handles whose idle time decayed
 * (CUPOOL_DECAY_MS) or that exceed the hard idle caps (CUPOOL_*_IDLE_MAX); everything else is
 * done on the calling ("request") thread: a miss that found the depot empty, trim, pass-through
 * mode, unload. A service in steady state should see the request_ figures stop growing.
 */
typedef struct cupool_maintenance_stats {
    size_t size;                  /**< set by the caller: sizeof(cupool_maintenance_stats_t) */
    int running;                  /**< 1 once the maintenance thread was started, until it stops
                                       (its name may show in /proc a moment later) */
    uint64_t wakeups;             /**< rounds of work the maintenance thread ran */
    uint64_t background_creates;  /**< handles created by the maintenance thread */
    uint64_t background_destroys; /**< handles destroyed by the maintenance thread */
    uint64_t request_creates;     /**< handles created on callers' threads */
    uint64_t request_destroys;    /**< handles destroyed on callers' threads */
    uint64_t graph_reaps;         /**< graph-cache graveyard reaps run by the maintenance thread */
} cupool_maintenance_stats_t;

/** The size of the first version of cupool_maintenance_stats_t (the smallest accepted). */
#define CUPOOL_MAINTENANCE_STATS_SIZE_V1 \
    (offsetof(cupool_maintenance_stats_t, graph_reaps) + sizeof(uint64_t))
/** Initialiser: `cupool_maintenance_stats_t m = CUPOOL_MAINTENANCE_STATS_INIT;` */
#define CUPOOL_MAINTENANCE_STATS_INIT CUPOOL_STATS_INIT_(cupool_maintenance_stats_t)

/** Copies the maintenance statistics into *stats (stats->size set by the caller: the fields
 * that fit are written, see above). Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (stats
 * NULL, or stats->size below CUPOOL_MAINTENANCE_STATS_SIZE_V1). Never calls the driver;
 * thread-safe; works in every lifecycle state. */
CUPOOL_API CUresult cupool_maintenance_stats_get(cupool_maintenance_stats_t *stats);

/**
 * Bytes of host memory cupool holds for its own bookkeeping: thread caches, magazines, handle
 * records, registry tables, pool classes, pipelines and the graph cache's own records (not
 * the driver's graphs), each block's 64-byte header included (bytes).
 * It grows with the number of threads, classes and handles at their peak and never with the
 * number of operations. dlclose() of the library frees all of it. Never calls the driver;
 * thread-safe; works in every lifecycle state.
 */
CUPOOL_API size_t cupool_metadata_bytes(void);

/* ---------------------------------------------------------------------------------------- */
/* Pipelines: kernel pipelines launched as cached graphs                                     */
/* ---------------------------------------------------------------------------------------- */

/**
 * A pipeline: a reusable description of work (kernel launches, memsets, copies, event records
 * and waits, host functions) launched on a stream with one call. Its *signature* (node types,
 * functions, argument layouts, dependencies) keys a process-wide cache of instantiated graphs:
 * a repeat launch of the same structure replays a cached CUgraphExec with only the changed
 * nodes patched in. A pipeline object is used by one thread at a time; reset and refill it
 * per request. Nodes are numbered from 0 in the order added (cupool_node_t).
 * An add that fails (any cupool_pipeline_ call that appends a node or sets dependencies)
 * leaves the pipeline as it was, and the pipeline remembers the error: launches return it
 * until cupool_pipeline_reset(), so a description missing a node is never launched.
 */
typedef struct cupool_pipeline *cupool_pipeline_t;
typedef unsigned int cupool_node_t;

/**
 * Creates an empty pipeline. Returns CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE (pipeline NULL),
 * CUDA_ERROR_OUT_OF_MEMORY, or the initialisation error. Thread-safe.
 */
CUPOOL_API CUresult cupool_pipeline_create(cupool_pipeline_t *pipeline);
/** Destroys a pipeline (NULL is ignored; CUDA_ERROR_INVALID_VALUE for a value that is not a
 * live pipeline, as far as can be told: a destroyed one must not be used). Cached graphs stay
 * cached. */
CUPOOL_API CUresult cupool_pipeline_destroy(cupool_pipeline_t pipeline);
/** Removes every node and forgets a failed add, keeping the pipeline's memory for the next
 * description. Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (not a pipeline). */
CUPOOL_API CUresult cupool_pipeline_reset(cupool_pipeline_t pipeline);

/**
 * Appends a kernel launch, shaped exactly like cuLaunchKernel: grid and block dimensions,
 * dynamic shared memory (bytes) and args (one pointer per kernel parameter; the values are
 * copied now, as cuLaunchKernel copies them at launch). By default the node depends on the
 * node added before it. *node (if not NULL) gets its number.
 * Needs a CUDA 12.4 driver (cuFuncGetParamInfo gives the argument layout).
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (NULL pipeline or function, a zero
 * dimension, args NULL for a kernel with parameters); CUDA_ERROR_NOT_SUPPORTED (driver older
 * than 12.4); CUDA_ERROR_OUT_OF_MEMORY; a driver error of cuFuncGetParamInfo.
 */
CUPOOL_API CUresult cupool_pipeline_kernel(cupool_pipeline_t pipeline, CUfunction f,
                                           unsigned int grid_x, unsigned int grid_y,
                                           unsigned int grid_z, unsigned int block_x,
                                           unsigned int block_y, unsigned int block_z,
                                           unsigned int shared_bytes, void **args,
                                           cupool_node_t *node);
/** The most launch attributes one cupool_pipeline_kernel_ex() call takes (entries of
 * attrs[], CU_LAUNCH_ATTRIBUTE_IGNORE ones included). */
#define CUPOOL_PIPELINE_ATTRS_MAX 16

/**
 * Appends a kernel launch with launch attributes, shaped like cuLaunchKernelEx: the launch as
 * cupool_pipeline_kernel() takes it (grid and block dimensions, dynamic shared memory in bytes,
 * args copied now), and attrs[0 .. nattrs-1] as a CUlaunchConfig's attrs (copied now; attrs
 * may be NULL when nattrs is 0). Attributes taken (each at most once; CU_LAUNCH_ATTRIBUTE_IGNORE
 * entries are skipped):
 *  - CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: thread-block cluster (blocks; each dimension at
 *    least 1 and dividing the grid's). Compute capability 9.0 or newer;
 *  - CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION: a multiple of the cluster dimension (1 x 1
 *    x 1 without one) dividing the grid;
 *  - CU_LAUNCH_ATTRIBUTE_COOPERATIVE (nonzero: a cooperative launch; the grid must fit on the
 *    device at once, which the driver checks when it launches);
 *  - CU_LAUNCH_ATTRIBUTE_PRIORITY: the kernel's priority. A pipeline with one kernel giving a
 *    priority is instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY: its graph's
 *    kernels then run at their nodes' priorities, those without one at the driver's default
 *    for a node, not at the stream's (node by node, with CUPOOL_GRAPH_DISABLE, they run at the
 *    stream's);
 *  - CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (nonzero: the kernel may begin
 *    before the kernels it depends on finish, and waits for them with
 *    cudaGridDependencySynchronize()): in the graph, its dependencies on kernel nodes become
 *    programmatic edges, as a stream capture makes them. Compute capability 9.0 or newer;
 *  - CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN (a CUlaunchMemSyncDomain) and
 *    CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP;
 *  - CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE (a CUclusterSchedulingPolicy).
 * Every attribute is part of the pipeline's signature, as the function is: the driver cannot
 * change a kernel node's attributes in an instantiated graph (on an H200 it accepted an
 * update of a cluster dimension and went on launching the old one), so a launch whose
 * attributes differ from every cached description's is a miss that instantiates a graph of
 * its own, counted in the graph statistics; a launch with the attributes of a cached one is a
 * hit that patches only arguments, grid, block and shared memory, as for any kernel. In the
 * graph, the attributes are set on the kernel node (cuGraphKernelNodeSetAttribute); launched
 * node by node (CUPOOL_GRAPH_DISABLE=1) the kernel goes to cuLaunchKernelEx with the same
 * attributes. No attribute (nattrs 0, or IGNORE only): the same as cupool_pipeline_kernel().
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (what cupool_pipeline_kernel() refuses;
 * attrs NULL with nattrs > 0; nattrs above CUPOOL_PIPELINE_ATTRS_MAX; an attribute not taken,
 * named in the message; one given twice; a value out of its range: a cluster dimension of 0
 * or one that does not divide the grid, a preferred cluster dimension that is not a multiple
 * of it, an unknown memory sync domain or scheduling policy); CUDA_ERROR_NOT_SUPPORTED (a
 * driver lacking an entry point these attributes need, named in the message:
 * cuGraphKernelNodeSetAttribute; cuGraphAddDependencies with edge data, CUDA 12.3, for
 * programmatic stream serialization; cuLaunchKernelEx when pipelines launch node by node;
 * or what cupool_pipeline_kernel() needs); CUDA_ERROR_OUT_OF_MEMORY; a driver error of
 * cuFuncGetParamInfo. A failed add changes nothing and is remembered, as for every add. A
 * launch shape the driver refuses with these attributes (too large a cooperative grid, a
 * cluster larger than the device takes) is its error at cupool_pipeline_launch().
 * Thread-safety: as every add, one thread at a time per pipeline.
 */
CUPOOL_API CUresult cupool_pipeline_kernel_ex(cupool_pipeline_t pipeline, CUfunction f,
                                              unsigned int grid_x, unsigned int grid_y,
                                              unsigned int grid_z, unsigned int block_x,
                                              unsigned int block_y, unsigned int block_z,
                                              unsigned int shared_bytes, void **args,
                                              const CUlaunchAttribute *attrs,
                                              unsigned int nattrs, cupool_node_t *node);
/** Appends a memset of count elements of element_bytes (1 or 4) at dst to value (its low
 * byte for 1-byte elements). CUDA_ERROR_INVALID_VALUE: dst 0, count 0, another size. */
CUPOOL_API CUresult cupool_pipeline_memset(cupool_pipeline_t pipeline, CUdeviceptr dst,
                                           unsigned int value, unsigned int element_bytes,
                                           size_t count, cupool_node_t *node);
/** Appends a copy of bytes from src to dst (unified addressing: device memory or pinned host
 * memory on either side). */
CUPOOL_API CUresult cupool_pipeline_memcpy(cupool_pipeline_t pipeline, CUdeviceptr dst,
                                           CUdeviceptr src, size_t bytes, cupool_node_t *node);
/** Appends a record of event (as cuEventRecord). */
CUPOOL_API CUresult cupool_pipeline_event_record(cupool_pipeline_t pipeline, CUevent event,
                                                 cupool_node_t *node);
/** Appends a wait for event (as cuStreamWaitEvent). */
CUPOOL_API CUresult cupool_pipeline_event_wait(cupool_pipeline_t pipeline, CUevent event,
                                               cupool_node_t *node);
/** Appends a host function call (as cuLaunchHostFunc). */
CUPOOL_API CUresult cupool_pipeline_host(cupool_pipeline_t pipeline, CUhostFn fn,
                                         void *user_data, cupool_node_t *node);
/**
 * Makes node depend on exactly the count nodes in on[] (each added before it), replacing its
 * default dependency: explicit edges make a DAG; count 0 makes it a root.
 * Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (a node number out of range, a dependency
 * not added before node, a node listed twice, on NULL with count > 0); nothing changes on
 * error.
 */
CUPOOL_API CUresult cupool_pipeline_depend(cupool_pipeline_t pipeline, cupool_node_t node,
                                           const cupool_node_t *on, size_t count);

/*
 * Conditional nodes: a branch the host chooses per launch.
 *
 * cupool_pipeline_switch() and cupool_pipeline_if() append a conditional node with bodies;
 * cupool_pipeline_body(pipeline, node, i) makes the adds that follow go into body i of that
 * node, until cupool_pipeline_body_end() returns to the scope the node is in. The value
 * chosen (a SWITCH's branch, an IF's condition) is a parameter like a kernel argument: a
 * launch with another value is a hit on the cached graph with one node patched, not a new
 * graph. In the graph the node is a one-thread kernel of cupool's own that calls
 * cudaGraphSetConditional (loaded from PTX text once per context), followed by a CUDA
 * conditional node (CU_GRAPH_NODE_TYPE_CONDITIONAL) whose body graphs hold the bodies' nodes;
 * the node's type, its body count and everything in its bodies (node kinds, functions, launch
 * attributes, dependencies) are structure, part of the signature, and the bodies' arguments
 * are patched like any node's. A graph holding a conditional node can be instantiated once
 * only and cannot be cloned (seen on an H200), so each exec of such a pipeline gets a graph
 * built for it from the description (the first launch on each stream costs a graph build as
 * well as an instantiation). Launched node by node (CUPOOL_GRAPH_DISABLE=1), the nodes of
 * the chosen body run in the conditional node's place, and none for a value that picks no
 * body.
 *
 * Shape of a description:
 *   cupool_pipeline_kernel(p, prepare, ...);         node 0
 *   cupool_pipeline_switch(p, 4, bucket, &sw);       node 1: depends on node 0
 *   for (unsigned b = 0; b < 4; b++) {
 *       cupool_pipeline_body(p, sw, b);
 *       cupool_pipeline_kernel(p, variant[b], ...);  body b's first node: a root of its body
 *       cupool_pipeline_body_end(p);
 *   }
 *   cupool_pipeline_kernel(p, finish, ...);          depends on node 1 (the SWITCH)
 * Node numbers stay one sequence over every scope. Within a body the default dependency is
 * the body's node added before (none for its first node); at the level of the conditional
 * node, the node after it depends on it, and so runs after whichever body ran.
 * Rules: a conditional node's bodies are filled right after it, before the next node of its
 * scope (cupool_pipeline_body() on a node that is not the last of the open scope is
 * refused); a body may be opened again while that holds. Conditional nodes nest (a body may
 * hold one). Bodies take kernels (with or without launch attributes), memsets, memcpys and
 * conditional nodes, as the driver allows (CUDA_CONDITIONAL_NODE_PARAMS); event records and
 * waits and host functions are refused at the add. cupool_pipeline_depend() works within a
 * scope only: a dependency between a body and anything outside it is refused. A launch with
 * a body still open, or with a body that has no node, is refused (a body needs at least one
 * node: give an empty branch a value that picks no body instead).
 * Needs a driver with cuGraphConditionalHandleCreate and cuGraphAddNode (CUDA 12.3) and the
 * module calls, unless pipelines launch node by node; the GPU must run the setter's PTX
 * (sm_52 target, JIT-compiled by the driver).
 * Every call here is an add: a failure leaves the pipeline as it was and is remembered until
 * cupool_pipeline_reset(). Thread-safety: as every add, one thread at a time per pipeline.
 */

/**
 * Appends a SWITCH node with nbodies bodies (at least 1); body `branch` runs at launch, none
 * when branch >= nbodies. *node (if not NULL) gets its number, for cupool_pipeline_body().
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (not a pipeline, nbodies 0);
 * CUDA_ERROR_NOT_SUPPORTED (a driver without the entry points conditional nodes need, named
 * in the message, unless pipelines launch node by node); CUDA_ERROR_OUT_OF_MEMORY.
 */
CUPOOL_API CUresult cupool_pipeline_switch(cupool_pipeline_t pipeline, unsigned int nbodies,
                                           unsigned int branch, cupool_node_t *node);
/**
 * Appends an IF node with nbodies bodies (1 or 2): body 0 runs when value is nonzero, body 1
 * (when there are two) when it is zero. *node as for cupool_pipeline_switch().
 * Returns what cupool_pipeline_switch() returns; CUDA_ERROR_INVALID_VALUE also for nbodies
 * above 2.
 */
CUPOOL_API CUresult cupool_pipeline_if(cupool_pipeline_t pipeline, unsigned int nbodies,
                                       unsigned int value, cupool_node_t *node);
/**
 * Makes the adds that follow go into body i of conditional node `node`, until
 * cupool_pipeline_body_end(). Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (not a
 * pipeline; node not a conditional node; i not below its body count; node not the last node
 * of the open scope, for example another body of it still open).
 */
CUPOOL_API CUresult cupool_pipeline_body(cupool_pipeline_t pipeline, cupool_node_t node,
                                         unsigned int i);
/**
 * Ends the open body: the adds that follow go into the scope of its conditional node, after
 * that node. Returns CUDA_SUCCESS or CUDA_ERROR_INVALID_VALUE (not a pipeline, or no body is
 * open).
 */
CUPOOL_API CUresult cupool_pipeline_body_end(cupool_pipeline_t pipeline);

/**
 * Launches the pipeline on stream (in the current context). A hit on a cached signature
 * launches a cached graph exec after updating only the nodes whose parameters differ from
 * that exec's last launch; a miss builds and instantiates a graph (tens to hundreds of
 * microseconds) and caches it. An exec is reused only on the stream that launched it last
 * or once its last launch has finished, so two streams never share one (the driver would
 * serialise them). With CUPOOL_GRAPH_DISABLE=1, or a driver without graphs, the nodes are
 * launched one by one instead, with the same results.
 * Thread-safe for different pipelines. While cupool instantiates a graph on any thread,
 * graph launches wait for it (0.05 to 2.4 ms on an H200): an instantiation overlapping a
 * launch in the driver can stall both for as long as queued work takes to drain
 * (docs/graph-cache.md, "Instantiation and launches").
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (NULL pipeline, or no nodes; a conditional
 * node's body still open, or one without a node); the error of
 * an add that failed since the last reset (nothing is launched); the driver's
 * error of a failed launch (the cache stays consistent); the lifecycle errors of every call.
 */
CUPOOL_API CUresult cupool_pipeline_launch(cupool_pipeline_t pipeline, CUstream stream);

/**
 * Writes the cached graph of the pipeline's current structure as a Graphviz DOT file
 * (cuGraphDebugDotPrint, verbose). The pipeline must have been launched with this structure
 * in the current context (and its graph still cached). Returns CUDA_SUCCESS,
 * CUDA_ERROR_INVALID_VALUE (no pipeline or path), CUDA_ERROR_NOT_FOUND (nothing cached for
 * it), CUDA_ERROR_NOT_SUPPORTED (driver before CUDA 11.4), or the driver's error.
 */
CUPOOL_API CUresult cupool_pipeline_dot(cupool_pipeline_t pipeline, const char *path);

/** Work to capture: launch it on stream (any driver or runtime calls that capture) and
 * return CUDA_SUCCESS, or an error, which cupool_capture_launch returns after ending the
 * capture and discarding its graph. */
typedef CUresult (*cupool_capture_fn)(CUstream stream, void *user_data);

/** cupool_capture_launch: on a hit, launch a cached exec of the key without calling fn (it
 * holds the first capture, or the last update made to that exec: use one mode per key). */
#define CUPOOL_CAPTURE_REPLAY 0u
/** cupool_capture_launch: on a hit, run fn under capture again and update the cached exec
 * with the new graph (cuGraphExecUpdate): arguments may change, the structure should not
 * (a changed structure instantiates the exec afresh). */
#define CUPOOL_CAPTURE_UPDATE 1u

/**
 * Graph caching for code that cannot be rewritten as a pipeline (a vendor library call):
 * on a miss of (current context, key), runs fn(stream, user_data) with stream in
 * thread-local capture mode, instantiates the captured graph, caches it under key and
 * launches it on stream. On a hit, CUPOOL_CAPTURE_REPLAY launches the cached exec without
 * calling fn (right when the captured work's arguments never change); CUPOOL_CAPTURE_UPDATE
 * captures again and patches the cached exec (right when arguments change from call to call;
 * the capture costs what fn's calls cost, the update less than an instantiation). The same
 * exec rules as pipelines apply: two streams never share one.
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (fn NULL, unknown flags); fn's error; the
 * driver's error of the capture, instantiation or launch; CUDA_ERROR_NOT_SUPPORTED (a driver
 * without capture or graph entry points).
 */
CUPOOL_API CUresult cupool_capture_launch(uint64_t key, CUstream stream, cupool_capture_fn fn,
                                          void *user_data, unsigned int flags);

/** Graph-cache statistics (counts since start; bytes is an estimate of the memory held). */
typedef struct cupool_graph_stats {
    size_t size;              /**< set by the caller: sizeof(cupool_graph_stats_t) */
    uint64_t launches;        /**< pipeline and capture launches through the cache */
    uint64_t hits;            /**< launches that found their signature cached */
    uint64_t misses;          /**< launches that built a graph */
    uint64_t instantiations;  /**< cuGraphInstantiate calls (misses, extra execs, retries) */
    uint64_t updates;         /**< launches that updated at least one node */
    uint64_t nodes_updated;   /**< node parameter updates */
    uint64_t update_failures; /**< updates not made and cured by instantiating the exec afresh:
                                   refused by the driver (update_<reason>, node_update_refusals
                                   say why), or of a capture whose kernels changed a launch
                                   attribute the driver does not update in place (cluster
                                   dimension, cooperative, ...) */
    uint64_t evictions;       /**< cache entries evicted (by the bounds or cupool_trim) */
    uint64_t eager_launches;  /**< launches made node by node (CUPOOL_GRAPH_DISABLE) */
    uint64_t entries;         /**< entries cached now */
    uint64_t execs;           /**< graph execs alive now */
    uint64_t bytes;           /**< estimated host and driver memory held by the cache */
    uint64_t claims_lock_free; /**< launches that claimed the exec their thread last launched
                                    for that signature on that stream, without the cache lock */
    uint64_t claims_locked;    /**< launches that took the cache lock to find their entry and
                                    exec (launches = claims_lock_free + claims_locked) */
    uint64_t nodes_compared;   /**< node parameters launches compared with their exec's last
                                    launch: none for a pipeline refilled unchanged, only the
                                    nodes that changed since its last launch otherwise, every
                                    node when the exec last ran another description */
    /* (fields below: since the second version of this struct; a caller whose size ends
     * before them gets none of them) */
    uint64_t uploads;          /**< execs uploaded on their launch's stream as they were
                                    instantiated (cuGraphInstantiateWithParams with
                                    CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD), so that their first
                                    launch did not upload them (CUPOOL_GRAPH_UPLOAD) */
    /* Refused updates of a capture (cuGraphExecUpdate, CUPOOL_CAPTURE_UPDATE), one counter per
     * reason its result info gave (CU_GRAPH_EXEC_UPDATE_ERROR_<reason>): */
    uint64_t update_topology_changed;    /**< TOPOLOGY_CHANGED */
    uint64_t update_node_type_changed;   /**< NODE_TYPE_CHANGED */
    uint64_t update_function_changed;    /**< FUNCTION_CHANGED */
    uint64_t update_parameters_changed;  /**< PARAMETERS_CHANGED */
    uint64_t update_not_supported;       /**< NOT_SUPPORTED */
    uint64_t update_unsupported_function_change; /**< UNSUPPORTED_FUNCTION_CHANGE */
    uint64_t update_attributes_changed;  /**< ATTRIBUTES_CHANGED, and the recaptures cupool
                                              itself does not update because a kernel changed
                                              a launch attribute the driver does not update in
                                              place (see update_failures) */
    uint64_t update_other;               /**< CU_GRAPH_EXEC_UPDATE_ERROR, a reason unknown to
                                              this cupool, or the call failing with an error
                                              other than CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE */
    uint64_t node_update_refusals;       /**< a pipeline's node updates the driver refused
                                              (cuGraphExec*NodeSetParams, cuGraphExecEvent*
                                              NodeSetEvent) */
    uint64_t update_errors;              /**< refusals (of either kind) that a new instantiation
                                              would not cure (a destroyed or broken context, the
                                              driver gone, no memory): the launch returned the
                                              error and launched nothing. Every other refusal
                                              instantiated afresh (update_failures) */
} cupool_graph_stats_t;

/** The size of the first version of cupool_graph_stats_t (the smallest accepted). */
#define CUPOOL_GRAPH_STATS_SIZE_V1 \
    (offsetof(cupool_graph_stats_t, nodes_compared) + sizeof(uint64_t))
/** The size of its second version (uploads and the refused updates by reason). */
#define CUPOOL_GRAPH_STATS_SIZE_V2 \
    (offsetof(cupool_graph_stats_t, update_errors) + sizeof(uint64_t))
/** Initialiser: `cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;` */
#define CUPOOL_GRAPH_STATS_INIT CUPOOL_STATS_INIT_(cupool_graph_stats_t)

/** Copies the graph-cache statistics into *stats (stats->size set by the caller: the fields
 * that fit are written, see cupool_class_stats_t). Returns CUDA_SUCCESS or
 * CUDA_ERROR_INVALID_VALUE (stats NULL, or stats->size below CUPOOL_GRAPH_STATS_SIZE_V1);
 * CUDA_ERROR_NOT_PERMITTED in a child forked after cupool was initialised. Never calls the
 * driver; thread-safe. */
CUPOOL_API CUresult cupool_graph_stats_get(cupool_graph_stats_t *stats);

/** The devices whose graph-cache statistics are kept one by one: ordinals 0 to
 * CUPOOL_STATS_DEVICES - 1 (cupool_graph_stats_device_get). */
#define CUPOOL_STATS_DEVICES 16

/**
 * Copies the graph-cache statistics of one device into *stats (stats->size set by the caller,
 * as for cupool_graph_stats_get): those of the cache entries whose context belongs to device
 * ordinal `device`, and of the launches that used them. An entry learns its device once, when
 * a miss makes it (cuCtxGetDevice with its context current). Kept per device: launches, hits,
 * misses, instantiations, updates, nodes_updated, evictions, entries, execs, bytes,
 * claims_lock_free and claims_locked; every other field is 0. Summed over the devices, these
 * give cupool_graph_stats_get()'s figures but for the entries whose device is not known (the
 * driver did not say, or its ordinal is CUPOOL_STATS_DEVICES or more), which count in those
 * totals alone. A device with no launch gets zeros. Counters are read without stopping the
 * threads, as for cupool_graph_stats_get.
 * Returns CUDA_SUCCESS; CUDA_ERROR_INVALID_VALUE (stats NULL, stats->size below
 * CUPOOL_GRAPH_STATS_SIZE_V1, or device outside [0, CUPOOL_STATS_DEVICES): nothing written);
 * CUDA_ERROR_NOT_PERMITTED in a child forked after cupool was initialised. Never calls the
 * driver; thread-safe; works in every other lifecycle state (before initialisation, after a
 * failed one, at exit).
 */
CUPOOL_API CUresult cupool_graph_stats_device_get(int device, cupool_graph_stats_t *stats);

/* ------------------------------------------------------------------------------------------ */
/* Drop-in wrappers with the driver's signatures (docs/drop-in.md). The runtime API's are in   */
/* cupool_runtime.h; cupool_compat.h routes the real names to both.                           */
/* ------------------------------------------------------------------------------------------ */

/** cuStreamCreate: a pooled stream of the current context (cupool_stream_acquire(), default
 * priority). Flags CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING. Returns what
 * cupool_stream_acquire() returns (CUDA_ERROR_INVALID_CONTEXT with no current context, as the
 * driver). Thread-safe. */
CUPOOL_API CUresult cupool_cuStreamCreate(CUstream *phStream, unsigned int Flags);
/** cuStreamCreateWithPriority: as cupool_cuStreamCreate; priorities outside the context's
 * range are clamped to it, as the driver does. */
CUPOOL_API CUresult cupool_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                      int priority);
/** cuStreamDestroy: a pooled stream goes back to its pool (cupool_stream_release(): work
 * still queued runs on, as after cuStreamDestroy); a stream cupool did not create is
 * destroyed by the driver, whose result is returned. A pooled stream destroyed twice:
 * CUDA_ERROR_INVALID_HANDLE, nothing changes. Thread-safe. */
CUPOOL_API CUresult cupool_cuStreamDestroy(CUstream hStream);
/** cuEventCreate: a pooled event of the current context (cupool_event_acquire()). */
CUPOOL_API CUresult cupool_cuEventCreate(CUevent *phEvent, unsigned int Flags);
/** cuEventDestroy: as cupool_cuStreamDestroy, for events. */
CUPOOL_API CUresult cupool_cuEventDestroy(CUevent hEvent);
/**
 * cuDevicePrimaryCtxReset and cuCtxDestroy with cupool_context_release() first (for the
 * primary context: when it is active), then the driver's call, whose result they return
 * (CUDA_ERROR_NOT_SUPPORTED where the driver lacks it; an init error when the driver cannot
 * be loaded). libcupool_preload.so puts them in place of the driver's, so that programs and
 * the CUDA runtime (cudaDeviceReset) reset safely while the maintenance thread works.
 */
CUPOOL_API CUresult cupool_cuDevicePrimaryCtxReset(CUdevice dev);
CUPOOL_API CUresult cupool_cuCtxDestroy(CUcontext ctx);

#ifdef __cplusplus
}
#endif
#endif /* CUPOOL_H */
