// Matrix products of activations with weight matrices, the runtime's hot loop:
// Y (T, out) = X (T, in) · Wᵀ with W (out, in) row-major as checkpoints store it, held
// as fp32 or bf16 (bf16 halves the bytes decode streams). fp32 accumulation always.
#ifndef KVQ_KERNELS_MATMUL_H
#define KVQ_KERNELS_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"

/** Plain reference: one dot product per output, in order. w is F32 or BF16. */
void kvq_matmul_ref(float *y, const float *x, const void *w, kvq_dtype wt, int T, int in, int out);

/** Floats of scratch kvq_matmul needs for T tokens of width in (bf16 weights: x with each
 *  32-block's even and odd elements regrouped; 0 for fp32, where scratch may be NULL). */
size_t kvq_matmul_scratch(kvq_dtype wt, int T, int in);

/** Fast path: OpenMP over output rows (n_threads <= 0: OpenMP default), register
 *  tiles of 4 rows × 4 tokens, vectorized (AVX-512/AVX2 clones chosen at run time).
 *  T == 1 is the decode matrix-vector product. Results differ from the reference
 *  only by summation order. scratch holds kvq_matmul_scratch(wt, T, in) floats, the
 *  caller's (a model keeps one in its arena: no allocation per call). */
void kvq_matmul(float *y, const float *x, const void *w, kvq_dtype wt, int T, int in, int out,
                float *scratch, int n_threads);

/** y (T tokens, rows; token stride ldy) = x · Wᵀ for a matrix held in a packed form: its rows
 *  decoded by row(w, r, out) (out: cols floats) in blocks of `block` rows (the threads share a
 *  block), each block through kvq_matmul in fp32 — the decoded model's numbers. scratch holds
 *  block·cols + T·block floats. */
void kvq_matmul_decoded_rows(void (*row)(const void *w, int64_t r, float *out), const void *w, int64_t rows,
                             int64_t cols, int block, const float *x, int T, float *y, int64_t ldy, float *scratch,
                             int n_threads);

/** Reads bytes at p once (OpenMP-parallel, vectorized) and returns a checksum so the
 *  read cannot be optimized away: the memory-roofline probe decode is compared with. */
uint64_t kvq_stream_read(const void *p, size_t bytes, int n_threads);

#endif
