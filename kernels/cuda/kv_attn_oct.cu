// Tensor-core split-K decode attention for OCTOPUS keys (octopus:2 and octopus:4, and :qjl; issue
// 20, session 17, helper i20c): kv_attn_tc.cu's kernel shape — 4 warps a block, 16-position tiles
// w, w+4, ... a warp with the next tile's loads in flight (two tiles' spill), online softmax
// per warp, KIVI values by mma (octopus's values are KIVI's layout), the warps merged in shared
// memory, the same partial results and fused merge — with the keys' tile built in registers from
// the triplet codes (fragment and table arithmetic in kv_tc_oct.h, shared with the host test):
//  q_rot = WHT(s1 ⊙ q)/√d once per block, in fp16 as B over 9 k-steps (144 dims, zero past 128);
//  A = the fp16 ρ̂·n̂ values of the 16 positions' triplets: per triplet one 8-byte shared-memory read
//  of the direction table (fp16, kvq_tc_oct_entry's E or O half), one 4-byte read of the (ρ̂, ρ̂)
//  table, 1.5 HMUL2/HFMA2; γ (fp32 per position) multiplies the fp32 score.
// :qjl (Q) adds sqrt(π/(2d))·γ_r·⟨R′q_rot, 2σ − 1⟩: the sign plane's word of the lane as ±1 fp16 pairs
// (kvq_tc_oct_sgn) against R′q_rot = WHT(s2 ⊙ q_rot)/√d over 8 more k-steps, an accumulator of its own
// scaled by γ_r. The arithmetic is kv_attn_tc.cu's lean one (one lop3 a code pair, ex2.approx.ftz, Σ p·V
// rescaled only when a running max moved). octopus:3 (its kivi:3 values) stays on the fp32 split kernel.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/kv_attn_oct.cuh"
#include "kernels/cuda/kv_merge.cuh"
#include "kernels/cuda/kv_tc_oct.h"
#include "kernels/cuda/kv_tc_dev.cuh"

#define D KVQ_GKV_HEAD_DIM
#define G KVQ_GKV_GROUP
#define TNT KVQ_GKV_TC_THREADS
#define TNW (TNT / 32)

static_assert(D == 128 && G == 4, "the fragment mapping assumes head_dim 128 and 4 query heads per KV head");
static_assert(4 * 36 == 16 * KVQ_TC_OCT_KSTEPS && 2 * KVQ_TC_OCT_PAIRS == 36, "a lane's 12 triplets are its 36 k dims");

static_assert(f16c(1.0f) == 0x3C00u && f16c(0.0625f) == 0x2C00u && f16c(-64.0f) == 0xD400u, "f16c");

// One tile's loads for a lane (zeros past the chunk: codes 0 read a finite table entry, weight 0):
// keys of positions g, g+8 — the code words of GPU-layout lanes 2t, 2t+1 (2·NW words, contiguous)
// and γ; values of positions 2t, 2t+1, 2t+8, 2t+9 — dims 16g.. (each plane's 4 bytes) and the
// (scale, zero) of the quad's 32-channel group (as kv_attn_tc.cu's KIVI values).
template <int Q>
struct oct_qjl {}; // (nothing without :qjl)
template <>
struct oct_qjl<1> {
    uint32_t sg[2]; // the lane's sign word of positions g, g+8
    float kr[2];    // and their γ_r
};
template <int B, int Q>
struct oct_tile : oct_qjl<Q> {
    uint32_t k[2][2 * KVQ_TC_OCT_NW(B)];
    float kg[2];
    uint32_t v[4][B / 2];
    uint32_t vs[4];
};
// The lane's addresses at the chunk's first position t0 (a tile at t0 + o reads them + o rows): its
// key rows (g), its γ, its value rows (2t), the (scale, zero) of its values' group.
struct oct_base {
    const uint8_t *k, *v, *vs;
    const float *kg;
};
template <int B, int Q>
__device__ __forceinline__ void oct_load(const oct_base &a, int o, int n, int g, int t, oct_tile<B, Q> &x) {
    constexpr int NW = KVQ_TC_OCT_NW(B), KRB = 4 * (D / 16) * NW + (Q ? D / 8 : 0), VRB = B / 2 * (D / 4);
    static_assert(NW == 2 || NW == 3, "2 or 3 words a layout lane");
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int rel = o + 8 * r; // row g + rel of the chunk
        const bool ok = g + rel < n;
        const uint8_t *src = a.k + rel * KRB; // 16-byte (NW 2) or 8-byte (NW 3) aligned
        if constexpr (NW == 2) {
            const uint4 w = ok ? __ldg((const uint4 *)src) : make_uint4(0u, 0u, 0u, 0u);
            x.k[r][0] = w.x, x.k[r][1] = w.y, x.k[r][2] = w.z, x.k[r][3] = w.w;
        } else {
#pragma unroll
            for (int i = 0; i < 3; i++) {
                const uint2 w = ok ? __ldg((const uint2 *)src + i) : make_uint2(0u, 0u);
                x.k[r][2 * i] = w.x, x.k[r][2 * i + 1] = w.y;
            }
        }
        x.kg[r] = ok ? __ldg(a.kg + (Q ? 2 : 1) * rel) : 0.0f; // Q: side (γ, γ_r, 0) 8 bytes a position
        if constexpr (Q) {
            x.sg[r] = ok ? __ldg((const uint32_t *)(src + 4 * (D / 16) * NW - 8 * NW * t + 4 * t)) : 0u; // the sign plane's word t
            x.kr[r] = ok ? __half2float(__ushort_as_half(__ldg((const unsigned short *)(a.kg + 2 * rel + 1)))) : 0.0f;
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int rel = o + (r & 1) + 8 * (r >> 1); // row 2t + rel
        const bool ok = 2 * t + rel < n;
#pragma unroll
        for (int pl = 0; pl < B / 2; pl++) x.v[r][pl] = ok ? __ldg((const uint32_t *)(a.v + rel * VRB + pl * (D / 4))) : 0u;
        x.vs[r] = ok ? __ldg((const uint32_t *)(a.vs + rel * (D / 32) * 4)) : 0u;
    }
}

// The fp16 pairs 3m..3m+2 of one position's triplets a = 2m, b = 2m + 1 (of the lane's 12; w: the
// position's 2·NW code words): (x_a, y_a)·ρ̂_a, (z_a·ρ̂_a, x_b·ρ̂_b), (y_b, z_b)·ρ̂_b — per triplet 2
// shifts, 2 masks, an 8-byte and a 4-byte shared-memory read (the tables below).
// The head's tables (a block's), at shared-memory addresses aligned so that the address OR an entry's
// offset is the entry's address (one lop3, kvq_tc_oct_field): kvq_tc_oct_entry of each direction as
// (E, O) uint2 pairs (16 KB at b = 4; the b = 2 kernels use 1 KB of it) at the first 16 KB-aligned
// address in oct_raw — aligned at run time: the block's shared memory begins after a reserved 1 KB
// (sm_90: static variables at 0x400 + their offset), so no declared alignment makes the address itself
// 16 KB-aligned —, and (ρ̂, ρ̂) in fp16 (32 bytes: 32-byte alignment suffices, the reserve being 1 KB).
static __shared__ __align__(1024) uint8_t oct_raw[(16 << 10) + (15 << 10)];
static __shared__ __align__(32) uint32_t oct_rr[8];
__device__ __forceinline__ uint32_t oct_dirs_at() { return ((uint32_t)__cvta_generic_to_shared(oct_raw) + 16383u) & ~16383u; }
__device__ __forceinline__ uint2 lds64(uint32_t a) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
template <int B>
__device__ __forceinline__ void oct_pairs(const uint32_t *w, int m, uint32_t dbase, uint32_t rbase, uint32_t *h) {
    constexpr int NW = KVQ_TC_OCT_NW(B);
    const int ia = 2 * m, ib = ia + 1; // the same layout lane (6 codes a lane)
    uint32_t da, ra, db, rb;
    kvq_tc_oct_offs(B, w + NW * (ia / 6), ia % 6, dbase, rbase, &da, &ra);
    kvq_tc_oct_offs(B, w + NW * (ib / 6), ib % 6, dbase, rbase, &db, &rb);
    const uint2 ea = lds64(da), ob = lds64(db + 8); // E of a, O of b
    const __half2 pa = u2h(lds32(ra)), pb = u2h(lds32(rb));
    h[0] = h2u(__hmul2(u2h(ea.x), pa));
    h[1] = h2u(__hfma2(u2h(ob.x), pb, __hmul2(u2h(ea.y), pa))); // (z_a·ρ̂_a, 0) + (0, x_b·ρ̂_b)
    h[2] = h2u(__hmul2(u2h(ob.y), pb));
}

// One block's chunk: its partial results (kvq_gkv_split_out) or nothing (a captured step's spare block).
template <int B, int QR, int Q>
__device__ __forceinline__ void oct_chunk(const kvq_tc_args &p, const float *rho, float (&red)[TNW][G][D]) {
    constexpr int NDIR = 1 << (2 * B + 2), NRHO = 1 << (B - 1);
    constexpr float QJLK = 0.110778366f; // sqrt(π/(2d)), d = 128 (as split_chunk)
    __shared__ __align__(16) float qs[G][D];
    static_assert(NDIR <= 1 << 10 && NRHO <= 8, "the tables' size");
    __shared__ float wm[TNW][G], wl[TNW][G];
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
    auto tile_of = [&](int k) { return warp + TNW * k; }; // the warp's k-th tile
    constexpr int NW = KVQ_TC_OCT_NW(B);
    const oct_base ab = {kreg + (size_t)(t0 + g) * (4 * (D / 16) * NW + (Q ? D / 8 : 0)) + 8 * NW * t,
                         vreg + (size_t)(t0 + 2 * t) * (B / 2 * (D / 4)) + 4 * g, vreg + p.vside + ((size_t)(t0 + 2 * t) * (D / 32) + (g >> 1)) * 4,
                         (const float *)(kreg + p.kside) + (Q ? 2 : 1) * (t0 + g)};
    oct_tile<B, Q> x, x1;
    if (tile_of(0) < ntile) oct_load<B, Q>(ab, 16 * tile_of(0), n, g, t, x); // before q and the tables: independent of them
    // the head's tables in fp16, and q_rot = WHT(s1 ⊙ q)/√d (kvq_gkv_wht: barriers before and after)
    {
        const float *dg = p.kcb + (size_t)gk * 3 * NDIR;
        uint2 *oct_dirs = (uint2 *)(oct_raw + (oct_dirs_at() - (uint32_t)__cvta_generic_to_shared(oct_raw)));
        for (int e = threadIdx.x; e < NDIR; e += TNT) {
            uint32_t w[4];
            kvq_tc_oct_entry(__half_as_ushort(__float2half_rn(__ldg(dg + 3 * e))), __half_as_ushort(__float2half_rn(__ldg(dg + 3 * e + 1))),
                             __half_as_ushort(__float2half_rn(__ldg(dg + 3 * e + 2))), w);
            oct_dirs[2 * e] = make_uint2(w[0], w[1]), oct_dirs[2 * e + 1] = make_uint2(w[2], w[3]);
        }
        for (int e = threadIdx.x; e < NRHO; e += TNT) {
            const uint32_t h = __half_as_ushort(__float2half_rn(__ldg(rho + (size_t)gk * NRHO + e)));
            oct_rr[e] = h | h << 16;
        }
        for (int e = threadIdx.x; e < G * D; e += TNT)
            qs[e / D][e % D] = p.q[((size_t)b * p.H + gk * G + e / D) * D + e % D] * p.ksigns[(size_t)gk * 2 * D + e % D];
        kvq_gkv_wht(&qs[0][0], G);
        if constexpr (Q) { // R′q_rot = WHT(s2 ⊙ q_rot)/√d, in red (free until the loop's end)
            float(&sq)[G][D] = red[0];
            for (int e = threadIdx.x; e < G * D; e += TNT) sq[e / D][e % D] = qs[e / D][e % D] * p.ksigns[(size_t)gk * 2 * D + D + e % D];
            kvq_gkv_wht(&sq[0][0], G);
        }
    }
    // q_rot as B: column g = query head g (< 4), k-step ks: the lane's pairs 2ks, 2ks + 1
    // (kvq_tc_oct_kdim); QR: in 18 registers, else in shared memory (the same for every warp; one 8-byte
    // read a k-step, lane-consecutive: no bank conflict)
    // Q: 8 more k-steps, R′q_rot at the sign pairs' dims (kvq_tc_oct_sdim), in shared memory (QR is 0)
    static_assert(!(Q && QR), ":qjl keeps q in shared memory");
    constexpr int NKS = KVQ_TC_OCT_KSTEPS + (Q ? 8 : 0);
    uint32_t qk[QR ? KVQ_TC_OCT_KSTEPS : 1][2];
    __shared__ uint2 qf[QR ? 1 : NKS][32];
    for (int e = QR ? lane : threadIdx.x; e < NKS * 32; e += QR ? 32 : TNT) {
        const int ks = e / 32, l = e % 32, qg = l >> 2, qt = l & 3;
        uint32_t w[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if (Q && ks >= KVQ_TC_OCT_KSTEPS) { // sign pair 2(ks − 9) + i, R′q_rot from red[0]
                const int j = 2 * (ks - KVQ_TC_OCT_KSTEPS) + i;
                w[i] = qg < G ? h2u(__floats2half2_rn(red[0][qg][kvq_tc_oct_sdim(qt, j, 0)], red[0][qg][kvq_tc_oct_sdim(qt, j, 1)])) : 0u;
                continue;
            }
            const int d0 = kvq_tc_oct_kdim(qt, 2 * ks + i, 0); // even: d0 and d0 + 1 both real or both padding
            w[i] = qg < G && d0 < D ? h2u(__floats2half2_rn(qs[qg][d0], qs[qg][d0 + 1])) : 0u;
        }
        if constexpr (QR) qk[ks][0] = w[0], qk[ks][1] = w[1];
        else qf[ks][l] = make_uint2(w[0], w[1]);
    }
    if (!QR) __syncthreads();
    // KIVI values' fix-up of pair j: c = h·(1/m) − 1024/m, exact in fp16 (kv_attn_tc.cu's with qmax 0)
    __half2 fm[8], fa[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float m = (float)(1 << kvq_tc_shift(B, j));
        fm[j] = u2h(0x10001u * f16c(1.0f / m)), fa[j] = u2h(0x10001u * f16c(-1024.0f / m));
    }

    const uint32_t dbase = oct_dirs_at(), rbase = (uint32_t)__cvta_generic_to_shared(oct_rr);

    // the lane's running state: heads 2t, 2t+1 (real for t < 2), Σ p·V as 8 m-tiles' C fragments
    float mx[2] = {-INFINITY, -INFINITY}, ls[2] = {0.0f, 0.0f};
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
    const int src1 = 4 * (2 * t) + (g >> 1), src2 = src1 + 4; // the lanes holding p of positions 2t, 2t+1 (and + 8) for head g
    const uint32_t psel = (g & 1) ? 0x7632u : 0x5410u;

    for (int k = 0;; k++) {
        const int ti = tile_of(k);
        if (ti >= ntile) break; // warp-uniform
        const int tb = t0 + 16 * ti;
        if (tile_of(k + 1) < ntile) oct_load<B, Q>(ab, 16 * tile_of(k + 1), n, g, t, x1);
        // ---- scores of positions tb + g (c[0], c[1]) and tb + g + 8 (c[2], c[3]), heads 2t, 2t+1: 9 k-steps
        // in three groups of 3 (two triplet pairs, 6 fp16 pairs a position), two mma chains
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < 3; u++) {
            uint32_t hk[2][6];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                oct_pairs<B>(x.k[r], 2 * u, dbase, rbase, hk[r]);
                oct_pairs<B>(x.k[r], 2 * u + 1, dbase, rbase, hk[r] + 3);
            }
#pragma unroll
            for (int k2 = 0; k2 < 3; k2++) {
                const int ks = 3 * u + k2;
                const uint2 bq = QR ? make_uint2(qk[ks][0], qk[ks][1]) : qf[ks][lane];
                mma16816(ks & 1 ? c2 : c, hk[0][2 * k2], hk[1][2 * k2], hk[0][2 * k2 + 1], hk[1][2 * k2 + 1], bq.x, bq.y);
            }
        }
        if constexpr (Q) { // + sqrt(π/(2d))·γ_r·⟨R′q_rot, 2σ − 1⟩: the ±1 sign pairs against R′q_rot, a chain of its own
            float cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int k2 = 0; k2 < 8; k2++) {
                const uint2 bq = qf[KVQ_TC_OCT_KSTEPS + k2][lane];
                mma16816(cq, kvq_tc_oct_sgn(x.sg[0], 2 * k2), kvq_tc_oct_sgn(x.sg[1], 2 * k2), kvq_tc_oct_sgn(x.sg[0], 2 * k2 + 1),
                         kvq_tc_oct_sgn(x.sg[1], 2 * k2 + 1), bq.x, bq.y);
            }
            const float r0 = QJLK * x.kr[0], r1 = QJLK * x.kr[1];
            c[0] = fmaf(r0, cq[0], c[0]), c[1] = fmaf(r0, cq[1], c[1]), c[2] = fmaf(r1, cq[2], c[2]), c[3] = fmaf(r1, cq[3], c[3]);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) c[e] += c2[e];
        const bool ok0 = tb + g < t1, ok1 = tb + g + 8 < t1;
        const float k0 = x.kg[0] * p.sl2, k1 = x.kg[1] * p.sl2;
        c[0] = ok0 ? c[0] * k0 : -INFINITY, c[1] = ok0 ? c[1] * k0 : -INFINITY;
        c[2] = ok1 ? c[2] * k1 : -INFINITY, c[3] = ok1 ? c[3] * k1 : -INFINITY;
        // ---- online softmax per head column (the 8 lanes of a column: xor over g)
        float pr[4], al[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float m = fmaxf(c[e], c[e + 2]);
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
            const float mn = fmaxf(mx[e], m); // finite: the tile has a valid position
            al[e] = tc_exp2<1>(mx[e] - mn);
            mx[e] = mn;
            pr[e] = tc_exp2<1>(c[e] - mn), pr[e + 2] = tc_exp2<1>(c[e + 2] - mn);
            ls[e] = fmaf(ls[e], al[e], pr[e] + pr[e + 2]);
        }
        if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) // else the products would leave acc as it is
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j][0] *= al[0], acc[j][2] *= al[0], acc[j][1] *= al[1], acc[j][3] *= al[1];
        // ---- p into B's layout: b0 = (p[2t][g], p[2t+1][g]), b1 = (p[2t+8][g], p[2t+9][g])
        const uint32_t p01 = h2u(__floats2half2_rn(pr[0], pr[1])), p23 = h2u(__floats2half2_rn(pr[2], pr[3]));
        const uint32_t y1 = __shfl_sync(0xffffffffu, p01, src1), y2 = __shfl_sync(0xffffffffu, p01, src2);
        const uint32_t z1 = __shfl_sync(0xffffffffu, p23, src1), z2 = __shfl_sync(0xffffffffu, p23, src2);
        const uint32_t b0 = g < G ? __byte_perm(y1, y2, psel) : 0u, b1 = g < G ? __byte_perm(z1, z2, psel) : 0u;
        // ---- Σ p·V (KIVI values s·c + z): m-tile j = dims (16g + dim(j), + 8) of positions 2t, 2t+1 | 2t+8, 2t+9
        {
            uint32_t hv[4][8];
#pragma unroll
            for (int r = 0; r < 4; r++) kvq_tc_dq_as(1, B, x.v[r][0], x.v[r][B / 2 - 1], hv[r]);
            const __half2 s01 = u2h(__byte_perm(x.vs[0], x.vs[1], 0x5410u)), s23 = u2h(__byte_perm(x.vs[2], x.vs[3], 0x5410u));
            const __half2 z01 = u2h(__byte_perm(x.vs[0], x.vs[1], 0x7632u)), z23 = u2h(__byte_perm(x.vs[2], x.vs[3], 0x7632u));
#pragma unroll
            for (int j = 0; j < 8; j++) {
                __half2 a[4];
                a[0] = u2h(__byte_perm(hv[0][j], hv[1][j], 0x5410u)), a[1] = u2h(__byte_perm(hv[0][j], hv[1][j], 0x7632u));
                a[2] = u2h(__byte_perm(hv[2][j], hv[3][j], 0x5410u)), a[3] = u2h(__byte_perm(hv[2][j], hv[3][j], 0x7632u));
#pragma unroll
                for (int e = 0; e < 4; e++) a[e] = __hfma2(a[e], fm[j], fa[j]);
                a[0] = __hfma2(a[0], s01, z01), a[1] = __hfma2(a[1], s01, z01);
                a[2] = __hfma2(a[2], s23, z23), a[3] = __hfma2(a[3], s23, z23);
                mma16816(acc[j], h2u(a[0]), h2u(a[1]), h2u(a[2]), h2u(a[3]), b0, b1);
            }
        }
        x = x1;
    }

    // ---- the warps' (max, sum, Σ p·V) merged, the block's partial results out
    kvq_tc_chunk_out(p, red, wm, wl, acc, mx, ls, warp, g, t, b, gk, s, [&](int j, int hi) { return kvq_tc_vdim(B, g, j, hi); });
}

// QR = 0 (variant 1): q's B fragments in shared memory, 4 blocks an SM (≤ 128 registers; b = 4 spills 24
// bytes, 3 reloads a tile; b = 2 none); QR = 1 (variant 2): in registers, 3 blocks an SM (≤ 168; no
// spills; at 128 it spilled 92 / 36 bytes). The same bits. Q (:qjl): QR = 0 at 3 blocks an SM (163 / 161
// registers, no spills). Two tiles' loads in flight spilled 36 / 8 bytes at 168 (ptxas, CUDA 13.0;
// session 17): not built.
template <int B, int QR, int Q>
__global__ void __launch_bounds__(TNT, QR || Q ? 3 : 4) attn_tc_oct(kvq_tc_args p, const float *rho) {
    __shared__ __align__(16) float red[TNW][G][D];
    static_assert(TNW * G * D >= G * (KVQ_GKV_MERGE_TC + D + D / 32), "the fused merge's shared memory in red");
    asm volatile("griddepcontrol.launch_dependents;"); // as attn_tc
    oct_chunk<B, QR, Q>(p, rho, red);
    float *m = &red[0][0][0];
    kvq_gkv_merge_last<false, KVQ_GKV_MERGE_TC>(p, blockIdx.z, blockIdx.y, m, m + G * KVQ_GKV_MERGE_TC, m + G * (KVQ_GKV_MERGE_TC + D));
}

const void *kvq_gkv_tc_oct_kernel(int kb, int qjl, int vk, int vb, int variant) {
    if (vk != KVQ_GKV_KIVI || vb != kb || variant < 1 || variant > 2) return NULL;
    if (qjl) return kb == 2 ? (const void *)attn_tc_oct<2, 0, 1> : kb == 4 ? (const void *)attn_tc_oct<4, 0, 1> : NULL; // one variant
    if (kb == 2) return variant == 2 ? (const void *)attn_tc_oct<2, 1, 0> : (const void *)attn_tc_oct<2, 0, 0>;
    if (kb == 4) return variant == 2 ? (const void *)attn_tc_oct<4, 1, 0> : (const void *)attn_tc_oct<4, 0, 0>;
    return NULL;
}

kvq_status kvq_gkv_tc_oct_launch(const void *fn, const kvq_tc_args *a, const float *rho, int n_chunks, int batch, cudaStream_t sm, kvq_err *err) {
    void (*f)(kvq_tc_args, const float *) = (void (*)(kvq_tc_args, const float *))fn;
    f<<<dim3(n_chunks, a->n_kv, batch), TNT, 0, sm>>>(*a, rho);
    CU_LAUNCHED("attn_tc_oct");
    return KVQ_OK;
}
