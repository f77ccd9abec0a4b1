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

struct fc_kernel g_kernels[FC_MAX_KERNELS] = {
    {"spin", 1, {8}, k_spin},
    {"addone", 1, {8}, k_addone},
    {"set_u32", 2, {8, 4}, k_set_u32},
    {"add_u32", 2, {8, 4}, k_add_u32},
    {"trap", 0, {0}, k_trap},
    {"cluster_width", 1, {8}, k_cluster_width},
};
int g_nkernels = 6;

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

/* Launch attributes of a kernel launch (cuLaunchKernelEx): the ones the simulation models are
 * kept on the operation (and, under capture, on the kernel node it becomes); unknown ones are
 * refused. A cluster dimension must divide the grid. */
static CUresult launch_attrs(struct fc_op *op, const CUlaunchAttribute *attrs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        const CUlaunchAttributeValue *v = &attrs[i].value;
        switch (attrs[i].id) {
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            if (!v->clusterDim.x || !v->clusterDim.y || !v->clusterDim.z ||
                op->u.k.grid[0] % v->clusterDim.x || op->u.k.grid[1] % v->clusterDim.y ||
                op->u.k.grid[2] % v->clusterDim.z ||
                (uint64_t)v->clusterDim.x * v->clusterDim.y * v->clusterDim.z > 8)
                return CUDA_ERROR_INVALID_VALUE;
            op->u.k.cluster[0] = v->clusterDim.x;
            op->u.k.cluster[1] = v->clusterDim.y;
            op->u.k.cluster[2] = v->clusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
            op->u.k.preferred_cluster[0] = v->preferredClusterDim.x;
            op->u.k.preferred_cluster[1] = v->preferredClusterDim.y;
            op->u.k.preferred_cluster[2] = v->preferredClusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            op->u.k.cooperative = v->cooperative;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
            op->u.k.cluster_policy = (int)v->clusterSchedulingPolicyPreference;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
            op->u.k.mem_sync_domain = (int)v->memSyncDomain;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            op->u.k.priority = v->priority;
            break;
        default:
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    return CUDA_SUCCESS;
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
    struct fc_op *op;
    r = kernel_op(fn, grid, block, kernelParams, &op);
    if (r == CUDA_SUCCESS && (r = launch_attrs(op, config->attrs, config->numAttrs)) != CUDA_SUCCESS)
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
