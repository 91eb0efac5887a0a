// RMSNorm on the GPU (ops.h): one block per row (up to 1024 threads: a decode step has one
// row of hidden_size), fp32, the CPU's formula.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

__global__ void rmsnorm_k(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ w, int n,
                          float eps) {
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float t = 0.0f;
    for (int k = 0; k < (int)(blockDim.x >> 5); k++) t += red[k];
    const float r = 1.0f / sqrtf(t / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = w[i] * (xr[i] * r);
}

extern "C" kvq_status kvq_cuda_rmsnorm(float *y, const float *x, const float *w, int rows, int n, float eps,
                                       kvq_err *err) {
    if (rows <= 0) return KVQ_OK;
    const int th = n >= 4096 ? 1024 : n >= 1024 ? 256 : 128;
    rmsnorm_k<<<rows, th, 0, kvq_cuda_stream()>>>(y, x, w, n, eps);
    CU_LAUNCHED("rmsnorm");
    return KVQ_OK;
}
