/* SPDX-License-Identifier: MIT */
/* Device memory (host memory: a CUdeviceptr is its address), copies and memsets. */
#include "internal.h"

/* ========================================================================================
 * Memory (device memory is host memory; a CUdeviceptr is its address)
 * ======================================================================================== */

/* The allocation of a live context holding [p, p + n), or NULL. */
struct fc_alloc *find_alloc(uintptr_t p, size_t n, struct fc_ctx **owner)
{
    for (struct fc_ctx *c = g_contexts; c; c = c->all_next) {
        if (!ctx_alive(c))
            continue;
        for (struct fc_alloc *a = c->allocs; a; a = a->next) {
            uintptr_t base = (uintptr_t)a->base;
            if (p >= base && p - base <= a->size && n <= a->size - (p - base) &&
                (n > 0 || p < base + a->size)) {
                if (owner)
                    *owner = c;
                return a;
            }
        }
    }
    return NULL;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    ENTER(cuMemAlloc, 1);
    struct fc_ctx *c;
    if (!dptr || bytesize == 0)
        return leave(CUDA_ERROR_INVALID_VALUE);
    CUresult r = need_healthy_ctx(&c);
    if (r != CUDA_SUCCESS)
        return leave(r);
    if (bytesize > SIZE_MAX - 255)
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    size_t rounded = (bytesize + 255) & ~(size_t)255; /* device allocations are 256-aligned */
    struct fc_alloc *a = malloc(sizeof *a);
    unsigned char *p = a ? aligned_alloc(256, rounded) : NULL;
    if (!p) {
        free(a);
        return leave(CUDA_ERROR_OUT_OF_MEMORY);
    }
    memset(p, 0, rounded);
    a->base = p;
    a->size = bytesize;
    a->next = c->allocs;
    c->allocs = a;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return leave(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER(cuMemFree, 1);
    struct fc_ctx *c;
    if (!dptr)
        return leave(CUDA_SUCCESS); /* as the real driver */
    struct fc_alloc *a = find_alloc((uintptr_t)dptr, 0, &c);
    if (!a || (uintptr_t)a->base != (uintptr_t)dptr)
        return leave(CUDA_ERROR_INVALID_VALUE);
    if (c->sticky)
        return leave(c->sticky);
    struct fc_alloc **link = &c->allocs;
    while (*link != a)
        link = &(*link)->next;
    *link = a->next;
    free(a->base);
    free(a);
    return leave(CUDA_SUCCESS);
}

/* Synchronous copies and memsets: everything queued in the context runs first. */
static CUresult sync_prologue(struct fc_ctx **c)
{
    CUresult r = need_healthy_ctx(c);
    if (r == CUDA_SUCCESS)
        r = ctx_drain(*c, 0, DRAIN_ALL);
    return r;
}

static CUresult memcpy_sync(void *dst, const void *src, size_t n, uintptr_t dev)
{
    struct fc_ctx *c;
    CUresult r = sync_prologue(&c);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if (!dst || !src || !find_alloc(dev, n, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, src, n);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    ENTER(cuMemcpyHtoD, 1);
    return leave(memcpy_sync((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                             (uintptr_t)dstDevice));
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    ENTER(cuMemcpyDtoH, 1);
    return leave(memcpy_sync(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                             (uintptr_t)srcDevice));
}

static CUresult memcpy_async(void *dst, const void *src, size_t n, uintptr_t dev, CUstream h)
{
    struct fc_stream *s;
    CUresult r = get_stream(h, &s, 1);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    if (!dst || !src || !find_alloc(dev, n, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    struct fc_op *op = copy_op_new(dst, src, n);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return submit(s, op, 0);
}

/* Unified addressing: either side may be device memory or host memory; at least one must
 * be a simulated allocation. */
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                               CUstream hStream)
{
    ENTER(cuMemcpyAsync, 1);
    uintptr_t dev = find_alloc((uintptr_t)dst, ByteCount, NULL) ? (uintptr_t)dst : (uintptr_t)src;
    return leave(memcpy_async((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount,
                              dev, hStream));
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                      size_t ByteCount, CUstream hStream)
{
    ENTER(cuMemcpyHtoDAsync, 1);
    return leave(memcpy_async((void *)(uintptr_t)dstDevice, srcHost, ByteCount,
                              (uintptr_t)dstDevice, hStream));
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    ENTER(cuMemcpyDtoHAsync, 1);
    return leave(memcpy_async(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount,
                              (uintptr_t)srcDevice, hStream));
}

CUresult memset_check(CUdeviceptr dst, size_t elem, size_t n)
{
    if (n > SIZE_MAX / elem || (elem == 4 && (dst & 3)) ||
        !find_alloc((uintptr_t)dst, n * elem, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult memset_async(CUdeviceptr dst, unsigned value, size_t elem, size_t n, CUstream h)
{
    struct fc_stream *s;
    CUresult r = get_stream(h, &s, 1);
    if (r != CUDA_SUCCESS || n == 0)
        return r;
    r = memset_check(dst, elem, n);
    if (r != CUDA_SUCCESS)
        return r;
    struct fc_op *op = memset_op_new((void *)(uintptr_t)dst, value, elem, n);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return submit(s, op, 0);
}

/* The "synchronous" memsets of device memory are asynchronous with respect to the host, as
 * the real driver's are ("API synchronization behavior" in its documentation): queued on the
 * legacy NULL stream, which streams made with CU_STREAM_NON_BLOCKING do not wait for. (A test
 * that zeroed a counter and then launched on such a stream saw the memset land after four of
 * its kernels on an H200.) */
CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    ENTER(cuMemsetD8, 1);
    return leave(memset_async(dstDevice, uc, 1, N, NULL));
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    ENTER(cuMemsetD32, 1);
    return leave(memset_async(dstDevice, ui, 4, N, NULL));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
    ENTER(cuMemsetD8Async, 1);
    return leave(memset_async(dstDevice, uc, 1, N, hStream));
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream)
{
    ENTER(cuMemsetD32Async, 1);
    return leave(memset_async(dstDevice, ui, 4, N, hStream));
}
