/* SPDX-License-Identifier: MIT */
/*
 * sim/entries.h: the entry points of the simulated driver, in one table. control.c expands it
 * into the call counters, fault injection and the names they go by; proc.c into what
 * cuGetProcAddress finds; internal.h into the indexes E_<name>.
 */
#ifndef FAKECUDA_ENTRIES_H
#define FAKECUDA_ENTRIES_H

/* The one table of the entry points: X(name, version, fn) is an entry point (its call
 * counter, its fault injection, and its first form for cuGetProcAddress: the CUDA version
 * that introduced it and the function); Y(name, version, fn) is another form of the entry
 * before it (a newer ABI, or another name counted with it) for cuGetProcAddress only. */
#define FC_ENTRIES(X, Y) \
    X(cuInit, 2000, cuInit) \
    X(cuDriverGetVersion, 2020, cuDriverGetVersion) \
    X(cuGetErrorName, 6000, cuGetErrorName) \
    X(cuGetErrorString, 6000, cuGetErrorString) \
    X(cuGetProcAddress, 11030, cuGetProcAddress) \
    Y(cuGetProcAddress, 12000, cuGetProcAddress_v2) \
    X(cuDeviceGet, 2000, cuDeviceGet) \
    X(cuDeviceGetCount, 2000, cuDeviceGetCount) \
    X(cuDeviceGetName, 2000, cuDeviceGetName) \
    X(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute) \
    X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain) \
    X(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease) \
    Y(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2) \
    X(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset) \
    Y(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2) \
    X(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState) \
    X(cuCtxCreate, 3020, cuCtxCreate_v2) \
    Y(cuCtxCreate, 12050, cuCtxCreate_v4) \
    X(cuCtxDestroy, 2000, cuCtxDestroy) \
    Y(cuCtxDestroy, 4000, cuCtxDestroy_v2) \
    X(cuCtxSetCurrent, 4000, cuCtxSetCurrent) \
    X(cuCtxGetCurrent, 4000, cuCtxGetCurrent) \
    X(cuCtxPushCurrent, 2000, cuCtxPushCurrent) \
    Y(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2) \
    X(cuCtxPopCurrent, 2000, cuCtxPopCurrent) \
    Y(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2) \
    X(cuCtxGetId, 12000, cuCtxGetId) \
    X(cuCtxGetDevice, 2000, cuCtxGetDevice) \
    X(cuCtxSynchronize, 2000, cuCtxSynchronize) \
    X(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange) \
    X(cuStreamCreate, 2000, cuStreamCreate) \
    X(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority) \
    X(cuStreamDestroy, 2000, cuStreamDestroy) \
    Y(cuStreamDestroy, 4000, cuStreamDestroy_v2) \
    X(cuStreamQuery, 2000, cuStreamQuery) \
    X(cuStreamSynchronize, 2000, cuStreamSynchronize) \
    X(cuStreamWaitEvent, 2000, cuStreamWaitEvent) \
    X(cuStreamGetFlags, 5050, cuStreamGetFlags) \
    X(cuStreamGetPriority, 5050, cuStreamGetPriority) \
    X(cuStreamGetCtx, 9020, cuStreamGetCtx) \
    X(cuStreamGetId, 12000, cuStreamGetId) \
    X(cuStreamIsCapturing, 10000, cuStreamIsCapturing) \
    X(cuStreamBeginCapture, 10000, cuStreamBeginCapture) \
    Y(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2) \
    X(cuStreamEndCapture, 10000, cuStreamEndCapture) \
    X(cuStreamGetCaptureInfo, 10010, cuStreamGetCaptureInfo) \
    Y(cuStreamGetCaptureInfo, 11030, cuStreamGetCaptureInfo_v2) \
    Y(cuStreamGetCaptureInfo, 12030, cuStreamGetCaptureInfo_v3) \
    X(cuLaunchHostFunc, 10000, cuLaunchHostFunc) \
    X(cuEventCreate, 2000, cuEventCreate) \
    X(cuEventDestroy, 2000, cuEventDestroy) \
    Y(cuEventDestroy, 4000, cuEventDestroy_v2) \
    X(cuEventRecord, 2000, cuEventRecord) \
    X(cuEventQuery, 2000, cuEventQuery) \
    X(cuEventSynchronize, 2000, cuEventSynchronize) \
    X(cuEventElapsedTime, 2000, cuEventElapsedTime) \
    Y(cuEventElapsedTime, 12080, cuEventElapsedTime_v2) \
    X(cuMemAlloc, 3020, cuMemAlloc_v2) \
    X(cuMemFree, 3020, cuMemFree_v2) \
    X(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2) \
    X(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2) \
    X(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2) \
    X(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2) \
    X(cuMemcpyAsync, 4000, cuMemcpyAsync) \
    X(cuMemsetD8, 3020, cuMemsetD8_v2) \
    X(cuMemsetD32, 3020, cuMemsetD32_v2) \
    X(cuMemsetD8Async, 3020, cuMemsetD8Async) \
    X(cuMemsetD32Async, 3020, cuMemsetD32Async) \
    X(cuModuleLoadData, 2000, cuModuleLoadData) \
    X(cuModuleUnload, 2000, cuModuleUnload) \
    X(cuModuleGetFunction, 2000, cuModuleGetFunction) \
    X(cuLaunchKernel, 4000, cuLaunchKernel) \
    X(cuLaunchKernelEx, 11060, cuLaunchKernelEx) \
    X(cuGraphKernelNodeGetAttribute, 11000, cuGraphKernelNodeGetAttribute) \
    X(cuGraphKernelNodeSetAttribute, 11000, cuGraphKernelNodeSetAttribute) \
    X(cuGraphKernelNodeSetParams, 12000, cuGraphKernelNodeSetParams_v2) \
    X(cuGraphMemsetNodeSetParams, 10000, cuGraphMemsetNodeSetParams) \
    X(cuGraphMemcpyNodeSetParams, 10000, cuGraphMemcpyNodeSetParams) \
    X(cuGraphHostNodeSetParams, 10000, cuGraphHostNodeSetParams) \
    X(cuGraphEventRecordNodeSetEvent, 11010, cuGraphEventRecordNodeSetEvent) \
    X(cuGraphEventWaitNodeSetEvent, 11010, cuGraphEventWaitNodeSetEvent) \
    X(cuFuncGetParamInfo, 12040, cuFuncGetParamInfo) \
    X(cuGraphCreate, 10000, cuGraphCreate) \
    X(cuGraphDestroy, 10000, cuGraphDestroy) \
    X(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2) \
    X(cuGraphAddMemsetNode, 10000, cuGraphAddMemsetNode) \
    X(cuGraphAddMemcpyNode, 10000, cuGraphAddMemcpyNode) \
    X(cuGraphAddHostNode, 10000, cuGraphAddHostNode) \
    X(cuGraphAddEmptyNode, 10000, cuGraphAddEmptyNode) \
    X(cuGraphAddEventRecordNode, 11010, cuGraphAddEventRecordNode) \
    X(cuGraphAddEventWaitNode, 11010, cuGraphAddEventWaitNode) \
    X(cuGraphAddNode, 12020, cuGraphAddNode) \
    Y(cuGraphAddNode, 12030, cuGraphAddNode_v2) \
    X(cuGraphConditionalHandleCreate, 12030, cuGraphConditionalHandleCreate) \
    X(cuGraphAddDependencies, 10000, cuGraphAddDependencies) \
    Y(cuGraphAddDependencies, 12030, cuGraphAddDependencies_v2) \
    X(cuGraphGetNodes, 10000, cuGraphGetNodes) \
    X(cuGraphNodeGetType, 10000, cuGraphNodeGetType) \
    X(cuGraphInstantiate, 10000, cuGraphInstantiate_v2) \
    Y(cuGraphInstantiate, 11000, cuGraphInstantiate_v2) \
    Y(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags) \
    X(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams) \
    X(cuGraphUpload, 11010, cuGraphUpload) \
    X(cuGraphExecDestroy, 10000, cuGraphExecDestroy) \
    X(cuGraphLaunch, 10000, cuGraphLaunch) \
    X(cuGraphExecKernelNodeSetParams, 12000, cuGraphExecKernelNodeSetParams_v2) \
    X(cuGraphExecMemsetNodeSetParams, 10020, cuGraphExecMemsetNodeSetParams) \
    X(cuGraphExecMemcpyNodeSetParams, 10020, cuGraphExecMemcpyNodeSetParams) \
    X(cuGraphExecHostNodeSetParams, 10020, cuGraphExecHostNodeSetParams) \
    X(cuGraphExecEventRecordNodeSetEvent, 11010, cuGraphExecEventRecordNodeSetEvent) \
    X(cuGraphExecEventWaitNodeSetEvent, 11010, cuGraphExecEventWaitNodeSetEvent) \
    X(cuGraphExecUpdate, 12000, cuGraphExecUpdate_v2) \
    X(cuGraphDebugDotPrint, 11030, cuGraphDebugDotPrint) \
    X(cuGraphClone, 10000, cuGraphClone) \
    X(cuGraphNodeFindInClone, 10000, cuGraphNodeFindInClone)

#endif /* FAKECUDA_ENTRIES_H */
