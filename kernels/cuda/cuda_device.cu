// Device queries, buffers, copies and the copy-bandwidth probe for C callers (tests,
// benchmarks), so they need no CUDA headers (declared in hq_decode.h).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/hq_decode.h"

extern "C" int kvq_cuda_device_count(char *why, size_t why_size) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why && why_size) // a machine without a GPU has no (or an old) driver: say so plainly first
            snprintf(why, why_size, "no CUDA device%s%s%s",
                     e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice ? " on this machine" : "",
                     e != cudaSuccess ? " (CUDA runtime: " : "", e != cudaSuccess ? cudaGetErrorString(e) : "");
        if (why && why_size && e != cudaSuccess) strncat(why, ")", why_size - strlen(why) - 1);
        return 0;
    }
    return n;
}

extern "C" void kvq_cuda_device_name(char *buf, size_t size) {
    cudaDeviceProp p;
    if (!size) return;
    buf[0] = 0;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        snprintf(buf, size, "%s, %d SMs, %.1f GiB, cc %d.%d", p.name, p.multiProcessorCount,
                 (double)p.totalGlobalMem / (1u << 30), p.major, p.minor);
}

// ---- buffers and timing for C callers

extern "C" kvq_status kvq_cuda_malloc(void **d, size_t size, kvq_err *err) {
    *d = NULL;
    CU_TRY(cudaMalloc(d, size));
    return KVQ_OK;
}
extern "C" void kvq_cuda_free(void *d) { cudaFree(d); }
extern "C" kvq_status kvq_cuda_copy(void *dst, const void *src, size_t size, int to_device, kvq_err *err) {
    CU_TRY(cudaMemcpy(dst, src, size, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
    return KVQ_OK;
}
extern "C" kvq_status kvq_cuda_memset(void *d, int byte, size_t size, kvq_err *err) {
    CU_TRY(cudaMemset(d, byte, size));
    return KVQ_OK;
}
extern "C" kvq_status kvq_cuda_sync(kvq_err *err) {
    CU_TRY(cudaDeviceSynchronize());
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_copy_bandwidth(size_t size, int reps, double *bytes_per_s, kvq_err *err) {
    void *a = NULL, *b = NULL;
    cudaEvent_t e0, e1;
    CU_TRY(cudaMalloc(&a, size));
    CU_TRY(cudaMalloc(&b, size));
    CU_TRY(cudaMemset(a, 0x5a, size));
    CU_TRY(cudaEventCreate(&e0));
    CU_TRY(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int i = 0; i < reps + 3; i++) {
        CU_TRY(cudaEventRecord(e0));
        CU_TRY(cudaMemcpy(i & 1 ? a : b, i & 1 ? b : a, size, cudaMemcpyDeviceToDevice));
        CU_TRY(cudaEventRecord(e1));
        CU_TRY(cudaEventSynchronize(e1));
        float m;
        CU_TRY(cudaEventElapsedTime(&m, e0, e1));
        if (i >= 3) ms.push_back(m); // the first copies warm up
    }
    std::sort(ms.begin(), ms.end());
    *bytes_per_s = 2.0 * (double)size / (ms[ms.size() / 2] * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return KVQ_OK;
}

