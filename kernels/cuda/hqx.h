// GPU products from the hqx execution layout (kernels/hq_layout.h): the same packed tensors
// the CPU runtime holds, uploaded once; y = W·x with the activation rotated once per input
// (one block per tile column: sign flip + in-shared-memory Walsh–Hadamard, the CPU's butterfly
// order) and one warp per output row reading 16 codes per lane per step (coalesced 256-byte
// segments of nibbles). Plain C header: C callers and tests/cuda_stub.c share it.
#ifndef KVQ_CUDA_HQX_H
#define KVQ_CUDA_HQX_H

#include <stddef.h>

#include "formats/error.h"
#include "kernels/hq_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvq_cuda_hqx kvq_cuda_hqx; // a packed tensor resident on the device

/** Copies w's arrays to the device (w stays the caller's). @return KVQ_OK, KVQ_ERR_NOMEM /
 *  KVQ_ERR_IO naming the CUDA call, KVQ_ERR_UNSUPPORTED without a device. */
kvq_status kvq_cuda_hqx_upload(const kvq_hqx *w, kvq_cuda_hqx **out, kvq_err *err);
void kvq_cuda_hqx_free(kvq_cuda_hqx *t); // NULL is a no-op
/** Device bytes of the packed tensor (the arrays a product reads). */
size_t kvq_cuda_hqx_bytes(const kvq_cuda_hqx *t);
/** Launches y = W·x on the default stream: d_x (cols floats) and d_y (rows floats) are
 *  device pointers. int8 = 0: float activations (the CPU exact mode within rounding);
 *  1: int8 activations per tile and dp4a (the CPU int8 mode within rounding). */
kvq_status kvq_cuda_hqx_matvec(kvq_cuda_hqx *t, const float *d_x, float *d_y, int int8, kvq_err *err);
/** Host convenience: copies x in, runs, copies y out, synchronizes. */
kvq_status kvq_cuda_hqx_matvec_host(kvq_cuda_hqx *t, const float *h_x, float *h_y, int int8, kvq_err *err);
/** Median time in ms of reps launches of the product alone (rotation included), by CUDA
 *  events, on random activations in device buffers the call allocates. */
kvq_status kvq_cuda_hqx_time(kvq_cuda_hqx *t, int reps, int int8, double *ms, kvq_err *err);

#ifdef __cplusplus
}
#endif
#endif
