// Several-token int8 product on tensor cores from the hqx layout (issue 12, the small-batch
// rows): Y (nt, rows) (+)= X (nt, cols) · Wᵀ for 2..8 tokens, E8 tensors of 4..7 value bits
// with scale codes and whole steps (the persistent one-token kernel's E8 variant). Each weight
// chunk is loaded and decoded once into its codes' bytes u' = m·u + cb (the E8 code plus the
// offset, 0 ≤ u' < 256) and met by the 8 tokens' int8 activations in one mma.m16n8k32
// (u8 × s8 → s32): 16 rows × 8 tokens per instruction, so each activation byte a warp loads
// serves 16 rows (the one-token kernel's several-token loop re-read it for every row: that
// bound it, docs/RESULTS.md, session 9). ⟨c, x⟩ = ⟨u', x⟩ − m·off·Σx per chunk, the integer
// chunk sum of the one-token kernel, exactly.
//
// The same bits as the one-token product for every token (a batch row = that sequence alone):
// the one-token kernel's lane L sums chunks L, L + 32, L + 64, ... of a row in turn, each as
// fmaf(scale·sx, (float)D, acc), then its escapes e0 + L, e0 + L + 32, ..., and the 32 lane
// sums are added by xor shuffles 16, 8, 4, 2, 1 (lane 0's result is stored). Here a block
// takes 16 rows; its warp q sums chunk classes L = 4q .. 4q + 3 (4 adjacent chunks: 128
// contiguous bytes of nibbles a row per step) for its threads' (row, token) pairs in that
// order, adds the classes' escapes, and leaves the 32 class sums in shared memory, where the
// block adds them in the xor tree's order.
//
// mma.m16n8k32 fragments (PTX ISA, integer m16n8k32): lane = 4·g + tg; A (16 × 32, row): a0 =
// row g, k 4tg..4tg+3; a1 = row g + 8, same k; a2 = row g, k 16 + 4tg..; a3 = row g + 8, k 16 +
// 4tg..; B (32 × 8, col): b0 = k 4tg.., column (token) g; b1 = k 16 + 4tg.., token g; C: c0, c1
// = row g, tokens 2tg, 2tg + 1; c2, c3 = row g + 8. The k order inside a chunk is ours to
// choose (A and B agree): thread tg takes q bytes 8tg..8tg+7 of a row's chunk, whose low
// nibbles are coordinates 8tg..8tg+7 (k-step 0: k 4tg + i ↔ coordinate 8tg + i, k 16 + 4tg + i
// ↔ 8tg + 4 + i) and high nibbles 32 + 8tg.. (k-step 1, the same way): one 8-byte load a row,
// the lane half tg/2 of each plane word (kvq_hqx_gpu_pbit: word K = 2(tg&1), 2(tg&1)+1 of the
// half), the coset bits of 8-vectors tg and 4 + tg; the activations' 8 bytes at those
// coordinates are consecutive in the one-token lane order (kvq_gemv1_xq_at).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/hqx_dev.cuh"

#define HM_WARPS 8 // warps per block: one per 4 chunk classes (32 classes)
#define HM_ROWS 16 // rows per block (the mma's M)
#define HM_TOK 8   // tokens (the mma's N; two tiles for 9..16 tokens)

__device__ __forceinline__ uint2 hm_ld8(const void *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t hm_ld4(const void *p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// C += A·B, m16n8k32, A u8 (row), B s8 (col), s32 accumulators.
__device__ __forceinline__ void hm_mma(int *c, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One row's loads for one chunk: q bytes 8tg..8tg+7, the lane half of each plane word.
template <int NP> struct HmW {
    uint2 q;
    uint32_t hb[NP > 0 ? NP : 1];
};

// The row's bytes u' = 2u + cb for the thread's coordinates: lo[0..1] k-step 0 (coordinates
// 8tg.. and 8tg + 4..), hi[0..1] k-step 1 (32 + 8tg.., 32 + 8tg + 4..).
template <int NP>
__device__ __forceinline__ void hm_codes(const HmW<NP> &w, uint32_t cbyte, int tg, uint32_t *lo, uint32_t *hi) {
    const int K0 = 2 * (tg & 1);
    uint32_t l0 = w.q.x & 0x0F0F0F0Fu, l1 = w.q.y & 0x0F0F0F0Fu;
    uint32_t h0 = (w.q.x >> 4) & 0x0F0F0F0Fu, h1 = (w.q.y >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int p = 0; p < NP; p++) { // plane p's bit of byte i: 8i + K (low nibbles), 8i + 4 + K (high)
        const uint32_t P = w.hb[p];
        l0 |= ((P >> K0) & 0x01010101u) << (4 + p);
        l1 |= ((P >> (K0 + 1)) & 0x01010101u) << (4 + p);
        h0 |= ((P >> (K0 + 4)) & 0x01010101u) << (4 + p);
        h1 |= ((P >> (K0 + 5)) & 0x01010101u) << (4 + p);
    }
    const uint32_t bl = ((cbyte >> tg) & 1u) * 0x01010101u, bh = ((cbyte >> (4 + tg)) & 1u) * 0x01010101u;
    lo[0] = (l0 << 1) | bl;
    lo[1] = (l1 << 1) | bl;
    hi[0] = (h0 << 1) | bh;
    hi[1] = (h1 << 1) | bh;
}

// The loads of one step (4 chunks of the thread's two rows): nibbles, plane halves, the 4 coset
// bytes and the scale codes.
template <int NP> struct HmSlot {
    HmW<NP> wa[4], wb[4];
    uint32_t cba, cbv, sca4, scb4;
};

// Row block blk of a launch: its part and first row (parts' blocks one after another).
__device__ __forceinline__ int hm_part(uint32_t blk, uint32_t bb1, uint32_t bb2) { return blk >= bb2 ? 2 : blk >= bb1 ? 1 : 0; }

// Blocks stay resident and take row blocks blockIdx.x, + gridDim.x, ...: the last step of a row
// block loads the first step of the next, so its end (escapes, class sums, the tree, the store)
// overlaps those loads (with one row block a block, a block's end waited on nothing in flight:
// 25 % occupancy and 45 % of the stalls on loads, ncu in session 10 call H).
template <int VB, int NTT>
__global__ void __launch_bounds__(HM_WARPS * 32, VB <= 5 && NTT == 1 ? 2 : 1)
    hqx_mma_k(const __grid_constant__ Parts P, int accumulate, uint32_t bb1, uint32_t bb2, uint32_t nb, int nt, int64_t ldy,
              uint32_t lst) {
    constexpr int NP = VB > 4 && VB < 8 ? VB - 4 : 0, NTOK = HM_TOK * NTT;
    __shared__ float sv[32][HM_ROWS][NTOK]; // the class sums (class, row, token)
    const int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, tg = lane & 3;
    // equal columns and tiles in every part (kvq_cuda_hqx_mma_ok)
    const uint32_t cpr = (uint32_t)(P.d[0].cols_p / 64), tsh = __ffs(P.d[0].T) - 1, tiles = (uint32_t)(P.d[0].cols_p >> tsh);
    const int moff = 2 * P.d[0].off;
    const Lay L = lay(P.d[0].cols_p, P.d[0].T, 1);
    // steps k: chunks 4q + 32k .. 4q + 32k + 3, all below cpr when the first is (cpr % 16 == 0)
    const uint32_t K = 4u * q < cpr ? (cpr - 4u * q + 31) / 32 : 0;
    // the scale codes of chunks c0..c0+3 in one load: tiles (cols_p / T) per row are a multiple of
    // 4 for T <= 256 (cols_p % 1024 == 0), and tile c0·64/T is then in the aligned word at it
    const bool sword = P.d[0].T <= 256;
    // the thread's rows g and g + 8 of row block blk (clamped to the last row; those are not stored)
    auto rows_of = [&](uint32_t blk, int &pi, int64_t &ra, int64_t &rb) {
        pi = hm_part(blk, bb1, bb2);
        const int64_t r0 = (int64_t)(blk - (pi == 2 ? bb2 : pi == 1 ? bb1 : 0)) * HM_ROWS, n = P.d[pi].rows;
        ra = r0 + g < n ? r0 + g : n - 1;
        rb = r0 + g + 8 < n ? r0 + g + 8 : n - 1;
    };
    // step k of row block blk (32-bit offsets from the tensor's arrays: fewer registers;
    // kvq_cuda_hqx_mma_ok bounds the sizes)
    auto load = [&](HmSlot<NP> &w, uint32_t blk, uint32_t k) {
        int pi;
        int64_t ra, rb;
        rows_of(blk, pi, ra, rb);
        const Dev &d = P.d[pi];
        const uint32_t ca = (uint32_t)ra * cpr + 4 * q + 32 * k, cbb = (uint32_t)rb * cpr + 4 * q + 32 * k;
        const uint32_t *hw = (const uint32_t *)d.hb;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            w.wa[j].q = hm_ld8(d.q + ((ca + j) * 32 + 8 * tg));
            w.wb[j].q = hm_ld8(d.q + ((cbb + j) * 32 + 8 * tg));
#pragma unroll
            for (int p = 0; p < NP; p++) {
                w.wa[j].hb[p] = hm_ld4(hw + (((ca + j) * NP + p) * 2 + (tg >> 1)));
                w.wb[j].hb[p] = hm_ld4(hw + (((cbb + j) * NP + p) * 2 + (tg >> 1)));
            }
        }
        w.cba = hm_ld4(d.cb + ca); // the 4 chunks' coset bytes (cpr % 16 == 0: aligned, in the row)
        w.cbv = hm_ld4(d.cb + cbb);
        const uint32_t jt0 = ((4 * q + 32 * k) * 64) >> tsh, sa = (uint32_t)ra * tiles, sb = (uint32_t)rb * tiles;
        w.sca4 = sword ? __ldg((const uint32_t *)(d.scode + (sa + (jt0 & ~3u)))) : __ldg(d.scode + (sa + jt0));
        w.scb4 = sword ? __ldg((const uint32_t *)(d.scode + (sb + (jt0 & ~3u)))) : __ldg(d.scode + (sb + jt0));
    };
    HmSlot<NP> cur, nxt;
    uint32_t blk = blockIdx.x;
    if (blk < nb && K > 0) load(cur, blk, 0);
    asm volatile("griddepcontrol.wait;" ::: "memory"); // the activations come from the kernel before
    for (; blk < nb; blk += gridDim.x) {
        int pi;
        int64_t ra, rb;
        rows_of(blk, pi, ra, rb);
        const Dev &d = P.d[pi];
        const int64_t r0 = (int64_t)(blk - (pi == 2 ? bb2 : pi == 1 ? bb1 : 0)) * HM_ROWS;
        // B: token g + 8tt's 8 bytes at coordinates 8tg.. (k-step 0) and 32 + 8tg.. (k-step 1) of
        // chunk c, at xb[tt] + 2048k + 32j for c = 4q + 32k + j (kvq_gemv1_xq_at); zero past nt
        const int8_t *xb[NTT];
        const float *sx0[NTT], *sx1[NTT];
#pragma unroll
        for (int tt = 0; tt < NTT; tt++) {
            const int tok = 8 * tt + g < nt ? 8 * tt + g : nt - 1;
            xb[tt] = (const int8_t *)(P.fs[pi] + (size_t)tok * lst + L.xq) + ((4 * q) & 15) * 32 + (4 * q >> 4) * 1024 +
                     (tg >> 1) * 16 + 8 * (tg & 1);
            const int t0 = 8 * tt + 2 * tg < nt ? 8 * tt + 2 * tg : nt - 1, t1 = 8 * tt + 2 * tg + 1 < nt ? 8 * tt + 2 * tg + 1 : nt - 1;
            sx0[tt] = (const float *)(P.fs[pi] + (size_t)t0 * lst + L.sx);
            sx1[tt] = (const float *)(P.fs[pi] + (size_t)t1 * lst + L.sx);
        }
        const float *lut = d.lut;
        // class 4q + j, tile tt: (row g, token 8tt + 2tg), (row g, 8tt + 2tg + 1), (row g + 8, ...), (row g + 8, ...)
        float acc[4][4 * NTT];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int i = 0; i < 4 * NTT; i++) acc[j][i] = 0.0f;
        const uint32_t nblk = blk + gridDim.x;
        for (uint32_t k = 0; k < K; k++) {
            if (k + 1 < K) load(nxt, blk, k + 1);
            else if (nblk < nb) load(nxt, nblk, 0); // the next row block's first step
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t c = 4 * q + 32 * k + j; // < cpr: cpr % 16 == 0
                uint32_t la[2], ha2[2], lb[2], hb2[2];
                hm_codes<NP>(cur.wa[j], (cur.cba >> (8 * j)) & 0xFFu, tg, la, ha2);
                hm_codes<NP>(cur.wb[j], (cur.cbv >> (8 * j)) & 0xFFu, tg, lb, hb2);
                const uint32_t A0[4] = {la[0], lb[0], la[1], lb[1]}, A1[4] = {ha2[0], hb2[0], ha2[1], hb2[1]};
                const uint32_t jt = (c * 64) >> tsh, sh = sword ? 8 * (jt & 3) : 0;
                const float sca = __ldg(lut + ((cur.sca4 >> sh) & 0xFFu)), scb = __ldg(lut + ((cur.scb4 >> sh) & 0xFFu));
#pragma unroll
                for (int tt = 0; tt < NTT; tt++) {
                    const int8_t *xc = xb[tt] + (size_t)k * 2048 + 32 * j;
                    uint2 b0 = *(const uint2 *)xc, b1 = *(const uint2 *)(xc + 512);
                    if (8 * tt + g >= nt) b0 = b1 = make_uint2(0, 0);
                    // Σx of token 8tt + g over the chunk (exact), then the C columns' tokens
                    int sx = __dp4a((int)b0.x, 0x01010101, 0);
                    sx = __dp4a((int)b0.y, 0x01010101, sx);
                    sx = __dp4a((int)b1.x, 0x01010101, sx);
                    sx = __dp4a((int)b1.y, 0x01010101, sx);
                    sx += __shfl_xor_sync(0xffffffffu, sx, 1);
                    sx += __shfl_xor_sync(0xffffffffu, sx, 2);
                    const int s0 = moff * __shfl_sync(0xffffffffu, sx, 8 * tg), s1 = moff * __shfl_sync(0xffffffffu, sx, 8 * tg + 4);
                    int C[4] = {0, 0, 0, 0};
                    const uint32_t B0[2] = {b0.x, b0.y}, B1[2] = {b1.x, b1.y};
                    hm_mma(C, A0, B0);
                    hm_mma(C, A1, B1);
                    const float x0 = sx0[tt][jt], x1 = sx1[tt][jt];
                    acc[j][4 * tt + 0] = fmaf(sca * x0, (float)(C[0] - s0), acc[j][4 * tt + 0]);
                    acc[j][4 * tt + 1] = fmaf(sca * x1, (float)(C[1] - s1), acc[j][4 * tt + 1]);
                    acc[j][4 * tt + 2] = fmaf(scb * x0, (float)(C[2] - s0), acc[j][4 * tt + 2]);
                    acc[j][4 * tt + 3] = fmaf(scb * x1, (float)(C[3] - s1), acc[j][4 * tt + 3]);
                }
            }
            cur = nxt;
        }
        // the escape ranges of the two rows (their loads overlap the stores below)
        const uint32_t ea0 = __ldg(d.esc_row + ra), ea1 = __ldg(d.esc_row + ra + 1), eb0 = __ldg(d.esc_row + rb),
                       eb1 = __ldg(d.esc_row + rb + 1);
        // the class sums to shared memory, then the classes' escapes added there by the thread that
        // owns the entries (lane L's e0 + L, e0 + L + 32, ... in the one-token kernel)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int tt = 0; tt < NTT; tt++) {
                sv[4 * q + j][g][8 * tt + 2 * tg] = acc[j][4 * tt + 0];
                sv[4 * q + j][g][8 * tt + 2 * tg + 1] = acc[j][4 * tt + 1];
                sv[4 * q + j][g + 8][8 * tt + 2 * tg] = acc[j][4 * tt + 2];
                sv[4 * q + j][g + 8][8 * tt + 2 * tg + 1] = acc[j][4 * tt + 3];
            }
#pragma unroll 1 // the two rows' escapes in one copy of the loop: unrolled, ⟨5, 1⟩ spilled 8 bytes at its 128 cap
        for (int i = 0; i < 2; i++) {
            const int64_t row = i ? rb : ra;
            const uint32_t e0 = i ? eb0 : ea0, e1 = i ? eb1 : ea1;
            for (uint32_t e4 = e0 + 4 * q; e4 < e1; e4 += 32) { // classes 4q..4q+3: escapes e4 + j
                for (uint32_t j = 0; j < 4 && e4 + j < e1; j++) {
                    const uint32_t en = kvq_hqx_esc_at(d, row, e4 + j), col = kvq_hqx_esc_col(en);
                    const uint32_t jt = col >> tsh;
                    const float sc = __ldg(lut + __ldg(d.scode + (size_t)row * tiles + jt));
                    const int dl = 2 * kvq_hqx_esc_delta(en);
                    for (int u = 0; u < 2 * NTT; u++) {
                        const int tc = 8 * (u >> 1) + 2 * tg + (u & 1), t = tc < nt ? tc : nt - 1;
                        const unsigned char *ft = P.fs[pi] + (size_t)t * lst;
                        const float sxt = ((const float *)(ft + L.sx))[jt];
                        const int xv = ((const int8_t *)(ft + L.xq))[kvq_gemv1_xq_at(col)];
                        float &a = sv[4 * q + j][g + 8 * i][tc];
                        a = fmaf(sc * sxt, (float)(dl * xv), a);
                    }
                }
            }
        }
        __syncthreads();
        // the xor tree of the one-token kernel's lane 0: pairs (L, L + 16), then + 8, 4, 2, 1
        if (threadIdx.x < HM_ROWS * NTOK) {
            const int r = threadIdx.x / NTOK, t = threadIdx.x % NTOK;
            float v[16];
#pragma unroll
            for (int l = 0; l < 16; l++) v[l] = sv[l][r][t] + sv[l + 16][r][t];
#pragma unroll
            for (int l = 0; l < 8; l++) v[l] = v[l] + v[l + 8];
#pragma unroll
            for (int l = 0; l < 4; l++) v[l] = v[l] + v[l + 4];
            v[0] = v[0] + v[2];
            v[1] = v[1] + v[3];
            v[0] = v[0] + v[1];
            const int64_t row = r0 + r;
            if (t < nt && row < d.rows) {
                float *y = P.y[pi] + (size_t)t * ldy + row;
                *y = accumulate ? __fadd_rn(*y, v[0]) : v[0];
            }
        }
        __syncthreads(); // the sums read before the next row block writes them
    }
}

static int g_mma = -1; // KVQ_CUDA_G1M=0: several tokens go to the one-token kernel's loop

extern "C" void kvq_cuda_hqx_set_mma(int on) { g_mma = on < 0 ? -1 : on != 0; }

int kvq_cuda_hqx_mma_min(void) {
    static int m = 0;
    if (!m) {
        const char *e = getenv("KVQ_CUDA_G1M_MIN");
        const int v = e ? atoi(e) : 0;
        m = v >= 2 && v <= 8 ? v : 3;
    }
    return m;
}

int kvq_cuda_hqx_mma_ok(const Parts &P) {
    if (g_mma < 0) g_mma = !(getenv("KVQ_CUDA_G1M") && *getenv("KVQ_CUDA_G1M") == '0');
    if (!g_mma) return 0;
    for (int p = 0; p < P.n; p++) {
        const Dev &d = P.d[p];
        if (!(d.e8 && d.rotate && d.scode && d.vbits >= 4 && d.vbits <= 7 && d.cols_p % 1024 == 0 && (d.T & (d.T - 1)) == 0 &&
              d.T >= 64 && d.cols_p == P.d[0].cols_p && d.T == P.d[0].T && d.rows * d.cols_p < ((int64_t)1 << 32)))
            return 0;
    }
    return 1;
}

template <int VB, int NTT>
static cudaError_t hm_launch(const Parts &Q, int accumulate, uint32_t bb1, uint32_t bb2, uint32_t nb, int nt, int64_t ldy,
                             uint32_t lst, int pdl) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at;
    cfg.gridDim = dim3(nb);
    cfg.blockDim = dim3(HM_WARPS * 32);
    cfg.stream = kvq_cuda_stream();
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &at;
    cfg.numAttrs = pdl ? 1 : 0;
    static int occ = 0, sms = 0;
    if (!occ) {
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, hqx_mma_k<VB, NTT>, HM_WARPS * 32, 0);
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (occ < 1) occ = 1;
    }
    // resident blocks (KVQ_CUDA_G1M_GRID=0: a block per row block)
    static int one = -1;
    if (one < 0) one = getenv("KVQ_CUDA_G1M_GRID") && *getenv("KVQ_CUDA_G1M_GRID") == '0';
    const uint32_t cap = (uint32_t)(occ * (sms > 0 ? sms : 1));
    cfg.gridDim = dim3(one || nb < cap ? nb : cap);
    return cudaLaunchKernelEx(&cfg, hqx_mma_k<VB, NTT>, Q, accumulate, bb1, bb2, nb, nt, ldy, lst);
}

kvq_status kvq_cuda_hqx_mma_tokens(Parts &P, int nt, int64_t ldy, int accumulate, int pdl, kvq_err *err) {
    if (nt < 1 || nt > 2 * HM_TOK || !kvq_cuda_hqx_mma_ok(P))
        return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: the tensor-core several-token product does not take these parts");
    const uint32_t lst = (uint32_t)lay(P.d[0].cols_p, P.d[0].T, 1).total;
    unsigned done = 0;
    for (int p0 = 0; p0 < P.n; p0++) { // one launch per value width among the parts
        const int vb = P.d[p0].vbits;
        if (done & (1u << vb)) continue;
        done |= 1u << vb;
        Parts Q = P;
        uint32_t nbp[MAXP] = {0, 0, 0};
        int n = 0;
        for (int p = 0; p < P.n; p++) {
            if (P.d[p].vbits != vb) continue;
            Q.d[n] = P.d[p];
            Q.fs[n] = P.fs[p];
            Q.y[n] = P.y[p];
            nbp[n++] = (uint32_t)((P.d[p].rows + HM_ROWS - 1) / HM_ROWS);
        }
        Q.n = n;
        const uint32_t bb1 = nbp[0], bb2 = bb1 + nbp[1], nb = bb2 + nbp[2];
        cudaError_t e;
        const int pd = pdl && p0 == 0;
#define HM_CASE(V)                                                                                                  \
    case V: e = nt > HM_TOK ? hm_launch<V, 2>(Q, accumulate, bb1, bb2, nb, nt, ldy, lst, pd)                         \
                            : hm_launch<V, 1>(Q, accumulate, bb1, bb2, nb, nt, ldy, lst, pd); break;
        switch (vb) {
        HM_CASE(4) HM_CASE(5) HM_CASE(6)
        default: e = nt > HM_TOK ? hm_launch<7, 2>(Q, accumulate, bb1, bb2, nb, nt, ldy, lst, pd)
                                 : hm_launch<7, 1>(Q, accumulate, bb1, bb2, nb, nt, ldy, lst, pd); break;
        }
#undef HM_CASE
        if (e != cudaSuccess) return cu_fail(err, e, "launch hqx_mma");
        CU_LAUNCHED("hqx_mma");
    }
    return KVQ_OK;
}
