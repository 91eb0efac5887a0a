// The architecture description of a decoder-only LLM, read from HF config.json
// (transformers 4.x and 5.x spellings) or from a llama2.c header. The runtime,
// the converter and the manifest all use this one struct.
#ifndef KVQ_ARCH_H
#define KVQ_ARCH_H

#include <stdbool.h>
#include <jansson.h>

#include "formats/error.h"

typedef enum {
    KVQ_ARCH_LLAMA = 0,   // LlamaForCausalLM (also llama2.c checkpoints)
    KVQ_ARCH_MISTRAL,     // MistralForCausalLM
    KVQ_ARCH_QWEN2,       // Qwen2ForCausalLM (q/k/v biases)
    KVQ_ARCH_QWEN3,       // Qwen3ForCausalLM (per-head q_norm / k_norm)
    KVQ_ARCH_PHI3,        // Phi3ForCausalLM (fused qkv_proj, gate_up_proj)
    KVQ_ARCH_COUNT
} kvq_arch_family;

typedef enum { KVQ_ROPE_DEFAULT = 0, KVQ_ROPE_LINEAR, KVQ_ROPE_LLAMA3 } kvq_rope_type;

typedef struct {
    kvq_arch_family family;
    char hf_class[64];         // e.g. "LlamaForCausalLM"
    int hidden_size;
    int intermediate_size;
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;              // explicit, or hidden_size / n_heads
    int vocab_size;
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    kvq_rope_type rope_type;
    double rope_factor;                 // linear and llama3
    double rope_low_freq_factor;        // llama3
    double rope_high_freq_factor;       // llama3
    int rope_original_max_position;     // llama3
    double partial_rotary_factor;       // 1.0 unless the config says otherwise
    bool tie_word_embeddings;
    bool attention_bias;       // q/k/v biases (Qwen2 always)
    bool qk_norm;              // Qwen3
    int bos_token_id;          // -1 when absent/null
    int eos_token_id;          // -1 when absent/null (first one if a list)
} kvq_arch;

/** Parses an HF config.json. Unknown architecture or missing required field is an
 *  error naming the file and the field. */
kvq_status kvq_arch_from_config(const char *config_path, kvq_arch *arch, kvq_err *err);
/** Same from an already parsed JSON object; `what` names it in messages. */
kvq_status kvq_arch_from_json(const json_t *cfg, const char *what, kvq_arch *arch, kvq_err *err);
/** The description as a JSON object for the manifest (new reference, caller owns). */
json_t *kvq_arch_to_json(const kvq_arch *arch);
/** Reads back what kvq_arch_to_json wrote. */
kvq_status kvq_arch_from_manifest(const json_t *j, kvq_arch *arch, kvq_err *err);
const char *kvq_arch_family_name(kvq_arch_family f);

/** Limits no real checkpoint approaches (docs/FORMAT.md: hidden ≤ 65536, layers ≤ 1024,
 *  heads ≤ 1024 and a multiple of the KV heads, head_dim ≤ 4096 and even, vocab ≤ 2^22, ffn ≤ 2^20),
 *  and the numbers the runtime computes with: rms_norm_eps in (0, 1], RoPE theta, factor and
 *  partial_rotary_factor finite and positive (llama3: 0 < low < high frequency factor), at least
 *  one rotary pair, max_position_embeddings ≥ 1, bos/eos -1 or an id below vocab_size;
 *  checked by the converter on a source and by kvq_file_open on a manifest. what names the
 *  file in the message. */
kvq_status kvq_arch_check_limits(const kvq_arch *a, const char *what, kvq_err *err);

/** The tensors the runtime (libconv/runtime/model.c) needs of this architecture: the
 *  embedding, the output matrix unless tied, the final norm, and per layer both norms, q/k/v
 *  (or a fused qkv), their biases where the architecture or the file has them, q/k norms
 *  (qk_norm), o, gate/up (or a fused gate_up) and down. has(name, ud) says whether a tensor is
 *  present. Shared by the converter (on a source) and kvq_file_open (on a manifest).
 *  @return KVQ_OK, or KVQ_ERR_MISSING naming what and the first absent tensor. */
kvq_status kvq_arch_check_tensor_set(const kvq_arch *a, int (*has)(const char *name, void *ud), void *ud,
                                     const char *what, kvq_err *err);

/** The shape the architecture requires of a named tensor (Llama-family names: embeddings,
 *  lm_head, norms, q/k/v/o and fused qkv, their biases, q/k norms, gate/up/down and fused
 *  gate_up). @return 1 with shape/ndim filled, 0 for a name the table does not constrain,
 *  -1 for a layer index ≥ n_layers. */
int kvq_arch_expected_shape(const kvq_arch *a, const char *name, int64_t shape[2], int *ndim);
/** kvq_arch_expected_shape as an error naming what and the tensor: KVQ_ERR_FORMAT when a
 *  known tensor's shape differs or its layer does not exist. */
kvq_status kvq_arch_check_shape(const kvq_arch *a, const char *name, const int64_t *shape, int ndim, const char *what,
                                kvq_err *err);

#endif
