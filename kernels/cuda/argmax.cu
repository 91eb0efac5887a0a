// The greedy choice on the GPU (ops.h): one block of 1024 threads strides over the logits, each
// thread keeping its largest value and first index, then a block reduction that prefers the
// larger value and, among equals, the smaller index (the host's kvq_sample_argmax). Any NaN
// makes the answer -1.
#include <math.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

#define AM_THREADS 1024

__device__ __forceinline__ void am_take(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

__global__ void __launch_bounds__(AM_THREADS) argmax_k(const float *__restrict__ x, int n, int *__restrict__ out) {
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32], snan[AM_THREADS / 32];
    float v = -INFINITY;
    int i = n, nan = 0; // i = n: nothing taken yet (every real index is smaller)
    for (int k = threadIdx.x; k < n; k += AM_THREADS) {
        const float f = x[k];
        nan |= f != f;
        if (f > v || (i == n && f == v)) { v = f; i = k; } // -inf logits are still candidates
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
        am_take(v, i, v2, i2);
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) { sv[w] = v; si[w] = i; snan[w] = nan; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < AM_THREADS / 32; k++) { am_take(v, i, sv[k], si[k]); nan |= snan[k]; }
        *out = nan ? -1 : i < n ? i : 0;
    }
}

extern "C" kvq_status kvq_cuda_argmax(const float *x, int n, int *d_out, kvq_err *err) {
    if (n <= 0) return kvq_err_set(err, KVQ_ERR_ARG, "cuda argmax over %d values", n);
    argmax_k<<<1, AM_THREADS, 0, kvq_cuda_stream()>>>(x, n, d_out);
    CU_LAUNCHED("argmax");
    return KVQ_OK;
}
