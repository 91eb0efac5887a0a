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

/** What decides each tensor's codec. Precedence, first that applies wins:
 *  1. `keep` patterns (CLI --keep): codec "none";
 *  2. the recipe's rules, in file order (fnmatch globs on the tensor name);
 *  3. built-in: 1-D/0-D tensors -> "none"; token embeddings and lm_head -> "none"
 *     unless quantize_embeddings, then the weights spec; other tensors with
 *     ndim >= 2 -> the weights spec.
 *  CLI values override the recipe file's `weights`, `seed`, `quantize_embeddings`. */
typedef struct {
    const char *weights;            // default spec for 2-D weights; NULL: recipe's, else "none"
    const char *recipe_path;        // YAML recipe (recipes/default.yaml format) or NULL
    uint64_t seed;                  // used when seed_set (must be < 2^63)
    int seed_set;
    int quantize_embeddings;        // -1: recipe's (default 0), 0/1: override
    const char *const *keep;        // NULL-terminated glob list, or NULL
} kvq_plan_opts;

typedef struct kvq_plan kvq_plan;

/** Reads the recipe (if any), applies the CLI overrides and parses every codec spec
 *  it mentions, so bad specs fail before any output is written. *out: close with
 *  kvq_plan_free. */
kvq_status kvq_plan_build(const kvq_plan_opts *o, kvq_plan **out, kvq_err *err);
void kvq_plan_free(kvq_plan *p); // NULL is a no-op

/** Codec for one tensor: traits, parsed config (borrowed from the plan) and the spec
 *  string it came from (borrowed). */
kvq_status kvq_plan_choose(const kvq_plan *p, const kvq_tensor *t, const kvq_codec_traits **codec,
                           const json_t **cfg, const char **spec, kvq_err *err);

/** Per-tensor seed: XXH3-64 of the tensor name with the recipe seed as XXH3's seed. */
uint64_t kvq_plan_tensor_seed(const kvq_plan *p, const char *name);
/** The resolved seed: --seed when given, else the recipe's, else 0 (the KV codec's seed too). */
uint64_t kvq_plan_seed(const kvq_plan *p);

/** The recipe as recorded in the manifest (new reference). */
json_t *kvq_plan_to_json(const kvq_plan *p);

// ---- conversion ------------------------------------------------------------

typedef struct {
    size_t index, count;            // this tensor, of count
    const char *name;
    const char *codec;              // codec name
    double bits_per_weight;         // effective, every stored byte
    uint64_t bytes;                 // stored bytes of this tensor
} kvq_convert_progress;

typedef struct {
    kvq_plan_opts plan;
    int n_threads;                  // 0: OpenMP default
    const char *created_by;         // e.g. "kvq-convert 0.1.0"; NULL: "kvq <version>"
    /** Called after each tensor is written (may be NULL). */
    void (*progress)(void *ud, const kvq_convert_progress *p);
    void *progress_ud;
    const char *kv_spec;            // --kv: KV codec stored in the manifest "kv" section (NULL: none)
    int kv_window, kv_boundary;     // its residual window and first/last-layer K protection
} kvq_convert_opts;

typedef struct {
    size_t n_tensors;
    size_t n_quantized;             // tensors a lossy codec encoded
    uint64_t bytes;                 // size of the .kvq file
    uint64_t source_bytes;          // sum of the source's weight files
    double bits_per_weight;         // over the lossy-quantized tensors, NAN when none
    double bits_per_param;          // whole model: every tensor's bytes · 8 / every parameter (kvq_file_bits)
} kvq_convert_summary;

/** Converts the checkpoint at src (HF dir or llama2.c .bin) into out (a .kvq),
 *  tensor by tensor: peak memory tracks the largest tensor. Nothing appears under
 *  out unless the whole conversion succeeds. sum may be NULL. */
kvq_status kvq_convert(const char *src, const char *out, const kvq_convert_opts *o,
                       kvq_convert_summary *sum, kvq_err *err);

/** Writes an HF checkpoint directory (created if missing) from any model
 *  kvq_weights_open accepts: model.safetensors (tensors a lossless codec stored keep
 *  their source dtype, bit-identical; lossy ones are written as F32, exactly the
 *  decoded values), config.json (the source's, or generated from the architecture
 *  for llama2.c sources) and the tokenizer files. Holds all tensors in memory while
 *  writing (kvq_st_write takes them at once). */
kvq_status kvq_export_hf(const char *model, const char *dir, kvq_err *err);

#endif
