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

kvq_status kvq_eval_windows(kvq_model *const *m, int nm, const char *const *labels, const char *who,
                            const int32_t *ids, size_t n, const kvq_eval_protocol *p, size_t max_windows,
                            kvq_eval_chunk_cb on_chunk, kvq_eval_window_cb on_window, void *user,
                            size_t *n_windows, kvq_err *err) {
    if (n_windows) *n_windows = 0;
    const kvq_arch *aa = kvq_model_arch(m[0]);
    const int V = aa->vocab_size;
    const int prepend = p->bos == KVQ_BOS_PREPEND;
    if (p->ctx < 2 + prepend) return kvq_err_set(err, KVQ_ERR_ARG, "%s: context %d too short", who, p->ctx);
    for (int k = 0; k < nm; k++)
        if (p->ctx > kvq_model_max_ctx(m[k]))
            return kvq_err_set(err, KVQ_ERR_ARG, "%s: context %d exceeds the KV cache (%d positions)", who, p->ctx,
                               kvq_model_max_ctx(m[k]));
    int32_t bos = p->bos_id >= 0 ? p->bos_id : aa->bos_token_id;
    if (p->bos != KVQ_BOS_NONE && (bos < 0 || bos >= V))
        return kvq_err_set(err, KVQ_ERR_ARG, "%s: BOS requested but the model has no valid bos_token_id (%d)", who, bos);
    if (p->max_tokens && p->max_tokens < n) n = p->max_tokens;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return kvq_err_set(err, KVQ_ERR_ARG, "%s: token id %d at index %zu outside the vocabulary [0, %d)", who,
                               ids[i], i, V);
    if (p->n_threads > 0)
        for (int k = 0; k < nm; k++) kvq_model_set_threads(m[k], p->n_threads);
    const int L = p->ctx - prepend;                 // text tokens per full window
    const size_t stride = p->stride > 0 ? (size_t)p->stride : (size_t)L;
    const int C = p->chunk > 0 ? p->chunk : 128;
    const int first_target = p->score == KVQ_SCORE_SECOND_HALF ? p->ctx / 2 + 1 : 1;
    size_t total = 0; // windows the loop will run
    for (size_t s0 = 0; s0 < n; s0 += stride) {
        size_t len = n - s0 < (size_t)L ? n - s0 : (size_t)L;
        if (len < (size_t)L && (!p->partial_last || len + prepend < 2)) break;
        if (max_windows && total == max_windows) break;
        total++;
    }
    if (!total) // an empty or too short text: refused, not a NaN perplexity
        return kvq_err_set(err, KVQ_ERR_ARG, "%s: %zu text tokens make no window of %d tokens%s", who, n, L,
                           p->partial_last ? "" : " (--partial scores a shorter last window)");
    int32_t *in = malloc(sizeof(int32_t) * p->ctx);
    const int keep = p->keep_logits != 0; // logits stay in each model's backend memory
    float *lg = malloc(sizeof(float) * (keep ? 1 : (size_t)C * V * (size_t)nm));
    const float **lp = malloc(sizeof(*lp) * (size_t)nm);
    unsigned char *scored = malloc((size_t)C);
    kvq_status r = KVQ_OK;
    if (!in || !lg || !lp || !scored) { r = kvq_err_set(err, KVQ_ERR_NOMEM, "%s: out of memory for logits", who); goto done; }
    for (int k = 0; k < nm && !keep; k++) lp[k] = lg + (size_t)k * C * V;
    size_t scored_end = 0, done_w = 0, started = 0; // text positions < scored_end were scored already
    int stop = 0;
    for (size_t start = 0; done_w < total && !stop; start += stride) {
        size_t len = n - start < (size_t)L ? n - start : (size_t)L;
        int nin = (int)len + prepend;
        if (prepend) in[0] = bos;
        memcpy(in + prepend, ids + start, sizeof(int32_t) * len);
        if (p->bos == KVQ_BOS_REPLACE) in[0] = bos;
        if (n_windows) *n_windows = ++started; // a window stopped early still counts as run
        for (int c0 = 0; c0 < nin - 1 && !stop; c0 += C) {
            int cn = nin - 1 - c0 < C ? nin - 1 - c0 : C;
            for (int k = 0; k < nm; k++)
                if ((r = keep ? kvq_model_forward_keep(m[k], in + c0, cn, c0, &lp[k], err)
                              : kvq_model_forward(m[k], in + c0, cn, c0, lg + (size_t)k * C * V, 1, err))) {
                    if (labels && labels[k]) kvq_err_prefix(err, "%s model", labels[k]);
                    goto done;
                }
            for (int i = 0; i < cn; i++) {
                int j = c0 + i + 1; // target index in the window
                size_t tp = start + (size_t)j - prepend;
                scored[i] = !(j < first_target || tp < scored_end);
            }
            kvq_eval_chunk c = {in, c0, cn, prepend, V, start, lp, scored, keep};
            int cr = on_chunk(user, &c, err);
            if (cr < 0) { r = cr; goto done; }
            if (cr > 0) stop = 1;
        }
        size_t end = start + len;
        if (end > scored_end) scored_end = end;
        done_w++;
        if (on_window && !stop) on_window(user, done_w, total, end);
    }
done:
    free(in); free(lg); free(lp); free(scored);
    return r;
}

// kvq_eval_tokens: one or two models through kvq_eval_windows, perplexity sums per model.
typedef struct {
    kvq_eval_cb cb;
    void *user;
    kvq_eval_result *ra, *rb;
} tok_run;

static int tok_chunk(void *u, const kvq_eval_chunk *c, kvq_err *err) {
    tok_run *t = u;
    (void)err;
    for (int i = 0; i < c->cn; i++) {
        if (!c->scored[i]) continue;
        int j = c->c0 + i + 1;
        kvq_eval_pos e = {.text_pos = c->start + (size_t)j - c->prepend, .target = c->in[j], .vocab = c->vocab,
                          .logits_a = c->logits[0] + (size_t)i * c->vocab,
                          .logits_b = t->rb ? c->logits[1] + (size_t)i * c->vocab : NULL};
        const double na = kvq_eval_nll(e.logits_a, c->vocab, e.target, &e.lse_a);
        t->ra->nll_sum += na;
        t->ra->nll2_sum += na * na;
        t->ra->n_scored++;
        if (t->rb) {
            const double nb = kvq_eval_nll(e.logits_b, c->vocab, e.target, &e.lse_b);
            t->rb->nll_sum += nb;
            t->rb->nll2_sum += nb * nb;
            t->rb->n_scored++;
        }
        if (t->cb && t->cb(t->user, &e)) return 1;
    }
    return KVQ_OK;
}

double kvq_mean_se(double sum, double sum2, size_t n) {
    if (n < 2) return NAN;
    const double m = sum / (double)n, var = (sum2 - (double)n * m * m) / (double)(n - 1);
    return sqrt(var > 0 ? var / (double)n : 0.0);
}

kvq_status kvq_eval_tokens(kvq_model *a, kvq_model *b, const int32_t *ids, size_t n,
                           const kvq_eval_protocol *p, kvq_eval_cb cb, void *user,
                           kvq_eval_result *ra, kvq_eval_result *rb, kvq_err *err) {
    memset(ra, 0, sizeof *ra);
    if (rb) memset(rb, 0, sizeof *rb);
    int V = kvq_model_arch(a)->vocab_size;
    if (b && kvq_model_arch(b)->vocab_size != V)
        return kvq_err_set(err, KVQ_ERR_ARG, "eval: vocabularies differ (%d vs %d)", V, kvq_model_arch(b)->vocab_size);
    kvq_model *m[2] = {a, b};
    tok_run t = {cb, user, ra, b ? rb : NULL};
    size_t nw = 0;
    kvq_eval_protocol ph = *p; // tok_chunk reads the logits on the host
    ph.keep_logits = 0;
    kvq_status r = kvq_eval_windows(m, b ? 2 : 1, NULL, "eval", ids, n, &ph, 0, tok_chunk, NULL, &t, &nw, err);
    ra->n_tokens = p->max_tokens && p->max_tokens < n ? p->max_tokens : n;
    ra->n_windows = nw;
    if (rb) { rb->n_tokens = ra->n_tokens; rb->n_windows = nw; }
    ra->ppl = ra->n_scored ? exp(ra->nll_sum / ra->n_scored) : NAN;
    ra->ppl_se = ra->ppl * kvq_mean_se(ra->nll_sum, ra->nll2_sum, ra->n_scored);
    if (rb) {
        rb->ppl = rb->n_scored ? exp(rb->nll_sum / rb->n_scored) : NAN;
        rb->ppl_se = rb->ppl * kvq_mean_se(rb->nll_sum, rb->nll2_sum, rb->n_scored);
    }
    if (!r && !ra->n_scored)
        return kvq_err_set(err, KVQ_ERR_ARG, "eval: no position scored (%zu tokens, context %d)", ra->n_tokens, p->ctx);
    return r;
}
