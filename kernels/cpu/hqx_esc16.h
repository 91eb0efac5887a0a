// The GPU's escapes in 16 bits (issue 12): the packer's per-row escape list (kernels/hq_layout.h:
// esc_row, entries col | delta << 20 in 32 bits) rewritten once at upload (kvq_cuda_hqx_upload)
// as 16-bit entries and per-row segment starts. At width 4 (E8 4.0: ~2 % of the values escape)
// the 32-bit entries are ~0.64 of ~4.8 bits a weight on the device. The CPU layout and the
// file format do not change. Plain C that also compiles as CUDA: the upload, the kernels'
// accessor (kvq_hqx_esc16_get) and the host tests share every line of it.
#ifndef KVQ_KERNELS_HQX_ESC16_H
#define KVQ_KERNELS_HQX_ESC16_H

#include <stddef.h>
#include <stdint.h>

#include "formats/error.h"
#include "kernels/hq_layout.h"

// Layout (n escapes in the packer's order; a row's segments are its 4096-column spans,
// S = ceil(cols_p / 4096) of them):
//   esc_row[rows + 1]  as packed (row r's escapes are entries esc_row[r] .. esc_row[r + 1]).
//   e16[n]             bits 0..11: col & 4095; bits 12..15: dcode, 4-bit two's complement.
//                      delta = dcode for dcode in [-8, -1] and [1, 7]. dcode 0 (a delta no
//                      escape has: v ≠ clamp(v)) marks a delta outside that range, or an entry
//                      whose delta is 0: its 32-bit entry is in big.
//   seg[rows · (S−1)]  seg[r·(S−1) + s − 1] (s = 1..S−1): the index of row r's first entry with
//                      col ≥ 4096·s (the row's end when none), so entry e of row r has
//                      col = 4096·#{s ≥ 1 : seg[r·(S−1) + s − 1] ≤ e} + (e16[e] & 4095).
//   big[2·n_big]       (entry index, the packer's 32-bit entry) pairs ascending by index, found
//                      by a binary search: the rare path, so no per-row words for it (E8 4.0 at
//                      width 4: 0.033 % of the escapes of Gaussian 4096×14336, about one row in
//                      ten; 0.55–0.64 % on test_cuda_hqx's heavy-tailed matrices).
// Exact by construction: kvq_hqx_esc16_get returns the packer's 32-bit entry for every index,
// so the products read the same columns and deltas in the same order (the same bits).
// A tensor keeps the 32-bit form (kvq_hqx_esc16_build sets used = 0; both forms stay readable
// on the GPU) when it has no escapes, is in the CPU's compacted form (esc_row NULL), has more
// than KVQ_HQX_ESC16_MAX_SEG segments a row (cols_p > 32768) or rows · (S − 1) ≥ 2^32, a row's
// entries are not in ascending segment order (its segments would not be contiguous), an
// entry's column is beyond the last segment (≥ 4096·S; the packer's are below cols_p), more
// than one entry in KVQ_HQX_ESC16_BIG_DIV needs big (the searches would be common: about one
// a round of 32 entries at 1/32), or the 16-bit form would not be smaller.
#define KVQ_HQX_ESC16_SEG_BITS 12
#define KVQ_HQX_ESC16_SEG (1 << KVQ_HQX_ESC16_SEG_BITS) // columns a segment
// The accessor reads a row's segment starts in a loop unrolled to MAX_SEG − 1 predicated loads: a
// loop of s1 trips put 24..88 bytes of spills into the one-token kernels at their register caps
// (ptxas, session 20); 8 segments take Llama-3-70B's 28672-column rows.
#define KVQ_HQX_ESC16_MAX_SEG 8                        // cols_p ≤ 32768
#define KVQ_HQX_ESC16_BIG_DIV 64

typedef struct {
    int used;           // 1: the arrays below hold the tensor's escapes; 0: keep the 32-bit form
    int s1;             // segments a row − 1 (S − 1)
    int64_t rows, n;    // rows, escapes
    int64_t n_big;
    uint16_t *e16;      // n entries
    uint32_t *seg;      // rows · s1 starts, or NULL (s1 = 0)
    uint32_t *big;      // 2 · n_big, or NULL
} kvq_hqx_esc16;

#ifdef __cplusplus
extern "C" {
#endif

/** Builds the 16-bit form of w's escapes into *out (zeroed first). @return KVQ_OK with
 *  out->used = 1 (the caller owns the arrays: kvq_hqx_esc16_free) or 0 (nothing allocated: the
 *  tensor keeps its 32-bit form, the reasons above); KVQ_ERR_NOMEM. w is not changed. */
kvq_status kvq_hqx_esc16_build(const kvq_hqx *w, kvq_hqx_esc16 *out, kvq_err *err);
void kvq_hqx_esc16_free(kvq_hqx_esc16 *x); // NULL and unused forms are no-ops
/** Bytes of w's escape arrays on the device: esc_row and the 32-bit entries (x NULL or unused),
 *  or esc_row, e16, seg and big. */
size_t kvq_hqx_esc_dev_bytes(const kvq_hqx *w, const kvq_hqx_esc16 *x);
/** Bytes kvq_cuda_hqx_upload holds on the device for w's arrays (q, planes, coset bytes, scale
 *  codes and table or scales, zero points, escapes as kvq_hqx_esc_dev_bytes): what
 *  kvq_cuda_hqx_bytes reports (tests/test_cuda_hqx.c checks that they agree). */
size_t kvq_hqx_gpu_bytes(const kvq_hqx *w, const kvq_hqx_esc16 *x);

#ifdef __cplusplus
}
#endif

// Loads on the device through the read-only cache, as the kernels' other escape loads. The big
// entries' search is out of line on the device (KVQ_HQX_ESC16_COLD): the rare path, kept out of
// the row end's registers.
#ifdef __CUDA_ARCH__
#define KVQ_HQX_ESC16_LD(p) __ldg(p)
#else
#define KVQ_HQX_ESC16_LD(p) (*(p))
#endif
#ifdef __CUDACC__
#define KVQ_HQX_ESC16_COLD static __host__ __device__ __noinline__
#else
#define KVQ_HQX_ESC16_COLD static inline
#endif

/** The 16-bit entry of a (col, delta) with col's segment known: 0 (dcode 0) when the delta
 *  needs big. */
KVQ_HQ_HD static inline uint16_t kvq_hqx_esc16_pack(uint32_t col, int32_t delta) {
    if (delta < -8 || delta > 7 || delta == 0) return (uint16_t)(col & (KVQ_HQX_ESC16_SEG - 1));
    return (uint16_t)((col & (KVQ_HQX_ESC16_SEG - 1)) | (((uint32_t)delta & 15u) << KVQ_HQX_ESC16_SEG_BITS));
}
/** The delta of 16-bit entry v: dcode sign-extended, 0 when the entry is big. */
KVQ_HQ_HD static inline int32_t kvq_hqx_esc16_dcode(uint32_t v) { return (int32_t)(v << 16) >> (16 + KVQ_HQX_ESC16_SEG_BITS); }
/** The column of 16-bit entry v in segment hi. */
KVQ_HQ_HD static inline uint32_t kvq_hqx_esc16_col(uint32_t v, uint32_t hi) {
    return (hi << KVQ_HQX_ESC16_SEG_BITS) | (v & (KVQ_HQX_ESC16_SEG - 1));
}
/** The packer's 32-bit entry of 16-bit entry v in segment hi, or 0 when v's dcode is 0 (big). */
KVQ_HQ_HD static inline uint32_t kvq_hqx_esc16_wide(uint32_t v, uint32_t hi) {
    const int32_t d = kvq_hqx_esc16_dcode(v);
    return d ? kvq_hqx_esc_pack(kvq_hqx_esc16_col(v, hi), d) : 0u;
}
/** The index of the first big pair whose entry index is not below e (n_big when none; the GPU's
 *  one-token kernel finds a row's first big pair with it, then counts: hqx_gemv1.cu). */
KVQ_HQX_ESC16_COLD uint32_t kvq_hqx_esc16_lower(const uint32_t *big, uint32_t n_big, uint32_t e) {
    uint32_t lo = 0, hi = n_big;
    while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (KVQ_HQX_ESC16_LD(big + 2 * mid) < e) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
/** The 32-bit entry of big entry e: the first pair whose index is not below e (exact arrays
 *  hold e itself; n_big ≥ 1, since e16[e] says e is big). */
KVQ_HQX_ESC16_COLD uint32_t kvq_hqx_esc16_big(const uint32_t *big, uint32_t n_big, uint32_t e) {
    return KVQ_HQX_ESC16_LD(big + 2 * kvq_hqx_esc16_lower(big, n_big, e) + 1);
}
/** The segment of entry e of row `row` (its columns' high bits: col = 4096·hi + (e16[e] & 4095)). */
KVQ_HQ_HD static inline uint32_t kvq_hqx_esc16_hi(const uint32_t *seg, int s1, int64_t row, uint32_t e) {
    const uint32_t r0 = (uint32_t)row * (uint32_t)s1; // rows · s1 < 2^32 (kvq_hqx_esc16_build)
    uint32_t hi = 0;
    // s1 is the tensor's (uniform across a warp): a row of one segment (every cols_p ≤ 4096) skips the
    // loop, and a wider one stops at its own count — not 7 predicated loads and compares an escape
    // (session 21: KVQ_CUDA_ESC16=2, one-segment tensors only, still decoded the 8B 0.87× as fast)
    if (s1 > 0) {
#ifdef __CUDACC__
#pragma unroll
#endif
        for (int k = 0; k < KVQ_HQX_ESC16_MAX_SEG - 1; k++) {
            if (k >= s1) break;
            hi += e >= KVQ_HQX_ESC16_LD(seg + r0 + k);
        }
    }
    return hi;
}
/** kvq_hqx_esc16_get after its load: v the 16-bit entry e16[e]. Apart so that a reader can issue a
 *  batch's loads before the first decode — the rare big path is a call, and the compiler moves no
 *  later load above it (session 21 call E: the one-segment 14336×4096 product stalled on each
 *  entry's load in turn, 7.8 + 6.5 + 2.8 % of its samples in three such chains). */
KVQ_HQ_HD static inline uint32_t kvq_hqx_esc16_dec(uint32_t v, const uint32_t *seg, int s1, const uint32_t *big,
                                                   uint32_t n_big, int64_t row, uint32_t e) {
    const uint32_t w = kvq_hqx_esc16_wide(v, kvq_hqx_esc16_hi(seg, s1, row, e));
    return w ? w : kvq_hqx_esc16_big(big, n_big, e);
}
/** Escape e of row `row` as the packer's 32-bit entry (col | delta << 20), from the 16-bit form
 *  (s1, n_big: kvq_hqx_esc16's): the accessor every GPU reader of escapes uses (hqx_dev.cuh's
 *  kvq_hqx_esc_at) but the one-token kernel's batches (hqx_gemv1.cu), which decode (col, delta)
 *  straight from the entry and count the big ones. */
KVQ_HQ_HD static inline uint32_t kvq_hqx_esc16_get(const uint16_t *e16, const uint32_t *seg, int s1, const uint32_t *big,
                                                   uint32_t n_big, int64_t row, uint32_t e) {
    return kvq_hqx_esc16_dec(KVQ_HQX_ESC16_LD(e16 + e), seg, s1, big, n_big, row, e);
}

#endif
