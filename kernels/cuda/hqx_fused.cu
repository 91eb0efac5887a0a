// Batched int8 product from the hqx layout (hqx.h): Y (T, rows) = X (T, cols) · Wᵀ in two
// launches per group of up to 8 tokens. The first prepares the activations as kvq_hqx_prep
// does (signs of the tile column, the per-tile Walsh–Hadamard in the CPU's butterfly order,
// √3 on A2's even coordinates, int8 per tile: sx = amax/127 and the 8-vector sums s8; RTN:
// the tile sums xs), one warp per tile, into a scratch of the tensor; the second copies them
// into each block's shared memory and its 8 warps take rows in turn. (Preparing inside every
// block instead cost a serial chain of ~1 µs per tile per warp: measured 71 µs for a 16384 ×
// 2048 E8 product against 40 µs for bf16.) In a row, lane l takes chunks l, l+32, ... (64 coordinates: 32 bytes of
// nibbles, the bit-plane words, the coset byte), decodes them to signed bytes once and meets
// every token's int8 activation with 16 dp4a; per tile the integer sum is scaled by
// scale·sx. Escapes are spread over the lanes. The float sums run in another order than the
// CPU's, so results equal the CPU int8 mode's within rounding (and a code one step apart
// where a rounding boundary falls differently). One token: the preparation here, the product
// in hqx_gemv1.cu (same bits as this kernel's).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/hqx_dev.cuh"
#include "kernels/cuda/hqx_prep.cuh"

#define FB 256        // threads per block
#define FW (FB / 32)  // warps per block
#define TGMAX 8       // tokens per launch at most
#define SMEM_BUDGET (200 * 1024)

__device__ __forceinline__ uint32_t spread4f(uint32_t nib4) { return (nib4 * 0x00204081u) & 0x01010101u; }

// Kernel 1: the activations of tg tokens into each part's scratch (the layout lay(cols_p, T,
// tg); one token, or lanes: each token's in the one-token product's lane order, token t's at
// t·lay(cols_p, T, 1).total, for the several-token one-token product), one warp per (tile,
// token, part).
__global__ void __launch_bounds__(FB) hqx_prep_i8(const __grid_constant__ Parts P, const float *__restrict__ x, int tg,
                                                   const kvq_cuda_xin xin, int lanes) {
    // a programmatic dependent (the one-token product) may start its weight loads now; it
    // waits for this grid's completion before it reads the activations
    asm volatile("griddepcontrol.launch_dependents;");
    const int pi = blockIdx.z;
    const Dev &d = P.d[pi];
    unsigned char *scratch = (unsigned char *)P.fs[pi];
    const int lane = threadIdx.x & 31, t = blockIdx.y;
    const Lay L = lay(d.cols_p, d.T, lanes ? 1 : tg);
    if (lanes) scratch += (size_t)t * L.total;
    const int tl = lanes ? 0 : t; // the token's index within its layout
    const int64_t cp = d.cols_p, tiles = cp / d.T, j = (int64_t)blockIdx.x * FW + (threadIdx.x >> 5);
    if (j >= tiles) return;
    // the token's input row (SILU_MUL: gate | up, twice as wide), its transform
    const float *xt = x + (int64_t)t * d.cols * (xin.kind == KVQ_CUDA_XIN_SILU_MUL ? 2 : 1);
    XIn xi = {xin.kind, xin.w, 0.0f, xin.y && pi == 0 ? xin.y + (int64_t)t * d.cols : NULL};
    if (xin.kind == KVQ_CUDA_XIN_RMSNORM) xi.r = row_rinv(xt, d.cols, xin.eps, lane);
    int8_t *q = (int8_t *)(scratch + L.xq) + (int64_t)tl * cp;
    float *a = (float *)(scratch + L.sx) + tl * tiles, *b = (float *)(scratch + L.xs) + tl * tiles;
    int32_t *c = (int32_t *)(scratch + L.s8) + (int64_t)tl * (cp / 8);
    const bool perm = tg == 1 || lanes;
    switch (d.T) {
    case 64: prep_tile<2>(d, xt, xi, q, a, b, c, lane, j, perm); break;
    case 128: prep_tile<4>(d, xt, xi, q, a, b, c, lane, j, perm); break;
    case 256: prep_tile<8>(d, xt, xi, q, a, b, c, lane, j, perm); break;
    case 512: prep_tile<16>(d, xt, xi, q, a, b, c, lane, j, perm); break;
    default: prep_tile<32>(d, xt, xi, q, a, b, c, lane, j, perm); break;
    }
}

// lay(cols_p, 1 << tsh, tg) with shifts for its 64-bit divisions (a tile is a power of two):
// no division subroutine calls ahead of the first load.
static __device__ __forceinline__ Lay lay_sh(int64_t cols_p, int tsh, int tg) {
    Lay l;
    const size_t tiles = (size_t)(cols_p >> tsh);
    l.sx = 0;
    l.xs = l.sx + lay_al16(sizeof(float) * tiles * tg);
    l.s8 = l.xs + lay_al16(sizeof(float) * tiles * tg);
    l.xq = l.s8 + lay_al16(sizeof(int32_t) * (size_t)(cols_p >> 3) * tg);
    l.total = l.xq + (tg == 1 ? (size_t)((cols_p + 1023) & ~(int64_t)1023) : lay_al16((size_t)cols_p * tg));
    return l;
}

// Kernel 1 with its loads hoisted (KVQ_CUDA_PREP=1|2|3; hqx_prep.cuh, prep_tile_h): the same
// grid and the same bits. Launched as a programmatic dependent of the kernel before it (2), the
// launch and what precedes griddepcontrol.wait run while that kernel ends. SK > 0: RMSNORM with
// the token's row in dynamic shared memory (cols floats, SK float4s a thread at most; prep_sk).
template <int SK>
__global__ void __launch_bounds__(FB, SK ? 1 : 2) hqx_prep_i8h(const __grid_constant__ Parts P, const float *__restrict__ x, int tg,
                                                    const kvq_cuda_xin xin, int lanes) {
    asm volatile("griddepcontrol.launch_dependents;"); // as hqx_prep_i8
    extern __shared__ float4 row_sh[];
    const int pi = blockIdx.z;
    const Dev &d = P.d[pi];
    unsigned char *scratch = (unsigned char *)P.fs[pi];
    const int lane = threadIdx.x & 31, t = blockIdx.y, tsh = __ffs(d.T) - 1;
    const Lay L = lay_sh(d.cols_p, tsh, lanes ? 1 : tg);
    if (lanes) scratch += (size_t)t * L.total;
    const int tl = lanes ? 0 : t;
    const int64_t cp = d.cols_p, tiles = cp >> tsh, j = (int64_t)blockIdx.x * FW + (threadIdx.x >> 5);
    const bool has = j < tiles; // no early return: the block's barriers (SK) and griddepcontrol.wait
    const float *xt = x + (int64_t)t * d.cols * (xin.kind == KVQ_CUDA_XIN_SILU_MUL ? 2 : 1);
    float *y = xin.y && pi == 0 ? xin.y + (int64_t)t * d.cols : NULL;
    int8_t *q = (int8_t *)(scratch + L.xq) + (int64_t)tl * cp;
    float *a = (float *)(scratch + L.sx) + tl * tiles, *b = (float *)(scratch + L.xs) + tl * tiles;
    int32_t *c = (int32_t *)(scratch + L.s8) + (int64_t)tl * (cp >> 3);
    const bool perm = tg == 1 || lanes;
    switch (d.T) {
    case 64: prep_tile_h<2, SK, FB>(d, xt, xin, y, q, a, b, c, lane, j, has, perm, row_sh); break;
    case 128: prep_tile_h<4, SK, FB>(d, xt, xin, y, q, a, b, c, lane, j, has, perm, row_sh); break;
    case 256: prep_tile_h<8, SK, FB>(d, xt, xin, y, q, a, b, c, lane, j, has, perm, row_sh); break;
    case 512: prep_tile_h<16, SK, FB>(d, xt, xin, y, q, a, b, c, lane, j, has, perm, row_sh); break;
    default: prep_tile_h<32, SK, FB>(d, xt, xin, y, q, a, b, c, lane, j, has, perm, row_sh); break;
    }
}

// One chunk's codes as signed bytes (lo: coordinates 0..31, hi: 32..63) and its scalars.
struct Chunk {
    uint32_t lo[8], hi[8], cbb;
    float sc, z;
    int64_t jt;
    bool zp;
};

__device__ __forceinline__ void load_chunk(const Dev &d, int64_t row, int64_t c, int64_t cpr, int64_t tiles,
                                           uint32_t offb, Chunk &k) {
    const int64_t g = row * cpr + c;
    if (d.vbits == 8) {
        const uint4 *p = (const uint4 *)(d.q + g * 64);
        const uint4 a = __ldg(p), b = __ldg(p + 1), e = __ldg(p + 2), f = __ldg(p + 3);
        const uint32_t w[16] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, e.x, e.y, e.z, e.w, f.x, f.y, f.z, f.w};
#pragma unroll
        for (int i = 0; i < 8; i++) { k.lo[i] = w[i] ^ 0x80808080u; k.hi[i] = w[8 + i] ^ 0x80808080u; }
    } else {
        const uint4 *p = (const uint4 *)(d.q + g * 32);
        const uint4 a = __ldg(p), b = __ldg(p + 1);
        const uint32_t r[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; i++) { k.lo[i] = r[i] & 0x0F0F0F0Fu; k.hi[i] = (r[i] >> 4) & 0x0F0F0F0Fu; }
        for (int pl = 0; pl < d.np; pl++) {
            const uint64_t wd = kvq_hqx_hb_std(__ldg(d.hb + g * d.np + pl));
#pragma unroll
            for (int i = 0; i < 8; i++) {
                k.lo[i] |= spread4f((uint32_t)(wd >> (4 * i)) & 15u) << (4 + pl);
                k.hi[i] |= spread4f((uint32_t)(wd >> (32 + 4 * i)) & 15u) << (4 + pl);
            }
        }
#pragma unroll
        for (int i = 0; i < 8; i++) { k.lo[i] = __vsub4(k.lo[i], offb); k.hi[i] = __vsub4(k.hi[i], offb); }
    }
    k.cbb = d.e8 ? __ldg(d.cb + g) : 0u;
    k.jt = (c * 64) / d.T;
    const int64_t tix = row * tiles + k.jt;
    k.sc = d.scode ? __ldg(d.lut + __ldg(d.scode + tix)) : __ldg(d.scale + tix);
    k.zp = d.zero && (c * 64) % d.T == 0;
    k.z = k.zp ? __ldg(d.zero + tix) : 0.0f;
}

// One chunk's dot product with a token's int8 activation (x0..x3: its 64 codes).
__device__ __forceinline__ int dot64(const Chunk &k, const int4 &x0, const int4 &x1, const int4 &x2, const int4 &x3) {
    int dot = 0;
    dot = __dp4a((int)k.lo[0], x0.x, dot); dot = __dp4a((int)k.lo[1], x0.y, dot);
    dot = __dp4a((int)k.lo[2], x0.z, dot); dot = __dp4a((int)k.lo[3], x0.w, dot);
    dot = __dp4a((int)k.lo[4], x1.x, dot); dot = __dp4a((int)k.lo[5], x1.y, dot);
    dot = __dp4a((int)k.lo[6], x1.z, dot); dot = __dp4a((int)k.lo[7], x1.w, dot);
    dot = __dp4a((int)k.hi[0], x2.x, dot); dot = __dp4a((int)k.hi[1], x2.y, dot);
    dot = __dp4a((int)k.hi[2], x2.z, dot); dot = __dp4a((int)k.hi[3], x2.w, dot);
    dot = __dp4a((int)k.hi[4], x3.x, dot); dot = __dp4a((int)k.hi[5], x3.y, dot);
    dot = __dp4a((int)k.hi[6], x3.z, dot); dot = __dp4a((int)k.hi[7], x3.w, dot);
    return dot;
}

// The coset bits select 8-vector sums (u, v: the chunk's eight s8 values).
__device__ __forceinline__ int coset(uint32_t b, const int4 &u, const int4 &v) {
    return (b & 1u ? u.x : 0) + (b & 2u ? u.y : 0) + (b & 4u ? u.z : 0) + (b & 8u ? u.w : 0) + (b & 16u ? v.x : 0) +
           (b & 32u ? v.y : 0) + (b & 64u ? v.z : 0) + (b & 128u ? v.w : 0);
}

// Chunk c of one or two rows (k0, and k1 when two) against every token: each token's
// activation codes and 8-vector sums are read from shared memory once for both rows.
template <int TGC>
__device__ __forceinline__ void use_chunks(const Dev &d, const Chunk &k0, const Chunk &k1, bool two, int64_t c, int tg,
                                           int64_t cp, int64_t tiles, const int8_t *xq, const int32_t *s8,
                                           const float *sx, const float *xs, float *a0, float *a1) {
#pragma unroll
    for (int t = 0; t < TGC; t++) {
        if (t >= tg) break;
        const int4 *xp = (const int4 *)(xq + (int64_t)t * cp + c * 64);
        const int4 x0 = xp[0], x1 = xp[1], x2 = xp[2], x3 = xp[3];
        int D0 = d.m * dot64(k0, x0, x1, x2, x3), D1 = two ? d.m * dot64(k1, x0, x1, x2, x3) : 0;
        if (k0.cbb | k1.cbb) {
            const int4 *sp = (const int4 *)(s8 + (int64_t)t * (cp / 8) + c * 8);
            const int4 u = sp[0], v = sp[1];
            D0 += coset(k0.cbb, u, v);
            D1 += coset(k1.cbb, u, v);
        }
        const float sxv = sx[t * tiles + k0.jt]; // both rows: the same tile column
        a0[t] = fmaf(k0.sc * sxv, (float)D0, a0[t]);
        if (two) a1[t] = fmaf(k1.sc * sxv, (float)D1, a1[t]);
        if (k0.zp) {
            const float xv = xs[t * tiles + k0.jt];
            a0[t] = fmaf(k0.z, xv, a0[t]);
            if (two) a1[t] = fmaf(k1.z, xv, a1[t]);
        }
    }
}

template <int TGC>
__device__ __forceinline__ void finish_row(const Dev &d, int64_t row, int lane, int tg, int64_t cp, int64_t tiles,
                                           const int8_t *xq, const float *sx, float *acc, float *y, int64_t ldy,
                                           int accumulate) {
    const uint32_t e0 = __ldg(d.esc_row + row), e1 = __ldg(d.esc_row + row + 1);
    for (uint32_t e = e0 + lane; e < e1; e += 32) {
        const uint32_t en = kvq_hqx_esc_at(d, row, e), col = kvq_hqx_esc_col(en);
        const int64_t jt = col / d.T, tix = row * tiles + jt;
        const float sc = d.scode ? __ldg(d.lut + __ldg(d.scode + tix)) : __ldg(d.scale + tix);
        const int dl = d.m * kvq_hqx_esc_delta(en);
        for (int t = 0; t < tg; t++)
            acc[t] = fmaf(sc * sx[t * tiles + jt], (float)(dl * (int)xq[(int64_t)t * cp + col]), acc[t]);
    }
#pragma unroll
    for (int t = 0; t < TGC; t++) {
        if (t >= tg) break;
        float s = acc[t];
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) {
            float *o = y + (int64_t)t * ldy + row;
            *o = accumulate ? __fadd_rn(*o, s) : s;
        }
    }
}

// Kernel 2: block (b, p) serves part p when b < nb[p]: the prepared activations into shared
// memory, then rows in turn, two per warp at a time (both rows' loads in flight together).
// TGC: the tokens the accumulators hold (TGMAX; one token goes to hqx_gemv1.cu, which sums
// in this kernel's order: lane L's chunks L, L+32, ..., then its escapes, then the xor tree).
template <int TGC>
__global__ void __launch_bounds__(FB) hqx_fused_i8(const __grid_constant__ Parts P, int tg, int64_t ldy, int accumulate) {
    const int pi = blockIdx.y;
    if ((int)blockIdx.x >= P.nb[pi]) return;
    const Dev &d = P.d[pi];
    extern __shared__ __align__(16) unsigned char sm[];
    const Lay L = lay(d.cols_p, d.T, tg);
    const uint4 *src = (const uint4 *)P.fs[pi];
    for (size_t i = threadIdx.x; i < L.total / 16; i += FB) ((uint4 *)sm)[i] = __ldg(src + i);
    __syncthreads();
    const float *sx = (const float *)(sm + L.sx), *xs = (const float *)(sm + L.xs);
    const int32_t *s8 = (const int32_t *)(sm + L.s8);
    const int8_t *xq = (const int8_t *)(sm + L.xq);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t cp = d.cols_p, tiles = cp / d.T, cpr = cp / 64, stride = (int64_t)P.nb[pi] * FW;
    const uint32_t offb = d.vbits == 8 ? 0u : (uint32_t)d.off * 0x01010101u;
    float *y = P.y[pi];
    for (int64_t r0 = (int64_t)blockIdx.x * FW + warp; r0 < d.rows; r0 += 2 * stride) {
        const int64_t r1 = r0 + stride;
        const bool two = r1 < d.rows;
        float a0[TGC], a1[TGC];
#pragma unroll
        for (int t = 0; t < TGC; t++) { a0[t] = 0.0f; a1[t] = 0.0f; }
        for (int64_t c = lane; c < cpr; c += 32) {
            Chunk k0, k1;
            load_chunk(d, r0, c, cpr, tiles, offb, k0);
            if (two) load_chunk(d, r1, c, cpr, tiles, offb, k1);
            else k1.cbb = 0;
            use_chunks<TGC>(d, k0, k1, two, c, tg, cp, tiles, xq, s8, sx, xs, a0, a1);
        }
        finish_row<TGC>(d, r0, lane, tg, cp, tiles, xq, sx, a0, y, ldy, accumulate);
        if (two) finish_row<TGC>(d, r1, lane, tg, cp, tiles, xq, sx, a1, y, ldy, accumulate);
    }
}

static int g_sms = 0;
static int g_occ[8]; // blocks per SM of the batched kernel by the occupancy calculator: [smem / 32 KiB]
static int g_pdl = 1; // the one-token product as a programmatic dependent of the preparation
static int g_skip_prep = 0; // benchmarks: launch the one-token product alone (kvq_cuda_hqx_time_stream)
// KVQ_CUDA_PREP: 0 hqx_prep_i8, 1 hqx_prep_i8h, 2 hqx_prep_i8h as a programmatic dependent (the
// default since the H100 A/B of session 15: +4 % decode on the 8B shape, docs/RESULTS.md), 3 as 1
// with every warp summing the row itself (no shared memory)
static int g_prep = -1;

void kvq_cuda_hqx_skip_prep(int on) { g_skip_prep = on; }

// Blocks of 256 threads one SM runs at once for the shared memory (cached).
static int occupancy(size_t smem) {
    const int b = smem / (32 * 1024) < 8 ? (int)(smem / (32 * 1024)) : 7;
    if (!g_occ[b]) {
        int n = 0;
        const size_t probe = (size_t)(b + 1) * 32 * 1024 - 1 < SMEM_BUDGET ? (size_t)(b + 1) * 32 * 1024 - 1 : SMEM_BUDGET;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, hqx_fused_i8<TGMAX>, FB, probe);
        g_occ[b] = n > 0 ? n : 1;
    }
    return g_occ[b];
}

extern "C" size_t kvq_cuda_hqx_fused_scratch(int64_t cols_p, int tile) {
    // b: lanes (several tokens; up to 16 for the tensor-core product, hqx_mma.cu)
    const size_t a = lay(cols_p, tile, TGMAX).total, b = 2 * TGMAX * lay(cols_p, tile, 1).total;
    return a > b ? a : b;
}

extern "C" int kvq_cuda_hqx_fused_tokens(const kvq_cuda_hqx *t) {
    for (int tg = TGMAX; tg > 1; tg--)
        if (lay(t->h.cols_p, t->h.tile, tg).total <= SMEM_BUDGET) return tg;
    return 1; // the one-token product (hqx_gemv1.cu) holds no activations in shared memory
}

extern "C" void kvq_cuda_hqx_set_pdl(int on) { g_pdl = on; }

extern "C" void kvq_cuda_hqx_set_prep(int mode) {
    if (mode < 0) {
        const char *e = getenv("KVQ_CUDA_PREP");
        mode = e && *e >= '0' && *e <= '3' && !e[1] ? *e - '0' : 2;
    }
    g_prep = mode >= 1 && mode <= 3 ? mode : 0;
}

// hqx_prep_i8h's SK for RMSNORM rows of cols floats at x (every part of a launch has cols
// columns): 4 or 12 float4s a thread through shared memory (rows of 4096 floats, or of up to
// 12224: the row and the kernel's 16 static bytes within the default 48 KiB), else 0.
static int prep_sk(const float *x, int64_t cols, const kvq_cuda_xin &xin) {
    if (xin.kind != KVQ_CUDA_XIN_RMSNORM || cols % 4 != 0 || (uintptr_t)x % 16 != 0) return 0;
    return cols / 4 <= 4 * FB ? 4 : cols * 4 <= 48 * 1024 - 256 ? 12 : 0;
}

// The preparation launch (grid: tiles / FW, tokens, parts) on the library's stream, by g_prep.
static cudaError_t prep_launch(dim3 grid, const Parts &P, const float *x, int tg, const kvq_cuda_xin &xin, int lanes) {
    if (g_prep < 0) kvq_cuda_hqx_set_prep(-1);
    if (!g_prep) {
        hqx_prep_i8<<<grid, FB, 0, kvq_cuda_stream()>>>(P, x, tg, xin, lanes);
        return cudaGetLastError();
    }
    const int sk = g_prep == 3 ? 0 : prep_sk(x, P.d[0].cols, xin);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(FB);
    cfg.dynamicSmemBytes = sk ? (size_t)P.d[0].cols * 4 : 0;
    cfg.stream = kvq_cuda_stream();
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &at;
    cfg.numAttrs = g_prep == 2 && g_pdl ? 1 : 0; // KVQ_CUDA_PDL=0 turns this edge off too
    return sk == 4    ? cudaLaunchKernelEx(&cfg, hqx_prep_i8h<4>, P, x, tg, xin, lanes)
           : sk == 12 ? cudaLaunchKernelEx(&cfg, hqx_prep_i8h<12>, P, x, tg, xin, lanes)
                      : cudaLaunchKernelEx(&cfg, hqx_prep_i8h<0>, P, x, tg, xin, lanes);
}

extern "C" kvq_status kvq_cuda_hqx_fused_init(kvq_err *err) {
    if (g_sms) return KVQ_OK;
    int dev = 0;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
    CU_TRY(cudaFuncSetAttribute(hqx_fused_i8<TGMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BUDGET));
    for (int b = 0; b < 7; b++) occupancy((size_t)b * 32 * 1024); // now: never while a graph is being captured
    const char *e = getenv("KVQ_CUDA_PDL");
    if (e && *e == '0') g_pdl = 0;
    if (g_prep < 0) kvq_cuda_hqx_set_prep(-1);
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hqx_matmul_parts(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x,
                                               int n_tok, float *d_y, int64_t ldy, int accumulate, kvq_err *err) {
    return kvq_cuda_hqx_matmul_parts_in(t, n, row0, d_x, NULL, n_tok, d_y, ldy, accumulate, err);
}

extern "C" kvq_status kvq_cuda_hqx_matmul_parts_in(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x,
                                                  const kvq_cuda_xin *xin, int n_tok, float *d_y, int64_t ldy, int accumulate,
                                                  kvq_err *err) {
    const kvq_cuda_xin none = {KVQ_CUDA_XIN_NONE, NULL, 0.0f, NULL};
    if (!xin) xin = &none;
    if (xin->kind == KVQ_CUDA_XIN_RMSNORM && !xin->w) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: RMSNORM input without weights");
    kvq_status s = kvq_cuda_hqx_fused_init(err);
    if (s) return s;
    if (n < 1 || n > MAXP) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: %d parts (1..%d)", n, MAXP);
    int tgm = TGMAX;
    int64_t all_rows = 0, max_tiles = 0;
    for (int p = 0; p < n; p++) {
        const int tg = kvq_cuda_hqx_fused_tokens(t[p]);
        if (t[p]->h.tile < 64 || t[p]->h.tile > 1024 || (t[p]->h.tile & (t[p]->h.tile - 1)))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: tile %d (the fused product takes 64..1024)", t[p]->h.tile);
        if (t[p]->h.cols != t[0]->h.cols)
            return kvq_err_set(err, KVQ_ERR_ARG, "cuda: parts of one product differ in columns");
        tgm = tg < tgm ? tg : tgm;
        all_rows += t[p]->h.rows;
        const int64_t tl = t[p]->h.cols_p / t[p]->h.tile;
        max_tiles = tl > max_tiles ? tl : max_tiles;
    }
    if (n_tok > TGMAX) { // 9..16 tokens in one launch of the tensor-core product where it takes the parts
        Parts Q;
        for (int p = 0; p < n; p++) Q.d[p] = dev_of(t[p]);
        Q.n = n;
        if (kvq_cuda_hqx_gemv1_tokens_ok(Q) && kvq_cuda_hqx_mma_ok(Q)) tgm = 2 * TGMAX;
    }
    for (int t0 = 0; t0 < n_tok; t0 += tgm) {
        const int tg = n_tok - t0 < tgm ? n_tok - t0 : tgm;
        Parts P;
        size_t smem = 0;
        int max_nb = 1;
        for (int p = 0; p < n; p++) {
            P.d[p] = dev_of(t[p]);
            P.fs[p] = t[p]->fs;
            P.y[p] = d_y + (int64_t)t0 * ldy + row0[p];
            const size_t sb = lay(t[p]->h.cols_p, t[p]->h.tile, tg).total;
            smem = sb > smem ? sb : smem;
        }
        P.n = n;
        if (xin->kind == KVQ_CUDA_XIN_PREPARED) { // the kernel before wrote the scratch
            if (n_tok != 1 || n != 1)
                return kvq_err_set(err, KVQ_ERR_ARG, "cuda: a prepared activation is one token of one part");
            if ((s = kvq_cuda_hqx_gemv1(P, accumulate, g_pdl, err))) return s;
            continue;
        }
        if (tg == 1 && g_skip_prep && xin->kind == KVQ_CUDA_XIN_NONE) {
            if ((s = kvq_cuda_hqx_gemv1(P, accumulate, 0, err))) return s;
            continue;
        }
        // several tokens: the one-token product's persistent kernel for all of them when it takes
        // every part (each weight chunk decoded once, the tokens' activations in its lane order)
        const float *xt = d_x + (int64_t)t0 * t[0]->h.cols * (xin->kind == KVQ_CUDA_XIN_SILU_MUL ? 2 : 1);
        const kvq_cuda_xin xi = {xin->kind, xin->w, xin->eps, xin->y ? xin->y + (int64_t)t0 * t[0]->h.cols : NULL};
        if (tg == 1 && kvq_cuda_hqx_gemv1_fold_ok(P, xt, xi)) { // KVQ_CUDA_FOLD=1: the product prepares its RMSNorm input
            if ((s = kvq_cuda_hqx_gemv1_fold(P, xt, xi, accumulate, g_pdl, err))) return s;
            continue;
        }
        const int lanes = tg > 1 && kvq_cuda_hqx_gemv1_tokens_ok(P);
        const cudaError_t pe = prep_launch(dim3((unsigned)((max_tiles + FW - 1) / FW), (unsigned)tg, (unsigned)n), P, xt, tg, xi, lanes);
        if (pe != cudaSuccess) return cu_fail(err, pe, g_prep ? "launch hqx_prep_i8h" : "launch hqx_prep_i8");
        if (tg == 1) {
            if ((s = kvq_cuda_hqx_gemv1(P, accumulate, g_pdl, err))) return s;
            continue;
        }
        if (lanes) {
            if ((s = kvq_cuda_hqx_gemv1_tokens(P, tg, ldy, accumulate, g_pdl, err))) return s;
            continue;
        }
        const int64_t cap = (int64_t)g_sms * occupancy(smem); // one wave: no tail

        for (int p = 0; p < n; p++) { // the SMs shared by rows
            int64_t nb = (t[p]->h.rows + FW - 1) / FW, share = (cap * t[p]->h.rows + all_rows - 1) / all_rows;
            if (nb > share) nb = share;
            P.nb[p] = (int)(nb > 0 ? nb : 1);
            max_nb = P.nb[p] > max_nb ? P.nb[p] : max_nb;
        }
        hqx_fused_i8<TGMAX><<<dim3((unsigned)max_nb, (unsigned)n), FB, smem, kvq_cuda_stream()>>>(P, tg, ldy, accumulate);
        CU_LAUNCHED("hqx_fused_i8");
    }
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hqx_matmul(kvq_cuda_hqx *t, const float *d_x, int n_tok, float *d_y, int64_t ldy,
                                         int accumulate, kvq_err *err) {
    const int64_t r0 = 0;
    return kvq_cuda_hqx_matmul_parts(&t, 1, &r0, d_x, n_tok, d_y, ldy, accumulate, err);
}
