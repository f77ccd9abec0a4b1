/* SPDX-License-Identifier: MIT */
/*
 * The graph layer's internal interface between its files (the .c files of src/graph): the
 * pipeline and cache structures, and the functions and variables each file defines for the
 * others. Not for other layers (they use graph/graph.h).
 *
 * Pipelines and the graph-replay cache (docs/design.md, "Graph-replay cache").
 *
 * A pipeline is a list of nodes with their parameters (kernel arguments copied into one
 * buffer, laid out as cuFuncGetParamInfo says) and dependencies (by default the node before).
 * Its signature is a list of 64-bit words: node types, kernel functions and argument sizes,
 * dependency lists. The cache maps (context id, signature) to an entry: a template graph with
 * its node handles and up to CUPOOL_GRAPH_EXECS_MAX execs, each remembering the parameters
 * of its last launch. A launch diffs the pipeline against the chosen exec and updates only
 * the nodes that differ.
 *
 * An exec is reused on the stream that launched it last, or once its last launch finished.
 * A launch on a new stream gets an exec of its own until the entry has
 * CUPOOL_GRAPH_EXECS_MAX; only then are execs shared among streams. "Finished" needs an event
 * recorded after each launch, a driver call, so an entry records events only from then on
 * (most entries never do).
 *
 * The cache is one table under one mutex, held for lookups and exec selection, never across
 * an instantiation or a launch. A repeat launch skips it: each thread keeps, per signature
 * hash and stream, the entry and exec it launched last (its hints, a set-associative table
 * behind one pointer of its thread cache), and claims them again without the lock when they
 * are unchanged and the exec is free and was last launched on the same stream (fast_claim).
 * That claim may touch an entry or exec just freed, so both are type-stable: freed ones wait
 * on free lists for reuse, and their memory goes back only in cupool_trim(), after a grace
 * period, or at unload.
 *
 * A pipeline refilled per request is compared as it is added (refill.c): the adds find the
 * last launch's nodes in place, write only what differs and mark what did, so a launch
 * compares nothing, or only the marked nodes, with an exec that ran the last launch
 * (exec_update).
 */
#ifndef CUPOOL_GRAPH_IMPL_H
#define CUPOOL_GRAPH_IMPL_H
#include "base/internal.h"
#include "base/config.h"
#include "base/driver.h"
#include "base/sync.h"
#include "pool/maint.h"
#include "pool/pool.h"
#include <pthread.h>

#define PIPELINE_MAGIC 0x7069706cu /* "pipl" */

enum pn_type { PN_KERNEL = 1, PN_MEMSET, PN_MEMCPY, PN_RECORD, PN_WAIT, PN_HOST, PN_COND };
/* The kinds of conditional node (cupool_pipeline_switch, cupool_pipeline_if). */
enum pn_cond_kind { PC_IF = 1, PC_SWITCH = 2 };

/* A kernel's argument layout, from cuFuncGetParamInfo: shared by every pipeline that holds
 * it (refs), and listed in fn_table until cupool_trim() forgets the layouts learnt so far. It
 * is freed once it is neither listed nor held, so layouts take memory for what the live
 * pipelines use and what the table lists, whatever the number of trims. fn_lock guards refs,
 * listed and the table; the other fields are fixed once it is published. The parameters
 * follow the counts in the same block, so an add reads a kernel of up to four parameters'
 * layout from one cache line. */
struct fninfo {
    CUfunction fn;
    uint32_t refs;  /* pipelines holding it */
    bool listed;    /* in fn_table */
    struct fninfo *next;
    uint32_t nparams;
    uint32_t bytes; /* end of the last parameter */
    struct fnparam {
        uint32_t off, size; /* bytes */
    } param[];
};

/* A kernel node's launch attributes (cupool_pipeline_kernel_ex), normalised: zeroed, then
 * each attribute given written in its field and flagged in `given` (a bit per
 * CUlaunchAttributeID), so that two equal sets of attributes are equal bytes whatever the
 * order they were given in. Every one of them is structure (the driver cannot change it in
 * an instantiated exec, see attrs.c): its words are the node's signature words. */
struct kattr {
    uint32_t given;        /* 1u << CUlaunchAttributeID of each attribute given */
    uint32_t cluster[3];   /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (blocks) */
    uint32_t preferred[3]; /* CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION (blocks) */
    int32_t priority;      /* CU_LAUNCH_ATTRIBUTE_PRIORITY */
    uint8_t cooperative;   /* CU_LAUNCH_ATTRIBUTE_COOPERATIVE (0 or 1) */
    uint8_t programmatic;  /* CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (0 or 1) */
    uint8_t policy;        /* CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE */
    uint8_t sync_domain;   /* CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN */
    uint8_t sync_map[2];   /* CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: default, remote */
    uint8_t zero[2];
};
#define KATTR_WORDS (sizeof(struct kattr) / sizeof(uint64_t))
_Static_assert(sizeof(struct kattr) % sizeof(uint64_t) == 0, "kattr: whole signature words");
/* A kernel node with attributes: its first signature word's type carries this bit, and its
 * KATTR_WORDS attribute words follow the function's. */
#define SIG_KATTR 0x100u
/* A node inside a conditional node's body: its first signature word's type carries this bit,
 * and a word (the conditional node's number + 1) << 32 | body follows its function word. */
#define SIG_SCOPED 0x200u

/* What an add compares of a kernel node (type, attr, function, layout, shape, argument place)
 * is in its first 64 bytes; where it is (scope, body) comes after. */
struct pnode {
    uint32_t type;
    uint32_t ndeps, dep_start; /* into the pipeline's deps[] */
    uint32_t attr;             /* a kernel: 1 when it has launch attributes (kattr[i]), else 0 */
    union {
        struct {
            CUfunction fn;
            const struct fninfo *info;
            /* grid x, y, z, block x, y, z, dynamic shared memory (bytes): K_SHAPE words */
            uint32_t shape[7];
            uint32_t arg_off; /* into the args buffer */
        } k;
        struct {
            CUdeviceptr dst;
            uint32_t value, elem;
            size_t count;
        } set;
        struct {
            CUdeviceptr dst, src;
            size_t bytes;
        } copy;
        struct {
            CUevent ev;
        } ev;
        struct {
            CUhostFn fn;
            void *user;
        } host;
        /* a conditional node: its kind (enum pn_cond_kind) and bodies are structure, the
         * branch value (the setter kernel's argument) a parameter */
        struct {
            uint32_t kind, nbodies, value;
        } cond;
    } u;
    /* where it is: 0 at the top level, else in body `body` of conditional node scope - 1 */
    uint32_t scope, body;
};
_Static_assert(offsetof(struct pnode, u.k.arg_off) + sizeof(uint32_t) <= 64,
               "pnode: a kernel's compared fields in its first 64 bytes");

#define K_SHAPE 7 /* words of a kernel node's launch shape */

#define FN_CACHE 8

/* The fields are placed by use, so that a describe and launch of an unchanged pipeline reads
 * three of its cache lines (cupool__alloc gives 64-byte aligned blocks) and no other: the first
 * line holds what every add reads and writes, the second what a reset and the adds'
 * signature bookkeeping add, the third what a launch reads besides. Sizes and the rest follow. */
struct cupool_pipeline {
    /* ---- line 0: the adds ---- */
    uint32_t magic;
    /* The parameters of the last launch, compared as nodes are added (refill): a reset keeps
     * nodes[] and args[], so an add at a place where the last launch had a node of the same
     * kind (same function and argument place, for a kernel) compares its parameters with that
     * node's and writes only what differs, marking the node in chg[] (a bit per node). Every
     * other add writes afresh and sets all_dirty. Invariant, while all_dirty is false: every
     * node below hw that is not marked holds the last launch's parameters, and, while
     * redescribed is false too, every marked one differs from them. A launch consumes
     * the marks (hw becomes its node count, the marks, all_dirty and redescribed are cleared). */
    uint32_t hw; /* nodes of the last launch still in place (0: none to compare with) */
    uint32_t n, ndeps;
    struct pnode *nodes;
    uint32_t *deps;
    unsigned char *args;
    size_t alen;
    size_t depcap;
    uint32_t nchg;    /* nodes marked */
    bool sig_dirty;   /* structure differs from the last launch's (or none yet) */
    bool all_dirty;   /* an add wrote without comparing: any node may differ */
    bool redescribed; /* a reset found nodes marked: a marked node may be as launched */
    bool dirty_mark;  /* sig_dirty before the last node's words (see sig_mark) */
    /* ---- line 1: the reset, and the structure words ---- */
    /* The signature of the last launch (sig, last_nsig words, last_hash, last_n nodes), and
     * whether the description since matches it: node adds compare their structure words in
     * place (sigpos), so a pipeline refilled with the same structure skips hashing and lookup
     * at launch. */
    size_t sigpos;
    /* sigpos and sig_dirty before the last node's words: cupool_pipeline_depend on the node
     * just added emits its words again */
    size_t sig_mark;
    size_t last_nsig;
    uint64_t fn_epoch; /* cupool__hot.fn_epoch when fcache was filled */
    /* The last launch's leading nodes that were kernels with their default dependency (their
     * words at 3i (1 for node 0): type, function, i - 1): while all_dirty is false, the node
     * in place at such a place still has that launch's function, so a kernel refilled there
     * with it matches its words without reading them (kernel_refilled). Set by signature(). */
    uint32_t sig_chain;
    CUresult add_error; /* the first failed add since the last reset (launches refuse) */
    /* conditional nodes of the description (cupool_pipeline_switch/_if): how many, the body
     * the next add goes into (open_scope: the conditional node's number + 1, 0 at the top
     * level; open_body), the node the next add depends on by default (dflt_dep: number + 1,
     * 0 for none) and the bodies still without a node */
    uint32_t ncond;
    uint32_t open_scope, open_body;
    uint32_t dflt_dep;
    uint32_t empty_bodies;
    uint32_t last_n;
    /* ---- line 2: the launch ---- */
    uint64_t last_hash;
    uint64_t *sig;
    struct gentry *last_entry; /* the entry the last launch used, valid while ... */
    uint64_t last_epoch;       /* ... the cache's epoch has not moved */
    unsigned long long last_ctx_id;
    /* The description's version, unique across pipelines: moves on at a launch whose
     * description differs from the last launch's. An exec whose snapshot is tagged with
     * (this pipeline, gen) holds exactly the last launch's parameters. */
    uint64_t gen;
    size_t argvcap;
    uint32_t max_params;
    /* ---- line 3: the relaunch ---- */
    /* The exec the last launch kept and the stream it ran on, with the exec's serial then:
     * an unchanged relaunch on that stream claims it directly (pipeline_relaunch in
     * graph/launch.c), validated as a thread's hint is (the cache epoch as last_epoch, the
     * serial); NULL when the last launch kept none. */
    struct gexec *last_exec;
    uint64_t last_serial;
    CUstream last_stream;
    /* ---- the rest ---- */
    size_t cap, acap, sigcap;
    uint64_t *chg;
    size_t chgcap; /* words allocated in chg */
    void **argv;   /* scratch for kernelParams */
    /* the launch attributes of kernel node i, at kattr[i] when nodes[i].attr (refilled in
     * place like the nodes) */
    struct kattr *kattr;
    size_t kattrcap;
    const struct fninfo *fcache[FN_CACHE]; /* functions this pipeline used lately */
    unsigned fnext;
    /* every layout its nodes may name (each counted in its refs), dropped at a reset that
     * follows a trim, and at destroy */
    struct fninfo **held;
    size_t nheld, heldcap;
};
_Static_assert(offsetof(struct cupool_pipeline, sigpos) == 64 &&
                   offsetof(struct cupool_pipeline, last_hash) == 128 &&
                   offsetof(struct cupool_pipeline, last_exec) == 192 &&
                   offsetof(struct cupool_pipeline, cap) <= 256,
               "cupool_pipeline: the lines of the per-request path");


/* The pipeline behind a public handle, or NULL. */
static inline struct cupool_pipeline *cupool__pipeline_of(cupool_pipeline_t p)
{
    return p && p->magic == PIPELINE_MAGIC ? p : NULL;
}

/* The nodes in place no longer hold the last launch's parameters (their layouts were let go
 * after a trim): later adds write afresh, and the next launch compares every node. */
static inline void cupool__refill_forget(struct cupool_pipeline *p)
{
    p->hw = 0;
    p->all_dirty = true;
}

#define GROW(arr, cap, need) cupool__grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))
#define EXECS_LIMIT 64
#define BUCKETS 1024
#define DRIVER_BYTES_PER_NODE 1024 /* an estimate of the driver's memory per node and exec */

struct gexec {
    /* Ownership: whoever turns it from false to true (compare-and-swap) owns the exec and
     * alone may read or change the fields below, or free it. A free exec stays true. Never
     * reset: first in the struct, so recycling clears everything after it. */
    _Atomic bool busy;
    struct gentry *entry; /* its entry, and a serial new at each (re)use of the struct */
    uint64_t serial;
    struct gexec *free_next;
    CUgraphExec exec;
    /* Its own clone of the entry's template, instantiated once, and the clone's nodes in the
     * template's order (for updates): NULL for an exec of a capture's own graph (see
     * exec_new_of for why a template is never instantiated twice). */
    CUgraph graph;
    CUgraphNode *nodes;
    uint32_t nnodes;
    /* of an exec of a pipeline with conditional nodes (its graph built for it alone): the
     * conditional handle of each conditional node i (handles[i]; nnodes of them), and
     * nodes[i] is that node's setter kernel */
    CUgraphConditionalHandle *handles;
    CUstream last_stream; /* compared only, never passed to the driver again */
    CUevent done;         /* recorded after each launch once the entry is multi-stream */
    bool launched, done_valid;
    /* The description its snapshot equals, as (pipeline, generation): a relaunch of an
     * untouched pipeline on this exec skips the comparison. */
    const struct cupool_pipeline *snap_owner;
    uint64_t snap_gen;
    struct pnode *snap; /* the parameters of its last launch (or of the template) */
    unsigned char *snap_args;
    size_t snap_cap, snap_acap, snap_alen;
    /* the bytes the cache counted for it when it was added (cupool__exec_bytes), taken away
     * whole when it is freed: its snapshot may grow meanwhile (a pipeline of the same
     * signature with longer arguments, once cupool_trim() has dropped a changed layout) */
    size_t counted_bytes;
    /* of an exec of a capture: the launch attributes of its kernel nodes that an update does
     * not change (graph_fingerprint); fp_known false when they could not be read */
    uint32_t *fp;
    size_t nfp;
    bool fp_known;
};


struct gentry {
    /* Locked launches and DOT prints using the entry now: it is not evicted meanwhile (a
     * lock-free launch holds one of its execs instead, see fast_claim). Only ever added to
     * and subtracted from: first in the struct, so recycling clears everything after it. */
    _Atomic int busy;
    _Atomic uint64_t last_use; /* cache_clock when last launched: eviction order */
    uint64_t evict_pass;       /* the eviction pass that last failed to evict it */
    bool published;            /* it has been in the table (a thread's hint may name it) */
    /* the device slot its statistics count in: its context's device ordinal, asked once when
     * the miss made it, or CUPOOL_GDEV_UNKNOWN (fixed once published; on the line a lock-free
     * claim's entry_touch reads) */
    uint8_t dev;
    struct gentry *free_next;
    uint64_t hash;
    unsigned long long ctx_id;
    CUcontext ctx;
    uint64_t *sig;
    size_t nsig;
    CUgraph graph;
    CUgraphNode *gnodes;
    uint32_t n;
    struct pnode *tmpl; /* the parameters the graph was built with */
    unsigned char *tmpl_args;
    size_t tmpl_alen;
    struct gexec *execs[EXECS_LIMIT];
    bool captured; /* cupool_capture_launch's: its execs keep launch-attribute fingerprints */
    /* the flags its execs are instantiated with: CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
     * when a kernel gives a priority (structure: part of the signature) */
    unsigned long long inst_flags;
    int nexecs;
    int npending; /* new execs being instantiated for it (counted against the limit) */
    /* conditional nodes in its pipeline: then it has no template graph (a graph holding one
     * can be instantiated once only and not cloned): each exec gets a graph built for it
     * from the launching description, and the setter kernel is that of its context */
    uint32_t ncond;
    struct cupool__setter *setter;
    _Atomic bool multi_stream; /* set under the lock, read without */
    size_t bytes;
    struct gentry *hnext, *prev, *next; /* hash chain; list of all entries */
};


/* ---- deferred destruction ----
 * An exec leaving the cache may still have launches queued on the GPU. Its driver objects are
 * not destroyed under the cache lock (the documentation promises asynchronous release, but a
 * destroy that waited for the GPU would hold up every launch that misses; on the H200 one
 * returned in 22 us with a 2 ms launch queued): they are buried here and destroyed outside
 * the lock, once their completion event says they are done, or, for an exec that never
 * recorded one, when more than GRAVES_BLIND_MAX of those are waiting (the driver frees a
 * still-running exec once it completes). cupool_trim() and unload destroy them all. */
struct grave {
    CUgraphExec exec;
    CUgraph graph; /* the exec's own clone of its template, or a template or capture graph */
    CUevent done;
    bool done_valid; /* done stands for the exec's last launch */
    bool ready;      /* nothing of it can be running: destroy at the next reap */
    CUcontext ctx;
    unsigned long long ctx_id;
};


struct ghint {
    uint64_t hash;   /* the signature's */
    CUstream stream; /* compared only */
    struct gentry *entry;
    struct gexec *exec;
    uint64_t serial; /* the exec's when the hint was taken */
    uint64_t epoch;  /* cache_epoch when the entry was found */
};


struct cupool__ghints {
    uint32_t nsets;     /* a power of two */
    uint64_t *tag;      /* [nsets][HINT_WAYS]: each hint's key | 1; 0: an empty way */
    uint8_t *ref;       /* [nsets]: reference bits, a bit per way */
    uint8_t *hand;      /* [nsets]: the clock's next way */
    struct ghint *h;    /* [nsets][HINT_WAYS] */
};

/* Variables each file defines for the others (documented where they are defined). */
extern struct gentry *cupool__buckets[BUCKETS];
extern size_t cupool__cache_bytes;
extern size_t cupool__cache_entries;
extern size_t cupool__cache_execs;
extern pthread_mutex_t cupool__cache_lock;
extern struct gentry *cupool__entries_head;
extern struct gentry *cupool__free_entries;
extern struct gexec *cupool__free_execs;
extern _Atomic uint64_t cupool__st_compared;
extern _Atomic uint64_t cupool__st_eager;
extern uint64_t cupool__st_evictions;
extern uint64_t cupool__st_hits;
extern _Atomic uint64_t cupool__st_inst;
extern uint64_t cupool__st_launches;
extern uint64_t cupool__st_misses;
extern _Atomic uint64_t cupool__st_nodes_updated;
extern _Atomic uint64_t cupool__st_update_failures;
extern _Atomic uint64_t cupool__st_updates;
/* Refusals of an update, by reason: cuGraphExecUpdate's result info (CU_GRAPH_EXEC_UPDATE_
 * ERROR_*: UR_TOPOLOGY_CHANGED is result 2, ...), every other outcome in UR_OTHER; node updates
 * the driver refused; refusals a new instantiation would not cure (the launch failed). */
enum {
    UR_TOPOLOGY_CHANGED,
    UR_NODE_TYPE_CHANGED,
    UR_FUNCTION_CHANGED,
    UR_PARAMETERS_CHANGED,
    UR_NOT_SUPPORTED,
    UR_UNSUPPORTED_FUNCTION_CHANGE,
    UR_ATTRIBUTES_CHANGED,
    UR_OTHER,
    UR_COUNT
};
extern _Atomic uint64_t cupool__st_update_reason[UR_COUNT];
extern _Atomic uint64_t cupool__st_node_refusals;
extern _Atomic uint64_t cupool__st_update_errors;
/* The counters of one device slot (struct gentry's dev), beside the whole cache's: the first
 * seven under the cache lock, the rest atomic. Each thread's own (hits claimed without the
 * lock, its updates) are in its cache, per slot. */
struct cupool__gdev_stats {
    uint64_t launches;  /* claims through the lock: hits and misses */
    uint64_t hits;      /* of those */
    uint64_t misses;
    uint64_t evictions;
    size_t entries, execs, bytes;
    _Atomic uint64_t inst;
    _Atomic uint64_t updates, nodes_updated; /* of threads without a cache, and captures' */
};
extern struct cupool__gdev_stats cupool__st_dev[CUPOOL_GDEV_SLOTS];
extern pthread_mutex_t cupool__template_lock;
/* a counter alone on its cache line */
typedef CUPOOL_LINE(_Atomic uint64_t) cupool__line_counter;
extern cupool__line_counter cupool__cache_epoch;
extern cupool__line_counter cupool__cache_clock;

/* Each is documented where it is defined. */
/* graph/layout.c */
void cupool__fn_table_trim(void);
CUresult cupool__fninfo_get(struct cupool_pipeline *p, CUfunction f, const struct fninfo **out);
bool cupool__grow(void **p, size_t *cap, size_t need, size_t elem);
void cupool__pipeline_unhold(struct cupool_pipeline *p);

/* graph/builder.c */
uint64_t cupool__mix(uint64_t h, uint64_t v);
CUresult cupool__node_push(struct cupool_pipeline *p, uint32_t type, struct pnode **out,
                           cupool_node_t *number);
void cupool__sig_node(struct cupool_pipeline *p, uint32_t i);
size_t cupool__signature(struct cupool_pipeline *p, uint64_t *hash);

/* graph/refill.c */

/* graph/cache.c */
int cupool__entry_ctx_state(const struct gentry *e);
struct gentry *cupool__entry_struct_get(void);
void cupool__entry_struct_put(struct gentry *e);
void cupool__entry_struct_put_locked(struct gentry *e);
size_t cupool__exec_bytes(const struct gentry *e, struct gexec *x);
void cupool__exec_fp_set(struct gexec *x, uint32_t *fp, size_t n, bool known);
struct gexec *cupool__exec_struct_get(void);
void cupool__exec_struct_put(struct gexec *x);
void cupool__exec_struct_put_locked(struct gexec *x);
bool cupool__fp_same(const struct gexec *x, const uint32_t *fp, size_t n, bool known);
bool cupool__graph_fingerprint(CUgraph g, uint32_t **out, size_t *n);
void cupool__list_push(struct gentry *e);
void cupool__list_unlink(struct gentry *e);
bool cupool__snapshot(struct gexec *x, const struct cupool_pipeline *p);

/* graph/attrs.c */
CUresult cupool__kattr_parse(const CUlaunchAttribute *attrs, unsigned int nattrs,
                             const uint32_t shape[7], struct kattr *out);
CUresult cupool__kattr_support(const struct kattr *ka);
CUresult cupool__kattr_node_set(CUgraphNode node, const struct kattr *ka, uint32_t i);
unsigned cupool__kattr_launch(const struct kattr *ka, CUlaunchAttribute *out);
CUresult cupool__kattr_edges(CUgraph graph, const struct cupool_pipeline *p, uint32_t i,
                             const CUgraphNode *gnodes, CUgraphNode node);
unsigned long long cupool__kattr_inst_flags(const struct cupool_pipeline *p);
#define KATTR_LAUNCH_MAX 8 /* attributes cupool__kattr_launch writes at most */

/* graph/graveyard.c */
bool cupool__entry_evict(struct gentry *e);
void cupool__entry_free(struct gentry *e);
void cupool__entry_unlink(struct gentry *e);
void cupool__evict(void);
void cupool__exec_free(struct gentry *e, struct gexec *x, bool alive);
bool cupool__graph_graves_maintain(void);
struct gentry *cupool__lookup(uint64_t hash, unsigned long long ctx_id, const uint64_t *sig,
                              size_t nsig);
void cupool__objects_destroy(CUgraphExec exec, CUgraph graph, CUevent done, CUcontext ctx,
                             unsigned long long ctx_id);

/* graph/exec.c */
bool cupool__argv_room_grow(struct cupool_pipeline *p);
/* Room in p->argv for the largest node's parameter pointers (grown when short); false: no
 * memory. */
static inline bool cupool__argv_room(struct cupool_pipeline *p)
{
    size_t need = p->max_params ? p->max_params : 1;
    return CUPOOL_LIKELY(p->argvcap >= need) || cupool__argv_room_grow(p);
}
CUresult cupool__clone_take_params(const struct gentry *e, const struct gexec *x,
                                   struct cupool_pipeline *p);
CUresult cupool__eager_launch(struct cupool_pipeline *p, CUstream s);
bool cupool__eager_supported(void);
CUresult cupool__entry_new(struct cupool_pipeline *p, uint64_t hash, size_t nsig,
                           unsigned long long ctx_id, CUcontext ctx, uint8_t dev,
                           const CUstream *upload, struct gentry **out);
CUresult cupool__exec_new(struct gentry *e, const CUstream *upload, struct gexec **out);
CUresult cupool__exec_new_of(struct gentry *e, CUgraph graph, struct cupool_pipeline *p,
                             const CUstream *upload, struct gexec **out);
struct gexec *cupool__exec_pick(struct gentry *e, CUstream stream);
/* Does x hold exactly p's description already (it ran p's last launch, and p has not changed
 * since)? Then a launch needs no comparison and no update: looked at inline before
 * cupool__exec_update, which is called only when this is false. */
static inline bool cupool__exec_holds(const struct gexec *x, const struct cupool_pipeline *p,
                                      bool dirty)
{
    return !dirty && x->snap_owner == p && x->snap_gen == p->gen;
}
CUresult cupool__exec_update(struct gentry *e, struct gexec *x, struct cupool_pipeline *p,
                             bool same, uint64_t *updated, bool *unchanged, bool *patched,
                             uint64_t *compared);
bool cupool__graphs_supported_slow(void);
extern _Atomic int cupool__graphs_known; /* 0 unknown, 1 no, 2 yes */
/* Does the driver table hold every entry point pipelines need? Looked at once: the table is
 * fixed once the library runs. */
static inline bool cupool__graphs_supported(void)
{
    return CUPOOL_LIKELY(atomic_load_explicit(&cupool__graphs_known, CUPOOL_RELAXED) == 2) ||
           cupool__graphs_supported_slow();
}
void cupool__refill_consumed(struct cupool_pipeline *p);
/* The launch consumed the description's marks: it is the last launch's from now on. */
static inline void cupool__refill_launched(struct cupool_pipeline *p, bool dirty)
{
    if (dirty)
        cupool__refill_consumed(p);
    p->hw = p->ncond ? 0 : p->n; /* a description with conditional nodes is written afresh */
}
CUresult cupool__template_clone(struct gentry *e, CUgraph *graph, CUgraphNode **nodes);

/* graph/cond.c */
struct cupool__setter;
CUresult cupool__setter_get(CUcontext ctx, unsigned long long ctx_id, struct cupool__setter **out);
void cupool__setter_put(struct cupool__setter *s);
CUfunction cupool__setter_fn(const struct cupool__setter *s);
void cupool__setters_trim(bool closing);
CUresult cupool__cond_supported(const char *who);
int cupool__cond_pick(const struct pnode *n);
/* exec.c */
CUresult cupool__exec_graph_new(struct gentry *e, struct cupool_pipeline *p, CUgraph *graph,
                                CUgraphNode **nodes, CUgraphConditionalHandle **handles);
void cupool__exec_graph_free(struct gentry *e, CUgraph graph, CUgraphNode *nodes,
                             CUgraphConditionalHandle *handles, uint32_t n);

/* graph/gate.c */

/* graph/stats.c */
void cupool__graph_cache_close(bool all_threads);
void cupool__graph_cache_trim(void);

/* Stamps e as the most recently launched entry. A shared write only when it was not already. */
static inline void entry_touch(struct gentry *e)
{
    uint64_t now = atomic_load_explicit(&cupool__cache_clock.v, CUPOOL_RELAXED);
    if (atomic_load_explicit(&e->last_use, CUPOOL_RELAXED) != now)
        atomic_store_explicit(
            &e->last_use, atomic_fetch_add_explicit(&cupool__cache_clock.v, 1, CUPOOL_RELAXED) + 1,
            CUPOOL_RELAXED);
}

/* Takes ownership of an exec (see struct gexec). Sequentially consistent: fast_claim() and
 * entry_evict() each follow a write with a read of what the other writes (the claim, the
 * cache epoch). */
static inline bool exec_own(struct gexec *x)
{
    bool idle = false;
    return atomic_compare_exchange_strong(&x->busy, &idle, true);
}

static inline void exec_disown(struct gexec *x)
{
    atomic_store_explicit(&x->busy, false, CUPOOL_RELEASE);
}







static inline int execs_max(void)
{
    int m = (int)cupool__cfg.graph_execs_max;
    return m < EXECS_LIMIT ? m : EXECS_LIMIT;
}



/* ---- a thread's hints: the exec it launched last, per signature and stream ----
 * A repeat launch finds the entry and exec to claim here, without the cache lock. The table
 * is set-associative, so that a thread alternating signatures on a stream, or one signature
 * on several streams, keeps a hint for each: sets of HINT_WAYS hints, the set chosen by the
 * (signature hash, stream) key. A full set replaces a hint whose entry was seen before the
 * cache epoch moved (no claim can use it), else, while every way of the set has been used
 * since the clock last passed it, the table doubles (up to HINT_SETS_MAX sets), else the way
 * the set's clock comes to first without its reference bit. Allocated by the thread's first
 * kept launch and kept with its cache (a later thread reusing the cache inherits the hints:
 * they are only hints, each validated by the claim). Read and written only by the thread
 * holding the cache; no stream in it is ever passed to the driver (compared only). */
#define HINT_WAYS 8
/* The stream of a thread's any-stream hint for a signature: the exec it launched last of that
 * signature, whichever the stream (fast_claim). An address of cupool's, so never a stream. */
extern const char cupool__hint_any_stream;
#define HINT_ANY_STREAM ((CUstream)(uintptr_t)&cupool__hint_any_stream)
#define HINT_SETS_MIN 8   /* 64 hints, 3.6 KiB */
#define HINT_SETS_MAX 256 /* 2048 hints, 114 KiB */



static inline uint64_t hint_key(uint64_t hash, CUstream stream)
{
    uint64_t k = hash ^ ((uint64_t)(uintptr_t)stream * UINT64_C(0x9E3779B97F4A7C15));
    return k ^ (k >> 29);
}

static inline uint32_t hint_set(const struct cupool__ghints *t, uint64_t key)
{
    return (uint32_t)(key >> 40) & (t->nsets - 1);
}

/* This thread's hint for hash on stream, or NULL. */
static inline struct ghint *hint_find(struct cupool__ghints *t, uint64_t hash, CUstream stream)
{
    uint64_t key = hint_key(hash, stream);
    uint32_t set = hint_set(t, key);
    uint64_t tag = key | 1, *tags = &t->tag[(size_t)set * HINT_WAYS];
    for (unsigned w = 0; w < HINT_WAYS; w++)
        if (tags[w] == tag) {
            struct ghint *h = &t->h[(size_t)set * HINT_WAYS + w];
            if (CUPOOL_LIKELY(h->hash == hash && h->stream == stream)) {
                if (!(t->ref[set] & (1u << w)))
                    t->ref[set] |= (uint8_t)(1u << w);
                return h;
            }
        }
    return NULL;
}

/* graph/hints.c */
void cupool__hint_put(uint64_t hash, CUstream stream, struct gentry *e, struct gexec *x,
                      uint64_t serial, uint64_t epoch);

#endif
