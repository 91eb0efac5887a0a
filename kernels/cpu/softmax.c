// Softmax and log-sum-exp: the reference (sequential) and the vectorized version
// used by attention; logsumexp accumulates in double for perplexity over large vocabs.
#include "kernels/cpu/softmax.h"

#include <math.h>

double kvq_softmax_ref(float *x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    float s = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= s;
    return (double)m + log((double)s);
}

double kvq_softmax(float *x, int n) {
    float m = x[0];
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    float s = 0.0f;
    for (int i = 0; i < n; i++) x[i] = expf(x[i] - m);
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += x[i];
    float inv = 1.0f / s;
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] *= inv;
    return (double)m + log((double)s);
}

double kvq_logsumexp(const float *x, int n) {
    float m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m) m = x[i];
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)(x[i] - m));
    return (double)m + log(s);
}
