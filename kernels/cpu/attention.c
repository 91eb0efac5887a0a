// Scaled dot-product attention of a few query heads over one KV head's history:
// reference and the fast path (keys transposed so q·Kᵀ is a sum of axpys over
// positions, vectorized exp, AVX clones; fp16 converted in registers).
#include "kernels/cpu/attention.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fastexp.h"

void kvq_attention_ref(float *out, const float *q, const float *K, const float *V, int n_ctx,
                       int head_dim, float scale) {
    float m = -INFINITY;
    for (int j = 0; j < n_ctx; j++) {
        float s = 0.0f;
        for (int i = 0; i < head_dim; i++) s += q[i] * K[(size_t)j * head_dim + i];
        if (s * scale > m) m = s * scale;
    }
    double z = 0.0;
    for (int i = 0; i < head_dim; i++) out[i] = 0.0f;
    for (int j = 0; j < n_ctx; j++) {
        float s = 0.0f;
        for (int i = 0; i < head_dim; i++) s += q[i] * K[(size_t)j * head_dim + i];
        float p = expf(s * scale - m);
        z += p;
        for (int i = 0; i < head_dim; i++) out[i] += p * V[(size_t)j * head_dim + i];
    }
    for (int i = 0; i < head_dim; i++) out[i] = (float)(out[i] / z);
}

#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

// One body for fp32 and fp16 storage (ET = element type), instantiated twice.
#define GQA_BODY(ET, TOF)                                                                     \
    for (int h = 0; h < n_q; h++) memset(sc + (size_t)h * n_ctx, 0, sizeof(float) * n_ctx); \
    for (int i = 0; i < hd; i++) {                                                            \
        const ET *kr = Kt + (size_t)i * ld;                                                   \
        for (int h = 0; h < n_q; h++) {                                                       \
            float qi = q[(size_t)h * hd + i], *s = sc + (size_t)h * n_ctx;                    \
            _Pragma("omp simd") for (int j = 0; j < n_ctx; j++) s[j] += qi * TOF(kr[j]);      \
        }                                                                                     \
    }                                                                                         \
    for (int h = 0; h < n_q; h++) {                                                           \
        float *s = sc + (size_t)h * n_ctx, m = -INFINITY, z = 0.0f;                           \
        _Pragma("omp simd reduction(max : m)") for (int j = 0; j < n_ctx; j++) {              \
            s[j] *= scale;                                                                    \
            m = s[j] > m ? s[j] : m;                                                          \
        }                                                                                     \
        _Pragma("omp simd reduction(+ : z)") for (int j = 0; j < n_ctx; j++) {                \
            s[j] = kvq_fast_expf(s[j] - m);                                                   \
            z += s[j];                                                                        \
        }                                                                                     \
        float inv = 1.0f / z;                                                                 \
        _Pragma("omp simd") for (int j = 0; j < n_ctx; j++) s[j] *= inv;                      \
    }                                                                                         \
    memset(out, 0, sizeof(float) * n_q * hd);                                                 \
    for (int j = 0; j < n_ctx; j++) {                                                         \
        const ET *v = V + (size_t)j * hd;                                                     \
        for (int h = 0; h < n_q; h++) {                                                       \
            float p = sc[(size_t)h * n_ctx + j], *o = out + (size_t)h * hd;                   \
            _Pragma("omp simd") for (int i = 0; i < hd; i++) o[i] += p * TOF(v[i]);           \
        }                                                                                     \
    }

CLONES static void gqa_f32(float *out, const float *q, int n_q, const float *Kt, int ld,
                           const float *V, int n_ctx, int hd, float scale, float *sc) {
    GQA_BODY(float, (float))
}

// fp16 storage: _Float16 where the compiler has it on x86 (GCC; clang from 15), converted in
// registers; clang 14 has neither _Float16 on x86 nor a runtime helper for __fp16 in libgcc,
// so it reads the bits and widens them with kvq_f16_to_f32 (exact either way).
#if defined(__clang__) && __clang_major__ < 15
typedef uint16_t kvq_half;
#define KVQ_HALF_F32(x) kvq_f16_to_f32(x)
#else
typedef _Float16 kvq_half;
#define KVQ_HALF_F32(x) ((float)(x))
#endif

CLONES static void gqa_f16(float *out, const float *q, int n_q, const kvq_half *Kt, int ld,
                           const kvq_half *V, int n_ctx, int hd, float scale, float *sc) {
    GQA_BODY(kvq_half, KVQ_HALF_F32)
}

// ---- AVX-512, register-blocked: scores for 64 positions × up to 4 query heads stay in
// registers over the head dimension (one key load serves every head), and the output of up
// to 4 heads × 64 channels stays in registers over the positions (one value load serves every
// head). The plain body above reads and writes its score and output rows once per channel and
// once per position instead. Same sums in the same order per element, with fused multiply-adds.
#define AT_TGT __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c")))

// The lanes of a 16-wide step with n elements left (all of them from 16 on, none at n <= 0).
static inline __mmask16 at_lanes(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

AT_TGT static inline __m512 at_load16(const void *p, int f16, size_t i, __mmask16 m) {
    return f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i))
               : _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

// Scores of NH ≤ 4 heads for 64 positions per pass: row i of Kt is read 256 contiguous bytes
// at a time (with the next 256 prefetched), since the rows lie max_ctx apart and a 16-position
// block per row left the loads waiting on memory.
AT_TGT __attribute__((always_inline)) static inline void at_scores(float *sc, const float *q, const void *Kt, int ld,
                                                                   int n_ctx, int hd, float scale, int f16, const int NH) {
    const size_t es = f16 ? 2 : 4;
    for (int j0 = 0; j0 < n_ctx; j0 += 64) {
        __mmask16 m[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
            m[c] = at_lanes(n_ctx - j0 - 16 * c);
        }
        __m512 acc[4][4];
        _Pragma("GCC unroll 4") for (int h = 0; h < NH; h++)
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc[h][c] = _mm512_setzero_ps();
        for (int i = 0; i < hd; i++) {
            const char *row = (const char *)Kt + ((size_t)i * ld + j0) * es;
            _mm_prefetch(row + 64 * es, _MM_HINT_T0);
            _mm_prefetch(row + 64 * es + 64, _MM_HINT_T0);
            if (!f16) { _mm_prefetch(row + 64 * es + 128, _MM_HINT_T0); _mm_prefetch(row + 64 * es + 192, _MM_HINT_T0); }
            __m512 k[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) k[c] = at_load16(Kt, f16, (size_t)i * ld + j0 + 16 * c, m[c]);
            _Pragma("GCC unroll 4") for (int h = 0; h < NH; h++) {
                const __m512 qv = _mm512_set1_ps(q[(size_t)h * hd + i]);
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc[h][c] = _mm512_fmadd_ps(qv, k[c], acc[h][c]);
            }
        }
        _Pragma("GCC unroll 4") for (int h = 0; h < NH; h++)
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                _mm512_mask_storeu_ps(sc + (size_t)h * n_ctx + j0 + 16 * c, m[c], _mm512_mul_ps(acc[h][c], _mm512_set1_ps(scale)));
    }
}

AT_TGT __attribute__((always_inline)) static inline void at_values(float *out, const float *sc, const void *V, int n_ctx,
                                                                   int hd, int f16, const int NH) {
    for (int i0 = 0; i0 < hd; i0 += 64) {
        __m512 acc[4][4];
        _Pragma("GCC unroll 4") for (int h = 0; h < NH; h++)
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc[h][c] = _mm512_setzero_ps();
        for (int j = 0; j < n_ctx; j++) {
            __m512 v[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) v[c] = at_load16(V, f16, (size_t)j * hd + i0 + 16 * c, 0xffff);
            _Pragma("GCC unroll 4") for (int h = 0; h < NH; h++) {
                const __m512 p = _mm512_set1_ps(sc[(size_t)h * n_ctx + j]);
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc[h][c] = _mm512_fmadd_ps(p, v[c], acc[h][c]);
            }
        }
        _Pragma("GCC unroll 4") for (int h = 0; h < NH; h++)
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) _mm512_storeu_ps(out + (size_t)h * hd + i0 + 16 * c, acc[h][c]);
    }
}

// kvq_fast_expf (fastexp.h) on 16 lanes, the same operations in the same order (unfused, as
// this file compiles the scalar one), so each lane equals the scalar result bit for bit.
AT_TGT static inline __m512 at_expf(__m512 xin) {
    __m512 x = _mm512_max_ps(_mm512_min_ps(xin, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(0.693145751953125f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f)));
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 120));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 24));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 6));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    const __m512 sc = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
    __m512 y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GT_OQ), _mm512_mul_ps(p, sc));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(xin, xin, _CMP_UNORD_Q), xin);
}

// Row s of n scores (already scaled) becomes its softmax in place.
AT_TGT static void at_softmax(float *s, int n_ctx) {
    __m512 mv = _mm512_set1_ps(-INFINITY), zv = _mm512_setzero_ps();
    for (int j = 0; j < n_ctx; j += 16) {
        const __mmask16 k = at_lanes(n_ctx - j);
        mv = _mm512_mask_max_ps(mv, k, _mm512_maskz_loadu_ps(k, s + j), mv);
    }
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    for (int j = 0; j < n_ctx; j += 16) {
        const __mmask16 k = at_lanes(n_ctx - j);
        const __m512 e = at_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), m));
        _mm512_mask_storeu_ps(s + j, k, e);
        zv = _mm512_mask_add_ps(zv, k, zv, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(zv));
    for (int j = 0; j < n_ctx; j += 16) {
        const __mmask16 k = at_lanes(n_ctx - j);
        _mm512_mask_storeu_ps(s + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), inv));
    }
}

AT_TGT static void gqa_avx512(float *out, const float *q, int n_q, const void *Kt, int ld, const void *V, int f16,
                              int n_ctx, int hd, float scale, float *sc) {
    for (int h0 = 0; h0 < n_q; h0 += 4) {
        const int nh = n_q - h0 < 4 ? n_q - h0 : 4;
        float *s = sc + (size_t)h0 * n_ctx;
        const float *qh = q + (size_t)h0 * hd;
        switch (nh) {
        case 1: at_scores(s, qh, Kt, ld, n_ctx, hd, scale, f16, 1); break;
        case 2: at_scores(s, qh, Kt, ld, n_ctx, hd, scale, f16, 2); break;
        case 3: at_scores(s, qh, Kt, ld, n_ctx, hd, scale, f16, 3); break;
        default: at_scores(s, qh, Kt, ld, n_ctx, hd, scale, f16, 4); break;
        }
    }
    for (int h = 0; h < n_q; h++) at_softmax(sc + (size_t)h * n_ctx, n_ctx);
    for (int h0 = 0; h0 < n_q; h0 += 4) {
        const int nh = n_q - h0 < 4 ? n_q - h0 : 4;
        float *o = out + (size_t)h0 * hd;
        const float *s = sc + (size_t)h0 * n_ctx;
        switch (nh) {
        case 1: at_values(o, s, V, n_ctx, hd, f16, 1); break;
        case 2: at_values(o, s, V, n_ctx, hd, f16, 2); break;
        case 3: at_values(o, s, V, n_ctx, hd, f16, 3); break;
        default: at_values(o, s, V, n_ctx, hd, f16, 4); break;
        }
    }
}

void kvq_attention_gqa(float *out, const float *q, int n_q, const void *Kt, int ld, const void *V,
                       kvq_dtype kv, int n_ctx, int head_dim, float scale, float *scratch) {
    KVQ_ASSERT(kv == KVQ_DTYPE_F32 || kv == KVQ_DTYPE_F16);
    KVQ_ASSERT(ld >= n_ctx);
    if (head_dim % 64 == 0 && (kvq_cpu_features() & KVQ_CPU_AVX512))
        gqa_avx512(out, q, n_q, Kt, ld, V, kv == KVQ_DTYPE_F16, n_ctx, head_dim, scale, scratch);
    else if (kv == KVQ_DTYPE_F32) gqa_f32(out, q, n_q, Kt, ld, V, n_ctx, head_dim, scale, scratch);
    else gqa_f16(out, q, n_q, Kt, ld, V, n_ctx, head_dim, scale, scratch);
}

// ---- one query against keys stored by rows (the KV-codec cache decodes into rows)

static void probs_plain(const float *q, const float *K, int n_ctx, int t0, int hd, float scale, float *sc) {
    for (int t = t0; t < n_ctx; t++) {
        float a = 0;
        for (int j = 0; j < hd; j++) a += q[j] * K[(size_t)t * hd + j];
        sc[t] = a;
    }
    float m = -INFINITY, z = 0;
    for (int t = 0; t < n_ctx; t++) sc[t] *= scale, m = fmaxf(m, sc[t]);
    for (int t = 0; t < n_ctx; t++) sc[t] = expf(sc[t] - m), z += sc[t];
    for (int t = 0; t < n_ctx; t++) sc[t] = sc[t] / z;
}

static void rows_plain(float *out, const float *q, const float *K, const float *V, int n_ctx, int t0, int hd,
                       float scale, float *sc) {
    probs_plain(q, K, n_ctx, t0, hd, scale, sc);
    memset(out, 0, sizeof(float) * hd);
    for (int t = 0; t < n_ctx; t++)
        for (int j = 0; j < hd; j++) out[j] += sc[t] * V[(size_t)t * hd + j];
}

AT_TGT static void probs_avx512(const float *q, const float *K, int n_ctx, int t0, int hd, float scale, float *sc) {
    for (int t = t0; t < n_ctx; t++) {
        const float *k = K + (size_t)t * hd;
        __m512 a = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
        for (int j = 16; j < hd; j += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + j), _mm512_loadu_ps(k + j), a);
        sc[t] = _mm512_reduce_add_ps(a);
    }
    const __m512 sv = _mm512_set1_ps(scale);
    for (int j = 0; j < n_ctx; j += 16) {
        const __mmask16 k = at_lanes(n_ctx - j);
        _mm512_mask_storeu_ps(sc + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, sc + j), sv));
    }
    at_softmax(sc, n_ctx);
}

AT_TGT static void rows_avx512(float *out, const float *q, const float *K, const float *V, int n_ctx, int t0, int hd,
                               float scale, float *sc) {
    probs_avx512(q, K, n_ctx, t0, hd, scale, sc);
    at_values(out, sc, V, n_ctx, hd, 0, 1);
}

void kvq_attention_probs(const float *q, const float *K, int n_ctx, int t0, int head_dim, float scale, float *sc) {
    if (head_dim % 64 == 0 && (kvq_cpu_features() & KVQ_CPU_AVX512)) probs_avx512(q, K, n_ctx, t0, head_dim, scale, sc);
    else probs_plain(q, K, n_ctx, t0, head_dim, scale, sc);
}

void kvq_attention_rows(float *out, const float *q, const float *K, const float *V, int n_ctx, int t0, int head_dim,
                        float scale, float *sc) {
    if (head_dim % 64 == 0 && (kvq_cpu_features() & KVQ_CPU_AVX512)) rows_avx512(out, q, K, V, n_ctx, t0, head_dim, scale, sc);
    else rows_plain(out, q, K, V, n_ctx, t0, head_dim, scale, sc);
}
