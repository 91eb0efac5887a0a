// GPU products from the hqx execution layout (kernels/hq_layout.h): the same packed tensors
// the CPU runtime holds, uploaded once; y = W·x with the activation rotated once per input
// (one block per tile column: sign flip + in-shared-memory Walsh–Hadamard, the CPU's butterfly
// order) and one warp per output row reading 16 codes per lane per step (coalesced 256-byte
// segments of nibbles). Plain C header: C callers and kernels/cuda/no_cuda.c share it.
#ifndef KVQ_CUDA_HQX_H
#define KVQ_CUDA_HQX_H

#include <stddef.h>

#include "formats/error.h"
#include "kernels/hq_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvq_cuda_hqx kvq_cuda_hqx; // a packed tensor resident on the device

/** Copies w's arrays to the device (w stays the caller's). @return KVQ_OK, KVQ_ERR_NOMEM /
 *  KVQ_ERR_IO naming the CUDA call, KVQ_ERR_UNSUPPORTED without a device. */
kvq_status kvq_cuda_hqx_upload(const kvq_hqx *w, kvq_cuda_hqx **out, kvq_err *err);
void kvq_cuda_hqx_free(kvq_cuda_hqx *t); // NULL is a no-op
/** Device bytes of the packed tensor (the arrays a product reads): kvq_hqx_gpu_bytes
 *  (kernels/cpu/hqx_esc16.h) of the form uploaded. */
size_t kvq_cuda_hqx_bytes(const kvq_cuda_hqx *t);
/** Escapes of tensors uploaded from now on: 1 in 16 bits where kvq_hqx_esc16_build takes them
 *  (kernels/cpu/hqx_esc16.h: 16-bit entries and per-row segment starts; issue 12: 4096×14336
 *  E8 4.0 at width 4 holds 2 bytes less per escape), 2 in 16 bits only in tensors whose rows are
 *  one segment (cols_p ≤ KVQ_HQX_ESC16_SEG: no segment starts), 0 the packer's 32-bit entries; -1:
 *  the environment's (KVQ_CUDA_ESC16=0|1|2), else 0 — the 8B shape at width 4 decodes 0.83–0.86× as
 *  fast with 1 (H100, session 20; docs/RESULTS.md). The same bits either way (kvq_hqx_esc_at). */
void kvq_cuda_hqx_set_esc16(int mode);
/** Whether t holds its escapes in the 16-bit form (tests). */
int kvq_cuda_hqx_esc16(const kvq_cuda_hqx *t);
/** Launches y = W·x on the default stream: d_x (cols floats) and d_y (rows floats) are
 *  device pointers. int8 = 0: float activations (the CPU exact mode within rounding);
 *  1: int8 activations per tile and dp4a (the CPU int8 mode within rounding). */
kvq_status kvq_cuda_hqx_matvec(kvq_cuda_hqx *t, const float *d_x, float *d_y, int int8, kvq_err *err);
/** Y (n_tok, ·) = X (n_tok, cols) · Wᵀ with int8 activations prepared inside the product
 *  (kernels/cuda/hqx_fused.cu: no rotation kernel; one launch per kvq_cuda_hqx_fused_tokens
 *  tokens): rows [0, rows) of each output row, row stride ldy; accumulate = 1 adds the
 *  product to Y. Device pointers, the library's stream. Results: the CPU int8 mode's within
 *  float rounding. */
kvq_status kvq_cuda_hqx_matmul(kvq_cuda_hqx *t, const float *d_x, int n_tok, float *d_y, int64_t ldy, int accumulate,
                               kvq_err *err);
/** The same for up to 3 tensors of equal cols read in one launch (fused q/k/v, gate/up):
 *  part p writes rows row0[p].. of Y. */
kvq_status kvq_cuda_hqx_matmul_parts(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                                     float *d_y, int64_t ldy, int accumulate, kvq_err *err);
/** What the int8 products' activation preparation reads (kvq_cuda_hqx_matmul_parts_in): the
 *  input rows as they are, or the op that would have produced them, fused into the
 *  preparation so that it needs no kernel of its own (each preparing warp reads its token's
 *  whole row; the results equal the separate op's within float rounding):
 *  RMSNORM: x (n_tok, cols) normalized as kvq_cuda_rmsnorm(·, x, w, n_tok, cols, eps);
 *  SILU_MUL: x (n_tok, 2·cols) = gate | up rows, silu(gate)·up as kvq_cuda_silu_mul.
 *  y: NULL, or where the transformed rows (n_tok, cols) are also written (the separate op's
 *  output, so nothing reading it later changes). */
typedef enum { KVQ_CUDA_XIN_NONE = 0, KVQ_CUDA_XIN_RMSNORM, KVQ_CUDA_XIN_SILU_MUL, KVQ_CUDA_XIN_PREPARED } kvq_cuda_xin_kind;
/* PREPARED: one token, one part, the activation already in the part's scratch, written by the
 * kernel just before on the stream (kvq_cuda_hqx_attend_prep): no preparation kernel; x unread. */
typedef struct {
    kvq_cuda_xin_kind kind;
    const float *w; // RMSNORM: the norm's weights (cols)
    float eps;
    float *y;
} kvq_cuda_xin;
/** kvq_cuda_hqx_matmul_parts with the activation transformed on the way in (xin NULL: none). */
kvq_status kvq_cuda_hqx_matmul_parts_in(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x,
                                        const kvq_cuda_xin *xin, int n_tok, float *d_y, int64_t ldy, int accumulate,
                                        kvq_err *err);
/** Decode attention (kvq_cuda_attend's split kernel, one token) whose merging blocks also
 *  prepare its output rows as the int8 activation of o's one-token product (each KV head's
 *  block the tiles of its query heads), so that the product that follows runs with
 *  KVQ_CUDA_XIN_PREPARED and no preparation kernel; the same bits as attend + preparation.
 *  KVQ_ERR_UNSUPPORTED when kvq_cuda_hqx_attend_can_prep says no (the caller then attends
 *  as usual). Arguments as kvq_cuda_attend (ops.h) with T = 1. */
int kvq_cuda_hqx_attend_can_prep(const kvq_cuda_hqx *o, int n_heads, int n_kv_heads, int head_dim);
kvq_status kvq_cuda_hqx_attend_prep(const float *q, const float *kc, const float *vc, float *out, int pos, const int *d_pos,
                                    int n_heads, int n_kv_heads, int head_dim, int max_ctx, float scale,
                                    kvq_cuda_hqx *o, kvq_err *err);
/** Tensor-core product for many tokens (kernels/cuda/hqx_tc.cu): each part's weights decoded
 *  once per call into bf16 rotated-domain values (row blocks of at most 64 Mi values in a
 *  shared scratch), the activations rotated and rounded to bf16, then cuBLAS (bf16 operands,
 *  fp32 accumulation): Y rows row0[p].. (+)= X · W_pᵀ, X (n_tok, cols). Results: the exact mode's
 *  within bf16 rounding of both operands (~1e-3 relative). KVQ_ERR_UNSUPPORTED without cuBLAS
 *  (kvq_cuda_tc_available). Device pointers, the library's stream; not for graph capture. */
kvq_status kvq_cuda_hqx_matmul_tc(kvq_cuda_hqx *const *t, int n, const int64_t *row0, const float *d_x, int n_tok,
                                  float *d_y, int64_t ldy, int accumulate, kvq_err *err);
/** Rows [r0, r0 + nr) of t decoded into d_out (nr, cols_p) as rotated-domain values
 *  scale·c (RTN: q·scale + zero), escapes included: bf16 = 1 bf16, else fp32 (what the
 *  tensor-core product multiplies; the tests check them against the reference decoder). */
/** Tests: the tensor-core product's row block in decoded values (0: the default, 64 Mi). */
void kvq_cuda_hqx_set_tc_block(int64_t values);
kvq_status kvq_cuda_hqx_decode_rot(kvq_cuda_hqx *t, int64_t r0, int64_t nr, void *d_out, int bf16, kvq_err *err);
/** Tokens one fused launch takes for t (its shared-memory budget), 0 when none fits. */
int kvq_cuda_hqx_fused_tokens(const kvq_cuda_hqx *t);
/** Raises the fused product's shared-memory limit (once; before capturing a graph). */
kvq_status kvq_cuda_hqx_fused_init(kvq_err *err);
/** Benchmark knobs of the one-token int8 product (hqx_gemv1.cu): rows per warp (1, 2, 4; 0:
 *  the default, 1) and whether it is launched as a programmatic dependent of the activation
 *  preparation (1, the default; KVQ_CUDA_PDL=0 in the environment turns it off). Not
 *  thread-safe: set before launching. */
void kvq_cuda_hqx_set_decode(int rows_per_warp);
/** Tests: 1 runs every one-token product through the variant that decides lattice, scales and
 *  zero points at run time, instead of the E8 and RTN specializations (the same bits). */
void kvq_cuda_hqx_set_decode_general(int on);
/** Tests: the one-token product's persistent variant (hqx_gemv1.cu) with a ring of 2, 3 or 4
 *  steps, or 0: the per-warp kernel; −1: the default (KVQ_CUDA_G1P=0|2|3|4, else 2). */
void kvq_cuda_hqx_set_persist(int depth);
/** Products of 2..8 tokens: 1 (default; KVQ_CUDA_G1N=0 sets 0) the persistent one-token kernel
 *  for all of them at once where it takes the tensor (E8/RTN, whole steps: each token's bits
 *  are its one-token product's), 0 hqx_fused.cu's batched kernel; -1: the environment's. */
void kvq_cuda_hqx_set_tokens(int on);
/** Products of 2..8 tokens on E8 tensors: 1 (default; KVQ_CUDA_G1M=0 sets 0) on tensor cores
 *  (hqx_mma.cu: int8 mma on the codes, each token's bits its one-token product's), 0 the
 *  persistent one-token kernel's several-token loop; -1: the environment's. */
void kvq_cuda_hqx_set_mma(int on);
void kvq_cuda_hqx_set_pdl(int on);
/** The activation preparation kernel (hqx_fused.cu; the same bits whichever): 0 hqx_prep_i8; 1 hqx_prep_i8h, its loads hoisted (the norm's weights first, then the tile's
 *  inputs with the row in one round trip, an RMSNorm row read once a block into shared memory);
 *  2 as 1, launched as a programmatic dependent of the kernel before it (not with
 *  KVQ_CUDA_PDL=0), which then must not write the norm's weights xin->w; 3 as 1 with every warp
 *  reading the row itself; -1: the environment's (KVQ_CUDA_PREP=0|1|2|3), else 2 (the default since
 *  the H100 A/B of session 15: 8B decode 323.5 against 310.5 tok/s for 0). */
void kvq_cuda_hqx_set_prep(int mode);
/** 1: the persistent one-token product lets the kernel after it launch at its start
 *  (griddepcontrol.launch_dependents; that kernel's blocks take slots as this grid's free, and it
 *  reads the product's output after its griddepcontrol.wait); 0 not; -1: the environment's
 *  (KVQ_CUDA_G1TRIG=0), else 1. The same bits either way. With kvq_cuda_attn_set_pdl the 8B
 *  shape's decode went 322.7 -> 330.6 tok/s (medians of 4 alternated runs, H100, session 16;
 *  either alone: no gain). */
void kvq_cuda_hqx_set_trig(int on);
/** 1: the persistent one-token product (hqx_gemv1.cu, every instance: fold or not, 1..8 tokens,
 *  E8 and RTN) fetches each row's first escapes (64 a row, 32 in the fold and with several
 *  tokens) during the row's last steps instead of at its end; 2: no prefetch, the row end's
 *  escape loads in batches of 4 rounds (widths 4 and 5); 0 the row end's chain a round; 3: 2 at
 *  width 4 and 0 at the wider widths; -1: the environment's (KVQ_CUDA_ESC_PF=0, 1 or 2), else 3.
 *  1 is slower on the H100 (session 19 call D); 2 at width 4 decodes the 8B shape 1.056x faster than
 *  0 (session 20 call A; docs/RESULTS.md). The same bits in every mode. */
void kvq_cuda_hqx_set_esc_pf(int on);
/** The one-token product of E8 width-4 and -5 parts whose rows are an even number of 1024-column steps
 *  (one token, the ring of 2, escapes batched or chained): 1 by the lean kernel hqx_gemv1s_k
 *  (hqx_gemv1.cu: per-row pointers, a row's steps in pairs, ~half the instructions a step), 0 by
 *  hqx_gemv1p_k; -1: the environment's (KVQ_CUDA_G1S=0), else 1. The same bits either way. */
void kvq_cuda_hqx_set_lean(int on);
/** Rows each warp of a lean launch prefetches into L2 before it waits for the kernel before it
 *  (and, in the fold, prepares its activation): 0..8; -1: the environment's (KVQ_CUDA_G1PF=n),
 *  else 0. A hint: the same bits. */
void kvq_cuda_hqx_set_lean_pf(int rows);
/** Lean one-token launches (or captures) in this process (tests). */
long kvq_cuda_hqx_lean_launches(void);
/** The lean kernel's instances with the row's step count known at compile time (rows of 4096
 *  columns: the whole row unrolled, loads addressed by constants; taken where ptxas kept the instance
 *  to registers): 1 (default), 0 the run-time count; -1: the environment's (KVQ_CUDA_G1SC=0), else 1.
 *  The same bits either way. */
void kvq_cuda_hqx_set_lean_sc(int on);
/** Lean launches that took a compile-time step count in this process (tests). */
long kvq_cuda_hqx_lean_sc_launches(void);
/** 1: kvq_cuda_hqx_attend_prep's split attention is a programmatic dependent of the kernel before
 *  it (the q/k/v product), the rotation's cos/sin and each warp's first cache row (positions
 *  below the token's) loaded before griddepcontrol.wait; 0 a plain launch; -1: the environment's
 *  (KVQ_CUDA_ATTN_PDL=0), else 1. The same bits either way. */
void kvq_cuda_attn_set_pdl(int on);
/** The one-token products of RMSNorm inputs (a decode step's q/k/v and gate/up products)
 *  prepare their activation themselves, in each block's shared memory, instead of after a
 *  preparation kernel (hqx_gemv1.cu, kernels/cuda/hqx_lay.h; the same bits): 1 on, 0 off, >= 2
 *  on with at most max(mode, 3) blocks (tests: several rows a warp on small tensors); -1: the
 *  environment's (KVQ_CUDA_FOLD=0 off), else 1 (default since session 17's H100 A/B: 8B shape
 *  E8 4.0 decode 336.7 against 331.3 tok/s, medians of 3 alternated rounds).
 *  Taken where the persistent one-token kernel with a ring of 2 takes every part (E8 / RTN,
 *  whole steps of 1024 columns), tiles 64..256, rows of cols % 4 == 0 floats 16-byte aligned,
 *  up to kvq_hqx_fold_smem's budget (8192 columns); elsewhere the preparation kernel runs. */
void kvq_cuda_hqx_set_fold(int mode);
/** Folded one-token products launched (or captured into a graph) in this process (tests). */
long kvq_cuda_hqx_fold_launches(void);
/** Host convenience: copies x in, runs, copies y out, synchronizes. */
kvq_status kvq_cuda_hqx_matvec_host(kvq_cuda_hqx *t, const float *h_x, float *h_y, int int8, kvq_err *err);
/** Median time in ms of reps launches of the product alone (rotation included), by CUDA
 *  events, on random activations in device buffers the call allocates. int8: 0 float, 1 int8
 *  (kvq_cuda_hqx_matvec), 1 + n: the batched int8 product on n tokens (kvq_cuda_hqx_matmul). */
kvq_status kvq_cuda_hqx_time(kvq_cuda_hqx *t, int reps, int int8, double *ms, kvq_err *err);

/** Mean time in ms of one one-token int8 product when reps of them run back to back on the
 *  library's stream, cycling over the n tensors t (equal columns; several copies keep the
 *  weights from being served by L2): the throughput a decode step's stream of kernels sees,
 *  without the host's launch latency. Median of 5 such runs. prep = 0: the product kernel
 *  alone (the activation preparation runs once, in the warm-up); 1: with its preparation; 2:
 *  with an RMSNorm input (the preparation kernel's, or the product's own under
 *  kvq_cuda_hqx_set_fold). */
kvq_status kvq_cuda_hqx_time_stream(kvq_cuda_hqx *const *t, int n, int reps, int prep, double *ms, kvq_err *err);

#ifdef __cplusplus
}
#endif
#endif
