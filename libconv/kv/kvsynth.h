// Seeded synthetic keys and values, for filling a KV cache without running a model: the
// decode benchmark at long context (kvq_model_fill_kv, tests/bench/cuda_decode_fill.c) and
// its tests. Each element is a function of (seed, layer, position, channel, K or V) alone, so
// any chunking, thread count or backend sees the same numbers. Statistics (docs/KV.md,
// "Decode at long context without the prefill"): per channel a Gaussian, keys with a log-normal
// spread of scales and a per-channel mean, values narrower and centred.
#ifndef KVQ_KVSYNTH_H
#define KVQ_KVSYNTH_H

#include <stdint.h>

#include "formats/error.h"

/** Channel c (0 <= c < n_kv·head_dim, head-major) of layer's keys (role 0) or values (role 1):
 *  elements are mu + sigma·z, z standard normal. Keys: sigma = exp(0.75·g1), mu = 0.5·sigma·g2;
 *  values: sigma = 0.5·exp(0.25·g1), mu = 0 (g1, g2 standard normals drawn from the seed). */
void kvq_kvsynth_channel(uint64_t seed, int layer, int c, int role, float *mu, float *sigma);

/** Rows of layer's keys and values at positions [pos0, pos0 + T): k and v (T, n_kv·head_dim),
 *  caller-owned; n_threads OpenMP threads over the positions (<= 0: the default). Finite (z from
 *  a Box-Muller pair of 24-bit uniforms: |z| < 5.8), continuous (no two equal blocks in practice).
 *  @return KVQ_OK, or KVQ_ERR_NOMEM (the channels' 4·n_kv·head_dim floats of statistics). */
kvq_status kvq_kvsynth_rows(uint64_t seed, int layer, int pos0, int T, int n_kv, int head_dim, float *k, float *v,
                            int n_threads);

#endif
