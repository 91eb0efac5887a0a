// A whole-model bit budget (--target-bpw): a calibration pass through the source model that
// records each product's input second moments, each tensor's sensitivity predicted from them
// and its weights, and an equal-slope (Lagrangian) choice of HyperQuant rates that meets the
// budget in bits per parameter as kvq_file_bits counts it. Method and measurements:
// docs/ALLOCATION.md.
#ifndef KVQ_ALLOC_H
#define KVQ_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "formats/checkpoint.h"
#include "formats/error.h"
#include "libconv/convert/convert.h"

typedef struct kvq_calib kvq_calib;

/** Runs n_tokens tokens through the source model at src (kvq_model_open) on the CPU and
 *  records, for every product's input, Σ x_j² per input column, and the embedding lookups'
 *  token counts. text_path: the first n_tokens tokens of that UTF-8 file (fewer when it is
 *  shorter; an empty file is an error naming it); NULL: tokens the model samples itself from
 *  its BOS (temperature 1, top-p 0.95, seeded), so no data is needed. hessian: also the input
 *  covariances (kvq_calib_hessian). *out: kvq_calib_free. */
kvq_status kvq_calib_run(const char *src, const char *text_path, int n_tokens, uint64_t seed, int n_threads, int hessian,
                         kvq_calib_progress_fn progress, void *ud, kvq_calib **out, kvq_err *err);
/** With hessian = 1 in kvq_calib_run, the pass also sums each product's full input covariance Σ x xᵀ
 *  (per layer and site, double; SmolLM2-135M: ~0.8 GB) for LDLQ. @return tensor `name`'s ((cols, cols),
 *  row-major, borrowed from c), or NULL: none kept, a name the runtime has no product for, or an
 *  embedding (a lookup, tied or not, never rounds against a product's inputs). */
const double *kvq_calib_hessian(const kvq_calib *c, const char *name, int64_t rows, int64_t cols);
/** Bytes kvq_calib_run with hessian = 1 holds for the covariances of a model of this architecture (every
 *  layer's at once; ~65 GB at the Llama-3-8B shape), and bytes of memory the process may still take
 *  (KVQ_MEM_AVAILABLE_MB when set, else /proc/meminfo's MemAvailable; 0 when unknown). The pass refuses
 *  (KVQ_ERR_NOMEM, one line) when the first exceeds 0.9 of the second. */
double kvq_calib_ldlq_bytes(const kvq_arch *a);
double kvq_mem_available(void);
void kvq_calib_free(kvq_calib *c); // NULL is a no-op
/** Tokens the pass saw. */
size_t kvq_calib_tokens(const kvq_calib *c);

/** How kvq_alloc_apply measures sensitivities (docs/ALLOCATION.md): KVQ_PROBE_LAYER (the default)
 *  runs each tensor's error through its own layer only and probes of a layer's tensors at once (all
 *  of them; q_proj and k_proj) through the rest of the model; KVQ_PROBE_FULL one probe per tensor
 *  from its layer to the logits. */
void kvq_calib_set_probe(kvq_calib *c, kvq_probe_kind kind);

/** Sensitivity of tensor `name`, values w (rows, cols) float32: the output-error energy per
 *  token that HyperQuant's error at 0 dB would add (the error at SNR s is this · 10^(-s/10)).
 *  A linear layer's error ΔW is white within each RHT tile with energy ∝ the tile's, so
 *  E‖ΔW x‖² = Σ_rows Σ_tiles ‖w_tile‖²/T · Σ_{j∈tile} E[x_j²]; an embedding row's error lands
 *  in the residual stream whenever its token is looked up: Σ_v p(v) ‖w_v‖², plus the lm_head
 *  term when the embedding is tied. NAN when the pass never saw the tensor's input (a name
 *  the runtime does not use). */
double kvq_calib_sensitivity(const kvq_calib *c, const char *name, const float *w, int64_t rows, int64_t cols,
                             int tied);

/** The allocation over a plan's entries (after kvq_plan_resolve): tensors the built-in rule
 *  gives the weights codec, and token embeddings / lm_head, take part; keep patterns, rules and
 *  1-D tensors are fixed and paid from the budget first. Each taking part gets a HyperQuant rate
 *  (the weights spec's lattice and options; hyperquant:e8 when weights is none) in [1.5, 8]
 *  bits per weight, or, for embeddings and lm_head, source precision, by minimizing
 *  Σ sensitivity_i · 10^(-SNR_i(r_i)/10) under Σ bits = target_bpw · parameters, with SNR(r)
 *  from the codec's rate–SNR table. Sets entries' spec, rate, why and sensitivity.
 *  @return KVQ_ERR_ARG naming the reachable range when the budget cannot be met. */
/** The checks kvq_alloc_apply makes before it measures anything (weights codec, fixed-SNR
 *  rules, the budget's reachable range), so a bad budget fails before the calibration pass. */
kvq_status kvq_alloc_check(kvq_plan *p, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, double target_bpw, kvq_err *err);
kvq_status kvq_alloc_apply(kvq_plan *p, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, kvq_calib *c,
                           double target_bpw, int n_threads, kvq_calib_progress_fn progress, void *ud, kvq_err *err);

/** What a budget's calibration would cost, known before it runs: the tensors it would probe, the
 *  tokens each probe runs (the calibration's first min(256, context, n_tokens)), the probes' work
 *  in full forwards of those tokens (KVQ_PROBE_FULL: one per tensor from its layer on; _LAYER:
 *  one layer per tensor plus, per layer, two forwards from that layer on — all its tensors' errors,
 *  then q/k's — and a third in the sampled layers), and the work in
 *  parameter-tokens: params × n_tokens for the statistics pass, plus the parameters each probe
 *  token runs through (the reference forward and the probes). */
typedef struct {
    double params;
    size_t n_probes;
    int probe_tokens;
    double forwards;
    double work;
    double probe_work;  // the probes' share of work (what kvq_alloc_apply's progress counts)
} kvq_alloc_work_t;
void kvq_alloc_work(const kvq_ckpt *ck, const kvq_plan_entry *e, size_t n, int n_tokens, kvq_probe_kind kind,
                    kvq_alloc_work_t *w);

/** The budget met without calibration: every tensor taking part gets the same HyperQuant rate,
 *  (target_bpw · parameters − what the rest stores) / its weights, embeddings included (the
 *  default's fallback over its work limit). Same checks and errors as kvq_alloc_check. */
kvq_status kvq_alloc_uniform(kvq_plan *p, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, double target_bpw, kvq_err *err);
/** kvq_alloc_apply with the sensitivities an earlier budgeted conversion of the same source
 *  stored (the manifest of `from`, a .kvq: each tensor taking part must have a record of the same
 *  name and shape with `allocation`), so a second budget costs no calibration pass. Errors name
 *  `from` and the tensor. */
kvq_status kvq_alloc_apply_from(kvq_plan *p, const kvq_ckpt *ck, kvq_plan_entry *e, size_t n, const char *from,
                                double target_bpw, kvq_err *err);

/** Grid choices for nb units (a row-blocked table's blocks) whose costs at grid point g are
 *  cost[b·ng + g], none below min(highest − fg, ga) (the recipe's block_floor and
 *  block_floor_cap in grid steps; ga ≥ ng: no cap): the cheapest window [min(t − fg, ga), t] with
 *  each unit at its cheapest point inside it — exact for any costs (a sliding-window minimum per
 *  unit: both ends only move up with t). Fills choice[0..nb). @return the total cost, or NAN
 *  (choice untouched) when out of memory. tests/test_alloc.c checks it against a brute force. */
double kvq_alloc_window_choose(const double *cost, int nb, int ng, int fg, int ga, int *choice);

/** The probe's perturbation, y[t·ldy + r0 + r] += Σ_j dw[r·cols + j] · x[t·cols + j] for t < T,
 *  r < rows: the runtime's vectorized fp32 product (kvq_matmul: n_threads <= 0 the OpenMP
 *  default) into tmp (T · rows floats), then added. Differs from the plain loop only by
 *  summation order (tests/test_alloc.c checks it against one on random inputs). */
void kvq_alloc_add_dwx(float *y, int64_t ldy, int r0, const float *dw, const float *x, int T, int rows, int cols,
                       float *tmp, int n_threads);

#endif
