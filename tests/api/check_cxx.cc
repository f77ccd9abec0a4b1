// SPDX-License-Identifier: MIT
// The C++ binding (include/cupool.hpp), on both drivers: owners give their handle back once,
// on scope exit or release(), never after a move; errors carry the CUresult and cupool's
// message; explicit pools take their handles back, with the vouch when marked; a pipeline
// built through the builder computes what it describes; the try_ forms report without
// throwing; owners outliving exit or crossing a fork do not crash. Built by $(CXX) and, where
// configure found it, by clang++ as well (check_cxx_clang).
#include <check.h>
extern "C" {
#include "common/kernels.h"
#include "common/testutil.h"
}
#include "cupool.hpp"

#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <type_traits>
#include <unistd.h>

static_assert(!std::is_copy_constructible<cupool::stream>::value, "stream is move-only");
static_assert(!std::is_copy_assignable<cupool::stream>::value, "stream is move-only");
static_assert(std::is_nothrow_move_constructible<cupool::stream>::value, "");
static_assert(std::is_nothrow_move_assignable<cupool::stream>::value, "");
static_assert(std::is_nothrow_destructible<cupool::stream>::value, "");
static_assert(!std::is_copy_constructible<cupool::event>::value, "event is move-only");
static_assert(std::is_nothrow_move_constructible<cupool::event>::value, "");
static_assert(std::is_nothrow_destructible<cupool::event>::value, "");
static_assert(!std::is_copy_constructible<cupool::pipeline>::value, "pipeline is move-only");
static_assert(std::is_nothrow_move_assignable<cupool::pipeline>::value, "");
static_assert(std::is_nothrow_destructible<cupool::pipeline>::value, "");
static_assert(std::is_trivially_copyable<cupool::stream_pool>::value, "a pool is a value");
static_assert(std::is_base_of<std::runtime_error, cupool::error>::value, "");
static_assert(CUPOOL_HPP_EXCEPTIONS == 1, "this suite is built with exceptions");
// a temporary owner's handle cannot be taken (it would be given back at once)
static_assert(!std::is_convertible<cupool::stream &&, CUstream>::value, "");
static_assert(std::is_convertible<cupool::stream &, CUstream>::value, "");
static_assert(!std::is_convertible<cupool::event &&, CUevent>::value, "");
static_assert(noexcept(cupool::stream::try_acquire(std::declval<cupool::stream &>())), "");
static_assert(noexcept(std::declval<cupool::stream &>().release()), "");

static cupool_class_stats_t streams(unsigned int flags = CU_STREAM_NON_BLOCKING)
{
    return tu_stats(CUPOOL_KIND_STREAM, flags);
}

static cupool_class_stats_t events(unsigned int flags = CU_EVENT_DISABLE_TIMING)
{
    return tu_stats(CUPOOL_KIND_EVENT, flags);
}

START_TEST(stream_released_at_scope_exit)
{
    tu_setup();
    CUstream raw;
    {
        cupool::stream s = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
        ck_assert(static_cast<bool>(s));
        ck_assert_ptr_nonnull(s.get());
        ck_assert_ptr_null(s.pool());
        raw = s; // the implicit conversion of an lvalue owner
        ck_assert_ptr_eq(raw, s.get());
        TU_OK(tu.cuStreamSynchronize(s));
        unsigned int flags = 0;
        TU_OK(tu.cuStreamGetFlags(s, &flags));
        ck_assert_uint_eq(flags & CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
        ck_assert_uint_eq(streams().in_use, 1);
        ck_assert_uint_eq(streams().releases, 0);
    }
    ck_assert_uint_eq(streams().in_use, 0);
    ck_assert_uint_eq(streams().releases, 1);
    // given back once: cupool refuses a second release of that handle
    TU_EQ(cupool_stream_release(raw), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_uint_eq(streams().releases, 1);
}
END_TEST

START_TEST(event_released_at_scope_exit)
{
    tu_setup();
    cupool::stream s = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
    CUevent raw;
    {
        cupool::event e = cupool::event::acquire(CU_EVENT_DISABLE_TIMING);
        raw = e;
        TU_OK(tu.cuEventRecord(e, s));
        TU_OK(tu.cuEventSynchronize(e.get()));
        ck_assert_uint_eq(events().in_use, 1);
    }
    ck_assert_uint_eq(events().in_use, 0);
    ck_assert_uint_eq(events().releases, 1);
    TU_EQ(cupool_event_release(raw), CUDA_ERROR_INVALID_HANDLE);
}
END_TEST

START_TEST(moved_from_owner_releases_nothing)
{
    tu_setup();
    {
        cupool::stream a = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
        CUstream h = a.get();
        cupool::stream b(std::move(a));
        ck_assert(!a);
        ck_assert_ptr_null(a.get());
        ck_assert_ptr_eq(b.get(), h);
        TU_OK(a.release()); // empty: nothing to give back
        ck_assert_uint_eq(streams().releases, 0);

        // move assignment gives back the target's stream, then takes the source's
        cupool::stream c = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
        ck_assert_uint_eq(streams().in_use, 2);
        c = std::move(b);
        ck_assert_ptr_eq(c.get(), h);
        ck_assert(!b);
        ck_assert_uint_eq(streams().in_use, 1);
        ck_assert_uint_eq(streams().releases, 1);

        // self-move keeps the stream
        cupool::stream &alias = c;
        c = std::move(alias);
        ck_assert_ptr_eq(c.get(), h);
        ck_assert_uint_eq(streams().in_use, 1);
    }
    // a, b, c destroyed: exactly one more release, no double release
    cupool_class_stats_t st = streams();
    ck_assert_uint_eq(st.in_use, 0);
    ck_assert_uint_eq(st.releases, 2);
    ck_assert_uint_eq(st.acquires, 2);
    ck_assert_uint_eq(st.dropped, 0);
}
END_TEST

START_TEST(release_early_and_detach)
{
    tu_setup();
    cupool::stream s = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
    CUstream h = s.get();
    TU_OK(s.release());
    ck_assert(!s);
    ck_assert_uint_eq(streams().releases, 1);
    TU_OK(s.release()); // again: empty, nothing happens
    ck_assert_uint_eq(streams().releases, 1);
    TU_EQ(cupool_stream_release(h), CUDA_ERROR_INVALID_HANDLE);

    CUstream d;
    {
        cupool::stream t = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
        d = t.detach();
        ck_assert(!t);
        ck_assert_ptr_nonnull(d);
    }
    ck_assert_uint_eq(streams().in_use, 1); // the owner let go without giving it back
    TU_OK(cupool_stream_release(d));        // so the caller still can
    ck_assert_uint_eq(streams().in_use, 0);

    // adopt: an owner of a stream acquired through the C API
    CUstream raw;
    TU_OK(cupool_stream_acquire(&raw, CU_STREAM_NON_BLOCKING, 0));
    {
        cupool::stream a = cupool::stream::adopt(raw);
        ck_assert_ptr_eq(a.get(), raw);
    }
    ck_assert_uint_eq(streams().in_use, 0);
    TU_EQ(cupool_stream_release(raw), CUDA_ERROR_INVALID_HANDLE);

    // a foreign handle given to an owner: its release reports the refusal, once
    cupool::event e = cupool::event::acquire(CU_EVENT_DISABLE_TIMING);
    cupool::stream wrong = cupool::stream::adopt(reinterpret_cast<CUstream>(e.get()));
    TU_EQ(wrong.release(), CUDA_ERROR_INVALID_HANDLE);
    ck_assert(!wrong);
    ck_assert_uint_eq(events().in_use, 1);
}
END_TEST

START_TEST(error_carries_result_and_message)
{
    tu_setup();
    try {
        cupool::stream s = cupool::stream::acquire(0x40u);
        ck_abort_msg("unknown stream flags were accepted");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_VALUE);
        std::string what = e.what();
        ck_assert_msg(what.find("cupool_stream_acquire") != std::string::npos, "%s", e.what());
        ck_assert_msg(what.find("unknown flags 0x40") != std::string::npos, "%s", e.what());
        ck_assert_msg(what.find("CUDA_ERROR_INVALID_VALUE") != std::string::npos, "%s",
                      e.what());
        // cupool's message names the function already: what() does not repeat it
        ck_assert_msg(what.rfind("cupool_stream_acquire: unknown flags 0x40", 0) == 0, "%s",
                      e.what());
    }
    // caught as std::runtime_error too; CU_EVENT_INTERPROCESS needs DISABLE_TIMING
    try {
        cupool::event e = cupool::event::acquire(CU_EVENT_INTERPROCESS);
        ck_abort_msg("invalid event flags were accepted");
    } catch (const std::runtime_error &e) {
        ck_assert_msg(std::strstr(e.what(), "invalid flags") != nullptr, "%s", e.what());
        ck_assert_int_eq(dynamic_cast<const cupool::error &>(e).result(),
                         CUDA_ERROR_INVALID_VALUE);
    }
    // no current context
    TU_OK(tu.cuCtxSetCurrent(nullptr));
    try {
        cupool::stream s = cupool::stream::acquire();
        ck_abort_msg("acquired with no current context");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_CONTEXT);
        ck_assert_msg(std::strstr(e.what(), "CUDA_ERROR_INVALID_CONTEXT") != nullptr, "%s",
                      e.what());
    }
    TU_OK(tu.cuCtxSetCurrent(tu_ctx));
    // check() itself
    cupool::check(CUDA_SUCCESS, "nothing");
    try {
        cupool::check(cupool_stream_pool_acquire(nullptr, nullptr), "cupool_stream_pool_acquire");
        ck_abort_msg("check() did not throw");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_VALUE);
        ck_assert_msg(std::strncmp(e.what(), "cupool_stream_pool_acquire: ", 28) == 0, "%s",
                      e.what());
    }
    ck_assert_str_eq(cupool::result_name(CUDA_ERROR_INVALID_HANDLE), "CUDA_ERROR_INVALID_HANDLE");
}
END_TEST

START_TEST(try_forms_report_without_throwing)
{
    tu_setup();
    cupool::stream s;
    TU_OK(cupool::stream::try_acquire(s, CU_STREAM_NON_BLOCKING, 0));
    CUstream h = s.get();
    ck_assert_ptr_nonnull(h);
    // a failure leaves the owner as it was
    TU_EQ(cupool::stream::try_acquire(s, 0x40u, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_eq(s.get(), h);
    ck_assert_uint_eq(streams().in_use, 1);
    ck_assert_msg(std::strstr(cupool_error_string(), "unknown flags") != nullptr, "%s",
                  cupool_error_string());
    // a success over a held stream gives the old one back first
    TU_OK(cupool::stream::try_acquire(s, CU_STREAM_NON_BLOCKING, 0));
    ck_assert_uint_eq(streams().in_use, 1);
    ck_assert_uint_eq(streams().releases, 1);

    cupool::event e;
    TU_EQ(cupool::event::try_acquire(e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    ck_assert(!e);
    TU_OK(cupool::event::try_acquire(e, CU_EVENT_DISABLE_TIMING));
    ck_assert(static_cast<bool>(e));

    cupool::stream_pool sp;
    ck_assert(!sp);
    cupool::stream t;
    TU_EQ(sp.try_acquire(t), CUDA_ERROR_INVALID_VALUE); // an empty pool
    ck_assert(!t);
    TU_EQ(cupool::stream_pool::try_get(sp, nullptr, 0x40u, 0), CUDA_ERROR_INVALID_VALUE);
    ck_assert(!sp);
    TU_OK(cupool::stream_pool::try_get(sp, nullptr, CU_STREAM_NON_BLOCKING, 0));
    TU_OK(sp.try_acquire(t));
    ck_assert_ptr_eq(t.pool(), sp.handle());

    cupool::event_pool ep;
    TU_EQ(cupool::event_pool::try_get(ep, nullptr, CU_EVENT_INTERPROCESS),
          CUDA_ERROR_INVALID_VALUE);
    TU_OK(cupool::event_pool::try_get(ep, nullptr, CU_EVENT_DISABLE_TIMING));
    cupool::event f;
    TU_OK(ep.try_acquire(f));
    ck_assert_ptr_eq(f.pool(), ep.handle());

    cupool::pipeline p;
    TU_EQ(p.try_launch(s), CUDA_ERROR_INVALID_VALUE); // empty owner: no pipeline
    TU_OK(cupool::pipeline::try_create(p));
    TU_EQ(p.try_launch(s), CUDA_ERROR_INVALID_VALUE); // no nodes
}
END_TEST

START_TEST(explicit_pools_take_their_handles_back)
{
    tu_setup();
    cupool::stream_pool pool = cupool::stream_pool::get(nullptr, CU_STREAM_NON_BLOCKING, 0);
    ck_assert(pool == cupool::stream_pool::get(nullptr, CU_STREAM_NON_BLOCKING, 0));
    ck_assert(pool != cupool::stream_pool::get(tu_ctx, CU_STREAM_DEFAULT, 0));
    CUstream h;
    {
        cupool::stream s = pool.acquire();
        h = s;
        ck_assert_ptr_eq(s.pool(), pool.handle());
        ck_assert_uint_eq(streams().in_use, 1);
        // given back to its pool, not to another one's
        cupool::stream_pool other = cupool::stream_pool::get(nullptr, CU_STREAM_DEFAULT, 0);
        TU_EQ(cupool_stream_pool_release(other.handle(), h, 0), CUDA_ERROR_INVALID_HANDLE);
    }
    ck_assert_uint_eq(streams().in_use, 0);
    ck_assert_uint_eq(streams().releases, 1);
    TU_EQ(cupool_stream_pool_release(pool.handle(), h, 0), CUDA_ERROR_INVALID_HANDLE);

    // without the vouch the next acquire checks the stream's capture state; with it, not
    if (tu_fake.present) {
        unsigned long before = tu_fake.calls_here("cuStreamIsCapturing");
        cupool::stream s = pool.acquire();
        ck_assert_ptr_eq(s.get(), h); // the same stream, from this thread's magazine
        ck_assert_uint_eq(tu_fake.calls_here("cuStreamIsCapturing") - before, 1);
        s.mark_not_capturing();
        cupool::stream moved = std::move(s); // the vouch goes with the stream
        TU_OK(moved.release());
        before = tu_fake.calls_here("cuStreamIsCapturing");
        s = pool.acquire();
        ck_assert_ptr_eq(s.get(), h);
        ck_assert_uint_eq(tu_fake.calls_here("cuStreamIsCapturing") - before, 0);
        TU_OK(s.release()); // the vouch ended with the last release
        before = tu_fake.calls_here("cuStreamIsCapturing");
        s = pool.acquire();
        ck_assert_uint_eq(tu_fake.calls_here("cuStreamIsCapturing") - before, 1);
        // marking a current-context stream does nothing (its release takes no flags)
        cupool::stream c = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
        c.mark_not_capturing();
        TU_OK(c.release());
    }

    cupool::event_pool epool = cupool::event_pool::get(nullptr, CU_EVENT_DISABLE_TIMING);
    ck_assert(epool == cupool::event_pool::get(nullptr, CU_EVENT_DISABLE_TIMING));
    CUevent eh;
    {
        cupool::event e = epool.acquire();
        eh = e;
        ck_assert_ptr_eq(e.pool(), epool.handle());
        ck_assert_uint_eq(events().in_use, 1);
    }
    ck_assert_uint_eq(events().in_use, 0);
    TU_EQ(cupool_event_pool_release(epool.handle(), eh), CUDA_ERROR_INVALID_HANDLE);

    // a pool value wrapping a C pool, and an owner adopting the C pool's stream
    cupool_stream_pool_t cpool;
    TU_OK(cupool_stream_pool_get(&cpool, nullptr, CU_STREAM_NON_BLOCKING, 0));
    ck_assert(cupool::stream_pool(cpool) == pool);
    CUstream raw;
    TU_OK(cupool_stream_pool_acquire(cpool, &raw));
    {
        cupool::stream a = cupool::stream::adopt(raw, cpool);
    }
    TU_EQ(cupool_stream_pool_release(cpool, raw, 0), CUDA_ERROR_INVALID_HANDLE);

    // owners give back through their pool: a handle adopted for the wrong pool is refused
    cupool::stream_pool dflt = cupool::stream_pool::get(nullptr, CU_STREAM_DEFAULT, 0);
    cupool::stream mine = pool.acquire();
    cupool::stream wrong = cupool::stream::adopt(mine.get(), dflt.handle());
    TU_EQ(wrong.release(), CUDA_ERROR_INVALID_HANDLE);
    TU_OK(mine.release());
    cupool::event_pool timed = cupool::event_pool::get(nullptr, CU_EVENT_DEFAULT);
    cupool::event emine = epool.acquire();
    cupool::event ewrong = cupool::event::adopt(emine.get(), timed.handle());
    TU_EQ(ewrong.release(), CUDA_ERROR_INVALID_HANDLE);
    TU_OK(emine.release());

    try {
        (void)cupool::stream_pool::get(nullptr, 0x40u, 0);
        ck_abort_msg("unknown pool flags were accepted");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_VALUE);
        ck_assert_msg(std::strstr(e.what(), "cupool_stream_pool_get") != nullptr, "%s",
                      e.what());
    }
    try {
        (void)cupool::stream_pool().acquire();
        ck_abort_msg("an empty pool handed out a stream");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_VALUE);
    }
}
END_TEST

static void CUDA_CB host_count(void *p)
{
    ++*static_cast<int *>(p);
}

START_TEST(pipeline_builder_launches)
{
    tu_setup();
    struct tu_kernels k;
    tu_load_kernels(&k);
    CUdeviceptr mem;
    TU_OK(tu.cuMemAlloc(&mem, 4 * 4));
    cupool::stream s = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
    int host_calls = 0;
    auto read = [&](unsigned v[4]) {
        TU_OK(tu.cuStreamSynchronize(s));
        TU_OK(tu.cuMemcpyDtoH(v, mem, 4 * sizeof v[0]));
    };
    auto fill = [&](cupool::pipeline &p, unsigned a, unsigned b) {
        CUdeviceptr p0 = mem, p1 = mem + 4;
        p.reset();
        cupool_node_t zero = p.memset(mem, 0, 4, 4);
        cupool_node_t n0 = p.kernel(k.add_u32, 1, 1, 0, {&p0, &a});
        cupool_node_t n1 = p.kernel(k.add_u32, cupool::dim3(1, 1, 1), {1, 1, 1}, 0, {&p1, &b});
        p.depend(n1, {zero}); // both kernels after the memset, side by side
        void *args[] = {&p0, &b};
        cupool_node_t n2 = p.kernel(k.add_u32, 1, 1, 0, args);
        p.depend(n2, {n0, n1});
        cupool_node_t h = p.host(host_count, &host_calls);
        cupool_node_t c = p.memcpy(mem + 8, mem, 4); // v[2] = v[0]
        ck_assert_uint_eq(zero, 0);
        ck_assert_uint_eq(n0, 1);
        ck_assert_uint_eq(n1, 2);
        ck_assert_uint_eq(n2, 3);
        ck_assert_uint_eq(h, 4);
        ck_assert_uint_eq(c, 5);
    };

    cupool::pipeline p = cupool::pipeline::create();
    ck_assert(static_cast<bool>(p));
    fill(p, 3, 5);
    p.launch(s);
    unsigned v[4];
    read(v);
    ck_assert_uint_eq(v[0], 8); // 3 + 5
    ck_assert_uint_eq(v[1], 5);
    ck_assert_uint_eq(v[2], 8);
    ck_assert_int_eq(host_calls, 1);

    // the same structure again, other arguments: a cache hit, the new values computed
    cupool_graph_stats_t before = CUPOOL_GRAPH_STATS_INIT, after = CUPOOL_GRAPH_STATS_INIT;
    TU_OK(cupool_graph_stats_get(&before));
    fill(p, 10, 20);
    p.launch(s);
    read(v);
    TU_OK(cupool_graph_stats_get(&after));
    ck_assert_uint_eq(v[0], 30);
    ck_assert_uint_eq(v[1], 20);
    ck_assert_uint_eq(v[2], 30);
    ck_assert_int_eq(host_calls, 2);
    ck_assert_uint_eq(after.launches - before.launches, 1);
    ck_assert_uint_eq(after.hits - before.hits, 1);

    // events through the builder, with owners for the events
    {
        cupool::event done = cupool::event::acquire(CU_EVENT_DISABLE_TIMING);
        cupool::pipeline q = cupool::pipeline::create();
        CUdeviceptr p3 = mem + 12;
        unsigned one = 1;
        q.memset(p3, 0, 4, 1);
        q.kernel(k.add_u32, 1, 1, 0, {&p3, &one});
        q.event_record(done);
        q.event_wait(done);
        q.kernel(k.add_u32, 1, 1, 0, {&p3, &one});
        q.launch(s);
        TU_OK(tu.cuEventSynchronize(done));
        read(v);
        ck_assert_uint_eq(v[3], 2);
    }

    // launch attributes through the builder (cooperative: any GPU of the H100/H200 kind),
    // given as a list; an attribute not taken throws, naming it
    {
        cupool::pipeline q = cupool::pipeline::create();
        CUdeviceptr p3 = mem + 12;
        unsigned two = 2;
        CUlaunchAttribute coop;
        std::memset(&coop, 0, sizeof coop);
        coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        coop.value.cooperative = 1;
        q.memset(p3, 0, 4, 1);
        cupool_node_t n = q.kernel_ex(k.add_u32, 1, 1, 0, {&p3, &two}, {coop});
        ck_assert_uint_eq(n, 1);
        q.launch(s);
        read(v);
        ck_assert_uint_eq(v[3], 2);
        CUlaunchAttribute window;
        std::memset(&window, 0, sizeof window);
        window.id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
        ck_assert_int_eq(q.try_kernel_ex(k.add_u32, 1, 1, 0, {&p3, &two}, {window}),
                         CUDA_ERROR_INVALID_VALUE);
        ck_assert_msg(std::strstr(cupool_error_string(), "ACCESS_POLICY_WINDOW") != nullptr,
                      "%s", cupool_error_string());
    }

    // a failed add throws, and is remembered until reset
    try {
        p.reset();
        p.memset(mem, 0, 4, 1);
        p.kernel(nullptr, 1, 1, 0, nullptr);
        ck_abort_msg("a NULL function was accepted");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_VALUE);
        ck_assert_msg(std::strstr(e.what(), "cupool_pipeline_kernel") != nullptr, "%s", e.what());
    }
    try {
        p.launch(s);
        ck_abort_msg("a pipeline whose add failed was launched");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_VALUE);
    }
    try {
        p.depend(0, {5});
        ck_abort_msg("a dependency out of range was accepted");
    } catch (const cupool::error &e) {
        ck_assert_int_eq(e.result(), CUDA_ERROR_INVALID_VALUE);
    }
    p.reset();
    cupool_node_t n = 99;
    TU_EQ(p.try_memset(0, 0, 4, 1, &n), CUDA_ERROR_INVALID_VALUE);
    ck_assert_uint_eq(n, 99);
    p.reset();
    TU_OK(p.try_memset(mem, 7, 4, 1, &n));
    ck_assert_uint_eq(n, 0);
    TU_OK(p.try_launch(s));
    read(v);
    ck_assert_uint_eq(v[0], 7);

    // moving: the moved-from pipeline is empty, the moved-to one launches
    cupool_pipeline_t h = p.handle();
    cupool::pipeline moved(std::move(p));
    ck_assert(!p);
    ck_assert_ptr_eq(moved.handle(), h);
    TU_EQ(p.try_launch(s), CUDA_ERROR_INVALID_VALUE);
    TU_OK(moved.try_launch(s));
    cupool::pipeline other = cupool::pipeline::create();
    other = std::move(moved); // destroys other's pipeline, takes moved's
    ck_assert_ptr_eq(other.handle(), h);
    TU_OK(other.try_launch(s));
    // destroyed once each: cupool's metadata comes back to what it was
    size_t bytes = cupool_metadata_bytes();
    {
        cupool::pipeline a = cupool::pipeline::create(), b = cupool::pipeline::create();
        a.memset(mem, 0, 4, 1);
        b.memset(mem, 0, 4, 1);
        ck_assert_uint_gt(cupool_metadata_bytes(), bytes);
        b = std::move(a);
        cupool::pipeline c(std::move(b));
    }
    ck_assert_uint_eq(cupool_metadata_bytes(), bytes);
    TU_OK(tu.cuStreamSynchronize(s));
    TU_OK(tu.cuMemFree(mem));
}
END_TEST

// A forked child cannot use CUDA: its owners' releases are refused (CUDA_ERROR_NOT_PERMITTED),
// silently in destructors, and the parent's handles stay the parent's.
START_TEST(owners_in_forked_child)
{
    // The child allocates (the exception, its message), so it may only run where no other
    // thread of the parent can be inside the allocator at fork(): GCC 12's AddressSanitizer
    // allocator takes no lock around fork(), and a child forked while the maintenance thread
    // allocated its thread record waited for ever on a lock nobody would drop (1 child in
    // about 300). glibc's and jemalloc's allocators are fork-safe. cupool's own refusal path,
    // which allocates nothing, is tested with threads mid-call by check_hostile's fork storm.
    setenv("CUPOOL_BACKGROUND", "0", 1);
    tu_setup();
    cupool::stream s = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
    cupool::event e = cupool::event::acquire(CU_EVENT_DISABLE_TIMING);
    cupool::pipeline p = cupool::pipeline::create();
    fflush(nullptr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int ok = 1;
        cupool::stream t;
        ok &= cupool::stream::try_acquire(t) == CUDA_ERROR_NOT_PERMITTED;
        try {
            cupool::event f = cupool::event::acquire();
            ok = 0;
        } catch (const cupool::error &err) {
            ok &= err.result() == CUDA_ERROR_NOT_PERMITTED;
        }
        ok &= e.release() == CUDA_ERROR_NOT_PERMITTED;
        {
            cupool::stream mine = std::move(s); // destroyed here: refused, ignored
            cupool::pipeline q = std::move(p);
        }
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
    ck_assert_uint_eq(streams().in_use, 1);
    ck_assert_uint_eq(events().in_use, 1);
    TU_OK(s.release());
    TU_OK(e.release());
}
END_TEST

// Owners destroyed after cupool's exit handler ran: C++ objects of static storage, constructed
// before cupool initialised, are destroyed after it. Their releases succeed without a driver
// call. (Empty in every other process of the suite: they give back nothing there.)
namespace {
cupool::stream late_stream;
cupool::event late_event;
cupool::pipeline late_pipeline;
cupool::stream_pool pool;
cupool::stream late_pooled;
} // namespace

START_TEST(owners_destroyed_after_exit)
{
    tu_setup();
    late_stream = cupool::stream::acquire(CU_STREAM_NON_BLOCKING);
    late_event = cupool::event::acquire(CU_EVENT_DISABLE_TIMING);
    late_pipeline = cupool::pipeline::create();
    pool = cupool::stream_pool::get(nullptr, CU_STREAM_NON_BLOCKING, 0);
    late_pooled = pool.acquire();
    late_pooled.mark_not_capturing();
    std::exit(0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cxx");
    TCase *tc = tcase_create("binding");
    tcase_add_test(tc, stream_released_at_scope_exit);
    tcase_add_test(tc, event_released_at_scope_exit);
    tcase_add_test(tc, moved_from_owner_releases_nothing);
    tcase_add_test(tc, release_early_and_detach);
    tcase_add_test(tc, error_carries_result_and_message);
    tcase_add_test(tc, try_forms_report_without_throwing);
    tcase_add_test(tc, explicit_pools_take_their_handles_back);
    tcase_add_test(tc, pipeline_builder_launches);
    tcase_add_test(tc, owners_in_forked_child);
    tcase_add_exit_test(tc, owners_destroyed_after_exit, 0);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
