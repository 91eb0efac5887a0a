// Windowed perplexity and lockstep two-model evaluation (see eval.h). Each window is
// fed in chunks with the KV cache carrying earlier chunks, so logits memory is
// chunk × vocab per model regardless of the window length.
#include "libconv/eval/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/softmax.h"

kvq_eval_protocol kvq_eval_protocol_card(void) {
    return (kvq_eval_protocol){.ctx = 512, .stride = 0, .bos = KVQ_BOS_NONE, .bos_id = -1,
                               .score = KVQ_SCORE_ALL_BUT_FIRST};
}

const char *kvq_eval_protocol_str(const kvq_eval_protocol *p, char *buf, size_t cap) {
    static const char *bos[] = {"no BOS", "BOS prepended", "BOS replacing each window's first token"};
    snprintf(buf, cap, "ctx %d, stride %d, %s, %s%s", p->ctx, p->stride > 0 ? p->stride : p->ctx,
             p->bos >= 0 && p->bos <= 2 ? bos[p->bos] : "?",
             p->score == KVQ_SCORE_SECOND_HALF ? "second half of each window scored"
                                               : "all but each window's first token scored",
             p->partial_last ? ", partial last window kept" : "");
    return buf;
}

double kvq_eval_nll(const float *logits, int vocab, int32_t target, double *lse) {
    double l = kvq_logsumexp(logits, vocab);
    if (lse) *lse = l;
    return l - (double)logits[target];
}

kvq_status kvq_eval_tokens(kvq_model *a, kvq_model *b, const int32_t *ids, size_t n,
                           const kvq_eval_protocol *p, kvq_eval_cb cb, void *user,
                           kvq_eval_result *ra, kvq_eval_result *rb, kvq_err *err) {
    memset(ra, 0, sizeof *ra);
    if (rb) memset(rb, 0, sizeof *rb);
    const kvq_arch *aa = kvq_model_arch(a);
    int V = aa->vocab_size;
    if (b && kvq_model_arch(b)->vocab_size != V)
        return kvq_err_set(err, KVQ_ERR_ARG, "eval: vocabularies differ (%d vs %d)", V, kvq_model_arch(b)->vocab_size);
    int prepend = p->bos == KVQ_BOS_PREPEND;
    if (p->ctx < 2 + prepend) return kvq_err_set(err, KVQ_ERR_ARG, "eval: context %d too short", p->ctx);
    if (p->ctx > kvq_model_kvcache(a)->max_ctx || (b && p->ctx > kvq_model_kvcache(b)->max_ctx))
        return kvq_err_set(err, KVQ_ERR_ARG, "eval: context %d exceeds the KV cache (%d positions)", p->ctx,
                           kvq_model_kvcache(a)->max_ctx);
    int32_t bos = p->bos_id >= 0 ? p->bos_id : aa->bos_token_id;
    if (p->bos != KVQ_BOS_NONE && (bos < 0 || bos >= V))
        return kvq_err_set(err, KVQ_ERR_ARG, "eval: BOS requested but the model has no valid bos_token_id (%d)", bos);
    if (p->max_tokens && p->max_tokens < n) n = p->max_tokens;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return kvq_err_set(err, KVQ_ERR_ARG, "eval: token id %d at index %zu outside the vocabulary [0, %d)", ids[i], i, V);
    if (p->n_threads > 0) {
        kvq_model_set_threads(a, p->n_threads);
        if (b) kvq_model_set_threads(b, p->n_threads);
    }
    const int L = p->ctx - prepend;                 // text tokens per full window
    const size_t stride = p->stride > 0 ? (size_t)p->stride : (size_t)L;
    const int C = p->chunk > 0 ? p->chunk : 128;
    const int first_target = p->score == KVQ_SCORE_SECOND_HALF ? p->ctx / 2 + 1 : 1;
    int32_t *in = malloc(sizeof(int32_t) * p->ctx);
    float *la = malloc(sizeof(float) * (size_t)C * V), *lb = b ? malloc(sizeof(float) * (size_t)C * V) : NULL;
    kvq_status r = KVQ_OK;
    if (!in || !la || (b && !lb)) { r = kvq_err_set(err, KVQ_ERR_NOMEM, "eval: out of memory for logits"); goto done; }
    ra->n_tokens = n;
    if (rb) rb->n_tokens = n;
    size_t scored_end = 0; // text positions < scored_end were scored already
    int stop = 0;
    for (size_t start = 0; start < n && !stop; start += stride) {
        size_t len = n - start < (size_t)L ? n - start : (size_t)L;
        if (len < (size_t)L && (!p->partial_last || len + prepend < 2)) break;
        int nin = (int)len + prepend;
        if (prepend) in[0] = bos;
        memcpy(in + prepend, ids + start, sizeof(int32_t) * len);
        if (p->bos == KVQ_BOS_REPLACE) in[0] = bos;
        ra->n_windows++;
        if (rb) rb->n_windows++;
        // Logits at input position j predict input j+1 (text position start + j + 1 - prepend).
        for (int c0 = 0; c0 < nin - 1 && !stop; c0 += C) {
            int cn = nin - 1 - c0 < C ? nin - 1 - c0 : C;
            if ((r = kvq_model_forward(a, in + c0, cn, c0, la, 1, err))) goto done;
            if (b && (r = kvq_model_forward(b, in + c0, cn, c0, lb, 1, err))) goto done;
            for (int i = 0; i < cn && !stop; i++) {
                int j = c0 + i + 1; // target index in the window
                size_t tp = start + (size_t)j - prepend;
                if (j < first_target || tp < scored_end) continue;
                kvq_eval_pos e = {.text_pos = tp, .target = in[j], .vocab = V,
                                  .logits_a = la + (size_t)i * V, .logits_b = b ? lb + (size_t)i * V : NULL};
                ra->nll_sum += kvq_eval_nll(e.logits_a, V, e.target, &e.lse_a);
                ra->n_scored++;
                if (b) { rb->nll_sum += kvq_eval_nll(e.logits_b, V, e.target, &e.lse_b); rb->n_scored++; }
                if (cb && cb(user, &e)) stop = 1;
            }
        }
        size_t end = start + len;
        if (end > scored_end) scored_end = end;
    }
done:
    ra->ppl = ra->n_scored ? exp(ra->nll_sum / ra->n_scored) : NAN;
    if (rb) rb->ppl = rb->n_scored ? exp(rb->nll_sum / rb->n_scored) : NAN;
    free(in); free(la); free(lb);
    return r;
}
