// GPU products from the PQ execution layout (kernels/pq_layout.h): the packed `pq` and `qet`
// tensors the CPU runtime holds, uploaded as they are (indices, codebooks, switch fields), so a
// PQ/QET model is as small on the GPU as in host memory. PQ (levels 0): per batch of tokens one
// table L_s[j][c] = ⟨C_s[j][c], x_j⟩ per stage in a caller's scratch, then per row a sum of
// table entries picked by its indices. QET (levels 3): per product the codebooks expanded to
// float in a caller's scratch, then per (row, block of 8 inputs) one load a weight and stage and
// the swap tree undone in registers; or (KVQ_CUDA_QET=decode, the previous kernel) each weight
// decoded from the codebook blob as it is read, with no scratch.
// Plain C header: C callers and kernels/cuda/no_cuda.c share it.
#ifndef KVQ_CUDA_PQX_H
#define KVQ_CUDA_PQX_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"
#include "kernels/pq_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvq_cuda_pqx kvq_cuda_pqx; // a pqx tensor resident on the device

/** Copies w's arrays to the device (w stays the caller's): PQ layouts of every codebook type
 *  and index width (uint8, uint16, lane-packed), QET layouts (levels 3). @return KVQ_OK,
 *  KVQ_ERR_NOMEM / KVQ_ERR_IO naming the CUDA call, KVQ_ERR_UNSUPPORTED without a device or
 *  for a layout this file does not run (levels other than 0 and 3). */
kvq_status kvq_cuda_pqx_upload(const kvq_pqx *w, kvq_cuda_pqx **out, kvq_err *err);
void kvq_cuda_pqx_free(kvq_cuda_pqx *t); // NULL is a no-op
/** Device bytes of the layout's arrays (what the products read; kvq_pqx_bytes of the host
 *  layout plus the few bytes of padding the QET codebook reader needs). */
size_t kvq_cuda_pqx_bytes(const kvq_cuda_pqx *t);
/** Bytes of scratch kvq_cuda_pqx_matmul needs for t (PQ: the tables of one batch of tokens;
 *  QET: its expanded codebooks, Σ_s cols·k_s floats; under KVQ_CUDA_QET=smem(2) the per-group
 *  partials, rows·(cols/64)·8 floats; 0 under KVQ_CUDA_QET=decode). A caller
 *  running several tensors one after another on the stream sizes one
 *  scratch to the largest. */
size_t kvq_cuda_pqx_scratch_bytes(const kvq_cuda_pqx *t);
/** Which QET kernel t's products run: 1 expanded codebooks (default), 0 the per-weight decode
 *  (KVQ_CUDA_QET=decode at upload), 2 codebooks staged in shared memory (KVQ_CUDA_QET=smem; 1
 *  instead where they cannot be held there as exact 16-bit words: f32 codebooks, CQO codes over
 *  16 bits, or more shared bytes than a block may have), 3 the same tables and bits built for
 *  latency (KVQ_CUDA_QET=smem2; 2 instead where a CQO step is infinite, NaN or >= 2^100, 1 where
 *  2 would be). An unknown value fails the upload with KVQ_ERR_ARG; -1 for PQ. */
int kvq_cuda_pqx_qet_kernel(const kvq_cuda_pqx *t);
/** Tokens per table batch of a PQ tensor (at most 8; fewer where 8 tokens' tables would pass
 *  256 MiB); 8 for QET (its tokens per launch). */
int kvq_cuda_pqx_batch(const kvq_cuda_pqx *t);
/** Y (n_tok, ·) (+)= X (n_tok, cols) · Wᵀ for up to 3 tensors of equal cols (fused q/k/v,
 *  gate/up): part p writes rows row0[p].. of each token's output, row stride ldy; accumulate = 1
 *  adds into Y. d_scratch: kvq_cuda_pqx_scratch_bytes of the largest part (NULL when all are
 *  QET under KVQ_CUDA_QET=decode). Device pointers, the library's stream (kvq_cuda_stream); no allocation or
 *  synchronization: capturable in a CUDA graph. Results: the CPU kernels' (kernels/cpu/pq.c,
 *  qetx.c) within float rounding (the sums run in another order, stated in pqx.cu). */
kvq_status kvq_cuda_pqx_matmul(kvq_cuda_pqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                               float *d_y, int64_t ldy, int accumulate, void *d_scratch, kvq_err *err);
/** Host convenience for tests: copies x (n_tok, cols) in, runs one tensor, copies y
 *  (n_tok, rows) out, synchronizes (allocates its buffers and scratch). */
kvq_status kvq_cuda_pqx_matmul_host(kvq_cuda_pqx *t, const float *h_x, int n_tok, float *h_y, kvq_err *err);
/** Median time in ms of reps products of n_tok tokens on random activations (CUDA events;
 *  buffers allocated by the call). */
kvq_status kvq_cuda_pqx_time(kvq_cuda_pqx *t, int n_tok, int reps, double *ms, kvq_err *err);

#ifdef __cplusplus
}
#endif
#endif
