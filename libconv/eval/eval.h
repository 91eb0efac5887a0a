// Perplexity and per-position log-probabilities under an explicit protocol (window,
// stride, BOS, which positions are scored). Two models can be stepped in lockstep so
// kvq-verify computes KL divergence on the fly, holding only a chunk of logits each.
#ifndef KVQ_EVAL_H
#define KVQ_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"
#include "libconv/runtime/model.h"
#include "libconv/tokenizer/tokenizer.h"

typedef enum {
    KVQ_SCORE_ALL_BUT_FIRST = 0, // every target but each window's first token (the cards)
    KVQ_SCORE_SECOND_HALF,       // llama.cpp perplexity: logits at positions >= ctx/2
} kvq_score_mode;

typedef enum {
    KVQ_BOS_NONE = 0,    // windows are raw text tokens
    KVQ_BOS_PREPEND,     // BOS + (ctx-1) text tokens; the first text token is scored
    KVQ_BOS_REPLACE,     // llama.cpp: the window's first text token is overwritten by BOS
} kvq_bos_mode;

typedef struct {
    int ctx;              // tokens the model sees per window (BOS included)
    int stride;           // text tokens between window starts; 0: non-overlapping.
                          // With overlap a target is scored once, in its first window.
    kvq_bos_mode bos;
    int32_t bos_id;       // BOS id for PREPEND/REPLACE; -1: the model's bos_token_id
    kvq_score_mode score;
    int partial_last;     // also run a last window shorter than ctx (0: drop it)
    size_t max_tokens;    // use only the first max_tokens text tokens; 0: all
    int chunk;            // tokens per forward call (logits memory chunk × vocab); 0: 128
    int n_threads;        // > 0: set on the model(s) for the run
    int keep_logits;      // 1: the models keep their logits in backend memory (kvq_model_forward_keep;
                          // on a GPU none is downloaded) and chunks carry those pointers (on_backend)
} kvq_eval_protocol;

/** The models' cards: 512-token non-overlapping windows, no BOS, all but first scored. */
kvq_eval_protocol kvq_eval_protocol_card(void);
/** One line describing p, e.g. "ctx 512, stride 512, no BOS, all but each window's first
 *  scored". @return buf. */
const char *kvq_eval_protocol_str(const kvq_eval_protocol *p, char *buf, size_t cap);

/** What the callback sees at each scored position. log p(i) = logits[i] - lse. */
typedef struct {
    size_t text_pos;          // index of the target in the token array
    int32_t target;
    int vocab;
    const float *logits_a;    // (vocab), valid during the call only
    const float *logits_b;    // NULL when evaluating one model
    double lse_a, lse_b;      // log-sum-exp of each row
} kvq_eval_pos;

/** Return nonzero to stop the run early (kvq_eval_* then returns KVQ_OK with partial
 *  results). */
typedef int (*kvq_eval_cb)(void *user, const kvq_eval_pos *p);

typedef struct {
    double nll_sum;    // Σ −log p(target), nats
    double nll2_sum;   // Σ (−log p)², for the standard error
    double ppl;        // exp(nll_sum / n_scored)
    double ppl_se;     // ppl · SE(mean NLL) over scored positions (kvq_mean_se)
                       // (llama-perplexity's ±; positions of a window are correlated, so it
                       // understates the uncertainty somewhat)
    size_t n_scored;
    size_t n_windows;
    size_t n_tokens;   // text tokens considered (after max_tokens)
} kvq_eval_result;

/** Standard error of a mean from Σx and Σx² over n samples: sqrt(σ² / (n − 1)) with σ² the
 *  population variance Σ(x − m)²/n (llama-perplexity's formula); NaN for n < 2. */
double kvq_mean_se(double sum, double sum2, size_t n);

/** One chunk of one window, as every model saw it (kvq_eval_windows). Row i of each model's
 *  logits predicts in[c0 + i + 1], text position start + c0 + i + 1 − prepend; scored[i]
 *  says whether the protocol scores that row. */
typedef struct {
    const int32_t *in;            // the window's input tokens
    int c0, cn, prepend, vocab;
    size_t start;                 // text position of the window's first text token
    const float *const *logits;   // per model: (cn, vocab); backend memory when on_backend
    const unsigned char *scored;  // (cn)
    int on_backend;               // p->keep_logits: logits[k] is model k's kvq_model_forward_keep block
} kvq_eval_chunk;
/** Called for every chunk in order: KVQ_OK to go on, 1 to stop early (the loop returns
 *  KVQ_OK), or a negative status (with err filled) to fail the run. */
typedef int (*kvq_eval_chunk_cb)(void *user, const kvq_eval_chunk *c, kvq_err *err);
/** Called after each window: windows done, windows the run will take, text tokens used. */
typedef void (*kvq_eval_window_cb)(void *user, size_t done, size_t total, size_t used);

/** The windowed protocol, once, for any number of models run in lockstep on the same
 *  inputs (kvq-run --ppl and kvq-verify both go through it): validates the protocol and the
 *  ids (messages start with `who`), cuts windows (stride, BOS prepend/replace, partial last
 *  window, at most max_windows when > 0), runs each window in chunks of p->chunk tokens on
 *  every model, and hands each chunk to on_chunk. labels (may be NULL) name the models in
 *  forward errors. *n_windows (may be NULL) receives the windows run. */
kvq_status kvq_eval_windows(kvq_model *const *m, int nm, const char *const *labels, const char *who,
                            const int32_t *ids, size_t n, const kvq_eval_protocol *p, size_t max_windows,
                            kvq_eval_chunk_cb on_chunk, kvq_eval_window_cb on_window, void *user,
                            size_t *n_windows, kvq_err *err);

/** Evaluates ids[0..n) under p with model a and, when b is not NULL, model b on the
 *  same windows (vocabularies must match). cb (may be NULL) is called once per scored
 *  position in order. ra/rb (rb may be NULL) receive the totals. The models' KV caches
 *  are overwritten. */
kvq_status kvq_eval_tokens(kvq_model *a, kvq_model *b, const int32_t *ids, size_t n,
                           const kvq_eval_protocol *p, kvq_eval_cb cb, void *user,
                           kvq_eval_result *ra, kvq_eval_result *rb, kvq_err *err);

/** −log softmax(logits)[target] with the row's log-sum-exp (double accumulation). */
double kvq_eval_nll(const float *logits, int vocab, int32_t target, double *lse);

/** Reads a UTF-8 text file, tokenizes it whole with tok (no special tokens added),
 *  and evaluates it as kvq_eval_tokens does. *n_text_tokens (may be NULL) receives the
 *  token count before max_tokens. */
kvq_status kvq_eval_text(kvq_model *a, kvq_model *b, const kvq_tokenizer *tok, const char *path,
                         const kvq_eval_protocol *p, kvq_eval_cb cb, void *user,
                         kvq_eval_result *ra, kvq_eval_result *rb, size_t *n_text_tokens,
                         kvq_err *err);

/** Tokenizes a whole UTF-8 text file (no special tokens): *ids malloc'd, caller frees. */
kvq_status kvq_eval_tokenize_file(const kvq_tokenizer *tok, const char *path, int32_t **ids,
                                  size_t *n, kvq_err *err);

#endif
