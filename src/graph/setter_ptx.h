/* SPDX-License-Identifier: MIT */
/*
 * The setter of conditional nodes as PTX text, written once: the library loads it per context
 * (graph/cond.c), and the tests and cupool-bench build conditional graphs by hand with the
 * same kernel (tests/common/kernels.h). cupool_set_cond(u64 handle, u32 value) calls
 * cudaGraphSetConditional(handle, value), a device runtime function the driver resolves when
 * it loads the PTX (CUDA 12.3; seen on an H200, driver 580.159.04, with no device runtime
 * linked).
 */
#ifndef CUPOOL_GRAPH_SETTER_PTX_H
#define CUPOOL_GRAPH_SETTER_PTX_H

#define CUPOOL_SETTER_PTX \
    ".version 7.0\n" \
    ".target sm_52\n" \
    ".address_size 64\n" \
    ".extern .func cudaGraphSetConditional\n" \
    "(\n" \
    "  .param .b64 cudaGraphSetConditional_param_0,\n" \
    "  .param .b32 cudaGraphSetConditional_param_1\n" \
    ")\n" \
    ";\n" \
    ".visible .entry cupool_set_cond(\n" \
    "  .param .u64 cupool_set_cond_param_0,\n" \
    "  .param .u32 cupool_set_cond_param_1\n" \
    ")\n" \
    "{\n" \
    "  .reg .b32 %r<2>;\n" \
    "  .reg .b64 %rd<2>;\n" \
    "  ld.param.u64 %rd1, [cupool_set_cond_param_0];\n" \
    "  ld.param.u32 %r1, [cupool_set_cond_param_1];\n" \
    "  {\n" \
    "  .param .b64 param0;\n" \
    "  st.param.b64 [param0+0], %rd1;\n" \
    "  .param .b32 param1;\n" \
    "  st.param.b32 [param1+0], %r1;\n" \
    "  call.uni cudaGraphSetConditional, (param0, param1);\n" \
    "  }\n" \
    "  ret;\n" \
    "}\n"

#endif
