// silu(gate)·up over the fused gate_up product rows (ops.h), the CPU's formula.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

__global__ void silu_mul_k(float *__restrict__ h, const float *__restrict__ gu, int ffn, int64_t total) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= total) return;
    const int64_t t = g / ffn;
    const int i = (int)(g % ffn);
    const float a = gu[t * 2 * ffn + i], u = gu[t * 2 * ffn + ffn + i];
    h[g] = a / (1.0f + expf(-a)) * u;
}

extern "C" kvq_status kvq_cuda_silu_mul(float *h, const float *gu, int T, int ffn, kvq_err *err) {
    const int64_t total = (int64_t)T * ffn;
    if (total <= 0) return KVQ_OK;
    silu_mul_k<<<(unsigned)((total + 255) / 256), 256, 0, kvq_cuda_stream()>>>(h, gu, ffn, total);
    CU_LAUNCHED("silu_mul");
    return KVQ_OK;
}
