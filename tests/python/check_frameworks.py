# SPDX-License-Identifier: MIT
"""cupool's Python objects used by the frameworks a service runs on: CuPy, PyTorch and
cuda.core, on the real driver (run by tests/python/check_frameworks.sh). Each framework found
computes on pooled streams, acquired and released again and again so that handles come back
from the pool, and every result is compared value by value with the host's. Pooled events
order two pooled streams (one waits for the other's work). CuPy work captured through
cupool.capture_launch is replayed from the graph cache without the callable.

Exits 77 (SKIP) when no GPU answers or when none of the three frameworks can drive the GPU
(not installed, or built without CUDA); a framework that can and then fails is a failure.
Prints what ran and what was not there."""
import ctypes
import sys
import time
import warnings

import cupool

ITERS = 64  # acquires of each framework's loop: far more than the pool keeps creating
N = 1 << 16

try:
    cupool.init()
    cupool.ensure_context(0)
except cupool.CupoolError as e:
    print("check_frameworks: no GPU answered (%s): SKIP" % e)
    sys.exit(77)


def driver(name, version, restype, *argtypes):
    return ctypes.CFUNCTYPE(restype, *argtypes)(cupool.driver_get_proc(name, version))


c_int, c_vp, c_u64, c_size = ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
cuEventRecord = driver("cuEventRecord", 2000, c_int, c_vp, c_vp)
cuStreamWaitEvent = driver("cuStreamWaitEvent", 3020, c_int, c_vp, c_vp, ctypes.c_uint)
cuStreamSynchronize = driver("cuStreamSynchronize", 2000, c_int, c_vp)
cuMemcpyDtoH = driver("cuMemcpyDtoH", 3020, c_int, c_vp, c_u64, c_size)
cuMemsetD32Async = driver("cuMemsetD32Async", 3020, c_int, c_u64, ctypes.c_uint, c_size, c_vp)


def ok(r, what):
    if r != 0:
        raise AssertionError("%s returned %d" % (what, r))


def stream_stats():
    """(acquires, creates) summed over the stream classes."""
    cs = [c for c in cupool.stats()["classes"] if c["kind"] == "stream"]
    return sum(c["acquires"] for c in cs), sum(c["creates"] for c in cs)


def check_pooled(name, before, after):
    acquires, creates = after[0] - before[0], after[1] - before[1]
    if acquires < ITERS:
        raise AssertionError("%s: %d acquires counted for %d" % (name, acquires, ITERS))
    # two streams in use at a time, a few more for the pool's reserve: never one per acquire
    if creates > ITERS // 4:
        raise AssertionError("%s: %d streams created for %d acquires" % (name, creates, acquires))
    return acquires, creates


def run_cupy():
    import cupy

    cupy.cuda.Device(0).use()
    x = cupy.arange(N, dtype=cupy.float32)
    y = cupy.empty_like(x)
    z = cupy.empty_like(x)
    cupy.cuda.Device(0).synchronize()
    xh = cupy.asnumpy(x)
    before = stream_stats()
    for i in range(ITERS):
        # the producer writes y on one pooled stream, the consumer reads it on another after
        # waiting for a pooled event recorded behind the producer's work
        with cupool.stream(cupool.STREAM_NON_BLOCKING) as a, \
                cupool.stream(cupool.STREAM_NON_BLOCKING) as b, \
                cupool.event(cupool.EVENT_DISABLE_TIMING) as e:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                wa = a.as_cupy()
            if seen:  # a deprecated way of wrapping (CuPy 14: ExternalStream)
                raise AssertionError("cupy: as_cupy() warned: %s" % seen[0].message)
            if wa.ptr != a.handle:
                raise AssertionError("cupy wrapped 0x%x as 0x%x" % (a.handle, wa.ptr))
            with wa:
                cupy.multiply(x, float(i + 1), out=y)
            ok(cuEventRecord(e.handle, a.handle), "cuEventRecord")
            ok(cuStreamWaitEvent(b.handle, e.handle, 0), "cuStreamWaitEvent")
            with b.as_cupy():
                cupy.add(y, 1.0, out=z)
            ok(cuStreamSynchronize(b.handle), "cuStreamSynchronize")
            got = cupy.asnumpy(z)
        want = xh * (i + 1) + 1
        if not (got == want).all():
            bad = int((got != want).argmax())
            raise AssertionError("cupy: iteration %d, element %d: %r, not %r"
                                 % (i, bad, got[bad], want[bad]))
    acquires, creates = check_pooled("cupy", before, stream_stats())

    # captured CuPy work, cached by key: the first call captures, later ones replay the graph
    key = 0xC0FFEE
    calls = []
    with cupool.stream(cupool.STREAM_NON_BLOCKING) as s:
        cs = s.as_cupy()

        def work(handle):
            calls.append(handle)
            with cs:
                cupy.multiply(x, 3.0, out=y)

        for i in range(8):
            with cs:
                y.fill(0)
            called = cupool.capture_launch(key, s, work)
            if called != (i == 0):
                raise AssertionError("cupy capture: launch %d called the callable: %r" % (i, called))
            ok(cuStreamSynchronize(s.handle), "cuStreamSynchronize")
            got = cupy.asnumpy(y)
            if not (got == xh * 3).all():
                raise AssertionError("cupy capture: launch %d computed the wrong values" % i)
    print("check_frameworks: cupy %s: %d pooled acquires, %d creates; 8 launches of captured "
          "work, 1 capture, values checked" % (cupy.__version__, acquires, creates))


def run_torch():
    import torch

    dev = torch.device("cuda:0")
    x = torch.arange(N, device=dev, dtype=torch.float32)
    torch.cuda.synchronize()
    xh = x.cpu()
    before = stream_stats()
    for i in range(ITERS):
        with cupool.stream(cupool.STREAM_NON_BLOCKING) as a, \
                cupool.stream(cupool.STREAM_NON_BLOCKING) as b, \
                cupool.event(cupool.EVENT_DISABLE_TIMING) as e:
            ta, tb = a.as_torch(0), b.as_torch(0)
            with torch.cuda.stream(ta):
                y = x * (i + 1)
            ok(cuEventRecord(e.handle, a.handle), "cuEventRecord")
            ok(cuStreamWaitEvent(b.handle, e.handle, 0), "cuStreamWaitEvent")
            with torch.cuda.stream(tb):
                y.record_stream(tb)
                z = y + 1
            tb.synchronize()
            got = z.cpu()
            del y, z  # freed while this thread owns both streams (the allocator records on them)
        want = xh * (i + 1) + 1
        if not torch.equal(got, want):
            raise AssertionError("torch: iteration %d computed the wrong values" % i)
    acquires, creates = check_pooled("torch", before, stream_stats())
    print("check_frameworks: torch %s: %d pooled acquires, %d creates, values checked"
          % (torch.__version__, acquires, creates))


KERNEL = r"""
extern "C" __global__ void scale_add(unsigned int *p, unsigned int k, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = p[i] * k + i;
}
"""


def run_cuda_core():
    try:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    except ImportError:
        from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
    import cuda.core
    import numpy as np

    dev = Device(0)
    dev.set_current()
    arch = "sm_%d%d" % dev.compute_capability
    prog = Program(KERNEL, code_type="c++", options=ProgramOptions(arch=arch))
    kernel = prog.compile("cubin").get_kernel("scale_add")
    before = stream_stats()
    cfg = LaunchConfig(grid=(N + 255) // 256, block=256)
    host = np.empty(N, dtype=np.uint32)
    for i in range(ITERS):
        with cupool.stream(cupool.STREAM_NON_BLOCKING) as s:
            cs = dev.create_stream(s)  # the __cuda_stream__ protocol: cupool's handle, wrapped
            if int(cs.handle) != s.handle:
                raise AssertionError("cuda.core wrapped stream 0x%x as 0x%x"
                                     % (s.handle, int(cs.handle)))
            buf = dev.allocate(N * 4, stream=cs)
            ok(cuMemsetD32Async(int(buf.handle), 1, N, int(cs.handle)), "cuMemsetD32Async")
            launch(cs, cfg, kernel, buf, np.uint32(i + 2), np.uint32(N))
            cs.sync()
            ok(cuMemcpyDtoH(host.ctypes.data, int(buf.handle), N * 4), "cuMemcpyDtoH")
            buf.close(cs)
            cs.sync()
        want = (i + 2) + np.arange(N, dtype=np.uint32)
        if not (host == want).all():
            bad = int((host != want).argmax())
            raise AssertionError("cuda.core: iteration %d, element %d: %d, not %d"
                                 % (i, bad, host[bad], want[bad]))
    acquires, creates = check_pooled("cuda.core", before, stream_stats())
    print("check_frameworks: cuda.core %s: %d pooled acquires, %d creates, values checked"
          % (getattr(cuda.core, "__version__", "?"), acquires, creates))


def per_call_ns(fn, n=20000):
    """Best of three runs of n calls of fn, in ns per call (printed, never asserted)."""
    best = None
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        dt = (time.perf_counter_ns() - t0) / n
        best = dt if best is None or dt < best else best
    return best


def costs(ran):
    """What a stream costs each framework's way and cupool's, in one run: the framework's own
    stream (made and dropped), cupool's pooled pair, and the pair with the hand-off to the
    framework (a cached wrapper for CuPy and PyTorch; cuda.core wraps afresh each time)."""
    nb = cupool.STREAM_NON_BLOCKING
    rows = [("cupool pair (stream, release)", lambda: cupool.stream(nb).release())]

    def pooled(wrap):
        s = cupool.stream(nb)
        wrap(s)
        s.release()

    if "cupy" in ran:
        import cupy
        rows.append(("cupy.cuda.Stream(non_blocking=True), dropped",
                     lambda: cupy.cuda.Stream(non_blocking=True)))
        rows.append(("cupool pair + as_cupy()", lambda: pooled(lambda s: s.as_cupy())))
    if "torch" in ran:
        import torch
        rows.append(("torch.cuda.Stream() (its shared round robin)", lambda: torch.cuda.Stream()))
        rows.append(("cupool pair + as_torch(0)", lambda: pooled(lambda s: s.as_torch(0))))
    if "cuda.core" in ran:
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        dev = Device(0)
        rows.append(("cuda.core Device.create_stream() + close()",
                     lambda: dev.create_stream().close()))
        rows.append(("cupool pair + Device.create_stream(s)",
                     lambda: pooled(lambda s: dev.create_stream(s))))
    print("check_frameworks: ns per stream, best of 3 runs of 20000 (backend: %s)"
          % cupool.BACKEND)
    for name, fn in rows:
        print("check_frameworks:   %-48s %9.0f" % (name, per_call_ns(fn)))


def usable(name):
    """None if the framework can drive the GPU here, else why not (an import error, or a
    build without CUDA: a CPU-only PyTorch, a CuPy that finds no device)."""
    try:
        if name == "torch":
            import torch
            return None if torch.cuda.is_available() else "built without CUDA, or sees no GPU"
        if name == "cupy":
            import cupy
            cupy.cuda.runtime.getDeviceCount()
            return None
        __import__(name)
        return None
    except Exception as e:  # ImportError, or the framework's own CUDA error
        return "%s: %s" % (type(e).__name__, e)


ran, missing = [], []
for name, module, fn in (("cupy", "cupy", run_cupy), ("torch", "torch", run_torch),
                         ("cuda.core", "cuda.core", run_cuda_core)):
    why = usable(module)
    if why:
        missing.append("%s (%s)" % (name, why))
        continue
    fn()
    ran.append(name)
if missing:
    print("check_frameworks: not usable here: %s" % "; ".join(missing))
if not ran:
    print("check_frameworks: none of CuPy, PyTorch or cuda.core can drive the GPU here: SKIP")
    sys.exit(77)
costs(ran)
print("check_frameworks: passed with %s (backend: %s)" % (", ".join(ran), cupool.BACKEND))
