// The decoder-only transformer forward pass on CPU: Llama (incl. linear/llama3 RoPE
// scaling), Mistral, Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm before RoPE)
// and Phi-3 (fused qkv / gate_up), tied or untied embeddings, GQA. Causal batched
// prefill and single-token decode write logits; the KV cache is used only through
// libconv/kvcache.h so codecs can replace it.
#ifndef KVQ_MODEL_H
#define KVQ_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/arch.h"
#include "formats/error.h"
#include "kernels/verify_score.h"
#include "libconv/kv/kvcache.h"
#include "libconv/tokenizer/tokenizer.h"

typedef struct kvq_model kvq_model;
typedef struct kvq_backend kvq_backend; // libconv/runtime/backend.h

typedef enum {
    KVQ_WEIGHTS_AUTO = 0, // per tensor: bf16 when every value is exactly a bf16, else fp32
    KVQ_WEIGHTS_F32,
    KVQ_WEIGHTS_BF16,     // rounds (RNE) tensors that are not already bf16
} kvq_weight_store;

/** How HyperQuant tensors of a .kvq are held and multiplied. */
typedef enum {
    KVQ_EXEC_INT8 = 0, // packed (kernels/hq_layout.h); activations rotated, int8 per tile
    KVQ_EXEC_EXACT,    // packed; float activations (matches decoded weights to ~1e-6)
    KVQ_EXEC_DECODED,  // reference: every tensor decoded to fp32/bf16 at load
} kvq_exec;

/** Where a product's input is observed (kvq_model_opts.observe): the input of layer l's
 *  fused q/k/v product (the attention-normed stream), of o_proj (the attention output), of
 *  gate/up (the ffn-normed stream), of down_proj (silu(gate)·up), and of the lm_head (the
 *  final-normed stream; layer -1). */
typedef enum {
    KVQ_SITE_QKV = 0,
    KVQ_SITE_O,
    KVQ_SITE_GATE_UP,
    KVQ_SITE_DOWN,
    KVQ_SITE_LM_HEAD,
    KVQ_SITE_EMBED,   // perturb only: the embedding rows looked up (T, hidden)
} kvq_model_site;

typedef struct kvq_model_opts_s {
    kvq_weight_store store;
    int n_threads;  // <= 0: OpenMP default
    int max_ctx;    // default KV cache capacity; 0: max_position_embeddings capped at 4096
    int kv_fp16;    // default cache stores fp16 (else fp32)
    int max_batch;  // tokens per internal forward chunk (activation memory); 0: 512
    kvq_exec exec;  // HyperQuant tensors: packed int8 (default), packed exact, or decoded
    /** 1: chunks of 64 tokens and more multiply decoded row blocks with the dense fp32 kernel
     *  whatever exec says, so their logits are the decoded model's (kvq-verify); 0: int8
     *  mode runs them as batched int8 products (kernels/cpu/hqx_gemm.c) where it can. */
    int prefill_decoded;
    /** Creates the backend the forward pass runs on (backend.h); NULL: the CPU's. A device
     *  backend (kvq_backend_cuda_new) holds its own KV cache (fp32, or a codec given by
     *  kvq_model_set_kvcache in its device layout): kvq_model_kvcache then returns NULL. */
    kvq_status (*backend)(const struct kvq_model_opts_s *o, const kvq_arch *a, kvq_backend **out, kvq_err *err);
    /** Calibration (libconv/convert/alloc.c; may be NULL): called on a host backend with each
     *  product's input x (T, cols), host memory valid during the call, before the product runs.
     *  The lm_head's input is seen only when logits are asked for. */
    void (*observe)(void *ud, int layer, kvq_model_site site, const float *x, int T, int cols);
    /** Sensitivity probes (may be NULL): called on a host backend with each product's output
     *  y (T, rows) right after the product (fused q/k/v and gate/up as one), and with the
     *  looked-up embedding rows (KVQ_SITE_EMBED), which it may change in place. */
    void (*perturb)(void *ud, int layer, kvq_model_site site, float *y, int T, int rows);
    void *observe_ud; // both hooks' first argument
} kvq_model_opts;

/** Defaults: AUTO store, OpenMP threads, max_ctx min(max_position_embeddings, 4096),
 *  fp32 cache, max_batch 512. */
kvq_model_opts kvq_model_opts_default(void);

/** Loads a model from an HF directory, a llama2.c .bin or a .kvq (weights decoded to
 *  fp32 then held per opts->store) and creates its default KV cache. opts may be NULL.
 *  @return KVQ_OK and *out (caller closes), or an error naming the file and tensor. */
kvq_status kvq_model_open(const char *path, const kvq_model_opts *opts, kvq_model **out,
                          kvq_err *err);
void kvq_model_close(kvq_model *m); // NULL is a no-op; frees the KV cache too

const kvq_arch *kvq_model_arch(const kvq_model *m);
/** Tokenizer file of a source checkpoint (borrowed), or NULL (none, or a .kvq: use
 *  kvq_model_tokenizer). */
const char *kvq_model_tokenizer_path(const kvq_model *m);
/** Opens the model's tokenizer (a .kvq's from its stored bytes, a source's from its file);
 *  caller closes it. @return KVQ_ERR_MISSING when the model has none. */
kvq_status kvq_model_tokenizer(const kvq_model *m, kvq_tokenizer **out, kvq_err *err);
/** Bytes of weights a decode step streams (matrices as held + norms + the lm_head). */
size_t kvq_model_weight_bytes(const kvq_model *m);
/** Memory a loaded model holds, in bytes. */
typedef struct {
    size_t held;          // every weight held (matrices as held, embeddings, norms, biases)
    size_t packed;        // of which matrices in an execution layout (packed)
    size_t packed_stored; // those matrices' bytes in the .kvq
    size_t dense;         // matrices held as fp32/bf16
    size_t scratch;       // activation scratch of the products (packed and dense bf16)
    size_t kv;            // the KV cache at its capacity (bits per element × positions)
    size_t kv_exec;       // of the KV cache's records, those held as execution forms instead (HQMQ,
                          // HyperQuant-KV): the bytes of those forms at capacity
    size_t device;        // a device backend: weight bytes in device memory (all but the
                          // embedding table, which is looked up on the host); 0 on the CPU
} kvq_model_mem;
void kvq_model_memory(const kvq_model *m, kvq_model_mem *out);
void kvq_model_set_threads(kvq_model *m, int n_threads);
/** Reads every held weight byte once, as a decode step must, with the model's threads;
 *  @return a checksum. Timing it gives the memory roofline for decode. */
uint64_t kvq_model_stream_weights(const kvq_model *m);

/** The model's KV cache (borrowed); NULL when the backend holds its own (GPU). */
kvq_kvcache *kvq_model_kvcache(kvq_model *m);
/** Positions the model's KV cache holds (whichever backend holds it). */
int kvq_model_max_ctx(const kvq_model *m);
/** The backend's name ("cpu", "cuda"). */
const char *kvq_model_backend_name(const kvq_model *m);
/** Replaces the KV cache: the model takes ownership of c and frees the old one. c must
 *  match the model's n_layers, n_kv_heads and head_dim. On a device backend c must be a codec
 *  cache (kvq_kvcache_codec_new): the device builds its own cache in that codec (c's
 *  max_ctx does not matter there; one cache per sequence of kvq_model_set_seqs, the states'
 *  tables shared) and the model keeps c for its states. On the CPU with several sequences set, c
 *  becomes sequence 0's cache and the others get clones of it (KVQ_ERR_UNSUPPORTED when c is not a
 *  codec cache). On failure the caller keeps c. */
kvq_status kvq_model_set_kvcache(kvq_model *m, kvq_kvcache *c, kvq_err *err);
/** The cache set by kvq_model_set_kvcache (borrowed; on a device, the codec states it runs),
 *  else the CPU's default cache, else NULL. */
const kvq_kvcache *kvq_model_kvcache_desc(const kvq_model *m);

/** Benchmarks at long context without the prefill (tests/bench/cuda_decode_fill.c): positions
 *  [0, T) of every layer's KV cache (whichever backend holds it) get seeded synthetic keys and
 *  values (libconv/kv/kvsynth.h) through the cache's own append path — the CPU's kvq_kvcache
 *  append, a device's encoders as a prefill's attention runs them — in chunks of max_batch, and
 *  nothing else runs: a forward at position T then attends to T positions laid out as a prefill
 *  of T tokens would have left them (what the cache held before is dropped). @return KVQ_OK;
 *  KVQ_ERR_ARG for T outside [1, max_ctx]; KVQ_ERR_UNSUPPORTED with several sequences or a cache
 *  the backend cannot fill (the GPU's fp32 cache). */
kvq_status kvq_model_fill_kv(kvq_model *m, int T, uint64_t seed, kvq_err *err);

/** Runs tokens[0..T) at positions [pos, pos+T), causally attending to the cached
 *  positions [0, pos) and to each other; appends their K/V to the cache. Positions
 *  >= pos+T in the cache are forgotten first. logits: (T, vocab) when all_logits, else
 *  (vocab) for the last token only; may be NULL (cache fill only). T == 1 is a decode
 *  step. @return KVQ_ERR_ARG for bad ids or positions beyond the cache. */
kvq_status kvq_model_forward(kvq_model *m, const int32_t *tokens, int T, int pos, float *logits,
                             int all_logits, kvq_err *err);
/** kvq_model_forward, then the greedy choice: *next = the argmax of the last token's logits
 *  (the first of equals; -1 when one is NaN). The logits are not handed over, so a device
 *  backend reduces them where they are and copies one integer back. */
/** Host backends (calibration): layers [l0, l1) of kvq_model_forward, entered with h_in (T ×
 *  hidden, the residual stream before layer l0; NULL: the embeddings of tokens, l0 = 0),
 *  chunked as kvq_model_forward is (so the same numbers), the cache of those layers written at
 *  [pos, pos+T). h_out (may be NULL): the residual stream after layer l1 − 1; logits (T, vocab;
 *  may be NULL, only when l1 = n_layers): every token's. Hooks run as in a full forward. */
kvq_status kvq_model_forward_layers(kvq_model *m, const int32_t *tokens, const float *h_in, int l0, int l1, int T,
                                    int pos, float *h_out, float *logits, kvq_err *err);
kvq_status kvq_model_forward_argmax(kvq_model *m, const int32_t *tokens, int T, int pos, int32_t *next, kvq_err *err);
/** kvq_model_forward with every token's logits left in the backend's memory (a device's: none
 *  downloaded): *logits (T, vocab) is owned by the model and valid until its next
 *  kvq_model_forward_keep (or close); read it with kvq_model_vscore or the backend's ops. */
kvq_status kvq_model_forward_keep(kvq_model *m, const int32_t *tokens, int T, int pos, const float **logits,
                                  kvq_err *err);
/** kvq-verify's per-position scores (kernels/verify_score.h) of two (rows, vocab) logit blocks
 *  in m's backend memory (ref and q from kvq_model_forward_keep of models on the same backend
 *  kind and device) for the host targets target[0..rows): out (host, rows) filled. Computed where
 *  the logits are (the GPU kernel, or its C reference on the CPU). KVQ_ERR_UNSUPPORTED when
 *  the backend cannot score. */
kvq_status kvq_model_vscore(kvq_model *m, const float *ref, const float *q, const int32_t *target, int rows,
                            kvq_vscore *out, kvq_err *err);

/** Several sequences decoded together (a batch: each weight byte read once per step for all).
 *  The model holds n_seq KV caches, each of the model's capacity (kvq_model_max_ctx); the one it
 *  held becomes sequence 0 (on a device, every sequence starts empty). With a KV cache codec,
 *  one codec cache per sequence (the CPU: clones of the one held, its states and tables; a
 *  device: its own packed caches), set before or after the codec. 1 <= n_seq <= KVQ_MODEL_MAX_SEQS. */
#define KVQ_MODEL_MAX_SEQS 64
kvq_status kvq_model_set_seqs(kvq_model *m, int n_seq, kvq_err *err);
int kvq_model_n_seqs(const kvq_model *m);
/** The sequence kvq_model_forward, _argmax and _layers run on from now on (its prompt, say). */
kvq_status kvq_model_use_seq(kvq_model *m, int s, kvq_err *err);
/** One decode step of n distinct sequences: tokens[t] is the next token of sequence seq[t] at
 *  position pos[t] (that sequence's cache holds [0, pos[t]) and forgets positions beyond); it
 *  attends within its own sequence. logits (n, vocab) and/or next (n greedy choices, -1 where
 *  a row has a NaN), host memory; n <= min(n_seq, max_batch). The numbers are those of n
 *  single-sequence steps up to the products' batching (docs/GPU.md). */
kvq_status kvq_model_forward_seqs(kvq_model *m, const int32_t *tokens, const int *seq, const int *pos, int n, float *logits,
                                  int32_t *next, kvq_err *err);

#endif
