// Helpers shared by the KV codecs: seeded generator, normalized Walsh-Hadamard
// transform, grid Lloyd-Max for 1-D densities, LSB-first bit packing, quaternions.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/wht.h"
#include "kernels/splitmix.h"
#include "libconv/kv/kvcodec.h"

uint64_t kvq_kvrng_u64(kvq_kvrng *r) {
    return kvq_splitmix64_next(&r->s);
}

double kvq_kvrng_unif(kvq_kvrng *r) { return (double)(kvq_kvrng_u64(r) >> 11) * 0x1.0p-53; }

double kvq_kvrng_normal(kvq_kvrng *r) {
    double u1 = kvq_kvrng_unif(r), u2 = kvq_kvrng_unif(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

int kvq_is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

void kvq_kv_wht(float *x, int n) {
    kvq_wht(x, n); // kernels/cpu/wht.c: unnormalized butterfly
    float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] *= s;
}

// ---- Lloyd-Max on a grid ----
// Cells of width h; prefix sums of the cell masses, first and second moments give
// every interval integral in O(1), interpolating linearly inside the cut cell.

#define LM_GRID (1 << 17)

typedef struct { const double *p0, *p1, *p2; double lo, h; int n; } lm_grid;

static void lm_at(const lm_grid *g, double b, double *m0, double *m1, double *m2) {
    double t = (b - g->lo) / g->h;
    if (t <= 0) { *m0 = *m1 = *m2 = 0; return; }
    if (t >= g->n) { *m0 = g->p0[g->n]; *m1 = g->p1[g->n]; *m2 = g->p2[g->n]; return; }
    int i = (int)t;
    double f = t - i;
    *m0 = g->p0[i] + f * (g->p0[i + 1] - g->p0[i]);
    *m1 = g->p1[i] + f * (g->p1[i + 1] - g->p1[i]);
    *m2 = g->p2[i] + f * (g->p2[i + 1] - g->p2[i]);
}

double kvq_lloydmax(double (*pdf)(double, const void *), const void *arg, double lo, double hi,
                    int K, float *cout) {
    int n = LM_GRID;
    double *p = malloc(sizeof(double) * 3 * (n + 1));
    double *c = malloc(sizeof(double) * (K + 1)), *b = malloc(sizeof(double) * (K + 1));
    if (!p || !c || !b) { free(p); free(c); free(b); return -1.0; }
    double *p0 = p, *p1 = p + n + 1, *p2 = p + 2 * (n + 1), h = (hi - lo) / n;
    p0[0] = p1[0] = p2[0] = 0;
    for (int i = 0; i < n; i++) {
        double x = lo + (i + 0.5) * h, w = pdf(x, arg) * h;
        p0[i + 1] = p0[i] + w;
        p1[i + 1] = p1[i] + w * x;
        p2[i + 1] = p2[i] + w * (x * x + h * h / 12.0); // exact second moment of a uniform cell
    }
    double Z = p0[n];
    for (int i = 0; i <= n; i++) p0[i] /= Z, p1[i] /= Z, p2[i] /= Z;
    lm_grid g = {p0, p1, p2, lo, h, n};
    // start at the quantile midpoints
    for (int k = 0, i = 0; k < K; k++) {
        double target = (k + 0.5) / K;
        while (i < n && p0[i + 1] < target) i++;
        c[k] = lo + (i + 0.5) * h;
    }
    double D = INFINITY;
    for (int it = 0; it < 200000; it++) {
        b[0] = lo;
        b[K] = hi;
        for (int k = 1; k < K; k++) b[k] = 0.5 * (c[k - 1] + c[k]);
        double Dn = 0;
        for (int k = 0; k < K; k++) {
            double a0, a1, a2, e0, e1, e2;
            lm_at(&g, b[k], &a0, &a1, &a2);
            lm_at(&g, b[k + 1], &e0, &e1, &e2);
            double m0 = e0 - a0, m1 = e1 - a1, m2 = e2 - a2;
            Dn += m2 - 2 * c[k] * m1 + c[k] * c[k] * m0; // with the old centroid
            if (m0 > 0) c[k] = m1 / m0;
        }
        if (fabs(D - Dn) <= 1e-13 * Dn) { D = Dn; break; }
        D = Dn;
    }
    // final distortion with the final centroids
    b[0] = lo;
    b[K] = hi;
    for (int k = 1; k < K; k++) b[k] = 0.5 * (c[k - 1] + c[k]);
    D = 0;
    for (int k = 0; k < K; k++) {
        double a0, a1, a2, e0, e1, e2;
        lm_at(&g, b[k], &a0, &a1, &a2);
        lm_at(&g, b[k + 1], &e0, &e1, &e2);
        D += (e2 - a2) - 2 * c[k] * (e1 - a1) + c[k] * c[k] * (e0 - a0);
    }
    for (int k = 0; k < K; k++) cout[k] = (float)c[k];
    free(p);
    free(c);
    free(b);
    return D;
}

int kvq_nearest_sorted(const float *c, int K, float x) {
    int lo = 0, hi = K - 1; // first centroid whose upper midpoint is >= x
    while (lo < hi) {
        int m = (lo + hi) >> 1;
        if (x > 0.5f * (c[m] + c[m + 1])) lo = m + 1;
        else hi = m;
    }
    return lo;
}

kvq_status kvq_kv_check_signs(const char *name, const float *x, size_t n, kvq_err *err) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 1.0f && x[i] != -1.0f)
            return kvq_err_set(err, KVQ_ERR_FORMAT, "table '%s': value %zu is %g, not +1 or -1", name, i, x[i]);
    return KVQ_OK;
}

kvq_status kvq_kv_check_increasing(const char *name, const float *x, size_t n, float lo, float hi, kvq_err *err) {
    for (size_t i = 0; i < n; i++)
        if (!(x[i] >= lo && x[i] <= hi) || (i && x[i] < x[i - 1]))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "table '%s': value %zu (%g) is outside [%g, %g] or below the one "
                               "before it (a codebook is sorted)", name, i, x[i], lo, hi);
    return KVQ_OK;
}

kvq_status kvq_kv_check_unit(const char *name, const float *q, int n, kvq_err *err) {
    for (int i = 0; i < n; i++) {
        const float *p = q + 4 * (size_t)i;
        double n2 = (double)p[0] * p[0] + (double)p[1] * p[1] + (double)p[2] * p[2] + (double)p[3] * p[3];
        if (!(fabs(sqrt(n2) - 1.0) <= 1e-3))
            return kvq_err_set(err, KVQ_ERR_FORMAT, "table '%s': quaternion %d has norm %g, not 1", name, i, sqrt(n2));
    }
    return KVQ_OK;
}

// ---- bits ----
// The writer ORs into the buffer: encoders zero their output first.

void kvq_quat_mul(const float *a, const float *b, float *o) {
    float w = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
    float x = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
    float y = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
    float z = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
    o[0] = w, o[1] = x, o[2] = y, o[3] = z;
}

kvq_status kvq_kvspec_bits(const char *spec, char *const *fld, int nf, int lo, int hi, int allow_more,
                           int *bits, kvq_err *err) {
    char *e = NULL;
    long x = nf >= 2 ? strtol(fld[1], &e, 10) : 0;
    if (nf < 2 || e == fld[1] || *e || x < lo || x > hi)
        return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': expected %s:<bits> with bits in [%d, %d]", spec, fld[0], lo, hi);
    *bits = (int)x;
    if (nf > 2 && !allow_more) return kvq_err_set(err, KVQ_ERR_ARG, "--kv '%s': unknown option '%s'", spec, fld[2]);
    return KVQ_OK;
}
