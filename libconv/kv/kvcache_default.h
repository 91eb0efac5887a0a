// The default KV cache: K and V stored per (layer, KV head) in fp32 or fp16 (K
// transposed, V row per position), attention by kernels/cpu/attention. It implements
// libconv/kvcache.h; KV codecs provide other implementations of the same ops.
#ifndef KVQ_KVCACHE_DEFAULT_H
#define KVQ_KVCACHE_DEFAULT_H

#include "libconv/kv/kvcache.h"

/** New empty cache for positions [0, max_ctx). fp16: store K/V rounded to fp16 (RNE)
 *  instead of fp32. @return KVQ_OK and *out (free with c->ops->free(c)); KVQ_ERR_ARG for a
 *  non-positive or overflowing shape, KVQ_ERR_NOMEM; err says which. */
kvq_status kvq_kvcache_default_new(int n_layers, int n_kv_heads, int head_dim, int max_ctx, int fp16,
                                   kvq_kvcache **out, kvq_err *err);

#endif
