// The greedy choice on the GPU (ops.h): AM_BLOCKS blocks stride over the logits, each thread
// keeping its largest value and first index, then a block reduction that prefers the larger
// value and, among equals, the smaller index (the host's kvq_sample_argmax); each block leaves
// its pair in a partial array, and the block that finishes last (an atomic count) reduces the
// partials in block order, so the answer does not depend on which block that is. Any NaN
// makes the answer -1. Rows (a decode step of several sequences) are blockIdx.y, each with
// its own partials and count. (One block over a 128256-entry vocabulary took 21 µs, ~2 % of a 1B
// model's decode step on the H100; docs/results/gpu_runtime.md.)
#include <math.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

#define AM_THREADS 256
#define AM_BLOCKS 128

__device__ float am_v[KVQ_CUDA_ARGMAX_ROWS][AM_BLOCKS];
__device__ int am_i[KVQ_CUDA_ARGMAX_ROWS][AM_BLOCKS], am_nan[KVQ_CUDA_ARGMAX_ROWS][AM_BLOCKS];
__device__ unsigned am_done[KVQ_CUDA_ARGMAX_ROWS]; // blocks finished; the last one resets it

__device__ __forceinline__ void am_take(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

// The block's best (v, i) and NaN flag, valid in thread 0.
__device__ __forceinline__ void am_block(float &v, int &i, int &nan) {
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32], snan[AM_THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, i, o);
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
        am_take(v, i, v2, i2);
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) { sv[w] = v; si[w] = i; snan[w] = nan; }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 1; k < AM_THREADS / 32; k++) { am_take(v, i, sv[k], si[k]); nan |= snan[k]; }
}

__global__ void __launch_bounds__(AM_THREADS) argmax_k(const float *__restrict__ x, int n, int *__restrict__ out) {
    __shared__ bool last;
    const int r = blockIdx.y;
    x += (int64_t)r * n;
    float v = -INFINITY;
    int i = n, nan = 0; // i = n: nothing taken yet (every real index is smaller)
    for (int k = blockIdx.x * AM_THREADS + threadIdx.x; k < n; k += AM_BLOCKS * AM_THREADS) {
        const float f = x[k];
        nan |= f != f;
        if (f > v || (i == n && f == v)) { v = f; i = k; } // -inf logits are still candidates
    }
    am_block(v, i, nan);
    if (threadIdx.x == 0) {
        am_v[r][blockIdx.x] = v; am_i[r][blockIdx.x] = i; am_nan[r][blockIdx.x] = nan;
        __threadfence();
        last = atomicAdd(&am_done[r], 1u) == AM_BLOCKS - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    v = -INFINITY; i = n; nan = 0;
    if (threadIdx.x < AM_BLOCKS) { // the partials, in block order within each warp's reduction
        v = ((volatile float *)am_v[r])[threadIdx.x];
        i = ((volatile int *)am_i[r])[threadIdx.x];
        nan = ((volatile int *)am_nan[r])[threadIdx.x];
    }
    am_block(v, i, nan);
    if (threadIdx.x == 0) {
        out[r] = nan ? -1 : i < n ? i : 0;
        am_done[r] = 0;
    }
}

extern "C" kvq_status kvq_cuda_argmax(const float *x, int rows, int n, int *d_out, kvq_err *err) {
    if (n <= 0 || rows <= 0 || rows > KVQ_CUDA_ARGMAX_ROWS)
        return kvq_err_set(err, KVQ_ERR_ARG, "cuda argmax over %d rows of %d values (rows 1..%d)", rows, n, KVQ_CUDA_ARGMAX_ROWS);
    argmax_k<<<dim3(AM_BLOCKS, (unsigned)rows), AM_THREADS, 0, kvq_cuda_stream()>>>(x, n, d_out);
    CU_LAUNCHED("argmax");
    return KVQ_OK;
}
