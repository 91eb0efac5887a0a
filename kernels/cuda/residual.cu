// The residual add x += y (ops.h).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

__global__ void add_k(float *__restrict__ x, const float *__restrict__ y, size_t n) {
    const size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g < n) x[g] = __fadd_rn(x[g], y[g]);
}

extern "C" kvq_status kvq_cuda_add(float *x, const float *y, size_t n, kvq_err *err) {
    if (!n) return KVQ_OK;
    add_k<<<(unsigned)((n + 255) / 256), 256, 0, kvq_cuda_stream()>>>(x, y, n);
    CU_LAUNCHED("add");
    return KVQ_OK;
}
