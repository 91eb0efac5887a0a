// Matrix products straight from HyperQuant's execution layout (kernels/hq_layout.h, "hqx"):
// the activation is rotated once per input (xr = g ⊙ H·D·x per tile), and each output is
// Σ_tiles scale · ⟨c, xr⟩ with the lattice codes c read from packed nibbles, so weights are
// never reconstructed. Two modes: int8 (xr quantized per tile to int8, integer dot products
// with VNNI / AVX2 maddubs) and exact (float dot products with the unquantized xr).
#ifndef KVQ_KERNELS_HQX_H
#define KVQ_KERNELS_HQX_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/hq_layout.h"

typedef enum { KVQ_HQX_INT8 = 0, KVQ_HQX_EXACT = 1 } kvq_hqx_mode;
/** Instruction-set paths; KVQ_HQX_ISA_AUTO picks the best one the CPU has (cpuid). */
typedef enum { KVQ_HQX_ISA_AUTO = 0, KVQ_HQX_ISA_REF, KVQ_HQX_ISA_AVX2, KVQ_HQX_ISA_VNNI } kvq_hqx_isa;

/** The prepared activation of one token for one tensor (its tile size and signs). */
typedef struct {
    float *xr;      // (cols_p) rotated, √3-folded activation
    int8_t *xq;     // (cols_p) xr quantized per tile: xr ≈ xq · sx[j]
    float *sx;      // (cols_p / T)
    int32_t *s8;    // (cols_p / 8) sum of xq over each 8-vector
    int32_t *zt;    // (cols_p / T) −off·m·Σ xq over the tile (the stored offset's share; off 8 or 128)
    int32_t *zl;    // (cols_p / T, 8) zt split over the 8 lanes of the SIMD paths (lane l holds
                    // coordinates 4l..4l+3 and 32+4l..32+4l+3 of every chunk), so no lane
                    // carries a large offset that cancels only after float conversion
    int32_t *zw;    // (cols_p / T, 16) zt split over the 16 int32 lanes of the 512-bit decode path
                    // (lane l < 8: coordinates 4l..4l+3 and 32+4l..; lane 8 + l: 64+4l.. and
                    // 96+4l.. of every 128), so each lane's integer sum stays exact in float
    float *xs;      // (cols_p / T) Σ xr over the tile (RTN zero points)
    int8_t *xp;     // (cols_p) xq permuted per 128 coordinates for the 512-bit decode path:
                    // [0..31], [64..95], [32..63], [96..127] (so one 64-byte nibble load pairs
                    // with xp[0..63] for its low nibbles and xp[64..127] for its high ones)
} kvq_hqx_act;

/** Bytes of scratch one prepared token needs for tensor w (floats and ints, 64-aligned parts). */
size_t kvq_hqx_act_bytes(const kvq_hqx *w);
/** Carves a kvq_hqx_act out of buf (kvq_hqx_act_bytes(w) bytes, 64-byte aligned). */
void kvq_hqx_act_init(const kvq_hqx *w, void *buf, kvq_hqx_act *a);
/** Rotates and quantizes x (w->cols floats) into a. */
void kvq_hqx_prep(const kvq_hqx *w, const float *x, kvq_hqx_act *a);

/** The same for tile columns [j0, j1) only (callers split a preparation over threads).
 *  isa: KVQ_HQX_ISA_REF forces the scalar quantizer, AUTO takes AVX-512 where the CPU has it;
 *  both give identical bytes (tests/test_hqx.c). */
void kvq_hqx_prep_tiles(const kvq_hqx *w, const float *x, kvq_hqx_act *a, int64_t j0, int64_t j1, kvq_hqx_isa isa);

/** Which path AUTO resolves to on this CPU. */
kvq_hqx_isa kvq_hqx_isa_best(void);
/** The path of the one-token int8 product (decode) where AUTO or the CPU runtime asks for it:
 *  kvq_hqx_isa_best, except on Intel CPUs with AVX-512 VNNI, where the AVX2 body is taken —
 *  measured 2.3x faster than the 512-bit VNNI body there at 2048 columns (docs/EXECUTION.md,
 *  eighth increment), while on AMD's Zen 4 the VNNI body is the faster. Decided by cpuid, not
 *  by timing, so one machine always computes the same bits. kvq_hqx_set_one_token(isa)
 *  overrides it (AVX2 or VNNI where the CPU has them; AUTO: back to the rule). */
kvq_hqx_isa kvq_hqx_isa_one_token(void);
void kvq_hqx_set_one_token(kvq_hqx_isa isa);
/** The AVX2 one-token product has a body for tiles of 128 (the default tile) beside the
 *  generic one; both give the same bits. on = 0 / 1 selects the generic / tile-128 body for
 *  tiles of 128 (for tests and side-by-side benchmarks; default 1), on < 0 only asks.
 *  @return the previous setting. Not thread-safe: set it before running products. */
int kvq_hqx_avx2_t128(int on);
const char *kvq_hqx_isa_name(kvq_hqx_isa isa);

/** Y (n_tok, rows) with row stride ldy = prepared activations act[0..n_tok) times Wᵀ.
 *  Reference: isa = KVQ_HQX_ISA_REF (plain scalar loops). OpenMP over rows
 *  (n_threads <= 0: default). Int8 mode: every path returns the same integer tile sums,
 *  so results differ only by float summation order. */
void kvq_hqx_matmul(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, float *y, int64_t ldy,
                    kvq_hqx_mode mode, kvq_hqx_isa isa, int n_threads);

/** The same for rows [r0, r1) on the calling thread (r0 a multiple of 4 for the 4-row
 *  decode path); callers that schedule their own threads split the rows with it. */
void kvq_hqx_matmul_rows(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, float *y, int64_t ldy,
                         kvq_hqx_mode mode, kvq_hqx_isa isa, int64_t r0, int64_t r1);

/** Row r of W as w->cols floats, bit-identical to the reference decoder's (an embedding
 *  lookup from a packed table). */
void kvq_hqx_row_f32(const kvq_hqx *w, int64_t r, float *out);

/** Batched path for prefill: rows decoded in blocks of KVQ_HQX_DENSE_BLOCK (bit-identical to
 *  the reference decoder) and multiplied by the dense fp32 kernel, so results equal the
 *  decoded model's. x is (n_tok, cols), y (n_tok, ·) with row stride ldy; scratch holds
 *  kvq_hqx_dense_scratch(w, n_tok) floats. */
#define KVQ_HQX_DENSE_BLOCK 128
size_t kvq_hqx_dense_scratch(const kvq_hqx *w, int n_tok);
void kvq_hqx_matmul_dense(const kvq_hqx *w, const float *x, int n_tok, float *y, int64_t ldy, float *scratch,
                          int n_threads);

/** Batched int8 products with tokens in the vector lanes (kernels/cpu/hqx_gemm.c, AVX-512
 *  VNNI or AVX2): the int8 mode's integer tile sums of many tokens at once, each output equal
 *  to the reference int8 path's (KVQ_HQX_ISA_REF) bit for bit. Usable when kvq_hqx_gemm_ok(w)
 *  (HyperQuant widths 4..7 whose codes m·u + cb fit a byte, no zero points; a VNNI CPU, or an
 *  AVX2 one where m·u + cb ≤ 129, i.e. all but E8 at width 7).
 *  kvq_hqx_gemm_pack lays the prepared activations of n_tok tokens into scratch
 *  (kvq_hqx_gemm_scratch bytes); kvq_hqx_gemm_rows then computes rows [r0, r1) (a multiple of
 *  4 for r0) on the calling thread with thread_buf of kvq_hqx_gemm_thread_bytes. */
int kvq_hqx_gemm_ok(const kvq_hqx *w);
size_t kvq_hqx_gemm_scratch(const kvq_hqx *w, int n_tok);
size_t kvq_hqx_gemm_thread_bytes(const kvq_hqx *w, int n_tok);
void kvq_hqx_gemm_pack(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, void *scratch);
void kvq_hqx_gemm_rows(const kvq_hqx *w, const kvq_hqx_act *act, int n_tok, void *scratch, float *y, int64_t ldy,
                       int64_t r0, int64_t r1, void *thread_buf);
/** Bytes held by the layout's arrays (what a loaded model keeps for this tensor). */
size_t kvq_hqx_bytes(const kvq_hqx *w);
/** The compact form a CPU run holds (kernels/hq_layout.h): the per-row escape index becomes a
 *  bit per row plus each escape's row, and the scale table keeps only the entries used (codes
 *  rebased). Same products, bit for bit. Not for a layout a device will upload (the CUDA upload
 *  reads esc_row and a 256-entry table). @return 0, or -1 when out of memory (w then still
 *  usable, in either form). */
int kvq_hqx_compact(kvq_hqx *w);
/** Escapes the layout holds, and the bytes of its per-row escape index (esc_row, or the compact
 *  bit per row and escape rows). */
int64_t kvq_hqx_esc_count(const kvq_hqx *w);
size_t kvq_hqx_esc_row_bytes(const kvq_hqx *w);
/** Zeroed, 64-byte aligned memory for a layout's q and hb arrays (4 MiB and more: its own
 *  mapping, 2 MiB-aligned, advised for huge pages); release with kvq_hqx_dealloc. */
void *kvq_hqx_alloc(size_t bytes);
void kvq_hqx_dealloc(void *p);
/** Frees the arrays (q and hb from kvq_hqx_alloc, the others malloc'd by the packer); NULL
 *  members are fine. */
void kvq_hqx_free(kvq_hqx *w);

#endif
