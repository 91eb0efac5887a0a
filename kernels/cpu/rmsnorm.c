// RMSNorm (fp32, eps inside the square root, weight applied after normalizing, as in
// transformers' LlamaRMSNorm): reference and the row-parallel fast path.
#include "kernels/cpu/rmsnorm.h"

#include <math.h>
#include <stddef.h>

#include "kernels/cpu/threads.h"

void kvq_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

static void row_fast(float *out, const float *x, const float *w, int n, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
#pragma omp simd
    for (int i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

void kvq_rmsnorm(float *out, const float *x, const float *w, int rows, int n, float eps,
                 int n_threads) {
#pragma omp parallel for num_threads(kvq_nthreads(n_threads)) if ((long)rows * n > 16384)
    for (int r = 0; r < rows; r++) row_fast(out + (size_t)r * n, x + (size_t)r * n, w, n, eps);
}
