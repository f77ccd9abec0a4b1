# SPDX-License-Identifier: MIT
"""Pooled CUDA streams and events from Python, on libcupool.

    import cupool
    cupool.ensure_context()              # only if nothing (CuPy, torch, ...) made one current
    with cupool.stream() as s:           # a pooled stream, exclusively yours in the block
        launch(s.handle)                 # an int: the CUstream value
    # released at the end of the block (or by s.release(), or when s is collected)

The calls go through a small C extension (cupool._cupool). Where it cannot be imported, or
with CUPOOL_PY_FORCE_CTYPES=1 in the environment, the same API is served through ctypes
(cupool._ctypes_backend: slower per call, same behaviour); BACKEND says which one runs.
See docs/python.md.
"""
import importlib as _importlib
import os as _os
import sys as _sys

__all__ = [
    "BACKEND", "CupoolError", "Stream", "Event", "StreamPool", "EventPool", "stream", "event",
    "stream_acquire_handle", "stream_release_handle", "event_acquire_handle",
    "event_release_handle", "stats", "capture_launch", "ensure_context", "init", "trim",
    "context_release", "version", "error_string", "result_name", "driver_get_proc",
    "clear_wrapper_cache",
    "STREAM_DEFAULT", "STREAM_NON_BLOCKING", "EVENT_DEFAULT", "EVENT_BLOCKING_SYNC",
    "EVENT_DISABLE_TIMING", "EVENT_INTERPROCESS", "POOL_CONTEXT_OUTLIVES",
    "RELEASE_NOT_CAPTURING",
]

# Flags, as in cuda.h and cupool.h.
STREAM_DEFAULT = 0x0
STREAM_NON_BLOCKING = 0x1
EVENT_DEFAULT = 0x0
EVENT_BLOCKING_SYNC = 0x1
EVENT_DISABLE_TIMING = 0x2
EVENT_INTERPROCESS = 0x4
POOL_CONTEXT_OUTLIVES = 0x80000000
RELEASE_NOT_CAPTURING = 0x1


class CupoolError(Exception):
    """A cupool call failed. .result is the CUresult (int), .name its name
    ("CUDA_ERROR_INVALID_HANDLE"), .detail what cupool_error_string() said (or, for a
    refusal made in Python, what was refused)."""

    def __init__(self, result, name=None, detail=None):
        self.result = int(result)
        self.name = name if name is not None else result_name(self.result)
        self.detail = detail if detail is not None else ""
        super().__init__(self.result, self.name, self.detail)

    def __str__(self):
        return "%s (%d): %s" % (self.name, self.result, self.detail)


# ---- framework hand-off: wrappers cached per handle value ----
# Wrapping a stream costs ~1.2 us in CuPy (cupy.cuda.ExternalStream) and ~7.9 us in PyTorch
# (torch.cuda.ExternalStream) on an H200. A pooled stream's handle value comes back on later
# acquires, so the wrapper made for it the first time is kept and handed out again: the key is
# the framework, the handle value and the device. A wrapper only names the stream value; it is
# right for every later acquire that returns that value on that device. cupool destroys idle
# streams (decay, caps, trim) and the driver may then give the value to a new stream: still
# right on the same device, unless that stream belongs to another context of it.
# trim() and context_release() empty the cache; so does clear_wrapper_cache().
_wrappers = {}
_WRAPPERS_MAX = 4096


def clear_wrapper_cache():
    """Forget every cached CuPy / PyTorch stream wrapper."""
    _wrappers.clear()


def _remember(key, wrapper):
    if len(_wrappers) >= _WRAPPERS_MAX:
        _wrappers.clear()
    _wrappers[key] = wrapper
    return wrapper


class _StreamValue:
    """A stream value alone, in the CUDA stream protocol (what CuPy's Stream.from_external
    reads): unlike a Stream, it stays valid after the release, as the cached wrapper does."""

    __slots__ = ("_handle",)

    def __init__(self, handle):
        self._handle = handle

    def __cuda_stream__(self):
        return (0, self._handle)


def _framework(name):
    """The framework's module: from sys.modules once imported (an import statement costs
    ~350 ns even then, more than the wrapper lookup it serves)."""
    m = _sys.modules.get(name)
    return m if m is not None else _importlib.import_module(name)


def _handoff(framework, handle, device):
    if framework == "cupy":
        cupy = _framework("cupy")
        dev = cupy.cuda.runtime.getDevice() if device is None else int(device)
        key = ("cupy", handle, dev)
        w = _wrappers.get(key)
        if w is None:
            from_external = getattr(getattr(cupy.cuda, "Stream", None), "from_external", None)
            if from_external is not None:  # CuPy 14 on: ExternalStream is deprecated
                with cupy.cuda.Device(dev):
                    w = from_external(_StreamValue(handle))
            else:
                try:
                    w = cupy.cuda.ExternalStream(handle, dev)
                except TypeError:  # CuPy before device_id
                    w = cupy.cuda.ExternalStream(handle)
            _remember(key, w)
        return w
    if framework == "torch":
        torch = _framework("torch")
        if device is None:
            index = torch.cuda.current_device()
        elif isinstance(device, int):
            index = device
        else:
            d = torch.device(device)
            index = d.index if d.index is not None else torch.cuda.current_device()
        key = ("torch", handle, index)
        w = _wrappers.get(key)
        if w is None:
            w = _remember(key, torch.cuda.ExternalStream(handle, device=index))
        return w
    raise ValueError("unknown framework %r" % (framework,))


# ---- the backend: the C extension, else ctypes ----
_EXTENSION_ERROR = None
if _os.environ.get("CUPOOL_PY_FORCE_CTYPES", "") not in ("", "0"):
    from . import _ctypes_backend as _b

    BACKEND = "ctypes"
else:
    try:
        from . import _cupool as _b

        BACKEND = "extension"
    except ImportError as e:  # not built, or built for another Python
        _EXTENSION_ERROR = e
        from . import _ctypes_backend as _b

        BACKEND = "ctypes"
_b._setup(CupoolError, _handoff)

Stream = _b.Stream
Event = _b.Event
StreamPool = _b.StreamPool
EventPool = _b.EventPool
stream = _b.stream
event = _b.event
stream_acquire_handle = _b.stream_acquire_handle
stream_release_handle = _b.stream_release_handle
event_acquire_handle = _b.event_acquire_handle
event_release_handle = _b.event_release_handle
stats = _b.stats
init = _b.init
version = _b.version
error_string = _b.error_string
result_name = _b.result_name
driver_get_proc = _b.driver_get_proc
ensure_context = _b.ensure_context


def capture_launch(key, stream, fn, replay=True):
    """Launches work cached as a CUDA graph under key (an int, 0 .. 2**64-1) in the current
    context: on a miss, fn(stream_handle) runs with stream in capture mode and the captured
    graph is instantiated, cached and launched on stream (a Stream or an int). On a hit,
    replay=True launches the cached graph without calling fn; replay=False captures fn again
    and updates the cached graph (cupool_capture_launch with CUPOOL_CAPTURE_UPDATE).
    An exception raised by fn ends the capture (nothing is launched or cached) and is raised
    again here. Returns True when fn was called."""
    return _b.capture_launch(key, stream, fn, replay)


def trim():
    """cupool_trim(): destroys idle handles; also empties the wrapper cache."""
    _wrappers.clear()
    _b.trim()


def context_release(ctx):
    """cupool_context_release(ctx) (an int): before destroying or resetting a context."""
    _wrappers.clear()
    _b.context_release(ctx)


__version__ = "0.1.0"
