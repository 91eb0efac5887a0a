// Shared by the KV encoders (kernels/cuda/kv_attn.cu: int, KIVI, fp16; kv_enc.cu: TurboQuant,
// qturbo, turboquant-prod keys, OCTOPUS keys): one byte of a packed row of b-bit codes in the
// GPU layout (kv_attn.h, docs/KV.md "GPU execution layout"), and the launcher of kv_enc.cu's
// encoders, which kvq_gkv_append calls.
#ifndef KVQ_CUDA_KV_ENC_CUH
#define KVQ_CUDA_KV_ENC_CUH

#include <stdint.h>

#include "kernels/cuda/kv_attn.h"

/** Byte t of a packed row (head_dim Dd: 64 or 128) from the codes c (one byte a dim,
 *  shared memory): b/2 two-bit planes (dim i at bits 2i, 2i+1), then for odd b the one-bit
 *  plane (dim 16j + 4n + k at bit 16j + 4k + n; kvq_gkv_bit1_pos). Threads t < row bytes write. */
template <int B, int Dd = KVQ_GKV_HEAD_DIM>
__device__ __forceinline__ void kvq_gkv_write_row(uint8_t *row, const uint8_t *c, int t) {
    constexpr int RB = (B / 2) * (Dd / 4) + (B & 1) * (Dd / 8);
    if (t >= RB) return;
    uint32_t byte = 0;
    if (t < (B / 2) * (Dd / 4)) {
        const int pl = t / (Dd / 4), r = t % (Dd / 4);
#pragma unroll
        for (int k = 0; k < 4; k++) byte |= ((uint32_t)(c[4 * r + k] >> (2 * pl)) & 3u) << (2 * k);
    } else {
        const int r = t - (B / 2) * (Dd / 4);
#pragma unroll
        for (int bb = 0; bb < 8; bb++) {
            const int bp = 8 * r + bb, w = bp & 15, dim = (bp & ~15) + 4 * (w & 3) + (w >> 2);
            byte |= ((uint32_t)(c[dim] >> (B > 0 ? B - 1 : 0)) & 1u) << bb;
        }
    }
    row[t] = (uint8_t)byte;
}

/** Where an encoder block works (every encoder: kv_attn.cu's enc_pos, enc_kivi_k, and kv_enc.cu's): a launch
 *  over (positions, regions) works on region blockIdx.y from position p0 (+ *d_p0 in a graph-captured
 *  step); a step of several sequences (d_seq set: kvq_gkv_append_seqs) has blockIdx.y = row · n_kv + head,
 *  and works on region d_seq[row] · n_kv + head from position d_p0[row] + p0 (that row's position). */
__device__ __forceinline__ int kvq_gkv_enc_region(const int *d_seq, int n_kv) {
    return d_seq ? d_seq[blockIdx.y / n_kv] * n_kv + (int)(blockIdx.y % n_kv) : (int)blockIdx.y;
}
__device__ __forceinline__ int kvq_gkv_enc_p0(const int *d_p0, const int *d_seq, int n_kv, int p0) {
    return (d_p0 ? d_p0[d_seq ? blockIdx.y / n_kv : 0] : 0) + p0;
}

/** Encodes positions [p0, p0 + n) of every (sequence, KV head) of side s of cache c from its
 *  fp16 window ring (batch, n_kv, wcap, d) into the packed side: TURBO (turboquant, qturbo:
 *  s->quat set), TPROD, OCT and OCTQ at 2-4 bits, with the side's tables (cb, signs, and quat,
 *  mat, rho, cxi as the kind needs). d_p0: NULL, or a device int added to p0 (a graph-captured
 *  step; a block whose position is negative encodes nothing). d_seq: NULL, or a step of several
 *  sequences' rows (rows of them, n = 1; kvq_gkv_enc_region). Asynchronous on the library's
 *  stream. @return KVQ_OK, or KVQ_ERR_UNSUPPORTED / KVQ_ERR_ARG (a kind without an encoder here, a missing table). */
kvq_status kvq_gkv_encode_rot(const kvq_gkv_cache *c, const kvq_gkv_side *s, const void *ring, int p0, int n, const int *d_p0,
                              const int *d_seq, int rows, kvq_err *err);

#endif
