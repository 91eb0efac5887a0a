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

// Row `row`, chunk c (g = row·cpr + c, byte offsets below 2^32: checked at launch), tile
// index tix of the chunk's tile.
template <int VB>
__device__ __forceinline__ void g1_load(const Dev &d, uint32_t g, uint32_t tix, int h, bool ok, G1W<VB> &w) {
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
    w.code = d.scode ? (uint32_t)__ldg(d.scode + tix) : tix; // scale[] index when no codes
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

// The step's activation for one lane: its lo and hi int8 codes, its four 8-vector sums, the
// tile's int8 scale, and m·off·Σ(the lane's 32 codes).
struct G1X {
    int4 lo, hi, s8;
    float sx;
    int moff_sum;
};

// ⟨c, x⟩ of one row's lane part (integer, exact).
template <int VB>
__device__ __forceinline__ int g1_dot(const Dev &d, const G1W<VB> &w, const G1X &x, int h) {
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
    if (w.cb) {
        const uint32_t b = w.cb >> (2 * h);
        D += (b & 1u ? x.s8.x : 0) + (b & 2u ? x.s8.y : 0) + (b & 16u ? x.s8.z : 0) + (b & 32u ? x.s8.w : 0);
    }
    return D;
}

template <int VB, int RW>
__device__ __forceinline__ void g1_rows(const Dev &d, const unsigned char *fs, float *y, int64_t r0, int lane,
                                        int accumulate) {
    const uint32_t cpr = (uint32_t)(d.cols_p / 64), tsh = __ffs(d.T) - 1, tiles = (uint32_t)(d.cols_p >> tsh),
                   steps = (cpr + 15) / 16;
    const Lay L = lay(d.cols_p, d.T, 1);
    const int h = lane & 1, cl = lane >> 1;
    const int moff = VB == 8 ? 0 : d.m * d.off;
    G1W<VB> a[RW], b[RW];
    bool rok[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) rok[i] = r0 + i < d.rows;
    const uint32_t g0 = (uint32_t)r0 * cpr + cl, t0 = (uint32_t)r0 * tiles;
    auto load = [&](G1W<VB> *w, uint32_t s) {
        const uint32_t c = s * 16 + cl, tc = (c * 64) >> tsh;
#pragma unroll
        for (int i = 0; i < RW; i++) g1_load<VB>(d, g0 + i * cpr + s * 16, t0 + i * tiles + tc, h, rok[i] && c < cpr, w[i]);
    };
    load(a, 0);
    // the weights' first step is in flight; the activations come from the kernel before
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const float *sx = (const float *)(fs + L.sx), *xs = (const float *)(fs + L.xs);
    const int32_t *s8 = (const int32_t *)(fs + L.s8);
    const int8_t *xq = (const int8_t *)(fs + L.xq);
    float acc[RW];
#pragma unroll
    for (int i = 0; i < RW; i++) acc[i] = 0.0f;
    auto use = [&](const G1W<VB> *w, uint32_t s) {
        const uint32_t c = s * 16 + cl;
        if (c >= cpr) return;
        G1X x;
        const int4 *xp = (const int4 *)(xq + s * 1024 + 16 * lane);
        x.lo = xp[0];
        x.hi = xp[32];
        x.s8 = *(const int4 *)(s8 + (c * 2 + h) * 4);
        x.sx = sx[(c * 64) >> tsh];
        x.moff_sum = moff * (x.s8.x + x.s8.y + x.s8.z + x.s8.w);
#pragma unroll
        for (int i = 0; i < RW; i++) {
            const int D = g1_dot<VB>(d, w[i], x, h);
            const float sc = d.scode ? __ldg(d.lut + w[i].code) : __ldg(d.scale + w[i].code);
            acc[i] = fmaf(sc * x.sx, (float)D, acc[i]);
        }
    };
    for (uint32_t s = 0; s < steps; s += 2) {
        if (s + 1 < steps) load(b, s + 1);
        use(a, s);
        if (s + 1 >= steps) break;
        if (s + 2 < steps) load(a, s + 2);
        use(b, s + 1);
    }
#pragma unroll
    for (int i = 0; i < RW; i++) {
        if (!rok[i]) continue;
        const int64_t row = r0 + i;
        if (d.zero) // RTN zero points: zero[t] · (tile sum of x)
            for (uint32_t j = lane; j < tiles; j += 32) acc[i] = fmaf(__ldg(d.zero + row * tiles + j), xs[j], acc[i]);
        const uint32_t e0 = __ldg(d.esc_row + row), e1 = __ldg(d.esc_row + row + 1);
        for (uint32_t e = e0 + lane; e < e1; e += 32) {
            const uint32_t en = __ldg(d.esc + e), col = kvq_hqx_esc_col(en);
            const uint32_t jt = col >> tsh;
            const int64_t tix = row * tiles + jt;
            const float sc = d.scode ? __ldg(d.lut + __ldg(d.scode + tix)) : __ldg(d.scale + tix);
            acc[i] = fmaf(sc * sx[jt], (float)(d.m * kvq_hqx_esc_delta(en) * (int)xq[kvq_gemv1_xq_at(col)]), acc[i]);
        }
        float v = acc[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[row] = accumulate ? __fadd_rn(y[row], v) : v;
    }
}

template <int VB, int RW>
__global__ void __launch_bounds__(G1_WARPS * 32) hqx_gemv1_k(const __grid_constant__ Parts P, int accumulate) {
    const int pi = blockIdx.y;
    if ((int)blockIdx.x >= P.nb[pi]) return;
    const Dev &d = P.d[pi];
    const int64_t r0 = ((int64_t)blockIdx.x * G1_WARPS + (threadIdx.x >> 5)) * RW;
    if (r0 >= d.rows) return;
    g1_rows<VB, RW>(d, P.fs[pi], P.y[pi], r0, threadIdx.x & 31, accumulate);
}

template <int VB> static cudaError_t g1_launch(const cudaLaunchConfig_t &cfg, int rw, const Parts &P, int accumulate) {
    return rw == 4   ? cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 4>, P, accumulate)
           : rw == 2 ? cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 2>, P, accumulate)
                     : cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 1>, P, accumulate);
}

static int g_rw = 0; // rows per warp; 0: chosen per launch (kvq_cuda_hqx_set_decode)

extern "C" void kvq_cuda_hqx_set_decode(int rows_per_warp) { g_rw = rows_per_warp; }

kvq_status kvq_cuda_hqx_gemv1(Parts &P, int accumulate, int pdl, kvq_err *err) {
    int64_t rows = 0;
    for (int p = 0; p < P.n; p++) {
        rows += P.d[p].rows;
        if (P.d[p].rows * P.d[p].cols_p >= ((int64_t)1 << 32) || (P.d[p].T & (P.d[p].T - 1)))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: %lld x %lld, tile %d: the one-token product takes "
                               "tensors below 2^32 padded weights and power-of-two tiles",
                               (long long)P.d[p].rows, (long long)P.d[p].cols_p, P.d[p].T);
    }
    // 4 rows a warp (the activation loads shared 4 ways) unless that leaves fewer than ~16
    // warps per SM of 132: then 2, or 1
    const int rw = g_rw ? g_rw : rows >= 4 * 16 * 132 ? 4 : rows >= 2 * 8 * 132 ? 2 : 1;
    // one launch per value width among the parts (q/k/v may differ); only the first follows
    // the preparation kernel directly
    unsigned done = 0;
    for (int p0 = 0; p0 < P.n; p0++) {
        const int vb = P.d[p0].vbits;
        if (done & (1u << vb)) continue;
        done |= 1u << vb;
        Parts Q = P;
        int max_nb = 1;
        for (int p = 0; p < P.n; p++) {
            const int64_t groups = (P.d[p].rows + rw - 1) / rw;
            Q.nb[p] = P.d[p].vbits == vb ? (int)((groups + G1_WARPS - 1) / G1_WARPS) : 0;
            max_nb = Q.nb[p] > max_nb ? Q.nb[p] : max_nb;
        }
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)max_nb, (unsigned)P.n);
        cfg.blockDim = dim3(G1_WARPS * 32);
        cfg.stream = kvq_cuda_stream();
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = pdl && p0 == 0 ? 1 : 0;
        cudaError_t e;
        switch (vb) {
        case 4: e = g1_launch<4>(cfg, rw, Q, accumulate); break;
        case 5: e = g1_launch<5>(cfg, rw, Q, accumulate); break;
        case 6: e = g1_launch<6>(cfg, rw, Q, accumulate); break;
        case 7: e = g1_launch<7>(cfg, rw, Q, accumulate); break;
        default: e = g1_launch<8>(cfg, rw, Q, accumulate); break;
        }
        if (e != cudaSuccess) return cu_fail(err, e, "launch hqx_gemv1");
        CU_LAUNCHED("hqx_gemv1");
    }
    return KVQ_OK;
}
