// Attention over a contiguous K/V history (n_ctx, head_dim) for a group of query
// heads that share one KV head (GQA): out_i = softmax(q_i·Kᵀ·scale)·V. K and V are
// fp32 or fp16; the default KV cache (and codecs that decode to blocks) call this.
#ifndef KVQ_KERNELS_ATTENTION_H
#define KVQ_KERNELS_ATTENTION_H

#include "formats/dtype.h"

/** One query, fp32 K/V; plain loops. out (head_dim). */
void kvq_attention_ref(float *out, const float *q, const float *K, const float *V, int n_ctx,
                       int head_dim, float scale);

/** n_q queries q (n_q, head_dim) against keys stored TRANSPOSED, Kt (head_dim, ld)
 *  (row i holds component i of every position, so scores vectorize over positions
 *  with no horizontal sums), and V (n_ctx, head_dim), both of dtype kv (F32 or F16);
 *  out (n_q, head_dim). scratch holds n_q·n_ctx floats (caller-owned).
 *  Single-threaded: callers parallelize over tokens and heads. */
void kvq_attention_gqa(float *out, const float *q, int n_q, const void *Kt, int ld, const void *V,
                       kvq_dtype kv, int n_ctx, int head_dim, float scale, float *scratch);

/** One query q (head_dim) against n_ctx positions with keys K and values V stored by rows
 *  (n_ctx, head_dim), fp32: scores sc[t] = q·K[t] for t in [t0, n_ctx) (sc[0..t0) are the
 *  caller's, unscaled, e.g. from a KV codec's packed keys), then out = softmax(scale·sc)·V.
 *  sc (n_ctx floats) ends holding the probabilities. */
/** The first half of kvq_attention_rows: scores sc[t] = q·K[t] for t in [t0, n_ctx) (sc[0..t0) are
 *  the caller's, unscaled), then sc = softmax(scale·sc) in place: the weights of the values, for
 *  callers that sum the values themselves (a KV codec reading its packed values). */
void kvq_attention_probs(const float *q, const float *K, int n_ctx, int t0, int head_dim, float scale, float *sc);

void kvq_attention_rows(float *out, const float *q, const float *K, const float *V, int n_ctx, int t0, int head_dim,
                        float scale, float *sc);

#endif
