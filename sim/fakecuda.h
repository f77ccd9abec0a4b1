/* SPDX-License-Identifier: MIT */
/*
 * fakecuda: a simulated CUDA driver library for cupool's tests and for running cupool on
 * machines without a GPU.
 *
 * fakecuda.so exports the driver API subset cupool and its tests use, both by name and
 * through cuGetProcAddress_v2, so an ordinary driver-API program runs on it unchanged when it
 * is loaded as the driver: through cupool (CUPOOL_DRIVER_PATH), or, for a program linked with
 * -lcuda, through a libcuda.so.1 symbolic link to it in a directory on LD_LIBRARY_PATH. It reproduces what the real driver showed on an H200 (driver 580.159, CUDA 13.0):
 *  - stream handles are reused: a stream created right after a destroy gets the same pointer;
 *    event handles are not reused right away;
 *  - after cuDevicePrimaryCtxReset (or the release of its last reference, which destroys it)
 *    the primary CUcontext pointer stays the same and its id changes at the next retain;
 *    cuCtxGetId(NULL) on a thread whose current context was reset returns
 *    CUDA_ERROR_CONTEXT_IS_DESTROYED;
 *  - any call on a stream or event of a reset context, or on a destroyed handle, crashes the
 *    real driver: the simulation aborts with a message naming the call instead; so does
 *    instantiating (or launching) a graph whose event node names an event destroyed since
 *    (cuGraphInstantiateWithFlags crashed on an H200);
 *  - cuGetProcAddress_v2 returns CUDA_SUCCESS with status SYMBOL_NOT_FOUND (unknown name) or
 *    VERSION_NOT_SUFFICIENT (version older than the entry point), pfn NULL;
 *  - stream priorities range from 0 (least) to -5 (greatest); out-of-range values are clamped;
 *  - destroying a stream with queued work returns at once; the work still runs (at the next
 *    context-wide synchronisation here); a new stream does not wait for it;
 *  - in a child forked after cuInit every call returns CUDA_ERROR_NOT_INITIALIZED;
 *  - graphs (cuGraphCreate, kernel, memset, 1D memcpy, host, empty, event record and wait
 *    nodes, explicit dependencies, or a capture's operations as a chain) instantiate into
 *    execs whose launches run the nodes in a topological order on the stream; launches of one
 *    exec never overlap (a launch on another stream waits for the previous one); an exec
 *    accepts new arguments, launch shape, shared memory and even another function for a
 *    kernel node, and a new value, element size or destination for a memset node;
 *    cuGraphExecUpdate refuses a changed topology; cuFuncGetParamInfo gives naturally
 *    aligned offsets and CUDA_ERROR_INVALID_VALUE past the last parameter;
 *  - cuLaunchKernelEx takes the launch attributes cluster dimension (at least 1 in each
 *    dimension, dividing the grid, at most 8 blocks), preferred cluster dimension (a multiple
 *    of it, dividing the grid), cooperative, cluster scheduling policy, memory sync domain and
 *    domain map (known values only), priority and programmatic stream serialization (anything
 *    else: CUDA_ERROR_NOT_SUPPORTED); cuGraphKernelNodeSetAttribute takes the same but
 *    programmatic stream serialization, which a graph expresses as an edge of type
 *    CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC between two kernel nodes (cuGraphAddDependencies
 *    from 12030 with edge data; a capture makes one for such a launch after a kernel), and
 *    refuses what it does not take with CUDA_ERROR_INVALID_VALUE; a capture keeps them on its
 *    kernel nodes (cuGraphKernelNodeGetAttribute); an exec keeps the attributes its nodes had
 *    when it was instantiated; a kernel node's parameters (graph or exec) whose grid the
 *    node's cluster dimension does not divide are refused with CUDA_ERROR_INVALID_VALUE,
 *    other parameter updates keep the node's attributes; a cooperative grid too large for
 *    the device is not checked;
 *  - a kernel runs at its priority attribute when launched with one, else at its stream's; in
 *    a graph at its node's priority attribute only when the exec was instantiated with
 *    CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (a captured node's is the capturing
 *    stream's unless the launch gave one), else at the launch stream's (cuda.h);
 *  - cuGraphExecUpdate refuses a changed topology (edge types included), a changed node type,
 *    and, as documented, a changed cooperative attribute, or a changed priority in an exec
 *    instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
 *    (CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED), naming the node of the new graph; it
 *    accepts a changed cluster dimension but does not apply it to an exec that has been
 *    launched (seen on an H200), nor, taken as alike, a changed preferred cluster dimension,
 *    cluster scheduling policy, memory sync domain or domain map;
 *  - cuGraphInstantiateWithParams with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD uploads the exec on
 *    hUploadStream (a stream of the graph's context, not capturing:
 *    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED otherwise) and sets result_out; the flag is refused
 *    by cuGraphInstantiateWithFlags (documented as WithParams only); cuGraphUpload uploads an
 *    exec; the first launch of an exec not uploaded uploads it (fakecuda_graph_uploads);
 *  - conditional nodes (cuGraphConditionalHandleCreate, cuGraphAddNode of type
 *    CU_GRAPH_NODE_TYPE_CONDITIONAL, IF with 1 or 2 bodies, SWITCH with 1 or more; WHILE and
 *    every other node type through cuGraphAddNode: CUDA_ERROR_NOT_SUPPORTED): the node's body
 *    graphs come back in phGraph_out and take kernel, empty, memset, memcpy and conditional
 *    nodes (others: CUDA_ERROR_NOT_SUPPORTED at the add); a graph holding a conditional node,
 *    in itself or in a body, is instantiated once only and cannot be cloned
 *    (CUDA_ERROR_NOT_SUPPORTED, as on an H200); the builtin kernel cupool_set_cond sets a
 *    handle's value as cudaGraphSetConditional does on the device; at its turn in a launch the
 *    node runs body[value] of a SWITCH (nothing past the last body), body 0 of an IF for a
 *    nonzero value and body 1 (if any) for zero; CU_GRAPH_COND_ASSIGN_DEFAULT gives the handle
 *    its default value at the start of every launch; cuGraphExec*NodeSetParams address the
 *    nodes inside bodies by the body graphs' nodes; cuGraphExecUpdate requires the same
 *    conditional type, body count and body nodes (TOPOLOGY_CHANGED otherwise), and the exec
 *    then runs the new graph's handles while answering to its own graph's nodes;
 *  - a trapped kernel fails with CUDA_ERROR_LAUNCH_FAILED and breaks every context.
 * Work is executed lazily: a stream's queued operations run in order when the stream, an
 * event recorded on it, or the context is synchronised, when a synchronous copy runs, or when
 * cuStreamQuery/cuEventQuery finds their simulated duration elapsed. Kernels run as host
 * functions looked up by name in a table (builtins below, or fakecuda_register_kernel()).
 *
 * Environment, read at the first call (FAKECUDA_DEVICES at cuInit):
 *   FAKECUDA_DEVICES=N            devices, 1..8 (default 1); 0: cuInit returns CUDA_ERROR_NO_DEVICE
 *   FAKECUDA_STUB=1               act as the toolkit's stub libcuda: every entry point returns
 *                                 CUDA_ERROR_STUB_LIBRARY
 *   FAKECUDA_DRIVER_VERSION=N     what cuDriverGetVersion reports (default 13000)
 *   FAKECUDA_HIDE=name[,name...]  cuGetProcAddress reports these base names as not found
 *   FAKECUDA_TEARDOWN_AT_EXIT=1   see fakecuda_teardown()
 *   FAKECUDA_DESTROY_WAITS=1      cuGraphExecDestroy of an exec with launches still queued
 *                                 waits until they have run (read at each such destroy; see
 *                                 fakecuda_exec_destroy_waits())
 * The control functions below are exported by fakecuda.so; tests reach them with dlsym()
 * on the driver library, so the same tests run against the real driver (where they are absent).
 */
#ifndef FAKECUDA_H
#define FAKECUDA_H

#include <cuda.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Streams / events created and not yet destroyed (a context reset destroys its handles). */
int fakecuda_live_streams(void);
int fakecuda_live_events(void);

/** Bytes of host memory in the simulation's handle tables: they grow as handles are created
 *  (destroyed events are held back before reuse, as the real driver does not reuse their
 *  values at once) and never shrink. Lets a test tell the driver's memory from its own. */
size_t fakecuda_slab_bytes(void);
/** Graph launches that had to wait for a launch of the same exec still running on another
 * stream (the driver serialises those silently; see docs/graph-cache.md). */
unsigned long fakecuda_exec_overlaps(void);
/* Instantiations made while another thread was inside cuGraphLaunch (or the reverse): on an
 * H200 such an overlap can stall both calls until the queued work drains. */
unsigned long fakecuda_instantiate_launch_overlaps(void);
/** Instantiations of a graph an exec of which had been launched before (on an H200 one such
 * instantiation, while that exec ran and another thread synchronised, can stall until the
 * queued work drains). */
unsigned long fakecuda_instantiations_of_launched_graphs(void);
/** Graphs alive: created (cuGraphCreate, cuGraphClone, a capture) and not destroyed (a
 *  context's reset or destruction destroys its own). */
int fakecuda_live_graphs(void);
/** Graph execs alive: instantiated and not destroyed. */
int fakecuda_live_execs(void);
/** cuGraphExecDestroy calls on an exec whose launches were still queued (the destroy may
 * wait for them: FAKECUDA_DESTROY_WAITS=1 makes it). */
unsigned long fakecuda_exec_destroy_waits(void);
/** Graph execs uploaded since load: at instantiation (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD), by
 * cuGraphUpload, or by the first launch of an exec not uploaded before. */
unsigned long fakecuda_graph_uploads(void);
/** Of those, the uploads a launch made (the first launch of an exec not uploaded before). */
unsigned long fakecuda_graph_launch_uploads(void);
/** The next `count` cuGraphExecUpdate calls that would succeed are refused instead with
 * `reason` (result CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, errorNode the new graph's first
 * node), for tests of what a caller does with each reason. CU_GRAPH_EXEC_UPDATE_SUCCESS or
 * count 0: none. */
void fakecuda_exec_update_refuse(CUgraphExecUpdateResult reason, unsigned count);

/** Number of calls made to an entry point, by its base name without _v2/_ptsz suffixes
 *  (e.g. "cuStreamCreateWithPriority", "cuStreamDestroy"), since load or the last reset. */
unsigned long fakecuda_calls(const char *entry);
/** Total calls to any entry point. */
unsigned long fakecuda_calls_total(void);
/** Calls of `entry` made by the calling thread (counted as fakecuda_calls()). */
unsigned long fakecuda_calls_here(const char *entry);
/** Zeroes the per-entry and total counters and fakecuda_calls_after_teardown(). */
void fakecuda_reset_counters(void);

/**
 * Fault injection: after `skip` more calls to `entry` (base name, as above) succeed, the next
 * `count` calls (-1: all later calls) return `err` with no effect. One fault per entry point;
 * a new call replaces it. entry "*" matches every entry point. An unknown name is reported
 * on stderr and ignored.
 */
void fakecuda_fault(const char *entry, unsigned long skip, long count, CUresult err);
void fakecuda_fault_clear(void);

/**
 * Simulated driver teardown (what the process-exit path of the real driver does): every later
 * call returns CUDA_ERROR_DEINITIALIZED. With strict mode on, any call after teardown prints
 * the entry point to stderr and aborts, so a test fails if its code calls a torn-down driver.
 * FAKECUDA_TEARDOWN_AT_EXIT=1 in the environment tears down from an atexit handler registered
 * at cuInit (as the real driver's own exit path does), strict.
 */
void fakecuda_teardown(void);
void fakecuda_set_strict_teardown(int on);
unsigned long fakecuda_calls_after_teardown(void);

/** Makes the context's state sticky-broken, as after an illegal address: every later call that
 *  touches that context (its streams, events, memory, launches; cuCtxSynchronize; destroying
 *  its streams and events; cuCtxGetId of it as the current context) returns err. Only this
 *  context: a control for tests of isolation (the real driver breaks the whole process).
 *  ctx NULL: the calling thread's current context. The builtin kernel "trap" does this to
 *  every context; cuDevicePrimaryCtxReset clears a primary context. */
void fakecuda_poison_context(CUcontext ctx, CUresult err);

/** Host implementation of a kernel: args[i] points at the i-th argument's bytes as copied at
 *  launch; grid/block are the launch dimensions. */
typedef void (*fakecuda_kernel_fn)(void **args, const unsigned int grid[3],
                                   const unsigned int block[3]);
/**
 * Registers a kernel so cuModuleGetFunction(name) finds it in any module: nparams arguments
 * with the given sizes in bytes. Builtins, always present:
 *   spin(uint64 ns)                 takes ns of simulated time, does nothing else
 *   addone(uint64 ptr)              *(uint32 *)ptr += 1
 *   set_u32(uint64 ptr, uint32 v)   *(uint32 *)ptr = v
 *   add_u32(uint64 ptr, uint32 v)   *(uint32 *)ptr += v
 *   trap()                          poisons every context with CUDA_ERROR_LAUNCH_FAILED (on an
 *                                   H200 a trap leaves the whole process unusable)
 *   cluster_width(uint64 ptr)       ((uint32 *)ptr)[b] = the launch's cluster width (x; 1
 *                                   without a cluster) for every block b of the grid
 *   cluster_rank(uint64 ptr)        ((uint32 *)ptr)[t] = %clusterid.x << 16 |
 *                                   %cluster_nctarank << 8 | %cluster_ctarank for every thread
 *                                   t = blockIdx.x * blockDim.x + threadIdx.x (a grid and
 *                                   blocks of one dimension; no cluster: one block each)
 *   launch_attrs(uint64 ptr)        ((uint32 *)ptr)[FAKECUDA_LA_*] = the launch attributes the
 *                                   kernel ran with (FAKECUDA_LAUNCH_ATTRS_WORDS words)
 *   cupool_set_cond(uint64 handle, uint32 v)
 *                                   cudaGraphSetConditional(handle, v): the conditional
 *                                   handle's value for the rest of this launch (not a live
 *                                   handle: the context breaks, CUDA_ERROR_ILLEGAL_ADDRESS)
 * Returns 0, or -1 if the table is full or the arguments are bad.
 */
int fakecuda_register_kernel(const char *name, int nparams, const size_t *param_sizes,
                             fakecuda_kernel_fn fn);

/** The words the builtin kernel launch_attrs writes: the cluster dimension (1 x 1 x 1
 * without one), cooperative (0 or 1), the priority the kernel ran at (a signed value:
 * see above), whether it could overlap the kernel before it (1: programmatic stream
 * serialization at launch, or a programmatic edge in a graph), the memory sync domain, the
 * cluster scheduling policy, the preferred cluster dimension (0 without one), the memory
 * sync domain map (default, remote). */
enum fakecuda_launch_attrs_word {
    FAKECUDA_LA_CLUSTER_X = 0,
    FAKECUDA_LA_CLUSTER_Y,
    FAKECUDA_LA_CLUSTER_Z,
    FAKECUDA_LA_COOPERATIVE,
    FAKECUDA_LA_PRIORITY,
    FAKECUDA_LA_PROGRAMMATIC,
    FAKECUDA_LA_MEM_SYNC_DOMAIN,
    FAKECUDA_LA_CLUSTER_POLICY,
    FAKECUDA_LA_PREFERRED_CLUSTER_X,
    FAKECUDA_LA_PREFERRED_CLUSTER_Y,
    FAKECUDA_LA_PREFERRED_CLUSTER_Z,
    FAKECUDA_LA_SYNC_MAP_DEFAULT,
    FAKECUDA_LA_SYNC_MAP_REMOTE,
    FAKECUDA_LAUNCH_ATTRS_WORDS
};

#ifdef __cplusplus
}
#endif
#endif /* FAKECUDA_H */
