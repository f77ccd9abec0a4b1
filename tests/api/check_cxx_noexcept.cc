// SPDX-License-Identifier: MIT
// The C++ binding built with -fno-exceptions: the throwing forms are not declared, and the
// try_ forms and the owners work alone (scope exit, moves, errors as CUresult). A plain
// program (Check is not needed): exit 0 on success, 1 on a failure, 77 (SKIP) when no driver
// loads.
#include "cupool.hpp"

#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__cpp_exceptions)
#error "this program is to be built with -fno-exceptions"
#endif
static_assert(CUPOOL_HPP_EXCEPTIONS == 0, "no throwing forms without exceptions");

// The throwing forms are absent, the try_ forms present.
template <class T, class = void> struct has_acquire : std::false_type {};
template <class T>
struct has_acquire<T, std::void_t<decltype(T::acquire())>> : std::true_type {};
template <class T, class = void> struct has_create : std::false_type {};
template <class T>
struct has_create<T, std::void_t<decltype(T::create())>> : std::true_type {};
template <class T, class = void> struct has_launch : std::false_type {};
template <class T>
struct has_launch<T, std::void_t<decltype(std::declval<T &>().launch(CUstream()))>>
    : std::true_type {};
static_assert(!has_acquire<cupool::stream>::value, "");
static_assert(!has_acquire<cupool::event>::value, "");
static_assert(!has_create<cupool::pipeline>::value, "");
static_assert(!has_launch<cupool::pipeline>::value, "");
static_assert(noexcept(cupool::stream::try_acquire(std::declval<cupool::stream &>(), 0u, 0)),
              "");
static_assert(noexcept(cupool::pipeline::try_create(std::declval<cupool::pipeline &>())), "");

static int failures;
#define EXPECT(cond)                                                                       \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            std::fprintf(stderr, "%s:%d: failed: %s (%s)\n", __FILE__, __LINE__, #cond,    \
                         cupool_error_string());                                           \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

static uint64_t in_use(cupool_kind_t kind)
{
    cupool_class_stats_t st[16] = {CUPOOL_CLASS_STATS_INIT};
    size_t n = 0;
    uint64_t sum = 0;
    if (cupool_stats_get(st, 16, &n) != CUDA_SUCCESS)
        return ~0ull;
    for (size_t i = 0; i < n && i < 16; i++)
        if (st[i].kind == kind)
            sum += st[i].in_use;
    return sum;
}

int main()
{
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUdevice dev;
    CUcontext ctx;
    if (cupool_driver_get_proc("cuDeviceGet", 2000, (void **)&device_get) ||
        cupool_driver_get_proc("cuDevicePrimaryCtxRetain", 7000, (void **)&retain) ||
        cupool_driver_get_proc("cuCtxSetCurrent", 4000, (void **)&set_current) ||
        device_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx)) {
        std::printf("SKIP: no driver: %s\n", cupool_error_string());
        return 77;
    }

    {
        cupool::stream s;
        EXPECT(cupool::stream::try_acquire(s, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS);
        EXPECT(s && in_use(CUPOOL_KIND_STREAM) == 1);
        EXPECT(cupool::stream::try_acquire(s, 0x40u, 0) == CUDA_ERROR_INVALID_VALUE);
        EXPECT(std::strstr(cupool_error_string(), "unknown flags") != nullptr);
        EXPECT(s && in_use(CUPOOL_KIND_STREAM) == 1);
        cupool::stream t = std::move(s);
        EXPECT(!s && t);
        cupool::error e(CUDA_ERROR_INVALID_VALUE, "cupool_stream_acquire");
        EXPECT(e.result() == CUDA_ERROR_INVALID_VALUE);
        EXPECT(std::strstr(e.what(), "CUDA_ERROR_INVALID_VALUE") != nullptr);
    }
    EXPECT(in_use(CUPOOL_KIND_STREAM) == 0);

    {
        cupool::stream_pool sp;
        EXPECT(cupool::stream_pool::try_get(sp, nullptr, CU_STREAM_NON_BLOCKING, 0) ==
               CUDA_SUCCESS);
        cupool::stream s;
        EXPECT(sp.try_acquire(s) == CUDA_SUCCESS && s.pool() == sp.handle());
        s.mark_not_capturing();
        cupool::event_pool ep;
        EXPECT(cupool::event_pool::try_get(ep, nullptr, CU_EVENT_DISABLE_TIMING) ==
               CUDA_SUCCESS);
        cupool::event e;
        EXPECT(ep.try_acquire(e) == CUDA_SUCCESS && e.pool() == ep.handle());
        EXPECT(in_use(CUPOOL_KIND_EVENT) == 1);
        EXPECT(e.release() == CUDA_SUCCESS && !e);
        EXPECT(in_use(CUPOOL_KIND_EVENT) == 0);

        cupool::pipeline p;
        EXPECT(cupool::pipeline::try_create(p) == CUDA_SUCCESS && p);
        EXPECT(p.try_host([](void *) {}, nullptr) == CUDA_SUCCESS);
        EXPECT(p.try_launch(s) == CUDA_SUCCESS);
        EXPECT(p.try_depend(0, {0}) == CUDA_ERROR_INVALID_VALUE);
        EXPECT(p.try_launch(s) == CUDA_ERROR_INVALID_VALUE); // the failed add is remembered
        EXPECT(p.try_reset() == CUDA_SUCCESS);
        EXPECT(p.try_launch(s) == CUDA_ERROR_INVALID_VALUE); // no nodes
    }
    EXPECT(in_use(CUPOOL_KIND_STREAM) == 0);

    if (failures)
        std::fprintf(stderr, "%d failures\n", failures);
    else
        std::printf("the try_ forms without exceptions: all passed\n");
    return failures ? 1 : 0;
}
