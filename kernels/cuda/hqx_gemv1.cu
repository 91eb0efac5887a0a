// One-token (decode) int8 product from the hqx layout: y = W·x with the activation prepared
// by hqx_fused.cu's hqx_prep_i8 in the lane order of hqx_dev.cuh (kvq_gemv1_xq_at). Built to
// stream the weights at memory speed: a warp takes RW rows at once and walks their columns
// in steps of 1024 (lane l: half l%2 of chunk l/2, one coalesced 16-byte load of nibbles per
// row, the chunk's bit-plane words and coset byte), with the next step's loads issued before
// the current step is multiplied (two steps of RW rows in flight per warp). The activations
// are read from global memory (L1-resident: a few KB per tensor) once per step for all RW
// rows: no shared memory, no block barrier. Codes are not re-centred per byte:
//   ⟨c, x⟩ = m·⟨u, x⟩ + Σ_vectors (cb − m·off)·s8,   u = nibble | planes << 4 ≥ 0,
// so each 4 coordinates cost a bit-field extract, a multiply and a LOP3 per plane and one
// dp4a. Integer tile sums equal the CPU int8 reference's; the float sums run in another
// order (per lane, then across lanes).
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/hqx_dev.cuh"

#define G1_WARPS 8 // warps per block

// One row's loads for one step (VB: value bits; NP planes of 64-bit words per chunk).
template <int VB> struct G1W {
    static constexpr int NP = VB > 4 && VB < 8 ? VB - 4 : 0;
    uint4 q, q2;                 // q2: vbits 8 only (the hi bytes)
    uint2 hb[NP > 0 ? NP : 1];
    uint32_t cb, code;
};

// Streaming loads of the weights: not kept in L1, which holds the activations every step
// re-reads.
__device__ __forceinline__ uint4 g1_ld16(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 g1_ld8(const void *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

// The tensor's pointers and scalars the loop reads, in registers (P.d[part] is indexed by
// the block's part, so reading it in the loop would reload every field from parameter space).
struct G1P {
    const uint8_t *q, *cb, *scode;
    const uint64_t *hb;
    const float *sc; // lut (with scode) or per-tile scales
    int m, e8;
    bool codes;
};

// Row `row`, chunk c (g = row·cpr + c, byte offsets below 2^32: checked at launch), tile
// index tix of the chunk's tile.
template <int VB>
__device__ __forceinline__ void g1_load(const G1P &d, uint32_t g, uint32_t tix, int h, bool ok, G1W<VB> &w) {
    constexpr int NP = G1W<VB>::NP;
    if (!ok) {
        w.q = make_uint4(0, 0, 0, 0);
        w.q2 = w.q;
#pragma unroll
        for (int p = 0; p < (NP > 0 ? NP : 1); p++) w.hb[p] = make_uint2(0, 0);
        w.cb = 0;
        w.code = 0;
        return;
    }
    if constexpr (VB == 8) {
        w.q = g1_ld16(d.q + g * 64u + 16u * h);
        w.q2 = g1_ld16(d.q + g * 64u + 32u + 16u * h);
    } else {
        w.q = g1_ld16(d.q + g * 32u + 16u * h);
#pragma unroll
        for (int p = 0; p < NP; p++) w.hb[p] = g1_ld8(d.hb + g * (uint32_t)NP + p);
    }
    w.cb = d.e8 ? (uint32_t)__ldg(d.cb + g) : 0u;
    w.code = d.codes ? (uint32_t)__ldg(d.scode + tix) : tix; // scale[] index when no codes
}

// The 4 coordinates of word k as bytes u = nibble | planes << 4 (nib4: the 4 nibbles already
// masked into bytes; bits: the plane words' 16 bits of this half, shifted by 4k).
template <int NP>
__device__ __forceinline__ uint32_t g1_u(uint32_t nib4, const uint32_t *bits, int k) {
    uint32_t u = nib4;
#pragma unroll
    for (int p = 0; p < NP; p++) {
        const uint32_t b = (bits[p] >> (4 * k)) & 15u;
        u |= (b * (0x00204081u << (4 + p))) & (0x01010101u << (4 + p));
    }
    return u;
}

// The step's activation for one lane: its lo and hi int8 codes, its four 8-vector sums as
// int16 pairs (s01: vectors 2h, 2h+1; s23: 4+2h, 5+2h), the tile's int8 scale, and
// m·off·Σ(the lane's 32 codes).
struct G1X {
    int4 lo, hi;
    int s01, s23;
    float sx;
    int moff_sum;
};

// ⟨c, x⟩ of one row's lane part (integer, exact).
template <int VB>
__device__ __forceinline__ int g1_dot(const G1P &d, const G1W<VB> &w, const G1X &x, int h) {
    constexpr int NP = G1W<VB>::NP;
    int dot = 0;
    const uint32_t r[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    const int xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w}, xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
    if constexpr (VB == 8) {
        const uint32_t r2[4] = {w.q2.x, w.q2.y, w.q2.z, w.q2.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            dot = __dp4a((int)(r[k] ^ 0x80808080u), xl[k], dot);
            dot = __dp4a((int)(r2[k] ^ 0x80808080u), xh[k], dot);
        }
    } else {
        uint32_t bl[NP > 0 ? NP : 1], bh[NP > 0 ? NP : 1];
#pragma unroll
        for (int p = 0; p < NP; p++) {
            bl[p] = (w.hb[p].x >> (16 * h)) & 0xffffu; // plane bits of coordinates 16h.. (lo)
            bh[p] = (w.hb[p].y >> (16 * h)) & 0xffffu; // and 32 + 16h.. (hi)
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            dot = __dp4a((int)g1_u<NP>(r[k] & 0x0F0F0F0Fu, bl, k), xl[k], dot);
            dot = __dp4a((int)g1_u<NP>((r[k] >> 4) & 0x0F0F0F0Fu, bh, k), xh[k], dot);
        }
    }
    int D = d.m * dot - x.moff_sum;
    if (d.e8) { // the coset bits of the lane's vectors 2h, 2h+1, 4+2h, 5+2h as 0/1 bytes
        const uint32_t b = (w.cb >> (2 * h)) & 0x33u, b4 = (b | (b >> 2)) & 15u;
        const uint32_t sel = (b4 * 0x00204081u) & 0x01010101u;
        D = __dp2a_lo(x.s01, (int)sel, D);
        D = __dp2a_hi(x.s23, (int)sel, D);
    }
    return D;
}

// RW rows from r0, DEPTH steps of loads in flight (a ring of DEPTH buffers, indices fixed at
// compile time by the unrolled inner loop). Pointers advance by constant strides per step
// (the row's chunk offsets are formed once), so a step's instructions are its loads and its
// arithmetic.
// FAST: E8 with 8-bit scale codes and whole steps (every large E8 tensor), known at compile
// time so that the loop has no branches.
template <int VB, int RW, int DEPTH, bool FAST>
__device__ __forceinline__ void g1_rows(const Dev &dv, const unsigned char *fs, float *y, int64_t r0, int lane,
                                        int accumulate) {
    constexpr int NP = G1W<VB>::NP, QS = VB == 8 ? 64 : 32; // q bytes per chunk
    G1P d;
    d.codes = FAST || dv.scode != NULL;
    d.sc = d.codes ? dv.lut : dv.scale;
    d.m = FAST ? 2 : dv.m;
    d.e8 = FAST || dv.e8;
    const int64_t rows = dv.rows;
    const uint32_t cpr = (uint32_t)(dv.cols_p / 64), tsh = __ffs(dv.T) - 1, tiles = (uint32_t)(dv.cols_p >> tsh),
                   steps = (cpr + 15) / 16, tps = 1024u >> tsh;
    const bool whole = FAST || (cpr & 15) == 0; // no partial last step
    const Lay L = lay(dv.cols_p, dv.T, 1);
    const int h = lane & 1, cl = lane >> 1;
    const int moff = VB == 8 ? 0 : dv.m * dv.off;
    int nr = (int)(rows - r0 < RW ? rows - r0 : RW); // rows of this warp
    // row 0's pointers at this lane's chunk of step 0; row i adds i times the row strides
    const uint32_t g0 = (uint32_t)r0 * cpr + cl, t0 = (uint32_t)r0 * tiles + ((uint32_t)(cl * 64) >> tsh);
    const uint8_t *qp = dv.q + (size_t)g0 * QS + 16 * h, *cbp = dv.cb + g0;
    const uint64_t *hbp = dv.hb + (size_t)g0 * NP;
    const uint8_t *scp = d.codes ? dv.scode + t0 : (const uint8_t *)(dv.scale + t0);
    const uint32_t scs = d.codes ? 1 : 4; // bytes per scale entry
    G1W<VB> buf[DEPTH][RW];
    auto load = [&](G1W<VB> *w, uint32_t s) {
        const bool ok = whole || s * 16 + cl < cpr;
#pragma unroll
        for (int i = 0; i < RW; i++) {
            if (!(i < nr && ok)) {
                w[i].q = make_uint4(0, 0, 0, 0);
                w[i].q2 = w[i].q;
#pragma unroll
                for (int p = 0; p < (NP > 0 ? NP : 1); p++) w[i].hb[p] = make_uint2(0, 0);
                w[i].cb = 0;
                w[i].code = 0;
                continue;
            }
            const uint32_t ro = i * cpr + s * 16; // chunks from row 0's chunk
            if constexpr (VB == 8) {
                w[i].q = g1_ld16(qp + (size_t)ro * QS);
                w[i].q2 = g1_ld16(qp + (size_t)ro * QS + 32);
            } else {
                w[i].q = g1_ld16(qp + (size_t)ro * QS);
#pragma unroll
                for (int p = 0; p < NP; p++) w[i].hb[p] = g1_ld8(hbp + (size_t)ro * NP + p);
            }
            w[i].cb = d.e8 ? (uint32_t)__ldg(cbp + ro) : 0u;
            const uint32_t to = i * tiles + s * tps;
            w[i].code = d.codes ? (uint32_t)__ldg(scp + to) : __ldg((const uint32_t *)(scp + (size_t)to * scs));
        }
    };
#pragma unroll
    for (int j = 0; j < DEPTH - 1; j++)
        if (j < steps) load(buf[j], j);
    // the weights' first steps are in flight; the activations come from the kernel before
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const float *sx = (const float *)(fs + L.sx), *xs = (const float *)(fs + L.xs);
    const int8_t *xq = (const int8_t *)(fs + L.xq);
    const int4 *xp = (const int4 *)(xq + 16 * lane), *s8p = (const int4 *)(fs + L.s8) + (cl * 2 + h);
    const float *sxp = sx + ((uint32_t)(cl * 64) >> tsh);
    float acc[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) acc[i] = 0.0f;
    auto use = [&](const G1W<VB> *w, uint32_t s) {
        if (!whole && s * 16 + cl >= cpr) return;
        G1X x;
        x.lo = xp[s * 64];
        x.hi = xp[s * 64 + 32];
        const int4 v = s8p[s * 32];
        x.s01 = (int)__byte_perm((uint32_t)v.x, (uint32_t)v.y, 0x5410);
        x.s23 = (int)__byte_perm((uint32_t)v.z, (uint32_t)v.w, 0x5410);
        x.sx = sxp[s * tps];
        x.moff_sum = moff * (v.x + v.y + v.z + v.w);
#pragma unroll
        for (int i = 0; i < RW; i++) {
            const int D = g1_dot<VB>(d, w[i], x, h);
            const float sc = d.codes ? __ldg(d.sc + w[i].code) : __uint_as_float(w[i].code);
            acc[i] = fmaf(sc * x.sx, (float)D, acc[i]);
        }
    };
    for (uint32_t s = 0; s < steps; s += DEPTH) {
#pragma unroll
        for (int j = 0; j < DEPTH; j++) {
            if (s + j >= steps) break;
            if (s + j + DEPTH - 1 < steps) load(buf[(j + DEPTH - 1) % DEPTH], s + j + DEPTH - 1);
            use(buf[j], s + j);
        }
    }
#pragma unroll
    for (int i = 0; i < RW; i++) {
        if (i >= nr) continue;
        const int64_t row = r0 + i;
        if (dv.zero) // RTN zero points: zero[t] · (tile sum of x)
            for (uint32_t j = lane; j < tiles; j += 32) acc[i] = fmaf(__ldg(dv.zero + row * tiles + j), xs[j], acc[i]);
        const uint32_t e0 = __ldg(dv.esc_row + row), e1 = __ldg(dv.esc_row + row + 1);
        for (uint32_t e = e0 + lane; e < e1; e += 32) {
            const uint32_t en = __ldg(dv.esc + e), col = kvq_hqx_esc_col(en);
            const uint32_t jt = col >> tsh;
            const int64_t tix = row * tiles + jt;
            const float sc = d.codes ? __ldg(d.sc + __ldg(dv.scode + tix)) : __ldg(dv.scale + tix);
            acc[i] = fmaf(sc * sx[jt], (float)(d.m * kvq_hqx_esc_delta(en) * (int)xq[kvq_gemv1_xq_at(col)]), acc[i]);
        }
        float v = acc[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[row] = accumulate ? __fadd_rn(y[row], v) : v;
    }
}

// Blocks per SM the register budget is cut for: the ring of loads (RW·DEPTH row-steps of
// q, planes, coset byte and scale code) plus ~36 registers of the rest, within 64K.
#define G1_RING(VB, RW, DEPTH) ((RW) * (DEPTH) * (6 + ((VB) > 4 && (VB) < 8 ? 2 * ((VB) - 4) : 0) + ((VB) == 8 ? 4 : 0)))
#define G1_MINB(VB, RW, DEPTH) (256 / (36 + G1_RING(VB, RW, DEPTH)) < 1 ? 1 : 256 / (36 + G1_RING(VB, RW, DEPTH)) > 4 ? 4 : 256 / (36 + G1_RING(VB, RW, DEPTH)))

template <int VB, int RW, int DEPTH, bool FAST>
__global__ void __launch_bounds__(G1_WARPS * 32, G1_MINB(VB, RW, DEPTH)) hqx_gemv1_k(const __grid_constant__ Parts P, int accumulate) {
    const int pi = blockIdx.y;
    if ((int)blockIdx.x >= P.nb[pi]) return;
    const Dev &d = P.d[pi];
    const int64_t r0 = ((int64_t)blockIdx.x * G1_WARPS + (threadIdx.x >> 5)) * RW;
    if (r0 >= d.rows) return;
    g1_rows<VB, RW, DEPTH, FAST>(d, P.fs[pi], P.y[pi], r0, threadIdx.x & 31, accumulate);
}

// ---- the staged path: a warp's next weight steps stream into its own ring of S shared-
// memory stages by cp.async (16-byte copies, no registers held while in flight), so many
// steps are in flight per warp at little register cost. Needs whole steps (cols_p a multiple
// of 1024) and tiles of at most 256 (a step's scale codes in 4-byte copies).
template <int VB> struct G1S {
    static constexpr int NP = G1W<VB>::NP;
    static constexpr int QB = VB == 8 ? 1024 : 512; // a row-step's q bytes
    static constexpr int HB = 128 * NP;            // plane words
    static constexpr int ROW = QB + HB + 16 + 64;  // + coset bytes + up to 64 bytes of scales
};

__device__ __forceinline__ void g1_cp16(uint32_t s, const void *g) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ void g1_cp4(uint32_t s, const void *g) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(g) : "memory");
}

template <int VB, int RW, int S>
__device__ __forceinline__ void g1s_rows(const Dev &dv, const unsigned char *fs, float *y, int64_t r0, int lane,
                                         int accumulate, unsigned char *sm) {
    using Z = G1S<VB>;
    constexpr int NP = Z::NP;
    G1P d;
    d.q = dv.q; d.cb = dv.cb; d.scode = dv.scode; d.hb = dv.hb;
    d.codes = dv.scode != NULL;
    d.sc = d.codes ? dv.lut : dv.scale;
    d.m = dv.m; d.e8 = dv.e8;
    const int64_t rows = dv.rows;
    const uint32_t cpr = (uint32_t)(dv.cols_p / 64), tsh = __ffs(dv.T) - 1, tiles = (uint32_t)(dv.cols_p >> tsh),
                   steps = cpr / 16, tps = 1024u >> tsh, scb = tps * (d.codes ? 1u : 4u); // tiles, scale bytes a step
    const Lay L = lay(dv.cols_p, dv.T, 1);
    const int h = lane & 1, cl = lane >> 1;
    const int moff = VB == 8 ? 0 : dv.m * dv.off;
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(sm);
    bool rok[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) rok[i] = r0 + i < rows;
    const unsigned char *scp = d.codes ? (const unsigned char *)d.scode : (const unsigned char *)d.sc;
    auto issue = [&](uint32_t s, uint32_t slot) {
#pragma unroll
        for (int i = 0; i < RW; i++) {
            if (!rok[i]) continue;
            const uint32_t g = ((uint32_t)r0 + i) * cpr + s * 16, rb = sbase + (slot * RW + i) * Z::ROW;
            if constexpr (VB == 8) {
                g1_cp16(rb + 16 * lane, d.q + g * 64u + 16 * lane);
                g1_cp16(rb + 512 + 16 * lane, d.q + g * 64u + 512 + 16 * lane);
            } else {
                g1_cp16(rb + 16 * lane, d.q + g * 32u + 16 * lane);
                if (lane < 8 * NP) g1_cp16(rb + Z::QB + 16 * lane, (const unsigned char *)(d.hb + g * (uint32_t)NP) + 16 * lane);
            }
            if (d.e8 && lane == 31) g1_cp16(rb + Z::QB + Z::HB, d.cb + g);
            if (4 * lane < scb) {
                const uint32_t t = ((uint32_t)r0 + i) * tiles + s * tps;
                g1_cp4(rb + Z::QB + Z::HB + 16 + 4 * lane, scp + t * (d.codes ? 1u : 4u) + 4 * lane);
            }
        }
    };
#pragma unroll
    for (int j = 0; j < S - 1; j++) {
        if (j < steps) issue(j, j);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    // the weights' first steps are in flight; the activations come from the kernel before
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const float *sx = (const float *)(fs + L.sx), *xs = (const float *)(fs + L.xs);
    const int32_t *s8 = (const int32_t *)(fs + L.s8);
    const int8_t *xq = (const int8_t *)(fs + L.xq);
    float acc[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) acc[i] = 0.0f;
    for (uint32_t s = 0; s < steps; s++) {
        if (s + S - 1 < steps) issue(s + S - 1, (s + S - 1) % S);
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
        __syncwarp();
        const uint32_t c = s * 16 + cl, slot = s % S;
        G1X x;
        const int4 *xp = (const int4 *)(xq + s * 1024 + 16 * lane);
        x.lo = xp[0];
        x.hi = xp[32];
        const int4 v = *(const int4 *)(s8 + (c * 2 + h) * 4);
        x.s01 = (int)__byte_perm((uint32_t)v.x, (uint32_t)v.y, 0x5410);
        x.s23 = (int)__byte_perm((uint32_t)v.z, (uint32_t)v.w, 0x5410);
        x.sx = sx[(c * 64) >> tsh];
        x.moff_sum = moff * (v.x + v.y + v.z + v.w);
#pragma unroll
        for (int i = 0; i < RW; i++) {
            if (!rok[i]) continue;
            const unsigned char *rb = sm + (slot * RW + i) * Z::ROW;
            G1W<VB> w;
            if constexpr (VB == 8) {
                w.q = *(const uint4 *)(rb + 64 * cl + 16 * h);
                w.q2 = *(const uint4 *)(rb + 64 * cl + 32 + 16 * h);
            } else {
                w.q = *(const uint4 *)(rb + 16 * lane);
#pragma unroll
                for (int p = 0; p < NP; p++) w.hb[p] = *(const uint2 *)(rb + Z::QB + 8 * (cl * NP + p));
            }
            w.cb = rb[Z::QB + Z::HB + cl];
            const uint32_t tl = (c * 64) >> tsh;
            const float sc = d.codes ? __ldg(d.sc + rb[Z::QB + Z::HB + 16 + (tl & (tps - 1))])
                                     : *(const float *)(rb + Z::QB + Z::HB + 16 + 4 * (tl & (tps - 1)));
            const int D = g1_dot<VB>(d, w, x, h);
            acc[i] = fmaf(sc * x.sx, (float)D, acc[i]);
        }
        __syncwarp(); // the slot is refilled by the next step's issue
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll
    for (int i = 0; i < RW; i++) {
        if (!rok[i]) continue;
        const int64_t row = r0 + i;
        if (dv.zero) // RTN zero points: zero[t] · (tile sum of x)
            for (uint32_t j = lane; j < tiles; j += 32) acc[i] = fmaf(__ldg(dv.zero + row * tiles + j), xs[j], acc[i]);
        const uint32_t e0 = __ldg(dv.esc_row + row), e1 = __ldg(dv.esc_row + row + 1);
        for (uint32_t e = e0 + lane; e < e1; e += 32) {
            const uint32_t en = __ldg(dv.esc + e), col = kvq_hqx_esc_col(en);
            const uint32_t jt = col >> tsh;
            const int64_t tix = row * tiles + jt;
            const float sc = d.codes ? __ldg(d.sc + __ldg(d.scode + tix)) : __ldg(d.sc + tix);
            acc[i] = fmaf(sc * sx[jt], (float)(d.m * kvq_hqx_esc_delta(en) * (int)xq[kvq_gemv1_xq_at(col)]), acc[i]);
        }
        float v = acc[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[row] = accumulate ? __fadd_rn(y[row], v) : v;
    }
}

#define G1S_WARPS 4 // warps per block of the staged path

template <int VB, int RW, int S>
__global__ void __launch_bounds__(G1S_WARPS * 32) hqx_gemv1_s(const __grid_constant__ Parts P, int accumulate) {
    extern __shared__ __align__(16) unsigned char g1_sm[];
    const int pi = blockIdx.y;
    if ((int)blockIdx.x >= P.nb[pi]) return;
    const Dev &d = P.d[pi];
    const int warp = threadIdx.x >> 5;
    const int64_t r0 = ((int64_t)blockIdx.x * G1S_WARPS + warp) * RW;
    if (r0 >= d.rows) return;
    g1s_rows<VB, RW, S>(d, P.fs[pi], P.y[pi], r0, threadIdx.x & 31, accumulate,
                        g1_sm + (size_t)warp * S * RW * G1S<VB>::ROW);
}

template <int VB, int RW, int S> static size_t g1s_smem() { return (size_t)G1S_WARPS * S * RW * G1S<VB>::ROW; }

template <int VB> static cudaError_t g1s_launch(cudaLaunchConfig_t cfg, int rw, int st, const Parts &P, int accumulate) {
#define G1S_GO(R, S_)                                                                   \
    do {                                                                                \
        cfg.dynamicSmemBytes = g1s_smem<VB, R, S_>();                                   \
        return cudaLaunchKernelEx(&cfg, hqx_gemv1_s<VB, R, S_>, P, accumulate);         \
    } while (0)
    if (rw == 1) { if (st == 8) G1S_GO(1, 8); G1S_GO(1, 4); }
    if (st == 8) G1S_GO(2, 8);
    G1S_GO(2, 4);
#undef G1S_GO
}

template <int VB> static cudaError_t g1s_init() {
    cudaError_t e = cudaSuccess;
#define G1S_ATTR(R, S_)                                                                                             \
    if (e == cudaSuccess)                                                                                           \
        e = cudaFuncSetAttribute(hqx_gemv1_s<VB, R, S_>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g1s_smem<VB, R, S_>());
    G1S_ATTR(1, 4) G1S_ATTR(1, 8) G1S_ATTR(2, 4) G1S_ATTR(2, 8)
#undef G1S_ATTR
    return e;
}

template <int VB, bool FAST> static cudaError_t g1_launch_f(const cudaLaunchConfig_t &cfg, int rw, const Parts &P, int accumulate) {
    return rw == 4   ? cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 4, 2, FAST>, P, accumulate)
           : rw == 2 ? cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 2, 2, FAST>, P, accumulate)
                     : cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 1, 2, FAST>, P, accumulate);
}
template <int VB> static cudaError_t g1_launch(const cudaLaunchConfig_t &cfg, int rw, bool fast, const Parts &P, int accumulate) {
    return fast ? g1_launch_f<VB, true>(cfg, rw, P, accumulate) : g1_launch_f<VB, false>(cfg, rw, P, accumulate);
}

static int g_rw = 0, g_depth = 0, g_path = 0; // kvq_cuda_hqx_set_decode; 0: the defaults

extern "C" void kvq_cuda_hqx_set_decode(int rows_per_warp, int stages, int path) {
    g_rw = rows_per_warp;
    g_depth = stages;
    g_path = path;
}

kvq_status kvq_cuda_hqx_gemv1_init(kvq_err *err) {
    CU_TRY(g1s_init<4>());
    CU_TRY(g1s_init<5>());
    CU_TRY(g1s_init<6>());
    CU_TRY(g1s_init<7>());
    CU_TRY(g1s_init<8>());
    return KVQ_OK;
}

kvq_status kvq_cuda_hqx_gemv1(Parts &P, int accumulate, int pdl, kvq_err *err) {
    bool staged = g_path == 2; // measured slower than the register path: only on request
    for (int p = 0; p < P.n; p++) {
        if (P.d[p].rows * P.d[p].cols_p >= ((int64_t)1 << 32) || (P.d[p].T & (P.d[p].T - 1)))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: %lld x %lld, tile %d: the one-token product takes "
                               "tensors below 2^32 padded weights and power-of-two tiles",
                               (long long)P.d[p].rows, (long long)P.d[p].cols_p, P.d[p].T);
        if (P.d[p].cols_p % 1024 || P.d[p].T > 256) staged = false;
    }
    // one row a warp: as fast as 2 or 4 on the large shapes and faster on tall-thin ones
    // (docs/results/gpu_runtime.md); staged: 2 rows, 4 stages
    const int rw = g_rw ? g_rw : staged ? 2 : 1;
    const int st = g_depth ? g_depth : 4;
    if (staged && rw > 2) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: the staged product takes 1 or 2 rows a warp");
    const int wpb = staged ? G1S_WARPS : G1_WARPS;
    // one launch per value width among the parts (q/k/v may differ); only the first follows
    // the preparation kernel directly
    unsigned done = 0;
    for (int p0 = 0; p0 < P.n; p0++) {
        const int vb = P.d[p0].vbits;
        if (done & (1u << vb)) continue;
        done |= 1u << vb;
        Parts Q = P;
        int max_nb = 1;
        bool fast = true; // every part of this width: E8, scale codes, whole steps
        for (int p = 0; p < P.n; p++)
            if (P.d[p].vbits == vb && !(P.d[p].e8 && P.d[p].scode && P.d[p].cols_p % 1024 == 0)) fast = false;
        for (int p = 0; p < P.n; p++) {
            const int64_t groups = (P.d[p].rows + rw - 1) / rw;
            Q.nb[p] = P.d[p].vbits == vb ? (int)((groups + wpb - 1) / wpb) : 0;
            max_nb = Q.nb[p] > max_nb ? Q.nb[p] : max_nb;
        }
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)max_nb, (unsigned)P.n);
        cfg.blockDim = dim3(wpb * 32);
        cfg.stream = kvq_cuda_stream();
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = pdl && p0 == 0 ? 1 : 0;
        cudaError_t e;
        if (staged) {
            switch (vb) {
            case 4: e = g1s_launch<4>(cfg, rw, st, Q, accumulate); break;
            case 5: e = g1s_launch<5>(cfg, rw, st, Q, accumulate); break;
            case 6: e = g1s_launch<6>(cfg, rw, st, Q, accumulate); break;
            case 7: e = g1s_launch<7>(cfg, rw, st, Q, accumulate); break;
            default: e = g1s_launch<8>(cfg, rw, st, Q, accumulate); break;
            }
        } else {
            switch (vb) {
            case 4: e = g1_launch<4>(cfg, rw, fast, Q, accumulate); break;
            case 5: e = g1_launch<5>(cfg, rw, fast, Q, accumulate); break;
            case 6: e = g1_launch<6>(cfg, rw, fast, Q, accumulate); break;
            case 7: e = g1_launch<7>(cfg, rw, fast, Q, accumulate); break;
            default: e = g1_launch<8>(cfg, rw, fast, Q, accumulate); break;
            }
        }
        if (e != cudaSuccess) return cu_fail(err, e, "launch hqx_gemv1");
        CU_LAUNCHED("hqx_gemv1");
    }
    return KVQ_OK;
}
