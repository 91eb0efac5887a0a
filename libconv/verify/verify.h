// kvq-verify's library half: integrity of a .kvq (digests, bounds, manifest schema,
// every tensor decodes to finite values), per-tensor error against the source,
// perplexity and KL divergence of the converted model against the source under an
// explicit protocol (weights, KV codec and both separately), thresholds, and the
// verification record stored in the file. Never prints; tools/kvq-verify.c does.
#ifndef KVQ_VERIFY_H
#define KVQ_VERIFY_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "formats/error.h"
#include "libconv/eval/eval.h"
#include "libconv/kv/kvcodec.h"

// ---- thresholds ------------------------------------------------------------

/** Limits a verification must meet. NAN (the default) leaves a check out. */
typedef struct {
    double max_ppl_delta;  // converted ppl − source ppl, absolute or relative
    int ppl_delta_rel;     // 1: max_ppl_delta is a fraction of the source ppl
    double max_kld;        // mean KLD (nats)
    double max_kld_p99;    // 99th percentile of the per-position KLD
    double min_top1;       // top-1 agreement, fraction in [0, 1]
    double max_rms_dp;     // RMS of Δp, fraction
    double min_snr;        // dB, every tensor a lossy codec encoded
    double max_rel_err;    // ‖Δ‖/‖x‖, every lossy tensor
} kvq_verify_limits;

/** All checks off. */
kvq_verify_limits kvq_verify_limits_none(void);

/** Parses a ppl delta limit: "2%" (relative: 0.02, *rel = 1) or "0.5" (absolute
 *  perplexity points, *rel = 0). @return KVQ_ERR_ARG naming s when malformed. */
kvq_status kvq_verify_parse_delta(const char *s, double *v, int *rel, kvq_err *err);

// ---- options ---------------------------------------------------------------

typedef struct {
    size_t done, total;    // units of the stage (tensors, windows)
    const char *stage;     // "integrity", "tensors", "eval"
    double seconds;        // since the stage began
} kvq_verify_progress;

typedef struct {
    const char *kvq_path;
    const char *source;        // source checkpoint; NULL: the manifest's source.path
    int no_source;             // 1: skip everything that needs the source
    const char *text_path;     // text for ppl/KLD; NULL: no evaluation
    kvq_eval_protocol proto;   // ctx, stride, bos, score, max_tokens (partial_last unused)
    size_t max_windows;        // 0: every window
    int n_threads;             // > 0: OpenMP threads for the models
    const char *kv_spec;       // KV codec to measure; NULL: the manifest's "kv" section
                               // (its stored states, as kvq_kv_open_from_file loads them)
    kvq_kvcache_policy kv_policy; // window, boundary, seed used with kv_spec
    int no_kv;                 // 1: do not measure a KV codec even if declared
    int require_record;        // 1: fail unless the file holds a matching record
    int replace_record;        // 1: a stale record is reported but not a failure (--record
                               //    is about to replace it with this run's)
    kvq_verify_limits limits;
    void (*progress)(void *ud, const kvq_verify_progress *p);
    void *progress_ud;
    /** Backend both models run on (kvq_model_opts.backend); NULL: the CPU. A device backend
     *  runs no KV codec (set no_kv, or the codec is refused). */
    kvq_status (*backend)(const kvq_model_opts *o, const kvq_arch *a, kvq_backend **out, kvq_err *err);
} kvq_verify_opts;

/** Defaults: the cards' protocol (ctx 512, non-overlapping, no BOS, all but first
 *  scored), every window, no limits. */
kvq_verify_opts kvq_verify_opts_default(void);

// ---- the report ------------------------------------------------------------

typedef struct {
    char *name;
    char *codec;           // codec spec as recorded
    int lossless;          // the codec's claim
    int64_t numel;
    double bpw;            // realized: 8 × (stored entry bytes + params JSON) / numel
    int compared;          // 1 when the source was compared
    int exact;             // decoded == source bit for bit (as fp32)
    double snr_db;         // 10 log10(‖x‖² / ‖Δ‖²); INFINITY when exact
    double rel_err;        // ‖Δ‖ / ‖x‖
    double max_abs;        // max |Δ|
} kvq_verify_tensor;

/** llama.cpp --kl-divergence statistics (tools/perplexity/perplexity.cpp): per
 *  scored position KLD = Σ_v p_src(v) (log p_src(v) − log p_q(v)) over the full
 *  vocabulary, Δp = p_q(target) − p_src(target), top-1 = same argmax. */
typedef struct {
    size_t n;
    double mean, median, p90, p99, p999, max, min;
    double top1;           // fraction of positions with the same argmax
    double rms_dp;         // sqrt(mean Δp²)
    double mean_dp, max_abs_dp;
    // standard errors over positions (kvq_mean_se; llama-perplexity's ±): of the mean KLD,
    // of top-1 (binomial), of the mean Δp, and of RMS Δp (propagated: SE(mean Δp²) / (2 RMS))
    double mean_se, top1_se, mean_dp_se, rms_dp_se;
} kvq_kld_stats;

typedef struct {
    const char *label;     // "weights", "kv", "weights+kv"
    const char *what;      // one line: which weights, which cache
    int done;
    double ppl, nll_sum;
    double dppl, dppl_rel; // ppl − source ppl; relative to the source ppl
    double ppl_se;         // ppl · SE(mean NLL)
    double dppl_se;        // paired: ppl · SE(mean of NLL_q − NLL_source) (the two runs share text)
    kvq_kld_stats kld;
    float *kld_pos;        // (kld.n) per-position KLDs in scoring order (owned)
} kvq_verify_eval;

typedef struct {
    char name[32];         // "integrity", "record", "ppl_delta", "kld", "snr", ...
    char subject[128];     // run label or tensor; "" when global
    double value, limit;
    double se;             // standard error of value (evaluation checks); NaN otherwise
    int pass;
} kvq_verify_check;

/** 0 when the limit lies within one standard error of the value (|value − limit| < se): pass
 *  or fail then follows the value, but the measurement cannot tell them apart; 1 otherwise,
 *  and for checks without a standard error. Used by the text verdict and the JSON. */
int kvq_verify_check_conclusive(const kvq_verify_check *c);

typedef enum {
    KVQ_RECORD_NONE = 0,
    KVQ_RECORD_MATCH = 1,
    KVQ_RECORD_MISMATCH = -1, // file changed after it was verified
    KVQ_RECORD_MALFORMED = -2,
} kvq_record_state;

#define KVQ_VERIFY_MAX_CHECKS 32

typedef struct {
    char *kvq_path, *source_path;
    // integrity
    int integrity_ok;
    char integrity_msg[KVQ_ERR_MSG_MAX];  // first problem, or ""
    kvq_record_state record;
    int require_record, replace_record;
    char record_msg[KVQ_ERR_MSG_MAX];
    size_t n_entries;
    // per tensor, worst (lowest SNR) first
    kvq_verify_tensor *tensors;
    size_t n_tensors;
    double lossy_bpw;      // realized, over lossy tensors; NAN when none
    double model_bpp;      // whole model: 8 · every tensor's bytes / every parameter (kvq_file_bits)
    uint64_t params;       // parameters of every tensor
    double min_snr;        // over lossy tensors; NAN when none compared
    // evaluation
    int evaluated;
    kvq_eval_protocol proto;
    size_t max_windows;
    char text_path[1024];
    char text_sha256[65];
    uint64_t text_bytes;
    size_t n_tokens;       // text tokens (whole file)
    size_t n_tokens_used;  // tokens the windows covered
    size_t n_windows, n_scored;
    double source_ppl, source_nll_sum, source_ppl_se;
    char kv_spec[96];      // KV codec measured, "" when none
    double kv_bits;        // its bits per element: the codec's formula at the model's
                           // max_position_embeddings, the number the manifest's kv section and
                           // kvq-inspect report (docs/KV.md); NAN when none
    double kv_bits_run;    // measured over this run's cache (its windows' positions)
    int kv_positions;      // the positions kv_bits is stated at
    int kv_window, kv_boundary;
    char kv_from[16];      // "file" (the manifest's kv section) or "command line"
    char kv_mode[8];       // how the codec cache was attended: "chunks", "shadow" or "tokens" (KVQ_VERIFY_KV)
    size_t kv_held_bytes;  // bytes the kv run's codec cache held at the end (records, rings, shadow,
                           // scratch pool; docs/KV.md "kvq-verify's cache"); 0 when none or on a device
    kvq_verify_eval run[3];// [0] weights, [1] kv, [2] weights+kv
    double seconds_integrity, seconds_tensors, seconds_eval;
    // thresholds
    kvq_verify_limits limits;
    kvq_verify_check checks[KVQ_VERIFY_MAX_CHECKS];
    int n_checks;
    int pass;
} kvq_verify_report;

/** Runs everything opts asks for on opts->kvq_path. Problems found in the file
 *  (integrity, stale record) and failed thresholds are results, not errors: they
 *  return KVQ_OK with rep->pass = 0. Errors (unreadable source or text, bad options,
 *  out of memory) return their status with err filled. rep is always initialised;
 *  free it with kvq_verify_report_free. */
kvq_status kvq_verify_run(const kvq_verify_opts *opts, kvq_verify_report *rep, kvq_err *err);
void kvq_verify_report_free(kvq_verify_report *rep);

/** The run thresholds apply to and "converted" reports: weights+kv when a KV codec
 *  was measured, else weights. NULL when nothing was evaluated. */
const kvq_verify_eval *kvq_verify_final_run(const kvq_verify_report *rep);

/** The full report as JSON (new reference); schema in docs/FORMAT.md. */
json_t *kvq_verify_report_json(const kvq_verify_report *rep);

// ---- pieces, exposed for tests and tools -------------------------------------



/** KLD, Δp and top-1 agreement at one position from the source's logits (ref) and the
 *  other model's (q), each with its log-sum-exp (computed in double; kvq-verify uses
 *  libm exp, not the runtime's fast kvq_logsumexp, so both rows normalise exactly). */
void kvq_verify_kld_pos(const float *ref, double lse_ref, const float *q, double lse_q, int vocab,
                        int32_t target, double *kld, double *dp, int *same_top);
/** log Σ exp x[0..n) with libm exp, summed in order in double from the row's max: the host's
 *  (reference) normaliser for kvq_verify_kld_pos. */
double kvq_verify_lse_exact(const float *x, int n);

/** Statistics of n per-position values (sorted in place); top1/dp fields are left
 *  for the caller. Percentiles interpolate linearly at fraction·(n−1) and the
 *  median averages the middle two, as llama.cpp does. */
void kvq_verify_kld_stats(float *kld, size_t n, kvq_kld_stats *st);

/** The verification record (new reference) for rep, including its binding digest
 *  over manifest (the file's manifest before the record is added). */
json_t *kvq_verify_record_make(const kvq_verify_report *rep, const json_t *manifest, kvq_err *err);

/** sha256 (hex) binding a record to a file: over the canonical JSON (sorted keys,
 *  compact) of the manifest without "verification" and without the entry table's
 *  file offsets ("header", "offset", which a manifest rewrite may move), a newline,
 *  and the canonical JSON of the record without "binding". Payload bytes are bound
 *  through the entry table's xxh3 digests (checked by kvq_file_verify). */
kvq_status kvq_verify_record_binding(const json_t *manifest, const json_t *record, char hex[65],
                                     kvq_err *err);

/** Does the manifest's "verification" record still match the file's content?
 *  msg (may be NULL) gets one line explaining the state. */
kvq_record_state kvq_verify_record_check(const json_t *manifest, char *msg, size_t cap);

/** Stores rep's record into the .kvq at path atomically (kvq_file_rewrite_manifest),
 *  replacing any previous record. */
kvq_status kvq_verify_record_store(const char *path, const kvq_verify_report *rep, kvq_err *err);

#endif
