// The GPU verify kernel's order on the host (kernels/verify_score.h): 256 strided partial sums
// per row, then a pairwise tree. Tests hold it to libconv/verify's sequential sums within
// rounding, and the kernel to it within the device's exp/log ulps.
#include "kernels/cpu/verify_score.h"

#include <math.h>
#include <stddef.h>

#define NT KVQ_VSCORE_THREADS

static double tree(double *p) {
    for (int o = NT / 2; o > 0; o >>= 1)
        for (int i = 0; i < o; i++) p[i] += p[i + o];
    return p[0];
}

// Max and first argmax (the kernel's lanes each scan ascending, then keep the larger value,
// the smaller index among equals: the same answer as one ascending scan).
static int argmax(const float *x, int n) {
    int a = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[a]) a = v;
    return a;
}

// Lane t's partial takes entries t, t + NT, … in ascending order; walked a stride of NT at a
// time (contiguous reads, each lane's additions in the same order).
static double lse_order(const float *x, int n, float m) {
    double p[NT] = {0};
    for (int b = 0; b < n; b += NT)
        for (int t = 0; t < NT && b + t < n; t++) p[t] += exp((double)x[b + t] - (double)m);
    return (double)m + log(tree(p));
}

static void score_row(const float *r, const float *q, int32_t tg, int n, kvq_vscore *o) {
    o->top_ref = argmax(r, n);
    o->top_q = argmax(q, n);
    const double lr0 = lse_order(r, n, r[o->top_ref]), lq0 = lse_order(q, n, q[o->top_q]);
    double p[NT] = {0};
    for (int b = 0; b < n; b += NT)
        for (int t = 0; t < NT && b + t < n; t++) {
            const double lr = (double)r[b + t] - lr0, lq = (double)q[b + t] - lq0;
            p[t] += exp(lr) * (lr - lq);
        }
    o->lse_ref = lr0;
    o->lse_q = lq0;
    o->kld = tree(p);
    o->dp = exp((double)q[tg] - lq0) - exp((double)r[tg] - lr0);
    o->nll_ref = lr0 - (double)r[tg];
    o->nll_q = lq0 - (double)q[tg];
}

void kvq_verify_score_ref(const float *ref, const float *q, const int32_t *target, int rows, int vocab,
                          kvq_vscore *out) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < rows; i++)
        score_row(ref + (size_t)i * vocab, q + (size_t)i * vocab, target[i], vocab, &out[i]);
}
