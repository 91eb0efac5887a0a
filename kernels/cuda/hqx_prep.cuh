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
// The transform of one coordinate from its loaded values (a = x[i]; w: the norm's weight,
// u = x[cols + i] for SILU_MUL): the one expression both preparations use, so the same bits.
static __device__ __forceinline__ float xin_of(int kind, float a, float w, float u, float r) {
    if (kind == KVQ_CUDA_XIN_RMSNORM) return w * (a * r);
    if (kind == KVQ_CUDA_XIN_SILU_MUL) return a / (1.0f + expf(-a)) * u;
    return a;
}
static __device__ __forceinline__ float xin_at(const XIn &xi, const float *__restrict__ x, int64_t i, int64_t cols) {
    if (xi.kind == KVQ_CUDA_XIN_RMSNORM) return xi.w[i] * (x[i] * xi.r);
    if (xi.kind == KVQ_CUDA_XIN_SILU_MUL) {
        const float a = x[i], u = x[cols + i];
        return a / (1.0f + expf(-a)) * u;
    }
    return x[i];
}

// 1/sqrt(mean(x²) + eps) from each lane's partial sum (the xor tree: every lane the same bits).
static __device__ __forceinline__ float rinv_of(float ss, int64_t n, float eps) {
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    return 1.0f / sqrtf(ss / (float)n + eps);
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
    } else { // (unaligned, or n % 4 != 0) the float4 order coordinate by coordinate: the aligned path's bits where n % 4 == 0
        for (int64_t c = 4 * (int64_t)lane; c < n; c += 128)
            for (int k = 0; k < 4 && c + k < n; k++) ss = fmaf(x[c + k], x[c + k], ss);
    }
    return rinv_of(ss, n, eps);
}

// KVQ_PREP_MARK(k, x): a measuring build's clock read after x is ready (k: 1 the tile rotated, 2 its amax and sum
// reduced, 3 its codes stored); nothing unless the including file defines it (attention.cu's KVQ_ATT_STAMPS build).
#ifndef KVQ_PREP_MARK
#define KVQ_PREP_MARK(k, x) do { } while (0)
#endif

// The sign word of lane's coordinates in tile j (R a lane).
template <int R> static __device__ __forceinline__ uint64_t prep_signs(const Dev &d, int lane, int64_t j) {
    return kvq_hq_sign_word(d.seed, (uint64_t)j, (uint64_t)((lane * R) / 64));
}

// The tile's part after the input transform: v, lane's R transformed coordinates; sw, their
// sign word (prep_signs; read only when d.rotate; SW false: computed here).
template <int R, bool SW = true>
static __device__ __forceinline__ void prep_tile_q(const Dev &d, float (&v)[R], uint64_t sw, int8_t *xq, float *sx, float *xs,
                                                   int32_t *s8, int lane, int64_t j, bool perm) {
    constexpr int T = 32 * R;
    {
        const int64_t base = j * T + (int64_t)lane * R;
        if (d.rotate) {
            const uint64_t w = SW ? sw : prep_signs<R>(d, lane, j);
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
        KVQ_PREP_MARK(1, v[0]);
        float a = 0.0f, s = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) { a = fmaxf(a, fabsf(v[r])); s += v[r]; }
        for (int o = 16; o > 0; o >>= 1) {
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
            s += __shfl_xor_sync(0xffffffffu, s, o);
        }
        KVQ_PREP_MARK(2, a + s);
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
        KVQ_PREP_MARK(3, (float)qs);
    }
}

// Prepares one token's activation, one warp per tile: lane l holds coordinates lR..lR+R−1
// (R = T/32) in registers; butterfly stages h < R run inside a lane, h >= R across lanes by
// shuffles (the pair (i, i+h): a+b to i, a−b to i+h, in the CPU's order h = 1, 2, 4, ...), so
// the floats equal kvq_hqx_prep's. Then amax and the tile sum by shuffles, the int8 codes and
// the 8-vector sums into the scratch.
template <int R>
static __device__ __forceinline__ void prep_tile(const Dev &d, const float *__restrict__ x, const XIn &xi, int8_t *xq, float *sx,
                                          float *xs, int32_t *s8, int lane, int64_t j, bool perm) {
    float v[R];
    const int64_t base = j * (32 * R) + (int64_t)lane * R;
#pragma unroll
    for (int r = 0; r < R; r++) {
        v[r] = base + r < d.cols ? xin_at(xi, x, base + r, d.cols) : 0.0f;
        if (xi.y && base + r < d.cols) xi.y[base + r] = v[r];
    }
    prep_tile_q<R, false>(d, v, 0, xq, sx, xs, s8, lane, j, perm);
}

// ---- the preparation with its loads hoisted (hqx_fused.cu's hqx_prep_i8h, KVQ_CUDA_PREP=1|2)


// A float (4 floats) of what the kernel before wrote: plain loads (coherent after
// griddepcontrol.wait), not the read-only path, whose data must not change while the grid runs
// (a programmatic dependent runs beside the kernel that writes it).
static __device__ __forceinline__ float ld_pl1(const float *p) {
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
static __device__ __forceinline__ float4 ld_pl4(const float4 *p) {
    float4 v;
    asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

// row_rinv's 1/rms with RB float4 loads a lane in flight (plain loads: see ld_pl1), summed in row_rinv's order: lane l's float4s l, l+32, l+64, ..., each
// x, y, z, w in turn, then the xor tree; the zeros padding a batch add nothing (ss ≥ 0), so the
// bits are row_rinv's whatever RB.
template <int RB>
static __device__ __forceinline__ float row_rinv_wide(const float *__restrict__ x, int64_t n, float eps, int lane) {
    if ((n & 3) != 0 || ((uintptr_t)x & 15) != 0) { // row_rinv's fallback order (the aligned path's bits where n % 4 == 0)
        float ss = 0.0f;
        for (int64_t c = 4 * (int64_t)lane; c < n; c += 128)
            for (int k = 0; k < 4 && c + k < n; k++) {
                const float v = ld_pl1(x + c + k);
                ss = fmaf(v, v, ss);
            }
        return rinv_of(ss, n, eps);
    }
    float ss = 0.0f;
    const float4 *x4 = (const float4 *)x;
    const int64_t n4 = n / 4;
    for (int64_t c0 = lane; c0 < n4; c0 += 32 * RB) {
        float4 v[RB];
#pragma unroll
        for (int k = 0; k < RB; k++) {
            const int64_t c = c0 + 32 * k;
            v[k] = c < n4 ? ld_pl4(x4 + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int k = 0; k < RB; k++) {
            ss = fmaf(v[k].x, v[k].x, ss); ss = fmaf(v[k].y, v[k].y, ss);
            ss = fmaf(v[k].z, v[k].z, ss); ss = fmaf(v[k].w, v[k].w, ss);
        }
    }
    return rinv_of(ss, n, eps);
}

// 1/rms of a row of n floats already in shared memory (sh: its n/4 float4s, 16-byte aligned),
// summed by warp 0 in row_rinv's order (lane l: float4s l, l+32, ..., each x, y, z, w in
// turn; one warp's shared reads, the others would only queue behind it) and handed to the
// block. Every thread of the block must call it.
static __device__ __forceinline__ float row_rinv_sh(const float4 *__restrict__ sh, int64_t n, float eps) {
    const int64_t n4 = n / 4;
    const int lane = threadIdx.x & 31;
    __shared__ float rr;
    if (threadIdx.x < 32) {
        float ss = 0.0f;
#pragma unroll 8
        for (int64_t c = lane; c < n4; c += 32) {
            const float4 v = sh[c];
            ss = fmaf(v.x, v.x, ss); ss = fmaf(v.y, v.y, ss);
            ss = fmaf(v.z, v.z, ss); ss = fmaf(v.w, v.w, ss);
        }
        const float r = rinv_of(ss, n, eps);
        if (lane == 0) rr = r;
    }
    __syncthreads();
    return rr;
}

// 1/rms of the block's token row from shared memory (sh: the row's n/4 float4s, loaded by the
// block's NT threads, K at most each), then row_rinv_sh. Every thread of the block must call it.
template <int NT, int K>
static __device__ __forceinline__ float row_rinv_smem(const float4 *__restrict__ x4, int64_t n, float eps, float4 *sh) {
    const int64_t n4 = n / 4; // <= NT·K: every load of a thread in flight at once, then stored
    float4 v[K];
#pragma unroll
    for (int k = 0; k < K; k++) { // past the row: its last float4 again (unpredicated loads, which ptxas issues together)
        const int64_t c = threadIdx.x + k * NT;
        v[k] = ld_pl4(x4 + (c < n4 ? c : n4 - 1));
    }
#pragma unroll
    for (int k = 0; k < K; k++) // asm volatile as the loads: the compiler keeps every store after every load
        if (threadIdx.x + k * NT < n4)
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"((uint32_t)__cvta_generic_to_shared(sh + threadIdx.x + k * NT)),
                         "f"(v[k].x), "f"(v[k].y), "f"(v[k].z), "f"(v[k].w)
                         : "memory");
    __syncthreads();
    return row_rinv_sh(sh, n, eps);
}

// prep_tile with the same bits and a shorter chain of memory round trips. Before
// griddepcontrol.wait (which returns at once after a plain launch), only what the kernel before
// does not write: the norm's weights. After it the tile's inputs and the row are loaded
// together and the sign word is hashed while they fly: one round trip, where prep_tile waits
// for 1/rms, then loads each coordinate after storing the last to y (1 + R serial trips).
// 1/rms: SK > 0 (RMSNORM, a 16-byte aligned row of n % 4 == 0 floats, n/4 <= NT·SK) by
// row_rinv_smem, the row read once a block instead of once a warp; else row_rinv_wide<8> per
// warp. x: the token's row (SILU_MUL: gate | up); y: NULL or where the transformed row goes;
// has: whether the warp has a tile; NT: the block's threads (each must call this).
template <int R, int SK, int NT>
static __device__ __forceinline__ void prep_tile_h(const Dev &d, const float *__restrict__ x, const kvq_cuda_xin &xin, float *y,
                                                   int8_t *xq, float *sx, float *xs, int32_t *s8, int lane, int64_t j, bool has,
                                                   bool perm, float4 *sh) {
    const int64_t base = j * (32 * R) + (int64_t)lane * R;
    constexpr bool SH = SK > 0;
    const int kind = SH ? KVQ_CUDA_XIN_RMSNORM : xin.kind; // SH: RMSNORM only
    float w[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        w[r] = has && kind == KVQ_CUDA_XIN_RMSNORM && base + r < d.cols ? __ldg(xin.w + base + r) : 0.0f;
    asm volatile("griddepcontrol.wait;" ::: "memory"); // the kernel before: complete, its writes visible
    float a[R], u[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const bool in = has && base + r < d.cols;
        a[r] = in ? ld_pl1(x + base + r) : 0.0f;
        u[r] = in && kind == KVQ_CUDA_XIN_SILU_MUL ? ld_pl1(x + d.cols + base + r) : 0.0f;
    }
    // the sign word (a hash: arithmetic only) while the loads are in flight
    const uint64_t sw = has && d.rotate ? prep_signs<R>(d, lane, j) : 0;
    float rr = 0.0f;
    if (SH) rr = row_rinv_smem<NT, SH ? SK : 1>((const float4 *)x, d.cols, xin.eps, sh);
    if (!has) return;
    if (!SH && kind == KVQ_CUDA_XIN_RMSNORM) rr = row_rinv_wide<8>(x, d.cols, xin.eps, lane);
    float v[R];
#pragma unroll
    for (int r = 0; r < R; r++) v[r] = base + r < d.cols ? xin_of(kind, a[r], w[r], u[r], rr) : 0.0f;
    if (y)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (base + r < d.cols) y[base + r] = v[r];
    prep_tile_q<R>(d, v, sw, xq, sx, xs, s8, lane, j, perm);
}

// Tile j of one token's row into t's one-token scratch fs (lay(cols_p, T, 1), the one-token
// product's lane order), by one warp, no input transform, from the tile's T values in shared memory
// (xt: its first; the attention's merging block keeps the output it wrote there, instead of reading
// it back through L2): the bits hqx_prep_i8 writes.
template <int R>
static __device__ __forceinline__ void prep_tile_sm(const Dev &d, const float *xt, int8_t *xq, float *sx, float *xs, int32_t *s8,
                                                    int lane, int64_t j) {
    float v[R];
    const int64_t base = j * (32 * R) + (int64_t)lane * R;
#pragma unroll
    for (int r = 0; r < R; r++) v[r] = base + r < d.cols ? xt[lane * R + r] : 0.0f;
    prep_tile_q<R, false>(d, v, 0, xq, sx, xs, s8, lane, j, true);
}
static __device__ __forceinline__ void kvq_hqx_prep1_tile_sm(const Dev &d, unsigned char *fs, const float *xt, int lane, int64_t j) {
    const Lay L = lay(d.cols_p, d.T, 1);
    int8_t *q = (int8_t *)(fs + L.xq);
    float *a = (float *)(fs + L.sx), *b = (float *)(fs + L.xs);
    int32_t *c = (int32_t *)(fs + L.s8);
    switch (d.T) {
    case 64: prep_tile_sm<2>(d, xt, q, a, b, c, lane, j); break;
    case 128: prep_tile_sm<4>(d, xt, q, a, b, c, lane, j); break;
    case 256: prep_tile_sm<8>(d, xt, q, a, b, c, lane, j); break;
    case 512: prep_tile_sm<16>(d, xt, q, a, b, c, lane, j); break;
    default: prep_tile_sm<32>(d, xt, q, a, b, c, lane, j); break;
    }
}

// ---- the RMSNorm preparation inside the one-token product (hqx_gemv1.cu, KVQ_CUDA_FOLD=1)

// One part's activation prepared by the block of the one-token product that will read it, into
// its shared memory sm (kvq_hqx_fold_smem: the layout L = lay(cols_p, T, 1) in the product's lane
// order, then the raw row), with hqx_prep_i8h's bits: 1/rms by row_rinv_sh (row_rinv's order),
// each coordinate by xin_of, each tile by prep_tile_q. Before griddepcontrol.wait (this function
// waits) only what the kernel before does not write: the norm's weights of the warp's first WP
// tiles (its tiles of a 4096-wide row: few registers beside the product's ring) and their sign
// words. After it the row comes in by cp.async (16 bytes, cached in L2 only: what the kernel
// before wrote, no stale L1 line, no registers), then warp w prepares tiles w, w + NW, ... (NW:
// the block's warps). y: NULL, or where the normalized row also goes (one block of the grid
// writes it). Every thread of the block calls it; the activation is complete in sm when it
// returns.
template <int R, int NW>
static __device__ __forceinline__ void prep_fold(const Dev &d, const float *__restrict__ x, const float *__restrict__ w, float eps,
                                                 float *y, unsigned char *sm, const Lay &L) {
    constexpr int T = 32 * R, WP = 4096 / (T * NW) > 1 ? 4096 / (T * NW) : 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t tiles = d.cols_p / T, cols = d.cols;
    float wr[WP][R];
    uint64_t swr[WP]; // and their sign words (a hash: arithmetic only), while the loads fly
#pragma unroll
    for (int i = 0; i < WP; i++) {
        const int64_t j = warp + (int64_t)i * NW, base = j * T + (int64_t)lane * R;
#pragma unroll
        for (int r = 0; r < R; r++) wr[i][r] = base + r < cols ? __ldg(w + base + r) : 0.0f;
        swr[i] = d.rotate && j < tiles ? prep_signs<R>(d, lane, j) : 0;
    }
    asm volatile("griddepcontrol.wait;" ::: "memory"); // the kernel before: complete, its writes visible
    float4 *row = (float4 *)(sm + L.total);
    const float4 *x4 = (const float4 *)x;
    for (int64_t c = threadIdx.x; c < cols / 4; c += NW * 32)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((uint32_t)__cvta_generic_to_shared(row + c)), "l"(x4 + c)
                     : "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    const float rr = row_rinv_sh(row, cols, eps);
    const float *rf = (const float *)row;
    int8_t *xq = (int8_t *)(sm + L.xq);
    float *sx = (float *)(sm + L.sx), *xs = (float *)(sm + L.xs);
    int32_t *s8 = (int32_t *)(sm + L.s8);
    auto tile = [&](int64_t j, const float (&wv)[R], bool have_sw, uint64_t sw) {
        const int64_t base = j * T + (int64_t)lane * R;
        float v[R];
#pragma unroll
        for (int r = 0; r < R; r++) v[r] = base + r < cols ? xin_of(KVQ_CUDA_XIN_RMSNORM, rf[base + r], wv[r], 0.0f, rr) : 0.0f;
        if (y)
#pragma unroll
            for (int r = 0; r < R; r++)
                if (base + r < cols) y[base + r] = v[r];
        if (have_sw) prep_tile_q<R, true>(d, v, sw, xq, sx, xs, s8, lane, j, true);
        else prep_tile_q<R, false>(d, v, 0, xq, sx, xs, s8, lane, j, true);
    };
#pragma unroll
    for (int i = 0; i < WP; i++) {
        const int64_t j = warp + (int64_t)i * NW;
        if (j < tiles) tile(j, wr[i], true, swr[i]);
    }
    for (int64_t j = warp + (int64_t)WP * NW; j < tiles; j += NW) { // rows wider than WP·NW tiles
        const int64_t base = j * T + (int64_t)lane * R;
        float wv[R];
#pragma unroll
        for (int r = 0; r < R; r++) wv[r] = base + r < cols ? __ldg(w + base + r) : 0.0f;
        tile(j, wv, false, 0);
    }
    __syncthreads();
}

#endif
