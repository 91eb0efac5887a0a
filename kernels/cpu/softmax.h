// Numerically stable softmax and log-sum-exp over one row (max subtracted first).
#ifndef KVQ_KERNELS_SOFTMAX_H
#define KVQ_KERNELS_SOFTMAX_H

/** In place; @return the row's log-sum-exp (log Σ exp x_i) before normalizing. */
double kvq_softmax_ref(float *x, int n);
/** Same, vectorized max and sums (summation order differs from the reference). */
double kvq_softmax(float *x, int n);
/** log Σ exp x_i: terms by kvq_fast_expf (rel. error < 3e-7), summed in double. */
double kvq_logsumexp(const float *x, int n);
/** Rows of x (n rows of V floats) replaced by their log-softmax, in double precision (exp, not
 *  the fast exp): x - (max + log Σ exp(x - max)) per row. */
void kvq_log_softmax_rows(float *x, int n, int V);

#endif
