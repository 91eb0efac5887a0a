// Scaled dot-product attention of a few query heads over one KV head's history:
// reference and the fast path (keys transposed so q·Kᵀ is a sum of axpys over
// positions, vectorized exp, AVX clones; fp16 converted in registers).
#include "kernels/cpu/attention.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/error.h"
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

void kvq_attention_gqa(float *out, const float *q, int n_q, const void *Kt, int ld, const void *V,
                       kvq_dtype kv, int n_ctx, int head_dim, float scale, float *scratch) {
    KVQ_ASSERT(kv == KVQ_DTYPE_F32 || kv == KVQ_DTYPE_F16);
    KVQ_ASSERT(ld >= n_ctx);
    if (kv == KVQ_DTYPE_F32) gqa_f32(out, q, n_q, Kt, ld, V, n_ctx, head_dim, scale, scratch);
    else gqa_f16(out, q, n_q, Kt, ld, V, n_ctx, head_dim, scale, scratch);
}
