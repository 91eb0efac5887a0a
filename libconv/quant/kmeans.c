// Seeded k-means++ / Lloyd for the QET and PQ codecs. One core routine serves both the
// serial reference and the OpenMP path: only the assignment step (independent per point)
// is parallel; every reduction runs serially in point order, so results never depend on
// the thread count.
#include "libconv/quant/kmeans.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/error.h"
#include "kernels/splitmix.h"


static double uniform01(uint64_t *s) { return (double)(kvq_splitmix64_next(s) >> 11) * 0x1.0p-53; }

static inline float dist2(const float *a, const float *b, int dim) {
    float s = 0.0f;
    for (int j = 0; j < dim; j++) {
        float t = a[j] - b[j];
        s += t * t;
    }
    return s;
}

uint32_t kvq_kmeans_nearest(const float *p, const float *cent, int64_t k, int dim, float *d2) {
    uint32_t best = 0;
    float bd = FLT_MAX;
    for (int64_t c = 0; c < k; c++) {
        float d = dist2(p, cent + c * dim, dim);
        if (d < bd) { bd = d; best = (uint32_t)c; }
    }
    if (d2) *d2 = bd;
    return best;
}

// Fast path: centroids regrouped in blocks of 8, (block, dim, 8) so the distances to 8
// centroids are computed side by side. Each lane sums over dims in the same order as
// dist2, so distances, and the argmin with its lowest-index tie rule, are bit-identical.
#define KM_LANES 8

static void block_centroids(const float *cent, int64_t k, int dim, float *t) {
    int64_t nb = (k + KM_LANES - 1) / KM_LANES;
    for (int64_t c = 0; c < nb * KM_LANES; c++)
        for (int j = 0; j < dim; j++)
            t[(c / KM_LANES) * dim * KM_LANES + j * KM_LANES + c % KM_LANES] = c < k ? cent[c * dim + j] : INFINITY;
}

__attribute__((target_clones("avx2", "default")))
static uint32_t nearest_blocked(const float *p, const float *t, int64_t k, int dim, float *d2) {
    float best = FLT_MAX;
    uint32_t bi = 0;
    int64_t nb = (k + KM_LANES - 1) / KM_LANES;
    for (int64_t b = 0; b < nb; b++) {
        const float *tb = t + b * dim * KM_LANES;
        float acc[KM_LANES] = {0};
        for (int j = 0; j < dim; j++) {
            float pj = p[j];
            for (int l = 0; l < KM_LANES; l++) {
                float u = pj - tb[j * KM_LANES + l];
                acc[l] += u * u;
            }
        }
        for (int l = 0; l < KM_LANES; l++)
            if (acc[l] < best) { best = acc[l]; bi = (uint32_t)(b * KM_LANES + l); }
    }
    *d2 = best;
    return bi;
}

// k-means++: first centre uniform, then each next one drawn with probability ∝ D².
// When every point coincides with a centre (D² sums to 0) the rest repeat centre 0.
static void seed_pp(const float *x, int64_t n, int dim, int64_t k, uint64_t *rng, float *cent,
                    float *d2, int par) {
    int64_t first = (int64_t)(uniform01(rng) * (double)n);
    if (first >= n) first = n - 1;
    memcpy(cent, x + first * dim, sizeof(float) * dim);
#pragma omp parallel for schedule(static) if (par)
    for (int64_t i = 0; i < n; i++) d2[i] = dist2(x + i * dim, cent, dim);
    for (int64_t c = 1; c < k; c++) {
        double tot = 0.0;
        for (int64_t i = 0; i < n; i++) tot += d2[i];
        int64_t pick = 0;
        if (tot > 0.0) {
            double r = uniform01(rng) * tot, acc = 0.0;
            pick = -1;
            for (int64_t i = 0; i < n; i++) {
                acc += d2[i];
                if (acc > r && d2[i] > 0.0f) { pick = i; break; }
            }
            if (pick < 0) // rounding at the top end: last point with positive weight
                for (int64_t i = n - 1; i >= 0; i--)
                    if (d2[i] > 0.0f) { pick = i; break; }
        } else {
            memcpy(cent + c * dim, cent, sizeof(float) * dim);
            continue;
        }
        float *cc = cent + c * dim;
        memcpy(cc, x + pick * dim, sizeof(float) * dim);
#pragma omp parallel for schedule(static) if (par)
        for (int64_t i = 0; i < n; i++) {
            float d = dist2(x + i * dim, cc, dim);
            if (d < d2[i]) d2[i] = d;
        }
    }
}

static int kmeans_core(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
                       float *cent, uint32_t *assign, int par) {
    KVQ_ASSERT(k >= 1 && k <= n && dim >= 1);
    float *d2 = malloc(sizeof(float) * (size_t)n);
    double *sum = malloc(sizeof(double) * (size_t)(k * dim));
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)k);
    float *blk = par ? malloc(sizeof(float) * (size_t)(((k + KM_LANES - 1) / KM_LANES) * KM_LANES * dim)) : NULL;
    if (!d2 || !sum || !cnt || (par && !blk)) {
        free(d2); free(sum); free(cnt); free(blk);
        return -1;
    }
    uint64_t rng = seed ^ 0x6a09e667f3bcc909ull;
    seed_pp(x, n, dim, k, &rng, cent, d2, par);
    for (int64_t i = 0; i < n; i++) assign[i] = UINT32_MAX;
    int it = 0;
    for (;;) {
        int64_t changed = 0;
        if (par) block_centroids(cent, k, dim, blk);
#pragma omp parallel for schedule(static) reduction(+ : changed) if (par)
        for (int64_t i = 0; i < n; i++) {
            uint32_t a = par ? nearest_blocked(x + i * dim, blk, k, dim, &d2[i])
                             : kvq_kmeans_nearest(x + i * dim, cent, k, dim, &d2[i]);
            if (a != assign[i]) { assign[i] = a; changed++; }
        }
        if (changed == 0 || it >= max_iter) break;
        memset(sum, 0, sizeof(double) * (size_t)(k * dim));
        memset(cnt, 0, sizeof(int64_t) * (size_t)k);
        for (int64_t i = 0; i < n; i++) {
            double *s = sum + (int64_t)assign[i] * dim;
            for (int j = 0; j < dim; j++) s[j] += x[i * dim + j];
            cnt[assign[i]]++;
        }
        for (int64_t c = 0; c < k; c++) {
            if (cnt[c] > 0) {
                for (int j = 0; j < dim; j++) cent[c * dim + j] = (float)(sum[c * dim + j] / (double)cnt[c]);
                continue;
            }
            // Empty: take the point farthest from its centre; zero its distance so the
            // next empty cluster picks another one.
            int64_t far = 0;
            for (int64_t i = 1; i < n; i++)
                if (d2[i] > d2[far]) far = i;
            memcpy(cent + c * dim, x + far * dim, sizeof(float) * dim);
            d2[far] = 0.0f;
        }
        it++;
    }
    free(blk);
    free(d2);
    free(sum);
    free(cnt);
    return it;
}

int kvq_kmeans(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
               float *cent, uint32_t *assign) {
    return kmeans_core(x, n, dim, k, max_iter, seed, cent, assign, 1);
}

int kvq_kmeans_ref(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
                   float *cent, uint32_t *assign) {
    return kmeans_core(x, n, dim, k, max_iter, seed, cent, assign, 0);
}
