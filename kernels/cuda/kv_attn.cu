// Split-K decode attention over a packed KV cache, and its encoders (kv_attn.h; layout in
// docs/KV.md "GPU execution layout").
//
// attn_split: one block of 128 threads (4 warps) per (chunk, KV head, sequence). A lane owns
// 16 consecutive dims of one position (8 lanes a position at head_dim 128, 4 positions a
// warp per pass) and holds the 4 query heads' 16 coordinates in registers, so one read of
// a key serves every query head of its KV head (GQA). Warp w takes the 32-position groups
// w, w+4, ... of the chunk (a KIVI key group's scales are loaded once per group), loads
// the 8 passes of a group before using them, and a position's score is the sum over its 8
// lanes (3 shuffles). Codes become floats four at a time: the b-bit codes of dims
// (k, k+4, k+8, k+12) are gathered into the 4 bytes of a word from the bit planes, and each
// byte is turned into 2^23 + c with one byte permute. Scores (chunk × 4, in shared memory)
// → the chunk's max and sum per head → Σ p·V with the same lane mapping, the per-position
// scale folded into p and the zero points into one extra sum per head. TurboQuant: q is
// rotated once per block and the centroids are looked up in the rotated frame; the output
// is rotated back once, in the merge.
// The merge of the chunks' (max, sum, Σ p·V) (kv_merge.cuh): by the last block of the final split
// launch to finish for a (sequence, KV head) (fused, KVQ_CUDA_KV_FUSE_MERGE=1), or attn_merge, one
// block per (sequence, query head) after the splits (the default: the fused merge measured 1-7 %
// slower on the H100, session 11).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kv_attn.h"
#include "kernels/cuda/kv_attn_tc.cuh"
#include "kernels/cuda/kv_enc.cuh"
#include "kernels/cuda/kv_merge.cuh"
#include "kernels/kv_hqkv.h"

#define D KVQ_GKV_HEAD_DIM
#define G KVQ_GKV_GROUP
#define NT 128
#define NW (NT / 32)
#define LOG2E 1.4426950408889634f
#define KQ8 16 // internal K kind: int keys scored against an int8 copy of q by dp4a (kvq_gkv_set_int8_query)
#define ROWB(B) ((B) / 2 * (D / 4) + ((B) & 1) * (D / 8)) // ROWB(B)
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
};

struct attn_p {
    const float *q;
    side_p k, v;
    int n_kv, H, t_begin, t_end, chunk, n_slot, slot0; // n_slot: the scratch's slots per (sequence, query head)
    float sl2; // scale · log2(e)
    float *po, *pml;
    kvq_gkv_dyn dyn; // a graph-captured step: the range from the position (d_pos NULL: the fields above)
    kvq_gkv_fuse fz; // the fused merge (fz.on: this is the attend's final split launch)
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
template <int B>
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
    uint32_t w[KIND == KVQ_GKV_OCT || KIND == KVQ_GKV_OCTQ || KIND == KVQ_GKV_HQMQ ? 4 : B / 2 + 1]; // OCTOPUS: ≤ 3 code words + the sign word
    uint4 r[2];
};
#define OCT_NW(B) ((6 * (3 * (B) + 1) + 31) / 32) // kvq_gkv_oct_words

template <int KIND, int B>
__device__ __forceinline__ void load_pos(const side_p &s, const uint8_t *reg, int pos, int L, bool ok, row_t<KIND, B> &x) {
    if (KIND <= KVQ_GKV_F16) {
        const int slot = s.ring > 0 ? pos % s.ring : pos;
        const uint4 *p = (const uint4 *)(reg + ((size_t)slot * D + 16 * L) * 2);
        if (ok) x.r[0] = __ldg(p), x.r[1] = __ldg(p + 1);
        else x.r[0] = x.r[1] = make_uint4(0, 0, 0, 0);
    } else if constexpr (KIND == KVQ_GKV_OCT || KIND == KVQ_GKV_OCTQ) { // the lane's code words [, its 16 sign bits in w[3]]
        constexpr int NWd = OCT_NW(B), RB = 32 * NWd + (KIND == KVQ_GKV_OCTQ ? D / 8 : 0);
        const uint8_t *row = reg + (size_t)pos * RB;
#pragma unroll
        for (int p = 0; p < 4; p++) x.w[p] = 0;
        if (ok) {
#pragma unroll
            for (int p = 0; p < NWd; p++) x.w[p] = __ldg((const uint32_t *)(row + 4 * (NWd * L + p)));
            if (KIND == KVQ_GKV_OCTQ) x.w[3] = __ldg((const unsigned short *)(row + 32 * NWd + 2 * L));
        }
    } else if constexpr (KIND == KVQ_GKV_HQMQ) { // the lane's words of 4 chunk codes
        constexpr int NWd = (4 * B + 31) / 32;
        const uint8_t *row = reg + (size_t)pos * (32 * NWd);
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
        if (ok) load_row<B>(reg + (size_t)pos * ROWB(B), L, x.w);
        else {
#pragma unroll
            for (int p = 0; p <= B / 2; p++) x.w[p] = 0;
        }
    }
}

// The NP passes of a group of 4·NP positions (4 positions a pass, lane sub's position).
template <int KIND, int B, int NP>
__device__ __forceinline__ void load_group(const side_p &s, const uint8_t *reg, int tg, int t1, int L, int sub, row_t<KIND, B> (&x)[NP]) {
#pragma unroll
    for (int ps = 0; ps < NP; ps++) {
        const int pos = tg + 4 * ps + sub;
        load_pos<KIND, B>(s, reg, pos, L, pos < t1, x[ps]);
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

// One block's chunk: its partial results, or nothing (a captured step's spare block). sc (the
// scores) and red (the warps' Σ p·V) are the kernel's, for the fused merge after this.
template <int KK0, int KB, int VK, int VB, bool VH>
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
    const int s = bk.s, g = blockIdx.y, b = bk.b;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, L = lane & 7, sub = lane >> 3, j0 = 16 * L;
    int t0, t1;
    if (!kvq_gkv_block_range(p.dyn, b, p.t_begin, p.t_end, p.chunk, s, &t0, &t1)) return; // a captured step's / rows mode's spare block
    const int n = t1 - t0;
    const size_t ri = (size_t)bk.r * p.n_kv + g;
    if (n <= 0) return kvq_gkv_empty_split<G, D, NT>(p, b, g, s); // weight 0 in the merge
    // the first group of keys is requested before q (it does not depend on it)
    const uint8_t *kreg = p.k.base + ri * p.k.region, *vreg = p.v.base + ri * p.v.region;
    constexpr int NPK = KK == KVQ_GKV_KIVI ? 8 : 4, UK = 4 * NPK;
    const int ngk = (n + UK - 1) / UK;
    row_t<KK, KB> x[NPK], xn[NPK];
    if (warp < ngk) load_group<KK, KB, NPK>(p.k, kreg, t0 + UK * warp, t1, L, sub, x);
    for (int e = threadIdx.x; e < G * D; e += NT) qs[e / D][e % D] = p.q[((size_t)b * p.H + g * G + e / D) * D + e % D];
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
        kvq_gkv_wht(&qs[0][0], G);
    }
    if constexpr (OCTK) { // q_rot = WHT(s1 ⊙ q)/√d; OCTQ also R' q_rot = WHT(s2 ⊙ q_rot)/√d into sqs
        for (int e = threadIdx.x; e < G * D; e += NT) qs[e / D][e % D] *= p.k.signs[(size_t)g * 2 * D + e % D];
        kvq_gkv_wht(&qs[0][0], G);
        if constexpr (KK == KVQ_GKV_OCTQ) {
            for (int e = threadIdx.x; e < G * D; e += NT) sqs[e / D][e % D] = qs[e / D][e % D] * p.k.signs[(size_t)g * 2 * D + D + e % D];
            kvq_gkv_wht(&sqs[0][0], G);
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
    // Groups of NPK passes (KIVI keys: 8 = their 32-position scale group; others 4, so that two
    // groups in registers cost what one group of 8 did).
    for (int gi = warp; gi < ngk; gi += NW) {
        const int tg = t0 + UK * gi;
        if (gi + NW < ngk) load_group<KK, KB, NPK>(p.k, kreg, tg + UK * NW, t1, L, sub, xn);
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
            const int pos = tg + 4 * ps + sub;
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
                                     : KK == KVQ_GKV_OCTQ ? 0.110778366f * h2f(kreg + p.k.side_off + (size_t)pos * 8 + 4)
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
                a[h] += __shfl_xor_sync(0xffffffffu, a[h], 4);
            }
            if (L == 0 && pos < t1) {
                float mul = p.sl2;
                if (KK == KVQ_GKV_INT || KK == KVQ_GKV_TURBO) mul *= h2f(kreg + p.k.side_off + (size_t)pos * 2);
                if (KK == KVQ_GKV_HQKV) mul *= __ldg((const float *)(kreg + p.k.side_off + (size_t)pos * 8)) * p.k.inv_scale;
                if (KK == KVQ_GKV_TPROD) mul *= h2f(kreg + p.k.side_off + (size_t)pos * 4);
                if (KK == KVQ_GKV_HQMQ) mul *= h2f(kreg + p.k.side_off + (size_t)pos * 2) * p.k.inv_scale;
                if (OCTK) mul *= __ldg((const float *)(kreg + p.k.side_off + (size_t)pos * (KK == KVQ_GKV_OCTQ ? 8 : 4)));
                *(float4 *)sc[pos - t0] = make_float4(a[0] * mul, a[1] * mul, a[2] * mul, a[3] * mul);
            }
        }
#pragma unroll
        for (int ps = 0; ps < NPK; ps++) x[ps] = xn[ps];
    }
    // values likewise, 4 passes a group; the first group is loaded before the softmax (it does
    // not depend on it)
    constexpr int NPV = 4, UV = 4 * NPV;
    const int ngv = (n + UV - 1) / UV;
    row_t<VK, VB> y[NPV], yn[NPV];
    if (warp < ngv) load_group<VK, VB, NPV>(p.v, vreg, t0 + UV * warp, t1, L, sub, y);
    __syncthreads();

    // ---- the chunk's softmax: warp h takes query head h
    {
        const int h = warp;
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
        if (gi + NW < ngv) load_group<VK, VB, NPV>(p.v, vreg, tg + UV * NW, t1, L, sub, yn);
#pragma unroll
        for (int ps = 0; ps < NPV; ps++) {
            const int pos = tg + 4 * ps + sub;
            if (pos >= t1) continue;
            const float4 pp = *(const float4 *)sc[pos - t0];
            float w[G] = {pp.x, pp.y, pp.z, pp.w};
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
            y += __shfl_xor_sync(0xffffffffu, y, 8);
            y += __shfl_xor_sync(0xffffffffu, y, 16);
            if (sub == 0) red[warp][h][j0 + i] = y;
        }
    __syncthreads();
    // the block's slot of the partial results (formed here, not kept live through the loop)
    const kvq_gkv_blk bw = kvq_gkv_block_of(p.dyn); // (s, b) formed again: not held through the loop
    const int slot = kvq_gkv_block_slot(p.dyn, bw.b, p.slot0, bw.s);
    float *po = p.po + (((size_t)bw.b * p.H + g * G) * p.n_slot + slot) * D;
    float *pml = p.pml + (((size_t)bw.b * p.H + g * G) * p.n_slot + slot) * 2;
    kvq_gkv_split_out<NW, NT>(red, po, G, D, p.n_slot);
    if (threadIdx.x < G) pml[(size_t)threadIdx.x * p.n_slot * 2] = mh[threadIdx.x], pml[(size_t)threadIdx.x * p.n_slot * 2 + 1] = lh[threadIdx.x];
}

// A split block (split_chunk), then, in the attend's final launch with the merge fused, the last
// block per (sequence, KV head) merges: the scores' and the warps' arrays are its shared memory.
// The rotation back is compiled in where the launch can be the final one of a cache with rotated
// values: TurboQuant / HyperQuant-KV values, and the fp16 kernel (window keys and window chunks).
// Blocks an SM the split kernel is compiled for: 4 (≤ 128 registers) where ptxas keeps the kernel
// without spills at that budget — packed int, KIVI, TurboQuant/qturbo, OCTOPUS (no QJL) and HQMQ keys,
// and the half-value kernels — else 3 (≤ 168: fp16 window keys, HyperQuant-KV, turboquant-prod and
// OCTOPUS-QJL keys spill 56–1580 bytes at 128). KVQ_SPLIT_MINB3: every kernel at 3 (the build before).
__host__ __device__ constexpr int split_min_blocks(int kk, bool vh) {
#ifdef KVQ_SPLIT_MINB3
    return vh ? 4 : 3;
#else
    return vh || kk == KVQ_GKV_INT || kk == KVQ_GKV_KIVI || kk == KVQ_GKV_TURBO || kk == KVQ_GKV_OCT || kk == KVQ_GKV_HQMQ ? 4 : 3;
#endif
}

template <int KK0, int KB, int VK, int VB, bool VH = false>
__global__ void __launch_bounds__(NT, split_min_blocks(KK0, VH)) attn_split(attn_p p) {
    __shared__ __align__(16) float sc[KVQ_GKV_MAX_CHUNK][G];
    __shared__ __align__(16) float red[NW][G][D];
    static_assert(KVQ_GKV_MAX_CHUNK * G >= G * KVQ_GKV_MERGE_MAX && NW * G * D >= G * (D + D / 32), "the merge's shared memory");
    split_chunk<KK0, KB, VK, VB, VH>(p, sc, red);
    constexpr bool ROT = VK == KVQ_GKV_TURBO || VK == KVQ_GKV_HQKV || VK == KVQ_GKV_F16;
    kvq_gkv_merge_last<ROT, KVQ_GKV_MERGE_MAX>(p, blockIdx.z, blockIdx.y, &sc[0][0], &red[0][0][0], &red[0][0][0] + G * D);
}

// Merges the chunks of one (sequence, query head) (kv_merge.cuh), after the split launches.
// stride: the scratch's slots per (sequence, query head); n_slot of them hold chunks (under
// dyn.d_pos, a graph-captured step: n_slot and n_rot from the plan of the position).
__global__ void __launch_bounds__(D) attn_merge(const float *__restrict__ po, const float *__restrict__ pml, float *__restrict__ out,
                                                int n_slot, int stride, int H, kvq_gkv_post pp, kvq_gkv_dyn dyn) {
    __shared__ float x[D], w[KVQ_GKV_MERGE_MAX], red[D / 32];
    const int bh = blockIdx.x;
    if (dyn.d_pos || dyn.rows) { // rows mode: block bh = row · H + query head
        const kvq_gkv_plan pl = kvq_gkv_dyn_plan(dyn, bh / H);
        n_slot = pl.na + pl.nb + pl.nc;
        pp.n_rot = pl.na + pl.nb;
    }
    kvq_gkv_merge<1, KVQ_GKV_MERGE_MAX, true, false>(po, pml, out, n_slot, stride, bh, bh % H / G, pp, w, x, red);
}

// ---- encoders (the CPU's float operations, kv_int.c, from the window's fp16 values)

__device__ __forceinline__ float r16(float f) { return __half2float(__float2half_rn(f)); }

// d_pos: NULL, or the device int that holds pos0 (a graph-captured step).
__global__ void enc_ring(const float *__restrict__ k, const float *__restrict__ v, __half *wk, __half *wv, int wcap, int pos0, int nb,
                         const int *d_pos) {
    const int t = blockIdx.x / nb, ri = blockIdx.x % nb, pos = (d_pos ? *d_pos : pos0) + t;
    const size_t src = ((size_t)t * nb + ri) * D + threadIdx.x, dst = ((size_t)ri * wcap + pos % wcap) * D + threadIdx.x;
    wk[dst] = __float2half_rn(k[src]);
    wv[dst] = __float2half_rn(v[src]);
}

// One position per block (thread = dim): int:<b> (symmetric, fp16 scale), KIVI values
// (per 32 channels: fp16 scale and zero), or the fp16 copy (boundary keys). d_p0: NULL, or a
// device int added to p0 (a graph-captured step: p0 = −window; a block whose position is
// negative has none to encode).
template <int KIND, int B>
__global__ void __launch_bounds__(D) enc_pos(const __half *__restrict__ ring, int wcap, uint8_t *base, size_t region,
                                             size_t side_off, int p0, const int *d_p0) {
    __shared__ uint8_t c[D];
    __shared__ float red[D / 32];
    const int pos = (d_p0 ? *d_p0 : 0) + p0 + blockIdx.x, ri = blockIdx.y, i = threadIdx.x, lane = i & 31, w = i >> 5;
    if (pos < 0) return;
    const __half hx = ring[((size_t)ri * wcap + pos % wcap) * D + i];
    uint8_t *reg = base + (size_t)ri * region;
    if (KIND == KVQ_GKV_F16) {
        ((__half *)reg)[(size_t)pos * D + i] = hx;
        return;
    }
    const float x = __half2float(hx);
    if (KIND == KVQ_GKV_INT) {
        const int qmax = QMAX(B);
        float a = fabsf(x);
        for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        if (lane == 0) red[w] = a;
        __syncthreads();
        a = red[0];
        for (int k = 1; k < D / 32; k++) a = fmaxf(a, red[k]);
        const float s = r16(__fdiv_rn(a, (float)qmax));
        int q = s > 0.0f ? __float2int_rn(__fdiv_rn(x, s)) : 0;
        q = q < -qmax ? -qmax : q > qmax ? qmax : q;
        c[i] = (uint8_t)(q + qmax);
        if (i == 0) *(__half *)(reg + side_off + (size_t)pos * 2) = __float2half_rn(s);
    } else { // KIVI values: warp w = the 32 channels of group w
        const int Lq = (1 << B) - 1;
        float mn = x, mx = x;
        for (int o = 16; o > 0; o >>= 1) {
            mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        }
        const float z = r16(mn), s = r16(__fdiv_rn(mx - z, (float)Lq));
        int q = s > 0.0f ? __float2int_rn(__fdiv_rn(x - z, s)) : 0;
        q = q < 0 ? 0 : q > Lq ? Lq : q;
        c[i] = (uint8_t)q;
        if (lane == 0) *(__half2 *)(reg + side_off + ((size_t)pos * (D / 32) + w) * 4) = __halves2half2(__float2half_rn(s), __float2half_rn(z));
    }
    __syncthreads();
    kvq_gkv_write_row<B>(reg + (size_t)pos * ROWB(B), c, i);
}

// KIVI keys: one group of 32 positions per block, thread = channel (per-channel fp16 scale
// and zero over the group). d_p0: NULL, or a device int added to p0 (a graph-captured step:
// p0 = 1 − window − 32, the group that the step's position completes, if any: a start that is
// negative or not a multiple of 32 means none).
template <int B>
__global__ void __launch_bounds__(D) enc_kivi_k(const __half *__restrict__ ring, int wcap, uint8_t *base, size_t region,
                                                size_t side_off, int p0, const int *d_p0) {
    __shared__ uint8_t c[32][D];
    const int pos0 = (d_p0 ? *d_p0 : 0) + p0 + 32 * blockIdx.x, ri = blockIdx.y, i = threadIdx.x, Lq = (1 << B) - 1;
    if (d_p0 && (pos0 < 0 || pos0 % 32)) return;
    uint8_t *reg = base + (size_t)ri * region;
    float x[32];
#pragma unroll
    for (int t = 0; t < 32; t++) x[t] = __half2float(ring[((size_t)ri * wcap + (pos0 + t) % wcap) * D + i]);
    float mn = x[0], mx = x[0];
#pragma unroll
    for (int t = 1; t < 32; t++) mn = fminf(mn, x[t]), mx = fmaxf(mx, x[t]);
    const float z = r16(mn), s = r16(__fdiv_rn(mx - z, (float)Lq));
    *(__half2 *)(reg + side_off + ((size_t)(pos0 / 32) * D + i) * 4) = __halves2half2(__float2half_rn(s), __float2half_rn(z));
#pragma unroll
    for (int t = 0; t < 32; t++) {
        int q = s > 0.0f ? __float2int_rn(__fdiv_rn(x[t] - z, s)) : 0;
        c[t][i] = (uint8_t)(q < 0 ? 0 : q > Lq ? Lq : q);
    }
    __syncthreads();
    for (int t = 0; t < 32; t++) kvq_gkv_write_row<B>(reg + (size_t)(pos0 + t) * ROWB(B), c[t], i);
}

// ---- launchers

static side_p side_of(const kvq_gkv_cache *c, const kvq_gkv_side *s) {
    side_p r;
    r.base = (const uint8_t *)s->data;
    r.region = kvq_gkv_region_bytes(s->kind, s->bits, D, c->cap, s->role);
    r.side_off = kvq_gkv_side_offset(s->kind, s->bits, D, c->cap);
    r.cb = s->cb;
    r.rho = s->rho;
    r.signs = s->signs;
    r.quat = s->quat;
    r.mat = s->mat;
    r.seeds = s->seeds;
    r.lat = s->lat, r.rot = s->rot, r.dither = s->dither;
    r.inv_scale = s->scale > 0.0f ? 1.0f / s->scale : 0.0f;
    if (s->kind == KVQ_GKV_HQMQ) // lat carries the index bits; the radius step 1 / (2^b_r − 1)
        r.lat = s->ibits, r.inv_scale = 1.0f / (float)((1 << (s->bits - s->ibits)) - 1);
    r.ring = 0;
    return r;
}
static side_p ring_of(const kvq_gkv_cache *c, const void *ring) {
    side_p r = {(const uint8_t *)ring, (size_t)c->wcap * D * 2, 0, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0.0f, c->wcap};
    return r;
}

typedef void (*split_fn)(attn_p);

static int g_q8 = 0, g_vh = 0, g_tc = -1, g_pipe = -1, g_fuse = -1, g_tcq = -1, g_lean = -1;
static float g_waves = -1.0f;
extern "C" void kvq_gkv_set_int8_query(int on) { g_q8 = on != 0; }
extern "C" void kvq_gkv_set_fuse_merge(int on) { g_fuse = on < 0 ? -1 : on != 0; }
extern "C" void kvq_gkv_set_waves(float waves) { g_waves = waves > 0.0f ? std::min(8.0f, std::max(0.125f, waves)) : -1.0f; }
// The merge fused into the final split launch (g_fuse, or KVQ_CUDA_KV_FUSE_MERGE=1 read once;
// default 0: measured 1-7 % slower than the separate launch on the H100, session 11 call N), where
// its counters cover the (sequence, KV head) pairs.
static int fuse_merge(const kvq_gkv_cache *c) {
    if (g_fuse < 0) {
        const char *e = getenv("KVQ_CUDA_KV_FUSE_MERGE");
        g_fuse = e && !strcmp(e, "1");
    }
    return g_fuse && (size_t)c->batch * c->n_kv <= KVQ_GKV_CNT_MAX;
}
extern "C" int kvq_gkv_merge_fused(const kvq_gkv_cache *c) { return fuse_merge(c); }
// Waves of resident blocks the packed launch fills (g_waves, or KVQ_CUDA_KV_WAVES=<x> read once,
// 0.125..8; default 1).
static float waves(void) {
    if (g_waves <= 0.0f) {
        const char *e = getenv("KVQ_CUDA_KV_WAVES");
        const float w = e ? (float)atof(e) : 0.0f;
        g_waves = w > 0.0f ? std::min(8.0f, std::max(0.125f, w)) : 1.0f;
    }
    return g_waves;
}
extern "C" void kvq_gkv_set_half_values(int on) { g_vh = on != 0; }
extern "C" void kvq_gkv_set_tc(int on) { g_tc = on < 0 ? -1 : on > 3 ? 3 : on; }
extern "C" void kvq_gkv_set_tc_turbo(int on) { g_tcq = on < 0 ? -1 : on != 0; }
// TurboQuant / qturbo on the tensor cores: g_tcq, or KVQ_CUDA_KV_TC_TURBO=0 read once; default 1
// (session 14, H100: 1.15-1.9x faster than the fp32 kernel at 32k-128k, NMSE vs the CPU <= 7.3e-7;
// docs/RESULTS.md).
static int tc_turbo(void) {
    if (g_tcq < 0) {
        const char *e = getenv("KVQ_CUDA_KV_TC_TURBO");
        g_tcq = !(e && !strcmp(e, "0"));
    }
    return g_tcq;
}
extern "C" void kvq_gkv_set_tc_pipe(int stages) { g_pipe = stages < 0 ? -1 : stages == 3 || stages == 4 ? stages : 0; }
// The cp.async stages of the tensor-core kernel: g_pipe, or KVQ_CUDA_KV_PIPE=0|3|4 (read once;
// default 0, the register-prefetch variants), and 0 where a side's regions are not 16-byte
// aligned (the 16-byte copies; cudaMalloc'd regions always are).
static int tc_stages(const kvq_gkv_cache *c) {
    if (g_pipe < 0) {
        const char *e = getenv("KVQ_CUDA_KV_PIPE");
        g_pipe = e && (!strcmp(e, "3") || !strcmp(e, "4")) ? *e - '0' : 0;
    }
    if (((uintptr_t)c->k.data | (uintptr_t)c->v.data) & 15) return 0;
    return g_pipe;
}
extern "C" void kvq_gkv_set_tc_lean(int on) { g_lean = on < 0 ? -1 : on != 0; }
// The tensor-core kernels' lean instantiations (fewer instructions a tile, the same bits; session 14,
// helper i20d): g_lean, or KVQ_CUDA_KV_TC_LEAN=0|1 read once; default 1 since the H100 run of session
// 15 (int:4 7-8 %, int:2 9-11 % faster at 32k/128k, docs/RESULTS.md).
static int tc_lean(void) {
    if (g_lean < 0) {
        const char *e = getenv("KVQ_CUDA_KV_TC_LEAN");
        g_lean = !(e && !strcmp(e, "0"));
    }
    return g_lean;
}
// The tensor-core kernel for the packed chunks of this cache, when on and built for its kinds;
// NULL otherwise. g_tc: 0 off, 1 or 2 that variant, 3 (the default since the H100 run of
// 2026-11-26, docs/RESULTS.md) the faster variant per width there: two tiles in flight (2) for
// int/KIVI 4-bit keys, one (1) for 2-bit and for TurboQuant/qturbo at both widths (faster there at
// 32k and 128k, session 14); KVQ_CUDA_KV_TC=0|1|2 in the environment overrides. With
// tc_stages 3 or 4 the pipelined kernel replaces variants 1/2 (same results, bit for bit).
static const void *tc_kernel(const kvq_gkv_cache *c) {
    if (g_tc < 0) {
        const char *e = getenv("KVQ_CUDA_KV_TC");
        g_tc = e && (!strcmp(e, "0") || !strcmp(e, "1") || !strcmp(e, "2")) ? *e - '0' : 3;
    }
    const int v = g_tc == 3 ? (c->k.bits == 4 && c->k.kind != KVQ_GKV_TURBO ? 2 : 1) : g_tc;
    if (c->k.kind == KVQ_GKV_TURBO && !tc_turbo()) return NULL; // (and qturbo: the same kind)
    return v ? kvq_gkv_tc_kernel(c->k.kind, c->k.bits, c->v.kind, c->v.bits, v, tc_stages(c), tc_lean()) : NULL;
}
extern "C" int kvq_gkv_tc_active(const kvq_gkv_cache *c) { return tc_kernel(c) != NULL; }
extern "C" int kvq_gkv_tc_stages(const kvq_gkv_cache *c) { return tc_kernel(c) ? tc_stages(c) : 0; }

#define KV_BITS(X, KIND) X(KIND, 2) X(KIND, 3) X(KIND, 4)
// HyperQuant-KV's code widths: 5-8 bits cover e8/d4/a2/z at 2-4 bits per sample (kv_gpu.c)
#define HQ_BITS(X, KIND) X(KIND, 5) X(KIND, 6) X(KIND, 7) X(KIND, 8)
// The instantiated (K kind, K bits, V kind, V bits) combinations: the dense baselines, each
// codec on both sides, and the boundary layers' fp16 keys with each codec's values.
static split_fn pick(int kk, int kb, int vk, int vb) {
    if (kk == KVQ_GKV_BF16 && vk == KVQ_GKV_BF16) return attn_split<KVQ_GKV_BF16, 0, KVQ_GKV_BF16, 0>;
    if (kk == KVQ_GKV_F16 && vk == KVQ_GKV_F16) return attn_split<KVQ_GKV_F16, 0, KVQ_GKV_F16, 0>;
#define SAME(KIND, B) \
    if (kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KIND, B, KIND, B>;
#define F16K(KIND, B) \
    if (kk == KVQ_GKV_F16 && vk == KIND && vb == B) return attn_split<KVQ_GKV_F16, 0, KIND, B>;
#define SAMEQ8(KIND, B) \
    if (g_q8 && g_vh && kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KQ8, B, KIND, B, true>; \
    if (g_q8 && kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KQ8, B, KIND, B>;
#define SAMEVH(KIND, B) \
    if (g_vh && kk == KIND && vk == KIND && kb == B && vb == B) return attn_split<KIND, B, KIND, B, true>;
    KV_BITS(SAMEQ8, KVQ_GKV_INT) // before SAMEVH: int keys with both knobs take the dp4a kernel
#undef SAMEQ8
    KV_BITS(SAMEVH, KVQ_GKV_INT)
    KV_BITS(SAMEVH, KVQ_GKV_KIVI)
#undef SAMEVH
    KV_BITS(SAME, KVQ_GKV_INT)
    KV_BITS(SAME, KVQ_GKV_KIVI)
    KV_BITS(SAME, KVQ_GKV_TURBO)
    KV_BITS(F16K, KVQ_GKV_INT)
    KV_BITS(F16K, KVQ_GKV_KIVI)
    KV_BITS(F16K, KVQ_GKV_TURBO)
    HQ_BITS(SAME, KVQ_GKV_HQKV)
    SAME(KVQ_GKV_HQMQ, 13) SAME(KVQ_GKV_HQMQ, 16) SAME(KVQ_GKV_HQMQ, 19) // hqmq s24:r3, s96:r4, s192:r6
    F16K(KVQ_GKV_HQMQ, 13) F16K(KVQ_GKV_HQMQ, 16) F16K(KVQ_GKV_HQMQ, 19)
#define TPK(KIND, B) \
    if (kk == KVQ_GKV_TPROD && vk == KIND && kb == B && vb == B) return attn_split<KVQ_GKV_TPROD, B, KIND, B>;
    KV_BITS(TPK, KVQ_GKV_TURBO) // turboquant-prod: its keys, turboquant values
#undef TPK
#define OCTK_(KIND, B) \
    if (kk == KIND && vk == KVQ_GKV_KIVI && kb == B && vb == B) return attn_split<KIND, B, KVQ_GKV_KIVI, B>;
    KV_BITS(OCTK_, KVQ_GKV_OCT) // OCTOPUS keys; its values are KIVI's per-token groups
    KV_BITS(OCTK_, KVQ_GKV_OCTQ)
#undef OCTK_
    HQ_BITS(F16K, KVQ_GKV_HQKV)
#undef SAME
#undef F16K
    return NULL;
}

static int n_chunks(int len, int chunk) { return kvq_gkv_n_chunks(len, chunk); }

// Chunks so that the blocks of the main launch fill whole waves: as many chunks per (sequence,
// KV head) as the SMs hold resident blocks of the kernel (or a multiple of that when chunks
// would exceed KVQ_GKV_MAX_CHUNK). A wave and a third left 70 % of the second wave idle (ncu:
// bf16 at 32k, 512 blocks on 396 slots). KVQ_CUDA_KV_WAVES scales that (more, shorter chunks at
// short contexts now that the merge costs no launch; measured by tests/bench/gpu_kv_fuse_ab.sh).
// The blocks per (sequence, KV head) of the packed chunks' launch (kvq_gkv_plan_of's per).
static int splits_per_head(const kvq_gkv_cache *c) {
    split_fn f = pick(c->k.kind, c->k.bits, c->v.kind, c->v.bits);
    const void *ft = tc_kernel(c);
    int per_sm = 4, sms = 132, dev = 0;
    if (ft && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ft, KVQ_GKV_TC_THREADS, 0) != cudaSuccess) per_sm = 4;
    else if (!ft && f && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, NT, 0) != cudaSuccess) per_sm = 4;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) sms = 132;
    (void)cudaGetLastError();
    const int pairs = std::max(1, c->batch * c->n_kv), base = std::max(1, per_sm * sms / pairs);
    if (waves() == 1.0f) return base;
    // at most 512 (or one wave's, if more) so that the chunks stay within the merge's 1024
    return std::min(std::max(1, (int)(waves() * (float)(per_sm * sms) / (float)pairs)), std::max(base, 512));
}
extern "C" int kvq_gkv_auto_chunk(const kvq_gkv_cache *c) {
    return kvq_gkv_plan_of(c->n_tok, c->n_enc_k, c->n_enc_v, splits_per_head(c), 0).chunk;
}

extern "C" size_t kvq_gkv_scratch_bytes(const kvq_gkv_cache *c, int chunk) {
    if (chunk <= 0) chunk = 32;
    const size_t slots = (size_t)n_chunks(c->cap, chunk) + 2 * (size_t)n_chunks(c->wcap > 0 ? c->wcap : 1, chunk) + 2;
    return sizeof(float) * (size_t)c->batch * c->n_heads * slots * (D + 2);
}

static kvq_status check_shape(const kvq_gkv_cache *c, kvq_err *err) {
    if (c->head_dim != D || c->n_heads != G * c->n_kv || c->cap % 32 || c->batch <= 0)
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED,
                           "gpu kv attention: head_dim %d, %d query heads over %d KV heads, capacity %d: only head_dim %d with %d query heads per KV head and a capacity multiple of 32 are built",
                           c->head_dim, c->n_heads, c->n_kv, c->cap, D, G);
    return KVQ_OK;
}

// One attend: the host's plan of c's counts (d_pos NULL, rows 0: grids of exactly the chunks there
// are), or a graph-captured step's (d_pos: the kernels plan from the position, grids sized for any
// position up to the capacity; kvq_gkv_attend_step), or rows mode's (rows > 0 query rows from pos0,
// batch 1: the kernels plan each row's view, grids of the most chunks a row has, x = chunk · rows +
// row; kvq_gkv_attend_rows). All give the same chunks, so the same partial sums in the same slots
// and order.
static kvq_status attend(const kvq_gkv_cache *c, const float *q, float *out, float scale, int chunk, void *scratch, const int *d_pos,
                         int window, int rows, int pos0, size_t scratch_size, kvq_err *err) {
    kvq_status st = check_shape(c, err);
    if (st) return st;
    if (chunk < 0 || chunk % 32 || chunk > KVQ_GKV_MAX_CHUNK)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: chunk %d is not a multiple of 32 up to %d", chunk, KVQ_GKV_MAX_CHUNK);
    const int per = chunk ? 1 : splits_per_head(c), kivi_k = kvq_gkv_kivi_k(&c->k);
    int ga, gb, gc; // blocks per (sequence, KV head) of the three launches (rows mode: per row)
    int n_slot = 0; // the scratch's slots per (sequence, query head)
    if (rows) {
        if (c->batch != 1) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: batch %d (rows mode is for batch 1)", c->batch);
        if (pos0 < 0 || pos0 + rows > c->n_tok)
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: rows at positions [%d, %d) but %d positions stored", pos0, pos0 + rows,
                               c->n_tok);
        for (int t = 0; t < rows; t++) { // each row's view passes the token loop's checks, and its window is still in the ring
            const kvq_gkv_plan pl = kvq_gkv_row_plan(c->n_enc_k, c->n_enc_v, pos0, t, per, chunk);
            if (pl.n_tok > pl.e && (!c->wk || pl.n_tok - pl.e > c->wcap || pl.e < c->n_tok - c->wcap))
                return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: row %d's window positions [%d, %d) are not in the ring of %d (%d stored)",
                                   t, pl.e, pl.n_tok, c->wcap, c->n_tok);
            if (pl.nb && std::min(c->n_enc_k, pl.n_tok) > std::min(c->n_enc_v, pl.n_tok))
                return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: values behind keys");
        }
        int gr[3];
        kvq_gkv_rows_grids(c->n_enc_k, c->n_enc_v, pos0, rows, per, chunk, gr, &n_slot);
        ga = gr[0], gb = gr[1], gc = gr[2];
    } else if (!d_pos) {
        const kvq_gkv_plan pl = kvq_gkv_plan_of(c->n_tok, c->n_enc_k, c->n_enc_v, per, chunk);
        if (c->n_tok > pl.e && (!c->wk || c->n_tok - pl.e > c->wcap))
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: %d window positions but a ring of %d", c->n_tok - pl.e, c->wcap);
        if (pl.nb && c->n_enc_k > c->n_enc_v) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: values behind keys");
        ga = pl.na, gb = pl.nb, gc = pl.nc;
    } else {
        // packed: at most per·k chunks for k = ⌈n/(per·1024)⌉ (kvq_gkv_plan_of), and ⌈cap/32⌉;
        // window keys: KIVI's incomplete group (< 32 positions) is one chunk; window: ≤ window
        // positions (the values' side packs every position that left it); test_step_plan checks
        if (!c->wk || !c->wv || c->wcap < window + 33)
            return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention step: a ring of %d positions, need window %d + 33", c->wcap, window);
        int gr[3];
        kvq_gkv_step_grids(c->cap, window, kivi_k, per, chunk, gr);
        ga = gr[0], gb = gr[1], gc = gr[2];
    }
    if (!rows) n_slot = ga + gb + gc;
    const int nrow = rows ? rows : c->batch; // rows of q, out and the scratch
    if (n_slot == 0) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: empty cache");
    if (n_slot > KVQ_GKV_MERGE_MAX) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: %d chunks exceed %d (a larger chunk)", n_slot, KVQ_GKV_MERGE_MAX);
    if ((size_t)sizeof(float) * nrow * c->n_heads * n_slot * (D + 2) > (rows ? scratch_size : kvq_gkv_scratch_bytes(c, chunk)))
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: scratch too small for %d rows of %d chunks", nrow, n_slot);
    const kvq_gkv_plan hp = d_pos || rows ? kvq_gkv_plan{} : kvq_gkv_plan_of(c->n_tok, c->n_enc_k, c->n_enc_v, per, chunk);
    const kvq_gkv_dyn dyn0 = {d_pos, window, kivi_k, per, chunk, 0, rows, pos0, c->n_enc_k, c->n_enc_v};
    // the launches' grids: (chunks, KV heads, sequences), rows mode (chunks · rows, KV heads, 1)
    const int gx = rows ? rows : 1, gz = rows ? 1 : c->batch;
    attn_p p;
    p.q = q;
    p.n_kv = c->n_kv;
    p.H = c->n_heads;
    p.chunk = hp.chunk;
    p.n_slot = n_slot;
    p.sl2 = scale * LOG2E;
    p.po = (float *)scratch;
    p.pml = p.po + (size_t)nrow * c->n_heads * n_slot * D;
    p.dyn = dyn0;
    // rotated values (TurboQuant, HyperQuant-KV) sit in the chunks of the stored values,
    // [0, na + nb); the window's chunks after them are in the original frame
    kvq_gkv_post pp = {0, c->v.signs, c->v.quat, c->v.mat, ga + gb};
    if (c->v.kind == KVQ_GKV_TURBO) pp.kind = 1;
    else if (c->v.kind == KVQ_GKV_HQKV && c->v.rot == 1) pp.kind = 2;
    else if (c->v.kind == KVQ_GKV_HQKV && c->v.rot == 2) pp.kind = 3;
    const void *ft = ga ? tc_kernel(c) : NULL; // the packed chunks on tensor cores
    // the merge fused into the last of the split launches (every block of it counts, spare ones
    // too; the launches before it have finished when it starts), or attn_merge after them. The
    // last launch's kernel has the rotation back whenever pp.kind needs it: rotated values are
    // TurboQuant's / HQKV's (attn_split with ROT), the window keys' kernel has those values, the
    // window's is the fp16 one (ROT), the tensor-core kernels have int / KIVI values (kind 0).
    // At most KVQ_GKV_MERGE_MAX chunks (the split kernels' score array holds the weights), 256 when
    // the tensor-core kernel merges (its red array, unenlarged); else the separate merge launch.
    // Rows mode never fuses: the rows' last launches differ (a row may have no window chunk) and the
    // counters are per (sequence, KV head).
    const int last = kvq_gkv_fuse_part(ga, gb, gc), fuse = !rows && fuse_merge(c) && n_slot <= (last == 0 && ft ? KVQ_GKV_MERGE_TC : KVQ_GKV_MERGE_MAX);
    const kvq_gkv_fuse fz0 = {out, pp, 0}, fz1 = {out, pp, 1};
    p.fz = fz0;
    cudaStream_t sm = kvq_cuda_stream();
    if (ft) { // int / KIVI / TurboQuant at 2 and 4 bits on tensor cores (kv_attn_tc.cu), the same partial results
        const kvq_tc_args ta = {q, (const uint8_t *)c->k.data, (const uint8_t *)c->v.data,
                                kvq_gkv_region_bytes(c->k.kind, c->k.bits, D, c->cap, 0), kvq_gkv_region_bytes(c->v.kind, c->v.bits, D, c->cap, 1),
                                kvq_gkv_side_offset(c->k.kind, c->k.bits, D, c->cap), kvq_gkv_side_offset(c->v.kind, c->v.bits, D, c->cap),
                                c->n_kv, c->n_heads, 0, hp.a, hp.chunk, n_slot, 0, p.sl2, p.po, p.pml, dyn0,
                                fuse && last == 0 ? fz1 : fz0, c->k.cb, c->v.cb, c->k.signs, c->k.quat};
        st = kvq_gkv_tc_launch(ft, &ta, ga * gx, gz, sm, err);
        if (st) return st;
    } else if (ga) {
        split_fn f = pick(c->k.kind, c->k.bits, c->v.kind, c->v.bits);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv attention: no kernel for keys kind %d/%d bits, values kind %d/%d bits",
                                   c->k.kind, c->k.bits, c->v.kind, c->v.bits);
        p.k = side_of(c, &c->k);
        p.v = side_of(c, &c->v);
        p.t_begin = 0, p.t_end = hp.a, p.slot0 = 0;
        p.fz = fuse && last == 0 ? fz1 : fz0;
        f<<<dim3(ga * gx, c->n_kv, gz), NT, 0, sm>>>(p);
        CU_LAUNCHED("attn_split");
    }
    if (gb) { // keys in the window, values stored (KIVI's incomplete key group)
        split_fn f = pick(KVQ_GKV_F16, 0, c->v.kind, c->v.bits);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv attention: no kernel for fp16 keys with values kind %d", c->v.kind);
        p.k = ring_of(c, c->wk);
        p.v = side_of(c, &c->v);
        p.t_begin = hp.a, p.t_end = hp.e, p.slot0 = ga;
        p.dyn.part = 1;
        p.fz = fuse && last == 1 ? fz1 : fz0;
        f<<<dim3(gb * gx, c->n_kv, gz), NT, 0, sm>>>(p);
        CU_LAUNCHED("attn_split (window keys)");
    }
    if (gc) {
        p.k = ring_of(c, c->wk);
        p.v = ring_of(c, c->wv);
        p.t_begin = hp.e, p.t_end = c->n_tok, p.slot0 = ga + gb;
        p.dyn.part = 2;
        p.fz = fuse ? fz1 : fz0;
        attn_split<KVQ_GKV_F16, 0, KVQ_GKV_F16, 0><<<dim3(gc * gx, c->n_kv, gz), NT, 0, sm>>>(p);
        CU_LAUNCHED("attn_split (window)");
    }
    if (fuse) return KVQ_OK;
    attn_merge<<<nrow * c->n_heads, D, 0, sm>>>(p.po, p.pml, out, n_slot, n_slot, c->n_heads, pp, dyn0);
    CU_LAUNCHED("attn_merge");
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_attend(const kvq_gkv_cache *c, const float *q, float *out, float scale, int chunk, void *scratch,
                                     kvq_err *err) {
    return attend(c, q, out, scale, chunk > 0 ? chunk : 0, scratch, NULL, 0, 0, 0, 0, err);
}

extern "C" kvq_status kvq_gkv_attend_step(const kvq_gkv_cache *c, const float *q, float *out, float scale, int window, const int *d_pos,
                                          void *scratch, kvq_err *err) {
    if (!d_pos) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention step: no device position");
    return attend(c, q, out, scale, 0, scratch, d_pos, window, 0, 0, 0, err);
}

extern "C" kvq_status kvq_gkv_attend_rows(const kvq_gkv_cache *c, const float *q, float *out, float scale, int pos0, int T, void *scratch,
                                          size_t scratch_bytes, kvq_err *err) {
    if (T < 1) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention rows: %d rows", T);
    return attend(c, q, out, scale, 0, scratch, NULL, 0, T, pos0, scratch_bytes, err);
}

extern "C" size_t kvq_gkv_rows_scratch_bytes(const kvq_gkv_cache *c, int pos0, int T) {
    int gr[3], n_slot = 0;
    kvq_gkv_rows_grids(c->n_enc_k, c->n_enc_v, pos0, T, splits_per_head(c), 0, gr, &n_slot);
    return sizeof(float) * (size_t)(T > 0 ? T : 0) * c->n_heads * n_slot * (D + 2);
}

extern "C" size_t kvq_gkv_rows_scratch_bound(const kvq_gkv_cache *c, int T) {
    const size_t slots = (size_t)kvq_gkv_rows_slot_bound(c->cap, c->wcap, splits_per_head(c));
    return sizeof(float) * (size_t)(T > 0 ? T : 0) * c->n_heads * slots * (D + 2);
}

typedef void (*enc_fn)(const __half *, int, uint8_t *, size_t, size_t, int, const int *);
static enc_fn pick_enc(int kind, int bits) {
    if (kind == KVQ_GKV_F16) return enc_pos<KVQ_GKV_F16, 2>;
#define EP(KIND, B) \
    if (kind == KIND && bits == B) return enc_pos<KIND, B>;
    KV_BITS(EP, KVQ_GKV_INT)
    KV_BITS(EP, KVQ_GKV_KIVI)
#undef EP
    return NULL;
}
static enc_fn pick_kivi_k(int bits) { return bits == 2 ? enc_kivi_k<2> : bits == 3 ? enc_kivi_k<3> : bits == 4 ? enc_kivi_k<4> : NULL; }

// Encodes side r's positions: host (d_pos NULL) [p0, p0 + n) (KIVI keys: n/32 groups from p0);
// a captured step (d_pos) the one position *d_pos + p0 (KIVI keys: the group from there, when
// complete; n = 1), the kernels deciding.
static kvq_status encode_side(const kvq_gkv_cache *c, const kvq_gkv_side *s, const void *ring, int p0, int n, const int *d_pos,
                              kvq_err *err) {
    const int nb = c->batch * c->n_kv;
    const size_t region = kvq_gkv_region_bytes(s->kind, s->bits, D, c->cap, s->role);
    const size_t so = kvq_gkv_side_offset(s->kind, s->bits, D, c->cap);
    cudaStream_t sm = kvq_cuda_stream();
    if (kvq_gkv_kivi_k(s)) {
        const int ng = d_pos ? 1 : n / 32;
        enc_fn f = pick_kivi_k(s->bits);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv append: kivi keys at %d bits are not built", s->bits);
        if (!ng) return KVQ_OK;
        f<<<dim3(ng, nb), D, 0, sm>>>((const __half *)ring, c->wcap, (uint8_t *)s->data, region, so, p0, d_pos);
        CU_LAUNCHED("enc_kivi_k");
    } else if (s->kind == KVQ_GKV_TURBO || s->kind == KVQ_GKV_TPROD || s->kind == KVQ_GKV_OCT || s->kind == KVQ_GKV_OCTQ ||
               s->kind == KVQ_GKV_HQKV || s->kind == KVQ_GKV_HQMQ) {
        return kvq_gkv_encode_rot(c, s, ring, p0, n, d_pos, err); // kv_enc.cu
    } else {
        enc_fn f = pick_enc(s->kind, s->bits);
        if (!f) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "gpu kv append: kind %d at %d bits has no GPU encoder (upload its records)",
                                   s->kind, s->bits);
        if (n <= 0) return KVQ_OK;
        f<<<dim3(n, nb), D, 0, sm>>>((const __half *)ring, c->wcap, (uint8_t *)s->data, region, so, p0, d_pos);
        CU_LAUNCHED("enc_pos");
    }
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_append(kvq_gkv_cache *c, const float *k, const float *v, int T, int window, kvq_err *err) {
    kvq_status st = check_shape(c, err);
    if (st) return st;
    if (T <= 0) return KVQ_OK;
    if (!c->wk || c->wcap < window + 32 + T)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: a ring of %d positions, need window %d + 32 + %d", c->wcap, window, T);
    if (c->n_tok + T > c->cap) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: %d positions exceed the capacity %d", c->n_tok + T, c->cap);
    const int nb = c->batch * c->n_kv;
    enc_ring<<<T * nb, D, 0, kvq_cuda_stream()>>>(k, v, (__half *)c->wk, (__half *)c->wv, c->wcap, c->n_tok, nb, NULL);
    CU_LAUNCHED("enc_ring");
    const kvq_gkv_side *sd[2] = {&c->k, &c->v};
    void *rings[2] = {c->wk, c->wv};
    const int ne[2] = {c->n_enc_k, c->n_enc_v};
    kvq_gkv_advance(c, T, window); // the counts after this append
    const int na[2] = {c->n_enc_k, c->n_enc_v};
    for (int r = 0; r < 2; r++)
        if (na[r] > ne[r] && (st = encode_side(c, sd[r], rings[r], ne[r], na[r] - ne[r], NULL, err))) return st;
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_append_step(kvq_gkv_cache *c, const float *k, const float *v, int window, const int *d_pos, kvq_err *err) {
    kvq_status st = check_shape(c, err);
    if (st) return st;
    if (!d_pos) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append step: no device position");
    if (!c->wk || !c->wv || c->wcap < window + 33)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append step: a ring of %d positions, need window %d + 33", c->wcap, window);
    if (c->n_tok + 1 > c->cap) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv append: %d positions exceed the capacity %d", c->n_tok + 1, c->cap);
    const int nb = c->batch * c->n_kv;
    enc_ring<<<nb, D, 0, kvq_cuda_stream()>>>(k, v, (__half *)c->wk, (__half *)c->wv, c->wcap, 0, nb, d_pos);
    CU_LAUNCHED("enc_ring");
    // the position that leaves the window: *d_pos − window (KIVI keys: the group it completes
    // starts at *d_pos + 1 − window − 32)
    const kvq_gkv_side *sd[2] = {&c->k, &c->v};
    void *rings[2] = {c->wk, c->wv};
    for (int r = 0; r < 2; r++)
        if ((st = encode_side(c, sd[r], rings[r], kvq_gkv_kivi_k(sd[r]) ? 1 - window - 32 : -window, 1, d_pos, err))) return st;
    kvq_gkv_advance(c, 1, window);
    return KVQ_OK;
}

extern "C" kvq_status kvq_gkv_time(const kvq_gkv_cache *caches, int rotate, const float *q, float *out, float scale, int chunk,
                                   void *scratch, int reps, int graph_calls, double *ms, kvq_err *err) {
    if (rotate < 1) rotate = 1;
    cudaStream_t sm = kvq_cuda_stream();
    cudaGraphExec_t ge = NULL;
    if (graph_calls > 0) { // graph_calls attends (cycling over the copies) captured once
        if (!sm) return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv timing: graphs need kvq_cuda_stream_init");
        cudaGraph_t g;
        CU_TRY(cudaStreamBeginCapture(sm, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < graph_calls; i++) {
            kvq_status st = kvq_gkv_attend(&caches[i % rotate], q, out, scale, chunk, scratch, err);
            if (st) {
                cudaStreamEndCapture(sm, &g);
                return st;
            }
        }
        CU_TRY(cudaStreamEndCapture(sm, &g));
        CU_TRY(cudaGraphInstantiate(&ge, g, 0));
        cudaGraphDestroy(g);
    }
    cudaEvent_t e0, e1;
    CU_TRY(cudaEventCreate(&e0));
    CU_TRY(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int i = 0; i < reps + 3; i++) {
        CU_TRY(cudaEventRecord(e0, sm));
        if (ge) CU_TRY(cudaGraphLaunch(ge, sm));
        else {
            kvq_status st = kvq_gkv_attend(&caches[i % rotate], q, out, scale, chunk, scratch, err);
            if (st) return st;
        }
        CU_TRY(cudaEventRecord(e1, sm));
        CU_TRY(cudaEventSynchronize(e1));
        float m;
        CU_TRY(cudaEventElapsedTime(&m, e0, e1));
        if (i >= 3) t.push_back(ge ? m / graph_calls : m);
    }
    std::sort(t.begin(), t.end());
    *ms = t[t.size() / 2];
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (ge) cudaGraphExecDestroy(ge);
    return KVQ_OK;
}
