# SPDX-License-Identifier: MIT
"""The cupool Python package (run by tests/python/check_python.sh, which puts the package on
PYTHONPATH and says which backend to expect in CUPOOLTEST_EXPECT_BACKEND). Exits 77 (SKIP)
when no driver answers (the real-driver run on a machine without a GPU)."""
import ctypes
import gc
import os
import subprocess
import sys
import time
import types
import unittest

import cupool

EXPECT = os.environ.get("CUPOOLTEST_EXPECT_BACKEND", "extension")
CUDA_ERROR_INVALID_HANDLE = 400

try:
    CTX = cupool.ensure_context(0)
except cupool.CupoolError as e:
    if os.environ.get("CUPOOLTEST_REAL"):
        print("check_python: no GPU answered (%s): SKIP" % e)
        sys.exit(77)
    raise


def in_use(kind="stream"):
    return sum(c["in_use"] for c in cupool.stats()["classes"] if c["kind"] == kind)


def driver(name, version, restype, *argtypes):
    return ctypes.CFUNCTYPE(restype, *argtypes)(cupool.driver_get_proc(name, version))


c_int, c_u32, c_size, c_u64, c_vp = (ctypes.c_int, ctypes.c_uint, ctypes.c_size_t,
                                     ctypes.c_uint64, ctypes.c_void_p)
cuMemAlloc = driver("cuMemAlloc", 3020, c_int, ctypes.POINTER(c_u64), c_size)
cuMemFree = driver("cuMemFree", 3020, c_int, c_u64)
cuMemsetD32Async = driver("cuMemsetD32Async", 3020, c_int, c_u64, c_u32, c_size, c_vp)
cuMemcpyDtoH = driver("cuMemcpyDtoH", 3020, c_int, c_vp, c_u64, c_size)
cuStreamSynchronize = driver("cuStreamSynchronize", 2000, c_int, c_vp)
cuStreamGetFlags = driver("cuStreamGetFlags", 5050, c_int, c_vp, ctypes.POINTER(c_u32))


class Backend(unittest.TestCase):
    def test_backend(self):
        self.assertEqual(cupool.BACKEND, EXPECT)
        if EXPECT == "ctypes" and not os.environ.get("CUPOOL_PY_FORCE_CTYPES"):
            self.assertIsInstance(cupool._EXTENSION_ERROR, ImportError)

    def test_version(self):
        self.assertEqual(cupool.version(), cupool.__version__)
        self.assertEqual(cupool.result_name(400), "CUDA_ERROR_INVALID_HANDLE")
        self.assertIsInstance(cupool.error_string(), str)
        self.assertEqual(cupool.ensure_context(0), CTX)  # already current: the same context


class Pairs(unittest.TestCase):
    def test_pairs_return_to_the_pool(self):
        base = in_use()
        handles = set()
        for _ in range(1000):
            s = cupool.stream()
            handles.add(s.handle)
            s.release()
            self.assertTrue(s.released)
        self.assertEqual(in_use(), base)
        self.assertLessEqual(len(handles), 2)  # the same handle comes back
        held = [cupool.stream(cupool.STREAM_NON_BLOCKING) for _ in range(10)]
        self.assertEqual(in_use(), base + 10)
        self.assertEqual(len({s.handle for s in held}), 10)
        flags = c_u32()
        self.assertEqual(cuStreamGetFlags(held[0].handle, ctypes.byref(flags)), 0)
        self.assertEqual(flags.value, cupool.STREAM_NON_BLOCKING)
        for s in held:
            s.release()
        self.assertEqual(in_use(), base)

    def test_raw_handles(self):
        base = in_use()
        h = cupool.stream_acquire_handle(0, 0)
        self.assertIsInstance(h, int)
        self.assertEqual(in_use(), base + 1)
        cupool.stream_release_handle(h)
        self.assertEqual(in_use(), base)
        with self.assertRaises(cupool.CupoolError) as cm:
            cupool.stream_release_handle(h)  # refused by cupool itself
        self.assertEqual(cm.exception.result, CUDA_ERROR_INVALID_HANDLE)
        e = cupool.event_acquire_handle(cupool.EVENT_DISABLE_TIMING)
        self.assertEqual(in_use("event"), 1)
        cupool.event_release_handle(e)
        self.assertEqual(in_use("event"), 0)

    def test_context_manager(self):
        base = in_use()
        with cupool.stream() as s:
            self.assertIsInstance(s, cupool.Stream)
            self.assertEqual(in_use(), base + 1)
        self.assertTrue(s.released)
        self.assertEqual(in_use(), base)
        with cupool.Stream.acquire(flags=0, priority=0) as s:
            s.release()  # released inside the block: the end of the block does nothing more
        self.assertEqual(in_use(), base)
        with self.assertRaises(ZeroDivisionError):
            with cupool.event() as e:
                self.assertEqual(in_use("event"), 1)
                1 / 0
        self.assertTrue(e.released)
        self.assertEqual(in_use("event"), 0)

    def test_finaliser_releases(self):
        base = in_use()
        s = cupool.stream()
        self.assertEqual(in_use(), base + 1)
        del s
        gc.collect()
        self.assertEqual(in_use(), base)
        cupool.Event.acquire()
        gc.collect()
        self.assertEqual(in_use("event"), 0)

    def test_double_release_refused(self):
        base = in_use()
        s = cupool.stream()
        h = s.handle
        s.release()
        with self.assertRaises(cupool.CupoolError) as cm:
            s.release()
        err = cm.exception
        self.assertEqual(err.result, CUDA_ERROR_INVALID_HANDLE)
        self.assertEqual(err.name, "CUDA_ERROR_INVALID_HANDLE")
        self.assertIn("already released", str(err))
        self.assertIn("CUDA_ERROR_INVALID_HANDLE", str(err))
        with self.assertRaises(cupool.CupoolError):
            s.handle
        with self.assertRaises(cupool.CupoolError):
            with s:
                pass
        # the handle went back once: a new owner has it, and the old object cannot touch it
        t = cupool.stream()
        self.assertEqual(t.handle, h)
        with self.assertRaises(cupool.CupoolError):
            s.release()
        self.assertEqual(in_use(), base + 1)
        t.release()
        self.assertEqual(in_use(), base)

    def test_cupool_error_message(self):
        with self.assertRaises(cupool.CupoolError) as cm:
            cupool.stream(flags=0x40)  # unknown stream flags
        err = cm.exception
        self.assertEqual(err.name, "CUDA_ERROR_INVALID_VALUE")
        self.assertEqual(err.result, 1)
        self.assertIn(err.detail, str(err))
        self.assertTrue(err.detail)

    def test_protocols(self):
        with cupool.stream() as s:
            self.assertEqual(s.__cuda_stream__(), (0, s.handle))
            self.assertEqual(int(s), s.handle)
            self.assertEqual(repr(s), "<cupool.Stream 0x%x>" % s.handle)
        self.assertTrue(repr(s).endswith(" (released)>"), repr(s))
        with cupool.event() as e:
            self.assertEqual(int(e), e.handle)
        pool = cupool.StreamPool(CTX, 0, 0, promise=True)
        with pool.acquire() as s:
            self.assertEqual(repr(s), "<cupool.Stream 0x%x of a pool>" % s.handle)
        self.assertIn("ctx=0x%x" % CTX, repr(pool))


class Pools(unittest.TestCase):
    def test_stream_pool(self):
        for promise in (False, True):
            pool = cupool.StreamPool(CTX, cupool.STREAM_NON_BLOCKING, 0, promise=promise)
            self.assertEqual(cupool.StreamPool(CTX, cupool.STREAM_NON_BLOCKING, 0,
                                               promise=promise).handle, pool.handle)
            base = in_use()
            with pool.acquire() as s:
                self.assertEqual(in_use(), base + 1)
                h = s.handle
            self.assertEqual(in_use(), base)
            s = pool.acquire()
            self.assertEqual(s.handle, h)
            s.release(not_capturing=True)
            raw = pool.acquire_handle()
            pool.release_handle(raw, not_capturing=True)
            self.assertEqual(in_use(), base)
            # a stream of another pool is refused and stays in use
            other = cupool.stream()
            with self.assertRaises(cupool.CupoolError) as cm:
                pool.release_handle(other.handle)
            self.assertEqual(cm.exception.result, CUDA_ERROR_INVALID_HANDLE)
            other.release()
        self.assertTrue(pool.flags & cupool.POOL_CONTEXT_OUTLIVES)

    def test_event_pool(self):
        pool = cupool.EventPool(0, cupool.EVENT_DISABLE_TIMING)
        e = pool.acquire()
        self.assertEqual(in_use("event"), 1)
        e.release()
        with self.assertRaises(cupool.CupoolError):
            e.release()
        raw = pool.acquire_handle()
        pool.release_handle(raw)
        self.assertEqual(in_use("event"), 0)
        del pool
        e = cupool.EventPool(CTX, 0, promise=True).acquire()  # the object outlives its pool's
        del e
        gc.collect()
        self.assertEqual(in_use("event"), 0)


class Stats(unittest.TestCase):
    def test_keys_and_values(self):
        with cupool.stream(0, 0):
            st = cupool.stats()
        self.assertEqual(set(st), {"classes", "maintenance", "graph", "graph_devices",
                                   "metadata_bytes"})
        cls = st["classes"]
        self.assertTrue(cls)
        keys = {"kind", "context_id", "device", "flags", "priority", "context_alive", "acquires", "hits",
                "releases", "creates", "destroys", "dropped", "idle", "in_use", "high_water"}
        for c in cls:
            self.assertEqual(set(c), keys)
            self.assertIn(c["kind"], ("stream", "event"))
            self.assertIs(c["context_alive"], True)
            self.assertEqual(c["device"], 0)
        s0 = [c for c in cls if c["kind"] == "stream" and c["flags"] == 0 and c["priority"] == 0]
        self.assertEqual(len(s0), 1)
        self.assertGreaterEqual(s0[0]["in_use"], 1)
        self.assertGreaterEqual(s0[0]["acquires"], s0[0]["hits"])
        self.assertGreaterEqual(s0[0]["high_water"], s0[0]["in_use"] + s0[0]["idle"])
        self.assertEqual(set(st["maintenance"]),
                         {"running", "wakeups", "background_creates", "background_destroys",
                          "request_creates", "request_destroys", "graph_reaps"})
        self.assertEqual(set(st["graph"]),
                         {"launches", "hits", "misses", "instantiations", "updates",
                          "nodes_updated", "update_failures", "evictions", "eager_launches",
                          "entries", "execs", "bytes", "claims_lock_free", "claims_locked",
                          "nodes_compared", "uploads", "update_topology_changed",
                          "update_node_type_changed", "update_function_changed",
                          "update_parameters_changed", "update_not_supported",
                          "update_unsupported_function_change", "update_attributes_changed",
                          "update_other", "node_update_refusals", "update_errors"})
        self.assertGreater(st["metadata_bytes"], 0)


class Capture(unittest.TestCase):
    def setUp(self):
        self.mem = c_u64()
        self.assertEqual(cuMemAlloc(ctypes.byref(self.mem), 64), 0)

    def tearDown(self):
        cuMemFree(self.mem.value)

    def value(self, s):
        self.assertEqual(cuStreamSynchronize(s.handle), 0)
        out = ctypes.c_uint32()
        self.assertEqual(cuMemcpyDtoH(ctypes.byref(out), self.mem.value, 4), 0)
        return out.value

    def test_miss_calls_fn_and_a_replay_does_not(self):
        calls = []
        value = [7]

        def work(h):
            calls.append(h)
            self.assertEqual(cuMemsetD32Async(self.mem.value, value[0], 1, h), 0)

        key = 0xC0FFEE0000000001
        with cupool.stream(cupool.STREAM_NON_BLOCKING) as s:
            launches = cupool.stats()["graph"]["launches"]
            self.assertTrue(cupool.capture_launch(key, s, work))
            self.assertEqual(calls, [s.handle])
            self.assertEqual(self.value(s), 7)
            value[0] = 8
            self.assertFalse(cupool.capture_launch(key, s.handle, work, replay=True))
            self.assertEqual(len(calls), 1)
            self.assertEqual(self.value(s), 7)  # the captured graph, replayed
            self.assertTrue(cupool.capture_launch(key + 1, s, work, replay=False))
            self.assertEqual(self.value(s), 8)
            value[0] = 9
            self.assertTrue(cupool.capture_launch(key + 1, s, work, replay=False))
            self.assertEqual(len(calls), 3)
            self.assertEqual(self.value(s), 9)  # captured again, the exec updated
            st = cupool.stats()
            self.assertEqual(st["graph"]["launches"], launches + 4)
            # one device: its figures are the whole cache's
            self.assertEqual(set(st["graph_devices"]), {0})
            dev = st["graph_devices"][0]
            self.assertEqual(set(dev), {"launches", "hits", "misses", "instantiations", "updates",
                                        "nodes_updated", "evictions", "entries", "execs",
                                        "bytes", "claims_lock_free", "claims_locked"})
            for f in dev:
                self.assertEqual(dev[f], st["graph"][f], f)

    def test_exception_in_fn(self):
        class Boom(Exception):
            pass

        def work(h):
            cuMemsetD32Async(self.mem.value, 5, 1, h)
            raise Boom("from fn")

        with cupool.stream(cupool.STREAM_NON_BLOCKING) as s:
            before = cupool.stats()["graph"]["entries"]
            with self.assertRaises(Boom):
                cupool.capture_launch(77, s, work)
            self.assertEqual(cupool.stats()["graph"]["entries"], before)
            # the capture was ended: the stream works, and the key captures afresh
            calls = []
            self.assertTrue(cupool.capture_launch(77, s, lambda h: calls.append(h)))
            self.assertEqual(calls, [s.handle])
        self.assertEqual(in_use(), 0)

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            cupool.capture_launch(1, 0, "not callable")
        with self.assertRaises(OverflowError):
            cupool.capture_launch(-1, 0, lambda h: None)


class Handoff(unittest.TestCase):
    """The framework helpers, against stand-ins for CuPy and PyTorch (neither is imported
    before a helper is called)."""

    def setUp(self):
        self.made = []
        made = self.made

        class ExternalStream:
            def __init__(self, ptr, *args, **kw):
                made.append((ptr, args, kw))
                self.ptr = ptr

        cupy = types.ModuleType("cupy")
        cupy.cuda = types.SimpleNamespace(ExternalStream=ExternalStream,
                                          runtime=types.SimpleNamespace(getDevice=lambda: 0))
        torch = types.ModuleType("torch")
        torch.cuda = types.SimpleNamespace(ExternalStream=ExternalStream,
                                           current_device=lambda: 0)
        torch.device = lambda d: types.SimpleNamespace(index=int(str(d).split(":")[1])
                                                       if ":" in str(d) else None)
        sys.modules["cupy"] = cupy
        sys.modules["torch"] = torch
        cupool.clear_wrapper_cache()

    def tearDown(self):
        del sys.modules["cupy"], sys.modules["torch"]
        cupool.clear_wrapper_cache()

    def test_wrappers_cached_per_handle(self):
        with cupool.stream() as s:
            h = s.handle
            w = s.as_cupy()
            self.assertEqual(w.ptr, h)
            self.assertIs(s.as_cupy(), w)
            t = s.as_torch()
            self.assertEqual(self.made[-1], (h, (), {"device": 0}))
            self.assertIs(s.as_torch("cuda:0"), t)
            self.assertIsNot(s.as_torch(1), t)
        with cupool.stream() as s2:
            self.assertEqual(s2.handle, h)  # the pooled handle came back ...
            self.assertIs(s2.as_cupy(), w)  # ... and its wrapper with it
        self.assertEqual(len(self.made), 3)
        cupool.trim()
        with cupool.stream() as s3:
            s3.as_cupy()
        self.assertEqual(len(self.made), 4)

    def test_cupy_from_external(self):
        # CuPy 14 deprecates ExternalStream for Stream.from_external(an object in the CUDA
        # stream protocol), read with the stream's device current
        made, devices = self.made, []

        class Stream:
            @staticmethod
            def from_external(obj):
                made.append(obj.__cuda_stream__())
                return types.SimpleNamespace(ptr=obj.__cuda_stream__()[1], device=devices[-1])

        class Device:
            def __init__(self, d):
                self.d = d

            def __enter__(self):
                devices.append(self.d)

            def __exit__(self, *exc):
                devices.append(None)

        sys.modules["cupy"].cuda.Stream, sys.modules["cupy"].cuda.Device = Stream, Device
        with cupool.stream() as s:
            h = s.handle
            w = s.as_cupy()
        self.assertEqual((made, w.ptr, w.device), ([(0, h)], h, 0))
        with cupool.stream() as s2:
            self.assertEqual(s2.handle, h)
            self.assertIs(s2.as_cupy(), w)  # cached: the value it was made from outlives s
        self.assertEqual(len(made), 1)

    def test_not_imported_until_called(self):
        code = "import sys, cupool; cupool.ensure_context(); s = cupool.stream(); " \
               "assert 'cupy' not in sys.modules and 'torch' not in sys.modules; s.release()"
        subprocess.run([sys.executable, "-c", code], check=True)


class Misuse(unittest.TestCase):
    """What a caller can get wrong is refused with an exception and loses nothing, through
    either backend alike."""

    def test_an_owner_cannot_be_copied_pickled_or_made(self):
        import copy
        import pickle
        with cupool.stream() as s:
            for f in (copy.copy, copy.deepcopy, pickle.dumps):
                with self.assertRaises(TypeError):
                    f(s)
        with self.assertRaises(TypeError):  # an owner of any value would release it
            cupool.Stream(5) if cupool.BACKEND == "ctypes" else cupool.Stream.__new__(cupool.Stream)
        self.assertEqual(in_use(), 0)

    def test_out_of_range_values_are_refused(self):
        for bad in (lambda: cupool.stream(2 ** 32), lambda: cupool.stream(0, 2 ** 31),
                    lambda: cupool.event(-1), lambda: cupool.StreamPool(flags=2 ** 32),
                    lambda: cupool.StreamPool(ctx=-1), lambda: cupool.result_name(2 ** 40),
                    lambda: cupool.stream_release_handle(2 ** 64)):
            with self.assertRaises((OverflowError, TypeError)):
                bad()
        self.assertEqual(in_use(), 0)

    def test_an_object_of_the_wrong_kind_is_refused(self):
        with cupool.stream() as s, cupool.event() as e:
            with self.assertRaises(TypeError):
                cupool.capture_launch(1, e, lambda h: None)
            with self.assertRaises(TypeError):
                cupool.stream_release_handle(e)
            with self.assertRaises(TypeError):
                cupool.event_release_handle(s)
            with self.assertRaises(TypeError):
                cupool.context_release(s)
            with self.assertRaises(TypeError):
                cupool.StreamPool(ctx=e)
        self.assertEqual(in_use(), 0)

    def test_a_symbol_with_a_null_is_refused(self):
        with self.assertRaises(ValueError):
            cupool.driver_get_proc("cuInit\0x", 2000)

    def test_a_message_cut_inside_a_character_still_raises_cupool_error(self):
        # cupool cuts a message at 463 bytes, here inside a two-byte character
        with self.assertRaises(cupool.CupoolError) as cm:
            cupool.driver_get_proc("x" + "\u00e9" * 300, 2000)
        self.assertIn("x\u00e9", str(cm.exception))
        cupool.error_string()

    def test_ensure_context_takes_its_keyword(self):
        self.assertEqual(cupool.ensure_context(device=0), CTX)

    def test_a_refused_release_forgets_the_handle(self):
        s = cupool.stream()
        cupool.stream_release_handle(s.handle)  # given back behind the owner's back
        with self.assertRaises(cupool.CupoolError):
            s.release()
        self.assertTrue(s.released)
        t = cupool.stream()  # may be the same handle: now t's
        del s
        gc.collect()
        u = cupool.stream()
        self.assertNotEqual(u.handle, t.handle)  # s did not give t's handle back
        t.release()
        u.release()
        self.assertEqual(in_use(), 0)


class Shutdown(unittest.TestCase):
    def test_objects_alive_at_exit(self):
        # streams and events still held (in globals, in a cycle, in a pool's object) when the
        # interpreter exits: no crash, no error output
        code = ("import cupool; cupool.ensure_context(); s = cupool.stream(); "
                "e = cupool.event(); p = cupool.StreamPool(0, 1); q = p.acquire(); "
                "l = [cupool.stream()]; l.append(l)")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stderr), (0, ""))


class Timing(unittest.TestCase):
    def test_ns_per_pair(self):
        n = 200000
        pool = cupool.StreamPool(CTX, 0, 0, promise=True)
        cases = [
            ("stream() + release()", lambda: cupool.stream().release()),
            ("with stream()", None),
            ("stream_acquire_handle + release_handle", None),
            ("StreamPool(promise).acquire() + release(not_capturing)", None),
        ]
        out = []
        for name, _ in cases:
            best = None
            for _ in range(3):
                t0 = time.perf_counter_ns()
                if name.startswith("stream()"):
                    acq = cupool.stream
                    for _ in range(n):
                        acq().release()
                elif name.startswith("with"):
                    acq = cupool.stream
                    for _ in range(n):
                        with acq():
                            pass
                elif name.startswith("stream_acquire_handle"):
                    acq, rel = cupool.stream_acquire_handle, cupool.stream_release_handle
                    for _ in range(n):
                        rel(acq())
                else:
                    acq = pool.acquire
                    for _ in range(n):
                        acq().release(not_capturing=True)
                dt = (time.perf_counter_ns() - t0) / n
                best = dt if best is None else min(best, dt)
            out.append("  %-55s %7.1f ns per pair" % (name, best))
        t0 = time.perf_counter_ns()
        for _ in range(n):
            pass
        loop = (time.perf_counter_ns() - t0) / n
        print("\ncheck_python: %s backend, %d pairs, best of 3 (empty loop %.1f ns):\n%s"
              % (cupool.BACKEND, n, loop, "\n".join(out)), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
