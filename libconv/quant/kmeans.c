// Seeded k-means++ / Lloyd for the QET and PQ codecs. The serial reference (kvq_kmeans_ref)
// is the plain algorithm; the fast path (kvq_kmeans) computes the same numbers faster:
// - k-means++ seeding over a transposed copy of the points, 8 points per AVX2 vector, with
//   the D² total's prefix sums kept so the draw is a binary search (same sums: in point order,
//   or side by side when a check on the exponents proves no partial sum can round);
// - the first Lloyd pass read off the seeding (nearest centre and per-group minima kept);
// - Lloyd assignment with per-group bounds (Elkan/Hamerly over at most 64 groups of 8-centroid
//   blocks): a group is scanned only when a lower bound on the point's distance to its other
//   centroids, shifted by their largest drift and less a float-rounding margin, does not
//   exceed the point's exact distance to its own centroid; scans are blocked (AVX2 or plain).
// Every distance that decides anything is computed with the reference's operations in the
// reference's order (no FMA), every other reduction runs in point order (or provably exactly),
// so the fast path is bit-identical to the reference whatever the ISA or the number of threads.
#include "libconv/quant/kmeans.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include <omp.h>

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

// ---- reference

// k-means++: first centre uniform, then each next one drawn with probability ∝ D².
// When every point coincides with a centre (D² sums to 0) the rest repeat centre 0.
static void seed_pp_ref(const float *x, int64_t n, int dim, int64_t k, uint64_t *rng, float *cent, float *d2) {
    int64_t first = (int64_t)(uniform01(rng) * (double)n);
    if (first >= n) first = n - 1;
    memcpy(cent, x + first * dim, sizeof(float) * dim);
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
        for (int64_t i = 0; i < n; i++) {
            float d = dist2(x + i * dim, cc, dim);
            if (d < d2[i]) d2[i] = d;
        }
    }
}

// The per-cluster double sums of update_centroids, 4 dims per AVX2 vector: each lane adds
// the same values in the same (point) order as the plain loop, so the sums are the same.
__attribute__((target("avx2"))) static void sums_avx2(const float *x, int64_t n, int dim, const uint32_t *assign,
                                                      double *sum) {
    for (int64_t i = 0; i < n; i++) {
        double *s = sum + (int64_t)assign[i] * dim;
        const float *p = x + i * dim;
        int j = 0;
        for (; j + 4 <= dim; j += 4)
            _mm256_storeu_pd(s + j, _mm256_add_pd(_mm256_loadu_pd(s + j), _mm256_cvtps_pd(_mm_loadu_ps(p + j))));
        for (; j < dim; j++) s[j] += p[j];
    }
}

// Lloyd update from the assignment: centroids are the means (double sums in point order);
// an empty cluster takes the point farthest from its centre, whose distance is then zeroed
// so the next empty cluster picks another one. sum (k × dim) and cnt (k) are scratch.
// avx2: the sums by sums_avx2 (same numbers).
static void update_centroids(const float *x, int64_t n, int dim, int64_t k, const uint32_t *assign, float *d2,
                             double *sum, int64_t *cnt, float *cent, int avx2) {
    memset(sum, 0, sizeof(double) * (size_t)(k * dim));
    memset(cnt, 0, sizeof(int64_t) * (size_t)k);
    if (avx2) sums_avx2(x, n, dim, assign, sum);
    for (int64_t i = 0; i < n; i++) {
        if (!avx2) {
            double *s = sum + (int64_t)assign[i] * dim;
            for (int j = 0; j < dim; j++) s[j] += x[i * dim + j];
        }
        cnt[assign[i]]++;
    }
    for (int64_t c = 0; c < k; c++) {
        if (cnt[c] > 0) {
            for (int j = 0; j < dim; j++) cent[c * dim + j] = (float)(sum[c * dim + j] / (double)cnt[c]);
            continue;
        }
        int64_t far = 0;
        for (int64_t i = 1; i < n; i++)
            if (d2[i] > d2[far]) far = i;
        memcpy(cent + c * dim, x + far * dim, sizeof(float) * dim);
        d2[far] = 0.0f;
    }
}

int kvq_kmeans_ref(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
                   float *cent, uint32_t *assign) {
    KVQ_ASSERT(k >= 1 && k <= n && dim >= 1);
    float *d2 = malloc(sizeof(float) * (size_t)n);
    double *sum = malloc(sizeof(double) * (size_t)(k * dim));
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)k);
    if (!d2 || !sum || !cnt) {
        free(d2); free(sum); free(cnt);
        return -1;
    }
    uint64_t rng = seed ^ 0x6a09e667f3bcc909ull;
    seed_pp_ref(x, n, dim, k, &rng, cent, d2);
    for (int64_t i = 0; i < n; i++) assign[i] = UINT32_MAX;
    int it = 0;
    for (;;) {
        int64_t changed = 0;
        for (int64_t i = 0; i < n; i++) {
            uint32_t a = kvq_kmeans_nearest(x + i * dim, cent, k, dim, &d2[i]);
            if (a != assign[i]) { assign[i] = a; changed++; }
        }
        if (changed == 0 || it >= max_iter) break;
        update_centroids(x, n, dim, k, assign, d2, sum, cnt, cent, 0);
        it++;
    }
    free(d2); free(sum); free(cnt);
    return it;
}

// ---- fast path: blocked distances

// Centroids regrouped in blocks of 8, (block, dim, 8), so the distances to 8 centroids are
// computed side by side; each lane sums over dims in dist2's order. Padding lanes are +inf.
#define KM_LANES 8

static void block_centroids(const float *cent, int64_t k, int dim, float *t) {
    int64_t nb = (k + KM_LANES - 1) / KM_LANES;
    for (int64_t c = 0; c < nb * KM_LANES; c++)
        for (int j = 0; j < dim; j++)
            t[(c / KM_LANES) * dim * KM_LANES + j * KM_LANES + c % KM_LANES] = c < k ? cent[c * dim + j] : INFINITY;
}

// Group scan: over the centroids of blocks b0..b1−1, the smallest distance from p (*m1), the
// lowest index that has it (*i1) and the smallest distance to the group's other centroids
// (*m2, duplicates count). Distances that are NaN never win (as in kvq_kmeans_nearest) and
// are left out of m2; with no distance below +inf, *m1 = +inf. Always inlined, so the dims
// loop unrolls where dim is the constant 8.
static inline __attribute__((always_inline)) void group_plain(const float *p, const float *blk, int dim, int64_t b0,
                                                              int64_t b1, float *m1, uint32_t *i1, float *m2) {
    float best = INFINITY, second = INFINITY;
    uint32_t bi = (uint32_t)(b0 * KM_LANES);
    for (int64_t b = b0; b < b1; b++) {
        const float *tb = blk + b * dim * KM_LANES;
        float acc[KM_LANES] = {0};
        for (int j = 0; j < dim; j++) {
            float pj = p[j];
            for (int l = 0; l < KM_LANES; l++) {
                float u = pj - tb[j * KM_LANES + l];
                acc[l] += u * u;
            }
        }
        for (int l = 0; l < KM_LANES; l++) {
            if (acc[l] < best) { second = best; best = acc[l]; bi = (uint32_t)(b * KM_LANES + l); }
            else if (acc[l] < second) second = acc[l];
        }
    }
    *m1 = best;
    *i1 = bi;
    *m2 = second;
}

__attribute__((target("avx2"))) static inline __m256 hmin8(__m256 v) {
    v = _mm256_min_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_min_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_min_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

__attribute__((target("avx2"))) static inline __m256i hminu8(__m256i v) {
    v = _mm256_min_epu32(v, _mm256_permute2x128_si256(v, v, 1));
    v = _mm256_min_epu32(v, _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm256_min_epu32(v, _mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
}

// The same with a per-lane minimum, runner-up and index kept in vectors (each lane keeps its
// lowest block on ties) and merged without branches: m1 the minimum over lanes, i1 the lowest
// index among the lanes at m1, m2 the smaller of the runners-up and the other lanes' minima.
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
group_avx2_t(const float *p, const float *blk, int dim, int64_t b0, int64_t b1, float *m1, uint32_t *i1, float *m2) {
    const __m256 inf = _mm256_set1_ps(INFINITY);
    __m256 vb = inf, vs = inf;
    __m256i cur = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)(b0 * KM_LANES)));
    __m256i vi = cur;
    const __m256i eight = _mm256_set1_epi32(KM_LANES);
    for (int64_t b = b0; b < b1; b++) {
        const float *tb = blk + b * dim * KM_LANES;
        __m256 acc = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < dim; j++) {
            __m256 u = _mm256_sub_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(tb + j * KM_LANES));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(u, u));
        }
        __m256 lt = _mm256_cmp_ps(acc, vb, _CMP_LT_OQ);
        vs = _mm256_blendv_ps(_mm256_min_ps(acc, vs), vb, lt); // min_ps gives vs when acc is NaN
        vb = _mm256_blendv_ps(vb, acc, lt);
        vi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(vi), _mm256_castsi256_ps(cur), lt));
        cur = _mm256_add_epi32(cur, eight);
    }
    __m256 vm = hmin8(vb); // no NaN in vb or vs: min is exact and commutative
    __m256 eq = _mm256_cmp_ps(vb, vm, _CMP_EQ_OQ);
    __m256i vmi = hminu8(_mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(_mm256_set1_epi32(-1)),
                                                              _mm256_castsi256_ps(vi), eq)));
    __m256 win = _mm256_and_ps(eq, _mm256_castsi256_ps(_mm256_cmpeq_epi32(vi, vmi)));
    __m256 vm2 = hmin8(_mm256_min_ps(vs, _mm256_blendv_ps(vb, inf, win)));
    *m1 = _mm_cvtss_f32(_mm256_castps256_ps128(vm));
    *i1 = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(vmi));
    *m2 = _mm_cvtss_f32(_mm256_castps256_ps128(vm2));
}

typedef void (*group_fn)(const float *, const float *, int, int64_t, int64_t, float *, uint32_t *, float *);

static void group_plain_d8(const float *p, const float *blk, int dim, int64_t b0, int64_t b1, float *m1,
                           uint32_t *i1, float *m2) {
    group_plain(p, blk, 8, b0, b1, m1, i1, m2);
}
static void group_plain_dn(const float *p, const float *blk, int dim, int64_t b0, int64_t b1, float *m1,
                           uint32_t *i1, float *m2) {
    group_plain(p, blk, dim, b0, b1, m1, i1, m2);
}
__attribute__((target("avx2"))) static void group_avx2_d8(const float *p, const float *blk, int dim, int64_t b0,
                                                          int64_t b1, float *m1, uint32_t *i1, float *m2) {
    group_avx2_t(p, blk, 8, b0, b1, m1, i1, m2);
}
__attribute__((target("avx2"))) static void group_avx2_dn(const float *p, const float *blk, int dim, int64_t b0,
                                                          int64_t b1, float *m1, uint32_t *i1, float *m2) {
    group_avx2_t(p, blk, dim, b0, b1, m1, i1, m2);
}

// ---- fast path: seeding

// Seeding computes the D² of every point to every centre. With `own` set it also keeps, per
// point, the lowest-index centre at the running minimum (own, n) and, per group of centres
// (the Lloyd pass's groups, gsize centres each), the smallest D² to the group's centres (gmin,
// (ng, n), NaN left out). Then the first Lloyd pass needs no scan: each point's nearest
// centre is own, at the distance d2, and the group minima are its bounds (kvq_kmeans_ex).
typedef struct {
    uint32_t *own;
    float *gmin;
    int64_t gsize;
} seed_track;

// D² of 8 consecutive points (transposed layout xt, (dim, n)) to centre c (coordinates cc);
// with `keep` the running minimum as the reference updates it (d < d2 replaces).
__attribute__((target("avx2"))) static void seed_block_avx2(const float *xt, int64_t n, int64_t i, int dim,
                                                            const float *cc, int64_t c, float *d2, int keep,
                                                            const seed_track *tr, uint32_t ex[16]) {
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < dim; j++) {
        __m256 u = _mm256_sub_ps(_mm256_loadu_ps(xt + j * n + i), _mm256_set1_ps(cc[j]));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(u, u));
    }
    __m256 lt = _mm256_castsi256_ps(_mm256_set1_epi32(-1)), d = acc;
    if (keep) {
        __m256 old = _mm256_loadu_ps(d2 + i);
        lt = _mm256_cmp_ps(acc, old, _CMP_LT_OQ);
        d = _mm256_blendv_ps(old, acc, lt);
    }
    _mm256_storeu_ps(d2 + i, d);
    { // seed_prefix's exponent range, per lane: ex[0..8) the largest E, ex[8..16) the smallest max(E, 1) of a non-zero value
        __m256i u = _mm256_castps_si256(d), e = _mm256_srli_epi32(u, 23);
        __m256i e1 = _mm256_blendv_epi8(_mm256_max_epu32(e, _mm256_set1_epi32(1)), _mm256_set1_epi32(255),
                                        _mm256_cmpeq_epi32(u, _mm256_setzero_si256()));
        __m256i *mx = (__m256i *)ex, *mn = (__m256i *)(ex + 8);
        _mm256_storeu_si256(mx, _mm256_max_epu32(e, _mm256_loadu_si256(mx)));
        _mm256_storeu_si256(mn, _mm256_min_epu32(e1, _mm256_loadu_si256(mn)));
    }
    if (tr->own) {
        float *gm = tr->gmin + (c / tr->gsize) * n + i;
        _mm256_storeu_ps(gm, _mm256_min_ps(acc, _mm256_loadu_ps(gm))); // min_ps keeps gm where acc is NaN
        __m256 o = _mm256_loadu_ps((const float *)(tr->own + i));
        o = _mm256_blendv_ps(o, _mm256_castsi256_ps(_mm256_set1_epi32((int)c)), lt);
        _mm256_storeu_ps((float *)(tr->own + i), o);
    }
}

static void seed_point(const float *xt, int64_t n, int64_t i, int dim, const float *cc, int64_t c, float *d2,
                       int keep, const seed_track *tr) {
    float s = 0.0f;
    for (int j = 0; j < dim; j++) {
        float t = xt[j * n + i] - cc[j];
        s += t * t;
    }
    int lt = !keep || s < d2[i];
    if (lt) d2[i] = s;
    if (tr->own) {
        float *gm = tr->gmin + (c / tr->gsize) * n + i;
        if (s < *gm) *gm = s;
        if (lt) tr->own[i] = (uint32_t)c;
    }
}

// The running sums pre[i] = d2[0] + … + d2[i] in double, added in point order as the
// reference does; returns the total. That order is one long chain of dependent additions.
// When no partial sum can round it is not needed: every d2 is a multiple of the smallest
// ulp among the non-zero ones, 2^(max(Emin,1)−150) (E the biased float exponent), every sum is
// below n·2^(Emax−126), so with Emax − max(Emin,1) ≤ 29 − ⌈log2 n⌉ every partial sum is an
// integer multiple of that ulp below 2^53 of it, exact in double, whatever the order. Then
// KM_CHAINS stretches of the points are summed side by side and joined (the same exact sums).
#define KM_CHAINS 8
// ex: the exponent range of d2[0..i0) per lane (seed_block_avx2 kept it); the rest is scanned here.
static double seed_prefix(const float *d2, int64_t n, double *pre, const uint32_t ex[16], int64_t i0) {
    uint32_t emax = 0, emin = 255;
    for (int l = 0; l < KM_LANES; l++) {
        emax = ex[l] > emax ? ex[l] : emax;
        emin = ex[KM_LANES + l] < emin ? ex[KM_LANES + l] : emin;
    }
    for (int64_t i = i0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &d2[i], 4);
        uint32_t e = u >> 23; // the sign bit is set only for a NaN (or -0): e > 255 refuses them below
        emax = e > emax ? e : emax;
        uint32_t e1 = u == 0 ? 255 : e < 1 ? 1 : e;
        emin = e1 < emin ? e1 : emin;
    }
    int lg = 0;
    while (((int64_t)1 << lg) < n) lg++;
    double tot = 0.0;
    if (n < 8 * KM_CHAINS || emax >= 255 || (emin <= emax && (int)(emax - emin) > 29 - lg)) {
        for (int64_t i = 0; i < n; i++) pre[i] = tot += d2[i];
        return tot;
    }
    int64_t len = n / KM_CHAINS;
    double acc[KM_CHAINS] = {0};
    for (int64_t i = 0; i < len; i++)
        for (int q = 0; q < KM_CHAINS; q++) pre[q * len + i] = acc[q] += d2[q * len + i];
    for (int64_t i = KM_CHAINS * len; i < n; i++) pre[i] = acc[KM_CHAINS - 1] += d2[i]; // the tail joins the last stretch
    for (int q = 1; q < KM_CHAINS; q++) {
        double off = pre[q * len - 1];
        int64_t end = q == KM_CHAINS - 1 ? n : (q + 1) * len;
        for (int64_t i = q * len; i < end; i++) pre[i] += off;
    }
    return pre[n - 1];
}

// D² of every point to centre c (running minimum with keep); returns their total, summed in
// point order as the reference does, and stores the partial sums in pre (n).
static double seed_update(const float *xt, int64_t n, int dim, const float *cc, int64_t c, float *d2, int keep,
                          int avx2, double *pre, const seed_track *tr) {
    int64_t i = 0;
    uint32_t ex[2 * KM_LANES] = {0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255};
    if (avx2)
        for (; i + KM_LANES <= n; i += KM_LANES) seed_block_avx2(xt, n, i, dim, cc, c, d2, keep, tr, ex);
    int64_t i0 = i;
    for (; i < n; i++) seed_point(xt, n, i, dim, cc, c, d2, keep, tr);
    return seed_prefix(d2, n, pre, ex, i0);
}

// seed_pp_ref's draws with the same numbers: the running sums the reference's pick loop
// recomputes are pre[] (non-decreasing, so the first one above r is found by bisection).
// With tracking (tr->own) the last centre's D² is folded in too. @return 1 when tracking and
// every centre's D² went through seed_update (none was a copy of centre 0), else 0.
static int seed_pp_fast(const float *x, const float *xt, int64_t n, int dim, int64_t k, uint64_t *rng, int avx2,
                        float *cent, float *d2, double *pre, const seed_track *tr) {
    int64_t first = (int64_t)(uniform01(rng) * (double)n);
    if (first >= n) first = n - 1;
    memcpy(cent, x + first * dim, sizeof(float) * dim);
    int track = tr->own != NULL, whole = 1;
    double tot = k > 1 || track ? seed_update(xt, n, dim, cent, 0, d2, 0, avx2, pre, tr) : 0.0;
    for (int64_t c = 1; c < k; c++) {
        if (!(tot > 0.0)) {
            memcpy(cent + c * dim, cent, sizeof(float) * dim);
            whole = 0;
            continue;
        }
        double r = uniform01(rng) * tot;
        int64_t lo = 0, hi = n; // first i with pre[i] > r, or n
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (pre[mid] > r) hi = mid;
            else lo = mid + 1;
        }
        int64_t pick = -1;
        for (int64_t i = lo; i < n; i++)
            if (d2[i] > 0.0f) { pick = i; break; }
        if (pick < 0)
            for (int64_t i = n - 1; i >= 0; i--)
                if (d2[i] > 0.0f) { pick = i; break; }
        float *cc = cent + c * dim;
        memcpy(cc, x + pick * dim, sizeof(float) * dim);
        if (c + 1 < k || track) tot = seed_update(xt, n, dim, cc, c, d2, 1, avx2, pre, tr);
    }
    return track && whole;
}

// ---- fast path: Lloyd with per-group bounds (Elkan/Hamerly over groups of centroid blocks)

// The float distance f that dist2 returns for points at Euclidean distance D satisfies
// |f − D²| ≤ D²((1 + u)^(dim+2) − 1) + dim·2^-149, u = 2^-24 (a rounded difference, a rounded
// square, dim−1 rounded additions of non-negative terms; squares below FLT_MIN err
// absolutely). The bounds use rel = (dim+3)·2^-23 (twice that) and 2^-100 (far more than the
// absolute error). Bounds are floats; every rounding of theirs is pushed the safe way.
// A lower bound on the Euclidean distance to centroids whose float distances are ≥ f
// (overflowed and NaN distances bound it by FLT_MAX only). Float arithmetic: below 2^-100
// (far above the absolute error) it gives 0; above, the absolute error is < 2^-30 of f, and
// f·lo (lo ≤ 1/(1 + rel)), the square root and the last product round by 2^-24 each, all
// inside the 2^-20 taken off.
static inline float lb_from(float f, float lo) {
    f = f < FLT_MAX ? f : FLT_MAX;
    return f >= 0x1.0p-100f ? sqrtf(f * lo) * (1.0f - 0x1.0p-20f) : 0.0f;
}

// The distance a bound must exceed for its centroids' float distances to be certainly > fa
// (hi ≥ 1/(1 − rel); fa raised to 2^-100 covers the absolute error; roundings as above).
static inline float lb_needed(float fa, float hi) {
    fa = fa > 0x1.0p-100f ? fa : 0x1.0p-100f;
    return sqrtf(fa * hi) * (1.0f + 0x1.0p-20f);
}

// A bound after its centroids moved by at most dm (dm rounded up already): the float
// roundings of the two operations are below 2^-23·(lb + dm), a quarter of what is taken off.
static inline float lb_shift(float lb, float dm) { return lb - dm - (lb + dm) * 0x1.0p-21f; }

#define KM_MAX_GROUPS 64

typedef struct {
    const float *cent, *blk;
    int dim;
    int64_t k, nb, gb, ng, ngp; // centroids, blocks, blocks per group, groups (≤ 64), ng rounded up to 8
    const float *gdrift; // (ngp) largest drift of a group's centroids since the last pass, 0 past ng; NULL: first pass
    float lo, hi; // ≤ 1/(1 + rel) and ≥ 1/(1 − rel)
} lloyd_t;

// Shifts the point's bounds lb (ngp; entries past ng are FLT_MAX and stay huge) by the
// drifts; @return their minimum, and in *scan the groups whose bound is ≤ need.
static inline __attribute__((always_inline)) float shift_plain(const lloyd_t *L, float *lb, float need, uint64_t *scan) {
    float lmin = INFINITY;
    uint64_t m = 0;
    for (int64_t g = 0; g < L->ng; g++) {
        float l = lb_shift(lb[g], L->gdrift[g]); // never NaN: lb finite, drift finite or +inf
        lb[g] = l;
        lmin = l < lmin ? l : lmin;
        m |= (uint64_t)(l <= need) << g;
    }
    *scan = m;
    return lmin;
}

__attribute__((target("avx2"))) static inline __attribute__((always_inline)) float
shift_avx2(const lloyd_t *L, float *lb, float need, uint64_t *scan) {
    __m256 vmin = _mm256_set1_ps(INFINITY), vn = _mm256_set1_ps(need), q = _mm256_set1_ps(0x1.0p-21f);
    uint64_t m = 0;
    for (int64_t g = 0; g < L->ngp; g += 8) {
        __m256 l = _mm256_loadu_ps(lb + g), dm = _mm256_loadu_ps(L->gdrift + g);
        l = _mm256_sub_ps(_mm256_sub_ps(l, dm), _mm256_mul_ps(_mm256_add_ps(l, dm), q));
        _mm256_storeu_ps(lb + g, l);
        vmin = _mm256_min_ps(vmin, l);
        m |= (uint64_t)(uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(l, vn, _CMP_LE_OQ)) << g;
    }
    *scan = m;
    return _mm_cvtss_f32(_mm256_castps256_ps128(hmin8(vmin)));
}

// One point's assignment: exactly kvq_kmeans_nearest's answer (index in *assign, distance in
// *d2), scanning only the groups whose bound does not rule them out. lb (ngp) holds per group
// a lower bound on the distance to its centroids other than the assigned one. DIM is 8 or 0
// (then L->dim); group and SHIFT are the kernels. @return 1 when the assignment changed.
#define KM_ASSIGN(NAME, ATTR, SHIFT)                                                                           \
    ATTR static inline __attribute__((always_inline)) int NAME(const lloyd_t *L, const float *p, uint32_t *assign, \
                                                               float *d2, float *lb, int DIM, group_fn group) {  \
        const int dim = DIM ? DIM : L->dim;                                                                    \
        uint32_t a = *assign;                                                                                  \
        float fa = FLT_MAX, need = 0.0f;                                                                       \
        uint64_t scan = ~0ull;                                                                                 \
        int partial = L->gdrift && a != UINT32_MAX;                                                            \
        if (partial) {                                                                                         \
            fa = dist2(p, L->cent + (int64_t)a * dim, dim);                                                    \
            need = lb_needed(fa, L->hi);                                                                       \
            float lmin = SHIFT(L, lb, need, &scan);                                                            \
            if (!(fa < FLT_MAX)) partial = 0, scan = ~0ull; /* NaN or overflow: the full scan decides */       \
            else if (lmin > need) {                                                                            \
                *d2 = fa;                                                                                      \
                return 0;                                                                                      \
            }                                                                                                  \
        }                                                                                                      \
        return assign_rest(L, p, assign, d2, lb, dim, group, partial, fa, scan);                               \
    }

// The scan part of an assignment: candidates are the own centroid (partial) and the groups
// in scan; the lowest index wins ties, and nothing at or above FLT_MAX beats centroid 0 (the
// reference's start).
static inline __attribute__((always_inline)) int assign_rest(const lloyd_t *L, const float *p, uint32_t *assign,
                                                             float *d2, float *lb, int dim, group_fn group,
                                                             int partial, float fa, uint64_t scan) {
    uint32_t a = *assign;
    float best = partial ? fa : FLT_MAX, best2 = INFINITY;
    uint32_t bi = partial ? a : 0;
    int64_t ga = partial ? (int64_t)a / (L->gb * KM_LANES) : -1, gw = -1;
    if (L->ng < 64) scan &= (1ull << L->ng) - 1;
    while (scan) {
        int64_t g = __builtin_ctzll(scan);
        scan &= scan - 1;
        float m1, m2;
        uint32_t i1;
        int64_t b0 = g * L->gb, b1 = b0 + L->gb < L->nb ? b0 + L->gb : L->nb;
        group(p, L->blk, dim, b0, b1, &m1, &i1, &m2);
        lb[g] = lb_from(m1, L->lo);
        if (g == ga) ga = -1; // scanned: its bound covers the old centroid too
        if (m1 < best || (m1 == best && i1 < bi)) { best = m1; bi = i1; best2 = m2; gw = g; }
    }
    // The winner's group bounds its other centroids only (m2); if the point kept its centroid
    // and that group was skipped, the shifted bound still holds.
    if (gw >= 0) lb[gw] = lb_from(best2, L->lo);
    if (partial && bi != a && ga >= 0) { // the old centroid's group was skipped: it joins the others
        float lo = lb_from(fa, L->lo);
        if (lo < lb[ga]) lb[ga] = lo;
    }
    *d2 = best;
    if (bi == a) return 0;
    *assign = bi;
    return 1;
}

KM_ASSIGN(assign_plain, , shift_plain)
KM_ASSIGN(assign_avx2, __attribute__((target("avx2"))), shift_avx2)

// One assignment pass over points [i0, i1); @return the number of changed assignments.
// (Serial: OpenMP's outlined bodies do not inherit the target attribute, so the caller
// splits the range.)
#define KM_PASS(NAME, ATTR, ASSIGN, DIM, GROUP)                                                             \
    ATTR static int64_t NAME(const lloyd_t *L, const float *x, int64_t i0, int64_t i1, uint32_t *assign,    \
                             float *d2, float *lb) {                                                        \
        int64_t changed = 0;                                                                               \
        for (int64_t i = i0; i < i1; i++)                                                                  \
            changed += ASSIGN(L, x + i * L->dim, &assign[i], &d2[i], lb + i * L->ngp, DIM, GROUP);          \
        return changed;                                                                                    \
    }
KM_PASS(pass_plain, , assign_plain, 0, group_plain_dn)
KM_PASS(pass_plain_d8, , assign_plain, 8, group_plain_d8)
KM_PASS(pass_avx2, __attribute__((target("avx2"))), assign_avx2, 0, group_avx2_dn)
KM_PASS(pass_avx2_d8, __attribute__((target("avx2"))), assign_avx2, 8, group_avx2_d8)

int kvq_kmeans_ex(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed, float *cent,
                  uint32_t *assign, const kvq_kmeans_opts *opts) {
    KVQ_ASSERT(k >= 1 && k <= n && dim >= 1);
    int simd = opts ? opts->simd : 1, prune = opts ? opts->prune : 1;
    int nt = opts && opts->n_threads > 0 ? opts->n_threads : omp_get_max_threads();
    if (omp_get_level() > 0) nt = 1; // inside a parallel region (even a one-thread one): no nested team
    int avx2 = simd && __builtin_cpu_supports("avx2");
    int64_t nb = (k + KM_LANES - 1) / KM_LANES, gb = (nb + KM_MAX_GROUPS - 1) / KM_MAX_GROUPS;
    int64_t ng = (nb + gb - 1) / gb, ngp = (ng + 7) / 8 * 8;
    float *d2 = malloc(sizeof(float) * (size_t)n);
    double *sum = malloc(sizeof(double) * (size_t)(k * dim));
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)k);
    float *blk = malloc(sizeof(float) * (size_t)(nb * KM_LANES * dim));
    float *xt = malloc(sizeof(float) * (size_t)(n * dim));
    double *pre = malloc(sizeof(double) * (size_t)n);
    float *lb = malloc(sizeof(float) * (size_t)(n * ngp)); // (n, ngp)
    float *old = malloc(sizeof(float) * (size_t)(k * dim));
    float *gdrift = malloc(sizeof(float) * (size_t)ngp);
    // seeding's record for the first pass (with pruning: its bounds are what the later passes need)
    seed_track tr = {prune ? malloc(sizeof(uint32_t) * (size_t)n) : NULL,
                     prune ? malloc(sizeof(float) * (size_t)(ng * n)) : NULL, gb * KM_LANES};
    if (!d2 || !sum || !cnt || !blk || !xt || !pre || !lb || !old || !gdrift || (prune && (!tr.own || !tr.gmin))) {
        free(d2); free(sum); free(cnt); free(blk); free(xt); free(pre); free(lb); free(old); free(gdrift);
        free(tr.own); free(tr.gmin);
        return -1;
    }
    if (prune)
        for (int64_t i = 0; i < ng * n; i++) tr.gmin[i] = INFINITY;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < dim; j++) xt[j * n + i] = x[i * dim + j];
    uint64_t rng = seed ^ 0x6a09e667f3bcc909ull;
    int seeded = seed_pp_fast(x, xt, n, dim, k, &rng, avx2, cent, d2, pre, &tr);
    free(xt);
    free(pre);
    for (int64_t i = 0; i < n * ngp; i++) lb[i] = FLT_MAX; // entries past ng stay huge
    for (int64_t g = 0; g < ngp; g++) gdrift[g] = 0.0f;
    double rel = (dim + 3) * 0x1.0p-23;
    lloyd_t L = {cent, blk, dim, k, nb, gb, ng, ngp, NULL, (float)(1.0 / (1.0 + rel) * (1.0 - 0x1.0p-22)),
                 (float)(1.0 / (1.0 - rel) * (1.0 + 0x1.0p-22))};
    for (int64_t i = 0; i < n; i++) assign[i] = UINT32_MAX;
    // The first pass from the seeding's record: the reference's first pass gives each point the
    // lowest-index centre at the minimum D² (own, at d2) whenever that minimum is below FLT_MAX
    // (otherwise centre 0 or a NaN decide: the pass runs). Bounds: a group's smallest D², 0 for
    // the point's own group (any lower bounds keep the passes exact; that one is free).
    for (int64_t i = 0; i < n && seeded; i++) seeded = d2[i] < FLT_MAX;
    if (seeded)
        for (int64_t i = 0; i < n; i++) {
            int64_t ga = tr.own[i] / (gb * KM_LANES);
            for (int64_t g = 0; g < ng; g++) lb[i * ngp + g] = g == ga ? 0.0f : lb_from(tr.gmin[g * n + i], L.lo);
            assign[i] = tr.own[i];
        }
    free(tr.own);
    free(tr.gmin);
    int it = 0;
    for (;;) {
        block_centroids(cent, k, dim, blk);
        L.gdrift = it > 0 && prune ? gdrift : NULL;
        int64_t changed = it == 0 && seeded ? n : 0; // seeded: the first pass is done
#pragma omp parallel num_threads(nt) reduction(+ : changed) if (!(it == 0 && seeded))
        if (!(it == 0 && seeded)) {
            int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
            int64_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
            changed = avx2 ? (dim == 8 ? pass_avx2_d8 : pass_avx2)(&L, x, i0, i1, assign, d2, lb)
                           : (dim == 8 ? pass_plain_d8 : pass_plain)(&L, x, i0, i1, assign, d2, lb);
        }
        if (changed == 0 || it >= max_iter) break;
        memcpy(old, cent, sizeof(float) * (size_t)(k * dim));
        update_centroids(x, n, dim, k, assign, d2, sum, cnt, cent, avx2);
        for (int64_t g = 0; g < ng; g++) gdrift[g] = 0.0f;
        for (int64_t c = 0; c < k; c++) {
            double s = 0.0;
            for (int j = 0; j < dim; j++) {
                double t = (double)cent[c * dim + j] - (double)old[c * dim + j];
                s += t * t;
            }
            // rounded up past the double and float roundings; a NaN centroid bounds nothing
            float dr = isnan(s) ? INFINITY : (float)(sqrt(s) * (1.0 + 0x1.0p-20));
            int64_t g = c / (gb * KM_LANES);
            if (dr > gdrift[g]) gdrift[g] = dr;
        }
        it++;
    }
    free(d2); free(sum); free(cnt); free(blk); free(lb); free(old); free(gdrift);
    return it;
}

int kvq_kmeans(const float *x, int64_t n, int dim, int64_t k, int max_iter, uint64_t seed,
               float *cent, uint32_t *assign) {
    return kvq_kmeans_ex(x, n, dim, k, max_iter, seed, cent, assign, NULL);
}

// A whole-range scan as kvq_kmeans_nearest answers it (nothing at or above FLT_MAX beats 0).
__attribute__((target("avx2"))) static uint32_t nearest_avx2(const float *p, const float *blk, int dim, int64_t nb) {
    float m1, m2;
    uint32_t i1;
    if (dim == 8) group_avx2_t(p, blk, 8, 0, nb, &m1, &i1, &m2);
    else group_avx2_t(p, blk, dim, 0, nb, &m1, &i1, &m2);
    return m1 < FLT_MAX ? i1 : 0;
}

void kvq_kmeans_assign(const float *x, int64_t n, int dim, const float *cent, int64_t k, uint32_t *assign) {
    int64_t nb = (k + KM_LANES - 1) / KM_LANES;
    float *blk = malloc(sizeof(float) * (size_t)(nb * KM_LANES * dim));
    if (!blk || !__builtin_cpu_supports("avx2")) { // the plain scan gives the same answer
        for (int64_t i = 0; i < n; i++) assign[i] = kvq_kmeans_nearest(x + i * dim, cent, k, dim, NULL);
        free(blk);
        return;
    }
    block_centroids(cent, k, dim, blk);
    for (int64_t i = 0; i < n; i++) assign[i] = nearest_avx2(x + i * dim, blk, dim, nb);
    free(blk);
}
