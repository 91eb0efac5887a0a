// kvq-verify's per-position scores of a (source, converted) pair of logit rows, as the GPU
// kernel (kernels/cuda/verify_score.cu) and its C reference (kernels/cpu/verify_score.c) return
// them, with the summation order both follow. Usable from C and CUDA.
//
// Order (KVQ_VSCORE_THREADS = 256 lanes): lane t sums the terms of entries t, t + 256, t + 512, …
// in ascending order, in double; the 256 partials are then added pairwise, p[i] += p[i + o] for
// o = 128, 64, …, 1 (result p[0]). Sums: Σ exp(x − max) per row (log-sum-exp, as lse_exact in
// libconv/verify/verify_eval.c) and Σ exp(lr)·(lr − lq), products and sums rounded separately
// (no fused multiply-add), as kvq_verify_kld_pos. Maxima and argmaxes do not depend on order
// (the first of equals). Rows with a NaN give NaN sums; their argmax is unspecified.
#ifndef KVQ_KERNELS_VERIFY_SCORE_H
#define KVQ_KERNELS_VERIFY_SCORE_H

#include <stdint.h>

#define KVQ_VSCORE_THREADS 256

/** One position: ref = the source's logits, q = the converted model's. */
typedef struct {
    double lse_ref, lse_q;   // log Σ exp of each row (libm-accurate exp and log, double sums)
    double kld;              // Σ p_ref · (log p_ref − log p_q)
    double dp;               // p_q(target) − p_ref(target)
    double nll_ref, nll_q;   // lse − logit[target]
    int32_t top_ref, top_q;  // argmax of each row (the first of equals)
} kvq_vscore;

#ifndef __cplusplus
_Static_assert(sizeof(kvq_vscore) == 56, "kvq_vscore: 6 doubles and 2 int32");
#endif

#endif
