// Softmax and log-sum-exp: the reference (sequential) and the vectorized version
// (kvq_fast_expf); logsumexp sums in double for perplexity over large vocabularies.
#include "kernels/cpu/softmax.h"

#include <math.h>

#include "kernels/cpu/fastexp.h"

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

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

CLONES static double softmax_impl(float *x, int n) {
    float m = x[0];
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) {
        x[i] = kvq_fast_expf(x[i] - m);
        s += x[i];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] *= inv;
    return (double)m + log((double)s);
}

CLONES static double logsumexp_impl(const float *x, int n) {
    float m = x[0];
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += (double)kvq_fast_expf(x[i] - m);
    return (double)m + log(s);
}

// Exported entry points call the clones (clang resolves multiversioned functions only within
// the translation unit that defines them).
double kvq_softmax(float *x, int n) { return softmax_impl(x, n); }
double kvq_logsumexp(const float *x, int n) { return logsumexp_impl(x, n); }

void kvq_log_softmax_rows(float *x, int n, int V) {
    for (int t = 0; t < n; t++) {
        float *r = x + (size_t)t * V;
        double mx = r[0], s = 0.0;
        for (int v = 1; v < V; v++) mx = r[v] > mx ? r[v] : mx;
        for (int v = 0; v < V; v++) s += exp((double)r[v] - mx);
        const double lse = mx + log(s);
        for (int v = 0; v < V; v++) r[v] = (float)((double)r[v] - lse);
    }
}
