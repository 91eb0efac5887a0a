// Dense products on the GPU (ops.h): y (T, rows) = x (T, cols) · Wᵀ, W bf16 or fp32. One
// warp per output row; tokens in groups of 8, so W is read once per group: lane l reads
// 8 consecutive weights (one 16-byte bf16 load) at column 8l + 256k and dots them with the
// group's 8 activation rows. fp32 accumulation. One token with bf16 rows takes dense1_k by default (two rows a warp,
// more bytes in flight; the same bits: below).
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.h"

#define TG 8 // tokens per pass over W

// 8 bf16 weights (one 16-byte load) as floats, in column order.
__device__ __forceinline__ void bf16x8(uint4 u, float *f) {
    const uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        f[2 * k] = __uint_as_float(p[k] << 16);
        f[2 * k + 1] = __uint_as_float(p[k] & 0xffff0000u);
    }
}

__device__ __forceinline__ void load8(const void *w, int bf16, int64_t idx, float *f) {
    if (bf16) {
        bf16x8(__ldg((const uint4 *)((const uint16_t *)w + idx)), f);
    } else {
        const float4 a = __ldg((const float4 *)((const float *)w + idx)), b = __ldg((const float4 *)((const float *)w + idx + 4));
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    }
}

// s + Σ g[k]·x[k] over one 8-weight segment, in column order: every one-token kernel forms a row's sum from these in
// the same order, which is what gives dense_k and dense1_k the same bits.
__device__ __forceinline__ float fma8(const float *g, float4 a, float4 b, float s) {
    s = fmaf(g[0], a.x, s); s = fmaf(g[1], a.y, s); s = fmaf(g[2], a.z, s); s = fmaf(g[3], a.w, s);
    s = fmaf(g[4], b.x, s); s = fmaf(g[5], b.y, s); s = fmaf(g[6], b.z, s); s = fmaf(g[7], b.w, s);
    return s;
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
                        acc[t] = fma8(f[u], a, b, acc[t]);
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

// One token, bf16 W, vector rows (cols % 8 == 0, 16-byte aligned): R adjacent rows a warp, U 16-byte loads a row in
// flight a lane (U·256 columns a pass). Each row's sum is formed exactly as dense_k forms it for one token (lane l's
// segments 8l + 256k in increasing k, fma8 a segment, the same butterfly), so every variant gives
// dense_k's bits; they differ in how many bytes a warp has in flight and in how often x is loaded (once for R rows).
template <int U, int R>
__global__ void __launch_bounds__(128) dense1_k(const uint16_t *__restrict__ w, const float *__restrict__ x,
                                                float *__restrict__ y, int64_t cols, int64_t rows, int accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t row0 = ((int64_t)blockIdx.x * 4 + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const uint16_t *wr[R];
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        wr[r] = w + (row0 + r < rows ? row0 + r : rows - 1) * cols; // a row past the end reads the last (not stored)
        acc[r] = 0.0f;
    }
    for (int64_t c0 = 8 * lane; c0 < cols; c0 += 256 * U) {
        uint4 q[R][U];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (c0 + 256 * u < cols) q[r][u] = __ldg((const uint4 *)(wr[r] + c0 + 256 * u));
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + 256 * u;
            if (c >= cols) break;
            const float4 a = __ldg((const float4 *)(x + c)), b = __ldg((const float4 *)(x + c + 4));
#pragma unroll
            for (int r = 0; r < R; r++) {
                float g[8];
                bf16x8(q[r][u], g);
                acc[r] = fma8(g, a, b, acc[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        float s = acc[r];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && row0 + r < rows) {
            float *o = y + row0 + r;
            *o = accumulate ? __fadd_rn(*o, s) : s;
        }
    }
}

// KVQ_CUDA_DENSE / kvq_cuda_dense_set_variant: which kernel a one-token bf16 product takes (0 dense_k, 1..5 dense1_k).
// The default, 2 rows a warp × 2 loads a row (dense1_k<2, 2>), was the fastest on every 8B shape on the H200 (session
// 27, build/bench/cuda_dense: the lm_head 128256×4096 1.33× dense_k, 107 % of copy bandwidth; 28672×4096 1.44×).
#define DENSE_VAR_DEFAULT 2
static int g_dense_var = DENSE_VAR_DEFAULT;
extern "C" void kvq_cuda_dense_set_variant(int v) {
    g_dense_var = v >= 0 && v <= KVQ_CUDA_DENSE_VARIANTS ? v : DENSE_VAR_DEFAULT;
}

extern "C" kvq_status kvq_cuda_dense_matmul(const void *w, int bf16, const float *x, float *y, int T, int64_t cols,
                                            int64_t rows, int accumulate, kvq_err *err) {
    if (T <= 0 || rows <= 0) return KVQ_OK;
    const int vec = cols % 8 == 0 && ((uintptr_t)w % 16) == 0 && ((uintptr_t)x % 16) == 0;
    const int v = T == 1 && bf16 && vec ? g_dense_var : 0;
    const uint16_t *wb = (const uint16_t *)w;
    cudaStream_t st = kvq_cuda_stream();
#define D1(U, R) dense1_k<U, R><<<(unsigned)((rows + 4 * R - 1) / (4 * R)), 128, 0, st>>>(wb, x, y, cols, rows, accumulate)
    switch (v) {
    case 1: D1(4, 1); break;
    case 2: D1(2, 2); break;
    case 3: D1(4, 2); break;
    case 4: D1(8, 1); break;
    case 5: D1(2, 4); break;
    default: dense_k<<<(unsigned)((rows + 3) / 4), 128, 0, st>>>(w, bf16, x, y, T, cols, rows, vec, accumulate);
    }
#undef D1
    CU_LAUNCHED("dense_matmul");
    return KVQ_OK;
}
