// kvq-verify's scoring on the GPU (kernels/cuda/verify_score.cu): the source's and a converted
// model's logits stay on the device and only per-position numbers come back (issue 12). Plain C
// header, shared by the GPU backend, the tests and kernels/cuda/no_cuda.c.
#ifndef KVQ_CUDA_VERIFY_SCORE_H
#define KVQ_CUDA_VERIFY_SCORE_H

#include "formats/error.h"
#include "kernels/verify_score.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Queues, on the forward pass's stream, d_out[r] = the scores of rows d_ref[r], d_q[r] (rows ×
 *  vocab floats each) for d_target[r], one block a row, in kernels/verify_score.h's order (the C
 *  reference is kvq_verify_score_ref). Every pointer is device memory; targets must lie in
 *  [0, vocab) (not checked here). @return KVQ_OK or the launch error. */
kvq_status kvq_cuda_verify_score(const float *d_ref, const float *d_q, const int32_t *d_target, int rows, int vocab,
                                 kvq_vscore *d_out, kvq_err *err);

#ifdef __cplusplus
}
#endif

#endif
