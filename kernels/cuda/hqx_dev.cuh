// The device-side view of an uploaded hqx tensor (hqx.h), shared by the products
// (hqx_matvec.cu: rotation + one warp per row; hqx_fused.cu: the fused int8 product).
#ifndef KVQ_CUDA_HQX_DEV_CUH
#define KVQ_CUDA_HQX_DEV_CUH

#include <stdint.h>

#include "kernels/cuda/hqx.h"

struct kvq_cuda_hqx {
    kvq_hqx h;           // host copy of the scalars; array pointers below are device pointers
    uint8_t *q, *cb, *scode;
    uint64_t *hb;
    float *scale, *lut, *zero, *xr, *xs, *sx;
    int8_t *xq;
    int32_t *s8;
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
    const float *scale, *lut, *zero, *xr, *xs, *sx;
    const int8_t *xq;
    const int32_t *s8;
    const uint32_t *esc_row, *esc;
    int64_t rows, cols, cols_p;
    int T, vbits, np, off, m, e8, rotate, a2;
    uint64_t seed;
};

static inline Dev dev_of(const kvq_cuda_hqx *t) {
    Dev d;
    d.q = t->q; d.cb = t->cb; d.scode = t->scode; d.hb = t->hb;
    d.scale = t->scale; d.lut = t->lut; d.zero = t->zero; d.xr = t->xr; d.xs = t->xs;
    d.sx = t->sx; d.xq = t->xq; d.s8 = t->s8;
    d.esc_row = t->esc_row; d.esc = t->esc;
    d.rows = t->h.rows; d.cols = t->h.cols; d.cols_p = t->h.cols_p;
    d.T = t->h.tile; d.vbits = t->h.vbits; d.np = kvq_hqx_planes(t->h.vbits);
    d.off = t->h.rotate ? kvq_hqx_off(t->h.vbits) : 0;
    d.m = kvq_hqx_mult(t->h.lat); d.e8 = t->h.lat == KVQ_HQ_LAT_E8;
    d.rotate = t->h.rotate; d.a2 = t->h.lat == KVQ_HQ_LAT_A2; d.seed = t->h.seed;
    return d;
}


#endif
