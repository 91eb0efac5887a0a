// The operations a forward pass is made of, as a table: the model-family logic (which
// tensors, which norms, which RoPE, GQA) is written once in model.c over these ops, and the
// CPU (backend_cpu.c) and the GPU (backend_cuda.c, kernels/cuda) are two implementations.
// Activations and the small per-layer vectors (norm weights, biases, RoPE frequencies) live
// in the backend's memory (host or device) and are only touched through the table; weight
// matrices are loaded on the host and handed to the backend, which may keep them (CPU) or
// upload them and free the host arrays (GPU).
#ifndef KVQ_BACKEND_H
#define KVQ_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "formats/arch.h"
#include "formats/dtype.h"
#include "formats/error.h"
#include "kernels/hq_layout.h"
#include "kernels/pq_layout.h"
#include "kernels/verify_score.h"
#include "libconv/kv/kvcache.h"
#include "libconv/runtime/model.h"

/** A weight matrix of one of three kinds: dense (fp32/bf16 in data); for HyperQuant/RTN
 *  tensors of a .kvq, packed in the hqx execution layout (kernels/hq_layout.h): n_part row
 *  blocks (fused q/k/v and gate/up keep one block per source tensor, each with its own
 *  rotation); for PQ tensors (and QET without swap trees), the pqx layout
 *  (kernels/pq_layout.h): n_pq row blocks. At most one of n_part and n_pq is > 0. */
typedef struct {
    kvq_dtype dt; // F32 or BF16 (dense)
    int rows, cols;
    void *data;   // dense host values (NULL once a device backend owns the matrix)
    int n_part;   // > 0: packed
    kvq_hqx part[3];
    int n_pq;     // > 0: PQ (pqx), n_pq row blocks in pq[]
    kvq_pqx pq[3];
    int row0[3];  // first row of each block (hqx or pqx)
    size_t stored; // packed (either layout): the blocks' bytes in the file
    size_t held;   // bytes the backend holds for the matrix (set by mat_adopt)
    void *dev;     // the backend's own copy (GPU), or NULL
} kvq_mat;

/** Host arrays of a packed or dense matrix, freed (the part arrays and data). */
void kvq_mat_free_host(kvq_mat *m);
/** Bytes of a matrix's host arrays (packed: the layout's arrays; dense: rows·cols·dtype). */
size_t kvq_mat_host_bytes(const kvq_mat *m);

/** Shapes an attention call needs. */
typedef struct {
    int n_heads, n_kv_heads, head_dim;
    float scale;
} kvq_attn_shape;

typedef struct kvq_backend_ops {
    const char *name;
    int host;     // activations are host memory (callers may pass their own buffers)
    void (*destroy)(kvq_backend *b);
    /** n floats of backend memory (NULL: out of memory); release(NULL) is a no-op. */
    float *(*alloc)(kvq_backend *b, size_t n);
    void (*release)(kvq_backend *b, float *p);
    kvq_status (*upload)(kvq_backend *b, float *dst, const float *src, size_t n, kvq_err *err);
    kvq_status (*download)(kvq_backend *b, float *dst, const float *src, size_t n, kvq_err *err);
    /** Takes a host matrix: the backend keeps it or copies it (keep_host = 0: the host arrays
     *  may be freed; 1: they stay, e.g. a tied embedding looked up on the host) and sets held. */
    kvq_status (*mat_adopt)(kvq_backend *b, kvq_mat *w, int keep_host, kvq_err *err);
    /** Frees the backend's copy (not the host arrays). */
    void (*mat_release)(kvq_backend *b, kvq_mat *w);
    /** A forward chunk of T tokens at pos begins (after the embeddings' upload): a device
     *  backend may replay a captured graph of the ops that follow (logits: the chunk ends
     *  with the lm_head product; 2: and the argmax of its logits). */
    void (*step)(kvq_backend *b, int T, int pos, int logits);
    /** Optional (NULL: one sequence at a time): a chunk of T tokens of T different sequences
     *  begins (a batched decode step, kvq_model_forward_seqs): token t is the next token of
     *  sequence seq[t] at position pos[t] (host arrays, valid until the chunk's sync). Until the
     *  next step or step_seqs, rope and attention take these positions (their pos argument is
     *  ignored) and token t attends within its own sequence: caches[seq[t]] on a host backend
     *  (the model's caches), the backend's own cache of sequence seq[t] otherwise (caches NULL).
     *  logits as in step. */
    void (*step_seqs)(kvq_backend *b, int T, const int *seq, const int *pos, kvq_kvcache *const *caches, int logits);
    /** Optional, backends holding their own KV cache (NULL: they hold one sequence): the cache
     *  holds n_seq sequences from now on (what it held is dropped). */
    kvq_status (*seqs)(kvq_backend *b, int n_seq, kvq_err *err);
    /** Optional, with seqs: the sequence whose cache the chunks begun by step use from now on. */
    void (*seq_use)(kvq_backend *b, int s);
    /** Every matrix adopted: sizes scratch for max_batch tokens. */
    kvq_status (*ready)(kvq_backend *b, kvq_err *err);
    /** y (T, w->rows) = x (T, w->cols) · Wᵀ. */
    void (*matmul)(kvq_backend *b, float *y, const float *x, const kvq_mat *w, int T);
    void (*rmsnorm)(kvq_backend *b, float *y, const float *x, const float *w, int rows, int n, float eps);
    /** Splits fused rows (T, q_dim + 2 kv_dim) into q, k, v, adding bias (NULL: none). */
    void (*qkv_split)(kvq_backend *b, const float *qkv, const float *bias, float *q, float *k, float *v, int T,
                      int q_dim, int kv_dim);
    void (*rope)(kvq_backend *b, float *x, int T, int n_heads, int head_dim, int rot_dim, int pos,
                 const float *inv_freq);
    /** Appends k, v (T, kv_dim) at positions [pos, pos+T) of layer l's cache and writes
     *  out (T, q_dim): each token attends causally to [0, pos+t]. The CPU backend uses c
     *  (the model's kvq_kvcache, codecs included); a device backend its own cache. */
    kvq_status (*attention)(kvq_backend *b, kvq_kvcache *c, int l, const float *q, const float *k, const float *v,
                            float *out, int T, int pos, const kvq_attn_shape *s);
    /** Optional (NULL: kvq_model_fill_kv is refused): stores k, v (T, kv_dim; backend memory) at
     *  positions [pos, pos+T) of layer l's cache as attention's append does (the same encoders,
     *  window and side data), attending nothing; pos continues the layer's sequence or restarts it
     *  at 0; T <= max_batch. The CPU backend appends to c; a device backend to its own cache
     *  (KVQ_ERR_UNSUPPORTED, one line, for a cache it cannot fill). */
    kvq_status (*kv_append)(kvq_backend *b, kvq_kvcache *c, int l, const float *k, const float *v, int T, int pos,
                            kvq_err *err);
    void (*silu_mul)(kvq_backend *b, float *h, const float *gu, int T, int ffn);
    /** x += y over n floats. */
    void (*add)(kvq_backend *b, float *x, const float *y, size_t n);
    /** Optional (NULL: the model downloads the logits and reduces them on the host): queues
     *  out[r] (host memory) = the index of the largest of the n floats of row r of x (rows, n),
     *  the first of equals, or -1 when one is NaN; out is set once sync returns. */
    kvq_status (*argmax)(kvq_backend *b, const float *x, int rows, int n, int32_t *out, kvq_err *err);
    /** Optional (NULL: the caller downloads the logits and scores them on the host): kvq-verify's
     *  scores (kernels/verify_score.h, in its summation order) of rows ref[r], q[r] (rows × n
     *  floats each, this backend's memory: logits kept by kvq_model_forward_keep, the two models'
     *  on the same device) for target[r] (host, in [0, n)) into out[r] (host). Waits for them. */
    kvq_status (*vscore)(kvq_backend *b, const float *ref, const float *q, const int32_t *target, int rows, int n,
                         kvq_vscore *out, kvq_err *err);
    /** Waits for queued work; @return the first error an op met since the last sync. */
    kvq_status (*sync)(kvq_backend *b, kvq_err *err);
    /** Bytes of scratch the backend holds for products and for its own KV cache's appends and
     *  attention (beyond the model's activations). */
    size_t (*scratch_bytes)(const kvq_backend *b);
    /** Bytes of the backend's own KV cache (0: it uses the model's kvq_kvcache). */
    size_t (*kv_bytes)(const kvq_backend *b);
    /** Optional (device backends): the KV cache runs in the codec of c (a cache made by
     *  kvq_kvcache_codec_new: its per-layer states, window and boundary policy), held in the
     *  device's own layout from now on. c is only read during the call. KVQ_ERR_UNSUPPORTED
     *  (one line naming the codec and what is missing) when the device cannot run it. */
    kvq_status (*kv_codec)(kvq_backend *b, const kvq_kvcache *c, kvq_err *err);
} kvq_backend_ops;

struct kvq_backend {
    const kvq_backend_ops *ops;
    kvq_exec exec;  // how packed products run (int8 or exact activations)
    int prefill_decoded; // kvq_model_opts.prefill_decoded
    int n_threads;  // CPU threads (<= 0: OpenMP default)
    int max_batch;  // tokens per forward chunk
    int max_ctx;    // positions of a backend-held KV cache
    kvq_arch arch;
};

/** The CPU backend (kernels/cpu): dense fp32/bf16 and packed int8/exact products. */
kvq_status kvq_backend_cpu_new(const kvq_model_opts *o, const kvq_arch *a, kvq_backend **out, kvq_err *err);

/** The GPU backend (kernels/cuda): weights uploaded (packed stay packed), fp32 activations,
 *  an fp32 KV cache on the device. KVQ_ERR_UNSUPPORTED without a device or without CUDA. */
kvq_status kvq_backend_cuda_new(const kvq_model_opts *o, const kvq_arch *a, kvq_backend **out, kvq_err *err);

#endif
