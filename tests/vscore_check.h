// The tolerance of kvq-verify's backend scores (kernels/verify_score.h: the GPU kernel and its C
// reference) against the host's sequential reference (kvq_verify_lse_exact, kvq_verify_kld_pos),
// per position, shared by tests/test_verify.c and tests/test_cuda_verify.c. The two differ by the
// summation order (and on the device by exp/log within 1 ulp), so:
//   lse, nll: |Δ| <= 1e-13·(1 + |lse|)      dp: |Δ| <= 1e-13
//   KLD: |Δ| <= 1e-12·Σ_v |p_v (lr_v − lq_v)| + 1e-13 + (1 + KLD)·b_lse(ref) + b_lse(q)
//        (the terms' magnitude, not the KLD: they cancel; and the two lse's own tolerances
//        b_lse = 1e-13·(1 + |lse|), which shift every term: ∂KLD/∂lse_q = 1, ∂KLD/∂lse_ref =
//        −(1 + KLD). Without them the bound failed the C reference itself on 128256-wide rows
//        of tied logits, session 17: its lse sits 0.18 of its bound from the sequential sum's)
//   argmaxes: equal (the first of equals); identical rows: KLD and Δp exactly 0.
#ifndef KVQ_TESTS_VSCORE_CHECK_H
#define KVQ_TESTS_VSCORE_CHECK_H

#include <math.h>
#include <stdint.h>

#include "kernels/verify_score.h"
#include "libconv/verify/verify.h"

/** Worst error seen, each over its own bound (<= 1 passes). */
typedef struct { double lse, kld, dp, nll; long n; } vscore_err;

static int vs_first_max(const float *x, int n) {
    int a = 0;
    for (int v = 1; v < n; v++)
        if (x[v] > x[a]) a = v;
    return a;
}

static void vs_worst(double *w, double e) { if (e > *w) *w = e; }

/** Checks one position's scores g against the host reference; @return 1 when within bounds. */
static int vscore_check(const float *ref, const float *q, int32_t t, int V, const kvq_vscore *g, vscore_err *w) {
    const double lr = kvq_verify_lse_exact(ref, V), lq = kvq_verify_lse_exact(q, V);
    double kl, dp, sabs = 0;
    int same;
    kvq_verify_kld_pos(ref, lr, q, lq, V, t, &kl, &dp, &same);
    for (int v = 0; v < V; v++) {
        const double a = (double)ref[v] - lr, b = (double)q[v] - lq;
        sabs += fabs(exp(a) * (a - b));
    }
    const double e_lse = fmax(fabs(g->lse_ref - lr) / (1 + fabs(lr)), fabs(g->lse_q - lq) / (1 + fabs(lq))) / 1e-13;
    const double e_nll = fmax(fabs(g->nll_ref - (lr - ref[t])) / (1 + fabs(lr)), fabs(g->nll_q - (lq - q[t])) / (1 + fabs(lq))) / 1e-13;
    const double e_kld = fabs(g->kld - kl) / (1e-12 * sabs + 1e-13 + 1e-13 * ((1 + fabs(kl)) * (1 + fabs(lr)) + (1 + fabs(lq))));
    const double e_dp = fabs(g->dp - dp) / 1e-13;
    vs_worst(&w->lse, e_lse);
    vs_worst(&w->nll, e_nll);
    vs_worst(&w->kld, e_kld);
    vs_worst(&w->dp, e_dp);
    w->n++;
    const int tops = g->top_ref == vs_first_max(ref, V) && g->top_q == vs_first_max(q, V) && same == (g->top_ref == g->top_q);
    return e_lse <= 1 && e_nll <= 1 && e_kld <= 1 && e_dp <= 1 && tops;
}

#endif
