// Samplers (see sample.h). Top-p follows llama2.c: drop candidates that cannot be in
// the nucleus before sorting, sort by probability, keep the shortest prefix whose mass
// exceeds top_p, and draw within it.
#include "libconv/runtime/sample.h"

#include <math.h>
#include <stdlib.h>

struct kvq_sampler {
    float temp, top_p;
    uint64_t state;
    int cap;
    float *prob;
    int32_t *idx;
};

kvq_status kvq_sampler_new(float temp, float top_p, uint64_t seed, int vocab, kvq_sampler **out,
                           kvq_err *err) {
    *out = NULL;
    if (!(top_p > 0.0f && top_p <= 1.0f)) return kvq_err_set(err, KVQ_ERR_ARG, "top-p %g must be in (0, 1]", top_p);
    if (!(temp >= 0.0f) || isinf(temp))
        return kvq_err_set(err, KVQ_ERR_ARG, "temperature %g must be a finite number >= 0", temp);
    if (vocab <= 0) return kvq_err_set(err, KVQ_ERR_ARG, "vocabulary size %d must be positive", vocab);
    kvq_sampler *s = calloc(1, sizeof *s);
    if (!s) return kvq_err_set(err, KVQ_ERR_NOMEM, "sampler: out of memory");
    s->temp = temp;
    s->top_p = top_p;
    s->state = seed ? seed : 0x9e3779b97f4a7c15ull; // xorshift needs a non-zero state
    s->cap = vocab;
    s->prob = malloc(sizeof(float) * vocab);
    s->idx = malloc(sizeof(int32_t) * vocab);
    if (!s->prob || !s->idx) { kvq_sampler_free(s); return kvq_err_set(err, KVQ_ERR_NOMEM, "sampler: out of memory"); }
    *out = s;
    return KVQ_OK;
}

void kvq_sampler_free(kvq_sampler *s) {
    if (!s) return;
    free(s->prob);
    free(s->idx);
    free(s);
}

double kvq_sampler_uniform(kvq_sampler *s) {
    s->state ^= s->state >> 12;
    s->state ^= s->state << 25;
    s->state ^= s->state >> 27;
    return (double)((s->state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

int32_t kvq_sample_argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmp_desc(const void *a, const void *b, void *prob) {
    const float *p = prob;
    float pa = p[*(const int32_t *)a], pb = p[*(const int32_t *)b];
    return pa > pb ? -1 : pa < pb ? 1 : (*(const int32_t *)a - *(const int32_t *)b);
}

int32_t kvq_sample(kvq_sampler *s, const float *logits, int vocab) {
    KVQ_ASSERT(vocab <= s->cap);
    for (int i = 0; i < vocab; i++)
        if (isnan(logits[i])) return -1; // no distribution to draw from
    if (s->temp <= 0.0f) return kvq_sample_argmax(logits, vocab);
    float m = logits[0];
    for (int i = 1; i < vocab; i++) m = logits[i] > m ? logits[i] : m;
    if (isinf(m)) return kvq_sample_argmax(logits, vocab); // +inf wins; all -inf: no mass anywhere
    double z = 0;
    for (int i = 0; i < vocab; i++) z += s->prob[i] = expf((logits[i] - m) / s->temp);
    for (int i = 0; i < vocab; i++) s->prob[i] = (float)(s->prob[i] / z);
    double u = kvq_sampler_uniform(s);
    if (s->top_p >= 1.0f) {
        double c = 0;
        for (int i = 0; i < vocab; i++)
            if ((c += s->prob[i]) > u) return i;
        return vocab - 1;
    }
    // Candidates below (1 - top_p)/(vocab - 1) can never be in the nucleus.
    float cut = (1.0f - s->top_p) / (float)(vocab > 1 ? vocab - 1 : 1);
    int n = 0;
    for (int i = 0; i < vocab; i++)
        if (s->prob[i] >= cut) s->idx[n++] = i;
    if (!n) return kvq_sample_argmax(logits, vocab); // top_p < 1/vocab on a nearly flat distribution
    qsort_r(s->idx, n, sizeof(int32_t), cmp_desc, s->prob); // glibc (_GNU_SOURCE)
    double c = 0;
    int last = n - 1;
    for (int i = 0; i < n; i++)
        if ((c += s->prob[s->idx[i]]) > s->top_p) { last = i; break; }
    double r = u * c, acc = 0;
    for (int i = 0; i <= last; i++)
        if ((acc += s->prob[s->idx[i]]) > r) return s->idx[i];
    return s->idx[last];
}
