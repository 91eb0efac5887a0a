// Tests for the seeded k-means used by QET and PQ (libconv/quant/kmeans.c): the blocked,
// OpenMP path is bit-identical to the scalar reference, every point ends at its nearest
// centroid, well-separated clusters are found, and the result depends only on the seed.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "libconv/quant/kmeans.h"

static uint64_t rng_state = 12345;
static double urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}
static double nrand(void) {
    double u = urand(), v = urand();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}
static float *randmat(int64_t n, int64_t d, uint64_t seed) {
    rng_state = seed;
    float *x = malloc(sizeof(float) * (size_t)(n * d));
    for (int64_t i = 0; i < n * d; i++) x[i] = (float)nrand();
    return x;
}

static void test_kmeans_fast_vs_ref(void **state) {
    for (int t = 0; t < 4; t++) {
        int64_t n = 500 + 300 * t, k = 3 + 40 * t;
        int dim = t == 3 ? 3 : 8;
        float *x = randmat(n, dim, 50 + t);
        float *c1 = malloc(sizeof(float) * k * dim), *c2 = malloc(sizeof(float) * k * dim);
        uint32_t *a1 = malloc(4 * n), *a2 = malloc(4 * n);
        int it1 = kvq_kmeans(x, n, dim, k, 30, 7 + t, c1, a1);
        int it2 = kvq_kmeans_ref(x, n, dim, k, 30, 7 + t, c2, a2);
        assert_int_equal(it1, it2);
        assert_memory_equal(c1, c2, sizeof(float) * k * dim);
        assert_memory_equal(a1, a2, 4 * n);
        for (int64_t i = 0; i < n; i++) // each point sits at its nearest centroid
            assert_int_equal(a1[i], kvq_kmeans_nearest(x + i * dim, c1, k, dim, NULL));
        free(x); free(c1); free(c2); free(a1); free(a2);
    }
}

// Data that stresses the fast path's bounds: ties and duplicate points (coarse grid values),
// tiny values (subnormal squares), huge ones (distances overflow to +inf), NaN coordinates.
static float *oddmat(int64_t n, int dim, int kind, uint64_t seed) {
    float *x = randmat(n, dim, seed);
    for (int64_t i = 0; i < n * dim; i++) {
        if (kind == 1) x[i] = (float)lrint(x[i]);        // values in a few integers: many ties
        if (kind == 2) x[i] *= 1e-21f;                   // squares below FLT_MIN
        if (kind == 3) x[i] *= (i % 7 == 0) ? 3e19f : 1; // some distances overflow
        if (kind == 4 && i == 5 * dim + 1) x[i] = NAN;   // one NaN coordinate
        if (kind == 5) x[i] = 0.25f * (float)(i / dim % 5); // 5 distinct points, repeated
    }
    return x;
}

static void test_kmeans_fast_paths_odd_inputs(void **state) {
    // Every fast-path combination (AVX2 or plain, bounds or not) against the reference,
    // byte for byte: centroids, assignments and the iteration count.
    const struct { int64_t n, k; int dim; } shp[] = {
        {600, 1, 8}, {64, 64, 8}, {700, 25, 8}, {1000, 256, 8}, {600, 520, 8}, // 520: 2 blocks a group
        {500, 40, 1}, {500, 33, 3}, {400, 20, 9}, {300, 17, 16},
    };
    for (size_t t = 0; t < sizeof shp / sizeof shp[0]; t++)
        for (int kind = 0; kind < 6; kind++) {
            int64_t n = shp[t].n, k = shp[t].k;
            int dim = shp[t].dim;
            float *x = oddmat(n, dim, kind, 100 + 10 * t + kind);
            float *cr = malloc(sizeof(float) * k * dim), *cf = malloc(sizeof(float) * k * dim);
            uint32_t *ar = malloc(4 * n), *af = malloc(4 * n);
            int itr = kvq_kmeans_ref(x, n, dim, k, 12, 5 + t, cr, ar);
            for (int simd = 0; simd < 2; simd++)
                for (int prune = 0; prune < 2; prune++) {
                    kvq_kmeans_opts o = {simd, prune, 1 + (simd ^ prune)}; // 1 or 2 threads
                    memset(cf, 0, sizeof(float) * k * dim);
                    int itf = kvq_kmeans_ex(x, n, dim, k, 12, 5 + t, cf, af, &o);
                    assert_int_equal(itf, itr);
                    assert_memory_equal(cf, cr, sizeof(float) * k * dim);
                    assert_memory_equal(af, ar, 4 * n);
                }
            free(x); free(cr); free(cf); free(ar); free(af);
        }
}

static void test_kmeans_assign_vs_nearest(void **state) {
    // kvq_kmeans_assign (blocked, AVX2 when present) against the plain nearest-centroid scan,
    // with duplicated centroids (ties: the lowest index wins) and k not a multiple of 8.
    for (int t = 0; t < 6; t++) {
        int64_t n = 777, k = 1 + 37 * t;
        int dim = t == 5 ? 5 : 8;
        float *x = oddmat(n, dim, t % 2, 300 + t), *c = oddmat(k, dim, t % 2, 400 + t);
        if (k > 3) memcpy(c + 3 * dim, c + 1 * dim, sizeof(float) * dim);
        uint32_t *a = malloc(4 * n);
        kvq_kmeans_assign(x, n, dim, c, k, a);
        for (int64_t i = 0; i < n; i++) assert_int_equal(a[i], kvq_kmeans_nearest(x + i * dim, c, k, dim, NULL));
        free(x); free(c); free(a);
    }
}

static void test_kmeans_separated_clusters(void **state) {
    // 4 tight blobs far apart: k-means++ + Lloyd must find them (MSE ≈ blob variance).
    int64_t n = 400;
    float *x = malloc(sizeof(float) * n * 2);
    rng_state = 5;
    const float cx[4] = {0, 100, 0, 100}, cy[4] = {0, 0, 100, 100};
    for (int64_t i = 0; i < n; i++) {
        x[2 * i] = cx[i % 4] + 0.1f * (float)nrand();
        x[2 * i + 1] = cy[i % 4] + 0.1f * (float)nrand();
    }
    float c[8];
    uint32_t *a = malloc(4 * n);
    kvq_kmeans(x, n, 2, 4, 50, 3, c, a);
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < 2; j++) s += pow(x[2 * i + j] - c[2 * a[i] + j], 2);
    assert_true(s / (2 * n) < 0.02);
    free(x); free(a);
}

static void test_kmeans_seed_and_edges(void **state) {
    int64_t n = 300;
    float *x = randmat(n, 8, 90);
    float c1[64 * 8], c2[64 * 8], c3[64 * 8];
    uint32_t a1[300], a2[300], a3[300];
    kvq_kmeans(x, n, 8, 64, 20, 1, c1, a1);
    kvq_kmeans(x, n, 8, 64, 20, 1, c2, a2);
    kvq_kmeans(x, n, 8, 64, 20, 2, c3, a3);
    assert_memory_equal(c1, c2, sizeof c1);
    assert_true(memcmp(c1, c3, sizeof c1) != 0);
    // k = n: every point is its own centroid, zero distortion
    float *cn = malloc(sizeof(float) * n * 8);
    uint32_t *an = malloc(4 * n);
    kvq_kmeans(x, n, 8, n, 5, 3, cn, an);
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < 8; j++) assert_true(cn[an[i] * 8 + j] == x[i * 8 + j]);
    // all points equal: k-means++ has no D^2 mass, still returns valid centroids
    for (int64_t i = 0; i < n * 8; i++) x[i] = 1.5f;
    kvq_kmeans(x, n, 8, 4, 5, 3, c1, a1);
    for (int64_t i = 0; i < n; i++) assert_true(c1[a1[i] * 8] == 1.5f);
    free(x); free(cn); free(an);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kmeans_fast_vs_ref),
        cmocka_unit_test(test_kmeans_fast_paths_odd_inputs),
        cmocka_unit_test(test_kmeans_assign_vs_nearest),
        cmocka_unit_test(test_kmeans_separated_clusters),
        cmocka_unit_test(test_kmeans_seed_and_edges),
    };
    return cmocka_run_group_tests_name("kmeans", tests, NULL, NULL);
}
