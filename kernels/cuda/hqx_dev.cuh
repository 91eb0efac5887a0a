// The device-side view of an uploaded hqx tensor (hqx.h), shared by the products
// (hqx_matvec.cu: float product; hqx_fused.cu: activation preparation and the batched int8
// product; hqx_gemv1.cu: the one-token int8 product).
#ifndef KVQ_CUDA_HQX_DEV_CUH
#define KVQ_CUDA_HQX_DEV_CUH

#include <stdint.h>

#include "kernels/cpu/hqx_esc16.h"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/hqx_lay.h"

struct kvq_cuda_hqx {
    kvq_hqx h;           // host copy of the scalars; array pointers below are device pointers
    uint8_t *q, *cb, *scode;
    uint64_t *hb;
    float *scale, *lut, *zero, *xr, *xs; // xr, xs: the float product's rotated activation
    uint32_t *esc_row, *esc; // esc: the packer's 32-bit entries, or NULL with the 16-bit form:
    uint16_t *esc16;         // the 16-bit form (kernels/cpu/hqx_esc16.h): entries, segment
    uint32_t *esc_seg, *esc_big; // starts (rows · esc_s1), big deltas (2 · esc_nbig), or NULL
    int esc_s1;
    uint32_t esc_nbig;
    unsigned char *fs; // the batched product's prepared activations (kvq_cuda_hqx_fused_scratch)
    size_t bytes;
};

/** Bytes of the prepared-activation scratch of a tensor (8 tokens), hqx_fused.cu. */
extern "C" size_t kvq_cuda_hqx_fused_scratch(int64_t cols_p, int tile);

// Kernel parameters: the arrays and the scalars a product reads.
struct Dev {
    const uint8_t *q, *cb, *scode;
    const uint64_t *hb;
    const float *scale, *lut, *zero, *xr, *xs;
    const uint32_t *esc_row, *esc;
    const uint16_t *esc16; // non-NULL: the 16-bit form (esc NULL), read by kvq_hqx_esc_at
    const uint32_t *esc_seg, *esc_big;
    int esc_s1;
    uint32_t esc_nbig;
    int64_t rows, cols, cols_p;
    int T, vbits, np, off, m, e8, rotate, a2;
    uint64_t seed;
};

static inline Dev dev_of(const kvq_cuda_hqx *t) {
    Dev d;
    d.q = t->q; d.cb = t->cb; d.scode = t->scode; d.hb = t->hb;
    d.scale = t->scale; d.lut = t->lut; d.zero = t->zero; d.xr = t->xr; d.xs = t->xs;
    d.esc_row = t->esc_row; d.esc = t->esc;
    d.esc16 = t->esc16; d.esc_seg = t->esc_seg; d.esc_big = t->esc_big; d.esc_s1 = t->esc_s1; d.esc_nbig = t->esc_nbig;
    d.rows = t->h.rows; d.cols = t->h.cols; d.cols_p = t->h.cols_p;
    d.T = t->h.tile; d.vbits = t->h.vbits; d.np = kvq_hqx_planes(t->h.vbits);
    d.off = t->h.rotate ? kvq_hqx_off(t->h.vbits) : 0;
    d.m = kvq_hqx_mult(t->h.lat); d.e8 = t->h.lat == KVQ_HQ_LAT_E8;
    d.rotate = t->h.rotate; d.a2 = t->h.lat == KVQ_HQ_LAT_A2; d.seed = t->h.seed;
    return d;
}

/** Scale of tile t (scode through the lut, or the float scale). */
__device__ __forceinline__ float kvq_hqx_tile_scale(const Dev &d, int64_t t) { return d.scode ? d.lut[d.scode[t]] : d.scale[t]; }

/** Escape e (esc_row[row] <= e < esc_row[row + 1]) as the packer's 32-bit entry, col | delta << 20
 *  (kvq_hqx_esc_col, kvq_hqx_esc_delta), from whichever form the tensor holds (kvq_hqx_esc_at): every
 *  GPU reader of escapes takes its entries here, or (the one-token kernel's batches, hqx_gemv1.cu)
 *  decodes the same (col, delta) itself, so both forms give the same columns and deltas in the same
 *  order (the same bits). In two halves for a batch of entries: every load (kvq_hqx_esc_raw) before
 *  any decode (kvq_hqx_esc_of: the raw word of entry e of row `row` as the packer's entry). */
__device__ __forceinline__ uint32_t kvq_hqx_esc_raw(const Dev &d, uint32_t e) {
    return d.esc16 ? (uint32_t)__ldg(d.esc16 + e) : __ldg(d.esc + e);
}
__device__ __forceinline__ uint32_t kvq_hqx_esc_of(const Dev &d, int64_t row, uint32_t e, uint32_t raw) {
    return d.esc16 ? kvq_hqx_esc16_dec(raw, d.esc_seg, d.esc_s1, d.esc_big, d.esc_nbig, row, e) : raw;
}
__device__ __forceinline__ uint32_t kvq_hqx_esc_at(const Dev &d, int64_t row, uint32_t e) {
    return kvq_hqx_esc_of(d, row, e, kvq_hqx_esc_raw(d, e));
}

/** Coordinate i of tile column j rotated as the CPU rotates it: sign flip, the Walsh–Hadamard
 *  butterfly in shared memory s (T floats) in the CPU's order (stride 1, 2, 4, ...), √3 on A2's
 *  even coordinates. Every one of the block's T threads calls it (it holds barriers). */
__device__ __forceinline__ float kvq_hqx_rotate_coord(const Dev &d, int j, int i, float v, float *s) {
    const uint64_t bits = kvq_hq_sign_word(d.seed, (uint64_t)j, (uint64_t)(i / 64));
    if ((bits >> (i % 64)) & 1) v = -v;
    s[i] = v;
    __syncthreads();
    for (int h = 1; h < d.T; h <<= 1) {
        float a = 0.0f, b = 0.0f;
        const bool top = (i & h) == 0;
        if (top) { a = s[i]; b = s[i + h]; }
        __syncthreads();
        if (top) { s[i] = __fadd_rn(a, b); s[i + h] = __fsub_rn(a, b); }
        __syncthreads();
    }
    v = s[i];
    if (d.a2 && !(i & 1)) v = __fmul_rn(v, KVQ_HQ_SQRT3_F);
    return v;
}

#define MAXP 3 // row blocks (fused q/k/v, gate/up) in one launch

// The parts of one launch: each its own tensor (rotation, tile), scratch and output rows.
struct Parts {
    Dev d[MAXP];
    const unsigned char *fs[MAXP];
    float *y[MAXP];  // output of part p (its first row), row stride ldy
    int nb[MAXP];    // blocks of the main kernel per part
    int n;
};

// The prepared activation's layouts (lay, the one-token lane order) and the folded product's
// plan: kernels/cuda/hqx_lay.h (plain C, so that host tests check them).

/** The one-token int8 product (hqx_gemv1.cu) over the prepared scratch of each part (lay(·,
 *  ·, 1)): y[row] (+)= W·x. pdl: launched as a programmatic dependent of the preparation
 *  kernel just before it on the stream (the weights' first loads overlap it). */
kvq_status kvq_cuda_hqx_gemv1(Parts &P, int accumulate, int pdl, kvq_err *err);
/** Whether kvq_cuda_hqx_gemv1_tokens takes every part of P (the persistent one-token kernel's
 *  variants: E8 or RTN, whole steps, equal columns and tiles; not with KVQ_CUDA_G1N=0). */
int kvq_cuda_hqx_gemv1_tokens_ok(const Parts &P);
/** The one-token product for nt <= 8 tokens at once (each part's scratch holding nt lane-order
 *  layouts, lay(cols_p, T, 1).total bytes apart; outputs ldy floats apart): each token's result
 *  has the bits kvq_cuda_hqx_gemv1 gives it alone. */
kvq_status kvq_cuda_hqx_gemv1_tokens(Parts &P, int nt, int64_t ldy, int accumulate, int pdl, kvq_err *err);
/** Whether kvq_cuda_hqx_mma_tokens takes every part of P (E8, 4..7 value bits, scale codes,
 *  whole steps, equal columns and tiles; not with KVQ_CUDA_G1M=0). */
int kvq_cuda_hqx_mma_ok(const Parts &P);
/** Fewest tokens kvq_cuda_hqx_gemv1_tokens gives the tensor-core product (KVQ_CUDA_G1M_MIN=2..8;
 *  default 3: 2 tokens are faster in the one-token kernel's loop, session 10 call G). */
int kvq_cuda_hqx_mma_min(void);
/** The several-token product on tensor cores (hqx_mma.cu) over the same lane-order scratch as
 *  kvq_cuda_hqx_gemv1_tokens, with the same bits per token as the one-token product. */
kvq_status kvq_cuda_hqx_mma_tokens(Parts &P, int nt, int64_t ldy, int accumulate, int pdl, kvq_err *err);
/** The one-token product of one token's RMSNorm input that prepares it itself in each block's
 *  shared memory (KVQ_CUDA_FOLD=1, kvq_cuda_hqx_set_fold; hqx_gemv1.cu): no preparation kernel
 *  before it, the bits of hqx_prep_i8h + kvq_cuda_hqx_gemv1. x: the token's raw row (cols
 *  floats); xin: its RMSNorm (xin.y: NULL or where the normalized row is also written). _ok:
 *  whether it takes the parts (the fold on, the persistent kernel with a ring of 2 for every
 *  part, equal columns and tiles, kvq_hqx_fold_smem, a 16-byte aligned row). pdl: launched as a
 *  programmatic dependent of the kernel before it on the stream (which must not write xin.w). */
int kvq_cuda_hqx_gemv1_fold_ok(const Parts &P, const float *x, const kvq_cuda_xin &xin);
kvq_status kvq_cuda_hqx_gemv1_fold(Parts &P, const float *x, const kvq_cuda_xin &xin, int accumulate, int pdl, kvq_err *err);
/** Benchmarks: one-token products skip the activation preparation (its scratch keeps the
 *  last one's), to time the product kernel alone. */
void kvq_cuda_hqx_skip_prep(int on);


#endif
