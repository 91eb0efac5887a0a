// kvq-verify's per-position scores on the GPU (kernels/cuda/verify_score.h): one block of 256
// threads per position; three passes over the two rows (max and argmax; Σ exp(x − max) in double;
// Σ p_ref·(log p_ref − log p_q) in double), each a strided per-thread sum and a shared-memory
// pairwise tree, the order kernels/verify_score.h defines and kvq_verify_score_ref follows.
// Every product, sum and difference outside exp/log is __dmul_rn/__dadd_rn/__dsub_rn: nvcc and
// ptxas may not fuse them into an FMA (the host does not), so only exp and log differ from the C reference.
#include <math.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/verify_score.h"

#define VS_T KVQ_VSCORE_THREADS

__device__ __forceinline__ void vs_take(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

// The pairwise tree over the block's partials; every thread gets p[0].
__device__ double vs_tree(double *sh, double s) {
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = VS_T / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + o]);
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads(); // sh is reused
    return r;
}

// The first argmax of x over the block; every thread gets it.
__device__ int vs_argmax(const float *x, int n, float *sv, int *si) {
    float v = x[0];
    int i = 0;
    for (int k = threadIdx.x; k < n; k += VS_T) vs_take(v, i, x[k], k);
    sv[threadIdx.x] = v;
    si[threadIdx.x] = i;
    __syncthreads();
    for (int o = VS_T / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            float v2 = sv[threadIdx.x + o];
            int i2 = si[threadIdx.x + o];
            v = sv[threadIdx.x];
            i = si[threadIdx.x];
            vs_take(v, i, v2, i2);
            sv[threadIdx.x] = v;
            si[threadIdx.x] = i;
        }
        __syncthreads();
    }
    i = si[0];
    __syncthreads();
    return i;
}

__device__ double vs_lse(const float *x, int n, float m, double *sh) {
    double s = 0;
    for (int k = threadIdx.x; k < n; k += VS_T) s = __dadd_rn(s, exp(__dsub_rn((double)x[k], (double)m)));
    return __dadd_rn((double)m, log(vs_tree(sh, s)));
}

__global__ void __launch_bounds__(VS_T) vs_kernel(const float *ref, const float *q, const int32_t *target, int n,
                                                   kvq_vscore *out) {
    __shared__ double sh[VS_T];
    __shared__ float sv[VS_T];
    __shared__ int si[VS_T];
    const float *r = ref + (size_t)blockIdx.x * n, *y = q + (size_t)blockIdx.x * n;
    const int ar = vs_argmax(r, n, sv, si), aq = vs_argmax(y, n, sv, si);
    const double lr0 = vs_lse(r, n, r[ar], sh), lq0 = vs_lse(y, n, y[aq], sh);
    double s = 0;
    for (int k = threadIdx.x; k < n; k += VS_T) {
        const double lr = __dsub_rn((double)r[k], lr0), lq = __dsub_rn((double)y[k], lq0);
        s = __dadd_rn(s, __dmul_rn(exp(lr), __dsub_rn(lr, lq)));
    }
    const double kld = vs_tree(sh, s);
    if (threadIdx.x == 0) {
        const int t = target[blockIdx.x];
        kvq_vscore o;
        o.lse_ref = lr0;
        o.lse_q = lq0;
        o.kld = kld;
        o.dp = __dsub_rn(exp(__dsub_rn((double)y[t], lq0)), exp(__dsub_rn((double)r[t], lr0)));
        o.nll_ref = __dsub_rn(lr0, (double)r[t]);
        o.nll_q = __dsub_rn(lq0, (double)y[t]);
        o.top_ref = ar;
        o.top_q = aq;
        out[blockIdx.x] = o;
    }
}

extern "C" kvq_status kvq_cuda_verify_score(const float *d_ref, const float *d_q, const int32_t *d_target, int rows,
                                            int vocab, kvq_vscore *d_out, kvq_err *err) {
    if (rows <= 0) return KVQ_OK;
    vs_kernel<<<rows, VS_T, 0, kvq_cuda_stream()>>>(d_ref, d_q, d_target, vocab, d_out);
    CU_LAUNCHED("verify_score");
    return KVQ_OK;
}
