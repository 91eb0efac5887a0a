// Conversion of a source checkpoint into a .kvq: the plan (recipe -> codec for each
// tensor, libconv/plan.c), the streaming conversion loop that writes the container
// and its manifest (libconv/convert.c), and the export of any model back to an HF
// checkpoint directory (libconv/export.c). Manifest schema: docs/FORMAT.md.
#ifndef KVQ_CONVERT_H
#define KVQ_CONVERT_H

#include <stdint.h>
#include <jansson.h>

#include "formats/error.h"
#include "formats/tensor.h"
#include "libconv/codec/codec.h"

// ---- the plan --------------------------------------------------------------

/** What decides each tensor's codec. Values are applied in this order, later ones winning:
 *  the recipe file, each `sets` entry in order (`key=value`, any recipe key, dotted for the kv
 *  section: kv.window=32), then the fields below (the CLI's --weights, --seed,
 *  --quantize-embeddings, --keep). Per tensor, first that applies wins:
 *  1. `keep` patterns: codec "none";
 *  2. the recipe's rules, in order: {match: glob | regex: PCRE2 search, codec: spec, bits: rate};
 *     `bits` sets the codec's rate (kvq_codec_spec_with_rate), a rule without codec takes the
 *     weights codec at that rate;
 *  3. built-in: 1-D/0-D tensors -> "none"; token embeddings and lm_head -> "none" unless
 *     quantize_embeddings, then the weights spec; other tensors with ndim >= 2 -> the weights spec. */
/** The sensitivity probe of a whole-model budget (docs/ALLOCATION.md): KVQ_PROBE_LAYER, each
 *  tensor's error measured through its own layer and one probe per layer through the model (about
 *  L/2 + 8 forwards for L layers); KVQ_PROBE_FULL, one probe per tensor through the model. */
typedef enum { KVQ_PROBE_LAYER = 0, KVQ_PROBE_FULL = 1 } kvq_probe_kind;

typedef struct {
    const char *weights;            // default spec for 2-D weights; NULL: recipe's, else "none"
    const char *recipe_path;        // YAML recipe (recipes/README.md) or NULL
    uint64_t seed;                  // used when seed_set (must be < 2^63)
    int seed_set;
    int quantize_embeddings;        // -1: recipe's (default 0), 0/1: override
    const char *const *keep;        // NULL-terminated glob list, or NULL (added to the recipe's)
    const char *const *sets;        // NULL-terminated "key=value" list (--set), or NULL
    double target_bpw;              // 0: recipe's (key target_bpw, default none); NAN: none; else the
                                    //   whole-model budget in bits per parameter (alloc.c)
    const char *calib_text;         // calibration text file (recipe calib_text), NULL: recipe's
    int calib_tokens;               // 0: recipe's (calib_tokens), default KVQ_CALIB_TOKENS_DEFAULT
    const char *calib_from;         // a .kvq an earlier budgeted conversion of the same source wrote: its
                                    //   stored sensitivities instead of a calibration pass (NULL: measure)
    int calib_probe;                // 0: recipe's (calib_probe, default layer); else 1 + kvq_probe_kind
} kvq_plan_opts;

#define KVQ_CALIB_TOKENS_DEFAULT 512
/** Calibration tokens LDLQ (hyperquant's ldlq) needs per column of the widest product input it rounds
 *  against: fewer leave the input covariance rank-deficient (docs/HYPERQUANT.md "LDLQ"). */
#define KVQ_LDLQ_TOKENS_PER_COL 2
/** kvq-convert's budget when no weight flag is given (docs/ALLOCATION.md, "The default"). */
#define KVQ_DEFAULT_TARGET_BPW 5.0
/** The default budget's work limit in parameter-tokens (parameters × tokens run: the calibration
 *  pass plus the probes, kvq_alloc_work): above it the default does not calibrate. 2e12: about
 *  11 CPU-minutes at KVQ_CALIB_RATE; SmolLM2-135M's layer probe needs 1.1e12. */
#define KVQ_CALIB_WORK_LIMIT 2e12
/** Parameter-tokens a CPU core runs per second in the calibration, about (measured on the 2-core
 *  EPYC dev box: 2.6e9 on kvq-tiny-llama, 3.3e9 on SmolLM2-135M): for the time estimates said. */
#define KVQ_CALIB_RATE 3e9

typedef struct kvq_plan kvq_plan;

/** Row blocks an allocated embedding or lm_head is cut into (docs/ALLOCATION.md, "Row blocks"). */
#define KVQ_ALLOC_BLOCKS 8
/** The default recipe block_floor: no block of such a table below its highest block's rate minus
 *  this many bits (docs/ALLOCATION.md, session 12: the second-order shares underrate rare-id
 *  blocks near 2 bits). */
#define KVQ_ALLOC_BLOCK_FLOOR 1.5
/** The default recipe block_floor_cap: the floor asks no block for more than this rate (bits):
 *  above ~3 bits the shares' second-order model holds and the floor cost KLD (SmolLM2 at 4.0). */
#define KVQ_ALLOC_BLOCK_FLOOR_CAP 3.0

/** One tensor's line of the plan: what will encode it, at what rate, and why. The converter
 *  resolves one per tensor before encoding anything; a rate allocator may then change an
 *  entry's codec or rate (kvq_plan_entry_set_spec / _set_rate) and kvq_convert encodes what
 *  the entries say. Strings and cfg are owned by the plan (valid until kvq_plan_free); name
 *  is the tensor's. */
typedef struct {
    const char *name;
    kvq_dtype dtype;                // source dtype
    int64_t numel, rows, cols;      // the codec's matrix view: cols = last dimension
    const kvq_codec_traits *codec;
    const json_t *cfg;
    const char *spec;               // the codec spec string, rate included
    double rate;                    // predicted bits per weight under spec (kvq_codec_predict_bits / numel);
                                    // NAN when the codec cannot tell before encoding (fixed-SNR hyperquant)
    uint64_t seed;                  // per-tensor codec seed
    uint64_t predicted_bytes;       // predicted stored bytes (kvq_convert_predict fills it; 0 before)
    char why[64];                   // "weights", "rule 2 (line 14)", "keep '*.bias'", "built-in: 1-D", ...
    double sensitivity;             // allocated tensors (alloc.c): measured KL divergence per token that the
                                    // tensor's HyperQuant error adds, extrapolated to 0 dB SNR
                                    // (KLD at SNR s ≈ sensitivity · 10^(-s/10)); NAN otherwise
    double output_error;            // the same tensor's predicted output-error energy per token at 0 dB
                                    // (input second moments × weight energy per tile); NAN otherwise
    int n_blocks;                   // allocated embedding / lm_head: its rows in n_blocks blocks of block_rows
    int64_t block_rows;             // (the last may be shorter), each at its own rate; 0 otherwise
    double block_share[KVQ_ALLOC_BLOCKS]; // each block's share of the sensitivity (sums to 1)
} kvq_plan_entry;

/** The KV-cache codec a plan stores (recipe `kv:` section / --set kv.*). spec NULL: none. */
typedef struct {
    const char *spec;               // canonical KV spec (docs/KV.md), borrowed from the plan
    int window, boundary;
    uint64_t seed;                  // kv.seed, else the recipe seed
} kvq_plan_kv_policy;

/** Reads the recipe (if any), applies the --set overrides and the option fields, and parses
 *  every codec spec, regex and rate it mentions, so bad values fail before any output is
 *  written, naming the file and line (or the --set). *out: close with kvq_plan_free. */
kvq_status kvq_plan_build(const kvq_plan_opts *o, kvq_plan **out, kvq_err *err);
void kvq_plan_free(kvq_plan *p); // NULL is a no-op

/** Fills *e for tensor t (precedence above). May add specs to the plan (a rule's rate on
 *  this tensor's dtype), hence not const. */
kvq_status kvq_plan_resolve(kvq_plan *p, const kvq_tensor *t, kvq_plan_entry *e, kvq_err *err);
/** Re-points an entry at another codec spec / at its codec's rate `bits` (why: NULL keeps the
 *  entry's reason). Errors name the tensor; the entry is unchanged then. */
kvq_status kvq_plan_entry_set_spec(kvq_plan *p, kvq_plan_entry *e, const char *spec, const char *why, kvq_err *err);
kvq_status kvq_plan_entry_set_rate(kvq_plan *p, kvq_plan_entry *e, double bits, const char *why, kvq_err *err);

/** Codec for one tensor (kvq_plan_resolve without the entry): traits, parsed config and spec
 *  string, borrowed from the plan. */
kvq_status kvq_plan_choose(kvq_plan *p, const kvq_tensor *t, const kvq_codec_traits **codec,
                           const json_t **cfg, const char **spec, kvq_err *err);

/** Per-tensor seed: XXH3-64 of the tensor name with the recipe seed as XXH3's seed. */
uint64_t kvq_plan_tensor_seed(const kvq_plan *p, const char *name);
/** The resolved seed: --seed when given, else the recipe's, else 0. */
uint64_t kvq_plan_seed(const kvq_plan *p);
/** The KV codec and its policy. */
void kvq_plan_kv(const kvq_plan *p, kvq_plan_kv_policy *kv);

/** The whole-model budget a plan asks for (borrowed strings). */
typedef struct {
    double target_bpw;              // NAN: none
    const char *calib_text;         // NULL: text the model samples itself
    int calib_tokens;
    const char *calib_from;         // NULL: measure
    kvq_probe_kind calib_probe;
    double block_floor;             // row blocks' rates within this many bits of the table's highest (INFINITY: none)
    double block_floor_cap;         // ... or at least this rate, whichever is lower (INFINITY: no cap)
    int quantize_embeddings;
    const char *weights_spec;
    int ldlq;                       // 1: the budget's default codec rounds with LDLQ (kvq_plan_set_ldlq)
} kvq_plan_budget_t;
void kvq_plan_budget(const kvq_plan *p, kvq_plan_budget_t *b);

/** The resolved recipe as recorded in the manifest (new reference): file, weights, seed,
 *  quantize_embeddings, keep, rules, kv, set (the --set list), tensor_seed. */
json_t *kvq_plan_to_json(const kvq_plan *p);

/** Sets the budget a plan records in the manifest (recipe.target_bpw) after the converter decided
 *  how it was met: target_bpw NAN (none: the plan stores what its rules say), uniform 1 (one rate
 *  for every tensor taking part, no calibration), is_default 1 (the tool's default budget, not
 *  the user's). */
void kvq_plan_set_budget(kvq_plan *p, double target_bpw, int uniform, int is_default);
/** The budget's default HyperQuant codec (weights left unset) rounds with LDLQ: the converter sets it when a
 *  budget calibrates on a text the user gave with enough tokens and the covariances fit the memory
 *  (docs/HYPERQUANT.md "LDLQ by default"); recorded as recipe.target_bpw.ldlq = "auto". */
void kvq_plan_set_ldlq(kvq_plan *p, int on);

// ---- conversion ------------------------------------------------------------

/** What a whole-model budget's calibration is doing (kvq_convert_opts.calib_progress). */
typedef enum {
    KVQ_CALIB_START,  // before it runs: params, tokens, count (tensors to probe), probe_tokens, work
    KVQ_CALIB_PASS,   // the statistics pass: index tokens of count run so far (index == count: done)
    KVQ_CALIB_PROBE,  // tensor `name`, index of count, probed: its sensitivity
    KVQ_CALIB_NOTE,   // the default budget was not calibrated: note says why and what was done instead
} kvq_calib_event;

typedef struct {
    kvq_calib_event event;
    size_t index, count;
    const char *name;               // PROBE: the tensor
    double sensitivity;             // PROBE: its measured sensitivity
    double work_done, work_total;   // PROBE: the probes' parameter-tokens run so far / in all (the pace for an ETA)
    size_t tokens;                  // START: calibration tokens
    int probe_tokens;               // START: tokens each probe runs
    double params, work;            // START: parameters, predicted work in parameter-tokens
    double forwards;                // START: the probes' work in forwards of probe_tokens (kvq_alloc_work)
    kvq_probe_kind probe;           // START: how sensitivities are measured
    const char *text;               // START: the calibration text file, NULL: the model samples it
    const char *note;               // NOTE: one line (names the source)
} kvq_calib_progress;

typedef void (*kvq_calib_progress_fn)(void *ud, const kvq_calib_progress *p);

typedef struct {
    size_t index, count;            // this tensor, of count
    const char *name;
    const char *codec;              // codec name
    const char *spec;               // codec spec (rate included)
    double bits_per_weight;         // effective, every stored byte
    uint64_t bytes;                 // stored bytes of this tensor
    double snr_db;                  // the encoder's own error measurement as SNR (INFINITY: exact; NAN: none)
    int reused;                     // 1: taken from the interrupted run's journal (--resume)
    uint64_t source_done, source_total; // source bytes of the tensors finished so far / of all
} kvq_convert_progress;

typedef struct {
    kvq_plan_opts plan;
    int n_threads;                  // 0: OpenMP default
    const char *created_by;         // e.g. "kvq-convert 0.1.0"; NULL: "kvq <version>"
    /** Called after each tensor is written (may be NULL). */
    void (*progress)(void *ud, const kvq_convert_progress *p);
    void *progress_ud;
    /** Called once every tensor's plan entry is resolved and before anything is encoded (may
     *  be NULL): a rate allocator may change entries with kvq_plan_entry_set_spec/_set_rate.
     *  A non-OK status stops the conversion (err filled by the callee). */
    kvq_status (*adjust)(void *ud, kvq_plan *plan, kvq_plan_entry *entries, size_t n, kvq_err *err);
    void *adjust_ud;
    const char *kv_spec;            // KV codec (--kv): when set, replaces the recipe's kv section
    int kv_window, kv_boundary;     //   with this residual window and first/last-layer K protection
    int resume;                     // reuse the tensors an interrupted run left in its journal
    /** Called as a budget's calibration runs (may be NULL): its start with the predicted work, the
     *  statistics pass, each probe, and the default budget's notes. */
    kvq_calib_progress_fn calib_progress;
    void *calib_ud;
    /** 1: plan.target_bpw is the tool's default budget, not the user's. Then, instead of failing
     *  or running long: a budget out of this model's reach stores it as its rules say (lossless
     *  under the built-in rules); a calibration whose work (kvq_alloc_work) exceeds
     *  calib_work_limit parameter-tokens is not run and every rated tensor gets one rate meeting
     *  the same budget (uniform). Each says so once through calib_progress (KVQ_CALIB_NOTE). */
    int budget_default;
    double calib_work_limit;        // 0: KVQ_CALIB_WORK_LIMIT; < 0: no limit
} kvq_convert_opts;

typedef struct {
    size_t n_tensors;
    size_t n_quantized;             // tensors a lossy codec encoded
    size_t n_reused;                // tensors taken from the journal (--resume)
    uint64_t bytes;                 // size of the .kvq file
    uint64_t source_bytes;          // sum of the source's weight files
    double bits_per_weight;         // over the lossy-quantized tensors, NAN when none
    double bits_per_param;          // whole model: every tensor's bytes · 8 / every parameter (kvq_file_bits)
    char kv_spec[128];              // the KV codec stored ("" when none)
    int kv_window, kv_boundary;
    double target_bpw;              // the whole-model budget allocated to, NAN: none
    size_t calib_tokens;            // tokens its calibration pass saw
    int uniform;                    // 1: the budget was met with one rate (the default over its work limit)
} kvq_convert_summary;

/** Converts the checkpoint at src (HF dir or llama2.c .bin) into out (a .kvq),
 *  tensor by tensor: peak memory tracks the largest tensor. Nothing appears under
 *  out unless the whole conversion succeeds. Every finished tensor is journaled in
 *  `.<out name>.partial` beside out (removed on success), so that a run with o->resume after
 *  a kill reuses them and writes the same bytes as an uninterrupted run. sum may be NULL. */
kvq_status kvq_convert(const char *src, const char *out, const kvq_convert_opts *o,
                       kvq_convert_summary *sum, kvq_err *err);

/** What kvq_convert would write, without writing anything (--dry-run). */
typedef struct {
    kvq_plan_entry *entries;        // one per tensor, source order, predicted_bytes filled
    size_t n;
    uint64_t params;                // every tensor's elements
    uint64_t tensor_bytes;          // Σ predicted_bytes
    uint64_t file_bytes;            // predicted .kvq size: tensors, KV tables, tokenizer/config, manifest, zip
    double bits_per_param;          // kvq_file_bits over the predicted manifest
    double lossy_bits_per_weight;   // the same over lossy tensors (NAN: none)
    char kv_spec[128];
    int kv_window, kv_boundary;
    uint64_t kv_bytes;              // predicted stored bytes of the KV tables
    int unknown;                    // tensors whose codec cannot predict its size (fixed SNR)
    double target_bpw;              // the whole-model budget allocated to, NAN: none
    size_t calib_tokens;            // tokens its calibration pass saw
    int uniform;                    // 1: one rate (the default over its work limit)
    kvq_plan *plan_;                // owned: entries' strings
    void *ckpt_;                    // owned: entries' names
} kvq_convert_prediction;

kvq_status kvq_convert_predict(const char *src, const kvq_convert_opts *o, kvq_convert_prediction *out, kvq_err *err);
void kvq_convert_prediction_free(kvq_convert_prediction *p);

// ---- HF export -------------------------------------------------------------

typedef struct {
    kvq_dtype dtype;                // KVQ_DTYPE_BF16 (default) or KVQ_DTYPE_F32: every tensor, stated in config.json
    uint64_t max_shard_bytes;       // save_pretrained's max_shard_size (its default: 5 GB = 5e9 bytes)
    int force;                      // write into a directory that holds a checkpoint (its weight files go)
} kvq_export_opts;

typedef struct {
    int n_shards;
    size_t n_tensors;
    uint64_t total_bytes;           // tensor bytes (the index's total_size)
    kvq_dtype dtype;
    size_t n_rounded;               // tensors whose values the dtype rounded (bf16 of decoded float32)
    double round_rel_rms;           // ||bf16(x) - x|| / ||x|| over those tensors
    double round_max_abs;           // max |bf16(x) - x|
    char kv_spec[128];              // the .kvq's KV codec, which an HF checkpoint cannot express ("" none)
    int kv_window, kv_boundary;
    int n_removed;                  // earlier weight files removed (force)
} kvq_export_report;

/** Writes an HF checkpoint directory (created if missing) from any model kvq_weights_open
 *  accepts (a .kvq or a source checkpoint): safetensors shards named and indexed as
 *  save_pretrained names them (model.safetensors alone when one shard holds everything, else
 *  model-0000k-of-0000n.safetensors + model.safetensors.index.json), every tensor in o->dtype
 *  (lossy tensors are the decoded values, rounded to bf16 or exact in f32; the rounding is
 *  measured into rep), config.json with "dtype" (and "torch_dtype" when present) saying so,
 *  and the tokenizer files. A directory that already holds a checkpoint is refused unless
 *  o->force. One shard is in memory at a time. o NULL: bf16, 5 GB shards. */
kvq_status kvq_export_hf(const char *model, const char *dir, const kvq_export_opts *o, kvq_export_report *rep,
                         kvq_err *err);
/** The refusal kvq_export_hf makes, alone: KVQ_ERR_ARG naming dir and the checkpoint files
 *  in it unless force (a missing directory is fine). */
kvq_status kvq_export_check_dir(const char *dir, int force, kvq_err *err);

#endif
