/* SPDX-License-Identifier: MIT */
/* Modules, functions and kernels: the kernel table and its builtin kernels, kernel launches
 * and their attributes, parameter layout. */
#include "internal.h"

/* ========================================================================================
 * Kernel table and builtin kernels
 * ======================================================================================== */

static void k_spin(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_addone(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_set_u32(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_add_u32(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_trap(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_cluster_width(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_cluster_rank(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_launch_attrs(void **args, const unsigned grid[3], const unsigned block[3]);
static void k_set_cond(void **args, const unsigned grid[3], const unsigned block[3]);

struct fc_kernel g_kernels[FC_MAX_KERNELS] = {
    {"spin", 1, {8}, k_spin},
    {"addone", 1, {8}, k_addone},
    {"set_u32", 2, {8, 4}, k_set_u32},
    {"add_u32", 2, {8, 4}, k_add_u32},
    {"trap", 0, {0}, k_trap},
    {"cluster_width", 1, {8}, k_cluster_width},
    {"cluster_rank", 1, {8}, k_cluster_rank},
    {"launch_attrs", 1, {8}, k_launch_attrs},
    {"cupool_set_cond", 2, {8, 4}, k_set_cond},
};
int g_nkernels = 9;

int kernel_find(const char *name)
{
    for (int i = 0; i < g_nkernels; i++)
        if (strcmp(g_kernels[i].name, name) == 0)
            return i;
    return -1;
}

/* A builtin kernel's pointer argument: n bytes of device memory, else the context breaks
 * with an illegal address, as on the device. */
static uint32_t *kernel_ptr(void *arg, size_t n)
{
    uint64_t p;
    memcpy(&p, arg, sizeof p);
    lock();
    int ok = find_alloc((uintptr_t)p, n, NULL) != NULL;
    if (!ok)
        poison(tl_exec_ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    unlock();
    return ok ? (uint32_t *)(uintptr_t)p : NULL;
}

static void k_spin(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)args, (void)grid, (void)block; /* its duration is its simulated time */
}

static void k_addone(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    uint32_t *p = kernel_ptr(args[0], 4);
    if (p)
        __atomic_fetch_add(p, 1, __ATOMIC_RELAXED);
}

static void k_set_u32(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    uint32_t *p = kernel_ptr(args[0], 4), v;
    memcpy(&v, args[1], 4);
    if (p)
        *p = v;
}

/* cupool's setter kernel: cudaGraphSetConditional(handle, value) from one thread. A value
 * that is no live handle breaks the context, as an illegal address would. */
static void k_set_cond(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    uint64_t h;
    uint32_t v;
    memcpy(&h, args[0], 8);
    memcpy(&v, args[1], 4);
    lock();
    struct fc_cond *c = cond_of((CUgraphConditionalHandle)h);
    if (c)
        c->value = v;
    else
        poison(tl_exec_ctx, CUDA_ERROR_ILLEGAL_ADDRESS);
    unlock();
}

static void k_add_u32(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    uint32_t *p = kernel_ptr(args[0], 4), v;
    memcpy(&v, args[1], 4);
    if (p)
        __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

/* ((u32 *)p)[block] = the width of the block's thread-block cluster, for every block of the
 * grid (1 without a cluster), as %cluster_nctaid.x reads on an sm_90 GPU. */
static void k_cluster_width(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)block;
    uint32_t *p = kernel_ptr(args[0], 4 * (size_t)grid[0]);
    for (unsigned b = 0; p && b < grid[0]; b++)
        p[b] = tl_cluster_x;
}

/* ((u32 *)p)[t] for every thread t of the grid (t = blockIdx.x * blockDim.x + threadIdx.x: a
 * grid and blocks of one dimension) = %clusterid.x << 16 | %cluster_nctarank << 8 |
 * %cluster_ctarank, as an sm_90 GPU reads them (without a cluster: a cluster of one block). */
static void k_cluster_rank(void **args, const unsigned grid[3], const unsigned block[3])
{
    const struct fc_op *op = tl_op;
    unsigned cx = op && op->u.k.cluster[0] ? op->u.k.cluster[0] : 1;
    unsigned cy = op && op->u.k.cluster[1] ? op->u.k.cluster[1] : 1;
    unsigned cz = op && op->u.k.cluster[2] ? op->u.k.cluster[2] : 1;
    size_t n = (size_t)grid[0] * block[0];
    uint32_t *p = kernel_ptr(args[0], 4 * n);
    for (unsigned b = 0; p && b < grid[0]; b++)
        for (unsigned t = 0; t < block[0]; t++)
            p[(size_t)b * block[0] + t] = (b / cx) << 16 | (cx * cy * cz) << 8 | (b % cx);
}

/* ((u32 *)p)[0 .. FAKECUDA_LAUNCH_ATTRS_WORDS - 1] = the launch attributes the kernel ran with
 * (fakecuda.h lists the words). */
static void k_launch_attrs(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)grid, (void)block;
    const struct fc_op *op = tl_op;
    uint32_t *p = kernel_ptr(args[0], 4 * FAKECUDA_LAUNCH_ATTRS_WORDS);
    if (!p || !op)
        return;
    uint32_t w[FAKECUDA_LAUNCH_ATTRS_WORDS] = {0};
    for (int i = 0; i < 3; i++) {
        w[FAKECUDA_LA_CLUSTER_X + i] = op->u.k.cluster[i] ? op->u.k.cluster[i] : 1;
        w[FAKECUDA_LA_PREFERRED_CLUSTER_X + i] = op->u.k.preferred_cluster[i];
    }
    w[FAKECUDA_LA_COOPERATIVE] = op->u.k.cooperative != 0;
    w[FAKECUDA_LA_PRIORITY] = (uint32_t)op->u.k.run_priority;
    w[FAKECUDA_LA_PROGRAMMATIC] = op->u.k.programmatic != 0;
    w[FAKECUDA_LA_MEM_SYNC_DOMAIN] = (uint32_t)op->u.k.mem_sync_domain;
    w[FAKECUDA_LA_CLUSTER_POLICY] = (uint32_t)op->u.k.cluster_policy;
    w[FAKECUDA_LA_SYNC_MAP_DEFAULT] = op->u.k.sync_map[0];
    w[FAKECUDA_LA_SYNC_MAP_REMOTE] = op->u.k.sync_map[1];
    memcpy(p, w, sizeof w);
}

/* As on an H200 (driver 580.159): a trapped kernel fails with CUDA_ERROR_LAUNCH_FAILED and
 * leaves the whole process unusable ("an inconsistent state", cuda.h): every context. */
static void k_trap(void **args, const unsigned grid[3], const unsigned block[3])
{
    (void)args, (void)grid, (void)block;
    lock();
    for (struct fc_ctx *c = g_contexts; c; c = c->all_next)
        poison(c, CUDA_ERROR_LAUNCH_FAILED);
    unlock();
}

/* ========================================================================================
 * Modules and kernel launches
 * ======================================================================================== */

/* A CUmodule from the caller: garbage aborts, an unloaded module is INVALID_HANDLE. */
static CUresult get_module(CUmodule h, struct fc_module **out)
{
    if (!h)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!pool_owns(&g_module_pool, h))
        die("%p is not a module", (void *)h);
    struct fc_module *m = (struct fc_module *)h;
    if (m->h.state != ST_LIVE || m->ctx->dying)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = m;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    ENTER(cuModuleLoadData, 1);
    struct fc_ctx *c;
    if (!module || !image)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_module *m = pool_get(&g_module_pool);
    if (!m)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    m->ctx = c;
    m->next = c->modules;
    if (c->modules)
        c->modules->prev = m;
    c->modules = m;
    *module = (CUmodule)m;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    ENTER(cuModuleUnload, 1);
    struct fc_module *m;
    CUresult r = get_module(hmod, &m);
    if (r != CUDA_SUCCESS)
        return leave(r);
    struct fc_ctx *c = m->ctx;
    if (c->sticky)
        return leave(c->sticky);
    if (m->prev)
        m->prev->next = m->next;
    else
        c->modules = m->next;
    if (m->next)
        m->next->prev = m->prev;
    pool_put(&g_module_pool, m, ST_DESTROYED);
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    ENTER(cuModuleGetFunction, 1);
    struct fc_module *m;
    if (!hfunc || !name)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_module(hmod, &m);
    if (r == CUDA_SUCCESS && m->ctx->sticky)
        r = m->ctx->sticky;
    if (r != CUDA_SUCCESS)
        return leave(r);
    int slot = kernel_find(name);
    if (slot < 0)
        return leave(CUDA_ERROR_NOT_FOUND);
    struct fc_function *f = &m->fn[slot];
    f->magic = MAGIC_FUNC;
    f->slot = slot;
    f->mod = m;
    *hfunc = (CUfunction)f;
    return leave(CUDA_SUCCESS);
}

/* A CUfunction: it lives inside its module's memory, so the module pool vouches for it. */
CUresult get_function(CUfunction h, struct fc_function **out)
{
    if (!h)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fc_module *m = (struct fc_module *)pool_container(&g_module_pool, h);
    uintptr_t off = m ? (uintptr_t)h - (uintptr_t)m->fn : 1;
    if (!m || (uintptr_t)h < (uintptr_t)m->fn || off % sizeof(struct fc_function) != 0 ||
        off / sizeof(struct fc_function) >= FC_MAX_KERNELS ||
        ((struct fc_function *)(void *)h)->magic != MAGIC_FUNC)
        die("%p is not a function", (void *)h);
    struct fc_function *f = (struct fc_function *)(void *)h;
    if (m->h.state != ST_LIVE || m->ctx->dying)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = f;
    return CUDA_SUCCESS;
}

/* A kernel launch of fn with its arguments copied now (as the driver takes them). */
CUresult kernel_op(const struct fc_function *fn, const unsigned grid[3],
                          const unsigned block[3], void **kernelParams, struct fc_op **out)
{
    if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
        (uint64_t)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    const struct fc_kernel *k = &g_kernels[fn->slot];
    if (k->nparams > 0 && !kernelParams)
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = 0;
    for (int i = 0; i < k->nparams; i++) {
        if (!kernelParams[i])
            return CUDA_ERROR_INVALID_VALUE;
        total += (k->sizes[i] + 15) & ~(size_t)15;
    }
    struct fc_op *op = op_new(OP_KERNEL);
    unsigned char *blob = op && total ? malloc(total) : NULL;
    if (!op || (total && !blob)) {
        free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t off = 0;
    for (int i = 0; i < k->nparams; i++) {
        memcpy(blob + off, kernelParams[i], k->sizes[i]); /* arguments are taken at launch */
        op->u.k.args[i] = blob + off;
        off += (k->sizes[i] + 15) & ~(size_t)15;
    }
    op->u.k.blob = blob;
    op->u.k.blob_len = total;
    op->u.k.fn = k->fn;
    op->u.k.slot = fn->slot;
    memcpy(op->u.k.grid, grid, sizeof op->u.k.grid);
    memcpy(op->u.k.block, block, sizeof op->u.k.block);
    if (k->fn == k_spin && k->nparams >= 1 && k->sizes[0] >= sizeof(uint64_t))
        memcpy(&op->duration, op->u.k.args[0], sizeof op->duration);
    *out = op;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    ENTER(cuLaunchKernel, 1);
    struct fc_function *fn;
    struct fc_stream *s;
    (void)sharedMemBytes;
    if (extra)
        return leave(CUDA_ERROR_NOT_SUPPORTED);
    CUresult r = get_function(f, &fn);
    if (r == CUDA_SUCCESS)
        r = get_stream(hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (fn->mod->ctx != s->ctx)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    const unsigned grid[3] = {gridDimX, gridDimY, gridDimZ};
    const unsigned block[3] = {blockDimX, blockDimY, blockDimZ};
    struct fc_op *op;
    r = kernel_op(fn, grid, block, kernelParams, &op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(submit(s, op, 0));
}

/* Does the launch shape suit the cluster dimension (which must divide the grid)? */
int kernel_shape_fits(const struct fc_op *op)
{
    for (int i = 0; i < 3; i++)
        if (op->u.k.cluster[i] && op->u.k.grid[i] % op->u.k.cluster[i])
            return 0;
    return 1;
}

/* One launch attribute of a kernel launch (cuLaunchKernelEx) or kernel node
 * (cuGraphKernelNodeSetAttribute, graph_node): the ones the simulation models are kept on the
 * operation (and, under capture, on the kernel node it becomes). A cluster dimension must be
 * at least 1 in each dimension, divide the grid and hold at most 8 blocks, the portable size
 * (else CUDA_ERROR_INVALID_CLUSTER_SIZE, which an H200 gives for a cluster of 0); a preferred cluster dimension must be a multiple of it and divide the grid; a
 * cluster scheduling policy, memory sync domain and domain map must be known values;
 * programmatic stream serialization is for launches only (a graph says it with an edge of
 * type CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC); other attributes are refused
 * (CUDA_ERROR_NOT_SUPPORTED for a launch, CUDA_ERROR_INVALID_VALUE for a node). A cooperative
 * grid larger than the device could hold at once is not checked. */
CUresult kernel_attr_set(struct fc_op *op, CUlaunchAttributeID id, const CUlaunchAttributeValue *v,
                         int graph_node)
{
    switch ((int)id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: {
        unsigned d[3] = {v->clusterDim.x, v->clusterDim.y, v->clusterDim.z};
        /* a cluster of 0 blocks: CUDA_ERROR_INVALID_CLUSTER_SIZE on an H200 (driver 580.159);
         * one that does not divide the grid, or above the portable 8 blocks, is taken to be
         * refused alike */
        if (!d[0] || !d[1] || !d[2] || op->u.k.grid[0] % d[0] || op->u.k.grid[1] % d[1] ||
            op->u.k.grid[2] % d[2] || (uint64_t)d[0] * d[1] * d[2] > 8)
            return CUDA_ERROR_INVALID_CLUSTER_SIZE;
        memcpy(op->u.k.cluster, d, sizeof d);
        return CUDA_SUCCESS;
    }
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION: {
        unsigned d[3] = {v->preferredClusterDim.x, v->preferredClusterDim.y,
                         v->preferredClusterDim.z};
        for (int i = 0; i < 3; i++) {
            unsigned c = op->u.k.cluster[i] ? op->u.k.cluster[i] : 1;
            if ((d[0] | d[1] | d[2]) != 0 && (!d[i] || d[i] % c || op->u.k.grid[i] % d[i]))
                return CUDA_ERROR_INVALID_VALUE;
        }
        memcpy(op->u.k.preferred_cluster, d, sizeof d);
        return CUDA_SUCCESS;
    }
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        op->u.k.cooperative = v->cooperative != 0;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if ((unsigned)v->clusterSchedulingPolicyPreference >
            (unsigned)CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
            return CUDA_ERROR_INVALID_VALUE;
        op->u.k.cluster_policy = (int)v->clusterSchedulingPolicyPreference;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        if ((unsigned)v->memSyncDomain > (unsigned)CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
            return CUDA_ERROR_INVALID_VALUE;
        op->u.k.mem_sync_domain = (int)v->memSyncDomain;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        if (v->memSyncDomainMap.default_ > 3 || v->memSyncDomainMap.remote > 3)
            return CUDA_ERROR_INVALID_VALUE; /* four domains (compute capability 9.0) */
        op->u.k.sync_map[0] = v->memSyncDomainMap.default_;
        op->u.k.sync_map[1] = v->memSyncDomainMap.remote;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        op->u.k.priority = v->priority;
        op->u.k.priority_set = 1;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        if (graph_node)
            return CUDA_ERROR_INVALID_VALUE; /* "valid for launches" (cuda.h) */
        op->u.k.programmatic = v->programmaticStreamSerializationAllowed != 0;
        return CUDA_SUCCESS;
    default:
        return graph_node ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* A kernel node's attribute as cuGraphKernelNodeGetAttribute reads it (never set: 0, a
 * cluster of 1 x 1 x 1). */
CUresult kernel_attr_get(const struct fc_op *op, CUlaunchAttributeID id, CUlaunchAttributeValue *v)
{
    memset(v, 0, sizeof *v);
    switch ((int)id) {
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        v->clusterDim.x = op->u.k.cluster[0] ? op->u.k.cluster[0] : 1;
        v->clusterDim.y = op->u.k.cluster[1] ? op->u.k.cluster[1] : 1;
        v->clusterDim.z = op->u.k.cluster[2] ? op->u.k.cluster[2] : 1;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        v->preferredClusterDim.x = op->u.k.preferred_cluster[0];
        v->preferredClusterDim.y = op->u.k.preferred_cluster[1];
        v->preferredClusterDim.z = op->u.k.preferred_cluster[2];
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        v->cooperative = op->u.k.cooperative;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        v->clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)op->u.k.cluster_policy;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        v->memSyncDomain = (CUlaunchMemSyncDomain)op->u.k.mem_sync_domain;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        v->memSyncDomainMap.default_ = op->u.k.sync_map[0];
        v->memSyncDomainMap.remote = op->u.k.sync_map[1];
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        v->priority = op->u.k.priority;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* A kernel node's attributes, onto new parameters of the node (the parameters change, the
 * attributes stay). */
void kernel_attrs_copy(struct fc_op *to, const struct fc_op *from)
{
    memcpy(to->u.k.cluster, from->u.k.cluster, sizeof to->u.k.cluster);
    memcpy(to->u.k.preferred_cluster, from->u.k.preferred_cluster,
           sizeof to->u.k.preferred_cluster);
    to->u.k.cooperative = from->u.k.cooperative;
    to->u.k.cluster_policy = from->u.k.cluster_policy;
    to->u.k.mem_sync_domain = from->u.k.mem_sync_domain;
    memcpy(to->u.k.sync_map, from->u.k.sync_map, sizeof to->u.k.sync_map);
    to->u.k.priority = from->u.k.priority;
    to->u.k.priority_set = from->u.k.priority_set;
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    ENTER(cuLaunchKernelEx, 1);
    struct fc_function *fn;
    struct fc_stream *s;
    if (!config || extra || (config->numAttrs && !config->attrs))
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = get_function(f, &fn);
    if (r == CUDA_SUCCESS)
        r = get_stream(config->hStream, &s, 1);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (fn->mod->ctx != s->ctx)
        return leave(CUDA_ERROR_INVALID_HANDLE);
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    struct fc_op *op = NULL;
    r = kernel_op(fn, grid, block, kernelParams, &op);
    for (unsigned i = 0; r == CUDA_SUCCESS && i < config->numAttrs; i++)
        r = kernel_attr_set(op, config->attrs[i].id, &config->attrs[i].value, 0);
    if (r != CUDA_SUCCESS && op)
        op_free(op);
    if (r != CUDA_SUCCESS)
        return leave(r);
    return leave(submit(s, op, 0));
}

/* Parameter layout as the H200 reports it: natural alignment (at most 8), in order;
 * CUDA_ERROR_INVALID_VALUE past the last parameter. */
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    ENTER(cuFuncGetParamInfo, 1);
    struct fc_function *fn;
    CUresult r = get_function(func, &fn);
    if (r != CUDA_SUCCESS)
        return leave(r);
    const struct fc_kernel *k = &g_kernels[fn->slot];
    if (paramIndex >= (size_t)k->nparams)
        return leave(CUDA_ERROR_INVALID_VALUE);
    size_t off = 0;
    for (size_t i = 0; i <= paramIndex; i++) {
        size_t a = k->sizes[i] >= 8 ? 8 : k->sizes[i] >= 4 ? 4 : k->sizes[i] >= 2 ? 2 : 1;
        off = (off + a - 1) & ~(a - 1);
        if (i == paramIndex)
            break;
        off += k->sizes[i];
    }
    if (paramOffset)
        *paramOffset = off;
    if (paramSize)
        *paramSize = k->sizes[paramIndex];
    return leave(CUDA_SUCCESS);
}
