// SPDX-License-Identifier: MIT
//
// cupool.hpp: a C++17 binding of cupool.h, header-only (nothing more to link than -lcupool).
//
// It adds ownership and nothing else: every call below is one call of the C API, with the
// costs, errors and lifecycle rules that include/cupool.h documents for it.
//
//  - cupool::stream and cupool::event own one pooled handle each and give it back on
//    destruction (move-only, like std::unique_ptr). A moved-from owner is empty and gives
//    back nothing.
//  - cupool::stream_pool and cupool::event_pool are plain values naming an explicit pool
//    (the pools themselves need no destruction); their acquire() returns an owner that gives
//    the handle back to that pool.
//  - cupool::pipeline owns a cupool_pipeline_t and builds it node by node.
//
// Errors. Each failing operation has two forms:
//  - try_NAME(...) noexcept returns the CUresult (CUDA_SUCCESS or the C function's error) and
//    leaves its outputs unchanged on error; cupool_error_string() then describes the failure.
//    These are always available, also in code built without exceptions.
//  - NAME(...) throws cupool::error on failure. These exist only where the compiler has
//    exceptions enabled (__cpp_exceptions; not with -fno-exceptions) and CUPOOL_NO_EXCEPTIONS
//    is not defined before this header is included.
// Destructors never throw and ignore the result of the release they make: after the process
// began to exit, after the driver was torn down or in a forked child the C API refuses or
// skips the release without touching the driver, so an owner may outlive all of these.
//
// Thread-safety: as the C API. Distinct owners may be used from distinct threads at once;
// one owner (or one pipeline) must not be used by two threads at the same time without
// ordering (as any C++ object). A handle acquired on one thread may be released on another.
#ifndef CUPOOL_HPP
#define CUPOOL_HPP

#include <cupool.h>

#include <cstddef>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#if defined(__cpp_exceptions) && !defined(CUPOOL_NO_EXCEPTIONS)
/** 1 when the throwing forms are declared, 0 when only the try_ forms are. */
#define CUPOOL_HPP_EXCEPTIONS 1
#else
#define CUPOOL_HPP_EXCEPTIONS 0
#endif

namespace cupool {

/** Name of a CUresult ("CUDA_ERROR_INVALID_VALUE"), as cupool_result_name(); never NULL. */
inline const char *result_name(CUresult result) noexcept
{
    return cupool_result_name(result);
}

/**
 * A failed cupool call: result() is its CUresult; what() is
 * "<function>: <cupool's message for the failure>", the message as cupool_error_string()
 * gave it on the failing thread right after the call (without the function's name again
 * where the message starts with it), with the CUresult's name in it.
 * Construct it on the thread that made the failed call, before that thread calls cupool
 * again (cupool's message is per thread and describes its most recent failure). Copyable;
 * the message is copied at construction.
 */
class error : public std::runtime_error {
public:
    /** call: the C function that failed (a static string, e.g. "cupool_stream_acquire"). */
    error(CUresult result, const char *call)
        : std::runtime_error(describe(result, call)), result_(result)
    {
    }

    /** The CUresult the failed call returned (never CUDA_SUCCESS for a real failure). */
    CUresult result() const noexcept { return result_; }

private:
    static std::string describe(CUresult result, const char *call)
    {
        const std::string msg = cupool_error_string();
        const char *name = cupool_result_name(result);
        std::string s = call ? call : "cupool";
        s += ": ";
        if (msg.compare(0, s.size(), s) == 0) // the message names the call already
            s.clear();
        s += msg;
        if (msg.find(name) == std::string::npos) {
            s += " (";
            s += name;
            s += ")";
        }
        return s;
    }

    CUresult result_;
};

#if CUPOOL_HPP_EXCEPTIONS
/** Throws cupool::error(result, call) unless result is CUDA_SUCCESS. Call it right after the
 *  cupool call that returned result, on the same thread: the error carries cupool's message of
 *  the thread's last failure, which says nothing about another library's call. Only with
 *  exceptions enabled. */
inline void check(CUresult result, const char *call)
{
    if (result != CUDA_SUCCESS)
        throw error(result, call);
}
#endif

class stream_pool;
class event_pool;

/**
 * Owner of one pooled stream: from the current-context API (cupool_stream_acquire, given back
 * with cupool_stream_release) or from an explicit pool (stream_pool::acquire, given back with
 * cupool_stream_pool_release to that pool). Move-only; empty when default-constructed or moved
 * from. Destruction, release() and assignment over a non-empty owner give the stream back;
 * queued work keeps running (giving back does not wait, as in the C API): synchronise first if
 * the next owner must not see it.
 */
class stream {
public:
    /** An empty owner: get() is NULL, nothing is given back. */
    stream() noexcept = default;

    /** Takes ownership of s, a stream from cupool_stream_acquire() (pool NULL) or from
     *  cupool_stream_pool_acquire(pool, ...). Nothing is checked: the owner gives s back as
     *  it was told. */
    static stream adopt(CUstream s, cupool_stream_pool_t pool = nullptr) noexcept
    {
        return stream(s, pool);
    }

    stream(const stream &) = delete;
    stream &operator=(const stream &) = delete;
    stream(stream &&o) noexcept
        : h_(std::exchange(o.h_, nullptr)), pool_(std::exchange(o.pool_, nullptr)),
          release_flags_(std::exchange(o.release_flags_, 0u))
    {
    }
    /** Gives back the stream this owner holds (ignoring the result), then takes o's. */
    stream &operator=(stream &&o) noexcept
    {
        if (this != &o) {
            (void)release();
            h_ = std::exchange(o.h_, nullptr);
            pool_ = std::exchange(o.pool_, nullptr);
            release_flags_ = std::exchange(o.release_flags_, 0u);
        }
        return *this;
    }
    /** Gives the stream back (result ignored; see the header's comment on lifecycles). */
    ~stream() { (void)release(); }

    /**
     * Acquires a stream of the current context into out (cupool_stream_acquire(flags,
     * priority): flags CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING; priority as for
     * cuStreamCreateWithPriority, clamped to the context's range). On success out's previous
     * stream, if any, is given back first; on error out is unchanged. Returns the C
     * function's result (CUDA_ERROR_INVALID_VALUE for unknown flags,
     * CUDA_ERROR_INVALID_CONTEXT with no current context, ...). Thread-safe.
     */
    static CUresult try_acquire(stream &out, unsigned int flags = CU_STREAM_DEFAULT,
                                int priority = 0) noexcept
    {
        CUstream s = nullptr;
        CUresult r = cupool_stream_acquire(&s, flags, priority);
        if (r == CUDA_SUCCESS)
            out = stream(s, nullptr);
        return r;
    }
#if CUPOOL_HPP_EXCEPTIONS
    /** As try_acquire(), returning the owner; throws cupool::error on failure. */
    static stream acquire(unsigned int flags = CU_STREAM_DEFAULT, int priority = 0)
    {
        stream s;
        check(try_acquire(s, flags, priority), "cupool_stream_acquire");
        return s;
    }
#endif

    /** The stream, or NULL when empty. Only on an lvalue owner: a temporary's stream is given
     *  back at the end of the full expression, so `CUstream s = stream::acquire().get();`
     *  would keep a stream someone else may own next; it does not compile. */
    CUstream get() const &noexcept { return h_; }
    CUstream get() const && = delete;
    /** Converts to the CUstream (as get()), so an owner passes where the driver takes one;
     *  lvalues only, for the reason given at get(). */
    operator CUstream() const &noexcept { return h_; }
    operator CUstream() const && = delete;
    /** True when the owner holds a stream. */
    explicit operator bool() const noexcept { return h_ != nullptr; }
    /** The explicit pool the stream goes back to, or NULL for the current-context API. */
    cupool_stream_pool_t pool() const noexcept { return pool_; }

    /**
     * Vouches that the stream will not be in stream capture when given back, so that the
     * acquire that next hands it out skips cuStreamIsCapturing() (~17 ns on an H200): the
     * release passes CUPOOL_RELEASE_NOT_CAPTURING. Only streams of an explicit pool carry the
     * vouch (cupool_stream_release() takes no flags); for others this does nothing. A stream
     * given back with the vouch while capturing corrupts its next owner's work. The vouch
     * stays with the stream when the owner is moved; it ends when the stream is given back.
     */
    void mark_not_capturing() noexcept
    {
        if (pool_)
            release_flags_ = CUPOOL_RELEASE_NOT_CAPTURING;
    }

    /**
     * Gives the stream back now (cupool_stream_release, or cupool_stream_pool_release with the
     * vouch if marked) and leaves the owner empty, whatever the result. Returns the C
     * function's result: CUDA_SUCCESS (also when empty), CUDA_ERROR_INVALID_HANDLE (the stream
     * was not cupool's or was given back already by other means), CUDA_ERROR_NOT_PERMITTED in
     * a forked child. Never throws.
     */
    CUresult release() noexcept
    {
        CUstream s = std::exchange(h_, nullptr);
        cupool_stream_pool_t p = std::exchange(pool_, nullptr);
        unsigned int f = std::exchange(release_flags_, 0u);
        if (!s)
            return CUDA_SUCCESS;
        return p ? cupool_stream_pool_release(p, s, f) : cupool_stream_release(s);
    }

    /**
     * Gives up ownership without giving the stream back: returns it (NULL when empty) and
     * leaves the owner empty. The caller then gives it back itself: cupool_stream_release(s),
     * or cupool_stream_pool_release(pool, s, flags) for a stream of an explicit pool (read
     * pool() before detaching).
     */
    CUstream detach() noexcept
    {
        pool_ = nullptr;
        release_flags_ = 0;
        return std::exchange(h_, nullptr);
    }

private:
    stream(CUstream s, cupool_stream_pool_t pool) noexcept : h_(s), pool_(pool) {}
    friend class stream_pool;

    CUstream h_ = nullptr;
    cupool_stream_pool_t pool_ = nullptr;
    unsigned int release_flags_ = 0;
};

/**
 * Owner of one pooled event: from the current-context API (cupool_event_acquire, given back
 * with cupool_event_release) or from an explicit pool (event_pool::acquire, given back with
 * cupool_event_pool_release). As cupool::stream in every other respect. A reused event may
 * hold the state of its last record: record it before waiting on or querying it.
 */
class event {
public:
    /** An empty owner. */
    event() noexcept = default;

    /** Takes ownership of e, from cupool_event_acquire() (pool NULL) or
     *  cupool_event_pool_acquire(pool, ...). Nothing is checked. */
    static event adopt(CUevent e, cupool_event_pool_t pool = nullptr) noexcept
    {
        return event(e, pool);
    }

    event(const event &) = delete;
    event &operator=(const event &) = delete;
    event(event &&o) noexcept
        : h_(std::exchange(o.h_, nullptr)), pool_(std::exchange(o.pool_, nullptr))
    {
    }
    /** Gives back the event this owner holds (ignoring the result), then takes o's. */
    event &operator=(event &&o) noexcept
    {
        if (this != &o) {
            (void)release();
            h_ = std::exchange(o.h_, nullptr);
            pool_ = std::exchange(o.pool_, nullptr);
        }
        return *this;
    }
    /** Gives the event back (result ignored). */
    ~event() { (void)release(); }

    /**
     * Acquires an event of the current context into out (cupool_event_acquire(flags): any of
     * CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING, CU_EVENT_INTERPROCESS, the last only
     * with DISABLE_TIMING). On success out's previous event, if any, is given back first; on
     * error out is unchanged. Returns the C function's result. Thread-safe.
     */
    static CUresult try_acquire(event &out, unsigned int flags = CU_EVENT_DEFAULT) noexcept
    {
        CUevent e = nullptr;
        CUresult r = cupool_event_acquire(&e, flags);
        if (r == CUDA_SUCCESS)
            out = event(e, nullptr);
        return r;
    }
#if CUPOOL_HPP_EXCEPTIONS
    /** As try_acquire(), returning the owner; throws cupool::error on failure. */
    static event acquire(unsigned int flags = CU_EVENT_DEFAULT)
    {
        event e;
        check(try_acquire(e, flags), "cupool_event_acquire");
        return e;
    }
#endif

    /** The event, or NULL when empty; lvalues only (see stream::get()). */
    CUevent get() const &noexcept { return h_; }
    CUevent get() const && = delete;
    /** Converts to the CUevent (as get()); lvalues only. */
    operator CUevent() const &noexcept { return h_; }
    operator CUevent() const && = delete;
    /** True when the owner holds an event. */
    explicit operator bool() const noexcept { return h_ != nullptr; }
    /** The explicit pool the event goes back to, or NULL for the current-context API. */
    cupool_event_pool_t pool() const noexcept { return pool_; }

    /** Gives the event back now (cupool_event_release or cupool_event_pool_release) and
     *  leaves the owner empty. Returns the C function's result (CUDA_SUCCESS when empty). */
    CUresult release() noexcept
    {
        CUevent e = std::exchange(h_, nullptr);
        cupool_event_pool_t p = std::exchange(pool_, nullptr);
        if (!e)
            return CUDA_SUCCESS;
        return p ? cupool_event_pool_release(p, e) : cupool_event_release(e);
    }

    /** Gives up ownership without giving the event back (read pool() first if it matters):
     *  returns it, or NULL when empty; the caller gives it back with the C API. */
    CUevent detach() noexcept
    {
        pool_ = nullptr;
        return std::exchange(h_, nullptr);
    }

private:
    event(CUevent e, cupool_event_pool_t pool) noexcept : h_(e), pool_(pool) {}
    friend class event_pool;

    CUevent h_ = nullptr;
    cupool_event_pool_t pool_ = nullptr;
};

/**
 * An explicit stream pool (cupool_stream_pool_t): one (context, flags, priority) class,
 * resolved once. A plain copyable value: pools need no destruction, and a pool outlives
 * nothing it hands out (its streams are owned by cupool::stream). A default-constructed pool
 * is empty: acquiring from it fails with CUDA_ERROR_INVALID_VALUE.
 */
class stream_pool {
public:
    /** An empty pool value. */
    stream_pool() noexcept = default;
    /** Wraps a pool from cupool_stream_pool_get(). */
    explicit stream_pool(cupool_stream_pool_t pool) noexcept : pool_(pool) {}

    /**
     * The stream pool of context ctx (NULL: the current context) for flags
     * (CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING, optionally with
     * CUPOOL_POOL_CONTEXT_OUTLIVES: see cupool.h for that promise) and priority (clamped), as
     * cupool_stream_pool_get(); equal arguments give the same pool. On error out is unchanged.
     * Returns CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE (unknown flags),
     * CUDA_ERROR_INVALID_CONTEXT (ctx NULL, no current context), a driver error. Thread-safe.
     */
    static CUresult try_get(stream_pool &out, CUcontext ctx = nullptr,
                            unsigned int flags = CU_STREAM_DEFAULT, int priority = 0) noexcept
    {
        cupool_stream_pool_t p = nullptr;
        CUresult r = cupool_stream_pool_get(&p, ctx, flags, priority);
        if (r == CUDA_SUCCESS)
            out.pool_ = p;
        return r;
    }
#if CUPOOL_HPP_EXCEPTIONS
    /** As try_get(), returning the pool; throws cupool::error on failure. */
    static stream_pool get(CUcontext ctx = nullptr, unsigned int flags = CU_STREAM_DEFAULT,
                           int priority = 0)
    {
        stream_pool p;
        check(try_get(p, ctx, flags, priority), "cupool_stream_pool_get");
        return p;
    }
#endif

    /**
     * Acquires a stream of this pool into out (cupool_stream_pool_acquire: one cuCtxGetId on a
     * hit, none with CUPOOL_POOL_CONTEXT_OUTLIVES, plus a capture check for a stream given
     * back without the vouch), whatever context is current. out then gives it back to this
     * pool. On success out's previous stream is given back first; on error out is unchanged.
     * Returns the C function's result: CUDA_ERROR_INVALID_VALUE (empty pool),
     * CUDA_ERROR_CONTEXT_IS_DESTROYED once the pool's context was reset or destroyed, ...
     */
    CUresult try_acquire(stream &out) const noexcept
    {
        CUstream s = nullptr;
        CUresult r = cupool_stream_pool_acquire(pool_, &s);
        if (r == CUDA_SUCCESS)
            out = stream(s, pool_);
        return r;
    }
#if CUPOOL_HPP_EXCEPTIONS
    /** As try_acquire(), returning the owner; throws cupool::error on failure. */
    stream acquire() const
    {
        stream s;
        check(try_acquire(s), "cupool_stream_pool_acquire");
        return s;
    }
#endif

    /** The C pool handle (NULL when empty). */
    cupool_stream_pool_t handle() const noexcept { return pool_; }
    /** True unless empty. */
    explicit operator bool() const noexcept { return pool_ != nullptr; }
    friend bool operator==(const stream_pool &a, const stream_pool &b) noexcept
    {
        return a.pool_ == b.pool_;
    }
    friend bool operator!=(const stream_pool &a, const stream_pool &b) noexcept
    {
        return a.pool_ != b.pool_;
    }

private:
    cupool_stream_pool_t pool_ = nullptr;
};

/** An explicit event pool (cupool_event_pool_t): one (context, flags) class; as stream_pool. */
class event_pool {
public:
    /** An empty pool value. */
    event_pool() noexcept = default;
    /** Wraps a pool from cupool_event_pool_get(). */
    explicit event_pool(cupool_event_pool_t pool) noexcept : pool_(pool) {}

    /** The event pool of context ctx (NULL: current) for flags, optionally with
     *  CUPOOL_POOL_CONTEXT_OUTLIVES, as cupool_event_pool_get(); on error out is unchanged.
     *  Returns the C function's result (CUDA_ERROR_INVALID_VALUE for invalid flags). */
    static CUresult try_get(event_pool &out, CUcontext ctx = nullptr,
                            unsigned int flags = CU_EVENT_DEFAULT) noexcept
    {
        cupool_event_pool_t p = nullptr;
        CUresult r = cupool_event_pool_get(&p, ctx, flags);
        if (r == CUDA_SUCCESS)
            out.pool_ = p;
        return r;
    }
#if CUPOOL_HPP_EXCEPTIONS
    /** As try_get(), returning the pool; throws cupool::error on failure. */
    static event_pool get(CUcontext ctx = nullptr, unsigned int flags = CU_EVENT_DEFAULT)
    {
        event_pool p;
        check(try_get(p, ctx, flags), "cupool_event_pool_get");
        return p;
    }
#endif

    /** Acquires an event of this pool into out (cupool_event_pool_acquire); out gives it back
     *  to this pool. On success out's previous event is given back first; on error out is
     *  unchanged. Returns the C function's result. */
    CUresult try_acquire(event &out) const noexcept
    {
        CUevent e = nullptr;
        CUresult r = cupool_event_pool_acquire(pool_, &e);
        if (r == CUDA_SUCCESS)
            out = event(e, pool_);
        return r;
    }
#if CUPOOL_HPP_EXCEPTIONS
    /** As try_acquire(), returning the owner; throws cupool::error on failure. */
    event acquire() const
    {
        event e;
        check(try_acquire(e), "cupool_event_pool_acquire");
        return e;
    }
#endif

    /** The C pool handle (NULL when empty). */
    cupool_event_pool_t handle() const noexcept { return pool_; }
    /** True unless empty. */
    explicit operator bool() const noexcept { return pool_ != nullptr; }
    friend bool operator==(const event_pool &a, const event_pool &b) noexcept
    {
        return a.pool_ == b.pool_;
    }
    friend bool operator!=(const event_pool &a, const event_pool &b) noexcept
    {
        return a.pool_ != b.pool_;
    }

private:
    cupool_event_pool_t pool_ = nullptr;
};

/**
 * Grid or block dimensions of a kernel node (threads per block, blocks per grid), 1 where
 * not given. Converts from one unsigned (x) and from any type with x, y and z members
 * (the CUDA runtime's ::dim3 included).
 */
struct dim3 {
    unsigned int x = 1, y = 1, z = 1;

    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) noexcept
        : x(x_), y(y_), z(z_)
    {
    }
    template <class D,
              class = std::enable_if_t<!std::is_arithmetic<D>::value &&
                                       std::is_convertible<decltype(std::declval<const D &>().x),
                                                           unsigned int>::value>,
              class = decltype(std::declval<const D &>().y),
              class = decltype(std::declval<const D &>().z)>
    constexpr dim3(const D &d) noexcept
        : x(static_cast<unsigned int>(d.x)), y(static_cast<unsigned int>(d.y)),
          z(static_cast<unsigned int>(d.z))
    {
    }
};

/**
 * Owner of a cupool_pipeline_t (cupool_pipeline_create / cupool_pipeline_destroy): a
 * description of work launched as a cached graph (docs/graph-cache.md). Move-only; empty when
 * default-constructed or moved from (every call on an empty pipeline returns
 * CUDA_ERROR_INVALID_VALUE). Used by one thread at a time; reset and refill it per request.
 *
 * The node-adding calls append one node and give its number (from 0, in the order added); by
 * default a node depends on the one added before it. As in the C API, an add that fails
 * leaves the pipeline as it was and is remembered: launch() returns that error until reset().
 * Their try_ forms return the CUresult and store the node's number in *node when node is not
 * NULL; the throwing forms return the number.
 */
class pipeline {
public:
    /** An empty owner (no pipeline). */
    pipeline() noexcept = default;
    /** Takes ownership of p, from cupool_pipeline_create(). */
    static pipeline adopt(cupool_pipeline_t p) noexcept
    {
        pipeline q;
        q.p_ = p;
        return q;
    }

    pipeline(const pipeline &) = delete;
    pipeline &operator=(const pipeline &) = delete;
    pipeline(pipeline &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    /** Destroys the pipeline this owner holds (result ignored), then takes o's. */
    pipeline &operator=(pipeline &&o) noexcept
    {
        if (this != &o) {
            (void)cupool_pipeline_destroy(p_);
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    /** Destroys the pipeline (cached graphs stay cached); result ignored. */
    ~pipeline() { (void)cupool_pipeline_destroy(p_); }

    /** Creates an empty pipeline into out, destroying out's previous one on success; on error
     *  out is unchanged. Returns CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY or an init error.
     *  Thread-safe. */
    static CUresult try_create(pipeline &out) noexcept
    {
        cupool_pipeline_t p = nullptr;
        CUresult r = cupool_pipeline_create(&p);
        if (r == CUDA_SUCCESS)
            out = adopt(p);
        return r;
    }
#if CUPOOL_HPP_EXCEPTIONS
    /** As try_create(), returning the owner; throws cupool::error on failure. */
    static pipeline create()
    {
        pipeline p;
        check(try_create(p), "cupool_pipeline_create");
        return p;
    }
#endif

    /** The C handle (NULL when empty); it stays owned by this object. */
    cupool_pipeline_t handle() const noexcept { return p_; }
    /** True unless empty. */
    explicit operator bool() const noexcept { return p_ != nullptr; }

    /** Removes every node and forgets a failed add (cupool_pipeline_reset). */
    CUresult try_reset() noexcept { return cupool_pipeline_reset(p_); }

    /** A kernel launch shaped like cuLaunchKernel (cupool_pipeline_kernel): grid in blocks,
     *  block in threads, shared_bytes of dynamic shared memory, args one pointer per kernel
     *  parameter (values copied now; NULL for a kernel without parameters). Needs a CUDA 12.4
     *  driver. Errors: CUDA_ERROR_INVALID_VALUE (f NULL, a zero dimension, args NULL for a
     *  kernel with parameters), CUDA_ERROR_NOT_SUPPORTED (older driver), ... */
    CUresult try_kernel(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                        void **args, cupool_node_t *node = nullptr) noexcept
    {
        return cupool_pipeline_kernel(p_, f, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                      shared_bytes, args, node);
    }
    /** As above, the parameter pointers given as a list: `{&ptr, &n}`. */
    CUresult try_kernel(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                        std::initializer_list<void *> args,
                        cupool_node_t *node = nullptr) noexcept
    {
        return try_kernel(f, grid, block, shared_bytes,
                          args.size() ? const_cast<void **>(args.begin()) : nullptr, node);
    }
    /** A kernel launch with launch attributes, shaped like cuLaunchKernelEx
     *  (cupool_pipeline_kernel_ex): as try_kernel, and attrs[0 .. nattrs-1] (cluster
     *  dimension, cooperative, priority, programmatic stream serialization, ...: see cupool.h;
     *  each is part of the pipeline's signature). Errors: those of try_kernel,
     *  CUDA_ERROR_INVALID_VALUE for an attribute not taken, given twice or out of range,
     *  CUDA_ERROR_NOT_SUPPORTED for a driver lacking what it needs. */
    CUresult try_kernel_ex(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                           void **args, const CUlaunchAttribute *attrs, unsigned int nattrs,
                           cupool_node_t *node = nullptr) noexcept
    {
        return cupool_pipeline_kernel_ex(p_, f, grid.x, grid.y, grid.z, block.x, block.y,
                                         block.z, shared_bytes, args, attrs, nattrs, node);
    }
    /** As above, the parameter pointers and the attributes given as lists. */
    CUresult try_kernel_ex(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                           std::initializer_list<void *> args,
                           std::initializer_list<CUlaunchAttribute> attrs,
                           cupool_node_t *node = nullptr) noexcept
    {
        return try_kernel_ex(f, grid, block, shared_bytes,
                             args.size() ? const_cast<void **>(args.begin()) : nullptr,
                             attrs.size() ? attrs.begin() : nullptr,
                             static_cast<unsigned int>(attrs.size()), node);
    }
    /** A memset of count elements of element_bytes (1 or 4) at dst to value
     *  (cupool_pipeline_memset). CUDA_ERROR_INVALID_VALUE: dst 0, count 0, another size. */
    CUresult try_memset(CUdeviceptr dst, unsigned int value, unsigned int element_bytes,
                        std::size_t count, cupool_node_t *node = nullptr) noexcept
    {
        return cupool_pipeline_memset(p_, dst, value, element_bytes, count, node);
    }
    /** A copy of bytes from src to dst, device or pinned host memory (cupool_pipeline_memcpy). */
    CUresult try_memcpy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes,
                        cupool_node_t *node = nullptr) noexcept
    {
        return cupool_pipeline_memcpy(p_, dst, src, bytes, node);
    }
    /** A record of e, as cuEventRecord (cupool_pipeline_event_record). */
    CUresult try_event_record(CUevent e, cupool_node_t *node = nullptr) noexcept
    {
        return cupool_pipeline_event_record(p_, e, node);
    }
    /** A wait for e, as cuStreamWaitEvent (cupool_pipeline_event_wait). */
    CUresult try_event_wait(CUevent e, cupool_node_t *node = nullptr) noexcept
    {
        return cupool_pipeline_event_wait(p_, e, node);
    }
    /** A host function call fn(user_data), as cuLaunchHostFunc (cupool_pipeline_host). fn is
     *  a C function pointer: it must not let an exception out (the driver calls it). */
    CUresult try_host(CUhostFn fn, void *user_data, cupool_node_t *node = nullptr) noexcept
    {
        return cupool_pipeline_host(p_, fn, user_data, node);
    }
    /** Makes node depend on exactly the count nodes of on[] (each added before it) instead of
     *  its default dependency; count 0 makes it a root (cupool_pipeline_depend).
     *  CUDA_ERROR_INVALID_VALUE for a number out of range, a later node or a node listed
     *  twice; nothing changes on error. */
    CUresult try_depend(cupool_node_t node, const cupool_node_t *on, std::size_t count) noexcept
    {
        return cupool_pipeline_depend(p_, node, on, count);
    }
    /** As above, the dependencies given as a list: `{a, b}`; `{}` makes node a root. */
    CUresult try_depend(cupool_node_t node, std::initializer_list<cupool_node_t> on) noexcept
    {
        return cupool_pipeline_depend(p_, node, on.size() ? on.begin() : nullptr, on.size());
    }
    /** Launches the pipeline on stream s, in the current context (cupool_pipeline_launch): a
     *  cached graph on a hit, a new one on a miss. CUDA_ERROR_INVALID_VALUE (no nodes), the
     *  error of an add that failed since the last reset, the driver's launch error. */
    CUresult try_launch(CUstream s) noexcept { return cupool_pipeline_launch(p_, s); }
    /** Writes the cached graph of the current structure as Graphviz DOT to path
     *  (cupool_pipeline_dot); CUDA_ERROR_NOT_FOUND if it was not launched (and cached). */
    CUresult try_dot(const char *path) noexcept { return cupool_pipeline_dot(p_, path); }

#if CUPOOL_HPP_EXCEPTIONS
    /** Throwing forms of the calls above: each returns the new node's number (depend, reset
     *  and launch return *this), or throws cupool::error with the C function's result. */
    pipeline &reset()
    {
        check(try_reset(), "cupool_pipeline_reset");
        return *this;
    }
    cupool_node_t kernel(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                         void **args)
    {
        cupool_node_t n = 0;
        check(try_kernel(f, grid, block, shared_bytes, args, &n), "cupool_pipeline_kernel");
        return n;
    }
    cupool_node_t kernel(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                         std::initializer_list<void *> args)
    {
        cupool_node_t n = 0;
        check(try_kernel(f, grid, block, shared_bytes, args, &n), "cupool_pipeline_kernel");
        return n;
    }
    cupool_node_t kernel_ex(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                            void **args, const CUlaunchAttribute *attrs, unsigned int nattrs)
    {
        cupool_node_t n = 0;
        check(try_kernel_ex(f, grid, block, shared_bytes, args, attrs, nattrs, &n),
              "cupool_pipeline_kernel_ex");
        return n;
    }
    cupool_node_t kernel_ex(CUfunction f, dim3 grid, dim3 block, unsigned int shared_bytes,
                            std::initializer_list<void *> args,
                            std::initializer_list<CUlaunchAttribute> attrs)
    {
        cupool_node_t n = 0;
        check(try_kernel_ex(f, grid, block, shared_bytes, args, attrs, &n),
              "cupool_pipeline_kernel_ex");
        return n;
    }
    cupool_node_t memset(CUdeviceptr dst, unsigned int value, unsigned int element_bytes,
                         std::size_t count)
    {
        cupool_node_t n = 0;
        check(try_memset(dst, value, element_bytes, count, &n), "cupool_pipeline_memset");
        return n;
    }
    cupool_node_t memcpy(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes)
    {
        cupool_node_t n = 0;
        check(try_memcpy(dst, src, bytes, &n), "cupool_pipeline_memcpy");
        return n;
    }
    cupool_node_t event_record(CUevent e)
    {
        cupool_node_t n = 0;
        check(try_event_record(e, &n), "cupool_pipeline_event_record");
        return n;
    }
    cupool_node_t event_wait(CUevent e)
    {
        cupool_node_t n = 0;
        check(try_event_wait(e, &n), "cupool_pipeline_event_wait");
        return n;
    }
    cupool_node_t host(CUhostFn fn, void *user_data)
    {
        cupool_node_t n = 0;
        check(try_host(fn, user_data, &n), "cupool_pipeline_host");
        return n;
    }
    pipeline &depend(cupool_node_t node, const cupool_node_t *on, std::size_t count)
    {
        check(try_depend(node, on, count), "cupool_pipeline_depend");
        return *this;
    }
    pipeline &depend(cupool_node_t node, std::initializer_list<cupool_node_t> on)
    {
        check(try_depend(node, on), "cupool_pipeline_depend");
        return *this;
    }
    pipeline &launch(CUstream s)
    {
        check(try_launch(s), "cupool_pipeline_launch");
        return *this;
    }
    void dot(const char *path) { check(try_dot(path), "cupool_pipeline_dot"); }
#endif

private:
    cupool_pipeline_t p_ = nullptr;
};

} // namespace cupool

#endif // CUPOOL_HPP
