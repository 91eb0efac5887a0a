// The device-side view of an uploaded hqx tensor (hqx.h), shared by the products
// (hqx_matvec.cu: float product; hqx_fused.cu: activation preparation and the batched int8
// product; hqx_gemv1.cu: the one-token int8 product).
#ifndef KVQ_CUDA_HQX_DEV_CUH
#define KVQ_CUDA_HQX_DEV_CUH

#include <stdint.h>

#include "kernels/cuda/hqx.h"

struct kvq_cuda_hqx {
    kvq_hqx h;           // host copy of the scalars; array pointers below are device pointers
    uint8_t *q, *cb, *scode;
    uint64_t *hb;
    float *scale, *lut, *zero, *xr, *xs; // xr, xs: the float product's rotated activation
    uint32_t *esc_row, *esc;
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
    int64_t rows, cols, cols_p;
    int T, vbits, np, off, m, e8, rotate, a2;
    uint64_t seed;
};

static inline Dev dev_of(const kvq_cuda_hqx *t) {
    Dev d;
    d.q = t->q; d.cb = t->cb; d.scode = t->scode; d.hb = t->hb;
    d.scale = t->scale; d.lut = t->lut; d.zero = t->zero; d.xr = t->xr; d.xs = t->xs;
    d.esc_row = t->esc_row; d.esc = t->esc;
    d.rows = t->h.rows; d.cols = t->h.cols; d.cols_p = t->h.cols_p;
    d.T = t->h.tile; d.vbits = t->h.vbits; d.np = kvq_hqx_planes(t->h.vbits);
    d.off = t->h.rotate ? kvq_hqx_off(t->h.vbits) : 0;
    d.m = kvq_hqx_mult(t->h.lat); d.e8 = t->h.lat == KVQ_HQ_LAT_E8;
    d.rotate = t->h.rotate; d.a2 = t->h.lat == KVQ_HQ_LAT_A2; d.seed = t->h.seed;
    return d;
}

/** Scale of tile t (scode through the lut, or the float scale). */
__device__ __forceinline__ float kvq_hqx_tile_scale(const Dev &d, int64_t t) { return d.scode ? d.lut[d.scode[t]] : d.scale[t]; }

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

// Prepared activations of tg tokens in a tensor's scratch (hqx_fused.cu writes them): per
// tile sx (int8 scale) and xs (float sum), the 8-vector sums s8 and the int8 codes xq. For one
// token (tg = 1) s8 and xq are stored in the one-token product's lane order (hqx_gemv1.cu:
// kvq_gemv1_xq_at, kvq_gemv1_s8_at) and xq is padded to whole steps of 1024 coordinates.
struct Lay {
    size_t sx, xs, s8, xq, total;
};
static __host__ __device__ inline size_t lay_al16(size_t b) { return (b + 15) & ~(size_t)15; }
static __host__ __device__ inline Lay lay(int64_t cols_p, int T, int tg) {
    Lay l;
    const size_t tiles = (size_t)(cols_p / T);
    l.sx = 0;
    l.xs = l.sx + lay_al16(sizeof(float) * tiles * tg);
    l.s8 = l.xs + lay_al16(sizeof(float) * tiles * tg);
    l.xq = l.s8 + lay_al16(sizeof(int32_t) * (size_t)(cols_p / 8) * tg);
    l.total = l.xq + (tg == 1 ? (size_t)((cols_p + 1023) & ~(int64_t)1023) : lay_al16((size_t)cols_p * tg));
    return l;
}

// One-token lane order (hqx_gemv1.cu): step s covers chunks 16s..16s+15; lane l takes chunk
// c = 16s + l/2, half h = l%2: coordinates 64c + 16h + [0, 16) ("lo", the low nibbles of q
// bytes 16h..16h+15) and 64c + 32 + 16h + [0, 16) ("hi", their high nibbles). A step's xq is
// 1024 bytes: the 32 lanes' lo bytes (16 each, lane order), then their hi bytes, so each
// lane's 16-byte loads are consecutive across the warp. s8: the lane's four 8-vectors
// (2h, 2h+1, 4+2h, 5+2h of its chunk) as 16 consecutive bytes.
static __host__ __device__ inline int64_t kvq_gemv1_xq_at(int64_t i) {
    const int64_t c = i >> 6;
    const int k = (int)(i & 63);
    return ((c >> 4) << 10) + ((int64_t)(k >> 5) << 9) + ((((c & 15) << 1) | ((k >> 4) & 1)) << 4) + (k & 15);
}
static __host__ __device__ inline int64_t kvq_gemv1_s8_at(int64_t v) {
    const int64_t c = v >> 3;
    const int k = (int)(v & 7);
    return ((c * 2 + ((k >> 1) & 1)) << 2) + (k & 1) + ((k >> 2) << 1);
}

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
/** Benchmarks: one-token products skip the activation preparation (its scratch keeps the
 *  last one's), to time the product kernel alone. */
void kvq_cuda_hqx_skip_prep(int on);


#endif
