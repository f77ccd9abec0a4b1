/* SPDX-License-Identifier: MIT */
/*
 * sim/internal.h: what the files of the simulated driver share (none of it exported).
 *
 * fakecuda.so is a simulated CUDA driver library (the libcuda.so.1 subset cupool and its tests
 * use), for machines without a GPU.
 *
 * It simulates devices, primary and created contexts, streams, events, modules, kernels and
 * device memory (plain host memory: a CUdeviceptr is a host address). Work queued on a
 * stream is kept in a per-stream FIFO and executed lazily, on the calling thread, when
 * something forces it (a synchronisation, a query whose simulated time has come, a
 * synchronous copy). Kernels are host functions looked up by name in a table. The handle
 * life cycles, error codes and crash points follow what the real driver did on an H200
 * (driver 580, CUDA 13.0); fakecuda.h lists them, with the control API for tests.
 *
 * Locking: one global mutex guards all state. An operation that runs user code (kernel,
 * copy, memset, host function) runs with the mutex released while its queue is marked busy,
 * so host functions may call back into the driver, and a second thread that needs the same
 * queue waits on a condition variable instead of running later work early.
 *
 * Every file includes this header first. The driver's entry points and the control API keep
 * the default visibility their declarations in cuda.h and fakecuda.h give them; everything
 * declared below is hidden, so the library exports nothing else.
 */
#ifndef FAKECUDA_INTERNAL_H
#define FAKECUDA_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
/*
 * __CUDA_API_VERSION_INTERNAL is how the driver itself compiles cuda.h: no renaming macros
 * are left afterwards, and the legacy and versioned entry points are all declared with their
 * real prototypes, so every definition in these files is checked against the real signature.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "fakecuda.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <time.h>

#include "entries.h"

#pragma GCC visibility push(hidden)

/* ========================================================================================
 * Limits and magic numbers
 * ======================================================================================== */

#define FC_MAX_DEVICES 8
#define FC_MAX_KERNELS 128      /* builtins + registered kernels */
#define FC_MAX_PARAMS 32        /* kernel parameters */
#define FC_MAX_PARAM_SIZE 4096  /* bytes per kernel parameter */
#define FC_NAME_MAX 64          /* kernel name, including the NUL */
#define FC_CTX_STACK 64         /* per-thread context stack depth */
#define FC_MAX_SLABS 40
#define FC_EVENT_HOLDBACK 1024  /* destroyed events waiting before their memory is reused */
#define FC_DRIVER_VERSION 13000
#define FC_PRIO_LEAST 0
#define FC_PRIO_GREATEST (-5)
#define FC_CTX_DESTROYED_PTR ((CUcontext)(uintptr_t)0x2) /* what the real driver returned */

#define MAGIC_CTX 0x46437478u    /* "FCtx" */
#define MAGIC_STREAM 0x46437374u /* "FCst" */
#define MAGIC_EVENT 0x46436576u  /* "FCev" */
#define MAGIC_MODULE 0x46436d6fu /* "FCmo" */
#define MAGIC_FUNC 0x4643666eu   /* "FCfn" */
#define MAGIC_GRAPH 0x46436772u  /* "FCgr" */

#define MAGIC_NODE 0x46436e64u /* "FCnd" */
#define MAGIC_COND 0x46436364u /* "FCcd" */
#define MAGIC_EXEC 0x46436578u /* "FCex" */

/* handle states: a freed handle keeps its memory (and magic) so later use is detected */
enum { ST_UNUSED = 0, ST_LIVE, ST_DESTROYED, ST_CTX_GONE };

/* ========================================================================================
 * Types
 * ======================================================================================== */

struct fc_hdr {
    uint32_t magic;
    uint32_t state;
    struct fc_hdr *free_next;
};

struct fc_op;
struct fc_ctx;

/* A FIFO of operations. Owned (reference counted) by its stream, then by the context's
 * orphan list once the stream is destroyed, and by events and wait operations pointing at
 * a record in it. */
struct fc_queue {
    struct fc_op *head, *tail;
    unsigned refs;
    int busy;               /* an operation popped from it is running */
    const void *busy_owner; /* the thread running it */
    uint64_t busy_seq;      /* and its sequence number */
    int dead;               /* its context was reset or destroyed */
    uint64_t last_ready;    /* ready_at of the last operation queued */
    struct fc_ctx *ctx;
    struct fc_queue *orphan_next;
};

/* the operations recorded while a stream is captured */
struct fc_node;
/* A graph: its nodes (cuGraphAdd*Node, or a capture's operations once it ends). */
struct fc_graph {
    uint32_t magic;
    struct fc_ctx *ctx;
    struct fc_graph *prev, *next;
    struct fc_op *head, *tail; /* operations recorded while capturing */
    size_t nops;
    struct fc_node *nhead, *ntail;
    size_t nnodes;
    int exec_launched; /* an exec instantiated from it has been launched */
    /* conditional nodes: the handles created on it (each holds a reference), whether it or
     * one of its bodies holds a conditional node (then it is instantiated once only and
     * never cloned, as on an H200), how often it was instantiated, and, for a body graph,
     * the conditional node that owns it (a body is not in its context's list of graphs) */
    struct fc_cond **conds;
    size_t nconds, cconds;
    int has_cond;
    int instantiated;
    struct fc_node *parent;
};
/* A conditional handle (cuGraphConditionalHandleCreate): its value, set by the builtin setter
 * kernel cupool_set_cond (cudaGraphSetConditional on a GPU) and read by the conditional node;
 * reset to dflt at each launch with CU_GRAPH_COND_ASSIGN_DEFAULT. Reference counted: its
 * graph and every queued operation naming it. Lock held for every field. */
struct fc_cond {
    uint32_t magic;
    unsigned refs;
    unsigned value, dflt, flags;
    struct fc_graph *g; /* the graph it was created on (compared only) */
    int used;           /* a conditional node uses it */
};
/* One body of a conditional operation: its nodes' operations in a topological order, with
 * the graph node each came from (for exec updates of nodes inside bodies). */
struct fc_body {
    size_t n;
    struct fc_op **op;      /* NULL for an empty node */
    CUgraphNodeType *type;
    const void **node;
};
struct fc_node {
    uint32_t magic;
    struct fc_graph *g;
    CUgraphNodeType type;
    struct fc_op *tmpl; /* kernel, memset, memcpy, host; NULL for empty, event nodes */
    struct fc_event *ev; /* event record / wait nodes (a reference) */
    size_t index;       /* insertion order in its graph */
    struct fc_node **deps;
    unsigned char *dep_type; /* per dependency: CU_GRAPH_DEPENDENCY_TYPE_* (NULL: all default) */
    size_t ndeps, cap;
    struct fc_node *next;
    struct fc_node *origin; /* the node it was cloned from (cuGraphClone), never dereferenced */
    CUgraph *bodies;        /* a conditional node: its body graphs (tmpl->u.cond.size) */
};

struct fc_exec {
    uint32_t magic;
    struct fc_ctx *ctx;
    struct fc_exec *prev, *next;
    size_t n;
    CUgraphNodeType *type;
    struct fc_op **tmpl;     /* per position, NULL for event and empty nodes */
    struct fc_event **ev;    /* per position, event nodes */
    const void **node;       /* the graph node each position came from (never dereferenced) */
    size_t *dep_index;       /* topology, for cuGraphExecUpdate: flattened dependency indexes */
    size_t *dep_start;       /* n + 1 offsets into dep_index */
    struct fc_queue *last_q; /* the queue of the last launch, and its last operation */
    uint64_t last_seq, last_ready;
    struct fc_graph *src; /* the graph it was instantiated from, while that lives */
    int launched;         /* launched at least once */
    int node_priority;    /* instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY */
    int uploaded;         /* uploaded (at instantiation, cuGraphUpload, or its first launch) */
    unsigned char *dep_type; /* per entry of dep_index: the edge's CU_GRAPH_DEPENDENCY_TYPE_* */
    struct fc_cond **conds;  /* handles reset at each launch (CU_GRAPH_COND_ASSIGN_DEFAULT) */
    size_t nconds;
};



struct fc_stream {
    struct fc_hdr h;
    struct fc_ctx *ctx;
    struct fc_stream *prev, *next;
    struct fc_queue *q;
    unsigned flags;
    int priority;
    int legacy; /* the context's NULL stream */
    unsigned long long id;
    CUstreamCaptureStatus cap;
    unsigned long long cap_id;
    struct fc_graph *graph;
};

struct fc_event {
    struct fc_hdr h;
    struct fc_ctx *ctx;
    struct fc_event *prev, *next;
    unsigned flags;
    unsigned refs;          /* the handle while live + each queued operation naming it */
    int recorded;           /* recorded at least once (outside a capture) */
    struct fc_queue *rec_q; /* queue holding the latest record while it has not run */
    uint64_t rec_seq;
    uint64_t rec_ready;     /* simulated completion time of the latest record */
    int has_time;
    uint64_t time_seq, time_ns;
};

struct fc_module;
struct fc_function {
    uint32_t magic;
    int slot; /* index in the kernel table */
    struct fc_module *mod;
};

struct fc_module {
    struct fc_hdr h;
    struct fc_ctx *ctx;
    struct fc_module *prev, *next;
    struct fc_function fn[FC_MAX_KERNELS];
};

struct fc_alloc {
    struct fc_alloc *next;
    unsigned char *base;
    size_t size;
};

struct fc_ctx {
    struct fc_hdr h;
    int primary;
    CUdevice dev;
    int active;        /* primary: retained and not reset; created: not destroyed */
    int dying;         /* its resources are being torn down */
    int was_reset;     /* primary: cuDevicePrimaryCtxReset since it was last activated */
    unsigned refcount; /* primary retains (a reset keeps them, as on the real driver) */
    unsigned flags;
    unsigned long long id;
    CUresult sticky;
    struct fc_stream legacy;
    struct fc_stream *streams;
    struct fc_event *events;
    struct fc_module *modules;
    struct fc_alloc *allocs;
    struct fc_queue *orphans;
    struct fc_graph *graphs;
    struct fc_exec *execs;
    struct fc_ctx *all_next;
};

enum op_kind { OP_KERNEL, OP_MEMSET, OP_COPY, OP_RECORD, OP_WAIT, OP_HOSTFN, OP_COND, OP_CONDRESET };

struct fc_op {
    struct fc_op *next;
    enum op_kind kind;
    uint64_t seq;
    uint64_t ready_at;
    uint64_t duration;
    union {
        struct {
            fakecuda_kernel_fn fn;
            int slot; /* in the kernel table */
            unsigned grid[3], block[3];
            void *args[FC_MAX_PARAMS];
            unsigned char *blob;
            size_t blob_len;
            /* launch attributes (cuLaunchKernelEx, or a kernel node's): 0 when not set */
            unsigned cluster[3], preferred_cluster[3];
            int cooperative, cluster_policy, mem_sync_domain, priority;
            int priority_set;                 /* the priority attribute was given */
            unsigned char sync_map[2];        /* memory sync domain map: default, remote */
            /* how the launch ran (set when it is queued): the priority it ran at (the
             * attribute's, a graph node's under CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY,
             * else the stream's), and whether it could overlap the kernel before it
             * (programmatic stream serialization, or a programmatic graph edge) */
            int run_priority, run_priority_set, programmatic;
        } k;
        struct {
            unsigned char *dst;
            unsigned value;
            size_t elem, count;
        } set;
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        struct {
            struct fc_event *ev;
        } rec;
        struct {
            struct fc_event *ev;
            struct fc_queue *q; /* queue holding the awaited record, or NULL */
            uint64_t seq;
        } wait;
        struct {
            CUhostFn fn;
            void *data;
        } host;
        struct { /* a conditional node: runs the body its handle's value picks */
            struct fc_cond *c; /* a reference */
            CUgraphConditionalNodeType type;
            unsigned size;
            struct fc_body *body; /* size bodies; NULL in a graph node's template */
        } cond;
        struct { /* a launch's first step: the handle back to its default value */
            struct fc_cond *c; /* a reference */
        } creset;
    } u;
};

struct fc_kernel {
    char name[FC_NAME_MAX];
    int nparams;
    size_t sizes[FC_MAX_PARAMS];
    fakecuda_kernel_fn fn;
};

struct fc_fault {
    int active;
    unsigned long skip;
    long count;
    CUresult err;
};

/* Slab allocator for handles: memory is never returned to malloc, so a stale or garbage
 * pointer can be checked (is it inside a slab, at an element boundary, with our magic?)
 * without touching unmapped memory. Freed elements are reused LIFO (streams, like the real
 * driver) or FIFO after `holdback` others (events, modules). */
struct fc_pool {
    const char *what;
    size_t size;
    uint32_t magic;
    int lifo;
    size_t holdback; /* FIFO only; SIZE_MAX: never reuse */
    char *slab[FC_MAX_SLABS];
    size_t slab_len[FC_MAX_SLABS];
    int nslabs;
    size_t used; /* elements handed out from the last slab */
    struct fc_hdr *free_head, *free_tail;
    size_t nfree;
};

/* ========================================================================================
 * The entry points (entries.h), by index: E_cuInit, ..., E_COUNT
 * ======================================================================================== */

#define FC_ENUM(n, v, f) E_##n,
#define FC_NONE(n, v, f)
enum { FC_ENTRIES(FC_ENUM, FC_NONE) E_COUNT };

/* ========================================================================================
 * Global state (state.c)
 * ======================================================================================== */

extern pthread_mutex_t g_lock;
extern pthread_cond_t g_cond;

extern int g_env_read;
extern int g_stub;               /* FAKECUDA_STUB=1 */
extern int g_driver_version;     /* FAKECUDA_DRIVER_VERSION */
extern char g_hidden[512];       /* FAKECUDA_HIDE, as ",name,name," */
extern int g_initialized;
extern int g_fork_child;
extern int g_torn_down;
extern int g_strict;
extern int g_handlers_registered;
extern int g_ndev;
extern struct fc_ctx *g_primary[FC_MAX_DEVICES];
extern struct fc_ctx *g_contexts; /* every context ever made */
extern unsigned long long g_next_ctx_id;
extern unsigned long long g_next_stream_id;
extern unsigned long long g_next_capture_id;
extern uint64_t g_seq; /* last operation sequence number */
extern int g_live_streams, g_live_events;

extern struct fc_pool g_ctx_pool, g_stream_pool, g_event_pool, g_module_pool;
extern _Atomic size_t slab_bytes; /* all handle tables' slabs (bytes); they never shrink */

/* per thread: the context stack, the entry point being run (for messages), the context
 * whose operation this thread is executing (for the builtin kernels) */
extern _Thread_local struct fc_ctx *tl_stack[FC_CTX_STACK];
extern _Thread_local int tl_depth;
extern _Thread_local const char *tl_entry;
extern _Thread_local struct fc_ctx *tl_exec_ctx;
extern _Thread_local unsigned tl_cluster_x; /* cluster width of the kernel running (1: none) */
extern _Thread_local const struct fc_op *tl_op; /* the kernel running on this thread */
extern _Thread_local char tl_token;

static inline const void *tl_self(void) { return &tl_token; }
static inline void lock(void) { pthread_mutex_lock(&g_lock); }
static inline void unlock(void) { pthread_mutex_unlock(&g_lock); }
static inline uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static inline struct fc_ctx *tl_top(void) { return tl_depth ? tl_stack[tl_depth - 1] : NULL; }
static inline int ctx_alive(const struct fc_ctx *c) { return c->active && !c->dying; }

/* Prints `fakecuda: <entry>: <what> (the real driver crashes here)` and aborts. */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
uint64_t now_ns(void);
void sleep_until(uint64_t t);

/* handle pools */
void *pool_get(struct fc_pool *p);
void pool_put(struct fc_pool *p, void *obj, uint32_t state);
struct fc_hdr *pool_container(const struct fc_pool *p, const void *ptr);
int pool_owns(const struct fc_pool *p, const void *ptr);

/* ========================================================================================
 * Entry-point prologue (control.c)
 * ======================================================================================== */

int enter(int e, int need_init, CUresult *early);
CUresult leave(CUresult r);

#define ENTER(name, need_init)                                                              \
    do {                                                                                    \
        CUresult early_;                                                                    \
        if (!enter(E_##name, (need_init), &early_))                                         \
            return early_;                                                                  \
    } while (0)

/* ========================================================================================
 * Shared between the files, by the file that defines them
 * ======================================================================================== */

/* context.c */
CUresult need_ctx(struct fc_ctx **out);
CUresult need_healthy_ctx(struct fc_ctx **out);
void poison(struct fc_ctx *c, CUresult err);

/* queue.c */
enum { DRAIN_ALL, DRAIN_LEGACY };
struct fc_op *op_new(enum op_kind kind);
struct fc_op *memset_op_new(void *dst, unsigned value, size_t elem, size_t count);
struct fc_op *copy_op_new(void *dst, const void *src, size_t n);
struct fc_op *host_op_new(CUhostFn fn, void *data);
struct fc_op *op_clone(const struct fc_op *t);
void op_free(struct fc_op *op);
struct fc_queue *queue_new(struct fc_ctx *c);
void queue_discard(struct fc_queue *q);
void queue_unref(struct fc_queue *q);
CUresult drain(struct fc_queue *q, uint64_t upto, int only_ready);
CUresult ctx_drain(struct fc_ctx *c, int only_ready, int which);
CUresult submit(struct fc_stream *s, struct fc_op *op, uint64_t not_before);

/* module.c */
extern struct fc_kernel g_kernels[FC_MAX_KERNELS];
extern int g_nkernels;
int kernel_find(const char *name);
CUresult get_function(CUfunction h, struct fc_function **out);
CUresult kernel_op(const struct fc_function *fn, const unsigned grid[3], const unsigned block[3],
                   void **kernelParams, struct fc_op **out);
CUresult kernel_attr_set(struct fc_op *op, CUlaunchAttributeID id, const CUlaunchAttributeValue *v,
                         int graph_node);
CUresult kernel_attr_get(const struct fc_op *op, CUlaunchAttributeID id, CUlaunchAttributeValue *v);
int kernel_shape_fits(const struct fc_op *op);
void kernel_attrs_copy(struct fc_op *to, const struct fc_op *from);

/* stream.c */
CUresult get_stream(CUstream h, struct fc_stream **out, int check_sticky);

/* event.c */
CUresult get_event(CUevent h, struct fc_event **out, int check_sticky);
void event_unref(struct fc_event *e);

/* memory.c */
struct fc_alloc *find_alloc(uintptr_t p, size_t n, struct fc_ctx **owner);
CUresult memset_check(CUdeviceptr dst, size_t elem, size_t n);

/* graph.c */
extern _Atomic int g_live_graphs; /* graphs created and not destroyed (clones, captures) */
struct fc_graph *graph_new(struct fc_ctx *c);
void graph_free(struct fc_graph *g);
CUresult get_graph(CUgraph h, struct fc_graph **out);
CUresult capture_to_nodes(struct fc_graph *g);
int graph_use_begin(void *g);
void graph_use_end(int slot);

/* node.c */
void node_free(struct fc_node *n);
CUresult get_node(CUgraphNode h, struct fc_node **out);
CUresult node_add(struct fc_graph *g, CUgraphNodeType type, struct fc_op *tmpl,
                  struct fc_event *ev, const CUgraphNode *deps, size_t ndeps, CUgraphNode *out);
CUresult kernel_node_op(struct fc_graph *g, const CUDA_KERNEL_NODE_PARAMS *p, struct fc_op **op);
CUresult memset_node_op(const CUDA_MEMSET_NODE_PARAMS *p, struct fc_op **out);
CUresult memcpy_node_op(const CUDA_MEMCPY3D *p, struct fc_op **out);
int node_dep_type(const struct fc_node *n, size_t d);
CUresult node_dep_set_type(struct fc_node *n, size_t d, int type);

/* cond.c */
struct fc_cond *cond_of(CUgraphConditionalHandle h);
void cond_unref(struct fc_cond *c);
void cond_op_free(struct fc_op *op);
int cond_op_clone(struct fc_op *op, const struct fc_op *t);
void cond_run(struct fc_op *op, int only_ready);
CUresult cond_op_build(struct fc_node *x, struct fc_op **out, struct fc_cond ***conds,
                       size_t *nconds, size_t *cconds);
struct fc_op **cond_find_slot(struct fc_op *op, const void *node, CUgraphNodeType *type);
int cond_same_shape(const struct fc_op *a, const struct fc_op *b);
void cond_keep_nodes(struct fc_op *to, const struct fc_op *from);
int node_allowed_in(const struct fc_graph *g, CUgraphNodeType type);
void run_op_inline(struct fc_op *op, int only_ready);

/* graph_exec.c */
extern _Atomic int g_live_execs; /* execs instantiated and not destroyed */
extern _Atomic unsigned long g_inst_of_launched;
extern _Atomic unsigned long g_inst_launch_overlaps;
extern unsigned long g_exec_overlaps;      /* launches that waited on the exec's other stream */
extern unsigned long g_exec_destroy_waits; /* exec destroys with launches still queued */
extern _Atomic unsigned long g_uploads;        /* execs uploaded, however */
extern _Atomic unsigned long g_launch_uploads; /* of which by their first launch */
void exec_free(struct fc_exec *e);
int topo_order(struct fc_graph *g, struct fc_node **order);

#pragma GCC visibility pop

#endif /* FAKECUDA_INTERNAL_H */
