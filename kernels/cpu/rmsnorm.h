// RMSNorm as transformers computes it in fp32: y = w · x / sqrt(mean(x²) + eps).
#ifndef KVQ_KERNELS_RMSNORM_H
#define KVQ_KERNELS_RMSNORM_H

/** One row of n: out may alias x. */
void kvq_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps);
/** rows rows of n, each normalized independently; OpenMP over rows, vectorized. */
void kvq_rmsnorm(float *out, const float *x, const float *w, int rows, int n, float eps,
                 int n_threads);

#endif
