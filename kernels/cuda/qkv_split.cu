// Splits the fused q/k/v product rows into q, k and v, adding the biases (ops.h).
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

__global__ void qkv_split_k(const float *__restrict__ qkv, const float *__restrict__ bias, float *__restrict__ q,
                            float *__restrict__ k, float *__restrict__ v, int q_dim, int kv_dim, int64_t total) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= total) return;
    const int w = q_dim + 2 * kv_dim;
    const int64_t t = g / w;
    const int i = (int)(g % w);
    const float val = bias ? __fadd_rn(qkv[g], bias[i]) : qkv[g];
    if (i < q_dim) q[t * q_dim + i] = val;
    else if (i < q_dim + kv_dim) k[t * kv_dim + (i - q_dim)] = val;
    else v[t * kv_dim + (i - q_dim - kv_dim)] = val;
}

extern "C" kvq_status kvq_cuda_qkv_split(const float *qkv, const float *bias, float *q, float *k, float *v, int T,
                                         int q_dim, int kv_dim, kvq_err *err) {
    const int64_t total = (int64_t)T * (q_dim + 2 * kv_dim);
    if (total <= 0) return KVQ_OK;
    qkv_split_k<<<(unsigned)((total + 255) / 256), 256, 0, kvq_cuda_stream()>>>(qkv, bias, q, k, v, q_dim, kv_dim, total);
    CU_LAUNCHED("qkv_split");
    return KVQ_OK;
}
