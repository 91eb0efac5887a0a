// Scaled dot-product attention of a few query heads over one KV head's history:
// reference and the fast path (K/V rows read once per group, AVX clones; fp16 rows
// converted in registers).
#include "kernels/cpu/attention.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "formats/error.h"
#include "kernels/cpu/softmax.h"

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

CLONES static void gqa_f32(float *out, const float *q, int n_q, const float *K, const float *V,
                           int n_ctx, int hd, float scale, float *sc) {
    for (int j = 0; j < n_ctx; j++) {
        const float *k = K + (size_t)j * hd;
        for (int h = 0; h < n_q; h++) {
            const float *qh = q + (size_t)h * hd;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < hd; i++) s += qh[i] * k[i];
            sc[(size_t)h * n_ctx + j] = s * scale;
        }
    }
    for (int h = 0; h < n_q; h++) kvq_softmax(sc + (size_t)h * n_ctx, n_ctx);
    memset(out, 0, sizeof(float) * n_q * hd);
    for (int j = 0; j < n_ctx; j++) {
        const float *v = V + (size_t)j * hd;
        for (int h = 0; h < n_q; h++) {
            float p = sc[(size_t)h * n_ctx + j], *o = out + (size_t)h * hd;
#pragma omp simd
            for (int i = 0; i < hd; i++) o[i] += p * v[i];
        }
    }
}

CLONES static void gqa_f16(float *out, const float *q, int n_q, const _Float16 *K,
                           const _Float16 *V, int n_ctx, int hd, float scale, float *sc) {
    for (int j = 0; j < n_ctx; j++) {
        const _Float16 *k = K + (size_t)j * hd;
        for (int h = 0; h < n_q; h++) {
            const float *qh = q + (size_t)h * hd;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < hd; i++) s += qh[i] * (float)k[i];
            sc[(size_t)h * n_ctx + j] = s * scale;
        }
    }
    for (int h = 0; h < n_q; h++) kvq_softmax(sc + (size_t)h * n_ctx, n_ctx);
    memset(out, 0, sizeof(float) * n_q * hd);
    for (int j = 0; j < n_ctx; j++) {
        const _Float16 *v = V + (size_t)j * hd;
        for (int h = 0; h < n_q; h++) {
            float p = sc[(size_t)h * n_ctx + j], *o = out + (size_t)h * hd;
#pragma omp simd
            for (int i = 0; i < hd; i++) o[i] += p * (float)v[i];
        }
    }
}

void kvq_attention_gqa(float *out, const float *q, int n_q, const void *K, const void *V,
                       kvq_dtype kv, int n_ctx, int head_dim, float scale, float *scratch) {
    KVQ_ASSERT(kv == KVQ_DTYPE_F32 || kv == KVQ_DTYPE_F16);
    if (kv == KVQ_DTYPE_F32) gqa_f32(out, q, n_q, K, V, n_ctx, head_dim, scale, scratch);
    else gqa_f16(out, q, n_q, K, V, n_ctx, head_dim, scale, scratch);
}
