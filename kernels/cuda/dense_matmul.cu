// Dense products on the GPU (ops.h): y (T, rows) = x (T, cols) · Wᵀ, W bf16 or fp32. One
// warp per output row; tokens in groups of 8, so W is read once per group: lane l reads
// 8 consecutive weights (one 16-byte bf16 load) at column 8l + 256k and dots them with the
// group's 8 activation rows. fp32 accumulation.
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

#define TG 8 // tokens per pass over W

__device__ __forceinline__ void load8(const void *w, int bf16, int64_t idx, float *f) {
    if (bf16) {
        const uint4 u = __ldg((const uint4 *)((const uint16_t *)w + idx));
        const uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = __uint_as_float(p[k] << 16);
            f[2 * k + 1] = __uint_as_float(p[k] & 0xffff0000u);
        }
    } else {
        const float4 a = __ldg((const float4 *)((const float *)w + idx)), b = __ldg((const float4 *)((const float *)w + idx + 4));
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    }
}

__device__ __forceinline__ float wval(const void *w, int bf16, int64_t idx) {
    return bf16 ? __uint_as_float((uint32_t)((const uint16_t *)w)[idx] << 16) : ((const float *)w)[idx];
}

// vec: cols % 8 == 0 (16-byte aligned rows), else one element per lane per step.
__global__ void __launch_bounds__(128) dense_k(const void *__restrict__ w, int bf16, const float *__restrict__ x,
                                               float *__restrict__ y, int T, int64_t cols, int64_t rows, int vec,
                                               int accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int64_t base = row * cols;
    for (int t0 = 0; t0 < T; t0 += TG) {
        const int nt = T - t0 < TG ? T - t0 : TG;
        float acc[TG];
#pragma unroll
        for (int t = 0; t < TG; t++) acc[t] = 0.0f;
        if (vec) { // two 16-byte segments per lane per step, both loads issued before use
            for (int64_t c = 8 * lane; c < cols; c += 512) {
                float f[2][8];
                const bool two = c + 256 < cols;
                load8(w, bf16, base + c, f[0]);
                if (two) load8(w, bf16, base + c + 256, f[1]);
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    if (u == 1 && !two) break;
                    const int64_t cc = c + 256 * u;
#pragma unroll
                    for (int t = 0; t < TG; t++) {
                        if (t >= nt) break;
                        const float *xr = x + (int64_t)(t0 + t) * cols + cc;
                        const float4 a = __ldg((const float4 *)xr), b = __ldg((const float4 *)(xr + 4));
                        const float *g = f[u];
                        float s = acc[t];
                        s = fmaf(g[0], a.x, s); s = fmaf(g[1], a.y, s); s = fmaf(g[2], a.z, s); s = fmaf(g[3], a.w, s);
                        s = fmaf(g[4], b.x, s); s = fmaf(g[5], b.y, s); s = fmaf(g[6], b.z, s); s = fmaf(g[7], b.w, s);
                        acc[t] = s;
                    }
                }
            }
        } else {
            for (int64_t c = lane; c < cols; c += 32) {
                const float f = wval(w, bf16, base + c);
                for (int t = 0; t < nt; t++) acc[t] = fmaf(f, x[(int64_t)(t0 + t) * cols + c], acc[t]);
            }
        }
#pragma unroll
        for (int t = 0; t < TG; t++) {
            float s = acc[t];
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0 && t < nt) {
                float *o = y + (int64_t)(t0 + t) * rows + row;
                *o = accumulate ? __fadd_rn(*o, s) : s;
            }
        }
    }
}

extern "C" kvq_status kvq_cuda_dense_matmul(const void *w, int bf16, const float *x, float *y, int T, int64_t cols,
                                            int64_t rows, int accumulate, kvq_err *err) {
    if (T <= 0 || rows <= 0) return KVQ_OK;
    const int vec = cols % 8 == 0 && ((uintptr_t)w % 16) == 0 && ((uintptr_t)x % 16) == 0;
    dense_k<<<(unsigned)((rows + 3) / 4), 128, 0, kvq_cuda_stream()>>>(w, bf16, x, y, T, cols, rows, vec, accumulate);
    CU_LAUNCHED("dense_matmul");
    return KVQ_OK;
}
