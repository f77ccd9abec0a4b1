/* SPDX-License-Identifier: MIT */
/*
 * cupool._cupool: the CPython extension behind the cupool package (CPython's C API only).
 *
 * The hot calls (an acquire and its release) are METH_FASTCALL / METH_NOARGS C functions that
 * make one cupool call each. Pooled streams and events are small objects of C types holding
 * the handle value; they hold no Python references (no GC tracking), and a short free list
 * spares the allocator on the acquire/release cycle. The raw calls (stream_acquire_handle and
 * friends) return and take plain ints and create no object but the int.
 *
 * The package's __init__.py passes in, once, the exception class to raise (CupoolError) and
 * the function that wraps a handle for CuPy or PyTorch (it keeps the wrapper cache).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cupool.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030900F0
#error "cupool needs Python 3.9 or newer"
#endif

#if PY_VERSION_HEX >= 0x030D0000
#define CP_FINALIZING() Py_IsFinalizing()
#else
#define CP_FINALIZING() _Py_IsFinalizing()
#endif

static PyObject *error_class;   /* cupool.CupoolError, set by _setup() */
static PyObject *handoff_fn;    /* cupool._handoff(framework, handle, device) */

/* ---- errors ---- */

/* Raises CupoolError(result, name, detail); detail NULL: cupool_error_string(). */
/* cupool's bytes as str: a message cut inside a character, or a path that is not UTF-8, must
 * not turn an error into a UnicodeDecodeError. */
static PyObject *text(const char *s)
{
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *raise_result(CUresult r, const char *detail)
{
    const char *name = cupool_result_name(r);
    if (!detail)
        detail = cupool_error_string();
    PyObject *cls = error_class ? error_class : PyExc_RuntimeError;
    PyObject *d = text(detail);
    if (!d)
        return NULL;
    PyObject *exc = error_class ? PyObject_CallFunction(cls, "isO", (int)r, name, d)
                                : PyUnicode_FromFormat("%s (%d): %U", name, (int)r, d);
    Py_DECREF(d);
    if (!exc)
        return NULL;
    if (error_class)
        PyErr_SetObject(cls, exc);
    else
        PyErr_SetObject(PyExc_RuntimeError, exc);
    Py_DECREF(exc);
    return NULL;
}

/* What handle_arg accepts besides an int: a cupool object of this kind, or none at all. */
enum { ARG_STREAM, ARG_EVENT, ARG_CONTEXT };
static int handle_arg(PyObject *o, int want, uintptr_t *out);

static inline PyObject *from_handle(uintptr_t h)
{
    return PyLong_FromUnsignedLongLong((unsigned long long)h);
}

static int uint_arg(PyObject *o, unsigned int *out, const char *what)
{
    unsigned long v = PyLong_AsUnsignedLong(o);
    if (v == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "%s must be a non-negative int", what);
        return -1;
    }
    if (v > 0xFFFFFFFFul) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in 32 bits", what);
        return -1;
    }
    *out = (unsigned int)v;
    return 0;
}

static int int_arg(PyObject *o, int *out, const char *what)
{
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in an int", what);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Positional and keyword arguments of a vectorcall into out[0 .. n-1] (NULL: not given). */
static int fast_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, Py_ssize_t n, PyObject **out)
{
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd arguments (%zd given)", fname, n,
                     nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (!kwnames)
        return 0;
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i = 0;
        while (i < n && PyUnicode_CompareWithASCIIString(key, names[i]) != 0)
            i++;
        if (i == n) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         key);
            return -1;
        }
        if (out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    return 0;
}

/* ---- pooled objects: Stream and Event ---- */

enum { KIND_STREAM = 0, KIND_EVENT = 1 };

typedef struct {
    PyObject_HEAD
    uintptr_t handle;
    void *pool;           /* the explicit pool it came from; NULL: the current-context API */
    unsigned char kind;
    unsigned char released;
} PooledObject;

static PyTypeObject StreamType;
static PyTypeObject EventType;

/* A few freed objects kept for the next acquire (the GIL guards the list). */
#define FREELIST_MAX 64
static PooledObject *freelist[FREELIST_MAX];
static int freelist_n;

static PyObject *pooled_new(PyTypeObject *type, uintptr_t handle, void *pool)
{
    PooledObject *o;
    if (freelist_n > 0) {
        o = freelist[--freelist_n];
        (void)PyObject_INIT(o, type);
    } else {
        o = PyObject_New(PooledObject, type);
        if (!o)
            return NULL;
    }
    o->handle = handle;
    o->pool = pool;
    o->kind = type == &EventType ? KIND_EVENT : KIND_STREAM;
    o->released = 0;
    return (PyObject *)o;
}

static CUresult pooled_release(PooledObject *o, unsigned int release_flags)
{
    if (o->kind == KIND_STREAM)
        return o->pool ? cupool_stream_pool_release(o->pool, (CUstream)o->handle, release_flags)
                       : cupool_stream_release((CUstream)o->handle);
    return o->pool ? cupool_event_pool_release(o->pool, (CUevent)o->handle)
                   : cupool_event_release((CUevent)o->handle);
}

/* Finalisation releases a handle still held. cupool's release makes no Python call and is
 * itself safe at process exit, so it runs at interpreter shutdown too; its result is not
 * reported (a forked child's CUDA_ERROR_NOT_PERMITTED, for instance). */
static void pooled_dealloc(PyObject *self)
{
    PooledObject *o = (PooledObject *)self;
    if (!o->released) {
        o->released = 1;
        (void)pooled_release(o, 0);
    }
    if (freelist_n < FREELIST_MAX && !CP_FINALIZING()) {
        freelist[freelist_n++] = o;
        return;
    }
    PyObject_Free(self);
}

static PyObject *already_released(PooledObject *o)
{
    char msg[96];
    snprintf(msg, sizeof msg, "%s 0x%llx was already released (not released again)",
             o->kind == KIND_STREAM ? "stream" : "event", (unsigned long long)o->handle);
    return raise_result(CUDA_ERROR_INVALID_HANDLE, msg);
}

static PyObject *pooled_release_meth(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    PooledObject *o = (PooledObject *)self;
    unsigned int rflags = 0;
    if (nargs || kwnames) {
        static const char *const names[] = {"not_capturing"};
        PyObject *nc;
        if (fast_args("release", args, nargs, kwnames, names, 1, &nc) < 0)
            return NULL;
        if (nc) {
            int t = PyObject_IsTrue(nc);
            if (t < 0)
                return NULL;
            if (t && o->kind == KIND_STREAM && o->pool)
                rflags = CUPOOL_RELEASE_NOT_CAPTURING;
        }
    }
    if (o->released)
        return already_released(o);
    /* forgotten whatever cupool answers (as C++ owners do): a refused handle is not this
     * object's to give back later (another release may already have returned it) */
    o->released = 1;
    CUresult r = pooled_release(o, rflags);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

static PyObject *pooled_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    PooledObject *o = (PooledObject *)self;
    if (o->released)
        return already_released(o);
    Py_INCREF(self);
    return self;
}

/* Leaving a with block releases the handle unless the block released it already. */
static PyObject *pooled_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    PooledObject *o = (PooledObject *)self;
    if (!o->released) {
        o->released = 1;
        CUresult r = pooled_release(o, 0);
        if (r != CUDA_SUCCESS)
            return raise_result(r, NULL);
    }
    Py_RETURN_FALSE;
}

static PyObject *pooled_get_handle(PyObject *self, void *unused)
{
    (void)unused;
    PooledObject *o = (PooledObject *)self;
    if (o->released)
        return already_released(o);
    return from_handle(o->handle);
}

static PyObject *pooled_get_released(PyObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(((PooledObject *)self)->released);
}

static PyObject *pooled_int(PyObject *self)
{
    return pooled_get_handle(self, NULL);
}

static PyObject *pooled_repr(PyObject *self)
{
    PooledObject *o = (PooledObject *)self;
    char text[96]; /* PyUnicode_FromFormat has no %llx */
    snprintf(text, sizeof text, "<cupool.%s 0x%llx%s%s>",
             o->kind == KIND_STREAM ? "Stream" : "Event", (unsigned long long)o->handle,
             o->pool ? " of a pool" : "", o->released ? " (released)" : "");
    return PyUnicode_FromString(text);
}

static PyObject *stream_cuda_stream(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *h = pooled_get_handle(self, NULL);
    if (!h)
        return NULL;
    PyObject *t = PyTuple_New(2);
    if (!t) {
        Py_DECREF(h);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, PyLong_FromLong(0));
    PyTuple_SET_ITEM(t, 1, h);
    return t;
}

static PyObject *handoff(PyObject *self, const char *framework, PyObject *device)
{
    if (!handoff_fn) {
        PyErr_SetString(PyExc_RuntimeError, "cupool._cupool was not set up by the cupool package");
        return NULL;
    }
    PyObject *h = pooled_get_handle(self, NULL);
    if (!h)
        return NULL;
    /* the framework's name, made once (the module keeps it): no string built per call */
    static PyObject *names[2];
    int which = framework[0] == 't';
    if (!names[which] && !(names[which] = PyUnicode_InternFromString(framework))) {
        Py_DECREF(h);
        return NULL;
    }
    PyObject *argv[3] = {names[which], h, device ? device : Py_None};
    PyObject *r = PyObject_Vectorcall(handoff_fn, argv, 3, NULL);
    Py_DECREF(h);
    return r;
}

static PyObject *stream_as_cupy(PyObject *self, PyObject *unused)
{
    (void)unused;
    return handoff(self, "cupy", NULL);
}

static PyObject *stream_as_torch(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = {"device"};
    PyObject *device;
    if (fast_args("as_torch", args, nargs, kwnames, names, 1, &device) < 0)
        return NULL;
    return handoff(self, "torch", device);
}

static PyObject *stream_acquire_class(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames);
static PyObject *event_acquire_class(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames);

#define POOLED_METHODS \
    {"release", (PyCFunction)(void (*)(void))pooled_release_meth, METH_FASTCALL | METH_KEYWORDS, \
     "release(not_capturing=False): give the handle back to cupool. A second release raises\n" \
     "CupoolError (CUDA_ERROR_INVALID_HANDLE) and does not reach cupool."}, \
    {"__enter__", pooled_enter, METH_NOARGS, NULL}, \
    {"__exit__", (PyCFunction)(void (*)(void))pooled_exit, METH_FASTCALL, \
     "Releases the handle unless it was released already."}

static PyMethodDef stream_methods[] = {
    POOLED_METHODS,
    {"__cuda_stream__", stream_cuda_stream, METH_NOARGS,
     "The cuda.core stream protocol: (0, handle)."},
    {"as_cupy", stream_as_cupy, METH_NOARGS,
     "cupy.cuda.ExternalStream of this stream (imports CuPy now; cached per handle value)."},
    {"as_torch", (PyCFunction)(void (*)(void))stream_as_torch, METH_FASTCALL | METH_KEYWORDS,
     "as_torch(device=None): torch.cuda.ExternalStream of this stream (imports torch now;\n"
     "cached per handle value and device)."},
    {"acquire", (PyCFunction)(void (*)(void))stream_acquire_class,
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     "Stream.acquire(flags=0, priority=0): a pooled stream of the current context."},
    {NULL, NULL, 0, NULL}};

static PyMethodDef event_methods[] = {
    POOLED_METHODS,
    {"acquire", (PyCFunction)(void (*)(void))event_acquire_class,
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     "Event.acquire(flags=0): a pooled event of the current context."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef pooled_getset[] = {
    {"handle", pooled_get_handle, NULL,
     "The CUstream / CUevent value as an int (CupoolError once released).", NULL},
    {"released", pooled_get_released, NULL, "True once the handle was given back.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyNumberMethods pooled_number = {.nb_int = pooled_int};

static PyTypeObject StreamType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupool.Stream",
    .tp_basicsize = sizeof(PooledObject),
    .tp_dealloc = pooled_dealloc,
    .tp_repr = pooled_repr,
    .tp_as_number = &pooled_number,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pooled CUDA stream, owned exclusively until released (release(), the end of\n"
              "a with block, or finalisation). Made by cupool.stream(), Stream.acquire() or\n"
              "StreamPool.acquire().",
    .tp_methods = stream_methods,
    .tp_getset = pooled_getset,
};

static PyTypeObject EventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupool.Event",
    .tp_basicsize = sizeof(PooledObject),
    .tp_dealloc = pooled_dealloc,
    .tp_repr = pooled_repr,
    .tp_as_number = &pooled_number,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pooled CUDA event, owned exclusively until released. Made by cupool.event(),\n"
              "Event.acquire() or EventPool.acquire().",
    .tp_methods = event_methods,
    .tp_getset = pooled_getset,
};

/* Accepts an int, or a cupool.Stream / cupool.Event (its handle) where that kind is wanted. */
static int handle_arg(PyObject *o, int want, uintptr_t *out)
{
    if (Py_TYPE(o) == &StreamType || Py_TYPE(o) == &EventType) {
        PooledObject *p = (PooledObject *)o;
        int is_stream = Py_TYPE(o) == &StreamType;
        if (want == ARG_CONTEXT || (want == ARG_STREAM) != is_stream) {
            PyErr_Format(PyExc_TypeError, "a %s is needed here, not a cupool %s",
                         want == ARG_CONTEXT ? "context" : want == ARG_STREAM ? "stream" : "event",
                         is_stream ? "stream" : "event");
            return -1;
        }
        if (p->released) {
            already_released(p);
            return -1;
        }
        *out = p->handle;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "a handle must be an int or a cupool object, not %.80s",
                         Py_TYPE(o)->tp_name);
        }
        return -1;
    }
    *out = (uintptr_t)v;
    return 0;
}

/* ---- the current-context API ---- */

static int stream_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames, unsigned int *flags, int *priority)
{
    *flags = 0;
    *priority = 0;
    if (nargs == 0 && !kwnames)
        return 0;
    static const char *const names[] = {"flags", "priority"};
    PyObject *a[2];
    if (fast_args(fname, args, nargs, kwnames, names, 2, a) < 0)
        return -1;
    if (a[0] && uint_arg(a[0], flags, "flags") < 0)
        return -1;
    if (a[1] && int_arg(a[1], priority, "priority") < 0)
        return -1;
    return 0;
}

static int event_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, unsigned int *flags)
{
    *flags = 0;
    if (nargs == 0 && !kwnames)
        return 0;
    static const char *const names[] = {"flags"};
    PyObject *a;
    if (fast_args(fname, args, nargs, kwnames, names, 1, &a) < 0)
        return -1;
    return a ? uint_arg(a, flags, "flags") : 0;
}

static PyObject *m_stream(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)m;
    unsigned int flags;
    int priority;
    if (stream_args("stream", args, nargs, kwnames, &flags, &priority) < 0)
        return NULL;
    CUstream s;
    CUresult r = cupool_stream_acquire(&s, flags, priority);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = pooled_new(&StreamType, (uintptr_t)s, NULL);
    if (!o)
        cupool_stream_release(s);
    return o;
}

static PyObject *stream_acquire_class(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    (void)cls;
    return m_stream(NULL, args, nargs, kwnames);
}

static PyObject *m_event(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)m;
    unsigned int flags;
    if (event_args("event", args, nargs, kwnames, &flags) < 0)
        return NULL;
    CUevent e;
    CUresult r = cupool_event_acquire(&e, flags);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = pooled_new(&EventType, (uintptr_t)e, NULL);
    if (!o)
        cupool_event_release(e);
    return o;
}

static PyObject *event_acquire_class(PyObject *cls, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    (void)cls;
    return m_event(NULL, args, nargs, kwnames);
}

/* Raw handles: an int in, an int out. */
static PyObject *m_stream_acquire_handle(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames)
{
    (void)m;
    unsigned int flags;
    int priority;
    if (stream_args("stream_acquire_handle", args, nargs, kwnames, &flags, &priority) < 0)
        return NULL;
    CUstream s;
    CUresult r = cupool_stream_acquire(&s, flags, priority);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = from_handle((uintptr_t)s);
    if (!o)
        cupool_stream_release(s);
    return o;
}

static PyObject *m_stream_release_handle(PyObject *m, PyObject *arg)
{
    (void)m;
    uintptr_t h;
    if (handle_arg(arg, ARG_STREAM, &h) < 0)
        return NULL;
    CUresult r = cupool_stream_release((CUstream)h);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

static PyObject *m_event_acquire_handle(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames)
{
    (void)m;
    unsigned int flags;
    if (event_args("event_acquire_handle", args, nargs, kwnames, &flags) < 0)
        return NULL;
    CUevent e;
    CUresult r = cupool_event_acquire(&e, flags);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = from_handle((uintptr_t)e);
    if (!o)
        cupool_event_release(e);
    return o;
}

static PyObject *m_event_release_handle(PyObject *m, PyObject *arg)
{
    (void)m;
    uintptr_t h;
    if (handle_arg(arg, ARG_EVENT, &h) < 0)
        return NULL;
    CUresult r = cupool_event_release((CUevent)h);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

/* ---- explicit pools ---- */

typedef struct {
    PyObject_HEAD
    void *pool;
    uintptr_t ctx;
    unsigned int flags; /* as given, CUPOOL_POOL_CONTEXT_OUTLIVES included */
    int priority;
    unsigned char kind;
} PoolObject;

static PyTypeObject StreamPoolType;
static PyTypeObject EventPoolType;

static int pool_init_common(PoolObject *p, int kind, PyObject *ctx, PyObject *flags,
                            PyObject *priority, PyObject *promise)
{
    p->kind = (unsigned char)kind;
    p->ctx = 0;
    p->flags = 0;
    p->priority = 0;
    if (ctx && ctx != Py_None && handle_arg(ctx, ARG_CONTEXT, &p->ctx) < 0)
        return -1;
    if (flags && uint_arg(flags, &p->flags, "flags") < 0)
        return -1;
    if (priority && int_arg(priority, &p->priority, "priority") < 0)
        return -1;
    if (promise) {
        int t = PyObject_IsTrue(promise);
        if (t < 0)
            return -1;
        if (t)
            p->flags |= CUPOOL_POOL_CONTEXT_OUTLIVES;
    }
    CUresult r;
    if (kind == KIND_STREAM) {
        cupool_stream_pool_t sp;
        r = cupool_stream_pool_get(&sp, (CUcontext)p->ctx, p->flags, p->priority);
        p->pool = sp;
    } else {
        cupool_event_pool_t ep;
        r = cupool_event_pool_get(&ep, (CUcontext)p->ctx, p->flags);
        p->pool = ep;
    }
    if (r != CUDA_SUCCESS) {
        raise_result(r, NULL);
        return -1;
    }
    return 0;
}

static int stream_pool_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"ctx", "flags", "priority", "promise", NULL};
    PyObject *ctx = NULL, *flags = NULL, *priority = NULL, *promise = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOO:StreamPool", names, &ctx, &flags,
                                     &priority, &promise))
        return -1;
    return pool_init_common((PoolObject *)self, KIND_STREAM, ctx, flags, priority, promise);
}

static int event_pool_init(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"ctx", "flags", "promise", NULL};
    PyObject *ctx = NULL, *flags = NULL, *promise = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOO:EventPool", names, &ctx, &flags, &promise))
        return -1;
    return pool_init_common((PoolObject *)self, KIND_EVENT, ctx, flags, NULL, promise);
}

static PyObject *pool_not_made(void)
{
    PyErr_SetString(PyExc_ValueError, "the pool was not initialised");
    return NULL;
}

static PyObject *stream_pool_acquire(PyObject *self, PyObject *unused)
{
    (void)unused;
    PoolObject *p = (PoolObject *)self;
    if (!p->pool)
        return pool_not_made();
    CUstream s;
    CUresult r = cupool_stream_pool_acquire(p->pool, &s);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = pooled_new(&StreamType, (uintptr_t)s, p->pool);
    if (!o)
        cupool_stream_pool_release(p->pool, s, 0);
    return o;
}

static PyObject *event_pool_acquire(PyObject *self, PyObject *unused)
{
    (void)unused;
    PoolObject *p = (PoolObject *)self;
    if (!p->pool)
        return pool_not_made();
    CUevent e;
    CUresult r = cupool_event_pool_acquire(p->pool, &e);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = pooled_new(&EventType, (uintptr_t)e, p->pool);
    if (!o)
        cupool_event_pool_release(p->pool, e);
    return o;
}

static PyObject *stream_pool_acquire_handle(PyObject *self, PyObject *unused)
{
    (void)unused;
    PoolObject *p = (PoolObject *)self;
    if (!p->pool)
        return pool_not_made();
    CUstream s;
    CUresult r = cupool_stream_pool_acquire(p->pool, &s);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = from_handle((uintptr_t)s);
    if (!o)
        cupool_stream_pool_release(p->pool, s, 0);
    return o;
}

static PyObject *stream_pool_release_handle(PyObject *self, PyObject *const *args,
                                            Py_ssize_t nargs, PyObject *kwnames)
{
    PoolObject *p = (PoolObject *)self;
    static const char *const names[] = {"handle", "not_capturing"};
    PyObject *a[2];
    if (fast_args("release_handle", args, nargs, kwnames, names, 2, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_SetString(PyExc_TypeError, "release_handle() needs the handle");
        return NULL;
    }
    if (!p->pool)
        return pool_not_made();
    uintptr_t h;
    if (handle_arg(a[0], ARG_STREAM, &h) < 0)
        return NULL;
    unsigned int rflags = 0;
    if (a[1]) {
        int t = PyObject_IsTrue(a[1]);
        if (t < 0)
            return NULL;
        rflags = t ? CUPOOL_RELEASE_NOT_CAPTURING : 0;
    }
    CUresult r = cupool_stream_pool_release(p->pool, (CUstream)h, rflags);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

static PyObject *event_pool_acquire_handle(PyObject *self, PyObject *unused)
{
    (void)unused;
    PoolObject *p = (PoolObject *)self;
    if (!p->pool)
        return pool_not_made();
    CUevent e;
    CUresult r = cupool_event_pool_acquire(p->pool, &e);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    PyObject *o = from_handle((uintptr_t)e);
    if (!o)
        cupool_event_pool_release(p->pool, e);
    return o;
}

static PyObject *event_pool_release_handle(PyObject *self, PyObject *arg)
{
    PoolObject *p = (PoolObject *)self;
    if (!p->pool)
        return pool_not_made();
    uintptr_t h;
    if (handle_arg(arg, ARG_EVENT, &h) < 0)
        return NULL;
    CUresult r = cupool_event_pool_release(p->pool, (CUevent)h);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

static PyObject *pool_get_handle(PyObject *self, void *unused)
{
    (void)unused;
    return from_handle((uintptr_t)((PoolObject *)self)->pool);
}

static PyObject *pool_get_ctx(PyObject *self, void *unused)
{
    (void)unused;
    return from_handle(((PoolObject *)self)->ctx);
}

static PyObject *pool_get_flags(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(((PoolObject *)self)->flags);
}

static PyObject *pool_get_priority(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(((PoolObject *)self)->priority);
}

static PyObject *pool_repr(PyObject *self)
{
    PoolObject *p = (PoolObject *)self;
    char text[96];
    snprintf(text, sizeof text, "<cupool.%s ctx=0x%llx flags=0x%x%s>",
             p->kind == KIND_STREAM ? "StreamPool" : "EventPool", (unsigned long long)p->ctx,
             p->flags & ~CUPOOL_POOL_CONTEXT_OUTLIVES,
             (p->flags & CUPOOL_POOL_CONTEXT_OUTLIVES) ? " promise" : "");
    return PyUnicode_FromString(text);
}

static PyMethodDef stream_pool_methods[] = {
    {"acquire", stream_pool_acquire, METH_NOARGS, "A pooled Stream of this pool."},
    {"acquire_handle", stream_pool_acquire_handle, METH_NOARGS,
     "A stream of this pool as a plain int; give it back with release_handle()."},
    {"release_handle", (PyCFunction)(void (*)(void))stream_pool_release_handle,
     METH_FASTCALL | METH_KEYWORDS, "release_handle(handle, not_capturing=False)"},
    {NULL, NULL, 0, NULL}};

static PyMethodDef event_pool_methods[] = {
    {"acquire", event_pool_acquire, METH_NOARGS, "A pooled Event of this pool."},
    {"acquire_handle", event_pool_acquire_handle, METH_NOARGS,
     "An event of this pool as a plain int; give it back with release_handle()."},
    {"release_handle", event_pool_release_handle, METH_O, "release_handle(handle)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef stream_pool_getset[] = {
    {"handle", pool_get_handle, NULL, "The cupool_stream_pool_t value as an int.", NULL},
    {"ctx", pool_get_ctx, NULL, "The context it was made for (0: the current one then).", NULL},
    {"flags", pool_get_flags, NULL, "Flags as given, CUPOOL_POOL_CONTEXT_OUTLIVES included.", NULL},
    {"priority", pool_get_priority, NULL, "The priority asked for.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyGetSetDef event_pool_getset[] = {
    {"handle", pool_get_handle, NULL, "The cupool_event_pool_t value as an int.", NULL},
    {"ctx", pool_get_ctx, NULL, "The context it was made for (0: the current one then).", NULL},
    {"flags", pool_get_flags, NULL, "Flags as given, CUPOOL_POOL_CONTEXT_OUTLIVES included.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject StreamPoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupool.StreamPool",
    .tp_basicsize = sizeof(PoolObject),
    .tp_repr = pool_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "StreamPool(ctx=0, flags=0, priority=0, promise=False): the stream pool of one\n"
              "(context, flags, priority) class (cupool_stream_pool_get). ctx 0: the current\n"
              "context. promise=True adds CUPOOL_POOL_CONTEXT_OUTLIVES.",
    .tp_methods = stream_pool_methods,
    .tp_getset = stream_pool_getset,
    .tp_init = stream_pool_init,
    .tp_new = PyType_GenericNew,
};

static PyTypeObject EventPoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupool.EventPool",
    .tp_basicsize = sizeof(PoolObject),
    .tp_repr = pool_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "EventPool(ctx=0, flags=0, promise=False): the event pool of one (context,\n"
              "flags) class (cupool_event_pool_get).",
    .tp_methods = event_pool_methods,
    .tp_getset = event_pool_getset,
    .tp_init = event_pool_init,
    .tp_new = PyType_GenericNew,
};

/* ---- statistics ---- */

static int put(PyObject *d, const char *key, PyObject *v)
{
    if (!v)
        return -1;
    int r = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return r;
}
#define PUT_U64(d, s, f) put(d, #f, PyLong_FromUnsignedLongLong((unsigned long long)(s).f))

/* The graph statistics of each device that launched through the cache, as {ordinal: dict of
 * the fields cupool_graph_stats_device_get keeps per device}; NULL with an exception set. */
static PyObject *graph_devices_dict(void)
{
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (int d = 0; d < CUPOOL_STATS_DEVICES; d++) {
        cupool_graph_stats_t g = CUPOOL_GRAPH_STATS_INIT;
        CUresult r = cupool_graph_stats_device_get(d, &g);
        if (r != CUDA_SUCCESS) {
            Py_DECREF(out);
            return raise_result(r, NULL);
        }
        if (!g.launches)
            continue;
        PyObject *dd = PyDict_New(), *key = PyLong_FromLong(d);
        if (!dd || !key || PUT_U64(dd, g, launches) || PUT_U64(dd, g, hits) ||
            PUT_U64(dd, g, misses) || PUT_U64(dd, g, instantiations) || PUT_U64(dd, g, updates) ||
            PUT_U64(dd, g, nodes_updated) || PUT_U64(dd, g, evictions) ||
            PUT_U64(dd, g, entries) || PUT_U64(dd, g, execs) || PUT_U64(dd, g, bytes) ||
            PUT_U64(dd, g, claims_lock_free) || PUT_U64(dd, g, claims_locked) ||
            PyDict_SetItem(out, key, dd)) {
            Py_XDECREF(dd);
            Py_XDECREF(key);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(dd);
        Py_DECREF(key);
    }
    return out;
}

/* Every use of cupool's statistics structs is in this one function: a change of their layout
 * (a leading size field, say) is made here alone. */
static PyObject *stats_dict(void)
{
    size_t count = 0, cap = 0;
    cupool_class_stats_t *cls = NULL;
    CUresult r = cupool_stats_get(NULL, 0, &count);
    while (r == CUDA_SUCCESS && count > cap) {
        cap = count + 8;
        cupool_class_stats_t *n = PyMem_Realloc(cls, cap * sizeof *cls);
        if (!n) {
            PyMem_Free(cls);
            return PyErr_NoMemory();
        }
        cls = n;
        cls[0].size = sizeof *cls; /* the array's stride (cupool_stats_get) */
        r = cupool_stats_get(cls, cap, &count);
    }
    cupool_maintenance_stats_t ms = CUPOOL_MAINTENANCE_STATS_INIT;
    cupool_graph_stats_t gs = CUPOOL_GRAPH_STATS_INIT;
    if (r == CUDA_SUCCESS)
        r = cupool_maintenance_stats_get(&ms);
    if (r == CUDA_SUCCESS)
        r = cupool_graph_stats_get(&gs);
    if (r != CUDA_SUCCESS) {
        PyMem_Free(cls);
        return raise_result(r, NULL);
    }
    PyObject *out = PyDict_New(), *list = PyList_New(0), *m = PyDict_New(), *g = PyDict_New();
    if (!out || !list || !m || !g)
        goto fail;
    for (size_t i = 0; i < count; i++) {
        const cupool_class_stats_t *c = &cls[i];
        PyObject *d = PyDict_New();
        if (!d)
            goto fail;
        if (put(d, "kind", PyUnicode_FromString(c->kind == CUPOOL_KIND_EVENT ? "event" : "stream")) ||
            PUT_U64(d, *c, context_id) || put(d, "device", PyLong_FromLong(c->device)) ||
            put(d, "flags", PyLong_FromUnsignedLong(c->flags)) ||
            put(d, "priority", PyLong_FromLong(c->priority)) ||
            put(d, "context_alive", PyBool_FromLong(c->context_alive)) ||
            PUT_U64(d, *c, acquires) || PUT_U64(d, *c, hits) || PUT_U64(d, *c, releases) ||
            PUT_U64(d, *c, creates) || PUT_U64(d, *c, destroys) || PUT_U64(d, *c, dropped) ||
            PUT_U64(d, *c, idle) || PUT_U64(d, *c, in_use) || PUT_U64(d, *c, high_water) ||
            PyList_Append(list, d)) {
            Py_DECREF(d);
            goto fail;
        }
        Py_DECREF(d);
    }
    if (put(m, "running", PyBool_FromLong(ms.running)) || PUT_U64(m, ms, wakeups) ||
        PUT_U64(m, ms, background_creates) || PUT_U64(m, ms, background_destroys) ||
        PUT_U64(m, ms, request_creates) || PUT_U64(m, ms, request_destroys) ||
        PUT_U64(m, ms, graph_reaps))
        goto fail;
    if (PUT_U64(g, gs, launches) || PUT_U64(g, gs, hits) || PUT_U64(g, gs, misses) ||
        PUT_U64(g, gs, instantiations) || PUT_U64(g, gs, updates) ||
        PUT_U64(g, gs, nodes_updated) || PUT_U64(g, gs, update_failures) ||
        PUT_U64(g, gs, evictions) || PUT_U64(g, gs, eager_launches) || PUT_U64(g, gs, entries) ||
        PUT_U64(g, gs, execs) || PUT_U64(g, gs, bytes) || PUT_U64(g, gs, claims_lock_free) ||
        PUT_U64(g, gs, claims_locked) || PUT_U64(g, gs, nodes_compared) ||
        PUT_U64(g, gs, uploads) || PUT_U64(g, gs, update_topology_changed) ||
        PUT_U64(g, gs, update_node_type_changed) || PUT_U64(g, gs, update_function_changed) ||
        PUT_U64(g, gs, update_parameters_changed) || PUT_U64(g, gs, update_not_supported) ||
        PUT_U64(g, gs, update_unsupported_function_change) ||
        PUT_U64(g, gs, update_attributes_changed) || PUT_U64(g, gs, update_other) ||
        PUT_U64(g, gs, node_update_refusals) || PUT_U64(g, gs, update_errors))
        goto fail;
    PyMem_Free(cls);
    cls = NULL;
    if (PyDict_SetItemString(out, "classes", list) || PyDict_SetItemString(out, "maintenance", m) ||
        PyDict_SetItemString(out, "graph", g) || put(out, "graph_devices", graph_devices_dict()) ||
        put(out, "metadata_bytes", PyLong_FromSize_t(cupool_metadata_bytes())))
        goto fail;
    Py_DECREF(list);
    Py_DECREF(m);
    Py_DECREF(g);
    return out;
fail:
    PyMem_Free(cls);
    Py_XDECREF(out);
    Py_XDECREF(list);
    Py_XDECREF(m);
    Py_XDECREF(g);
    return NULL;
}

static PyObject *m_stats(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return stats_dict();
}

/* ---- capture_launch ---- */

struct capture_call {
    PyObject *fn;
    PyObject *exc_type, *exc_value, *exc_tb; /* what fn raised */
    int calls;
};

/* Runs fn(stream_handle) with the GIL; an exception becomes CUDA_ERROR_UNKNOWN for cupool,
 * which ends the capture, and is raised again by capture_launch. fn's return value is not
 * looked at. */
static CUresult capture_trampoline(CUstream stream, void *user_data)
{
    struct capture_call *c = user_data;
    PyGILState_STATE g = PyGILState_Ensure();
    CUresult r = CUDA_SUCCESS;
    c->calls++;
    PyObject *h = from_handle((uintptr_t)stream);
    PyObject *res = h ? PyObject_CallOneArg(c->fn, h) : NULL;
    Py_XDECREF(h);
    if (res) {
        Py_DECREF(res);
    } else {
        Py_XDECREF(c->exc_type);
        Py_XDECREF(c->exc_value);
        Py_XDECREF(c->exc_tb);
#if PY_VERSION_HEX >= 0x030C0000
        c->exc_value = PyErr_GetRaisedException();
        c->exc_type = c->exc_value ? Py_NewRef(Py_TYPE(c->exc_value)) : NULL;
        c->exc_tb = NULL;
#else
        PyErr_Fetch(&c->exc_type, &c->exc_value, &c->exc_tb);
#endif
        r = CUDA_ERROR_UNKNOWN;
    }
    PyGILState_Release(g);
    return r;
}

static PyObject *m_capture_launch(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)m;
    static const char *const names[] = {"key", "stream", "fn", "replay"};
    PyObject *a[4];
    if (fast_args("capture_launch", args, nargs, kwnames, names, 4, a) < 0)
        return NULL;
    if (!a[0] || !a[1] || !a[2]) {
        PyErr_SetString(PyExc_TypeError, "capture_launch(key, stream, fn, replay=True)");
        return NULL;
    }
    unsigned long long key = PyLong_AsUnsignedLongLong(a[0]);
    if (key == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    uintptr_t s;
    if (handle_arg(a[1], ARG_STREAM, &s) < 0)
        return NULL;
    if (!PyCallable_Check(a[2])) {
        PyErr_SetString(PyExc_TypeError, "capture_launch: fn must be callable");
        return NULL;
    }
    unsigned int flags = CUPOOL_CAPTURE_REPLAY;
    if (a[3]) {
        int t = PyObject_IsTrue(a[3]);
        if (t < 0)
            return NULL;
        flags = t ? CUPOOL_CAPTURE_REPLAY : CUPOOL_CAPTURE_UPDATE;
    }
    struct capture_call c = {.fn = a[2]};
    Py_INCREF(c.fn);
    CUresult r;
    /* Other Python threads run while cupool captures, instantiates or launches. */
    Py_BEGIN_ALLOW_THREADS
    r = cupool_capture_launch((uint64_t)key, (CUstream)s, capture_trampoline, &c, flags);
    Py_END_ALLOW_THREADS
    Py_DECREF(c.fn);
    if (c.exc_type) {
#if PY_VERSION_HEX >= 0x030C0000
        Py_DECREF(c.exc_type);
        PyErr_SetRaisedException(c.exc_value);
#else
        PyErr_Restore(c.exc_type, c.exc_value, c.exc_tb);
#endif
        return NULL;
    }
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    return PyBool_FromLong(c.calls > 0);
}

/* ---- the rest of the API ---- */

static PyObject *m_init(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    CUresult r = cupool_init();
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

static PyObject *m_trim(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    CUresult r;
    Py_BEGIN_ALLOW_THREADS
    r = cupool_trim();
    Py_END_ALLOW_THREADS
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

static PyObject *m_context_release(PyObject *m, PyObject *arg)
{
    (void)m;
    uintptr_t ctx;
    if (handle_arg(arg, ARG_CONTEXT, &ctx) < 0)
        return NULL;
    CUresult r;
    Py_BEGIN_ALLOW_THREADS
    r = cupool_context_release((CUcontext)ctx);
    Py_END_ALLOW_THREADS
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    Py_RETURN_NONE;
}

static PyObject *m_version(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return text(cupool_version());
}

static PyObject *m_error_string(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return text(cupool_error_string());
}

static PyObject *m_result_name(PyObject *m, PyObject *arg)
{
    (void)m;
    int v;
    if (int_arg(arg, &v, "result") < 0)
        return NULL;
    return text(cupool_result_name((CUresult)v));
}

static PyObject *m_driver_get_proc(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "driver_get_proc(symbol, cuda_version)");
        return NULL;
    }
    Py_ssize_t len;
    const char *sym = PyUnicode_AsUTF8AndSize(args[0], &len);
    if (!sym)
        return NULL;
    if ((size_t)len != strlen(sym)) {
        PyErr_SetString(PyExc_ValueError, "driver_get_proc: embedded null character in the symbol");
        return NULL;
    }
    int ver;
    if (int_arg(args[1], &ver, "cuda_version") < 0)
        return NULL;
    void *p = NULL;
    CUresult r = cupool_driver_get_proc(sym, ver, &p);
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    return from_handle((uintptr_t)p);
}

/* The calling thread's current context; without one, the primary context of device (retained
 * once per device for the process, never released) made current. Returns its handle. */
static PyObject *m_ensure_context(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)m;
    static const char *const names[] = {"device"};
    PyObject *dev_arg;
    int device = 0;
    if (fast_args("ensure_context", args, nargs, kwnames, names, 1, &dev_arg) < 0)
        return NULL;
    if (dev_arg && int_arg(dev_arg, &device, "device") < 0)
        return NULL;
    static CUresult (*get_current)(CUcontext *), (*set_current)(CUcontext);
    static CUresult (*device_get)(CUdevice *, int), (*retain)(CUcontext *, CUdevice);
    CUresult r = cupool_init();
    if (r == CUDA_SUCCESS && !get_current) {
        if ((r = cupool_driver_get_proc("cuDeviceGet", 2000, (void **)&device_get)) ||
            (r = cupool_driver_get_proc("cuDevicePrimaryCtxRetain", 7000, (void **)&retain)) ||
            (r = cupool_driver_get_proc("cuCtxSetCurrent", 4000, (void **)&set_current)) ||
            (r = cupool_driver_get_proc("cuCtxGetCurrent", 4000, (void **)&get_current)))
            get_current = NULL;
    }
    if (r != CUDA_SUCCESS)
        return raise_result(r, NULL);
    CUcontext ctx = NULL;
    if ((r = get_current(&ctx)) != CUDA_SUCCESS)
        return raise_result(r, "cuCtxGetCurrent failed");
    if (ctx)
        return from_handle((uintptr_t)ctx);
    static CUcontext retained[64];
    if (device < 0 || device >= 64)
        return raise_result(CUDA_ERROR_INVALID_DEVICE, "ensure_context: device out of range");
    if (!retained[device]) {
        CUdevice dev;
        if ((r = device_get(&dev, device)) != CUDA_SUCCESS)
            return raise_result(r, "cuDeviceGet failed");
        if ((r = retain(&ctx, dev)) != CUDA_SUCCESS)
            return raise_result(r, "cuDevicePrimaryCtxRetain failed");
        retained[device] = ctx;
    }
    if ((r = set_current(retained[device])) != CUDA_SUCCESS)
        return raise_result(r, "cuCtxSetCurrent failed");
    return from_handle((uintptr_t)retained[device]);
}

static PyObject *m_setup(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    (void)m;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_setup(error_class, handoff)");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(error_class, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(handoff_fn, args[1]);
    Py_RETURN_NONE;
}

#define FAST(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL, doc}
#define FASTKW(name, fn, doc) \
    {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL | METH_KEYWORDS, doc}

static PyMethodDef module_methods[] = {
    FASTKW("stream", m_stream, "stream(flags=0, priority=0): a pooled Stream of the current context."),
    FASTKW("event", m_event, "event(flags=0): a pooled Event of the current context."),
    FASTKW("stream_acquire_handle", m_stream_acquire_handle,
           "stream_acquire_handle(flags=0, priority=0) -> int (cupool_stream_acquire)."),
    {"stream_release_handle", m_stream_release_handle, METH_O,
     "stream_release_handle(handle) (cupool_stream_release)."},
    FASTKW("event_acquire_handle", m_event_acquire_handle,
           "event_acquire_handle(flags=0) -> int (cupool_event_acquire)."),
    {"event_release_handle", m_event_release_handle, METH_O,
     "event_release_handle(handle) (cupool_event_release)."},
    {"stats", m_stats, METH_NOARGS, "Statistics as a dict: classes, maintenance, graph."},
    FASTKW("capture_launch", m_capture_launch,
           "capture_launch(key, stream, fn, replay=True) -> bool (fn was called)."),
    {"init", m_init, METH_NOARGS, "cupool_init()."},
    {"trim", m_trim, METH_NOARGS, "cupool_trim()."},
    {"context_release", m_context_release, METH_O, "cupool_context_release(ctx)."},
    {"version", m_version, METH_NOARGS, "cupool_version()."},
    {"error_string", m_error_string, METH_NOARGS, "cupool_error_string()."},
    {"result_name", m_result_name, METH_O, "cupool_result_name(result)."},
    FAST("driver_get_proc", m_driver_get_proc, "driver_get_proc(symbol, cuda_version) -> int."),
    FASTKW("ensure_context", m_ensure_context,
         "ensure_context(device=0) -> int: a current context for the calling thread."),
    FAST("_setup", m_setup, NULL),
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cupool._cupool",
    .m_doc = "cupool's CPython extension; use the cupool package.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__cupool(void)
{
    if (PyType_Ready(&StreamType) < 0 || PyType_Ready(&EventType) < 0 ||
        PyType_Ready(&StreamPoolType) < 0 || PyType_Ready(&EventPoolType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&module_def);
    if (!mod)
        return NULL;
    PyTypeObject *types[] = {&StreamType, &EventType, &StreamPoolType, &EventPoolType};
    const char *names[] = {"Stream", "Event", "StreamPool", "EventPool"};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(mod, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(mod);
            return NULL;
        }
    }
    return mod;
}
