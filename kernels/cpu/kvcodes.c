// Fixed-width KV codes unpacked eight at a time and the sums attention takes from them
// (scores and value sums straight from a packed KV cache). Eight b-bit codes fill exactly b
// bytes, so the codes 8j..8j+7 are the b bytes from byte j·b: one load, then one pdep spreads
// them to eight bytes (or eight shifts without BMI2).
#include "kernels/cpu/kvcodes.h"

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_features.h"

void kvq_codes_unpack_ref(const uint8_t *p, int bit0, int b, int n, uint8_t *c) {
    for (int i = 0; i < n; i++) {
        uint32_t v = 0;
        for (int k = 0; k < b; k++) {
            size_t bit = (size_t)bit0 + (size_t)i * b + k;
            v |= (uint32_t)(p[bit >> 3] >> (bit & 7) & 1u) << k;
        }
        c[i] = (uint8_t)v;
    }
}

// The `len` bytes (<= 8) at p as a little-endian word; the full 8 with one load when they exist.
static inline uint64_t load_le(const uint8_t *p, size_t len) {
    uint64_t w = 0;
    memcpy(&w, p, len < 8 ? len : 8);
    return w;
}

// b replicated in every byte's low bits: the pdep mask that puts 8 b-bit fields into 8 bytes.
static inline uint64_t byte_mask(int b) { return 0x0101010101010101ull * ((1u << b) - 1u); }

// Codes 8j..8j+7 start at bit bit0 + 8jb: the 8 bytes from there (only those inside the stream),
// shifted by the bit offset. With b <= 7 and an offset <= 7 the 8b bits fit the 64-bit word.
static inline uint64_t word_at(const uint8_t *p, size_t bytes, size_t bit) {
    const size_t off = bit >> 3;
    uint64_t w;
    if (off + 8 <= bytes) memcpy(&w, p + off, 8);
    else w = load_le(p + off, bytes - off);
    return w >> (bit & 7);
}

__attribute__((target("bmi2"))) static void unpack_bmi2(const uint8_t *p, size_t bit0, int b, int n, uint8_t *c) {
    const uint64_t m = byte_mask(b);
    const size_t bytes = (bit0 + (size_t)n * b + 7) / 8;
    int j = 0;
    for (; 8 * j + 8 <= n; j++) {
        const uint64_t w = _pdep_u64(word_at(p, bytes, bit0 + (size_t)j * 8 * b), m);
        memcpy(c + 8 * j, &w, 8);
    }
    if (8 * j < n) {
        const uint64_t w = _pdep_u64(word_at(p, bytes, bit0 + (size_t)j * 8 * b), m);
        memcpy(c + 8 * j, &w, (size_t)(n - 8 * j));
    }
}

static void unpack_shift(const uint8_t *p, size_t bit0, int b, int n, uint8_t *c) {
    const uint64_t mk = (1u << b) - 1u;
    const size_t bytes = (bit0 + (size_t)n * b + 7) / 8;
    for (int j = 0; 8 * j < n; j++) {
        const uint64_t w = word_at(p, bytes, bit0 + (size_t)j * 8 * b);
        const int k = n - 8 * j < 8 ? n - 8 * j : 8;
        for (int i = 0; i < k; i++) c[8 * j + i] = (uint8_t)(w >> (i * b) & mk);
    }
}

void kvq_codes_unpack_at(const uint8_t *p, size_t bit0, int b, int n, uint8_t *c) {
    if (b == 8 && bit0 % 8 == 0) memcpy(c, p + bit0 / 8, (size_t)n);
    else if (b == 8) kvq_codes_unpack_ref(p + bit0 / 8, (int)(bit0 % 8), b, n, c); // 71 bits: not one word
    else if (kvq_cpu_features() & KVQ_CPU_BMI2) unpack_bmi2(p, bit0, b, n, c);
    else unpack_shift(p, bit0, b, n, c);
}

void kvq_codes_unpack(const uint8_t *p, int b, int n, uint8_t *c) { kvq_codes_unpack_at(p, 0, b, n, c); }

// ---- sums over unpacked codes: AVX-512 (16 codes a step, masked tail), AVX2 (8 a step) and
// plain loops

#define KC_TGT __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

static inline __mmask16 kc_lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

KC_TGT static inline __m512 kc_codes16(const uint8_t *c, __mmask16 m) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, c)));
}

// lut[c] for 16 codes: one permute when the table has at most 16 entries, a gather otherwise.
KC_TGT static inline __m512 kc_lut16(const float *lut, __m512 lv, int small, const uint8_t *c, __mmask16 m) {
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, c));
    return small ? _mm512_permutexvar_ps(idx, lv) : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, lut, 4);
}

KC_TGT static void axpy_avx512(float *acc, float w, const uint8_t *c, int n) {
    const __m512 wv = _mm512_set1_ps(w);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = kc_lanes(n - i);
        const __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
        _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(wv, kc_codes16(c + i, m), a));
    }
}

KC_TGT static float dot_avx512(const float *q, const uint8_t *c, int n) {
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = kc_lanes(n - i);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), kc_codes16(c + i, m), a);
    }
    return _mm512_reduce_add_ps(a);
}

KC_TGT static void lut_axpy_avx512(float *acc, float w, const float *lut, int nlut, const uint8_t *c, int n) {
    const int small = nlut <= 16;
    const __m512 wv = _mm512_set1_ps(w), lv = small ? _mm512_maskz_loadu_ps(kc_lanes(nlut), lut) : _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = kc_lanes(n - i);
        const __m512 a = _mm512_maskz_loadu_ps(m, acc + i);
        _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(wv, kc_lut16(lut, lv, small, c + i, m), a));
    }
}

KC_TGT static float lut_dot_avx512(const float *q, const float *lut, int nlut, const uint8_t *c, int n) {
    const int small = nlut <= 16;
    const __m512 lv = small ? _mm512_maskz_loadu_ps(kc_lanes(nlut), lut) : _mm512_setzero_ps();
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = kc_lanes(n - i);
        a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), kc_lut16(lut, lv, small, c + i, m), a);
    }
    return _mm512_reduce_add_ps(a);
}

// ---- AVX2 + FMA: 8 codes a step, the tail in plain code

#define K2_TGT __attribute__((target("avx2,fma")))

K2_TGT static inline __m256 k2_codes8(const uint8_t *c) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c)));
}

// lut[c] for 8 codes: one permute for tables of up to 8 entries, two and a blend on bit 3 for up
// to 16, a gather beyond.
K2_TGT static inline __m256 k2_lut8(const float *lut, __m256 lo, __m256 hi, int nlut, const uint8_t *c) {
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)c));
    if (nlut <= 8) return _mm256_permutevar8x32_ps(lo, idx);
    if (nlut <= 16) {
        const __m256 sel = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)); // bit 3 to the sign
        return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx), sel);
    }
    return _mm256_i32gather_ps(lut, idx, 4);
}

K2_TGT static void k2_tables(const float *lut, int nlut, __m256 *lo, __m256 *hi) {
    float t[16] = {0};
    memcpy(t, lut, sizeof(float) * (nlut < 16 ? nlut : 16));
    *lo = _mm256_loadu_ps(t), *hi = _mm256_loadu_ps(t + 8);
}

K2_TGT static inline float k2_hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

K2_TGT static void axpy_avx2(float *acc, float w, const uint8_t *c, int n) {
    const __m256 wv = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, k2_codes8(c + i), _mm256_loadu_ps(acc + i)));
    for (; i < n; i++) acc[i] += w * (float)c[i];
}

K2_TGT static float dot_avx2(const float *q, const uint8_t *c, int n) {
    __m256 a = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), k2_codes8(c + i), a);
    float r = k2_hsum(a);
    for (; i < n; i++) r += q[i] * (float)c[i];
    return r;
}

K2_TGT static void lut_axpy_avx2(float *acc, float w, const float *lut, int nlut, const uint8_t *c, int n) {
    __m256 lo, hi;
    k2_tables(lut, nlut, &lo, &hi);
    const __m256 wv = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, k2_lut8(lut, lo, hi, nlut, c + i), _mm256_loadu_ps(acc + i)));
    for (; i < n; i++) acc[i] += w * lut[c[i]];
}

K2_TGT static float lut_dot_avx2(const float *q, const float *lut, int nlut, const uint8_t *c, int n) {
    __m256 lo, hi;
    k2_tables(lut, nlut, &lo, &hi);
    __m256 a = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), k2_lut8(lut, lo, hi, nlut, c + i), a);
    float r = k2_hsum(a);
    for (; i < n; i++) r += q[i] * lut[c[i]];
    return r;
}

K2_TGT static float fdot_avx2(const float *a, const float *b, int n) {
    __m256 s = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
    float r = k2_hsum(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

K2_TGT static void faxpy_avx2(float *acc, float w, const float *x, int n) {
    const __m256 wv = _mm256_set1_ps(w);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(acc + i)));
    for (; i < n; i++) acc[i] += w * x[i];
}

// ---- dispatch

float kvq_codes_fdot(const float *a, const float *b, int n) {
    if (kvq_cpu_features() & KVQ_CPU_AVX2) return fdot_avx2(a, b, n);
    float r = 0;
    for (int i = 0; i < n; i++) r += a[i] * b[i];
    return r;
}

void kvq_codes_faxpy(float *acc, float w, const float *x, int n) {
    if (kvq_cpu_features() & KVQ_CPU_AVX2) { faxpy_avx2(acc, w, x, n); return; }
    for (int i = 0; i < n; i++) acc[i] += w * x[i];
}

void kvq_codes_axpy(float *acc, float w, const uint8_t *c, int n) {
    if (kvq_cpu_features() & KVQ_CPU_AVX512) { axpy_avx512(acc, w, c, n); return; }
    if (kvq_cpu_features() & KVQ_CPU_AVX2) { axpy_avx2(acc, w, c, n); return; }
    for (int i = 0; i < n; i++) acc[i] += w * (float)c[i];
}

float kvq_codes_dot(const float *q, const uint8_t *c, int n) {
    if (kvq_cpu_features() & KVQ_CPU_AVX512) return dot_avx512(q, c, n);
    if (kvq_cpu_features() & KVQ_CPU_AVX2) return dot_avx2(q, c, n);
    float a = 0;
    for (int i = 0; i < n; i++) a += q[i] * (float)c[i];
    return a;
}

void kvq_codes_lut_axpy(float *acc, float w, const float *lut, int nlut, const uint8_t *c, int n) {
    if (kvq_cpu_features() & KVQ_CPU_AVX512) { lut_axpy_avx512(acc, w, lut, nlut, c, n); return; }
    if (kvq_cpu_features() & KVQ_CPU_AVX2) { lut_axpy_avx2(acc, w, lut, nlut, c, n); return; }
    for (int i = 0; i < n; i++) acc[i] += w * lut[c[i]];
}

float kvq_codes_lut_dot(const float *q, const float *lut, int nlut, const uint8_t *c, int n) {
    if (kvq_cpu_features() & KVQ_CPU_AVX512) return lut_dot_avx512(q, lut, nlut, c, n);
    if (kvq_cpu_features() & KVQ_CPU_AVX2) return lut_dot_avx2(q, lut, nlut, c, n);
    float a = 0;
    for (int i = 0; i < n; i++) a += q[i] * lut[c[i]];
    return a;
}
