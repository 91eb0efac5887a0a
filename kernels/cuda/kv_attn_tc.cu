// Tensor-core split-K decode attention for int:2 and int:4 caches (BitDecoding's route,
// arXiv 2503.18773), on the unchanged GPU layout of kv_attn.h; bit and fragment arithmetic
// in kv_tc.h (shared with the host test). One block of 4 warps per (chunk, KV head,
// sequence); each warp takes 16-position tiles w, w+4, ... of the chunk with its own online
// softmax, the next tile's loads issued before this one's arithmetic, and the 4 warps' (max,
// sum, Σ p·V) are merged in shared memory at the end. Per tile:
//  scores: mma.m16n8k16 (fp16 in, fp32 accumulate) with the 16 positions' codes as A (16 ×
//   128, 8 k-steps) and the 4 query heads' q in fp16 as B (columns 4..7 zero): codes become
//   fp16 pairs by masks and the 1024 exponent trick (kv_tc.h), c − qmax by one HFMA2; the
//   per-position fp16 scale multiplies the fp32 score.
//  softmax: running max and sum per query head in the lanes that hold its score column.
//  Σ p·V: Vᵀ (128 dims × 16 positions, 8 m-tiles) as A, p (16 positions × 4 heads, fp16) as B,
//   p moved from the score fragment's layout into B's by 4 shuffles; a lane dequantizes 16
//   dims of 4 positions and pairs positions with byte permutes; the values' per-position scale
//   is applied to the fp16 values (s·(c − qmax), one HMUL2 a pair), so p stays in [0, 1].
// Loads: variants 1/2 keep the next one or two tiles' loads in flight in registers (__ldg);
// the pipelined variants (ST = 3 or 4 stages, KVQ_CUDA_KV_PIPE) copy each warp's next ST − 1
// tiles into a per-warp shared-memory ring with cp.async (16-byte pieces, zero-filled past the
// chunk, one commit group a tile) and read the current tile from there: more bytes in flight
// per SM without the registers. The arithmetic is the same code on the same values, so the
// results are bit-identical to variants 1/2 (test_attend_tc_pipe).
// TurboQuant / qturbo at 2 and 4 bits (session 14; KVQ_CUDA_KV_TC_TURBO): the same kernel with KIND =
// KVQ_GKV_TURBO. q is rotated into the keys' frame once per block (qturbo's quaternion per 4-chunk,
// the signs, the WHT: split_chunk's code); each lane holds the keys' and the values' codebooks in
// fp16 as byte tables in registers and turns codes into fp16 centroid pairs by byte permutes
// (kvq_tc_tq_dq: one a pair at 2 bits, ~2.5 a code at 4) — no fix-up FMA; the per-position fp16
// norm multiplies the fp32 score (keys) and the fp16 values (one HMUL2 a pair), as int's scale
// does; the values' Σ p·V stays in the rotated frame and the merge rotates it back (ROT).
// LEAN = 1 (kvq_gkv_set_tc_lean, KVQ_CUDA_KV_TC_LEAN=1; session 14, helper i20d): every kernel above
// with fewer instructions a tile and the same bits — each fp16 code pair one lop3 (kvq_tc_andor),
// Σ p·V rescaled only when some lane's running max moved (warp-uniform), 2^x by ex2.approx.ftz.
// turboquant-prod:2/3/4 (session 17, helper i20p; KVQ_CUDA_KV_TC_TPROD): KIND = KVQ_GKV_TPROD, keys'
// (b−1)-bit centroids as TURBO's (1 bit: the plane as fp16 ±1 against (c1 − c0)/2·R q in B, plus
// (c0 + c1)/2·Σ R q; 3 bits: kvq_tc_tq3_dq) in one mma chain, the QJL sign plane as fp16 ±1 (a shift and a
// lop3 a pair, kvq_tc_b1_pm) against S R q (fp16; formed by mma from S in fp16) in a second,
// combined per key as γ·(mse + √(π/2)/d·γ_r·qjl); values turboquant:<b> (3 bits: kvq_tc_tq3_dq).
// Register-prefetch variants only (no cp.async stages). PRE = 1 (session 18, helper i20r; default,
// KVQ_CUDA_KV_TPROD_PRE=0 for PRE = 0): R q, S R q and the scores' B fragments formed once per (row, KV
// head) by tp_pre before the split launch and loaded by each block after griddepcontrol.wait, instead
// of every block forming them (q's load, the WHT's barriers, 64 KiB of S and 16 mma a warp before its
// first score) — the same functions on the same values, so the same bits. TURBO (TurboQuant, qturbo) likewise
// (session 18, helper i20q; KVQ_CUDA_KV_TURBO_PRE=0 for PRE = 0): tp_pre<TURBO, B> rotates q once per (row, KV
// head) and writes R q's B fragments; register-prefetch variants only (the pipelined kernels rotate per block).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kv_attn_tc.cuh"
#include "kernels/cuda/kv_merge.cuh"
#include "kernels/cuda/kv_tc.h"
#include "kernels/cuda/kv_tc_dev.cuh"

#define D KVQ_GKV_HEAD_DIM
#define G KVQ_GKV_GROUP
#define TNT KVQ_GKV_TC_THREADS
#define TNW (TNT / 32)

static_assert(D == 128 && G == 4, "the fragment mapping assumes head_dim 128 and 4 query heads per KV head");

static_assert(TNW == G, "Q8: warp h quantizes query head h");

// D += A·B, m16n8k32, u8 A (row), s8 B (col), s32 C/D (PTX ISA, integer m16n8k32: a lane (g, t) holds A
// rows g (a0, a2) and g+8 (a1, a3) × k 4t..4t+3 (a0, a1) and 16+4t.. (a2, a3), a byte each; B k 4t.. (b0)
// and 16+4t.. (b1) × col g; C as m16n8k16's). The Q8 scores (int keys, session 20, helper i20v).
__device__ __forceinline__ void mma16832(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

static_assert(f16c(1.0f) == 0x3C00u && f16c(0.0625f) == 0x2C00u && f16c(-1031.0f) == 0xE407u && f16c(-17.0f) == 0xCC40u, "f16c");

// One tile's loads for a lane: keys of positions g, g+8 (dims 32t.., each plane's 8 bytes),
// values of positions 2t, 2t+1, 2t+8, 2t+9 (dims 16g.., each plane's 4 bytes), and their side
// data (0 for positions past the chunk: their codes read as 0 and their weight is 0): int the
// fp16 scales (ks; vs low half), KIVI values (scale, zero) of the quad's 32-channel group; KIVI
// keys, with a group's first tile, the lane's 16 bytes of the group's (scale, zero) per channel
// (channels 4·lane..4·lane+3).
// TPROD: k[r][0] the keys' two-bit plane (3- and 2-bit centroid codes), kb the one-bit plane of the
// codes (3 and 1 bits), ksg the QJL signs (32 dims each), kg (γ, γ_r); B = 3 values: v1 the one-bit plane.
template <int B>
struct tile_t {
    uint2 k[2][B / 2];
    uint32_t v[4][B / 2];
    unsigned short ks[2];
    uint32_t vs[4];
    uint4 kz;
    uint32_t kb[2], ksg[2], kg[2], v1[4];
};

template <int KIND, int B>
__device__ __forceinline__ void load_tile(const kvq_tc_args &p, const uint8_t *kreg, const uint8_t *vreg, int tb, int t1, int g, int t,
                                          tile_t<B> &x) {
    constexpr int RB = B / 2 * (D / 4) + (B & 1) * (D / 8); // kvq_gkv_row_bytes
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int pos = tb + g + 8 * r;
        const bool ok = pos < t1;
        if constexpr (KIND == KVQ_GKV_TPROD) { // (B−1)-bit codes: [two-bit plane] [one-bit plane], then the signs
            constexpr int MB = B - 1, SO = MB / 2 * (D / 4) + (MB & 1) * (D / 8);
            const uint8_t *row = kreg + (size_t)pos * RB;
            if (MB >= 2) x.k[r][0] = ok ? __ldg((const uint2 *)(row + 8 * t)) : make_uint2(0u, 0u);
            if (MB & 1) x.kb[r] = ok ? __ldg((const uint32_t *)(row + MB / 2 * (D / 4) + 4 * t)) : 0u;
            x.ksg[r] = ok ? __ldg((const uint32_t *)(row + SO + 4 * t)) : 0u;
            x.kg[r] = ok ? __ldg((const uint32_t *)(kreg + p.kside) + pos) : 0u;
        } else {
#pragma unroll
            for (int pl = 0; pl < B / 2; pl++)
                x.k[r][pl] = ok ? __ldg((const uint2 *)(kreg + (size_t)pos * RB + pl * (D / 4) + 8 * t)) : make_uint2(0u, 0u);
            if (KIND != KVQ_GKV_KIVI) x.ks[r] = ok ? __ldg((const unsigned short *)(kreg + p.kside) + pos) : (unsigned short)0;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int pos = tb + 2 * t + (r & 1) + 8 * (r >> 1);
        const bool ok = pos < t1;
#pragma unroll
        for (int pl = 0; pl < B / 2; pl++) x.v[r][pl] = ok ? __ldg((const uint32_t *)(vreg + (size_t)pos * RB + pl * (D / 4) + 4 * g)) : 0u;
        if (B & 1) x.v1[r] = ok ? (uint32_t)__ldg((const unsigned short *)(vreg + (size_t)pos * RB + B / 2 * (D / 4) + 2 * g)) : 0u;
        if (KIND != KVQ_GKV_KIVI) x.vs[r] = ok ? (uint32_t)__ldg((const unsigned short *)(vreg + p.vside) + pos) : 0u;
        else x.vs[r] = ok ? __ldg((const uint32_t *)(vreg + p.vside + ((size_t)pos * (D / 32) + (g >> 1)) * 4)) : 0u;
    }
    if (KIND == KVQ_GKV_KIVI && tb % 32 == 0) // stored keys come in whole groups: the group is there
        x.kz = __ldg((const uint4 *)(kreg + p.kside + (size_t)(tb / 32) * D * 4) + (threadIdx.x & 31));
}

// ---- the cp.async pipeline (ST > 0): a warp's ring of ST stages in shared memory, one tile a
// stage; the stage layout, the swizzle and each lane's copies and reads are kv_tc.h's
// (kvq_tc_copy, kvq_tc_rd_*), which test_tc_pipe_emulated runs on the host against load_tile.
template <int KIND, int B>
__host__ __device__ constexpr int tc_stage_bytes() {
    return 2 * 16 * 16 * B + (KIND != KVQ_GKV_KIVI ? 64 : 256 + 4 * D); // int, TURBO: a fp16 per position
}
// One 16-byte copy global → shared; n < 16 source bytes (0 allowed), the rest zero-filled.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int n) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// A lane's share of the copies of the tile at tb (chunk end t1) into stage st (kvq_tc_copy: rows
// and int scales past t1 zero-filled, reading nothing; KIVI's key group with its first tile).
template <int KIND, int B>
__device__ __forceinline__ void issue_tile(const kvq_tc_args &p, const uint8_t *kreg, const uint8_t *vreg, int tb, int t1, int lane,
                                           uint8_t *st) {
#pragma unroll
    for (int j = 0; j < kvq_tc_ncopy(B); j++) {
        int dst, sd, n;
        size_t off;
        if (kvq_tc_copy(KIND == KVQ_GKV_KIVI, B, lane, j, tb, t1, p.kside, p.vside, &dst, &sd, &off, &n))
            cp_async16(st + dst, (sd ? vreg : kreg) + off, n);
    }
}
// The lane's fragment of the tile in stage st, as load_tile reads it from global memory (kz
// not: the KIVI group's scales are read from the stage where they are used).
template <int KIND, int B>
__device__ __forceinline__ void read_stage(const uint8_t *st, int g, int t, tile_t<B> &x) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
#pragma unroll
        for (int pl = 0; pl < B / 2; pl++) x.k[r][pl] = *(const uint2 *)(st + kvq_tc_rd_k(B, g, t, r, pl));
        if (KIND != KVQ_GKV_KIVI) x.ks[r] = *(const unsigned short *)(st + kvq_tc_rd_ks(B, g, r));
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
#pragma unroll
        for (int pl = 0; pl < B / 2; pl++) x.v[r][pl] = *(const uint32_t *)(st + kvq_tc_rd_v(B, g, t, r, pl));
        if (KIND != KVQ_GKV_KIVI) x.vs[r] = *(const unsigned short *)(st + kvq_tc_rd_vs(0, B, g, t, r));
        else x.vs[r] = *(const uint32_t *)(st + kvq_tc_rd_vs(1, B, g, t, r));
    }
}

// red: the warps' Σ p·V at the end; with ST its rows also hold the warps' rings (used before red
// is); after the block's partial results are out, the fused merge's shared memory (kv_merge.cuh:
// G·(KVQ_GKV_MERGE_TC + D + D/32) floats, within the TNW rows). Rows of G·D floats.
template <int KIND, int B, int ST>
__host__ __device__ constexpr int tc_nred() {
    constexpr int RED = (int)sizeof(float) * G * D;
    return ST ? (ST * TNW * tc_stage_bytes<KIND, B>() + RED - 1) / RED : TNW;
}
static_assert(TNW * G * D >= G * (KVQ_GKV_MERGE_TC + D + D / 32), "the fused merge's shared memory in red");

// ---- the per-(row, KV head) prelude of TURBO / TPROD: q into the keys' frame, S R q, the B fragments.
// tc_chunk runs it in every block; tp_pre (TPROD: KVQ_CUDA_KV_TPROD_PRE, session 18; TURBO: KVQ_CUDA_KV_TURBO_PRE,
// helper i20q) once per (row, KV head) before the split launch — the same functions on the same values, so the same bits.

// q (qs: G query heads of D, the block's TNT threads) rotated into the keys' frame of KV head gk: qturbo's
// unit quaternion r left-multiplies each 4-chunk first (split_chunk's code), then the signs and the WHT
// (signs ⊙ [r·] q)/√d; ends with a barrier.
__device__ __forceinline__ void tc_rotate_q(const kvq_tc_args &p, int gk, float (&qs)[G][D]) {
    if (p.kquat) {
        const float *r = p.kquat + (size_t)gk * 4;
        const float a0 = r[0], a1 = r[1], a2 = r[2], a3 = r[3];
        const float *b4 = &qs[0][0] + 4 * threadIdx.x; // TNT = G·D/4 chunks
        float o[4];
        o[0] = a0 * b4[0] - a1 * b4[1] - a2 * b4[2] - a3 * b4[3];
        o[1] = a0 * b4[1] + a1 * b4[0] + a2 * b4[3] - a3 * b4[2];
        o[2] = a0 * b4[2] - a1 * b4[3] + a2 * b4[0] + a3 * b4[1];
        o[3] = a0 * b4[3] + a1 * b4[2] - a2 * b4[1] + a3 * b4[0];
        __syncthreads();
        for (int j = 0; j < 4; j++) (&qs[0][0])[4 * threadIdx.x + j] = o[j];
        __syncthreads();
    }
    for (int e = threadIdx.x; e < G * D; e += TNT) qs[e / D][e % D] *= p.ksigns[(size_t)gk * D + e % D];
    kvq_gkv_wht(&qs[0][0], G); // ends with a barrier
}
// TPROD:2: the keys' 1-bit centroids' mean (c0 + c1)/2 and half-difference (c1 − c0)/2 of KV head gk.
__device__ __forceinline__ void tp_cmch(const kvq_tc_args &p, int gk, float &cm, float &ch) {
    const float c0 = __ldg(p.kcb + 2 * gk), c1 = __ldg(p.kcb + 2 * gk + 1);
    cm = 0.5f * (c0 + c1), ch = 0.5f * (c1 - c0);
}
// TPROD: S R q (sqs, G × D) by mma — S, KV head gk's QJL matrix, in fp16 as A (float2 loads from the fp32
// matrix); R q (qs) in fp16 as B: warp w rows 32w..32w+31. Ends with a barrier.
__device__ __forceinline__ void tp_srq(const kvq_tc_args &p, int gk, const float (&qs)[G][D], float (&sqs)[G][D], int warp, int g, int t) {
    const float *S = p.kmat + (size_t)gk * D * D;
    float cs[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < 8; ks++) {
        const int k0 = 16 * ks + 2 * t;
        const uint32_t b0 = g < G ? h2u(__floats2half2_rn(qs[g][k0], qs[g][k0 + 1])) : 0u;
        const uint32_t b1 = g < G ? h2u(__floats2half2_rn(qs[g][k0 + 8], qs[g][k0 + 9])) : 0u;
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            const float *r0 = S + (size_t)(32 * warp + 16 * mt + g) * D + k0, *r1 = r0 + 8 * D;
            const float2 x0 = __ldg((const float2 *)r0), x1 = __ldg((const float2 *)r1), x2 = __ldg((const float2 *)(r0 + 8)),
                         x3 = __ldg((const float2 *)(r1 + 8));
            mma16816(cs[mt], h2u(__float22half2_rn(x0)), h2u(__float22half2_rn(x1)), h2u(__float22half2_rn(x2)), h2u(__float22half2_rn(x3)), b0,
                     b1);
        }
    }
    if (t < G / 2) // C: rows (32w + 16mt + g, + 8) = S R q's dims, columns 2t, 2t + 1 = heads
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            const int j = 32 * warp + 16 * mt + g;
            sqs[2 * t][j] = cs[mt][0], sqs[2 * t + 1][j] = cs[mt][1], sqs[2 * t][j + 8] = cs[mt][2], sqs[2 * t + 1][j + 8] = cs[mt][3];
        }
    __syncthreads();
}
// The scores' B fragments of lane (g, t) (every warp's the same): qk, q as B — column g = query head g
// (< 4), k-step ks: pairs 2ks, 2ks+1 of the lane's dims (KIVI: zeros here; q ⊙ s per key group is formed
// in the loop from qs); TPROD also sk, S R q as the QJL mma's B (pairs of kvq_tc_tp_sdim: 2⟨σ, S R q⟩ −
// Σ S R q = ⟨±1, S R q⟩), and at 2 bits per score column (heads 2t, 2t+1) zm = (c0 + c1)/2·Σ R q
// (cm, ch: tp_cmch).
template <int KIND, int B, int NS>
__device__ __forceinline__ void tc_bfrag(const float (&qs)[G][D], const float (&sqs)[NS][D], float cm, float ch, int g, int t, uint32_t (&qk)[8][2],
                                         uint32_t (&sk)[KIND == KVQ_GKV_TPROD ? 8 : 1][2], float (&zm)[2]) {
    constexpr bool KIVI = KIND == KVQ_GKV_KIVI, TQ = KIND == KVQ_GKV_TURBO, TP = KIND == KVQ_GKV_TPROD;
    constexpr int MB = TP ? B - 1 : B;
#pragma unroll
    for (int ks = 0; ks < 8; ks++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int jj = 2 * ks + e, d0 = TP ? kvq_tc_tp_kdim(MB, t, jj, 0) : TQ ? kvq_tc_tq_kdim(B, t, jj, 0) : kvq_tc_kdim(B, t, jj);
            const int d1 = TP ? kvq_tc_tp_kdim(MB, t, jj, 1) : TQ ? kvq_tc_tq_kdim(B, t, jj, 1) : d0 + 8;
            const float m = MB == 1 ? ch : 1.0f; // TPROD:2: (c1 − c0)/2·R q against the codes' ±1
            qk[ks][e] = g < G && !KIVI ? h2u(__floats2half2_rn(m * qs[g][d0], m * qs[g][d1])) : 0u;
        }
    if constexpr (TP) {
        float am = 0.0f;
#pragma unroll
        for (int ks = 0; ks < 8; ks++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int d0 = kvq_tc_tp_sdim(t, 2 * ks + e, 0), d1 = kvq_tc_tp_sdim(t, 2 * ks + e, 1);
                sk[ks][e] = g < G ? h2u(__floats2half2_rn(sqs[g][d0], sqs[g][d1])) : 0u;
                if (MB == 1 && g < G) am += qs[g][d0] + qs[g][d1];
            }
        if constexpr (MB == 1) {
            am += __shfl_xor_sync(0xffffffffu, am, 1);
            am += __shfl_xor_sync(0xffffffffu, am, 2);
#pragma unroll
            for (int e = 0; e < 2; e++) zm[e] = cm * __shfl_sync(0xffffffffu, am, 8 * t + 4 * e);
        }
    }
}

// tp_pre's scratch a (row, KV head): KVQ_GKV_TP_PRE_U4 uint4 a lane, uint4 w of the 32 lanes side by side (one
// 512-byte access a warp); a lane's words 0-15 qk[ks][e] (word 2ks + e), 16-31 sk likewise, 32-33 zm's bits,
// 34-35 zero. dst, src: the lane's uint4 0.
__device__ __forceinline__ void tp_pre_store(uint4 *dst, const uint32_t (&qk)[8][2], const uint32_t (&sk)[8][2], const float (&zm)[2]) {
#pragma unroll
    for (int w = 0; w < 4; w++) {
        dst[32 * w] = make_uint4(qk[2 * w][0], qk[2 * w][1], qk[2 * w + 1][0], qk[2 * w + 1][1]);
        dst[32 * (4 + w)] = make_uint4(sk[2 * w][0], sk[2 * w][1], sk[2 * w + 1][0], sk[2 * w + 1][1]);
    }
    dst[32 * 8] = make_uint4(__float_as_uint(zm[0]), __float_as_uint(zm[1]), 0u, 0u);
}
// L2 loads (ld.global.cg): written by the grid before, which may have been running when this block started.
__device__ __forceinline__ void tp_pre_load(const uint4 *src, uint32_t (&qk)[8][2], uint32_t (&sk)[8][2], float (&zm)[2]) {
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint4 a = __ldcg(src + 32 * w), c = __ldcg(src + 32 * (4 + w));
        qk[2 * w][0] = a.x, qk[2 * w][1] = a.y, qk[2 * w + 1][0] = a.z, qk[2 * w + 1][1] = a.w;
        sk[2 * w][0] = c.x, sk[2 * w][1] = c.y, sk[2 * w + 1][0] = c.z, sk[2 * w + 1][1] = c.w;
    }
    const uint4 z = __ldcg(src + 32 * 8);
    zm[0] = __uint_as_float(z.x), zm[1] = __uint_as_float(z.y);
}
static_assert(KVQ_GKV_TP_PRE_U4 == 9, "tp_pre_store's layout");
// Lane lane's first uint4 of row b's KV head gk in the prelude's scratch (store and load): TP (turboquant-prod)
// KVQ_GKV_TP_PRE_U4 uint4 a lane, else (TurboQuant / qturbo) KVQ_GKV_TQ_PRE_U4.
template <bool TP>
__device__ __forceinline__ uint4 *tp_pre_at(const kvq_tc_args &p, int b, int gk, int lane) {
    return p.tpre + (size_t)(b * p.n_kv + gk) * (TP ? KVQ_GKV_TP_PRE_U4 : KVQ_GKV_TQ_PRE_U4) * 32 + lane;
}
// TURBO's (session 18, helper i20q): qk alone, KVQ_GKV_TQ_PRE_U4 uint4 a lane (tp_pre_store's words 0-15).
__device__ __forceinline__ void tq_pre_store(uint4 *dst, const uint32_t (&qk)[8][2]) {
#pragma unroll
    for (int w = 0; w < 4; w++) dst[32 * w] = make_uint4(qk[2 * w][0], qk[2 * w][1], qk[2 * w + 1][0], qk[2 * w + 1][1]);
}
__device__ __forceinline__ void tq_pre_load(const uint4 *src, uint32_t (&qk)[8][2]) {
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint4 a = __ldcg(src + 32 * w);
        qk[2 * w][0] = a.x, qk[2 * w][1] = a.y, qk[2 * w + 1][0] = a.z, qk[2 * w + 1][1] = a.w;
    }
}
static_assert(KVQ_GKV_TQ_PRE_U4 == 4, "tq_pre_store's layout");

// One block's chunk: its partial results (kvq_gkv_split_out) or nothing (a captured step's spare block).
// PRE (TPROD; TURBO's register-prefetch variants, session 18, helper i20q): qk (TPROD also sk and zm) read
// from tp_pre's scratch (p.tpre) after griddepcontrol.wait, not formed here.
template <int KIND, int B, int TS, int PF, int ST, int LEAN, int PRE, int Q8>
__device__ __forceinline__ void tc_chunk(const kvq_tc_args &p, float (&red)[tc_nred<KIND, B, ST>()][G][D]) {
    constexpr float QM = KIND == KVQ_GKV_INT ? (float)((1 << (B - 1)) - 1) : 0.0f;
    constexpr bool KIVI = KIND == KVQ_GKV_KIVI, TQ = KIND == KVQ_GKV_TURBO, TP = KIND == KVQ_GKV_TPROD, TQV = TQ || TP;
    constexpr int MB = TP ? B - 1 : B; // the keys' code bits (TPROD: the centroid codes without the sign)
    static_assert(!TP || ST == 0, "turboquant-prod: register prefetch only");
    static_assert(!PRE || TP || (TQ && ST == 0), "the prelude before the launch: turboquant-prod, TURBO's register-prefetch variants");
    static_assert(!Q8 || (KIND == KVQ_GKV_INT && !PRE), "integer-core scores: int keys");
    static_assert(TP || B == 2 || B == 4, "int, KIVI, TURBO at 2 and 4 bits");
    static_assert(!KIVI || TS == 2, "KIVI keys: a step is one 32-position group");
    static_assert(ST ? PF == 0 && ST >= 3 && ST <= 4 : PF == 1 || PF == 2, "prefetch distance 1 or 2 tiles, or 3-4 stages");
    constexpr bool TWO = !(B == 4 && PF == 1); // where the registers allow it (int:4 variant 1 would spill)
    constexpr int SB = tc_stage_bytes<KIND, B>(), RED = (int)sizeof(float) * G * D;
    static_assert(SB % 16 == 0, "16-byte copies");
    constexpr int NRED = tc_nred<KIND, B, ST>();
    static_assert(NRED >= TNW && (size_t)NRED * RED + sizeof(float) * (G * D + 2 * TNW * G) + (KIVI && !ST ? 4 * TNW * D : 4) + (TP ? 4 * G * D + 16 : 0) <= 48 * 1024,
                  "static shared memory");
    __shared__ __align__(16) float qs[PRE ? 1 : G][D];
    __shared__ __align__(16) float sqs[TP && !PRE ? G : 1][D]; // TPROD: S R q
    __shared__ float wm[TNW][G], wl[TNW][G];
    __shared__ __align__(16) uint32_t kzs[KIVI && !ST ? TNW : 1][D]; // KIVI: the warp's key group (scale, zero) per channel
    __shared__ uint32_t q8w[Q8 ? G : 1][D / 4]; // Q8: q in int8, head h's B word 8t + 2ks + r (kvq_tc_q8_kdim)
    __shared__ float q8s[Q8 ? G : 1];           // Q8: head h's scale (max |q| / 127)
    __shared__ int q8z[Q8 ? G : 1];             // Q8: Σ of head h's int8 q
    const kvq_gkv_blk bk = kvq_gkv_block_of(p.dyn); // b: the row of q and of the scratch; bk.r: the cache's sequence
    const int s = bk.s, gk = blockIdx.y, b = bk.b;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int t0, t1;
    if (!kvq_gkv_block_range(p.dyn, b, p.t_begin, p.t_end, p.chunk, s, &t0, &t1)) return; // a captured step's / rows mode's spare block
    const int n = t1 - t0;
    if (n <= 0) return kvq_gkv_empty_split<G, D, TNT>(p, b, gk, s); // weight 0 in the merge
    const size_t ri = (size_t)bk.r * p.n_kv + gk;
    const uint8_t *kreg = p.kbase + ri * p.kregion, *vreg = p.vbase + ri * p.vregion;
    const int ntile = (n + 15) / 16;
    // the warp's k-th tile (increasing in k)
    auto tile_of = [&](int k) { return (warp + TNW * (k / TS)) * TS + k % TS; };
    tile_t<B> x, x1, x2;
    uint8_t *const ring = (uint8_t *)red + (size_t)warp * ST * SB; // ST: the warp's stages
    if constexpr (ST > 0) { // the first ST − 1 tiles' copies, one commit group each (empty past the warp's tiles)
#pragma unroll
        for (int j = 0; j < ST - 1; j++) {
            if (tile_of(j) < ntile) issue_tile<KIND, B>(p, kreg, vreg, t0 + 16 * tile_of(j), t1, lane, ring + j * SB);
            cp_async_commit();
        }
    } else {
        if (tile_of(0) < ntile) load_tile<KIND, B>(p, kreg, vreg, t0 + 16 * tile_of(0), t1, g, t, x); // before q: it does not depend on it
        if (PF == 2 && tile_of(1) < ntile) load_tile<KIND, B>(p, kreg, vreg, t0 + 16 * tile_of(1), t1, g, t, x1);
    }
    if constexpr (!PRE) {
        for (int e = threadIdx.x; e < G * D; e += TNT) qs[e / D][e % D] = p.q[((size_t)b * p.H + gk * G + e / D) * D + e % D];
        __syncthreads();
    }
    uint32_t tk[8], tv[8]; // TURBO: the keys' and the values' codebooks in fp16 (kvq_tc_tq_table; 3 bits kvq_tc_tq3_table)
    float cm = 0.0f, ch = 0.0f; // TPROD:2: the keys' 1-bit centroids' mean (c0 + c1)/2 and half-difference (c1 − c0)/2
    if constexpr (TQV) {
        if constexpr (!PRE) tc_rotate_q(p, gk, qs); // (qturbo's quaternion, the signs, the WHT: split_chunk's code)
        uint16_t c16[1 << B];
        if constexpr (MB == 1) {
            if constexpr (!PRE) tp_cmch(p, gk, cm, ch);
        } else {
#pragma unroll
            for (int i = 0; i < (1 << MB); i++) c16[i] = __half_as_ushort(__float2half_rn(__ldg(p.kcb + ((size_t)gk << MB) + i)));
            if constexpr (MB == 3) kvq_tc_tq3_table(c16, tk);
            else kvq_tc_tq_table(MB, c16, tk);
        }
#pragma unroll
        for (int i = 0; i < (1 << B); i++) c16[i] = __half_as_ushort(__float2half_rn(__ldg(p.vcb + ((size_t)gk << B) + i)));
        if constexpr (B == 3) kvq_tc_tq3_table(c16, tv);
        else kvq_tc_tq_table(B, c16, tv);
    }
    if constexpr (TP && !PRE) tp_srq(p, gk, qs, sqs, warp, g, t); // S R q by mma

    // the scores' B fragments (tc_bfrag), formed here or (PRE) tp_pre's, once the grid before is complete
    uint32_t qk[8][2], sk[TP ? 8 : 1][2];
    float zm[2] = {0.0f, 0.0f};
    if constexpr (PRE) {
        asm volatile("griddepcontrol.wait;" ::: "memory"); // tp_pre: complete, its writes visible
        if constexpr (TP) tp_pre_load(tp_pre_at<true>(p, b, gk, lane), qk, sk, zm);
        else tq_pre_load(tp_pre_at<false>(p, b, gk, lane), qk);
    } else if constexpr (!Q8) tc_bfrag<KIND, B>(qs, sqs, cm, ch, g, t, qk, sk, zm);
    // Q8: q in int8 per query head (warp h: head h, TNW = G; lane L forms head h's B word L), the lane's B
    // words, and per score column (heads 2t, 2t + 1; 0 for t ≥ 2) the scale × sl2 / 2^B (the sums come
    // times 2^B: kv_tc.h) and −qmax·Σ q8 (the low chain's start: Σ (c − qmax)·q8 in int32)
    uint32_t qb[Q8 ? 4 : 1][2];
    float qsc[2] = {0.0f, 0.0f};
    int qzc[2] = {0, 0};
    if constexpr (Q8) {
        float m = 0.0f;
        for (int i = lane; i < D; i += 32) m = fmaxf(m, fabsf(qs[warp][i]));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float sq = m > 0.0f ? m / 127.0f : 1.0f, inv = 1.0f / sq;
        const int wt = lane >> 3, wks = (lane >> 1) & 3, wr = lane & 1; // word lane = 8t + 2ks + r
        uint32_t w = 0;
        int sum = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int v = kvq_tc_q8_round(qs[warp][kvq_tc_q8_kdim(B, wt, wks, wr, i)], inv);
            w |= ((uint32_t)v & 0xFFu) << (8 * i), sum += v;
        }
        q8w[warp][lane] = w;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) q8s[warp] = sq, q8z[warp] = sum;
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < 4; ks++)
#pragma unroll
            for (int r = 0; r < 2; r++) qb[ks][r] = g < G ? q8w[g][8 * t + 2 * ks + r] : 0u;
#pragma unroll
        for (int e = 0; e < 2; e++)
            if (2 * t + e < G) qsc[e] = q8s[2 * t + e] * p.sl2 * (1.0f / (1 << B)), qzc[e] = -(int)QM * q8z[2 * t + e];
    }
    // the fix-up of pair j: c − qmax = h·(1/m) − (1024/m + qmax), exact in fp16 (compile-time
    // constants, so that they are immediates of the HFMA2, not registers)
    __half2 fm[8], fa[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float m = (float)(1 << kvq_tc_shift(B, j));
        fm[j] = u2h(0x10001u * f16c(1.0f / m));
        fa[j] = u2h(0x10001u * f16c(-(1024.0f / m + QM)));
    }

    // the lane's running state: heads 2t, 2t+1 (real for t < 2), Σ p·V as 8 m-tiles' C fragments
    float mx[2] = {-INFINITY, -INFINITY}, ls[2] = {0.0f, 0.0f};
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
    const int src1 = 4 * (2 * t) + (g >> 1), src2 = src1 + 4; // the lanes holding p of positions 2t, 2t+1 (and + 8) for head g
    const uint32_t psel = (g & 1) ? 0x7632u : 0x5410u;

    float zc[2] = {0.0f, 0.0f}; // KIVI: Σ q·z for the lane's score columns 2t, 2t+1
    for (int k = 0;; k++) {
        const int ti = tile_of(k);
        if (ti >= ntile) break; // warp-uniform
        const int tb = t0 + 16 * ti;
        const uint8_t *stage = ring + (k % (ST ? ST : 1)) * SB; // ST: this tile's stage
        if constexpr (ST > 0) {
            // committed: ST − 1 + k groups; tile k's (group k) is complete when ≤ ST − 2 are pending. The
            // barrier makes every lane's copies visible to the warp, and orders the reads of stage
            // (k − 1) % ST (last iteration) before its refill below.
            cp_async_wait<ST - 2>();
            __syncwarp();
            read_stage<KIND, B>(stage, g, t, x);
            if (tile_of(k + ST - 1) < ntile)
                issue_tile<KIND, B>(p, kreg, vreg, t0 + 16 * tile_of(k + ST - 1), t1, lane, ring + ((k + ST - 1) % (ST ? ST : 1)) * SB);
            cp_async_commit(); // one group an iteration, empty or not: the count above holds
        } else if (tile_of(k + PF) < ntile) load_tile<KIND, B>(p, kreg, vreg, t0 + 16 * tile_of(k + PF), t1, g, t, PF == 1 ? x1 : x2);
        if constexpr (KIVI) {
            if (ti % 2 == 0) { // a new key group: q ⊙ s and Σ q·z
                const uint32_t *kzw = ST ? (const uint32_t *)(stage + kvq_tc_rd_kz(B)) : kzs[warp];
                if (!ST) {
                    __syncwarp();
                    *(uint4 *)&kzs[warp][4 * lane] = x.kz;
                    __syncwarp();
                }
                float zp = 0.0f; // Σ over the lane's dims of q·z, head g
#pragma unroll
                for (int ks = 0; ks < 8; ks++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int d0 = kvq_tc_kdim(B, t, 2 * ks + e);
                        const uint32_t u0 = kzw[d0], u1 = kzw[d0 + 8];
                        const float2 sc = __half22float2(u2h(__byte_perm(u0, u1, 0x5410u))), zz = __half22float2(u2h(__byte_perm(u0, u1, 0x7632u)));
                        const float q0 = g < G ? qs[g][d0] : 0.0f, q1 = g < G ? qs[g][d0 + 8] : 0.0f;
                        qk[ks][e] = h2u(__floats2half2_rn(q0 * sc.x, q1 * sc.y));
                        zp = fmaf(q0, zz.x, fmaf(q1, zz.y, zp));
                    }
                zp += __shfl_xor_sync(0xffffffffu, zp, 1);
                zp += __shfl_xor_sync(0xffffffffu, zp, 2);
                zc[0] = __shfl_sync(0xffffffffu, zp, 8 * t), zc[1] = __shfl_sync(0xffffffffu, zp, 8 * t + 4); // quads 2t, 2t+1
            }
        }
        {
            const tile_t<B> &y = x;
            // ---- scores of positions tb + g (c[0], c[1]) and tb + g + 8 (c[2], c[3]), heads 2t, 2t+1
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f}; // TWO: two chains of 4 mma, not one of 8
            {
                if constexpr (Q8) { // u8 codes × s8 q, 4 k-steps of 32 (kv_tc.h): the codes' chain ci, the 2^B × codes' ci2; a word (2 k-steps) at a time
                    int ci[4] = {qzc[0], qzc[1], qzc[0], qzc[1]}, ci2[4] = {0, 0, 0, 0};
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        uint32_t ak[2][4];
#pragma unroll
                        for (int r = 0; r < 2; r++) kvq_tc_u8(B, u ? y.k[r][0].y : y.k[r][0].x, u ? y.k[r][B / 2 - 1].y : y.k[r][B / 2 - 1].x, ak[r]);
#pragma unroll
                        for (int v = 0; v < 2; v++)
                            mma16832(v ? ci2 : ci, ak[0][2 * v], ak[1][2 * v], ak[0][2 * v + 1], ak[1][2 * v + 1], qb[2 * u + v][0], qb[2 * u + v][1]);
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) c[e] = (float)(ci[e] * (1 << B) + ci2[e]); // 2^B · Σ (c − qmax)·q8, exact (|·| < 2^22)
                } else if constexpr (TP) { // c: the centroids' chain, c2: the QJL signs' (±1) against S R q; a word (4 k-steps) at a time
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        uint32_t hk[2][8], hs[2][8];
#pragma unroll
                        for (int r = 0; r < 2; r++) {
                            if constexpr (MB == 3) kvq_tc_tq3_dq(u ? y.k[r][0].y : y.k[r][0].x, y.kb[r] >> (16 * u), tk, hk[r]);
                            else if constexpr (MB == 2) kvq_tc_tq_dq(2, u ? y.k[r][0].y : y.k[r][0].x, 0u, tk, hk[r]);
                            else kvq_tc_b1_pm(y.kb[r], u, hk[r]);
                            kvq_tc_b1_pm(y.ksg[r], u, hs[r]);
                        }
#pragma unroll
                        for (int k2 = 0; k2 < 4; k2++) {
                            const int ks = 4 * u + k2;
                            mma16816(c, hk[0][2 * k2], hk[1][2 * k2], hk[0][2 * k2 + 1], hk[1][2 * k2 + 1], qk[ks][0], qk[ks][1]);
                            mma16816(c2, hs[0][2 * k2], hs[1][2 * k2], hs[0][2 * k2 + 1], hs[1][2 * k2 + 1], sk[ks][0], sk[ks][1]);
                        }
                    }
                } else if constexpr (TQ) { // the centroids themselves (no fix-up), a word (4 k-steps) at a time: half the A registers live
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        uint32_t hk[2][8];
#pragma unroll
                        for (int r = 0; r < 2; r++)
                            kvq_tc_tq_dq(B, u ? y.k[r][0].y : y.k[r][0].x, u ? y.k[r][B / 2 - 1].y : y.k[r][B / 2 - 1].x, tk, hk[r]);
#pragma unroll
                        for (int k2 = 0; k2 < 4; k2++) {
                            const int ks = 4 * u + k2;
                            mma16816(TWO && (ks & 1) ? c2 : c, hk[0][2 * k2], hk[1][2 * k2], hk[0][2 * k2 + 1], hk[1][2 * k2 + 1], qk[ks][0], qk[ks][1]);
                        }
                    }
                } else {
                    uint32_t hk[2][16];
#pragma unroll
                    for (int r = 0; r < 2; r++)
#pragma unroll
                        for (int u = 0; u < 2; u++) {
                            const uint32_t lo = u ? y.k[r][0].y : y.k[r][0].x, hi = u ? y.k[r][B / 2 - 1].y : y.k[r][B / 2 - 1].x;
                            uint32_t h[8];
                            kvq_tc_dq_as(LEAN, B, lo, hi, h);
#pragma unroll
                            for (int j = 0; j < 8; j++) hk[r][8 * u + j] = h2u(__hfma2(u2h(h[j]), fm[j], fa[j]));
                        }
#pragma unroll
                    for (int ks = 0; ks < 8; ks++)
                        mma16816(TWO && (ks & 1) ? c2 : c, hk[0][2 * ks], hk[1][2 * ks], hk[0][2 * ks + 1], hk[1][2 * ks + 1], qk[ks][0], qk[ks][1]);
                }
                if constexpr (!TP && !Q8)
#pragma unroll
                    for (int e = 0; e < 4; e++) c[e] += c2[e];
            }
            const bool ok0 = tb + g < t1, ok1 = tb + g + 8 < t1;
            if constexpr (TP) { // γ·(mse + zm) + γ·√(π/2)/d·γ_r·qjl, × scale·log2 e
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const float2 gg = __half22float2(u2h(y.kg[r]));
                    const float a = gg.x * p.sl2, bq = a * (1.2533141373155001f / D) * gg.y;
                    const bool ok = r ? ok1 : ok0;
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        c[2 * r + e] = ok ? fmaf(a, c[2 * r + e] + zm[e], bq * c2[2 * r + e]) : -INFINITY;
                }
            } else if constexpr (KIVI) {
                c[0] = ok0 ? (c[0] + zc[0]) * p.sl2 : -INFINITY, c[1] = ok0 ? (c[1] + zc[1]) * p.sl2 : -INFINITY;
                c[2] = ok1 ? (c[2] + zc[0]) * p.sl2 : -INFINITY, c[3] = ok1 ? (c[3] + zc[1]) * p.sl2 : -INFINITY;
            } else if constexpr (Q8) { // scale_k · (scale_q · sl2) · Σ (c − qmax)·q8
                const float k0 = __half2float(__ushort_as_half(y.ks[0])), k1 = __half2float(__ushort_as_half(y.ks[1]));
                c[0] = ok0 ? c[0] * (k0 * qsc[0]) : -INFINITY, c[1] = ok0 ? c[1] * (k0 * qsc[1]) : -INFINITY;
                c[2] = ok1 ? c[2] * (k1 * qsc[0]) : -INFINITY, c[3] = ok1 ? c[3] * (k1 * qsc[1]) : -INFINITY;
            } else {
                const float k0 = __half2float(__ushort_as_half(y.ks[0])) * p.sl2, k1 = __half2float(__ushort_as_half(y.ks[1])) * p.sl2;
                c[0] = ok0 ? c[0] * k0 : -INFINITY, c[1] = ok0 ? c[1] * k0 : -INFINITY;
                c[2] = ok1 ? c[2] * k1 : -INFINITY, c[3] = ok1 ? c[3] * k1 : -INFINITY;
            }
            // ---- online softmax per head column (the 8 lanes of a column: xor over g)
            float pr[4], al[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float m = fmaxf(c[e], c[e + 2]);
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
                const float mn = fmaxf(mx[e], m); // finite: the tile has a valid position
                al[e] = tc_exp2<LEAN>(mx[e] - mn);
                mx[e] = mn;
                pr[e] = tc_exp2<LEAN>(c[e] - mn), pr[e + 2] = tc_exp2<LEAN>(c[e + 2] - mn);
                ls[e] = fmaf(ls[e], al[e], pr[e] + pr[e + 2]);
            }
            // LEAN: no rescale when no lane's max moved (a warp-uniform branch): al is then exactly 1
            // (2^0), so the products would leave acc as it is — the same bits
            if (!LEAN || __any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f))
#pragma unroll
                for (int j = 0; j < 8; j++) acc[j][0] *= al[0], acc[j][2] *= al[0], acc[j][1] *= al[1], acc[j][3] *= al[1];
            // ---- p into B's layout: b0 = (p[2t][g], p[2t+1][g]), b1 = (p[2t+8][g], p[2t+9][g])
            const uint32_t p01 = h2u(__floats2half2_rn(pr[0], pr[1])), p23 = h2u(__floats2half2_rn(pr[2], pr[3]));
            const uint32_t x1 = __shfl_sync(0xffffffffu, p01, src1), x2 = __shfl_sync(0xffffffffu, p01, src2);
            const uint32_t y1 = __shfl_sync(0xffffffffu, p23, src1), y2 = __shfl_sync(0xffffffffu, p23, src2);
            const uint32_t b0 = g < G ? __byte_perm(x1, x2, psel) : 0u, b1 = g < G ? __byte_perm(y1, y2, psel) : 0u;
            // ---- Σ p·V: m-tile j = dims (16g + dim(j), + 8) of positions 2t, 2t+1 | 2t+8, 2t+9
            {
                uint32_t hv[4][8];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    if constexpr (TQV && B == 3) kvq_tc_tq3_dq(y.v[r][0], y.v1[r], tv, hv[r]);
                    else if constexpr (TQV) kvq_tc_tq_dq(B, y.v[r][0], y.v[r][B / 2 - 1], tv, hv[r]);
                    else kvq_tc_dq_as(LEAN, B, y.v[r][0], y.v[r][B / 2 - 1], hv[r]);
                }
                // the positions' scales (s0, s1), (s2, s3) and KIVI's zeros
                const __half2 s01 = u2h(__byte_perm(y.vs[0], y.vs[1], 0x5410u)), s23 = u2h(__byte_perm(y.vs[2], y.vs[3], 0x5410u));
                const __half2 z01 = u2h(__byte_perm(y.vs[0], y.vs[1], 0x7632u)), z23 = u2h(__byte_perm(y.vs[2], y.vs[3], 0x7632u));
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    __half2 a[4];
                    a[0] = u2h(__byte_perm(hv[0][j], hv[1][j], 0x5410u)), a[1] = u2h(__byte_perm(hv[0][j], hv[1][j], 0x7632u));
                    a[2] = u2h(__byte_perm(hv[2][j], hv[3][j], 0x5410u)), a[3] = u2h(__byte_perm(hv[2][j], hv[3][j], 0x7632u));
                    if constexpr (!TQV) // int / KIVI codes: c − qmax (int) or c (KIVI) exactly
#pragma unroll
                        for (int e = 0; e < 4; e++) a[e] = __hfma2(a[e], fm[j], fa[j]);
                    if constexpr (KIVI) {
                        a[0] = __hfma2(a[0], s01, z01), a[1] = __hfma2(a[1], s01, z01);
                        a[2] = __hfma2(a[2], s23, z23), a[3] = __hfma2(a[3], s23, z23);
                    } else {
                        a[0] = __hmul2(a[0], s01), a[1] = __hmul2(a[1], s01), a[2] = __hmul2(a[2], s23), a[3] = __hmul2(a[3], s23);
                    }
                    mma16816(acc[j], h2u(a[0]), h2u(a[1]), h2u(a[2]), h2u(a[3]), b0, b1);
                }
            }
        }
        if (!ST) {
            x = x1;
            if (PF == 2) x1 = x2;
        }
    }
    if (ST) cp_async_wait_all(); // none is pending (every copy issued was waited for); red reuses the rings after the barrier below

    // ---- the warps' (max, sum, Σ p·V) merged, the block's partial results out
    kvq_tc_chunk_out(p, red, wm, wl, acc, mx, ls, warp, g, t, b, gk, s,
                     [&](int j, int hi) { return TQV ? kvq_tc_tqv_dim(B, g, j, hi) : kvq_tc_vdim(B, g, j, hi); });
}

// KIND: KVQ_GKV_INT (keys and values s·(c − qmax), s per position) or KVQ_GKV_KIVI (keys s_i·c + z_i
// per channel over 32-position groups: q ⊙ s as B, Σ q·z added to the score; values s·c + z per
// position and 32 channels). Warp w takes the steps w, w+4, ... of TS tiles (KIVI: 2, one key
// group) one tile at a time, with the loads of the tile PF ahead in flight (ST = 0), or with the
// next ST − 1 tiles' copies in flight into the warp's shared-memory ring (ST = 3, 4; PF unused).
// KVQ_GKV_TURBO: keys and values norm·cb[c] in a rotated frame (kvq_tc_tq_dq), scaled as int's.
// Then, in the attend's final launch with the merge fused, the last block per (sequence, KV head)
// merges (int / KIVI values: no rotation back; TURBO's values: rotated back).
// Blocks an SM (the register budget): 4 (≤ 128 registers) for variant 1 and the pipelined kernels, 3
// (≤ 168) for variant 2 — and for TURBO:4's variant 1, which spills 92 bytes at 128 (ptxas, session 14).
// LEAN int:2 pipelined: 5 (≤ 96 registers: 20 warps an SM; ptxas, CUDA 13.0: no spills — KIVI:2 and
// every 4-bit kernel spill at 96, TURBO:2 fits but re-computes addresses, 551 → 598 instructions a
// tile; 6 blocks, ≤ 80, spills 68-76 bytes; session 14, helper i20d).
template <int KIND, int B, int PF, int ST, int LEAN>
__host__ __device__ constexpr int tc_min_blocks() {
    return LEAN && ST && KIND == KVQ_GKV_INT && B == 2 ? 5 : ST ? 4 : KIND == KVQ_GKV_TPROD ? 3 : PF == 1 && !(KIND == KVQ_GKV_TURBO && B == 4) ? 4 : 3;
}
// PRE (TPROD, TURBO): a programmatic dependent of tp_pre (when the attend's launches are); every block, spare
// ones too, waits for it (griddepcontrol.wait), so that this grid ends after tp_pre has.
// Q8 (int keys; KVQ_CUDA_KV_TC_Q8, session 20, helper i20v): the scores on integer tensor cores (tc_chunk).
template <int KIND, int B, int TS, int PF, int ST, int LEAN, int PRE = 0, int Q8 = 0>
__global__ void __launch_bounds__(TNT, tc_min_blocks<KIND, B, PF, ST, LEAN>()) attn_tc(kvq_tc_args p) {
    __shared__ __align__(16) float red[tc_nred<KIND, B, ST>()][G][D];
    asm volatile("griddepcontrol.launch_dependents;"); // as attn_split (kv_split.cuh)
    tc_chunk<KIND, B, TS, PF, ST, LEAN, PRE, Q8>(p, red);
    if constexpr (PRE) asm volatile("griddepcontrol.wait;" ::: "memory"); // (returns at once where tc_chunk waited)
    float *m = &red[0][0][0];
    kvq_gkv_merge_last<KIND == KVQ_GKV_TURBO || KIND == KVQ_GKV_TPROD, KVQ_GKV_MERGE_TC>(p, blockIdx.z, blockIdx.y, m, m + G * KVQ_GKV_MERGE_TC, m + G * (KVQ_GKV_MERGE_TC + D));
}

// turboquant-prod's prelude once per (row b = blockIdx.y, KV head gk = blockIdx.x) (session 18): q rotated, S R q,
// and the scores' B fragments of every lane (tc_bfrag: what each attn_tc<…, PRE = 0> block forms) into p.tpre
// (tp_pre_store) for attn_tc<…, PRE = 1>. The same functions on the same values: the same bits. Lets its
// dependent start (its blocks' first tiles load meanwhile). KIND KVQ_GKV_TURBO (TurboQuant and qturbo; session
// 18, helper i20q): R q and its qk alone (tq_pre_store), what attn_tc<TURBO, B, 1, PF, 0, L, 1> reads.
template <int KIND, int B>
__global__ void __launch_bounds__(TNT) tp_pre(kvq_tc_args p) {
    constexpr bool TP = KIND == KVQ_GKV_TPROD;
    __shared__ __align__(16) float qs[G][D], sqs[TP ? G : 1][D];
    asm volatile("griddepcontrol.launch_dependents;");
    const int gk = blockIdx.x, b = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    for (int e = threadIdx.x; e < G * D; e += TNT) qs[e / D][e % D] = p.q[((size_t)b * p.H + gk * G + e / D) * D + e % D];
    __syncthreads();
    tc_rotate_q(p, gk, qs);
    if constexpr (TP) tp_srq(p, gk, qs, sqs, warp, g, t);
    if (warp) return; // (every warp's fragments are the same)
    float cm = 0.0f, ch = 0.0f;
    if constexpr (TP && B == 2) tp_cmch(p, gk, cm, ch);
    uint32_t qk[8][2], sk[TP ? 8 : 1][2];
    float zm[2] = {0.0f, 0.0f};
    tc_bfrag<KIND, B>(qs, sqs, cm, ch, g, t, qk, sk, zm);
    if constexpr (TP) tp_pre_store(tp_pre_at<true>(p, b, gk, lane), qk, sk, zm);
    else tq_pre_store(tp_pre_at<false>(p, b, gk, lane), qk);
}

const void *kvq_gkv_tc_kernel(int kk, int kb, int vk, int vb, int variant, int stages, int lean, int pre, int q8) {
    if (kk == KVQ_GKV_TPROD) { // turboquant-prod: its keys, turboquant values of the same bits; no cp.async stages
        if (vk != KVQ_GKV_TURBO || kb != vb || kb < 2 || kb > 4 || variant < 1 || variant > 2) return NULL;
#define TPK_(B, L, P) \
    if (kb == B && lean == L && pre == P) return variant == 2 ? (const void *)attn_tc<KVQ_GKV_TPROD, B, 1, 2, 0, L, P> : (const void *)attn_tc<KVQ_GKV_TPROD, B, 1, 1, 0, L, P>;
#define TPK(B, L) TPK_(B, L, 0) TPK_(B, L, 1)
        pre = pre != 0;
        TPK(2, 0) TPK(2, 1) TPK(3, 0) TPK(3, 1) TPK(4, 0) TPK(4, 1)
#undef TPK
#undef TPK_
        return NULL;
    }
    if (kk != vk || kb != vb || (kb != 2 && kb != 4) || variant < 1 || variant > 2) return NULL;
    if (stages && stages != 3 && stages != 4) return NULL;
    // int keys on integer tensor cores (q8; session 20, helper i20v): the lean instantiations, every variant and stage count
#define TQ8(B)                                                                                                           \
    if (q8 && lean && kk == KVQ_GKV_INT && kb == B)                                                                      \
        return stages == 4   ? (const void *)attn_tc<KVQ_GKV_INT, B, 1, 0, 4, 1, 0, 1>                                   \
               : stages == 3 ? (const void *)attn_tc<KVQ_GKV_INT, B, 1, 0, 3, 1, 0, 1>                                   \
               : variant == 2 ? (const void *)attn_tc<KVQ_GKV_INT, B, 1, 2, 0, 1, 0, 1>                                  \
                              : (const void *)attn_tc<KVQ_GKV_INT, B, 1, 1, 0, 1, 0, 1>;
    TQ8(2) TQ8(4)
#undef TQ8
#define TCK_(KIND, TS, B, L)                                                                                             \
    return stages == 4   ? (const void *)attn_tc<KIND, B, TS, 0, 4, L>                                                   \
           : stages == 3 ? (const void *)attn_tc<KIND, B, TS, 0, 3, L>                                                   \
           : variant == 2 ? (const void *)attn_tc<KIND, B, TS, 2, 0, L>                                                  \
                          : (const void *)attn_tc<KIND, B, TS, 1, 0, L>;
    // TURBO's prelude (pre, session 18, helper i20q): the register-prefetch variants; the pipelined ones form it per block
#define TQP(B, L)                                                                                                        \
    if (kk == KVQ_GKV_TURBO && kb == B && lean == L && pre && !stages)                                                   \
        return variant == 2 ? (const void *)attn_tc<KVQ_GKV_TURBO, B, 1, 2, 0, L, 1> : (const void *)attn_tc<KVQ_GKV_TURBO, B, 1, 1, 0, L, 1>;
    TQP(2, 0) TQP(2, 1) TQP(4, 0) TQP(4, 1)
#undef TQP
#define TCK(KIND, TS, B)                                                                                                 \
    if (kk == KIND && kb == B) {                                                                                         \
        if (lean) TCK_(KIND, TS, B, 1)                                                                                   \
        TCK_(KIND, TS, B, 0)                                                                                             \
    }
    TCK(KVQ_GKV_INT, 1, 2)
    TCK(KVQ_GKV_INT, 1, 4)
    TCK(KVQ_GKV_KIVI, 2, 2)
    TCK(KVQ_GKV_KIVI, 2, 4)
    TCK(KVQ_GKV_TURBO, 1, 2)
    TCK(KVQ_GKV_TURBO, 1, 4)
#undef TCK
#undef TCK_
    return NULL;
}

kvq_status kvq_gkv_tc_launch(const void *fn, const kvq_tc_args *a, int n_chunks, int batch, cudaStream_t sm, int pdl, kvq_err *err) {
    void (*f)(kvq_tc_args) = (void (*)(kvq_tc_args))fn;
    if (!pdl) {
        f<<<dim3(n_chunks, a->n_kv, batch), TNT, 0, sm>>>(*a);
        CU_LAUNCHED("attn_tc");
        return KVQ_OK;
    }
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t k = {};
    k.gridDim = dim3(n_chunks, a->n_kv, batch);
    k.blockDim = dim3(TNT);
    k.stream = sm;
    k.attrs = &at;
    k.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&k, f, *a);
    if (e != cudaSuccess) return cu_fail(err, e, "launch attn_tc (a programmatic dependent)");
    return KVQ_OK;
}

kvq_status kvq_gkv_tp_pre_launch(const kvq_tc_args *a, int kind, int bits, int nrow, cudaStream_t sm, kvq_err *err) {
    void (*f)(kvq_tc_args) = NULL;
    if (kind == KVQ_GKV_TPROD) f = bits == 2 ? tp_pre<KVQ_GKV_TPROD, 2> : bits == 3 ? tp_pre<KVQ_GKV_TPROD, 3> : bits == 4 ? tp_pre<KVQ_GKV_TPROD, 4> : NULL;
    if (kind == KVQ_GKV_TURBO) f = bits == 2 ? tp_pre<KVQ_GKV_TURBO, 2> : bits == 4 ? tp_pre<KVQ_GKV_TURBO, 4> : NULL;
    if (!f || !a->tpre || nrow < 1)
        return kvq_err_set(err, KVQ_ERR_ARG, "gpu kv attention: q's prelude: keys kind %d, %d bits, %d rows", kind, bits, nrow);
    f<<<dim3(a->n_kv, nrow), TNT, 0, sm>>>(*a);
    CU_LAUNCHED("tp_pre");
    return KVQ_OK;
}
