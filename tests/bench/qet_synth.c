// QET benchmarks on synthetic data (paper 004): Theorem 2 on iid normal matrices at
// matched cluster counts, then synthetic dataset 1 (1024 × 128, truncated normal
// mean 0.5 sd 0.16 on [0,1], 1 in 10,000 elements replaced by U[-100,100], 32-bit
// source) at compression ratios 2..16 for QET, its ablations, PQ and RTN.
// Usage: build/bench/qet_synth [theorem2|synth]   (both when no argument)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "libconv/codec/qet/qet.h"

static uint64_t rs = 2024;
static double urand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return ((double)(rs >> 11) + 0.5) * 0x1.0p-53;
}
static double nrand(void) { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

typedef struct { double mse, mae, bpw; int64_t k1, k2; } result;

static result run_codec(const kvq_qet_config *c, const float *x, int64_t n, int64_t d, float *out) {
    kvq_encoded e;
    kvq_err err;
    result r = {NAN, NAN, NAN, 0, 0};
    if (kvq_qet_encode(c, KVQ_DTYPE_F32, x, n, d, 1, 0, &e, &err)) {
        fprintf(stderr, "  (%s)\n", err.msg);
        return r;
    }
    kvq_blob_view v[KVQ_MAX_BLOBS];
    for (int i = 0; i < e.n_blob; i++) v[i] = (kvq_blob_view){e.blob[i].role, e.blob[i].data, e.blob[i].size};
    if (kvq_qet_decode(e.params, v, e.n_blob, n, d, out, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    double se = 0, ae = 0;
    for (int64_t i = 0; i < n * d; i++) { double t = (double)x[i] - out[i]; se += t * t; ae += fabs(t); }
    r.mse = se / (double)(n * d);
    r.mae = ae / (double)(n * d);
    r.bpw = kvq_encoded_bpw(&e, n * d);
    json_t *ks = json_object_get(e.params, "k");
    r.k1 = json_integer_value(json_array_get(ks, 0));
    r.k2 = json_array_size(ks) > 1 ? json_integer_value(json_array_get(ks, 1)) : 0;
    kvq_encoded_free(&e);
    return r;
}

// RTN baseline: asymmetric min/max per group of g consecutive elements of a row, b bits,
// scale and zero stored as fp16 (bpw = b + 32/g).
static result rtn(const float *x, int64_t n, int64_t d, int b, int g) {
    double se = 0, ae = 0;
    int64_t qmax = (1LL << b) - 1;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j0 = 0; j0 < d; j0 += g) {
            int64_t j1 = j0 + g < d ? j0 + g : d;
            float mn = x[i * d + j0], mx = mn;
            for (int64_t j = j0; j < j1; j++) { mn = fminf(mn, x[i * d + j]); mx = fmaxf(mx, x[i * d + j]); }
            float sc = kvq_f16_to_f32(kvq_f32_to_f16((mx - mn) / (float)qmax));
            float z = kvq_f16_to_f32(kvq_f32_to_f16(mn));
            for (int64_t j = j0; j < j1; j++) {
                double q = sc > 0 ? rint((x[i * d + j] - z) / sc) : 0;
                q = q < 0 ? 0 : q > qmax ? qmax : q;
                double t = x[i * d + j] - (z + q * sc);
                se += t * t;
                ae += fabs(t);
            }
        }
    result r = {se / (double)(n * d), ae / (double)(n * d), b + 32.0 / g, 0, 0};
    return r;
}

static void theorem2(void) {
    const int64_t n = 4096, d = 64;
    const double mu = 0.5, sigma = 2.0;
    float *x = malloc(sizeof(float) * n * d), *out = malloc(sizeof(float) * n * d), *xs = malloc(sizeof(float) * n * d);
    uint8_t *bits = malloc(n * d / 2 * 3);
    rs = 7;
    for (int64_t i = 0; i < n * d; i++) x[i] = (float)(mu + sigma * nrand());
    kvq_qet_swap_forward(x, n, d, 1, xs, bits);
    double s[2] = {0}, s2[2] = {0};
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < d; j++) { int h = j >= d / 2; s[h] += xs[i * d + j]; s2[h] += (double)xs[i * d + j] * xs[i * d + j]; }
    double cnt = (double)n * d / 2;
    printf("== Theorem 2: iid N(%.1f, %.1f^2), %lld x %lld\n", mu, sigma, (long long)n, (long long)d);
    for (int h = 0; h < 2; h++) {
        double m = s[h] / cnt, v = s2[h] / cnt - m * m;
        printf("%s half: mean = mu %+.4f sigma, var = %.4f sigma^2   (paper: %+.3f sigma, 0.682 sigma^2; exact 1-1/pi = %.4f)\n",
               h ? "larger " : "smaller", (m - mu) / sigma, v / (sigma * sigma), h ? 0.564 : -0.564, 1 - 1 / M_PI);
    }
    printf("MSE at matched clusters k per 8-column subspace (Vanilla: raw f32 codebooks, no RQO/CQO, no budget):\n");
    printf("%6s %14s %14s %14s %9s %9s\n", "k", "PQ", "QET l=1", "QET l=3", "l1/PQ", "l3/PQ");
    const int64_t ks[] = {1, 2, 4, 16, 64, 256, 1024};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        kvq_qet_config p = kvq_qet_config_pq(0), q1 = kvq_qet_config_vanilla(0), q3 = q1;
        p.k_fixed[0] = q1.k_fixed[0] = q3.k_fixed[0] = ks[i];
        q1.levels = 1;
        result a = run_codec(&p, x, n, d, out), b = run_codec(&q1, x, n, d, out), c = run_codec(&q3, x, n, d, out);
        printf("%6lld %14.6g %14.6g %14.6g %9.4f %9.4f\n", (long long)ks[i], a.mse, b.mse, c.mse, b.mse / a.mse, c.mse / a.mse);
    }
    free(x); free(out); free(xs); free(bits);
}

static void synth(void) {
    const int64_t n = 1024, d = 128;
    float *x = malloc(sizeof(float) * n * d), *out = malloc(sizeof(float) * n * d);
    rs = 11;
    int outliers = 0;
    for (int64_t i = 0; i < n * d; i++) {
        double v;
        do v = 0.5 + 0.16 * nrand(); while (v < 0 || v > 1);
        if (urand() < 1e-4) { v = -100 + 200 * urand(); outliers++; }
        x[i] = (float)v;
    }
    printf("\n== Synthetic dataset 1: %lld x %lld f32, truncated N(0.5, 0.16^2) on [0,1], %d outliers in U[-100,100]\n",
           (long long)n, (long long)d, outliers);
    printf("%5s | %-32s | %-32s | %-32s | %-32s | %-23s | %-23s | %s\n", "ratio", "QET (l=3,r=2,CQO) mse mae bpw",
           "Vanilla (l=3) mse mae bpw", "PQ mse mae bpw", "RTN g128 mse mae bpw", "Vanilla+RQO mse bpw",
           "Vanilla+CQO mse bpw", "QET/PQ Van/PQ  k(QET) k(Van) k(PQ)  RTN-per-tensor mse bits");
    for (int ratio = 2; ratio <= 16; ratio++) {
        kvq_qet_config q = kvq_qet_config_default(ratio), v = kvq_qet_config_vanilla(ratio), p = kvq_qet_config_pq(ratio);
        kvq_qet_config vr = v, vc = v;
        vr.stages = 2; // RQO only
        vc.cb_bits = 10; // CQO only
        result a = run_codec(&q, x, n, d, out), b = run_codec(&v, x, n, d, out), c = run_codec(&p, x, n, d, out);
        result e = run_codec(&vr, x, n, d, out), f = run_codec(&vc, x, n, d, out);
        int bits = (int)floor(32.0 / ratio - 32.0 / 128);
        result r = rtn(x, n, d, bits, 128);
        result rt = rtn(x, 1, n * d, (int)floor(32.0 / ratio), (int)(n * d)); // one scale for the matrix
        printf("%5d | %10.4g %10.4g %8.4f  | %10.4g %10.4g %8.4f  | %10.4g %10.4g %8.4f  | %10.4g %10.4g %8.4f  | %10.4g %10.4f  | %10.4g %10.4f  | %6.2f%% %6.2f%%  %lld+%lld %lld %lld  %10.4g %d\n",
               ratio, a.mse, a.mae, a.bpw, b.mse, b.mae, b.bpw, c.mse, c.mae, c.bpw, r.mse, r.mae, r.bpw, e.mse, e.bpw,
               f.mse, f.bpw, 100 * a.mse / c.mse, 100 * b.mse / c.mse, (long long)a.k1, (long long)a.k2,
               (long long)b.k1, (long long)c.k1, rt.mse, (int)floor(32.0 / ratio));
        fflush(stdout);
    }
    free(x); free(out);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "all";
    printf("threads: %d\n", omp_get_max_threads());
    if (!strcmp(what, "all") || !strcmp(what, "theorem2")) theorem2();
    if (!strcmp(what, "all") || !strcmp(what, "synth")) synth();
    return 0;
}
