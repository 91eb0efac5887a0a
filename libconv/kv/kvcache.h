// The runtime's KV-cache interface. The model calls append for each new token and
// attend for each query; the default implementation stores fp32 or fp16, and KV
// codecs (libconv/kv/) provide other implementations of the same ops, so the model
// code never changes when the cache is quantized.
#ifndef KVQ_KVCACHE_H
#define KVQ_KVCACHE_H

#include <stddef.h>

#include "formats/error.h"

typedef struct kvq_kvcache kvq_kvcache;

typedef struct {
    /** Stores one token's K and V for one layer: k, v are (n_kv_heads, head_dim).
     *  @return KVQ_OK, or an error described in c->err (layer, head, codec, cause). */
    kvq_status (*append)(kvq_kvcache *c, int layer, int pos, const float *k, const float *v);
    /** For one layer and KV head: q is (n_q, head_dim) — the query heads sharing this
     *  KV head — each attending causally to positions [0, n_ctx). out (n_q, head_dim)
     *  receives softmax(q·Kᵀ·scale)·V. Safe from several threads at once.
     *  @return KVQ_OK, or an error (c->err says which layer, head, codec and cause). */
    kvq_status (*attend)(kvq_kvcache *c, int layer, int kv_head, const float *q, int n_q, int n_ctx,
                         float scale, float *out);
    /** Forgets positions >= pos (new sequence: 0). */
    void (*truncate)(kvq_kvcache *c, int pos);
    /** Effective bits per stored element (16 or 32 for the default cache). */
    double (*bits_per_element)(const kvq_kvcache *c);
    void (*free)(kvq_kvcache *c);
    /** Optional (NULL = 0): bytes held at capacity as execution forms, in place of the records
     *  that bits_per_element counts (docs/KV.md "Execution form": HQMQ, HyperQuant-KV). */
    size_t (*exec_bytes)(const kvq_kvcache *c);
    /** Optional (NULL: the caller calls attend per token): T query tokens of one sequence at
     *  positions [pos, pos + T), all appended already, for one layer and KV head. Token t's n_q
     *  query heads are q + t·q_stride (n_q, head_dim), attending causally to [0, pos + t + 1);
     *  its output goes to out + t·out_stride (n_q, head_dim). Equals T calls of attend on the
     *  same cache contents (a codec cache made with policy.chunks: bit for bit its shadow's).
     *  Safe from several threads at once. @return KVQ_OK, or an error in c->err. */
    kvq_status (*attend_chunk)(kvq_kvcache *c, int layer, int kv_head, const float *q, size_t q_stride, int n_q, int T,
                               int pos, float scale, float *out, size_t out_stride);
    /** Optional (NULL = 0): bytes the cache holds now (stores, rings, execution rows, shadow,
     *  the scratch pool), for memory reports. */
    size_t (*held_bytes)(const kvq_kvcache *c);
} kvq_kvcache_ops;

struct kvq_kvcache {
    const kvq_kvcache_ops *ops;
    int n_layers, n_kv_heads, head_dim, max_ctx;
    kvq_err err; // the error channel: the last failing op's message (layer, head, codec, cause)
};

/** Records a failure of an op in c->err (one writer at a time: attend may fail on several
 *  threads) and returns code. */
kvq_status kvq_kvcache_fail(kvq_kvcache *c, kvq_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
