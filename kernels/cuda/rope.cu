// RoPE on the GPU (ops.h): one thread per (token, head, pair); the angle is the fp32
// product (pos + t)·inv_freq[i] and its cos/sin are taken in double, as kvq_rope does.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/seqs.cuh"

__global__ void rope_k(float *__restrict__ x, int n_heads, int head_dim, int half, int pos, const int *dpos,
                       const SeqK sq, const float *__restrict__ inv_freq, int64_t total) {
    const int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= total) return;
    const int i = (int)(g % half);
    const int64_t th = g / half; // token · n_heads + head
    const int t = (int)(th / n_heads);
    if (dpos) pos = *dpos;
    const float a = __fmul_rn((float)seq_pos(sq, pos, t), inv_freq[i]);
    const float c = (float)cos((double)a), s = (float)sin((double)a);
    float *v = x + th * head_dim;
    const float x0 = v[i], x1 = v[i + half];
    v[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

extern "C" kvq_status kvq_cuda_rope(float *x, int T, int n_heads, int head_dim, int rot_dim, int pos,
                                    const int *d_pos, const kvq_cuda_seqs *sq, const float *inv_freq, kvq_err *err) {
    const int half = rot_dim / 2;
    const int64_t total = (int64_t)T * n_heads * half;
    if (total <= 0) return KVQ_OK;
    rope_k<<<(unsigned)((total + 255) / 256), 256, 0, kvq_cuda_stream()>>>(x, n_heads, head_dim, half, pos, d_pos, seqk_of(sq),
                                                                                           inv_freq, total);
    CU_LAUNCHED("rope");
    return KVQ_OK;
}
