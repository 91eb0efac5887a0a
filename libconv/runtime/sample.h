// Next-token sampling: greedy, temperature, and top-p (nucleus) with a seeded RNG held
// in the sampler (no global state): the same seed and logits give the same tokens.
#ifndef KVQ_SAMPLE_H
#define KVQ_SAMPLE_H

#include <stdint.h>

#include "formats/error.h"

typedef struct kvq_sampler kvq_sampler;

/** temp <= 0: greedy (argmax). top_p in (0, 1]; 1 disables truncation. vocab: the
 *  largest row sample() will see. @return KVQ_ERR_ARG for top_p outside (0, 1] or a temperature that is NaN,
 *  negative or infinite. */
kvq_status kvq_sampler_new(float temp, float top_p, uint64_t seed, int vocab, kvq_sampler **out,
                           kvq_err *err);
void kvq_sampler_free(kvq_sampler *s); // NULL is a no-op

/** Draws one id from logits (vocab, not modified). @return the id, or -1 when a logit is NaN
 *  (no distribution: the caller reports it). +inf logits win as in argmax. */
int32_t kvq_sample(kvq_sampler *s, const float *logits, int vocab);

/** Index of the largest value (the first one on ties). */
int32_t kvq_sample_argmax(const float *x, int n);

/** Next uniform double in [0, 1) from the sampler's generator (xorshift64*). */
double kvq_sampler_uniform(kvq_sampler *s);

#endif
