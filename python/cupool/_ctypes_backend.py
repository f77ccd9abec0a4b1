# SPDX-License-Identifier: MIT
"""The cupool API through ctypes: the fallback where the C extension cannot be imported
(CUPOOL_PY_FORCE_CTYPES=1 forces it). Same names and behaviour as cupool._cupool, at a higher
cost per call. libcupool is found as CUPOOL_PY_LIBRARY names it, else beside the package in an
installed tree (PREFIX/lib/libcupool.so.0), else by the dynamic loader (libcupool.so.0)."""
import ctypes as _C
import ctypes.util as _util
import os as _os
import sys as _sys

_u64 = _C.c_uint64
_vp = _C.c_void_p


def _load():
    names = []
    env = _os.environ.get("CUPOOL_PY_LIBRARY")
    if env:
        names.append(env)
    here = _os.path.dirname(_os.path.abspath(__file__))
    # PREFIX/lib/pythonX.Y/site-packages/cupool -> PREFIX/lib
    names.append(_os.path.join(here, "..", "..", "..", "libcupool.so.0"))
    names.append("libcupool.so.0")
    errors = []
    for n in names:
        if n != "libcupool.so.0" and not _os.path.exists(n):
            continue
        try:
            return _C.CDLL(n)
        except OSError as e:
            errors.append(str(e))
    found = _util.find_library("cupool")
    if found:
        return _C.CDLL(found)
    raise ImportError("cupool: libcupool.so.0 not found (set CUPOOL_PY_LIBRARY): " + "; ".join(errors))


_lib = _load()


def _proto(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = argtypes
    return f


_c = _C.c_int
_stream_acquire = _proto("cupool_stream_acquire", _c, _C.POINTER(_vp), _C.c_uint, _C.c_int)
_stream_release = _proto("cupool_stream_release", _c, _vp)
_event_acquire = _proto("cupool_event_acquire", _c, _C.POINTER(_vp), _C.c_uint)
_event_release = _proto("cupool_event_release", _c, _vp)
_stream_pool_get = _proto("cupool_stream_pool_get", _c, _C.POINTER(_vp), _vp, _C.c_uint, _C.c_int)
_stream_pool_acquire = _proto("cupool_stream_pool_acquire", _c, _vp, _C.POINTER(_vp))
_stream_pool_release = _proto("cupool_stream_pool_release", _c, _vp, _vp, _C.c_uint)
_event_pool_get = _proto("cupool_event_pool_get", _c, _C.POINTER(_vp), _vp, _C.c_uint)
_event_pool_acquire = _proto("cupool_event_pool_acquire", _c, _vp, _C.POINTER(_vp))
_event_pool_release = _proto("cupool_event_pool_release", _c, _vp, _vp)
_init = _proto("cupool_init", _c)
_trim = _proto("cupool_trim", _c)
_context_release = _proto("cupool_context_release", _c, _vp)
_version = _proto("cupool_version", _C.c_char_p)
_error_string = _proto("cupool_error_string", _C.c_char_p)
_result_name = _proto("cupool_result_name", _C.c_char_p, _c)
_driver_get_proc = _proto("cupool_driver_get_proc", _c, _C.c_char_p, _c, _C.POINTER(_vp))
_CAPTURE_FN = _C.CFUNCTYPE(_c, _vp, _vp)
_capture_launch = _proto("cupool_capture_launch", _c, _u64, _vp, _CAPTURE_FN, _vp, _C.c_uint)
_metadata_bytes = _proto("cupool_metadata_bytes", _C.c_size_t)

_error_class = RuntimeError
_handoff_fn = None

CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_UNKNOWN = 999
_CUPOOL_POOL_CONTEXT_OUTLIVES = 0x80000000
_CUPOOL_RELEASE_NOT_CAPTURING = 0x1


def _setup(error_class, handoff):
    global _error_class, _handoff_fn
    _error_class = error_class
    _handoff_fn = handoff


def _text(b):
    """cupool's bytes as str: a message cut inside a character, or a path that is not UTF-8,
    must not turn an error into a UnicodeDecodeError."""
    return b.decode("utf-8", "replace") if b is not None else ""


def _raise(r, detail=None):
    if detail is None:
        detail = _text(_error_string())
    raise _error_class(r, _text(_result_name(r)), detail)


def _int_in(v, lo, hi, what):
    """v as an int in lo .. hi, or OverflowError/TypeError as the extension raises (ctypes
    would silently keep the low bits)."""
    if not isinstance(v, int):
        raise TypeError("%s must be an int, not %s" % (what, type(v).__name__))
    if not lo <= v <= hi:
        raise OverflowError("%s out of range: %d" % (what, v))
    return v


def _u32(v, what="flags"):
    return _int_in(v, 0, 0xFFFFFFFF, what)


def _i32(v, what="priority"):
    return _int_in(v, -0x80000000, 0x7FFFFFFF, what)


def _handle(o, kind=None):
    """A handle value from an int or a cupool object (of `kind`, when given)."""
    if isinstance(o, _Pooled):
        if kind is not None and o._kind != kind:
            raise TypeError("a %s is needed here, not a cupool %s" % (kind, o._kind))
        return o.handle
    return _int_in(o, 0, (1 << 64) - 1, "a handle")


# ---- pooled objects ----
_TOKEN = object()  # only this module makes owners: an owner made from a value would release it


class _Pooled:
    __slots__ = ("_h", "_pool", "_released")
    _kind = "stream"

    def __init__(self, h, pool=None, _token=None):
        if _token is not _TOKEN:
            raise TypeError("cupool.%s objects come from an acquire" % self._kind.capitalize())
        self._h = h
        self._pool = pool
        self._released = False

    # one owner per handle: a copy, or a pickled and restored owner, would give it back twice
    def __copy__(self):
        raise TypeError("a cupool %s is owned once: it cannot be copied" % self._kind)

    def __deepcopy__(self, memo):
        self.__copy__()

    def __reduce__(self):
        raise TypeError("cannot pickle a cupool %s (it owns a handle of this process)"
                        % self._kind)

    def _refuse(self):
        _raise(CUDA_ERROR_INVALID_HANDLE,
               "%s 0x%x was already released (not released again)" % (self._kind, self._h))

    @property
    def handle(self):
        if self._released:
            self._refuse()
        return self._h

    @property
    def released(self):
        return self._released

    def __int__(self):
        return self.handle

    def release(self, not_capturing=False):
        """Gives the handle back to cupool. A second release raises CupoolError
        (CUDA_ERROR_INVALID_HANDLE) and does not reach cupool."""
        if self._released:
            self._refuse()
        # forgotten whatever cupool answers (as C++ owners do): a refused handle is not this
        # object's to give back later (another release may already have returned it)
        self._released = True
        r = self._release_now(_CUPOOL_RELEASE_NOT_CAPTURING if not_capturing else 0)
        if r:
            _raise(r)

    def __enter__(self):
        if self._released:
            self._refuse()
        return self

    def __exit__(self, *exc):
        if not self._released:
            self._released = True
            r = self._release_now(0)
            if r:
                _raise(r)
        return False

    # At interpreter shutdown ctypes may already be torn down: the handle is left to cupool,
    # which lets the driver take it at process exit.
    def __del__(self, _finalizing=_sys.is_finalizing):
        try:
            if not self._released and not _finalizing():
                self._released = True
                self._release_now(0)
        except Exception:
            pass

    def __repr__(self):
        return "<cupool.%s 0x%x%s%s>" % (self._kind.capitalize(), self._h,
                                         " of a pool" if self._pool else "",
                                         " (released)" if self._released else "")


class Stream(_Pooled):
    """A pooled CUDA stream, owned exclusively until released (ctypes backend)."""
    __slots__ = ()
    _kind = "stream"

    def _release_now(self, rflags):
        if self._pool:
            return _stream_pool_release(self._pool, self._h, rflags)
        return _stream_release(self._h)

    @classmethod
    def acquire(cls, flags=0, priority=0):
        return stream(flags, priority)

    def __cuda_stream__(self):
        return (0, self.handle)

    def as_cupy(self):
        return _handoff_fn("cupy", self.handle, None)

    def as_torch(self, device=None):
        return _handoff_fn("torch", self.handle, device)


class Event(_Pooled):
    """A pooled CUDA event, owned exclusively until released (ctypes backend)."""
    __slots__ = ()
    _kind = "event"

    def _release_now(self, rflags):
        if self._pool:
            return _event_pool_release(self._pool, self._h)
        return _event_release(self._h)

    @classmethod
    def acquire(cls, flags=0):
        return event(flags)


def stream(flags=0, priority=0):
    return Stream(stream_acquire_handle(flags, priority), None, _TOKEN)


def event(flags=0):
    return Event(event_acquire_handle(flags), None, _TOKEN)


def stream_acquire_handle(flags=0, priority=0):
    s = _vp()
    r = _stream_acquire(_C.byref(s), _u32(flags), _i32(priority))
    if r:
        _raise(r)
    return s.value or 0


def stream_release_handle(handle):
    r = _stream_release(_handle(handle, "stream"))
    if r:
        _raise(r)


def event_acquire_handle(flags=0):
    e = _vp()
    r = _event_acquire(_C.byref(e), _u32(flags))
    if r:
        _raise(r)
    return e.value or 0


def event_release_handle(handle):
    r = _event_release(_handle(handle, "event"))
    if r:
        _raise(r)


# ---- explicit pools ----
class StreamPool:
    """StreamPool(ctx=0, flags=0, priority=0, promise=False) (ctypes backend)."""
    __slots__ = ("handle", "ctx", "flags", "priority")

    def __init__(self, ctx=0, flags=0, priority=0, promise=False):
        self.ctx = _handle(ctx or 0, "context")
        self.flags = _u32(flags) | (_CUPOOL_POOL_CONTEXT_OUTLIVES if promise else 0)
        self.priority = _i32(priority)
        p = _vp()
        r = _stream_pool_get(_C.byref(p), self.ctx or None, self.flags, priority)
        if r:
            _raise(r)
        self.handle = p.value

    def acquire(self):
        return Stream(self.acquire_handle(), self.handle, _TOKEN)

    def acquire_handle(self):
        s = _vp()
        r = _stream_pool_acquire(self.handle, _C.byref(s))
        if r:
            _raise(r)
        return s.value or 0

    def release_handle(self, handle, not_capturing=False):
        r = _stream_pool_release(self.handle, _handle(handle, "stream"),
                                 _CUPOOL_RELEASE_NOT_CAPTURING if not_capturing else 0)
        if r:
            _raise(r)

    def __repr__(self):
        return "<cupool.%s ctx=0x%x flags=0x%x%s>" % (
            type(self).__name__, self.ctx, self.flags & ~_CUPOOL_POOL_CONTEXT_OUTLIVES,
            " promise" if self.flags & _CUPOOL_POOL_CONTEXT_OUTLIVES else "")


class EventPool:
    """EventPool(ctx=0, flags=0, promise=False) (ctypes backend)."""
    __slots__ = ("handle", "ctx", "flags")

    def __init__(self, ctx=0, flags=0, promise=False):
        self.ctx = _handle(ctx or 0, "context")
        self.flags = _u32(flags) | (_CUPOOL_POOL_CONTEXT_OUTLIVES if promise else 0)
        p = _vp()
        r = _event_pool_get(_C.byref(p), self.ctx or None, self.flags)
        if r:
            _raise(r)
        self.handle = p.value

    def acquire(self):
        return Event(self.acquire_handle(), self.handle, _TOKEN)

    def acquire_handle(self):
        e = _vp()
        r = _event_pool_acquire(self.handle, _C.byref(e))
        if r:
            _raise(r)
        return e.value or 0

    def release_handle(self, handle):
        r = _event_pool_release(self.handle, _handle(handle, "event"))
        if r:
            _raise(r)

    def __repr__(self):
        return "<cupool.%s ctx=0x%x flags=0x%x%s>" % (
            type(self).__name__, self.ctx, self.flags & ~_CUPOOL_POOL_CONTEXT_OUTLIVES,
            " promise" if self.flags & _CUPOOL_POOL_CONTEXT_OUTLIVES else "")


# ---- statistics: cupool.h's structs, field for field ----
class _ClassStats(_C.Structure):
    _fields_ = [("size", _C.c_size_t), ("kind", _C.c_int), ("context_id", _C.c_ulonglong),
                ("device", _C.c_int), ("flags", _C.c_uint),
                ("priority", _C.c_int), ("context_alive", _C.c_int)] + [
        (n, _u64) for n in ("acquires", "hits", "releases", "creates", "destroys", "dropped",
                            "idle", "in_use", "high_water")]


class _MaintStats(_C.Structure):
    _fields_ = [("size", _C.c_size_t), ("running", _C.c_int)] + [
        (n, _u64) for n in ("wakeups", "background_creates", "background_destroys",
                            "request_creates", "request_destroys", "graph_reaps")]


class _GraphStats(_C.Structure):
    _fields_ = [("size", _C.c_size_t)] + [(n, _u64) for n in (
        "launches", "hits", "misses", "instantiations", "updates", "nodes_updated",
        "update_failures", "evictions", "eager_launches", "entries", "execs", "bytes",
        "claims_lock_free", "claims_locked", "nodes_compared", "uploads",
        "update_topology_changed", "update_node_type_changed", "update_function_changed",
        "update_parameters_changed", "update_not_supported", "update_unsupported_function_change",
        "update_attributes_changed", "update_other", "node_update_refusals", "update_errors")]


_stats_get = _proto("cupool_stats_get", _c, _C.POINTER(_ClassStats), _C.c_size_t,
                    _C.POINTER(_C.c_size_t))
_maint_get = _proto("cupool_maintenance_stats_get", _c, _C.POINTER(_MaintStats))
_graph_get = _proto("cupool_graph_stats_get", _c, _C.POINTER(_GraphStats))
_graph_device_get = _proto("cupool_graph_stats_device_get", _c, _C.c_int, _C.POINTER(_GraphStats))
_STATS_DEVICES = 16  # CUPOOL_STATS_DEVICES
# the fields cupool_graph_stats_device_get keeps per device
_GRAPH_DEVICE_FIELDS = ("launches", "hits", "misses", "instantiations", "updates",
                        "nodes_updated", "evictions", "entries", "execs", "bytes",
                        "claims_lock_free", "claims_locked")


def _graph_devices():
    out = {}
    for d in range(_STATS_DEVICES):
        g = _GraphStats()
        g.size = _C.sizeof(_GraphStats)
        r = _graph_device_get(d, _C.byref(g))
        if r:
            _raise(r)
        if g.launches:
            out[d] = {f: getattr(g, f) for f in _GRAPH_DEVICE_FIELDS}
    return out


def stats():
    n = _C.c_size_t()
    r = _stats_get(None, 0, _C.byref(n))
    arr, cap = None, 0
    while not r and n.value > cap:
        cap = n.value + 8
        arr = (_ClassStats * cap)()
        arr[0].size = _C.sizeof(_ClassStats)  # the array's stride
        r = _stats_get(arr, cap, _C.byref(n))
    m, g = _MaintStats(), _GraphStats()
    m.size, g.size = _C.sizeof(_MaintStats), _C.sizeof(_GraphStats)
    r = r or _maint_get(_C.byref(m)) or _graph_get(_C.byref(g))
    if r:
        _raise(r)
    classes = []
    for i in range(n.value):
        c = arr[i]
        d = {f: getattr(c, f) for f, _ in _ClassStats._fields_ if f != "size"}
        d["kind"] = "event" if c.kind == 1 else "stream"
        d["context_alive"] = bool(c.context_alive)
        classes.append(d)
    maint = {f: getattr(m, f) for f, _ in _MaintStats._fields_ if f != "size"}
    maint["running"] = bool(m.running)
    return {"classes": classes, "maintenance": maint,
            "graph": {f: getattr(g, f) for f, _ in _GraphStats._fields_ if f != "size"},
            "graph_devices": _graph_devices(),
            "metadata_bytes": _metadata_bytes()}


# ---- capture_launch ----
def capture_launch(key, stream, fn, replay=True):
    if not callable(fn):
        raise TypeError("capture_launch: fn must be callable")
    if not 0 <= key < 1 << 64:
        raise OverflowError("capture_launch: key must be in 0 .. 2**64-1")
    raised = []
    calls = [0]

    def trampoline(s, _user):
        calls[0] += 1
        try:
            fn(s or 0)
        except BaseException as e:  # ends the capture; raised again below
            raised.append(e)
            return CUDA_ERROR_UNKNOWN
        return 0

    cb = _CAPTURE_FN(trampoline)
    r = _capture_launch(key, _handle(stream, "stream"), cb, None, 0 if replay else 1)
    if raised:
        raise raised[0]
    if r:
        _raise(r)
    return calls[0] > 0


# ---- the rest ----
def init():
    r = _init()
    if r:
        _raise(r)


def trim():
    r = _trim()
    if r:
        _raise(r)


def context_release(ctx):
    r = _context_release(_handle(ctx, "context"))
    if r:
        _raise(r)


def version():
    return _text(_version())


def error_string():
    return _text(_error_string())


def result_name(result):
    return _text(_result_name(_i32(result, "result")))


def driver_get_proc(symbol, cuda_version):
    p = _vp()
    name = symbol.encode()
    if b"\0" in name:
        raise ValueError("driver_get_proc: embedded null character in the symbol")
    r = _driver_get_proc(name, _i32(cuda_version, "cuda_version"), _C.byref(p))
    if r:
        _raise(r)
    return p.value


_ctx_fns = None
_retained = {}


def ensure_context(device=0):
    global _ctx_fns
    r = _init()
    if r:
        _raise(r)
    if _ctx_fns is None:
        f = _C.CFUNCTYPE
        _ctx_fns = (
            f(_c, _C.POINTER(_vp))(driver_get_proc("cuCtxGetCurrent", 4000)),
            f(_c, _vp)(driver_get_proc("cuCtxSetCurrent", 4000)),
            f(_c, _C.POINTER(_c), _c)(driver_get_proc("cuDeviceGet", 2000)),
            f(_c, _C.POINTER(_vp), _c)(driver_get_proc("cuDevicePrimaryCtxRetain", 7000)),
        )
    get_current, set_current, device_get, retain = _ctx_fns
    ctx = _vp()
    r = get_current(_C.byref(ctx))
    if r:
        _raise(r, "cuCtxGetCurrent failed")
    if ctx.value:
        return ctx.value
    if device not in _retained:
        dev = _c()
        r = device_get(_C.byref(dev), device)
        if r:
            _raise(r, "cuDeviceGet failed")
        r = retain(_C.byref(ctx), dev.value)
        if r:
            _raise(r, "cuDevicePrimaryCtxRetain failed")
        _retained[device] = ctx.value
    r = set_current(_retained[device])
    if r:
        _raise(r, "cuCtxSetCurrent failed")
    return _retained[device]
