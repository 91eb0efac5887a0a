// Matrix products straight from the PQ execution layout (kernels/pq_layout.h, "pqx"): per
// token, one table L_s[j][c] = ⟨C_s[j][c], x_j⟩ per stage (k·cols multiply-adds), then each
// output is a sum of m (or 2m) table entries picked by the row's indices; weights are never
// reconstructed. A plain reference and an AVX2 path (picked at run time), one-token and
// batched (8 tokens per table, tokens in the vector lanes), all bit-identical: every path
// computes the float sums in the one order stated below.
//
// Summation order (the "exact" semantics; there is no int8 mode for PQ):
//   L_s[j][c] = (…((C[j][0][c]·x[jw]) + C[j][1][c]·x[jw+1]) + …) + C[j][w−1][c]·x[jw+w−1],
//               each product rounded to float, then added (no fused multiply-add);
//   y[r] = (…((0 + L_1[0][i_1(r,0)]) + L_1[1][i_1(r,1)]) + …) + L_1[m−1][…]
//          then + L_2[0][i_2(r,0)] + … + L_2[m−1][…] (stage 2, RQO), left to right.
// The decoded model multiplies fl(c_1 + c_2) in the dense kernel's order instead, so the two
// differ by float rounding only (tests/test_pq.c bounds it).
#ifndef KVQ_KERNELS_PQ_H
#define KVQ_KERNELS_PQ_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/pq_layout.h"

#define KVQ_PQX_TB 8 // tokens per batched table (one per 32-bit lane of a 256-bit vector)

typedef enum { KVQ_PQX_ISA_AUTO = 0, KVQ_PQX_ISA_REF, KVQ_PQX_ISA_AVX2 } kvq_pqx_isa;
/** Which path AUTO resolves to on this CPU (AVX2+FMA cpuid bits: AVX2; else the reference). */
kvq_pqx_isa kvq_pqx_isa_best(void);
const char *kvq_pqx_isa_name(kvq_pqx_isa isa);

/** Floats of one token's tables (Σ_s m·k_s); the batched tables hold KVQ_PQX_TB times this. */
size_t kvq_pqx_lut_floats(const kvq_pqx *w);
/** One token's tables for subspaces [j0, j1) of every stage: x is w->cols floats. */
void kvq_pqx_lut(const kvq_pqx *w, const float *x, float *lut, int64_t j0, int64_t j1, kvq_pqx_isa isa);
/** y[r] for rows [r0, r1) (r0 a multiple of KVQ_PQX_RB) from one token's complete tables. */
void kvq_pqx_matvec_rows(const kvq_pqx *w, const float *lut, float *y, int64_t r0, int64_t r1, kvq_pqx_isa isa);

/** Batched tables of n_tok <= KVQ_PQX_TB tokens (x: n_tok rows of ldx floats) for subspaces
 *  [j0, j1), laid out (Σ_s m·k_s, KVQ_PQX_TB): entry e of token t at lutb[e·8 + t]. Each
 *  token's entries equal kvq_pqx_lut's bit for bit. */
void kvq_pqx_lutb(const kvq_pqx *w, const float *x, int n_tok, int64_t ldx, float *lutb, int64_t j0, int64_t j1,
                  kvq_pqx_isa isa);
/** y[t·ldy + r] for tokens t < n_tok and rows [r0, r1) (r0 a multiple of KVQ_PQX_RB) from
 *  complete batched tables: the same bits as the one-token product of each token. */
void kvq_pqx_gemm_rows(const kvq_pqx *w, const float *lutb, int n_tok, float *y, int64_t ldy, int64_t r0, int64_t r1,
                       kvq_pqx_isa isa);

/** Floats of scratch kvq_pqx_matmul needs for these blocks (batched tables of all of them). */
size_t kvq_pqx_scratch(const kvq_pqx *parts, int n_part);
/** One-token products with several threads build their tables in the team (1, default) or on
 *  the calling thread before the fork (0); the tables are the same. on < 0 only asks.
 *  @return the previous setting. */
int kvq_pqx_lut_team(int on);
/** Y (n_tok, ·) with row stride ldy: block p writes columns [row0[p], row0[p] + rows) of each
 *  token's output = x (n_tok, cols) times its Wᵀ. One OpenMP team per 8 tokens (tables split
 *  over the threads by subspace, then rows); n_threads <= 0: default. scratch holds
 *  kvq_pqx_scratch(parts, n_part) floats. */
void kvq_pqx_matmul(const kvq_pqx *parts, int n_part, const int *row0, const float *x, int n_tok, float *y,
                    int64_t ldy, float *scratch, kvq_pqx_isa isa, int n_threads);

/** Row r of W as w->cols floats, bit-identical to the codec's decoder (kvq_qet_decode). */
void kvq_pqx_row_f32(const kvq_pqx *w, int64_t r, float *out);
/** Prefill as the decoded model computes it: rows decoded in blocks of KVQ_PQX_DENSE_BLOCK and
 *  multiplied by the dense fp32 kernel. scratch holds kvq_pqx_dense_scratch(w, n_tok) floats. */
#define KVQ_PQX_DENSE_BLOCK 128
size_t kvq_pqx_dense_scratch(const kvq_pqx *w, int n_tok);
void kvq_pqx_matmul_dense(const kvq_pqx *w, const float *x, int n_tok, float *y, int64_t ldy, float *scratch,
                          int n_threads);

// ---- QET layouts (levels == 3; kernels/cpu/qetx.c). kvq_pqx_matmul, _row_f32, _scratch,
// _bytes, _free and _matmul_dense take them too and call these.
//
// Summation order of every QET path (reference, AVX2 one-token, AVX2 batched): per row and
// token two 8-lane accumulators a0, a1 (lane i = block b mod 8); for each group g of 8 blocks
// and leaf t = 0..7: a_{t mod 2}[i] = fmaf(X*[8g + i + t·D], x[8b + σ_b(t)], a_{t mod 2}[i]),
// b = 8g + i (one rounding per weight); then v = a0 + a1,
// y = ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). X*[p] = c_1 + c_2 rounded
// once, as the decoder computes it. The decoded model multiplies the same weights in the dense
// kernel's order: not the same bits; both within the float summation bound (tests/test_pq.c).

/** Floats of one matrix's expanded codebooks (Σ_s m·k_s·8): the scratch kvq_qetx_expand fills. */
size_t kvq_qetx_expand_floats(const kvq_pqx *w);
/** Expands slots [sl0, sl1) of every stage to float: cbf[off_s + ((sl·k_s + c)·8 + q)] with
 *  slot sl = 8g + t the subspace g + t·groups (values as kvq_qetx_cb, bit for bit). */
void kvq_qetx_expand(const kvq_pqx *w, float *cbf, int64_t sl0, int64_t sl1, kvq_pqx_isa isa);
/** y[t·ldy + r] for tokens t < n_tok (x: rows of ldx floats) and rows [r0, r1), from complete
 *  expanded codebooks; every path and token count gives the same bits (for tests and
 *  benchmarks: the AVX2 path allocates its 8·cols floats of transposed activations). */
void kvq_qetx_gemm_rows(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y,
                        int64_t ldy, int64_t r0, int64_t r1, kvq_pqx_isa isa);
/** Floats of scratch kvq_qetx_matmul needs: the blocks' expanded codebooks and 8 tokens'
 *  transposed activations (8·cols). */
size_t kvq_qetx_scratch(const kvq_pqx *parts, int n_part);
/** kvq_pqx_matmul for QET blocks: the team expands the codebooks (by slot), then, 8 tokens at a
 *  time, transposes the activations (by group) and splits the rows. */
void kvq_qetx_matmul(const kvq_pqx *parts, int n_part, const int *row0, const float *x, int n_tok, float *y,
                     int64_t ldy, float *scratch, kvq_pqx_isa isa, int n_threads);
/** Row r of W, bit-identical to the codec's decoder (kvq_qet_decode). */
void kvq_qetx_row_f32(const kvq_pqx *w, int64_t r, float *out);
size_t kvq_qetx_bytes(const kvq_pqx *w);

// ---- general QET layouts (qetg: any swap-tree depth and width; kernels/cpu/qetg.c).
// kvq_pqx_matmul, _row_f32, _scratch, _bytes, _free and _matmul_dense take them and call these.
// Summation order: see qetg.c's opening comment.

#define KVQ_QETG_MAX_THREADS 64 // the row buffers the scratch holds (the driver uses at most this many)
/** Floats of one matrix's expanded codebooks (Σ_s m·k_s·w). */
size_t kvq_qetg_expand_floats(const kvq_pqx *w);
/** Expands subspaces [j0, j1) of every stage to float: cbf[off_s + (j·k_s + c)·w + q] (values as
 *  kvq_qetg_cb, bit for bit). */
void kvq_qetg_expand(const kvq_pqx *w, float *cbf, int64_t j0, int64_t j1);
/** Floats of one row buffer (the row, its swap buffer, its indices): 2·cols + 2·m. */
size_t kvq_qetg_buf_floats(const kvq_pqx *w);
/** y[t·ldy + r] for tokens t < n_tok and rows [r0, r1) from complete expanded codebooks; buf holds
 *  kvq_qetg_buf_floats floats. Every path gives the same bits. */
void kvq_qetg_rows(const kvq_pqx *w, const float *cbf, const float *x, int n_tok, int64_t ldx, float *y, int64_t ldy,
                   int64_t r0, int64_t r1, float *buf, kvq_pqx_isa isa);
/** Floats of scratch kvq_qetg_matmul needs: the blocks' expanded codebooks and a row buffer per
 *  thread (KVQ_QETG_MAX_THREADS · kvq_qetg_buf_floats). */
size_t kvq_qetg_scratch(const kvq_pqx *parts, int n_part);
/** kvq_pqx_matmul for general QET blocks: the team expands the codebooks (by subspace), then
 *  splits the rows; each row is rebuilt once and multiplied by every token. */
void kvq_qetg_matmul(const kvq_pqx *parts, int n_part, const int *row0, const float *x, int n_tok, float *y,
                     int64_t ldy, float *scratch, kvq_pqx_isa isa, int n_threads);
/** Row r of W, bit-identical to the codec's decoder (kvq_qet_decode): each column's X* position
 *  by kvq_qetg_pos, no buffer. */
void kvq_qetg_row_f32(const kvq_pqx *w, int64_t r, float *out);
size_t kvq_qetg_bytes(const kvq_pqx *w);

/** Re-lays a PQ layout's (levels 0) byte indices (and, with wide, uint16 ones) lane-packed
 *  (kernels/pq_layout.h), one 32-bit word a row and group, in every stage where that holds fewer
 *  bytes: k = 17..32 at 5.33 bits a held index instead of 8, 33..64 at 6.4, 2..16 at 2-4 bits;
 *  wide: k = 257..1024 at 10.67 instead of 16. Same indices, same products bit for bit. Indices
 *  must be below k (the packer checked them). @return 0, or -1 when out of memory (w unchanged). */
int kvq_pqx_pack_lanes(kvq_pqx *w, int wide);
/** Splits every uint16-index stage of a PQ layout (levels 0) with k = 257..4096 into low bytes
 *  and packed high bits (kernels/pq_layout.h, hbits / hi): ⌈log2 k⌉ bits a held index instead of
 *  16. Same indices, same products bit for bit. @return 0, or -1 when out of memory (the stages
 *  split before the failing one stay split, a valid layout). */
int kvq_pqx_split_wide(kvq_pqx *w);
/** Holds a PQ layout's CQO codebook codes (cb_type CQO, cb_bits = B in 1..15, codes below 2^B)
 *  at B bits each: low bytes + packed high bits (kernels/pq_layout.h, cbq_bits / cb_hi) instead
 *  of uint16. Same values, same tables and products bit for bit. Other layouts: unchanged.
 *  @return 0, or -1 when out of memory (w unchanged). */
int kvq_pqx_split_codes(kvq_pqx *w);
/** Bytes of stage s's hi array (split stages; 0 otherwise), padding included. */
size_t kvq_pqx_hi_bytes(const kvq_pqx *w, int s);
/** Bytes held by the layout's arrays (what a loaded model keeps for this tensor). */
size_t kvq_pqx_bytes(const kvq_pqx *w);
/** Of those, stage s's index arrays (padding rows included; a split stage's low bytes + hi), its
 *  codebook array, and the bits one held index takes (pq: 8, 16, lane-packed or split b; qet: 4, 8 or 16). */
size_t kvq_pqx_idx_bytes(const kvq_pqx *w, int s);
size_t kvq_pqx_cb_bytes(const kvq_pqx *w, int s);
int kvq_pqx_idx_bits(const kvq_pqx *w, int s);
/** Frees the arrays (from kvq_hqx_alloc); NULL members are fine; *w is zeroed. */
void kvq_pqx_free(kvq_pqx *w);

#endif
