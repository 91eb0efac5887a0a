// Walsh–Hadamard butterfly (see wht.h). The inner loops are plain so the compiler
// vectorizes them; each output is one add or subtract, so vectorization does not change
// rounding and the fast path stays bit-identical to the scalar loop.
#include "kernels/cpu/wht.h"

void kvq_wht(float *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

void kvq_wht_ref(const float *x, double *y, int n) {
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++) s += (__builtin_popcount((unsigned)(i & j)) & 1) ? -(double)x[j] : (double)x[j];
        y[i] = s;
    }
}
