// Tensor-core products from the hqx execution layout (kernels/hq_layout.h) for many tokens
// (prefill, verification): the product stays in the rotated domain, W·x = Σ_t scale·⟨c, xr⟩,
// so each part's weights are decoded once per call into a bf16 scratch of rotated-domain
// values wr = scale[t]·c (RTN: q·scale + zero, no rotation) — no inverse Hadamard — and the
// activations rotated as the other products rotate them (xr = g ⊙ H·D·x, padded columns
// included), rounded to bf16; then cuBLAS multiplies the two (gemm_tc.cu). The weights are
// decoded in row blocks of at most KVQ_HQX_TC_BLOCK values, so the scratch stays bounded
// whatever the matrix (an lm_head of 128256 rows takes several blocks).
#include <cuda_bf16.h>
#include <stdint.h>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/hqx.h"
#include "kernels/cuda/hqx_dev.cuh"
#include "kernels/cuda/ops.h"

#define KVQ_HQX_TC_BLOCK ((int64_t)64 << 20) // decoded values per block (128 MiB of bf16)
static int64_t g_block = 0;                  // tests: another block size (0: the default)

extern "C" void kvq_cuda_hqx_set_tc_block(int64_t values) { g_block = values > 0 ? values : 0; }

template <typename O> __device__ __forceinline__ O tc_out(float v);
template <> __device__ __forceinline__ float tc_out<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 tc_out<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The stored code value of coordinate k (0..63) of chunk g: c = m·(u − off) + cb, u from the
// nibble (or byte) and the bit planes; escapes are added by hqx_tc_escapes.
__device__ __forceinline__ int tc_code(const Dev &d, int64_t g, int k) {
    int u;
    if (d.vbits == 8) u = d.q[g * 64 + k];
    else {
        const uint8_t b = d.q[g * 32 + (k & 31)];
        u = k < 32 ? (b & 15) : (b >> 4);
        for (int p = 0; p < d.np; p++) u |= (int)((d.hb[g * d.np + p] >> kvq_hqx_gpu_pbit(k)) & 1) << (4 + p);
    }
    const int cb = d.e8 ? (d.cb[g] >> (k >> 3)) & 1 : 0;
    return d.m * (u - d.off) + cb;
}

// Rows [r0, r0 + nr) decoded into out (nr, cols_p): one thread per 8 coordinates b0..b0+7 and
// their partners 32 on (the low and high nibbles of 8 bytes), 16-byte loads and stores.
template <typename O>
__global__ void hqx_tc_decode(Dev d, int64_t r0, int64_t nr, O *__restrict__ out) {
    const int64_t cpr = d.cols_p / 64, tpr = d.cols_p / d.T;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; // (row, chunk, quarter)
    if (i >= nr * cpr * 4) return;
    const int b0 = 8 * (int)(i & 3);
    const int64_t lc = i >> 2, row = r0 + lc / cpr, cr = lc % cpr, g = row * cpr + cr;
    uint8_t lo[8], hi[8];
    if (d.vbits == 8) {
        const uint2 a = *(const uint2 *)(d.q + g * 64 + b0), b = *(const uint2 *)(d.q + g * 64 + 32 + b0);
        memcpy(lo, &a, 8);
        memcpy(hi, &b, 8);
    } else {
        const uint2 a = *(const uint2 *)(d.q + g * 32 + b0);
        uint8_t raw[8];
        memcpy(raw, &a, 8);
#pragma unroll
        for (int k = 0; k < 8; k++) { lo[k] = raw[k] & 15; hi[k] = raw[k] >> 4; }
        for (int p = 0; p < d.np; p++) {
            const uint64_t wd = kvq_hqx_hb_std(d.hb[g * d.np + p]);
            const uint32_t bl = (uint32_t)(wd >> b0) & 0xff, bh = (uint32_t)(wd >> (b0 + 32)) & 0xff;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                lo[k] |= (uint8_t)(((bl >> k) & 1) << (4 + p));
                hi[k] |= (uint8_t)(((bh >> k) & 1) << (4 + p));
            }
        }
    }
    int cbl = 0, cbh = 0;
    if (d.e8) {
        const uint32_t c = d.cb[g];
        cbl = (c >> (b0 / 8)) & 1;
        cbh = (c >> (4 + b0 / 8)) & 1;
    }
    const int64_t t = row * tpr + (cr * 64) / d.T;
    const float s = kvq_hqx_tile_scale(d, t), z = d.zero ? d.zero[t] : 0.0f;
    O vl[8], vh[8];
#pragma unroll
    for (int k = 0; k < 8; k++) {
        vl[k] = tc_out<O>(fmaf((float)(d.m * ((int)lo[k] - d.off) + cbl), s, z));
        vh[k] = tc_out<O>(fmaf((float)(d.m * ((int)hi[k] - d.off) + cbh), s, z));
    }
    O *o = out + (row - r0) * d.cols_p + cr * 64 + b0;
#pragma unroll
    for (int k = 0; k < 8; k++) { o[k] = vl[k]; o[32 + k] = vh[k]; }
}

// The escapes of rows [r0, r0 + nr): the value rewritten from the clamped code plus m·delta.
template <typename O>
__global__ void hqx_tc_escapes(Dev d, int64_t r0, int64_t nr, O *__restrict__ out) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= nr) return;
    const int64_t row = r0 + r, cpr = d.cols_p / 64, tpr = d.cols_p / d.T;
    for (uint32_t e = d.esc_row[row]; e < d.esc_row[row + 1]; e++) {
        const uint32_t en = kvq_hqx_esc_at(d, row, e);
        const int64_t col = kvq_hqx_esc_col(en);
        const int c = tc_code(d, row * cpr + col / 64, (int)(col & 63)) + d.m * kvq_hqx_esc_delta(en);
        const int64_t t = row * tpr + col / d.T;
        out[r * d.cols_p + col] = tc_out<O>(fmaf((float)c, kvq_hqx_tile_scale(d, t), d.zero ? d.zero[t] : 0.0f));
    }
}

// xr (T tokens, cols_p) rotated as hqx_matvec.cu's hqx_rotate (the CPU's butterfly order),
// rounded to bf16; RTN: x itself (zero in padded columns). Block (tile column, token).
__global__ void hqx_tc_rotate(Dev d, const float *__restrict__ x, __nv_bfloat16 *__restrict__ xr) {
    extern __shared__ float s[];
    const int j = blockIdx.x, tok = blockIdx.y, i = threadIdx.x, T = d.T;
    const int64_t col = (int64_t)j * T + i;
    float v = col < d.cols ? x[(int64_t)tok * d.cols + col] : 0.0f;
    if (d.rotate) v = kvq_hqx_rotate_coord(d, j, i, v, s); // uniform over the block: its barriers are safe
    xr[(int64_t)tok * d.cols_p + col] = __float2bfloat16_rn(v);
}

template <typename O> static kvq_status decode_rows(const Dev &d, int64_t r0, int64_t nr, O *out, kvq_err *err) {
    const int64_t n = nr * (d.cols_p / 64) * 4;
    hqx_tc_decode<O><<<(unsigned)((n + 255) / 256), 256, 0, kvq_cuda_stream()>>>(d, r0, nr, out);
    CU_LAUNCHED("hqx_tc_decode");
    hqx_tc_escapes<O><<<(unsigned)((nr + 127) / 128), 128, 0, kvq_cuda_stream()>>>(d, r0, nr, out);
    CU_LAUNCHED("hqx_tc_escapes");
    return KVQ_OK;
}

extern "C" kvq_status kvq_cuda_hqx_decode_rot(kvq_cuda_hqx *t, int64_t r0, int64_t nr, void *d_out, int bf16, kvq_err *err) {
    if (r0 < 0 || nr < 0 || r0 + nr > t->h.rows) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: rows [%lld, +%lld) out of range",
                                                                    (long long)r0, (long long)nr);
    if (!nr) return KVQ_OK;
    const Dev d = dev_of(t);
    return bf16 ? decode_rows(d, r0, nr, (__nv_bfloat16 *)d_out, err) : decode_rows(d, r0, nr, (float *)d_out, err);
}

extern "C" kvq_status kvq_cuda_hqx_matmul_tc(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                                            float *d_y, int64_t ldy, int accumulate, kvq_err *err) {
    if (n < 1 || n > MAXP) return kvq_err_set(err, KVQ_ERR_ARG, "cuda: %d parts (1..%d)", n, MAXP);
    if (n_tok <= 0) return KVQ_OK;
    for (int p = 0; p < n; p++) {
        const kvq_cuda_hqx *w = t[p];
        if (w->h.tile < 64 || w->h.tile > 1024 || (w->h.tile & (w->h.tile - 1)))
            return kvq_err_set(err, KVQ_ERR_UNSUPPORTED, "cuda: tile %d (the tensor-core product takes 64..1024)", w->h.tile);
        const Dev d = dev_of(w);
        void *xr = NULL, *wr = NULL;
        kvq_status s = kvq_cuda_tc_scratch(0, sizeof(__nv_bfloat16) * (size_t)n_tok * (size_t)w->h.cols_p, &xr, err);
        if (s) return s;
        hqx_tc_rotate<<<dim3((unsigned)(w->h.cols_p / w->h.tile), (unsigned)n_tok), (unsigned)w->h.tile,
                        sizeof(float) * w->h.tile, kvq_cuda_stream()>>>(d, d_x, (__nv_bfloat16 *)xr);
        CU_LAUNCHED("hqx_tc_rotate");
        int64_t blk = (g_block ? g_block : KVQ_HQX_TC_BLOCK) / w->h.cols_p;
        if (blk > w->h.rows) blk = w->h.rows;
        if (blk < 1) blk = 1;
        if ((s = kvq_cuda_tc_scratch(1, sizeof(__nv_bfloat16) * (size_t)blk * (size_t)w->h.cols_p, &wr, err))) return s;
        for (int64_t r0 = 0; r0 < w->h.rows; r0 += blk) {
            const int64_t nr = w->h.rows - r0 < blk ? w->h.rows - r0 : blk;
            if ((s = decode_rows(d, r0, nr, (__nv_bfloat16 *)wr, err))) return s;
            if ((s = kvq_cuda_gemm_bf16(wr, w->h.cols_p, xr, w->h.cols_p, d_y + row0[p] + r0, ldy, n_tok, nr, w->h.cols_p,
                                        accumulate, err)))
                return s;
        }
    }
    return KVQ_OK;
}
