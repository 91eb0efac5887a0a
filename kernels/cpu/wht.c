// Walsh–Hadamard butterfly (see wht.h). kvq_wht uses SSE for the two in-register stages
// and for the strided stages; every output is still the single a+b or a−b of the scalar
// butterfly (a + (−b) is exactly a − b in IEEE arithmetic), so results are bit-identical
// to the plain loop kept below as the fallback.
#include "kernels/cpu/wht.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static void wht_scalar(float *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
// AVX2 (8 lanes): the SSE path's arithmetic (stages h = 1, 2 by sign-flipped adds, which are
// exactly the subtractions) plus h = 4 inside the vector, then two stages per memory pass.
// Each value of each stage is still the same single a+b or a−b: bit-identical.
__attribute__((target("avx2"))) static void wht_avx2(float *x, int n) {
    const __m256 m1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, (int)0x80000000, 0, (int)0x80000000, 0, (int)0x80000000, 0, (int)0x80000000));
    const __m256 m2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, (int)0x80000000, (int)0x80000000, 0, 0, (int)0x80000000, (int)0x80000000));
    const __m256 m4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, (int)0x80000000, (int)0x80000000, (int)0x80000000, (int)0x80000000));
    for (int i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        v = _mm256_add_ps(_mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 2, 0, 0)), _mm256_xor_ps(_mm256_shuffle_ps(v, v, _MM_SHUFFLE(3, 3, 1, 1)), m1));
        v = _mm256_add_ps(_mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 1, 0)), _mm256_xor_ps(_mm256_shuffle_ps(v, v, _MM_SHUFFLE(3, 2, 3, 2)), m2));
        v = _mm256_add_ps(_mm256_permute2f128_ps(v, v, 0x00), _mm256_xor_ps(_mm256_permute2f128_ps(v, v, 0x11), m4));
        _mm256_storeu_ps(x + i, v);
    }
    int h = 8;
    for (; 2 * h < n; h *= 4)
        for (int i = 0; i < n; i += 4 * h)
            for (int j = i; j < i + h; j += 8) {
                __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h), c = _mm256_loadu_ps(x + j + 2 * h),
                       d = _mm256_loadu_ps(x + j + 3 * h);
                __m256 ab = _mm256_add_ps(a, b), amb = _mm256_sub_ps(a, b), cd = _mm256_add_ps(c, d), cmd = _mm256_sub_ps(c, d);
                _mm256_storeu_ps(x + j, _mm256_add_ps(ab, cd));
                _mm256_storeu_ps(x + j + h, _mm256_add_ps(amb, cmd));
                _mm256_storeu_ps(x + j + 2 * h, _mm256_sub_ps(ab, cd));
                _mm256_storeu_ps(x + j + 3 * h, _mm256_sub_ps(amb, cmd));
            }
    if (h < n)
        for (int j = 0; j < h; j += 8) {
            __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
            _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
            _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
        }
}
#endif

void kvq_wht(float *x, int n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (n >= 16 && __builtin_cpu_supports("avx2")) { wht_avx2(x, n); return; }
#endif
    kvq_wht_portable(x, n);
}

void kvq_wht_portable(float *x, int n) {
#if defined(__SSE2__)
    if (n >= 8) {
        const __m128 m1 = _mm_castsi128_ps(_mm_set_epi32((int)0x80000000, 0, (int)0x80000000, 0));
        const __m128 m2 = _mm_castsi128_ps(_mm_set_epi32((int)0x80000000, (int)0x80000000, 0, 0));
        for (int i = 0; i < n; i += 4) { // stages h=1 and h=2 inside each 4-vector
            __m128 v = _mm_loadu_ps(x + i);
            __m128 lo = _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 2, 0, 0));
            __m128 hi = _mm_shuffle_ps(v, v, _MM_SHUFFLE(3, 3, 1, 1));
            v = _mm_add_ps(lo, _mm_xor_ps(hi, m1)); // [x0+x1, x0-x1, x2+x3, x2-x3]
            lo = _mm_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 1, 0));
            hi = _mm_shuffle_ps(v, v, _MM_SHUFFLE(3, 2, 3, 2));
            _mm_storeu_ps(x + i, _mm_add_ps(lo, _mm_xor_ps(hi, m2)));
        }
        for (int h = 4; h < n; h <<= 1)
            for (int i = 0; i < n; i += 2 * h)
                for (int j = i; j < i + h; j += 4) {
                    __m128 a = _mm_loadu_ps(x + j), b = _mm_loadu_ps(x + j + h);
                    _mm_storeu_ps(x + j, _mm_add_ps(a, b));
                    _mm_storeu_ps(x + j + h, _mm_sub_ps(a, b));
                }
        return;
    }
#endif
    wht_scalar(x, n);
}

void kvq_wht_i32_portable(int32_t *x, int n) {
#if defined(__SSE2__)
    if (n >= 8) {
        for (int i = 0; i < n; i += 4) { // stages h=1 and h=2 inside each 4-vector
            __m128i v = _mm_loadu_si128((const __m128i *)(x + i));
            __m128i lo = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 0, 0)), hi = _mm_shuffle_epi32(v, _MM_SHUFFLE(3, 3, 1, 1));
            __m128i sg = _mm_setr_epi32(1, -1, 1, -1);
            v = _mm_add_epi32(lo, _mm_sub_epi32(_mm_xor_si128(hi, _mm_cmplt_epi32(sg, _mm_setzero_si128())),
                                                _mm_cmplt_epi32(sg, _mm_setzero_si128()))); // hi·(1,−1,1,−1)
            lo = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0));
            hi = _mm_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 2));
            __m128i m2 = _mm_setr_epi32(0, 0, -1, -1);
            v = _mm_add_epi32(lo, _mm_sub_epi32(_mm_xor_si128(hi, m2), m2)); // hi·(1,1,−1,−1)
            _mm_storeu_si128((__m128i *)(x + i), v);
        }
        for (int h = 4; h < n; h <<= 1)
            for (int i = 0; i < n; i += 2 * h)
                for (int j = i; j < i + h; j += 4) {
                    __m128i a = _mm_loadu_si128((const __m128i *)(x + j)), b = _mm_loadu_si128((const __m128i *)(x + j + h));
                    _mm_storeu_si128((__m128i *)(x + j), _mm_add_epi32(a, b));
                    _mm_storeu_si128((__m128i *)(x + j + h), _mm_sub_epi32(a, b));
                }
        return;
    }
#endif
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) { // unsigned: wraps instead of UB on garbage input
                uint32_t a = (uint32_t)x[j], b = (uint32_t)x[j + h];
                x[j] = (int32_t)(a + b);
                x[j + h] = (int32_t)(a - b);
            }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
// AVX2: stages h = 1, 2, 4 inside each 8-vector, then two stages per pass over memory (radix 4)
// and a last single stage when their number is odd. Integer sums are exact mod 2^32, so the
// order does not matter: the same integers as the portable path.
__attribute__((target("avx2"))) static void wht_i32_avx2(int32_t *x, int n) {
    const __m256i s1 = _mm256_setr_epi32(1, -1, 1, -1, 1, -1, 1, -1), s2 = _mm256_setr_epi32(1, 1, -1, -1, 1, 1, -1, -1),
                  s4 = _mm256_setr_epi32(1, 1, 1, 1, -1, -1, -1, -1);
    for (int i = 0; i < n; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(x + i));
        v = _mm256_add_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 0, 0)),
                             _mm256_sign_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(3, 3, 1, 1)), s1));
        v = _mm256_add_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_sign_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 2)), s2));
        v = _mm256_add_epi32(_mm256_permute2x128_si256(v, v, 0x00),
                             _mm256_sign_epi32(_mm256_permute2x128_si256(v, v, 0x11), s4));
        _mm256_storeu_si256((__m256i *)(x + i), v);
    }
    int h = 8;
    for (; 2 * h < n; h *= 4)
        for (int i = 0; i < n; i += 4 * h)
            for (int j = i; j < i + h; j += 8) {
                __m256i a = _mm256_loadu_si256((const __m256i *)(x + j)), b = _mm256_loadu_si256((const __m256i *)(x + j + h)),
                        c = _mm256_loadu_si256((const __m256i *)(x + j + 2 * h)),
                        d = _mm256_loadu_si256((const __m256i *)(x + j + 3 * h));
                __m256i ab = _mm256_add_epi32(a, b), amb = _mm256_sub_epi32(a, b), cd = _mm256_add_epi32(c, d),
                        cmd = _mm256_sub_epi32(c, d);
                _mm256_storeu_si256((__m256i *)(x + j), _mm256_add_epi32(ab, cd));
                _mm256_storeu_si256((__m256i *)(x + j + h), _mm256_add_epi32(amb, cmd));
                _mm256_storeu_si256((__m256i *)(x + j + 2 * h), _mm256_sub_epi32(ab, cd));
                _mm256_storeu_si256((__m256i *)(x + j + 3 * h), _mm256_sub_epi32(amb, cmd));
            }
    if (h < n)
        for (int j = 0; j < h; j += 8) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(x + j)), b = _mm256_loadu_si256((const __m256i *)(x + j + h));
            _mm256_storeu_si256((__m256i *)(x + j), _mm256_add_epi32(a, b));
            _mm256_storeu_si256((__m256i *)(x + j + h), _mm256_sub_epi32(a, b));
        }
}
#endif

void kvq_wht_i32(int32_t *x, int n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (n >= 16 && __builtin_cpu_supports("avx2")) { wht_i32_avx2(x, n); return; }
#endif
    kvq_wht_i32_portable(x, n);
}

void kvq_wht_f64(double *x, int n) {
    for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                double a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

void kvq_wht_ref(const float *x, double *y, int n) {
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++) s += (__builtin_popcount((unsigned)(i & j)) & 1) ? -(double)x[j] : (double)x[j];
        y[i] = s;
    }
}
