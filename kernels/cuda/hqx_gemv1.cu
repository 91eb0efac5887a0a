// One-token (decode) int8 product from the hqx layout: y = W·x with the activation prepared
// by hqx_fused.cu's hqx_prep_i8 in the lane order of hqx_dev.cuh (kvq_gemv1_xq_at). Built to
// stream the weights at memory speed: a warp takes RW rows at once and walks their columns
// in steps of 1024 (lane l: half l%2 of chunk l/2, one coalesced 16-byte load of nibbles per
// row, the chunk's bit-plane words and coset byte), with the next step's loads issued before
// the current step is multiplied (two steps of RW rows in flight per warp; deeper rings
// and a cp.async ring in shared memory measured slower: fewer warps, more instructions).
// The activations are read from global memory (L1-resident: a few KB per tensor) once per
// step for all RW rows: no shared memory, no block barrier. Codes are not re-centred per
// byte:  ⟨c, x⟩ = m·⟨u, x⟩ + Σ_vectors (cb − m·off)·s8,   u = nibble | planes << 4 ≥ 0,
// so each 4 coordinates cost a shift and a LOP3 per plane (the plane words in the GPU's order,
// kvq_hqx_gpu_pbit: a lane loads its half's 32 bits) and one dp4a,
// and the coset term two dp2a. Launched as a programmatic dependent of the preparation: the
// first step's weight loads are issued before griddepcontrol.wait. Integer chunk sums equal
// the CPU int8 reference's; the float sums run in the batched kernel's order (hqx_fused.cu),
// so one-token and batched products give the same bits (a decode step equals a prefill row).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/hqx_dev.cuh"
#include "kernels/cuda/hqx_prep.cuh"

#define G1_WARPS 8 // warps per block

// One row's loads for one step (VB: value bits; NP planes of 64-bit words per chunk).
template <int VB> struct G1W {
    static constexpr int NP = VB > 4 && VB < 8 ? VB - 4 : 0;
    uint4 q, q2;                 // q2: vbits 8 only (the hi bytes)
    uint32_t hb[NP > 0 ? NP : 1]; // the lane half's 32 bits of each plane word (GPU order)
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
__device__ __forceinline__ uint32_t g1_ld4(const void *p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// The tensor's scalars the loop reads, in registers (P.d[part] is indexed by the block's
// part, so reading it in the loop would reload every field from parameter space).
struct G1P {
    const float *sc; // lut (with scode) or per-tile scales
    int m, e8;
    bool codes;
};

// The 4 coordinates of word k as bytes u = nibble | planes << 4 (nib4: the 4 nibbles already
// masked into bytes; P: the lane half's 32 bits of each plane word in the GPU's order, where
// word k's bit of byte i sits at 8i + k (low nibbles) or 8i + 4 + k (high nibbles),
// kvq_hqx_gpu_pbit): one shift and one masked OR (a LOP3) per plane.
template <int NP, int K, int HI>
__device__ __forceinline__ uint32_t g1_u(uint32_t nib4, const uint32_t *P) {
    uint32_t u = nib4;
#pragma unroll
    for (int p = 0; p < NP; p++) {
        const int sh = 4 + p - K - 4 * HI; // bit 8i + 4·HI + K to bit 8i + 4 + p
        const uint32_t v = sh >= 0 ? P[p] << sh : P[p] >> -sh;
        u |= v & (0x10101010u << p);
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

// The lane's 32 codes of one row as bytes u (lo: words 0..3, hi: 4..7), decoded once for every
// token a product has.
template <int VB>
__device__ __forceinline__ void g1_words(const G1W<VB> &w, uint32_t *u) {
    constexpr int NP = G1W<VB>::NP;
    const uint32_t r[4] = {w.q.x, w.q.y, w.q.z, w.q.w};
    if constexpr (VB == 8) {
        const uint32_t r2[4] = {w.q2.x, w.q2.y, w.q2.z, w.q2.w};
#pragma unroll
        for (int k = 0; k < 4; k++) u[k] = r[k] ^ 0x80808080u, u[4 + k] = r2[k] ^ 0x80808080u;
    } else {
#define G1_K(K)                                                                                  \
        u[K] = g1_u<NP, K, 0>(r[K] & 0x0F0F0F0Fu, w.hb);                                         \
        u[4 + K] = g1_u<NP, K, 1>((r[K] >> 4) & 0x0F0F0F0Fu, w.hb);
        G1_K(0) G1_K(1) G1_K(2) G1_K(3)
#undef G1_K
    }
}

// ⟨c, x⟩ of one row's lane part from its decoded words (integer, exact).
__device__ __forceinline__ int g1_dotu(const G1P &d, const uint32_t *u, uint32_t cb, const G1X &x, int h) {
    int dot = 0;
    const int xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w}, xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        dot = __dp4a((int)u[k], xl[k], dot);
        dot = __dp4a((int)u[4 + k], xh[k], dot);
    }
    int D = d.m * dot - x.moff_sum;
    if (d.e8) { // the coset bits of the lane's vectors 2h, 2h+1, 4+2h, 5+2h as 0/1 bytes
        const uint32_t b = (cb >> (2 * h)) & 0x33u, b4 = (b | (b >> 2)) & 15u;
        const uint32_t sel = (b4 * 0x00204081u) & 0x01010101u;
        D = __dp2a_lo(x.s01, (int)sel, D);
        D = __dp2a_hi(x.s23, (int)sel, D);
    }
    return D;
}

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
        (void)h;
#define G1_K(K)                                                                                  \
        dot = __dp4a((int)g1_u<NP, K, 0>(r[K] & 0x0F0F0F0Fu, w.hb), xl[K], dot);                 \
        dot = __dp4a((int)g1_u<NP, K, 1>((r[K] >> 4) & 0x0F0F0F0Fu, w.hb), xh[K], dot);
        G1_K(0) G1_K(1) G1_K(2) G1_K(3)
#undef G1_K
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
// MODE, known at compile time so that the loop has no branches: G1_E8 (E8 with 8-bit scale
// codes and whole steps: every large E8 tensor), G1_RTN (RTN: float scales, a zero point per
// tile, no coset bits, whole steps), or G1_ANY (everything else, decided at run time).
#define G1_ANY 0
#define G1_E8 1
#define G1_RTN 2
template <int VB, int RW, int DEPTH, int MODE>
__device__ __forceinline__ void g1_rows(const Dev &dv, const unsigned char *fs, float *y, int64_t r0, int lane,
                                        int accumulate) {
    constexpr int NP = G1W<VB>::NP, QS = VB == 8 ? 64 : 32; // q bytes per chunk
    G1P d;
    d.codes = MODE == G1_E8 || (MODE == G1_ANY && dv.scode != NULL);
    d.sc = d.codes ? dv.lut : dv.scale;
    d.m = MODE == G1_E8 ? 2 : MODE == G1_RTN ? 1 : dv.m;
    d.e8 = MODE == G1_E8 || (MODE == G1_ANY && dv.e8);
    const bool zero = MODE == G1_RTN || (MODE == G1_ANY && dv.zero);
    const int64_t rows = dv.rows;
    const uint32_t cpr = (uint32_t)(dv.cols_p / 64), tsh = __ffs(dv.T) - 1, tiles = (uint32_t)(dv.cols_p >> tsh),
                   steps = (cpr + 15) / 16, tps = 1024u >> tsh;
    const bool whole = MODE != G1_ANY || (cpr & 15) == 0; // no partial last step
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
                for (int p = 0; p < (NP > 0 ? NP : 1); p++) w[i].hb[p] = 0u;
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
                for (int p = 0; p < NP; p++) w[i].hb[p] = g1_ld4((const uint32_t *)(hbp + (size_t)ro * NP + p) + h);
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
    // Float sums in the batched kernel's order (hqx_fused.cu), so that a decode step (one
    // token, here) rounds exactly like a prefill row: there, lane L adds chunks L, L+32, ...
    // in turn, each as fmaf(scale·sx, (float)D, acc) with D the chunk's integer sum (and the
    // tile's zero point after its first chunk), then its escapes e0+L, e0+L+32, ..., then
    // the lanes are summed by xor shuffles 16, 8, 4, 2, 1. Here the lane pair j = l/2 takes
    // chunk 16s + j: both lanes add the pair's D, and step s's parity picks the accumulator,
    // acc[0] for chunks j, j+32, ... (lane L = j there), acc[1] for j+16, j+48, ... (L = j+16).
    static_assert(DEPTH % 2 == 0, "steps alternate between the two accumulators");
    float acc[2][RW];
#pragma unroll
    for (int i = 0; i < RW; i++) acc[0][i] = acc[1][i] = 0.0f;
    auto use = [&](const G1W<VB> *w, uint32_t s, int par) {
        const uint32_t c = s * 16 + cl;
        const bool ok = whole || c < cpr; // the same for both lanes of a pair
        G1X x;
        if (ok) {
            x.lo = xp[s * 64];
            x.hi = xp[s * 64 + 32];
            const int4 v = s8p[s * 32];
            x.s01 = (int)__byte_perm((uint32_t)v.x, (uint32_t)v.y, 0x5410);
            x.s23 = (int)__byte_perm((uint32_t)v.z, (uint32_t)v.w, 0x5410);
            x.sx = sxp[s * tps];
            x.moff_sum = moff * (v.x + v.y + v.z + v.w);
        }
#pragma unroll
        for (int i = 0; i < RW; i++) {
            int D = ok ? g1_dot<VB>(d, w[i], x, h) : 0;
            D += __shfl_xor_sync(0xffffffffu, D, 1); // the chunk's sum
            if (!ok) continue;
            const float sc = d.codes ? __ldg(d.sc + w[i].code) : __uint_as_float(w[i].code);
            acc[par][i] = fmaf(sc * x.sx, (float)D, acc[par][i]);
            if (zero && ((c * 64) & (dv.T - 1)) == 0) { // RTN: the tile's zero point
                const uint32_t jt = (c * 64) >> tsh;
                acc[par][i] = fmaf(__ldg(dv.zero + (r0 + i) * tiles + jt), xs[jt], acc[par][i]);
            }
        }
    };
    for (uint32_t s = 0; s < steps; s += DEPTH) {
#pragma unroll
        for (int j = 0; j < DEPTH; j++) {
            if (s + j >= steps) break;
            if (s + j + DEPTH - 1 < steps) load(buf[(j + DEPTH - 1) % DEPTH], s + j + DEPTH - 1);
            use(buf[j], s + j, j & 1);
        }
    }
#pragma unroll
    for (int i = 0; i < RW; i++) {
        // lane L takes the batched kernel's lane-L sum: acc[0] of pair L (L < 16), acc[1] of
        // pair L − 16
        const int src = 2 * (lane & 15);
        const float a0 = __shfl_sync(0xffffffffu, acc[0][i], src), a1 = __shfl_sync(0xffffffffu, acc[1][i], src);
        if (i >= nr) continue;
        float v = lane < 16 ? a0 : a1;
        const int64_t row = r0 + i;
        const uint32_t e0 = __ldg(dv.esc_row + row), e1 = __ldg(dv.esc_row + row + 1);
        for (uint32_t e = e0 + lane; e < e1; e += 32) {
            const uint32_t en = kvq_hqx_esc_at(dv, row, e), col = kvq_hqx_esc_col(en);
            const uint32_t jt = col >> tsh;
            const int64_t tix = row * tiles + jt;
            const float sc = d.codes ? __ldg(d.sc + __ldg(dv.scode + tix)) : __ldg(dv.scale + tix);
            v = fmaf(sc * sx[jt], (float)(d.m * kvq_hqx_esc_delta(en) * (int)xq[kvq_gemv1_xq_at(col)]), v);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[row] = accumulate ? __fadd_rn(y[row], v) : v;
    }
}

// Blocks per SM the register budget is cut for: the ring of loads (RW·DEPTH row-steps of
// q, planes, coset byte and scale code) plus ~36 registers of the rest, within 64K; one
// block fewer for the general variant (zero points, partial steps), which would spill.
#define G1_RING(VB, RW, DEPTH) ((RW) * (DEPTH) * (6 + ((VB) > 4 && (VB) < 8 ? 2 * ((VB) - 4) : 0) + ((VB) == 8 ? 4 : 0)))
#define G1_MINB(VB, RW, DEPTH) (256 / (36 + G1_RING(VB, RW, DEPTH)) < 1 ? 1 : 256 / (36 + G1_RING(VB, RW, DEPTH)) > 4 ? 4 : 256 / (36 + G1_RING(VB, RW, DEPTH)))

template <int VB, int RW, int DEPTH, int MODE>
__global__ void __launch_bounds__(G1_WARPS * 32, MODE != G1_ANY || G1_MINB(VB, RW, DEPTH) == 1 ? G1_MINB(VB, RW, DEPTH) : G1_MINB(VB, RW, DEPTH) - 1) hqx_gemv1_k(const __grid_constant__ Parts P, int accumulate) {
    const int pi = blockIdx.y;
    if ((int)blockIdx.x >= P.nb[pi]) return;
    const Dev &d = P.d[pi];
    const int64_t r0 = ((int64_t)blockIdx.x * G1_WARPS + (threadIdx.x >> 5)) * RW;
    if (r0 >= d.rows) return;
    g1_rows<VB, RW, DEPTH, MODE>(d, P.fs[pi], P.y[pi], r0, threadIdx.x & 31, accumulate);
}

template <int VB, int MODE> static cudaError_t g1_launch_f(const cudaLaunchConfig_t &cfg, int rw, const Parts &P, int accumulate) {
    return rw == 4   ? cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 4, 2, MODE>, P, accumulate)
           : rw == 2 ? cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 2, 2, MODE>, P, accumulate)
                     : cudaLaunchKernelEx(&cfg, hqx_gemv1_k<VB, 1, 2, MODE>, P, accumulate);
}
template <int VB> static cudaError_t g1_launch(const cudaLaunchConfig_t &cfg, int rw, int mode, const Parts &P, int accumulate) {
    return mode == G1_E8 ? g1_launch_f<VB, G1_E8>(cfg, rw, P, accumulate)
           : mode == G1_RTN ? g1_launch_f<VB, G1_RTN>(cfg, rw, P, accumulate)
                            : g1_launch_f<VB, G1_ANY>(cfg, rw, P, accumulate);
}

static int g_rw = 0; // rows per warp (kvq_cuda_hqx_set_decode); 0: the default
static int g_mode_any = 0; // tests: the run-time-decided variant for every tensor

// ---- Persistent variant (issue 12, 2026-11-26): a grid of resident warps, each taking rows
// gw, gw + W, ... (W warps in all, rows of the launch's parts numbered one after another) and
// streaming them as one sequence of (row, step) items through its ring of DEPTH loads, so the
// next row's first steps are in flight while a row is finished (its lane sums, escapes and
// store). The per-warp product above drains its ring at every row's end and a new warp starts
// cold: on the 8B shape a row of 4096 columns is 4 steps, so every 4 steps waited a whole
// memory latency. Whole steps and equal columns and tiles across the parts only (the E8 and
// RTN specializations); same integer chunk sums and the same float order per row as g1_rows,
// so the same bits.
// NT > 1: NT tokens at once (a decode step of several sequences): each weight chunk is loaded
// and decoded into its bytes once, then met by every token's activation (token t's lane-order
// layout at fs + t·lst bytes, its output row at y + t·ldy; nt <= NT of them); each token's sums
// run in the one-token order, so every token gets the bits a one-token product gives it.
// Registers: NT = 2 and 4 take 3 blocks an SM (80 registers), 8 takes 2 (ptxas: 112-126).
#define G1N_MINB(VB, DEPTH, NT) ((NT) == 1 ? G1_MINB(VB, 1, DEPTH) : (NT) <= 4 ? 3 : 2)
// FOLD (KVQ_CUDA_FOLD=1; one token, a ring of 2): the product prepares its RMSNorm input
// itself (hqx_prep.cuh, prep_fold) from the raw row F.x into shared memory and reads it there:
// blocks of KVQ_HQX_FOLD_WARPS warps, one an SM, each serving one part (its sign seed: q, k and
// v prepare differently) and its warps only that part's rows (kvq_hqx_fold_rows); a row's sums
// are the same whichever warp takes it, so the same bits as the preparation kernel + product.
struct G1F {
    const float *x, *w; // the token's raw row (cols floats, 16-byte aligned), the norm's weights
    float eps;
    float *y;           // NULL, or where block 0 writes the normalized row
    uint32_t b1, b2;    // the first blocks of parts 1 and 2 (kvq_hqx_fold_split)
};
// PF (KVQ_CUDA_ESC_PF=1; default off: measured slower on the H100, session 19 call D — 8B decode width 4
// 255.1 / 257.0 tok/s on against 297.2 off, width 5 311.4 / 312.2 against 327.1; same bits): a row's first escapes
// (g1_esc_rounds(VB) of 32 a warp) are fetched during its last steps instead of at its end, where
// each needed a dependent chain (the entry from DRAM, then its tile's scale code, the table and
// the activation) while only the ring's next step was in flight. One load of the chain a step,
// each a step after the one it needs: the row's escape range at its first step (as before), the
// entry at step S − 4 (at least 1), the scale code (E8) or scale (RTN) a step later, the table
// a step later, and at S − 1 (one token) the fmaf's operands scale·sx[jt] and M·delta·code from
// the activation (L1 or shared memory). An earlier attempt fetched the same with the row's
// first step and was slower (docs/EXECUTION.md): that put the chain at every row's start.
// The row's end then has the operands of those rounds in registers and runs the same fmaf
// sequence in the same order (lane L: e0+L, e0+L+32, ...) from the same lane sum: the same
// bits. Rows of 2..4 steps run the stages from step 1, rows of one step at step 0 (in order).
// The rest of a row's escapes go in batches of 4 rounds at its end (the loads of a batch
// together, its fmaf in order).
// Rounds (ptxas, session 19's table in docs/RESULTS.md): 2 (64 escapes a row) at width 4, the
// width with escapes (E8 4.0 forced to nibbles: ~2 %), where every instance of the default
// ring keeps them without spills; 1 at width 5; none at 6..8 (PF off: the packer picks those
// widths where escapes are rare, and the extra registers spilled in some instances).
__host__ __device__ constexpr int g1_esc_rounds(int vb) { return vb == 4 ? 2 : vb == 5 ? 1 : 0; }
// The row end's escapes from entry e on (lane L: e = its first, then + 32 a round) of local row
// ur of part d, added to the lane's sum r in order: in batches of 4 rounds (BATCH: each batch's
// loads issued together, its fmaf in order), or a chain a round. sx, xq: the token's tile scales
// and codes. M: the lattice multiplier (E8 2). Every one-token kernel's row end runs it, so they
// all add a row's escapes in the same order (the same bits).
template <int MODE, bool BATCH, bool PF>
__device__ __forceinline__ float g1_esc_rest(const Dev &d, uint32_t ur, uint32_t e, uint32_t e1, int lane, uint32_t tiles,
                                             uint32_t tsh, const float *sx, const int8_t *xq, float r) {
    constexpr int M = MODE == G1_E8 ? 2 : 1;
    if constexpr (BATCH) { // (the rest of) the row's escapes in batches of 4 rounds: each batch's loads issued together, its fmaf in order
        constexpr int B = 4;
        // EB with the 16-bit form: (col, delta) straight from each entry, no call on the way (the
        // packer's 32-bit word is not formed and taken apart again); a big entry (dcode 0) takes the
        // next of the row's big pairs, which lie in a run from the one kvq_hqx_esc16_lower finds at
        // the row's first big entry, counted by ballots (a rare, warp-uniform branch)
        uint32_t bnext = ~0u;
        for (; e - lane < e1; e += 32 * B) { // (e − lane is the warp's: every lane takes every batch)
            uint32_t en[B], sv[B], col[B];
            int32_t dl[B];
#pragma unroll
            for (int b = 0; b < B; b++) en[b] = e + 32 * b < e1 ? kvq_hqx_esc_raw(d, e + 32 * b) : 0u;
            if (!PF && d.esc16) {
                uint32_t bigs = 0; // bit b: round b's entry is big
#pragma unroll
                for (int b = 0; b < B; b++) {
                    col[b] = kvq_hqx_esc16_col(en[b], kvq_hqx_esc16_hi(d.esc_seg, d.esc_s1, ur, e + 32 * b));
                    dl[b] = kvq_hqx_esc16_dcode(en[b]);
                    if (e + 32 * b < e1 && !dl[b]) bigs |= 1u << b;
                }
                if (__any_sync(0xffffffffu, bigs)) {
#pragma unroll
                    for (int b = 0; b < B; b++) {
                        const uint32_t m = __ballot_sync(0xffffffffu, (bigs >> b) & 1u);
                        if (!m) continue;
                        if (bnext == ~0u) bnext = kvq_hqx_esc16_lower(d.esc_big, d.esc_nbig, e - lane + 32 * b + __ffs(m) - 1);
                        if ((bigs >> b) & 1u)
                            dl[b] = kvq_hqx_esc_delta(__ldg(d.esc_big + 2 * (bnext + __popc(m & ((1u << lane) - 1u))) + 1));
                        bnext += __popc(m);
                    }
                }
            } else {
#pragma unroll
                for (int b = 0; b < B; b++) { // (decoded after all the loads: kvq_hqx_esc_of)
                    if (e + 32 * b < e1) en[b] = kvq_hqx_esc_of(d, ur, e + 32 * b, en[b]);
                    col[b] = kvq_hqx_esc_col(en[b]), dl[b] = kvq_hqx_esc_delta(en[b]);
                }
            }
#pragma unroll
            for (int b = 0; b < B; b++) {
                const size_t tix = (size_t)ur * tiles + (col[b] >> tsh);
                sv[b] = e + 32 * b >= e1 ? 0u : MODE == G1_E8 ? (uint32_t)__ldg(d.scode + tix) : __float_as_uint(__ldg(d.scale + tix));
            }
#pragma unroll
            for (int b = 0; b < B; b++) {
                if (e + 32 * b >= e1) break;
                const float scl = MODE == G1_E8 ? __ldg(d.lut + sv[b]) : __uint_as_float(sv[b]);
                r = fmaf(scl * sx[col[b] >> tsh], (float)(M * dl[b] * (int)xq[kvq_gemv1_xq_at(col[b])]), r);
            }
        }
    }
    for (; e < e1; e += 32) { // without PF or EB: each round's chain in turn
        const uint32_t en = kvq_hqx_esc_at(d, ur, e), col = kvq_hqx_esc_col(en);
        const uint32_t jt = col >> tsh;
        const size_t tix = (size_t)ur * tiles + jt;
        const float scl = MODE == G1_E8 ? __ldg(d.lut + __ldg(d.scode + tix)) : __ldg(d.scale + tix);
        r = fmaf(scl * sx[jt], (float)(M * kvq_hqx_esc_delta(en) * (int)xq[kvq_gemv1_xq_at(col)]), r);
    }
    return r;
}

// The fold's preparation of part fp's activation into shared memory sm (block 0 also writes the
// normalized row to F.y): both persistent kernels' prologue.
template <int WB>
__device__ __forceinline__ void g1_fold_prep(const Parts &P, int fp, const G1F &F, unsigned char *sm, const Lay &L) {
    float *fy = blockIdx.x == 0 ? F.y : NULL;
    if (P.d[fp].T == 64) prep_fold<2, WB>(P.d[fp], F.x, F.w, F.eps, fy, sm, L);
    else if (P.d[fp].T == 128) prep_fold<4, WB>(P.d[fp], F.x, F.w, F.eps, fy, sm, L);
    else prep_fold<8, WB>(P.d[fp], F.x, F.w, F.eps, fy, sm, L);
}

// The rows a warp of a persistent one-token kernel walks: gw, gw + W, ... below rend; the fold: its
// block's part fp and that part's rows (kvq_hqx_fold_rows), else the whole grid over all rows.
template <bool FOLD, int WB>
__device__ __forceinline__ void g1_walk(const G1F &F, uint32_t rb1, uint32_t rb2, uint32_t rtot, uint32_t &gw, uint32_t &W,
                                        uint32_t &rend, int &fp) {
    gw = blockIdx.x * WB + (threadIdx.x >> 5), W = gridDim.x * WB, rend = rtot, fp = 0;
    if constexpr (FOLD) {
        const kvq_hqx_fold_walk fw = kvq_hqx_fold_rows(blockIdx.x, threadIdx.x >> 5, gridDim.x, F.b1, F.b2, rb1, rb2, rtot);
        gw = fw.first, W = fw.stride, rend = fw.end, fp = fw.part;
    }
}

// EB (KVQ_CUDA_ESC_PF=2, the default at width 4 since session 20 call A): no prefetch, but the row end's
// escapes in batches of 4 rounds as PF's rest (a batch's loads issued together, its fmaf in order): one
// chain a batch instead of one a round, with registers live only at the row's end. The same bits.
template <int VB, int DEPTH, int MODE, int NT, bool FOLD = false, bool PF = false, bool EB = false>
__global__ void __launch_bounds__(FOLD ? KVQ_HQX_FOLD_WARPS * 32 : G1_WARPS * 32, FOLD ? 1 : G1N_MINB(VB, DEPTH, NT))
    hqx_gemv1p_k(const __grid_constant__ Parts P, int accumulate, uint32_t rb1, uint32_t rb2, uint32_t rtot, int nt, int64_t ldy,
                 uint32_t lst, int trig, const G1F F) {
    static_assert(!FOLD || (NT == 1 && DEPTH == 2), "the fold: one token, a ring of 2 (64 registers at 1024 threads)");
    constexpr int NP = G1W<VB>::NP, QS = VB == 8 ? 64 : 32;
    constexpr int M = MODE == G1_E8 ? 2 : 1;
    constexpr int WB = FOLD ? KVQ_HQX_FOLD_WARPS : G1_WARPS; // warps per block
    // trig (KVQ_CUDA_G1TRIG, default on): the kernel after may launch now (its blocks take the SMs' slots
    // as this grid's free; what it reads of this grid's output it reads after its own
    // griddepcontrol.wait, which waits for this grid's completion)
    if (trig) asm volatile("griddepcontrol.launch_dependents;");
    const int lane = threadIdx.x & 31, h = lane & 1, cl = lane >> 1;
    uint32_t gw, W, rend;
    int fp; // FOLD: the block's part
    g1_walk<FOLD, WB>(F, rb1, rb2, rtot, gw, W, rend, fp);
    const uint32_t cpr = (uint32_t)(P.d[0].cols_p / 64), tsh = __ffs(P.d[0].T) - 1, tiles = (uint32_t)(P.d[0].cols_p >> tsh),
                   S = cpr / 16, tps = 1024u >> tsh;
    const Lay L = lay(P.d[0].cols_p, P.d[0].T, 1);
    const int moff = VB == 8 ? 0 : M * P.d[0].off; // RTN: off 0
    const uint32_t nrows = gw < rend ? (rend - 1 - gw) / W + 1 : 0;
    const uint32_t n_items = nrows * S;
    // load cursor: the row's part and its lane's first chunk and tile; the step
    uint32_t lrow = gw, ls = 0, lg0 = 0, lt0 = 0;
    int lp = 0;
    G1W<VB> buf[DEPTH];
    auto load = [&](int slot) {
        if (ls == 0) {
            lp = lrow >= rb2 ? 2 : lrow >= rb1 ? 1 : 0;
            const uint32_t r = lrow - (lp == 2 ? rb2 : lp == 1 ? rb1 : 0);
            lg0 = r * cpr + cl;
            lt0 = r * tiles + ((uint32_t)(cl * 64) >> tsh);
        }
        const Dev &d = P.d[lp];
        G1W<VB> &w = buf[slot];
        const uint32_t g = lg0 + ls * 16;
        if constexpr (VB == 8) {
            w.q = g1_ld16(d.q + (size_t)g * QS + 16 * h);
            w.q2 = g1_ld16(d.q + (size_t)g * QS + 16 * h + 32);
        } else {
            w.q = g1_ld16(d.q + (size_t)g * QS + 16 * h);
#pragma unroll
            for (int p = 0; p < NP; p++) w.hb[p] = g1_ld4((const uint32_t *)(d.hb + (size_t)g * NP + p) + h);
        }
        w.cb = MODE == G1_E8 ? (uint32_t)__ldg(d.cb + g) : 0u;
        w.code = MODE == G1_E8 ? (uint32_t)__ldg(d.scode + lt0 + ls * tps) : __float_as_uint(__ldg(d.scale + lt0 + ls * tps));
        if (++ls == S) ls = 0, lrow += W;
    };
#pragma unroll
    for (int j = 0; j < DEPTH - 1; j++)
        if (j < (int)n_items) load(j);
    // FOLD: the part's activation, then the raw row (kvq_hqx_fold_smem). Static: a dynamic array
    // anywhere in the module has cuobjdump report 1 KB of shared memory on every kernel of it
    __shared__ __align__(16) unsigned char g1_sm[FOLD ? KVQ_HQX_FOLD_SMEM : 16];
    if constexpr (FOLD) { // waits for the kernel before, as below
        g1_fold_prep<WB>(P, fp, F, g1_sm, L);
    } else {
        asm volatile("griddepcontrol.wait;" ::: "memory");
    }
    // use cursor: the row's part and local row, the step, its escape range, the two sums per token
    uint32_t urow = gw, us = 0, ur = 0, e0 = 0, e1 = 0;
    int up = 0;
    float a0[NT], a1[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) a0[t] = a1[t] = 0.0f;
    // PF: each prefetched round's escape entry (one token: M·delta·code from the last step) and
    // its scale code, then the scale's bits (one token: scale·sx from the last step)
    static_assert(!PF || g1_esc_rounds(VB) > 0, "PF: at least one round");
    static_assert(!(PF && EB), "PF batches its rest itself");
    constexpr int PFR = PF ? g1_esc_rounds(VB) : 1;
    uint32_t pen[PFR], pcs[PFR];
#pragma unroll
    for (int k = 0; k < PFR; k++) pen[k] = pcs[k] = 0u;
    G1P dd;
    dd.codes = MODE == G1_E8;
    dd.m = M;
    dd.e8 = MODE == G1_E8;
    auto use = [&](int slot) {
        if (us == 0) {
            up = urow >= rb2 ? 2 : urow >= rb1 ? 1 : 0;
            ur = urow - (up == 2 ? rb2 : up == 1 ? rb1 : 0);
            e0 = __ldg(P.d[up].esc_row + ur); // used at the row's end or (PF) a step later
            e1 = __ldg(P.d[up].esc_row + ur + 1);
        }
        const Dev &d = P.d[up];
        const unsigned char *fs = FOLD ? g1_sm : P.fs[up]; // the activation: shared memory (FOLD) or the scratch
        const G1W<VB> &w = buf[slot];
        const uint32_t c = us * 16 + cl;
        if constexpr (NT == 1) { // the one-token loop as it was measured (issue 12's table)
            const int4 *xp = (const int4 *)(fs + L.xq + 16 * lane) + us * 64;
            const int4 v = ((const int4 *)(fs + L.s8) + (cl * 2 + h))[us * 32];
            G1X x;
            x.lo = xp[0];
            x.hi = xp[32];
            x.s01 = (int)__byte_perm((uint32_t)v.x, (uint32_t)v.y, 0x5410);
            x.s23 = (int)__byte_perm((uint32_t)v.z, (uint32_t)v.w, 0x5410);
            x.sx = ((const float *)(fs + L.sx))[((c * 64) >> tsh)];
            x.moff_sum = moff * (v.x + v.y + v.z + v.w);
            int D = g1_dot<VB>(dd, w, x, h);
            D += __shfl_xor_sync(0xffffffffu, D, 1);
            const float sc = MODE == G1_E8 ? __ldg(d.lut + w.code) : __uint_as_float(w.code);
            float a = us & 1 ? a1[0] : a0[0];
            a = fmaf(sc * x.sx, (float)D, a);
            if (MODE == G1_RTN && ((c * 64) & (P.d[0].T - 1)) == 0) {
                const uint32_t jt = (c * 64) >> tsh;
                a = fmaf(__ldg(d.zero + (size_t)ur * tiles + jt), ((const float *)(fs + L.xs))[jt], a);
            }
            if (us & 1) a1[0] = a;
            else a0[0] = a;
        }
        const float sc = MODE == G1_E8 ? __ldg(d.lut + w.code) : __uint_as_float(w.code);
        uint32_t u[8];
        if constexpr (NT > 1) g1_words<VB>(w, u);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (NT == 1 || t >= nt) break;
            const unsigned char *ft = fs + (size_t)t * lst;
            const int4 *xp = (const int4 *)(ft + L.xq + 16 * lane) + us * 64;
            const int4 v = ((const int4 *)(ft + L.s8) + (cl * 2 + h))[us * 32];
            G1X x;
            x.lo = xp[0];
            x.hi = xp[32];
            x.s01 = (int)__byte_perm((uint32_t)v.x, (uint32_t)v.y, 0x5410);
            x.s23 = (int)__byte_perm((uint32_t)v.z, (uint32_t)v.w, 0x5410);
            x.sx = ((const float *)(ft + L.sx))[((c * 64) >> tsh)];
            x.moff_sum = moff * (v.x + v.y + v.z + v.w);
            int D = g1_dotu(dd, u, w.cb, x, h);
            D += __shfl_xor_sync(0xffffffffu, D, 1);
            float a = us & 1 ? a1[t] : a0[t];
            a = fmaf(sc * x.sx, (float)D, a);
            if (MODE == G1_RTN && ((c * 64) & (P.d[0].T - 1)) == 0) {
                const uint32_t jt = (c * 64) >> tsh;
                a = fmaf(__ldg(d.zero + (size_t)ur * tiles + jt), ((const float *)(ft + L.xs))[jt], a);
            }
            if (us & 1) a1[t] = a;
            else a0[t] = a;
        }
        if constexpr (PF) { // the stages
            // the entry at S − 4, but not at step 0 (the range e0, e1 loads there: waiting on
            // it would stall every row's start, as the 2026-11-26 attempt did), then a stage a
            // step, the last ones together at S − 1
            const uint32_t ka = S >= 5 ? S - 4 : S >= 2 ? 1 : 0, kb = min(ka + 1, S - 1), kc = min(kb + 1, S - 1);
#pragma unroll
            for (int k = 0; k < PFR; k++) {
                const uint32_t e = e0 + 32 * k + lane;
                if (e >= e1) continue;
                if (us == ka) pen[k] = kvq_hqx_esc_at(d, ur, e); // the entry
                const uint32_t col = kvq_hqx_esc_col(pen[k]), jt = col >> tsh;
                if (us == kb) { // the tile's scale code (E8) or scale (RTN)
                    const size_t tix = (size_t)ur * tiles + jt;
                    pcs[k] = MODE == G1_E8 ? (uint32_t)__ldg(d.scode + tix) : __float_as_uint(__ldg(d.scale + tix));
                }
                if (MODE == G1_E8 && us == kc) pcs[k] = __float_as_uint(__ldg(d.lut + pcs[k])); // the table
                if (NT == 1 && us == S - 1) { // one token: the fmaf's two operands (activation: L1 or shared memory)
                    const float sxj = ((const float *)(fs + L.sx))[jt];
                    const int xqc = (int)((const int8_t *)(fs + L.xq))[kvq_gemv1_xq_at(col)];
                    pcs[k] = __float_as_uint(__uint_as_float(pcs[k]) * sxj);
                    pen[k] = (uint32_t)(M * kvq_hqx_esc_delta(pen[k]) * xqc);
                }
            }
        }
        if (++us < S) return;
        // the row's end, per token: lane L takes pair L's acc[0] (L < 16) or pair L − 16's acc[1]
        const int src = 2 * (lane & 15);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (NT > 1 && t >= nt) break;
            const unsigned char *ft = fs + (size_t)t * lst;
            const float b0 = __shfl_sync(0xffffffffu, a0[t], src), b1 = __shfl_sync(0xffffffffu, a1[t], src);
            float r = lane < 16 ? b0 : b1;
            const float *sx = (const float *)(ft + L.sx);
            const int8_t *xq = (const int8_t *)(ft + L.xq);
            uint32_t e = e0 + lane;
            if constexpr (PF) { // the prefetched rounds: the loop below's first PFR iterations
#pragma unroll
                for (int k = 0; k < PFR; k++, e += 32) {
                    if (e >= e1) continue;
                    const float scl = __uint_as_float(pcs[k]);
                    if constexpr (NT == 1) {
                        r = fmaf(scl, (float)(int)pen[k], r); // scl·sx[jt] and M·delta·code, formed at step S − 1
                    } else {
                        const uint32_t col = kvq_hqx_esc_col(pen[k]);
                        r = fmaf(scl * sx[col >> tsh], (float)(M * kvq_hqx_esc_delta(pen[k]) * (int)xq[kvq_gemv1_xq_at(col)]), r);
                    }
                }
            }
            r = g1_esc_rest<MODE, PF || EB, PF>(d, ur, e, e1, lane, tiles, tsh, sx, xq, r);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
            float *y = P.y[up] + (size_t)t * ldy + ur;
            if (lane == 0) *y = accumulate ? __fadd_rn(*y, r) : r;
            a0[t] = a1[t] = 0.0f;
        }
        us = 0;
        urow += W;
    };
    for (uint32_t i = 0; i < n_items; i += DEPTH) {
#pragma unroll
        for (int j = 0; j < DEPTH; j++) {
            if (i + j >= n_items) break;
            if (i + j + DEPTH - 1 < n_items) load((j + DEPTH - 1) % DEPTH);
            use(j);
        }
    }
}

// ---- The lean one-token product (issue 12, session 24): hqx_gemv1p_k's E8 one-token case at
// widths 4 and 5 with fewer instructions a step. Nsight Compute on the H200 (session 23) had the
// persistent kernel issue-bound at ~200 warp instructions a (row, 1024-column step) for 16 bytes
// a lane, of which 10 are dot products: its (row, step) cursors re-derive every address from the
// part's parameters each step (constant-bank loads by a run-time part index, 64-bit products,
// branches at row starts), and the two sums alternate through selects. Here a warp walks its rows
// in order and a row's steps in pairs (rows of an even number of steps: cols_p % 2048 == 0): the
// loads of a row come from three pointers formed at its start and advanced by constant strides,
// the activation from pointers formed per row (shared memory in the fold), step 2k adds into a0
// and 2k + 1 into a1 by position, and the next row's first step is loaded during the row's last
// pair (the ring of 2 as before: one step in flight while one is multiplied). The high nibbles
// are multiplied in place at width 4 (dp4a of unsigned bytes 16·u by the signed codes; the sum is
// 16 times the high nibbles' and is shifted back exactly), so a 4-byte word costs two LOP3s, not
// three instructions; width 5 merges its plane bits as g1_dot does. The integer sums, their float order and the row end (g1_esc_rest) are
// hqx_gemv1p_k's: the same bits. KVQ_CUDA_G1S=0 (kvq_cuda_hqx_set_lean(0)) keeps hqx_gemv1p_k.
__device__ __forceinline__ int g1s_dp4a_us(uint32_t a, int b, int c) { // Σ (unsigned byte of a)·(signed byte of b) + c
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// One step's weights for a lane: 32 nibbles, (width 5) its half of the chunk's plane word, the
// chunk's coset byte, the tile's scale code.
struct G1S {
    uint4 q;
    uint32_t hb, cb, code;
};
template <int VB>
__device__ __forceinline__ void g1s_ld(G1S &w, const uint8_t *q, const uint8_t *hb, const uint8_t *cb, const uint8_t *sc) {
    w.q = g1_ld16(q);
    if constexpr (VB == 5) w.hb = g1_ld4(hb);
    w.cb = (uint32_t)__ldg(cb);
    w.code = (uint32_t)__ldg(sc);
}

// a + the step's float term: ⟨c, x⟩ of the lane pair's chunk (integer, exact: g1_dot's sums),
// times the tile's scale and the activation tile's scale, as hqx_gemv1p_k adds it. xp: the lane's
// int8 codes of the step (lo nibbles at xp[0], hi at xp[32]); vp: its four 8-vector sums; sxp:
// its tile's activation scale. Width 5: u = nibble | plane bit << 4 as g1_dot forms it.
template <int VB>
__device__ __forceinline__ float g1s_step(const G1S &w, const int4 *xp, const int4 *vp, const float *sxp, const float *lut,
                                          int moff, int h, float a) {
    const int4 lo = xp[0], hi = xp[32], v = vp[0];
    const float sx = sxp[0];
    int dot;
    if constexpr (VB == 4) {
        int dl = __dp4a((int)(w.q.x & 0x0F0F0F0Fu), lo.x, 0), dh = g1s_dp4a_us(w.q.x & 0xF0F0F0F0u, hi.x, 0);
        dl = __dp4a((int)(w.q.y & 0x0F0F0F0Fu), lo.y, dl), dh = g1s_dp4a_us(w.q.y & 0xF0F0F0F0u, hi.y, dh);
        dl = __dp4a((int)(w.q.z & 0x0F0F0F0Fu), lo.z, dl), dh = g1s_dp4a_us(w.q.z & 0xF0F0F0F0u, hi.z, dh);
        dl = __dp4a((int)(w.q.w & 0x0F0F0F0Fu), lo.w, dl), dh = g1s_dp4a_us(w.q.w & 0xF0F0F0F0u, hi.w, dh);
        dot = dl + (dh >> 4); // dh = 16·Σ u_hi·x exactly
    } else {
        const uint32_t P[1] = {w.hb};
        dot = 0;
#define G1S_K(K, R, XL, XH)                                                                      \
        dot = __dp4a((int)g1_u<1, K, 0>((R) & 0x0F0F0F0Fu, P), XL, dot);                         \
        dot = __dp4a((int)g1_u<1, K, 1>(((R) >> 4) & 0x0F0F0F0Fu, P), XH, dot);
        G1S_K(0, w.q.x, lo.x, hi.x) G1S_K(1, w.q.y, lo.y, hi.y) G1S_K(2, w.q.z, lo.z, hi.z) G1S_K(3, w.q.w, lo.w, hi.w)
#undef G1S_K
    }
    int D = 2 * dot - moff * (v.x + v.y + v.z + v.w);
    const uint32_t b = (w.cb >> (2 * h)) & 0x33u, b4 = (b | (b >> 2)) & 15u; // the coset bits as 0/1 bytes
    const uint32_t sel = (b4 * 0x00204081u) & 0x01010101u;
    D = __dp2a_lo((int)__byte_perm((uint32_t)v.x, (uint32_t)v.y, 0x5410), (int)sel, D);
    D = __dp2a_hi((int)__byte_perm((uint32_t)v.z, (uint32_t)v.w, 0x5410), (int)sel, D);
    D += __shfl_xor_sync(0xffffffffu, D, 1);
    return fmaf(__ldg(lut + w.code) * sx, (float)D, a);
}

// Rows prefetched into L2 before a lean kernel's wait (pf_rows, kvq_cuda_hqx_set_lean_pf): while a
// block waits for the kernel before it (griddepcontrol.wait: that kernel's tail, under PDL) and
// prepares its activation (the fold), nothing streams but each warp's first step. Here each warp
// first asks for its first pf_rows rows' nibbles and plane words whole (cp.async.bulk.prefetch.L2:
// one instruction a region, no completion to wait for) and their coset bytes and scale codes (a
// line prefetch a lane); its loop then finds them in L2. A hint: the results are the same bits.
// Measured slower (session 24 call C, H200, 8B E8 4.0 decode, alternated twice): 0 rows 386.9 /
// 380.8 tok/s, 1 row 366.4 / 373.2, 2 rows 366.9 / 364.8, 4 rows 355.4 / 363.0 — off by default.
template <int VB>
__device__ __forceinline__ void g1s_prefetch(const Parts &P, uint32_t row, uint32_t W, uint32_t rend, int pf_rows, uint32_t rb1,
                                             uint32_t rb2, uint32_t cpr, uint32_t tiles, int lane) {
    for (int i = 0; i < pf_rows && row < rend; i++, row += W) {
        const int p = row >= rb2 ? 2 : row >= rb1 ? 1 : 0;
        const uint32_t r = row - (p == 2 ? rb2 : p == 1 ? rb1 : 0);
        const Dev &d = P.d[p];
        if (lane == 0) // 32·cpr bytes, cpr a multiple of 32 (whole pairs of steps): 16-byte multiples from 16-byte offsets
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(d.q + (size_t)r * cpr * 32), "r"(cpr * 32) : "memory");
        if (VB == 5 && lane == 1)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(d.hb + (size_t)r * cpr), "r"(cpr * 8) : "memory");
        const uint8_t *cb = d.cb + (size_t)r * cpr, *sc = d.scode + (size_t)r * tiles;
        if ((uint32_t)lane * 128 < cpr) asm volatile("prefetch.global.L2 [%0];" ::"l"(cb + lane * 128));
        if ((uint32_t)lane * 128 < tiles) asm volatile("prefetch.global.L2 [%0];" ::"l"(sc + lane * 128));
    }
}

// SC: the row's steps S when known at compile time (g1s_kernel: 4 for rows of 4096 columns, where the instance
// keeps to registers), 0 from cols_p — the loop then unrolls whole and the loads address from the row's pointers by
// constants (no pointer increments, no ring moves); the same loads and sums in the same order, so the same bits.
// (14 steps, the 8B's down rows, spilled at 64 registers whole or unrolled by 2 pairs, ptxas 13.0; with a compiler
// barrier after each pair they did not, and ran 9 % fewer instructions but no faster: docs/results/s28/sc14.patch.)
template <int VB, bool FOLD, bool EB, int SC = 0>
__global__ void __launch_bounds__(FOLD ? KVQ_HQX_FOLD_WARPS * 32 : G1_WARPS * 32, FOLD ? 1 : G1N_MINB(VB, 2, 1))
    hqx_gemv1s_k(const __grid_constant__ Parts P, int accumulate, uint32_t rb1, uint32_t rb2, uint32_t rtot, int pf_rows, int64_t ldy,
                 uint32_t lst, int trig, const G1F F) { // (hqx_gemv1p_k's signature; one token: pf_rows in its nt, ldy and lst unused)
    constexpr int WB = FOLD ? KVQ_HQX_FOLD_WARPS : G1_WARPS;
    if (trig) asm volatile("griddepcontrol.launch_dependents;");
    const int lane = threadIdx.x & 31, h = lane & 1, cl = lane >> 1;
    uint32_t gw, W, rend;
    int fp;
    g1_walk<FOLD, WB>(F, rb1, rb2, rtot, gw, W, rend, fp);
    const uint32_t cpr = SC ? 16u * SC : (uint32_t)(P.d[0].cols_p / 64), tsh = __ffs(P.d[0].T) - 1,
                   tiles = SC ? (uint32_t)(1024u * SC) >> tsh : (uint32_t)(P.d[0].cols_p >> tsh), S = SC ? SC : cpr / 16,
                   tps = 1024u >> tsh;
    const Lay L = lay(P.d[0].cols_p, P.d[0].T, 1);
    const int moff = 2 * P.d[0].off;
    // the load pointers of a row: its lane's nibbles, plane words, coset bytes and scale codes at step 0
    const uint8_t *lq = NULL, *lhb = NULL, *lcb = NULL, *lsc = NULL;
    // the fold's block serves part fp alone (kvq_hqx_fold_rows): its part and first row found once
    const uint32_t fb = FOLD ? (fp == 2 ? rb2 : fp == 1 ? rb1 : 0) : 0;
    auto at_row = [&](uint32_t row) {
        const int p = FOLD ? fp : row >= rb2 ? 2 : row >= rb1 ? 1 : 0;
        const uint32_t r = row - (FOLD ? fb : p == 2 ? rb2 : p == 1 ? rb1 : 0);
        const Dev &d = P.d[p];
        lq = d.q + (size_t)(r * cpr + cl) * 32 + 16 * h;
        if constexpr (VB == 5) lhb = (const uint8_t *)(d.hb + (r * cpr + cl)) + 4 * h;
        lcb = d.cb + (r * cpr + cl);
        lsc = d.scode + (r * tiles + ((uint32_t)(cl * 64) >> tsh));
    };
    G1S b0, b1;
    if (gw < rend) {
        at_row(gw);
        g1s_ld<VB>(b0, lq, lhb, lcb, lsc);
    }
    if (pf_rows > 0) g1s_prefetch<VB>(P, gw, W, rend, pf_rows, rb1, rb2, cpr, tiles, lane);
    __shared__ __align__(16) unsigned char g1_sm[FOLD ? KVQ_HQX_FOLD_SMEM : 16];
    if constexpr (FOLD) {
        g1_fold_prep<WB>(P, fp, F, g1_sm, L);
    } else {
        asm volatile("griddepcontrol.wait;" ::: "memory");
    }
    for (uint32_t row = gw; row < rend; row += W) {
        const int up = FOLD ? fp : row >= rb2 ? 2 : row >= rb1 ? 1 : 0;
        const uint32_t ur = row - (FOLD ? fb : up == 2 ? rb2 : up == 1 ? rb1 : 0);
        const Dev &d = P.d[up];
        const uint32_t e0 = __ldg(d.esc_row + ur), e1 = __ldg(d.esc_row + ur + 1);
        const float *lut = d.lut;
        const unsigned char *fs = FOLD ? g1_sm : P.fs[up];
        const int4 *xp = (const int4 *)(fs + L.xq + 16 * lane), *vp = (const int4 *)(fs + L.s8) + (cl * 2 + h);
        const float *sxp = (const float *)(fs + L.sx) + ((uint32_t)(cl * 64) >> tsh);
        float a0 = 0.0f, a1 = 0.0f;
        // the pairs before the last: steps s, s + 1 from b0, b1, step s + 2 loaded into b0
#define G1S_PAIR                                                                                 \
            g1s_ld<VB>(b1, lq + 512, lhb + 128, lcb + 16, lsc + tps);                              \
            a0 = g1s_step<VB>(b0, xp, vp, sxp, lut, moff, h, a0);                                    \
            lq += 1024, lcb += 32, lsc += 2 * tps;                                                   \
            if constexpr (VB == 5) lhb += 256;                                                       \
            g1s_ld<VB>(b0, lq, lhb, lcb, lsc);                                                       \
            a1 = g1s_step<VB>(b1, xp + 64, vp + 32, sxp + tps, lut, moff, h, a1);                    \
            xp += 128, vp += 64, sxp += 2 * tps;
        if constexpr (SC > 0) {
#pragma unroll
            for (int s = 0; s + 2 < SC; s += 2) { G1S_PAIR }
        } else {
            for (uint32_t s = 0; s + 2 < S; s += 2) { G1S_PAIR }
        }
#undef G1S_PAIR
        // the last pair, with the next row's first step loaded into b0
        g1s_ld<VB>(b1, lq + 512, lhb + 128, lcb + 16, lsc + tps);
        a0 = g1s_step<VB>(b0, xp, vp, sxp, lut, moff, h, a0);
        if (row + W < rend) {
            at_row(row + W);
            g1s_ld<VB>(b0, lq, lhb, lcb, lsc);
        }
        a1 = g1s_step<VB>(b1, xp + 64, vp + 32, sxp + tps, lut, moff, h, a1);
        // the row's end, as hqx_gemv1p_k's: lane L takes pair L's a0 (L < 16) or pair L − 16's a1
        const int src = 2 * (lane & 15);
        const float c0 = __shfl_sync(0xffffffffu, a0, src), c1 = __shfl_sync(0xffffffffu, a1, src);
        float r = lane < 16 ? c0 : c1;
        r = g1_esc_rest<G1_E8, EB, false>(d, ur, e0 + lane, e1, lane, tiles, tsh, (const float *)(fs + L.sx),
                                          (const int8_t *)(fs + L.xq), r);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
        float *y = P.y[up] + ur;
        if (lane == 0) *y = accumulate ? __fadd_rn(*y, r) : r;
    }
}

// A launch of G1_WARPS-warp blocks on the library's stream; pdl: as a programmatic dependent of
// the kernel before it (at: the attribute's storage, alive until the launch).
static cudaLaunchConfig_t g1_cfg(dim3 grid, int pdl, cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(G1_WARPS * 32);
    cfg.stream = kvq_cuda_stream();
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cfg;
}

extern "C" void kvq_cuda_hqx_set_persist(int depth);
static int g_trig = -1; // KVQ_CUDA_G1TRIG: the persistent kernel lets the kernel after launch at its start
extern "C" void kvq_cuda_hqx_set_trig(int on) {
    if (on < 0) {
        const char *e = getenv("KVQ_CUDA_G1TRIG");
        on = !(e && *e == '0');
    }
    g_trig = on ? 1 : 0;
}
// KVQ_CUDA_ESC_PF=1: the persistent kernel fetches a row's first escapes during its steps; 2: the row end's
// escapes in batches (EB); 0: a chain a round. Unset (3): 2 at width 4, 0 at the wider widths — measured on the
// H100 (session 20 call A, 8B E8 4.0 decode, alternated): width 4 309.7 / 306.3 tok/s with 2 against 292.8 / 290.2
// with 0; the wider widths keep 0 until measured.
static int g_esc_pf = -1;
extern "C" void kvq_cuda_hqx_set_esc_pf(int on) {
    if (on < 0) {
        const char *e = getenv("KVQ_CUDA_ESC_PF");
        on = e && e[0] >= '0' && e[0] <= '2' && !e[1] ? e[0] - '0' : 3;
    }
    g_esc_pf = on == 3 ? 3 : on == 2 ? 2 : on ? 1 : 0;
}
// The escape mode of width VB's instances (resolves the default).
template <int VB> static int esc_mode() {
    if (g_esc_pf < 0) kvq_cuda_hqx_set_esc_pf(-1);
    return g_esc_pf == 3 ? (VB == 4 ? 2 : 0) : g_esc_pf;
}
// The lean one-token kernel (hqx_gemv1s_k) for E8 width-4 and -5 parts with rows of an even number of
// steps, one token, a ring of 2, escapes batched or chained (not prefetched): 1 (default;
// KVQ_CUDA_G1S=0 sets 0), 0 hqx_gemv1p_k; -1 the environment's. The same bits either way.
static int g_lean = -1, g_lean_pf = 0;
extern "C" void kvq_cuda_hqx_set_lean(int on) {
    if (on < 0) {
        const char *e = getenv("KVQ_CUDA_G1S");
        on = !(e && e[0] == '0' && !e[1]);
    }
    g_lean = on ? 1 : 0;
}
// Rows each warp of a lean launch prefetches into L2 before its wait (g1s_prefetch): 0..8, or -1 the
// environment's (KVQ_CUDA_G1PF=n), else 0.
extern "C" void kvq_cuda_hqx_set_lean_pf(int rows) {
    if (rows < 0) {
        const char *e = getenv("KVQ_CUDA_G1PF");
        rows = e && e[0] >= '0' && e[0] <= '8' && !e[1] ? e[0] - '0' : 0;
    }
    g_lean_pf = rows > 8 ? 8 : rows;
}
static long g_lean_n = 0; // lean launches (tests)
extern "C" long kvq_cuda_hqx_lean_launches(void) { return g_lean_n; }
static int g1s_takes(const Parts &P, int em) {
    if (g_lean < 0) kvq_cuda_hqx_set_lean(-1), kvq_cuda_hqx_set_lean_pf(-1);
    const int on = g_lean && em != 1 && P.d[0].cols_p % 2048 == 0;
    g_lean_n += on;
    return on;
}
// The lean kernel's compile-time step count (hqx_gemv1s_k's SC): 4 for rows of 4096 columns (the Llama-3-8B q/k/v,
// o and gate/up), else 0 (the run-time count), as with KVQ_CUDA_G1SC=0 (checked by the backend;
// kvq_cuda_hqx_set_lean_sc: 0 off, 1 on, -1 the environment's). The same bits either way.
static int g_lean_sc = -1;
extern "C" void kvq_cuda_hqx_set_lean_sc(int on) {
    if (on < 0) {
        const char *e = getenv("KVQ_CUDA_G1SC");
        on = !(e && e[0] == '0' && !e[1]);
    }
    g_lean_sc = on ? 1 : 0;
}
static long g_lean_sc_n = 0; // lean launches with a compile-time step count (tests)
extern "C" long kvq_cuda_hqx_lean_sc_launches(void) { return g_lean_sc_n; }
typedef void (*g1s_fn)(const Parts, int, uint32_t, uint32_t, uint32_t, int, int64_t, uint32_t, int, const G1F);
// Whether an instance runs without local memory (ptxas kept the unrolled row in registers; found once an
// instance): an instance that spills is not taken.
static int g1s_regs_only(g1s_fn k, int *cache) {
    if (*cache < 0) {
        cudaFuncAttributes fa;
        *cache = cudaFuncGetAttributes(&fa, k) == cudaSuccess && fa.localSizeBytes == 0;
    }
    return *cache;
}
// The lean instance for escape mode em (2: batched row end) and rows of cols_p columns; *sci: 1 with the compile-time
// step count, else 0 (the occupancy caches' index).
template <int VB, bool FOLD> static g1s_fn g1s_kernel(int em, int64_t cols_p, int *sci) {
    if (g_lean_sc < 0) kvq_cuda_hqx_set_lean_sc(-1);
    static int ok[2] = {-1, -1}; // [em == 2]
    const int eb = em == 2;
    g1s_fn k = eb ? hqx_gemv1s_k<VB, FOLD, true> : hqx_gemv1s_k<VB, FOLD, false>;
    *sci = 0;
    if (g_lean_sc && cols_p == 4096) {
        g1s_fn k4 = eb ? hqx_gemv1s_k<VB, FOLD, true, 4> : hqx_gemv1s_k<VB, FOLD, false, 4>;
        if (g1s_regs_only(k4, &ok[eb])) k = k4, *sci = 1;
    }
    g_lean_sc_n += *sci != 0;
    return k;
}
static int g_persist = -1; // KVQ_CUDA_G1P: 0 off, 2, 3 or 4: the ring's depth (default 2)
static int g_sm_count = 0;

// The tokens of a persistent launch: nt of them at layout stride lst, outputs ldy apart.
struct G1T {
    int nt;
    int64_t ldy;
    uint32_t lst;
};

template <int VB, int DEPTH, int MODE, int NT> static cudaError_t g1p_launch_f(cudaLaunchConfig_t cfg, const Parts &P, int accumulate,
                                                                               uint32_t rb1, uint32_t rb2, uint32_t rtot,
                                                                               const G1T &tk) {
    const int em = esc_mode<VB>();
    constexpr bool pf = g1_esc_rounds(VB) > 0; // (false: both the same instance)
    auto k = em == 2 ? hqx_gemv1p_k<VB, DEPTH, MODE, NT, false, false, pf>
             : em    ? hqx_gemv1p_k<VB, DEPTH, MODE, NT, false, pf>
                     : hqx_gemv1p_k<VB, DEPTH, MODE, NT, false, false>;
    int lean = 0, sci = 0;
    if constexpr ((VB == 4 || VB == 5) && DEPTH == 2 && MODE == G1_E8 && NT == 1)
        if ((lean = g1s_takes(P, em))) k = g1s_kernel<VB, false>(em, P.d[0].cols_p, &sci);
    static int occs[9] = {0};
    int &occ = occs[em + 3 * (lean + sci)];
    if (!occ) {
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, G1_WARPS * 32, 0);
        if (occ < 1) occ = 1;
    }
    const int64_t need = (rtot + G1_WARPS - 1) / G1_WARPS, cap = (int64_t)g_sm_count * occ;
    cfg.gridDim = dim3((unsigned)(need < cap ? need : cap));
    if (g_trig < 0) kvq_cuda_hqx_set_trig(-1);
    return cudaLaunchKernelEx(&cfg, k, P, accumulate, rb1, rb2, rtot, lean ? g_lean_pf : tk.nt, tk.ldy, tk.lst, g_trig, G1F{});
}
template <int VB, int MODE> static cudaError_t g1p_launch(const cudaLaunchConfig_t &cfg, const Parts &P, int accumulate,
                                                          uint32_t rb1, uint32_t rb2, uint32_t rtot, const G1T &tk) {
    if (tk.nt > 4) return g1p_launch_f<VB, 2, MODE, 8>(cfg, P, accumulate, rb1, rb2, rtot, tk);
    if (tk.nt > 2) return g1p_launch_f<VB, 2, MODE, 4>(cfg, P, accumulate, rb1, rb2, rtot, tk);
    if (tk.nt > 1) return g1p_launch_f<VB, 2, MODE, 2>(cfg, P, accumulate, rb1, rb2, rtot, tk);
    return g_persist == 4   ? g1p_launch_f<VB, 4, MODE, 1>(cfg, P, accumulate, rb1, rb2, rtot, tk)
           : g_persist == 3 ? g1p_launch_f<VB, 3, MODE, 1>(cfg, P, accumulate, rb1, rb2, rtot, tk)
                            : g1p_launch_f<VB, 2, MODE, 1>(cfg, P, accumulate, rb1, rb2, rtot, tk);
}
template <int VB> static cudaError_t g1p_launch_w(const cudaLaunchConfig_t &cfg, int mode, const Parts &P, int accumulate,
                                                  uint32_t rb1, uint32_t rb2, uint32_t rtot, const G1T &tk) {
    return mode == G1_E8 ? g1p_launch<VB, G1_E8>(cfg, P, accumulate, rb1, rb2, rtot, tk)
                         : g1p_launch<VB, G1_RTN>(cfg, P, accumulate, rb1, rb2, rtot, tk);
}

// The parts of P of value width vb, in order, as Q (their fs and y with them) and their rows in rows[0..MAXP)
// (0 after the last): the persistent and folded launches take one width a launch.
static void parts_of_width(const Parts &P, int vb, Parts &Q, int64_t *rows) {
    Q = P;
    int n = 0;
    for (int p = 0; p < MAXP; p++) rows[p] = 0;
    for (int p = 0; p < P.n; p++) {
        if (P.d[p].vbits != vb) continue;
        Q.d[n] = P.d[p];
        Q.fs[n] = P.fs[p];
        Q.y[n] = P.y[p];
        rows[n++] = P.d[p].rows;
    }
    Q.n = n;
}

// Whether the persistent launch takes the parts of width vb (all of mode, equal cols_p and tile).
static int g1p_applies(const Parts &P, int vb, int mode) {
    if (g_persist < 0) kvq_cuda_hqx_set_persist(-1);
    if (!g_persist || mode == G1_ANY || g_rw > 1) return 0;
    int64_t tot = 0;
    for (int p = 0; p < P.n; p++) {
        if (P.d[p].vbits != vb) continue;
        if (P.d[p].cols_p != P.d[0].cols_p || P.d[p].T != P.d[0].T) return 0;
        tot += P.d[p].rows;
    }
    return tot * (P.d[0].cols_p / 64) < ((int64_t)1 << 32); // 32-bit chunk indices
}

// The persistent launch of the parts of width vb for the tokens tk; 0 if it does not apply
// (the caller launches the per-warp kernel).
static int g1p_try(const Parts &P, int vb, int mode, int accumulate, int pdl, const G1T &tk, cudaError_t *e) {
    if (!g1p_applies(P, vb, mode)) return 0; // (every part of width vb has part 0's cols_p and tile)
    Parts Q;
    int64_t rows[MAXP];
    parts_of_width(P, vb, Q, rows);
    const int64_t tot = rows[0] + rows[1] + rows[2];
    const uint32_t rb1 = (uint32_t)rows[0], rb2 = rb1 + (uint32_t)rows[1], rtot = (uint32_t)tot;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = g1_cfg(dim3(1), pdl, &at); // the grid: g1p_launch_f
    switch (vb) {
    case 4: *e = g1p_launch_w<4>(cfg, mode, Q, accumulate, rb1, rb2, rtot, tk); break;
    case 5: *e = g1p_launch_w<5>(cfg, mode, Q, accumulate, rb1, rb2, rtot, tk); break;
    case 6: *e = g1p_launch_w<6>(cfg, mode, Q, accumulate, rb1, rb2, rtot, tk); break;
    case 7: *e = g1p_launch_w<7>(cfg, mode, Q, accumulate, rb1, rb2, rtot, tk); break;
    default: *e = g1p_launch_w<8>(cfg, mode, Q, accumulate, rb1, rb2, rtot, tk); break;
    }
    return 1;
}


extern "C" void kvq_cuda_hqx_set_decode(int rows_per_warp) { g_rw = rows_per_warp; }
extern "C" void kvq_cuda_hqx_set_decode_general(int on) { g_mode_any = on; }
extern "C" void kvq_cuda_hqx_set_persist(int depth) {
    if (depth < 0) {
        const char *ev = getenv("KVQ_CUDA_G1P");
        depth = ev && *ev == '0' ? 0 : ev && *ev == '4' ? 4 : ev && *ev == '3' ? 3 : 2;
    }
    g_persist = depth == 4 || depth == 3 || depth == 2 ? depth : 0;
    if (!g_sm_count) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&g_sm_count, cudaDevAttrMultiProcessorCount, dev);
    }
    if (g_sm_count < 1) g_persist = 0;
}

// The branch-free variant every part of width vb takes: E8 with scale codes and whole steps, or
// RTN with float scales, zero points and whole steps; else G1_ANY.
static int g1_mode(const Parts &P, int vb) {
    bool e8 = true, rtn = true;
    for (int p = 0; p < P.n; p++) {
        if (P.d[p].vbits != vb) continue;
        const Dev &d = P.d[p];
        if (!(d.e8 && d.scode && d.cols_p % 1024 == 0)) e8 = false;
        if (!(!d.rotate && !d.e8 && d.m == 1 && !d.scode && d.scale && d.zero && d.cols_p % 1024 == 0)) rtn = false;
    }
    return g_mode_any ? G1_ANY : e8 ? G1_E8 : rtn ? G1_RTN : G1_ANY;
}

static int g_tokens = -1; // KVQ_CUDA_G1N=0: several tokens go to hqx_fused.cu's batched kernel

extern "C" void kvq_cuda_hqx_set_tokens(int on) { g_tokens = on < 0 ? -1 : on != 0; }

int kvq_cuda_hqx_gemv1_tokens_ok(const Parts &P) {
    if (g_tokens < 0) g_tokens = !(getenv("KVQ_CUDA_G1N") && *getenv("KVQ_CUDA_G1N") == '0');
    if (!g_tokens) return 0;
    for (int p = 0; p < P.n; p++) {
        if (P.d[p].rows * P.d[p].cols_p >= ((int64_t)1 << 32) || (P.d[p].T & (P.d[p].T - 1))) return 0;
        if (!g1p_applies(P, P.d[p].vbits, g1_mode(P, P.d[p].vbits))) return 0;
    }
    return 1;
}

kvq_status kvq_cuda_hqx_gemv1_tokens(Parts &P, int nt, int64_t ldy, int accumulate, int pdl, kvq_err *err) {
    if (nt < 1 || nt > 16 || !kvq_cuda_hqx_gemv1_tokens_ok(P))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: the one-token product for %d tokens does not take these parts", nt);
    // 3..16 tokens on tensor cores where they take the parts (hqx_mma.cu; 2 tokens measured faster here)
    if (nt >= kvq_cuda_hqx_mma_min() && kvq_cuda_hqx_mma_ok(P)) return kvq_cuda_hqx_mma_tokens(P, nt, ldy, accumulate, pdl, err);
    if (nt > 8) return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: %d tokens: the several-token loop takes at most 8", nt);
    const G1T tk = {nt, ldy, (uint32_t)lay(P.d[0].cols_p, P.d[0].T, 1).total};
    unsigned done = 0;
    for (int p0 = 0; p0 < P.n; p0++) {
        const int vb = P.d[p0].vbits;
        if (done & (1u << vb)) continue;
        done |= 1u << vb;
        cudaError_t pe = cudaSuccess;
        if (!g1p_try(P, vb, g1_mode(P, vb), accumulate, pdl && p0 == 0, tk, &pe))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: the several-token product does not take a part");
        if (pe != cudaSuccess) return cu_fail(err, pe, "launch hqx_gemv1 (persistent, several tokens)");
        CU_LAUNCHED("hqx_gemv1p tokens");
    }
    return KVQ_OK;
}

kvq_status kvq_cuda_hqx_gemv1(Parts &P, int accumulate, int pdl, kvq_err *err) {
    for (int p = 0; p < P.n; p++) {
        if (P.d[p].rows * P.d[p].cols_p >= ((int64_t)1 << 32) || (P.d[p].T & (P.d[p].T - 1)))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: %lld x %lld, tile %d: the one-token product takes "
                               "tensors below 2^32 padded weights and power-of-two tiles",
                               (long long)P.d[p].rows, (long long)P.d[p].cols_p, P.d[p].T);
    }
    // one row a warp: within a few % of 2 or 4 on the large shapes, faster on small and
    // tall-thin ones (docs/results/gpu_runtime.md)
    const int rw = g_rw == 2 || g_rw == 4 ? g_rw : 1;
    // one launch per value width among the parts (q/k/v may differ); only the first follows
    // the preparation kernel directly
    unsigned done = 0;
    for (int p0 = 0; p0 < P.n; p0++) {
        const int vb = P.d[p0].vbits;
        if (done & (1u << vb)) continue;
        done |= 1u << vb;
        Parts Q = P;
        int max_nb = 1;
        const int mode = g1_mode(P, vb);
        cudaError_t pe = cudaSuccess;
        if (g1p_try(P, vb, mode, accumulate, pdl && p0 == 0, G1T{1, 0, 0}, &pe)) {
            if (pe != cudaSuccess) return cu_fail(err, pe, "launch hqx_gemv1 (persistent)");
            CU_LAUNCHED("hqx_gemv1p");
            continue;
        }
        for (int p = 0; p < P.n; p++) {
            const int64_t groups = (P.d[p].rows + rw - 1) / rw;
            Q.nb[p] = P.d[p].vbits == vb ? (int)((groups + G1_WARPS - 1) / G1_WARPS) : 0;
            max_nb = Q.nb[p] > max_nb ? Q.nb[p] : max_nb;
        }
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = g1_cfg(dim3((unsigned)max_nb, (unsigned)P.n), pdl && p0 == 0, &at);
        cudaError_t e;
        switch (vb) {
        case 4: e = g1_launch<4>(cfg, rw, mode, Q, accumulate); break;
        case 5: e = g1_launch<5>(cfg, rw, mode, Q, accumulate); break;
        case 6: e = g1_launch<6>(cfg, rw, mode, Q, accumulate); break;
        case 7: e = g1_launch<7>(cfg, rw, mode, Q, accumulate); break;
        default: e = g1_launch<8>(cfg, rw, mode, Q, accumulate); break;
        }
        if (e != cudaSuccess) return cu_fail(err, e, "launch hqx_gemv1");
        CU_LAUNCHED("hqx_gemv1");
    }
    return KVQ_OK;
}

// ---- The fold (issue 12, 2026-11-27, session 16): the one-token product of an RMSNorm input
// (a decode step's q/k/v and gate/up products) prepares it itself, so no preparation kernel
// runs before it (hqx_prep_i8h: ~4.5 µs each on the H100, mostly launch and a grid's end).

static int g_fold = -1; // kvq_cuda_hqx_set_fold
static long g_fold_n = 0; // folded launches (tests)

extern "C" void kvq_cuda_hqx_set_fold(int mode) {
    if (mode < 0) {
        const char *e = getenv("KVQ_CUDA_FOLD"); // on unless "0" (session 17: +1.6 % decode on the 8B shape)
        mode = !(e && e[0] == '0' && !e[1]);
    }
    g_fold = mode > 0 ? mode : 0;
}

extern "C" long kvq_cuda_hqx_fold_launches(void) { return g_fold_n; }

int kvq_cuda_hqx_gemv1_fold_ok(const Parts &P, const float *x, const kvq_cuda_xin &xin) {
    if (g_fold < 0) kvq_cuda_hqx_set_fold(-1);
    if (g_persist < 0) kvq_cuda_hqx_set_persist(-1);
    if (!g_fold || g_persist != 2 || g_sm_count < MAXP || xin.kind != KVQ_CUDA_XIN_RMSNORM || !xin.w || (uintptr_t)x % 16)
        return 0;
    const Dev &d0 = P.d[0];
    if (!kvq_hqx_fold_smem(d0.cols, d0.cols_p, d0.T)) return 0;
    for (int p = 0; p < P.n; p++) {
        const Dev &d = P.d[p];
        if (d.cols != d0.cols || d.cols_p != d0.cols_p || d.T != d0.T) return 0;
        if (!g1p_applies(P, d.vbits, g1_mode(P, d.vbits))) return 0; // E8/RTN, whole steps, 32-bit chunk indices
    }
    return 1;
}

// The folded launch of parts Q (one value width; rows[p] rows each): one block an SM (what the
// occupancy calculator gives at the largest shared memory), at most g_fold of them when that
// is >= 3 (tests), split between the parts by kvq_hqx_fold_split.
template <int VB, int MODE>
static cudaError_t g1f_launch(cudaLaunchConfig_t cfg, const Parts &Q, int accumulate, const int64_t *rows, G1F F) {
    const int em = esc_mode<VB>();
    constexpr bool pf = g1_esc_rounds(VB) > 0;
    auto k = em == 2 ? hqx_gemv1p_k<VB, 2, MODE, 1, true, false, pf>
             : em    ? hqx_gemv1p_k<VB, 2, MODE, 1, true, pf>
                     : hqx_gemv1p_k<VB, 2, MODE, 1, true, false>;
    int lean = 0, sci = 0;
    if constexpr ((VB == 4 || VB == 5) && MODE == G1_E8)
        if ((lean = g1s_takes(Q, em))) k = g1s_kernel<VB, true>(em, Q.d[0].cols_p, &sci);
    static int occs[9] = {0};
    int &occ = occs[em + 3 * (lean + sci)];
    if (!occ) {
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, KVQ_HQX_FOLD_WARPS * 32, 0);
        if (occ < 1) occ = 1;
    }
    int grid = g_sm_count * occ, nb[MAXP];
    if (g_fold >= 2 && g_fold < grid) grid = g_fold > MAXP ? g_fold : MAXP;
    const int tot = kvq_hqx_fold_split(rows, Q.n, grid, nb);
    if (!tot) return cudaErrorInvalidConfiguration;
    F.b1 = (uint32_t)nb[0];
    F.b2 = (uint32_t)(nb[0] + nb[1]);
    cfg.gridDim = dim3((unsigned)tot);
    const uint32_t rb1 = (uint32_t)rows[0], rb2 = rb1 + (uint32_t)rows[1], rtot = rb2 + (uint32_t)rows[2];
    if (g_trig < 0) kvq_cuda_hqx_set_trig(-1);
    return cudaLaunchKernelEx(&cfg, k, Q, accumulate, rb1, rb2, rtot, lean ? g_lean_pf : 1, (int64_t)0, 0u, g_trig, F);
}
template <int VB>
static cudaError_t g1f_launch_w(const cudaLaunchConfig_t &cfg, int mode, const Parts &Q, int accumulate, const int64_t *rows,
                                const G1F &F) {
    return mode == G1_E8 ? g1f_launch<VB, G1_E8>(cfg, Q, accumulate, rows, F) : g1f_launch<VB, G1_RTN>(cfg, Q, accumulate, rows, F);
}

kvq_status kvq_cuda_hqx_gemv1_fold(Parts &P, const float *x, const kvq_cuda_xin &xin, int accumulate, int pdl, kvq_err *err) {
    if (!kvq_cuda_hqx_gemv1_fold_ok(P, x, xin))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: the folded one-token product does not take these parts");
    // one launch per value width among the parts, as kvq_cuda_hqx_gemv1; each prepares its own
    // parts; the first (with part 0, whose block 0 writes the normalized row) follows the kernel
    // before as a programmatic dependent
    unsigned done = 0;
    for (int p0 = 0; p0 < P.n; p0++) {
        const int vb = P.d[p0].vbits;
        if (done & (1u << vb)) continue;
        done |= 1u << vb;
        Parts Q;
        int64_t rows[MAXP];
        parts_of_width(P, vb, Q, rows);
        cudaLaunchAttribute at;
        cudaLaunchConfig_t cfg = g1_cfg(dim3(1), pdl && p0 == 0, &at); // the grid: g1f_launch
        cfg.blockDim = dim3(KVQ_HQX_FOLD_WARPS * 32); // shared memory: static, the budget (kvq_hqx_fold_smem fits it)
        const G1F F = {x, xin.w, xin.eps, p0 == 0 ? xin.y : NULL, 0u, 0u};
        const int mode = g1_mode(P, vb);
        cudaError_t e;
        switch (vb) {
        case 4: e = g1f_launch_w<4>(cfg, mode, Q, accumulate, rows, F); break;
        case 5: e = g1f_launch_w<5>(cfg, mode, Q, accumulate, rows, F); break;
        case 6: e = g1f_launch_w<6>(cfg, mode, Q, accumulate, rows, F); break;
        case 7: e = g1f_launch_w<7>(cfg, mode, Q, accumulate, rows, F); break;
        default: e = g1f_launch_w<8>(cfg, mode, Q, accumulate, rows, F); break;
        }
        if (e != cudaSuccess) return cu_fail(err, e, "launch hqx_gemv1 (folded)");
        CU_LAUNCHED("hqx_gemv1p folded");
        g_fold_n++;
    }
    return KVQ_OK;
}
