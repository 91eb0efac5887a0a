// The GPU forward pass's operations (one per kernels/cuda/*.cu), as extern "C" launchers on
// the default stream: every pointer is device memory, activations are fp32 row-major
// (tokens × width), results are the CPU kernels' (kernels/cpu) within float rounding. Each
// launcher returns KVQ_OK or the launch error naming the kernel. Plain C header, shared by
// the GPU backend (libconv/runtime/backend_cuda.c), the tests and kernels/cuda/no_cuda.c.
#ifndef KVQ_CUDA_OPS_H
#define KVQ_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A decode step of several sequences (kvq_model_forward_seqs): token t of the chunk is the
 *  next token of sequence seq[t], at position pos[t] (both device ints, T of each), and the
 *  cache of sequence s sits stride floats after sequence s − 1's (the cache pointer a
 *  launcher is given is sequence 0's). A NULL kvq_cuda_seqs: one sequence, token t at
 *  position pos + t. Positions are not checked against the cache here: the caller does. */
typedef struct {
    const int *seq, *pos;
    int64_t stride;
} kvq_cuda_seqs;

/** y[r] = w ⊙ x[r] / sqrt(mean(x[r]²) + eps) for rows r of n floats (y may be x). */
kvq_status kvq_cuda_rmsnorm(float *y, const float *x, const float *w, int rows, int n, float eps, kvq_err *err);
/** Rotates the first rot_dim coordinates of each head of x (T, n_heads, head_dim) in
 *  halves (x_i, x_{i+rot/2}) by angle (pos + t)·inv_freq[i], cos/sin of the fp32 angle in
 *  double, as kvq_rope. d_pos: NULL, or a device int the kernel reads pos from instead (a
 *  captured graph replayed at later positions; likewise for attention). */
kvq_status kvq_cuda_rope(float *x, int T, int n_heads, int head_dim, int rot_dim, int pos, const int *d_pos,
                         const kvq_cuda_seqs *sq, const float *inv_freq, kvq_err *err);
/** Splits fused rows (T, q_dim + 2·kv_dim) into q, k, v, adding bias (NULL: none). */
kvq_status kvq_cuda_qkv_split(const float *qkv, const float *bias, float *q, float *k, float *v, int T, int q_dim,
                              int kv_dim, kvq_err *err);
/** h (T, ffn) = silu(gate)·up over fused rows gu (T, 2·ffn) = (gate | up). */
kvq_status kvq_cuda_silu_mul(float *h, const float *gu, int T, int ffn, kvq_err *err);
/** x += y over n floats. */
kvq_status kvq_cuda_add(float *x, const float *y, size_t n, kvq_err *err);

/** d_out[r] (device ints) = the index of the largest of the n floats of row r of x (rows, n),
 *  the first of equals; -1 when one is NaN (the host's kvq_sample_argmax and NaN check);
 *  rows <= KVQ_CUDA_ARGMAX_ROWS. */
#define KVQ_CUDA_ARGMAX_ROWS 64
kvq_status kvq_cuda_argmax(const float *x, int rows, int n, int *d_out, kvq_err *err);

/** y (T, rows) = x (T, cols) · Wᵀ for a dense row-major W (rows, cols), bf16 (bf16 = 1) or
 *  fp32 values, fp32 accumulation; W read once per 8 tokens; accumulate = 1: y += the product. */
kvq_status kvq_cuda_dense_matmul(const void *w, int bf16, const float *x, float *y, int T, int64_t cols, int64_t rows,
                                 int accumulate, kvq_err *err);

/** Which kernel a one-token bf16 product with vector rows takes: 0 dense_k (8 tokens a pass), 1..KVQ_CUDA_DENSE_VARIANTS
 *  the one-token kernel with more bytes in flight (1: 4 loads a row, 2: 2 rows × 2 — the default —, 3: 2 rows × 4,
 *  4: 8 loads, 5: 4 rows × 2); the same bits in every case. Anything else (-1): the default. */
#define KVQ_CUDA_DENSE_VARIANTS 5
void kvq_cuda_dense_set_variant(int v);

/** Tensor-core products (kernels/cuda/gemm_tc.cu): cuBLAS, opened at run time (dlopen of
 *  libcublas.so.13/.12, or the path in KVQ_CUBLAS). @return 1 when usable; why: what was
 *  found or why not (one line). */
int kvq_cuda_tc_available(char *why, size_t n);
/** Y (T, ·) with row stride ldy, columns [0, rows) (+)= X (T, k) · Wᵀ: W (rows, k) bf16 with
 *  row stride ldw, X (T, k) bf16 with row stride ldx, fp32 accumulation and output. */
kvq_status kvq_cuda_gemm_bf16(const void *w, int64_t ldw, const void *x, int64_t ldx, float *y, int64_t ldy, int T,
                              int64_t rows, int64_t k, int accumulate, kvq_err *err);
/** xb (T, ld) = x (T, n) rounded to bf16 (round to nearest even), zero in columns [n, ld). */
kvq_status kvq_cuda_to_bf16(const float *x, void *xb, int T, int64_t n, int64_t ld, kvq_err *err);
/** kvq_cuda_dense_matmul on tensor cores for bf16 W: x rounded to bf16, then
 *  kvq_cuda_gemm_bf16 (y row stride ldy). */
kvq_status kvq_cuda_dense_matmul_tc(const void *w, const float *x, float *y, int T, int64_t cols, int64_t rows,
                                    int64_t ldy, int accumulate, kvq_err *err);
/** Scratch i (0: activations, 1: decoded weights) of at least bytes, grown on demand (the
 *  old one freed: synchronizes the device); shared by the tensor-core products. */
kvq_status kvq_cuda_tc_scratch(int which, size_t bytes, void **out, kvq_err *err);
/** Bytes the tensor-core scratch holds now. */
size_t kvq_cuda_tc_scratch_bytes(void);

/** Attention with an fp32 KV cache per layer, kc/vc (n_kv_heads, max_ctx, head_dim):
 *  stores k, v (T, n_kv_heads·head_dim) at positions [pos, pos+T), then out (T, n_heads·
 *  head_dim) = softmax(q·Kᵀ·scale)·V with token t attending to [0, pos+t] (GQA: query head
 *  h reads KV head h / (n_heads / n_kv_heads)). */
kvq_status kvq_cuda_attention(const float *q, const float *k, const float *v, float *kc, float *vc, float *out, int T,
                              int pos, const int *d_pos, const kvq_cuda_seqs *sq, int n_heads, int n_kv_heads, int head_dim,
                              int max_ctx, float scale, kvq_err *err);
/** The attention inputs (kvq_cuda_attn_in's arguments) that the next one-token split attend
 *  (kvq_cuda_attend with T = 1, kvq_cuda_hqx_attend_prep) computes itself instead of reading q
 *  and the cache's new row: each KV head's blocks compute their query heads from qkv, and the
 *  block whose split holds the token's position writes k and v into the cache there — the
 *  same bits as kvq_cuda_attn_in then the attend, one kernel fewer. An attend that cannot
 *  fuse them (T > 1, not the split kernel) launches kvq_cuda_attn_in first. NULL disarms. */
typedef struct {
    const float *qkv, *bias, *q_norm, *k_norm, *inv_freq;
    float eps;
    int rot_dim;
} kvq_cuda_ain;
void kvq_cuda_attend_set_inputs(const kvq_cuda_ain *in);
/** kvq_cuda_attention's second half: attends over positions already in the cache. A chunk of
 *  T >= 16 tokens of one sequence (no d_pos, no sq; 1, 2, 4 or 8 query heads a KV head,
 *  head_dim 64 or 128) that reaches position 2048 takes the tiled prefill kernel (each K/V row
 *  loaded once for 32 query rows; below that the split kernel, whose prefill rows have the bits
 *  of one-token steps). kvq_cuda_attend_set_tile: 1 every such chunk, 0 never, 2 from position
 *  2048, -1 the environment's choice (KVQ_CUDA_ATT_TILE=1 or 0, else 2). */
void kvq_cuda_attend_set_tile(int on);
/** The split kernel's splits of a token's n_ctx positions (issue 12, session 19):
 *  clamp(ceil(n_ctx / cmin), 1, 16), chunks of ceil(n_ctx / splits) positions; cmin 0: always
 *  16 (the bits of the kernel before). A function of n_ctx alone, so a prefill row has the bits
 *  of the same token's one-token step. kvq_cuda_attend_set_cmin: cmin (>= 0), -1 the
 *  environment's choice (KVQ_CUDA_ATTN_CMIN, default 0: 16 splits; 64 measured slower, session 19), read at the next launch; a captured
 *  graph keeps the value it was captured with. kvq_cuda_attend_splits: the splits of n_ctx
 *  under the current setting (no device needed). */
void kvq_cuda_attend_set_cmin(int cmin);
int kvq_cuda_attend_splits(int n_ctx);
kvq_status kvq_cuda_attend(const float *q, const float *kc, const float *vc, float *out, int T, int pos, const int *d_pos,
                           const kvq_cuda_seqs *sq, int n_heads, int n_kv_heads, int head_dim, int max_ctx, float scale, kvq_err *err);
/** The attention block's inputs in one kernel, from the fused rows qkv (T, q_dim + 2·kv_dim):
 *  kvq_cuda_qkv_split (bias: NULL or q_dim + 2·kv_dim floats), the per-head RMSNorm of q and k
 *  (q_norm/k_norm: NULL or head_dim weights, eps), kvq_cuda_rope on q and k (rot_dim, pos or
 *  d_pos), then q (T, n_heads·head_dim) written and k, v stored into one layer's cache kc/vc
 *  (n_kv_heads, max_ctx, head_dim) at positions [pos, pos+T) — what kvq_cuda_attention's store
 *  would have written. Same formulas as the separate kernels. */
kvq_status kvq_cuda_attn_in(const float *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps, float *q,
                            float *kc, float *vc, int T, int pos, const int *d_pos, const kvq_cuda_seqs *sq, int n_heads,
                            int n_kv_heads, int head_dim, int rot_dim, const float *inv_freq, int max_ctx, kvq_err *err);
/** kvq_cuda_attn_in writing k and v as rows (T, n_kv_heads·head_dim), as kvq_cuda_qkv_split
 *  and the ropes would have left them, instead of into a cache (for a KV codec cache, which
 *  appends them itself); d_pos as there; sq (NULL: one sequence): token t rotated at sq->pos[t]
 *  (a step of several sequences; seq and stride unused: rows have no cache), each row the bits
 *  of a one-token call at that position. */
kvq_status kvq_cuda_attn_in_rows(const float *qkv, const float *bias, const float *q_norm, const float *k_norm, float eps,
                                 float *q, float *k, float *v, int T, int pos, const int *d_pos, const kvq_cuda_seqs *sq,
                                 int n_heads, int n_kv_heads, int head_dim, int rot_dim, const float *inv_freq, kvq_err *err);
/** Largest max_ctx kvq_cuda_attention supports for the shape: the split and tiled kernels (head_dim
 *  a multiple of 32 up to 256, at most 8 query heads a KV head) keep no per-position state on
 *  chip, so any context the device memory holds (up to 2^30 positions); otherwise the one-block
 *  kernel, whose scores live in shared memory (~56k positions at head_dim 128). */
int kvq_cuda_attention_max_ctx(int n_heads, int n_kv_heads, int head_dim);
/** Prepares the attention kernels for the shape and contexts up to max_ctx (their shared
 *  memory and scratch: call before capturing a graph). */
kvq_status kvq_cuda_attention_init(int n_heads, int n_kv_heads, int head_dim, int max_ctx, kvq_err *err);

// ---- the stream and CUDA graphs (kernels/cuda/graph.cu). A decode step is ~20 launches per
// layer; captured once as a graph and replayed (positions read from device memory), the
// launch overhead is paid once per step instead of per kernel.
/** Creates the library's stream (once per process); every launcher above and the hqx
 *  products use it from then on. */
kvq_status kvq_cuda_stream_init(kvq_err *err);
/** Copies on the stream (ordered with the launches); to_device 1: host to device. */
kvq_status kvq_cuda_copy_async(void *dst, const void *src, size_t size, int to_device, kvq_err *err);
/** Waits for the stream. */
kvq_status kvq_cuda_stream_sync(kvq_err *err);
/** Starts capturing the stream's launches (they are recorded, not run). */
kvq_status kvq_cuda_capture_begin(kvq_err *err);
/** Ends the capture; *graph: an executable graph (free with kvq_cuda_graph_free), or NULL
 *  when abort is set (a launch failed while capturing). */
kvq_status kvq_cuda_capture_end(int abort, void **graph, kvq_err *err);
kvq_status kvq_cuda_graph_launch(void *graph, kvq_err *err);
/** Graphs launched by kvq_cuda_graph_launch in this process (tests: whether steps replayed). */
long kvq_cuda_graph_launches(void);
void kvq_cuda_graph_free(void *graph);
/** Timeline marks (KVQ_CUDA_TIMELINE): records timing event i of graph variant 0/1 on the
 *  stream (a graph node while capturing); _elapsed: ms between marks i − 1 and i after a replay. */
kvq_status kvq_cuda_tl_mark(int variant, int i, kvq_err *err);
kvq_status kvq_cuda_tl_elapsed(int variant, int i, float *ms, kvq_err *err);

#ifdef __cplusplus
}
#endif
#endif
