// C reference of the GPU's verify scores (kernels/cuda/verify_score.cu): the same quantities in
// the same summation order (kernels/verify_score.h), so device and host differ only by the
// device's exp and log (CUDA's double exp/log are within 1 ulp; glibc's are correctly rounded).
#ifndef KVQ_KERNELS_CPU_VERIFY_SCORE_H
#define KVQ_KERNELS_CPU_VERIFY_SCORE_H

#include "kernels/verify_score.h"

/** out[r] = the scores of rows ref[r], q[r] (rows × vocab floats each) for target[r] (in
 *  [0, vocab): the caller checks). Rows in parallel (OpenMP); each row in the kernel's order. */
void kvq_verify_score_ref(const float *ref, const float *q, const int32_t *target, int rows, int vocab,
                          kvq_vscore *out);

#endif
