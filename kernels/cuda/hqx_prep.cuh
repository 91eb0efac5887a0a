// The int8 activation preparation (hqx_fused.cu's kernel, and the attention kernel that
// prepares the o projection's input as it writes it: attention.cu), device functions only.
#ifndef KVQ_CUDA_HQX_PREP_CUH
#define KVQ_CUDA_HQX_PREP_CUH

#include <stdint.h>

#include "kernels/cuda/hqx_dev.cuh"

// The input transform of one token's row as the preparation applies it (hqx.h, kvq_cuda_xin):
// kind, the norm's weights and 1/rms (RMSNORM), and where the transformed row is also written.
struct XIn {
    int kind;
    const float *w;
    float r;
    float *y;
};

// Coordinate i of the token's transformed input row x (RMSNORM: w ⊙ x·r as rmsnorm_k;
// SILU_MUL: x = gate | up, silu(gate)·up as silu_mul_k).
static __device__ __forceinline__ float xin_at(const XIn &xi, const float *__restrict__ x, int64_t i, int64_t cols) {
    if (xi.kind == KVQ_CUDA_XIN_RMSNORM) return xi.w[i] * (x[i] * xi.r);
    if (xi.kind == KVQ_CUDA_XIN_SILU_MUL) {
        const float a = x[i], u = x[cols + i];
        return a / (1.0f + expf(-a)) * u;
    }
    return x[i];
}

// 1/sqrt(mean(x²) + eps) over a row of n floats, the sum in one fixed order per warp (every
// warp preparing the row gets the same bits, whatever the token count).
static __device__ __forceinline__ float row_rinv(const float *__restrict__ x, int64_t n, float eps, int lane) {
    float ss = 0.0f;
    if ((n & 3) == 0 && ((uintptr_t)x & 15) == 0) {
        // 16 loads in flight per lane, then summed in order (one L2 round trip per 2048
        // floats: the loop's latency is most of a decode step's preparation)
        const float4 *x4 = (const float4 *)x;
        const int64_t n4 = n / 4;
        for (int64_t c0 = lane; c0 < n4; c0 += 32 * 16) {
            float4 v[16];
#pragma unroll
            for (int k = 0; k < 16; k++) {
                const int64_t c = c0 + 32 * k;
                v[k] = c < n4 ? __ldg(x4 + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < 16; k++) {
                ss = fmaf(v[k].x, v[k].x, ss); ss = fmaf(v[k].y, v[k].y, ss);
                ss = fmaf(v[k].z, v[k].z, ss); ss = fmaf(v[k].w, v[k].w, ss);
            }
        }
    } else {
        for (int64_t c = lane; c < n; c += 32) ss = fmaf(x[c], x[c], ss);
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    return 1.0f / sqrtf(ss / (float)n + eps);
}

// Prepares one token's activation, one warp per tile: lane l holds coordinates lR..lR+R−1
// (R = T/32) in registers; butterfly stages h < R run inside a lane, h >= R across lanes by
// shuffles (the pair (i, i+h): a+b to i, a−b to i+h, in the CPU's order h = 1, 2, 4, ...), so
// the floats equal kvq_hqx_prep's. Then amax and the tile sum by shuffles, the int8 codes and
// the 8-vector sums into the scratch.
template <int R>
static __device__ __forceinline__ void prep_tile(const Dev &d, const float *__restrict__ x, const XIn &xi, int8_t *xq, float *sx,
                                          float *xs, int32_t *s8, int lane, int64_t j, bool perm) {
    constexpr int T = 32 * R;
    {
        float v[R];
        const int64_t base = j * T + (int64_t)lane * R;
#pragma unroll
        for (int r = 0; r < R; r++) {
            v[r] = base + r < d.cols ? xin_at(xi, x, base + r, d.cols) : 0.0f;
            if (xi.y && base + r < d.cols) xi.y[base + r] = v[r];
        }
        if (d.rotate) {
            const uint64_t w = kvq_hq_sign_word(d.seed, (uint64_t)j, (uint64_t)((lane * R) / 64));
            const int sh = (lane * R) % 64;
#pragma unroll
            for (int r = 0; r < R; r++)
                if ((w >> (sh + r)) & 1) v[r] = -v[r];
#pragma unroll
            for (int h = 1; h < R; h <<= 1)
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (!(r & h)) {
                        const float a = v[r], b = v[r + h];
                        v[r] = __fadd_rn(a, b);
                        v[r + h] = __fsub_rn(a, b);
                    }
#pragma unroll
            for (int h = R; h < T; h <<= 1) {
                const int lm = h / R;
                const bool top = !(lane & lm);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float o = __shfl_xor_sync(0xffffffffu, v[r], lm);
                    v[r] = top ? __fadd_rn(v[r], o) : __fsub_rn(o, v[r]);
                }
            }
            if (d.a2)
#pragma unroll
                for (int r = 0; r < R; r++)
                    if (!((lane * R + r) & 1)) v[r] = __fmul_rn(v[r], KVQ_HQ_SQRT3_F);
        }
        float a = 0.0f, s = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) { a = fmaxf(a, fabsf(v[r])); s += v[r]; }
        for (int o = 16; o > 0; o >>= 1) {
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
            s += __shfl_xor_sync(0xffffffffu, s, o);
        }
        const bool ok = a > 0.0f && isfinite(a);
        const float inv = ok ? __fdiv_rn(127.0f, a) : 0.0f;
        if (lane == 0) { sx[j] = ok ? __fdiv_rn(a, 127.0f) : 0.0f; xs[j] = s; }
        int qs = 0, q8 = 0;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float f = __fmul_rn(v[r], inv);
            const int q = f >= 127.0f ? 127 : f <= -127.0f ? -127 : (f == f ? __float2int_rn(f) : 0);
            xq[perm ? kvq_gemv1_xq_at(base + r) : base + r] = (int8_t)q;
            q8 += q;
            if constexpr (R >= 8)
                if ((r & 7) == 7) { s8[perm ? kvq_gemv1_s8_at((base + r) / 8) : (base + r) / 8] = q8; q8 = 0; }
            qs += q;
        }
        if constexpr (R < 8) { // an 8-vector spans 8/R lanes
            for (int o = 1; o < 8 / R; o <<= 1) qs += __shfl_xor_sync(0xffffffffu, qs, o);
            if ((lane % (8 / R)) == 0) s8[perm ? kvq_gemv1_s8_at(base / 8) : base / 8] = qs;
        }
    }
}

// Tile j of one token's row x into t's one-token scratch fs (lay(cols_p, T, 1), the one-token
// product's lane order), by one warp, no input transform: the bits hqx_prep_i8 writes.
static __device__ __forceinline__ void kvq_hqx_prep1_tile(const Dev &d, unsigned char *fs, const float *x, int lane,
                                                         int64_t j) {
    const Lay L = lay(d.cols_p, d.T, 1);
    const XIn xi = {KVQ_CUDA_XIN_NONE, NULL, 0.0f, NULL};
    int8_t *q = (int8_t *)(fs + L.xq);
    float *a = (float *)(fs + L.sx), *b = (float *)(fs + L.xs);
    int32_t *c = (int32_t *)(fs + L.s8);
    switch (d.T) {
    case 64: prep_tile<2>(d, x, xi, q, a, b, c, lane, j, true); break;
    case 128: prep_tile<4>(d, x, xi, q, a, b, c, lane, j, true); break;
    case 256: prep_tile<8>(d, x, xi, q, a, b, c, lane, j, true); break;
    case 512: prep_tile<16>(d, x, xi, q, a, b, c, lane, j, true); break;
    default: prep_tile<32>(d, x, xi, q, a, b, c, lane, j, true); break;
    }
}

#endif
