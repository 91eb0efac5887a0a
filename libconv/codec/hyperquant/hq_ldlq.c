// LDLQ for HyperQuant (QuIP#'s block LDL rounding, docs/HYPERQUANT.md "LDLQ"): from a layer's
// input covariance H (cols × cols), the error-feedback coefficients in the rotated domain the
// codes live in. With H_rot = R H Rᵀ (R the per-tile RHT) factored as U D Uᵀ, U unit block-upper
// triangular in blocks of the lattice dimension n, rounding each row's blocks left to right at
// target_k = y_k + Σ_{i<k} U_ikᵀ e_i (e = y − ŷ, the error of the blocks already rounded) makes
// the proxy loss e H_rot eᵀ = Σ_k q_kᵀ D_k q_k, q_k the rounding error of block k's target.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/wht.h"
#include "libconv/codec/hyperquant/hq_impl.h"

// Each row of the (C, C) matrix m ← row · blockdiag(H_T D_j)ᵀ, i.e. every tile of the row rotated
// as the encoder rotates a weight row (signs, then kvq_wht_f64's butterfly; unnormalized: a scale LDLQ ignores).
static void rotate_rows(double *m, int64_t C, int T, const float *sgn) {
    for (int64_t i = 0; i < C; i++) {
        double *r = m + i * C;
        for (int64_t c0 = 0; c0 < C; c0 += T) {
            for (int k = 0; k < T; k++) r[c0 + k] *= (double)sgn[c0 + k];
            kvq_wht_f64(r + c0, T);
        }
    }
}

static void transpose(double *m, int64_t C) {
    for (int64_t i = 0; i < C; i++)
        for (int64_t j = i + 1; j < C; j++) {
            double t = m[i * C + j];
            m[i * C + j] = m[j * C + i];
            m[j * C + i] = t;
        }
}

kvq_status kvq_hq_ldlq_feedback(const double *H, int64_t cols, int64_t cols_p, int T, const float *sgn, double damp,
                                int n, float **out, kvq_err *err) {
    *out = NULL;
    const int64_t C = cols_p, K = C / n;
    if (C % T || T % n || cols > cols_p || !(damp >= 0.0))
        return kvq_err_set(err, KVQ_ERR_ARG, "hyperquant ldlq: bad shape (cols %lld, padded %lld, tile %d, damp %g)",
                           (long long)cols, (long long)cols_p, T, damp);
    double *m = calloc((size_t)(C * C), sizeof(double)), *Vi = malloc(sizeof(double) * (size_t)(n * n));
    float *A = malloc(sizeof(float) * (size_t)(n * n) * (size_t)(K * (K - 1) / 2 + 1));
    if (!m || !Vi || !A) {
        free(m), free(Vi), free(A);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "hyperquant ldlq: out of memory for a %lld × %lld covariance", (long long)C,
                           (long long)C);
    }
    for (int64_t i = 0; i < cols; i++) memcpy(m + i * C, H + i * cols, sizeof(double) * (size_t)cols); // padding: zeros
    rotate_rows(m, C, T, sgn); // H Rᵀ
    transpose(m, C);           // R H (H symmetric)
    rotate_rows(m, C, T, sgn); // R H Rᵀ
    double tr = 0.0;
    for (int64_t i = 0; i < C; i++) tr += m[i * C + i];
    const double lam = damp * tr / (double)C;
    for (int64_t i = 0; i < C; i++) m[i * C + i] += lam;
    // (One thread: C³/6 multiply-adds, 0.6·10⁹ at C = 1536 — an OpenMP region per column cost far
    // more than that on a loaded machine.)
    // Cholesky of the reversed matrix, H_rev = L Lᵀ, in place in the lower triangle of m indexed
    // reversed: then V[a][b] = L[C-1-a][C-1-b] is upper triangular with H_rot = V Vᵀ.
#define HR(a, b) m[(C - 1 - (a)) * C + (C - 1 - (b))]
    kvq_status st = KVQ_OK;
    for (int64_t j = 0; j < C && !st; j++) {
        double d = HR(j, j);
        for (int64_t k = 0; k < j; k++) d -= HR(j, k) * HR(j, k);
        if (!(d > 0.0)) {
            st = kvq_err_set(err, KVQ_ERR_NUMERIC, "hyperquant ldlq: the covariance is not positive definite (pivot %lld: %g; "
                             "raise the damping)", (long long)j, d);
            break;
        }
        const double ljj = sqrt(d);
        HR(j, j) = ljj;
        for (int64_t i = j + 1; i < C; i++) {
            double s = HR(i, j);
            for (int64_t k = 0; k < j; k++) s -= HR(i, k) * HR(j, k);
            HR(i, j) = s / ljj;
        }
    }
#define V(a, b) m[(a) * C + (b)] // V[a][b] (a ≤ b) = L[C-1-a][C-1-b]: the upper triangle of m
    // Block k (coordinates kn .. kn+n−1): A_k = V[0:kn, block k] · V_kkⁱⁿᵛ, (kn × n) row-major.
    for (int64_t k = 1; k < K && !st; k++) {
        const int64_t b0 = k * n;
        memset(Vi, 0, sizeof(double) * (size_t)(n * n));
        for (int c = n - 1; c >= 0; c--) { // upper-triangular inverse, column by column
            Vi[c * n + c] = 1.0 / V(b0 + c, b0 + c);
            for (int r = c - 1; r >= 0; r--) {
                double s = 0.0;
                for (int q = r + 1; q <= c; q++) s += V(b0 + r, b0 + q) * Vi[q * n + c];
                Vi[r * n + c] = -s / V(b0 + r, b0 + r);
            }
        }
        float *Ak = A + (size_t)(n * n) * (size_t)(k * (k - 1) / 2);
        for (int64_t i = 0; i < b0; i++)
            for (int c = 0; c < n; c++) {
                double s = 0.0;
                for (int q = 0; q <= c; q++) s += V(i, b0 + q) * Vi[q * n + c];
                Ak[i * n + c] = (float)s;
            }
    }
#undef V
#undef HR
    free(m);
    free(Vi);
    if (st) { free(A); return st; }
    *out = A;
    return KVQ_OK;
}
