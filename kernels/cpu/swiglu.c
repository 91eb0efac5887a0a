// silu(gate)·up for the MLP: reference on separate arrays and the fast path over the
// fused (gate | up) rows the model's single gate_up matmul produces.
#include "kernels/cpu/swiglu.h"

#include <math.h>
#include <stddef.h>

#include "kernels/cpu/threads.h"

void kvq_silu_mul_ref(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void kvq_silu_mul_fused(float *out, const float *gu, int rows, int n, int n_threads) {
#pragma omp parallel for num_threads(kvq_nthreads(n_threads)) if ((long)rows * n > 16384)
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * n, *u = g + n;
        float *o = out + (size_t)r * n;
        for (int i = 0; i < n; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}
