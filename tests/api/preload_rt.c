/* SPDX-License-Identifier: MIT */
/*
 * An ordinary CUDA runtime program that knows nothing of cupool, built against the shared
 * runtime (preload_rt_shared) and the static one (preload_rt_static): it creates, uses and
 * destroys streams and events in a loop. check_preload runs it under libcupool_preload.so
 * (real driver only: the runtime needs NVIDIA's driver). Exits 0 when every call behaved as
 * the runtime's, 77 when no GPU answers.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>

static int failures;
#define OK(call)                                                                             \
    do {                                                                                     \
        cudaError_t r_ = (call);                                                             \
        if (r_ != cudaSuccess) {                                                             \
            fprintf(stderr, "preload_rt: %s = %d\n", #call, (int)r_);                        \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return 77;
    OK(cudaSetDevice(0));
    int *dev = NULL, host = 0;
    OK(cudaMalloc((void **)&dev, sizeof(int)));
    for (int i = 0; i < 1000; i++) {
        cudaStream_t s;
        cudaEvent_t e;
        unsigned flags = 99;
        OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        OK(cudaStreamGetFlags(s, &flags));
        if (flags != cudaStreamNonBlocking)
            failures++;
        OK(cudaMemsetAsync(dev, i & 0xff, sizeof(int), s));
        OK(cudaMemcpyAsync(&host, dev, sizeof(int), cudaMemcpyDeviceToHost, s));
        OK(cudaEventRecord(e, s));
        OK(cudaEventSynchronize(e));
        if (host != (int)(0x01010101u * (unsigned)(i & 0xff)))
            failures++;
        OK(cudaEventDestroy(e));
        OK(cudaStreamDestroy(s));
    }
    cudaStream_t plain;
    OK(cudaStreamCreate(&plain));
    OK(cudaStreamSynchronize(plain));
    OK(cudaStreamDestroy(plain));
    OK(cudaFree(dev));
    printf("preload_rt: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
