// The split-K decode attention kernels over a packed KV cache (kv_attn.h; layout in docs/KV.md
// "GPU execution layout"), templated on the head shape: D = head_dim (64 or 128: 16 dims a lane,
// D/16 lanes a position, 512/D positions a warp pass), G = the query heads a block serves (1, 2
// or 4) and GS = the blocks a KV head's query heads are split over (G·GS query heads per KV head:
// 8 = two blocks of 4). Instantiated by kv_attn.cu (head_dim 128, 4 query heads per KV head: the
// Llama-3-8B shape, every kernel variant) and kv_attn_shape.cu (the other shapes: the plain
// kernels). Include once per translation unit, before any macro named D or G.
#ifndef KVQ_CUDA_KV_SPLIT_CUH
#define KVQ_CUDA_KV_SPLIT_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/kv_attn.h"
#include "kernels/cuda/kv_attn_tc.cuh"
#include "kernels/cuda/kv_merge.cuh"
#include "kernels/kv_hqkv.h"

#define NT 128
#define NW (NT / 32)
#define LOG2E 1.4426950408889634f
#define KQ8 16 // internal K kind: int keys scored against an int8 copy of q by dp4a (kvq_gkv_set_int8_query)
#define ROWB(B) ((B) / 2 * (D / 4) + ((B) & 1) * (D / 8)) // bytes of a row of B-bit codes (D: the head_dim in scope)
#define QMAX(B) ((1 << ((B) > 0 ? (B) - 1 : 0)) - 1)

struct side_p {
    const uint8_t *base; // region of (sequence 0, head 0)
    size_t region;       // bytes per region
    size_t side_off;     // offset of the side data in a region
    const float *cb;     // TURBO centroids (n_kv, 2^bits); OCTOPUS directions
    const float *rho;    // OCTOPUS triplet-norm centroids
    const float *signs;  // TURBO, HQKV rot=signs: sign vectors (n_kv, D)
    const float *quat;   // qturbo: unit quaternions (n_kv, 4), else NULL
    const float *mat;    // HQKV rot=qjl: Q (n_kv, D, D)
    const uint64_t *seeds; // HQKV dither: seeds (n_kv)
    int lat, rot, dither; // HQKV
    float inv_scale;      // HQKV: 1 / (α√d)
    int ring;            // dense only: > 0: position p is slot p % ring
    int m_out;           // HQMQO: M = 24·S, the first outlier code (index bits)
    size_t pool_off;     // HQMQO: offset of the outlier pool in a region
};

struct attn_p {
    const float *q;
    side_p k, v;
    int n_kv, H, t_begin, t_end, chunk, n_slot, slot0; // n_slot: the scratch's slots per (sequence, query head)
    float sl2; // scale · log2(e)
    float *po, *pml;
    kvq_gkv_dyn dyn; // a graph-captured step: the range from the position (d_pos NULL: the fields above)
    kvq_gkv_fuse fz; // the fused merge (fz.on: this is the attend's final split launch)
    int wait_end;    // launched as a programmatic dependent of the attend's launch before it: every
                     // block waits for that grid at its end (the merge's wait then covers both)
};

// Byte n of w as the float 2^23 + byte; minus 2^23 gives the code exactly.
__device__ __forceinline__ float byte_f(uint32_t w, int n) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, (uint32_t)n | 0x7540u)) - 8388608.0f;
}

// The codes of dims (j0 + 4n + k), n = 0..3, as the 4 bytes of a word, from the lane's plane words.
template <int B>
__device__ __forceinline__ uint32_t gather_p(const uint32_t *w, int k) {
    uint32_t m = 0;
#pragma unroll
    for (int p = 0; p < B / 2; p++) m |= ((w[p] >> (2 * k)) & 0x03030303u) << (2 * p);
    if constexpr ((B & 1) != 0) m |= ((((w[B / 2] >> (4 * k)) & 0xFu) * 0x00204081u) & 0x01010101u) << (B - 1);
    return m;
}
template <int B>
__device__ __forceinline__ uint32_t gather(const uint32_t (&w)[B / 2 + 1], int k) { return gather_p<B>(w, k); }

// Loads one position's 16 dims of plane words (lane block L) of a packed row.
template <int B, int D>
__device__ __forceinline__ void load_row(const uint8_t *row, int L, uint32_t (&w)[B / 2 + 1]) {
#pragma unroll
    for (int p = 0; p < B / 2; p++) w[p] = __ldg((const uint32_t *)(row + p * (D / 4) + 4 * L));
    if (B & 1) w[B / 2] = __ldg((const unsigned short *)(row + (B / 2) * (D / 4) + 2 * L));
}

// 16 dense values (2-byte elements, bf16 or fp16) of one position at dims 16L.. into v.
template <int KIND>
__device__ __forceinline__ void dense_vals(const uint4 (&r)[2], float (&v)[16]) {
    const uint32_t u[8] = {r[0].x, r[0].y, r[0].z, r[0].w, r[1].x, r[1].y, r[1].z, r[1].w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (KIND == KVQ_GKV_BF16) {
            v[2 * i] = __uint_as_float(u[i] << 16);
            v[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
        } else {
            const float2 f = __half22float2(*(const __half2 *)&u[i]);
            v[2 * i] = f.x, v[2 * i + 1] = f.y;
        }
    }
}

// The 16 values of a position in lane order i = 4n + k (dim j0 + i): dense values, codes,
// or centroids of codes.
template <int KIND, int B>
struct row_t {
    uint32_t w[KIND == KVQ_GKV_OCT || KIND == KVQ_GKV_OCTQ || KIND == KVQ_GKV_HQMQ || KIND == KVQ_GKV_HQMQO ? 4 : B / 2 + 1]; // OCTOPUS: ≤ 3 code words + the sign word
    uint4 r[2];
};
#define OCT_NW(B) ((6 * (3 * (B) + 1) + 31) / 32) // kvq_gkv_oct_words

template <int KIND, int B, int D>
__device__ __forceinline__ void load_pos(const side_p &s, const uint8_t *reg, int pos, int L, bool ok, row_t<KIND, B> &x) {
    if (KIND <= KVQ_GKV_F16) {
        const int slot = s.ring > 0 ? pos % s.ring : pos;
        const uint4 *p = (const uint4 *)(reg + ((size_t)slot * D + 16 * L) * 2);
        if (ok) x.r[0] = __ldg(p), x.r[1] = __ldg(p + 1);
        else x.r[0] = x.r[1] = make_uint4(0, 0, 0, 0);
    } else if constexpr (KIND == KVQ_GKV_OCT || KIND == KVQ_GKV_OCTQ) { // the lane's code words [, its 16 sign bits in w[3]]
        constexpr int NWd = OCT_NW(B), RB = 4 * (D / 16) * NWd + (KIND == KVQ_GKV_OCTQ ? D / 8 : 0);
        const uint8_t *row = reg + (size_t)pos * RB;
#pragma unroll
        for (int p = 0; p < 4; p++) x.w[p] = 0;
        if (ok) {
#pragma unroll
            for (int p = 0; p < NWd; p++) x.w[p] = __ldg((const uint32_t *)(row + 4 * (NWd * L + p)));
            if (KIND == KVQ_GKV_OCTQ) x.w[3] = __ldg((const unsigned short *)(row + 4 * (D / 16) * NWd + 2 * L));
        }
    } else if constexpr (KIND == KVQ_GKV_HQMQ || KIND == KVQ_GKV_HQMQO) { // the lane's words of 4 chunk codes (the same rows)
        constexpr int NWd = (4 * B + 31) / 32;
        const uint8_t *row = reg + (size_t)pos * (4 * (D / 16) * NWd);
#pragma unroll
        for (int p = 0; p < 4; p++) x.w[p] = 0;
        if (ok)
#pragma unroll
            for (int p = 0; p < NWd; p++) x.w[p] = __ldg((const uint32_t *)(row + 4 * (NWd * L + p)));
    } else if constexpr (KIND == KVQ_GKV_TPROD) { // (B−1)-bit codes' planes, then the sign plane in w[B/2]
        const uint8_t *row = reg + (size_t)pos * ROWB(B);
        if (ok) {
#pragma unroll
            for (int p = 0; p < (B - 1) / 2; p++) x.w[p] = __ldg((const uint32_t *)(row + p * (D / 4) + 4 * L));
            if ((B - 1) & 1) x.w[(B - 1) / 2] = __ldg((const unsigned short *)(row + ((B - 1) / 2) * (D / 4) + 2 * L));
            x.w[B / 2] = __ldg((const unsigned short *)(row + ROWB(B - 1) + 2 * L));
        } else {
#pragma unroll
            for (int p = 0; p <= B / 2; p++) x.w[p] = 0;
        }
    } else {
        if (ok) load_row<B, D>(reg + (size_t)pos * ROWB(B), L, x.w);
        else {
#pragma unroll
            for (int p = 0; p <= B / 2; p++) x.w[p] = 0;
        }
    }
}

// The NP passes of a group of (512/D)·NP positions (512/D positions a pass, lane sub's position).
template <int KIND, int B, int NP, int D>
__device__ __forceinline__ void load_group(const side_p &s, const uint8_t *reg, int tg, int t1, int L, int sub, row_t<KIND, B> (&x)[NP]) {
#pragma unroll
    for (int ps = 0; ps < NP; ps++) {
        const int pos = tg + (512 / D) * ps + sub; // 512 / D positions a pass
        load_pos<KIND, B, D>(s, reg, pos, L, pos < t1, x[ps]);
    }
}

// HQKV: the lane's 16 rotated-frame coordinates embed(c) − U of a position (times γ/(α√d)
// later), U regenerated from the head's seed and the position's counter (kernels/kv_hqkv.h).
template <int B>
__device__ __forceinline__ void hqkv_values(const uint32_t (&w)[B / 2 + 1], const side_p &s, const uint8_t *reg, int pos, int g, int j0,
                                            float (&v)[16]) {
    constexpr float off = (float)(1 << (B > 0 ? B - 1 : 0));
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t m = gather<B>(w, k);
#pragma unroll
        for (int n = 0; n < 4; n++) v[4 * n + k] = byte_f(m, n) - off;
    }
    if (s.lat == KVQ_HK_A2) // A2's first coordinate of each pair is √3·ny (dims j0 + i, i even)
#pragma unroll
        for (int i = 0; i < 16; i += 2) v[i] = __fmul_rn(KVQ_HK_SQRT3_F, v[i]);
    if (s.dither) {
        float U[16];
        const uint32_t ctr = __ldg((const uint32_t *)(reg + s.side_off + (size_t)pos * 8 + 4));
        kvq_hk_dither(s.lat, s.seeds[g], ctr, j0, 16, U);
#pragma unroll
        for (int i = 0; i < 16; i++) v[i] = __fsub_rn(v[i], U[i]);
    }
}

// HQMQ: the lane's 4 chunks r·C[idx] (B-bit codes idx | r << ib; × σ/(2^b_r − 1) later), C the
// head's joint codebook (2^ib, 4) read through the read-only cache.
template <int B>
__device__ __forceinline__ void hqmq_values(const uint32_t *w, const float *cbh, int ib, float (&v)[16]) {
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int lo = c * B / 32, sh = c * B % 32;
        const uint32_t code = __funnelshift_r(w[lo], w[lo + 1 < 4 ? lo + 1 : 3], sh) & ((1u << B) - 1);
        const float r = (float)(code >> ib);
        const float4 C = __ldg((const float4 *)(cbh + 4 * (code & ((1u << ib) - 1))));
        v[4 * c] = r * C.x, v[4 * c + 1] = r * C.y, v[4 * c + 2] = r * C.z, v[4 * c + 3] = r * C.w;
    }
}

// HQMQ with outliers (KVQ_GKV_HQMQO): the lane's 4 chunks with σ/(2^b_r − 1) folded in (σ is the
// inliers' scale only, 0 for an all-outlier token, so it cannot stay a factor of the score or of
// p): r·σ'·C[idx] for an inlier code, and for an outlier's code M + j with j < the token's n_out the
// 4 fp16 of pool chunk off + j. An outlier's radius bits are 0 and C's padded rows past M zero, so
// r·σ'·C[idx] is 0 there and the pool read is the only branch (rare, lane-local); j ≥ n_out (an
// outlier a full pool dropped) stays 0. The side (fp16 σ, u16 n_out, u32 off) is one 8-byte load,
// the same address for the position's lanes. Only for pos < the written positions (the side of a
// position not written could index the pool anywhere).
template <int B>
__device__ __forceinline__ void hqmqo_values(const uint32_t *w, const side_p &s, const uint8_t *reg, int pos, const float *cbh,
                                             float (&v)[16]) {
    const uint2 sd = __ldg((const uint2 *)(reg + s.side_off + (size_t)pos * 8));
    const float sg = __half2float(__ushort_as_half((unsigned short)(sd.x & 0xFFFFu))) * s.inv_scale;
    const uint32_t n_out = sd.x >> 16;
    const uint2 *pool = (const uint2 *)(reg + s.pool_off) + sd.y; // the token's first outlier chunk
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int lo = c * B / 32, sh = c * B % 32;
        const uint32_t code = __funnelshift_r(w[lo], w[lo + 1 < 4 ? lo + 1 : 3], sh) & ((1u << B) - 1);
        const uint32_t idx = code & ((1u << s.lat) - 1);
        const float r = (float)(code >> s.lat) * sg;
        const float4 C = __ldg((const float4 *)(cbh + 4 * idx));
        v[4 * c] = r * C.x, v[4 * c + 1] = r * C.y, v[4 * c + 2] = r * C.z, v[4 * c + 3] = r * C.w;
        const uint32_t j = idx - (uint32_t)s.m_out; // wraps past n_out for an inlier (idx < M)
        if (j < n_out) {
            const uint2 o = __ldg(pool + j);
            const float2 a = __half22float2(*(const __half2 *)&o.x), b = __half22float2(*(const __half2 *)&o.y);
            v[4 * c] = a.x, v[4 * c + 1] = a.y, v[4 * c + 2] = b.x, v[4 * c + 3] = b.y;
        }
    }
}

template <int KIND, int B>
__device__ __forceinline__ void values(const row_t<KIND, B> &x, const float *cb, float (&v)[16]) {
    if (KIND <= KVQ_GKV_F16) {
        dense_vals<KIND>(x.r, v);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t m = gather<B>(x.w, k);
#pragma unroll
            for (int n = 0; n < 4; n++) {
                if (KIND == KVQ_GKV_TURBO) v[4 * n + k] = cb[(m >> (8 * n)) & 0xFFu];
                else v[4 * n + k] = byte_f(m, n);
            }
        }
    }
}

__device__ __forceinline__ float h2f(const uint8_t *p) { return __half2float(__ldg((const __half *)p)); }

// The chunk's softmax of query head h (one warp): max, 2^(s − max) in place, sum.
template <int G>
__device__ __forceinline__ void chunk_softmax(float (&sc)[KVQ_GKV_MAX_CHUNK][G], int h, int lane, int n, float *mh, float *lh) {
    float m = -INFINITY;
    for (int t = lane; t < n; t += 32) m = fmaxf(m, sc[t][h]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.0f;
    for (int t = lane; t < n; t += 32) {
        const float e = exp2f(sc[t][h] - m);
        sc[t][h] = e;
        l += e;
    }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) mh[h] = m, lh[h] = l;
}

// One block's chunk: its partial results, or nothing (a captured step's spare block). sc (the
// scores) and red (the warps' Σ p·V) are the kernel's, for the fused merge after this.
template <int KK0, int KB, int VK, int VB, bool VH, int D, int G, int GS>
__device__ __forceinline__ void split_chunk(const attn_p &p, float (&sc)[KVQ_GKV_MAX_CHUNK][G], float (&red)[NW][G][D]) {
    constexpr bool q8 = KK0 == KQ8;
    constexpr int KK = q8 ? KVQ_GKV_INT : KK0;
    __shared__ float qa[G];
    __shared__ __align__(16) float qs[G][D];
    __shared__ float cbk[256], cbv[256];
    __shared__ float mh[G], lh[G];
    constexpr bool OCTK = KK == KVQ_GKV_OCT || KK == KVQ_GKV_OCTQ, QJLK = KK == KVQ_GKV_TPROD || KK == KVQ_GKV_OCTQ;
    __shared__ __align__(16) float sqs[QJLK ? G : 1][D]; // TPROD: S R q; OCTQ: R' R q
    __shared__ float odirs[OCTK ? 3 << (2 * (KB + 1)) : 1], orho[OCTK ? 1 << (KB > 0 ? KB - 1 : 0) : 1]; // OCTOPUS tables
    const kvq_gkv_blk bk = kvq_gkv_block_of(p.dyn); // b: the row of q and of the scratch; bk.r: the cache's sequence
    // blockIdx.y = hy: query heads hy·G .. hy·G + G − 1, of KV head g = hy / GS (GS blocks a KV head)
    constexpr int LP = D / 16, PP = 32 / LP; // lanes a position (16 dims a lane), positions a pass
    static_assert((D == 128 || D == 64) && G * D / 4 <= NT && (!q8 || (D == 128 && G == 4 && GS == 1)), "a built shape");
    const int s = bk.s, hy = blockIdx.y, g = hy / GS, b = bk.b;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, L = lane & (LP - 1), sub = lane >> (LP == 8 ? 3 : 2), j0 = 16 * L;
    int t0, t1;
    if (!kvq_gkv_block_range(p.dyn, b, p.t_begin, p.t_end, p.chunk, s, &t0, &t1)) return; // a captured step's / rows mode's spare block
    const int n = t1 - t0;
    const size_t ri = (size_t)bk.r * p.n_kv + g;
    if (n <= 0) return kvq_gkv_empty_split<G, D, NT>(p, b, hy, s); // weight 0 in the merge
    // the first group of keys is requested before q (it does not depend on it)
    const uint8_t *kreg = p.k.base + ri * p.k.region, *vreg = p.v.base + ri * p.v.region;
    constexpr int NPK = KK == KVQ_GKV_KIVI ? 32 / PP : 4, UK = PP * NPK; // KIVI: a 32-position scale group
    const int ngk = (n + UK - 1) / UK;
    row_t<KK, KB> x[NPK], xn[NPK];
    if (warp < ngk) load_group<KK, KB, NPK, D>(p.k, kreg, t0 + UK * warp, t1, L, sub, x);
    for (int e = threadIdx.x; e < G * D; e += NT) qs[e / D][e % D] = p.q[((size_t)b * p.H + hy * G + e / D) * D + e % D];
    if (KK == KVQ_GKV_TURBO)
        for (int e = threadIdx.x; e < (1 << KB); e += NT) cbk[e] = p.k.cb[(size_t)g * (1 << KB) + e];
    if constexpr (KK == KVQ_GKV_TPROD)
        for (int e = threadIdx.x; e < (1 << (KB - 1)); e += NT) cbk[e] = p.k.cb[(size_t)g * (1 << (KB - 1)) + e];
    if constexpr (OCTK) {
        for (int e = threadIdx.x; e < (3 << (2 * (KB + 1))); e += NT) odirs[e] = p.k.cb[((size_t)g << (2 * (KB + 1))) * 3 + e];
        for (int e = threadIdx.x; e < (1 << (KB - 1)); e += NT) orho[e] = p.k.rho[(size_t)g * (1 << (KB - 1)) + e];
    }
    if (VK == KVQ_GKV_TURBO)
        for (int e = threadIdx.x; e < (1 << VB); e += NT) cbv[e] = p.v.cb[(size_t)g * (1 << VB) + e];
    __syncthreads();
    if (KK == KVQ_GKV_TURBO || KK == KVQ_GKV_TPROD) { // q in the keys' rotated frame, once: WHT(signs ⊙ [r·] q)/√d
        if (p.k.quat) { // qturbo: the unit quaternion r left-multiplies each 4-chunk first
            const float *r = p.k.quat + (size_t)g * 4;
            const float a0 = r[0], a1 = r[1], a2 = r[2], a3 = r[3];
            float o[4] = {0, 0, 0, 0};
            const int e = threadIdx.x; // NT = G·D/4 chunks
            if (e < G * D / 4) {
                const float *b4 = &qs[0][0] + 4 * e;
                o[0] = a0 * b4[0] - a1 * b4[1] - a2 * b4[2] - a3 * b4[3];
                o[1] = a0 * b4[1] + a1 * b4[0] + a2 * b4[3] - a3 * b4[2];
                o[2] = a0 * b4[2] - a1 * b4[3] + a2 * b4[0] + a3 * b4[1];
                o[3] = a0 * b4[3] + a1 * b4[2] - a2 * b4[1] + a3 * b4[0];
            }
            __syncthreads();
            if (e < G * D / 4)
                for (int j = 0; j < 4; j++) (&qs[0][0])[4 * e + j] = o[j];
            __syncthreads();
        }
        for (int e = threadIdx.x; e < G * D; e += NT) qs[e / D][e % D] *= p.k.signs[(size_t)g * D + e % D];
        kvq_gkv_wht<D>(&qs[0][0], G);
    }
    if constexpr (OCTK) { // q_rot = WHT(s1 ⊙ q)/√d; OCTQ also R' q_rot = WHT(s2 ⊙ q_rot)/√d into sqs
        for (int e = threadIdx.x; e < G * D; e += NT) qs[e / D][e % D] *= p.k.signs[(size_t)g * 2 * D + e % D];
        kvq_gkv_wht<D>(&qs[0][0], G);
        if constexpr (KK == KVQ_GKV_OCTQ) {
            for (int e = threadIdx.x; e < G * D; e += NT) sqs[e / D][e % D] = qs[e / D][e % D] * p.k.signs[(size_t)g * 2 * D + D + e % D];
            kvq_gkv_wht<D>(&sqs[0][0], G);
        }
    }
    if constexpr (KK == KVQ_GKV_TPROD) { // S R q (S: this head's QJL matrix), once per block
        const float *S = p.k.mat + (size_t)g * D * D;
        for (int e = threadIdx.x; e < G * D; e += NT) {
            const int h = e / D, j = e % D;
            float a = 0.0f;
            for (int k = 0; k < D; k++) a = fmaf(S[(size_t)j * D + k], qs[h][k], a);
            sqs[h][j] = a;
        }
        __syncthreads();
    }
    if (KK == KVQ_GKV_HQKV && p.k.rot == 1) { // q in the keys' frame: <q, Sᵀy> = <S q, y>
        for (int e = threadIdx.x; e < G * D; e += NT) qs[e / D][e % D] *= p.k.signs[(size_t)g * D + e % D];
        __syncthreads();
    } else if (KK == KVQ_GKV_HQKV && p.k.rot == 2) { // Q q, Q (D, D) of this head; red as scratch
        float *t = &red[0][0][0];
        const float *Q = p.k.mat + (size_t)g * D * D;
        for (int e = threadIdx.x; e < G * D; e += NT) {
            const int h = e / D, i = e % D;
            float a = 0.0f;
            for (int k = 0; k < D; k++) a = fmaf(Q[(size_t)i * D + k], qs[h][k], a);
            t[e] = a;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < G * D; e += NT) qs[e / D][e % D] = t[e];
        __syncthreads();
    }

    // ---- scores
    float qe[G][16], zq[G];
    float sqe[QJLK ? G : 1][16], sqsl[G]; // TPROD, OCTQ: the lane's S R q (R' R q) and its sum
    float qt[OCTK ? G : 1][18];            // OCTOPUS: the lane's dims 18L.. of q_rot (0 past D)
    if constexpr (OCTK)
#pragma unroll
        for (int h = 0; h < G; h++)
#pragma unroll
            for (int m = 0; m < 18; m++) qt[h][m] = 18 * L + m < D ? qs[h][18 * L + m] : 0.0f;
    if constexpr (QJLK)
#pragma unroll
        for (int h = 0; h < G; h++) {
            sqsl[h] = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; i++) sqe[h][i] = sqs[h][j0 + i], sqsl[h] += sqe[h][i];
        }
    int qw[G][4], qis[G]; // q8: q as int8, the bytes of word k = dims (4n + k), and Σ of the lane's int8 q
    float sq[G];
    if (q8) { // one scale per query head: max |q| / 127
        const int h = warp;
        float m = 0.0f;
        for (int i = lane; i < D; i += 32) m = fmaxf(m, fabsf(qs[h][i]));
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) qa[h] = m > 0.0f ? m / 127.0f : 1.0f;
        __syncthreads();
#pragma unroll
        for (int h2 = 0; h2 < G; h2++) {
            sq[h2] = qa[h2];
            const float inv = 1.0f / sq[h2];
            qis[h2] = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint32_t wd = 0;
#pragma unroll
                for (int n2 = 0; n2 < 4; n2++) {
                    int qi = __float2int_rn(qs[h2][j0 + 4 * n2 + k] * inv);
                    qi = qi < -127 ? -127 : qi > 127 ? 127 : qi;
                    wd |= ((uint32_t)qi & 0xFFu) << (8 * n2);
                    qis[h2] += qi;
                }
                qw[h2][k] = (int)wd;
            }
        }
    } else if (KK != KVQ_GKV_KIVI) {
        float qsum[G];
#pragma unroll
        for (int h = 0; h < G; h++) {
            qsum[h] = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; i++) qe[h][i] = qs[h][j0 + i], qsum[h] += qe[h][i];
            zq[h] = KK == KVQ_GKV_INT ? -(float)QMAX(KB) * qsum[h] : 0.0f;
        }
    }
    // Software pipelining: a warp issues the next group's loads before this group's arithmetic.
    // Groups of NPK passes (KIVI keys: 32/PP = their 32-position scale group, 8 at head_dim 128; others
    // 4, so that two groups in registers cost what one group of 8 did).
    for (int gi = warp; gi < ngk; gi += NW) {
        const int tg = t0 + UK * gi;
        if (gi + NW < ngk) load_group<KK, KB, NPK, D>(p.k, kreg, tg + UK * NW, t1, L, sub, xn);
        if (KK == KVQ_GKV_KIVI) { // q ⊙ scale and Σ q·zero of this group's channels
            const uint8_t *sd = kreg + p.k.side_off + ((size_t)(tg / 32) * D + j0) * 4;
#pragma unroll
            for (int h = 0; h < G; h++) zq[h] = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; i++) {
                const __half2 sz = __ldg((const __half2 *)(sd + 4 * i));
                const float sc_ = __low2float(sz), z = __high2float(sz);
#pragma unroll
                for (int h = 0; h < G; h++) qe[h][i] = qs[h][j0 + i] * sc_, zq[h] = fmaf(qs[h][j0 + i], z, zq[h]);
            }
        }
#pragma unroll
        for (int ps = 0; ps < NPK; ps++) {
            const int pos = tg + PP * ps + sub;
            float a[G];
            if (q8) {
                int ai[G] = {0};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int m = (int)gather_p<KB>(x[ps].w, k);
#pragma unroll
                    for (int h = 0; h < G; h++) ai[h] = __dp4a(m, qw[h][k], ai[h]);
                }
#pragma unroll
                for (int h = 0; h < G; h++) a[h] = (float)(ai[h] - QMAX(KB) * qis[h]) * sq[h];
            } else {
                float v[16];
                if constexpr (KK == KVQ_GKV_HQKV) {
                    if (pos < t1) hqkv_values<KB>(x[ps].w, p.k, kreg, pos, g, j0, v);
                    else
#pragma unroll
                        for (int i = 0; i < 16; i++) v[i] = 0.0f;
                } else if constexpr (KK == KVQ_GKV_HQMQ) {
                    hqmq_values<KB>(x[ps].w, p.k.cb + ((size_t)g << p.k.lat) * 4, p.k.lat, v);
                } else if constexpr (KK == KVQ_GKV_HQMQO) {
                    if (pos < t1) hqmqo_values<KB>(x[ps].w, p.k, kreg, pos, p.k.cb + ((size_t)g << p.k.lat) * 4, v);
                    else
#pragma unroll
                        for (int i = 0; i < 16; i++) v[i] = 0.0f;
                } else if constexpr (OCTK) { // Σ over the lane's 6 triplets of ρ̂ <q_rot, n̂> (eq. 13)
                    constexpr int CW = 3 * KB + 1, BD = KB + 1;
#pragma unroll
                    for (int h = 0; h < G; h++) a[h] = 0.0f;
#pragma unroll
                    for (int j = 0; j < 6; j++) {
                        const int lo = j * CW / 32, sh = j * CW % 32;
                        const uint32_t code = __funnelshift_r(x[ps].w[lo], x[ps].w[lo + 1 < 4 ? lo + 1 : 3], sh) & ((1u << CW) - 1);
                        const float *dn = odirs + 3 * (code & ((1u << (2 * BD)) - 1));
                        const float r = orho[code >> (2 * BD)], d0 = r * dn[0], d1 = r * dn[1], d2 = r * dn[2];
#pragma unroll
                        for (int h = 0; h < G; h++) a[h] = fmaf(qt[h][3 * j], d0, fmaf(qt[h][3 * j + 1], d1, fmaf(qt[h][3 * j + 2], d2, a[h])));
                    }
                } else if constexpr (KK == KVQ_GKV_TPROD) { // centroids of the (KB−1)-bit codes
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const uint32_t m = gather_p<KB - 1>(x[ps].w, k);
#pragma unroll
                        for (int n2 = 0; n2 < 4; n2++) v[4 * n2 + k] = cbk[(m >> (8 * n2)) & 0xFFu];
                    }
                } else
                    values<KK, KB>(x[ps], cbk, v);
                if constexpr (!OCTK)
#pragma unroll
                    for (int h = 0; h < G; h++) {
                        a[h] = zq[h];
#pragma unroll
                        for (int i = 0; i < 16; i++) a[h] = fmaf(qe[h][i], v[i], a[h]);
                    }
                if constexpr (QJLK) { // TPROD: + sqrt(π/2)/d · γ_r · (2 <S R q, σ> − Σ S R q); OCTQ: sqrt(π/(2d)), R'
                    const uint32_t sg = x[ps].w[KK == KVQ_GKV_OCTQ ? 3 : KB / 2]; // bit 4k + n: dim j0 + 4n + k
                    const float gr = pos >= t1 ? 0.0f
                                     : KK == KVQ_GKV_OCTQ ? (D == 128 ? 0.110778366f : 0.15666427f) * h2f(kreg + p.k.side_off + (size_t)pos * 8 + 4)
                                                          : 1.2533141373155001f / D * h2f(kreg + p.k.side_off + (size_t)pos * 4 + 2);
#pragma unroll
                    for (int h = 0; h < G; h++) {
                        float t = 0.0f;
#pragma unroll
                        for (int k = 0; k < 4; k++)
#pragma unroll
                            for (int n2 = 0; n2 < 4; n2++)
                                if ((sg >> (4 * k + n2)) & 1u) t += sqe[h][4 * n2 + k];
                        a[h] = fmaf(gr, 2.0f * t - sqsl[h], a[h]);
                    }
                }
            }
#pragma unroll
            for (int h = 0; h < G; h++) {
                a[h] += __shfl_xor_sync(0xffffffffu, a[h], 1);
                a[h] += __shfl_xor_sync(0xffffffffu, a[h], 2);
                if constexpr (LP == 8) a[h] += __shfl_xor_sync(0xffffffffu, a[h], 4);
            }
            if (L == 0 && pos < t1) {
                float mul = p.sl2;
                if (KK == KVQ_GKV_INT || KK == KVQ_GKV_TURBO) mul *= h2f(kreg + p.k.side_off + (size_t)pos * 2);
                if (KK == KVQ_GKV_HQKV) mul *= __ldg((const float *)(kreg + p.k.side_off + (size_t)pos * 8)) * p.k.inv_scale;
                if (KK == KVQ_GKV_TPROD) mul *= h2f(kreg + p.k.side_off + (size_t)pos * 4);
                if (KK == KVQ_GKV_HQMQ) mul *= h2f(kreg + p.k.side_off + (size_t)pos * 2) * p.k.inv_scale;
                if (OCTK) mul *= __ldg((const float *)(kreg + p.k.side_off + (size_t)pos * (KK == KVQ_GKV_OCTQ ? 8 : 4)));
                if constexpr (G == 4) *(float4 *)sc[pos - t0] = make_float4(a[0] * mul, a[1] * mul, a[2] * mul, a[3] * mul);
                else
#pragma unroll
                    for (int h = 0; h < G; h++) sc[pos - t0][h] = a[h] * mul;
            }
        }
#pragma unroll
        for (int ps = 0; ps < NPK; ps++) x[ps] = xn[ps];
    }
    // values likewise, 4 passes a group; the first group is loaded before the softmax (it does
    // not depend on it)
    constexpr int NPV = 4, UV = PP * NPV;
    const int ngv = (n + UV - 1) / UV;
    row_t<VK, VB> y[NPV], yn[NPV];
    if (warp < ngv) load_group<VK, VB, NPV, D>(p.v, vreg, t0 + UV * warp, t1, L, sub, y);
    __syncthreads();

    // ---- the chunk's softmax: warp h takes query head h (heads h, h + NW, ... when G > NW)
    if constexpr (G == NW) chunk_softmax<G>(sc, warp, lane, n, mh, lh);
    else
        for (int h = warp; h < G; h += NW) chunk_softmax<G>(sc, h, lane, n, mh, lh);
    __syncthreads();

    // ---- Σ p·V (int and KIVI codes: products in fp16 pairs, HFMA2, summed into fp32 per group
    // of 32 positions, unless kvq_gkv_set_half_values(0))
    constexpr bool vh = VH && (VK == KVQ_GKV_INT || VK == KVQ_GKV_KIVI);
    __half2 hacc[G][8];
#pragma unroll
    for (int h = 0; h < G; h++)
#pragma unroll
        for (int j = 0; j < 8; j++) hacc[h][j] = __float2half2_rn(0.0f);
    float acc[G][16], za[G];
#pragma unroll
    for (int h = 0; h < G; h++) {
        za[h] = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) acc[h][i] = 0.0f;
    }
    for (int gi = warp; gi < ngv; gi += NW) {
        const int tg = t0 + UV * gi;
        if (gi + NW < ngv) load_group<VK, VB, NPV, D>(p.v, vreg, tg + UV * NW, t1, L, sub, yn);
#pragma unroll
        for (int ps = 0; ps < NPV; ps++) {
            const int pos = tg + PP * ps + sub;
            if (pos >= t1) continue;
            float w[G];
            if constexpr (G == 4) {
                const float4 pp = *(const float4 *)sc[pos - t0];
                w[0] = pp.x, w[1] = pp.y, w[2] = pp.z, w[3] = pp.w;
            } else
#pragma unroll
                for (int h = 0; h < G; h++) w[h] = sc[pos - t0][h];
            if (VK == KVQ_GKV_INT || VK == KVQ_GKV_TURBO) {
                const float s_ = h2f(vreg + p.v.side_off + (size_t)pos * 2);
#pragma unroll
                for (int h = 0; h < G; h++) {
                    w[h] *= s_;
                    if (VK == KVQ_GKV_INT) za[h] = fmaf(-(float)QMAX(VB), w[h], za[h]);
                }
            } else if (VK == KVQ_GKV_HQKV || VK == KVQ_GKV_HQMQ) {
                const float s_ = VK == KVQ_GKV_HQMQ ? h2f(vreg + p.v.side_off + (size_t)pos * 2) * p.v.inv_scale
                                                    : __ldg((const float *)(vreg + p.v.side_off + (size_t)pos * 8)) * p.v.inv_scale;
#pragma unroll
                for (int h = 0; h < G; h++) w[h] *= s_;
            } else if (VK == KVQ_GKV_KIVI) {
                const __half2 sz = __ldg((const __half2 *)(vreg + p.v.side_off + ((size_t)pos * (D / 32) + L / 2) * 4));
                const float s_ = __low2float(sz), z = __high2float(sz);
#pragma unroll
                for (int h = 0; h < G; h++) za[h] = fmaf(w[h], z, za[h]), w[h] *= s_;
            }
            if (vh) { // codes → half2 (1024 + c) by one byte permute, minus 1024 exactly, then HFMA2
                __half2 wh[G];
#pragma unroll
                for (int h = 0; h < G; h++) wh[h] = __float2half2_rn(w[h]);
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const uint32_t m = gather_p<VB>(y[ps].w, k);
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const uint32_t u = __byte_perm(m, 0x64646464u, j ? 0x5342u : 0x5140u);
                        const __half2 hv = __hsub2(*(const __half2 *)&u, __float2half2_rn(1024.0f));
#pragma unroll
                        for (int h = 0; h < G; h++) hacc[h][2 * k + j] = __hfma2(wh[h], hv, hacc[h][2 * k + j]);
                    }
                }
            } else {
                float v[16];
                if constexpr (VK == KVQ_GKV_HQKV) hqkv_values<VB>(y[ps].w, p.v, vreg, pos, g, j0, v);
                else if constexpr (VK == KVQ_GKV_HQMQ) hqmq_values<VB>(y[ps].w, p.v.cb + ((size_t)g << p.v.lat) * 4, p.v.lat, v);
                else if constexpr (VK == KVQ_GKV_HQMQO) hqmqo_values<VB>(y[ps].w, p.v, vreg, pos, p.v.cb + ((size_t)g << p.v.lat) * 4, v);
                else values<VK, VB>(y[ps], cbv, v);
#pragma unroll
                for (int h = 0; h < G; h++)
#pragma unroll
                    for (int i = 0; i < 16; i++) acc[h][i] = fmaf(w[h], v[i], acc[h][i]);
            }
        }
        if (vh) // the group's half sums into the fp32 sums: 4 positions a lane at most in fp16
#pragma unroll
            for (int h = 0; h < G; h++)
#pragma unroll
                for (int k = 0; k < 4; k++)
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const float2 f = __half22float2(hacc[h][2 * k + j]);
                        acc[h][8 * j + k] += f.x, acc[h][8 * j + 4 + k] += f.y;
                        hacc[h][2 * k + j] = __float2half2_rn(0.0f);
                    }
#pragma unroll
        for (int ps = 0; ps < NPV; ps++) y[ps] = yn[ps];
    }
#pragma unroll
    for (int h = 0; h < G; h++)
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float y = acc[h][i] + za[h];
            if constexpr (LP == 4) y += __shfl_xor_sync(0xffffffffu, y, 4);
            y += __shfl_xor_sync(0xffffffffu, y, 8);
            y += __shfl_xor_sync(0xffffffffu, y, 16);
            if (sub == 0) red[warp][h][j0 + i] = y;
        }
    __syncthreads();
    // the block's slot of the partial results (formed here, not kept live through the loop)
    const kvq_gkv_blk bw = kvq_gkv_block_of(p.dyn); // (s, b) formed again: not held through the loop
    const int slot = kvq_gkv_block_slot(p.dyn, bw.b, p.slot0, bw.s);
    float *po = p.po + (((size_t)bw.b * p.H + hy * G) * p.n_slot + slot) * D;
    float *pml = p.pml + (((size_t)bw.b * p.H + hy * G) * p.n_slot + slot) * 2;
    kvq_gkv_split_out<NW, NT>(red, po, G, D, p.n_slot);
    if (threadIdx.x < G) pml[(size_t)threadIdx.x * p.n_slot * 2] = mh[threadIdx.x], pml[(size_t)threadIdx.x * p.n_slot * 2 + 1] = lh[threadIdx.x];
}

// A split block (split_chunk), then, in the attend's final launch with the merge fused, the last
// block per (sequence, KV head) merges: the scores' and the warps' arrays are its shared memory.
// The rotation back is compiled in where the launch can be the final one of a cache with rotated
// values: TurboQuant / HyperQuant-KV values, and the fp16 kernel (window keys and window chunks).
// Blocks an SM the split kernel is compiled for: 4 (≤ 128 registers) where ptxas keeps the kernel
// without spills at that budget — packed int, KIVI, TurboQuant/qturbo, OCTOPUS (no QJL) and HQMQ keys
// with or without outliers (19-bit codes, s192: 8 bytes of spill without outliers, 4 with; at 3 blocks
// HQMQO uses 146-152 registers), and the half-value kernels — else 3 (≤ 168: fp16 window keys,
// HyperQuant-KV, turboquant-prod and OCTOPUS-QJL keys spill 56–1580 bytes at 128). KVQ_SPLIT_MINB3:
// every kernel at 3 (the build before).
__host__ __device__ constexpr int split_min_blocks(int kk, bool vh) {
#ifdef KVQ_SPLIT_MINB3
    return vh ? 4 : 3;
#else
    return vh || kk == KVQ_GKV_INT || kk == KVQ_GKV_KIVI || kk == KVQ_GKV_TURBO || kk == KVQ_GKV_OCT || kk == KVQ_GKV_HQMQ ||
                   kk == KVQ_GKV_HQMQO
               ? 4
               : 3;
#endif
}

template <int KK0, int KB, int VK, int VB, bool VH = false, int D = KVQ_GKV_HEAD_DIM, int G = KVQ_GKV_GROUP, int GS = 1>
__global__ void __launch_bounds__(NT, split_min_blocks(KK0, VH)) attn_split(attn_p p) {
    __shared__ __align__(16) float sc[KVQ_GKV_MAX_CHUNK][G];
    __shared__ __align__(16) float red[NW][G][D];
    static_assert(KVQ_GKV_MAX_CHUNK * G >= G * KVQ_GKV_MERGE_MAX && NW * G * D >= G * (D + D / 32), "the merge's shared memory");
    // the attend's next launch (window chunks, the merge) may start: what it reads of this grid
    // it reads after its own griddepcontrol.wait
    asm volatile("griddepcontrol.launch_dependents;");
    split_chunk<KK0, KB, VK, VB, VH, D, G, GS>(p, sc, red);
    if (p.wait_end) asm volatile("griddepcontrol.wait;" ::: "memory");
    constexpr bool ROT = VK == KVQ_GKV_TURBO || VK == KVQ_GKV_HQKV || VK == KVQ_GKV_F16;
    if constexpr (D == KVQ_GKV_HEAD_DIM && G == KVQ_GKV_GROUP && GS == 1) // (the host fuses the merge only for this shape)
        kvq_gkv_merge_last<ROT, KVQ_GKV_MERGE_MAX>(p, blockIdx.z, blockIdx.y, &sc[0][0], &red[0][0][0], &red[0][0][0] + G * D);
}

// Merges the chunks of one (sequence, query head) (kv_merge.cuh), after the split launches.
// stride: the scratch's slots per (sequence, query head); n_slot of them hold chunks (under
// dyn.d_pos, a graph-captured step: n_slot and n_rot from the plan of the position).
template <int D, int G>
__global__ void __launch_bounds__(D) attn_merge(const float *__restrict__ po, const float *__restrict__ pml, float *__restrict__ out,
                                                int n_slot, int stride, int H, kvq_gkv_post pp, kvq_gkv_dyn dyn) {
    __shared__ float x[D], w[KVQ_GKV_MERGE_MAX], red[D / 32];
    asm volatile("griddepcontrol.wait;" ::: "memory"); // the split launches' partials (a programmatic dependent: KVQ_CUDA_KV_PDL)
    const int bh = blockIdx.x;
    if (dyn.d_pos || dyn.rows) { // rows mode: block bh = row · H + query head
        const kvq_gkv_plan pl = kvq_gkv_dyn_plan(dyn, bh / H);
        n_slot = pl.na + pl.nb + pl.nc;
        pp.n_rot = pl.na + pl.nb;
    }
    kvq_gkv_merge<1, KVQ_GKV_MERGE_MAX, true, false, D>(po, pml, out, n_slot, stride, bh, bh % H / G, pp, w, x, red);
}



// ---- the plain kernels of a shape, and the other shapes' pickers

typedef void (*kvq_gkv_split_fn)(attn_p);
typedef void (*kvq_gkv_merge_fn)(const float *, const float *, float *, int, int, int, kvq_gkv_post, kvq_gkv_dyn);

#define KV_BITS(X, KIND) X(KIND, 2) X(KIND, 3) X(KIND, 4)
// HyperQuant-KV's code widths: 5-8 bits cover e8/d4/a2/z at 2-4 bits per sample (kv_gpu.c)
#define HQ_BITS(X, KIND) X(KIND, 5) X(KIND, 6) X(KIND, 7) X(KIND, 8)

/** The fp32 split kernel of shape (D, G, GS) for (K kind, bits, V kind, bits), or NULL: fp16 (the
 *  window), each codec on both sides (turboquant-prod keys with turboquant values, OCTOPUS keys with
 *  KIVI values) and fp16 keys with each codec's values — the combinations kv_attn.cu's pick builds at
 *  (128, 4), without its int8-query and half-value variants. */
template <int D, int G, int GS>
static kvq_gkv_split_fn kvq_gkv_pick_plain(int kk, int kb, int vk, int vb) {
    if (kk == KVQ_GKV_F16 && vk == KVQ_GKV_F16) return attn_split<KVQ_GKV_F16, 0, KVQ_GKV_F16, 0, false, D, G, GS>;
#define SAME(KIND, B) \
    if (kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KIND, B, KIND, B, false, D, G, GS>;
#define F16K(KIND, B) \
    if (kk == KVQ_GKV_F16 && vk == KIND && vb == B) return attn_split<KVQ_GKV_F16, 0, KIND, B, false, D, G, GS>;
#define TPK(KIND, B) \
    if (kk == KVQ_GKV_TPROD && vk == KIND && kb == B && vb == B) return attn_split<KVQ_GKV_TPROD, B, KIND, B, false, D, G, GS>;
#define OCTK_(KIND, B) \
    if (kk == KIND && vk == KVQ_GKV_KIVI && kb == B && vb == B) return attn_split<KIND, B, KVQ_GKV_KIVI, B, false, D, G, GS>;
    KV_BITS(SAME, KVQ_GKV_INT)
    KV_BITS(SAME, KVQ_GKV_KIVI)
    KV_BITS(SAME, KVQ_GKV_TURBO)
    KV_BITS(F16K, KVQ_GKV_INT)
    KV_BITS(F16K, KVQ_GKV_KIVI)
    KV_BITS(F16K, KVQ_GKV_TURBO)
    HQ_BITS(SAME, KVQ_GKV_HQKV)
    HQ_BITS(F16K, KVQ_GKV_HQKV)
    SAME(KVQ_GKV_HQMQ, 13) SAME(KVQ_GKV_HQMQ, 16) SAME(KVQ_GKV_HQMQ, 19)
    F16K(KVQ_GKV_HQMQ, 13) F16K(KVQ_GKV_HQMQ, 16) F16K(KVQ_GKV_HQMQ, 19)
    SAME(KVQ_GKV_HQMQO, 13) SAME(KVQ_GKV_HQMQO, 16) SAME(KVQ_GKV_HQMQO, 19)
    F16K(KVQ_GKV_HQMQO, 13) F16K(KVQ_GKV_HQMQO, 16) F16K(KVQ_GKV_HQMQO, 19)
    KV_BITS(TPK, KVQ_GKV_TURBO)
    KV_BITS(OCTK_, KVQ_GKV_OCT)
    KV_BITS(OCTK_, KVQ_GKV_OCTQ)
#undef SAME
#undef F16K
#undef TPK
#undef OCTK_
    return NULL;
}

/** The plain split kernels and the merge of the shapes other than (128, 4): head_dim 64 with grp =
 *  1, 2, 4 or 8 query heads per KV head (kv_attn_d64.cu), head_dim 128 with 1, 2 or 8
 *  (kv_attn_d128.cu); NULL for any other shape or combination. grp 8 runs two blocks of 4 query
 *  heads per KV head (GS = 2: the grid's y is n_kv · 2). */
kvq_gkv_split_fn kvq_gkv_pick_d64(int grp, int kk, int kb, int vk, int vb);
kvq_gkv_split_fn kvq_gkv_pick_d128(int grp, int kk, int kb, int vk, int vb);
kvq_gkv_merge_fn kvq_gkv_merge_d64(int grp);
kvq_gkv_merge_fn kvq_gkv_merge_d128(int grp);

#endif
