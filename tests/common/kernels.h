/* SPDX-License-Identifier: MIT */
/*
 * Test kernels, as PTX for the real driver. The simulated driver ignores the image and runs
 * host functions of the same names (sim/fakecuda.h lists them):
 *   spin(u64 ns)               busy-waits ns nanoseconds of %globaltimer
 *   addone(u64 p)              atomically *(u32 *)p += 1 (streams running it at once lose
 *                              no increment)
 *   set_u32(u64 p, u32 v)      *(u32 *)p = v
 *   add_u32(u64 p, u32 v)      atomically *(u32 *)p += v
 *   trap()                     executes trap: the context's work fails, for good (a sticky
 *                              error, as after an illegal address)
 */
#ifndef CUPOOL_TEST_KERNELS_H
#define CUPOOL_TEST_KERNELS_H
#include "../../src/graph/setter_ptx.h" /* the library's own text */

static const char tu_kernels_ptx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 ns)\n"
    "{\n"
    "  .reg .u64 %rd<5>;\n"
    "  .reg .pred %p;\n"
    "  ld.param.u64 %rd1, [ns];\n"
    "  mov.u64 %rd2, %globaltimer;\n"
    "LOOP:\n"
    "  mov.u64 %rd3, %globaltimer;\n"
    "  sub.u64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.u64 %p, %rd4, %rd1;\n"
    "  @%p bra LOOP;\n"
    "  ret;\n"
    "}\n"
    ".visible .entry addone(.param .u64 p)\n"
    "{\n"
    "  .reg .u64 %rd<3>;\n"
    "  .reg .u32 %r<3>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  atom.global.add.u32 %r1, [%rd2], 1;\n"
    "  ret;\n"
    "}\n"
    ".visible .entry set_u32(.param .u64 p, .param .u32 v)\n"
    "{\n"
    "  .reg .u64 %rd<3>;\n"
    "  .reg .u32 %r<2>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u32 %r1, [v];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  st.global.u32 [%rd2], %r1;\n"
    "  ret;\n"
    "}\n"
    ".visible .entry add_u32(.param .u64 p, .param .u32 v)\n"
    "{\n"
    "  .reg .u64 %rd<3>;\n"
    "  .reg .u32 %r<4>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u32 %r1, [v];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  atom.global.add.u32 %r2, [%rd2], %r1;\n"
    "  ret;\n"
    "}\n"
    ".visible .entry trap()\n"
    "{\n"
    "  trap;\n"
    "}\n";

/* Kernels for GPUs with thread-block clusters (sm_90), in a module of their own:
 *   cluster_width(u64 p)       ((u32 *)p)[blockIdx.x] = the width of the block's cluster
 *                              (%cluster_nctaid.x; 1 when launched without a cluster)
 *   cluster_rank(u64 p)        ((u32 *)p)[t] = %clusterid.x << 16 | %cluster_nctarank << 8 |
 *                              %cluster_ctarank for every thread t = blockIdx.x * blockDim.x +
 *                              threadIdx.x (a grid and blocks of one dimension): which cluster
 *                              the thread's block is in, how many blocks the cluster has, and
 *                              the block's rank in it (launched without a cluster, every block
 *                              is a cluster of one: blockIdx.x << 16 | 1 << 8) */
static const char tu_cluster_ptx[] =
    ".version 7.8\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry cluster_width(.param .u64 p)\n"
    "{\n"
    "  .reg .u64 %rd<5>;\n"
    "  .reg .u32 %r<3>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %cluster_nctaid.x;\n"
    "  mul.wide.u32 %rd3, %r1, 4;\n"
    "  add.u64 %rd4, %rd2, %rd3;\n"
    "  st.global.u32 [%rd4], %r2;\n"
    "  ret;\n"
    "}\n"
    ".visible .entry cluster_rank(.param .u64 p)\n"
    "{\n"
    "  .reg .u64 %rd<5>;\n"
    "  .reg .u32 %r<10>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mad.lo.u32 %r4, %r1, %r2, %r3;\n"
    "  mov.u32 %r5, %clusterid.x;\n"
    "  mov.u32 %r6, %cluster_nctarank;\n"
    "  mov.u32 %r7, %cluster_ctarank;\n"
    "  shl.b32 %r5, %r5, 16;\n"
    "  shl.b32 %r6, %r6, 8;\n"
    "  or.b32 %r8, %r5, %r6;\n"
    "  or.b32 %r9, %r8, %r7;\n"
    "  mul.wide.u32 %rd3, %r4, 4;\n"
    "  add.u64 %rd4, %rd2, %rd3;\n"
    "  st.global.u32 [%rd4], %r9;\n"
    "  ret;\n"
    "}\n";

/* The setter of conditional nodes, as the library ships it (src/graph/cond.c), in a module of
 * its own: cupool_set_cond(u64 handle, u32 value) calls cudaGraphSetConditional(handle,
 * value) (a device runtime function the driver resolves when it loads the PTX; CUDA 12.3). */
static const char tu_cond_ptx[] = CUPOOL_SETTER_PTX;

#endif
