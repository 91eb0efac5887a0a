// silu(gate)·up for the MLP: reference on separate arrays and the fast path over the
// fused (gate | up) rows the model's single gate_up matmul produces.
#include "kernels/cpu/swiglu.h"

#include <math.h>
#include <stddef.h>

#include "kernels/cpu/fastexp.h"
#include "kernels/cpu/threads.h"

void kvq_silu_mul_ref(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

// e^-g through kvq_fast_expf (relative error < 3e-7, vectorized; libm's expf is a call per
// element: at one token it was ~6 % of a decode step of kvq-small-llama).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"))) static void
silu_mul_row(float *o, const float *g, const float *u, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) o[i] = g[i] / (1.0f + kvq_fast_expf(-g[i])) * u[i];
}

void kvq_silu_mul_fused(float *out, const float *gu, int rows, int n, int n_threads) {
#pragma omp parallel for num_threads(kvq_nthreads(n_threads)) if ((long)rows * n > 16384)
    for (int r = 0; r < rows; r++) silu_mul_row(out + (size_t)r * n, gu + (size_t)r * 2 * n, gu + (size_t)r * 2 * n + n, n);
}
