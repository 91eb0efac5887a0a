// Default fp32/fp16 KV cache (see kvcache_default.h). Per (layer, KV head): K stored
// transposed (head_dim, max_ctx) so scores vectorize over positions, V as (max_ctx,
// head_dim). attend is safe to call from many threads at once; append is not.
#include "libconv/kv/kvcache_default.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cpu/attention.h"

typedef struct {
    kvq_kvcache base;
    kvq_dtype dt;
    size_t head_stride; // elements per (layer, head) block = max_ctx * head_dim
    void *k, *v;
} kv_default;

static size_t off(const kv_default *c, int layer, int head) {
    return ((size_t)layer * c->base.n_kv_heads + head) * c->head_stride;
}

static kvq_status kd_append(kvq_kvcache *cc, int layer, int pos, const float *k, const float *v) {
    kv_default *c = (kv_default *)cc;
    if (pos < 0 || pos >= cc->max_ctx || layer < 0 || layer >= cc->n_layers)
        return kvq_kvcache_fail(cc, KVQ_ERR_ARG, "KV cache layer %d: position %d outside [0, %d)", layer, pos, cc->max_ctx);
    int hd = cc->head_dim;
    size_t es = kvq_dtype_size(c->dt);
    for (int h = 0; h < cc->n_kv_heads; h++) {
        size_t base = off(c, layer, h);
        for (int i = 0; i < hd; i++) // column pos of the transposed K block
            kvq_dtype_from_f32(c->dt, k + (size_t)h * hd + i, 1,
                               (uint8_t *)c->k + (base + (size_t)i * cc->max_ctx + pos) * es);
        kvq_dtype_from_f32(c->dt, v + (size_t)h * hd, hd, (uint8_t *)c->v + (base + (size_t)pos * hd) * es);
    }
    return KVQ_OK;
}

static kvq_status kd_attend(kvq_kvcache *cc, int layer, int kv_head, const float *q, int n_q, int n_ctx,
                            float scale, float *out) {
    kv_default *c = (kv_default *)cc;
    KVQ_ASSERT(n_ctx >= 1 && n_ctx <= cc->max_ctx);
    size_t es = kvq_dtype_size(c->dt), o = off(c, layer, kv_head) * es;
    float stack[4096], *sc = (size_t)n_q * n_ctx <= 4096 ? stack : malloc(sizeof(float) * n_q * n_ctx);
    if (!sc)
        return kvq_kvcache_fail(cc, KVQ_ERR_NOMEM, "KV cache (%s) layer %d head %d: out of memory for %d x %d attention scores",
                                c->dt == KVQ_DTYPE_F16 ? "fp16" : "fp32", layer, kv_head, n_q, n_ctx);
    kvq_attention_gqa(out, q, n_q, (uint8_t *)c->k + o, cc->max_ctx, (uint8_t *)c->v + o, c->dt,
                      n_ctx, cc->head_dim, scale, sc);
    if (sc != stack) free(sc);
    return KVQ_OK;
}

static void kd_truncate(kvq_kvcache *cc, int pos) { (void)cc; (void)pos; } // rows are overwritten

static double kd_bits(const kvq_kvcache *cc) { return 8.0 * kvq_dtype_size(((const kv_default *)cc)->dt); }

static void kd_free(kvq_kvcache *cc) {
    kv_default *c = (kv_default *)cc;
    if (!c) return;
    free(c->k);
    free(c->v);
    free(c);
}

static const kvq_kvcache_ops kd_ops = {kd_append, kd_attend, kd_truncate, kd_bits, kd_free, NULL, NULL, NULL};

kvq_status kvq_kvcache_default_new(int n_layers, int n_kv_heads, int head_dim, int max_ctx, int fp16,
                                   kvq_kvcache **out, kvq_err *err) {
    *out = NULL;
    if (n_layers <= 0 || n_kv_heads <= 0 || head_dim <= 0 || max_ctx <= 0)
        return kvq_err_set(err, KVQ_ERR_ARG, "KV cache: bad shape (%d layers, %d heads, head_dim %d, %d positions)",
                           n_layers, n_kv_heads, head_dim, max_ctx);
    kv_default *c = calloc(1, sizeof *c);
    if (!c) return kvq_err_set(err, KVQ_ERR_NOMEM, "KV cache: out of memory");
    c->base = (kvq_kvcache){&kd_ops, n_layers, n_kv_heads, head_dim, max_ctx, {0}};
    c->dt = fp16 ? KVQ_DTYPE_F16 : KVQ_DTYPE_F32;
    c->head_stride = (size_t)max_ctx * head_dim;
    size_t n = (size_t)n_layers * n_kv_heads * c->head_stride, es = kvq_dtype_size(c->dt);
    if (n / c->head_stride != (size_t)n_layers * n_kv_heads) {
        free(c);
        return kvq_err_set(err, KVQ_ERR_ARG, "KV cache: %d layers x %d heads x %d positions overflow", n_layers,
                           n_kv_heads, max_ctx);
    }
    c->k = calloc(n, es);
    c->v = calloc(n, es);
    if (!c->k || !c->v) {
        kd_free(&c->base);
        return kvq_err_set(err, KVQ_ERR_NOMEM, "KV cache: out of memory for %d positions (%zu bytes)", max_ctx, 2 * n * es);
    }
    *out = &c->base;
    return KVQ_OK;
}
