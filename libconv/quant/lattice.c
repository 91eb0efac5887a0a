// Conway–Sloane closest-point decoders for the integer lattices E8int=2E8, D4, A2int, Z,
// their constants, and the section-4.6 bit-stripping transform. Everything here is
// scalar and branch-light; the codec calls it per 8/4/2/1-vector.
#include "libconv/quant/lattice.h"

#include <math.h>
#include <strings.h>

static const char *const lat_names[KVQ_LAT_COUNT] = {"e8", "d4", "a2", "z"};

const char *kvq_lattice_name(kvq_lattice l) { return l >= 0 && l < KVQ_LAT_COUNT ? lat_names[l] : "?"; }

int kvq_lattice_parse(const char *s, kvq_lattice *out) {
    for (int i = 0; i < KVQ_LAT_COUNT; i++)
        if (strcasecmp(s, lat_names[i]) == 0) { *out = (kvq_lattice)i; return 0; }
    return -1;
}

int kvq_lattice_dim(kvq_lattice l) {
    static const int d[KVQ_LAT_COUNT] = {8, 4, 2, 1};
    return d[l];
}

double kvq_lattice_G(kvq_lattice l) {
    static const double g[KVQ_LAT_COUNT] = {0.0716568, 0.076603, 0.080188, 1.0 / 12.0};
    return g[l];
}

double kvq_lattice_covolume(kvq_lattice l) {
    static const double v[KVQ_LAT_COUNT] = {256.0, 2.0, 3.4641016151377544, 1.0};
    return v[l];
}

int kvq_lattice_classes(kvq_lattice l) { return (l == KVQ_LAT_D4 || l == KVQ_LAT_A2) ? 2 : 1; }

int kvq_lattice_symbol_class(kvq_lattice l, int i) {
    if (l == KVQ_LAT_D4) return i == 3;
    if (l == KVQ_LAT_A2) return i == 1;
    return 0;
}

// ---- nearest points

// Nearest point of D_n = {a ∈ Z^n: Σa even} to y (Conway–Sloane ch. 20 "g(x)" trick):
// round every coordinate; if the sum is odd, re-round the coordinate with the largest
// rounding error the other way. Returns the squared distance.
static float dn_nearest(const float *y, int n, int32_t *a) {
    int sum = 0, worst = 0;
    float wd = -1.0f;
    for (int i = 0; i < n; i++) {
        float r = rintf(y[i]);
        a[i] = (int32_t)r;
        sum += a[i];
        float d = fabsf(y[i] - r);
        if (d > wd) { wd = d; worst = i; }
    }
    if (sum & 1) a[worst] += (y[worst] >= (float)a[worst]) ? 1 : -1;
    float dist = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = y[i] - (float)a[i];
        dist += d * d;
    }
    return dist;
}

#if defined(__SSE4_1__)
#include <smmintrin.h>

// D8 nearest for 8 floats in two SSE registers, same rule as dn_nearest (first index of the
// largest rounding error is re-rounded when the sum is odd), written without data-dependent
// branches (the parity and coset choices are coin flips, so branches mispredict half the
// time). r0/r1 receive the point as floats; returns the squared distance summed in a fixed
// order. This is the only E8 implementation, so ties are decided the same way everywhere.
static inline float d8_nearest_sse(__m128 y0, __m128 y1, __m128 *r0o, __m128 *r1o) {
    const __m128 absm = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
    __m128 r0 = _mm_round_ps(y0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m128 r1 = _mm_round_ps(y1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m128i sv = _mm_add_epi32(_mm_cvtps_epi32(r0), _mm_cvtps_epi32(r1));
    sv = _mm_add_epi32(sv, _mm_shuffle_epi32(sv, _MM_SHUFFLE(1, 0, 3, 2)));
    sv = _mm_add_epi32(sv, _mm_shuffle_epi32(sv, _MM_SHUFFLE(2, 3, 0, 1)));
    __m128i odd = _mm_sub_epi32(_mm_setzero_si128(), _mm_and_si128(sv, _mm_set1_epi32(1))); // all ones if odd
    __m128 d0 = _mm_sub_ps(y0, r0), d1 = _mm_sub_ps(y1, r1);
    __m128 a0 = _mm_and_ps(d0, absm), a1 = _mm_and_ps(d1, absm);
    __m128 m = _mm_max_ps(a0, a1);
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    int mask = _mm_movemask_ps(_mm_cmpeq_ps(a0, m)) | (_mm_movemask_ps(_mm_cmpeq_ps(a1, m)) << 4);
    __m128i w = _mm_set1_epi32(__builtin_ctz((unsigned)mask));
    __m128 oh0 = _mm_castsi128_ps(_mm_and_si128(_mm_cmpeq_epi32(_mm_setr_epi32(0, 1, 2, 3), w), odd));
    __m128 oh1 = _mm_castsi128_ps(_mm_and_si128(_mm_cmpeq_epi32(_mm_setr_epi32(4, 5, 6, 7), w), odd));
    const __m128 one = _mm_set1_ps(1.0f), mone = _mm_set1_ps(-1.0f), zero = _mm_setzero_ps();
    // y >= r  <=>  d >= 0: move up, else down (same test as dn_nearest)
    __m128 s0 = _mm_blendv_ps(mone, one, _mm_cmpge_ps(d0, zero)), s1 = _mm_blendv_ps(mone, one, _mm_cmpge_ps(d1, zero));
    r0 = _mm_add_ps(r0, _mm_and_ps(s0, oh0));
    r1 = _mm_add_ps(r1, _mm_and_ps(s1, oh1));
    __m128 e0 = _mm_sub_ps(y0, r0), e1 = _mm_sub_ps(y1, r1);
    __m128 q = _mm_add_ps(_mm_mul_ps(e0, e0), _mm_mul_ps(e1, e1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    *r0o = r0;
    *r1o = r1;
    return _mm_cvtss_f32(q);
}

void kvq_e8_nearest(const float x[8], int32_t c[8]) {
    // 2E8 = 2D8 ∪ (2D8 + 1). In halved coordinates: D8 ∪ (D8 + 1/2).
    const __m128 half = _mm_set1_ps(0.5f), one = _mm_set1_ps(1.0f), two = _mm_set1_ps(2.0f);
    __m128 x0 = _mm_loadu_ps(x), x1 = _mm_loadu_ps(x + 4);
    __m128 a0, a1, b0, b1;
    float d0 = d8_nearest_sse(_mm_mul_ps(half, x0), _mm_mul_ps(half, x1), &a0, &a1);
    float d1 = d8_nearest_sse(_mm_mul_ps(half, _mm_sub_ps(x0, one)), _mm_mul_ps(half, _mm_sub_ps(x1, one)), &b0, &b1);
    __m128 sel = _mm_castsi128_ps(_mm_set1_epi32(-(d1 < d0))); // odd coset when strictly closer
    __m128 c0 = _mm_blendv_ps(_mm_mul_ps(two, a0), _mm_add_ps(_mm_mul_ps(two, b0), one), sel);
    __m128 c1 = _mm_blendv_ps(_mm_mul_ps(two, a1), _mm_add_ps(_mm_mul_ps(two, b1), one), sel);
    _mm_storeu_si128((__m128i *)c, _mm_cvtps_epi32(c0));
    _mm_storeu_si128((__m128i *)(c + 4), _mm_cvtps_epi32(c1));
}
#else
void kvq_e8_nearest(const float x[8], int32_t c[8]) { kvq_e8_nearest_ref(x, c); }
#endif

void kvq_e8_nearest_ref(const float x[8], int32_t c[8]) {
    // 2E8 = 2D8 ∪ (2D8 + 1). In halved coordinates: D8 ∪ (D8 + 1/2). The distance sums
    // use the SSE path's order ((e0²+e4²)+(e2²+e6²)) + ((e1²+e5²)+(e3²+e7²)) so both paths
    // decide near-ties identically.
    float y0[8], y1[8];
    int32_t a0[8], a1[8];
    for (int i = 0; i < 8; i++) {
        y0[i] = 0.5f * x[i];
        y1[i] = 0.5f * (x[i] - 1.0f);
    }
    (void)dn_nearest(y0, 8, a0);
    (void)dn_nearest(y1, 8, a1);
    float e0[8], e1[8];
    for (int i = 0; i < 8; i++) {
        e0[i] = (y0[i] - (float)a0[i]) * (y0[i] - (float)a0[i]);
        e1[i] = (y1[i] - (float)a1[i]) * (y1[i] - (float)a1[i]);
    }
    float d0 = ((e0[0] + e0[4]) + (e0[2] + e0[6])) + ((e0[1] + e0[5]) + (e0[3] + e0[7]));
    float d1 = ((e1[0] + e1[4]) + (e1[2] + e1[6])) + ((e1[1] + e1[5]) + (e1[3] + e1[7]));
    if (d1 < d0)
        for (int i = 0; i < 8; i++) c[i] = 2 * a1[i] + 1;
    else
        for (int i = 0; i < 8; i++) c[i] = 2 * a0[i];
}

void kvq_d4_nearest(const float x[4], int32_t c[4]) { (void)dn_nearest(x, 4, c); }

void kvq_a2_nearest(const float x[2], int32_t c[2]) {
    // A2int = (√3·2Z × 2Z) ∪ (√3·(2Z+1) × (2Z+1)): round in each rectangular coset.
    const float s3 = KVQ_SQRT3_F;
    float yy = x[0] / s3;
    int32_t ey = 2 * (int32_t)rintf(0.5f * yy), ex = 2 * (int32_t)rintf(0.5f * x[1]);
    int32_t oy = 2 * (int32_t)rintf(0.5f * (yy - 1.0f)) + 1, ox = 2 * (int32_t)rintf(0.5f * (x[1] - 1.0f)) + 1;
    float dey = x[0] - s3 * (float)ey, dex = x[1] - (float)ex;
    float doy = x[0] - s3 * (float)oy, dox = x[1] - (float)ox;
    if (doy * doy + dox * dox < dey * dey + dex * dex) { c[0] = oy; c[1] = ox; }
    else { c[0] = ey; c[1] = ex; }
}

void kvq_z_nearest(const float x[1], int32_t c[1]) { c[0] = (int32_t)rintf(x[0]); }

void kvq_lattice_nearest(kvq_lattice l, const float *x, int32_t *c) {
    switch (l) {
    case KVQ_LAT_E8: kvq_e8_nearest(x, c); break;
    case KVQ_LAT_D4: kvq_d4_nearest(x, c); break;
    case KVQ_LAT_A2: kvq_a2_nearest(x, c); break;
    default: kvq_z_nearest(x, c); break;
    }
}

void kvq_lattice_embed(kvq_lattice l, const int32_t *c, float *y) {
    int n = kvq_lattice_dim(l);
    for (int i = 0; i < n; i++) y[i] = (float)c[i];
    if (l == KVQ_LAT_A2) y[0] = KVQ_SQRT3_F * (float)c[0];
}

int kvq_lattice_member(kvq_lattice l, const int32_t *c) {
    switch (l) {
    case KVQ_LAT_E8: {
        int cb = c[0] & 1, s = 0;
        for (int i = 0; i < 8; i++) {
            if ((c[i] & 1) != cb) return 0;
            s += (c[i] - cb) / 2;
        }
        return (s & 1) == 0;
    }
    case KVQ_LAT_D4: return ((c[0] + c[1] + c[2] + c[3]) & 1) == 0;
    case KVQ_LAT_A2: return ((c[0] + c[1]) & 1) == 0;
    default: return 1;
    }
}

// ---- strip / unstrip

void kvq_lattice_strip(kvq_lattice l, const int32_t *c, uint32_t *sym) {
    switch (l) {
    case KVQ_LAT_E8: {
        int32_t cb = c[0] & 1, s[8], p = 0;
        for (int i = 0; i < 8; i++) s[i] = (c[i] - cb) / 2; // exact: same parity as cb
        for (int i = 0; i < 7; i++) { sym[i] = kvq_zigzag(s[i]); p += s[i]; }
        int32_t t = (s[7] - (p & 1)) / 2;
        sym[7] = 2u * kvq_zigzag(t) + (uint32_t)cb;
        break;
    }
    case KVQ_LAT_D4: {
        int32_t p = (c[0] + c[1] + c[2]) & 1;
        for (int i = 0; i < 3; i++) sym[i] = kvq_zigzag(c[i]);
        sym[3] = kvq_zigzag((c[3] - p) / 2);
        break;
    }
    case KVQ_LAT_A2: {
        int32_t p = c[1] & 1;
        sym[0] = kvq_zigzag((c[0] - p) / 2);
        sym[1] = kvq_zigzag(c[1]);
        break;
    }
    default: sym[0] = kvq_zigzag(c[0]); break;
    }
}

void kvq_lattice_unstrip(kvq_lattice l, const uint32_t *sym, int32_t *c) {
    switch (l) {
    case KVQ_LAT_E8: {
        int32_t cb = (int32_t)(sym[7] & 1), p = 0;
        for (int i = 0; i < 7; i++) {
            int32_t s = kvq_unzigzag(sym[i]);
            p += s;
            c[i] = 2 * s + cb;
        }
        int32_t t = kvq_unzigzag(sym[7] >> 1);
        c[7] = 2 * (2 * t + (p & 1)) + cb;
        break;
    }
    case KVQ_LAT_D4: {
        for (int i = 0; i < 3; i++) c[i] = kvq_unzigzag(sym[i]);
        c[3] = 2 * kvq_unzigzag(sym[3]) + ((c[0] + c[1] + c[2]) & 1);
        break;
    }
    case KVQ_LAT_A2: {
        c[1] = kvq_unzigzag(sym[1]);
        c[0] = 2 * kvq_unzigzag(sym[0]) + (c[1] & 1);
        break;
    }
    default: c[0] = kvq_unzigzag(sym[0]); break;
    }
}
